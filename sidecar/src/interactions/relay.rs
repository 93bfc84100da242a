//! Attribution: one upstream connection's side of the stage. The [`Relay`]
//! keeps the contexts of the calls in flight on the connection (and the
//! session the connection is bound to, if any), decides whose a server
//! request is (see [`super`], "Attribution"), audits what it declines, and
//! dispatches: 2025-11-25 `elicitation/create` to [`super::elicitation`],
//! `roots/list` to [`super::roots`], `notifications/elicitation/complete`
//! to the handler, and a -32042 error's URL elicitations back to the user.
//! A question attributed to a session's calls is withdrawn (`cancel`, and
//! its card closed) once the last of them ends.

use super::elicitation::{self, Asked, InteractionKind, Together};
use super::{CallContext, Interactions, roots};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use switchyard_mcp::meta;
use switchyard_mcp::methods::{ELICIT, ELICITATION_COMPLETE, LIST_ROOTS};
use tokio_util::sync::CancellationToken;

/// URL elicitations remembered per session for completion notifications.
const REMEMBERED_URL_ELICITATIONS: usize = 1024;

/// Why a request could not be attributed to one session.
#[derive(Debug)]
pub(super) struct Declined {
    pub(super) reason: String,
    pub(super) calls: Vec<CallContext>,
}

#[derive(Debug, Default)]
struct RelayState {
    next_call: u64,
    /// Calls in flight on this session, by entry order.
    in_flight: BTreeMap<u64, CallContext>,
    /// The last call's context (for a connection bound to a session).
    last: Option<CallContext>,
    /// URL elicitations we relayed, for `notifications/elicitation/complete`.
    url_elicitations: HashMap<String, CallContext>,
    url_order: VecDeque<String>,
    /// Per session: its calls in flight, and a token cancelled when the
    /// last of them ends ([`Relay::until_idle`]).
    sessions: HashMap<String, (usize, CancellationToken)>,
}

/// One upstream session's side of the stage: the calls in flight, and the
/// answers to the server's questions.
#[derive(Debug)]
pub struct Relay {
    server: String,
    interactions: Option<Interactions>,
    bound_session: Option<String>,
    state: Mutex<RelayState>,
}

/// Keeps a call's context in flight until dropped.
#[derive(Debug)]
pub struct InFlight {
    relay: Arc<Relay>,
    key: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.relay.lock();
        let Some(context) = state.in_flight.remove(&self.key) else {
            return;
        };
        if let Some((calls, idle)) = state.sessions.get_mut(&context.session_id) {
            *calls -= 1;
            if *calls == 0 {
                idle.cancel();
                state.sessions.remove(&context.session_id);
            }
        }
    }
}

/// The context of a question asked while `calls` (at least one, all of
/// one session) are in flight: the call's own when there is one (or when
/// all are of one run and tool). Otherwise which call asked cannot be
/// known on a shared connection, so the question is the session's: it
/// names every tool that could have asked (`book or cancel`), and has the
/// run and the client only when all share them, and no progress sink.
fn one_sessions(calls: &[CallContext]) -> CallContext {
    let last = calls.last().expect("one call at least");
    let same_run = calls.iter().all(|c| c.run_id == last.run_id);
    if same_run && calls.iter().all(|c| c.tool == last.tool) {
        return last.clone();
    }
    let mut tools: Vec<&str> = calls.iter().map(|c| c.tool.as_str()).collect();
    tools.sort_unstable();
    tools.dedup();
    CallContext {
        session_id: last.session_id.clone(),
        run_id: if same_run {
            last.run_id.clone()
        } else {
            String::new()
        },
        tool: tools.join(" or "),
        roots: last.roots.clone(),
        progress: None,
        client: if calls.iter().all(|c| c.client == last.client) {
            last.client.clone()
        } else {
            None
        },
        log_level: None,
    }
}

