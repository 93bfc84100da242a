//! Change notifications to MCP clients: `subscriptions/listen` for
//! 2026-07-28 clients (basic/patterns/subscriptions) and the GET stream of
//! a 2025-11-25 session (basic/transports, "Listening for Messages from
//! the Server").
//!
//! Both are SSE streams fed by this replica's read model. When a change
//! may affect what the client sees (a server's tools, resources or
//! prompts, an administrator's hints or policies, servers added or
//! removed), the list it would get is compared with the one it saw; only
//! a real difference sends `notifications/tools/list_changed`,
//! `notifications/resources/list_changed` or
//! `notifications/prompts/list_changed`, once per change. A comment line
//! every [`KEEP_ALIVE`] keeps idle connections open.
//!
//! - 2026-07-28: the first message is `notifications/subscriptions/acknowledged`
//!   with the subset of the requested `notifications` this endpoint honours
//!   (`toolsListChanged`, `resourcesListChanged`, `promptsListChanged`;
//!   never `resourceSubscriptions`: resource updates are not relayed), and
//!   every message carries `_meta["io.modelcontextprotocol/subscriptionId"]`,
//!   the listen request's id. Only the requested kinds are sent. When the
//!   replica stops, the stream ends with the request's result
//!   (`resultType: complete`).
//! - 2025-11-25: every kind, without acknowledgement, on one GET stream of
//!   the session: the newest open one, across replicas (the others get
//!   keep-alives only); the stream ends with the replica, or with the
//!   session.

use super::ingress::Message;
use super::lists;
use super::respond::McpError;
use super::{Ctx, Endpoint};
use crate::auth::Caller;
use crate::model::mcp_session::{McpSessionRecord, Scope};
use crate::state::{Change, Snapshot};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;
use switchyard_mcp::era::Era;
use switchyard_mcp::{meta, methods};

/// How often an idle stream gets a comment line.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The `_meta` key that ties a notification to its listen request.
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// Which lists a stream follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wanted {
    /// `toolsListChanged`.
    pub tools: bool,
    /// `resourcesListChanged`.
    pub resources: bool,
    /// `promptsListChanged`.
    pub prompts: bool,
}

impl Wanted {
    /// Every list (a 2025-11-25 GET stream).
    pub const ALL: Wanted = Wanted {
        tools: true,
        resources: true,
        prompts: true,
    };

    /// What a listen request's `params.notifications` asks and this
    /// endpoint honours.
    fn of(msg: &Message) -> Wanted {
        let asked = msg.params.get("notifications");
        let flag = |k: &str| {
            asked
                .and_then(|n| n.get(k))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        Wanted {
            tools: flag("toolsListChanged"),
            resources: flag("resourcesListChanged"),
            prompts: flag("promptsListChanged"),
        }
    }

    /// As the acknowledgement's `notifications`.
    fn honoured(self) -> Value {
        let mut m = serde_json::Map::new();
        for (on, k) in [
            (self.tools, "toolsListChanged"),
            (self.resources, "resourcesListChanged"),
            (self.prompts, "promptsListChanged"),
        ] {
            if on {
                m.insert(k.into(), true.into());
            }
        }
        Value::Object(m)
    }
}

/// Who listens, and how they are told.
struct Listener {
    ep: Arc<Endpoint>,
    scope: Scope,
    caller: Option<Caller>,
    era: Era,
    /// The engine session whose view of the tools counts (empty: none).
    session_id: String,
    /// The listen request's id (2026-07-28).
    subscription: Option<Value>,
    wanted: Wanted,
    /// A 2025-11-25 GET stream: its session, and its id in the session's
    /// [`McpSessionRecord::streams`].
    stream: Option<(String, String)>,
}

/// What a client sees of each list, hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Seen {
    tools: u64,
    resources: u64,
    prompts: u64,
}

