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
/// messages, when it asked for them): the client takes SSE and declared
/// `elicitation` or `roots`.
pub fn asks(session: &McpSessionRecord, accepts: Accepts, msg: &Message) -> bool {
    let asking = ASKING.contains(&msg.method.as_str()) || msg.method == methods::TASKS_RESULT;
    let caps = &session.client_capabilities;
    accepts.sse && asking && (caps.get("elicitation").is_some() || caps.get("roots").is_some())
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

/// Interaction `rec` as a request to a client with `capabilities`, if
/// that client may get it: the method and its params. An approval is a
/// field-less form (`elicitation/create`), a form or URL the server's own
/// `elicitation/create` params (as sent), a roots question the server's
/// `roots/list` params. `None`: a question the client did not declare
/// (`elicitation`, `elicitation.url`, `roots`), or a record without params.
pub(super) fn question(
    rec: &InteractionRecord,
    capabilities: &Value,
) -> Option<(&'static str, Value)> {
    let elicits = capabilities
        .get("elicitation")
        .is_some_and(Value::is_object);
    match rec.kind {
        Kind::Roots if capabilities.get("roots").is_none() => None,
        Kind::Roots => Some((
            methods::LIST_ROOTS,
            rec.params
                .as_ref()
                .and_then(|p| serde_json::from_str(p.get()).ok())
                .unwrap_or_else(|| json!({})),
        )),
        _ if !elicits => None,
        Kind::Approval => Some((
            methods::ELICIT,
            json!({
                "mode": "form",
                "message": format!("{} (accept to approve, decline to deny)", rec.message),
                "requestedSchema": {"type": "object", "properties": {}},
            }),
        )),
        Kind::Url if capabilities["elicitation"].get("url").is_none() => None,
        Kind::Form | Kind::Url => Some((
            methods::ELICIT,
            serde_json::from_str(rec.params.as_ref()?.get()).ok()?,
        )),
    }
}

/// A URL question for a 2025-11-25 client carries the `elicitationId`
/// that era requires (`ElicitRequestURLParams`): the server's, else the
/// interaction's id (a 2026-07-28 server's question has none; a client
/// drops a request without it, and the question would go unanswered).
fn with_elicitation_id(rec: &InteractionRecord, params: &mut Value) {
    if rec.kind != Kind::Url || params.get("elicitationId").is_some_and(Value::is_string) {
        return;
    }
    let id = match rec.elicitation_id.is_empty() {
        true => &rec.id,
        false => &rec.elicitation_id,
    };
    if let Some(p) = params.as_object_mut() {
        p.insert("elicitationId".into(), id.as_str().into());
    }
}

/// The key question `rec` is shown under, among the open questions
/// `open`, in `inputRequests`: the server's own key (a 2026-07-28 server's
/// `inputRequests` key, so a client sees the server's names) when no
/// other open question has it, else the interaction id.
pub(super) fn key_of(rec: &InteractionRecord, open: &[InteractionRecord]) -> String {
    let shared = |k: &str| open.iter().filter(|o| o.key == k).count() > 1;
    if rec.key.is_empty() || shared(&rec.key) {
        rec.id.clone()
    } else {
        rec.key.clone()
    }
}

/// How long the questions a server asked at once (one `inputRequests`, or
/// the elicitations of one -32042 error: `InteractionRecord::together_id`)
/// wait for the rest of them before a 2026-07-28 client is asked the ones
/// that are open, ms after the first opened. The sidecar registers each
/// with an `Interact` of its own, all at once, so they open within
/// milliseconds; this bounds the wait for one that never opens.
pub(super) const TOGETHER_WAIT_MS: i64 = 1_000;

/// Of `open` (questions of `session`), the ones a 2026-07-28 client may be
/// asked now, and when the first of the others may be (ms since the
/// epoch): a question asked alone may be asked at once; one asked with
/// others once all of them are in the session's read model (open or not),
/// or [`TOGETHER_WAIT_MS`] after the first of them opened. So questions
/// asked together reach the client in one `input_required`.
pub(super) fn ready(
    ep: &Endpoint,
    session: &str,
    open: Vec<InteractionRecord>,
) -> (Vec<InteractionRecord>, Option<i64>) {
    if open.iter().all(|r| r.together_id.is_empty()) {
        return (open, None);
    }
    let snap = ep.cp.state.snapshot();
    let of_session = snap
        .interactions
        .get(session)
        .into_iter()
        .flat_map(|m| m.values());
    ready_of(open, of_session, crate::model::now_ms())
}

/// [`ready`] at `now`, with `of_session` the session's questions.
fn ready_of<'a>(
    open: Vec<InteractionRecord>,
    of_session: impl Iterator<Item = &'a InteractionRecord>,
    now: i64,
) -> (Vec<InteractionRecord>, Option<i64>) {
    // Per group: how many are in, and when the first opened.
    let mut groups: std::collections::HashMap<&str, (u32, i64)> = Default::default();
    for r in of_session.filter(|r| !r.together_id.is_empty()) {
        let g = groups
            .entry(r.together_id.as_str())
            .or_insert((0, i64::MAX));
        *g = (g.0.saturating_add(1), g.1.min(r.created_at_ms));
    }
    let mut next: Option<i64> = None;
    let ready = open
        .into_iter()
        .filter(|r| {
            if r.together_id.is_empty() {
                return true;
            }
            let (seen, first) = groups
                .get(r.together_id.as_str())
                .copied()
                .unwrap_or((1, r.created_at_ms));
            let due = first.saturating_add(TOGETHER_WAIT_MS);
            if seen >= r.together_count || now >= due {
                return true;
            }
            next = Some(next.map_or(due, |n| n.min(due)));
            false
        })
        .collect();
    (ready, next)
}

