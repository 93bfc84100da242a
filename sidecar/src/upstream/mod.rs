//! The upstream MCP client session: the sidecar's one connection to its
//! MCP server, over stdio ([`stdio`]) or Streamable HTTP ([`http`]), in
//! either protocol era ([`era`]).
//!
//! [`Upstream`] is the handle the rest of the sidecar uses. It connects
//! lazily and exactly once however many callers arrive together, keeps
//! many requests in flight on one connection under its own ids, restarts a
//! stdio server that exited (with exponential backoff) and re-negotiates
//! before the next request. It never replays a request on its own: when a
//! server dies, every pending request fails at once with the server's name
//! and exit status. The only requests sent again are those the protocol
//! says to send again, in the table below.
//!
//! Everything is `serde_json::Value`: tool definitions and results come
//! back exactly as the server sent them.
//!
//! Calls made with a [`CallContext`] ([`Upstream::call_tool_in`],
//! [`Upstream::request_in`]) take part in interactions
//! ([`crate::interactions`], which this session calls into): the server's
//! questions are attributed to the call's session, a 2026-07-28
//! `input_required` result is answered and the request retried, and a
//! -32042 error becomes URL interactions and one retry. When the call's
//! context asks for them, the server's progress ([`progress`]) and its log
//! messages ([`logging`]: only those sent on the request's own response
//! stream, so never a stdio server's) are relayed to the call.
//!
//! An `auth = "oauth"` server (stage D, [`crate::oauth`]) is contacted
//! only while the control plane has given it an access token: every HTTP
//! request carries the current one ([`auth`]); without one, requests fail
//! at once with the control plane's reason
//! ([`UpstreamError::NotAuthorized`]), the link reports it as the last
//! error, and [`Upstream::authorized`] says when to connect. When the
//! token is withdrawn the connection is dropped at once, without a word
//! to the server.
//!
//! **Retries the protocol mandates.** Each is declared in one place; they
//! nest in this order, the outermost first (a request of
//! [`Upstream::request_in`] goes through the first four; the fifth is
//! below every HTTP request):
//!
//! | retry | when | what is sent again | where |
//! |---|---|---|---|
//! | URL elicitation | a -32042 `URLElicitationRequiredError` (2025-11-25 client/elicitation) | the whole request, once, after the user accepted every URL elicitation in `data.elicitations` (else the error is returned as is) | [`Upstream::request_in`], asking through [`crate::interactions::Relay::url_elicitations_required`] |
//! | MRTR rounds | a result with `resultType: "input_required"` to `tools/call`, `prompts/get` or `resources/read` (2026-07-28 basic/patterns/mrtr) | the request with a new id, `inputResponses` and the `requestState` as received, while the server asks, at most `max_input_rounds` times (default 8; then a protocol error) | [`crate::interactions::mrtr::rounds`], called by [`Upstream::request_in`] |
//! | header mismatch | a -32020 `HeaderMismatch` answer to a `tools/call` (2026-07-28 streamable-http, "Client Behavior") | the `tools/call`, once, after re-listing the tools (their `x-mcp-header` annotations) | `Upstream::send` |
//! | session expiry | HTTP 404 to a request that carried an `MCP-Session-Id` (2025-11-25 transports, "Session Management"): the server never processed it | the request, once, on a new session (re-initialized) | [`Upstream::request`], and the lists ([`Upstream::list_tools`], [`Upstream::list`]: the whole walk again) |
//! | token refresh | `auth = "oauth"`: HTTP 401 to a request sent with the access token of generation g (basic/authorization, "Token Handling"): the server did not process it | the same HTTP request, once, with the token the control plane sends after being told (`TokenRejected`), waited for at most 10 s | [`auth::send`], under every HTTP request of [`http`] |
//! | restart | the connection ended (a stdio server exited, an HTTP session was lost) and the restart policy is eager | the connection (spawn or `initialize`), in the background; after a connection that lasted less than a second, only a second later, so a server that refuses each new connection is not hammered | `watch_exit` |
//!
//! Not retries of a request: reconnecting after a stdio server exited
//! (`Upstream::connection`, with the backoff of [`RestartPolicy`]), and
//! stage A's one retry of a read-only or idempotent tool after a network
//! error, which is a policy of the call, not of the protocol
//! (`crate::tools::retry`).

pub mod auth;
pub mod config;
pub mod connection;
pub mod era;
pub mod error;

pub mod http;
pub mod inbound;
pub mod logging;

pub mod metrics;
pub mod pages;
pub mod progress;
pub mod stdio;
pub mod transport;

pub use config::{
    EraPreference, HttpConfig, RestartPolicy, StdioConfig, TransportConfig, UpstreamConfig,
};
pub use era::{Era, Negotiated};
pub use error::UpstreamError;
pub use metrics::{ServerMetrics, UpstreamMetrics};

use crate::interactions::{CallContext, Interactions, Relay, mrtr};
use connection::Connection;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use http::OnStream;
use inbound::Inbound;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use switchyard_mcp::{jsonrpc, methods};
use tokio::sync::{broadcast, watch};
use tracing::Instrument;

type ConnectFuture = Shared<BoxFuture<'static, Result<Arc<Connection>, UpstreamError>>>;

