//! Elicitation (client/elicitation, form and URL mode): asking a
//! session's user one question (`ask`), bounded by the stage's timeout,
//! and what an answer may be. Which session a question belongs to, and the
//! URL elicitations remembered for their completion, are the
//! [`super::relay`]'s.

use super::{CallContext, Interactions};
use serde_json::{Value, json};

/// Which kind of elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InteractionKind {
    /// In-band form (`mode` `"form"` or absent).
    Form,
    /// Out-of-band URL (`mode` `"url"`).
    Url,
    /// A `roots/list` asked of the call's client ([`super::roots`]).
    Roots,
}

impl InteractionKind {
    /// `form`, `url` or `roots`.
    pub fn as_str(self) -> &'static str {
        match self {
            InteractionKind::Form => "form",
            InteractionKind::Url => "url",
            InteractionKind::Roots => "roots",
        }
    }

    /// The kind of `elicitation/create` params: a missing `mode` is form
    /// mode (client/elicitation, "backwards compatibility").
    pub fn of(params: &Value) -> Result<Self, String> {
        match params.get("mode") {
            None | Some(Value::Null) => Ok(InteractionKind::Form),
            Some(Value::String(m)) if m == "form" => Ok(InteractionKind::Form),
            Some(Value::String(m)) if m == "url" => Ok(InteractionKind::Url),
            Some(other) => Err(format!("unsupported elicitation mode {other}")),
        }
    }
}

/// One question for a session's user.
#[derive(Debug, Clone)]
pub struct Interaction {
    /// A fresh random id, the same across retries of the same question.
    pub id: String,
    /// The server asking.
    pub server: String,
    /// Form, URL or roots.
    pub kind: InteractionKind,
    /// The call (and so the session) it belongs to.
    pub context: CallContext,
    /// The `elicitation/create` (or `roots/list`) params exactly as the
    /// server sent them (for -32042: one entry of `data.elicitations`).
    pub params: Value,
    /// The server's own key for the question (a 2026-07-28 `inputRequests`
    /// key); empty for a 2025-11-25 server request.
    pub key: String,
    /// The questions asked at once with this one, when there are several.
    pub together: Option<Together>,
}

/// Questions a server asked at once: the entries of one `inputRequests`,
/// or the elicitations of one -32042 error. The control plane puts them to
/// a 2026-07-28 client together (`InteractRequest.together_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Together {
    /// Shared by the questions; fresh and random (128 bits, hex).
    pub id: String,
    /// How many questions there are (at least 2).
    pub count: u32,
}

impl Together {
    /// A fresh group of `count` questions; `None` for fewer than two.
    pub fn of(count: usize) -> Option<Together> {
        (count > 1).then(|| Together {
            id: new_interaction_id(),
            count: u32::try_from(count).unwrap_or(u32::MAX),
        })
    }
}

/// How a server asked one question.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked<'a> {
    /// The server's own key (a 2026-07-28 `inputRequests` key); empty for
    /// a 2025-11-25 server request or a -32042 error's elicitation.
    pub key: &'a str,
    /// The questions asked with it, when there are several.
    pub together: Option<&'a Together>,
}

/// A fresh random interaction id (128 bits, hex).
pub fn new_interaction_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The answer that declines.
pub(super) fn decline() -> Value {
    json!({"action": "decline"})
}

/// The answer that cancels.
pub(super) fn cancel() -> Value {
    json!({"action": "cancel"})
}

/// Asks the user of `context`'s session `params` (an `elicitation/create`
/// params object, one entry of a -32042 error's `data.elicitations`, or
/// `roots/list` params) as an interaction of `kind` on behalf of `server`,
/// as the server `asked` it (its key, may be empty; the questions asked
/// with it), through
/// `interactions.handler`; `{"action": "cancel"}` when
/// `interactions.timeout` passes first.
pub(super) async fn ask(
    interactions: &Interactions,
    server: &str,
    context: &CallContext,
    (kind, params): (InteractionKind, Value),
    asked: Asked<'_>,
) -> Value {
    let interaction = Interaction {
        id: new_interaction_id(),
        server: server.to_owned(),
        kind,
        context: context.clone(),
        params,
        key: asked.key.to_owned(),
        together: asked.together.cloned(),
    };
    let id = interaction.id.clone();
    tracing::info!(%server, interaction = %id, kind = kind.as_str(), session = %context.session_id, tool = %context.tool, "asking the user");
    match tokio::time::timeout(
        interactions.timeout,
        interactions.handler.interact(interaction),
    )
    .await
    {
        Ok(answer) => answer,
        Err(_) => {
            tracing::info!(%server, interaction = %id, timeout_s = interactions.timeout.as_secs_f64(), "interaction timed out; answering cancel");
            cancel()
        }
    }
}
