//! Interactions with the user on behalf of the server (design §4 C):
//! elicitation (form and URL mode) and roots, in both protocol eras. The
//! whole stage lives here; the upstream session only calls into it.
//!
//! - **Capabilities.** A session with an [`InteractionHandler`] declares
//!   `elicitation: {form: {}, url: {}}` and `roots: {}` ([`capabilities`]),
//!   in `initialize` and in the modern `clientCapabilities`. Sampling is
//!   never declared. A session without a handler (the probe) declares none.
//! - **Call context.** Each call carries a [`CallContext`] (session, run,
//!   tool, the session's roots). The [`Relay`] of a session keeps the
//!   contexts of the calls in flight.
//! - **2025-11-25 server requests** (`elicitation/create`, `roots/list`)
//!   are attributed ([`Relay::server_request`]): a task-related request
//!   (`_meta["io.modelcontextprotocol/related-task"]`) belongs to the task's
//!   initiator ([`TaskInitiators`], filled in by the tasks stage); otherwise,
//!   if every call in flight on the connection belongs to one session, to
//!   that session; a connection bound to a session (Streamable HTTP: one
//!   connection per server and session) belongs to it. Anything else is
//!   declined (`{"action": "decline"}`, or an error for `roots/list`) and
//!   audited.
//! - **URL elicitation required** (-32042): its `data.elicitations` become
//!   URL interactions of the call's session; when all are accepted the call
//!   is retried once ([`Relay::url_elicitations_required`]).
//!   `notifications/elicitation/complete` is passed on for the elicitations
//!   this session relayed ([`Relay::notification`]).
//! - **2026-07-28 multi round-trip requests**: each entry of an
//!   `input_required` result's `inputRequests` is answered from the call's
//!   own context ([`Relay::answer_inputs`]); sampling is a protocol error.
//!   The retry loop itself is in the upstream session.
//! - A call without a session is never asked about: its elicitations are
//!   declined and audited.
//! - Every interaction is bounded by [`Interactions::timeout`]; when it
//!   passes the server gets `{"action": "cancel"}`.

use crate::upstream::UpstreamError;
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::audit::Audit;
use switchyard_mcp::meta;
use switchyard_mcp::methods::{ELICIT, ELICITATION_COMPLETE, LIST_ROOTS, SAMPLING};

/// Default bound on one interaction.
pub const DEFAULT_INTERACTION_TIMEOUT: Duration = Duration::from_secs(600);
/// URL elicitations remembered per session for completion notifications.
const REMEMBERED_URL_ELICITATIONS: usize = 1024;

/// The client capabilities a session with a handler declares.
pub fn capabilities() -> Value {
    json!({"elicitation": {"form": {}, "url": {}}, "roots": {}})
}

/// What a call belongs to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallContext {
    /// The engine session; empty when the call belongs to none.
    pub session_id: String,
    /// The run within the session, if any.
    pub run_id: String,
    /// The tool name (`prompts/get`: the prompt; `resources/read`: the URI).
    pub tool: String,
    /// The session's roots (MCP `Root` objects), answered to `roots/list`.
    pub roots: Vec<Value>,
}

/// Which kind of elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InteractionKind {
    /// In-band form (`mode` `"form"` or absent).
    Form,
    /// Out-of-band URL (`mode` `"url"`).
    Url,
}

impl InteractionKind {
    /// `form` or `url`.
    pub fn as_str(self) -> &'static str {
        match self {
            InteractionKind::Form => "form",
            InteractionKind::Url => "url",
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
    /// Form or URL.
    pub kind: InteractionKind,
    /// The call (and so the session) it belongs to.
    pub context: CallContext,
    /// The `elicitation/create` params exactly as the server sent them
    /// (for -32042: one entry of `data.elicitations`).
    pub params: Value,
}

/// Asks users. The sidecar's implementation asks the control plane
/// (`SidecarRegistry.Interact`); tests answer in-process.
pub trait InteractionHandler: Send + Sync + std::fmt::Debug {
    /// Asks and returns the MCP `ElicitResult` (`{"action", "content"?}`).
    /// The relay bounds the wait; the handler need not.
    fn interact(&self, interaction: Interaction) -> BoxFuture<'static, Value>;
    /// The server reported URL elicitation `elicitation_id` (asked in
    /// `context`) finished.
    fn complete(
        &self,
        server: &str,
        context: &CallContext,
        elicitation_id: &str,
    ) -> BoxFuture<'static, ()>;
}

/// Who started a task: the hook of the tasks stage (background calls),
/// which attributes task-related server requests to the task's initiator.
pub trait TaskInitiators: Send + Sync + std::fmt::Debug {
    /// The context of the call that created `task_id`, if known.
    fn initiator(&self, task_id: &str) -> Option<CallContext>;
}

/// How a session handles interactions.
#[derive(Debug, Clone)]
pub struct Interactions {
    /// Who asks the user.
    pub handler: Arc<dyn InteractionHandler>,
    /// Where declined attributions are recorded.
    pub audit: Audit,
    /// Bound on one interaction; then the answer is `cancel`.
    pub timeout: Duration,
    /// Initiators of tasks; `None` until the tasks stage tracks them.
    pub tasks: Option<Arc<dyn TaskInitiators>>,
}

impl Interactions {
    /// `handler` with the default timeout, auditing to `audit`.
    pub fn new(handler: Arc<dyn InteractionHandler>, audit: Audit) -> Self {
        Interactions {
            handler,
            audit,
            timeout: DEFAULT_INTERACTION_TIMEOUT,
            tasks: None,
        }
    }
}

/// Why a request could not be attributed to one session.
#[derive(Debug)]
struct Declined {
    reason: String,
    calls: Vec<CallContext>,
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
        self.relay.lock().in_flight.remove(&self.key);
    }
}

