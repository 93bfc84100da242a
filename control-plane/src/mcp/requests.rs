//! The methods that reach a server, each through the engine API's path:
//! `tools/call` through the call pipeline ([`crate::call::run`]: policy,
//! approval, audit, metrics), and `resources/read`, `prompts/get`,
//! `completion/complete` through [`crate::call::request`]. Names and URIs
//! are mapped back to the server's first (on multi-server URLs), the
//! client's own params are forwarded (its `_meta` and unknown fields kept,
//! the protocol's `io.modelcontextprotocol/` keys left to the sidecar), and
//! the server's result comes back as MCP content, exactly as it came but
//! for namespaced URIs.
//!
//! A call runs in its own task: a client that goes away (its request's
//! connection closes) cancels it upstream, and it is still recorded.

use super::Ctx;
use super::ingress::Message;
use super::respond::McpError;
use super::{modern, names};
use crate::call::request::{self, Forward};
use crate::model::mcp_session::Scope;
use axum::http::HeaderMap;
use serde_json::{Map, Value};
use switchyard_mcp::era::Era;
use switchyard_proto::v1 as pb;
use tokio_util::sync::CancellationToken;

/// `params[key]` as a string. Errors: -32602 naming it.
fn string<'m>(msg: &'m Message, key: &str) -> Result<&'m str, McpError> {
    msg.params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params(format!("params.{key}: required, a string")))
}

/// The client's params as forwarded: every field but the protocol's own
/// `_meta` keys (the sidecar speaks to the server in the server's era) and
/// a multi round-trip retry's `inputResponses` and `requestState` (the
/// endpoint's own, `super::mrtr`).
fn forwarded(params: &Map<String, Value>) -> Map<String, Value> {
    params
        .iter()
        .filter_map(|(k, v)| match k.as_str() {
            "inputResponses" | "requestState" => None,
            // In its place.
            "_meta" => forwarded_meta(params).map(|m| (k.clone(), m)),
            _ => Some((k.clone(), v.clone())),
        })
        .collect()
}

