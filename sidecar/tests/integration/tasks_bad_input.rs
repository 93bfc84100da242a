//! Stage B with misbehaving MCP task servers, through the sidecar's real
//! gRPC API: `tests/peers/servers/bad_tasks.py` (a real process, both
//! eras) answers with malformed `CreateTaskResult`s, `tasks/get` answers
//! about another task, unknown statuses, malformed `inputRequests` and
//! results over the message limit. Test support's fake control plane
//! stands in for the control plane and keeps every `UpdateBackgroundCall`
//! (a terminal record is final, as in the real one).
//!
//! The rule checked: the error names what was wrong and where, no other
//! task's result is delivered, a task the answer names is not left
//! running, and the call ends (it does not poll a hopeless task forever).

use serde_json::{Value, json};
use std::time::Duration;
use switchyard_proto::v1::{BackgroundCall, BackgroundPolicy};
use switchyard_sidecar::background::MAX_TASK_INPUT_REQUESTS;
use switchyard_sidecar::upstream::{EraPreference, StdioConfig, TransportConfig, UpstreamConfig};
use switchyard_test_support as support;
use switchyard_test_support::fake_control_plane::FakeControlPlane;
use tonic::Code;

use crate::common::LIMIT;
use crate::common::tasks::{Side, request, side_with};

/// `bad_tasks.py` in `era` ("2025" or "2026"), accepting messages of up to
/// `max_message_bytes`.
fn bad_tasks(era: &str, max_message_bytes: usize) -> UpstreamConfig {
    let mut c = UpstreamConfig::new(
        "bad",
        TransportConfig::Stdio(StdioConfig {
            command: "python3".into(),
            args: vec![
                support::stub_script("bad_tasks.py")
                    .to_str()
                    .unwrap()
                    .to_owned(),
            ],
            env: [("STUB_ERA".to_owned(), era.to_owned())].into(),
            ..StdioConfig::default()
        }),
    );
    c.era = if era == "2026" {
        EraPreference::Modern
    } else {
        EraPreference::Legacy
    };
    c.max_message_bytes = max_message_bytes;
    c
}

/// The sidecar's call service on `config`, reporting to `registry`, which
/// declines every question; background calls fail after `failure_limit`
/// of poll errors.
async fn side(
    config: UpstreamConfig,
    registry: &FakeControlPlane,
    failure_limit: Duration,
) -> Side {
    registry.decline_all();
    side_with(config, registry, "bad", failure_limit).await
}

fn policy(id: &str, auto_after_ms: u64) -> BackgroundPolicy {
    crate::common::tasks::policy("bad", id, auto_after_ms)
}

impl Side {
    /// The stub's `stats` tool: cancelled task ids, `tasks/get` counts.
    async fn stats(&self) -> Value {
        let r = self
            .call(request("stats", json!({}), None))
            .await
            .expect("stats");
        let result: Value = serde_json::from_str(&r.result_json).unwrap();
        serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
    }
}

// ---- malformed CreateTaskResult ------------------------------------------------------

