//! Stage D end to end: `switchyard up` with an `auth = "oauth"` server (the
//! protected `http_stub.py` and the mock authorization server
//! `oauth_as.py`, real HTTP and PKCE), authorized from the CLI as an admin
//! would, then used by sessions through real sidecars:
//!
//! - before authorization the sidecar sends the server nothing, and `up`
//!   made its own token-encryption key (mode 0600);
//! - `switchyard servers authorize` prints the URL, waits for the browser's
//!   round trip and prints the new status;
//! - calls carry the pushed access token; tokens refresh and rotate while
//!   calls go on, and the sidecars get each new one;
//! - a 403 `insufficient_scope` fails that call at once, keeps the others
//!   working, and the next authorization asks for the union of scopes;
//! - a revoked grant turns the server to `needs_reauthorization`, and calls
//!   fail at once with a message a model can relay;
//! - no access token, refresh token or client secret appears in any log
//!   line, metric, audit record, CLI output or API answer of the run;
//! - the server's URL carries a secret query value (`api_key`), which is
//!   sealed in the store and shown nowhere, and the authorization (bound
//!   to the URL opened) works through it.

use crate::common::oauth::*;
use crate::common::*;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::Duration;
use switchyard_proto::v1 as pb;
use switchyard_test_support::bearer_digest;
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

