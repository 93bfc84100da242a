//! The Switchyard control plane: the shared brain behind the engine-facing
//! gRPC API. It is responsible for the server registry (servers, tool
//! catalogues, policies, hint overrides), engine sessions and their
//! interactions and background calls, routing calls to healthy sidecars and
//! events back to the session that owns them, and the state store all of
//! that lives in: etcd, or an embedded on-disk store when no etcd is
//! configured. Replicas keep no state of their own; everything goes through
//! [`store`].
//!
//! The call path is [`call`] (its `mod.rs` lists the steps); its edges are
//! [`api`] (gRPC) and [`mcp`] (the MCP endpoint, Streamable HTTP). Each seed stage has one module: [`tools`] (A),
//! [`background`] (B), [`interactions`] (C), [`resources`] (E: resources and
//! prompts; their requests travel [`call::request`]); OAuth (D) will be
//! `oauth`.
//!
//! The `switchyard` command line, `switchyard up` included, is [`cli`]; its
//! binary, `src/bin/switchyard.rs`, only builds the runtime and runs it.

pub mod api;
pub mod audit;
pub mod auth;
pub mod background;
pub mod call;
pub mod cli;
pub mod config;
pub mod console;
pub mod interactions;
pub mod launches;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod names;
pub mod oauth;
pub mod registry;
pub mod resources;
pub mod server;
pub mod state;
pub mod store;
pub mod tls;
pub mod tools;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The shared core of one replica, used by every service.
#[derive(Debug)]
pub struct ControlPlane {
    /// The read model.
    pub state: Arc<state::State>,
    /// The write side.
    pub registry: registry::Registry,
    /// Call routing.
    pub router: call::route::Router,
    /// Interactions (forms, URLs, approvals).
    pub interactions: interactions::Interactions,
    /// Background calls (stage B).
    pub background: background::Background,
    /// The audit sink (interactions, tool calls).
    pub audit: Arc<audit::Audit>,
    /// OAuth for upstream servers (stage D).
    pub oauth: Arc<oauth::OAuth>,
    /// Metrics.
    pub metrics: metrics::Metrics,
    /// Lease TTL of sidecar registrations.
    pub lease_ttl: Duration,
    /// Default engine call timeout.
    pub call_timeout: Duration,
    /// Readiness (false during start-up and shutdown).
    pub ready: AtomicBool,
    /// Whether the store answers (`/readyz` is 503 while it does not).
    pub store_health: Arc<store::health::StoreHealth>,
    /// Cancelled when the replica stops: the long-lived streams (session
    /// events, sidecar reports) end, so the gRPC server can stop at once.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Why `switchyard up`'s sidecar of a server is not running.
    pub launches: Arc<launches::Launches>,
}

/// Logs to stderr; `SWITCHYARD_LOG` sets the filter (default `info`).
/// Keep the guard until the end of `main` (see
/// [`switchyard_common::logging`]).
pub fn init_logging() -> switchyard_common::logging::LogGuard {
    switchyard_common::logging::init("info")
}
