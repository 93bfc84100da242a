//! The fictional order system: customers, a small catalog and orders, held in
//! memory and seeded with the same data on every start.

use std::sync::{Arc, Mutex};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A customer who can place orders.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Customer {
    /// Customer id, `C-<n>`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Contact e-mail address.
    pub email: String,
    /// Loyalty tier.
    pub tier: String,
}

/// Where an order is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OrderStatus {
    /// Placed, not yet shipped.
    Pending,
    /// On its way.
    Shipped,
    /// Received by the customer.
    Delivered,
    /// Cancelled before delivery.
    Cancelled,
}

/// One line of an order.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct OrderLine {
    /// Catalog SKU.
    pub sku: String,
    /// Number of units.
    pub quantity: u32,
    /// Price of one unit, in cents.
    pub unit_price_cents: u64,
}

/// An order placed by a customer.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Order {
    /// Order id, `O-<n>`.
    pub id: String,
    /// Id of the customer who placed it.
    pub customer_id: String,
    /// Current status.
    pub status: OrderStatus,
    /// Ordered lines.
    pub lines: Vec<OrderLine>,
    /// Sum of all lines, in cents.
    pub total_cents: u64,
}

/// The SKUs that can be ordered and their unit prices in cents.
pub const CATALOG: &[(&str, u64)] = &[
    ("CABLE", 599),
    ("GADGET", 4999),
    ("WIDGET-L", 2499),
    ("WIDGET-S", 1299),
];

/// Orders [`OrderStore::seeded_with_history`] adds after the seed.
pub const HISTORY_ORDERS: usize = 20;

/// Why an order could not be created.
#[derive(Debug)]
pub enum OrderError {
    /// No customer has this id.
    UnknownCustomer(String),
    /// The catalog has no such SKU.
    UnknownSku(String),
    /// An order needs at least one line, each with a positive quantity.
    EmptyOrder,
}

impl std::fmt::Display for OrderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownCustomer(id) => write!(f, "unknown customer {id}"),
            Self::UnknownSku(sku) => write!(f, "unknown sku {sku}"),
            Self::EmptyOrder => f.write_str("an order needs at least one item with quantity > 0"),
        }
    }
}

#[derive(Debug)]
struct Data {
    customers: Vec<Customer>,
    orders: Vec<Order>,
    next_order: u32,
}

/// Shared, thread-safe handle on the in-memory order data. Clones share state.
#[derive(Clone, Debug)]
pub struct OrderStore(Arc<Mutex<Data>>);

impl OrderStore {
    /// A store holding the fixed seed: customers C-1..C-3, orders O-1001..O-1005.
    pub fn seeded() -> Self {
        let customer = |id: &str, name: &str, email: &str, tier: &str| Customer {
            id: id.into(),
            name: name.into(),
            email: email.into(),
            tier: tier.into(),
        };
        let customers = vec![
            customer("C-1", "Ada Lovelace", "ada@example.com", "gold"),
            customer("C-2", "Grace Hopper", "grace@example.com", "silver"),
            customer("C-3", "Alan Turing", "alan@example.com", "standard"),
        ];
        let mut data = Data {
            customers,
            orders: Vec::new(),
            next_order: 1001,
        };
        let mut order = |customer_id: &str, status, items: &[(&str, u32)]| {
            let items = items.iter().map(|&(sku, qty)| (sku.to_owned(), qty));
            data.insert(customer_id, status, items)
                .expect("seed data is valid");
        };
        use OrderStatus::*;
        order("C-1", Delivered, &[("WIDGET-S", 2)]);
        order("C-1", Shipped, &[("GADGET", 1)]);
        order("C-2", Pending, &[("CABLE", 3), ("WIDGET-L", 1)]);
        order("C-3", Cancelled, &[("GADGET", 2)]);
        order("C-2", Delivered, &[("WIDGET-L", 1)]);
        Self(Arc::new(Mutex::new(data)))
    }

    /// [`Self::seeded`] plus a fixed order history, `O-1006`..=`O-1025`
    /// (served with `--resources`, so that the order resources fill several
    /// `resources/list` pages): order `O-(1006 + k)` is customer
    /// `C-(k % 3 + 1)`'s, in status `delivered, shipped, pending, cancelled,
    /// delivered` by `k % 5`, with `k % 3 + 1` units of catalog SKU `k % 4`
    /// and, for every third `k`, one `CABLE` more.
    pub fn seeded_with_history() -> Self {
        use OrderStatus::*;
        let store = Self::seeded();
        {
            let mut data = store.data();
            for k in 0..HISTORY_ORDERS {
                let customer = format!("C-{}", k % 3 + 1);
                let status = [Delivered, Shipped, Pending, Cancelled, Delivered][k % 5];
                let quantity = u32::try_from(k % 3 + 1).expect("small");
                let mut items = vec![(CATALOG[k % CATALOG.len()].0.to_owned(), quantity)];
                if k % 3 == 0 {
                    items.push(("CABLE".to_owned(), 1));
                }
                data.insert(&customer, status, items)
                    .expect("history data is valid");
            }
        }
        store
    }

    fn data(&self) -> std::sync::MutexGuard<'_, Data> {
        self.0.lock().expect("order store lock poisoned")
    }

    /// Orders in id order, optionally only one customer's and/or one status.
    pub fn list(&self, customer_id: Option<&str>, status: Option<OrderStatus>) -> Vec<Order> {
        self.data()
            .orders
            .iter()
            .filter(|o| customer_id.is_none_or(|c| o.customer_id == c))
            .filter(|o| status.is_none_or(|s| o.status == s))
            .cloned()
            .collect()
    }

    /// The order with this id, if any.
    pub fn order(&self, id: &str) -> Option<Order> {
        self.data().orders.iter().find(|o| o.id == id).cloned()
    }

    /// All customers, in id order.
    pub fn customers(&self) -> Vec<Customer> {
        self.data().customers.clone()
    }

    /// The customer with this id, if any.
    pub fn customer(&self, id: &str) -> Option<Customer> {
        self.data().customers.iter().find(|c| c.id == id).cloned()
    }

    /// Places a new pending order; ids continue after the seed (O-1006, ...).
    pub fn create(
        &self,
        customer_id: &str,
        items: impl IntoIterator<Item = (String, u32)>,
    ) -> Result<Order, OrderError> {
        self.data().insert(customer_id, OrderStatus::Pending, items)
    }
}

impl Data {
    fn insert(
        &mut self,
        customer_id: &str,
        status: OrderStatus,
        items: impl IntoIterator<Item = (String, u32)>,
    ) -> Result<Order, OrderError> {
        if !self.customers.iter().any(|c| c.id == customer_id) {
            return Err(OrderError::UnknownCustomer(customer_id.to_owned()));
        }
        let lines = items
            .into_iter()
            .map(|(sku, quantity)| {
                let (_, unit_price_cents) = CATALOG
                    .iter()
                    .find(|(known, _)| *known == sku)
                    .ok_or_else(|| OrderError::UnknownSku(sku.clone()))?;
                Ok(OrderLine {
                    sku,
                    quantity,
                    unit_price_cents: *unit_price_cents,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if lines.is_empty() || lines.iter().any(|l| l.quantity == 0) {
            return Err(OrderError::EmptyOrder);
        }
        let order = Order {
            id: format!("O-{}", self.next_order),
            customer_id: customer_id.to_owned(),
            status,
            total_cents: lines
                .iter()
                .map(|l| l.unit_price_cents * u64::from(l.quantity))
                .sum(),
            lines,
        };
        self.next_order += 1;
        self.orders.push(order.clone());
        Ok(order)
    }
}
