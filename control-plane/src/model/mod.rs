//! What the control plane keeps in the store, and under which keys (all
//! relative to the store's root, `/switchyard/v1/` by default). Values are
//! JSON so an operator can read them with `etcdctl get --prefix`.
//!
//! | key | value | lifetime |
//! |---|---|---|
//! | `servers/<name>` | [`ServerRecord`] | until removed |
//! | `sidecars/<server>/<sidecar id>` | [`SidecarRecord`] | leased: the report stream keeps it alive |
//! | `tools/<server>` | [`CatalogueRecord`] | until the server is removed |
//! | `resources/<server>` | [`ResourceCatalogueRecord`] (stage E: resources, templates, prompts) | until the server is removed |
//! | `toolnames` | [`crate::names::NameMap`] + the catalogue epoch it was built from | derived |
//! | `sessions/<id>` | [`SessionRecord`] | until deleted |
//! | `cancels/<session>/<call id>` | empty | leased, short |
//! | `interactions/<session>/<id>` | [`interaction::InteractionRecord`] | until resolved, then leased (1 h) |
//! | `hints/<server>/<tool>` | [`HintOverrideRecord`] (an administrator's `toolHints`) | until cleared |
//! | `policies/<server>/<tool>` | [`PolicyRecord`] | until cleared |
//! | `background/<id>` | [`background::BackgroundRecord`] (a background call, stage B) | running, then `backgroundCalls.retentionSec` once finished |
//! | `mcp-sessions/<id>` | [`mcp_session::McpSessionRecord`] (a 2025-11-25 session of the MCP endpoint) | until deleted, or idle for `mcp.session_idle_timeout_sec` |
//! | `mcp-state-keys` | [`mrtr::StateKeyRing`] (the keys that seal the MCP endpoint's `requestState`s) | rotated daily |
//! | `mcp-spent/<nonce>` | empty (a spent `requestState`) | leased: the state's lifetime |
//! | `mcp-outcomes/<run>` | [`mrtr::OutcomeRecord`] (a call that asked its 2026-07-28 client) | leased: `limits.interactionTimeoutSec` |
//! | `replicas/<id>` | [`replica::ReplicaRecord`] (a running replica, for the approvals its calls wait on) | leased: `control_plane.sidecar_lease_ttl_sec`, renewed by the replica |
//!
//! Every stored record is here, and the principal ([`principal`]): the
//! modules that read and write them (`state`, `registry`, `background`,
//! `interactions`) sit above, so none of them imports another's records.

pub mod background;
pub mod interaction;
pub mod mcp_session;
pub mod mrtr;
pub mod principal;
pub mod replica;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchyard_common::server_spec::ServerConfig;

/// The longest id that becomes a key segment, in characters.
pub const MAX_ID_LEN: usize = 128;

/// Checks an id that becomes a key segment (a session, call, interaction or
/// background call id, chosen by an engine or a sidecar): 1 to
/// [`MAX_ID_LEN`] characters, no `/`, no control characters. The one rule
/// for every id; an optional id is checked only when given. Errors: the
/// message, naming `field`, for the caller's error type (INVALID_ARGUMENT
/// at the edge).
pub fn check_id(field: &str, id: &str) -> Result<(), String> {
    const RULE: &str = "1 to 128 characters, without '/' or control characters";
    if id.is_empty() {
        return Err(format!("{field}: required ({RULE})"));
    }
    let chars = id.chars().count();
    if chars > MAX_ID_LEN || id.contains('/') || id.chars().any(char::is_control) {
        return Err(format!("{field}: {RULE} (got {chars} characters)"));
    }
    Ok(())
}

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
/// Key of a server's resources, templates and prompts (stage E).
pub fn resources_key(server: &str) -> String {
    format!("resources/{server}")
}
/// Key of the engine-visible name map.
pub const TOOLNAMES_KEY: &str = "toolnames";
/// Key of a session.
pub fn session_key(id: &str) -> String {
    format!("sessions/{id}")
}
/// Key of a cancellation request: `scope` is the call's session, or `/`
/// and its caller's name in hex (`call::route::call_scope`).
pub fn cancel_key(scope: &str, call_id: &str) -> String {
    format!("cancels/{scope}/{call_id}")
}

