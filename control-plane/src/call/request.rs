//! An engine's other requests to servers (stage E): listing resources and
//! prompts (answered from the read model), and `resources/read`,
//! `prompts/get` and `completion/complete` (sent to a live sidecar of the
//! server). Each runs the same steps as a tool call, where they apply:
//!
//! 1. read your writes, and the caller's own session ([`super::admit`]);
//! 2. scope: the server exists and the session enables it;
//! 3. route: one deadline (the request's `timeout_ms`, else
//!    `control_plane.call_timeout_sec`), a live sidecar
//!    ([`super::route::Router::request`]);
//! 4. record: [`super::record::ContentRequested`] (log line, metrics,
//!    audit).
//!
//! The gateway tools `mcp_resources` and `mcp_resource_read`
//! ([`crate::resources::gateway`]) are tool calls: [`super::run`] takes
//! them through resolve, admit, approve and record like any tool and
//! answers them here ([`gateway`](fn@gateway)).

use super::admit;
use super::error::{CallError, Kind};
use super::record::ContentRequested;
use super::route::SidecarClient;
use super::{ANSWER_GRACE, CATCH_UP_LIMIT};
use crate::ControlPlane;
use crate::auth::Caller;
use crate::model::SessionRecord;
use crate::resources::gateway::{self, GatewayTool};
use crate::resources::page::{self, Position, Source};
use crate::resources::view;
use crate::state::Snapshot;
use crate::tools::{mode_of, tool_view};
use serde_json::{Map, Value, json};
use std::time::{Duration, Instant};
use switchyard_proto::v1 as pb;

/// Longest URI accepted, in bytes.
pub const MAX_URI: usize = 8 * 1024;

/// Step 1: the read model has this replica's writes, and the caller's
/// session (`None` for an empty id).
pub async fn session_of(
    cp: &ControlPlane,
    id: &str,
    caller: Option<&Caller>,
) -> Result<Option<SessionRecord>, CallError> {
    if !cp.state.caught_up(CATCH_UP_LIMIT).await {
        return Err(CallError::unavailable(format!(
            "this replica's read model has not caught up with a write made through it within {} s; try again",
            CATCH_UP_LIMIT.as_secs()
        )));
    }
    match id {
        "" => Ok(None),
        id => Ok(Some(admit::session(cp, id, caller).await?)),
    }
}

/// Step 2: `server` exists and `session` enables it. Errors: NOT_FOUND,
/// FAILED_PRECONDITION, INVALID_ARGUMENT (no server).
fn scope(snap: &Snapshot, session: Option<&SessionRecord>, server: &str) -> Result<(), CallError> {
    if server.is_empty() {
        return Err(CallError::invalid_argument("server: required"));
    }
    if !snap.servers.contains_key(server) {
        return Err(CallError::not_found(format!("server {server:?} not found")));
    }
    if let Some(s) = session
        && !s.enables(server)
    {
        return Err(CallError::failed_precondition(format!(
            "server {server} is not enabled in session {}",
            s.id
        )));
    }
    Ok(())
}

/// The servers a listing covers: `server` alone (checked by [`scope`]),
/// else every server the session enables; split into those with a live,
/// connected sidecar and a catalogue, and the unavailable rest.
pub fn listed_servers(
    snap: &Snapshot,
    session: Option<&SessionRecord>,
    server: &str,
) -> Result<(Vec<String>, Vec<String>), CallError> {
    let names: Vec<&String> = if server.is_empty() {
        snap.servers
            .keys()
            .filter(|n| session.is_none_or(|s| s.enables(n)))
            .collect()
    } else {
        scope(snap, session, server)?;
        snap.servers.keys().filter(|n| *n == server).collect()
    };
    let (mut live, mut unavailable) = (Vec::new(), Vec::new());
    for name in names {
        let connected = snap.connected(name);
        if connected && snap.catalogues.contains_key(name) {
            live.push(name.clone());
        } else {
            unavailable.push(name.clone());
        }
    }
    Ok((live, unavailable))
}

/// `ListResources`: a page of the resources and templates of the
/// session's servers. Errors: INVALID_ARGUMENT (cursor, page size),
/// NOT_FOUND, FAILED_PRECONDITION.
pub async fn list_resources(
    cp: &ControlPlane,
    r: &pb::ListResourcesRequest,
    caller: Option<&Caller>,
) -> Result<pb::ListResourcesResponse, CallError> {
    let session = session_of(cp, &r.session_id, caller).await?;
    let size = page::size(r.page_size).map_err(CallError::invalid_argument)?;
    let snap = cp.state.snapshot();
    let (servers, unavailable) = listed_servers(&snap, session.as_ref(), &r.server)?;
    resources_page(&snap, &servers, &r.cursor, size, unavailable)
}

