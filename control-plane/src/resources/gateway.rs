//! The gateway tools of stage E (seed §6.1): `mcp_resources(server?,
//! cursor?)` lists the resources and resource templates of the session's
//! servers, directory information only, in pages; `mcp_resource_read(server,
//! uri)` reads one. A session gets both when one of its servers has
//! resources. They are read-only and idempotent, so read-only sessions get
//! them, and they travel the call path like any tool (policy, approval,
//! audit, metrics): a policy set on `(server, mcp_resource_read)` applies
//! to reads of that server, and one on `(server, mcp_resources)` leaves
//! that server out of listings.
//!
//! Engine-visible tool names of servers' tools always contain `__`, so these
//! two names never collide with them.

use serde_json::{Value, json};
use std::sync::LazyLock;

/// `mcp_resources`.
pub const LIST: &str = "mcp_resources";
/// `mcp_resource_read`.
pub const READ: &str = "mcp_resource_read";
/// Entries in one page of `mcp_resources`.
pub const PAGE: usize = 50;

/// A gateway tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayTool {
    /// `mcp_resources`.
    List,
    /// `mcp_resource_read`.
    Read,
}

/// The gateway tool an engine-visible name means, if any.
pub fn tool(name: &str) -> Option<GatewayTool> {
    match name {
        LIST => Some(GatewayTool::List),
        READ => Some(GatewayTool::Read),
        _ => None,
    }
}

static LIST_DEF: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "name": LIST,
        "title": "List MCP resources",
        "description": "Lists the resources and resource templates of the MCP servers available to you: directory information only (server, uri, name, title, description, mimeType, size), in pages of 50. Pass `server` to list one server; pass `cursor` (the `nextCursor` of the previous page) to continue. A resource template such as `docs://{product}/{topic}` is not listed with its resources: fill in each {variable} yourself, then read the resulting URI with mcp_resource_read. There is no search over resources: a server with many documents may offer a search tool instead.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "server": {"type": "string", "description": "Only this server's resources and templates."},
                "cursor": {"type": "string", "description": "The nextCursor of the previous page."}
            },
            "additionalProperties": false
        },
        "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
    })
});

static READ_DEF: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "name": READ,
        "title": "Read an MCP resource",
        "description": "Reads one resource of an MCP server by its URI: one listed by mcp_resources, or a resource template you filled in. Text up to 20,000 characters is returned as is; longer text and binary content (PDFs, images...) are attached as files, and you get each file's name (and the beginning of a long text).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "server": {"type": "string", "description": "The server, as mcp_resources names it."},
                "uri": {"type": "string", "description": "The resource's URI, exactly as listed, or a template with every {variable} filled in."}
            },
            "required": ["server", "uri"],
            "additionalProperties": false
        },
        "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
    })
});

impl GatewayTool {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            GatewayTool::List => LIST,
            GatewayTool::Read => READ,
        }
    }

    /// Its definition, as a server would list it.
    pub fn definition(self) -> &'static Value {
        match self {
            GatewayTool::List => &LIST_DEF,
            GatewayTool::Read => &READ_DEF,
        }
    }

    /// Both, in the order they are offered.
    pub const ALL: [GatewayTool; 2] = [GatewayTool::List, GatewayTool::Read];
}

/// The arguments of a gateway tool call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Arguments {
    /// `server`; empty when not given.
    pub server: String,
    /// `cursor` (`mcp_resources`); `None` when not given.
    pub cursor: Option<String>,
    /// `uri` (`mcp_resource_read`), byte-exact.
    pub uri: String,
}

/// The arguments of a call of `tool`, from the engine's `arguments_json`
/// (empty means `{}`). Errors: a message naming the argument.
pub fn arguments(tool: GatewayTool, arguments_json: &str) -> Result<Arguments, String> {
    let name = tool.name();
    let args: Value = if arguments_json.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(arguments_json)
            .map_err(|e| format!("arguments_json: {name}: not JSON: {e}"))?
    };
    let Value::Object(map) = args else {
        return Err(format!("arguments_json: {name}: must be a JSON object"));
    };
    let allowed: &[&str] = match tool {
        GatewayTool::List => &["server", "cursor"],
        GatewayTool::Read => &["server", "uri"],
    };
    if let Some(k) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!(
            "arguments_json: {name}: unknown argument {k:?} (it takes {})",
            allowed.join(" and ")
        ));
    }
    let string = |key: &str| -> Result<Option<String>, String> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("arguments_json: {name}: `{key}` must be a string")),
        }
    };
    let out = Arguments {
        server: string("server")?.unwrap_or_default(),
        cursor: string("cursor")?,
        uri: string("uri")?.unwrap_or_default(),
    };
    if tool == GatewayTool::Read {
        if out.server.is_empty() {
            return Err(format!("arguments_json: {name}: `server` is required"));
        }
        if out.uri.is_empty() {
            return Err(format!("arguments_json: {name}: `uri` is required"));
        }
    }
    Ok(out)
}

/// Longest text field of an entry in a page of `mcp_resources`, in
/// characters (a description, a title, a name); longer ones are cut, with
/// `…`, so that a page stays a page (50 entries).
pub const MAX_FIELD_CHARS: usize = 1000;

