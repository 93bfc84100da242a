//! The sidecar's side of `switchyard.v1.SidecarRegistry`: it registers with
//! the control plane and keeps the report stream open, sending `hello`, the
//! upstream status whenever it changes and a catalogue snapshot after every
//! (re)connection of the upstream server and every
//! `notifications/tools/list_changed`.
//!
//! Two tasks cooperate:
//! - [`watch_upstream`] follows the upstream session: it keeps it connected,
//!   re-lists tools after each connection and after list changes
//!   (coalesced, see [`crate::catalogue`]: at most one re-list per window),
//!   compiles the tools' output schemas into the shared [`Catalogue`],
//!   keeps a 2026-07-28 `subscriptions/listen` stream open for the list
//!   changes when the server declares `tools.listChanged`, and
//!   publishes the latest [`UpstreamStatus`] and [`CatalogueSnapshot`] on
//!   watch channels (an [`UpstreamView`]). It does not depend on the control
//!   plane, so a catalogue is ready as soon as a stream opens.
//! - [`report`] registers (retrying with exponential backoff, 0.5 s to
//!   10 s: the control plane may start later), opens the report stream,
//!   sends `hello`, the current status and catalogue, then every change.
//!   When the stream breaks it registers again and reopens it. Calls are
//!   served independently all the while.
//!
//! On shutdown the sidecar first announces it is leaving: after
//! [`Drain::start`] the report stream reports the state `draining` (and
//! keeps reporting it, whatever the upstream connection does), so the
//! control plane stops routing new calls here while the in-flight ones
//! finish (see `docs/sidecar.md`, "Shutdown").
//!
//! [`ControlPlaneInteractions`] asks sessions' users through the same
//! control plane (`SidecarRegistry.Interact`, `CompleteInteraction`).

use crate::catalogue::{Catalogue, Coalescer, DEFAULT_LIST_CHANGED_WINDOW};
use crate::elicitation::{CallContext, Interaction, InteractionHandler};
use crate::http_endpoints::Health;
use crate::upstream::{Era, Link, Upstream, UpstreamError};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use switchyard_common::tls::{AuthChannel, BearerToken};
use switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient;
use switchyard_proto::v1::{
    CatalogueSnapshot, CompleteInteractionRequest, Hello, InteractRequest, RegisterRequest,
    SidecarReport, UpstreamStatus, control_message, sidecar_report,
};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::task::AbortOnDropHandle;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// First delay between registration attempts.
pub const MIN_BACKOFF: Duration = Duration::from_millis(500);
/// Largest delay between registration attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Limit on one `Register` call and on opening the report stream.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// A failure talking to the control plane. Each one ends a registration
/// attempt or a report stream; [`report`] retries.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The control plane URL is not usable.
    #[error("control plane URL {url:?} is invalid: {source}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// No connection to the control plane.
    #[error("cannot connect to the control plane at {url}: {source}")]
    Connect {
        /// The URL.
        url: String,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// `Register` or `Report` failed.
    #[error("{rpc} failed: {source}")]
    Rpc {
        /// Which call.
        rpc: &'static str,
        /// The status.
        #[source]
        source: tonic::Status,
    },
    /// `Register` or opening `Report` took too long.
    #[error("{rpc} got no answer within {}s", RPC_TIMEOUT.as_secs())]
    Timeout {
        /// Which call.
        rpc: &'static str,
    },
    /// The control plane ended the report stream.
    #[error("the control plane ended the report stream")]
    StreamEnded,
}

/// How to reach the control plane and what to register.
#[derive(Debug, Clone)]
pub struct ControlSettings {
    /// The control plane's URL, `http://` or `https://`.
    pub control_plane: String,
    /// PEM CA certificate(s) to trust for an `https://` control plane.
    pub ca_pem: Option<Vec<u8>>,
    /// The client certificate (mTLS, `https://` only) and bearer token
    /// presented to the control plane (see [`switchyard_common::tls`]).
    pub credentials: switchyard_common::tls::ClientCredentials,
    /// The server this sidecar fronts.
    pub server: String,
    /// This sidecar's id.
    pub sidecar_id: String,
    /// Where `SidecarCalls` is served, as the control plane should dial it.
    pub call_address: String,
}

/// The state reported once the sidecar is shutting down (`UpstreamStatus.state`).
pub const DRAINING: &str = "draining";

