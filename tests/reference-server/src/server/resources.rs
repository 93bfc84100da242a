//! Stage E's resources, served with `--resources`: the `orders://` resources
//! (Markdown and JSON documents, one longer than 20,000 characters, a small
//! PDF invoice and a large binary of configurable size, one JSON resource per
//! order and one summary per customer), their paging (`resources/list` and
//! `resources/templates/list`, [`PAGE_SIZE`] per page, opaque cursors), the
//! two resource templates and the completion of their arguments, the
//! `add_resource` tool that grows the lists and sends
//! `notifications/resources/list_changed` and `notifications/prompts/list_changed`,
//! and `orders://private/notes`, which asks the client first (2025-11-25: an
//! `elicitation/create` request during the read; 2026-07-28: an MRTR
//! `input_required` result with a sealed `requestState`).
//!
//! It also owns what the sibling [`super::prompts`] shares with it: the
//! process-wide [`Catalogue`] state (added items, open listen streams), the
//! cursor scheme ([`page`]), prefix completion ([`complete_values`]) and the
//! elicitation and MRTR helpers. The parent module holds the `Catalogue`,
//! declares the capabilities ([`declare_capabilities`]) and routes the
//! `ServerHandler` methods here.

use std::{
    fmt::Write as _,
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

use base64::{
    Engine as _,
    engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD},
};
use rmcp::{
    ErrorData as McpError, Peer, RoleServer,
    handler::server::tool::{ToolCallContext, ToolRoute, ToolRouter},
    model::{
        CacheScope, CallToolResponse, CallToolResult, ClientCapabilities, ClientResult,
        CompletionInfo, ElicitRequest, ElicitRequestParams, InputRequest, InputRequiredResult,
        InputResponses, JsonObject, ListResourceTemplatesResult, ListResourcesResult,
        PromptsCapability, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
        Resource, ResourceContents, ResourceTemplate, ResourcesCapability, ServerCapabilities,
        ServerRequest, Tool, ToolAnnotations,
    },
    service::{RequestContext, ServiceError, SubscriptionSink},
};
use serde_json::{Map, Value, json};

use super::OrderServer;
use crate::{
    era,
    orders::{CATALOG, Order, OrderStore},
    request_state,
};

/// Items per `resources/list`, `resources/templates/list` and `prompts/list` page.
pub const PAGE_SIZE: usize = 10;

/// Default size of `orders://invoices/large.pdf`, in bytes.
pub const DEFAULT_LARGE_RESOURCE_BYTES: u64 = 5_000_000;

/// `orders://catalog/full.md` grows until it is at least this many characters.
const FULL_CATALOG_CHARS: usize = 30_000;

/// The tool that adds a resource and a prompt.
pub const ADD_RESOURCE: &str = "add_resource";

const ORDER_TEMPLATE: &str = "orders://orders/{order_id}";
const CUSTOMER_TEMPLATE: &str = "orders://customers/{customer_id}/summary";
const ORDER_PREFIX: &str = "orders://orders/";
const CUSTOMER_PREFIX: &str = "orders://customers/";
const ADDED_PREFIX: &str = "orders://added/R-";
const INVOICE_URI: &str = "orders://invoices/INV-1.pdf";
const LARGE_URI: &str = "orders://invoices/large.pdf";
const NOTES_URI: &str = "orders://private/notes";

/// `inputRequests` keys of `orders://private/notes` (2026-07-28).
const NOTES_ACCESS_KEY: &str = "notes_access";
const ROOTS_KEY: &str = "roots";

/// The fixed documents, in list order: URI, name, title, description, MIME type.
const DOCUMENTS: [(&str, &str, &str, &str, &str); 8] = [
    (
        "orders://catalog/full.md",
        "full.md",
        "Full catalog",
        "Every product, orderable and archived, as one Markdown table (about 30,000 characters).",
        "text/markdown",
    ),
    (
        "orders://catalog/skus.json",
        "skus.json",
        "Orderable SKUs",
        "The SKUs create_order accepts, with their unit prices in cents.",
        "application/json",
    ),
    (
        "orders://policies/returns.md",
        "returns.md",
        "Returns policy",
        "How and when orders can be returned.",
        "text/markdown",
    ),
    (
        "orders://policies/shipping.md",
        "shipping.md",
        "Shipping policy",
        "Carriers, speeds and costs.",
        "text/markdown",
    ),
    (
        "orders://reports/summary.json",
        "summary.json",
        "Order report",
        "Order count and revenue, overall and by status, from the live store.",
        "application/json",
    ),
    (
        INVOICE_URI,
        "INV-1.pdf",
        "Invoice INV-1",
        "The invoice of order O-1001: a one-page PDF.",
        "application/pdf",
    ),
    (
        LARGE_URI,
        "large.pdf",
        "Invoice archive (large)",
        "Deterministic binary of --large-resource-bytes bytes (default 5,000,000) that starts \
         with %PDF- and ends with %%EOF.",
        "application/pdf",
    ),
    (
        NOTES_URI,
        "notes",
        "Private order notes",
        "Asks why first (form elicitation; in 2026-07-28 through MRTR, with roots/list too \
         when the client has roots).",
        "text/markdown",
    ),
];

const RETURNS_POLICY: &str = "# Returns policy\n\n\
    Delivered orders can be returned within 30 days of delivery.\n\n\
    * Unopened items: full refund of the unit price.\n\
    * Opened items: refund minus a 15% restocking fee.\n\
    * Damaged on arrival: full refund and free return shipping.\n\n\
    Cancelled orders are refunded automatically; pending orders can be cancelled at any time.\n";

