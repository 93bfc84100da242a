//! The stage D records besides the tokens ([`super::tokens`]), their store
//! keys and how the secret ones are sealed (issue #16; design in
//! `../shared/research/oauth.md` §5-6):
//!
//! - `oauth/status/<server>` ([`Status`], plain JSON): whether the server
//!   is authorized, or needs an admin's (re-)authorization and why. No
//!   secret: watches and answers read it without the key ring.
//! - `oauth/clients/<server>/<issuer digest>` ([`Client`], sealed): the
//!   client Switchyard is registered as at one authorization server
//!   (MCP 2026-07-28 `client-registration`: credentials are kept per
//!   issuer and never sent to another one), with that server's metadata.
//! - `oauth/pending/<state digest>` ([`Pending`], sealed, on a lease of
//!   [`PENDING_TTL`]): an authorization an admin started and whose
//!   callback has not come yet: the PKCE verifier, the expected issuer
//!   (RFC 9207), the client and the scopes. Taken once by the callback.
//! - `oauth/client-secret/<server>` (sealed): a pre-registered client's
//!   secret given in the configuration or the admin API (not a file).
//!
//! A sealed value is bound to its store key, so it cannot be moved to
//! another record. `Debug` of every type here hides secrets.

use super::keyring::{KeyRing, SealError};
use crate::store::{Op, Revision, Store, StoreError};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sha2::{Digest, Sha256};
use std::time::Duration;
use zeroize::Zeroizing;

/// How long an started authorization waits for its callback.
pub const PENDING_TTL: Duration = Duration::from_secs(600);

/// The store key of `server`'s status.
pub fn status_key(server: &str) -> String {
    format!("oauth/status/{server}")
}

/// The prefix of `server`'s registered clients.
pub fn clients_prefix(server: &str) -> String {
    format!("oauth/clients/{server}/")
}

/// The store key of `server`'s client at the authorization server `issuer`.
pub fn client_key(server: &str, issuer: &str) -> String {
    format!("{}{}", clients_prefix(server), digest(issuer))
}

/// The store key of the pending authorization whose `state` is `state`
/// (a digest: the state itself is a secret of the browser's round trip).
pub fn pending_key(state: &str) -> String {
    format!("oauth/pending/{}", digest(state))
}

/// The store key of `server`'s sealed client secret.
pub fn secret_key(server: &str) -> String {
    format!("oauth/client-secret/{server}")
}

/// The first 16 bytes of SHA-256 of `s`, in hex.
fn digest(s: &str) -> String {
    Sha256::digest(s.as_bytes())[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a sealed record at `key` is bound to.
fn binding(key: &str) -> String {
    format!("switchyard/oauth/v1|{key}")
}

/// Where a server stands with its authorization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthState {
    /// Never authorized, or its authorization was forgotten.
    NeedsAuthorization,
    /// Tokens are held.
    Authorized,
    /// The grant was revoked or rejected, or the access token expired
    /// without a refresh token.
    NeedsReauthorization,
}

impl AuthState {
    /// The name in the APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthState::NeedsAuthorization => "needs_authorization",
            AuthState::Authorized => "authorized",
            AuthState::NeedsReauthorization => "needs_reauthorization",
        }
    }
}

/// `oauth/status/<server>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The state.
    pub state: AuthState,
    /// Why (the last failure); empty when authorized without trouble.
    #[serde(default)]
    pub reason: String,
    /// After a step-up: the scopes the next authorization asks for
    /// (granted ∪ challenged); empty otherwise.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The token generation this status is about.
    #[serde(default)]
    pub generation: u64,
    /// When it was written, ms since the epoch.
    pub at_ms: i64,
    /// Step-up authorizations started for the current scope set, so that a
    /// server that keeps answering `insufficient_scope` does not loop.
    #[serde(default)]
    pub step_ups: u32,
}

impl Status {
    /// The write of this status as `server`'s (`oauth/status/<server>`).
    pub fn put(&self, server: &str) -> Op {
        Op::put(
            status_key(server),
            serde_json::to_vec(self).expect("a status serialises"),
        )
    }
}

/// How Switchyard's client was registered with an authorization server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Registration {
    /// `[servers.oauth] client_id`.
    Preregistered,
    /// A Client ID Metadata Document (`client_metadata_url`).
    MetadataDocument,
    /// Dynamic Client Registration (RFC 7591).
    Dynamic,
}

impl Registration {
    /// The name in the APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            Registration::Preregistered => "preregistered",
            Registration::MetadataDocument => "metadata_document",
            Registration::Dynamic => "dynamic",
        }
    }
}

/// Switchyard's client at one authorization server, with that server's
/// metadata (RFC 8414, as discovered and checked).
#[derive(Clone, Serialize, Deserialize)]
pub struct Client {
    /// The authorization server's issuer.
    pub issuer: String,
    /// The client id.
    pub client_id: String,
    /// Its secret, for a confidential client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// How it was registered.
    pub registration: Registration,
    /// The redirect URI it was registered with.
    pub redirect_uri: String,
    /// The authorization server's metadata (rmcp `AuthorizationMetadata`).
    pub metadata: serde_json::Value,
    /// The `resource` (RFC 8707) the server's tokens are asked for, as the
    /// server's protected resource metadata gives it.
    pub resource: String,
    /// The server's URL when the authorization was started.
    #[serde(default)]
    pub server_url: String,
    /// The server's 401 challenge then (`WWW-Authenticate`), which may
    /// name where its resource metadata is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge: Option<String>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "[redacted]"),
            )
            .field("registration", &self.registration)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

