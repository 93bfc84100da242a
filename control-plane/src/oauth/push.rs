//! What the sidecars of an `auth = "oauth"` server are told (issue #16
//! item 5): the current access token and its generation, or why there is
//! none, as `ControlMessage.access_token` on their report stream. Sent
//! when the stream opens and whenever the server's tokens or status
//! change in the store (a refresh or an authorization on any replica).
//! Never a refresh token. Also the status the admin API shows
//! ([`OAuth::status_pb`]), which never holds a token either.

use super::OAuth;
use super::records::{self, AuthState, Status, status_key};
use super::tokens::{self, Tokens, tokens_key};
use crate::store::{Store, WatchEvent};
use futures::StreamExt;
use switchyard_proto::v1 as pb;
use tokio::sync::mpsc::Sender;

/// What is known of a server's authorization: its status record (if any)
/// and its tokens (if they open).
#[derive(Debug, Default)]
pub struct Standing {
    /// The status record.
    pub status: Option<Status>,
    /// The tokens.
    pub tokens: Option<Tokens>,
    /// A problem reading them (a record that does not open, no key).
    pub problem: Option<String>,
}

impl Standing {
    /// The state: the status record's, else authorized when tokens are
    /// held.
    pub fn state(&self) -> AuthState {
        match (&self.status, &self.tokens) {
            (Some(s), Some(_)) => s.state,
            (Some(s), None) if s.state != AuthState::Authorized => s.state,
            (_, Some(_)) => AuthState::Authorized,
            _ => AuthState::NeedsAuthorization,
        }
    }
}

impl OAuth {
    /// `server`'s status and tokens as stored now; with `url`, tokens of
    /// another URL of the server are left out (it needs authorization
    /// again).
    pub async fn standing(&self, server: &str, url: Option<&str>) -> Standing {
        let mut s = Standing::default();
        match records::get_status(&self.store, server).await {
            Ok(v) => s.status = v.map(|(v, _)| v),
            Err(e) => s.problem = Some(e.to_string()),
        }
        match self.ring() {
            Err(e) => s.problem = Some(e.to_string()),
            Ok(ring) => match tokens::load(&self.store, ring, server).await {
                Ok(t) => s.tokens = t.map(|(t, _)| t),
                Err(e) => s.problem = Some(e.to_string()),
            },
        }
        if let Some(url) = url
            && s.tokens.as_ref().is_some_and(|t| !t.bound_to(url))
        {
            s.tokens = None;
            s.status = None;
            s.problem = Some(
                "its URL changed since it was authorized: its tokens are not sent to the new one"
                    .into(),
            );
        }
        s
    }

    /// What the sidecars of `server` at `url` hold now.
    pub async fn access_token(&self, server: &str, url: &str) -> pb::AccessToken {
        let s = self.standing(server, Some(url)).await;
        let state = s.state();
        match (state, &s.tokens) {
            (AuthState::Authorized, Some(t)) => pb::AccessToken {
                state: state.as_str().into(),
                access_token: t.access_token.clone(),
                generation: t.generation,
                expires_at_ms: t.expires_at_ms.unwrap_or(0),
                reason: String::new(),
            },
            _ => {
                // What a model may read: our own reasons, never text an
                // authorization server sent (a failed authorization's).
                let why = s
                    .status
                    .as_ref()
                    .map(|st| st.reason.clone())
                    .filter(|r| !r.is_empty() && !r.starts_with("authorization failed"))
                    .or(s.problem.clone());
                let reason = match state {
                    AuthState::NeedsReauthorization => format!(
                        "server {server} needs re-authorization by an admin{}: switchyard servers authorize {server}",
                        why.map(|w| format!(" ({w})")).unwrap_or_default()
                    ),
                    _ => format!(
                        "server {server} needs authorization by an admin: switchyard servers authorize {server}"
                    ),
                };
                pb::AccessToken {
                    state: state.as_str().into(),
                    access_token: String::new(),
                    generation: s.tokens.as_ref().map_or(0, |t| t.generation),
                    expires_at_ms: 0,
                    reason,
                }
            }
        }
    }

    /// The authorization of `server` at `url`, for the admin API.
    pub async fn status_pb(&self, server: &str, url: &str) -> pb::OAuthStatus {
        let s = self.standing(server, Some(url)).await;
        let state = s.state();
        self.metrics.oauth_state(server, Some(state.as_str()));
        let t = s.tokens.as_ref();
        pb::OAuthStatus {
            state: state.as_str().into(),
            reason: s
                .status
                .as_ref()
                .map(|st| st.reason.clone())
                .filter(|r| !r.is_empty())
                .or(s.problem.clone())
                .unwrap_or_default(),
            issuer: t.map(|t| t.issuer.clone()).unwrap_or_default(),
            scopes: t.map(|t| t.scopes.clone()).unwrap_or_default(),
            step_up_scopes: s
                .status
                .as_ref()
                .map(|st| st.scopes.clone())
                .unwrap_or_default(),
            expires_at_ms: t.and_then(|t| t.expires_at_ms).unwrap_or(0),
            authorized_at_ms: t.map_or(0, |t| t.authorized_at_ms),
            refreshed_at_ms: t
                .filter(|t| t.issued_at_ms != t.authorized_at_ms)
                .map_or(0, |t| t.issued_at_ms),
            refreshable: t.is_some_and(|t| t.refresh_token.is_some()),
            generation: t.map_or(0, |t| t.generation),
        }
    }

    /// Sends the access token of `server` at `url` on `tx` now and
    /// whenever it changes, until `tx` closes.
    pub fn push_to(
        self: &std::sync::Arc<Self>,
        server: String,
        url: String,
        tx: Sender<Result<pb::ControlMessage, tonic::Status>>,
    ) {
        let oauth = self.clone();
        tokio::spawn(async move {
            let keys = [tokens_key(&server), status_key(&server)];
            let mut last: Option<pb::AccessToken> = None;
            loop {
                // Watch first, then read: no change is missed between.
                let watch = oauth.store.watch("oauth/", None).await;
                let now = oauth.access_token(&server, &url).await;
                if last.as_ref() != Some(&now) {
                    tracing::info!(%server, state = %now.state, generation = now.generation, "access token pushed");
                    let msg = pb::ControlMessage {
                        message: Some(pb::control_message::Message::AccessToken(now.clone())),
                    };
                    if tx.send(Ok(msg)).await.is_err() {
                        return;
                    }
                    last = Some(now);
                }
                let mut watch = match watch {
                    Ok(w) => w,
                    Err(e) => {
                        tracing::warn!(%server, error = %e, "watching the tokens failed; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => continue,
                            _ = tx.closed() => return,
                        }
                    }
                };
                // Until one of the server's keys changes (or the watch ends).
                loop {
                    tokio::select! {
                        ev = watch.next() => match ev {
                            Some(Ok(WatchEvent::Put(kv))) if keys.contains(&kv.key) => break,
                            Some(Ok(WatchEvent::Delete { key, .. })) if keys.contains(&key) => break,
                            Some(Ok(_)) => {}
                            Some(Err(_)) | None => break,
                        },
                        _ = tx.closed() => return,
                    }
                }
            }
        });
    }
}
