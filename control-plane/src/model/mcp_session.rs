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
}
