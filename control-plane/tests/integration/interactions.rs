//! Interactions end to end: forms, URLs and approvals raised by a (fake)
//! sidecar through `SidecarRegistry.Interact`, delivered on the owning
//! session's event stream, answered through the engine API or the CLI.
//!
//! - One replica in-process on an embedded store: the whole flow of each
//!   kind, tampered answers, another session's answer (NOT_FOUND), the same
//!   id asked twice, session deletion, the CLI (`events`, `interactions`,
//!   `answer`), the audit file and the metrics.
//! - Two replicas in-process on a real etcd with `interactionTimeoutSec =
//!   2`: an unanswered form and an unanswered approval time out as
//!   `cancel` / "not approved"; the sweeper of the surviving replica times
//!   out an interaction whose waiting replica stopped.
//! - Two `switchyard-control-plane` processes on a real etcd: the sidecar
//!   asks at B, the engine follows and answers at A; A is killed (SIGKILL)
//!   and the engine carries on at B; B is killed and the sidecar asks again,
//!   with the same id, at a restarted A, which serves the same interaction.
//!
//! The fake sidecar is test support's: `Register`, a `Report` stream
//! (hello + a catalogue); the test then makes its `Interact` calls with a
//! plain `SidecarRegistryClient`.

use crate::common::*;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};
use switchyard_control_plane::config::Config;
use switchyard_control_plane::interactions;
use switchyard_control_plane::server::{self, Running};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient;
use switchyard_test_support::fake_sidecar::FakeSidecar;
use switchyard_test_support::start_etcd;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::task::JoinHandle;
use tonic::Code;
use tonic::codec::Streaming;

/// The server the fake sidecar fronts (never started: no sidecar runs it).
const FAKE_SERVER: &str =
    "\n[[servers]]\nname = \"fake\"\ntransport = \"stdio\"\ncommand = \"true\"\n";

const FORM_PARAMS: &str = r#"{"mode":"form","message":"Where should we ship?","requestedSchema":{"type":"object","properties":{"city":{"type":"string","title":"City","minLength":2,"x-widget":"wide"},"express":{"type":"boolean","default":false},"size":{"type":"string","enum":["s","m","l"]}},"required":["city"]},"_meta":{"trace":"t-1"}}"#;

fn url_params(elicitation_id: &str) -> String {
    json!({
        "mode": "url",
        "message": "Sign in to the shop",
        "url": "https://login.shop.example.com/authorize?state=abc",
        "elicitationId": elicitation_id,
    })
    .to_string()
}

fn form_request(session: &str, id: &str) -> pb::InteractRequest {
    pb::InteractRequest {
        interaction_id: id.into(),
        server: "fake".into(),
        session_id: session.into(),
        run_id: "run-1".into(),
        tool: "book".into(),
        kind: "form".into(),
        params_json: FORM_PARAMS.into(),
        ..pb::InteractRequest::default()
    }
}

