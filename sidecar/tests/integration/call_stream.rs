//! `SidecarCalls.CallStream`: many calls over one stream, against the real
//! stdio stub `crashy.py` behind an in-process `CallService` on loopback.
//!
//! Covered: concurrent calls each get their own outcome, in completion
//! order; a call's own failure is an error frame and the stream goes on
//! (bad params, a JSON-RPC error with its details, a server crash); a
//! dropped call sends a cancel frame, which cancels the upstream request
//! (`notifications/cancelled`); raw frames with neither field, a duplicate
//! id, and closing the sending side with a call in flight.

use crate::common::{LIMIT, harness, stub};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use switchyard_proto::calls::{CallError, Mux, SidecarCallFrames};
use switchyard_proto::v1::sidecar_call_frame::Frame;
use switchyard_proto::v1::sidecar_call_outcome::Outcome;
use switchyard_proto::v1::{SidecarCallFrame, SidecarCallRequest};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Code;

fn call(tool: &str, arguments: Value) -> SidecarCallRequest {
    SidecarCallRequest {
        params_json: json!({"name": tool, "arguments": arguments}).to_string(),
        session_id: "S1".into(),
        ..Default::default()
    }
}

fn text_of(result_json: &str) -> String {
    let v: Value = serde_json::from_str(result_json).unwrap();
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn open(h: &crate::common::Harness) -> Arc<Mux<SidecarCallFrames>> {
    let mut client = h.client.clone();
    Mux::open(|frames| async move { client.call_stream(frames).await })
        .await
        .expect("CallStream opens")
}

/// Retries `f` every 50 ms until it succeeds, within `LIMIT`.
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if tokio::time::Instant::now() > deadline => panic!("{what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f).await.expect("in time")
}

#[tokio::test]
async fn concurrent_calls_share_one_stream_and_each_gets_its_own_outcome() {
    let h = harness(stub("crashy.py"), Duration::from_millis(200)).await;
    let mux = open(&h).await;
    // A slow call first: the fast ones overtake it.
    let slow = {
        let mux = mux.clone();
        tokio::spawn(async move {
            let r = mux.call(call("slow", json!({"ms": 600}))).await;
            (tokio::time::Instant::now(), r)
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let fast: Vec<_> = (0..64)
        .map(|i| {
            let mux = mux.clone();
            tokio::spawn(async move {
                let r = mux
                    .call(call("echo", json!({"message": format!("m{i}")})))
                    .await;
                (i, tokio::time::Instant::now(), r)
            })
        })
        .collect();
    let mut last_fast = None;
    for f in fast {
        let (i, at, r) = within(f).await.unwrap();
        let r = r.unwrap_or_else(|e| panic!("echo {i}: {e:?}"));
        assert_eq!(text_of(&r.result_json), format!("m{i}"));
        assert_eq!(r.model_text, format!("m{i}"));
        assert!(!r.is_error);
        last_fast = last_fast.max(Some(at));
    }
    let (slow_at, slow_r) = within(slow).await.unwrap();
    assert_eq!(text_of(&slow_r.unwrap().result_json), "slept 600 ms");
    assert!(
        slow_at > last_fast.unwrap(),
        "outcomes come as calls finish"
    );
    assert_eq!(mux.in_flight(), 0);
    assert!(!mux.is_closed());
}

#[tokio::test]
async fn a_calls_own_failure_is_an_error_frame_and_the_stream_goes_on() {
    let h = harness(stub("crashy.py"), Duration::from_millis(200)).await;
    let mux = open(&h).await;

    let bad = SidecarCallRequest {
        params_json: "{not json".into(),
        ..Default::default()
    };
    match within(mux.call(bad)).await {
        Err(CallError::Call(s)) => {
            assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
            assert!(s.message().contains("params_json"), "{s:?}");
        }
        other => panic!("{other:?}"),
    }

    // A JSON-RPC error answer keeps its error object in the details.
    match within(mux.call(call("no_such_tool", json!({})))).await {
        Err(CallError::Call(s)) => {
            assert_eq!(s.code(), Code::FailedPrecondition, "{s:?}");
            let details: Value = serde_json::from_slice(s.details()).unwrap();
            assert!(details["code"].is_i64(), "{details}");
            assert!(details["message"].is_string(), "{details}");
        }
        other => panic!("{other:?}"),
    }

    // A call over the message limit fails alone, before it is sent (sent,
    // it would end the stream for every call on it).
    let huge = "x".repeat(switchyard_proto::calls::MAX_MESSAGE_BYTES);
    match within(mux.call(call("echo", json!({"message": huge})))).await {
        Err(CallError::Call(s)) => {
            assert_eq!(s.code(), Code::ResourceExhausted, "{s:?}");
            assert!(s.message().contains("message limit"), "{s:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mux.in_flight(), 0);

    // The server dies mid-call: that call fails, the stream does not.
    match within(mux.call(call("crash", json!({"code": 3})))).await {
        Err(CallError::Call(s)) => assert_eq!(s.code(), Code::Unavailable, "{s:?}"),
        other => panic!("{other:?}"),
    }
    assert!(!mux.is_closed());
    let r = within(mux.call(call("echo", json!({"message": "still here"}))))
        .await
        .unwrap();
    assert_eq!(text_of(&r.result_json), "still here");
}

#[tokio::test]
async fn a_dropped_call_is_cancelled_upstream() {
    let h = harness(stub("crashy.py"), Duration::from_millis(200)).await;
    let mux = open(&h).await;
    // Dropped after 300 ms: the mux sends a cancel frame.
    let cut = tokio::time::timeout(
        Duration::from_millis(300),
        mux.call(call("slow", json!({"ms": 20000}))),
    )
    .await;
    assert!(cut.is_err(), "the slow call was still running");
    assert_eq!(mux.in_flight(), 0);
    let ids = eventually("the server saw notifications/cancelled", || async {
        let r = mux
            .call(call("cancelled_ids", json!({})))
            .await
            .map_err(|e| format!("{e:?}"))?;
        let ids: Vec<Value> =
            serde_json::from_str(&text_of(&r.result_json)).map_err(|e| e.to_string())?;
        if ids.is_empty() {
            Err("no cancellation yet".to_owned())
        } else {
            Ok(ids)
        }
    })
    .await;
    assert_eq!(ids.len(), 1, "{ids:?}");
}

#[tokio::test]
async fn raw_frames_bad_ids_and_closing_the_sending_side() {
    let h = harness(stub("crashy.py"), Duration::from_millis(200)).await;
    let (tx, rx) = mpsc::unbounded_channel();
    let mut outcomes = h
        .client
        .clone()
        .call_stream(UnboundedReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let send = |id: u64, frame: Option<Frame>| {
        tx.send(SidecarCallFrame { id, frame }).unwrap();
    };
    // Id 0 is as good as any other; a frame with neither field is refused.
    send(0, Some(Frame::Call(call("slow", json!({"ms": 500})))));
    send(7, None);
    let o = within(outcomes.message()).await.unwrap().unwrap();
    assert_eq!(o.id, 7);
    match o.outcome {
        Some(Outcome::Error(e)) => {
            assert_eq!(e.code, Code::InvalidArgument as i32);
            assert!(e.message.contains("frame 7"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    // Id 0 is still running: a second call with it is refused.
    send(
        0,
        Some(Frame::Call(call("echo", json!({"message": "dup"})))),
    );
    let o = within(outcomes.message()).await.unwrap().unwrap();
    assert_eq!(o.id, 0);
    match o.outcome {
        Some(Outcome::Error(e)) => assert_eq!(e.code, Code::AlreadyExists as i32, "{e:?}"),
        other => panic!("{other:?}"),
    }
    // A cancel for an unknown id is ignored. Then the caller closes its
    // side: the call in flight still finishes, then the stream ends.
    send(99, Some(Frame::Cancel(true)));
    drop(tx);
    let o = within(outcomes.message()).await.unwrap().unwrap();
    assert_eq!(o.id, 0);
    match o.outcome {
        Some(Outcome::Response(r)) => assert_eq!(text_of(&r.result_json), "slept 500 ms"),
        other => panic!("{other:?}"),
    }
    assert!(within(outcomes.message()).await.unwrap().is_none());
}

/// A server whose restarts fail (it exits at start) fails each call with
/// why in about a second (REQUEST_BACKOFF), not after its 10 s backoff;
/// once it can start again, the next call is served as soon, with nothing
/// done by hand (not answered the stale failure: chaos's
/// http-upstream-kill counts that as a lost call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_server_that_cannot_restart_fail_at_once_with_why() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken");
    let mut config = stub("crashy.py");
    if let switchyard_sidecar::upstream::TransportConfig::Stdio(s) = &mut config.transport {
        s.env
            .insert("STUB_EXIT_ON_START_IF".into(), broken.display().to_string());
    }
    config.restart = switchyard_sidecar::upstream::RestartPolicy {
        initial_backoff: Duration::from_secs(10),
        max_backoff: Duration::from_secs(10),
        // A crash restarts at once; the failed restart then backs off.
        reset_after: Duration::ZERO,
        eager: true,
    };
    let h = harness(config, Duration::from_millis(200)).await;
    let mux = open(&h).await;
    std::fs::write(&broken, "").unwrap();
    match within(mux.call(call("crash", json!({"code": 3})))).await {
        Err(CallError::Call(s)) => assert_eq!(s.code(), Code::Unavailable, "{s:?}"),
        other => panic!("{other:?}"),
    }
    // The restart at once fails (exit status 4).
    let mut link = h.upstream.link();
    tokio::time::timeout(
        LIMIT,
        link.wait_for(|l| l.last_error.as_deref().is_some_and(|e| e.contains("4"))),
    )
    .await
    .expect("the failed restart is reported")
    .unwrap();
    for _ in 0..3 {
        let started = std::time::Instant::now();
        match within(mux.call(call("echo", json!({"message": "hi"})))).await {
            Err(CallError::Call(s)) => {
                assert_eq!(s.code(), Code::Unavailable, "{s:?}");
                assert!(s.message().contains("crashy"), "{s:?}");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the call waited for the next attempt: {:?}",
            started.elapsed()
        );
    }
    // Fixed: the next call connects (within about a second) and is
    // served.
    std::fs::remove_file(&broken).unwrap();
    let started = std::time::Instant::now();
    let r = within(mux.call(call("echo", json!({"message": "back"}))))
        .await
        .expect("served once the server can start");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the call waited out the backoff: {:?}",
        started.elapsed()
    );
    assert_eq!(text_of(&r.result_json), "back");
}
