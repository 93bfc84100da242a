//! Background calls (stage B), the control plane's side, end to end over
//! the real gRPC APIs.
//!
//! A test plays the sidecar with test support's fake sidecar: it registers
//! over `SidecarRegistry` (`Register`, a `Report` stream with hello and a
//! catalogue, keeping the `ControlMessage`s that come back, `adopt` among
//! them) and serves a real `SidecarCalls` endpoint of its own. Its
//! `CallTool` ([`book`]) registers the background call with
//! `UpdateBackgroundCall` and answers "moved", as the real sidecar does;
//! its `CancelBackgroundCall` records what it was asked.
//!
//! - One replica on an embedded store: the `BackgroundPolicy` an engine
//!   call carries, the moved answer and its text, updates, terminal is
//!   final, validation, events and their replay on a new subscription
//!   (`background_after_ms`), `maxPerTarget`, the `always` policy, the CLI
//!   (`background list`, `policy set --background`), metrics.
//! - Cancellation through the engine API and the CLI: the record is
//!   cancelled, the owning sidecar's `CancelBackgroundCall` is called, a
//!   `background_call.cancelled` event follows; a later sidecar update
//!   cannot undo it.
//! - The sweeper: a wait-mode call of a sidecar that went away fails (with
//!   an event); a task-mode call is adopted by a live sidecar (`adopt` on its
//!   report stream), by a new sidecar on hello, and re-sent to a sidecar
//!   that reconnects with the same id; a call past its deadline fails;
//!   finished calls are deleted after `retentionSec`.
//! - Real sidecars (`switchyard-sidecar run`) in front of the reference
//!   server with `--tasks`, both eras: a task done within `autoAfterSec` is
//!   a normal result; a longer one moves and its processed result arrives as
//!   `background_call.completed`. A sidecar killed (SIGKILL) with three live
//!   tasks (Streamable HTTP server) is replaced by another, which adopts
//!   and completes them. A tool without task support (server-everything's
//!   `trigger-long-running-operation`) is held in wait mode: it completes
//!   as an event, or fails when its sidecar is killed.
//! - Two replicas on a real etcd, one of them a `switchyard-control-plane`
//!   process: events cross replicas; the process is killed (SIGKILL) right
//!   after it stored a result, and the engine, subscribing again at the
//!   other replica with `background_after_ms`, gets it; the survivor's
//!   sweeper fails the wait-mode call of the sidecar that was registered
//!   at the dead replica.

use crate::common::background::*;
use crate::common::*;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use switchyard_control_plane::config::Config;
use switchyard_control_plane::server::{self, Running};
use switchyard_proto::v1 as pb;
use switchyard_test_support::fake_sidecar::{FakeCall, FakeSidecar};
use switchyard_test_support::start_etcd;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tonic::codec::Streaming;
use tonic::{Code, Status};

/// The server the fake sidecars front (never started).
const TOOL: &str = "fake__book";