async fn oauth_state(gw: &Gateway) -> pb::OAuthStatus {
    gw.admin()
        .await
        .get_server_status(pb::GetServerStatusRequest {
            name: "stub".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .oauth
        .unwrap()
}

/// Which bearer token the stub saw on its last request: the SHA-256 (hex)
/// of its `Authorization` (its `last_headers` tool, through the gateway).
/// The header itself comes back scrubbed: the sidecar takes the tokens it
/// sends out of what the server answers.
async fn bearer_seen(gw: &Gateway) -> String {
    let resp = gw
        .engine()
        .await
        .call_tool(call_request("stub__last_headers", "{}", ""))
        .await
        .expect("last_headers")
        .into_inner();
    let text: Value = serde_json::from_str(&resp.text).unwrap_or_else(|_| {
        let r: Value = serde_json::from_str(&resp.result_json).unwrap();
        serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap()
    });
    assert_eq!(
        text["current"]["authorization"], "Bearer [redacted]",
        "the engine gets the token the server echoes: {text}"
    );
    text["current"]["authorization-sha256"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_admin_authorizes_an_oauth_server_from_the_cli_and_no_token_leaks() {
    let _heavy = HEAVY.lock().await;
    switchyard_common::tls::install_crypto_provider();
    let as_ = start_as(&[("OAUTH_AS_TOKEN_TTL", "4")]).await;
    let issuer = as_.url.trim_end_matches('/').to_owned();
    let stub = start_protected(&issuer).await;
    let url_key = format!("urlkey-{}", switchyard_common::ids::new_id());
    let servers = format!(
        "[[servers]]\nname = \"stub\"\ntransport = \"http\"\nurl = {}\nauth = \"oauth\"\n",
        toml_str(format!("{}?api_key={url_key}", stub.url))
    );
    let http = start_http_reference_server().await;
    let gw = Gateway::start_with(StoreKind::Embedded, 10, http, &servers, "", &[], &[]).await;
    let mut outputs = String::new();

    // Not authorized: the sidecar waits and says why; the server got
    // nothing from it.
    let st = oauth_state(&gw).await;
    assert_eq!(st.state, "needs_authorization");
    let key = gw.dir.path().join("store/token-encryption.key");
    let mode = std::fs::metadata(&key)
        .expect("up made a key")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "{key:?}");
    let why = eventually("the sidecar says why it waits", LIMIT, || async {
        let s = gw
            .admin()
            .await
            .get_server_status(pb::GetServerStatusRequest {
                name: "stub".into(),
            })
            .await
            .unwrap()
            .into_inner();
        s.sidecars
            .iter()
            .find(|c| c.last_error.contains("switchyard servers authorize stub"))
            .map(|c| c.last_error.clone())
            .ok_or(format!("{:?}", s.sidecars))
    })
    .await;
    assert!(why.contains("needs authorization"), "{why}");
    let stats = get_json(&format!("{issuer}/_stats")).await;
    assert_eq!(stats["registrations"], 0, "{stats}");
    let e = gw
        .engine()
        .await
        .call_tool(call_request("stub__echo", r#"{"message":"early"}"#, ""))
        .await
        .expect_err("no tools before the authorization");
    assert!(
        e.message()
            .contains("needs authorization by an admin: switchyard servers authorize stub"),
        "{}",
        e.message()
    );

    // The CLI: prints the URL, waits for the browser, prints the status.
    let mut cli = Command::new(switchyard_bin());
    cli.args(["--endpoint", &gw.endpoint, "servers", "authorize", "stub"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cli.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut url = String::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        outputs.push_str(&line);
        outputs.push('\n');
        if line.starts_with("http://") {
            url = line;
            break;
        }
    }
    assert!(
        url.starts_with(&format!("{issuer}/authorize?")),
        "{outputs}"
    );
    let (code, page) = browse(&url).await;
    assert_eq!(code, 200, "{page}");
    while let Some(line) = lines.next_line().await.unwrap() {
        outputs.push_str(&line);
        outputs.push('\n');
    }
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{outputs}");
    assert!(outputs.contains("stub: authorized"), "{outputs}");
    assert!(outputs.contains("server stub is up"), "{outputs}");

    // The sidecar got the token and connected.
    gw.wait_servers_up(&["stub"], LIMIT).await;
    let resp = gw
        .engine()
        .await
        .call_tool(call_request("stub__echo", r#"{"message":"hi"}"#, ""))
        .await
        .expect("a call with the pushed token")
        .into_inner();
    assert!(!resp.is_error, "{}", resp.result_json);
    let first = bearer_seen(&gw).await;
    assert!(!first.is_empty());

    // Tokens of 4 s refresh at 3.2 s; calls go on with each new one.
    let rotated = eventually("a refreshed token in use", LIMIT, || async {
        let now = bearer_seen(&gw).await;
        (now != first && !now.is_empty())
            .then_some(now)
            .ok_or("same token".to_owned())
    })
    .await;
    assert_ne!(rotated, first);
    let st = oauth_state(&gw).await;
    assert!(st.generation >= 2, "{st:?}");
    let stats = get_json(&format!("{issuer}/_stats")).await;
    assert_eq!(stats["reuse_detected"], 0, "{stats}");
    assert_eq!(stats["invalid_grant"], 0, "{stats}");

    // Step-up: `write_echo` needs `mcp:write`, which was not granted. The
    // call fails at once saying so; the server stays authorized for the
    // rest; the next authorization asks for the union.
    let r = gw
        .engine()
        .await
        .call_tool(call_request("stub__write_echo", r#"{"message":"w"}"#, ""))
        .await;
    let text = match r {
        Ok(resp) => format!("{} {}", resp.get_ref().text, resp.get_ref().result_json),
        Err(e) => e.message().to_owned(),
    };
    assert!(text.contains("needs more scopes"), "{text}");
    assert!(text.contains("switchyard servers authorize stub"), "{text}");
    let st = eventually("the step-up is recorded", LIMIT, || async {
        let st = oauth_state(&gw).await;
        (!st.step_up_scopes.is_empty())
            .then(|| st.clone())
            .ok_or(format!("{st:?}"))
    })
    .await;
    assert_eq!(st.state, "authorized", "{st:?}");
    assert!(st.step_up_scopes.iter().any(|s| s == "mcp:write"), "{st:?}");
    assert!(st.step_up_scopes.iter().any(|s| s == "mcp:read"), "{st:?}");
    let resp = gw
        .engine()
        .await
        .call_tool(call_request("stub__echo", r#"{"message":"still"}"#, ""))
        .await
        .expect("the other tools still work")
        .into_inner();
    assert!(!resp.is_error, "{}", resp.result_json);
    let out = ok_stdout(
        &gw.cli(&["servers", "authorize", "stub", "--no-wait"]).await,
        "authorize --no-wait",
    );
    outputs.push_str(&out);
    let url = out
        .lines()
        .find(|l| l.starts_with("http://"))
        .expect("a URL")
        .to_owned();
    let scope = url::Url::parse(&url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == "scope")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    assert!(scope.split(' ').any(|s| s == "mcp:write"), "{scope}");
    assert!(scope.split(' ').any(|s| s == "mcp:read"), "{scope}");
    let (code, page) = browse(&url).await;
    assert_eq!(code, 200, "{page}");
    let resp = eventually("write_echo with the wider grant", LIMIT, || async {
        let r = gw
            .engine()
            .await
            .call_tool(call_request("stub__write_echo", r#"{"message":"w"}"#, ""))
            .await
            .map_err(|e| e.message().to_owned())?
            .into_inner();
        (!r.is_error).then_some(r.clone()).ok_or(r.result_json)
    })
    .await;
    assert!(resp.result_json.contains('w'));
    assert!(oauth_state(&gw).await.step_up_scopes.is_empty());

    // Revoked: the refresh is refused, the server needs an admin, and calls
    // fail at once saying so.
    let r = reqwest::Client::new()
        .post(format!("{issuer}/_control"))
        .json(&json!({"revoke_all": true}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    eventually("needs re-authorization", LIMIT, || async {
        let st = oauth_state(&gw).await;
        (st.state == "needs_reauthorization")
            .then_some(())
            .ok_or(format!("{st:?}"))
    })
    .await;
    let message = eventually("calls fail at once", LIMIT, || async {
        let started = std::time::Instant::now();
        let r = gw
            .engine()
            .await
            .call_tool(call_request("stub__echo", r#"{"message":"x"}"#, ""))
            .await;
        let text = match r {
            Ok(resp) => format!("{} {}", resp.get_ref().text, resp.get_ref().result_json),
            Err(e) => e.message().to_owned(),
        };
        (text.contains("re-authorization") && started.elapsed() < Duration::from_secs(5))
            .then_some(text.clone())
            .ok_or(text)
    })
    .await;
    assert!(
        message.contains("switchyard servers authorize stub"),
        "{message}"
    );

    // Nothing secret anywhere: every token and client secret the
    // authorization server issued, searched in every output of the run.
    let listed = ok_stdout(&gw.cli(&["servers", "list", "--json"]).await, "list");
    let shown = ok_stdout(
        &gw.cli(&["servers", "status", "stub", "--json"]).await,
        "status",
    );
    let shown_json: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(
        shown_json["oauth"]["state"], "needs_reauthorization",
        "{shown}"
    );
    let (_, metrics) = http_get(&gw.http_addr, "/metrics").await;
    assert!(
        metrics.contains(
            "switchyard_control_plane_oauth_refreshes_total{outcome=\"ok\",server=\"stub\"}"
        ),
        "{metrics}"
    );
    let api = format!(
        "{:?}",
        gw.admin()
            .await
            .list_servers(pb::ListServersRequest {})
            .await
            .unwrap()
            .into_inner()
    );
    let store_files: String = walk(gw.dir.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect();
    let issued = get_json(&format!("{issuer}/_tokens")).await;
    let secrets: Vec<String> = ["access", "refresh", "client_secrets"]
        .iter()
        .flat_map(|k| issued[k].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    assert!(secrets.len() >= 4, "{issued}");
    // The digests the server reported are of tokens the server issued:
    // the first and the refreshed one reached it.
    let access: Vec<&str> = issued["access"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for seen in [&first, &rotated] {
        assert!(
            access.iter().any(|t| bearer_digest(t) == **seen),
            "the server got a token the authorization server did not issue"
        );
    }
    let log = gw.log();
    assert!(
        log.contains("oauth.authorized"),
        "the audit records are in up's log"
    );
    let outputs_of_the_run = [
        ("up's and the sidecars' log (with the audit)", &log),
        ("the CLI", &outputs),
        ("servers list", &listed),
        ("servers status", &shown),
        ("metrics", &metrics),
        ("the admin API", &api),
    ];
    for s in &secrets {
        for (what, text) in outputs_of_the_run
            .iter()
            .chain([&("config files", &store_files)])
        {
            assert!(!text.contains(s.as_str()), "a token or secret is in {what}");
        }
    }
    // The URL's key: only in the sidecars' files, never in the store.
    assert!(!gw.store_holds(&url_key), "the URL key is in the store");
    for (what, text) in &outputs_of_the_run {
        assert!(!text.contains(&url_key), "the URL key is in {what}");
    }
    assert!(
        store_files.contains(&url_key),
        "the sidecars' files have the URL opened"
    );
    drop((stub, as_));
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
