//! The questions a call asks, put to the MCP client that made it
//! (2025-11-25 clients; stage C's interactions, `crate::interactions`).
//!
//! A 2025-11-25 client that declared `elicitation` in `initialize` and
//! takes `text/event-stream` gets its `tools/call`, `resources/read` and
//! `prompts/get` answered as an SSE stream ([`stream`]). The request runs
//! with a fresh `run_id`; while it runs, every interaction of its engine
//! session and run that opens (a server's form or URL elicitation, in
//! either of the server's eras, or an approval of a `confirm` tool) is sent
//! on the stream as an `elicitation/create` request whose id is
//! `sy-<interaction id>`. Approvals are a form with no fields: accept
//! approves, decline denies. URL elicitations go only to a client that
//! declared `elicitation.url`; the others stay for the engine session's
//! other subscribers (`switchyard interactions`). Then the request's
//! response ends the stream. A 2025-11-25
//! `tasks/result` is answered the same way, carrying the questions of its
//! task's call (`super::tasks`).
//!
//! The client's answer is a JSON-RPC response POSTed in the same session,
//! to any replica ([`client_answered`]): it answers the interaction, which
//! is a record in the store, so the replica running the call sees it.
//! A client that goes away (the stream closes) cancels its request.

use super::ingress::{Accepts, Message};
use super::respond::{self, McpError};
use super::{Ctx, Endpoint};
use crate::auth::Caller;
use crate::model::interaction::{InteractionRecord, Kind, Status};
use crate::model::mcp_session::{McpSessionRecord, Scope};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;
use switchyard_mcp::era::Era;
use switchyard_mcp::methods;

/// The prefix of the ids of the requests this endpoint sends a client.
pub const ID_PREFIX: &str = "sy-";

/// The methods whose interactions reach the client.
pub(super) const ASKING: &[&str] = &[
    methods::TOOLS_CALL,
    methods::RESOURCES_READ,
    methods::PROMPTS_GET,
];

/// Whether request `msg` of 2025-11-25 session `session` is answered as a
/// stream that carries the call's questions (and its progress and log
/// messages, when it asked for them).
pub fn asks(session: &McpSessionRecord, accepts: Accepts, msg: &Message) -> bool {
    let asking = ASKING.contains(&msg.method.as_str()) || msg.method == methods::TASKS_RESULT;
    accepts.sse && asking && session.client_capabilities.get("elicitation").is_some()
}

/// Whose questions request `msg` carries: a `tasks/result`, those of its
/// task's call (2025-11-25 tasks: "input_required"; `Some` record); any
/// other request, those of a fresh run of its own (the run).
async fn asker_of(
    ep: &Endpoint,
    session: &McpSessionRecord,
    msg: &Message,
) -> (String, Option<crate::model::background::BackgroundRecord>) {
    if msg.method == methods::TASKS_RESULT
        && let Some(id) = msg.params.get("taskId").and_then(Value::as_str)
        && let Ok(Some(rec)) = ep.cp.background.get(id).await
        && rec.session_id == session.engine_session
    {
        return (rec.run_id.clone(), Some(rec));
    }
    (switchyard_common::ids::new_id(), None)
}

/// The `elicitation/create` params for interaction `rec`, if this client
/// may get it: the server's own params for a form or URL (as sent), a
/// field-less form for an approval. `None`: a URL for a client without
/// `elicitation.url`, or a record without params.
pub(super) fn question(rec: &InteractionRecord, capabilities: &Value) -> Option<Value> {
    match rec.kind {
        Kind::Approval => Some(json!({
            "mode": "form",
            "message": format!("{} (accept to approve, decline to deny)", rec.message),
            "requestedSchema": {"type": "object", "properties": {}},
        })),
        Kind::Url if capabilities["elicitation"].get("url").is_none() => None,
        Kind::Form | Kind::Url => serde_json::from_str(rec.params.as_ref()?.get()).ok(),
    }
}

/// One SSE event carrying `message`, for the stream's channel.
fn event(message: &Value) -> Result<bytes::Bytes, std::convert::Infallible> {
    Ok(respond::sse_event(message))
}

