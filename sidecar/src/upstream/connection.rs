//! One live connection to a server: a [`Transport`] plus what negotiation
//! ([`super::era`]) established. It decorates each request for its era
//! (modern `_meta` and HTTP request-metadata headers, or the legacy
//! `MCP-Protocol-Version` header, without a 2026-07-28 `logLevel`) and
//! gives it the per-request timeout; the transport turns JSON-RPC errors
//! into [`UpstreamError::Rpc`] without losing `data`. Its four paginated
//! lists go through the one page walker, [`super::pages::walk`].

use super::config::UpstreamConfig;
use super::era::{self, Era, Negotiated};
use super::error::UpstreamError;
use super::http::{ExtraHeaders, OnStream};
use super::inbound::Inbound;
use super::logging;
use super::metrics::ServerMetrics;
use super::pages::{self, ListMethod, Walked};
use super::transport::Transport;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_mcp::headers::{self, HeaderParam};

/// Handshakes one [`Connection::open`] makes when the server keeps ending
/// the new session during it (HTTP 404): the first and two more.
pub const HANDSHAKE_ATTEMPTS: u32 = 3;

/// A negotiated connection.
#[derive(Debug)]
pub struct Connection {
    transport: Transport,
    negotiated: Negotiated,
    config: Arc<UpstreamConfig>,
    opened: Instant,
    /// `x-mcp-header` parameters per tool, from the last `tools/list`
    /// (2026-07-28 over HTTP only).
    header_params: Mutex<HashMap<String, Vec<HeaderParam>>>,
    /// The per-request `_meta` entries of the 2026-07-28 era, built once.
    modern_meta: Map<String, Value>,
}

