//! The upstream watcher ([`watch_upstream`]): it follows the upstream
//! session and keeps the stage A catalogue current. It keeps the session
//! connected, re-lists tools after each connection and after list changes
//! (coalesced, see [`super::catalogue`]: at most one re-list per window),
//! compiles the tools' output schemas into the shared [`Catalogue`], keeps
//! a 2026-07-28 `subscriptions/listen` stream open for the list changes
//! when the server declares `tools.listChanged`, and publishes the latest
//! [`UpstreamStatus`] and [`CatalogueSnapshot`] on watch channels (an
//! [`UpstreamView`]), which the report stream sends to the control plane.
//! It does not depend on the control plane, so a catalogue is ready as
//! soon as a stream opens.

use super::catalogue::{Catalogue, Coalescer, DEFAULT_LIST_CHANGED_WINDOW};
use crate::upstream::{Era, Link, Upstream, UpstreamError};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::time::Duration;
use switchyard_proto::v1::{CatalogueSnapshot, UpstreamStatus};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::task::AbortOnDropHandle;

/// The latest upstream status and catalogue, as published by
/// [`watch_upstream`].
#[derive(Debug, Clone)]
pub struct UpstreamView {
    /// The connection state: "connecting", "connected" or "down" (the
    /// report stream turns it into [`crate::run::drain::DRAINING`] on
    /// shutdown, see [`crate::run::drain::Drain`]).
    pub status: watch::Receiver<UpstreamStatus>,
    /// The catalogue of the current connection; `None` while disconnected.
    pub catalogue: watch::Receiver<Option<CatalogueSnapshot>>,
    /// Where effective hints pushed by the control plane are kept (shared
    /// with the call pipeline).
    pub settings: Catalogue,
}

/// Starts following `upstream` (see the module docs) with a private
/// catalogue and the default coalescing window. The task ends when the
/// upstream session is shut down.
pub fn watch_upstream(upstream: Upstream) -> (UpstreamView, JoinHandle<()>) {
    watch_upstream_with(upstream, Catalogue::new(), DEFAULT_LIST_CHANGED_WINDOW)
}

/// Starts following `upstream`, keeping `catalogue` up to date and
/// coalescing list-changed notifications within `window`.
pub fn watch_upstream_with(
    upstream: Upstream,
    compiled: Catalogue,
    window: Duration,
) -> (UpstreamView, JoinHandle<()>) {
    let (status_tx, status) = watch::channel(UpstreamStatus {
        state: "connecting".into(),
        last_error: String::new(),
    });
    let (catalogue_tx, catalogue) = watch::channel(None);
    let settings = compiled.clone();
    let task = tokio::spawn(
        UpstreamWatcher {
            upstream,
            status: status_tx,
            catalogue: catalogue_tx,
            seen_connections: 0,
            compiled,
            coalescer: Coalescer::new(window),
            listener: None,
        }
        .run(),
    );
    (
        UpstreamView {
            status,
            catalogue,
            settings,
        },
        task,
    )
}

struct UpstreamWatcher {
    upstream: Upstream,
    status: watch::Sender<UpstreamStatus>,
    catalogue: watch::Sender<Option<CatalogueSnapshot>>,
    seen_connections: u64,
    compiled: Catalogue,
    coalescer: Coalescer,
    /// The `subscriptions/listen` keeper of the current 2026-07-28
    /// connection, and where it says it reopened the stream (so changes
    /// missed meanwhile are caught by a re-list).
    listener: Option<(AbortOnDropHandle<()>, mpsc::UnboundedReceiver<()>)>,
}

