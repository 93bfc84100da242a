//! `task_polling`: one sidecar polling many live MCP tasks (stage B).
//!
//! The sidecar's tasks machinery ([`switchyard_sidecar::background::Tasks`])
//! adopts N background calls in task mode, as a replacement sidecar does
//! after a restart, and polls them on one stdio connection to the reference
//! server in `--tasks-bench` mode (cheap `tasks/get`). Each task asks for a
//! 5 s `pollInterval`, and their first polls are spread evenly over one
//! interval, as tasks created over time would be. After a measurement
//! window the bench asks the server (`task_stats`) for the gaps between
//! consecutive `tasks/get` of each task, and reports:
//!
//! - punctuality: the share of gaps within ±10 % of the interval, and the
//!   median, p99 and largest deviation;
//! - CPU time of the bench process (the sidecar side) and of the server,
//!   per poll and per second;
//! - resident memory of the bench process before and after adopting the
//!   tasks (`VmRSS`), per task.
//!
//! ```text
//! cargo bench -p switchyard-sidecar --bench task_polling             # 10,000 tasks, 60 s window
//! cargo bench -p switchyard-sidecar --bench task_polling -- --quick  # 1,000 tasks, 15 s window
//! ```
//!
//! `SWITCHYARD_BENCH_TASKS` and `SWITCHYARD_BENCH_WINDOW_SECS` override the
//! task count and the window; `SWITCHYARD_REFERENCE_SERVER` the server
//! binary (default: the release build, built when missing).

use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use switchyard_proto::v1::BackgroundCall;
use switchyard_sidecar::background::{BackgroundRegistry, TaskSettings, Tasks, TasksConfig};
use switchyard_sidecar::pool::SessionPool;
use switchyard_sidecar::tools::respond::Responder;
use switchyard_sidecar::upstream::{
    EraPreference, StdioConfig, TransportConfig, Upstream, UpstreamConfig, UpstreamMetrics,
};
use switchyard_test_support::bench::cpu_time;

const INTERVAL_MS: u64 = 5000;
const PUNCTUALITY_GOAL: f64 = 0.10;

/// Accepts every record, as the control plane does, and counts them.
#[derive(Debug, Default)]
struct CountingRegistry(AtomicU64);

impl BackgroundRegistry for CountingRegistry {
    fn update(
        &self,
        call: BackgroundCall,
    ) -> BoxFuture<'static, Result<BackgroundCall, tonic::Status>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move { Ok(call) })
    }
}

