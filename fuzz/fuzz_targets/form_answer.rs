//! Re-validation of form elicitation answers
//! (`interactions::form::validate_answer`, `summarize_schema`).
//!
//! Input: two JSON documents one after the other, the `requestedSchema`
//! then the answer's `content` (`{}` when there is only one). Checked:
//!
//! - nothing panics;
//! - an accepted answer is forwarded unchanged; a refused one has at
//!   least one error;
//! - every default `summarize_schema` reports is itself a valid answer
//!   for its field (a form pre-filled with it passes).

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use switchyard_control_plane::interactions::form::{self, CONTENT_FIELD, FieldKind, SCHEMA_FIELD};

fuzz_target!(|data: &[u8]| {
    let mut docs = serde_json::Deserializer::from_slice(data).into_iter::<Value>();
    let Some(Ok(schema)) = docs.next() else {
        return;
    };
    let content = match docs.next() {
        Some(Ok(v)) => v,
        _ => json!({}),
    };

    match form::validate_answer(&schema, &content) {
        Ok(forwarded) => assert_eq!(forwarded, content),
        Err(errors) => {
            assert!(!errors.0.is_empty());
            let _ = errors.to_string();
        }
    }

    for field in form::summarize_schema(&schema) {
        if field.kind == FieldKind::Unsupported {
            assert!(field.unsupported.is_some());
        }
        let Some(default) = field.default else {
            continue;
        };
        if field.name == SCHEMA_FIELD || field.name == CONTENT_FIELD {
            continue;
        }
        let answer = json!({ field.name.clone(): default });
        if let Err(errors) = form::validate_answer(&schema, &answer) {
            let mine: Vec<_> = errors.for_field(&field.name).collect();
            assert!(
                mine.is_empty(),
                "the default of {} is reported valid but refused: {mine:?}",
                field.name
            );
        }
    }
});
