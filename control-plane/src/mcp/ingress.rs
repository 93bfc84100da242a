//! The first hop of every request: the HTTP checks that come before
//! JSON-RPC, and the one message a POST carries.
//!
//! - `Host` and `Origin` (DNS rebinding protection, streamable-http
//!   "Security Warning"): 403 ([`check_host_and_origin`]); no `Host`, two,
//!   or one that is not `host[:port]` is 400 ([`host_port`]); HTTP/2's
//!   `:authority` (or an absolute-form target) is the `Host`, and a `Host`
//!   naming another authority, user info or a scheme other than http(s)
//!   is 400 ([`authority_as_host`]); the allowed origins' browser pages
//!   get CORS ([`cors`], a layer on the endpoint's router);
//! - a header read as one value (`Authorization`, `Mcp-Method`, …) sent
//!   twice is 400 ([`check_single_headers`]);
//! - `Content-Type` must be JSON (415) and `Accept` must take JSON or SSE
//!   (406) ([`check_media`]);
//! - the body is at most `mcp.max_body_bytes` (413) and arrives within
//!   `mcp.body_timeout_sec` (408); the bodies being read at once hold at
//!   most [`BODIES_AT_ONCE`] times that, and one caller's at most
//!   [`BODIES_PER_CALLER`] times (503) ([`read_body`]);
//! - it is one JSON-RPC request, notification or response: not JSON is
//!   -32700, a batch or anything else -32600, both with 400; a number
//!   anywhere that a double would change (an integer beyond 64 bits, more
//!   digits than a double holds) is -32602, as it would be forwarded
//!   changed ([`parse`], [`jsonrpc::inexact_number`]).

use super::respond::{INVALID_REQUEST, McpError, PARSE_ERROR};
use crate::config::McpConfig;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde_json::{Map, Value};
use std::time::Duration;
use switchyard_mcp::jsonrpc::{self, Kind};

/// One JSON-RPC message, as a POST carried it.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Request, notification or response.
    pub kind: Kind,
    /// `id` (requests and responses), exactly as sent.
    pub id: Option<Value>,
    /// `method` (requests and notifications).
    pub method: String,
    /// `params` (an absent one is empty).
    pub params: Map<String, Value>,
    /// The rest of the message, as sent (a response's `result` or
    /// `error`): everything but `params`.
    pub raw: Value,
}

impl Message {
    /// `params._meta`, if it is an object.
    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.params.get("_meta").and_then(Value::as_object)
    }
}

/// A `Host` value or a request's authority, read strictly (RFC 9110 §7.2,
/// RFC 3986 §3.2): `host[:port]` with no user info, a port of digits
/// within 65535, an IPv6 host in brackets and nothing after them. The host
/// comes back lowercased (brackets kept), with the port when there is one;
/// `None`: not such a value.
pub fn host_port(value: &str) -> Option<(String, Option<u16>)> {
    if value.is_empty() || value.contains('@') {
        return None;
    }
    let authority: axum::http::uri::Authority = value.parse().ok()?;
    let host = authority.host();
    if host.is_empty() || (host.starts_with('[') && !host.ends_with(']')) {
        return None;
    }
    // Nothing the parser let through that is neither host nor port: the
    // value is the host, then `:` and the port in its canonical form
    // (digits, no leading zero) when there is one.
    if !value.get(..host.len())?.eq_ignore_ascii_case(host) {
        return None;
    }
    let rest = &value[host.len()..];
    let port = match authority.port() {
        None if rest.is_empty() => None,
        None => return None,
        Some(p) => {
            let digits = p.as_str();
            let canonical = digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'));
            if !canonical || rest.strip_prefix(':') != Some(digits) {
                return None;
            }
            Some(digits.parse::<u16>().ok()?)
        }
    };
    Some((host.to_ascii_lowercase(), port))
}

/// Loopback host names: `localhost`, `127.0.0.1`, `[::1]`, with or without
/// a port ([`host_port`]: anything else, user info included, is not).
pub fn is_loopback_host(host: &str) -> bool {
    host_port(host).is_some_and(|(name, _)| is_loopback_name(&name))
}

/// A host name from [`host_port`] (lowercase) that is a loopback one.
fn is_loopback_name(name: &str) -> bool {
    matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

/// Makes the request's authority its `Host`, for [`check_host_and_origin`]:
/// HTTP/2 carries it in `:authority` (RFC 9113 §8.3.1), an HTTP/1.1
/// request in absolute form in its target (RFC 9112 §3.2.2); `uri` is the
/// request's. 400 for a target whose scheme is not `http` or `https`, an
/// authority with user info, and a `Host` that names another authority
/// (a malformed request: which one would be served?).
pub fn authority_as_host(headers: &mut HeaderMap, uri: &axum::http::Uri) -> Result<(), McpError> {
    let bad = |what: String| McpError::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, what);
    if let Some(scheme) = uri.scheme_str()
        && !matches!(scheme, "http" | "https")
    {
        return Err(bad(format!(
            "the request's scheme {scheme:?} is not served here (http or https)"
        )));
    }
    let Some(authority) = uri.authority().map(|a| a.as_str()) else {
        return Ok(());
    };
    if authority.contains('@') {
        return Err(bad(format!(
            "the request's authority {authority:?} carries user info (RFC 9110 §4.2.4)"
        )));
    }
    match headers.get(header::HOST) {
        None => {
            let value = HeaderValue::from_str(authority).map_err(|_| {
                bad(format!(
                    "the request's authority {authority:?} is not a valid host"
                ))
            })?;
            headers.insert(header::HOST, value);
            Ok(())
        }
        Some(host) if host.as_bytes().eq_ignore_ascii_case(authority.as_bytes()) => Ok(()),
        Some(host) => Err(bad(format!(
            "Host {:?} names another authority than the request's, {authority:?}",
            text(host)
        ))),
    }
}

