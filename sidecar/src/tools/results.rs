//! Stage A result processing, shared by foreground calls and background
//! results: pure functions on the raw `CallToolResult`, and the tools'
//! `outputSchema` validators, compiled on first use.
//!
//! [`process`] turns a result into what the model reads ([`Processed`]):
//!
//! - text content is kept, in order; images, audio and embedded blob
//!   resources become attachments (`result-N.<ext>`, with their MIME type
//!   and, for resources, the URI) and leave a one-line note in the text;
//! - `structuredContent` alone is rendered as pretty JSON; with text, it is
//!   appended unless the text already holds the same JSON (compared as
//!   parsed values: the whole text, a fenced block, or a JSON value
//!   starting anywhere in it);
//! - model text over [`ResultLimits::max_model_text`] becomes an attachment
//!   (`result-N.json` when it is JSON, else `.txt`) and only its beginning
//!   stays inline, with a note naming the attachment;
//! - `isError` results are processed the same way but never validated.
//!
//! [`OutputValidators`] holds each tool's `outputSchema` of one catalogue
//! and compiles it the first time a result of that tool is validated, once
//! per catalogue (JSON Schema 2020-12 unless `$schema` names draft-07 or
//! another draft; local `$ref`/`$defs`, recursive ones included). Remote
//! references are never fetched: a schema that needs one cannot be
//! compiled, so it counts as broken. A broken schema disables validation
//! for that tool only, with a warning. Compiling on first use keeps a
//! sidecar whose tools are not called from paying for the validators and
//! for the `jsonschema` crate's meta-schemas (about 3 MiB of resident
//! memory; docs/reliability.md, "Idle RSS"). [`audit_structured`]
//! truncates the structured result kept in audit records.

use base64::Engine;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

#[cfg(test)]
mod tests;

/// Default bound on the model text kept inline (bytes).
pub const DEFAULT_MAX_MODEL_TEXT: usize = 100 * 1024;
/// Default size of the beginning kept inline when the text is too long.
pub const DEFAULT_INLINE_HEAD: usize = 8 * 1024;
/// Bound on the structured result kept in an audit record (bytes of JSON).
pub const AUDIT_STRUCTURED_MAX: usize = 20 * 1024;

/// Size limits of [`process`].
#[derive(Debug, Clone, Copy)]
pub struct ResultLimits {
    /// Longest model text kept inline, in bytes.
    pub max_model_text: usize,
    /// Bytes of the beginning kept inline when the text goes to an attachment.
    pub inline_head: usize,
}

impl Default for ResultLimits {
    fn default() -> Self {
        ResultLimits {
            max_model_text: DEFAULT_MAX_MODEL_TEXT,
            inline_head: DEFAULT_INLINE_HEAD,
        }
    }
}

/// A file the engine stores in its workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// `result-N.<ext>`.
    pub name: String,
    /// The content's MIME type.
    pub mime_type: String,
    /// The bytes.
    pub data: Vec<u8>,
    /// The resource URI, for embedded resources.
    pub uri: Option<String>,
}

/// A processed result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Processed {
    /// What the model reads.
    pub model_text: String,
    /// Content moved out of the text.
    pub attachments: Vec<Attachment>,
    /// `structuredContent`, when present (and not null).
    pub structured: Option<Value>,
    /// The result's `isError`.
    pub is_error: bool,
}

