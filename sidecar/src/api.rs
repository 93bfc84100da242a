//! The sidecar's gRPC edge, `switchyard.v1.SidecarCalls`: the control plane
//! routes engine tool calls here, and stage E's requests (`ReadResource`,
//! `GetPrompt`, `Complete`, run by [`crate::resources::Requests`]). The
//! edge only decodes, runs the call pipeline ([`crate::call`]) or the
//! stage E request, and encodes:
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
//! A stage E request is decoded the same way ([`decode_request`]: its
//! `params_json` an object with the method's key, `uri` or `name` a
//! string, `ref` an object; `roots_json`; one [`Deadline`] from
//! `timeout_ms`) and stops at the end of the grace period like a call.
//!
//! `CallTool` runs one call; `CallStream` runs many on one stream
//! ([`switchyard_proto::calls::serve`]), each cancelled by a `cancel`
//! frame, and relays a call's progress notifications as notification
//! frames when it set `relay_progress`, and its log messages when it set
//! `log_level`; `CancelBackgroundCall` cancels a background call (stage
//! B). When the gRPC client cancels a call (or its deadline passes), tonic
//! drops the handler future, which drops the upstream request future,
//! which sends `notifications/cancelled` upstream. On shutdown, call streams stop
//! taking calls ([`CallService::with_stop`]) and, once the grace period is
//! over, the calls still running are cancelled ([`CallService::with_abort`]).

use crate::background::{Tasks, TasksConfig};
use crate::call::{Call, Pipeline};
use crate::error::{CallError, Deadline};
use crate::interactions::CallContext;
use crate::interactions::ProgressSink as Sink;
use crate::pool::SessionPool;
use crate::resources::{self, Requests};
use crate::tools::catalogue::Catalogue;
use crate::tools::respond::Responder;
use crate::tools::results::ResultLimits;
use crate::upstream::{Upstream, UpstreamError};
use serde_json::Value;
use switchyard_common::audit::Audit;
use switchyard_mcp::logging::{self, Level};
use switchyard_mcp::methods;
use switchyard_proto::calls::{self, SidecarCallFrames};
use switchyard_proto::v1::sidecar_calls_server::{SidecarCalls, SidecarCallsServer};
use switchyard_proto::v1::{
    CompleteResponse, GetPromptResponse, ReadResourceResponse, SidecarCallFrame,
    SidecarCallOutcome, SidecarCallRequest, SidecarCallResponse, SidecarCancelBackgroundRequest,
    SidecarCancelBackgroundResponse, SidecarRequest,
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
    /// Stage E's requests.
    resources: Requests,
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
            resources: Requests::new(pool.clone(), resources::DEFAULT_MAX_CONCURRENT_READS),
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
    /// to date by [`crate::watch::watch_upstream_with`]).
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

    /// At most `n` stage E reads and prompts processed at once (`[sidecar]
    /// max_concurrent_reads`; default
    /// [`resources::DEFAULT_MAX_CONCURRENT_READS`]).
    pub fn with_max_concurrent_reads(mut self, n: usize) -> Self {
        self.resources = Requests::new(self.pool.clone(), n);
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
        self.call_observed(request, None).await
    }

    /// [`CallService::call`], with the server's progress notifications
    /// handed to `progress` when the request set `relay_progress`, and its
    /// log messages when it set `log_level`.
    pub async fn call_observed(
        &self,
        request: SidecarCallRequest,
        progress: Option<Sink>,
    ) -> Result<SidecarCallResponse, Status> {
        let run = async {
            let relay = request.relay_progress || !request.log_level.is_empty();
            let mut call = decode(request)?;
            call.context.progress = progress.filter(|_| relay);
            self.pipeline.run(call).await
        };
        tokio::select! {
            r = run => r,
            () = self.abort.cancelled() => Err(CallError::ShuttingDown),
        }
        .map_err(status)
    }

    /// One stage E request of `method`: decoded ([`decode_request`]), run
    /// by `run` unless the shutdown grace period ends first, and its
    /// failure encoded ([`status`]).
    async fn stage_e<T, F>(
        &self,
        method: &'static str,
        request: SidecarRequest,
        run: impl FnOnce(Requests, resources::Request) -> F,
    ) -> Result<Response<T>, Status>
    where
        F: Future<Output = Result<T, CallError>>,
    {
        let requests = self.resources.clone();
        let run = async move { run(requests, decode_request(method, request)?).await };
        tokio::select! {
            r = run => r,
            () = self.abort.cancelled() => Err(CallError::ShuttingDown),
        }
        .map(Response::new)
        .map_err(status)
    }
}

