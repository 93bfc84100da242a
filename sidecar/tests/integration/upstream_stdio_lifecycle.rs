//! Stdio process lifecycle against real server processes (`crashy.py`):
//! crashes and kill -9 with calls pending, restarts with backoff and no
//! replay, one start for many concurrent first calls, cancellation,
//! per-request timeouts, graceful and forced shutdown, spawn failures.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use switchyard_sidecar::upstream::{
    RestartPolicy, StdioConfig, TransportConfig, Upstream, UpstreamConfig, UpstreamError,
};
use switchyard_test_support::stub_script;
use tempfile::NamedTempFile;

use crate::common::{HEAVY, counter, upstream, upstream_with_registry};

/// Upper bound on any single wait; a bug fails the test instead of hanging it.
const LIMIT: Duration = Duration::from_secs(30);

fn config(env: &[(&str, &Path)]) -> UpstreamConfig {
    config_with(
        "crashy",
        &env.iter()
            .map(|(k, v)| (*k, v.display().to_string()))
            .collect::<Vec<_>>(),
    )
}

fn config_with(name: &str, env: &[(&str, String)]) -> UpstreamConfig {
    UpstreamConfig::new(
        name,
        TransportConfig::Stdio(StdioConfig {
            command: "python3".into(),
            args: vec![stub_script("crashy.py").display().to_string()],
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            cwd: None,
        }),
    )
}

async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut).await.expect("timed out")
}

/// Polls `condition` (every 10 ms) until it holds; fails after [`LIMIT`].
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(LIMIT, async {
        while !condition() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "timed out waiting for {what}");
}

async fn call(up: &Upstream, tool: &str, arguments: Value) -> Result<Value, UpstreamError> {
    within(up.call_tool(json!({"name": tool, "arguments": arguments}))).await
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {result}"))
        .to_owned()
}

