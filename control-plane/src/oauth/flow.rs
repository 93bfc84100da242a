//! An admin's authorization of one server, start to callback (issue #16
//! item 2; MCP 2026-07-28 `basic/authorization/`).
//!
//! [`OAuth::start`]:
//! 1. Unauthenticated requests to the server (`initialize`, or
//!    `server/discover` for a 2026-07-28 server, then `tools/list`, for a
//!    server that lets the handshake through) fetch its 401 challenge.
//! 2. rmcp discovers the protected resource metadata (the challenge's
//!    `resource_metadata`, then the path-aware well-known URL, then the
//!    root; its `resource` must match the server) and the authorization
//!    server's (RFC 8414 and OIDC, in the spec's order; its `issuer` must
//!    be the one the URL was built from). A legacy fallback (no metadata)
//!    is refused.
//! 3. PKCE: the authorization server must list S256 in
//!    `code_challenge_methods_supported`; an absent list is refused unless
//!    `[servers.oauth] allow_unadvertised_pkce` (audited).
//! 4. The client, in the spec's priority: pre-registered
//!    (`[servers.oauth] client_id`), then a client registered before at
//!    the same issuer, then a Client ID Metadata Document, then Dynamic
//!    Client Registration (`application_type` `native` for a loopback
//!    redirect, else `web`). Clients are kept per issuer.
//! 5. Scopes: configured, else the challenge's, else the resource
//!    metadata's `scopes_supported`, else none; `offline_access` only when
//!    the authorization server lists it; after a step-up, the union
//!    recorded in the status.
//! 6. The pending authorization (PKCE verifier, state, expected issuer)
//!    is sealed in the store on a 10-minute lease; the URL is answered.
//!
//! [`OAuth::finish`] (the callback, on any replica): the pending record
//! by `state`; RFC 9207 `iss` validation; the record taken once
//! (compare-and-swap); the code exchanged with the PKCE verifier and
//! `resource`; the tokens stored under a new generation; the status set to
//! authorized. Every outcome is audited (`oauth.authorization_started`,
//! `oauth.authorized`, `oauth.authorization_failed`), never with a secret.

use super::records::{
    self, AuthState, Client, PENDING_TTL, Pending, Registration, Status, client_key, pending_key,
    status_key,
};
use super::tokens::{self, Tokens};
use super::wire::{self, Captured, OnePending, Started};
use super::{KeyRing, OAuth};
use crate::store::{Op, Store, Txn};
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, AuthorizationSession,
};
use serde_json::json;
use std::time::Duration;
use switchyard_common::server_spec::{AuthKind, ServerConfig};
use switchyard_common::time::now_ms;

/// The limit on each request to a server or an authorization server.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many step-ups a server gets (the spec: retry "no more than a few
/// times"): with the first authorization, at most three authorization
/// requests in all, as the conformance suite's `auth/scope-retry-limit`
/// checks.
pub const MAX_STEP_UPS: u32 = 2;

/// Why an authorization could not start or finish. Messages name the
/// server and the check that failed, never a secret.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// No `[store] token_encryption_key_file`.
    #[error(
        "no token encryption key is configured ([store] token_encryption_key_file): OAuth tokens are only kept encrypted"
    )]
    NoKey,
    /// The server is not `auth = "oauth"`.
    #[error("server {0} is not an OAuth server (set auth = \"oauth\")")]
    NotOAuth(String),
    /// The server or its authorization server refused, or published
    /// something unusable.
    #[error("server {server}: {problem}")]
    Refused {
        /// The server.
        server: String,
        /// What failed.
        problem: String,
    },
    /// The server or the authorization server could not be reached.
    #[error("server {server}: {problem}")]
    Unreachable {
        /// The server.
        server: String,
        /// What failed.
        problem: String,
    },
    /// A callback that matches no pending authorization.
    #[error(
        "this authorization is unknown, expired or already used: start it again (switchyard servers authorize NAME)"
    )]
    UnknownState,
    /// A record did not open, or the store failed.
    #[error("{0}")]
    Store(String),
}

