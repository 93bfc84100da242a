//! An OAuth server's tokens in the store, and the lock that lets one
//! replica at a time refresh them (issue #16 items 3 and 4; the design is
//! in `../shared/research/oauth.md` §3.1 and §5).
//!
//! - `oauth/tokens/<server>`: the access and refresh tokens, their expiry,
//!   scopes and generation, sealed as one value with the key ring
//!   ([`KeyRing`]: AES-256-GCM, key ids), so a rotated pair is written in
//!   one compare-and-swap. The record is bound (associated data) to its
//!   store key and its authorization server's issuer: a value copied to
//!   another server's key, or relabelled with another issuer, does not
//!   open. Only the issuer is in the clear, to build that binding.
//! - `oauth/refresh/<server>`: the refresh lock, a key on a store lease
//!   written only if absent ([`RefreshLock::try_take`]); a replica that dies
//!   mid-refresh loses it when its lease expires.
//!
//! Rules the refresher builds on: a save names the revision it read
//! ([`save`]), so a replica that lost a race writes nothing; a response
//! without a refresh token keeps the stored one ([`Tokens::rotated`]); a
//! rejected grant (`invalid_grant`) only counts while it is still the
//! stored one ([`still_current`]). Nothing here logs or prints a token:
//! [`Tokens`]' `Debug` shows none.

use super::keyring::{KeyRing, SealError};
use crate::store::{Compare, LeaseId, Op, Revision, Store, StoreError, Txn};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use zeroize::Zeroizing;

/// The store key of `server`'s tokens.
pub fn tokens_key(server: &str) -> String {
    format!("oauth/tokens/{server}")
}

/// The store key of `server`'s refresh lock.
pub fn lock_key(server: &str) -> String {
    format!("oauth/refresh/{server}")
}

/// What the seal of `server`'s tokens is bound to.
fn binding(server: &str, issuer: &str) -> String {
    format!("switchyard/oauth/tokens/v1|{}|{issuer}", tokens_key(server))
}

/// One server's tokens.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    /// The access token, sent as `Authorization: Bearer`.
    pub access_token: String,
    /// The refresh token, if the authorization server issued one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token expires, ms since the epoch; `None`: the
    /// server did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// The scopes granted.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The authorization server's issuer that issued them.
    pub issuer: String,
    /// The `resource` (RFC 8707) they were requested for.
    pub resource: String,
    /// Bumped by every save of new tokens: sidecars are told which
    /// generation they hold, and a rejected grant names the one it was.
    pub generation: u64,
    /// The client they were issued to (a refresh must come from it).
    #[serde(default)]
    pub client_id: String,
    /// When this access token was issued, ms since the epoch: with
    /// `expires_at_ms`, its lifetime, which the refresher refreshes at
    /// 80 % of.
    #[serde(default)]
    pub issued_at_ms: i64,
    /// When an admin last authorized the server, ms since the epoch.
    #[serde(default)]
    pub authorized_at_ms: i64,
    /// The server's URL when it was authorized: tokens are used only while
    /// the server keeps it ([`Tokens::bound_to`]).
    #[serde(default)]
    pub server_url: String,
}

impl Tokens {
    /// Whether these tokens are for a server at `url` (the URL it was
    /// authorized at): a server whose URL changed needs authorization
    /// again, and its old tokens are never sent to the new URL.
    pub fn bound_to(&self, url: &str) -> bool {
        self.server_url == url
    }
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("access_token", &"[redacted]")
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "[redacted]"),
            )
            .field("expires_at_ms", &self.expires_at_ms)
            .field("scopes", &self.scopes)
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("generation", &self.generation)
            .field("client_id", &self.client_id)
            .field("issued_at_ms", &self.issued_at_ms)
            .finish()
    }
}

