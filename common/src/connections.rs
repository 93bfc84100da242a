//! How many connections a listener serves at once: a [`ConnectionLimit`]
//! per listener, a place taken by each accepted connection and given back
//! when it closes.
//!
//! At the limit a listener stops serving new connections: the next one is
//! accepted and held, unanswered, and those after it wait in the kernel's
//! backlog, until a connection closes; then they are served in turn (no
//! error is sent; a client sees a slow answer, and its own timeout). Each
//! connection that has to wait is counted by the limit's `on_wait` hook
//! (the control plane's metric), and the limit logs a WARN, at most once a
//! minute per listener, naming the clients with the most open connections.
//!
//! So that a place is not held forever by a peer that does nothing, every
//! connection must send its first bytes in time ([`first_bytes`]), and a
//! write that waits for the peer to read fails after
//! [`WRITE_STALL_TIMEOUT`] ([`Accepted`]); the header, keep-alive and idle
//! timeouts of [`crate::http_serve`] bound the rest for HTTP. A gRPC
//! listener with [`Admissions`] also closes a connection that has carried
//! no request its guard admitted within [`ADMISSION_TIMEOUT`] of being
//! accepted: one that only sends refused calls, or, over TLS, nothing after
//! its handshake, holds no place for long.
//!
//! [`ConnectionLimit::incoming`] is the accept loop for tonic's
//! `serve_with_incoming*` (the sidecar's gRPC listener);
//! [`crate::http_serve`] takes a limit for the HTTP listeners and the
//! control plane's gRPC listener. [`raise_open_files_limit`] makes room
//! for the places.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default number of connections a listener open to engines holds at
/// once (the gRPC listener and the MCP endpoint; configurable there).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// The number of connections the other listeners hold at once: the HTTP
/// listeners for metrics, health, the OAuth callback and the console, and
/// each sidecar's gRPC listener (its callers are control plane replicas).
pub const INTERNAL_MAX_CONNECTIONS: usize = 1024;

/// Raises the process's soft limit of open files to its hard limit (at
/// most 1 Mi), as
/// the connection limits assume many descriptors (a soft limit of 1024 is
/// common, and far below the defaults' sum); logs a WARN when the result
/// is below `needed`. Returns the soft limit in force afterwards, `None`
/// where it cannot be read.
pub fn raise_open_files_limit(needed: u64) -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    // An unlimited hard limit is capped by the kernel's `nr_open` (1 Mi by
    // default); ask no more than that.
    let target = hard.min(1 << 20);
    let soft = if soft < target {
        match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
            Ok(()) => target,
            Err(e) => {
                tracing::debug!(error = %e, soft, hard, "could not raise the open-files limit");
                soft
            }
        }
    } else {
        soft
    };
    if soft < needed {
        tracing::warn!(
            limit = soft,
            needed,
            "the open-files limit is below the listeners' connection limits: at it, accepting a connection fails until one closes (raise `ulimit -n`, or lower max_connections)"
        );
    }
    Some(soft)
}

/// How often, at most, a listener logs that it is at its limit.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// How many clients the limit WARN names: those with the most open
/// connections.
const WARN_CLIENTS: usize = 3;

/// The open connections of one listener, and their limit.
pub struct ConnectionLimit {
    what: &'static str,
    max: usize,
    permits: Arc<Semaphore>,
    /// Open connections by client address, for the limit WARN.
    by_client: Arc<Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
    last_warn: Mutex<Option<Instant>>,
    on_wait: Option<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for ConnectionLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionLimit")
            .field("what", &self.what)
            .field("max", &self.max)
            .field("open", &self.open())
            .finish()
    }
}

/// One accepted connection's place under its listener's limit; dropping
/// it gives the place back.
#[derive(Debug)]
pub struct ConnectionPermit {
    _permit: OwnedSemaphorePermit,
    client: std::net::IpAddr,
    by_client: Arc<Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

impl Drop for ConnectionPermit {
    fn drop(&mut self) {
        let mut by_client = self.by_client.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = by_client.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                by_client.remove(&self.client);
            }
        }
    }
}