async fn echo(up: &Upstream, message: &str) -> String {
    text_of(&call(up, "echo", json!({"message": message})).await.unwrap())
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `STUB_CALL_LOG` entries: (tool name, upstream request id).
fn call_log(path: &Path) -> Vec<(String, Value)> {
    lines(path)
        .iter()
        .map(|l| {
            let (name, id) = l.split_once(' ').unwrap();
            (name.to_owned(), serde_json::from_str(id).unwrap())
        })
        .collect()
}

fn logged_names(path: &Path) -> Vec<String> {
    call_log(path).into_iter().map(|(name, _)| name).collect()
}

/// Starts `tool` calls in the background and waits until the server has
/// received all of them (they are then pending upstream).
async fn pending_calls(
    up: &Upstream,
    log: &Path,
    tool: &str,
    arguments: Value,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<Value, UpstreamError>>> {
    let before = logged_names(log).iter().filter(|t| *t == tool).count();
    let handles = (0..n)
        .map(|_| {
            let up = up.clone();
            let params = json!({"name": tool, "arguments": arguments});
            tokio::spawn(async move { up.call_tool(params).await })
        })
        .collect();
    eventually(&format!("{n} `{tool}` calls to reach the server"), || {
        logged_names(log).iter().filter(|t| *t == tool).count() == before + n
    })
    .await;
    handles
}

async fn cancelled_ids(up: &Upstream) -> Vec<Value> {
    serde_json::from_str(&text_of(
        &call(up, "cancelled_ids", json!({})).await.unwrap(),
    ))
    .unwrap()
}

fn assert_exited(err: &UpstreamError, status: &str) {
    match err {
        UpstreamError::Exited {
            server, status: s, ..
        } => {
            assert_eq!(server, "crashy");
            assert!(s.contains(status), "status {s:?} should contain {status:?}");
        }
        other => panic!("expected Exited, got {other:?}"),
    }
    let shown = err.to_string();
    assert!(
        shown.contains("server crashy") && shown.contains(status),
        "{shown}"
    );
}

/// A server that writes its secrets to stderr (its arguments, a token from
/// its environment) before it crashes: the exit report and the log show
/// them `[redacted]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_a_server_writes_to_stderr_are_scrubbed() {
    let mut cfg = config_with(
        "crashy",
        &[
            ("STUB_ECHO_SECRETS", "1".into()),
            ("API_TOKEN", "env-SECRET-2".into()),
        ],
    );
    if let TransportConfig::Stdio(s) = &mut cfg.transport {
        s.args
            .extend(["--api-key".into(), "arg-SECRET-1".into(), "-v".into()]);
    }
    let up = upstream(cfg);
    within(up.connect()).await.unwrap();
    let err = call(&up, "crash", json!({"code": 3})).await.unwrap_err();
    let UpstreamError::Exited { stderr_tail, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(
        stderr_tail.contains("unrecognized arguments: ")
            && stderr_tail.contains("--api-key [redacted] -v")
            && stderr_tail.contains("token is [redacted]"),
        "{stderr_tail}"
    );
    assert!(!stderr_tail.contains("SECRET"), "{stderr_tail}");
}

/// A server that echoes its secrets in what it answers (a JSON-RPC error's
/// message and data, a result with `isError` and `_meta`, a log message,
/// its arguments): what reaches the caller shows them `[redacted]`, and
/// everything else as sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_a_server_answers_are_scrubbed() {
    let token = "env-SECRET-2-abcdef";
    let mut cfg = config_with("crashy", &[("API_TOKEN", token.into())]);
    if let TransportConfig::Stdio(s) = &mut cfg.transport {
        s.args
            .extend(["--api-key".into(), "arg-SECRET-1-ghijk".into(), "-v".into()]);
    }
    let up = upstream(cfg);
    within(up.connect()).await.unwrap();

    let err = call(&up, "leak", json!({"as": "error"})).await.unwrap_err();
    assert_eq!(
        err.error_object(),
        Some(json!({
            "code": -32603,
            "message": "invalid token [redacted]",
            "data": {"sent": "[redacted]", "length": token.len()}
        })),
        "{err:?}"
    );
    let result = call(&up, "leak", json!({"as": "result"})).await.unwrap();
    assert_eq!(
        result,
        json!({
            "content": [{"type": "text", "text": "refused: token [redacted]"}],
            "isError": true,
            "_meta": {"token": "[redacted]"}
        })
    );
    let mut notifications = up.subscribe();
    let logged = call(&up, "leak", json!({"as": "log"})).await.unwrap();
    assert_eq!(text_of(&logged), "logged");
    let log = within(async {
        loop {
            let msg = notifications.recv().await.unwrap();
            if msg["method"] == "notifications/message" {
                return msg;
            }
        }
    })
    .await;
    assert_eq!(
        log["params"]["data"],
        json!({"token": "[redacted]"}),
        "{log}"
    );
    let argv = text_of(&call(&up, "argv", json!({})).await.unwrap());
    assert_eq!(argv, r#"["--api-key", "[redacted]", "-v"]"#);
    up.shutdown(Duration::from_secs(1)).await;
}

fn is_running(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok()
}

// ---- 7. crash with calls pending -----------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_fails_every_pending_call_at_once() {
    let log = NamedTempFile::new().unwrap();
    let mut cfg = config(&[("STUB_CALL_LOG", log.path())]);
    cfg.request_timeout = Duration::from_secs(60);
    let up = upstream(cfg);
    within(up.connect()).await.unwrap();
    let pid = up.pid().unwrap();
    let hangs = pending_calls(&up, log.path(), "hang", json!({}), 4).await;

    let crashed_at = Instant::now();
    let err = call(&up, "crash", json!({"code": 3})).await.unwrap_err();
    assert_exited(&err, "exit status: 3");
    for hang in hangs {
        let err = within(hang).await.unwrap().unwrap_err();
        assert_exited(&err, "exit status: 3");
        let UpstreamError::Exited { stderr_tail, .. } = &err else {
            unreachable!()
        };
        assert!(
            stderr_tail.contains("fatal: simulated crash"),
            "{stderr_tail}"
        );
        assert!(
            stderr_tail.contains(&format!("STUB-CRASH-MARKER pid={pid} code=3")),
            "{stderr_tail}"
        );
        assert!(
            err.to_string()
                .contains("last stderr line: STUB-CRASH-MARKER"),
            "{err}"
        );
    }
    let took = crashed_at.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "pending calls failed only after {took:?}"
    );
    up.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_half_a_response_fails_cleanly() {
    let log = NamedTempFile::new().unwrap();
    let up = upstream(config(&[("STUB_CALL_LOG", log.path())]));
    within(up.connect()).await.unwrap();
    let hangs = pending_calls(&up, log.path(), "hang", json!({}), 1).await;
    // The server writes half of the crash call's response, then exits.
    let err = call(&up, "crash", json!({"code": 5, "partial": true}))
        .await
        .unwrap_err();
    assert_exited(&err, "exit status: 5");
    for hang in hangs {
        assert_exited(&within(hang).await.unwrap().unwrap_err(), "exit status: 5");
    }
    up.shutdown(Duration::from_secs(1)).await;
}

// ---- 8. kill -9 ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_fails_the_pending_call_with_the_signal() {
    let log = NamedTempFile::new().unwrap();
    let mut cfg = config(&[("STUB_CALL_LOG", log.path())]);
    cfg.restart.eager = false;
    let up = upstream(cfg);
    let pid: u32 = text_of(&call(&up, "pid", json!({})).await.unwrap())
        .parse()
        .unwrap();
    assert_eq!(up.pid(), Some(pid));
    let mut hangs = pending_calls(&up, log.path(), "hang", json!({}), 1).await;

    let killed_at = Instant::now();
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL).unwrap();
    let err = within(hangs.pop().unwrap()).await.unwrap().unwrap_err();
    assert_exited(&err, "signal: 9");
    assert!(killed_at.elapsed() < Duration::from_secs(5));
    up.shutdown(Duration::from_secs(1)).await;
}

