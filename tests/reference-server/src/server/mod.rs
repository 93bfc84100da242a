//! The MCP handler, [`OrderServer`], and the composition of everything it
//! serves: the state its tools reach through `self` (the order store and
//! the interaction, stage-A, stage-E and task state), the tool routers of
//! the stages below it put together for the configured flags, and the
//! `ServerHandler` methods: `tools/list` pagination, the server identity,
//! capabilities and versions advertised for the configured [`Era`],
//! 2026-07-28 listen streams, the resource, prompt and completion methods
//! handed to stage E, and the task methods handed to the [`TaskServer`].
//!
//! Each stage is a child module that reaches the server's state through
//! `self` (or `context.service`) and knows no other stage:
//! [`order_tools`] (always, unless `--no-tools`), [`interactions`]
//! (`--interactions`), [`stage_a`] (`--stage-a`), [`resources`] and its
//! sibling [`prompts`] (`--resources`). The task engine is [`crate::tasks`],
//! which needs nothing of this module; only the routing of its tools is here
//! ([`task_router`]).

mod interactions;
mod order_tools;
mod prompts;
mod resources;
mod stage_a;

use std::{borrow::Cow, future::Future, pin::Pin, sync::Arc};

use rmcp::{
    ErrorData as McpError, RoleServer, ServerHandler,
    handler::server::tool::{ToolCallContext, ToolRoute, ToolRouter},
    model::{
        CacheScope, CallToolRequestMethod, CallToolRequestParams, CallToolResponse,
        CancelTaskParams, CompleteRequestParams, CompleteResult, CustomRequest, CustomResult,
        DiscoverResult, ErrorCode, GetPromptRequestParams, GetPromptResponse, GetTaskParams,
        GetTaskResult, Implementation, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
        ListResourcesResult, ListToolsRequestMethod, ListToolsResult, PaginatedRequestParams,
        ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, Reference,
        ServerCapabilities, ServerConfig, SubscriptionFilter, TASKS_EXTENSION_ID, ToolsCapability,
        UpdateTaskParams,
    },
    service::{RequestContext, SubscriptionContext},
    tool_handler,
};

pub use self::resources::{Catalogue, DEFAULT_LARGE_RESOURCE_BYTES};
use self::{interactions::Interactions, stage_a::StageA};
use crate::{
    era::{self, Era},
    executions,
    listens::{ListenTicket, PendingListens},
    orders::OrderStore,
    tasks::{self, TaskServer},
};

/// Tools per `tools/list` page, kept below the tool count so that clients
/// must follow `nextCursor`.
pub const TOOLS_PAGE_SIZE: usize = 3;

/// The reference server's MCP handler. Cheap to clone: HTTP builds one per
/// request or session, all sharing the same store, interaction state and
/// tool router. The fields are private to this module and the stage
/// modules below it.
#[derive(Clone, Debug)]
pub struct OrderServer {
    era: Era,
    store: OrderStore,
    /// State of the interaction tools (used only with `--interactions`).
    interactions: Arc<Interactions>,
    /// State of the stage-A tools, present with `--stage-a`.
    stage_a: Option<Arc<StageA>>,
    /// Task state, present with `--tasks` (see [`tasks`]).
    tasks: Option<Arc<TaskServer>>,
    /// Stage-E state (resources, prompts, completions), present with `--resources`.
    catalogue: Option<Arc<Catalogue>>,
    /// Listen requests received but not yet registered (see [`crate::listens`]).
    listens: Arc<PendingListens>,
    /// Whether tools are served at all (not with `--no-tools`).
    tools: bool,
    tool_router: Arc<ToolRouter<Self>>,
}

impl OrderServer {
    /// A handler speaking `era` over `store`, with the interaction tools
    /// (elicitation, MRTR, roots; see [`interactions`]) when `interactions`
    /// and the hint / structured output / list_changed tools (see
    /// [`stage_a`]) when `stage_a`, the task tools (see [`tasks`]) when
    /// `tasks` is given, and resources, prompts, completions and the
    /// `add_resource` tool (see [`resources`], [`prompts`]) when `catalogue`
    /// is given. Without `tools`, no tool at all and no `tools` capability.
    pub fn new(
        era: Era,
        store: OrderStore,
        interactions: bool,
        stage_a: bool,
        tasks: Option<Arc<TaskServer>>,
        catalogue: Option<Catalogue>,
        tools: bool,
    ) -> Self {
        let mut tool_router = ToolRouter::new();
        if tools {
            tool_router += Self::order_router();
            if interactions {
                tool_router += Self::interaction_router();
            }
            if stage_a {
                tool_router += stage_a::router();
            }
            if tasks.is_some() {
                tool_router += task_router();
            }
            if catalogue.is_some() {
                tool_router += resources::router();
            }
        }
        Self {
            era,
            store,
            interactions: Arc::default(),
            stage_a: stage_a.then(Arc::default),
            tasks,
            catalogue: catalogue.map(Arc::new),
            listens: Arc::default(),
            tools,
            tool_router: Arc::new(tool_router),
        }
    }

