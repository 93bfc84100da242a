//! Serving an axum router on a TCP listener with the limits a listener
//! open to untrusted clients needs and that `axum::serve` does not set:
//!
//! - a new connection's first bytes (a request line, or the whole HTTP/2
//!   preface) must arrive within [`HEADER_READ_TIMEOUT`]
//!   ([`crate::connections::first_bytes`]), and so must each HTTP/1.1
//!   request's header block (hyper closes the connection otherwise), which
//!   also ends a kept-alive connection that sends nothing for that long;
//!   before, a client could hold a connection, and its file descriptor,
//!   forever with a half-sent request or none;
//! - a write that waits for the peer to read for
//!   [`crate::connections::WRITE_STALL_TIMEOUT`] fails, closing the
//!   connection; and so does a connection with a response body whose data
//!   it has not taken for as long (an HTTP/2 peer that grants no
//!   flow-control window: then nothing is written, so no write waits).
//!   Each body has its own clock, so asking for other answers does not
//!   keep the connection. Bodies are handed over in pieces of at most
//!   [`BODY_PIECE`] bytes, so a peer that reads slowly but steadily is not
//!   taken for one that stopped;
//! - a connection without a request in flight for [`IDLE_TIMEOUT`] is
//!   asked to finish (HTTP/2 GOAWAY);
//! - HTTP/2 connections are pinged every [`HTTP2_KEEP_ALIVE`] and closed
//!   when a ping goes unanswered as long (a peer that vanished);
//! - `TCP_NODELAY` on every connection (small responses must not wait for
//!   the peer's delayed ACK);
//! - the client's address is in each request's extensions as axum's
//!   `ConnectInfo<SocketAddr>`;
//! - a failed `accept` (out of file descriptors, say) is logged and retried
//!   a moment later, not spun on;
//! - at most as many connections served at once as the listener's
//!   [`ConnectionLimit`] allows; beyond it new ones wait to be served
//!   ([`crate::connections`]).
//!
//! HTTP/1.1 and HTTP/2 (prior knowledge; by ALPN over TLS) are both
//! served, in clear text or over TLS ([`serve_tls`]). [`serve_grpc`]
//! serves gRPC services the same way, HTTP/2 only, with tonic's connection
//! info in each request and, optionally, [`Admissions`]. On shutdown the
//! listener closes, every connection is asked to finish gracefully, and
//! [`serve`] returns once they have.

use crate::connections::{Admissions, ConnectionLimit, accept_with_peer, first_bytes};
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo};

/// How long a request's header block may take to arrive, and how long a
/// kept-alive HTTP/1.1 connection may stay silent.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How often an HTTP/2 connection is pinged, and how long an answer may
/// take.
pub const HTTP2_KEEP_ALIVE: Duration = Duration::from_secs(30);
/// How often a gRPC connection ([`serve_grpc`]) is pinged, and how long an
/// answer may take, on both binaries' gRPC listeners: a peer that vanished
/// (a sidecar, a control plane replica) is noticed within about twice this.
pub const GRPC_KEEP_ALIVE: Duration = Duration::from_secs(10);
/// How long a connection with no request in flight stays open (HTTP/2:
/// HTTP/1.1's kept-alive connections are closed sooner, by
/// [`HEADER_READ_TIMEOUT`]); it is then asked to finish (GOAWAY). A request
/// is in flight until its response, streams included, is sent.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The most bytes of a response body handed to the connection at once
/// (larger frames are split without copying): each piece taken shows the
/// peer is reading ([`Limits::write_stall_timeout`]).
pub const BODY_PIECE: usize = 16 * 1024;

/// The timeouts of [`serve_with`].
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// See [`HTTP2_KEEP_ALIVE`].
    pub http2_keep_alive: Duration,
    /// See [`IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// How long a write may wait for the peer, and response data wait to
    /// be taken, before the connection is closed
    /// ([`crate::connections::WRITE_STALL_TIMEOUT`]).
    pub write_stall_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            http2_keep_alive: HTTP2_KEEP_ALIVE,
            idle_timeout: IDLE_TIMEOUT,
            write_stall_timeout: crate::connections::WRITE_STALL_TIMEOUT,
        }
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then lets the
/// connections finish (module docs). The limit names the listener in
/// logs.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    connections: Arc<ConnectionLimit>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    serve_with(listener, app, connections, Limits::default(), shutdown).await;
}

/// [`serve`] with other timeouts than the defaults.
pub async fn serve_with(
    listener: TcpListener,
    app: axum::Router,
    connections: Arc<ConnectionLimit>,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    serve_inner(
        listener,
        app,
        connections,
        limits,
        Mode::default(),
        shutdown,
    )
    .await;
}

/// [`serve`] over TLS with `tls` (HTTP/2 and HTTP/1.1 by ALPN): a
/// handshake must end within [`TLS_HANDSHAKE_TIMEOUT`]; one that fails or
/// takes longer closes its connection (logged at DEBUG).
pub async fn serve_tls(
    listener: TcpListener,
    app: axum::Router,
    connections: Arc<ConnectionLimit>,
    tls: Arc<rustls::ServerConfig>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mode = Mode {
        tls: Some(tokio_rustls::TlsAcceptor::from(tls)),
        grpc: None,
    };
    serve_inner(
        listener,
        app,
        connections,
        Limits::default(),
        mode,
        shutdown,
    )
    .await;
}

