//! The interaction tools, served with `--interactions`: form and URL
//! elicitation, the URL-elicitation-required error, multi-round MRTR with
//! `requestState`, and roots.
//!
//! Each tool picks its mechanism from the request's protocol version, so a
//! `dual` server uses both: 2025-11-25 sends server-to-client requests
//! (`elicitation/create`, `roots/list`) during the call; 2026-07-28 answers
//! with an `InputRequiredResult` and finishes on the retry that carries
//! `inputResponses` (and `requestState`, when one was issued). Tools whose
//! mechanism does not exist in an era ([`offered`]) are not listed to, and
//! refuse, requests of that era.
//!
//! The tools are a `#[tool_router]` block on [`OrderServer`]
//! (`interaction_router`, which the parent module adds with
//! `--interactions`); their shared state is [`Interactions`], held by the
//! server.

use std::{
    collections::HashMap,
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rmcp::{
    ErrorData as McpError, Peer, RoleServer,
    handler::server::{
        tool::{InputResponses, RequestState},
        wrapper::Parameters,
    },
    model::{
        CallToolResponse, CallToolResult, ClientCapabilities, ClientResult, ContentBlock,
        CustomNotification, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
        ErrorCode, InputRequest, InputRequiredResult, ServerNotification, ServerRequest,
    },
    service::{RequestContext, ServiceError},
    tool, tool_router,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::OrderServer;
use crate::{era, request_state};

/// JSON-RPC code of `URLElicitationRequiredError` (2025-11-25 only).
pub const URL_ELICITATION_REQUIRED: ErrorCode = ErrorCode(-32042);

/// Tools only offered to 2025-11-25 requests.
const LEGACY_ONLY: &[&str] = &["link_account_required"];
/// Tools only offered to 2026-07-28 requests.
const MODERN_ONLY: &[&str] = &["approve_refund"];

/// Whether the tool `name` is offered to a request of this era.
pub fn offered(name: &str, modern: bool) -> bool {
    let excluded = if modern { LEGACY_ONLY } else { MODERN_ONLY };
    !excluded.contains(&name)
}

/// In-memory state of the interaction tools, shared by every session.
#[derive(Debug, Default)]
pub struct Interactions {
    counter: AtomicU64,
    /// `link_account_required`: per account, the elicitation and whether it completed.
    links: Mutex<HashMap<String, Link>>,
}

#[derive(Clone, Debug)]
struct Link {
    elicitation_id: String,
    completed: bool,
}

impl Interactions {
    fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A fresh elicitation id, unique within this process.
    fn elicitation_id(&self, prefix: &str) -> String {
        format!("{prefix}-{}-{}", std::process::id(), self.next())
    }

    fn links(&self) -> std::sync::MutexGuard<'_, HashMap<String, Link>> {
        self.links.lock().expect("link state lock poisoned")
    }
}

/// Arguments of `confirm_order_form`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ConfirmOrderFormArgs {
    /// Order to confirm, e.g. `O-1001` (the default).
    pub order_id: Option<String>,
}

/// Arguments of `link_account`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct LinkAccountArgs {
    /// Third-party account to link, e.g. `acme` (the default).
    pub account: Option<String>,
}

/// Arguments of `link_account_required`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct LinkAccountRequiredArgs {
    /// Third-party account that must be linked, e.g. `acme` (the default).
    /// Each account has its own link state.
    pub account: Option<String>,
    /// Milliseconds after the first -32042 error at which the simulated
    /// out-of-band flow completes and `notifications/elicitation/complete`
    /// is sent (default 100, at most 60000).
    pub complete_after_ms: Option<u64>,
}

/// Arguments of `approve_refund`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ApproveRefundArgs {
    /// Order to refund, e.g. `O-1002`.
    pub order_id: String,
    /// Amount to refund in cents; defaults to the order total, may not exceed it.
    pub amount_cents: Option<u64>,
}

const DEFAULT_ORDER: &str = "O-1001";
const DEFAULT_ACCOUNT: &str = "acme";
const DEFAULT_COMPLETE_AFTER_MS: u64 = 100;
const MAX_COMPLETE_AFTER_MS: u64 = 60_000;

