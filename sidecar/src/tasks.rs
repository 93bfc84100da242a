//! Background calls and MCP tasks (design §4 B, stage B): ALL of the
//! sidecar's task protocol code, in both eras, because the tasks API is
//! still moving between them.
//!
//! - **Mode** ([`Tasks::plan`]). 2025-11-25 (`basic/utilities/tasks`): the
//!   server declares `tasks.requests.tools.call` and the tool's
//!   `execution.taskSupport` is `required` or `optional` -> task mode: the
//!   `tools/call` params get `task: {"ttl": <max duration ms>}`, and the
//!   answer is a `CreateTaskResult` (`{task: {taskId, status, pollInterval,
//!   ...}, _meta?}`). 2026-07-28 (SEP-2663, extension
//!   `io.modelcontextprotocol/tasks`): when `server/discover` advertised the
//!   extension, the request declares it in its own
//!   `_meta["io.modelcontextprotocol/clientCapabilities"].extensions`
//!   (merged with the era's own `_meta` by
//!   [`crate::upstream::era::apply_modern_meta`]) and the server may answer
//!   `resultType: "task"`. Otherwise a call that may move to the background
//!   runs in wait mode (the request is held). A call that may not move (no
//!   `background` policy) still survives a task answer: a 2025 `required`
//!   tool gets the task param anyway and is polled to the end in the
//!   foreground, within `timeout_ms`.
//! - **Foreground** ([`Tasks::call`]): `tasks/get` at the clamped interval
//!   ([`clamp_poll_interval`]: the server's `pollInterval`/`pollIntervalMs`
//!   within [`task_poll_min_ms`, 5 min], 30 s when absent) until
//!   `auto_after_ms`; a terminal task's result (2025: `tasks/result`; 2026:
//!   `result`/`error` inline in `tasks/get`) is processed like a normal
//!   call's. Not done in time -> the record is registered with the control
//!   plane (`SidecarRegistry.UpdateBackgroundCall`, status working, this
//!   sidecar's id, poll fields, the CreateTaskResult's
//!   `io.modelcontextprotocol/model-immediate-response`), then the call is
//!   answered with `background` set. `allowed == false` (the server is at
//!   `maxPerTarget`): foreground up to `foreground_limit_ms`, then
//!   `tasks/cancel` and `DEADLINE_EXCEEDED`. A foreground call dropped by
//!   its gRPC client cancels its task (`tasks/cancel`, best effort).
//! - **Background poller**: one tokio task per live call, sleeping until
//!   its next poll (10,000 live calls cost 10,000 sleeping tasks and their
//!   timers). Changes (status, statusMessage, poll interval, poll errors set
//!   or cleared) are reported; a terminal status is reported with the
//!   processed result. Reports are retried with backoff until acknowledged
//!   (the control client reconnects, reaching another replica). A stored
//!   record that comes back terminal (a user cancelled) stops polling.
//!   Network errors are retried at the next poll; failing continuously for
//!   `task_poll_failure_limit_secs` (30 min), a task the server does not
//!   know ("task not found") or the call's `deadline_ms` passing fails the
//!   call (the last with `tasks/cancel`).
//! - **input_required**: 2025 -> `tasks/result`, which blocks while the
//!   server asks (`elicitation/create` with
//!   `_meta["io.modelcontextprotocol/related-task"]`, attributed through
//!   [`Initiators`], the relay's [`TaskInitiators`] hook, to the task's
//!   initiating session, with an empty run id once in the background);
//!   2026 -> each new key of `inputRequests` (deduplicated across polls) is
//!   answered through the relay ([`mrtr::answer_inputs`]) and sent with
//!   `tasks/update {taskId, inputResponses}`.
//! - **Connections**: polling uses the connection that created the task and
//!   holds its [`Lease`] while the task lives (an HTTP per-session
//!   connection is not evicted). An adopted call ([`Tasks::adopt`], after
//!   another sidecar went away) is polled on a fresh lease of its session.
//! - **Wait mode**: the `tools/call` runs in a spawned task; not finished
//!   after `auto_after_ms` -> registered (mode `wait`) and answered as
//!   moved; its end is reported (processed result, or failed). It is lost
//!   when the sidecar restarts (the control plane fails it). The held
//!   request is bounded by the server's `request_timeout_sec` like any.
//! - **Cancel** ([`Tasks::cancel`]): `tasks/cancel` (best effort) or abort
//!   the held call, stop polling, report cancelled.
//!
//! Metrics: `switchyard_sidecar_task_polls_total{server,outcome}` and the gauge
//! `switchyard_sidecar_background_calls{server,mode,status}` ([`TaskMetrics`]).

use crate::interactions::{CallContext, Interactions, Relay, TaskInitiators, mrtr};
use crate::pool::{Lease, SessionPool};
use crate::service::status_of;
use crate::tools::respond::Responder;
use crate::upstream::{Era, Upstream, UpstreamError};
use futures::future::BoxFuture;
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::time::now_ms;
use switchyard_common::tls::AuthChannel;
use switchyard_mcp::meta;
use switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient;
use switchyard_proto::v1::{
    BackgroundCall, BackgroundPolicy, BackgroundResult, SidecarCallResponse,
    UpdateBackgroundCallRequest,
};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tonic::Status;

/// Default lower bound of the poll interval.
pub const DEFAULT_POLL_MIN: Duration = Duration::from_secs(5);
/// Upper bound of the poll interval.
pub const POLL_MAX: Duration = Duration::from_secs(300);
/// Poll interval when the server suggests none.
pub const POLL_ABSENT: Duration = Duration::from_secs(30);
/// Default bound on continuous poll failure before a call fails.
pub const DEFAULT_FAILURE_LIMIT: Duration = Duration::from_secs(30 * 60);
/// First delay between attempts of one report to the control plane.
const REPORT_MIN_BACKOFF: Duration = Duration::from_millis(200);
/// Largest delay between attempts of one report.
const REPORT_MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Bound on one `UpdateBackgroundCall` RPC.
const REPORT_RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on the `tasks/cancel` a cancellation waits for.
const CANCEL_LIMIT: Duration = Duration::from_secs(10);
/// How long a call about to move keeps trying to register before it fails.
const REGISTER_LIMIT: Duration = Duration::from_secs(30);

/// Task and background call statuses (the MCP task statuses).
pub mod status {
    /// Running.
    pub const WORKING: &str = "working";
    /// The server waits for the client's input.
    pub const INPUT_REQUIRED: &str = "input_required";
    /// Finished with a result (possibly `isError`).
    pub const COMPLETED: &str = "completed";
    /// Finished without one.
    pub const FAILED: &str = "failed";
    /// Cancelled.
    pub const CANCELLED: &str = "cancelled";

    /// Whether `status` is final.
    pub fn is_terminal(status: &str) -> bool {
        matches!(status, COMPLETED | FAILED | CANCELLED)
    }

    /// Whether `status` is one of the five task statuses.
    pub fn is_known(status: &str) -> bool {
        matches!(status, WORKING | INPUT_REQUIRED) || is_terminal(status)
    }
}

/// The longest `taskId` accepted from a server, in bytes: it is stored in
/// the background call record (which must stay small) and sent back on
/// every poll.
pub const MAX_TASK_ID_BYTES: usize = 4096;

