//! The console's live updates: `GET /ui/api/events`, server-sent events
//! from this replica's read model, which follows the store watch that
//! feeds engine events. Each `change` event names what changed
//! (`{"topic": "servers" | "tools" | "sessions" | "interactions" |
//! "background", "server"?, "session"?}`); the page reloads what it shows.
//! A launch error of `up`'s sidecars ([`crate::launches`]) comes as a
//! `servers` change. Changes are coalesced over [`COALESCE`] so a burst is
//! one event per topic. A comment every 15 s keeps proxies from closing the stream; it
//! ends when the replica stops (the browser reconnects, maybe elsewhere),
//! and with a `logout` event once its console session is gone (logged out,
//! expired, its token removed), checked before every batch and every
//! [`RECHECK`].

use super::Console;
use super::login::Admin;
use crate::state::Change;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};

/// How long changes are gathered before they are sent.
pub const COALESCE: Duration = Duration::from_millis(200);
/// How often an idle stream checks that its session still stands.
pub const RECHECK: Duration = Duration::from_secs(15);

/// What the page is told about a change; `None` for changes it does not
/// show (a cancellation request, a detached MCP call's outcome, an MCP
/// endpoint session).
fn topic(c: &Change) -> Option<Value> {
    Some(match c {
        Change::ToolsChanged { server, .. }
        | Change::ResourcesChanged { server, .. }
        | Change::PromptsChanged { server, .. }
        | Change::ToolSettingsChanged { server } => json!({"topic": "tools", "server": server}),
        // Sent after every batch of store changes: servers, sidecars,
        // sessions and OAuth states all come this way.
        Change::ServersChanged => json!({"topic": "servers"}),
        Change::SessionDeleted(id) => json!({"topic": "sessions", "session": id}),
        Change::Interaction(i) => json!({"topic": "interactions", "session": i.session}),
        Change::Background(_) => json!({"topic": "background"}),
        Change::Cancel { .. } | Change::McpOutcome { .. } | Change::McpSession(_) => return None,
    })
}

/// The next change: from the store watch (`changes`), or a launch error
/// of `up`'s sidecars set, changed or cleared (`launches`), which is a
/// [`Change::ServersChanged`]. Cancel-safe.
async fn next_change(
    changes: &mut broadcast::Receiver<Change>,
    launches: &mut watch::Receiver<u64>,
) -> Result<Change, RecvError> {
    tokio::select! {
        c = changes.recv() => c,
        // Gone only with the replica: then the store watch alone.
        Ok(()) = launches.changed() => Ok(Change::ServersChanged),
    }
}

/// `GET /ui/api/events`.
pub async fn stream(
    State(console): State<Arc<Console>>,
    admin: Admin,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut changes = console.cp.state.subscribe();
    // Why a sidecar of `up` is not running is not in the store: it comes
    // as a `servers` change too.
    let mut launches = console.cp.launches.subscribe();
    let shutdown = console.cp.shutdown.clone();
    let events = async_stream::stream! {
        yield Ok(Event::default().event("ready").data("{}"));
        let mut recheck = tokio::time::interval(RECHECK);
        recheck.tick().await;
        loop {
            let first = tokio::select! {
                c = next_change(&mut changes, &mut launches) => c,
                _ = recheck.tick() => {
                    if console.session_by_id(&admin.id).await.is_err() {
                        yield Ok(Event::default().event("logout").data("{}"));
                        break;
                    }
                    continue;
                }
                _ = shutdown.cancelled() => break,
            };
            let mut batch: Vec<Value> = Vec::new();
            let mut add = |c: Result<Change, RecvError>| -> bool {
                match c {
                    Ok(c) => {
                        if let Some(t) = topic(&c)
                            && !batch.contains(&t)
                        {
                            batch.push(t);
                        }
                        true
                    }
                    // Missed some: everything may have changed.
                    Err(RecvError::Lagged(_)) => {
                        for t in ["servers", "tools", "sessions", "interactions", "background"] {
                            let t = json!({"topic": t});
                            if !batch.contains(&t) {
                                batch.push(t);
                            }
                        }
                        true
                    }
                    Err(RecvError::Closed) => false,
                }
            };
            if !add(first) {
                break;
            }
            let until = tokio::time::Instant::now() + COALESCE;
            while let Ok(c) = tokio::time::timeout_at(until, next_change(&mut changes, &mut launches)).await {
                if !add(c) {
                    break;
                }
            }
            if console.session_by_id(&admin.id).await.is_err() {
                yield Ok(Event::default().event("logout").data("{}"));
                break;
            }
            for t in batch {
                yield Ok(Event::default().event("change").data(t.to_string()));
            }
        }
    };
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launches::Launches;

    /// What the page would be told next, if anything comes within 200 ms.
    async fn wait(
        changes: &mut broadcast::Receiver<Change>,
        watching: &mut watch::Receiver<u64>,
    ) -> Option<Option<Value>> {
        tokio::time::timeout(Duration::from_millis(200), next_change(changes, watching))
            .await
            .ok()
            .map(|c| topic(&c.expect("a change")))
    }

    #[tokio::test]
    async fn a_launch_error_set_or_cleared_is_a_servers_change() {
        let (tx, mut changes) = broadcast::channel(4);
        let launches = Launches::default();
        let mut watching = launches.subscribe();
        assert_eq!(wait(&mut changes, &mut watching).await, None, "nothing yet");
        launches.set("a", "its sidecar exited".into());
        let servers = Some(Some(json!({"topic": "servers"})));
        assert_eq!(wait(&mut changes, &mut watching).await, servers);
        assert_eq!(wait(&mut changes, &mut watching).await, None, "once");
        launches.clear("a");
        assert_eq!(wait(&mut changes, &mut watching).await, servers);
        // The store watch still comes through.
        tx.send(Change::ServersChanged).unwrap();
        assert_eq!(wait(&mut changes, &mut watching).await, servers);
        assert_eq!(wait(&mut changes, &mut watching).await, None);
    }
}
