//! The Streamable HTTP transport of the upstream session against real
//! processes on loopback: `tests/peers/servers/http_stub.py` (a Python
//! stdlib server that misbehaves on demand) and the rmcp reference server
//! in both protocol eras.

use serde_json::{Value, json};
use std::future::Future;
use std::time::{Duration, Instant};
use switchyard_sidecar::upstream::{
    EraPreference, HttpConfig, TransportConfig, Upstream, UpstreamConfig, UpstreamError,
    UpstreamMetrics, era::Era,
};
use switchyard_test_support::{
    HttpServer, free_port, init_tracing, reference_server_bin, start_http_server, stub_script,
};
use tokio::process::Command;

/// Bound on any single step of a test.
const STEP: Duration = Duration::from_secs(20);

async fn within<F: Future>(what: &str, limit: Duration, f: F) -> F::Output {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no outcome within {limit:?}"))
}

/// Starts `http_stub.py` with the given environment knobs.
async fn http_stub(env: &[(&str, &str)]) -> HttpServer {
    init_tracing();
    let mut cmd = Command::new("python3");
    cmd.arg(stub_script("http_stub.py"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    start_http_server(cmd, "/mcp").await
}

/// Starts the reference server over HTTP in `era`.
async fn reference_server(era: &str) -> HttpServer {
    init_tracing();
    let mut cmd = Command::new(reference_server_bin());
    cmd.args(["--http", "127.0.0.1:0", "--era", era]);
    start_http_server(cmd, "/mcp").await
}

fn config(name: &str, url: &str) -> UpstreamConfig {
    config_with_headers(name, url, Vec::new())
}

fn config_with_headers(name: &str, url: &str, headers: Vec<(String, String)>) -> UpstreamConfig {
    UpstreamConfig::new(
        name,
        TransportConfig::Http(HttpConfig {
            url: url.to_owned(),
            headers,
        }),
    )
}

fn upstream(config: UpstreamConfig) -> Upstream {
    Upstream::new(config, &UpstreamMetrics::unregistered()).expect("build the upstream")
}

async fn call(up: &Upstream, tool: &str, arguments: Value) -> Result<Value, UpstreamError> {
    within(
        &format!("tools/call {tool}"),
        STEP,
        up.call_tool(json!({"name": tool, "arguments": arguments})),
    )
    .await
}

/// The first text content of a `CallToolResult`.
fn text(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {result}"))
}

async fn echo_ok(up: &Upstream, message: &str) {
    let r = call(up, "echo", json!({"message": message}))
        .await
        .unwrap_or_else(|e| panic!("echo after the failure: {e}"));
    assert_eq!(text(&r), message);
}

/// A stub tool whose text is JSON (`stats`, `last_headers`, `header_log`).
async fn json_tool(up: &Upstream, tool: &str) -> Value {
    let r = call(up, tool, json!({}))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    serde_json::from_str(text(&r)).unwrap_or_else(|e| panic!("{tool} is not JSON ({e}): {r}"))
}

async fn next_notification(rx: &mut tokio::sync::broadcast::Receiver<Value>) -> Value {
    within("a notification", Duration::from_secs(5), rx.recv())
        .await
        .expect("notification channel open")
}

#[tokio::test]
async fn json_and_sse_answers_with_charset_parameters() {
    let server = http_stub(&[]).await;
    let up = upstream(config("stub-json-sse", &server.url));
    let negotiated = within("connect", STEP, up.connect())
        .await
        .expect("connect");
    assert_eq!(negotiated.era, Era::Legacy);
    let mut rx = up.subscribe();

    // application/json; charset=utf-8
    let message = "héllo \"quoted\" \\ back\nslash 🚂";
    let r = call(&up, "echo", json!({"message": message}))
        .await
        .expect("echo");
    assert_eq!(text(&r), message);

    // text/event-stream; charset=utf-8: a comment, a notification, the reply.
    for multiline in [false, true] {
        let r = call(
            &up,
            "echo_sse",
            json!({"message": message, "multiline": multiline}),
        )
        .await
        .unwrap_or_else(|e| panic!("echo_sse multiline={multiline}: {e}"));
        assert_eq!(text(&r), message, "multiline={multiline}");
        let n = next_notification(&mut rx).await;
        assert_eq!(n["method"], "notifications/message");
        assert_eq!(n["params"]["data"], "before echo_sse reply");
    }
    assert!(
        rx.try_recv().is_err(),
        "exactly one notification per echo_sse"
    );

    // Everything (initialize included, with its MCP-Session-Id) over SSE.
    let sse = http_stub(&[("STUB_HTTP_MODE", "sse")]).await;
    let up = upstream(config("stub-sse-mode", &sse.url));
    within("connect", STEP, up.connect())
        .await
        .expect("connect in SSE mode");
    let tools = within("list_tools", STEP, up.list_tools())
        .await
        .expect("list_tools over SSE")
        .entries;
    assert!(tools.iter().any(|t| t["name"] == "echo_sse"), "{tools:?}");
    echo_ok(&up, message).await;
}

#[tokio::test]
async fn notifications_accept_202_200_and_204() {
    for status in ["202", "200", "204"] {
        let server = http_stub(&[("STUB_HTTP_NOTIFY_STATUS", status)]).await;
        let up = upstream(config(&format!("stub-notify-{status}"), &server.url));
        let n = within("connect", STEP, up.connect())
            .await
            .unwrap_or_else(|e| panic!("handshake with notifications answered {status}: {e}"));
        assert_eq!(n.protocol_version, "2025-11-25");
        echo_ok(&up, &format!("after {status}")).await;
        // The handshake's notifications/initialized reached the server.
        let log = json_tool(&up, "header_log").await;
        let methods: Vec<&str> = log
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["method"].as_str())
            .collect();
        assert!(
            methods.contains(&"notifications/initialized"),
            "{status}: {methods:?}"
        );
    }
}

#[tokio::test]
async fn session_id_protocol_version_and_static_headers() {
    // Every request must carry the configured `Authorization` (else 401);
    // the log echoes it, and the echo reaches us scrubbed.
    let server = http_stub(&[("STUB_HTTP_STRICT", "1"), ("STUB_HTTP_BEARER", "t")]).await;
    let headers = vec![
        ("X-Team".to_owned(), "blue".to_owned()),
        ("Authorization".to_owned(), "Bearer t".to_owned()),
    ];
    let up = upstream(config_with_headers("stub-headers", &server.url, headers));
    within("connect", STEP, up.connect())
        .await
        .expect("connect (strict stub)");
    echo_ok(&up, "one").await;
    let log = json_tool(&up, "header_log").await;
    let log = log.as_array().unwrap();
    // discover, initialize, initialized, echo, header_log
    let methods: Vec<&str> = log
        .iter()
        .map(|e| e["method"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        methods,
        [
            "server/discover",
            "initialize",
            "notifications/initialized",
            "tools/call",
            "tools/call"
        ]
    );
    let mut session = None;
    for (i, entry) in log.iter().enumerate() {
        let h = &entry["headers"];
        let method = methods[i];
        assert_eq!(entry["verb"], "POST");
        assert_eq!(h["x-team"], "blue", "{method}: {h}");
        assert_eq!(h["authorization"], "[redacted]", "{method}: {h}");
        let accept = h["accept"].as_str().unwrap_or("");
        assert!(
            accept.contains("application/json") && accept.contains("text/event-stream"),
            "{method}: {h}"
        );
        match method {
            "server/discover" | "initialize" => {
                assert!(
                    h.get("mcp-session-id").is_none(),
                    "{method} carries no session: {h}"
                );
                if method == "initialize" {
                    assert!(h.get("mcp-protocol-version").is_none(), "{h}");
                }
            }
            _ => {
                assert_eq!(h["mcp-protocol-version"], "2025-11-25", "{method}: {h}");
                let sid = h["mcp-session-id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{method}: {h}"));
                assert_eq!(
                    sid.len(),
                    32,
                    "the stub's session ids are 32 hex digits: {sid}"
                );
                match &session {
                    None => session = Some(sid.to_owned()),
                    Some(s) => assert_eq!(s, sid, "{method}: same session"),
                }
            }
        }
    }

    // Shutdown DELETEs the session (seen through a second client).
    within("shutdown", STEP, up.shutdown(Duration::from_millis(200))).await;
    let other = upstream(config_with_headers(
        "stub-headers-2",
        &server.url,
        vec![("Authorization".to_owned(), "Bearer t".to_owned())],
    ));
    let stats = json_tool(&other, "stats").await;
    assert_eq!(stats["deleted"], 1, "{stats}");
    let err = within("request after shutdown", STEP, up.request("ping", None))
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Closed { .. }), "{err}");
}

