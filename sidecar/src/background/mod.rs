//! Stage B (design §4 B): background calls and MCP tasks. A call that may
//! move to the background (the control plane sent a `BackgroundPolicy`), or
//! of a tool that runs as a task, comes here from the pipeline
//! ([`crate::call`]); everything else is a plain call. By job:
//!
//! - **Plan** ([`Tasks::plan`], here). 2025-11-25 (`basic/utilities/tasks`):
//!   the server declares `tasks.requests.tools.call` and the tool's
//!   `execution.taskSupport` is `required` or `optional` -> task mode.
//!   2026-07-28 (SEP-2663): the server's `server/discover` advertised the
//!   extension `io.modelcontextprotocol/tasks` -> task mode (the request
//!   declares it in its own `_meta`, merged with the era's by
//!   [`crate::upstream::era::apply_modern_meta`]). Otherwise a call that
//!   may move runs in wait mode (the request is held). A call that may not
//!   move (no policy) still survives a task answer: a 2025 `required` tool
//!   gets the task param anyway and is polled to the end in the
//!   foreground, within its deadline.
//! - **The foreground window** ([`Tasks::call`], here), counted from the
//!   call's start at the edge: `auto_after_ms` (never past the call's
//!   deadline) for a call that may move; `foreground_limit_ms` for one that
//!   may not because the server is at `maxPerTarget` (then
//!   `DEADLINE_EXCEEDED`, after `tasks/cancel`).
//! - **Task mode** ([`foreground`]): create the task, poll it in the
//!   foreground, move it to the background poller when the window ends.
//! - **The task wire, per era** ([`protocol`]).
//! - **Polling** ([`poller`]): the one poll step (results, `input_required`
//!   answered through the relay, [`Initiators`] attributing task-related
//!   server requests to the task's initiator) and one background poller per
//!   live call, on the connection that created the task.
//! - **Wait mode** ([`wait`]): the held request.
//! - **Reports** ([`report`]): every record to the control plane
//!   (`SidecarRegistry.UpdateBackgroundCall`), retried until acknowledged.
//! - **Cancel and adopt** ([`Tasks::cancel`], [`Tasks::adopt`], here):
//!   `tasks/cancel` (best effort) or abort the held call, stop polling,
//!   report cancelled; poll the calls of a sidecar that went away.
//! - **Metrics** ([`metrics`]):
//!   `switchyard_sidecar_task_polls_total{server,outcome}` and the gauge
//!   `switchyard_sidecar_background_calls{server,mode,status}`.
//!
//! Failures are [`CallError`]s (the pipeline's), mapped to gRPC once at the
//! edge.

pub mod foreground;
pub mod metrics;
pub mod poller;
pub mod protocol;
pub mod report;
pub mod wait;

pub use metrics::TaskMetrics;
pub use poller::{
    DEFAULT_FAILURE_LIMIT, DEFAULT_POLL_MIN, POLL_ABSENT, POLL_MAX, clamp_poll_interval,
};
pub use protocol::{
    MAX_TASK_ID_BYTES, MAX_TASK_INPUT_REQUESTS, TaskState, augment, cancel_task, created_task,
    declare_extension, get_task, is_not_found, status,
};
pub use report::{BackgroundRegistry, GrpcRegistry};

use crate::error::{CallError, Deadline};
use crate::interactions::{CallContext, Interactions, Relay, TaskInitiators};
use crate::pool::{Lease, SessionPool};
use crate::tools::respond::Responder;
use crate::tools::retry::RetrySafe;
use crate::upstream::{Era, Upstream, UpstreamError};
use poller::{Followed, Polled};
use protocol::cancel_task as cancel_upstream_task;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::time::now_ms;
use switchyard_mcp::meta;
use switchyard_proto::v1::{BackgroundCall, BackgroundPolicy, SidecarCallResponse};
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// Bound on the `tasks/cancel` a cancellation waits for.
const CANCEL_LIMIT: Duration = Duration::from_secs(10);