enum State {
    /// Not connected. `failures` counts consecutive failed or short-lived
    /// connections, for the backoff; `failed` is when the last attempt to
    /// connect failed, if it did.
    Idle {
        failures: u32,
        failed: Option<tokio::time::Instant>,
    },
    /// A connection attempt is under way; everyone waits on the same one.
    /// After a failed attempt (`failed`: when), a waiting request cuts its
    /// backoff to [`REQUEST_BACKOFF`] (`hurry`; [`Upstream::connection`]).
    Connecting {
        attempt: ConnectFuture,
        failed: Option<tokio::time::Instant>,
        hurry: tokio_util::sync::CancellationToken,
    },
    /// Connected.
    Ready {
        conn: Arc<Connection>,
        failures: u32,
    },
    /// Shut down; no more connections.
    Closed,
}

/// The longest a request waits for the next attempt to connect after a
/// failed one: the restart backoff (up to `max_backoff`, 30 s by default)
/// is cut to this while a request waits, so a request to a server that
/// cannot start fails after about this long, and one to a server that is
/// back is served about this soon. Attempts made for waiting requests are
/// at most one per this long.
pub const REQUEST_BACKOFF: Duration = Duration::from_secs(1);

/// How [`Upstream::connection`] waits for an attempt to connect.
#[derive(Clone, Copy)]
enum Waiting {
    /// Out the whole backoff: the watcher, the lists, a session renewal.
    Always,
    /// At most [`REQUEST_BACKOFF`] after the last failed attempt: a request.
    Request,
}

struct Inner {
    config: Arc<UpstreamConfig>,
    /// The server's secret values, scrubbed from the errors it reports
    /// ([`UpstreamConfig::secret_values`]).
    secrets: switchyard_common::server_spec::Secrets,
    ids: Arc<AtomicU64>,
    inbound: Arc<Inbound>,
    metrics: ServerMetrics,
    http_client: Option<reqwest::Client>,
    state: Mutex<State>,
    /// `upstream{server=NAME}`: every log line of this session carries it.
    span: tracing::Span,
    /// Connection attempts so far (the first start included).
    attempts: AtomicU64,
    /// Cancelled when the last handle is dropped, so the exit watcher lets
    /// go of the connection and dropping it stops the server.
    dropped: tokio_util::sync::CancellationToken,
    /// Cancelled by [`Upstream::shutdown`]: a reconnection attempt still
    /// waiting out its backoff gives up at once.
    closing: tokio_util::sync::CancellationToken,
    /// What [`Upstream::link`] reports.
    link: watch::Sender<Link>,
    /// Calls in flight and the answers to the server's questions.
    relay: Arc<Relay>,
}

/// The state of the connection as [`Upstream::link`] reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Link {
    /// Successful connections (negotiations) so far; bumped after each one.
    pub connections: u64,
    /// Whether the last connection succeeded and has not failed since.
    pub connected: bool,
    /// Why the last attempt failed or the last connection ended, if it did.
    pub last_error: Option<String>,
}

/// A handle to one upstream server. Cheap to clone; all clones share the
/// connection.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("server", &self.inner.config.name)
            .finish()
    }
}

impl Upstream {
    /// A session for `config`; nothing starts until the first request (or
    /// [`Upstream::connect`]). It declares no client capabilities and
    /// refuses the server's questions. Errors: the HTTP client cannot be
    /// built.
    pub fn new(config: UpstreamConfig, metrics: &UpstreamMetrics) -> Result<Self, UpstreamError> {
        let metrics = metrics.server(&config.name);
        Self::build(Arc::new(config), metrics, None, None, None, None)
    }

    /// A session that handles interactions: it declares elicitation (form
    /// and URL) and roots, and asks `interactions.handler` on behalf of the
    /// calls' sessions.
    pub fn with_interactions(
        mut config: UpstreamConfig,
        metrics: &UpstreamMetrics,
        interactions: Interactions,
    ) -> Result<Self, UpstreamError> {
        config.interactive = true;
        let metrics = metrics.server(&config.name);
        Self::build(
            Arc::new(config),
            metrics,
            Some(interactions),
            None,
            None,
            None,
        )
    }

    /// Another session to the same server, with the same configuration and
    /// interactions, whose connection belongs to `session_id`: the server's
    /// questions on it are that session's (Streamable HTTP: one connection
    /// per server and session).
    pub fn for_session(&self, session_id: &str) -> Result<Self, UpstreamError> {
        let mut c = (*self.inner.config).clone();
        // The server's era is known once this session negotiated: no probe.
        if let Some(era) = self.negotiated().map(|n| n.era)
            && c.era == EraPreference::Auto
        {
            c.era = match era {
                Era::Modern => EraPreference::Modern,
                Era::Legacy => EraPreference::Legacy,
            };
        }
        // The shared session's liveness probes say whether the server is
        // there; a session's idle connection is not probed (a pool of
        // them would cost the server a request each, every interval).
        c.liveness_interval = None;
        let config = Arc::new(c);
        Self::build(
            config,
            self.inner.metrics.clone(),
            self.inner.relay.interactions().cloned(),
            Some(session_id.to_owned()),
            self.inner.http_client.clone(),
            Some(self.inner.inbound.clone()),
        )
    }

