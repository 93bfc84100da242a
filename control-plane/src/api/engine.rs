//! The engine API (`switchyard.v1.EngineService`): sessions, tools, calls,
//! cancellation, the session events stream and interactions (listing and
//! answering them; [`crate::interactions`]), and background calls (a call
//! that moved to the background, its `background_call.*` events, listing
//! and cancelling; [`crate::background`]).

use crate::ControlPlane;
use crate::audit::{AuditHints, ToolCallAudit};
use crate::auth::Caller;
use crate::interactions::ApprovalOutcome;
use crate::interactions::{InteractionRecord, Status as InteractionStatus, pb_to_json};
use crate::model::{self, PermissionMode, RootRecord, SessionRecord, ToolPolicy};
use crate::policy::{Decision, EffectiveHints, HintSource, decide, effective_policy};
use crate::registry::RegistryError;
use crate::routing::unavailable;
use crate::state::{Change, Snapshot};
use futures::Stream;
use serde_json::{Value, json};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_common::ids::new_id;
use switchyard_proto::calls::{self, EngineCallFrames, Outcomes};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::engine_service_server::EngineService;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

/// The service.
#[derive(Debug, Clone)]
pub struct EngineApi {
    cp: Arc<ControlPlane>,
}

impl EngineApi {
    /// Serves `cp`.
    pub fn new(cp: Arc<ControlPlane>) -> Self {
        EngineApi { cp }
    }

    /// The session `id`, if `caller` may use it
    /// ([`SessionRecord::usable_by`]); NOT_FOUND otherwise, as for a
    /// session that does not exist (another caller's sessions are not
    /// revealed).
    async fn session(&self, id: &str, caller: Option<&Caller>) -> Result<SessionRecord, Status> {
        let session = match self.cp.state.snapshot().sessions.get(id) {
            Some(s) => s.clone(),
            // Boxed: the read-through is rare, and its future would otherwise
            // make every call's future (moved on each spawn) much larger.
            None => Box::pin(self.read_session(id)).await?,
        };
        if session.usable_by(caller) {
            Ok(session)
        } else {
            Err(Status::not_found(format!("session {id:?} not found")))
        }
    }

    /// Stores `rec` and answers it, once this replica's read model has it
    /// (at most 2 s), so the caller's next RPC here sees the change.
    async fn save_session(&self, rec: &SessionRecord) -> Result<Response<pb::Session>, Status> {
        let rev = self
            .cp
            .registry
            .put_session(rec)
            .await
            .map_err(registry_status)?;
        self.cp.state.wait_for(rev, Duration::from_secs(2)).await;
        Ok(Response::new(session_to_pb(rec)))
    }

    /// NOT_FOUND unless `caller` may use session `id` (nothing to check
    /// for an empty id: no session).
    async fn check_session(&self, id: &str, caller: Option<&Caller>) -> Result<(), Status> {
        if id.is_empty() || caller.is_none() {
            return Ok(());
        }
        self.session(id, caller).await.map(|_| ())
    }

    /// Whether `caller` may see a record of session `id` in a listing:
    /// records without a session are not scoped; those of a session that
    /// is gone are shown to anonymous callers and admins only.
    fn sees_session(&self, id: &str, caller: Option<&Caller>, snap: &Snapshot) -> bool {
        if id.is_empty() || caller.is_none() {
            return true;
        }
        match snap.sessions.get(id) {
            Some(s) => s.usable_by(caller),
            None => caller.is_some_and(|c| c.role == crate::auth::Role::Admin),
        }
    }

    /// A session created on another replica a moment ago: read through.
    async fn read_session(&self, id: &str) -> Result<SessionRecord, Status> {
        self.cp
            .registry
            .get_session(id)
            .await
            .map_err(registry_status)?
            .ok_or_else(|| Status::not_found(format!("session {id:?} not found")))
    }

    fn check_servers(&self, servers: &[String]) -> Result<(), Status> {
        let snap = self.cp.state.snapshot();
        for s in servers {
            if !snap.servers.contains_key(s) {
                return Err(Status::invalid_argument(format!(
                    "enabled_servers: server {s:?} is not configured"
                )));
            }
        }
        Ok(())
    }
}

/// Maps registry errors to statuses.
pub fn registry_status(e: RegistryError) -> Status {
    match e {
        RegistryError::UnknownServer(_) | RegistryError::UnknownSession(_) => {
            Status::not_found(e.to_string())
        }
        RegistryError::ServerExists(_) => Status::already_exists(e.to_string()),
        RegistryError::Invalid(_) => Status::invalid_argument(e.to_string()),
        RegistryError::Contention(_) => Status::aborted(e.to_string()),
        RegistryError::Store(_) => Status::unavailable(format!(
            "store unavailable: {}",
            switchyard_common::error_chain(&e)
        )),
    }
}

