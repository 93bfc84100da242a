//! The sidecar registry (`switchyard.v1.SidecarRegistry`): registration
//! under a lease, and the report stream that keeps it alive. When the
//! stream ends (the sidecar stopped, crashed or lost its connection), the
//! lease is revoked at once; if this replica dies instead, the lease
//! expires within its TTL. Either way the server is marked down and calls
//! to it fail fast. A store outage (an etcd election, a timeout) does not
//! drop a live sidecar: a failed keep-alive is tried again at the next
//! ticks, and a report the store could not take is tried again, within the
//! lease TTL; only a lease that is gone (not found, or not renewed for a
//! whole TTL) ends the stream, without a revoke, and the sidecar registers
//! again. `Interact` and `CompleteInteraction` carry a server's
//! elicitations to the session's user ([`crate::interactions`]).
//! `UpdateBackgroundCall` stores a background call's changes, and the
//! report stream carries `adopt` messages for the tasks a sidecar is to
//! poll ([`crate::background`]). A sidecar that reports the state
//! `draining` (it got SIGTERM) keeps its registration until its stream
//! ends, but gets no new calls ([`crate::call::route`]). A sidecar credential
//! bound to servers (`[[auth.tokens]] servers`) is refused PERMISSION_DENIED
//! on every RPC here that names another server.

use crate::ControlPlane;
use crate::api::admin::spec_to_pb;
use crate::api::engine::registry_status;
use crate::auth::check_server;
use crate::call::route::DRAINING;
use crate::model::{SidecarRecord, now_ms, sidecar_key};
use crate::registry::RegistryError;
use crate::state::Change;
use crate::store::{Store, StoreError};
use serde_json::Value;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::sidecar_registry_server::SidecarRegistry;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// The service.
#[derive(Debug, Clone)]
pub struct SidecarApi {
    cp: Arc<ControlPlane>,
}

impl SidecarApi {
    /// Serves `cp`.
    pub fn new(cp: Arc<ControlPlane>) -> Self {
        SidecarApi { cp }
    }
}

type ControlStream =
    Pin<Box<dyn futures::Stream<Item = Result<pb::ControlMessage, Status>> + Send>>;

fn parse_json(field: &str, text: &str) -> Result<Value, Status> {
    if text.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text)
        .map_err(|e| Status::invalid_argument(format!("{field}: not valid JSON: {e}")))
}

#[tonic::async_trait]
impl SidecarRegistry for SidecarApi {
    async fn update_background_call(
        &self,
        req: Request<pb::UpdateBackgroundCallRequest>,
    ) -> Result<Response<pb::BackgroundCall>, Status> {
        let Some(server) = req.get_ref().call.as_ref().map(|c| c.server.clone()) else {
            return Err(Status::invalid_argument("call: required"));
        };
        check_server(&req, &self.cp.metrics, &server)?;
        let call = req
            .into_inner()
            .call
            .ok_or_else(|| Status::invalid_argument("call: required"))?;
        let incoming = crate::background::BackgroundRecord::from_pb(call);
        let stored = self
            .cp
            .background
            .upsert(&self.cp.state.snapshot(), incoming)
            .await?;
        if stored.is_terminal() {
            // A finished call asks nothing more: its open cards go.
            crate::background::end_cards(&self.cp, &stored).await;
        }
        Ok(Response::new(stored.to_pb()))
    }

