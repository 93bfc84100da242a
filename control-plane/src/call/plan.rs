//! Step 4 of the call path: what the sidecar is asked to do, and for how
//! long. The `tools/call` params (the engine's arguments, `_meta` and
//! other params spliced in as given), the call's timeout, and the background policy
//! (stage B: whether and when the call may move to the background).

use super::error::CallError;
use super::resolve::Target;
use crate::ControlPlane;
use crate::model::SessionRecord;
use crate::state::Snapshot;
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use std::time::Duration;
use switchyard_proto::v1 as pb;

/// The planned call.
#[derive(Debug)]
pub struct Plan {
    /// The request for the sidecar; its `timeout_ms` is set when the call
    /// is routed, from the call's deadline.
    pub request: pb::SidecarCallRequest,
    /// How long the call may take once routed: the engine's `timeout_ms`,
    /// else the background phase (or the foreground limit at
    /// maxPerTarget) plus a margin, at least `control_plane.call_timeout_sec`.
    pub timeout: Duration,
}

/// Plans the call of `target` for request `r` made by `caller` (a
/// `foreground` request gets no background policy; a background call is
/// recorded with its caller's name). `retry_safe`: the tool's
/// effective hints allow the stage-A retry. Errors: INVALID_ARGUMENT
/// naming the field (`arguments_json`, `meta_json`, `other_params_json`, `timeout_ms`,
/// `client_capabilities_json`).
pub fn plan(
    cp: &ControlPlane,
    snap: &Snapshot,
    r: &pb::CallToolRequest,
    target: &Target<'_>,
    session: Option<&SessionRecord>,
    caller: Option<&crate::auth::Caller>,
    retry_safe: bool,
) -> Result<Plan, CallError> {
    let params_json = params_json(
        &target.tool,
        &r.arguments_json,
        &r.meta_json,
        &r.other_params_json,
    )?;
    if !r.client_capabilities_json.is_empty() {
        raw_object("client_capabilities_json", &r.client_capabilities_json)?;
    }
    let max_ms = switchyard_common::server_spec::MAX_TIMEOUT_SEC * 1000;
    if r.timeout_ms > max_ms {
        return Err(CallError::invalid_argument(format!(
            "timeout_ms: {} is over the maximum {max_ms} (7 days)",
            r.timeout_ms
        )));
    }
    // Stage B: the call may move to the background after its foreground
    // phase; without a timeout of the engine's, the call's deadline covers
    // that phase (and the 10-minute foreground poll at maxPerTarget) plus a
    // margin.
    // A `foreground` call has none: it runs until it ends or times out.
    let server = target.server.as_str();
    let background = (!r.foreground).then(|| pb::BackgroundPolicy {
        move_when_task: r.move_when_task,
        principal: caller.map(|c| c.name.clone()).unwrap_or_default(),
        ..cp.background.policy(
            &r.tool,
            r.background || snap.background_always(server, &target.tool),
            cp.state.background_running(server),
        )
    });
    let timeout = match (&background, r.timeout_ms) {
        (_, ms) if ms > 0 => Duration::from_millis(ms),
        (None, _) => cp.call_timeout,
        (Some(background), _) => {
            let phase = if background.allowed {
                background.auto_after_ms
            } else {
                background.foreground_limit_ms
            };
            cp.call_timeout
                .max(Duration::from_millis(phase) + Duration::from_secs(30))
        }
    };
    let request = pb::SidecarCallRequest {
        params_json,
        timeout_ms: 0,
        session_id: r.session_id.clone(),
        run_id: r.run_id.clone(),
        roots_json: session
            .filter(|s| !s.roots.is_empty())
            .map(|s| serde_json::to_string(&s.roots).expect("roots serialise"))
            .unwrap_or_default(),
        retry_safe,
        background,
        // Set at step 6, when the caller observes the call.
        relay_progress: false,
        client_capabilities_json: r.client_capabilities_json.clone(),
        log_level: String::new(),
    };
    Ok(Plan { request, timeout })
}

/// The `tools/call` params that `other_params_json` may not hold: the
/// call's own fields, and those of the sidecar's multi round-trip client
/// (2026-07-28 basic/patterns/mrtr).
pub const RESERVED_PARAMS: [&str; 6] = [
    "name",
    "arguments",
    "_meta",
    "task",
    "inputResponses",
    "requestState",
];

