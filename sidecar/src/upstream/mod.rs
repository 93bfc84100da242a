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
//! and exit status. The one exception is an HTTP 404 to a request that
//! carried an expired `MCP-Session-Id`: the server never processed it, so
//! it is sent again, once, on a new session.
//!
//! Everything is `serde_json::Value`: tool definitions and results come
//! back exactly as the server sent them.

pub mod config;
pub mod connection;
pub mod era;
pub mod error;
pub mod framing;
pub mod headers;
pub mod http;
pub mod inbound;
pub mod jsonrpc;
pub mod metrics;
pub mod stdio;

pub use config::{
    EraPreference, HttpConfig, RestartPolicy, StdioConfig, TransportConfig, UpstreamConfig,
};
pub use era::{Era, Negotiated};
pub use error::UpstreamError;
pub use metrics::{ServerMetrics, UpstreamMetrics};

use connection::Connection;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use inbound::Inbound;
use serde_json::Value;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};
use tracing::Instrument;

type ConnectFuture = Shared<BoxFuture<'static, Result<Arc<Connection>, UpstreamError>>>;

enum State {
    /// Not connected. `failures` counts consecutive failed or short-lived
    /// connections, for the backoff.
    Idle { failures: u32 },
    /// A connection attempt is under way; everyone waits on the same one.
    Connecting(ConnectFuture),
    /// Connected.
    Ready {
        conn: Arc<Connection>,
        failures: u32,
    },
    /// Shut down; no more connections.
    Closed,
}

