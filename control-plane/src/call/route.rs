//! Routing calls to sidecars. A call goes to a live sidecar of its server
//! (round robin over the registered ones). Calls travel on one long-lived
//! `SidecarCalls.CallStream` per sidecar address, multiplexed by
//! [`switchyard_proto::calls::Mux`]; a broken stream fails the calls on it
//! (UNAVAILABLE, naming the sidecar) and the next call opens a new one. A
//! sidecar without `CallStream` (an older build, UNIMPLEMENTED) gets one
//! `CallTool` RPC per call instead, until a different sidecar registers at
//! that address (an upgrade in place), when the next call tries
//! `CallStream` again. An address that answers UNIMPLEMENTED to `CallTool`
//! too (not a sidecar, or an incompatible one) never ran the call, which
//! goes to the server's next sidecar, as for one that cannot be reached.
//! gRPC channels are cached per sidecar address, with the client that
//! sends the call token of the sidecar registered there, and
//! [`Router::prune`] drops what is cached for addresses that no live
//! sidecar has any more. A sidecar that reported the state `draining` (it is
//! shutting down) gets no new calls; when all of a server's sidecars are
//! draining, a call fails fast with UNAVAILABLE "server unavailable: NAME:
//! draining (...)". A server without a live sidecar, or whose sidecar
//! cannot be reached, fails fast with UNAVAILABLE "server unavailable",
//! naming the server. Calls in flight on this replica are tracked by
//! `(scope, call id)` so they can be cancelled, from this replica or any
//! other (see [`crate::state::Change::Cancel`]); the scope is the call's
//! session, or for a call without one its caller ([`call_scope`]).

use super::error::{CallError, Kind};
use crate::state::Snapshot;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::tls::BearerToken;
use switchyard_proto::calls::{CallError as MuxError, Mux, Observer, SidecarCallFrames};
use switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient;
use switchyard_proto::v1::{SidecarCallRequest, SidecarCallResponse};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};

/// A `SidecarCalls` client of one sidecar, sending the call token the
/// sidecar registered (`authorization: Bearer`, checked by the sidecar).
pub type SidecarClient = SidecarCallsClient<InterceptedService<Channel, BearerToken>>;

/// Routes calls and tracks the ones in flight.
#[derive(Debug, Default)]
pub struct Router {
    /// The gRPC channel of each sidecar address, with the client that
    /// sends the call token of the sidecar last seen there.
    channels: Mutex<HashMap<String, Cached>>,
    /// The call stream of each sidecar address.
    streams: Mutex<HashMap<String, Link>>,
    /// Serialises opening the call stream of each address, so concurrent
    /// first calls share one; other addresses never wait for it.
    opening: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    next: AtomicUsize,
    in_flight: Mutex<HashMap<(String, String), CancellationToken>>,
    /// For `https://` call addresses (`[tls] sidecar_ca_file`).
    tls: Option<ClientTlsConfig>,
}

/// What is cached for one sidecar address: its channel, and its
/// `SidecarCalls` client with the call token it sends (the token's header
/// is built once per sidecar, not once per call).
#[derive(Debug)]
struct Cached {
    channel: Channel,
    client: Option<(String, SidecarClient)>,
}

/// How calls reach one sidecar address.
#[derive(Debug, Clone)]
enum Link {
    /// On its call stream.
    Stream(Arc<Mux<SidecarCallFrames>>),
    /// One `CallTool` RPC per call: the sidecar with this id has no
    /// `CallStream`.
    Unary { sidecar_id: String },
}

/// `upstream_state` of a sidecar that is shutting down: it finishes its
/// in-flight calls but takes no new ones (`UpstreamStatus.state` in
/// `proto/switchyard/v1/sidecar.proto`).
pub const DRAINING: &str = "draining";

/// "server unavailable", naming the server and why.
fn unavailable(server: &str, why: impl std::fmt::Display) -> CallError {
    CallError::server_unavailable(server, why)
}

/// "server unavailable" because sidecar `pick` of `server` answered
/// UNIMPLEMENTED: it is not a sidecar (or an incompatible one), so the
/// request never ran there.
fn not_served(server: &str, pick: &crate::model::SidecarRecord, status: &Status) -> CallError {
    unreachable(
        server,
        pick,
        &format!("it does not serve SidecarCalls: {}", status.message()),
    )
}

