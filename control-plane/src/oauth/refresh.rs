//! Keeping authorized servers' tokens fresh (issue #16 item 4), on every
//! replica:
//!
//! - A token is refreshed at 80 % of its lifetime (30 s before expiry
//!   when its issue time is unknown), or at once when a sidecar reports
//!   that the server refused the current generation (a 401), paced per
//!   server ([`ForcedPace`]: a server that refuses every token costs one
//!   token request per 5 minutes, not one per call).
//! - One refresh per server at a time across replicas: the refresh lock
//!   ([`RefreshLock`], a key on a [`LOCK_TTL`] lease) is taken, the tokens
//!   are read again under it (another replica may just have refreshed),
//!   and the rotated pair is written only at the revision read. The
//!   token request is bounded well below the lease, so a replica whose
//!   lock lapsed cannot replay a refresh token another one already used.
//! - A rotated refresh token replaces the old one; an answer without one
//!   keeps it ([`Tokens::rotated`]).
//! - A transient failure is retried with backoff (1 s doubling to 60 s)
//!   while the access token lasts; `invalid_grant` turns the server to
//!   `needs_reauthorization`, in one transaction that checks the rejected
//!   grant is still the stored one.
//! - A 403 `insufficient_scope` a sidecar reports asks an admin for the
//!   union of the granted and the challenged scopes (step-up: the status
//!   records them, and the next authorization asks for them), at most
//!   [`MAX_STEP_UPS`] times for a server, and never when the challenge
//!   asks for nothing new. The server stays authorized: its token still
//!   serves the calls it is good for.

use super::OAuth;
use super::flow::{HTTP_TIMEOUT, MAX_STEP_UPS};
use super::records::{self, AuthState, Client, Status, client_key, status_key};
use super::tokens::{self, RefreshLock, Tokens, still_current};
use super::wire::{self, Captured};
use crate::ControlPlane;
use crate::store::{Compare, Revision, Store, Txn};
use rmcp::transport::auth::AuthError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_common::server_spec::AuthKind;
use switchyard_common::time::now_ms;

/// How a status reason left by failing refreshes starts.
const REFRESH_FAILING: &str = "the access token expired and refreshing it keeps failing";

/// The refresh lock's lease.
pub const LOCK_TTL: Duration = Duration::from_secs(30);

/// How often each replica looks at every oauth server's tokens.
const TICK: Duration = Duration::from_millis(500);

/// Whether `t` is due for a refresh at `now` (ms).
pub fn due(t: &Tokens, now: i64) -> bool {
    let Some(exp) = t.expires_at_ms else {
        return false;
    };
    let life = exp.saturating_sub(t.issued_at_ms);
    let at = if t.issued_at_ms > 0 && life > 0 {
        t.issued_at_ms.saturating_add(life / 5 * 4)
    } else {
        exp.saturating_sub(30_000)
    };
    // Never more often than once a second, whatever the lifetime.
    now >= at.max(t.issued_at_ms.saturating_add(MIN_INTERVAL_MS))
}

/// The least time between two refreshes of a server, ms.
const MIN_INTERVAL_MS: i64 = 1_000;

/// What one look at a server's tokens came to.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Nothing to do (fresh, not authorized, or another replica holds the
    /// lock).
    Idle,
    /// Refreshed.
    Refreshed,
    /// A transient failure: try again later.
    Failed(String),
    /// The server now needs re-authorization.
    NeedsReauthorization,
}

/// Refreshes requested by sidecars (server -> refused generation).
#[derive(Debug, Default)]
pub(crate) struct Forced(Mutex<HashMap<String, u64>>);

/// The least time between two refreshes a server's 401s ask for.
pub const FORCED_MIN: Duration = Duration::from_secs(1);
/// The most it grows to (doubling at each one that follows the last
/// within [`FORCED_CALM`]).
pub const FORCED_MAX: Duration = Duration::from_secs(300);
/// After this long without one, the time between them is
/// [`FORCED_MIN`] again.
pub const FORCED_CALM: Duration = Duration::from_secs(360);

/// Paces the refreshes that 401s ask for, per server: a server that
/// refuses every token, even a fresh one, would otherwise cost one token
/// request per call. The time between two grows from [`FORCED_MIN`] by
/// doubling to [`FORCED_MAX`], and falls back after [`FORCED_CALM`]
/// without one. A request that comes too early waits (the sidecar's call
/// fails if no token comes within its wait, 10 s).
#[derive(Debug, Default)]
pub(crate) struct ForcedPace(HashMap<String, (Duration, Instant)>);

