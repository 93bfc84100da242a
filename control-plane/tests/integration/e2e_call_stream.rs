//! `EngineService.CallToolStream` end to end: `switchyard up` with the
//! reference server (stage A tools), the crashy stub, and real sidecars.
//! The control plane reaches each sidecar over its own `CallStream`.
//!
//! Covered: concurrent calls on one stream each get their own outcome; the
//! engine's `text` is the sidecar's processed model text (structuredContent
//! appended); a call's own failure is an error frame and the stream goes
//! on (unknown tool, a frame with neither field, a duplicate id); a cancel
//! frame and `CancelCall` by `call_id` both end a call with CANCELLED and
//! reach the server as `notifications/cancelled`; kill -9 of a sidecar
//! with a call in flight fails that call fast, naming the server, while
//! the stream and the other server go on; the replacement sidecar takes
//! calls again.

use crate::common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_proto::calls::{CallError, EngineCallFrames, Mux};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::call_tool_frame::Frame;
use switchyard_proto::v1::call_tool_outcome::Outcome;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Code;

fn servers() -> String {
    let script = switchyard_test_support::stub_script("crashy.py");
    format!(
        r#"
[[servers]]
name = "orders"
transport = "stdio"
command = {reference}
args = ["--era", "2026-07-28", "--stage-a"]

[[servers]]
name = "stub"
transport = "stdio"
command = "python3"
args = [{script}]
"#,
        reference = toml_str(switchyard_test_support::reference_server_bin().to_string_lossy()),
        script = toml_str(script.to_string_lossy()),
    )
}

/// `up` with the reference server and the stub, both up.
async fn start() -> Gateway {
    let http = start_http_reference_server().await;
    Gateway::start_with(
        StoreKind::Embedded,
        10,
        http,
        &servers(),
        "",
        &[],
        &["orders", "stub"],
    )
    .await
}

async fn open(gw: &Gateway) -> Arc<Mux<EngineCallFrames>> {
    let mut engine = gw.engine().await;
    Mux::open(|frames| async move { engine.call_tool_stream(frames).await })
        .await
        .expect("CallToolStream opens")
}

async fn within<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, f).await.expect("in time")
}

fn call_error(r: Result<pb::CallToolResponse, CallError>) -> tonic::Status {
    match r {
        Err(CallError::Call(s)) => s,
        other => panic!("expected the call's own error, got {other:?}"),
    }
}

