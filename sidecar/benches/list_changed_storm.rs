//! A `notifications/tools/list_changed` storm against the sidecar's
//! upstream watcher: `tests/peers/servers/storm.py` sends N notifications
//! spread over 1 s (one `tools/call storm`), and the bench reports the
//! re-lists that followed and the CPU time the sidecar side (this process)
//! spent from the start of the storm until the last re-list settled.
//!
//! ```text
//! cargo bench -p switchyard-sidecar --bench list_changed_storm                 # N = 10000, windows 0 and 2000 ms
//! cargo bench -p switchyard-sidecar --bench list_changed_storm -- --n 100000
//! ```
//!
//! Window 0 re-lists as soon as notifications are read (close to the old
//! behaviour of one re-list per notification, bounded by how fast
//! `tools/list` answers); 2000 ms is the default coalescing window.

use serde_json::json;
use std::time::{Duration, Instant};
use switchyard_sidecar::tools::catalogue::Catalogue;
use switchyard_sidecar::upstream::{
    StdioConfig, TransportConfig, Upstream, UpstreamConfig, UpstreamMetrics,
};
use switchyard_sidecar::watch::watch_upstream_with;

/// user+sys CPU time of this process, from /proc (10 ms ticks).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Fields after the command: state is 0, utime 11, stime 12.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

async fn run(n: u64, window: Duration) -> (u64, u64, Duration, Duration) {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/peers/servers/storm.py");
    let config = UpstreamConfig::new(
        "storm",
        TransportConfig::Stdio(StdioConfig {
            command: "python3".into(),
            args: vec![script.to_string_lossy().into_owned()],
            ..StdioConfig::default()
        }),
    );
    let upstream = Upstream::new(config, &UpstreamMetrics::unregistered()).unwrap();
    let (mut view, watcher) = watch_upstream_with(upstream.clone(), Catalogue::new(), window);
    view.catalogue.wait_for(Option::is_some).await.unwrap();
    let m = upstream.metrics().clone();
    let before = m.refreshes();
    let cpu0 = cpu();
    let t0 = Instant::now();
    upstream
        .call_tool(json!({"name": "storm", "arguments": {"n": n, "ms": 1000}}))
        .await
        .unwrap();
    // Settled: every notification read and no re-list for a window + 500 ms.
    let mut last = (m.refreshes(), Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = m.refreshes();
        if now != last.0 {
            last = (now, Instant::now());
        } else if m.list_changed_received() >= n
            && last.1.elapsed() > window + Duration::from_millis(500)
        {
            break;
        }
    }
    let wall = t0.elapsed();
    let used = cpu() - cpu0;
    watcher.abort();
    upstream.shutdown(Duration::from_secs(2)).await;
    (
        m.list_changed_received(),
        m.refreshes() - before,
        used,
        wall,
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = args
        .iter()
        .position(|a| a == "--n")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000u64);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("| window ms | notifications | re-lists | sidecar CPU ms | wall s |");
    println!("|---:|---:|---:|---:|---:|");
    for window_ms in [0u64, 2000] {
        let (got, relists, cpu, wall) = rt.block_on(run(n, Duration::from_millis(window_ms)));
        println!(
            "| {window_ms} | {got} | {relists} | {} | {:.1} |",
            cpu.as_millis(),
            wall.as_secs_f64()
        );
    }
}
