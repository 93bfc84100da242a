//! Our side of rmcp's OAuth wire (`rmcp::transport::auth`): rmcp does
//! discovery, registration, PKCE, the `resource` parameter, the RFC 9207
//! `iss` check and the token requests; here are the pieces it calls back
//! into and the conversions between its token answers and our
//! [`Tokens`](super::tokens::Tokens).
//!
//! An `AuthorizationManager` is built per operation from stored records
//! ([`manager_for`]), never kept: any replica can finish an authorization
//! another one started, or refresh a server's tokens.
//!
//! - [`OnePending`]: rmcp's `StateStore` over one pending authorization
//!   read from the store; its `delete` is a compare-and-swap on the
//!   revision read, so of two callbacks with the same `state` only one
//!   reaches the token endpoint.
//! - [`Captured`]: rmcp's `CredentialStore` holding what rmcp loads and
//!   saves in memory; the caller writes the result with the compare-and-
//!   swap rules of [`super::tokens`].

use super::records::Client;
use super::tokens::{Issued, Tokens};
use crate::store::{Compare, Op, Revision, Store, Txn};
use async_trait::async_trait;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, CredentialStore, OAuthClientConfig,
    StateStore, StoredAuthorizationState, StoredCredentials,
};
use std::sync::{Arc, Mutex};

/// A manager for `client`'s authorization server, its tokens asked for
/// `client.resource`. `private_addresses`: the authorization server may
/// resolve to a private address. Errors: the resource is not a URL, the
/// stored metadata is unusable, or (see below) discovery failed.
///
/// rmcp sends as `resource` the one its discovery found, else its base
/// URL. Built from stored records, the base URL is the resource; but a
/// URL prints a path-less resource with a `/` added (`https://h` as
/// `https://h/`), which is not the resource the authorization request
/// named. Such a resource is discovered again from the server (its
/// resource metadata, as the challenge of the authorization pointed to),
/// so that rmcp sends it as published.
pub async fn manager_for(
    client: &Client,
    private_addresses: bool,
) -> Result<AuthorizationManager, AuthError> {
    let exact = url::Url::parse(&client.resource).is_ok_and(|u| u.as_str() == client.resource);
    let base = match exact || client.server_url.is_empty() {
        true => client.resource.as_str(),
        false => client.server_url.as_str(),
    };
    let mut manager = match private_addresses {
        true => AuthorizationManager::new_allowing_private_addresses(base).await?,
        false => AuthorizationManager::new(base).await?,
    };
    if !exact && !client.server_url.is_empty() {
        manager
            .resolve_metadata_from_challenge(client.challenge.as_deref())
            .await?;
    }
    let metadata: AuthorizationMetadata = serde_json::from_value(client.metadata.clone())
        .map_err(|e| AuthError::MetadataError(format!("stored metadata: {e}")))?;
    manager.set_metadata(metadata);
    let mut config = OAuthClientConfig::new(client.client_id.clone(), client.redirect_uri.clone());
    if let Some(secret) = &client.client_secret {
        config = config.with_client_secret(secret.clone());
    }
    manager.configure_client(config)?;
    Ok(manager)
}

/// rmcp's `StateStore` over one pending authorization read at `revision`.
#[derive(Debug, Clone)]
pub struct OnePending<S> {
    store: S,
    key: String,
    revision: Revision,
    state: Arc<Mutex<Option<StoredAuthorizationState>>>,
}

impl<S> OnePending<S> {
    /// `request` (rmcp's `StoredAuthorizationState` as JSON) stored at
    /// `key`, read at `revision`.
    pub fn new(store: S, key: String, revision: Revision, request: &serde_json::Value) -> Self {
        let state = serde_json::from_value(request.clone()).ok();
        OnePending {
            store,
            key,
            revision,
            state: Arc::new(Mutex::new(state)),
        }
    }
}

#[async_trait]
impl<S: Store + Clone + std::fmt::Debug + 'static> StateStore for OnePending<S> {
    async fn save(&self, _: &str, _: StoredAuthorizationState) -> Result<(), AuthError> {
        Err(AuthError::InternalError(
            "a pending authorization is not written here".into(),
        ))
    }

    async fn load(&self, csrf_token: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        let state = self.state.lock().expect("not poisoned").clone();
        Ok(state.filter(|s| s.csrf_token == csrf_token))
    }

    async fn delete(&self, _: &str) -> Result<(), AuthError> {
        let r = self
            .store
            .txn(
                Txn::new()
                    .when([Compare::mod_revision(&self.key, self.revision)])
                    .and_then([Op::delete(&self.key)]),
            )
            .await
            .map_err(|e| AuthError::InternalError(format!("taking the authorization: {e}")))?;
        if !r.succeeded {
            return Err(AuthError::AuthorizationFailed(
                "this authorization was already used".into(),
            ));
        }
        Ok(())
    }
}

/// rmcp's `StateStore` for starting an authorization: keeps the request
/// rmcp makes in memory; the caller stores it with the rest of the
/// pending authorization.
#[derive(Debug, Clone, Default)]
pub struct Started(Arc<Mutex<Option<StoredAuthorizationState>>>);

