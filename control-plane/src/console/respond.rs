//! Where the console's refusals become HTTP answers, in one place: a
//! [`ConsoleError`] (a gRPC status from the services, or the console's
//! own refusal) is answered as `{"error", "code"}` JSON with the HTTP
//! status of its code, plus `fieldErrors` for an invalid form answer; and
//! [`json_refusals`] gives the same shape to the refusals the HTTP
//! framework makes itself (an undecodable path or query, a method not
//! allowed, an unknown path, a body over the limit); [`from_body`] turns a
//! JSON body of the wrong shape into a 400 naming the member.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tonic::Code;

/// A refusal, as the page gets it.
#[derive(Debug)]
pub struct ConsoleError {
    /// The gRPC code's name, e.g. `INVALID_ARGUMENT`.
    code: Code,
    /// The API's message, unchanged.
    message: String,
    /// Extra members of the answer (`fieldErrors`, `adminTokens`).
    extra: serde_json::Map<String, Value>,
    /// The HTTP status, when not the code's own.
    status: Option<StatusCode>,
}

impl ConsoleError {
    /// A refusal with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ConsoleError {
            code,
            message: message.into(),
            extra: serde_json::Map::new(),
            status: None,
        }
    }

    /// A body over the limit (413).
    pub fn too_large(message: impl Into<String>) -> Self {
        let mut e = Self::new(Code::ResourceExhausted, message);
        e.status = Some(StatusCode::PAYLOAD_TOO_LARGE);
        e
    }

    /// Not logged in (401), saying whether anyone can log in.
    pub fn logged_out(message: impl Into<String>, admin_tokens: bool) -> Self {
        let mut e = Self::new(Code::Unauthenticated, message);
        e.extra.insert("adminTokens".into(), json!(admin_tokens));
        e
    }

    /// A malformed request body or query (400).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    /// A write refused by the CSRF check (403).
    pub fn csrf(message: impl Into<String>) -> Self {
        Self::new(Code::PermissionDenied, message)
    }
}

impl From<tonic::Status> for ConsoleError {
    fn from(s: tonic::Status) -> Self {
        let mut e = ConsoleError::new(s.code(), s.message());
        // An invalid form answer: the problems by field.
        if let Ok(Value::Object(details)) = serde_json::from_slice::<Value>(s.details())
            && let Some(fields) = details.get("fieldErrors")
        {
            e.extra.insert("fieldErrors".into(), fields.clone());
        }
        e
    }
}

/// The HTTP status of a gRPC code.
fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable | Code::Cancelled => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Internal | Code::Unknown | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// `INVALID_ARGUMENT` and so on.
fn code_name(code: Code) -> String {
    format!("{code:?}")
        .chars()
        .fold(String::new(), |mut out, c| {
            if c.is_uppercase() && !out.is_empty() {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
            out
        })
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let mut body = json!({"error": self.message, "code": code_name(self.code)});
        if let Value::Object(m) = &mut body {
            m.extend(self.extra);
        }
        let status = self.status.unwrap_or_else(|| http_status(self.code));
        let mut response = (status, Json(body)).into_response();
        response.extensions_mut().insert(Shaped);
        response
    }
}

/// Marks an answer [`ConsoleError`] made.
#[derive(Debug, Clone, Copy)]
struct Shaped;

/// The gRPC code name that stands for an HTTP refusal the framework made.
fn code_of(status: StatusCode) -> Code {
    match status {
        StatusCode::NOT_FOUND => Code::NotFound,
        StatusCode::METHOD_NOT_ALLOWED | StatusCode::NOT_IMPLEMENTED => Code::Unimplemented,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::PAYLOAD_TOO_LARGE | StatusCode::TOO_MANY_REQUESTS => Code::ResourceExhausted,
        s if s.is_server_error() => Code::Internal,
        _ => Code::InvalidArgument,
    }
}

/// Answers every refusal under `/ui/api` in the console's JSON shape: one
/// the framework made (an undecodable path or query: its own text; a
/// method not allowed, an unknown path: said so) keeps its status and gets
/// `{"error", "code"}`.
pub async fn json_refusals(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error())
        || response.extensions().get::<Shaped>().is_some()
    {
        return response;
    }
    let (_, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = match (status, text.is_empty()) {
        (StatusCode::METHOD_NOT_ALLOWED, _) => "method not allowed on this console API path".into(),
        (StatusCode::NOT_FOUND, true) => "no such console API path".into(),
        (_, true) => status.canonical_reason().unwrap_or("refused").to_owned(),
        (_, false) => text,
    };
    let mut e = ConsoleError::new(code_of(status), message);
    e.status = Some(status);
    e.into_response()
}

/// `v` as `T`; the error names the member (`maxMessageBytes: invalid type:
/// a string, expected u64`) and never repeats a value
/// ([`switchyard_common::serde_errors`]).
pub fn from_body<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ConsoleError> {
    use switchyard_common::serde_errors::{escape_controls, without_values};
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let problem = escape_controls(&without_values(&e.inner().to_string()));
        ConsoleError::bad_request(if path == "." {
            format!("the body: {problem}")
        } else {
            format!("the body: {}: {problem}", escape_controls(&path))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_named_as_grpc_names_them() {
        assert_eq!(code_name(Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(Code::NotFound), "NOT_FOUND");
        assert_eq!(code_name(Code::Unauthenticated), "UNAUTHENTICATED");
        assert_eq!(http_status(Code::FailedPrecondition), StatusCode::CONFLICT);
    }

    #[test]
    fn form_problems_come_from_the_status_details() {
        let status = tonic::Status::with_details(
            Code::InvalidArgument,
            "content_json: the answer does not match requestedSchema: age: 200 is above the maximum 150",
            br#"{"fieldErrors":[{"field":"age","problem":"200 is above the maximum 150"}]}"#
                .to_vec()
                .into(),
        );
        let e = ConsoleError::from(status);
        assert_eq!(
            e.extra["fieldErrors"][0]["field"], "age",
            "the field errors are kept: {e:?}"
        );
    }
}
