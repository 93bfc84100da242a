//! The MCP endpoint: Switchyard as an MCP server, over Streamable HTTP, for
//! MCP clients of both eras (`[mcp] listen`; docs/mcp-endpoint.md; the
//! design is in this directory's README.md). Any replica serves any
//! request: what outlives a request is in the store.
//!
//! One POST, top to bottom ([`handle`]):
//!
//! 1. [`ingress`]: `Host` and `Origin` (403), then the caller, as on the
//!    gRPC API (401, 403);
//! 2. [`ingress`]: the media types (415, 406), the body limit (413), one
//!    JSON-RPC message (-32700, -32600);
//! 3. the era: `initialize`, `Mcp-Session-Id` or a 2025 version header is
//!    2025-11-25 ([`legacy`]: the session, 400 and 404); anything else is
//!    2026-07-28, checked in the specified order ([`modern`]);
//! 4. a 2025-11-25 client's answers to the endpoint's questions
//!    ([`interactions::client_answered`]) and its log level
//!    ([`logging::set_level`]); a 2025-11-25 call that may ask the client
//!    something runs on an SSE stream ([`interactions::stream`]); the
//!    client's log level ([`logging::level`], a 2026-07-28 one checked);
//! 5. one arm per method ([`answer`]): [`discover`], [`lists`],
//!    [`requests`] (through the call path, [`crate::call`]), [`tasks`]
//!    (a client's tasks are background calls); a 2026-07-28
//!    request that may ask its client runs through [`mrtr`] (its
//!    questions as `input_required`, the retry resuming the call);
//! 6. [`respond`]: the result decorated for the era, or the error, in one
//!    place; the request counted ([`Served`]).
//!
//! URLs: `/mcp` (every server, names namespaced: [`names`]),
//! `/mcp/sessions/ID` (an engine session's servers, mode and roots),
//! `/mcp/servers/NAME` (one server, names unchanged). GET and DELETE: 405
//! for 2026-07-28 (stateless); for a 2025-11-25 session GET opens its
//! stream of change notifications ([`listen`]) and DELETE ends it. Answers
//! are JSON, or SSE for a 2025-11-25 call that may ask its client, for a
//! `tools/call` whose client asked for its progress (`progressToken`) or
//! its server's log messages (a level: [`logging`]) once one of those
//! comes ([`respond::progress_stream`]; JSON when none does), and for
//! `subscriptions/listen` ([`listen`]).
//!
//! HTTP/1.1 and HTTP/2 (cleartext, prior knowledge: many requests on one
//! connection) are both served; HTTP/2's `:authority` is checked as `Host`.
//! Browser pages of the allowed origins get CORS ([`ingress::cors`]): a
//! preflight (`OPTIONS`) is answered before step 1.

pub mod discover;
pub mod ingress;
pub mod interactions;
pub mod legacy;
pub mod listen;
pub mod lists;
pub mod logging;
pub mod modern;
pub mod mrtr;
pub mod names;
pub mod requests;
pub mod respond;
pub mod tasks;

use crate::ControlPlane;
use crate::auth::{Authenticator, Caller, Service};
use crate::config::McpConfig;
use crate::model::SessionRecord;
use crate::model::mcp_session::Scope;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use ingress::Message;
use respond::McpError;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_mcp::era::Era;
use switchyard_mcp::jsonrpc::Kind;
use switchyard_mcp::{headers, methods};
use tokio_util::sync::CancellationToken;

/// The endpoint of one replica.
#[derive(Debug)]
pub struct Endpoint {
    /// The replica's shared core.
    pub cp: Arc<ControlPlane>,
    /// Who may call (the gRPC API's credentials).
    pub auth: Arc<Authenticator>,
    /// `[mcp]`.
    pub config: McpConfig,
    /// Whether it listens on a loopback address (DNS rebinding rules).
    pub loopback: bool,
    /// The bytes of request bodies being read at once, across requests
    /// ([`ingress::body_budget`]).
    pub bodies: Arc<ingress::BodyBudget>,
    /// The calls waiting for their 2026-07-28 clients' answers on this
    /// replica, by caller ([`mrtr::Waiting`]).
    pub waiting: mrtr::Waiting,
}