    fn build(
        config: Arc<UpstreamConfig>,
        metrics: ServerMetrics,
        interactions: Option<Interactions>,
        bound_session: Option<String>,
        http_client: Option<reqwest::Client>,
        shared_inbound: Option<Arc<Inbound>>,
    ) -> Result<Self, UpstreamError> {
        let http_client = match (&config.transport, http_client) {
            (TransportConfig::Http(_), Some(client)) => Some(client),
            (TransportConfig::Http(_), None) => Some(
                http::client()
                    .map_err(|e| UpstreamError::io(&config.name, "building the HTTP client", e))?,
            ),
            (TransportConfig::Stdio(_), _) => None,
        };
        let span = match &bound_session {
            Some(session) => {
                tracing::info_span!("upstream", server = %config.name, session = %session)
            }
            None => tracing::info_span!("upstream", server = %config.name),
        };
        let relay = Arc::new(Relay::new(&config.name, interactions, bound_session));
        // An oauth server without a token starts out saying why.
        let link = Link {
            last_error: config
                .oauth
                .as_ref()
                .filter(|t| t.authorized().is_none())
                .map(|t| t.reason()),
            ..Link::default()
        };
        let secrets = config.secret_values();
        let upstream = Upstream {
            inner: Arc::new(Inner {
                inbound: Arc::new(match shared_inbound {
                    Some(shared) => {
                        Inbound::for_session(&config.name, relay.clone(), shared, secrets.clone())
                    }
                    None => Inbound::new(&config.name, relay.clone(), secrets.clone()),
                }),
                metrics,
                secrets,
                config,
                ids: Arc::new(AtomicU64::new(1)),
                http_client,
                state: Mutex::new(State::Idle {
                    failures: 0,
                    failed: None,
                }),
                span,
                attempts: AtomicU64::new(0),
                dropped: tokio_util::sync::CancellationToken::new(),
                closing: tokio_util::sync::CancellationToken::new(),
                link: watch::Sender::new(link),
                relay,
            }),
        };
        if let Some(tokens) = &upstream.inner.config.oauth {
            follow_tokens(&upstream.inner, tokens.clone());
        }
        Ok(upstream)
    }

    /// Resolves once the server may be contacted: at once, unless it is an
    /// `auth = "oauth"` server without an access token to send; then when
    /// the control plane sends one. Errors: [`UpstreamError::Closed`] once
    /// the session is shut down.
    pub async fn authorized(&self) -> Result<(), UpstreamError> {
        let Some(tokens) = &self.inner.config.oauth else {
            return Ok(());
        };
        tokio::select! {
            () = tokens.until_authorized() => Ok(()),
            () = self.inner.closing.cancelled() => Err(UpstreamError::Closed {
                server: self.name().to_owned(),
            }),
        }
    }

    /// Whether the session handles interactions (see
    /// [`Upstream::with_interactions`]).
    pub fn interactive(&self) -> bool {
        self.inner.relay.interactive()
    }

    /// The contexts of the calls in flight, oldest first.
    pub fn calls_in_flight(&self) -> Vec<CallContext> {
        self.inner.relay.in_flight()
    }