/// `inputRequests` keys.
const ORDER_FORM_KEY: &str = "order_form";
const ACCOUNT_LINK_KEY: &str = "account_link";
const REFUND_REASON_KEY: &str = "refund_reason";
const REFUND_CONFIRM_KEY: &str = "refund_confirm";
const ROOTS_KEY: &str = "roots";

/// The `requestedSchema` of `confirm_order_form`: every field kind of the
/// restricted elicitation schema (2025-11-25 and 2026-07-28 alike).
pub fn order_form_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "contact_name": {
                "type": "string",
                "title": "Contact name",
                "description": "Who receives the delivery",
                "minLength": 2,
                "maxLength": 60,
                "default": "Ada Lovelace"
            },
            "email": {
                "type": "string",
                "title": "E-mail",
                "description": "Where the confirmation goes",
                "format": "email",
                "default": "ada@example.com"
            },
            "website": {
                "type": "string",
                "title": "Company website",
                "format": "uri"
            },
            "delivery_date": {
                "type": "string",
                "title": "Delivery date",
                "format": "date"
            },
            "deliver_after": {
                "type": "string",
                "title": "Not before",
                "description": "Earliest delivery time",
                "format": "date-time"
            },
            // Fractions: rmcp holds these as f64 and writes `0` as `0.0`.
            "tip_percent": {
                "type": "number",
                "title": "Courier tip (%)",
                "minimum": 2.5,
                "maximum": 25.5,
                "default": 12.5
            },
            "quantity": {
                "type": "integer",
                "title": "Quantity",
                "minimum": 1,
                "maximum": 10,
                "default": 1
            },
            "gift_wrap": {
                "type": "boolean",
                "title": "Gift wrap",
                "default": false
            },
            "shipping_speed": {
                "type": "string",
                "title": "Shipping speed",
                "enum": ["standard", "express", "overnight"],
                "default": "standard"
            },
            "carrier": {
                "type": "string",
                "title": "Carrier",
                "oneOf": [
                    { "const": "dhl", "title": "DHL" },
                    { "const": "fedex", "title": "FedEx" },
                    { "const": "ups", "title": "UPS" }
                ],
                "default": "dhl"
            },
            "packaging": {
                "type": "string",
                "title": "Packaging",
                "enum": ["box", "envelope", "crate"],
                "enumNames": ["Cardboard box", "Padded envelope", "Wooden crate"],
                "default": "box"
            },
            "notify_via": {
                "type": "array",
                "title": "Notify me via",
                "minItems": 1,
                "maxItems": 2,
                "items": { "type": "string", "enum": ["email", "sms", "push"] },
                "default": ["email"]
            },
            "extras": {
                "type": "array",
                "title": "Extras",
                "minItems": 0,
                "maxItems": 3,
                "items": {
                    "anyOf": [
                        { "const": "insurance", "title": "Shipping insurance" },
                        { "const": "signature", "title": "Signature on delivery" },
                        { "const": "carbon", "title": "Carbon offset" }
                    ]
                },
                "default": ["insurance"]
            }
        },
        "required": ["contact_name", "email", "delivery_date", "quantity", "shipping_speed", "carrier", "notify_via"]
    })
}

/// Form-mode `elicitation/create` params.
fn form(message: String, schema: Value) -> ElicitRequestParams {
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": schema,
    }))
    .expect("a valid form elicitation")
}

fn order_form(order_id: &str) -> ElicitRequestParams {
    form(
        format!("Confirm the delivery details of order {order_id}."),
        order_form_schema(),
    )
}

fn refund_reason_form(order_id: &str, amount_cents: u64) -> ElicitRequestParams {
    form(
        format!("Why should order {order_id} be refunded ({amount_cents} cents)?"),
        json!({
            "type": "object",
            "properties": {
                "reason": {
                    "type": "string",
                    "title": "Reason",
                    "oneOf": [
                        { "const": "damaged", "title": "Arrived damaged" },
                        { "const": "late", "title": "Arrived late" },
                        { "const": "wrong_item", "title": "Wrong item" },
                        { "const": "other", "title": "Other" }
                    ]
                },
                "details": {
                    "type": "string",
                    "title": "Details",
                    "maxLength": 500
                }
            },
            "required": ["reason"]
        }),
    )
}

