//! Shutdown: SIGINT or SIGTERM ([`Signals`]) starts it, a second one
//! hurries it (calls cancelled at once, [`HURRIED_GRACE`] per step), and
//! `shutdown` stops the service in order: not ready, `draining` reported
//! to the control plane, calls still accepted for [`DRAIN_NOTICE`], then
//! no new calls, the running ones (foreground calls, and held wait-mode
//! background calls) drained within the grace period (then
//! cancelled, and their unanswered questions' cards closed), the upstream
//! server stopped, the HTTP endpoints last.

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

/// How long the shutdown waits for the cards of cancelled calls to close.
const CARDS_FLUSH: Duration = Duration::from_secs(2);

/// Each stop step's grace once a second signal came: the calls still
/// running are cancelled at once, and the server gets this long to exit.
pub const HURRIED_GRACE: Duration = Duration::from_millis(500);

/// SIGINT and SIGTERM, listened for from the start (before the ready
/// line: a signal that came before the handlers would kill the process
/// with the default action, without a drain) to the end: the first starts
/// the drain, a second one during it stops at once ([`shutdown`]).
pub(super) struct Signals {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the handlers.
    pub(super) fn listen() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for {name}");
                None
            }
        };
        Signals {
            interrupt: listen(SignalKind::interrupt(), "SIGINT"),
            terminate: listen(SignalKind::terminate(), "SIGTERM"),
        }
    }

    /// The next SIGINT or SIGTERM; its name.
    pub(super) async fn recv(&mut self) -> &'static str {
        async fn one(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = one(&mut self.interrupt) => "SIGINT",
            _ = one(&mut self.terminate) => "SIGTERM",
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
    pub grpc: JoinHandle<Result<(), std::io::Error>>,
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
    /// Closes the cards of the questions of calls that ended unanswered.
    pub cards: crate::interactions::ControlPlaneInteractions,
    /// The background calls; its held (wait-mode) ones are drained too.
    pub tasks: crate::background::Tasks,
}

/// Stops `running` in order (see the module docs); `grace` bounds the
/// drain of the calls in flight and the upstream server's exit. `failure`:
/// why the service stopped on its own (no notice period then), returned
/// once everything is stopped. A second signal during the drain
/// (`signals`) ends the waiting: the calls still running are cancelled at
/// once and the server gets [`HURRIED_GRACE`] per stop step.
pub(super) async fn shutdown(
    running: Running,
    mut grace: Duration,
    failure: Option<RunError>,
    signals: &mut Signals,
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
        cards,
        tasks,
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
        tokio::select! {
            () = tokio::time::sleep(notice) => {}
            name = signals.recv() => {
                tracing::warn!("{name} again: stopping now");
                grace = HURRIED_GRACE;
            }
        }
    }
    // Stop taking calls and let the running ones finish.
    stop.cancel();
    // The calls in flight: foreground ones (the gRPC server's) and held
    // background ones (wait mode, which end with this process).
    if !grpc.is_finished() || tasks.held() > 0 {
        let mut grpc_done = grpc.is_finished();
        let both = async {
            if !grpc_done {
                let _ = (&mut grpc).await;
                grpc_done = true;
            }
            tasks.held_finished().await;
        };
        let drained = tokio::select! {
            r = tokio::time::timeout(grace, both) => r.is_ok(),
            name = signals.recv() => {
                tracing::warn!("{name} again: stopping now");
                grace = HURRIED_GRACE;
                false
            }
        };
        if drained {
            tracing::info!("in-flight calls drained");
        } else {
            tracing::warn!(
                grace_s = grace.as_secs_f64(),
                "grace period over; cancelling the remaining calls"
            );
            abort.cancel();
            // Their answers (UNAVAILABLE) get a moment to leave.
            if !grpc_done {
                let _ = tokio::time::timeout(Duration::from_millis(500), &mut grpc).await;
            }
            grpc.abort();
        }
    }
    // The cancelled calls' open questions are closed on the control plane
    // (while the report stream still holds the registration).
    cards.flush(CARDS_FLUSH).await;
    // The `tasks/cancel` of the cancelled calls' tasks go out before the
    // sessions end (an HTTP server's DELETE must not overtake them).
    tasks.cancels_sent(CARDS_FLUSH).await;
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