/// A fake sidecar of `fake` (test support's) whose `CallTool` acts as
/// [`book`] says, with tasks in its capabilities.
async fn fake_sidecar(control_plane: &str, id: &str) -> FakeSidecar {
    FakeSidecar::of(control_plane, id)
        .capabilities(json!({"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}}}))
        .on_call(book)
        .start()
        .await
}

/// The fake sidecar's `CallTool`: `arguments.mode` says what it does:
/// `task` or `wait` register a background call (status working, this
/// sidecar's id, `arguments.immediate` as the immediate response) and
/// answer "moved"; anything else, or a policy that does not allow a
/// background call, answers a plain result naming `allowed`. The fake has
/// no `CallStream` (as a sidecar built before it): the control plane falls
/// back to one `CallTool` per call, so every test here covers that path.
async fn book(call: FakeCall) -> Result<pb::SidecarCallResponse, Status> {
    let r = call.request;
    let params: Value = serde_json::from_str(&r.params_json).expect("params are JSON");
    let policy = r
        .background
        .clone()
        .expect("every engine call has a policy");
    let mode = params["arguments"]["mode"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    if !matches!(mode.as_str(), "task" | "wait") || !policy.allowed {
        let text = format!("foreground allowed={}", policy.allowed);
        return Ok(pb::SidecarCallResponse {
            result_json: json!({"content": [{"type": "text", "text": text}]}).to_string(),
            model_text: text,
            ..Default::default()
        });
    }
    let id = policy.background_call_id.clone();
    let record = pb::BackgroundCall {
        id: id.clone(),
        server: "fake".into(),
        tool: params["name"].as_str().unwrap_or("").into(),
        engine_tool: policy.engine_tool.clone(),
        session_id: r.session_id.clone(),
        run_id: r.run_id.clone(),
        task_id: if mode == "task" {
            format!("task-{id}")
        } else {
            String::new()
        },
        mode,
        status: "working".into(),
        created_at_ms: now_ms(),
        deadline_ms: now_ms() + policy.max_duration_ms as i64,
        sidecar_id: call.sidecar_id.clone(),
        immediate_response: params["arguments"]["immediate"]
            .as_str()
            .unwrap_or("")
            .into(),
        protocol_version: "2025-11-25".into(),
        poll_interval_ms: 5000,
        ..Default::default()
    };
    let stored = registry(&call.control_plane)
        .await
        .update_background_call(pb::UpdateBackgroundCallRequest { call: Some(record) })
        .await?
        .into_inner();
    Ok(pb::SidecarCallResponse {
        background: Some(stored),
        ..Default::default()
    })
}

/// The background policies of the calls `sidecar` received, in order.
fn policies(sidecar: &FakeSidecar) -> Vec<pb::BackgroundPolicy> {
    sidecar
        .calls()
        .into_iter()
        .map(|c| c.background.expect("every engine call has a policy"))
        .collect()
}

/// Waits until `tool` is offered (the fake sidecar's catalogue arrived).
async fn wait_tool(endpoint: &str, tool: &str) {
    let endpoint = endpoint.to_owned();
    eventually(&format!("{tool} offered"), LIMIT, || {
        let endpoint = endpoint.clone();
        async move {
            let mut e = engine(&endpoint).await?;
            let names = tool_names(&mut e, "").await;
            if names.iter().any(|n| n == tool) {
                Ok(())
            } else {
                Err(format!("{names:?}"))
            }
        }
    })
    .await
}

/// Waits until `sidecar` of `fake` is no longer registered.
async fn wait_gone(endpoint: &str, sidecar: &str) {
    let endpoint = endpoint.to_owned();
    let sidecar = sidecar.to_owned();
    eventually(&format!("{sidecar} gone"), LIMIT, || {
        let endpoint = endpoint.clone();
        let sidecar = sidecar.clone();
        async move {
            let s = admin(&endpoint)
                .await?
                .get_server_status(pb::GetServerStatusRequest {
                    name: "fake".into(),
                })
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            if s.sidecars.iter().any(|c| c.sidecar_id == sidecar) {
                Err(format!("{:?}", s.sidecars))
            } else {
                Ok(())
            }
        }
    })
    .await
}

/// No `background_call.*` event within `wait`.
async fn no_background(events: &mut Streaming<pb::SessionEvent>, wait: Duration) {
    let got = tokio::time::timeout(wait, async {
        loop {
            match events.message().await {
                Ok(Some(ev)) if ev.r#type.starts_with("background_call.") => return ev,
                Ok(Some(_)) => continue,
                other => panic!("the event stream ended: {other:?}"),
            }
        }
    })
    .await;
    if let Ok(ev) = got {
        panic!("unexpected event {} {}", ev.r#type, ev.data_json);
    }
}

async fn call(
    endpoint: &str,
    session: &str,
    args: Value,
) -> Result<pb::CallToolResponse, tonic::Status> {
    engine(endpoint)
        .await
        .unwrap()
        .call_tool(pb::CallToolRequest {
            session_id: session.into(),
            tool: TOOL.into(),
            arguments_json: args.to_string(),
            run_id: "run-1".into(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

async fn get(endpoint: &str, id: &str) -> Result<pb::BackgroundCall, tonic::Status> {
    engine(endpoint)
        .await
        .unwrap()
        .get_background_call(pb::GetBackgroundCallRequest {
            id: id.into(),
            session_id: String::new(),
        })
        .await
        .map(|r| r.into_inner())
}

/// A running call of `fake` as a sidecar registers it.
fn record(id: &str, session: &str, mode: &str, sidecar: &str) -> pb::BackgroundCall {
    pb::BackgroundCall {
        id: id.into(),
        server: "fake".into(),
        tool: "book".into(),
        engine_tool: TOOL.into(),
        session_id: session.into(),
        mode: mode.into(),
        task_id: if mode == "task" {
            format!("task-{id}")
        } else {
            String::new()
        },
        status: "working".into(),
        sidecar_id: sidecar.into(),
        created_at_ms: now_ms(),
        ..Default::default()
    }
}

fn completed(mut c: pb::BackgroundCall, text: &str) -> pb::BackgroundCall {
    c.status = "completed".into();
    c.result = Some(pb::BackgroundResult {
        result_json: json!({"content": [{"type": "text", "text": text}], "structuredContent": {"text": text}}).to_string(),
        model_text: text.into(),
        structured_content_json: json!({"text": text}).to_string(),
        ..Default::default()
    });
    c
}

/// A replica whose `[backgroundCalls]` table is `background`.
async fn start_background_replica(
    dir: &Path,
    name: &str,
    store: &StoreKind,
    background: &str,
) -> Running {
    start_replica(
        dir,
        name,
        store,
        &format!("[backgroundCalls]\n{background}"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_move_update_finish_and_replay_on_one_replica() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let r = start_background_replica(
        dir.path(),
        "a",
        &StoreKind::Embedded,
        "autoAfterSec = 7\nmaxPerTarget = 2\nmaxDurationSec = 3600\nsweepIntervalMs = 200\n",
    )
    .await;
    let ep = endpoint(&r);
    let sidecar = fake_sidecar(&ep, "sc-1").await;
    wait_tool(&ep, TOOL).await;
    let s = create_session(&ep).await;
    let mut events = subscribe(&ep, &s, 0).await;

    // ---- a task-mode call moves, with the server's immediate response
    let resp = call(
        &ep,
        &s,
        json!({"mode": "task", "immediate": "Booking is on its way."}),
    )
    .await
    .expect("CallTool");
    let bg = resp.background.clone().expect("moved to the background");
    assert_eq!(
        resp.text,
        format!(
            "The call to {TOOL} is still running and has moved to the background (id {}). Its result will arrive as a new message when it finishes. End this turn.\n\nBooking is on its way.",
            bg.id
        )
    );
    assert_eq!(
        (resp.server.as_str(), resp.upstream_tool.as_str()),
        ("fake", "book")
    );
    assert!(resp.result_json.is_empty() && !resp.is_error, "{resp:?}");
    let policy = policies(&sidecar)[0].clone();
    assert_eq!(policy.background_call_id, bg.id);
    assert_eq!(bg.id.len(), 36, "a UUID: {}", bg.id);
    assert_eq!(policy.auto_after_ms, 7000);
    assert!(policy.allowed);
    assert_eq!(policy.foreground_limit_ms, 600_000);
    assert_eq!(policy.max_duration_ms, 3_600_000);
    assert_eq!(policy.engine_tool, TOOL);
    assert_eq!(
        (
            bg.status.as_str(),
            bg.mode.as_str(),
            bg.session_id.as_str(),
            bg.run_id.as_str()
        ),
        ("working", "task", s.as_str(), "run-1")
    );

    let list = engine(&ep)
        .await
        .unwrap()
        .list_background_calls(pb::ListBackgroundCallsRequest {
            session_id: s.clone(),
            include_finished: false,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        list.calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        [bg.id.as_str()]
    );

    // ---- updates: what the control plane fixed at creation stays
    let mut upd = bg.clone();
    upd.status = "input_required".into();
    upd.status_message = "needs a name".into();
    upd.session_id = "someone-else".into();
    upd.poll_interval_ms = 7000;
    let stored = update(&ep, upd.clone()).await.expect("update");
    assert_eq!(stored.status, "input_required");
    assert_eq!(stored.status_message, "needs a name");
    assert_eq!(stored.session_id, s, "the session is kept");
    assert_eq!(stored.poll_interval_ms, 7000);
    assert_eq!(stored.finished_at_ms, 0);
    assert_eq!(get(&ep, &bg.id).await.unwrap().status, "input_required");

    // ---- completed: the event carries the processed result
    let done = update(&ep, completed(upd.clone(), "booked: room 12"))
        .await
        .expect("update");
    assert_eq!(done.status, "completed");
    assert!(done.finished_at_ms > 0);
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(ev.r#type, "background_call.completed");
    assert_eq!(ev.session_id, s);
    assert_eq!(ev.at_ms, done.finished_at_ms);
    assert_eq!(data["id"], bg.id.as_str());
    assert_eq!(data["sessionId"], s.as_str());
    assert_eq!(data["taskId"], bg.task_id.as_str());
    assert_eq!(data["result"]["modelText"], "booked: room 12");
    assert_eq!(
        data["result"]["structuredContentJson"],
        r#"{"text":"booked: room 12"}"#
    );
    assert_eq!(data["finishedAtMs"], done.finished_at_ms);

    // ---- terminal is final: a later update changes nothing, no event
    let mut late = upd.clone();
    late.status = "failed".into();
    late.status_message = "late".into();
    let again = update(&ep, late).await.expect("update");
    assert_eq!(again.status, "completed");
    assert_eq!(again.finished_at_ms, done.finished_at_ms);
    let again = update(&ep, completed(upd.clone(), "other text"))
        .await
        .unwrap();
    assert_eq!(again.result.unwrap().model_text, "booked: room 12");

    // ---- validation
    let mut bad = record("bad-1", &s, "task", "sc-1");
    bad.status = "sleeping".into();
    refused(update(&ep, bad).await, Code::InvalidArgument, "call.status");
    refused(
        update(&ep, record("bad-2", &s, "sometimes", "sc-1")).await,
        Code::InvalidArgument,
        "call.mode",
    );
    let mut bad = record("bad-3", &s, "task", "sc-1");
    bad.task_id.clear();
    refused(update(&ep, bad).await, Code::InvalidArgument, "task_id");
    let mut bad = record("bad-4", &s, "wait", "sc-1");
    bad.server = "nope".into();
    refused(update(&ep, bad).await, Code::NotFound, "nope");
    refused(
        update(&ep, record("a/b", &s, "wait", "sc-1")).await,
        Code::InvalidArgument,
        "call.id",
    );
    refused(
        registry(&ep)
            .await
            .update_background_call(pb::UpdateBackgroundCallRequest { call: None })
            .await,
        Code::InvalidArgument,
        "call",
    );
    refused(get(&ep, "bad-1").await, Code::NotFound, "bad-1");

    // ---- a wait-mode call moves (no immediate response) and fails
    let resp2 = call(&ep, &s, json!({"mode": "wait"})).await.unwrap();
    let bg2 = resp2.background.clone().expect("moved");
    assert!(resp2.text.ends_with("End this turn."), "{}", resp2.text);
    assert_eq!(bg2.mode, "wait");
    let mut failed = bg2.clone();
    failed.status = "failed".into();
    failed.status_message = "the server closed the connection".into();
    failed.error_json = json!({"code": -32603, "message": "boom"}).to_string();
    let failed = update(&ep, failed).await.unwrap();
    // The next event is this one: the re-sent terminal updates of the
    // first call made none.
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(ev.r#type, "background_call.failed");
    assert_eq!(data["id"], bg2.id.as_str());
    assert_eq!(data["statusMessage"], "the server closed the connection");
    assert_eq!(data["errorJson"], failed.error_json.as_str());

    // ---- replay on a new subscription, oldest first; after a time
    let mut replay = subscribe(&ep, &s, 0).await;
    let (e1, d1) = next_background(&mut replay).await;
    let (e2, d2) = next_background(&mut replay).await;
    assert_eq!(
        (e1.r#type.as_str(), d1["id"].as_str().unwrap()),
        ("background_call.completed", bg.id.as_str())
    );
    assert_eq!(
        (e2.r#type.as_str(), d2["id"].as_str().unwrap()),
        ("background_call.failed", bg2.id.as_str())
    );
    let mut later = subscribe(&ep, &s, done.finished_at_ms).await;
    let (_, d) = next_background(&mut later).await;
    assert_eq!(
        d["id"],
        bg2.id.as_str(),
        "only what finished after the time"
    );
    let mut none = subscribe(&ep, &s, failed.finished_at_ms).await;
    no_background(&mut none, Duration::from_millis(500)).await;
    // Another session's stream has none of them.
    let other = create_session(&ep).await;
    no_background(
        &mut subscribe(&ep, &other, 0).await,
        Duration::from_millis(500),
    )
    .await;
    refused(
        engine(&ep)
            .await
            .unwrap()
            .get_background_call(pb::GetBackgroundCallRequest {
                id: bg.id.clone(),
                session_id: other.clone(),
            })
            .await,
        Code::NotFound,
        &bg.id,
    );

    // ---- the CLI lists them
    let out = ok_stdout(
        &cli(&ep, &["background", "list", "--session", &s, "--all"]).await,
        "background list --all",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("STATUS"),
        "{out}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(&bg.id)
            && l.contains("completed")
            && l.contains("task")
            && l.contains(TOOL)
            && l.contains("booked: room 12")),
        "{out}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(&bg2.id)
            && l.contains("failed")
            && l.contains("the server closed the connection")),
        "{out}"
    );
    let out = cli(&ep, &["background", "list", "--session", &s]).await;
    assert_eq!(ok_stdout(&out, "background list"), "");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no running background calls"));
    let v = ok_json(
        &cli(&ep, &["background", "list", "--all", "--json"]).await,
        "background list --json",
    );
    assert_eq!(v["calls"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["calls"][0]["id"], bg.id.as_str());
    assert_eq!(v["calls"][0]["result"]["modelText"], "booked: room 12");

    // ---- maxPerTarget: at 2 running calls, a call stays in the foreground
    let mut running = Vec::new();
    for _ in 0..2 {
        let resp = call(&ep, &s, json!({"mode": "task"})).await.unwrap();
        running.push(resp.background.expect("moved").id);
    }
    let text = eventually("a call at maxPerTarget", LIMIT, || {
        let (ep, s) = (ep.clone(), s.clone());
        async move {
            let resp = call(&ep, &s, json!({"mode": "task"}))
                .await
                .map_err(|e| e.to_string())?;
            if resp.background.is_none() {
                Ok(resp.text)
            } else {
                Err("moved".to_owned())
            }
        }
    })
    .await;
    assert_eq!(text, "foreground allowed=false");
    let last = policies(&sidecar).last().cloned().unwrap();
    assert!(!last.allowed);
    assert_eq!(last.foreground_limit_ms, 600_000);

    // ---- `background: always` moves calls at once; the policy is kept
    let out = ok_stdout(
        &cli(
            &ep,
            &["policy", "set", "fake", "book", "--background", "always"],
        )
        .await,
        "policy set --background",
    );
    // As `servers tools` prints it: a header, the row, the legend; the
    // mode is marked as an administrator's.
    assert!(out.starts_with("name "), "{out}");
    assert!(out.contains(" default background=always (set)\n"), "{out}");
    assert!(
        out.contains("policy or background (set): set by an administrator"),
        "{out}"
    );
    let tools = admin(&ep)
        .await
        .unwrap()
        .list_server_tools(pb::ListServerToolsRequest {
            server: "fake".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(tools.tools[0].background, "always");
    assert_eq!(tools.tools[0].policy, "default");
    assert!(!tools.tools[0].policy_set, "only background was set");
    let _ = call(&ep, &s, json!({"mode": "none"})).await.unwrap();
    let last = policies(&sidecar).last().cloned().unwrap();
    assert_eq!(last.auto_after_ms, 0);
    // A policy set later keeps `background`.
    let t = admin(&ep)
        .await
        .unwrap()
        .set_tool_policy(pb::SetToolPolicyRequest {
            server: "fake".into(),
            tool: "book".into(),
            policy: "confirm".into(),
            background: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (t.policy.as_str(), t.background.as_str()),
        ("confirm", "always")
    );
    refused(
        admin(&ep)
            .await
            .unwrap()
            .set_tool_policy(pb::SetToolPolicyRequest {
                server: "fake".into(),
                tool: "book".into(),
                policy: String::new(),
                background: "sometimes".into(),
            })
            .await,
        Code::InvalidArgument,
        "background",
    );
    let out = cli(
        &ep,
        &["policy", "set", "fake", "book", "--background", "never"],
    )
    .await;
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    let out = cli(
        &ep,
        &["policy", "set", "fake", "book", "--background", "auto"],
    )
    .await;
    assert!(ok_stdout(&out, "policy set auto").contains("confirm (set)"));

    // ---- metrics
    let (_, metrics) = http_get(&r.http_addr.to_string(), "/metrics").await;
    let moved = |mode| {
        sample(
            &metrics,
            "switchyard_control_plane_background_moved_total",
            &[("server", "fake"), ("mode", mode)],
        )
    };
    // Every record is a call that moved (the loop above may have moved
    // more than two before this replica counted them).
    let all = engine(&ep)
        .await
        .unwrap()
        .list_background_calls(pb::ListBackgroundCallsRequest {
            session_id: String::new(),
            include_finished: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .calls;
    let tasks = all.iter().filter(|c| c.mode == "task").count();
    assert!(tasks >= 3, "{all:?}");
    // Paged, the same calls in the same order; the CLI follows the pages.
    let mut paged = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = engine(&ep)
            .await
            .unwrap()
            .list_background_calls(pb::ListBackgroundCallsRequest {
                include_finished: true,
                page_size: 2,
                page_token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.calls.len() <= 2, "{page:?}");
        paged.extend(page.calls.into_iter().map(|c| c.id));
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    let ids: Vec<String> = all.iter().map(|c| c.id.clone()).collect();
    assert_eq!(paged, ids);
    let listed = ok_json(
        &cli(
            &ep,
            &["background", "list", "--all", "--json", "--page-size", "1"],
        )
        .await,
        "background list --page-size 1",
    );
    let cli_ids: Vec<&str> = listed["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(cli_ids, ids);
    let e = engine(&ep)
        .await
        .unwrap()
        .list_background_calls(pb::ListBackgroundCallsRequest {
            page_size: 2,
            page_token: "not-a-token".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("page_token"), "{e:?}");
    assert_eq!(moved("task"), Some(tasks as f64), "{metrics}");
    assert_eq!(moved("wait"), Some(1.0), "{metrics}");
    let finished = |outcome| {
        sample(
            &metrics,
            "switchyard_control_plane_background_calls_total",
            &[("server", "fake"), ("outcome", outcome)],
        )
    };
    assert_eq!(finished("completed"), Some(1.0), "{metrics}");
    assert_eq!(finished("failed"), Some(1.0), "{metrics}");
    assert_eq!(
        sample(
            &metrics,
            "switchyard_control_plane_calls_total",
            &[("server", "fake"), ("outcome", "backgrounded")]
        ),
        Some(all.len() as f64),
        "{metrics}"
    );
    drop(sidecar);
    r.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_marks_the_call_and_tells_its_sidecar() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let r = start_background_replica(
        dir.path(),
        "a",
        &StoreKind::Embedded,
        "sweepIntervalMs = 200\n",
    )
    .await;
    let ep = endpoint(&r);
    let sidecar = fake_sidecar(&ep, "sc-1").await;
    wait_tool(&ep, TOOL).await;
    let s = create_session(&ep).await;
    let mut events = subscribe(&ep, &s, 0).await;

    // ---- a held (wait-mode) call, cancelled with the CLI
    let held = call(&ep, &s, json!({"mode": "wait"}))
        .await
        .unwrap()
        .background
        .expect("moved");
    let mut e = engine(&ep).await.unwrap();
    refused(
        e.cancel_background_call(pb::CancelBackgroundCallRequest {
            id: held.id.clone(),
            session_id: "another-session".into(),
        })
        .await,
        Code::NotFound,
        &held.id,
    );
    refused(
        e.cancel_background_call(pb::CancelBackgroundCallRequest {
            id: "no-such-call".into(),
            session_id: String::new(),
        })
        .await,
        Code::NotFound,
        "no-such-call",
    );
    assert!(sidecar.cancels().is_empty());
    let out = ok_stdout(
        &cli(&ep, &["background", "cancel", &held.id, "--session", &s]).await,
        "background cancel",
    );
    assert_eq!(out.trim(), format!("{}: cancelled (book on fake)", held.id));
    {
        let cancels = sidecar.cancels();
        assert_eq!(cancels.len(), 1);
        assert_eq!(cancels[0].id, held.id);
        assert_eq!(cancels[0].task_id, "");
    }
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(ev.r#type, "background_call.cancelled");
    assert_eq!(data["id"], held.id.as_str());
    assert_eq!(data["statusMessage"], "cancelled by the user");
    // Once finished, it cannot be cancelled again, and the sidecar's late
    // report does not undo it.
    refused(
        e.cancel_background_call(pb::CancelBackgroundCallRequest {
            id: held.id.clone(),
            session_id: String::new(),
        })
        .await,
        Code::FailedPrecondition,
        "already finished (cancelled)",
    );
    let out = cli(&ep, &["background", "cancel", &held.id]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already finished"));
    let after = update(&ep, completed(held.clone(), "too late"))
        .await
        .unwrap();
    assert_eq!(after.status, "cancelled");
    assert!(after.result.is_none());

    // ---- a task, cancelled through the engine API: the sidecar gets its
    // taskId
    let task = call(&ep, &s, json!({"mode": "task"}))
        .await
        .unwrap()
        .background
        .expect("moved");
    let c = e
        .cancel_background_call(pb::CancelBackgroundCallRequest {
            id: task.id.clone(),
            session_id: s.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(c.status, "cancelled");
    assert!(c.finished_at_ms > 0);
    assert_eq!(sidecar.cancels()[1].task_id, format!("task-{}", task.id));
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(
        (ev.r#type.as_str(), data["id"].as_str().unwrap()),
        ("background_call.cancelled", task.id.as_str())
    );
    // ---- `switchyard events` shows them (replayed) as readable lines
    let mut follow = Command::new(switchyard_bin())
        .args(["--endpoint", &ep, "events", "--session", &s])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("switchyard events");
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    tokio::time::timeout(LIMIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push(line);
            if seen
                .iter()
                .filter(|l| l.contains("message: cancelled by the user"))
                .count()
                == 2
            {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("switchyard events printed: {seen:#?}"));
    let text = seen.join("\n");
    assert!(
        text.contains(&format!(
            " background_call.cancelled\n  {} [cancelled] {TOOL} on fake (wait mode, run run-1)\n  message: cancelled by the user",
            held.id
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "  {} [cancelled] {TOOL} on fake (task mode, run run-1)",
            task.id
        )),
        "{text}"
    );
    let _ = follow.kill().await;

    let out = ok_stdout(
        &cli(&ep, &["background", "list", "--all"]).await,
        "background list",
    );
    assert_eq!(
        out.lines().filter(|l| l.contains("cancelled")).count(),
        2,
        "{out}"
    );
    // ---- `switchyard call --json` of a call that moves shows the record
    let v = ok_json(
        &cli(
            &ep,
            &[
                "call",
                TOOL,
                "--args",
                r#"{"mode":"task"}"#,
                "--session",
                &s,
                "--json",
            ],
        )
        .await,
        "call --json",
    );
    let moved_id = v["movedToBackground"]["id"]
        .as_str()
        .expect("moved")
        .to_owned();
    assert_eq!(v["movedToBackground"]["status"], "working", "{v}");
    assert!(v["text"].as_str().unwrap().contains(&moved_id), "{v}");
    let out = ok_stdout(&cli(&ep, &["background", "list"]).await, "background list");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.lines().nth(1).unwrap().starts_with(&moved_id), "{out}");
    let (_, metrics) = http_get(&r.http_addr.to_string(), "/metrics").await;
    assert_eq!(
        sample(
            &metrics,
            "switchyard_control_plane_background_calls_total",
            &[
                ("server", "fake"),
                ("mode", "wait"),
                ("outcome", "cancelled")
            ]
        ),
        Some(1.0),
        "{metrics}"
    );
    r.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_fails_held_calls_and_adopts_tasks() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let r = start_background_replica(
        dir.path(),
        "a",
        &StoreKind::Embedded,
        "sweepIntervalMs = 200\n",
    )
    .await;
    let ep = endpoint(&r);
    let mut a = fake_sidecar(&ep, "sc-a").await;
    let mut b = fake_sidecar(&ep, "sc-b").await;
    wait_tool(&ep, TOOL).await;
    let s = create_session(&ep).await;
    let mut events = subscribe(&ep, &s, 0).await;

    let held = update(&ep, record("held-1", &s, "wait", "sc-a"))
        .await
        .unwrap();
    let task = update(&ep, record("task-1", &s, "task", "sc-a"))
        .await
        .unwrap();
    // Live owners: the sweeper leaves them alone.
    no_background(&mut events, Duration::from_millis(800)).await;
    assert_eq!(get(&ep, "held-1").await.unwrap().status, "working");
    assert_eq!(get(&ep, "task-1").await.unwrap().sidecar_id, "sc-a");

    // ---- sc-a goes away: its held call fails, its task moves to sc-b
    a.close();
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(ev.r#type, "background_call.failed");
    assert_eq!(data["id"], held.id.as_str());
    assert_eq!(
        data["statusMessage"],
        "the sidecar holding the call restarted or went away"
    );
    let adopted = b.next_adopt().await;
    assert_eq!(adopted.len(), 1, "{adopted:?}");
    assert_eq!(adopted[0].id, task.id);
    assert_eq!(adopted[0].sidecar_id, "sc-b");
    assert_eq!(adopted[0].task_id, "task-task-1");
    assert_eq!(get(&ep, "task-1").await.unwrap().sidecar_id, "sc-b");
    // The old owner's late report does not take it back.
    let mut stale = task.clone();
    stale.status_message = "stale".into();
    let kept = update(&ep, stale).await.unwrap();
    assert_eq!(
        (kept.sidecar_id.as_str(), kept.status_message.as_str()),
        ("sc-b", "")
    );

    // ---- no live sidecar at all: the task waits (it is not failed)
    b.close();
    wait_gone(&ep, "sc-b").await;
    no_background(&mut events, Duration::from_millis(1000)).await;
    let t = get(&ep, "task-1").await.unwrap();
    assert_eq!(
        (t.status.as_str(), t.sidecar_id.as_str()),
        ("working", "sc-b")
    );

    // ---- a new sidecar adopts it on hello
    let mut c = fake_sidecar(&ep, "sc-c").await;
    let adopted = c.next_adopt().await;
    assert_eq!(
        adopted
            .iter()
            .map(|x| (x.id.as_str(), x.sidecar_id.as_str()))
            .collect::<Vec<_>>(),
        [("task-1", "sc-c")]
    );
    // ---- the same sidecar id reconnecting (a restart) gets it again
    c.close();
    let mut c2 = fake_sidecar(&ep, "sc-c").await;
    let adopted = c2.next_adopt().await;
    assert_eq!(adopted.len(), 1);
    assert_eq!(adopted[0].id, "task-1");
    // ---- and its result is delivered
    let mut done = adopted[0].clone();
    done.sidecar_id = "sc-c".into();
    update(&ep, completed(done, "adopted and done"))
        .await
        .unwrap();
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(ev.r#type, "background_call.completed");
    assert_eq!(data["result"]["modelText"], "adopted and done");
    assert_eq!(data["sidecarId"], "sc-c");
    drop(c2);
    r.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adopted_task_goes_back_to_its_creator_and_not_found_fails_it_only_without_one() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let r = start_background_replica(
        dir.path(),
        "a",
        &StoreKind::Embedded,
        "sweepIntervalMs = 200\n",
    )
    .await;
    let ep = endpoint(&r);
    let mut a = fake_sidecar(&ep, "sc-a").await;
    let mut b = fake_sidecar(&ep, "sc-b").await;
    wait_tool(&ep, TOOL).await;
    let s = create_session(&ep).await;
    let mut events = subscribe(&ep, &s, 0).await;
    let task = update(&ep, record("task-1", &s, "task", "sc-a"))
        .await
        .unwrap();
    assert_eq!(task.creator_sidecar_id, "sc-a", "{task:?}");

    // ---- sc-a's registration goes: sc-b adopts the task.
    a.close();
    let adopted = b.next_adopt().await;
    assert_eq!(adopted.len(), 1, "{adopted:?}");
    assert_eq!(
        (
            adopted[0].sidecar_id.as_str(),
            adopted[0].creator_sidecar_id.as_str()
        ),
        ("sc-b", "sc-a")
    );
    // ---- sc-a is back (it was alive, still polling its server's task):
    // the call goes back to it at its hello.
    let mut a = fake_sidecar(&ep, "sc-a").await;
    let back = a.next_adopt().await;
    assert_eq!(
        back.iter()
            .map(|x| (x.id.as_str(), x.sidecar_id.as_str()))
            .collect::<Vec<_>>(),
        [("task-1", "sc-a")]
    );
    assert_eq!(get(&ep, "task-1").await.unwrap().sidecar_id, "sc-a");

    // ---- the adopter says it still polls the task: told to let it go
    // (an id the control plane does not know is left alone); the owner is
    // not. A second `polling` within a second is not looked at.
    let polling = |ids: &[&str]| pb::SidecarReport {
        report: Some(pb::sidecar_report::Report::Polling(pb::BackgroundCallIds {
            ids: ids.iter().map(|i| (*i).to_owned()).collect(),
        })),
    };
    let release = |m: pb::ControlMessage| match m.message {
        Some(pb::control_message::Message::Release(r)) => Some(r.ids),
        _ => None,
    };
    let quiet = Duration::from_millis(800);
    b.report(polling(&["task-1", "no-such-call"])).await;
    assert_eq!(b.next_control("release", release).await, ["task-1"]);
    b.report(polling(&["task-1"])).await;
    assert!(
        tokio::time::timeout(quiet, b.next_control("release", release))
            .await
            .is_err(),
        "a polling report a moment after the last was looked at"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.report(polling(&["task-1"])).await;
    assert_eq!(b.next_control("release", release).await, ["task-1"]);
    a.report(polling(&["task-1"])).await;
    assert!(
        tokio::time::timeout(quiet, a.next_control("release", release))
            .await
            .is_err(),
        "the owner was told to stop polling its own task"
    );

    // ---- the adopter's server does not know the task: not a result while
    // its creator is registered. The record stays running, the creator's.
    let mut not_found = adopted[0].clone();
    not_found.status = "failed".into();
    not_found.status_message = "task not found: task-task-1".into();
    not_found.task_not_found = true;
    let kept = update(&ep, not_found.clone()).await.unwrap();
    assert_eq!(
        (kept.status.as_str(), kept.sidecar_id.as_str()),
        ("working", "sc-a"),
        "{kept:?}"
    );
    no_background(&mut events, Duration::from_millis(800)).await;

    // ---- the creator is gone for good: the task moves to sc-b again, and
    // now its "not found" fails the call (the task died with its process).
    a.close();
    let adopted = b.next_adopt().await;
    assert_eq!(adopted[0].sidecar_id, "sc-b", "{adopted:?}");
    let failed = update(&ep, not_found).await.unwrap();
    assert_eq!(failed.status, "failed", "{failed:?}");
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(ev.r#type, "background_call.failed");
    assert_eq!(data["statusMessage"], "task not found: task-task-1");
    drop(b);
    r.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_fail_calls_and_retention_deletes_them() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let r = start_background_replica(
        dir.path(),
        "a",
        &StoreKind::Embedded,
        "sweepIntervalMs = 200\nretentionSec = 2\nmaxDurationSec = 60\nautoAfterSec = 5\n",
    )
    .await;
    let ep = endpoint(&r);
    let _sidecar = fake_sidecar(&ep, "sc-1").await;
    wait_tool(&ep, TOOL).await;
    let s = create_session(&ep).await;
    let mut events = subscribe(&ep, &s, 0).await;

    // The control plane fills in the deadline from maxDurationSec.
    let fresh = update(&ep, record("fresh", &s, "task", "sc-1"))
        .await
        .unwrap();
    assert_eq!(fresh.deadline_ms, fresh.created_at_ms + 60_000);
    // One created long ago, past its deadline (and the grace).
    let mut old = record("old", &s, "task", "sc-1");
    old.created_at_ms = now_ms() - 120_000;
    old.deadline_ms = now_ms() - 60_000;
    update(&ep, old).await.unwrap();
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(ev.r#type, "background_call.failed");
    assert_eq!(data["id"], "old");
    assert!(
        data["statusMessage"]
            .as_str()
            .unwrap()
            .contains("maximum duration (backgroundCalls.maxDurationSec = 60 s)"),
        "{data}"
    );
    // Kept for retentionSec, then deleted; the running one stays.
    assert_eq!(get(&ep, "old").await.unwrap().status, "failed");
    eventually("retention", LIMIT, || {
        let ep = ep.clone();
        async move {
            match get(&ep, "old").await {
                Err(e) if e.code() == Code::NotFound => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert_eq!(get(&ep, "fresh").await.unwrap().status, "working");
    r.stop(Duration::from_secs(5)).await;
}

/// Starts `switchyard-control-plane --config` on `store`; returns it and
/// its gRPC endpoint.
async fn replica_process(dir: &Path, name: &str, store: &StoreKind) -> (Proc, String) {
    replica_config(
        dir,
        name,
        store,
        "[backgroundCalls]\nsweepIntervalMs = 200\n",
    );
    let mut cmd = Command::new(control_plane_bin());
    cmd.arg("--config")
        .arg(dir.join(format!("{name}.toml")))
        .env("SWITCHYARD_LOG", "info");
    let (proc, line) = Proc::start(
        name,
        cmd,
        dir.join(format!("{name}.log")),
        "switchyard-control-plane: grpc on ",
    )
    .await;
    let addr = line
        .split("grpc on ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .expect("the grpc address")
        .to_owned();
    (proc, format!("http://{addr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_survive_a_replica_killed_on_etcd() {
    switchyard_test_support::init_tracing();
    let etcd = start_etcd().await;
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::Etcd(etcd.url.clone());
    let (mut p, ep_p) = replica_process(dir.path(), "p", &store).await;
    let q = start_background_replica(dir.path(), "q", &store, "sweepIntervalMs = 200\n").await;
    let ep_q = endpoint(&q);
    // The sidecar is registered at P and reports there.
    let sidecar = fake_sidecar(&ep_p, "sc-p").await;
    wait_tool(&ep_q, TOOL).await;
    let s = create_session(&ep_q).await;
    let mut at_q = subscribe(&ep_q, &s, 0).await;
    let mut at_p = subscribe(&ep_p, &s, 0).await;

    // ---- a call made through Q is registered at P; its result, stored at
    // P, reaches the subscriber at Q (and at P)
    let first = call(&ep_q, &s, json!({"mode": "task"}))
        .await
        .unwrap()
        .background
        .expect("moved");
    let done = update(&ep_p, completed(first.clone(), "first done"))
        .await
        .unwrap();
    let (ev, data) = next_background(&mut at_q).await;
    assert_eq!(data["id"], first.id.as_str());
    assert_eq!(ev.at_ms, done.finished_at_ms);
    let (_, data) = next_background(&mut at_p).await;
    assert_eq!(data["id"], first.id.as_str());

    // ---- a held call, and a second result stored at P just before P is
    // killed
    let held = update(&ep_p, record("held-p", &s, "wait", "sc-p"))
        .await
        .unwrap();
    let second = update(
        &ep_p,
        completed(record("second", &s, "task", "sc-p"), "second done"),
    )
    .await
    .unwrap();
    signal(p.pid, nix::sys::signal::Signal::SIGKILL);
    let _ = tokio::time::timeout(LIMIT, p.child.wait()).await;

    // The engine subscribes again, at Q, from the last event it saw: the
    // second result is replayed, the first is not.
    drop(at_q);
    let mut again = subscribe(&ep_q, &s, ev.at_ms).await;
    let (ev2, data2) = next_background(&mut again).await;
    assert_eq!(ev2.r#type, "background_call.completed");
    assert_eq!(data2["id"], "second");
    assert_eq!(data2["result"]["modelText"], "second done");
    assert_eq!(ev2.at_ms, second.finished_at_ms);
    // The sidecar's registration at P expires; Q's sweeper fails its held
    // call (a real sidecar would have registered again at Q).
    let (ev3, data3) = next_background(&mut again).await;
    assert_eq!(ev3.r#type, "background_call.failed");
    assert_eq!(data3["id"], held.id.as_str());
    let all = engine(&ep_q)
        .await
        .unwrap()
        .list_background_calls(pb::ListBackgroundCallsRequest {
            session_id: s.clone(),
            include_finished: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut ids: Vec<_> = all.calls.iter().map(|c| c.id.clone()).collect();
    ids.sort();
    let mut want = vec![first.id.clone(), "held-p".to_owned(), "second".to_owned()];
    want.sort();
    assert_eq!(ids, want);
    drop(sidecar);
    q.stop(Duration::from_secs(5)).await;
}

/// A `[sidecar]` config for `server` (the reference server with `--tasks`
/// in `era`, stdio) reporting to `control_plane`; polling as fast as 100 ms.
fn real_sidecar_config(
    dir: &Path,
    server: &str,
    era: &str,
    control_plane: &str,
) -> std::path::PathBuf {
    let path = dir.join(format!("{server}.toml"));
    std::fs::write(
        &path,
        format!(
            "[server]\nname = {name}\ntransport = \"stdio\"\ncommand = {cmd}\nargs = [\"--era\", {era}, \"--tasks\"]\n\n\
             [sidecar]\ncontrol_plane = {cp}\nsidecar_id = {id}\ngrace_secs = 2\ntask_poll_min_ms = 100\n",
            name = toml_str(server),
            cmd = toml_str(switchyard_test_support::reference_server_bin().to_string_lossy()),
            era = toml_str(era),
            cp = toml_str(control_plane),
            id = toml_str(format!("{server}-1")),
        ),
    )
    .expect("write the sidecar config");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_sidecars_move_tasks_and_deliver_their_results() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let reference = toml_str(switchyard_test_support::reference_server_bin().to_string_lossy());
    let servers = format!(
        "\n[[servers]]\nname = \"t25\"\ntransport = \"stdio\"\ncommand = {reference}\nargs = [\"--era\", \"2025-11-25\", \"--tasks\"]\n\
         \n[[servers]]\nname = \"t26\"\ntransport = \"stdio\"\ncommand = {reference}\nargs = [\"--era\", \"2026-07-28\", \"--tasks\"]\n"
    );
    let (text, _, _) = config_text(dir.path(), &StoreKind::Embedded, 4, &servers);
    let path = dir.path().join("cp.toml");
    std::fs::write(
        &path,
        format!("{text}\n[backgroundCalls]\nautoAfterSec = 1\nsweepIntervalMs = 200\n"),
    )
    .unwrap();
    let r = server::start(&Config::load(&path).unwrap(), true)
        .await
        .expect("replica starts");
    let ep = endpoint(&r);
    let mut sidecars = Vec::new();
    for (server, era) in [("t25", "2025-11-25"), ("t26", "2026-07-28")] {
        let mut cmd = Command::new(sidecar_bin());
        cmd.arg("run")
            .arg("--config")
            .arg(real_sidecar_config(dir.path(), server, era, &ep))
            .env("SWITCHYARD_LOG", "info");
        sidecars.push(
            Proc::start(
                server,
                cmd,
                dir.path().join(format!("{server}.log")),
                &format!("switchyard-sidecar: server {server}, calls on"),
            )
            .await
            .0,
        );
    }
    for server in ["t25", "t26"] {
        wait_tool(&ep, &format!("{server}__task_sleep")).await;
    }
    let s = create_session_all(&ep).await;
    let mut events = subscribe(&ep, &s, 0).await;
    for (server, mode_text) in [("t25", "era 2025"), ("t26", "era 2026")] {
        let tool = format!("{server}__task_sleep");
        // Done within the foreground phase: a normal result.
        let quick = engine(&ep)
            .await
            .unwrap()
            .call_tool(pb::CallToolRequest {
                session_id: s.clone(),
                tool: tool.clone(),
                arguments_json: json!({"ms": 100, "text": "quick", "pollIntervalMs": 100})
                    .to_string(),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e:?}"))
            .into_inner();
        assert!(quick.background.is_none(), "{server}: {quick:?}");
        // The processed text: the structuredContent follows as JSON.
        assert_eq!(
            quick.text, "slept 100 ms: quick\n\n{\n  \"ms\": 100,\n  \"text\": \"quick\"\n}",
            "{server}"
        );
        // Longer than autoAfterSec: moved, then delivered as an event.
        let slow = engine(&ep)
            .await
            .unwrap()
            .call_tool(pb::CallToolRequest {
                session_id: s.clone(),
                tool: tool.clone(),
                run_id: "run-7".into(),
                arguments_json: json!({"ms": 2500, "text": mode_text, "pollIntervalMs": 200, "immediate": "On it."}).to_string(),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e:?}"))
            .into_inner();
        let bg = slow
            .background
            .clone()
            .unwrap_or_else(|| panic!("{server}: not moved: {slow:?}"));
        assert_eq!(bg.mode, "task", "{server}: {bg:?}");
        assert!(!bg.task_id.is_empty());
        assert_eq!(bg.session_id, s);
        assert!(
            slow.text.contains(&format!("(id {})", bg.id)),
            "{}",
            slow.text
        );
        assert!(slow.text.ends_with("\n\nOn it."), "{server}: {}", slow.text);
        let (ev, data) = next_background(&mut events).await;
        assert_eq!(ev.r#type, "background_call.completed", "{server}: {data}");
        assert_eq!(data["id"], bg.id.as_str());
        // Processed like a foreground result (structuredContent appended).
        let text = data["result"]["modelText"].as_str().unwrap_or("");
        assert!(
            text.starts_with(&format!("slept 2500 ms: {mode_text}")),
            "{server}: {data}"
        );
        assert_eq!(data["result"]["isError"], false);
        assert_eq!(data["runId"], "run-7");
    }
    drop(sidecars);
    r.stop(Duration::from_secs(5)).await;
}

/// A `[sidecar]` config for the HTTP server `th` at `url`, sidecar `id`.
fn http_sidecar_config(dir: &Path, id: &str, url: &str, control_plane: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{id}.toml"));
    std::fs::write(
        &path,
        format!(
            "[server]\nname = \"th\"\ntransport = \"http\"\nurl = {url}\n\n\
             [sidecar]\ncontrol_plane = {cp}\nsidecar_id = {id}\ngrace_secs = 2\ntask_poll_min_ms = 100\n",
            url = toml_str(url),
            cp = toml_str(control_plane),
            id = toml_str(id),
        ),
    )
    .expect("write the sidecar config");
    path
}

async fn http_sidecar(dir: &Path, id: &str, url: &str, control_plane: &str) -> Proc {
    http_sidecar_and_metrics(dir, id, url, control_plane)
        .await
        .0
}

/// [`http_sidecar`], and the address of its `/metrics`.
async fn http_sidecar_and_metrics(
    dir: &Path,
    id: &str,
    url: &str,
    control_plane: &str,
) -> (Proc, String) {
    let mut cmd = Command::new(sidecar_bin());
    cmd.arg("run")
        .arg("--config")
        .arg(http_sidecar_config(dir, id, url, control_plane))
        .env("SWITCHYARD_LOG", "info");
    let (proc, ready) = Proc::start(
        id,
        cmd,
        dir.join(format!("{id}.log")),
        "switchyard-sidecar: server th, calls on",
    )
    .await;
    let http = ready
        .rsplit("http on ")
        .next()
        .expect("the ready line names the http address")
        .trim()
        .to_owned();
    (proc, http)
}

/// The `tasks/get` polls a sidecar made so far (every outcome).
async fn task_polls(metrics: &str) -> f64 {
    let (status, body) = http_get(metrics, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    body.lines()
        .filter(|l| l.starts_with("switchyard_sidecar_task_polls_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until background call `id` is owned by `sidecar`.
async fn owner_becomes(ep: &str, id: &str, sidecar: &str) {
    eventually(&format!("{id} owned by {sidecar}"), LIMIT, || async move {
        let owner = get(ep, id).await.map_err(|e| e.to_string())?.sidecar_id;
        (owner == sidecar).then_some(()).ok_or(owner)
    })
    .await;
}

/// Waits until the sidecar whose `/metrics` is at `metrics` has made more
/// than `polls` task polls.
async fn polls_past(metrics: &str, polls: f64) {
    eventually(
        &format!("more than {polls} task polls"),
        LIMIT,
        || async move {
            let n = task_polls(metrics).await;
            (n > polls).then_some(()).ok_or(format!("{n} polls"))
        },
    )
    .await;
}

/// A task-mode call adopted while its creator's registration lapsed goes
/// back to the creator when it returns, and then only the creator polls
/// it: the adopter's `polling` report is answered `release`, so the two
/// never keep asking the server about one task. The creator keeps polling
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_give_back_only_the_creator_polls_the_task() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let (upstream, r, ep) = tasks_replica(dir.path()).await;
    let (creator, creator_metrics) =
        http_sidecar_and_metrics(dir.path(), "h-a", &upstream.url, &ep).await;
    always_in_background(&ep).await;
    let s = create_session_all(&ep).await;
    let mut events = subscribe(&ep, &s, 0).await;
    let bg = engine(&ep)
        .await
        .unwrap()
        .call_tool(pb::CallToolRequest {
            session_id: s.clone(),
            tool: "th__task_sleep".into(),
            arguments_json: json!({"ms": 300_000, "text": "long job", "pollIntervalMs": 100})
                .to_string(),
            ..Default::default()
        })
        .await
        .expect("CallTool")
        .into_inner()
        .background
        .expect("moved at once");
    assert_eq!(bg.sidecar_id, "h-a");
    let (_adopter, adopter_metrics) =
        http_sidecar_and_metrics(dir.path(), "h-b", &upstream.url, &ep).await;

    // ---- h-a freezes past its lease: h-b adopts the task and polls it.
    signal(creator.pid, nix::sys::signal::Signal::SIGSTOP);
    owner_becomes(&ep, &bg.id, "h-b").await;
    let at_adoption = task_polls(&adopter_metrics).await;
    polls_past(&adopter_metrics, at_adoption + 2.0).await;

    // ---- h-a thaws, registers again and gets its task back.
    signal(creator.pid, nix::sys::signal::Signal::SIGCONT);
    owner_becomes(&ep, &bg.id, "h-a").await;
    // Within a lease TTL (2 s) and a poll, h-b has stopped polling it.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stopped_at = task_polls(&adopter_metrics).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        task_polls(&adopter_metrics).await,
        stopped_at,
        "the adopter still polls a task it gave back"
    );

    // ---- the creator polls it; cancelling it ends it.
    let creator_polls = task_polls(&creator_metrics).await;
    polls_past(&creator_metrics, creator_polls + 2.0).await;
    engine(&ep)
        .await
        .unwrap()
        .cancel_background_call(pb::CancelBackgroundCallRequest {
            id: bg.id.clone(),
            session_id: String::new(),
        })
        .await
        .expect("cancel");
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(ev.r#type, "background_call.cancelled", "{data}");
    drop(creator);
    r.stop(Duration::from_secs(5)).await;
}

/// The reference server over HTTP (2025-11-25, with tasks) as server
/// `th` of a replica on the embedded store, with a 2 s sidecar lease and
/// a sweep every 200 ms: the server, the replica and its endpoint.
async fn tasks_replica(dir: &Path) -> (switchyard_test_support::HttpServer, Running, String) {
    let mut reference = Command::new(switchyard_test_support::reference_server_bin());
    reference.args(["--http", "127.0.0.1:0", "--era", "2025-11-25", "--tasks"]);
    let upstream = switchyard_test_support::start_http_server(reference, "/mcp").await;
    let servers = format!(
        "\n[[servers]]\nname = \"th\"\ntransport = \"http\"\nurl = {}\n",
        toml_str(&upstream.url)
    );
    let (text, _, _) = config_text(dir, &StoreKind::Embedded, 2, &servers);
    let path = dir.join("cp.toml");
    std::fs::write(
        &path,
        format!("{text}\n[backgroundCalls]\nsweepIntervalMs = 200\n"),
    )
    .unwrap();
    let r = server::start(&Config::load(&path).unwrap(), true)
        .await
        .expect("replica starts");
    let ep = endpoint(&r);
    (upstream, r, ep)
}

/// Waits for `th__task_sleep`, then moves every call of it to the
/// background at once.
async fn always_in_background(ep: &str) {
    wait_tool(ep, "th__task_sleep").await;
    ok_stdout(
        &cli(
            ep,
            &[
                "policy",
                "set",
                "th",
                "task_sleep",
                "--background",
                "always",
            ],
        )
        .await,
        "policy set",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_a_killed_sidecar_are_adopted_and_complete() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let (upstream, r, ep) = tasks_replica(dir.path()).await;
    let mut first = http_sidecar(dir.path(), "h-a", &upstream.url, &ep).await;
    always_in_background(&ep).await;
    let s = create_session_all(&ep).await;
    let mut events = subscribe(&ep, &s, 0).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let resp = engine(&ep)
            .await
            .unwrap()
            .call_tool(pb::CallToolRequest {
                session_id: s.clone(),
                tool: "th__task_sleep".into(),
                arguments_json:
                    json!({"ms": 3000, "text": format!("job {i}"), "pollIntervalMs": 200})
                        .to_string(),
                ..Default::default()
            })
            .await
            .expect("CallTool")
            .into_inner();
        let bg = resp.background.expect("moved at once");
        assert_eq!((bg.mode.as_str(), bg.sidecar_id.as_str()), ("task", "h-a"));
        ids.push((bg.id, format!("job {i}")));
    }
    // The sidecar dies with its tasks live; a new one takes them over.
    signal(first.pid, nix::sys::signal::Signal::SIGKILL);
    let _ = tokio::time::timeout(LIMIT, first.child.wait()).await;
    let _second = http_sidecar(dir.path(), "h-b", &upstream.url, &ep).await;
    let mut done = std::collections::HashMap::new();
    while done.len() < ids.len() {
        let (ev, data) = next_background(&mut events).await;
        assert_eq!(ev.r#type, "background_call.completed", "{data}");
        assert_eq!(data["sidecarId"], "h-b", "{data}");
        done.insert(
            data["id"].as_str().unwrap().to_owned(),
            data["result"]["modelText"].as_str().unwrap().to_owned(),
        );
    }
    for (id, text) in &ids {
        assert!(
            done[id].starts_with(&format!("slept 3000 ms: {text}")),
            "{id}: {}",
            done[id]
        );
    }
    r.stop(Duration::from_secs(5)).await;
}

async fn create_session_all(endpoint: &str) -> String {
    auto_session(&mut engine(endpoint).await.unwrap(), &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_calls_finish_or_fail_with_their_sidecar() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let everything = toml_str(switchyard_test_support::everything_bin().to_string_lossy());
    let servers = format!(
        "\n[[servers]]\nname = \"ev\"\ntransport = \"stdio\"\ncommand = {everything}\nargs = [\"stdio\"]\n"
    );
    let (text, _, _) = config_text(dir.path(), &StoreKind::Embedded, 2, &servers);
    let path = dir.path().join("cp.toml");
    std::fs::write(
        &path,
        format!("{text}\n[backgroundCalls]\nautoAfterSec = 1\nsweepIntervalMs = 200\n"),
    )
    .unwrap();
    let r = server::start(&Config::load(&path).unwrap(), true)
        .await
        .expect("replica starts");
    let ep = endpoint(&r);
    let config = dir.path().join("ev.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nname = \"ev\"\ntransport = \"stdio\"\ncommand = {everything}\nargs = [\"stdio\"]\n\n\
             [sidecar]\ncontrol_plane = {}\nsidecar_id = \"ev-1\"\ngrace_secs = 2\n",
            toml_str(&ep)
        ),
    )
    .unwrap();
    let mut cmd = Command::new(sidecar_bin());
    cmd.arg("run")
        .arg("--config")
        .arg(&config)
        .env("PATH", test_path())
        .env("SWITCHYARD_LOG", "info");
    let (mut sidecar, _) = Proc::start(
        "ev sidecar",
        cmd,
        dir.path().join("ev.log"),
        "switchyard-sidecar: server ev, calls on",
    )
    .await;
    let tool = "ev__trigger-long-running-operation";
    wait_tool(&ep, tool).await;
    let s = create_session_all(&ep).await;
    let mut events = subscribe(&ep, &s, 0).await;
    let long_call = |duration: u32| {
        let (ep, s) = (ep.clone(), s.clone());
        async move {
            engine(&ep)
                .await
                .unwrap()
                .call_tool(pb::CallToolRequest {
                    session_id: s,
                    tool: tool.into(),
                    arguments_json: json!({"duration": duration, "steps": 2}).to_string(),
                    ..Default::default()
                })
                .await
                .expect("CallTool")
                .into_inner()
        }
    };
    // Held past autoAfterSec, then finished: its result is an event.
    let resp = long_call(3).await;
    let bg = resp.background.expect("moved");
    assert_eq!(bg.mode, "wait", "no task support: {bg:?}");
    assert!(bg.task_id.is_empty());
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(ev.r#type, "background_call.completed", "{data}");
    assert_eq!(data["id"], bg.id.as_str());
    assert_eq!(
        data["result"]["modelText"],
        "Long running operation completed. Duration: 3 seconds, Steps: 2."
    );
    // Held when its sidecar is killed: failed, and the initiator is told.
    let resp = long_call(60).await;
    let bg = resp.background.expect("moved");
    signal(sidecar.pid, nix::sys::signal::Signal::SIGKILL);
    let _ = tokio::time::timeout(LIMIT, sidecar.child.wait()).await;
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(ev.r#type, "background_call.failed", "{data}");
    assert_eq!(data["id"], bg.id.as_str());
    assert_eq!(
        data["statusMessage"],
        "the sidecar holding the call restarted or went away"
    );
    r.stop(Duration::from_secs(5)).await;
}