impl Relay {
    /// A relay for `server`. `bound_session`: the connection belongs to
    /// this session (a per-session Streamable HTTP connection).
    pub fn new(
        server: &str,
        interactions: Option<Interactions>,
        bound_session: Option<String>,
    ) -> Self {
        Relay {
            server: server.to_owned(),
            interactions,
            bound_session,
            state: Mutex::new(RelayState::default()),
        }
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Whether interactions are handled (and so declared).
    pub fn interactive(&self) -> bool {
        self.interactions.is_some()
    }

    /// How interactions are handled, if they are.
    pub fn interactions(&self) -> Option<&Interactions> {
        self.interactions.as_ref()
    }

    /// The session this connection is bound to, if any.
    pub fn bound_session(&self) -> Option<&str> {
        self.bound_session.as_deref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RelayState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a call in flight until the guard is dropped.
    pub fn enter(self: &Arc<Self>, context: CallContext) -> InFlight {
        let mut state = self.lock();
        state.next_call += 1;
        let key = state.next_call;
        state
            .sessions
            .entry(context.session_id.clone())
            .or_insert_with(|| (0, CancellationToken::new()))
            .0 += 1;
        state.in_flight.insert(key, context.clone());
        state.last = Some(context);
        InFlight {
            relay: self.clone(),
            key,
        }
    }

    /// Cancelled when `session` has no call in flight on this connection
    /// any more; `None` when it has none now. A question attributed to the
    /// session's calls is withdrawn then: none of them waits for it.
    pub(super) fn until_idle(&self, session: &str) -> Option<CancellationToken> {
        self.lock()
            .sessions
            .get(session)
            .map(|(_, idle)| idle.clone())
    }

    /// The contexts of the calls in flight, oldest first.
    pub fn in_flight(&self) -> Vec<CallContext> {
        self.lock().in_flight.values().cloned().collect()
    }

    /// Whose is a server request with these params (see the module docs)?
    pub(super) fn attribute(&self, params: &Value) -> Result<CallContext, Declined> {
        if let Some(task) = params.get("_meta").and_then(|m| m.get(meta::RELATED_TASK)) {
            let task_id = task.get("taskId").and_then(Value::as_str).unwrap_or("");
            // Hook for the tasks stage: the task's initiator, wherever the
            // request arrives.
            let initiator = self
                .interactions
                .as_ref()
                .and_then(|i| i.tasks.as_ref())
                .and_then(|t| t.initiator(task_id));
            return initiator.ok_or_else(|| Declined {
                reason: format!(
                    "the request relates to task {task_id:?}, whose initiator is not known"
                ),
                calls: Vec::new(),
            });
        }
        let state = self.lock();
        let calls: Vec<CallContext> = state.in_flight.values().cloned().collect();
        let mut sessions: Vec<&str> = calls.iter().map(|c| c.session_id.as_str()).collect();
        sessions.sort_unstable();
        sessions.dedup();
        match (sessions.len(), &self.bound_session) {
            (1, _) => Ok(one_sessions(&calls)),
            (0, Some(session)) => Ok(match &state.last {
                // No call in flight: the session's roots from its last call.
                Some(last) if &last.session_id == session => CallContext {
                    session_id: session.clone(),
                    roots: last.roots.clone(),
                    ..CallContext::default()
                },
                _ => CallContext {
                    session_id: session.clone(),
                    ..CallContext::default()
                },
            }),
            (0, None) => Err(Declined {
                reason: "no call is in flight on the server's connection".into(),
                calls,
            }),
            (n, _) => Err(Declined {
                reason: format!(
                    "calls from {n} sessions are in flight on the server's shared connection"
                ),
                calls,
            }),
        }
    }

    /// Writes the audit record of a declined attribution.
    fn audit_declined(&self, method: &str, declined: &Declined) {
        // Outside any call (e.g. the `roots/list` many servers send right
        // after the handshake) a decline is the normal answer: DEBUG. With
        // calls in flight that could have owned it, INFO.
        if declined.calls.is_empty() {
            tracing::debug!(server = %self.server, %method, reason = %declined.reason, "declining a server request: no call is in flight to attribute it to");
        } else {
            tracing::info!(server = %self.server, %method, reason = %declined.reason, "declining a server request: it cannot be attributed to one session");
        }
        let Some(interactions) = &self.interactions else {
            return;
        };
        let mut sessions: Vec<&str> = declined
            .calls
            .iter()
            .map(|c| c.session_id.as_str())
            .collect();
        sessions.sort_unstable();
        sessions.dedup();
        let mut tools: Vec<&str> = declined.calls.iter().map(|c| c.tool.as_str()).collect();
        tools.sort_unstable();
        tools.dedup();
        let calls: Vec<Value> = declined
            .calls
            .iter()
            .map(|c| json!({"session": c.session_id, "run": c.run_id, "tool": c.tool}))
            .collect();
        interactions.audit.record(json!({
            "kind": "interaction.attribution_declined",
            "server": self.server,
            "method": method,
            "tools": tools,
            "sessions": sessions,
            "calls": calls,
            "reason": declined.reason,
        }));
    }

    /// Answers a 2025-11-25 server request this stage handles:
    /// `Some(Ok(result))`, `Some(Err((code, message)))`, or `None` when the
    /// method is not ours (or not declared), for the caller to refuse.
    pub async fn server_request(
        &self,
        method: &str,
        params: Value,
    ) -> Option<Result<Value, (i64, String)>> {
        if !self.interactive() {
            return None;
        }
        match method {
            ELICIT => {
                let kind = match InteractionKind::of(&params) {
                    Ok(kind) => kind,
                    // client/elicitation, "Error Handling": a mode not declared.
                    Err(e) => return Some(Err((-32602, e))),
                };
                Some(Ok(match self.attribute(&params) {
                    Ok(context) => self.elicit_while_called(&context, kind, params).await,
                    Err(declined) => {
                        self.audit_declined(ELICIT, &declined);
                        elicitation::decline()
                    }
                }))
            }
            LIST_ROOTS => Some(match self.attribute(&params) {
                Ok(context) => Ok(roots::list(self, &context, params, Asked::default()).await),
                Err(declined) => {
                    self.audit_declined(LIST_ROOTS, &declined);
                    Err((
                        -32603,
                        format!(
                            "roots/list cannot be attributed to one session: {}",
                            declined.reason
                        ),
                    ))
                }
            }),
            _ => None,
        }
    }

    /// A notification from the server: passes on the completion of a URL
    /// elicitation this session relayed; unknown ids are ignored
    /// (client/elicitation: clients "MUST ignore notifications referencing
    /// unknown or already-completed IDs").
    pub fn notification(&self, msg: &Value) {
        if msg.get("method").and_then(Value::as_str) != Some(ELICITATION_COMPLETE) {
            return;
        }
        let Some(interactions) = &self.interactions else {
            return;
        };
        let Some(id) = msg
            .get("params")
            .and_then(|p| p.get("elicitationId"))
            .and_then(Value::as_str)
        else {
            return;
        };
        let context = {
            let mut state = self.lock();
            let context = state.url_elicitations.remove(id);
            if context.is_some() {
                state.url_order.retain(|k| k != id);
            }
            context
        };
        match context {
            Some(context) => {
                tracing::info!(server = %self.server, elicitation_id = %id, session = %context.session_id, "URL elicitation completed");
                tokio::spawn(interactions.handler.complete(&self.server, &context, id));
            }
            None => {
                tracing::debug!(server = %self.server, elicitation_id = %id, "ignoring the completion of an unknown elicitation");
            }
        }
    }

    /// A 2025-11-25 `elicitation/create` attributed to `context`: asked
    /// while the session has a call in flight here. When its last call
    /// ends first (cancelled, timed out, stopped at shutdown), the question
    /// is withdrawn: the server gets `cancel`, and dropping the wait closes
    /// the card ([`super::ControlPlaneInteractions`]).
    async fn elicit_while_called(
        &self,
        context: &CallContext,
        kind: InteractionKind,
        params: Value,
    ) -> Value {
        let Some(idle) = self.until_idle(&context.session_id) else {
            return self
                .elicit(context, kind, params, (ELICIT, Asked::default()))
                .await;
        };
        tokio::select! {
            answer = self.elicit(context, kind, params, (ELICIT, Asked::default())) => answer,
            () = idle.cancelled() => {
                tracing::info!(server = %self.server, session = %context.session_id, "the calls that could have asked ended; withdrawing the question");
                elicitation::cancel()
            }
        }
    }

    /// Asks the user of `context`'s session (see [`elicitation::ask`]); a
    /// call without a session is declined and audited (as `method`), and a
    /// URL elicitation is remembered for its completion notification.
    pub(super) async fn elicit(
        &self,
        context: &CallContext,
        kind: InteractionKind,
        params: Value,
        (method, asked): (&str, Asked<'_>),
    ) -> Value {
        let Some(interactions) = &self.interactions else {
            return elicitation::decline();
        };
        if context.session_id.is_empty() {
            self.audit_declined(
                method,
                &Declined {
                    reason: "the call belongs to no session".into(),
                    calls: vec![context.clone()],
                },
            );
            return elicitation::decline();
        }
        if kind == InteractionKind::Url
            && let Some(id) = params.get("elicitationId").and_then(Value::as_str)
        {
            let mut state = self.lock();
            if state
                .url_elicitations
                .insert(id.to_owned(), context.clone())
                .is_none()
            {
                state.url_order.push_back(id.to_owned());
            }
            while state.url_order.len() > REMEMBERED_URL_ELICITATIONS {
                if let Some(old) = state.url_order.pop_front() {
                    state.url_elicitations.remove(&old);
                }
            }
        }
        elicitation::ask(interactions, &self.server, context, (kind, params), asked).await
    }

    /// A call failed with -32042: asks for each of `data.elicitations` as a
    /// URL interaction of the call's session. True when there was at least
    /// one and every one was accepted (the call may then be retried).
    pub async fn url_elicitations_required(
        &self,
        context: &CallContext,
        data: Option<&Value>,
    ) -> bool {
        if !self.interactive() {
            return false;
        }
        let Some(list) = data
            .and_then(|d| d.get("elicitations"))
            .and_then(Value::as_array)
        else {
            return false;
        };
        if list.is_empty()
            || !list
                .iter()
                .all(|e| e.is_object() && InteractionKind::of(e) == Ok(InteractionKind::Url))
        {
            tracing::warn!(server = %self.server, "URLElicitationRequiredError without usable URL elicitations; returning it as is");
            return false;
        }
        let together = Together::of(list.len());
        let asked = Asked {
            key: "",
            together: together.as_ref(),
        };
        let answers = futures::future::join_all(list.iter().map(|e| {
            self.elicit(
                context,
                InteractionKind::Url,
                e.clone(),
                ("URLElicitationRequiredError", asked),
            )
        }))
        .await;
        answers
            .iter()
            .all(|a| a.get("action") == Some(&json!("accept")))
    }
}
