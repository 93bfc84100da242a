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
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
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
    gw.stop().await;
}

/// A 2026-07-28 server's URL elicitation (an `inputRequests` entry, which
/// has no `elicitationId` in that era: the reference server's
/// `link_account`) reaches the session as a URL card with the full domain;
/// accepting it resumes the server's request.
#[tokio::test(flavor = "multi_thread")]
async fn a_2026_url_elicitation_without_an_elicitation_id_is_asked_and_answered() {
    let _heavy = HEAVY.lock().await;
    let servers = format!(
        "[[servers]]\nname = \"orders\"\ntransport = \"stdio\"\ncommand = {}\nargs = [\"--era\", \"2026-07-28\", \"--interactions\"]\n",
        toml_str(switchyard_test_support::reference_server_bin().to_string_lossy())
    );
    let http = start_http_reference_server().await;
    let gw = Gateway::start_with(
        StoreKind::Embedded,
        10,
        http,
        &servers,
        "",
        &[],
        &["orders"],
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
}