/// A header's value as text for matching and for messages: as it is when
/// it is visible ASCII, else with every other byte escaped (`\xc3`), so a
/// message shows what came and the value matches nothing configured.
fn text(value: &HeaderValue) -> std::borrow::Cow<'_, str> {
    match value.to_str() {
        Ok(s) => s.into(),
        Err(_) => value.as_bytes().escape_ascii().to_string().into(),
    }
}

/// The one `Host` of a request, checked (RFC 9112 §3.2: exactly one, and a
/// valid one; 400 otherwise), then 403 unless it and `Origin` are allowed
/// (see `McpConfig`): `loopback` says whether the endpoint listens on a
/// loopback address.
pub fn check_host_and_origin(
    headers: &HeaderMap,
    config: &McpConfig,
    loopback: bool,
) -> Result<(), McpError> {
    let forbidden = |what: String| McpError::new(StatusCode::FORBIDDEN, INVALID_REQUEST, what);
    let bad = |what: String| McpError::new(StatusCode::BAD_REQUEST, INVALID_REQUEST, what);
    let hosts: Vec<_> = headers.get_all(header::HOST).iter().collect();
    let host = match hosts.as_slice() {
        [] => {
            return Err(bad(
                "no Host header (nor :authority): which host is asked for?".into(),
            ));
        }
        [one] => &text(one),
        _ => return Err(bad("more than one Host header".into())),
    };
    let Some((name, port)) = host_port(host) else {
        return Err(bad(format!("Host {host:?} is not a host[:port]")));
    };
    let listed = config.allowed_hosts.iter().any(|a| {
        host_port(a)
            .is_some_and(|(a_name, a_port)| a_name == name && (a_port.is_none() || a_port == port))
    });
    let loopback_name = is_loopback_name(&name);
    let allowed = if config.allowed_hosts.is_empty() {
        !loopback || loopback_name
    } else {
        listed || (loopback && loopback_name)
    };
    if !allowed {
        return Err(forbidden(format!(
            "Host {host:?} is not served here (DNS rebinding protection; see mcp.allowed_hosts)"
        )));
    }
    let origins: Vec<_> = headers.get_all(header::ORIGIN).iter().collect();
    match origins.as_slice() {
        [] => Ok(()),
        [origin] => {
            let origin = &text(origin);
            if origin_allowed(origin, config, loopback) {
                Ok(())
            } else {
                Err(forbidden(format!(
                    "Origin {origin:?} is not allowed (see mcp.allowed_origins)"
                )))
            }
        }
        _ => Err(forbidden("more than one Origin header".into())),
    }
}

/// Refuses (400) a request that carries one of the headers that are read
/// as one value more than once: two would let an intermediary act on one
/// value while the endpoint acts on the other (a proxy routing on the
/// last `Mcp-Method`, or authorizing the second `Authorization`). The
/// headers that mirror the request (`MCP-Protocol-Version`, `Mcp-Method`,
/// `Mcp-Name`, `Mcp-Param-*`) get -32020, as two cannot both match it;
/// `Authorization`, `Content-Type`, `Mcp-Session-Id` and `Last-Event-ID`
/// get -32600.
pub fn check_single_headers(headers: &HeaderMap) -> Result<(), McpError> {
    use switchyard_mcp::headers as mcp;
    for name in headers.keys() {
        let n = name.as_str();
        let mirrored = [mcp::PROTOCOL_VERSION, mcp::METHOD, mcp::NAME].contains(&n)
            || n.starts_with(mcp::PARAM_PREFIX);
        let single = mirrored
            || [
                header::AUTHORIZATION.as_str(),
                header::CONTENT_TYPE.as_str(),
                mcp::SESSION_ID,
                "last-event-id",
            ]
            .contains(&n);
        if single && headers.get_all(name).iter().nth(1).is_some() {
            let what = format!("more than one {n} header: send it once");
            return Err(match mirrored {
                true => McpError::header_mismatch(what),
                false => McpError::bad_request(what),
            });
        }
    }
    Ok(())
}

/// Whether requests from `origin` are served: one of
/// `mcp.allowed_origins`, or a loopback origin while the endpoint listens
/// on a loopback address (`loopback`).
pub fn origin_allowed(origin: &str, config: &McpConfig, loopback: bool) -> bool {
    config.allowed_origins.iter().any(|a| a == origin) || (loopback && is_loopback_origin(origin))
}

/// CORS for the origins [`origin_allowed`] serves, so a browser page of
/// one may call the endpoint directly (the MCP Inspector's direct
/// connection, a web agent): preflights are answered for `GET`, `POST`
/// and `DELETE` with the headers the page asks for (`Mcp-Param-*` names
/// vary by tool) and cached 10 minutes; answers name the origin and
/// expose `Mcp-Session-Id`, `MCP-Protocol-Version` and `WWW-Authenticate`.
/// Other origins get no CORS headers (and 403 on their requests).
pub fn cors(config: &McpConfig, loopback: bool) -> tower_http::cors::CorsLayer {
    use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};
    let config = config.clone();
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, _| {
            origin
                .to_str()
                .is_ok_and(|o| origin_allowed(o, &config, loopback))
        }))
        .allow_methods([
            axum::http::Method::GET,
            axum::http::Method::POST,
            axum::http::Method::DELETE,
        ])
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers([
            HeaderName::from_static(switchyard_mcp::headers::SESSION_ID),
            HeaderName::from_static(switchyard_mcp::headers::PROTOCOL_VERSION),
            header::WWW_AUTHENTICATE,
        ])
        .max_age(std::time::Duration::from_secs(600))
}

