//! Background calls (stage B) with bad input, over the real gRPC APIs of an
//! in-process replica: tampered or oversized `UpdateBackgroundCall`
//! records from a sidecar, engine API requests naming bad, unknown or
//! another session's ids, and callers with the wrong role while `[auth]
//! required`.
//!
//! The rule checked: bad input gets a clear error that names the field,
//! the replica keeps serving, nothing is lost (an oversized result is
//! stored cut down and its event is delivered; on etcd, which refuses
//! requests over 1.5 MiB, too) and no other session's call is touched.

use crate::common::background::*;
use crate::common::*;
use serde_json::json;
use std::time::Duration;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use switchyard_test_support::fake_sidecar::FakeSidecar;
use switchyard_test_support::start_etcd;
use tonic::Code;

/// Registers sidecar `id` of `fake` (test support's fake sidecar, which
/// serves no calls) and keeps its report stream open, with hello alone;
/// dropping it ends the registration.
async fn register(ep: &str, id: &str) -> FakeSidecar {
    FakeSidecar::of(ep, id).without_catalogue().start().await
}

fn record(id: &str, session: &str, sidecar: &str) -> pb::BackgroundCall {
    pb::BackgroundCall {
        id: id.into(),
        server: "fake".into(),
        tool: "book".into(),
        engine_tool: "fake__book".into(),
        session_id: session.into(),
        mode: "task".into(),
        task_id: format!("task-{id}"),
        status: "working".into(),
        sidecar_id: sidecar.into(),
        created_at_ms: now_ms(),
        protocol_version: "2025-11-25".into(),
        ..Default::default()
    }
}