/// "server unavailable" because sidecar `pick` of `server` cannot be
/// reached, and why.
fn unreachable(server: &str, pick: &crate::model::SidecarRecord, why: &str) -> CallError {
    unavailable(
        server,
        format!(
            "sidecar {} at {} unreachable: {why}",
            pick.sidecar_id, pick.call_address
        ),
    )
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

    /// The `SidecarCalls` client of `sidecar` (over the channel cached for
    /// its call address, with the call token it registered), for calls
    /// other than `CallTool` (e.g. `CancelBackgroundCall`). Errors: a bad
    /// address, or TLS that cannot be set up for it.
    pub fn sidecar_client(
        &self,
        sidecar: &crate::model::SidecarRecord,
    ) -> Result<SidecarClient, String> {
        self.client(sidecar)
    }

    fn client(&self, sidecar: &crate::model::SidecarRecord) -> Result<SidecarClient, String> {
        let address = sidecar.call_address.as_str();
        let mut channels = self.channels.lock().unwrap();
        if !channels.contains_key(address) {
            let channel = self.channel(address)?;
            let cached = Cached {
                channel,
                client: None,
            };
            channels.insert(address.to_owned(), cached);
        }
        let Some(cached) = channels.get_mut(address) else {
            unreachable!("inserted above")
        };
        if let Some((token, client)) = &cached.client
            && *token == sidecar.call_token
        {
            return Ok(client.clone());
        }
        // An older sidecar registered no token and checks none.
        let token = (!sidecar.call_token.is_empty()).then_some(sidecar.call_token.as_str());
        let client =
            SidecarCallsClient::with_interceptor(cached.channel.clone(), BearerToken::new(token))
                .max_decoding_message_size(64 * 1024 * 1024)
                .max_encoding_message_size(64 * 1024 * 1024);
        cached.client = Some((sidecar.call_token.clone(), client.clone()));
        Ok(client)
    }

    /// A new (lazily connecting) channel to `address`.
    fn channel(&self, address: &str) -> Result<Channel, String> {
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
        Ok(endpoint.connect_lazy())
    }

    /// Sends a call to a live sidecar of `server`, answered by `deadline`
    /// (opening a sidecar's call stream counts against it). A sidecar whose
    /// stream cannot be opened never saw the call, so the next live one is
    /// tried: the one retry this hop declares. Errors: UNAVAILABLE naming
    /// the server (no live sidecar, all draining, unreachable),
    /// DEADLINE_EXCEEDED, or what the sidecar answered. `progress` gets
    /// the call's notifications (the request's `relay_progress` and
    /// `log_level`) on a sidecar's call stream; a sidecar reached by unary
    /// RPC sends none.
    pub async fn call(
        &self,
        snap: &Snapshot,
        server: &str,
        request: SidecarCallRequest,
        deadline: Instant,
        progress: Option<Observer>,
    ) -> Result<SidecarCallResponse, CallError> {
        let sidecars = candidates(snap, server)?;
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let budget = deadline.saturating_duration_since(Instant::now());
        // A sidecar whose call stream cannot be opened never saw the call,
        // so the next one is tried (each gets the time left); the error of
        // the last one tried is returned.
        let mut tried = 0;
        let (pick, mux) = loop {
            let pick = sidecars[(first + tried) % sidecars.len()];
            tried += 1;
            let unreachable = |why: &str| unreachable(server, pick, why);
            // Opening the stream counts against the call's time too: a
            // sidecar that accepts connections but never answers fails the
            // call, not every call after it.
            let opened = self.link(pick);
            let failed = match tokio::time::timeout_at(deadline, opened).await {
                Ok(Ok(Link::Stream(mux))) => break (pick, mux),
                // A sidecar without `CallStream`: one RPC. An address that
                // does not serve `CallTool` either (not a sidecar, or an
                // incompatible one) never ran the call: the next is tried.
                Ok(Ok(Link::Unary { .. })) => {
                    match Box::pin(self.call_unary(server, pick, request.clone(), deadline)).await {
                        Ok(resp) => return Ok(resp),
                        Err(Unary::Failed(e)) => return Err(e),
                        Err(Unary::NotServed(e)) => e,
                    }
                }
                Ok(Err(LinkError::Address(e))) => unavailable(server, e),
                Ok(Err(LinkError::Open(status))) => unreachable(status.message()),
                Err(_) => unreachable("its call stream did not open in time"),
            };
            if tried >= sidecars.len() || Instant::now() >= deadline {
                return Err(failed);
            }
            tracing::info!(%server, sidecar = %pick.sidecar_id, error = %failed.message, "trying the server's next sidecar");
        };
        let unreachable = |why: &str| unreachable(server, pick, why);
        // The sidecar enforces `timeout_ms`; this bounds the wait here too.
        // A call that times out (or whose future is dropped: the engine
        // cancelled) is cancelled on the stream.
        match tokio::time::timeout_at(deadline, mux.call_observed(request, progress)).await {
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(MuxError::Call(status))) => Err(from_sidecar(status)),
            Ok(Err(MuxError::Stream(status))) => {
                self.forget_stream(&pick.call_address, &mux);
                Err(unreachable(status.message()))
            }
            Err(_) => Err(CallError::deadline_exceeded(format!(
                "server {server}: sidecar {} did not answer within {} ms",
                pick.sidecar_id,
                budget.as_millis()
            ))),
        }
    }

    /// Sends one unary `SidecarCalls` request (stage E: `ReadResource`,
    /// `GetPrompt`, `Complete`) to a live sidecar of `server`, picked as
    /// [`Router::call`] picks, answered by `deadline`. `send` makes the RPC
    /// on the sidecar's client. A sidecar that cannot be reached never saw
    /// the request, so the next live one is tried: the one retry this hop
    /// declares, as for calls. Errors: UNAVAILABLE naming the server,
    /// DEADLINE_EXCEEDED, or what the sidecar answered.
    pub async fn request<T, F, Fut>(
        &self,
        snap: &Snapshot,
        server: &str,
        deadline: Instant,
        send: F,
    ) -> Result<T, CallError>
    where
        F: Fn(SidecarClient, Duration) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let sidecars = candidates(snap, server)?;
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        let budget = deadline.saturating_duration_since(Instant::now());
        let mut tried = 0;
        loop {
            let pick = sidecars[(first + tried) % sidecars.len()];
            tried += 1;
            let client = self.client(pick).map_err(|e| unavailable(server, e))?;
            let left = deadline.saturating_duration_since(Instant::now());
            let failed = match tokio::time::timeout_at(deadline, send(client, left)).await {
                Ok(Ok(resp)) => return Ok(resp.into_inner()),
                // Not a sidecar (or an incompatible one): never ran here.
                Ok(Err(status)) if status.code() == Code::Unimplemented => {
                    not_served(server, pick, &status)
                }
                Ok(Err(status)) if is_transport_failure(&status) => {
                    self.channels.lock().unwrap().remove(&pick.call_address);
                    unreachable(server, pick, status.message())
                }
                Ok(Err(status)) => return Err(from_sidecar(status)),
                Err(_) => {
                    return Err(CallError::deadline_exceeded(format!(
                        "server {server}: sidecar {} did not answer within {} ms",
                        pick.sidecar_id,
                        budget.as_millis()
                    )));
                }
            };
            if tried >= sidecars.len() || Instant::now() >= deadline {
                return Err(failed);
            }
            tracing::info!(%server, sidecar = %pick.sidecar_id, error = %failed.message, "trying the server's next sidecar");
        }
    }

    /// The call stream of `sidecar`'s call address, opened if needed.
    async fn link(&self, sidecar: &crate::model::SidecarRecord) -> Result<Link, LinkError> {
        if let Some(link) = self.live_link(&sidecar.call_address, &sidecar.sidecar_id) {
            return Ok(link);
        }
        // Boxed: opening is rare, and its future is large.
        Box::pin(self.open_link(sidecar)).await
    }

    /// Opens the call stream of `sidecar`'s call address (one opener per
    /// address).
    async fn open_link(&self, sidecar: &crate::model::SidecarRecord) -> Result<Link, LinkError> {
        let (address, sidecar_id) = (sidecar.call_address.as_str(), sidecar.sidecar_id.as_str());
        let gate = self
            .opening
            .lock()
            .unwrap()
            .entry(address.to_owned())
            .or_default()
            .clone();
        let _opening = gate.lock().await;
        if let Some(link) = self.live_link(address, sidecar_id) {
            return Ok(link);
        }
        let mut client = self.client(sidecar).map_err(LinkError::Address)?;
        let link = match Mux::open(|frames| async move { client.call_stream(frames).await }).await {
            Ok(mux) => Link::Stream(mux),
            Err(status) if status.code() == Code::Unimplemented => {
                tracing::info!(%address, sidecar = %sidecar_id, "the sidecar has no CallStream; calls go one RPC each");
                Link::Unary {
                    sidecar_id: sidecar_id.to_owned(),
                }
            }
            Err(status) => {
                self.channels.lock().unwrap().remove(address);
                return Err(LinkError::Open(status));
            }
        };
        self.streams
            .lock()
            .unwrap()
            .insert(address.to_owned(), link.clone());
        Ok(link)
    }

    /// The usable link of `address`: an open stream, or a unary link
    /// probed on the sidecar that is registered there now.
    fn live_link(&self, address: &str, sidecar_id: &str) -> Option<Link> {
        match self.streams.lock().unwrap().get(address) {
            Some(Link::Stream(mux)) if !mux.is_closed() => Some(Link::Stream(mux.clone())),
            Some(link @ Link::Unary { sidecar_id: probed }) if probed == sidecar_id => {
                Some(link.clone())
            }
            _ => None,
        }
    }

    /// Drops the cached channels, call streams and opening gates of
    /// addresses that no live sidecar in `snap` has any more (sidecar pods
    /// come and go with new addresses), and the unary links of addresses
    /// where another sidecar than the probed one is now registered, so the
    /// next call there tries `CallStream` again. Calls in flight keep their
    /// stream until they end. Called every few seconds by the control
    /// plane's state loop.
    pub fn prune(&self, snap: &Snapshot) {
        let live: HashMap<&str, Vec<&str>> =
            snap.sidecars
                .values()
                .flat_map(|m| m.values())
                .fold(HashMap::new(), |mut live, s| {
                    live.entry(s.call_address.as_str())
                        .or_default()
                        .push(s.sidecar_id.as_str());
                    live
                });
        self.streams.lock().unwrap().retain(|address, link| {
            match (live.get(address.as_str()), link) {
                (None, _) => false,
                (Some(ids), Link::Unary { sidecar_id }) => ids.contains(&sidecar_id.as_str()),
                (Some(_), Link::Stream(_)) => true,
            }
        });
        self.channels
            .lock()
            .unwrap()
            .retain(|address, _| live.contains_key(address.as_str()));
        // A gate someone holds or waits on stays until the next prune.
        self.opening.lock().unwrap().retain(|address, gate| {
            live.contains_key(address.as_str()) || Arc::strong_count(gate) > 1
        });
    }

    /// Drops a broken call stream (and its channel), unless a new one
    /// already replaced it.
    fn forget_stream(&self, address: &str, broken: &Arc<Mux<SidecarCallFrames>>) {
        let mut streams = self.streams.lock().unwrap();
        if matches!(streams.get(address), Some(Link::Stream(m)) if Arc::ptr_eq(m, broken)) {
            streams.remove(address);
            self.channels.lock().unwrap().remove(address);
        }
    }

    /// One call as a `CallTool` RPC.
    async fn call_unary(
        &self,
        server: &str,
        pick: &crate::model::SidecarRecord,
        request: SidecarCallRequest,
        deadline: Instant,
    ) -> Result<SidecarCallResponse, Unary> {
        let mut client = self
            .client(pick)
            .map_err(|e| Unary::Failed(unavailable(server, e)))?;
        let mut req = tonic::Request::new(request);
        req.set_timeout(deadline.saturating_duration_since(Instant::now()));
        match client.call_tool(req).await {
            Ok(resp) => Ok(resp.into_inner()),
            Err(status) if status.code() == Code::Unimplemented => {
                Err(Unary::NotServed(not_served(server, pick, &status)))
            }
            Err(status) if is_transport_failure(&status) => {
                self.channels.lock().unwrap().remove(&pick.call_address);
                self.streams.lock().unwrap().remove(&pick.call_address);
                Err(Unary::Failed(unreachable(server, pick, status.message())))
            }
            Err(status) => Err(Unary::Failed(from_sidecar(status))),
        }
    }

    /// Tracks a call in `scope` ([`call_scope`]); the token is cancelled
    /// by [`Router::cancel`]. Errors when a call with the same id is
    /// already running in the scope (a second one could not be cancelled
    /// on its own).
    pub fn track(
        &self,
        scope: &str,
        call_id: &str,
    ) -> Result<Option<CallGuard<'_>>, DuplicateCall> {
        if call_id.is_empty() {
            return Ok(None);
        }
        let token = CancellationToken::new();
        let key = (scope.to_owned(), call_id.to_owned());
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

    /// Cancels every call running on this replica in `scope` (a deleted
    /// session's); how many.
    pub fn cancel_scope(&self, scope: &str) -> usize {
        let in_flight = self.in_flight.lock().unwrap();
        let mut n = 0;
        for ((s, _), token) in in_flight.iter() {
            if s == scope {
                token.cancel();
                n += 1;
            }
        }
        n
    }

    /// Cancels a call running on this replica; false if none.
    pub fn cancel(&self, scope: &str, call_id: &str) -> bool {
        match self
            .in_flight
            .lock()
            .unwrap()
            .get(&(scope.to_owned(), call_id.to_owned()))
        {
            Some(t) => {
                t.cancel();
                true
            }
            None => false,
        }
    }
}

