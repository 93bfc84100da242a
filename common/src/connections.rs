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
//! minute per listener. The header and keep-alive timeouts of
//! [`crate::http_serve`] bound how long an idle connection keeps its place.
//!
//! [`ConnectionLimit::incoming`] is the accept loop for tonic's
//! `serve_with_incoming*`; [`crate::http_serve`] takes a limit for the HTTP
//! listeners.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
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

/// The open connections of one listener, and their limit.
pub struct ConnectionLimit {
    what: &'static str,
    max: usize,
    permits: Arc<Semaphore>,
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
pub struct ConnectionPermit(#[allow(dead_code)] OwnedSemaphorePermit);

impl ConnectionLimit {
    /// A limit of `max` connections (at least 1) for the listener `what`
    /// (named in logs and metrics).
    pub fn new(what: &'static str, max: usize) -> Self {
        let max = max.max(1);
        ConnectionLimit {
            what,
            max,
            permits: Arc::new(Semaphore::new(max)),
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

    /// A place for a connection just accepted: at once while under the
    /// limit; otherwise, after the hook and the WARN (module docs), once a
    /// connection closes.
    pub async fn acquire(&self) -> ConnectionPermit {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return ConnectionPermit(permit);
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
                "connection limit reached: new connections wait until one closes"
            );
        }
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        ConnectionPermit(permit)
    }

    /// Accepts connections on `listener`, one place each (module docs), with
    /// `TCP_NODELAY` set, for tonic's `serve_with_incoming*`. A failed
    /// `accept` (out of file descriptors, say) is logged and retried a
    /// moment later; the stream never ends or yields an error.
    pub fn incoming(
        self: Arc<Self>,
        listener: TcpListener,
    ) -> impl futures::Stream<Item = io::Result<Limited<TcpStream>>> + Send + 'static {
        futures::stream::unfold((self, listener), |(limit, listener)| async move {
            let tcp = accept(&listener, limit.what).await;
            let permit = limit.acquire().await;
            Some((Ok(Limited { io: tcp, permit }), (limit, listener)))
        })
    }
}

/// The next connection on `listener`, with `TCP_NODELAY` set (small
/// responses must not wait for the peer's delayed ACK); accept errors are
/// logged and retried after 200 ms.
pub async fn accept(listener: &TcpListener, what: &'static str) -> TcpStream {
    accept_with_peer(listener, what).await.0
}

/// [`accept`], with the peer's address.
pub async fn accept_with_peer(
    listener: &TcpListener,
    what: &'static str,
) -> (TcpStream, std::net::SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((tcp, peer)) => {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(listener = what, error = %e, "TCP_NODELAY");
                }
                return (tcp, peer);
            }
            Err(e) => {
                tracing::warn!(listener = what, error = %e, "could not accept a connection; trying again in a moment");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// A connection holding its place under a [`ConnectionLimit`].
#[derive(Debug)]
pub struct Limited<IO> {
    io: IO,
    #[allow(dead_code)]
    permit: ConnectionPermit,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Limited<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Limited<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<IO: tonic::transport::server::Connected> tonic::transport::server::Connected for Limited<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_listener_at_its_limit_accepts_again_once_a_connection_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let waits = Arc::new(AtomicUsize::new(0));
        let counted = waits.clone();
        let limit = Arc::new(ConnectionLimit::new("test", 2).on_wait(move || {
            counted.fetch_add(1, Ordering::Relaxed);
        }));
        let mut incoming = Box::pin(limit.clone().incoming(listener));

        let _c1 = TcpStream::connect(addr).await.unwrap();
        let _c2 = TcpStream::connect(addr).await.unwrap();
        let s1 = incoming.next().await.unwrap().unwrap();
        let s2 = incoming.next().await.unwrap().unwrap();
        assert_eq!(limit.open(), 2);
        assert_eq!(waits.load(Ordering::Relaxed), 0);

        // The third connects but is not handed on.
        let _c3 = TcpStream::connect(addr).await.unwrap();
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
        let mut incoming = Box::pin(limit.clone().incoming(listener));
        let mut client = TcpStream::connect(addr).await.unwrap();
        let mut server = incoming.next().await.unwrap().unwrap();
        use tonic::transport::server::Connected;
        assert_eq!(
            server.connect_info().remote_addr(),
            Some(client.local_addr().unwrap())
        );
        client.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        server.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        server.write_all(b"pong").await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
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
