//! Audit records: one JSON object per line, to the file named by
//! `[sidecar] audit_path`, or else to the log under the tracing target
//! `switchyard::audit` (design §5: a structured log sink, not the store).
//!
//! Every record gets `time` (RFC 3339, UTC, milliseconds) first; the rest
//! is the caller's object, kept in order. Writing never fails a call: an
//! unwritable file is reported in the log, with the record.

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The tracing target of audit records written to the log.
pub const TARGET: &str = "switchyard::audit";

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

    /// Records are appended to `path` (created if missing).
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
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

    /// Writes one record. `record` should be a JSON object; `time` is
    /// put first.
    pub fn record(&self, record: Value) {
        self.record_struct(&record);
    }

    /// Writes one record given as a struct that serialises to a JSON
    /// object (fields in declaration order); `time` is put first. The same
    /// line as [`Audit::record`] with the equivalent object, without
    /// building a `Value` first.
    pub fn record_struct<T: serde::Serialize>(&self, record: &T) {
        if !self.enabled() {
            return;
        }
        match serde_json::to_string(record) {
            Ok(body) => self.write(&stamp("time", &rfc3339_now(), &body)),
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
                    tracing::error!(target: TARGET, path = %f.path.display(), error = %e, record = %text, "cannot write an audit record");
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

fn rfc3339_now() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(since.as_secs(), since.subsec_millis())
}

/// `secs` since the Unix epoch plus `millis` as RFC 3339 in UTC with
/// milliseconds: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(secs: u64, millis: u32) -> String {
    rfc3339_frac(secs, millis, 3)
}

/// `secs` since the Unix epoch plus a fraction of a second of `digits`
/// decimal digits (`frac` < 10^digits) as RFC 3339 in UTC:
/// `YYYY-MM-DDTHH:MM:SS.<frac>Z`.
pub fn rfc3339_frac(secs: u64, frac: u32, digits: usize) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{frac:0digits$}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(1_767_225_599, 999), "2025-12-31T23:59:59.999Z");
        assert_eq!(
            rfc3339_frac(1_767_225_599, 42, 6),
            "2025-12-31T23:59:59.000042Z"
        );
    }

    #[test]
    fn records_are_json_lines_with_time_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let audit = Audit::to_file(&path).unwrap();
        audit.record(json!({"event": "a", "n": 1}));
        audit.clone().record(json!({"event": "b"}));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "a");
        assert_eq!(lines[0].as_object().unwrap().keys().next().unwrap(), "time");
        assert_eq!(lines[1]["event"], "b");
    }
}