/// Whether `origin` is `http://` or `https://` and a loopback host
/// ([`is_loopback_host`]), with nothing after it (RFC 6454 §6.1).
fn is_loopback_origin(origin: &str) -> bool {
    origin
        .split_once("://")
        .is_some_and(|(scheme, rest)| matches!(scheme, "http" | "https") && is_loopback_host(rest))
}

/// Whether the media range list `accept` takes `media` (`type/subtype`):
/// the most specific range that names it decides (by name without other
/// parameters, by name with some, `type/*`, then `*/*`; of equally
/// specific ones, any that takes it), and a `q` of zero there refuses it
/// (RFC 9110 §12.5.1; a `q` that is not a qvalue is ignored).
pub fn accepts(accept: &str, media: &str) -> bool {
    let (ty, _) = media.split_once('/').unwrap_or((media, ""));
    let mut best: Option<(u8, bool)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';');
        let name = parts.next().unwrap_or("").trim();
        let (mut refused, mut other_params) = (false, false);
        for p in parts.map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            match k.trim().eq_ignore_ascii_case("q") {
                true => refused |= is_zero_qvalue(v.trim()),
                false => other_params = true,
            }
        }
        let specificity = if name.eq_ignore_ascii_case(media) {
            if other_params { 3 } else { 4 }
        } else if name
            .strip_suffix("/*")
            .is_some_and(|t| t.eq_ignore_ascii_case(ty))
        {
            2
        } else if name == "*/*" {
            1
        } else {
            continue;
        };
        best = match best {
            Some((s, taken)) if s > specificity => Some((s, taken)),
            Some((s, taken)) if s == specificity => Some((s, taken || !refused)),
            _ => Some((specificity, !refused)),
        };
    }
    best.is_some_and(|(_, taken)| taken)
}

/// Whether `v` is a qvalue of zero: `0`, `0.`, `0.0`, `0.00` or `0.000`.
fn is_zero_qvalue(v: &str) -> bool {
    v.strip_prefix('0').is_some_and(|rest| {
        rest.is_empty()
            || rest
                .strip_prefix('.')
                .is_some_and(|z| z.len() <= 3 && z.bytes().all(|b| b == b'0'))
    })
}

/// What answers the client takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepts {
    /// `application/json`.
    pub json: bool,
    /// `text/event-stream`.
    pub sse: bool,
}

/// 415 unless the body is `application/json`; 406 unless `Accept` takes
/// JSON or SSE (clients MUST list both; one is enough here).
pub fn check_media(headers: &HeaderMap) -> Result<Accepts, McpError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(McpError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            INVALID_REQUEST,
            format!("Content-Type must be application/json, not {content_type:?}"),
        ));
    }
    let accept = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    let took = Accepts {
        json: accepts(&accept, "application/json"),
        sse: accepts(&accept, "text/event-stream"),
    };
    if !took.json && !took.sse {
        return Err(McpError::new(
            StatusCode::NOT_ACCEPTABLE,
            INVALID_REQUEST,
            format!(
                "Accept must include application/json or text/event-stream (both, for answers that may stream), not {accept:?}"
            ),
        ));
    }
    Ok(took)
}

/// How many request bodies may be read at once, in
/// `mcp.max_body_bytes`: the endpoint buffers at most this many times
/// that, across all requests and connections (64 MiB by default).
pub const BODIES_AT_ONCE: u64 = 16;

/// How much of [`BODIES_AT_ONCE`] one caller may hold, in
/// `mcp.max_body_bytes` (a caller: an `[[auth.tokens]]` entry's name; all
/// anonymous callers together), so that one caller's slow bodies cannot
/// take every other caller's room.
pub const BODIES_PER_CALLER: u64 = 4;

/// The bytes of the request bodies being read at once, in all and per
/// caller ([`read_body`] draws on it).
#[derive(Debug)]
pub struct BodyBudget {
    /// [`BODIES_AT_ONCE`] × `max_body_bytes` bytes, one permit a byte.
    all: tokio::sync::Semaphore,
    /// [`BODIES_PER_CALLER`] × `max_body_bytes` bytes.
    per_caller: u64,
    /// The bytes each caller holds now (callers holding none are absent).
    held: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl BodyBudget {
    /// Room for `all` bytes in all and `per_caller` per caller.
    pub fn new(all: u64, per_caller: u64) -> Self {
        let permits = usize::try_from(all)
            .unwrap_or(usize::MAX)
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        BodyBudget {
            all: tokio::sync::Semaphore::new(permits),
            per_caller,
            held: Default::default(),
        }
    }

    /// The bytes free in all.
    pub fn available(&self) -> usize {
        self.all.available_permits()
    }

    /// The bytes `caller` holds.
    pub fn held_by(&self, caller: &str) -> u64 {
        let held = self.held.lock().expect("not poisoned");
        held.get(caller).copied().unwrap_or(0)
    }
}

/// The endpoint's budget for `config`: [`BODIES_AT_ONCE`] and
/// [`BODIES_PER_CALLER`] × `max_body_bytes`.
pub fn body_budget(config: &McpConfig) -> std::sync::Arc<BodyBudget> {
    std::sync::Arc::new(BodyBudget::new(
        config.max_body_bytes.saturating_mul(BODIES_AT_ONCE),
        config.max_body_bytes.saturating_mul(BODIES_PER_CALLER),
    ))
}

/// What one body holds of a [`BodyBudget`], given back when dropped.
struct Held<'a> {
    budget: &'a BodyBudget,
    caller: &'a str,
    permit: Option<tokio::sync::SemaphorePermit<'a>>,
    bytes: u64,
}

