//! MCP **tasks** on `tools/call`, in both protocol eras (served with
//! `--tasks`; `--tasks-bench` implies it). All task protocol code of the
//! reference server lives here, because the tasks API differs between eras.
//!
//! # Interface (the gateway's sidecar is built against exactly this)
//!
//! ## Capabilities
//!
//! * **2025-11-25** (`initialize` result, per `docs/specification/2025-11-25/basic/utilities/tasks.mdx`):
//!   `capabilities.tasks = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}`.
//!   `tools/list` gives each task tool `execution: {"taskSupport": "required" | "optional"}`
//!   (`task_stats` and the order tools have none, i.e. `forbidden`).
//! * **2026-07-28** (`server/discover`, SEP-2663 `io.modelcontextprotocol/tasks`):
//!   `capabilities.extensions["io.modelcontextprotocol/tasks"] = {}`. The legacy
//!   `tasks` capability is never advertised there, and the extension is never
//!   advertised in an `initialize` result.
//!
//! ## Task tools
//!
//! Each takes the optional arguments `pollIntervalMs` (integer >= 1, default
//! [`DEFAULT_POLL_INTERVAL_MS`] = 5000; becomes the task's
//! `pollInterval` / `pollIntervalMs`) and `immediate` (string; when given,
//! the CreateTaskResult carries it as
//! `_meta["io.modelcontextprotocol/model-immediate-response"]`). A bad
//! argument is JSON-RPC `-32602`.
//!
//! | tool | taskSupport | arguments | outcome |
//! | --- | --- | --- | --- |
//! | `task_sleep` | required | `ms` (default 1000), `text?` | after `ms`: completed, `{"content":[{"type":"text","text":"slept <ms> ms: <text>"}],"structuredContent":{"ms":<ms>,"text":<text>}}` (has an `outputSchema`; `text` defaults to `""`) |
//! | `task_optional` | optional | `ms` (default 200) | same result shape as `task_sleep` with `text` `""`; without task augmentation it runs synchronously (sleeps `ms`, returns the result) |
//! | `task_fail` | required | `ms` (default 200), `mode`: `"error"` / `"isError"` | after `ms`: `error` → failed with JSON-RPC error `{"code":-32603,"message":"task_fail: failed on purpose"}`; `isError` → completed with `isError: true`, text `task_fail: tool error on purpose` |
//! | `task_ask` | required | `ms` (default 200) | after `ms`: `input_required`, asking a form elicitation (message `Name for the task?`, `requestedSchema` `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`); accept → completed, text `hello <name>`; decline / cancel → completed with `isError: true`, text `task_ask: <action>` |
//! | `task_forever` | required | none | stays `working` until cancelled |
//! | `task_stats` | (not a task tool) | `taskId?` | `structuredContent` `{"tasks": <created>, "polls": <tasks/get count>, "perTask": {<taskId>: {"polls": n, "pollGapsMs": [..]}}}` (only `taskId` when given) |
//!
//! Tasks start `working` (`statusMessage` "The operation is now in progress."),
//! `ttl`/`ttlMs` is the requested 2025-11-25 `task.ttl`, else
//! [`DEFAULT_TTL_MS`] (1 h). A task is deleted once its ttl has elapsed
//! (then "task not found"). `createdAt`/`lastUpdatedAt` are RFC 3339 UTC with
//! milliseconds.
//!
//! ## 2025-11-25 flow
//!
//! * `tools/call` with `params.task = {"ttl": MS}` on a task tool →
//!   `{"task": {taskId, status: "working", statusMessage, createdAt, lastUpdatedAt, ttl, pollInterval}, "_meta"?: {...}}`.
//!   On a tool without task support (or an unknown one): `-32601`. A `required` tool called
//!   without `task`: `-32601` ("Task augmentation required ...").
//! * `tasks/get {taskId}` → the Task fields.
//! * `tasks/result {taskId}` → blocks until terminal; completed: exactly the
//!   CallToolResult plus `_meta["io.modelcontextprotocol/related-task"] = {taskId}`;
//!   failed: the task's JSON-RPC error; cancelled: error `-32603`
//!   `task <id> was cancelled`. While the task is `input_required`, the
//!   pending `tasks/result` sends the task's `elicitation/create` (params
//!   `{"mode":"form","message","requestedSchema","_meta":{"io.modelcontextprotocol/related-task":{"taskId"}}}`)
//!   to the client (stdio: on the connection; Streamable HTTP: on that
//!   `tasks/result` request's SSE stream); the answer moves the task back to
//!   `working`. If that request goes away unanswered, the next `tasks/result` asks again.
//! * `tasks/cancel {taskId}` → the Task with status `cancelled`
//!   (`statusMessage` "The task was cancelled by request."); a terminal task: `-32602`.
//! * `tasks/list {cursor?}` → `{"tasks": [...], "nextCursor"?}`, the caller's
//!   tasks in creation order, [`LIST_PAGE_SIZE`] per page; bad cursor `-32602`.
//!
//! Deliberate choices: a tool result with `isError: true` leaves the task
//! `completed` in both eras (the 2025-11-25 page says such a task "should"
//! be `failed`; SEP-2663 requires `completed`, and one behaviour keeps the
//! gateway's handling uniform); `tasks/result` and the result stay exactly
//! the CallToolResult either way. rmcp adds `_meta.progressToken` to the
//! `elicitation/create` it sends, next to the related-task key.
//!
//! ## 2026-07-28 flow (SEP-2663)
//!
//! * `tools/call` of a task tool whose request `_meta["io.modelcontextprotocol/clientCapabilities"].extensions`
//!   holds `io.modelcontextprotocol/tasks` → CreateTaskResult
//!   `{"resultType":"task", taskId, status, statusMessage, createdAt, lastUpdatedAt, ttlMs, pollIntervalMs, "_meta"?}`.
//!   Without the capability: `required` tools → `-32021`
//!   `data.requiredCapabilities = {"extensions":{"io.modelcontextprotocol/tasks":{}}}`;
//!   `task_optional` runs synchronously. A `task` param is ignored.
//! * `tasks/get` → DetailedTask with `resultType: "complete"`:
//!   `input_required` carries `inputRequests` `{"name-N": {"method":"elicitation/create","params":{"mode":"form",...}}}`
//!   (`N` counts the task's questions; keys are never reused), `completed`
//!   carries `result` (the CallToolResult), `failed` carries `error`.
//! * `tasks/update {taskId, inputResponses}` → `{"resultType":"complete"}`;
//!   entries for unknown or already answered keys are ignored.
//! * `tasks/cancel` → `{"resultType":"complete"}` (a terminal task stays as it is).
//! * `tasks/result`, `tasks/list` → `-32601`. rmcp answers `tasks/*` from a
//!   request that does not declare the extension with `-32021`; on HTTP it
//!   requires the `Mcp-Name` header (= `taskId`; missing or different:
//!   HTTP 400, `-32020`) as SEP-2663 asks of clients.
//!
//! ## Both eras
//!
//! * Unknown, expired or foreign `taskId` → `-32602`, message
//!   `Failed to retrieve task: task not found: <id>`.
//! * Tasks belong to the caller's identity, not to a connection or session:
//!   over HTTP the value of the `Authorization` request header (`anonymous`
//!   when absent), over stdio the process (`stdio`). They live in process
//!   memory shared by every session, so a new HTTP connection with the same
//!   `Authorization` can poll (and answer, cancel) a task; another identity
//!   gets "task not found". A task created in one era can be read in the other.
//! * Task ids are 128 random bits (hex, from the standard library's randomly
//!   keyed SipHash), prefixed `task-`.
//!
//! ## `--tasks-bench`
//!
//! Same protocol. Nothing is logged per request (the log level is `error`
//! unless `RUST_LOG` says otherwise, so not even rmcp's warnings about error
//! replies), and each task's 2025-11-25 JSON is precomputed on every status
//! change. Measured on a release build holding 10,000 `task_sleep` tasks:
//! about 80-100 µs of server CPU per `tasks/get` over Streamable HTTP in
//! either era, i.e. under 20 % of one core at 10,000 tasks polled every 5 s.
//!
//! # How it is wired
//!
//! rmcp 3.11 implements SEP-2663 (2026-07-28), which this module plugs into
//! ([`TaskServer::call_tool`], [`TaskServer::get_modern`], ...). It has no
//! 2025-11-25 tasks and parses a `tools/call`'s `task` field away, so
//! [`rewrite_incoming`] renames legacy task requests (raw JSON, before rmcp
//! parses them) to private methods under [`LEGACY_PREFIX`], which reach
//! [`TaskServer::legacy_request`] as custom requests with untouched params.
//! [`fix_outgoing`] puts what rmcp cannot express back on the way out
//! (`capabilities.tasks` in `initialize`, `execution.taskSupport` in
//! `tools/list`). Stdio uses [`TaskStdio`] (a line transport doing both);
//! HTTP uses [`rewrite_http_request`] (incoming) and [`TaskSessions`]
//! (outgoing, on each legacy session's transport).
//!
//! The MCP handler ([`crate::server`]) serves the [`tool_definitions`],
//! routes their calls to [`TaskServer::call_tool`] and hands the task
//! methods to the rest; this module knows nothing of the handler.

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    hash::{BuildHasher, Hasher},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use axum::{
    body::{Body, to_bytes},
    extract::Request,
    http::{Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use futures::Stream;
use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{
        CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
        ClientJsonRpcMessage, CreateTaskResult, CustomRequest, CustomResult, DetailedTask,
        ErrorCode, GetTaskParams, GetTaskResult, InputRequest, JsonObject, MetaObject,
        ServerJsonRpcMessage, ServerRequest, ServerResult, TASKS_EXTENSION_ID, Task as WireTask,
        TaskPayload, TaskStatus, Tool, UpdateTaskParams,
    },
    service::{RequestContext, RxJsonRpcMessage, ServiceError, TxJsonRpcMessage},
    transport::{
        Transport,
        common::server_side_http::ServerSseMessage,
        streamable_http_server::{SessionId, SessionManager},
    },
};
use serde_json::{Map, Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines, Stdin, Stdout},
    sync::{oneshot, watch},
};
use tokio_util::sync::CancellationToken;