fn mode_from(m: i32) -> Result<PermissionMode, Status> {
    match pb::PermissionMode::try_from(m) {
        Ok(pb::PermissionMode::Unspecified) | Ok(pb::PermissionMode::Ask) => {
            Ok(PermissionMode::Ask)
        }
        Ok(pb::PermissionMode::Auto) => Ok(PermissionMode::Auto),
        Ok(pb::PermissionMode::ReadOnly) => Ok(PermissionMode::ReadOnly),
        Err(_) => Err(Status::invalid_argument(format!(
            "permission_mode: unknown value {m}"
        ))),
    }
}

fn mode_to(m: PermissionMode) -> i32 {
    match m {
        PermissionMode::Ask => pb::PermissionMode::Ask as i32,
        PermissionMode::Auto => pb::PermissionMode::Auto as i32,
        PermissionMode::ReadOnly => pb::PermissionMode::ReadOnly as i32,
    }
}

fn roots_from(roots: Vec<pb::Root>) -> Result<Vec<RootRecord>, Status> {
    roots
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            if r.uri.is_empty() || !r.uri.contains(':') {
                return Err(Status::invalid_argument(format!(
                    "roots[{i}].uri: {:?} is not a URI",
                    r.uri
                )));
            }
            Ok(RootRecord {
                uri: r.uri,
                name: r.name,
            })
        })
        .collect()
}

/// A session as the API shows it.
pub fn session_to_pb(s: &SessionRecord) -> pb::Session {
    pb::Session {
        id: s.id.clone(),
        enabled_servers: s.enabled_servers.clone(),
        permission_mode: mode_to(s.permission_mode),
        roots: s
            .roots
            .iter()
            .map(|r| pb::Root {
                uri: r.uri.clone(),
                name: r.name.clone(),
            })
            .collect(),
        created_at_ms: s.created_at_ms,
        updated_at_ms: s.updated_at_ms,
        owner: s.owner.clone(),
    }
}

/// A tool's display name: `title`, else `annotations.title`, else its name.
pub fn title_of(def: &Value) -> &str {
    def.get("title")
        .or_else(|| def["annotations"].get("title"))
        .and_then(Value::as_str)
        .or_else(|| def.get("name").and_then(Value::as_str))
        .unwrap_or("")
}

/// The permission mode a call or listing is decided in: the session's, or
/// `auto` without one (see [`crate::policy`]).
pub fn mode_of(session: Option<&SessionRecord>) -> PermissionMode {
    session.map_or(PermissionMode::Auto, |s| s.permission_mode)
}

/// A tool of `server` as the control plane decides about it: effective
/// hints, policy, and the decision for a session in `mode`.
#[derive(Debug, Clone, Copy)]
pub struct ToolView {
    /// Effective hints.
    pub hints: EffectiveHints,
    /// Effective policy.
    pub policy: ToolPolicy,
    /// The decision.
    pub decision: Decision,
}

/// The view of `def` (a tool of `server`) for a session in `mode`.
pub fn tool_view(snap: &Snapshot, server: &str, def: &Value, mode: PermissionMode) -> ToolView {
    let hints = snap.hints_of(server, def);
    let tool = def.get("name").and_then(Value::as_str).unwrap_or("");
    let policy = effective_policy(snap.policy_set(server, tool), &hints);
    ToolView {
        hints,
        policy,
        decision: decide(mode, policy, hints.read_only.value),
    }
}

/// The definition an engine gets: without `outputSchema` (summarised in
/// the description instead), with overridden hints in `annotations`.
pub fn engine_definition(def: &Value, hints: &EffectiveHints) -> Value {
    let mut def = def.clone();
    if let Some(m) = def.as_object_mut() {
        m.remove("outputSchema");
    }
    for (key, hint) in [
        ("readOnlyHint", hints.read_only),
        ("destructiveHint", hints.destructive),
        ("idempotentHint", hints.idempotent),
    ] {
        if hint.source == HintSource::Override {
            if !def["annotations"].is_object() {
                def["annotations"] = json!({});
            }
            def["annotations"][key] = Value::Bool(hint.value);
        }
    }
    def
}

