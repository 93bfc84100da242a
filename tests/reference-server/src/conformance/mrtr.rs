//! What the fixture's interactive tools and prompt ask the client for, in
//! either era: a [`Flow`] of rounds of [`Ask`]s (`elicitation/create`,
//! `sampling/createMessage`, `roots/list`), obtained by [`obtain`].
//!
//! * **2025-11-25**: every ask is sent to the client as a server-to-client
//!   request during the call (on the request's SSE stream), one after the
//!   other; a capability the client did not declare at `initialize`, or a
//!   client error, ends the call as a tool error.
//! * **2026-07-28** (SEP-2322): the request answers
//!   `{"resultType":"input_required","inputRequests":{KEY: {method, params}}}`
//!   with the asks of the current round it does not have yet, and finishes
//!   on a retry that carries them as `inputResponses`. A capability the
//!   request does not declare is `-32021` (`data.requiredCapabilities`).
//!   `inputResponses` keys the flow does not know are ignored; an entry of
//!   the wrong shape is `-32602` with `data.inputResponse = KEY`.
//!
//! A *sealed* flow also issues a `requestState` (sealed by
//! [`crate::request_state`]) holding the tool, the round and the answers so
//! far; its retries must echo it (`-32602` with `data.requestState` =
//! `missing`, `tampered`, `expired` or `mismatch` otherwise). An unsealed
//! flow has a single round and no state.

use std::collections::BTreeMap;

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{ClientResult, InputRequest, InputRequiredResult, InputResponses, ServerRequest},
    service::{RequestContext, ServiceError},
};
use serde_json::{Map, Value, json};

use super::from_json;
use crate::{
    era,
    request_state::{self, StateError},
};

/// The answers obtained, by key (`ElicitResult`, `CreateMessageResult` or
/// `ListRootsResult`, as JSON).
pub type Answers = BTreeMap<String, Value>;

/// The client capability an ask needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    Elicitation,
    Sampling,
    Roots,
}

impl Need {
    /// The `ClientCapabilities` key.
    fn capability(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation",
            Self::Sampling => "sampling",
            Self::Roots => "roots",
        }
    }
}

/// One thing to ask the client: an input request under `key`.
#[derive(Clone, Debug)]
pub struct Ask {
    pub key: String,
    pub need: Need,
    /// `{"method", "params"?}`.
    request: Value,
}

impl Ask {
    /// A form `elicitation/create`.
    pub fn elicit(key: &str, message: &str, schema: Value) -> Self {
        Self {
            key: key.into(),
            need: Need::Elicitation,
            request: json!({
                "method": "elicitation/create",
                "params": {"mode": "form", "message": message, "requestedSchema": schema},
            }),
        }
    }

    /// A `sampling/createMessage` with one user text message.
    pub fn sample(key: &str, text: &str, max_tokens: u32) -> Self {
        Self {
            key: key.into(),
            need: Need::Sampling,
            request: json!({
                "method": "sampling/createMessage",
                "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
                    "maxTokens": max_tokens,
                },
            }),
        }
    }

    /// A `roots/list`.
    pub fn roots(key: &str) -> Self {
        Self {
            key: key.into(),
            need: Need::Roots,
            request: json!({"method": "roots/list"}),
        }
    }

    /// The 2026-07-28 input request.
    pub fn input_request(&self) -> InputRequest {
        from_json(self.request.clone())
    }

    /// Checks that `answer` has the shape of this ask's result.
    fn check(&self, answer: &Value) -> Result<(), McpError> {
        let ok = match self.need {
            Need::Elicitation => {
                let action = answer.get("action").and_then(Value::as_str);
                let content_ok = answer.get("content").is_none_or(Value::is_object);
                matches!(action, Some("accept" | "decline" | "cancel")) && content_ok
            }
            Need::Sampling => {
                answer.get("role").is_some_and(Value::is_string)
                    && answer
                        .get("content")
                        .is_some_and(|c| c.is_object() || c.is_array())
            }
            Need::Roots => answer.get("roots").is_some_and(Value::is_array),
        };
        if ok {
            return Ok(());
        }
        let expected = match self.need {
            Need::Elicitation => "an ElicitResult",
            Need::Sampling => "a CreateMessageResult",
            Need::Roots => "a ListRootsResult",
        };
        Err(McpError::invalid_params(
            format!("inputResponses.{} is not {expected}", self.key),
            Some(json!({"inputResponse": self.key})),
        ))
    }
}