impl ForcedPace {
    /// Whether a forced refresh of `server` may start at `now`.
    pub(crate) fn ready(&self, server: &str, now: Instant) -> bool {
        self.0.get(server).is_none_or(|(gap, at)| now >= *at + *gap)
    }

    /// A forced refresh of `server` starts at `now`; answers the time the
    /// next one must wait.
    pub(crate) fn started(&mut self, server: &str, now: Instant) -> Duration {
        let gap = match self.0.get(server) {
            Some((gap, at)) if now.saturating_duration_since(*at) < FORCED_CALM => {
                (*gap * 2).min(FORCED_MAX)
            }
            _ => FORCED_MIN,
        };
        self.0.insert(server.to_owned(), (gap, now));
        gap
    }
}

/// Runs the refresher of this replica until it stops.
pub fn spawn(cp: Arc<ControlPlane>) {
    tokio::spawn(async move {
        let mut backoff: HashMap<String, (Duration, Instant)> = HashMap::new();
        // One task per server's look, so a slow authorization server delays
        // no other server, and a look that fails (even by a panic) is
        // retried with backoff without stopping the refresher.
        let mut running: HashMap<String, tokio::task::JoinHandle<Outcome>> = HashMap::new();
        let mut pace = ForcedPace::default();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = cp.oauth.wake.notified() => {}
                _ = cp.shutdown.cancelled() => return,
            }
            let finished: Vec<String> = running
                .iter()
                .filter(|(_, h)| h.is_finished())
                .map(|(s, _)| s.clone())
                .collect();
            for server in finished {
                let Some(handle) = running.remove(&server) else {
                    continue;
                };
                let outcome = handle
                    .await
                    .unwrap_or_else(|e| Outcome::Failed(format!("the refresh task failed: {e}")));
                match outcome {
                    Outcome::Failed(reason) => {
                        let wait = backoff
                            .get(&server)
                            .map_or(Duration::from_secs(1), |(d, _)| {
                                (*d * 2).min(Duration::from_secs(60))
                            });
                        tracing::warn!(%server, error = %reason, retry_in_ms = wait.as_millis() as u64, "token refresh failed; the current token is kept while it lasts");
                        backoff.insert(server, (wait, Instant::now() + wait));
                    }
                    _ => {
                        backoff.remove(&server);
                    }
                }
            }
            if cp.oauth.ring.is_none() {
                continue;
            }
            let snap = cp.state.snapshot();
            let servers: Vec<(String, String)> = snap
                .servers
                .values()
                .filter(|r| r.spec.auth_kind() == AuthKind::OAuth)
                // Its URL opened; one that does not open is in its status.
                .filter_map(|r| Some((r.spec.name.clone(), cp.oauth.server_url(&r.spec).ok()?)))
                .collect();
            for (server, url) in servers {
                if running.contains_key(&server) {
                    continue;
                }
                // A request that comes too early stays until it may start.
                let now = Instant::now();
                let forced = pace
                    .ready(&server, now)
                    .then(|| {
                        cp.oauth
                            .forced
                            .0
                            .lock()
                            .expect("not poisoned")
                            .remove(&server)
                    })
                    .flatten();
                if forced.is_some() {
                    let next = pace.started(&server, now);
                    tracing::info!(%server, next_after_ms = next.as_millis() as u64, "refreshing the token the server refused; another refresh for a refusal waits at least next_after_ms");
                }
                if forced.is_none()
                    && backoff
                        .get(&server)
                        .is_some_and(|(_, at)| Instant::now() < *at)
                {
                    continue;
                }
                let oauth = cp.oauth.clone();
                let name = server.clone();
                running.insert(
                    server,
                    tokio::spawn(async move { oauth.refresh_once(&name, &url, forced).await }),
                );
            }
        }
    });
}

impl OAuth {
    /// A sidecar of `server` reports that the server refused the token of
    /// `generation` with `http_status` (401, or 403 with
    /// `www_authenticate` saying `insufficient_scope`).
    pub async fn token_rejected(
        &self,
        server: &str,
        generation: u64,
        http_status: u32,
        www_authenticate: &str,
    ) {
        match http_status {
            401 => {
                tracing::info!(%server, generation, "the server refused the access token; refreshing");
                self.forced
                    .0
                    .lock()
                    .expect("not poisoned")
                    .insert(server.to_owned(), generation);
                self.wake.notify_one();
            }
            403 => {
                if let Err(e) = self.step_up(server, generation, www_authenticate).await {
                    tracing::warn!(%server, error = %e, "step-up not recorded");
                }
            }
            other => {
                tracing::debug!(%server, status = other, "token report ignored");
            }
        }
    }