/// The most `inputRequests` keys (2026) one task may ask in its life: past
/// it, the task is cancelled and the call fails, rather than the server
/// asking the initiator's session forever.
pub const MAX_TASK_INPUT_REQUESTS: usize = 64;

/// At most 200 characters of `value`'s JSON text, for error messages.
fn excerpt(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}... ({} bytes)", &text[..i], text.len()),
        None => text,
    }
}

/// The poll interval for a server suggestion of `server_ms` milliseconds:
/// clamped to [`min`, [`POLL_MAX`]]; [`POLL_ABSENT`] (also clamped) when the
/// server gave none (design §4 B).
pub fn clamp_poll_interval(server_ms: Option<u64>, min: Duration) -> Duration {
    let min = min.min(POLL_MAX);
    server_ms
        .map(Duration::from_millis)
        .unwrap_or(POLL_ABSENT)
        .clamp(min, POLL_MAX)
}

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
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            poll_min: DEFAULT_POLL_MIN,
            failure_limit: DEFAULT_FAILURE_LIMIT,
            sidecar_id: String::new(),
        }
    }
}

/// Where background call records go: the control plane's
/// `SidecarRegistry.UpdateBackgroundCall` (an idempotent upsert by id that
/// answers the stored record).
pub trait BackgroundRegistry: Send + Sync + std::fmt::Debug {
    /// Stores `call` (the whole record); answers the record as stored.
    fn update(&self, call: BackgroundCall) -> BoxFuture<'static, Result<BackgroundCall, Status>>;
}

/// [`BackgroundRegistry`] over gRPC.
#[derive(Debug, Clone)]
pub struct GrpcRegistry {
    client: SidecarRegistryClient<AuthChannel>,
}

impl GrpcRegistry {
    /// Reports through `client` (a lazily connected channel reconnects
    /// after a replica goes away).
    pub fn new(client: SidecarRegistryClient<AuthChannel>) -> Self {
        GrpcRegistry { client }
    }
}

impl BackgroundRegistry for GrpcRegistry {
    fn update(&self, call: BackgroundCall) -> BoxFuture<'static, Result<BackgroundCall, Status>> {
        let mut client = self.client.clone();
        Box::pin(async move {
            let request = UpdateBackgroundCallRequest { call: Some(call) };
            match tokio::time::timeout(REPORT_RPC_TIMEOUT, client.update_background_call(request))
                .await
            {
                Ok(r) => r.map(tonic::Response::into_inner),
                Err(_) => Err(Status::deadline_exceeded(
                    "UpdateBackgroundCall got no answer in time",
                )),
            }
        })
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

/// The metrics of background calls.
#[derive(Debug, Clone)]
pub struct TaskMetrics {
    polls: IntCounterVec,
    live: IntGaugeVec,
}

impl Default for TaskMetrics {
    fn default() -> Self {
        Self::unregistered()
    }
}

impl TaskMetrics {
    /// Creates the metrics and registers them in `registry`.
    /// Errors: a name already registered there (prometheus `AlreadyReg`).
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        registry.register(Box::new(m.polls.clone()))?;
        registry.register(Box::new(m.live.clone()))?;
        Ok(m)
    }

    /// Metrics counted but exported nowhere (tests).
    pub fn unregistered() -> Self {
        TaskMetrics {
            polls: IntCounterVec::new(
                Opts::new(
                    "switchyard_sidecar_task_polls_total",
                    "tasks/get polls of MCP tasks, by server and outcome (ok, error, not_found).",
                ),
                &["server", "outcome"],
            )
            .expect("valid metric"),
            live: IntGaugeVec::new(
                Opts::new(
                    "switchyard_sidecar_background_calls",
                    "Background calls this sidecar polls or holds, by server, mode (task, wait) and status.",
                ),
                &["server", "mode", "status"],
            )
            .expect("valid metric"),
        }
    }

    fn poll(&self, server: &str, outcome: &str) {
        self.polls.with_label_values(&[server, outcome]).inc();
    }
}

/// Counts one live call in the gauge while it lives.
struct LiveGauge {
    metrics: TaskMetrics,
    server: String,
    mode: &'static str,
    status: String,
}

/// The gauge's `status` label: a task status, or `unknown` for anything
/// else a server may send (labels stay bounded).
fn status_label(status: &str) -> &'static str {
    match status {
        status::WORKING => status::WORKING,
        status::INPUT_REQUIRED => status::INPUT_REQUIRED,
        status::COMPLETED => status::COMPLETED,
        status::FAILED => status::FAILED,
        status::CANCELLED => status::CANCELLED,
        _ => "unknown",
    }
}

impl LiveGauge {
    fn new(metrics: &TaskMetrics, server: &str, mode: &'static str, status: &str) -> Self {
        let status = status_label(status);
        metrics
            .live
            .with_label_values(&[server, mode, status])
            .inc();
        LiveGauge {
            metrics: metrics.clone(),
            server: server.to_owned(),
            mode,
            status: status.to_owned(),
        }
    }

    fn set(&mut self, status: &str) {
        let status = status_label(status);
        if status == self.status {
            return;
        }
        self.metrics
            .live
            .with_label_values(&[&self.server, self.mode, &self.status])
            .dec();
        self.metrics
            .live
            .with_label_values(&[&self.server, self.mode, status])
            .inc();
        self.status = status.to_owned();
    }
}

impl Drop for LiveGauge {
    fn drop(&mut self) {
        self.metrics
            .live
            .with_label_values(&[&self.server, self.mode, &self.status])
            .dec();
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

/// What the server said about a task (`tasks/get`, or the
/// `CreateTaskResult`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskState {
    /// The server's `taskId`.
    pub task_id: String,
    /// The status.
    pub status: String,
    /// `statusMessage`, if any.
    pub status_message: Option<String>,
    /// `pollInterval` (2025) or `pollIntervalMs` (2026), ms.
    pub poll_interval_ms: Option<u64>,
    /// 2026: `inputRequests` of an `input_required` task.
    pub input_requests: Option<Value>,
    /// 2026: `result` of a completed task.
    pub result: Option<Value>,
    /// 2026: `error` of a failed task.
    pub error: Option<Value>,
}

impl TaskState {
    /// Parses a Task object (2025 `Task`, 2026 `DetailedTask`/
    /// `CreateTaskResult`). Errors (the message names the field and what
    /// was wrong): `taskId` absent, not a string, empty or longer than
    /// [`MAX_TASK_ID_BYTES`]; `status` absent or not one of the five task
    /// statuses (2025-11-25 schema `TaskStatus`).
    pub fn parse(task: &Value) -> Result<Self, String> {
        let text = |k: &str| task.get(k).and_then(Value::as_str).map(str::to_owned);
        let task_id = match task.get("taskId") {
            None => return Err(format!("a task without taskId: {}", excerpt(task))),
            Some(Value::String(id)) if id.is_empty() => {
                return Err("taskId is an empty string".into());
            }
            Some(Value::String(id)) if id.len() > MAX_TASK_ID_BYTES => {
                return Err(format!(
                    "taskId is {} bytes long, over the {MAX_TASK_ID_BYTES}-byte limit",
                    id.len()
                ));
            }
            Some(Value::String(id)) => id.clone(),
            Some(other) => {
                return Err(format!("taskId is not a string: {}", excerpt(other)));
            }
        };
        let status = match task.get("status") {
            None => return Err(format!("a task without status: {}", excerpt(task))),
            Some(Value::String(s)) if status::is_known(s) => s.clone(),
            Some(other) => {
                return Err(format!(
                    "task {task_id}: status {} is not a task status (working, input_required, completed, failed, cancelled)",
                    excerpt(other)
                ));
            }
        };
        let poll_interval_ms = task
            .get("pollIntervalMs")
            .or_else(|| task.get("pollInterval"))
            .and_then(Value::as_f64)
            .filter(|v| *v >= 0.0)
            .map(|v| v as u64);
        Ok(TaskState {
            task_id,
            status,
            status_message: text("statusMessage"),
            poll_interval_ms,
            input_requests: task.get("inputRequests").cloned(),
            result: task.get("result").cloned(),
            error: task.get("error").cloned(),
        })
    }
}

/// The task a `tools/call` answer created, if it is a `CreateTaskResult`:
/// 2025 `{task: {...}}` without `content`; 2026 `resultType: "task"`.
pub fn created_task(result: &Value) -> Option<Result<TaskState, String>> {
    if result.get("resultType").and_then(Value::as_str) == Some("task") {
        return Some(TaskState::parse(result));
    }
    match result.get("task") {
        Some(task) if task.is_object() && result.get("content").is_none() => {
            Some(TaskState::parse(task))
        }
        _ => None,
    }
}

/// `params` with `_meta["io.modelcontextprotocol/clientCapabilities"]
/// .extensions["io.modelcontextprotocol/tasks"] = {}` (2026-07-28).
pub fn declare_extension(mut params: Value) -> Value {
    if let Value::Object(p) = &mut params {
        let meta = p
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            let caps = meta
                .entry(meta::CLIENT_CAPABILITIES)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(caps) = caps {
                let ext = caps
                    .entry("extensions")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(ext) = ext {
                    ext.insert(meta::TASKS_EXTENSION.into(), json!({}));
                }
            }
        }
    }
    params
}

