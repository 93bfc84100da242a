//! A short text summary of a tool's `outputSchema`, appended to the tool's
//! description for engines (which do not get the schema itself: their MCP
//! clients would validate the gateway's processed results against it).
//!
//! The summary names the top-level properties with their types, marks the
//! required ones, goes one level into objects and arrays of objects, names
//! `$ref`s without following them, and is at most [`MAX_CHARS`]
//! characters.

use serde_json::Value;

/// Longest summary, in characters.
pub const MAX_CHARS: usize = 1500;

/// The type of `schema` in a few words: `string`, `integer | null`,
/// `array of string`, `object`, `Order` (a `$ref`'s last segment), ...
fn type_of(schema: &Value) -> String {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return format!("{} ($ref)", r.rsplit('/').next().unwrap_or(r));
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let vs: Vec<String> = values.iter().take(8).map(Value::to_string).collect();
        let more = if values.len() > 8 { ", ..." } else { "" };
        return format!("one of {}{more}", vs.join(", "));
    }
    if let Some(c) = schema.get("const") {
        return format!("const {c}");
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = schema.get(key).and_then(Value::as_array) {
            return alts.iter().map(type_of).collect::<Vec<_>>().join(" | ");
        }
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" | "),
        _ if schema.get("properties").is_some() => "object".into(),
        _ => "any".into(),
    };
    if ty.starts_with("array")
        && let Some(items) = schema.get("items")
    {
        return format!("{ty} of {}", type_of(items));
    }
    ty
}

fn required_of(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `name (type, required): description`, with `nested` fields inline.
fn field(name: &str, schema: &Value, required: bool, nested: bool) -> String {
    let mut out = format!("{name} ({}", type_of(schema));
    if required {
        out.push_str(", required");
    }
    out.push(')');
    if let Some(d) = schema.get("description").and_then(Value::as_str) {
        let d = d.lines().next().unwrap_or("").trim();
        if !d.is_empty() {
            out.push_str(": ");
            out.push_str(d);
        }
    }
    if nested {
        // One level down: an object's fields, or an array's items' fields.
        let inner = if schema.get("properties").is_some() {
            Some(schema)
        } else {
            schema
                .get("items")
                .filter(|i| i.get("properties").is_some())
        };
        if let Some(inner) = inner
            && let Some(props) = inner.get("properties").and_then(Value::as_object)
        {
            let req = required_of(inner);
            let fields: Vec<String> = props
                .iter()
                .map(|(k, v)| field(k, v, req.contains(&k.as_str()), false))
                .collect();
            out.push_str(&format!(" {{{}}}", fields.join("; ")));
        }
    }
    out
}

/// The summary of `schema`; empty when it says nothing useful (not an
/// object).
pub fn summarize(schema: &Value) -> String {
    if !schema.is_object() {
        return String::new();
    }
    let mut text = format!("Returns structuredContent: {}", type_of(schema));
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        let req = required_of(schema);
        if !props.is_empty() {
            text.push_str(" with:");
        }
        for (k, v) in props {
            text.push_str("\n- ");
            text.push_str(&field(k, v, req.contains(&k.as_str()), true));
        }
    } else if schema.get("items").is_some() {
        text = format!(
            "Returns structuredContent: {}",
            field("result", schema, false, true)
        );
    }
    truncate(text, MAX_CHARS)
}

fn truncate(text: String, max: usize) -> String {
    if text.chars().count() <= max {
        return text;
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// `description` with the summary of `output_schema` appended (after a
/// blank line); `description` alone without a schema.
pub fn describe(description: &str, output_schema: Option<&Value>) -> String {
    let summary = output_schema.map(summarize).unwrap_or_default();
    match (description.is_empty(), summary.is_empty()) {
        (_, true) => description.to_owned(),
        (true, false) => summary,
        (false, false) => format!("{description}\n\n{summary}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn top_level_required_nested_and_refs() {
        let schema = json!({
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "Order id, e.g. O-1001"},
                "status": {"enum": ["pending", "delivered"]},
                "total": {"type": ["number", "null"]},
                "items": {"type": "array", "items": {"type": "object",
                    "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"},
                                   "deep": {"type": "object", "properties": {"x": {"type": "string"}}}},
                    "required": ["sku"]}},
                "customer": {"$ref": "#/$defs/Customer"},
            },
            "required": ["id", "items"],
            "$defs": {"Customer": {"type": "object", "properties": {"secret_field": {"type": "string"}}}}
        });
        let s = summarize(&schema);
        assert!(
            s.starts_with("Returns structuredContent: object with:"),
            "{s}"
        );
        assert!(
            s.contains("- id (string, required): Order id, e.g. O-1001"),
            "{s}"
        );
        assert!(
            s.contains(r#"- status (one of "pending", "delivered")"#),
            "{s}"
        );
        assert!(s.contains("- total (number | null)"), "{s}");
        assert!(
            s.contains("- items (array of object, required) {sku (string, required); quantity (integer); deep (object)}"),
            "{s}"
        );
        // Nested one level only; refs named, not followed.
        assert!(!s.contains("x (string)"), "{s}");
        assert!(s.contains("- customer (Customer ($ref))"), "{s}");
        assert!(!s.contains("secret_field"), "{s}");
    }

    #[test]
    fn at_most_1500_characters() {
        let mut props = serde_json::Map::new();
        for i in 0..200 {
            props.insert(
                format!("field_{i}"),
                json!({"type": "string", "description": "a long description of this field"}),
            );
        }
        let s = summarize(&json!({"type": "object", "properties": props}));
        assert_eq!(s.chars().count(), MAX_CHARS);
        assert!(s.ends_with('…'));
        let d = describe(
            "Lists things.",
            Some(&json!({"type": "object", "properties": props})),
        );
        assert!(d.starts_with("Lists things.\n\nReturns"));
    }

    #[test]
    fn descriptions_without_schema_are_unchanged() {
        assert_eq!(describe("Echo.", None), "Echo.");
        assert_eq!(describe("Echo.", Some(&json!(true))), "Echo.");
        assert_eq!(
            describe(
                "",
                Some(&json!({"type": "array", "items": {"type": "string"}}))
            ),
            "Returns structuredContent: result (array of string)"
        );
    }
}