/// A foreground window with no other bound: the longest a call that may not
/// move waits in the foreground without a deadline of its own.
const UNBOUNDED_FOREGROUND: Duration = Duration::from_secs(600);

/// Settings of the tasks machinery.
#[derive(Debug, Clone)]
pub struct TaskSettings {
    /// Lower bound of the poll interval (`[sidecar] task_poll_min_ms`).
    pub poll_min: Duration,
    /// Continuous poll failure after which a call fails
    /// (`[sidecar] task_poll_failure_limit_secs`).
    pub failure_limit: Duration,
    /// This sidecar's id, written into the records it polls or holds.
    pub sidecar_id: String,
    /// How long an adopted task the server does not know ("task not
    /// found") is left to the sidecar that created it before it fails
    /// ([`DEFAULT_NOT_FOUND_GRACE`]): that sidecar may be alive and still
    /// polling it on its own connection (a stdio server's tasks live in
    /// its process), its registration lost for a moment, and then it
    /// reports the result.
    pub not_found_grace: Duration,
}

/// Default [`TaskSettings::not_found_grace`]: three of the control plane's
/// default sidecar lease TTLs (10 s), time for a sidecar whose
/// registration lapsed to register again and report.
pub const DEFAULT_NOT_FOUND_GRACE: Duration = Duration::from_secs(30);

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            poll_min: DEFAULT_POLL_MIN,
            failure_limit: DEFAULT_FAILURE_LIMIT,
            sidecar_id: String::new(),
            not_found_grace: DEFAULT_NOT_FOUND_GRACE,
        }
    }
}

/// Who initiated each live task: the relay's [`TaskInitiators`] hook. A
/// server request carrying `_meta["io.modelcontextprotocol/related-task"]`
/// belongs to the context registered here for its `taskId`.
#[derive(Debug, Default)]
pub struct Initiators {
    map: Mutex<HashMap<String, CallContext>>,
}

impl Initiators {
    /// An empty map.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, CallContext>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `task_id` belongs to `context`.
    pub fn set(&self, task_id: &str, context: CallContext) {
        self.lock().insert(task_id.to_owned(), context);
    }

    /// Forgets `task_id`.
    pub fn remove(&self, task_id: &str) {
        self.lock().remove(task_id);
    }

    /// Tasks known.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

impl TaskInitiators for Initiators {
    fn initiator(&self, task_id: &str) -> Option<CallContext> {
        self.lock().get(task_id).cloned()
    }
}

/// How a tool call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// A plain `tools/call` (no task, not held in the background).
    Plain,
    /// As an MCP task, in this era's protocol.
    Task(Era),
    /// Held (wait mode): the tool has no task support.
    Wait,
}

/// The answer to a call that moved to the background: the record as the
/// control plane stored it, the result fields empty.
fn moved(stored: BackgroundCall) -> SidecarCallResponse {
    SidecarCallResponse {
        background: Some(stored),
        ..Default::default()
    }
}

/// One call the tasks machinery runs ([`Tasks::call`]), as the pipeline
/// hands it over.
#[derive(Debug)]
pub struct TaskCall {
    /// The connection the call uses (kept while its task lives).
    pub lease: Lease,
    /// The whole `tools/call` params, as the engine sent them.
    pub params: Value,
    /// What the call belongs to.
    pub context: CallContext,
    /// How it may move to the background; `None`: it may not.
    pub policy: Option<BackgroundPolicy>,
    /// When the call reached the sidecar: foreground windows count from it.
    pub started: Instant,
    /// The call's deadline, if it has one.
    pub deadline: Option<Deadline>,
    /// Stage A: whether the `tools/call` may be sent again after a network
    /// error.
    pub retry: RetrySafe,
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// A result (`CallToolResult`, possibly `isError`).
    Completed(Value),
    /// Failed without a result: the reason, and the JSON-RPC error object.
    Failed {
        /// Why.
        message: String,
        /// The JSON-RPC error, when the server gave one.
        error: Option<Value>,
    },
    /// Cancelled (the server's status message).
    Cancelled(String),
    /// The server does not know the task.
    NotFound(String),
}