/// The scope a call id is unique in and can be cancelled from: the call's
/// session when it has one (any caller who may use the session may cancel
/// it), otherwise its caller: `/` and the hex digits of the caller's name
/// (`/` alone for an anonymous caller), so a call made without a session
/// is cancelled by its own principal only. The two forms never meet:
/// session ids have no `/` ([`crate::model::check_id`]).
pub fn call_scope(session: &str, caller: Option<&crate::auth::Caller>) -> String {
    if !session.is_empty() {
        return session.to_owned();
    }
    let name = caller.map(|c| c.name.as_str()).unwrap_or("");
    let mut scope = String::with_capacity(1 + 2 * name.len());
    scope.push('/');
    for b in name.bytes() {
        scope.push_str(&format!("{b:02x}"));
    }
    scope
}

/// How a call by one `CallTool` RPC failed.
enum Unary {
    /// The address answered UNIMPLEMENTED: the call never ran there.
    NotServed(CallError),
    /// Anything else (the call may have run).
    Failed(CallError),
}

/// Why a sidecar address has no link.
enum LinkError {
    /// A bad address or TLS setup.
    Address(String),
    /// Opening the call stream failed.
    Open(Status),
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

/// The live sidecars of `server` a new request may go to: not draining,
/// and those whose upstream is connected when any is (the others may
/// still be reconnecting). Errors: UNAVAILABLE "server unavailable"
/// naming the server: no live sidecar, or every one draining.
fn candidates<'s>(
    snap: &'s Snapshot,
    server: &str,
) -> Result<Vec<&'s crate::model::SidecarRecord>, CallError> {
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
    let connected: Vec<_> = all
        .iter()
        .copied()
        .filter(|s| s.upstream_state == "connected")
        .collect();
    Ok(if connected.is_empty() { all } else { connected })
}

