//! The MCP handler: the order system's tools, `tools/list` pagination, and the
//! server identity and versions advertised for the configured [`Era`].

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    ErrorData as McpError, Json, RoleServer, ServerHandler,
    handler::server::{tool::ToolRouter, wrapper::Parameters},
    model::{
        CacheScope, CancelTaskParams, CustomRequest, CustomResult, DiscoverResult, ErrorCode,
        GetTaskParams, GetTaskResult, Implementation, JsonObject, ListToolsResult,
        PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
        SubscriptionFilter, TASKS_EXTENSION_ID, UpdateTaskParams,
    },
    service::{RequestContext, SubscriptionContext},
    tool, tool_handler, tool_router,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    era::{self, Era},
    interactions::{self, Interactions},
    orders::{Customer, Order, OrderStatus, OrderStore},
    stage_a::{self, StageA},
    tasks::{self, TaskServer},
};

/// Tools per `tools/list` page, kept below the tool count so that clients
/// must follow `nextCursor`.
pub const TOOLS_PAGE_SIZE: usize = 3;

/// Arguments of `list_orders`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListOrdersArgs {
    /// Only this customer's orders, e.g. `C-1`.
    pub customer_id: Option<String>,
    /// Only orders in this status.
    pub status: Option<OrderStatus>,
}

/// Result of `list_orders`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct OrderList {
    /// Matching orders, in id order.
    pub orders: Vec<Order>,
    /// Number of matching orders.
    pub count: usize,
}

/// Arguments of `get_order`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetOrderArgs {
    /// Order id, e.g. `O-1001`.
    pub order_id: String,
}

/// One requested line of `create_order`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ItemArgs {
    /// Catalog SKU: `CABLE`, `GADGET`, `WIDGET-L` or `WIDGET-S`.
    pub sku: String,
    /// Number of units, at least 1.
    pub quantity: u32,
}

/// Arguments of `create_order`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateOrderArgs {
    /// Customer placing the order, e.g. `C-2`.
    pub customer_id: String,
    /// Lines to order.
    pub items: Vec<ItemArgs>,
}

/// Arguments of `get_customer`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GetCustomerArgs {
    /// Customer id, e.g. `C-1`.
    pub customer_id: String,
}

/// Arguments of `echo`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EchoArgs {
    /// Text to send back unchanged.
    pub message: String,
}

/// Arguments of `add`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddArgs {
    /// First addend.
    pub a: f64,
    /// Second addend.
    pub b: f64,
}

/// The reference server's MCP handler. Cheap to clone: HTTP builds one per
/// request or session, all sharing the same store, interaction state and
/// tool router.
#[derive(Clone, Debug)]
pub struct OrderServer {
    era: Era,
    pub(crate) store: OrderStore,
    pub(crate) interactions: Arc<Interactions>,
    /// State of the stage-A tools, present with `--stage-a`.
    stage_a: Option<Arc<StageA>>,
    /// Task state, present with `--tasks` (see [`tasks`]).
    tasks: Option<Arc<TaskServer>>,
    tool_router: Arc<ToolRouter<Self>>,
}

#[tool_router]
impl OrderServer {
    /// A handler speaking `era` over `store`, with the interaction tools
    /// (elicitation, MRTR, roots; see [`interactions`]) when `interactions`
    /// and the hint / structured output / list_changed tools (see
    /// [`stage_a`]) when `stage_a`, and the task tools (see [`tasks`]) when
    /// `tasks` is given.
    pub fn new(
        era: Era,
        store: OrderStore,
        interactions: bool,
        stage_a: bool,
        tasks: Option<Arc<TaskServer>>,
    ) -> Self {
        let mut tool_router = Self::tool_router();
        if interactions {
            tool_router += Self::interaction_router();
        }
        if stage_a {
            tool_router += stage_a::router();
        }
        if tasks.is_some() {
            tool_router += tasks::router();
        }
        Self {
            era,
            store,
            interactions: Arc::default(),
            stage_a: stage_a.then(Arc::default),
            tasks,
            tool_router: Arc::new(tool_router),
        }
    }

    /// The stage-A state, if `--stage-a`.
    pub(crate) fn stage_a(&self) -> Option<&Arc<StageA>> {
        self.stage_a.as_ref()
    }

    /// The task state, if `--tasks`.
    pub(crate) fn tasks(&self) -> Option<&Arc<TaskServer>> {
        self.tasks.as_ref()
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

    #[tool(
        title = "List orders",
        description = "List orders, optionally filtered by customer and/or status.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    fn list_orders(&self, Parameters(args): Parameters<ListOrdersArgs>) -> Json<OrderList> {
        let orders = self.store.list(args.customer_id.as_deref(), args.status);
        Json(OrderList {
            count: orders.len(),
            orders,
        })
    }

    #[tool(
        title = "Get order",
        description = "Fetch one order by id.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    fn get_order(&self, Parameters(args): Parameters<GetOrderArgs>) -> Result<Json<Order>, String> {
        self.store
            .order(&args.order_id)
            .map(Json)
            .ok_or_else(|| format!("unknown order {}", args.order_id))
    }

    #[tool(
        title = "Create order",
        description = "Place a new pending order for a customer.",
        annotations(
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    fn create_order(
        &self,
        Parameters(args): Parameters<CreateOrderArgs>,
    ) -> Result<Json<Order>, String> {
        let items = args.items.into_iter().map(|i| (i.sku, i.quantity));
        self.store
            .create(&args.customer_id, items)
            .map(Json)
            .map_err(|error| error.to_string())
    }

    #[tool(
        title = "Get customer",
        description = "Fetch one customer by id.",
        annotations(read_only_hint = true, open_world_hint = false)
    )]
    fn get_customer(
        &self,
        Parameters(args): Parameters<GetCustomerArgs>,
    ) -> Result<Json<Customer>, String> {
        self.store
            .customer(&args.customer_id)
            .map(Json)
            .ok_or_else(|| format!("unknown customer {}", args.customer_id))
    }

    #[tool(
        title = "Echo",
        description = "Return the message unchanged.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        args.message
    }

    #[tool(
        title = "Add",
        description = "Add two numbers.",
        annotations(read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> String {
        (a + b).to_string()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for OrderServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = if self.stage_a.is_some() {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build()
        } else {
            ServerCapabilities::builder().enable_tools().build()
        };
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

    /// With `--stage-a`, 2026-07-28 clients may listen for
    /// `toolsListChanged` (the only list that changes).
    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.stage_a
            .is_some()
            .then(|| SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let _registered = self
            .stage_a
            .as_ref()
            .filter(|_| context.accepted().tools_list_changed == Some(true))
            .map(|state| state.listen(context.sink().clone()));
        context.cancelled().await;
        Ok(())
    }

    /// Pages of [`TOOLS_PAGE_SIZE`] tools in name order; the cursor is the
    /// index of the page's first tool.
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
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