struct Inner {
    config: Arc<UpstreamConfig>,
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
    /// What [`Upstream::link`] reports.
    link: watch::Sender<Link>,
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
    /// [`Upstream::connect`]). Errors: the HTTP client cannot be built.
    pub fn new(config: UpstreamConfig, metrics: &UpstreamMetrics) -> Result<Self, UpstreamError> {
        let http_client = match &config.transport {
            TransportConfig::Http(_) => Some(
                http::client()
                    .map_err(|e| UpstreamError::io(&config.name, "building the HTTP client", e))?,
            ),
            TransportConfig::Stdio(_) => None,
        };
        let span = tracing::info_span!("upstream", server = %config.name);
        Ok(Upstream {
            inner: Arc::new(Inner {
                inbound: Arc::new(Inbound::new(&config.name)),
                metrics: metrics.server(&config.name),
                config: Arc::new(config),
                ids: Arc::new(AtomicU64::new(1)),
                http_client,
                state: Mutex::new(State::Idle { failures: 0 }),
                span,
                attempts: AtomicU64::new(0),
                dropped: tokio_util::sync::CancellationToken::new(),
                link: watch::Sender::new(Link::default()),
            }),
        })
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// The configuration.
    pub fn config(&self) -> &UpstreamConfig {
        &self.inner.config
    }

    /// Connects if needed and returns what negotiation established.
    pub async fn connect(&self) -> Result<Negotiated, UpstreamError> {
        Ok(self.connection().await?.negotiated().clone())
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
        async {
            let conn = self.connection().await?;
            match conn.request(method, params.clone()).await {
                Err(UpstreamError::SessionExpired { .. }) => {
                    tracing::info!(%method, "session expired; re-negotiating and retrying once");
                    self.connection().await?.request(method, params).await
                }
                other => other,
            }
        }
        .instrument(self.inner.span.clone())
        .await
    }

    /// Every tool definition, exactly as the server sent them, following
    /// every `nextCursor`. A server without the tools capability has none.
    pub async fn list_tools(&self) -> Result<Vec<Value>, UpstreamError> {
        let conn = self.connection().await?;
        match conn.list_tools().await {
            Err(UpstreamError::SessionExpired { .. }) => {
                self.connection().await?.list_tools().await
            }
            other => other,
        }
    }

    /// Calls a tool. `params` is the whole `tools/call` params object
    /// (`name`, `arguments`, `_meta`, anything else), forwarded as given;
    /// the result is the raw `CallToolResult`. An `isError` result is a
    /// successful call here. Counted in the call metrics by tool and outcome.
    pub async fn call_tool(&self, params: Value) -> Result<Value, UpstreamError> {
        let tool = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let started = Instant::now();
        let mut result = self.request("tools/call", Some(params.clone())).await;
        if let Err(UpstreamError::Rpc {
            code: jsonrpc::HEADER_MISMATCH,
            ..
        }) = &result
        {
            // The tool's x-mcp-header annotations may have changed: re-list
            // and retry once (streamable-http, "Client Behavior").
            if self.list_tools().await.is_ok() {
                result = self.request("tools/call", Some(params)).await;
            }
        }
        let outcome = match &result {
            Ok(r) if r.get("isError") == Some(&Value::Bool(true)) => "tool_error",
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        self.inner.metrics.call(&tool, outcome, started.elapsed());
        result
    }

    /// Stops the server (stdio: close stdin, then SIGTERM, then SIGKILL,
    /// `grace` apart; HTTP: DELETE the session) and refuses further
    /// requests.
    pub async fn shutdown(&self, grace: Duration) {
        let previous = std::mem::replace(&mut *self.inner.state.lock().unwrap(), State::Closed);
        self.inner.link.send_modify(|l| l.connected = false);
        let conn = match previous {
            State::Ready { conn, .. } => Some(conn),
            State::Connecting(f) => f.await.ok(),
            _ => None,
        };
        if let Some(conn) = conn {
            conn.transport().shutdown(grace).await;
        }
    }

    /// The live connection, connecting first when needed. Concurrent callers
    /// share one attempt.
    async fn connection(&self) -> Result<Arc<Connection>, UpstreamError> {
        let attempt = {
            let mut state = self.inner.state.lock().unwrap();
            let next = match &*state {
                State::Ready { conn, .. } if conn.transport().is_alive() => return Ok(conn.clone()),
                // The connection died. A stdio exit counts as a failure
                // unless the server had been up long enough; an expired
                // HTTP session does not count.
                State::Ready { conn, failures } => Err(
                    if conn.transport().is_http()
                        || conn.opened().elapsed() >= self.inner.config.restart.reset_after
                    {
                        0
                    } else {
                        failures + 1
                    },
                ),
                State::Connecting(f) => Ok(f.clone()),
                State::Idle { failures } => Err(*failures),
                State::Closed => {
                    return Err(UpstreamError::Closed {
                        server: self.name().to_owned(),
                    });
                }
            };
            match next {
                Ok(f) => f,
                Err(failures) => {
                    let f = self.start_attempt(failures);
                    *state = State::Connecting(f.clone());
                    f
                }
            }
        };
        attempt.await
    }

    fn start_attempt(&self, failures: u32) -> ConnectFuture {
        let inner = self.inner.clone();
        let delay = inner.config.restart.delay(failures);
        let span = inner.span.clone();
        let task = tokio::spawn(async move {
            if !delay.is_zero() {
                tracing::info!(server = %inner.config.name, delay_ms = delay.as_millis() as u64, "waiting before reconnecting");
                tokio::time::sleep(delay).await;
            }
            if inner.attempts.fetch_add(1, Ordering::Relaxed) > 0 {
                inner.metrics.restart();
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
                Err(e) => {
                    tracing::warn!(server = %inner.config.name, error = %e, "connecting failed");
                    *state = State::Idle {
                        failures: failures + 1,
                    };
                    drop(state);
                    inner.link.send_modify(|l| {
                        l.connected = false;
                        l.last_error = Some(e.to_string());
                    });
                }
            }
            result
        }
        .instrument(span));
        let server = self.name().to_owned();
        async move {
            task.await.unwrap_or_else(|e| {
                Err(UpstreamError::protocol(
                    &server,
                    format!("connection task failed: {e}"),
                ))
            })
        }
        .boxed()
        .shared()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.dropped.cancel();
    }
}

/// When a stdio server exits, restart it in the background (if the policy
/// is eager) so the next request finds it ready. `generation` is the
/// connection's number in [`Link::connections`].
fn watch_exit(inner: Weak<Inner>, conn: Arc<Connection>, generation: u64) {
    let Some(dropped) = inner.upgrade().map(|i| i.dropped.clone()) else {
        return;
    };
    tokio::spawn(async move {
        let status = tokio::select! {
            status = conn.transport().exited() => status,
            // Every handle is gone: dropping `conn` stops the server.
            () = dropped.cancelled() => return,
        };
        drop(conn);
        let Some(inner) = inner.upgrade() else { return };
        inner.link.send_if_modified(|l| {
            // A newer connection may already be up.
            if l.connections != generation {
                return false;
            }
            l.connected = false;
            l.last_error = Some(format!("server {} exited ({status})", inner.config.name));
            true
        });
        if !inner.config.restart.eager || matches!(*inner.state.lock().unwrap(), State::Closed) {
            return;
        }
        tracing::info!(server = %inner.config.name, %status, "server exited; restarting");
        let upstream = Upstream { inner };
        if let Err(e) = upstream.connection().await {
            tracing::warn!(server = %upstream.name(), error = %e, "restart failed; the next request retries");
        }
    });
}
