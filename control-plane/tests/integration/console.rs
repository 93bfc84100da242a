//! The admin console's HTTP surface (`/ui`, docs/console.md) on real
//! processes: two `switchyard-control-plane` replicas on one etcd, with
//! admin, engine and sidecar tokens, driven over HTTP as a browser would
//! (the browser itself drives the page in `tests/console`).
//!
//! Covered: the page and its assets come from the binary with the strict
//! CSP and name no other host; not logged in → 401 saying whether anyone
//! can log in; a wrong token, an engine token and a malformed body are
//! refused; the admin token opens a session whose cookie is HttpOnly,
//! SameSite=Strict, Path=/ui; the other replica accepts the cookie (the
//! session is in the store); a forged cookie → 401; a write without the
//! CSRF token, with a wrong one, or from another origin → 403 and changes
//! nothing; with it, a hint override and a policy go through
//! `AdminService` (the gRPC API sees them) and a refusal carries the
//! service's own message; background filters are checked; logout on one
//! replica ends the session on both; undecodable paths and queries,
//! other methods, unknown paths, bodies over the limit or not objects, and
//! a foreign `Host` get the JSON refusal; failed logins are limited per
//! client address (429) while another address still logs in; every
//! refusal is counted under `service="console"`.

use crate::common::*;
use std::path::Path;
use switchyard_proto::v1 as pb;
use switchyard_test_support::start_etcd;

const REFUSALS: &str = "switchyard_control_plane_auth_refusals_total";

fn token_file(dir: &Path, name: &str, token: &str) -> String {
    let file = dir.join(format!("{name}.token"));
    std::fs::write(&file, format!("{token}\n")).unwrap();
    toml_str(file.to_string_lossy())
}

fn replica_config(dir: &Path, name: &str, etcd: &str) -> std::path::PathBuf {
    let (grpc, http) = (
        switchyard_test_support::free_port(),
        switchyard_test_support::free_port(),
    );
    let text = format!(
        r#"[control_plane]
listen = "127.0.0.1:{grpc}"
http_listen = "127.0.0.1:{http}"

[store]
etcd_endpoints = [{etcd}]

[[auth.tokens]]
name = "ops"
role = "admin"
token_file = {admin}

[[auth.tokens]]
name = "engine-a"
role = "engine"
token_file = {engine}

[[servers]]
{server}
"#,
        etcd = toml_str(etcd),
        admin = token_file(dir, "admin", "admin-token-1"),
        engine = token_file(dir, "engine", "engine-token-1"),
        server = reference_server_toml("orders"),
    );
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, text).unwrap();
    file
}

/// A response's status, headers and JSON body.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: serde_json::Value,
}

async fn send(req: reqwest::RequestBuilder) -> Answer {
    let r = req.send().await.expect("the console answers");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    Answer {
        status,
        headers,
        body,
    }
}

/// The `switchyard_console=...` pair of a login's Set-Cookie.
fn session_cookie(a: &Answer) -> (String, String) {
    let set = a
        .headers
        .get("set-cookie")
        .expect("a Set-Cookie")
        .to_str()
        .unwrap()
        .to_owned();
    let pair = set.split(';').next().unwrap().trim().to_owned();
    (pair, set)
}