    /// A 403 `insufficient_scope` on the token of `generation`.
    async fn step_up(
        &self,
        server: &str,
        generation: u64,
        www_authenticate: &str,
    ) -> Result<(), super::flow::OAuthError> {
        let ring = self.ring()?;
        let Some((t, rev)) = tokens::load(&self.store, ring, server).await? else {
            return Ok(());
        };
        // Relative URLs of the challenge are the server's.
        let Ok(base) = url::Url::parse(&t.resource) else {
            return Ok(());
        };
        let params = rmcp::transport::auth::WWWAuthenticateParams::parse(www_authenticate, &base);
        if !params.is_insufficient_scope() {
            return Ok(());
        }
        if t.generation != generation {
            return Ok(());
        }
        let status = records::get_status(&self.store, server)
            .await?
            .map(|(s, _)| s);
        let step_ups = status.as_ref().map_or(0, |s| s.step_ups);
        let mut union = t.scopes.clone();
        for s in params.scope.as_deref().unwrap_or("").split(' ') {
            if !s.is_empty() && !union.iter().any(|u| u == s) {
                union.push(s.to_owned());
            }
        }
        if union.len() == t.scopes.len() {
            tracing::warn!(%server, scopes = ?t.scopes, "the server asks for scopes it was granted (insufficient_scope): not asking for re-authorization again");
            return Ok(());
        }
        if step_ups >= MAX_STEP_UPS {
            tracing::warn!(%server, step_ups, "the server keeps asking for more scopes: no further step-up");
            return Ok(());
        }
        let wanted = union[t.scopes.len()..].join(" ");
        // The token still serves every call it is good for; the calls that
        // need more fail (in the sidecar) until an admin authorizes again.
        let new = Status {
            state: AuthState::Authorized,
            reason: format!(
                "some calls need more scopes ({wanted}): an admin must authorize the server again (switchyard servers authorize {server})"
            ),
            scopes: union,
            generation,
            at_ms: now_ms(),
            step_ups: step_ups + 1,
        };
        if self.mark(server, &new, rev).await? {
            self.metrics.oauth_event(server, "step_up");
            self.audit.record(serde_json::json!({
                "kind": "oauth.step_up",
                "server": server,
                "scopes": new.scopes,
                "stepUps": new.step_ups,
            }));
        }
        Ok(())
    }

    /// Writes `status` if `server`'s tokens are still at revision `rev`.
    async fn mark(
        &self,
        server: &str,
        status: &Status,
        rev: Revision,
    ) -> Result<bool, super::flow::OAuthError> {
        let r = self
            .store
            .txn(
                Txn::new()
                    .when([Compare::mod_revision(tokens::tokens_key(server), rev)])
                    .and_then([status.put(server)]),
            )
            .await?;
        if r.succeeded {
            tracing::warn!(%server, state = status.state.as_str(), reason = %status.reason, "authorization status changed");
        }
        Ok(r.succeeded)
    }

    /// One look at `server`'s tokens; `forced`: a sidecar reported this
    /// generation refused.
    async fn refresh_once(&self, server: &str, url: &str, forced: Option<u64>) -> Outcome {
        let outcome = match self.try_refresh(server, url, forced).await {
            Ok(o) => o,
            Err(e) => Outcome::Failed(e.to_string()),
        };
        if let Outcome::Failed(reason) = &outcome {
            self.note_failure(server, reason).await;
        }
        outcome
    }

    /// Once the access token has expired, a refresh that keeps failing
    /// shows in the status's reason (the state stays `authorized`: the
    /// next attempt may work); the next refresh clears it.
    async fn note_failure(&self, server: &str, reason: &str) {
        let Ok(ring) = self.ring() else { return };
        let Ok(Some((t, _))) = tokens::load(&self.store, ring, server).await else {
            return;
        };
        if t.expires_at_ms.is_none_or(|e| e > now_ms()) {
            return;
        }
        let Ok(Some((mut st, rev))) = records::get_status(&self.store, server).await else {
            return;
        };
        let text = format!("{REFRESH_FAILING}: {reason}");
        if st.state != AuthState::Authorized || st.reason == text {
            return;
        }
        st.reason = text;
        st.at_ms = now_ms();
        let _ = self
            .store
            .txn(
                Txn::new()
                    .when([Compare::mod_revision(status_key(server), rev)])
                    .and_then([st.put(server)]),
            )
            .await;
    }

