//! Where the MCP endpoint's answers are made, in one place: every refusal
//! is an [`McpError`] (an HTTP status, a JSON-RPC error, the request's id
//! when it is known), the call path's [`CallError`] becomes one in
//! [`McpError::from_call`] (one table), and results are decorated for the
//! client's era ([`decorate`]).

use crate::call::{CallError, Kind};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use switchyard_mcp::era::Era;
use switchyard_mcp::{jsonrpc, meta};

/// JSON-RPC "Parse error" (JSON-RPC 2.0 §5.1).
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "Invalid Request".
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "Internal error".
pub const INTERNAL_ERROR: i64 = -32603;
/// The code of "session not found" answers (404) to 2025-11-25 clients, as
/// the TypeScript SDK's server answers them.
pub const SESSION_NOT_FOUND: i64 = -32001;

/// A refusal of the endpoint, or a request's failure: the HTTP status, the
/// JSON-RPC error, and the request's id (`null` when it is not known).
#[derive(Debug, Clone, PartialEq)]
pub struct McpError {
    /// The HTTP status.
    pub status: StatusCode,
    /// `error.code`.
    pub code: i64,
    /// `error.message`: what was wrong, and where.
    pub message: String,
    /// `error.data`, if any.
    pub data: Option<Value>,
    /// The request's id.
    pub id: Value,
    /// `WWW-Authenticate` for a 401.
    pub challenge: Option<&'static str>,
}

impl McpError {
    /// An error answered with HTTP `status`.
    pub fn new(status: StatusCode, code: i64, message: impl Into<String>) -> Self {
        McpError {
            status,
            code,
            message: message.into(),
            data: None,
            id: Value::Null,
            challenge: None,
        }
    }

    /// A JSON-RPC error of a request that was understood (HTTP 200).
    pub fn rpc(code: i64, message: impl Into<String>) -> Self {
        Self::new(StatusCode::OK, code, message)
    }

    /// -32602, HTTP 200: the request's params are wrong.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::rpc(jsonrpc::INVALID_PARAMS, message)
    }

    /// 400 with -32600: not a request this endpoint takes.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, message)
    }

    /// 400 with -32020 (HeaderMismatch, 2026-07-28).
    pub fn header_mismatch(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, jsonrpc::HEADER_MISMATCH, message)
    }

    /// 404 with -32601: a method this endpoint does not serve.
    pub fn method_not_found(method: &str, why: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            jsonrpc::METHOD_NOT_FOUND,
            format!("method not found: {method:?} {why}"),
        )
    }

    /// With `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// With the request's id (echoed exactly: `0` and `"0"` stay apart).
    pub fn with_id(mut self, id: Option<&Value>) -> Self {
        self.id = id.cloned().unwrap_or(Value::Null);
        self
    }

    /// The `outcome` label of the request metric.
    pub fn outcome(&self) -> &'static str {
        if self.status == StatusCode::OK {
            "error"
        } else {
            "rejected"
        }
    }

    /// The JSON-RPC error response.
    pub fn body(&self) -> Value {
        let mut error = Map::new();
        error.insert("code".into(), self.code.into());
        error.insert("message".into(), self.message.clone().into());
        if let Some(d) = &self.data {
            error.insert("data".into(), d.clone());
        }
        json!({"jsonrpc": "2.0", "id": self.id, "error": error})
    }

    /// The error a JSON-RPC error object `e` (`{code, message, data?}`, as
    /// stored) describes; -32603 and `fallback` where a field is missing.
    pub fn from_object(e: &Value, fallback: &str) -> Self {
        let code = e["code"].as_i64().unwrap_or(INTERNAL_ERROR);
        let message = e["message"].as_str().unwrap_or(fallback);
        let err = McpError::rpc(code, message);
        match e.get("data") {
            Some(d) => err.with_data(d.clone()),
            None => err,
        }
    }

    /// The error for a request of `era` that the call path refused with
    /// `e`. A JSON-RPC error the server answered (the status details)
    /// passes through as it came, except that a missing resource gets the
    /// client's era's code (-32002 up to 2025-11-25, -32602 from
    /// 2026-07-28); a tool, prompt or resource that is unknown or not
    /// offered is -32602 naming it; the rest is -32603 with the message.
    pub fn from_call(e: CallError, era: Era) -> Self {
        let upstream = serde_json::from_slice::<Value>(&e.details)
            .ok()
            .filter(|d| d.get("code").is_some_and(Value::is_i64));
        let not_found_code = match era {
            Era::Modern => jsonrpc::INVALID_PARAMS,
            Era::Legacy => jsonrpc::RESOURCE_NOT_FOUND,
        };
        let resource_missing = e.message.starts_with("resource not found");
        if let Some(u) = upstream {
            let code = u["code"].as_i64().unwrap_or(INTERNAL_ERROR);
            let code = if resource_missing {
                not_found_code
            } else {
                code
            };
            let message = u
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or(e.message.as_str());
            let mut err = McpError::rpc(code, message);
            // 2026-07-28 answers its own protocol errors (a header
            // mismatch, a missing client capability, an unsupported
            // version) with HTTP 400, whoever raised them.
            if era == Era::Modern && jsonrpc::is_modern_error_code(code) {
                err.status = StatusCode::BAD_REQUEST;
            }
            return match u.get("data") {
                Some(d) => err.with_data(d.clone()),
                None => err,
            };
        }
        let code = match e.kind {
            Kind::NotFound if resource_missing => not_found_code,
            Kind::NotFound | Kind::InvalidArgument | Kind::FailedPrecondition => {
                jsonrpc::INVALID_PARAMS
            }
            Kind::Unimplemented => jsonrpc::METHOD_NOT_FOUND,
            // The client reused the id of a request still in flight.
            Kind::AlreadyExists => INVALID_REQUEST,
            _ => INTERNAL_ERROR,
        };
        McpError::rpc(code, e.message)
    }
}

