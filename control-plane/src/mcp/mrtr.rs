//! Multi round-trip requests, server side: how a 2026-07-28 client answers
//! the questions of its `tools/call`, `resources/read` or `prompts/get`
//! (basic/patterns/mrtr). Whatever asks (a server's elicitation in either
//! of its eras, an approval of a `confirm` tool) is an interaction of the
//! request's engine session and run (`crate::interactions`); this module
//! puts the open ones to the client as `input_required` and takes its
//! `inputResponses` on the retry.
//!
//! One round ([`serve`]):
//!
//! 1. a request without `requestState` gets an engine session (the URL's,
//!    or one per caller and URL, [`session_for`]) and a fresh run, and its
//!    call starts ([`start`]), run by the round itself until a question
//!    opens, when it goes on in a task of its own;
//! 2. a retry's `requestState` is opened ([`open`]: integrity, binding,
//!    expiry) and spent (once, in the store), and its `inputResponses`
//!    answer the run's open interactions they name; a first request's own
//!    `inputResponses` answer the questions that open, by key, each once;
//! 3. then it waits for the first of: an open interaction of the run that
//!    the client may be asked (its declared `elicitation`, with `url` for
//!    URL elicitations, or `roots` for a server's `roots/list`), answered
//!    as `input_required` with every such question under the server's own
//!    key (else its interaction id: `super::interactions::key_of`) and a
//!    new `requestState`, questions the server asked at once together
//!    (`super::interactions::ready`); or the call's outcome, the result
//!    (or error) of the request.
//!
//! The call outlives the round that asked: it keeps running on the replica
//! that started it, in a task of its own from the first question on, and
//! its outcome is stored (`mcp-outcomes/<run>`, leased), so a retry on any
//! replica finds it. A client that goes away before the first question cancels the call,
//! as for a request that asks nothing; after a question, the call ends
//! with the question's own timeout (`limits.interactionTimeoutSec`), or
//! when its caller has more than `mcp.max_waiting_calls_per_caller` such
//! calls on the replica and it is the oldest ([`Waiting`]).
//!
//! The `requestState` is sealed with rmcp's `RequestStateCodec`
//! (HMAC-SHA256, `rs2` with key ids; keys in the store, shared by every
//! replica, rotated daily: [`ROTATE_AFTER`]). It carries the engine
//! session, the run and a nonce; it is bound (associated data, never in
//! the token) to the caller, the URL, the method and a digest of the
//! params (less `_meta`, `inputResponses` and `requestState`), expires
//! after `mcp.request_state_ttl_sec`, and is spent on use. Every refusal
//! is one JSON-RPC error (-32602, "requestState rejected"), counted by
//! reason in `switchyard_control_plane_mcp_request_state_rejections_total`;
//! nothing else happens.

use super::ingress::Message;
use super::interactions;
use super::respond::{self, McpError};
use super::{Ctx, Endpoint};
use crate::auth::Caller;
use crate::model::mcp_session::Scope;
use crate::model::mrtr::{OutcomeRecord, StateKeyRing};
use crate::model::now_ms;
use crate::state::Change;
use axum::http::HeaderMap;
use futures::FutureExt;
use rmcp::model::{RequestStateCodec, RequestStateError, SealOptions};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use switchyard_mcp::era::Era;
use switchyard_mcp::meta;
use tokio_util::sync::CancellationToken;

/// How old the active key gets before a new one seals.
pub const ROTATE_AFTER: Duration = Duration::from_secs(24 * 3600);

/// The params a retry adds, left out of the digest.
const ROUND_KEYS: &[&str] = &["_meta", "inputResponses", "requestState"];

/// What a sealed `requestState` carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The engine session the call runs in.
    pub s: String,
    /// Its run.
    pub r: String,
    /// Random: the state's identity, spent once.
    pub n: String,
}

/// How a call ended, for the client.
type Outcome = Result<Value, McpError>;

/// Whether `msg` (a 2026-07-28 request) goes through this module: the
/// methods that may ask (mrtr "Supported Requests").
pub fn asks(msg: &Message) -> bool {
    super::interactions::ASKING.contains(&msg.method.as_str())
}

/// The client's declared capabilities (`_meta`).
fn capabilities(msg: &Message) -> Value {
    msg.meta()
        .and_then(|m| m.get(meta::CLIENT_CAPABILITIES))
        .cloned()
        .unwrap_or_else(|| json!({}))
}

