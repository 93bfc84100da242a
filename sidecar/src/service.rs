//! The sidecar's gRPC service, `switchyard.v1.SidecarCalls`: the control
//! plane routes engine tool calls here and they go to the upstream server
//! through [`Upstream::call_tool_in`], on the connection the
//! [`SessionPool`] picks for the call's session. The call's session, run
//! and roots make its [`CallContext`], for interactions.
//!
//! Params are forwarded as given and the raw result comes back in
//! `result_json`; the processed result ([`crate::tools::results`]: model text,
//! attachments, structured content, outputSchema validation errors against
//! the [`Catalogue`]'s validators) fills the other response fields, and a
//! `tool.result` audit record is written. A tool's own failure (`isError`)
//! is a successful RPC; upstream failures map to gRPC status codes
//! ([`status_of`]). A call marked `retry_safe` that fails with a network
//! error (server exited, I/O, spawn) is sent again once, after
//! reconnecting; never otherwise. When the gRPC client cancels the call (or
//! its deadline passes), tonic drops the handler future, which drops the
//! upstream request future, which sends `notifications/cancelled` upstream.

use crate::background::{Plan, TaskCall, Tasks, TasksConfig};
use crate::error::{CallError, Deadline};
use crate::interactions::CallContext;
use crate::pool::SessionPool;
use crate::tools::catalogue::Catalogue;
use crate::tools::respond::Responder;
use crate::tools::results::ResultLimits;
use crate::tools::retry::RetrySafe;
use crate::upstream::{Upstream, UpstreamError};
use serde_json::{Value, json};
use std::time::Duration;
use switchyard_common::audit::Audit;
use switchyard_proto::calls::{self, SidecarCallFrames};
use switchyard_proto::v1::sidecar_calls_server::{SidecarCalls, SidecarCallsServer};
use switchyard_proto::v1::{
    SidecarCallFrame, SidecarCallOutcome, SidecarCallRequest, SidecarCallResponse,
};
use tonic::{Code, Request, Response, Status, Streaming};

/// The `SidecarCalls` implementation for one upstream server.
#[derive(Debug, Clone)]
pub struct CallService {
    pool: SessionPool,
    /// Cancelled when the sidecar shuts down: call streams take no new
    /// calls and end once theirs are done.
    stop: tokio_util::sync::CancellationToken,
    /// Cancelled when the shutdown grace period is over: the calls still
    /// running are cancelled (upstream too) and answer UNAVAILABLE.
    abort: tokio_util::sync::CancellationToken,
    responder: Responder,
    tasks_config: TasksConfig,
    tasks: Tasks,
}

impl CallService {
    /// A service calling tools on `upstream` (and, for a Streamable HTTP
    /// server that handles interactions, on per-session connections).
    pub fn new(upstream: Upstream) -> Self {
        Self::with_pool(SessionPool::new(upstream))
    }

    /// A service calling tools through `pool`.
    /// Results are processed with the default limits and not validated
    /// (an empty [`Catalogue`]); audit records go to the log. Calls never
    /// move to the background until [`CallService::with_tasks`] gives a
    /// registry.
    pub fn with_pool(pool: SessionPool) -> Self {
        let responder = Responder::default();
        let tasks_config = TasksConfig::default();
        CallService {
            tasks: Tasks::new(pool.clone(), responder.clone(), tasks_config.clone()),
            stop: tokio_util::sync::CancellationToken::new(),
            abort: tokio_util::sync::CancellationToken::new(),
            pool,
            responder,
            tasks_config,
        }
    }

    fn rebuilt(mut self) -> Self {
        self.tasks = Tasks::new(
            self.pool.clone(),
            self.responder.clone(),
            self.tasks_config.clone(),
        );
        self
    }

    /// Validates structured results with `catalogue`'s validators (kept up
    /// to date by [`crate::tools::watch::watch_upstream_with`]).
    pub fn with_catalogue(mut self, catalogue: Catalogue) -> Self {
        self.responder.catalogue = catalogue;
        self.rebuilt()
    }

    /// `stop` is cancelled when the sidecar shuts down: each `CallStream`
    /// then refuses new calls (UNAVAILABLE) and ends once its calls in
    /// flight are done, so the gRPC server can drain.
    pub fn with_stop(mut self, stop: tokio_util::sync::CancellationToken) -> Self {
        self.stop = stop;
        self
    }