impl IntoResponse for McpError {
    fn into_response(self) -> Response {
        let mut r = json_response(self.status, &self.body());
        if let Some(c) = self.challenge {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(c));
        }
        r
    }
}

/// `body` as `application/json` with `status`.
pub fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The success response to request `id`.
pub fn result(id: &Value, result: Value) -> Response {
    json_response(StatusCode::OK, &jsonrpc::result_response(id, result))
}

/// One SSE event carrying JSON-RPC `message`.
pub fn sse_event(message: &Value) -> bytes::Bytes {
    bytes::Bytes::from(switchyard_mcp::sse::encode(&switchyard_mcp::sse::Event {
        data: message.to_string(),
        ..switchyard_mcp::sse::Event::default()
    }))
}

/// A 200 `text/event-stream` answer whose events come from `rx`, ending
/// when its sender is dropped (no caching, no proxy buffering).
pub fn sse_response(
    rx: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, std::convert::Infallible>>,
) -> Response {
    sse_body(axum::body::Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(rx),
    ))
}

/// A 200 `text/event-stream` answer of `body` (no caching, no proxy
/// buffering).
fn sse_body(body: axum::body::Body) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let headers = r.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// `r` for a client that takes `text/event-stream` but not
/// `application/json` (`Accept` gave JSON `q=0`): a 200 JSON answer
/// becomes one SSE event carrying the same message; anything else (an
/// HTTP error, a stream, 202) is left as it is.
pub async fn as_event_stream(r: Response) -> Response {
    let is_json = r
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if r.status() != StatusCode::OK || !is_json {
        return r;
    }
    let (parts, body) = r.into_parts();
    // The endpoint's own answer, in memory already.
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return Response::from_parts(parts, axum::body::Body::empty());
    };
    let data = String::from_utf8_lossy(&bytes).into_owned();
    let event = switchyard_mcp::sse::encode(&switchyard_mcp::sse::Event {
        data,
        ..switchyard_mcp::sse::Event::default()
    });
    let mut out = sse_body(axum::body::Body::from(event));
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// 202 Accepted, no body: a notification (or a client's response) taken.
pub fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

/// The methods whose complete results carry cache hints (2026-07-28
/// server/utilities/caching).
const CACHEABLE: &[&str] = &[
    switchyard_mcp::methods::TOOLS_LIST,
    switchyard_mcp::methods::PROMPTS_LIST,
    switchyard_mcp::methods::RESOURCES_LIST,
    switchyard_mcp::methods::RESOURCE_TEMPLATES_LIST,
    switchyard_mcp::methods::RESOURCES_READ,
    switchyard_mcp::methods::SERVER_DISCOVER,
];