    /// The `MCP-Session-Id` the server assigned to the current Streamable
    /// HTTP connection, if any.
    pub fn http_session_id(&self) -> Option<String> {
        match &*self.inner.state.lock().unwrap() {
            State::Ready { conn, .. } => conn.transport().http_session_id(),
            _ => None,
        }
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// This server's metrics.
    pub fn metrics(&self) -> &ServerMetrics {
        &self.inner.metrics
    }

    /// The configuration.
    pub fn config(&self) -> &UpstreamConfig {
        &self.inner.config
    }

    /// Connects if needed and returns what negotiation established.
    pub async fn connect(&self) -> Result<Negotiated, UpstreamError> {
        Ok(self.connection(Waiting::Always).await?.negotiated().clone())
    }

    /// [`Upstream::connect`] for a request: after a failed attempt to
    /// connect, the next one comes at most [`REQUEST_BACKOFF`] after it,
    /// not after the whole restart backoff, as for requests.
    pub async fn connect_for_request(&self) -> Result<Negotiated, UpstreamError> {
        Ok(self
            .connection(Waiting::Request)
            .await?
            .negotiated()
            .clone())
    }

    /// What the current connection negotiated, if connected.
    pub fn negotiated(&self) -> Option<Negotiated> {
        match &*self.inner.state.lock().unwrap() {
            State::Ready { conn, .. } if conn.transport().is_alive() => {
                Some(conn.negotiated().clone())
            }
            _ => None,
        }
    }

    /// The stdio server's process id, if one is running.
    pub fn pid(&self) -> Option<u32> {
        match &*self.inner.state.lock().unwrap() {
            State::Ready { conn, .. } => conn.transport().pid(),
            _ => None,
        }
    }

    /// Connection attempts so far, the first one included.
    pub fn connection_attempts(&self) -> u64 {
        self.inner.attempts.load(Ordering::Relaxed)
    }

    /// Follows the connection: the value changes after each successful
    /// connection (`connections` bumped), each failed attempt and each exit
    /// of a stdio server.
    pub fn link(&self) -> watch::Receiver<Link> {
        self.inner.link.subscribe()
    }

    /// Subscribes to the server's notifications (whole JSON-RPC messages).
    pub fn subscribe(&self) -> broadcast::Receiver<Value> {
        self.inner.inbound.subscribe()
    }

    /// Sends `method` with `params` and returns the `result` exactly as
    /// sent. Errors: see [`UpstreamError`]; a JSON-RPC error answer is
    /// [`UpstreamError::Rpc`]. Dropping the future cancels the request
    /// upstream (`notifications/cancelled`, or closing the HTTP stream).
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, UpstreamError> {
        self.request_observed(method, params, None).await
    }

    /// [`Upstream::request`], the notifications on the request's own
    /// response stream also handed to `on_stream` ([`OnStream`]).
    async fn request_observed(
        &self,
        method: &str,
        params: Option<Value>,
        on_stream: Option<OnStream<'_>>,
    ) -> Result<Value, UpstreamError> {
        async {
            // The live connection, or (rarely; boxed, its future is large)
            // a new one.
            let conn = match self.ready_connection() {
                Some(conn) => conn,
                None => Box::pin(self.connection(Waiting::Request)).await?,
            };
            // Boxed: the futures above this one stay small, so moving them
            // (each `.await` on the way does) copies little.
            match Box::pin(conn.request_observed(method, params.clone(), on_stream)).await {
                Err(UpstreamError::SessionExpired { .. }) => {
                    tracing::info!(%method, "session expired; re-negotiating and retrying once");
                    Box::pin(self.connection(Waiting::Always))
                        .await?
                        .request_observed(method, params, on_stream)
                        .await
                }
                other => other,
            }
        }
        .instrument(self.inner.span.clone())
        .await
    }

    /// Holds a 2026-07-28 `subscriptions/listen` request open on the
    /// current connection (basic/utilities/subscriptions): `filter` is the
    /// `notifications` object, e.g. `{"toolsListChanged": true}`. The
    /// server's notifications on it reach [`Upstream::subscribe`] like any
    /// other. Returns the `result` the server ends the subscription with
    /// (it does so only when it stops listening, e.g. on shutdown), or the
    /// error that ended it: the connection closing, or a JSON-RPC error
    /// (-32601 from a server without subscriptions). Waits at most
    /// `limit`. Never opens a connection: without a live one it fails at
    /// once with [`UpstreamError::NoResponse`]. Dropping the future cancels
    /// the request upstream.
    pub async fn listen(&self, filter: Value, limit: Duration) -> Result<Value, UpstreamError> {
        let Some(conn) = self.ready_connection() else {
            return Err(UpstreamError::NoResponse {
                server: self.name().to_owned(),
                method: "subscriptions/listen".into(),
                detail: "the server is not connected".into(),
            });
        };
        conn.request_within(
            "subscriptions/listen",
            Some(serde_json::json!({ "notifications": filter })),
            limit,
        )
        .instrument(self.inner.span.clone())
        .await
    }

    /// Every tool definition, exactly as the server sent them, following
    /// every `nextCursor` (the page walker, [`pages::walk`]), with the
    /// list's `ttlMs` ([`pages::Walked::ttl_ms`]). A server without the
    /// tools capability has none.
    pub async fn list_tools(&self) -> Result<pages::Walked, UpstreamError> {
        let conn = self.connection(Waiting::Always).await?;
        match conn.list_tools().await {
            Err(UpstreamError::SessionExpired { .. }) => {
                self.connection(Waiting::Always).await?.list_tools().await
            }
            other => other,
        }
    }

    /// Every entry of `list` ([`pages::RESOURCES`],
    /// [`pages::RESOURCE_TEMPLATES`], [`pages::PROMPTS`], or
    /// [`pages::TOOLS`] without [`Upstream::list_tools`]'s checks), exactly
    /// as the server sent them, following every `nextCursor`
    /// ([`pages::walk`]); empty when the server does not declare the
    /// list's capability. Connects first when needed.
    pub async fn list(&self, list: pages::ListMethod) -> Result<pages::Walked, UpstreamError> {
        async {
            let conn = self.connection(Waiting::Always).await?;
            match conn.list(list).await {
                Err(UpstreamError::SessionExpired { .. }) => {
                    self.connection(Waiting::Always).await?.list(list).await
                }
                other => other,
            }
        }
        .instrument(self.inner.span.clone())
        .await
    }

    /// Calls a tool outside any session: [`Upstream::call_tool_in`] with an
    /// empty context.
    pub async fn call_tool(&self, params: Value) -> Result<Value, UpstreamError> {
        self.call_tool_in(&params, &CallContext::default()).await
    }

    /// Calls a tool for the call in `context`. `params` is the whole
    /// `tools/call` params object (`name`, `arguments`, `_meta`, anything
    /// else), forwarded as given (borrowed: a caller that may send the call
    /// again keeps it without a copy); the result is the raw
    /// `CallToolResult`.
    /// An `isError` result is a successful call here. Interactions as in
    /// [`Upstream::request_in`]. Counted in the call metrics by tool and
    /// outcome.
    pub async fn call_tool_in(
        &self,
        params: &Value,
        context: &CallContext,
    ) -> Result<Value, UpstreamError> {
        let tool = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let started = Instant::now();
        let result = self.request_in("tools/call", params, context).await;
        let outcome = match &result {
            Ok(r) if r.get("isError") == Some(&Value::Bool(true)) => "tool_error",
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        self.inner.metrics.call(&tool, outcome, started.elapsed());
        result
    }

    /// Sends `tools/call`, `prompts/get` or `resources/read` (any other
    /// method is sent once, like [`Upstream::request`]) for the call in
    /// `context`, which is in flight until this returns:
    ///
    /// - 2025-11-25 server requests meanwhile may be attributed to it;
    /// - an `input_required` result (2026-07-28) is answered from the
    ///   context and the request retried with a new id, the original
    ///   params plus `inputResponses` and the `requestState` exactly as
    ///   received, while the server asks, up to `max_input_rounds` retries;
    /// - a -32042 error's URL elicitations are asked in the context's
    ///   session; if all are accepted the request is retried once,
    ///   otherwise the error is returned as is (`data` intact);
    /// - with a sink in `context.progress`, the server's progress for the
    ///   request is relayed to it ([`progress`]), and with
    ///   `context.log_level` its log messages at that level or more
    ///   severe, those sent on the request's own response stream
    ///   ([`logging`]).
    pub async fn request_in(
        &self,
        method: &str,
        params: &Value,
        context: &CallContext,
    ) -> Result<Value, UpstreamError> {
        let mut context = context.clone();
        if context.tool.is_empty() {
            let key = if method == "resources/read" {
                "uri"
            } else {
                "name"
            };
            // What the request is about, for interactions and logs: the
            // tool's name; `resources/read URI`, `prompts/get NAME`.
            if let Some(name) = params.get(key).and_then(Value::as_str) {
                context.tool = match method {
                    methods::TOOLS_CALL => name.to_owned(),
                    _ => format!("{method} {name}"),
                };
            }
        }
        // Progress asked for: the server sees a token of ours
        // ([`progress`]); logs asked for: a 2026-07-28 server is asked for
        // them ([`logging::ask`]); a call for a client that answers for
        // itself: the server is told that client's capabilities
        // ([`era::narrow_to`]). The params are copied only then.
        let logs = context.progress.clone().zip(context.log_level);
        // A token whose progress nobody relays is removed.
        let foreign = context.progress.is_none() && progress::has_token(params);
        let changed = (context.progress.is_some() || context.client.is_some() || foreign)
            .then(|| {
                let mut p = params.clone();
                if foreign {
                    progress::strip_token(&mut p);
                }
                let tokens = context
                    .progress
                    .as_ref()
                    .and_then(|_| progress::retoken(&mut p));
                if let Some((_, level)) = &logs {
                    logging::ask(&mut p, *level);
                }
                if let Some(client) = &context.client {
                    era::narrow_to(&mut p, client);
                }
                (tokens.is_some() || logs.is_some() || context.client.is_some() || foreign)
                    .then_some((p, tokens))
            })
            .flatten();
        let (params, tokens) = match &changed {
            Some((p, tokens)) => (p, tokens.clone()),
            None => (params, None),
        };
        // The log messages on the request's own stream go to the call.
        let relay_logs = logs.map(|(sink, level)| logging::relayer(sink, level));
        let on_stream = relay_logs.as_ref().map(|f| f as OnStream<'_>);
        let relay = &self.inner.relay;
        let work = async {
            let _in_flight = relay.enter(context.clone());
            let result = self.rounds(method, params, &context, on_stream).await;
            if let Err(UpstreamError::Rpc {
                code: jsonrpc::URL_ELICITATION_REQUIRED,
                data,
                ..
            }) = &result
                // Boxed: rare, and large.
                && Box::pin(relay.url_elicitations_required(&context, data.as_ref())).await
            {
                tracing::info!(%method, tool = %context.tool, "URL elicitations accepted; retrying the request once");
                return self.rounds(method, params, &context, on_stream).await;
            }
            result
        };
        match (context.progress.as_ref(), tokens) {
            (Some(sink), Some((ours, theirs))) => {
                // Boxed: only requests whose progress is relayed carry it.
                Box::pin(progress::relayed(self, ours, theirs, sink, work))
                    .instrument(self.inner.span.clone())
                    .await
            }
            _ => work.instrument(self.inner.span.clone()).await,
        }
    }

    /// The multi round-trip loop ([`mrtr::rounds`]) of one request; the
    /// notifications on each round's own stream also go to `on_stream`.
    async fn rounds(
        &self,
        method: &str,
        params: &Value,
        context: &CallContext,
        on_stream: Option<OnStream<'_>>,
    ) -> Result<Value, UpstreamError> {
        let max_rounds = self.inner.config.max_input_rounds;
        let relay = &self.inner.relay;
        match on_stream {
            Some(on_stream) => {
                let observed = Observed {
                    upstream: self,
                    on_stream,
                };
                // Boxed: only requests whose logs are relayed carry it.
                Box::pin(mrtr::rounds(
                    &observed, relay, method, params, context, max_rounds,
                ))
                .await
            }
            None => mrtr::rounds(self, relay, method, params, context, max_rounds).await,
        }
    }

    /// One request; a `tools/call` answered with `HeaderMismatch` is
    /// retried once after re-listing the tools. The notifications on its
    /// own stream also go to `on_stream`.
    async fn send(
        &self,
        method: &str,
        params: &Value,
        on_stream: Option<OnStream<'_>>,
    ) -> Result<Value, UpstreamError> {
        let result = self
            .request_observed(method, Some(params.clone()), on_stream)
            .await;
        if method == "tools/call"
            && let Err(UpstreamError::Rpc {
                code: jsonrpc::HEADER_MISMATCH,
                ..
            }) = &result
        {
            // The tool's x-mcp-header annotations may have changed: re-list
            // and retry once (streamable-http, "Client Behavior").
            if Box::pin(self.list_tools()).await.is_ok() {
                return self
                    .request_observed(method, Some(params.clone()), on_stream)
                    .await;
            }
        }
        result
    }

    /// Whether [`Upstream::shutdown`] has begun: what the server answers
    /// from now on (e.g. "Connection closed" as its stdin closes) is the
    /// shutdown's doing, not a fault of the server's.
    pub fn is_closing(&self) -> bool {
        self.inner.closing.is_cancelled()
    }

    /// Stops the server (stdio: close stdin, then SIGTERM, then SIGKILL,
    /// `grace` apart; HTTP: DELETE the session) and refuses further
    /// requests.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.closing.cancel();
        let previous = std::mem::replace(&mut *self.inner.state.lock().unwrap(), State::Closed);
        self.inner.link.send_modify(|l| l.connected = false);
        let conn = match previous {
            State::Ready { conn, .. } => Some(conn),
            State::Connecting { attempt, .. } => attempt.await.ok(),
            _ => None,
        };
        if let Some(conn) = conn {
            conn.transport().shutdown(grace).await;
        }
    }

    /// The connection when it is up and alive (what
    /// [`Upstream::connection`] answers at once).
    fn ready_connection(&self) -> Option<Arc<Connection>> {
        match &*self.inner.state.lock().unwrap() {
            State::Ready { conn, .. } if conn.transport().is_alive() => Some(conn.clone()),
            _ => None,
        }
    }

    /// The live connection, connecting first when needed. Concurrent callers
    /// share one attempt. With [`Waiting::Request`], after a failed attempt
    /// the next one starts at most [`REQUEST_BACKOFF`] after it, not after
    /// the whole backoff (up to [`RestartPolicy`]'s `max_backoff`): a
    /// server whose command cannot start fails each request in about a
    /// second (it used to take the backoff, up to 30 s), and a server that
    /// is back is served about as soon; every request that fails saw an
    /// attempt fail after it came.
    async fn connection(&self, waiting: Waiting) -> Result<Arc<Connection>, UpstreamError> {
        let (attempt, failed, hurry) = {
            let mut state = self.inner.state.lock().unwrap();
            // The server ended the HTTP session: a new one is a renewal.
            let renewal =
                matches!(&*state, State::Ready { conn, .. } if conn.transport().session_ended());
            let next = match &*state {
                State::Ready { conn, .. } if conn.transport().is_alive() => return Ok(conn.clone()),
                // The connection died. A stdio exit counts as a failure
                // unless the server had been up long enough; an expired
                // HTTP session does not count.
                State::Ready { conn, failures } => Err((
                    if conn.transport().is_http()
                        || conn.opened().elapsed() >= self.inner.config.restart.reset_after
                    {
                        0
                    } else {
                        failures + 1
                    },
                    None,
                )),
                State::Connecting {
                    attempt,
                    failed,
                    hurry,
                } => Ok((attempt.clone(), *failed, hurry.clone())),
                State::Idle { failures, failed } => Err((*failures, *failed)),
                State::Closed => {
                    return Err(UpstreamError::Closed {
                        server: self.name().to_owned(),
                    });
                }
            };
            match next {
                Ok(joined) => joined,
                Err((failures, failed)) => {
                    // An oauth server without a token: not contacted at all.
                    if let Some(e) = self.inner.not_authorized() {
                        return Err(e);
                    }
                    let hurry = tokio_util::sync::CancellationToken::new();
                    let attempt = self.start_attempt(failures, renewal, hurry.clone());
                    *state = State::Connecting {
                        attempt: attempt.clone(),
                        failed,
                        hurry: hurry.clone(),
                    };
                    (attempt, failed, hurry)
                }
            }
        };
        if let (Waiting::Request, Some(at)) = (waiting, failed) {
            tokio::select! {
                result = attempt.clone() => return result,
                () = tokio::time::sleep_until(at + REQUEST_BACKOFF) => hurry.cancel(),
            }
        }
        attempt.await
    }

    /// Opens a new connection after `delay(failures)`; counted as a
    /// restart, or as a session renewal when `renewal` (the server ended
    /// our HTTP session).
    fn start_attempt(
        &self,
        failures: u32,
        renewal: bool,
        hurry: tokio_util::sync::CancellationToken,
    ) -> ConnectFuture {
        let inner = self.inner.clone();
        let delay = inner.config.restart.delay(failures);
        let span = inner.span.clone();
        let task = tokio::spawn(async move {
            if !delay.is_zero() {
                tracing::info!(server = %inner.config.name, delay_ms = delay.as_millis() as u64, "waiting before reconnecting");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    // A request waited long enough ([`REQUEST_BACKOFF`]).
                    () = hurry.cancelled() => {}
                    // Shutting down: no reason to wait, nor to connect.
                    _ = inner.closing.cancelled() => {
                        return Err(UpstreamError::Closed {
                            server: inner.config.name.clone(),
                        });
                    }
                }
            }
            if inner.attempts.fetch_add(1, Ordering::Relaxed) > 0 {
                if renewal {
                    inner.metrics.session_renewed();
                } else {
                    inner.metrics.restart();
                }
            }
            let result = Connection::open(
                inner.config.clone(),
                inner.ids.clone(),
                inner.inbound.clone(),
                inner.metrics.clone(),
                inner.http_client.as_ref(),
            )
            .await
            .map(Arc::new);
            // The token was withdrawn while negotiating: not connected.
            let result = match (result, inner.not_authorized()) {
                (Ok(conn), Some(e)) => {
                    conn.transport().abandon(e.to_string());
                    Err(e)
                }
                (result, _) => result,
            };
            let mut state = inner.state.lock().unwrap();
            if matches!(*state, State::Closed) {
                return result;
            }
            match &result {
                Ok(conn) => {
                    *state = State::Ready {
                        conn: conn.clone(),
                        failures,
                    };
                    drop(state);
                    let mut generation = 0;
                    inner.link.send_modify(|l| {
                        l.connections += 1;
                        l.connected = true;
                        generation = l.connections;
                    });
                    watch_exit(Arc::downgrade(&inner), conn.clone(), generation);
                }
                // No token (stage D): not a failure of the server's; the
                // watcher connects when a token comes.
                Err(e @ UpstreamError::NotAuthorized { .. }) => {
                    tracing::info!(server = %inner.config.name, reason = %e, "not connecting: no access token");
                    *state = State::Idle {
                        failures,
                        failed: None,
                    };
                    drop(state);
                    inner.link.send_modify(|l| {
                        l.connected = false;
                        l.last_error = Some(inner.scrubbed(&e.to_string()));
                    });
                }
                Err(e) => {
                    tracing::warn!(server = %inner.config.name, error = %e, "connecting failed");
                    *state = State::Idle {
                        failures: failures + 1,
                        failed: Some(tokio::time::Instant::now()),
                    };
                    drop(state);
                    inner.link.send_modify(|l| {
                        l.connected = false;
                        l.last_error = Some(inner.scrubbed(&e.to_string()));
                    });
                }
            }
            result
        }
        .instrument(span));
        let inner = self.inner.clone();
        async move {
            task.await.unwrap_or_else(|e| {
                // The task ended (a bug: it panicked) without recording its
                // outcome: recorded here as a failed attempt, so the next
                // one waits its backoff instead of every caller joining
                // this finished attempt at once, forever.
                tracing::error!(server = %inner.config.name, error = %e, "the connection task failed");
                let error = UpstreamError::protocol(
                    &inner.config.name,
                    "the connection task failed (see the sidecar's log)",
                );
                {
                    let mut state = inner.state.lock().unwrap();
                    if matches!(*state, State::Connecting { .. }) {
                        *state = State::Idle {
                            failures: failures + 1,
                            failed: Some(tokio::time::Instant::now()),
                        };
                    }
                }
                inner.link.send_modify(|l| {
                    l.connected = false;
                    l.last_error = Some(inner.scrubbed(&error.to_string()));
                });
                Err(error)
            })
        }
        .boxed()
        .shared()
    }
}

impl mrtr::Sender for Upstream {
    type Error = UpstreamError;