/// Processes a raw `CallToolResult` (see the module docs).
pub fn process(result: &Value, limits: &ResultLimits) -> Processed {
    let mut out = Processed {
        is_error: result.get("isError").and_then(Value::as_bool) == Some(true),
        structured: result
            .get("structuredContent")
            .filter(|v| !v.is_null())
            .cloned(),
        ..Processed::default()
    };
    let mut texts: Vec<String> = Vec::new();
    if let Some(items) = result.get("content").and_then(Value::as_array) {
        for item in items {
            content_item(item, &mut texts, &mut out.attachments);
        }
    }
    let mut only_json = false;
    if let Some(structured) = &out.structured {
        let pretty = serde_json::to_string_pretty(structured).unwrap_or_default();
        if texts.is_empty() {
            texts.push(pretty);
            only_json = true;
        } else if !texts.iter().any(|t| holds_json(t, structured)) {
            texts.push(pretty);
        }
    }
    let text = texts.join("\n\n");
    if text.len() > limits.max_model_text {
        let whole_json = only_json || serde_json::from_str::<Value>(&text).is_ok();
        let (ext, mime) = if whole_json {
            ("json", "application/json")
        } else {
            ("txt", "text/plain")
        };
        let name = format!("result-{}.{ext}", out.attachments.len() + 1);
        let head = &text[..floor_char_boundary(&text, limits.inline_head)];
        out.model_text = format!(
            "{head}\n\n[The result is {} bytes long; only its beginning is shown. The whole result is in the attachment {name}.]",
            text.len()
        );
        out.attachments.push(Attachment {
            name,
            mime_type: mime.into(),
            data: text.into_bytes(),
            uri: None,
        });
    } else {
        out.model_text = text;
    }
    out
}

fn content_item(item: &Value, texts: &mut Vec<String>, attachments: &mut Vec<Attachment>) {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    match kind {
        "text" => texts.push(str_of(item, "text").unwrap_or_default()),
        "image" | "audio" => {
            let mime = str_of(item, "mimeType").unwrap_or_else(|| {
                if kind == "image" {
                    "image/png".into()
                } else {
                    "audio/wav".into()
                }
            });
            let data = str_of(item, "data").unwrap_or_default();
            texts.push(attach(attachments, kind, &mime, decode(&data), None));
        }
        "resource" => {
            let resource = item.get("resource").cloned().unwrap_or(Value::Null);
            let uri = str_of(&resource, "uri");
            if let Some(text) = str_of(&resource, "text") {
                let header = uri.as_deref().map(|u| format!("[resource {u}]\n"));
                texts.push(format!("{}{text}", header.unwrap_or_default()));
            } else {
                let mime = str_of(&resource, "mimeType")
                    .unwrap_or_else(|| "application/octet-stream".into());
                let data = str_of(&resource, "blob").unwrap_or_default();
                texts.push(attach(attachments, "resource", &mime, decode(&data), uri));
            }
        }
        "resource_link" => {
            let uri = str_of(item, "uri").unwrap_or_default();
            let name = str_of(item, "name").unwrap_or_else(|| uri.clone());
            texts.push(format!("[resource link: {name} <{uri}>]"));
        }
        _ => texts.push(item.to_string()),
    }
}

fn attach(
    attachments: &mut Vec<Attachment>,
    kind: &str,
    mime: &str,
    data: Vec<u8>,
    uri: Option<String>,
) -> String {
    let name = format!("result-{}.{}", attachments.len() + 1, extension(mime));
    let note = format!(
        "[{kind} attached as {name} ({mime}, {} bytes){}]",
        data.len(),
        uri.as_deref()
            .map(|u| format!(" from {u}"))
            .unwrap_or_default()
    );
    attachments.push(Attachment {
        name,
        mime_type: mime.into(),
        data,
        uri,
    });
    note
}

fn decode(data: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .unwrap_or_else(|_| data.as_bytes().to_vec())
}

/// A file extension for a MIME type.
pub fn extension(mime: &str) -> &'static str {
    match mime.split(';').next().unwrap_or("").trim() {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "audio/wav" | "audio/x-wav" => "wav",
        "audio/mpeg" => "mp3",
        "audio/ogg" => "ogg",
        "application/json" => "json",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        "text/html" => "html",
        "text/csv" => "csv",
        "text/markdown" => "md",
        "application/xml" | "text/xml" => "xml",
        "application/zip" => "zip",
        "application/gzip" => "gz",
        _ => "bin",
    }
}

/// Most start positions tried by [`holds_json`] in one text.
const MAX_JSON_STARTS: usize = 256;

