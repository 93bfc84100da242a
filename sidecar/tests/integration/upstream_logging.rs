//! A call's log messages (`CallContext.log_level`): the upstream session
//! hands a call the `notifications/message` its server sent on the call's
//! own response stream, at the call's level or more severe, and nothing
//! else. Against real processes on loopback: `http_stub.py` (2025-11-25,
//! log messages on a POST's SSE stream, also a stream resumed with GET),
//! the reference server's conformance fixture over Streamable HTTP in
//! 2026-07-28 (asked per request with `_meta.logLevel`) and 2025-11-25
//! (rmcp sends them on the standalone GET stream: never relayed), and over
//! stdio (never relayed).

use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::audit::Audit;
use switchyard_mcp::logging::Level;
use switchyard_sidecar::interactions::{
    CallContext, Interaction, InteractionHandler, Interactions, ProgressSink,
};
use switchyard_sidecar::upstream::{
    EraPreference, HttpConfig, StdioConfig, TransportConfig, Upstream, UpstreamConfig,
    UpstreamMetrics,
};
use switchyard_test_support::{
    HttpServer, init_tracing, reference_server_bin, start_http_server, stub_script,
};
use tokio::process::Command;

/// Bound on any single step of a test.
const STEP: Duration = Duration::from_secs(20);

async fn within<F: std::future::Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(STEP, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: no outcome within {STEP:?}"))
}

fn http(name: &str, url: &str) -> UpstreamConfig {
    UpstreamConfig::new(
        name,
        TransportConfig::Http(HttpConfig {
            url: url.to_owned(),
            headers: Vec::new(),
        }),
    )
}

/// Declines every question: the sessions of these tests have
/// interactions (a 2025-11-25 HTTP session then listens on the GET
/// stream) but no user.
#[derive(Debug)]
struct Nobody;

impl InteractionHandler for Nobody {
    fn interact(&self, _: Interaction) -> BoxFuture<'static, Value> {
        Box::pin(async { json!({"action": "decline"}) })
    }

    fn complete(&self, _: &str, _: &CallContext, _: &str) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

fn upstream(config: UpstreamConfig) -> Upstream {
    init_tracing();
    let interactions = Interactions::new(Arc::new(Nobody), Audit::to_log());
    Upstream::with_interactions(config, &UpstreamMetrics::unregistered(), interactions)
        .expect("build the upstream")
}

/// What a call's sink got, as JSON.
#[derive(Clone, Default)]
struct Got(Arc<Mutex<Vec<Value>>>);

impl Got {
    fn all(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }

    /// The `data` of each message.
    fn data(&self) -> Vec<Value> {
        self.all()
            .iter()
            .map(|m| m["params"]["data"].clone())
            .collect()
    }
}

/// A call's context relaying its log messages at `level` (none: a sink,
/// as for progress, but no logs) to the returned [`Got`].
fn context(level: Option<Level>) -> (CallContext, Got) {
    let got = Got::default();
    let sink = {
        let got = got.clone();
        ProgressSink::new(move |json| {
            got.0
                .lock()
                .unwrap()
                .push(serde_json::from_str(&json).expect("JSON text"))
        })
    };
    let ctx = CallContext {
        session_id: "s1".into(),
        run_id: "r1".into(),
        progress: Some(sink),
        log_level: level,
        ..CallContext::default()
    };
    (ctx, got)
}

async fn call(up: &Upstream, tool: &str, arguments: Value, ctx: &CallContext) -> Value {
    within(
        &format!("tools/call {tool}"),
        up.call_tool_in(&json!({"name": tool, "arguments": arguments}), ctx),
    )
    .await
    .unwrap_or_else(|e| panic!("tools/call {tool}: {e}"))
}

/// The `notifications/message` received on the connection so far (any
/// stream), drained.
fn logs_seen(rx: &mut tokio::sync::broadcast::Receiver<Value>) -> Vec<Value> {
    let mut out = Vec::new();
    while let Ok(m) = rx.try_recv() {
        if m["method"] == "notifications/message" {
            out.push(m);
        }
    }
    out
}

