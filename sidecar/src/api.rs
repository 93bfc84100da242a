//! The sidecar's gRPC edge, `switchyard.v1.SidecarCalls`: the control plane
//! routes engine tool calls here. The edge only decodes, runs the call
//! pipeline ([`crate::call`]) and encodes:
//!
//! - **decode** ([`decode`]): `params_json` (a JSON object, forwarded as
//!   given), `roots_json`, the session and run make a [`Call`]; its one
//!   [`Deadline`] is set here, from `timeout_ms`, counted from now;
//! - **run**: [`Pipeline::run`];
//! - **encode**: the response as the pipeline built it (`result_json` the
//!   raw result, the other fields the processed one); a [`CallError`]
//!   becomes a `tonic::Status` here and nowhere else ([`status`]). A
//!   tool's own failure (`isError`) is a successful RPC.
//!
//! `CallTool` runs one call; `CallStream` runs many on one stream
//! ([`switchyard_proto::calls::serve`]), each cancelled by a `cancel`
//! frame; `CancelBackgroundCall` cancels a background call (stage B). When
//! the gRPC client cancels a call (or its deadline passes), tonic drops the
//! handler future, which drops the upstream request future, which sends
//! `notifications/cancelled` upstream. On shutdown, call streams stop
//! taking calls ([`CallService::with_stop`]) and, once the grace period is
//! over, the calls still running are cancelled ([`CallService::with_abort`]).

use crate::background::{Tasks, TasksConfig};
use crate::call::{Call, Pipeline};
use crate::error::{CallError, Deadline};
use crate::interactions::CallContext;
use crate::pool::SessionPool;
use crate::tools::catalogue::Catalogue;
use crate::tools::respond::Responder;
use crate::tools::results::ResultLimits;
use crate::upstream::{Upstream, UpstreamError};
use serde_json::Value;
use switchyard_common::audit::Audit;
use switchyard_proto::calls::{self, SidecarCallFrames};
use switchyard_proto::v1::sidecar_calls_server::{SidecarCalls, SidecarCallsServer};
use switchyard_proto::v1::{
    SidecarCallFrame, SidecarCallOutcome, SidecarCallRequest, SidecarCallResponse,
    SidecarCancelBackgroundRequest, SidecarCancelBackgroundResponse,
};
use tokio_util::sync::CancellationToken;
use tonic::{Code, Request, Response, Status, Streaming};

/// Calls in flight on one `CallStream`, at most; more get
/// RESOURCE_EXHAUSTED. The control plane sends all its calls to this
/// sidecar on one stream, so this bounds the sidecar's calls in flight,
/// not one engine's (the engine API has its own bound per stream).
pub const MAX_STREAM_CALLS: usize = 65_536;