/// The longest one `subscriptions/listen` request is held open before it
/// is cancelled and reopened (a guard against a stream that went quiet
/// without closing).
pub const LISTEN_LIMIT: Duration = Duration::from_secs(3600);
/// First and largest delay before reopening a `subscriptions/listen`
/// stream that failed.
const LISTEN_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// Keeps a `subscriptions/listen` request open for
/// `notifications/tools/list_changed` (2026-07-28,
/// basic/utilities/subscriptions: a server sends notifications only on
/// such a stream, and only the kinds the client opted in to) while the
/// connection it started on is up: a stream the server ends, or that
/// fails, is reopened (after 1 s, doubling to 30 s while it keeps
/// failing), and each reopening is signalled on `reopened`. A server
/// that answers -32601 (no subscriptions) is not asked again on this
/// connection.
async fn keep_listening(
    upstream: Upstream,
    mut link: watch::Receiver<Link>,
    reopened: mpsc::UnboundedSender<()>,
) {
    let server = upstream.name().to_owned();
    let generation = link.borrow().connections;
    let mut backoff = LISTEN_BACKOFF.0;
    let mut first = true;
    loop {
        {
            let l = link.borrow_and_update();
            if !l.connected || l.connections != generation {
                return;
            }
        }
        if !first {
            let _ = reopened.send(());
        }
        first = false;
        let opened = tokio::time::Instant::now();
        let listen = upstream.listen(json!({"toolsListChanged": true}), LISTEN_LIMIT);
        tokio::pin!(listen);
        let ended = loop {
            tokio::select! {
                r = &mut listen => break r,
                changed = link.changed() => {
                    // The connection went away: its requests end with it.
                    if changed.is_err() {
                        return;
                    }
                    let l = link.borrow_and_update();
                    if !l.connected || l.connections != generation {
                        return;
                    }
                }
            }
        };
        if opened.elapsed() > LISTEN_BACKOFF.1 {
            backoff = LISTEN_BACKOFF.0;
        }
        match ended {
            Ok(_) => {
                tracing::info!(%server, "the server ended its subscriptions/listen stream; reopening");
            }
            Err(UpstreamError::Rpc { code: -32601, .. }) => {
                tracing::info!(%server, "the server has no subscriptions/listen; tool list changes are heard only when it sends them on a response");
                return;
            }
            Err(UpstreamError::Timeout { .. }) => {
                tracing::debug!(%server, "subscriptions/listen held for its whole limit; reopening");
                continue;
            }
            Err(e) => {
                let l = link.borrow();
                if !l.connected || l.connections != generation {
                    // The connection went away with its stream: the next
                    // connection gets a listener of its own.
                    return;
                }
                drop(l);
                tracing::warn!(%server, error = %e, retry_in_ms = backoff.as_millis() as u64, "subscriptions/listen failed; reopening");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(LISTEN_BACKOFF.1);
    }
}

type ConnectFuture = BoxFuture<'static, Result<(), UpstreamError>>;

impl UpstreamWatcher {
    fn connect(&self) -> ConnectFuture {
        let upstream = self.upstream.clone();
        Box::pin(async move { upstream.connect().await.map(|_| ()) })
    }

    async fn run(mut self) {
        let mut link = self.upstream.link();
        let mut notifications = Some(self.upstream.subscribe());
        // Keeps the session connected: the upstream session applies its own
        // backoff between failed attempts.
        let mut keeper: Option<ConnectFuture> = Some(self.connect());
        let current = link.borrow_and_update().clone();
        self.on_link(current).await;
        loop {
            tokio::select! {
                result = async { keeper.as_mut().expect("guarded").await }, if keeper.is_some() => {
                    keeper = None;
                    match result {
                        Ok(()) => {}
                        Err(UpstreamError::Closed { .. }) => return,
                        Err(e) => {
                            self.set_status("down", e.to_string());
                            keeper = Some(self.connect());
                        }
                    }
                }
                changed = link.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let current = link.borrow_and_update().clone();
                    let connected = current.connected;
                    self.on_link(current).await;
                    if !connected && keeper.is_none() {
                        keeper = Some(self.connect());
                    }
                }
                note = async { notifications.as_mut().expect("guarded").recv().await }, if notifications.is_some() => {
                    match note {
                        Ok(msg) if msg.get("method").and_then(Value::as_str) == Some("notifications/tools/list_changed") => {
                            self.upstream.metrics().list_changed(1);
                            if self.coalescer.deadline().is_none() {
                                tracing::info!(server = %self.upstream.name(), "tool list changed; re-listing after the coalescing window");
                            }
                            self.coalescer.notified(tokio::time::Instant::now());
                        }
                        Ok(_) => {}
                        // Dropped notifications may have been list changes.
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            self.upstream.metrics().list_changed(n);
                            self.coalescer.notified(tokio::time::Instant::now());
                        }
                        Err(broadcast::error::RecvError::Closed) => notifications = None,
                    }
                }
                () = async { tokio::time::sleep_until(self.coalescer.deadline().expect("guarded")).await }, if self.coalescer.deadline().is_some() => {
                    self.refresh().await;
                }
                Some(()) = async { self.listener.as_mut().expect("guarded").1.recv().await }, if self.listener.is_some() => {
                    // Changes may have been sent while no stream was open.
                    self.coalescer.notified(tokio::time::Instant::now());
                }
            }
        }
    }

    async fn on_link(&mut self, link: Link) {
        if link.connected {
            if link.connections != self.seen_connections {
                self.seen_connections = link.connections;
                self.set_status("connected", String::new());
                self.listen();
                self.refresh().await;
            }
        } else {
            self.listener = None;
            self.catalogue.send_if_modified(|c| c.take().is_some());
            if let Some(e) = link.last_error {
                self.set_status("down", e);
            }
        }
    }

    /// Starts keeping a `subscriptions/listen` stream open on the new
    /// connection when it is 2026-07-28 and the server declares
    /// `tools.listChanged` (the previous connection's keeper is dropped,
    /// which stops it).
    fn listen(&mut self) {
        self.listener = None;
        let Some(negotiated) = self.upstream.negotiated() else {
            return;
        };
        let list_changed = negotiated.capabilities["tools"]["listChanged"] == Value::Bool(true);
        if negotiated.era != Era::Modern || !list_changed {
            return;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(keep_listening(
            self.upstream.clone(),
            self.upstream.link(),
            tx,
        ));
        self.listener = Some((AbortOnDropHandle::new(task), rx));
    }

    fn set_status(&self, state: &str, last_error: String) {
        let next = UpstreamStatus {
            state: state.into(),
            last_error,
        };
        self.status.send_if_modified(|s| {
            if *s == next {
                false
            } else {
                *s = next;
                true
            }
        });
    }

    /// Lists tools and publishes a snapshot (always, even if unchanged:
    /// the control plane decides what really changed).
    async fn refresh(&mut self) {
        self.coalescer.refreshing();
        self.upstream.metrics().refresh();
        match self.upstream.list_tools().await {
            Ok(tools) => {
                if self.compiled.update(self.upstream.name(), &tools) {
                    tracing::debug!(server = %self.upstream.name(), "output schemas compiled");
                }
                let Some(n) = self.upstream.negotiated() else {
                    return;
                };
                let json = |v: &Value| {
                    if v.is_null() {
                        String::new()
                    } else {
                        v.to_string()
                    }
                };
                let snapshot = CatalogueSnapshot {
                    server: self.upstream.name().to_owned(),
                    tools_json: tools.iter().map(Value::to_string).collect(),
                    capabilities_json: json(&n.capabilities),
                    server_info_json: json(&n.server_info),
                    protocol_version: n.protocol_version.clone(),
                    // Stage E lists: filled in by the resources watcher.
                    ..Default::default()
                };
                tracing::info!(server = %self.upstream.name(), tools = tools.len(), "catalogue listed");
                self.catalogue.send_replace(Some(snapshot));
            }
            Err(e) => {
                tracing::warn!(server = %self.upstream.name(), error = %e, "listing tools failed");
            }
        }
    }
}
