//! Statuses that fit: a status's message and details travel in HTTP/2
//! headers (trailers), and peers refuse header blocks over a few KiB
//! (8 KiB is a common client limit). One oversized status (a server's
//! long JSON-RPC error, say) would otherwise break the connection, and
//! every other request on it. [`bounded`] is how both edges build a status
//! from text and details they do not control.

use tonic::{Code, Status};

/// Longest status message, in bytes; a longer one is cut on a character
/// boundary and says how long it was.
pub const MAX_MESSAGE: usize = 1024;
/// Longest details, in bytes (before base64).
pub const MAX_DETAILS: usize = 2048;

/// A status of `code` with `message` and `details` (JSON text, or empty),
/// each within its limit. Details over [`MAX_DETAILS`] that are a JSON
/// object (a JSON-RPC error object) keep `code` and a cut `message`, and
/// their `data` becomes `{"truncated": true, "bytes": N}`; any other
/// oversized details are dropped.
pub fn bounded(code: Code, message: impl Into<String>, details: &[u8]) -> Status {
    let message = cut(message.into(), MAX_MESSAGE);
    let details = fit_details(details);
    if details.is_empty() {
        Status::new(code, message)
    } else {
        Status::with_details(code, message, details.into())
    }
}

/// `text` cut to at most `max` bytes (on a character boundary) with a
/// note of its whole length; unchanged when it fits.
pub fn cut(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let note = format!("... ({} bytes in all)", text.len());
    let mut end = max.saturating_sub(note.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{note}", &text[..end])
}

fn fit_details(details: &[u8]) -> Vec<u8> {
    if details.len() <= MAX_DETAILS {
        return details.to_vec();
    }
    let Ok(serde_json::Value::Object(mut object)) = serde_json::from_slice(details) else {
        return Vec::new();
    };
    if let Some(serde_json::Value::String(m)) = object.get("message") {
        let m = cut(m.clone(), MAX_MESSAGE / 2);
        object.insert("message".into(), serde_json::Value::String(m));
    }
    if object.contains_key("data") {
        object.insert(
            "data".into(),
            serde_json::json!({"truncated": true, "bytes": details.len()}),
        );
    }
    let text = serde_json::Value::Object(object).to_string();
    if text.len() <= MAX_DETAILS {
        text.into_bytes()
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_and_details_are_cut_and_say_so() {
        let s = bounded(Code::NotFound, "é".repeat(5000), b"");
        assert!(s.message().len() <= MAX_MESSAGE);
        assert!(
            s.message().ends_with("(10000 bytes in all)"),
            "{}",
            s.message()
        );
        assert!(s.details().is_empty());
        let object = serde_json::json!({"code": -32602, "message": "x".repeat(3000), "data": "y".repeat(100_000)});
        let s = bounded(
            Code::FailedPrecondition,
            "short",
            object.to_string().as_bytes(),
        );
        assert_eq!(s.message(), "short");
        let back: serde_json::Value = serde_json::from_slice(s.details()).unwrap();
        assert_eq!(back["code"], -32602);
        assert_eq!(back["data"]["truncated"], true);
        assert!(s.details().len() <= MAX_DETAILS);
        let s = bounded(Code::Internal, "m", &[b'x'; 5000]);
        assert!(s.details().is_empty(), "not JSON: dropped");
        let small = br#"{"code":1}"#;
        assert_eq!(bounded(Code::Internal, "m", small).details(), small);
    }
}