/// The rounds a request asks in, and whether they are sealed in a `requestState`.
#[derive(Clone, Debug)]
pub struct Flow {
    rounds: Vec<Vec<Ask>>,
    sealed: bool,
}

impl Flow {
    /// One round, no `requestState`.
    pub fn single(asks: Vec<Ask>) -> Self {
        Self {
            rounds: vec![asks],
            sealed: false,
        }
    }

    /// One or more rounds, with a sealed `requestState`.
    pub fn sealed(rounds: Vec<Vec<Ask>>) -> Self {
        Self {
            rounds,
            sealed: true,
        }
    }

    fn asks(&self) -> impl Iterator<Item = &Ask> {
        self.rounds.iter().flatten()
    }
}

/// What [`obtain`] came back with.
#[derive(Debug)]
pub enum Obtained {
    /// Every answer (both eras).
    Answers(Answers),
    /// 2026-07-28: ask the client (and retry).
    InputRequired(InputRequiredResult),
    /// 2025-11-25: the client could not be asked or answered with an error.
    Failed(String),
}

/// The capabilities a request declares, as JSON (`{}` when none).
fn declared(context: &RequestContext<RoleServer>) -> Value {
    context
        .client_capabilities()
        .and_then(|caps| serde_json::to_value(caps).ok())
        .unwrap_or_else(|| json!({}))
}

/// Whether the request declares `need`.
pub fn declares(context: &RequestContext<RoleServer>, need: Need) -> bool {
    declared(context).get(need.capability()).is_some()
}

/// Obtains the answers of `flow` for the request named `name` (a tool or a
/// prompt), in the request's era; see the module docs.
pub async fn obtain(
    name: &str,
    flow: &Flow,
    responses: Option<&InputResponses>,
    state: Option<&str>,
    context: &RequestContext<RoleServer>,
) -> Result<Obtained, McpError> {
    if era::is_modern(context.protocol_version().as_ref()) {
        let mut missing = Map::new();
        for ask in flow.asks() {
            if !declares(context, ask.need) {
                missing.insert(ask.need.capability().into(), json!({}));
            }
        }
        if !missing.is_empty() {
            return Err(McpError::missing_required_client_capability(from_json(
                Value::Object(missing),
            )));
        }
        gather(name, flow, responses, state)
    } else {
        ask_legacy(flow, context).await
    }
}

fn state_error(what: &str) -> McpError {
    McpError::invalid_params(
        format!("requestState {what}"),
        Some(json!({"requestState": what})),
    )
}

