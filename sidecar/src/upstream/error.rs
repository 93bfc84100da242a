//! Errors of the upstream session. Every error names the server it came
//! from, so a message is useful on its own in a log line or in an engine's
//! tool result.

use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
pub use switchyard_common::error_chain;
use switchyard_common::server_spec::Secrets;

/// An upstream failure. Cheap to clone (shared causes are behind `Arc`), so
/// one failure can be handed to every caller that waited on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// The stdio server process could not be started.
    #[error("server {server}: failed to start `{command}`: {source}")]
    Spawn {
        /// Server name.
        server: String,
        /// The command line that failed.
        command: String,
        /// The OS error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The stdio server process exited (or was killed) while the call was
    /// pending. `status` is the exit status as the OS reports it, e.g.
    /// `exit status: 3` or `signal: 9 (SIGKILL)`.
    #[error("server {server} exited ({status}) while the request was pending{}", stderr_hint(.stderr_tail))]
    Exited {
        /// Server name.
        server: String,
        /// Exit status.
        status: String,
        /// The last lines the server wrote to stderr.
        stderr_tail: String,
    },
    /// No response within the per-request timeout.
    #[error("server {server}: no response to {method} within {}s", .after.as_secs_f64())]
    Timeout {
        /// Server name.
        server: String,
        /// JSON-RPC method.
        method: String,
        /// The timeout that elapsed.
        after: Duration,
    },
    /// The server answered with a JSON-RPC error (JSON-RPC 2.0 §5.1). The
    /// error object is kept whole, `data` included.
    #[error("server {server}: {method} failed with JSON-RPC error {code}: {message}")]
    Rpc {
        /// Server name.
        server: String,
        /// JSON-RPC method.
        method: String,
        /// `error.code`.
        code: i64,
        /// `error.message`.
        message: String,
        /// `error.data`, as sent.
        data: Option<Value>,
    },
    /// HTTP 401 or 403 from a Streamable HTTP server (MCP basic/authorization).
    /// For an `auth = "oauth"` server: a 401 to the request sent again
    /// with the control plane's new token, a 401 when no new token came
    /// in time, or a 403 other than `insufficient_scope` (see
    /// `super::auth`).
    #[error(
        "server {server}: not authorized (HTTP {status}): {}{}",
        refusal_hint(.server, *.sent_authorization, *.access_token),
        challenge_hint(.www_authenticate)
    )]
    Unauthorized {
        /// Server name.
        server: String,
        /// 401 or 403.
        status: u16,
        /// The `WWW-Authenticate` challenge, if any.
        www_authenticate: Option<String>,
        /// Whether the request carried an `Authorization` header (a
        /// configured one, or the access token).
        sent_authorization: bool,
        /// `auth = "oauth"`: the generation of the access token refused.
        access_token: Option<u64>,
    },
    /// `auth = "oauth"`: there is no access token to send (none came from
    /// the control plane yet, or the server needs an admin to authorize
    /// it, again): the server was not contacted. `reason` is the control
    /// plane's, e.g. "server github needs authorization by an admin:
    /// switchyard servers authorize github".
    #[error("{reason}")]
    NotAuthorized {
        /// Server name.
        server: String,
        /// Why, naming the server and what to do.
        reason: String,
    },
    /// `auth = "oauth"`: the server answered 403 `insufficient_scope`
    /// (MCP basic/authorization, "Scope Challenge Handling"): the token
    /// lacks a scope the request needs. Only an admin can widen the grant.
    #[error(
        "server {server} needs more scopes{}: an admin must re-authorize it: switchyard servers authorize {server}",
        .scope.as_ref().map(|s| format!(" ({s})")).unwrap_or_default()
    )]
    InsufficientScope {
        /// Server name.
        server: String,
        /// The challenge's `scope`: the scopes the request needs, if said.
        scope: Option<String>,
        /// The `WWW-Authenticate` challenge, as sent.
        www_authenticate: String,
    },
    /// Any other unexpected HTTP status.
    #[error("server {server}: HTTP {status} to {method}: {body}")]
    HttpStatus {
        /// Server name.
        server: String,
        /// JSON-RPC method of the request.
        method: String,
        /// HTTP status code.
        status: u16,
        /// The beginning of the response body.
        body: String,
    },
    /// A network or I/O failure talking to the server.
    #[error("server {server}: {context}: {}", error_chain(.source.as_ref()))]
    Io {
        /// Server name.
        server: String,
        /// What was being done.
        context: String,
        /// The cause.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The server answered a request without a JSON-RPC response to it
    /// (empty body, or a stream that ended first).
    #[error("server {server}: {method} got no JSON-RPC response: {detail}")]
    NoResponse {
        /// Server name.
        server: String,
        /// JSON-RPC method.
        method: String,
        /// What came instead.
        detail: String,
    },
    /// The response was larger than `max_message_bytes`.
    #[error(
        "server {server}: response to {method} is {size} bytes or more, over the {limit}-byte limit"
    )]
    MessageTooLarge {
        /// Server name.
        server: String,
        /// JSON-RPC method (or `unknown`).
        method: String,
        /// Size seen (at least).
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The server broke the protocol (unsupported version, malformed
    /// message).
    #[error("server {server}: protocol error: {detail}")]
    Protocol {
        /// Server name.
        server: String,
        /// What was wrong.
        detail: String,
    },
    /// The handshake (`server/discover`, `initialize`) got an answer that
    /// leaves no era both sides speak: an error, an HTTP status, a result
    /// we cannot use, or the era pinned to one the server does not speak.
    /// Like the process or the network failing, the server cannot be used
    /// now: requests that waited for it are refused as unavailable.
    #[error("server {server}: cannot connect: {detail}")]
    Handshake {
        /// Server name.
        server: String,
        /// What the server answered, and what it answered before when
        /// `initialize` was the fallback (`server/discover answered HTTP
        /// 404`, with a hint to check the URL's path).
        detail: String,
    },
    /// HTTP 404 to a request that carried an `MCP-Session-Id`: the server
    /// ended the session (2025-11-25 transports, "Session Management"). The
    /// request was not processed; the session re-negotiates and retries once.
    #[error("server {server}: session expired (HTTP 404 to {method})")]
    SessionExpired {
        /// Server name.
        server: String,
        /// JSON-RPC method of the request that got the 404.
        method: String,
    },
    /// The connection is closed (the session is shutting down).
    #[error("server {server}: connection closed")]
    Closed {
        /// Server name.
        server: String,
    },
}

fn stderr_hint(tail: &str) -> String {
    match tail.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(last) => format!("; last stderr line: {}", last.trim()),
        None => String::new(),
    }
}