/// An authorization waiting for its callback.
#[derive(Clone, Serialize, Deserialize)]
pub struct Pending {
    /// The server.
    pub server: String,
    /// rmcp's record of the request: PKCE verifier, state, expected
    /// issuer and whether `iss` is required, requested scopes.
    pub request: serde_json::Value,
    /// The client the authorization URL was made for.
    pub client: Client,
    /// The scopes asked for.
    pub scopes: Vec<String>,
    /// Who started it.
    pub admin: String,
    /// When it expires, ms since the epoch.
    pub expires_at_ms: i64,
    /// Whether the admin override of a missing PKCE advertisement applied.
    #[serde(default)]
    pub pkce_override: bool,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("server", &self.server)
            .field("client", &self.client)
            .field("scopes", &self.scopes)
            .field("admin", &self.admin)
            .field("expires_at_ms", &self.expires_at_ms)
            .finish_non_exhaustive()
    }
}

/// A record that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The store failed.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The sealed value does not open (tampered, moved, or sealed under a
    /// key no longer in the ring).
    #[error("{key}: the sealed record does not open ({source})")]
    Sealed {
        /// The store key.
        key: String,
        /// Why.
        source: SealError,
    },
    /// Not the record expected there.
    #[error("{key}: not a valid record ({problem})")]
    Malformed {
        /// The store key.
        key: String,
        /// What is wrong (never the content).
        problem: String,
    },
}

/// `value` as JSON, sealed for `key`.
pub fn seal<T: Serialize>(ring: &KeyRing, key: &str, value: &T) -> Vec<u8> {
    let plain = Zeroizing::new(serde_json::to_vec(value).expect("a record serialises"));
    ring.seal(&plain, &binding(key)).into_bytes()
}

/// Opens a value [`seal`]ed for `key`.
pub fn open<T: DeserializeOwned>(
    ring: &KeyRing,
    key: &str,
    bytes: &[u8],
) -> Result<T, RecordError> {
    let text = std::str::from_utf8(bytes).map_err(|_| RecordError::Malformed {
        key: key.into(),
        problem: "not text".into(),
    })?;
    let plain = ring
        .open(text, &binding(key))
        .map_err(|source| RecordError::Sealed {
            key: key.into(),
            source,
        })?;
    serde_json::from_slice(&plain).map_err(|e| RecordError::Malformed {
        key: key.into(),
        problem: e.to_string(),
    })
}

/// The sealed record at `key`, with its revision.
pub async fn get_sealed<S: Store, T: DeserializeOwned>(
    store: &S,
    ring: &KeyRing,
    key: &str,
) -> Result<Option<(T, Revision)>, RecordError> {
    match store.get(key).await? {
        None => Ok(None),
        Some(kv) => Ok(Some((open(ring, key, &kv.value)?, kv.mod_revision))),
    }
}

/// `server`'s status, with its revision; `None` when none was written.
pub async fn get_status<S: Store>(
    store: &S,
    server: &str,
) -> Result<Option<(Status, Revision)>, RecordError> {
    let key = status_key(server);
    match store.get(&key).await? {
        None => Ok(None),
        Some(kv) => serde_json::from_slice(&kv.value)
            .map(|s| Some((s, kv.mod_revision)))
            .map_err(|e| RecordError::Malformed {
                key,
                problem: e.to_string(),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_record_opens_only_at_its_key() {
        let ring = KeyRing::new(&[7; 32], &[]);
        let client = Client {
            issuer: "https://as.example".into(),
            client_id: "c1".into(),
            client_secret: Some("hunter2".into()),
            registration: Registration::Dynamic,
            redirect_uri: "http://127.0.0.1:1/cb".into(),
            metadata: serde_json::json!({}),
            resource: "https://mcp.example/mcp".into(),
            server_url: "https://mcp.example/mcp".into(),
            challenge: None,
        };
        let a = client_key("a", &client.issuer);
        let sealed = seal(&ring, &a, &client);
        assert!(!String::from_utf8_lossy(&sealed).contains("hunter2"));
        let back: Client = open(&ring, &a, &sealed).unwrap();
        assert_eq!(back.client_secret.as_deref(), Some("hunter2"));
        let b = client_key("b", &client.issuer);
        assert!(matches!(
            open::<Client>(&ring, &b, &sealed),
            Err(RecordError::Sealed { .. })
        ));
        assert!(!format!("{back:?}").contains("hunter2"));
        // Keys of different issuers differ; the state is not in its key.
        assert_ne!(a, client_key("a", "https://other.example"));
        assert!(!pending_key("s3cret-state").contains("s3cret"));
    }
}
