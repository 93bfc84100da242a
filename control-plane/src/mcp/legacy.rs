//! 2025-11-25 on the same endpoint (basic/lifecycle, basic/transports
//! "Session Management"): `initialize` opens a session and answers its id
//! in `Mcp-Session-Id`; every later request names it; DELETE ends it.
//!
//! A session is a stored record (`mcp-sessions/<id>`,
//! [`McpSessionRecord`]), so any replica serves it and it outlives a
//! replica's restart. It is bound to the URL it was opened on and to the
//! caller that opened it: on another URL, or for another caller, it does
//! not exist (404, as for an unknown or ended one, after which the client
//! opens a new one). On `/mcp` and `/mcp/servers/NAME` it gets an engine
//! session of its own (same id, the caller's, ended with it), so its calls
//! are scoped, audited and attributed like an engine's; on
//! `/mcp/sessions/ID` it uses that engine session.

use super::Endpoint;
use super::discover::LEGACY_VERSIONS as VERSIONS;
use super::ingress::Message;
use super::respond::{self, McpError, SESSION_NOT_FOUND};
use crate::auth::Caller;
use crate::model::mcp_session::{McpSessionRecord, Scope};
use crate::model::{PermissionMode, SessionRecord, now_ms};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};
use std::time::Duration;
use switchyard_mcp::{era, headers};

/// How often a session's `usedAtMs` is written back, at most.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// The most JSON an `initialize`'s `capabilities` or `clientInfo` may
/// take; each is kept with the session.
pub const MAX_CLIENT_FIELD_BYTES: usize = 16 * 1024;

/// An `initialize`'s `capabilities` and `clientInfo` (`{}` when absent),
/// which are kept with the session, in the store and in every replica's
/// memory. Errors: -32602 for one that is not an object, or over
/// [`MAX_CLIENT_FIELD_BYTES`].
fn client_fields(params: &serde_json::Map<String, Value>) -> Result<[Value; 2], McpError> {
    let mut kept = [json!({}), json!({})];
    for (field, slot) in ["capabilities", "clientInfo"].into_iter().zip(&mut kept) {
        match params.get(field) {
            None => {}
            Some(v @ Value::Object(_)) if v.to_string().len() <= MAX_CLIENT_FIELD_BYTES => {
                *slot = v.clone();
            }
            Some(Value::Object(_)) => {
                return Err(McpError::invalid_params(format!(
                    "params.{field}: more than {MAX_CLIENT_FIELD_BYTES} bytes of JSON"
                )));
            }
            Some(_) => {
                return Err(McpError::invalid_params(format!(
                    "params.{field}: must be an object"
                )));
            }
        }
    }
    Ok(kept)
}

/// A 2025-11-25 request's `_meta`, when given, is an object (basic,
/// "_meta"). Errors: -32602 naming what it is.
pub fn check_meta(msg: &Message) -> Result<(), McpError> {
    match msg.params.get("_meta") {
        Some(meta) if !meta.is_object() => Err(McpError::invalid_params(format!(
            "params._meta: must be an object, not {}",
            switchyard_mcp::jsonrpc::kind_of(meta)
        ))
        .with_id(msg.id.as_ref())),
        _ => Ok(()),
    }
}

/// Answers `initialize` on `scope` for `caller`: a new session, its
/// engine session, and the `InitializeResult` with the id in
/// `Mcp-Session-Id`. Errors: -32602 (params: `capabilities` and
/// `clientInfo` must be objects of at most [`MAX_CLIENT_FIELD_BYTES`]),
/// unavailable store.
pub async fn initialize(
    ep: &Endpoint,
    scope: &Scope,
    caller: Option<&Caller>,
    msg: &Message,
) -> Result<Response, McpError> {
    let id_of_request = msg.id.clone().unwrap_or(Value::Null);
    let requested = msg
        .params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            McpError::invalid_params("params.protocolVersion: required, a string")
                .with_id(msg.id.as_ref())
        })?;
    let version = VERSIONS
        .iter()
        .find(|v| **v == requested)
        .copied()
        .unwrap_or(VERSIONS[0]);
    check_meta(msg)?;
    let [client_capabilities, client_info] =
        client_fields(&msg.params).map_err(|e| e.with_id(msg.id.as_ref()))?;
    let owner = caller.map(|c| c.name.clone()).unwrap_or_default();
    let id = switchyard_common::ids::new_id();
    let now = now_ms();
    let engine_session = match scope {
        Scope::Session(s) => s.clone(),
        Scope::All | Scope::Server(_) => {
            let rec = engine_session_for(scope, &id, &owner);
            ep.cp
                .registry
                .put_session(&rec)
                .await
                .map_err(|e| store_error(e, &id_of_request))?;
            id.clone()
        }
    };
    let rec = McpSessionRecord {
        id: id.clone(),
        scope: scope.clone(),
        engine_session,
        owner,
        protocol_version: version.to_owned(),
        client_capabilities,
        client_info,
        created_at_ms: now,
        used_at_ms: now,
        log_level: None,
        streams: Vec::new(),
    };
    let rev = ep
        .cp
        .registry
        .put_mcp_session(&rec)
        .await
        .map_err(|e| store_error(e, &id_of_request))?;
    // This replica's next request in the session finds it.
    ep.cp.state.wait_for(rev, Duration::from_secs(2)).await;
    // The caller's sessions beyond its cap end, least recently used first.
    let snap = ep.cp.state.snapshot();
    let max = ep.config.max_sessions_per_caller;
    for old in beyond_the_cap(snap.mcp_sessions.values(), &rec.owner, &id, max) {
        end(ep, old, Ended::Evicted).await;
    }
    let client = rec
        .client_info
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("");
    tracing::info!(session = %id, scope = %scope.path(), version, client, "MCP session opened");
    let result = json!({
        "protocolVersion": version,
        "capabilities": super::discover::capabilities(era::Era::Legacy),
        "serverInfo": super::discover::server_info(),
        "instructions": super::discover::instructions(scope),
    });
    let mut response = respond::result(&id_of_request, result);
    response.headers_mut().insert(
        headers::SESSION_ID,
        HeaderValue::from_str(&id).expect("hex ids are header values"),
    );
    Ok(response)
}

