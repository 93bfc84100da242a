//! Routing calls to sidecars. A call goes to a live sidecar of its server
//! (round robin over the registered ones); gRPC channels are cached per
//! sidecar address. A sidecar that reported the state `draining` (it is
//! shutting down) gets no new calls; when all of a server's sidecars are
//! draining, a call fails fast with UNAVAILABLE "server unavailable: NAME:
//! draining (...)". A server without a live sidecar, or whose sidecar
//! cannot be reached, fails fast with UNAVAILABLE "server unavailable",
//! naming the server. Calls in flight on this replica are tracked by
//! `(session, call id)` so they can be cancelled, from this replica or any
//! other (see [`crate::state::Change::Cancel`]).

use crate::state::Snapshot;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient;
use switchyard_proto::v1::{SidecarCallRequest, SidecarCallResponse};
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};

/// Routes calls and tracks the ones in flight.
#[derive(Debug, Default)]
pub struct Router {
    channels: Mutex<HashMap<String, SidecarCallsClient<Channel>>>,
    next: AtomicUsize,
    in_flight: Mutex<HashMap<(String, String), CancellationToken>>,
    /// For `https://` call addresses (`[tls] sidecar_ca_file`).
    tls: Option<ClientTlsConfig>,
}

/// `upstream_state` of a sidecar that is shutting down: it finishes its
/// in-flight calls but takes no new ones (`UpstreamStatus.state` in
/// `proto/switchyard/v1/sidecar.proto`).
pub const DRAINING: &str = "draining";

/// "server unavailable", naming the server and why.
pub fn unavailable(server: &str, why: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("server unavailable: {server}: {why}"))
}

impl Router {
    /// A router.
    pub fn new() -> Self {
        Self::default()
    }

    /// A router that calls `https://` sidecars with `tls` (see
    /// [`crate::tls::TlsMaterial::sidecar_client`]); without it, such
    /// sidecars are unavailable.
    pub fn with_tls(tls: Option<ClientTlsConfig>) -> Self {
        Router {
            tls,
            ..Self::default()
        }
    }

    /// The (cached) `SidecarCalls` client of a sidecar's call address,
    /// for calls other than `CallTool` (e.g. `CancelBackgroundCall`).
    /// Errors: a bad address, or TLS that cannot be set up for it.
    pub fn sidecar_client(&self, address: &str) -> Result<SidecarCallsClient<Channel>, String> {
        self.client(address)
    }

    fn client(&self, address: &str) -> Result<SidecarCallsClient<Channel>, String> {
        if let Some(c) = self.channels.lock().unwrap().get(address) {
            return Ok(c.clone());
        }
        let mut endpoint = Endpoint::from_shared(address.to_owned())
            .map_err(|e| format!("bad sidecar address {address:?}: {e}"))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        if address.starts_with("https://") {
            let tls = self.tls.clone().ok_or_else(|| {
                format!(
                    "sidecar address {address} is https:// but [tls] sidecar_ca_file is not set"
                )
            })?;
            endpoint = endpoint
                .tls_config(tls)
                .map_err(|e| format!("TLS for sidecar address {address}: {e}"))?;
        }
        let client = SidecarCallsClient::new(endpoint.connect_lazy())
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024);
        self.channels
            .lock()
            .unwrap()
            .insert(address.to_owned(), client.clone());
        Ok(client)
    }

    /// Sends a call to a live sidecar of `server`.
    pub async fn call(
        &self,
        snap: &Snapshot,
        server: &str,
        request: SidecarCallRequest,
        timeout: Duration,
    ) -> Result<SidecarCallResponse, Status> {
        let all: Vec<_> = snap
            .sidecars
            .get(server)
            .map(|m| m.values().collect())
            .unwrap_or_default();
        if all.is_empty() {
            return Err(unavailable(server, "no live sidecar"));
        }
        // Draining sidecars finish what they have but take nothing new.
        let (draining, all): (Vec<_>, Vec<_>) =
            all.into_iter().partition(|s| s.upstream_state == DRAINING);
        if all.is_empty() {
            let ids: Vec<&str> = draining.iter().map(|s| s.sidecar_id.as_str()).collect();
            return Err(unavailable(
                server,
                format!(
                    "draining (sidecar {} is shutting down; no other live sidecar)",
                    ids.join(", ")
                ),
            ));
        }
        // Prefer sidecars whose upstream is connected; the others may still
        // be reconnecting, so they are used only when none is.
        let connected: Vec<_> = all
            .iter()
            .copied()
            .filter(|s| s.upstream_state == "connected")
            .collect();
        let sidecars = if connected.is_empty() { all } else { connected };
        let pick = sidecars[self.next.fetch_add(1, Ordering::Relaxed) % sidecars.len()];
        let mut client = self
            .client(&pick.call_address)
            .map_err(|e| unavailable(server, e))?;
        let mut req = tonic::Request::new(request);
        req.set_timeout(timeout);
        match client.call_tool(req).await {
            Ok(resp) => Ok(resp.into_inner()),
            Err(status) if is_transport_failure(&status) => {
                self.channels.lock().unwrap().remove(&pick.call_address);
                Err(unavailable(
                    server,
                    format!(
                        "sidecar {} at {} unreachable: {}",
                        pick.sidecar_id,
                        pick.call_address,
                        status.message()
                    ),
                ))
            }
            Err(status) => Err(status),
        }
    }

    /// Tracks a call; the token is cancelled by [`Router::cancel`].
    /// Errors when a call with the same id is already running in the
    /// session (a second one could not be cancelled on its own).
    pub fn track(
        &self,
        session: &str,
        call_id: &str,
    ) -> Result<Option<CallGuard<'_>>, DuplicateCall> {
        if call_id.is_empty() {
            return Ok(None);
        }
        let token = CancellationToken::new();
        let key = (session.to_owned(), call_id.to_owned());
        {
            let mut in_flight = self.in_flight.lock().unwrap();
            if in_flight.contains_key(&key) {
                return Err(DuplicateCall);
            }
            in_flight.insert(key.clone(), token.clone());
        }
        Ok(Some(CallGuard {
            router: self,
            key,
            token,
        }))
    }

    /// Cancels a call running on this replica; false if none.
    pub fn cancel(&self, session: &str, call_id: &str) -> bool {
        match self
            .in_flight
            .lock()
            .unwrap()
            .get(&(session.to_owned(), call_id.to_owned()))
        {
            Some(t) => {
                t.cancel();
                true
            }
            None => false,
        }
    }
}