fn resources_page(
    snap: &Snapshot,
    servers: &[String],
    cursor: &str,
    size: usize,
    unavailable_servers: Vec<String>,
) -> Result<pb::ListResourcesResponse, CallError> {
    let from = match cursor {
        "" => None,
        c => Some(Position::decode(c, 2).map_err(CallError::invalid_argument)?),
    };
    let sources = servers
        .iter()
        .filter_map(|s| {
            let cat = snap.resource_catalogues.get(s)?;
            Some(Source {
                server: s,
                lists: vec![cat.resources.as_slice(), cat.resource_templates.as_slice()],
            })
        })
        .collect();
    let (entries, next) = page::page(sources, from.as_ref(), size);
    let mut out = pb::ListResourcesResponse {
        next_cursor: next.map(|p| p.encode()).unwrap_or_default(),
        unavailable_servers,
        ..Default::default()
    };
    for (server, list, entry) in entries {
        match list {
            0 => out.resources.push(view::resource(server, entry)),
            _ => out.resource_templates.push(view::template(server, entry)),
        }
    }
    Ok(out)
}

/// `ListPrompts`: a page of the prompts of the session's servers.
pub async fn list_prompts(
    cp: &ControlPlane,
    r: &pb::ListPromptsRequest,
    caller: Option<&Caller>,
) -> Result<pb::ListPromptsResponse, CallError> {
    let session = session_of(cp, &r.session_id, caller).await?;
    let size = page::size(r.page_size).map_err(CallError::invalid_argument)?;
    let snap = cp.state.snapshot();
    let (servers, unavailable_servers) = listed_servers(&snap, session.as_ref(), &r.server)?;
    let from = match r.cursor.as_str() {
        "" => None,
        c => Some(Position::decode(c, 1).map_err(CallError::invalid_argument)?),
    };
    let sources = servers
        .iter()
        .filter_map(|s| {
            let cat = snap.resource_catalogues.get(s)?;
            Some(Source {
                server: s,
                lists: vec![cat.prompts.as_slice()],
            })
        })
        .collect();
    let (entries, next) = page::page(sources, from.as_ref(), size);
    Ok(pb::ListPromptsResponse {
        prompts: entries
            .into_iter()
            .map(|(server, _, entry)| view::prompt(server, entry))
            .collect(),
        next_cursor: next.map(|p| p.encode()).unwrap_or_default(),
        unavailable_servers,
    })
}

/// How a stage E request is forwarded and answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Forward {
    /// The engine API: the params built from the request's fields, the
    /// answer processed by the size rules.
    #[default]
    Processed,
    /// `AttachResource`: as `Processed`, every content an attachment.
    Attached,
    /// The MCP endpoint: the client's own params object (its `_meta` and
    /// unknown fields kept; `uri`, `name` or `ref` already the server's),
    /// and the answer exactly as the server sent it (`result_json`); with
    /// the capabilities its client answers for
    /// (`SidecarRequest.client_capabilities_json`, empty: Switchyard's).
    Raw(Map<String, Value>, String),
}

/// What a stage E request sends to the sidecar: the params with the
/// engine's `_meta` spliced in, the session's roots, the time limit.
struct Planned {
    request: pb::SidecarRequest,
    timeout: Duration,
}