impl Connection {
    /// Opens the transport and negotiates the era; a session the server
    /// ends during the handshake is opened again, up to
    /// [`HANDSHAKE_ATTEMPTS`] handshakes in all (each counted as a session
    /// renewal). Errors: the transport, the negotiation, or
    /// [`UpstreamError::SessionExpired`] after the last attempt.
    pub async fn open(
        config: Arc<UpstreamConfig>,
        ids: Arc<AtomicU64>,
        inbound: Arc<Inbound>,
        metrics: ServerMetrics,
        http_client: Option<&reqwest::Client>,
    ) -> Result<Self, UpstreamError> {
        // A server may end the session it just made (HTTP 404 to the
        // `notifications/initialized` or the first request that carries
        // it): the handshake starts over on a new session, a bounded number
        // of times.
        let mut attempt = 1;
        let (transport, negotiated) = loop {
            let transport = Transport::open(
                &config,
                ids.clone(),
                inbound.clone(),
                metrics.clone(),
                http_client,
            )?;
            match era::negotiate(&transport, &config).await {
                Ok(n) => break (transport, n),
                Err(UpstreamError::SessionExpired { .. }) if attempt < HANDSHAKE_ATTEMPTS => {
                    attempt += 1;
                    metrics.session_renewed();
                    transport.shutdown(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    transport.shutdown(Duration::from_millis(200)).await;
                    return Err(e);
                }
            }
        };
        tracing::info!(
            server = %config.name,
            era = ?negotiated.era,
            protocol_version = %negotiated.protocol_version,
            server_info = %inbound.secrets().scrub_log(&negotiated.server_info.to_string()),
            "connected"
        );
        Ok(Connection {
            transport,
            negotiated,
            modern_meta: era::modern_meta(&config),
            config,
            opened: Instant::now(),
            header_params: Mutex::new(HashMap::new()),
        })
    }

    /// What negotiation established.
    pub fn negotiated(&self) -> &Negotiated {
        &self.negotiated
    }

    /// The transport.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// When the connection was opened.
    pub fn opened(&self) -> Instant {
        self.opened
    }

    /// Sends a request decorated for the era and returns its `result`.
    /// `params` is forwarded as given (unknown fields and `_meta` kept); in
    /// the modern era the protocol's own `_meta` keys are set in it, in the
    /// legacy era a 2026-07-28 `logLevel` is dropped from it.
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Value, UpstreamError> {
        self.request_observed(method, params, None).await
    }

    /// [`Connection::request`], the notifications on the request's own
    /// stream also handed to `on_stream` ([`OnStream`]).
    pub async fn request_observed(
        &self,
        method: &str,
        params: Option<Value>,
        on_stream: Option<OnStream<'_>>,
    ) -> Result<Value, UpstreamError> {
        let (params, headers) = self.decorate(method, params);
        let limit = self.config.request_timeout;
        self.transport
            .call(method, params, &headers, limit, on_stream)
            .await
    }

    /// [`Connection::request`] with its own time limit instead of the
    /// server's `request_timeout` (a long-lived `subscriptions/listen`).
    pub async fn request_within(
        &self,
        method: &str,
        params: Option<Value>,
        limit: Duration,
    ) -> Result<Value, UpstreamError> {
        let (params, headers) = self.decorate(method, params);
        self.transport
            .call(method, params, &headers, limit, None)
            .await
    }

    fn decorate(&self, method: &str, params: Option<Value>) -> (Option<Value>, ExtraHeaders) {
        match self.negotiated.era {
            Era::Legacy => (
                params.map(|mut p| {
                    // 2025-11-25 has no per-request log level.
                    logging::unask(&mut p);
                    era::strip_own(&mut p);
                    p
                }),
                era::legacy_headers(&self.negotiated.protocol_version),
            ),
            Era::Modern => {
                let mut params = match params {
                    Some(Value::Object(m)) => m,
                    None | Some(Value::Null) => Map::new(),
                    Some(other) => {
                        // Not an object: forward untouched; the server will say what is wrong.
                        return (Some(other), self.modern_headers(method, None));
                    }
                };
                let meta = params
                    .entry("_meta")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(meta) = meta {
                    era::apply_meta(meta, &self.modern_meta);
                }
                let params = Value::Object(params);
                let headers = self.modern_headers(method, Some(&params));
                (Some(params), headers)
            }
        }
    }

    /// `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and `Mcp-Param-*`.
    fn modern_headers(&self, method: &str, params: Option<&Value>) -> ExtraHeaders {
        let mut h = vec![
            (
                "mcp-protocol-version".to_owned(),
                self.negotiated.protocol_version.clone(),
            ),
            ("mcp-method".to_owned(), method.to_owned()),
        ];
        if !self.transport.is_http() {
            return h;
        }
        let name_field = match method {
            "tools/call" | "prompts/get" => "name",
            "resources/read" => "uri",
            // SEP-2663 "Streamable HTTP: Routing Headers".
            "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
            _ => return h,
        };
        let Some(name) = params
            .and_then(|p| p.get(name_field))
            .and_then(Value::as_str)
        else {
            return h;
        };
        h.push(("mcp-name".to_owned(), headers::encode_value(name)));
        if method == "tools/call" {
            let arguments = params
                .and_then(|p| p.get("arguments"))
                .unwrap_or(&Value::Null);
            if let Some(list) = self.header_params.lock().unwrap().get(name) {
                for p in list {
                    if let Some(v) = headers::param_value(arguments, &p.path) {
                        h.push((format!("mcp-param-{}", p.name), v));
                    }
                }
            }
        }
        h
    }

    /// Lists every tool, following `nextCursor` to the end ([`Connection::list`]).
    /// A server without the `tools` capability has none (no request is
    /// sent). Over 2026-07-28 HTTP, tools with invalid `x-mcp-header`
    /// annotations are left out with a warning (streamable-http, "Schema
    /// Extension").
    pub async fn list_tools(&self) -> Result<Walked, UpstreamError> {
        let mut tools = self.list(pages::TOOLS).await?;
        tools.entries = self.check_tools(std::mem::take(&mut tools.entries));
        Ok(tools)
    }

    /// Every entry of `list`, following every `nextCursor` ([`pages::walk`]:
    /// an empty-string cursor goes on, a repeated cursor or an endless list
    /// is an error, more than [`pages::MAX_ENTRIES`] entries are cut with a
    /// warning). A server that does not declare the list's capability has
    /// an empty list: nothing is asked.
    pub async fn list(&self, list: ListMethod) -> Result<Walked, UpstreamError> {
        if !self.negotiated.declares(list.capability) {
            return Ok(Walked::default());
        }
        pages::walk(
            &self.config.name,
            list,
            pages::Limits::default(),
            |params| self.request(list.method, params),
        )
        .await
    }

    fn check_tools(&self, tools: Vec<Value>) -> Vec<Value> {
        if !(self.transport.is_http() && self.negotiated.era == Era::Modern) {
            return tools;
        }
        let mut params = HashMap::new();
        let kept = tools
            .into_iter()
            .filter(|tool| {
                let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
                let schema = tool.get("inputSchema").unwrap_or(&Value::Null);
                match headers::header_params(schema) {
                    Ok(list) => {
                        if !list.is_empty() {
                            params.insert(name.to_owned(), list);
                        }
                        true
                    }
                    Err(reason) => {
                        tracing::warn!(server = %self.config.name, tool = %name, %reason, "leaving out a tool with an invalid x-mcp-header annotation");
                        false
                    }
                }
            })
            .collect();
        *self.header_params.lock().unwrap() = params;
        kept
    }
}