#[derive(Debug)]
struct Live {
    task_id: String,
    mode: &'static str,
    aborts: Vec<AbortHandle>,
    /// The connection of a task, and its era (for `tasks/cancel`).
    upstream: Option<(Upstream, Era)>,
    /// The latest record.
    record: Arc<Mutex<BackgroundCall>>,
}

/// Everything the tasks machinery needs besides the connections.
#[derive(Debug, Clone, Default)]
pub struct TasksConfig {
    /// Settings.
    pub settings: TaskSettings,
    /// Where records go; `None`: calls never move to the background (they
    /// stay in the foreground up to their limits).
    pub registry: Option<Arc<dyn BackgroundRegistry>>,
    /// How the server's questions are asked (2026 `inputRequests`).
    pub interactions: Option<Interactions>,
    /// The initiators of live tasks; give the same map to the upstream
    /// session's [`Interactions::tasks`].
    pub initiators: Arc<Initiators>,
    /// Metrics.
    pub metrics: TaskMetrics,
}

/// The tasks machinery of one server. Cheap to clone; clones share.
#[derive(Debug, Clone)]
pub struct Tasks {
    inner: Arc<TasksInner>,
}

#[derive(Debug)]
struct TasksInner {
    pool: SessionPool,
    responder: Responder,
    config: TasksConfig,
    relay: Arc<Relay>,
    live: Mutex<HashMap<String, Live>>,
    /// The `tasks/cancel` requests sent in the background, which the
    /// shutdown waits for before it ends the sessions
    /// ([`Tasks::cancels_sent`]).
    cancelling: tokio_util::task::TaskTracker,
}

impl Tasks {
    /// The machinery for the server behind `pool`; results are processed
    /// by `responder` (as a normal call's).
    pub fn new(pool: SessionPool, responder: Responder, config: TasksConfig) -> Self {
        let relay = Arc::new(Relay::new(
            pool.main().name(),
            config.interactions.clone(),
            None,
        ));
        Tasks {
            inner: Arc::new(TasksInner {
                pool,
                responder,
                config,
                relay,
                live: Mutex::new(HashMap::new()),
                cancelling: tokio_util::task::TaskTracker::new(),
            }),
        }
    }

    /// Sends a `tasks/cancel` in the background, tracked so that the
    /// shutdown waits for it ([`Tasks::cancels_sent`]).
    pub(super) fn spawn_cancel<F>(&self, send: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.inner.cancelling.spawn(send);
    }

