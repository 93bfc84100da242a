//! Record sizing: every background record a sidecar reports is checked and
//! cut to fit the store's limits ([`MAX_RECORD_BYTES`]): identifying fields
//! are bounded; an oversized result loses attachment content, then the raw
//! result, then long texts (each loss noted in the record).

use super::{BackgroundError, BackgroundRecord, MAX_RECORD_BYTES};
use crate::model::encode;

/// The longest values of a record's identifying fields, in bytes (the
/// record must stay under [`MAX_RECORD_BYTES`] whatever a sidecar sends).
const FIELD_LIMITS: [(&str, usize); 8] = [
    ("call.server", 256),
    ("call.tool", 1024),
    ("call.engine_tool", 1024),
    ("call.run_id", 256),
    ("call.task_id", 4096),
    ("call.sidecar_id", 256),
    ("call.protocol_version", 64),
    ("call.principal", 256),
];

/// Refuses identifying fields over [`FIELD_LIMITS`] (INVALID_ARGUMENT
/// naming the field).
pub(super) fn check_lengths(rec: &BackgroundRecord) -> Result<(), BackgroundError> {
    let values = [
        &rec.server,
        &rec.tool,
        &rec.engine_tool,
        &rec.run_id,
        &rec.task_id,
        &rec.sidecar_id,
        &rec.protocol_version,
        &rec.principal,
    ];
    for ((field, limit), value) in FIELD_LIMITS.iter().zip(values) {
        if value.len() > *limit {
            return Err(BackgroundError::Invalid(format!(
                "{field}: {} bytes, at most {limit}",
                value.len()
            )));
        }
    }
    Ok(())
}

/// How much of a long text field is kept when a record is too large.
const KEPT_TEXT_BYTES: usize = 16 * 1024;

/// Cuts `text` to at most `max` bytes (at a character boundary), marking
/// the cut. True if it was cut.
fn cut(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let total = text.len();
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("... [cut: {total} bytes in all]"));
    true
}

/// Keeps a record under [`MAX_RECORD_BYTES`], so that it can be stored
/// (etcd refuses requests over 1.5 MiB) and listed: when it is larger, the
/// attachments' content is dropped first, then the raw result
/// (`result_json`) and `structured_content_json` (the model text still
/// carries the result), then long texts are cut to [`KEPT_TEXT_BYTES`];
/// each step is noted in `status_message`. A terminal record still too
/// large (a huge attachment list) loses its result and fails, saying so;
/// a running one is refused (INVALID_ARGUMENT). Returns the JSON.
pub(super) fn fit(rec: &mut BackgroundRecord) -> Result<Vec<u8>, BackgroundError> {
    let original = encode(rec).len();
    if original <= MAX_RECORD_BYTES {
        return Ok(encode(rec));
    }
    let mut notes: Vec<&str> = Vec::new();
    if let Some(r) = rec.result.as_mut()
        && r.attachments.iter().any(|a| !a.data.is_empty())
    {
        for a in &mut r.attachments {
            a.data.clear();
        }
        notes.push("the result's attachments were too large to keep and were dropped");
    }
    let small = |rec: &BackgroundRecord| encode(rec).len() <= MAX_RECORD_BYTES;
    if !small(rec)
        && let Some(r) = rec.result.as_mut()
    {
        if !r.result_json.is_empty() {
            r.result_json.clear();
            notes.push("the raw result was too large to keep and was dropped");
        }
        if !small(rec)
            && let Some(r) = rec.result.as_mut()
            && !r.structured_content_json.is_empty()
        {
            r.structured_content_json.clear();
            notes.push("the structured content was too large to keep and was dropped");
        }
    }
    if !small(rec) {
        let mut any = false;
        for text in [
            &mut rec.status_message,
            &mut rec.last_poll_error,
            &mut rec.error_json,
            &mut rec.immediate_response,
        ] {
            any |= cut(text, KEPT_TEXT_BYTES);
        }
        if let Some(r) = rec.result.as_mut() {
            any |= cut(&mut r.model_text, KEPT_TEXT_BYTES);
            if r.validation_errors.len() > 20 {
                r.validation_errors.truncate(20);
                any = true;
            }
            for e in &mut r.validation_errors {
                any |= cut(e, 1024);
            }
        }
        if any {
            notes.push("long texts were cut");
        }
    }
    if !small(rec) {
        if !rec.is_terminal() {
            return Err(BackgroundError::Invalid(format!(
                "call: the record is {original} bytes, over the {MAX_RECORD_BYTES}-byte limit even with its long texts cut"
            )));
        }
        rec.result = None;
        rec.status = "failed".into();
        rec.status_message =
            format!("the call finished, but its result ({original} bytes) was too large to keep");
        notes.clear();
    }
    if !notes.is_empty() {
        let note = format!("({})", notes.join("; "));
        if rec.status_message.is_empty() {
            rec.status_message = note;
        } else {
            rec.status_message = format!("{} {note}", rec.status_message);
        }
    }
    tracing::warn!(id = %rec.id, bytes = original, kept = encode(rec).len(), "background call record too large: {}", rec.status_message);
    Ok(encode(rec))
}