/// One request's context: who asks, on which URL, in which era, in which
/// engine session.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The endpoint.
    pub ep: &'a Endpoint,
    /// The URL's scope.
    pub scope: &'a Scope,
    /// The caller (`None`: anonymous, allowed while `[auth] required` is
    /// false).
    pub caller: Option<&'a Caller>,
    /// The client's era.
    pub era: Era,
    /// The engine session the request runs in; empty: none (a 2026-07-28
    /// request on `/mcp` or `/mcp/servers/NAME`).
    pub session_id: String,
    /// The run its interactions are tagged with ([`interactions`]); empty:
    /// nobody on this request answers them.
    pub run_id: String,
    /// Where a `tools/call`'s notifications go (the request is answered
    /// as an SSE stream carrying them): its progress, and its server's log
    /// messages at `log_level`; `None`: the client wants neither
    /// ([`notifications_wanted`]), or takes JSON only.
    pub progress: Option<switchyard_proto::calls::Observer>,
    /// The client's log level ([`logging::level`]): with `progress`, a
    /// `tools/call` relays its server's log messages at this level or more
    /// severe; `None`: none.
    pub log_level: Option<switchyard_mcp::logging::Level>,
    /// The client declared tasks ([`tasks_declared`]): its calls may
    /// become tasks ([`tasks`]).
    pub tasks: bool,
    /// What the server is told the client answers
    /// (`CallToolRequest.client_capabilities_json`,
    /// [`client_capabilities`]); empty: Switchyard's own.
    pub client: String,
}

impl Ctx<'_> {
    /// Whether several servers share this URL (names are namespaced).
    pub fn multiplexed(&self) -> bool {
        !matches!(self.scope, Scope::Server(_))
    }

    /// The engine session, checked as the engine API checks it.
    pub async fn session(&self) -> Result<Option<SessionRecord>, McpError> {
        crate::call::request::session_of(&self.ep.cp, &self.session_id, self.caller)
            .await
            .map_err(|e| McpError::from_call(e, self.era))
    }
}

/// Serves the endpoint on `listener` until `shutdown`; ends idle
/// 2025-11-25 sessions meanwhile.
pub async fn serve(
    listener: tokio::net::TcpListener,
    ep: Arc<Endpoint>,
    connections: Arc<switchyard_common::connections::ConnectionLimit>,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: CancellationToken,
) {
    let sweeper = {
        let ep = ep.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(60));
            loop {
                tokio::select! {
                    _ = every.tick() => legacy::sweep(&ep).await,
                    _ = stop.cancelled() => return,
                }
            }
        })
    };
    let app = Router::new()
        .route("/mcp", axum::routing::any(all))
        .route("/mcp/sessions/{id}", axum::routing::any(session))
        .route("/mcp/servers/{name}", axum::routing::any(server))
        // CORS for the allowed origins' browser pages.
        .layer(ingress::cors(&ep.config, ep.loopback))
        .with_state(ep);
    // With header and keep-alive timeouts, TCP_NODELAY, HTTP/1.1 and
    // HTTP/2, at most `mcp.max_connections` connections, and TLS with
    // `mcp.tls` (`switchyard_common::http_serve`).
    let stop = shutdown.cancelled_owned();
    match tls {
        Some(tls) => {
            switchyard_common::http_serve::serve_tls(listener, app, connections, tls, stop).await;
        }
        None => switchyard_common::http_serve::serve(listener, app, connections, stop).await,
    }
    sweeper.abort();
}

async fn all(
    State(ep): State<Arc<Endpoint>>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Body,
) -> Response {
    handle(ep, Scope::All, method, &uri, h, body).await
}

async fn session(
    State(ep): State<Arc<Endpoint>>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Body,
) -> Response {
    handle(ep, Scope::Session(id), method, &uri, h, body).await
}

async fn server(
    State(ep): State<Arc<Endpoint>>,
    Path(name): Path<String>,
    method: Method,
    uri: Uri,
    h: HeaderMap,
    body: Body,
) -> Response {
    handle(ep, Scope::Server(name), method, &uri, h, body).await
}