fn plan(
    cp: &ControlPlane,
    session: Option<&SessionRecord>,
    run_id: &str,
    (mut params, forward): (Map<String, Value>, &Forward),
    meta_json: &str,
    timeout_ms: u64,
) -> Result<Planned, CallError> {
    if let Forward::Raw(given, _) = forward {
        params = given.clone();
    }
    // A JSON object, nested within bounds, whose numbers reach the server
    // as given (`plan::raw_object`).
    if let Some(raw) = super::plan::raw_object("meta_json", meta_json)? {
        let meta: Value = serde_json::from_str(raw)
            .map_err(|e| CallError::invalid_argument(format!("meta_json: not valid JSON: {e}")))?;
        params.insert("_meta".into(), meta);
    }
    let max_ms = switchyard_common::server_spec::MAX_TIMEOUT_SEC * 1000;
    if timeout_ms > max_ms {
        return Err(CallError::invalid_argument(format!(
            "timeout_ms: {timeout_ms} is over the maximum {max_ms} (7 days)"
        )));
    }
    let timeout = match timeout_ms {
        0 => cp.call_timeout,
        ms => Duration::from_millis(ms),
    };
    Ok(Planned {
        request: pb::SidecarRequest {
            params_json: Value::Object(params).to_string(),
            timeout_ms: timeout.as_millis() as u64,
            session_id: session.map(|s| s.id.clone()).unwrap_or_default(),
            run_id: run_id.to_owned(),
            roots_json: session
                .filter(|s| !s.roots.is_empty())
                .map(|s| serde_json::to_string(&s.roots).expect("roots serialise"))
                .unwrap_or_default(),
            attach: *forward == Forward::Attached,
            raw: matches!(forward, Forward::Raw(..)),
            client_capabilities_json: match forward {
                Forward::Raw(_, caps) => caps.clone(),
                _ => String::new(),
            },
        },
        timeout,
    })
}

/// Step 3: `planned` to a live sidecar of `server` by `rpc` (one of the
/// `SidecarCalls` stage E RPCs), within its one deadline (the sidecar gets
/// the time left and enforces it; the router waits [`ANSWER_GRACE`] more).
async fn route<T, F, Fut>(
    cp: &ControlPlane,
    snap: &Snapshot,
    server: &str,
    planned: Planned,
    rpc: F,
) -> Result<T, CallError>
where
    F: Fn(SidecarClient, tonic::Request<pb::SidecarRequest>) -> Fut,
    Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let deadline = tokio::time::Instant::now() + planned.timeout + ANSWER_GRACE;
    let request = planned.request;
    cp.router
        .request(snap, server, deadline, |client, left| {
            let mut req = tonic::Request::new(request.clone());
            req.set_timeout(left);
            rpc(client, req)
        })
        .await
}

/// Step 3 for a read: `resources/read` on `server`.
async fn read(
    cp: &ControlPlane,
    snap: &Snapshot,
    server: &str,
    planned: Planned,
) -> Result<pb::ReadResourceResponse, CallError> {
    route(cp, snap, server, planned, |mut c, req| async move {
        c.read_resource(req).await
    })
    .await
}

/// FAILED_PRECONDITION unless `server` has resources (a read would only
/// get -32601 from it).
fn has_resources(snap: &Snapshot, server: &str) -> Result<(), CallError> {
    if crate::resources::has_resources(snap, server) {
        return Ok(());
    }
    Err(CallError::failed_precondition(format!(
        "server {server} has no resources (it declares no `resources` capability)"
    )))
}

fn check_uri(uri: &str) -> Result<(), CallError> {
    if uri.is_empty() {
        return Err(CallError::invalid_argument("uri: required"));
    }
    if uri.len() > MAX_URI {
        return Err(CallError::invalid_argument(format!(
            "uri: {} bytes, over the maximum {MAX_URI}",
            uri.len()
        )));
    }
    Ok(())
}

/// Bytes of contents a read gave: inline texts and attachments.
fn bytes_of(resp: &pb::ReadResourceResponse) -> u64 {
    let text: usize = resp.contents.iter().map(|c| c.text.len()).sum();
    let attached: u64 = resp.attachments.iter().map(|a| a.size_bytes).sum();
    text as u64 + attached
}

/// `ReadResource` (`Forward::Attached`: `AttachResource`). Errors: as a
/// tool call, and NOT_FOUND "resource not found" naming the server and the
/// URI.
pub async fn read_resource(
    cp: &ControlPlane,
    r: &pb::ReadResourceRequest,
    caller: Option<&Caller>,
    forward: Forward,
) -> Result<pb::ReadResourceResponse, CallError> {
    let attach = forward == Forward::Attached;
    let started = Instant::now();
    let session = session_of(cp, &r.session_id, caller).await?;
    let snap = cp.state.snapshot();
    scope(&snap, session.as_ref(), &r.server)?;
    has_resources(&snap, &r.server)?;
    check_uri(&r.uri)?;
    let mut params = Map::new();
    params.insert("uri".into(), Value::String(r.uri.clone()));
    let planned = plan(
        cp,
        session.as_ref(),
        &r.run_id,
        (params, &forward),
        &r.meta_json,
        r.timeout_ms,
    )?;
    let recording = ContentRequested {
        method: "resources/read",
        attach,
        session: &r.session_id,
        run: &r.run_id,
        server: &r.server,
        target: &r.uri,
        started,
    }
    .start(cp);
    let result = read(cp, &snap, &r.server, planned).await;
    recording.finish(&result, result.as_ref().map_or(0, bytes_of));
    result
}