    fn send<'a>(
        &'a self,
        method: &'a str,
        params: &'a Value,
    ) -> impl Future<Output = Result<Value, UpstreamError>> + Send + 'a {
        Upstream::send(self, method, params, None)
    }
}

/// An upstream whose requests hand the notifications on their own streams
/// to `on_stream` (a call's log messages, [`logging`]).
struct Observed<'a> {
    upstream: &'a Upstream,
    on_stream: OnStream<'a>,
}

impl mrtr::Sender for Observed<'_> {
    type Error = UpstreamError;

    fn send<'a>(
        &'a self,
        method: &'a str,
        params: &'a Value,
    ) -> impl Future<Output = Result<Value, UpstreamError>> + Send + 'a {
        self.upstream.send(method, params, Some(self.on_stream))
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.dropped.cancel();
    }
}

impl Inner {
    /// `text` without the server's secret values (`[redacted]`).
    fn scrubbed(&self, text: &str) -> String {
        self.secrets.scrub_log(text)
    }

    /// `auth = "oauth"` without an access token to send:
    /// [`UpstreamError::NotAuthorized`] with the control plane's reason.
    fn not_authorized(&self) -> Option<UpstreamError> {
        let tokens = self.config.oauth.as_ref()?;
        tokens
            .authorized()
            .is_none()
            .then(|| auth::not_authorized(tokens))
    }