/// The shutdown announcement shared by the shutdown path (which calls
/// [`Drain::start`]) and the report stream (which then reports the state
/// [`DRAINING`] instead of the upstream connection's). Cheap to clone; all
/// clones share one flag, and it is never cleared.
#[derive(Debug, Clone)]
pub struct Drain {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain::new()
    }
}

impl Drain {
    /// Not draining.
    pub fn new() -> Self {
        Drain {
            tx: Arc::new(watch::channel(false).0),
        }
    }

    /// Starts draining: the open report stream (and any later one) reports
    /// the state [`DRAINING`] from now on.
    pub fn start(&self) {
        self.tx.send_replace(true);
    }

    /// Whether [`Drain::start`] was called.
    pub fn is_draining(&self) -> bool {
        *self.tx.borrow()
    }

    fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}

/// The status to report: the upstream's, or [`DRAINING`] (keeping the
/// upstream's last error) once draining.
fn reported_status(upstream: UpstreamStatus, draining: bool) -> UpstreamStatus {
    if draining {
        UpstreamStatus {
            state: DRAINING.into(),
            last_error: upstream.last_error,
        }
    } else {
        upstream
    }
}

/// The latest upstream status and catalogue, as published by
/// [`watch_upstream`].
#[derive(Debug, Clone)]
pub struct UpstreamView {
    /// The connection state: "connecting", "connected" or "down" (the
    /// report stream turns it into [`DRAINING`] on shutdown, see [`Drain`]).
    pub status: watch::Receiver<UpstreamStatus>,
    /// The catalogue of the current connection; `None` while disconnected.
    pub catalogue: watch::Receiver<Option<CatalogueSnapshot>>,
    /// Where effective hints pushed by the control plane are kept (shared
    /// with the call service).
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

/// Registers and keeps the report stream open, forever (abort the task to
/// stop). `health` learns whether the sidecar is registered.
pub async fn report(settings: ControlSettings, view: UpstreamView, health: Arc<Health>) {
    report_with(settings, view, health, None, Drain::new()).await
}

/// [`report`], handing background calls the control plane asks this
/// sidecar to adopt (`ControlMessage.adopt`) to `tasks` (stage B), and
/// reporting the state [`DRAINING`] once `drain` is started.
pub async fn report_with(
    settings: ControlSettings,
    mut view: UpstreamView,
    health: Arc<Health>,
    tasks: Option<crate::tasks::Tasks>,
    drain: Drain,
) {
    let mut backoff = MIN_BACKOFF;
    let mut draining = drain.subscribe();
    loop {
        let outcome = session(
            &settings,
            &mut view,
            &health,
            &mut backoff,
            tasks.as_ref(),
            &mut draining,
        )
        .await;
        health.set_registered(false);
        match outcome {
            Ok(()) => return,
            Err(e) => {
                let error = with_causes(&e);
                tracing::warn!(control_plane = %settings.control_plane, %error, retry_in_ms = backoff.as_millis() as u64, "control plane unavailable");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// `e` with the causes its message does not already include.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    text
}

fn endpoint(settings: &ControlSettings) -> Result<Endpoint, ControlError> {
    let url_error = |source| ControlError::Url {
        url: settings.control_plane.clone(),
        source,
    };
    let mut endpoint = Endpoint::from_shared(settings.control_plane.clone())
        .map_err(url_error)?
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(15))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    if settings.control_plane.starts_with("https://") {
        let mut tls = ClientTlsConfig::new().with_enabled_roots();
        if let Some(pem) = &settings.ca_pem {
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        if let Some(identity) = &settings.credentials.identity {
            tls = tls.identity(identity.to_tonic());
        }
        endpoint = endpoint.tls_config(tls).map_err(url_error)?;
    }
    Ok(endpoint)
}

/// A `SidecarRegistry` client for `settings.control_plane`, connected
/// lazily (and again after a failure, so a request retried after a
/// replica went away reaches another one), sending the bearer token.
/// Errors: the URL or TLS settings are unusable.
pub fn registry_client(
    settings: &ControlSettings,
) -> Result<SidecarRegistryClient<AuthChannel>, ControlError> {
    let channel = endpoint(settings)?.connect_lazy();
    Ok(
        SidecarRegistryClient::with_interceptor(channel, bearer(settings))
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024),
    )
}

/// Sends the configured bearer token on every request.
fn bearer(settings: &ControlSettings) -> BearerToken {
    BearerToken::new(settings.credentials.token.as_deref())
}

async fn with_timeout<T>(
    rpc: &'static str,
    f: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, ControlError> {
    match tokio::time::timeout(RPC_TIMEOUT, f).await {
        Ok(r) => r.map_err(|source| ControlError::Rpc { rpc, source }),
        Err(_) => Err(ControlError::Timeout { rpc }),
    }
}

/// One registration and report stream; returns `Ok` only when the upstream
/// watcher is gone (shutting down).
async fn session(
    settings: &ControlSettings,
    view: &mut UpstreamView,
    health: &Health,
    backoff: &mut Duration,
    tasks: Option<&crate::tasks::Tasks>,
    draining: &mut watch::Receiver<bool>,
) -> Result<(), ControlError> {
    let channel: Channel =
        endpoint(settings)?
            .connect()
            .await
            .map_err(|source| ControlError::Connect {
                url: settings.control_plane.clone(),
                source,
            })?;
    let mut client = SidecarRegistryClient::with_interceptor(channel, bearer(settings));
    let registered = with_timeout(
        "Register",
        client.register(RegisterRequest {
            server: settings.server.clone(),
            sidecar_id: settings.sidecar_id.clone(),
            call_address: settings.call_address.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
        }),
    )
    .await?
    .into_inner();
    tracing::info!(control_plane = %settings.control_plane, lease_ttl_s = registered.lease_ttl_seconds, "registered");

    let (tx, rx) = futures::channel::mpsc::unbounded::<SidecarReport>();
    let send = |report: sidecar_report::Report| {
        tx.unbounded_send(SidecarReport {
            report: Some(report),
        })
        .map_err(|_| ControlError::StreamEnded)
    };
    send(sidecar_report::Report::Hello(Hello {
        server: settings.server.clone(),
        sidecar_id: settings.sidecar_id.clone(),
    }))?;
    let mut inbound = with_timeout("Report", client.report(rx))
        .await?
        .into_inner();
    health.set_registered(true);
    *backoff = MIN_BACKOFF;

    let status = view.status.borrow_and_update().clone();
    let is_draining = *draining.borrow_and_update();
    // A catalogue makes the control plane count the sidecar as connected:
    // send it before the status, which may say `draining`.
    let catalogue = view.catalogue.borrow_and_update().clone();
    if let Some(c) = catalogue {
        send(sidecar_report::Report::Catalogue(c))?;
    }
    send(sidecar_report::Report::Status(reported_status(
        status,
        is_draining,
    )))?;
    let mut drain_open = true;
    loop {
        tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(m)) => match m.message {
                    Some(control_message::Message::Welcome(w)) => {
                        tracing::debug!(lease_ttl_s = w.lease_ttl_seconds, "welcome");
                    }
                    Some(control_message::Message::ToolSettings(s)) => {
                        tracing::info!(tools = s.hints.len(), "effective tool hints received");
                        view.settings.set_hints(s.hints);
                    }
                    Some(control_message::Message::Adopt(a)) => {
                        tracing::info!(calls = a.calls.len(), "background calls to adopt");
                        match tasks {
                            Some(tasks) => tasks.adopt(a.calls),
                            None => tracing::warn!("no tasks machinery here; not adopting"),
                        }
                    }
                    None => {}
                },
                Ok(None) => return Err(ControlError::StreamEnded),
                Err(source) => return Err(ControlError::Rpc { rpc: "Report", source }),
            },
            changed = view.status.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                let status = view.status.borrow_and_update().clone();
                send(sidecar_report::Report::Status(reported_status(status, *draining.borrow())))?;
            }
            changed = draining.changed(), if drain_open => {
                if changed.is_err() {
                    // Every `Drain` is gone: nobody can start draining now.
                    drain_open = false;
                } else if *draining.borrow_and_update() {
                    tracing::info!(control_plane = %settings.control_plane, "reporting draining");
                    let status = view.status.borrow().clone();
                    send(sidecar_report::Report::Status(reported_status(status, true)))?;
                }
            }
            changed = view.catalogue.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                let catalogue = view.catalogue.borrow_and_update().clone();
                if let Some(c) = catalogue {
                    send(sidecar_report::Report::Catalogue(c))?;
                }
            }
        }
    }
}