fn refund_confirm_form(order_id: &str, amount_cents: u64, reason: &Value) -> ElicitRequestParams {
    let reason = reason.as_str().unwrap_or("unspecified");
    form(
        format!(
            "Approve the refund of {amount_cents} cents for order {order_id} (reason: {reason})?"
        ),
        json!({
            "type": "object",
            "properties": {
                "confirm": {
                    "type": "boolean",
                    "title": "Approve refund",
                    "default": false
                }
            },
            "required": ["confirm"]
        }),
    )
}

/// URL-mode `elicitation/create` params. 2026-07-28 has no `elicitationId`:
/// pass `""`, which the transport layer drops (see
/// [`era::strip_empty_elicitation_ids`]).
fn link_url(account: &str, elicitation_id: &str) -> ElicitRequestParams {
    let query = if elicitation_id.is_empty() {
        format!("account={account}")
    } else {
        format!("account={account}&elicitationId={elicitation_id}")
    };
    ElicitRequestParams::UrlElicitationParams {
        meta: None,
        message: format!("Sign in to {account} to link it to your orders."),
        url: format!("https://accounts.example.com/link?{query}"),
        elicitation_id: elicitation_id.to_owned(),
    }
}

fn modern(context: &RequestContext<RoleServer>) -> bool {
    era::is_modern(context.protocol_version().as_ref())
}

fn capabilities(context: &RequestContext<RoleServer>) -> ClientCapabilities {
    context.client_capabilities().unwrap_or_default()
}

/// Form mode is declared by `elicitation: {}` or `elicitation: {form: {}}`.
fn supports_form(caps: &ClientCapabilities) -> bool {
    caps.elicitation
        .as_ref()
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

fn supports_url(caps: &ClientCapabilities) -> bool {
    caps.elicitation.as_ref().is_some_and(|e| e.url.is_some())
}

/// 2026-07-28: `-32021` naming the capability, e.g. `{"roots": {}}`.
fn missing_capability(required: Value) -> McpError {
    let required = serde_json::from_value(required).expect("valid client capabilities");
    McpError::missing_required_client_capability(required)
}

/// 2025-11-25 has no error code for this: the tool fails instead.
fn legacy_missing_capability(what: &str) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "the client did not declare the {what} capability at initialize"
    ))])
    .into()
}

fn unavailable(tool: &str, modern: bool) -> McpError {
    let why = if modern {
        "it needs protocol 2025-11-25 (URL elicitation required errors were removed in 2026-07-28)"
    } else {
        "it needs protocol 2026-07-28 (multi round-trip requests)"
    };
    McpError::invalid_params(format!("tool not found: {tool}: {why}"), None)
}

/// Sends a server-to-client request (2025-11-25) and returns the client's result.
async fn ask(peer: &Peer<RoleServer>, request: ServerRequest) -> Result<ClientResult, String> {
    peer.send_request(request)
        .await
        .map_err(|error| match error {
            ServiceError::McpError(e) => {
                format!("the client answered with error {}: {}", e.code.0, e.message)
            }
            other => format!("the request to the client failed: {other}"),
        })
}

async fn elicit(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
) -> Result<ElicitResult, String> {
    match ask(
        peer,
        ServerRequest::ElicitRequest(ElicitRequest::new(params)),
    )
    .await?
    {
        ClientResult::ElicitResult(result) => Ok(result),
        other => Err(format!(
            "elicitation/create got a non-ElicitResult: {other:?}"
        )),
    }
}

/// Sends `roots/list` (2025-11-25) and returns the client's roots.
#[expect(
    deprecated,
    reason = "roots are deprecated (SEP-2577) but still specified"
)]
async fn list_roots(peer: &Peer<RoleServer>) -> Result<Value, String> {
    let request = ServerRequest::ListRootsRequest(rmcp::model::ListRootsRequest::default());
    match ask(peer, request).await? {
        ClientResult::ListRootsResult(result) => Ok(json!(result.roots)),
        other => Err(format!("got a non-ListRootsResult: {other:?}")),
    }
}

