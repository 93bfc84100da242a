//! list_changed coalescing on a real stdio server (`storm.py`): a storm of
//! 10,000 notifications in 1 s causes one re-list per window, and a server
//! that answers every `tools/list` with another notification cannot make
//! the sidecar re-list more than once per window. Checked through the
//! metrics. And a 2026-07-28 server (`mrtr_stub.py`) whose tool list has a
//! `ttlMs` and no `listChanged` is listed again when the list turns stale.

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
    let started = Instant::now();
    let (upstream, mut view, _watcher) = watched(
        "storm.py",
        &[("STUB_FAIL_LISTS", "2")],
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
    published(&mut view, "the third listing is published").await;
    let took = started.elapsed();
    // Two waits: 1 s, then 2 s.
    assert!(took >= Duration::from_secs(3), "published after {took:?}");
    assert!(view.status.borrow().last_error.is_empty());
    assert_eq!(upstream.metrics().refreshes(), 3);
    upstream.shutdown(Duration::from_secs(2)).await;
}

/// A server that announces a list change with each failed listing does
/// not defeat the backoff: the listings still come after 1 s, then 2 s,
/// not once per coalescing window.
#[tokio::test(flavor = "multi_thread")]
async fn list_changes_during_failed_listings_wait_for_the_retry() {
    let (upstream, _view, _watcher) = watched(
        "storm.py",
        &[("STUB_FAIL_LISTS", "1000"), ("STUB_NOTIFY_ON_LIST", "1")],
        Duration::from_millis(200),
    );
    // Listings at about 0, 1 and 3 s (the next at 7 s); one per 200 ms
    // window would be about 22.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let refreshes = upstream.metrics().refreshes();
    assert!(
        (2..=4).contains(&refreshes),
        "{refreshes} listings in 4.5 s"
    );
    assert!(upstream.metrics().list_changed_received() >= 2);
    upstream.shutdown(Duration::from_secs(2)).await;
}

/// A server that exits at every tool listing is never shown "connected"
/// without a reason: each new connection keeps the last error until its
/// tools are listed.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_exits_at_each_listing_always_has_a_reason() {
    let (upstream, mut view, _watcher) = watched(
        "storm.py",
        &[("STUB_EXIT_ON_LIST", "1")],
        Duration::from_millis(200),
    );
    tokio::time::timeout(
        Duration::from_secs(10),
        view.status.wait_for(|s| !s.last_error.is_empty()),
    )
    .await
    .expect("a reason is shown")
    .unwrap();
    // Through several restarts (1 s, 2 s, … apart), every state it shows
    // has its reason.
    let until = Instant::now() + Duration::from_secs(5);
    let mut seen = std::collections::BTreeSet::new();
    while Instant::now() < until {
        let s = view.status.borrow().clone();
        assert!(
            !s.last_error.is_empty(),
            "{} without a reason (seen: {seen:?})",
            s.state
        );
        seen.insert(s.state);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(view.catalogue.borrow().is_none());
    upstream.shutdown(Duration::from_secs(2)).await;
}

/// The stub `script` with `env`, its upstream session, and a watcher of
/// its own (coalescing `window`); the watcher task ends with the session.
fn watched(
    script: &str,
    env: &[(&str, &str)],
    window: Duration,
) -> (
    switchyard_sidecar::upstream::Upstream,
    switchyard_sidecar::watch::UpstreamView,
    tokio::task::JoinHandle<()>,
) {
    use switchyard_sidecar::upstream::{TransportConfig, Upstream, UpstreamMetrics};
    let mut config = stub(script);
    if let TransportConfig::Stdio(s) = &mut config.transport {
        for (k, v) in env {
            s.env.insert((*k).into(), (*v).into());
        }
    }
    let upstream = Upstream::new(config, &UpstreamMetrics::unregistered()).unwrap();
    let (view, watcher) = switchyard_sidecar::watch::watch_upstream_with(
        upstream.clone(),
        switchyard_sidecar::tools::catalogue::Catalogue::new(),
        window,
    );
    (upstream, view, watcher)
}

/// The tool names of the watcher's latest catalogue.
fn listed(view: &switchyard_sidecar::watch::UpstreamView) -> Vec<String> {
    view.catalogue
        .borrow()
        .as_ref()
        .map(|c| {
            c.tools_json
                .iter()
                .filter_map(|t| serde_json::from_str::<serde_json::Value>(t).ok())
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// server/utilities/caching: a 2026-07-28 server that gives its tool list
/// a `ttlMs` and does not declare `listChanged` is relied on for freshness
/// by its TTL: the list is listed again once stale (1.5 s here, plus up to
/// a tenth), not sooner and not once per coalescing window; a server that
/// declares `listChanged` is left to its notifications.
#[tokio::test(flavor = "multi_thread")]
async fn a_list_with_a_ttl_and_no_list_changed_is_listed_again_when_stale() {
    let window = Duration::from_millis(200);
    let started = Instant::now();
    let (upstream, mut view, _watcher) =
        watched("mrtr_stub.py", &[("STUB_TTL_MS", "1500")], window);
    published(&mut view, "the first listing").await;
    assert!(
        listed(&view).contains(&"listing_1".to_owned()),
        "{:?}",
        listed(&view)
    );
    let first = started.elapsed();
    tokio::time::timeout(
        Duration::from_secs(10),
        view.catalogue.wait_for(|c| {
            c.as_ref()
                .is_some_and(|c| c.tools_json.iter().any(|t| t.contains("listing_2")))
        }),
    )
    .await
    .expect("listed again once stale")
    .unwrap();
    let again = started.elapsed() - first;
    assert!(
        again >= Duration::from_millis(1400),
        "listed again after {again:?}"
    );
    // About one listing per 1.5 s from then on, not one per 200 ms window.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let refreshes = upstream.metrics().refreshes();
    assert!((3..=5).contains(&refreshes), "{refreshes} listings");
    upstream.shutdown(Duration::from_secs(2)).await;

    let (upstream, mut view, _watcher) = watched(
        "mrtr_stub.py",
        &[("STUB_TTL_MS", "500"), ("STUB_LIST_CHANGED", "1")],
        window,
    );
    published(&mut view, "the first listing").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(upstream.metrics().refreshes(), 1, "{:?}", listed(&view));
    upstream.shutdown(Duration::from_secs(2)).await;
}

/// Waits (10 s at most) for the watcher's first catalogue; `what` names it.
async fn published(view: &mut switchyard_sidecar::watch::UpstreamView, what: &str) {
    tokio::time::timeout(
        Duration::from_secs(10),
        view.catalogue.wait_for(Option::is_some),
    )
    .await
    .unwrap_or_else(|_| panic!("{what}: not within 10 s"))
    .unwrap();
}