/// Attempts of one `CompleteInteraction` while the control plane is
/// unavailable.
const COMPLETE_ATTEMPTS: u32 = 5;

/// Asks sessions' users through the control plane: `Interact` waits for
/// the answer (the control plane shows the card and times it out); the
/// same interaction id is sent again, after a backoff, while the control
/// plane is unavailable (a replica went away), until the relay's own
/// interaction timeout ends the wait. Other errors answer `cancel`.
#[derive(Debug, Clone)]
pub struct ControlPlaneInteractions {
    client: SidecarRegistryClient<AuthChannel>,
}

impl ControlPlaneInteractions {
    /// A handler talking to `settings.control_plane` (connected lazily,
    /// reconnected as needed).
    pub fn new(settings: &ControlSettings) -> Result<Self, ControlError> {
        let channel = endpoint(settings)?.connect_lazy();
        Ok(ControlPlaneInteractions {
            client: SidecarRegistryClient::with_interceptor(channel, bearer(settings))
                .max_decoding_message_size(64 * 1024 * 1024)
                .max_encoding_message_size(64 * 1024 * 1024),
        })
    }
}

/// Whether a failed call to the control plane is worth repeating.
fn retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    )
}

impl InteractionHandler for ControlPlaneInteractions {
    fn interact(&self, interaction: Interaction) -> BoxFuture<'static, Value> {
        let mut client = self.client.clone();
        Box::pin(async move {
            let request = InteractRequest {
                interaction_id: interaction.id.clone(),
                server: interaction.server.clone(),
                session_id: interaction.context.session_id.clone(),
                run_id: interaction.context.run_id.clone(),
                tool: interaction.context.tool.clone(),
                kind: interaction.kind.as_str().into(),
                params_json: interaction.params.to_string(),
            };
            let mut backoff = MIN_BACKOFF;
            loop {
                match client.interact(request.clone()).await {
                    Ok(answer) => {
                        let text = answer.into_inner().result_json;
                        return match serde_json::from_str::<Value>(&text) {
                            Ok(v) if v.is_object() => v,
                            _ => {
                                tracing::warn!(interaction = %interaction.id, answer = %text, "the control plane's answer is not an ElicitResult; answering cancel");
                                json!({"action": "cancel"})
                            }
                        };
                    }
                    Err(status) if retryable(&status) => {
                        tracing::warn!(interaction = %interaction.id, error = %with_causes(&status), retry_in_ms = backoff.as_millis() as u64, "control plane unavailable; asking again");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                    Err(status) => {
                        tracing::warn!(interaction = %interaction.id, code = ?status.code(), error = %status.message(), "Interact failed; answering cancel");
                        return json!({"action": "cancel"});
                    }
                }
            }
        })
    }