use crate::{era, executions};

/// `_meta` key tying a message to its task (2025-11-25 tasks, "Related Task Metadata").
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// `_meta` key of a CreateTaskResult's text for the model.
pub const IMMEDIATE_RESPONSE: &str = "io.modelcontextprotocol/model-immediate-response";
/// Request `_meta` key holding a 2026-07-28 request's protocol version.
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
/// The first protocol version of the 2026-07-28 lifecycle.
const PROTOCOL_2026: &str = "2026-07-28";
/// `pollInterval` / `pollIntervalMs` unless a call sets `pollIntervalMs`, in ms.
pub const DEFAULT_POLL_INTERVAL_MS: u64 = 5_000;
/// `ttl` / `ttlMs` unless a 2025-11-25 call asks for another, in ms (1 h).
pub const DEFAULT_TTL_MS: u64 = 3_600_000;
/// Tasks per `tasks/list` page (2025-11-25).
pub const LIST_PAGE_SIZE: usize = 100;
/// Prefix of the private method names legacy task requests are renamed to.
pub const LEGACY_PREFIX: &str = "switchyard-reference/legacy/";
/// Tool `_meta` key, set by `tools/list` for 2025-11-25 requests and turned
/// into `execution.taskSupport` by [`fix_outgoing`]; never on the wire.
const TASK_SUPPORT_MARKER: &str = "switchyard-reference/taskSupport";
/// How often expired tasks are swept.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

const WORKING_MESSAGE: &str = "The operation is now in progress.";
const INPUT_MESSAGE: &str = "The task needs input: answer its elicitation.";
const CANCELLED_MESSAGE: &str = "The task was cancelled by request.";
const FAIL_MESSAGE: &str = "task_fail: failed on purpose";
const ASK_MESSAGE: &str = "Name for the task?";

/// Task tools and their `execution.taskSupport`.
const TASK_TOOLS: &[(&str, Support)] = &[
    ("task_sleep", Support::Required),
    ("task_optional", Support::Optional),
    ("task_fail", Support::Required),
    ("task_ask", Support::Required),
    ("task_forever", Support::Required),
];

/// `execution.taskSupport` of a task tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Support {
    Required,
    Optional,
}

impl Support {
    fn as_str(self) -> &'static str {
        match self {
            Self::Required => "required",
            Self::Optional => "optional",
        }
    }
}

fn support_of(name: &str) -> Option<Support> {
    TASK_TOOLS
        .iter()
        .find(|(tool, _)| *tool == name)
        .map(|&(_, support)| support)
}

// ---------------------------------------------------------------------------
// Tool definitions and arguments
// ---------------------------------------------------------------------------

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => unreachable!("a JSON object literal"),
    }
}

fn common_properties(mut properties: Value) -> Value {
    properties["pollIntervalMs"] = json!({
        "type": "integer", "minimum": 1,
        "description": "Suggested polling interval of the task, in ms (default 5000)."
    });
    properties["immediate"] = json!({
        "type": "string",
        "description": "Returned as _meta[\"io.modelcontextprotocol/model-immediate-response\"] of the CreateTaskResult."
    });
    properties
}