/// [`serve_with`] for gRPC services (tonic's `Routes::into_axum_router`):
/// HTTP/2 only, with no limit on a connection's concurrent streams, over
/// TLS with `tls` when given (its ALPN should offer
/// `h2` only; [`crate::tls::PemIdentity::grpc_server_config`]), and each
/// request carries tonic's connection info (`TcpConnectInfo`, over TLS
/// `TlsConnectInfo<TcpConnectInfo>`), so `tonic::Request::remote_addr`
/// and `peer_certs` answer as under tonic's own server. As there, a call
/// whose answer has not begun by the caller's deadline (`grpc-timeout`)
/// is answered `DEADLINE_EXCEEDED` and its handler dropped. With `admissions`, a connection must also carry a
/// request its guard admits in time ([`Admissions`]).
pub async fn serve_grpc(
    listener: TcpListener,
    app: axum::Router,
    connections: Arc<ConnectionLimit>,
    limits: Limits,
    tls: Option<Arc<rustls::ServerConfig>>,
    admissions: Option<Arc<Admissions>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mode = Mode {
        tls: tls.map(tokio_rustls::TlsAcceptor::from),
        grpc: Some(Grpc { admissions }),
    };
    serve_inner(listener, app, connections, limits, mode, shutdown).await;
}

/// The answer to a gRPC call whose answer had not begun by the caller's
/// deadline, `within` after it came: `DEADLINE_EXCEEDED`, trailers only
/// (the handler is dropped). A streaming answer that has begun is not cut.
fn deadline_passed(within: Duration) -> http::Response<axum::body::Body> {
    tonic::Status::deadline_exceeded(format!(
        "the caller's deadline (grpc-timeout, {within:?}) passed before the answer began"
    ))
    .into_http()
}

/// The caller's deadline of a gRPC call from its `grpc-timeout` header
/// (gRPC over HTTP/2: at most 8 digits and a unit, `H`, `M`, `S`, `m`, `u`
/// or `n`); `None` when malformed, which is then ignored, as tonic does.
fn parse_grpc_timeout(value: &[u8]) -> Option<Duration> {
    let (unit, digits) = value.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// How long a TLS handshake may take.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a listener serves, beyond its [`Limits`].
#[derive(Clone, Default)]
struct Mode {
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// A gRPC listener ([`serve_grpc`]).
    grpc: Option<Grpc>,
}

#[derive(Clone)]
struct Grpc {
    admissions: Option<Arc<Admissions>>,
}

/// tonic's view of a connection, put in each of its requests.
#[derive(Clone)]
enum TonicInfo {
    Tcp(TcpConnectInfo),
    Tls(TlsConnectInfo<TcpConnectInfo>),
}

/// The service serving one connection's requests: each carries the
/// client's address (and tonic's connection info for a gRPC listener), and
/// counts as in flight until its response body is done (for the idle
/// timeout).
fn connection_service(
    app: axum::Router,
    peer: std::net::SocketAddr,
    tonic: Option<TonicInfo>,
    activity: Arc<Activity>,
) -> impl hyper::service::Service<
    http::Request<hyper::body::Incoming>,
    Response = http::Response<axum::body::Body>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<http::Response<axum::body::Body>, std::convert::Infallible>>
             + Send
             + 'static,
> + Clone
+ Send
+ 'static {
    let service = tower::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        match &tonic {
            Some(TonicInfo::Tcp(info)) => {
                req.extensions_mut().insert(info.clone());
            }
            Some(TonicInfo::Tls(info)) => {
                req.extensions_mut().insert(info.clone());
            }
            None => {}
        }
        // gRPC: the caller's deadline.
        let deadline = tonic
            .as_ref()
            .and_then(|_| req.headers().get("grpc-timeout"))
            .and_then(|v| parse_grpc_timeout(v.as_bytes()));
        let in_flight = Activity::enter(&activity);
        let answer = tower::ServiceExt::oneshot(app.clone(), req);
        async move {
            let response = match deadline {
                None => answer.await?,
                Some(within) => match tokio::time::timeout(within, answer).await {
                    Ok(response) => response?,
                    Err(_) => deadline_passed(within),
                },
            };
            Ok::<_, std::convert::Infallible>(
                response.map(|body| axum::body::Body::new(InFlightBody::new(body, in_flight))),
            )
        }
    });
    TowerToHyperService::new(service)
}

