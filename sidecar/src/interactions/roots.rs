//! Roots (client/roots): a server asking for the session's roots gets the
//! roots the engine gave with the call (`SidecarCallRequest.roots_json`),
//! exactly as given, whether it asks with a 2025-11-25 `roots/list` request
//! (attributed by the [`super::relay`]) or in a 2026-07-28 `inputRequests`
//! entry ([`super::mrtr`]).

use super::CallContext;
use serde_json::{Value, json};

/// The `ListRootsResult` for the call in `context`.
pub(super) fn list(context: &CallContext) -> Value {
    json!({"roots": context.roots})
}
