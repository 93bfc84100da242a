//! The sidecar's plain-HTTP endpoints for operators and Kubernetes:
//! `/metrics` (Prometheus text format), `/healthz` (liveness: 200 while the
//! process runs) and `/readyz` (readiness: 200 only while the sidecar is
//! registered with the control plane, its upstream server is connected and
//! it is not shutting down; otherwise 503 with the reason). `/metrics`
//! also reads the process's runtime at each scrape
//! (`switchyard_sidecar_runtime_alive_tasks`).

use crate::upstream::Upstream;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What readiness depends on, shared by the report stream (which sets
/// `registered`), the shutdown path (which sets `draining`) and the HTTP
/// endpoints (which read them).
#[derive(Debug)]
pub struct Health {
    upstream: Upstream,
    registered: AtomicBool,
    draining: AtomicBool,
}

impl Health {
    /// Not registered, not draining.
    pub fn new(upstream: Upstream) -> Arc<Self> {
        Arc::new(Health {
            upstream,
            registered: AtomicBool::new(false),
            draining: AtomicBool::new(false),
        })
    }

    /// Records whether the sidecar is registered and its report stream open.
    pub fn set_registered(&self, registered: bool) {
        self.registered.store(registered, Ordering::Relaxed);
    }

    /// Marks the sidecar as shutting down: never ready again.
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// `Ok` when ready, else the reason.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if self.draining.load(Ordering::Relaxed) {
            Err("shutting down")
        } else if !self.registered.load(Ordering::Relaxed) {
            Err("not registered with the control plane")
        } else if self.upstream.negotiated().is_none() {
            Err("upstream server not connected")
        } else {
            Ok(())
        }
    }
}

#[derive(Debug, Clone)]
struct AppState {
    health: Arc<Health>,
    registry: prometheus::Registry,
    alive_tasks: prometheus::IntGauge,
}

/// The router serving `/metrics`, `/healthz` and `/readyz`. Registers the
/// runtime gauge in `registry`; errors: a metric of that name is already
/// registered.
pub fn router(health: Arc<Health>, registry: prometheus::Registry) -> prometheus::Result<Router> {
    let alive_tasks = prometheus::IntGauge::new(
        "switchyard_sidecar_runtime_alive_tasks",
        "Tasks alive in the sidecar's tokio runtime (spawned and not yet finished), read at scrape time.",
    )?;
    registry.register(Box::new(alive_tasks.clone()))?;
    Ok(Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(AppState {
            health,
            registry,
            alive_tasks,
        }))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let alive = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    state.alive_tasks.set(alive as i64);
    match prometheus::TextEncoder::new().encode_to_string(&state.registry.gather()) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
            body,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("cannot encode metrics: {e}\n"),
        ),
    }
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    match state.health.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        ),
    }
}
