//! How the MCP endpoint names what several servers offer on one URL
//! (`/mcp`, `/mcp/sessions/ID`); `/mcp/servers/NAME` keeps every name as
//! the server gave it.
//!
//! - Tools: the engine-visible names of the gRPC API (`server__tool`,
//!   [`crate::names`]).
//! - Prompts: the same rule, `server__prompt`, computed over every
//!   server's prompts at once ([`prompt_names`]).
//! - Resource URIs and URI templates: `switchyard://SERVER/` followed by
//!   the server's URI, byte-exact ([`namespaced`]). Server names are
//!   `[A-Za-z0-9_-]`, valid in an authority and never holding `/`, so the
//!   mapping is one-to-one and reverses by cutting at the first `/` after
//!   the authority ([`original`]). A template stays a template: its
//!   variables are in the server's part, which is kept as it is.

use crate::names::NameMap;
use crate::state::Snapshot;
use serde_json::Value;

/// The scheme and authority prefix of a namespaced URI.
pub const SCHEME: &str = "switchyard://";

/// The namespaced form of `uri` of `server`.
pub fn namespaced(server: &str, uri: &str) -> String {
    format!("{SCHEME}{server}/{uri}")
}

/// The server and its URI behind a namespaced URI; `None` when `uri` is
/// not one.
pub fn original(uri: &str) -> Option<(&str, &str)> {
    let rest = uri.strip_prefix(SCHEME)?;
    let (server, original) = rest.split_once('/')?;
    switchyard_common::server_spec::valid_server_name(server).then_some((server, original))
}

/// The names of every server's prompts, as tools are named: deterministic
/// for the set, whatever the servers' order.
pub fn prompt_names(snap: &Snapshot) -> NameMap {
    NameMap::build(snap.resource_catalogues.iter().flat_map(|(server, cat)| {
        cat.prompts
            .iter()
            .filter_map(|p| p.get("name").and_then(Value::as_str))
            .map(move |p| (server.as_str(), p))
    }))
}

/// Rewrites the URIs in content blocks of `server` (`resource_link`
/// blocks, and embedded `resource` blocks) into their namespaced form, so
/// that a client can read them here. Other blocks, and every other field,
/// are left as they are.
pub fn namespace_content(server: &str, blocks: &mut [Value]) {
    for block in blocks {
        let target = match block.get("type").and_then(Value::as_str) {
            Some("resource_link") => block.get_mut("uri"),
            Some("resource") => block.get_mut("resource").and_then(|r| r.get_mut("uri")),
            _ => None,
        };
        if let Some(uri) = target
            && let Some(s) = uri.as_str()
        {
            *uri = Value::String(namespaced(server, s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn uris_round_trip_byte_exact() {
        for (server, uri) in [
            ("docs", "file:///a/../b%20c?q=é#frag"),
            ("my_server-2", "https://example.com/x"),
            ("s", "test://template/{id}/data"),
            ("s", "no-scheme/relative"),
            ("s", ""),
        ] {
            let n = namespaced(server, uri);
            assert!(n.starts_with("switchyard://"), "{n}");
            assert_eq!(original(&n), Some((server, uri)));
        }
        assert_eq!(original("file:///x"), None);
        assert_eq!(original("switchyard://no-slash"), None);
        assert_eq!(original("switchyard://bad.name/x"), None);
    }

    #[test]
    fn content_uris_are_namespaced() {
        let mut blocks = vec![
            json!({"type": "text", "text": "switchyard://x/y"}),
            json!({"type": "resource_link", "uri": "file:///a", "name": "a", "_meta": {"k": 1}}),
            json!({"type": "resource", "resource": {"uri": "mem://b", "text": "b"}}),
        ];
        namespace_content("s1", &mut blocks);
        assert_eq!(blocks[0]["text"], "switchyard://x/y");
        assert_eq!(blocks[1]["uri"], "switchyard://s1/file:///a");
        assert_eq!(blocks[1]["_meta"]["k"], 1);
        assert_eq!(blocks[2]["resource"]["uri"], "switchyard://s1/mem://b");
    }
}