/// The tools a session may see, with engine-visible names.
pub fn tools_for(snap: &Snapshot, session: Option<&SessionRecord>) -> (Vec<pb::Tool>, Vec<String>) {
    let mut tools = Vec::new();
    let mut unavailable = Vec::new();
    let mode = mode_of(session);
    for name in snap.servers.keys() {
        if session.is_some_and(|s| !s.enables(name)) {
            continue;
        }
        let live = snap
            .sidecars
            .get(name)
            .is_some_and(|m| m.values().any(|s| s.upstream_state == "connected"));
        let Some(cat) = snap.catalogues.get(name).filter(|_| live) else {
            unavailable.push(name.clone());
            continue;
        };
        for def in &cat.tools {
            let Some(upstream) = def.get("name").and_then(Value::as_str) else {
                continue;
            };
            let view = tool_view(snap, name, def, mode);
            if !view.decision.offered() {
                continue;
            }
            tools.push(pb::Tool {
                name: snap.engine_name(name, upstream),
                server: name.clone(),
                upstream_name: upstream.to_owned(),
                title: title_of(def).to_owned(),
                description: crate::schema_summary::describe(
                    def.get("description").and_then(Value::as_str).unwrap_or(""),
                    def.get("outputSchema"),
                ),
                input_schema_json: def
                    .get("inputSchema")
                    .map(Value::to_string)
                    .unwrap_or_default(),
                hints: Some(view.hints.to_pb()),
                definition_json: engine_definition(def, &view.hints).to_string(),
            });
        }
    }
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    (tools, unavailable)
}

/// The `tools/call` params for the sidecar, as JSON text:
/// `{"name": TOOL, "arguments": ARGUMENTS, "_meta": META}`, with the
/// engine's `arguments_json` (empty = `{}`) and `meta_json` (empty = no
/// `_meta`) spliced in exactly as given, after checking that each is a JSON
/// object. Errors: INVALID_ARGUMENT naming the field.
fn params_json(tool: &str, arguments_json: &str, meta_json: &str) -> Result<String, Status> {
    let arguments = raw_object("arguments_json", arguments_json)?;
    let meta = raw_object("meta_json", meta_json)?;
    let name = Value::from(tool).to_string();
    let mut out = String::with_capacity(
        name.len() + arguments.map_or(2, str::len) + meta.map_or(0, str::len) + 32,
    );
    out.push_str("{\"name\":");
    out.push_str(&name);
    out.push_str(",\"arguments\":");
    out.push_str(arguments.unwrap_or("{}"));
    if let Some(meta) = meta {
        out.push_str(",\"_meta\":");
        out.push_str(meta);
    }
    out.push('}');
    Ok(out)
}

/// `text` checked to be one JSON object (surrounding white space dropped);
/// `None` when blank. Errors: INVALID_ARGUMENT naming `field`.
fn raw_object<'a>(field: &str, text: &'a str) -> Result<Option<&'a str>, Status> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let raw: &serde_json::value::RawValue = serde_json::from_str(text)
        .map_err(|e| Status::invalid_argument(format!("{field}: not valid JSON: {e}")))?;
    if !raw.get().starts_with('{') {
        return Err(Status::invalid_argument(format!(
            "{field}: must be a JSON object"
        )));
    }
    Ok(Some(raw.get()))
}