fn ms_property(default: u64) -> Value {
    json!({"type": "integer", "minimum": 0, "default": default, "description": "Milliseconds of work."})
}

fn sleep_output_schema() -> JsonObject {
    object(json!({
        "type": "object",
        "properties": {"ms": {"type": "integer"}, "text": {"type": "string"}},
        "required": ["ms", "text"]
    }))
}

/// The tool definitions served with `--tasks` (raw JSON, in list order);
/// the server routes their calls to [`TaskServer::call_tool`].
pub fn tool_definitions() -> Vec<Tool> {
    let input = |properties: Value, required: &[&str]| {
        let mut schema = json!({"type": "object", "properties": common_properties(properties)});
        if !required.is_empty() {
            schema["required"] = json!(required);
        }
        object(schema)
    };
    vec![
        Tool::new(
            "task_sleep",
            "Task-only (taskSupport required): sleeps `ms` then returns \"slept <ms> ms: <text>\" \
             with structuredContent {ms, text}.",
            input(
                json!({"ms": ms_property(1000), "text": {"type": "string"}}),
                &[],
            ),
        )
        .with_raw_output_schema(Arc::new(sleep_output_schema())),
        Tool::new(
            "task_optional",
            "taskSupport optional: sleeps `ms` as a task, or synchronously without task \
             augmentation; returns \"slept <ms> ms: \".",
            input(json!({"ms": ms_property(200)}), &[]),
        )
        .with_raw_output_schema(Arc::new(sleep_output_schema())),
        Tool::new(
            "task_fail",
            "Task-only: after `ms` fails (mode error: the task fails with JSON-RPC error -32603) \
             or returns isError (mode isError).",
            input(
                json!({"ms": ms_property(200), "mode": {"type": "string", "enum": ["error", "isError"]}}),
                &["mode"],
            ),
        ),
        Tool::new(
            "task_ask",
            "Task-only: after `ms` the task needs input (a form elicitation asking for a name), \
             then returns \"hello <name>\".",
            input(json!({"ms": ms_property(200)}), &[]),
        ),
        Tool::new(
            "task_forever",
            "Task-only: works until cancelled with tasks/cancel.",
            input(json!({}), &[]),
        ),
        Tool::new(
            "task_stats",
            "Task bookkeeping: tasks created, tasks/get polls, and per task the gaps between \
             consecutive tasks/get (ms). Not a task tool.",
            object(json!({
                "type": "object",
                "properties": {"taskId": {"type": "string", "description": "Only this task."}},
            })),
        ),
    ]
}

/// 2025-11-25 `tools/list`: marks the task tools so that [`fix_outgoing`]
/// can give them `execution.taskSupport`.
pub fn mark_legacy_tools(tools: &mut [Tool]) {
    for tool in tools {
        if let Some(support) = support_of(&tool.name) {
            tool.meta
                .get_or_insert_with(|| MetaObject(JsonObject::new()))
                .0
                .insert(TASK_SUPPORT_MARKER.into(), support.as_str().into());
        }
    }
}

/// What a task does.
#[derive(Clone, Debug)]
enum Work {
    Sleep { ms: u64, text: String },
    Fail { ms: u64, is_error: bool },
    Ask { ms: u64 },
    Forever,
}

/// Parsed arguments of a task tool.
#[derive(Debug)]
struct TaskArgs {
    tool: &'static str,
    work: Work,
    poll_interval_ms: u64,
    immediate: Option<String>,
}

fn bad_argument(tool: &str, message: impl std::fmt::Display) -> McpError {
    McpError::invalid_params(format!("{tool}: {message}"), None)
}

fn parse_args(name: &str, arguments: Option<&JsonObject>) -> Result<TaskArgs, McpError> {
    let tool = TASK_TOOLS
        .iter()
        .find(|(tool, _)| *tool == name)
        .map(|&(tool, _)| tool)
        .ok_or_else(|| McpError::invalid_params(format!("tool not found: {name}"), None))?;
    let empty = JsonObject::new();
    let arguments = arguments.unwrap_or(&empty);
    let uint = |key: &str, default: u64| -> Result<u64, McpError> {
        match arguments.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(value) => value.as_u64().ok_or_else(|| {
                bad_argument(tool, format!("`{key}` must be a non-negative integer"))
            }),
        }
    };
    let string = |key: &str| -> Result<Option<String>, McpError> {
        match arguments.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(bad_argument(tool, format!("`{key}` must be a string"))),
        }
    };
    let poll_interval_ms = uint("pollIntervalMs", DEFAULT_POLL_INTERVAL_MS)?;
    if poll_interval_ms == 0 {
        return Err(bad_argument(tool, "`pollIntervalMs` must be at least 1"));
    }
    let immediate = string("immediate")?;
    let work = match tool {
        "task_sleep" => Work::Sleep {
            ms: uint("ms", 1000)?,
            text: string("text")?.unwrap_or_default(),
        },
        "task_optional" => Work::Sleep {
            ms: uint("ms", 200)?,
            text: String::new(),
        },
        "task_fail" => Work::Fail {
            ms: uint("ms", 200)?,
            is_error: match string("mode")?.as_deref() {
                Some("error") => false,
                Some("isError") => true,
                _ => {
                    return Err(bad_argument(
                        tool,
                        "`mode` must be \"error\" or \"isError\"",
                    ));
                }
            },
        },
        "task_ask" => Work::Ask {
            ms: uint("ms", 200)?,
        },
        _ => Work::Forever,
    };
    Ok(TaskArgs {
        tool,
        work,
        poll_interval_ms,
        immediate,
    })
}

fn sleep_result(ms: u64, text: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": format!("slept {ms} ms: {text}")}],
        "structuredContent": {"ms": ms, "text": text},
    })
}

fn text_result(text: String, is_error: bool) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": is_error})
}

