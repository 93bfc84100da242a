//! Shutdown: SIGINT or SIGTERM (`shutdown_signal`) starts it, and
//! `shutdown` stops the service in order: not ready, `draining` reported
//! to the control plane, calls still accepted for [`DRAIN_NOTICE`], then
//! no new calls, the running ones drained within the grace period (then
//! cancelled), the upstream server stopped, the HTTP endpoints last.

use super::settings::RunError;
use crate::http_endpoints::Health;
use crate::pool::SessionPool;
use crate::upstream::Upstream;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long the sidecar keeps accepting new calls after it reported
/// `draining` on shutdown (capped at the drain grace period): time for the
/// control plane to store the report and for every replica to stop routing
/// here, so calls routed meanwhile are still served rather than refused.
pub const DRAIN_NOTICE: Duration = Duration::from_secs(1);

/// Listens for SIGINT and SIGTERM at once (before the ready line: a
/// signal that came before the handlers would kill the process with the
/// default action, without a drain); the future resolves on either.
pub(super) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    let listen = |kind: SignalKind, name: &str| match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for {name}");
            None
        }
    };
    let mut interrupt = listen(SignalKind::interrupt(), "SIGINT");
    let mut terminate = listen(SignalKind::terminate(), "SIGTERM");
    async fn recv(s: &mut Option<Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    async move {
        tokio::select! {
            _ = recv(&mut interrupt) => tracing::info!("SIGINT: shutting down"),
            _ = recv(&mut terminate) => tracing::info!("SIGTERM: shutting down"),
        }
    }
}

/// The state reported once the sidecar is shutting down (`UpstreamStatus.state`).
pub const DRAINING: &str = "draining";

/// The shutdown announcement shared by the shutdown path (which calls
/// [`Drain::start`]) and the report stream (which then reports the state
/// [`DRAINING`] instead of the upstream connection's). Cheap to clone; all
/// clones share one flag, and it is never cleared.
#[derive(Debug, Clone)]
pub struct Drain {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain::new()
    }
}

impl Drain {
    /// Not draining.
    pub fn new() -> Self {
        Drain {
            tx: Arc::new(watch::channel(false).0),
        }
    }

    /// Starts draining: the open report stream (and any later one) reports
    /// the state [`DRAINING`] from now on.
    pub fn start(&self) {
        self.tx.send_replace(true);
    }

    /// Whether [`Drain::start`] was called.
    pub fn is_draining(&self) -> bool {
        *self.tx.borrow()
    }

    /// Follows the flag (the report stream).
    pub(super) fn subscribe(&self) -> watch::Receiver<bool> {
        self.tx.subscribe()
    }
}

/// What a running sidecar is made of, as [`shutdown`] stops it.
pub(super) struct Running {
    /// `/readyz` turns not ready first.
    pub health: Arc<Health>,
    /// Makes the report stream say `draining`.
    pub drain: Drain,
    /// Stops the call streams taking new calls.
    pub stop: CancellationToken,
    /// Cancels the calls still running when the grace period is over.
    pub abort: CancellationToken,
    /// The gRPC server (`SidecarCalls`).
    pub grpc: JoinHandle<Result<(), tonic::transport::Error>>,
    /// The report stream.
    pub reporter: JoinHandle<()>,
    /// The per-session connections.
    pub pool: SessionPool,
    /// The shared upstream session.
    pub upstream: Upstream,
    /// The upstream watcher.
    pub watcher: JoinHandle<()>,
    /// Stops the HTTP endpoints.
    pub http_stop: CancellationToken,
    /// The HTTP endpoints' server.
    pub http: JoinHandle<Result<(), std::io::Error>>,
}

/// Stops `running` in order (see the module docs); `grace` bounds the
/// drain of the calls in flight and the upstream server's exit. `failure`:
/// why the service stopped on its own (no notice period then), returned
/// once everything is stopped.
pub(super) async fn shutdown(
    running: Running,
    grace: Duration,
    failure: Option<RunError>,
) -> Result<(), RunError> {
    let Running {
        health,
        drain,
        stop,
        abort,
        mut grpc,
        reporter,
        pool,
        upstream,
        watcher,
        http_stop,
        mut http,
    } = running;
    // Not ready any more, and say so to the control plane (state
    // `draining` on the report stream, which stays open until the drain is
    // over) so it routes new calls to other sidecars.
    health.set_draining();
    drain.start();
    if failure.is_none() {
        // Keep taking the calls routed before the control plane saw it.
        let notice = DRAIN_NOTICE.min(grace);
        tracing::info!(
            notice_ms = notice.as_millis() as u64,
            "reported draining; still accepting calls for the notice period"
        );
        tokio::time::sleep(notice).await;
    }
    // Stop taking calls and let the running ones finish.
    stop.cancel();
    if !grpc.is_finished() {
        match tokio::time::timeout(grace, &mut grpc).await {
            Ok(_) => tracing::info!("in-flight calls drained"),
            Err(_) => {
                tracing::warn!(
                    grace_s = grace.as_secs(),
                    "grace period over; cancelling the remaining calls"
                );
                abort.cancel();
                // Their answers (UNAVAILABLE) get a moment to leave.
                let _ = tokio::time::timeout(Duration::from_millis(500), &mut grpc).await;
                grpc.abort();
            }
        }
    }
    reporter.abort();
    tokio::join!(pool.shutdown(grace), upstream.shutdown(grace));
    watcher.abort();
    http_stop.cancel();
    if !http.is_finished() {
        let _ = tokio::time::timeout(Duration::from_secs(1), &mut http).await;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
