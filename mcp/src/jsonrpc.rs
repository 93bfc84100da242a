//! JSON-RPC 2.0 messages as `serde_json::Value`, with typed views for the
//! fields the session acts on (`id`, `method`, `result`, `error`).
//!
//! Messages are never re-serialised through typed structs: whatever a peer
//! sends is kept byte-for-byte in meaning (unknown fields, `_meta`). Ids keep
//! their JSON type, so `0` and `"0"` stay different ids (JSON-RPC 2.0 §4).

use serde_json::{Map, Value, json};

/// JSON-RPC "Method not found" (JSON-RPC 2.0 §5.1).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "Invalid params" (JSON-RPC 2.0 §5.1): an unknown prompt or a
/// missing argument, and (2026-07-28) an unknown resource.
pub const INVALID_PARAMS: i64 = -32602;
/// MCP "Resource not found" (2025-11-25 server/resources, "Error
/// Handling"; 2026-07-28 clients SHOULD still accept it).
pub const RESOURCE_NOT_FOUND: i64 = -32002;
/// MCP `HeaderMismatch` (2026-07-28, basic/index "Error Codes").
pub const HEADER_MISMATCH: i64 = -32020;
/// MCP `MissingRequiredClientCapability` (2026-07-28).
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// MCP `UnsupportedProtocolVersion` (2026-07-28, basic/versioning).
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// `URLElicitationRequiredError` (2025-11-25 schema `URL_ELICITATION_REQUIRED`).
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// Whether `code` is one of the errors that only a modern (2026-07-28 and
/// later) server emits; used to tell eras apart (basic/versioning,
/// "Backward Compatibility").
pub fn is_modern_error_code(code: i64) -> bool {
    matches!(
        code,
        HEADER_MISMATCH | MISSING_REQUIRED_CLIENT_CAPABILITY | UNSUPPORTED_PROTOCOL_VERSION
    )
}

/// What an incoming message is, by shape (JSON-RPC 2.0 §4, §5).
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Has `method` and `id`: a request from the server to us.
    Request,
    /// Has `method` and no `id`.
    Notification,
    /// Has `id` and `result` or `error`.
    Response,
}

/// Classifies a parsed message; `None` when it is valid JSON but not a
/// JSON-RPC message (e.g. a banner object a server printed on stdout).
pub fn classify(msg: &Value) -> Option<Kind> {
    let obj = msg.as_object()?;
    if let Some(v) = obj.get("jsonrpc") {
        if v != "2.0" {
            return None;
        }
    } else {
        return None;
    }
    match (obj.get("method"), obj.get("id")) {
        (Some(Value::String(_)), Some(id)) if is_valid_id(id) => Some(Kind::Request),
        (Some(Value::String(_)), None) => Some(Kind::Notification),
        (None, Some(id))
            if (is_valid_id(id) || id.is_null())
                && (obj.contains_key("result") || obj.contains_key("error")) =>
        {
            Some(Kind::Response)
        }
        _ => None,
    }
}

/// An id we accept: a string, or an integer that fits in 64 bits (i64 or
/// u64). MCP requires "a string or integer ID", never null (basic/index,
/// Requests); a fractional number, or an integer beyond 64 bits, would not
/// be echoed exactly (`serde_json` would hold it as a float), so it is
/// refused rather than answered with an id the client never sent.
pub fn is_valid_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// A number in a JSON text that `serde_json`, which reads every message
/// the gateway forwards, would not hold as written ([`inexact_number`]).
/// Its `Display` says which and why: `the integer 1234… is beyond 64 bits`,
/// `the number 0.1000…1 has more digits or range than a double holds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inexact<'a> {
    /// The number as written.
    pub written: &'a str,
    /// Written as an integer (no fraction, no exponent).
    pub integer: bool,
}

impl std::fmt::Display for Inexact<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = preview(self.written.as_bytes(), 40);
        match self.integer {
            true => write!(f, "the integer {shown} is beyond 64 bits"),
            false => write!(
                f,
                "the number {shown} has more digits or range than a double holds"
            ),
        }
    }
}

/// The most significant digits a double needs to be written exactly
/// enough to be read back (shortest round trip: 17).
const MAX_DOUBLE_DIGITS: usize = 17;