fn ask_params() -> Value {
    json!({
        "mode": "form",
        "message": ASK_MESSAGE,
        "requestedSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    })
}

/// The tool result for an answer to `task_ask`'s elicitation.
fn ask_outcome(answer: &Value) -> Value {
    match answer.get("action").and_then(Value::as_str) {
        Some("accept") => match answer.pointer("/content/name").and_then(Value::as_str) {
            Some(name) => text_result(format!("hello {name}"), false),
            None => text_result("task_ask: accept without a name".into(), true),
        },
        Some(action @ ("decline" | "cancel")) => text_result(format!("task_ask: {action}"), true),
        _ => text_result(format!("task_ask: not an ElicitResult: {answer}"), true),
    }
}

// ---------------------------------------------------------------------------
// Task state
// ---------------------------------------------------------------------------

/// The pending question of an `input_required` task.
#[derive(Debug)]
struct Question {
    /// 2026-07-28 `inputRequests` key, unique within the task.
    key: String,
    /// `elicitation/create` params (without `_meta`).
    params: Value,
    /// Wakes the task's worker with the client's `ElicitResult`.
    answer: oneshot::Sender<Value>,
    /// The 2025-11-25 `tasks/result` asking it right now (its number).
    asker: Option<u64>,
}

/// How a finished task ended.
#[derive(Clone, Debug)]
enum Outcome {
    /// `completed`: the CallToolResult.
    Completed(Value),
    /// `failed`: the JSON-RPC error object.
    Failed(Value),
}

#[derive(Debug)]
struct TaskState {
    id: String,
    owner: String,
    created_at: String,
    created: Instant,
    last_updated_at: String,
    ttl_ms: u64,
    poll_interval_ms: u64,
    status: TaskStatus,
    status_message: Option<String>,
    outcome: Option<Outcome>,
    question: Option<Question>,
    questions_asked: u32,
    cancel: CancellationToken,
    /// Bumped on every change; `tasks/result` waits on it.
    changed: watch::Sender<u64>,
    polls: u64,
    last_poll: Option<Instant>,
    poll_gaps_ms: Vec<u64>,
    /// [`TaskState::legacy_json`], kept current by [`TaskState::touch`].
    legacy: Value,
}

impl TaskState {
    fn expired(&self, now: Instant) -> bool {
        now.duration_since(self.created) > Duration::from_millis(self.ttl_ms)
    }

    fn touch(&mut self, status: TaskStatus, message: Option<&str>) {
        self.status = status;
        self.status_message = message.map(str::to_owned);
        self.last_updated_at = rfc3339(SystemTime::now());
        self.legacy = self.build_legacy_json();
        self.changed.send_modify(|version| *version += 1);
    }

    /// The 2025-11-25 `Task` object (precomputed on every change).
    fn legacy_json(&self) -> Value {
        self.legacy.clone()
    }

    fn build_legacy_json(&self) -> Value {
        let mut task = Map::new();
        task.insert("taskId".into(), self.id.clone().into());
        task.insert("status".into(), status_str(self.status).into());
        if let Some(message) = &self.status_message {
            task.insert("statusMessage".into(), message.clone().into());
        }
        task.insert("createdAt".into(), self.created_at.clone().into());
        task.insert("lastUpdatedAt".into(), self.last_updated_at.clone().into());
        task.insert("ttl".into(), self.ttl_ms.into());
        task.insert("pollInterval".into(), self.poll_interval_ms.into());
        Value::Object(task)
    }

    /// The 2026-07-28 base `Task`.
    fn modern(&self) -> WireTask {
        let mut task = WireTask::new(
            self.id.clone(),
            self.status,
            self.created_at.clone(),
            self.last_updated_at.clone(),
        )
        .with_ttl_ms(self.ttl_ms)
        .with_poll_interval_ms(self.poll_interval_ms);
        task.status_message = self.status_message.clone();
        task
    }

    /// The 2026-07-28 `DetailedTask`.
    fn detailed(&self) -> DetailedTask {
        let payload = match (&self.outcome, &self.question, self.status) {
            (_, _, TaskStatus::Cancelled) => TaskPayload::Cancelled,
            (Some(Outcome::Completed(result)), _, _) => TaskPayload::Completed {
                result: as_object(result),
            },
            (Some(Outcome::Failed(error)), _, _) => TaskPayload::Failed {
                error: as_object(error),
            },
            (None, Some(question), TaskStatus::InputRequired) => {
                let request: InputRequest = serde_json::from_value(json!({
                    "method": "elicitation/create",
                    "params": question.params,
                }))
                .expect("a valid elicitation/create input request");
                TaskPayload::InputRequired {
                    input_requests: BTreeMap::from([(question.key.clone(), request)]),
                }
            }
            _ => TaskPayload::Working,
        };
        DetailedTask::new(self.modern(), payload)
    }
}

fn as_object(value: &Value) -> JsonObject {
    value.as_object().cloned().unwrap_or_default()
}

fn status_str(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Working => "working",
        TaskStatus::InputRequired => "input_required",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Cancelled => "cancelled",
        _ => "unknown",
    }
}

/// RFC 3339 / ISO 8601 UTC timestamp with milliseconds, e.g. `2026-11-30T08:13:26.123Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// The caller's identity: HTTP `Authorization` header value (`anonymous`
/// when absent); `stdio` without HTTP.
fn identity(context: &RequestContext<RoleServer>) -> String {
    match context.extensions.get::<axum::http::request::Parts>() {
        None => "stdio".to_owned(),
        Some(parts) => parts
            .headers
            .get(header::AUTHORIZATION)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
            .unwrap_or_else(|| "anonymous".to_owned()),
    }
}

fn not_found(task_id: &str) -> McpError {
    McpError::invalid_params(
        format!("Failed to retrieve task: task not found: {task_id}"),
        None,
    )
}

fn task_id_param(params: Option<&Value>) -> Result<String, McpError> {
    params
        .and_then(|p| p.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| McpError::invalid_params("params.taskId (string) is required", None))
}

/// Every task of the process, shared by all sessions and connections.
#[derive(Debug)]
pub struct TaskServer {
    tasks: Mutex<HashMap<String, TaskState>>,
    /// Creation order, for `tasks/list`.
    order: Mutex<Vec<String>>,
    created: AtomicU64,
    polls: AtomicU64,
    /// Numbers the 2025-11-25 `tasks/result` requests that ask a question.
    askers: AtomicU64,
    /// `--tasks-bench`: no logging per request.
    bench: bool,
    ids: std::collections::hash_map::RandomState,
}

impl TaskServer {
    /// A task store; with `bench`, request handling logs nothing. Starts the
    /// expiry sweeper on the current Tokio runtime.
    pub fn new(bench: bool) -> Arc<Self> {
        let server = Arc::new(Self {
            tasks: Mutex::default(),
            order: Mutex::default(),
            created: AtomicU64::new(0),
            polls: AtomicU64::new(0),
            askers: AtomicU64::new(0),
            bench,
            ids: std::collections::hash_map::RandomState::new(),
        });
        let weak = Arc::downgrade(&server);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            loop {
                tick.tick().await;
                let Some(server) = weak.upgrade() else { return };
                server.sweep();
            }
        });
        server
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, TaskState>> {
        self.tasks.lock().expect("task table lock poisoned")
    }

    fn sweep(&self) {
        let now = Instant::now();
        let mut tasks = self.lock();
        let before = tasks.len();
        tasks.retain(|_, task| {
            let keep = !task.expired(now);
            if !keep {
                task.cancel.cancel();
            }
            keep
        });
        if tasks.len() != before {
            let mut order = self.order.lock().expect("task order lock poisoned");
            order.retain(|id| tasks.contains_key(id));
        }
    }

    fn new_id(&self, n: u64) -> String {
        let mut a = self.ids.build_hasher();
        a.write_u64(n);
        let mut b = self.ids.build_hasher();
        b.write_u64(!n);
        b.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        format!("task-{:016x}{:016x}", a.finish(), b.finish())
    }

    /// Runs `f` on the caller's task `task_id`; "task not found" when it does
    /// not exist, expired, or belongs to another identity.
    fn with_task<R>(
        &self,
        owner: &str,
        task_id: &str,
        f: impl FnOnce(&mut TaskState) -> R,
    ) -> Result<R, McpError> {
        let mut tasks = self.lock();
        match tasks.get_mut(task_id) {
            Some(task) if task.owner == owner && !task.expired(Instant::now()) => Ok(f(task)),
            _ => Err(not_found(task_id)),
        }
    }

    /// Creates a task running `args` for `owner` and starts its work.
    /// Returns the task id; the task is in the table before this returns.
    fn spawn(self: &Arc<Self>, owner: String, args: &TaskArgs, ttl_ms: u64) -> String {
        let n = self.created.fetch_add(1, Ordering::Relaxed) + 1;
        let id = self.new_id(n);
        let now = rfc3339(SystemTime::now());
        let cancel = CancellationToken::new();
        let mut task = TaskState {
            id: id.clone(),
            owner,
            created_at: now.clone(),
            created: Instant::now(),
            last_updated_at: now,
            ttl_ms,
            poll_interval_ms: args.poll_interval_ms,
            status: TaskStatus::Working,
            status_message: Some(WORKING_MESSAGE.into()),
            outcome: None,
            question: None,
            questions_asked: 0,
            cancel: cancel.clone(),
            changed: watch::Sender::new(0),
            polls: 0,
            last_poll: None,
            poll_gaps_ms: Vec::new(),
            legacy: Value::Null,
        };
        task.legacy = task.build_legacy_json();
        self.lock().insert(id.clone(), task);
        self.order
            .lock()
            .expect("task order lock poisoned")
            .push(id.clone());
        if !self.bench {
            tracing::debug!(task_id = %id, tool = args.tool, "task created");
        }
        let server = Arc::clone(self);
        let work = args.work.clone();
        let task_id = id.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = server.work(&task_id, work) => {}
                () = cancel.cancelled() => {}
            }
        });
        id
    }

    /// Moves a non-terminal task to `outcome`.
    fn finish(&self, task_id: &str, outcome: Outcome) {
        let mut tasks = self.lock();
        let Some(task) = tasks.get_mut(task_id) else {
            return;
        };
        if task.status.is_terminal() {
            return;
        }
        task.question = None;
        let (status, message) = match &outcome {
            Outcome::Completed(_) => (TaskStatus::Completed, "The operation completed."),
            Outcome::Failed(_) => (TaskStatus::Failed, FAIL_MESSAGE),
        };
        task.outcome = Some(outcome);
        task.touch(status, Some(message));
    }

    async fn work(&self, task_id: &str, work: Work) {
        match work {
            Work::Sleep { ms, text } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                self.finish(task_id, Outcome::Completed(sleep_result(ms, &text)));
            }
            Work::Fail { ms, is_error } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let outcome = if is_error {
                    Outcome::Completed(text_result("task_fail: tool error on purpose".into(), true))
                } else {
                    Outcome::Failed(
                        json!({"code": ErrorCode::INTERNAL_ERROR.0, "message": FAIL_MESSAGE}),
                    )
                };
                self.finish(task_id, outcome);
            }
            Work::Ask { ms } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let (answer, answered) = oneshot::channel();
                {
                    let mut tasks = self.lock();
                    let Some(task) = tasks.get_mut(task_id) else {
                        return;
                    };
                    if task.status.is_terminal() {
                        return;
                    }
                    task.questions_asked += 1;
                    task.question = Some(Question {
                        key: format!("name-{}", task.questions_asked),
                        params: ask_params(),
                        answer,
                        asker: None,
                    });
                    task.touch(TaskStatus::InputRequired, Some(INPUT_MESSAGE));
                }
                // The sender lives in the task; it only goes away with the task.
                let Ok(answer) = answered.await else { return };
                self.finish(task_id, Outcome::Completed(ask_outcome(&answer)));
            }
            Work::Forever => std::future::pending().await,
        }
    }

    /// Delivers an answer to the pending question `key` (any key when
    /// `None`); ignored when no such question is pending. The task goes back
    /// to `working`.
    fn answer(task: &mut TaskState, key: Option<&str>, answer: Value) -> bool {
        if task.status != TaskStatus::InputRequired
            || task
                .question
                .as_ref()
                .is_none_or(|q| key.is_some_and(|key| key != q.key))
        {
            return false;
        }
        let question = task.question.take().expect("checked above");
        task.touch(TaskStatus::Working, Some(WORKING_MESSAGE));
        let _ = question.answer.send(answer);
        true
    }

    /// A `tasks/get` (either era): counts the poll and the gap since the
    /// task's previous one, then runs `f` on the task.
    fn poll<R>(
        &self,
        owner: &str,
        task_id: &str,
        f: impl FnOnce(&TaskState) -> R,
    ) -> Result<R, McpError> {
        self.polls.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        self.with_task(owner, task_id, |task| {
            task.polls += 1;
            if let Some(last) = task.last_poll.replace(now) {
                let gap = now.duration_since(last).as_millis();
                task.poll_gaps_ms
                    .push(u64::try_from(gap).unwrap_or(u64::MAX));
            }
            f(task)
        })
    }

    /// `task_stats`: `{"tasks", "polls", "perTask": {id: {"polls", "pollGapsMs"}}}`.
    fn stats(&self, only: Option<&str>) -> Value {
        let tasks = self.lock();
        let per_task: Map<String, Value> = tasks
            .values()
            .filter(|task| only.is_none_or(|id| id == task.id))
            .map(|task| {
                (
                    task.id.clone(),
                    json!({"polls": task.polls, "pollGapsMs": task.poll_gaps_ms}),
                )
            })
            .collect();
        json!({
            "tasks": self.created.load(Ordering::Relaxed),
            "polls": self.polls.load(Ordering::Relaxed),
            "perTask": per_task,
        })
    }

    // -----------------------------------------------------------------------
    // 2026-07-28 (SEP-2663), through rmcp
    // -----------------------------------------------------------------------

    /// `tools/call` of one of the [`tool_definitions`] that rmcp routed here
    /// (either era, no 2025-11-25 `task` param): `task_stats` answers at
    /// once, every other tool goes to [`create`](Self::create).
    pub async fn call_tool(
        self: &Arc<Self>,
        name: &str,
        arguments: Option<&JsonObject>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if name == "task_stats" {
            let only = arguments
                .and_then(|a| a.get("taskId"))
                .and_then(Value::as_str);
            return Ok(CallToolResult::structured(self.stats(only)).into());
        }
        self.create(name, arguments, context).await
    }

    /// `tools/call` of a task tool that rmcp routed here (either era, no
    /// 2025-11-25 `task` param). See the module docs for the outcomes.
    pub async fn create(
        self: &Arc<Self>,
        name: &str,
        arguments: Option<&JsonObject>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = parse_args(name, arguments)?;
        let modern = era::is_modern(context.protocol_version().as_ref());
        let declared = modern
            && context
                .client_capabilities()
                .is_some_and(|caps| caps.supports_tasks());
        if declared {
            let id = self.spawn(identity(context), &args, DEFAULT_TTL_MS);
            let task = self.with_task(&identity(context), &id, |task| task.modern())?;
            let mut result = CreateTaskResult::new(task);
            if let Some(text) = &args.immediate {
                let mut meta = JsonObject::new();
                meta.insert(IMMEDIATE_RESPONSE.into(), text.clone().into());
                result = result.with_meta(MetaObject(meta));
            }
            return Ok(CallToolResponse::Task(result));
        }
        match (support_of(name), &args.work) {
            (Some(Support::Optional), Work::Sleep { ms, text }) => {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                let result: CallToolResult = serde_json::from_value(sleep_result(*ms, text))
                    .expect("a valid CallToolResult");
                Ok(result.into())
            }
            _ if modern => Err(McpError::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            )),
            _ => Err(task_required(name)),
        }
    }

    /// SEP-2663 `tasks/get`.
    pub fn get_modern(
        &self,
        params: &GetTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let task = self.poll(&identity(context), &params.task_id, TaskState::detailed)?;
        Ok(GetTaskResult::new(task))
    }

    /// SEP-2663 `tasks/update`: answers the pending question when its key is
    /// among `inputResponses`; anything else is ignored.
    pub fn update_modern(
        &self,
        params: UpdateTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let owner = identity(context);
        self.with_task(&owner, &params.task_id, |task| {
            let key = task.question.as_ref().map(|q| q.key.clone());
            if let Some(key) = key
                && let Some(answer) = params.input_responses.get(&key)
            {
                Self::answer(task, Some(&key), answer.clone());
            }
        })
    }

    /// SEP-2663 `tasks/cancel`: a non-terminal task becomes `cancelled`.
    pub fn cancel_modern(
        &self,
        params: &CancelTaskParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.with_task(&identity(context), &params.task_id, Self::cancel_task)
            .map(drop)
    }

    fn cancel_task(task: &mut TaskState) -> bool {
        if task.status.is_terminal() {
            return false;
        }
        task.question = None;
        task.cancel.cancel();
        task.touch(TaskStatus::Cancelled, Some(CANCELLED_MESSAGE));
        true
    }

    // -----------------------------------------------------------------------
    // 2025-11-25, raw JSON
    // -----------------------------------------------------------------------

    /// A renamed 2025-11-25 task request ([`LEGACY_PREFIX`] + `tools/call`,
    /// `tasks/get`, `tasks/result`, `tasks/cancel` or `tasks/list`).
    pub async fn legacy_request(
        self: &Arc<Self>,
        method: &str,
        params: Option<Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let owner = identity(&context);
        let value = match method {
            "tools/call" => self.legacy_create(owner, params.as_ref(), &context)?,
            "tasks/get" => {
                let id = task_id_param(params.as_ref())?;
                self.poll(&owner, &id, TaskState::legacy_json)?
            }
            "tasks/result" => {
                let id = task_id_param(params.as_ref())?;
                return self.legacy_result(&owner, &id, &context).await;
            }
            "tasks/cancel" => {
                let id = task_id_param(params.as_ref())?;
                self.with_task(&owner, &id, |task| {
                    if Self::cancel_task(task) {
                        Ok(task.legacy_json())
                    } else {
                        Err(McpError::invalid_params(
                            format!(
                                "Cannot cancel task: already in terminal status '{}'",
                                status_str(task.status)
                            ),
                            None,
                        ))
                    }
                })??
            }
            "tasks/list" => self.legacy_list(&owner, params.as_ref())?,
            other => {
                return Err(McpError::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!("Method not found: {other}"),
                    None,
                ));
            }
        };
        Ok(CustomResult(value))
    }

    fn legacy_create(
        self: &Arc<Self>,
        owner: String,
        params: Option<&Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value, McpError> {
        let raw = params;
        let params = params.and_then(Value::as_object);
        let name = params
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .ok_or_else(|| McpError::invalid_params("params.name (string) is required", None))?;
        if support_of(name).is_none() {
            return Err(McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "tool {name} does not support task-augmented execution (execution.taskSupport is forbidden)"
                ),
                None,
            ));
        }
        let arguments = match params.and_then(|p| p.get("arguments")) {
            None | Some(Value::Null) => None,
            Some(Value::Object(arguments)) => Some(arguments),
            Some(_) => {
                return Err(McpError::invalid_params(
                    "params.arguments must be an object",
                    None,
                ));
            }
        };
        let args = parse_args(name, arguments)?;
        let ttl_ms = match params
            .and_then(|p| p.get("task"))
            .and_then(|t| t.get("ttl"))
        {
            None | Some(Value::Null) => DEFAULT_TTL_MS,
            Some(ttl) => ttl.as_u64().ok_or_else(|| {
                McpError::invalid_params("params.task.ttl must be a non-negative integer", None)
            })?,
        };
        let id = self.spawn(owner.clone(), &args, ttl_ms);
        if let Some(raw) = raw {
            executions::record_raw(raw, &context.meta);
        }
        let task = self.with_task(&owner, &id, |task| task.legacy_json())?;
        let mut result = Map::new();
        result.insert("task".into(), task);
        if let Some(text) = args.immediate {
            result.insert("_meta".into(), json!({ IMMEDIATE_RESPONSE: text }));
        }
        Ok(Value::Object(result))
    }

    fn legacy_list(&self, owner: &str, params: Option<&Value>) -> Result<Value, McpError> {
        let start = match params.and_then(|p| p.get("cursor")) {
            None | Some(Value::Null) => 0,
            Some(cursor) => cursor
                .as_str()
                .and_then(|c| c.parse::<usize>().ok())
                .ok_or_else(|| McpError::invalid_params("invalid cursor", None))?,
        };
        let order = self.order.lock().expect("task order lock poisoned").clone();
        let tasks = self.lock();
        let now = Instant::now();
        let mine: Vec<&TaskState> = order
            .iter()
            .filter_map(|id| tasks.get(id))
            .filter(|task| task.owner == owner && !task.expired(now))
            .collect();
        if start > mine.len() {
            return Err(McpError::invalid_params("invalid cursor", None));
        }
        let end = mine.len().min(start + LIST_PAGE_SIZE);
        let mut result = json!({
            "tasks": mine[start..end].iter().map(|t| t.legacy_json()).collect::<Vec<_>>(),
        });
        if end < mine.len() {
            result["nextCursor"] = end.to_string().into();
        }
        Ok(result)
    }

    /// `tasks/result`: waits for a terminal status, asking the task's pending
    /// question through this request's peer (stdio: the connection; HTTP:
    /// this request's SSE stream). A new `tasks/result` always asks (the
    /// client may have left an earlier one's stream); one already waiting
    /// asks when nobody else is asking. Whichever answer comes first counts.
    async fn legacy_result(
        &self,
        owner: &str,
        task_id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let mut changed = self.with_task(owner, task_id, |task| task.changed.subscribe())?;
        let mut fresh = true;
        loop {
            enum Next {
                Done(Result<Value, McpError>),
                Ask(Value, u64),
                Wait,
            }
            let next =
                self.with_task(owner, task_id, |task| match (&task.outcome, task.status) {
                    (_, TaskStatus::Cancelled) => Next::Done(Err(McpError::internal_error(
                        format!("task {task_id} was cancelled"),
                        None,
                    ))),
                    (Some(Outcome::Completed(result)), _) => {
                        let mut result = result.clone();
                        result
                            .as_object_mut()
                            .expect("a CallToolResult object")
                            .entry("_meta")
                            .or_insert_with(|| json!({}))[RELATED_TASK] =
                            json!({"taskId": task_id});
                        Next::Done(Ok(result))
                    }
                    (Some(Outcome::Failed(error)), _) => Next::Done(Err(McpError::new(
                        ErrorCode(
                            error["code"]
                                .as_i64()
                                .and_then(|c| i32::try_from(c).ok())
                                .unwrap_or(ErrorCode::INTERNAL_ERROR.0),
                        ),
                        error["message"].as_str().unwrap_or_default().to_owned(),
                        error.get("data").cloned(),
                    ))),
                    (None, _) => match task.question.as_mut() {
                        Some(question) if fresh || question.asker.is_none() => {
                            let asker = self.askers.fetch_add(1, Ordering::Relaxed);
                            question.asker = Some(asker);
                            let mut params = question.params.clone();
                            params["_meta"] = json!({ RELATED_TASK: {"taskId": task_id} });
                            Next::Ask(params, asker)
                        }
                        _ => Next::Wait,
                    },
                })?;
            fresh = false;
            match next {
                Next::Done(result) => return result.map(CustomResult),
                Next::Wait => {
                    if changed.changed().await.is_err() {
                        return Err(not_found(task_id));
                    }
                }
                Next::Ask(params, asker) => {
                    let guard = AskingGuard {
                        server: self,
                        owner,
                        task_id,
                        asker,
                    };
                    let request = ServerRequest::CustomRequest(CustomRequest::new(
                        "elicitation/create",
                        Some(params),
                    ));
                    let asked = tokio::select! {
                        answer = context.peer.send_request(request) => Some(answer),
                        // Answered elsewhere (tasks/update), cancelled or expired.
                        _ = changed.changed() => None,
                    };
                    let answer = match asked {
                        None => None,
                        Some(Ok(answer)) => Some(serde_json::to_value(answer).unwrap_or_default()),
                        // The client refused the request: as if it cancelled.
                        Some(Err(ServiceError::McpError(_))) => Some(json!({"action": "cancel"})),
                        Some(Err(error)) => {
                            return Err(McpError::internal_error(
                                format!("elicitation/create for task {task_id} failed: {error}"),
                                None,
                            ));
                        }
                    };
                    if let Some(answer) = answer {
                        self.with_task(owner, task_id, |task| Self::answer(task, None, answer))?;
                    }
                    drop(guard);
                }
            }
        }
    }
}