impl From<OAuthError> for tonic::Status {
    fn from(e: OAuthError) -> tonic::Status {
        match &e {
            OAuthError::Unreachable { .. } => tonic::Status::unavailable(e.to_string()),
            OAuthError::Store(_) => tonic::Status::unavailable(e.to_string()),
            OAuthError::UnknownState => tonic::Status::not_found(e.to_string()),
            _ => tonic::Status::failed_precondition(e.to_string()),
        }
    }
}

impl From<records::RecordError> for OAuthError {
    fn from(e: records::RecordError) -> Self {
        OAuthError::Store(e.to_string())
    }
}

impl From<tokens::TokenError> for OAuthError {
    fn from(e: tokens::TokenError) -> Self {
        OAuthError::Store(e.to_string())
    }
}

impl From<crate::store::StoreError> for OAuthError {
    fn from(e: crate::store::StoreError) -> Self {
        OAuthError::Store(e.to_string())
    }
}

/// A started authorization.
#[derive(Debug, Clone)]
pub struct StartedAuthorization {
    /// Open this in a browser.
    pub url: String,
    /// When the callback must come by, ms since the epoch.
    pub expires_at_ms: i64,
    /// The scopes asked for.
    pub scopes: Vec<String>,
    /// The authorization server's issuer.
    pub issuer: String,
    /// How the client was registered.
    pub registration: Registration,
}

/// The callback's query parameters (RFC 6749 §4.1.2, RFC 9207).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct CallbackParams {
    /// The authorization code.
    #[serde(default)]
    pub code: Option<String>,
    /// The state.
    #[serde(default)]
    pub state: Option<String>,
    /// The issuer (RFC 9207).
    #[serde(default)]
    pub iss: Option<String>,
    /// An error code of the authorization server.
    #[serde(default)]
    pub error: Option<String>,
    /// Its description.
    #[serde(default)]
    pub error_description: Option<String>,
}

fn refused(server: &str, problem: impl Into<String>) -> OAuthError {
    OAuthError::Refused {
        server: server.into(),
        problem: problem.into(),
    }
}

/// An rmcp failure as ours: network failures are `Unreachable`.
fn from_auth(server: &str, e: &AuthError) -> OAuthError {
    let problem = wire::describe(e);
    match e {
        AuthError::HttpError(_) | AuthError::DiscoveryRequestFailed { .. } => {
            OAuthError::Unreachable {
                server: server.into(),
                problem,
            }
        }
        _ => refused(server, problem),
    }
}

/// Whether `url`'s host is a loopback name or address.
fn is_loopback(url: &str) -> bool {
    url::Url::parse(url).is_ok_and(|u| match u.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    })
}

/// The value of query parameter `name` of `url`.
fn query_param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

