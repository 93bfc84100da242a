//! The audit sink: one JSON object per line, for every interaction outcome
//! and every engine tool call (`tool.called`). Records go to the file named by
//! `[audit] path` (appended, flushed line by line), or, without one, to the
//! log as JSON text under the tracing target `switchyard::audit`.
//!
//! Audit records never hold what the user typed into a form, nor a URL's
//! path or query, nor a call's arguments or result: only who asked (session, run, server, tool), what kind of
//! interaction it was, how it ended and why. Audit records are not kept in
//! the store.

use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where audit records go.
#[derive(Debug)]
pub struct Audit {
    file: Option<(PathBuf, Mutex<std::fs::File>)>,
}

/// One audit record about an interaction.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InteractionAudit {
    /// `interaction.resolved` (the outcome the server or engine got) or
    /// `interaction.completed` (a URL interaction's server said it is done).
    pub kind: &'static str,
    /// The session.
    pub session: String,
    /// The engine run; empty outside a call.
    pub run: String,
    /// The server.
    pub server: String,
    /// The tool (may be empty).
    pub tool: String,
    /// The interaction id.
    pub interaction: String,
    /// `form`, `url` or `approval`.
    pub interaction_kind: String,
    /// `accept`, `decline`, `cancel`, `approve`, `deny` or `timeout`.
    pub outcome: String,
    /// Why it ended: `answered`, `timeout`, `session_deleted`,
    /// `call_ended`, `completed`, `not_completed`.
    pub reason: String,
    /// url: the URL's host (never its path or query).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub url_domain: String,
    /// Milliseconds from creation to this outcome.
    pub waited_ms: i64,
}

/// The effective hints of a called tool, as audited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditHints {
    /// `readOnlyHint`.
    pub read_only_hint: bool,
    /// `destructiveHint`.
    pub destructive_hint: bool,
    /// `idempotentHint`.
    pub idempotent_hint: bool,
    /// `openWorldHint`.
    pub open_world_hint: bool,
}

/// One audit record about an engine's tool call (`tool.called`). Never the
/// arguments nor the result.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallAudit {
    /// `tool.called`, or `tool.backgrounded` for a call that moved to the
    /// background (stage B).
    pub kind: &'static str,
    /// The session; empty for a call without one.
    pub session: String,
    /// The engine run; may be empty.
    pub run: String,
    /// The engine's call id; may be empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub call_id: String,
    /// The server.
    pub server: String,
    /// The tool's name on the server.
    pub tool: String,
    /// `ok`, `tool_error`, `not_approved`, `unavailable`, `timeout`,
    /// `cancelled`, `rpc_error` or `error`.
    pub outcome: String,
    /// The effective policy: `default` or `confirm`.
    pub policy: &'static str,
    /// Approval: `not_needed`, `approve`, `deny`, `timeout`, `cancel` or
    /// `failed`.
    pub approval: &'static str,
    /// Milliseconds from the engine's request to the answer.
    pub duration_ms: u64,
    /// Effective hints (openWorldHint included).
    pub hints: AuditHints,
    /// `outputSchema` validation errors the sidecar reported.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub validation_errors: Vec<String>,
}

impl Audit {
    /// Writes one `tool.called` record.
    pub fn tool_call(&self, rec: &ToolCallAudit) {
        self.stamped(rec);
    }

    /// Records to the log (target `switchyard::audit`).
    pub fn to_log() -> Self {
        Audit { file: None }
    }

    /// Records appended to `path` (created if missing). Errors: the file
    /// cannot be opened for appending.
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Audit {
            file: Some((path.to_owned(), Mutex::new(f))),
        })
    }

    /// Writes one interaction record, stamped with `ts` (RFC 3339, UTC,
    /// milliseconds).
    pub fn interaction(&self, rec: &InteractionAudit) {
        self.stamped(rec);
    }

    /// Writes `rec` (a struct: a JSON object) with `ts` put first. Records
    /// bound for the log are not even built when the log drops them.
    fn stamped<T: serde::Serialize>(&self, rec: &T) {
        if self.file.is_none()
            && !tracing::enabled!(target: "switchyard::audit", tracing::Level::INFO)
        {
            return;
        }
        let body = serde_json::to_string(rec).expect("audit records serialise");
        let ts = rfc3339_ms(switchyard_common::time::now_ms());
        self.write(&switchyard_common::audit::stamp("ts", &ts, &body));
    }

    fn write(&self, line: &str) {
        match &self.file {
            Some((path, f)) => {
                let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
                if let Err(e) = writeln!(f, "{line}").and_then(|_| f.flush()) {
                    tracing::error!(file = %path.display(), error = %e, "cannot write an audit record; logging it instead");
                    tracing::info!(target: "switchyard::audit", "{line}");
                }
            }
            None => switchyard_common::logging::write_record(line),
        }
    }
}

pub use switchyard_common::time::rfc3339_ms;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339_ms(1_767_225_599_999), "2025-12-31T23:59:59.999Z");
    }

    #[test]
    fn file_sink_writes_json_lines_without_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/audit.jsonl");
        let audit = Audit::to_file(&path).unwrap();
        let rec = InteractionAudit {
            kind: "interaction.resolved",
            session: "s".into(),
            run: "r".into(),
            server: "orders".into(),
            tool: "book".into(),
            interaction: "i".into(),
            interaction_kind: "form".into(),
            outcome: "accept".into(),
            reason: "answered".into(),
            url_domain: String::new(),
            waited_ms: 5,
        };
        audit.interaction(&rec);
        audit.interaction(&rec);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["kind"], "interaction.resolved");
        assert_eq!(lines[0]["interactionKind"], "form");
        assert!(lines[0]["ts"].as_str().unwrap().ends_with('Z'));
        assert!(lines[0].get("content").is_none());
        assert!(lines[0].get("urlDomain").is_none());
        audit.tool_call(&ToolCallAudit {
            kind: "tool.called",
            session: "s".into(),
            run: String::new(),
            call_id: String::new(),
            server: "orders".into(),
            tool: "create_order".into(),
            outcome: "ok".into(),
            policy: "default",
            approval: "not_needed",
            duration_ms: 3,
            hints: AuditHints {
                read_only_hint: false,
                destructive_hint: false,
                idempotent_hint: false,
                open_world_hint: false,
            },
            validation_errors: vec![],
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["kind"], "tool.called");
        assert_eq!(last["hints"]["openWorldHint"], false);
        assert!(last.get("arguments").is_none() && last.get("callId").is_none());
    }
}