async fn serve_inner(
    listener: TcpListener,
    app: axum::Router,
    connections: Arc<ConnectionLimit>,
    limits: Limits,
    mode: Mode,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let what = connections.what();
    // Dropped receivers tell the connections to finish; the last closed
    // `done` receiver tells `serve` they have.
    let (stop_tx, stop_rx) = watch::channel(());
    let (done_tx, done_rx) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = accept_with_peer(&listener, what) => accepted,
            () = &mut shutdown => break,
        };
        // Its place under the limit: at the limit, it waits for one (and
        // the connections after it, in the kernel's backlog).
        let permit = tokio::select! {
            permit = connections.acquire(peer.ip()) => permit,
            () = &mut shutdown => break,
        };
        let activity = Arc::new(Activity::default());
        let stop = stop_rx.clone();
        let done = done_rx.clone();
        let (app, mode) = (app.clone(), mode.clone());
        let http2_only = mode.grpc.is_some();
        // Watched from now: admitted by the first request its guard lets
        // through.
        let admission = mode
            .grpc
            .as_ref()
            .and_then(|g| g.admissions.as_ref())
            .map(|a| a.watch(peer));
        tokio::spawn(async move {
            // The first bytes of a request (or of the HTTP/2 preface) within
            // the header timeout, over TLS after its handshake: hyper does
            // not time the preface, so a silent connection would keep its
            // place forever.
            let within = limits.header_read_timeout;
            let closed = |e: std::io::Error| {
                tracing::debug!(listener = what, %peer, error = %e, "connection closed before its first request");
            };
            let stall = limits.write_stall_timeout;
            let serve = ConnectionOptions {
                limits,
                http2_only,
                what,
            };
            match mode.tls {
                None => {
                    let tonic = mode.grpc.is_some().then(|| {
                        TonicInfo::Tcp(TcpConnectInfo {
                            local_addr: tcp.local_addr().ok(),
                            remote_addr: Some(peer),
                        })
                    });
                    match first_bytes(tcp, within).await {
                        Ok(io) => {
                            let io = io.with_write_timeout(stall).with_admission(admission);
                            let service = connection_service(app, peer, tonic, activity.clone());
                            connection(io, service, serve, activity, stop).await;
                        }
                        Err(e) => closed(e),
                    }
                }
                Some(acceptor) => {
                    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let tonic = mode
                                .grpc
                                .is_some()
                                .then(|| TonicInfo::Tls(stream.connect_info()));
                            match first_bytes(stream, within).await {
                                Ok(io) => {
                                    let io = io.with_write_timeout(stall).with_admission(admission);
                                    let service =
                                        connection_service(app, peer, tonic, activity.clone());
                                    connection(io, service, serve, activity, stop).await;
                                }
                                Err(e) => closed(e),
                            }
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(listener = what, %peer, error = %e, "TLS handshake failed");
                        }
                        Err(_) => {
                            tracing::debug!(listener = what, %peer, "TLS handshake timed out");
                        }
                    }
                }
            }
            drop((done, permit));
        });
    }
    drop(listener);
    drop(stop_tx);
    drop(done_rx);
    done_tx.closed().await;
}

/// How [`connection`] serves.
#[derive(Clone, Copy)]
struct ConnectionOptions {
    limits: Limits,
    /// HTTP/2 only (gRPC).
    http2_only: bool,
    /// The listener, for logs.
    what: &'static str,
}

/// Serves one connection until it ends, finishing gracefully once `stop`
/// changes or it has been idle for `limits.idle_timeout` (`activity`), and
/// closing it at once when its response data has waited for the peer for
/// `limits.write_stall_timeout` (it would never finish gracefully).
async fn connection<IO, S>(
    io: IO,
    service: S,
    options: ConnectionOptions,
    activity: Arc<Activity>,
    mut stop: watch::Receiver<()>,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<
            http::Request<hyper::body::Incoming>,
            Response = http::Response<axum::body::Body>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let ConnectionOptions {
        limits,
        http2_only,
        what,
    } = options;
    let mut builder = Builder::new(TokioExecutor::new());
    if http2_only {
        builder = builder.http2_only();
    }
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.http2_keep_alive)
        .keep_alive_timeout(limits.http2_keep_alive);
    if http2_only {
        // gRPC: as many calls and streams at once as the client opens, as
        // under tonic's server (an engine may follow hundreds of sessions'
        // events on one channel); hyper's default is 200.
        builder.http2().max_concurrent_streams(None);
    }
    // No upgrades (nothing served needs one), so `http2_only` holds.
    let conn = builder.serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let mut stopping = false;
    let mut check = tokio::time::interval(limits.idle_timeout.min(limits.write_stall_timeout) / 4);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(listener = what, error = %e, "connection ended with an error");
                }
                break;
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = check.tick() => {
                // Also while stopping: a stalled stream never finishes.
                if activity.unread_for() >= limits.write_stall_timeout {
                    tracing::debug!(listener = what, "closing a connection whose peer takes no response data");
                    break;
                }
                if !stopping && activity.idle_for() >= limits.idle_timeout {
                    tracing::debug!(listener = what, "closing an idle connection");
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// A connection's requests in flight, and since when it has had none; and
/// for each of its response bodies, since when its data has waited for the
/// connection to take it.
///
/// Each body keeps its own clock: a peer that takes nothing of one answer
/// cannot keep its connection by asking for new ones (each new answer's
/// first poll would otherwise count as progress for the connection).
#[derive(Debug)]
struct Activity {
    in_flight: std::sync::atomic::AtomicUsize,
    idle_since: std::sync::Mutex<std::time::Instant>,
    /// One clock per live response body ([`BodyClock`]).
    bodies: std::sync::Mutex<Vec<Arc<BodyClock>>>,
    start: std::time::Instant,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            idle_since: std::sync::Mutex::new(std::time::Instant::now()),
            bodies: std::sync::Mutex::new(Vec::new()),
            start: std::time::Instant::now(),
        }
    }
}

