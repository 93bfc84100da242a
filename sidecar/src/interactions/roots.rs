//! Roots (client/roots): a server asking for the roots of a call, with a
//! 2025-11-25 `roots/list` request (attributed by the [`super::relay`]) or
//! in a 2026-07-28 `inputRequests` entry ([`super::mrtr`]). A call whose
//! client answers for itself and declared `roots` (the MCP endpoint's
//! clients: [`CallContext::asks_roots`]) asks that client, as an
//! interaction of kind `roots` of the call's session, under the server's
//! key; any other call, or a client that does not answer (declines,
//! cancels, or the interaction times out), gets the roots the engine gave
//! with the call (`SidecarCallRequest.roots_json`), exactly as given.

use super::elicitation::{self, Asked, InteractionKind};
use super::{CallContext, Relay};
use serde_json::{Value, json};

/// The `ListRootsResult` for the call in `context`, asked with the
/// server's `roots/list` `params` as the server `asked` it (its key:
/// 2026-07-28; empty for a 2025-11-25 request): see the module docs.
pub(super) async fn list(
    relay: &Relay,
    context: &CallContext,
    params: Value,
    asked: Asked<'_>,
) -> Value {
    if context.asks_roots()
        && !context.session_id.is_empty()
        && let Some(interactions) = relay.interactions()
    {
        let answer = elicitation::ask(
            interactions,
            relay.server(),
            context,
            (InteractionKind::Roots, params),
            asked,
        )
        .await;
        if let Some(roots) = answer.get("roots").filter(|r| r.is_array()) {
            return json!({"roots": roots});
        }
        tracing::info!(server = %relay.server(), session = %context.session_id, tool = %context.tool, "the client did not answer roots/list; answering the session's roots");
    }
    json!({"roots": context.roots})
}
