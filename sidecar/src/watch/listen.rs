//! The 2026-07-28 `subscriptions/listen` stream of one connection
//! (basic/utilities/subscriptions): a server of that era sends
//! notifications only on such a stream, and only the kinds the client
//! opted in to. [`filter`] opts in to the list changes the server declares
//! (`toolsListChanged`, `resourcesListChanged`, `promptsListChanged`, each
//! for a list with `listChanged: true`); [`keep_listening`] keeps one
//! stream open while the connection is up, reopening it when the server
//! ends it or it fails.

use crate::upstream::era::declares_list_changed;
use crate::upstream::{Link, Upstream, UpstreamError};
use serde_json::{Map, Value};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// The longest one `subscriptions/listen` request is held open before it
/// is cancelled and reopened (a guard against a stream that went quiet
/// without closing).
pub const LISTEN_LIMIT: Duration = Duration::from_secs(3600);
/// First and largest delay before reopening a `subscriptions/listen`
/// stream that failed.
const LISTEN_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// The `SubscriptionFilter` (the request's `notifications` object) for a
/// server with `capabilities`: `<list>ListChanged: true` for each of the
/// tool, resource and prompt lists the server declares `listChanged` on,
/// nothing else. `None` when it declares none: no stream is opened.
pub fn filter(capabilities: &Value) -> Option<Value> {
    let mut filter = Map::new();
    for (capability, key) in [
        ("tools", "toolsListChanged"),
        ("resources", "resourcesListChanged"),
        ("prompts", "promptsListChanged"),
    ] {
        if declares_list_changed(capabilities, capability) {
            filter.insert(key.into(), Value::Bool(true));
        }
    }
    (!filter.is_empty()).then_some(Value::Object(filter))
}

/// Keeps a `subscriptions/listen` request with `filter` open while the
/// connection it started on is up: a stream the server ends, or that
/// fails, is reopened (after 1 s, doubling to 30 s while it keeps
/// failing), and each reopening is signalled on `reopened` (changes sent
/// while no stream was open are lost, so the watcher re-lists). A server
/// that answers -32601 (no subscriptions) is not asked again on this
/// connection.
pub async fn keep_listening(
    upstream: Upstream,
    filter: Value,
    mut link: watch::Receiver<Link>,
    reopened: mpsc::UnboundedSender<()>,
) {
    let server = upstream.name().to_owned();
    let generation = link.borrow().connections;
    let mut backoff = LISTEN_BACKOFF.0;
    let mut first = true;
    loop {
        {
            let l = link.borrow_and_update();
            if !l.connected || l.connections != generation {
                return;
            }
        }
        if !first {
            let _ = reopened.send(());
        }
        first = false;
        let opened = tokio::time::Instant::now();
        let listen = upstream.listen(filter.clone(), LISTEN_LIMIT);
        tokio::pin!(listen);
        let ended = loop {
            tokio::select! {
                r = &mut listen => break r,
                changed = link.changed() => {
                    // The connection went away: its requests end with it.
                    if changed.is_err() {
                        return;
                    }
                    let l = link.borrow_and_update();
                    if !l.connected || l.connections != generation {
                        return;
                    }
                }
            }
        };
        if opened.elapsed() > LISTEN_BACKOFF.1 {
            backoff = LISTEN_BACKOFF.0;
        }
        match ended {
            Ok(_) => {
                tracing::info!(%server, "the server ended its subscriptions/listen stream; reopening");
            }
            Err(UpstreamError::Rpc { code: -32601, .. }) => {
                tracing::info!(%server, "the server has no subscriptions/listen; list changes are heard only when it sends them on a response");
                return;
            }
            Err(UpstreamError::Timeout { .. }) => {
                tracing::debug!(%server, "subscriptions/listen held for its whole limit; reopening");
                continue;
            }
            Err(e) => {
                let l = link.borrow();
                if !l.connected || l.connections != generation {
                    // The connection went away with its stream: the next
                    // connection gets a listener of its own.
                    return;
                }
                drop(l);
                tracing::warn!(%server, error = %e, retry_in_ms = backoff.as_millis() as u64, "subscriptions/listen failed; reopening");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(LISTEN_BACKOFF.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_filter_opts_in_to_each_declared_list_change() {
        assert_eq!(
            filter(&json!({"tools": {"listChanged": true}})),
            Some(json!({"toolsListChanged": true}))
        );
        assert_eq!(
            filter(&json!({
                "tools": {},
                "resources": {"subscribe": true, "listChanged": true},
                "prompts": {"listChanged": true},
                "completions": {}
            })),
            Some(json!({"resourcesListChanged": true, "promptsListChanged": true}))
        );
        assert_eq!(
            filter(&json!({
                "tools": {"listChanged": true},
                "resources": {"listChanged": true},
                "prompts": {"listChanged": true}
            })),
            Some(
                json!({"toolsListChanged": true, "resourcesListChanged": true, "promptsListChanged": true})
            )
        );
        assert_eq!(
            filter(&json!({"tools": {"listChanged": false}, "prompts": {}})),
            None
        );
        assert_eq!(filter(&json!({"resources": {"listChanged": "yes"}})), None);
        assert_eq!(filter(&json!({})), None);
    }
}