#[tokio::test]
async fn expired_session_reinitializes_and_retries_once() {
    let server = http_stub(&[]).await;
    let up = upstream(config("stub-expiry", &server.url));
    within("connect", STEP, up.connect())
        .await
        .expect("connect");
    let r = call(&up, "expire_session", json!({}))
        .await
        .expect("expire_session");
    assert_eq!(text(&r), "session expired");

    // The next request gets 404, is re-sent once on a new session, succeeds.
    echo_ok(&up, "after expiry").await;
    assert_eq!(up.connection_attempts(), 2);
    let stats = json_tool(&up, "stats").await;
    assert_eq!(stats["initialize"], 2, "{stats}");
    assert_eq!(stats["rejected_404"], 1, "{stats}");
    assert_eq!(
        stats["calls"]["echo"].as_array().map(Vec::len),
        Some(1),
        "{stats}"
    );

    // 404 again right after re-initializing: the error surfaces, no loop.
    call(&up, "reject_calls", json!({"count": 2}))
        .await
        .expect("reject_calls");
    let started = Instant::now();
    let err = call(&up, "echo", json!({"message": "twice"}))
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::SessionExpired { .. }), "{err}");
    assert!(err.to_string().contains("stub-expiry"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let stats = json_tool(&up, "stats").await;
    assert_eq!(
        stats["initialize"], 4,
        "one re-initialize per 404, and one for this call: {stats}"
    );
    assert_eq!(stats["rejected_404"], 3, "{stats}");
    assert_eq!(
        stats["calls"]["echo"].as_array().map(Vec::len),
        Some(1),
        "{stats}"
    );
    echo_ok(&up, "recovered").await;
}

/// A server that ends the new session during the handshake (404 to
/// `notifications/initialized`) gets a new session, a bounded number of
/// times; a new session after the server ended ours is counted as a
/// renewal, never as a restart.
#[tokio::test]
async fn a_session_ended_during_the_handshake_is_opened_again() {
    let registry = prometheus::Registry::new();
    let metrics = UpstreamMetrics::register(&registry).unwrap();
    let series = |name: &str| {
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{server=\"stub-handshake\"}}")))
            .and_then(|l| l.rsplit(' ').next())
            .map(|v| v.parse::<f64>().unwrap())
            .unwrap_or(0.0)
    };
    let server = http_stub(&[("STUB_HTTP_HANDSHAKE_404", "2")]).await;
    let up = Upstream::new(config("stub-handshake", &server.url), &metrics).unwrap();
    within("connect", STEP, up.connect())
        .await
        .expect("connected on the third handshake");
    echo_ok(&up, "after the handshake").await;
    assert_eq!(up.connection_attempts(), 1);
    let stats = json_tool(&up, "stats").await;
    assert_eq!(stats["initialize"], 3, "{stats}");
    assert_eq!(stats["rejected_404"], 2, "{stats}");
    // Later in the session's life: renewed too, still no restart.
    call(&up, "expire_session", json!({})).await.unwrap();
    echo_ok(&up, "after the server ended the session").await;
    assert_eq!(
        series("switchyard_sidecar_upstream_session_renewals_total"),
        3.0
    );
    assert_eq!(series("switchyard_sidecar_upstream_restarts_total"), 0.0);

    // A server that ends every new session: the handshake gives up after
    // three, at once, with the error that says so.
    let server = http_stub(&[("STUB_HTTP_HANDSHAKE_404", "100")]).await;
    let up = upstream(config("stub-handshake-never", &server.url));
    let started = Instant::now();
    let err = within("connect", STEP, up.connect()).await.unwrap_err();
    assert!(matches!(err, UpstreamError::SessionExpired { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn cut_sse_stream_resumes_and_is_never_replayed() {
    let server = http_stub(&[]).await;
    let up = upstream(config("stub-resume", &server.url));
    within("connect", STEP, up.connect())
        .await
        .expect("connect");

    // A 2025-11-25 stream cut before the reply is resumed with GET +
    // Last-Event-ID, after the server's `retry`.
    let r = call(&up, "sse_resume", json!({"message": "resumed"}))
        .await
        .expect("sse_resume");
    assert_eq!(text(&r), "resumed");
    let stats = json_tool(&up, "stats").await;
    assert_eq!(stats["resumed"], 1, "{stats}");

    // The session ends before the resuming GET: the server already had the
    // request, so it must not be sent again on a new session.
    let err = call(
        &up,
        "sse_resume",
        json!({"message": "gone", "expire": true}),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, UpstreamError::NoResponse { .. }), "{err:?}");
    echo_ok(&up, "after the lost stream").await;
    let stats = json_tool(&up, "stats").await;
    assert_eq!(
        stats["calls"]["sse_resume"].as_array().map(Vec::len),
        Some(2),
        "{stats}"
    );
    assert_eq!(stats["initialize"], 2, "{stats}");
}

#[tokio::test]
async fn unauthorized_401_and_403_fail_connect_promptly() {
    for status in [401u16, 403] {
        let server = http_stub(&[("STUB_HTTP_AUTH", &status.to_string())]).await;
        let up = upstream(config("stub-auth", &server.url));
        let started = Instant::now();
        let err = within("connect", STEP, up.connect()).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        match &err {
            UpstreamError::Unauthorized {
                server,
                status: got,
                www_authenticate,
                sent_authorization,
                access_token,
            } => {
                assert_eq!(server, "stub-auth");
                assert_eq!(*access_token, None);
                assert_eq!(*got, status);
                assert!(!sent_authorization);
                assert!(
                    err.to_string()
                        .contains("no Authorization header is configured"),
                    "{err}"
                );
                if status == 401 {
                    assert_eq!(www_authenticate.as_deref(), Some("Bearer realm=\"stub\""));
                    assert!(err.to_string().contains("Bearer realm"), "{err}");
                } else {
                    assert_eq!(www_authenticate, &None);
                }
            }
            other => panic!("HTTP {status}: expected Unauthorized, got {other:?}"),
        }
        assert_eq!(err.outcome(), "unauthorized");
    }
    // A configured bearer that the server refuses: the message says so.
    let server = http_stub(&[("STUB_HTTP_BEARER", "right")]).await;
    let headers = vec![("Authorization".to_owned(), "Bearer wrong".to_owned())];
    let up = upstream(config_with_headers("stub-bearer", &server.url, headers));
    let err = within("connect", STEP, up.connect()).await.unwrap_err();
    assert!(
        matches!(
            err,
            UpstreamError::Unauthorized {
                sent_authorization: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("refused the configured Authorization header")
            && !err.to_string().contains("wrong"),
        "{err}"
    );
}

#[tokio::test]
async fn missing_response_fails_fast_and_connection_survives() {
    let server = http_stub(&[]).await;
    let mut cfg = config("stub-noresp", &server.url);
    cfg.request_timeout = Duration::from_secs(30);
    let up = upstream(cfg);
    within("connect", STEP, up.connect())
        .await
        .expect("connect");
    let mut rx = up.subscribe();
    for tool in ["no_response", "sse_no_response"] {
        let started = Instant::now();
        let err = call(&up, tool, json!({})).await.unwrap_err();
        assert!(
            matches!(&err, UpstreamError::NoResponse { method, .. } if method == "tools/call"),
            "{tool}: {err:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{tool}: {:?}",
            started.elapsed()
        );
        echo_ok(&up, &format!("after {tool}")).await;
    }
    let n = next_notification(&mut rx).await;
    assert_eq!(n["params"]["data"], "sse_no_response: no reply will follow");
    assert_eq!(up.connection_attempts(), 1, "no reconnect was needed");
}

#[tokio::test]
async fn request_timeout_cancels_and_connection_survives() {
    let server = http_stub(&[]).await;
    let mut cfg = config("stub-timeout", &server.url);
    cfg.request_timeout = Duration::from_millis(300);
    let up = upstream(cfg);
    within("connect", STEP, up.connect())
        .await
        .expect("connect");
    for tool in ["slow", "slow_sse"] {
        let started = Instant::now();
        let err = call(&up, tool, json!({"ms": 2000})).await.unwrap_err();
        let elapsed = started.elapsed();
        match &err {
            UpstreamError::Timeout { method, after, .. } => {
                assert_eq!(method, "tools/call");
                assert_eq!(*after, Duration::from_millis(300));
            }
            other => panic!("{tool}: expected Timeout, got {other:?}"),
        }
        assert!(
            elapsed >= Duration::from_millis(290) && elapsed < Duration::from_millis(1500),
            "{tool}: {elapsed:?}"
        );
        echo_ok(&up, &format!("after {tool}")).await;
    }
    // Both timed-out requests were cancelled by their numeric ids.
    let timed_out = |stats: &Value| -> Vec<Value> {
        ["slow", "slow_sse"]
            .iter()
            .flat_map(|t| stats["calls"][t].as_array().cloned().unwrap_or_default())
            .collect()
    };
    let stats = within("the cancellations", STEP, async {
        loop {
            let stats = json_tool(&up, "stats").await;
            let cancelled = stats["cancelled"].as_array().cloned().unwrap_or_default();
            if timed_out(&stats).iter().all(|id| cancelled.contains(id)) {
                break stats;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    let ids = timed_out(&stats);
    assert_eq!(ids.len(), 2, "{stats}");
    assert!(
        ids.iter().all(Value::is_u64),
        "numeric upstream ids: {stats}"
    );
    assert_eq!(
        stats["cancelled"].as_array().map(Vec::len),
        Some(2),
        "{stats}"
    );
}

#[tokio::test]
async fn oversized_responses_fail_and_connection_survives() {
    let big = "x".repeat(10 * 1024);
    for mode in ["json", "sse"] {
        let server = http_stub(&[("STUB_HTTP_MODE", mode)]).await;
        let mut cfg = config("stub-limit", &server.url);
        cfg.max_message_bytes = 2048;
        let up = upstream(cfg);
        within("connect", STEP, up.connect())
            .await
            .expect("connect");
        // `echo` answers in the stub's mode; `echo_sse` always over SSE.
        for tool in ["echo", "echo_sse"] {
            let err = call(&up, tool, json!({"message": big})).await.unwrap_err();
            match &err {
                UpstreamError::MessageTooLarge {
                    method,
                    size,
                    limit,
                    ..
                } => {
                    assert_eq!(method, "tools/call");
                    assert_eq!(*limit, 2048);
                    assert!(*size > 2048, "{err}");
                }
                other => panic!("{mode}/{tool}: expected MessageTooLarge, got {other:?}"),
            }
            echo_ok(&up, &format!("small after {mode}/{tool}")).await;
        }
    }
}

#[tokio::test]
async fn reference_server_in_both_eras() {
    for (era_arg, era) in [("2025-11-25", Era::Legacy), ("2026-07-28", Era::Modern)] {
        let server = reference_server(era_arg).await;
        let up = upstream(config(&format!("reference-{era_arg}"), &server.url));
        let n = within("connect", STEP, up.connect())
            .await
            .unwrap_or_else(|e| panic!("{era_arg}: {e}"));
        assert_eq!(n.era, era, "{era_arg}");
        assert_eq!(n.protocol_version, era_arg);
        assert!(n.has_tools());

        // Pages of 3: all six only if every nextCursor is followed.
        let tools = within("list_tools", STEP, up.list_tools())
            .await
            .unwrap_or_else(|e| panic!("{era_arg}: {e}"))
            .entries;
        let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "add",
                "create_order",
                "echo",
                "get_customer",
                "get_order",
                "list_orders"
            ],
            "{era_arg}"
        );

        // A modern-only server rejects requests without `_meta`: success
        // proves the client sent it.
        let r = call(&up, "get_order", json!({"order_id": "O-1001"}))
            .await
            .unwrap_or_else(|e| panic!("{era_arg}: {e}"));
        assert_ne!(r["isError"], true, "{era_arg}: {r}");
        assert_eq!(r["structuredContent"]["id"], "O-1001", "{era_arg}: {r}");
        assert!(r["structuredContent"]["lines"].is_array(), "{era_arg}: {r}");

        let r = call(&up, "get_order", json!({"order_id": "O-404"}))
            .await
            .expect("a tool error");
        assert_eq!(r["isError"], true, "{era_arg}: {r}");
        within("shutdown", STEP, up.shutdown(Duration::from_millis(200))).await;
    }
}

#[tokio::test]
async fn era_fallback_and_pinning() {
    // http_stub answers server/discover (no session yet) with HTTP 400 and a
    // -32000 error body: not a modern error, so the client falls back.
    let server = http_stub(&[]).await;
    let up = upstream(config("stub-fallback", &server.url));
    let n = within("connect", STEP, up.connect())
        .await
        .expect("connect");
    assert_eq!(n.era, Era::Legacy);
    assert_eq!(n.protocol_version, "2025-11-25");
    assert_eq!(n.server_info["name"], "http-stub");
    let stats = json_tool(&up, "stats").await;
    assert_eq!(stats["initialize"], 1, "{stats}");

    // Pinned to the modern era: no fallback, a failed handshake, which
    // requests see as unavailable (as a server that cannot start).
    let mut cfg = config("stub-pinned-modern", &server.url);
    cfg.era = EraPreference::Modern;
    let err = within("connect", STEP, upstream(cfg).connect())
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Handshake { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(
            "server stub-pinned-modern: cannot connect: the server does not speak 2026-07-28"
        ),
        "{err}"
    );
    assert_eq!(
        switchyard_sidecar::api::status_of(&err).code(),
        tonic::Code::Unavailable
    );

    // A legacy reference server answers discover with 404 and -32601: fallback.
    let legacy = reference_server("2025-11-25").await;
    let n = within(
        "connect",
        STEP,
        upstream(config("ref-legacy", &legacy.url)).connect(),
    )
    .await
    .expect("connect to the legacy reference server");
    assert_eq!(n.era, Era::Legacy);

    // A modern-only server refuses initialize with -32022 (HTTP 400): a
    // client pinned to the legacy era gets that error, not a session.
    let modern = reference_server("2026-07-28").await;
    let mut cfg = config("ref-modern", &modern.url);
    cfg.era = EraPreference::Legacy;
    let err = within("connect", STEP, upstream(cfg).connect())
        .await
        .unwrap_err();
    assert!(matches!(&err, UpstreamError::Handshake { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("initialize failed with JSON-RPC error -32022"),
        "{err}"
    );
    assert_eq!(
        switchyard_sidecar::api::status_of(&err).code(),
        tonic::Code::Unavailable
    );

    // The modern-only server at a wrong path: the error says what
    // server/discover answered before the fallback, and where to look.
    let wrong = modern.url.replace("/mcp", "/wrong");
    let err = within(
        "connect",
        STEP,
        upstream(config("ref-wrong-path", &wrong)).connect(),
    )
    .await
    .unwrap_err();
    assert!(matches!(&err, UpstreamError::Handshake { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("before that, server/discover answered HTTP 404 (check the URL's path)"),
        "{err}"
    );
}

#[tokio::test]
async fn unreachable_url_fails_connect_promptly() {
    init_tracing();
    let port = free_port();
    let up = upstream(config(
        "nobody-home",
        &format!("http://127.0.0.1:{port}/mcp"),
    ));
    let started = Instant::now();
    let err = within("connect", STEP, up.connect()).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, UpstreamError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("nobody-home"), "{err}");
    assert!(err.is_connection_failure());
}

/// A sidecar told to stop while its next connection attempt waits out a
/// long backoff (a server that keeps answering 401) stops at once: the
/// waiting attempt gives up (`Closed`) instead of sleeping first.
#[tokio::test]
async fn shutdown_does_not_wait_out_a_reconnection_backoff() {
    let server = http_stub(&[("STUB_HTTP_AUTH", "401")]).await;
    let mut c = config("stub-backoff", &server.url);
    c.restart.initial_backoff = Duration::from_secs(60);
    c.restart.max_backoff = Duration::from_secs(60);
    let up = upstream(c);
    let first = within("connect", STEP, up.connect()).await;
    assert!(
        matches!(first, Err(UpstreamError::Unauthorized { .. })),
        "{first:?}"
    );
    // The next attempt waits 60 s before it tries.
    let waiting = {
        let up = up.clone();
        tokio::spawn(async move { up.connect().await.map(|_| ()) })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    let started = Instant::now();
    within("shutdown", STEP, up.shutdown(Duration::from_secs(1))).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown took {:?}",
        started.elapsed()
    );
    let r = within("the waiting attempt", STEP, waiting).await.unwrap();
    assert!(matches!(r, Err(UpstreamError::Closed { .. })), "{r:?}");
}

/// A server that redirects to another origin never gets our configured
/// headers sent there: the redirect is not followed (same-origin ones
/// are), and the other server sees no request at all.
#[tokio::test]
async fn configured_headers_never_follow_a_redirect_to_another_origin() {
    let elsewhere = http_stub(&[]).await;
    let redirecting = http_stub(&[("STUB_HTTP_REDIRECT", &elsewhere.url)]).await;
    let headers = vec![
        ("X-Api-Key".to_owned(), "apikey-SECRET-999".to_owned()),
        ("Authorization".to_owned(), "Bearer t".to_owned()),
    ];
    let up = upstream(config_with_headers(
        "stub-redirect",
        &redirecting.url,
        headers,
    ));
    // Not followed: the 307's own answer is what the sidecar gets.
    let err = within("connect", STEP, up.connect()).await.unwrap_err();
    assert!(err.to_string().contains("Redirect"), "{err}");
    // The other server: only our own look at it now.
    let other = upstream(config("stub-elsewhere", &elsewhere.url));
    within("connect", STEP, other.connect())
        .await
        .expect("connect");
    let log = json_tool(&other, "header_log").await;
    for entry in log.as_array().unwrap() {
        assert!(
            entry["headers"].get("x-api-key").is_none(),
            "a configured header reached another origin: {entry}"
        );
    }
}

/// A server that goes away while nothing is sent to it is found gone by
/// the liveness probe (`ping` in 2025-11-25, `server/discover` in
/// 2026-07-28), as a request would have found it: the link goes down with
/// the reason, and nothing else has to happen first. While the server is
/// there, the probes are answered and the connection is kept.
#[tokio::test]
async fn an_idle_server_that_goes_away_is_found_gone_by_the_liveness_probe() {
    for era in ["2025-11-25", "2026-07-28"] {
        let mut server = reference_server(era).await;
        let mut c = config(&format!("idle-{era}"), &server.url);
        c.liveness_interval = Some(Duration::from_millis(300));
        let up = upstream(c);
        within("connect", STEP, up.connect())
            .await
            .expect("connect");
        let mut link = up.link();
        let connected = link.borrow().clone();
        assert!(connected.connected, "{era}: {connected:?}");
        // Idle for several intervals: probed, answered, kept.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(*link.borrow(), connected, "{era}: the probes were answered");

        // The server goes away; nothing is sent but the probes.
        server.child.kill().await.expect("kill the server");
        let down = within(
            &format!("{era}: the link going down with no request sent"),
            Duration::from_secs(10),
            link.wait_for(|l| !l.connected),
        )
        .await
        .expect("the upstream is alive")
        .clone();
        let reason = down.last_error.unwrap_or_default();
        assert!(
            reason.contains("is gone") && reason.contains("cannot connect"),
            "{era}: {reason}"
        );
        up.shutdown(Duration::from_secs(1)).await;
    }
}

/// Only the shared session probes an idle server: a session's own
/// connection (one per interactive session, kept in a pool) does not, so
/// a pool of idle connections costs the server nothing.
#[tokio::test]
async fn only_the_shared_session_probes_an_idle_server() {
    let server = http_stub(&[]).await;
    let mut c = config("stub-probes", &server.url);
    c.liveness_interval = Some(Duration::from_millis(200));
    let up = upstream(c);
    let pings = |log: Value| {
        log.as_array()
            .expect("the log is an array")
            .iter()
            .filter(|e| e["method"] == "ping")
            .count()
    };
    let session = up.for_session("s1").expect("a session's upstream");
    within("connect the session", STEP, session.connect())
        .await
        .expect("connect");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(pings(json_tool(&session, "header_log").await), 0);
    within("connect", STEP, up.connect())
        .await
        .expect("connect");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let probed = pings(json_tool(&up, "header_log").await);
    assert!(probed >= 2, "{probed} pings in 1.2 s of silence");
}

/// A secret in the server's URL (`?api_key=`) is never in an error: the
/// error names the server. Checked for a refused connection and for a
/// server that goes away mid-answer.
#[tokio::test]
async fn a_secret_in_the_url_is_not_in_errors() {
    let port = switchyard_test_support::free_port();
    let up = upstream(config(
        "keyed",
        &format!("http://127.0.0.1:{port}/mcp?api_key=QS-SECRET"),
    ));
    let e = within("refused connect", STEP, up.connect())
        .await
        .expect_err("nothing listens");
    let text = format!("{e} {e:?}");
    assert!(!text.contains("QS-SECRET"), "{text}");
    assert!(text.contains("server keyed"), "{text}");

    let server = reference_server("2025-11-25").await;
    let up = upstream(config(
        "keyed",
        &format!("{}?api_key=QS-SECRET", server.url),
    ));
    within("connect", STEP, up.connect())
        .await
        .expect("connect");
    drop(server);
    let e = call(&up, "echo", json!({"message": "x"}))
        .await
        .expect_err("the server is gone");
    let text = format!("{e} {e:?}");
    assert!(!text.contains("QS-SECRET"), "{text}");
}
