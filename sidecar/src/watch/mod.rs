//! The upstream watcher ([`watch_upstream`]), one per server: it follows
//! the upstream session and keeps the server's catalogue current for both
//! stages that have one, the tools (stage A, [`crate::tools::catalogue`])
//! and the resources, resource templates and prompts (stage E,
//! [`crate::resources::catalogue`]). It sits above both stages; neither
//! knows of it.
//!
//! It keeps the session connected (an `auth = "oauth"` server once the
//! control plane has sent it an access token: until then, and whenever
//! the token is withdrawn, the status is "down" with the control plane's
//! reason as the last error); lists everything after each connection;
//! re-lists one list after that list's changes
//! (`notifications/tools/list_changed`, `.../resources/list_changed` for
//! the resources and their templates, `.../prompts/list_changed`), each
//! list coalesced on its own ([`coalesce`]: at most one re-list per list
//! per window); re-lists a list that a 2026-07-28 server gave a `ttlMs`
//! without declaring its `listChanged` when that list turns stale
//! (server/utilities/caching; [`UpstreamWatcher::fresh_for`]); hands the
//! tools' output schemas to the shared
//! [`Catalogue`] (which compiles each on first use); keeps a 2026-07-28 `subscriptions/listen` stream open
//! opting in to the list changes the server declares ([`listen`]); and
//! publishes the latest [`UpstreamStatus`] and [`CatalogueSnapshot`] on
//! watch channels (an [`UpstreamView`]), which the report stream sends to
//! the control plane. It does not depend on the control plane, so a
//! catalogue is ready as soon as a stream opens.
//!
//! A snapshot needs the tools of the current connection: when listing them
//! fails, nothing is published until a later listing works. A failed tool
//! listing (an error, or no answer within [`TOOLS_LIST_LIMIT`]) is tried
//! again after 1 s, doubling up to 30 s ([`TOOLS_RETRY_FIRST`],
//! [`TOOLS_RETRY_MAX`]; a list change the server announces meanwhile does
//! not list sooner), until one works or the connection changes; meanwhile
//! the status stays "connected" with the failure as its last error, so
//! `servers status` says why the server is not up (or why its tools are
//! stale). A new connection keeps the last error until its tools are
//! listed, so a server that exits at every listing is never shown
//! "connected" without a reason. A stage E
//! listing that fails keeps that list as it was ([`Lists`]) and never
//! holds back the tools.

pub mod coalesce;
pub mod listen;

pub use coalesce::DEFAULT_LIST_CHANGED_WINDOW;

use crate::resources::catalogue::Lists;
use crate::tools::catalogue::Catalogue;
use crate::upstream::{Era, Link, Upstream, UpstreamError};
use coalesce::Coalescer;
use futures::future::BoxFuture;
use serde_json::Value;
use std::time::Duration;
use switchyard_mcp::methods;
use switchyard_proto::v1::{CatalogueSnapshot, UpstreamStatus};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
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

/// The longest a resource, template or prompt listing may take (all its
/// pages): the watcher waits for it, so it is bounded well below a
/// request's own timeout.
pub const STAGE_E_LIST_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The wait before listing the tools again after a failed listing; it
/// doubles with each failure in a row, up to [`TOOLS_RETRY_MAX`].
pub const TOOLS_RETRY_FIRST: Duration = Duration::from_secs(1);

/// The longest wait between two tool listings after failures.
pub const TOOLS_RETRY_MAX: Duration = Duration::from_secs(30);

/// The longest a tool listing (all its pages) may take before it counts
/// as failed: the watcher waits for it, as for [`STAGE_E_LIST_LIMIT`].
pub const TOOLS_LIST_LIMIT: Duration = Duration::from_secs(30);

/// How many coalescing windows a list given a `ttlMs` (and no
/// `listChanged`) stays at least between two re-lists: a shorter `ttlMs`
/// counts as this long (10 s with the default window).
pub const TTL_RELIST_MIN_WINDOWS: u32 = 5;

/// The longest wait between two re-lists of a list given a `ttlMs`, after
/// failed ones (the wait doubles with each failure), unless its `ttlMs`
/// is longer.
pub const TTL_RELIST_BACKOFF_MAX: Duration = Duration::from_secs(3600);

/// Starts following `upstream` (see the module docs) with a private
/// catalogue and the default coalescing window. The task ends when the
/// upstream session is shut down.
pub fn watch_upstream(upstream: Upstream) -> (UpstreamView, JoinHandle<()>) {
    watch_upstream_with(upstream, Catalogue::new(), DEFAULT_LIST_CHANGED_WINDOW)
}