/// Oversized records on `store`: a 3 MB raw result is stored without it
/// (the model text kept) and its event is delivered; a 2 MB status
/// message is cut; a 100 KB taskId is refused naming the field.
async fn oversized(store: StoreKind) {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let r = start_replica(
        dir.path(),
        "cp",
        &store,
        "[backgroundCalls]\nsweepIntervalMs = 200",
    )
    .await;
    let ep = endpoint(&r);
    let _sc = register(&ep, "sc-1").await;
    let s = create_session(&ep).await;
    let mut events = subscribe(&ep, &s, 0).await;

    let mut rec = record("big-1", &s, "sc-1");
    update(&ep, rec.clone()).await.expect("created");
    // A huge statusMessage while running: stored, cut.
    rec.status_message = "m".repeat(2_000_000);
    let stored = update(&ep, rec.clone())
        .await
        .expect("a long status is cut, not refused");
    assert!(
        stored.status_message.len() < 20_000,
        "{}",
        stored.status_message.len()
    );
    assert!(
        stored.status_message.contains("cut: 2000000 bytes"),
        "{}",
        &stored.status_message[stored.status_message.len() - 200..]
    );
    // Completed with a 3 MB raw result and a short model text.
    rec.status = "completed".into();
    rec.status_message.clear();
    rec.result = Some(pb::BackgroundResult {
        result_json: json!({"content": [{"type": "text", "text": "r".repeat(3_000_000)}]})
            .to_string(),
        model_text: "the beginning of the result".into(),
        attachments: vec![pb::Attachment {
            name: "result.txt".into(),
            mime_type: "text/plain".into(),
            data: vec![b'r'; 3_000_000],
            uri: String::new(),
            size_bytes: 3_000_000,
        }],
        ..Default::default()
    });
    let stored = update(&ep, rec.clone())
        .await
        .expect("a large result is kept small, not refused");
    assert_eq!(stored.status, "completed");
    let result = stored.result.clone().unwrap();
    assert_eq!(result.model_text, "the beginning of the result");
    assert!(result.result_json.is_empty());
    assert_eq!(result.attachments[0].size_bytes, 3_000_000);
    assert!(
        stored
            .status_message
            .contains("the raw result was too large to keep"),
        "{}",
        stored.status_message
    );
    let (ev, data) = next_background(&mut events).await;
    assert_eq!(ev.r#type, "background_call.completed");
    assert_eq!(data["id"], "big-1");
    assert_eq!(data["result"]["modelText"], "the beginning of the result");
    // Identifying fields over their limits: refused, naming the field.
    let mut bad = record("big-2", &s, "sc-1");
    bad.task_id = "t".repeat(100_000);
    refused(
        update(&ep, bad).await,
        Code::InvalidArgument,
        "call.task_id: 100000 bytes",
    );
    let mut bad = record("big-3", &s, "sc-1");
    bad.tool = "t".repeat(5000);
    refused(update(&ep, bad).await, Code::InvalidArgument, "call.tool");
    // Still serving.
    update(&ep, record("after", &s, "sc-1"))
        .await
        .expect("still serving");
    r.stop(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_records_are_kept_small_on_the_embedded_store() {
    oversized(StoreKind::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_records_are_kept_small_on_etcd() {
    let etcd = start_etcd().await;
    oversized(StoreKind::Etcd(format!(
        "http://127.0.0.1:{}",
        etcd.client_port()
    )))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_records_and_bad_ids_touch_no_other_session() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let r = start_replica(
        dir.path(),
        "cp",
        &StoreKind::Embedded,
        "[backgroundCalls]\nsweepIntervalMs = 200",
    )
    .await;
    let ep = endpoint(&r);
    let _sc = register(&ep, "sc-1").await;
    let a = create_session(&ep).await;
    let b = create_session(&ep).await;
    let mine = update(&ep, record("call-a", &a, "sc-1"))
        .await
        .expect("created");

    // A record from a sidecar that is not registered for the server.
    refused(
        update(&ep, record("ghost", &b, "nobody")).await,
        Code::FailedPrecondition,
        "call.sidecar_id \"nobody\" is not a registered sidecar of server \"fake\"",
    );
    refused(
        update(&ep, record("ghost-2", &b, "")).await,
        Code::FailedPrecondition,
        "is not a registered sidecar",
    );
    // An update moving the call to another session, tool or mode: those
    // stay as created.
    let mut moved = mine.clone();
    moved.session_id = b.clone();
    moved.tool = "other".into();
    moved.mode = "wait".into();
    moved.status_message = "progress".into();
    let stored = update(&ep, moved).await.unwrap();
    assert_eq!(
        (
            stored.session_id.as_str(),
            stored.tool.as_str(),
            stored.mode.as_str()
        ),
        (a.as_str(), "book", "task")
    );
    // Another server's name on an existing record.
    let mut other = mine.clone();
    other.server = "elsewhere".into();
    refused(update(&ep, other).await, Code::NotFound, "elsewhere");
    // Ids that would be store key segments, or are not ids at all.
    refused(
        update(&ep, record("", &a, "sc-1")).await,
        Code::InvalidArgument,
        "call.id: required (1 to 128 characters",
    );
    for bad in ["a/b", "../x", "x\ny", &"i".repeat(129)] {
        refused(
            update(&ep, record(bad, &a, "sc-1")).await,
            Code::InvalidArgument,
            "call.id: 1 to 128 characters",
        );
    }
    // "..", a valid key segment: only a call of that id.
    refused(
        update(&ep, record("..", &a, "nobody")).await,
        Code::FailedPrecondition,
        "not a registered sidecar",
    );

    // Engine API: bad, unknown and another session's ids.
    let mut e: EngineServiceClient<_> = engine(&ep).await.unwrap();
    refused(
        e.get_background_call(pb::GetBackgroundCallRequest {
            id: String::new(),
            session_id: a.clone(),
        })
        .await,
        Code::InvalidArgument,
        "id",
    );
    refused(
        e.get_background_call(pb::GetBackgroundCallRequest {
            id: "nope".into(),
            session_id: a.clone(),
        })
        .await,
        Code::NotFound,
        "nope",
    );
    refused(
        e.get_background_call(pb::GetBackgroundCallRequest {
            id: "call-a".into(),
            session_id: b.clone(),
        })
        .await,
        Code::NotFound,
        "call-a",
    );
    refused(
        e.cancel_background_call(pb::CancelBackgroundCallRequest {
            id: "call-a".into(),
            session_id: b.clone(),
        })
        .await,
        Code::NotFound,
        "call-a",
    );
    refused(
        e.cancel_background_call(pb::CancelBackgroundCallRequest {
            id: "..".into(),
            session_id: a.clone(),
        })
        .await,
        Code::NotFound,
        "\"..\"",
    );
    refused(
        e.cancel_background_call(pb::CancelBackgroundCallRequest {
            id: "a/b".into(),
            session_id: a.clone(),
        })
        .await,
        Code::InvalidArgument,
        "id: 1 to 128 characters, without '/'",
    );
    let listed = e
        .list_background_calls(pb::ListBackgroundCallsRequest {
            session_id: b.clone(),
            include_finished: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        listed.calls.is_empty(),
        "session b has no calls: {:?}",
        listed.calls
    );
    // Session a's call is untouched by all of it.
    let still = e
        .get_background_call(pb::GetBackgroundCallRequest {
            id: "call-a".into(),
            session_id: a.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (still.status.as_str(), still.session_id.as_str()),
        ("working", a.as_str())
    );
    // Replay from the future, or from before the epoch: no error.
    for after in [i64::MIN, -1, now_ms() + 86_400_000, i64::MAX] {
        let mut s = e
            .subscribe_events(pb::SubscribeEventsRequest {
                session_id: a.clone(),
                background_after_ms: after,
            })
            .await
            .expect("SubscribeEvents")
            .into_inner();
        let got = tokio::time::timeout(Duration::from_millis(300), s.message()).await;
        assert!(got.is_err(), "{after}: nothing to replay: {got:?}");
    }
    r.stop(Duration::from_secs(2)).await;
}

/// With `[auth] required`: roles keep the engine and the sidecars out of
/// each other's background-call APIs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_guard_the_background_call_apis() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let token = |name: &str, value: &str| {
        let file = dir.path().join(format!("{name}.token"));
        std::fs::write(&file, value).unwrap();
        toml_str(file.to_string_lossy())
    };
    let auth = format!(
        "[auth]\nrequired = true\n[[auth.tokens]]\nname = \"e\"\nrole = \"engine\"\ntoken_file = {}\n[[auth.tokens]]\nname = \"s\"\nrole = \"sidecar\"\ntoken_file = {}\n",
        token("engine", "engine-token"),
        token("sidecar", "sidecar-token")
    );
    let r = start_replica(dir.path(), "cp", &StoreKind::Embedded, &auth).await;
    let ep = endpoint(&r);
    let mut reg = registry(&ep).await;
    let call = record("x", "", "sc-1");
    let e = reg
        .update_background_call(bearer(
            pb::UpdateBackgroundCallRequest {
                call: Some(call.clone()),
            },
            "engine-token",
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = reg
        .update_background_call(pb::UpdateBackgroundCallRequest {
            call: Some(call.clone()),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let mut eng = engine(&ep).await.unwrap();
    for req in [
        bearer(
            pb::CancelBackgroundCallRequest {
                id: "x".into(),
                session_id: String::new(),
            },
            "sidecar-token",
        ),
        bearer(
            pb::CancelBackgroundCallRequest {
                id: "x".into(),
                session_id: String::new(),
            },
            "wrong",
        ),
    ] {
        let e = eng.cancel_background_call(req).await.unwrap_err();
        assert!(
            matches!(e.code(), Code::PermissionDenied | Code::Unauthenticated),
            "{e:?}"
        );
    }
    let e = eng
        .list_background_calls(bearer(
            pb::ListBackgroundCallsRequest::default(),
            "sidecar-token",
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // The right role gets through (and a sensible answer).
    let e = eng
        .cancel_background_call(bearer(
            pb::CancelBackgroundCallRequest {
                id: "x".into(),
                session_id: String::new(),
            },
            "engine-token",
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    r.stop(Duration::from_secs(2)).await;
}

/// A terminal record is stamped with the control plane's clock: a sidecar
/// clock far behind (or ahead) neither gets the result deleted by retention
/// at once nor hides it from a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finish_times_come_from_the_control_plane_clock() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let r = start_replica(
        dir.path(),
        "cp",
        &StoreKind::Embedded,
        "[backgroundCalls]\nsweepIntervalMs = 100\nretentionSec = 3600",
    )
    .await;
    let ep = endpoint(&r);
    let _sc = register(&ep, "sc-1").await;
    let s = create_session(&ep).await;
    let before = now_ms();
    for (id, skewed) in [("past", 1), ("future", i64::MAX), ("negative", -5)] {
        let mut rec = record(id, &s, "sc-1");
        update(&ep, rec.clone()).await.expect("created");
        rec.status = "completed".into();
        rec.finished_at_ms = skewed;
        rec.result = Some(pb::BackgroundResult {
            model_text: format!("{id} done"),
            ..Default::default()
        });
        let stored = update(&ep, rec).await.expect("completed");
        assert!(
            stored.finished_at_ms >= before && stored.finished_at_ms <= now_ms(),
            "{id}: {}",
            stored.finished_at_ms
        );
    }
    // Several sweeps later: still there (retention is an hour).
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut e = engine(&ep).await.unwrap();
    for id in ["past", "future", "negative"] {
        e.get_background_call(pb::GetBackgroundCallRequest {
            id: id.into(),
            session_id: s.clone(),
        })
        .await
        .unwrap_or_else(|err| panic!("{id} kept: {err:?}"));
    }
    // An engine that last saw an event just before these finished gets all
    // three replayed.
    let mut events = e
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: s.clone(),
            background_after_ms: before - 1,
        })
        .await
        .unwrap()
        .into_inner();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (_, data) = next_background(&mut events).await;
        ids.push(data["id"].as_str().unwrap().to_owned());
    }
    ids.sort();
    assert_eq!(ids, ["future", "negative", "past"]);
    r.stop(Duration::from_secs(2)).await;
}
