//! `tools/call` throughput and latency: the sidecar's upstream client
//! (`switchyard_sidecar::upstream::Upstream`) against a direct rmcp client,
//! both on the reference server's cheap `echo` tool over stdio.
//!
//! ```text
//! cargo bench -p switchyard-sidecar --bench upstream_call             # full run
//! cargo bench -p switchyard-sidecar --bench upstream_call -- --quick  # smoke run
//! ```
//!
//! Each client owns ONE server process (one connection) for the whole run.
//! For each concurrency (1, 16, 64 calls in flight on that one connection)
//! and each client: a warm-up, then a fixed-duration run in which that many
//! tokio tasks each loop `call; record latency` until the deadline. Every
//! cell is run `ROUNDS` times, alternating which client goes first (S D, D S,
//! S D, ...) to spread drift over both; the table shows, per client, the
//! median round by throughput (its p50 and p99 come from that same round)
//! and the min..max throughput over the rounds as a noise gauge.
//!
//! Protocol era: both sides speak 2026-07-28 by default — the server runs
//! with `--era 2026-07-28`, the sidecar is pinned to `EraPreference::Modern`,
//! and rmcp's client uses `ClientLifecycleMode::Discover` (rmcp's plain
//! `ServiceExt::serve` does the legacy `initialize` handshake, which a
//! modern-only server refuses). `--era 2025-11-25` runs both in the legacy
//! era instead. The negotiated versions are printed and checked.
//!
//! Options (or environment variables):
//! * `--quick` (`SWITCHYARD_BENCH_QUICK=1`): short smoke run. Also the default
//!   when the binary is started without `--bench`, as `cargo test --benches`
//!   does.
//! * `--era 2026-07-28|2025-11-25` (`SWITCHYARD_BENCH_ERA`).
//! * `SWITCHYARD_REFERENCE_SERVER=/path/to/switchyard-reference-server`;
//!   otherwise the release build in the target directory, built with
//!   `cargo build --release -p switchyard-reference-server` when missing.

use rmcp::model::{CallToolRequestParams, ClientConfig, JsonObject, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt, Peer, RoleClient};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use switchyard_sidecar::upstream::{
    EraPreference, StdioConfig, TransportConfig, Upstream, UpstreamConfig, UpstreamMetrics,
};
use switchyard_test_support::bench::cpu_time;

const CONCURRENCY: [usize; 3] = [1, 16, 64];
const MESSAGE: &str = "hello from the switchyard benchmark";
const THROUGHPUT_GOAL: f64 = 0.9;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Era {
    Modern,
    Legacy,
}

impl Era {
    fn name(self) -> &'static str {
        match self {
            Era::Modern => "2026-07-28",
            Era::Legacy => "2025-11-25",
        }
    }

    fn parse(s: &str) -> Era {
        match s {
            "2026-07-28" | "modern" => Era::Modern,
            "2025-11-25" | "legacy" => Era::Legacy,
            other => panic!("unknown era {other:?}: expected 2026-07-28 or 2025-11-25"),
        }
    }
}

#[derive(Debug)]
struct Settings {
    quick: bool,
    era: Era,
    warmup: Duration,
    measure: Duration,
    rounds: usize,
}

impl Settings {
    fn from_env() -> Settings {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let env_quick =
            std::env::var("SWITCHYARD_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        // `cargo bench` passes `--bench`; `cargo test --benches` does not.
        let quick = env_quick
            || args.iter().any(|a| a == "--quick")
            || !args.iter().any(|a| a == "--bench");
        let mut era = std::env::var("SWITCHYARD_BENCH_ERA").map_or(Era::Modern, |v| Era::parse(&v));
        if let Some(i) = args.iter().position(|a| a == "--era") {
            era = Era::parse(args.get(i + 1).map(String::as_str).unwrap_or(""));
        }
        if let Some(v) = args.iter().find_map(|a| a.strip_prefix("--era=")) {
            era = Era::parse(v);
        }
        if quick {
            Settings {
                quick,
                era,
                warmup: Duration::from_millis(100),
                measure: Duration::from_millis(300),
                rounds: 1,
            }
        } else {
            Settings {
                quick,
                era,
                warmup: Duration::from_millis(500),
                measure: Duration::from_secs(2),
                rounds: 3,
            }
        }
    }
}

/// One of the two clients under test. Cheap to clone; clones share the one
/// connection.
#[derive(Clone)]
enum Client {
    Sidecar(Upstream),
    Direct(Peer<RoleClient>, Option<u32>),
}

impl Client {
    fn label(&self) -> &'static str {
        match self {
            Client::Sidecar(_) => "sidecar",
            Client::Direct(..) => "direct",
        }
    }

    /// The server process's id.
    fn server_pid(&self) -> Option<u32> {
        match self {
            Client::Sidecar(up) => up.pid(),
            Client::Direct(_, pid) => *pid,
        }
    }

