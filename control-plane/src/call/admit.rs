//! Steps 1 and 3 of the call path: may this call go ahead? The caller's session
//! (its own, or NOT_FOUND as for an unknown id), the server enabled in it,
//! and the policy decision for the tool in the session's permission mode
//! (stage A: `policy`).

use super::error::CallError;
use super::resolve::Target;
use crate::ControlPlane;
use crate::auth::Caller;
use crate::model::SessionRecord;
use crate::state::Snapshot;
use crate::tools::policy::Decision;
use crate::tools::{ToolView, mode_of, tool_view};

/// The session `id` if `caller` may use it ([`SessionRecord::usable_by`]);
/// NOT_FOUND otherwise, as for a session that does not exist (another
/// caller's sessions are not revealed). A session created on another
/// replica a moment ago is read through from the store. Errors: NOT_FOUND,
/// UNAVAILABLE (the store).
pub async fn session(
    cp: &ControlPlane,
    id: &str,
    caller: Option<&Caller>,
) -> Result<SessionRecord, CallError> {
    let session = match cp.state.snapshot().sessions.get(id) {
        Some(s) => s.clone(),
        // Boxed: the read-through is rare, and its future would otherwise
        // make every call's future (moved on each spawn) much larger.
        None => Box::pin(read_session(cp, id)).await?,
    };
    if session.usable_by(caller) {
        Ok(session)
    } else {
        Err(CallError::not_found(format!("session {id:?} not found")))
    }
}

/// A session straight from the store.
async fn read_session(cp: &ControlPlane, id: &str) -> Result<SessionRecord, CallError> {
    cp.registry
        .get_session(id)
        .await?
        .ok_or_else(|| CallError::not_found(format!("session {id:?} not found")))
}

/// The decision about `target` for a call in `session` (none: mode
/// `auto`). Errors: FAILED_PRECONDITION naming why the tool is not offered,
/// or that it needs an approval and the call has no session to ask in.
pub fn admit(
    snap: &Snapshot,
    target: &Target<'_>,
    session: Option<&SessionRecord>,
    engine_tool: &str,
) -> Result<ToolView, CallError> {
    let server = target.server.as_str();
    // A gateway listing of every server covers the session's servers only.
    let every_server = target.gateway.is_some() && server.is_empty();
    if let Some(s) = session
        && !every_server
        && !s.enables(server)
    {
        return Err(CallError::failed_precondition(format!(
            "tool {engine_tool:?} is not offered to session {}: server {server} is not enabled",
            s.id
        )));
    }
    let view = tool_view(snap, server, target.definition, mode_of(session));
    match (view.decision, session) {
        (Decision::NotOffered(why), Some(s)) => Err(CallError::failed_precondition(format!(
            "tool {engine_tool:?} is not offered to session {}: {why}",
            s.id
        ))),
        (Decision::NotOffered(why), None) => Err(CallError::failed_precondition(format!(
            "tool {engine_tool:?} is not offered: {why}"
        ))),
        (Decision::Approve, None) => Err(CallError::failed_precondition(format!(
            "tool {engine_tool:?} needs the user's approval (policy {}) and the call has no session to ask in",
            view.policy.as_str()
        ))),
        _ => Ok(view),
    }
}