/// A call with the same id is already running in the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DuplicateCall;

/// Untracks a call when dropped.
#[derive(Debug)]
pub struct CallGuard<'a> {
    router: &'a Router,
    key: (String, String),
    /// Cancelled when someone cancels the call.
    pub token: CancellationToken,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.router.in_flight.lock().unwrap().remove(&self.key);
    }
}

fn is_transport_failure(status: &Status) -> bool {
    // tonic reports connection failures as UNAVAILABLE/UNKNOWN with a
    // transport source and no server-provided message metadata.
    // A connection reset mid-call (the sidecar was killed) surfaces as
    // CANCELLED from h2: the engine's own cancellations never come from
    // this hop (they are handled by the call's token), so it means the
    // sidecar went away.
    status.code() == Code::Cancelled
        || (matches!(status.code(), Code::Unavailable | Code::Unknown)
            && std::error::Error::source(status).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SidecarRecord;

    fn sidecar(id: &str, address: &str, state: &str) -> SidecarRecord {
        SidecarRecord {
            server: "files".into(),
            sidecar_id: id.into(),
            call_address: address.into(),
            version: "0".into(),
            registered_at_ms: 0,
            upstream_state: state.into(),
            last_error: String::new(),
        }
    }

    fn snapshot(sidecars: &[SidecarRecord]) -> Snapshot {
        let mut snap = Snapshot::default();
        snap.sidecars.insert(
            "files".into(),
            sidecars
                .iter()
                .map(|s| (s.sidecar_id.clone(), s.clone()))
                .collect(),
        );
        snap
    }

    fn request() -> SidecarCallRequest {
        SidecarCallRequest {
            params_json: r#"{"name":"read","arguments":{}}"#.into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn a_server_whose_only_sidecar_drains_fails_fast_saying_so() {
        let router = Router::new();
        let snap = snapshot(&[sidecar("a", "http://127.0.0.1:9", DRAINING)]);
        let started = std::time::Instant::now();
        let e = router
            .call(&snap, "files", request(), Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(e.code(), Code::Unavailable);
        assert_eq!(
            e.message(),
            "server unavailable: files: draining (sidecar a is shutting down; no other live sidecar)"
        );
    }

    #[tokio::test]
    async fn new_calls_skip_a_draining_sidecar() {
        let router = Router::new();
        // Nothing listens on either address: the error names the one picked.
        let snap = snapshot(&[
            sidecar("a", "http://127.0.0.1:9", DRAINING),
            sidecar("b", "http://127.0.0.1:7", "connecting"),
        ]);
        for _ in 0..4 {
            let e = router
                .call(&snap, "files", request(), Duration::from_secs(5))
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::Unavailable, "{e:?}");
            assert!(
                e.message()
                    .contains("sidecar b at http://127.0.0.1:7 unreachable"),
                "{e:?}"
            );
        }
    }
}
