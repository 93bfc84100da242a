use super::*;
use serde_json::json;

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

#[test]
fn text_and_structured_content() {
    let s = json!({"temperature": 33, "conditions": "Cloudy"});
    let pretty = serde_json::to_string_pretty(&s).unwrap();
    // (case, content texts, expected model text)
    let cases: Vec<(&str, Vec<&str>, String)> = vec![
        (
            "text is exactly the JSON (compact)",
            vec![r#"{"temperature":33,"conditions":"Cloudy"}"#],
            r#"{"temperature":33,"conditions":"Cloudy"}"#.into(),
        ),
        (
            "same JSON, other key order and spacing",
            vec![r#" { "conditions" : "Cloudy", "temperature": 33.0e0 } "#],
            r#" { "conditions" : "Cloudy", "temperature": 33.0e0 } "#.into(),
        ),
        (
            "a fenced block inside prose",
            vec!["Weather:\n```json\n{\"conditions\": \"Cloudy\", \"temperature\": 33}\n```\nbye"],
            "Weather:\n```json\n{\"conditions\": \"Cloudy\", \"temperature\": 33}\n```\nbye".into(),
        ),
        (
            "JSON in the second text item",
            vec!["hello", r#"{"temperature":33,"conditions":"Cloudy"}"#],
            "hello\n\n{\"temperature\":33,\"conditions\":\"Cloudy\"}".into(),
        ),
        (
            "different JSON is appended",
            vec![r#"{"temperature":34,"conditions":"Cloudy"}"#],
            format!("{{\"temperature\":34,\"conditions\":\"Cloudy\"}}\n\n{pretty}"),
        ),
        (
            "a subset is not the same JSON",
            vec![r#"{"temperature":33}"#],
            format!("{{\"temperature\":33}}\n\n{pretty}"),
        ),
        (
            "plain text gets the JSON appended",
            vec!["It is cloudy."],
            format!("It is cloudy.\n\n{pretty}"),
        ),
        ("structuredContent only", vec![], pretty.clone()),
    ];
    for (case, texts, want) in cases {
        let content: Vec<Value> = texts.iter().map(|t| text(t)).collect();
        let p = process(
            &json!({"content": content, "structuredContent": s}),
            &ResultLimits::default(),
        );
        assert_eq!(p.model_text, want, "{case}");
        assert_eq!(p.structured.as_ref(), Some(&s), "{case}");
        assert!(p.attachments.is_empty(), "{case}");
    }
}

#[test]
fn holds_json_cases() {
    let cases = [
        ("[1,2,3]", json!([1, 2, 3]), true),
        ("numbers: [1, 2, 3].", json!([1, 2, 3]), true),
        ("numbers: [1, 2]", json!([1, 2, 3]), false),
        ("42", json!(42), true),
        ("the answer is 42", json!(42), false),
        ("{ broken {\"a\":1}", json!({"a": 1}), true),
        (
            "{\"a\":{\"b\":[1,{\"c\":null}]}}",
            json!({"a": {"b": [1, {"c": null}]}}),
            true,
        ),
        ("nothing here", json!({"a": 1}), false),
    ];
    for (t, v, want) in cases {
        assert_eq!(holds_json(t, &v), want, "{t} ~ {v}");
    }
}

#[test]
fn binary_content_becomes_attachments() {
    let png = base64::engine::general_purpose::STANDARD.encode([137u8, 80, 78, 71]);
    let wav = base64::engine::general_purpose::STANDARD.encode([1u8, 2, 3]);
    let blob = base64::engine::general_purpose::STANDARD.encode(b"%PDF-");
    let result = json!({"content": [
        text("see:"),
        {"type": "image", "data": png, "mimeType": "image/png", "annotations": {"priority": 0.5}},
        {"type": "audio", "data": wav, "mimeType": "audio/wav"},
        {"type": "resource", "resource": {"uri": "file:///a.pdf", "mimeType": "application/pdf", "blob": blob}},
        {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "inline"}},
        {"type": "resource_link", "uri": "file:///b", "name": "b"},
    ]});
    let p = process(&result, &ResultLimits::default());
    let names: Vec<(&str, &str, usize, Option<&str>)> = p
        .attachments
        .iter()
        .map(|a| {
            (
                a.name.as_str(),
                a.mime_type.as_str(),
                a.data.len(),
                a.uri.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("result-1.png", "image/png", 4, None),
            ("result-2.wav", "audio/wav", 3, None),
            ("result-3.pdf", "application/pdf", 5, Some("file:///a.pdf")),
        ]
    );
    assert_eq!(p.attachments[0].data, [137u8, 80, 78, 71]);
    assert_eq!(
        p.model_text,
        "see:\n\n[image attached as result-1.png (image/png, 4 bytes)]\n\n\
         [audio attached as result-2.wav (audio/wav, 3 bytes)]\n\n\
         [resource attached as result-3.pdf (application/pdf, 5 bytes) from file:///a.pdf]\n\n\
         [resource file:///a.txt]\ninline\n\n[resource link: b <file:///b>]"
    );
}

#[test]
fn oversized_text_goes_to_an_attachment() {
    let limits = ResultLimits {
        max_model_text: 100,
        inline_head: 10,
    };
    // (case, result, attachment name, mime)
    let long = "é".repeat(80); // 160 bytes
    let big = json!({"items": (0..30).collect::<Vec<_>>()});
    let cases = [
        (
            "long text",
            json!({"content": [text(&long)]}),
            "result-1.txt",
            "text/plain",
        ),
        (
            "long structured only",
            json!({"content": [], "structuredContent": big}),
            "result-1.json",
            "application/json",
        ),
        (
            "after an image",
            json!({"content": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}, text(&long)]}),
            "result-2.txt",
            "text/plain",
        ),
    ];
    for (case, result, name, mime) in cases {
        let p = process(&result, &limits);
        let a = p.attachments.last().expect(case);
        assert_eq!(
            (a.name.as_str(), a.mime_type.as_str()),
            (name, mime),
            "{case}"
        );
        assert!(a.data.len() > 100, "{case}");
        let whole = String::from_utf8(a.data.clone()).unwrap();
        let head = p.model_text.split("\n\n[The result is").next().unwrap();
        assert!(
            head.len() <= 10 && whole.starts_with(head),
            "{case}: {head:?}"
        );
        assert!(
            p.model_text
                .contains(&format!("in the attachment {name}.]")),
            "{case}: {}",
            p.model_text
        );
    }
    // At the limit: inline.
    let p = process(&json!({"content": [text(&"x".repeat(100))]}), &limits);
    assert!(p.attachments.is_empty());
    assert_eq!(p.model_text.len(), 100);
}

#[test]
fn errors_are_passed_on_and_not_validated() {
    let tools = [json!({"name": "t", "outputSchema": {"type": "object", "required": ["a"]}})];
    let v = OutputValidators::new("s", &tools);
    let p = process(
        &json!({"content": [text("boom")], "isError": true}),
        &ResultLimits::default(),
    );
    assert!(p.is_error);
    assert_eq!(p.model_text, "boom");
    assert_eq!(v.validate("t", &p), Validation::NotValidated);
}

#[test]
fn validation_table() {
    let tree = json!({
        "$defs": {"node": {"type": "object", "properties": {
            "value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}
        }, "required": ["value"]}},
        "$ref": "#/$defs/node"
    });
    let draft7 = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"n": {"type": "number"}},
        "type": "object",
        "properties": {"xs": {"type": "array", "items": [{"$ref": "#/definitions/n"}, {"type": "string"}]}}
    });
    let tools = vec![
        json!({"name": "weather", "outputSchema": {"type": "object", "properties": {"temperature": {"type": "number"}}, "required": ["temperature"]}}),
        json!({"name": "tree", "outputSchema": tree}),
        json!({"name": "draft7", "outputSchema": draft7}),
        json!({"name": "remote", "outputSchema": {"$ref": "https://example.com/schema.json"}}),
        json!({"name": "broken", "outputSchema": {"type": 12}}),
        json!({"name": "dangling", "outputSchema": {"$ref": "#/$defs/missing"}}),
        json!({"name": "plain"}),
    ];
    let v = OutputValidators::new("s", &tools);
    assert_eq!(v.broken(), ["broken", "dangling", "remote"]);
    let deep = json!({"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}]});
    let deep_bad = json!({"value": 1, "children": [{"value": 2, "children": [{"value": "x"}]}]});
    let cases: Vec<(&str, Value, Result<(), &str>)> = vec![
        ("weather", json!({"temperature": 3}), Ok(())),
        (
            "weather",
            json!({"temperature": "hot"}),
            Err("/temperature"),
        ),
        ("weather", json!({}), Err("temperature")),
        ("tree", deep, Ok(())),
        ("tree", deep_bad, Err("/children/0/children/0/value")),
        // Draft-07: array-form items is a tuple.
        ("draft7", json!({"xs": [1, "a", true]}), Ok(())),
        ("draft7", json!({"xs": ["a"]}), Err("/xs/0")),
    ];
    for (tool, structured, want) in cases {
        let p = process(
            &json!({"content": [], "structuredContent": structured}),
            &ResultLimits::default(),
        );
        match (v.validate(tool, &p), want) {
            (Validation::Valid, Ok(())) => {}
            (Validation::Invalid(errors), Err(needle)) => {
                assert!(
                    errors.iter().any(|e| e.contains(needle)),
                    "{tool}: {errors:?} lacks {needle}"
                );
            }
            (got, want) => panic!("{tool} {structured}: got {got:?}, want {want:?}"),
        }
    }
    // Broken, remote and schema-less tools are not validated.
    for tool in ["remote", "broken", "dangling", "plain", "unknown"] {
        let p = process(
            &json!({"content": [], "structuredContent": {"a": 1}}),
            &ResultLimits::default(),
        );
        assert_eq!(v.validate(tool, &p), Validation::NotValidated, "{tool}");
    }
    // An outputSchema but no structuredContent: invalid.
    let p = process(&json!({"content": [text("x")]}), &ResultLimits::default());
    assert!(matches!(v.validate("weather", &p), Validation::Invalid(_)));
}

#[test]
fn audit_keeps_a_truncated_structured_result() {
    let small = json!({"a": 1});
    assert_eq!(audit_structured(&small, 20), small);
    let big = json!({"s": "x".repeat(100)});
    let t = audit_structured(&big, 20);
    assert_eq!(t["truncated"], true);
    assert_eq!(t["bytes"], big.to_string().len());
    assert_eq!(t["head"].as_str().unwrap().len(), 20);
}

#[test]
fn a_schema_is_compiled_on_its_tools_first_result_and_only_once() {
    let tools = [
        json!({"name": "a", "outputSchema": {"type": "object", "required": ["x"]}}),
        json!({"name": "b", "outputSchema": {"type": 12}}),
        json!({"name": "plain"}),
    ];
    let v = OutputValidators::new("s", &tools);
    let compiled = |tool: &str| v.tools[tool].compiled.get().is_some();
    assert!(!v.tools.contains_key("plain"));
    assert!(
        !compiled("a") && !compiled("b"),
        "nothing compiled at listing"
    );

    let ok = process(
        &json!({"content": [], "structuredContent": {"x": 1}}),
        &ResultLimits::default(),
    );
    assert_eq!(v.validate("a", &ok), Validation::Valid);
    assert!(compiled("a") && !compiled("b"), "only the called tool");
    let Some(ToolSchema::Valid(first)) = v.tools["a"].compiled.get() else {
        panic!("a compiles");
    };
    let first: *const jsonschema::Validator = &**first;
    let bad = process(
        &json!({"content": [], "structuredContent": {}}),
        &ResultLimits::default(),
    );
    assert!(matches!(v.validate("a", &bad), Validation::Invalid(_)));
    let Some(ToolSchema::Valid(again)) = v.tools["a"].compiled.get() else {
        panic!("a stays compiled");
    };
    assert!(std::ptr::eq(first, &**again), "compiled once");

    // A broken schema is found on first use too, and validates nothing.
    assert_eq!(v.validate("b", &ok), Validation::NotValidated);
    assert!(compiled("b"));
    assert_eq!(v.broken(), ["b"]);
}

#[test]
fn a_new_tool_list_keeps_the_compiled_schemas_that_did_not_change() {
    let object = json!({"type": "object"});
    let first = OutputValidators::new(
        "s",
        &[
            json!({"name": "same", "outputSchema": object}),
            json!({"name": "changed", "outputSchema": object}),
        ],
    );
    assert!(first.validates("same") && first.validates("changed"));
    assert_eq!(first.compiled(), ["changed", "same"]);
    let next = OutputValidators::next(
        "s",
        &[
            json!({"name": "same", "outputSchema": object, "description": "new text"}),
            json!({"name": "changed", "outputSchema": {"type": "array"}}),
            json!({"name": "added", "outputSchema": object}),
        ],
        &first,
    );
    assert_eq!(next.compiled(), ["same"], "only the unchanged one is kept");
    assert!(Arc::ptr_eq(&first.tools["same"], &next.tools["same"]));
    let p = process(
        &json!({"content": [], "structuredContent": {}}),
        &ResultLimits::default(),
    );
    assert!(matches!(
        next.validate("changed", &p),
        Validation::Invalid(_)
    ));
    assert_eq!(next.validate("added", &p), Validation::Valid);
}