/// One round of request `msg` (module docs): its result, an
/// `input_required`, or its error. A first round's call sends its
/// progress to `progress`, when given (a retry's call is already running;
/// its progress is not relayed).
pub async fn serve(
    ep: &Arc<Endpoint>,
    scope: &Scope,
    caller: Option<&Caller>,
    h: &HeaderMap,
    msg: &Message,
    progress: Option<switchyard_proto::calls::Observer>,
) -> Result<Value, McpError> {
    let caps = capabilities(msg);
    // Subscribed before anything starts or is answered: nothing is missed.
    let mut changes = ep.cp.state.subscribe();
    let (session, run, mut local, mut answered) = match msg.params.get("requestState") {
        None => {
            // A first request's answers (see `early` below) are refused as a
            // retry's are, before anything starts.
            input_responses(msg)?;
            let session = session_for(ep, scope, caller).await?;
            let run = switchyard_common::ids::new_id();
            let local = start(ep, scope, caller, h, msg, (&session, &run), progress);
            (session, run, Some(local), Vec::new())
        }
        Some(state) => {
            let state = state.as_str().ok_or_else(|| rejected(ep, "malformed"))?;
            // Checked before the state is spent: a refused retry changes
            // nothing, and the corrected one may use the same state.
            let responses = input_responses(msg)?;
            let p = open(ep, scope, caller, msg, state).await?;
            let answered = take_responses(ep, &p, responses).await;
            (p.s, p.r, None, answered)
        }
    };
    let mut look = true;
    let limit = tokio::time::Instant::now()
        + ep.cp.call_timeout
        + Duration::from_secs(ep.cp.interactions.timeout().as_secs());
    // A first request may carry answers already (under the server's keys);
    // they answer the questions that open, each tried once. Keys that name
    // none are ignored (mrtr "Error Handling").
    let early = match (
        msg.params.get("requestState"),
        msg.params.get("inputResponses"),
    ) {
        (None, Some(Value::Object(r))) if !r.is_empty() => Some(r),
        _ => None,
    };
    let mut tried: Vec<String> = Vec::new();
    loop {
        // Answered just now (the read model may not show it yet).
        let mut open: Vec<_> = interactions::open_of(ep, &session, &run)
            .into_iter()
            .filter(|rec| !answered.contains(&rec.id))
            .collect();
        if let Some(responses) = early {
            let fresh: Vec<_> = open
                .iter()
                .filter(|r| !tried.contains(&r.id))
                .cloned()
                .collect();
            if !fresh.is_empty() {
                tried.extend(fresh.iter().map(|r| r.id.clone()));
                let took = interactions::answer_open(ep, &session, &fresh, responses).await;
                open.retain(|r| !took.contains(&r.id));
                answered.extend(took);
            }
        }
        // Questions the server asked at once are asked together
        // (`interactions::ready`); a client is asked only what it declared
        // (`interactions::question`): the rest stay for the session's other
        // subscribers.
        let (open, held_until) = interactions::ready(ep, &session, open);
        let questions: Map<String, Value> = interactions::input_requests(&open, &caps, |_| {});
        if !questions.is_empty() {
            // The call goes on without this request; if it ended a moment
            // ago, that is the answer instead.
            if let Some(l) = local.take()
                && let Some(outcome) = l.detach()
            {
                return outcome;
            }
            let state = seal(ep, scope, caller, msg, &session, &run).await?;
            return Ok(json!({
                "resultType": meta::result_type::INPUT_REQUIRED,
                "inputRequests": questions,
                "requestState": state,
            }));
        }
        // The stored outcome: looked up first, then when it is written
        // (or the watch lagged and may have missed it).
        if local.is_none()
            && look
            && let Some(rec) = ep.cp.registry.get_mcp_outcome(&run).await.map_err(store)?
        {
            return stored(rec);
        }
        look = false;
        tokio::select! {
            outcome = async { (&mut local.as_mut().expect("guarded").call).await }, if local.is_some() => {
                return outcome;
            }
            c = changes.recv() => match c {
                Ok(Change::McpOutcome { run: r }) => look = r == run,
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => look = true,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    return Err(McpError::rpc(respond::INTERNAL_ERROR, "the replica is stopping"));
                }
            },
            // The questions held back for the rest of theirs are due.
            _ = tokio::time::sleep(held_for(held_until)), if held_until.is_some() => {}
            _ = tokio::time::sleep_until(limit) => {
                return Err(McpError::rpc(
                    respond::INTERNAL_ERROR,
                    "the request's call did not end in time (its replica may have stopped); send the request again",
                ));
            }
        }
    }
}

