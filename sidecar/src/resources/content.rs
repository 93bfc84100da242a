//! Stage E's size rules: pure functions from what the server answered
//! (`ReadResourceResult`, `GetPromptResult`, `CompleteResult`, as
//! `serde_json::Value`) to what the engine and the model get. They never
//! panic, whatever the JSON.
//!
//! - **Text** up to [`INLINE_MAX_CHARS`] characters (Unicode scalar
//!   values, not bytes) stays inline (`ResourceContent.text`, a prompt
//!   message's `text`, and the model text). A longer text becomes an
//!   attachment; the model text gets its first [`HEAD_CHARS`] characters
//!   and a line naming the attachment and the text's size.
//! - **Binary** (a resource `blob`, a prompt's image or audio, an embedded
//!   blob resource) is always an attachment, base64-decoded; a payload
//!   that is not valid base64 is an error naming the server and the URI
//!   (or prompt).
//! - `attach` ([`read`]): every content becomes an attachment, text
//!   included.
//! - **Names** are generated, never taken from a URI or a name:
//!   `resource-1.<ext>`, `resource-2.<ext>`... for a read, `prompt-N.<ext>`
//!   for a prompt, the extension from the MIME type through stage A's
//!   allow-list ([`extension`]; `txt` for text of an unknown type, `bin`
//!   for unknown binary). An attachment's `uri` is the content's URI,
//!   byte-exact.
//! - **Prompts**: one `PromptMessage` per content block; a `resource_link`
//!   stays a link (never read); `content_json` is the block as sent minus
//!   the payload moved to an attachment (`data`, `resource.blob`,
//!   `resource.text`).
//! - **Completions**: at most [`MAX_COMPLETION_VALUES`] values kept (more
//!   sets `has_more`), `total` -1 when absent.
//!
//! URIs and names shown in the model text are JSON-quoted, so a server's
//! string cannot start a line of its own there.

use crate::error::{CallError, quoted};
use crate::tools::results::extension;
use crate::upstream::UpstreamError;
use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::Value;
use switchyard_mcp::methods;
use switchyard_proto::v1::{Attachment, CompleteResponse, PromptMessage, ResourceContent};

#[cfg(test)]
mod tests;

/// Longest text kept inline, in characters.
pub const INLINE_MAX_CHARS: usize = 20_000;
/// Characters of a longer text shown in the model text.
pub const HEAD_CHARS: usize = 4_000;
/// Most completion values kept.
pub const MAX_COMPLETION_VALUES: usize = 100;

/// Base64 as MCP servers write it: the standard alphabet, padding optional.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A server's answer that cannot be turned into a response: a payload
/// that is not base64, a result without its list. It becomes the server's
/// protocol error (`INTERNAL`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server {server}: {method} {about}: {detail}")]
pub struct ContentError {
    /// The server.
    pub server: String,
    /// The request.
    pub method: &'static str,
    /// What it was about: the quoted URI or prompt name.
    pub about: String,
    /// What was wrong.
    pub detail: String,
}

impl From<ContentError> for CallError {
    fn from(e: ContentError) -> Self {
        CallError::Upstream(UpstreamError::Protocol {
            server: e.server,
            detail: format!("{} {}: {}", e.method, e.about, e.detail),
        })
    }
}

/// What a `resources/read` result becomes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Read {
    /// What the model reads: the inline texts, a line per attachment (with
    /// the beginning of a long text).
    pub text: String,
    /// One per content of the result, in order.
    pub contents: Vec<ResourceContent>,
    /// The contents moved out of the text.
    pub attachments: Vec<Attachment>,
}

/// What a `prompts/get` result becomes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prompt {
    /// The result's `description`.
    pub description: String,
    /// One per content block, in order.
    pub messages: Vec<PromptMessage>,
    /// The payloads moved out of the messages.
    pub attachments: Vec<Attachment>,
    /// The messages as text for an input box: each message's text, a line
    /// per attachment or link.
    pub text: String,
}

/// Generated attachment names: `<prefix>-1.<ext>`, `<prefix>-2.<ext>`...
struct Names {
    prefix: &'static str,
    attachments: Vec<Attachment>,
}

impl Names {
    fn new(prefix: &'static str) -> Self {
        Names {
            prefix,
            attachments: Vec::new(),
        }
    }