/// Starts following `upstream`, keeping `catalogue` up to date and
/// coalescing each list's changes within `window`.
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
            coalescers: List::ALL.map(|_| Coalescer::new(window)),
            tools: None,
            tools_retry: None,
            lists: Lists::default(),
            listener: None,
            stale: [None; 3],
            ttl_floor: window * TTL_RELIST_MIN_WINDOWS,
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

/// A list the watcher re-lists on its own, with its own coalescing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    /// `tools/list` (stage A).
    Tools,
    /// `resources/list` and `resources/templates/list` (stage E): both
    /// change with `notifications/resources/list_changed`.
    Resources,
    /// `prompts/list` (stage E).
    Prompts,
}

impl List {
    const ALL: [List; 3] = [List::Tools, List::Resources, List::Prompts];

    /// The list a list-changed notification is about.
    fn changed_by(method: &str) -> Option<List> {
        match method {
            methods::TOOLS_LIST_CHANGED => Some(List::Tools),
            methods::RESOURCES_LIST_CHANGED => Some(List::Resources),
            methods::PROMPTS_LIST_CHANGED => Some(List::Prompts),
            _ => None,
        }
    }

    /// The server capability that declares the list (and its
    /// `listChanged`).
    fn capability(self) -> &'static str {
        match self {
            List::Tools => "tools",
            List::Resources => "resources",
            List::Prompts => "prompts",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

struct UpstreamWatcher {
    upstream: Upstream,
    status: watch::Sender<UpstreamStatus>,
    catalogue: watch::Sender<Option<CatalogueSnapshot>>,
    seen_connections: u64,
    compiled: Catalogue,
    /// One per [`List`], by [`List::index`].
    coalescers: [Coalescer; 3],
    /// The tools of the current connection; `None` until listed (nothing
    /// is published until then).
    tools: Option<Vec<Value>>,
    /// After a failed tool listing on the current connection: when to list
    /// again, and the wait that led there (doubled after the next failure).
    tools_retry: Option<(Instant, Duration)>,
    /// The stage E lists, kept across failed listings.
    lists: Lists,
    /// The `subscriptions/listen` keeper of the current 2026-07-28
    /// connection, and where it says it reopened the stream (so changes
    /// missed meanwhile are caught by a re-list).
    listener: Option<(AbortOnDropHandle<()>, mpsc::UnboundedReceiver<()>)>,
    /// One per [`List`]: when a list that is fresh for a while (its
    /// `ttlMs`, on a 2026-07-28 server that does not declare its
    /// `listChanged`) turns stale and is listed again, and the wait that
    /// led there ([`UpstreamWatcher::fresh_for`]).
    stale: [Option<(Instant, Duration)>; 3],
    /// The shortest wait for [`UpstreamWatcher::stale`]
    /// ([`TTL_RELIST_MIN_WINDOWS`] coalescing windows).
    ttl_floor: Duration,
}

type ConnectFuture = BoxFuture<'static, Result<(), UpstreamError>>;

impl UpstreamWatcher {
    /// Connects once the server may be contacted
    /// ([`Upstream::authorized`]: an oauth server waits for its token).
    fn connect(&self) -> ConnectFuture {
        let upstream = self.upstream.clone();
        Box::pin(async move {
            upstream.authorized().await?;
            upstream.connect().await.map(|_| ())
        })
    }

    /// When `list` is due to be listed again, if it is: after a failed
    /// tool listing, at the retry (announced changes wait for it);
    /// otherwise when its coalescing window ends.
    fn due_at(&self, list: List) -> Option<Instant> {
        match (list, self.tools_retry) {
            (List::Tools, Some((at, _))) => Some(at),
            _ => {
                let changed = self.coalescers[list.index()].deadline();
                let stale = self.stale[list.index()].map(|(at, _)| at);
                changed.into_iter().chain(stale).min()
            }
        }
    }

    /// After `list` was listed (`Some`: how long the server says it is
    /// fresh, ms) or failed to be (`None`), when to list it again on its
    /// own (server/utilities/caching: "A server MAY provide ttlMs without
    /// advertising listChanged: true. In this case, the client relies
    /// entirely on TTL-based freshness"): only on a 2026-07-28 server that
    /// does not declare the list's `listChanged` and gave a `ttlMs` above
    /// 0. Then after the `ttlMs`, at least [`UpstreamWatcher::ttl_floor`],
    /// plus up to a tenth more at random (the spec asks for jitter); after
    /// a failure, twice the last wait, up to [`TTL_RELIST_BACKOFF_MAX`].
    fn fresh_for(&mut self, list: List, listed: Option<u64>) {
        let slot = &mut self.stale[list.index()];
        let wait = match (listed, *slot) {
            (Some(ttl), _) => {
                let by_ttl = self.upstream.negotiated().is_some_and(|n| {
                    n.era == Era::Modern && !n.declares_list_changed(list.capability())
                });
                if !by_ttl || ttl == 0 {
                    *slot = None;
                    return;
                }
                Duration::from_millis(ttl).max(self.ttl_floor)
            }
            (None, Some((_, last))) => (last * 2).min(TTL_RELIST_BACKOFF_MAX.max(last)),
            (None, None) => return,
        };
        let jitter = wait.mul_f64(rand::random::<f64>() / 10.0);
        *slot = Some((Instant::now() + wait + jitter, wait));
    }

    /// The earliest re-list due, if any.
    fn next_due(&self) -> Option<Instant> {
        List::ALL.into_iter().filter_map(|l| self.due_at(l)).min()
    }

    fn notified(&mut self, list: List) {
        let coalescer = &mut self.coalescers[list.index()];
        if coalescer.deadline().is_none() {
            tracing::info!(server = %self.upstream.name(), ?list, "list changed; re-listing after the coalescing window");
        }
        coalescer.notified(Instant::now());
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
            let due = self.next_due();
            tokio::select! {
                result = async { keeper.as_mut().expect("guarded").await }, if keeper.is_some() => {
                    keeper = None;
                    match result {
                        // Connected; but the connection may be gone again
                        // already (a token withdrawn while this branch
                        // waited its turn behind the link's branch, which
                        // then saw a keeper and started none): connect
                        // again, or nothing would until the link changed.
                        Ok(()) => {
                            if !link.borrow().connected {
                                keeper = Some(self.connect());
                            }
                        }
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
                        Ok(msg) => {
                            if let Some(list) = msg.get("method").and_then(Value::as_str).and_then(List::changed_by) {
                                // The metric counts the tool list's (its
                                // re-lists are the refreshes counted).
                                if list == List::Tools {
                                    self.upstream.metrics().list_changed(1);
                                }
                                self.notified(list);
                            }
                        }
                        // Dropped notifications may have been list changes
                        // of any list.
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            self.upstream.metrics().list_changed(n);
                            for list in List::ALL {
                                self.notified(list);
                            }
                        }
                        Err(broadcast::error::RecvError::Closed) => notifications = None,
                    }
                }
                () = async { tokio::time::sleep_until(due.expect("guarded")).await }, if due.is_some() => {
                    let now = Instant::now();
                    let due: Vec<List> = List::ALL
                        .into_iter()
                        .filter(|l| self.due_at(*l).is_some_and(|d| d <= now))
                        .collect();
                    for list in due {
                        self.refresh(list).await;
                    }
                    self.publish();
                }
                Some(()) = async { self.listener.as_mut().expect("guarded").1.recv().await }, if self.listener.is_some() => {
                    // Changes may have been sent while no stream was open.
                    for list in List::ALL {
                        if self.upstream.negotiated().is_some_and(|n| n.declares_list_changed(list.capability())) {
                            self.coalescers[list.index()].notified(Instant::now());
                        }
                    }
                }
            }
        }
    }

