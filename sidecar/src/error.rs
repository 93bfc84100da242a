//! The call path's shared vocabulary: [`CallError`], every way a tool call
//! or a stage E request (`resources/read`, `prompts/get`,
//! `completion/complete`) can fail in the sidecar, and [`Deadline`], the
//! one absolute time limit a call carries from the edge down ([`within`]
//! bounds a step by it). The pipeline ([`crate::call`]) and the stages it
//! runs ([`crate::tools`], [`crate::background`], [`crate::resources`])
//! return `CallError`; the gRPC edge ([`crate::api`]) is the only place
//! that turns it into a `tonic::Status` (the code of each variant is in its
//! doc).

use crate::upstream::UpstreamError;
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// Why a tool call failed. Every message names what was wrong and where:
/// the server, the tool, the task or the request field.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// A field of the request is malformed (`params_json`, `roots_json`,
    /// `id`). gRPC: `INVALID_ARGUMENT`.
    #[error("{field} {problem}")]
    InvalidArgument {
        /// The request field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The upstream server failed or answered with a JSON-RPC error. gRPC:
    /// as `api::status_of` (`FAILED_PRECONDITION` with the error object for
    /// a JSON-RPC error, `UNAVAILABLE` for connection failures,
    /// `DEADLINE_EXCEEDED` for the request timeout, else `INTERNAL`).
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The call's deadline (or its foreground window) passed first; the
    /// upstream request was cancelled. gRPC: `DEADLINE_EXCEEDED`.
    #[error("server {server}: {method} {tool} did not finish within {} ms", .budget.as_millis())]
    DeadlineExceeded {
        /// Server name.
        server: String,
        /// The request: `tools/call`, `resources/read`, ...
        method: &'static str,
        /// What it was about: the tool name; a quoted URI or prompt name.
        tool: String,
        /// The time the call had.
        budget: Duration,
    },
    /// The server has no such resource: it answered `resources/read` with
    /// -32002 (2025-11-25) or -32602 (2026-07-28). gRPC: `NOT_FOUND`, the
    /// error object in the details.
    #[error("resource not found: server {server} has no resource {} (the server said: {message})", quoted(.uri))]
    ResourceNotFound {
        /// Server name.
        server: String,
        /// The URI asked for, byte-exact.
        uri: String,
        /// The server's message.
        message: String,
        /// The JSON-RPC error object, as sent.
        error: Value,
    },
    /// The server refused the request's params (-32602 to `prompts/get` or
    /// `completion/complete`: an unknown prompt, a missing argument).
    /// gRPC: `INVALID_ARGUMENT` with the server's message, the error
    /// object in the details.
    #[error("server {server}: {method} {about}: {message}")]
    InvalidParams {
        /// Server name.
        server: String,
        /// The request.
        method: &'static str,
        /// What it was about (a quoted prompt name, a completion's ref).
        about: String,
        /// The server's message.
        message: String,
        /// The JSON-RPC error object, as sent.
        error: Value,
    },
    /// The server does not implement completions (-32601 to
    /// `completion/complete`). gRPC: `UNIMPLEMENTED`.
    #[error("server {server} offers no completions (the server said: {message})")]
    NoCompletions {
        /// Server name.
        server: String,
        /// The server's message.
        message: String,
    },
    /// An answer too large to take: over the server's `max_message_bytes`,
    /// or processed into a response over the gRPC message limit. gRPC:
    /// `RESOURCE_EXHAUSTED`.
    #[error(
        "server {server}: {method} {about}: the answer is {size} bytes or more, over the {limit}-byte limit ({key})"
    )]
    TooLarge {
        /// Server name.
        server: String,
        /// The request.
        method: &'static str,
        /// What it was about (a quoted URI or prompt name).
        about: String,
        /// Its size, at least.
        size: usize,
        /// The limit it is over.
        limit: usize,
        /// The setting that limit comes from.
        key: &'static str,
    },
    /// A call that may not move to the background (the server is at
    /// `backgroundCalls.maxPerTarget`) ran past its foreground limit; its
    /// task was cancelled. gRPC: `DEADLINE_EXCEEDED`.
    #[error(
        "server {server}: tools/call {tool} did not finish within the foreground limit of {} ms; it cannot move to the background because the server already has backgroundCalls.maxPerTarget background calls running",
        .limit.as_millis()
    )]
    ForegroundLimit {
        /// Server name.
        server: String,
        /// Tool name.
        tool: String,
        /// The foreground limit.
        limit: Duration,
    },
    /// The call's MCP task failed. gRPC: `FAILED_PRECONDITION` with the
    /// JSON-RPC error object as the status details when the server gave
    /// one, else `ABORTED`.
    #[error("server {server}: task {task_id} of {tool} failed: {message}")]
    TaskFailed {
        /// Server name.
        server: String,
        /// Tool name.
        tool: String,
        /// The server's `taskId`.
        task_id: String,
        /// Why.
        message: String,
        /// The JSON-RPC error object (`code`, `message`, `data`), if any.
        error: Option<Value>,
    },
    /// The call's MCP task was cancelled on the server. gRPC: `ABORTED`.
    #[error("server {server}: task {task_id} of {tool} was cancelled: {message}")]
    TaskCancelled {
        /// Server name.
        server: String,
        /// Tool name.
        tool: String,
        /// The server's `taskId`.
        task_id: String,
        /// The server's status message.
        message: String,
    },
    /// The server no longer knows the call's MCP task. gRPC:
    /// `FAILED_PRECONDITION`.
    #[error("server {server}: task {task_id} of {tool}: task not found ({detail})")]
    TaskNotFound {
        /// Server name.
        server: String,
        /// Tool name.
        tool: String,
        /// The server's `taskId`.
        task_id: String,
        /// What the server said.
        detail: String,
    },
    /// The call was about to move to the background but the control plane
    /// did not take its record (the task was cancelled, or the held call
    /// dropped). gRPC: `UNAVAILABLE`.
    #[error(
        "server {server}: tools/call {tool} could not move to the background: the control plane did not take the record"
    )]
    NotMoved {
        /// Server name.
        server: String,
        /// Tool name.
        tool: String,
    },
    /// The sidecar's shutdown grace period ended before the call did; it
    /// was cancelled upstream. gRPC: `UNAVAILABLE`.
    #[error("the sidecar is shutting down and its grace period is over; the call was cancelled")]
    ShuttingDown,
    /// The call was cancelled before it finished (`reason` says by whom).
    /// gRPC: `CANCELLED`.
    #[error("{reason}")]
    Cancelled {
        /// Who cancelled it.
        reason: &'static str,
    },
    /// A fault of the sidecar itself (a result that cannot be serialised,
    /// a broken internal hand-over). gRPC: `INTERNAL`.
    #[error("{detail}")]
    Internal {
        /// What went wrong.
        detail: String,
    },
}

