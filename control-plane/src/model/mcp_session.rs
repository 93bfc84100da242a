//! `mcp-sessions/<id>`: a 2025-11-25 session of the MCP endpoint (opened by
//! `initialize`, named by the `Mcp-Session-Id` header). Stored so that any
//! replica serves it and it outlives a replica's restart. The endpoint that
//! reads and writes it is `crate::mcp`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Key prefix of the MCP sessions.
pub const PREFIX: &str = "mcp-sessions/";

/// Key of MCP session `id`.
pub fn key(id: &str) -> String {
    format!("{PREFIX}{id}")
}

/// Which servers a URL of the MCP endpoint serves, and how it names them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "name", rename_all = "lowercase")]
pub enum Scope {
    /// `/mcp`: every server the caller may use, names namespaced.
    All,
    /// `/mcp/sessions/<id>`: engine session `<id>`'s servers, permission
    /// mode and roots, names namespaced.
    Session(String),
    /// `/mcp/servers/<name>`: one server, names unchanged.
    Server(String),
}

impl Scope {
    /// The URL path that serves this scope.
    pub fn path(&self) -> String {
        match self {
            Scope::All => "/mcp".to_owned(),
            Scope::Session(id) => format!("/mcp/sessions/{id}"),
            Scope::Server(name) => format!("/mcp/servers/{name}"),
        }
    }
}

/// `mcp-sessions/<id>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpSessionRecord {
    /// The `Mcp-Session-Id` (random, 128 bits, hex).
    pub id: String,
    /// The URL it was opened on; it is served there only.
    pub scope: Scope,
    /// The engine session its calls run in: the scope's for
    /// [`Scope::Session`], else one created with it (same id) and deleted
    /// with it.
    pub engine_session: String,
    /// The authenticated caller that opened it (empty: anonymous); only
    /// that caller may use it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// The negotiated protocol version.
    pub protocol_version: String,
    /// The client's `capabilities`, as sent in `initialize`.
    #[serde(default)]
    pub client_capabilities: Value,
    /// The client's `clientInfo`, as sent.
    #[serde(default)]
    pub client_info: Value,
    /// Opened, ms since the epoch.
    pub created_at_ms: i64,
    /// Last used (refreshed at most once a minute), ms since the epoch.
    pub used_at_ms: i64,
    /// The level the client set with `logging/setLevel` (an MCP
    /// `LoggingLevel`, e.g. `"info"`): its calls get the servers' log
    /// messages at that level or more severe; absent: it never set one,
    /// and gets none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
    /// The session's open GET streams, oldest first, by random id (at most
    /// [`MAX_STREAMS`]; one a dead replica held stays until a newer one
    /// opens). Only the last gets the session's notifications
    /// (basic/transports: each message goes on one stream); the others get
    /// keep-alives. A stream removes itself when it ends, and ends when it
    /// is no longer named here (or the session ends).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<String>,
}

/// How many GET streams a session's record names ([`McpSessionRecord::streams`]);
/// opening one more forgets the oldest, which then ends.
pub const MAX_STREAMS: usize = 16;

impl McpSessionRecord {
    /// Adds GET stream `id` as the one that gets the notifications.
    pub fn open_stream(&mut self, id: &str) {
        self.streams.retain(|s| s != id);
        self.streams.push(id.to_owned());
        let extra = self.streams.len().saturating_sub(MAX_STREAMS);
        self.streams.drain(..extra);
    }

    /// Removes GET stream `id` (it ended); the one before it, if any, gets
    /// the notifications again if `id` had them.
    pub fn close_stream(&mut self, id: &str) {
        self.streams.retain(|s| s != id);
    }

    /// Whether GET stream `id` is the one that gets the notifications.
    pub fn is_current_stream(&self, id: &str) -> bool {
        self.streams.last().is_some_and(|s| s == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_open_stream_is_current_and_the_list_is_bounded() {
        let mut rec: McpSessionRecord = serde_json::from_value(serde_json::json!({
            "id": "s", "scope": {"kind": "all"}, "engineSession": "s",
            "protocolVersion": "2025-11-25", "createdAtMs": 1, "usedAtMs": 1}))
        .expect("a record without streams reads");
        assert!(!rec.is_current_stream("a"));
        rec.open_stream("a");
        rec.open_stream("b");
        assert!(rec.is_current_stream("b") && !rec.is_current_stream("a"));
        rec.close_stream("a");
        assert!(rec.is_current_stream("b"));
        rec.open_stream("a");
        rec.close_stream("a");
        assert!(rec.is_current_stream("b"));
        for i in 0..MAX_STREAMS + 3 {
            rec.open_stream(&i.to_string());
        }
        assert_eq!(rec.streams.len(), MAX_STREAMS);
        assert_eq!(rec.streams[0], "3");
        assert!(rec.is_current_stream(&(MAX_STREAMS + 2).to_string()));
        let text = serde_json::to_string(&rec).unwrap();
        assert!(text.contains("\"streams\":[\"3\""), "{text}");
    }
}
