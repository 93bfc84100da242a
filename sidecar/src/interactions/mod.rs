//! Stage C (design §4 C): interactions with the user on behalf of the
//! server: elicitation (form and URL mode) and roots, in both protocol
//! eras, and the client side of multi round-trip requests. The upstream
//! session calls into this stage (it never calls back into the session).
//!
//! - **Capabilities.** A session with an [`InteractionHandler`] declares
//!   `elicitation: {form: {}, url: {}}` and `roots: {}` ([`capabilities`]),
//!   in `initialize` and in the modern `clientCapabilities`. Sampling is
//!   never declared. A session without a handler (the probe) declares none.
//! - **Call context.** Each call carries a [`CallContext`] (session, run,
//!   tool, the session's roots). The [`Relay`] of a connection keeps the
//!   contexts of the calls in flight on it.
//! - **Attribution** ([`relay`]). 2025-11-25 server requests
//!   (`elicitation/create`, `roots/list`) are attributed
//!   ([`Relay::server_request`]): a task-related request
//!   (`_meta["io.modelcontextprotocol/related-task"]`) belongs to the task's
//!   initiator ([`TaskInitiators`], filled in by the tasks stage); otherwise,
//!   if every call in flight on the connection belongs to one session, to
//!   that session (several calls: naming every tool that could have asked,
//!   as which one did cannot be known); a connection bound to a session (Streamable HTTP: one
//!   connection per server and session) belongs to it. Anything else is
//!   declined (`{"action": "decline"}`, or an error for `roots/list`) and
//!   audited.
//! - **Elicitation** ([`elicitation`]): asking the user, bounded by
//!   [`Interactions::timeout`] (when it passes the server gets
//!   `{"action": "cancel"}`). A URL elicitation required error (-32042):
//!   its `data.elicitations` become URL interactions of the call's session;
//!   when all are accepted the call is retried once
//!   ([`Relay::url_elicitations_required`]).
//!   `notifications/elicitation/complete` is passed on for the elicitations
//!   this connection relayed ([`Relay::notification`]). A call without a
//!   session is never asked about: its elicitations are declined and
//!   audited.
//! - **Roots** ([`roots`]): asked of the call's client when it answers
//!   for itself and declared `roots` (an interaction of kind `roots`),
//!   else answered from the call's own session.
//! - **2026-07-28 multi round-trip requests** ([`mrtr`]): the client loop.
//!   An `input_required` result's `inputRequests` are answered from the
//!   call's own context ([`mrtr::answer_inputs`]; sampling is a protocol
//!   error) and the request is sent again with `inputResponses` and the
//!   `requestState`, while the server asks ([`mrtr::rounds`]).
//! - **The control plane** ([`control_plane`]): the sidecar's
//!   [`InteractionHandler`] asks the session's user through
//!   `SidecarRegistry.Interact`.
//!
//! Errors: a question this client cannot answer is a [`ProtocolError`],
//! which the upstream session reports as its own protocol error.

pub mod control_plane;
pub mod elicitation;
pub mod mrtr;
pub mod relay;
pub mod roots;

#[cfg(test)]
mod tests;

pub use control_plane::ControlPlaneInteractions;
pub use elicitation::{Interaction, InteractionKind, new_interaction_id};
pub use relay::{InFlight, Relay};

use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use switchyard_common::audit::Audit;

/// Default bound on one interaction.
pub const DEFAULT_INTERACTION_TIMEOUT: Duration = Duration::from_secs(600);

/// The client capabilities a session with a handler declares.
pub fn capabilities() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}, "roots": {}})
}