async fn malformed_create(era: &str) {
    let registry = FakeControlPlane::start().await;
    let side = side(bad_tasks(era, 8 << 20), &registry, LIMIT).await;
    for (variant, needle) in [
        ("no_id", "without taskId"),
        ("id_number", "taskId is not a string: 5"),
        ("empty_id", "taskId is an empty string"),
        ("huge_id", "taskId is 100000 bytes long"),
        ("unknown_status", "status \"running\" is not a task status"),
    ] {
        let id = format!("create-{variant}");
        let e = side
            .call(request(
                "bad_create",
                json!({"variant": variant}),
                Some(policy(&id, 0)),
            ))
            .await
            .expect_err(variant);
        assert_eq!(e.code(), Code::Internal, "{variant}: {e:?}");
        let m = e.message();
        assert!(
            m.contains("server bad")
                && m.contains("tools/call bad_create: bad CreateTaskResult")
                && m.contains(needle),
            "{variant}: {m}"
        );
        assert!(
            m.len() < 2000,
            "{variant}: the message stays short: {} bytes",
            m.len()
        );
        assert!(
            registry.updates(&id).is_empty(),
            "{variant}: nothing registered"
        );
    }
    // The task the malformed answer did name is cancelled, not left running.
    let mut cancelled = Value::Null;
    for _ in 0..100 {
        cancelled = side.stats().await["cancelled"].clone();
        if cancelled.as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(cancelled, json!(["t-unknown"]));
    // The process keeps serving.
    assert!(side.stats().await["gets"].is_object());
}

#[tokio::test]
async fn malformed_create_task_results_are_clear_errors_2025() {
    malformed_create("2025").await;
}

#[tokio::test]
async fn malformed_create_task_results_are_clear_errors_2026() {
    malformed_create("2026").await;
}

// ---- tasks/get misbehaving ----------------------------------------------------

/// `bad_poll {variant}` moves to the background (its polls fail in the
/// foreground) and fails there after the 1 s failure limit: the record.
async fn fails_in_the_background(era: &str, variant: &str, id: &str) -> BackgroundCall {
    let registry = FakeControlPlane::start().await;
    let side = side(bad_tasks(era, 8 << 20), &registry, Duration::from_secs(1)).await;
    let r = side
        .call(request(
            "bad_poll",
            json!({"variant": variant}),
            Some(policy(id, 500)),
        ))
        .await
        .expect("the call moves");
    assert!(r.background.is_some(), "{variant}: moved: {r:?}");
    let done = registry.finished(id).await;
    // Reported on changes only: registered, the first poll error (and a
    // status change), the end; not a write or two per poll.
    let updates = registry.updates(id);
    assert!(
        updates.len() <= 6,
        "{variant}: {} updates: {updates:?}",
        updates.len()
    );
    for u in registry.all_updates() {
        assert!(
            matches!(u.status.as_str(), "working" | "input_required" | "failed"),
            "{variant}: only known statuses reported: {u:?}"
        );
        let text = format!("{u:?}");
        assert!(
            !text.contains("SECRET"),
            "{variant}: another task's result: {text}"
        );
    }
    assert!(side.stats().await["gets"].is_object(), "still serving");
    done
}

#[tokio::test]
async fn a_tasks_get_about_another_task_is_never_taken_for_this_one_2025() {
    let done = fails_in_the_background("2025", "other_id", "other-2025").await;
    assert_eq!(done.status, "failed");
    assert!(
        done.status_message
            .contains("tasks/get t-1: the answer is about another task (\"t-other\")"),
        "{done:?}"
    );
    assert!(done.result.is_none());
}

#[tokio::test]
async fn a_tasks_get_about_another_task_is_never_taken_for_this_one_2026() {
    let done = fails_in_the_background("2026", "other_id", "other-2026").await;
    assert_eq!(done.status, "failed");
    assert!(
        done.status_message.contains("about another task"),
        "{done:?}"
    );
}

#[tokio::test]
async fn an_unknown_task_status_fails_the_call_naming_it() {
    let done = fails_in_the_background("2025", "unknown_status", "unknown").await;
    assert_eq!(done.status, "failed");
    assert!(
        done.status_message
            .contains("tasks/get: task t-1: status \"sleeping\" is not a task status"),
        "{done:?}"
    );
    assert!(done.last_poll_error.contains("sleeping"), "{done:?}");
}

#[tokio::test]
async fn malformed_input_requests_fail_the_call_naming_them() {
    let done = fails_in_the_background("2026", "bad_inputs", "inputs").await;
    assert_eq!(done.status, "failed");
    assert!(
        done.status_message
            .contains("tasks/get t-1: inputRequests is not an object (key -> request): \"please\""),
        "{done:?}"
    );
}

// ---- results over the message limit ------------------------------------------------

async fn too_large(era: &str) {
    let registry = FakeControlPlane::start().await;
    // Retrying would take the whole failure limit (2 min): the test fails
    // by timeout unless the too-large result ends the call at once.
    let side = side(bad_tasks(era, 1 << 20), &registry, Duration::from_secs(120)).await;
    // In the foreground: a clear error at once.
    let started = std::time::Instant::now();
    let e = side
        .call(request(
            "bad_poll",
            json!({"variant": "big_result", "bytes": 2_000_000}),
            Some(policy("big-fg", 20_000)),
        ))
        .await
        .expect_err("too large");
    assert!(e.message().contains("over the 1048576-byte limit"), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert!(registry.updates("big-fg").is_empty());
    // In the background: failed, naming the limit.
    let r = side
        .call(request(
            "bad_poll",
            json!({"variant": "big_result", "bytes": 2_000_000}),
            Some(policy("big-bg", 0)),
        ))
        .await
        .expect("moved");
    assert!(r.background.is_some());
    let done = registry.finished("big-bg").await;
    assert_eq!(done.status, "failed", "{done:?}");
    assert!(
        done.status_message.contains("over the 1048576-byte limit"),
        "{done:?}"
    );
    assert!(side.stats().await["gets"].is_object(), "still serving");
}

#[tokio::test]
async fn a_result_over_the_message_limit_fails_at_once_2025() {
    too_large("2025").await;
}

#[tokio::test]
async fn a_result_over_the_message_limit_fails_at_once_2026() {
    too_large("2026").await;
}

// ---- a server that never stops asking ----------------------------------------------

#[tokio::test]
async fn a_task_that_never_stops_asking_is_cancelled_and_fails() {
    let registry = FakeControlPlane::start().await;
    let side = side(bad_tasks("2026", 8 << 20), &registry, LIMIT).await;
    let r = side
        .call(request(
            "bad_poll",
            json!({"variant": "ask_forever"}),
            Some(policy("asks", 0)),
        ))
        .await
        .expect("moved");
    assert!(r.background.is_some());
    let done = registry.finished("asks").await;
    assert_eq!(done.status, "failed", "{done:?}");
    assert!(
        done.status_message.contains(&format!(
            "the server asked for more than {MAX_TASK_INPUT_REQUESTS} inputs (inputRequests) for task t-1; it was cancelled"
        )),
        "{done:?}"
    );
    let asked = registry.interacts().len();
    assert_eq!(
        asked, MAX_TASK_INPUT_REQUESTS,
        "questions asked in the session"
    );
    assert!(
        registry
            .interacts()
            .iter()
            .all(|i| i.session_id == "S1" && i.run_id.is_empty()),
        "asked in the initiator's session, no run"
    );
    let stats = side.stats().await;
    assert_eq!(stats["cancelled"], json!(["t-1"]), "{stats}");
}