/// `roots_json`: empty, or a JSON array of MCP `Root` objects.
fn decode_roots(roots_json: &str) -> Result<Vec<Value>, CallError> {
    match roots_json.trim() {
        "" => Ok(Vec::new()),
        text => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(roots)) => Ok(roots),
            _ => Err(CallError::invalid(
                "roots_json",
                "must be a JSON array of MCP Root objects",
            )),
        },
    }
}

/// `client_capabilities_json`: empty (`None`), or a JSON object.
fn decode_client(json: &str) -> Result<Option<Value>, CallError> {
    match json.trim() {
        "" => Ok(None),
        text => match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Object(_)) => Ok(Some(v)),
            _ => Err(CallError::invalid(
                "client_capabilities_json",
                "must be a JSON object (MCP ClientCapabilities)",
            )),
        },
    }
}

/// Decodes a stage E request of `method` (`resources/read`,
/// `prompts/get`, `completion/complete`): its deadline starts now.
/// Errors (`InvalidArgument`, naming the field): `params_json` is not a
/// JSON object, or lacks the method's key (`uri` or `name` a string,
/// `ref` and `argument` objects); `roots_json` is neither empty nor a
/// JSON array; `client_capabilities_json` neither empty nor an object.
pub fn decode_request(
    method: &'static str,
    request: SidecarRequest,
) -> Result<resources::Request, CallError> {
    let started = tokio::time::Instant::now();
    let params: Value = serde_json::from_str(&request.params_json)
        .map_err(|e| CallError::invalid("params_json", format!("is not valid JSON: {e}")))?;
    if !params.is_object() {
        return Err(CallError::invalid(
            "params_json",
            format!("must be a JSON object ({method} params)"),
        ));
    }
    // The method's own keys: (key, whether a string (else an object)).
    let required: &[(&str, bool)] = match method {
        methods::RESOURCES_READ => &[("uri", true)],
        methods::PROMPTS_GET => &[("name", true)],
        _ => &[("ref", false), ("argument", false)],
    };
    for &(key, string) in required {
        let (ok, kind) = match params.get(key) {
            Some(v) if string => (v.is_string(), "a string"),
            Some(v) => (v.is_object(), "an object"),
            None => (false, if string { "a string" } else { "an object" }),
        };
        if !ok {
            return Err(CallError::invalid(
                "params_json",
                format!("must have `{key}`, {kind} ({method} params)"),
            ));
        }
    }
    Ok(resources::Request {
        params,
        context: CallContext {
            session_id: request.session_id,
            run_id: request.run_id,
            tool: String::new(),
            roots: decode_roots(&request.roots_json)?,
            progress: None,
            client: decode_client(&request.client_capabilities_json)?,
            log_level: None,
        },
        started,
        deadline: Deadline::from_timeout_ms(started, request.timeout_ms),
        attach: request.attach,
        raw: request.raw,
    })
}

