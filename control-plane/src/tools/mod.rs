//! Stage A, tools: how the control plane decides about a server's tools
//! and shows them to engines. Effective hints and policies
//! ([`crate::tools::policy`]), the view of one tool for a session ([`ToolView`]),
//! the definition an engine gets (no `outputSchema`, overridden hints in
//! `annotations`, the output summary in the description), and a session's
//! tool list ([`tools_for`]).

pub mod policy;
pub mod schema_summary;

use crate::model::{PermissionMode, SessionRecord, ToolPolicy};
use crate::state::Snapshot;
use crate::tools::policy::{Decision, EffectiveHints, HintSource, decide, effective_policy};
use serde_json::{Value, json};
use switchyard_proto::v1 as pb;

/// A tool's display name: `title`, else `annotations.title`, else its name.
pub fn title_of(def: &Value) -> &str {
    def.get("title")
        .or_else(|| def["annotations"].get("title"))
        .and_then(Value::as_str)
        .or_else(|| def.get("name").and_then(Value::as_str))
        .unwrap_or("")
}

/// The permission mode a call or listing is decided in: the session's, or
/// `auto` without one (see [`crate::tools::policy`]).
pub fn mode_of(session: Option<&SessionRecord>) -> PermissionMode {
    session.map_or(PermissionMode::Auto, |s| s.permission_mode)
}

/// A tool of `server` as the control plane decides about it: effective
/// hints, policy, and the decision for a session in `mode`.
#[derive(Debug, Clone, Copy)]
pub struct ToolView {
    /// Effective hints.
    pub hints: EffectiveHints,
    /// Effective policy.
    pub policy: ToolPolicy,
    /// The decision.
    pub decision: Decision,
}

/// The view of `def` (a tool of `server`) for a session in `mode`.
pub fn tool_view(snap: &Snapshot, server: &str, def: &Value, mode: PermissionMode) -> ToolView {
    let tool = def.get("name").and_then(Value::as_str).unwrap_or("");
    let hints = policy::effective_hints(
        def,
        snap.hint_overrides
            .get(&(server.to_owned(), tool.to_owned())),
    );
    let policy = effective_policy(snap.policy_set(server, tool), &hints);
    ToolView {
        hints,
        policy,
        decision: decide(mode, policy, hints.read_only.value),
    }
}

/// The definition an engine gets: without `outputSchema` (summarised in
/// the description instead), with overridden hints in `annotations`.
pub fn engine_definition(def: &Value, hints: &EffectiveHints) -> Value {
    let mut def = def.clone();
    if let Some(m) = def.as_object_mut() {
        m.remove("outputSchema");
    }
    for (key, hint) in [
        ("readOnlyHint", hints.read_only),
        ("destructiveHint", hints.destructive),
        ("idempotentHint", hints.idempotent),
    ] {
        if hint.source == HintSource::Override {
            if !def["annotations"].is_object() {
                def["annotations"] = json!({});
            }
            def["annotations"][key] = Value::Bool(hint.value);
        }
    }
    def
}

/// The tools a session may see, with engine-visible names.
pub fn tools_for(snap: &Snapshot, session: Option<&SessionRecord>) -> (Vec<pb::Tool>, Vec<String>) {
    let mut tools = Vec::new();
    let mut unavailable = Vec::new();
    let mode = mode_of(session);
    for name in snap.servers.keys() {
        if session.is_some_and(|s| !s.enables(name)) {
            continue;
        }
        let live = snap.connected(name);
        let Some(cat) = snap.catalogues.get(name).filter(|_| live) else {
            unavailable.push(name.clone());
            continue;
        };
        for def in &cat.tools {
            let Some(upstream) = def.get("name").and_then(Value::as_str) else {
                continue;
            };
            let view = tool_view(snap, name, def, mode);
            if !view.decision.offered() {
                continue;
            }
            tools.push(pb::Tool {
                name: snap.engine_name(name, upstream),
                server: name.clone(),
                upstream_name: upstream.to_owned(),
                title: title_of(def).to_owned(),
                description: crate::tools::schema_summary::describe(
                    def.get("description").and_then(Value::as_str).unwrap_or(""),
                    def.get("outputSchema"),
                ),
                input_schema_json: def
                    .get("inputSchema")
                    .map(Value::to_string)
                    .unwrap_or_default(),
                hints: Some(view.hints.to_pb()),
                definition_json: engine_definition(def, &view.hints).to_string(),
            });
        }
    }
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools.extend(gateway_tools(snap, session));
    (tools, unavailable)
}

/// The gateway tools of stage E ([`crate::resources::gateway`]), when one
/// of the servers the session may use (enabled, live, catalogued) declares
/// resources or lists some; each as its policy and the session's mode
/// decide (they are read-only, so read-only sessions get them).
fn gateway_tools(snap: &Snapshot, session: Option<&SessionRecord>) -> Vec<pb::Tool> {
    use crate::resources::gateway::GatewayTool;
    let has_resources = snap.servers.keys().any(|name| {
        let enabled = session.is_none_or(|s| s.enables(name));
        let live = snap.connected(name);
        enabled && live && crate::resources::has_resources(snap, name)
    });
    if !has_resources {
        return Vec::new();
    }
    let mode = mode_of(session);
    GatewayTool::ALL
        .into_iter()
        .filter_map(|tool| {
            let def = tool.definition();
            // The tool as offered in general (no server: its policy is set
            // per server and applied per call).
            let view = tool_view(snap, "", def, mode);
            view.decision.offered().then(|| pb::Tool {
                name: tool.name().to_owned(),
                server: String::new(),
                upstream_name: tool.name().to_owned(),
                title: title_of(def).to_owned(),
                description: def["description"].as_str().unwrap_or("").to_owned(),
                input_schema_json: def["inputSchema"].to_string(),
                hints: Some(view.hints.to_pb()),
                definition_json: engine_definition(def, &view.hints).to_string(),
            })
        })
        .collect()
}