/// The engine session the endpoint creates for MCP clients of `scope`
/// (`/mcp`: every server; `/mcp/servers/NAME`: that one), mode `auto`, no
/// roots, owned by `owner`: a 2025-11-25 session's, and a 2026-07-28
/// caller's ([`super::mrtr::session_for`]).
pub fn engine_session_for(scope: &Scope, id: &str, owner: &str) -> SessionRecord {
    let now = now_ms();
    SessionRecord {
        id: id.to_owned(),
        enabled_servers: match scope {
            Scope::Server(name) => vec![name.clone()],
            _ => Vec::new(),
        },
        permission_mode: PermissionMode::Auto,
        roots: Vec::new(),
        created_at_ms: now,
        updated_at_ms: now,
        owner: owner.to_owned(),
    }
}

/// 503 with the store's failure, answering request `id`.
pub(super) fn store_error(e: crate::registry::RegistryError, id: &Value) -> McpError {
    McpError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        respond::INTERNAL_ERROR,
        format!(
            "the session could not be stored: {}",
            switchyard_common::error_chain(&e)
        ),
    )
    .with_id(Some(id))
}

/// The session a 2025-11-25 request names in `Mcp-Session-Id`, if it is
/// open on `scope` for `caller`. Errors: 400 without the header (or with a
/// version header this endpoint does not speak), 404 for a session that is
/// unknown, ended, another caller's or another URL's.
pub async fn session(
    ep: &Endpoint,
    scope: &Scope,
    caller: Option<&Caller>,
    h: &HeaderMap,
    msg_id: Option<&Value>,
) -> Result<McpSessionRecord, McpError> {
    let sent = h.get(headers::SESSION_ID);
    if sent.is_some_and(|v| v.to_str().is_err()) {
        return Err(McpError::new(
            StatusCode::NOT_FOUND,
            SESSION_NOT_FOUND,
            "header Mcp-Session-Id: not a session of this endpoint (its ids are visible ASCII)",
        )
        .with_id(msg_id));
    }
    let Some(id) = sent.and_then(|v| v.to_str().ok()) else {
        return Err(McpError::bad_request(
            "header Mcp-Session-Id: required (send initialize first; a 2026-07-28 request carries MCP-Protocol-Version and params._meta instead)",
        )
        .with_id(msg_id));
    };
    if let Some(v) = h.get(headers::PROTOCOL_VERSION) {
        let v = v.to_str().unwrap_or("");
        if !VERSIONS.contains(&v) && !era::LEGACY_VERSIONS.contains(&v) {
            return Err(McpError::bad_request(format!(
                "header MCP-Protocol-Version {v:?} is not a version of this session (supported: {})",
                VERSIONS.join(", ")
            ))
            .with_id(msg_id));
        }
    }
    let not_found = || {
        McpError::new(
            StatusCode::NOT_FOUND,
            SESSION_NOT_FOUND,
            "session not found: it ended, expired or never existed here; send initialize to open a new one",
        )
        .with_id(msg_id)
    };
    let rec = match ep.cp.state.snapshot().mcp_sessions.get(id) {
        Some(rec) => rec.clone(),
        // Opened on another replica a moment ago: read it from the store.
        None => match ep.cp.registry.get_mcp_session(id).await {
            Ok(Some(rec)) => rec,
            Ok(None) => return Err(not_found()),
            Err(e) => return Err(store_error(e, msg_id.unwrap_or(&Value::Null))),
        },
    };
    let owner = caller.map(|c| c.name.as_str()).unwrap_or("");
    if &rec.scope != scope || rec.owner != owner {
        return Err(not_found());
    }
    if now_ms() - rec.used_at_ms > TOUCH_EVERY.as_millis() as i64 {
        // Best effort: a lost write only shortens the idle time left. Only
        // `usedAtMs` changes: what another request set meanwhile (its log
        // level) is kept.
        let touched = ep
            .cp
            .registry
            .update_mcp_session(&rec.id, |r| r.used_at_ms = now_ms())
            .await;
        if let Err(e) = touched {
            tracing::warn!(session = %rec.id, error = %e, "could not refresh an MCP session's last use");
        }
    }
    Ok(rec)
}