/// The `inputRequests` of the open questions `open` that a client with
/// `capabilities` may get ([`question`]), under their keys ([`key_of`]),
/// each params passed through `adjust` first.
pub(super) fn input_requests(
    open: &[InteractionRecord],
    capabilities: &Value,
    adjust: impl Fn(&mut Value),
) -> serde_json::Map<String, Value> {
    open.iter()
        .filter_map(|rec| {
            let (method, mut params) = question(rec, capabilities)?;
            adjust(&mut params);
            Some((
                key_of(rec, open),
                json!({"method": method, "params": params}),
            ))
        })
        .collect()
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
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::convert::Infallible>>(
        respond::SSE_BUFFER,
    );
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
            client: super::client_capabilities(&scope, Some(&session.client_capabilities), true),
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
                    && let Some((method, mut params)) = question(&rec, caps)
                {
                    with_elicitation_id(&rec, &mut params);
                    if let Some(bg) = &task {
                        relate_to(&mut params, &bg.id);
                    }
                    let request = json!({"jsonrpc": "2.0", "id": format!("{ID_PREFIX}{}", rec.id), "method": method, "params": params});
                    if tx.send(event(&request)).await.is_err() {
                        return;
                    }
                }
            }
            tokio::select! {
                r = &mut work => break r,
                // The call's progress, as it comes.
                // Best effort: dropped when the client is behind (memory
                // stays bounded; questions and the response never are).
                n = async { progressed.as_mut().expect("guarded").recv().await }, if progressed.is_some() => match n.and_then(|n| serde_json::from_str::<Value>(&n).ok()) {
                    Some(n) => {
                        if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) = tx.try_send(event(&n)) {
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
                && let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) =
                    tx.try_send(event(&n))
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

/// Answers the interactions of `session` among `open` that `responses`
/// (`inputResponses`: key -> `ElicitResult` or `ListRootsResult`) name,
/// by the key each is shown under ([`key_of`]) or its interaction id, and
/// returns the ids answered; other keys are ignored (mrtr "Error
/// Handling"). An answer that is not an object, or does not fit its
/// question, leaves it open, to be asked again.
pub(super) async fn answer_open(
    ep: &Endpoint,
    session: &str,
    open: &[InteractionRecord],
    responses: &serde_json::Map<String, Value>,
) -> Vec<String> {
    let mut answered = Vec::new();
    for rec in open {
        let key = key_of(rec, open);
        let Some(response) = responses.get(&key).or_else(|| responses.get(&rec.id)) else {
            continue;
        };
        // Not a result object (an `ElicitResult` or `ListRootsResult`):
        // not an answer; the question stays open and is asked again.
        if !response.is_object() {
            tracing::info!(interaction = %rec.id, "an MCP client's inputResponses entry is not an object; asking again");
            continue;
        }
        let key = &rec.id;
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

/// Answers interaction `id` of engine session `engine` with a client's
/// `ElicitResult` `result` (`None`: the client answered with an error,
/// which cancels): `action` is the answer (`accept` with its `content`,
/// `decline`, `cancel`; for an approval, accept approves and decline
/// denies). A roots question's answer is a `ListRootsResult`, taken as
/// `accept` with its roots. Errors: [`Refused::Invalid`] for a result
/// that is not an object or (but for roots) has no string `action`, or
/// that the interaction refuses; [`Refused::Other`] for an id that names
/// no interaction of `engine`, or one already answered.
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
    let Some(kind) = kind else {
        return Err(Refused::Other(
            crate::interactions::InteractionError::NotFound {
                session: engine.to_owned(),
                id: id.to_owned(),
            },
        ));
    };
    // An error answer cancels; a result must say what it is (`action` is
    // required by `ElicitResult`): a malformed one is not taken as cancel.
    let action = match result {
        None => "cancel",
        Some(r) if !r.is_object() => {
            return Err(Refused::Invalid(
                "result: must be an object (an ElicitResult or a ListRootsResult)".into(),
            ));
        }
        Some(_) if kind == Kind::Roots => "accept",
        Some(r) => r.get("action").and_then(Value::as_str).ok_or_else(|| {
            Refused::Invalid(
                "result.action: required, one of \"accept\", \"decline\" or \"cancel\"".into(),
            )
        })?,
    };
    let kind = Some(kind);
    let roots = result.filter(|_| kind == Some(Kind::Roots));
    let action = match (kind, action) {
        (Some(Kind::Roots), _) if roots.is_some() => "accept",
        (Some(Kind::Approval), "accept") => "approve",
        (Some(Kind::Approval), "decline") => "deny",
        (_, a) => a,
    };
    let content = match roots {
        Some(r) => r.to_string(),
        None => result
            .and_then(|r| r.get("content"))
            .map(Value::to_string)
            .unwrap_or_default(),
    };
    match ep
        .cp
        .interactions
        .answer(engine, id, action, &content)
        .await
    {
        Ok(_) => Ok(()),
        Err(crate::interactions::InteractionError::Invalid(why)) => Err(Refused::Invalid(why)),
        Err(e @ crate::interactions::InteractionError::InvalidForm(_)) => {
            Err(Refused::Invalid(e.to_string()))
        }
        Err(e) => Err(Refused::Other(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: &str, kind: Kind, key: &str, params: &str) -> InteractionRecord {
        InteractionRecord {
            id: id.into(),
            session_id: "s".into(),
            run_id: "r".into(),
            kind,
            server: "srv".into(),
            tool: "t".into(),
            message: "Approve?".into(),
            params: serde_json::value::RawValue::from_string(params.into()).ok(),
            url: String::new(),
            url_domain: String::new(),
            elicitation_id: String::new(),
            key: key.into(),
            together_id: String::new(),
            together_count: 0,
            waiter: String::new(),
            status: Status::Open,
            outcome: None,
            reason: String::new(),
            content: None,
            created_at_ms: 0,
            expires_at_ms: 1,
            resolved_at_ms: 0,
        }
    }

    #[test]
    fn url_questions_to_2025_11_25_clients_carry_an_elicitation_id() {
        let mut url = rec(
            "i-1",
            Kind::Url,
            "k",
            r#"{"mode":"url","message":"m","url":"https://x"}"#,
        );
        let caps = json!({"elicitation": {"form": {}, "url": {}}});
        let (_, mut params) = question(&url, &caps).unwrap();
        with_elicitation_id(&url, &mut params);
        assert_eq!(params["elicitationId"], "i-1");
        url.elicitation_id = "theirs".into();
        let (_, mut params) = question(&url, &caps).unwrap();
        with_elicitation_id(&url, &mut params);
        assert_eq!(params["elicitationId"], "theirs");
        let form = rec(
            "i-2",
            Kind::Form,
            "k",
            r#"{"mode":"form","message":"m","requestedSchema":{}}"#,
        );
        let (_, mut params) = question(&form, &caps).unwrap();
        with_elicitation_id(&form, &mut params);
        assert!(params.get("elicitationId").is_none());
    }

    #[test]
    fn questions_keep_the_servers_keys_and_ask_only_what_is_declared() {
        let form = r#"{"message":"Name?","requestedSchema":{"type":"object","properties":{}}}"#;
        let open = vec![
            rec("i1", Kind::Form, "user_name", form),
            rec("i2", Kind::Roots, "client_roots", "{}"),
            rec("i3", Kind::Approval, "", "{}"),
            // Two open questions with one key: shown by id.
            rec("i4", Kind::Form, "twice", form),
            rec("i5", Kind::Form, "twice", form),
        ];
        let both = input_requests(&open, &json!({"elicitation": {}, "roots": {}}), |_| {});
        let keys: Vec<&str> = both.keys().map(String::as_str).collect();
        assert_eq!(keys, ["user_name", "client_roots", "i3", "i4", "i5"]);
        assert_eq!(both["client_roots"]["method"], methods::LIST_ROOTS);
        assert_eq!(both["user_name"]["method"], methods::ELICIT);
        assert_eq!(
            both["i3"]["params"]["requestedSchema"]["properties"],
            json!({})
        );
        // No roots declared: no roots question; no elicitation: no form
        // and no approval.
        let elicits = input_requests(&open, &json!({"elicitation": {}}), |_| {});
        assert!(!elicits.contains_key("client_roots"), "{elicits:?}");
        let roots = input_requests(&open, &json!({"roots": {}}), |_| {});
        assert_eq!(roots.keys().collect::<Vec<_>>(), ["client_roots"]);
    }

    #[test]
    fn questions_asked_together_wait_for_each_other_a_second_at_most() {
        let form = r#"{"message":"Name?","requestedSchema":{"type":"object","properties":{}}}"#;
        let of = |id: &str, group: &str, count: u32, at: i64| InteractionRecord {
            together_id: group.into(),
            together_count: count,
            created_at_ms: at,
            ..rec(id, Kind::Form, id, form)
        };
        let ids = |v: &[InteractionRecord]| v.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
        let alone = of("alone", "", 0, 100);
        let a = of("a", "g", 3, 100);
        let b = of("b", "g", 3, 150);
        // Two of three in: only the one asked alone, and the others are
        // due a second after the first of them opened.
        let (now, next) = ready_of(
            vec![alone.clone(), a.clone(), b.clone()],
            [&alone, &a, &b].into_iter(),
            400,
        );
        assert_eq!((ids(&now), next), (vec!["alone".to_owned()], Some(1_100)));
        // The third is in (answered already counts): all of them.
        let mut c = of("c", "g", 3, 160);
        c.status = Status::Resolved;
        let (now, next) = ready_of(vec![a.clone(), b.clone()], [&a, &b, &c].into_iter(), 400);
        assert_eq!(
            (ids(&now), next),
            (vec!["a".to_owned(), "b".to_owned()], None)
        );
        // The third never came: asked as they are after the wait.
        let (now, next) = ready_of(vec![a.clone(), b.clone()], [&a, &b].into_iter(), 1_100);
        assert_eq!(
            (ids(&now), next),
            (vec!["a".to_owned(), "b".to_owned()], None)
        );
    }
}
