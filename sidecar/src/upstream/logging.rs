//! A request's log messages (server/utilities/logging), relayed to whoever
//! made it.
//!
//! **Attribution.** A server's `notifications/message` belongs to a
//! request only when the server sent it on that request's own response
//! stream: over Streamable HTTP, the POST's SSE stream (also once resumed
//! with GET and `Last-Event-ID`) or a JSON body holding several messages.
//! The HTTP transport hands what it reads there to the request's
//! [`OnStream`](super::http::OnStream) besides the connection's fan-out
//! ([`super::http::HttpConnection::request`]). A message on the standalone
//! GET stream, and every message over stdio, has no request: callers of
//! every user share the server's connection, so such a message is never
//! given to a call (relaying by timing would show one user's logs to
//! another). stdio servers' log messages are not relayed at all.
//!
//! **Level.** A 2026-07-28 server sends a request no log messages unless
//! the request asks (`_meta["io.modelcontextprotocol/logLevel"]`, set by
//! [`ask`]; the connection drops the key for a 2025-11-25 server,
//! [`unask`]). A
//! 2025-11-25 server is never sent `logging/setLevel`: its level would
//! hold for every caller of the connection. So the level is applied here
//! too: [`relayer`] hands on the messages at the call's level or more
//! severe, exactly as the server sent them.

use crate::interactions::ProgressSink;
use serde_json::Value;
use switchyard_mcp::logging::{self, Level};
use switchyard_mcp::meta;

/// Asks a 2026-07-28 server for the log messages of request `params` at
/// `level` or more severe: sets `_meta["io.modelcontextprotocol/logLevel"]`
/// (creating `_meta`, marked as ours: [`super::era::own_meta`]). Params
/// that are not an object are left alone.
pub fn ask(params: &mut Value, level: Level) {
    if let Some(m) = super::era::own_meta(params) {
        m.insert(meta::LOG_LEVEL.into(), level.as_str().into());
    }
}

/// Drops `_meta["io.modelcontextprotocol/logLevel"]` from request
/// `params` (a 2025-11-25 server has no such key: its level is
/// `logging/setLevel`'s). A `_meta` we created goes with
/// [`super::era::strip_own`], called after this.
pub fn unask(params: &mut Value) {
    if let Some(Value::Object(m)) = params.get_mut("_meta") {
        m.remove(meta::LOG_LEVEL);
    }
}

/// Whether `msg` is a log message at `level` or more severe (one without
/// a known level is not).
pub fn wanted(msg: &Value, level: Level) -> bool {
    logging::message_level(msg).is_some_and(|l| l >= level)
}

/// What a request's [`OnStream`](super::http::OnStream) runs to relay its
/// log messages at `level` or more severe to `sink`, each as the server
/// sent it (JSON text). Everything else on the stream (progress, list
/// changes) is left to the connection's fan-out.
pub fn relayer(sink: ProgressSink, level: Level) -> impl Fn(&Value) + Send + Sync {
    move |msg: &Value| {
        if wanted(msg, level) {
            sink.send(msg.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::http::OnStream;
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    fn log(level: &str) -> Value {
        json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": level, "logger": "db", "data": {"n": 1}}})
    }

    #[test]
    fn the_level_is_asked_of_modern_servers_and_dropped_for_legacy_ones() {
        let mut p = json!({"name": "t", "arguments": {}});
        ask(&mut p, Level::Warning);
        assert_eq!(p["_meta"][meta::LOG_LEVEL], "warning");
        unask(&mut p);
        super::super::era::strip_own(&mut p);
        assert_eq!(
            p,
            json!({"name": "t", "arguments": {}}),
            "_meta we added goes"
        );
        let mut p = json!({"name": "t", "_meta": {"progressToken": 1}});
        ask(&mut p, Level::Debug);
        assert_eq!(p["_meta"][meta::LOG_LEVEL], "debug");
        assert_eq!(p["_meta"]["progressToken"], 1);
        unask(&mut p);
        super::super::era::strip_own(&mut p);
        assert_eq!(p, json!({"name": "t", "_meta": {"progressToken": 1}}));
        let mut empty = json!({"name": "t", "_meta": {}});
        unask(&mut empty);
        assert_eq!(
            empty,
            json!({"name": "t", "_meta": {}}),
            "the caller's own _meta stays"
        );
        let mut odd = json!(["not", "an", "object"]);
        ask(&mut odd, Level::Info);
        assert_eq!(odd, json!(["not", "an", "object"]));
    }

    #[test]
    fn only_log_messages_at_the_level_or_more_severe_are_relayed_unchanged() {
        let got = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = {
            let got = got.clone();
            ProgressSink::new(move |json| got.lock().unwrap().push(json))
        };
        let relay = relayer(sink, Level::Warning);
        let f: OnStream<'_> = &relay;
        for level in ["debug", "info", "warning", "error", "emergency", "loud"] {
            f(&log(level));
        }
        f(
            &json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1, "level": "error"}}),
        );
        f(
            &json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "no level"}}),
        );
        let got: Vec<Value> = got
            .lock()
            .unwrap()
            .iter()
            .map(|s| serde_json::from_str(s).unwrap())
            .collect();
        assert_eq!(got, vec![log("warning"), log("error"), log("emergency")]);
    }
}