/// `GetPrompt`. Errors: NOT_FOUND (a prompt the server does not list),
/// INVALID_ARGUMENT (the server refused the arguments), as a tool call.
pub async fn get_prompt(
    cp: &ControlPlane,
    r: &pb::GetPromptRequest,
    caller: Option<&Caller>,
    forward: Forward,
) -> Result<pb::GetPromptResponse, CallError> {
    let started = Instant::now();
    let session = session_of(cp, &r.session_id, caller).await?;
    let snap = cp.state.snapshot();
    scope(&snap, session.as_ref(), &r.server)?;
    if r.name.is_empty() {
        return Err(CallError::invalid_argument("name: required"));
    }
    let listed = snap
        .resource_catalogues
        .get(&r.server)
        .is_some_and(|c| c.prompts.iter().any(|p| p["name"] == r.name.as_str()));
    let recording = ContentRequested {
        method: "prompts/get",
        attach: false,
        session: &r.session_id,
        run: &r.run_id,
        server: &r.server,
        target: &r.name,
        started,
    }
    .start(cp);
    let result = match listed {
        true => prompt(cp, &snap, session.as_ref(), r, &forward).await,
        false => Err(CallError::not_found(format!(
            "prompt not found: server {} lists no prompt {:?}",
            r.server, r.name
        ))),
    };
    recording.finish(&result, 0);
    result
}

/// Step 3 of `GetPrompt`: `prompts/get` of a listed prompt.
async fn prompt(
    cp: &ControlPlane,
    snap: &Snapshot,
    session: Option<&SessionRecord>,
    r: &pb::GetPromptRequest,
    forward: &Forward,
) -> Result<pb::GetPromptResponse, CallError> {
    let mut params = Map::new();
    params.insert("name".into(), Value::String(r.name.clone()));
    if !r.arguments.is_empty() {
        let args: Map<String, Value> = r
            .arguments
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        params.insert("arguments".into(), Value::Object(args));
    }
    let planned = plan(
        cp,
        session,
        &r.run_id,
        (params, forward),
        &r.meta_json,
        r.timeout_ms,
    )?;
    route(cp, snap, &r.server, planned, |mut c, req| async move {
        c.get_prompt(req).await
    })
    .await
}

/// `Complete`. Errors: UNIMPLEMENTED (the server declares no
/// `completions`), INVALID_ARGUMENT (`ref_type`, `name`, `argument`),
/// NOT_FOUND (a prompt or template the server does not list), as
/// GetPrompt.
pub async fn complete(
    cp: &ControlPlane,
    r: &pb::CompleteRequest,
    caller: Option<&Caller>,
    forward: Forward,
) -> Result<pb::CompleteResponse, CallError> {
    let started = Instant::now();
    let session = session_of(cp, &r.session_id, caller).await?;
    let snap = cp.state.snapshot();
    scope(&snap, session.as_ref(), &r.server)?;
    let reference = match r.ref_type.as_str() {
        "ref/prompt" => json!({"type": "ref/prompt", "name": r.name}),
        "ref/resource" => json!({"type": "ref/resource", "uri": r.name}),
        other => {
            return Err(CallError::invalid_argument(format!(
                "ref_type: {other:?} is neither \"ref/prompt\" nor \"ref/resource\""
            )));
        }
    };
    if r.name.is_empty() || r.argument.is_empty() {
        return Err(CallError::invalid_argument(
            "name and argument: both required",
        ));
    }
    // What is completed must be listed: a prompt by name, a template (or
    // a resource) by its URI.
    let cat = snap.resource_catalogues.get(&r.server);
    let listed = match r.ref_type.as_str() {
        "ref/prompt" => cat.is_some_and(|c| c.prompts.iter().any(|p| p["name"] == r.name.as_str())),
        _ => cat.is_some_and(|c| {
            c.resource_templates
                .iter()
                .any(|t| t["uriTemplate"] == r.name.as_str())
                || c.resources.iter().any(|x| x["uri"] == r.name.as_str())
        }),
    };
    if !listed {
        let what = match r.ref_type.as_str() {
            "ref/prompt" => "prompt",
            _ => "resource template",
        };
        return Err(CallError::not_found(format!(
            "{what} not found: server {} lists no {what} {:?}",
            r.server, r.name
        )));
    }
    let declares = snap
        .catalogues
        .get(&r.server)
        .is_some_and(|c| c.capabilities.get("completions").is_some());
    if !declares {
        return Err(CallError::new(
            Kind::Unimplemented,
            format!("server {} offers no completions", r.server),
        ));
    }
    let mut params = Map::new();
    params.insert("ref".into(), reference);
    params.insert(
        "argument".into(),
        json!({"name": r.argument, "value": r.value}),
    );
    if !r.context_arguments.is_empty() {
        params.insert("context".into(), json!({"arguments": r.context_arguments}));
    }
    let planned = plan(cp, session.as_ref(), "", (params, &forward), "", 0)?;
    let result = route(cp, &snap, &r.server, planned, |mut c, req| async move {
        c.complete(req).await
    })
    .await;
    ContentRequested {
        method: "completion/complete",
        attach: false,
        session: &r.session_id,
        run: "",
        server: &r.server,
        target: &r.name,
        started,
    }
    .emit(cp, &result, 0);
    result
}

