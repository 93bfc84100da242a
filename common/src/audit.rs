//! Audit records, one format and one sink for both binaries: one JSON
//! object per line, appended to the file the binary's config names
//! (`[audit] path` on the control plane, `[sidecar] audit_path` on a
//! sidecar), or else written to the log under the tracing target
//! `switchyard::audit` (design §5: a structured log sink, not the store).
//!
//! The format: `ts` first (RFC 3339, UTC, milliseconds), then `kind` (the
//! event, dotted: `tool.called`, `tool.result`, `interaction.resolved`...),
//! then the record's own fields in camelCase. Fields both binaries write use
//! the same names: `session`, `run`, `server`, `tool`, `hints` (the four
//! effective hints), `validationErrors`. Records never hold a call's
//! arguments, what a user typed into a form, a URL's path or query, or a
//! secret. Writing never fails a call: a file that cannot be written is
//! reported in the log, with the record.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The name of the field every record starts with: its time.
pub const TIME_FIELD: &str = "ts";

/// The effective hints of a called tool, as audited by either binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
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

/// The tracing target of audit records written to the log.
pub const TARGET: &str = crate::logging::AUDIT_TARGET;

/// Where audit records go. Cheap to clone; clones share the file.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    file: Option<Arc<AuditFile>>,
}

#[derive(Debug)]
struct AuditFile {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl Audit {
    /// Records go to the log (target [`TARGET`], info level).
    pub fn to_log() -> Self {
        Audit { file: None }
    }

    /// Records are appended to `path` (created, with its directory, if
    /// missing). Errors: the file cannot be opened for appending.
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Audit {
            file: Some(Arc::new(AuditFile {
                path: path.to_owned(),
                file: Mutex::new(file),
            })),
        })
    }

    /// Whether records are written at all: always to a file; to the log
    /// only when its filter lets [`TARGET`] at info level through. Callers
    /// may skip building a record when not.
    pub fn enabled(&self) -> bool {
        self.file.is_some() || tracing::enabled!(target: TARGET, tracing::Level::INFO)
    }

    /// Writes one record. `record` should be a JSON object whose first
    /// field is `kind`; `ts` is put first.
    pub fn record(&self, record: Value) {
        self.record_struct(&record);
    }

    /// Writes one record given as a struct that serialises to a JSON
    /// object (fields in declaration order, `kind` first); `ts` is put first. The same
    /// line as [`Audit::record`] with the equivalent object, without
    /// building a `Value` first.
    pub fn record_struct<T: serde::Serialize>(&self, record: &T) {
        if !self.enabled() {
            return;
        }
        match serde_json::to_string(record) {
            Ok(body) => self.write(&stamp(TIME_FIELD, &crate::time::rfc3339_now(), &body)),
            Err(e) => {
                tracing::error!(target: TARGET, error = %e, "cannot serialise an audit record");
            }
        }
    }

    fn write(&self, text: &str) {
        match &self.file {
            None => crate::logging::write_record(text),
            Some(f) => {
                let mut file = f.file.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = writeln!(file, "{text}").and_then(|()| file.flush()) {
                    tracing::error!(path = %f.path.display(), error = %e, "cannot write an audit record; logging it instead");
                    crate::logging::write_record(text);
                }
            }
        }
    }
}

/// `body`, the JSON text of an object, with the string field `key:
/// value` put first; a `body` that is not an object becomes
/// `{key: value, "record": body}`. (`key` and `value` must need no JSON
/// escaping: field names and RFC 3339 times.)
pub fn stamp(key: &str, value: &str, body: &str) -> String {
    match body.strip_prefix('{') {
        Some("}") => format!("{{\"{key}\":\"{value}\"}}"),
        Some(rest) => format!("{{\"{key}\":\"{value}\",{rest}"),
        None => format!("{{\"{key}\":\"{value}\",\"record\":{body}}}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_are_json_lines_with_ts_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/audit.jsonl");
        let audit = Audit::to_file(&path).unwrap();
        audit.record(json!({"kind": "a", "n": 1}));
        audit.clone().record(json!({"kind": "b"}));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["kind"], "a");
        let keys: Vec<&String> = lines[0].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["ts", "kind", "n"]);
        assert!(lines[0]["ts"].as_str().unwrap().ends_with('Z'));
        assert_eq!(lines[1]["kind"], "b");
    }
}
