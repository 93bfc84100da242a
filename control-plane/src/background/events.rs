//! What engines hear of background calls: the text the model reads when a
//! call moved, and the `background_call.completed|failed|cancelled` session
//! events.

use super::BackgroundRecord;
use switchyard_proto::v1 as pb;

/// What the model reads when a call moved to the background: the fixed
/// sentence, then the server's model-immediate-response text, if any.
pub fn moved_text(engine_tool: &str, id: &str, immediate_response: &str) -> String {
    let mut text = format!(
        "The call to {engine_tool} is still running and has moved to the background (id {id}). Its result will arrive as a new message when it finishes. End this turn."
    );
    if !immediate_response.is_empty() {
        text.push_str("\n\n");
        text.push_str(immediate_response);
    }
    text
}

/// The session event of a terminal record: `background_call.<status>`,
/// at its `finished_at_ms`, data = the record's proto3 JSON form.
pub fn event_of(rec: &BackgroundRecord) -> pb::SessionEvent {
    pb::SessionEvent {
        r#type: format!("background_call.{}", rec.status),
        session_id: rec.session_id.clone(),
        at_ms: rec.finished_at_ms,
        data_json: rec.to_json().to_string(),
    }
}

/// Whether a change record is an event for `session`: terminal, the
/// session's.
pub fn is_event_for(rec: &BackgroundRecord, session: &str) -> bool {
    rec.is_terminal() && rec.session_id == session
}