/// The `SidecarCalls` implementation for one upstream server.
#[derive(Debug, Clone)]
pub struct CallService {
    pool: SessionPool,
    /// Cancelled when the sidecar shuts down: call streams take no new
    /// calls and end once theirs are done.
    stop: CancellationToken,
    /// Cancelled when the shutdown grace period is over: the calls still
    /// running are cancelled (upstream too) and answer UNAVAILABLE.
    abort: CancellationToken,
    responder: Responder,
    tasks_config: TasksConfig,
    pipeline: Pipeline,
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
            pipeline: Pipeline::new(pool.clone(), responder.clone(), tasks_config.clone()),
            stop: CancellationToken::new(),
            abort: CancellationToken::new(),
            pool,
            responder,
            tasks_config,
        }
    }

    fn rebuilt(mut self) -> Self {
        self.pipeline = Pipeline::new(
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
    pub fn with_stop(mut self, stop: CancellationToken) -> Self {
        self.stop = stop;
        self
    }

    /// `abort` is cancelled when the sidecar's shutdown grace period is
    /// over: every foreground call still running (`CallTool` or on a call
    /// stream) is cancelled, which sends `notifications/cancelled`
    /// upstream, and answers UNAVAILABLE saying so.
    pub fn with_abort(mut self, abort: CancellationToken) -> Self {
        self.abort = abort;
        self
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

    /// Background calls and tasks (stage B, [`crate::background`]):
    /// settings, the control plane's registry, interactions and initiators.
    /// Call it after the other `with_` methods, then take
    /// [`CallService::tasks`].
    pub fn with_tasks(mut self, config: TasksConfig) -> Self {
        self.tasks_config = config;
        self.rebuilt()
    }

    /// The tasks machinery (for adoption by the report stream).
    pub fn tasks(&self) -> Tasks {
        self.pipeline.tasks().clone()
    }

    /// The tonic service, ready for `Server::add_service`.
    pub fn into_server(self) -> SidecarCallsServer<Self> {
        SidecarCallsServer::new(self)
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024)
    }

    /// One `tools/call`, as `CallTool` and each `CallStream` call frame do
    /// it: decoded, run through the pipeline unless the shutdown grace
    /// period ends first ([`CallService::with_abort`]), and its failure
    /// encoded ([`status`]).
    pub async fn call(&self, request: SidecarCallRequest) -> Result<SidecarCallResponse, Status> {
        let run = async {
            let call = decode(request)?;
            self.pipeline.run(call).await
        };
        tokio::select! {
            r = run => r,
            () = self.abort.cancelled() => Err(CallError::ShuttingDown),
        }
        .map_err(status)
    }
}

/// Decodes a call request into a [`Call`]: its deadline starts now.
/// Errors: `params_json` is not JSON or not an object; `roots_json` is
/// neither empty nor a JSON array (`InvalidArgument`, naming the field).
pub fn decode(request: SidecarCallRequest) -> Result<Call, CallError> {
    let started = tokio::time::Instant::now();
    let params: Value = serde_json::from_str(&request.params_json)
        .map_err(|e| CallError::invalid("params_json", format!("is not valid JSON: {e}")))?;
    if !params.is_object() {
        return Err(CallError::invalid(
            "params_json",
            "must be a JSON object (tools/call params)",
        ));
    }
    let tool = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let roots = match request.roots_json.trim() {
        "" => Vec::new(),
        text => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(roots)) => roots,
            _ => {
                return Err(CallError::invalid(
                    "roots_json",
                    "must be a JSON array of MCP Root objects",
                ));
            }
        },
    };
    Ok(Call {
        params,
        context: CallContext {
            session_id: request.session_id,
            run_id: request.run_id,
            tool,
            roots,
        },
        background: request.background,
        retry_safe: request.retry_safe,
        started,
        deadline: Deadline::from_timeout_ms(started, request.timeout_ms),
    })
}

type CallOutcomes = switchyard_proto::calls::Outcomes<SidecarCallOutcome>;

#[tonic::async_trait]
impl SidecarCalls for CallService {
    async fn call_tool(
        &self,
        request: Request<SidecarCallRequest>,
    ) -> Result<Response<SidecarCallResponse>, Status> {
        self.call(request.into_inner()).await.map(Response::new)
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
            move |request, cancelled| {
                let this = this.clone();
                // Boxed: the call's future is large, and the task that runs
                // it would otherwise copy all of it when it is spawned.
                let call = Box::pin(async move { this.call(request).await });
                async move {
                    // Dropping the call's future cancels the upstream
                    // request, as a dropped CallTool RPC does.
                    tokio::select! {
                        r = call => r,
                        _ = cancelled.cancelled() => Err(status(CallError::Cancelled {
                            reason: "the control plane cancelled the call",
                        })),
                    }
                }
            },
        )))
    }

    async fn cancel_background_call(
        &self,
        request: Request<SidecarCancelBackgroundRequest>,
    ) -> Result<Response<SidecarCancelBackgroundResponse>, Status> {
        let request = request.into_inner();
        if request.id.is_empty() {
            return Err(status(CallError::invalid("id", "is required")));
        }
        let found = self
            .pipeline
            .tasks()
            .cancel(&request.id, &request.task_id)
            .await;
        Ok(Response::new(SidecarCancelBackgroundResponse { found }))
    }

    async fn read_resource(
        &self,
        _: Request<switchyard_proto::v1::SidecarRequest>,
    ) -> Result<Response<switchyard_proto::v1::ReadResourceResponse>, Status> {
        Err(Status::unimplemented("stage E is being built"))
    }

    async fn get_prompt(
        &self,
        _: Request<switchyard_proto::v1::SidecarRequest>,
    ) -> Result<Response<switchyard_proto::v1::GetPromptResponse>, Status> {
        Err(Status::unimplemented("stage E is being built"))
    }

    async fn complete(
        &self,
        _: Request<switchyard_proto::v1::SidecarRequest>,
    ) -> Result<Response<switchyard_proto::v1::CompleteResponse>, Status> {
        Err(Status::unimplemented("stage E is being built"))
    }
}

