//! The list methods, answered from this replica's read model as the engine
//! API's listings are: `tools/list` (the tools the caller's session may
//! see, with the same names, effective hints and description summaries,
//! without `outputSchema`), and `resources/list`,
//! `resources/templates/list`, `prompts/list` (every entry as the server
//! listed it, `_meta` and unknown fields kept, names and URIs namespaced on
//! multi-server URLs).
//!
//! `tools/list` answers one page. The others page across servers, in
//! server-name order, [`PAGE`] entries at a time, with the engine API's
//! opaque cursors ([`crate::resources::page`]); every page of every
//! server is reachable. A cursor this endpoint did not give is -32602.

use super::Ctx;
use super::ingress::Message;
use super::names;
use super::respond::McpError;
use crate::call::request;
use crate::model::mcp_session::Scope;
use crate::names::NameMap;
use crate::resources::page::{self, Position, Source};
use serde_json::{Map, Value, json};

/// Entries per page of the paged lists.
pub const PAGE: usize = 100;

/// `params.cursor`: absent, or a position this endpoint gave. Errors:
/// -32602.
fn cursor(msg: &Message) -> Result<Option<Position>, McpError> {
    match msg.params.get("cursor") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(c)) => Position::decode(c, 1)
            .map(Some)
            .map_err(McpError::invalid_params),
        Some(_) => Err(McpError::invalid_params("params.cursor: must be a string")),
    }
}

/// `tools/list`.
pub async fn tools(ctx: &Ctx<'_>, msg: &Message) -> Result<Value, McpError> {
    if msg.params.get("cursor").is_some_and(|c| !c.is_null()) {
        return Err(McpError::invalid_params(
            "params.cursor: tools/list has one page here; no cursor was given",
        ));
    }
    let session = ctx.session().await?;
    let snap = ctx.ep.cp.state.snapshot();
    let (listed, _) = crate::tools::tools_for(&snap, session.as_ref());
    let mut tools: Vec<(String, Value)> = listed
        .into_iter()
        // The gateway tools are for engines without resources; MCP clients
        // have resources/list and resources/read.
        .filter(|t| !t.server.is_empty())
        .filter_map(|t| {
            let name = match ctx.scope {
                Scope::Server(s) if *s != t.server => return None,
                Scope::Server(_) => t.upstream_name,
                _ => t.name,
            };
            let mut def: Value = serde_json::from_str(&t.definition_json).ok()?;
            def["name"] = Value::String(name.clone());
            if !t.description.is_empty() {
                def["description"] = Value::String(t.description);
            }
            // A 2025-11-25 client that declared tasks may run any tool as
            // one (a background call); "required" stays required.
            if ctx.tasks && ctx.era == switchyard_mcp::era::Era::Legacy {
                let required = def.pointer("/execution/taskSupport") == Some(&json!("required"));
                if !required {
                    def["execution"]["taskSupport"] = json!("optional");
                }
            }
            Some((name, def))
        })
        .collect();
    // Deterministic order (2026-07-28 server/tools).
    tools.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(json!({"tools": tools.into_iter().map(|(_, d)| d).collect::<Vec<_>>()}))
}

/// Which list of a server's stage E catalogue a method pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// `resources/list`.
    Resources,
    /// `resources/templates/list`.
    Templates,
    /// `prompts/list`.
    Prompts,
}

impl Listing {
    /// The result's array key.
    fn key(self) -> &'static str {
        match self {
            Listing::Resources => "resources",
            Listing::Templates => "resourceTemplates",
            Listing::Prompts => "prompts",
        }
    }
}

/// `resources/list`, `resources/templates/list` or `prompts/list`.
pub async fn paged(ctx: &Ctx<'_>, msg: &Message, listing: Listing) -> Result<Value, McpError> {
    let from = cursor(msg)?;
    let session = ctx.session().await?;
    let snap = ctx.ep.cp.state.snapshot();
    let only = match ctx.scope {
        Scope::Server(s) => s.as_str(),
        _ => "",
    };
    let (servers, _) = request::listed_servers(&snap, session.as_ref(), only)
        .map_err(|e| McpError::from_call(e, ctx.era))?;
    let sources = servers
        .iter()
        .filter_map(|s| {
            let cat = snap.resource_catalogues.get(s)?;
            let list = match listing {
                Listing::Resources => cat.resources.as_slice(),
                Listing::Templates => cat.resource_templates.as_slice(),
                Listing::Prompts => cat.prompts.as_slice(),
            };
            Some(Source {
                server: s,
                lists: vec![list],
            })
        })
        .collect();
    let (entries, next) = page::page(sources, from.as_ref(), PAGE);
    let prompt_names =
        (listing == Listing::Prompts && ctx.multiplexed()).then(|| names::prompt_names(&snap));
    let items: Vec<Value> = entries
        .into_iter()
        .map(|(server, _, entry)| entry_for(ctx, listing, server, entry, prompt_names.as_ref()))
        .collect();
    let mut out = Value::Object(Map::from_iter([(
        listing.key().to_owned(),
        Value::Array(items),
    )]));
    if let Some(next) = next {
        out["nextCursor"] = Value::String(next.encode());
    }
    Ok(out)
}

/// One entry as this URL shows it: as listed, with its URI, URI template
/// or prompt name namespaced on a multi-server URL.
fn entry_for(
    ctx: &Ctx<'_>,
    listing: Listing,
    server: &str,
    entry: &Value,
    prompt_names: Option<&NameMap>,
) -> Value {
    let mut e = entry.clone();
    if !ctx.multiplexed() {
        return e;
    }
    let key = match listing {
        Listing::Resources => "uri",
        Listing::Templates => "uriTemplate",
        Listing::Prompts => "name",
    };
    let Some(v) = e.get(key).and_then(Value::as_str) else {
        return e;
    };
    let renamed = match listing {
        Listing::Prompts => prompt_names
            .and_then(|m| m.name_of(server, v))
            .map_or_else(|| crate::names::plain_name(server, v), str::to_owned),
        _ => names::namespaced(server, v),
    };
    e[key] = Value::String(renamed);
    e
}