/// Step 6 of a gateway tool call (the call path's route step): answers
/// `tool` for request `r` of `session` on `server` (`mcp_resource_read`'s
/// server; empty for `mcp_resources` without one), as a sidecar would
/// answer a tool call.
pub async fn gateway(
    cp: &ControlPlane,
    snap: &Snapshot,
    tool: GatewayTool,
    args: &gateway::Arguments,
    session: Option<&SessionRecord>,
    r: &pb::CallToolRequest,
) -> Result<pb::SidecarCallResponse, CallError> {
    match tool {
        GatewayTool::List => {
            let (servers, unavailable) = listed_servers(snap, session, &args.server)?;
            // A server whose `mcp_resources` is not offered (a policy) is
            // left out.
            let mode = mode_of(session);
            let servers: Vec<String> = servers
                .into_iter()
                .filter(|s| {
                    crate::resources::has_resources(snap, s)
                        && tool_view(snap, s, tool.definition(), mode)
                            .decision
                            .offered()
                })
                .collect();
            // Offered only when one of the session's servers has resources
            // (`ListTools` says so too).
            if servers.is_empty() && unavailable.is_empty() {
                return Err(CallError::failed_precondition(match session {
                    Some(s) => format!(
                        "tool {:?} is not offered to session {}: none of its servers has resources",
                        tool.name(),
                        s.id
                    ),
                    None => format!(
                        "tool {:?} is not offered: no server has resources",
                        tool.name()
                    ),
                }));
            }
            let page = resources_page(
                snap,
                &servers,
                args.cursor.as_deref().unwrap_or(""),
                gateway::PAGE,
                unavailable,
            )?;
            let listing = gateway::page_text(
                &page.resources,
                &page.resource_templates,
                &page.next_cursor,
                &page.unavailable_servers,
            );
            let text = serde_json::to_string_pretty(&listing).expect("JSON serialises");
            let result = gateway::tool_result(&text, Some(&listing));
            Ok(pb::SidecarCallResponse {
                result_json: result.to_string(),
                structured_content_json: listing.to_string(),
                model_text: text,
                ..Default::default()
            })
        }
        GatewayTool::Read => {
            let started = Instant::now();
            has_resources(snap, &args.server)?;
            check_uri(&args.uri)?;
            let mut params = Map::new();
            params.insert("uri".into(), Value::String(args.uri.clone()));
            let planned = plan(
                cp,
                session,
                &r.run_id,
                (params, &Forward::Processed),
                &r.meta_json,
                r.timeout_ms,
            )?;
            let recording = ContentRequested {
                method: "resources/read",
                attach: false,
                session: &r.session_id,
                run: &r.run_id,
                server: &args.server,
                target: &args.uri,
                started,
            }
            .start(cp);
            let result = read(cp, snap, &args.server, planned).await;
            recording.finish(&result, result.as_ref().map_or(0, bytes_of));
            let resp = result?;
            Ok(pb::SidecarCallResponse {
                result_json: gateway::tool_result(&resp.text, None).to_string(),
                model_text: resp.text,
                attachments: resp.attachments,
                ..Default::default()
            })
        }
    }
}