impl CallError {
    /// `problem` with request field `field` (`INVALID_ARGUMENT`).
    pub fn invalid(field: &'static str, problem: impl Into<String>) -> Self {
        CallError::InvalidArgument {
            field,
            problem: problem.into(),
        }
    }

    /// A fault of the sidecar (`INTERNAL`).
    pub fn internal(detail: impl Into<String>) -> Self {
        CallError::Internal {
            detail: detail.into(),
        }
    }
}

/// `text` as a JSON string (quoted, escapes only where JSON needs them),
/// for messages naming a URI or a name exactly.
pub fn quoted(text: &str) -> String {
    Value::from(text).to_string()
}

/// `step` of `server`'s `method` about `what` (a tool name, a quoted URI),
/// unless `deadline` passes first: then [`CallError::DeadlineExceeded`],
/// and `step` is dropped, which cancels what it sent upstream.
pub async fn within<T>(
    deadline: Option<Deadline>,
    server: &str,
    method: &'static str,
    what: &str,
    step: impl Future<Output = T>,
) -> Result<T, CallError> {
    let Some(deadline) = deadline else {
        return Ok(step.await);
    };
    tokio::time::timeout_at(deadline.at(), step)
        .await
        .map_err(|_| CallError::DeadlineExceeded {
            server: server.to_owned(),
            method,
            tool: what.to_owned(),
            budget: deadline.budget(),
        })
}

/// When a call must be over: an absolute instant, set once at the edge
/// from the request's `timeout_ms` and passed down to every step that
/// waits, with the budget it was set from (for messages). A foreground
/// window (stage B) is a `Deadline` too, never later than the call's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at: Instant,
    budget: Duration,
}

impl Deadline {
    /// `budget` after `start`.
    pub fn after(start: Instant, budget: Duration) -> Self {
        Deadline {
            at: start + budget,
            budget,
        }
    }

    /// The deadline of a request's `timeout_ms` (milliseconds) counted
    /// from `start`; `None` for 0, no limit.
    pub fn from_timeout_ms(start: Instant, timeout_ms: u64) -> Option<Self> {
        (timeout_ms > 0).then(|| Deadline::after(start, Duration::from_millis(timeout_ms)))
    }

    /// The instant.
    pub fn at(self) -> Instant {
        self.at
    }

    /// The time it was set to allow.
    pub fn budget(self) -> Duration {
        self.budget
    }

    /// The earlier of `self` and `other`.
    pub fn min(self, other: Deadline) -> Deadline {
        if other.at < self.at { other } else { self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_count_from_the_edge() {
        let start = Instant::now();
        assert_eq!(Deadline::from_timeout_ms(start, 0), None);
        let d = Deadline::from_timeout_ms(start, 300).unwrap();
        assert_eq!(d.at(), start + Duration::from_millis(300));
        assert_eq!(d.budget(), Duration::from_millis(300));
        let earlier = Deadline::after(start, Duration::from_millis(100));
        assert_eq!(d.min(earlier), earlier);
        assert_eq!(earlier.min(d), earlier);
    }

    #[test]
    fn messages_name_the_server_and_tool() {
        let e = CallError::DeadlineExceeded {
            server: "s".into(),
            method: "tools/call",
            tool: "t".into(),
            budget: Duration::from_millis(300),
        };
        assert_eq!(
            e.to_string(),
            "server s: tools/call t did not finish within 300 ms"
        );
        let e = CallError::ResourceNotFound {
            server: "s".into(),
            uri: "demo://a b/\"q\"".into(),
            message: "Resource not found".into(),
            error: serde_json::json!({"code": -32002, "message": "Resource not found"}),
        };
        assert_eq!(
            e.to_string(),
            r#"resource not found: server s has no resource "demo://a b/\"q\"" (the server said: Resource not found)"#
        );
        let e = CallError::invalid("params_json", "must be a JSON object (tools/call params)");
        assert_eq!(
            e.to_string(),
            "params_json must be a JSON object (tools/call params)"
        );
    }
}
