//! Servers' log messages for MCP clients (server/utilities/logging): the
//! client's level, and nothing else; the messages themselves travel with
//! the call's other notifications (`super::notifications_wanted`).
//!
//! - **2025-11-25**: the session's level, set with `logging/setLevel`
//!   ([`set_level`]) and kept in its session record
//!   ([`McpSessionRecord::log_level`]), so any replica applies it. It is
//!   not forwarded to the servers: their connections are shared by every
//!   client, so the level is applied at the gateway.
//! - **2026-07-28**: the request's own
//!   `_meta["io.modelcontextprotocol/logLevel"]` ([`level`]); anything but
//!   a `LoggingLevel` there is -32602.
//!
//! A client without a level gets no log messages: the 2026-07-28 schema
//! says so of a request without `logLevel` (`RequestMetaObject`: "the
//! server MUST NOT send any notifications/message"), and a 2025-11-25
//! session that never set one is treated the same (that revision leaves
//! the default to the server). With a level, a `tools/call` from a client
//! that takes SSE is answered as a stream: the server's
//! `notifications/message` at that level or more severe, as the server
//! sent them, then the response. The sidecar relays only the messages a
//! server sent on the call's own response stream (Streamable HTTP), so a
//! client never gets another client's: not those of a stdio server, nor
//! those a server sends on its standalone GET stream.

use super::Endpoint;
use super::ingress::Message;
use super::respond::{McpError, SESSION_NOT_FOUND};
use crate::model::mcp_session::McpSessionRecord;
use axum::http::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;
use switchyard_mcp::era::Era;
use switchyard_mcp::logging::{self, Level};
use switchyard_mcp::meta;

/// `logging/setLevel` of 2025-11-25 session `session`: stores the level
/// `params.level` in the session's record and answers `{}` once this
/// replica's read model has it (its next request applies it). Errors:
/// -32602 naming `params.level` when it is not a log level; 404 (-32001)
/// when the session ended meanwhile; 503 when the store fails.
pub async fn set_level(
    ep: &Endpoint,
    session: &McpSessionRecord,
    msg: &Message,
) -> Result<Value, McpError> {
    let level = match msg.params.get("level") {
        Some(v) => Level::of(v).ok_or_else(|| {
            McpError::invalid_params(format!(
                "params.level: {v} is not a log level (one of {})",
                logging::names()
            ))
        })?,
        None => {
            return Err(McpError::invalid_params(format!(
                "params.level: required, one of {}",
                logging::names()
            )));
        }
    };
    let updated = ep
        .cp
        .registry
        .update_mcp_session(&session.id, |r| {
            r.log_level = Some(level.as_str().to_owned());
        })
        .await
        .map_err(|e| super::legacy::store_error(e, msg.id.as_ref().unwrap_or(&Value::Null)))?;
    let Some((_, rev)) = updated else {
        return Err(McpError::new(
            StatusCode::NOT_FOUND,
            SESSION_NOT_FOUND,
            "session not found: it ended; send initialize to open a new one",
        ));
    };
    // This replica's next request in the session applies it.
    ep.cp.state.wait_for(rev, Duration::from_secs(2)).await;
    tracing::debug!(session = %session.id, %level, "MCP session log level set");
    Ok(json!({}))
}

/// The log level of request `msg` in `era`: the 2025-11-25 `session`'s,
/// or the 2026-07-28 request's `_meta` (`None`: no log messages). Errors:
/// -32602 naming the `_meta` key when it holds anything but a log level.
pub fn level(
    era: Era,
    session: Option<&McpSessionRecord>,
    msg: &Message,
) -> Result<Option<Level>, McpError> {
    match era {
        Era::Legacy => Ok(session
            .and_then(|s| s.log_level.as_deref())
            .and_then(Level::parse)),
        Era::Modern => match msg.meta().and_then(|m| m.get(meta::LOG_LEVEL)) {
            None => Ok(None),
            Some(v) => Level::of(v).map(Some).ok_or_else(|| {
                McpError::invalid_params(format!(
                    "params._meta[{:?}]: {v} is not a log level (one of {})",
                    meta::LOG_LEVEL,
                    logging::names()
                ))
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(params: Value) -> Message {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params});
        super::super::ingress::parse(body.to_string().as_bytes()).expect("a request")
    }

    #[test]
    fn a_modern_request_names_its_level_in_meta() {
        let with = |v: Value| msg(json!({"name": "t", "_meta": {meta::LOG_LEVEL: v}}));
        assert_eq!(
            level(Era::Modern, None, &with(json!("warning"))).unwrap(),
            Some(Level::Warning)
        );
        assert_eq!(
            level(Era::Modern, None, &msg(json!({"name": "t"}))).unwrap(),
            None
        );
        for bad in [json!("WARNING"), json!("verbose"), json!(3), json!(null)] {
            let e = level(Era::Modern, None, &with(bad.clone())).unwrap_err();
            assert_eq!(e.code, switchyard_mcp::jsonrpc::INVALID_PARAMS, "{bad}");
            assert!(
                e.message.contains("io.modelcontextprotocol/logLevel"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn a_legacy_request_has_its_sessions_level() {
        let m = msg(json!({"name": "t", "_meta": {meta::LOG_LEVEL: "nonsense"}}));
        let mut s: McpSessionRecord = serde_json::from_value(json!({
            "id": "s", "scope": {"kind": "all"}, "engineSession": "s",
            "protocolVersion": "2025-11-25", "createdAtMs": 0, "usedAtMs": 0}))
        .unwrap();
        assert_eq!(level(Era::Legacy, Some(&s), &m).unwrap(), None, "never set");
        s.log_level = Some("error".into());
        assert_eq!(
            level(Era::Legacy, Some(&s), &m).unwrap(),
            Some(Level::Error)
        );
    }
}