    /// Adds an attachment of `data` and returns its name.
    fn attach(&mut self, ext: &str, mime_type: &str, data: Vec<u8>, uri: &str) -> String {
        let name = format!("{}-{}.{ext}", self.prefix, self.attachments.len() + 1);
        self.attachments.push(Attachment {
            name: name.clone(),
            mime_type: mime_type.to_owned(),
            size_bytes: data.len() as u64,
            data,
            uri: uri.to_owned(),
        });
        name
    }
}

/// A server's `mimeType` as kept: a media type (`type/subtype`, RFC 6838
/// token characters, parameters after `;` dropped, lower case, at most 127
/// bytes); anything else (spaces, quotes, line breaks, no `/`) is treated
/// as absent, so a server's string never reaches the model text or an
/// attachment's type as more than a media type.
pub fn media_type(raw: Option<&str>) -> String {
    let Some(raw) = raw else {
        return String::new();
    };
    let essence = raw.split(';').next().unwrap_or("").trim();
    let token = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    match essence.split_once('/') {
        Some((kind, sub)) if essence.len() <= 127 && token(kind) && token(sub) => {
            essence.to_ascii_lowercase()
        }
        _ => String::new(),
    }
}

/// The extension of a text attachment: the allow-list's, else `txt`.
fn text_extension(mime: &str) -> &'static str {
    match extension(mime) {
        "bin" => "txt",
        ext => ext,
    }
}

