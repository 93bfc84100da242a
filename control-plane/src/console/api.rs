//! The console's JSON API (`/ui/api`, docs/console.md): one handler per
//! page action, each one call of the `AdminService` or `EngineService` the
//! CLI uses, made in-process as the logged-in admin ([`Admin::request`]),
//! answered in the CLI's `--json` shapes. Nothing here decides anything
//! the services decide; a refusal is the service's status
//! ([`super::respond`]).

use super::Console;
use super::login::{self, Admin};
use super::respond::ConsoleError;
use crate::api::json as shapes;
use crate::background::BackgroundRecord;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::admin_service_server::AdminService;
use switchyard_proto::v1::engine_service_server::EngineService;
use tonic::Code;

type Answer = Result<Json<Value>, ConsoleError>;

/// The routes under `/ui/api`.
pub fn routes() -> Router<Arc<Console>> {
    Router::new()
        .route("/session", get(login::session))
        .route("/login", post(login::login))
        .route("/logout", post(login::logout))
        .route("/servers", get(list_servers).post(add_server))
        .route(
            "/servers/{name}",
            get(server_status).put(update_server).delete(remove_server),
        )
        .route("/servers/{name}/authorize", post(authorize))
        .route("/servers/{name}/deauthorize", post(deauthorize))
        .route("/servers/{name}/tools", get(list_tools))
        .route(
            "/servers/{name}/tools/{tool}/hints",
            post(set_hints).delete(clear_hints),
        )
        .route(
            "/servers/{name}/tools/{tool}/policy",
            post(set_policy).delete(clear_policy),
        )
        .route("/sessions", get(list_sessions))
        .route("/interactions", get(list_interactions))
        .route("/interactions/{session}/{id}", post(answer))
        .route("/background", get(list_background))
        .route("/background/{id}/cancel", post(cancel_background))
        .route("/events", get(super::events::stream))
        .fallback(no_such_path)
}

/// Any path under `/ui/api` that is none of the above.
pub async fn no_such_path() -> ConsoleError {
    ConsoleError::new(Code::NotFound, "no such console API path")
}

/// The JSON body, a JSON object of the shape `T`; else a 400 naming what
/// is wrong with it and the member (413 over the body limit).
fn body<T: serde::de::DeserializeOwned>(
    b: Result<Json<Value>, JsonRejection>,
) -> Result<T, ConsoleError> {
    let v = b.map(|Json(v)| v).map_err(|e| {
        if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ConsoleError::too_large(e.body_text())
        } else {
            ConsoleError::bad_request(e.body_text())
        }
    })?;
    if !v.is_object() {
        return Err(ConsoleError::bad_request("the body must be a JSON object"));
    }
    super::respond::from_body(v)
}

async fn list_servers(State(c): State<Arc<Console>>, admin: Admin) -> Answer {
    let r = c
        .admin
        .list_servers(admin.request(pb::ListServersRequest {}))
        .await?
        .into_inner();
    let servers: Vec<_> = r.servers.iter().map(shapes::status_json).collect();
    Ok(Json(json!({"servers": servers})))
}

async fn server_status(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path(name): Path<String>,
) -> Answer {
    let s = c
        .admin
        .get_server_status(admin.request(pb::GetServerStatusRequest { name }))
        .await?
        .into_inner();
    Ok(Json(shapes::status_json(&s)))
}

/// A server as the page sends it (docs/console.md); unknown members are
/// refused, so a typo is not silently dropped.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct SpecBody {
    name: String,
    transport: String,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: String,
    url: String,
    headers: BTreeMap<String, String>,
    header_files: BTreeMap<String, String>,
    era: String,
    request_timeout_ms: u64,
    max_message_bytes: Option<u64>,
    liveness_interval_sec: Option<u64>,
    auth: String,
    oauth: Option<OAuthBody>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct OAuthBody {
    client_id: String,
    client_secret: String,
    scopes: Vec<String>,
    client_metadata_url: String,
    allow_unadvertised_pkce: bool,
}

impl SpecBody {
    fn into_pb(self) -> Result<pb::ServerSpec, ConsoleError> {
        let transport = match self.transport.as_str() {
            "stdio" => pb::Transport::Stdio,
            "http" => pb::Transport::Http,
            _ => {
                // Not repeated: a secret typed in the wrong place would be.
                return Err(ConsoleError::bad_request(
                    "transport: is not one of stdio, http".to_owned(),
                ));
            }
        };
        Ok(pb::ServerSpec {
            name: self.name,
            transport: transport as i32,
            command: self.command,
            args: self.args,
            env: self.env.into_iter().collect(),
            cwd: self.cwd,
            url: self.url,
            headers: self.headers.into_iter().collect(),
            era: self.era,
            request_timeout_ms: self.request_timeout_ms,
            max_message_bytes: self.max_message_bytes,
            liveness_interval_sec: self.liveness_interval_sec,
            auth: self.auth,
            header_files: self.header_files.into_iter().collect(),
            oauth: self.oauth.map(|o| pb::OAuthSettings {
                client_id: o.client_id,
                client_secret: o.client_secret,
                scopes: o.scopes,
                client_metadata_url: o.client_metadata_url,
                allow_unadvertised_pkce: o.allow_unadvertised_pkce,
                ..Default::default()
            }),
        })
    }
}

