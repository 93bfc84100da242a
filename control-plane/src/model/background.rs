//! `background/<id>`: the stored record of a background call (stage B), in
//! the proto `BackgroundCall`'s proto3 JSON form, and its statuses. The
//! logic that writes and sweeps them is `crate::background`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchyard_proto::v1 as pb;

/// Key prefix of the records.
pub const PREFIX: &str = "background/";

/// The statuses: the MCP task statuses (wait mode uses `working` and the
/// terminal ones).
pub const STATUSES: [&str; 5] = [
    "working",
    "input_required",
    "completed",
    "failed",
    "cancelled",
];

/// Whether `status` is terminal (`completed`, `failed`, `cancelled`).
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// `background/<id>`: one background call, the proto `BackgroundCall` in
/// its proto3 JSON form (camelCase field names; int64 as JSON numbers;
/// attachment bytes as base64). Unknown fields of a stored value are
/// ignored, absent ones take their defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackgroundRecord {
    /// Unique id (a UUID chosen by the control plane).
    pub id: String,
    /// The server.
    pub server: String,
    /// The tool's name on the server.
    pub tool: String,
    /// The engine-visible tool name.
    pub engine_tool: String,
    /// The initiating session (may be empty: a call without a session).
    pub session_id: String,
    /// The principal that made the call (`[[auth.*]]` name; empty for an
    /// anonymous caller, and in records older than the field): a call
    /// without a session is visible to it and admins only
    /// ([`BackgroundRecord::visible_to`]).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub principal: String,
    /// The initiating run (turn).
    pub run_id: String,
    /// `wait` or `task`.
    pub mode: String,
    /// task mode: the server's taskId.
    pub task_id: String,
    /// One of [`STATUSES`].
    pub status: String,
    /// The server's statusMessage, or Switchyard's reason for a failure.
    pub status_message: String,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Last write, ms since the epoch (set by the control plane).
    pub updated_at_ms: i64,
    /// task mode: next `tasks/get` due, ms since the epoch.
    pub poll_after_ms: i64,
    /// task mode: the polling interval in use, milliseconds.
    pub poll_interval_ms: u64,
    /// Since when polling has failed without a break (ms since the epoch;
    /// 0 = the last poll worked).
    pub poll_error_since_ms: i64,
    /// The last polling failure.
    pub last_poll_error: String,
    /// When the call fails for good (created + maxDurationSec), ms since
    /// the epoch.
    pub deadline_ms: i64,
    /// The sidecar instance polling or holding it.
    pub sidecar_id: String,
    /// The server's `io.modelcontextprotocol/model-immediate-response`.
    pub immediate_response: String,
    /// completed: the processed result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<BackgroundResultRecord>,
    /// When it became terminal, ms since the epoch (the control plane's
    /// clock when it stored the terminal record); 0 until then.
    pub finished_at_ms: i64,
    /// `2025-11-25` or `2026-07-28`.
    pub protocol_version: String,
    /// failed: the server's JSON-RPC error object, JSON text.
    pub error_json: String,
    /// task mode: the sidecar that created the task (set by the control
    /// plane when the record is created; empty in records older than the
    /// field). An adopter's "task not found" goes back to it
    /// ([`crate::background`]).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub creator_sidecar_id: String,
    /// failed: the reporting sidecar's server did not know the task.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub task_not_found: bool,
}

/// The processed result of a finished call (proto `BackgroundResult`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BackgroundResultRecord {
    /// The raw CallToolResult, JSON text.
    pub result_json: String,
    /// `isError`.
    pub is_error: bool,
    /// The text the model reads.
    pub model_text: String,
    /// structuredContent, JSON text.
    pub structured_content_json: String,
    /// Attachments.
    pub attachments: Vec<AttachmentRecord>,
    /// outputSchema validation errors.
    pub validation_errors: Vec<String>,
}

/// An attachment (proto `Attachment`); `data` is base64 in JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AttachmentRecord {
    /// File name.
    pub name: String,
    /// MIME type.
    pub mime_type: String,
    /// Content.
    #[serde(with = "base64_bytes")]
    pub data: Vec<u8>,
    /// Resource URI, if any.
    pub uri: String,
    /// Size of the content in bytes.
    pub size_bytes: u64,
}

mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

impl BackgroundRecord {
    /// Whether the status is terminal.
    pub fn is_terminal(&self) -> bool {
        is_terminal(&self.status)
    }

    /// From the wire form.
    pub fn from_pb(c: pb::BackgroundCall) -> Self {
        BackgroundRecord {
            id: c.id,
            server: c.server,
            tool: c.tool,
            engine_tool: c.engine_tool,
            session_id: c.session_id,
            principal: c.principal,
            run_id: c.run_id,
            mode: c.mode,
            task_id: c.task_id,
            status: c.status,
            status_message: c.status_message,
            created_at_ms: c.created_at_ms,
            updated_at_ms: c.updated_at_ms,
            poll_after_ms: c.poll_after_ms,
            poll_interval_ms: c.poll_interval_ms,
            poll_error_since_ms: c.poll_error_since_ms,
            last_poll_error: c.last_poll_error,
            deadline_ms: c.deadline_ms,
            sidecar_id: c.sidecar_id,
            immediate_response: c.immediate_response,
            result: c.result.map(|r| BackgroundResultRecord {
                result_json: r.result_json,
                is_error: r.is_error,
                model_text: r.model_text,
                structured_content_json: r.structured_content_json,
                attachments: r
                    .attachments
                    .into_iter()
                    .map(|a| AttachmentRecord {
                        name: a.name,
                        mime_type: a.mime_type,
                        data: a.data,
                        uri: a.uri,
                        size_bytes: a.size_bytes,
                    })
                    .collect(),
                validation_errors: r.validation_errors,
            }),
            finished_at_ms: c.finished_at_ms,
            protocol_version: c.protocol_version,
            error_json: c.error_json,
            creator_sidecar_id: c.creator_sidecar_id,
            task_not_found: c.task_not_found,
        }
    }

    /// The wire form.
    pub fn to_pb(&self) -> pb::BackgroundCall {
        let c = self.clone();
        pb::BackgroundCall {
            id: c.id,
            server: c.server,
            tool: c.tool,
            engine_tool: c.engine_tool,
            session_id: c.session_id,
            principal: c.principal,
            run_id: c.run_id,
            mode: c.mode,
            task_id: c.task_id,
            status: c.status,
            status_message: c.status_message,
            created_at_ms: c.created_at_ms,
            updated_at_ms: c.updated_at_ms,
            poll_after_ms: c.poll_after_ms,
            poll_interval_ms: c.poll_interval_ms,
            poll_error_since_ms: c.poll_error_since_ms,
            last_poll_error: c.last_poll_error,
            deadline_ms: c.deadline_ms,
            sidecar_id: c.sidecar_id,
            immediate_response: c.immediate_response,
            result: c.result.map(|r| pb::BackgroundResult {
                result_json: r.result_json,
                is_error: r.is_error,
                model_text: r.model_text,
                structured_content_json: r.structured_content_json,
                attachments: r
                    .attachments
                    .into_iter()
                    .map(|a| pb::Attachment {
                        name: a.name,
                        mime_type: a.mime_type,
                        data: a.data,
                        uri: a.uri,
                        size_bytes: a.size_bytes,
                    })
                    .collect(),
                validation_errors: r.validation_errors,
            }),
            finished_at_ms: c.finished_at_ms,
            protocol_version: c.protocol_version,
            error_json: c.error_json,
            creator_sidecar_id: c.creator_sidecar_id,
            task_not_found: c.task_not_found,
        }
    }

    /// Whether `caller` may list, read and cancel this call when it has no
    /// session (a session's calls follow the session's rule instead):
    /// anonymous callers (allowed while `[auth] required` is false) and
    /// admins see every call; an engine sees its own, and those made
    /// anonymously.
    pub fn visible_to(&self, caller: Option<&super::principal::Caller>) -> bool {
        match caller {
            None => true,
            Some(c) => {
                c.role == super::principal::Role::Admin
                    || self.principal.is_empty()
                    || self.principal == c.name
            }
        }
    }

    /// The proto3 JSON form (event data, `--json` output).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("records serialise")
    }
}
