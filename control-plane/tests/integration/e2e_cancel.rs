//! Cancelling an engine call: `CancelCall` ends the call at once with
//! CANCELLED, and the cancellation travels control plane -> sidecar ->
//! server as `notifications/cancelled` (the stub server reports the ids it
//! received). An engine that goes away from a unary `CallTool` cancels the
//! call the same way, and it is counted and audited. Other calls are
//! untouched.

use crate::common::*;
use serde_json::Value;
use std::time::{Duration, Instant};
use switchyard_proto::v1 as pb;

#[tokio::test(flavor = "multi_thread")]
async fn cancel_call_reaches_the_server() {
    let _heavy = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let script = switchyard_test_support::stub_script("crashy.py");
    let mut admin = gw.admin().await;
    admin
        .add_server(pb::AddServerRequest {
            spec: Some(pb::ServerSpec {
                name: "stub".into(),
                transport: pb::Transport::Stdio as i32,
                command: "python3".into(),
                args: vec![script.to_string_lossy().into_owned()],
                ..Default::default()
            }),
        })
        .await
        .expect("add the stub server");
    gw.wait_servers_up(&["stub"], LIMIT).await;

    let mut engine = gw.engine().await;
    let mut hang = call_request("stub__hang", "{}", "");
    hang.call_id = "call-1".into();
    hang.timeout_ms = 60_000;
    let mut caller = engine.clone();
    let started = Instant::now();
    let pending = tokio::spawn(async move { caller.call_tool(hang).await });

    // Cancel as soon as the call is known to this replica.
    tokio::time::sleep(Duration::from_millis(500)).await;
    if pending.is_finished() {
        panic!("the call ended early: {:?}", pending.await);
    }
    eventually("CancelCall finds the call", LIMIT, || {
        let mut engine = engine.clone();
        async move {
            let r = engine
                .cancel_call(pb::CancelCallRequest {
                    session_id: String::new(),
                    call_id: "call-1".into(),
                })
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            if r.cancelled {
                Ok(())
            } else {
                Err("not running yet".to_owned())
            }
        }
    })
    .await;
    let status = tokio::time::timeout(LIMIT, pending)
        .await
        .expect("the cancelled call returns")
        .expect("task")
        .expect_err("a cancelled call is an error");
    assert_eq!(status.code(), tonic::Code::Cancelled, "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(20));

    // The server got notifications/cancelled for its request.
    eventually("the server saw the cancellation", LIMIT, || {
        let mut engine = engine.clone();
        async move {
            let r = engine
                .call_tool(call_request("stub__cancelled_ids", "{}", ""))
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            let ids: Value = serde_json::from_str(&r.text).map_err(|e| e.to_string())?;
            match ids.as_array() {
                Some(a) if a.len() == 1 && a[0].is_u64() => Ok(()),
                _ => Err(format!("cancelled ids: {ids}")),
            }
        }
    })
    .await;

    // An engine that goes away from a unary CallTool: the call is cancelled
    // upstream, and counted and audited as cancelled like any other end.
    let cancelled_before = scrape(
        &gw.http_addr,
        "switchyard_control_plane_calls_total",
        &[("server", "stub"), ("outcome", "cancelled")],
    )
    .await;
    let mut caller = engine.clone();
    let mut hang = call_request("stub__hang", "{}", "");
    hang.timeout_ms = 60_000;
    let gone = tokio::spawn(async move { caller.call_tool(hang).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!gone.is_finished(), "the call ended early");
    gone.abort();
    eventually("the gone engine's call is counted", LIMIT, || async {
        let n = scrape(
            &gw.http_addr,
            "switchyard_control_plane_calls_total",
            &[("server", "stub"), ("outcome", "cancelled")],
        )
        .await;
        (n >= cancelled_before + 1.0)
            .then_some(())
            .ok_or(format!("{n} cancelled calls"))
    })
    .await;
    eventually("the gone engine's call is audited", LIMIT, || async {
        let n = gw
            .log()
            .lines()
            .filter(|l| {
                l.contains(r#""kind":"tool.called""#)
                    && l.contains(r#""tool":"hang""#)
                    && l.contains(r#""outcome":"cancelled""#)
            })
            .count();
        // call-1 (CancelCall) and this one.
        (n == 2).then_some(()).ok_or(format!("{n} records"))
    })
    .await;
    eventually("the server saw both cancellations", LIMIT, || {
        let mut engine = engine.clone();
        async move {
            let r = engine
                .call_tool(call_request("stub__cancelled_ids", "{}", ""))
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            let ids: Value = serde_json::from_str(&r.text).map_err(|e| e.to_string())?;
            match ids.as_array() {
                Some(a) if a.len() == 2 => Ok(()),
                _ => Err(format!("cancelled ids: {ids}")),
            }
        }
    })
    .await;

    // Other servers are untouched; an unknown call id is not an error.
    get_order(&mut engine, "orders__get_order", "")
        .await
        .expect("orders works");
    let r = engine
        .cancel_call(pb::CancelCallRequest {
            session_id: String::new(),
            call_id: "no-such-call".into(),
        })
        .await
        .expect("cancelling an unknown call is accepted")
        .into_inner();
    assert!(!r.cancelled);
    gw.stop().await;
}