// ---- 9. restart ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_server_is_restarted_and_nothing_is_replayed() {
    let log = NamedTempFile::new().unwrap();
    let mut cfg = config(&[("STUB_CALL_LOG", log.path())]);
    cfg.restart = RestartPolicy {
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_secs(1),
        eager: true,
        ..RestartPolicy::default()
    };
    let (up, registry) = upstream_with_registry(cfg);
    within(up.connect()).await.unwrap();
    let first = up.pid().unwrap();
    let mut hangs = pending_calls(&up, log.path(), "hang", json!({}), 1).await;

    assert_exited(
        &call(&up, "crash", json!({"code": 3})).await.unwrap_err(),
        "exit status: 3",
    );
    assert_exited(
        &within(hangs.pop().unwrap()).await.unwrap().unwrap_err(),
        "exit status: 3",
    );

    // Eager: the new process comes up and negotiates without a request.
    eventually("the eager restart", || {
        up.negotiated().is_some() && up.pid().is_some_and(|p| p != first)
    })
    .await;
    let second: u32 = text_of(&call(&up, "pid", json!({})).await.unwrap())
        .parse()
        .unwrap();
    assert_ne!(second, first, "the call runs in a new process");
    assert_eq!(up.pid(), Some(second));
    assert!(!is_running(first));
    assert_eq!(echo(&up, "after the restart").await, "after the restart");

    assert_eq!(up.connection_attempts(), 2);
    assert_eq!(
        counter(
            &registry,
            "switchyard_sidecar_upstream_restarts_total",
            &[("server", "crashy")]
        ),
        1
    );
    // The `hang` pending at the crash was not sent again to the new process.
    assert_eq!(logged_names(log.path()), ["hang", "crash", "pid", "echo"]);
    up.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_consecutive_crashes_back_off_exponentially_up_to_the_cap() {
    // It times restarts: not while a heavy test loads the machine.
    let _heavy = HEAVY.lock().await;
    let starts = NamedTempFile::new().unwrap();
    let mut cfg = config(&[("STUB_START_LOG", starts.path())]);
    cfg.restart = RestartPolicy {
        initial_backoff: Duration::from_millis(200),
        max_backoff: Duration::from_millis(800),
        reset_after: Duration::from_secs(60),
        eager: true,
    };
    let (up, registry) = upstream_with_registry(cfg);
    within(up.connect()).await.unwrap();
    const CRASHES: usize = 6;
    for _ in 0..CRASHES {
        assert_exited(
            &call(&up, "crash", json!({"code": 3})).await.unwrap_err(),
            "exit status: 3",
        );
    }
    // The eager restart after the last crash.
    eventually("the last restart", || {
        lines(starts.path()).len() == CRASHES + 1
    })
    .await;
    let times: Vec<f64> = lines(starts.path())
        .iter()
        .map(|l| l.split_whitespace().nth(1).unwrap().parse().unwrap())
        .collect();
    let gaps: Vec<u64> = times
        .windows(2)
        .map(|w| ((w[1] - w[0]) * 1000.0) as u64)
        .collect();
    eprintln!("gaps between starts (ms): {gaps:?}");

    // Each gap is the backoff plus the new process's start, handshake and
    // crash (~0.1 s, more on a loaded machine): 200, 400, then 800 ms
    // capped. Timers never fire early, so the floors are exact; the upper
    // bounds are loose: a constant 800 ms backoff would break the first,
    // an uncapped one (1.6, 3.2, 6.4 s) the others.
    let floor = [200, 400, 800, 800, 800, 800];
    for (i, (gap, floor)) in gaps.iter().zip(floor).enumerate() {
        assert!(
            *gap >= floor,
            "gap {i} is {gap} ms, below the {floor} ms backoff: {gaps:?}"
        );
    }
    assert!(
        gaps[0] < 800,
        "the first delay is the initial backoff: {gaps:?}"
    );
    assert!(
        gaps[4] < 2400 && gaps[5] < 2400,
        "the delay is capped: {gaps:?}"
    );
    assert_eq!(
        counter(
            &registry,
            "switchyard_sidecar_upstream_restarts_total",
            &[("server", "crashy")]
        ),
        CRASHES as u64
    );
    up.shutdown(Duration::from_secs(1)).await;
}