/// A `roots/list` input request (2026-07-28).
#[expect(
    deprecated,
    reason = "roots are deprecated (SEP-2577) but still specified"
)]
fn roots_request() -> InputRequest {
    InputRequest::ListRoots(rmcp::model::ListRootsRequest::default())
}

fn tool_error(text: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text)]).into()
}

/// `{"action", "content"?}` of a 2025-11-25 elicitation result.
fn echo_legacy(result: &ElicitResult) -> Value {
    let mut echo = Map::new();
    echo.insert("action".into(), json!(result.action));
    if let Some(content) = &result.content {
        echo.insert("content".into(), content.clone());
    }
    Value::Object(echo)
}

/// Validates one `inputResponses` entry as an `ElicitResult` and returns
/// `{"action", "content"?}` exactly as received, and whether it accepted.
fn echo_modern(key: &str, raw: &Value) -> Result<(Value, bool), McpError> {
    let action = raw.get("action").and_then(Value::as_str);
    if !matches!(action, Some("accept" | "decline" | "cancel")) {
        return Err(McpError::invalid_params(
            format!(
                "inputResponses.{key} is not an ElicitResult: `action` must be accept, decline or cancel"
            ),
            Some(json!({ "inputResponse": key })),
        ));
    }
    if let Some(content) = raw.get("content")
        && !content.is_object()
    {
        return Err(McpError::invalid_params(
            format!("inputResponses.{key}.content must be an object"),
            Some(json!({ "inputResponse": key })),
        ));
    }
    let mut echo = Map::new();
    echo.insert("action".into(), raw["action"].clone());
    if let Some(content) = raw.get("content") {
        echo.insert("content".into(), content.clone());
    }
    Ok((Value::Object(echo), action == Some("accept")))
}

