//! Stage B through the sidecar's real gRPC API: background calls and MCP
//! tasks against real servers, in both protocol eras. The reference server
//! (`switchyard-reference-server --tasks`, stdio and Streamable HTTP) and
//! `mcp-server-everything` (2025-11-25, `simulate-research-query`) run the
//! tasks; test support's fake control plane stands in for the control
//! plane and records every `UpdateBackgroundCall` (a terminal record is
//! final, as in the real one), answers `Interact` and, for the restart
//! test, hands out `ControlMessage.adopt`.
//!
//! Covered: a task finished within the foreground phase (a normal result);
//! a `required` task tool called without a background policy; a slow task
//! moved to the background (record registered before the answer, with the
//! immediate response) and then completed with the processed result;
//! failed and `isError` tasks; `input_required` answered through `Interact`
//! with the initiator's session and an empty run id (2025 `tasks/result` +
//! related-task, 2026 `inputRequests` + `tasks/update`); cancellation
//! (`tasks/cancel` upstream, record cancelled); a task the server does not
//! know; poll interval clamping (the server's own poll gaps); wait mode for
//! a tool without task support, and stage A's retry of a held retry-safe
//! call whose server exits; the `maxPerTarget` foreground limit; and
//! adoption by a new sidecar process after `kill -9` over HTTP.

use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use switchyard_proto::v1::{BackgroundCall, BackgroundPolicy, SidecarCancelBackgroundRequest};
use switchyard_sidecar::background::get_task;
use switchyard_sidecar::upstream::{
    Era, EraPreference, HttpConfig, StdioConfig, TransportConfig, Upstream, UpstreamConfig,
    UpstreamMetrics,
};
use switchyard_test_support as support;
use switchyard_test_support::fake_control_plane::FakeControlPlane;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::Code;

use crate::common::LIMIT;
use crate::common::tasks::{POLL_MIN, Side, request, side_with};

/// The sidecar's call service on `config`'s server, reporting to
/// `registry` (interactions through its `Interact`).
async fn side(config: UpstreamConfig, registry: &FakeControlPlane) -> Side {
    side_with(config, registry, "ref", Duration::from_secs(60)).await
}

fn stdio(name: &str, command: &std::path::Path, args: &[&str]) -> UpstreamConfig {
    UpstreamConfig::new(
        name,
        TransportConfig::Stdio(StdioConfig {
            command: command.to_str().unwrap().to_owned(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..StdioConfig::default()
        }),
    )
}

fn era_name(era: Era) -> &'static str {
    match era {
        Era::Legacy => "2025-11-25",
        Era::Modern => "2026-07-28",
    }
}

fn pinned(mut c: UpstreamConfig, era: Era) -> UpstreamConfig {
    c.era = match era {
        Era::Legacy => EraPreference::Legacy,
        Era::Modern => EraPreference::Modern,
    };
    c
}

/// The reference server with task tools, over stdio, in `era`.
fn reference(era: Era) -> UpstreamConfig {
    pinned(
        stdio(
            "ref",
            &support::reference_server_bin(),
            &["--tasks", "--era", era_name(era)],
        ),
        era,
    )
}

async fn reference_http(era: Era) -> (support::HttpServer, UpstreamConfig) {
    let mut cmd = Command::new(support::reference_server_bin());
    cmd.args(["--tasks", "--era", era_name(era), "--http", "127.0.0.1:0"]);
    let server = support::start_http_server(cmd, "/mcp").await;
    let config = pinned(
        UpstreamConfig::new(
            "ref",
            TransportConfig::Http(HttpConfig {
                url: server.url.clone(),
                headers: vec![],
            }),
        ),
        era,
    );
    (server, config)
}

fn everything() -> UpstreamConfig {
    pinned(
        stdio("everything", &support::everything_bin(), &["stdio"]),
        Era::Legacy,
    )
}

fn policy(id: &str, auto_after_ms: u64) -> BackgroundPolicy {
    crate::common::tasks::policy("ref", id, auto_after_ms)
}

impl Side {
    /// Calls `tool` with a background policy and expects it to move.
    async fn moved(
        &self,
        tool: &str,
        arguments: Value,
        id: &str,
        auto_after_ms: u64,
    ) -> BackgroundCall {
        let response = self
            .call(request(tool, arguments, Some(policy(id, auto_after_ms))))
            .await
            .unwrap();
        let background = response
            .background
            .expect("the call moved to the background");
        assert!(response.result_json.is_empty() && response.model_text.is_empty());
        background
    }

