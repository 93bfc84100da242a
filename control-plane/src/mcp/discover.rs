//! Who this endpoint is and what it serves: `server/discover` (2026-07-28
//! server/discover) and the same facts in the `InitializeResult` of a
//! 2025-11-25 session.
//!
//! The capabilities are those of every URL, whatever servers are behind
//! it: `tools`, `resources`, `prompts` and `completions`, each answered
//! (with empty lists when no server offers any), with `listChanged` on
//! the three lists (`subscriptions/listen`, the 2025-11-25 GET stream),
//! and `logging` (servers' log messages are relayed: `super::logging`).
//! Tasks are declared in each era's way (`super::tasks`).
//! Not declared: `resources.subscribe` (stage E does not build it), and
//! never `sampling` (refused by design). The supported versions are the
//! 2026-07-28 one and the 2025 ones `initialize` answers.

use crate::model::mcp_session::Scope;
use serde_json::{Value, json};
use switchyard_mcp::era::Era;

/// The versions served the 2026-07-28 way (per-request `_meta`).
pub const MODERN_VERSIONS: &[&str] = &[switchyard_mcp::era::MODERN_VERSION];

/// The 2025-era versions `initialize` is answered with, newest first (all
/// use Streamable HTTP); a client asking for another gets the first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// `serverInfo`: name `switchyard`, this build's version.
pub fn server_info() -> Value {
    static INFO: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
        json!({
            "name": "switchyard",
            "title": "Switchyard MCP gateway",
            "version": env!("CARGO_PKG_VERSION"),
        })
    });
    INFO.clone()
}

/// The server capabilities of every URL, for a client of `era`; tasks
/// (`super::tasks`) as each era declares them: 2025-11-25 `tasks` (list,
/// cancel, `tools/call`), 2026-07-28 the `io.modelcontextprotocol/tasks`
/// extension.
pub fn capabilities(era: Era) -> Value {
    let mut c = json!({
        "tools": {"listChanged": true},
        "resources": {"listChanged": true},
        "prompts": {"listChanged": true},
        "completions": {},
        "logging": {},
    });
    match era {
        Era::Legacy => {
            c["tasks"] = json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
        }
        Era::Modern => {
            c["extensions"] = json!({switchyard_mcp::meta::TASKS_EXTENSION: {}});
        }
    }
    c
}

/// The versions this endpoint speaks, newest first.
pub fn supported_versions() -> Vec<&'static str> {
    let mut v = MODERN_VERSIONS.to_vec();
    v.extend(LEGACY_VERSIONS);
    v
}

/// `instructions` for a client of `scope`.
pub fn instructions(scope: &Scope) -> String {
    match scope {
        Scope::All | Scope::Session(_) => format!(
            "Switchyard serves the tools, resources and prompts of several MCP servers. \
             Tool and prompt names are SERVER__NAME; resource URIs are {}SERVER/ \
             followed by the server's own URI.",
            super::names::SCHEME
        ),
        Scope::Server(name) => {
            format!("Switchyard serves MCP server {name} here, with its own names and URIs.")
        }
    }
}

/// The `DiscoverResult` (undecorated: [`super::respond::decorate`] adds
/// `resultType`, the cache hints and `serverInfo`).
pub fn discover(scope: &Scope) -> Value {
    json!({
        "supportedVersions": supported_versions(),
        "capabilities": capabilities(Era::Modern),
        "instructions": instructions(scope),
    })
}
