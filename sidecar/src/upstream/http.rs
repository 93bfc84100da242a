//! The Streamable HTTP transport (basic/transports "Streamable HTTP", in
//! both the 2025-11-25 and the 2026-07-28 revisions).
//!
//! Every message is its own POST. A request's answer is either one JSON
//! object (`application/json`) or an SSE stream (`text/event-stream`) that
//! may carry notifications (and, in 2025-11-25, server requests) before the
//! response; media-type parameters such as `charset` are ignored. The
//! `MCP-Session-Id` the server assigns at `initialize` is echoed on every
//! later request; a 404 to a request that carried it means the session is
//! gone ([`UpstreamError::SessionExpired`]). A 2025-11-25 SSE stream that
//! ends before the response is resumed with GET and `Last-Event-ID`, after
//! the server's `retry` delay. Bodies and events are bounded by
//! `max_message_bytes`. A 2025-11-25 session that handles interactions
//! also listens on the standalone GET stream ([`HttpConnection::listen`]),
//! where a server sends requests and notifications not tied to one of ours.
//! Every notification is fanned out ([`Inbound`]); those read on a
//! request's own answer (its SSE stream, resumed or not, or its JSON body)
//! are also handed to that request ([`OnStream`]: how a call gets its log
//! messages, `super::logging`), never those of the GET stream. An `auth =
//! "oauth"` server's requests carry the control plane's access token, and
//! its refusals are handled by [`super::auth`].

use super::auth::{self, Failed};
use super::error::UpstreamError;
use super::inbound::Inbound;
use super::metrics::ServerMetrics;
use crate::oauth::Tokens;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_mcp::jsonrpc::{self, Kind};
use switchyard_mcp::sse::{self, SseError};
use tracing::Instrument;

/// `MCP-Session-Id` (2025-11-25 transports, "Session Management").
pub const SESSION_ID: &str = "mcp-session-id";
/// How often a 2025-11-25 SSE stream is resumed without progress before
/// the request fails.
const MAX_RESUMES_WITHOUT_PROGRESS: u32 = 5;
/// The longest wait before the standalone GET stream is opened again.
const MAX_STREAM_RETRY: Duration = Duration::from_secs(30);
/// Resume delay when the server sent no `retry` field.
const DEFAULT_RETRY: Duration = Duration::from_millis(500);
/// Bytes of an error body kept for messages.
const ERROR_BODY_PREVIEW: usize = 300;

/// One negotiated Streamable HTTP session (or, for 2026-07-28, one origin).
pub struct HttpConnection {
    server: String,
    client: reqwest::Client,
    url: reqwest::Url,
    static_headers: HeaderMap,
    /// `auth = "oauth"`: the access token every request carries.
    tokens: Option<Tokens>,
    session_id: Mutex<Option<String>>,
    /// 2025-11-25 semantics: cancel by notification, resume streams.
    legacy: AtomicBool,
    alive: AtomicBool,
    /// Set when the server ended our session (a 404 to a request that
    /// carried it): the connection is renewed, not restarted.
    session_ended: AtomicBool,
    max_message_bytes: usize,
    inbound: Arc<Inbound>,
    metrics: ServerMetrics,
    /// Stops the standalone GET stream.
    stop: tokio_util::sync::CancellationToken,
    /// Cancelled when the server is found gone: unreachable, or our session
    /// ended (404); see [`HttpConnection::lost`].
    lost: tokio_util::sync::CancellationToken,
    /// Why, once `lost`.
    lost_reason: Mutex<String>,
    /// When the connection was made, the origin of `heard_ms`.
    created: Instant,
    /// Milliseconds after `created` when the server was last heard from
    /// (an HTTP response to any request, or an event on the GET stream).
    heard_ms: AtomicU64,
}

impl Drop for HttpConnection {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl std::fmt::Debug for HttpConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConnection")
            .field("server", &self.server)
            .field(
                "url",
                &switchyard_common::server_spec::redacted_url(self.url.as_str()),
            )
            .finish()
    }
}

