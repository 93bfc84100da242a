//! The sidecar's view of its server's catalogue: the compiled `outputSchema`
//! validators of the current tool list and the effective hints the control
//! plane pushed ([`Catalogue`], shared by the call pipeline and the
//! upstream watcher, [`super::watch`]) and the coalescing of
//! `notifications/tools/list_changed` ([`Coalescer`]).
//!
//! Validators are compiled once per catalogue: [`Catalogue::update`] only
//! recompiles when the tool definitions differ from the last listing.
//!
//! Coalescing: the first notification after a quiet period arms a deadline
//! one window later (default 2 s, `[sidecar] list_changed_window_ms`);
//! later notifications before it join it. At the deadline the watcher
//! re-lists, once; notifications that arrive while it re-lists arm exactly
//! one more deadline, a whole window after they were read. So a server
//! that answers every `tools/list` with another notification gets at most
//! one re-list per window, never a loop.

use crate::tools::results::OutputValidators;
use serde_json::Value;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::time::Instant;

/// Default coalescing window of list-changed notifications.
pub const DEFAULT_LIST_CHANGED_WINDOW: Duration = Duration::from_secs(2);

/// The current catalogue's validators. Cheap to clone; clones share.
#[derive(Debug, Clone, Default)]
pub struct Catalogue {
    validators: Arc<RwLock<Arc<OutputValidators>>>,
    tools: Arc<Mutex<Option<Vec<Value>>>>,
    /// Effective hints pushed by the control plane (`ToolSettings`).
    hints: Arc<RwLock<std::collections::HashMap<String, switchyard_proto::v1::ToolHints>>>,
}

impl Catalogue {
    /// An empty catalogue: nothing is validated until [`Catalogue::update`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The validators of the latest listing.
    pub fn validators(&self) -> Arc<OutputValidators> {
        self.validators
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the effective hints the control plane pushed.
    pub fn set_hints(
        &self,
        hints: std::collections::HashMap<String, switchyard_proto::v1::ToolHints>,
    ) {
        *self.hints.write().unwrap_or_else(|e| e.into_inner()) = hints;
    }

    /// A tool's effective hints, if the control plane pushed them.
    pub fn hints(&self, tool: &str) -> Option<switchyard_proto::v1::ToolHints> {
        self.hints
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tool)
            .copied()
    }

    /// Whether the server's tools have been listed at least once.
    pub fn is_listed(&self) -> bool {
        self.tools
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// The definition of `tool` in the latest listing, exactly as the
    /// server sent it (its `execution.taskSupport` tells whether it runs as
    /// a task, see [`crate::background`]); `None` when it is not listed or
    /// nothing has been listed yet.
    pub fn tool(&self, tool: &str) -> Option<Value> {
        let last = self.tools.lock().unwrap_or_else(|e| e.into_inner());
        last.as_deref()?
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some(tool))
            .cloned()
    }

    /// Takes a new listing of `server`'s tools; recompiles the validators
    /// only when the definitions changed. Returns whether they did.
    pub fn update(&self, server: &str, tools: &[Value]) -> bool {
        let mut last = self.tools.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() == Some(tools) {
            return false;
        }
        let compiled = Arc::new(OutputValidators::compile(server, tools));
        *self.validators.write().unwrap_or_else(|e| e.into_inner()) = compiled;
        *last = Some(tools.to_vec());
        true
    }
}

/// When to re-list after list-changed notifications (see the module docs).
#[derive(Debug, Clone)]
pub struct Coalescer {
    window: Duration,
    deadline: Option<Instant>,
}

impl Coalescer {
    /// Coalescing within `window`.
    pub fn new(window: Duration) -> Self {
        Coalescer {
            window,
            deadline: None,
        }
    }

    /// A notification was read at `now`.
    pub fn notified(&mut self, now: Instant) {
        if self.deadline.is_none() {
            self.deadline = Some(now + self.window);
        }
    }

    /// When the next re-list is due, if one is.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// A re-list starts: it serves every notification read so far.
    pub fn refreshing(&mut self) {
        self.deadline = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn coalescer_arms_one_deadline_per_window() {
        let t0 = Instant::now();
        let w = Duration::from_secs(2);
        let mut c = Coalescer::new(w);
        assert_eq!(c.deadline(), None);
        for i in 0..10_000u64 {
            c.notified(t0 + Duration::from_micros(i * 100));
        }
        assert_eq!(c.deadline(), Some(t0 + w));
        c.refreshing();
        assert_eq!(c.deadline(), None);
        // A notification during the re-list, read when it ends.
        let t1 = t0 + w + Duration::from_millis(300);
        c.notified(t1);
        c.notified(t1 + Duration::from_millis(1));
        assert_eq!(c.deadline(), Some(t1 + w));
    }

    #[test]
    fn validators_are_compiled_once_per_catalogue() {
        let c = Catalogue::new();
        let tools = vec![json!({"name": "t", "outputSchema": {"type": "object"}})];
        assert!(c.update("s", &tools));
        let first = c.validators();
        assert!(first.validates("t"));
        assert!(!c.update("s", &tools));
        assert!(Arc::ptr_eq(&first, &c.validators()));
        assert!(c.update("s", &[]));
        assert!(!c.validators().validates("t"));
    }
}