/// Since when one response body's data has waited to be taken, in ms after
/// its connection's `Activity::start`, or [`BodyClock::TAKEN`] when none
/// waits (the body is being polled for more, or has no data ready).
#[derive(Debug)]
struct BodyClock(std::sync::atomic::AtomicU64);

impl BodyClock {
    const TAKEN: u64 = u64::MAX;
}

impl Activity {
    /// A request starts; in flight until the guard is dropped.
    fn enter(this: &Arc<Activity>) -> InFlight {
        this.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InFlight(this.clone())
    }

    /// Now, in ms after `start`.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(BodyClock::TAKEN - 1)
    }

    /// A new body's clock, its data waiting from now.
    fn add_body(&self) -> Arc<BodyClock> {
        let clock = Arc::new(BodyClock(std::sync::atomic::AtomicU64::new(self.now_ms())));
        self.bodies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(clock.clone());
        clock
    }

    /// A body is gone.
    fn remove_body(&self, clock: &Arc<BodyClock>) {
        let mut bodies = self.bodies.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = bodies.iter().position(|c| Arc::ptr_eq(c, clock)) {
            bodies.swap_remove(i);
        }
    }

    /// How long the body whose data has waited longest has waited for the
    /// connection to take it (zero when none waits): an HTTP/2 peer that
    /// grants that stream no window, or a peer that stopped reading.
    fn unread_for(&self) -> Duration {
        let oldest = self
            .bodies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|c| c.0.load(std::sync::atomic::Ordering::Relaxed))
            .min()
            .unwrap_or(BodyClock::TAKEN);
        if oldest == BodyClock::TAKEN {
            return Duration::ZERO;
        }
        Duration::from_millis(self.now_ms().saturating_sub(oldest))
    }

    /// How long the connection has had no request in flight (zero while
    /// it has one).
    fn idle_for(&self) -> Duration {
        if self.in_flight.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        self.idle_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }
}

/// One request in flight on a connection ([`Activity`]).
#[derive(Debug)]
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = std::time::Instant::now();
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A response body that keeps its request in flight until it is done or
/// dropped, hands its data over in pieces of at most [`BODY_PIECE`] bytes,
/// and keeps its clock in its connection's [`Activity`]: data waits from
/// when the body is made or gives a frame until it is polled again.
struct InFlightBody {
    body: axum::body::Body,
    /// The rest of a data frame larger than a piece.
    rest: bytes::Bytes,
    clock: Arc<BodyClock>,
    in_flight: InFlight,
}

impl InFlightBody {
    /// `body`, with data waiting until its first poll.
    fn new(body: axum::body::Body, in_flight: InFlight) -> Self {
        let clock = in_flight.0.add_body();
        InFlightBody {
            body,
            rest: bytes::Bytes::new(),
            clock,
            in_flight,
        }
    }

    /// Data waits from now (`true`), or none does.
    fn set_waiting(&self, waiting: bool) {
        let since = if waiting {
            self.in_flight.0.now_ms()
        } else {
            BodyClock::TAKEN
        };
        self.clock
            .0
            .store(since, std::sync::atomic::Ordering::Relaxed);
    }

    /// The next piece of `rest`.
    fn piece(&mut self) -> bytes::Bytes {
        let n = self.rest.len().min(BODY_PIECE);
        self.rest.split_to(n)
    }
}

impl Drop for InFlightBody {
    fn drop(&mut self) {
        self.in_flight.0.remove_body(&self.clock);
    }
}

