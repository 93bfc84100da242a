//! Stage D, OAuth per server, the sidecar's half: the access token of an
//! `auth = "oauth"` server. The control plane runs the authorization,
//! keeps and refreshes the tokens and pushes short-lived access tokens over
//! the report stream (`ControlMessage.access_token`, handled by
//! [`crate::run::report`]); the sidecar keeps the latest one in memory only
//! ([`Tokens`]) and never sees a refresh token or a client secret.
//!
//! A token is in one of three states ([`TokenState`]): `authorized` (a
//! token to send), or `needs_authorization` / `needs_reauthorization` (no
//! token, and the control plane's reason, e.g. "server github needs
//! authorization by an admin: switchyard servers authorize github"). Until
//! the first one arrives the sidecar has none ([`WAITING`]). Without an
//! authorized token the server is never contacted.
//!
//! The upstream session reads the token when it sends each request and
//! handles the server's refusals (`crate::upstream::auth`: the bearer on
//! every request, the one retry after a 401). A refusal is reported to the
//! control plane through [`Tokens::reject`], at most once per generation
//! and status, and reaches the report stream as a `TokenRejected`
//! ([`Rejections`]); a 401 then waits, at most [`REFRESH_WAIT`], for the
//! token the control plane sends instead ([`Tokens::replaced`]).
//!
//! A token is a secret: it is never logged, never in an error, and the
//! `Debug` of [`AccessToken`] and [`Tokens`] shows `[redacted]` instead.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::server_spec::LiveSecrets;
use switchyard_proto::v1 as pb;
use tokio::sync::{mpsc, watch};

/// How long a request refused with 401 waits for the control plane's next
/// token before it fails (the report stream may be reconnecting meanwhile).
pub const REFRESH_WAIT: Duration = Duration::from_secs(10);

/// The reason of a server that has had no `AccessToken` yet (after its
/// name: "server NAME: waiting for ...").
pub const WAITING: &str = "waiting for the control plane's access token";

/// What [`AccessToken`]'s `Debug` shows instead of the token.
const REDACTED: &str = "[redacted]";

/// `AccessToken.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenState {
    /// `authorized`: a token is set.
    Authorized,
    /// `needs_authorization`: never authorized, or forgotten.
    NeedsAuthorization,
    /// `needs_reauthorization`: the grant was revoked, or a step-up needs
    /// wider scopes.
    NeedsReauthorization,
}

impl TokenState {
    /// The state of `AccessToken.state`; an unknown one reads as
    /// [`TokenState::NeedsAuthorization`] (no token is sent).
    pub fn parse(s: &str) -> TokenState {
        match s {
            "authorized" => TokenState::Authorized,
            "needs_reauthorization" => TokenState::NeedsReauthorization,
            _ => TokenState::NeedsAuthorization,
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenState::Authorized => "authorized",
            TokenState::NeedsAuthorization => "needs_authorization",
            TokenState::NeedsReauthorization => "needs_reauthorization",
        }
    }
}

/// One `AccessToken` from the control plane. Its `Debug` never shows the
/// token.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken {
    /// The state.
    pub state: TokenState,
    /// The token; empty unless `state` is authorized.
    token: String,
    /// Bumped by the control plane for every new token of the server.
    pub generation: u64,
    /// When the token expires, ms since the epoch; 0: not said.
    pub expires_at_ms: i64,
    /// Why there is no token (empty when there is one).
    pub reason: String,
}

impl std::fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessToken")
            .field("state", &self.state)
            .field("token", &if self.token.is_empty() { "" } else { REDACTED })
            .field("generation", &self.generation)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("reason", &self.reason)
            .finish()
    }
}

impl From<pb::AccessToken> for AccessToken {
    fn from(t: pb::AccessToken) -> Self {
        AccessToken {
            state: TokenState::parse(&t.state),
            token: t.access_token,
            generation: t.generation,
            expires_at_ms: t.expires_at_ms,
            reason: t.reason,
        }
    }
}

impl AccessToken {
    /// An authorized token (`expires_at_ms`: ms since the epoch, 0: not
    /// said).
    pub fn authorized(token: impl Into<String>, generation: u64, expires_at_ms: i64) -> Self {
        AccessToken {
            state: TokenState::Authorized,
            token: token.into(),
            generation,
            expires_at_ms,
            reason: String::new(),
        }
    }

    /// No token: `state` (not [`TokenState::Authorized`]) and why.
    pub fn without_token(state: TokenState, generation: u64, reason: impl Into<String>) -> Self {
        AccessToken {
            state,
            token: String::new(),
            generation,
            expires_at_ms: 0,
            reason: reason.into(),
        }
    }

