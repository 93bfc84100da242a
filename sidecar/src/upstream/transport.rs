//! The transport under a connection: a stdio child process
//! ([`super::stdio`]) or a Streamable HTTP endpoint ([`super::http`]), with
//! the JSON-RPC id counter shared by every connection of one upstream (ids
//! never repeat across restarts). It sends one request and waits for its
//! answer within a time limit, turning a JSON-RPC error answer into
//! [`UpstreamError::Rpc`] without losing `data`; it knows nothing of eras
//! (the caller passes the headers a request needs). The notifications a
//! server sends on a request's own response stream (Streamable HTTP only)
//! may also be handed to that request ([`OnStream`]).
//!
//! What a request gets back, its result or its error, is scrubbed here of
//! the secret values the server was given ([`Secrets`]; what it sends
//! unasked is scrubbed by [`Inbound`]): a server that echoes its API key
//! in an error (`invalid key sk-…`) or a result does not hand it to the
//! engines behind the gateway.

use super::config::{TransportConfig, UpstreamConfig};
use super::error::UpstreamError;
use super::http::{ExtraHeaders, HttpConnection, OnStream};
use super::inbound::Inbound;
use super::metrics::ServerMetrics;
use super::stdio::StdioConnection;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use switchyard_common::server_spec::Secrets;
use switchyard_mcp::jsonrpc;

/// The transport under a connection, with the id counter shared by every
/// connection of one upstream (ids never repeat across restarts).
#[derive(Debug)]
pub struct Transport {
    server: String,
    ids: Arc<AtomicU64>,
    kind: Kind,
    /// The server's secret values, scrubbed from what it answers.
    secrets: Secrets,
}

#[derive(Debug)]
enum Kind {
    Stdio(StdioConnection),
    Http(Arc<HttpConnection>),
}

impl Transport {
    /// Opens the transport (starts the process, or prepares HTTP).
    pub fn open(
        config: &UpstreamConfig,
        ids: Arc<AtomicU64>,
        inbound: Arc<Inbound>,
        metrics: ServerMetrics,
        http_client: Option<&reqwest::Client>,
    ) -> Result<Self, UpstreamError> {
        let secrets = inbound.secrets().clone();
        let kind = match &config.transport {
            TransportConfig::Stdio(stdio) => Kind::Stdio(StdioConnection::spawn(
                &config.name,
                stdio,
                config.max_message_bytes,
                inbound,
                metrics,
            )?),
            TransportConfig::Http(http) => {
                let client = http_client.cloned().ok_or_else(|| {
                    UpstreamError::protocol(&config.name, "no HTTP client for an HTTP server")
                })?;
                Kind::Http(Arc::new(
                    HttpConnection::new(
                        &config.name,
                        client,
                        &http.url,
                        &http.headers,
                        config.max_message_bytes,
                        inbound,
                        metrics,
                    )?
                    .with_tokens(config.oauth.clone()),
                ))
            }
        };
        Ok(Transport {
            server: config.name.clone(),
            ids,
            kind,
            secrets,
        })
    }

