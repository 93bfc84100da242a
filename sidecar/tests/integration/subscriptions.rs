//! 2026-07-28 `subscriptions/listen` (basic/utilities/subscriptions) from
//! the sidecar's catalogue watcher, against `listen_stub.py`, a stdio server
//! that declares `tools.listChanged`: the watcher opens one stream opting
//! in to `toolsListChanged` (with the era's `_meta`), opens it again when
//! the server ends it, and re-lists the tools after each reopening (changes
//! sent while no stream was open would be lost otherwise); a server that
//! answers -32601 is asked once. (The notifications themselves, over stdio
//! and Streamable HTTP, are covered end to end by the control plane's
//! `e2e_list_changed`.)

use crate::common::{harness, stub};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn with_mode(mode: &str) -> switchyard_sidecar::upstream::UpstreamConfig {
    let mut config = stub("listen_stub.py");
    if let switchyard_sidecar::upstream::TransportConfig::Stdio(s) = &mut config.transport {
        s.env.insert("LISTEN_MODE".into(), mode.into());
    }
    config
}

async fn stats(h: &crate::common::Harness) -> Value {
    let r = h.call("stats", json!({}), false).await.unwrap();
    serde_json::from_str(&r.model_text).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_the_server_ends_is_reopened_and_the_tools_relisted() {
    let window = Duration::from_millis(200);
    let h = harness(with_mode("end"), window).await;
    let m = h.upstream.metrics().clone();
    // Ended after 0.3 s each time, reopened 1 s, then 2 s later: three
    // streams within about 4 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        let s = stats(&h).await;
        if s["listens"].as_array().unwrap().len() >= 3 || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let listens = s["listens"].as_array().unwrap();
    assert!(listens.len() >= 3, "{s}");
    for params in listens {
        assert_eq!(
            params["notifications"],
            json!({"toolsListChanged": true}),
            "{s}"
        );
        assert_eq!(
            params["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28",
            "{s}"
        );
    }
    // One re-list for the connection, and one after each reopening.
    tokio::time::sleep(window * 2).await;
    let s = stats(&h).await;
    let reopened = s["listens"].as_array().unwrap().len() as u64 - 1;
    assert!(s["lists"].as_u64().unwrap() > reopened, "{s}");
    assert!(
        m.refreshes() > reopened,
        "refreshes {} for {s}",
        m.refreshes()
    );
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_without_subscriptions_is_asked_once() {
    let h = harness(with_mode("unsupported"), Duration::from_millis(200)).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let s = stats(&h).await;
    assert_eq!(s["listens"].as_array().unwrap().len(), 1, "{s}");
    assert_eq!(s["lists"], 1, "{s}");
    h.upstream.shutdown(Duration::from_secs(2)).await;
}
