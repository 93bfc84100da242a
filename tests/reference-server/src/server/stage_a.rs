//! The stage-A tools, served with `--stage-a`: tool annotation hints
//! (declared true, declared false, absent), structured output with and
//! without an `outputSchema` (valid, violated, recursive, broken, draft-07),
//! and `notifications/tools/list_changed` triggers.
//!
//! The definitions are built by hand (raw JSON schemas, raw annotations) so
//! that each one is exactly what the README documents; `rmcp`'s macros would
//! derive, normalise or reject some of them.
//!
//! [`router`] routes them all to one dispatcher on [`OrderServer`]; the
//! parent module adds it with `--stage-a` and holds the shared [`StageA`]
//! state (the `extra_tool` switch and the open listen streams).

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use rmcp::{
    ErrorData as McpError, RoleServer,
    handler::server::tool::{ToolCallContext, ToolRoute, ToolRouter},
    model::{CallToolResponse, CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations},
    service::{Peer, SubscriptionSink},
};
use serde_json::{Value, json};

use super::OrderServer;
use crate::era;

/// The tool `toggle_extra_tool` adds and removes.
pub const EXTRA_TOOL: &str = "extra_tool";

/// Most notifications one `notify_storm` call sends.
pub const MAX_STORM: u64 = 10_000;

/// Shared state of the stage-A tools (one per process, as the tool list is).
#[derive(Debug, Default)]
pub struct StageA {
    /// Whether `extra_tool` is currently listed and callable.
    extra_tool: AtomicBool,
    next_listener: AtomicU64,
    /// Open 2026-07-28 `subscriptions/listen` streams that accepted
    /// `toolsListChanged`.
    listeners: Mutex<Vec<(u64, SubscriptionSink)>>,
}

impl StageA {
    /// Whether the tool `name` is currently offered (only `extra_tool` varies).
    pub fn offered(&self, name: &str) -> bool {
        name != EXTRA_TOOL || self.extra_tool.load(Ordering::SeqCst)
    }

    /// Registers a listen stream's sink until the returned guard is dropped.
    pub fn listen(self: &Arc<Self>, sink: SubscriptionSink) -> ListenerGuard {
        let id = self.next_listener.fetch_add(1, Ordering::Relaxed);
        self.listeners().push((id, sink));
        ListenerGuard {
            state: self.clone(),
            id,
        }
    }

    fn listeners(&self) -> std::sync::MutexGuard<'_, Vec<(u64, SubscriptionSink)>> {
        self.listeners.lock().expect("listener lock poisoned")
    }

    /// Sends `notifications/tools/list_changed` once to every target: the
    /// calling peer when the call is 2025-11-25 (unscoped), and every open
    /// 2026-07-28 listen stream. Returns how many were sent.
    async fn notify(&self, legacy_peer: Option<&Peer<RoleServer>>) -> u64 {
        let mut sent = 0;
        if let Some(peer) = legacy_peer {
            match peer.notify_tool_list_changed().await {
                Ok(()) => sent += 1,
                Err(error) => tracing::warn!(%error, "failed to send tools/list_changed"),
            }
        }
        let sinks: Vec<_> = self.listeners().iter().map(|(_, s)| s.clone()).collect();
        for sink in sinks {
            match sink.notify_tool_list_changed().await {
                Ok(()) => sent += 1,
                Err(error) => tracing::debug!(%error, "listen stream gone"),
            }
        }
        sent
    }
}

/// Keeps a listen stream registered in [`StageA`] while alive.
#[derive(Debug)]
pub struct ListenerGuard {
    state: Arc<StageA>,
    id: u64,
}

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        self.state.listeners().retain(|(id, _)| *id != self.id);
    }
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("schemas here are objects"),
    }
}

fn no_args() -> Arc<JsonObject> {
    object(json!({ "type": "object", "properties": {} }))
}

fn tool(name: &'static str, description: &'static str) -> Tool {
    Tool::new(name, description, no_args())
}

/// `(readOnly, destructive, idempotent, openWorld)`; `None` = not declared.
type Hints = (Option<bool>, Option<bool>, Option<bool>, Option<bool>);

fn annotations((read_only, destructive, idempotent, open_world): Hints) -> ToolAnnotations {
    let mut a = ToolAnnotations::new();
    a.read_only_hint = read_only;
    a.destructive_hint = destructive;
    a.idempotent_hint = idempotent;
    a.open_world_hint = open_world;
    a
}

