//! Step 2 of the call path: the engine's tool name to a server, the
//! upstream tool's name and its definition, in this replica's read model;
//! or to a gateway tool of stage E (`mcp_resources`, `mcp_resource_read`),
//! whose server is in its arguments.

use super::error::CallError;
use crate::names::ToolRef;
use crate::resources::gateway::{self, GatewayTool};
use crate::state::Snapshot;
use serde_json::Value;

/// A resolved tool: the server, the tool's upstream name, its definition
/// exactly as the server listed it (borrowed from the snapshot).
#[derive(Debug, Clone)]
pub struct Target<'s> {
    /// The server.
    pub server: String,
    /// The tool's name on the server.
    pub tool: String,
    /// The definition from the server's catalogue.
    pub definition: &'s Value,
    /// A gateway tool (stage E) and its arguments; `server` is the one
    /// they name (empty for a listing of every server).
    pub gateway: Option<(GatewayTool, gateway::Arguments)>,
}

/// Resolves a gateway tool's call: its arguments (`arguments_json`) say
/// the server. Errors: INVALID_ARGUMENT naming the argument, NOT_FOUND (an
/// unknown server).
pub fn resolve_gateway<'s>(
    snap: &'s Snapshot,
    tool: GatewayTool,
    arguments_json: &str,
) -> Result<Target<'s>, CallError> {
    let args = gateway::arguments(tool, arguments_json).map_err(CallError::invalid_argument)?;
    if !args.server.is_empty() && !snap.servers.contains_key(&args.server) {
        return Err(CallError::not_found(format!(
            "{}: server {:?} not found",
            tool.name(),
            args.server
        )));
    }
    Ok(Target {
        server: args.server.clone(),
        tool: tool.name().to_owned(),
        definition: tool.definition(),
        gateway: Some((tool, args)),
    })
}

/// Resolves `engine_tool` (`server__tool` style, see `names`).
/// Errors: NOT_FOUND (no such tool, its server was removed, or the server
/// no longer has it), UNAVAILABLE (the server has no catalogue yet).
pub fn resolve<'s>(snap: &'s Snapshot, engine_tool: &str) -> Result<Target<'s>, CallError> {
    let target = match snap.resolve(engine_tool) {
        Some(t) => t.clone(),
        // The name map may lag a new catalogue by a moment.
        None => snap
            .catalogues
            .iter()
            .flat_map(|(server, cat)| {
                cat.tools
                    .iter()
                    .filter_map(|d| d.get("name").and_then(Value::as_str))
                    .map(move |t| (server, t))
            })
            .find(|(server, t)| snap.engine_name(server, t) == engine_tool)
            .map(|(server, t)| ToolRef {
                server: server.clone(),
                tool: t.to_owned(),
            })
            .ok_or_else(|| not_listed(snap, engine_tool))?,
    };
    let server = target.server.as_str();
    if !snap.servers.contains_key(server) {
        return Err(CallError::not_found(format!(
            "tool not found: {engine_tool:?} (server {server} was removed)"
        )));
    }
    let Some(cat) = snap.catalogues.get(server) else {
        return Err(CallError::server_unavailable(server, "no catalogue yet"));
    };
    let Some(def) = cat.tools.iter().find(|t| t["name"] == target.tool.as_str()) else {
        return Err(CallError::not_found(format!(
            "tool not found: {engine_tool:?} (server {server} no longer has a tool {:?})",
            target.tool
        )));
    };
    Ok(Target {
        definition: def,
        server: target.server,
        tool: target.tool,
        gateway: None,
    })
}

/// The error for a tool name no catalogue lists: "tool not found", and, when
/// it names an `auth = "oauth"` server that has no catalogue yet (never
/// authorized), that the server needs an admin's authorization first.
fn not_listed(snap: &Snapshot, engine_tool: &str) -> CallError {
    let waiting = snap.servers.values().find(|r| {
        r.spec.auth_kind() == switchyard_common::server_spec::AuthKind::OAuth
            && !snap.catalogues.contains_key(&r.spec.name)
            && engine_tool
                .strip_prefix(r.spec.name.as_str())
                .is_some_and(|rest| rest.starts_with("__"))
    });
    match waiting {
        Some(r) => CallError::not_found(format!(
            "tool not found: {engine_tool:?} (server {name} lists no tools yet: it needs authorization by an admin: switchyard servers authorize {name})",
            name = r.spec.name
        )),
        None => CallError::not_found(format!("tool not found: {engine_tool:?}")),
    }
}
