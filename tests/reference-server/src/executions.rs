//! The execution log, for tests that count how often a call ran upstream
//! (the chaos suite, `tests/chaos`): when the environment variable
//! [`ENV`] names a file, every `tools/call` whose `_meta` holds a string
//! under [`META_KEY`] appends one line `TOOL KEY PID` to it (PID: this
//! server process's, which a task belongs to over stdio; one `write` of an
//! `O_APPEND` file, so several server processes can share it). A task
//! tool's line is written when its task is created, in either era
//! ([`record_raw`] for 2025-11-25's, which skip rmcp's `tools/call`). Calls
//! without that key, and servers without the variable, record nothing.

use std::io::Write as _;

use rmcp::model::{CallToolRequestParams, RequestMetaObject};
use serde_json::Value;

/// The environment variable naming the execution log.
pub const ENV: &str = "SWITCHYARD_REFERENCE_EXECUTIONS";

/// The `_meta` key of a call's execution key.
pub const META_KEY: &str = "dev.switchyard.test/execution-key";

/// Appends `TOOL KEY PID` to the execution log, if there is one and the call
/// carries a key (in `params._meta`, which rmcp moves to the request
/// context's `meta`). A log that cannot be written is a warning, not a
/// failure of the call.
pub fn record(request: &CallToolRequestParams, context_meta: &RequestMetaObject) {
    let key = request
        .meta
        .as_ref()
        .and_then(|meta| meta.get(META_KEY))
        .or_else(|| context_meta.get(META_KEY))
        .and_then(|key| key.as_str());
    if let Some(key) = key {
        append(&request.name, key);
    }
}

/// [`record`] for a 2025-11-25 task-augmented `tools/call`, which reaches
/// the task engine as raw JSON `params` (renamed before rmcp parses it, so
/// never through [`record`]): called when its task is created.
pub fn record_raw(params: &Value, context_meta: &RequestMetaObject) {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return;
    };
    let key = params
        .get("_meta")
        .and_then(|meta| meta.get(META_KEY))
        .or_else(|| context_meta.get(META_KEY))
        .and_then(Value::as_str);
    if let Some(key) = key {
        append(name, key);
    }
}

/// Appends `TOOL KEY PID` to the log, if there is one.
fn append(tool: &str, key: &str) {
    let Some(path) = std::env::var_os(ENV) else {
        return;
    };
    let line = format!("{tool} {key} {}\n", std::process::id());
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(error) = written {
        tracing::warn!(%error, path = %path.to_string_lossy(), "writing the execution log");
    }
}
