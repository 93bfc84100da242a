//! The sidecar's call pipeline: one engine tool call, from the gRPC edge
//! ([`crate::api`], which decodes the request into a [`Call`]) to the
//! upstream server and back. [`Pipeline::run`] reads top to bottom:
//!
//! 1. **lease**: the connection for the call's session
//!    ([`SessionPool::lease`]: a Streamable HTTP server's connection of
//!    that session, else the shared one);
//! 2. **plan**: how the call runs ([`Tasks::plan`], stage B): plain, as an
//!    MCP task, or held in wait mode. A task or wait-mode call is handed to
//!    [`crate::background`], which runs the remaining steps itself (and may
//!    move the call to the background);
//! 3. **upstream**: the `tools/call`, its params exactly as the engine sent
//!    them, through the upstream session ([`crate::upstream`]; the retries
//!    the protocol mandates are listed in its docs), sent again once after
//!    a network error when the call is retry-safe ([`RetrySafe`], stage A);
//! 4. **results**: the raw result processed and validated against the
//!    tool's `outputSchema` ([`Responder::results`]);
//! 5. **respond**: the `tool.result` audit record and the response
//!    ([`Responder::response`]).
//!
//! One [`Deadline`], set at the edge from the request's `timeout_ms`,
//! bounds steps 2 and 3 (and, for stage B, the foreground window); below
//! it only the upstream session's per-request `request_timeout` applies.
//! Every failure is a [`CallError`], mapped to gRPC once, in
//! [`crate::api`]. A tool's own failure (`isError`) is a result, not an
//! error. Dropping the future of [`Pipeline::run`] (the engine went away,
//! the control plane cancelled) cancels the upstream request
//! (`notifications/cancelled`).

use crate::background::{Plan, TaskCall, Tasks, TasksConfig};
use crate::error::{CallError, Deadline, within};
use crate::interactions::CallContext;
use crate::pool::{Lease, SessionPool};
use crate::tools::respond::Responder;
use crate::tools::retry::RetrySafe;
use serde_json::Value;
use switchyard_mcp::methods::TOOLS_CALL;
use switchyard_proto::v1::{BackgroundPolicy, SidecarCallResponse};
use tokio::time::Instant;

/// One tool call, as the edge decoded it.
#[derive(Debug, Clone)]
pub struct Call {
    /// The whole `tools/call` params object (`name`, `arguments`, `_meta`,
    /// anything else), forwarded as given.
    pub params: Value,
    /// What the call belongs to: session, run, tool (the params' `name`)
    /// and the session's roots.
    pub context: CallContext,
    /// How the call may move to the background (stage B); `None`: it may
    /// not.
    pub background: Option<BackgroundPolicy>,
    /// The control plane marked the call safe to send again (its tool is
    /// read-only or idempotent).
    pub retry_safe: bool,
    /// When the call reached the sidecar.
    pub started: Instant,
    /// When the call must be over; `None`: no limit.
    pub deadline: Option<Deadline>,
}

/// The call pipeline of one upstream server (see the module docs). Cheap
/// to clone; clones share.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pool: SessionPool,
    responder: Responder,
    tasks: Tasks,
}

impl Pipeline {
    /// The pipeline calling through `pool`, processing results with
    /// `responder`, and running stage B with `tasks` (its registry,
    /// interactions and settings).
    pub fn new(pool: SessionPool, responder: Responder, tasks: TasksConfig) -> Self {
        Pipeline {
            tasks: Tasks::new(pool.clone(), responder.clone(), tasks),
            pool,
            responder,
        }
    }

    /// The tasks machinery (stage B).
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// Runs `call` to its response (see the module docs). Errors: every
    /// [`CallError`] but those of the edge (`InvalidArgument`,
    /// `ShuttingDown`, `Cancelled` by the control plane).
    pub async fn run(&self, call: Call) -> Result<SidecarCallResponse, CallError> {
        // 1. lease: the connection for the call's session.
        let lease = self.pool.lease(&call.context.session_id);
        // Stage A decides once whether the call may be sent again.
        let retry = RetrySafe::of(call.retry_safe);
        // 2. plan: plain, as a task, or held; stage B runs the rest of the
        // last two.
        let plan = self.plan(&lease, &call, retry).await?;
        if plan != Plan::Plain {
            return self.background(plan, lease, call, retry).await;
        }
        // 3. upstream: the `tools/call`, retry-safe, within the deadline.
        let Call {
            params,
            context,
            deadline,
            ..
        } = call;
        let result = self
            .upstream(&lease, params, &context, deadline, retry)
            .await?;
        // 4. results: processed and validated.
        let server = lease.upstream().name();
        let results = self.responder.results(server, &context.tool, &result)?;
        // 5. respond: audited and answered.
        Ok(self
            .responder
            .response(server, &context.tool, &context, results))
    }

    /// Step 2: the plan, within the call's deadline. The plan connects
    /// first when not connected; a retry-safe call whose connection failed
    /// goes on as a plain call, whose step 3 reconnects and retries.
    async fn plan(&self, lease: &Lease, call: &Call, retry: RetrySafe) -> Result<Plan, CallError> {
        let upstream = lease.upstream();
        let tool = &call.context.tool;
        let plan = self.tasks.plan(upstream, tool, call.background.is_some());
        match within(call.deadline, upstream.name(), TOOLS_CALL, tool, plan).await? {
            Ok(plan) => Ok(plan),
            Err(e) if retry.tolerates(&e) => Ok(Plan::Plain),
            Err(e) => {
                tracing::info!(server = %upstream.name(), %tool, error = %e, "call failed");
                Err(e.into())
            }
        }
    }

    /// Stage B runs steps 3 to 5 of a task or wait-mode call.
    async fn background(
        &self,
        plan: Plan,
        lease: Lease,
        call: Call,
        retry: RetrySafe,
    ) -> Result<SidecarCallResponse, CallError> {
        tracing::debug!(server = %lease.upstream().name(), tool = %call.context.tool, ?plan, session = %call.context.session_id, "call through the tasks machinery");
        let call = TaskCall {
            lease,
            params: call.params,
            context: call.context,
            policy: call.background,
            started: call.started,
            deadline: call.deadline,
            retry,
        };
        // Boxed: the tasks machinery's future is large, and plain calls
        // (the most) would carry its size otherwise.
        Box::pin(self.tasks.call(plan, call)).await
    }

    /// Step 3: the `tools/call` upstream, retry-safe, within the call's
    /// deadline.
    async fn upstream(
        &self,
        lease: &Lease,
        params: Value,
        context: &CallContext,
        deadline: Option<Deadline>,
        retry: RetrySafe,
    ) -> Result<Value, CallError> {
        let upstream = lease.upstream();
        let tool = &context.tool;
        tracing::debug!(server = %upstream.name(), %tool, session = %context.session_id, run = %context.run_id, "call");
        let sent = retry.call_tool(upstream, params, context);
        within(deadline, upstream.name(), TOOLS_CALL, tool, sent)
            .await?
            .map_err(|e| {
                tracing::info!(server = %upstream.name(), %tool, error = %e, "call failed");
                e.into()
            })
    }
}
