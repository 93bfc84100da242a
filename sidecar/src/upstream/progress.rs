//! Progress of one request (basic/utilities/progress), relayed to whoever
//! made it. The caller's `_meta.progressToken` is replaced by a token of
//! our own ([`retoken`]: callers share the connection, and two of them may
//! pick the same token), the server's `notifications/progress` carrying
//! ours are picked from the connection's notifications while the request
//! runs, and each is handed on with the caller's token restored
//! ([`relayed`]). Nothing else of the notification changes.

use super::Upstream;
use crate::interactions::ProgressSink as Sink;
use serde_json::Value;
use std::future::Future;
use switchyard_mcp::methods;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

/// Sets `params._meta.progressToken` to a token of our own for this
/// request (`sy-progress-<128 random bits>`, drawn anew for each: neither
/// a server that sees one nor anybody else can guess another caller's and
/// send progress with it) and returns it with the caller's; `None` (params
/// unchanged) when the caller sent no token.
pub fn retoken(params: &mut Value) -> Option<(Value, Value)> {
    let meta = params.get_mut("_meta")?.as_object_mut()?;
    let theirs = meta.get("progressToken")?.clone();
    let ours = Value::String(format!("sy-progress-{}", switchyard_common::ids::new_id()));
    meta.insert("progressToken".into(), ours.clone());
    Some((ours, theirs))
}

/// Whether `params` carry a `_meta.progressToken`.
pub fn has_token(params: &Value) -> bool {
    params
        .get("_meta")
        .and_then(|m| m.get("progressToken"))
        .is_some()
}

/// Removes `params._meta.progressToken`: a request whose progress nobody
/// relays must not name a token of the caller's choosing on the shared
/// connection (it could be another caller's token of ours, and the
/// server's progress would reach that caller).
pub fn strip_token(params: &mut Value) {
    if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove("progressToken");
    }
}

/// Runs `work` (the request sent with token `ours`) and, meanwhile, hands
/// `sink` every `notifications/progress` of `upstream` carrying `ours`,
/// with `theirs` in its place. Subscribes before `work` first runs, so
/// nothing sent in reply to the request is missed; notifications lost to a
/// lagging subscription are skipped.
pub async fn relayed<T>(
    upstream: &Upstream,
    ours: Value,
    theirs: Value,
    sink: &Sink,
    work: impl Future<Output = T>,
) -> T {
    let mut notifications = upstream.subscribe();
    let relay = |mut msg: Value| {
        if is_progress_of(&msg, &ours) {
            msg["params"]["progressToken"] = theirs.clone();
            sink.send(msg.to_string());
        }
    };
    tokio::pin!(work);
    let mut open = true;
    loop {
        tokio::select! {
            r = &mut work => {
                // The connection dispatches a server's messages in order:
                // progress sent before the response is queued already.
                loop {
                    match notifications.try_recv() {
                        Ok(msg) => relay(msg),
                        Err(TryRecvError::Lagged(_)) => {}
                        Err(_) => break,
                    }
                }
                return r;
            }
            n = notifications.recv(), if open => match n {
                Ok(msg) => relay(msg),
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => open = false,
            },
        }
    }
}

/// Whether `msg` is a `notifications/progress` for `token`.
fn is_progress_of(msg: &Value, token: &Value) -> bool {
    msg.get("method").and_then(Value::as_str) == Some(methods::PROGRESS)
        && msg.pointer("/params/progressToken") == Some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens_are_replaced_and_returned() {
        let mut params = json!({"name": "t", "_meta": {"progressToken": 0, "k": "v"}});
        let (ours, theirs) = retoken(&mut params).unwrap();
        assert_eq!(theirs, json!(0));
        assert_eq!(params["_meta"]["progressToken"], ours);
        assert_eq!(params["_meta"]["k"], "v");
        let (again, _) = retoken(&mut params).unwrap();
        assert_ne!(again, ours, "each request gets a token of its own");
        let mut none = json!({"name": "t", "_meta": {"k": 1}});
        assert!(retoken(&mut none).is_none());
        assert_eq!(none, json!({"name": "t", "_meta": {"k": 1}}));
        // Not guessable from another: random, with nothing in common.
        let random = |t: &Value| {
            t.as_str()
                .unwrap()
                .strip_prefix("sy-progress-")
                .unwrap()
                .to_owned()
        };
        let (a, b) = (random(&ours), random(&again));
        assert_eq!((a.len(), b.len()), (32, 32), "{a} {b}");
        assert_ne!(a[..16], b[..16], "no shared prefix");
    }

    #[test]
    fn a_token_nobody_relays_is_removed() {
        let mut params =
            json!({"name": "t", "_meta": {"progressToken": "sy-progress-1", "k": "v"}});
        assert!(has_token(&params));
        strip_token(&mut params);
        assert_eq!(params, json!({"name": "t", "_meta": {"k": "v"}}));
        assert!(!has_token(&params));
    }

    #[test]
    fn only_our_progress_is_picked() {
        let ours = json!("sy-progress-7");
        let p = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "sy-progress-7", "progress": 1}});
        assert!(is_progress_of(&p, &ours));
        let other = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 7, "progress": 1}});
        assert!(!is_progress_of(&other, &ours));
        let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"progressToken": "sy-progress-7"}});
        assert!(!is_progress_of(&log, &ours));
    }
}
