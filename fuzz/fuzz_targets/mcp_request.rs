//! The control plane's MCP endpoint, before routing: a POST's headers and
//! its one JSON-RPC message (`mcp::ingress`), the 2026-07-28 request
//! metadata checks (`mcp::modern`) and the header value codec
//! (`switchyard_mcp::headers`).
//!
//! Input: `Name: value` header lines, a blank line, then the body (without
//! a blank line the whole input is the body). A top-level `"schema"` member
//! of the body, if any, is used as a tool's `inputSchema` for the
//! `Mcp-Param-*` headers of its `params.arguments`. Checked:
//!
//! - nothing panics; `parse` answers 400 with -32700 (never for JSON),
//!   -32600 or -32602 (only for a body whose syntax is JSON), or a message
//!   whose kind, id and method are those of the JSON;
//! - header values round-trip: `decode_value(encode_value(s)) == s`;
//! - the headers a sidecar derives from the arguments (`param_value`) pass
//!   the control plane's `check_params`;
//! - a request whose `_meta` is right gets through `modern::validate` with
//!   the headers a client derives from it, and a valid one always mirrors
//!   its method in `Mcp-Method`.

#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use switchyard_control_plane::config::McpConfig;
use switchyard_control_plane::mcp::discover::MODERN_VERSIONS;
use switchyard_control_plane::mcp::ingress::{self, Message};
use switchyard_control_plane::mcp::modern;
use switchyard_control_plane::mcp::respond::{INVALID_REQUEST, PARSE_ERROR};
use switchyard_mcp::jsonrpc::{self, INVALID_PARAMS};
use switchyard_mcp::{headers, meta, methods};

fn header_map(head: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for line in head.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            h.append(n, v);
        }
    }
    h
}

/// `params.name`, `params.uri` or `params.taskId`: what `Mcp-Name` mirrors.
fn name_key(method: &str) -> Option<&'static str> {
    match method {
        methods::TOOLS_CALL | methods::PROMPTS_GET => Some("name"),
        methods::RESOURCES_READ => Some("uri"),
        methods::TASKS_GET | methods::TASKS_UPDATE | methods::TASKS_CANCEL => Some("taskId"),
        _ => None,
    }
}

fn value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).expect("encode_value gives a valid header value")
}

fn check_codec(data: &[u8]) {
    if let Some(text) = headers::decode_value(data) {
        let again = headers::encode_value(&text);
        assert_eq!(headers::decode_value(again.as_bytes()), Some(text));
    }
    let text = String::from_utf8_lossy(data);
    let encoded = headers::encode_value(&text);
    let _ = value(&encoded);
    assert_eq!(
        headers::decode_value(encoded.as_bytes()).as_deref(),
        Some(&*text)
    );
}

/// The sidecar's `Mcp-Param-*` headers for `arguments` pass `check_params`.
fn check_param_headers(schema: &Value, arguments: &Value) {
    let Ok(params) = headers::header_params(schema) else {
        return;
    };
    let mut h = HeaderMap::new();
    for p in &params {
        let mut v = Some(arguments);
        for key in &p.path {
            v = v.and_then(|v| v.get(key));
        }
        let present = v.is_some_and(|v| !v.is_null());
        match headers::param_value(arguments, &p.path) {
            Some(text) => {
                let name = format!("{}{}", headers::PARAM_PREFIX, p.name.to_ascii_lowercase());
                let name = HeaderName::from_bytes(name.as_bytes()).expect("a token");
                h.insert(name, value(&text));
            }
            // Not mirrorable (an object, an unsafe integer): the control
            // plane asks for a header the sidecar cannot send.
            None if present => return,
            None => {}
        }
    }
    if let Err(e) = modern::check_params(&h, schema, arguments) {
        panic!("the sidecar's own headers are refused: {}", e.message);
    }
}

fn check_modern(h: &HeaderMap, msg: &Message) {
    if let Ok(m) = modern::validate(h, msg) {
        assert!(MODERN_VERSIONS.contains(&m.version.as_str()));
        assert!(m.client_capabilities.is_object());
    }
    // The headers a client derives from the request itself.
    let meta = msg.meta();
    let version = meta
        .and_then(|m| m.get(meta::PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let mut own = HeaderMap::new();
    if let Some(v) = version {
        own.insert(headers::PROTOCOL_VERSION, value(&headers::encode_value(v)));
    }
    own.insert(headers::METHOD, value(&headers::encode_value(&msg.method)));
    let key = name_key(&msg.method);
    let name = key.and_then(|k| msg.params.get(k)).and_then(Value::as_str);
    if let Some(n) = name {
        own.insert(headers::NAME, value(&headers::encode_value(n)));
    }
    let should_pass = modern::SERVED.contains(&msg.method.as_str())
        && version.is_some_and(|v| MODERN_VERSIONS.contains(&v))
        && meta.is_some_and(|m| {
            m.get(meta::CLIENT_CAPABILITIES)
                .is_some_and(Value::is_object)
        })
        && (key.is_none() || name.is_some());
    let got = modern::validate(&own, msg);
    assert_eq!(
        got.is_ok(),
        should_pass,
        "{:?}",
        got.err().map(|e| e.message)
    );
}

fuzz_target!(|data: &[u8]| {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (&data[..0], data),
    };
    let h = header_map(head);
    for v in h.values() {
        check_codec(v.as_bytes());
    }
    check_codec(body.get(..64).unwrap_or(body));

    let config = McpConfig::default();
    for loopback in [false, true] {
        let _ = ingress::check_host_and_origin(&h, &config, loopback);
    }
    if let Ok(took) = ingress::check_media(&h) {
        assert!(took.json || took.sse);
    }
    if let Some(host) = h.get(http::header::HOST).and_then(|v| v.to_str().ok()) {
        let _ = ingress::is_loopback_host(host);
    }

    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    match ingress::parse(body) {
        Ok(msg) => {
            let json = parsed.expect("parse took JSON that serde_json refuses");
            assert_eq!(jsonrpc::classify(&json), Some(msg.kind.clone()));
            assert_eq!(msg.id.as_ref(), json.get("id"));
            assert_eq!(
                msg.method,
                json.get("method").and_then(Value::as_str).unwrap_or("")
            );
            assert!(msg.raw.get("params").is_none());
            check_modern(&h, &msg);
            if let (Some(schema), Some(args)) = (json.get("schema"), msg.params.get("arguments")) {
                check_param_headers(schema, args);
                let _ = modern::check_params(&h, schema, args);
            }
        }
        Err(e) => {
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert!(
                [PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS].contains(&e.code),
                "code {}",
                e.code
            );
            // JSON is never called "not JSON"; what is called JSON but
            // serde_json refused (a number no double holds, nesting beyond
            // what it reads) is JSON in its syntax.
            assert!(parsed.is_none() || e.code != PARSE_ERROR);
            if e.code != PARSE_ERROR && parsed.is_none() {
                let syntax = std::str::from_utf8(body).is_ok()
                    && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
                assert!(syntax, "{}", e.message);
            }
            let _ = e.body();
        }
    }
});