/// Releases a task's question for the next `tasks/result` when the one
/// asking it stops (answered, failed, or dropped with its HTTP request).
struct AskingGuard<'a> {
    server: &'a TaskServer,
    owner: &'a str,
    task_id: &'a str,
    asker: u64,
}

impl Drop for AskingGuard<'_> {
    fn drop(&mut self) {
        let _ = self.server.with_task(self.owner, self.task_id, |task| {
            if let Some(question) = task.question.as_mut()
                && question.asker == Some(self.asker)
            {
                question.asker = None;
                // Wakes any other `tasks/result` waiting, so that it asks.
                task.changed.send_modify(|version| *version += 1);
            }
        });
    }
}

/// `-32601` for a `required` tool called without task augmentation (2025-11-25 tasks,
/// "Tool-Level Negotiation").
fn task_required(name: &str) -> McpError {
    McpError::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!(
            "Task augmentation required for tools/call of {name} (execution.taskSupport is required)"
        ),
        None,
    )
}

// ---------------------------------------------------------------------------
// Wire rewriting
// ---------------------------------------------------------------------------

/// Renames a 2025-11-25 task request (raw JSON, before rmcp parses it):
/// `tools/call` with `params.task`, and `tasks/get|result|cancel|list`, become
/// [`LEGACY_PREFIX`]`+method`. A request is 2025-11-25 when its
/// `params._meta` has no `io.modelcontextprotocol/protocolVersion`. Returns
/// whether it renamed anything.
pub fn rewrite_incoming(message: &mut Value) -> bool {
    let Some(method) = message.get("method").and_then(Value::as_str) else {
        return false;
    };
    if message.get("id").is_none() {
        return false;
    }
    let params = message.get("params");
    let modern = params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(PROTOCOL_VERSION_META))
        .is_some();
    let rename = !modern
        && match method {
            "tools/call" => params.and_then(|p| p.get("task")).is_some(),
            "tasks/get" | "tasks/result" | "tasks/cancel" | "tasks/list" => true,
            _ => false,
        };
    if rename {
        message["method"] = format!("{LEGACY_PREFIX}{method}").into();
    }
    rename
}