const SHIPPING_POLICY: &str = "# Shipping policy\n\n\
    | Speed | Carrier | Days | Cost (cents) |\n\
    | --- | --- | ---: | ---: |\n\
    | standard | DHL | 5 | 499 |\n\
    | express | UPS | 2 | 1299 |\n\
    | overnight | FedEx | 1 | 2999 |\n\n\
    Orders over 10000 cents ship standard for free.\n";

/// Process-wide state of stage E (resources and prompts are the same for
/// every client): how many items `add_resource` added, the open 2026-07-28
/// listen streams, the cached large binary, and a counter for sealed states.
#[derive(Debug)]
pub struct Catalogue {
    large_resource_bytes: usize,
    /// Base64 of `orders://invoices/large.pdf`, built on first read.
    large_blob: OnceLock<String>,
    /// Number of `add_resource` calls: items `R-1..=R-added` / `added_prompt_1..`.
    added: AtomicU64,
    counter: AtomicU64,
    next_listener: AtomicU64,
    /// Open `subscriptions/listen` streams that accepted `resourcesListChanged`
    /// or `promptsListChanged`.
    listeners: Mutex<Vec<(u64, SubscriptionSink)>>,
}

impl Catalogue {
    /// Stage E state; `orders://invoices/large.pdf` will be `large_resource_bytes` long.
    pub fn new(large_resource_bytes: u64) -> Self {
        Self {
            large_resource_bytes: usize::try_from(large_resource_bytes).unwrap_or(usize::MAX),
            large_blob: OnceLock::new(),
            added: AtomicU64::new(0),
            counter: AtomicU64::new(0),
            next_listener: AtomicU64::new(0),
            listeners: Mutex::new(Vec::new()),
        }
    }

    /// How many resources (and prompts) `add_resource` has added.
    pub fn added(&self) -> u64 {
        self.added.load(Ordering::SeqCst)
    }

    fn next(&self) -> u64 {
        self.counter.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Registers a listen stream's sink until the returned guard is dropped.
    pub fn listen(self: &Arc<Self>, sink: SubscriptionSink) -> ListenerGuard {
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        self.listeners().push((id, sink));
        ListenerGuard {
            catalogue: self.clone(),
            id,
        }
    }

    fn listeners(&self) -> std::sync::MutexGuard<'_, Vec<(u64, SubscriptionSink)>> {
        self.listeners.lock().expect("listener lock poisoned")
    }

    /// Sends `notifications/resources/list_changed` then
    /// `notifications/prompts/list_changed`: unscoped to the calling peer when
    /// the call is 2025-11-25, and to every open 2026-07-28 listen stream
    /// that accepted them. Returns how many were sent.
    async fn notify(&self, legacy_peer: Option<&Peer<RoleServer>>) -> u64 {
        let mut sent = 0;
        if let Some(peer) = legacy_peer {
            for result in [
                peer.notify_resource_list_changed().await,
                peer.notify_prompt_list_changed().await,
            ] {
                match result {
                    Ok(()) => sent += 1,
                    Err(error) => tracing::warn!(%error, "failed to send a list_changed"),
                }
            }
        }
        let sinks: Vec<_> = self.listeners().iter().map(|(_, s)| s.clone()).collect();
        for sink in sinks {
            if sink.accepted().resources_list_changed == Some(true) {
                match sink.notify_resource_list_changed().await {
                    Ok(()) => sent += 1,
                    Err(error) => tracing::debug!(%error, "listen stream gone"),
                }
            }
            if sink.accepted().prompts_list_changed == Some(true) {
                match sink.notify_prompt_list_changed().await {
                    Ok(()) => sent += 1,
                    Err(error) => tracing::debug!(%error, "listen stream gone"),
                }
            }
        }
        sent
    }

    fn large_blob(&self) -> &str {
        self.large_blob
            .get_or_init(|| STANDARD.encode(large_pdf(self.large_resource_bytes)))
    }
}

/// Keeps a listen stream registered in the [`Catalogue`] while alive.
#[derive(Debug)]
pub struct ListenerGuard {
    catalogue: Arc<Catalogue>,
    id: u64,
}

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        self.catalogue.listeners().retain(|(id, _)| *id != self.id);
    }
}

/// Declares `resources` and `prompts` (both with `listChanged: true`) and
/// `completions`.
pub fn declare_capabilities(capabilities: &mut ServerCapabilities) {
    let mut resources = ResourcesCapability::default();
    resources.list_changed = Some(true);
    capabilities.resources = Some(resources);
    let mut prompts = PromptsCapability::default();
    prompts.list_changed = Some(true);
    capabilities.prompts = Some(prompts);
    capabilities.completions = Some(JsonObject::new());
}

// ---- paging and completion (shared with prompts) -----------------------------