/// Key of a tool's hint overrides (`tool` is the upstream name).
pub fn hints_key(server: &str, tool: &str) -> String {
    format!("hints/{server}/{tool}")
}
/// Key of a tool's policy (`tool` is the upstream name).
pub fn policy_key(server: &str, tool: &str) -> String {
    format!("policies/{server}/{tool}")
}

/// Key of a background call (stage B).
pub fn background_key(id: &str) -> String {
    format!("background/{id}")
}

/// `hints/<server>/<tool>`: an administrator's overrides of a tool's
/// hints; an absent field is not overridden.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HintOverrideRecord {
    /// `readOnlyHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// `destructiveHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// `idempotentHint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// Last set, ms since the epoch.
    #[serde(default)]
    pub updated_at_ms: i64,
}

impl HintOverrideRecord {
    /// Whether it overrides nothing.
    pub fn is_empty(&self) -> bool {
        self.read_only_hint.is_none()
            && self.destructive_hint.is_none()
            && self.idempotent_hint.is_none()
    }
}

/// A tool's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ToolPolicy {
    /// Offered and approved as the permission mode says.
    #[default]
    Default,
    /// Approval for every call, in every permission mode.
    Confirm,
    /// Never offered.
    Disabled,
}

impl ToolPolicy {
    /// `default`, `confirm` or `disabled`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolPolicy::Default => "default",
            ToolPolicy::Confirm => "confirm",
            ToolPolicy::Disabled => "disabled",
        }
    }

    /// Parses [`ToolPolicy::as_str`].
    pub fn parse(s: &str) -> Option<ToolPolicy> {
        match s {
            "default" => Some(ToolPolicy::Default),
            "confirm" => Some(ToolPolicy::Confirm),
            "disabled" => Some(ToolPolicy::Disabled),
            _ => None,
        }
    }
}

/// When a tool's calls move to the background (stage B).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BackgroundMode {
    /// After `backgroundCalls.autoAfterSec` in the foreground.
    #[default]
    Auto,
    /// At once: every call moves to the background.
    Always,
}

impl BackgroundMode {
    /// `auto` or `always`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackgroundMode::Auto => "auto",
            BackgroundMode::Always => "always",
        }
    }

    /// Parses [`BackgroundMode::as_str`].
    pub fn parse(s: &str) -> Option<BackgroundMode> {
        match s {
            "auto" => Some(BackgroundMode::Auto),
            "always" => Some(BackgroundMode::Always),
            _ => None,
        }
    }
}

/// `policies/<server>/<tool>`: an administrator's policy for a tool, and
/// when its calls move to the background. An absent field is not set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRecord {
    /// The policy (`None`: derived from the hints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<ToolPolicy>,
    /// `background: always|auto` (`None`: auto).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<BackgroundMode>,
    /// Last set, ms since the epoch.
    #[serde(default)]
    pub updated_at_ms: i64,
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
    /// The token the sidecar registered for its `SidecarCalls` service:
    /// the control plane sends it as `authorization: Bearer` on every call,
    /// and the sidecar refuses calls without it. Empty for an older
    /// sidecar (which checks none). Never shown in an API answer.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub call_token: String,
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

/// `resources/<server>` (stage E): the server's resources, resource
/// templates and prompts, each entry exactly as the server listed it. The
/// lists are cut to fit [`ResourceCatalogueRecord::MAX_BYTES`] of entries
/// (a store value must stay well under etcd's 1.5 MiB); what was cut is
/// counted in `omitted`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceCatalogueRecord {
    /// `resources/list`, every page.
    pub resources: Vec<Value>,
    /// `resources/templates/list`, every page.
    pub resource_templates: Vec<Value>,
    /// `prompts/list`, every page.
    pub prompts: Vec<Value>,
    /// Entries left out to fit the record: resources, templates, prompts.
    #[serde(default, skip_serializing_if = "is_zero3")]
    pub omitted: [usize; 3],
    /// When `resources` or `resource_templates` last really changed, ms
    /// since the epoch (`resourcesUpdatedAt`).
    pub resources_updated_at: i64,
    /// When `prompts` last really changed (`promptsUpdatedAt`).
    pub prompts_updated_at: i64,
}

fn is_zero3(n: &[usize; 3]) -> bool {
    *n == [0, 0, 0]
}

impl ResourceCatalogueRecord {
    /// The most JSON text of entries one record holds, in bytes.
    pub const MAX_BYTES: usize = 1_000_000;