impl ConnectionLimit {
    /// A limit of `max` connections (at least 1) for the listener `what`
    /// (named in logs and metrics).
    pub fn new(what: &'static str, max: usize) -> Self {
        let max = max.max(1);
        ConnectionLimit {
            what,
            max,
            permits: Arc::new(Semaphore::new(max)),
            by_client: Arc::default(),
            last_warn: Mutex::new(None),
            on_wait: None,
        }
    }

    /// Calls `hook` each time a connection has to wait for a place.
    #[must_use]
    pub fn on_wait(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_wait = Some(Box::new(hook));
        self
    }

    /// The listener's name.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// The limit.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.max - self.permits.available_permits()
    }

    /// The clients with the most open connections, most first (at most
    /// `n`), as `ADDRESS (COUNT)`.
    fn busiest_clients(&self, n: usize) -> String {
        let by_client = self.by_client.lock().unwrap_or_else(|e| e.into_inner());
        let mut counts: Vec<(std::net::IpAddr, usize)> =
            by_client.iter().map(|(ip, n)| (*ip, *n)).collect();
        drop(by_client);
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        counts
            .iter()
            .take(n)
            .map(|(ip, n)| format!("{ip} ({n})"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Its place, counted for `client`.
    fn permit(&self, permit: OwnedSemaphorePermit, client: std::net::IpAddr) -> ConnectionPermit {
        *self
            .by_client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(client)
            .or_default() += 1;
        ConnectionPermit {
            _permit: permit,
            client,
            by_client: self.by_client.clone(),
        }
    }

    /// A place for a connection from `client` just accepted: at once while
    /// under the limit; otherwise, after the hook and the WARN (module
    /// docs; it names the clients with the most connections), once a
    /// connection closes.
    pub async fn acquire(&self, client: std::net::IpAddr) -> ConnectionPermit {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return self.permit(permit, client);
        }
        if let Some(hook) = &self.on_wait {
            hook();
        }
        let warn = {
            let mut last = self.last_warn.lock().unwrap_or_else(|e| e.into_inner());
            let due = last.is_none_or(|at| at.elapsed() >= WARN_EVERY);
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        if warn {
            tracing::warn!(
                listener = self.what,
                max = self.max,
                busiest_clients = %self.busiest_clients(WARN_CLIENTS),
                "connection limit reached: new connections wait until one closes"
            );
        }
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        self.permit(permit, client)
    }

    /// Accepts connections on `listener`, one place each (module docs), with
    /// `TCP_NODELAY` set, for tonic's `serve_with_incoming*`: each is
    /// handed on once its first bytes came within `within` (say
    /// [`FIRST_BYTES_TIMEOUT`]; [`first_bytes`]: one that sends nothing is
    /// closed, and meanwhile the others are handed on). A failed
    /// `accept` (out of file descriptors, say) is logged and retried a
    /// moment later; the stream never ends or yields an error. Dropping
    /// the stream closes the listener. With `admissions`, each connection
    /// must also be admitted in time ([`Admissions`]).
    pub fn incoming(
        self: Arc<Self>,
        listener: TcpListener,
        within: Duration,
        admissions: Option<Arc<Admissions>>,
    ) -> impl futures::Stream<Item = io::Result<Accepted<TcpStream>>> + Send + 'static {
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let limit = self;
        tokio::spawn(async move {
            loop {
                let (tcp, peer) = tokio::select! {
                    accepted = accept_with_peer(&listener, limit.what) => accepted,
                    () = tx.closed() => return,
                };
                let permit = tokio::select! {
                    permit = limit.acquire(peer.ip()) => permit,
                    () = tx.closed() => return,
                };
                let tx = tx.clone();
                let what = limit.what;
                let admission = admissions.as_ref().map(|a| a.watch(peer));
                // Waiting for its first bytes does not hold up the others.
                tokio::spawn(async move {
                    match first_bytes(tcp, within).await {
                        Ok(mut io) => {
                            io.permit = Some(permit);
                            io.admission = admission;
                            let _ = tx.send(Ok(io)).await;
                        }
                        Err(e) => {
                            tracing::debug!(listener = what, error = %e, "connection closed before its first bytes");
                        }
                    }
                });
            }
        });
        futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
    }
}

/// How long after being accepted a connection of a listener with
/// [`Admissions`] may go without a request its guard admitted.
pub const ADMISSION_TIMEOUT: Duration = Duration::from_secs(30);

/// The connections of one gRPC listener that have not yet carried an
/// admitted request, by the peer's address (unique among a listener's
/// open connections). The listener's guard calls [`Admissions::admit`]
/// with each request's remote address (tonic's `Request::remote_addr`);
/// a connection not admitted within the timeout fails its next read
/// (`TimedOut`), and closes. Once admitted, a connection is no longer
/// watched. While no connection waits, [`Admissions::admit`] takes no
/// lock (one atomic load).
#[derive(Debug)]
pub struct Admissions {
    within: Duration,
    waiting: Mutex<std::collections::HashMap<std::net::SocketAddr, Arc<AtomicBool>>>,
    /// `waiting.len()`, changed only under its lock.
    count: AtomicUsize,
}

impl Admissions {
    /// Connections must be admitted `within` of being accepted (say
    /// [`ADMISSION_TIMEOUT`]).
    pub fn new(within: Duration) -> Arc<Self> {
        Arc::new(Admissions {
            within,
            waiting: Mutex::new(std::collections::HashMap::new()),
            count: AtomicUsize::new(0),
        })
    }

    /// The connection from `peer` carried an admitted request.
    pub fn admit(&self, peer: std::net::SocketAddr) {
        // A connection is watched before it carries any request, so one
        // that waits is counted before its first request gets here.
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(admitted) = waiting.remove(&peer) {
            admitted.store(true, Ordering::Relaxed);
            self.count.store(waiting.len(), Ordering::Release);
        }
    }

    /// Connections accepted and not admitted yet.
    pub fn waiting(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Watches the connection from `peer`, accepted now, until the
    /// returned [`Admission`] is dropped ([`ConnectionLimit::incoming`]
    /// keeps it with the connection).
    pub fn watch(self: &Arc<Self>, peer: std::net::SocketAddr) -> Admission {
        let admitted = Arc::new(AtomicBool::new(false));
        let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.insert(peer, admitted.clone());
        self.count.store(waiting.len(), Ordering::Release);
        drop(waiting);
        Admission {
            admitted,
            deadline: Box::pin(tokio::time::sleep(self.within)),
            admissions: self.clone(),
            peer,
        }
    }
}

/// One connection waiting to be admitted ([`Admissions`]); dropping it
/// forgets the connection.
#[derive(Debug)]
pub struct Admission {
    admitted: Arc<AtomicBool>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    admissions: Arc<Admissions>,
    peer: std::net::SocketAddr,
}

impl Drop for Admission {
    fn drop(&mut self) {
        let mut waiting = self
            .admissions
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if waiting
            .get(&self.peer)
            .is_some_and(|a| Arc::ptr_eq(a, &self.admitted))
        {
            waiting.remove(&self.peer);
            self.admissions
                .count
                .store(waiting.len(), Ordering::Release);
        }
    }
}

/// How long a new connection may take to send its first bytes (the gRPC
/// listeners; [`crate::http_serve`] uses its header timeout).
pub const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(30);

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads a new connection's first bytes within `within`: until they are
/// the whole HTTP/2 connection preface or differ from it (an HTTP/1.1
/// request line, a TLS ClientHello). hyper's servers wait for the preface
/// without a timer, so a connection that sends nothing, or stops inside
/// the preface, would hold its place forever; it is closed instead. The
/// bytes read are replayed to whoever reads the returned stream. Errors:
/// the time passed (`TimedOut`), the peer closed (`UnexpectedEof`), or
/// the read failed.
pub async fn first_bytes<IO: AsyncRead + Unpin>(
    mut io: IO,
    within: Duration,
) -> io::Result<Accepted<IO>> {
    use tokio::io::AsyncReadExt;
    let mut prefix = Vec::with_capacity(H2_PREFACE.len());
    let read = async {
        let mut chunk = [0u8; H2_PREFACE.len()];
        loop {
            let want = H2_PREFACE.len() - prefix.len();
            let n = io.read(&mut chunk[..want]).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before its first bytes",
                ));
            }
            prefix.extend_from_slice(&chunk[..n]);
            if prefix.len() == H2_PREFACE.len() || !H2_PREFACE.starts_with(&prefix) {
                return Ok(());
            }
        }
    };
    match tokio::time::timeout(within, read).await {
        Ok(Ok(())) => Ok(Accepted {
            prefix,
            pos: 0,
            io,
            permit: None,
            admission: None,
            write_timeout: WRITE_STALL_TIMEOUT,
            stalled: None,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("sent no request within {within:?}"),
        )),
    }
}