/// What a call belongs to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallContext {
    /// The engine session; empty when the call belongs to none.
    pub session_id: String,
    /// The run within the session, if any.
    pub run_id: String,
    /// The tool name; for a stage E request the request (`prompts/get
    /// NAME`, `resources/read URI`).
    pub tool: String,
    /// The session's roots (MCP `Root` objects), answered to `roots/list`.
    pub roots: Vec<Value>,
    /// Where the server's progress notifications for the call go (the
    /// control plane asked for them; `crate::upstream::progress`), and its
    /// log messages when `log_level` is set; `None`: nowhere.
    pub progress: Option<ProgressSink>,
    /// The capabilities of the client the call is made for, when it
    /// answers for itself (`SidecarCallRequest.client_capabilities_json`):
    /// with `roots`, the server's `roots/list` is asked of it
    /// ([`roots`]); a 2026-07-28 server is told ours narrowed to them.
    /// `None`: ours, and the session's roots answer.
    pub client: Option<Value>,
    /// The server's log messages for the call at this level or more
    /// severe go to `progress` (`crate::upstream::logging`: only those
    /// sent on the call's own response stream); `None`: none.
    pub log_level: Option<switchyard_mcp::logging::Level>,
}

impl CallContext {
    /// Whether the server's `roots/list` goes to the call's client.
    pub fn asks_roots(&self) -> bool {
        self.client
            .as_ref()
            .is_some_and(|c| c.get("roots").is_some())
    }
}

/// Where a call's progress notifications go: each is a whole JSON-RPC
/// notification, JSON text. Cheap to clone; equal when it is the same
/// sink.
#[derive(Clone)]
pub struct ProgressSink(std::sync::Arc<dyn Fn(String) + Send + Sync>);

impl ProgressSink {
    /// A sink calling `send` with each notification; `send` must not
    /// block.
    pub fn new(send: impl Fn(String) + Send + Sync + 'static) -> Self {
        ProgressSink(std::sync::Arc::new(send))
    }

    /// Hands on one notification.
    pub fn send(&self, json: String) {
        (self.0)(json)
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressSink")
    }
}

impl PartialEq for ProgressSink {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Asks users. The sidecar's implementation asks the control plane
/// (`SidecarRegistry.Interact`); tests answer in-process.
pub trait InteractionHandler: Send + Sync + std::fmt::Debug {
    /// Asks and returns the MCP `ElicitResult` (`{"action", "content"?}`).
    /// The relay bounds the wait; the handler need not.
    fn interact(&self, interaction: Interaction) -> BoxFuture<'static, Value>;
    /// The server reported URL elicitation `elicitation_id` (asked in
    /// `context`) finished.
    fn complete(
        &self,
        server: &str,
        context: &CallContext,
        elicitation_id: &str,
    ) -> BoxFuture<'static, ()>;
}

/// Who started a task: the hook of the tasks stage (background calls),
/// which attributes task-related server requests to the task's initiator.
pub trait TaskInitiators: Send + Sync + std::fmt::Debug {
    /// The context of the call that created `task_id`, if known.
    fn initiator(&self, task_id: &str) -> Option<CallContext>;
}

/// How a session handles interactions.
#[derive(Debug, Clone)]
pub struct Interactions {
    /// Who asks the user.
    pub handler: Arc<dyn InteractionHandler>,
    /// Where declined attributions are recorded.
    pub audit: Audit,
    /// Bound on one interaction; then the answer is `cancel`.
    pub timeout: Duration,
    /// Initiators of tasks; `None` until the tasks stage tracks them.
    pub tasks: Option<Arc<dyn TaskInitiators>>,
}

impl Interactions {
    /// `handler` with the default timeout, auditing to `audit`.
    pub fn new(handler: Arc<dyn InteractionHandler>, audit: Audit) -> Self {
        Interactions {
            handler,
            audit,
            timeout: DEFAULT_INTERACTION_TIMEOUT,
            tasks: None,
        }
    }
}

/// The server asked for input this client cannot give, or asked for it
/// wrongly: an `inputRequests` entry that is malformed, asks for sampling
/// or for something the session did not declare; input still asked for
/// after the round limit. The upstream session reports it as its protocol
/// error (`UpstreamError::Protocol`, same server and text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server {server}: protocol error: {detail}")]
pub struct ProtocolError {
    /// The server asking.
    pub server: String,
    /// What was wrong.
    pub detail: String,
}

impl ProtocolError {
    /// `detail` about `server`.
    pub fn new(server: &str, detail: impl Into<String>) -> Self {
        ProtocolError {
            server: server.to_owned(),
            detail: detail.into(),
        }
    }
}
