//! list_changed coalescing on a real stdio server (`storm.py`): a storm of
//! 10,000 notifications in 1 s causes one re-list per window, and a server
//! that answers every `tools/list` with another notification cannot make
//! the sidecar re-list more than once per window. Checked through the
//! metrics.

use crate::common::{harness, stub};
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread")]
async fn a_storm_is_one_relist_per_window() {
    let h = harness(stub("storm.py"), Duration::from_secs(2)).await;
    let m = h.upstream.metrics().clone();
    assert_eq!(m.refreshes(), 1, "the connection's own listing");
    let started = Instant::now();
    let r = h
        .call("storm", json!({"n": 10_000, "ms": 1000}), false)
        .await
        .unwrap();
    assert_eq!(r.model_text, "sent 10000");
    // The window runs from the first notification; wait it out, plus slack.
    tokio::time::sleep(Duration::from_millis(2600).saturating_sub(started.elapsed())).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while m.list_changed_received() < 10_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(m.list_changed_received(), 10_000);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(m.refreshes(), 2, "one re-list for the whole storm");
    let lists = h.call("list_count", json!({}), false).await.unwrap();
    assert_eq!(lists.model_text, "2");
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_answering_each_list_with_a_notification_cannot_loop() {
    let mut config = stub("storm.py");
    if let switchyard_sidecar::upstream::TransportConfig::Stdio(s) = &mut config.transport {
        s.env.insert("STUB_NOTIFY_ON_LIST".into(), "1".into());
    }
    let window = Duration::from_millis(300);
    let started = Instant::now();
    let h = harness(config, window).await;
    let m = h.upstream.metrics().clone();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let elapsed = started.elapsed();
    let refreshes = m.refreshes();
    let bound = 1 + (elapsed.as_millis() / window.as_millis()) as u64;
    assert!(
        refreshes >= 3,
        "it keeps re-listing, once per window: {refreshes}"
    );
    assert!(
        refreshes <= bound,
        "{refreshes} re-lists in {elapsed:?}, bound {bound}"
    );
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

/// A server whose first tool listings fail: the status says why (the
/// control plane shows it as the sidecar's last error while the server
/// is "starting"), the listing is tried again after 1 s, then 2 s, and
/// the catalogue is published once one works, with the error cleared.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_tool_listing_is_shown_and_tried_again_with_backoff() {
    use switchyard_sidecar::upstream::{Upstream, UpstreamMetrics};
    use switchyard_sidecar::watch::watch_upstream_with;
    let mut config = stub("storm.py");
    if let switchyard_sidecar::upstream::TransportConfig::Stdio(s) = &mut config.transport {
        s.env.insert("STUB_FAIL_LISTS".into(), "2".into());
    }
    let upstream = Upstream::new(config, &UpstreamMetrics::unregistered()).unwrap();
    let started = Instant::now();
    let (mut view, _watcher) = watch_upstream_with(
        upstream.clone(),
        switchyard_sidecar::tools::catalogue::Catalogue::new(),
        Duration::from_millis(300),
    );
    let status = tokio::time::timeout(
        Duration::from_secs(10),
        view.status.wait_for(|s| !s.last_error.is_empty()),
    )
    .await
    .expect("the failure is shown")
    .unwrap()
    .clone();
    assert_eq!(status.state, "connected");
    assert!(
        status
            .last_error
            .starts_with("listing tools failed (tried again in 1 s): "),
        "{}",
        status.last_error
    );
    assert!(
        status
            .last_error
            .contains("tools/list failure 1 of a flaky server"),
        "{}",
        status.last_error
    );
    assert!(view.catalogue.borrow().is_none(), "nothing published yet");
    tokio::time::timeout(
        Duration::from_secs(10),
        view.catalogue.wait_for(Option::is_some),
    )
    .await
    .expect("the third listing is published")
    .unwrap();
    let took = started.elapsed();
    // Two waits: 1 s, then 2 s.
    assert!(took >= Duration::from_secs(3), "published after {took:?}");
    assert!(view.status.borrow().last_error.is_empty());
    assert_eq!(upstream.metrics().refreshes(), 3);
    upstream.shutdown(Duration::from_secs(2)).await;
}