/// Writes a replica config (free ports, `store`, the fake server, the
/// interaction timeout, an audit file) and loads it.
fn replica_config(dir: &Path, name: &str, store: &StoreKind, timeout_sec: u64) -> Config {
    let (text, _, _) = config_text(dir, store, 4, FAKE_SERVER);
    let text = format!(
        "{text}\n[limits]\ninteractionTimeoutSec = {timeout_sec}\n\n[audit]\npath = {}\n",
        toml_str(format!("{name}-audit.jsonl"))
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("write the config");
    Config::load(&path).expect("a valid config")
}

async fn start_in_process(dir: &Path, name: &str, store: &StoreKind, timeout: u64) -> Running {
    let config = replica_config(dir, name, store, timeout);
    server::start(&config, true).await.expect("replica starts")
}

fn endpoint(r: &Running) -> String {
    format!("http://{}", r.grpc_addr)
}

async fn registry(endpoint: &str) -> SidecarRegistryClient<tonic::transport::Channel> {
    SidecarRegistryClient::connect(endpoint.to_owned())
        .await
        .unwrap_or_else(|e| panic!("connect to {endpoint}: {e}"))
}

/// A fake sidecar of `fake` (test support's): registered, its report
/// stream open with a catalogue, welcomed. Dropping it closes the stream.
async fn fake_sidecar(endpoint: &str, id: &str) -> FakeSidecar {
    FakeSidecar::of(endpoint, id).start().await
}

/// `Interact` at `endpoint`, in the background; the ElicitResult.
fn interact(endpoint: &str, req: pb::InteractRequest) -> JoinHandle<Result<Value, tonic::Status>> {
    let endpoint = endpoint.to_owned();
    tokio::spawn(async move {
        let resp = registry(&endpoint).await.interact(req).await?.into_inner();
        Ok(serde_json::from_str(&resp.result_json).expect("result_json is JSON"))
    })
}

async fn settle<T>(what: &str, h: JoinHandle<T>) -> T {
    tokio::time::timeout(LIMIT, h)
        .await
        .unwrap_or_else(|_| panic!("{what}: no result within {LIMIT:?}"))
        .expect("task")
}

async fn create_session(endpoint: &str) -> String {
    engine(endpoint)
        .await
        .unwrap()
        .create_session(pb::CreateSessionRequest {
            enabled_servers: vec!["fake".into()],
            permission_mode: pb::PermissionMode::Ask as i32,
            roots: vec![],
        })
        .await
        .expect("CreateSession")
        .into_inner()
        .id
}

async fn subscribe(endpoint: &str, session: &str) -> Streaming<pb::SessionEvent> {
    engine(endpoint)
        .await
        .unwrap()
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: session.into(),
            ..Default::default()
        })
        .await
        .expect("SubscribeEvents")
        .into_inner()
}