/// How long a write may wait for the peer to read (its receive window
/// full) before it fails and the connection is closed: a client that
/// sends requests but never reads the answers would otherwise hold its
/// connection, and its place, forever.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection whose first bytes [`first_bytes`] read: they are read
/// again first, then the rest. A write that cannot progress for
/// [`WRITE_STALL_TIMEOUT`] fails (`TimedOut`). From
/// [`ConnectionLimit::incoming`], it holds its place under the limit until
/// dropped.
#[derive(Debug)]
pub struct Accepted<IO> {
    prefix: Vec<u8>,
    pos: usize,
    io: IO,
    permit: Option<ConnectionPermit>,
    /// Until the connection is admitted ([`Admissions`]).
    admission: Option<Admission>,
    write_timeout: Duration,
    /// Since the current write began to wait.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<IO> Accepted<IO> {
    /// With another write stall timeout than [`WRITE_STALL_TIMEOUT`].
    #[must_use]
    pub fn with_write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Closed unless admitted in time (`admission`, from
    /// [`Admissions::watch`]; `None`: not watched).
    #[must_use]
    pub fn with_admission(mut self, admission: Option<Admission>) -> Self {
        self.admission = admission;
        self
    }

    /// `polled`, a write's poll, failed once it has waited for the peer
    /// for the write timeout.
    fn stall<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        use std::future::Future;
        match polled {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let timeout = self.write_timeout;
                let sleep = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the peer read nothing for {timeout:?}"),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Accepted<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        use std::future::Future;
        if let Some(a) = &mut self.admission {
            if a.admitted.load(Ordering::Relaxed) {
                self.admission = None;
            } else if a.deadline.as_mut().poll(cx).is_ready() {
                let within = a.admissions.within;
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no request admitted within {within:?}"),
                )));
            }
        }
        if self.pos < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.pos);
            let start = self.pos;
            buf.put_slice(&self.prefix[start..start + n]);
            self.pos += n;
            if self.pos == self.prefix.len() {
                self.prefix = Vec::new();
                self.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Accepted<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.stall(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.stall(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.stall(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.stall(cx, polled)
    }
}

impl<IO: tonic::transport::server::Connected> tonic::transport::server::Connected for Accepted<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// How many bytes a socket may hold that it has not sent yet before a
/// write waits (`TCP_NOTSENT_LOWAT`, set on every accepted connection).
/// Without it the kernel lets a writer wait until a large part of its send
/// buffer (autotuned up to 4 MiB) has drained, so a peer reading slowly but
/// steadily (under about 30 KB/s) looked like one that stopped for
/// [`WRITE_STALL_TIMEOUT`]; with it, a write waits only while the peer
/// reads less than this in that time.
pub const NOT_SENT_LOW_WATER: u32 = 128 * 1024;

/// The next connection on `listener`, with `TCP_NODELAY` set (small
/// responses must not wait for the peer's delayed ACK) and
/// [`NOT_SENT_LOW_WATER`]; accept errors are retried after 200 ms, and
/// logged at most once every 10 s.
pub async fn accept(listener: &TcpListener, what: &'static str) -> TcpStream {
    accept_with_peer(listener, what).await.0
}

/// [`accept`], with the peer's address.
pub async fn accept_with_peer(
    listener: &TcpListener,
    what: &'static str,
) -> (TcpStream, std::net::SocketAddr) {
    let mut warned: Option<Instant> = None;
    let mut failed = 0u64;
    loop {
        match listener.accept().await {
            Ok((tcp, peer)) => {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(listener = what, error = %e, "TCP_NODELAY");
                }
                if let Err(e) =
                    socket2::SockRef::from(&tcp).set_tcp_notsent_lowat(NOT_SENT_LOW_WATER)
                {
                    tracing::debug!(listener = what, error = %e, "TCP_NOTSENT_LOWAT");
                }
                return (tcp, peer);
            }
            Err(e) => {
                // At most one line every 10 s while accepting keeps failing.
                failed += 1;
                if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
                    warned = Some(Instant::now());
                    tracing::warn!(listener = what, error = %e, failed, "could not accept a connection; trying again in a moment");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn the_limit_warn_names_the_clients_with_the_most_connections() {
        let limit = ConnectionLimit::new("test", 10);
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let mut held = Vec::new();
        for (client, n) in [
            ("10.0.0.1", 3),
            ("10.0.0.2", 1),
            ("10.0.0.3", 2),
            ("::1", 1),
        ] {
            for _ in 0..n {
                held.push((client, limit.acquire(ip(client)).await));
            }
        }
        assert_eq!(
            limit.busiest_clients(3),
            "10.0.0.1 (3), 10.0.0.3 (2), 10.0.0.2 (1)"
        );
        held.retain(|(client, _)| *client != "10.0.0.1");
        assert_eq!(
            limit.busiest_clients(3),
            "10.0.0.3 (2), 10.0.0.2 (1), ::1 (1)"
        );
        assert_eq!(limit.open(), 4);
        drop(held);
        assert_eq!(limit.busiest_clients(3), "");
        assert!(limit.by_client.lock().unwrap().is_empty());
        assert_eq!(limit.open(), 0);
    }

    #[tokio::test]
    async fn a_listener_at_its_limit_accepts_again_once_a_connection_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let waits = Arc::new(AtomicUsize::new(0));
        let counted = waits.clone();
        let limit = Arc::new(ConnectionLimit::new("test", 2).on_wait(move || {
            counted.fetch_add(1, Ordering::Relaxed);
        }));
        let mut incoming = Box::pin(limit.clone().incoming(listener, FIRST_BYTES_TIMEOUT, None));

        let connect = || async {
            let mut c = TcpStream::connect(addr).await.unwrap();
            tokio::io::AsyncWriteExt::write_all(&mut c, b"GET / HTTP/1.1\r\n")
                .await
                .unwrap();
            c
        };
        let _c1 = connect().await;
        let _c2 = connect().await;
        let s1 = incoming.next().await.unwrap().unwrap();
        let s2 = incoming.next().await.unwrap().unwrap();
        assert_eq!(limit.open(), 2);
        assert_eq!(waits.load(Ordering::Relaxed), 0);

        // The third connects but is not handed on.
        let _c3 = connect().await;
        let third = tokio::time::timeout(Duration::from_millis(300), incoming.next()).await;
        assert!(
            third.is_err(),
            "a third connection was accepted at a limit of 2"
        );
        assert_eq!(waits.load(Ordering::Relaxed), 1);

        // One closes: its place goes straight to the waiting accept, and the
        // third is accepted.
        drop(s1);
        let s3 = tokio::time::timeout(Duration::from_secs(5), incoming.next())
            .await
            .expect("the waiting connection was accepted")
            .unwrap()
            .unwrap();
        assert_eq!(limit.open(), 2);
        drop((s2, s3));
        assert_eq!(limit.open(), 0);
    }

    #[tokio::test]
    async fn a_limited_connection_carries_bytes_both_ways() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limit = Arc::new(ConnectionLimit::new("test", 1));
        let mut incoming = Box::pin(limit.clone().incoming(listener, FIRST_BYTES_TIMEOUT, None));
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut server = incoming.next().await.unwrap().unwrap();
        use tonic::transport::server::Connected;
        assert_eq!(
            server.connect_info().remote_addr(),
            Some(client.local_addr().unwrap())
        );
        let mut buf = [0u8; 4];
        server.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        server.write_all(b"pong").await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
    }

    #[tokio::test]
    async fn a_silent_connection_holds_up_no_other_and_gives_its_place_back() {
        use tokio::io::AsyncWriteExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limit = Arc::new(ConnectionLimit::new("test", 2));
        let mut incoming = Box::pin(limit.clone().incoming(
            listener,
            Duration::from_millis(500),
            None,
        ));
        let _silent = TcpStream::connect(addr).await.unwrap();
        let mut talker = TcpStream::connect(addr).await.unwrap();
        talker.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        // The talker is handed on while the silent one still waits.
        let first = tokio::time::timeout(Duration::from_millis(400), incoming.next())
            .await
            .expect("the talker is handed on at once")
            .unwrap()
            .unwrap();
        assert_eq!(limit.open(), 2);
        // The silent one is closed, its place given back; nothing else
        // comes out of the stream.
        let started = Instant::now();
        while limit.open() > 1 && started.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(limit.open(), 1);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), incoming.next())
                .await
                .is_err()
        );
        drop(first);
        assert_eq!(limit.open(), 0);
    }

    #[tokio::test]
    async fn a_write_the_peer_never_reads_fails_after_the_stall_timeout() {
        use tokio::io::AsyncWriteExt;
        // A client that sent a request line, and the server's side of it
        // with the write stall timeout `stall`.
        async fn pair(stall: Duration) -> (TcpStream, Accepted<TcpStream>) {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (server, _) = listener.accept().await.unwrap();
            client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
            let server = first_bytes(server, Duration::from_secs(5))
                .await
                .unwrap()
                .with_write_timeout(stall);
            (client, server)
        }
        let (_client, mut server) = pair(Duration::from_millis(300)).await;
        // The client reads nothing: the socket buffers fill, then the
        // write waits, then fails.
        let chunk = vec![0u8; 64 * 1024];
        let started = Instant::now();
        let e = loop {
            match tokio::time::timeout(Duration::from_secs(10), server.write_all(&chunk)).await {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => break e,
                Err(_) => panic!("the write waited more than 10 s"),
            }
        };
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // A peer that reads, slowly (pauses far shorter than the timeout),
        // keeps the writes going however long they take in all.
        let (mut client, mut server) = pair(Duration::from_secs(5)).await;
        const TOTAL: usize = 8 * 1024 * 1024;
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 256 * 1024];
            let mut total = 0usize;
            while total < TOTAL {
                let n = tokio::io::AsyncReadExt::read(&mut client, &mut buf)
                    .await
                    .unwrap();
                assert!(n > 0, "closed after {total} bytes");
                total += n;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            total
        });
        for _ in 0..TOTAL / chunk.len() {
            server
                .write_all(&chunk)
                .await
                .expect("a slow reader is not cut");
        }
        assert_eq!(reader.await.unwrap(), TOTAL);
    }

    #[tokio::test]
    async fn a_connection_not_admitted_in_time_is_closed_and_forgotten() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limit = Arc::new(ConnectionLimit::new("test", 4));
        let admissions = Admissions::new(Duration::from_millis(300));
        let mut incoming = Box::pin(limit.clone().incoming(
            listener,
            FIRST_BYTES_TIMEOUT,
            Some(admissions.clone()),
        ));
        // Two connections that send their first bytes; the server reads
        // each (as hyper would, always).
        let mut refused = TcpStream::connect(addr).await.unwrap();
        let mut admitted = TcpStream::connect(addr).await.unwrap();
        let admitted_peer = admitted.local_addr().unwrap();
        for c in [&mut refused, &mut admitted] {
            c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                .await
                .unwrap();
        }
        let mut served = Vec::new();
        for _ in 0..2 {
            let io = incoming.next().await.unwrap().unwrap();
            served.push(tokio::spawn(async move {
                let mut io = io;
                let mut buf = [0u8; 64];
                let started = Instant::now();
                loop {
                    match io.read(&mut buf).await {
                        Ok(0) => return (Ok(()), started.elapsed()),
                        Ok(_) => {}
                        Err(e) => return (Err(e.kind()), started.elapsed()),
                    }
                }
            }));
        }
        assert_eq!(admissions.waiting(), 2);
        admissions.admit(admitted_peer);
        assert_eq!(admissions.waiting(), 1);
        // The other one fails its read at the deadline, and is forgotten
        // once dropped; the admitted one reads on.
        let mut results = Vec::new();
        for task in served {
            if let Ok(done) = tokio::time::timeout(Duration::from_secs(2), task).await {
                results.push(done.unwrap());
            }
        }
        assert_eq!(results.len(), 1, "{results:?}");
        assert_eq!(results[0].0, Err(io::ErrorKind::TimedOut));
        assert!(results[0].1 < Duration::from_secs(1), "{:?}", results[0].1);
        assert_eq!(admissions.waiting(), 0);
        assert_eq!(limit.open(), 1);
        // An unknown peer admitted changes nothing.
        admissions.admit("127.0.0.1:9".parse().unwrap());
        drop(admitted);
    }

    #[tokio::test]
    async fn a_write_waits_only_until_a_slow_reader_has_taken_a_little() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // A server socket with a 1 MiB send buffer (the kernel makes it 2,
        // as its autotuning would), a client that reads nothing yet.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(64 * 1024).unwrap();
        let mut client = socket
            .connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut server, _) = accept_with_peer(&listener, "test").await;
        socket2::SockRef::from(&server)
            .set_send_buffer_size(1024 * 1024)
            .unwrap();
        // Write until a write waits.
        let chunk = vec![0u8; 64 * 1024];
        loop {
            let write = server.write_all(&chunk);
            if tokio::time::timeout(Duration::from_millis(300), write)
                .await
                .is_err()
            {
                break;
            }
        }
        // The client now reads 8 KiB every 50 ms (160 KiB/s): the next
        // write goes through once it has read about 64 KiB, not once half
        // the send buffer (1 MiB, 6 s) has drained.
        let reader = tokio::spawn(async move {
            let mut buf = vec![0u8; 8 * 1024];
            loop {
                if client.read_exact(&mut buf).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let started = Instant::now();
        server.write_all(&chunk[..1]).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the write waited {:?}",
            started.elapsed()
        );
        reader.abort();
    }

    #[tokio::test]
    async fn first_bytes_are_awaited_within_the_time_and_replayed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let within = Duration::from_millis(300);
        let pair = || async {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let client = TcpStream::connect(listener.local_addr().unwrap())
                .await
                .unwrap();
            let (server, _) = listener.accept().await.unwrap();
            (client, server)
        };
        // Silence, and a preface that stops half-way: closed.
        let (_client, server) = pair().await;
        let e = first_bytes(server, within).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let (mut client, server) = pair().await;
        client.write_all(&H2_PREFACE[..10]).await.unwrap();
        let e = first_bytes(server, within).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        // Closed at once.
        let (client, server) = pair().await;
        drop(client);
        let e = first_bytes(server, within).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        // HTTP/1.1 goes on at its first byte; the whole preface, sent in
        // pieces, too; everything is read again, then the rest.
        for (first, rest) in [
            (&b"G"[..], &b"ET / HTTP/1.1\r\n\r\n"[..]),
            (&H2_PREFACE[..5], &H2_PREFACE[5..]),
        ] {
            let (mut client, server) = pair().await;
            client.write_all(first).await.unwrap();
            let sender = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                client.write_all(rest).await.unwrap();
                client.write_all(b"+more").await.unwrap();
                client
            });
            let mut io = first_bytes(server, Duration::from_secs(5)).await.unwrap();
            let _client = sender.await.unwrap();
            let mut got = vec![0u8; first.len() + rest.len() + 5];
            io.read_exact(&mut got).await.unwrap();
            assert_eq!(got, [first, rest, b"+more"].concat());
        }
    }

    #[test]
    fn the_open_files_limit_is_raised_to_the_hard_limit() {
        use nix::sys::resource::{Resource, getrlimit};
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let expected = soft.max(hard.min(1 << 20));
        assert_eq!(raise_open_files_limit(0), Some(expected));
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap().0, expected);
    }

    #[test]
    fn a_limit_is_at_least_one() {
        assert_eq!(ConnectionLimit::new("test", 0).max(), 1);
    }
}
