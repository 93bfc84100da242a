//! Serving an axum router on a TCP listener with the limits a listener
//! open to untrusted clients needs and that `axum::serve` does not set:
//!
//! - a request's header block must arrive within [`HEADER_READ_TIMEOUT`]
//!   (HTTP/1.1; hyper closes the connection otherwise), which also ends a
//!   kept-alive connection that sends nothing for that long; before, a
//!   client could hold a connection, and its file descriptor, forever with
//!   a half-sent request;
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
//! served, in clear text or over TLS ([`serve_tls`]). On shutdown the
//! listener closes, every connection is asked to finish gracefully, and
//! [`serve`] returns once they have.

use crate::connections::{ConnectionLimit, accept_with_peer};
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// How long a request's header block may take to arrive, and how long a
/// kept-alive HTTP/1.1 connection may stay silent.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How often an HTTP/2 connection is pinged, and how long an answer may
/// take.
pub const HTTP2_KEEP_ALIVE: Duration = Duration::from_secs(30);

/// The timeouts of [`serve_with`].
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// See [`HTTP2_KEEP_ALIVE`].
    pub http2_keep_alive: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            http2_keep_alive: HTTP2_KEEP_ALIVE,
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
    serve_inner(listener, app, connections, limits, None, shutdown).await;
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
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    serve_inner(
        listener,
        app,
        connections,
        Limits::default(),
        Some(acceptor),
        shutdown,
    )
    .await;
}

/// How long a TLS handshake may take.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

async fn serve_inner(
    listener: TcpListener,
    app: axum::Router,
    connections: Arc<ConnectionLimit>,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
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
            permit = connections.acquire() => permit,
            () = &mut shutdown => break,
        };
        let service = tower::ServiceExt::map_request(
            app.clone(),
            move |mut req: http::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req
            },
        );
        let stop = stop_rx.clone();
        let done = done_rx.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let service = TowerToHyperService::new(service);
            match tls {
                None => connection(tcp, service, limits, stop, what).await,
                Some(acceptor) => {
                    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => connection(stream, service, limits, stop, what).await,
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

/// Serves one connection until it ends, finishing gracefully once `stop`
/// changes.
async fn connection<IO, S>(
    io: IO,
    service: S,
    limits: Limits,
    mut stop: watch::Receiver<()>,
    what: &'static str,
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
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.http2_keep_alive)
        .keep_alive_timeout(limits.http2_keep_alive);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let mut stopping = false;
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
        }
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
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route(
                "/",
                axum::routing::get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                    peer.to_string()
                }),
            )
            // Ten chunks 300 ms apart: a stream outlasting the timeouts.
            .route(
                "/stream",
                axum::routing::get(|| async {
                    let ticks = ticks();
                    axum::body::Body::from_stream(ticks)
                }),
            );
        let limits = Limits {
            header_read_timeout: Duration::from_secs(1),
            http2_keep_alive: Duration::from_secs(1),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve_with(listener, app, limit, limits, async move {
            let _ = rx.await;
        }));
        (addr, tx, task)
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
