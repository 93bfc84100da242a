//! Stage D, `auth = "headers"`: an HTTP server that needs a bearer token
//! gets it from a `header_files` entry (a secret file read by its
//! sidecar), and the secret shows nowhere: not in the admin API's
//! answers, the CLI, `up`'s and the sidecars' logs, the metrics, or the
//! sidecar's generated config file (mode 0600, the path only). Plain
//! `headers` with secret-looking names are answered `[redacted]`, and are
//! sealed in the store (opened for the sidecar's file only), as is the
//! URL's `api_key` query value.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use switchyard_proto::v1 as pb;
use switchyard_test_support::{start_http_server, stub_script};
use tokio::process::Command;

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_header_file_reaches_the_server_and_is_never_shown() {
    let _heavy = HEAVY.lock().await;
    let secrets = tempfile::tempdir().unwrap();
    let token = format!("s3cr3t-{}", switchyard_common::ids::new_id());
    let plain_key = format!("plain-{}", switchyard_common::ids::new_id());
    let url_key = format!("urlkey-{}", switchyard_common::ids::new_id());
    let file = secrets.path().join("stub-token");
    // As a Kubernetes Secret or an operator writes it: a trailing newline.
    std::fs::write(&file, format!("Bearer {token}\n")).unwrap();
    // The stub answers 401 to any request without exactly this header.
    let mut cmd = Command::new("python3");
    cmd.arg(stub_script("http_stub.py"))
        .env("STUB_HTTP_BEARER", &token)
        .env("STUB_HTTP_QUERY_KEY", &url_key);
    let stub = start_http_server(cmd, "/mcp").await;
    let servers = format!(
        "[[servers]]\nname = \"stub\"\ntransport = \"http\"\nurl = {}\nauth = \"headers\"\n\
         [servers.headers]\nX-Team = \"blue\"\nX-Api-Key = {}\n\
         [servers.header_files]\nAuthorization = {}\n",
        toml_str(format!("{}?api_key={url_key}&team=blue", stub.url)),
        toml_str(&plain_key),
        toml_str(file.to_string_lossy()),
    );
    let http = start_http_reference_server().await;
    let gw = Gateway::start_with(StoreKind::Embedded, 10, http, &servers, "", &[], &["stub"]).await;

    // Up means the stub took our bearer and URL key: it refuses
    // everything else.
    let mut engine = gw.engine().await;
    let resp = engine
        .call_tool(call_request("stub__echo", r#"{"message":"hi"}"#, ""))
        .await
        .expect("a call to the server that needs the bearer")
        .into_inner();
    assert!(!resp.is_error, "{}", resp.result_json);

    // The admin API shows the kind, the path and the plain values, and
    // neither secret.
    let list = gw
        .admin()
        .await
        .list_servers(pb::ListServersRequest {})
        .await
        .unwrap()
        .into_inner();
    let spec = list
        .servers
        .iter()
        .filter_map(|s| s.spec.as_ref())
        .find(|s| s.name == "stub")
        .expect("stub listed");
    assert_eq!(spec.auth, "headers");
    assert_eq!(
        spec.header_files.get("Authorization").map(String::as_str),
        Some(file.to_str().unwrap())
    );
    assert_eq!(spec.headers.get("X-Team").map(String::as_str), Some("blue"));
    assert!(
        spec.url.ends_with("/mcp?api_key=[redacted]&team=blue"),
        "{}",
        spec.url
    );
    assert_eq!(
        spec.headers.get("X-Api-Key").map(String::as_str),
        Some("[redacted]")
    );
    // Nowhere to be seen.
    let cli_list = ok_stdout(
        &gw.cli(&["servers", "list", "--json"]).await,
        "servers list",
    );
    let cli_status = ok_stdout(
        &gw.cli(&["servers", "status", "stub", "--json"]).await,
        "servers status",
    );
    let (_, metrics) = http_get(&gw.http_addr, "/metrics").await;
    let sidecar = gw.sidecars_of("stub");
    assert_eq!(sidecar.len(), 1, "one sidecar for stub");
    let generated = sidecar_config_file(sidecar[0], "stub")
        .unwrap_or_else(|| panic!("the sidecar's config file in {:?}", cmdline(sidecar[0])));
    let mode = std::fs::metadata(&generated).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{generated}");
    let generated_text = std::fs::read_to_string(&generated).unwrap();
    assert!(generated_text.contains("header_files"), "{generated_text}");
    // The sidecar is given the inline secret-looking value (it sends it),
    // opened from the store, where it is sealed: the store file does not
    // hold it.
    assert!(generated_text.contains(&plain_key), "{generated_text}");
    assert!(generated_text.contains(&url_key), "{generated_text}");
    for (what, secret) in [("header", &plain_key), ("URL", &url_key)] {
        assert!(
            !gw.store_holds(secret),
            "the store holds the inline secret {what} value in plain text"
        );
    }
    assert!(gw.store_holds("\"sy1."), "the store holds sealed values");
    // Owner-only, as the sidecar's file.
    let store = gw.dir.path().join("store/store.redb");
    let mode = std::fs::metadata(&store).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{store:?}");
    let places = [
        ("ListServers", format!("{list:?}")),
        ("servers list --json", cli_list),
        ("servers status", cli_status),
        ("metrics", metrics),
        ("the sidecar's config file", generated_text),
        ("up's and the sidecars' logs", gw.log()),
    ];
    for (place, text) in &places {
        assert!(!text.contains(&token), "the secret header value in {place}");
    }
    for (place, text) in places[..4].iter().chain(&places[5..]) {
        for secret in [&plain_key, &url_key] {
            assert!(
                !text.contains(secret),
                "a secret-looking plain value in {place}"
            );
        }
    }
    gw.stop().await;
}

/// A `header_files` entry that cannot be read: `up` refuses the file
/// before anything starts (its sidecars would run here), naming the key
/// and the file; a server added at runtime with one never gets a sidecar
/// that sends a request without it (the sidecar stops, naming the key and
/// the file, never the content; `servers add` and `servers status` say
/// so, from `up`, until the file is there and the server connects), and a
/// relative path is refused by the admin API.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_secret_file_is_named_and_the_server_stays_down() {
    let _heavy = HEAVY.lock().await;
    let secrets = tempfile::tempdir().unwrap();
    let missing = secrets.path().join("no-such-token");
    let mut cmd = Command::new("python3");
    cmd.arg(stub_script("http_stub.py"));
    let stub = start_http_server(cmd, "/mcp").await;

    // `up` with such a file: exit 64 at once.
    let config = secrets.path().join("switchyard.toml");
    std::fs::write(
        &config,
        format!(
            "[[servers]]\nname = \"stub\"\ntransport = \"http\"\nurl = {}\n\
             [servers.header_files]\nAuthorization = \"no-such-token\"\n",
            toml_str(&stub.url),
        ),
    )
    .unwrap();
    let out = tokio::time::timeout(
        LIMIT,
        Command::new(switchyard_bin())
            .args(["up", "--config"])
            .arg(&config)
            .output(),
    )
    .await
    .expect("up refuses at once")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    // The relative path is the config file's folder's.
    assert!(
        stderr.contains("servers[0].header_files.Authorization")
            && stderr.contains(missing.to_str().unwrap()),
        "{stderr}"
    );

    // Added at runtime.
    let http = start_http_reference_server().await;
    let servers = quickstart_servers(&http.url);
    let gw = Gateway::start_with(
        StoreKind::Embedded,
        10,
        http,
        &servers,
        "",
        &[],
        &["orders"],
    )
    .await;
    // `servers add --name stub` of the stub, with `extra` flags.
    let add = |extra: &[&str]| {
        let mut args: Vec<String> = ["servers", "add", "--name", "stub", "--transport", "http"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        args.extend(["--url".to_owned(), stub.url.clone()]);
        args.extend(extra.iter().map(|a| a.to_string()));
        let gw = &gw;
        async move {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            gw.cli(&refs).await
        }
    };
    let relative = add(&["--header-file", "Authorization=no-such-token"]).await;
    assert!(!relative.status.success());
    assert!(
        String::from_utf8_lossy(&relative.stderr).contains("must be an absolute path"),
        "{relative:?}"
    );
    let bad_auth = add(&["--auth", "bearer"]).await;
    assert_eq!(bad_auth.status.code(), Some(64), "{bad_auth:?}");
    let added = add(&[
        "--header-file",
        &format!("Authorization={}", missing.display()),
        "--timeout",
        "3",
    ])
    .await;
    // Added, not up (exit 1), and why, from `up`: the sidecar exited, with
    // its last line.
    let said = String::from_utf8_lossy(&added.stderr);
    assert_eq!(added.status.code(), Some(1), "{said}");
    assert!(
        said.contains("error: stub is not up after 3 s: its sidecar exited (exit status: ")
            && said.contains("server.header_files.Authorization"),
        "{said}"
    );
    eventually(
        "the sidecar's error names the key and the file",
        LIMIT,
        || {
            let log = gw.log();
            async move {
                match log.contains("server.header_files.Authorization")
                    && log.contains("no-such-token")
                {
                    true => Ok(()),
                    false => Err(log),
                }
            }
        },
    )
    .await;
    let list = gw
        .admin()
        .await
        .list_servers(pb::ListServersRequest {})
        .await
        .unwrap()
        .into_inner();
    let stub_status = list
        .servers
        .iter()
        .find(|s| s.spec.as_ref().is_some_and(|s| s.name == "stub"))
        .expect("stub listed");
    assert_eq!(stub_status.state, "down");
    assert!(
        stub_status.launch_error.contains("its sidecar exited")
            && stub_status.launch_error.contains("no-such-token"),
        "{stub_status:?}"
    );
    let card = ok_stdout(&gw.cli(&["servers", "status", "stub"]).await, "status");
    assert!(
        card.contains("\nnot running: its sidecar exited (exit status: "),
        "{card}"
    );
    // The file is there: the next sidecar connects, and the status says
    // nothing more.
    std::fs::write(&missing, "Bearer t\n").unwrap();
    gw.wait_servers_up(&["stub"], LIMIT).await;
    let card = ok_stdout(&gw.cli(&["servers", "status", "stub"]).await, "status");
    assert!(!card.contains("not running"), "{card}");
    gw.stop().await;
}