    /// The count of listen requests received but not yet registered, which
    /// the transport layer feeds (see [`crate::listens`]).
    pub fn listens(&self) -> Arc<PendingListens> {
        self.listens.clone()
    }

    /// The stage-A state, if `--stage-a`.
    fn stage_a(&self) -> Option<&Arc<StageA>> {
        self.stage_a.as_ref()
    }

    /// The task state, or `-32601` for `method` without `--tasks`.
    fn tasks_or_not_found(&self, method: &str) -> Result<&Arc<TaskServer>, McpError> {
        self.tasks.as_ref().ok_or_else(|| {
            McpError::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("Method not found: {method}"),
                None,
            )
        })
    }
}

/// The `--tasks` tools ([`tasks::tool_definitions`]), routed to the
/// [`TaskServer`].
fn task_router() -> ToolRouter<OrderServer> {
    let mut router = ToolRouter::new();
    for tool in tasks::tool_definitions() {
        router.add_route(ToolRoute::new_dyn(tool, call_task_tool));
    }
    router
}

type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<CallToolResponse, McpError>> + Send + 'a>>;

/// One task tool's `tools/call`, answered by [`TaskServer::call_tool`].
fn call_task_tool(context: ToolCallContext<'_, OrderServer>) -> CallFuture<'_> {
    Box::pin(async move {
        let Some(tasks) = &context.service.tasks else {
            return Err(McpError::invalid_params(
                format!("tool not found: {}", context.name),
                None,
            ));
        };
        tasks
            .call_tool(
                &context.name,
                context.arguments.as_ref(),
                &context.request_context,
            )
            .await
    })
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for OrderServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::default();
        if self.tools {
            let mut tools = ToolsCapability::default();
            if self.stage_a.is_some() {
                tools.list_changed = Some(true);
            }
            capabilities.tools = Some(tools);
        }
        if self.catalogue.is_some() {
            resources::declare_capabilities(&mut capabilities);
        }
        if self.tasks.is_some() {
            // SEP-2663; an `initialize` result gets the 2025-11-25
            // `capabilities.tasks` instead (see `tasks::fix_outgoing`).
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(TASKS_EXTENSION_ID.into(), JsonObject::new());
        }
        let config = ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
                    .with_title("Switchyard reference order server"),
            )
            .with_instructions("A fictional order system: customers C-1..C-3, orders O-1001...");
        match self.era {
            // LATEST (2026-07-28) has no handshake, so rmcp rejects `initialize`.
            Era::Modern => config,
            // What `initialize` answers when the client asks for a version
            // this server cannot serve over the handshake.
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
        // Only reached when rmcp's own checks pass; see `era` for the rest.
        match self.era.discover_error() {
            Some(error) => Err(error),
            None => Ok(DiscoverResult::from_server_info(
                self.era.supported_versions().to_vec(),
                self.get_info(),
            )),
        }
    }

    /// 2026-07-28 clients may listen for `toolsListChanged` with
    /// `--stage-a` and for `resourcesListChanged` and `promptsListChanged`
    /// with `--resources` (the lists that change).
    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut filter = SubscriptionFilter::builder();
        if self.stage_a.is_some() {
            filter = filter.tools_list_changed();
        }
        if self.catalogue.is_some() {
            filter = filter.resources_list_changed().prompts_list_changed();
        }
        (self.stage_a.is_some() || self.catalogue.is_some()).then(|| filter.build())
    }

    /// Registers the stream with the stages whose lists it accepted, then
    /// settles the request's [`ListenTicket`]: changes from then on reach it.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let accepted = context.accepted();
        let _tools = self
            .stage_a
            .as_ref()
            .filter(|_| accepted.tools_list_changed == Some(true))
            .map(|state| state.listen(context.sink().clone()));
        let _lists = self
            .catalogue
            .as_ref()
            .filter(|_| {
                accepted.resources_list_changed == Some(true)
                    || accepted.prompts_list_changed == Some(true)
            })
            .map(|catalogue| catalogue.listen(context.sink().clone()));
        if let Some(ticket) = ListenTicket::of(context.request_context()) {
            ticket.settle();
        }
        context.cancelled().await;
        Ok(())
    }

    /// Without `--no-tools`: the tool of `request`; with it, `-32601`.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if !self.tools {
            return Err(McpError::method_not_found::<CallToolRequestMethod>());
        }
        executions::record(&request, &context.meta);
        let call = ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    /// Stage E (`--resources`): pages of [`resources::PAGE_SIZE`].
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let modern = era::is_modern(context.protocol_version().as_ref());
        let cursor = request.and_then(|r| r.cursor);
        self.list_resources_page(cursor.as_deref(), modern)
    }

    /// Stage E (`--resources`).
    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let modern = era::is_modern(context.protocol_version().as_ref());
        let cursor = request.and_then(|r| r.cursor);
        self.list_templates_page(cursor.as_deref(), modern)
    }

    /// Stage E (`--resources`).
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.read_order_resource(request, context).await
    }

    /// Stage E (`--resources`).
    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let modern = era::is_modern(context.protocol_version().as_ref());
        let cursor = request.and_then(|r| r.cursor);
        self.list_prompts_page(cursor.as_deref(), modern)
    }

    /// Stage E (`--resources`).
    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.get_order_prompt(request, context).await
    }

    /// Stage E (`--resources`): template and prompt arguments.
    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let argument = &request.argument;
        let completion = match &request.r#ref {
            Reference::Resource(template) => {
                self.complete_template_argument(&template.uri, &argument.name, &argument.value)?
            }
            Reference::Prompt(prompt) => {
                self.complete_prompt_argument(&prompt.name, &argument.name, &argument.value)?
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
        Ok(CompleteResult::new(completion))
    }

    /// Pages of [`TOOLS_PAGE_SIZE`] tools in name order; the cursor is the
    /// index of the page's first tool.
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        if !self.tools {
            return Err(McpError::method_not_found::<ListToolsRequestMethod>());
        }
        let modern = era::is_modern(context.protocol_version().as_ref());
        let tools: Vec<_> = self
            .tool_router
            .list_all()
            .into_iter()
            .filter(|tool| interactions::offered(&tool.name, modern))
            .filter(|tool| self.stage_a.as_ref().is_none_or(|s| s.offered(&tool.name)))
            .collect();
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor
                .parse()
                .ok()
                .filter(|&start| start < tools.len())
                .ok_or_else(|| McpError::invalid_params("invalid cursor", None))?,
        };
        let end = tools.len().min(start + TOOLS_PAGE_SIZE);
        let mut page = tools[start..end].to_vec();
        if self.tasks.is_some() && !modern {
            tasks::mark_legacy_tools(&mut page);
        }
        let mut result = ListToolsResult::with_all_items(page);
        result.next_cursor = (end < tools.len()).then(|| end.to_string());
        // Modern peers get cache hints (rmcp would default the scope to
        // private); the list is the same for every caller, as with rmcp's
        // generated `list_tools`. Legacy peers get neither field.
        if modern {
            result = result.with_ttl_ms(0).with_cache_scope(CacheScope::Public);
        }
        Ok(result)
    }

    /// SEP-2663 `tasks/get` (2026-07-28; see [`tasks`]).
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.tasks_or_not_found("tasks/get")?
            .get_modern(&request, &context)
    }

    /// SEP-2663 `tasks/update` (2026-07-28; see [`tasks`]).
    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks_or_not_found("tasks/update")?
            .update_modern(request, &context)
    }

    /// SEP-2663 `tasks/cancel` (2026-07-28; see [`tasks`]).
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks_or_not_found("tasks/cancel")?
            .cancel_modern(&request, &context)
    }

    /// 2025-11-25 task requests, renamed by [`tasks::rewrite_incoming`];
    /// any other custom method is `-32601`.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let CustomRequest { method, params, .. } = request;
        match (method.strip_prefix(tasks::LEGACY_PREFIX), &self.tasks) {
            (Some(legacy), Some(tasks)) => tasks.legacy_request(legacy, params, context).await,
            _ => Err(McpError::new(ErrorCode::METHOD_NOT_FOUND, method, None)),
        }
    }
}