/// The next `ty` event about interaction `id` (others are skipped).
async fn next_event(events: &mut Streaming<pb::SessionEvent>, ty: &str, id: &str) -> Value {
    tokio::time::timeout(LIMIT, async {
        loop {
            let ev = events
                .message()
                .await
                .expect("the event stream")
                .expect("the event stream is open");
            if ev.r#type == ty {
                let data: Value = serde_json::from_str(&ev.data_json).expect("data_json");
                if data["id"] == id {
                    return data;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {ty} for {id} within {LIMIT:?}"))
}

/// The next `ty` event about an interaction of `kind`.
async fn next_of_kind(events: &mut Streaming<pb::SessionEvent>, ty: &str, kind: &str) -> Value {
    tokio::time::timeout(LIMIT, async {
        loop {
            let ev = events
                .message()
                .await
                .expect("the event stream")
                .expect("the event stream is open");
            if ev.r#type == ty {
                let data: Value = serde_json::from_str(&ev.data_json).expect("data_json");
                if data["kind"] == kind {
                    return data;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {ty} of a {kind} within {LIMIT:?}"))
}

async fn answer(
    endpoint: &str,
    session: &str,
    id: &str,
    action: &str,
    content: &str,
) -> Result<pb::Interaction, tonic::Status> {
    engine(endpoint)
        .await
        .unwrap()
        .answer_interaction(pb::AnswerInteractionRequest {
            session_id: session.into(),
            interaction_id: id.into(),
            action: action.into(),
            content_json: content.into(),
        })
        .await
        .map(|r| r.into_inner())
}

async fn list(endpoint: &str, session: &str, all: bool) -> Vec<pb::Interaction> {
    engine(endpoint)
        .await
        .unwrap()
        .list_interactions(pb::ListInteractionsRequest {
            session_id: session.into(),
            include_resolved: all,
        })
        .await
        .expect("ListInteractions")
        .into_inner()
        .interactions
}

fn refused(r: Result<pb::Interaction, tonic::Status>, code: Code, needle: &str) -> String {
    match r {
        Err(s) if s.code() == code && s.message().contains(needle) => s.message().to_owned(),
        other => panic!("expected {code:?} containing {needle:?}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_urls_approvals_on_one_replica() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let cp = start_in_process(dir.path(), "solo", &StoreKind::Embedded, 600).await;
    let ep = endpoint(&cp);
    let _sidecar = fake_sidecar(&ep, "fake-1").await;
    let s = create_session(&ep).await;
    let other = create_session(&ep).await;
    let mut events = subscribe(&ep, &s).await;

    // ---- a form
    let asked = Instant::now();
    let waiting = interact(&ep, form_request(&s, "form-1"));
    let card = next_event(&mut events, "interaction.required", "form-1").await;
    eprintln!("form: interaction.required after {:?}", asked.elapsed());
    assert_eq!(card["kind"], "form");
    assert_eq!(card["status"], "open");
    assert_eq!(card["server"], "fake");
    assert_eq!(card["tool"], "book");
    assert_eq!(card["runId"], "run-1");
    assert_eq!(card["message"], "Where should we ship?");
    let schema = card["requestedSchemaJson"].as_str().unwrap();
    assert!(FORM_PARAMS.contains(schema), "not byte-exact: {schema}");
    assert!(schema.contains("x-widget"), "unknown keywords are kept");

    // Tampered answers: clear errors, nothing changes.
    refused(
        answer(&ep, &s, "form-1", "accept", "{\"city\": ").await,
        Code::InvalidArgument,
        "content_json: not valid JSON",
    );
    let big = format!("{{\"city\": \"{}\"}}", "x".repeat(1024 * 1024));
    refused(
        answer(&ep, &s, "form-1", "accept", &big).await,
        Code::InvalidArgument,
        "content_json: 1048588 bytes is more than the 1048576 allowed",
    );
    refused(
        answer(&ep, &s, "form-1", "approve", "").await,
        Code::FailedPrecondition,
        "does not fit a form interaction",
    );
    refused(
        answer(&ep, &s, "form-1", "yes", "").await,
        Code::InvalidArgument,
        "action: \"yes\"",
    );
    refused(
        answer(&ep, &s, "form-1", "accept", "{}").await,
        Code::InvalidArgument,
        "city: is required",
    );
    let status = answer(&ep, &s, "form-1", "accept", r#"{"city":"X","size":"xl"}"#)
        .await
        .unwrap_err();
    let msg = status.message();
    assert!(
        msg.contains("city:") && msg.contains("size:"),
        "every field is named: {msg}"
    );
    // The problems by field, as details (the console shows each by its
    // field).
    let details: serde_json::Value = serde_json::from_slice(status.details()).unwrap();
    let fields: Vec<_> = details["fieldErrors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        fields.contains(&"city".to_owned()) && fields.contains(&"size".to_owned()),
        "{details}"
    );
    // Another session's interaction does not exist for it; neither does an
    // unknown one: the same answer.
    let theirs = refused(
        answer(&ep, &other, "form-1", "decline", "").await,
        Code::NotFound,
        "not found",
    );
    let unknown = refused(
        answer(&ep, &other, "nope-1", "decline", "").await,
        Code::NotFound,
        "not found",
    );
    assert_eq!(
        theirs.replace("form-1", "ID"),
        unknown.replace("nope-1", "ID")
    );
    refused(
        answer(&ep, &s, "../x", "decline", "").await,
        Code::InvalidArgument,
        "interaction_id",
    );
    assert!(list(&ep, &other, true).await.is_empty());
    let open = list(&ep, &s, false).await;
    assert_eq!(open.len(), 1);
    assert_eq!(
        (open[0].id.as_str(), open[0].status.as_str()),
        ("form-1", "open")
    );
    assert!(!waiting.is_finished());

    // The same id asked again waits on the same interaction.
    let again = interact(&ep, form_request(&s, "form-1"));
    // The CLI answers (exit 0), the sidecar gets the content.
    let out = cli(
        &ep,
        &[
            "answer",
            "--session",
            &s,
            "form-1",
            "--accept",
            r#"{"city":"Oslo","size":"m","note-secret":"x"}"#,
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(64), "extra field refused");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("note-secret: is not a field"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answered = Instant::now();
    let out = cli(
        &ep,
        &[
            "answer",
            "--session",
            &s,
            "form-1",
            "--accept",
            r#"{"city":"Oslo-SECRET","size":"m"}"#,
        ],
    )
    .await;
    let printed = ok_stdout(&out, "switchyard answer --accept");
    assert!(printed.contains("form-1: accept (resolved)"), "{printed}");
    let result = settle("Interact", waiting).await.expect("Interact");
    eprintln!(
        "form: Interact returned {:?} after the answer",
        answered.elapsed()
    );
    let want = json!({"action": "accept", "content": {"city": "Oslo-SECRET", "size": "m"}});
    assert_eq!(result, want);
    assert_eq!(settle("Interact again", again).await.expect("again"), want);
    let done = next_event(&mut events, "interaction.resolved", "form-1").await;
    assert_eq!(done["outcome"], "accept");
    assert_eq!(done["status"], "resolved");
    let out = cli(&ep, &["answer", "--session", &s, "form-1", "--decline"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already resolved"));
    // Asked again after it was resolved: the same answer at once.
    let late = interact(&ep, form_request(&s, "form-1"));
    assert_eq!(settle("late Interact", late).await.unwrap(), want);

    // ---- a URL: shown by `switchyard events`, accepted, then completed
    let waiting = interact(
        &ep,
        pb::InteractRequest {
            interaction_id: "url-1".into(),
            kind: "url".into(),
            params_json: url_params("el-1"),
            ..form_request(&s, "")
        },
    );
    let card = next_event(&mut events, "interaction.required", "url-1").await;
    assert_eq!(card["urlDomain"], "login.shop.example.com");
    let mut follow = Command::new(switchyard_bin())
        .args(["--endpoint", &ep, "events", "--session", &s])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("switchyard events");
    let mut lines = BufReader::new(follow.stdout.take().unwrap()).lines();
    let mut shown = Vec::new();
    tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let end = line.contains("never opens");
            shown.push(line);
            if end {
                break;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("`switchyard events` showed no URL card: {shown:?}"));
    let shown = shown.join("\n");
    eprintln!("switchyard events:\n{shown}");
    assert!(shown.contains("interaction.required"), "{shown}");
    assert!(
        shown.contains("url url-1 [open] server fake, tool book"),
        "{shown}"
    );
    assert!(shown.contains("message: Sign in to the shop"), "{shown}");
    assert!(shown.contains("domain: login.shop.example.com"), "{shown}");
    assert!(
        shown.contains("url:    https://login.shop.example.com/authorize?state=abc"),
        "{shown}"
    );
    let _ = follow.kill().await;

    let accepted = answer(&ep, &s, "url-1", "accept", "")
        .await
        .expect("accept");
    assert_eq!(accepted.status, "accepted");
    assert_eq!(
        settle("url Interact", waiting).await.unwrap(),
        json!({"action": "accept"})
    );
    refused(
        answer(&ep, &s, "url-1", "cancel", "").await,
        Code::FailedPrecondition,
        "waits for the server",
    );
    let mut reg = registry(&ep).await;
    let complete = |sid: &str, el: &str| pb::CompleteInteractionRequest {
        server: "fake".into(),
        session_id: sid.into(),
        elicitation_id: el.into(),
        ..Default::default()
    };
    assert!(
        !reg.complete_interaction(complete(&other, "el-1"))
            .await
            .unwrap()
            .into_inner()
            .found
    );
    assert!(
        reg.complete_interaction(complete(&s, "el-1"))
            .await
            .unwrap()
            .into_inner()
            .found
    );
    let done = next_event(&mut events, "interaction.resolved", "url-1").await;
    assert_eq!(done["outcome"], "accept");
    // A URL declined resolves at once.
    let waiting = interact(
        &ep,
        pb::InteractRequest {
            interaction_id: "url-2".into(),
            kind: "url".into(),
            params_json: url_params("el-2"),
            ..form_request(&s, "")
        },
    );
    next_event(&mut events, "interaction.required", "url-2").await;
    answer(&ep, &s, "url-2", "decline", "").await.unwrap();
    assert_eq!(
        settle("url-2", waiting).await.unwrap(),
        json!({"action": "decline"})
    );

    // ---- approvals (what CallTool does for a `confirm` tool)
    let ask = |message: &'static str| {
        let ix = cp.cp.interactions.clone();
        let s = s.clone();
        tokio::spawn(async move {
            ix.request_approval(&s, "run-7", "fake", "book", r#"{"when":"today"}"#, message)
                .await
        })
    };
    let pending = ask("Book the trip?");
    let card = next_of_kind(&mut events, "interaction.required", "approval").await;
    assert_eq!(card["message"], "Book the trip?");
    // The card shows the call's arguments, exactly as sent.
    assert_eq!(card["argumentsJson"], r#"{"when":"today"}"#);
    let a1 = list(&ep, &s, false)
        .await
        .into_iter()
        .find(|i| i.kind == "approval")
        .expect("an open approval");
    assert_eq!(a1.id, card["id"].as_str().unwrap());
    assert_eq!((a1.tool.as_str(), a1.run_id.as_str()), ("book", "run-7"));
    assert_eq!(a1.arguments_json, r#"{"when":"today"}"#);
    refused(
        answer(&ep, &s, &a1.id, "accept", "{}").await,
        Code::FailedPrecondition,
        "use approve, deny or cancel",
    );
    let out = cli(&ep, &["answer", "--session", &s, &a1.id, "--deny"]).await;
    ok_stdout(&out, "answer --deny");
    let outcome = settle("approval", pending).await;
    assert_eq!(outcome, interactions::ApprovalOutcome::Denied);
    assert!(
        outcome
            .message("fake", "book")
            .starts_with("not approved: the user denied")
    );
    let pending = ask("");
    let a2 = next_of_kind(&mut events, "interaction.required", "approval").await;
    assert_eq!(a2["message"], "Allow the call to book on fake?");
    let a2 = a2["id"].as_str().unwrap().to_owned();
    answer(&ep, &s, &a2, "approve", "").await.unwrap();
    assert!(settle("approval 2", pending).await.is_approved());
    // An approval whose caller went away is cancelled.
    let pending = ask("abandoned");
    let a3 = next_of_kind(&mut events, "interaction.required", "approval").await;
    let a3 = a3["id"].as_str().unwrap().to_owned();
    pending.abort();
    let done = next_event(&mut events, "interaction.resolved", &a3).await;
    assert_eq!(done["outcome"], "cancel");

    // ---- `switchyard interactions`
    let waiting = interact(&ep, form_request(&s, "form-2"));
    next_event(&mut events, "interaction.required", "form-2").await;
    let text = ok_stdout(
        &cli(&ep, &["interactions", "--session", &s]).await,
        "interactions",
    );
    assert!(
        text.contains("form form-2 [open] server fake, tool book, run run-1"),
        "{text}"
    );
    assert!(
        text.contains("city             string, required, min length 2 - City"),
        "{text}"
    );
    assert!(
        text.contains("express          boolean, default false"),
        "{text}"
    );
    assert!(
        text.contains("size             one of, options: s, m, l"),
        "{text}"
    );
    assert!(text.contains(&format!(
        "switchyard answer --session {s} form-2 --accept JSON"
    )));
    let all = ok_json(
        &cli(&ep, &["interactions", "--session", &s, "--all", "--json"]).await,
        "interactions --all --json",
    );
    let ids: Vec<&str> = all["interactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"form-1") && ids.contains(&"url-1") && ids.contains(&"form-2"));

    // ---- deleting the session cancels what is open
    engine(&ep)
        .await
        .unwrap()
        .delete_session(pb::DeleteSessionRequest {
            session_id: s.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        settle("form-2 after delete", waiting).await.unwrap(),
        json!({"action": "cancel"})
    );
    let gone = interact(&ep, form_request(&s, "form-3"));
    assert_eq!(
        settle("deleted session", gone).await.unwrap_err().code(),
        Code::NotFound
    );

    // ---- audit lines: every outcome, never the content
    let file = dir.path().join("solo-audit.jsonl");
    let audit = eventually("every audit line", LIMIT, || {
        let audit = std::fs::read_to_string(&file).unwrap_or_default();
        let a3 = a3.clone();
        async move {
            if audit.contains(&a3) && audit.contains("session_deleted") {
                Ok(audit)
            } else {
                Err(audit)
            }
        }
    })
    .await;
    assert!(
        !audit.contains("SECRET") && !audit.contains("Oslo"),
        "{audit}"
    );
    let lines: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let outcome_of = |id: &str| -> Vec<(String, String)> {
        lines
            .iter()
            .filter(|l| l["interaction"] == id)
            .map(|l| {
                (
                    l["outcome"].as_str().unwrap().to_owned(),
                    l["reason"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(outcome_of("form-1"), [pair("accept", "answered")]);
    assert_eq!(
        outcome_of("url-1"),
        [pair("accept", "answered"), pair("completed", "completed")]
    );
    assert_eq!(outcome_of(&a1.id), [pair("deny", "answered")]);
    assert_eq!(outcome_of(&a3), [pair("cancel", "call_ended")]);
    assert_eq!(outcome_of("form-2"), [pair("cancel", "session_deleted")]);
    let l = lines.iter().find(|l| l["interaction"] == "url-1").unwrap();
    assert_eq!(l["kind"], "interaction.resolved");
    assert_eq!(l["interactionKind"], "url");
    assert_eq!(l["urlDomain"], "login.shop.example.com");
    assert_eq!(l["session"], s.as_str());
    assert_eq!(l["server"], "fake");
    assert!(l["ts"].as_str().unwrap().ends_with('Z'));
    assert!(
        !audit.contains("state=abc"),
        "no URL path or query: {audit}"
    );

    let (_, metrics) = http_get(&cp.http_addr.to_string(), "/metrics").await;
    let count = |kind, outcome| {
        sample(
            &metrics,
            "switchyard_control_plane_interactions_total",
            &[("kind", kind), ("outcome", outcome)],
        )
    };
    assert_eq!(count("form", "accept"), Some(1.0), "{metrics}");
    assert_eq!(count("approval", "deny"), Some(1.0));
    assert_eq!(count("url", "completed"), Some(1.0));
    cp.stop(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_the_sweeper_on_two_replicas() {
    switchyard_test_support::init_tracing();
    let etcd = start_etcd().await;
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::Etcd(etcd.url.clone());
    let a = start_in_process(dir.path(), "a", &store, 2).await;
    let b = start_in_process(dir.path(), "b", &store, 2).await;
    let (ep_a, ep_b) = (endpoint(&a), endpoint(&b));
    let _sidecar = fake_sidecar(&ep_b, "fake-b").await;
    let s = create_session(&ep_a).await;
    let mut events = subscribe(&ep_a, &s).await;

    // A form nobody answers: B's Interact gets `cancel` after the timeout,
    // A's stream shows it resolved as `timeout`.
    let asked = Instant::now();
    let waiting = interact(&ep_b, form_request(&s, "t-1"));
    next_event(&mut events, "interaction.required", "t-1").await;
    assert_eq!(
        settle("timed out Interact", waiting).await.unwrap(),
        json!({"action": "cancel"})
    );
    let took = asked.elapsed();
    eprintln!("form timeout (2 s) returned cancel after {took:?}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(6),
        "{took:?}"
    );
    let done = next_event(&mut events, "interaction.resolved", "t-1").await;
    assert_eq!(done["outcome"], "timeout");
    refused(
        answer(&ep_a, &s, "t-1", "decline", "").await,
        Code::FailedPrecondition,
        "already resolved (outcome timeout)",
    );

    // An approval nobody answers: "not approved".
    let outcome =
        a.cp.interactions
            .request_approval(&s, "", "fake", "book", "", "")
            .await;
    assert_eq!(outcome, interactions::ApprovalOutcome::TimedOut);
    assert!(outcome.message("fake", "book").contains("not approved"));

    // Nobody waits (the replica that created it stopped): A's sweeper
    // resolves it within a sweep of its expiry.
    let rec = interactions::record_from_request(
        &interactions::InteractRequest {
            interaction_id: "orphan-1".into(),
            server: "fake".into(),
            session_id: s.clone(),
            kind: "form".into(),
            params_json: FORM_PARAMS.into(),
            ..Default::default()
        },
        switchyard_control_plane::model::now_ms(),
        Duration::from_secs(2),
    )
    .unwrap();
    b.cp.interactions.create(rec).await.unwrap();
    b.stop(Duration::from_secs(5)).await;
    next_event(&mut events, "interaction.required", "orphan-1").await;
    let done = next_event(&mut events, "interaction.resolved", "orphan-1").await;
    assert_eq!(done["outcome"], "timeout");
    let late = done["resolvedAtMs"].as_i64().unwrap() - done["expiresAtMs"].as_i64().unwrap();
    eprintln!("the sweeper resolved the orphan {late} ms after it expired");
    assert!((0..=4000).contains(&late), "{late}");
    // The audit line is written by the replica that resolved it (A).
    let file = dir.path().join("a-audit.jsonl");
    eventually("the orphan's audit line", LIMIT, || {
        let audit = std::fs::read_to_string(&file).unwrap_or_default();
        async move {
            if audit.contains("\"interaction\":\"orphan-1\"") {
                Ok(())
            } else {
                Err(audit)
            }
        }
    })
    .await;
    a.stop(Duration::from_secs(5)).await;
}

/// Starts `switchyard-control-plane --config` (a config of its own, free
/// ports); returns it and its gRPC endpoint.
async fn replica_process(dir: &Path, name: &str, store: &StoreKind) -> (Proc, String) {
    replica_config(dir, name, store, 60);
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

async fn kill9(p: &mut Proc) {
    signal(p.pid, nix::sys::signal::Signal::SIGKILL);
    let _ = tokio::time::timeout(LIMIT, p.child.wait()).await;
}

/// The stream of a killed replica ends with an error (not a clean end).
async fn stream_breaks(events: &mut Streaming<pb::SessionEvent>) {
    let end = tokio::time::timeout(LIMIT, async {
        loop {
            match events.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the stream of a killed replica ends");
    assert!(end.is_err(), "{end:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactions_survive_replicas_dying() {
    switchyard_test_support::init_tracing();
    let etcd = start_etcd().await;
    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::Etcd(etcd.url.clone());
    let (mut replica_a, a) = replica_process(dir.path(), "a", &store).await;
    let (mut replica_b, b) = replica_process(dir.path(), "b", &store).await;
    let _sidecar = fake_sidecar(&b, "fake-b").await;
    let s = create_session(&a).await;
    let mut events = subscribe(&a, &s).await;

    // ---- asked at B, seen, refused, answered at A
    let asked = Instant::now();
    let waiting = interact(&b, form_request(&s, "f-1"));
    next_event(&mut events, "interaction.required", "f-1").await;
    eprintln!(
        "asked at B, interaction.required at A after {:?}",
        asked.elapsed()
    );
    refused(
        answer(&a, &s, "f-1", "accept", r#"{"city":"X"}"#).await,
        Code::InvalidArgument,
        "city: ",
    );
    let open = list(&a, &s, false).await;
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].status, "open");
    let answered = Instant::now();
    let got = answer(
        &a,
        &s,
        "f-1",
        "accept",
        r#"{"city":"Bergen","express":true}"#,
    )
    .await
    .expect("a valid answer");
    assert_eq!(got.status, "resolved");
    assert_eq!(
        settle("Interact at B", waiting).await.unwrap(),
        json!({"action": "accept", "content": {"city": "Bergen", "express": true}})
    );
    eprintln!(
        "answered at A, B's Interact returned after {:?}",
        answered.elapsed()
    );
    let done = next_event(&mut events, "interaction.resolved", "f-1").await;
    assert_eq!(done["outcome"], "accept");
    assert_eq!(done["contentJson"], r#"{"city":"Bergen","express":true}"#);

    // ---- deleting a session at A cancels what waits at B
    let s2 = create_session(&a).await;
    let waiting = interact(&b, form_request(&s2, "d-1"));
    let mut events2 = subscribe(&a, &s2).await;
    next_event(&mut events2, "interaction.required", "d-1").await;
    engine(&a)
        .await
        .unwrap()
        .delete_session(pb::DeleteSessionRequest {
            session_id: s2.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        settle("Interact of a deleted session", waiting)
            .await
            .unwrap(),
        json!({"action": "cancel"})
    );

    // ---- A dies while the engine follows it: the engine goes to B
    let waiting = interact(&b, form_request(&s, "f-2"));
    next_event(&mut events, "interaction.required", "f-2").await;
    kill9(&mut replica_a).await;
    stream_breaks(&mut events).await;
    let mut events = subscribe(&b, &s).await;
    // Subscribing again shows what still waits.
    let card = next_event(&mut events, "interaction.required", "f-2").await;
    assert_eq!(card["status"], "open");
    let open = list(&b, &s, false).await;
    assert_eq!(
        open.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        ["f-2"]
    );
    answer(&b, &s, "f-2", "decline", "").await.unwrap();
    assert_eq!(
        settle("Interact f-2", waiting).await.unwrap(),
        json!({"action": "decline"})
    );

    // ---- B dies while its Interact waits: the sidecar asks again, same
    // id, at a new replica A; the engine follows it there too.
    let (_replica_a2, a2) = replica_process(dir.path(), "a2", &store).await;
    let first = interact(&b, form_request(&s, "f-3"));
    let card = next_event(&mut events, "interaction.required", "f-3").await;
    let created = card["createdAtMs"].as_i64().unwrap();
    kill9(&mut replica_b).await;
    let broken = settle("Interact at the killed B", first).await;
    assert!(broken.is_err(), "{broken:?}");
    stream_breaks(&mut events).await;
    let retried = interact(&a2, form_request(&s, "f-3"));
    let mut events = subscribe(&a2, &s).await;
    let card = next_event(&mut events, "interaction.required", "f-3").await;
    assert_eq!(
        card["createdAtMs"].as_i64(),
        Some(created),
        "the same interaction"
    );
    let all = list(&a2, &s, true).await;
    assert_eq!(all.iter().filter(|i| i.id == "f-3").count(), 1);
    assert_eq!(all.iter().filter(|i| i.id == "f-1").count(), 1, "kept");
    let out = cli(
        &a2,
        &[
            "answer",
            "--session",
            &s,
            "f-3",
            "--accept",
            r#"{"city":"Tromsø"}"#,
        ],
    )
    .await;
    ok_stdout(&out, "answer at A2");
    assert_eq!(
        settle("Interact retried at A2", retried).await.unwrap(),
        json!({"action": "accept", "content": {"city": "Tromsø"}})
    );
    next_event(&mut events, "interaction.resolved", "f-3").await;
}