    async fn register(
        &self,
        req: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        check_server(&req, &self.cp.metrics, &req.get_ref().server)?;
        let r = req.into_inner();
        if r.sidecar_id.is_empty()
            || r.sidecar_id.len() > 256
            || !r
                .sidecar_id
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'/')
        {
            return Err(Status::invalid_argument(
                "sidecar_id: 1 to 256 visible ASCII characters, without '/'",
            ));
        }
        match r.call_address.parse::<http::Uri>() {
            Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => {}
            _ => {
                return Err(Status::invalid_argument(format!(
                    "call_address: {:?} is not an http(s)://host:port URL",
                    r.call_address.chars().take(200).collect::<String>()
                )));
            }
        }
        if r.version.len() > 256 {
            return Err(Status::invalid_argument("version: at most 256 characters"));
        }
        if !r.call_token.is_empty()
            && (!(16..=256).contains(&r.call_token.len())
                || !r.call_token.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(Status::invalid_argument(
                "call_token: 16 to 256 visible ASCII characters",
            ));
        }
        let rec = SidecarRecord {
            server: r.server.clone(),
            sidecar_id: r.sidecar_id.clone(),
            call_address: r.call_address,
            version: r.version,
            registered_at_ms: now_ms(),
            upstream_state: "connecting".into(),
            last_error: String::new(),
            call_token: r.call_token,
        };
        let ttl = self.cp.lease_ttl;
        self.cp
            .registry
            .register_sidecar(rec, ttl)
            .await
            .map_err(registry_status)?;
        tracing::info!(server = %r.server, sidecar = %r.sidecar_id, "sidecar registered");
        let spec = self
            .cp
            .state
            .snapshot()
            .servers
            .get(&r.server)
            .map(|s| spec_to_pb(&s.spec));
        Ok(Response::new(pb::RegisterResponse {
            lease_ttl_seconds: ttl.as_secs() as u32,
            spec,
        }))
    }

    async fn interact(
        &self,
        req: Request<pb::InteractRequest>,
    ) -> Result<Response<pb::InteractResponse>, Status> {
        check_server(&req, &self.cp.metrics, &req.get_ref().server)?;
        let r = req.into_inner();
        let request = crate::interactions::InteractRequest {
            interaction_id: r.interaction_id,
            server: r.server,
            session_id: r.session_id,
            run_id: r.run_id,
            tool: r.tool,
            kind: r.kind,
            params_json: r.params_json,
            key: r.key,
            together_id: r.together_id,
            together_count: r.together_count,
        };
        let result = self.cp.interactions.interact(&request).await?;
        Ok(Response::new(pb::InteractResponse {
            result_json: result.to_string(),
        }))
    }

    async fn complete_interaction(
        &self,
        req: Request<pb::CompleteInteractionRequest>,
    ) -> Result<Response<pb::CompleteInteractionResponse>, Status> {
        check_server(&req, &self.cp.metrics, &req.get_ref().server)?;
        let r = req.into_inner();
        // The call that asked a question ended unanswered: its card goes.
        if !r.ended_interaction_id.is_empty() {
            let found = self
                .cp
                .interactions
                .end_for_call(&r.server, &r.session_id, &r.ended_interaction_id)
                .await?;
            return Ok(Response::new(pb::CompleteInteractionResponse { found }));
        }
        let found = self
            .cp
            .interactions
            .complete(&r.server, &r.session_id, &r.elicitation_id)
            .await?;
        Ok(Response::new(pb::CompleteInteractionResponse { found }))
    }

    type ReportStream = ControlStream;

    async fn report(
        &self,
        req: Request<Streaming<pb::SidecarReport>>,
    ) -> Result<Response<ControlStream>, Status> {
        let caller = req.extensions().get::<crate::auth::Caller>().cloned();
        let anonymous = req.extensions().get::<crate::auth::Anonymous>().cloned();
        let mut inbound = req.into_inner();
        let Some(first) = inbound.message().await? else {
            return Err(Status::invalid_argument("report stream: empty"));
        };
        let Some(pb::sidecar_report::Report::Hello(hello)) = first.report else {
            return Err(Status::invalid_argument(
                "report stream: the first message must be hello",
            ));
        };
        // The hello names the server every later report is about.
        let mut hello_req = Request::new(());
        if let Some(c) = caller {
            hello_req.extensions_mut().insert(c);
        }
        if let Some(a) = anonymous {
            hello_req.extensions_mut().insert(a);
        }
        check_server(&hello_req, &self.cp.metrics, &hello.server)?;
        let key = sidecar_key(&hello.server, &hello.sidecar_id);
        let kv = self
            .cp
            .registry
            .store()
            .get(&key)
            .await
            .map_err(|e| Status::unavailable(format!("store unavailable: {e}")))?
            .ok_or_else(|| {
                Status::failed_precondition(format!(
                    "sidecar {} of {} is not registered (or its lease expired): register first",
                    hello.sidecar_id, hello.server
                ))
            })?;
        let lease = kv
            .lease
            .ok_or_else(|| Status::internal(format!("{key} has no lease")))?;
        let mut record: SidecarRecord = serde_json::from_slice(&kv.value)
            .map_err(|e| Status::internal(format!("{key} does not parse: {e}")))?;

        let (tx, rx) = tokio::sync::mpsc::channel(8);
        let ttl = self.cp.lease_ttl;
        let _ = tx
            .send(Ok(pb::ControlMessage {
                message: Some(pb::control_message::Message::Welcome(pb::Welcome {
                    lease_ttl_seconds: ttl.as_secs() as u32,
                })),
            }))
            .await;
        let cp = self.cp.clone();
        tokio::spawn(async move {
            let server = hello.server.clone();
            // Adopted background tasks (stage B) are sent on this stream.
            let _adoption = cp
                .background
                .register_stream(&server, &hello.sidecar_id, tx.clone());
            let period = (ttl / 3).max(Duration::from_millis(500));
            let mut keepalive = tokio::time::interval(period);
            keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            keepalive.tick().await;
            // The lease was granted or renewed at most this long ago.
            let mut kept_alive_at = Instant::now();
            // A report the store could not take yet, tried again.
            let mut pending: Option<Pending> = None;
            // When the last `polling` report was looked at.
            let mut polled_at: Option<Instant> = None;
            // Whether the registration goes when the loop ends: not when
            // its lease is already gone or the store is out of reach.
            let mut revoke = true;
            // Push the effective hints now and whenever they change.
            let mut changes = cp.state.subscribe();
            let mut pushed = tool_settings(&cp.state.snapshot(), &server);
            let _ = tx.send(Ok(settings_message(pushed.clone()))).await;
            cp.background
                .on_hello(&cp, &server, &hello.sidecar_id, &tx)
                .await;
            // Stage D: an oauth server's sidecars get its access token now
            // and at every change.
            let oauth_url = cp.state.snapshot().servers.get(&server).and_then(|r| {
                (r.spec.auth_kind() == switchyard_common::server_spec::AuthKind::OAuth).then(|| {
                    // Its URL opened; one that does not open matches no
                    // tokens (the server's status says why).
                    cp.oauth.server_url(&r.spec).unwrap_or_else(|problem| {
                        tracing::warn!(%server, %problem, "the server's URL does not open: its sidecars get no access token");
                        String::new()
                    })
                })
            });
            if let Some(url) = oauth_url {
                cp.oauth.push_to(server.clone(), url, tx.clone());
            }
            loop {
                tokio::select! {
                    change = changes.recv() => {
                        // A deleted session's upstream connection is closed
                        // by every sidecar that keeps one.
                        if let Ok(Change::SessionDeleted(session_id)) = &change {
                            let ended = pb::ControlMessage {
                                message: Some(pb::control_message::Message::SessionEnded(
                                    pb::SessionEnded { session_id: session_id.clone() },
                                )),
                            };
                            if tx.send(Ok(ended)).await.is_err() {
                                break;
                            }
                            continue;
                        }
                        let relevant = match &change {
                            Ok(Change::ToolsChanged { server: s, .. })
                            | Ok(Change::ToolSettingsChanged { server: s }) => *s == server,
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                            _ => false,
                        };
                        if relevant {
                            let now = tool_settings(&cp.state.snapshot(), &server);
                            if now != pushed {
                                pushed = now;
                                if tx.send(Ok(settings_message(pushed.clone()))).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    // While a report waits for the store, the next ones wait
                    // in the stream (in order, and HTTP/2 flow control
                    // holds the sidecar back).
                    msg = inbound.message(), if pending.is_none() => match msg {
                        Ok(Some(report)) => {
                            // `polling` costs store reads: at most one a
                            // second is looked at (a sidecar sends one a
                            // lease TTL).
                            if matches!(report.report, Some(pb::sidecar_report::Report::Polling(_))) {
                                // Not logged: a flood would flood the log.
                                if polled_at.is_some_and(|at: Instant| at.elapsed() < MIN_POLLING_GAP) {
                                    continue;
                                }
                                polled_at = Some(Instant::now());
                            }
                            let outcome = handle_report(&cp, &server, &mut record, lease, &report, &tx).await;
                            match settle(outcome, &server, &hello.sidecar_id, None, ttl) {
                                Next::Done => {}
                                Next::Retry(delay) => {
                                    let now = Instant::now();
                                    pending = Some(Pending { report, since: now, delay, at: now + delay });
                                }
                                Next::End { status, revoke: r } => {
                                    revoke = r;
                                    let _ = tx.send(Err(status)).await;
                                    break;
                                }
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::info!(%server, sidecar = %hello.sidecar_id, error = %e, "report stream broke");
                            break;
                        }
                    },
                    _ = tokio::time::sleep_until(pending.as_ref().map_or_else(Instant::now, |p| p.at)), if pending.is_some() => {
                        let Some(p) = pending.take() else { continue };
                        let outcome = handle_report(&cp, &server, &mut record, lease, &p.report, &tx).await;
                        match settle(outcome, &server, &hello.sidecar_id, Some(p.since), ttl) {
                            Next::Done => {
                                tracing::info!(%server, sidecar = %hello.sidecar_id, "the store took the report on a later try");
                            }
                            Next::Retry(_) => {
                                let delay = (p.delay * 2).min(period);
                                pending = Some(Pending { delay, at: Instant::now() + delay, ..p });
                            }
                            Next::End { status, revoke: r } => {
                                revoke = r;
                                let _ = tx.send(Err(status)).await;
                                break;
                            }
                        }
                    }
                    _ = keepalive.tick() => {
                        // One attempt takes at most a tick, so a slow store
                        // cannot hold the next one back past the lease.
                        let error = match tokio::time::timeout(period, cp.registry.keep_alive(lease)).await {
                            Ok(Ok(())) => {
                                kept_alive_at = Instant::now();
                                continue;
                            }
                            Ok(Err(e)) if lease_gone(&e) => {
                                // The lease expired or was revoked: the
                                // sidecar registers again (a new lease).
                                tracing::warn!(%server, sidecar = %hello.sidecar_id, error = %e, "sidecar lease gone; closing the stream so that it registers again");
                                let _ = tx.send(Err(Status::unavailable(format!("lease lost: {e}")))).await;
                                revoke = false;
                                break;
                            }
                            Ok(Err(e)) => e.to_string(),
                            Err(_) => format!("store: keep_alive lease {}: no answer within {period:?}", lease.0),
                        };
                        if kept_alive_at.elapsed() >= ttl {
                            // No renewal for a whole TTL: as far as this
                            // replica can tell, the lease has expired.
                            tracing::warn!(%server, sidecar = %hello.sidecar_id, %error, "no lease keep-alive succeeded for the lease TTL; closing the stream so that the sidecar registers again");
                            let _ = tx.send(Err(Status::unavailable(format!("lease lost: not renewed for {ttl:?}: {error}")))).await;
                            revoke = false;
                            break;
                        }
                        // A store outage (an etcd election, a timeout): the
                        // lease may well be alive; the next tick tries again.
                        tracing::warn!(%server, sidecar = %hello.sidecar_id, %error, "lease keep-alive failed; trying again at the next tick");
                    }
                    _ = tx.closed() => break,
                    _ = cp.shutdown.cancelled() => {
                        // This replica stops, not the sidecar: it stays
                        // registered until it registers again (with another
                        // replica) or its lease expires.
                        let _ = tx.try_send(Err(Status::unavailable("the control plane replica is shutting down")));
                        return;
                    }
                }
            }
            if !revoke {
                // Its lease is gone, or the store could not be reached
                // for a TTL: the registration is left to its lease.
                return;
            }
            tracing::info!(%server, sidecar = %hello.sidecar_id, "sidecar gone; revoking its registration");
            if let Err(e) = cp.registry.revoke(lease).await {
                tracing::debug!(error = %e, "revoke failed (lease already gone?)");
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// The effective hints (overrides applied) of `server`'s tools.
fn tool_settings(snap: &crate::state::Snapshot, server: &str) -> pb::ToolSettings {
    let mut hints = std::collections::HashMap::new();
    if let Some(cat) = snap.catalogues.get(server) {
        for def in &cat.tools {
            let Some(tool) = def.get("name").and_then(Value::as_str) else {
                continue;
            };
            let ov = snap
                .hint_overrides
                .get(&(server.to_owned(), tool.to_owned()));
            hints.insert(
                tool.to_owned(),
                crate::tools::policy::effective_hints(def, ov).to_pb(),
            );
        }
    }
    pb::ToolSettings { hints }
}

fn settings_message(settings: pb::ToolSettings) -> pb::ControlMessage {
    pb::ControlMessage {
        message: Some(pb::control_message::Message::ToolSettings(settings)),
    }
}

/// A report the store could not take yet: tried again after `delay`
/// (doubling up to the keep-alive period), until the lease TTL has passed
/// since its first try.
struct Pending {
    report: pb::SidecarReport,
    since: Instant,
    delay: Duration,
    at: Instant,
}

/// Why a report was not taken.
#[derive(Debug)]
enum ReportError {
    /// The report is wrong (or names what is not there): the stream ends
    /// with this status and the registration goes.
    Bad(Status),
    /// The store could not take it now (unreachable, timed out, an etcd
    /// election, contention): the report is tried again.
    Unavailable(RegistryError),
    /// The registration's lease is gone (expired or revoked): the stream
    /// ends and the sidecar registers again.
    LeaseGone(RegistryError),
}

impl From<Status> for ReportError {
    fn from(status: Status) -> Self {
        ReportError::Bad(status)
    }
}

impl From<RegistryError> for ReportError {
    fn from(e: RegistryError) -> Self {
        match &e {
            _ if lease_gone(&e) => ReportError::LeaseGone(e),
            RegistryError::Store(StoreError::InvalidArgument { .. }) => {
                ReportError::Bad(registry_status(e))
            }
            RegistryError::Store(_) | RegistryError::Contention(_) => ReportError::Unavailable(e),
            _ => ReportError::Bad(registry_status(e)),
        }
    }
}

/// Whether `e` says the lease no longer exists.
fn lease_gone(e: &RegistryError) -> bool {
    matches!(e, RegistryError::Store(StoreError::LeaseNotFound { .. }))
}

/// What the report stream does after a report was handled.
enum Next {
    /// Taken.
    Done,
    /// Try the report again after this delay.
    Retry(Duration),
    /// End the stream with `status`; `revoke`: drop the registration.
    End { status: Status, revoke: bool },
}

/// Decides what follows a report's `outcome`, logging it. `since`: when
/// the report was first tried, for a retry.
///
/// Retry: a report the store could not take is tried again, within the
/// lease TTL from its first try. This is safe because every report is a
/// whole state (a status, a catalogue snapshot) written by put or
/// compare-and-swap, so writing it twice stores the same; and the stream
/// reads no later report meanwhile, so they stay in order. Past the TTL
/// the stream ends without revoking the lease (the store is out of reach
/// anyway) and the sidecar registers again.
fn settle(
    outcome: Result<(), ReportError>,
    server: &str,
    sidecar: &str,
    since: Option<Instant>,
    ttl: Duration,
) -> Next {
    match outcome {
        Ok(()) => Next::Done,
        Err(ReportError::Bad(status)) => {
            tracing::warn!(%server, %sidecar, error = %status, "bad report from sidecar");
            Next::End {
                status,
                revoke: true,
            }
        }
        Err(ReportError::LeaseGone(e)) => {
            tracing::warn!(%server, %sidecar, error = %e, "sidecar lease gone; closing the stream so that it registers again");
            Next::End {
                status: Status::unavailable(format!("lease lost: {e}")),
                revoke: false,
            }
        }
        Err(ReportError::Unavailable(e)) => {
            let since = since.unwrap_or_else(Instant::now);
            if since.elapsed() >= ttl {
                tracing::warn!(%server, %sidecar, error = %e, "the store did not take the report within the lease TTL; closing the stream");
                return Next::End {
                    status: registry_status(e),
                    revoke: false,
                };
            }
            tracing::warn!(%server, %sidecar, error = %e, "the store did not take the report; trying again");
            Next::Retry(FIRST_RETRY)
        }
    }
}

/// The least time between two `polling` reports of one stream that are
/// looked at; those sent sooner are ignored.
const MIN_POLLING_GAP: Duration = Duration::from_secs(1);

/// The first delay before a report is tried again.
const FIRST_RETRY: Duration = Duration::from_millis(100);

async fn handle_report(
    cp: &ControlPlane,
    server: &str,
    record: &mut SidecarRecord,
    lease: crate::store::LeaseId,
    report: &pb::SidecarReport,
    tx: &tokio::sync::mpsc::Sender<Result<pb::ControlMessage, Status>>,
) -> Result<(), ReportError> {
    match &report.report {
        Some(pb::sidecar_report::Report::Catalogue(c)) => {
            if c.server != server {
                return Err(Status::invalid_argument(format!(
                    "catalogue.server {:?} is not this stream's server {server:?}",
                    c.server
                ))
                .into());
            }
            let tools = c
                .tools_json
                .iter()
                .enumerate()
                .map(|(i, t)| parse_json(&format!("catalogue.tools_json[{i}]"), t))
                .collect::<Result<Vec<_>, _>>()?;
            let mut names = std::collections::HashSet::new();
            for (i, t) in tools.iter().enumerate() {
                let name = t.get("name").and_then(Value::as_str).unwrap_or("");
                if !t.is_object() || name.is_empty() {
                    return Err(Status::invalid_argument(format!(
                        "catalogue.tools_json[{i}]: a tool definition is an object with a non-empty string `name`"
                    )).into());
                }
                if !names.insert(name) {
                    return Err(Status::invalid_argument(format!(
                        "catalogue.tools_json[{i}]: tool name {name:?} appears twice"
                    ))
                    .into());
                }
            }
            let capabilities = parse_json("catalogue.capabilities_json", &c.capabilities_json)?;
            if !(capabilities.is_object() || capabilities.is_null()) {
                return Err(Status::invalid_argument(
                    "catalogue.capabilities_json: must be a JSON object",
                )
                .into());
            }
            let server_info = parse_json("catalogue.server_info_json", &c.server_info_json)?;
            if !(server_info.is_object() || server_info.is_null()) {
                return Err(Status::invalid_argument(
                    "catalogue.server_info_json: must be a JSON object",
                )
                .into());
            }
            // A catalogue means the upstream is connected, unless the
            // sidecar already said it is draining (shutting down): that
            // state stays until the stream ends. Recorded before the
            // catalogue, so an engine woken by the catalogue's
            // `tools.changed` finds the server's tools offered.
            // The record changes once stored: a report tried again writes
            // it again.
            if record.upstream_state != "connected" && record.upstream_state != DRAINING {
                let mut connected = record.clone();
                connected.upstream_state = "connected".into();
                connected.last_error.clear();
                cp.registry.update_sidecar(&connected, lease).await?;
                *record = connected;
            }
            let changed = cp
                .registry
                .update_catalogue(
                    server,
                    tools,
                    capabilities,
                    server_info,
                    c.protocol_version.clone(),
                )
                .await?;
            tracing::info!(%server, changed, "catalogue received");
            // Stage E: the server's resources, templates and prompts.
            let lists = [
                entries(server, "resources_json", &c.resources_json, "uri"),
                entries(
                    server,
                    "resource_templates_json",
                    &c.resource_templates_json,
                    "uriTemplate",
                ),
                entries(server, "prompts_json", &c.prompts_json, "name"),
            ];
            let had = cp.state.snapshot().resource_catalogues.contains_key(server);
            if had || lists.iter().any(|l| !l.is_empty()) {
                let (resources, prompts) =
                    cp.registry.update_resource_catalogue(server, lists).await?;
                tracing::info!(%server, resources_changed = resources, prompts_changed = prompts, "resources and prompts received");
            }
        }
        Some(pb::sidecar_report::Report::TokenRejected(t)) => {
            cp.oauth
                .token_rejected(server, t.generation, t.http_status, &t.www_authenticate)
                .await;
        }
        Some(pb::sidecar_report::Report::Status(s)) => {
            let mut next = record.clone();
            next.upstream_state = s.state.clone();
            next.last_error = bounded(s.last_error.clone(), MAX_LAST_ERROR_BYTES);
            cp.registry.update_sidecar(&next, lease).await?;
            if next.upstream_state == DRAINING && record.upstream_state != DRAINING {
                tracing::info!(%server, sidecar = %record.sidecar_id, "sidecar draining; routing new calls elsewhere");
            }
            *record = next;
        }
        Some(pb::sidecar_report::Report::Polling(p)) => {
            let release = cp
                .background
                .not_polled_by(cp, server, &record.sidecar_id, &p.ids)
                .await;
            if !release.is_empty() {
                tracing::info!(%server, sidecar = %record.sidecar_id, calls = release.len(), "telling the sidecar to stop polling background calls it does not own");
                let message = pb::ControlMessage {
                    message: Some(pb::control_message::Message::Release(
                        pb::BackgroundCallIds { ids: release },
                    )),
                };
                // A stream that is gone ends the loop at its next read.
                let _ = tx.send(Ok(message)).await;
            }
        }
        Some(pb::sidecar_report::Report::Hello(_)) => {
            return Err(Status::invalid_argument("hello may only be the first message").into());
        }
        None => {}
    }
    Ok(())
}

/// The entries of a stage E list of `server` (`field` of its catalogue
/// snapshot), each an object with a non-empty string `key` (`uri`,
/// `uriTemplate`, `name`). An entry that is not is left out, with a
/// warning naming the server, the field and the index: one bad entry of
/// the server's does not cost the others.
fn entries(server: &str, field: &str, texts: &[String], key: &str) -> Vec<Value> {
    texts
        .iter()
        .enumerate()
        .filter_map(|(i, text)| match serde_json::from_str::<Value>(text) {
            Ok(v) if v.get(key).and_then(Value::as_str).is_some_and(|k| !k.is_empty()) => Some(v),
            Ok(_) => {
                tracing::warn!(%server, "catalogue.{field}[{i}]: not an object with a non-empty string `{key}`; left out");
                None
            }
            Err(e) => {
                tracing::warn!(%server, error = %e, "catalogue.{field}[{i}]: not JSON; left out");
                None
            }
        })
        .collect()
}

/// Longest `UpstreamStatus.last_error` kept, in bytes: the text goes into
/// the sidecar's store record (etcd refuses values over 1.5 MiB), and a
/// sidecar must not be able to break its own report stream with it.
pub const MAX_LAST_ERROR_BYTES: usize = 4096;

/// `text` cut to at most `max` bytes at a character boundary, with a note
/// of how much was left out.
fn bounded(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let total = text.len();
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!("... ({} more bytes)", total - cut));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_errors_are_cut_at_a_character_boundary() {
        assert_eq!(bounded("short".into(), 10), "short");
        let long = "é".repeat(3000); // 6000 bytes
        let cut = bounded(long, MAX_LAST_ERROR_BYTES);
        assert!(cut.starts_with(&"é".repeat(2048)), "{}", &cut[..20]);
        assert!(
            cut.ends_with("... (1904 more bytes)"),
            "{}",
            &cut[cut.len() - 30..]
        );
        assert!(cut.len() < MAX_LAST_ERROR_BYTES + 32);
    }
}