/// `tools/call` params augmented for a task in `era`: 2025 adds
/// `task: {ttl?}`; 2026 declares the extension.
pub fn augment(era: Era, mut params: Value, ttl_ms: Option<u64>) -> Value {
    match era {
        Era::Legacy => {
            if let Value::Object(p) = &mut params {
                let task = match ttl_ms {
                    Some(ttl) => json!({"ttl": ttl}),
                    None => json!({}),
                };
                p.insert("task".into(), task);
            }
            params
        }
        Era::Modern => declare_extension(params),
    }
}

/// Params of `tasks/get`, `tasks/result`, `tasks/update`, `tasks/cancel`.
fn task_params(era: Era, task_id: &str, extra: Option<(&str, Value)>) -> Value {
    let mut p = json!({"taskId": task_id});
    if let Some((k, v)) = extra {
        p[k] = v;
    }
    match era {
        Era::Legacy => p,
        Era::Modern => declare_extension(p),
    }
}

/// `tasks/get`. Errors: the request's; a malformed answer (see
/// [`TaskState::parse`]) or one about another `taskId` is a protocol error.
pub async fn get_task(
    upstream: &Upstream,
    era: Era,
    task_id: &str,
) -> Result<TaskState, UpstreamError> {
    let result = upstream
        .request("tasks/get", Some(task_params(era, task_id, None)))
        .await?;
    let state = TaskState::parse(&result)
        .map_err(|e| UpstreamError::protocol(upstream.name(), format!("tasks/get: {e}")))?;
    // Another task's state must never be taken for this one's (its result
    // would reach this call's session).
    if state.task_id != task_id {
        return Err(UpstreamError::protocol(
            upstream.name(),
            format!(
                "tasks/get {task_id}: the answer is about another task ({})",
                excerpt(&Value::String(state.task_id))
            ),
        ));
    }
    Ok(state)
}

/// `tasks/cancel` (best effort: the answer is not needed).
pub async fn cancel_task(
    upstream: &Upstream,
    era: Era,
    task_id: &str,
) -> Result<(), UpstreamError> {
    upstream
        .request("tasks/cancel", Some(task_params(era, task_id, None)))
        .await
        .map(|_| ())
}

/// Whether `error` says the server does not know the task (-32602 or a
/// message containing "not found").
pub fn is_not_found(error: &UpstreamError) -> bool {
    match error {
        UpstreamError::Rpc { code, message, .. } => {
            *code == -32602 || message.to_ascii_lowercase().contains("not found")
        }
        _ => false,
    }
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

/// What one look at a task found.
enum Look {
    /// Still running (the state as seen).
    Running,
    /// Finished.
    Done(Finish),
}

/// A JSON-RPC error object from an [`UpstreamError::Rpc`].
fn error_object(e: &UpstreamError) -> Option<Value> {
    match e {
        UpstreamError::Rpc {
            code,
            message,
            data,
            ..
        } => {
            let mut o = json!({"code": code, "message": message});
            if let Some(d) = data {
                o["data"] = d.clone();
            }
            Some(o)
        }
        _ => None,
    }
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
}

/// Cancels a foreground task when the call is dropped before it finished
/// or moved.
struct CancelGuard {
    armed: Option<(Upstream, Era, String)>,
    initiators: Arc<Initiators>,
}

impl CancelGuard {
    fn disarm(&mut self) {
        self.armed = None;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        let Some((upstream, era, task_id)) = self.armed.take() else {
            return;
        };
        self.initiators.remove(&task_id);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                tracing::info!(server = %upstream.name(), task = %task_id, "the foreground call ended before its task; cancelling it");
                if let Err(e) = cancel_task(&upstream, era, &task_id).await {
                    tracing::info!(server = %upstream.name(), task = %task_id, error = %e, "tasks/cancel failed");
                }
            });
        }
    }
}