    /// Whether it can be sent: the state is authorized and the token is a
    /// non-empty run of visible ASCII (RFC 6750 §2.1 `b64token` is a
    /// subset), so `Bearer <token>` is a valid header value.
    pub fn is_authorized(&self) -> bool {
        self.state == TokenState::Authorized
            && !self.token.is_empty()
            && self.token.bytes().all(|b| b.is_ascii_graphic())
    }

    /// The token itself, for the `Authorization` header only.
    pub(crate) fn secret(&self) -> &str {
        &self.token
    }
}

/// Which refusals were reported: the last generation per HTTP status.
#[derive(Debug, Default)]
struct Reported {
    unauthorized: Option<u64>,
    forbidden: Option<u64>,
}

struct Shared {
    server: String,
    current: watch::Sender<Option<AccessToken>>,
    rejected: mpsc::UnboundedSender<pb::TokenRejected>,
    reported: Mutex<Reported>,
    refresh_wait: Duration,
    /// The current token and the one before, scrubbed from what the
    /// server answers and writes ([`Tokens::secrets`]).
    secrets: LiveSecrets,
}

/// The access token of one `auth = "oauth"` server, shared by the report
/// stream (which sets it) and every upstream session of the server (which
/// send it). Cheap to clone. Its `Debug` shows the state, never the token.
#[derive(Clone)]
pub struct Tokens {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("server", &self.shared.server)
            .field("current", &*self.shared.current.borrow())
            .finish()
    }
}

/// The refusals [`Tokens::reject`] queued, for the report stream to send
/// as `TokenRejected`. Kept while the stream is down.
#[derive(Debug)]
pub struct Rejections {
    queue: mpsc::UnboundedReceiver<pb::TokenRejected>,
    /// One taken but not sent (the stream broke): sent first next time.
    held: VecDeque<pb::TokenRejected>,
}

impl Rejections {
    /// The next refusal to report; `None` once every [`Tokens`] is gone.
    pub async fn next(&mut self) -> Option<pb::TokenRejected> {
        match self.held.pop_front() {
            Some(r) => Some(r),
            None => self.queue.recv().await,
        }
    }

    /// Gives back a refusal [`Rejections::next`] returned that could not
    /// be sent: it is the next one again.
    pub fn put_back(&mut self, rejected: pb::TokenRejected) {
        self.held.push_front(rejected);
    }
}

impl Tokens {
    /// An empty holder for `server` (no token yet) and the queue of its
    /// refusals. A 401 waits [`REFRESH_WAIT`] for a new token.
    pub fn new(server: &str) -> (Tokens, Rejections) {
        Tokens::with_refresh_wait(server, REFRESH_WAIT)
    }

    /// [`Tokens::new`], a 401 waiting `refresh_wait` for a new token.
    pub fn with_refresh_wait(server: &str, refresh_wait: Duration) -> (Tokens, Rejections) {
        let (tx, queue) = mpsc::unbounded_channel();
        let tokens = Tokens {
            shared: Arc::new(Shared {
                server: server.to_owned(),
                current: watch::Sender::new(None),
                rejected: tx,
                reported: Mutex::new(Reported::default()),
                refresh_wait,
                secrets: LiveSecrets::default(),
            }),
        };
        (
            tokens,
            Rejections {
                queue,
                held: VecDeque::new(),
            },
        )
    }

    /// The server's name.
    pub fn server(&self) -> &str {
        &self.shared.server
    }

    /// How long a request refused with 401 waits for a new token.
    pub fn refresh_wait(&self) -> Duration {
        self.shared.refresh_wait
    }

    /// Takes `token` as the current one (the control plane's word is the
    /// latest, whatever its generation). Logs its state, generation and
    /// expiry, never the token. An authorized token and the one it
    /// replaces become the values [`Tokens::secrets`] scrubs (an answer to
    /// a request sent with the old one may still be on its way); a state
    /// without a token keeps the last ones.
    pub fn set(&self, token: AccessToken) {
        if token.is_authorized() {
            let previous = self.authorized().map(|t| t.token);
            self.shared.secrets.replace(
                [Some(token.token.clone()), previous]
                    .into_iter()
                    .flatten()
                    .collect(),
            );
            tracing::info!(server = %self.shared.server, state = token.state.as_str(), generation = token.generation, expires_at_ms = token.expires_at_ms, "access token received");
        } else {
            tracing::info!(server = %self.shared.server, state = token.state.as_str(), generation = token.generation, reason = %token.reason, "no access token: the server is not contacted");
        }
        self.shared.current.send_replace(Some(token));
    }