/// Extra headers for one request, as (name, value) pairs already encoded.
pub type ExtraHeaders = Vec<(String, String)>;

/// Where the notifications a server sends on one request's own response
/// stream go, besides the connection's fan-out ([`Inbound`]): over
/// Streamable HTTP, those of the POST's SSE stream (resumed or not) and of
/// a JSON body holding several messages, each as it is read, before the
/// request's response is returned. Never those of the standalone GET
/// stream; stdio has no stream per request, so nothing is ever handed to
/// it there. It must not block.
pub type OnStream<'a> = &'a (dyn Fn(&Value) + Send + Sync);

type EventStream = Pin<Box<dyn Stream<Item = Result<sse::Event, SseError>> + Send>>;

impl HttpConnection {
    /// A connection to `url`. Errors: an invalid URL or header (named).
    pub fn new(
        server: &str,
        client: reqwest::Client,
        url: &str,
        headers: &[(String, String)],
        max_message_bytes: usize,
        inbound: Arc<Inbound>,
        metrics: ServerMetrics,
    ) -> Result<Self, UpstreamError> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| UpstreamError::protocol(server, format!("invalid url ({e})")))?;
        let mut static_headers = HeaderMap::new();
        for (k, v) in headers {
            let name = HeaderName::from_bytes(k.trim().as_bytes()).map_err(|e| {
                UpstreamError::protocol(server, format!("invalid header name {k:?}: {e}"))
            })?;
            let value = HeaderValue::from_str(v.trim()).map_err(|e| {
                UpstreamError::protocol(server, format!("invalid value for header {k}: {e}"))
            })?;
            static_headers.append(name, value);
        }
        Ok(HttpConnection {
            server: server.to_owned(),
            client,
            url,
            static_headers,
            tokens: None,
            session_id: Mutex::new(None),
            legacy: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            session_ended: AtomicBool::new(false),
            max_message_bytes,
            inbound,
            metrics,
            stop: tokio_util::sync::CancellationToken::new(),
            lost: tokio_util::sync::CancellationToken::new(),
            lost_reason: Mutex::new(String::new()),
            created: Instant::now(),
            heard_ms: AtomicU64::new(0),
        })
    }

    /// The server answered: an HTTP response (of any status) or an event.
    fn heard(&self) {
        let ms = u64::try_from(self.created.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.heard_ms.fetch_max(ms, Ordering::Relaxed);
    }

    /// How long the server has not been heard from: since its last HTTP
    /// response or GET-stream event, or since the connection was made.
    pub fn silent_for(&self) -> Duration {
        self.created
            .elapsed()
            .saturating_sub(Duration::from_millis(self.heard_ms.load(Ordering::Relaxed)))
    }

    /// The connection of an `auth = "oauth"` server: every request carries
    /// the current access token of `tokens` ([`super::auth`]).
    pub fn with_tokens(mut self, tokens: Option<Tokens>) -> Self {
        self.tokens = tokens;
        self
    }

    /// Marks the connection gone: it takes no more requests, its GET stream
    /// stops, and [`HttpConnection::lost`] resolves, so the upstream
    /// session reports the server down and connects again (re-negotiating,
    /// which re-reads the capabilities of a server that restarted).
    /// The server ended our session (HTTP 404 to a request that carried
    /// it): lost, and to be renewed ([`HttpConnection::session_ended`]).
    fn mark_session_ended(&self, reason: String) {
        if self.lost.is_cancelled() {
            return;
        }
        self.session_ended.store(true, Ordering::Relaxed);
        tracing::info!(server = %self.server, %reason, "the server ended our session; a new one is opened");
        self.abandon(reason);
    }

    /// Whether the server ended our session (HTTP 404): the next
    /// connection is a renewal (a new session), not a restart.
    pub fn session_ended(&self) -> bool {
        self.session_ended.load(Ordering::Relaxed)
    }

    fn mark_lost(&self, reason: String) {
        if self.lost.is_cancelled() {
            return;
        }
        tracing::info!(server = %self.server, %reason, "the server is gone; connecting again");
        self.abandon(reason);
    }

    /// Stops using the connection without a word to the server (no
    /// DELETE): it takes no more requests, its GET stream stops and
    /// [`HttpConnection::lost`] resolves with `reason`. For an `auth =
    /// "oauth"` server whose access token was withdrawn.
    pub fn abandon(&self, reason: String) {
        if self.lost.is_cancelled() {
            return;
        }
        *self.lost_reason.lock().unwrap() = reason;
        self.alive.store(false, Ordering::Relaxed);
        self.stop.cancel();
        self.lost.cancel();
    }

    /// Resolves, with the reason, once the server is found gone: a request
    /// could not reach it (connection refused or reset before an answer),
    /// or it answered 404 to our session (2025-11-25: the session ended,
    /// e.g. the server restarted).
    pub async fn lost(&self) -> String {
        self.lost.cancelled().await;
        self.lost_reason.lock().unwrap().clone()
    }

    /// An I/O error of `what`; one that did not reach the server at all
    /// (connect failed) means it is gone.
    fn io_error(&self, what: String, e: reqwest::Error) -> UpstreamError {
        // The URL may carry a secret (`?api_key=`); the error names the
        // server instead.
        let e = e.without_url();
        if e.is_connect() {
            self.mark_lost(format!("{what}: cannot connect: {e}"));
        }
        UpstreamError::io(&self.server, what, e)
    }

    /// Switches to 2025-11-25 semantics (set after `initialize`).
    pub fn set_legacy(&self, legacy: bool) {
        self.legacy.store(legacy, Ordering::Relaxed);
    }

    /// False once the server ended our session (404).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// The session id the server assigned, if any.
    pub fn session_id(&self) -> Option<String> {
        self.session_id.lock().unwrap().clone()
    }

    fn post(&self, body: Bytes, extra: &ExtraHeaders) -> reqwest::RequestBuilder {
        let mut req = self
            .client
            .post(self.url.clone())
            .headers(self.static_headers.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json");
        if let Some(sid) = self.session_id() {
            req = req.header(SESSION_ID, sid);
        }
        for (k, v) in extra {
            req = req.header(k.as_str(), v.as_str());
        }
        self.metrics.sent_bytes(body.len());
        req.body(body)
    }

    /// Sends request `msg` (id `id`, method `method`) and returns its
    /// response message. The notifications of its answer (its SSE stream,
    /// resumed or not, or its JSON body) are fanned out and, when given,
    /// handed to `on_stream` too, in the order read, before this returns.
    /// Dropping the future closes the response stream, which is the
    /// 2026-07-28 cancellation signal; in 2025-11-25 a
    /// `notifications/cancelled` is also posted.
    pub async fn request(
        self: &Arc<Self>,
        id: u64,
        method: &str,
        msg: &Value,
        extra: &ExtraHeaders,
        on_stream: Option<OnStream<'_>>,
    ) -> Result<Value, UpstreamError> {
        let mut guard = CancelOnDrop {
            conn: self.clone(),
            id,
            extra: extra.clone(),
            armed: true,
        };
        let result = self.exchange(id, method, msg, extra, on_stream).await;
        guard.armed = false;
        result
    }

    async fn exchange(
        self: &Arc<Self>,
        id: u64,
        method: &str,
        msg: &Value,
        extra: &ExtraHeaders,
        on_stream: Option<OnStream<'_>>,
    ) -> Result<Value, UpstreamError> {
        let had_session = self.session_id().is_some();
        let body = Bytes::from(serde_json::to_vec(msg).expect("a Value always serialises"));
        let resp = auth::send(self.tokens.as_ref(), || self.post(body.clone(), extra))
            .await
            .map_err(|f| unsent(f, |e| self.io_error(format!("POST {method}"), e)))?;
        self.heard();
        if let Some(sid) = resp.headers().get(SESSION_ID).and_then(|v| v.to_str().ok()) {
            let mut current = self.session_id.lock().unwrap();
            if current.as_deref() != Some(sid) {
                *current = Some(sid.to_owned());
            }
        }
        let status = resp.status();
        if !status.is_success() {
            return Err(self.status_error(method, resp, had_session).await);
        }
        let id_value = Value::from(id);
        match media_type(resp.headers()).as_deref() {
            Some("text/event-stream") => {
                let events = self.events(resp);
                self.read_stream(&id_value, method, events, on_stream).await
            }
            Some("application/json") => {
                let body = self.read_body(method, resp).await?;
                if body.iter().all(u8::is_ascii_whitespace) {
                    return Err(
                        self.no_response(method, format!("HTTP {status} with an empty body"))
                    );
                }
                let parsed: Value = serde_json::from_slice(&body).map_err(|e| {
                    UpstreamError::protocol(
                        &self.server,
                        format!(
                            "{method}: response body is not JSON ({e}): {}",
                            self.shown(&body, 200)
                        ),
                    )
                })?;
                let messages = match parsed {
                    Value::Array(items) => items,
                    one => vec![one],
                };
                let mut response = None;
                for m in messages {
                    if let Some(r) = self.dispatch(&id_value, m, extra, on_stream) {
                        response = Some(r);
                    }
                }
                response.ok_or_else(|| {
                    self.no_response(
                        method,
                        "the JSON body holds no response to the request".into(),
                    )
                })
            }
            other => {
                let body = self.read_body(method, resp).await.unwrap_or_default();
                Err(self.no_response(
                    method,
                    format!(
                        "HTTP {status}, content type {:?}, {} body bytes",
                        other.unwrap_or("none"),
                        body.len()
                    ),
                ))
            }
        }
    }

    /// Sends a notification; any 2xx (200, 202, 204, with or without a
    /// body) is success.
    pub async fn notify(&self, msg: &Value, extra: &ExtraHeaders) -> Result<(), UpstreamError> {
        let method = msg["method"].as_str().unwrap_or("notification").to_owned();
        let had_session = self.session_id().is_some();
        let body = Bytes::from(serde_json::to_vec(msg).expect("a Value always serialises"));
        let resp = auth::send(self.tokens.as_ref(), || self.post(body.clone(), extra))
            .await
            .map_err(|f| {
                unsent(f, |e| {
                    UpstreamError::io(&self.server, format!("POST {method}"), e.without_url())
                })
            })?;
        if resp.status().is_success() {
            return Ok(());
        }
        Err(self.status_error(&method, resp, had_session).await)
    }

    /// Ends the session (HTTP DELETE), best effort; an `auth = "oauth"`
    /// server without a token to send gets none.
    pub async fn close(&self) {
        self.alive.store(false, Ordering::Relaxed);
        self.stop.cancel();
        let Some(sid) = self.session_id() else { return };
        let req = self
            .client
            .delete(self.url.clone())
            .headers(self.static_headers.clone())
            .header(SESSION_ID, sid)
            .timeout(Duration::from_secs(2));
        let Some(req) = auth::authorize(self.tokens.as_ref(), req) else {
            return;
        };
        if let Err(e) = req.send().await.map_err(reqwest::Error::without_url) {
            tracing::debug!(error = %e, "DELETE of the session failed");
        }
    }

    async fn status_error(
        &self,
        method: &str,
        resp: reqwest::Response,
        had_session: bool,
    ) -> UpstreamError {
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            let www_authenticate = resp
                .headers()
                .get(reqwest::header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            return UpstreamError::Unauthorized {
                server: self.server.clone(),
                status,
                www_authenticate,
                sent_authorization: self
                    .static_headers
                    .contains_key(reqwest::header::AUTHORIZATION),
                access_token: None,
            };
        }
        if status == 404 && had_session {
            self.mark_session_ended(format!("{method}: the server ended our session (HTTP 404)"));
            return UpstreamError::SessionExpired {
                server: self.server.clone(),
                method: method.to_owned(),
            };
        }
        let body = self.read_body(method, resp).await.unwrap_or_default();
        // A JSON-RPC error in the body (e.g. a modern server's
        // UnsupportedProtocolVersion with 400) is the server's answer.
        if let Ok(msg) = serde_json::from_slice::<Value>(&body)
            && let Some(err) = jsonrpc::ErrorObject::from_response(&msg)
        {
            return UpstreamError::Rpc {
                server: self.server.clone(),
                method: method.to_owned(),
                code: err.code,
                message: err.message,
                data: err.data,
            };
        }
        UpstreamError::HttpStatus {
            server: self.server.clone(),
            method: method.to_owned(),
            status,
            body: self.shown(&body, ERROR_BODY_PREVIEW),
        }
    }

    async fn read_body(
        &self,
        method: &str,
        mut resp: reqwest::Response,
    ) -> Result<Vec<u8>, UpstreamError> {
        let mut body = Vec::new();
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    self.metrics.received_bytes(chunk.len());
                    if body.len() + chunk.len() > self.max_message_bytes {
                        self.metrics.skipped("oversized");
                        return Err(UpstreamError::MessageTooLarge {
                            server: self.server.clone(),
                            method: method.to_owned(),
                            size: body.len() + chunk.len(),
                            limit: self.max_message_bytes,
                        });
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => return Ok(body),
                Err(e) => {
                    return Err(UpstreamError::io(
                        &self.server,
                        format!("reading the {method} response"),
                        e.without_url(),
                    ));
                }
            }
        }
    }

    /// Turns a response body into SSE events, each bounded in size.
    fn events(&self, resp: reqwest::Response) -> EventStream {
        let metrics = self.metrics.clone();
        let body = resp
            .bytes_stream()
            .inspect(move |chunk| {
                if let Ok(chunk) = chunk {
                    metrics.received_bytes(chunk.len());
                }
            })
            // The URL may carry a secret; errors name the server instead.
            .map(|chunk| chunk.map_err(reqwest::Error::without_url));
        Box::pin(sse::decode(body, self.max_message_bytes))
    }

    /// Reads an SSE stream until the response to `id` arrives, resuming a
    /// 2025-11-25 stream that ends early; its notifications also go to
    /// `on_stream`.
    async fn read_stream(
        self: &Arc<Self>,
        id: &Value,
        method: &str,
        mut events: EventStream,
        on_stream: Option<OnStream<'_>>,
    ) -> Result<Value, UpstreamError> {
        let mut last_event_id = String::new();
        let mut retry = DEFAULT_RETRY;
        let mut resumes_without_progress = 0;
        loop {
            while let Some(ev) = events.next().await {
                let ev = ev.map_err(|e| match e {
                    SseError::TooLarge { limit } => {
                        self.metrics.skipped("oversized");
                        UpstreamError::MessageTooLarge {
                            server: self.server.clone(),
                            method: method.to_owned(),
                            size: limit + 1,
                            limit,
                        }
                    }
                    e => UpstreamError::io(
                        &self.server,
                        format!("reading the {method} event stream"),
                        e,
                    ),
                })?;
                if !ev.id.is_empty() && ev.id != last_event_id {
                    last_event_id = ev.id.clone();
                    resumes_without_progress = 0;
                }
                if let Some(r) = ev.retry {
                    retry = r;
                }
                if ev.data.trim().is_empty() {
                    continue; // a priming event or keep-alive
                }
                let Ok(msg) = serde_json::from_str::<Value>(&ev.data) else {
                    self.metrics.skipped("not_json");
                    tracing::warn!(data = %self.shown(ev.data.as_bytes(), 200), "skipping an SSE event that is not JSON");
                    continue;
                };
                if let Some(response) = self.dispatch(id, msg, &Vec::new(), on_stream) {
                    return Ok(response);
                }
            }
            // The stream ended without our response.
            if !self.legacy.load(Ordering::Relaxed) || last_event_id.is_empty() {
                return Err(
                    self.no_response(method, "the event stream ended before the response".into())
                );
            }
            resumes_without_progress += 1;
            if resumes_without_progress > MAX_RESUMES_WITHOUT_PROGRESS {
                return Err(self.no_response(
                    method,
                    format!("the event stream was resumed {MAX_RESUMES_WITHOUT_PROGRESS} times without progress"),
                ));
            }
            tokio::time::sleep(retry).await;
            tracing::debug!(last_event_id = %last_event_id, "resuming the event stream");
            events = self.resume(method, &last_event_id).await?;
        }
    }

    async fn resume(
        &self,
        method: &str,
        last_event_id: &str,
    ) -> Result<EventStream, UpstreamError> {
        let sid = self.session_id();
        let build = || {
            let mut req = self
                .client
                .get(self.url.clone())
                .headers(self.static_headers.clone())
                .header(ACCEPT, "text/event-stream")
                .header("last-event-id", last_event_id);
            if let Some(sid) = &sid {
                req = req.header(SESSION_ID, sid);
            }
            req
        };
        let resp = auth::send(self.tokens.as_ref(), build).await.map_err(|f| {
            unsent(f, |e| {
                UpstreamError::io(
                    &self.server,
                    format!("GET to resume {method}"),
                    e.without_url(),
                )
            })
        })?;
        if !resp.status().is_success() {
            return Err(match self.status_error(method, resp, true).await {
                // The server already had this request: sending it again on a
                // new session could run it twice, so no SessionExpired retry.
                UpstreamError::SessionExpired { .. } => self.no_response(
                    method,
                    "the session ended (HTTP 404) while resuming the event stream".into(),
                ),
                other => other,
            });
        }
        Ok(self.events(resp))
    }

    /// Opens the standalone GET stream (2025-11-25 transports, "Listening
    /// for Messages from the Server") in the background and keeps it open:
    /// server requests on it are answered by POST, notifications fanned
    /// out. When it ends it is reopened (with `Last-Event-ID` when the
    /// server gave event ids) after the server's `retry` delay, backing
    /// off while it yields nothing. A server without one (405, or any other
    /// refusal) is left alone. Stops when the session is closed.
    pub fn listen(self: &Arc<Self>, headers: ExtraHeaders) {
        let weak = Arc::downgrade(self);
        let stop = self.stop.clone();
        tokio::spawn(
            async move {
                let mut last_event_id = String::new();
                let mut retry = DEFAULT_RETRY;
                let mut idle_rounds = 0u32;
                loop {
                    // Holds no reference to the connection while it waits:
                    // dropping the connection stops it.
                    let (build, tokens, had_session) = {
                        let Some(conn) = weak.upgrade() else { return };
                        if !conn.is_alive() {
                            return;
                        }
                        let (client, url, fixed, sid) = (
                            conn.client.clone(),
                            conn.url.clone(),
                            conn.static_headers.clone(),
                            conn.session_id(),
                        );
                        let had_session = sid.is_some();
                        let (last_event_id, headers) = (last_event_id.clone(), headers.clone());
                        let build = move || {
                            let mut req = client
                                .get(url.clone())
                                .headers(fixed.clone())
                                .header(ACCEPT, "text/event-stream");
                            if let Some(sid) = &sid {
                                req = req.header(SESSION_ID, sid);
                            }
                            if !last_event_id.is_empty() {
                                req = req.header("last-event-id", last_event_id.as_str());
                            }
                            for (k, v) in &headers {
                                req = req.header(k.as_str(), v.as_str());
                            }
                            req
                        };
                        (build, conn.tokens.clone(), had_session)
                    };
                    let resp = tokio::select! {
                        r = auth::send(tokens.as_ref(), build) => r,
                        () = stop.cancelled() => return,
                    };
                    let events = match resp {
                        Ok(resp)
                            if resp.status().is_success()
                                && media_type(resp.headers()).as_deref()
                                    == Some("text/event-stream") =>
                        {
                            let Some(conn) = weak.upgrade() else { return };
                            conn.events(resp)
                        }
                        Ok(resp)
                            if resp.status() == reqwest::StatusCode::NOT_FOUND && had_session =>
                        {
                            // Our session ended (the server restarted):
                            // connecting again opens a new stream. (A 404
                            // without a session id only says there is no
                            // stream here: a server without sessions.)
                            if let Some(conn) = weak.upgrade() {
                                conn.mark_session_ended("the standalone event stream: the server ended our session (HTTP 404)".into());
                            }
                            return;
                        }
                        Ok(resp) => {
                            tracing::debug!(status = resp.status().as_u16(), "the server offers no standalone event stream");
                            return;
                        }
                        // No token to send: the connection is being
                        // dropped; the next one opens a new stream.
                        Err(Failed::Auth(e @ UpstreamError::NotAuthorized { .. })) => {
                            tracing::debug!(error = %e, "not opening the standalone event stream");
                            return;
                        }
                        // Refused even with a new token: tried again later,
                        // like a failure to open it.
                        Err(Failed::Auth(e)) => {
                            tracing::debug!(error = %e, "the standalone event stream was refused");
                            idle_rounds += 1;
                            let delay = (retry * idle_rounds).min(MAX_STREAM_RETRY);
                            tokio::select! {
                                () = tokio::time::sleep(delay) => {}
                                () = stop.cancelled() => return,
                            }
                            continue;
                        }
                        Err(Failed::Send(e)) => {
                            tracing::debug!(error = %e, "opening the standalone event stream failed");
                            if e.is_connect() {
                                if let Some(conn) = weak.upgrade() {
                                    conn.mark_lost(format!("the standalone event stream: cannot connect: {e}"));
                                }
                                return;
                            }
                            idle_rounds += 1;
                            let delay = (retry * idle_rounds).min(MAX_STREAM_RETRY);
                            tokio::select! {
                                () = tokio::time::sleep(delay) => {}
                                () = stop.cancelled() => return,
                            }
                            continue;
                        }
                    };
                    tracing::debug!("listening on the standalone event stream");
                    let mut events = events;
                    let mut progressed = false;
                    loop {
                        let ev = tokio::select! {
                            ev = events.next() => ev,
                            () = stop.cancelled() => return,
                        };
                        let Some(Ok(ev)) = ev else { break };
                        progressed = true;
                        if !ev.id.is_empty() {
                            last_event_id = ev.id.clone();
                        }
                        if let Some(r) = ev.retry {
                            retry = r;
                        }
                        if ev.data.trim().is_empty() {
                            continue;
                        }
                        let Some(conn) = weak.upgrade() else { return };
                        conn.heard();
                        let Ok(msg) = serde_json::from_str::<Value>(&ev.data) else {
                            conn.metrics.skipped("not_json");
                            continue;
                        };
                        // Tied to no request of ours: fanned out only.
                        if conn.dispatch(&Value::Null, msg, &headers, None).is_some() {
                            tracing::debug!("dropping a response on the standalone event stream");
                        }
                    }
                    // A server (or a proxy with an idle timeout) may end the
                    // stream at any time; it is opened again, less often
                    // while it keeps ending without events, but never given
                    // up: list changes and server requests arrive on it.
                    idle_rounds = if progressed { 0 } else { (idle_rounds + 1).min(16) };
                    let delay = (retry * 2u32.pow(idle_rounds)).min(MAX_STREAM_RETRY);
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = stop.cancelled() => return,
                    }
                }
            }
            .in_current_span(),
        );
    }

    /// [`Secrets::preview`] of what the server sent.
    ///
    /// [`Secrets::preview`]: switchyard_common::server_spec::Secrets::preview
    fn shown(&self, bytes: &[u8], max_chars: usize) -> String {
        self.inbound.secrets().preview(bytes, max_chars)
    }

    /// Routes one incoming message; returns it if it is the response to
    /// `id`. A notification is fanned out, and handed to `on_stream` first
    /// (the stream it came on is request `id`'s).
    fn dispatch(
        self: &Arc<Self>,
        id: &Value,
        msg: Value,
        extra: &ExtraHeaders,
        on_stream: Option<OnStream<'_>>,
    ) -> Option<Value> {
        match jsonrpc::classify(&msg) {
            Some(Kind::Response) if &msg["id"] == id => Some(msg),
            Some(Kind::Response) => {
                self.metrics.skipped("late_response");
                tracing::debug!(id = %msg["id"], "dropping a response to another request");
                None
            }
            Some(Kind::Notification) => {
                self.inbound.notification_on_stream(msg, on_stream);
                None
            }
            Some(Kind::Request) => {
                // 2025-11-25: the server may ask us something mid-stream; the
                // answer is POSTed back.
                let conn = self.clone();
                let extra = extra.clone();
                tokio::spawn(
                    async move {
                    let reply = conn.inbound.request(msg).await;
                    let body = Bytes::from(serde_json::to_vec(&reply).expect("serialises"));
                    let sent = auth::send(conn.tokens.as_ref(), || conn.post(body.clone(), &extra)).await;
                    if let Err(e) = sent.map_err(|f| unsent(f, |e| UpstreamError::io(&conn.server, "POST of our answer", e.without_url()))) {
                        tracing::warn!(error = %e, "posting our answer to a server request failed");
                    }
                    }
                    .in_current_span(),
                );
                None
            }
            None => {
                self.metrics.skipped("not_jsonrpc");
                tracing::warn!(message = %self.shown(msg.to_string().as_bytes(), 200), "skipping a message that is not JSON-RPC");
                None
            }
        }
    }

    fn no_response(&self, method: &str, detail: String) -> UpstreamError {
        UpstreamError::NoResponse {
            server: self.server.clone(),
            method: method.to_owned(),
            detail,
        }
    }
}

