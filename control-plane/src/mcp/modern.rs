//! A 2026-07-28 request, checked before it is routed (basic/index
//! "Request Metadata", basic/transports/streamable-http "Request
//! Metadata" and "Server Validation"). [`validate`] runs the checks in the
//! order the specification's examples and the conformance suite's
//! `server-stateless` scenario expect, so each bad request gets the error
//! it is tested for:
//!
//! 1. a method 2026-07-28 removed, or one this endpoint does not serve:
//!    404, -32601;
//! 2. no `MCP-Protocol-Version` header: 400, -32020;
//! 3. no `_meta`, or no `protocolVersion` or `clientCapabilities` in it:
//!    400, -32602;
//! 4. the header and `_meta` disagree on the version: 400, -32020;
//! 5. a version this endpoint does not speak: 400, -32022 with the
//!    supported versions;
//! 6. `Mcp-Method`, and `Mcp-Name` where the method has one, missing,
//!    undecodable or unlike the body: 400, -32020.
//!
//! `Mcp-Param-*` headers are checked against the tool's schema when the
//! call is resolved ([`check_params`]).

use super::discover::{LEGACY_VERSIONS, MODERN_VERSIONS};
use super::ingress::Message;
use super::respond::McpError;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;
use switchyard_mcp::{headers, jsonrpc, meta, methods};

/// The methods this endpoint serves to 2026-07-28 clients.
pub const SERVED: &[&str] = &[
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
    // The tasks extension (SEP-2663).
    methods::TASKS_GET,
    methods::TASKS_UPDATE,
    methods::TASKS_CANCEL,
];

/// What a valid 2026-07-28 request declared about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct Modern {
    /// `io.modelcontextprotocol/protocolVersion`.
    pub version: String,
    /// `io.modelcontextprotocol/clientCapabilities` (an object).
    pub client_capabilities: Value,
}

/// The `Mcp-Name` a method carries: `params.name` or `params.uri`.
fn name_param(method: &str) -> Option<&'static str> {
    match method {
        methods::TOOLS_CALL | methods::PROMPTS_GET => Some("name"),
        methods::RESOURCES_READ => Some("uri"),
        // SEP-2663 "Streamable HTTP: Routing Headers".
        methods::TASKS_GET | methods::TASKS_UPDATE | methods::TASKS_CANCEL => Some("taskId"),
        _ => None,
    }
}

/// One standard header, decoded; -32020 when it is present but cannot be
/// decoded.
fn header(h: &HeaderMap, name: &str) -> Result<Option<String>, McpError> {
    let Some(v) = h.get(name) else {
        return Ok(None);
    };
    // Surrounding white space is not part of a field value (RFC 9110 §5.5).
    let trimmed = v.as_bytes().trim_ascii();
    headers::decode_value(trimmed).map(Some).ok_or_else(|| {
        McpError::header_mismatch(format!(
            "header {name}: not a valid value (printable ASCII, or =?base64?…?= of UTF-8)"
        ))
    })
}

