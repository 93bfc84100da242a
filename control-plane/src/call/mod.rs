//! THE call path: one tool call, from an engine's request to the sidecar
//! and back, shared by every front door (the gRPC `EngineService` today,
//! the MCP endpoint next). [`run`] reads top to bottom, one step per line:
//!
//! 0. read your writes: the read model has every write made through this
//!    replica ([`crate::state::State::caught_up`]);
//! 1. [`admit::session`]: the caller's own session (NOT_FOUND otherwise);
//! 2. [`resolve::resolve`]: the engine's tool name to server, tool and
//!    definition (a gateway tool of stage E: [`resolve::resolve_gateway`]);
//! 3. [`admit::admit`]: the policy decision in the session's permission
//!    mode (stage A);
//! 4. [`plan::plan`]: the sidecar request, the timeout, the background
//!    policy (stage B);
//! 5. [`approve::approve`]: the user's approval, when the policy asks
//!    (stage C);
//! 6. [`route`](mod@route): one deadline, set here, and a live sidecar of the server
//!    ([`route::Router`]: the "next sidecar" retry is declared there); a
//!    gateway tool is answered by [`request::gateway`] instead;
//! 7. [`record::ToolCalled`]: the log line, metrics and audit record of the
//!    finished call, whatever its end.
//!
//! [`request`] runs an engine's stage E requests (listing and reading
//! resources, getting prompts, completions) through the same steps.
//!
//! Errors are [`CallError`]s, mapped to a gRPC status once, in
//! `api::status`. A call whose engine goes away is cancelled through its
//! token and still recorded.

pub mod admit;
pub mod approve;
pub mod error;
pub mod plan;
pub mod record;
pub mod request;
pub mod resolve;
pub mod route;

pub use error::{CallError, Kind};

use crate::ControlPlane;
use crate::auth::Caller;
use crate::tools::policy::Decision;
use std::time::{Duration, Instant};
use switchyard_mcp::logging::Level;
use switchyard_proto::calls::Observer;
use switchyard_proto::v1 as pb;
use tokio_util::sync::CancellationToken;

/// How long a call waits for this replica's read model to have the writes
/// made through it (it normally has them before the write returns).
pub const CATCH_UP_LIMIT: Duration = Duration::from_secs(10);

/// How long past the call's deadline the router waits for the sidecar's
/// own answer (the sidecar enforces the deadline and says what timed out).
pub const ANSWER_GRACE: Duration = Duration::from_secs(1);

