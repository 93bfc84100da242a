//! The `--conformance` mode: the server fixture of the official MCP
//! conformance suite (`@modelcontextprotocol/conformance`), served instead of
//! the order system. This module owns everything that mode serves and how: the
//! MCP handler [`ConformanceServer`], its capabilities, the fixture's tools,
//! resources, resource template, prompts and completions, logging (per legacy
//! session or per 2026-07-28 request), `subscriptions/listen` streams and the
//! `tools` / `prompts` list changes the fixture's trigger tools cause. The
//! names and payloads are the ones the suite's server scenarios ask for
//! (`tools-call-simple-text` calls `test_simple_text`, `resources-read-text`
//! reads `test://static-text`, ...); see README.md for the full list and
//! `docs/conformance.md` for how the suite is run against it.
//!
//! Its children: [`fixtures`] (the tool table and the fixed payloads),
//! [`mrtr`] (what the tools ask the client for: 2025-11-25 server-to-client
//! requests or 2026-07-28 `input_required` rounds with a sealed
//! `requestState`) and [`tasks`] (the SEP-2663 task engine behind the
//! `tasks-*` scenarios' tools). It uses the crate's [`era`],
//! [`listens`](crate::listens), [`request_state`](crate::request_state) and
//! the timestamp format of [`crate::tasks`]; the order system knows nothing
//! of it.

mod fixtures;
mod mrtr;
mod tasks;

use std::{
    borrow::Cow,
    collections::HashSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
        CompleteRequestParams, CompleteResult, DiscoverResult, GetPromptRequestParams,
        GetPromptResponse, GetPromptResult, GetTaskParams, GetTaskResult, Implementation,
        ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
        PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
        ReadResourceResult, Reference, ServerCapabilities, ServerConfig, ServerNotification,
        SetLevelRequestMethod, SubscribeRequestParams, SubscriptionFilter,
        UnsubscribeRequestParams, UpdateTaskParams,
    },
    service::{RequestContext, SubscriptionContext, SubscriptionSink},
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use self::{
    fixtures::Kind,
    mrtr::{Ask, Flow, Obtained},
    tasks::TaskEngine,
};
use crate::{
    era::{self, Era},
    listens::{ListenTicket, PendingListens},
};

/// The fixture's MCP handler. Cheap to clone; [`ConformanceServer::for_session`]
/// gives each legacy session (and each 2026-07-28 request) its own logging level.
#[derive(Clone, Debug)]
pub struct ConformanceServer {
    era: Era,
    shared: Arc<Shared>,
    /// `logging/setLevel` of this legacy session (`None`: not set, log everything).
    log_level: Arc<Mutex<Option<u8>>>,
}

/// State shared by every session and request.
#[derive(Debug, Default)]
struct Shared {
    /// Listen requests received but not yet registered (see [`crate::listens`]).
    listens: Arc<PendingListens>,
    /// Open 2026-07-28 listen streams.
    listeners: Mutex<Vec<(u64, SubscriptionSink)>>,
    next_listener: AtomicU64,
    /// Toggled by `test_trigger_tool_change`: whether `test_dynamic_tool` is listed.
    dynamic_tool: AtomicBool,
    /// Toggled by `test_trigger_prompt_change`: whether `test_dynamic_prompt` is listed.
    dynamic_prompt: AtomicBool,
    /// URIs subscribed to with 2025-11-25 `resources/subscribe`.
    subscriptions: Mutex<HashSet<String>>,
    tasks: Arc<TaskEngine>,
}

/// Removes a listen stream from [`Shared::listeners`] when its request ends.
struct ListenerGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for ListenerGuard<'_> {
    fn drop(&mut self) {
        self.shared
            .listeners()
            .retain(|(listener, _)| *listener != self.id);
    }
}

impl Shared {
    fn listeners(&self) -> std::sync::MutexGuard<'_, Vec<(u64, SubscriptionSink)>> {
        self.listeners.lock().expect("listener lock poisoned")
    }
}