/// One HTTP request on `scope`'s URL.
async fn handle(
    ep: Arc<Endpoint>,
    scope: Scope,
    method: Method,
    uri: &Uri,
    mut h: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let mut served = Served {
        method: "-",
        era: "-",
        outcome: "rejected",
        events_only: false,
    };
    // HTTP/2 names the host in `:authority`, which the Host check reads too.
    let outcome = match ingress::authority_as_host(&mut h, uri) {
        Ok(()) => handled(&ep, &scope, &method, &h, body, &mut served).await,
        Err(e) => Err(e),
    };
    let response = match outcome {
        Ok(r) => r,
        Err(e) => {
            served.outcome = e.outcome();
            if e.status.is_server_error() || e.code == respond::INTERNAL_ERROR {
                tracing::warn!(method = served.method, status = e.status.as_u16(), code = e.code, error = %e.message, "MCP request failed");
            } else {
                tracing::debug!(method = served.method, status = e.status.as_u16(), code = e.code, error = %e.message, "MCP request refused");
            }
            e.into_response()
        }
    };
    served.emit(&ep, started);
    match served.events_only {
        true => respond::as_event_stream(response).await,
        false => response,
    }
}

/// The request counted in `switchyard_control_plane_mcp_requests_total`,
/// and its debug log line, together.
struct Served {
    method: &'static str,
    era: &'static str,
    outcome: &'static str,
    /// The client takes SSE but not JSON: answers go as one event.
    events_only: bool,
}

impl Served {
    fn emit(&self, ep: &Endpoint, started: Instant) {
        ep.cp
            .metrics
            .mcp_request(self.method, self.era, self.outcome);
        tracing::debug!(
            method = self.method,
            era = self.era,
            outcome = self.outcome,
            ms = started.elapsed().as_millis() as u64,
            "MCP request"
        );
    }
}

/// A bounded metric label for `method`.
fn method_label(method: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        methods::INITIALIZE,
        methods::INITIALIZED,
        methods::PING,
        methods::LOGGING_SET_LEVEL,
        methods::SERVER_DISCOVER,
        methods::TOOLS_LIST,
        methods::TOOLS_CALL,
        methods::RESOURCES_LIST,
        methods::RESOURCE_TEMPLATES_LIST,
        methods::RESOURCES_READ,
        methods::PROMPTS_LIST,
        methods::PROMPTS_GET,
        methods::COMPLETE,
        methods::SUBSCRIPTIONS_LISTEN,
        methods::CANCELLED,
        methods::TASKS_GET,
        methods::TASKS_RESULT,
        methods::TASKS_CANCEL,
        methods::TASKS_LIST,
        methods::TASKS_UPDATE,
    ];
    KNOWN
        .iter()
        .find(|m| **m == method)
        .copied()
        .unwrap_or("other")
}

fn era_label(era: Era) -> &'static str {
    match era {
        Era::Modern => switchyard_mcp::era::MODERN_VERSION,
        Era::Legacy => switchyard_mcp::era::LEGACY_VERSION,
    }
}