impl http_body::Body for InFlightBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        let this = &mut *self;
        if !this.rest.is_empty() {
            this.set_waiting(true);
            let piece = this.piece();
            return Poll::Ready(Some(Ok(http_body::Frame::data(piece))));
        }
        let polled = std::pin::Pin::new(&mut this.body).poll_frame(cx);
        this.set_waiting(matches!(polled, Poll::Ready(Some(Ok(_)))));
        match polled {
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) if data.len() > BODY_PIECE => {
                    this.rest = data;
                    let piece = this.piece();
                    Poll::Ready(Some(Ok(http_body::Frame::data(piece))))
                }
                Ok(data) => Poll::Ready(Some(Ok(http_body::Frame::data(data)))),
                Err(frame) => Poll::Ready(Some(Ok(frame))),
            },
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let hint = self.body.size_hint();
        let rest = self.rest.len() as u64;
        let mut sum = http_body::SizeHint::new();
        sum.set_lower(hint.lower() + rest);
        if let Some(upper) = hint.upper() {
            sum.set_upper(upper + rest);
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server answering its caller's address on `/`, with 1 s timeouts;
    /// sending on the sender stops it.
    async fn server() -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        server_limited(Arc::new(ConnectionLimit::new("test", 64))).await
    }

    /// [`server`], under `limit`.
    async fn server_limited(
        limit: Arc<ConnectionLimit>,
    ) -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let limits = Limits {
            header_read_timeout: Duration::from_secs(1),
            http2_keep_alive: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(30),
            ..Limits::default()
        };
        server_with(limit, limits).await
    }

    /// [`server`], under `limit`, with `limits`.
    async fn server_with(
        limit: Arc<ConnectionLimit>,
        limits: Limits,
    ) -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route(
                "/",
                axum::routing::get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                    peer.to_string()
                }),
            )
            // 1 MiB in one frame.
            .route("/big", axum::routing::get(|| async { vec![b'x'; 1 << 20] }))
            // Ten chunks 300 ms apart: a stream outlasting the timeouts.
            .route(
                "/stream",
                axum::routing::get(|| async {
                    let ticks = ticks();
                    axum::body::Body::from_stream(ticks)
                }),
            );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve_with(listener, app, limit, limits, async move {
            let _ = rx.await;
        }));
        (addr, tx, task)
    }

    /// [`server`] with a write stall timeout of 1 s and the others 30 s.
    async fn stall_server() -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        crate::tls::install_crypto_provider();
        let limits = Limits {
            header_read_timeout: Duration::from_secs(30),
            http2_keep_alive: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(30),
            write_stall_timeout: Duration::from_secs(1),
        };
        server_with(Arc::new(ConnectionLimit::new("test", 8)), limits).await
    }

    /// `app` served by [`serve_grpc`] (over TLS with `tls`), with the
    /// default limits; sending on the sender stops it.
    async fn grpc_server(
        app: axum::Router,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        // For the tests' reqwest clients.
        crate::tls::install_crypto_provider();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limit = Arc::new(ConnectionLimit::new("test", 8));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let stop = async move {
            let _ = rx.await;
        };
        tokio::spawn(serve_grpc(
            listener,
            app,
            limit,
            Limits::default(),
            tls,
            None,
            stop,
        ));
        (addr, tx)
    }

    fn ticks() -> impl futures::Stream<Item = Result<String, std::io::Error>> {
        futures::stream::unfold(0u32, |n| async move {
            if n == 10 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            Some((Ok(format!("tick {n}\n")), n + 1))
        })
    }

    /// Reads until the peer closes; the bytes read.
    async fn read_to_close(tcp: &mut tokio::net::TcpStream) -> String {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut out))
            .await
            .expect("the server closes the connection in time");
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn requests_are_served_with_the_callers_address() {
        let (addr, _stop, _task) = server().await;
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let local = tcp.local_addr().unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_to_close(&mut tcp).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(&local.to_string()), "{answer}");
    }

    #[tokio::test]
    async fn an_idle_http2_connection_is_closed_but_not_one_streaming() {
        crate::tls::install_crypto_provider();
        let limit = Arc::new(ConnectionLimit::new("test", 8));
        let limits = Limits {
            header_read_timeout: Duration::from_secs(30),
            http2_keep_alive: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(1),
            ..Limits::default()
        };
        let (addr, _stop, _task) = server_with(limit.clone(), limits).await;
        // One client, one HTTP/2 connection (the client answers pings and
        // keeps its idle connections for 90 s).
        let client = reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .unwrap();
        let wait_open = |n: usize| {
            let limit = limit.clone();
            async move {
                let started = std::time::Instant::now();
                while limit.open() != n && started.elapsed() < Duration::from_secs(10) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                limit.open()
            }
        };
        // A stream of 3 s, three times the idle timeout, is not cut.
        let streamed = client
            .get(format!("http://{addr}/stream"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(streamed.contains("tick 9"), "{streamed}");
        // Once idle, the connection is closed within about the timeout.
        assert_eq!(limit.open(), 1);
        let idle = std::time::Instant::now();
        assert_eq!(wait_open(0).await, 0);
        assert!(
            idle.elapsed() < Duration::from_secs(4),
            "{:?}",
            idle.elapsed()
        );
        // The client opens a new one for its next request.
        let answer = client.get(format!("http://{addr}/")).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.version(), reqwest::Version::HTTP_2);
    }

    /// A peer that vanished (it answers no ping) is closed after about
    /// two keep-alive periods; one that answers pings is kept.
    #[tokio::test]
    async fn a_peer_that_answers_no_ping_is_closed_but_not_one_that_does() {
        crate::tls::install_crypto_provider();
        let limit = Arc::new(ConnectionLimit::new("test", 8));
        let limits = Limits {
            http2_keep_alive: Duration::from_millis(300),
            ..Limits::default()
        };
        let (addr, _stop, _task) = server_with(limit.clone(), limits).await;
        // A client that answers pings, with a request done: kept.
        let client = reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .unwrap();
        let answer = client.get(format!("http://{addr}/")).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        // A peer that opens HTTP/2 (preface, empty SETTINGS), then reads
        // and answers nothing.
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        silent
            .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .await
            .unwrap();
        let opened = std::time::Instant::now();
        let _ = read_to_close(&mut silent).await;
        assert!(
            opened.elapsed() < Duration::from_secs(3),
            "closed after {:?}",
            opened.elapsed()
        );
        // The answering client's connection is still there, and used.
        assert_eq!(limit.open(), 1);
        let answer = client.get(format!("http://{addr}/")).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(limit.open(), 1);
    }

    #[tokio::test]
    async fn a_peer_that_takes_no_data_is_cut_but_not_one_reading_slowly() {
        let (addr, _stop, _task) = stall_server().await;
        // An HTTP/2 peer that grants no window: the headers come, no data
        // can; nothing is written, so no write waits. It answers pings.
        let stingy = reqwest::Client::builder()
            .http2_prior_knowledge()
            .http2_initial_stream_window_size(0)
            .build()
            .unwrap();
        let started = std::time::Instant::now();
        let response = stingy
            .get(format!("http://{addr}/big"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body = tokio::time::timeout(Duration::from_secs(10), response.bytes())
            .await
            .expect("the server cuts the connection");
        assert!(body.is_err(), "no data can have come");
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
        // A peer that reads the same 1 MiB in about 3 s, 16 KiB at a time
        // (three times the stall timeout, steadily), is not cut.
        let slow = reqwest::Client::builder()
            .http2_prior_knowledge()
            .http2_initial_stream_window_size(16 * 1024)
            .http2_initial_connection_window_size(16 * 1024)
            .build()
            .unwrap();
        let mut response = slow.get(format!("http://{addr}/big")).send().await.unwrap();
        let mut read = 0;
        while let Some(chunk) = response.chunk().await.unwrap() {
            read += chunk.len();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(read, 1 << 20);
        // One that stops reading part way is cut (hyper buffers a whole
        // frame in h2 and ends the body: only pieces leave data waiting).
        let mut response = slow.get(format!("http://{addr}/big")).send().await.unwrap();
        assert!(response.chunk().await.unwrap().is_some());
        tokio::time::sleep(Duration::from_secs(4)).await;
        let rest = async {
            while response.chunk().await?.is_some() {}
            Ok::<_, reqwest::Error>(())
        };
        let rest = tokio::time::timeout(Duration::from_secs(10), rest).await;
        assert!(matches!(rest, Ok(Err(_))), "{rest:?}");
        // And over HTTP/1.1, a whole 1 MiB body still comes as one.
        let h1 = reqwest::Client::new();
        let response = h1.get(format!("http://{addr}/big")).send().await.unwrap();
        assert_eq!(response.content_length(), Some(1 << 20));
        assert_eq!(response.bytes().await.unwrap().len(), 1 << 20);
    }

    #[tokio::test]
    async fn a_peer_cannot_keep_a_stalled_answer_by_asking_for_others() {
        let (addr, _stop, _task) = stall_server().await;
        // One HTTP/2 connection with 16 KiB stream windows: a stream whose
        // data the client does not read gets no more window.
        let client = reqwest::Client::builder()
            .http2_prior_knowledge()
            .http2_initial_stream_window_size(16 * 1024)
            .build()
            .unwrap();
        let mut stalled = client
            .get(format!("http://{addr}/big"))
            .send()
            .await
            .unwrap();
        assert!(stalled.chunk().await.unwrap().is_some());
        // Small answers, asked for and read in full every 100 ms on the same
        // connection for four times the stall timeout, do not keep it: the
        // stalled answer's data has waited too long.
        let asking = std::time::Instant::now();
        let mut answered = 0;
        while asking.elapsed() < Duration::from_secs(4) {
            if let Ok(answer) = client.get(format!("http://{addr}/")).send().await
                && answer.text().await.is_ok()
            {
                answered += 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(answered > 10, "{answered}");
        let rest = async {
            while stalled.chunk().await?.is_some() {}
            Ok::<_, reqwest::Error>(())
        };
        let rest = tokio::time::timeout(Duration::from_secs(10), rest).await;
        assert!(matches!(rest, Ok(Err(_))), "{rest:?}");
    }

    #[tokio::test]
    async fn grpc_requests_carry_tonic_connection_info_over_http2_only() {
        use switchyard_test_support::pki::TestPki;
        crate::tls::install_crypto_provider();
        // Answers what tonic's `Request::remote_addr` and `peer_certs` read.
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(|req: http::Request<axum::body::Body>| async move {
                let tcp = req
                    .extensions()
                    .get::<TcpConnectInfo>()
                    .and_then(|i| i.remote_addr());
                let tls = req
                    .extensions()
                    .get::<TlsConnectInfo<TcpConnectInfo>>()
                    .map(|i| {
                        let certs = i.peer_certs().map_or(0, |c| c.len());
                        (i.get_ref().remote_addr(), certs)
                    });
                format!("{tcp:?} {tls:?}")
            }),
        );
        let dir = tempfile::tempdir().unwrap();
        let pki = TestPki::new(dir.path(), "grpc");
        let leaf = pki.leaf("server", &[]);
        let identity =
            crate::tls::load_identity("cert", &leaf.cert_file, "key", &leaf.key_file).unwrap();
        let ca = std::fs::read(&pki.ca_file).unwrap();
        let start = |tls| grpc_server(app.clone(), tls);

        // In clear text: `TcpConnectInfo` with the client's address.
        let (addr, _stop) = start(None).await;
        let h2 = reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .unwrap();
        let answer = h2.get(format!("http://{addr}/")).send().await.unwrap();
        let text = answer.text().await.unwrap();
        assert!(
            text.starts_with("Some(127.0.0.1:") && text.ends_with(" None"),
            "{text}"
        );
        // HTTP/1.1 is not served.
        let h1 = reqwest::Client::new();
        assert!(h1.get(format!("http://{addr}/")).send().await.is_err());

        // Over TLS with a client CA: `TlsConnectInfo` with the client's
        // address and the certificate it presented, or none.
        let config = identity.grpc_server_config(Some(&ca), false).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
        let (addr, _stop) = start(Some(config)).await;
        let client_leaf = pki.leaf("engine", &[]);
        let mut pem = std::fs::read(&client_leaf.cert_file).unwrap();
        pem.extend(std::fs::read(&client_leaf.key_file).unwrap());
        let root = reqwest::Certificate::from_pem(&ca).unwrap();
        let with_cert = reqwest::Client::builder()
            .tls_certs_only([root.clone()])
            .identity(reqwest::Identity::from_pem(&pem).unwrap())
            .build()
            .unwrap();
        let url = format!("https://localhost:{}/", addr.port());
        let get = |client: reqwest::Client| {
            let url = url.clone();
            async move {
                let answer = client.get(url).send().await.unwrap();
                answer.text().await.unwrap()
            }
        };
        let text = get(with_cert).await;
        assert!(text.starts_with("None Some((Some(127.0.0.1:"), "{text}");
        assert!(text.ends_with(", 1))"), "{text}");
        let without = reqwest::Client::builder()
            .tls_certs_only([root])
            .build()
            .unwrap();
        let text = get(without).await;
        assert!(text.ends_with(", 0))"), "{text}");
    }

    #[tokio::test]
    async fn a_grpc_connection_carries_more_than_200_streams_at_once() {
        // Each call waits until all of them have started.
        const CALLS: usize = 250;
        let started = Arc::new(tokio::sync::Semaphore::new(0));
        let app = {
            let started = started.clone();
            axum::Router::new().route(
                "/wait",
                axum::routing::post(move || {
                    let started = started.clone();
                    async move {
                        started.add_permits(1);
                        let all = started.acquire_many(CALLS as u32).await.unwrap();
                        all.forget();
                        started.add_permits(CALLS);
                        "ok"
                    }
                }),
            )
        };
        let (addr, _stop) = grpc_server(app, None).await;
        let client = reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .unwrap();
        let calls = (0..CALLS).map(|_| {
            let request = client.post(format!("http://{addr}/wait")).send();
            async move { request.await.unwrap().text().await.unwrap() }
        });
        let answers =
            tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(calls))
                .await
                .expect("every call started at once on one connection");
        assert!(answers.iter().all(|a| a == "ok"));
    }

    #[test]
    fn grpc_timeouts_parse_as_the_spec_writes_them() {
        for (text, want) in [
            ("1H", Some(Duration::from_secs(3600))),
            ("2M", Some(Duration::from_secs(120))),
            ("30S", Some(Duration::from_secs(30))),
            ("250m", Some(Duration::from_millis(250))),
            ("99999999u", Some(Duration::from_micros(99_999_999))),
            ("7n", Some(Duration::from_nanos(7))),
            ("0m", Some(Duration::ZERO)),
            ("123456789S", None),
            ("S", None),
            ("", None),
            ("10s", None),
            ("-1S", None),
            ("1.5S", None),
            (" 1S", None),
        ] {
            assert_eq!(parse_grpc_timeout(text.as_bytes()), want, "{text:?}");
        }
    }

    #[tokio::test]
    async fn a_grpc_call_past_the_callers_deadline_is_answered_deadline_exceeded() {
        let app = axum::Router::new().route(
            "/slow",
            axum::routing::post(|| async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                "late"
            }),
        );
        let (addr, _stop) = grpc_server(app, None).await;
        let client = reqwest::Client::builder()
            .http2_prior_knowledge()
            .build()
            .unwrap();
        let call = |timeout: Option<&'static str>| {
            let mut request = client.post(format!("http://{addr}/slow"));
            if let Some(t) = timeout {
                request = request.header("grpc-timeout", t);
            }
            async move {
                let started = std::time::Instant::now();
                let answer = request.send().await.unwrap();
                let status = answer
                    .headers()
                    .get("grpc-status")
                    .map(|v| v.to_str().unwrap().to_owned());
                let body = answer.text().await.unwrap();
                (status, body, started.elapsed())
            }
        };
        let (status, _, took) = call(Some("200m")).await;
        assert_eq!(status.as_deref(), Some("4"), "DEADLINE_EXCEEDED");
        assert!(took < Duration::from_millis(1500), "{took:?}");
        // No deadline, or a malformed one: the answer in its time.
        for timeout in [None, Some("200x")] {
            let (status, body, took) = call(timeout).await;
            assert_eq!((status, body.as_str()), (None, "late"), "{timeout:?}");
            assert!(took >= Duration::from_secs(2), "{took:?}");
        }
    }

    #[tokio::test]
    async fn connections_beyond_the_limit_wait_for_a_place() {
        let limit = Arc::new(ConnectionLimit::new("test", 1));
        let (addr, _stop, _task) = server_limited(limit.clone()).await;
        let get = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut first = tokio::net::TcpStream::connect(addr).await.unwrap();
        first.write_all(get).await.unwrap();
        let mut head = [0u8; 12];
        first.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
        // The second connection is not served while the first is open...
        let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
        second.write_all(get).await.unwrap();
        let waited =
            tokio::time::timeout(Duration::from_millis(500), second.read_exact(&mut head)).await;
        assert!(waited.is_err(), "served beyond the limit");
        assert_eq!(limit.open(), 1);
        // ...and is once it closes.
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), second.read_exact(&mut head))
            .await
            .expect("served once the first connection closed")
            .unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
    }

    #[tokio::test]
    async fn tls_serves_http1_and_http2_by_alpn_and_drops_plaintext() {
        use switchyard_test_support::pki::TestPki;
        let dir = tempfile::tempdir().unwrap();
        let pki = TestPki::new(dir.path(), "serve");
        let leaf = pki.leaf("endpoint", &[]);
        let identity =
            crate::tls::load_identity("cert", &leaf.cert_file, "key", &leaf.key_file).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(|req: http::Request<axum::body::Body>| async move {
                format!("{:?}", req.version())
            }),
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let limit = Arc::new(ConnectionLimit::new("test", 8));
        tokio::spawn(serve_tls(
            listener,
            app,
            limit.clone(),
            identity.http_server_config().unwrap(),
            async move {
                let _ = rx.await;
            },
        ));

        let mut roots = rustls::RootCertStore::empty();
        let ca = std::fs::read(&pki.ca_file).unwrap();
        use rustls::pki_types::pem::PemObject;
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
            roots.add(c.unwrap()).unwrap();
        }
        let connect = |alpn: &[&[u8]]| {
            let mut config = rustls::ClientConfig::builder()
                .with_root_certificates(roots.clone())
                .with_no_client_auth();
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
                connector.connect(name, tcp).await
            }
        };
        // HTTP/1.1 over TLS.
        let mut tls = connect(&[b"http/1.1"]).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        tls.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tls.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("HTTP/1.1"), "{answer}");
        // HTTP/2 chosen by ALPN: the server speaks h2 (its SETTINGS frame
        // first, type 4, on stream 0).
        let mut tls = connect(&[b"h2", b"http/1.1"]).await.unwrap();
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            .await
            .unwrap();
        let mut frame = [0u8; 9];
        tls.read_exact(&mut frame).await.unwrap();
        assert_eq!(frame[3], 4, "{frame:?}");
        // Plain HTTP on the TLS port: no answer but a closed connection,
        // and its place given back.
        let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
        plain
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let answer = read_to_close(&mut plain).await;
        assert!(!answer.contains("200"), "{answer}");
        drop(tls);
        let started = std::time::Instant::now();
        while limit.open() > 0 && started.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(limit.open(), 0);
        let _ = tx.send(());
    }

    #[tokio::test]
    async fn a_half_sent_request_and_a_silent_connection_are_closed() {
        let (addr, _stop, _task) = server().await;
        // A connection that sends nothing, and one that stops inside the
        // HTTP/2 preface.
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut half_preface = tokio::net::TcpStream::connect(addr).await.unwrap();
        half_preface.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
        // A request head that never ends.
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
        // A kept-alive connection that sends nothing after its request.
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let slow_answer = read_to_close(&mut slow).await;
        let idle_answer = read_to_close(&mut idle).await;
        assert!(!slow_answer.contains("200"), "{slow_answer}");
        assert_eq!(read_to_close(&mut silent).await, "");
        assert_eq!(read_to_close(&mut half_preface).await, "");
        assert!(idle_answer.starts_with("HTTP/1.1 200"), "{idle_answer}");
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_response_may_stream_for_longer_than_the_timeouts() {
        let (addr, _stop, _task) = server().await;
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_to_close(&mut tcp).await;
        assert!(
            answer.contains("tick 0") && answer.contains("tick 9"),
            "{answer}"
        );
    }

    #[tokio::test]
    async fn shutdown_lets_connections_finish_and_returns() {
        let (addr, stop, task) = server().await;
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut first = [0u8; 12];
        tcp.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"HTTP/1.1 200");
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("serve returns once its connections are done")
            .unwrap();
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
    }
}