    /// The access token was withdrawn (`reason`): the connection, if any,
    /// is dropped without a word to the server (its requests in flight
    /// fail at their next step), and the link says not connected, and why.
    fn withdraw(&self, reason: String) {
        let conn = {
            let mut state = self.state.lock().unwrap();
            match std::mem::replace(
                &mut *state,
                State::Idle {
                    failures: 0,
                    failed: None,
                },
            ) {
                State::Ready { conn, .. } => Some(conn),
                other => {
                    *state = other;
                    None
                }
            }
        };
        self.link.send_if_modified(|l| {
            let next = Some(reason.clone());
            if !l.connected && l.last_error == next {
                return false;
            }
            l.connected = false;
            l.last_error = next;
            true
        });
        if let Some(conn) = conn {
            tracing::info!(server = %self.config.name, %reason, "no access token: disconnected until the control plane sends one");
            conn.transport().abandon(reason);
        }
    }
}

/// `auth = "oauth"`: follows the server's access token; when the control
/// plane withdraws it (`needs_authorization`, `needs_reauthorization`),
/// the connection is dropped at once ([`Inner::withdraw`]). A new token
/// needs nothing here: requests read it when they are sent, and the
/// watcher connects when [`Upstream::authorized`] says so. Without a
/// runtime (a session built outside one) nothing follows: requests still
/// refuse to go out without a token.
fn follow_tokens(inner: &Arc<Inner>, tokens: crate::oauth::Tokens) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let weak = Arc::downgrade(inner);
    let dropped = inner.dropped.clone();
    let mut updates = tokens.subscribe();
    runtime.spawn(async move {
        loop {
            tokio::select! {
                changed = updates.changed() => if changed.is_err() { return },
                () = dropped.cancelled() => return,
            }
            if updates
                .borrow_and_update()
                .as_ref()
                .is_some_and(crate::oauth::AccessToken::is_authorized)
            {
                continue;
            }
            let Some(inner) = weak.upgrade() else { return };
            inner.withdraw(tokens.reason());
        }
    });
}

