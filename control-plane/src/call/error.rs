//! [`CallError`]: why a tool call did not produce a result. The one error
//! type of the call pipeline; the edges map it once: to a gRPC status in
//! `api::status`, to a JSON-RPC error in the MCP endpoint. Its kinds are the
//! canonical error space (the same names gRPC uses), so each edge's mapping
//! is a table, and the message is the one the caller reads.

use crate::registry::RegistryError;

/// What kind of failure (the canonical error space).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The tool, the session or the server is unknown (or hidden from the
    /// caller).
    NotFound,
    /// The request is malformed: a bad id, arguments that are not a JSON
    /// object, a timeout over the maximum.
    InvalidArgument,
    /// The tool is not offered to the session (policy, permission mode, a
    /// server not enabled), or a JSON-RPC error the server answered.
    FailedPrecondition,
    /// A call with the same `call_id` is already running in the session.
    AlreadyExists,
    /// A store write lost too many races.
    Aborted,
    /// No live sidecar, a sidecar that cannot be reached, or the store is
    /// unavailable.
    Unavailable,
    /// The call's deadline passed.
    DeadlineExceeded,
    /// The caller cancelled, or went away.
    Cancelled,
    /// Too many calls (a stream's limit).
    ResourceExhausted,
    /// The caller may not do this.
    PermissionDenied,
    /// A fault in Switchyard.
    Internal,
    /// The callee does not implement the operation.
    Unimplemented,
    /// No valid credentials.
    Unauthenticated,
    /// A value out of its range.
    OutOfRange,
    /// Data was lost.
    DataLoss,
    /// Anything else.
    Unknown,
}

/// Why a call failed: a kind, the message the caller reads (naming what was
/// wrong and where), and opaque details passed on as they came (a sidecar's
/// status details: the server's JSON-RPC error object).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CallError {
    /// The kind.
    pub kind: Kind,
    /// The message.
    pub message: String,
    /// Details carried from a sidecar's answer, unchanged (empty if none).
    pub details: Vec<u8>,
}

impl CallError {
    /// An error of `kind` with `message` and no details.
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        CallError {
            kind,
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// [`Kind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, message)
    }

    /// [`Kind::InvalidArgument`].
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(Kind::InvalidArgument, message)
    }

    /// [`Kind::FailedPrecondition`].
    pub fn failed_precondition(message: impl Into<String>) -> Self {
        Self::new(Kind::FailedPrecondition, message)
    }

    /// [`Kind::Unavailable`].
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(Kind::Unavailable, message)
    }

    /// [`Kind::DeadlineExceeded`].
    pub fn deadline_exceeded(message: impl Into<String>) -> Self {
        Self::new(Kind::DeadlineExceeded, message)
    }

    /// [`Kind::Cancelled`].
    pub fn cancelled(message: impl Into<String>) -> Self {
        Self::new(Kind::Cancelled, message)
    }

    /// "server unavailable", naming the server and why (UNAVAILABLE).
    pub fn server_unavailable(server: &str, why: impl std::fmt::Display) -> Self {
        Self::unavailable(format!("server unavailable: {server}: {why}"))
    }

    /// The `outcome` label of `switchyard_calls_total` and of the audit
    /// record for a call that ended with this error.
    pub fn outcome(&self) -> &'static str {
        match self.kind {
            Kind::Unavailable => "unavailable",
            Kind::DeadlineExceeded => "timeout",
            Kind::Cancelled => "cancelled",
            Kind::FailedPrecondition => "rpc_error",
            _ => "error",
        }
    }
}

impl From<RegistryError> for CallError {
    fn from(e: RegistryError) -> Self {
        let kind = match &e {
            RegistryError::UnknownServer(_) | RegistryError::UnknownSession(_) => Kind::NotFound,
            RegistryError::ServerExists(_) => Kind::AlreadyExists,
            RegistryError::Invalid(_) => Kind::InvalidArgument,
            RegistryError::Contention(_) => Kind::Aborted,
            RegistryError::Exhausted(_) => Kind::ResourceExhausted,
            RegistryError::Store(_) => {
                return CallError::unavailable(format!(
                    "store unavailable: {}",
                    switchyard_common::error_chain(&e)
                ));
            }
        };
        CallError::new(kind, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_follow_the_kind() {
        assert_eq!(
            CallError::server_unavailable("s", "x").outcome(),
            "unavailable"
        );
        assert_eq!(
            CallError::server_unavailable("orders", "no live sidecar").message,
            "server unavailable: orders: no live sidecar"
        );
        assert_eq!(CallError::deadline_exceeded("t").outcome(), "timeout");
        assert_eq!(CallError::cancelled("c").outcome(), "cancelled");
        assert_eq!(CallError::failed_precondition("p").outcome(), "rpc_error");
        assert_eq!(CallError::not_found("n").outcome(), "error");
        let e: CallError = RegistryError::UnknownSession("s1".into()).into();
        assert_eq!(e.kind, Kind::NotFound);
    }
}