/// Parses a JSON literal into an rmcp model type (the fixture's payloads are
/// written as the JSON the suite expects).
fn from_json<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a fixture payload that fits the rmcp model")
}

/// Parses a result literal (a JSON object) into an rmcp result type, with
/// `resultType: "complete"` (2026-07-28 requires it; rmcp strips it for
/// 2025-11-25 peers).
fn result_from_json<T: DeserializeOwned>(mut value: Value) -> T {
    if let Value::Object(object) = &mut value {
        object.insert("resultType".into(), "complete".into());
    }
    from_json(value)
}

/// Logging levels (RFC 5424 order, `debug` = 0 .. `emergency` = 7).
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

fn log_rank(level: &Value) -> Option<u8> {
    let level = level.as_str()?;
    LOG_LEVELS
        .iter()
        .position(|known| *known == level)
        .and_then(|rank| u8::try_from(rank).ok())
}

impl ConformanceServer {
    /// A fixture speaking `era`.
    pub fn new(era: Era) -> Self {
        Self {
            era,
            shared: Arc::default(),
            log_level: Arc::default(),
        }
    }

    /// A handler for one more legacy session or stateless request: shared
    /// state, its own logging level.
    pub fn for_session(&self) -> Self {
        Self {
            era: self.era,
            shared: self.shared.clone(),
            log_level: Arc::default(),
        }
    }

    /// The count of listen requests not yet registered, fed by the transport layer.
    pub fn listens(&self) -> Arc<PendingListens> {
        self.shared.listens.clone()
    }

    /// Sends `notifications/message` at `level` (an RFC 5424 name) if the
    /// request may get it: a 2026-07-28 request only when its
    /// `_meta["io.modelcontextprotocol/logLevel"]` is at or below `level`; a
    /// legacy session unless `logging/setLevel` set a higher level.
    async fn log(&self, context: &RequestContext<RoleServer>, level: &str, data: &str) {
        let rank = log_rank(&json!(level)).unwrap_or(0);
        let allowed = if era::is_modern(context.protocol_version().as_ref()) {
            let wanted = serde_json::to_value(&context.meta)
                .ok()
                .and_then(|meta| meta.get("io.modelcontextprotocol/logLevel").cloned());
            wanted
                .as_ref()
                .and_then(log_rank)
                .is_some_and(|min| rank >= min)
        } else {
            let min = *self.log_level.lock().expect("log level lock poisoned");
            min.is_none_or(|min| rank >= min)
        };
        if !allowed {
            return;
        }
        let notification: ServerNotification = from_json(json!({
            "method": "notifications/message",
            "params": {"level": level, "logger": "conformance-fixture", "data": data},
        }));
        if let Err(error) = context.peer.send_notification(notification).await {
            tracing::debug!(%error, "sending a log message");
        }
    }

    /// `tools/list` for a request of this era.
    fn tools(&self, modern: bool) -> Vec<rmcp::model::Tool> {
        fixtures::TOOLS
            .iter()
            .filter(|tool| tool.availability.offered(modern))
            .filter(|tool| {
                tool.kind != Kind::Dynamic || self.shared.dynamic_tool.load(Ordering::SeqCst)
            })
            .map(fixtures::ToolSpec::definition)
            .collect()
    }

