//! The control plane's HTTP endpoints (axum): `/metrics` (Prometheus text
//! format), `/healthz` (200 while the process runs), `/readyz` (200 while
//! the replica serves; 503 during start-up and shutdown, and while the
//! store does not answer, `crate::store::health`), and stage D's
//! OAuth callback, `/admin/v1/mcp/oauth/callback`, where authorization
//! servers send the admin's browser back (no admin login: the one-time
//! `state` is the credential; `crate::oauth::flow`), plus the routes the
//! caller adds (the admin console, `crate::console`, under `/ui`).
//! [`serve_metrics`] serves only the first three, on
//! `control_plane.metrics_listen`: a listener of their own, with its own
//! connection limit, so that probes and scrapers are answered while the
//! browser-facing listener is full.

use crate::ControlPlane;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio_util::sync::CancellationToken;

/// Serves until `shutdown` is cancelled, with the `extra` routes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    cp: Arc<ControlPlane>,
    extra: Option<Router>,
    shutdown: CancellationToken,
) {
    let mut app = probes()
        .route(crate::oauth::CALLBACK_PATH, get(oauth_callback))
        .with_state(cp.clone());
    if let Some(extra) = extra {
        app = app.merge(extra);
    }
    // The client's address is known to the handlers as `ConnectInfo` (the
    // console limits failed logins per client). A fixed cap on
    // connections: its clients are scrapers, probes and admins.
    let connections = cp.metrics.listener(
        "http",
        switchyard_common::connections::INTERNAL_MAX_CONNECTIONS,
    );
    switchyard_common::http_serve::serve(listener, app, connections, shutdown.cancelled_owned())
        .await;
}

/// Serves `/metrics`, `/healthz` and `/readyz` only, until `shutdown` is
/// cancelled (listener `metrics` in the connection metrics).
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    cp: Arc<ControlPlane>,
    shutdown: CancellationToken,
) {
    let app = probes().with_state(cp.clone());
    let connections = cp.metrics.listener(
        "metrics",
        switchyard_common::connections::INTERNAL_MAX_CONNECTIONS,
    );
    switchyard_common::http_serve::serve(listener, app, connections, shutdown.cancelled_owned())
        .await;
}

/// The routes both HTTP listeners serve.
fn probes() -> Router<Arc<ControlPlane>> {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
}

async fn metrics(State(cp): State<Arc<ControlPlane>>) -> impl IntoResponse {
    cp.metrics.observe_state(&cp.state.snapshot().gauges());
    cp.metrics.observe_process(cp.state.store_keys());
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
    if !cp.ready.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready".to_owned());
    }
    match cp.store_health.silent_for() {
        None => (StatusCode::OK, "ready".to_owned()),
        Some(d) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: the store has not answered for {} s",
                d.as_secs()
            ),
        ),
    }
}

/// The OAuth callback: finishes the authorization and answers a small
/// page saying what happened (every server-provided string escaped). 200
/// when authorized, 400 otherwise.
async fn oauth_callback(
    State(cp): State<Arc<ControlPlane>>,
    axum::extract::Query(params): axum::extract::Query<crate::oauth::flow::CallbackParams>,
) -> impl IntoResponse {
    let current_url = |server: &str| {
        cp.state
            .snapshot()
            .servers
            .get(server)
            .map(|r| cp.oauth.server_url(&r.spec).unwrap_or_default())
    };
    let (status, title, text) = match cp.oauth.finish(&params, current_url).await {
        Ok(server) => (
            StatusCode::OK,
            "Authorized",
            format!("Server {server} is authorized. You can close this window."),
        ),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            "Authorization failed",
            e.to_string(),
        ),
    };
    let page = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Switchyard: {title}</title></head>\
         <body><h1>{title}</h1><p>{}</p></body></html>\n",
        escape_html(&text)
    );
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; frame-ancestors 'none'",
            ),
        ],
        page,
    )
}

/// `s` with the HTML special characters escaped.
fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