/// Puts the 2025-11-25 task fields rmcp cannot express into an outgoing
/// message: `capabilities.tasks` (and no tasks extension) in an `initialize`
/// result, `execution.taskSupport` for tools marked by [`mark_legacy_tools`].
pub fn fix_outgoing(message: &mut ServerJsonRpcMessage) {
    let ServerJsonRpcMessage::Response(response) = message else {
        return;
    };
    let fixed = match &response.result {
        ServerResult::InitializeResult(_) => {
            let Ok(mut value) = serde_json::to_value(&response.result) else {
                return;
            };
            let caps = &mut value["capabilities"];
            if let Some(extensions) = caps.get_mut("extensions").and_then(Value::as_object_mut) {
                extensions.remove(TASKS_EXTENSION_ID);
                if extensions.is_empty() {
                    caps.as_object_mut().map(|c| c.remove("extensions"));
                }
            }
            caps["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
            value
        }
        ServerResult::ListToolsResult(list)
            if list.tools.iter().any(|tool| {
                tool.meta
                    .as_ref()
                    .is_some_and(|m| m.0.contains_key(TASK_SUPPORT_MARKER))
            }) =>
        {
            let Ok(mut value) = serde_json::to_value(&response.result) else {
                return;
            };
            for tool in value["tools"].as_array_mut().into_iter().flatten() {
                let Some(meta) = tool.get_mut("_meta").and_then(Value::as_object_mut) else {
                    continue;
                };
                let Some(support) = meta.remove(TASK_SUPPORT_MARKER) else {
                    continue;
                };
                if meta.is_empty() {
                    tool.as_object_mut().map(|t| t.remove("_meta"));
                }
                tool["execution"] = json!({ "taskSupport": support });
            }
            value
        }
        _ => return,
    };
    response.result = ServerResult::CustomResult(CustomResult(fixed));
}

/// Axum middleware renaming 2025-11-25 task requests ([`rewrite_incoming`])
/// in Streamable HTTP POST bodies before rmcp parses them.
pub async fn rewrite_http_request(request: Request, next: Next) -> Response {
    // 2026-07-28 requests name their version in a header (and are never renamed).
    let modern = request
        .headers()
        .get("mcp-protocol-version")
        .is_some_and(|version| version.as_bytes() >= PROTOCOL_2026.as_bytes());
    if request.method() != Method::POST || modern {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, era::MAX_BODY_BYTES).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let renamed = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|mut message| rewrite_incoming(&mut message).then_some(message));
    let body = match renamed {
        Some(message) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            Body::from(message.to_string())
        }
        None => Body::from(bytes),
    };
    next.run(Request::from_parts(parts, body)).await
}

