//! The admin console (`/ui` on the HTTP listener; docs/console.md): a web
//! page for administrators, served by any replica. This module owns the
//! console's HTTP surface, composed here in a few lines, one per hop:
//!
//! - [`assets`]: the page, its script, its style and its icon, built into the
//!   binary (nothing is loaded from another host);
//! - [`login`]: the login with an admin token, the session cookie (kept
//!   in the store, so any replica accepts it), and the CSRF check of
//!   every write;
//! - [`api`]: the JSON API the page calls, each handler one call of the
//!   `AdminService` or `EngineService` the CLI uses, in-process, as the
//!   logged-in admin (no second logic);
//! - [`events`]: the live-update stream (server-sent events) from the read
//!   model's changes, the store watch that feeds engine events;
//! - [`respond`]: where every refusal becomes an HTTP answer (the one
//!   place).
//!
//! Every answer under `/ui` carries the strict Content-Security-Policy and
//! the other security headers ([`assets::secure`]).

pub mod api;
pub mod assets;
pub mod events;
pub mod login;
pub mod respond;

use crate::ControlPlane;
use crate::api::{admin::AdminApi, engine::EngineApi};
use crate::auth::Authenticator;
use crate::config::ConsoleConfig;
use axum::Router;
use axum::routing::get;
use std::sync::Arc;
use std::time::Duration;

/// One replica's console: what its handlers share.
pub struct Console {
    /// The replica.
    pub cp: Arc<ControlPlane>,
    /// Who may log in (`[[auth.tokens]]` of role admin).
    pub auth: Arc<Authenticator>,
    /// The admin service, called in-process.
    pub admin: AdminApi,
    /// The engine service, called in-process.
    pub engine: EngineApi,
    /// How long a login lasts.
    pub session_ttl: Duration,
    /// Whether the cookie is `Secure` (the admin base URL is `https://`).
    pub secure_cookie: bool,
    /// Failed logins of the last minute, on this replica.
    pub failures: login::Failures,
    /// The `Host` values served: on a loopback listener loopback names
    /// only; else the admin base URL's authority and loopback names (a
    /// port-forward), or any host when no base URL is set.
    pub hosts: login::Hosts,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("session_ttl", &self.session_ttl)
            .field("secure_cookie", &self.secure_cookie)
            .finish_non_exhaustive()
    }
}

impl Console {
    /// The console of `cp`, as `config` says, on the HTTP listener bound
    /// to `listen`; `admin_base_url` is the address browsers reach it at
    /// (`[oauth] admin_base_url`, when set).
    pub fn new(
        cp: Arc<ControlPlane>,
        auth: Arc<Authenticator>,
        config: &ConsoleConfig,
        listen: std::net::SocketAddr,
        admin_base_url: Option<&str>,
    ) -> Self {
        Console {
            admin: AdminApi::new(cp.clone()),
            engine: EngineApi::new(cp.clone()),
            cp,
            auth,
            session_ttl: Duration::from_secs(config.session_ttl_sec),
            secure_cookie: admin_base_url.is_some_and(|u| u.starts_with("https://")),
            failures: login::Failures::default(),
            hosts: login::Hosts::new(listen, admin_base_url),
        }
    }
}

/// The `/ui` routes.
pub fn router(console: Arc<Console>) -> Router {
    Router::new()
        // The page and its assets.
        .route("/ui", get(assets::to_index))
        .route("/ui/", get(assets::index))
        .route("/ui/app.js", get(assets::script))
        .route("/ui/app.css", get(assets::style))
        .route("/ui/favicon.svg", get(assets::icon))
        // The JSON API and the live-update stream, behind the login; every
        // refusal in the console's JSON shape.
        .nest(
            "/ui/api",
            api::routes().layer(axum::middleware::map_response(respond::json_refusals)),
        )
        .route("/ui/api/", axum::routing::any(api::no_such_path))
        // Security headers on every answer, refusals included.
        .layer(axum::middleware::map_response(assets::secure))
        .with_state(console)
}