/// The hint tools: name, description, annotations (`None`: no `annotations`).
fn hint_tools() -> Vec<Tool> {
    let fixed: [(&'static str, &'static str, Option<Hints>); 8] = [
        ("hint_none", "No annotations at all.", None),
        (
            "hint_empty_annotations",
            "An empty annotations object ({}).",
            Some((None, None, None, None)),
        ),
        (
            "hint_read_only",
            "readOnlyHint: true only.",
            Some((Some(true), None, None, None)),
        ),
        (
            "hint_destructive_explicit",
            "destructiveHint: true only (declared explicitly).",
            Some((None, Some(true), None, None)),
        ),
        (
            "hint_destructive_false",
            "destructiveHint: false only.",
            Some((None, Some(false), None, None)),
        ),
        (
            "hint_idempotent",
            "readOnlyHint: false, idempotentHint: true.",
            Some((Some(false), None, Some(true), None)),
        ),
        (
            "hint_open_world_false",
            "openWorldHint: false only.",
            Some((None, None, None, Some(false))),
        ),
        (
            "hint_open_world_true",
            "openWorldHint: true only.",
            Some((None, None, None, Some(true))),
        ),
    ];
    let mut tools: Vec<Tool> = fixed
        .into_iter()
        .map(|(name, description, hints)| {
            let tool = tool(name, description);
            match hints {
                None => tool,
                Some(hints) => tool.with_annotations(annotations(hints)),
            }
        })
        .collect();
    // hint_matrix_r{0,1}_d{0,1}_i{0,1}: readOnly/destructive/idempotent all
    // declared (1 = true, 0 = false); openWorldHint absent.
    for bits in 0..8u8 {
        let (r, d, i) = (bits & 4 != 0, bits & 2 != 0, bits & 1 != 0);
        let name = format!(
            "hint_matrix_r{}_d{}_i{}",
            u8::from(r),
            u8::from(d),
            u8::from(i)
        );
        let description = format!(
            "readOnlyHint: {r}, destructiveHint: {d}, idempotentHint: {i} (all declared); \
             openWorldHint absent."
        );
        tools.push(
            Tool::new(name, description, no_args()).with_annotations(annotations((
                Some(r),
                Some(d),
                Some(i),
                None,
            ))),
        );
    }
    tools
}

/// `order_summary`'s `outputSchema`.
pub fn order_summary_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "order_id": { "type": "string" },
            "customer": { "type": "string" },
            "status": { "type": "string", "enum": ["pending", "shipped", "delivered", "cancelled"] },
            "item_count": { "type": "integer" },
            "total_cents": { "type": "integer" }
        },
        "required": ["order_id", "customer", "status", "item_count", "total_cents"],
        "additionalProperties": false
    })
}

/// `bad_output`'s `outputSchema` (its result violates it).
pub fn bad_output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "order_id": { "type": "string" },
            "total_cents": { "type": "integer" }
        },
        "required": ["order_id", "total_cents"]
    })
}

/// `category_tree`'s recursive `outputSchema`.
pub fn category_tree_schema() -> Value {
    json!({
        "type": "object",
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "name": { "type": "string" },
                    "children": { "type": "array", "items": { "$ref": "#/$defs/node" } }
                },
                "required": ["name", "children"]
            }
        },
        "properties": { "root": { "$ref": "#/$defs/node" } },
        "required": ["root"]
    })
}

/// `broken_schema`'s `outputSchema`: a `type` that is not a string or array.
pub fn broken_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "value": { "type": 12 } },
        "required": ["value"]
    })
}

/// `broken_ref_schema`'s `outputSchema`: a local `$ref` that resolves nowhere.
pub fn broken_ref_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "node": { "$ref": "#/$defs/missing" } },
        "required": ["node"]
    })
}

/// `legacy_schema`'s draft-07 `outputSchema` (`definitions`, tuple `items`,
/// `additionalItems`: all gone or changed in 2020-12).
pub fn legacy_schema() -> Value {
    json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "definitions": {
            "sku": { "type": "string", "pattern": "^[A-Z][A-Z-]*$" }
        },
        "properties": {
            "sku": { "$ref": "#/definitions/sku" },
            "price_cents": { "type": "integer", "minimum": 1 },
            "dimensions_mm": {
                "type": "array",
                "items": [{ "type": "integer" }, { "type": "integer" }],
                "additionalItems": false
            }
        },
        "required": ["sku", "price_cents", "dimensions_mm"]
    })
}