/// The page of `items` that `cursor` points at, and the next page's cursor.
///
/// A cursor is `base64url("KIND:OFFSET")` (no padding); one of another
/// list, not base64url, or pointing outside the list is JSON-RPC `-32602`.
pub fn page<T: Clone>(
    items: &[T],
    kind: &str,
    cursor: Option<&str>,
) -> Result<(Vec<T>, Option<String>), McpError> {
    let start = match cursor {
        None => 0,
        Some(cursor) => URL_SAFE_NO_PAD
            .decode(cursor)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|text| {
                let (cursor_kind, offset) = text.split_once(':')?;
                (cursor_kind == kind).then(|| offset.parse::<usize>().ok())?
            })
            .filter(|&start| start > 0 && start < items.len())
            .ok_or_else(|| {
                McpError::invalid_params(
                    format!("invalid cursor for {kind}/list: {cursor:?}"),
                    Some(json!({ "cursor": cursor })),
                )
            })?,
    };
    let end = items.len().min(start + PAGE_SIZE);
    let next = (end < items.len()).then(|| URL_SAFE_NO_PAD.encode(format!("{kind}:{end}")));
    Ok((items[start..end].to_vec(), next))
}

/// Completion values: the `candidates` starting with `prefix` (ASCII case
/// ignored), at most 100, with `total` and `hasMore`.
pub fn complete_values(
    candidates: impl IntoIterator<Item = String>,
    prefix: &str,
) -> CompletionInfo {
    let prefix = prefix.to_ascii_lowercase();
    let matches: Vec<String> = candidates
        .into_iter()
        .filter(|candidate| candidate.to_ascii_lowercase().starts_with(&prefix))
        .collect();
    let total = matches.len();
    let values = matches
        .into_iter()
        .take(CompletionInfo::MAX_VALUES)
        .collect();
    CompletionInfo::with_pagination(
        values,
        Some(u32::try_from(total).unwrap_or(u32::MAX)),
        total > CompletionInfo::MAX_VALUES,
    )
    .expect("at most MAX_VALUES values")
}

/// The ids of every order in the store.
pub fn order_ids(store: &OrderStore) -> Vec<String> {
    store.list(None, None).into_iter().map(|o| o.id).collect()
}

/// The ids of every customer in the store.
pub fn customer_ids(store: &OrderStore) -> Vec<String> {
    store.customers().into_iter().map(|c| c.id).collect()
}

// ---- elicitation and MRTR (shared with prompts) ------------------------------

/// Whether the request uses the 2026-07-28 lifecycle.
pub fn modern(context: &RequestContext<RoleServer>) -> bool {
    era::is_modern(context.protocol_version().as_ref())
}

/// The request's client capabilities (2026-07-28: its `_meta`; 2025-11-25:
/// `initialize`).
pub fn capabilities(context: &RequestContext<RoleServer>) -> ClientCapabilities {
    context.client_capabilities().unwrap_or_default()
}

/// Form mode is declared by `elicitation: {}` or `elicitation: {form: {}}`.
pub fn supports_form(caps: &ClientCapabilities) -> bool {
    caps.elicitation
        .as_ref()
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The error for a request that needs form elicitation from a client that
/// did not declare it: 2026-07-28 `-32021` naming the capability; 2025-11-25
/// (which has no such code) `-32600`.
pub fn form_elicitation_missing(modern: bool, what: &str) -> McpError {
    if modern {
        let required = serde_json::from_value(json!({ "elicitation": { "form": {} } }))
            .expect("valid client capabilities");
        McpError::missing_required_client_capability(required)
    } else {
        McpError::invalid_request(
            format!(
                "{what} needs the client's elicitation (form) capability, which it did not \
                 declare at initialize"
            ),
            None,
        )
    }
}

/// Form-mode `elicitation/create` params.
pub fn form(message: String, schema: Value) -> ElicitRequestParams {
    serde_json::from_value(json!({
        "mode": "form",
        "message": message,
        "requestedSchema": schema,
    }))
    .expect("a valid form elicitation")
}

/// An `elicitation/create` input request (2026-07-28).
pub fn elicitation(params: ElicitRequestParams) -> InputRequest {
    InputRequest::Elicitation(ElicitRequest::new(params))
}

/// A `roots/list` input request (2026-07-28).
#[expect(
    deprecated,
    reason = "roots are deprecated (SEP-2577) but still specified"
)]
fn roots_request() -> InputRequest {
    InputRequest::ListRoots(rmcp::model::ListRootsRequest::default())
}

/// Sends a server-to-client request (2025-11-25) and returns the client's
/// result; a failure is JSON-RPC `-32603` naming `what`.
async fn ask(
    peer: &Peer<RoleServer>,
    request: ServerRequest,
    what: &str,
) -> Result<ClientResult, McpError> {
    peer.send_request(request).await.map_err(|error| {
        let why = match error {
            ServiceError::McpError(e) => {
                format!("the client answered with error {}: {}", e.code.0, e.message)
            }
            other => format!("the request to the client failed: {other}"),
        };
        McpError::internal_error(format!("{what} failed: {why}"), None)
    })
}

/// Sends `elicitation/create` (2025-11-25); returns the result as raw JSON
/// (`{"action", "content"?}`), the shape a 2026-07-28 `inputResponses` entry has.
pub async fn elicit_legacy(
    peer: &Peer<RoleServer>,
    params: ElicitRequestParams,
) -> Result<Value, McpError> {
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    match ask(peer, request, "elicitation/create").await? {
        ClientResult::ElicitResult(result) => Ok(json!(result)),
        other => Err(McpError::internal_error(
            format!("elicitation/create got a non-ElicitResult: {other:?}"),
            None,
        )),
    }
}