/// The first `n` characters of `text`.
fn head(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// Takes the string at `key` out of `object` (left absent); `None` when
/// it is absent or not a string (then left as it was).
fn take_str(object: &mut Value, key: &str) -> Option<String> {
    let map = object.as_object_mut()?;
    if !map.get(key).is_some_and(Value::is_string) {
        return None;
    }
    match map.remove(key) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

fn str_of<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

/// Decodes a base64 payload (padding optional; whitespace, as MIME
/// line breaks, ignored).
fn decode(data: &str) -> Result<Vec<u8>, base64::DecodeError> {
    BASE64.decode(data).or_else(|e| {
        if data.bytes().any(|b| b.is_ascii_whitespace()) {
            let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
            BASE64.decode(compact)
        } else {
            Err(e)
        }
    })
}

/// The model text of a long text of `what` moved to `name`: its `head`
/// and a line naming the attachment and the text's size.
fn long_text_note(head: &str, chars: usize, bytes: usize, what: &str, name: &str) -> String {
    format!(
        "{head}\n[The text of {what} is {chars} characters long ({bytes} bytes); only its first {HEAD_CHARS} characters are shown. The whole text is in the attachment {name}.]"
    )
}

/// The note of content moved to attachment `name`.
fn attached_note(what: &str, name: &str, mime: &str, bytes: usize) -> String {
    format!("[{what} attached as {name} ({mime}, {bytes} bytes)]")
}

/// Processes the `resources/read` result of `uri` on `server` (see the
/// module docs); `attach` moves every content to an attachment. Errors: no
/// `contents` array; an item with neither `text` nor `blob`; a blob that
/// is not base64.
pub fn read(
    server: &str,
    uri: &str,
    mut result: Value,
    attach: bool,
) -> Result<Read, ContentError> {
    let error = |detail: String| ContentError {
        server: server.to_owned(),
        method: methods::RESOURCES_READ,
        about: quoted(uri),
        detail,
    };
    let items = match result.get_mut("contents").map(Value::take) {
        Some(Value::Array(items)) => items,
        _ => return Err(error("the result has no `contents` array".into())),
    };
    let many = items.len() > 1;
    let mut names = Names::new("resource");
    let mut out = Read::default();
    let mut parts: Vec<String> = Vec::new();
    for (i, mut item) in items.into_iter().enumerate() {
        let item_uri = str_of(&item, "uri").unwrap_or(uri).to_owned();
        let mime = media_type(str_of(&item, "mimeType"));
        let mut content = ResourceContent {
            uri: item_uri.clone(),
            mime_type: mime.clone(),
            meta_json: item
                .get("_meta")
                .filter(|m| !m.is_null())
                .map(Value::to_string)
                .unwrap_or_default(),
            ..ResourceContent::default()
        };
        let what = format!("resource {}", quoted(&item_uri));
        let text = take_str(&mut item, "text");
        let blob = take_str(&mut item, "blob");
        match (text, blob) {
            (Some(text), _) => {
                let chars = text.chars().count();
                if !attach && chars <= INLINE_MAX_CHARS {
                    parts.push(if many {
                        format!("[{what}]\n{text}")
                    } else {
                        text.clone()
                    });
                    content.text = text;
                } else {
                    let mime_out = if mime.is_empty() { "text/plain" } else { &mime };
                    let ext = text_extension(mime_out);
                    let bytes = text.len();
                    let long =
                        (chars > INLINE_MAX_CHARS).then(|| head(&text, HEAD_CHARS).to_owned());
                    let name = names.attach(ext, mime_out, text.into_bytes(), &item_uri);
                    parts.push(match long {
                        Some(h) => long_text_note(&h, chars, bytes, &what, &name),
                        None => attached_note(&what, &name, mime_out, bytes),
                    });
                    content.attachment = name;
                }
            }
            (None, Some(blob)) => {
                let data = decode(&blob).map_err(|e| {
                    error(format!(
                        "content {} ({}) has a blob that is not valid base64: {e}",
                        i + 1,
                        quoted(&item_uri)
                    ))
                })?;
                drop(blob);
                let mime_out = if mime.is_empty() {
                    "application/octet-stream"
                } else {
                    &mime
                };
                let bytes = data.len();
                let name = names.attach(extension(mime_out), mime_out, data, &item_uri);
                parts.push(attached_note(&what, &name, mime_out, bytes));
                content.attachment = name;
            }
            (None, None) => {
                return Err(error(format!(
                    "content {} ({}) has neither `text` nor `blob` as a string",
                    i + 1,
                    quoted(&item_uri)
                )));
            }
        }
        out.contents.push(content);
    }
    out.text = parts.join("\n\n");
    out.attachments = names.attachments;
    Ok(out)
}

/// Processes the `prompts/get` result of prompt `name` on `server` (see
/// the module docs). Errors: no `messages` array; a message without a
/// `content` object (or array); a payload that is not base64.
pub fn prompt(server: &str, name: &str, mut result: Value) -> Result<Prompt, ContentError> {
    let error = |detail: String| ContentError {
        server: server.to_owned(),
        method: methods::PROMPTS_GET,
        about: quoted(name),
        detail,
    };
    let messages = match result.get_mut("messages").map(Value::take) {
        Some(Value::Array(messages)) => messages,
        _ => return Err(error("the result has no `messages` array".into())),
    };
    let mut out = Prompt {
        description: str_of(&result, "description").unwrap_or("").to_owned(),
        ..Prompt::default()
    };
    let mut names = Names::new("prompt");
    let mut parts: Vec<String> = Vec::new();
    for (i, mut message) in messages.into_iter().enumerate() {
        let role = str_of(&message, "role").unwrap_or("").to_owned();
        // One block per message (2025-11-25 and 2026-07-28); an array of
        // blocks is taken block by block.
        let blocks = match message.get_mut("content").map(Value::take) {
            Some(Value::Array(blocks)) => blocks,
            Some(block @ Value::Object(_)) => vec![block],
            _ => {
                return Err(error(format!("message {} has no `content` object", i + 1)));
            }
        };
        for block in blocks {
            let (m, part) = prompt_block(block, &mut names)
                .map_err(|detail| error(format!("message {}: {detail}", i + 1)))?;
            out.messages.push(PromptMessage {
                role: role.clone(),
                ..m
            });
            parts.push(part);
        }
    }
    out.text = parts.join("\n\n");
    out.attachments = names.attachments;
    Ok(out)
}

/// One content block of a prompt message: the message (without its role)
/// and its part of the input-box text. Errors: a payload that is not
/// base64 (the detail).
fn prompt_block(mut block: Value, names: &mut Names) -> Result<(PromptMessage, String), String> {
    let kind = str_of(&block, "type").unwrap_or("").to_owned();
    let mut m = PromptMessage {
        r#type: kind.clone(),
        ..PromptMessage::default()
    };
    let part = match kind.as_str() {
        "text" => {
            m.text = str_of(&block, "text").unwrap_or("").to_owned();
            m.text.clone()
        }
        "image" | "audio" => {
            let mime = match media_type(str_of(&block, "mimeType")) {
                m if m.is_empty() => "application/octet-stream".to_owned(),
                m => m,
            };
            let data = take_str(&mut block, "data").unwrap_or_default();
            let data = decode(&data).map_err(|e| format!("the {kind} is not valid base64: {e}"))?;
            let bytes = data.len();
            let name = names.attach(extension(&mime), &mime, data, "");
            m.mime_type = mime.clone();
            m.attachment = name.clone();
            attached_note(&kind, &name, &mime, bytes)
        }
        "resource" => {
            let resource = block.get_mut("resource");
            let uri = resource
                .as_deref()
                .and_then(|r| str_of(r, "uri"))
                .unwrap_or("")
                .to_owned();
            let mime = media_type(resource.as_deref().and_then(|r| str_of(r, "mimeType")));
            let what = format!("resource {}", quoted(&uri));
            m.uri = uri.clone();
            m.mime_type = mime.clone();
            match resource {
                Some(resource) if resource.get("text").is_some_and(Value::is_string) => {
                    let text = str_of(resource, "text").unwrap_or("");
                    let chars = text.chars().count();
                    if chars <= INLINE_MAX_CHARS {
                        m.text = text.to_owned();
                        format!("[{what}]\n{text}")
                    } else {
                        let text = take_str(resource, "text").unwrap_or_default();
                        let mime_out = if mime.is_empty() { "text/plain" } else { &mime };
                        let head_text = head(&text, HEAD_CHARS).to_owned();
                        let bytes = text.len();
                        let name = names.attach(
                            text_extension(mime_out),
                            mime_out,
                            text.into_bytes(),
                            &uri,
                        );
                        m.attachment = name.clone();
                        long_text_note(&head_text, chars, bytes, &what, &name)
                    }
                }
                Some(resource) if resource.get("blob").is_some_and(Value::is_string) => {
                    let blob = take_str(resource, "blob").unwrap_or_default();
                    let data = decode(&blob)
                        .map_err(|e| format!("the blob of {what} is not valid base64: {e}"))?;
                    let mime_out = if mime.is_empty() {
                        "application/octet-stream"
                    } else {
                        &mime
                    };
                    let bytes = data.len();
                    let name = names.attach(extension(mime_out), mime_out, data, &uri);
                    m.attachment = name.clone();
                    attached_note(&what, &name, mime_out, bytes)
                }
                _ => format!("[{what}]"),
            }
        }
        "resource_link" => {
            let uri = str_of(&block, "uri").unwrap_or("").to_owned();
            let name = str_of(&block, "name").unwrap_or("");
            m.mime_type = media_type(str_of(&block, "mimeType"));
            let part = format!("[resource link {}: {}]", quoted(&uri), quoted(name));
            m.uri = uri;
            part
        }
        // A message without content shows nothing.
        _ if block.is_null() => String::new(),
        _ => block.to_string(),
    };
    m.content_json = if block.is_null() {
        String::new()
    } else {
        block.to_string()
    };
    Ok((m, part))
}

/// The `completion/complete` result of `server` as the engine gets it
/// (see the module docs). Errors: no `completion.values` array. Values
/// that are not strings are left out.
pub fn completion(
    server: &str,
    about: &str,
    result: &Value,
) -> Result<CompleteResponse, ContentError> {
    let completion = result.get("completion").unwrap_or(&Value::Null);
    let Some(values) = completion.get("values").and_then(Value::as_array) else {
        return Err(ContentError {
            server: server.to_owned(),
            method: methods::COMPLETE,
            about: about.to_owned(),
            detail: "the result has no `completion.values` array".into(),
        });
    };
    let strings = values.iter().filter_map(Value::as_str);
    let cut = strings.clone().count() > MAX_COMPLETION_VALUES;
    Ok(CompleteResponse {
        values: strings
            .take(MAX_COMPLETION_VALUES)
            .map(str::to_owned)
            .collect(),
        total: completion
            .get("total")
            .and_then(Value::as_i64)
            .unwrap_or(-1),
        has_more: cut || completion.get("hasMore").and_then(Value::as_bool) == Some(true),
        result_json: String::new(),
    })
}
