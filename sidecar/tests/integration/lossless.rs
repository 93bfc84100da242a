//! Property tests: the sidecar forwards a call's params as the control
//! plane sent them. Any `tools/call` params (unknown fields, any JSON in
//! `arguments`, any `_meta`, an empty `_meta` included) are decoded from
//! `params_json` value for value; what the connection adds for its own use
//! (the client's capabilities to narrow to, a log level, a progress token
//! of ours) comes off again, or replaces only its own key, before the
//! request reaches a server.

use proptest::prelude::*;
use serde_json::{Map, Value};
use switchyard_proto::v1::SidecarCallRequest;
use switchyard_sidecar::api;
use switchyard_sidecar::upstream::{era, logging, progress};
use switchyard_test_support::arbitrary::{json_value, key};

/// `tools/call` params: a `name`, `arguments`, maybe a `_meta` (maybe
/// empty) and unknown fields.
fn params() -> impl Strategy<Value = Value> {
    (
        "[a-z_]{1,10}",
        prop::collection::vec((key(), json_value()), 0..4),
        prop::option::of(prop::collection::vec((key(), json_value()), 0..4)),
        prop::collection::vec(("x-[a-z]{1,6}", json_value()), 0..2),
    )
        .prop_map(|(name, arguments, meta, unknown)| {
            let mut p: Map<String, Value> = unknown.into_iter().collect();
            p.insert("name".into(), name.into());
            p.insert(
                "arguments".into(),
                Value::Object(arguments.into_iter().collect()),
            );
            if let Some(meta) = meta {
                p.insert("_meta".into(), Value::Object(meta.into_iter().collect()));
            }
            Value::Object(p)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// `SidecarCallRequest.params_json` is decoded to exactly the params
    /// the control plane serialised.
    #[test]
    fn params_json_is_decoded_exactly(params in params()) {
        let call = api::decode(SidecarCallRequest {
            params_json: params.to_string(),
            ..Default::default()
        })
        .expect("decodes");
        prop_assert_eq!(&call.params, &params);
        prop_assert_eq!(call.context.tool.as_str(), params["name"].as_str().unwrap());
    }

    /// To a 2025-11-25 server, the params go out as they came in, whatever
    /// the connection marked on them for its own use.
    #[test]
    fn a_legacy_server_gets_the_params_as_given(
        params in params(),
        narrow in any::<bool>(),
        ask in any::<bool>(),
    ) {
        let mut sent = params.clone();
        if narrow {
            era::narrow_to(&mut sent, &serde_json::json!({"elicitation": {}}));
        }
        if ask {
            logging::ask(&mut sent, switchyard_mcp::logging::Level::Debug);
        }
        // What the connection does for a 2025-11-25 server.
        logging::unask(&mut sent);
        era::strip_own(&mut sent);
        prop_assert_eq!(sent, params);
    }

    /// To a 2026-07-28 server, every `_meta` entry of the caller's is kept
    /// but the protocol's own (version, client info, capabilities), and
    /// nothing of ours goes out.
    #[test]
    fn a_modern_server_gets_the_callers_meta(params in params(), narrow in any::<bool>()) {
        let mut sent = params.clone();
        if narrow {
            era::narrow_to(&mut sent, &serde_json::json!({}));
        }
        let mut modern = Map::new();
        modern.insert(switchyard_mcp::meta::PROTOCOL_VERSION.into(), "2026-07-28".into());
        let meta = era::own_meta(&mut sent).expect("an object");
        era::apply_meta(meta, &modern);
        for (k, v) in params.get("_meta").and_then(Value::as_object).into_iter().flatten() {
            if !modern.contains_key(k) {
                prop_assert_eq!(meta.get(k), Some(v), "{}", k);
            }
        }
        prop_assert!(meta.get(era::NARROW_TO).is_none());
        prop_assert!(meta.get(era::META_ADDED).is_none());
        let mut rest = sent.clone();
        let mut given = params.clone();
        rest.as_object_mut().unwrap().remove("_meta");
        given.as_object_mut().unwrap().remove("_meta");
        prop_assert_eq!(rest, given);
    }

    /// A caller's progress token is swapped for one of ours and handed
    /// back exactly (`0` and `"0"` stay apart); nothing else changes.
    #[test]
    fn a_progress_token_comes_back_exactly(
        params in params(),
        token in switchyard_test_support::arbitrary::id(),
    ) {
        let mut given = params.clone();
        if let Some(m) = given.as_object_mut() {
            let meta = m.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
            meta.as_object_mut().unwrap().insert("progressToken".into(), token.clone());
        }
        let mut sent = given.clone();
        let (ours, theirs) = progress::retoken(&mut sent).expect("a token");
        prop_assert_eq!(&theirs, &token);
        prop_assert_eq!(&sent["_meta"]["progressToken"], &ours);
        sent["_meta"]["progressToken"] = theirs;
        prop_assert_eq!(sent, given);
    }
}