/// The steps of the module docs.
async fn handled(
    ep: &Arc<Endpoint>,
    scope: &Scope,
    method: &Method,
    h: &HeaderMap,
    body: Body,
    served: &mut Served,
) -> Result<Response, McpError> {
    // 1. Host and Origin, then who is calling.
    ingress::check_host_and_origin(h, &ep.config, ep.loopback)?;
    ingress::check_single_headers(h)?;
    let caller = authenticate(ep, h)?;
    check_scope(ep, scope, caller.as_ref()).await?;
    // GET opens a 2025-11-25 session's stream; DELETE ends the session.
    if method == Method::GET && h.contains_key(headers::SESSION_ID) {
        served.era = era_label(Era::Legacy);
        let rec = legacy::session(ep, scope, caller.as_ref(), h, None).await?;
        let r = listen::legacy(ep, scope, caller.as_ref(), h, &rec).await?;
        served.outcome = "ok";
        return Ok(r);
    }
    if method == Method::DELETE && h.contains_key(headers::SESSION_ID) {
        served.era = era_label(Era::Legacy);
        let rec = legacy::session(ep, scope, caller.as_ref(), h, None).await?;
        legacy::end(ep, &rec, legacy::Ended::Deleted).await;
        served.outcome = "ok";
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    if method != Method::POST {
        let mut r = McpError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            respond::INVALID_REQUEST,
            format!("{method} is not served here: send JSON-RPC messages with POST"),
        )
        .into_response();
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST, GET, DELETE"));
        return Ok(r);
    }
    // 2. The one message.
    let accepts = ingress::check_media(h)?;
    served.events_only = !accepts.json;
    let within = Duration::from_secs(ep.config.body_timeout_sec);
    let name = caller.as_ref().map_or("", |c| c.name.as_str());
    let bytes =
        ingress::read_body(body, ep.config.max_body_bytes, within, &ep.bodies, name).await?;
    let msg = ingress::parse(&bytes)?;
    served.method = method_label(&msg.method);
    // 3. The era, and the session of a 2025-11-25 client.
    let era = era_of(h, &msg);
    served.era = era_label(era);
    if msg.kind == Kind::Request && msg.method == methods::INITIALIZE && era == Era::Legacy {
        // Once per session (basic/lifecycle): in a session it is refused;
        // an unknown session is 404, as for any request, after which the
        // client initializes without one (basic/transports, "Session
        // Management").
        if h.contains_key(headers::SESSION_ID) {
            legacy::session(ep, scope, caller.as_ref(), h, msg.id.as_ref()).await?;
            return Err(McpError::bad_request(
                "initialize: this session is initialized already (header Mcp-Session-Id); send initialize without Mcp-Session-Id to open another session",
            )
            .with_id(msg.id.as_ref()));
        }
        let r = legacy::initialize(ep, scope, caller.as_ref(), &msg).await?;
        served.outcome = "ok";
        return Ok(r);
    }
    let session = match era {
        Era::Legacy => Some(legacy::session(ep, scope, caller.as_ref(), h, msg.id.as_ref()).await?),
        Era::Modern => None,
    };
    let session_id = match (&session, scope) {
        (Some(s), _) => s.engine_session.clone(),
        (None, Scope::Session(id)) => id.clone(),
        (None, _) => String::new(),
    };
    let client_tasks = tasks_declared(era, session.as_ref().map(|s| &s.client_capabilities), &msg);
    // A client not asked on this request (it gets JSON, or the method
    // asks nothing).
    let client = client_capabilities(
        scope,
        session.as_ref().map(|s| &s.client_capabilities),
        false,
    );
    // 4. The client's answers to our questions, and notifications: taken,
    // nothing to answer.
    match (msg.kind.clone(), &session) {
        (Kind::Request, _) => {}
        (Kind::Response, Some(s)) => {
            interactions::client_answered(ep, s, &msg).await?;
            served.outcome = "ok";
            return Ok(respond::accepted());
        }
        (Kind::Response, None) => {
            return Err(McpError::bad_request(
                "a 2026-07-28 client sends no JSON-RPC responses (input goes in the retried request's inputResponses)",
            ));
        }
        (Kind::Notification, _) => {
            if msg.method == methods::CANCELLED && !session_id.is_empty() && session.is_some() {
                requests::cancel(
                    ep,
                    caller.as_ref().map_or("", |c| c.name.as_str()),
                    &session_id,
                    &msg,
                )
                .await;
            }
            served.outcome = "ok";
            return Ok(respond::accepted());
        }
    }
    // `_meta` is an object (a 2026-07-28 request's is checked with its
    // other fields, `modern::validate`, with 400).
    if era == Era::Legacy {
        legacy::check_meta(&msg)?;
    }
    // A progress token is a string or a number (basic/utilities/progress).
    if let Some(token) = msg.meta().and_then(|m| m.get("progressToken"))
        && !(token.is_string() || token.is_number())
    {
        return Err(McpError::invalid_params(format!(
            "params._meta.progressToken: must be a string or a number, not {}",
            switchyard_mcp::jsonrpc::kind_of(token)
        ))
        .with_id(msg.id.as_ref()));
    }
    // A 2025-11-25 client's log level, kept in its session, set here: the
    // servers' connections are shared, so it is not forwarded.
    if let (Some(s), methods::LOGGING_SET_LEVEL) = (&session, msg.method.as_str()) {
        let result = logging::set_level(ep, s, &msg)
            .await
            .map_err(|e| e.with_id(msg.id.as_ref()))?;
        served.outcome = "ok";
        return Ok(respond::result(
            msg.id.as_ref().unwrap_or(&Value::Null),
            result,
        ));
    }
    // A 2025-11-25 call that may ask the client something: a stream.
    if let Some(s) = session
        .as_ref()
        .filter(|s| interactions::asks(s, accepts, &msg))
    {
        served.outcome = "ok";
        return Ok(interactions::stream(
            ep.clone(),
            scope.clone(),
            caller,
            s.clone(),
            h.clone(),
            msg,
            accepts,
        ));
    }
    if era == Era::Modern {
        modern::validate(h, &msg)?;
    }
    let log_level =
        logging::level(era, session.as_ref(), &msg).map_err(|e| e.with_id(msg.id.as_ref()))?;
    // A 2026-07-28 client's change notifications: a stream.
    if era == Era::Modern && msg.method == methods::SUBSCRIPTIONS_LISTEN {
        let r = listen::modern(ep, scope, caller.as_ref(), accepts.sse, &msg)?;
        served.outcome = "ok";
        return Ok(r);
    }
    // A 2026-07-28 request that may ask its client: multi round-trip.
    if era == Era::Modern && mrtr::asks(&msg) {
        // Its progress and log messages (first round only) on an SSE
        // stream, when asked and once one comes.
        if let Some((observer, progress)) = notifications_wanted(accepts, &msg, log_level) {
            let reply = respond::Reply {
                id: msg.id.clone(),
                method: msg.method.clone(),
                era,
            };
            let (ep, scope, h) = (ep.clone(), scope.clone(), h.clone());
            let r = Box::pin(respond::progress_stream(progress, reply, async move {
                mrtr::serve(&ep, &scope, caller.as_ref(), &h, &msg, Some(observer)).await
            }))
            .await?;
            served.outcome = "ok";
            return Ok(r);
        }
        let outcome = Box::pin(mrtr::serve(ep, scope, caller.as_ref(), h, &msg, None)).await;
        let r = respond::answer(msg.id.as_ref(), &msg.method, era, outcome)?;
        served.outcome = "ok";
        return Ok(r);
    }
    let ctx = Ctx {
        ep,
        scope,
        caller: caller.as_ref(),
        era,
        session_id,
        run_id: String::new(),
        progress: None,
        log_level,
        tasks: client_tasks,
        client: client.clone(),
    };
    // A call whose client wants its progress or log messages: an SSE
    // stream carrying them, then the response, once one comes (JSON until
    // then).
    if let Some(observer) = notifications_wanted(accepts, &msg, log_level) {
        let (ep, scope, caller, h, msg) = (
            ep.clone(),
            scope.clone(),
            caller.clone(),
            h.clone(),
            msg.clone(),
        );
        let session_id = ctx.session_id.clone();
        let reply = respond::Reply {
            id: msg.id.clone(),
            method: msg.method.clone(),
            era,
        };
        let r = Box::pin(respond::progress_stream(observer.1, reply, async move {
            let ctx = Ctx {
                ep: &ep,
                scope: &scope,
                caller: caller.as_ref(),
                era,
                session_id,
                run_id: String::new(),
                progress: Some(observer.0),
                log_level,
                tasks: client_tasks,
                client,
            };
            answer(&ctx, &h, &msg).await
        }))
        .await?;
        served.outcome = "ok";
        return Ok(r);
    }
    // 5. One arm per method (boxed: this future stays small).
    let outcome = Box::pin(answer(&ctx, h, &msg)).await;
    // 6. The result, for the client's era.
    let r = respond::answer(msg.id.as_ref(), &msg.method, era, outcome)?;
    served.outcome = "ok";
    Ok(r)
}

