//! Prometheus metrics of upstream sessions. Labels are bounded: server name,
//! tool name (from the server's own catalogue), outcome, reason; never
//! arguments or ids. The catalogue of names is in `docs/metrics.md`.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use std::time::Duration;

/// All upstream metrics, registered once per process.
#[derive(Debug, Clone)]
pub struct UpstreamMetrics {
    calls: IntCounterVec,
    call_duration: HistogramVec,
    restarts: IntCounterVec,
    received_bytes: IntCounterVec,
    sent_bytes: IntCounterVec,
    skipped: IntCounterVec,
    retries: IntCounterVec,
    list_changed: IntCounterVec,
    refreshes: IntCounterVec,
}

impl UpstreamMetrics {
    /// Creates the metrics and registers them in `registry`.
    /// Errors: a name already registered there (prometheus `AlreadyReg`).
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        registry.register(Box::new(m.calls.clone()))?;
        registry.register(Box::new(m.call_duration.clone()))?;
        registry.register(Box::new(m.restarts.clone()))?;
        registry.register(Box::new(m.received_bytes.clone()))?;
        registry.register(Box::new(m.sent_bytes.clone()))?;
        registry.register(Box::new(m.skipped.clone()))?;
        registry.register(Box::new(m.retries.clone()))?;
        registry.register(Box::new(m.list_changed.clone()))?;
        registry.register(Box::new(m.refreshes.clone()))?;
        Ok(m)
    }

    /// Metrics that are counted but exported nowhere (tools, tests).
    pub fn unregistered() -> Self {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
        };
        UpstreamMetrics {
            calls: counter(
                "switchyard_sidecar_upstream_calls_total",
                "tools/call requests sent upstream, by server, tool and outcome.",
                &["server", "tool", "outcome"],
            ),
            call_duration: HistogramVec::new(
                HistogramOpts::new(
                    "switchyard_sidecar_upstream_call_duration_seconds",
                    "Time from sending tools/call upstream to its response, in seconds.",
                )
                .buckets(vec![
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    60.0, 300.0, 600.0,
                ]),
                &["server", "tool"],
            )
            .expect("valid metric"),
            restarts: counter(
                "switchyard_sidecar_upstream_restarts_total",
                "Times an upstream connection was re-established after it failed or its server exited.",
                &["server"],
            ),
            received_bytes: counter(
                "switchyard_sidecar_upstream_received_bytes_total",
                "Bytes received from the upstream server (stdout or HTTP bodies).",
                &["server"],
            ),
            sent_bytes: counter(
                "switchyard_sidecar_upstream_sent_bytes_total",
                "Bytes sent to the upstream server (stdin or HTTP bodies).",
                &["server"],
            ),
            skipped: counter(
                "switchyard_sidecar_upstream_skipped_messages_total",
                "Messages from the server that were dropped, by reason (not_json, not_jsonrpc, oversized, late_response).",
                &["server", "reason"],
            ),
            retries: counter(
                "switchyard_sidecar_upstream_retries_total",
                "Tool calls sent again, once, after reconnecting, because a network error ended a retry-safe call.",
                &["server"],
            ),
            list_changed: counter(
                "switchyard_sidecar_list_changed_received_total",
                "notifications/tools/list_changed received from the server.",
                &["server"],
            ),
            refreshes: counter(
                "switchyard_sidecar_catalogue_refreshes_total",
                "tools/list re-listings of the catalogue (after a connection or coalesced list changes).",
                &["server"],
            ),
        }
    }

    /// The view for one server.
    pub fn server(&self, server: &str) -> ServerMetrics {
        ServerMetrics {
            server: server.to_owned(),
            metrics: self.clone(),
        }
    }
}

/// Metrics bound to one server's label.
#[derive(Debug, Clone)]
pub struct ServerMetrics {
    server: String,
    metrics: UpstreamMetrics,
}

impl ServerMetrics {
    /// Counts one finished `tools/call`.
    pub fn call(&self, tool: &str, outcome: &str, elapsed: Duration) {
        self.metrics
            .calls
            .with_label_values(&[&self.server, tool, outcome])
            .inc();
        self.metrics
            .call_duration
            .with_label_values(&[&self.server, tool])
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a restart.
    pub fn restart(&self) {
        self.metrics
            .restarts
            .with_label_values(&[&self.server])
            .inc();
    }

    /// Counts bytes received.
    pub fn received_bytes(&self, n: usize) {
        self.metrics
            .received_bytes
            .with_label_values(&[&self.server])
            .inc_by(n as u64);
    }

    /// Counts bytes sent.
    pub fn sent_bytes(&self, n: usize) {
        self.metrics
            .sent_bytes
            .with_label_values(&[&self.server])
            .inc_by(n as u64);
    }

    /// Counts a retried call.
    pub fn retry(&self) {
        self.metrics
            .retries
            .with_label_values(&[&self.server])
            .inc();
    }

    /// Counts `n` list-changed notifications.
    pub fn list_changed(&self, n: u64) {
        self.metrics
            .list_changed
            .with_label_values(&[&self.server])
            .inc_by(n);
    }

    /// Counts a catalogue re-listing.
    pub fn refresh(&self) {
        self.metrics
            .refreshes
            .with_label_values(&[&self.server])
            .inc();
    }

    /// Retries so far.
    pub fn retries(&self) -> u64 {
        self.metrics
            .retries
            .with_label_values(&[&self.server])
            .get()
    }

    /// List-changed notifications received so far.
    pub fn list_changed_received(&self) -> u64 {
        self.metrics
            .list_changed
            .with_label_values(&[&self.server])
            .get()
    }

    /// Catalogue re-listings so far.
    pub fn refreshes(&self) -> u64 {
        self.metrics
            .refreshes
            .with_label_values(&[&self.server])
            .get()
    }

    /// Counts a dropped message.
    pub fn skipped(&self, reason: &str) {
        self.metrics
            .skipped
            .with_label_values(&[&self.server, reason])
            .inc();
    }
}
