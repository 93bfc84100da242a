//! Prometheus metrics of the control plane (catalogue in
//! `docs/metrics.md`). Labels are bounded: server names from the registry,
//! fixed outcome and operation names; never session ids or arguments.

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::connections::ConnectionLimit;

/// The control plane's metrics.
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Registry,
    calls: IntCounterVec,
    call_duration: HistogramVec,
    sessions: IntGauge,
    sidecars_up: IntGaugeVec,
    store_duration: HistogramVec,
    store_errors: IntCounterVec,
    interactions: IntCounterVec,
    interactions_pending: IntGaugeVec,
    background_calls: IntCounterVec,
    background_moved: IntCounterVec,
    auth_refusals: IntCounterVec,
    resource_reads: IntCounterVec,
    resource_read_bytes: IntCounterVec,
    prompt_gets: IntCounterVec,
    completions: IntCounterVec,
    mcp_requests: IntCounterVec,
    mcp_sessions: IntGauge,
    mcp_state_rejections: IntCounterVec,
    mcp_listen_streams: IntGauge,
    mcp_sessions_ended: IntCounterVec,
    mcp_waiting_calls_ended: IntCounter,
    oauth_events: IntCounterVec,
    oauth_refreshes: IntCounterVec,
    oauth_state: IntGaugeVec,
    runtime_alive_tasks: IntGauge,
    store_keys: IntGauge,
    connections: IntGaugeVec,
    connections_max: IntGaugeVec,
    connection_waits: IntCounterVec,
    listeners: Arc<Mutex<Vec<Arc<ConnectionLimit>>>>,
}

