//! Approvals (stage A's `confirm` policy, `ask` mode): a call waiting for
//! the user is an `approval` interaction of its session, and its outcome.

use super::*;

/// How an approval ended (see [`Interactions::request_approval`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// The user approved: call the tool.
    Approved,
    /// The user denied.
    Denied,
    /// Nobody answered within `limits.interactionTimeoutSec`.
    TimedOut,
    /// Cancelled: by the user, or the session was deleted (the reason).
    Cancelled(String),
    /// The approval could not be asked (the store failed, the replica stops).
    Failed(String),
}

impl ApprovalOutcome {
    /// Whether the call may go ahead.
    pub fn is_approved(&self) -> bool {
        matches!(self, ApprovalOutcome::Approved)
    }

    /// What the engine is told when the call does not go ahead: a clear
    /// "not approved" sentence; empty when approved.
    pub fn message(&self, server: &str, tool: &str) -> String {
        match self {
            ApprovalOutcome::Approved => String::new(),
            ApprovalOutcome::Denied => {
                format!("not approved: the user denied the call to {tool} on {server}")
            }
            ApprovalOutcome::TimedOut => {
                format!("not approved: nobody answered the approval for {tool} on {server} in time")
            }
            ApprovalOutcome::Cancelled(why) => {
                format!("not approved: the approval for {tool} on {server} was cancelled ({why})")
            }
            ApprovalOutcome::Failed(why) => format!(
                "not approved: the approval for {tool} on {server} could not be asked: {why}"
            ),
        }
    }

    /// The `CallToolResult` the engine gets instead of calling the tool:
    /// `isError` with [`ApprovalOutcome::message`]; `None` when approved.
    pub fn not_approved_result(&self, server: &str, tool: &str) -> Option<Value> {
        (!self.is_approved()).then(|| {
            json!({"content": [{"type": "text", "text": self.message(server, tool)}], "isError": true})
        })
    }
}

/// The most bytes of a call's arguments an approval card keeps.
pub const MAX_APPROVAL_ARGUMENTS: usize = 64 * 1024;

/// An approval's `params`: `{"arguments": ...}`, the call's arguments as
/// the engine sent them (none when it sent none; a note instead when they
/// are over [`MAX_APPROVAL_ARGUMENTS`] or not JSON).
fn approval_params(arguments_json: &str) -> Option<Box<serde_json::value::RawValue>> {
    let args = arguments_json.trim();
    if args.is_empty() {
        return None;
    }
    let text = if args.len() > MAX_APPROVAL_ARGUMENTS {
        json!({"argumentsNote": format!("the arguments ({} bytes) are too large to show", args.len())}).to_string()
    } else if serde_json::from_str::<serde::de::IgnoredAny>(args).is_err() {
        json!({"argumentsNote": "the arguments are not JSON"}).to_string()
    } else {
        format!("{{\"arguments\":{args}}}")
    };
    serde_json::value::RawValue::from_string(text).ok()
}

impl Interactions {
    /// Asks the session's user to approve a call of `tool` on `server`
    /// with `arguments_json` (shown on the card; JSON text, may be empty)
    /// (a `confirm` policy) and waits for the answer, at most
    /// `limits.interactionTimeoutSec`. Deny, cancel, timeout or a failure
    /// mean the call must not go ahead; [`ApprovalOutcome::message`] says
    /// why. If the returned future is dropped first (the engine's call
    /// ended), the approval is cancelled; if this replica dies while it
    /// waits, the other replicas cancel it once its liveness key is gone
    /// (see `replica`).
    pub async fn request_approval(
        &self,
        session: &str,
        run_id: &str,
        server: &str,
        tool: &str,
        arguments_json: &str,
        message: &str,
    ) -> ApprovalOutcome {
        if let Err(e) = self.session(session).await {
            return ApprovalOutcome::Failed(e.to_string());
        }
        let now = now_ms();
        let rec = InteractionRecord {
            id: switchyard_common::ids::new_id(),
            session_id: session.to_owned(),
            run_id: run_id.to_owned(),
            kind: Kind::Approval,
            server: server.to_owned(),
            tool: tool.to_owned(),
            message: if message.is_empty() {
                format!("Allow the call to {tool} on {server}?")
            } else {
                message.to_owned()
            },
            params: approval_params(arguments_json),
            url: String::new(),
            url_domain: String::new(),
            elicitation_id: String::new(),
            key: String::new(),
            together_id: String::new(),
            together_count: 0,
            waiter: self.replica.to_string(),
            status: Status::Open,
            outcome: None,
            reason: String::new(),
            content: None,
            created_at_ms: now,
            expires_at_ms: now.saturating_add(self.timeout.as_millis() as i64),
            resolved_at_ms: 0,
        };
        let id = rec.id.clone();
        // Armed before the record exists: the engine may see it (and the
        // call may end) before `create` returns.
        let mut guard = CancelOnDrop {
            interactions: Some(self.clone()),
            session: session.to_owned(),
            id: id.clone(),
        };
        if let Err(e) = self.create(rec).await {
            return ApprovalOutcome::Failed(e.to_string());
        }
        let outcome = match self.wait(session, &id).await {
            Ok(Some(r)) => match r.outcome {
                Some(Outcome::Approve) => ApprovalOutcome::Approved,
                Some(Outcome::Deny) => ApprovalOutcome::Denied,
                Some(Outcome::Timeout) => ApprovalOutcome::TimedOut,
                _ => ApprovalOutcome::Cancelled(if r.reason.is_empty() {
                    "cancelled".into()
                } else {
                    r.reason.replace('_', " ")
                }),
            },
            Ok(None) => ApprovalOutcome::Cancelled("the approval vanished".into()),
            Err(e) => ApprovalOutcome::Failed(e.to_string()),
        };
        if !matches!(outcome, ApprovalOutcome::Failed(_)) {
            guard.interactions = None;
        }
        outcome
    }
}