/// Answers request `msg` of session `session` as an SSE stream (module
/// docs).
pub fn stream(
    ep: Arc<Endpoint>,
    scope: Scope,
    caller: Option<Caller>,
    session: McpSessionRecord,
    h: HeaderMap,
    msg: Message,
    accepts: Accepts,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::convert::Infallible>>(16);
    let log_level = super::logging::level(Era::Legacy, Some(&session), &msg).unwrap_or_default();
    let (progress, mut progressed) = match super::notifications_wanted(accepts, &msg, log_level) {
        Some((observer, rx)) => (Some(observer), Some(rx)),
        None => (None, None),
    };
    // Subscribed before the request starts: no question is missed.
    let mut changes = ep.cp.state.subscribe();
    tokio::spawn(async move {
        let (run, task) = asker_of(&ep, &session, &msg).await;
        let asked_here = |q: &InteractionRecord| match &task {
            Some(bg) => of_background_call(bg, q),
            None => q.run_id == run,
        };
        let ctx = Ctx {
            ep: &ep,
            scope: &scope,
            caller: caller.as_ref(),
            era: Era::Legacy,
            session_id: session.engine_session.clone(),
            run_id: run.clone(),
            progress,
            log_level,
            tasks: super::tasks_declared(Era::Legacy, Some(&session.client_capabilities), &msg),
        };
        let work = super::answer(&ctx, &h, &msg);
        tokio::pin!(work);
        let mut asked = HashSet::new();
        let mut watching = true;
        let caps = &session.client_capabilities;
        let outcome = loop {
            // Whatever opened meanwhile (also when the watch lagged).
            for rec in open_where(&ep, &session.engine_session, &asked_here) {
                if asked.insert(rec.id.clone())
                    && let Some(mut params) = question(&rec, caps)
                {
                    if let Some(bg) = &task {
                        relate_to(&mut params, &bg.id);
                    }
                    let request = json!({"jsonrpc": "2.0", "id": format!("{ID_PREFIX}{}", rec.id), "method": methods::ELICIT, "params": params});
                    if tx.send(event(&request)).await.is_err() {
                        return;
                    }
                }
            }
            tokio::select! {
                r = &mut work => break r,
                // The call's progress, as it comes.
                n = async { progressed.as_mut().expect("guarded").recv().await }, if progressed.is_some() => match n.and_then(|n| serde_json::from_str::<Value>(&n).ok()) {
                    Some(n) => {
                        if tx.send(event(&n)).await.is_err() {
                            return;
                        }
                    }
                    None => progressed = None,
                },
                // Any change (or a lag) may have opened one: look again.
                c = changes.recv(), if watching => {
                    if matches!(c, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                        watching = false;
                    }
                }
                // The client went away: dropping the request cancels it.
                _ = tx.closed() => return,
            }
        };
        // Progress sent before the outcome goes before the response.
        while let Some(n) = progressed.as_mut().and_then(|p| p.try_recv().ok()) {
            if let Ok(n) = serde_json::from_str::<Value>(&n)
                && tx.send(event(&n)).await.is_err()
            {
                return;
            }
        }
        let message = respond::message(msg.id.as_ref(), &msg.method, Era::Legacy, outcome);
        let _ = tx.send(event(&message)).await;
    });
    respond::sse_response(rx)
}

/// The open interactions of `session` and `run`, oldest first.
pub(super) fn open_of(ep: &Endpoint, session: &str, run: &str) -> Vec<InteractionRecord> {
    open_where(ep, session, &|r| r.run_id == run)
}

