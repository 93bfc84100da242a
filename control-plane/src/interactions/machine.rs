//! The interaction state machine, pure: what an answer or an end does to a
//! record (open -> resolved with an outcome), and why an answer is refused.
//! The store service applies it under compare-and-swap.

use super::*;

/// Why an answer is refused (see [`apply_answer`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AnswerError {
    /// Already resolved.
    #[error("interaction {id} is already resolved (outcome {outcome})")]
    AlreadyResolved {
        /// Id.
        id: String,
        /// Its outcome.
        outcome: String,
    },
    /// A URL interaction already accepted.
    #[error(
        "interaction {0} was accepted; it waits for the server to report the URL flow complete"
    )]
    AwaitingCompletion(String),
    /// Expired, not yet swept.
    #[error("interaction {0} timed out")]
    Expired(String),
    /// The action does not fit the kind.
    #[error("action {action:?} does not fit a {kind} interaction; use {expected}")]
    WrongAction {
        /// The action.
        action: &'static str,
        /// The kind.
        kind: &'static str,
        /// The fitting actions.
        expected: &'static str,
    },
    /// The form content does not match `requestedSchema`.
    #[error("content_json: the answer does not match requestedSchema: {0}")]
    Form(form::FormErrors),
    /// A roots answer that is not a list of MCP Root objects.
    #[error("content_json: {0}")]
    Roots(String),
}

/// The most roots a client's answer may carry.
pub const MAX_ROOTS: usize = 1000;

/// A client's answer to a roots question (`content`: the Root objects, or
/// a whole `ListRootsResult`), checked: an array of at most [`MAX_ROOTS`]
/// objects, each with a string `uri` that has a scheme (client/roots,
/// "Root"); each object is kept as sent (`name`, `_meta`).
pub fn roots_answer(content: &Value) -> Result<Value, String> {
    let roots = match content {
        Value::Object(o) if o.contains_key("roots") => &o["roots"],
        other => other,
    };
    let Some(list) = roots.as_array() else {
        return Err("the answer to a roots question must be an array of Root objects".into());
    };
    if list.len() > MAX_ROOTS {
        return Err(format!(
            "{} roots is more than the {MAX_ROOTS} allowed",
            list.len()
        ));
    }
    for (i, r) in list.iter().enumerate() {
        let uri = r.get("uri").and_then(Value::as_str).unwrap_or("");
        if !uri.contains(':') {
            return Err(format!("roots[{i}].uri: {uri:?} is not a URI"));
        }
    }
    Ok(roots.clone())
}

/// The record after an answer, or why the answer is refused. `content` is
/// the parsed `content_json` (`Null` when absent); it is only looked at for
/// `accept` of a form, where a `Null` content counts as `{}` and the answer
/// is re-validated against `requestedSchema`, and of a roots question
/// ([`roots_answer`]).
pub fn apply_answer(
    rec: &InteractionRecord,
    action: Action,
    content: &Value,
    now: i64,
) -> Result<InteractionRecord, AnswerError> {
    match rec.status {
        Status::Resolved => {
            return Err(AnswerError::AlreadyResolved {
                id: rec.id.clone(),
                outcome: rec.outcome.map(Outcome::as_str).unwrap_or("").to_owned(),
            });
        }
        Status::Accepted => return Err(AnswerError::AwaitingCompletion(rec.id.clone())),
        Status::Open => {}
    }
    if !action.fits(rec.kind) {
        return Err(AnswerError::WrongAction {
            action: action.as_str(),
            kind: rec.kind.as_str(),
            expected: actions_for(rec.kind),
        });
    }
    if now >= rec.expires_at_ms {
        return Err(AnswerError::Expired(rec.id.clone()));
    }
    let mut next = rec.clone();
    next.outcome = Some(action.outcome());
    next.reason = reason::ANSWERED.into();
    match (rec.kind, action) {
        (Kind::Form, Action::Accept) => {
            let content = if content.is_null() {
                json!({})
            } else {
                content.clone()
            };
            let forwarded = form::validate_answer(&rec.requested_schema(), &content)
                .map_err(AnswerError::Form)?;
            next.content = Some(forwarded);
            next.status = Status::Resolved;
            next.resolved_at_ms = now;
        }
        // A 2025-11-25 server reports the URL flow complete
        // (`notifications/elicitation/complete`); a 2026-07-28 server's
        // question (it has a key) never is, as that era has no such
        // notification: the answer resolves it.
        (Kind::Url, Action::Accept) if rec.key.is_empty() => next.status = Status::Accepted,
        (Kind::Roots, Action::Accept) => {
            next.content = Some(roots_answer(content).map_err(AnswerError::Roots)?);
            next.status = Status::Resolved;
            next.resolved_at_ms = now;
        }
        _ => {
            next.status = Status::Resolved;
            next.resolved_at_ms = now;
        }
    }
    Ok(next)
}

/// The record resolved without an answer (timeout, session deleted, call
/// ended, URL completion), or `None` if it is already resolved. An accepted
/// URL keeps its `accept` outcome (the server already has it).
pub fn apply_end(
    rec: &InteractionRecord,
    outcome: Outcome,
    why: &str,
    now: i64,
) -> Option<InteractionRecord> {
    let mut next = rec.clone();
    match rec.status {
        Status::Resolved => return None,
        Status::Accepted => {
            next.reason = if why == reason::TIMEOUT {
                reason::NOT_COMPLETED.into()
            } else {
                why.into()
            };
        }
        Status::Open => {
            next.outcome = Some(outcome);
            next.reason = why.into();
        }
    }
    next.status = Status::Resolved;
    next.resolved_at_ms = now;
    Some(next)
}