fn refusal_hint(server: &str, sent_authorization: bool, access_token: Option<u64>) -> String {
    match (access_token, sent_authorization) {
        (Some(generation), _) => format!(
            "it refused the control plane's access token (generation {generation}) and no new token it accepts came in time; if this lasts, an admin must re-authorize it: switchyard servers authorize {server}"
        ),
        (None, true) => "it refused the configured Authorization header (check the server's headers or header_files and what the file holds)".into(),
        (None, false) => "no Authorization header is configured for it (auth = \"none\")".into(),
    }
}

fn challenge_hint(challenge: &Option<String>) -> String {
    match challenge {
        Some(c) => format!("; WWW-Authenticate: {c}"),
        None => String::new(),
    }
}

impl From<crate::interactions::ProtocolError> for UpstreamError {
    /// The interactions stage's protocol error (a question this client
    /// cannot answer) is this session's: same server, same text.
    fn from(e: crate::interactions::ProtocolError) -> Self {
        UpstreamError::Protocol {
            server: e.server,
            detail: e.detail,
        }
    }
}

impl UpstreamError {
    /// Wraps an I/O-ish error with context.
    pub fn io(
        server: &str,
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        UpstreamError::Io {
            server: server.to_owned(),
            context: context.into(),
            source: Arc::new(source),
        }
    }

    /// A protocol error.
    pub fn protocol(server: &str, detail: impl Into<String>) -> Self {
        UpstreamError::Protocol {
            server: server.to_owned(),
            detail: detail.into(),
        }
    }

