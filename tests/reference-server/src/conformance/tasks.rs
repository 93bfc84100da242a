//! The SEP-2663 task engine behind the fixture's task tools (the suite's
//! `tasks-*` scenarios; 2026-07-28 with the `io.modelcontextprotocol/tasks`
//! extension).
//!
//! * A task tool called by a request that declares the extension in its
//!   client capabilities returns a flat CreateTaskResult
//!   (`resultType: "task"`, `taskId`, `status`, `createdAt`, `lastUpdatedAt`,
//!   `ttlMs`, `pollIntervalMs`; never `requestState`); the task is in the
//!   table before the result leaves, so an immediate `tasks/get` finds it.
//! * Without the extension, an `optional` tool (`slow_compute`) runs
//!   synchronously and a `required` one is `-32021` with
//!   `data.requiredCapabilities.extensions["io.modelcontextprotocol/tasks"]`.
//! * `tasks/get` returns the DetailedTask: `inputRequests` while
//!   `input_required` (only the keys still unanswered), the CallToolResult as
//!   `result` once `completed` (a tool error is `completed` with
//!   `isError: true`), the JSON-RPC error as `error` once `failed`.
//! * `tasks/update` delivers `inputResponses` entries for pending keys (others
//!   are ignored); the task stays `input_required` until every pending key is
//!   answered. `tasks/cancel` moves a running task to `cancelled`; on a
//!   terminal task it is the same empty acknowledgement. An unknown `taskId`
//!   is `-32602`. (rmcp itself answers `tasks/*` of a request without the
//!   extension with `-32021` and checks `Mcp-Name` against `taskId`.)
//!
//! Tasks live in process memory for [`TTL_MS`] and belong to nobody in
//! particular (this is a test fixture).

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities,
        CreateTaskResult, DetailedTask, GetTaskResult, InputRequest, JsonObject, Task as WireTask,
        TaskPayload, TaskStatus, UpdateTaskParams,
    },
    service::RequestContext,
};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{
    from_json,
    mrtr::{self, Ask, Flow, Obtained},
    result_from_json,
};
use crate::tasks::rfc3339;

/// How long a task is kept (`ttlMs`), in ms (1 h).
pub const TTL_MS: u64 = 3_600_000;
/// The suggested polling interval (`pollIntervalMs`), in ms.
pub const POLL_INTERVAL_MS: u64 = 250;

/// A task tool's task support.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Runs as a task with the extension, synchronously without it.
    Optional,
    /// Runs only as a task.
    Required,
}

/// What a task does.
#[derive(Clone, Debug)]
pub enum Work {
    /// `slow_compute`: sleeps, then `Computed LABEL in Ns`.
    Compute { seconds: f64, label: String },
    /// `failing_job`: after about a second, a tool error (`isError`).
    FailingJob,
    /// `protocol_error_job`: fails with a JSON-RPC error (`failed`).
    ProtocolError,
    /// `confirm_delete`: asks to confirm (one elicitation), then answers.
    ConfirmDelete { filename: String },
    /// `multi_input`: asks two elicitations at once.
    MultiInput,
    /// `test_tool_with_task`: greets the name gathered by MRTR before the task.
    Greeting { name: String },
}

/// The `Work` of the task tool `name` with `args`; `-32602` for bad arguments.
pub fn work_of(name: &str, args: &JsonObject) -> Result<Work, McpError> {
    let bad = |what: &str| McpError::invalid_params(format!("{name}: {what}"), None);
    Ok(match name {
        "slow_compute" => {
            let seconds = match args.get("seconds") {
                None => 1.0,
                Some(value) => value
                    .as_f64()
                    .filter(|s| (0.0..=600.0).contains(s))
                    .ok_or_else(|| bad("seconds must be a number from 0 to 600"))?,
            };
            let label = args
                .get("label")
                .and_then(Value::as_str)
                .unwrap_or("job")
                .to_owned();
            Work::Compute { seconds, label }
        }
        "failing_job" => Work::FailingJob,
        "protocol_error_job" => Work::ProtocolError,
        "confirm_delete" => Work::ConfirmDelete {
            filename: args
                .get("filename")
                .and_then(Value::as_str)
                .unwrap_or("file.txt")
                .to_owned(),
        },
        "multi_input" => Work::MultiInput,
        _ => return Err(bad("not a task tool")),
    })
}

fn text_result(text: String, is_error: bool) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": is_error})
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
struct Entry {
    created: Instant,
    created_at: String,
    last_updated_at: String,
    status: TaskStatus,
    status_message: Option<String>,
    outcome: Option<Outcome>,
    /// Input requests not answered yet (`{"method", "params"}`), by key.
    pending: BTreeMap<String, Value>,
    /// Answers received for the current question, by key.
    answers: BTreeMap<String, Value>,
    /// Bumped whenever an answer arrives.
    changed: watch::Sender<u64>,
    cancel: CancellationToken,
}

