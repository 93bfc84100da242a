//! The metrics of background calls:
//! `switchyard_sidecar_task_polls_total{server,outcome}` (`tasks/get`
//! polls) and the gauge `switchyard_sidecar_background_calls{server,mode,status}`
//! (the calls this sidecar polls or holds, kept by one `LiveGauge` per
//! call).

use super::protocol::status;
use prometheus::{IntCounterVec, IntGaugeVec, Opts, Registry};

/// The metrics of background calls.
#[derive(Debug, Clone)]
pub struct TaskMetrics {
    polls: IntCounterVec,
    live: IntGaugeVec,
}

impl Default for TaskMetrics {
    fn default() -> Self {
        Self::unregistered()
    }
}

impl TaskMetrics {
    /// Creates the metrics and registers them in `registry`.
    /// Errors: a name already registered there (prometheus `AlreadyReg`).
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        registry.register(Box::new(m.polls.clone()))?;
        registry.register(Box::new(m.live.clone()))?;
        Ok(m)
    }

    /// Metrics counted but exported nowhere (tests).
    pub fn unregistered() -> Self {
        TaskMetrics {
            polls: IntCounterVec::new(
                Opts::new(
                    "switchyard_sidecar_task_polls_total",
                    "tasks/get polls of MCP tasks, by server and outcome (ok, error, not_found).",
                ),
                &["server", "outcome"],
            )
            .expect("valid metric"),
            live: IntGaugeVec::new(
                Opts::new(
                    "switchyard_sidecar_background_calls",
                    "Background calls this sidecar polls or holds, by server, mode (task, wait) and status.",
                ),
                &["server", "mode", "status"],
            )
            .expect("valid metric"),
        }
    }

    /// Counts one poll of a task of `server` (`ok`, `error`, `not_found`).
    pub(super) fn poll(&self, server: &str, outcome: &str) {
        self.polls.with_label_values(&[server, outcome]).inc();
    }
}

/// Counts one live call in the gauge while it lives.
pub(super) struct LiveGauge {
    metrics: TaskMetrics,
    server: String,
    mode: &'static str,
    status: String,
}

/// The gauge's `status` label: a task status, or `unknown` for anything
/// else a server may send (labels stay bounded).
fn status_label(status: &str) -> &'static str {
    match status {
        status::WORKING => status::WORKING,
        status::INPUT_REQUIRED => status::INPUT_REQUIRED,
        status::COMPLETED => status::COMPLETED,
        status::FAILED => status::FAILED,
        status::CANCELLED => status::CANCELLED,
        _ => "unknown",
    }
}

impl LiveGauge {
    /// Counts a live call of `server` in `mode` (`task`, `wait`) and `status`.
    pub(super) fn new(
        metrics: &TaskMetrics,
        server: &str,
        mode: &'static str,
        status: &str,
    ) -> Self {
        let status = status_label(status);
        metrics
            .live
            .with_label_values(&[server, mode, status])
            .inc();
        LiveGauge {
            metrics: metrics.clone(),
            server: server.to_owned(),
            mode,
            status: status.to_owned(),
        }
    }

    /// The call is now in `status`.
    pub(super) fn set(&mut self, status: &str) {
        let status = status_label(status);
        if status == self.status {
            return;
        }
        self.metrics
            .live
            .with_label_values(&[&self.server, self.mode, &self.status])
            .dec();
        self.metrics
            .live
            .with_label_values(&[&self.server, self.mode, status])
            .inc();
        self.status = status.to_owned();
    }
}

impl Drop for LiveGauge {
    fn drop(&mut self) {
        self.metrics
            .live
            .with_label_values(&[&self.server, self.mode, &self.status])
            .dec();
    }
}
