//! Stage A's one retry (design §4 A): a call of a read-only or idempotent
//! tool that fails with a network error (the server exited, an I/O or
//! spawn failure) is sent again, once, after reconnecting; never otherwise
//! (a JSON-RPC error is an answer, a timeout may have run the tool, and a
//! closed session is shutting down). The control plane marks a call
//! `retry_safe`, and also pushes the effective hints (admin overrides
//! applied, [`Catalogue::hints`]): either one saying read-only or
//! idempotent makes the call safe to send again.
//!
//! This is the one place the rule is declared. Every `tools/call` sent for
//! an engine's call goes through [`RetrySafe::call_tool`]: the plain call
//! ([`crate::call`]), the call that creates a task, and the call held in
//! wait mode ([`crate::background`]). Each retry is counted in
//! `switchyard_sidecar_upstream_retries_total`.

use super::catalogue::Catalogue;
use crate::interactions::CallContext;
use crate::upstream::{Upstream, UpstreamError};
use serde_json::Value;

/// Whether a call may be sent again, once, after a network error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetrySafe(bool);

impl RetrySafe {
    /// Never sent again.
    pub const NEVER: RetrySafe = RetrySafe(false);

    /// The policy of a call of `tool`: safe when the control plane marked
    /// it (`marked`) or `catalogue`'s effective hints say read-only or
    /// idempotent.
    pub fn of(marked: bool, catalogue: &Catalogue, tool: &str) -> Self {
        RetrySafe(
            marked
                || catalogue
                    .hints(tool)
                    .is_some_and(|h| h.read_only_hint || h.idempotent_hint),
        )
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
        if !self.0 {
            return upstream.call_tool_in(params, context).await;
        }
        match upstream.call_tool_in(params.clone(), context).await {
            Err(e) if self.retries(&e) => {
                upstream.metrics().retry();
                tracing::info!(server = %upstream.name(), tool = %context.tool, error = %e, "network error on a retry-safe call; reconnecting and retrying once");
                upstream.call_tool_in(params, context).await
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
    fn marked_or_hinted_calls_are_safe() {
        let catalogue = Catalogue::new();
        let hints = |read_only_hint, idempotent_hint| ToolHints {
            read_only_hint,
            idempotent_hint,
            destructive_hint: false,
            open_world_hint: true,
        };
        catalogue.set_hints(HashMap::from([
            ("read".to_owned(), hints(true, false)),
            ("put".to_owned(), hints(false, true)),
            ("write".to_owned(), hints(false, false)),
        ]));
        assert!(RetrySafe::of(false, &catalogue, "read").is_safe());
        assert!(RetrySafe::of(false, &catalogue, "put").is_safe());
        assert!(!RetrySafe::of(false, &catalogue, "write").is_safe());
        assert!(!RetrySafe::of(false, &catalogue, "unknown").is_safe());
        assert!(RetrySafe::of(true, &catalogue, "write").is_safe());
        let exited = UpstreamError::Exited {
            server: "s".into(),
            status: "exit status: 3".into(),
            stderr_tail: String::new(),
        };
        let closed = UpstreamError::Closed { server: "s".into() };
        let safe = RetrySafe::of(true, &catalogue, "write");
        assert!(safe.retries(&exited) && safe.tolerates(&closed) && !safe.retries(&closed));
        assert!(!RetrySafe::NEVER.retries(&exited) && !RetrySafe::NEVER.tolerates(&exited));
        assert!(!safe.retries(&UpstreamError::protocol("s", "bad")));
    }
}
