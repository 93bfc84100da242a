//! Stage A's one retry (design §4 A): a call of a read-only or idempotent
//! tool that fails with a network error (the server exited, an I/O or
//! spawn failure) is sent again, once, after reconnecting; never otherwise
//! (a JSON-RPC error is an answer, a timeout may have run the tool, and a
//! closed session is shutting down). The control plane decides it per call
//! (`retry_safe`, from the effective hints in the read model the call was
//! decided from), so an admin's hint change obeys read-your-writes; the
//! hints it also pushes ([`crate::tools::catalogue::Catalogue::hints`]) may
//! lag and only label audit records.
//!
//! This is the one place the rule is declared. Every `tools/call` sent for
//! an engine's call goes through [`RetrySafe::call_tool`]: the plain call
//! ([`crate::call`]), the call that creates a task, and the call held in
//! wait mode ([`crate::background`]). Each retry is counted in
//! `switchyard_sidecar_upstream_retries_total`.

use crate::interactions::CallContext;
use crate::upstream::{Upstream, UpstreamError};
use serde_json::Value;

/// Whether a call may be sent again, once, after a network error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetrySafe(bool);

impl RetrySafe {
    /// Never sent again.
    pub const NEVER: RetrySafe = RetrySafe(false);

    /// The policy of a call the control plane marked `retry_safe` or not.
    pub fn of(marked: bool) -> Self {
        RetrySafe(marked)
    }

    /// Whether the call is safe to send again.
    pub fn is_safe(self) -> bool {
        self.0
    }

    /// Whether a network error before the call was sent (connecting, to
    /// plan it) may be left to the call itself, which reconnects and is
    /// retried on the same rule.
    pub fn tolerates(self, error: &UpstreamError) -> bool {
        self.0 && error.is_connection_failure()
    }

    /// Whether a sent call that failed with `error` is sent again.
    fn retries(self, error: &UpstreamError) -> bool {
        self.tolerates(error) && !matches!(error, UpstreamError::Closed { .. })
    }

    /// Calls the tool (`params`: the whole `tools/call` params) on
    /// `upstream` for the call in `context`, and once more after a network
    /// error when the call is safe (see the module docs). Errors: the last
    /// attempt's.
    pub async fn call_tool(
        self,
        upstream: &Upstream,
        params: Value,
        context: &CallContext,
    ) -> Result<Value, UpstreamError> {
        // Borrowed, not copied per call: the params are kept for the one
        // retry at no cost.
        if !self.0 {
            return upstream.call_tool_in(&params, context).await;
        }
        match upstream.call_tool_in(&params, context).await {
            Err(e) if self.retries(&e) => {
                upstream.metrics().retry();
                tracing::info!(server = %upstream.name(), tool = %context.tool, error = %e, "network error on a retry-safe call; reconnecting and retrying once");
                upstream.call_tool_in(&params, context).await
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use switchyard_proto::v1::ToolHints;

    #[test]
    fn only_marked_calls_are_safe() {
        // Pushed hints may be stale (an override cleared a moment ago):
        // they never make a call safe; the control plane's mark does.
        let catalogue = crate::tools::catalogue::Catalogue::new();
        let hints = |read_only_hint, idempotent_hint| ToolHints {
            read_only_hint,
            idempotent_hint,
            destructive_hint: false,
            open_world_hint: true,
        };
        catalogue.set_hints(HashMap::from([("read".to_owned(), hints(true, false))]));
        assert!(catalogue.hints("read").is_some());
        assert!(!RetrySafe::of(false).is_safe());
        assert!(RetrySafe::of(true).is_safe());
        let exited = UpstreamError::Exited {
            server: "s".into(),
            status: "exit status: 3".into(),
            stderr_tail: String::new(),
        };
        let closed = UpstreamError::Closed { server: "s".into() };
        let safe = RetrySafe::of(true);
        assert!(safe.retries(&exited) && safe.tolerates(&closed) && !safe.retries(&closed));
        assert!(!RetrySafe::NEVER.retries(&exited) && !RetrySafe::NEVER.tolerates(&exited));
        assert!(!safe.retries(&UpstreamError::protocol("s", "bad")));
    }
}