    async fn try_refresh(
        &self,
        server: &str,
        url: &str,
        forced: Option<u64>,
    ) -> Result<Outcome, super::flow::OAuthError> {
        let ring = self.ring()?;
        // Tokens of another URL of the server are not refreshed (nor sent).
        let tokens = tokens::load(&self.store, ring, server)
            .await?
            .filter(|(t, _)| t.bound_to(url));
        let status = records::get_status(&self.store, server)
            .await?
            .map(|(s, _)| s);
        let standing = super::push::Standing {
            status,
            tokens: tokens.map(|(t, _)| t),
            problem: None,
        };
        let state = standing.state();
        self.metrics.oauth_state(server, Some(state.as_str()));
        let (Some(t), AuthState::Authorized) = (standing.tokens, state) else {
            return Ok(Outcome::Idle);
        };
        let wanted = |t: &Tokens| due(t, now_ms()) || forced == Some(t.generation);
        if !wanted(&t) {
            return Ok(Outcome::Idle);
        }
        let Some(lock) = RefreshLock::try_take(&self.store, server, &self.holder, LOCK_TTL).await?
        else {
            return Ok(Outcome::Idle);
        };
        let outcome = self.refresh_locked(ring, server, &wanted).await;
        if let Err(e) = lock.release(&self.store).await {
            tracing::debug!(%server, error = %e, "refresh lock not released (its lease ends it)");
        }
        outcome
    }

