//! `control_plane.idle_timeout_sec`: a gRPC connection without a call or
//! stream in flight for that long is asked to finish (GOAWAY) and closed by
//! the control plane, and its client's next call opens a new one without
//! failing. A connection busy with calls, or holding a stream (a session's
//! events) without calls, stays open however long that lasts.

use crate::common::*;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A client's TCP connection that counts, in `ended`, its end: the end of
/// its stream (the control plane closed it), or the client letting go of
/// it (the connection is over: tonic's client drops a connection it has
/// been asked to finish once its streams are done, without reading on).
struct Watched {
    tcp: tokio::net::TcpStream,
    ended: Arc<AtomicUsize>,
    seen_end: bool,
}

impl Watched {
    fn end(&mut self) {
        if !self.seen_end {
            self.seen_end = true;
            self.ended.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.end();
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() == before {
            self.end();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// Connections opened and ended so far.
#[derive(Clone, Default)]
struct Counts {
    opened: Arc<AtomicUsize>,
    ended: Arc<AtomicUsize>,
}

impl Counts {
    fn get(&self) -> (usize, usize) {
        (
            self.opened.load(Ordering::SeqCst),
            self.ended.load(Ordering::SeqCst),
        )
    }
}

/// An engine client on one channel to `endpoint` whose connections are
/// counted.
async fn counted_engine(
    endpoint: &str,
    counts: &Counts,
) -> EngineServiceClient<tonic::transport::Channel> {
    let counts = counts.clone();
    let addr = endpoint.trim_start_matches("http://").to_owned();
    let connector = tower::service_fn(move |_: http::Uri| {
        let (counts, addr) = (counts.clone(), addr.clone());
        async move {
            let tcp = tokio::net::TcpStream::connect(addr).await?;
            counts.opened.fetch_add(1, Ordering::SeqCst);
            let watched = Watched {
                tcp,
                ended: counts.ended.clone(),
                seen_end: false,
            };
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(watched))
        }
    });
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .unwrap()
        .connect_with_connector(connector)
        .await
        .expect("connect");
    EngineServiceClient::new(channel)
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_grpc_connections_are_closed_and_busy_ones_kept() {
    let _heavy = HEAVY.lock().await;
    let reference = switchyard_test_support::reference_server_bin();
    let gw = Gateway::start_stdio_configured(
        "orders",
        &reference,
        &["--era", "2026-07-28"],
        "idle_timeout_sec = 1\n",
    )
    .await;
    let counts = Counts::default();
    let mut engine = counted_engine(&gw.endpoint, &counts).await;
    let session = auto_session(&mut engine, &[]).await;

    // Calls 200 ms apart for four times the idle timeout: one connection.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        get_order(&mut engine, "orders__get_order", &session)
            .await
            .unwrap_or_else(|e| panic!("a call at {:?}: {e:?}", started.elapsed()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(counts.get(), (1, 0), "(opened, ended) while busy");

    // Left idle, it is closed; the next call opens a new one, and works.
    eventually("the idle connection ended", LIMIT, || {
        let (opened, ended) = counts.get();
        async move {
            if ended == opened {
                Ok(())
            } else {
                Err(format!("{opened} opened, {ended} ended"))
            }
        }
    })
    .await;
    get_order(&mut engine, "orders__get_order", &session)
        .await
        .expect("a call after the idle connection closed");
    assert_eq!(counts.get(), (2, 1));

    // A stream in flight, without calls, keeps its connection for four
    // times the idle timeout, and still delivers.
    let mut events = engine
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: session.clone(),
            ..Default::default()
        })
        .await
        .expect("SubscribeEvents")
        .into_inner();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(counts.get(), (2, 1), "(opened, ended) with a stream open");
    ok_stdout(
        &gw.cli(&["policy", "set", "orders", "get_order", "confirm"])
            .await,
        "policy set",
    );
    let changed = loop {
        let ev = tokio::time::timeout(LIMIT, events.message())
            .await
            .expect("an event in time")
            .expect("the stream lives on")
            .expect("the stream has not ended");
        if ev.r#type == "tools.changed" {
            break ev;
        }
    };
    assert!(changed.data_json.contains("settings"), "{changed:?}");
    assert_eq!(counts.get(), (2, 1));
    // The sidecar stayed registered through all of it.
    gw.wait_servers_up(&["orders"], LIMIT).await;
}