    /// One `echo` call; returns the echoed text when `check` is set.
    async fn call(&self, check: bool) -> Result<Option<String>, String> {
        match self {
            Client::Sidecar(up) => {
                let params = json!({"name": "echo", "arguments": {"message": MESSAGE}});
                let result = up.call_tool(params).await.map_err(|e| e.to_string())?;
                if result.get("isError") == Some(&Value::Bool(true)) {
                    return Err(format!("tool error: {result}"));
                }
                Ok(check.then(|| first_text(&result)))
            }
            Client::Direct(peer, _) => {
                let mut arguments = JsonObject::new();
                arguments.insert("message".into(), MESSAGE.into());
                let params = CallToolRequestParams::new("echo").with_arguments(arguments);
                let result = peer.call_tool(params).await.map_err(|e| e.to_string())?;
                if result.is_error == Some(true) {
                    return Err(format!("tool error: {result:?}"));
                }
                Ok(check.then(|| first_text(&serde_json::to_value(&result).unwrap_or_default())))
            }
        }
    }
}

fn first_text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn start_sidecar(bin: &Path, era: Era) -> (Upstream, String) {
    let mut config = UpstreamConfig::new(
        "reference",
        TransportConfig::Stdio(StdioConfig {
            command: bin.display().to_string(),
            args: vec!["--era".into(), era.name().into()],
            ..StdioConfig::default()
        }),
    );
    config.era = match era {
        Era::Modern => EraPreference::Modern,
        Era::Legacy => EraPreference::Legacy,
    };
    let upstream =
        Upstream::new(config, &UpstreamMetrics::unregistered()).expect("sidecar upstream");
    let negotiated = upstream.connect().await.expect("sidecar connects");
    (upstream, negotiated.protocol_version)
}

async fn start_direct(
    bin: &Path,
    era: Era,
) -> (
    RunningService<RoleClient, ClientConfig>,
    String,
    Option<u32>,
) {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(["--era", era.name()]);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the reference server");
    let pid = transport.id();
    let (info, lifecycle) = match era {
        Era::Modern => (
            ClientConfig::default(),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        ),
        Era::Legacy => (
            ClientConfig::default().with_protocol_version(ProtocolVersion::V_2025_11_25),
            ClientLifecycleMode::Initialize,
        ),
    };
    let client = info
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .expect("rmcp client connects");
    let version = client
        .peer_info()
        .map(|i| i.protocol_version.to_string())
        .unwrap_or_default();
    (client, version, pid)
}

/// One measured run of one client at one concurrency.
#[derive(Debug)]
struct Run {
    calls: usize,
    errors: usize,
    elapsed: Duration,
    /// Sorted per-call latencies, in nanoseconds.
    latencies: Vec<u64>,
    /// CPU time of this (client) process and of the server process.
    client_cpu: Duration,
    server_cpu: Duration,
}

impl Run {
    fn throughput(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }

    /// Nearest-rank percentile, in microseconds.
    fn percentile_us(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1] as f64 / 1000.0
    }

    /// CPU microseconds per call: (client, server).
    fn cpu_per_call_us(&self) -> (f64, f64) {
        let per = |d: Duration| d.as_secs_f64() * 1e6 / self.calls.max(1) as f64;
        (per(self.client_cpu), per(self.server_cpu))
    }
}

/// `concurrency` tasks call in a loop until `duration` has passed.
async fn run(client: &Client, concurrency: usize, duration: Duration) -> Run {
    let server_pid = client.server_pid();
    let (client_cpu0, server_cpu0) = (cpu_time(None), cpu_time(server_pid));
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(4096);
                let mut errors = 0usize;
                let mut first_error = None;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    match client.call(false).await {
                        Ok(_) => latencies.push(t.elapsed().as_nanos() as u64),
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert(e);
                        }
                    }
                }
                (latencies, errors, first_error)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (l, e, first) = task.await.expect("bench task");
        if let Some(first) = first {
            eprintln!("{} error: {first}", client.label());
        }
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed();
    let client_cpu = cpu_time(None).saturating_sub(client_cpu0);
    let server_cpu = cpu_time(server_pid).saturating_sub(server_cpu0);
    latencies.sort_unstable();
    Run {
        calls: latencies.len(),
        errors,
        elapsed,
        latencies,
        client_cpu,
        server_cpu,
    }
}

/// Per client: the median round by throughput, and the throughput spread.
struct Summary {
    median: Run,
    min: f64,
    max: f64,
    calls: usize,
    errors: usize,
}

fn summarise(mut runs: Vec<Run>) -> Summary {
    runs.sort_by(|a, b| a.throughput().total_cmp(&b.throughput()));
    let min = runs.first().map_or(f64::NAN, Run::throughput);
    let max = runs.last().map_or(f64::NAN, Run::throughput);
    let calls = runs.iter().map(|r| r.calls).sum();
    let errors = runs.iter().map(|r| r.errors).sum();
    let median = runs.swap_remove(runs.len() / 2);
    Summary {
        median,
        min,
        max,
        calls,
        errors,
    }
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cores} cores, {cpu}")
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
    let settings = Settings::from_env();
    let bin = server_binary();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(bench(settings, bin));
}