/// How long until `until` (ms since the epoch; none: zero).
fn held_for(until: Option<i64>) -> Duration {
    let ms = until.map_or(0, |u| u.saturating_sub(now_ms()).max(0));
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// The calls of 2026-07-28 requests that asked their client and went on
/// alone on this replica, by caller (its name; empty for anonymous
/// callers): each caller keeps at most `mcp.max_waiting_calls_per_caller`,
/// and one more ends the caller's oldest (a client that never retries
/// would otherwise hold a call per request until its question times out).
#[derive(Debug, Default)]
pub struct Waiting {
    by_caller: std::sync::Mutex<HashMap<String, VecDeque<(u64, CancellationToken)>>>,
    next: std::sync::atomic::AtomicU64,
}

impl Waiting {
    /// Adds a waiting call of `caller`: its ticket (for [`Self::remove`])
    /// and the token cancelled when it is ended to make room. Ends the
    /// caller's oldest waiting calls beyond `max`; how many.
    pub fn add(&self, caller: &str, max: usize) -> (u64, CancellationToken, usize) {
        let ticket = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let token = CancellationToken::new();
        let mut by_caller = self.by_caller.lock().expect("not poisoned");
        let queue = by_caller.entry(caller.to_owned()).or_default();
        queue.push_back((ticket, token.clone()));
        let mut ended = 0;
        while queue.len() > max {
            if let Some((_, oldest)) = queue.pop_front() {
                oldest.cancel();
                ended += 1;
            }
        }
        (ticket, token, ended)
    }

    /// Removes waiting call `ticket` of `caller` (it ended).
    pub fn remove(&self, caller: &str, ticket: u64) {
        let mut by_caller = self.by_caller.lock().expect("not poisoned");
        if let Some(queue) = by_caller.get_mut(caller) {
            queue.retain(|(t, _)| *t != ticket);
            if queue.is_empty() {
                by_caller.remove(caller);
            }
        }
    }

    /// How many calls of `caller` wait.
    pub fn of(&self, caller: &str) -> usize {
        let by_caller = self.by_caller.lock().expect("not poisoned");
        by_caller.get(caller).map_or(0, VecDeque::len)
    }
}

/// A call running for this round, not yet detached: polled by the round
/// itself, so a request that asks nothing costs no task of its own.
struct Local {
    /// The call (dropping it cancels it, as when the client goes away).
    call: std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>,
    /// Where its outcome is stored once it runs alone.
    ep: Arc<Endpoint>,
    /// Its run.
    run: String,
    /// Its caller's name (empty: anonymous), for [`Waiting`].
    caller: String,
}

impl Local {
    /// Lets the call go on alone, in a task of its own that stores its
    /// outcome (`mcp-outcomes/<run>`) for the retry; `Some`: it had ended
    /// already, with this.
    /// Counted in [`Waiting`] while it runs alone: ended (cancelled
    /// upstream, its outcome an error) when its caller has too many.
    fn detach(mut self) -> Option<Outcome> {
        if let Some(outcome) = (&mut self.call).now_or_never() {
            return Some(outcome);
        }
        let Local {
            mut call,
            ep,
            run,
            caller,
        } = self;
        let max = ep.config.max_waiting_calls_per_caller;
        let (ticket, ended, made_room) = ep.waiting.add(&caller, max);
        for _ in 0..made_room {
            ep.cp.metrics.mcp_waiting_call_ended();
        }
        tokio::spawn(async move {
            let outcome = tokio::select! {
                outcome = &mut call => outcome,
                () = ended.cancelled() => {
                    tracing::info!(%run, caller = %caller, max, "a call waiting for its MCP client's answer ended: its caller has more waiting on this replica (mcp.max_waiting_calls_per_caller); it was the oldest");
                    Err(McpError::rpc(
                        respond::INTERNAL_ERROR,
                        format!("the call was ended unanswered: its caller started more than mcp.max_waiting_calls_per_caller ({max}) requests that wait for answers, and this was the oldest; send the request again"),
                    ))
                }
            };
            // Cancelled upstream, if it still ran.
            drop(call);
            ep.waiting.remove(&caller, ticket);
            let rec = OutcomeRecord {
                run: run.clone(),
                result: outcome.as_ref().ok().cloned(),
                error: outcome.as_ref().err().map(|e| e.body()["error"].clone()),
            };
            let ttl = ep.cp.interactions.timeout() + Duration::from_secs(60);
            if let Err(e) = ep.cp.registry.put_mcp_outcome(&rec, ttl).await {
                tracing::warn!(%run, error = %e, "could not store the outcome of an MCP request that asked its client");
            }
        });
        None
    }
}

/// Request `msg`'s call in engine session `session` with `run` (module
/// docs), not started until polled; its progress goes to `progress`, when
/// given.
fn start(
    ep: &Arc<Endpoint>,
    scope: &Scope,
    caller: Option<&Caller>,
    h: &HeaderMap,
    msg: &Message,
    (session, run): (&str, &str),
    progress: Option<switchyard_proto::calls::Observer>,
) -> Local {
    let name = caller.map(|c| c.name.clone()).unwrap_or_default();
    let (ep2, scope, caller, h, msg) = (
        ep.clone(),
        scope.clone(),
        caller.cloned(),
        h.clone(),
        msg.clone(),
    );
    let (session, run_id) = (session.to_owned(), run.to_owned());
    let call = Box::pin(async move {
        let ctx = Ctx {
            ep: &ep2,
            scope: &scope,
            caller: caller.as_ref(),
            era: Era::Modern,
            session_id: session,
            run_id,
            progress,
            log_level: super::logging::level(Era::Modern, None, &msg).unwrap_or_default(),
            tasks: super::tasks_declared(Era::Modern, None, &msg),
            client: super::client_capabilities(&scope, Some(&capabilities(&msg)), true),
        };
        super::answer(&ctx, &h, &msg).await
    });
    Local {
        call,
        ep: ep.clone(),
        run: run.to_owned(),
        caller: name,
    }
}

/// The answer of a stored outcome.
fn stored(rec: OutcomeRecord) -> Outcome {
    match (rec.result, rec.error) {
        (Some(r), _) => Ok(r),
        (None, Some(e)) => Err(McpError::from_object(&e, "the call failed")),
        (None, None) => Err(McpError::rpc(
            respond::INTERNAL_ERROR,
            "the call's stored outcome is empty",
        )),
    }
}

fn store(e: crate::registry::RegistryError) -> McpError {
    McpError::rpc(
        respond::INTERNAL_ERROR,
        format!("the store: {}", switchyard_common::error_chain(&e)),
    )
}

/// The engine session request of a 2026-07-28 client runs in: the URL's
/// (`/mcp/sessions/ID`), else one per caller and URL
/// (`mcp-<digest>`, created on first use, the caller's, with the URL's
/// servers and mode `auto`), where its interactions live.
pub async fn session_for(
    ep: &Endpoint,
    scope: &Scope,
    caller: Option<&Caller>,
) -> Result<String, McpError> {
    if let Scope::Session(id) = scope {
        return Ok(id.clone());
    }
    let owner = caller.map(|c| c.name.clone()).unwrap_or_default();
    let digest = Sha256::digest(json!([owner, scope.path()]).to_string().as_bytes());
    let id = format!("mcp-{}", switchyard_common::ids::hex(&digest[..16]));
    if ep.cp.state.snapshot().sessions.contains_key(&id)
        || ep
            .cp
            .registry
            .get_session(&id)
            .await
            .map_err(store)?
            .is_some()
    {
        return Ok(id);
    }
    let rec = super::legacy::engine_session_for(scope, &id, &owner);
    let rev = ep.cp.registry.put_session(&rec).await.map_err(store)?;
    ep.cp.state.wait_for(rev, Duration::from_secs(2)).await;
    Ok(id)
}

/// `value` with every object's keys sorted, as JSON text: the same params
/// give the same digest whatever order a client writes them in.
fn canonical(value: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// What a state is bound to (its associated data): the caller, the URL,
/// the method and a digest of the params less [`ROUND_KEYS`].
pub fn binding(scope: &Scope, caller: Option<&Caller>, msg: &Message) -> Vec<u8> {
    let mut params = msg.params.clone();
    for k in ROUND_KEYS {
        params.remove(*k);
    }
    let digest = Sha256::digest(canonical(&Value::Object(params)).as_bytes());
    let who = caller.map(|c| c.name.as_str()).unwrap_or("");
    json!([
        who,
        scope.path(),
        msg.method,
        switchyard_common::ids::hex(&digest)
    ])
    .to_string()
    .into_bytes()
}

/// The codec of the stored key ring; `fresh`: read from the store (and
/// rotated when due), not from the read model.
async fn codec(ep: &Endpoint, fresh: bool) -> Result<RequestStateCodec, McpError> {
    let young = |r: &StateKeyRing| {
        r.keys.first().is_some_and(|k| {
            k.kid == r.active && now_ms() - k.created_at_ms < ROTATE_AFTER.as_millis() as i64
        })
    };
    let known = ep.cp.state.snapshot().mcp_state_keys.clone();
    let ring = match known {
        Some(r) if !fresh && young(&r) => r,
        _ => {
            let keep = ROTATE_AFTER + Duration::from_secs(ep.config.request_state_ttl_sec);
            let (ring, rev) = ep
                .cp
                .registry
                .rotate_state_keys(ROTATE_AFTER, keep)
                .await
                .map_err(store)?;
            ep.cp.state.wait_for(rev, Duration::from_secs(2)).await;
            Arc::new(ring)
        }
    };
    codec_of(&ring).map_err(|e| {
        // The message names no key.
        McpError::rpc(
            respond::INTERNAL_ERROR,
            format!("the requestState keys in the store are not usable: {e}"),
        )
    })
}

/// The codec of key ring `ring`: its active key seals, every key opens
/// (a key that is not base64url is left out).
pub fn codec_of(ring: &StateKeyRing) -> Result<RequestStateCodec, RequestStateError> {
    use base64::Engine as _;
    let keys = ring.keys.iter().filter_map(|k| {
        let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&k.key)
            .ok()?;
        Some((k.kid.clone(), key))
    });
    RequestStateCodec::new_with_keyring(ring.active.clone(), keys)
}

/// Seals `pending` with `codec`, bound to `binding` (see [`binding`]), for
/// `ttl`.
pub fn seal_with(
    codec: &RequestStateCodec,
    pending: &Pending,
    binding: &[u8],
    ttl: Duration,
) -> Result<String, RequestStateError> {
    let options = SealOptions::new().associated_data(binding).ttl(ttl);
    codec.seal_json_with(pending, &options)
}

/// Opens `state` with `codec` for `binding`: the checks that need no
/// store (integrity, binding, expiry, a well-formed nonce). Errors: the
/// reason a refusal is counted under (`integrity`, `expired`,
/// `unknown_key`, `malformed`).
pub fn open_with(
    codec: &RequestStateCodec,
    binding: &[u8],
    state: &str,
) -> Result<Pending, &'static str> {
    let pending = codec
        .open_json_with::<Pending>(state, binding)
        .map_err(|e| match e {
            RequestStateError::Expired => "expired",
            RequestStateError::IntegrityCheckFailed => "integrity",
            RequestStateError::UnknownKeyId => "unknown_key",
            _ => "malformed",
        })?;
    crate::model::check_id("requestState nonce", &pending.n).map_err(|_| "malformed")?;
    Ok(pending)
}