    /// Sends `notifications/tools/list_changed` (`tools`) or
    /// `notifications/prompts/list_changed`: a 2025-11-25 call to its own
    /// client, and in every era to the listen streams that accepted it.
    /// Returns how many were sent.
    async fn notify_list_changed(&self, context: &RequestContext<RoleServer>, tools: bool) -> u64 {
        let mut sent = 0;
        if !era::is_modern(context.protocol_version().as_ref()) {
            let result = if tools {
                context.peer.notify_tool_list_changed().await
            } else {
                context.peer.notify_prompt_list_changed().await
            };
            sent += u64::from(result.is_ok());
        }
        self.shared.listens.settled().await;
        let sinks: Vec<_> = self
            .shared
            .listeners()
            .iter()
            .map(|(_, sink)| sink.clone())
            .collect();
        for sink in sinks {
            let accepted = sink.accepted();
            let wanted = if tools {
                accepted.tools_list_changed
            } else {
                accepted.prompts_list_changed
            };
            if wanted != Some(true) {
                continue;
            }
            let result = if tools {
                sink.notify_tool_list_changed().await
            } else {
                sink.notify_prompt_list_changed().await
            };
            sent += u64::from(result.is_ok());
        }
        sent
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let modern = era::is_modern(context.protocol_version().as_ref());
        let name = request.name.as_ref();
        let spec = fixtures::TOOLS
            .iter()
            .find(|tool| tool.name == name)
            .filter(|tool| {
                tool.kind != Kind::Dynamic || self.shared.dynamic_tool.load(Ordering::SeqCst)
            })
            .ok_or_else(|| McpError::invalid_params(format!("tool not found: {name}"), None))?;
        if !spec.availability.offered(modern) {
            return Err(McpError::invalid_params(
                format!("tool not found: {name}: it needs protocol 2026-07-28"),
                None,
            ));
        }
        let args = request.arguments.clone().unwrap_or_default();
        let text = |text: String| Ok(CallToolResult::success(vec![text_block(text)]).into());
        match spec.kind {
            Kind::Fixed => Ok(fixtures::fixed_result(name).into()),
            Kind::Error => Ok(CallToolResult::error(vec![text_block(
                "This tool intentionally returns an error for testing".into(),
            )])
            .into()),
            Kind::Logging => {
                for (step, data) in [
                    "Tool execution started",
                    "Tool processing data",
                    "Tool execution completed",
                ]
                .into_iter()
                .enumerate()
                {
                    if step > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    self.log(&context, "info", data).await;
                }
                text("Tool with logging executed successfully".into())
            }
            Kind::Progress => {
                let token = context.meta.get_progress_token();
                for progress in [0, 50, 100] {
                    if progress > 0 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    if let Some(token) = &token {
                        let notification: ServerNotification = from_json(json!({
                            "method": "notifications/progress",
                            "params": {
                                "progressToken": token,
                                "progress": progress,
                                "total": 100,
                                "message": format!("Completed step {progress} of 100"),
                            },
                        }));
                        if let Err(error) = context.peer.send_notification(notification).await {
                            tracing::debug!(%error, "sending progress");
                        }
                    }
                }
                let token = token
                    .and_then(|token| serde_json::to_value(token).ok())
                    .map_or_else(
                        || "no progress token".to_owned(),
                        |token| {
                            token
                                .as_str()
                                .map_or_else(|| token.to_string(), str::to_owned)
                        },
                    );
                text(token)
            }
            // rmcp gives a handler no way to close its own POST stream, so
            // this answers on it (the scenario then reports INFO).
            Kind::Reconnection => {
                text("test_reconnection completed; its stream was not closed mid-call.".into())
            }
            Kind::EchoArguments => text(format!(
                "JSON Schema 2020-12 tool called with: {}",
                Value::Object(args)
            )),
            Kind::EchoRegion => {
                let region = args.get("region").and_then(Value::as_str).unwrap_or("");
                text(format!("region: {region}"))
            }
            Kind::Greet => {
                let who = args.get("name").and_then(Value::as_str).unwrap_or("World");
                text(format!("Hello, {who}!"))
            }
            Kind::TriggerToolChange => {
                let now = !self.shared.dynamic_tool.fetch_xor(true, Ordering::SeqCst);
                let sent = self.notify_list_changed(&context, true).await;
                text(format!(
                    "test_dynamic_tool is now {}; {sent} notification(s) sent",
                    if now { "listed" } else { "gone" }
                ))
            }
            Kind::TriggerPromptChange => {
                let now = !self.shared.dynamic_prompt.fetch_xor(true, Ordering::SeqCst);
                let sent = self.notify_list_changed(&context, false).await;
                text(format!(
                    "test_dynamic_prompt is now {}; {sent} notification(s) sent",
                    if now { "listed" } else { "gone" }
                ))
            }
            Kind::Dynamic => {
                text("This tool appears and disappears with test_trigger_tool_change.".into())
            }
            Kind::LoggingOnly => {
                self.log(&context, "info", "test_logging_tool ran").await;
                text("test_logging_tool done".into())
            }
            Kind::Interaction(interaction) => {
                self.interact(interaction, &args, &request, &context).await
            }
            Kind::Task(support) => {
                self.shared
                    .tasks
                    .call(name, support, &args, &request, &context)
                    .await
            }
        }
    }