    async fn refresh_locked(
        &self,
        ring: &super::KeyRing,
        server: &str,
        wanted: &(dyn Fn(&Tokens) -> bool + Sync),
    ) -> Result<Outcome, super::flow::OAuthError> {
        // Read again under the lock: another replica may have refreshed.
        let Some((t, rev)) = tokens::load(&self.store, ring, server).await? else {
            return Ok(Outcome::Idle);
        };
        if !wanted(&t) {
            return Ok(Outcome::Idle);
        }
        let reauthorize = |reason: String| Status {
            state: AuthState::NeedsReauthorization,
            reason,
            scopes: Vec::new(),
            generation: t.generation,
            at_ms: now_ms(),
            step_ups: 0,
        };
        if t.refresh_token.is_none() {
            if t.expires_at_ms.is_some_and(|e| e <= now_ms()) || !due(&t, now_ms()) {
                let s = reauthorize(
                    "the access token expired or was refused, and the authorization server issued no refresh token".into(),
                );
                if self.mark(server, &s, rev).await? {
                    self.metrics.oauth_event(server, "reauthorization_needed");
                    return Ok(Outcome::NeedsReauthorization);
                }
            }
            return Ok(Outcome::Idle);
        }
        let Some((client, _)) =
            records::get_sealed::<_, Client>(&self.store, ring, &client_key(server, &t.issuer))
                .await?
        else {
            let s = reauthorize(format!("no client is registered at {} any more", t.issuer));
            self.mark(server, &s, rev).await?;
            return Ok(Outcome::NeedsReauthorization);
        };
        let mut manager = match wire::manager_for(&client, self.private_addresses).await {
            Ok(m) => m,
            Err(e) => return Ok(Outcome::Failed(wire::describe(&e))),
        };
        let captured = Captured::holding(&t, &client.client_id);
        manager.set_credential_store(captured.clone());
        let answer = tokio::time::timeout(HTTP_TIMEOUT, manager.refresh_token()).await;
        match answer {
            Ok(Ok(_)) => {
                let Some(issued) = captured.saved() else {
                    return Ok(Outcome::Failed(
                        "the token endpoint answered no access token".into(),
                    ));
                };
                let new = t.rotated(issued, now_ms());
                // A reason left by failed refreshes goes with them.
                let mut also = Vec::new();
                if let Some((mut st, _)) = records::get_status(&self.store, server).await?
                    && st.reason.starts_with(REFRESH_FAILING)
                {
                    st.reason.clear();
                    also.push(st.put(server));
                }
                match tokens::save_with(&self.store, ring, server, &new, Some(rev), also).await? {
                    Some(_) => {
                        self.metrics.oauth_refresh(server, "ok");
                        tracing::info!(%server, generation = new.generation, rotated = new.refresh_token != t.refresh_token, "tokens refreshed");
                        Ok(Outcome::Refreshed)
                    }
                    None => {
                        tracing::warn!(%server, "refreshed tokens not saved: the record changed meanwhile");
                        Ok(Outcome::Idle)
                    }
                }
            }
            Ok(Err(AuthError::TokenRefreshRejected(_))) => {
                self.metrics.oauth_refresh(server, "rejected");
                let stored = tokens::load(&self.store, ring, server).await?;
                if still_current(stored.as_ref().map(|(s, _)| s), &t) {
                    let s = reauthorize(
                        "the authorization server rejected the refresh token (invalid_grant)"
                            .into(),
                    );
                    if self.mark(server, &s, rev).await? {
                        self.metrics.oauth_event(server, "reauthorization_needed");
                        self.audit.record(serde_json::json!({
                            "kind": "oauth.reauthorization_needed",
                            "server": server,
                            "reason": s.reason,
                        }));
                    }
                    return Ok(Outcome::NeedsReauthorization);
                }
                Ok(Outcome::Idle)
            }
            Ok(Err(e)) => {
                self.metrics.oauth_refresh(server, "failed");
                let hidden = [
                    t.refresh_token.as_deref().unwrap_or_default(),
                    t.access_token.as_str(),
                    client.client_secret.as_deref().unwrap_or_default(),
                ];
                Ok(Outcome::Failed(wire::describe_hiding(&e, &hidden)))
            }
            Err(_) => {
                self.metrics.oauth_refresh(server, "failed");
                Ok(Outcome::Failed(format!(
                    "the token endpoint did not answer within {} s",
                    HTTP_TIMEOUT.as_secs()
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(issued: i64, expires: Option<i64>) -> Tokens {
        Tokens {
            access_token: "a".into(),
            refresh_token: Some("r".into()),
            expires_at_ms: expires,
            scopes: vec![],
            issuer: "https://as.example".into(),
            resource: "https://mcp.example/mcp".into(),
            generation: 1,
            client_id: "c".into(),
            issued_at_ms: issued,
            authorized_at_ms: issued,
            server_url: "https://mcp.example/mcp".into(),
        }
    }

    #[test]
    fn refreshes_for_refusals_are_paced_per_server_and_the_pace_calms_down() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut pace = ForcedPace::default();
        assert!(pace.ready("a", t0));
        assert_eq!(pace.started("a", t0), FORCED_MIN);
        assert!(!pace.ready("a", t0 + Duration::from_millis(999)));
        // Another server is not held back.
        assert!(pace.ready("b", t0));
        // Each one soon after the last doubles the wait, up to the most.
        let mut at = t0 + s(1);
        let mut gaps = Vec::new();
        for _ in 0..10 {
            assert!(pace.ready("a", at));
            let gap = pace.started("a", at);
            gaps.push(gap.as_secs());
            at += gap;
        }
        assert_eq!(gaps, [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        // A server that refuses every token: one refresh per 5 minutes.
        assert!(!pace.ready("a", at - s(1)));
        // Calm for long enough: back to the least.
        assert_eq!(pace.started("a", at + FORCED_CALM), FORCED_MIN);
    }

    #[test]
    fn refreshes_are_due_at_80_percent_never_twice_a_second_and_never_overflow() {
        let t = tokens(10_000, Some(20_000));
        assert!(!due(&t, 17_999));
        assert!(due(&t, 18_000));
        // A lifetime of 0 or less: not before a second has passed.
        assert!(!due(&tokens(10_000, Some(10_000)), 10_500));
        assert!(due(&tokens(10_000, Some(10_000)), 11_000));
        // Extreme values neither panic nor wrap.
        assert!(!due(&tokens(10_000, Some(i64::MAX)), 20_000));
        assert!(due(&tokens(i64::MAX, Some(i64::MIN)), i64::MAX));
        assert!(!due(&tokens(10_000, None), i64::MAX));
        // What the token endpoint says is bounded before it gets here.
        assert_eq!(tokens::expiry(Some(0), 5), None);
        assert_eq!(
            tokens::expiry(Some(u64::MAX), 5),
            Some(5 + tokens::MAX_LIFETIME_SEC as i64 * 1000)
        );
    }
}