/// The gRPC status of a call's failure: the one mapping from
/// [`CallError`] (each variant's doc names its code). The message is the
/// error's text; a JSON-RPC error object travels in the status details.
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
        UpstreamError::Rpc { .. } => Status::with_details(
            Code::FailedPrecondition,
            error.to_string(),
            bytes::Bytes::from(error.error_object().unwrap_or_default().to_string()),
        ),
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
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn call_errors_map_to_their_codes() {
        let code = |e: CallError| status(e).code();
        assert_eq!(
            code(CallError::invalid("id", "is required")),
            Code::InvalidArgument
        );
        assert_eq!(code(CallError::ShuttingDown), Code::Unavailable);
        assert_eq!(code(CallError::Cancelled { reason: "r" }), Code::Cancelled);
        assert_eq!(code(CallError::internal("x")), Code::Internal);
        let failed = |error| CallError::TaskFailed {
            server: "s".into(),
            tool: "t".into(),
            task_id: "k".into(),
            message: "boom".into(),
            error,
        };
        assert_eq!(code(failed(None)), Code::Aborted);
        let st = status(failed(Some(json!({"code": -1, "message": "boom"}))));
        assert_eq!(st.code(), Code::FailedPrecondition);
        assert_eq!(st.message(), "server s: task k of t failed: boom");
        let details: Value = serde_json::from_slice(st.details()).unwrap();
        assert_eq!(details, json!({"code": -1, "message": "boom"}));
        let not_moved = CallError::NotMoved {
            server: "s".into(),
            tool: "t".into(),
        };
        assert_eq!(code(not_moved), Code::Unavailable);
        let late = CallError::DeadlineExceeded {
            server: "s".into(),
            tool: "t".into(),
            budget: Duration::from_millis(300),
        };
        assert_eq!(code(late), Code::DeadlineExceeded);
    }

    #[test]
    fn requests_are_decoded_at_the_edge() {
        let request = |params: &str, roots: &str, timeout_ms| SidecarCallRequest {
            params_json: params.into(),
            roots_json: roots.into(),
            timeout_ms,
            session_id: "S".into(),
            ..Default::default()
        };
        let call = decode(request(r#"{"name": "t", "_meta": {"k": 1}}"#, "", 300)).unwrap();
        assert_eq!(call.params, json!({"name": "t", "_meta": {"k": 1}}));
        assert_eq!(
            (call.context.tool.as_str(), call.context.session_id.as_str()),
            ("t", "S")
        );
        let deadline = call.deadline.unwrap();
        assert_eq!(deadline.at(), call.started + Duration::from_millis(300));
        assert!(decode(request("{}", "", 0)).unwrap().deadline.is_none());
        let e = decode(request("[1]", "", 0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "params_json must be a JSON object (tools/call params)"
        );
        let e = decode(request("{}", "{}", 0)).unwrap_err();
        assert_eq!(status(e).code(), Code::InvalidArgument);
    }

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