impl Held<'_> {
    /// Takes `n` more bytes; `Err` names the share that is full.
    fn take(&mut self, n: u64) -> Result<(), &'static str> {
        {
            let mut held = self.budget.held.lock().expect("not poisoned");
            let mine = held.get(self.caller).copied().unwrap_or(0);
            if mine + n > self.budget.per_caller {
                return Err("this caller's request bodies being read at once are over its share");
            }
            match held.get_mut(self.caller) {
                Some(m) => *m += n,
                // The caller's name is copied only when it starts to hold.
                None => {
                    held.insert(self.caller.to_owned(), n);
                }
            }
        }
        self.bytes += n;
        let permits = u32::try_from(n).unwrap_or(u32::MAX);
        match self.budget.all.try_acquire_many(permits) {
            Ok(permit) => {
                match &mut self.permit {
                    Some(p) => p.merge(permit),
                    None => self.permit = Some(permit),
                }
                Ok(())
            }
            Err(_) => Err("too many request bodies are being read at once"),
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut held = self.budget.held.lock().expect("not poisoned");
        if let Some(mine) = held.get_mut(self.caller) {
            *mine = mine.saturating_sub(self.bytes);
            if *mine == 0 {
                held.remove(self.caller);
            }
        }
    }
}

/// The body of `caller`'s request (its name; empty: anonymous), at most
/// `limit` bytes: 413 past it (the rest is not read); 408 when all of it
/// has not come `within` (from the first read); 503 when the bodies being
/// read at once would hold more than `budget` has, in all or for this
/// caller (its bytes are returned once the body is read or refused).
pub async fn read_body(
    body: Body,
    limit: u64,
    within: Duration,
    budget: &BodyBudget,
    caller: &str,
) -> Result<Bytes, McpError> {
    let too_large = || {
        McpError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            INVALID_REQUEST,
            format!("the request body is over {limit} bytes (mcp.max_body_bytes)"),
        )
    };
    let deadline = tokio::time::Instant::now() + within;
    let mut out = BytesMut::new();
    let mut held = Held {
        budget,
        caller,
        permit: None,
        bytes: 0,
    };
    let mut stream = body.into_data_stream();
    loop {
        let chunk = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(_) => {
                return Err(McpError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    INVALID_REQUEST,
                    format!(
                        "the request body did not arrive within {} s (mcp.body_timeout_sec)",
                        within.as_secs()
                    ),
                ));
            }
        };
        let chunk = chunk.map_err(|e| {
            McpError::bad_request(format!("the request body could not be read: {e}"))
        })?;
        if (out.len() + chunk.len()) as u64 > limit {
            return Err(too_large());
        }
        if let Err(full) = held.take(chunk.len() as u64) {
            return Err(McpError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                INVALID_REQUEST,
                format!("{full}; send the request again in a moment"),
            ));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out.freeze())
}

/// Whether `body` is one JSON value in UTF-8, read for its syntax alone:
/// numbers of any size, nesting of any depth. `IgnoredAny` skips strings
/// without checking their bytes or their `\u` escapes, hence the UTF-8
/// check first and the lone surrogates after (serde_json refuses both).
pub fn is_json(body: &[u8]) -> bool {
    std::str::from_utf8(body).is_ok()
        && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
        && !has_lone_surrogate(body)
}

/// Whether a string of `json` (JSON text) escapes half of a UTF-16
/// surrogate pair alone (`"\ud800"`, or a low half first).
fn has_lone_surrogate(json: &[u8]) -> bool {
    let unit = |at: usize| -> Option<u16> {
        let hex = json.get(at..at + 6)?;
        if hex[0] != b'\\' || hex[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16).ok()
    };
    let (mut i, mut in_string) = (0, false);
    while i < json.len() {
        match json[i] {
            b'"' => in_string = !in_string,
            b'\\' if in_string => match unit(i) {
                Some(0xD800..=0xDBFF) => {
                    if !matches!(unit(i + 6), Some(0xDC00..=0xDFFF)) {
                        return true;
                    }
                    i += 12;
                    continue;
                }
                Some(0xDC00..=0xDFFF) => return true,
                _ => i += 1,
            },
            _ => {}
        }
        i += 1;
    }
    false
}