fn hash(v: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

impl Listener {
    fn in_scope(&self, snap: &Snapshot, server: &str) -> bool {
        match &self.scope {
            Scope::All => true,
            Scope::Server(s) => s == server,
            Scope::Session(id) => snap.sessions.get(id).is_some_and(|s| s.enables(server)),
        }
    }

    /// The lists as the client would get them now: the tools as
    /// `tools/list` answers them (hints and policies included), and each
    /// server's resources and prompts by their `updatedAt`, which changes
    /// only on a real change.
    async fn seen(&self) -> Seen {
        let snap = self.ep.cp.state.snapshot();
        let tools = if self.wanted.tools {
            let ctx = Ctx {
                ep: &self.ep,
                scope: &self.scope,
                caller: self.caller.as_ref(),
                era: self.era,
                session_id: self.session_id.clone(),
                run_id: String::new(),
                progress: None,
                log_level: None,
                tasks: false,
                client: String::new(),
            };
            let list = Message {
                kind: switchyard_mcp::jsonrpc::Kind::Request,
                id: None,
                method: methods::TOOLS_LIST.into(),
                params: serde_json::Map::new(),
                raw: Value::Null,
            };
            match lists::tools(&ctx, &list).await {
                Ok(v) => hash(v.to_string()),
                // The session went away: nothing to see.
                Err(e) => hash(e.message),
            }
        } else {
            0
        };
        let stamps = |f: fn(&crate::model::ResourceCatalogueRecord) -> i64| {
            let v: Vec<(&String, i64)> = snap
                .resource_catalogues
                .iter()
                .filter(|(server, _)| self.in_scope(&snap, server))
                .map(|(server, rec)| (server, f(rec)))
                .collect();
            hash(v)
        };
        Seen {
            tools,
            resources: if self.wanted.resources {
                stamps(|r| r.resources_updated_at)
            } else {
                0
            },
            prompts: if self.wanted.prompts {
                stamps(|r| r.prompts_updated_at)
            } else {
                0
            },
        }
    }

    /// One notification of `method`, as an SSE event.
    fn notification(&self, method: &str, params: Value) -> bytes::Bytes {
        let mut params = params;
        if let Some(id) = &self.subscription {
            params["_meta"][SUBSCRIPTION_ID] = id.clone();
        }
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        super::respond::sse_event(&msg)
    }

    /// Whether the notifications go on this stream: a listen stream's
    /// always do; of a 2025-11-25 session's GET streams, only the newest
    /// open one's (read from the store, so across replicas). `None`: the
    /// session ended. A store error sends them (a duplicate is better than
    /// a missed change).
    async fn is_current(&self) -> Option<bool> {
        let Some((session, id)) = &self.stream else {
            return Some(true);
        };
        match self.ep.cp.registry.get_mcp_session(session).await {
            Ok(Some(rec)) => Some(rec.is_current_stream(id)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(%session, error = %e, "could not read which GET stream of an MCP session is current");
                Some(true)
            }
        }
    }

    /// Whether a GET stream's MCP session still names it (a listen
    /// stream: always), in the read model.
    fn still_listed(&self) -> bool {
        let Some((session, id)) = &self.stream else {
            return true;
        };
        let snap = self.ep.cp.state.snapshot();
        snap.mcp_sessions
            .get(session)
            .is_some_and(|rec| rec.streams.contains(id))
    }

    /// Feeds `tx` until the client goes away, the session ends or the
    /// replica stops; then a GET stream leaves its session's record.
    async fn run(
        self,
        tx: tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::convert::Infallible>>,
    ) {
        // Counted from when it follows the changes until it has left the
        // session's record.
        let mut open = None;
        self.feed(tx, &mut open).await;
        if let Some((session, id)) = &self.stream {
            let left = self
                .ep
                .cp
                .registry
                .update_mcp_session(session, |r| r.close_stream(id))
                .await;
            if let Err(e) = left {
                tracing::warn!(%session, error = %e, "could not remove an ended GET stream from its MCP session");
            }
        }
        drop(open);
    }

    /// [`Self::run`]'s loop; `open` counts the stream once it follows
    /// the changes.
    async fn feed(
        &self,
        tx: tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::convert::Infallible>>,
        open: &mut Option<crate::metrics::OpenGuard>,
    ) {
        // Subscribed, then what the client sees now: no change is missed.
        let mut changes = self.ep.cp.state.subscribe();
        let mut seen = self.seen().await;
        // A session that ended (or dropped this stream) before the
        // subscription: no change will say so.
        if !self.still_listed() {
            return;
        }
        *open = Some(self.ep.cp.metrics.mcp_listen_stream());
        if self.subscription.is_some() {
            let ack = self.notification(
                methods::SUBSCRIPTIONS_ACKNOWLEDGED,
                json!({"notifications": self.wanted.honoured()}),
            );
            if tx.send(Ok(ack)).await.is_err() {
                return;
            }
        }
        let mut keep_alive = tokio::time::interval(KEEP_ALIVE);
        keep_alive.tick().await;
        let shutdown = self.ep.cp.shutdown.clone();
        loop {
            let relevant = tokio::select! {
                c = changes.recv() => match c {
                    Ok(Change::SessionDeleted(id)) if id == self.session_id => return,
                    // Its MCP session ended, or no longer names this GET
                    // stream (more than `MAX_STREAMS` newer ones): it ends.
                    Ok(Change::McpSession(id)) if self.stream.as_ref().is_some_and(|(s, _)| *s == id) => {
                        if !self.still_listed() {
                            return;
                        }
                        false
                    }
                    Ok(Change::ToolsChanged { .. }
                        | Change::ResourcesChanged { .. }
                        | Change::PromptsChanged { .. }
                        | Change::ToolSettingsChanged { .. }
                        | Change::ServersChanged) => true,
                    Ok(_) => false,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => true,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
                _ = keep_alive.tick() => {
                    if tx.send(Ok(bytes::Bytes::from_static(b": keep-alive\n\n"))).await.is_err() {
                        return;
                    }
                    false
                }
                _ = tx.closed() => return,
                _ = shutdown.cancelled() => {
                    if let Some(id) = &self.subscription {
                        let end = json!({"jsonrpc": "2.0", "id": id, "result": {
                            "resultType": meta::result_type::COMPLETE,
                            "_meta": {SUBSCRIPTION_ID: id}}});
                        let _ = tx.send(Ok(super::respond::sse_event(&end))).await;
                    }
                    return;
                }
            };
            if !relevant {
                continue;
            }
            let now = self.seen().await;
            let changes = [
                (now.tools != seen.tools, methods::TOOLS_LIST_CHANGED),
                (
                    now.resources != seen.resources,
                    methods::RESOURCES_LIST_CHANGED,
                ),
                (now.prompts != seen.prompts, methods::PROMPTS_LIST_CHANGED),
            ];
            seen = now;
            if !changes.iter().any(|(changed, _)| *changed) {
                continue;
            }
            match self.is_current().await {
                None => return,
                Some(false) => continue,
                Some(true) => {}
            }
            for (changed, method) in changes {
                if changed
                    && tx
                        .send(Ok(self.notification(method, json!({}))))
                        .await
                        .is_err()
                {
                    return;
                }
            }
        }
    }
}

/// The SSE response fed by `listener`.
fn stream(listener: Listener) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(listener.run(tx));
    super::respond::sse_response(rx)
}

/// `subscriptions/listen` of a 2026-07-28 client (validated already).
/// Errors: 406 when the client does not take `text/event-stream`.
pub fn modern(
    ep: &Arc<Endpoint>,
    scope: &Scope,
    caller: Option<&Caller>,
    sse: bool,
    msg: &Message,
) -> Result<Response, McpError> {
    if !sse {
        return Err(McpError::new(
            StatusCode::NOT_ACCEPTABLE,
            super::respond::INVALID_REQUEST,
            "subscriptions/listen answers with a stream: Accept must include text/event-stream",
        )
        .with_id(msg.id.as_ref()));
    }
    let session_id = match scope {
        Scope::Session(id) => id.clone(),
        _ => String::new(),
    };
    Ok(stream(Listener {
        ep: ep.clone(),
        scope: scope.clone(),
        caller: caller.cloned(),
        era: Era::Modern,
        session_id,
        subscription: Some(msg.id.clone().unwrap_or(Value::Null)),
        wanted: Wanted::of(msg),
        stream: None,
    }))
}

/// A GET stream of 2025-11-25 session `rec`. It becomes the one that
/// gets the session's notifications (the newest open;
/// [`McpSessionRecord::streams`]). Errors: 406 when the client does not
/// take `text/event-stream`; 404 when the session ended; the store's.
pub async fn legacy(
    ep: &Arc<Endpoint>,
    scope: &Scope,
    caller: Option<&Caller>,
    h: &HeaderMap,
    rec: &McpSessionRecord,
) -> Result<Response, McpError> {
    let accept = h
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join(",");
    if !super::ingress::accepts(&accept, "text/event-stream") {
        return Err(McpError::new(
            StatusCode::NOT_ACCEPTABLE,
            super::respond::INVALID_REQUEST,
            format!(
                "GET opens the session's stream: Accept must include text/event-stream, not {accept:?}"
            ),
        ));
    }
    let id = switchyard_common::ids::new_id();
    match ep
        .cp
        .registry
        .update_mcp_session(&rec.id, |r| r.open_stream(&id))
        .await
    {
        // The read model names it before the stream follows the changes
        // ([`Listener::still_listed`]).
        Ok(Some((_, rev))) => {
            ep.cp.state.wait_for(rev, Duration::from_secs(2)).await;
        }
        Ok(None) => {
            return Err(McpError::new(
                StatusCode::NOT_FOUND,
                super::respond::SESSION_NOT_FOUND,
                "session not found: it ended; send initialize to open a new one",
            ));
        }
        Err(e) => return Err(super::legacy::store_error(e, &Value::Null)),
    }
    Ok(stream(Listener {
        ep: ep.clone(),
        scope: scope.clone(),
        caller: caller.cloned(),
        era: Era::Legacy,
        session_id: rec.engine_session.clone(),
        subscription: None,
        wanted: Wanted::ALL,
        stream: Some((rec.id.clone(), id)),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_list_kinds_asked_are_honoured() {
        let msg = |notifications: Value| Message {
            kind: switchyard_mcp::jsonrpc::Kind::Request,
            id: Some(json!(7)),
            method: methods::SUBSCRIPTIONS_LISTEN.into(),
            params: json!({"notifications": notifications})
                .as_object()
                .unwrap()
                .clone(),
            raw: Value::Null,
        };
        let w = Wanted::of(&msg(json!({"toolsListChanged": true,
            "resourceSubscriptions": ["test://watched-resource"], "promptsListChanged": false})));
        assert_eq!(
            w,
            Wanted {
                tools: true,
                ..Wanted::default()
            }
        );
        assert_eq!(w.honoured(), json!({"toolsListChanged": true}));
        assert_eq!(Wanted::of(&msg(json!(null))).honoured(), json!({}));
    }
}
