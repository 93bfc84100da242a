//! The client side of multi round-trip requests (2026-07-28
//! basic/patterns/mrtr). A `tools/call`, `prompts/get` or `resources/read`
//! may come back with `resultType: "input_required"`: its `inputRequests`
//! (key -> `{method, params}`) are answered from the call's own context
//! ([`answer_inputs`]: elicitations asked in the call's session, roots from
//! the call), and the request is sent again ([`rounds`]) with a new
//! JSON-RPC id, the original params plus `inputResponses` (same keys) and
//! the `requestState` exactly as received (never inspected; absent stays
//! absent), for as long as the server asks, up to the session's
//! `max_input_rounds` retries. Sampling is never declared, so a server
//! asking for it breaks the protocol. A 2026 task's `inputRequests` (stage
//! B, `tasks/update`) are answered by [`answer_inputs`] too.

use super::elicitation::{Asked, InteractionKind, Together};
use super::{CallContext, ProtocolError, Relay, roots};
use serde_json::{Map, Value, json};
use switchyard_mcp::methods::{ELICIT, LIST_ROOTS, SAMPLING};

/// What [`rounds`] sends each request through: the upstream session, one
/// request at a time (its own protocol retries included).
pub trait Sender: Sync {
    /// Its error; a [`ProtocolError`] becomes one.
    type Error: From<ProtocolError>;
    /// Sends `method` with `params` once (a new JSON-RPC id) and returns
    /// the `result` exactly as sent.
    fn send<'a>(
        &'a self,
        method: &'a str,
        params: &'a Value,
    ) -> impl Future<Output = Result<Value, Self::Error>> + Send + 'a;
}

/// Sends `method` with `params` for the call in `context` (see the module
/// docs) through `sender`, again with the answered params after each
/// `input_required` result, at most `max_rounds` more times. Only
/// `tools/call`, `prompts/get` and `resources/read` take part; any other
/// method is sent once. Returns the first result that is not
/// `input_required`. Errors: `send`'s; input still asked for after
/// `max_rounds` retries, params that are not an object, and questions this
/// client cannot answer ([`answer_inputs`]) are [`ProtocolError`]s.
pub async fn rounds<S: Sender>(
    sender: &S,
    relay: &Relay,
    method: &str,
    params: &Value,
    context: &CallContext,
    max_rounds: u32,
) -> Result<Value, S::Error> {
    let multi_round = matches!(method, "tools/call" | "prompts/get" | "resources/read");
    let protocol = |detail: String| S::Error::from(ProtocolError::new(relay.server(), detail));
    let mut retry: Option<Value> = None;
    let mut round = 0;
    loop {
        let result = sender
            .send(method, retry.as_ref().unwrap_or(params))
            .await?;
        if !multi_round
            || result.get("resultType").and_then(Value::as_str) != Some("input_required")
        {
            return Ok(result);
        }
        if round >= max_rounds {
            return Err(protocol(format!(
                "{method}: the server still asks for input after {round} rounds (the limit)"
            )));
        }
        round += 1;
        let mut next = params.clone();
        let Some(fields) = next.as_object_mut() else {
            return Err(protocol(format!(
                "{method}: cannot answer input_required: the params are not an object"
            )));
        };
        if let Some(requests) = result.get("inputRequests") {
            // Boxed: rare, and large.
            let responses = Box::pin(answer_inputs(relay, requests, context))
                .await
                .map_err(S::Error::from)?;
            fields.insert("inputResponses".into(), responses);
        }
        // Echoed exactly, never inspected; absent stays absent.
        if let Some(state) = result.get("requestState") {
            fields.insert("requestState".into(), state.clone());
        }
        retry = Some(next);
        tracing::debug!(%method, round, "retrying with the server's requested input");
    }
}

/// Answers an `input_required` result's `inputRequests` for the call in
/// `context`, through `relay` (the call's connection): the
/// `inputResponses` map, same keys. Every entry is checked before anyone
/// is asked. Errors: `requests` is not an object; an entry asks for
/// sampling (never declared), for elicitation or roots on a session that
/// did not declare them, for an unknown method, or for an unsupported
/// elicitation mode.
pub async fn answer_inputs(
    relay: &Relay,
    requests: &Value,
    context: &CallContext,
) -> Result<Value, ProtocolError> {
    let protocol = |detail: String| ProtocolError::new(relay.server(), detail);
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
            ELICIT | LIST_ROOTS if !relay.interactive() => {
                return Err(protocol(format!(
                    "the server asked for {method} (inputRequests[{key:?}]), which this client did not declare"
                )));
            }
            ELICIT => {
                let kind = InteractionKind::of(&params)
                    .map_err(|e| protocol(format!("inputRequests[{key:?}]: {e}")))?;
                asks.push((key.clone(), kind, params));
            }
            LIST_ROOTS => asks.push((key.clone(), InteractionKind::Roots, params)),
            other => {
                return Err(protocol(format!(
                    "inputRequests[{key:?}] has unknown method {other:?}"
                )));
            }
        }
    }
    // Asked at once: the control plane puts them to its client together.
    // Only questions that become interactions count: roots of a client
    // that does not answer them itself are the call's own, and a call
    // without a session is declined (a group waiting for them would wait
    // in vain).
    let opens = |kind: InteractionKind| {
        !context.session_id.is_empty() && (kind != InteractionKind::Roots || context.asks_roots())
    };
    let together = Together::of(asks.iter().filter(|(_, kind, _)| opens(*kind)).count());
    let together = together.as_ref();
    let answers =
        futures::future::join_all(asks.into_iter().map(|(key, kind, params)| async move {
            let asked = Asked {
                key: &key,
                together: together.filter(|_| opens(kind)),
            };
            let answer = match kind {
                InteractionKind::Roots => roots::list(relay, context, params, asked).await,
                kind => relay.elicit(context, kind, params, (ELICIT, asked)).await,
            };
            (key, answer)
        }))
        .await;
    Ok(Value::Object(answers.into_iter().collect::<Map<_, _>>()))
}
