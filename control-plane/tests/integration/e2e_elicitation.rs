//! The whole interaction path with real processes: `switchyard up` in
//! front of server-everything; an engine call in a session triggers the
//! server's form elicitation; the question appears on `switchyard events`;
//! `switchyard answer` answers it (an invalid answer first, which is refused
//! and leaves the card open); the server receives the answer and the call
//! returns it.

use crate::common::*;
use serde_json::Value;
use std::process::Stdio;
use switchyard_proto::v1 as pb;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[tokio::test(flavor = "multi_thread")]
async fn an_engine_answers_a_server_everything_elicitation_through_the_cli() {
    let _heavy = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let session = ok_stdout(
        // auto: the tool is not read-only, so an `ask` session would need
        // an approval first (crate::tools::policy).
        &gw.cli(&[
            "sessions",
            "create",
            "--server",
            "everything",
            "--mode",
            "auto",
        ])
        .await,
        "sessions create",
    )
    .trim()
    .to_owned();

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

    // The engine's call waits while the server asks the user.
    let mut engine = gw.engine().await;
    let mut request = call_request("everything__trigger-elicitation-request", "{}", &session);
    request.timeout_ms = 60_000;
    let call = tokio::spawn(async move { engine.call_tool(request).await });

    let card: Value = tokio::time::timeout(LIMIT, async {
        loop {
            let line = lines
                .next_line()
                .await
                .expect("events output")
                .expect("events ended");
            let ev: Value = serde_json::from_str(&line).expect("one JSON event per line");
            if ev["type"] == "interaction.required" {
                return ev["data"].clone();
            }
        }
    })
    .await
    .expect("interaction.required within the limit");
    assert_eq!(card["kind"], "form", "{card}");
    assert_eq!(card["server"], "everything", "{card}");
    let id = card["id"].as_str().expect("interaction id").to_owned();
    let schema: Value = serde_json::from_str(card["requestedSchemaJson"].as_str().unwrap_or("{}"))
        .unwrap_or_else(|_| card["requestedSchema"].clone());
    assert!(schema["properties"]["name"].is_object(), "{card}");

    // `name` is required: an answer without it is refused, the card stays open.
    let refused = gw
        .cli(&[
            "answer",
            "--session",
            &session,
            &id,
            "--accept",
            r#"{"check":true}"#,
        ])
        .await;
    assert_eq!(refused.status.code(), Some(64), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("name"),
        "{refused:?}"
    );

    let answered = gw
        .cli(&[
            "answer",
            "--session",
            &session,
            &id,
            "--accept",
            r#"{"name":"Ada Lovelace","check":true}"#,
        ])
        .await;
    ok_stdout(&answered, "switchyard answer");

    let result = tokio::time::timeout(LIMIT, call)
        .await
        .expect("the call returns after the answer")
        .expect("task")
        .expect("the call succeeds")
        .into_inner();
    assert!(!result.is_error, "{}", result.result_json);
    assert!(
        result.text.contains("Name: Ada Lovelace"),
        "{}",
        result.text
    );
    assert!(
        result.text.contains("Agreed to terms: true"),
        "{}",
        result.text
    );

    // The resolution is on the stream too, and the card is no longer open.
    tokio::time::timeout(LIMIT, async {
        loop {
            let line = lines
                .next_line()
                .await
                .expect("events output")
                .expect("events ended");
            let ev: Value = serde_json::from_str(&line).expect("JSON event");
            if ev["type"] == "interaction.resolved" && ev["data"]["id"] == id.as_str() {
                assert_eq!(ev["data"]["outcome"], "accept", "{ev}");
                return;
            }
        }
    })
    .await
    .expect("interaction.resolved within the limit");
    let open = gw
        .engine()
        .await
        .list_interactions(pb::ListInteractionsRequest {
            session_id: session.clone(),
            include_resolved: false,
        })
        .await
        .expect("ListInteractions")
        .into_inner();
    assert!(open.interactions.is_empty(), "{:?}", open.interactions);
    // A healthy start is quiet: the `roots/list` server-everything sends
    // right after its handshake, outside any call, is declined at DEBUG,
    // and what the server writes to its stderr about it too.
    let log = gw.log();
    assert!(
        !log.lines().any(|l| l.contains(" INFO ")
            && (l.contains("declining a server request") || l.contains("upstream::stderr"))),
        "{log}"
    );
    gw.stop().await;
}