/// Resident memory of this process in KiB (`VmRSS`).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The reference server: `$SWITCHYARD_REFERENCE_SERVER`, or the release
/// build (built here when missing).
fn server_binary() -> PathBuf {
    switchyard_test_support::bench::release_bin(
        "SWITCHYARD_REFERENCE_SERVER",
        "switchyard-reference-server",
        "switchyard-reference-server",
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick =
        args.iter().any(|a| a == "--quick") || std::env::var_os("SWITCHYARD_BENCH_QUICK").is_some();
    let env_num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let tasks = env_num("SWITCHYARD_BENCH_TASKS").unwrap_or(if quick { 1000 } else { 10_000 });
    let window = Duration::from_secs(env_num("SWITCHYARD_BENCH_WINDOW_SECS").unwrap_or(if quick {
        15
    } else {
        60
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bench(tasks as usize, window));
}

async fn bench(n: usize, window: Duration) {
    let bin = server_binary();
    let mut config = UpstreamConfig::new(
        "bench",
        TransportConfig::Stdio(StdioConfig {
            command: bin.display().to_string(),
            args: vec!["--era".into(), "2025-11-25".into(), "--tasks-bench".into()],
            ..StdioConfig::default()
        }),
    );
    config.era = EraPreference::Legacy;
    let upstream = Upstream::new(config, &UpstreamMetrics::unregistered()).expect("upstream");
    upstream.connect().await.expect("connect");
    let server_pid = upstream.pid();

    // Create the tasks (not measured): 64 requests in flight at a time.
    let created = Instant::now();
    let mut task_ids = Vec::with_capacity(n);
    let mut pending = futures::stream::FuturesUnordered::new();
    let mut next = 0;
    use futures::StreamExt;
    while task_ids.len() < n {
        while next < n && pending.len() < 64 {
            let up = upstream.clone();
            pending.push(async move {
                let params = json!({
                    "name": "task_sleep",
                    "arguments": {"ms": 7_200_000, "pollIntervalMs": INTERVAL_MS},
                    "task": {"ttl": 7_200_000},
                });
                let r = up
                    .request("tools/call", Some(params))
                    .await
                    .expect("task created");
                r["task"]["taskId"].as_str().expect("taskId").to_owned()
            });
            next += 1;
        }
        if let Some(id) = pending.next().await {
            task_ids.push(id);
        }
    }
    eprintln!(
        "created {n} tasks in {:.1} s",
        created.elapsed().as_secs_f64()
    );

    // Adopt them, first polls spread over one interval.
    let rss_before = rss_kib();
    let registry = Arc::new(CountingRegistry::default());
    let tasks = Tasks::new(
        SessionPool::new(upstream.clone()),
        Responder::default(),
        TasksConfig {
            settings: TaskSettings {
                sidecar_id: "bench".into(),
                ..TaskSettings::default()
            },
            registry: Some(registry.clone()),
            ..TasksConfig::default()
        },
    );
    let start = now_ms();
    let records: Vec<BackgroundCall> = task_ids
        .iter()
        .enumerate()
        .map(|(i, task)| BackgroundCall {
            id: format!("bench-{i}"),
            server: "bench".into(),
            tool: "task_sleep".into(),
            mode: "task".into(),
            task_id: task.clone(),
            status: "working".into(),
            created_at_ms: start,
            updated_at_ms: start,
            poll_after_ms: start + (i as u64 * INTERVAL_MS / n as u64) as i64,
            poll_interval_ms: INTERVAL_MS,
            deadline_ms: start + 7_200_000,
            sidecar_id: "bench".into(),
            protocol_version: "2025-11-25".into(),
            ..BackgroundCall::default()
        })
        .collect();
    tasks.adopt(records);
    assert_eq!(tasks.live().len(), n, "every call is polled");

    // Measure one window.
    let (cpu0, srv0) = (cpu_time(None), cpu_time(server_pid));
    let measured = Instant::now();
    tokio::time::sleep(window).await;
    let elapsed = measured.elapsed();
    let (cpu1, srv1) = (cpu_time(None), cpu_time(server_pid));
    let rss_after = rss_kib();

    let stats = upstream
        .call_tool(json!({"name": "task_stats", "arguments": {}}))
        .await
        .expect("task_stats");
    let per_task = &stats["structuredContent"]["perTask"];
    let mut deviations = Vec::new();
    let mut polls = 0u64;
    for id in &task_ids {
        let t = &per_task[id.as_str()];
        polls += t["polls"].as_u64().unwrap_or(0);
        for gap in t["pollGapsMs"].as_array().into_iter().flatten() {
            if let Some(g) = gap.as_f64() {
                deviations.push((g - INTERVAL_MS as f64).abs() / INTERVAL_MS as f64);
            }
        }
    }
    deviations.sort_by(f64::total_cmp);
    let within = deviations
        .iter()
        .filter(|d| **d <= PUNCTUALITY_GOAL)
        .count();
    let cpu = (cpu1 - cpu0).as_secs_f64();
    let srv = (srv1 - srv0).as_secs_f64();
    let expected = n as f64 * elapsed.as_secs_f64() / (INTERVAL_MS as f64 / 1000.0);

    println!(
        "task_polling: {n} live tasks, interval {INTERVAL_MS} ms, window {:.0} s",
        elapsed.as_secs_f64()
    );
    println!(
        "  polls (all, incl. before the window) {polls}; expected in the window ≈ {expected:.0}"
    );
    println!(
        "  punctuality: {} of {} gaps ({:.2} %) within ±10 %; deviation p50 {:.2} %, p99 {:.2} %, max {:.2} %",
        within,
        deviations.len(),
        100.0 * within as f64 / deviations.len().max(1) as f64,
        100.0 * percentile(&deviations, 0.5),
        100.0 * percentile(&deviations, 0.99),
        100.0 * deviations.last().copied().unwrap_or(f64::NAN),
    );
    println!(
        "  sidecar CPU {:.2} s ({:.1} % of a core, {:.1} µs per poll); server CPU {:.2} s ({:.1} µs per poll)",
        cpu,
        100.0 * cpu / elapsed.as_secs_f64(),
        1e6 * cpu / expected.max(1.0),
        srv,
        1e6 * srv / expected.max(1.0),
    );
    println!(
        "  RSS {} KiB before adopting, {} KiB after the window: {:.1} KiB per task",
        rss_before,
        rss_after,
        (rss_after.saturating_sub(rss_before)) as f64 / n as f64
    );
    println!(
        "  records reported to the registry: {}",
        registry.0.load(Ordering::Relaxed)
    );
    let _: Value = stats;
    upstream.shutdown(Duration::from_secs(2)).await;
}