/// One open stream counted in a gauge while it lives.
#[derive(Debug)]
pub struct OpenGuard(IntGauge);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Metrics {
    /// Creates and registers every metric in a new registry.
    pub fn new() -> Self {
        let registry = Registry::new();
        let calls = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_calls_total",
                "Engine tools/call requests, by server and outcome.",
            ),
            &["server", "outcome"],
        )
        .expect("valid metric");
        let call_duration = HistogramVec::new(
            HistogramOpts::new(
                "switchyard_control_plane_call_duration_seconds",
                "Engine tools/call latency through the control plane, in seconds.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0, 300.0, 600.0,
            ]),
            &["server"],
        )
        .expect("valid metric");
        let sessions = IntGauge::new(
            "switchyard_control_plane_sessions",
            "Sessions in the store.",
        )
        .expect("valid");
        let sidecars_up = IntGaugeVec::new(
            Opts::new(
                "switchyard_control_plane_sidecars_up",
                "Live (registered, leased) sidecars per server.",
            ),
            &["server"],
        )
        .expect("valid metric");
        let store_duration = HistogramVec::new(
            HistogramOpts::new(
                "switchyard_control_plane_store_operation_duration_seconds",
                "Store operation latency, by operation, in seconds.",
            )
            .buckets(vec![
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
                5.0,
            ]),
            &["operation"],
        )
        .expect("valid metric");
        let store_errors = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_store_errors_total",
                "Store operations that failed, by operation.",
            ),
            &["operation"],
        )
        .expect("valid metric");
        let interactions = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_interactions_total",
                "Interaction outcomes (form, url, approval), counted once by the replica that recorded them.",
            ),
            &["kind", "outcome"],
        )
        .expect("valid metric");
        let interactions_pending = IntGaugeVec::new(
            Opts::new(
                "switchyard_control_plane_interactions_pending",
                "Interactions waiting for the user (open) or, for url, for the server's completion (accepted).",
            ),
            &["kind"],
        )
        .expect("valid metric");
        let auth_refusals = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_auth_refusals_total",
                "Calls refused by authentication or authorization (gRPC services, the MCP endpoint, the console), by service and reason.",
            ),
            &["service", "reason"],
        )
        .expect("valid metric");
        // Every series exists from the start (at 0), so rates and alerts
        // work before the first refusal.
        for service in crate::model::principal::Service::ALL {
            for reason in crate::model::principal::Refusal::ALL {
                // Only sidecars are bound to servers; only the console
                // has sessions, CSRF tokens and logins.
                if !reason.applies_to(service) {
                    continue;
                }
                auth_refusals.with_label_values(&[service.label(), reason.label()]);
            }
        }
        let background_calls = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_background_calls_total",
                "Background calls that finished, by server, mode (wait, task) and outcome (completed, failed, cancelled); counted once, by the replica that recorded the outcome.",
            ),
            &["server", "mode", "outcome"],
        )
        .expect("valid metric");
        let background_moved = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_background_moved_total",
                "Engine calls that moved to the background, by server and mode (wait, task).",
            ),
            &["server", "mode"],
        )
        .expect("valid metric");
        let resource_reads = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_resource_reads_total",
                "Engine resources/read requests (ReadResource, AttachResource, mcp_resource_read), by server and outcome.",
            ),
            &["server", "outcome"],
        )
        .expect("valid metric");
        let resource_read_bytes = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_resource_read_bytes_total",
                "Bytes of resource contents read (text as UTF-8, binary decoded), by server.",
            ),
            &["server"],
        )
        .expect("valid metric");
        let prompt_gets = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_prompt_gets_total",
                "Engine prompts/get requests, by server and outcome.",
            ),
            &["server", "outcome"],
        )
        .expect("valid metric");
        let completions = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_completions_total",
                "Engine completion/complete requests, by server and outcome.",
            ),
            &["server", "outcome"],
        )
        .expect("valid metric");
        let mcp_requests = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_mcp_requests_total",
                "Requests to the MCP endpoint, by method (`other` for unknown ones, `-` before the body was read), era (`2026-07-28`, `2025-11-25`) and outcome (`ok`, `error`: a JSON-RPC error, `rejected`: an HTTP error status).",
            ),
            &["method", "era", "outcome"],
        )
        .expect("valid metric");
        let mcp_sessions = IntGauge::new(
            "switchyard_control_plane_mcp_sessions",
            "Open 2025-11-25 sessions of the MCP endpoint, in the store.",
        )
        .expect("valid");
        let mcp_state_rejections = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_mcp_request_state_rejections_total",
                "requestStates refused by the MCP endpoint, by reason (`malformed`, `integrity`: forged, tampered or presented on another request or by another caller, `expired`, `unknown_key`, `replayed`).",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let mcp_listen_streams = IntGauge::new(
            "switchyard_control_plane_mcp_listen_streams",
            "Open change-notification streams of the MCP endpoint on this replica (2026-07-28 subscriptions/listen and 2025-11-25 GET streams).",
        )
        .expect("valid");
        let mcp_sessions_ended = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_mcp_sessions_ended_total",
                "2025-11-25 sessions of the MCP endpoint ended by this replica, by reason (`deleted` by the client, `idle` past mcp.session_idle_timeout_sec, `evicted`: their caller opened more than mcp.max_sessions_per_caller).",
            ),
            &["reason"],
        )
        .expect("valid metric");
        for reason in ["deleted", "idle", "evicted"] {
            mcp_sessions_ended.with_label_values(&[reason]);
        }
        let mcp_waiting_calls_ended = IntCounter::new(
            "switchyard_control_plane_mcp_waiting_calls_ended_total",
            "Calls waiting for a 2026-07-28 MCP client's answer that this replica ended because their caller had more than mcp.max_waiting_calls_per_caller waiting (the oldest goes).",
        )
        .expect("valid");
        let oauth_events = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_oauth_events_total",
                "Stage D authorization events, by server and event (`authorized`, `authorization_failed`, `forgotten`, `step_up`, `reauthorization_needed`), counted by the replica that recorded them.",
            ),
            &["server", "event"],
        )
        .expect("valid metric");
        let oauth_refreshes = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_oauth_refreshes_total",
                "Token refreshes this replica made, by server and outcome (`ok`, `rejected`: invalid_grant, `failed`: transient, retried).",
            ),
            &["server", "outcome"],
        )
        .expect("valid metric");
        let oauth_state = IntGaugeVec::new(
            Opts::new(
                "switchyard_control_plane_oauth_state",
                "1 for each `auth = \"oauth\"` server's authorization state (`authorized`, `needs_authorization`, `needs_reauthorization`), 0 for its other states.",
            ),
            &["server", "state"],
        )
        .expect("valid metric");
        let runtime_alive_tasks = IntGauge::new(
            "switchyard_control_plane_runtime_alive_tasks",
            "Tasks alive in the process's tokio runtime (spawned and not yet finished), read at scrape time.",
        )
        .expect("valid");
        let store_keys = IntGauge::new(
            "switchyard_control_plane_store_keys",
            "Keys in the store under its root, as this replica's read model has seen them.",
        )
        .expect("valid");
        let connections = IntGaugeVec::new(
            Opts::new(
                "switchyard_control_plane_connections",
                "Open connections by listener (`grpc`, `http`, `metrics`, `mcp`), read at scrape time.",
            ),
            &["listener"],
        )
        .expect("valid metric");
        let connections_max = IntGaugeVec::new(
            Opts::new(
                "switchyard_control_plane_connections_max",
                "The most connections each listener serves at once (`control_plane.max_connections` for `grpc`, `mcp.max_connections` for `mcp`; 1024 for `http` and `metrics`).",
            ),
            &["listener"],
        )
        .expect("valid metric");
        let connection_waits = IntCounterVec::new(
            Opts::new(
                "switchyard_control_plane_connection_waits_total",
                "Connections that found their listener at its limit and waited to be served, by listener.",
            ),
            &["listener"],
        )
        .expect("valid metric");
        for c in [
            Box::new(calls.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(connections.clone()),
            Box::new(connections_max.clone()),
            Box::new(connection_waits.clone()),
            Box::new(runtime_alive_tasks.clone()),
            Box::new(store_keys.clone()),
            Box::new(oauth_events.clone()),
            Box::new(oauth_refreshes.clone()),
            Box::new(oauth_state.clone()),
            Box::new(mcp_listen_streams.clone()),
            Box::new(mcp_sessions_ended.clone()),
            Box::new(mcp_waiting_calls_ended.clone()),
            Box::new(mcp_requests.clone()),
            Box::new(mcp_state_rejections.clone()),
            Box::new(mcp_sessions.clone()),
            Box::new(resource_reads.clone()),
            Box::new(resource_read_bytes.clone()),
            Box::new(prompt_gets.clone()),
            Box::new(completions.clone()),
            Box::new(call_duration.clone()),
            Box::new(sessions.clone()),
            Box::new(sidecars_up.clone()),
            Box::new(store_duration.clone()),
            Box::new(store_errors.clone()),
            Box::new(interactions.clone()),
            Box::new(interactions_pending.clone()),
            Box::new(background_calls.clone()),
            Box::new(background_moved.clone()),
            Box::new(auth_refusals.clone()),
        ] {
            registry.register(c).expect("unique metric names");
        }
        Metrics {
            registry,
            calls,
            call_duration,
            sessions,
            sidecars_up,
            store_duration,
            store_errors,
            interactions,
            interactions_pending,
            background_calls,
            background_moved,
            auth_refusals,
            resource_reads,
            resource_read_bytes,
            prompt_gets,
            completions,
            mcp_requests,
            mcp_sessions,
            mcp_state_rejections,
            mcp_listen_streams,
            mcp_sessions_ended,
            mcp_waiting_calls_ended,
            oauth_events,
            oauth_refreshes,
            oauth_state,
            runtime_alive_tasks,
            store_keys,
            connections,
            connections_max,
            connection_waits,
            listeners: Arc::default(),
        }
    }

    /// Counts a stage D authorization event of `server`.
    pub fn oauth_event(&self, server: &str, event: &str) {
        self.oauth_events.with_label_values(&[server, event]).inc();
    }

    /// Counts a token refresh of `server` (`ok`, `rejected`, `failed`).
    pub fn oauth_refresh(&self, server: &str, outcome: &str) {
        self.oauth_refreshes
            .with_label_values(&[server, outcome])
            .inc();
    }

    /// Sets `server`'s authorization state gauge; `None`: the server is
    /// gone or no longer an oauth server.
    pub fn oauth_state(&self, server: &str, state: Option<&str>) {
        for s in ["authorized", "needs_authorization", "needs_reauthorization"] {
            match state {
                Some(now) => self
                    .oauth_state
                    .with_label_values(&[server, s])
                    .set(i64::from(now == s)),
                None => {
                    let _ = self.oauth_state.remove_label_values(&[server, s]);
                }
            }
        }
    }

    /// The connection limit of the listener `name` (`grpc`, `http`,
    /// `mcp`: the metrics' label and the logs' `listener`), counted in the
    /// `connections*` metrics.
    pub fn listener(&self, name: &'static str, max: usize) -> Arc<ConnectionLimit> {
        let waits = self.connection_waits.with_label_values(&[name]);
        let limit = Arc::new(ConnectionLimit::new(name, max).on_wait(move || waits.inc()));
        self.connections_max
            .with_label_values(&[name])
            .set(limit.max() as i64);
        self.connections.with_label_values(&[name]).set(0);
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(limit.clone());
        limit
    }

    /// Counts an open change-notification stream of the MCP endpoint until
    /// the guard is dropped.
    pub fn mcp_listen_stream(&self) -> OpenGuard {
        self.mcp_listen_streams.inc();
        OpenGuard(self.mcp_listen_streams.clone())
    }

    /// Counts a `requestState` the MCP endpoint refused, by `reason` (a
    /// fixed word, see the metric's help).
    pub fn mcp_state_rejected(&self, reason: &'static str) {
        self.mcp_state_rejections.with_label_values(&[reason]).inc();
    }

    /// Counts one stage E request to `server`: `method` is
    /// `resources/read`, `prompts/get` or `completion/complete`; `bytes`
    /// of contents read (reads only).
    pub fn content_request(&self, method: &str, server: &str, outcome: &str, bytes: u64) {
        let counter = match method {
            "resources/read" => {
                self.resource_read_bytes
                    .with_label_values(&[server])
                    .inc_by(bytes);
                &self.resource_reads
            }
            "prompts/get" => &self.prompt_gets,
            _ => &self.completions,
        };
        counter.with_label_values(&[server, outcome]).inc();
    }

    /// Counts one refused gRPC call (labels from [`crate::model::principal::Service`]
    /// and [`crate::model::principal::Refusal`]).
    pub fn auth_refusal(&self, service: &str, reason: &str) {
        self.auth_refusals
            .with_label_values(&[service, reason])
            .inc();
    }

    /// Counts a background call that finished (`mode`: `wait` or `task`;
    /// `outcome`: `completed`, `failed` or `cancelled`).
    pub fn background_finished(&self, server: &str, mode: &str, outcome: &str) {
        self.background_calls
            .with_label_values(&[server, mode, outcome])
            .inc();
    }

    /// Counts a call that moved to the background (`mode`: `wait` or
    /// `task`).
    pub fn background_moved(&self, server: &str, mode: &str) {
        self.background_moved
            .with_label_values(&[server, mode])
            .inc();
    }

    /// Counts one interaction outcome.
    pub fn interaction(&self, kind: &str, outcome: &str) {
        self.interactions.with_label_values(&[kind, outcome]).inc();
    }

    /// The registry, for `/metrics`.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Counts one engine call.
    pub fn call(&self, server: &str, outcome: &str, elapsed: Duration) {
        self.calls.with_label_values(&[server, outcome]).inc();
        self.call_duration
            .with_label_values(&[server])
            .observe(elapsed.as_secs_f64());
    }

    /// Records one store operation.
    pub fn store_op(&self, op: &'static str, elapsed: Duration, ok: bool) {
        self.store_duration
            .with_label_values(&[op])
            .observe(elapsed.as_secs_f64());
        if !ok {
            self.store_errors.with_label_values(&[op]).inc();
        }
    }

    /// Counts a 2025-11-25 session of the MCP endpoint this replica ended,
    /// by `reason`: `deleted`, `idle` or `evicted`.
    pub fn mcp_session_ended(&self, reason: &'static str) {
        self.mcp_sessions_ended.with_label_values(&[reason]).inc();
    }

    /// Counts a call waiting for its MCP client's answer that was ended to
    /// keep its caller within `mcp.max_waiting_calls_per_caller`.
    pub fn mcp_waiting_call_ended(&self) {
        self.mcp_waiting_calls_ended.inc();
    }

    /// Counts one request to the MCP endpoint.
    pub fn mcp_request(&self, method: &str, era: &str, outcome: &str) {
        self.mcp_requests
            .with_label_values(&[method, era, outcome])
            .inc();
    }

    /// Sets the gauges read at scrape time that are not the read model's
    /// snapshot: the tasks alive in the current tokio runtime (0 outside
    /// one), the store's key count (`state::State::store_keys`) and each
    /// listener's open connections.
    pub fn observe_process(&self, store_keys: i64) {
        let alive = tokio::runtime::Handle::try_current()
            .map_or(0, |handle| handle.metrics().num_alive_tasks());
        self.runtime_alive_tasks.set(alive as i64);
        self.store_keys.set(store_keys);
        for limit in self
            .listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            self.connections
                .with_label_values(&[limit.what()])
                .set(limit.open() as i64);
        }
    }

    /// Sets the gauges from the read model's counts.
    pub fn observe_state(&self, gauges: &StateGauges) {
        self.sessions.set(gauges.sessions as i64);
        self.mcp_sessions.set(gauges.mcp_sessions as i64);
        for (kind, n) in &gauges.interactions_pending {
            self.interactions_pending
                .with_label_values(&[kind])
                .set(*n as i64);
        }
        self.sidecars_up.reset();
        for (name, n) in &gauges.sidecars_up {
            self.sidecars_up.with_label_values(&[name]).set(*n as i64);
        }
    }
}

