//! The task protocol on the wire, in both eras (the tasks API is still
//! moving between them, so all of it is here): 2025-11-25
//! `basic/utilities/tasks` (`task: {ttl}` on `tools/call`, a
//! `CreateTaskResult`, `tasks/get`, `tasks/result`, `tasks/cancel`) and
//! 2026-07-28 SEP-2663, the `io.modelcontextprotocol/tasks` extension
//! (declared per request, `resultType: "task"`, `tasks/get` with the
//! result inline, `tasks/update` with `inputResponses`, `tasks/cancel`).
//! Parsing is strict where a mistake would leak: a `taskId` must be a
//! bounded string and every answer must be about the task asked for.

use crate::upstream::{Era, Upstream, UpstreamError};
use serde_json::{Map, Value, json};
use switchyard_mcp::meta;

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
pub(super) fn excerpt(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}... ({} bytes)", &text[..i], text.len()),
        None => text,
    }
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
pub(super) fn task_params(era: Era, task_id: &str, extra: Option<(&str, Value)>) -> Value {
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

/// The protocol version a task of `era` runs in.
pub(super) fn protocol_version(upstream: &Upstream, era: Era) -> String {
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
}