    /// The tokens to scrub from what the server sends: the current one and
    /// the one before, kept up to date by [`Tokens::set`]. Added to the
    /// server's own secret values (`UpstreamConfig::secret_values`), so a
    /// server that echoes its bearer token (in an error, a result, a log
    /// message) does not hand it to the engines.
    pub fn secrets(&self) -> LiveSecrets {
        self.shared.secrets.clone()
    }

    /// The current token, if any has arrived (authorized or not).
    pub fn current(&self) -> Option<AccessToken> {
        self.shared.current.borrow().clone()
    }

    /// The current token when it can be sent ([`AccessToken::is_authorized`]).
    pub fn authorized(&self) -> Option<AccessToken> {
        self.shared
            .current
            .borrow()
            .as_ref()
            .filter(|t| t.is_authorized())
            .cloned()
    }

    /// Why there is no token to send, for the model and the admin: the
    /// control plane's reason; before any token arrived, "server NAME:
    /// waiting for the control plane's access token" ([`WAITING`]).
    pub fn reason(&self) -> String {
        let server = &self.shared.server;
        let authorize = || format!("switchyard servers authorize {server}");
        match &*self.shared.current.borrow() {
            None => format!("server {server}: {WAITING}"),
            Some(t) if !t.reason.is_empty() => t.reason.clone(),
            Some(t) => match t.state {
                TokenState::NeedsReauthorization => format!(
                    "server {server} needs to be re-authorized by an admin: {}",
                    authorize()
                ),
                TokenState::NeedsAuthorization => format!(
                    "server {server} needs authorization by an admin: {}",
                    authorize()
                ),
                TokenState::Authorized => format!(
                    "server {server}: the control plane's access token (generation {}) cannot be sent as a bearer token",
                    t.generation
                ),
            },
        }
    }

    /// Follows the token: the value changes with every token the control
    /// plane sends.
    pub fn subscribe(&self) -> watch::Receiver<Option<AccessToken>> {
        self.shared.current.subscribe()
    }

    /// Resolves once there is a token to send (at once if there is one).
    pub async fn until_authorized(&self) {
        let mut rx = self.shared.current.subscribe();
        // The sender lives in `self`: the wait cannot fail.
        let _ = rx
            .wait_for(|t| t.as_ref().is_some_and(AccessToken::is_authorized))
            .await;
    }

    /// The server refused the token of `generation` with `http_status`
    /// (401, or 403 `insufficient_scope`), its `WWW-Authenticate` as sent.
    /// Queues one `TokenRejected` for the report stream, unless the same
    /// refusal of that generation was reported already or the token has
    /// been replaced since (then the control plane has nothing to do).
    /// Returns whether it was queued.
    pub fn reject(
        &self,
        generation: u64,
        http_status: u16,
        www_authenticate: Option<&str>,
    ) -> bool {
        if self
            .shared
            .current
            .borrow()
            .as_ref()
            .is_none_or(|t| t.generation != generation)
        {
            return false;
        }
        {
            let mut reported = self.shared.reported.lock().unwrap();
            let last = match http_status {
                401 => &mut reported.unauthorized,
                _ => &mut reported.forbidden,
            };
            if *last == Some(generation) {
                return false;
            }
            *last = Some(generation);
        }
        tracing::info!(server = %self.shared.server, generation, http_status, "the server refused the access token; telling the control plane");
        let _ = self.shared.rejected.send(pb::TokenRejected {
            generation,
            http_status: u32::from(http_status),
            www_authenticate: www_authenticate.unwrap_or_default().to_owned(),
        });
        true
    }

