//! The engine API (`switchyard.v1.EngineService`): sessions, tools, calls,
//! cancellation, the session events stream and interactions (listing and
//! answering them; [`crate::interactions`]), and background calls (a call
//! that moved to the background, its `background_call.*` events, listing
//! and cancelling; [`crate::background`]).

use crate::ControlPlane;
use crate::auth::Caller;
use crate::call::request::Forward;
use crate::interactions::{InteractionRecord, Status as InteractionStatus, pb_to_json};
use crate::model::{self, PermissionMode, RootRecord, SessionRecord};
use crate::registry::RegistryError;
use crate::state::{Change, Snapshot};
use crate::tools::tools_for;
use futures::Stream;
use serde_json::json;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
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
        Ok(crate::call::admit::session(&self.cp, id, caller).await?)
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

    /// Whether `caller` may see (and cancel) background call `c`: by its
    /// session's rule ([`Self::sees_session`]), or when it has no session,
    /// by the principal that made it
    /// ([`crate::model::background::BackgroundRecord::visible_to`]).
    fn sees_call(
        &self,
        c: &crate::background::BackgroundRecord,
        caller: Option<&Caller>,
        snap: &Snapshot,
    ) -> bool {
        if c.session_id.is_empty() {
            c.visible_to(caller)
        } else {
            self.sees_session(&c.session_id, caller, snap)
        }
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

/// Maps registry errors to statuses (as [`crate::call::CallError`] does).
pub fn registry_status(e: RegistryError) -> Status {
    crate::call::CallError::from(e).into()
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
    /// stream going away. The call path is [`crate::call`].
    pub async fn call_until(
        &self,
        r: pb::CallToolRequest,
        caller: Option<&Caller>,
        cancelled: CancellationToken,
    ) -> Result<pb::CallToolResponse, Status> {
        crate::call::run(&self.cp, r, caller, cancelled, None, None)
            .await
            .map_err(Status::from)
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
        let filter = crate::background::Filter::of(&r)?;
        self.check_session(&r.session_id, caller.as_ref()).await?;
        let calls = self
            .cp
            .background
            .list(&r.session_id, r.include_finished)
            .await?;
        let snap = self.cp.state.snapshot();
        let visible = calls
            .into_iter()
            .filter(|c| self.sees_call(c, caller.as_ref(), &snap))
            .filter(|c| filter.matches(c))
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
            .filter(|c| self.sees_call(c, caller.as_ref(), &snap))
            .ok_or_else(|| Status::not_found(format!("background call {:?} not found", r.id)))?;
        Ok(Response::new(rec.to_pb()))
    }

    async fn list_resources(
        &self,
        req: Request<pb::ListResourcesRequest>,
    ) -> Result<Response<pb::ListResourcesResponse>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        Ok(Response::new(
            crate::call::request::list_resources(&self.cp, &r, caller.as_ref()).await?,
        ))
    }

    async fn read_resource(
        &self,
        req: Request<pb::ReadResourceRequest>,
    ) -> Result<Response<pb::ReadResourceResponse>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        Ok(Response::new(
            crate::call::request::read_resource(&self.cp, &r, caller.as_ref(), Forward::Processed)
                .await?,
        ))
    }

    async fn attach_resource(
        &self,
        req: Request<pb::ReadResourceRequest>,
    ) -> Result<Response<pb::ReadResourceResponse>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        Ok(Response::new(
            crate::call::request::read_resource(&self.cp, &r, caller.as_ref(), Forward::Attached)
                .await?,
        ))
    }

    async fn list_prompts(
        &self,
        req: Request<pb::ListPromptsRequest>,
    ) -> Result<Response<pb::ListPromptsResponse>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        Ok(Response::new(
            crate::call::request::list_prompts(&self.cp, &r, caller.as_ref()).await?,
        ))
    }

    async fn get_prompt(
        &self,
        req: Request<pb::GetPromptRequest>,
    ) -> Result<Response<pb::GetPromptResponse>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        Ok(Response::new(
            crate::call::request::get_prompt(&self.cp, &r, caller.as_ref(), Forward::Processed)
                .await?,
        ))
    }

    async fn complete(
        &self,
        req: Request<pb::CompleteRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        let caller = caller_of(&req);
        let r = req.into_inner();
        Ok(Response::new(
            crate::call::request::complete(&self.cp, &r, caller.as_ref(), Forward::Processed)
                .await?,
        ))
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
            && !self.sees_call(&c, caller.as_ref(), &snap)
        {
            return Err(Status::not_found(format!(
                "background call {:?} not found",
                r.id
            )));
        }
        // An administrator acting on another caller's call says so.
        let by = match &caller {
            Some(c) if c.role == crate::auth::Role::Admin => {
                format!("the administrator {}", c.name)
            }
            _ => "the user".to_owned(),
        };
        let rec = self
            .cp
            .background
            .cancel(&self.cp, &r.id, &r.session_id, &by)
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
        // The call runs in its own task, so that an engine that goes away
        // (tonic drops this future) cancels it through its token: it is
        // cancelled upstream and still counted and audited.
        let cancelled = CancellationToken::new();
        let _engine_gone = cancelled.clone().drop_guard();
        let api = self.clone();
        let r = req.into_inner();
        tokio::spawn(async move { api.call_until(r, caller.as_ref(), cancelled).await })
            .await
            .map_err(|e| Status::internal(format!("the call's task failed: {e}")))?
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
            // Engines get no notifications about their calls (yet).
            move |r, cancelled, _notifier| {
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
        if !r.session_id.is_empty() {
            check_id("session_id", &r.session_id)?;
        }
        self.check_session(&r.session_id, caller.as_ref()).await?;
        // A call without a session is its caller's alone to cancel.
        let scope = crate::call::route::call_scope(&r.session_id, caller.as_ref());
        if self.cp.router.cancel(&scope, &r.call_id) {
            return Ok(Response::new(pb::CancelCallResponse { cancelled: true }));
        }
        // Maybe another replica runs it: tell them all through the store.
        let principal = caller.as_ref().map(|c| c.name.as_str()).unwrap_or("");
        self.cp
            .registry
            .request_cancel(principal, &scope, &r.call_id)
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
            .finished_of(&self.cp.state, &id, r.background_after_ms)
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
                        match cp.background.finished_of(&cp.state, &id, since).await {
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
                            yield list_changed(&id, "tools.changed", json!({"server": server, "toolsUpdatedAt": tools_updated_at}));
                        }
                    }
                    Change::ResourcesChanged { server, resources_updated_at: at } => {
                        let snap = state.snapshot();
                        let Some(session) = snap.sessions.get(&id) else { break };
                        if session.enables(&server) {
                            yield list_changed(&id, "resources.changed", json!({"server": server, "resourcesUpdatedAt": at}));
                        }
                    }
                    Change::PromptsChanged { server, prompts_updated_at: at } => {
                        let snap = state.snapshot();
                        let Some(session) = snap.sessions.get(&id) else { break };
                        if session.enables(&server) {
                            yield list_changed(&id, "prompts.changed", json!({"server": server, "promptsUpdatedAt": at}));
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

/// A `*.changed` event of session `id` (`tools.changed`,
/// `resources.changed`, `prompts.changed`) with `data`.
fn list_changed(id: &str, kind: &str, data: serde_json::Value) -> pb::SessionEvent {
    pb::SessionEvent {
        r#type: kind.into(),
        session_id: id.to_owned(),
        at_ms: model::now_ms(),
        data_json: data.to_string(),
    }
}

/// The authenticated caller of a request ([`crate::auth::Guard`] puts it
/// in the extensions); `None` for an anonymous one.
fn caller_of<T>(req: &Request<T>) -> Option<Caller> {
    req.extensions().get::<Caller>().cloned()
}

fn check_id(field: &str, id: &str) -> Result<(), Status> {
    crate::model::check_id(field, id).map_err(Status::invalid_argument)
}
