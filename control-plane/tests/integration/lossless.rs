//! Property tests: what the control plane passes on keeps its JSON. An MCP
//! client's request is parsed with its id exactly (`0` and `"0"` stay
//! apart) and its params (unknown fields, `_meta`) value for value; an
//! engine's `arguments_json`, `meta_json` and other params reach the
//! sidecar as given; a result decorated for the client's era keeps every
//! field and `_meta` entry of the server's; a namespaced resource URI
//! gives back its server and the server's URI byte for byte.

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use switchyard_control_plane::call::plan::{RESERVED_PARAMS, params_json};
use switchyard_control_plane::mcp::{ingress, names, respond};
use switchyard_mcp::era::Era;
use switchyard_mcp::jsonrpc::Kind;
use switchyard_test_support::arbitrary::{json_value, key, request};

/// A JSON object.
fn object() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((key(), json_value()), 0..5).prop_map(|kv| kv.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A POSTed request is parsed with its id, method and params exactly.
    #[test]
    fn a_request_is_parsed_exactly(message in request()) {
        let m = ingress::parse(&serde_json::to_vec(&message).unwrap()).expect("parses");
        prop_assert_eq!(m.kind, Kind::Request);
        prop_assert_eq!(m.id.as_ref(), Some(&message["id"]));
        prop_assert_eq!(m.method.as_str(), message["method"].as_str().unwrap());
        prop_assert_eq!(&Value::Object(m.params), &message["params"]);
    }

    /// The engine's `arguments_json`, `meta_json` and `other_params_json`
    /// are spliced into the `tools/call` params as given (surrounding white
    /// space aside).
    #[test]
    fn engine_arguments_and_meta_reach_the_sidecar_as_given(
        tool in "[a-zA-Z0-9_./-]{1,16}",
        arguments in object(),
        meta in prop::option::of(object()),
        other in object(),
        pad in "[ \t\n]{0,2}",
    ) {
        let arguments_json = format!("{pad}{}{pad}", Value::Object(arguments.clone()));
        let meta_json = meta.as_ref().map(|m| Value::Object(m.clone()).to_string()).unwrap_or_default();
        let other: Map<String, Value> = other
            .into_iter()
            .filter(|(k, _)| !RESERVED_PARAMS.contains(&k.as_str()))
            .collect();
        let other_json = match other.is_empty() {
            true => String::new(),
            false => Value::Object(other.clone()).to_string(),
        };
        let text = params_json(&tool, &arguments_json, &meta_json, &other_json).expect("valid");
        let got: Value = serde_json::from_str(&text).expect("JSON");
        let mut want = json!({"name": tool, "arguments": arguments});
        if let Some(meta) = meta {
            want["_meta"] = Value::Object(meta);
        }
        for (k, v) in other {
            want[k] = v;
        }
        prop_assert_eq!(got, want);
    }

    /// Decorating a result for the client's era touches only the era's own
    /// fields: every other field, and every `_meta` entry, stays.
    #[test]
    fn a_decorated_result_keeps_the_servers_fields(
        fields in object(),
        meta in prop::option::of(object()),
        modern in any::<bool>(),
        method in prop::sample::select(vec!["tools/call", "tools/list", "resources/read", "prompts/get"]),
    ) {
        let mut result = Value::Object(fields.clone());
        if let Some(meta) = &meta {
            result["_meta"] = Value::Object(meta.clone());
        }
        let era = if modern { Era::Modern } else { Era::Legacy };
        let own = ["resultType", "ttlMs", "cacheScope", "_meta"];
        let mut decorated = result.clone();
        respond::decorate(method, era, &mut decorated);
        for (k, v) in &fields {
            if !own.contains(&k.as_str()) {
                prop_assert_eq!(decorated.get(k), Some(v), "{}", k);
            }
        }
        if modern && let Some(given) = fields.get("resultType") {
            prop_assert_eq!(decorated.get("resultType"), Some(given));
        }
        for (k, v) in meta.iter().flatten() {
            if k != switchyard_mcp::meta::SERVER_INFO {
                prop_assert_eq!(decorated["_meta"].get(k), Some(v), "_meta {}", k);
            }
        }
    }

    /// Namespaced resource URIs are one-to-one and reversible.
    #[test]
    fn a_namespaced_uri_gives_back_its_server_and_uri(
        server in "[A-Za-z0-9_-]{1,48}",
        uri in any::<String>(),
    ) {
        let namespaced = names::namespaced(&server, &uri);
        prop_assert_eq!(names::original(&namespaced), Some((server.as_str(), uri.as_str())));
    }
}