impl Entry {
    fn touch(&mut self, status: TaskStatus, message: &str) {
        self.status = status;
        self.status_message = Some(message.to_owned());
        self.last_updated_at = rfc3339(SystemTime::now());
    }

    fn wire(&self, id: &str) -> WireTask {
        let mut task = WireTask::new(
            id.to_owned(),
            self.status,
            self.created_at.clone(),
            self.last_updated_at.clone(),
        )
        .with_ttl_ms(TTL_MS)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
        task.status_message = self.status_message.clone();
        task
    }

    fn detailed(&self, id: &str) -> DetailedTask {
        let object = |value: &Value| value.as_object().cloned().unwrap_or_default();
        let payload = match (self.status, &self.outcome) {
            (TaskStatus::Cancelled, _) => TaskPayload::Cancelled,
            (_, Some(Outcome::Completed(result))) => TaskPayload::Completed {
                result: object(result),
            },
            (_, Some(Outcome::Failed(error))) => TaskPayload::Failed {
                error: object(error),
            },
            (TaskStatus::InputRequired, None) => TaskPayload::InputRequired {
                input_requests: self
                    .pending
                    .iter()
                    .map(|(key, request)| (key.clone(), from_json::<InputRequest>(request.clone())))
                    .collect(),
            },
            _ => TaskPayload::Working,
        };
        DetailedTask::new(self.wire(id), payload)
    }
}

/// Every task of the process.
#[derive(Debug, Default)]
pub struct TaskEngine {
    tasks: Mutex<HashMap<String, Entry>>,
    created: AtomicU64,
}

fn not_found(task_id: &str) -> McpError {
    McpError::invalid_params(format!("task not found: {task_id}"), None)
}

fn extension_required() -> McpError {
    McpError::missing_required_client_capability(
        ClientCapabilities::builder().enable_tasks().build(),
    )
}

