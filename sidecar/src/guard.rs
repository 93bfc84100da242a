//! Who may call `SidecarCalls`: the control plane only. At start the
//! sidecar makes a random [`CallToken`] and registers it with the control
//! plane over its authenticated registry connection
//! (`RegisterRequest.call_token`); the control plane sends it back as
//! `authorization: Bearer <token>` on every call. [`CallsGuard`] refuses
//! (UNAUTHENTICATED, counted nowhere else, logged at WARN) any request
//! that carries neither that token nor a client certificate verified
//! against `sidecar.client_ca_file` (mTLS). The token lives in memory and
//! in the sidecar's registration record, never in a log line or an answer.
//! `sidecar.calls_token_file` fixes it instead (for tools that call
//! `SidecarCalls` directly). With [`CallsGuard::admitting`], each request
//! let through admits its connection: the listener closes one that
//! carries none within 30 s (only refused calls, or nothing after its TLS
//! handshake), so strangers cannot hold its places.

use std::sync::Arc;
use switchyard_common::connections::Admissions;
use tonic::{Request, Status};

/// The bearer token of this sidecar's run: 32 random bytes, 64 hex digits.
#[derive(Clone)]
pub struct CallToken(String);

impl std::fmt::Debug for CallToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallToken([redacted])")
    }
}

impl CallToken {
    /// A fresh random token.
    pub fn generate() -> Self {
        let bytes: [u8; 32] = rand::random();
        CallToken(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// A token read from `sidecar.calls_token_file` (checked by the
    /// settings: visible ASCII, at least 16 characters).
    pub fn from_text(token: String) -> Self {
        CallToken(token)
    }

    /// The token's text, as registered and as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The interceptor in front of `SidecarCalls` (see the module docs).
#[derive(Debug, Clone)]
pub struct CallsGuard {
    token: CallToken,
    admissions: Option<Arc<Admissions>>,
}

impl CallsGuard {
    /// Lets through requests with `token` (or a verified client certificate).
    pub fn new(token: CallToken) -> Self {
        CallsGuard {
            token,
            admissions: None,
        }
    }

    /// Also tells `admissions` that the connection of each request let
    /// through carried an admitted one (the listener then stops watching
    /// it).
    #[must_use]
    pub fn admitting(mut self, admissions: Arc<Admissions>) -> Self {
        self.admissions = Some(admissions);
        self
    }

    /// The decision for one request: `Ok` with a client certificate the
    /// TLS layer verified (only a client CA makes rustls ask for one) or
    /// with `authorization: Bearer <the token>`; UNAUTHENTICATED otherwise,
    /// saying what was missing or wrong (never the expected token).
    pub fn check<T>(&self, request: &Request<T>) -> Result<(), Status> {
        if request.peer_certs().is_some_and(|c| !c.is_empty()) {
            return Ok(());
        }
        let Some(value) = request.metadata().get("authorization") else {
            return Err(refuse(
                "no authorization header: calls come from the control plane, which sends the token this sidecar registered",
            ));
        };
        let presented = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim().as_bytes())
            .unwrap_or_default();
        let expected = self.token.0.as_bytes();
        // Compared in time independent of where they differ.
        let same = presented.len() == expected.len()
            && presented
                .iter()
                .zip(expected)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if same {
            Ok(())
        } else {
            Err(refuse(
                "the bearer token is not the one this sidecar registered with the control plane",
            ))
        }
    }
}

fn refuse(why: &str) -> Status {
    tracing::warn!(reason = why, "SidecarCalls request refused");
    Status::unauthenticated(format!("SidecarCalls: {why}"))
}

impl tonic::service::Interceptor for CallsGuard {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.check(&request)?;
        if let (Some(admissions), Some(peer)) = (&self.admissions, request.remote_addr()) {
            admissions.admit(peer);
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_auth(value: &str) -> Request<()> {
        let mut r = Request::new(());
        r.metadata_mut()
            .insert("authorization", value.parse().unwrap());
        r
    }

    #[test]
    fn only_the_registered_token_gets_through() {
        let token = CallToken::generate();
        assert_eq!(token.as_str().len(), 64);
        assert_ne!(token.as_str(), CallToken::generate().as_str());
        assert_eq!(format!("{token:?}"), "CallToken([redacted])");
        let guard = CallsGuard::new(token.clone());
        assert!(
            guard
                .check(&with_auth(&format!("Bearer {}", token.as_str())))
                .is_ok()
        );
        assert!(
            guard
                .check(&with_auth(&format!("bearer {}", token.as_str())))
                .is_ok()
        );
        let e = guard.check(&Request::new(())).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(e.message().contains("no authorization header"), "{e:?}");
        for wrong in [
            "Bearer nope".to_owned(),
            format!("Basic {}", token.as_str()),
            format!("Bearer {}x", token.as_str()),
            format!("Bearer {}", &token.as_str()[..63]),
            "Bearer".to_owned(),
        ] {
            let e = guard.check(&with_auth(&wrong)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{wrong}");
            assert!(!e.message().contains(token.as_str()), "{e:?}");
        }
    }

    #[tokio::test]
    async fn only_a_request_let_through_admits_its_connection() {
        use tonic::service::Interceptor as _;
        let token = CallToken::generate();
        let admissions = Admissions::new(std::time::Duration::from_secs(30));
        let mut guard = CallsGuard::new(token.clone()).admitting(admissions.clone());
        let peer: std::net::SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let _watched = admissions.watch(peer);
        let request = |value: &str| {
            let mut r = with_auth(value);
            r.extensions_mut()
                .insert(tonic::transport::server::TcpConnectInfo {
                    local_addr: None,
                    remote_addr: Some(peer),
                });
            r
        };
        assert!(guard.call(request("Bearer wrong")).is_err());
        assert_eq!(admissions.waiting(), 1);
        assert!(
            guard
                .call(request(&format!("Bearer {}", token.as_str())))
                .is_ok()
        );
        assert_eq!(admissions.waiting(), 0);
    }
}
