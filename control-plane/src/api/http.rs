//! The control plane's HTTP endpoints (axum): `/metrics` (Prometheus text
//! format), `/healthz` (200 while the process runs), `/readyz` (200 while
//! the replica serves; 503 during start-up and shutdown).

use crate::ControlPlane;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio_util::sync::CancellationToken;

/// Serves until `shutdown` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cp: Arc<ControlPlane>,
    shutdown: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(cp);
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
    {
        tracing::error!(error = %e, "HTTP server failed");
    }
}

async fn metrics(State(cp): State<Arc<ControlPlane>>) -> impl IntoResponse {
    cp.metrics.observe_state(&cp.state.snapshot().gauges());
    let families = cp.metrics.registry().gather();
    match prometheus::TextEncoder::new().encode_to_string(&families) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn readyz(State(cp): State<Arc<ControlPlane>>) -> impl IntoResponse {
    if cp.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}