impl Started {
    /// What rmcp saved, as JSON.
    pub fn take(&self) -> Option<serde_json::Value> {
        let state = self.0.lock().expect("not poisoned").take()?;
        serde_json::to_value(state).ok()
    }
}

#[async_trait]
impl StateStore for Started {
    async fn save(&self, _: &str, state: StoredAuthorizationState) -> Result<(), AuthError> {
        *self.0.lock().expect("not poisoned") = Some(state);
        Ok(())
    }

    async fn load(&self, csrf_token: &str) -> Result<Option<StoredAuthorizationState>, AuthError> {
        let state = self.0.lock().expect("not poisoned").clone();
        Ok(state.filter(|s| s.csrf_token == csrf_token))
    }

    async fn delete(&self, _: &str) -> Result<(), AuthError> {
        *self.0.lock().expect("not poisoned") = None;
        Ok(())
    }
}

/// rmcp's `CredentialStore` in memory: what rmcp loads is set by the
/// caller ([`Captured::holding`]), what it saves is kept for the caller
/// ([`Captured::saved`]), and a rejected refresh token is noted
/// ([`Captured::rejected`]).
#[derive(Debug, Clone, Default)]
pub struct Captured {
    inner: Arc<Mutex<CapturedInner>>,
}

#[derive(Debug, Default)]
struct CapturedInner {
    loaded: Option<StoredCredentials>,
    saved: Option<StoredCredentials>,
    rejected: bool,
}

impl Captured {
    /// A store whose `load` answers `tokens` as issued to `client_id`.
    pub fn holding(tokens: &Tokens, client_id: &str) -> Captured {
        let response = serde_json::json!({
            "access_token": tokens.access_token,
            "token_type": "Bearer",
            "refresh_token": tokens.refresh_token,
        });
        let creds = StoredCredentials::new(
            client_id.to_owned(),
            serde_json::from_value(response).ok(),
            tokens.scopes.clone(),
            None,
        )
        .with_issuer(Some(tokens.issuer.clone()));
        let c = Captured::default();
        c.inner.lock().expect("not poisoned").loaded = Some(creds);
        c
    }

    /// What rmcp saved: the tokens it got, as [`Issued`].
    pub fn saved(&self) -> Option<Issued> {
        let saved = self.inner.lock().expect("not poisoned").saved.clone()?;
        let response = serde_json::to_value(saved.token_response?).ok()?;
        let text = |k: &str| response.get(k).and_then(|v| v.as_str()).map(str::to_owned);
        Some(Issued {
            access_token: text("access_token")?,
            refresh_token: text("refresh_token"),
            expires_in: response.get("expires_in").and_then(|v| v.as_u64()),
            scopes: Some(saved.granted_scopes).filter(|s| !s.is_empty()),
        })
    }

    /// Whether rmcp reported the refresh token rejected (`invalid_grant`).
    pub fn rejected(&self) -> bool {
        self.inner.lock().expect("not poisoned").rejected
    }
}

#[async_trait]
impl CredentialStore for Captured {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        let i = self.inner.lock().expect("not poisoned");
        Ok(i.saved.clone().or_else(|| i.loaded.clone()))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.inner.lock().expect("not poisoned").saved = Some(credentials);
        Ok(())
    }

    async fn clear(&self) -> Result<(), AuthError> {
        let mut i = self.inner.lock().expect("not poisoned");
        i.loaded = None;
        i.saved = None;
        Ok(())
    }

    async fn on_refresh_token_rejected(&self, _: &StoredCredentials) -> Result<(), AuthError> {
        self.inner.lock().expect("not poisoned").rejected = true;
        Ok(())
    }
}

/// The text of an rmcp error for an admin: rmcp's messages carry no
/// secret (they name URLs, issuers, fields and HTTP statuses), but an
/// authorization server's error body may echo what it was sent, so the text
/// is cut to its first 300 characters.
pub fn describe(e: &AuthError) -> String {
    hide(&e.to_string(), &[])
}

/// [`describe`], with each of `secrets` (a code, a PKCE verifier, a client
/// secret, a refresh token) replaced by `[redacted]`: an authorization
/// server's error may echo the request it refused.
pub fn describe_hiding(e: &AuthError, secrets: &[&str]) -> String {
    hide(&e.to_string(), secrets)
}

/// `text` cut to 300 characters with each of `secrets` (4 characters or
/// more) replaced by `[redacted]`, also in its form-encoded spelling, and
/// the secrets of the URLs it quotes (the server's URL may hold a key:
/// [`switchyard_common::server_spec::redact_urls_in`]).
pub fn hide(text: &str, secrets: &[&str]) -> String {
    let mut text = switchyard_common::server_spec::redact_urls_in(text);
    for s in secrets.iter().filter(|s| s.len() >= 4) {
        let encoded: String = url::form_urlencoded::byte_serialize(s.as_bytes()).collect();
        text = text
            .replace(*s, "[redacted]")
            .replace(&encoded, "[redacted]");
    }
    match text.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}