/// How long a liveness probe may wait for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Probes an HTTP server each time it has not been heard from for `every`:
/// `ping` in 2025-11-25, `server/discover` in 2026-07-28 (which removed
/// `ping`). The probe is an ordinary request of the connection, so the
/// connection's own rules decide what it means: a server that cannot be
/// connected to, or that ended our session (404), marks the connection
/// lost. Any other answer, an error included (a server without `ping`
/// answers -32601), shows the server is there. A probe left unanswered
/// for [`PROBE_TIMEOUT`] is logged (once until one is answered) and
/// does not end the connection: calls in flight may still be answered.
/// Never returns.
async fn probe_while_silent(server: &str, conn: &Connection, every: Duration) {
    let method = match conn.negotiated().era {
        Era::Legacy => methods::PING,
        Era::Modern => methods::SERVER_DISCOVER,
    };
    let mut answered = true;
    loop {
        let silent = conn.transport().silent_for().unwrap_or_default();
        if silent < every {
            tokio::time::sleep(every - silent).await;
            continue;
        }
        match conn.request_within(method, None, PROBE_TIMEOUT).await {
            Err(e @ error::UpstreamError::Timeout { .. }) => {
                if answered {
                    tracing::warn!(%server, %method, error = %e, "the server did not answer a liveness probe; calls in flight may still be answered");
                }
                answered = false;
            }
            Err(e) if e.is_connection_failure() => {
                // The connection is marked lost (or, for a 404 to our
                // session, renewed): `exited` resolves.
                tracing::debug!(%server, %method, error = %e, "liveness probe failed");
            }
            Ok(_) | Err(_) => {
                if !answered {
                    tracing::info!(%server, %method, "the server answers liveness probes again");
                }
                answered = true;
            }
        }
        // Its answer was heard: the next probe is `every` from now.
        tokio::time::sleep(every.min(PROBE_TIMEOUT)).await;
    }
}

