//! Messages the server sends us unasked: notifications (fanned out to
//! subscribers) and server-to-client requests (2025-11-25 only; 2026-07-28
//! replaced them with multi round-trip results).
//!
//! The session answers `ping` itself. `elicitation/create` and `roots/list`
//! go to the interactions stage ([`Relay`]) when the session declared them;
//! every other request (sampling, which is never declared, included) is
//! refused with -32601. `notifications/elicitation/complete` is passed to
//! the stage too, and fanned out like every notification.
//!
//! Both are first scrubbed of the secret values the server was given
//! ([`Secrets::scrub_json`]): a server that puts its API key in a log
//! message or an elicitation does not hand it to engines.

use crate::interactions::Relay;
use serde_json::{Value, json};
use std::sync::Arc;
use switchyard_common::server_spec::Secrets;
use switchyard_mcp::jsonrpc;
use tokio::sync::broadcast;

/// Capacity of the notification fan-out; a subscriber that falls this far
/// behind misses the oldest notifications (and is told so by `broadcast`).
const NOTIFICATION_BUFFER: usize = 256;

/// Dispatches unsolicited messages from one server.
#[derive(Debug)]
pub struct Inbound {
    server: String,
    notifications: broadcast::Sender<Value>,
    relay: Arc<Relay>,
    /// A per-session connection's: the shared upstream's dispatcher, which
    /// also gets this connection's list changes (the server's lists are the
    /// same for every session, and only the shared upstream is watched).
    shared: Option<Arc<Inbound>>,
    /// Scrubbed from every message before it goes anywhere.
    secrets: Secrets,
}

/// The notifications that say a server-wide list changed.
const LIST_CHANGES: [&str; 3] = [
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
];

impl Inbound {
    /// A dispatcher for `server`, answering server requests through
    /// `relay`, scrubbing `secrets` (the server's) from every message.
    pub fn new(server: &str, relay: Arc<Relay>, secrets: Secrets) -> Self {
        Inbound {
            server: server.to_owned(),
            notifications: broadcast::channel(NOTIFICATION_BUFFER).0,
            relay,
            shared: None,
            secrets,
        }
    }

    /// A per-session connection's dispatcher: as [`Inbound::new`], and the
    /// list-changed notifications (`notifications/{tools,prompts,resources}/list_changed`)
    /// are also passed to `shared`, the shared upstream's. A 2025-11-25
    /// server sends them to the client whose request changed the list,
    /// which may be a session's connection.
    pub fn for_session(
        server: &str,
        relay: Arc<Relay>,
        shared: Arc<Inbound>,
        secrets: Secrets,
    ) -> Self {
        Inbound {
            shared: Some(shared),
            ..Inbound::new(server, relay, secrets)
        }
    }

    /// The server's secret values, scrubbed from what it sends.
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// Subscribes to the server's notifications (whole messages, as sent,
    /// but scrubbed).
    pub fn subscribe(&self) -> broadcast::Receiver<Value> {
        self.notifications.subscribe()
    }

    /// A notification arrived (possibly before the handshake finished, as
    /// server-everything does with `notifications/tools/list_changed`).
    pub fn notification(&self, msg: Value) {
        self.notification_on_stream(msg, None);
    }

    /// [`Inbound::notification`] that came on a request's own stream:
    /// also handed, scrubbed, to `on_stream` first (a
    /// `super::http::OnStream`).
    pub fn notification_on_stream(
        &self,
        mut msg: Value,
        on_stream: Option<&(dyn Fn(&Value) + Send + Sync)>,
    ) {
        if let Some(params) = msg.get_mut("params") {
            self.secrets.scrub_json(params);
        }
        if let Some(on_stream) = on_stream {
            on_stream(&msg);
        }
        tracing::debug!(server = %self.server, method = %msg["method"], "notification from server");
        self.relay.notification(&msg);
        if let Some(shared) = &self.shared
            && LIST_CHANGES.contains(&msg["method"].as_str().unwrap_or(""))
        {
            shared.notification(msg.clone());
        }
        // No subscriber is fine: nobody is interested yet.
        let _ = self.notifications.send(msg);
    }

    /// A request from the server; returns the response to send back, which
    /// echoes the request's id exactly.
    pub async fn request(&self, msg: Value) -> Value {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
        match method {
            // basic/utilities/ping: "The receiver MUST respond promptly with an empty response."
            "ping" => jsonrpc::result_response(&id, json!({})),
            other => {
                let mut params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
                self.secrets.scrub_json(&mut params);
                match self.relay.server_request(other, params).await {
                    Some(Ok(result)) => return jsonrpc::result_response(&id, result),
                    Some(Err((code, message))) => {
                        return jsonrpc::error_response(&id, code, &message);
                    }
                    None => {}
                }
                tracing::info!(server = %self.server, method = %other, "refusing server request: capability not declared");
                jsonrpc::error_response(
                    &id,
                    jsonrpc::METHOD_NOT_FOUND,
                    &format!("Method not found: {other}"),
                )
            }
        }
    }
}