/// Runs one tool call `r` made by `caller`, until it ends or `cancelled`
/// is (a `CallToolStream` cancel frame, the stream or the unary RPC going
/// away). `progress`, when given, gets the server's
/// `notifications/progress` for the call (JSON text, the caller's
/// `progressToken` in `r.meta_json`), and with `log_level` its
/// `notifications/message` at that level or more severe (those the server
/// sent on the call's own response stream). Errors: NOT_FOUND, INVALID_ARGUMENT,
/// FAILED_PRECONDITION, UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED,
/// ALREADY_EXISTS (a `call_id` in use), or what the sidecar answered.
pub async fn run(
    cp: &ControlPlane,
    r: pb::CallToolRequest,
    caller: Option<&Caller>,
    cancelled: CancellationToken,
    progress: Option<Observer>,
    log_level: Option<Level>,
) -> Result<pb::CallToolResponse, CallError> {
    let started = Instant::now();
    // Read your writes: an admin write that returned on this replica is in
    // the read model the call decides from.
    if !cp.state.caught_up(CATCH_UP_LIMIT).await {
        return Err(CallError::unavailable(format!(
            "this replica's read model has not caught up with a write made through it within {} s; try again",
            CATCH_UP_LIMIT.as_secs()
        )));
    }
    let session = match r.session_id.as_str() {
        "" => None,
        id => Some(admit::session(cp, id, caller).await?),
    };
    let snap = cp.state.snapshot();
    let target = match crate::resources::gateway::tool(&r.tool) {
        Some(g) => resolve::resolve_gateway(&snap, g, &r.arguments_json)?,
        None => resolve::resolve(&snap, &r.tool)?,
    };
    let view = admit::admit(&snap, &target, session.as_ref(), &r.tool)?;
    // A gateway tool has no sidecar request to plan.
    let plan = match &target.gateway {
        Some((tool, args)) => Next::Gateway(*tool, args.clone()),
        None => Next::Route(Box::new(plan::plan(
            cp,
            &snap,
            &r,
            &target,
            session.as_ref(),
            caller,
            view.hints.retry_safe(),
        )?)),
    };
    // A call with an id can be cancelled by it, from any replica.
    if !r.call_id.is_empty() {
        check_id("call_id", &r.call_id)?;
    }
    let scope = route::call_scope(&r.session_id, caller);
    let guard = cp.router.track(&scope, &r.call_id).map_err(|_| {
        CallError::new(
            Kind::AlreadyExists,
            format!(
                "call_id: a call {:?} is already running in this {}",
                r.call_id,
                if r.session_id.is_empty() {
                    "caller's calls without a session"
                } else {
                    "session"
                }
            ),
        )
    })?;
    let approval_needed = view.decision == Decision::Approve;
    let (server, tool) = (target.server.as_str(), target.tool.as_str());
    let call = async {
        let approval = if approval_needed {
            let outcome = approve::approve(
                cp,
                &r.session_id,
                &r.run_id,
                server,
                tool,
                &r.arguments_json,
            )
            .await;
            if let Some(result) = outcome.not_approved_result(server, tool) {
                return (Some(outcome), Ok(approve::not_approved(result)));
            }
            Some(outcome)
        } else {
            None
        };
        let answer = match plan {
            Next::Route(plan) => route(cp, &snap, server, *plan, progress, log_level).await,
            // Boxed: rare, and its future would otherwise grow every
            // call's (moved with it).
            Next::Gateway(tool, args) => {
                Box::pin(request::gateway(
                    cp,
                    &snap,
                    tool,
                    &args,
                    session.as_ref(),
                    &r,
                ))
                .await
            }
        };
        (approval, answer)
    };
    let by_call_id = guard.as_ref().map(|g| g.token.clone()).unwrap_or_default();
    let (approval, outcome) = tokio::select! {
        r = call => r,
        _ = by_call_id.cancelled() => (None, Err(CallError::cancelled(format!("call {} cancelled", r.call_id)))),
        _ = cancelled.cancelled() => (None, Err(CallError::cancelled("call cancelled on its stream"))),
    };
    drop(guard);
    let result = outcome.map(|resp| respond(&r, server, tool, started, resp));
    record::ToolCalled {
        request: &r,
        server,
        tool,
        view: &view,
        approval_needed,
        approval: approval.as_ref(),
        started,
    }
    .emit(cp, &result);
    result
}

/// Where a planned call goes at step 6.
enum Next {
    /// To a sidecar of its server (boxed: the request is large, and the
    /// enum moves with the call's future).
    Route(Box<plan::Plan>),
    /// A gateway tool, answered here.
    Gateway(
        crate::resources::gateway::GatewayTool,
        crate::resources::gateway::Arguments,
    ),
}

/// Step 6: the call's one deadline, from its planned timeout, starting now
/// (after any approval); the sidecar gets the time left as `timeout_ms`
/// and enforces it, and the router waits [`ANSWER_GRACE`] more for its
/// answer. The call's progress goes to `progress`, when given, and its log
/// messages at `log_level` too.
async fn route(
    cp: &ControlPlane,
    snap: &crate::state::Snapshot,
    server: &str,
    plan: plan::Plan,
    progress: Option<Observer>,
    log_level: Option<Level>,
) -> Result<pb::SidecarCallResponse, CallError> {
    let deadline = tokio::time::Instant::now() + plan.timeout;
    let mut request = plan.request;
    request.timeout_ms = plan.timeout.as_millis() as u64;
    request.relay_progress = progress.is_some();
    request.log_level = match (&progress, log_level) {
        (Some(_), Some(level)) => level.as_str().to_owned(),
        _ => String::new(),
    };
    cp.router
        .call(snap, server, request, deadline + ANSWER_GRACE, progress)
        .await
}

/// The engine's answer from the sidecar's: a moved call is told so (stage
/// B: its result arrives later as a session event); else the processed
/// result.
fn respond(
    r: &pb::CallToolRequest,
    server: &str,
    tool: &str,
    started: Instant,
    resp: pb::SidecarCallResponse,
) -> pb::CallToolResponse {
    let duration_ms = started.elapsed().as_millis() as u64;
    match resp.background {
        Some(bg) => pb::CallToolResponse {
            text: crate::background::moved_text(&r.tool, &bg.id, &bg.immediate_response),
            server: server.to_owned(),
            upstream_tool: tool.to_owned(),
            duration_ms,
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
            upstream_tool: tool.to_owned(),
            duration_ms,
            attachments: resp.attachments,
            validation_errors: resp.validation_errors,
        },
    }
}

/// [`crate::model::check_id`] as a call's error.
fn check_id(field: &str, id: &str) -> Result<(), CallError> {
    crate::model::check_id(field, id).map_err(CallError::invalid_argument)
}
