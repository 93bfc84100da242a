//! A tool's `outputSchema` (sidecar `tools::results`: `compile_schema`,
//! `OutputValidators`) and the processing of its results (`process`,
//! `audit_structured`).
//!
//! Input: two JSON documents one after the other: the `outputSchema`, then
//! a `CallToolResult` (an object with `content` or `structuredContent`) or
//! the `structuredContent` alone. Checked:
//!
//! - nothing panics (compiling, validating, processing with small limits);
//! - a schema that compiles validates the result exactly as the compiled
//!   validator does; one that does not is reported broken and validates
//!   nothing;
//! - the model text stays within its limit, and a truncated audit value
//!   is a prefix of the JSON.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use switchyard_sidecar::tools::results::{
    self, OutputValidators, ResultLimits, Validation, compile_schema,
};

fuzz_target!(|data: &[u8]| {
    let mut docs = serde_json::Deserializer::from_slice(data).into_iter::<Value>();
    let Some(Ok(schema)) = docs.next() else {
        return;
    };
    let result = match docs.next() {
        Some(Ok(v))
            if v.get("content").is_some()
                || v.get("structuredContent").is_some()
                || v.get("isError").is_some() =>
        {
            v
        }
        Some(Ok(v)) => json!({ "structuredContent": v }),
        _ => json!({ "structuredContent": {} }),
    };

    let tools = [json!({ "name": "t", "outputSchema": schema })];
    let validators = OutputValidators::new("fuzz", &tools);
    let compiled = compile_schema(&schema);
    let broken = !schema.is_null() && compiled.is_err();
    assert_eq!(validators.broken() == ["t"], broken);
    assert_eq!(
        validators.validates("t"),
        compiled.is_ok() && !schema.is_null()
    );

    let limits = ResultLimits {
        max_model_text: 1 + data.len() % 512,
        inline_head: data.len() % 300,
    };
    for limits in [ResultLimits::default(), limits] {
        let processed = results::process(&result, &limits);
        if processed.model_text.len() > limits.max_model_text {
            // Only the head stays inline, with a note naming the attachment.
            assert!(!processed.attachments.is_empty());
        }
        let got = validators.validate("t", &processed);
        match (&compiled, &processed.structured) {
            _ if processed.is_error || schema.is_null() => {
                assert_eq!(got, Validation::NotValidated)
            }
            (Err(_), _) => assert_eq!(got, Validation::NotValidated),
            (Ok(_), None) => assert!(matches!(got, Validation::Invalid(_))),
            (Ok(v), Some(s)) => assert_eq!(got == Validation::Valid, v.is_valid(s)),
        }
    }

    let max = data.len() % 256;
    let text = result.to_string();
    let audit = results::audit_structured(&result, max);
    if text.len() <= max {
        assert_eq!(audit, result);
    } else {
        let head = audit["head"]
            .as_str()
            .expect("a truncated audit value has a head");
        assert!(text.starts_with(head));
        assert!(head.len() <= max);
    }
});