    /// `abort` is cancelled when the sidecar's shutdown grace period is
    /// over: every foreground call still running (`CallTool` or on a call
    /// stream) is cancelled, which sends `notifications/cancelled`
    /// upstream, and answers UNAVAILABLE saying so.
    pub fn with_abort(mut self, abort: tokio_util::sync::CancellationToken) -> Self {
        self.abort = abort;
        self
    }

    /// Runs `call` unless the grace period ends first (see
    /// [`CallService::with_abort`]).
    async fn abortable<T>(
        &self,
        call: impl Future<Output = Result<T, Status>>,
    ) -> Result<T, Status> {
        tokio::select! {
            r = call => r,
            () = self.abort.cancelled() => Err(Status::unavailable(
                "the sidecar is shutting down and its grace period is over; the call was cancelled",
            )),
        }
    }

    /// Result size limits.
    pub fn with_limits(mut self, limits: ResultLimits) -> Self {
        self.responder.limits = limits;
        self.rebuilt()
    }

    /// Where `tool.result` audit records go.
    pub fn with_audit(mut self, audit: Audit) -> Self {
        self.responder.audit = audit;
        self.rebuilt()
    }

    /// Background calls and tasks (stage B, [`crate::background`]): settings,
    /// the control plane's registry, interactions and initiators. Call it
    /// after the other `with_` methods, then take [`CallService::tasks`].
    pub fn with_tasks(mut self, config: TasksConfig) -> Self {
        self.tasks_config = config;
        self.rebuilt()
    }

    /// The tasks machinery (for adoption by the report stream).
    pub fn tasks(&self) -> Tasks {
        self.tasks.clone()
    }

    /// The response for a raw result of `tool`, and the audit record.
    fn respond(
        &self,
        server: &str,
        tool: &str,
        context: &CallContext,
        result: &Value,
    ) -> Result<SidecarCallResponse, Status> {
        self.responder
            .respond(server, tool, context, result)
            .map_err(status)
    }
}

impl CallService {
    /// The tonic service, ready for `Server::add_service`.
    pub fn into_server(self) -> SidecarCallsServer<Self> {
        SidecarCallsServer::new(self)
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024)
    }
}