/// Validates request `msg` with headers `h` (module docs). Errors carry
/// the request's id.
pub fn validate(h: &HeaderMap, msg: &Message) -> Result<Modern, McpError> {
    let id = msg.id.as_ref();
    let method = msg.method.as_str();
    // 1. Removed and unknown methods, before anything in the params is
    //    looked at (a removed method's params need not parse).
    if methods::REMOVED_IN_2026.contains(&method) {
        return Err(McpError::method_not_found(method, "was removed in 2026-07-28").with_id(id));
    }
    if !SERVED.contains(&method) {
        return Err(
            McpError::method_not_found(method, "is not served by this endpoint").with_id(id),
        );
    }
    // 2. The version header.
    let Some(header_version) = header(h, headers::PROTOCOL_VERSION).map_err(|e| e.with_id(id))?
    else {
        return Err(McpError::header_mismatch(
            "header MCP-Protocol-Version: required on every 2026-07-28 request",
        )
        .with_id(id));
    };
    // 3. The request's `_meta`.
    let invalid = |what: &str| {
        McpError::new(
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_PARAMS,
            what.to_owned(),
        )
        .with_id(id)
    };
    let Some(m) = msg.meta() else {
        return Err(invalid(
            "params._meta: required (with io.modelcontextprotocol/protocolVersion and clientCapabilities)",
        ));
    };
    let Some(version) = m.get(meta::PROTOCOL_VERSION).and_then(Value::as_str) else {
        return Err(invalid(&format!(
            "params._meta[{:?}]: required, a string",
            meta::PROTOCOL_VERSION
        )));
    };
    let capabilities = match m.get(meta::CLIENT_CAPABILITIES) {
        Some(c @ Value::Object(_)) => c.clone(),
        _ => {
            return Err(invalid(&format!(
                "params._meta[{:?}]: required, an object ({{}} declares none)",
                meta::CLIENT_CAPABILITIES
            )));
        }
    };
    // 4. Header and body agree.
    if header_version != version {
        return Err(McpError::header_mismatch(format!(
            "header MCP-Protocol-Version is {header_version:?} but params._meta says {version:?}"
        ))
        .with_id(id));
    }
    // 5. A version we speak.
    if !MODERN_VERSIONS.contains(&version) {
        let mut supported: Vec<&str> = MODERN_VERSIONS.to_vec();
        supported.extend(LEGACY_VERSIONS);
        return Err(McpError::new(
            StatusCode::BAD_REQUEST,
            jsonrpc::UNSUPPORTED_PROTOCOL_VERSION,
            format!("protocol version {version:?} is not supported"),
        )
        .with_data(serde_json::json!({"supported": supported, "requested": version}))
        .with_id(id));
    }
    // 6. Mcp-Method and Mcp-Name mirror the body.
    match header(h, headers::METHOD).map_err(|e| e.with_id(id))? {
        None => {
            return Err(McpError::header_mismatch("header Mcp-Method: required").with_id(id));
        }
        Some(m) if m != method => {
            return Err(McpError::header_mismatch(format!(
                "header Mcp-Method is {m:?} but the body's method is {method:?}"
            ))
            .with_id(id));
        }
        Some(_) => {}
    }
    if let Some(key) = name_param(method) {
        let body = msg.params.get(key).and_then(Value::as_str);
        match (header(h, headers::NAME).map_err(|e| e.with_id(id))?, body) {
            (None, _) => {
                return Err(McpError::header_mismatch(format!(
                    "header Mcp-Name: required for {method} (params.{key})"
                ))
                .with_id(id));
            }
            (Some(n), Some(b)) if n == b => {}
            (Some(n), b) => {
                return Err(McpError::header_mismatch(format!(
                    "header Mcp-Name is {n:?} but params.{key} is {}",
                    b.map_or_else(|| "missing".to_owned(), |b| format!("{b:?}"))
                ))
                .with_id(id));
            }
        }
    }
    Ok(Modern {
        version: version.to_owned(),
        client_capabilities: capabilities,
    })
}

