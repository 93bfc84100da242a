//! Stage B end to end with real processes: `switchyard up` in front of the
//! reference server's task tools (both eras, stdio and Streamable HTTP) and
//! server-everything.
//!
//! - A quick task returns like a normal call; a slow one moves to the
//!   background (with the server's immediate response) and the session is
//!   woken with the processed result; a failing task is a failed event;
//!   `input_required` after the move is a card without a run id; the CLI
//!   cancels a task, and the server sees `tasks/cancel`.
//! - server-everything's `simulate-research-query` (taskSupport required,
//!   elicitation while input_required) through the CLI: `call`, `events`,
//!   `answer`, `background list`.
//! - kill -9 of the sidecar while 100 tasks are live: `up` starts a
//!   replacement, which resumes polling from the store, and every task
//!   completes (the HTTP server outlives the sidecar). The same for a stdio
//!   server, which dies with its sidecar: every task fails with "task not
//!   found".

use crate::common::*;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::Duration;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use switchyard_test_support::{reference_server_bin, start_http_server};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tonic::transport::Channel;

/// A short foreground phase. The sidecars get a low poll floor
/// (`SWITCHYARD_TASK_POLL_MIN_MS`), so tasks that ask for 100–500 ms poll
/// intervals are polled at them.
const BACKGROUND: &str = "[backgroundCalls]\nautoAfterSec = 2\nmaxPerTarget = 500\n";
const ENV: [(&str, &str); 1] = [("SWITCHYARD_TASK_POLL_MIN_MS", "100")];
/// Bound on a background call finishing.
const FINISH: Duration = Duration::from_secs(60);

fn stdio_tasks_server(name: &str, era: &str) -> String {
    format!(
        "\n[[servers]]\nname = \"{name}\"\ntransport = \"stdio\"\ncommand = {bin}\nargs = [\"--era\", \"{era}\", \"--tasks\"]\n",
        bin = toml_str(reference_server_bin().to_string_lossy()),
    )
}

fn http_server_entry(name: &str, url: &str) -> String {
    format!(
        "\n[[servers]]\nname = \"{name}\"\ntransport = \"http\"\nurl = {url}\n",
        url = toml_str(url)
    )
}

/// The reference server over Streamable HTTP with its task tools.
async fn http_tasks_server(era: &str) -> switchyard_test_support::HttpServer {
    let mut cmd = Command::new(reference_server_bin());
    cmd.args(["--http", "127.0.0.1:0", "--era", era, "--tasks"]);
    start_http_server(cmd, "/mcp").await
}

async fn session(gw: &Gateway, servers: &[&str]) -> String {
    let mut args = vec!["sessions", "create", "--mode", "auto"];
    for s in servers {
        args.extend(["--server", s]);
    }
    ok_stdout(&gw.cli(&args).await, "sessions create")
        .trim()
        .to_owned()
}

/// A session's event stream. Events not asked for yet are kept, so the
/// order two events arrive in does not matter to a test.
struct Events(tonic::Streaming<pb::SessionEvent>, Vec<(String, Value)>);

impl Events {
    async fn open(engine: &mut EngineServiceClient<Channel>, session: &str) -> Events {
        Events(
            engine
                .subscribe_events(pb::SubscribeEventsRequest {
                    session_id: session.into(),
                    background_after_ms: 0,
                })
                .await
                .expect("SubscribeEvents")
                .into_inner(),
            Vec::new(),
        )
    }