    /// Waits up to `limit` for the `tasks/cancel` requests in flight: at
    /// shutdown, before the sessions they go on are ended (an HTTP
    /// server's `DELETE` must not overtake them, or the task runs on).
    pub async fn cancels_sent(&self, limit: std::time::Duration) {
        self.inner.cancelling.close();
        if tokio::time::timeout(limit, self.inner.cancelling.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                left = self.inner.cancelling.len(),
                "some tasks/cancel requests were not answered before the shutdown went on"
            );
        }
    }

    fn settings(&self) -> &TaskSettings {
        &self.inner.config.settings
    }

    fn initiators(&self) -> &Arc<Initiators> {
        &self.inner.config.initiators
    }

    fn metrics(&self) -> &TaskMetrics {
        &self.inner.config.metrics
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.inner.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ids of the background calls this sidecar polls or holds.
    pub fn live(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.lock().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// The ids of the task-mode calls this sidecar polls, for
    /// `SidecarReport.polling` (sorted).
    pub fn polling(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, l)| l.mode == "task")
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Stops polling the task-mode calls among `ids` (`ControlMessage.release`:
    /// another sidecar owns each now, or it is final): no `tasks/cancel`,
    /// no report. Held (wait-mode) calls and unknown ids are left alone.
    /// Returns how many were stopped.
    pub fn release(&self, ids: &[String]) -> usize {
        let mut released = 0;
        for id in ids {
            let live = {
                let mut live = self.lock();
                if live.get(id).is_none_or(|l| l.mode != "task") {
                    continue;
                }
                live.remove(id)
            };
            let Some(live) = live else { continue };
            for a in &live.aborts {
                a.abort();
            }
            self.initiators().remove(&live.task_id);
            tracing::info!(%id, task = %live.task_id, "stopped polling a background call another sidecar owns now (or that is final)");
            released += 1;
        }
        released
    }

    /// How many held (wait-mode) calls run here: they end with this
    /// process, so its drain waits for them ([`Tasks::held_finished`]).
    pub fn held(&self) -> usize {
        self.lock().values().filter(|l| l.mode == "wait").count()
    }

    /// Resolves once no held (wait-mode) call runs here (checked every
    /// 100 ms): the shutdown's drain waits for it within its grace period.
    pub async fn held_finished(&self) {
        while self.held() > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// How a call of `tool` on `upstream` runs (see the module docs).
    /// `background`: the call may move to the background. Connects first
    /// when not connected. Errors: that connection failed.
    pub async fn plan(
        &self,
        upstream: &Upstream,
        tool: &str,
        background: bool,
    ) -> Result<Plan, UpstreamError> {
        let otherwise = if background && self.inner.config.registry.is_some() {
            Plan::Wait
        } else {
            Plan::Plain
        };
        let negotiated = match upstream.negotiated() {
            Some(n) => n,
            // Boxed: rare, and its future is large. After a failed attempt
            // to connect, the call waits at most about a second for the
            // next ([`crate::upstream::REQUEST_BACKOFF`]).
            None => Box::pin(upstream.connect_for_request()).await?,
        };
        let caps = &negotiated.capabilities;
        match negotiated.era {
            Era::Modern => {
                if caps
                    .get("extensions")
                    .and_then(|e| e.get(meta::TASKS_EXTENSION))
                    .is_some_and(|v| !v.is_null())
                {
                    Ok(Plan::Task(Era::Modern))
                } else {
                    Ok(otherwise)
                }
            }
            Era::Legacy => {
                let declared = caps
                    .pointer("/tasks/requests/tools/call")
                    .is_some_and(|v| !v.is_null());
                if !declared {
                    return Ok(otherwise);
                }
                let catalogue = &self.inner.responder.catalogue;
                let definition = if catalogue.is_listed() {
                    catalogue.tool(tool)
                } else {
                    match upstream.list_tools().await {
                        Ok(tools) => tools
                            .entries
                            .into_iter()
                            .find(|t| t.get("name").and_then(Value::as_str) == Some(tool)),
                        Err(_) => None,
                    }
                };
                let support = definition
                    .as_ref()
                    .and_then(|d| d.pointer("/execution/taskSupport"))
                    .and_then(Value::as_str)
                    .unwrap_or("forbidden")
                    .to_owned();
                match support.as_str() {
                    "required" => Ok(Plan::Task(Era::Legacy)),
                    "optional" if background => Ok(Plan::Task(Era::Legacy)),
                    _ => Ok(otherwise),
                }
            }
        }
    }

    /// Runs `call`, planned as [`Plan::Task`] or [`Plan::Wait`], on its
    /// lease's connection (see the module docs). Errors: the upstream's;
    /// the foreground window passed for a call that cannot move
    /// (`DeadlineExceeded`, `ForegroundLimit`); the task failed, was
    /// cancelled or is unknown to the server; the control plane did not
    /// take the record of a call about to move (`NotMoved`).
    pub async fn call(&self, plan: Plan, call: TaskCall) -> Result<SidecarCallResponse, CallError> {
        match plan {
            Plan::Task(era) => self.call_task(era, call).await,
            Plan::Wait => match call.policy.clone() {
                Some(policy) if self.inner.config.registry.is_some() => {
                    self.call_wait(call, policy).await
                }
                _ => Err(CallError::internal("wait mode needs a background policy")),
            },
            Plan::Plain => Err(CallError::internal("not a task or wait-mode call")),
        }
    }

    /// The record of a call of `server`'s `tool` in `context`, started at
    /// `created_at_ms`, about to move under `policy` in `mode` (`task` or
    /// `wait`): working, owned by this sidecar; the mode's own fields are
    /// the caller's to fill in.
    fn moving_record(
        &self,
        policy: &BackgroundPolicy,
        server: &str,
        tool: &str,
        context: &CallContext,
        mode: &str,
        created_at_ms: i64,
    ) -> BackgroundCall {
        BackgroundCall {
            id: policy.background_call_id.clone(),
            server: server.to_owned(),
            tool: tool.to_owned(),
            engine_tool: policy.engine_tool.clone(),
            session_id: context.session_id.clone(),
            principal: policy.principal.clone(),
            run_id: context.run_id.clone(),
            mode: mode.into(),
            status: status::WORKING.into(),
            created_at_ms,
            updated_at_ms: now_ms(),
            deadline_ms: if policy.max_duration_ms > 0 {
                created_at_ms + policy.max_duration_ms as i64
            } else {
                0
            },
            sidecar_id: self.settings().sidecar_id.clone(),
            ..Default::default()
        }
    }

    /// The foreground window of a call (see the module docs): `None`, no
    /// bound, for a call without a policy or a deadline.
    fn window(
        policy: Option<&BackgroundPolicy>,
        deadline: Option<Deadline>,
        can_move: bool,
        started: Instant,
    ) -> Option<Deadline> {
        match policy {
            None => deadline,
            Some(p) => Some(Self::window_of(p, deadline, can_move, started)),
        }
    }

    /// The foreground window of a call with background `policy`.
    fn window_of(
        policy: &BackgroundPolicy,
        deadline: Option<Deadline>,
        can_move: bool,
        started: Instant,
    ) -> Deadline {
        if policy.allowed && can_move {
            let auto = Deadline::after(started, Duration::from_millis(policy.auto_after_ms));
            return deadline.map_or(auto, |d| d.min(auto));
        }
        if policy.foreground_limit_ms == 0 {
            deadline.unwrap_or_else(|| Deadline::after(started, UNBOUNDED_FOREGROUND))
        } else {
            Deadline::after(started, Duration::from_millis(policy.foreground_limit_ms))
        }
    }

    /// The error of a call whose foreground `window` passed while it could
    /// not move.
    fn limit_error(
        server: &str,
        tool: &str,
        policy: Option<&BackgroundPolicy>,
        window: Duration,
    ) -> CallError {
        match policy {
            Some(p) if !p.allowed => CallError::ForegroundLimit {
                server: server.to_owned(),
                tool: tool.to_owned(),
                limit: window,
            },
            _ => CallError::DeadlineExceeded {
                server: server.to_owned(),
                method: switchyard_mcp::methods::TOOLS_CALL,
                tool: tool.to_owned(),
                budget: window,
            },
        }
    }

    /// Cancels background call `id` (`task_id`: the server's, when known):
    /// stops polling or aborts the held call, sends `tasks/cancel` (best
    /// effort) and reports the call cancelled. True when this sidecar was
    /// polling or holding it; otherwise a `task_id` is still cancelled on
    /// the server (best effort).
    pub async fn cancel(&self, id: &str, task_id: &str) -> bool {
        let live = self.lock().remove(id);
        let Some(live) = live else {
            if !task_id.is_empty() {
                let upstream = self.inner.pool.main().clone();
                if let Some(n) = upstream.negotiated() {
                    let era = n.era;
                    let task_id = task_id.to_owned();
                    self.spawn_cancel(async move {
                        let _ = cancel_upstream_task(&upstream, era, &task_id).await;
                    });
                }
            }
            return false;
        };
        for a in &live.aborts {
            a.abort();
        }
        tracing::info!(%id, mode = live.mode, task = %live.task_id, "cancelling a background call");
        let mut record = live
            .record
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some((upstream, era)) = live.upstream {
            let task_id = live.task_id.clone();
            self.initiators().remove(&task_id);
            match tokio::time::timeout(CANCEL_LIMIT, cancel_upstream_task(&upstream, era, &task_id))
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::info!(%id, task = %task_id, error = %e, "tasks/cancel failed (best effort)");
                }
                Err(_) => {
                    tracing::info!(%id, task = %task_id, "tasks/cancel got no answer in time (best effort)");
                }
            }
        }
        if !status::is_terminal(&record.status) {
            let now = now_ms();
            record.status = status::CANCELLED.into();
            record.status_message = "cancelled by request".into();
            record.updated_at_ms = now;
            record.finished_at_ms = now;
            record.poll_after_ms = 0;
            let this = self.clone();
            tokio::spawn(async move {
                this.report(&record).await;
            });
        }
        true
    }

    /// Starts polling task-mode calls adopted from a sidecar that went
    /// away (`ControlMessage.adopt`); skips calls already polled here, wait
    /// mode calls and finished ones. Each is polled on a fresh lease of its
    /// session; its interactions belong to the session with no run.
    pub fn adopt(&self, calls: Vec<BackgroundCall>) {
        for mut call in calls {
            if call.mode == "wait"
                && !status::is_terminal(&call.status)
                && !self.lock().contains_key(&call.id)
            {
                // A held call this process does not hold: the sidecar that
                // held it restarted under the same id, and the request died
                // with it.
                tracing::warn!(id = %call.id, "a held (wait-mode) call was lost with an earlier sidecar process; reporting it failed");
                let now = now_ms();
                call.status = status::FAILED.into();
                call.status_message =
                    "the sidecar holding the call restarted; the held call was lost".into();
                call.updated_at_ms = now;
                call.finished_at_ms = now;
                let this = self.clone();
                tokio::spawn(async move {
                    this.report(&call).await;
                });
                continue;
            }
            if call.mode != "task" || call.task_id.is_empty() || status::is_terminal(&call.status) {
                tracing::info!(id = %call.id, mode = %call.mode, status = %call.status, "not adopting this background call");
                continue;
            }
            if self.lock().contains_key(&call.id) {
                tracing::debug!(id = %call.id, "already polling this background call");
                continue;
            }
            let era = if call.protocol_version.as_str() >= switchyard_mcp::era::MODERN_VERSION {
                Era::Modern
            } else {
                Era::Legacy
            };
            let lease = self.inner.pool.lease(&call.session_id);
            let context = CallContext {
                session_id: call.session_id.clone(),
                run_id: String::new(),
                tool: call.tool.clone(),
                roots: Vec::new(),
                progress: None,
                client: None,
                log_level: None,
            };
            self.initiators().set(&call.task_id, context.clone());
            let state = TaskState {
                task_id: call.task_id.clone(),
                status: call.status.clone(),
                status_message: (!call.status_message.is_empty())
                    .then(|| call.status_message.clone()),
                poll_interval_ms: (call.poll_interval_ms > 0).then_some(call.poll_interval_ms),
                ..Default::default()
            };
            let wait = Duration::from_millis((call.poll_after_ms - now_ms()).max(0) as u64);
            call.sidecar_id = self.settings().sidecar_id.clone();
            tracing::info!(id = %call.id, task = %call.task_id, in_ms = wait.as_millis() as u64, "adopted a background call");
            let task = Followed {
                upstream: lease.upstream().clone(),
                era,
                state,
                context,
                answered: HashSet::new(),
            };
            self.start_poller(Polled {
                record: call,
                lease,
                task,
                first: Instant::now() + wait,
                adopted: true,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initiators_answer_the_hook() {
        let i = Initiators::new();
        i.set(
            "t",
            CallContext {
                session_id: "s".into(),
                ..Default::default()
            },
        );
        assert_eq!(i.initiator("t").unwrap().session_id, "s");
        i.remove("t");
        assert!(i.initiator("t").is_none());
        assert!(i.is_empty());
    }
}