    /// The largest single entry kept, in bytes of JSON text: one entry
    /// over it is left out alone (it would crowd out the rest).
    pub const MAX_ENTRY_BYTES: usize = 64 * 1024;

    /// The three lists cut to fit [`Self::MAX_BYTES`] together: entries
    /// over [`Self::MAX_ENTRY_BYTES`] are left out; the others are kept in
    /// order, resources first, then templates, then prompts, while they
    /// fit. The number left out of each list is returned.
    pub fn fit(lists: [Vec<Value>; 3]) -> ([Vec<Value>; 3], [usize; 3]) {
        let mut budget = Self::MAX_BYTES;
        let mut omitted = [0usize; 3];
        let mut full = [false; 3];
        let mut kept: [Vec<Value>; 3] = Default::default();
        for (i, list) in lists.into_iter().enumerate() {
            for entry in list {
                let size = entry.to_string().len() + 1;
                if size > Self::MAX_ENTRY_BYTES {
                    omitted[i] += 1;
                } else if size <= budget && !full[i] {
                    budget -= size;
                    kept[i].push(entry);
                } else {
                    full[i] = true;
                    omitted[i] += 1;
                }
            }
        }
        (kept, omitted)
    }
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
    /// The name of the authenticated caller that created it
    /// (`[[auth.tokens]] name`, or the matched certificate name); empty
    /// when an anonymous caller did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
}

impl SessionRecord {
    /// Whether the session may use `server`.
    pub fn enables(&self, server: &str) -> bool {
        self.enabled_servers.is_empty() || self.enabled_servers.iter().any(|s| s == server)
    }

    /// Whether `caller` may see and use this session: anonymous callers
    /// (allowed only while `[auth] required` is false) and admins may use
    /// any session; an engine may use the sessions it created, and those
    /// an anonymous caller created.
    pub fn usable_by(&self, caller: Option<&principal::Caller>) -> bool {
        match caller {
            None => true,
            Some(c) => {
                c.role == principal::Role::Admin || self.owner.is_empty() || self.owner == c.name
            }
        }
    }
}

/// A record's stored form: its JSON bytes (records always serialise).
pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    serde_json::to_vec(record).expect("records serialise")
}

/// Milliseconds since the Unix epoch (the one definition is shared with
/// the sidecar).
pub use switchyard_common::time::now_ms;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::principal::{Caller, Role};

    fn caller(name: &str, role: Role) -> Caller {
        Caller {
            name: name.into(),
            role,
            method: "token",
            servers: vec![],
        }
    }

    #[test]
    fn a_session_is_usable_by_its_owner_admins_and_anonymous_callers() {
        let session = |owner: &str| SessionRecord {
            id: "s".into(),
            enabled_servers: vec![],
            permission_mode: PermissionMode::Ask,
            roots: vec![],
            created_at_ms: 0,
            updated_at_ms: 0,
            owner: owner.into(),
        };
        let owned = session("engine-a");
        assert!(owned.usable_by(Some(&caller("engine-a", Role::Engine))));
        assert!(!owned.usable_by(Some(&caller("engine-b", Role::Engine))));
        assert!(owned.usable_by(Some(&caller("ops", Role::Admin))));
        assert!(owned.usable_by(None));
        // Created by an anonymous caller: anyone's.
        assert!(session("").usable_by(Some(&caller("engine-b", Role::Engine))));
        // The owner is stored only when there is one.
        let text = serde_json::to_string(&session("")).unwrap();
        assert!(!text.contains("owner"), "{text}");
        let back: SessionRecord =
            serde_json::from_str(&serde_json::to_string(&owned).unwrap()).unwrap();
        assert_eq!(back.owner, "engine-a");
    }

    #[test]
    fn one_id_rule_for_every_key_segment() {
        for ok in ["s1", "..", "a b", "é", &"é".repeat(128), "urn:x:1"] {
            assert_eq!(check_id("id", ok), Ok(()), "{ok}");
        }
        assert_eq!(
            check_id("session_id", ""),
            Err(
                "session_id: required (1 to 128 characters, without '/' or control characters)"
                    .into()
            )
        );
        for bad in ["a/b", "x\ny", "\u{7f}", &"i".repeat(129)] {
            let e = check_id("call_id", bad).unwrap_err();
            assert!(e.starts_with("call_id: 1 to 128 characters"), "{e}");
        }
    }
}