/// Sends `roots/list` (2025-11-25); returns `{"roots": [...]}`.
#[expect(
    deprecated,
    reason = "roots are deprecated (SEP-2577) but still specified"
)]
async fn list_roots_legacy(peer: &Peer<RoleServer>) -> Result<Value, McpError> {
    let request = ServerRequest::ListRootsRequest(rmcp::model::ListRootsRequest::default());
    match ask(peer, request, "roots/list").await? {
        ClientResult::ListRootsResult(result) => Ok(json!({ "roots": result.roots })),
        other => Err(McpError::internal_error(
            format!("roots/list got a non-ListRootsResult: {other:?}"),
            None,
        )),
    }
}

/// Reads an `ElicitResult` (raw JSON, either era): `Some(content)` when
/// accepted, `None` when declined or cancelled, along with the action.
/// Anything else is `-32602` with `data.inputResponse = key`.
pub fn elicit_outcome(
    key: &str,
    raw: &Value,
) -> Result<(String, Option<Map<String, Value>>), McpError> {
    let bad = |why: &str| {
        McpError::invalid_params(
            format!("inputResponses.{key} is not an ElicitResult: {why}"),
            Some(json!({ "inputResponse": key })),
        )
    };
    let action = raw.get("action").and_then(Value::as_str);
    match action {
        Some("accept") => match raw.get("content") {
            Some(Value::Object(content)) => Ok(("accept".into(), Some(content.clone()))),
            _ => Err(bad("an accepted result needs a `content` object")),
        },
        Some(action @ ("decline" | "cancel")) => Ok((action.into(), None)),
        _ => Err(bad("`action` must be accept, decline or cancel")),
    }
}

/// What a 2026-07-28 retry carries: `inputResponses` and `requestState`.
#[derive(Debug, Default)]
pub struct Retry<'a> {
    /// The `inputResponses` of the request, if any.
    pub responses: Option<&'a InputResponses>,
    /// The echoed `requestState`, if any.
    pub state: Option<&'a str>,
}

impl Retry<'_> {
    /// The response for `key`, if the retry carries one.
    pub fn response(&self, key: &str) -> Option<&Value> {
        self.responses?.get(key)
    }
}

fn state_error(message: String, reason: &str) -> McpError {
    McpError::invalid_params(message, Some(json!({ "requestState": reason })))
}

/// Seals an MRTR `requestState` bound to `binding` (the method, its target
/// and the salient arguments).
pub fn seal_state(catalogue: &Catalogue, binding: &Value) -> String {
    let mut payload = Map::new();
    payload.insert("binding".into(), binding.clone());
    payload.insert("n".into(), catalogue.next().into());
    request_state::seal(payload)
}

/// Checks a retry's `requestState` against `binding`. `Ok(false)`: a first
/// request (no state, no responses); `Ok(true)`: a verified state. `-32602`
/// with `data.requestState` = `missing` (responses without state),
/// `tampered`, `expired` or `mismatch` (another request's state).
pub fn verify_state(what: &str, binding: &Value, retry: &Retry<'_>) -> Result<bool, McpError> {
    let Some(state) = retry.state else {
        return match retry.responses {
            Some(_) => Err(state_error(
                format!(
                    "requestState is missing: a retry of {what} with inputResponses must echo the \
                     requestState of the previous input_required result byte for byte"
                ),
                "missing",
            )),
            None => Ok(false),
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
                "requestState expired (older than {} s): send {what} again without requestState",
                request_state::TTL_SECS
            ),
            "expired",
        ),
    })?;
    if payload.get("binding") != Some(binding) {
        return Err(state_error(
            format!(
                "requestState was issued for another request ({}), not {binding}",
                payload.get("binding").unwrap_or(&Value::Null)
            ),
            "mismatch",
        ));
    }
    Ok(true)
}

/// An `input_required` result asking `requests`, with `state`.
pub fn input_required(
    requests: impl IntoIterator<Item = (&'static str, InputRequest)>,
    state: String,
) -> InputRequiredResult {
    let requests = requests
        .into_iter()
        .map(|(key, request)| (key.to_owned(), request))
        .collect();
    InputRequiredResult::new(Some(requests), Some(state))
}

// ---- the resources -----------------------------------------------------------

fn resource(
    uri: impl Into<String>,
    name: impl Into<String>,
    title: String,
    mime: &str,
) -> Resource {
    Resource::new(uri, name)
        .with_title(title)
        .with_mime_type(mime)
}

fn order_resource(order: &Order) -> Resource {
    let status = serde_json::to_value(order.status).unwrap_or(Value::Null);
    resource(
        format!("{ORDER_PREFIX}{}", order.id),
        order.id.clone(),
        format!("Order {}", order.id),
        "application/json",
    )
    .with_description(format!(
        "Order {} of customer {} ({}), as JSON.",
        order.id,
        order.customer_id,
        status.as_str().unwrap_or_default()
    ))
}

/// Every resource, in list order: the documents, one per order, one per
/// customer, then those `add_resource` added.
fn all_resources(store: &OrderStore, catalogue: &Catalogue) -> Vec<Resource> {
    let mut resources: Vec<Resource> = DOCUMENTS
        .iter()
        .map(|&(uri, name, title, description, mime)| {
            let resource =
                resource(uri, name, title.to_owned(), mime).with_description(description);
            match uri {
                "orders://catalog/full.md" => resource.with_size(full_catalog().len() as u64),
                INVOICE_URI => resource.with_size(invoice_pdf(store).len() as u64),
                LARGE_URI => resource.with_size(catalogue.large_resource_bytes as u64),
                _ => resource,
            }
        })
        .collect();
    resources.extend(store.list(None, None).iter().map(order_resource));
    resources.extend(store.customers().into_iter().map(|customer| {
        resource(
            format!("{CUSTOMER_PREFIX}{}/summary", customer.id),
            format!("{} summary", customer.id),
            format!("Customer {} ({})", customer.id, customer.name),
            "text/plain",
        )
        .with_description(format!("{}'s orders and totals, as text.", customer.name))
    }));
    resources.extend((1..=catalogue.added()).map(|n| {
        resource(
            format!("{ADDED_PREFIX}{n}"),
            format!("R-{n}"),
            format!("Added resource R-{n}"),
            "text/plain",
        )
        .with_description(format!("Added by add_resource call {n}."))
    }));
    resources
}

fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(ORDER_TEMPLATE, "order")
            .with_title("Order by id")
            .with_description(
                "One order as JSON. order_id completes from the store (completion/complete).",
            )
            .with_mime_type("application/json"),
        ResourceTemplate::new(CUSTOMER_TEMPLATE, "customer_summary")
            .with_title("Customer summary")
            .with_description(
                "A customer's orders and totals as text. customer_id completes from the store.",
            )
            .with_mime_type("text/plain"),
    ]
}

