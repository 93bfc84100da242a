use super::*;

#[test]
fn classifies_by_shape() {
    assert_eq!(
        classify(&json!({"jsonrpc":"2.0","id":0,"method":"ping"})),
        Some(Kind::Request)
    );
    assert_eq!(
        classify(&json!({"jsonrpc":"2.0","method":"notifications/x"})),
        Some(Kind::Notification)
    );
    assert_eq!(
        classify(&json!({"jsonrpc":"2.0","id":"0","result":{}})),
        Some(Kind::Response)
    );
    assert_eq!(
        classify(&json!({"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}})),
        Some(Kind::Response)
    );
    assert_eq!(classify(&json!({"hello": 1})), None);
    assert_eq!(classify(&json!([1, 2])), None);
    assert_eq!(classify(&json!({"jsonrpc":"1.0","id":1,"result":{}})), None);
    assert_eq!(
        classify(&json!({"jsonrpc":"2.0","id":{"x":1},"method":"m"})),
        None
    );
}

#[test]
fn ids_are_strings_or_64_bit_integers() {
    for id in [
        json!(0),
        json!("0"),
        json!(-1),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(""),
    ] {
        assert!(is_valid_id(&id), "{id}");
    }
    let too_big: Value = serde_json::from_str("18446744073709551616").unwrap();
    for id in [
        json!(1.5),
        json!(1e3),
        too_big,
        Value::Null,
        json!([1]),
        json!({}),
    ] {
        assert!(!is_valid_id(&id), "{id}");
        assert_eq!(
            classify(&json!({"jsonrpc":"2.0","id":id,"method":"m"})),
            None,
            "{id}"
        );
    }
}

#[test]
fn zero_and_string_zero_are_different_ids() {
    let a = result_response(&json!(0), json!({}));
    let b = result_response(&json!("0"), json!({}));
    assert_ne!(a["id"], b["id"]);
    assert_eq!(serde_json::to_string(&a["id"]).unwrap(), "0");
    assert_eq!(serde_json::to_string(&b["id"]).unwrap(), "\"0\"");
}

#[test]
fn malformed_error_object_is_kept_as_data() {
    let e = ErrorObject::from_response(&json!({"jsonrpc":"2.0","id":1,"error":"boom"})).unwrap();
    assert_eq!(e.code, -32603);
    assert_eq!(e.data, Some(json!("boom")));
    let e = ErrorObject::from_response(
        &json!({"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad","data":{"k":[1]}}}),
    )
    .unwrap();
    assert_eq!(
        e,
        ErrorObject {
            code: -32602,
            message: "bad".into(),
            data: Some(json!({"k":[1]}))
        }
    );
}

#[test]
fn preview_is_single_line_and_char_safe() {
    assert_eq!(preview("ab\ncd".as_bytes(), 10), "ab cd");
    assert_eq!(preview("🚂🚂🚂".as_bytes(), 2), "🚂🚂…");
}

#[test]
fn numbers_a_double_would_change_are_found_outside_strings() {
    fn found(t: &str) -> Option<(&str, bool)> {
        inexact_number(t.as_bytes()).map(|n| (n.written, n.integer))
    }
    assert_eq!(
        found(r#"{"a": 1, "big": 123456789012345678901234567890}"#),
        Some(("123456789012345678901234567890", true))
    );
    assert_eq!(
        found(r#"[-9223372036854775809]"#),
        Some(("-9223372036854775809", true))
    );
    assert_eq!(
        found(r#"[18446744073709551616]"#),
        Some(("18446744073709551616", true))
    );
    for changed in [
        "0.1000000000000000000001",
        "1e-400",
        "18446744073709551616.0",
        "12345678901234567891e5",
        "3.141592653589793238462643383279",
    ] {
        assert_eq!(
            found(&format!("[{changed}]")),
            Some((changed, false)),
            "{changed}"
        );
    }
    // At the edges of the range, numbers doubles hold, and digits in
    // strings and keys.
    for fine in [
        r#"[18446744073709551615, -9223372036854775808, 0, -0, 7]"#,
        r#"[1.5, 0.10, 1e2, 1E30, -2.5e-3, 0.1, 1.0, 0e5, -0.0, 123456789012345680000.0, 5e-324]"#,
        // A double written with more digits than the shortest form needs
        // (older Java writers) is still a double.
        r#"[2.0000000000000004, 0.30000000000000004, 1.2345678901234567E-5]"#,
        r#"{"123456789012345678901234567890": "99999999999999999999999", "e\"1.000000000000000000001": 1}"#,
    ] {
        assert_eq!(found(fine), None, "{fine}");
    }
    // What serde_json does with them, which is why they are refused.
    let v: serde_json::Value =
        serde_json::from_str("[123456789012345678901234567890, 0.1000000000000000000001]").unwrap();
    assert_eq!(v.to_string(), "[1.2345678901234568e+29,0.1]");
    // The message names it.
    let n = inexact_number(b"[1e-400]").unwrap();
    assert_eq!(
        n.to_string(),
        "the number 1e-400 has more digits or range than a double holds"
    );
}

#[test]
fn depth_counts_arrays_and_objects_outside_strings() {
    assert_eq!(depth(b"1"), 0);
    assert_eq!(depth(b"{}"), 1);
    assert_eq!(depth(br#"{"a":[1,{"b":[]}],"c":{}}"#), 4);
    assert_eq!(depth(br#"{"s":"[[[{{{\"]]"}"#), 1);
    let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
    assert_eq!(depth(deep.as_bytes()), MAX_DEPTH + 1);
    // Within it, serde_json reads it two levels down too.
    let ok = format!(
        r#"{{"arguments":{{"x":{}{}}}}}"#,
        "[".repeat(MAX_DEPTH - 1),
        "]".repeat(MAX_DEPTH - 1)
    );
    assert!(serde_json::from_str::<Value>(&ok).is_ok());
}