/// The ids the stub got `notifications/cancelled` for.
async fn cancelled_ids(mux: &Mux<EngineCallFrames>) -> Vec<Value> {
    let r = within(mux.call(call_request("stub__cancelled_ids", "{}", "")))
        .await
        .expect("cancelled_ids");
    serde_json::from_str(&r.text).expect("a JSON list")
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_on_one_stream() {
    let _heavy = HEAVY.lock().await;
    let gw = start().await;
    let mux = open(&gw).await;

    // Concurrent calls, each with its own answer.
    let calls: Vec<_> = (0..48)
        .map(|i| {
            let mux = mux.clone();
            tokio::spawn(async move {
                let args = json!({"message": format!("message {i}")}).to_string();
                (i, mux.call(call_request("orders__echo", &args, "")).await)
            })
        })
        .collect();
    for c in calls {
        let (i, r) = within(c).await.unwrap();
        let r = r.unwrap_or_else(|e| panic!("call {i}: {e:?}"));
        assert_eq!(r.text, format!("message {i}"));
        assert_eq!(
            (r.server.as_str(), r.upstream_tool.as_str()),
            ("orders", "echo")
        );
        assert!(!r.is_error);
    }

    // `text` is the processed model text: the summary, then the
    // structuredContent it does not hold, as JSON.
    let r = within(mux.call(call_request("orders__order_summary", "{}", "")))
        .await
        .expect("order_summary");
    let raw: Value = serde_json::from_str(&r.result_json).unwrap();
    let summary = raw["content"][0]["text"].as_str().unwrap();
    let structured = serde_json::to_string_pretty(&raw["structuredContent"]).unwrap();
    assert_eq!(r.text, format!("{summary}\n\n{structured}"));
    assert_eq!(
        serde_json::from_str::<Value>(&r.structured_content_json).unwrap(),
        raw["structuredContent"]
    );

    // A call's own failure is an error frame; the stream goes on.
    let s = call_error(within(mux.call(call_request("orders__no_such_tool", "{}", ""))).await);
    assert_eq!(s.code(), Code::NotFound, "{s:?}");
    assert!(s.message().contains("orders__no_such_tool"), "{s:?}");
    let s = call_error(within(mux.call(call_request("orders__echo", "[1]", ""))).await);
    assert_eq!(s.code(), Code::InvalidArgument, "{s:?}");
    assert!(!mux.is_closed());

    // A dropped call sends a cancel frame; the server hears of it.
    let cut = tokio::time::timeout(
        Duration::from_millis(500),
        mux.call(call_request("stub__hang", "{}", "")),
    )
    .await;
    assert!(cut.is_err(), "hang returned: {cut:?}");
    let mut seen = Vec::new();
    for _ in 0..100 {
        seen = cancelled_ids(&mux).await;
        if !seen.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen.len(), 1, "{seen:?}");

    // CancelCall by call_id reaches a call made on the stream.
    let mut hang = call_request("stub__hang", "{}", "");
    hang.call_id = "stream-call-1".into();
    let pending = {
        let mux = mux.clone();
        tokio::spawn(async move { mux.call(hang).await })
    };
    let engine = gw.engine().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pending.is_finished(), "{:?}", pending.await);
    eventually("CancelCall finds the stream's call", LIMIT, || {
        let mut engine = engine.clone();
        async move {
            let r = engine
                .cancel_call(pb::CancelCallRequest {
                    session_id: String::new(),
                    call_id: "stream-call-1".into(),
                })
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            r.cancelled
                .then_some(())
                .ok_or("not running yet".to_owned())
        }
    })
    .await;
    let s = call_error(within(pending).await.unwrap());
    assert_eq!(s.code(), Code::Cancelled, "{s:?}");
    eventually("the server saw the second cancellation", LIMIT, || {
        let mux = mux.clone();
        async move {
            let ids = cancelled_ids(&mux).await;
            (ids.len() == 2).then_some(()).ok_or(format!("{ids:?}"))
        }
    })
    .await;

    // kill -9 of the stub's sidecar with a call in flight: that call fails
    // fast, naming the server; the stream and the other server go on.
    let pending = {
        let mux = mux.clone();
        tokio::spawn(async move { mux.call(call_request("stub__hang", "{}", "")).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sidecars = gw.sidecars_of("stub");
    assert_eq!(sidecars.len(), 1, "{sidecars:?}");
    let killed = Instant::now();
    signal(sidecars[0], nix::sys::signal::Signal::SIGKILL);
    let s = call_error(within(pending).await.unwrap());
    assert!(
        killed.elapsed() < Duration::from_secs(5),
        "{:?}",
        killed.elapsed()
    );
    assert_eq!(s.code(), Code::Unavailable, "{s:?}");
    assert!(s.message().contains("server unavailable: stub"), "{s:?}");
    let r = within(mux.call(call_request("orders__echo", r#"{"message":"on"}"#, "")))
        .await
        .expect("orders still works");
    assert_eq!(r.text, "on");
    // `up` restarts the sidecar; calls reach the stub again.
    eventually("the stub is called through its new sidecar", LIMIT, || {
        let mux = mux.clone();
        async move {
            let r = mux
                .call(call_request("stub__echo", r#"{"message":"back"}"#, ""))
                .await
                .map_err(|e| format!("{e:?}"))?;
            (r.text == "back").then_some(()).ok_or(r.text)
        }
    })
    .await;
    assert!(!mux.is_closed());
    // Both cancellations (the cancel frame and CancelCall) were counted
    // and audited as such.
    eventually("two cancelled tool.called records", LIMIT, || async {
        let log = gw.log();
        let n = log
            .lines()
            .filter(|l| {
                l.contains(r#""kind":"tool.called""#)
                    && l.contains(r#""tool":"hang""#)
                    && l.contains(r#""outcome":"cancelled""#)
            })
            .count();
        (n == 2).then_some(()).ok_or(format!("{n} records"))
    })
    .await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn raw_frames_are_checked_one_by_one() {
    let _heavy = HEAVY.lock().await;
    let gw = start().await;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut outcomes = gw
        .engine()
        .await
        .call_tool_stream(UnboundedReceiverStream::new(rx))
        .await
        .expect("CallToolStream opens")
        .into_inner();
    let send = |id: u64, frame: Option<Frame>| {
        tx.send(pb::CallToolFrame { id, frame }).unwrap();
    };
    let slow = call_request("stub__slow", r#"{"ms": 800}"#, "");
    send(1, Some(Frame::Call(slow.clone())));
    send(2, None);
    send(1, Some(Frame::Call(slow)));
    send(
        3,
        Some(Frame::Call(call_request(
            "stub__slow",
            r#"{"ms": 20000}"#,
            "",
        ))),
    );
    send(3, Some(Frame::Cancel(true)));
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..4 {
        let o = within(outcomes.message()).await.unwrap().unwrap();
        let what = match o.outcome {
            Some(Outcome::Response(r)) => format!("ok {}", r.text),
            Some(Outcome::Error(e)) => format!("{:?} {}", Code::from(e.code), e.message),
            Some(Outcome::NotificationJson(n)) => format!("notification {n}"),
            None => "nothing".into(),
        };
        seen.entry(o.id).or_insert_with(Vec::new).push(what);
    }
    let one = &seen[&1];
    assert_eq!(one.len(), 2, "{seen:?}");
    assert!(one[0].starts_with("AlreadyExists"), "{seen:?}");
    assert_eq!(one[1], "ok slept 800 ms", "{seen:?}");
    assert!(
        seen[&2][0].starts_with("InvalidArgument frame 2"),
        "{seen:?}"
    );
    assert!(seen[&3][0].starts_with("Cancelled"), "{seen:?}");
    // Closing the sending side ends the stream once nothing is in flight.
    drop(tx);
    assert!(within(outcomes.message()).await.unwrap().is_none());
    gw.stop().await;
}