/// Answers request `msg` (its era checked already).
pub(crate) async fn answer(ctx: &Ctx<'_>, h: &HeaderMap, msg: &Message) -> Result<Value, McpError> {
    use lists::Listing;
    match msg.method.as_str() {
        methods::SERVER_DISCOVER => Ok(discover::discover(ctx.scope)),
        methods::TOOLS_LIST => lists::tools(ctx, msg).await,
        methods::TOOLS_CALL => requests::call_tool(ctx, h, msg).await,
        methods::RESOURCES_LIST => lists::paged(ctx, msg, Listing::Resources).await,
        methods::RESOURCE_TEMPLATES_LIST => lists::paged(ctx, msg, Listing::Templates).await,
        methods::RESOURCES_READ => requests::read_resource(ctx, msg).await,
        methods::PROMPTS_LIST => lists::paged(ctx, msg, Listing::Prompts).await,
        methods::PROMPTS_GET => requests::get_prompt(ctx, msg).await,
        methods::COMPLETE => requests::complete(ctx, msg).await,
        // Tasks (tasks/result and tasks/list are 2025-11-25 only; a
        // 2026-07-28 request for them is 404 already).
        methods::TASKS_GET => tasks::get(ctx, msg).await,
        methods::TASKS_RESULT => tasks::result(ctx, msg).await,
        methods::TASKS_CANCEL => tasks::cancel(ctx, msg).await,
        methods::TASKS_LIST => tasks::list(ctx, msg).await,
        methods::TASKS_UPDATE if ctx.era == Era::Modern => tasks::update(ctx, msg).await,
        // 2025-11-25 only (a 2026-07-28 request for them is 404 already;
        // `logging/setLevel` is answered before: [`logging::set_level`]).
        methods::PING => Ok(serde_json::json!({})),
        other => Err(McpError::rpc(
            switchyard_mcp::jsonrpc::METHOD_NOT_FOUND,
            format!("method not found: {other:?}"),
        )),
    }
}