fn text(uri: &str, mime: &str, text: impl Into<String>) -> ReadResourceResult {
    ReadResourceResult::new(vec![ResourceContents::text(text, uri).with_mime_type(mime)])
}

fn blob(uri: &str, mime: &str, base64: String) -> ReadResourceResult {
    ReadResourceResult::new(vec![
        ResourceContents::blob(base64, uri).with_mime_type(mime),
    ])
}

fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).expect("serialisable")
}

fn not_found(uri: &str) -> McpError {
    // -32002; rmcp rewrites it to -32602 for 2026-07-28 requests.
    McpError::resource_not_found("Resource not found", Some(json!({ "uri": uri })))
}

/// `orders://reports/summary.json`.
fn report(store: &OrderStore) -> Value {
    let orders = store.list(None, None);
    let mut by_status = Map::new();
    for status in ["pending", "shipped", "delivered", "cancelled"] {
        let count = orders
            .iter()
            .filter(|o| {
                serde_json::to_value(o.status)
                    .ok()
                    .as_ref()
                    .and_then(Value::as_str)
                    == Some(status)
            })
            .count();
        by_status.insert(status.into(), count.into());
    }
    json!({
        "order_count": orders.len(),
        "revenue_cents": orders.iter().map(|o| o.total_cents).sum::<u64>(),
        "by_status": by_status,
    })
}

/// `orders://customers/{customer_id}/summary`, if the customer exists.
fn customer_summary(store: &OrderStore, customer_id: &str) -> Option<String> {
    let customer = store.customer(customer_id)?;
    let orders = store.list(Some(customer_id), None);
    let total: u64 = orders.iter().map(|o| o.total_cents).sum();
    let mut text = format!(
        "Customer {}: {} <{}>, tier {}.\n{} orders, {total} cents in total.\n",
        customer.id,
        customer.name,
        customer.email,
        customer.tier,
        orders.len()
    );
    for order in &orders {
        let status = serde_json::to_value(order.status).unwrap_or(Value::Null);
        let _ = writeln!(
            text,
            "- {}: {}, {} cents",
            order.id,
            status.as_str().unwrap_or_default(),
            order.total_cents
        );
    }
    Some(text)
}

/// `orders://catalog/full.md`: the orderable SKUs, then generated archived
/// products until the text has at least [`FULL_CATALOG_CHARS`] characters.
pub fn full_catalog() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut text = String::from(
            "# Full catalog\n\n\
             Every product of the fictional order system. Only the four active SKUs can be \
             ordered (create_order); archived products are kept for order history.\n\n\
             | SKU | Name | Unit price (cents) | Weight (g) | Status | Notes |\n\
             | --- | --- | ---: | ---: | --- | --- |\n",
        );
        for (sku, price) in CATALOG {
            let _ = writeln!(
                text,
                "| {sku} | {} | {price} | {} | active | orderable |",
                sku.to_ascii_lowercase().replace('-', " "),
                price / 10 + 40
            );
        }
        let families = ["widget", "gadget", "cable", "bracket", "sprocket", "gasket"];
        let mut n = 0;
        while text.len() < FULL_CATALOG_CHARS {
            n += 1;
            let family = families[n % families.len()];
            let _ = writeln!(
                text,
                "| ARC-{n:04} | archived {family} mark {n} | {} | {} | archived | replaced by {}; kept for order history |",
                100 + (n * 7919) % 9900,
                50 + (n * 37) % 2000,
                CATALOG[n % CATALOG.len()].0
            );
        }
        let _ = writeln!(text, "\n{} active and {n} archived products.", CATALOG.len());
        text
    })
}

/// Escapes a PDF literal string.
fn pdf_string(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('(', "\\(")
        .replace(')', "\\)")
}