/// Aborts a held call when dropped armed.
struct AbortGuard(Option<AbortHandle>);

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
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
            }),
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
            // Boxed: rare, and its future is large.
            None => Box::pin(upstream.connect()).await?,
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

    /// Runs a call planned as [`Plan::Task`] or [`Plan::Wait`] on `lease`'s
    /// connection (see the module docs). `timeout_ms` (0 = none) bounds a
    /// call without a background `policy`, and the foreground phase of one
    /// with it. `retry_safe`: the task-creating `tools/call` may be sent
    /// again once after a network error (stage A). Errors: as
    /// [`status_of`]; a foreground limit passed is
    /// `DEADLINE_EXCEEDED`; the control plane not taking the record is
    /// `UNAVAILABLE`.
    #[allow(clippy::too_many_arguments)]
    pub async fn call(
        &self,
        plan: Plan,
        lease: Lease,
        params: Value,
        context: CallContext,
        policy: Option<BackgroundPolicy>,
        timeout_ms: u64,
        retry_safe: bool,
    ) -> Result<SidecarCallResponse, Status> {
        match plan {
            Plan::Task(era) => {
                self.call_task(era, lease, params, context, policy, timeout_ms, retry_safe)
                    .await
            }
            Plan::Wait => match policy {
                Some(policy) if self.inner.config.registry.is_some() => {
                    self.call_wait(lease, params, context, policy, timeout_ms)
                        .await
                }
                _ => Err(Status::internal("wait mode needs a background policy")),
            },
            Plan::Plain => Err(Status::internal("not a task or wait-mode call")),
        }
    }

    /// The foreground window: `None` = unbounded.
    fn window(
        policy: Option<&BackgroundPolicy>,
        timeout_ms: u64,
        can_move: bool,
    ) -> Option<Duration> {
        let timeout = (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms));
        match policy {
            None => timeout,
            Some(p) if p.allowed && can_move => {
                let auto = Duration::from_millis(p.auto_after_ms);
                Some(timeout.map_or(auto, |t| t.min(auto)))
            }
            Some(p) => {
                let limit = Duration::from_millis(p.foreground_limit_ms);
                Some(if p.foreground_limit_ms == 0 {
                    timeout.unwrap_or(Duration::from_secs(600))
                } else {
                    limit
                })
            }
        }
    }

    fn limit_error(
        server: &str,
        tool: &str,
        policy: Option<&BackgroundPolicy>,
        window: Duration,
    ) -> Status {
        match policy {
            Some(p) if !p.allowed => Status::deadline_exceeded(format!(
                "server {server}: tools/call {tool} did not finish within the foreground limit of {} ms; it cannot move to the background because the server already has backgroundCalls.maxPerTarget background calls running",
                window.as_millis()
            )),
            _ => Status::deadline_exceeded(format!(
                "server {server}: tools/call {tool} did not finish within {} ms",
                window.as_millis()
            )),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn call_task(
        &self,
        era: Era,
        lease: Lease,
        params: Value,
        context: CallContext,
        policy: Option<BackgroundPolicy>,
        timeout_ms: u64,
        retry_safe: bool,
    ) -> Result<SidecarCallResponse, Status> {
        let upstream = lease.upstream().clone();
        let server = upstream.name().to_owned();
        let tool = context.tool.clone();
        let created_at_ms = now_ms();
        let ttl = policy
            .as_ref()
            .map(|p| p.max_duration_ms)
            .filter(|&m| m > 0);
        let params = augment(era, params, ttl);
        let window = Self::window(
            policy.as_ref(),
            timeout_ms,
            self.inner.config.registry.is_some(),
        );
        let deadline = window.map(|w| Instant::now() + w);
        // Creating the task is bounded by the foreground window only when
        // the call cannot move (else by `timeout_ms`): a call moving at
        // once (`auto_after_ms` 0) still needs its task first.
        let movable =
            policy.as_ref().is_some_and(|p| p.allowed) && self.inner.config.registry.is_some();
        let create_deadline = if movable {
            (timeout_ms > 0).then(|| Instant::now() + Duration::from_millis(timeout_ms))
        } else {
            deadline
        };
        let create = async {
            match upstream.call_tool_in(params.clone(), &context).await {
                // Stage A: a read-only or idempotent call is sent again,
                // once, after a network error.
                Err(e)
                    if retry_safe
                        && e.is_connection_failure()
                        && !matches!(e, UpstreamError::Closed { .. }) =>
                {
                    upstream.metrics().retry();
                    tracing::info!(%server, %tool, error = %e, "network error on a retry-safe call; reconnecting and retrying once");
                    upstream.call_tool_in(params.clone(), &context).await
                }
                other => other,
            }
        };
        let created = match create_deadline {
            Some(d) => match tokio::time::timeout_at(d, create).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(Self::limit_error(
                        &server,
                        &tool,
                        policy.as_ref(),
                        window.unwrap_or_default(),
                    ));
                }
            },
            None => create.await,
        }
        .map_err(|e| status_of(&e))?;
        let mut state = match created_task(&created) {
            None => {
                return self
                    .inner
                    .responder
                    .respond(&server, &tool, &context, &created);
            }
            Some(Ok(state)) => state,
            Some(Err(e)) => {
                // A task the answer does name is not left running.
                let named = created
                    .get("task")
                    .unwrap_or(&created)
                    .get("taskId")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty() && id.len() <= MAX_TASK_ID_BYTES)
                    .map(str::to_owned);
                if let Some(task_id) = named {
                    let upstream = upstream.clone();
                    tokio::spawn(async move {
                        let _ = cancel_task(&upstream, era, &task_id).await;
                    });
                }
                return Err(status_of(&UpstreamError::protocol(
                    &server,
                    format!("tools/call {tool}: bad CreateTaskResult: {e}"),
                )));
            }
        };
        let immediate = created
            .get("_meta")
            .and_then(|m| m.get(meta::IMMEDIATE_RESPONSE))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        tracing::info!(%server, %tool, task = %state.task_id, status = %state.status, "task created");
        self.initiators().set(&state.task_id, context.clone());
        let mut guard = CancelGuard {
            armed: Some((upstream.clone(), era, state.task_id.clone())),
            initiators: self.initiators().clone(),
        };
        let mut answered = HashSet::new();
        // Foreground polling.
        loop {
            match self
                .look(
                    &upstream,
                    era,
                    &mut state,
                    &context,
                    deadline,
                    &mut answered,
                )
                .await
            {
                Ok(Look::Done(finish)) => {
                    guard.disarm();
                    self.initiators().remove(&state.task_id);
                    return match finish {
                        Finish::Completed(result) => self
                            .inner
                            .responder
                            .respond(&server, &tool, &context, &result),
                        Finish::Failed { message, error } => Err(match error {
                            Some(e) => Status::with_details(
                                tonic::Code::FailedPrecondition,
                                format!(
                                    "server {server}: task {} of {tool} failed: {message}",
                                    state.task_id
                                ),
                                bytes::Bytes::from(e.to_string()),
                            ),
                            None => Status::aborted(format!(
                                "server {server}: task {} of {tool} failed: {message}",
                                state.task_id
                            )),
                        }),
                        Finish::Cancelled(message) => Err(Status::aborted(format!(
                            "server {server}: task {} of {tool} was cancelled: {message}",
                            state.task_id
                        ))),
                        Finish::NotFound(message) => Err(Status::failed_precondition(format!(
                            "server {server}: task {} of {tool}: task not found ({message})",
                            state.task_id
                        ))),
                    };
                }
                Ok(Look::Running) => {}
                Err(e) => {
                    tracing::info!(%server, task = %state.task_id, error = %e, "polling the task failed; retrying at the next poll");
                }
            }
            let interval = clamp_poll_interval(state.poll_interval_ms, self.settings().poll_min);
            let next = Instant::now() + interval;
            match deadline {
                Some(d) if next >= d => {
                    tokio::time::sleep_until(d).await;
                    break;
                }
                _ => tokio::time::sleep_until(next).await,
            }
            if let Err(e) = self.refresh(&upstream, era, &mut state).await {
                if matches!(e, UpstreamError::MessageTooLarge { .. }) {
                    // `guard` cancels the task: its state will not shrink.
                    self.initiators().remove(&state.task_id);
                    return Err(status_of(&e));
                }
                if is_not_found(&e) {
                    guard.disarm();
                    self.initiators().remove(&state.task_id);
                    return Err(Status::failed_precondition(format!(
                        "server {server}: task {} of {tool}: task not found ({e})",
                        state.task_id
                    )));
                }
                tracing::info!(%server, task = %state.task_id, error = %e, "tasks/get failed; retrying at the next poll");
            }
        }
        // The foreground window is over.
        let window = window.unwrap_or_default();
        let Some(policy) = policy.clone().filter(|_| movable) else {
            // `guard` cancels the task.
            return Err(Self::limit_error(&server, &tool, policy.as_ref(), window));
        };
        // Move to the background.
        let interval = clamp_poll_interval(state.poll_interval_ms, self.settings().poll_min);
        let now = now_ms();
        let record = BackgroundCall {
            id: policy.background_call_id.clone(),
            server: server.clone(),
            tool: tool.clone(),
            engine_tool: policy.engine_tool.clone(),
            session_id: context.session_id.clone(),
            run_id: context.run_id.clone(),
            mode: "task".into(),
            task_id: state.task_id.clone(),
            status: if status::is_terminal(&state.status) {
                status::WORKING.into()
            } else {
                state.status.clone()
            },
            status_message: state.status_message.clone().unwrap_or_default(),
            created_at_ms,
            updated_at_ms: now,
            poll_after_ms: now + interval.as_millis() as i64,
            poll_interval_ms: interval.as_millis() as u64,
            deadline_ms: if policy.max_duration_ms > 0 {
                created_at_ms + policy.max_duration_ms as i64
            } else {
                0
            },
            sidecar_id: self.settings().sidecar_id.clone(),
            immediate_response: immediate,
            protocol_version: protocol_version(&upstream, era),
            ..Default::default()
        };
        // From here the move completes even if the engine's call goes away
        // meanwhile: registered records are always polled.
        guard.disarm();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let this = self.clone();
        tokio::spawn(async move {
            let Some(stored) = this.register(record.clone()).await else {
                this.initiators().remove(&state.task_id);
                let _ = cancel_task(&upstream, era, &state.task_id).await;
                let _ = tx.send(Err(Status::unavailable(format!(
                    "server {server}: tools/call {tool} could not move to the background: the control plane did not take the record"
                ))));
                return;
            };
            tracing::info!(%server, %tool, task = %state.task_id, id = %record.id, "moved to the background");
            let background_context = CallContext {
                run_id: String::new(),
                ..context
            };
            this.initiators()
                .set(&state.task_id, background_context.clone());
            this.start_poller(
                record,
                era,
                lease,
                state,
                background_context,
                answered,
                Instant::now() + interval,
            );
            let _ = tx.send(Ok(stored));
        });
        let stored = rx
            .await
            .map_err(|_| Status::internal("moving the call to the background failed"))??;
        Ok(SidecarCallResponse {
            background: Some(stored),
            ..Default::default()
        })
    }

    /// `tasks/get` into `state`.
    async fn refresh(
        &self,
        upstream: &Upstream,
        era: Era,
        state: &mut TaskState,
    ) -> Result<(), UpstreamError> {
        let result = get_task(upstream, era, &state.task_id).await;
        self.metrics().poll(
            upstream.name(),
            match &result {
                Ok(_) => "ok",
                Err(e) if is_not_found(e) => "not_found",
                Err(_) => "error",
            },
        );
        *state = result?;
        Ok(())
    }

    /// Acts on `state` as last seen: a terminal task's result is fetched;
    /// an `input_required` task's questions are asked (2025:
    /// `tasks/result`, bounded by `deadline`; 2026: the new
    /// `inputRequests` keys, then `tasks/update`). Errors: network and
    /// other failures worth retrying at the next poll.
    async fn look(
        &self,
        upstream: &Upstream,
        era: Era,
        state: &mut TaskState,
        context: &CallContext,
        deadline: Option<Instant>,
        answered: &mut HashSet<String>,
    ) -> Result<Look, UpstreamError> {
        let message = || state.status_message.clone().unwrap_or_default();
        match (state.status.as_str(), era) {
            (status::CANCELLED, _) => Ok(Look::Done(Finish::Cancelled(message()))),
            (status::COMPLETED, Era::Modern) => Ok(Look::Done(match &state.result {
                Some(result) => Finish::Completed(result.clone()),
                None => Finish::Failed {
                    message: "the completed task carries no result".into(),
                    error: None,
                },
            })),
            (status::FAILED, Era::Modern) => Ok(Look::Done(Finish::Failed {
                message: state
                    .status_message
                    .clone()
                    .or_else(|| {
                        state
                            .error
                            .as_ref()
                            .and_then(|e| e.get("message"))
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    })
                    .unwrap_or_else(|| "the task failed".into()),
                error: state.error.clone(),
            })),
            (status::COMPLETED | status::FAILED | status::INPUT_REQUIRED, Era::Legacy) => {
                // Blocks until terminal; while input_required the server
                // asks on it (related-task).
                let fetch = upstream.request_in(
                    "tasks/result",
                    task_params(era, &state.task_id, None),
                    context,
                );
                let result = match deadline {
                    Some(d) if state.status == status::INPUT_REQUIRED => {
                        match tokio::time::timeout_at(d, fetch).await {
                            Ok(r) => r,
                            Err(_) => return Ok(Look::Running),
                        }
                    }
                    _ => fetch.await,
                };
                match result {
                    Ok(result) => Ok(Look::Done(Finish::Completed(result))),
                    Err(e) if is_not_found(&e) => Ok(Look::Done(Finish::NotFound(e.to_string()))),
                    // Fetching it again gives the same answer.
                    Err(e @ UpstreamError::MessageTooLarge { .. }) => {
                        Ok(Look::Done(Finish::Failed {
                            message: e.to_string(),
                            error: None,
                        }))
                    }
                    Err(e @ UpstreamError::Rpc { .. }) => Ok(Look::Done(Finish::Failed {
                        message: match &e {
                            UpstreamError::Rpc { message, .. } => message.clone(),
                            _ => unreachable!(),
                        },
                        error: error_object(&e),
                    })),
                    // A long wait for the user: not a failure.
                    Err(UpstreamError::Timeout { .. })
                        if state.status == status::INPUT_REQUIRED =>
                    {
                        Ok(Look::Running)
                    }
                    Err(e) => Err(e),
                }
            }
            (status::INPUT_REQUIRED, Era::Modern) => {
                let requests = match &state.input_requests {
                    Some(Value::Object(requests)) => requests,
                    // Nothing asked (yet).
                    None | Some(Value::Null) => return Ok(Look::Running),
                    Some(other) => {
                        return Err(UpstreamError::protocol(
                            upstream.name(),
                            format!(
                                "tasks/get {}: inputRequests is not an object (key -> request): {}",
                                state.task_id,
                                excerpt(other)
                            ),
                        ));
                    }
                };
                let fresh: Map<String, Value> = requests
                    .iter()
                    .filter(|(k, _)| !answered.contains(*k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if fresh.is_empty() {
                    return Ok(Look::Running);
                }
                // A server that never stops asking would flood the
                // initiator's session with questions.
                if answered.len() + fresh.len() > MAX_TASK_INPUT_REQUESTS {
                    let _ = cancel_task(upstream, era, &state.task_id).await;
                    return Ok(Look::Done(Finish::Failed {
                        message: format!(
                            "the server asked for more than {MAX_TASK_INPUT_REQUESTS} inputs (inputRequests) for task {}; it was cancelled",
                            state.task_id
                        ),
                        error: None,
                    }));
                }
                // The cards say which task asks (the 2025-11-25 key for
                // it), so the control plane can close them when the call
                // ends. Only the copy shown to the user carries it; the
                // server gets its answers by key, as it asked.
                let fresh = Value::Object(
                    fresh
                        .into_iter()
                        .map(|(k, mut v)| {
                            if let Some(params) = v.get_mut("params").and_then(Value::as_object_mut)
                            {
                                let meta = params
                                    .entry("_meta")
                                    .or_insert_with(|| Value::Object(Map::new()));
                                if let Some(meta) = meta.as_object_mut() {
                                    meta.entry(meta::RELATED_TASK)
                                        .or_insert_with(|| json!({"taskId": state.task_id}));
                                }
                            }
                            (k, v)
                        })
                        .collect(),
                );
                let ask = mrtr::answer_inputs(&self.inner.relay, &fresh, context);
                let responses = match deadline {
                    Some(d) => match tokio::time::timeout_at(d, ask).await {
                        Ok(r) => r,
                        Err(_) => return Ok(Look::Running),
                    },
                    None => ask.await,
                };
                let responses = match responses {
                    Ok(r) => r,
                    // Questions we can never answer (sampling).
                    Err(e) => {
                        let _ = cancel_task(upstream, era, &state.task_id).await;
                        return Ok(Look::Done(Finish::Failed {
                            message: e.to_string(),
                            error: None,
                        }));
                    }
                };
                let keys: Vec<String> = responses
                    .as_object()
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default();
                upstream
                    .request(
                        "tasks/update",
                        Some(task_params(
                            era,
                            &state.task_id,
                            Some(("inputResponses", responses)),
                        )),
                    )
                    .await?;
                answered.extend(keys);
                Ok(Look::Running)
            }
            _ => Ok(Look::Running),
        }
    }

    /// Reports `record`, retrying with backoff until the control plane
    /// acknowledges it (or for [`REGISTER_LIMIT`] when `bounded`). `None`:
    /// no registry, a permanent refusal, or the bound passed.
    async fn report_with(&self, record: &BackgroundCall, bounded: bool) -> Option<BackgroundCall> {
        let registry = self.inner.config.registry.as_ref()?;
        let started = Instant::now();
        let mut backoff = REPORT_MIN_BACKOFF;
        loop {
            match registry.update(record.clone()).await {
                Ok(stored) => return Some(stored),
                Err(status)
                    if !matches!(
                        status.code(),
                        tonic::Code::InvalidArgument
                            | tonic::Code::NotFound
                            | tonic::Code::PermissionDenied
                            | tonic::Code::Unauthenticated
                            | tonic::Code::Unimplemented
                    ) =>
                {
                    if bounded && started.elapsed() + backoff > REGISTER_LIMIT {
                        tracing::warn!(id = %record.id, error = %status.message(), "UpdateBackgroundCall failed; giving up");
                        return None;
                    }
                    tracing::warn!(id = %record.id, code = ?status.code(), error = %status.message(), retry_in_ms = backoff.as_millis() as u64, "UpdateBackgroundCall failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(REPORT_MAX_BACKOFF);
                }
                Err(status) => {
                    tracing::warn!(id = %record.id, code = ?status.code(), error = %status.message(), "the control plane refused the background call record");
                    return None;
                }
            }
        }
    }

    async fn register(&self, record: BackgroundCall) -> Option<BackgroundCall> {
        self.report_with(&record, true).await
    }

    async fn report(&self, record: &BackgroundCall) -> Option<BackgroundCall> {
        self.report_with(record, false).await
    }

    /// `record` finished as `finish`: the terminal record, with the
    /// processed result of a completed call.
    fn terminal_record(
        &self,
        mut record: BackgroundCall,
        finish: Finish,
        context: &CallContext,
    ) -> BackgroundCall {
        let now = now_ms();
        record.updated_at_ms = now;
        record.finished_at_ms = now;
        record.poll_after_ms = 0;
        match finish {
            Finish::Completed(result) => {
                match self
                    .inner
                    .responder
                    .respond(&record.server, &record.tool, context, &result)
                {
                    Ok(r) => {
                        // A message of an earlier state ("needs input",
                        // a progress step) does not describe the result.
                        if record.status != status::COMPLETED {
                            record.status_message.clear();
                        }
                        record.status = status::COMPLETED.into();
                        record.result = Some(BackgroundResult {
                            result_json: r.result_json,
                            is_error: result.get("isError") == Some(&Value::Bool(true)),
                            model_text: r.model_text,
                            structured_content_json: r.structured_content_json,
                            attachments: r.attachments,
                            validation_errors: r.validation_errors,
                        });
                    }
                    Err(e) => {
                        record.status = status::FAILED.into();
                        record.status_message = e.message().to_owned();
                    }
                }
            }
            Finish::Failed { message, error } => {
                record.status = status::FAILED.into();
                record.status_message = message;
                record.error_json = error.map(|e| e.to_string()).unwrap_or_default();
            }
            Finish::Cancelled(message) => {
                record.status = status::CANCELLED.into();
                record.status_message = message;
            }
            Finish::NotFound(message) => {
                record.status = status::FAILED.into();
                record.status_message = format!("task not found: {message}");
            }
        }
        record
    }

    /// Starts polling a task-mode call in the background.
    #[allow(clippy::too_many_arguments)]
    fn start_poller(
        &self,
        record: BackgroundCall,
        era: Era,
        lease: Lease,
        state: TaskState,
        context: CallContext,
        answered: HashSet<String>,
        first: Instant,
    ) {
        let shared = Arc::new(Mutex::new(record.clone()));
        let id = record.id.clone();
        let task_upstream = lease.upstream().clone();
        let this = self.clone();
        let poller_shared = shared.clone();
        // Spawned under the lock, so a cancellation finds the abort handle
        // and the poller's own removal comes after the insertion.
        let mut live = self.lock();
        let handle = tokio::spawn(async move {
            this.poll_loop(poller_shared, era, lease, state, context, answered, first)
                .await;
        });
        live.insert(
            id,
            Live {
                task_id: record.task_id.clone(),
                mode: "task",
                aborts: vec![handle.abort_handle()],
                upstream: Some((task_upstream, era)),
                record: shared,
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    async fn poll_loop(
        self,
        shared: Arc<Mutex<BackgroundCall>>,
        era: Era,
        lease: Lease,
        mut state: TaskState,
        context: CallContext,
        mut answered: HashSet<String>,
        mut next: Instant,
    ) {
        let upstream = lease.upstream().clone();
        let mut record = shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let id = record.id.clone();
        let server = record.server.clone();
        let mut gauge = LiveGauge::new(self.metrics(), &server, "task", &record.status);
        let finish = loop {
            tokio::time::sleep_until(next).await;
            if record.deadline_ms > 0 && now_ms() >= record.deadline_ms {
                let _ = cancel_task(&upstream, era, &state.task_id).await;
                break Finish::Failed {
                    message: "the background call passed its maximum duration (backgroundCalls.maxDurationSec)".into(),
                    error: None,
                };
            }
            let deadline = (record.deadline_ms > 0).then(|| {
                let left = (record.deadline_ms - now_ms()).max(0) as u64;
                Instant::now() + Duration::from_millis(left)
            });
            let mut changed = false;
            let mut failure = None;
            match self.refresh(&upstream, era, &mut state).await {
                // A poll error is cleared only when the whole poll worked
                // (below): a `tasks/get` that works followed by a
                // `tasks/result` or `tasks/update` that keeps failing is a
                // continuous failure.
                Ok(()) => {
                    let interval =
                        clamp_poll_interval(state.poll_interval_ms, self.settings().poll_min);
                    let interval_ms = interval.as_millis() as u64;
                    let message = state.status_message.clone().unwrap_or_default();
                    // A terminal status is reported with its result, below.
                    if !status::is_terminal(&state.status)
                        && (record.status != state.status
                            || record.status_message != message
                            || record.poll_interval_ms != interval_ms)
                    {
                        changed = true;
                        record.status = state.status.clone();
                        record.status_message = message;
                        record.poll_interval_ms = interval_ms;
                    }
                }
                Err(e) if is_not_found(&e) => break Finish::NotFound(e.to_string()),
                // The task's state will not shrink: polling again is futile.
                Err(e @ UpstreamError::MessageTooLarge { .. }) => {
                    let _ = cancel_task(&upstream, era, &state.task_id).await;
                    break Finish::Failed {
                        message: e.to_string(),
                        error: None,
                    };
                }
                Err(e) => failure = Some(e),
            }
            let interval = clamp_poll_interval(state.poll_interval_ms, self.settings().poll_min);
            // Changes are reported before acting on them: a 2025
            // input_required task blocks in tasks/result while the user is
            // asked.
            if changed && self.report_change(&mut record, &shared, &mut gauge).await {
                self.stop(&upstream, era, &record, &state.task_id).await;
                return;
            }
            if failure.is_none() {
                match self
                    .look(
                        &upstream,
                        era,
                        &mut state,
                        &context,
                        deadline,
                        &mut answered,
                    )
                    .await
                {
                    Ok(Look::Done(f)) => break f,
                    Ok(Look::Running) => {}
                    Err(e) if is_not_found(&e) => break Finish::NotFound(e.to_string()),
                    Err(e) => failure = Some(e),
                }
            }
            if let Some(e) = failure {
                let now = now_ms();
                let first = record.poll_error_since_ms == 0;
                if first {
                    record.poll_error_since_ms = now;
                }
                record.last_poll_error = e.to_string();
                let failing =
                    Duration::from_millis((now - record.poll_error_since_ms).max(0) as u64);
                tracing::info!(%server, %id, task = %state.task_id, error = %e, failing_s = failing.as_secs(), "polling the task failed; retrying at the next poll");
                if failing >= self.settings().failure_limit {
                    break Finish::Failed {
                        message: format!(
                            "polling the task failed for {} s without a break: {e}",
                            failing.as_secs()
                        ),
                        error: None,
                    };
                }
                if first && self.report_change(&mut record, &shared, &mut gauge).await {
                    self.stop(&upstream, era, &record, &state.task_id).await;
                    return;
                }
            } else if record.poll_error_since_ms != 0 {
                record.poll_error_since_ms = 0;
                record.last_poll_error.clear();
                if self.report_change(&mut record, &shared, &mut gauge).await {
                    self.stop(&upstream, era, &record, &state.task_id).await;
                    return;
                }
            }
            next = Instant::now() + interval;
            record.poll_after_ms = now_ms() + interval.as_millis() as i64;
        };
        if let Some(message) = &state.status_message {
            record.status_message = message.clone();
        }
        let terminal = self.terminal_record(record, finish, &context);
        gauge.set(&terminal.status);
        *shared.lock().unwrap_or_else(|e| e.into_inner()) = terminal.clone();
        tracing::info!(%server, %id, task = %state.task_id, status = %terminal.status, "background call finished");
        self.report(&terminal).await;
        self.initiators().remove(&state.task_id);
        self.lock().remove(&id);
        drop(lease);
    }

    /// Reports a changed `record` (publishing it for cancellation first).
    /// True when the stored record came back final (a user cancelled): the
    /// caller stops polling.
    async fn report_change(
        &self,
        record: &mut BackgroundCall,
        shared: &Mutex<BackgroundCall>,
        gauge: &mut LiveGauge,
    ) -> bool {
        gauge.set(&record.status);
        record.updated_at_ms = now_ms();
        *shared.lock().unwrap_or_else(|e| e.into_inner()) = record.clone();
        match self.report(record).await {
            Some(stored) if status::is_terminal(&stored.status) => {
                tracing::info!(id = %record.id, status = %stored.status, "the stored record is final; stopping");
                *record = stored;
                true
            }
            _ => false,
        }
    }

    /// Stops polling `record`, final in the store: a cancelled task is
    /// cancelled on the server too (best effort).
    async fn stop(&self, upstream: &Upstream, era: Era, record: &BackgroundCall, task_id: &str) {
        if record.status == status::CANCELLED {
            let _ = cancel_task(upstream, era, task_id).await;
        }
        self.initiators().remove(task_id);
        self.lock().remove(&record.id);
    }

    async fn call_wait(
        &self,
        lease: Lease,
        params: Value,
        context: CallContext,
        policy: BackgroundPolicy,
        timeout_ms: u64,
    ) -> Result<SidecarCallResponse, Status> {
        let upstream = lease.upstream().clone();
        let server = upstream.name().to_owned();
        let tool = context.tool.clone();
        let created_at_ms = now_ms();
        let held_context = context.clone();
        // The call runs here during the foreground window (most calls end
        // within it); only one that outlives it moves into its own task.
        // Dropping it (the engine went away, or the limit passed) cancels
        // the upstream request.
        let mut call = Box::pin(async move {
            let result = lease.upstream().call_tool_in(params, &held_context).await;
            drop(lease);
            result
        });
        let window = Self::window(Some(&policy), timeout_ms, true).unwrap_or_default();
        // A zero window (`background = always`) moves the call at once: it
        // must not race a fast upstream answer, or a tool marked
        // always-background would sometimes answer in the foreground.
        let answer = if window.is_zero() && policy.allowed {
            None
        } else {
            tokio::select! {
                r = &mut call => Some(r),
                () = tokio::time::sleep(window) => None,
            }
        };
        if let Some(answer) = answer {
            return match answer {
                Ok(result) => self
                    .inner
                    .responder
                    .respond(&server, &tool, &context, &result),
                Err(e) => Err(status_of(&e)),
            };
        }
        if !policy.allowed {
            return Err(Self::limit_error(&server, &tool, Some(&policy), window));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let held = tokio::spawn(async move {
            let _ = tx.send(call.await);
        });
        let mut guard = AbortGuard(Some(held.abort_handle()));
        let now = now_ms();
        let record = BackgroundCall {
            id: policy.background_call_id.clone(),
            server: server.clone(),
            tool: tool.clone(),
            engine_tool: policy.engine_tool.clone(),
            session_id: context.session_id.clone(),
            run_id: context.run_id.clone(),
            mode: "wait".into(),
            status: status::WORKING.into(),
            created_at_ms,
            updated_at_ms: now,
            deadline_ms: if policy.max_duration_ms > 0 {
                created_at_ms + policy.max_duration_ms as i64
            } else {
                0
            },
            sidecar_id: self.settings().sidecar_id.clone(),
            protocol_version: upstream
                .negotiated()
                .map(|n| n.protocol_version)
                .unwrap_or_default(),
            ..Default::default()
        };
        // From here the move completes even if the engine's call goes away
        // meanwhile (see `call_task`).
        let shared = Arc::new(Mutex::new(record.clone()));
        let id = record.id.clone();
        let held_abort = guard.0.take().expect("armed");
        let this = self.clone();
        let continuation_shared = shared.clone();
        let continuation_held = held_abort.clone();
        let (moved_tx, moved_rx) = tokio::sync::oneshot::channel();
        // Spawned under the lock (see `start_poller`).
        {
            let mut live = self.lock();
            let continuation = tokio::spawn(async move {
                let shared = continuation_shared;
                let held_abort = continuation_held;
                let Some(stored) = this.register(record.clone()).await else {
                    held_abort.abort();
                    this.lock().remove(&record.id);
                    let _ = moved_tx.send(Err(Status::unavailable(format!(
                    "server {server}: tools/call {tool} could not move to the background: the control plane did not take the record"
                ))));
                    return;
                };
                tracing::info!(%server, %tool, id = %record.id, "held call moved to the background");
                let _ = moved_tx.send(Ok(stored));
                let mut gauge =
                    LiveGauge::new(this.metrics(), &record.server, "wait", status::WORKING);
                let context = CallContext {
                    run_id: String::new(),
                    ..context
                };
                let until_deadline = async {
                    if record.deadline_ms > 0 {
                        let left = (record.deadline_ms - now_ms()).max(0) as u64;
                        tokio::time::sleep(Duration::from_millis(left)).await;
                    } else {
                        std::future::pending::<()>().await;
                    }
                };
                let finish = tokio::select! {
                    r = rx => match r {
                        Ok(Ok(result)) => Finish::Completed(result),
                        Ok(Err(e)) => Finish::Failed { message: e.to_string(), error: error_object(&e) },
                        Err(_) => Finish::Failed { message: "the held call ended without an answer".into(), error: None },
                    },
                    () = until_deadline => {
                        held_abort.abort();
                        Finish::Failed {
                            message: "the background call passed its maximum duration (backgroundCalls.maxDurationSec)".into(),
                            error: None,
                        }
                    }
                };
                let terminal = this.terminal_record(record, finish, &context);
                gauge.set(&terminal.status);
                *shared.lock().unwrap_or_else(|e| e.into_inner()) = terminal.clone();
                tracing::info!(server = %terminal.server, id = %terminal.id, status = %terminal.status, "held call finished");
                this.report(&terminal).await;
                this.lock().remove(&terminal.id);
            });
            live.insert(
                id,
                Live {
                    task_id: String::new(),
                    mode: "wait",
                    aborts: vec![held_abort, continuation.abort_handle()],
                    upstream: None,
                    record: shared,
                },
            );
        }
        let stored = moved_rx
            .await
            .map_err(|_| Status::cancelled("the held call was cancelled while moving"))??;
        Ok(SidecarCallResponse {
            background: Some(stored),
            ..Default::default()
        })
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
                    tokio::spawn(async move {
                        let _ = cancel_task(&upstream, era, &task_id).await;
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
            match tokio::time::timeout(CANCEL_LIMIT, cancel_task(&upstream, era, &task_id)).await {
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
            self.start_poller(
                call,
                era,
                lease,
                state,
                context,
                HashSet::new(),
                Instant::now() + wait,
            );
        }
    }
}

/// The protocol version a task of `era` runs in.
fn protocol_version(upstream: &Upstream, era: Era) -> String {
    match upstream.negotiated() {
        Some(n) if n.era == era => n.protocol_version,
        _ => match era {
            Era::Modern => switchyard_mcp::era::MODERN_VERSION.into(),
            Era::Legacy => switchyard_mcp::era::LEGACY_VERSION.into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_intervals_are_clamped() {
        let min = DEFAULT_POLL_MIN;
        assert_eq!(clamp_poll_interval(None, min), POLL_ABSENT);
        assert_eq!(clamp_poll_interval(Some(1000), min), min);
        assert_eq!(clamp_poll_interval(Some(7000), min), Duration::from_secs(7));
        assert_eq!(clamp_poll_interval(Some(3_600_000), min), POLL_MAX);
        let small = Duration::from_millis(50);
        assert_eq!(clamp_poll_interval(Some(10), small), small);
        assert_eq!(
            clamp_poll_interval(Some(120), small),
            Duration::from_millis(120)
        );
        assert_eq!(
            clamp_poll_interval(None, Duration::from_secs(3600)),
            POLL_MAX
        );
    }

    #[test]
    fn create_task_results_are_recognised_in_both_eras() {
        let legacy = json!({"task": {"taskId": "t1", "status": "working", "pollInterval": 5000, "createdAt": "x", "ttl": 1}, "_meta": {meta::IMMEDIATE_RESPONSE: "soon"}});
        let s = created_task(&legacy).unwrap().unwrap();
        assert_eq!(
            (s.task_id.as_str(), s.status.as_str(), s.poll_interval_ms),
            ("t1", "working", Some(5000))
        );
        let modern = json!({"resultType": "task", "taskId": "t2", "status": "working", "ttlMs": 5, "pollIntervalMs": 250});
        let s = created_task(&modern).unwrap().unwrap();
        assert_eq!((s.task_id.as_str(), s.poll_interval_ms), ("t2", Some(250)));
        // A normal result, even one with a "task" field in structured content.
        assert!(created_task(&json!({"content": [], "task": {"taskId": "x"}})).is_none());
        assert!(created_task(&json!({"content": []})).is_none());
        assert!(
            created_task(&json!({"resultType": "task"}))
                .unwrap()
                .is_err()
        );
    }

    #[test]
    fn augmentation_is_per_era() {
        let p = json!({"name": "t", "arguments": {}, "_meta": {"k": 1}});
        assert_eq!(
            augment(Era::Legacy, p.clone(), Some(60_000)),
            json!({"name": "t", "arguments": {}, "_meta": {"k": 1}, "task": {"ttl": 60_000}})
        );
        let m = augment(Era::Modern, p, None);
        assert_eq!(m["_meta"]["k"], 1);
        assert_eq!(
            m["_meta"][meta::CLIENT_CAPABILITIES]["extensions"][meta::TASKS_EXTENSION],
            json!({})
        );
        assert!(m.get("task").is_none());
    }

    #[test]
    fn the_era_meta_keeps_the_extension_declared_per_request() {
        use crate::upstream::era::apply_modern_meta;
        let mut config = crate::upstream::UpstreamConfig::new(
            "s",
            crate::upstream::TransportConfig::Stdio(Default::default()),
        );
        config.interactive = true;
        let params = declare_extension(json!({"taskId": "t"}));
        let Value::Object(mut meta) = params["_meta"].clone() else {
            unreachable!()
        };
        apply_modern_meta(&mut meta, &config);
        assert_eq!(meta[meta::PROTOCOL_VERSION], "2026-07-28");
        let caps = &meta[meta::CLIENT_CAPABILITIES];
        assert_eq!(caps["extensions"][meta::TASKS_EXTENSION], json!({}));
        assert_eq!(caps["elicitation"], json!({"form": {}, "url": {}}));
        // Without a declaration: the era's own capabilities only.
        let mut meta = Map::new();
        apply_modern_meta(&mut meta, &config);
        assert!(meta[meta::CLIENT_CAPABILITIES].get("extensions").is_none());
    }

    #[test]
    fn not_found_errors() {
        let rpc = |code, message: &str| UpstreamError::Rpc {
            server: "s".into(),
            method: "tasks/get".into(),
            code,
            message: message.into(),
            data: None,
        };
        assert!(is_not_found(&rpc(
            -32602,
            "Failed to retrieve task: task not found: x"
        )));
        assert!(is_not_found(&rpc(-32000, "Task not found")));
        assert!(!is_not_found(&rpc(-32603, "internal")));
        assert!(!is_not_found(&UpstreamError::protocol("s", "not found")));
    }

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