/// The first number in `json` (JSON text; its strings are skipped) that
/// would reach the other side changed: an integer beyond the 64-bit range
/// (below `i64::MIN` or above `u64::MAX`: `serde_json` holds it as the
/// nearest double, `123456789012345678901234567890` as
/// `1.2345678901234568e+29`), or a number with a fraction or an exponent
/// that is no double's: more than 17 significant digits
/// (`0.1000000000000000000001` would become `0.1`), or not zero but read
/// as zero (`1e-400`). A double, however its writer wrote it (`0.10`,
/// `1e2`, `2.5E-3`, 17 digits), passes. The edges refuse such a number
/// instead of changing it. Linear in `json`'s length; `None` also for text
/// that is not JSON.
pub fn inexact_number(json: &[u8]) -> Option<Inexact<'_>> {
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => i = past_string(json, i),
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < json.len()
                    && matches!(json[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let written = std::str::from_utf8(&json[start..i]).ok()?;
                let integer = !written.contains(['.', 'e', 'E']);
                let exact = match (integer, written.starts_with('-')) {
                    (true, true) => written.parse::<i64>().is_ok(),
                    (true, false) => written.parse::<u64>().is_ok(),
                    // Every way of writing a double needs at most 17
                    // significant digits (a client's own double, written
                    // by any of them, passes); more, or a value that is not
                    // zero but reads as zero or infinity, is not a double.
                    (false, _) => {
                        let digits = significant_digits(written);
                        written.parse::<f64>().is_ok_and(|v| {
                            digits <= MAX_DOUBLE_DIGITS
                                && v.is_finite()
                                && (v != 0.0 || digits == 0)
                        })
                    }
                };
                if !exact && written.len() > 1 {
                    return Some(Inexact { written, integer });
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// The most levels of arrays and objects that every JSON reader in the
/// gateway takes in what it forwards: `serde_json` stops at 128, and a
/// call's arguments sit two levels down in the params the sidecar reads.
pub const MAX_DEPTH: usize = 120;

/// How deep arrays and objects nest in `json` (JSON text; its strings are
/// skipped): `0` for a scalar, `1` for `{}` or `[1]`. Linear in its length.
pub fn depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest, mut i) = (0usize, 0usize, 0);
    while i < json.len() {
        match json[i] {
            b'"' => {
                i = past_string(json, i);
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    deepest
}

/// The index just past the JSON string that opens at `json[start]` (a
/// `"`): an escape takes the byte after it.
fn past_string(json: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < json.len() && json[i] != b'"' {
        i += if json[i] == b'\\' { 2 } else { 1 };
    }
    i + 1
}

/// How many significant digits a JSON number is written with (leading
/// and trailing zeros of its mantissa aside; 0 for zero).
fn significant_digits(number: &str) -> usize {
    let mantissa = number.split(['e', 'E']).next().unwrap_or(number);
    let digits = mantissa.trim_start_matches(['-', '0', '.']);
    let digits = digits.trim_end_matches(['0', '.']);
    digits.bytes().filter(u8::is_ascii_digit).count()
}

/// Builds a request with our own upstream id.
pub fn request(id: u64, method: &str, params: Option<Value>) -> Value {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), "2.0".into());
    m.insert("id".into(), id.into());
    m.insert("method".into(), method.into());
    if let Some(p) = params {
        m.insert("params".into(), p);
    }
    Value::Object(m)
}

/// Builds a notification.
pub fn notification(method: &str, params: Option<Value>) -> Value {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), "2.0".into());
    m.insert("method".into(), method.into());
    if let Some(p) = params {
        m.insert("params".into(), p);
    }
    Value::Object(m)
}

/// A success response echoing `id` exactly.
pub fn result_response(id: &Value, result: Value) -> Value {
    // Built by hand: `json!` would copy `result` through its serialiser.
    let mut m = Map::with_capacity(3);
    m.insert("jsonrpc".into(), "2.0".into());
    m.insert("id".into(), id.clone());
    m.insert("result".into(), result);
    Value::Object(m)
}

/// An error response echoing `id` exactly.
pub fn error_response(id: &Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The `error` member of a response, viewed.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorObject {
    /// `error.code`.
    pub code: i64,
    /// `error.message`.
    pub message: String,
    /// `error.data`, kept as sent.
    pub data: Option<Value>,
}

impl ErrorObject {
    /// Reads `error` of a response; a malformed error object still yields an
    /// error (code -32603) carrying the raw object as data, so nothing is lost.
    pub fn from_response(msg: &Value) -> Option<Self> {
        let err = msg.get("error")?;
        let code = err.get("code").and_then(Value::as_i64);
        let message = err.get("message").and_then(Value::as_str);
        Some(match (code, message) {
            (Some(code), Some(message)) => ErrorObject {
                code,
                message: message.to_owned(),
                data: err.get("data").cloned(),
            },
            _ => ErrorObject {
                code: -32603,
                message: "malformed error object".into(),
                data: Some(err.clone()),
            },
        })
    }
}

/// What kind of JSON value `v` is, for error messages: `null`, `a
/// boolean`, `a number`, `a string`, `an array` or `an object`.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A short, single-line, UTF-8-safe preview of bytes for logs.
pub fn preview(bytes: &[u8], max_chars: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text.chars().take(max_chars).collect();
    if text.chars().count() > max_chars {
        out.push('…');
    }
    out.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests;