/// A connection that ends sooner than this after it started is restarted
/// only after this long.
const QUICK_EXIT: std::time::Duration = std::time::Duration::from_secs(1);

/// When a stdio server exits, restart it in the background (if the policy
/// is eager) so the next request finds it ready. `generation` is the
/// connection's number in [`Link::connections`].
///
/// Meanwhile an HTTP server that has not been heard from for
/// [`config::UpstreamConfig::liveness_interval`] is probed
/// ([`probe_while_silent`]), so one that went away while nothing was sent
/// is found gone (and reported `down`) as a request would have found it.
fn watch_exit(inner: Weak<Inner>, conn: Arc<Connection>, generation: u64) {
    let Some((dropped, liveness, name)) = inner.upgrade().map(|i| {
        (
            i.dropped.clone(),
            i.config.liveness_interval,
            i.config.name.clone(),
        )
    }) else {
        return;
    };
    let weak_inner = inner.clone();
    tokio::spawn(async move {
        let started = std::time::Instant::now();
        let status = tokio::select! {
            status = conn.transport().exited() => status,
            // Every handle is gone: dropping `conn` stops the server.
            () = dropped.cancelled() => return,
            // Never ends; a probe that finds the server gone makes
            // `exited` resolve.
            () = probe_while_silent(&name, &conn, liveness.unwrap_or(Duration::MAX)), if liveness.is_some() && conn.transport().is_http() => return,
        };
        let http = conn.transport().is_http();
        let renewal = conn.transport().session_ended();
        drop(conn);
        let Some(mut inner) = inner.upgrade() else {
            return;
        };
        // An oauth server whose token was withdrawn: the link says why
        // already, and nothing reconnects until a token comes.
        if inner.not_authorized().is_some() {
            return;
        }
        inner.link.send_if_modified(|l| {
            // A newer connection may already be up.
            if l.connections != generation {
                return false;
            }
            l.connected = false;
            l.last_error = Some(if http {
                format!("server {} is gone: {status}", inner.config.name)
            } else {
                format!("server {} exited ({status})", inner.config.name)
            });
            true
        });
        if !inner.config.restart.eager || matches!(*inner.state.lock().unwrap(), State::Closed) {
            return;
        }
        if renewal {
            // Logged when the 404 came (`HttpConnection`).
            tracing::debug!(server = %inner.config.name, %status, "opening a new session");
        } else if http {
            // Logged when the connection was found lost (`HttpConnection`).
            tracing::debug!(server = %inner.config.name, %status, "connecting again");
        } else {
            tracing::info!(server = %inner.config.name, %status, "server exited; restarting");
        }
        // A connection lost at once (a server that refuses each new one)
        // is not restarted in a tight loop: at most once a second.
        if started.elapsed() < QUICK_EXIT {
            let dropped = inner.dropped.clone();
            drop(inner);
            tokio::select! {
                () = tokio::time::sleep(QUICK_EXIT) => {}
                () = dropped.cancelled() => return,
            }
            let Some(again) = weak_inner.upgrade() else {
                return;
            };
            inner = again;
        }
        let upstream = Upstream { inner };
        if let Err(e) = upstream.connection(Waiting::Always).await {
            // `connecting failed` was logged (WARN) by the attempt.
            tracing::debug!(server = %upstream.name(), error = %e, "restart failed; tried again with backoff (by the sidecar's watcher, or the next request)");
        }
    });
}