/// A new state for another round of the call of `session` and `run`.
async fn seal(
    ep: &Endpoint,
    scope: &Scope,
    caller: Option<&Caller>,
    msg: &Message,
    session: &str,
    run: &str,
) -> Result<String, McpError> {
    let codec = codec(ep, false).await?;
    let pending = Pending {
        s: session.to_owned(),
        r: run.to_owned(),
        n: switchyard_common::ids::new_id(),
    };
    let ad = binding(scope, caller, msg);
    let ttl = Duration::from_secs(ep.config.request_state_ttl_sec);
    seal_with(&codec, &pending, &ad, ttl).map_err(|e| {
        McpError::rpc(
            respond::INTERNAL_ERROR,
            format!("could not seal a requestState: {e}"),
        )
    })
}

/// Counts a refusal by `reason` and makes its one client-facing error
/// (rmcp: every opening failure is the same error to the client).
fn rejected(ep: &Endpoint, reason: &'static str) -> McpError {
    ep.cp.metrics.mcp_state_rejected(reason);
    tracing::info!(reason, "requestState rejected");
    McpError::invalid_params(
        "requestState rejected: it is not one this endpoint issued for this request and caller, it expired, or it was used already; send the request again without requestState and inputResponses",
    )
}

/// Opens and spends `state` for request `msg` (module docs). Errors:
/// [`rejected`], the store.
async fn open(
    ep: &Endpoint,
    scope: &Scope,
    caller: Option<&Caller>,
    msg: &Message,
    state: &str,
) -> Result<Pending, McpError> {
    let ad = binding(scope, caller, msg);
    let mut result = open_with(&codec(ep, false).await?, &ad, state);
    // Sealed with a key this replica has not seen yet.
    if result == Err("unknown_key") {
        result = open_with(&codec(ep, true).await?, &ad, state);
    }
    let pending = result.map_err(|reason| rejected(ep, reason))?;
    let ttl = Duration::from_secs(ep.config.request_state_ttl_sec + 60);
    if !ep
        .cp
        .registry
        .spend_request_state(&pending.n, ttl)
        .await
        .map_err(store)?
    {
        return Err(rejected(ep, "replayed"));
    }
    Ok(pending)
}