/// A token endpoint's answer, as far as the store needs it. `Debug` shows
/// no token.
#[derive(Clone, PartialEq, Eq)]
pub struct Issued {
    /// `access_token`.
    pub access_token: String,
    /// `refresh_token`, if any.
    pub refresh_token: Option<String>,
    /// `expires_in`, seconds.
    pub expires_in: Option<u64>,
    /// `scope`, split; `None`: not in the answer.
    pub scopes: Option<Vec<String>>,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("refresh_token", &self.refresh_token.is_some())
            .field("expires_in", &self.expires_in)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl Tokens {
    /// The tokens after a refresh answered `issued` at `now_ms`: the new
    /// access token; the new refresh token, or the old one when the answer
    /// has none (RFC 6749 §6); the answer's scopes, or the old ones; the
    /// next generation.
    pub fn rotated(&self, issued: Issued, now_ms: i64) -> Tokens {
        Tokens {
            access_token: issued.access_token,
            refresh_token: issued.refresh_token.or_else(|| self.refresh_token.clone()),
            expires_at_ms: expiry(issued.expires_in, now_ms),
            scopes: issued.scopes.unwrap_or_else(|| self.scopes.clone()),
            issuer: self.issuer.clone(),
            resource: self.resource.clone(),
            generation: self.generation + 1,
            client_id: self.client_id.clone(),
            issued_at_ms: now_ms,
            authorized_at_ms: self.authorized_at_ms,
            server_url: self.server_url.clone(),
        }
    }

    /// Whether the access token expires within `margin` of `now_ms` (a
    /// token without an expiry never does).
    pub fn expires_within(&self, margin: Duration, now_ms: i64) -> bool {
        self.expires_at_ms
            .is_some_and(|at| at - now_ms <= margin.as_millis() as i64)
    }
}

/// `expires_in` seconds after `now_ms`, in ms since the epoch.
pub fn expiry(expires_in: Option<u64>, now_ms: i64) -> Option<i64> {
    // 0 says nothing usable (refreshed on the server's 401 instead); more
    // than a year is taken as a year.
    expires_in.filter(|s| *s > 0).map(|s| {
        now_ms.saturating_add(
            i64::try_from(s.min(MAX_LIFETIME_SEC).saturating_mul(1000)).unwrap_or(i64::MAX),
        )
    })
}

/// The longest access-token lifetime taken from an `expires_in`: a year.
pub const MAX_LIFETIME_SEC: u64 = 365 * 24 * 3600;

/// The stored form: the issuer in the clear (for the binding), the rest
/// sealed.
#[derive(Serialize, Deserialize)]
struct Stored {
    issuer: String,
    sealed: String,
}

/// Why tokens could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The store failed.
    #[error("the store: {0}")]
    Store(#[from] StoreError),
    /// The record does not open: tampered, copied from another server,
    /// relabelled, or sealed under a key that is no longer in the ring.
    #[error("{key}: the sealed tokens do not open ({source}); re-authorize the server")]
    Sealed {
        /// The store key.
        key: String,
        /// Why.
        source: SealError,
    },
    /// The record is not in this format.
    #[error("{key}: not a token record ({problem}); re-authorize the server")]
    Malformed {
        /// The store key.
        key: String,
        /// What is wrong (never the content).
        problem: String,
    },
}

/// Reads `server`'s tokens with the revision they were read at (for
/// [`save`]); `None`: none stored.
pub async fn load<S: Store>(
    store: &S,
    ring: &KeyRing,
    server: &str,
) -> Result<Option<(Tokens, Revision)>, TokenError> {
    let key = tokens_key(server);
    let Some(kv) = store.get(&key).await? else {
        return Ok(None);
    };
    let malformed = |problem: String| TokenError::Malformed {
        key: key.clone(),
        problem,
    };
    let stored: Stored =
        serde_json::from_slice(&kv.value).map_err(|e| malformed(format!("not JSON: {e}")))?;
    let plain = ring
        .open(&stored.sealed, &binding(server, &stored.issuer))
        .map_err(|source| TokenError::Sealed {
            key: key.clone(),
            source,
        })?;
    let tokens: Tokens = serde_json::from_slice(&plain)
        .map_err(|e| malformed(format!("the sealed value is not a token record: {e}")))?;
    if tokens.issuer != stored.issuer {
        return Err(malformed("its issuer does not match the sealed one".into()));
    }
    Ok(Some((tokens, kv.mod_revision)))
}

/// Writes `server`'s tokens if the record is still at `read` (`None`: if
/// there is none). Returns the new revision, or `None` when another write
/// came first (nothing was written: reload and decide again).
pub async fn save<S: Store>(
    store: &S,
    ring: &KeyRing,
    server: &str,
    tokens: &Tokens,
    read: Option<Revision>,
) -> Result<Option<Revision>, TokenError> {
    save_with(store, ring, server, tokens, read, Vec::new()).await
}

/// [`save`], with `also` written in the same transaction (a status record
/// that must change with the tokens).
pub async fn save_with<S: Store>(
    store: &S,
    ring: &KeyRing,
    server: &str,
    tokens: &Tokens,
    read: Option<Revision>,
    also: Vec<Op>,
) -> Result<Option<Revision>, TokenError> {
    let key = tokens_key(server);
    let plain = Zeroizing::new(serde_json::to_vec(tokens).expect("tokens serialise"));
    let stored = Stored {
        issuer: tokens.issuer.clone(),
        sealed: ring.seal(&plain, &binding(server, &tokens.issuer)),
    };
    let value = serde_json::to_vec(&stored).expect("a stored record serialises");
    let guard = match read {
        Some(rev) => Compare::mod_revision(&key, rev),
        None => Compare::absent(&key),
    };
    let mut ops = vec![Op::put(&key, value)];
    ops.extend(also);
    let r = store.txn(Txn::new().when([guard]).and_then(ops)).await?;
    Ok(r.succeeded.then_some(r.revision))
}

/// Whether `rejected` (the tokens a refresh was refused for) are still
/// the stored ones: only then does `invalid_grant` mean the server needs
/// re-authorization (another replica may have refreshed meanwhile, with a
/// newer grant).
pub fn still_current(stored: Option<&Tokens>, rejected: &Tokens) -> bool {
    stored.is_some_and(|s| {
        s.generation == rejected.generation && s.refresh_token == rejected.refresh_token
    })
}

/// The refresh lock of one server, held by this replica until
/// [`RefreshLock::release`] or its lease expires.
#[derive(Debug)]
pub struct RefreshLock {
    key: String,
    lease: LeaseId,
}

impl RefreshLock {
    /// Takes `server`'s refresh lock for `holder` (a replica's name, for
    /// whoever looks) for at most `ttl`; `None`: another holds it.
    pub async fn try_take<S: Store>(
        store: &S,
        server: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<RefreshLock>, StoreError> {
        let key = lock_key(server);
        let lease = store.grant_lease(ttl).await?;
        let r = store
            .txn(
                Txn::new()
                    .when([Compare::absent(&key)])
                    .and_then([Op::put_with_lease(&key, holder.as_bytes().to_vec(), lease)]),
            )
            .await;
        match r {
            Ok(r) if r.succeeded => Ok(Some(RefreshLock { key, lease })),
            other => {
                // Not taken: the lease is of no use.
                let _ = store.revoke(lease).await;
                other.map(|_| None)
            }
        }
    }

    /// The store key it holds.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Lets go of the lock (its key is deleted with its lease).
    pub async fn release<S: Store>(self, store: &S) -> Result<(), StoreError> {
        match store.revoke(self.lease).await {
            Err(StoreError::LeaseNotFound { .. }) | Ok(()) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(generation: u64, refresh: Option<&str>) -> Tokens {
        Tokens {
            access_token: format!("at-{generation}"),
            refresh_token: refresh.map(str::to_owned),
            expires_at_ms: Some(1_000),
            scopes: vec!["read".into()],
            issuer: "https://as.example".into(),
            resource: "https://mcp.example/mcp".into(),
            generation,
            client_id: "c".into(),
            issued_at_ms: 0,
            authorized_at_ms: 0,
            server_url: "https://mcp.example/mcp".into(),
        }
    }

    #[test]
    fn a_rotation_keeps_the_refresh_token_when_none_is_issued() {
        let old = tokens(3, Some("rt-3"));
        let issued = |refresh: Option<&str>, scopes: Option<Vec<String>>| Issued {
            access_token: "at-new".into(),
            refresh_token: refresh.map(str::to_owned),
            expires_in: Some(60),
            scopes,
        };
        let kept = old.rotated(issued(None, None), 10_000);
        assert_eq!(kept.refresh_token.as_deref(), Some("rt-3"));
        assert_eq!(kept.access_token, "at-new");
        assert_eq!(kept.expires_at_ms, Some(70_000));
        assert_eq!(kept.scopes, ["read"]);
        assert_eq!(kept.generation, 4);
        let new = old.rotated(
            issued(Some("rt-4"), Some(vec!["read".into(), "write".into()])),
            0,
        );
        assert_eq!(new.refresh_token.as_deref(), Some("rt-4"));
        assert_eq!(new.scopes, ["read", "write"]);
        assert!(new.expires_within(Duration::from_secs(60), 0));
        assert!(!new.expires_within(Duration::from_secs(59), 0));
    }

    #[test]
    fn a_rejected_grant_counts_only_while_it_is_stored() {
        let stored = tokens(5, Some("rt-5"));
        assert!(still_current(Some(&stored), &stored.clone()));
        assert!(!still_current(Some(&stored), &tokens(4, Some("rt-4"))));
        assert!(!still_current(None, &stored));
    }

    #[test]
    fn debug_shows_no_token() {
        let t = tokens(1, Some("rt-secret"));
        let d = format!("{t:?}");
        assert!(!d.contains("at-1") && !d.contains("rt-secret"), "{d}");
    }
}
