//! Proptest strategies of what peers send: any JSON value, object keys
//! (`_meta` and reverse-DNS `_meta` keys among them), JSON-RPC ids (`0`
//! and `"0"` among them) and requests with unknown fields. Used by the
//! round-trip property tests of every hop that forwards JSON.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Any JSON value: strings with escapes, control characters and
/// non-ASCII text; integers over the whole i64 and u64 ranges; finite
/// floats; nested arrays and objects (with `_meta`-like keys).
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        "[\\\\\"\n\r\t\u{0}-\u{1f}\u{2028}\u{feff}a-z0-9 é😀]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// An object key: ordinary names, `_meta`, reverse-DNS `_meta` keys, any
/// string.
pub fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z_][a-zA-Z0-9_]{0,8}",
        Just("_meta".to_owned()),
        "io\\.modelcontextprotocol/[a-z-]{1,12}",
        any::<String>(),
    ]
}

/// A JSON-RPC id: a string (`"0"` included) or an integer (`0` included).
pub fn id() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!("0")),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ]
}

/// A request with any `params` (with a `_meta` object) and unknown
/// top-level fields.
pub fn request() -> impl Strategy<Value = Value> {
    (
        id(),
        "[a-z]{1,8}(/[a-zA-Z_]{1,10}){0,2}",
        prop::collection::vec((key(), json_value()), 0..5),
        prop::collection::vec((key(), json_value()), 0..4),
        prop::collection::vec(("x-[a-z]{1,6}", json_value()), 0..2),
    )
        .prop_map(|(id, method, params, meta, unknown)| {
            let mut params: Map<String, Value> = params.into_iter().collect();
            params.insert("_meta".into(), Value::Object(meta.into_iter().collect()));
            let mut m: Map<String, Value> = unknown.into_iter().collect();
            m.insert("jsonrpc".into(), "2.0".into());
            m.insert("id".into(), id);
            m.insert("method".into(), method.into());
            m.insert("params".into(), Value::Object(params));
            Value::Object(m)
        })
}
