use super::*;
use serde_json::json;

#[test]
fn encodes_values_like_the_spec_examples() {
    assert_eq!(encode_value("us-west1"), "us-west1");
    assert_eq!(
        encode_value("Hello, 世界"),
        "=?base64?SGVsbG8sIOS4lueVjA==?="
    );
    assert_eq!(encode_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
    assert_eq!(encode_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
    assert_eq!(
        encode_value("=?base64?literal?="),
        "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
    );
}

#[test]
fn reads_nested_annotations_and_values() {
    let schema = json!({"type":"object","properties":{
        "region":{"type":"string","x-mcp-header":"Region"},
        "opts":{"type":"object","properties":{"dry":{"type":"boolean","x-mcp-header":"Dry"}}},
        "n":{"type":"integer","x-mcp-header":"N"},
        "query":{"type":"string"}
    }});
    let params = header_params(&schema).unwrap();
    assert_eq!(params.len(), 3);
    let args = json!({"region":"us-west1","opts":{"dry":true},"n":42.0});
    let by_name = |n: &str| params.iter().find(|p| p.name == n).unwrap();
    assert_eq!(
        param_value(&args, &by_name("Region").path).as_deref(),
        Some("us-west1")
    );
    assert_eq!(
        param_value(&args, &by_name("Dry").path).as_deref(),
        Some("true")
    );
    assert_eq!(
        param_value(&args, &by_name("N").path).as_deref(),
        Some("42")
    );
    assert_eq!(
        param_value(&json!({"region": null}), &by_name("Region").path),
        None
    );
    assert_eq!(param_value(&json!({}), &by_name("Region").path), None);
    assert_eq!(
        param_value(&json!({"n": 9007199254740993_i64}), &by_name("N").path),
        None
    );
}

#[test]
fn rejects_invalid_annotations() {
    let bad = [
        json!({"properties":{"a":{"type":"number","x-mcp-header":"A"}}}),
        json!({"properties":{"a":{"type":"string","x-mcp-header":""}}}),
        json!({"properties":{"a":{"type":"string","x-mcp-header":"A B"}}}),
        json!({"properties":{"a":{"type":"string","x-mcp-header":"A"},"b":{"type":"string","x-mcp-header":"a"}}}),
        json!({"properties":{"a":{"type":"array","items":{"type":"string","x-mcp-header":"A"}}}}),
        json!({"properties":{"a":{"anyOf":[{"type":"string","x-mcp-header":"A"}]}}}),
        json!({"properties":{"a":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"string","x-mcp-header":"A"}}}),
        json!({"properties":{"a":{"type":"object","x-mcp-header":"A"}}}),
    ];
    for schema in bad {
        assert!(header_params(&schema).is_err(), "{schema}");
    }
    // A property *named* x-mcp-header is not an annotation.
    assert_eq!(
        header_params(&json!({"properties":{"x-mcp-header":{"type":"string"}}})).unwrap(),
        vec![]
    );
}

#[test]
fn decodes_what_it_encodes_and_refuses_bad_values() {
    for v in [
        "us-west1",
        "Hello, 世界",
        " padded ",
        "line1\nline2",
        "=?base64?literal?=",
    ] {
        assert_eq!(decode_value(encode_value(v).as_bytes()).as_deref(), Some(v));
    }
    assert_eq!(decode_value(b"=?base64?not base64!?="), None);
    assert_eq!(decode_value(b"=?base64?//79?="), None, "not UTF-8");
    assert_eq!(decode_value(b"caf\xc3\xa9"), None, "raw non-ASCII");
    assert_eq!(decode_value(b"a\x01b"), None, "control character");
}

#[test]
fn parameters_match_by_type() {
    assert!(param_matches("x", &json!("x")));
    assert!(!param_matches("x ", &json!("x")));
    assert!(param_matches("true", &json!(true)));
    assert!(!param_matches("1", &json!(true)));
    assert!(param_matches("42", &json!(42)));
    assert!(param_matches("42", &json!(42.0)));
    assert!(!param_matches("042x", &json!(42)));
    assert!(!param_matches("null", &json!(null)));
}
