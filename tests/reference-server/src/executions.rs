//! The execution log, for tests that count how often a call ran upstream
//! (the chaos suite, `tests/chaos`): when the environment variable
//! [`ENV`] names a file, every `tools/call` whose `_meta` holds a string
//! under [`META_KEY`] appends one line `TOOL KEY PID` to it (PID: this
//! server process's, which a task belongs to over stdio; one `write` of an
//! `O_APPEND` file, so several server processes can share it). Calls
//! without that key, and servers without the variable, record nothing.

use std::io::Write as _;

use rmcp::model::{CallToolRequestParams, RequestMetaObject};

/// The environment variable naming the execution log.
pub const ENV: &str = "SWITCHYARD_REFERENCE_EXECUTIONS";

/// The `_meta` key of a call's execution key.
pub const META_KEY: &str = "dev.switchyard.test/execution-key";

/// Appends `TOOL KEY PID` to the execution log, if there is one and the call
/// carries a key (in `params._meta`, which rmcp moves to the request
/// context's `meta`). A log that cannot be written is a warning, not a
/// failure of the call.
pub fn record(request: &CallToolRequestParams, context_meta: &RequestMetaObject) {
    let Some(path) = std::env::var_os(ENV) else {
        return;
    };
    let Some(key) = request
        .meta
        .as_ref()
        .and_then(|meta| meta.get(META_KEY))
        .or_else(|| context_meta.get(META_KEY))
        .and_then(|key| key.as_str())
    else {
        return;
    };
    let line = format!("{} {key} {}\n", request.name, std::process::id());
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(error) = written {
        tracing::warn!(%error, path = %path.to_string_lossy(), "writing the execution log");
    }
}