/// `orders://invoices/INV-1.pdf`: a one-page PDF (Helvetica text, a valid
/// cross-reference table) with the invoice of order `O-1001`.
pub fn invoice_pdf(store: &OrderStore) -> Vec<u8> {
    let mut lines = vec!["Invoice INV-1".to_owned()];
    if let Some(order) = store.order("O-1001") {
        let customer = store
            .customer(&order.customer_id)
            .map_or_else(|| order.customer_id.clone(), |c| c.name);
        lines.push(format!("Order {} - {customer}", order.id));
        for line in &order.lines {
            lines.push(format!(
                "{} x {} at {} cents",
                line.quantity, line.sku, line.unit_price_cents
            ));
        }
        lines.push(format!("Total: {} cents", order.total_cents));
    }
    let mut content = String::from("BT /F1 14 Tf 72 770 Td 18 TL\n");
    for line in &lines {
        let _ = writeln!(content, "({}) Tj T*", pdf_string(line));
    }
    content.push_str("ET\n");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R \
         /Resources << /Font << /F1 5 0 R >> >> >>"
            .to_owned(),
        format!(
            "<< /Length {} >>\nstream\n{content}endstream",
            content.len()
        ),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_owned(),
    ];
    // A binary comment after the header marks the file as binary.
    let mut pdf: Vec<u8> = b"%PDF-1.4\n%\xE2\xE3\xCF\xD3\n".to_vec();
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n{object}\nendobj\n", i + 1).as_bytes());
    }
    let xref = pdf.len();
    let mut table = format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1);
    for offset in offsets {
        let _ = writeln!(table, "{offset:010} 00000 n ");
    }
    let _ = write!(
        table,
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        objects.len() + 1
    );
    pdf.extend_from_slice(table.as_bytes());
    pdf
}

/// `orders://invoices/large.pdf`: exactly `len` deterministic bytes, a PDF
/// header, xorshift32 noise and a `%%EOF` trailer (the header cut short
/// when `len` is too small for both).
pub fn large_pdf(len: usize) -> Vec<u8> {
    const HEAD: &[u8] = b"%PDF-1.7\n%\xE2\xE3\xCF\xD3\n";
    const TAIL: &[u8] = b"\n%%EOF\n";
    let mut bytes = Vec::with_capacity(len);
    bytes.extend_from_slice(&HEAD[..HEAD.len().min(len)]);
    let tail: &[u8] = if len >= HEAD.len() + TAIL.len() {
        TAIL
    } else {
        b""
    };
    let body_end = len - tail.len();
    let mut x: u32 = 0x9E37_79B9;
    while bytes.len() < body_end {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let chunk = x.to_le_bytes();
        let take = chunk.len().min(body_end - bytes.len());
        bytes.extend_from_slice(&chunk[..take]);
    }
    bytes.extend_from_slice(tail);
    bytes
}

/// The form `orders://private/notes` asks.
fn notes_form() -> ElicitRequestParams {
    form(
        format!("Reading {NOTES_URI} is audited. Why do you need the private order notes?"),
        json!({
            "type": "object",
            "properties": {
                "reason": {
                    "type": "string",
                    "title": "Reason",
                    "description": "Why you need the notes (recorded in the audit log)",
                    "minLength": 3,
                    "maxLength": 200
                }
            },
            "required": ["reason"]
        }),
    )
}

/// `orders://private/notes` once the client answered: the notes for an
/// accepted form (with its `reason` and the client's roots, if asked), a
/// notice for a declined or cancelled one.
fn notes(access: &Value, roots: Option<&Value>) -> Result<ReadResourceResult, McpError> {
    let (action, content) = elicit_outcome(NOTES_ACCESS_KEY, access)?;
    let roots = match roots {
        None => None,
        Some(raw) => match raw.get("roots") {
            Some(Value::Array(roots)) => Some(roots.clone()),
            _ => {
                return Err(McpError::invalid_params(
                    "inputResponses.roots is not a ListRootsResult: `roots` must be an array",
                    Some(json!({ "inputResponse": ROOTS_KEY })),
                ));
            }
        },
    };
    let Some(content) = content else {
        let outcome = if action == "decline" {
            "declined"
        } else {
            "cancelled"
        };
        return Ok(text(
            NOTES_URI,
            "text/markdown",
            format!("# Private order notes\n\nAccess {outcome}: the notes stay hidden.\n"),
        ));
    };
    let Some(reason) = content.get("reason").and_then(Value::as_str) else {
        return Err(McpError::invalid_params(
            "inputResponses.notes_access.content.reason is required",
            Some(json!({ "inputResponse": NOTES_ACCESS_KEY })),
        ));
    };
    let roots = match roots {
        None => "not asked (no roots capability)".to_owned(),
        Some(roots) if roots.is_empty() => "none".to_owned(),
        Some(roots) => roots
            .iter()
            .map(|root| root.get("uri").and_then(Value::as_str).unwrap_or("?"))
            .collect::<Vec<_>>()
            .join(", "),
    };
    Ok(text(
        NOTES_URI,
        "text/markdown",
        format!(
            "# Private order notes\n\n\
             Access reason: {reason}\n\
             Client roots: {roots}\n\n\
             - O-1002 (Ada Lovelace): asked for a signature on delivery.\n\
             - O-1003 (Grace Hopper): cable colour to be confirmed by phone.\n\
             - O-1004 (Alan Turing): cancelled after a duplicate payment; refund issued.\n"
        ),
    ))
}