/// The JSON-RPC response to request `id` of `method` from a client of
/// `era`: its result decorated ([`decorate`]), or its error; as sent on a
/// stream.
pub fn message(
    id: Option<&Value>,
    method: &str,
    era: Era,
    outcome: Result<Value, McpError>,
) -> Value {
    match outcome {
        Ok(mut result) => {
            decorate(method, era, &mut result);
            jsonrpc::result_response(id.unwrap_or(&Value::Null), result)
        }
        Err(e) => e.with_id(id).body(),
    }
}

/// How request `id` of `method` from a client of `era` is answered
/// ([`progress_stream`]).
#[derive(Debug, Clone)]
pub struct Reply {
    /// The request's id.
    pub id: Option<Value>,
    /// Its method.
    pub method: String,
    /// Its client's era.
    pub era: Era,
}

/// The outcome of a request, as its (boxed) future.
type Work = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Value, McpError>> + Send>>;

/// Answers a request whose client takes SSE and wants its notifications
/// (basic/utilities/progress, server/utilities/logging). Until the first
/// notification comes the answer may still be plain JSON, so a request
/// that sends none is answered as if it had asked for none: its result as
/// `application/json` ([`result`], after [`decorate`]), its error as
/// [`McpError`] (`Err`, so the caller answers it in the one place). Once
/// one comes, the answer is an SSE stream: each notification from
/// `progress` (JSON text: progress, log messages) as it comes, then the
/// response, then the end of the stream; the work goes on in a task of its
/// own, and a client that goes away (the stream closes) drops it, which
/// cancels the request. A client that goes away before that drops `done`
/// with the HTTP request, as for any request.
pub async fn progress_stream(
    mut progress: tokio::sync::mpsc::UnboundedReceiver<String>,
    reply: Reply,
    done: impl std::future::Future<Output = Result<Value, McpError>> + Send + 'static,
) -> Result<Response, McpError> {
    let mut done: Work = Box::pin(done);
    let first = tokio::select! {
        biased;
        n = progress.recv() => n,
        outcome = &mut done => match progress.try_recv() {
            // Notified just before the end: they still come first.
            Ok(n) => {
                let outcome: Work = Box::pin(std::future::ready(outcome));
                return Ok(stream(Some(n), progress, reply, outcome));
            }
            Err(_) => return json(&reply, outcome),
        },
    };
    match first {
        Some(n) => Ok(stream(Some(n), progress, reply, done)),
        // Nothing can notify any more.
        None => json(&reply, done.await),
    }
}

/// `outcome` as a JSON answer to `reply`'s request.
fn json(reply: &Reply, outcome: Result<Value, McpError>) -> Result<Response, McpError> {
    answer(reply.id.as_ref(), &reply.method, reply.era, outcome)
}

/// The JSON answer to request `id` of `method` from a client of `era`:
/// its result decorated ([`decorate`]) as `application/json`, or its
/// error carrying the request's id (`Err`: the caller answers it in the
/// one place errors become answers).
pub fn answer(
    id: Option<&Value>,
    method: &str,
    era: Era,
    outcome: Result<Value, McpError>,
) -> Result<Response, McpError> {
    let mut r = outcome.map_err(|e| e.with_id(id))?;
    decorate(method, era, &mut r);
    Ok(result(id.unwrap_or(&Value::Null), r))
}

/// The SSE answer of [`progress_stream`], from notification `first` on.
fn stream(
    first: Option<String>,
    mut progress: tokio::sync::mpsc::UnboundedReceiver<String>,
    reply: Reply,
    mut done: Work,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel(SSE_BUFFER);
    tokio::spawn(async move {
        if let Some(n) = first
            && !send_json(&tx, &n).await
        {
            return;
        }
        let mut open = true;
        let last = loop {
            tokio::select! {
                m = &mut done => break m,
                n = progress.recv(), if open => match n {
                    Some(n) => {
                        if !send_json(&tx, &n).await {
                            return;
                        }
                    }
                    None => open = false,
                },
                _ = tx.closed() => return,
            }
        };
        // Sent before the outcome, so before the response.
        while let Ok(n) = progress.try_recv() {
            if !send_json(&tx, &n).await {
                return;
            }
        }
        let last = message(reply.id.as_ref(), &reply.method, reply.era, last);
        let _ = tx.send(Ok(sse_event(&last))).await;
    });
    sse_response(rx)
}