impl TaskEngine {
    /// The table, without the tasks whose ttl has passed.
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        let mut tasks = self.tasks.lock().expect("task table lock poisoned");
        let ttl = Duration::from_millis(TTL_MS);
        tasks.retain(|_, task| task.created.elapsed() <= ttl);
        tasks
    }

    /// `tools/call` of the task tool `name`; see the module docs.
    pub async fn call(
        self: &Arc<Self>,
        name: &str,
        support: Support,
        args: &JsonObject,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let declared = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        let work = if name == "test_tool_with_task" {
            if !declared {
                return Err(extension_required());
            }
            // MRTR first: the name, then the task (its CreateTaskResult
            // carries no requestState).
            let flow = Flow::sealed(vec![vec![Ask::elicit(
                "user_name",
                "What is your name?",
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            )]]);
            match mrtr::obtain(
                name,
                &flow,
                request.input_responses.as_ref(),
                request.request_state.as_deref(),
                context,
            )
            .await?
            {
                Obtained::InputRequired(result) => return Ok(result.into()),
                Obtained::Failed(text) => {
                    return Ok(result_from_json::<CallToolResult>(text_result(text, true)).into());
                }
                Obtained::Answers(answers) => Work::Greeting {
                    name: mrtr::elicited_string(&answers, "user_name", "name"),
                },
            }
        } else {
            work_of(name, args)?
        };
        if declared {
            let task = self.spawn(work);
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        match (support, work) {
            (Support::Optional, Work::Compute { seconds, label }) => {
                tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                Ok(result_from_json::<CallToolResult>(text_result(
                    format!("Computed {label} in {seconds}s"),
                    false,
                ))
                .into())
            }
            _ => Err(extension_required()),
        }
    }

    /// Creates a task running `work` and starts it; returns its wire form.
    fn spawn(self: &Arc<Self>, work: Work) -> WireTask {
        let n = self.created.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("conformance-task-{}-{n}", std::process::id());
        let now = rfc3339(SystemTime::now());
        let cancel = CancellationToken::new();
        let entry = Entry {
            created: Instant::now(),
            created_at: now.clone(),
            last_updated_at: now,
            status: TaskStatus::Working,
            status_message: Some("The operation is now in progress.".into()),
            outcome: None,
            pending: BTreeMap::new(),
            answers: BTreeMap::new(),
            changed: watch::Sender::new(0),
            cancel: cancel.clone(),
        };
        let wire = entry.wire(&id);
        self.lock().insert(id.clone(), entry);
        let engine = Arc::clone(self);
        tokio::spawn(async move {
            tokio::select! {
                () = cancel.cancelled() => {}
                outcome = engine.run(&id, work) => {
                    if let Some(outcome) = outcome {
                        engine.finish(&id, outcome);
                    }
                }
            }
        });
        wire
    }

    /// The work of a task; `None` when the task went away meanwhile.
    async fn run(&self, id: &str, work: Work) -> Option<Outcome> {
        let sleep = |ms: u64| tokio::time::sleep(Duration::from_millis(ms));
        Some(match work {
            Work::Compute { seconds, label } => {
                tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                Outcome::Completed(text_result(
                    format!("Computed {label} in {seconds}s"),
                    false,
                ))
            }
            Work::FailingJob => {
                sleep(1_000).await;
                Outcome::Completed(text_result(
                    "failing_job: the job failed (a tool execution error)".into(),
                    true,
                ))
            }
            Work::ProtocolError => {
                sleep(300).await;
                Outcome::Failed(json!({
                    "code": -32603,
                    "message": "protocol_error_job: internal error on purpose",
                }))
            }
            Work::ConfirmDelete { filename } => {
                sleep(100).await;
                let ask = Ask::elicit(
                    "confirm_delete",
                    &format!("Delete {filename}?"),
                    json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}),
                );
                let answers = self.ask(id, &[ask]).await?;
                let answer = &answers["confirm_delete"];
                let confirmed = answer.get("action").and_then(Value::as_str) == Some("accept")
                    && answer.pointer("/content/confirm") == Some(&Value::Bool(true));
                Outcome::Completed(text_result(
                    if confirmed {
                        format!("Deleted {filename}")
                    } else {
                        format!("Kept {filename}: the deletion was not confirmed")
                    },
                    false,
                ))
            }
            Work::MultiInput => {
                sleep(100).await;
                let asks = [
                    Ask::elicit(
                        "first_input",
                        "First input: your name?",
                        json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
                    ),
                    Ask::elicit(
                        "second_input",
                        "Second input: confirm?",
                        json!({"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}),
                    ),
                ];
                let answers = self.ask(id, &asks).await?;
                Outcome::Completed(text_result(
                    format!(
                        "Received first_input ({}) and second_input ({})",
                        mrtr::elicitation_summary(&answers, "first_input"),
                        mrtr::elicitation_summary(&answers, "second_input"),
                    ),
                    false,
                ))
            }
            Work::Greeting { name } => {
                sleep(200).await;
                Outcome::Completed(text_result(format!("Hello, {name}! (from a task)"), false))
            }
        })
    }

    /// Parks the task in `input_required` with `asks` and waits until every
    /// one is answered through `tasks/update`; `None` if the task went away.
    async fn ask(&self, id: &str, asks: &[Ask]) -> Option<BTreeMap<String, Value>> {
        let mut changed = {
            let mut tasks = self.lock();
            let task = tasks.get_mut(id)?;
            if task.status.is_terminal() {
                return None;
            }
            task.pending = asks
                .iter()
                .map(|ask| {
                    let request = serde_json::to_value(ask.input_request()).unwrap_or_default();
                    (ask.key.clone(), request)
                })
                .collect();
            task.answers.clear();
            task.touch(TaskStatus::InputRequired, "The task needs input.");
            task.changed.subscribe()
        };
        loop {
            changed.changed().await.ok()?;
            let mut tasks = self.lock();
            let task = tasks.get_mut(id)?;
            if task.pending.is_empty() {
                return Some(std::mem::take(&mut task.answers));
            }
        }
    }

    /// Moves a non-terminal task to `outcome`.
    fn finish(&self, id: &str, outcome: Outcome) {
        let mut tasks = self.lock();
        let Some(task) = tasks.get_mut(id) else {
            return;
        };
        if task.status.is_terminal() {
            return;
        }
        let (status, message) = match &outcome {
            Outcome::Completed(_) => (TaskStatus::Completed, "The operation completed."),
            Outcome::Failed(_) => (TaskStatus::Failed, "The operation failed."),
        };
        task.outcome = Some(outcome);
        task.pending.clear();
        task.touch(status, message);
    }

    /// `tasks/get`.
    pub fn get(&self, id: &str) -> Result<GetTaskResult, McpError> {
        let tasks = self.lock();
        let task = tasks.get(id).ok_or_else(|| not_found(id))?;
        Ok(GetTaskResult::new(task.detailed(id)))
    }

    /// `tasks/update`: answers pending keys; other keys are ignored.
    pub fn update(&self, params: UpdateTaskParams) -> Result<(), McpError> {
        let id = params.task_id.as_str();
        let mut tasks = self.lock();
        let task = tasks.get_mut(id).ok_or_else(|| not_found(id))?;
        let mut answered = false;
        for (key, answer) in params.input_responses {
            if task.pending.remove(&key).is_some() {
                task.answers.insert(key, answer);
                answered = true;
            }
        }
        if answered {
            if task.pending.is_empty() {
                task.touch(TaskStatus::Working, "The operation is now in progress.");
            } else {
                task.last_updated_at = rfc3339(SystemTime::now());
            }
            task.changed.send_modify(|version| *version += 1);
        }
        Ok(())
    }

    /// `tasks/cancel`.
    pub fn cancel(&self, id: &str) -> Result<(), McpError> {
        let mut tasks = self.lock();
        let task = tasks.get_mut(id).ok_or_else(|| not_found(id))?;
        if !task.status.is_terminal() {
            task.pending.clear();
            task.cancel.cancel();
            task.touch(TaskStatus::Cancelled, "The task was cancelled by request.");
        }
        Ok(())
    }
}