    fn complete(
        &self,
        server: &str,
        context: &CallContext,
        elicitation_id: &str,
    ) -> BoxFuture<'static, ()> {
        let mut client = self.client.clone();
        let request = CompleteInteractionRequest {
            server: server.to_owned(),
            session_id: context.session_id.clone(),
            elicitation_id: elicitation_id.to_owned(),
        };
        Box::pin(async move {
            let mut backoff = MIN_BACKOFF;
            for attempt in 1..=COMPLETE_ATTEMPTS {
                match with_timeout(
                    "CompleteInteraction",
                    client.complete_interaction(request.clone()),
                )
                .await
                {
                    Ok(r) => {
                        tracing::debug!(elicitation_id = %request.elicitation_id, found = r.into_inner().found, "completion reported");
                        return;
                    }
                    Err(ControlError::Rpc { source, .. }) if !retryable(&source) => {
                        tracing::warn!(elicitation_id = %request.elicitation_id, error = %source.message(), "CompleteInteraction failed");
                        return;
                    }
                    Err(e) if attempt < COMPLETE_ATTEMPTS => {
                        tracing::warn!(elicitation_id = %request.elicitation_id, error = %with_causes(&e), "CompleteInteraction failed; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                    Err(e) => {
                        tracing::warn!(elicitation_id = %request.elicitation_id, error = %with_causes(&e), "CompleteInteraction failed; giving up");
                    }
                }
            }
        })
    }
}