/// What the server of a request is told its client answers, as
/// `CallToolRequest.client_capabilities_json` (empty: Switchyard's own),
/// for a client that declared `declared` and that can (`asked`) or cannot
/// be asked on this request (a 2025-11-25 stream, a 2026-07-28 multi
/// round-trip; else its questions go to the session's other subscribers).
/// On `/mcp/servers/NAME`, which shows one server as if the client were
/// its own, the client's capabilities, less `roots` when it cannot be
/// asked. Elsewhere Switchyard's own (the session's subscribers and roots
/// answer for the client), with the server's `roots/list` asked of a
/// client that declared `roots` and can be asked.
pub fn client_capabilities(scope: &Scope, declared: Option<&Value>, asked: bool) -> String {
    let roots = asked && declared.is_some_and(|c| c.get("roots").is_some());
    match (scope, declared) {
        (Scope::Server(_), Some(Value::Object(c))) => {
            let mut c = c.clone();
            if !asked {
                c.remove("roots");
            }
            Value::Object(c).to_string()
        }
        (Scope::Server(_), _) => "{}".into(),
        _ if roots => {
            serde_json::json!({"elicitation": {"form": {}, "url": {}}, "roots": {}}).to_string()
        }
        _ => String::new(),
    }
}

/// Whether the client takes a task for this `tools/call`. 2025-11-25: the
/// request asks for one (`params.task`; a requestor sends it when the
/// receiver declares `tasks.requests.tools.call`, as this endpoint does:
/// the schema has no client capability for it, and a request without it
/// expects a `CallToolResult`), or the session's `capabilities` carry
/// `tasks.requests.tools.call` (which this endpoint took as the
/// declaration before). 2026-07-28: the request's client capabilities
/// (`extensions[io.modelcontextprotocol/tasks]`).
pub fn tasks_declared(era: Era, session_capabilities: Option<&Value>, msg: &Message) -> bool {
    match era {
        Era::Legacy => {
            tasks::wants_task(era, msg)
                || session_capabilities
                    .and_then(|c| c.pointer("/tasks/requests/tools/call"))
                    .is_some_and(Value::is_object)
        }
        Era::Modern => msg
            .meta()
            .and_then(|m| m.get(switchyard_mcp::meta::CLIENT_CAPABILITIES))
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get(switchyard_mcp::meta::TASKS_EXTENSION))
            .is_some_and(Value::is_object),
    }
}