/// The `tools/call` params for the sidecar, as JSON text:
/// `{"name": TOOL, "arguments": ARGUMENTS, "_meta": META, ...OTHER}`, with
/// the engine's `arguments_json` (empty = `{}`) and `meta_json` (empty =
/// no `_meta`) spliced in exactly as given, and each member of
/// `other_json` (empty = none) after them with its value as given, after
/// checking that each is a JSON object. Errors: INVALID_ARGUMENT naming
/// the field, or the member of `other_json` that one of the others sets.
pub fn params_json(
    tool: &str,
    arguments_json: &str,
    meta_json: &str,
    other_json: &str,
) -> Result<String, CallError> {
    let arguments = raw_object("arguments_json", arguments_json)?;
    let meta = raw_object("meta_json", meta_json)?;
    let other = match raw_object("other_params_json", other_json)? {
        None => BTreeMap::new(),
        Some(text) => serde_json::from_str::<BTreeMap<String, &RawValue>>(text).map_err(|e| {
            CallError::invalid_argument(format!("other_params_json: not valid JSON: {e}"))
        })?,
    };
    if let Some(key) = RESERVED_PARAMS.iter().find(|k| other.contains_key(**k)) {
        return Err(CallError::invalid_argument(format!(
            "other_params_json: `{key}` is not taken here (`name`, `arguments`, `_meta` and \
             `task` are set by `tool`, `arguments_json`, `meta_json` and `background`; \
             `inputResponses` and `requestState` by the sidecar's multi round-trip client)"
        )));
    }
    let name = Value::from(tool).to_string();
    let mut out = String::with_capacity(
        name.len()
            + arguments.map_or(2, str::len)
            + meta.map_or(0, str::len)
            + other_json.len()
            + 32,
    );
    out.push_str("{\"name\":");
    out.push_str(&name);
    out.push_str(",\"arguments\":");
    out.push_str(arguments.unwrap_or("{}"));
    if let Some(meta) = meta {
        out.push_str(",\"_meta\":");
        out.push_str(meta);
    }
    for (key, value) in &other {
        out.push(',');
        out.push_str(&Value::from(key.as_str()).to_string());
        out.push(':');
        out.push_str(value.get());
    }
    out.push('}');
    Ok(out)
}

/// `text` checked to be one JSON object (surrounding white space dropped),
/// nested at most [`switchyard_mcp::jsonrpc::MAX_DEPTH`] levels, without a
/// number a double would change (the sidecar would forward it
/// changed: [`switchyard_mcp::jsonrpc::inexact_number`]); `None` when
/// blank. Errors: INVALID_ARGUMENT naming `field`.
pub(super) fn raw_object<'a>(field: &str, text: &'a str) -> Result<Option<&'a str>, CallError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let raw: &serde_json::value::RawValue = serde_json::from_str(text)
        .map_err(|e| CallError::invalid_argument(format!("{field}: not valid JSON: {e}")))?;
    if !raw.get().starts_with('{') {
        return Err(CallError::invalid_argument(format!(
            "{field}: must be a JSON object"
        )));
    }
    let max = switchyard_mcp::jsonrpc::MAX_DEPTH;
    if switchyard_mcp::jsonrpc::depth(raw.get().as_bytes()) > max {
        return Err(CallError::invalid_argument(format!(
            "{field}: arrays and objects nest more than {max} levels deep"
        )));
    }
    if let Some(inexact) = switchyard_mcp::jsonrpc::inexact_number(raw.get().as_bytes()) {
        return Err(CallError::invalid_argument(format!(
            "{field}: {inexact}: it would not reach the server as sent (send it as a string)"
        )));
    }
    Ok(Some(raw.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_spliced_as_given_and_inexact_numbers_refused() {
        let p = params_json(
            "t",
            r#" {"n": 1.50, "s": "99999999999999999999999"} "#,
            "",
            "",
        )
        .unwrap();
        assert_eq!(
            p,
            r#"{"name":"t","arguments":{"n": 1.50, "s": "99999999999999999999999"}}"#
        );
        let e = params_json("t", "{}", r#"{"trace": 18446744073709551616}"#, "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "meta_json: the integer 18446744073709551616 is beyond 64 bits: it would not reach the server as sent (send it as a string)"
        );
        let e = params_json("t", r#"{"x": 0.1000000000000000000001}"#, "", "").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("arguments_json: the number 0.1000000000000000000001 has more digits"),
            "{e}"
        );
    }

    #[test]
    fn other_params_follow_as_given_and_cannot_replace_the_call() {
        let p = params_json(
            "t",
            "",
            r#"{"k":1}"#,
            r#" {"x-trace": {"n": 1.50}, "é\n": null} "#,
        )
        .unwrap();
        assert_eq!(
            p,
            r#"{"name":"t","arguments":{},"_meta":{"k":1},"x-trace":{"n": 1.50},"é\n":null}"#
        );
        let back: Value = serde_json::from_str(&p).unwrap();
        assert_eq!(back["é\n"], Value::Null);
        for key in RESERVED_PARAMS {
            let e = params_json("t", "", "", &format!(r#"{{"{key}": {{}}}}"#)).unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("other_params_json: `{key}` is not taken here")),
                "{e}"
            );
        }
        let deep = format!(
            "{{\"x\":{}{}}}",
            "[".repeat(switchyard_mcp::jsonrpc::MAX_DEPTH),
            "]".repeat(switchyard_mcp::jsonrpc::MAX_DEPTH)
        );
        let e = params_json("t", &deep, "", "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "arguments_json: arrays and objects nest more than 120 levels deep"
        );
        let e = params_json("t", "", "", "[1]").unwrap_err();
        assert_eq!(e.to_string(), "other_params_json: must be a JSON object");
    }
}