impl OAuth {
    /// Starts the authorization of `spec` for `admin` (the caller's name,
    /// for the audit); `extra_scopes` are asked for on top of the
    /// configured or discovered ones. Errors: see [`OAuthError`].
    pub async fn start(
        &self,
        spec: &ServerConfig,
        extra_scopes: &[String],
        admin: &str,
    ) -> Result<StartedAuthorization, OAuthError> {
        let server = spec.name.as_str();
        if spec.auth_kind() != AuthKind::OAuth {
            return Err(OAuthError::NotOAuth(server.into()));
        }
        let ring = self.ring()?;
        // The spec with its sealed secrets (headers, URL parts) opened.
        let spec = &crate::oauth::server_secrets::open(Some(ring), spec)
            .map_err(|problem| refused(server, &problem))?;
        let url = spec.url.clone().unwrap_or_default();
        let settings = spec.oauth.clone().unwrap_or_default();
        let challenge = self.challenge(spec).await?;

        let mut manager = match self.private_addresses {
            true => AuthorizationManager::new_allowing_private_addresses(url.as_str()).await,
            false => AuthorizationManager::new(url.as_str()).await,
        }
        .map_err(|e| from_auth(server, &e))?;
        let resolution = manager
            .resolve_metadata_from_challenge(challenge.as_deref())
            .await
            .map_err(|e| from_auth(server, &e))?;
        if !resolution.source.is_discovered() {
            return Err(refused(
                server,
                "publishes no OAuth metadata (no protected resource metadata, RFC 9728, nor authorization server metadata, RFC 8414)",
            ));
        }
        let metadata = resolution.metadata;
        let Some(issuer) = metadata.issuer.clone() else {
            return Err(refused(
                server,
                "its authorization server's metadata has no issuer",
            ));
        };
        for (field, u) in [
            ("authorization_endpoint", &metadata.authorization_endpoint),
            ("token_endpoint", &metadata.token_endpoint),
        ] {
            if !url::Url::parse(u).is_ok_and(|u| matches!(u.scheme(), "http" | "https")) {
                return Err(refused(
                    server,
                    format!("authorization server {issuer}: its {field} is not an http(s) URL"),
                ));
            }
        }
        let pkce_override = match &metadata.code_challenge_methods_supported {
            Some(m) if m.iter().any(|m| m == "S256") => false,
            Some(_) => {
                return Err(refused(
                    server,
                    format!(
                        "authorization server {issuer} does not support PKCE with S256 (code_challenge_methods_supported)"
                    ),
                ));
            }
            None if settings.allow_unadvertised_pkce => true,
            None => {
                return Err(refused(
                    server,
                    format!(
                        "authorization server {issuer} does not advertise PKCE (no code_challenge_methods_supported): refused as the MCP specification says; an admin may set [servers.oauth] allow_unadvertised_pkce = true for this server"
                    ),
                ));
            }
        };
        manager.set_metadata(metadata.clone());
        let started = Started::default();
        manager.set_state_store(started.clone());

        let redirect_uri = self.redirect_uri();
        let status = records::get_status(&self.store, server)
            .await?
            .map(|(s, _)| s);
        // Scopes: configured and asked for, else rmcp's initial selection
        // (challenge, then resource metadata, then none); after a step-up,
        // the union the status recorded.
        let mut scopes: Vec<String> = match settings.scopes.is_empty() {
            true => manager.select_initial_scopes(&[]).await,
            false => settings.scopes.clone(),
        };
        for s in extra_scopes
            .iter()
            .chain(status.iter().flat_map(|s| s.scopes.iter()))
        {
            if !scopes.contains(s) {
                scopes.push(s.clone());
            }
        }
        let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();

        // The client, in the spec's priority.
        let known = records::get_sealed::<_, Client>(
            &self.store,
            ring,
            &client_key(server, &issuer),
        )
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(%server, error = %e, "a stored client does not open; registering again");
            None
        })
        .map(|(c, _)| c)
        .filter(|c| c.redirect_uri == redirect_uri);
        let app_type = if is_loopback(&redirect_uri) {
            "native"
        } else {
            "web"
        };
        let mut request = AuthorizationRequest::new(redirect_uri.clone())
            .with_scopes(scopes.clone())
            .with_application_type(app_type);
        let (registration, client_id, client_secret) = if let Some(id) = &settings.client_id {
            // A pre-registered client belongs to one authorization server:
            // once used at one, it is never sent to another (its secret
            // would be).
            if let Ok(listing) = self.store.list(&records::clients_prefix(server)).await {
                let known: Vec<Client> = listing
                    .kvs
                    .iter()
                    .filter_map(|kv| records::open::<Client>(ring, &kv.key, &kv.value).ok())
                    .filter(|c| c.registration == Registration::Preregistered && &c.client_id == id)
                    .collect();
                if !known.is_empty() && !known.iter().any(|c| c.issuer == issuer) {
                    return Err(refused(
                        server,
                        format!(
                            "its authorization server is now {issuer}, but the pre-registered client {id:?} was used at {}: not sent to another one (MCP client-registration); if the change is expected, update the server's [servers.oauth] client (or remove and add the server)",
                            known[0].issuer
                        ),
                    ));
                }
            }
            let secret = self.client_secret(spec).await?;
            (Registration::Preregistered, id.clone(), secret)
        } else if let Some(c) = known.filter(|c| c.registration != Registration::Preregistered) {
            (c.registration, c.client_id, c.client_secret)
        } else if let Some(doc) = settings.client_metadata_url.clone().filter(|_| {
            metadata
                .additional_fields
                .get("client_id_metadata_document_supported")
                .and_then(|v| v.as_bool())
                == Some(true)
        }) {
            (Registration::MetadataDocument, doc, None)
        } else {
            if metadata.registration_endpoint.is_none() {
                return Err(refused(
                    server,
                    format!(
                        "authorization server {issuer} offers no way to register: it has no registration_endpoint{}; set [servers.oauth] client_id (and client_secret) of a client registered there",
                        if settings.client_metadata_url.is_some() {
                            " and does not support Client ID Metadata Documents"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            // rmcp sends `application_type` from the manager's client
            // configuration: set it before registering.
            let _ = manager.configure_client(
                rmcp::transport::auth::OAuthClientConfig::new("-", redirect_uri.clone())
                    .with_application_type(app_type),
            );
            let config = manager
                .register_client("Switchyard", &redirect_uri, &scope_refs)
                .await
                .map_err(|e| from_auth(server, &e))?;
            (
                Registration::Dynamic,
                config.client_id,
                config.client_secret,
            )
        };
        request = request.with_preregistered_client(client_id.clone());
        if let Some(secret) = &client_secret {
            request = request.with_client_secret(secret.clone());
        }
        let session = AuthorizationSession::new(manager, request)
            .await
            .map_err(|(_, e)| from_auth(server, &e))?;
        let auth_url = session.get_authorization_url().to_owned();
        let Some(rmcp_request) = started.take() else {
            return Err(OAuthError::Store(
                "the authorization request was not recorded".into(),
            ));
        };
        let Some(state) = query_param(&auth_url, "state") else {
            return Err(OAuthError::Store(
                "the authorization URL has no state".into(),
            ));
        };
        let resource = query_param(&auth_url, "resource").unwrap_or_else(|| url.clone());
        let scopes_asked: Vec<String> = query_param(&auth_url, "scope")
            .map(|s| {
                s.split(' ')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let client = Client {
            issuer: issuer.clone(),
            client_id,
            client_secret,
            registration,
            redirect_uri,
            metadata: serde_json::to_value(&metadata).unwrap_or_default(),
            resource,
            server_url: url.clone(),
            challenge: challenge.clone(),
        };
        // A dynamically registered client is kept for the next time.
        if registration == Registration::Dynamic {
            let key = client_key(server, &issuer);
            self.store
                .put(&key, records::seal(ring, &key, &client), None)
                .await?;
        }
        let expires_at_ms = now_ms() + PENDING_TTL.as_millis() as i64;
        let pending = Pending {
            server: server.into(),
            request: rmcp_request,
            client,
            scopes: scopes_asked.clone(),
            admin: admin.into(),
            expires_at_ms,
            pkce_override,
        };
        // One authorization of a server at a time: an older one, whose URL
        // may still be opened, would replace the newer grant.
        self.drop_pending(ring, server).await;
        let key = pending_key(&state);
        let lease = self.store.grant_lease(PENDING_TTL).await?;
        self.store
            .txn(Txn::new().and_then([Op::put_with_lease(
                &key,
                records::seal(ring, &key, &pending),
                lease,
            )]))
            .await?;
        self.audit.record(json!({
            "kind": "oauth.authorization_started",
            "server": server,
            "admin": admin,
            "issuer": issuer,
            "registration": registration.as_str(),
            "scopes": scopes_asked,
            "pkceOverride": pkce_override,
        }));
        tracing::info!(%server, %issuer, registration = registration.as_str(), pkce_override, "authorization started");
        Ok(StartedAuthorization {
            url: auth_url,
            expires_at_ms,
            scopes: scopes_asked,
            issuer,
            registration,
        })
    }

    /// The server's answer to an unauthenticated request: its
    /// `WWW-Authenticate` when it is a 401, else `None` (discovery then
    /// starts from the well-known URLs). `spec`: opened
    /// ([`crate::oauth::server_secrets::open`]). Errors: the server cannot
    /// be reached.
    async fn challenge(&self, spec: &ServerConfig) -> Result<Option<String>, OAuthError> {
        let server = spec.name.as_str();
        let headers = &spec.headers;
        let url = spec.url.clone().unwrap_or_default();
        let client = &self.http;
        let modern = spec.era == "2026-07-28";
        let info = json!({"name": "switchyard", "version": env!("CARGO_PKG_VERSION")});
        let meta = json!({"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": info,
            "io.modelcontextprotocol/clientCapabilities": {}}});
        // A server may let the handshake through and challenge the first
        // real request: the probe goes on to `tools/list`.
        let steps: Vec<(&str, serde_json::Value)> = match modern {
            true => vec![
                (
                    "server/discover",
                    json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": meta}),
                ),
                (
                    "tools/list",
                    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": meta}),
                ),
            ],
            false => vec![
                (
                    "initialize",
                    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": info}}),
                ),
                (
                    "notifications/initialized",
                    json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                ),
                (
                    "tools/list",
                    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
                ),
            ],
        };
        let mut session: Option<String> = None;
        let mut challenge = None;
        for (i, (method, body)) in steps.into_iter().enumerate() {
            let mut req = client
                .post(&url)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(body.to_string());
            if modern {
                req = req
                    .header("mcp-protocol-version", "2026-07-28")
                    .header("mcp-method", method);
            } else if i > 0 {
                req = req.header("mcp-protocol-version", "2025-11-25");
            }
            if let Some(sid) = &session {
                req = req.header("mcp-session-id", sid.as_str());
            }
            for (k, v) in headers {
                req = req.header(k.as_str(), v.as_str());
            }
            let resp = match req.send().await {
                Ok(r) => r,
                Err(e) if i == 0 => {
                    return Err(OAuthError::Unreachable {
                        server: server.into(),
                        problem: format!(
                            "{} cannot be reached: {}",
                            switchyard_common::server_spec::redacted_url(&url),
                            switchyard_common::error_chain(&e.without_url())
                        ),
                    });
                }
                Err(_) => break,
            };
            if resp.status() == reqwest::StatusCode::UNAUTHORIZED {
                challenge = resp
                    .headers()
                    .get(reqwest::header::WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                break;
            }
            if !resp.status().is_success() {
                break;
            }
            if let Some(sid) = resp
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            {
                session = Some(sid.to_owned());
            }
        }
        // The probe's session is not kept (best effort).
        if let Some(sid) = session {
            let _ = client
                .delete(&url)
                .header("mcp-session-id", sid)
                .header("mcp-protocol-version", "2025-11-25")
                .send()
                .await;
        }
        Ok(challenge)
    }

    /// The pre-registered client's secret of `spec`: its file, or the one
    /// given in the configuration or the API (sealed in the store).
    async fn client_secret(&self, spec: &ServerConfig) -> Result<Option<String>, OAuthError> {
        let server = spec.name.as_str();
        let settings = spec.oauth.clone().unwrap_or_default();
        if let Some(file) = &settings.client_secret_file {
            let value = switchyard_common::server_spec::load_header_value(
                &format!("servers.{server}.oauth.client_secret_file"),
                file,
            )
            .map_err(|e| refused(server, e.to_string()))?;
            return Ok(Some(value));
        }
        // Only a secret given for this spec (a removed server's is gone).
        if !settings.client_secret_sealed {
            return Ok(None);
        }
        let key = records::secret_key(server);
        Ok(
            records::get_sealed::<_, String>(&self.store, self.ring()?, &key)
                .await?
                .map(|(s, _)| s),
        )
    }

    /// Keeps a client secret given in `spec` (config or API) sealed in the
    /// store, and takes it out of the spec, which is stored in the clear.
    /// Errors: a secret is given but no key is configured.
    pub async fn seal_client_secret(&self, spec: &mut ServerConfig) -> Result<(), OAuthError> {
        let Some(secret) = spec.oauth.as_mut().and_then(|o| {
            let s = o.client_secret.take();
            o.client_secret_sealed |= s.is_some();
            s
        }) else {
            return Ok(());
        };
        let ring = self.ring()?;
        let key = records::secret_key(&spec.name);
        self.store
            .put(&key, records::seal(ring, &key, &secret), None)
            .await?;
        Ok(())
    }

    /// The callback: finishes the authorization `params.state` names.
    /// Answers the server. Errors: see [`OAuthError`]; a failure after the
    /// pending record was found is also audited and recorded in the
    /// server's status.
    pub async fn finish(
        &self,
        params: &CallbackParams,
        current_url: impl Fn(&str) -> Option<String>,
    ) -> Result<String, OAuthError> {
        let ring = self.ring()?;
        let state = params
            .state
            .as_deref()
            .filter(|s| !s.is_empty())
            .ok_or(OAuthError::UnknownState)?;
        let key = pending_key(state);
        let Some((pending, revision)) = records::get_sealed::<_, Pending>(&self.store, ring, &key)
            .await
            .unwrap_or(None)
        else {
            return Err(OAuthError::UnknownState);
        };
        if pending.expires_at_ms < now_ms() {
            let _ = self.store.delete(&key).await;
            return Err(OAuthError::UnknownState);
        }
        let server = pending.server.clone();
        // The server may have been removed, or moved, since the admin
        // started: its tokens must not go to another server.
        let moved = match current_url(&server) {
            None => Some("it was removed since the authorization started"),
            Some(u) if u != pending.client.server_url => {
                Some("its URL changed since the authorization started: start it again")
            }
            Some(_) => None,
        };
        let outcome = match moved {
            Some(problem) => {
                let _ = self.store.delete(&key).await;
                Err(refused(&server, problem))
            }
            None => self.exchange(ring, &pending, &key, revision, params).await,
        };
        match outcome {
            Ok(tokens) => {
                self.audit.record(json!({
                    "kind": "oauth.authorized",
                    "server": server,
                    "admin": pending.admin,
                    "issuer": tokens.issuer,
                    "scopes": tokens.scopes,
                    "generation": tokens.generation,
                    "refreshable": tokens.refresh_token.is_some(),
                }));
                self.metrics.oauth_event(&server, "authorized");
                tracing::info!(%server, generation = tokens.generation, "authorized");
                Ok(server)
            }
            Err(e) => {
                // The status says so (the CLI waits for it); the state and
                // any tokens stay as they were.
                let standing = self.standing(&server, None).await;
                let status = Status {
                    state: standing.state(),
                    reason: format!("authorization failed: {e}"),
                    scopes: standing
                        .status
                        .as_ref()
                        .map(|s| s.scopes.clone())
                        .unwrap_or_default(),
                    generation: standing.tokens.as_ref().map_or(0, |t| t.generation),
                    at_ms: now_ms(),
                    step_ups: standing.status.as_ref().map_or(0, |s| s.step_ups),
                };
                let _ = self
                    .store
                    .txn(Txn::new().and_then([status.put(&server)]))
                    .await;
                self.audit.record(json!({
                    "kind": "oauth.authorization_failed",
                    "server": server,
                    "admin": pending.admin,
                    "issuer": pending.client.issuer,
                    "reason": e.to_string(),
                }));
                self.metrics.oauth_event(&server, "authorization_failed");
                tracing::warn!(%server, error = %e, "authorization failed");
                Err(e)
            }
        }
    }

    async fn exchange(
        &self,
        ring: &KeyRing,
        pending: &Pending,
        key: &str,
        revision: crate::store::Revision,
        params: &CallbackParams,
    ) -> Result<Tokens, OAuthError> {
        let server = pending.server.as_str();
        let issuer = pending.client.issuer.as_str();
        // RFC 9207 before anything else; on a mismatch the authorization
        // server's error is neither acted on nor shown.
        let require_iss = pending
            .request
            .get("require_issuer")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        match params.iss.as_deref() {
            Some(iss) if iss != issuer => {
                let shown: String = iss.chars().take(100).collect();
                return Err(refused(
                    server,
                    format!(
                        "the authorization response came from issuer {shown:?}, not {issuer:?} (RFC 9207): refused"
                    ),
                ));
            }
            None if require_iss => {
                return Err(refused(
                    server,
                    format!(
                        "the authorization response has no iss although {issuer} promises one (RFC 9207): refused"
                    ),
                ));
            }
            _ => {}
        }
        if let Some(error) = &params.error {
            // Taken, so it cannot be retried with a code later.
            let _ = self.store.delete(key).await;
            // An error code is a word of RFC 6749's characters (%x20-21,
            // %x23-5B, %x5D-7E): anything else is not shown.
            let error = match error.len() <= 64
                && error
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
            {
                true => error.as_str(),
                false => "an error code that is not one",
            };
            let description: String = params
                .error_description
                .as_deref()
                .unwrap_or("")
                .chars()
                .filter(|c| !c.is_control())
                .take(200)
                .collect::<String>()
                .trim()
                .to_owned();
            return Err(refused(
                server,
                format!(
                    "the authorization server answered {error}{}{description}",
                    if description.is_empty() { "" } else { ": " }
                ),
            ));
        }
        let code = params
            .code
            .as_deref()
            .filter(|c| !c.is_empty())
            .ok_or_else(|| refused(server, "the callback has no code"))?;
        let state = params.state.as_deref().unwrap_or_default();
        let mut manager = wire::manager_for(&pending.client, self.private_addresses)
            .await
            .map_err(|e| from_auth(server, &e))?;
        manager.set_state_store(OnePending::new(
            self.store.clone(),
            key.to_owned(),
            revision,
            &pending.request,
        ));
        let captured = Captured::default();
        manager.set_credential_store(captured.clone());
        let verifier = pending
            .request
            .get("pkce_verifier")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let secret = pending.client.client_secret.as_deref().unwrap_or_default();
        let hidden = [code, verifier, secret, state];
        tokio::time::timeout(
            HTTP_TIMEOUT,
            manager.exchange_code_for_token_with_issuer(code, state, params.iss.as_deref()),
        )
        .await
        .map_err(|_| OAuthError::Unreachable {
            server: server.into(),
            problem: format!(
                "the token endpoint did not answer within {} s",
                HTTP_TIMEOUT.as_secs()
            ),
        })?
        .map_err(|e| match from_auth(server, &e) {
            OAuthError::Refused { server, .. } => OAuthError::Refused {
                server,
                problem: wire::describe_hiding(&e, &hidden),
            },
            OAuthError::Unreachable { server, .. } => OAuthError::Unreachable {
                server,
                problem: wire::describe_hiding(&e, &hidden),
            },
            other => other,
        })?;
        let issued = captured
            .saved()
            .ok_or_else(|| refused(server, "the token endpoint answered no access token"))?;
        let client_key = client_key(server, issuer);
        self.store
            .put(
                &client_key,
                records::seal(ring, &client_key, &pending.client),
                None,
            )
            .await?;
        // The new tokens replace whatever is stored, under the next
        // generation (a concurrent write: read again and retry).
        for _ in 0..5 {
            let current = tokens::load(&self.store, ring, server)
                .await
                .unwrap_or(None);
            // Generations never go back, not even after a forget: a
            // sidecar reports a refusal once per generation.
            let last = records::get_status(&self.store, server)
                .await
                .ok()
                .flatten()
                .map_or(0, |(s, _)| s.generation);
            let (generation, read) = match &current {
                Some((t, rev)) => (t.generation.max(last) + 1, Some(*rev)),
                None => (last + 1, None),
            };
            let now = now_ms();
            let new = Tokens {
                access_token: issued.access_token.clone(),
                refresh_token: issued.refresh_token.clone(),
                expires_at_ms: tokens::expiry(issued.expires_in, now),
                scopes: issued
                    .scopes
                    .clone()
                    .unwrap_or_else(|| pending.scopes.clone()),
                issuer: issuer.into(),
                resource: pending.client.resource.clone(),
                generation,
                client_id: pending.client.client_id.clone(),
                issued_at_ms: now,
                authorized_at_ms: now,
                server_url: pending.client.server_url.clone(),
            };
            let read = match current {
                // A record that no longer opens is replaced.
                None if self.store.get(&tokens::tokens_key(server)).await?.is_some() => {
                    self.store.delete(&tokens::tokens_key(server)).await?;
                    None
                }
                _ => read,
            };
            // The tokens and the status in one write: a sidecar never sees
            // the new tokens with the old status.
            let step_ups = records::get_status(&self.store, server)
                .await
                .ok()
                .flatten()
                .map_or(0, |(s, _)| s.step_ups);
            let status = Status {
                state: AuthState::Authorized,
                reason: String::new(),
                scopes: Vec::new(),
                generation,
                at_ms: now,
                step_ups,
            };
            let also = vec![status.put(server)];
            if tokens::save_with(&self.store, ring, server, &new, read, also)
                .await?
                .is_some()
            {
                return Ok(new);
            }
        }
        Err(OAuthError::Store(format!(
            "server {server}: the tokens could not be saved (written concurrently)"
        )))
    }

    /// Revokes `t`'s grant at its authorization server (RFC 7009: the
    /// refresh token, which revokes the grant, else the access token), when
    /// the server has a `revocation_endpoint`. Best effort: answers whether
    /// the authorization server said yes.
    async fn revoke(&self, server: &str, t: &Tokens) -> bool {
        let Ok(ring) = self.ring() else { return false };
        let Ok(Some((client, _))) =
            records::get_sealed::<_, Client>(&self.store, ring, &client_key(server, &t.issuer))
                .await
        else {
            return false;
        };
        let Some(endpoint) = client
            .metadata
            .get("revocation_endpoint")
            .and_then(|v| v.as_str())
            .filter(|u| url::Url::parse(u).is_ok_and(|u| matches!(u.scheme(), "http" | "https")))
        else {
            return false;
        };
        let (token, hint) = match &t.refresh_token {
            Some(r) => (r.as_str(), "refresh_token"),
            None => (t.access_token.as_str(), "access_token"),
        };
        let mut form = vec![("token", token), ("token_type_hint", hint)];
        let mut req = self.http.post(endpoint);
        match &client.client_secret {
            Some(secret) => {
                req = req.basic_auth(
                    url::form_urlencoded::byte_serialize(client.client_id.as_bytes())
                        .collect::<String>(),
                    Some(
                        url::form_urlencoded::byte_serialize(secret.as_bytes()).collect::<String>(),
                    ),
                );
            }
            None => form.push(("client_id", client.client_id.as_str())),
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let ok = req
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        tracing::info!(%server, revoked = ok, "the grant's revocation was asked for (RFC 7009)");
        ok
    }

    /// Forgets everything stage D keeps of `server` (tokens, status,
    /// registered clients, client secret, pending authorizations), after
    /// asking the authorization server to revoke the grant: the server was
    /// removed, or its URL, auth or client changed. Best effort; answers
    /// whether anything was there.
    pub async fn purge(&self, server: &str) -> bool {
        let mut any = false;
        if let Some(t) = self.standing(server, None).await.tokens {
            self.revoke(server, &t).await;
        }
        for key in [
            tokens::tokens_key(server),
            status_key(server),
            records::secret_key(server),
        ] {
            any |= self.store.delete(&key).await.unwrap_or(false);
        }
        if let Ok(listing) = self.store.list(&records::clients_prefix(server)).await {
            for kv in listing.kvs {
                any |= self.store.delete(&kv.key).await.unwrap_or(false);
            }
        }
        if let Ok(ring) = self.ring() {
            self.drop_pending(ring, server).await;
        }
        self.metrics.oauth_state(server, None);
        if any {
            tracing::info!(%server, "its OAuth records are forgotten");
        }
        any
    }

    /// Deletes `server`'s pending authorizations (best effort).
    async fn drop_pending(&self, ring: &KeyRing, server: &str) {
        let Ok(listing) = self.store.list("oauth/pending/").await else {
            return;
        };
        for kv in listing.kvs {
            let Ok(p) = records::open::<Pending>(ring, &kv.key, &kv.value) else {
                continue;
            };
            if p.server == server {
                let _ = self.store.delete(&kv.key).await;
            }
        }
    }

    /// Forgets `server`'s tokens and pending step-ups: its state becomes
    /// `needs_authorization`; the grant is revoked at the authorization
    /// server when it offers revocation (RFC 7009, best effort). Registered
    /// clients are kept.
    pub async fn forget(&self, server: &str, admin: &str) -> Result<(), OAuthError> {
        // The generation is kept: the next tokens get a newer one.
        let standing = self.standing(server, None).await;
        let generation = standing
            .tokens
            .as_ref()
            .map(|t| t.generation)
            .into_iter()
            .chain(standing.status.as_ref().map(|s| s.generation))
            .max()
            .unwrap_or(0);
        let revoked = match &standing.tokens {
            Some(t) => self.revoke(server, t).await,
            None => false,
        };
        let status = Status {
            state: AuthState::NeedsAuthorization,
            reason: format!("forgotten by the admin {admin}"),
            scopes: Vec::new(),
            generation,
            at_ms: now_ms(),
            step_ups: 0,
        };
        self.store
            .txn(Txn::new().and_then([Op::delete(tokens::tokens_key(server)), status.put(server)]))
            .await?;
        self.audit.record(json!({
            "kind": "oauth.forgotten",
            "server": server,
            "admin": admin,
            "revoked": revoked,
        }));
        self.metrics.oauth_event(server, "forgotten");
        Ok(())
    }
}