fn input_required(
    requests: impl IntoIterator<Item = (&'static str, InputRequest)>,
    state: Option<String>,
) -> CallToolResponse {
    let requests = requests
        .into_iter()
        .map(|(key, request)| (key.to_owned(), request))
        .collect();
    InputRequiredResult::new(Some(requests), state).into()
}

fn elicitation(params: ElicitRequestParams) -> InputRequest {
    InputRequest::Elicitation(ElicitRequest::new(params))
}

/// Refuses a `requestState` on a tool that never issues one.
fn no_state_expected(tool: &str, state: Option<&String>) -> Result<(), McpError> {
    match state {
        None => Ok(()),
        Some(_) => Err(McpError::invalid_params(
            format!(
                "unexpected requestState: {tool} never issues one, so its retry must not carry one"
            ),
            Some(json!({ "requestState": "unexpected" })),
        )),
    }
}

fn state_error(message: String, reason: &str) -> McpError {
    McpError::invalid_params(message, Some(json!({ "requestState": reason })))
}

/// Seals the state of one MRTR round of `tool`, bound to the call's `binding`.
fn seal(
    interactions: &Interactions,
    tool: &str,
    binding: &Value,
    round: u64,
    extra: Map<String, Value>,
) -> String {
    let mut payload = extra;
    payload.insert("tool".into(), tool.into());
    payload.insert("binding".into(), binding.clone());
    payload.insert("round".into(), round.into());
    payload.insert("n".into(), interactions.next().into());
    request_state::seal(payload)
}

/// Checks the echoed `requestState` of a retry of `tool` whose salient
/// arguments are `binding`. `Ok(None)`: a first call (no state, no responses).
fn verify(
    tool: &str,
    binding: &Value,
    state: Option<&String>,
    has_responses: bool,
) -> Result<Option<Map<String, Value>>, McpError> {
    let Some(state) = state else {
        return if has_responses {
            Err(state_error(
                format!(
                    "requestState is missing: a retry of {tool} with inputResponses must echo the \
                     requestState of the previous input_required result byte for byte"
                ),
                "missing",
            ))
        } else {
            Ok(None)
        };
    };
    let payload = request_state::open(state).map_err(|error| match error {
        request_state::StateError::Tampered => state_error(
            "requestState failed integrity verification (HMAC-SHA256): it was altered, truncated \
             or forged; echo it byte for byte"
                .into(),
            "tampered",
        ),
        request_state::StateError::Expired => state_error(
            format!(
                "requestState expired (older than {} s): call {tool} again without requestState",
                request_state::TTL_SECS
            ),
            "expired",
        ),
    })?;
    if payload.get("tool").and_then(Value::as_str) != Some(tool) {
        return Err(state_error(
            format!(
                "requestState was issued for another tool ({}), not {tool}",
                payload.get("tool").unwrap_or(&Value::Null)
            ),
            "mismatch",
        ));
    }
    if payload.get("binding") != Some(binding) {
        return Err(state_error(
            format!(
                "requestState was issued for other arguments ({}), not {binding}",
                payload.get("binding").unwrap_or(&Value::Null)
            ),
            "mismatch",
        ));
    }
    Ok(Some(payload))
}

#[tool_router(router = interaction_router, vis = "pub(super)")]
impl OrderServer {
    #[tool(
        title = "Confirm order details (form elicitation)",
        description = "Asks the user to confirm an order's delivery details through a form \
            elicitation that uses every field kind of the restricted schema, then returns \
            exactly what came back: {\"action\", \"content\"} as JSON text and structuredContent. \
            2025-11-25: sends elicitation/create (mode form) during the call. 2026-07-28: \
            returns input_required with inputRequests.order_form (no requestState); retry with \
            inputResponses.order_form. Needs the client's elicitation (form) capability.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn confirm_order_form(
        &self,
        Parameters(args): Parameters<ConfirmOrderFormArgs>,
        context: RequestContext<RoleServer>,
        InputResponses(responses): InputResponses,
        RequestState(state): RequestState,
    ) -> Result<CallToolResponse, McpError> {
        let order_id = args.order_id.as_deref().unwrap_or(DEFAULT_ORDER);
        if self.store.order(order_id).is_none() {
            return Ok(tool_error(format!("unknown order {order_id}")));
        }
        let caps = capabilities(&context);
        if !modern(&context) {
            if !supports_form(&caps) {
                return Ok(legacy_missing_capability("elicitation (form)"));
            }
            return Ok(match elicit(&context.peer, order_form(order_id)).await {
                Ok(result) => CallToolResult::structured(echo_legacy(&result)).into(),
                Err(error) => tool_error(format!("elicitation/create failed: {error}")),
            });
        }
        if !supports_form(&caps) {
            return Err(missing_capability(json!({ "elicitation": { "form": {} } })));
        }
        no_state_expected("confirm_order_form", state.as_ref())?;
        match responses.as_ref().and_then(|r| r.get(ORDER_FORM_KEY)) {
            Some(raw) => {
                let (echo, _) = echo_modern(ORDER_FORM_KEY, raw)?;
                Ok(CallToolResult::structured(echo).into())
            }
            None => Ok(input_required(
                [(ORDER_FORM_KEY, elicitation(order_form(order_id)))],
                None,
            )),
        }
    }

    #[tool(
        title = "Link a third-party account (URL elicitation)",
        description = "Links a third-party account through a URL-mode elicitation (the user \
            signs in out of band). 2025-11-25: sends elicitation/create {mode: url, url, \
            elicitationId, message}; on accept, sends notifications/elicitation/complete \
            {elicitationId} and returns {account, linked: true, elicitationId, action}. \
            2026-07-28: returns input_required with inputRequests.account_link (mode url, no \
            elicitationId) and a requestState; retry with inputResponses.account_link and the \
            same requestState. Decline/cancel returns isError with linked: false. Needs the \
            client's elicitation url capability.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn link_account(
        &self,
        Parameters(args): Parameters<LinkAccountArgs>,
        context: RequestContext<RoleServer>,
        InputResponses(responses): InputResponses,
        RequestState(state): RequestState,
    ) -> Result<CallToolResponse, McpError> {
        let account = args.account.as_deref().unwrap_or(DEFAULT_ACCOUNT);
        let caps = capabilities(&context);
        if !modern(&context) {
            if !supports_url(&caps) {
                return Ok(legacy_missing_capability("elicitation.url"));
            }
            let id = self.interactions.elicitation_id("link");
            let result = match elicit(&context.peer, link_url(account, &id)).await {
                Ok(result) => result,
                Err(error) => return Ok(tool_error(format!("elicitation/create failed: {error}"))),
            };
            let linked = result.action == ElicitationAction::Accept;
            let outcome = json!({
                "account": account,
                "linked": linked,
                "elicitationId": id,
                "action": result.action,
            });
            if !linked {
                return Ok(CallToolResult::structured_error(outcome).into());
            }
            // The simulated out-of-band sign-in is done: tell the client.
            let complete = CustomNotification::new(
                "notifications/elicitation/complete",
                Some(json!({ "elicitationId": id })),
            );
            if let Err(error) = context
                .peer
                .send_notification(ServerNotification::CustomNotification(complete))
                .await
            {
                tracing::warn!(%error, "failed to send notifications/elicitation/complete");
            }
            return Ok(CallToolResult::structured(outcome).into());
        }
        if !supports_url(&caps) {
            return Err(missing_capability(json!({ "elicitation": { "url": {} } })));
        }
        let binding = json!({ "account": account });
        let has_responses = responses.is_some();
        let Some(_payload) = verify("link_account", &binding, state.as_ref(), has_responses)?
        else {
            let state = seal(&self.interactions, "link_account", &binding, 1, Map::new());
            return Ok(input_required(
                [(ACCOUNT_LINK_KEY, elicitation(link_url(account, "")))],
                Some(state),
            ));
        };
        let Some(raw) = responses.as_ref().and_then(|r| r.get(ACCOUNT_LINK_KEY)) else {
            // Not answered: ask again (MRTR: re-request missing input).
            let state = seal(&self.interactions, "link_account", &binding, 1, Map::new());
            return Ok(input_required(
                [(ACCOUNT_LINK_KEY, elicitation(link_url(account, "")))],
                Some(state),
            ));
        };
        let (echo, accepted) = echo_modern(ACCOUNT_LINK_KEY, raw)?;
        let outcome = json!({
            "account": account,
            "linked": accepted,
            "action": echo["action"],
        });
        Ok(if accepted {
            CallToolResult::structured(outcome)
        } else {
            CallToolResult::structured_error(outcome)
        }
        .into())
    }

    #[tool(
        title = "Use a linked account (URL elicitation required error)",
        description = "Reads the balance of a linked third-party account; 2025-11-25 only. \
            Until the account is linked it fails with JSON-RPC error -32042 \
            (URLElicitationRequiredError) whose data.elicitations holds one URL elicitation \
            {mode: url, elicitationId, url, message}. The simulated sign-in completes \
            complete_after_ms (default 100) after the first error and the server then sends \
            notifications/elicitation/complete {elicitationId}; a retry after that succeeds. \
            A retry before it gets the same error and elicitationId. State is per account, in \
            memory, shared by all clients.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn link_account_required(
        &self,
        Parameters(args): Parameters<LinkAccountRequiredArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if modern(&context) {
            return Err(unavailable("link_account_required", true));
        }
        let account = args.account.unwrap_or_else(|| DEFAULT_ACCOUNT.to_owned());
        let delay = args
            .complete_after_ms
            .unwrap_or(DEFAULT_COMPLETE_AFTER_MS)
            .min(MAX_COMPLETE_AFTER_MS);
        let (link, fresh) = {
            let mut links = self.interactions.links();
            match links.get(&account) {
                Some(link) => (link.clone(), false),
                None => {
                    let link = Link {
                        elicitation_id: self.interactions.elicitation_id("required"),
                        completed: false,
                    };
                    links.insert(account.clone(), link.clone());
                    (link, true)
                }
            }
        };
        if link.completed {
            return Ok(CallToolResult::structured(json!({
                "account": account,
                "linked": true,
                "elicitationId": link.elicitation_id,
                "balance_cents": 12_345,
            }))
            .into());
        }
        if fresh {
            // Simulate the user finishing the out-of-band flow.
            let interactions = self.interactions.clone();
            let peer = context.peer.clone();
            let (account, id) = (account.clone(), link.elicitation_id.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                if let Some(link) = interactions.links().get_mut(&account) {
                    link.completed = true;
                }
                let complete = CustomNotification::new(
                    "notifications/elicitation/complete",
                    Some(json!({ "elicitationId": id })),
                );
                if let Err(error) = peer
                    .send_notification(ServerNotification::CustomNotification(complete))
                    .await
                {
                    tracing::warn!(%error, "failed to send notifications/elicitation/complete");
                }
            });
        }
        let url_params = link_url(&account, &link.elicitation_id);
        Err(McpError::new(
            URL_ELICITATION_REQUIRED,
            "This request requires more information.",
            Some(json!({ "elicitations": [url_params] })),
        ))
    }

    #[tool(
        title = "Approve a refund (two MRTR rounds)",
        description = "Approves a refund for an order in two multi round-trip rounds; \
            2026-07-28 only, and nothing in the store changes. Round 1 returns input_required \
            with inputRequests.refund_reason (form) and requestState S1; the retry must carry \
            inputResponses.refund_reason and S1 byte for byte. Round 2 returns \
            inputRequests.refund_confirm (form, boolean confirm) and a new requestState S2; the \
            final retry carries inputResponses.refund_confirm and S2 and gets {order_id, \
            amount_cents, approved, rounds, received: {refund_reason, refund_confirm}}. A \
            missing or altered requestState is JSON-RPC error -32602 with data.requestState = \
            missing | tampered | expired | mismatch. Decline or cancel ends with approved: false.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn approve_refund(
        &self,
        Parameters(args): Parameters<ApproveRefundArgs>,
        context: RequestContext<RoleServer>,
        InputResponses(responses): InputResponses,
        RequestState(state): RequestState,
    ) -> Result<CallToolResponse, McpError> {
        const TOOL: &str = "approve_refund";
        if !modern(&context) {
            return Err(unavailable(TOOL, false));
        }
        let Some(order) = self.store.order(&args.order_id) else {
            return Ok(tool_error(format!("unknown order {}", args.order_id)));
        };
        let amount = args.amount_cents.unwrap_or(order.total_cents);
        if amount > order.total_cents {
            return Ok(tool_error(format!(
                "refund of {amount} cents exceeds the order total of {} cents",
                order.total_cents
            )));
        }
        if !supports_form(&capabilities(&context)) {
            return Err(missing_capability(json!({ "elicitation": { "form": {} } })));
        }
        let order_id = order.id.as_str();
        let binding = json!({ "order_id": order_id, "amount_cents": amount });
        let ask_reason = || {
            let state = seal(&self.interactions, TOOL, &binding, 1, Map::new());
            input_required(
                [(
                    REFUND_REASON_KEY,
                    elicitation(refund_reason_form(order_id, amount)),
                )],
                Some(state),
            )
        };
        let ask_confirm = |received: Map<String, Value>| {
            let reason = &received[REFUND_REASON_KEY]["content"]["reason"];
            let params = refund_confirm_form(order_id, amount, reason);
            let mut extra = Map::new();
            extra.insert("received".into(), Value::Object(received));
            let state = seal(&self.interactions, TOOL, &binding, 2, extra);
            input_required([(REFUND_CONFIRM_KEY, elicitation(params))], Some(state))
        };
        let finish = |received: Map<String, Value>, approved: bool, rounds: u64| {
            CallToolResult::structured(json!({
                "order_id": order_id,
                "amount_cents": amount,
                "approved": approved,
                "rounds": rounds,
                "received": received,
            }))
            .into()
        };
        let Some(payload) = verify(TOOL, &binding, state.as_ref(), responses.is_some())? else {
            return Ok(ask_reason());
        };
        let response = |key: &str| responses.as_ref().and_then(|r| r.get(key));
        match payload.get("round").and_then(Value::as_u64) {
            Some(1) => {
                let Some(raw) = response(REFUND_REASON_KEY) else {
                    return Ok(ask_reason());
                };
                let (_, accepted) = echo_modern(REFUND_REASON_KEY, raw)?;
                let mut received = Map::new();
                received.insert(REFUND_REASON_KEY.into(), raw.clone());
                if !accepted {
                    return Ok(finish(received, false, 2));
                }
                if raw["content"]["reason"].as_str().is_none() {
                    return Err(McpError::invalid_params(
                        "inputResponses.refund_reason.content.reason is required",
                        Some(json!({ "inputResponse": REFUND_REASON_KEY })),
                    ));
                }
                Ok(ask_confirm(received))
            }
            Some(2) => {
                let received = match payload.get("received") {
                    Some(Value::Object(received)) => received.clone(),
                    _ => Map::new(),
                };
                let Some(raw) = response(REFUND_CONFIRM_KEY) else {
                    return Ok(ask_confirm(received));
                };
                let (_, accepted) = echo_modern(REFUND_CONFIRM_KEY, raw)?;
                let approved = accepted && raw["content"]["confirm"] == Value::Bool(true);
                let mut received = received;
                received.insert(REFUND_CONFIRM_KEY.into(), raw.clone());
                Ok(finish(received, approved, 3))
            }
            _ => Err(state_error(
                "requestState names an unknown round".into(),
                "tampered",
            )),
        }
    }

    #[tool(
        name = "workspace_roots",
        title = "List the client's workspace roots",
        description = "Asks the client for its roots and returns them as {\"roots\": [...]} \
            (JSON text and structuredContent). 2025-11-25: sends roots/list during the call. \
            2026-07-28: returns input_required with inputRequests.roots = {method: roots/list} \
            (no requestState); retry with inputResponses.roots (a ListRootsResult). Needs the \
            client's roots capability.",
        annotations(
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn workspace_roots(
        &self,
        context: RequestContext<RoleServer>,
        InputResponses(responses): InputResponses,
        RequestState(state): RequestState,
    ) -> Result<CallToolResponse, McpError> {
        let has_roots = capabilities(&context).roots.is_some();
        if !modern(&context) {
            if !has_roots {
                return Ok(legacy_missing_capability("roots"));
            }
            return Ok(match list_roots(&context.peer).await {
                Ok(roots) => CallToolResult::structured(json!({ "roots": roots })).into(),
                Err(error) => tool_error(format!("roots/list failed: {error}")),
            });
        }
        if !has_roots {
            return Err(missing_capability(json!({ "roots": {} })));
        }
        no_state_expected("workspace_roots", state.as_ref())?;
        match responses.as_ref().and_then(|r| r.get(ROOTS_KEY)) {
            Some(raw) => match raw.get("roots") {
                Some(roots @ Value::Array(_)) => {
                    Ok(CallToolResult::structured(json!({ "roots": roots })).into())
                }
                _ => Err(McpError::invalid_params(
                    "inputResponses.roots is not a ListRootsResult: `roots` must be an array",
                    Some(json!({ "inputResponse": ROOTS_KEY })),
                )),
            },
            None => Ok(input_required([(ROOTS_KEY, roots_request())], None)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::era::strip_empty_elicitation_ids;

    /// rmcp's typed schema must not lose or reorder anything of ours.
    #[test]
    fn order_form_survives_rmcp_serialisation() {
        let params = serde_json::to_value(order_form("O-1001")).unwrap();
        assert_eq!(params["mode"], "form");
        assert_eq!(params["requestedSchema"], order_form_schema());
        let wire = serde_json::to_string(&params["requestedSchema"]).unwrap();
        assert_eq!(wire, order_form_schema().to_string(), "property order");
    }

    #[test]
    fn url_elicitation_id_is_stripped_only_when_empty() {
        let mut result = serde_json::to_value(InputRequiredResult::new(
            Some(
                [
                    ("a".to_owned(), elicitation(link_url("acme", ""))),
                    ("b".to_owned(), elicitation(link_url("acme", "x-1"))),
                ]
                .into_iter()
                .collect(),
            ),
            None,
        ))
        .unwrap();
        assert_eq!(result["inputRequests"]["a"]["params"]["elicitationId"], "");
        assert!(strip_empty_elicitation_ids(&mut result));
        assert!(
            result["inputRequests"]["a"]["params"]
                .get("elicitationId")
                .is_none()
        );
        assert_eq!(
            result["inputRequests"]["b"]["params"]["elicitationId"],
            "x-1"
        );
    }
}
