//! Request metadata mirrored into HTTP headers (2026-07-28
//! basic/transports/streamable-http, "Request Metadata"): `Mcp-Method`,
//! `Mcp-Name`, and `Mcp-Param-{Name}` for tool parameters whose schema
//! carries `x-mcp-header`, with the `=?base64?…?=` value encoding.

use base64::Engine;
use serde_json::Value;

/// `MCP-Protocol-Version`: the request's protocol version (both eras).
pub const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// `Mcp-Session-Id` (2025-11-25): the session a request belongs to.
pub const SESSION_ID: &str = "mcp-session-id";
/// `Mcp-Method` (2026-07-28): the request's `method`.
pub const METHOD: &str = "mcp-method";
/// `Mcp-Name` (2026-07-28): `params.name` or `params.uri` of
/// `tools/call`, `prompts/get`, `resources/read` (`params.taskId` of the
/// tasks extension's methods).
pub const NAME: &str = "mcp-name";
/// Prefix of the headers that mirror `x-mcp-header` tool parameters.
pub const PARAM_PREFIX: &str = "mcp-param-";

/// A tool parameter mirrored into `Mcp-Param-{name}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderParam {
    /// The `x-mcp-header` value (the `{name}` part).
    pub name: String,
    /// The chain of `properties` keys leading to the parameter.
    pub path: Vec<String>,
}

/// Reads the `x-mcp-header` annotations of a tool's `inputSchema`.
///
/// Errors (the reason the tool definition is invalid, per "Schema
/// Extension"): an empty or non-token name, a duplicate name (case
/// insensitive), a non-primitive or `number` parameter, or an annotation
/// that is not statically reachable through `properties` alone.
pub fn header_params(input_schema: &Value) -> Result<Vec<HeaderParam>, String> {
    let mut found = Vec::new();
    collect_reachable(input_schema, &mut Vec::new(), &mut found)?;
    let total = count_annotations(input_schema);
    if total != found.len() {
        return Err(
            "x-mcp-header is only allowed on properties reachable through `properties` alone \
             (not under items, anyOf/oneOf/allOf/not, if/then/else, $ref or $defs)"
                .into(),
        );
    }
    let mut seen = std::collections::HashSet::new();
    for p in &found {
        if !seen.insert(p.name.to_ascii_lowercase()) {
            return Err(format!("x-mcp-header {:?} is used twice", p.name));
        }
    }
    Ok(found)
}

fn collect_reachable(
    schema: &Value,
    path: &mut Vec<String>,
    out: &mut Vec<HeaderParam>,
) -> Result<(), String> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (key, sub) in props {
        path.push(key.clone());
        if let Some(h) = sub.get("x-mcp-header") {
            let name = h
                .as_str()
                .ok_or_else(|| format!("x-mcp-header of {} is not a string", path.join(".")))?;
            if name.is_empty() || !name.bytes().all(is_tchar) {
                return Err(format!(
                    "x-mcp-header {name:?} of {} is not an HTTP token",
                    path.join(".")
                ));
            }
            let ty = sub.get("type").and_then(Value::as_str);
            if !matches!(ty, Some("string" | "integer" | "boolean")) {
                return Err(format!(
                    "x-mcp-header {name:?} is on {} of type {}, not string, integer or boolean",
                    path.join("."),
                    ty.map_or_else(|| "unspecified".to_owned(), |t| format!("{t:?}"))
                ));
            }
            out.push(HeaderParam {
                name: name.to_owned(),
                path: path.clone(),
            });
        }
        collect_reachable(sub, path, out)?;
        path.pop();
    }
    Ok(())
}

/// Counts `x-mcp-header` keywords anywhere in the schema (property names
/// inside a `properties` map are names, not keywords, and are not counted).
fn count_annotations(schema: &Value) -> usize {
    match schema {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match (k.as_str(), v) {
                ("x-mcp-header", _) => 1,
                (
                    "properties" | "patternProperties" | "$defs" | "definitions",
                    Value::Object(m),
                ) => m.values().map(count_annotations).sum(),
                _ => count_annotations(v),
            })
            .sum(),
        Value::Array(items) => items.iter().map(count_annotations).sum(),
        _ => 0,
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The header value of a parameter, or `None` to omit the header (value
/// absent, null, or not of a primitive type). Integers outside the
/// JavaScript safe range are omitted too.
pub fn param_value(arguments: &Value, path: &[String]) -> Option<String> {
    let mut v = arguments;
    for key in path {
        v = v.get(key)?;
    }
    let plain = match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            const MAX_SAFE: i64 = (1 << 53) - 1;
            let i = n
                .as_i64()
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))?;
            if !(-MAX_SAFE..=MAX_SAFE).contains(&i) {
                return None;
            }
            i.to_string()
        }
        _ => return None,
    };
    Some(encode_value(&plain))
}

/// Encodes a header value: as is when it is printable ASCII (space
/// included, control characters such as tab not) without leading or
/// trailing whitespace, else `=?base64?{base64 of UTF-8}?=`
/// ("Value Encoding"). A plain value that looks like the sentinel is
/// encoded too.
pub fn encode_value(value: &str) -> String {
    let safe = value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && value.trim() == value
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    if safe {
        value.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(value.as_bytes())
        )
    }
}

/// Decodes a header value: the `=?base64?…?=` form to its UTF-8 text, any
/// other value as it is ("Value Encoding"). `None`: the sentinel with bad
/// base64 or bytes that are not UTF-8, or a plain value with characters
/// outside printable ASCII.
pub fn decode_value(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    if let Some(b64) = text
        .strip_prefix("=?base64?")
        .and_then(|t| t.strip_suffix("?="))
    {
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        return String::from_utf8(bytes).ok();
    }
    text.bytes()
        .all(|b| (0x20..=0x7e).contains(&b))
        .then(|| text.to_owned())
}

/// Whether a header value decoded by [`decode_value`] stands for the
/// parameter value `v` (strings exactly, booleans as `true`/`false`,
/// integers compared as numbers).
pub fn param_matches(header: &str, v: &Value) -> bool {
    match v {
        Value::String(s) => s == header,
        Value::Bool(b) => header == if *b { "true" } else { "false" },
        Value::Number(n) => match (header.parse::<i64>(), n.as_i64()) {
            (Ok(h), Some(n)) => h == n,
            _ => header.parse::<f64>().ok() == n.as_f64(),
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests;