    /// Sends a request and returns its `result`, or the error. `timeout`
    /// bounds the whole exchange; when it elapses the request is cancelled.
    /// The notifications on the request's own stream are also handed to
    /// `on_stream`, when given.
    pub async fn call(
        &self,
        method: &str,
        params: Option<Value>,
        headers: &ExtraHeaders,
        timeout: Duration,
        on_stream: Option<OnStream<'_>>,
    ) -> Result<Value, UpstreamError> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let msg = jsonrpc::request(id, method, params);
        let exchange = async {
            match &self.kind {
                Kind::Stdio(s) => s.request(id, &msg).await,
                // Boxed: the HTTP exchange's future is large, and stdio
                // calls would carry its size (and copy it) otherwise.
                Kind::Http(h) => Box::pin(h.request(id, method, &msg, headers, on_stream)).await,
            }
        };
        let mut response = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| UpstreamError::Timeout {
                server: self.server.clone(),
                method: method.to_owned(),
                after: timeout,
            })?
            .map_err(|e| e.scrubbed(&self.secrets))?;
        // Only the answer's result or error: its id stays as sent.
        for part in ["result", "error"] {
            if let Some(part) = response.get_mut(part) {
                self.secrets.scrub_json(part);
            }
        }
        if let Some(err) = jsonrpc::ErrorObject::from_response(&response) {
            return Err(UpstreamError::Rpc {
                server: self.server.clone(),
                method: method.to_owned(),
                code: err.code,
                message: err.message,
                data: err.data,
            });
        }
        match response {
            Value::Object(mut m) => Ok(m.remove("result").unwrap_or(Value::Null)),
            _ => unreachable!("classified as a response object"),
        }
    }

    /// Sends a notification.
    pub async fn notify(&self, msg: &Value, headers: &ExtraHeaders) -> Result<(), UpstreamError> {
        match &self.kind {
            Kind::Stdio(s) => s.send(msg),
            Kind::Http(h) => h.notify(msg, headers).await,
        }
    }

    /// Records that the legacy handshake chose `version`.
    pub fn set_legacy(&self, _version: &str) {
        if let Kind::Http(h) = &self.kind {
            h.set_legacy(true);
        }
    }

    /// Listens on the standalone GET stream (Streamable HTTP, 2025-11-25;
    /// see [`HttpConnection::listen`]) with the era's `headers`; nothing for
    /// stdio.
    pub fn listen(&self, headers: ExtraHeaders) {
        if let Kind::Http(h) = &self.kind {
            h.listen(headers);
        }
    }

    /// Whether the connection can still carry requests.
    pub fn is_alive(&self) -> bool {
        match &self.kind {
            Kind::Stdio(s) => s.is_alive(),
            Kind::Http(h) => h.is_alive(),
        }
    }

    /// Whether the server ended our HTTP session (a 404 to a request that
    /// carried it): the next connection renews the session rather than
    /// restarting the server. False for stdio.
    pub fn session_ended(&self) -> bool {
        match &self.kind {
            Kind::Stdio(_) => false,
            Kind::Http(h) => h.session_ended(),
        }
    }

    /// Whether the transport is HTTP.
    pub fn is_http(&self) -> bool {
        matches!(self.kind, Kind::Http(_))
    }

    /// The `MCP-Session-Id` the server assigned (Streamable HTTP).
    pub fn http_session_id(&self) -> Option<String> {
        match &self.kind {
            Kind::Stdio(_) => None,
            Kind::Http(h) => h.session_id(),
        }
    }

    /// The process id (stdio).
    pub fn pid(&self) -> Option<u32> {
        match &self.kind {
            Kind::Stdio(s) => s.pid(),
            Kind::Http(_) => None,
        }
    }

    /// Resolves when a stdio process exits (with its exit status), or when
    /// an HTTP server is found gone (with why; see
    /// [`HttpConnection::lost`]).
    pub async fn exited(&self) -> String {
        match &self.kind {
            Kind::Stdio(s) => s.exited().await,
            Kind::Http(h) => h.lost().await,
        }
    }

    /// How long an HTTP server has not been heard from
    /// ([`HttpConnection::silent_for`]); `None` for stdio, whose exit is
    /// seen at once.
    pub fn silent_for(&self) -> Option<Duration> {
        match &self.kind {
            Kind::Stdio(_) => None,
            Kind::Http(h) => Some(h.silent_for()),
        }
    }

    /// Stops using an HTTP connection without a word to the server (no
    /// DELETE; see [`HttpConnection::abandon`]): [`Transport::exited`]
    /// resolves with `reason`. Nothing for stdio.
    pub fn abandon(&self, reason: String) {
        if let Kind::Http(h) = &self.kind {
            h.abandon(reason);
        }
    }

    /// Stops the process (stdio: close stdin, SIGTERM, SIGKILL, `grace`
    /// apart) or ends the HTTP session (DELETE).
    pub async fn shutdown(&self, grace: Duration) {
        match &self.kind {
            Kind::Stdio(s) => {
                s.shutdown(grace).await;
            }
            Kind::Http(h) => h.close().await,
        }
    }
}