    /// A tool that asks the client for something (see [`mrtr`]).
    async fn interact(
        &self,
        interaction: fixtures::Interaction,
        args: &rmcp::model::JsonObject,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let flow = fixtures::interaction_flow(interaction, args, context);
        let obtained = mrtr::obtain(
            request.name.as_ref(),
            &flow,
            request.input_responses.as_ref(),
            request.request_state.as_deref(),
            context,
        )
        .await?;
        match obtained {
            Obtained::InputRequired(result) => Ok(result.into()),
            Obtained::Failed(text) => Ok(CallToolResult::error(vec![text_block(text)]).into()),
            Obtained::Answers(answers) => Ok(CallToolResult::success(vec![text_block(
                fixtures::interaction_text(interaction, &answers),
            )])
            .into()),
        }
    }
}

fn text_block(text: String) -> rmcp::model::ContentBlock {
    rmcp::model::ContentBlock::text(text)
}

impl ServerHandler for ConformanceServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities: ServerCapabilities = from_json(json!({
            "tools": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "prompts": {"listChanged": true},
            "logging": {},
            "completions": {},
            "extensions": {(rmcp::model::TASKS_EXTENSION_ID): {}},
        }));
        let config = ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
                    .with_title("Switchyard reference server (MCP conformance fixture)"),
            )
            .with_instructions("The MCP conformance suite's server fixture (test_* tools).");
        match self.era {
            Era::Modern => config,
            Era::Legacy | Era::Dual => {
                config.with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
            }
        }
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(self.era.supported_versions())
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        match self.era.discover_error() {
            Some(error) => Err(error),
            None => Ok(DiscoverResult::from_server_info(
                self.era.supported_versions().to_vec(),
                self.get_info(),
            )),
        }
    }

    /// 2025-11-25 only (2026-07-28 removed `logging/setLevel`: `-32601`).
    #[expect(
        deprecated,
        reason = "logging is deprecated (SEP-2577) but still specified"
    )]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if era::is_modern(context.protocol_version().as_ref()) {
            return Err(McpError::method_not_found::<SetLevelRequestMethod>());
        }
        let level = serde_json::to_value(request.level).unwrap_or_default();
        *self.log_level.lock().expect("log level lock poisoned") = log_rank(&level);
        Ok(())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.shared
            .subscriptions
            .lock()
            .expect("subscription lock poisoned")
            .insert(request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.shared
            .subscriptions
            .lock()
            .expect("subscription lock poisoned")
            .remove(&request.uri);
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(
            SubscriptionFilter::builder()
                .tools_list_changed()
                .prompts_list_changed()
                .resources_list_changed()
                .build(),
        )
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let id = self.shared.next_listener.fetch_add(1, Ordering::Relaxed);
        self.shared.listeners().push((id, context.sink().clone()));
        let _guard = ListenerGuard {
            shared: &self.shared,
            id,
        };
        if let Some(ticket) = ListenTicket::of(context.request_context()) {
            ticket.settle();
        }
        context.cancelled().await;
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(request, context).await
    }

    fn get_tool(&self, name: &str) -> Option<rmcp::model::Tool> {
        fixtures::TOOLS
            .iter()
            .find(|tool| tool.name == name)
            .map(fixtures::ToolSpec::definition)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let modern = era::is_modern(context.protocol_version().as_ref());
        let result = ListToolsResult::with_all_items(self.tools(modern));
        Ok(if modern {
            result
                .with_ttl_ms(0)
                .with_cache_scope(rmcp::model::CacheScope::Public)
        } else {
            result
        })
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let modern = era::is_modern(context.protocol_version().as_ref());
        let mut result: ListResourcesResult =
            result_from_json(json!({"resources": fixtures::resources()}));
        if modern {
            result = result
                .with_ttl_ms(0)
                .with_cache_scope(rmcp::model::CacheScope::Public);
        }
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let modern = era::is_modern(context.protocol_version().as_ref());
        let mut result: ListResourceTemplatesResult =
            result_from_json(json!({"resourceTemplates": fixtures::resource_templates()}));
        if modern {
            result = result
                .with_ttl_ms(0)
                .with_cache_scope(rmcp::model::CacheScope::Public);
        }
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        match fixtures::read_resource(&request.uri) {
            Some(contents) => {
                let result: ReadResourceResult = result_from_json(json!({"contents": [contents]}));
                Ok(result.into())
            }
            // rmcp turns -32002 into -32602 for 2026-07-28 requests (SEP-2164).
            None => Err(McpError::resource_not_found(
                "Resource not found",
                Some(json!({"uri": request.uri})),
            )),
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let modern = era::is_modern(context.protocol_version().as_ref());
        let dynamic = self.shared.dynamic_prompt.load(Ordering::SeqCst);
        let mut result: ListPromptsResult =
            result_from_json(json!({"prompts": fixtures::prompts(modern, dynamic)}));
        if modern {
            result = result
                .with_ttl_ms(0)
                .with_cache_scope(rmcp::model::CacheScope::Public);
        }
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let modern = era::is_modern(context.protocol_version().as_ref());
        let dynamic = self.shared.dynamic_prompt.load(Ordering::SeqCst);
        let name = request.name.as_str();
        let arguments = request.arguments.clone().unwrap_or_default();
        if name == fixtures::MRTR_PROMPT && modern {
            let flow = Flow::single(vec![Ask::elicit(
                "user_context",
                "What context should the prompt use?",
                json!({
                    "type": "object",
                    "properties": {"context": {"type": "string"}},
                    "required": ["context"],
                }),
            )]);
            let obtained = mrtr::obtain(
                name,
                &flow,
                request.input_responses.as_ref(),
                request.request_state.as_deref(),
                &context,
            )
            .await?;
            return match obtained {
                Obtained::InputRequired(result) => Ok(result.into()),
                Obtained::Failed(text) => Err(McpError::invalid_params(text, None)),
                Obtained::Answers(answers) => {
                    let context_text = mrtr::elicited_string(&answers, "user_context", "context");
                    let result: GetPromptResult = result_from_json(json!({
                        "description": "A prompt that asked for its context first",
                        "messages": [{
                            "role": "user",
                            "content": {"type": "text", "text": format!("Prompt with context: {context_text}")},
                        }],
                    }));
                    Ok(result.into())
                }
            };
        }
        let messages = fixtures::prompt_messages(name, &arguments, modern, dynamic)?;
        let result: GetPromptResult = result_from_json(json!({ "messages": messages }));
        Ok(result.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let argument = &request.argument;
        let candidates = match &request.r#ref {
            Reference::Prompt(prompt) => {
                fixtures::prompt_completions(&prompt.name, &argument.name)?
            }
            Reference::Resource(template) => {
                fixtures::template_completions(&template.uri, &argument.name)?
            }
            other => {
                return Err(McpError::invalid_params(
                    format!(
                        "unsupported completion reference {}",
                        other.reference_type()
                    ),
                    None,
                ));
            }
        };
        let prefix = argument.value.to_ascii_lowercase();
        let values: Vec<&str> = candidates
            .iter()
            .copied()
            .filter(|value| value.to_ascii_lowercase().starts_with(&prefix))
            .collect();
        Ok(result_from_json(json!({
            "completion": {"values": values, "total": values.len(), "hasMore": false},
        })))
    }

    /// SEP-2663 `tasks/get` (rmcp has checked the extension).
    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.shared.tasks.get(&request.task_id)
    }

    /// SEP-2663 `tasks/update`.
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.shared.tasks.update(request)
    }

    /// SEP-2663 `tasks/cancel`.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.shared.tasks.cancel(&request.task_id)
    }
}