/// A 2026-07-28 server's URL elicitation (an `inputRequests` entry, which
/// has no `elicitationId` in that era: the reference server's
/// `link_account`) reaches the session as a URL card with the full domain;
/// accepting it resumes the server's request.
#[tokio::test(flavor = "multi_thread")]
async fn a_2026_url_elicitation_without_an_elicitation_id_is_asked_and_answered() {
    let _heavy = HEAVY.lock().await;
    let gw = Gateway::start_stdio(
        "orders",
        &switchyard_test_support::reference_server_bin(),
        &["--era", "2026-07-28", "--interactions"],
        "",
    )
    .await;
    let session = ok_stdout(
        &gw.cli(&["sessions", "create", "--server", "orders", "--mode", "auto"])
            .await,
        "sessions create",
    )
    .trim()
    .to_owned();
    let mut events = gw
        .engine()
        .await
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: session.clone(),
            background_after_ms: 0,
        })
        .await
        .expect("SubscribeEvents")
        .into_inner();
    let mut engine = gw.engine().await;
    let mut request = call_request("orders__link_account", "{}", &session);
    request.timeout_ms = 60_000;
    let call = tokio::spawn(async move { engine.call_tool(request).await });
    let card = tokio::time::timeout(LIMIT, async {
        loop {
            let ev = events
                .message()
                .await
                .expect("events")
                .expect("events ended");
            if ev.r#type == "interaction.required" {
                return serde_json::from_str::<Value>(&ev.data_json).expect("JSON data");
            }
        }
    })
    .await;
    let card = match card {
        Ok(c) => c,
        Err(_) => {
            let outcome = tokio::time::timeout(std::time::Duration::from_secs(5), call).await;
            panic!(
                "no interaction.required; the call: {outcome:?}\n{}",
                gw.log()
            );
        }
    };
    assert_eq!(card["kind"], "url", "{card}");
    assert_eq!(card["urlDomain"], "accounts.example.com", "{card}");
    let id = card["id"].as_str().expect("the card's id").to_owned();
    ok_stdout(
        &gw.cli(&["answer", "--session", &session, &id, "--accept", "{}"])
            .await,
        "answer --accept",
    );
    let result = tokio::time::timeout(LIMIT, call)
        .await
        .expect("the call returns after the answer")
        .expect("task")
        .expect("the call succeeds")
        .into_inner();
    assert!(!result.is_error, "{}", result.result_json);
    assert!(
        result.result_json.contains("\"linked\":true"),
        "{}",
        result.result_json
    );
    // That era never reports a URL flow complete: the answer resolved the
    // card, which no longer counts as open.
    let open = ok_stdout(
        &gw.cli(&["interactions", "--session", &session, "--json"])
            .await,
        "interactions",
    );
    assert!(!open.contains(&id), "{open}");
    gw.stop().await;
}