impl OrderServer {
    /// The stage-E state, or without `--resources` the `-32601` rmcp itself
    /// answers `method` with (its message is the method's name).
    pub(super) fn catalogue_or_not_found(
        &self,
        method: &'static str,
    ) -> Result<&Arc<Catalogue>, McpError> {
        self.catalogue
            .as_ref()
            .ok_or_else(|| McpError::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, method, None))
    }

    /// One `resources/list` page (see [`page`]); 2026-07-28 results carry
    /// `ttlMs: 0`, `cacheScope: "public"`.
    pub(super) fn list_resources_page(
        &self,
        cursor: Option<&str>,
        modern: bool,
    ) -> Result<ListResourcesResult, McpError> {
        let catalogue = self.catalogue_or_not_found("resources/list")?;
        let all = all_resources(&self.store, catalogue);
        let (items, next) = page(&all, "resources", cursor)?;
        let mut result = ListResourcesResult::with_all_items(items);
        result.next_cursor = next;
        if modern {
            result = result.with_ttl_ms(0).with_cache_scope(CacheScope::Public);
        }
        Ok(result)
    }

    /// One `resources/templates/list` page.
    pub(super) fn list_templates_page(
        &self,
        cursor: Option<&str>,
        modern: bool,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.catalogue_or_not_found("resources/templates/list")?;
        let (items, next) = page(&templates(), "templates", cursor)?;
        let mut result = ListResourceTemplatesResult::with_all_items(items);
        result.next_cursor = next;
        if modern {
            result = result.with_ttl_ms(0).with_cache_scope(CacheScope::Public);
        }
        Ok(result)
    }

    /// `completion/complete` of a `ref/resource` argument: `order_id` of
    /// `orders://orders/{order_id}`, `customer_id` of
    /// `orders://customers/{customer_id}/summary`. Another template or
    /// argument is `-32602`.
    pub(super) fn complete_template_argument(
        &self,
        uri: &str,
        argument: &str,
        prefix: &str,
    ) -> Result<CompletionInfo, McpError> {
        self.catalogue_or_not_found("completion/complete")?;
        let candidates = match (uri, argument) {
            (ORDER_TEMPLATE, "order_id") => order_ids(&self.store),
            (CUSTOMER_TEMPLATE, "customer_id") => customer_ids(&self.store),
            (ORDER_TEMPLATE | CUSTOMER_TEMPLATE, _) => {
                return Err(McpError::invalid_params(
                    format!("resource template {uri} has no argument {argument:?}"),
                    None,
                ));
            }
            _ => {
                return Err(McpError::invalid_params(
                    format!("unknown resource template {uri:?}"),
                    None,
                ));
            }
        };
        Ok(complete_values(candidates, prefix))
    }

    /// `resources/read`; an unknown URI is `-32002` (2025-11-25) or
    /// `-32602` (2026-07-28, rewritten by rmcp), with `data.uri`.
    pub(super) async fn read_order_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let catalogue = self.catalogue_or_not_found("resources/read")?;
        let uri = request.uri.as_str();
        let result = match uri {
            "orders://catalog/full.md" => text(uri, "text/markdown", full_catalog()),
            "orders://catalog/skus.json" => {
                let skus: Vec<_> = CATALOG
                    .iter()
                    .map(|(sku, price)| json!({ "sku": sku, "unit_price_cents": price }))
                    .collect();
                text(uri, "application/json", pretty(&json!({ "skus": skus })))
            }
            "orders://policies/returns.md" => text(uri, "text/markdown", RETURNS_POLICY),
            "orders://policies/shipping.md" => text(uri, "text/markdown", SHIPPING_POLICY),
            "orders://reports/summary.json" => {
                text(uri, "application/json", pretty(&report(&self.store)))
            }
            INVOICE_URI => blob(
                uri,
                "application/pdf",
                STANDARD.encode(invoice_pdf(&self.store)),
            ),
            LARGE_URI => blob(uri, "application/pdf", catalogue.large_blob().to_owned()),
            NOTES_URI => return self.read_notes(&request, &context).await,
            _ => self
                .read_dynamic(uri, catalogue)
                .ok_or_else(|| not_found(uri))?,
        };
        Ok(result.into())
    }

    /// Orders, customer summaries and added resources.
    fn read_dynamic(&self, uri: &str, catalogue: &Catalogue) -> Option<ReadResourceResult> {
        if let Some(id) = uri.strip_prefix(ORDER_PREFIX) {
            let order = self.store.order(id)?;
            return Some(text(uri, "application/json", pretty(&order)));
        }
        if let Some(rest) = uri.strip_prefix(CUSTOMER_PREFIX) {
            let id = rest.strip_suffix("/summary")?;
            return Some(text(uri, "text/plain", customer_summary(&self.store, id)?));
        }
        let n: u64 = uri.strip_prefix(ADDED_PREFIX)?.parse().ok()?;
        (1..=catalogue.added()).contains(&n).then(|| {
            text(
                uri,
                "text/plain",
                format!("Resource R-{n}, added by add_resource call {n}."),
            )
        })
    }

    /// `orders://private/notes`: asks for a reason (and, when the client has
    /// roots, its roots) before answering.
    async fn read_notes(
        &self,
        request: &ReadResourceRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let catalogue = self.catalogue_or_not_found("resources/read")?;
        let modern = modern(context);
        let caps = capabilities(context);
        if !supports_form(&caps) {
            return Err(form_elicitation_missing(
                modern,
                &format!("resources/read of {NOTES_URI}"),
            ));
        }
        let with_roots = caps.roots.is_some();
        if !modern {
            let access = elicit_legacy(&context.peer, notes_form()).await?;
            let roots = match with_roots {
                true => Some(list_roots_legacy(&context.peer).await?),
                false => None,
            };
            return Ok(notes(&access, roots.as_ref())?.into());
        }
        let binding = json!({ "method": "resources/read", "uri": NOTES_URI });
        let retry = Retry {
            responses: request.input_responses.as_ref(),
            state: request.request_state.as_deref(),
        };
        let verified = verify_state(&format!("resources/read of {NOTES_URI}"), &binding, &retry)?;
        let access = retry.response(NOTES_ACCESS_KEY);
        let roots = retry.response(ROOTS_KEY);
        match (verified, access) {
            (true, Some(access)) if roots.is_some() || !with_roots => {
                Ok(notes(access, roots.filter(|_| with_roots))?.into())
            }
            // A first read, or a retry missing an answer: ask (again).
            _ => {
                let mut requests = vec![(NOTES_ACCESS_KEY, elicitation(notes_form()))];
                if with_roots {
                    requests.push((ROOTS_KEY, roots_request()));
                }
                let state = seal_state(catalogue, &binding);
                Ok(input_required(requests, state).into())
            }
        }
    }
}