/// Why a 2025-11-25 session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its client sent DELETE.
    Deleted,
    /// Unused for `mcp.session_idle_timeout_sec`.
    Idle,
    /// Its caller opened more than `mcp.max_sessions_per_caller`, and it
    /// was their least recently used.
    Evicted,
}

impl Ended {
    /// The metric's `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Ended::Deleted => "deleted",
            Ended::Idle => "idle",
            Ended::Evicted => "evicted",
        }
    }

    /// Said in the log line.
    fn words(self) -> &'static str {
        match self {
            Ended::Deleted => "deleted by the client",
            Ended::Idle => "idle",
            Ended::Evicted => {
                "its caller opened more than mcp.max_sessions_per_caller sessions; it was their least recently used"
            }
        }
    }
}

/// Ends session `rec` (DELETE, idle too long, or evicted): its record, and
/// the engine session it created. Counted by the replica whose delete
/// found it.
pub async fn end(ep: &Endpoint, rec: &McpSessionRecord, why: Ended) {
    match ep.cp.registry.delete_mcp_session(&rec.id).await {
        Ok(true) => ep.cp.metrics.mcp_session_ended(why.label()),
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(session = %rec.id, error = %e, "could not delete an MCP session");
            return;
        }
    }
    if rec.engine_session == rec.id {
        let _ = ep.cp.registry.delete_session(&rec.id).await;
    }
    tracing::info!(session = %rec.id, scope = %rec.scope.path(), why = why.words(), "MCP session ended");
}

/// The sessions of `owner` to end so that, with its new session `new`, it
/// keeps at most `max`: its least recently used (then oldest) first.
pub fn beyond_the_cap<'a>(
    sessions: impl Iterator<Item = &'a McpSessionRecord>,
    owner: &str,
    new: &str,
    max: usize,
) -> Vec<&'a McpSessionRecord> {
    let mut own: Vec<&McpSessionRecord> = sessions
        .filter(|s| s.owner == owner && s.id != new)
        .collect();
    let extra = (own.len() + 1).saturating_sub(max);
    if extra == 0 {
        return Vec::new();
    }
    own.sort_by_key(|s| (s.used_at_ms, s.created_at_ms));
    own.truncate(extra);
    own
}

/// Ends the sessions idle for longer than `mcp.session_idle_timeout_sec`
/// (every replica runs this; deleting twice is harmless).
pub async fn sweep(ep: &Endpoint) {
    let idle = ep.config.session_idle_timeout_sec as i64 * 1000;
    let now = now_ms();
    let expired: Vec<McpSessionRecord> = ep
        .cp
        .state
        .snapshot()
        .mcp_sessions
        .values()
        .filter(|s| now - s.used_at_ms > idle)
        .cloned()
        .collect();
    for rec in expired {
        end(ep, &rec, Ended::Idle).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_session_keeps_of_its_client_is_small_objects() {
        let params = |v: Value| v.as_object().unwrap().clone();
        let kept = client_fields(&params(json!({"clientInfo": {"name": "c"}}))).unwrap();
        assert_eq!(kept, [json!({}), json!({"name": "c"})]);
        let big = json!({"capabilities": {"x": "y".repeat(MAX_CLIENT_FIELD_BYTES)}});
        let e = client_fields(&params(big)).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (-32602, "params.capabilities: more than 16384 bytes of JSON")
        );
        let e = client_fields(&params(json!({"clientInfo": 5}))).unwrap_err();
        assert_eq!(e.message, "params.clientInfo: must be an object");
    }

    #[test]
    fn a_callers_least_recently_used_sessions_go_beyond_its_cap() {
        let rec = |id: &str, owner: &str, used: i64| McpSessionRecord {
            id: id.into(),
            scope: Scope::All,
            engine_session: id.into(),
            owner: owner.into(),
            protocol_version: "2025-11-25".into(),
            client_capabilities: Value::Null,
            client_info: Value::Null,
            created_at_ms: 1,
            used_at_ms: used,
            log_level: None,
            streams: Vec::new(),
        };
        let all = [
            rec("a1", "alice", 30),
            rec("a2", "alice", 10),
            rec("a3", "alice", 20),
            rec("b1", "bob", 5),
            rec("new", "alice", 40),
        ];
        let ids = |max| -> Vec<&str> {
            beyond_the_cap(all.iter(), "alice", "new", max)
                .iter()
                .map(|s| s.id.as_str())
                .collect()
        };
        assert_eq!(ids(4), Vec::<&str>::new());
        assert_eq!(ids(3), ["a2"]);
        assert_eq!(ids(2), ["a2", "a3"]);
        assert_eq!(ids(1), ["a2", "a3", "a1"]);
        // Another caller's sessions are never counted or ended.
        assert_eq!(
            beyond_the_cap(all.iter(), "bob", "b1", 1).len(),
            0,
            "bob has one"
        );
    }
}