/// 2026-07-28: the answers so far (from a verified `state` and
/// `responses`), then either every answer or the next `input_required`.
fn gather(
    name: &str,
    flow: &Flow,
    responses: Option<&InputResponses>,
    state: Option<&str>,
) -> Result<Obtained, McpError> {
    let (mut round, mut received) = (0, Map::new());
    if flow.sealed {
        match state {
            Some(state) => {
                let payload = request_state::open(state).map_err(|error| match error {
                    StateError::Tampered => state_error("tampered"),
                    StateError::Expired => state_error("expired"),
                })?;
                if payload.get("tool").and_then(Value::as_str) != Some(name) {
                    return Err(state_error("mismatch"));
                }
                round = payload
                    .get("round")
                    .and_then(Value::as_u64)
                    .and_then(|round| usize::try_from(round).ok())
                    .filter(|&round| round < flow.rounds.len())
                    .ok_or_else(|| state_error("mismatch"))?;
                if let Some(Value::Object(answers)) = payload.get("received") {
                    received = answers.clone();
                }
            }
            None if responses.is_some_and(|r| !r.is_empty()) => {
                return Err(state_error("missing"));
            }
            None => {}
        }
    }
    loop {
        let asks = &flow.rounds[round];
        for ask in asks {
            if let Some(answer) = responses.and_then(|r| r.get(&ask.key)) {
                ask.check(answer)?;
                received.insert(ask.key.clone(), answer.clone());
            }
        }
        let missing: Vec<&Ask> = asks
            .iter()
            .filter(|ask| !received.contains_key(&ask.key))
            .collect();
        if missing.is_empty() {
            round += 1;
            if round == flow.rounds.len() {
                return Ok(Obtained::Answers(received.into_iter().collect()));
            }
            continue;
        }
        let requests = missing
            .iter()
            .map(|ask| (ask.key.clone(), ask.input_request()))
            .collect();
        let sealed = flow.sealed.then(|| {
            let mut payload = Map::new();
            payload.insert("tool".into(), name.into());
            payload.insert("round".into(), round.into());
            payload.insert("received".into(), Value::Object(received.clone()));
            request_state::seal(payload)
        });
        return Ok(Obtained::InputRequired(InputRequiredResult::new(
            Some(requests),
            sealed,
        )));
    }
}

/// 2025-11-25: sends every ask to the client in turn.
async fn ask_legacy(
    flow: &Flow,
    context: &RequestContext<RoleServer>,
) -> Result<Obtained, McpError> {
    let mut answers = Answers::new();
    for ask in flow.asks() {
        if !declares(context, ask.need) {
            return Ok(Obtained::Failed(format!(
                "the client did not declare the {} capability at initialize",
                ask.need.capability()
            )));
        }
        let request: ServerRequest = from_json(ask.request.clone());
        let answer = match context.peer.send_request(request).await {
            Ok(result) => client_result_json(result),
            Err(ServiceError::McpError(error)) => {
                return Ok(Obtained::Failed(format!(
                    "{} failed: the client answered with error {}: {}",
                    ask.request["method"], error.code.0, error.message
                )));
            }
            Err(error) => {
                return Ok(Obtained::Failed(format!(
                    "{} failed: {error}",
                    ask.request["method"]
                )));
            }
        };
        if let Err(error) = ask.check(&answer) {
            return Ok(Obtained::Failed(error.message.into_owned()));
        }
        answers.insert(ask.key.clone(), answer);
    }
    Ok(Obtained::Answers(answers))
}

fn client_result_json(result: ClientResult) -> Value {
    serde_json::to_value(result).unwrap_or(Value::Null)
}

/// `content[field]` of the elicitation answered under `key`, or `unknown`.
pub fn elicited_string(answers: &Answers, key: &str, field: &str) -> String {
    answers
        .get(key)
        .and_then(|answer| answer.get("content"))
        .and_then(|content| content.get(field))
        .map_or_else(
            || "unknown".to_owned(),
            |value| match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            },
        )
}

/// The `action` of the elicitation answered under `key`.
pub fn action(answers: &Answers, key: &str) -> String {
    answers
        .get(key)
        .and_then(|answer| answer.get("action"))
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned()
}