/// A channel for the notifications of request `msg`, when it is a
/// `tools/call` from a client that takes SSE and wants some: its progress
/// (`_meta.progressToken`, basic/utilities/progress) or, at `log_level`,
/// its server's log messages ([`logging`]).
pub(crate) fn notifications_wanted(
    accepts: ingress::Accepts,
    msg: &Message,
    log_level: Option<switchyard_mcp::logging::Level>,
) -> Option<(
    switchyard_proto::calls::Observer,
    tokio::sync::mpsc::UnboundedReceiver<String>,
)> {
    let token = msg.meta().and_then(|m| m.get("progressToken"));
    let wanted = token.is_some() || log_level.is_some();
    (accepts.sse && msg.method == methods::TOOLS_CALL && wanted)
        .then(tokio::sync::mpsc::unbounded_channel)
}

/// The era of a request: 2025-11-25 for `initialize` without 2026-07-28
/// metadata, for a request naming a session, or carrying a 2025 version
/// header; else 2026-07-28 (whose checks then say what is missing).
fn era_of(h: &HeaderMap, msg: &Message) -> Era {
    let version_header = h
        .get(headers::PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok());
    let modern_meta = msg
        .meta()
        .is_some_and(|m| m.contains_key(switchyard_mcp::meta::PROTOCOL_VERSION));
    let legacy_header =
        version_header.is_some_and(|v| switchyard_mcp::era::LEGACY_VERSIONS.contains(&v));
    if h.contains_key(headers::SESSION_ID) || legacy_header {
        return Era::Legacy;
    }
    if version_header.is_some() || modern_meta {
        return Era::Modern;
    }
    // Neither: a 2025-11-25 client (it sends no version on initialize).
    Era::Legacy
}

/// The caller, from `Authorization: Bearer` as on the gRPC API (mTLS is
/// not offered on this listener). Errors: 401 with a challenge, 403.
fn authenticate(ep: &Endpoint, h: &HeaderMap) -> Result<Option<Caller>, McpError> {
    // Only `authorization` is read: the rest of the headers are not copied.
    let mut only = HeaderMap::new();
    if let Some(v) = h.get(header::AUTHORIZATION) {
        only.insert(header::AUTHORIZATION, v.clone());
    }
    let metadata = tonic::metadata::MetadataMap::from_headers(only);
    ep.auth
        .check(Service::Mcp, &metadata, None)
        .map_err(|status| {
            let (http, challenge) = match status.code() {
                tonic::Code::PermissionDenied => (StatusCode::FORBIDDEN, None),
                _ => (StatusCode::UNAUTHORIZED, Some("Bearer")),
            };
            let mut e = McpError::new(http, respond::INVALID_REQUEST, status.message());
            e.challenge = challenge;
            e
        })
}

/// 404 unless the URL's engine session or server exists (the session for
/// `caller`; one created on another replica a moment ago is read from the
/// store).
async fn check_scope(
    ep: &Endpoint,
    scope: &Scope,
    caller: Option<&Caller>,
) -> Result<(), McpError> {
    let what = match scope {
        Scope::All => return Ok(()),
        Scope::Server(name) if ep.cp.state.snapshot().servers.contains_key(name) => return Ok(()),
        Scope::Server(name) => format!("server {name:?}"),
        Scope::Session(id) => {
            let known = ep.cp.state.snapshot().sessions.get(id).cloned();
            let rec = match known {
                Some(rec) => Some(rec),
                None => ep.cp.registry.get_session(id).await.ok().flatten(),
            };
            if rec.is_some_and(|s| s.usable_by(caller)) {
                return Ok(());
            }
            format!("engine session {id:?}")
        }
    };
    Err(McpError::new(
        StatusCode::NOT_FOUND,
        respond::INVALID_REQUEST,
        format!("{} is not served: {what} not found", scope.path()),
    ))
}