/// Decodes a call request into a [`Call`]: its deadline starts now.
/// Errors: `params_json` is not JSON or not an object; `roots_json` is
/// neither empty nor a JSON array; `client_capabilities_json` is neither
/// empty nor an object; `log_level` is neither empty nor an MCP log level
/// (`InvalidArgument`, naming the field).
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
    let roots = decode_roots(&request.roots_json)?;
    let log_level = match request.log_level.as_str() {
        "" => None,
        name => Some(Level::parse(name).ok_or_else(|| {
            CallError::invalid(
                "log_level",
                format!("{name:?} is not a log level (one of {})", logging::names()),
            )
        })?),
    };
    Ok(Call {
        params,
        context: CallContext {
            session_id: request.session_id,
            run_id: request.run_id,
            tool,
            roots,
            progress: None,
            client: decode_client(&request.client_capabilities_json)?,
            log_level,
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
            move |request, cancelled, notifier| {
                let this = this.clone();
                let progress = Sink::new(move |json| notifier.notify(json));
                // Boxed: the call's future is large, and the task that runs
                // it would otherwise copy all of it when it is spawned.
                let call =
                    Box::pin(async move { this.call_observed(request, Some(progress)).await });
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
        request: Request<SidecarRequest>,
    ) -> Result<Response<ReadResourceResponse>, Status> {
        self.stage_e(
            methods::RESOURCES_READ,
            request.into_inner(),
            |r, request| async move { r.read_resource(request).await },
        )
        .await
    }

    async fn get_prompt(
        &self,
        request: Request<SidecarRequest>,
    ) -> Result<Response<GetPromptResponse>, Status> {
        self.stage_e(
            methods::PROMPTS_GET,
            request.into_inner(),
            |r, request| async move { r.get_prompt(request).await },
        )
        .await
    }

    async fn complete(
        &self,
        request: Request<SidecarRequest>,
    ) -> Result<Response<CompleteResponse>, Status> {
        self.stage_e(
            methods::COMPLETE,
            request.into_inner(),
            |r, request| async move { r.complete(request).await },
        )
        .await
    }
}

/// The gRPC status of a call's failure: the one mapping from
/// [`CallError`] (each variant's doc names its code). The message is the
/// error's text; a JSON-RPC error object travels in the status details.
pub fn status(error: CallError) -> Status {
    let message = error.to_string();
    fit(match error {
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
        CallError::ResourceNotFound { error, .. } => Status::with_details(
            Code::NotFound,
            message,
            bytes::Bytes::from(error.to_string()),
        ),
        CallError::InvalidParams { error, .. } => Status::with_details(
            Code::InvalidArgument,
            message,
            bytes::Bytes::from(error.to_string()),
        ),
        CallError::NoCompletions { .. } => Status::unimplemented(message),
        CallError::TooLarge { .. } => Status::resource_exhausted(message),
        CallError::NotMoved { .. } | CallError::ShuttingDown => Status::unavailable(message),
        CallError::Cancelled { .. } => Status::cancelled(message),
        CallError::Internal { .. } => Status::internal(message),
    })
}

/// `status` within the sizes a status may have
/// ([`switchyard_proto::status::bounded`]): a server's long error text
/// must not break the connection the control plane's other calls share.
fn fit(status: Status) -> Status {
    switchyard_proto::status::bounded(status.code(), status.message(), status.details())
}

/// The gRPC status for an upstream failure. A JSON-RPC error answer is
/// `FAILED_PRECONDITION` with the error object (`code`, `message`, `data`
/// when present) as JSON text in the status details; connection-level
/// failures are `UNAVAILABLE`, and so are a failed handshake (no era both
/// sides speak, whatever the server answered), the server's refusals (401, 403)
/// and, for an `auth = "oauth"` server, no access token to send or a
/// scope it lacks (the message says an admin must authorize it); a
/// timeout is `DEADLINE_EXCEEDED`; an answer over `max_message_bytes` is
/// `RESOURCE_EXHAUSTED` (as a stage E answer over it is); the rest is
/// `INTERNAL`. Messages are
/// the error's text, which names the server.
pub fn status_of(error: &UpstreamError) -> Status {
    fit(match error {
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
        | UpstreamError::Handshake { .. }
        | UpstreamError::Unauthorized { .. }
        | UpstreamError::NotAuthorized { .. }
        | UpstreamError::InsufficientScope { .. } => Status::unavailable(error.to_string()),
        UpstreamError::Timeout { .. } => Status::deadline_exceeded(error.to_string()),
        UpstreamError::MessageTooLarge { .. } => Status::resource_exhausted(error.to_string()),
        UpstreamError::HttpStatus { .. }
        | UpstreamError::NoResponse { .. }
        | UpstreamError::Protocol { .. } => Status::internal(error.to_string()),
    })
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
            method: "tools/call",
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
        assert!(call.context.client.is_none() && !call.context.asks_roots());
        let client = SidecarCallRequest {
            client_capabilities_json: r#"{"roots": {}}"#.into(),
            ..request("{}", "", 0)
        };
        assert!(decode(client).unwrap().context.asks_roots());
        let not_object = SidecarCallRequest {
            client_capabilities_json: "[]".into(),
            ..request("{}", "", 0)
        };
        let e = decode(not_object).unwrap_err().to_string();
        assert!(e.contains("client_capabilities_json"), "{e}");
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
    fn stage_e_errors_map_to_their_codes() {
        let error = json!({"code": -32002, "message": "Resource not found", "data": {"uri": "x"}});
        let st = status(CallError::ResourceNotFound {
            server: "files".into(),
            uri: "file:///a b".into(),
            message: "Resource not found".into(),
            error: error.clone(),
        });
        assert_eq!(st.code(), Code::NotFound);
        assert_eq!(
            st.message(),
            r#"resource not found: server files has no resource "file:///a b" (the server said: Resource not found)"#
        );
        assert_eq!(
            serde_json::from_slice::<Value>(st.details()).unwrap(),
            error
        );
        let st = status(CallError::InvalidParams {
            server: "s".into(),
            method: "prompts/get",
            about: r#""p""#.into(),
            message: "missing city".into(),
            error: json!({"code": -32602, "message": "missing city"}),
        });
        assert_eq!(st.code(), Code::InvalidArgument);
        assert_eq!(st.message(), r#"server s: prompts/get "p": missing city"#);
        let st = status(CallError::NoCompletions {
            server: "s".into(),
            message: "Method not found".into(),
        });
        assert_eq!(st.code(), Code::Unimplemented);
        assert!(st.message().starts_with("server s offers no completions"));
        let st = status(CallError::TooLarge {
            server: "s".into(),
            method: "resources/read",
            about: r#""u""#.into(),
            size: 2,
            limit: 1,
            key: "the server's max_message_bytes",
        });
        assert_eq!(st.code(), Code::ResourceExhausted);
    }

    #[test]
    fn stage_e_requests_are_decoded_at_the_edge() {
        let request = |params: &str, timeout_ms| SidecarRequest {
            params_json: params.into(),
            timeout_ms,
            session_id: "S".into(),
            run_id: "R".into(),
            roots_json: r#"[{"uri": "file:///w"}]"#.into(),
            attach: true,
            raw: false,
            client_capabilities_json: String::new(),
        };
        // The URI is kept byte-exact, `_meta` and unknown fields too.
        let params = r#"{"uri": "demo://a/../b%20c?q=é", "_meta": {"k": 1}, "x": 1.50}"#;
        let r = decode_request("resources/read", request(params, 250)).unwrap();
        assert_eq!(r.params, serde_json::from_str::<Value>(params).unwrap());
        assert_eq!(r.params["uri"], "demo://a/../b%20c?q=é");
        assert_eq!(
            (r.context.session_id.as_str(), r.context.run_id.as_str()),
            ("S", "R")
        );
        assert_eq!(r.context.roots, vec![json!({"uri": "file:///w"})]);
        assert!(r.attach);
        assert_eq!(
            r.deadline.unwrap().at(),
            r.started + Duration::from_millis(250)
        );
        assert!(
            decode_request("prompts/get", request(r#"{"name": "p"}"#, 0))
                .unwrap()
                .deadline
                .is_none()
        );
        let e = decode_request("resources/read", request(r#"{"uri": 5}"#, 0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "params_json must have `uri`, a string (resources/read params)"
        );
        let e = decode_request("prompts/get", request("[]", 0)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "params_json must be a JSON object (prompts/get params)"
        );
        let e = decode_request(
            "completion/complete",
            request(r#"{"ref": {"type": "ref/prompt", "name": "p"}}"#, 0),
        )
        .unwrap_err();
        assert_eq!(status(e).code(), Code::InvalidArgument);
        let mut bad_roots = request(r#"{"name": "p"}"#, 0);
        bad_roots.roots_json = "{}".into();
        let e = decode_request("prompts/get", bad_roots).unwrap_err();
        assert_eq!(
            e.to_string(),
            "roots_json must be a JSON array of MCP Root objects"
        );
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
        // Too large, as for a stage E answer.
        let e = UpstreamError::MessageTooLarge {
            server: "s".into(),
            method: "tools/call".into(),
            size: 5000,
            limit: 4096,
        };
        let st = status_of(&e);
        assert_eq!(st.code(), Code::ResourceExhausted);
        assert_eq!(
            st.message(),
            "server s: response to tools/call is 5000 bytes or more, over the 4096-byte limit"
        );
    }
}
