//! JSON: the shapes the CLI's `--json` prints and the admin console's API
//! answers (camelCase keys, in this order). Users script against them, so
//! a key is never renamed or dropped: a tool an engine sees, a server's
//! status, a server's tool, a session, an event, a call moved to the
//! background.

use crate::background::BackgroundRecord;
use serde_json::{Value, json};
use switchyard_proto::v1 as pb;

/// JSON text the control plane sent, parsed; `null` if it is not JSON
/// (or empty).
pub fn parse_json_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// The four MCP hints, as `readOnlyHint`, `destructiveHint`,
/// `idempotentHint`, `openWorldHint` (values, or where each comes from).
fn hints<T: serde::Serialize>(read_only: T, destructive: T, idempotent: T, open_world: T) -> Value {
    json!({"readOnlyHint": read_only, "destructiveHint": destructive,
           "idempotentHint": idempotent, "openWorldHint": open_world})
}

/// A tool of `switchyard tools --json`.
pub fn tool_json(t: &pb::Tool) -> Value {
    let h = t.hints.unwrap_or_default();
    json!({
        "name": t.name, "server": t.server, "upstreamName": t.upstream_name,
        "title": t.title, "description": t.description,
        "inputSchema": parse_json_text(&t.input_schema_json),
        "hints": hints(h.read_only_hint, h.destructive_hint, h.idempotent_hint, h.open_world_hint),
    })
}

/// A server of `switchyard servers list --json` (and `servers status`).
pub fn status_json(s: &pb::ServerStatus) -> Value {
    let spec = s.spec.clone().unwrap_or_default();
    json!({
        "name": spec.name,
        "transport": if spec.transport == pb::Transport::Http as i32 { "http" } else { "stdio" },
        "state": s.state,
        "toolCount": s.tool_count,
        "toolsUpdatedAtMs": s.tools_updated_at_ms,
        "resourceCount": s.resource_count,
        "resourceTemplateCount": s.resource_template_count,
        "promptCount": s.prompt_count,
        "protocolVersion": s.protocol_version,
        "serverInfo": parse_json_text(&s.server_info_json),
        "sidecars": s.sidecars.iter().map(|c| json!({
            "sidecarId": c.sidecar_id, "callAddress": c.call_address, "upstreamState": c.upstream_state,
            "lastError": c.last_error, "registeredAtMs": c.registered_at_ms,
        })).collect::<Vec<_>>(),
        "nameCollisions": s.name_collisions,
        "launchError": s.launch_error,
        // What the server was configured with, as the API answers it
        // (secret-looking values `[redacted]`; header_files: paths).
        "url": spec.url,
        "command": spec.command,
        "args": spec.args,
        "era": spec.era,
        "env": spec.env.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "cwd": spec.cwd,
        "requestTimeoutMs": spec.request_timeout_ms,
        "maxMessageBytes": spec.max_message_bytes,
        "livenessIntervalSec": spec.liveness_interval_sec,
        "auth": spec.auth,
        "headers": spec.headers.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "headerFiles": spec.header_files.iter().collect::<std::collections::BTreeMap<_, _>>(),
        "oauth": s.oauth.as_ref().map(|o| json!({
            "state": o.state, "reason": o.reason, "issuer": o.issuer, "scopes": o.scopes,
            "stepUpScopes": o.step_up_scopes,
            "expiresAtMs": o.expires_at_ms, "authorizedAtMs": o.authorized_at_ms,
            "refreshedAtMs": o.refreshed_at_ms, "refreshable": o.refreshable,
            "generation": o.generation,
        })),
        "oauthSettings": spec.oauth.as_ref().map(|o| json!({
            "clientId": o.client_id, "clientSecretFile": o.client_secret_file,
            "hasClientSecret": o.has_client_secret, "scopes": o.scopes,
            "clientMetadataUrl": o.client_metadata_url,
            "allowUnadvertisedPkce": o.allow_unadvertised_pkce,
        })),
    })
}

/// A tool of `switchyard servers tools --json`: effective hints, where each
/// comes from, and the policy.
pub fn server_tool_json(t: &pb::ServerTool) -> Value {
    let h = t.hints.unwrap_or_default();
    let src = t.hint_sources.clone().unwrap_or_default();
    json!({
        "name": t.name, "upstreamName": t.upstream_name, "title": t.title,
        "hints": hints(h.read_only_hint, h.destructive_hint, h.idempotent_hint, h.open_world_hint),
        "hintSources": hints(src.read_only_hint, src.destructive_hint, src.idempotent_hint, src.open_world_hint),
        "policy": t.policy, "policySet": t.policy_set, "inCatalogue": t.in_catalogue,
        "background": t.background,
    })
}

/// A permission mode as the CLI spells it: `ask`, `auto` or `read_only`
/// (an unknown value reads as `ask`).
pub fn mode_name(permission_mode: i32) -> &'static str {
    match pb::PermissionMode::try_from(permission_mode) {
        Ok(pb::PermissionMode::Auto) => "auto",
        Ok(pb::PermissionMode::ReadOnly) => "read_only",
        _ => "ask",
    }
}

/// A session (`owner` only when it has one).
pub fn session_json(s: &pb::Session) -> Value {
    let mut v = json!({
        "id": s.id, "enabledServers": s.enabled_servers, "permissionMode": mode_name(s.permission_mode),
        "roots": s.roots.iter().map(|r| json!({"uri": r.uri, "name": r.name})).collect::<Vec<_>>(),
        "createdAtMs": s.created_at_ms, "updatedAtMs": s.updated_at_ms,
    });
    if !s.owner.is_empty() {
        v["owner"] = json!(s.owner);
    }
    v
}

/// One line of `switchyard events --json`.
pub fn event_json(ev: &pb::SessionEvent) -> Value {
    json!({"type": ev.r#type, "sessionId": ev.session_id, "atMs": ev.at_ms, "data": parse_json_text(&ev.data_json)})
}

/// `switchyard call --json` when the call moved to the background: the
/// record (its result comes later, see `switchyard events` / `background
/// list`) and the text the model reads.
pub fn moved_json(bg: &pb::BackgroundCall, text: &str) -> Value {
    let rec = BackgroundRecord::from_pb(bg.clone());
    json!({"movedToBackground": rec.to_json(), "text": text})
}