/// `echo_json`'s `outputSchema`.
pub fn echo_json_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "message": { "type": "string" },
            "length": { "type": "integer" }
        },
        "required": ["message", "length"]
    })
}

fn structured_tools() -> Vec<Tool> {
    let order_args = object(json!({
        "type": "object",
        "properties": {
            "order_id": { "type": "string", "description": "Order id, default O-1002." }
        }
    }));
    let echo_args = object(json!({
        "type": "object",
        "properties": {
            "message": { "type": "string", "description": "Text to echo, default \"hello\"." }
        }
    }));
    let read_only = annotations((Some(true), None, Some(true), Some(false)));
    [
        Tool::new(
            "order_summary",
            "Summary of an order: text plus structuredContent matching the outputSchema.",
            order_args,
        )
        .with_raw_output_schema(object(order_summary_schema())),
        tool(
            "raw_stats",
            "Store statistics as structuredContent, with no outputSchema.",
        ),
        tool(
            "bad_output",
            "Returns structuredContent that violates its own outputSchema \
             (order_id missing, total_cents a string).",
        )
        .with_raw_output_schema(object(bad_output_schema())),
        tool(
            "category_tree",
            "A 3-level category tree; the outputSchema is recursive ($defs.node).",
        )
        .with_raw_output_schema(object(category_tree_schema())),
        tool(
            "broken_schema",
            "Its outputSchema is invalid (a property with \"type\": 12).",
        )
        .with_raw_output_schema(object(broken_schema())),
        tool(
            "broken_ref_schema",
            "Its outputSchema has an unresolvable local $ref (#/$defs/missing).",
        )
        .with_raw_output_schema(object(broken_ref_schema())),
        tool(
            "legacy_schema",
            "Its outputSchema is JSON Schema draft-07 ($schema, definitions, tuple items).",
        )
        .with_raw_output_schema(object(legacy_schema())),
        Tool::new(
            "echo_json",
            "Its text content is exactly the compact JSON of its structuredContent.",
            echo_args,
        )
        .with_raw_output_schema(object(echo_json_schema())),
    ]
    .into_iter()
    .map(|tool| tool.with_annotations(read_only.clone()))
    .collect()
}

fn list_changed_tools() -> Vec<Tool> {
    let storm_args = object(json!({
        "type": "object",
        "properties": {
            "count": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_STORM,
                "description": "How many notifications to send."
            }
        },
        "required": ["count"]
    }));
    let not_idempotent = annotations((Some(false), Some(false), Some(false), Some(false)));
    vec![
        tool(
            "toggle_extra_tool",
            "Adds extra_tool to the tool list, or removes it if present, and sends \
             notifications/tools/list_changed.",
        )
        .with_annotations(not_idempotent.clone()),
        Tool::new(
            "notify_storm",
            "Sends `count` notifications/tools/list_changed as fast as possible and \
             returns how many were sent.",
            storm_args,
        )
        .with_annotations(not_idempotent),
        tool(EXTRA_TOOL, "Only listed after toggle_extra_tool added it.")
            .with_annotations(annotations((Some(true), None, Some(true), Some(false)))),
    ]
}

/// The stage-A tools, all dispatched by [`call`].
pub fn router() -> ToolRouter<OrderServer> {
    let mut router = ToolRouter::new();
    for tool in hint_tools()
        .into_iter()
        .chain(structured_tools())
        .chain(list_changed_tools())
    {
        router.add_route(ToolRoute::new_dyn(tool, call));
    }
    router
}

type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<CallToolResponse, McpError>> + Send + 'a>>;

fn call(context: ToolCallContext<'_, OrderServer>) -> CallFuture<'_> {
    Box::pin(run(context))
}

fn text(text: impl Into<String>) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text.into())]).into()
}

fn with_structured(text: String, structured: Value) -> CallToolResponse {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result.into()
}

fn string_arg<'a>(context: &'a ToolCallContext<'_, OrderServer>, key: &str) -> Option<&'a str> {
    context.arguments.as_ref()?.get(key)?.as_str()
}