/// Whether `text` already holds `value`: the whole text parses to it, or a
/// JSON value starting at some `{` or `[` (a fenced block included) does.
pub fn holds_json(text: &str, value: &Value) -> bool {
    if serde_json::from_str::<Value>(text.trim()).is_ok_and(|v| same_json(&v, value)) {
        return true;
    }
    let want_object = value.is_object();
    let want_array = value.is_array();
    if !want_object && !want_array {
        return false;
    }
    let opener = if want_object { b'{' } else { b'[' };
    text.bytes()
        .enumerate()
        .filter(|(_, b)| *b == opener)
        .take(MAX_JSON_STARTS)
        .any(|(i, _)| {
            serde_json::Deserializer::from_str(&text[i..])
                .into_iter::<Value>()
                .next()
                .is_some_and(|v| v.is_ok_and(|v| same_json(&v, value)))
        })
}

/// Equality of parsed JSON values where numbers compare by value (`33`,
/// `33.0` and `3.3e1` are the same) and object key order does not matter.
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y
                || match (x.as_i64(), y.as_i64()) {
                    (Some(i), Some(j)) => i == j,
                    _ => x.as_f64().is_some() && x.as_f64() == y.as_f64(),
                }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_json(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

fn floor_char_boundary(s: &str, max: usize) -> usize {
    if max >= s.len() {
        return s.len();
    }
    let mut i = max;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The structured result for an audit record: the value itself when its
/// JSON is at most `max` bytes, else `{"truncated": true, "bytes": N,
/// "head": "<first max bytes of the JSON>"}`.
pub fn audit_structured(value: &Value, max: usize) -> Value {
    let text = value.to_string();
    if text.len() <= max {
        return value.clone();
    }
    json!({
        "truncated": true,
        "bytes": text.len(),
        "head": &text[..floor_char_boundary(&text, max)],
    })
}

enum ToolSchema {
    Valid(Box<jsonschema::Validator>),
    Broken,
}

/// One tool's `outputSchema`, compiled on first use. Shared (`Arc`) with
/// the next catalogue when the tool's schema is unchanged.
struct ToolEntry {
    schema: Value,
    compiled: OnceLock<ToolSchema>,
}

/// The `outputSchema` validators of one catalogue, by tool name. Each is
/// compiled the first time it is needed ([`OutputValidators::validate`],
/// [`OutputValidators::validates`], [`OutputValidators::broken`]) and
/// kept; concurrent first uses compile once.
#[derive(Default)]
pub struct OutputValidators {
    server: String,
    tools: HashMap<String, Arc<ToolEntry>>,
}

impl std::fmt::Debug for OutputValidators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputValidators")
            .field("server", &self.server)
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// What validating a tool's structured result found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validation {
    /// The tool has no outputSchema, or its schema is broken, or the result
    /// is an error or has no structured content.
    NotValidated,
    /// Valid.
    Valid,
    /// Invalid: one message per error (`/path: message`).
    Invalid(Vec<String>),
}

impl Validation {
    /// The error messages (empty unless invalid).
    pub fn errors(&self) -> Vec<String> {
        match self {
            Validation::Invalid(e) => e.clone(),
            _ => Vec::new(),
        }
    }
}

/// Most validation errors reported per result.
const MAX_VALIDATION_ERRORS: usize = 20;

impl OutputValidators {
    /// Takes the `outputSchema` of every tool in `tools` (definitions as
    /// listed); nothing is compiled yet. `server` names the server in the
    /// warning a broken schema logs when it is first compiled.
    pub fn new(server: &str, tools: &[Value]) -> Self {
        Self::next(server, tools, &OutputValidators::default())
    }

    /// Like [`OutputValidators::new`], keeping from `previous` (the last
    /// catalogue) each tool whose schema is unchanged, compiled or not: a
    /// list change compiles again only the schemas that changed.
    pub fn next(server: &str, tools: &[Value], previous: &OutputValidators) -> Self {
        let tools = tools
            .iter()
            .filter_map(|tool| {
                let name = tool.get("name").and_then(Value::as_str)?;
                let schema = tool.get("outputSchema").filter(|s| !s.is_null())?;
                let entry = match previous.tools.get(name) {
                    Some(kept) if kept.schema == *schema => kept.clone(),
                    _ => Arc::new(ToolEntry {
                        schema: schema.clone(),
                        compiled: OnceLock::new(),
                    }),
                };
                Some((name.to_owned(), entry))
            })
            .collect();
        OutputValidators {
            server: server.to_owned(),
            tools,
        }
    }

    /// The tools whose schema has been compiled so far, sorted.
    pub fn compiled(&self) -> Vec<&str> {
        self.names_where(|_, e| e.compiled.get().is_some())
    }

    /// The names of the tools `keep` says yes to, sorted.
    fn names_where(&self, keep: impl Fn(&str, &ToolEntry) -> bool) -> Vec<&str> {
        let mut names: Vec<&str> = self
            .tools
            .iter()
            .filter(|(n, e)| keep(n, e))
            .map(|(n, _)| n.as_str())
            .collect();
        names.sort_unstable();
        names
    }

    /// The compiled schema of `tool` (compiling it now if it is the first
    /// use); `None` when the tool has no outputSchema. A panic inside the
    /// `jsonschema` crate counts as a broken schema: the result is still
    /// delivered, unvalidated, and the schema is not tried again.
    fn schema(&self, tool: &str) -> Option<&ToolSchema> {
        let entry = self.tools.get(tool)?;
        Some(entry.compiled.get_or_init(|| {
            let started = std::time::Instant::now();
            let compiled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                compile_schema(&entry.schema)
            }))
            .unwrap_or_else(|_| Err("the schema compiler panicked".to_owned()));
            let us = started.elapsed().as_micros();
            match compiled {
                Ok(v) => {
                    tracing::debug!(server = %self.server, %tool, us, "outputSchema compiled");
                    ToolSchema::Valid(Box::new(v))
                }
                Err(e) => {
                    tracing::warn!(server = %self.server, %tool, error = %e, "the tool's outputSchema cannot be compiled; its results are not validated");
                    ToolSchema::Broken
                }
            }
        }))
    }

    /// Tools whose outputSchema is broken (compiles every schema).
    pub fn broken(&self) -> Vec<&str> {
        self.names_where(|n, _| matches!(self.schema(n), Some(ToolSchema::Broken)))
    }

    /// Whether `tool` has a usable validator (compiles its schema).
    pub fn validates(&self, tool: &str) -> bool {
        matches!(self.schema(tool), Some(ToolSchema::Valid(_)))
    }

    /// Validates a processed result of `tool` (never an `isError` one);
    /// compiles the tool's schema on its first result.
    pub fn validate(&self, tool: &str, processed: &Processed) -> Validation {
        if processed.is_error {
            return Validation::NotValidated;
        }
        let Some(ToolSchema::Valid(validator)) = self.schema(tool) else {
            return Validation::NotValidated;
        };
        let Some(structured) = &processed.structured else {
            return Validation::Invalid(vec![
                "the tool has an outputSchema but the result has no structuredContent".into(),
            ]);
        };
        let errors: Vec<String> = validator
            .iter_errors(structured)
            .take(MAX_VALIDATION_ERRORS)
            .map(|e| {
                let path = e.instance_path().to_string();
                let path = if path.is_empty() { "/".into() } else { path };
                format!("{path}: {e}")
            })
            .collect();
        if errors.is_empty() {
            Validation::Valid
        } else {
            Validation::Invalid(errors)
        }
    }
}

/// Compiles one schema: 2020-12 unless `$schema` says otherwise; formats
/// are annotations only; no reference is ever fetched.
pub fn compile_schema(schema: &Value) -> Result<jsonschema::Validator, String> {
    let mut options = jsonschema::options().offline();
    // With `$schema` the crate picks the draft (and the meta-schema) itself.
    if schema.get("$schema").is_none() {
        options = options.with_draft(jsonschema::Draft::Draft202012);
    }
    options.build(schema).map_err(|e| e.to_string())
}
