//! Stage D in the sidecar: an `auth = "oauth"` server gets the access
//! token the control plane pushes, as `Authorization: Bearer`, read when
//! each request is sent. Against `tests/peers/servers/http_stub.py`
//! (`STUB_HTTP_BEARER`: only one token passes; without it, any) and, for
//! 403 `insufficient_scope`, a small axum server here.
//!
//! Covered: no request reaches the server before a token arrives (the
//! status and every call say why, at once); the bearer reaches the server
//! and a new token is used by the next request on the same session; a
//! 401 is reported once per generation (however many requests it
//! refused), and the requests are sent again with the token pushed next;
//! a 401 with no new token in time, or refused again, is `Unauthorized`;
//! a withdrawn token (`needs_reauthorization`) drops the connection and
//! fails calls at once with the control plane's reason, until a token
//! comes again; 403 `insufficient_scope` is reported and not retried. End
//! to end, with the real binary and the fake control plane: the token
//! pushed on the report stream, the `token_rejected` report (also when the
//! stream breaks while a request waits for a new token), the statuses,
//! the calls, and a debug log that never shows a token.

use serde_json::{Value, json};
use std::future::Future;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_proto::v1::{self as pb, SidecarCallRequest, UpstreamStatus, sidecar_report};
use switchyard_sidecar::oauth::{AccessToken, Rejections, TokenState, Tokens};
use switchyard_sidecar::upstream::{
    HttpConfig, TransportConfig, Upstream, UpstreamConfig, UpstreamError, UpstreamMetrics,
};
use switchyard_sidecar::watch::{UpstreamView, watch_upstream};
use switchyard_test_support::fake_control_plane::FakeControlPlane;
use switchyard_test_support::{
    HttpServer, bearer_digest, init_tracing, start_http_server, stub_script, workspace_bin,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tonic::Code;

/// Bound on any single step of a test.
const STEP: Duration = Duration::from_secs(20);
/// What "at once" means for a call that must not wait.
const AT_ONCE: Duration = Duration::from_secs(2);
/// The token `STUB_HTTP_BEARER` accepts.
const RIGHT: &str = "right-SECRET-91c2";
/// A token the stub refuses.
const WRONG: &str = "wrong-SECRET-7f3a";

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

fn http_config(name: &str, url: &str, headers: Vec<(String, String)>) -> UpstreamConfig {
    UpstreamConfig::new(
        name,
        TransportConfig::Http(HttpConfig {
            url: url.to_owned(),
            headers,
        }),
    )
}

/// An `auth = "oauth"` session to `url`, sending `tokens`.
fn oauth_upstream(name: &str, url: &str, tokens: &Tokens) -> Upstream {
    let mut config = http_config(name, url, Vec::new());
    config.oauth = Some(tokens.clone());
    Upstream::new(config, &UpstreamMetrics::unregistered()).expect("build the upstream")
}

/// A session of our own to the stub, with the token it accepts as a
/// configured header: it reads the stub's counters and logs.
fn checker(url: &str) -> Upstream {
    let headers = vec![("Authorization".to_owned(), format!("Bearer {RIGHT}"))];
    Upstream::new(
        http_config("checker", url, headers),
        &UpstreamMetrics::unregistered(),
    )
    .expect("build the checker")
}

async fn call(up: &Upstream, tool: &str, arguments: Value) -> Result<Value, UpstreamError> {
    within(
        &format!("tools/call {tool}"),
        STEP,
        up.call_tool(json!({"name": tool, "arguments": arguments})),
    )
    .await
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {result}"))
}

/// A stub tool whose text is JSON (`stats`, `last_headers`, `header_log`).
async fn json_tool(up: &Upstream, tool: &str) -> Value {
    let r = call(up, tool, json!({}))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    serde_json::from_str(text(&r)).unwrap_or_else(|e| panic!("{tool} is not JSON ({e}): {r}"))
}

async fn echo(up: &Upstream, message: &str) -> Result<String, UpstreamError> {
    call(up, "echo", json!({"message": message}))
        .await
        .map(|r| text(&r).to_owned())
}

/// Waits until the watcher's status is `state` with `last_error`.
async fn status_becomes(view: &mut UpstreamView, state: &str, last_error: &str) {
    let want = UpstreamStatus {
        state: state.into(),
        last_error: last_error.into(),
    };
    let mut status = view.status.clone();
    let reached = tokio::time::timeout(STEP, status.wait_for(|s| *s == want)).await;
    match reached {
        Ok(r) => {
            r.expect("the watcher runs");
        }
        Err(_) => panic!(
            "status {want:?} not reached within {STEP:?}: {:?}",
            *view.status.borrow()
        ),
    }
}

/// A call that fails at once with [`UpstreamError::NotAuthorized`] and
/// `reason`.
async fn refused_at_once(up: &Upstream, reason: &str) {
    let started = Instant::now();
    let err = echo(up, "refused").await.unwrap_err();
    assert!(
        started.elapsed() < AT_ONCE,
        "took {:?}: {err}",
        started.elapsed()
    );
    assert!(
        matches!(&err, UpstreamError::NotAuthorized { reason: r, .. } if r == reason),
        "{err:?}"
    );
    assert_eq!(err.to_string(), reason);
    assert_eq!(err.outcome(), "unauthorized");
    assert!(!err.is_connection_failure());
}

/// The next refusal queued for the report stream.
async fn next_rejection(rejections: &mut Rejections) -> pb::TokenRejected {
    within("a token_rejected", STEP, rejections.next())
        .await
        .expect("the holder lives")
}

/// Asserts that nothing more is queued for the report stream.
async fn no_more_rejections(rejections: &mut Rejections) {
    if let Ok(r) = tokio::time::timeout(Duration::from_millis(300), rejections.next()).await {
        panic!("one more token_rejected: {r:?}");
    }
}

#[tokio::test]
async fn no_request_reaches_the_server_before_a_token() {
    let server = http_stub(&[("STUB_HTTP_BEARER", RIGHT)]).await;
    let (tokens, mut rejections) = Tokens::new("oauth-wait");
    let up = oauth_upstream("oauth-wait", &server.url, &tokens);
    let (mut view, watcher) = watch_upstream(up.clone());

    // Before any token: down, saying why; calls fail at once.
    let waiting = "server oauth-wait: waiting for the control plane's access token";
    status_becomes(&mut view, "down", waiting).await;
    refused_at_once(&up, waiting).await;
    let err = within("connect", STEP, up.connect()).await.unwrap_err();
    assert!(
        matches!(err, UpstreamError::NotAuthorized { .. }),
        "{err:?}"
    );

    // The control plane says an admin must authorize it.
    let reason = "server oauth-wait needs authorization by an admin: switchyard servers authorize oauth-wait";
    tokens.set(AccessToken::without_token(
        TokenState::NeedsAuthorization,
        0,
        reason,
    ));
    status_becomes(&mut view, "down", reason).await;
    refused_at_once(&up, reason).await;
    assert!(view.catalogue.borrow().is_none());

    // Nothing reached the server: every request it saw is the checker's,
    // whose `Authorization` the checker reads back scrubbed (the server
    // echoes a secret it was given).
    let check = checker(&server.url);
    let log = json_tool(&check, "header_log").await;
    for entry in log.as_array().unwrap() {
        assert_eq!(
            entry["headers"]["authorization"], "[redacted]",
            "a request without the token: {entry}"
        );
    }
    let stats = json_tool(&check, "stats").await;
    assert_eq!(stats["initialize"], 1, "only the checker's: {stats}");
    assert_eq!(stats["calls"].get("echo"), None, "{stats}");

    // A token: the watcher connects, and the bearer reaches the server.
    tokens.set(AccessToken::authorized(RIGHT, 1, 0));
    status_becomes(&mut view, "connected", "").await;
    assert_eq!(echo(&up, "with a token").await.unwrap(), "with a token");
    let headers = json_tool(&up, "last_headers").await;
    assert_eq!(
        headers["current"]["authorization-sha256"],
        bearer_digest(RIGHT),
        "{headers}"
    );
    let stats = json_tool(&check, "stats").await;
    assert_eq!(stats["initialize"], 2, "{stats}");
    no_more_rejections(&mut rejections).await;
    up.shutdown(Duration::from_secs(1)).await;
    within("the watcher ends", STEP, watcher).await.unwrap();
}

#[tokio::test]
async fn a_token_the_server_echoes_is_scrubbed_from_what_it_answers() {
    // A server that echoes the bearer it got (`last_headers`, `header_log`)
    // hands the engines nothing: the current token and the one before are
    // scrubbed from results, and from the log messages it sends.
    let first = "ya29.A0AfB_first-token-4f1c";
    let second = "ya29.A0AfB_second-token-9d2e";
    let server = http_stub(&[]).await;
    let (tokens, _rejections) = Tokens::new("oauth-echo");
    tokens.set(AccessToken::authorized(first, 1, 1_900_000_000_000));
    let up = oauth_upstream("oauth-echo", &server.url, &tokens);
    let headers = json_tool(&up, "last_headers").await;
    assert_eq!(
        headers["current"]["authorization"], "Bearer [redacted]",
        "{headers}"
    );
    assert_eq!(
        headers["current"]["authorization-sha256"],
        bearer_digest(first),
        "the server got the token: {headers}"
    );

    // A new token: the answer to the next request shows both scrubbed (its
    // own and the one before it).
    tokens.set(AccessToken::authorized(second, 2, 1_900_000_000_000));
    let r = call(&up, "last_headers", json!({})).await.unwrap();
    let shown = r.to_string();
    assert!(!shown.contains(first) && !shown.contains(second), "{shown}");
    let headers: Value = serde_json::from_str(text(&r)).unwrap();
    assert_eq!(headers["previous"]["authorization"], "Bearer [redacted]");
    assert_eq!(headers["current"]["authorization"], "Bearer [redacted]");
    assert_eq!(
        headers["current"]["authorization-sha256"],
        bearer_digest(second)
    );

    // A log message the server sends (`echo_sse`'s `note`) with the token.
    let mut notes = up.subscribe();
    call(
        &up,
        "echo_sse",
        json!({"message": "hi", "note": format!("my token is {second}")}),
    )
    .await
    .unwrap();
    let note = within("the note", STEP, async {
        loop {
            let msg = notes.recv().await.expect("notifications");
            if msg["method"] == "notifications/message" {
                break msg;
            }
        }
    })
    .await;
    assert_eq!(note["params"]["data"], "my token is [redacted]", "{note}");
}

#[tokio::test]
async fn a_new_token_is_used_by_the_next_request_on_the_same_session() {
    // Any token passes: the stub shows which one each request carried.
    let server = http_stub(&[]).await;
    let (tokens, mut rejections) = Tokens::new("oauth-rotate");
    tokens.set(AccessToken::authorized("tok-A", 1, 1_900_000_000_000));
    let up = oauth_upstream("oauth-rotate", &server.url, &tokens);
    let sent = |headers: &Value| headers["current"]["authorization"].clone();
    assert_eq!(sent(&json_tool(&up, "last_headers").await), "Bearer tok-A");
    let session = up.http_session_id().expect("a session");

    tokens.set(AccessToken::authorized("tok-B", 2, 1_900_000_000_000));
    assert_eq!(sent(&json_tool(&up, "last_headers").await), "Bearer tok-B");
    assert_eq!(up.http_session_id(), Some(session), "same session");
    let stats = json_tool(&up, "stats").await;
    assert_eq!(stats["initialize"], 1, "no reconnection: {stats}");

    // Every request carried a token: the handshake's, the notification's.
    let log = json_tool(&up, "header_log").await;
    let log = log.as_array().unwrap();
    assert!(log.len() >= 5, "{log:?}");
    for entry in log {
        let auth = entry["headers"]["authorization"].as_str().unwrap_or("");
        assert!(auth.starts_with("Bearer tok-"), "{entry}");
    }
    no_more_rejections(&mut rejections).await;
}

#[tokio::test]
async fn a_401_is_reported_once_and_the_requests_sent_again_with_the_new_token() {
    let server = http_stub(&[("STUB_HTTP_BEARER", RIGHT)]).await;
    let (tokens, mut rejections) = Tokens::new("oauth-401");
    tokens.set(AccessToken::authorized(RIGHT, 1, 0));
    let up = oauth_upstream("oauth-401", &server.url, &tokens);
    assert_eq!(echo(&up, "first").await.unwrap(), "first");

    // A token the server refuses; three calls at once.
    tokens.set(AccessToken::authorized(WRONG, 2, 0));
    let calls: Vec<_> = (0..3)
        .map(|i| {
            let up = up.clone();
            tokio::spawn(async move { echo(&up, &format!("call {i}")).await })
        })
        .collect();
    let rejected = next_rejection(&mut rejections).await;
    assert_eq!(rejected.generation, 2);
    assert_eq!(rejected.http_status, 401);
    assert_eq!(rejected.www_authenticate, "Bearer realm=\"stub\"");
    // Let the other refusals arrive before the new token: still one report.
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokens.set(AccessToken::authorized(RIGHT, 3, 0));
    for (i, c) in calls.into_iter().enumerate() {
        let got = within("a retried call", STEP, c).await.unwrap();
        assert_eq!(got.unwrap(), format!("call {i}"));
    }
    no_more_rejections(&mut rejections).await;
    let stats = json_tool(&up, "stats").await;
    assert_eq!(
        stats["initialize"], 1,
        "the retries kept the session: {stats}"
    );
    assert_eq!(
        stats["calls"]["echo"].as_array().map(Vec::len),
        Some(4),
        "each call reached the tool once: {stats}"
    );
}

#[tokio::test]
async fn a_401_without_a_new_token_in_time_or_refused_again_is_unauthorized() {
    let server = http_stub(&[("STUB_HTTP_BEARER", RIGHT)]).await;
    let wait = Duration::from_secs(1);
    let (tokens, mut rejections) = Tokens::with_refresh_wait("oauth-stale", wait);
    tokens.set(AccessToken::authorized(RIGHT, 1, 0));
    let up = oauth_upstream("oauth-stale", &server.url, &tokens);
    assert_eq!(echo(&up, "first").await.unwrap(), "first");

    // No new token: fails once the wait is over.
    tokens.set(AccessToken::authorized(WRONG, 2, 0));
    let started = Instant::now();
    let err = echo(&up, "stale").await.unwrap_err();
    let took = started.elapsed();
    assert!(took >= wait && took < wait + AT_ONCE, "took {took:?}");
    match &err {
        UpstreamError::Unauthorized {
            status,
            access_token,
            sent_authorization,
            www_authenticate,
            ..
        } => {
            assert_eq!(*status, 401);
            assert_eq!(*access_token, Some(2));
            assert!(sent_authorization);
            assert_eq!(www_authenticate.as_deref(), Some("Bearer realm=\"stub\""));
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("switchyard servers authorize oauth-stale"),
        "{message}"
    );
    assert!(
        !message.contains(WRONG) && !message.contains(RIGHT),
        "{message}"
    );
    assert_eq!(next_rejection(&mut rejections).await.generation, 2);

    // A new token that is refused too: sent once more, then Unauthorized
    // at once (no second wait).
    tokens.set(AccessToken::authorized(WRONG, 3, 0));
    let pending = {
        let up = up.clone();
        tokio::spawn(async move { echo(&up, "refused twice").await })
    };
    assert_eq!(next_rejection(&mut rejections).await.generation, 3);
    let started = Instant::now();
    tokens.set(AccessToken::authorized("also-wrong", 4, 0));
    let err = within("the retried call", STEP, pending)
        .await
        .unwrap()
        .unwrap_err();
    assert!(started.elapsed() < wait, "took {:?}", started.elapsed());
    assert!(
        matches!(
            err,
            UpstreamError::Unauthorized {
                access_token: Some(4),
                ..
            }
        ),
        "{err:?}"
    );
    let stats = json_tool(&checker(&server.url), "stats").await;
    assert_eq!(
        stats["calls"]["echo"].as_array().map(Vec::len),
        Some(1),
        "no refused call reached the tool: {stats}"
    );
}

#[tokio::test]
async fn a_withdrawn_token_drops_the_connection_until_a_new_one_comes() {
    let server = http_stub(&[("STUB_HTTP_BEARER", RIGHT)]).await;
    let (tokens, mut rejections) = Tokens::new("oauth-revoked");
    tokens.set(AccessToken::authorized(RIGHT, 1, 0));
    let up = oauth_upstream("oauth-revoked", &server.url, &tokens);
    let (mut view, _watcher) = watch_upstream(up.clone());
    status_becomes(&mut view, "connected", "").await;
    within(
        "a catalogue",
        STEP,
        view.catalogue.wait_for(Option::is_some),
    )
    .await
    .unwrap();
    assert_eq!(echo(&up, "before").await.unwrap(), "before");

    let check = checker(&server.url);
    let before = json_tool(&check, "stats").await["http"].as_u64().unwrap();
    let reason = "server oauth-revoked needs to be re-authorized by an admin (the grant was revoked): switchyard servers authorize oauth-revoked";
    tokens.set(AccessToken::without_token(
        TokenState::NeedsReauthorization,
        1,
        reason,
    ));
    status_becomes(&mut view, "down", reason).await;
    assert!(view.catalogue.borrow().is_none());
    assert!(up.negotiated().is_none());
    for _ in 0..3 {
        refused_at_once(&up, reason).await;
    }
    // Nothing went out meanwhile: the only request since is this one.
    let after = json_tool(&check, "stats").await["http"].as_u64().unwrap();
    assert_eq!(after, before + 1, "requests went out without a token");

    // A token again: connected on a new session, calls work.
    tokens.set(AccessToken::authorized(RIGHT, 2, 0));
    status_becomes(&mut view, "connected", "").await;
    assert_eq!(echo(&up, "after").await.unwrap(), "after");
    let stats = json_tool(&check, "stats").await;
    assert_eq!(
        stats["initialize"], 3,
        "the sidecar's two, the checker's: {stats}"
    );
    no_more_rejections(&mut rejections).await;
}

/// A protected resource that refuses every request with 403
/// `insufficient_scope`, counting them.
async fn scope_refusing_server() -> (String, Arc<AtomicUsize>) {
    use axum::http::{HeaderValue, StatusCode, header};
    use axum::response::IntoResponse;
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::any(move || {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                let mut resp = (StatusCode::FORBIDDEN, "insufficient scope").into_response();
                resp.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(
                        r#"Bearer error="insufficient_scope", scope="mcp:read mcp:write", resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource/mcp""#,
                    ),
                );
                resp
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

#[tokio::test]
async fn a_403_insufficient_scope_is_reported_and_not_retried() {
    init_tracing();
    let (url, seen) = scope_refusing_server().await;
    let (tokens, mut rejections) = Tokens::new("oauth-scope");
    tokens.set(AccessToken::authorized("narrow-token", 7, 0));
    let up = oauth_upstream("oauth-scope", &url, &tokens);
    let started = Instant::now();
    let err = within("connect", STEP, up.connect()).await.unwrap_err();
    assert!(started.elapsed() < AT_ONCE, "took {:?}", started.elapsed());
    match &err {
        UpstreamError::InsufficientScope {
            server,
            scope,
            www_authenticate,
        } => {
            assert_eq!(server, "oauth-scope");
            assert_eq!(scope.as_deref(), Some("mcp:read mcp:write"));
            assert!(www_authenticate.contains("insufficient_scope"));
        }
        other => panic!("expected InsufficientScope, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "server oauth-scope needs more scopes (mcp:read mcp:write): an admin must re-authorize it: switchyard servers authorize oauth-scope"
    );
    assert_eq!(seen.load(Ordering::SeqCst), 1, "sent once, not retried");
    let rejected = next_rejection(&mut rejections).await;
    assert_eq!(
        (rejected.generation, rejected.http_status),
        (7, 403),
        "{rejected:?}"
    );
    assert!(
        rejected
            .www_authenticate
            .contains("scope=\"mcp:read mcp:write\"")
    );
    no_more_rejections(&mut rejections).await;
}

// ---- end to end: the binary and the fake control plane ----------------------

/// `switchyard-sidecar run` with a config file, its log kept.
struct Sidecar {
    _child: tokio::process::Child,
    calls_addr: String,
    log: Arc<Mutex<String>>,
}

impl Sidecar {
    async fn start(config: &std::path::Path) -> Sidecar {
        let mut child = Command::new(workspace_bin("switchyard-sidecar", "switchyard-sidecar"))
            .arg("run")
            .arg("--config")
            .arg(config)
            .args(["--calls-token-file", &crate::common::calls_token_file()])
            .env("SWITCHYARD_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start switchyard-sidecar");
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let kept = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                eprintln!("[sidecar] {line}");
                let mut log = kept.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = within("the ready line", STEP, stdout.next_line())
            .await
            .unwrap()
            .expect("a line on stdout");
        let (_, rest) = line.split_once(", calls on ").unwrap();
        let (calls_addr, _) = rest.split_once(", http on ").unwrap();
        Sidecar {
            _child: child,
            calls_addr: calls_addr.to_owned(),
            log,
        }
    }

    async fn call(&self, tool: &str, arguments: Value) -> Result<String, tonic::Status> {
        let mut client = crate::common::calls_client(&self.calls_addr).await;
        let r = within(
            "a call",
            STEP,
            client.call_tool(SidecarCallRequest {
                params_json: json!({"name": tool, "arguments": arguments}).to_string(),
                ..Default::default()
            }),
        )
        .await?;
        let v: Value = serde_json::from_str(&r.get_ref().result_json).unwrap();
        Ok(text(&v).to_owned())
    }

    /// A call that fails at once, UNAVAILABLE, with `message`.
    async fn refused_at_once(&self, message: &str) {
        let started = Instant::now();
        let e = self
            .call("echo", json!({"message": "x"}))
            .await
            .unwrap_err();
        assert!(started.elapsed() < AT_ONCE, "took {:?}", started.elapsed());
        assert_eq!(e.code(), Code::Unavailable, "{e:?}");
        assert_eq!(e.message(), message);
    }
}

fn access_token(state: &str, token: &str, generation: u64, reason: &str) -> pb::AccessToken {
    pb::AccessToken {
        state: state.into(),
        access_token: token.into(),
        generation,
        expires_at_ms: if token.is_empty() {
            0
        } else {
            1_900_000_000_000
        },
        reason: reason.into(),
    }
}

/// Waits for a status report with `last_error`.
async fn reported_status(cp: &mut FakeControlPlane, last_error: &str) -> UpstreamStatus {
    let r = cp
        .report(
            &format!("status {last_error:?}"),
            |r| matches!(r, sidecar_report::Report::Status(s) if s.last_error == last_error),
        )
        .await;
    let sidecar_report::Report::Status(s) = r else {
        unreachable!()
    };
    s
}

#[tokio::test]
async fn end_to_end_the_token_comes_on_the_report_stream_and_never_reaches_the_log() {
    let server = http_stub(&[("STUB_HTTP_BEARER", RIGHT)]).await;
    let mut cp = FakeControlPlane::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sidecar.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nname = \"oauthy\"\ntransport = \"http\"\nurl = \"{}\"\nauth = \"oauth\"\n[sidecar]\ncontrol_plane = \"{}\"\n",
            server.url, cp.url
        ),
    )
    .unwrap();
    let sidecar = Sidecar::start(&config).await;
    cp.register().await;

    // No token yet: reported down, saying why; calls fail at once.
    let waiting = "server oauthy: waiting for the control plane's access token";
    let s = reported_status(&mut cp, waiting).await;
    assert_eq!(s.state, "down");
    sidecar.refused_at_once(waiting).await;

    // Not authorized yet.
    let reason =
        "server oauthy needs authorization by an admin: switchyard servers authorize oauthy";
    assert_eq!(
        cp.send_access_token(access_token("needs_authorization", "", 0, reason)),
        1
    );
    reported_status(&mut cp, reason).await;
    sidecar.refused_at_once(reason).await;
    let check = checker(&server.url);
    let stats = json_tool(&check, "stats").await;
    assert_eq!(stats["initialize"], 1, "only the checker's: {stats}");

    // A token the server refuses: one token_rejected, then the next token
    // is used and the sidecar connects.
    cp.send_access_token(access_token("authorized", WRONG, 1, ""));
    let r = cp
        .report("token_rejected", |r| {
            matches!(r, sidecar_report::Report::TokenRejected(_))
        })
        .await;
    let sidecar_report::Report::TokenRejected(rejected) = r else {
        unreachable!()
    };
    assert_eq!(
        (rejected.generation, rejected.http_status),
        (1, 401),
        "{rejected:?}"
    );
    assert_eq!(rejected.www_authenticate, "Bearer realm=\"stub\"");
    cp.send_access_token(access_token("authorized", RIGHT, 2, ""));
    let (tools, _) = cp.catalogue().await;
    assert!(tools.contains(&"echo".to_owned()), "{tools:?}");
    assert_eq!(
        sidecar
            .call("echo", json!({"message": "hi"}))
            .await
            .unwrap(),
        "hi"
    );
    assert_eq!(
        cp.token_rejections().len(),
        1,
        "{:?}",
        cp.token_rejections()
    );

    // The report stream breaks as a token is refused: the call waits, the
    // refusal is reported once the stream is back (which brings the same
    // token again after `welcome`: not reported twice), and the token
    // pushed then is used.
    cp.send_access_token(access_token("authorized", WRONG, 3, ""));
    tokio::time::sleep(Duration::from_millis(300)).await;
    cp.break_streams();
    let pending = tokio::spawn({
        let calls_addr = sidecar.calls_addr.clone();
        async move {
            let mut client = crate::common::calls_client(&calls_addr).await;
            let started = Instant::now();
            let r = client
                .call_tool(SidecarCallRequest {
                    params_json: json!({"name": "echo", "arguments": {"message": "again"}})
                        .to_string(),
                    ..Default::default()
                })
                .await;
            (r, started.elapsed())
        }
    });
    let r = cp
        .report(
            "token_rejected of generation 3",
            |r| matches!(r, sidecar_report::Report::TokenRejected(t) if t.generation == 3),
        )
        .await;
    assert!(matches!(r, sidecar_report::Report::TokenRejected(t) if t.http_status == 401));
    cp.send_access_token(access_token("authorized", RIGHT, 4, ""));
    let (r, took) = within("the waiting call", STEP, pending).await.unwrap();
    let r = r.expect("the call, sent again with the new token");
    let v: Value = serde_json::from_str(&r.get_ref().result_json).unwrap();
    assert_eq!(text(&v), "again");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let generations: Vec<u64> = cp.token_rejections().iter().map(|r| r.generation).collect();
    assert_eq!(generations, vec![1, 3]);

    // Revoked: down with the reason, calls fail at once.
    let revoked =
        "server oauthy needs to be re-authorized by an admin: switchyard servers authorize oauthy";
    cp.send_access_token(access_token("needs_reauthorization", "", 4, revoked));
    let s = reported_status(&mut cp, revoked).await;
    assert_eq!(s.state, "down");
    sidecar.refused_at_once(revoked).await;

    // The log saw the tokens come and go, never a token.
    let log = sidecar.log.lock().unwrap().clone();
    assert!(log.contains("access token received"), "{log}");
    assert!(log.contains("generation=2"), "{log}");
    assert!(!log.contains(RIGHT), "the token is in the log");
    assert!(
        !log.contains(crate::common::CALLS_TOKEN),
        "the calls token is in the log"
    );
    assert!(!log.contains(WRONG), "the refused token is in the log");
}