fn decline() -> Value {
    json!({"action": "decline"})
}

fn cancel() -> Value {
    json!({"action": "cancel"})
}

/// A fresh random interaction id (128 bits, hex).
pub fn new_interaction_id() -> String {
    format!("{:032x}", rand::random::<u128>())
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
        state.in_flight.insert(key, context.clone());
        state.last = Some(context);
        InFlight {
            relay: self.clone(),
            key,
        }
    }

    /// The contexts of the calls in flight, oldest first.
    pub fn in_flight(&self) -> Vec<CallContext> {
        self.lock().in_flight.values().cloned().collect()
    }

    /// Whose is a server request with these params (see the module docs)?
    fn attribute(&self, params: &Value) -> Result<CallContext, Declined> {
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
            (1, _) => Ok(calls.last().cloned().expect("one call at least")),
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
        tracing::info!(server = %self.server, %method, reason = %declined.reason, "declining a server request: it cannot be attributed to one session");
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
            .map(|c| json!({"session_id": c.session_id, "run_id": c.run_id, "tool": c.tool}))
            .collect();
        interactions.audit.record(json!({
            "event": "interaction.attribution_declined",
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
                    Ok(context) => self.elicit(&context, kind, params, ELICIT).await,
                    Err(declined) => {
                        self.audit_declined(ELICIT, &declined);
                        decline()
                    }
                }))
            }
            LIST_ROOTS => Some(match self.attribute(&params) {
                Ok(context) => Ok(json!({"roots": context.roots})),
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

    /// Asks the user of `context`'s session, bounded by the timeout.
    async fn elicit(
        &self,
        context: &CallContext,
        kind: InteractionKind,
        params: Value,
        method: &str,
    ) -> Value {
        let Some(interactions) = &self.interactions else {
            return decline();
        };
        if context.session_id.is_empty() {
            self.audit_declined(
                method,
                &Declined {
                    reason: "the call belongs to no session".into(),
                    calls: vec![context.clone()],
                },
            );
            return decline();
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
        let interaction = Interaction {
            id: new_interaction_id(),
            server: self.server.clone(),
            kind,
            context: context.clone(),
            params,
        };
        let id = interaction.id.clone();
        tracing::info!(server = %self.server, interaction = %id, kind = kind.as_str(), session = %context.session_id, tool = %context.tool, "asking the user");
        match tokio::time::timeout(
            interactions.timeout,
            interactions.handler.interact(interaction),
        )
        .await
        {
            Ok(answer) => answer,
            Err(_) => {
                tracing::info!(server = %self.server, interaction = %id, timeout_s = interactions.timeout.as_secs_f64(), "interaction timed out; answering cancel");
                cancel()
            }
        }
    }

    /// Answers an `input_required` result's `inputRequests` for the call
    /// in `context`: the `inputResponses` map, same keys. A request the
    /// session did not declare (sampling, always) is a protocol error.
    pub async fn answer_inputs(
        &self,
        requests: &Value,
        context: &CallContext,
    ) -> Result<Value, UpstreamError> {
        let protocol = |msg: String| UpstreamError::protocol(&self.server, msg);
        let Some(requests) = requests.as_object() else {
            return Err(protocol(format!(
                "inputRequests is not an object: {requests}"
            )));
        };
        // Check every entry before asking anyone.
        let mut asks = Vec::with_capacity(requests.len());
        for (key, request) in requests {
            let method = request.get("method").and_then(Value::as_str).unwrap_or("");
            let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
            match method {
                SAMPLING => {
                    return Err(protocol(format!(
                        "the server asked for sampling (inputRequests[{key:?}]), which Switchyard never declares"
                    )));
                }
                ELICIT | LIST_ROOTS if !self.interactive() => {
                    return Err(protocol(format!(
                        "the server asked for {method} (inputRequests[{key:?}]), which this client did not declare"
                    )));
                }
                ELICIT => {
                    let kind = InteractionKind::of(&params)
                        .map_err(|e| protocol(format!("inputRequests[{key:?}]: {e}")))?;
                    asks.push((key.clone(), Some((kind, params))));
                }
                LIST_ROOTS => asks.push((key.clone(), None)),
                other => {
                    return Err(protocol(format!(
                        "inputRequests[{key:?}] has unknown method {other:?}"
                    )));
                }
            }
        }
        let answers = futures::future::join_all(asks.into_iter().map(|(key, ask)| async move {
            let answer = match ask {
                Some((kind, params)) => self.elicit(context, kind, params, ELICIT).await,
                None => json!({"roots": context.roots}),
            };
            (key, answer)
        }))
        .await;
        Ok(Value::Object(answers.into_iter().collect::<Map<_, _>>()))
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
        let answers = futures::future::join_all(list.iter().map(|e| {
            self.elicit(
                context,
                InteractionKind::Url,
                e.clone(),
                "URLElicitationRequiredError",
            )
        }))
        .await;
        answers
            .iter()
            .all(|a| a.get("action") == Some(&json!("accept")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Accept;
    impl InteractionHandler for Accept {
        fn interact(&self, i: Interaction) -> BoxFuture<'static, Value> {
            Box::pin(async move {
                json!({"action": "accept", "content": {"asked": i.context.session_id}})
            })
        }
        fn complete(&self, _: &str, _: &CallContext, _: &str) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
    }

    fn relay(bound: Option<&str>) -> Arc<Relay> {
        Arc::new(Relay::new(
            "s",
            Some(Interactions::new(Arc::new(Accept), Audit::to_log())),
            bound.map(str::to_owned),
        ))
    }

    fn ctx(session: &str) -> CallContext {
        CallContext {
            session_id: session.into(),
            tool: "t".into(),
            roots: vec![json!({"uri": format!("file:///{session}")})],
            ..CallContext::default()
        }
    }

    #[test]
    fn modes() {
        assert_eq!(InteractionKind::of(&json!({})), Ok(InteractionKind::Form));
        assert_eq!(
            InteractionKind::of(&json!({"mode": "url"})),
            Ok(InteractionKind::Url)
        );
        assert!(InteractionKind::of(&json!({"mode": "voice"})).is_err());
    }

    #[tokio::test]
    async fn attribution_needs_one_session() {
        let r = relay(None);
        assert!(r.attribute(&json!({})).is_err(), "nothing in flight");
        let a = r.enter(ctx("a"));
        let a2 = r.enter(ctx("a"));
        assert_eq!(r.attribute(&json!({})).unwrap().session_id, "a");
        let b = r.enter(ctx("b"));
        let declined = r.attribute(&json!({})).unwrap_err();
        assert_eq!(declined.calls.len(), 3);
        drop((a, a2));
        assert_eq!(r.attribute(&json!({})).unwrap().session_id, "b");
        drop(b);
        assert!(r.in_flight().is_empty());
        let task = json!({"_meta": {meta::RELATED_TASK: {"taskId": "t1"}}});
        let _c = r.enter(ctx("c"));
        assert!(r.attribute(&task).unwrap_err().reason.contains("t1"));
    }

    #[tokio::test]
    async fn a_bound_connection_belongs_to_its_session() {
        let r = relay(Some("s1"));
        assert_eq!(r.attribute(&json!({})).unwrap().session_id, "s1");
        drop(r.enter(ctx("s1")));
        assert_eq!(r.attribute(&json!({})).unwrap().roots, ctx("s1").roots);
    }

    #[tokio::test]
    async fn inputs_are_answered_from_the_context() {
        let r = relay(None);
        let requests = json!({
            "b": {"method": "roots/list"},
            "a": {"method": "elicitation/create", "params": {"message": "m", "requestedSchema": {"type": "object"}}},
        });
        let answers = r.answer_inputs(&requests, &ctx("x")).await.unwrap();
        assert_eq!(
            answers,
            json!({"b": {"roots": [{"uri": "file:///x"}]}, "a": {"action": "accept", "content": {"asked": "x"}}})
        );
        let keys: Vec<&String> = answers.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["b", "a"]);
        let sampling = json!({"s": {"method": "sampling/createMessage", "params": {}}});
        let e = r.answer_inputs(&sampling, &ctx("x")).await.unwrap_err();
        assert!(e.to_string().contains("sampling"), "{e}");
        // No session: declined, never asked.
        let answers = r.answer_inputs(&requests, &ctx("")).await.unwrap();
        assert_eq!(answers["a"], json!({"action": "decline"}));
    }
}