// ---- add_resource ------------------------------------------------------------

/// `add_resource`, routed to [`call_add_resource`].
pub fn router() -> ToolRouter<OrderServer> {
    let schema = match json!({ "type": "object", "properties": {} }) {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("an object"),
    };
    let mut annotations = ToolAnnotations::new();
    annotations.read_only_hint = Some(false);
    annotations.destructive_hint = Some(false);
    annotations.idempotent_hint = Some(false);
    annotations.open_world_hint = Some(false);
    let tool = Tool::new(
        ADD_RESOURCE,
        "Adds the resource orders://added/R-n and the prompt added_prompt_n (n = 1, 2, ...) \
         and sends notifications/resources/list_changed and notifications/prompts/list_changed \
         (2025-11-25: to the caller; every era: to each subscriptions/listen stream that opted \
         in). Returns {resource_uri, prompt_name, notifications_sent}.",
        schema,
    )
    .with_title("Add a resource and a prompt")
    .with_annotations(annotations);
    let mut router = ToolRouter::new();
    router.add_route(ToolRoute::new_dyn(tool, call_add_resource));
    router
}

type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<CallToolResponse, McpError>> + Send + 'a>>;

fn call_add_resource(context: ToolCallContext<'_, OrderServer>) -> CallFuture<'_> {
    Box::pin(async move {
        let Some(catalogue) = &context.service.catalogue else {
            return Err(McpError::invalid_params(
                format!("tool not found: {}", context.name()),
                None,
            ));
        };
        let n = catalogue.added.fetch_add(1, Ordering::SeqCst) + 1;
        // Every listen request received so far gets this change.
        context.service.listens.settled().await;
        let request = &context.request_context;
        let legacy_peer = (!modern(request)).then_some(&request.peer);
        let sent = catalogue.notify(legacy_peer).await;
        Ok(CallToolResult::structured(json!({
            "resource_uri": format!("{ADDED_PREFIX}{n}"),
            "prompt_name": format!("added_prompt_{n}"),
            "notifications_sent": sent,
        }))
        .into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_others() {
        let items: Vec<u32> = (0..25).collect();
        let (first, next) = page(&items, "resources", None).unwrap();
        assert_eq!(first, (0..10).collect::<Vec<_>>());
        let next = next.unwrap();
        let (second, _) = page(&items, "resources", Some(&next)).unwrap();
        assert_eq!(second, (10..20).collect::<Vec<_>>());
        assert!(
            page(&items, "prompts", Some(&next)).is_err(),
            "another list's cursor"
        );
        assert!(page(&items, "resources", Some("not base64!")).is_err());
        let past_end = URL_SAFE_NO_PAD.encode("resources:25");
        assert!(page(&items, "resources", Some(&past_end)).is_err());
    }

    #[test]
    fn full_catalog_is_long() {
        let text = full_catalog();
        assert!(text.chars().count() >= FULL_CATALOG_CHARS, "{}", text.len());
        assert!(text.chars().count() < FULL_CATALOG_CHARS + 200);
    }

    #[test]
    fn invoice_xref_offsets_point_at_objects() {
        let pdf = invoice_pdf(&OrderStore::seeded());
        assert!(pdf.starts_with(b"%PDF-1.4\n"));
        assert!(pdf.ends_with(b"%%EOF\n"));
        let text = String::from_utf8_lossy(&pdf);
        let xref = text.rfind("xref\n").unwrap();
        let entries: Vec<usize> = text[xref..]
            .lines()
            .skip(3)
            .take(5)
            .map(|line| line[..10].parse().unwrap())
            .collect();
        for (i, offset) in entries.into_iter().enumerate() {
            assert!(pdf[offset..].starts_with(format!("{} 0 obj", i + 1).as_bytes()));
        }
        let startxref: usize = text.lines().rev().nth(1).unwrap().parse().unwrap();
        assert!(pdf[startxref..].starts_with(b"xref"));
    }

    #[test]
    fn large_pdf_has_the_exact_length() {
        for len in [5, 12, 19, 20, 1000, 1001] {
            let bytes = large_pdf(len);
            assert_eq!(bytes.len(), len);
            assert!(bytes.starts_with(b"%PDF-"));
        }
        assert!(large_pdf(1000).ends_with(b"%%EOF\n"));
        assert_eq!(large_pdf(4096), large_pdf(4096), "deterministic");
    }
}