/// `msg`'s `inputResponses`, if any. Errors: -32602 when it is not an
/// object.
fn input_responses(msg: &Message) -> Result<Option<&serde_json::Map<String, Value>>, McpError> {
    match msg.params.get("inputResponses") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(McpError::invalid_params(
            "params.inputResponses: must be an object keyed by the inputRequests keys",
        )),
    }
}

/// Answers the run's open interactions that `responses` (a retry's
/// `inputResponses`) name, and returns the ids answered; other keys are
/// ignored (mrtr "Error Handling"). An answer that does not fit its
/// question leaves it open, to be asked again.
async fn take_responses(
    ep: &Endpoint,
    p: &Pending,
    responses: Option<&serde_json::Map<String, Value>>,
) -> Vec<String> {
    let Some(responses) = responses else {
        return Vec::new();
    };
    let open = interactions::open_of(ep, &p.s, &p.r);
    interactions::answer_open(ep, &p.s, &open, responses).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_ignore_key_order_and_the_round_keys() {
        let a = json!({"name": "t", "arguments": {"a": 1, "b": [1, {"y": 2, "x": 1}]}});
        let b = json!({"arguments": {"b": [1, {"x": 1, "y": 2}], "a": 1}, "name": "t"});
        assert_eq!(canonical(&a), canonical(&b));
        let msg = |params: Value| Message {
            kind: switchyard_mcp::jsonrpc::Kind::Request,
            id: Some(json!(1)),
            method: "tools/call".into(),
            params: params.as_object().unwrap().clone(),
            raw: Value::Null,
        };
        let mut retry = b.clone();
        retry["inputResponses"] = json!({"k": {}});
        retry["requestState"] = json!("rs2...");
        retry["_meta"] = json!({"progressToken": 1});
        let all = Scope::All;
        assert_eq!(
            binding(&all, None, &msg(a.clone())),
            binding(&all, None, &msg(retry))
        );
        let mut other = a.clone();
        other["arguments"]["a"] = json!(2);
        assert_ne!(
            binding(&all, None, &msg(a.clone())),
            binding(&all, None, &msg(other))
        );
        assert_ne!(
            binding(&all, None, &msg(a.clone())),
            binding(&Scope::Server("s".into()), None, &msg(a))
        );
    }

    #[test]
    fn a_callers_oldest_waiting_call_ends_beyond_the_cap() {
        let w = Waiting::default();
        let (a1, t1, n) = w.add("alice", 2);
        assert_eq!(n, 0);
        let (_, t2, _) = w.add("alice", 2);
        let (_, tb, _) = w.add("bob", 2);
        let (a3, t3, n) = w.add("alice", 2);
        assert_eq!(n, 1);
        assert!(t1.is_cancelled() && !t2.is_cancelled() && !t3.is_cancelled());
        assert!(!tb.is_cancelled(), "another caller's calls stay");
        assert_eq!((w.of("alice"), w.of("bob")), (2, 1));
        // An ended call leaves room; removing one already gone is harmless.
        w.remove("alice", a3);
        w.remove("alice", a1);
        assert_eq!(w.of("alice"), 1);
        let (_, t4, n) = w.add("alice", 2);
        assert_eq!(n, 0);
        assert!(!t2.is_cancelled() && !t4.is_cancelled());
    }
}
