//! Log levels and log messages (2025-11-25 server/utilities/logging; the
//! 2026-07-28 schema's `LoggingLevel`, `LoggingMessageNotification` and
//! `RequestMetaObject["io.modelcontextprotocol/logLevel"]`).
//!
//! A 2025-11-25 client sets its level with `logging/setLevel`
//! ([`crate::methods::LOGGING_SET_LEVEL`]); a 2026-07-28 client sets it per
//! request in `_meta` ([`crate::meta::LOG_LEVEL`]), and without it gets no
//! `notifications/message` for that request. Either way the server sends
//! the messages at that level or more severe.

use serde_json::Value;

/// The severity of a log message: the syslog severities of RFC 5424
/// §6.2.1, ordered from the least severe (`Debug`) to the most severe
/// (`Emergency`), so `a >= b` reads "a is at least as severe as b".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// `debug`: detailed debugging information.
    Debug,
    /// `info`: general informational messages.
    Info,
    /// `notice`: normal but significant events.
    Notice,
    /// `warning`: warning conditions.
    Warning,
    /// `error`: error conditions.
    Error,
    /// `critical`: critical conditions.
    Critical,
    /// `alert`: action must be taken immediately.
    Alert,
    /// `emergency`: the system is unusable.
    Emergency,
}

impl Level {
    /// Every level, least severe first.
    pub const ALL: [Level; 8] = [
        Level::Debug,
        Level::Info,
        Level::Notice,
        Level::Warning,
        Level::Error,
        Level::Critical,
        Level::Alert,
        Level::Emergency,
    ];

    /// The level's name on the wire (`"debug"` .. `"emergency"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Notice => "notice",
            Level::Warning => "warning",
            Level::Error => "error",
            Level::Critical => "critical",
            Level::Alert => "alert",
            Level::Emergency => "emergency",
        }
    }

    /// The level named `name`, exactly as spelled on the wire (lower
    /// case); `None` for anything else.
    pub fn parse(name: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.as_str() == name)
    }

    /// The level of a JSON value: a string naming one; `None` otherwise.
    pub fn of(value: &Value) -> Option<Level> {
        value.as_str().and_then(Level::parse)
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The names of the levels, least severe first, for messages
/// (`debug, info, ..., emergency`).
pub fn names() -> String {
    Level::ALL.map(Level::as_str).join(", ")
}

/// The level of `msg` when it is a `notifications/message`
/// ([`crate::methods::LOG_MESSAGE`]) with a known `params.level`; `None`
/// for any other message.
pub fn message_level(msg: &Value) -> Option<Level> {
    if msg.get("method").and_then(Value::as_str) != Some(crate::methods::LOG_MESSAGE) {
        return None;
    }
    Level::of(msg.pointer("/params/level")?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn levels_parse_exactly_and_order_by_severity() {
        for l in Level::ALL {
            assert_eq!(Level::parse(l.as_str()), Some(l));
        }
        for bad in ["", "Info", "INFO", "warn", "trace", "fatal", " info"] {
            assert_eq!(Level::parse(bad), None, "{bad:?}");
        }
        assert!(Level::Emergency > Level::Error && Level::Error > Level::Info);
        assert!(Level::Debug < Level::Info);
        assert_eq!(Level::of(&json!(3)), None);
        assert_eq!(
            names(),
            "debug, info, notice, warning, error, critical, alert, emergency"
        );
    }

    #[test]
    fn only_log_messages_have_a_level() {
        let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "warning", "data": "x"}});
        assert_eq!(message_level(&log), Some(Level::Warning));
        let unknown = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "loud"}});
        assert_eq!(message_level(&unknown), None);
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"level": "info"}});
        assert_eq!(message_level(&progress), None);
    }
}
