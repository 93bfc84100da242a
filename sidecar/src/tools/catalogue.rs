//! The sidecar's view of its server's tools: the compiled `outputSchema`
//! validators of the current tool list and the effective hints the control
//! plane pushed ([`Catalogue`], shared by the call pipeline and the
//! upstream watcher, [`crate::watch`], which keeps it current).
//!
//! Validators are compiled at most once per catalogue, each on its first
//! use: [`Catalogue::update`] only replaces them when the tool definitions
//! differ from the last listing.

use crate::tools::results::OutputValidators;
use serde_json::Value;
use std::sync::{Arc, Mutex, RwLock};

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

    /// Takes a new listing of `server`'s tools; replaces the validators
    /// only when the definitions changed, keeping those of the tools whose
    /// schema did not (the others compile on first use). Returns whether
    /// they changed.
    pub fn update(&self, server: &str, tools: &[Value]) -> bool {
        let mut last = self.tools.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() == Some(tools) {
            return false;
        }
        let mut validators = self.validators.write().unwrap_or_else(|e| e.into_inner());
        *validators = Arc::new(OutputValidators::next(server, tools, &validators));
        *last = Some(tools.to_vec());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