    async fn on_link(&mut self, link: Link) {
        if link.connected {
            if link.connections != self.seen_connections {
                self.seen_connections = link.connections;
                self.tools = None;
                self.tools_retry = None;
                // The last error stays until the tools are listed.
                let last_error = self.status.borrow().last_error.clone();
                self.set_status("connected", last_error);
                self.listen();
                // A new connection lists everything at once (a resource or
                // prompt list that never answers holds the tools back
                // [`STAGE_E_LIST_LIMIT`] at most).
                for list in List::ALL {
                    self.refresh(list).await;
                }
                self.publish();
            }
        } else {
            self.listener = None;
            self.tools = None;
            self.tools_retry = None;
            self.stale = [None; 3];
            self.catalogue.send_if_modified(|c| c.take().is_some());
            if let Some(e) = link.last_error {
                self.set_status("down", e);
            }
        }
    }

    /// Starts keeping a `subscriptions/listen` stream open on the new
    /// connection when it is 2026-07-28 and the server declares
    /// `listChanged` on any of its lists (the previous connection's keeper
    /// is dropped, which stops it).
    fn listen(&mut self) {
        self.listener = None;
        let Some(negotiated) = self.upstream.negotiated() else {
            return;
        };
        if negotiated.era != Era::Modern {
            return;
        }
        let Some(filter) = listen::filter(&negotiated.capabilities) else {
            return;
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(listen::keep_listening(
            self.upstream.clone(),
            filter,
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

    /// Lists `list` again (the caller publishes).
    async fn refresh(&mut self, list: List) {
        self.coalescers[list.index()].refreshing();
        // A stale list being listed is not due again until this listing
        // says (`fresh_for`); one that cannot be listed now (no connection)
        // waits its last wait again instead of coming due at once.
        if let Some((_, last)) = self.stale[list.index()] {
            self.stale[list.index()] = Some((Instant::now() + last, last));
        }
        let upstream = &self.upstream;
        match list {
            List::Tools => {
                upstream.metrics().refresh();
                let listed =
                    match tokio::time::timeout(TOOLS_LIST_LIMIT, upstream.list_tools()).await {
                        Ok(listed) => listed,
                        Err(_) => Err(UpstreamError::Timeout {
                            server: upstream.name().to_owned(),
                            method: methods::TOOLS_LIST.into(),
                            after: TOOLS_LIST_LIMIT,
                        }),
                    };
                match listed {
                    Ok(walked) => {
                        let tools = walked.entries;
                        if self.compiled.update(upstream.name(), &tools) {
                            tracing::debug!(server = %upstream.name(), "new tool list: output schemas taken");
                        }
                        self.tools = Some(tools);
                        self.tools_retry = None;
                        if !self.status.borrow().last_error.is_empty() {
                            self.set_status("connected", String::new());
                        }
                        self.fresh_for(List::Tools, Some(walked.ttl_ms));
                    }
                    // Gone with its connection (the link's change follows
                    // and reconnects): said until a listing works.
                    Err(e) if upstream.negotiated().is_none() => {
                        tracing::warn!(server = %upstream.name(), error = %e, "listing tools failed: the connection ended");
                        self.set_status("down", format!("listing tools failed: {e}"));
                    }
                    Err(e) => {
                        let wait = self
                            .tools_retry
                            .map_or(TOOLS_RETRY_FIRST, |(_, w)| (w * 2).min(TOOLS_RETRY_MAX));
                        self.tools_retry = Some((Instant::now() + wait, wait));
                        let kept = if self.tools.is_some() {
                            "; the previous list is kept"
                        } else {
                            ""
                        };
                        tracing::warn!(server = %upstream.name(), error = %e, retry_in_s = wait.as_secs(), "listing tools failed");
                        self.set_status(
                            "connected",
                            format!(
                                "listing tools failed (tried again in {} s{kept}): {e}",
                                wait.as_secs()
                            ),
                        );
                    }
                }
            }
            // Bounded: this loop also re-lists tools and follows the
            // connection, so a server that never answers one of these
            // lists costs it at most this long (the previous list stays).
            // Listed again on the next connection; listing now would wait
            // for it.
            List::Resources | List::Prompts if upstream.negotiated().is_none() => {}
            List::Resources => {
                let relist = self.lists.relist_resources(upstream);
                let listed = tokio::time::timeout(STAGE_E_LIST_LIMIT, relist).await;
                if listed.is_err() {
                    tracing::warn!(server = %upstream.name(), limit_s = STAGE_E_LIST_LIMIT.as_secs(), "listing resources took too long; keeping the previous lists");
                }
                self.fresh_for(List::Resources, listed.ok().flatten());
            }
            List::Prompts => {
                let relist = self.lists.relist_prompts(upstream);
                let listed = tokio::time::timeout(STAGE_E_LIST_LIMIT, relist).await;
                if listed.is_err() {
                    tracing::warn!(server = %upstream.name(), limit_s = STAGE_E_LIST_LIMIT.as_secs(), "listing prompts took too long; keeping the previous list");
                }
                self.fresh_for(List::Prompts, listed.ok().flatten());
            }
        }
    }

    /// Publishes a snapshot of the current connection's lists (always, even
    /// if unchanged: the control plane decides what really changed), once
    /// its tools are listed.
    fn publish(&mut self) {
        let Some(tools) = &self.tools else {
            return;
        };
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
            resources_json: self.lists.resources_json(),
            resource_templates_json: self.lists.templates_json(),
            prompts_json: self.lists.prompts_json(),
        };
        tracing::info!(
            server = %self.upstream.name(),
            tools = tools.len(),
            resources = self.lists.resources.len(),
            resource_templates = self.lists.templates.len(),
            prompts = self.lists.prompts.len(),
            "catalogue listed"
        );
        self.catalogue.send_replace(Some(snapshot));
    }
}