#[tokio::test]
async fn log_messages_on_a_calls_own_stream_reach_that_call_only() {
    init_tracing();
    let mut cmd = Command::new("python3");
    cmd.arg(stub_script("http_stub.py"));
    let server: HttpServer = start_http_server(cmd, "/mcp").await;
    let up = upstream(http("stub-logs", &server.url));
    within("connect", up.connect()).await.expect("connect");
    let mut seen = up.subscribe();

    // On the call's POST stream, at `info`: handed to the call as sent.
    let (info, got) = context(Some(Level::Info));
    call(&up, "echo_sse", json!({"message": "a"}), &info).await;
    assert_eq!(
        got.all(),
        vec![json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "logger": "http-stub", "data": "before echo_sse reply"}})]
    );

    // Above the call's level: seen on the connection, not handed on.
    logs_seen(&mut seen);
    let (error, got) = context(Some(Level::Error));
    call(&up, "echo_sse", json!({"message": "b"}), &error).await;
    assert_eq!(got.all(), Vec::<Value>::new());
    assert_eq!(logs_seen(&mut seen).len(), 1, "the server did send one");

    // A message that echoes a secret the server was given (here, a
    // header's value) is handed on scrubbed, and so is the result.
    let secret = "hdr-SECRET-0123456789";
    let careless = upstream(UpstreamConfig::new(
        "stub-logs-secret",
        TransportConfig::Http(HttpConfig {
            url: server.url.clone(),
            headers: vec![("X-Api-Key".to_owned(), secret.to_owned())],
        }),
    ));
    let (echoed, got) = context(Some(Level::Info));
    let message = format!("key {secret} ok");
    let result = call(
        &careless,
        "echo_sse",
        json!({"message": message, "note": message}),
        &echoed,
    )
    .await;
    assert_eq!(got.data(), vec![json!("key [redacted] ok")]);
    assert_eq!(
        result["content"][0]["text"], "key [redacted] ok",
        "{result}"
    );

    // A call that asked for no logs (a progress sink only) gets none.
    let (none, got) = context(None);
    call(&up, "echo_sse", json!({"message": "c"}), &none).await;
    assert_eq!(got.all(), Vec::<Value>::new());

    // A stream cut before the response and resumed with GET and
    // Last-Event-ID is still the call's.
    let (resumed, got) = context(Some(Level::Debug));
    call(&up, "sse_resume", json!({"message": "d"}), &resumed).await;
    assert_eq!(got.data(), vec![json!("sse_resume: cut before the reply")]);

    // Two calls at once on the one connection: each gets its own stream's
    // message only, though the other's arrives while it runs.
    let (slow, got_slow) = context(Some(Level::Info));
    let (quick, got_quick) = context(Some(Level::Info));
    logs_seen(&mut seen);
    let slow_call = call(&up, "slow_sse", json!({"ms": 600}), &slow);
    let quick_call = async {
        // Once the slow call's stream is open.
        within("the slow call's message", async {
            while got_slow.all().is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        call(&up, "echo_sse", json!({"message": "e"}), &quick).await
    };
    tokio::join!(slow_call, quick_call);
    assert_eq!(got_slow.data(), vec![json!("slow_sse started")]);
    assert_eq!(got_quick.data(), vec![json!("before echo_sse reply")]);
    assert_eq!(logs_seen(&mut seen).len(), 2, "both were on the connection");
    up.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_modern_server_is_asked_per_request_and_its_messages_are_relayed() {
    init_tracing();
    let mut cmd = Command::new(reference_server_bin());
    cmd.args([
        "--conformance",
        "--era",
        "2026-07-28",
        "--http",
        "127.0.0.1:0",
    ]);
    let server = start_http_server(cmd, "/mcp").await;
    let mut config = http("fixture-modern", &server.url);
    config.era = EraPreference::Modern;
    let up = upstream(config);
    within("connect", up.connect()).await.expect("connect");
    let mut seen = up.subscribe();

    // Also for a client that answers for itself (the server is told its
    // capabilities, here none).
    for client in [None, Some(json!({}))] {
        let (mut debug, got) = context(Some(Level::Debug));
        debug.client = client.clone();
        let r = call(&up, "test_tool_with_logging", json!({}), &debug).await;
        assert_eq!(
            r["content"][0]["text"],
            "Tool with logging executed successfully"
        );
        assert_eq!(
            got.data(),
            vec![
                json!("Tool execution started"),
                json!("Tool processing data"),
                json!("Tool execution completed")
            ]
        );
        assert!(
            got.all().iter().all(|m| m["params"]["level"] == "info"
                && m["params"]["logger"] == "conformance-fixture"),
            "{:?}",
            got.all()
        );
    }

    // Asked at `error`, the server sends none; without a level it is not
    // asked at all (2026-07-28: no logLevel, no log messages).
    logs_seen(&mut seen);
    for level in [Some(Level::Error), None] {
        let (ctx, got) = context(level);
        call(&up, "test_tool_with_logging", json!({}), &ctx).await;
        assert_eq!(got.all(), Vec::<Value>::new(), "{level:?}");
        assert_eq!(logs_seen(&mut seen), Vec::<Value>::new(), "{level:?}");
    }
    up.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn messages_on_the_get_stream_or_over_stdio_are_never_relayed() {
    init_tracing();
    // 2025-11-25 over HTTP: rmcp sends a session's log messages on its
    // standalone GET stream, which belongs to no request.
    let mut cmd = Command::new(reference_server_bin());
    cmd.args([
        "--conformance",
        "--era",
        "2025-11-25",
        "--http",
        "127.0.0.1:0",
    ]);
    let server = start_http_server(cmd, "/mcp").await;
    let mut config = http("fixture-legacy", &server.url);
    config.era = EraPreference::Legacy;
    let stdio = UpstreamConfig::new(
        "fixture-stdio",
        TransportConfig::Stdio(StdioConfig {
            command: reference_server_bin().to_string_lossy().into_owned(),
            args: vec!["--conformance".into(), "--era".into(), "dual".into()],
            ..StdioConfig::default()
        }),
    );
    for config in [config, stdio] {
        let name = config.name.clone();
        let up = upstream(config);
        within("connect", up.connect()).await.expect("connect");
        let mut seen = up.subscribe();
        // Until the server's messages reach the connection (the GET stream
        // opens in the background): each call relays none of them.
        let mut arrived = Vec::new();
        for _ in 0..50 {
            let (ctx, got) = context(Some(Level::Debug));
            call(&up, "test_tool_with_logging", json!({}), &ctx).await;
            assert_eq!(got.all(), Vec::<Value>::new(), "{name}");
            arrived = logs_seen(&mut seen);
            if !arrived.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            !arrived.is_empty(),
            "{name}: the server's log messages reached the connection"
        );
        up.shutdown(Duration::from_secs(1)).await;
    }
}
