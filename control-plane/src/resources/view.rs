//! Catalogue entries, kept exactly as the server listed them, to the engine
//! API's messages. A field of the wrong type reads as absent; the entry
//! itself travels whole in the `*_json` field.

use serde_json::Value;
use switchyard_proto::v1 as pb;

fn text(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_owned()
}

/// A `resources/list` entry of `server`.
pub fn resource(server: &str, v: &Value) -> pb::Resource {
    pb::Resource {
        server: server.to_owned(),
        uri: text(v, "uri"),
        name: text(v, "name"),
        title: text(v, "title"),
        description: text(v, "description"),
        mime_type: text(v, "mimeType"),
        size: v
            .get("size")
            .and_then(Value::as_u64)
            .and_then(|n| i64::try_from(n).ok())
            .unwrap_or(-1),
        resource_json: v.to_string(),
    }
}

/// A `resources/templates/list` entry of `server`.
pub fn template(server: &str, v: &Value) -> pb::ResourceTemplate {
    pb::ResourceTemplate {
        server: server.to_owned(),
        uri_template: text(v, "uriTemplate"),
        name: text(v, "name"),
        title: text(v, "title"),
        description: text(v, "description"),
        mime_type: text(v, "mimeType"),
        template_json: v.to_string(),
    }
}

/// A `prompts/list` entry of `server`.
pub fn prompt(server: &str, v: &Value) -> pb::Prompt {
    let arguments = v
        .get("arguments")
        .and_then(Value::as_array)
        .map(|args| {
            args.iter()
                .filter(|a| a.get("name").and_then(Value::as_str).is_some())
                .map(|a| pb::PromptArgument {
                    name: text(a, "name"),
                    title: text(a, "title"),
                    description: text(a, "description"),
                    required: a.get("required") == Some(&Value::Bool(true)),
                })
                .collect()
        })
        .unwrap_or_default();
    pb::Prompt {
        server: server.to_owned(),
        name: text(v, "name"),
        title: text(v, "title"),
        description: text(v, "description"),
        arguments,
        prompt_json: v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_keep_what_was_sent_and_read_bad_fields_as_absent() {
        let v = json!({"uri": "demo://a b/../x", "name": "x", "size": 12, "mimeType": 7, "icons": [{"src": "data:,"}], "_meta": {"k": 1}});
        let r = resource("s", &v);
        assert_eq!(r.uri, "demo://a b/../x");
        assert_eq!((r.size, r.mime_type.as_str()), (12, ""));
        assert_eq!(serde_json::from_str::<Value>(&r.resource_json).unwrap(), v);
        assert_eq!(resource("s", &json!({"uri": "u", "size": -3})).size, -1);
        let p = prompt(
            "s",
            &json!({"name": "p", "arguments": [{"name": "a", "required": true}, {"required": true}, {"name": "b"}]}),
        );
        assert_eq!(p.arguments.len(), 2);
        assert!(p.arguments[0].required && !p.arguments[1].required);
        let t = template("s", &json!({"uriTemplate": "x://{id}", "name": "t"}));
        assert_eq!(t.uri_template, "x://{id}");
    }
}