impl CallService {
    /// One `tools/call`, as `CallTool` and each `CallStream` call frame do
    /// it. Errors: INVALID_ARGUMENT for bad params or roots, and the
    /// upstream failures of [`status_of`].
    pub async fn call(&self, req: SidecarCallRequest) -> Result<SidecarCallResponse, Status> {
        let params: Value = serde_json::from_str(&req.params_json)
            .map_err(|e| Status::invalid_argument(format!("params_json is not valid JSON: {e}")))?;
        if !params.is_object() {
            return Err(Status::invalid_argument(
                "params_json must be a JSON object (tools/call params)",
            ));
        }
        let tool = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let roots = match req.roots_json.trim() {
            "" => Vec::new(),
            text => match serde_json::from_str::<Value>(text) {
                Ok(Value::Array(roots)) => roots,
                _ => {
                    return Err(Status::invalid_argument(
                        "roots_json must be a JSON array of MCP Root objects",
                    ));
                }
            },
        };
        let context = CallContext {
            session_id: req.session_id,
            run_id: req.run_id,
            tool: tool.clone(),
            roots,
        };
        let lease = self.pool.lease(&context.session_id);
        // Stage B: a task-capable tool, or a call that may move to the
        // background, goes through the tasks machinery.
        let plan = match self
            .tasks
            .plan(lease.upstream(), &tool, req.background.is_some())
            .await
        {
            Ok(plan) => plan,
            // A retry-safe call reconnects and retries below.
            Err(e)
                if retry_safe_request(req.retry_safe, &self.responder, &tool)
                    && e.is_connection_failure() =>
            {
                Plan::Plain
            }
            Err(e) => {
                tracing::info!(server = %lease.upstream().name(), %tool, error = %e, "call failed");
                return Err(status_of(&e));
            }
        };
        if plan != Plan::Plain {
            tracing::debug!(server = %lease.upstream().name(), %tool, ?plan, session = %context.session_id, "call through the tasks machinery");
            // Boxed: the tasks machinery's future is large, and plain
            // calls (the most) would carry its size otherwise.
            let started = tokio::time::Instant::now();
            return Box::pin(self.tasks.call(
                plan,
                TaskCall {
                    lease,
                    params,
                    context,
                    policy: req.background,
                    started,
                    deadline: Deadline::from_timeout_ms(started, req.timeout_ms),
                    retry: RetrySafe::of(req.retry_safe, &self.responder.catalogue, &tool),
                },
            ))
            .await
            .map_err(status);
        }
        let upstream = lease.upstream();
        tracing::debug!(server = %upstream.name(), %tool, session = %context.session_id, run = %context.run_id, "call");
        let retry_safe = retry_safe_request(req.retry_safe, &self.responder, &tool);
        let call = async {
            match upstream.call_tool_in(params.clone(), &context).await {
                Err(e)
                    if retry_safe
                        && e.is_connection_failure()
                        && !matches!(e, UpstreamError::Closed { .. }) =>
                {
                    upstream.metrics().retry();
                    tracing::info!(server = %upstream.name(), %tool, error = %e, "network error on a retry-safe call; reconnecting and retrying once");
                    upstream.call_tool_in(params, &context).await
                }
                other => other,
            }
        };
        let result = if req.timeout_ms > 0 {
            let limit = Duration::from_millis(req.timeout_ms);
            match tokio::time::timeout(limit, call).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(Status::deadline_exceeded(format!(
                        "server {}: tools/call {tool} did not finish within {} ms",
                        upstream.name(),
                        req.timeout_ms
                    )));
                }
            }
        } else {
            call.await
        };
        match result {
            Ok(result) => self.respond(upstream.name(), &tool, &context, &result),
            Err(e) => {
                tracing::info!(server = %upstream.name(), %tool, error = %e, "call failed");
                Err(status_of(&e))
            }
        }
    }
}

/// Calls in flight on one `CallStream`, at most; more get
/// RESOURCE_EXHAUSTED. The control plane sends all its calls to this
/// sidecar on one stream, so this bounds the sidecar's calls in flight,
/// not one engine's (the engine API has its own bound per stream).
pub const MAX_STREAM_CALLS: usize = 65_536;

type CallOutcomes = switchyard_proto::calls::Outcomes<SidecarCallOutcome>;

#[tonic::async_trait]
impl SidecarCalls for CallService {
    async fn call_tool(
        &self,
        request: Request<SidecarCallRequest>,
    ) -> Result<Response<SidecarCallResponse>, Status> {
        self.abortable(self.call(request.into_inner()))
            .await
            .map(Response::new)
    }

    type CallStreamStream = CallOutcomes;

    async fn call_stream(
        &self,
        request: Request<Streaming<SidecarCallFrame>>,
    ) -> Result<Response<CallOutcomes>, Status> {
        let this = self.clone();
        Ok(Response::new(calls::serve::<SidecarCallFrames, _, _>(
            request.into_inner(),
            MAX_STREAM_CALLS,
            self.stop.clone(),
            move |req, cancelled| {
                let this = this.clone();
                // Boxed: the call's future is large, and the task that runs
                // it would otherwise copy all of it when it is spawned.
                let call = Box::pin(async move {
                    let call = this.call(req);
                    this.abortable(call).await
                });
                async move {
                    // Dropping the call's future cancels the upstream
                    // request, as a dropped CallTool RPC does.
                    tokio::select! {
                        r = call => r,
                        _ = cancelled.cancelled() => Err(Status::cancelled("the control plane cancelled the call")),
                    }
                }
            },
        )))
    }
    async fn cancel_background_call(
        &self,
        request: Request<switchyard_proto::v1::SidecarCancelBackgroundRequest>,
    ) -> Result<Response<switchyard_proto::v1::SidecarCancelBackgroundResponse>, Status> {
        let req = request.into_inner();
        if req.id.is_empty() {
            return Err(Status::invalid_argument("id is required"));
        }
        let found = self.tasks.cancel(&req.id, &req.task_id).await;
        Ok(Response::new(
            switchyard_proto::v1::SidecarCancelBackgroundResponse { found },
        ))
    }
}

