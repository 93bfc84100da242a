//! Prometheus metrics of upstream sessions. Labels are bounded: server name,
//! tool name (from the server's own catalogue, at most [`MAX_TOOL_LABELS`]
//! per server), outcome, reason; never arguments or ids. The catalogue of
//! names is in `docs/metrics.md`.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How many distinct `tool` label values one server's call metrics use.
/// The control plane only routes calls to catalogued tools, but the
/// sidecar's call port takes any name: calls naming a tool beyond the
/// first `MAX_TOOL_LABELS` names are counted under [`OTHER_TOOL`], so a
/// caller sending made-up names cannot grow the series without bound.
pub const MAX_TOOL_LABELS: usize = 1000;

/// The `tool` label of calls beyond [`MAX_TOOL_LABELS`] distinct names.
pub const OTHER_TOOL: &str = "_other";

/// All upstream metrics, registered once per process.
#[derive(Debug, Clone)]
pub struct UpstreamMetrics {
    calls: IntCounterVec,
    call_duration: HistogramVec,
    restarts: IntCounterVec,
    session_renewals: IntCounterVec,
    received_bytes: IntCounterVec,
    sent_bytes: IntCounterVec,
    skipped: IntCounterVec,
    retries: IntCounterVec,
    list_changed: IntCounterVec,
    refreshes: IntCounterVec,
    /// The `tool` label values in use, per server.
    tool_labels: Arc<Mutex<HashMap<String, HashSet<String>>>>,
}

impl UpstreamMetrics {
    /// Creates the metrics and registers them in `registry`.
    /// Errors: a name already registered there (prometheus `AlreadyReg`).
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let m = Self::unregistered();
        registry.register(Box::new(m.calls.clone()))?;
        registry.register(Box::new(m.call_duration.clone()))?;
        registry.register(Box::new(m.restarts.clone()))?;
        registry.register(Box::new(m.session_renewals.clone()))?;
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
                "Times an upstream connection was re-established after it failed or its server exited (not counting new HTTP sessions after the server ended ours: switchyard_sidecar_upstream_session_renewals_total).",
                &["server"],
            ),
            session_renewals: counter(
                "switchyard_sidecar_upstream_session_renewals_total",
                "Times a new Streamable HTTP session was opened because the server ended ours (HTTP 404 to a request carrying its MCP-Session-Id), the handshake included.",
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
            tool_labels: Arc::default(),
        }
    }

    /// The `tool` label for a call of `tool` on `server`: the name itself
    /// while the server has fewer than [`MAX_TOOL_LABELS`] names in use (or
    /// already uses this one), else [`OTHER_TOOL`].
    fn tool_label<'a>(&self, server: &str, tool: &'a str) -> &'a str {
        let mut in_use = self
            .tool_labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let names = in_use.entry(server.to_owned()).or_default();
        if names.contains(tool) {
            tool
        } else if names.len() < MAX_TOOL_LABELS {
            names.insert(tool.to_owned());
            tool
        } else {
            OTHER_TOOL
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
    /// Counts one finished `tools/call` (under [`OTHER_TOOL`] once the
    /// server has [`MAX_TOOL_LABELS`] other tool names in use).
    pub fn call(&self, tool: &str, outcome: &str, elapsed: Duration) {
        let tool = self.metrics.tool_label(&self.server, tool);
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

    /// Counts a new HTTP session opened because the server ended ours.
    pub fn session_renewed(&self) {
        self.metrics
            .session_renewals
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The `switchyard_sidecar_upstream_calls_total` series of
    /// `registry`, as exported: (labels, value).
    fn call_series(registry: &Registry) -> Vec<(String, u64)> {
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&registry.gather())
            .expect("encode");
        text.lines()
            .filter_map(|l| l.strip_prefix("switchyard_sidecar_upstream_calls_total{"))
            .filter_map(|l| l.split_once("} "))
            .map(|(labels, v)| (labels.to_owned(), v.parse().expect("a count")))
            .collect()
    }

    /// The sum of the calls of `tool` on `server`, over outcomes.
    fn calls(registry: &Registry, server: &str, tool: &str) -> Option<u64> {
        let want = [format!("server=\"{server}\""), format!("tool=\"{tool}\"")];
        let found: Vec<u64> = call_series(registry)
            .into_iter()
            .filter(|(labels, _)| want.iter().all(|w| labels.split(',').any(|l| l == w)))
            .map(|(_, v)| v)
            .collect();
        (!found.is_empty()).then(|| found.iter().sum())
    }

    #[test]
    fn tool_labels_are_capped_per_server() {
        let registry = Registry::new();
        let metrics = UpstreamMetrics::register(&registry).expect("register");
        let a = metrics.server("a");
        for i in 0..MAX_TOOL_LABELS {
            a.call(&format!("tool{i}"), "ok", Duration::from_millis(1));
        }
        // Names in use keep their series; new ones go to `_other`.
        a.call("tool0", "ok", Duration::from_millis(1));
        a.call("made-up-1", "rpc_error", Duration::from_millis(1));
        a.call("made-up-2", "rpc_error", Duration::from_millis(1));
        assert_eq!(calls(&registry, "a", "tool0"), Some(2));
        assert_eq!(calls(&registry, "a", "made-up-1"), None);
        assert_eq!(calls(&registry, "a", OTHER_TOOL), Some(2));
        // Another view of the same server shares the cap; another server
        // has its own.
        metrics
            .server("a")
            .call("made-up-3", "ok", Duration::from_millis(1));
        assert_eq!(calls(&registry, "a", "made-up-3"), None);
        assert_eq!(calls(&registry, "a", OTHER_TOOL), Some(3));
        metrics
            .server("b")
            .call("made-up-1", "ok", Duration::from_millis(1));
        assert_eq!(calls(&registry, "b", "made-up-1"), Some(1));
        // tool0..tool999 once each (tool0 has one series: same outcome),
        // `_other` twice (rpc_error, ok), and b's one.
        assert_eq!(call_series(&registry).len(), MAX_TOOL_LABELS + 3);
    }
}
