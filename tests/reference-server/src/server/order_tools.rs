//! The six order tools every server serves (`list_orders`, `get_order`,
//! `create_order`, `get_customer`, `echo`, `add`): their arguments and
//! results, and their `#[tool_router]` block on [`OrderServer`], over the
//! server's [`OrderStore`](crate::orders::OrderStore).

use rmcp::{Json, handler::server::wrapper::Parameters, tool, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::OrderServer;
use crate::orders::{Customer, Order, OrderStatus};

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

#[tool_router(router = order_router, vis = "pub(super)")]
impl OrderServer {
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
