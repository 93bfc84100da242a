//! Stage D (design §4 D, issue #16): OAuth for upstream servers, authorized
//! once by an admin and shared by every session, across replicas.
//!
//! The hops, in order:
//! - [`flow`]: an admin starts an authorization (discovery, registration,
//!   PKCE: rmcp's OAuth wire) and the browser comes back to the callback
//!   (`/admin/v1/mcp/oauth/callback`, served by `api::http`), which
//!   exchanges the code and stores the tokens.
//! - [`refresh`]: every replica refreshes tokens before they expire, one
//!   refresh per server at a time across replicas (a leased lock and
//!   compare-and-swap writes), and handles what sidecars report (a 401
//!   asks for a fresh token; a 403 `insufficient_scope` asks an admin for
//!   wider scopes).
//! - [`push`]: what each sidecar of an oauth server is sent over its
//!   report stream: the access token and its generation, never the
//!   refresh token.
//!
//! The records: [`tokens`] (sealed tokens, refresh lock), [`records`]
//! (status, registered clients, pending authorizations, client secrets),
//! all sealed with the [`keyring`]. [`wire`] adapts rmcp's store traits.
//! Secret header values in `header_files` are read by the sidecars and
//! never reach the control plane; those given inline (and secret-looking
//! environment values) are stored sealed with the same key ring
//! ([`server_secrets`]).

pub mod flow;
pub mod keyring;
pub mod push;
pub mod records;
pub mod refresh;
pub mod server_secrets;
pub mod tokens;
pub mod wire;

pub use keyring::{KeyRing, SealError};

use crate::audit::Audit;
use crate::metrics::Metrics;
use crate::store::{AnyStore, Metered};
use std::sync::{Arc, RwLock};

/// The stage D service of one replica.
pub struct OAuth {
    pub(crate) store: Metered<AnyStore>,
    pub(crate) ring: Option<Arc<KeyRing>>,
    pub(crate) audit: Arc<Audit>,
    pub(crate) metrics: Metrics,
    /// `[oauth] allow_private_addresses`.
    pub(crate) private_addresses: bool,
    /// The admin base URL (no trailing slash), known once the HTTP
    /// listener is bound.
    base_url: RwLock<String>,
    /// Wakes the refresher: a sidecar reported a refused token.
    pub(crate) wake: tokio::sync::Notify,
    /// The refreshes sidecars asked for.
    pub(crate) forced: refresh::Forced,
    /// This replica's id, written into the refresh locks it holds.
    pub(crate) holder: String,
    /// Our own requests (the challenge probe, revocation): bounded by
    /// [`flow::HTTP_TIMEOUT`], no redirects followed.
    pub(crate) http: reqwest::Client,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field(
                "keys",
                &self.ring.as_ref().map(|r| r.active_id().to_owned()),
            )
            .field("base_url", &self.base_url())
            .finish_non_exhaustive()
    }
}

/// The path of the callback on the admin HTTP listener.
pub const CALLBACK_PATH: &str = "/admin/v1/mcp/oauth/callback";

impl OAuth {
    /// The service over `store`; `ring`: the key ring (`None`: no key
    /// configured, so no server can be authorized).
    pub fn new(
        store: Metered<AnyStore>,
        ring: Option<Arc<KeyRing>>,
        audit: Arc<Audit>,
        metrics: Metrics,
        config: &crate::config::OAuthConfig,
    ) -> OAuth {
        // reqwest (the challenge, rmcp's OAuth requests) on rustls.
        switchyard_common::tls::install_crypto_provider();
        OAuth {
            store,
            ring,
            audit,
            metrics,
            private_addresses: config.allow_private_addresses,
            base_url: RwLock::new(String::new()),
            wake: tokio::sync::Notify::new(),
            forced: refresh::Forced::default(),
            http: reqwest::Client::builder()
                .timeout(flow::HTTP_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap_or_default(),
            holder: format!(
                "{}-{}",
                std::process::id(),
                switchyard_common::ids::new_id()
            ),
        }
    }

    /// Sets the admin base URL (no trailing slash).
    pub fn set_base_url(&self, url: String) {
        *self.base_url.write().expect("not poisoned") = url;
    }

    /// The admin base URL.
    pub fn base_url(&self) -> String {
        self.base_url.read().expect("not poisoned").clone()
    }

    /// The redirect URI registered with authorization servers.
    pub fn redirect_uri(&self) -> String {
        format!("{}{CALLBACK_PATH}", self.base_url())
    }

    /// `spec`'s URL with its sealed parts opened
    /// ([`server_secrets::url`]): what discovery requests, and what an
    /// authorization and its tokens are bound to. Errors: a sealed part
    /// does not open (named, never its value).
    pub fn server_url(
        &self,
        spec: &switchyard_common::server_spec::ServerConfig,
    ) -> Result<String, String> {
        server_secrets::url(self.ring.as_deref(), spec)
    }

    /// The key ring, if one is configured.
    pub fn key_ring(&self) -> Option<&Arc<KeyRing>> {
        self.ring.as_ref()
    }

    /// The key ring. Errors: none is configured.
    pub(crate) fn ring(&self) -> Result<&KeyRing, flow::OAuthError> {
        self.ring.as_deref().ok_or(flow::OAuthError::NoKey)
    }
}