/// The error of a request [`auth::send`] did not get an answer to: `io`
/// names a failure to send it.
fn unsent(failed: Failed, io: impl FnOnce(reqwest::Error) -> UpstreamError) -> UpstreamError {
    match failed {
        Failed::Send(e) => io(e),
        Failed::Auth(e) => e,
    }
}

/// Posts `notifications/cancelled` (2025-11-25) if a request is dropped.
struct CancelOnDrop {
    conn: Arc<HttpConnection>,
    id: u64,
    extra: ExtraHeaders,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed || !self.conn.legacy.load(Ordering::Relaxed) {
            return;
        }
        let conn = self.conn.clone();
        let id = self.id;
        let extra = self.extra.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(
                async move {
                    let msg = jsonrpc::notification(
                        "notifications/cancelled",
                        Some(json!({"requestId": id, "reason": "cancelled by the caller"})),
                    );
                    if let Err(e) = conn.notify(&msg, &extra).await {
                        tracing::debug!(error = %e, "posting notifications/cancelled failed");
                    }
                }
                .in_current_span(),
            );
        }
    }
}

/// The media type's essence (`type/subtype`, lower case), parameters such
/// as `charset` ignored (RFC 9110 §8.3.1).
pub fn media_type(headers: &HeaderMap) -> Option<String> {
    let raw = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    let m: mime::Mime = raw.parse().ok()?;
    Some(m.essence_str().to_ascii_lowercase())
}

/// Builds the shared HTTP client (rustls with the ring provider). A
/// redirect is followed only to the same origin (scheme, host and port),
/// at most 5 times: the configured headers (`headers`, `header_files`:
/// credentials of any name) must never reach another host.
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    switchyard_common::tls::install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .pool_idle_timeout(Duration::from_secs(90))
        .redirect(reqwest::redirect::Policy::custom(|attempt| {
            let same_origin = attempt
                .previous()
                .first()
                .is_some_and(|first| first.origin() == attempt.url().origin());
            match (same_origin, attempt.previous().len() > 5) {
                (true, false) => attempt.follow(),
                _ => attempt.stop(),
            }
        }))
        .referer(false)
        .build()
}