/// A transport wrapper applying [`fix_outgoing`] to what the server sends
/// (used on each legacy Streamable HTTP session by [`TaskSessions`]).
#[derive(Debug)]
pub struct TaskWire<T> {
    inner: T,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for TaskWire<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        fix_outgoing(&mut item);
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// A session manager wrapping `M`'s session transports in [`TaskWire`].
#[derive(Debug, Default)]
pub struct TaskSessions<M> {
    inner: M,
}

impl<M: SessionManager> SessionManager for TaskSessions<M> {
    type Error = M::Error;
    type Transport = TaskWire<M::Transport>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, inner) = self.inner.create_session().await?;
        Ok((id, TaskWire { inner }))
    }

    fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<ServerJsonRpcMessage, Self::Error>> + Send {
        self.inner.initialize_session(id, message)
    }

    fn has_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send {
        self.inner.has_session(id)
    }

    fn close_session(
        &self,
        id: &SessionId,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close_session(id)
    }

    fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_stream(id, message)
    }

    fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.accept_message(id, message)
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_standalone_stream(id)
    }

    fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> impl Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.resume(id, last_event_id)
    }
}

/// The stdio transport used with `--tasks`: newline-delimited JSON-RPC on
/// stdin/stdout, renaming legacy task requests ([`rewrite_incoming`]) before
/// rmcp parses them and applying [`fix_outgoing`] to what goes out.
/// Lines that are not JSON-RPC messages are logged and skipped.
#[derive(Debug)]
pub struct TaskStdio {
    lines: Lines<BufReader<Stdin>>,
    stdout: Arc<tokio::sync::Mutex<Stdout>>,
}