/// What the read model's gauges show, counted by the state
/// (`state::Snapshot::gauges`): numbers, so metrics need not know the read
/// model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateGauges {
    /// Engine sessions.
    pub sessions: usize,
    /// 2025-11-25 sessions of the MCP endpoint.
    pub mcp_sessions: usize,
    /// Pending interactions by kind (`form`, `url`, `approval`; every kind
    /// listed, 0 included).
    pub interactions_pending: Vec<(&'static str, usize)>,
    /// Live sidecars by server (every registered server listed, 0 included).
    pub sidecars_up: Vec<(String, usize)>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The listener names the sources pass to [`Metrics::listener`]
    /// (`.listener("name", …)`).
    fn listener_names() -> BTreeSet<String> {
        fn walk(dir: &std::path::Path, names: &mut BTreeSet<String>) {
            for entry in std::fs::read_dir(dir).expect("read src") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    walk(&path, names);
                } else if path.extension().is_some_and(|e| e == "rs")
                    // This file defines `listener` and serves none.
                    && !path.ends_with("src/metrics.rs")
                {
                    let text = std::fs::read_to_string(&path).expect("read a source file");
                    for (at, _) in text.match_indices(".listener(") {
                        let rest = text[at + ".listener(".len()..].trim_start();
                        if let Some(quoted) = rest.strip_prefix('"') {
                            let name = quoted.split('"').next().unwrap_or_default();
                            names.insert(name.to_owned());
                        }
                    }
                }
            }
        }
        let mut names = BTreeSet::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut names,
        );
        names
    }

    /// The connection gauges' help names every listener the control plane
    /// serves.
    #[test]
    fn connection_gauges_help_names_every_listener() {
        let names = listener_names();
        assert!(
            ["grpc", "http", "metrics", "mcp"]
                .iter()
                .all(|n| names.contains(*n)),
            "{names:?}"
        );
        let metrics = Metrics::new();
        for name in &names {
            metrics.listener(name.clone().leak(), 1);
        }
        let families = metrics.registry().gather();
        for family in [
            "switchyard_control_plane_connections",
            "switchyard_control_plane_connections_max",
        ] {
            let help = families
                .iter()
                .find(|f| f.name() == family)
                .unwrap_or_else(|| panic!("no {family}"))
                .help();
            for name in &names {
                assert!(help.contains(&format!("`{name}`")), "{family}: {help}");
            }
        }
    }
}