/// Checks the `Mcp-Param-{Name}` headers of a `tools/call` against the
/// tool's `inputSchema` (`x-mcp-header` annotations) and the `arguments`:
/// each annotated parameter present in the arguments needs its header with
/// the same value, and a header needs its parameter. Errors: 400, -32020.
pub fn check_params(
    h: &HeaderMap,
    input_schema: &Value,
    arguments: &Value,
) -> Result<(), McpError> {
    // A schema with invalid annotations mirrors nothing (the sidecar
    // leaves such headers out too).
    let Ok(params) = headers::header_params(input_schema) else {
        return Ok(());
    };
    for p in params {
        let name = format!("{}{}", headers::PARAM_PREFIX, p.name.to_ascii_lowercase());
        let mut value = Some(arguments);
        for key in &p.path {
            value = value.and_then(|v| v.get(key));
        }
        let value = value.filter(|v| !v.is_null());
        match (header(h, &name)?, value) {
            (None, None) => {}
            (Some(hv), Some(v)) if headers::param_matches(&hv, v) => {}
            (None, Some(_)) => {
                return Err(McpError::header_mismatch(format!(
                    "header Mcp-Param-{}: required, as arguments.{} is given",
                    p.name,
                    p.path.join(".")
                )));
            }
            (Some(hv), v) => {
                return Err(McpError::header_mismatch(format!(
                    "header Mcp-Param-{} is {hv:?} but arguments.{} is {}",
                    p.name,
                    p.path.join("."),
                    v.map_or_else(|| "missing".to_owned(), Value::to_string)
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    fn request(method: &str, params: Value) -> Message {
        super::super::ingress::parse(
            json!({"jsonrpc": "2.0", "id": 5, "method": method, "params": params})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn meta(version: &str) -> Value {
        json!({meta::PROTOCOL_VERSION: version, meta::CLIENT_CAPABILITIES: {}})
    }

    const GOOD: [(&str, &str); 3] = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];

    #[test]
    fn a_complete_request_passes() {
        let m = request(
            "tools/call",
            json!({"name": "echo", "_meta": meta("2026-07-28")}),
        );
        let ok = validate(&headers(&GOOD), &m).unwrap();
        assert_eq!(ok.version, "2026-07-28");
        // Surrounding white space in a header is not part of the value.
        let mut h = headers(&GOOD);
        h.insert("mcp-name", HeaderValue::from_static("  echo "));
        assert!(validate(&h, &m).is_ok());
    }

    #[test]
    fn checks_run_in_the_specified_order() {
        let code = |h: &[(&'static str, &str)], m: &Message| {
            let e = validate(&headers(h), m).unwrap_err();
            assert_eq!(e.id, json!(5), "the id is echoed");
            (e.status.as_u16(), e.code)
        };
        // Removed methods are 404 even with nothing else right.
        assert_eq!(code(&[], &request("initialize", json!({}))), (404, -32601));
        assert_eq!(code(&[], &request("ping", json!({}))), (404, -32601));
        assert_eq!(
            code(&GOOD, &request("unknown/method", json!({}))),
            (404, -32601)
        );
        // No header, then no _meta fields, then a mismatch, then the version.
        let good = request(
            "tools/call",
            json!({"name": "echo", "_meta": meta("2026-07-28")}),
        );
        assert_eq!(code(&GOOD[1..], &good), (400, -32020));
        let no_version = request(
            "tools/call",
            json!({"name": "echo", "_meta": {meta::CLIENT_CAPABILITIES: {}}}),
        );
        assert_eq!(code(&GOOD, &no_version), (400, -32602));
        let no_caps = request(
            "tools/call",
            json!({"name": "echo", "_meta": {meta::PROTOCOL_VERSION: "2026-07-28"}}),
        );
        assert_eq!(code(&GOOD, &no_caps), (400, -32602));
        assert_eq!(
            code(&GOOD, &request("tools/call", json!({"name": "echo"}))),
            (400, -32602)
        );
        let v999 = request(
            "tools/call",
            json!({"name": "echo", "_meta": meta("v999.0.0")}),
        );
        assert_eq!(
            code(&GOOD, &v999),
            (400, -32020),
            "header 2026-07-28, body v999: mismatch"
        );
        let mut both = GOOD;
        both[0].1 = "v999.0.0";
        let e = validate(&headers(&both), &v999).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (400, -32022));
        assert_eq!(e.data.unwrap()["requested"], "v999.0.0");
        // Mcp-Method and Mcp-Name.
        let mut wrong_method = GOOD;
        wrong_method[1].1 = "tools/list";
        assert_eq!(code(&wrong_method, &good), (400, -32020));
        let mut wrong_name = GOOD;
        wrong_name[2].1 = "other";
        assert_eq!(code(&wrong_name, &good), (400, -32020));
        assert_eq!(code(&GOOD[..2], &good), (400, -32020));
        let mut encoded = GOOD;
        encoded[2].1 = "=?base64?ZWNobw==?=";
        assert!(
            validate(&headers(&encoded), &good).is_ok(),
            "base64 values are decoded"
        );
        let mut broken = GOOD;
        broken[2].1 = "=?base64?***?=";
        assert_eq!(code(&broken, &good), (400, -32020));
    }

    #[test]
    fn param_headers_mirror_annotated_arguments() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"},
            "free": {"type": "string"}
        }});
        let h = headers(&[("mcp-param-region", "eu-1"), ("mcp-param-n", "7")]);
        assert!(check_params(&h, &schema, &json!({"region": "eu-1", "n": 7, "free": "x"})).is_ok());
        let e = check_params(&h, &schema, &json!({"region": "us-1", "n": 7})).unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (400, -32020));
        assert!(e.message.contains("Mcp-Param-Region"), "{}", e.message);
        let only_region = headers(&[("mcp-param-region", "eu-1")]);
        assert!(check_params(&only_region, &schema, &json!({"region": "eu-1", "n": 7})).is_err());
        assert!(check_params(&h, &schema, &json!({"region": "eu-1"})).is_err());
        assert!(check_params(&HeaderMap::new(), &schema, &json!({"free": "x"})).is_ok());
    }
}