    /// The next event whose type starts with `kind` and whose data `id` is
    /// `id` (any id when empty): (type, data).
    async fn next(&mut self, kind: &str, id: &str, limit: Duration) -> (String, Value) {
        let matches =
            |t: &str, data: &Value| t.starts_with(kind) && (id.is_empty() || data["id"] == id);
        if let Some(i) = self.1.iter().position(|(t, d)| matches(t, d)) {
            return self.1.remove(i);
        }
        let stream = &mut self.0;
        let kept = &mut self.1;
        tokio::time::timeout(limit, async {
            loop {
                let ev = stream
                    .message()
                    .await
                    .expect("event stream")
                    .expect("event stream ended");
                let data: Value = serde_json::from_str(&ev.data_json).expect("event JSON");
                if matches(&ev.r#type, &data) {
                    return (ev.r#type, data);
                }
                kept.push((ev.r#type, data));
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {kind} event for {id:?} within {limit:?}"))
    }
}

async fn call(
    engine: &mut EngineServiceClient<Channel>,
    session: &str,
    tool: &str,
    args: Value,
) -> pb::CallToolResponse {
    let mut request = call_request(tool, &args.to_string(), session);
    request.timeout_ms = 60_000;
    engine
        .call_tool(request)
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e:?}"))
        .into_inner()
}

/// Every stage B rule the reference server's task tools exercise, on one
/// server (one era).
async fn exercise(gw: &Gateway, server: &str) {
    let session = session(gw, &[server]).await;
    let mut engine = gw.engine().await;
    let mut events = Events::open(&mut engine, &session).await;
    let tool = |t: &str| format!("{server}__{t}");

    // Done within the foreground phase: a normal result.
    let quick = call(
        &mut engine,
        &session,
        &tool("task_sleep"),
        json!({"ms": 300, "pollIntervalMs": 100, "text": "quick"}),
    )
    .await;
    assert!(quick.background.is_none(), "{server}: {quick:?}");
    assert!(
        quick.text.contains("slept 300 ms: quick"),
        "{server}: {}",
        quick.text
    );

    // Slow: moved, with the server's immediate response; then woken.
    let slow = call(
        &mut engine,
        &session,
        &tool("task_sleep"),
        json!({"ms": 4000, "pollIntervalMs": 200, "text": "slow", "immediate": "the report is being built"}),
    )
    .await;
    let bg = slow
        .background
        .clone()
        .unwrap_or_else(|| panic!("{server}: not moved: {slow:?}"));
    assert_eq!(bg.mode, "task", "{server}: {bg:?}");
    assert!(!bg.task_id.is_empty(), "{server}: {bg:?}");
    assert!(
        slow.text.contains("moved to the background"),
        "{server}: {}",
        slow.text
    );
    assert!(
        slow.text.contains("the report is being built"),
        "{server}: {}",
        slow.text
    );
    let (kind, data) = events.next("background_call.", &bg.id, FINISH).await;
    assert_eq!(kind, "background_call.completed", "{server}: {data}");
    assert!(
        data["result"]["modelText"]
            .as_str()
            .unwrap_or("")
            .contains("slept 4000 ms: slow"),
        "{server}: {data}"
    );
    assert_eq!(data["sessionId"], session.as_str(), "{data}");

    // A failing task: a failed event carrying the server's error.
    let failing = call(
        &mut engine,
        &session,
        &tool("task_fail"),
        json!({"ms": 3000, "mode": "error", "pollIntervalMs": 200}),
    )
    .await;
    let bg = failing.background.expect("task_fail moved");
    let (kind, data) = events.next("background_call.", &bg.id, FINISH).await;
    assert_eq!(kind, "background_call.failed", "{server}: {data}");
    assert!(
        data.to_string().contains("failed on purpose"),
        "{server}: {data}"
    );

    // input_required after the move: a card with no run id, answered with
    // the CLI; the task then completes with the answer.
    let asking = call(
        &mut engine,
        &session,
        &tool("task_ask"),
        json!({"ms": 3000, "pollIntervalMs": 200}),
    )
    .await;
    let bg = asking.background.expect("task_ask moved");
    let (_, card) = events.next("interaction.required", "", FINISH).await;
    assert_eq!(card["kind"], "form", "{card}");
    assert_eq!(
        card["runId"].as_str().unwrap_or(""),
        "",
        "a background card has no run id: {card}"
    );
    let id = card["id"].as_str().expect("card id").to_owned();
    ok_stdout(
        &gw.cli(&[
            "answer",
            "--session",
            &session,
            &id,
            "--accept",
            r#"{"name":"Ada"}"#,
        ])
        .await,
        "answer",
    );
    let (kind, data) = events.next("background_call.", &bg.id, FINISH).await;
    assert_eq!(kind, "background_call.completed", "{server}: {data}");
    assert!(
        data["result"]["modelText"]
            .as_str()
            .unwrap_or("")
            .contains("hello Ada"),
        "{server}: {data}"
    );

    // Cancelling a call whose question is open closes the card, and a late
    // answer is refused.
    let asking = call(
        &mut engine,
        &session,
        &tool("task_ask"),
        json!({"ms": 3000, "pollIntervalMs": 200}),
    )
    .await;
    let bg = asking.background.expect("task_ask moved");
    let (_, card) = events.next("interaction.required", "", FINISH).await;
    let id = card["id"].as_str().expect("card id").to_owned();
    ok_stdout(
        &gw.cli(&["background", "cancel", &bg.id]).await,
        "background cancel",
    );
    let (_, resolved) = events.next("interaction.resolved", &id, LIMIT).await;
    assert_eq!(resolved["outcome"], "cancel", "{server}: {resolved}");
    let late = gw
        .cli(&[
            "answer",
            "--session",
            &session,
            &id,
            "--accept",
            r#"{"name":"Late"}"#,
        ])
        .await;
    assert_eq!(late.status.code(), Some(1), "{server}: {late:?}");
    let (kind, _) = events.next("background_call.", &bg.id, LIMIT).await;
    assert_eq!(kind, "background_call.cancelled", "{server}");

    // Cancel with the CLI: recorded and announced as cancelled, and the
    // server's task is cancelled too (it stops being polled as working).
    let forever = call(
        &mut engine,
        &session,
        &tool("task_forever"),
        json!({"pollIntervalMs": 200}),
    )
    .await;
    let bg = forever.background.expect("task_forever moved");
    ok_stdout(
        &gw.cli(&["background", "cancel", &bg.id]).await,
        "background cancel",
    );
    let (kind, _) = events.next("background_call.", &bg.id, LIMIT).await;
    assert_eq!(kind, "background_call.cancelled", "{server}");
    let listed = ok_json(
        &gw.cli(&[
            "background",
            "list",
            "--all",
            "--session",
            &session,
            "--json",
        ])
        .await,
        "background list",
    );
    let row = listed["calls"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == bg.id.as_str()))
        .unwrap_or_else(|| panic!("{} not listed: {listed}", bg.id))
        .clone();
    assert_eq!(row["status"], "cancelled", "{row}");
    // The server stopped polling counts for a cancelled task: its stats
    // show no poll after the cancellation settled.
    let stats = |task: String| {
        let mut engine = engine.clone();
        let session = session.clone();
        let tool = tool("task_stats");
        async move {
            let r = call(&mut engine, &session, &tool, json!({"taskId": task})).await;
            let s: Value = serde_json::from_str(&r.structured_content_json).expect("stats");
            s["polls"].as_u64().unwrap_or(0)
        }
    };
    let before = stats(bg.task_id.clone()).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let after = stats(bg.task_id.clone()).await;
    assert_eq!(before, after, "{server}: a cancelled task is still polled");
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_in_both_eras_finish_in_the_foreground_or_wake_the_session() {
    let _heavy = HEAVY.lock().await;
    let http = http_tasks_server("2026-07-28").await;
    let servers = format!(
        "{}{}{}",
        stdio_tasks_server("t25", "2025-11-25"),
        stdio_tasks_server("t26", "2026-07-28"),
        http_server_entry("th26", &http.url),
    );
    let gw = Gateway::start_with(
        StoreKind::Embedded,
        10,
        http,
        &servers,
        BACKGROUND,
        &ENV,
        &["t25", "t26", "th26"],
    )
    .await;
    exercise(&gw, "t25").await;
    exercise(&gw, "t26").await;
    exercise(&gw, "th26").await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulate_research_query_runs_in_the_background_through_the_cli() {
    let _heavy = HEAVY.lock().await;
    let http = http_tasks_server("2025-11-25").await;
    let servers = format!(
        "\n[[servers]]\nname = \"everything\"\ntransport = \"stdio\"\ncommand = {}\nargs = [\"stdio\"]\n",
        toml_str(switchyard_test_support::everything_bin().to_string_lossy())
    );
    let gw = Gateway::start_with(
        StoreKind::Embedded,
        10,
        http,
        &servers,
        BACKGROUND,
        &ENV,
        &["everything"],
    )
    .await;
    let session = session(&gw, &["everything"]).await;

    // Follow the session's events with the CLI, as a user would.
    let mut events = Command::new(switchyard_bin())
        .args([
            "--endpoint",
            &gw.endpoint,
            "events",
            "--session",
            &session,
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("switchyard events");
    let mut lines = BufReader::new(events.stdout.take().unwrap()).lines();
    let mut next_event = async move |kind: &str| -> Value {
        tokio::time::timeout(FINISH, async {
            loop {
                let line = lines
                    .next_line()
                    .await
                    .expect("events output")
                    .expect("events ended");
                let ev: Value = serde_json::from_str(&line).expect("one JSON event per line");
                if ev["type"] == kind {
                    return ev;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {kind} event on `switchyard events`"))
    };

    // The research takes 4 stages of 1 s and asks at the third: it moves to
    // the background after 2 s, then asks.
    let out = gw
        .cli(&[
            "call",
            "everything__simulate-research-query",
            "--session",
            &session,
            "--args",
            r#"{"topic":"python","ambiguous":true}"#,
        ])
        .await;
    // stdout: the background call's id; stderr: how to follow it.
    let moved_id = ok_stdout(&out, "switchyard call").trim().to_owned();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("moved to the background") && said.contains(&moved_id),
        "{said}"
    );

    let card = next_event("interaction.required").await;
    assert_eq!(card["data"]["kind"], "form", "{card}");
    assert_eq!(card["data"]["runId"].as_str().unwrap_or(""), "", "{card}");
    let id = card["data"]["id"].as_str().expect("card id").to_owned();
    ok_stdout(
        &gw.cli(&[
            "answer",
            "--session",
            &session,
            &id,
            "--accept",
            r#"{"interpretation":"programming"}"#,
        ])
        .await,
        "switchyard answer",
    );

    let done = next_event("background_call.completed").await;
    let report = done["data"]["result"]["modelText"].as_str().unwrap_or("");
    assert!(
        report.contains("Research Report: python (programming)"),
        "{done}"
    );

    let listed = ok_json(
        &gw.cli(&["background", "list", "--all", "--json"]).await,
        "background list",
    );
    let rows = listed["calls"].as_array().expect("a JSON array of calls");
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["status"], "completed", "{listed}");
    assert_eq!(rows[0]["mode"], "task", "{listed}");
    assert_eq!(rows[0]["tool"], "simulate-research-query", "{listed}");
    assert_eq!(rows[0]["id"], moved_id.as_str(), "{listed}");

    // `--background` moves any call there at once.
    let out = gw
        .cli(&[
            "call",
            "everything__echo",
            "--session",
            &session,
            "--background",
            "--args",
            r#"{"message":"later"}"#,
        ])
        .await;
    let id = ok_stdout(&out, "switchyard call --background")
        .trim()
        .to_owned();
    let done = next_event("background_call.completed").await;
    assert_eq!(done["data"]["id"], id.as_str(), "{done}");
    gw.stop().await;
}

/// Starts `n` calls of `tool` that each move to the background, and
/// returns their background ids and task ids.
async fn start_tasks(
    gw: &Gateway,
    session: &str,
    tool: &str,
    n: usize,
    ms: u64,
) -> HashMap<String, String> {
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..n {
        let mut engine = gw.engine().await;
        let session = session.to_owned();
        let tool = tool.to_owned();
        calls.spawn(async move {
            call(
                &mut engine,
                &session,
                &tool,
                json!({"ms": ms, "pollIntervalMs": 500, "text": format!("n{i}")}),
            )
            .await
        });
    }
    let mut ids = HashMap::new();
    while let Some(r) = calls.join_next().await {
        let r = r.expect("call task");
        let bg = r
            .background
            .unwrap_or_else(|| panic!("{tool}: not moved: {}", r.text));
        ids.insert(bg.id, bg.task_id);
    }
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sidecar_killed_with_100_live_tasks_is_replaced_and_loses_nothing() {
    let _heavy = HEAVY.lock().await;
    let http = http_tasks_server("2026-07-28").await;
    let servers = format!(
        "{}{}",
        http_server_entry("th", &http.url),
        stdio_tasks_server("ts", "2025-11-25"),
    );
    // A short lease: the killed sidecar's registration expires quickly and
    // its calls are adopted by the replacement `up` starts.
    let gw = Gateway::start_with(
        StoreKind::Embedded,
        3,
        http,
        &servers,
        BACKGROUND,
        &ENV,
        &["th", "ts"],
    )
    .await;
    // Every call of task_sleep moves to the background at once.
    for server in ["th", "ts"] {
        ok_stdout(
            &gw.cli(&[
                "policy",
                "set",
                server,
                "task_sleep",
                "--background",
                "always",
            ])
            .await,
            "policy set --background always",
        );
    }
    let session = session(&gw, &["th", "ts"]).await;
    let mut engine = gw.engine().await;

    let http_calls = start_tasks(&gw, &session, "th__task_sleep", 100, 12_000).await;
    let stdio_calls = start_tasks(&gw, &session, "ts__task_sleep", 10, 12_000).await;
    assert_eq!(http_calls.len(), 100);
    assert_eq!(stdio_calls.len(), 10);

    // kill -9 both sidecars while every task is live.
    for server in ["th", "ts"] {
        let pids = gw.sidecars_of(server);
        assert_eq!(pids.len(), 1, "{server}: {pids:?}");
        signal(pids[0], nix::sys::signal::Signal::SIGKILL);
    }

    // Replacements come up; every HTTP task completes with its own result,
    // every stdio task (its server died with the sidecar) fails with
    // "task not found".
    let mut pending: HashSet<String> = http_calls
        .keys()
        .chain(stdio_calls.keys())
        .cloned()
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let mut finished: HashMap<String, pb::BackgroundCall> = HashMap::new();
    while !pending.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} calls still unfinished: {:?}\n{}",
            pending.len(),
            pending.iter().take(5).collect::<Vec<_>>(),
            gw.log()
        );
        let list = engine
            .list_background_calls(pb::ListBackgroundCallsRequest {
                session_id: session.clone(),
                include_finished: true,
                ..Default::default()
            })
            .await
            .expect("ListBackgroundCalls")
            .into_inner();
        for c in list.calls {
            if c.finished_at_ms > 0 && pending.remove(&c.id) {
                finished.insert(c.id.clone(), c);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (id, task) in &http_calls {
        let c = &finished[id];
        assert_eq!(c.status, "completed", "{c:?}");
        assert_eq!(&c.task_id, task, "{c:?}");
        let text = c
            .result
            .as_ref()
            .map(|r| r.model_text.as_str())
            .unwrap_or("");
        assert!(text.contains("slept 12000 ms: n"), "{c:?}");
    }
    for id in stdio_calls.keys() {
        let c = &finished[id];
        assert_eq!(c.status, "failed", "{c:?}");
        assert!(c.status_message.contains("task not found"), "{c:?}");
    }
    // Each result was delivered once as an event: replayed in full to a new
    // subscriber, one per call.
    let mut events = Events::open(&mut engine, &session).await;
    let mut seen = HashSet::new();
    while seen.len() < 110 {
        let (_, data) = events.next("background_call.", "", LIMIT).await;
        assert!(
            seen.insert(data["id"].as_str().unwrap().to_owned()),
            "an event was sent twice: {data}"
        );
    }
    gw.stop().await;
}