async fn add_server(
    State(c): State<Arc<Console>>,
    admin: Admin,
    spec: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let spec = body::<SpecBody>(spec)?.into_pb()?;
    let s = c
        .admin
        .add_server(admin.request(pb::AddServerRequest { spec: Some(spec) }))
        .await?
        .into_inner();
    Ok(Json(shapes::status_json(&s)))
}

async fn update_server(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path(name): Path<String>,
    spec: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let spec = body::<SpecBody>(spec)?.into_pb()?;
    if spec.name != name {
        return Err(ConsoleError::bad_request(format!(
            "name: {:?} is not the server {name:?} being updated (a server cannot be renamed; add a new one)",
            spec.name
        )));
    }
    let s = c
        .admin
        .update_server(admin.request(pb::UpdateServerRequest { spec: Some(spec) }))
        .await?
        .into_inner();
    Ok(Json(shapes::status_json(&s)))
}

async fn remove_server(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path(name): Path<String>,
) -> Answer {
    c.admin
        .remove_server(admin.request(pb::RemoveServerRequest { name }))
        .await?;
    Ok(Json(json!({})))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct AuthorizeBody {
    scopes: Vec<String>,
}

async fn authorize(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path(name): Path<String>,
    b: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let b: AuthorizeBody = body(b)?;
    let r = c
        .admin
        .authorize_server(admin.request(pb::AuthorizeServerRequest {
            name,
            scopes: b.scopes,
        }))
        .await?
        .into_inner();
    Ok(Json(json!({
        "authorizationUrl": r.authorization_url, "expiresAtMs": r.expires_at_ms,
        "scopes": r.scopes, "issuer": r.issuer, "registration": r.registration,
    })))
}

async fn deauthorize(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path(name): Path<String>,
) -> Answer {
    let s = c
        .admin
        .forget_server_authorization(admin.request(pb::ForgetServerAuthorizationRequest { name }))
        .await?
        .into_inner();
    Ok(Json(shapes::status_json(&s)))
}

/// A tool as `servers tools --json` shapes it, plus what the tools page
/// shows: the description engines see, the declared annotations and the
/// output-schema summary.
fn tool_json(t: &pb::ServerTool) -> Value {
    let mut v = shapes::server_tool_json(t);
    v["description"] = json!(t.description);
    v["annotations"] = shapes::parse_json_text(&t.annotations_json);
    v["outputSchemaSummary"] = json!(t.output_schema_summary);
    v
}

async fn list_tools(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path(server): Path<String>,
) -> Answer {
    let r = c
        .admin
        .list_server_tools(admin.request(pb::ListServerToolsRequest { server }))
        .await?
        .into_inner();
    let tools: Vec<_> = r.tools.iter().map(tool_json).collect();
    Ok(Json(json!({"tools": tools})))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct HintsBody {
    read_only_hint: Option<bool>,
    destructive_hint: Option<bool>,
    idempotent_hint: Option<bool>,
}

async fn set_hints(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path((server, tool)): Path<(String, String)>,
    b: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let b: HintsBody = body(b)?;
    let t = c
        .admin
        .set_tool_hints(admin.request(pb::SetToolHintsRequest {
            server,
            tool,
            read_only_hint: b.read_only_hint,
            destructive_hint: b.destructive_hint,
            idempotent_hint: b.idempotent_hint,
        }))
        .await?
        .into_inner();
    Ok(Json(tool_json(&t)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ClearHintsQuery {
    hint: Option<String>,
}

async fn clear_hints(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path((server, tool)): Path<(String, String)>,
    Query(q): Query<ClearHintsQuery>,
) -> Answer {
    // The page names hints as MCP does; the API as the proto does.
    let hints = match q.hint.as_deref() {
        None | Some("") => Vec::new(),
        Some("readOnlyHint") => vec!["read_only_hint".to_owned()],
        Some("destructiveHint") => vec!["destructive_hint".to_owned()],
        Some("idempotentHint") => vec!["idempotent_hint".to_owned()],
        Some(other) => {
            return Err(ConsoleError::bad_request(format!(
                "hint: {other:?} is not one of readOnlyHint, destructiveHint, idempotentHint"
            )));
        }
    };
    let t = c
        .admin
        .clear_tool_hints(admin.request(pb::ClearToolHintsRequest {
            server,
            tool,
            hints,
        }))
        .await?
        .into_inner();
    Ok(Json(tool_json(&t)))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct PolicyBody {
    policy: String,
    background: String,
}

async fn set_policy(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path((server, tool)): Path<(String, String)>,
    b: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let b: PolicyBody = body(b)?;
    let t = c
        .admin
        .set_tool_policy(admin.request(pb::SetToolPolicyRequest {
            server,
            tool,
            policy: b.policy,
            background: b.background,
        }))
        .await?
        .into_inner();
    Ok(Json(tool_json(&t)))
}

async fn clear_policy(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path((server, tool)): Path<(String, String)>,
) -> Answer {
    let t = c
        .admin
        .clear_tool_policy(admin.request(pb::ClearToolPolicyRequest { server, tool }))
        .await?
        .into_inner();
    Ok(Json(tool_json(&t)))
}

async fn list_sessions(State(c): State<Arc<Console>>, admin: Admin) -> Answer {
    let r = c
        .engine
        .list_sessions(admin.request(pb::ListSessionsRequest {}))
        .await?
        .into_inner();
    let snap = c.cp.state.snapshot();
    let sessions: Vec<_> = r
        .sessions
        .iter()
        .map(|s| {
            let mut v = shapes::session_json(s);
            let open = snap
                .interactions
                .get(&s.id)
                .map_or(0, |m| m.values().filter(|i| i.is_pending()).count());
            v["openInteractions"] = json!(open);
            v
        })
        .collect();
    Ok(Json(json!({"sessions": sessions})))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct InteractionsQuery {
    session: String,
    all: bool,
}

/// An interaction as `interactions list --json` shapes it, plus a form's
/// fields as the gateway reads `requestedSchema`.
fn interaction_json(i: &pb::Interaction) -> Value {
    let mut v = crate::interactions::pb_to_json(i);
    if i.kind == "form" {
        let schema = serde_json::from_str(&i.requested_schema_json).unwrap_or(Value::Null);
        v["fields"] = json!(crate::interactions::form::summarize_schema(&schema));
    }
    v
}

async fn list_interactions(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Query(q): Query<InteractionsQuery>,
) -> Answer {
    let every_session = q.session.is_empty();
    let sessions = if every_session {
        c.engine
            .list_sessions(admin.request(pb::ListSessionsRequest {}))
            .await?
            .into_inner()
            .sessions
            .into_iter()
            .map(|s| s.id)
            .collect()
    } else {
        vec![q.session]
    };
    let mut out = Vec::new();
    for session_id in sessions {
        match c
            .engine
            .list_interactions(admin.request(pb::ListInteractionsRequest {
                session_id,
                include_resolved: q.all,
            }))
            .await
        {
            Ok(r) => out.extend(r.into_inner().interactions.iter().map(interaction_json)),
            // A session deleted since it was listed.
            Err(s) if s.code() == Code::NotFound && every_session => {}
            Err(s) => return Err(s.into()),
        }
    }
    Ok(Json(json!({"interactions": out})))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct AnswerBody {
    action: String,
    content: Option<Value>,
}

async fn answer(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path((session_id, interaction_id)): Path<(String, String)>,
    b: Result<Json<Value>, JsonRejection>,
) -> Answer {
    let b: AnswerBody = body(b)?;
    let i = c
        .engine
        .answer_interaction(admin.request(pb::AnswerInteractionRequest {
            session_id,
            interaction_id,
            action: b.action,
            content_json: b.content.map(|v| v.to_string()).unwrap_or_default(),
        }))
        .await?
        .into_inner();
    Ok(Json(interaction_json(&i)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct BackgroundQuery {
    session: String,
    server: String,
    status: String,
    mode: String,
    finished: bool,
    page_size: u32,
    page_token: String,
}

impl Default for BackgroundQuery {
    fn default() -> Self {
        BackgroundQuery {
            session: String::new(),
            server: String::new(),
            status: String::new(),
            mode: String::new(),
            finished: false,
            page_size: 50,
            page_token: String::new(),
        }
    }
}

async fn list_background(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Query(q): Query<BackgroundQuery>,
) -> Answer {
    let r = c
        .admin
        .list_background_calls(admin.request(pb::ListBackgroundCallsRequest {
            session_id: q.session,
            include_finished: q.finished,
            page_size: q.page_size,
            page_token: q.page_token,
            server: q.server,
            status: q.status,
            mode: q.mode,
        }))
        .await?
        .into_inner();
    let calls: Vec<_> = r
        .calls
        .into_iter()
        .map(|c| BackgroundRecord::from_pb(c).to_json())
        .collect();
    Ok(Json(
        json!({"calls": calls, "nextPageToken": r.next_page_token}),
    ))
}

async fn cancel_background(
    State(c): State<Arc<Console>>,
    admin: Admin,
    Path(id): Path<String>,
) -> Answer {
    let call = c
        .engine
        .cancel_background_call(admin.request(pb::CancelBackgroundCallRequest {
            id,
            session_id: String::new(),
        }))
        .await?
        .into_inner();
    Ok(Json(BackgroundRecord::from_pb(call).to_json()))
}