/// The client's `_meta` as forwarded: less the protocol's own keys
/// (`io.modelcontextprotocol/`); `None` when nothing is left.
fn forwarded_meta(params: &Map<String, Value>) -> Option<Value> {
    match params.get("_meta")? {
        Value::Object(meta) => {
            let kept: Map<String, Value> = meta
                .iter()
                .filter(|(k, _)| !k.starts_with("io.modelcontextprotocol/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (!kept.is_empty()).then_some(Value::Object(kept))
        }
        other => Some(other.clone()),
    }
}

/// The `_meta` forwarded with a tool call, as JSON text (empty: none):
/// [`forwarded`]'s, without copying the rest of the params.
fn meta_json(params: &Map<String, Value>) -> String {
    forwarded_meta(params)
        .map(|m| m.to_string())
        .unwrap_or_default()
}

/// The members of a `tools/call`'s params that the call has no field of
/// its own for, as JSON text (empty: none): all but
/// [`crate::call::plan::RESERVED_PARAMS`]: `name`, `arguments`, `_meta`
/// (each in its field), `task` (the endpoint's own, `super::tasks`) and
/// the multi round-trip's `inputResponses` and `requestState` (`super::mrtr`).
fn other_params_json(params: &Map<String, Value>) -> String {
    let other: Map<String, Value> = params
        .iter()
        .filter(|(k, _)| !crate::call::plan::RESERVED_PARAMS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    match other.is_empty() {
        true => String::new(),
        false => Value::Object(other).to_string(),
    }
}

/// The `call_id` of the call a 2025-11-25 client made with JSON-RPC id
/// `id`: `mcp-` and 32 hex digits of a SHA-256 of the id's JSON text (`0`
/// and `"0"` differ), so that its `notifications/cancelled` finds the call
/// from any replica ([`cancel`]).
pub fn call_id_of(id: &Value) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(id.to_string().as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("mcp-{hex}")
}

/// `notifications/cancelled` of a 2025-11-25 client (`principal`: its
/// caller's name, empty when anonymous) in engine session `session`:
/// cancels the call it made with `params.requestId`, on
/// whichever replica runs it (the engine API's `CancelCall`). A request
/// that is not running, or not a tool call, is ignored.
pub async fn cancel(ep: &super::Endpoint, principal: &str, session: &str, msg: &Message) {
    let Some(id) = msg.params.get("requestId") else {
        return;
    };
    let call_id = call_id_of(id);
    if !ep.cp.router.cancel(session, &call_id)
        && let Err(e) = ep
            .cp
            .registry
            .request_cancel(principal, session, &call_id)
            .await
    {
        tracing::warn!(%session, error = %e, "could not pass on an MCP client's cancellation");
    }
}

/// `tools/call`.
pub async fn call_tool(ctx: &Ctx<'_>, h: &HeaderMap, msg: &Message) -> Result<Value, McpError> {
    let name = string(msg, "name")?;
    let none = Value::Object(Map::new());
    let arguments = match msg.params.get("arguments") {
        None | Some(Value::Null) => &none,
        Some(a @ Value::Object(_)) => a,
        Some(_) => {
            return Err(McpError::invalid_params(
                "params.arguments: must be an object",
            ));
        }
    };
    // 2025-11-25: `task` is a `TaskMetadata` (`ttl`: milliseconds).
    if ctx.era == Era::Legacy
        && let Some(task) = msg.params.get("task")
    {
        let ttl = task.get("ttl");
        if !task.is_object() {
            return Err(McpError::invalid_params(format!(
                "params.task: must be an object (TaskMetadata), not {}",
                switchyard_mcp::jsonrpc::kind_of(task)
            )));
        }
        if ttl.is_some_and(|t| !t.as_f64().is_some_and(|ms| ms >= 0.0)) {
            return Err(McpError::invalid_params(
                "params.task.ttl: must be a number of milliseconds, 0 or more",
            ));
        }
    }
    let snap = ctx.ep.cp.state.snapshot();
    let tool = match ctx.scope {
        Scope::Server(s) => snap.engine_name(s, name),
        _ => name.to_owned(),
    };
    if crate::resources::gateway::tool(&tool).is_some() {
        return Err(McpError::invalid_params(format!("unknown tool: {name:?}")));
    }
    // 2026-07-28: the headers that mirror annotated arguments.
    if ctx.era == Era::Modern
        && let Ok(target) = crate::call::resolve::resolve(&snap, &tool)
    {
        let schema = target.definition.get("inputSchema").unwrap_or(&Value::Null);
        modern::check_params(h, schema, arguments).map_err(|e| e.with_id(msg.id.as_ref()))?;
    }
    // A 2025-11-25 client may cancel it by its request id.
    let call_id = match (ctx.era, &msg.id) {
        (Era::Legacy, Some(id)) if !ctx.session_id.is_empty() => call_id_of(id),
        _ => String::new(),
    };
    let r = pb::CallToolRequest {
        session_id: ctx.session_id.clone(),
        run_id: ctx.run_id.clone(),
        call_id,
        tool,
        arguments_json: arguments.to_string(),
        meta_json: meta_json(&msg.params),
        other_params_json: other_params_json(&msg.params),
        // Without tasks, a client has no way to learn a background call's
        // result; with them, its call may become one (`super::tasks`).
        foreground: !ctx.tasks,
        background: ctx.tasks && super::tasks::wants_task(ctx.era, msg),
        move_when_task: ctx.tasks,
        client_capabilities_json: ctx.client.clone(),
        ..Default::default()
    };
    // Nested within what the call path takes (`call::plan`), said in the
    // client's terms.
    let max = switchyard_mcp::jsonrpc::MAX_DEPTH;
    for (field, text) in [
        ("params.arguments", &r.arguments_json),
        ("params._meta", &r.meta_json),
        (
            "params (a field other than name, arguments and _meta)",
            &r.other_params_json,
        ),
    ] {
        if switchyard_mcp::jsonrpc::depth(text.as_bytes()) > max {
            return Err(McpError::invalid_params(format!(
                "{field}: arrays and objects nest more than {max} levels deep"
            )));
        }
    }
    let cp = ctx.ep.cp.clone();
    let caller = ctx.caller.cloned();
    let cancelled = CancellationToken::new();
    let _client_gone = cancelled.clone().drop_guard();
    let (progress, log_level) = (ctx.progress.clone(), ctx.log_level);
    let resp = tokio::spawn(async move {
        crate::call::run(&cp, r, caller.as_ref(), cancelled, progress, log_level).await
    })
    .await
    .map_err(|e| {
        McpError::rpc(
            super::respond::INTERNAL_ERROR,
            format!("the call's task failed: {e}"),
        )
    })?
    .map_err(|e| McpError::from_call(e, ctx.era))?;
    // Moved to the background: the client's task.
    if let Some(bg) = &resp.background {
        return Ok(super::tasks::created(ctx.era, bg));
    }
    let mut result: Value = serde_json::from_str(&resp.result_json).map_err(|e| {
        McpError::rpc(
            super::respond::INTERNAL_ERROR,
            format!(
                "server {}: tools/call {name}: the result is not JSON: {e}",
                resp.server
            ),
        )
    })?;
    if ctx.multiplexed()
        && let Some(content) = result.get_mut("content").and_then(Value::as_array_mut)
    {
        names::namespace_content(&resp.server, content);
    }
    Ok(result)
}

/// The server and its URI for a `uri` the client gave.
fn resource_target(ctx: &Ctx<'_>, uri: &str) -> Result<(String, String), McpError> {
    match ctx.scope {
        Scope::Server(s) => Ok((s.clone(), uri.to_owned())),
        _ => names::original(uri)
            .map(|(s, u)| (s.to_owned(), u.to_owned()))
            .ok_or_else(|| {
                McpError::invalid_params(format!(
                    "resource not found: {uri:?} is not a URI this endpoint listed (they begin with {}SERVER/)",
                    names::SCHEME
                ))
            }),
    }
}

/// `resources/read`.
pub async fn read_resource(ctx: &Ctx<'_>, msg: &Message) -> Result<Value, McpError> {
    let uri = string(msg, "uri")?;
    let (server, upstream_uri) = resource_target(ctx, uri)?;
    let mut params = forwarded(&msg.params);
    params.insert("uri".into(), Value::String(upstream_uri.clone()));
    let r = pb::ReadResourceRequest {
        session_id: ctx.session_id.clone(),
        run_id: ctx.run_id.clone(),
        server: server.clone(),
        uri: upstream_uri,
        ..Default::default()
    };
    let resp = request::read_resource(
        &ctx.ep.cp,
        &r,
        ctx.caller,
        Forward::Raw(params, ctx.client.clone()),
    )
    .await
    .map_err(|e| McpError::from_call(e, ctx.era))?;
    let mut result = raw(&resp.result_json, &server, "resources/read")?;
    if ctx.multiplexed()
        && let Some(contents) = result.get_mut("contents").and_then(Value::as_array_mut)
    {
        for c in contents {
            if let Some(u) = c.get("uri").and_then(Value::as_str) {
                c["uri"] = Value::String(names::namespaced(&server, u));
            }
        }
    }
    Ok(result)
}

/// The server and its prompt for a `name` the client gave.
fn prompt_target(ctx: &Ctx<'_>, name: &str) -> Result<(String, String), McpError> {
    if let Scope::Server(s) = ctx.scope {
        return Ok((s.clone(), name.to_owned()));
    }
    let snap = ctx.ep.cp.state.snapshot();
    names::prompt_names(&snap)
        .names
        .get(name)
        .map(|r| (r.server.clone(), r.tool.clone()))
        .ok_or_else(|| McpError::invalid_params(format!("prompt not found: {name:?}")))
}

/// `prompts/get`.
pub async fn get_prompt(ctx: &Ctx<'_>, msg: &Message) -> Result<Value, McpError> {
    let name = string(msg, "name")?;
    let (server, prompt) = prompt_target(ctx, name)?;
    let mut params = forwarded(&msg.params);
    params.insert("name".into(), Value::String(prompt.clone()));
    let r = pb::GetPromptRequest {
        session_id: ctx.session_id.clone(),
        run_id: ctx.run_id.clone(),
        server: server.clone(),
        name: prompt,
        ..Default::default()
    };
    let resp = request::get_prompt(
        &ctx.ep.cp,
        &r,
        ctx.caller,
        Forward::Raw(params, ctx.client.clone()),
    )
    .await
    .map_err(|e| McpError::from_call(e, ctx.era))?;
    let mut result = raw(&resp.result_json, &server, "prompts/get")?;
    if ctx.multiplexed()
        && let Some(messages) = result.get_mut("messages").and_then(Value::as_array_mut)
    {
        for m in messages {
            if let Some(block) = m.get_mut("content") {
                names::namespace_content(&server, std::slice::from_mut(block));
            }
        }
    }
    Ok(result)
}

/// `completion/complete`.
pub async fn complete(ctx: &Ctx<'_>, msg: &Message) -> Result<Value, McpError> {
    let reference = msg
        .params
        .get("ref")
        .and_then(Value::as_object)
        .ok_or_else(|| McpError::invalid_params("params.ref: required, an object"))?;
    let ref_type = reference.get("type").and_then(Value::as_str).unwrap_or("");
    let (key, target) = match ref_type {
        "ref/prompt" => ("name", reference.get("name").and_then(Value::as_str)),
        "ref/resource" => ("uri", reference.get("uri").and_then(Value::as_str)),
        other => {
            return Err(McpError::invalid_params(format!(
                "params.ref.type: {other:?} is neither \"ref/prompt\" nor \"ref/resource\""
            )));
        }
    };
    let target = target
        .ok_or_else(|| McpError::invalid_params(format!("params.ref.{key}: required, a string")))?;
    let (server, upstream) = match ref_type {
        "ref/prompt" => prompt_target(ctx, target)?,
        _ => resource_target(ctx, target)?,
    };
    let argument = msg
        .params
        .get("argument")
        .and_then(Value::as_object)
        .ok_or_else(|| McpError::invalid_params("params.argument: required, an object"))?;
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
    let mut params = forwarded(&msg.params);
    params["ref"][key] = Value::String(upstream.clone());
    let context_arguments = msg
        .params
        .get("context")
        .and_then(|c| c.get("arguments"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let r = pb::CompleteRequest {
        session_id: ctx.session_id.clone(),
        server: server.clone(),
        ref_type: ref_type.to_owned(),
        name: upstream,
        argument: text(argument.get("name")),
        value: text(argument.get("value")),
        context_arguments,
    };
    let resp = request::complete(
        &ctx.ep.cp,
        &r,
        ctx.caller,
        Forward::Raw(params, ctx.client.clone()),
    )
    .await
    .map_err(|e| McpError::from_call(e, ctx.era))?;
    raw(&resp.result_json, &server, "completion/complete")
}

/// A server's raw result, parsed.
fn raw(json: &str, server: &str, method: &str) -> Result<Value, McpError> {
    serde_json::from_str(json).map_err(|e| {
        McpError::rpc(
            super::respond::INTERNAL_ERROR,
            format!("server {server}: {method}: the result is not JSON: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn call_ids_keep_the_id_type_apart() {
        let (a, b) = (call_id_of(&json!(0)), call_id_of(&json!("0")));
        assert_ne!(a, b);
        assert_eq!(a, call_id_of(&json!(0)));
        assert!(a.starts_with("mcp-") && a.len() == 36, "{a}");
        crate::model::check_id("call_id", &a).unwrap();
    }

    #[test]
    fn protocol_meta_stays_and_the_rest_is_forwarded() {
        let params = json!({
            "name": "t", "x": [1],
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "progressToken": 7, "traceparent": "00-ab"
            }
        });
        let f = forwarded(params.as_object().unwrap());
        assert_eq!(
            Value::Object(f),
            json!({"name": "t", "x": [1], "_meta": {"progressToken": 7, "traceparent": "00-ab"}})
        );
        let only_protocol = json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "v"}});
        assert_eq!(meta_json(only_protocol.as_object().unwrap()), "");
    }
}