/// Parses the one message of a POST. Errors (400): not JSON (-32700); a
/// batch, JSON that is not a JSON-RPC 2.0 request, notification or
/// response, a number no double holds or nesting beyond 127 levels
/// (-32600), naming what is wrong.
pub fn parse(body: &[u8]) -> Result<Message, McpError> {
    let mut raw: Value = serde_json::from_slice(body).map_err(|e| {
        // Valid JSON, but a number no double holds (`1e400`), or nested
        // deeper than serde_json reads (128 levels). serde_json stops at
        // the first error, so the rest of the body is read once more for
        // its syntax alone (`IgnoredAny` has neither limit): `1e400` then
        // garbage is not JSON.
        let said = e.to_string();
        let limit =
            said.starts_with("number out of range") || said.starts_with("recursion limit exceeded");
        let (code, what) = if limit && !is_json(body) {
            (PARSE_ERROR, "the body is not JSON")
        } else if said.starts_with("number out of range") {
            (INVALID_REQUEST, "a number in the body is out of range")
        } else if said.starts_with("recursion limit exceeded") {
            (
                INVALID_REQUEST,
                "the body nests arrays and objects too deep (at most 127 levels)",
            )
        } else {
            (PARSE_ERROR, "the body is not JSON")
        };
        McpError::new(StatusCode::BAD_REQUEST, code, format!("{what}: {e}"))
    })?;
    if raw.is_array() {
        return Err(McpError::bad_request(
            "JSON-RPC batches are not supported (MCP sends one message per POST since 2025-06-18)",
        ));
    }
    let id = raw.get("id").cloned();
    let Some(kind) = jsonrpc::classify(&raw) else {
        let why = match &raw {
            Value::Object(m) if m.get("jsonrpc") != Some(&Value::from("2.0")) => {
                "\"jsonrpc\" must be \"2.0\""
            }
            Value::Object(m) if m.get("id").is_some_and(|i| !jsonrpc::is_valid_id(i)) => {
                "\"id\" must be a string or an integer of at most 64 bits (a fractional or larger number could not be echoed exactly)"
            }
            Value::Object(m) if m.get("method").is_some_and(|v| !v.is_string()) => {
                "\"method\" must be a string"
            }
            Value::Object(_) => "it has neither a \"method\" nor a \"result\" or \"error\"",
            _ => "it is not a JSON object",
        };
        return Err(
            McpError::bad_request(format!("not a JSON-RPC 2.0 message: {why}"))
                .with_id(id.as_ref().filter(|i| jsonrpc::is_valid_id(i))),
        );
    };
    if let Some(inexact) = jsonrpc::inexact_number(body) {
        return Err(McpError::new(
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_PARAMS,
            format!("{inexact}: it would not reach the server as sent (send it as a string)"),
        )
        .with_id(id.as_ref()));
    }
    let method = raw
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    // Moved out of the message, not copied.
    let params = match raw.as_object_mut().and_then(|m| m.remove("params")) {
        None => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(McpError::new(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_PARAMS,
                "\"params\" must be an object",
            )
            .with_id(id.as_ref()));
        }
    };
    Ok(Message {
        kind,
        id,
        method,
        params,
        raw,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn headers_read_as_one_value_come_once() {
        let code = |pairs: &[(&'static str, &str)]| {
            check_single_headers(&headers(pairs))
                .map_err(|e| (e.status.as_u16(), e.code, e.message))
        };
        assert_eq!(
            code(&[
                ("mcp-method", "tools/call"),
                ("accept", "a"),
                ("accept", "b")
            ]),
            Ok(()),
            "Accept may be a list"
        );
        for (name, rpc) in [
            ("mcp-method", jsonrpc::HEADER_MISMATCH),
            ("mcp-name", jsonrpc::HEADER_MISMATCH),
            ("mcp-protocol-version", jsonrpc::HEADER_MISMATCH),
            ("mcp-param-region", jsonrpc::HEADER_MISMATCH),
            ("authorization", INVALID_REQUEST),
            ("content-type", INVALID_REQUEST),
            ("mcp-session-id", INVALID_REQUEST),
            ("last-event-id", INVALID_REQUEST),
        ] {
            assert_eq!(
                code(&[(name, "a"), ("host", "localhost"), (name, "b")]),
                Err((
                    400,
                    rpc,
                    format!("more than one {name} header: send it once")
                )),
            );
        }
    }

    #[test]
    fn the_authority_is_the_host() {
        let uri = |u: &str| u.parse::<axum::http::Uri>().unwrap();
        // HTTP/2 (no Host): the authority becomes the Host.
        let mut h = headers(&[]);
        authority_as_host(&mut h, &uri("http://localhost:7790/mcp")).unwrap();
        assert_eq!(h[header::HOST], "localhost:7790");
        // Both, the same (case aside): unchanged.
        let mut h = headers(&[("host", "LocalHost:7790")]);
        authority_as_host(&mut h, &uri("http://localhost:7790/mcp")).unwrap();
        assert_eq!(h[header::HOST], "LocalHost:7790");
        // No authority (HTTP/1.1 in origin form): Host alone decides.
        let mut h = headers(&[("host", "evil.example.com")]);
        authority_as_host(&mut h, &uri("/mcp")).unwrap();
        assert_eq!(h[header::HOST], "evil.example.com");
        // Refused (400), each saying why: another authority than Host's,
        // user info, a scheme other than http(s).
        for (target, host, says) in [
            (
                "http://evil.example.com:7790/mcp",
                Some("localhost:7790"),
                "another authority",
            ),
            (
                "http://localhost:80@evil.example.com/mcp",
                None,
                "user info",
            ),
            ("ftp://localhost:7790/mcp", None, "scheme \"ftp\""),
            ("javascript://localhost/mcp", None, "scheme"),
        ] {
            let mut h = headers(&host.map(|v| vec![("host", v)]).unwrap_or_default());
            let e = authority_as_host(&mut h, &uri(target)).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{target}");
            assert!(e.message.contains(says), "{target}: {}", e.message);
        }
    }

    #[tokio::test]
    async fn a_stalled_body_is_given_up_on() {
        let one = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"{\"a\":"))]);
        let stalled = Body::from_stream(one.chain(futures::stream::pending()));
        let started = std::time::Instant::now();
        let budget = BodyBudget::new(1 << 20, 1 << 20);
        let e = read_body(stalled, 1024, Duration::from_secs(1), &budget, "")
            .await
            .unwrap_err();
        assert_eq!(e.status, StatusCode::REQUEST_TIMEOUT);
        assert!(e.message.contains("mcp.body_timeout_sec"), "{}", e.message);
        assert!(started.elapsed() < Duration::from_secs(10));
        // A body that comes in time is read whole.
        let whole = Body::from(r#"{"a":1}"#);
        let got = read_body(whole, 1024, Duration::from_secs(1), &budget, "")
            .await
            .unwrap();
        assert_eq!(&got[..], br#"{"a":1}"#);
        // Every byte is given back, refused or read.
        assert_eq!(budget.available(), 1 << 20);
        assert_eq!(budget.held_by(""), 0);
    }

    /// A body of `caller` that sends `first` and then stalls, read in a
    /// task, once it holds its bytes.
    async fn stalled(
        budget: &std::sync::Arc<BodyBudget>,
        caller: &'static str,
        first: &'static [u8],
    ) -> tokio::task::JoinHandle<Result<Bytes, McpError>> {
        let chunk = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(first))]);
        let body = Body::from_stream(chunk.chain(futures::stream::pending()));
        let b = budget.clone();
        let reading = tokio::spawn(async move {
            read_body(body, 1024, Duration::from_secs(30), &b, caller).await
        });
        while budget.held_by(caller) < first.len() as u64 {
            tokio::task::yield_now().await;
        }
        reading
    }

    #[tokio::test]
    async fn bodies_read_at_once_share_one_budget() {
        // Room for 10 bytes: a stalled body holds 6 of them...
        let budget = std::sync::Arc::new(BodyBudget::new(10, 10));
        let reading = stalled(&budget, "", b"123456").await;
        assert_eq!(budget.available(), 4);
        // ... so another 6 is refused at once, with 503; 4 still fit.
        let e = read_body(
            Body::from("abcdef"),
            1024,
            Duration::from_secs(1),
            &budget,
            "",
        )
        .await
        .unwrap_err();
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE, "{}", e.message);
        let four = read_body(
            Body::from("abcd"),
            1024,
            Duration::from_secs(1),
            &budget,
            "",
        )
        .await;
        assert!(four.is_ok());
        // The stalled one's bytes come back when it is given up on.
        reading.abort();
        let _ = reading.await;
        assert_eq!(budget.available(), 10);
        assert_eq!(budget.held_by(""), 0);
    }

    #[tokio::test]
    async fn one_callers_bodies_leave_the_others_room() {
        // 20 bytes in all, 10 per caller: alice's stalled 6...
        let budget = std::sync::Arc::new(BodyBudget::new(20, 10));
        let reading = stalled(&budget, "alice", b"123456").await;
        // ... leave her 4, whatever is free in all...
        let e = read_body(
            Body::from("abcdef"),
            1024,
            Duration::from_secs(1),
            &budget,
            "alice",
        )
        .await
        .unwrap_err();
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.message.contains("this caller's"), "{}", e.message);
        assert_eq!(
            budget.held_by("alice"),
            6,
            "the refused body gave its bytes back"
        );
        // ... and bob his own share.
        let bob = read_body(
            Body::from("abcdefghij"),
            1024,
            Duration::from_secs(1),
            &budget,
            "bob",
        )
        .await;
        assert!(bob.is_ok());
        reading.abort();
        let _ = reading.await;
        assert_eq!((budget.available(), budget.held_by("alice")), (20, 0));
    }

    #[test]
    fn hosts_are_read_strictly() {
        assert_eq!(
            host_port("LocalHost:7790"),
            Some(("localhost".into(), Some(7790)))
        );
        assert_eq!(host_port("[::1]"), Some(("[::1]".into(), None)));
        assert_eq!(
            host_port("gw.example.com"),
            Some(("gw.example.com".into(), None))
        );
        for bad in [
            "",
            "localhost:80@evil.example.com",
            "[::1]evil.example.com",
            "[::1].evil.example.com",
            "localhost:evil.example.com",
            "localhost:99999",
            "localhost:7790, evil.example.com",
            "localhost:",
            "localhost:080",
            "localhost:+80",
            "localhost:7790:",
        ] {
            assert_eq!(host_port(bad), None, "{bad:?}");
            assert!(!is_loopback_host(bad), "{bad:?}");
        }
        assert!(is_loopback_host("[::1]:7790") && is_loopback_host("127.0.0.1"));
        assert!(!is_loopback_host("localhost.") && !is_loopback_host("127.1"));
        assert!(is_loopback_origin("http://localhost:3000"));
        for bad in [
            "http://localhost:80@evil.example.com",
            "http://[::1]evil.example.com",
            "http://localhost/path",
            "ftp://localhost",
            "null",
        ] {
            assert!(!is_loopback_origin(bad), "{bad:?}");
        }
    }

    #[test]
    fn the_host_header_is_one_and_valid() {
        let c = McpConfig::default();
        let status = |pairs: &[(&'static str, &str)]| {
            check_host_and_origin(&headers(pairs), &c, true).map_err(|e| (e.status, e.message))
        };
        let (code, says) = status(&[]).unwrap_err();
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(says.contains("no Host"), "{says}");
        let (code, says) =
            status(&[("host", "localhost"), ("host", "evil.example.com")]).unwrap_err();
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(says.contains("more than one Host"), "{says}");
        let (code, says) = status(&[("host", "localhost:80@evil.example.com")]).unwrap_err();
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(says.contains("not a host[:port]"), "{says}");
        // allowed_hosts: the host without regard to case, any port unless
        // the entry names one.
        let c = McpConfig {
            allowed_hosts: vec!["gw.example.com".into(), "api.example.com:443".into()],
            ..McpConfig::default()
        };
        let ok = |host: &str| check_host_and_origin(&headers(&[("host", host)]), &c, false).is_ok();
        assert!(ok("GW.EXAMPLE.COM:443") && ok("gw.example.com") && ok("api.example.com:443"));
        assert!(!ok("api.example.com:8443") && !ok("gw.example.com:1@evil.example.com"));
    }

    #[test]
    fn values_that_are_not_text_are_shown_escaped() {
        let mut h = headers(&[("host", "localhost")]);
        h.append(
            header::ORIGIN,
            HeaderValue::from_bytes(b"https://b\xc3\xbccher.example").unwrap(),
        );
        let e = check_host_and_origin(&h, &McpConfig::default(), true).unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert!(e.message.contains(r"b\\xc3\\xbccher"), "{}", e.message);
        let mut h = HeaderMap::new();
        h.append(
            header::HOST,
            HeaderValue::from_bytes(b"gw\xff.example").unwrap(),
        );
        let e = check_host_and_origin(&h, &McpConfig::default(), false).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains(r"gw\\xff.example"), "{}", e.message);
    }

    #[test]
    fn every_entry_the_config_takes_matches_what_clients_send() {
        // The config refuses entries that could never match
        // (`config::check_origin`, `config::check_host`); what it takes
        // matches the same text in `Host` and `Origin`.
        let c = crate::config::Config::parse(
            "[mcp]\nallowed_origins = [\"https://app.example.com:8443\", \"http://localhost:6274\", \
             \"https://[::1]:8080\", \"https://xn--bcher-kva.example\", \"http://10.0.0.7\"]\n\
             allowed_hosts = [\"GW.example.com\", \"gw.example.com:443\", \"[::1]:7701\", \
             \"127.0.0.1\", \"my_host.internal\", \"[2001:db8::1]\"]\n",
        )
        .unwrap()
        .mcp;
        for host in &c.allowed_hosts {
            let h = headers(&[("host", host)]);
            assert!(check_host_and_origin(&h, &c, false).is_ok(), "{host}");
        }
        for origin in &c.allowed_origins {
            let h = headers(&[("host", "gw.example.com"), ("origin", origin)]);
            assert!(check_host_and_origin(&h, &c, false).is_ok(), "{origin}");
        }
    }

    #[test]
    fn loopback_endpoints_refuse_foreign_hosts_and_origins() {
        let c = McpConfig::default();
        let ok = |pairs: &[(&'static str, &str)], loopback| {
            check_host_and_origin(&headers(pairs), &c, loopback).is_ok()
        };
        assert!(ok(&[("host", "127.0.0.1:7790")], true));
        assert!(ok(
            &[
                ("host", "localhost:7790"),
                ("origin", "http://localhost:3000")
            ],
            true
        ));
        assert!(ok(&[("host", "[::1]:7790")], true));
        assert!(!ok(&[("host", "evil.example.com")], true));
        assert!(!ok(
            &[("host", "localhost"), ("origin", "http://evil.example.com")],
            true
        ));
        assert!(!ok(&[("host", "localhost"), ("origin", "null")], true));
        let two = [
            ("host", "localhost"),
            ("origin", "http://localhost"),
            ("origin", "http://localhost"),
        ];
        assert!(!ok(&two, true));
        // Not on loopback: any host; origins only when listed.
        assert!(ok(&[("host", "gw.example.com")], false));
        assert!(!ok(
            &[("host", "gw.example.com"), ("origin", "http://localhost")],
            false
        ));
        let c = McpConfig {
            allowed_origins: vec!["https://app.example.com".into()],
            allowed_hosts: vec!["gw.example.com".into()],
            ..McpConfig::default()
        };
        let h = headers(&[
            ("host", "gw.example.com:443"),
            ("origin", "https://app.example.com"),
        ]);
        assert!(check_host_and_origin(&h, &c, false).is_ok());
        let h = headers(&[("host", "other.example.com")]);
        let e = check_host_and_origin(&h, &c, false).unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert!(e.message.contains("other.example.com"), "{}", e.message);
    }

    #[test]
    fn media_types_are_checked() {
        let json_both = [
            ("content-type", "application/json; charset=utf-8"),
            ("accept", "application/json, text/event-stream"),
        ];
        assert_eq!(
            check_media(&headers(&json_both)).unwrap(),
            Accepts {
                json: true,
                sse: true
            }
        );
        let e = check_media(&headers(&[
            ("content-type", "text/plain"),
            ("accept", "*/*"),
        ]))
        .unwrap_err();
        assert_eq!(e.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let e = check_media(&headers(&[
            ("content-type", "application/json"),
            ("accept", "text/html"),
        ]))
        .unwrap_err();
        assert_eq!(e.status, StatusCode::NOT_ACCEPTABLE);
        let any = [("content-type", "application/json"), ("accept", "*/*")];
        assert!(check_media(&headers(&any)).unwrap().json);
        // `q=0` refuses; the most specific range decides.
        assert!(!accepts("application/json;q=0", "application/json"));
        assert!(!accepts("application/json; q=0.0, */*", "application/json"));
        assert!(accepts(
            "application/json;q=0.5, */*;q=0",
            "application/json"
        ));
        assert!(!accepts(
            "text/*;q=0, application/json",
            "text/event-stream"
        ));
        assert!(accepts(
            "text/*;q=0, TEXT/Event-Stream",
            "text/event-stream"
        ));
        assert!(accepts("Application/*", "application/json"));
        assert!(!accepts(
            "application/jsonx, xapplication/*",
            "application/json"
        ));
        // A `q` that is not a qvalue is ignored; only a zero one refuses.
        for q in ["abc", "1.5", "NaN", "-1", "1e-50", "0.0001", ""] {
            assert!(
                accepts(&format!("application/json;q={q}"), "application/json"),
                "{q}"
            );
        }
        for q in ["0", "0.", "0.000", " 0 "] {
            assert!(
                !accepts(&format!("application/json; q={q}"), "application/json"),
                "{q:?}"
            );
        }
        // A range with other parameters is less specific than the bare
        // name; of equal ones, any that takes it.
        assert!(accepts(
            "application/json;charset=utf-8;q=0, application/json",
            "application/json"
        ));
        assert!(!accepts(
            "application/json;q=0, application/json;charset=utf-8",
            "application/json"
        ));
        assert!(accepts(
            "application/json;q=0, application/json",
            "application/json"
        ));
        let e = check_media(&headers(&[
            ("content-type", "application/json"),
            ("accept", "application/json;q=0, text/event-stream;q=0"),
        ]))
        .unwrap_err();
        assert_eq!(e.status, StatusCode::NOT_ACCEPTABLE);
    }

    #[test]
    fn one_message_per_post() {
        let m =
            parse(br#"{"jsonrpc":"2.0","id":"0","method":"tools/list","params":{"x":1}}"#).unwrap();
        assert_eq!(
            (m.kind, m.id, m.method.as_str()),
            (Kind::Request, Some(json!("0")), "tools/list")
        );
        assert_eq!(m.params["x"], 1);
        let m = parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert_eq!(m.kind, Kind::Notification);
        let m = parse(br#"{"jsonrpc":"2.0","id":7,"result":{}}"#).unwrap();
        assert_eq!(m.kind, Kind::Response);
        let e = parse(b"{not json").unwrap_err();
        assert_eq!((e.status, e.code), (StatusCode::BAD_REQUEST, PARSE_ERROR));
        let e = parse(br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#).unwrap_err();
        assert_eq!(e.code, INVALID_REQUEST);
        assert!(e.message.contains("batches"), "{}", e.message);
        let e = parse(br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#).unwrap_err();
        assert!(e.message.contains("\"2.0\""), "{}", e.message);
        assert_eq!(e.id, json!(1));
        let e = parse(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#).unwrap_err();
        assert!(e.message.contains("string or an integer"), "{}", e.message);
        // An id that would not be echoed exactly is refused, with no id.
        for id in ["18446744073709551616", "1.5", "-9223372036854775809"] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let e = parse(body.as_bytes()).unwrap_err();
            assert_eq!(
                (e.status, e.code),
                (StatusCode::BAD_REQUEST, INVALID_REQUEST)
            );
            assert!(e.message.contains("64 bits"), "{}", e.message);
            assert_eq!(e.id, Value::Null);
        }
        let e = parse(br#"{"jsonrpc":"2.0","id":3,"method":"ping","params":[1]}"#).unwrap_err();
        assert_eq!((e.code, e.id.clone()), (-32602, json!(3)));
        // A number the endpoint would forward changed is refused, naming it.
        let e = parse(
            br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"t","arguments":{"n":123456789012345678901234567890}}}"#,
        )
        .unwrap_err();
        assert_eq!(
            (e.status, e.code, e.id.clone()),
            (StatusCode::BAD_REQUEST, -32602, json!(4))
        );
        assert_eq!(
            e.message,
            "the integer 123456789012345678901234567890 is beyond 64 bits: it would not reach the server as sent (send it as a string)"
        );
        // Valid JSON, but no double holds the number: not "not JSON".
        let e =
            parse(br#"{"jsonrpc":"2.0","id":5,"method":"ping","params":{"x":1E400}}"#).unwrap_err();
        assert_eq!(e.code, INVALID_REQUEST, "{}", e.message);
        assert!(
            e.message
                .starts_with("a number in the body is out of range: "),
            "{}",
            e.message
        );
        // Valid JSON, nested deeper than it is read: not "not JSON" either.
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":5,"method":"ping","params":{{"x":{}{}}}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let e = parse(deep.as_bytes()).unwrap_err();
        assert_eq!(e.code, INVALID_REQUEST, "{}", e.message);
        assert!(
            e.message.contains("too deep (at most 127 levels)"),
            "{}",
            e.message
        );
        // Either limit, then something that is not JSON: "not JSON", as
        // the fuzzer found (serde_json stops at the first error).
        for body in [
            r#"{"jsonrpc":"2.0","iD":33333e3333333,"method" x}"#.to_owned(),
            format!(r#"{{"x":{}1e400"#, "[".repeat(200)),
            format!(r#"{{"x":{}]]"#, "[".repeat(200)),
        ] {
            let e = parse(body.as_bytes()).unwrap_err();
            assert_eq!(e.code, PARSE_ERROR, "{body}: {}", e.message);
            assert!(
                e.message.starts_with("the body is not JSON: "),
                "{}",
                e.message
            );
        }
        // A string that is not UTF-8 after the number: not JSON either.
        let e = parse(b"[1e400,\"\xff\"]").unwrap_err();
        assert_eq!(e.code, PARSE_ERROR, "{}", e.message);
        assert!(is_json(deep.as_bytes()) && is_json(b"[1e400]"));
        // Nor is a lone surrogate after the number (trial 15), whichever
        // half; a pair, or an escaped backslash before a `u`, is JSON.
        for body in [
            &br#"[1e400,"\ud800"]"#[..],
            br#"[1e400,"\udc00x"]"#,
            br#"[1e400,"\ud800\u0041"]"#,
        ] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.code, PARSE_ERROR, "{}", e.message);
        }
        for body in [&br#"[1e400,"\ud83d\ude82"]"#[..], br#"[1e400,"\\ud800"]"#] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.code, INVALID_REQUEST, "{}", e.message);
        }
    }
}