/// The text an engine's model reads: the text items of `content`, in order.
pub fn model_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|c| c.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A sidecar response carrying the "not approved" result (the upstream was
/// never called).
fn not_approved(result: Value) -> pb::SidecarCallResponse {
    pb::SidecarCallResponse {
        result_json: result.to_string(),
        model_text: model_text(&result),
        is_error: result.get("isError") == Some(&Value::Bool(true)),
        ..Default::default()
    }
}

/// Calls in flight on one `CallToolStream`, at most; more get
/// RESOURCE_EXHAUSTED.
pub const MAX_STREAM_CALLS: usize = 4096;

impl EngineApi {
    /// One tool call, as `CallTool` and each `CallToolStream` call frame do
    /// it (see `proto/switchyard/v1/engine.proto`). Errors: NOT_FOUND,
    /// INVALID_ARGUMENT, FAILED_PRECONDITION, UNAVAILABLE,
    /// DEADLINE_EXCEEDED, CANCELLED, ALREADY_EXISTS (a `call_id` in use).
    pub async fn call(
        &self,
        r: pb::CallToolRequest,
        caller: Option<&Caller>,
    ) -> Result<pb::CallToolResponse, Status> {
        self.call_until(r, caller, CancellationToken::new()).await
    }

    /// [`EngineApi::call`], cancelled (CANCELLED, counted and audited as
    /// such) when `cancelled` is: a `CallToolStream` cancel frame, or the
    /// stream going away.
    pub async fn call_until(
        &self,
        r: pb::CallToolRequest,
        caller: Option<&Caller>,
        cancelled: CancellationToken,
    ) -> Result<pb::CallToolResponse, Status> {
        let started = Instant::now();
        let session = if r.session_id.is_empty() {
            None
        } else {
            Some(self.session(&r.session_id, caller).await?)
        };
        let snap = self.cp.state.snapshot();
        let target = match snap.resolve(&r.tool) {
            Some(t) => t.clone(),
            None => {
                // The name map may lag a new catalogue by a moment.
                snap.catalogues
                    .iter()
                    .flat_map(|(server, cat)| {
                        cat.tools
                            .iter()
                            .filter_map(|d| d.get("name").and_then(Value::as_str))
                            .map(move |t| (server, t))
                    })
                    .find(|(server, t)| snap.engine_name(server, t) == r.tool)
                    .map(|(server, t)| crate::names::ToolRef {
                        server: server.clone(),
                        tool: t.to_owned(),
                    })
                    .ok_or_else(|| Status::not_found(format!("tool not found: {:?}", r.tool)))?
            }
        };
        let server = target.server.as_str();
        if !snap.servers.contains_key(server) {
            return Err(Status::not_found(format!(
                "tool not found: {:?} (server {server} was removed)",
                r.tool
            )));
        }
        let Some(cat) = snap.catalogues.get(server) else {
            return Err(unavailable(server, "no catalogue yet"));
        };
        let Some(def) = cat.tools.iter().find(|t| t["name"] == target.tool.as_str()) else {
            return Err(Status::not_found(format!(
                "tool not found: {:?} (server {server} no longer has a tool {:?})",
                r.tool, target.tool
            )));
        };
        if let Some(s) = &session
            && !s.enables(server)
        {
            return Err(Status::failed_precondition(format!(
                "tool {:?} is not offered to session {}: server {server} is not enabled",
                r.tool, s.id
            )));
        }
        let view = tool_view(&snap, server, def, mode_of(session.as_ref()));
        match (view.decision, &session) {
            (Decision::NotOffered(why), Some(s)) => {
                return Err(Status::failed_precondition(format!(
                    "tool {:?} is not offered to session {}: {why}",
                    r.tool, s.id
                )));
            }
            (Decision::NotOffered(why), None) => {
                return Err(Status::failed_precondition(format!(
                    "tool {:?} is not offered: {why}",
                    r.tool
                )));
            }
            (Decision::Approve, None) => {
                return Err(Status::failed_precondition(format!(
                    "tool {:?} needs the user's approval (policy {}) and the call has no session to ask in",
                    r.tool,
                    view.policy.as_str()
                )));
            }
            _ => {}
        }
        let params_json = params_json(&target.tool, &r.arguments_json, &r.meta_json)?;
        let max_ms = switchyard_common::server_spec::MAX_TIMEOUT_SEC * 1000;
        if r.timeout_ms > max_ms {
            return Err(Status::invalid_argument(format!(
                "timeout_ms: {} is over the maximum {max_ms} (7 days)",
                r.timeout_ms
            )));
        }
        // Stage B: the call may move to the background after its
        // foreground phase; without a timeout of the engine's, the gRPC
        // deadline covers that phase (and the 10-minute foreground poll at
        // maxPerTarget) plus a margin.
        let background = self.cp.background.policy(
            &r.tool,
            snap.background_always(server, &target.tool),
            self.cp.state.background_running(server),
        );
        let timeout = if r.timeout_ms > 0 {
            Duration::from_millis(r.timeout_ms)
        } else {
            let phase = if background.allowed {
                background.auto_after_ms
            } else {
                background.foreground_limit_ms
            };
            self.cp
                .call_timeout
                .max(Duration::from_millis(phase) + Duration::from_secs(30))
        };
        let request = pb::SidecarCallRequest {
            params_json,
            timeout_ms: timeout.as_millis() as u64,
            session_id: r.session_id.clone(),
            run_id: r.run_id.clone(),
            roots_json: session
                .as_ref()
                .filter(|s| !s.roots.is_empty())
                .map(|s| serde_json::to_string(&s.roots).expect("roots serialise"))
                .unwrap_or_default(),
            retry_safe: view.hints.retry_safe(),
            background: Some(background),
        };
        if !r.call_id.is_empty() {
            check_id("call_id", &r.call_id)?;
        }
        let guard = self
            .cp
            .router
            .track(&r.session_id, &r.call_id)
            .map_err(|_| {
                Status::already_exists(format!(
                    "call_id: a call {:?} is already running in this session",
                    r.call_id
                ))
            })?;
        let approval_needed = view.decision == Decision::Approve;
        let cp = self.cp.clone();
        let (session_id, run_id) = (r.session_id.clone(), r.run_id.clone());
        let (server_name, tool_name) = (server.to_owned(), target.tool.clone());
        let call = async move {
            if approval_needed {
                // Boxed: rare, and large.
                let outcome = Box::pin(cp.interactions.request_approval(
                    &session_id,
                    &run_id,
                    &server_name,
                    &tool_name,
                    "",
                ))
                .await;
                if let Some(result) = outcome.not_approved_result(&server_name, &tool_name) {
                    return (Some(outcome), Ok(not_approved(result)));
                }
                let call = cp.router.call(
                    &snap,
                    &server_name,
                    request,
                    timeout + Duration::from_secs(1),
                );
                return (Some(outcome), call.await);
            }
            let call = cp.router.call(
                &snap,
                &server_name,
                request,
                timeout + Duration::from_secs(1),
            );
            (None, call.await)
        };
        let by_call_id = guard.as_ref().map(|g| g.token.clone()).unwrap_or_default();
        let (approval, outcome) = tokio::select! {
            r = call => r,
            _ = by_call_id.cancelled() => (None, Err(Status::cancelled(format!("call {} cancelled", r.call_id)))),
            _ = cancelled.cancelled() => (None, Err(Status::cancelled("call cancelled on its stream"))),
        };
        drop(guard);
        let label = match &outcome {
            Ok(_) => "ok",
            Err(s) => match s.code() {
                tonic::Code::Unavailable => "unavailable",
                tonic::Code::DeadlineExceeded => "timeout",
                tonic::Code::Cancelled => "cancelled",
                tonic::Code::FailedPrecondition => "rpc_error",
                _ => "error",
            },
        };
        let resp = outcome.map(|resp| match resp.background {
            // Moved to the background (stage B): the model is told so,
            // and the result arrives later as a session event.
            Some(bg) => pb::CallToolResponse {
                text: crate::background::moved_text(&r.tool, &bg.id, &bg.immediate_response),
                server: server.to_owned(),
                upstream_tool: target.tool.clone(),
                duration_ms: started.elapsed().as_millis() as u64,
                background: Some(bg),
                ..Default::default()
            },
            None => pb::CallToolResponse {
                background: None,
                text: resp.model_text,
                structured_content_json: resp.structured_content_json,
                is_error: resp.is_error,
                result_json: resp.result_json,
                server: server.to_owned(),
                upstream_tool: target.tool.clone(),
                duration_ms: started.elapsed().as_millis() as u64,
                attachments: resp.attachments,
                validation_errors: resp.validation_errors,
            },
        });
        let not_approved_call = approval.as_ref().is_some_and(|a| !a.is_approved());
        let moved = resp.as_ref().ok().and_then(|r| r.background.as_ref());
        if let Some(bg) = moved {
            self.cp.background.count_moved(server, &bg.mode);
            tracing::info!(id = %bg.id, %server, tool = %target.tool, mode = %bg.mode, "call moved to the background");
        }
        let label = match &resp {
            Ok(r) if r.background.is_some() => "backgrounded",
            Ok(_) if not_approved_call => "not_approved",
            Ok(r) if r.is_error => "tool_error",
            _ => label,
        };
        self.cp.metrics.call(server, label, started.elapsed());
        let h = view.hints.to_pb();
        self.cp.audit.tool_call(&ToolCallAudit {
            kind: if moved.is_some() {
                "tool.backgrounded"
            } else {
                "tool.called"
            },
            session: r.session_id.clone(),
            run: r.run_id.clone(),
            call_id: r.call_id.clone(),
            server: server.to_owned(),
            tool: target.tool.clone(),
            outcome: label.to_owned(),
            policy: view.policy.as_str(),
            approval: match &approval {
                None if approval_needed => "cancel",
                None => "not_needed",
                Some(ApprovalOutcome::Approved) => "approve",
                Some(ApprovalOutcome::Denied) => "deny",
                Some(ApprovalOutcome::TimedOut) => "timeout",
                Some(ApprovalOutcome::Cancelled(_)) => "cancel",
                Some(ApprovalOutcome::Failed(_)) => "failed",
            },
            duration_ms: started.elapsed().as_millis() as u64,
            hints: AuditHints {
                read_only_hint: h.read_only_hint,
                destructive_hint: h.destructive_hint,
                idempotent_hint: h.idempotent_hint,
                open_world_hint: h.open_world_hint,
            },
            validation_errors: resp
                .as_ref()
                .map(|r| r.validation_errors.clone())
                .unwrap_or_default(),
        });
        resp
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::SessionEvent, Status>> + Send>>;

#[tonic::async_trait]
impl EngineService for EngineApi {
    async fn list_background_calls(
        &self,
        req: Request<pb::ListBackgroundCallsRequest>,
    ) -> Result<Response<pb::ListBackgroundCallsResponse>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        self.check_session(&r.session_id, caller.as_ref()).await?;
        let calls = self
            .cp
            .background
            .list(&r.session_id, r.include_finished)
            .await?;
        let snap = self.cp.state.snapshot();
        let visible = calls
            .into_iter()
            .filter(|c| self.sees_session(&c.session_id, caller.as_ref(), &snap))
            .collect();
        let (page, next_page_token) =
            crate::background::page_of(visible, r.page_size, &r.page_token)?;
        Ok(Response::new(pb::ListBackgroundCallsResponse {
            calls: page.iter().map(|c| c.to_pb()).collect(),
            next_page_token,
        }))
    }

    async fn get_background_call(
        &self,
        req: Request<pb::GetBackgroundCallRequest>,
    ) -> Result<Response<pb::BackgroundCall>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        let snap = self.cp.state.snapshot();
        let rec = self
            .cp
            .background
            .get(&r.id)
            .await?
            .filter(|c| r.session_id.is_empty() || c.session_id == r.session_id)
            .filter(|c| self.sees_session(&c.session_id, caller.as_ref(), &snap))
            .ok_or_else(|| Status::not_found(format!("background call {:?} not found", r.id)))?;
        Ok(Response::new(rec.to_pb()))
    }

    async fn cancel_background_call(
        &self,
        req: Request<pb::CancelBackgroundCallRequest>,
    ) -> Result<Response<pb::BackgroundCall>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        // Another caller's call is not found, as in GetBackgroundCall.
        let snap = self.cp.state.snapshot();
        if let Some(c) = self.cp.background.get(&r.id).await?
            && !self.sees_session(&c.session_id, caller.as_ref(), &snap)
        {
            return Err(Status::not_found(format!(
                "background call {:?} not found",
                r.id
            )));
        }
        let rec = self
            .cp
            .background
            .cancel(&self.cp, &r.id, &r.session_id)
            .await?;
        Ok(Response::new(rec.to_pb()))
    }

    async fn create_session(
        &self,
        req: Request<pb::CreateSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let owner = caller_of(&req).map(|c| c.name).unwrap_or_default();
        let r = req.into_inner();
        self.check_servers(&r.enabled_servers)?;
        let now = model::now_ms();
        let rec = SessionRecord {
            id: new_id(),
            enabled_servers: r.enabled_servers,
            permission_mode: mode_from(r.permission_mode)?,
            roots: roots_from(r.roots)?,
            created_at_ms: now,
            updated_at_ms: now,
            owner,
        };
        self.save_session(&rec).await
    }

    async fn update_session(
        &self,
        req: Request<pb::UpdateSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        let mut rec = self.session(&r.session_id, caller.as_ref()).await?;
        self.check_servers(&r.enabled_servers)?;
        rec.enabled_servers = r.enabled_servers;
        rec.permission_mode = mode_from(r.permission_mode)?;
        rec.roots = roots_from(r.roots)?;
        rec.updated_at_ms = model::now_ms();
        self.save_session(&rec).await
    }

    async fn get_session(
        &self,
        req: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::Session>, Status> {
        let caller = caller_of(&req);
        let s = self
            .session(&req.into_inner().session_id, caller.as_ref())
            .await?;
        Ok(Response::new(session_to_pb(&s)))
    }

    async fn list_sessions(
        &self,
        req: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let caller = caller_of(&req);
        let snap = self.cp.state.snapshot();
        let mut sessions: Vec<_> = snap
            .sessions
            .values()
            .filter(|s| s.usable_by(caller.as_ref()))
            .map(session_to_pb)
            .collect();
        sessions.sort_by(|a, b| a.created_at_ms.cmp(&b.created_at_ms).then(a.id.cmp(&b.id)));
        Ok(Response::new(pb::ListSessionsResponse { sessions }))
    }

    async fn delete_session(
        &self,
        req: Request<pb::DeleteSessionRequest>,
    ) -> Result<Response<pb::DeleteSessionResponse>, Status> {
        let caller = caller_of(&req);
        let id = req.into_inner().session_id;
        self.check_session(&id, caller.as_ref()).await?;
        self.cp
            .registry
            .delete_session(&id)
            .await
            .map_err(registry_status)?;
        // Its pending interactions are cancelled (the sweeper of any
        // replica does it too, should this fail or this replica die).
        match self.cp.interactions.cancel_session(&id).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(session = %id, cancelled = n, "session deleted; its open interactions were cancelled")
            }
            Err(e) => {
                tracing::warn!(session = %id, error = %e, "cancelling a deleted session's interactions failed; the sweeper will")
            }
        }
        Ok(Response::new(pb::DeleteSessionResponse {}))
    }

    async fn list_tools(
        &self,
        req: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        let session = if r.session_id.is_empty() {
            None
        } else {
            Some(self.session(&r.session_id, caller.as_ref()).await?)
        };
        let (tools, unavailable_servers) = tools_for(&self.cp.state.snapshot(), session.as_ref());
        Ok(Response::new(pb::ListToolsResponse {
            tools,
            unavailable_servers,
        }))
    }

    async fn call_tool(
        &self,
        req: Request<pb::CallToolRequest>,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        let caller = caller_of(&req);
        self.call(req.into_inner(), caller.as_ref())
            .await
            .map(Response::new)
    }

    type CallToolStreamStream = Outcomes<pb::CallToolOutcome>;

    async fn call_tool_stream(
        &self,
        req: Request<Streaming<pb::CallToolFrame>>,
    ) -> Result<Response<Self::CallToolStreamStream>, Status> {
        let api = self.clone();
        // Every call on the stream is made as the stream's caller (shared,
        // not copied per call).
        let caller = caller_of(&req).map(Arc::new);
        Ok(Response::new(calls::serve::<EngineCallFrames, _, _>(
            req.into_inner(),
            MAX_STREAM_CALLS,
            self.cp.shutdown.clone(),
            move |r, cancelled| {
                let api = api.clone();
                let caller = caller.clone();
                // Boxed: the call's future is large, and the task that runs
                // it would otherwise copy all of it when it is spawned.
                // The call ends itself when cancelled, so it is counted and
                // audited like any other.
                Box::pin(async move { api.call_until(r, caller.as_deref(), cancelled).await })
            },
        )))
    }

    async fn cancel_call(
        &self,
        req: Request<pb::CancelCallRequest>,
    ) -> Result<Response<pb::CancelCallResponse>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        if r.call_id.is_empty() {
            return Err(Status::invalid_argument("call_id: required"));
        }
        check_id("call_id", &r.call_id)?;
        check_id("session_id", &r.session_id)?;
        self.check_session(&r.session_id, caller.as_ref()).await?;
        if self.cp.router.cancel(&r.session_id, &r.call_id) {
            return Ok(Response::new(pb::CancelCallResponse { cancelled: true }));
        }
        // Maybe another replica runs it: tell them all through the store.
        self.cp
            .registry
            .request_cancel(&r.session_id, &r.call_id)
            .await
            .map_err(registry_status)?;
        Ok(Response::new(pb::CancelCallResponse { cancelled: false }))
    }

    async fn list_interactions(
        &self,
        req: Request<pb::ListInteractionsRequest>,
    ) -> Result<Response<pb::ListInteractionsResponse>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        self.check_session(&r.session_id, caller.as_ref()).await?;
        let list = self
            .cp
            .interactions
            .list(&r.session_id, r.include_resolved)
            .await?;
        Ok(Response::new(pb::ListInteractionsResponse {
            interactions: list.iter().map(|i| i.to_pb()).collect(),
        }))
    }

    async fn answer_interaction(
        &self,
        req: Request<pb::AnswerInteractionRequest>,
    ) -> Result<Response<pb::Interaction>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        self.check_session(&r.session_id, caller.as_ref()).await?;
        let rec = self
            .cp
            .interactions
            .answer(&r.session_id, &r.interaction_id, &r.action, &r.content_json)
            .await?;
        Ok(Response::new(rec.to_pb()))
    }

    type SubscribeEventsStream = EventStream;

    async fn subscribe_events(
        &self,
        req: Request<pb::SubscribeEventsRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        let id = r.session_id;
        self.session(&id, caller.as_ref()).await?;
        let mut changes = self.cp.state.subscribe();
        // Background calls that finished since `background_after_ms`, read
        // after subscribing, so none falls between the two (duplicates are
        // dropped by id).
        let subscribed_at = model::now_ms();
        let finished = self
            .cp
            .background
            .finished_of(&id, r.background_after_ms)
            .await?;
        let cp = self.cp.clone();
        let state = self.cp.state.clone();
        let shutdown = self.cp.shutdown.clone();
        // The session's open interactions first (an engine that subscribes
        // again, perhaps at another replica, sees what still waits), then
        // changes; `announced` keeps `interaction.required` to one per id.
        let mut open: Vec<_> = state
            .snapshot()
            .interactions
            .get(&id)
            .map(|m| {
                m.values()
                    .filter(|r| r.status == InteractionStatus::Open)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        open.sort_by_key(|r| r.created_at_ms);
        let stream = async_stream::try_stream! {
            let mut announced = std::collections::HashSet::new();
            for rec in open {
                announced.insert(rec.id.clone());
                yield interaction_event("interaction.required", &rec);
            }
            let mut delivered = std::collections::HashSet::new();
            for rec in finished {
                delivered.insert(rec.id.clone());
                yield crate::background::event_of(&rec);
            }
            loop {
                let received = tokio::select! {
                    c = changes.recv() => c,
                    _ = shutdown.cancelled() => break,
                };
                let change = match received {
                    Ok(c) => c,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!(session = %id, missed = n, "event subscriber lagged; re-reading background calls");
                        // Background results must not be lost: re-read
                        // the ones finished since this stream began.
                        let since = r.background_after_ms.max(subscribed_at - 60_000);
                        match cp.background.finished_of(&id, since).await {
                            Ok(recs) => {
                                for rec in recs {
                                    if delivered.insert(rec.id.clone()) {
                                        yield crate::background::event_of(&rec);
                                    }
                                }
                            }
                            Err(e) => tracing::warn!(session = %id, error = %e, "re-reading background calls failed"),
                        }
                        continue;
                    }
                    Err(_) => break,
                };
                match change {
                    Change::ToolsChanged { server, tools_updated_at } => {
                        let snap = state.snapshot();
                        let Some(session) = snap.sessions.get(&id) else { break };
                        if session.enables(&server) {
                            yield pb::SessionEvent {
                                r#type: "tools.changed".into(),
                                session_id: id.clone(),
                                at_ms: model::now_ms(),
                                data_json: json!({"server": server, "toolsUpdatedAt": tools_updated_at}).to_string(),
                            };
                        }
                    }
                    Change::ToolSettingsChanged { server } => {
                        let snap = state.snapshot();
                        let Some(session) = snap.sessions.get(&id) else { break };
                        if session.enables(&server) {
                            let at = snap.catalogues.get(&server).map_or(0, |c| c.tools_updated_at);
                            yield pb::SessionEvent {
                                r#type: "tools.changed".into(),
                                session_id: id.clone(),
                                at_ms: model::now_ms(),
                                data_json: json!({"server": server, "toolsUpdatedAt": at, "reason": "settings"}).to_string(),
                            };
                        }
                    }
                    Change::Interaction(c) if c.session == id => {
                        if let Some(rec) = c.required() {
                            if announced.insert(rec.id.clone()) {
                                yield interaction_event("interaction.required", rec);
                            }
                        } else if let Some(rec) = c.resolved() {
                            announced.remove(&rec.id);
                            yield interaction_event("interaction.resolved", rec);
                        }
                    }
                    Change::Background(rec)
                        if crate::background::is_event_for(&rec, &id)
                            && delivered.insert(rec.id.clone()) =>
                    {
                        yield crate::background::event_of(&rec);
                    }
                    Change::SessionDeleted(deleted) if deleted == id => break,
                    _ => {}
                }
            }
            if shutdown.is_cancelled() {
                // This replica stops: the engine subscribes again (to another).
                Err::<(), _>(Status::unavailable(
                    "the control plane replica is shutting down; subscribe again",
                ))?;
            }
        };
        Ok(Response::new(Box::pin(stream)))
    }
}

/// An `interaction.*` event: the Interaction in its proto3 JSON form.
fn interaction_event(kind: &str, rec: &InteractionRecord) -> pb::SessionEvent {
    pb::SessionEvent {
        r#type: kind.into(),
        session_id: rec.session_id.clone(),
        at_ms: model::now_ms(),
        data_json: pb_to_json(&rec.to_pb()).to_string(),
    }
}

/// Ids that become store key segments: 1 to 128 characters, no `/`, no
/// control characters.
/// The authenticated caller of a request ([`crate::auth::Guard`] puts it
/// in the extensions); `None` for an anonymous one.
fn caller_of<T>(req: &Request<T>) -> Option<Caller> {
    req.extensions().get::<Caller>().cloned()
}

fn check_id(field: &str, id: &str) -> Result<(), Status> {
    if id.len() > 128 || id.contains('/') || id.chars().any(char::is_control) {
        return Err(Status::invalid_argument(format!(
            "{field}: at most 128 characters, without '/' or control characters"
        )));
    }
    Ok(())
}