impl TaskStdio {
    /// Over this process's stdin and stdout.
    pub fn new() -> Self {
        Self {
            lines: BufReader::new(tokio::io::stdin()).lines(),
            stdout: Arc::new(tokio::sync::Mutex::new(tokio::io::stdout())),
        }
    }
}

impl Transport<RoleServer> for TaskStdio {
    type Error = std::io::Error;

    fn name() -> Cow<'static, str> {
        "TaskStdio".into()
    }

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        fix_outgoing(&mut item);
        let line = serde_json::to_string(&item);
        let stdout = Arc::clone(&self.stdout);
        async move {
            let mut line = line.map_err(std::io::Error::other)?;
            line.push('\n');
            let mut stdout = stdout.lock().await;
            stdout.write_all(line.as_bytes()).await?;
            stdout.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let line = match self.lines.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => return None,
                Err(error) => {
                    tracing::warn!(%error, "reading stdin");
                    return None;
                }
            };
            if line.trim().is_empty() {
                continue;
            }
            let mut value: Value = match serde_json::from_str(&line) {
                Ok(value) => value,
                Err(error) => {
                    tracing::warn!(%error, "skipping a stdin line that is not JSON");
                    continue;
                }
            };
            rewrite_incoming(&mut value);
            match serde_json::from_value(value) {
                Ok(message) => return Some(message),
                Err(error) => tracing::warn!(%error, "skipping a stdin line that is not JSON-RPC"),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.stdout.lock().await.flush().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc_with_millis() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_944_806_123);
        assert_eq!(rfc3339(t), "2026-11-29T09:33:26.123Z");
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn legacy_requests_are_renamed_modern_ones_are_not() {
        let mut call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"task_sleep","task":{"ttl":1}}});
        assert!(rewrite_incoming(&mut call));
        assert_eq!(call["method"], format!("{LEGACY_PREFIX}tools/call"));
        let mut plain =
            json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"task_sleep"}});
        assert!(!rewrite_incoming(&mut plain));
        let mut modern = json!({"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t","_meta":{PROTOCOL_VERSION_META:"2026-07-28"}}});
        assert!(!rewrite_incoming(&mut modern));
        let mut legacy_get =
            json!({"jsonrpc":"2.0","id":"x","method":"tasks/get","params":{"taskId":"t"}});
        assert!(rewrite_incoming(&mut legacy_get));
    }

    #[test]
    fn ask_outcomes() {
        let accept = ask_outcome(&json!({"action":"accept","content":{"name":"Ada"}}));
        assert_eq!(accept["content"][0]["text"], "hello Ada");
        assert_eq!(accept["isError"], false);
        let decline = ask_outcome(&json!({"action":"decline"}));
        assert_eq!(decline["content"][0]["text"], "task_ask: decline");
        assert_eq!(decline["isError"], true);
    }
}