/// A sidecar's answer as a [`CallError`]: the status code as the kind, its
/// message and details unchanged (this is the outbound gRPC edge).
fn from_sidecar(status: Status) -> CallError {
    let kind = match status.code() {
        Code::NotFound => Kind::NotFound,
        Code::InvalidArgument => Kind::InvalidArgument,
        Code::FailedPrecondition => Kind::FailedPrecondition,
        Code::AlreadyExists => Kind::AlreadyExists,
        Code::Aborted => Kind::Aborted,
        Code::Unavailable => Kind::Unavailable,
        Code::DeadlineExceeded => Kind::DeadlineExceeded,
        Code::Cancelled => Kind::Cancelled,
        Code::ResourceExhausted => Kind::ResourceExhausted,
        Code::PermissionDenied => Kind::PermissionDenied,
        Code::Internal => Kind::Internal,
        Code::Unimplemented => Kind::Unimplemented,
        Code::Unauthenticated => Kind::Unauthenticated,
        Code::OutOfRange => Kind::OutOfRange,
        Code::DataLoss => Kind::DataLoss,
        _ => Kind::Unknown,
    };
    CallError {
        kind,
        message: status.message().to_owned(),
        details: status.details().to_vec(),
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
            call_token: String::new(),
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
            .call(
                &snap,
                "files",
                request(),
                Instant::now() + Duration::from_secs(30),
                None,
            )
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(e.kind, Kind::Unavailable);
        assert_eq!(
            e.message,
            "server unavailable: files: draining (sidecar a is shutting down; no other live sidecar)"
        );
    }

    /// The router's cached addresses: (channels, links, opening gates).
    fn cached(router: &Router) -> (Vec<String>, Vec<String>, Vec<String>) {
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };
        (
            sorted(router.channels.lock().unwrap().keys().cloned().collect()),
            sorted(router.streams.lock().unwrap().keys().cloned().collect()),
            sorted(router.opening.lock().unwrap().keys().cloned().collect()),
        )
    }

    #[tokio::test]
    async fn prune_forgets_addresses_no_live_sidecar_has() {
        let router = Router::new();
        let (gone, kept) = ("http://127.0.0.1:9", "http://127.0.0.1:7");
        for address in [gone, kept] {
            router.client(&sidecar("a", address, "connected")).unwrap();
            router.streams.lock().unwrap().insert(
                address.into(),
                Link::Unary {
                    sidecar_id: "a".into(),
                },
            );
            router
                .opening
                .lock()
                .unwrap()
                .insert(address.into(), Default::default());
        }
        // A gate in use survives its address's removal until released.
        let held = router.opening.lock().unwrap()[gone].clone();
        router.prune(&snapshot(&[sidecar("a", kept, "connected")]));
        let one = vec![kept.to_owned()];
        assert_eq!(
            cached(&router),
            (one.clone(), one.clone(), vec![kept.into(), gone.into()])
        );
        drop(held);
        router.prune(&snapshot(&[sidecar("a", kept, "connected")]));
        assert_eq!(cached(&router), (one.clone(), one.clone(), one.clone()));
        // No sidecars at all: nothing is kept.
        router.prune(&Snapshot::default());
        assert_eq!(cached(&router), (vec![], vec![], vec![]));
    }

    #[tokio::test]
    async fn a_unary_link_is_probed_again_when_another_sidecar_takes_its_address() {
        let router = Router::new();
        let address = "http://127.0.0.1:9";
        router.streams.lock().unwrap().insert(
            address.into(),
            Link::Unary {
                sidecar_id: "old".into(),
            },
        );
        // The sidecar it was probed on is still the one there: kept.
        assert!(router.live_link(address, "old").is_some());
        router.prune(&snapshot(&[sidecar("old", address, "connected")]));
        assert_eq!(cached(&router).1, vec![address.to_owned()]);
        // An upgrade in place: a new sidecar at the same address. The old
        // link is not used for it, and prune drops it.
        assert!(router.live_link(address, "new").is_none());
        router.prune(&snapshot(&[sidecar("new", address, "connected")]));
        assert!(cached(&router).1.is_empty());
    }

    #[tokio::test]
    async fn a_sidecar_that_cannot_be_reached_is_skipped_for_the_next() {
        // One address refuses connections; the other accepts them and
        // serves a CallStream that answers every call.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let good = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(
                    switchyard_proto::v1::sidecar_calls_server::SidecarCallsServer::new(Echo),
                )
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", l.local_addr().unwrap())
        };
        let router = Router::new();
        let snap = snapshot(&[
            sidecar("a", &dead, "connected"),
            sidecar("b", &good, "connected"),
        ]);
        // Whichever the round robin picks first, every call is answered.
        for _ in 0..4 {
            let r = router
                .call(
                    &snap,
                    "files",
                    request(),
                    Instant::now() + Duration::from_secs(10),
                    None,
                )
                .await
                .expect("answered by the sidecar that is up");
            assert_eq!(r.result_json, "{\"ok\":true}");
        }
        // With none reachable, the error names the last one tried.
        let snap = snapshot(&[sidecar("a", &dead, "connected")]);
        let e = router
            .call(
                &snap,
                "files",
                request(),
                Instant::now() + Duration::from_secs(10),
                None,
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind, Kind::Unavailable, "{e:?}");
        assert!(e.message.contains("sidecar a at"), "{e:?}");
    }

    /// A sidecar whose CallStream answers `{"ok":true}` to every call.
    struct Echo;

    #[tonic::async_trait]
    impl switchyard_proto::v1::sidecar_calls_server::SidecarCalls for Echo {
        async fn call_tool(
            &self,
            _: tonic::Request<SidecarCallRequest>,
        ) -> Result<tonic::Response<SidecarCallResponse>, Status> {
            Err(Status::unimplemented("CallStream only"))
        }
        type CallStreamStream =
            switchyard_proto::calls::Outcomes<switchyard_proto::v1::SidecarCallOutcome>;
        async fn call_stream(
            &self,
            request: tonic::Request<tonic::Streaming<switchyard_proto::v1::SidecarCallFrame>>,
        ) -> Result<tonic::Response<Self::CallStreamStream>, Status> {
            Ok(tonic::Response::new(switchyard_proto::calls::serve::<
                SidecarCallFrames,
                _,
                _,
            >(
                request.into_inner(),
                16,
                CancellationToken::new(),
                |_, _, _| async {
                    Ok(SidecarCallResponse {
                        result_json: "{\"ok\":true}".into(),
                        ..Default::default()
                    })
                },
            )))
        }
        async fn cancel_background_call(
            &self,
            _: tonic::Request<switchyard_proto::v1::SidecarCancelBackgroundRequest>,
        ) -> Result<tonic::Response<switchyard_proto::v1::SidecarCancelBackgroundResponse>, Status>
        {
            Err(Status::unimplemented("not here"))
        }
        async fn read_resource(
            &self,
            _: tonic::Request<switchyard_proto::v1::SidecarRequest>,
        ) -> Result<tonic::Response<switchyard_proto::v1::ReadResourceResponse>, Status> {
            Err(Status::unimplemented("not here"))
        }
        async fn get_prompt(
            &self,
            _: tonic::Request<switchyard_proto::v1::SidecarRequest>,
        ) -> Result<tonic::Response<switchyard_proto::v1::GetPromptResponse>, Status> {
            Err(Status::unimplemented("not here"))
        }
        async fn complete(
            &self,
            _: tonic::Request<switchyard_proto::v1::SidecarRequest>,
        ) -> Result<tonic::Response<switchyard_proto::v1::CompleteResponse>, Status> {
            Err(Status::unimplemented("not here"))
        }
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
                .call(
                    &snap,
                    "files",
                    request(),
                    Instant::now() + Duration::from_secs(5),
                    None,
                )
                .await
                .unwrap_err();
            assert_eq!(e.kind, Kind::Unavailable, "{e:?}");
            assert!(
                e.message
                    .contains("sidecar b at http://127.0.0.1:7 unreachable"),
                "{e:?}"
            );
        }
    }

    #[tokio::test]
    async fn the_client_of_an_address_is_built_once_per_call_token() {
        let router = Router::new();
        let token_of = |router: &Router| {
            let channels = router.channels.lock().unwrap();
            let cached = channels.get("http://127.0.0.1:9").expect("cached");
            cached.client.as_ref().map(|(token, _)| token.clone())
        };
        let mut first = sidecar("a", "http://127.0.0.1:9", "running");
        first.call_token = "one".into();
        router.client(&first).unwrap();
        assert_eq!(token_of(&router).as_deref(), Some("one"));
        router.client(&first).unwrap();
        assert_eq!(router.channels.lock().unwrap().len(), 1);
        // A new sidecar at the same address (a restart) registered a new
        // token: its client sends that one, over the same channel.
        let mut restarted = sidecar("b", "http://127.0.0.1:9", "running");
        restarted.call_token = "two".into();
        router.client(&restarted).unwrap();
        assert_eq!(token_of(&router).as_deref(), Some("two"));
        assert_eq!(router.channels.lock().unwrap().len(), 1);
    }
}