    /// After the token of `generation` was refused: waits, at most
    /// [`Tokens::refresh_wait`], for the control plane to replace it (a
    /// token of another generation, or a state without one) and returns
    /// the replacement; `None` when none came in time. At once when it
    /// was replaced already.
    pub async fn replaced(&self, generation: u64) -> Option<AccessToken> {
        let mut rx = self.shared.current.subscribe();
        let wait = rx.wait_for(|t| {
            t.as_ref()
                .is_some_and(|t| t.generation != generation || !t.is_authorized())
        });
        match tokio::time::timeout(self.shared.refresh_wait, wait).await {
            Ok(Ok(t)) => t.clone(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "tok-SECRET-1234";

    #[test]
    fn debug_never_shows_the_token() {
        let (tokens, _) = Tokens::new("gh");
        tokens.set(AccessToken::authorized(SECRET, 3, 1_700_000_000_000));
        for text in [
            format!("{tokens:?}"),
            format!("{:?}", tokens.current()),
            format!("{:#?}", tokens.authorized()),
        ] {
            assert!(!text.contains(SECRET), "{text}");
            assert!(text.contains("[redacted]"), "{text}");
            assert!(text.contains("generation: 3"), "{text}");
        }
        let from_wire = AccessToken::from(pb::AccessToken {
            state: "authorized".into(),
            access_token: SECRET.into(),
            generation: 4,
            expires_at_ms: 0,
            reason: String::new(),
        });
        assert!(!format!("{from_wire:?}").contains(SECRET));
        assert_eq!(from_wire.secret(), SECRET);
    }

    #[test]
    fn states_and_reasons() {
        let (tokens, _) = Tokens::new("gh");
        assert_eq!(
            tokens.reason(),
            "server gh: waiting for the control plane's access token"
        );
        assert!(tokens.authorized().is_none());
        tokens.set(AccessToken::without_token(
            TokenState::parse("needs_reauthorization"),
            2,
            "",
        ));
        assert_eq!(
            tokens.reason(),
            "server gh needs to be re-authorized by an admin: switchyard servers authorize gh"
        );
        tokens.set(AccessToken::without_token(
            TokenState::NeedsAuthorization,
            2,
            "server gh needs authorization by an admin: switchyard servers authorize gh",
        ));
        assert_eq!(
            tokens.reason(),
            "server gh needs authorization by an admin: switchyard servers authorize gh"
        );
        // Unknown states send nothing; neither do tokens that cannot be a
        // header value.
        assert_eq!(TokenState::parse("maybe"), TokenState::NeedsAuthorization);
        tokens.set(AccessToken::authorized("two words", 5, 0));
        assert!(tokens.authorized().is_none());
        assert!(
            tokens.reason().contains("generation 5"),
            "{}",
            tokens.reason()
        );
        assert!(!tokens.reason().contains("two words"));
        tokens.set(AccessToken::authorized(SECRET, 6, 0));
        assert_eq!(tokens.authorized().map(|t| t.generation), Some(6));
    }

    #[tokio::test]
    async fn one_report_per_generation_and_status() {
        let (tokens, mut rejections) = Tokens::new("gh");
        assert!(
            !tokens.reject(1, 401, None),
            "no token yet: nothing to report"
        );
        tokens.set(AccessToken::authorized(SECRET, 1, 0));
        assert!(tokens.reject(1, 401, Some("Bearer realm=\"x\"")));
        assert!(!tokens.reject(1, 401, Some("Bearer realm=\"x\"")));
        assert!(tokens.reject(1, 403, Some("Bearer error=\"insufficient_scope\"")));
        assert!(
            !tokens.reject(0, 401, None),
            "an older generation: replaced already"
        );
        tokens.set(AccessToken::authorized(SECRET, 2, 0));
        assert!(tokens.reject(2, 401, None));
        let mut got = Vec::new();
        for _ in 0..3 {
            let r = rejections.next().await.unwrap();
            got.push((r.generation, r.http_status, r.www_authenticate));
        }
        assert_eq!(
            got,
            vec![
                (1, 401, "Bearer realm=\"x\"".to_owned()),
                (1, 403, "Bearer error=\"insufficient_scope\"".to_owned()),
                (2, 401, String::new()),
            ]
        );
        let again = pb::TokenRejected {
            generation: 2,
            http_status: 401,
            www_authenticate: String::new(),
        };
        rejections.put_back(again.clone());
        assert_eq!(rejections.next().await, Some(again));
    }

    #[tokio::test]
    async fn a_refused_token_waits_for_its_replacement_within_the_bound() {
        let (tokens, _r) = Tokens::with_refresh_wait("gh", Duration::from_millis(200));
        tokens.set(AccessToken::authorized(SECRET, 1, 0));
        let started = tokio::time::Instant::now();
        assert_eq!(tokens.replaced(1).await, None);
        assert!(started.elapsed() >= Duration::from_millis(200));
        // Replaced already: at once.
        tokens.set(AccessToken::authorized("next", 2, 0));
        assert_eq!(tokens.replaced(1).await.map(|t| t.generation), Some(2));
        // Replaced while waiting, by a state without a token.
        let waiting = {
            let tokens = tokens.clone();
            tokio::spawn(async move { tokens.replaced(2).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        tokens.set(AccessToken::without_token(
            TokenState::NeedsReauthorization,
            2,
            "revoked",
        ));
        let t = waiting.await.unwrap().expect("replaced");
        assert_eq!(t.state, TokenState::NeedsReauthorization);
    }
}
