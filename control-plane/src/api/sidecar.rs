//! The sidecar registry (`switchyard.v1.SidecarRegistry`): registration
//! under a lease, and the report stream that keeps it alive. When the
//! stream ends (the sidecar stopped, crashed or lost its connection), the
//! lease is revoked at once; if this replica dies instead, the lease
//! expires within its TTL. Either way the server is marked down and calls
//! to it fail fast. `Interact` and `CompleteInteraction` carry a server's
//! elicitations to the session's user ([`crate::interactions`]).
//! `UpdateBackgroundCall` stores a background call's changes, and the
//! report stream carries `adopt` messages for the tasks a sidecar is to
//! poll ([`crate::background`]). A sidecar that reports the state
//! `draining` (it got SIGTERM) keeps its registration until its stream
//! ends, but gets no new calls ([`crate::routing`]). A sidecar credential
//! bound to servers (`[[auth.tokens]] servers`) is refused PERMISSION_DENIED
//! on every RPC here that names another server.

use crate::ControlPlane;
use crate::api::admin::spec_to_pb;
use crate::api::engine::registry_status;
use crate::auth::check_server;
use crate::call::route::DRAINING;
use crate::model::{SidecarRecord, now_ms, sidecar_key};
use crate::state::Change;
use crate::store::Store;
use serde_json::Value;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::sidecar_registry_server::SidecarRegistry;
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
            let mut keepalive = tokio::time::interval((ttl / 3).max(Duration::from_millis(500)));
            keepalive.tick().await;
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
                (r.spec.auth_kind() == switchyard_common::server_spec::AuthKind::OAuth)
                    .then(|| r.spec.url.clone().unwrap_or_default())
            });
            if let Some(url) = oauth_url {
                cp.oauth.push_to(server.clone(), url, tx.clone());
            }
            loop {
                tokio::select! {
                    change = changes.recv() => {
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
                    msg = inbound.message() => match msg {
                        Ok(Some(report)) => {
                            if let Err(e) = handle_report(&cp, &server, &mut record, lease, report).await {
                                tracing::warn!(%server, sidecar = %hello.sidecar_id, error = %e, "bad report from sidecar");
                                let _ = tx.send(Err(e)).await;
                                break;
                            }
                        }
                        Ok(None) => break,
                        Err(e) => {
                            tracing::info!(%server, sidecar = %hello.sidecar_id, error = %e, "report stream broke");
                            break;
                        }
                    },
                    _ = keepalive.tick() => {
                        if let Err(e) = cp.registry.keep_alive(lease).await {
                            tracing::warn!(%server, sidecar = %hello.sidecar_id, error = %e, "lease keep-alive failed; closing the stream");
                            let _ = tx.send(Err(Status::unavailable(format!("lease lost: {e}")))).await;
                            break;
                        }
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

async fn handle_report(
    cp: &ControlPlane,
    server: &str,
    record: &mut SidecarRecord,
    lease: crate::store::LeaseId,
    report: pb::SidecarReport,
) -> Result<(), Status> {
    match report.report {
        Some(pb::sidecar_report::Report::Catalogue(c)) => {
            if c.server != server {
                return Err(Status::invalid_argument(format!(
                    "catalogue.server {:?} is not this stream's server {server:?}",
                    c.server
                )));
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
                    )));
                }
                if !names.insert(name) {
                    return Err(Status::invalid_argument(format!(
                        "catalogue.tools_json[{i}]: tool name {name:?} appears twice"
                    )));
                }
            }
            let capabilities = parse_json("catalogue.capabilities_json", &c.capabilities_json)?;
            if !(capabilities.is_object() || capabilities.is_null()) {
                return Err(Status::invalid_argument(
                    "catalogue.capabilities_json: must be a JSON object",
                ));
            }
            let server_info = parse_json("catalogue.server_info_json", &c.server_info_json)?;
            if !(server_info.is_object() || server_info.is_null()) {
                return Err(Status::invalid_argument(
                    "catalogue.server_info_json: must be a JSON object",
                ));
            }
            // A catalogue means the upstream is connected, unless the
            // sidecar already said it is draining (shutting down): that
            // state stays until the stream ends. Recorded before the
            // catalogue, so an engine woken by the catalogue's
            // `tools.changed` finds the server's tools offered.
            if record.upstream_state != "connected" && record.upstream_state != DRAINING {
                record.upstream_state = "connected".into();
                record.last_error.clear();
                cp.registry
                    .update_sidecar(record, lease)
                    .await
                    .map_err(registry_status)?;
            }
            let changed = cp
                .registry
                .update_catalogue(server, tools, capabilities, server_info, c.protocol_version)
                .await
                .map_err(registry_status)?;
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
                let (resources, prompts) = cp
                    .registry
                    .update_resource_catalogue(server, lists)
                    .await
                    .map_err(registry_status)?;
                tracing::info!(%server, resources_changed = resources, prompts_changed = prompts, "resources and prompts received");
            }
        }
        Some(pb::sidecar_report::Report::TokenRejected(t)) => {
            cp.oauth
                .token_rejected(server, t.generation, t.http_status, &t.www_authenticate)
                .await;
        }
        Some(pb::sidecar_report::Report::Status(s)) => {
            if s.state == DRAINING && record.upstream_state != DRAINING {
                tracing::info!(%server, sidecar = %record.sidecar_id, "sidecar draining; routing new calls elsewhere");
            }
            record.upstream_state = s.state;
            record.last_error = bounded(s.last_error, MAX_LAST_ERROR_BYTES);
            cp.registry
                .update_sidecar(record, lease)
                .await
                .map_err(registry_status)?;
        }
        Some(pb::sidecar_report::Report::Hello(_)) => {
            return Err(Status::invalid_argument(
                "hello may only be the first message",
            ));
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
