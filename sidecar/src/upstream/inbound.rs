//! Messages the server sends us unasked: notifications (fanned out to
//! subscribers) and server-to-client requests (2025-11-25 only; 2026-07-28
//! replaced them with multi round-trip results).
//!
//! The session answers `ping` itself. `elicitation/create` and `roots/list`
//! go to the interactions stage ([`Relay`]) when the session declared them;
//! every other request (sampling, which is never declared, included) is
//! refused with -32601. `notifications/elicitation/complete` is passed to
//! the stage too, and fanned out like every notification.

use crate::interactions::Relay;
use serde_json::{Value, json};
use std::sync::Arc;
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
}

/// The notifications that say a server-wide list changed.
const LIST_CHANGES: [&str; 3] = [
    "notifications/tools/list_changed",
    "notifications/prompts/list_changed",
    "notifications/resources/list_changed",
];

impl Inbound {
    /// A dispatcher for `server`, answering server requests through `relay`.
    pub fn new(server: &str, relay: Arc<Relay>) -> Self {
        Inbound {
            server: server.to_owned(),
            notifications: broadcast::channel(NOTIFICATION_BUFFER).0,
            relay,
            shared: None,
        }
    }

    /// A per-session connection's dispatcher: as [`Inbound::new`], and the
    /// list-changed notifications (`notifications/{tools,prompts,resources}/list_changed`)
    /// are also passed to `shared`, the shared upstream's. A 2025-11-25
    /// server sends them to the client whose request changed the list,
    /// which may be a session's connection.
    pub fn for_session(server: &str, relay: Arc<Relay>, shared: Arc<Inbound>) -> Self {
        Inbound {
            shared: Some(shared),
            ..Inbound::new(server, relay)
        }
    }

    /// Subscribes to the server's notifications (whole messages, as sent).
    pub fn subscribe(&self) -> broadcast::Receiver<Value> {
        self.notifications.subscribe()
    }

    /// A notification arrived (possibly before the handshake finished, as
    /// server-everything does with `notifications/tools/list_changed`).
    pub fn notification(&self, msg: Value) {
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
                let params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
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