/// Whether a call may be sent again after a network error: the control
/// plane marks it, and also pushes the effective hints (admin overrides
/// applied): either says read-only or idempotent.
fn retry_safe_request(marked: bool, responder: &Responder, tool: &str) -> bool {
    marked
        || responder
            .catalogue
            .hints(tool)
            .is_some_and(|h| h.read_only_hint || h.idempotent_hint)
}

/// The gRPC status for a call's failure (see each [`CallError`] variant).
pub fn status(error: CallError) -> Status {
    let message = error.to_string();
    match error {
        CallError::InvalidArgument { .. } => Status::invalid_argument(message),
        CallError::Upstream(e) => status_of(&e),
        CallError::DeadlineExceeded { .. } | CallError::ForegroundLimit { .. } => {
            Status::deadline_exceeded(message)
        }
        CallError::TaskFailed {
            error: Some(object),
            ..
        } => Status::with_details(
            Code::FailedPrecondition,
            message,
            bytes::Bytes::from(object.to_string()),
        ),
        CallError::TaskFailed { error: None, .. } | CallError::TaskCancelled { .. } => {
            Status::aborted(message)
        }
        CallError::TaskNotFound { .. } => Status::failed_precondition(message),
        CallError::NotMoved { .. } | CallError::ShuttingDown => Status::unavailable(message),
        CallError::Cancelled { .. } => Status::cancelled(message),
        CallError::Internal { .. } => Status::internal(message),
    }
}

/// The gRPC status for an upstream failure. A JSON-RPC error answer is
/// `FAILED_PRECONDITION` with the error object (`code`, `message`, `data`
/// when present) as JSON text in the status details; connection-level
/// failures are `UNAVAILABLE`; a timeout is `DEADLINE_EXCEEDED`; the rest
/// is `INTERNAL`. Messages are the error's text, which names the server.
pub fn status_of(error: &UpstreamError) -> Status {
    match error {
        UpstreamError::Rpc {
            code,
            message,
            data,
            ..
        } => {
            let mut object = json!({"code": code, "message": message});
            if let Some(data) = data {
                object["data"] = data.clone();
            }
            Status::with_details(
                Code::FailedPrecondition,
                error.to_string(),
                bytes::Bytes::from(object.to_string()),
            )
        }
        UpstreamError::Exited { .. }
        | UpstreamError::Spawn { .. }
        | UpstreamError::Io { .. }
        | UpstreamError::Closed { .. }
        | UpstreamError::SessionExpired { .. }
        | UpstreamError::Unauthorized { .. } => Status::unavailable(error.to_string()),
        UpstreamError::Timeout { .. } => Status::deadline_exceeded(error.to_string()),
        UpstreamError::HttpStatus { .. }
        | UpstreamError::NoResponse { .. }
        | UpstreamError::MessageTooLarge { .. }
        | UpstreamError::Protocol { .. } => Status::internal(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_errors_carry_the_error_object() {
        let e = UpstreamError::Rpc {
            server: "s".into(),
            method: "tools/call".into(),
            code: -32602,
            message: "Unknown tool: x".into(),
            data: Some(json!({"k": 1})),
        };
        let st = status_of(&e);
        assert_eq!(st.code(), Code::FailedPrecondition);
        assert!(st.message().contains("server s"));
        let details: Value = serde_json::from_slice(st.details()).unwrap();
        assert_eq!(
            details,
            json!({"code": -32602, "message": "Unknown tool: x", "data": {"k": 1}})
        );
    }

    #[test]
    fn connection_failures_are_unavailable() {
        let e = UpstreamError::Exited {
            server: "s".into(),
            status: "exit status: 3".into(),
            stderr_tail: String::new(),
        };
        assert_eq!(status_of(&e).code(), Code::Unavailable);
        let e = UpstreamError::Timeout {
            server: "s".into(),
            method: "tools/call".into(),
            after: Duration::from_secs(1),
        };
        assert_eq!(status_of(&e).code(), Code::DeadlineExceeded);
        assert_eq!(
            status_of(&UpstreamError::protocol("s", "bad")).code(),
            Code::Internal
        );
    }
}