// ---- 10. one start for many first calls ----------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_first_calls_start_the_server_once() {
    let starts = NamedTempFile::new().unwrap();
    let up = upstream(config_with(
        "crashy",
        &[
            ("STUB_START_LOG", starts.path().display().to_string()),
            ("STUB_START_DELAY_MS", "500".into()),
        ],
    ));
    let calls = (0..100).map(|i| {
        let up = up.clone();
        tokio::spawn(async move {
            let message = format!("call {i}");
            (message.clone(), echo(&up, &message).await)
        })
    });
    for (sent, got) in within(futures::future::join_all(calls))
        .await
        .into_iter()
        .map(Result::unwrap)
    {
        assert_eq!(got, sent);
    }
    assert_eq!(lines(starts.path()).len(), 1, "exactly one process start");
    assert_eq!(up.connection_attempts(), 1);
    up.shutdown(Duration::from_secs(1)).await;
}

// ---- 11. cancellation ----------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_call_cancels_it_upstream() {
    let log = NamedTempFile::new().unwrap();
    let up = upstream(config(&[("STUB_CALL_LOG", log.path())]));
    within(up.connect()).await.unwrap();

    let started = Instant::now();
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        up.call_tool(json!({"name": "slow", "arguments": {"ms": 5000}})),
    )
    .await;
    assert!(dropped.is_err(), "the slow call cannot have finished");
    assert!(started.elapsed() < Duration::from_secs(2));

    // The cancellation goes out before any later request on the same stdin.
    let cancelled = cancelled_ids(&up).await;
    eventually("the slow call in the call log", || {
        logged_names(log.path()).contains(&"slow".to_owned())
    })
    .await;
    let (_, id) = call_log(log.path())
        .into_iter()
        .find(|(name, _)| name == "slow")
        .unwrap();
    assert!(id.is_u64(), "numeric upstream id, got {id}");
    assert_eq!(cancelled, std::slice::from_ref(&id));

    // An aborted task cancels its call too.
    let mut aborted = pending_calls(&up, log.path(), "slow", json!({"ms": 5000}), 1).await;
    let (_, aborted_id) = call_log(log.path()).pop().unwrap();
    aborted[0].abort();
    assert!(
        within(aborted.pop().unwrap())
            .await
            .unwrap_err()
            .is_cancelled()
    );
    let ids = within(async {
        loop {
            let ids = cancelled_ids(&up).await;
            if ids.len() == 2 {
                return ids;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(ids, [id, aborted_id]);
    assert_eq!(echo(&up, "still fine").await, "still fine");
    up.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_reply_to_a_cancelled_call_is_dropped() {
    let log = NamedTempFile::new().unwrap();
    let cfg = config_with(
        "crashy",
        &[
            ("STUB_CALL_LOG", log.path().display().to_string()),
            ("STUB_IGNORE_CANCEL", "1".into()),
        ],
    );
    let (up, registry) = upstream_with_registry(cfg);
    within(up.connect()).await.unwrap();
    let pid = up.pid();

    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        up.call_tool(json!({"name": "slow", "arguments": {"ms": 600}})),
    )
    .await;
    assert!(dropped.is_err());
    // A call in flight while the late reply arrives gets its own answer.
    let next = call(&up, "slow", json!({"ms": 900})).await.unwrap();
    assert_eq!(text_of(&next), "slept 900 ms");
    let late = "switchyard_sidecar_upstream_skipped_messages_total";
    eventually("the late reply", || {
        counter(&registry, late, &[("reason", "late_response")]) == 1
    })
    .await;
    assert_eq!(
        echo(&up, "after the late reply").await,
        "after the late reply"
    );
    assert_eq!(cancelled_ids(&up).await.len(), 1);
    assert_eq!(up.pid(), pid);
    up.shutdown(Duration::from_secs(1)).await;
}

// ---- 12. per-request timeout ---------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_over_its_timeout_fails_and_the_connection_carries_on() {
    let mut cfg = config(&[]);
    cfg.request_timeout = Duration::from_millis(500);
    let up = upstream(cfg);
    within(up.connect()).await.unwrap();
    let pid = up.pid();

    let started = Instant::now();
    let err = call(&up, "slow", json!({"ms": 3000})).await.unwrap_err();
    let took = started.elapsed();
    match &err {
        UpstreamError::Timeout {
            server,
            method,
            after,
        } => {
            assert_eq!(server, "crashy");
            assert_eq!(method, "tools/call");
            assert_eq!(*after, Duration::from_millis(500));
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(err.to_string().contains("tools/call"), "{err}");
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(2500),
        "{took:?}"
    );

    assert_eq!(echo(&up, "still here").await, "still here");
    assert_eq!(up.pid(), pid, "no restart");
    // The timed-out request was cancelled upstream.
    assert_eq!(cancelled_ids(&up).await.len(), 1);
    up.shutdown(Duration::from_secs(1)).await;
}

// ---- 13. shutdown --------------------------------------------------------

/// Shuts down with `grace` and returns how long it took; the process is gone.
async fn timed_shutdown(env: &[(&str, String)], grace: Duration) -> Duration {
    let up = upstream(config_with("crashy", env));
    within(up.connect()).await.unwrap();
    let pid = up.pid().unwrap();
    let started = Instant::now();
    within(up.shutdown(grace)).await;
    let took = started.elapsed();
    assert!(
        !is_running(pid),
        "process {pid} still exists after shutdown"
    );
    let err = call(&up, "echo", json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(matches!(err, UpstreamError::Closed { .. }), "{err:?}");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_stdin_and_the_server_exits() {
    let grace = Duration::from_secs(3);
    let took = timed_shutdown(&[], grace).await;
    assert!(
        took < grace,
        "closing stdin should be enough; took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sends_sigterm_when_stdin_close_is_ignored() {
    let grace = Duration::from_secs(1);
    let took = timed_shutdown(&[("STUB_IGNORE_EOF", "1".into())], grace).await;
    assert!(
        took >= grace && took < 2 * grace,
        "SIGTERM after one grace period; took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sends_sigkill_when_sigterm_is_ignored() {
    let grace = Duration::from_millis(400);
    let env = [
        ("STUB_IGNORE_EOF", "1".into()),
        ("STUB_IGNORE_SIGTERM", "1".into()),
    ];
    let took = timed_shutdown(&env, grace).await;
    assert!(
        took >= 2 * grace && took < 2 * grace + Duration::from_millis(1500),
        "SIGKILL after two grace periods; took {took:?}"
    );
}

// ---- 14. spawn failure ---------------------------------------------------

#[tokio::test]
async fn a_missing_command_fails_fast_with_spawn() {
    let mut cfg = UpstreamConfig::new(
        "ghost",
        TransportConfig::Stdio(StdioConfig {
            command: "switchyard-no-such-command".into(),
            args: vec!["--serve".into()],
            ..StdioConfig::default()
        }),
    );
    // A long backoff, so a request that waited for the next attempt
    // would take at least 20 s.
    cfg.restart = RestartPolicy {
        initial_backoff: Duration::from_secs(20),
        max_backoff: Duration::from_secs(20),
        ..RestartPolicy::default()
    };
    let up = upstream(cfg);
    let started = Instant::now();
    let err = within(up.connect()).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    match &err {
        UpstreamError::Spawn {
            server,
            command,
            source,
        } => {
            assert_eq!(server, "ghost");
            assert_eq!(command, "switchyard-no-such-command --serve");
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected Spawn, got {other:?}"),
    }
    let shown = err.to_string();
    assert!(
        shown.contains("server ghost") && shown.contains("switchyard-no-such-command"),
        "{shown}"
    );
    assert!(err.is_connection_failure());
    // Later requests do not wait out the 20 s backoff: each waits at most
    // a second (REQUEST_BACKOFF) for its own attempt, which fails the
    // same way.
    for _ in 0..3 {
        let started = Instant::now();
        let again = within(up.call_tool(json!({"name": "echo"})))
            .await
            .unwrap_err();
        assert!(matches!(again, UpstreamError::Spawn { .. }), "{again:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the request waited for the next attempt: {:?}",
            started.elapsed()
        );
    }
    assert_eq!(up.connection_attempts(), 4, "one attempt per request");
    // What waits for a connection (the watcher, `connect`) waits out the
    // whole backoff.
    assert!(
        tokio::time::timeout(Duration::from_secs(2), up.connect())
            .await
            .is_err(),
        "connect waits for the attempt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_handle_stops_the_server() {
    // Stopping takes closing stdin (the stub then exits at once).
    let up = upstream(config(&[]));
    within(up.connect()).await.unwrap();
    let pid = up.pid().unwrap();
    drop(up);
    eventually("the server to stop", || !is_running(pid)).await;
}
