//! Engine-visible tool names.
//!
//! A tool `T` of server `S` is offered to engines as `S__T`, sanitised to
//! `[A-Za-z0-9_-]` (every other character becomes `_`) and at most 64
//! characters; a longer name keeps its first 55 characters and gets `_`
//! plus 8 hex digits of a SHA-256 of `S`, NUL, `T`. The mapping is computed
//! from the whole set of catalogues at once, so it never depends on the
//! order in which servers connected. When two tools would get the same
//! name (e.g. `a.b` and `a_b`, or server `x__y` tool `z` and server `x`
//! tool `y__z`), every one of them gets the hash suffix instead, and the
//! collision is reported. Names are mapped back only through the stored
//! reverse map, never by splitting on `__`.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Longest engine-visible name (many model APIs cap tool names at 64).
pub const MAX_NAME: usize = 64;
const SUFFIX_LEN: usize = 9; // "_" + 8 hex digits

/// Where an engine-visible name leads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ToolRef {
    /// Server name.
    pub server: String,
    /// The tool's name on the server, exactly.
    pub tool: String,
}

/// The computed mapping.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameMap {
    /// Engine-visible name -> tool.
    pub names: BTreeMap<String, ToolRef>,
    /// Human-readable collision reports (each names the tools involved).
    pub collisions: Vec<String>,
}

impl NameMap {
    /// Computes names for every `(server, tool)` pair. Deterministic: the
    /// same set gives the same map, whatever the input order.
    pub fn build<'a>(tools: impl IntoIterator<Item = (&'a str, &'a str)>) -> NameMap {
        let mut wanted: BTreeMap<String, Vec<ToolRef>> = BTreeMap::new();
        for (server, tool) in tools {
            let r = ToolRef {
                server: server.to_owned(),
                tool: tool.to_owned(),
            };
            wanted.entry(plain_name(server, tool)).or_default().push(r);
        }
        let mut map = NameMap::default();
        for (name, mut refs) in wanted {
            refs.sort();
            refs.dedup();
            if refs.len() == 1 {
                map.names.insert(name, refs.pop().expect("one"));
                continue;
            }
            let who: Vec<String> = refs
                .iter()
                .map(|r| format!("{}/{}", r.server, r.tool))
                .collect();
            map.collisions.push(format!(
                "tools {} all map to {name:?}; each gets a hash suffix",
                who.join(", ")
            ));
            for r in refs {
                map.names.insert(hashed_name(&r.server, &r.tool), r);
            }
        }
        map
    }

    /// The engine-visible name of a tool, if it is mapped.
    pub fn name_of(&self, server: &str, tool: &str) -> Option<&str> {
        self.names
            .iter()
            .find(|(_, r)| r.server == server && r.tool == tool)
            .map(|(n, _)| n.as_str())
    }

    /// Collision reports that involve `server`.
    pub fn collisions_of(&self, server: &str) -> Vec<String> {
        let needle = format!("{server}/");
        self.collisions
            .iter()
            .filter(|c| c.contains(&needle))
            .cloned()
            .collect()
    }
}

fn sanitise(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `server__tool`, sanitised, shortened with a hash suffix past 64 chars.
pub fn plain_name(server: &str, tool: &str) -> String {
    let full = format!("{}__{}", sanitise(server), sanitise(tool));
    if full.len() <= MAX_NAME {
        full
    } else {
        hashed_name(server, tool)
    }
}

/// The name with a stable hash suffix, at most 64 characters.
pub fn hashed_name(server: &str, tool: &str) -> String {
    let full = format!("{}__{}", sanitise(server), sanitise(tool));
    let mut h = Sha256::new();
    h.update(server.as_bytes());
    h.update([0u8]);
    h.update(tool.as_bytes());
    let digest = h.finalize();
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let keep = full.len().min(MAX_NAME - SUFFIX_LEN);
    format!("{}_{hex}", &full[..keep])
}

#[cfg(test)]
mod tests;