/// `action=A, content={...}` of the elicitation answered under `key`.
pub fn elicitation_summary(answers: &Answers, key: &str) -> String {
    let content = answers
        .get(key)
        .and_then(|answer| answer.get("content"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    format!("action={}, content={content}", action(answers, key))
}

/// The text of the sampling result answered under `key`.
pub fn sampled_text(answers: &Answers, key: &str) -> String {
    let content = answers.get(key).and_then(|answer| answer.get("content"));
    let text = match content {
        Some(Value::Array(blocks)) => blocks
            .iter()
            .find_map(|block| block.get("text").and_then(Value::as_str)),
        Some(block) => block.get("text").and_then(Value::as_str),
        None => None,
    };
    text.unwrap_or("no response").to_owned()
}

/// The number of roots answered under `key`.
pub fn root_count(answers: &Answers, key: &str) -> usize {
    answers
        .get(key)
        .and_then(|answer| answer.get("roots"))
        .and_then(Value::as_array)
        .map_or(0, Vec::len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_ask(key: &str) -> Ask {
        Ask::elicit(
            key,
            "Name?",
            json!({"type": "object", "properties": {"name": {"type": "string"}}}),
        )
    }

    fn accept(name: &str) -> Value {
        json!({"action": "accept", "content": {"name": name}})
    }

    fn responses(entries: &[(&str, Value)]) -> InputResponses {
        entries
            .iter()
            .map(|(key, value)| ((*key).to_owned(), value.clone()))
            .collect()
    }

    fn input_required(obtained: Obtained) -> InputRequiredResult {
        match obtained {
            Obtained::InputRequired(result) => result,
            other => panic!("expected input_required, got {other:?}"),
        }
    }

    fn answers(obtained: Obtained) -> Answers {
        match obtained {
            Obtained::Answers(answers) => answers,
            other => panic!("expected answers, got {other:?}"),
        }
    }

    fn state_code(error: &McpError) -> Option<&str> {
        error.data.as_ref()?.get("requestState")?.as_str()
    }

    #[test]
    fn unsealed_flows_ask_until_answered_and_ignore_unknown_keys() {
        let flow = Flow::single(vec![name_ask("user_name")]);
        let first = input_required(gather("t", &flow, None, None).unwrap());
        let requests = first.input_requests.unwrap();
        assert_eq!(requests.keys().collect::<Vec<_>>(), ["user_name"]);
        assert!(first.request_state.is_none());

        let wrong = responses(&[("wrong_key", accept("x"))]);
        input_required(gather("t", &flow, Some(&wrong), None).unwrap());

        let extra = responses(&[("user_name", accept("Alice")), ("other", json!({"foo": 1}))]);
        let done = answers(gather("t", &flow, Some(&extra), None).unwrap());
        assert_eq!(elicited_string(&done, "user_name", "name"), "Alice");

        let bad = responses(&[("user_name", json!(12345))]);
        let error = gather("t", &flow, Some(&bad), None).unwrap_err();
        assert_eq!(error.data, Some(json!({"inputResponse": "user_name"})));
    }

    #[test]
    fn sealed_flows_carry_rounds_and_answers_in_the_state() {
        let flow = Flow::sealed(vec![vec![name_ask("step1")], vec![name_ask("step2")]]);
        let round1 = input_required(gather("t", &flow, None, None).unwrap());
        let state1 = round1.request_state.unwrap();

        let reply = responses(&[("step1", accept("Alice"))]);
        let round2 = input_required(gather("t", &flow, Some(&reply), Some(&state1)).unwrap());
        let state2 = round2.request_state.unwrap();
        assert_ne!(state1, state2);
        assert!(round2.input_requests.unwrap().contains_key("step2"));

        let reply = responses(&[("step2", accept("blue"))]);
        let done = answers(gather("t", &flow, Some(&reply), Some(&state2)).unwrap());
        assert_eq!(elicited_string(&done, "step1", "name"), "Alice");
        assert_eq!(elicited_string(&done, "step2", "name"), "blue");
    }

    #[test]
    fn sealed_flows_refuse_bad_states() {
        let flow = Flow::sealed(vec![vec![name_ask("confirm")]]);
        let state = input_required(gather("t", &flow, None, None).unwrap())
            .request_state
            .unwrap();
        let reply = responses(&[("confirm", accept("x"))]);
        let tampered = format!("{state}-TAMPERED");
        let error = gather("t", &flow, Some(&reply), Some(&tampered)).unwrap_err();
        assert_eq!(state_code(&error), Some("tampered"));
        let error = gather("other", &flow, Some(&reply), Some(&state)).unwrap_err();
        assert_eq!(state_code(&error), Some("mismatch"));
        let error = gather("t", &flow, Some(&reply), None).unwrap_err();
        assert_eq!(state_code(&error), Some("missing"));
        answers(gather("t", &flow, Some(&reply), Some(&state)).unwrap());
    }
}