/// A question whose call ends unanswered is closed with the call, so that
/// nobody answers what no call waits for: the card of a wait-mode
/// background call that is cancelled, and the card of a foreground call
/// that a sidecar's shutdown cancels at the end of its grace period, each
/// end resolved with outcome `cancel` (reason `call_ended`).
#[tokio::test(flavor = "multi_thread")]
async fn the_card_of_a_call_that_ends_unanswered_is_closed() {
    let _heavy = HEAVY.lock().await;
    let gw = Gateway::start_stdio(
        "orders",
        &switchyard_test_support::reference_server_bin(),
        &["--era", "2025-11-25", "--interactions"],
        "",
    )
    .await;
    let session = ok_stdout(
        &gw.cli(&["sessions", "create", "--server", "orders", "--mode", "auto"])
            .await,
        "sessions create",
    )
    .trim()
    .to_owned();
    let mut engine = gw.engine().await;
    // The session's first card not in `not` (open ones only if `open`).
    async fn card(
        engine: &mut switchyard_proto::v1::engine_service_client::EngineServiceClient<
            tonic::transport::Channel,
        >,
        session: &str,
        open: bool,
        not: &[String],
    ) -> Option<pb::Interaction> {
        engine
            .list_interactions(pb::ListInteractionsRequest {
                session_id: session.into(),
                include_resolved: !open,
            })
            .await
            .expect("ListInteractions")
            .into_inner()
            .interactions
            .into_iter()
            .find(|i| !not.contains(&i.id) && (!open || i.status == "open"))
    }

    // A wait-mode background call whose question is open, cancelled.
    let mut request = call_request("orders__confirm_order_form", "{}", &session);
    request.background = true;
    let moved = engine
        .call_tool(request)
        .await
        .expect("the call moves to the background")
        .into_inner()
        .background
        .expect("moved");
    assert_eq!(moved.mode, "wait");
    let first = eventually("the background call's card", LIMIT, || {
        let mut engine = engine.clone();
        let session = session.clone();
        async move {
            card(&mut engine, &session, true, &[])
                .await
                .ok_or_else(|| "no open card yet".to_owned())
        }
    })
    .await;
    engine
        .cancel_background_call(pb::CancelBackgroundCallRequest {
            id: moved.id.clone(),
            session_id: session.clone(),
        })
        .await
        .expect("CancelBackgroundCall");
    let ended = |id: String| {
        let engine = engine.clone();
        let session = session.clone();
        async move {
            eventually("the card closed with its call", LIMIT, || {
                let mut engine = engine.clone();
                let (session, id) = (session.clone(), id.clone());
                async move {
                    let all = engine
                        .list_interactions(pb::ListInteractionsRequest {
                            session_id: session.clone(),
                            include_resolved: true,
                        })
                        .await
                        .unwrap()
                        .into_inner()
                        .interactions;
                    match all.into_iter().find(|c| c.id == id) {
                        Some(c) if c.status == "resolved" => Ok(c),
                        other => Err(format!("{other:?}")),
                    }
                }
            })
            .await
        }
    };
    let closed = ended(first.id.clone()).await;
    assert_eq!(closed.outcome, "cancel", "{closed:?}");
    let e = engine
        .clone()
        .answer_interaction(pb::AnswerInteractionRequest {
            session_id: session.clone(),
            interaction_id: first.id.clone(),
            action: "decline".into(),
            content_json: String::new(),
        })
        .await
        .expect_err("a closed card cannot be answered");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");

    // A foreground call held by its question when its sidecar is told to
    // stop: the grace period (3 s under `up`) ends, the call is cancelled,
    // and its card goes with it.
    let mut request = call_request("orders__confirm_order_form", "{}", &session);
    request.foreground = true;
    request.timeout_ms = 60_000;
    let mut caller = engine.clone();
    let call = tokio::spawn(async move { caller.call_tool(request).await });
    let second = eventually("the foreground call's card", LIMIT, || {
        let mut engine = engine.clone();
        let session = session.clone();
        let seen = vec![first.id.clone()];
        async move {
            card(&mut engine, &session, true, &seen)
                .await
                .ok_or_else(|| "no open card yet".to_owned())
        }
    })
    .await;
    for pid in gw.sidecars_of("orders") {
        signal(pid, nix::sys::signal::Signal::SIGTERM);
    }
    let outcome = tokio::time::timeout(LIMIT, call)
        .await
        .expect("the call ends with the grace period")
        .expect("task");
    assert!(outcome.is_err(), "{outcome:?}");
    let closed = ended(second.id.clone()).await;
    assert_eq!(closed.outcome, "cancel", "{closed:?}");
}