#[tokio::test]
async fn console_logins_cookies_and_csrf_across_replicas() {
    switchyard_test_support::init_tracing();
    switchyard_common::tls::install_crypto_provider();
    let etcd = start_etcd().await;
    let dir = tempfile::tempdir().unwrap();
    let a_cfg = replica_config(dir.path(), "a", &etcd.url);
    let b_cfg = replica_config(dir.path(), "b", &etcd.url);
    let (_a, a_grpc, a) = start_control_plane("a", dir.path(), &a_cfg).await;
    let (_b, _, b) = start_control_plane("b", dir.path(), &b_cfg).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = |host: &str, path: &str| format!("http://{host}{path}");

    // The page and its assets, from the binary, under the strict CSP.
    let page = send(http.get(url(&a, "/ui/"))).await;
    assert_eq!(page.status, 200);
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    let html = page.body.as_str().unwrap();
    assert!(
        html.contains("app.js") && !html.contains("<script>"),
        "{html}"
    );
    for asset in ["/ui/", "/ui/app.js", "/ui/app.css"] {
        let a = send(http.get(url(&a, asset))).await;
        assert_eq!(a.status, 200, "{asset}");
        // Nothing is loaded from elsewhere (the page's requests are checked
        // in the browser too): no absolute or protocol-relative source,
        // stylesheet, import, fetch or stream.
        let text = a.body.as_str().unwrap_or_default().replace(' ', "");
        for loader in [
            "src=\"http",
            "src=\"//",
            "href=\"http",
            "href=\"//",
            "@import",
            "url(http",
            "url(//",
            "fetch('http",
            "fetch(\"http",
            "fetch(`http",
            "EventSource('http",
            "EventSource(\"http",
            "from'http",
            "from\"http",
        ] {
            assert!(
                !text.contains(loader),
                "{asset} loads from another host: {loader}"
            );
        }
    }
    assert_eq!(send(http.get(url(&a, "/ui"))).await.status, 308);

    // Not logged in.
    let r = send(http.get(url(&a, "/ui/api/servers"))).await;
    assert_eq!(r.status, 401, "{:?}", r.body);
    assert_eq!(r.body["adminTokens"], true);
    assert_eq!(r.headers["cache-control"], "no-store");

    // Refused logins: a wrong token, an engine token, a malformed body.
    let login =
        |host: &str, body: serde_json::Value| http.post(url(host, "/ui/api/login")).json(&body);
    let r = send(login(&a, serde_json::json!({"token": "admin-token-2"}))).await;
    assert_eq!(r.status, 401, "{:?}", r.body);
    assert!(r.headers.get("set-cookie").is_none());
    let r = send(login(&a, serde_json::json!({"token": "engine-token-1"}))).await;
    assert_eq!(r.status, 403, "{:?}", r.body);
    assert!(
        r.body["error"]
            .as_str()
            .unwrap()
            .contains("needs role admin"),
        "{:?}",
        r.body
    );
    let r = send(login(&a, serde_json::json!({"tok": "admin-token-1"}))).await;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert_eq!(
        scrape(
            &a,
            REFUSALS,
            &[("service", "console"), ("reason", "wrong_role")]
        )
        .await,
        1.0
    );

    // The admin token: a session cookie the page's script cannot read.
    let r = send(login(&a, serde_json::json!({"token": "admin-token-1"}))).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let (cookie, set) = session_cookie(&r);
    for attr in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(set.contains(attr), "{set}");
    }
    assert!(!set.contains("Secure"), "plain http: {set}");
    let csrf = r.body["csrf"].as_str().unwrap().to_owned();
    assert_eq!(r.body["admin"], "ops");

    // The other replica knows the session.
    let r = send(
        http.get(url(&b, "/ui/api/session"))
            .header("cookie", &cookie),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["csrf"], csrf.as_str());
    let r = send(
        http.get(url(&b, "/ui/api/servers"))
            .header("cookie", &cookie),
    )
    .await;
    assert_eq!(r.body["servers"][0]["name"], "orders", "{:?}", r.body);

    // A forged cookie.
    let forged = "switchyard_console=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let r = send(
        http.get(url(&a, "/ui/api/servers"))
            .header("cookie", forged),
    )
    .await;
    assert_eq!(r.status, 401, "{:?}", r.body);

    // Writes: without the CSRF token, with a wrong one, from another
    // origin: refused, and nothing changes.
    let hints = |host: &str| {
        http.post(url(host, "/ui/api/servers/orders/tools/create_order/hints"))
            .header("cookie", &cookie)
            .json(&serde_json::json!({"destructiveHint": false}))
    };
    let r = send(hints(&a)).await;
    assert_eq!(r.status, 403, "{:?}", r.body);
    let r = send(hints(&a).header("x-switchyard-csrf", "nope")).await;
    assert_eq!(r.status, 403, "{:?}", r.body);
    let r = send(
        hints(&a)
            .header("x-switchyard-csrf", &csrf)
            .header("origin", "http://evil.example"),
    )
    .await;
    assert_eq!(r.status, 403, "{:?}", r.body);
    let mut admin = admin(&format!("http://{a_grpc}")).await.unwrap();
    let tool = |admin: &mut switchyard_proto::v1::admin_service_client::AdminServiceClient<_>| {
        let mut admin = admin.clone();
        async move {
            admin
                .list_server_tools(bearer(
                    pb::ListServerToolsRequest {
                        server: "orders".into(),
                    },
                    "admin-token-1",
                ))
                .await
                .unwrap()
                .into_inner()
                .tools
                .into_iter()
                .find(|t| t.upstream_name == "create_order")
        }
    };
    let before = tool(&mut admin).await;
    assert!(
        before
            .as_ref()
            .is_none_or(|t| t.hint_sources.as_ref().unwrap().destructive_hint != "override"),
        "{before:?}"
    );
    assert!(scrape(&a, REFUSALS, &[("service", "console"), ("reason", "csrf")]).await >= 3.0);

    // With it (on the other replica): through AdminService.
    let r = send(hints(&b).header("x-switchyard-csrf", &csrf)).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["hintSources"]["destructiveHint"], "override");
    assert_eq!(r.body["hints"]["destructiveHint"], false);
    // Replica a sees it once its read model has the write (etcd's watch).
    eventually("replica a lists the override", LIMIT, || {
        let mut admin = admin.clone();
        async move {
            match tool(&mut admin).await {
                Some(t) if t.hint_sources.as_ref().unwrap().destructive_hint == "override" => {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    // A refusal carries the service's message.
    let r = send(
        http.post(url(&a, "/ui/api/servers/orders/tools/create_order/policy"))
            .header("cookie", &cookie)
            .header("x-switchyard-csrf", &csrf)
            .json(&serde_json::json!({"policy": "sometimes"})),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.body["error"],
        "policy: \"sometimes\" is not one of default, confirm, disabled"
    );
    // Clearing that one override.
    let r = send(
        http.delete(url(
            &a,
            "/ui/api/servers/orders/tools/create_order/hints?hint=destructiveHint",
        ))
        .header("cookie", &cookie)
        .header("x-switchyard-csrf", &csrf),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_ne!(r.body["hintSources"]["destructiveHint"], "override");
    let r = send(
        http.get(url(&a, "/ui/api/background?status=sleeping"))
            .header("cookie", &cookie),
    )
    .await;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert!(r.body["error"].as_str().unwrap().starts_with("status:"));

    // Logout on B ends the session on A too.
    let r = send(
        http.post(url(&b, "/ui/api/logout"))
            .header("cookie", &cookie)
            .header("x-switchyard-csrf", &csrf)
            .json(&serde_json::json!({})),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert!(
        session_cookie(&r).1.contains("Max-Age=0"),
        "the cookie is cleared"
    );
    let r = send(
        http.get(url(&a, "/ui/api/servers"))
            .header("cookie", &cookie),
    )
    .await;
    assert_eq!(r.status, 401, "{:?}", r.body);

    // Refusals the framework makes come in the same JSON shape.
    let (r2, r2_csrf) = {
        let r = send(login(&a, serde_json::json!({"token": "admin-token-1"}))).await;
        (
            session_cookie(&r).0,
            r.body["csrf"].as_str().unwrap().to_owned(),
        )
    };
    for (req, status) in [
        (http.get(url(&a, "/ui/api/background?pageSize=-1")), 400),
        (http.get(url(&a, "/ui/api/background?what=1")), 400),
        (http.put(url(&a, "/ui/api/session")), 405),
        (http.get(url(&a, "/ui/api/")), 404),
        (http.get(url(&a, "/ui/api/servers/orders%ff/tools")), 400),
    ] {
        let r = send(req.header("cookie", &r2)).await;
        assert_eq!(r.status, status, "{:?}", r.body);
        assert!(
            r.body["error"].is_string() && r.body["code"].is_string(),
            "{:?}",
            r.body
        );
    }
    // A body over the limit, and a body that is not an object.
    let huge = serde_json::json!({"token": "x".repeat(3 << 20)});
    // On a connection of its own: the server answers before reading the
    // whole body, and closes that connection.
    let r = send(
        reqwest::Client::new()
            .post(url(&a, "/ui/api/login"))
            .json(&huge),
    )
    .await;
    assert_eq!(r.status, 413, "{:?}", r.body);
    let r = send(
        http.post(url(&a, "/ui/api/servers/orders/tools/create_order/hints"))
            .header("cookie", &r2)
            .header("x-switchyard-csrf", &r2_csrf)
            .json(&serde_json::json!([true, false, true])),
    )
    .await;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert_eq!(r.body["error"], "the body must be a JSON object");

    // A server's limits: given on add, answered, kept by an update that
    // leaves them out, changed by one that sets them.
    let spec = |extra: serde_json::Value| {
        let mut spec = serde_json::json!({
            "name": "limits", "transport": "stdio", "command": "true",
        });
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    };
    let r = send(
        http.post(url(&a, "/ui/api/servers"))
            .header("cookie", &r2)
            .header("x-switchyard-csrf", &r2_csrf)
            .json(&spec(
                serde_json::json!({"maxMessageBytes": 4096, "livenessIntervalSec": 0}),
            )),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        (&r.body["maxMessageBytes"], &r.body["livenessIntervalSec"]),
        (&4096.into(), &0.into()),
        "{:?}",
        r.body
    );
    for (extra, want) in [
        (serde_json::json!({}), (4096, 0)),
        (serde_json::json!({"livenessIntervalSec": 60}), (4096, 60)),
    ] {
        let r = send(
            http.put(url(&a, "/ui/api/servers/limits"))
                .header("cookie", &r2)
                .header("x-switchyard-csrf", &r2_csrf)
                .json(&spec(extra)),
        )
        .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        assert_eq!(
            (&r.body["maxMessageBytes"], &r.body["livenessIntervalSec"]),
            (&want.0.into(), &want.1.into()),
            "{:?}",
            r.body
        );
    }
    // A member of the wrong type is named, its value not repeated.
    let r = send(
        http.put(url(&a, "/ui/api/servers/limits"))
            .header("cookie", &r2)
            .header("x-switchyard-csrf", &r2_csrf)
            .json(&spec(serde_json::json!({"maxMessageBytes": "4096"}))),
    )
    .await;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert_eq!(
        r.body["error"],
        "the body: maxMessageBytes: invalid type: a string, expected u64"
    );
    let r = send(login(&a, serde_json::json!({"token": 123456789}))).await;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert_eq!(
        r.body["error"],
        "the body: token: invalid type: an integer, expected a string"
    );
    let r = send(
        http.delete(url(&a, "/ui/api/servers/limits"))
            .header("cookie", &r2)
            .header("x-switchyard-csrf", &r2_csrf),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    // A foreign Host (DNS rebinding) on a loopback listener.
    let r = send(
        http.get(url(&a, "/ui/api/servers"))
            .header("cookie", &r2)
            .header("host", "evil.example"),
    )
    .await;
    assert_eq!(r.status, 403, "{:?}", r.body);

    // Failed logins are limited per client address: 127.0.0.1 is locked
    // out, 127.0.0.2 is not.
    let mut last = 0;
    for _ in 0..12 {
        last = send(login(&b, serde_json::json!({"token": "guess"})))
            .await
            .status;
    }
    assert_eq!(last, 429);
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let r = send(
        other
            .post(url(&b, "/ui/api/login"))
            .json(&serde_json::json!({"token": "admin-token-1"})),
    )
    .await;
    assert_eq!(r.status, 200, "another client still logs in: {:?}", r.body);
    assert!(
        scrape(
            &b,
            REFUSALS,
            &[("service", "console"), ("reason", "too_many_logins")]
        )
        .await
            >= 1.0
    );
}

/// `switchyard up` on a file without an admin token makes one for the
/// console (mode 0600, beside the store, once), says where, and it logs
/// in; a second start reuses it.
#[tokio::test]
async fn up_makes_a_console_token_once() {
    use std::os::unix::fs::PermissionsExt;
    switchyard_test_support::init_tracing();
    switchyard_common::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (
        switchyard_test_support::free_port(),
        switchyard_test_support::free_port(),
    );
    let config = dir.path().join("up.toml");
    std::fs::write(
        &config,
        format!(
            "[control_plane]\nlisten = \"127.0.0.1:{grpc}\"\nhttp_listen = \"127.0.0.1:{http}\"\n\n[store]\npath = {}\n",
            toml_str(dir.path().join("state/store.redb").to_string_lossy())
        ),
    )
    .unwrap();
    let start = || {
        let mut cmd = tokio::process::Command::new(switchyard_bin());
        cmd.arg("up")
            .arg("--config")
            .arg(&config)
            .env("SWITCHYARD_SIDECAR_BIN", sidecar_bin());
        cmd
    };
    let (mut up, line) = Proc::start(
        "up",
        start(),
        dir.path().join("up.log"),
        "switchyard: console ",
    )
    .await;
    let file = dir.path().join("state/console-admin.token");
    assert_eq!(
        line,
        format!(
            "switchyard: console http://127.0.0.1:{http}/ui/ (log in with the token in {})",
            file.display()
        )
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let token = std::fs::read_to_string(&file).unwrap();
    let login = |token: String| async move {
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{http}/ui/api/login"))
            .json(&serde_json::json!({ "token": token.trim() }))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(login(token.clone()).await, 200);
    assert!(up.terminate().await.success());
    // Again: the same token.
    let (mut up, _) = Proc::start(
        "up-again",
        start(),
        dir.path().join("up-again.log"),
        "switchyard: console ",
    )
    .await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), token);
    assert_eq!(login(token).await, 200);
    assert!(up.terminate().await.success());
}
