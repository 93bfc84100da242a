//! What the control plane keeps in the store, and under which keys (all
//! relative to the store's root, `/switchyard/v1/` by default). Values are
//! JSON so an operator can read them with `etcdctl get --prefix`.
//!
//! | key | value | lifetime |
//! |---|---|---|
//! | `servers/<name>` | [`ServerRecord`] | until removed |
//! | `sidecars/<server>/<sidecar id>` | [`SidecarRecord`] | leased: the report stream keeps it alive |
//! | `tools/<server>` | [`CatalogueRecord`] | until the server is removed |
//! | `toolnames` | [`crate::names::NameMap`] + the catalogue epoch it was built from | derived |
//! | `sessions/<id>` | [`SessionRecord`] | until deleted |
//! | `cancels/<session>/<call id>` | empty | leased, short |
//! | `interactions/<session>/<id>` | [`crate::interactions::InteractionRecord`] | until resolved, then leased (1 h) |

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchyard_sidecar::config::ServerConfig;

/// Key of a server.
pub fn server_key(name: &str) -> String {
    format!("servers/{name}")
}
/// Key of a sidecar registration.
pub fn sidecar_key(server: &str, id: &str) -> String {
    format!("sidecars/{server}/{id}")
}
/// Key of a server's catalogue.
pub fn tools_key(server: &str) -> String {
    format!("tools/{server}")
}
/// Key of the engine-visible name map.
pub const TOOLNAMES_KEY: &str = "toolnames";
/// Key of a session.
pub fn session_key(id: &str) -> String {
    format!("sessions/{id}")
}
/// Key of a cancellation request.
pub fn cancel_key(session: &str, call_id: &str) -> String {
    format!("cancels/{session}/{call_id}")
}

/// Where a server entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// The configuration file (re-synchronised at start).
    Config,
    /// The admin API.
    Admin,
}

/// `servers/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerRecord {
    /// The spec.
    pub spec: ServerConfig,
    /// Where it came from.
    pub origin: Origin,
}

/// `sidecars/<server>/<id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SidecarRecord {
    /// Server name.
    pub server: String,
    /// Sidecar instance id.
    pub sidecar_id: String,
    /// Where its `SidecarCalls` service listens.
    pub call_address: String,
    /// Its version.
    pub version: String,
    /// Registration time, ms since the epoch.
    pub registered_at_ms: i64,
    /// Upstream state as last reported.
    pub upstream_state: String,
    /// Last upstream error as reported.
    pub last_error: String,
}

/// `tools/<server>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogueRecord {
    /// Tool definitions exactly as the server sent them.
    pub tools: Vec<Value>,
    /// Server capabilities.
    pub capabilities: Value,
    /// serverInfo.
    pub server_info: Value,
    /// Negotiated protocol version.
    pub protocol_version: String,
    /// When `tools` or `capabilities` last really changed, ms since the
    /// epoch (`toolsUpdatedAt`).
    pub tools_updated_at: i64,
}

/// `toolnames`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamesRecord {
    /// The map.
    #[serde(flatten)]
    pub map: crate::names::NameMap,
}

/// A session's permission mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// Ask where policy says so.
    #[default]
    Ask,
    /// Call without asking, except `confirm` tools.
    Auto,
    /// Read-only tools only.
    ReadOnly,
}

/// A root of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootRecord {
    /// URI.
    pub uri: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// `sessions/<id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// Id.
    pub id: String,
    /// Enabled servers; empty = all.
    pub enabled_servers: Vec<String>,
    /// Permission mode.
    pub permission_mode: PermissionMode,
    /// Roots.
    pub roots: Vec<RootRecord>,
    /// Created, ms since the epoch.
    pub created_at_ms: i64,
    /// Updated, ms since the epoch.
    pub updated_at_ms: i64,
}

impl SessionRecord {
    /// Whether the session may use `server`.
    pub fn enables(&self, server: &str) -> bool {
        self.enabled_servers.is_empty() || self.enabled_servers.iter().any(|s| s == server)
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