/// Sends notification `json` (JSON text) as one event, or drops it when
/// the client is [`SSE_BUFFER`] events behind (best effort: memory stays
/// bounded behind a client that does not read, and the notifications
/// keep being taken from the call, so the call never waits on it); false
/// when the stream is closed. Text that is not JSON (never sent by the
/// sidecar) is skipped.
async fn send_json(
    tx: &tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::convert::Infallible>>,
    json: &str,
) -> bool {
    use tokio::sync::mpsc::error::TrySendError;
    match serde_json::from_str::<Value>(json) {
        Ok(v) => match tx.try_send(Ok(sse_event(&v))) {
            Ok(()) | Err(TrySendError::Full(_)) => true,
            Err(TrySendError::Closed(_)) => false,
        },
        Err(_) => true,
    }
}

/// How many events an SSE answer holds for a client that reads slowly.
pub const SSE_BUFFER: usize = 64;

/// Decorates the `result` of `method` for a client of `era`.
///
/// 2026-07-28: `resultType` (`complete` when the server gave none), our
/// `serverInfo` in `_meta`, and on cacheable results `ttlMs: 0` and
/// `cacheScope: "private"`: what a caller sees depends on its identity and
/// on policies that change without notice, so nothing is cached or shared.
/// 2025-11-25: those 2026-07-28 fields are removed (a 2026-07-28 server's
/// result reaching a 2025-11-25 client).
pub fn decorate(method: &str, era: Era, result: &mut Value) {
    let Some(m) = result.as_object_mut() else {
        return;
    };
    match era {
        Era::Modern => {
            m.entry("resultType")
                .or_insert_with(|| meta::result_type::COMPLETE.into());
            if CACHEABLE.contains(&method) {
                m.insert("ttlMs".into(), 0.into());
                m.insert("cacheScope".into(), "private".into());
            }
            let meta = m.entry("_meta").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert(meta::SERVER_INFO.into(), super::discover::server_info());
            }
        }
        Era::Legacy => {
            for key in ["resultType", "ttlMs", "cacheScope"] {
                m.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_errors_map_by_kind_and_upstream_errors_pass_through() {
        let e = McpError::from_call(CallError::not_found("tool not found: \"x\""), Era::Modern);
        assert_eq!((e.status, e.code), (StatusCode::OK, -32602));
        let e = McpError::from_call(CallError::unavailable("server unavailable: s"), Era::Legacy);
        assert_eq!(e.code, INTERNAL_ERROR);
        assert_eq!(e.message, "server unavailable: s");
        let mut upstream = CallError::failed_precondition("server s: tools/call x: boom");
        upstream.details = br#"{"code": -32099, "message": "boom", "data": {"k": 1}}"#.to_vec();
        let e = McpError::from_call(upstream, Era::Modern);
        assert_eq!((e.code, e.message.as_str()), (-32099, "boom"));
        assert_eq!(e.data, Some(json!({"k": 1})));
        let mut missing =
            CallError::not_found("resource not found: server s has no resource \"a\"");
        missing.details = br#"{"code": -32002, "message": "gone"}"#.to_vec();
        assert_eq!(
            McpError::from_call(missing.clone(), Era::Modern).code,
            -32602
        );
        assert_eq!(McpError::from_call(missing, Era::Legacy).code, -32002);
        let twice = CallError::new(
            Kind::AlreadyExists,
            "call_id: a call \"7\" is already running",
        );
        assert_eq!(
            McpError::from_call(twice, Era::Legacy).code,
            INVALID_REQUEST
        );
    }

    #[test]
    fn errors_echo_the_id_exactly() {
        let e = McpError::bad_request("x").with_id(Some(&json!("0")));
        assert_eq!(e.body()["id"], json!("0"));
        let e = McpError::bad_request("x").with_id(Some(&json!(0)));
        assert_eq!(e.body()["id"], json!(0));
        assert_eq!(McpError::bad_request("x").body()["id"], Value::Null);
    }

    #[test]
    fn results_are_decorated_for_the_era() {
        let mut r = json!({"tools": [], "x": 1});
        decorate("tools/list", Era::Modern, &mut r);
        assert_eq!(r["resultType"], "complete");
        assert_eq!(
            (r["ttlMs"].clone(), r["cacheScope"].clone()),
            (json!(0), json!("private"))
        );
        assert_eq!(r["_meta"][meta::SERVER_INFO]["name"], "switchyard");
        let mut r = json!({"content": [], "resultType": "complete"});
        decorate("tools/call", Era::Modern, &mut r);
        assert!(r.get("ttlMs").is_none());
        decorate("tools/call", Era::Legacy, &mut r);
        assert!(r.get("resultType").is_none());
    }
}