async fn bench(settings: Settings, bin: PathBuf) {
    println!("upstream_call: tools/call `echo` over stdio, sidecar Upstream vs direct rmcp client");
    println!("machine: {}", machine());
    println!("server:  {} --era {}", bin.display(), settings.era.name());
    println!(
        "mode:    {}: per cell {} ms warm-up + {} round(s) x {} ms per client, alternating order; \
         median round by calls/s",
        if settings.quick { "quick" } else { "full" },
        settings.warmup.as_millis(),
        settings.rounds,
        settings.measure.as_millis(),
    );

    let (upstream, sidecar_version) = start_sidecar(&bin, settings.era).await;
    let (direct, direct_version, direct_pid) = start_direct(&bin, settings.era).await;
    println!("era:     sidecar negotiated {sidecar_version}, rmcp negotiated {direct_version}");
    assert_eq!(sidecar_version, settings.era.name(), "sidecar era");
    assert_eq!(direct_version, settings.era.name(), "rmcp era");

    let clients = [
        Client::Sidecar(upstream.clone()),
        Client::Direct(direct.peer().clone(), direct_pid),
    ];
    for client in &clients {
        let echoed = client
            .call(true)
            .await
            .expect("first call")
            .unwrap_or_default();
        assert_eq!(echoed, MESSAGE, "{} echo", client.label());
    }

    println!();
    println!(
        "{:>5}  {:<8} {:>9} {:>9} {:>9}  {:>8} {:>8}  {:>18} {:>7}",
        "conc",
        "client",
        "calls/s",
        "p50 µs",
        "p99 µs",
        "cli CPU",
        "srv CPU",
        "calls/s min..max",
        "calls"
    );
    let mut ratios = Vec::new();
    for &concurrency in &CONCURRENCY {
        for client in &clients {
            run(client, concurrency, settings.warmup).await;
        }
        let mut sidecar_runs = Vec::new();
        let mut direct_runs = Vec::new();
        for round in 0..settings.rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let r = run(&clients[i], concurrency, settings.measure).await;
                if i == 0 {
                    sidecar_runs.push(r);
                } else {
                    direct_runs.push(r);
                }
            }
        }
        let sidecar = summarise(sidecar_runs);
        let direct = summarise(direct_runs);
        for (label, s) in [("direct", &direct), ("sidecar", &sidecar)] {
            let (cli_cpu, srv_cpu) = s.median.cpu_per_call_us();
            println!(
                "{:>5}  {:<8} {:>9.0} {:>9.1} {:>9.1}  {:>8.1} {:>8.1}  {:>8.0}..{:<8.0}  {:>7}{}",
                concurrency,
                label,
                s.median.throughput(),
                s.median.percentile_us(50.0),
                s.median.percentile_us(99.0),
                cli_cpu,
                srv_cpu,
                s.min,
                s.max,
                s.calls,
                if s.errors > 0 {
                    format!("  ({} errors)", s.errors)
                } else {
                    String::new()
                },
            );
        }
        let tput = sidecar.median.throughput() / direct.median.throughput();
        let p50 = sidecar.median.percentile_us(50.0) / direct.median.percentile_us(50.0);
        let p99 = sidecar.median.percentile_us(99.0) / direct.median.percentile_us(99.0);
        let cli_cpu = sidecar.median.cpu_per_call_us().0 / direct.median.cpu_per_call_us().0;
        println!(
            "{:>5}  {:<8} {:>9.2} {:>9.2} {:>9.2}  {:>8.2} {:>8}  {}",
            concurrency,
            "ratio",
            tput,
            p50,
            p99,
            cli_cpu,
            "",
            if tput >= THROUGHPUT_GOAL {
                format!("throughput goal >= {THROUGHPUT_GOAL}: met")
            } else {
                format!("throughput goal >= {THROUGHPUT_GOAL}: NOT met")
            }
        );
        ratios.push((concurrency, tput));
    }
    println!();
    println!(
        "ratio = sidecar / direct (calls/s: higher is better; p50, p99, CPU: lower is better)"
    );
    println!(
        "cli CPU, srv CPU = user+sys CPU µs per call of the benchmark process and of the server \
         process (/proc, 10 ms ticks)"
    );
    let missed: Vec<_> = ratios
        .iter()
        .filter(|(_, r)| *r < THROUGHPUT_GOAL)
        .collect();
    if missed.is_empty() {
        println!(
            "throughput goal (sidecar >= {THROUGHPUT_GOAL} x direct) met at every concurrency"
        );
    } else {
        println!("throughput goal (sidecar >= {THROUGHPUT_GOAL} x direct) missed at {missed:?}");
    }

    upstream.shutdown(Duration::from_secs(1)).await;
    let _ = direct.cancel().await;
}