/// The open interactions of `session` that `keep` keeps, oldest first.
pub(super) fn open_where(
    ep: &Endpoint,
    session: &str,
    keep: &dyn Fn(&InteractionRecord) -> bool,
) -> Vec<InteractionRecord> {
    let snap = ep.cp.state.snapshot();
    let mut open: Vec<InteractionRecord> = snap
        .interactions
        .get(session)
        .map(|m| {
            m.values()
                .filter(|r| r.status == Status::Open && keep(r))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    open.sort_by_key(|r| r.created_at_ms);
    open
}

/// Points the `_meta[related-task]` of question `params` (set when a
/// server asks about its own task) at the client's task `id`.
pub(super) fn relate_to(params: &mut Value, id: &str) {
    if let Some(related) = params
        .get_mut("_meta")
        .and_then(|m| m.get_mut(switchyard_mcp::meta::RELATED_TASK))
    {
        *related = json!({"taskId": id});
    }
}

/// Whether question `q` is one of background call `bg`'s (a client's
/// task, `super::tasks`): asked with the call's run while it was in the
/// foreground, or, once it moved (questions then have no run), asked by
/// its server about its server task (`_meta[related-task]`), or about its
/// tool when the server runs no task (wait mode).
pub(super) fn of_background_call(
    bg: &crate::model::background::BackgroundRecord,
    q: &InteractionRecord,
) -> bool {
    if !bg.run_id.is_empty() && q.run_id == bg.run_id {
        return true;
    }
    if !q.run_id.is_empty() || q.server != bg.server {
        return false;
    }
    if bg.task_id.is_empty() {
        return q.tool == bg.tool;
    }
    let related = q
        .params
        .as_ref()
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .and_then(|p| {
            p.pointer("/_meta/io.modelcontextprotocol~1related-task/taskId")
                .cloned()
        });
    related.as_ref().and_then(Value::as_str) == Some(bg.task_id.as_str())
}

/// A client's JSON-RPC response `msg` in session `session`: the answer to
/// the interaction its id names (`sy-<id>`). A result's `action` is the
/// answer (`accept` with its `content`, `decline`, `cancel`; for an
/// approval, accept approves and decline denies); an error cancels. Errors
/// (400): an id this endpoint did not send, an answer the interaction
/// refuses (a form answer that does not match its schema cancels it, as
/// the client cannot answer twice).
pub async fn client_answered(
    ep: &Endpoint,
    session: &McpSessionRecord,
    msg: &Message,
) -> Result<(), McpError> {
    let id = msg
        .id
        .as_ref()
        .and_then(Value::as_str)
        .and_then(|i| i.strip_prefix(ID_PREFIX))
        .ok_or_else(|| {
            McpError::bad_request("a response to a request this endpoint did not send")
        })?;
    let engine = session.engine_session.as_str();
    match answer(ep, engine, id, msg.raw.get("result")).await {
        Ok(()) => Ok(()),
        Err(Refused::Invalid(why)) => {
            let _ = ep.cp.interactions.answer(engine, id, "cancel", "").await;
            Err(McpError::bad_request(format!(
                "the answer to {ID_PREFIX}{id} was refused, and the question cancelled: {why}"
            )))
        }
        Err(Refused::Other(e)) => Err(McpError::bad_request(format!(
            "the answer to {ID_PREFIX}{id}: {e}"
        ))),
    }
}

/// Why an answer was not taken.
pub(super) enum Refused {
    /// The answer does not fit the question (a form's schema); the
    /// interaction stays open.
    Invalid(String),
    /// Anything else (unknown, already answered, the store).
    Other(crate::interactions::InteractionError),
}

/// Answers interaction `id` of engine session `engine` with a client's
/// `ElicitResult` `result` (`None`: the client answered with an error,
/// which cancels): `action` is the answer (`accept` with its `content`,
/// `decline`, `cancel`; for an approval, accept approves and decline
/// denies).
/// Answers the interactions of `session` among `open` that `responses`
/// (`inputResponses`: interaction id -> `ElicitResult`) name, and returns
/// the ids answered; other keys are ignored (mrtr "Error Handling"). An
/// answer that does not fit its question leaves it open, to be asked
/// again.
pub(super) async fn answer_open(
    ep: &Endpoint,
    session: &str,
    open: &[InteractionRecord],
    responses: &serde_json::Map<String, Value>,
) -> Vec<String> {
    let open: Vec<&str> = open.iter().map(|r| r.id.as_str()).collect();
    let mut answered = Vec::new();
    for (key, response) in responses {
        if !open.contains(&key.as_str()) {
            continue;
        }
        match answer(ep, session, key, Some(response)).await {
            Ok(()) => answered.push(key.clone()),
            Err(Refused::Invalid(why)) => {
                tracing::info!(interaction = %key, %why, "an MCP client's answer does not fit its question; asking again");
            }
            Err(Refused::Other(e)) => {
                tracing::info!(interaction = %key, error = %e, "an MCP client's answer was not taken");
            }
        }
    }
    answered
}

pub(super) async fn answer(
    ep: &Endpoint,
    engine: &str,
    id: &str,
    result: Option<&Value>,
) -> Result<(), Refused> {
    let kind = ep
        .cp
        .state
        .snapshot()
        .interactions
        .get(engine)
        .and_then(|m| m.get(id))
        .map(|r| r.kind);
    let action = result
        .and_then(|r| r.get("action"))
        .and_then(Value::as_str)
        .unwrap_or("cancel");
    let action = match (kind, action) {
        (Some(Kind::Approval), "accept") => "approve",
        (Some(Kind::Approval), "decline") => "deny",
        (_, a) => a,
    };
    let content = result
        .and_then(|r| r.get("content"))
        .map(Value::to_string)
        .unwrap_or_default();
    match ep
        .cp
        .interactions
        .answer(engine, id, action, &content)
        .await
    {
        Ok(_) => Ok(()),
        Err(crate::interactions::InteractionError::Invalid(why)) => Err(Refused::Invalid(why)),
        Err(e) => Err(Refused::Other(e)),
    }
}