fn field(s: &str) -> Value {
    match s.char_indices().nth(MAX_FIELD_CHARS) {
        None => Value::String(s.to_owned()),
        Some((end, _)) => Value::String(format!("{}…", &s[..end])),
    }
}

/// What the model reads of a page of `mcp_resources`: JSON, so names and
/// descriptions a server chose cannot pass for structure; each text field
/// at most [`MAX_FIELD_CHARS`] characters (URIs whole: they are read back).
pub fn page_text(
    resources: &[switchyard_proto::v1::Resource],
    templates: &[switchyard_proto::v1::ResourceTemplate],
    next_cursor: &str,
    unavailable: &[String],
) -> Value {
    let opt = |s: &str| (!s.is_empty()).then(|| field(s));
    let resources: Vec<Value> = resources
        .iter()
        .map(|r| {
            let mut o = serde_json::Map::new();
            o.insert("server".into(), json!(r.server));
            o.insert("uri".into(), json!(r.uri));
            o.insert("name".into(), field(&r.name));
            for (k, v) in [
                ("title", &r.title),
                ("description", &r.description),
                ("mimeType", &r.mime_type),
            ] {
                if let Some(v) = opt(v) {
                    o.insert(k.into(), v);
                }
            }
            if r.size >= 0 {
                o.insert("size".into(), json!(r.size));
            }
            Value::Object(o)
        })
        .collect();
    let templates: Vec<Value> = templates
        .iter()
        .map(|t| {
            let mut o = serde_json::Map::new();
            o.insert("server".into(), json!(t.server));
            o.insert("uriTemplate".into(), json!(t.uri_template));
            o.insert("name".into(), field(&t.name));
            for (k, v) in [
                ("title", &t.title),
                ("description", &t.description),
                ("mimeType", &t.mime_type),
            ] {
                if let Some(v) = opt(v) {
                    o.insert(k.into(), v);
                }
            }
            Value::Object(o)
        })
        .collect();
    let mut page = json!({"resources": resources, "resourceTemplates": templates});
    if !next_cursor.is_empty() {
        page["nextCursor"] = json!(next_cursor);
    }
    if !unavailable.is_empty() {
        page["unavailableServers"] = json!(unavailable);
    }
    page
}

/// A `CallToolResult` whose one text block is `text` (and, when given,
/// `structuredContent`): how a gateway tool answers.
pub fn tool_result(text: &str, structured: Option<&Value>) -> Value {
    let mut r = json!({"content": [{"type": "text", "text": text}]});
    if let Some(s) = structured {
        r["structuredContent"] = s.clone();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked_and_named() {
        let a = arguments(GatewayTool::Read, r#"{"server":"s","uri":"x://a b/%20?q"}"#).unwrap();
        assert_eq!((a.server.as_str(), a.uri.as_str()), ("s", "x://a b/%20?q"));
        assert_eq!(
            arguments(GatewayTool::List, "").unwrap(),
            Arguments::default()
        );
        let c = arguments(GatewayTool::List, r#"{"cursor":""}"#).unwrap();
        assert_eq!(c.cursor.as_deref(), Some(""));
        for (tool, args, needle) in [
            (GatewayTool::Read, r#"{"server":"s"}"#, "`uri` is required"),
            (GatewayTool::Read, r#"{"uri":"u"}"#, "`server` is required"),
            (
                GatewayTool::Read,
                r#"{"server":1,"uri":"u"}"#,
                "`server` must be a string",
            ),
            (
                GatewayTool::List,
                r#"{"path":"/etc"}"#,
                "unknown argument \"path\"",
            ),
            (GatewayTool::List, "[1]", "must be a JSON object"),
            (GatewayTool::List, "{", "not JSON"),
        ] {
            let e = arguments(tool, args).unwrap_err();
            assert!(
                e.contains(needle) && e.starts_with("arguments_json: "),
                "{e}"
            );
        }
    }

    #[test]
    fn long_fields_are_cut_in_a_page() {
        let r = switchyard_proto::v1::Resource {
            server: "s".into(),
            uri: format!("x://{}", "u".repeat(3000)),
            name: "n".repeat(5000),
            description: "é".repeat(20_000),
            size: -1,
            ..Default::default()
        };
        let page = page_text(std::slice::from_ref(&r), &[], "", &[]);
        let e = &page["resources"][0];
        assert_eq!(e["uri"], r.uri.as_str(), "URIs whole");
        assert_eq!(
            e["description"].as_str().unwrap().chars().count(),
            MAX_FIELD_CHARS + 1
        );
        assert!(e["name"].as_str().unwrap().ends_with('…'));
        assert!(e.get("size").is_none());
    }

    #[test]
    fn definitions_are_read_only_and_name_each_other() {
        for t in GatewayTool::ALL {
            let d = t.definition();
            assert_eq!(d["name"], t.name());
            assert_eq!(d["annotations"]["readOnlyHint"], true);
            assert_eq!(tool(t.name()), Some(t));
        }
        let list = GatewayTool::List.definition()["description"]
            .as_str()
            .unwrap();
        assert!(list.contains("mcp_resource_read") && list.contains("{variable}"));
        assert_eq!(tool("orders__mcp_resources"), None);
    }
}