    /// This error with the server's `secrets` (those long enough to be
    /// scrubbed from answers: [`Secrets::scrub_answer`]) replaced by
    /// `[redacted]` in every part that holds what the server sent: a
    /// JSON-RPC error's message and `data`, an HTTP body, a challenge, the
    /// stderr tail, a protocol detail, a network error's text. The server's
    /// name and the method are ours and stay.
    pub fn scrubbed(self, secrets: &Secrets) -> Self {
        if secrets.is_empty_for_answers() {
            return self;
        }
        let text = |t: String| secrets.scrub_answer(&t);
        match self {
            UpstreamError::Rpc {
                server,
                method,
                code,
                message,
                mut data,
            } => {
                if let Some(data) = &mut data {
                    secrets.scrub_json(data);
                }
                UpstreamError::Rpc {
                    server,
                    method,
                    code,
                    message: text(message),
                    data,
                }
            }
            UpstreamError::HttpStatus {
                server,
                method,
                status,
                body,
            } => UpstreamError::HttpStatus {
                server,
                method,
                status,
                body: text(body),
            },
            UpstreamError::Exited {
                server,
                status,
                stderr_tail,
            } => UpstreamError::Exited {
                server,
                status,
                stderr_tail: text(stderr_tail),
            },
            UpstreamError::Unauthorized {
                server,
                status,
                www_authenticate,
                sent_authorization,
                access_token,
            } => UpstreamError::Unauthorized {
                server,
                status,
                www_authenticate: www_authenticate.map(text),
                sent_authorization,
                access_token,
            },
            UpstreamError::InsufficientScope {
                server,
                scope,
                www_authenticate,
            } => UpstreamError::InsufficientScope {
                server,
                scope: scope.map(text),
                www_authenticate: text(www_authenticate),
            },
            UpstreamError::NoResponse {
                server,
                method,
                detail,
            } => UpstreamError::NoResponse {
                server,
                method,
                detail: text(detail),
            },
            UpstreamError::Protocol { server, detail } => UpstreamError::Protocol {
                server,
                detail: text(detail),
            },
            UpstreamError::Handshake { server, detail } => UpstreamError::Handshake {
                server,
                detail: text(detail),
            },
            UpstreamError::Io {
                server,
                context,
                source,
            } => {
                let said = error_chain(source.as_ref());
                let scrubbed = secrets.scrub_answer(&said);
                let source: Arc<dyn std::error::Error + Send + Sync> = match scrubbed == said {
                    true => source,
                    false => Arc::new(std::io::Error::other(scrubbed)),
                };
                UpstreamError::Io {
                    server,
                    context,
                    source,
                }
            }
            other @ (UpstreamError::Spawn { .. }
            | UpstreamError::Timeout { .. }
            | UpstreamError::NotAuthorized { .. }
            | UpstreamError::MessageTooLarge { .. }
            | UpstreamError::SessionExpired { .. }
            | UpstreamError::Closed { .. }) => other,
        }
    }

    /// Whether this is a connection-level failure (the server went away or
    /// the network failed), as opposed to an answer from the server. Stage A
    /// retries read-only/idempotent tools once on these.
    pub fn is_connection_failure(&self) -> bool {
        matches!(
            self,
            UpstreamError::Exited { .. }
                | UpstreamError::Io { .. }
                | UpstreamError::Spawn { .. }
                | UpstreamError::Closed { .. }
        )
    }

    /// The JSON-RPC error object of an [`UpstreamError::Rpc`] (`code`,
    /// `message`, and `data` when the server sent one), as the server sent
    /// it; `None` for the other failures.
    pub fn error_object(&self) -> Option<Value> {
        let UpstreamError::Rpc {
            code,
            message,
            data,
            ..
        } = self
        else {
            return None;
        };
        let mut object = serde_json::json!({"code": code, "message": message});
        if let Some(data) = data {
            object["data"] = data.clone();
        }
        Some(object)
    }

    /// A short label for metrics (`outcome` label values).
    pub fn outcome(&self) -> &'static str {
        match self {
            UpstreamError::Spawn { .. } | UpstreamError::Exited { .. } => "server_exited",
            UpstreamError::Timeout { .. } => "timeout",
            UpstreamError::Rpc { .. } => "rpc_error",
            UpstreamError::Unauthorized { .. }
            | UpstreamError::NotAuthorized { .. }
            | UpstreamError::InsufficientScope { .. } => "unauthorized",
            UpstreamError::HttpStatus { .. } | UpstreamError::Io { .. } => "transport_error",
            UpstreamError::NoResponse { .. } => "no_response",
            UpstreamError::MessageTooLarge { .. } => "too_large",
            UpstreamError::Protocol { .. } | UpstreamError::Handshake { .. } => "protocol_error",
            UpstreamError::SessionExpired { .. } => "session_expired",
            UpstreamError::Closed { .. } => "closed",
        }
    }
}