async fn run(context: ToolCallContext<'_, OrderServer>) -> Result<CallToolResponse, McpError> {
    let server = context.service;
    let state = server
        .stage_a()
        .ok_or_else(|| tool_not_found(context.name()))?;
    let name = context.name().to_owned();
    Ok(match name.as_str() {
        name if name.starts_with("hint_") => text(format!("{name} called")),
        "order_summary" => {
            let id = string_arg(&context, "order_id").unwrap_or("O-1002");
            let Some(order) = server.store.order(id) else {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "unknown order {id}"
                ))])
                .into());
            };
            let customer = server
                .store
                .customer(&order.customer_id)
                .map_or_else(|| order.customer_id.clone(), |c| c.name);
            let items: u32 = order.lines.iter().map(|line| line.quantity).sum();
            let status = serde_json::to_value(order.status).unwrap_or(Value::Null);
            with_structured(
                format!(
                    "Order {} for {customer}: {}, item count {items}, {} cents.",
                    order.id,
                    status.as_str().unwrap_or_default(),
                    order.total_cents
                ),
                json!({
                    "order_id": order.id,
                    "customer": customer,
                    "status": status,
                    "item_count": items,
                    "total_cents": order.total_cents,
                }),
            )
        }
        "raw_stats" => {
            let orders = server.store.list(None, None);
            let revenue: u64 = orders.iter().map(|o| o.total_cents).sum();
            with_structured(
                format!(
                    "{} orders, {revenue} cents in total (no outputSchema).",
                    orders.len()
                ),
                json!({ "order_count": orders.len(), "revenue_cents": revenue }),
            )
        }
        "bad_output" => with_structured(
            "bad_output: structuredContent violates the outputSchema.".to_owned(),
            json!({ "total_cents": "4999", "note": "order_id missing" }),
        ),
        "category_tree" => with_structured(
            "catalog > hardware > widgets, gadgets; catalog > accessories > cables.".to_owned(),
            json!({ "root": {
                "name": "catalog",
                "children": [
                    { "name": "hardware", "children": [
                        { "name": "widgets", "children": [] },
                        { "name": "gadgets", "children": [] }
                    ] },
                    { "name": "accessories", "children": [
                        { "name": "cables", "children": [] }
                    ] }
                ]
            } }),
        ),
        "broken_schema" => {
            with_structured("broken_schema called".to_owned(), json!({ "value": 12 }))
        }
        "broken_ref_schema" => {
            with_structured("broken_ref_schema called".to_owned(), json!({ "node": {} }))
        }
        "legacy_schema" => with_structured(
            "legacy_schema: WIDGET-S, 250 cents, 40 x 20 mm.".to_owned(),
            json!({ "sku": "WIDGET-S", "price_cents": 250, "dimensions_mm": [40, 20] }),
        ),
        "echo_json" => {
            let message = string_arg(&context, "message").unwrap_or("hello");
            let structured = json!({ "message": message, "length": message.chars().count() });
            with_structured(structured.to_string(), structured)
        }
        "toggle_extra_tool" => {
            let listed = !state.extra_tool.fetch_xor(true, Ordering::SeqCst);
            // Every listen request received so far gets this change.
            context.service.listens.settled().await;
            let sent = state.notify(legacy_peer(&context)).await;
            let action = if listed { "added" } else { "removed" };
            with_structured(
                format!("{EXTRA_TOOL} {action}; {sent} notifications/tools/list_changed sent."),
                json!({ "extra_tool_listed": listed, "notifications_sent": sent }),
            )
        }
        "notify_storm" => {
            let count = context
                .arguments
                .as_ref()
                .and_then(|args| args.get("count"))
                .and_then(Value::as_u64)
                .filter(|count| (1..=MAX_STORM).contains(count))
                .ok_or_else(|| {
                    McpError::invalid_params(
                        format!("notify_storm: count must be an integer in 1..={MAX_STORM}"),
                        None,
                    )
                })?;
            let peer = legacy_peer(&context);
            context.service.listens.settled().await;
            let mut sent = 0;
            for _ in 0..count {
                sent += state.notify(peer).await;
            }
            with_structured(
                format!("sent {sent} notifications/tools/list_changed"),
                json!({ "requested": count, "sent": sent }),
            )
        }
        EXTRA_TOOL if state.offered(EXTRA_TOOL) => text(format!("{EXTRA_TOOL} called")),
        other => return Err(tool_not_found(other)),
    })
}

/// The calling peer, when the call is 2025-11-25 (where `list_changed` is an
/// ordinary notification); 2026-07-28 sends it on listen streams only.
fn legacy_peer<'a>(context: &'a ToolCallContext<'_, OrderServer>) -> Option<&'a Peer<RoleServer>> {
    let request = &context.request_context;
    (!era::is_modern(request.protocol_version().as_ref())).then_some(&request.peer)
}

fn tool_not_found(name: &str) -> McpError {
    McpError::invalid_params(format!("tool not found: {name}"), None)
}