    fn polls(&self, outcome: &str) -> u64 {
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&self.metrics.gather())
            .unwrap();
        text.lines()
            .filter(|l| {
                l.starts_with("switchyard_sidecar_task_polls_total{")
                    && l.contains(&format!("outcome=\"{outcome}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
            .sum()
    }
}

// ---- foreground ----------------------------------------------------------------

async fn finishes_in_the_foreground(config: UpstreamConfig) {
    let registry = FakeControlPlane::start().await;
    let side = side(config, &registry).await;
    let r = side
        .call(request(
            "task_sleep",
            json!({"ms": 300, "text": "hi", "pollIntervalMs": 100}),
            Some(policy("fg", 20_000)),
        ))
        .await
        .unwrap();
    assert!(r.background.is_none(), "{r:?}");
    assert!(r.model_text.contains("slept 300 ms: hi"), "{r:?}");
    assert_eq!(
        serde_json::from_str::<Value>(&r.structured_content_json).unwrap(),
        json!({"ms": 300, "text": "hi"})
    );
    assert!(registry.updates("fg").is_empty(), "nothing registered");
    assert!(side.polls("ok") >= 1, "tasks/get polled");
    // A required task tool called without a background policy.
    let r = side
        .call(request(
            "task_sleep",
            json!({"ms": 200, "text": "plain", "pollIntervalMs": 100}),
            None,
        ))
        .await
        .unwrap();
    assert!(r.model_text.contains("slept 200 ms: plain"), "{r:?}");
    assert!(side.initiators.is_empty());
    assert!(side.tasks.live().is_empty());
}

#[tokio::test]
async fn a_task_done_in_the_foreground_is_a_normal_result_2025() {
    finishes_in_the_foreground(reference(Era::Legacy)).await;
}

#[tokio::test]
async fn a_task_done_in_the_foreground_is_a_normal_result_2026() {
    finishes_in_the_foreground(reference(Era::Modern)).await;
}

// ---- moved, then completed -----------------------------------------------------------

async fn moves_then_completes(config: UpstreamConfig) {
    let registry = FakeControlPlane::start().await;
    let side = side(config, &registry).await;
    let started = std::time::Instant::now();
    let moved = side
        .moved(
            "task_sleep",
            json!({"ms": 1500, "text": "late", "pollIntervalMs": 200, "immediate": "working on it"}),
            "slow",
            300,
        )
        .await;
    // Answered after the foreground phase, before the task finished.
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(moved.id, "slow");
    assert_eq!(moved.mode, "task");
    assert_eq!(moved.status, "working");
    assert_eq!(moved.immediate_response, "working on it");
    assert_eq!(
        (moved.session_id.as_str(), moved.run_id.as_str()),
        ("S1", "R1")
    );
    assert_eq!(moved.sidecar_id, "sidecar-test");
    assert_eq!(moved.poll_interval_ms, 200);
    assert!(moved.task_id.starts_with("task-"), "{moved:?}");
    assert!(moved.deadline_ms >= moved.created_at_ms + 3_600_000);
    // Registered before the answer.
    assert!(!registry.updates("slow").is_empty());
    assert_eq!(side.tasks.live(), ["slow"]);
    let done = registry.finished("slow").await;
    assert_eq!(done.status, "completed", "{done:?}");
    let result = done.result.expect("the processed result");
    assert!(
        result.model_text.contains("slept 1500 ms: late"),
        "{result:?}"
    );
    assert!(!result.is_error);
    assert_eq!(
        serde_json::from_str::<Value>(&result.structured_content_json).unwrap(),
        json!({"ms": 1500, "text": "late"})
    );
    assert!(done.finished_at_ms > 0);
    // Nothing reported between: the status never changed.
    let updates = registry.updates("slow");
    assert_eq!(updates.len(), 2, "{updates:?}");
    // Live no more.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(side.tasks.live().is_empty());
    assert!(side.initiators.is_empty());
}

#[tokio::test]
async fn a_slow_task_moves_to_the_background_and_completes_2025() {
    moves_then_completes(reference(Era::Legacy)).await;
}

#[tokio::test]
async fn a_slow_task_moves_to_the_background_and_completes_2026() {
    moves_then_completes(reference(Era::Modern)).await;
}

#[tokio::test]
async fn a_slow_task_moves_to_the_background_and_completes_over_http_2025() {
    let (_server, config) = reference_http(Era::Legacy).await;
    moves_then_completes(config).await;
}

#[tokio::test]
async fn a_slow_task_moves_to_the_background_and_completes_over_http_2026() {
    let (_server, config) = reference_http(Era::Modern).await;
    moves_then_completes(config).await;
}

// ---- failures ------------------------------------------------------------------

async fn failures(era: Era) {
    let registry = FakeControlPlane::start().await;
    let side = side(reference(era), &registry).await;
    side.moved(
        "task_fail",
        json!({"ms": 200, "mode": "error", "pollIntervalMs": 100}),
        "err",
        0,
    )
    .await;
    let failed = registry.finished("err").await;
    assert_eq!(failed.status, "failed", "{failed:?}");
    let error: Value = serde_json::from_str(&failed.error_json).unwrap();
    assert_eq!(error["code"], -32603, "{failed:?}");
    assert!(failed.result.is_none());

    side.moved(
        "task_fail",
        json!({"ms": 200, "mode": "isError", "pollIntervalMs": 100}),
        "iserr",
        0,
    )
    .await;
    let done = registry.finished("iserr").await;
    assert_eq!(done.status, "completed", "{done:?}");
    let result = done.result.unwrap();
    assert!(result.is_error);
    assert!(
        result.model_text.contains("tool error on purpose"),
        "{result:?}"
    );

    // In the foreground: a JSON-RPC error of the task is FAILED_PRECONDITION
    // with the error object; isError is a result.
    let e = side
        .call(request(
            "task_fail",
            json!({"ms": 100, "mode": "error", "pollIntervalMs": 100}),
            None,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let details: Value = serde_json::from_slice(e.details()).unwrap();
    assert_eq!(details["code"], -32603);
    let r = side
        .call(request(
            "task_fail",
            json!({"ms": 100, "mode": "isError", "pollIntervalMs": 100}),
            None,
        ))
        .await
        .unwrap();
    assert!(r.model_text.contains("tool error on purpose"), "{r:?}");
}

#[tokio::test]
async fn failed_and_is_error_tasks_2025() {
    failures(Era::Legacy).await;
}

#[tokio::test]
async fn failed_and_is_error_tasks_2026() {
    failures(Era::Modern).await;
}

// ---- input_required ---------------------------------------------------------------

async fn asks_through_interact(config: UpstreamConfig) {
    let registry = FakeControlPlane::start().await;
    registry.answer_with(json!({"name": "Ada"}));
    let side = side(config, &registry).await;
    side.moved(
        "task_ask",
        json!({"ms": 200, "pollIntervalMs": 100}),
        "ask",
        0,
    )
    .await;
    let done = registry.finished("ask").await;
    assert_eq!(done.status, "completed", "{done:?}");
    assert!(done.result.unwrap().model_text.contains("hello Ada"));
    let interacts = registry.interacts();
    assert_eq!(interacts.len(), 1, "asked once: {interacts:?}");
    let asked = &interacts[0];
    assert_eq!(asked.session_id, "S1");
    assert_eq!(asked.run_id, "", "a background-phase card has no run id");
    assert_eq!(asked.tool, "task_ask");
    let params: Value = serde_json::from_str(&asked.params_json).unwrap();
    assert_eq!(params["message"], "Name for the task?");
    // The record showed input_required on the way.
    assert!(
        registry
            .updates("ask")
            .iter()
            .any(|u| u.status == "input_required"),
        "{:?}",
        registry.updates("ask")
    );
}

#[tokio::test]
async fn input_required_is_answered_through_interact_2025() {
    asks_through_interact(reference(Era::Legacy)).await;
}

#[tokio::test]
async fn input_required_is_answered_through_interact_2026() {
    asks_through_interact(reference(Era::Modern)).await;
}

#[tokio::test]
async fn input_required_is_answered_through_interact_over_http_2025() {
    let (_server, config) = reference_http(Era::Legacy).await;
    asks_through_interact(config).await;
}

#[tokio::test]
async fn input_required_is_answered_through_interact_over_http_2026() {
    let (_server, config) = reference_http(Era::Modern).await;
    asks_through_interact(config).await;
}

#[tokio::test]
async fn everything_research_query_asks_and_completes() {
    let registry = FakeControlPlane::start().await;
    registry.answer_with(json!({"interpretation": "snake"}));
    let side = side(everything(), &registry).await;
    side.moved(
        "simulate-research-query",
        json!({"topic": "python", "ambiguous": true}),
        "research",
        0,
    )
    .await;
    let done = registry.finished("research").await;
    assert_eq!(done.status, "completed", "{done:?}");
    let text = done.result.unwrap().model_text;
    assert!(text.contains("snake"), "{text}");
    let interacts = registry.interacts();
    assert_eq!(interacts.len(), 1, "{interacts:?}");
    assert_eq!(
        (
            interacts[0].session_id.as_str(),
            interacts[0].run_id.as_str()
        ),
        ("S1", "")
    );
    // A required task tool in the foreground, no background policy.
    let r = side
        .call(request(
            "simulate-research-query",
            json!({"topic": "rust"}),
            None,
        ))
        .await
        .unwrap();
    assert!(r.model_text.contains("Research Report: rust"), "{r:?}");
}

// ---- cancel, not found, clamping --------------------------------------------------

async fn cancels(era: Era) {
    let registry = FakeControlPlane::start().await;
    let side = side(reference(era), &registry).await;
    let moved = side
        .moved("task_forever", json!({"pollIntervalMs": 100}), "forever", 0)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    registry.cancel("forever");
    let mut client = side.client.clone();
    let found = client
        .cancel_background_call(SidecarCancelBackgroundRequest {
            id: "forever".into(),
            task_id: moved.task_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .found;
    assert!(found);
    assert!(side.tasks.live().is_empty());
    // The server's task is cancelled.
    let state = get_task(&side.upstream, era, &moved.task_id).await.unwrap();
    assert_eq!(state.status, "cancelled");
    // Polling stopped.
    let polls = side.polls("ok");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(side.polls("ok"), polls);
    assert_eq!(registry.record("forever").unwrap().status, "cancelled");
    // Unknown ids are not found.
    let found = client
        .cancel_background_call(SidecarCancelBackgroundRequest {
            id: "nope".into(),
            task_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .found;
    assert!(!found);
}

#[tokio::test]
async fn cancel_sends_tasks_cancel_2025() {
    cancels(Era::Legacy).await;
}

#[tokio::test]
async fn cancel_sends_tasks_cancel_2026() {
    cancels(Era::Modern).await;
}

#[tokio::test]
async fn a_task_the_server_does_not_know_fails() {
    for era in [Era::Legacy, Era::Modern] {
        let registry = FakeControlPlane::start().await;
        let side = side(reference(era), &registry).await;
        let now = switchyard_common::time::now_ms();
        side.tasks.adopt(vec![BackgroundCall {
            id: "ghost".into(),
            server: "ref".into(),
            tool: "task_sleep".into(),
            session_id: "S1".into(),
            mode: "task".into(),
            task_id: "task-00000000000000000000000000000000".into(),
            status: "working".into(),
            created_at_ms: now,
            poll_after_ms: now,
            poll_interval_ms: 100,
            protocol_version: era_name(era).into(),
            ..Default::default()
        }]);
        let failed = registry.finished("ghost").await;
        assert_eq!(failed.status, "failed");
        assert!(
            failed.status_message.contains("task not found"),
            "{failed:?}"
        );
        // Says so, for the control plane: an adopter's "not found" goes back
        // to the task's creator when it is registered.
        assert!(failed.task_not_found, "{failed:?}");
        assert_eq!(side.polls("not_found"), 1);
    }
}

/// Waits (up to [`LIMIT`]) until `f` holds.
async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {LIMIT:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An adopted task the server does not know is not failed at once (chaos
/// defect 1): the sidecar that created it may be alive, its registration
/// lost for a moment, and still polling it in its own stdio server. That
/// creator's result, reported while the adopter waits, is the call's one
/// result; the adopter then stops without reporting a failure.
#[tokio::test]
async fn an_adopted_task_not_found_is_left_to_its_creator() {
    let registry = FakeControlPlane::start().await;
    let side = side(reference(Era::Modern), &registry).await;
    let now = switchyard_common::time::now_ms();
    let record = BackgroundCall {
        id: "elsewhere".into(),
        server: "ref".into(),
        tool: "task_sleep".into(),
        session_id: "S1".into(),
        mode: "task".into(),
        task_id: "task-00000000000000000000000000000001".into(),
        status: "working".into(),
        created_at_ms: now,
        poll_after_ms: now,
        poll_interval_ms: 100,
        protocol_version: era_name(Era::Modern).into(),
        ..Default::default()
    };
    side.tasks.adopt(vec![record.clone()]);
    wait_until("the adopter's tasks/get answered not found", || {
        side.polls("not_found") >= 1
    })
    .await;
    // The creator reports the result.
    let mut creator =
        switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient::connect(
            registry.url.clone(),
        )
        .await
        .unwrap();
    let mut done = record.clone();
    done.sidecar_id = "sidecar-creator".into();
    done.status = "completed".into();
    done.result = Some(switchyard_proto::v1::BackgroundResult {
        result_json: r#"{"content":[{"type":"text","text":"slept"}]}"#.into(),
        model_text: "slept".into(),
        ..Default::default()
    });
    creator
        .update_background_call(switchyard_proto::v1::UpdateBackgroundCallRequest {
            call: Some(done),
        })
        .await
        .unwrap();
    let after = registry.all_updates().len();
    // The adopter checks the stored record, finds it final, and stops.
    wait_until("the adopter checked the stored record again", || {
        registry.all_updates()[after..]
            .iter()
            .any(|u| u.id == "elsewhere" && u.sidecar_id == "sidecar-test")
    })
    .await;
    wait_until("the adopter stopped following the call", || {
        side.tasks.live().is_empty()
    })
    .await;
    let stored = registry.record("elsewhere").unwrap();
    assert_eq!(stored.status, "completed", "{stored:?}");
    assert_eq!(stored.sidecar_id, "sidecar-creator");
    let failed: Vec<_> = registry
        .updates("elsewhere")
        .into_iter()
        .filter(|u| u.status == "failed")
        .collect();
    assert!(
        failed.is_empty(),
        "the adopter reported a failure: {failed:?}"
    );
    assert_eq!(side.polls("not_found"), 1, "the adopter polled on");
}

#[tokio::test]
async fn poll_intervals_are_clamped_and_kept() {
    let registry = FakeControlPlane::start().await;
    let side = side(reference(Era::Modern), &registry).await;
    // The server asks for 20 ms: clamped up to POLL_MIN (100 ms); and 300 ms
    // is kept.
    let fast = side
        .moved(
            "task_sleep",
            json!({"ms": 1500, "pollIntervalMs": 20}),
            "fast",
            0,
        )
        .await;
    let slow = side
        .moved(
            "task_sleep",
            json!({"ms": 1500, "pollIntervalMs": 300}),
            "slow",
            0,
        )
        .await;
    assert_eq!(fast.poll_interval_ms, POLL_MIN.as_millis() as u64);
    assert_eq!(slow.poll_interval_ms, 300);
    registry.finished("fast").await;
    registry.finished("slow").await;
    let fast_gaps = poll_gaps(&side, &fast.task_id).await;
    let slow_gaps = poll_gaps(&side, &slow.task_id).await;
    assert!(fast_gaps.len() >= 5, "{fast_gaps:?}");
    assert!(
        fast_gaps.iter().all(|&g| (90..1000).contains(&g)),
        "clamped to 100 ms: {fast_gaps:?}"
    );
    assert!(slow_gaps.len() >= 3, "{slow_gaps:?}");
    assert!(
        slow_gaps.iter().all(|&g| (280..1500).contains(&g)),
        "300 ms: {slow_gaps:?}"
    );
}

/// The gaps between the server's `tasks/get` of `task`, ms (`task_stats`).
async fn poll_gaps(side: &Side, task: &str) -> Vec<u64> {
    let r = side
        .call(request("task_stats", json!({"taskId": task}), None))
        .await
        .unwrap();
    let stats: Value = serde_json::from_str(&r.structured_content_json).unwrap();
    stats["perTask"][task]["pollGapsMs"]
        .as_array()
        .unwrap_or_else(|| panic!("{stats}"))
        .iter()
        .map(|g| g.as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_call_past_its_maximum_duration_fails_and_its_task_is_cancelled() {
    let registry = FakeControlPlane::start().await;
    let side = side(reference(Era::Legacy), &registry).await;
    let mut p = policy("short", 0);
    p.max_duration_ms = 1000;
    let moved = side
        .call(request(
            "task_forever",
            json!({"pollIntervalMs": 100}),
            Some(p),
        ))
        .await
        .unwrap()
        .background
        .expect("moved");
    assert_eq!(moved.deadline_ms, moved.created_at_ms + 1000);
    let failed = registry.finished("short").await;
    assert_eq!(failed.status, "failed");
    assert!(
        failed.status_message.contains("maximum duration"),
        "{failed:?}"
    );
    assert!(failed.finished_at_ms >= moved.deadline_ms);
    // Cancelled, or already dropped by the server (its ttl is the same
    // maximum duration).
    match get_task(&side.upstream, Era::Legacy, &moved.task_id).await {
        Ok(state) => assert_eq!(state.status, "cancelled"),
        Err(e) => assert!(switchyard_sidecar::background::is_not_found(&e), "{e}"),
    }
    assert!(side.tasks.live().is_empty());
}

#[tokio::test]
async fn continuous_poll_failure_fails_the_call() {
    let registry = FakeControlPlane::start().await;
    let (mut server, config) = reference_http(Era::Modern).await;
    let side = side_with(config, &registry, "ref", Duration::from_secs(2)).await;
    side.moved("task_forever", json!({"pollIntervalMs": 100}), "lost", 0)
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();
    let failed = registry.finished("lost").await;
    assert_eq!(failed.status, "failed");
    assert!(
        failed.status_message.contains("polling the task failed"),
        "{failed:?}"
    );
    // The first failure was reported (pollErrorSince set) before the end.
    let updates = registry.updates("lost");
    assert!(
        updates.iter().any(|u| u.status == "working"
            && u.poll_error_since_ms > 0
            && !u.last_poll_error.is_empty()),
        "{updates:?}"
    );
    assert!(side.polls("error") >= 2);
}

#[tokio::test]
async fn a_dropped_foreground_call_cancels_its_task() {
    let registry = FakeControlPlane::start().await;
    let side = side(reference(Era::Modern), &registry).await;
    let mut client = side.client.clone();
    let call = client.call_tool(request(
        "task_forever",
        json!({"pollIntervalMs": 100}),
        Some(policy("dropped", 20_000)),
    ));
    // The engine gives up (its gRPC call is dropped) during the foreground phase.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), call)
            .await
            .is_err()
    );
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let r = side
            .call(request("task_stats", json!({}), None))
            .await
            .unwrap();
        let stats: Value = serde_json::from_str(&r.structured_content_json).unwrap();
        let ids: Vec<String> = stats["perTask"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(ids.len(), 1, "{stats}");
        let state = get_task(&side.upstream, Era::Modern, &ids[0])
            .await
            .unwrap();
        if state.status == "cancelled" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not cancelled: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(registry.updates("dropped").is_empty());
    assert!(side.initiators.is_empty());
}

#[tokio::test]
async fn a_record_cancelled_in_the_store_stops_polling() {
    let registry = FakeControlPlane::start().await;
    let side = side(reference(Era::Legacy), &registry).await;
    // The control plane recorded a cancellation, but its
    // CancelBackgroundCall never reached this sidecar: the next report
    // (input_required) comes back cancelled.
    let moved = side
        .moved(
            "task_ask",
            json!({"ms": 300, "pollIntervalMs": 100}),
            "gone",
            0,
        )
        .await;
    registry.cancel("gone");
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !side.tasks.live().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "still polling");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let state = get_task(&side.upstream, Era::Legacy, &moved.task_id)
        .await
        .unwrap();
    assert_eq!(state.status, "cancelled");
    assert!(registry.interacts().is_empty(), "nobody was asked");
    assert_eq!(registry.record("gone").unwrap().status, "cancelled");
}

// ---- wait mode and limits ----------------------------------------------------------

#[tokio::test]
async fn a_tool_without_task_support_is_held_in_wait_mode() {
    let registry = FakeControlPlane::start().await;
    let side = side(everything(), &registry).await;
    let moved = side
        .moved(
            "trigger-long-running-operation",
            json!({"duration": 2, "steps": 2}),
            "held",
            300,
        )
        .await;
    assert_eq!(moved.mode, "wait");
    assert_eq!(moved.status, "working");
    assert!(moved.task_id.is_empty());
    assert_eq!(side.tasks.live(), ["held"]);
    let done = registry.finished("held").await;
    assert_eq!(done.status, "completed", "{done:?}");
    assert!(
        done.result
            .unwrap()
            .model_text
            .contains("Long running operation completed"),
        "{:?}",
        registry.record("held")
    );
    // A quick one stays in the foreground.
    let r = side
        .call(request(
            "echo",
            json!({"message": "quick"}),
            Some(policy("quick", 5_000)),
        ))
        .await
        .unwrap();
    assert!(
        r.background.is_none() && r.model_text.contains("quick"),
        "{r:?}"
    );
    assert!(registry.updates("quick").is_empty());
    // `background = always` (a zero window) moves even the quickest call,
    // every time: it does not race the upstream's answer.
    for i in 0..20 {
        let id = format!("always{i}");
        let r = side
            .call(request(
                "echo",
                json!({"message": "at once"}),
                Some(policy(&id, 0)),
            ))
            .await
            .unwrap();
        let moved = r
            .background
            .clone()
            .unwrap_or_else(|| panic!("call {i} answered in the foreground: {r:?}"));
        assert_eq!(moved.mode, "wait");
        assert_eq!(registry.finished(&id).await.status, "completed");
    }
    // A held call can be cancelled.
    side.moved(
        "trigger-long-running-operation",
        json!({"duration": 30, "steps": 2}),
        "held2",
        200,
    )
    .await;
    let mut client = side.client.clone();
    assert!(
        client
            .cancel_background_call(SidecarCancelBackgroundRequest {
                id: "held2".into(),
                task_id: String::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .found
    );
    assert_eq!(registry.finished("held2").await.status, "cancelled");
}

/// A held (wait-mode) call still running when the sidecar stops fails
/// saying so, not with what the server answered as its connection was
/// closed under it (which would read as a fault of the server's).
#[tokio::test]
async fn a_held_call_at_shutdown_fails_saying_the_sidecar_stopped() {
    let registry = FakeControlPlane::start().await;
    let side = side(everything(), &registry).await;
    side.moved(
        "trigger-long-running-operation",
        json!({"duration": 30, "steps": 2}),
        "held-at-stop",
        200,
    )
    .await;
    side.upstream.shutdown(Duration::from_secs(2)).await;
    let done = registry.finished("held-at-stop").await;
    assert_eq!(done.status, "failed", "{done:?}");
    assert!(
        done.status_message
            .starts_with("the sidecar stopped before the call finished"),
        "{done:?}"
    );
    assert!(done.error_json.is_empty(), "{done:?}");
}

/// Stage A's one retry on the wait-mode path: a call of a tool without
/// task support, held in wait mode, whose stdio server exits mid-call (it
/// is killed 300 ms into a 1.5 s call) is sent again once after
/// reconnecting when it is retry-safe, both within its foreground window
/// and after it moved to the background; a call that is not retry-safe
/// fails with the exit.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_retry_safe_call_is_sent_again_once_after_the_server_exits() {
    let registry = FakeControlPlane::start().await;
    let side = side_with(
        crate::common::stub("crashy.py"),
        &registry,
        "crashy",
        Duration::from_secs(60),
    )
    .await;
    let retries = || side.upstream.metrics().retries();
    let kill_after_300ms = || {
        let pid = side.upstream.pid().expect("the server is running");
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
        })
    };
    let slow = |id: &str, auto_after_ms: u64, retry_safe: bool| {
        let mut request = request(
            "slow",
            json!({"ms": 1500}),
            Some(crate::common::tasks::policy("crashy", id, auto_after_ms)),
        );
        request.retry_safe = retry_safe;
        request
    };

    // Not retry-safe: held in the foreground, the exit is the answer.
    let killer = kill_after_300ms();
    let e = side.call(slow("unsafe", 10_000, false)).await.unwrap_err();
    killer.await.unwrap();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("exited"), "{e:?}");
    assert_eq!(retries(), 0);

    // Retry-safe, within the foreground window: reconnected, sent again,
    // answered in the foreground.
    side.call(request("echo", json!({"message": "up"}), None))
        .await
        .unwrap();
    let killer = kill_after_300ms();
    let r = side.call(slow("safe", 10_000, true)).await.unwrap();
    killer.await.unwrap();
    assert!(r.background.is_none(), "{r:?}");
    assert_eq!(r.model_text, "slept 1500 ms");
    assert_eq!(retries(), 1);
    assert!(registry.updates("safe").is_empty());

    // Retry-safe, moved to the background first (at 100 ms): the held call
    // is sent again there and completes.
    side.call(request("echo", json!({"message": "up"}), None))
        .await
        .unwrap();
    let killer = kill_after_300ms();
    let moved = side
        .call(slow("moved", 100, true))
        .await
        .unwrap()
        .background
        .expect("moved to the background");
    assert_eq!(moved.mode, "wait");
    killer.await.unwrap();
    let done = registry.finished("moved").await;
    assert_eq!(done.status, "completed", "{done:?}");
    assert_eq!(done.result.unwrap().model_text, "slept 1500 ms");
    assert_eq!(retries(), 2);
}

#[tokio::test]
async fn at_max_per_target_the_call_stays_in_the_foreground_until_its_limit() {
    for era in [Era::Legacy, Era::Modern] {
        let registry = FakeControlPlane::start().await;
        let side = side(reference(era), &registry).await;
        let mut p = policy("limited", 0);
        p.allowed = false;
        p.foreground_limit_ms = 600;
        // Done within the limit: a normal result.
        let r = side
            .call(request(
                "task_sleep",
                json!({"ms": 200, "pollIntervalMs": 100}),
                Some(p.clone()),
            ))
            .await
            .unwrap();
        assert!(
            r.background.is_none() && r.model_text.contains("slept 200 ms"),
            "{r:?}"
        );
        // Not done: DEADLINE_EXCEEDED naming maxPerTarget, the task cancelled.
        let e = side
            .call(request(
                "task_forever",
                json!({"pollIntervalMs": 100}),
                Some(p),
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
        assert!(e.message().contains("maxPerTarget"), "{e:?}");
        assert!(registry.updates("limited").is_empty());
        // The guard cancels the task (spawned): wait for it.
        let deadline = tokio::time::Instant::now() + LIMIT;
        let stats = loop {
            let r = side
                .call(request("task_stats", json!({}), None))
                .await
                .unwrap();
            let stats: Value = serde_json::from_str(&r.structured_content_json).unwrap();
            let ids: Vec<String> = stats["perTask"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            let mut cancelled = true;
            for id in &ids {
                let s = get_task(&side.upstream, era, id).await.unwrap();
                if s.status != "cancelled" && s.status != "completed" {
                    cancelled = false;
                }
            }
            if cancelled {
                break stats;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task_forever not cancelled: {stats}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(stats["tasks"], 2, "{stats}");
    }
}

// ---- adoption after a restart ------------------------------------------------------------

struct SidecarProcess {
    child: Child,
    calls_addr: String,
}

impl SidecarProcess {
    async fn start(url: &str, era: Era, registry: &FakeControlPlane, id: &str) -> SidecarProcess {
        Self::start_with(url, era, registry, id, &[]).await
    }

    /// [`SidecarProcess::start`] with `extra` flags.
    async fn start_with(
        url: &str,
        era: Era,
        registry: &FakeControlPlane,
        id: &str,
        extra: &[&str],
    ) -> SidecarProcess {
        let mut child = Command::new(support::workspace_bin(
            "switchyard-sidecar",
            "switchyard-sidecar",
        ))
        .args([
            "run",
            "--server-name",
            "ref",
            "--url",
            url,
            "--era",
            era_name(era),
            "--control-plane",
            &registry.url,
            "--sidecar-id",
            id,
            "--task-poll-min-ms",
            "100",
            "--calls-token-file",
            &crate::common::calls_token_file(),
        ])
        .args(extra)
        .env("SWITCHYARD_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start switchyard-sidecar");
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                eprintln!("[sidecar] {line}");
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(LIMIT, stdout.next_line())
            .await
            .expect("the sidecar printed its addresses")
            .unwrap()
            .expect("a line on stdout");
        let (_, rest) = line
            .split_once(", calls on ")
            .unwrap_or_else(|| panic!("{line}"));
        let (calls_addr, _) = rest.split_once(", http on ").unwrap();
        SidecarProcess {
            calls_addr: calls_addr.to_owned(),
            child,
        }
    }

    async fn client(&self) -> crate::common::CallsClient {
        crate::common::calls_client(&self.calls_addr).await
    }
}

/// A foreground call's task still running when the grace period of a
/// sidecar's shutdown ends is cancelled on the server before the session
/// is ended (the `tasks/cancel` must not lose the race with the session's
/// `DELETE`): over several shutdowns, every task the server made ends
/// cancelled.
#[tokio::test]
async fn tasks_of_calls_cancelled_at_shutdown_are_cancelled_upstream() {
    support::init_tracing();
    let registry = FakeControlPlane::start().await;
    let (_server, config) = reference_http(Era::Legacy).await;
    let TransportConfig::Http(http) = &config.transport else {
        unreachable!()
    };
    let url = http.url.clone();
    for round in 0..4 {
        let mut sidecar = SidecarProcess::start_with(
            &url,
            Era::Legacy,
            &registry,
            &format!("stopping-{round}"),
            &["--grace-secs", "1"],
        )
        .await;
        let mut client = sidecar.client().await;
        let call = tokio::spawn(async move {
            client
                .call_tool(request("task_forever", json!({}), None))
                .await
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(sidecar.child.id().unwrap() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let outcome = tokio::time::timeout(LIMIT, call).await.unwrap().unwrap();
        assert!(outcome.is_err(), "round {round}: {outcome:?}");
        let status = tokio::time::timeout(LIMIT, sidecar.child.wait())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status.code(), Some(0), "round {round}");
    }
    // The server's own list (the tasks belong to the same anonymous caller).
    let up = Upstream::new(config, &UpstreamMetrics::unregistered()).unwrap();
    let listed = tokio::time::timeout(LIMIT, up.request("tasks/list", None))
        .await
        .unwrap()
        .unwrap();
    let tasks = listed["tasks"].as_array().cloned().unwrap_or_default();
    assert_eq!(tasks.len(), 4, "{listed}");
    for t in &tasks {
        assert_eq!(t["status"], "cancelled", "{listed}");
    }
}

/// The sidecar that moved 100 tasks to the background is killed (-9); a new
/// sidecar process gets them in `adopt` when it says hello, polls them on
/// fresh connections and reports each one completed.
async fn adoption_after_kill_9(era: Era) {
    support::init_tracing();
    let registry = FakeControlPlane::start().await;
    let (_server, config) = reference_http(era).await;
    let TransportConfig::Http(http) = &config.transport else {
        unreachable!()
    };
    let url = http.url.clone();
    let mut first = SidecarProcess::start(&url, era, &registry, "sidecar-1").await;
    let client = first.client().await;
    // One after a foreground phase, 99 at once.
    let ids: Vec<String> = (0..100).map(|i| format!("adopt-{i}")).collect();
    let calls = ids.iter().enumerate().map(|(i, id)| {
        let mut client = client.clone();
        let auto_after_ms = if i == 0 { 200 } else { 0 };
        let request = request(
            "task_sleep",
            json!({"ms": 8000, "text": id, "pollIntervalMs": 1000}),
            Some(policy(id, auto_after_ms)),
        );
        async move {
            tokio::time::timeout(LIMIT, client.call_tool(request))
                .await
                .unwrap()
                .unwrap()
                .into_inner()
                .background
                .expect("moved")
        }
    });
    let moved = futures::future::join_all(calls).await;
    assert!(moved.iter().all(|m| m.sidecar_id == "sidecar-1"));
    // kill -9: the first sidecar polls no more.
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    let records: Vec<BackgroundCall> = ids.iter().map(|id| registry.record(id).unwrap()).collect();
    assert!(records.iter().all(|r| r.status == "working"), "{records:?}");
    // The control plane hands the calls to the new sidecar when it says hello.
    registry.adopt_on_hello(records);
    let _second = SidecarProcess::start(&url, era, &registry, "sidecar-2").await;
    for id in &ids {
        let done = registry.finished(id).await;
        assert_eq!(done.status, "completed", "{done:?}");
        assert_eq!(done.sidecar_id, "sidecar-2");
        let text = done.result.unwrap().model_text;
        assert!(text.contains(&format!("slept 8000 ms: {id}")), "{text}");
    }
    assert!(registry.hellos().contains(&"sidecar-2".to_owned()));
}

#[tokio::test]
async fn a_new_sidecar_adopts_and_completes_100_tasks_after_kill_9_over_http_2025() {
    adoption_after_kill_9(Era::Legacy).await;
}

#[tokio::test]
async fn a_new_sidecar_adopts_and_completes_100_tasks_after_kill_9_over_http_2026() {
    adoption_after_kill_9(Era::Modern).await;
}
