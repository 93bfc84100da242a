//! `switchyard-soak`: the soak of issue #18 (docs/reliability.md, "Soak").
//! It starts `switchyard up` (the control plane in-process, one sidecar per
//! server) in front of three real MCP servers on loopback, drives a
//! steady, bounded mixed load through it for the given time, samples every
//! process (resident memory, open file descriptors, threads) and the
//! gateway's own gauges (live tokio tasks, store keys) at a fixed interval,
//! and writes `samples.csv` and `summary.md` into the output directory.
//! It exits 0 when nothing grew after warm-up, 1 when something did, and 2
//! when the run itself could not be made.
//!
//! Modules: `gateway` (configuration, starting and stopping the processes),
//! `procs` (reading `/proc`), `mcp` (requests to the MCP endpoint, both
//! eras), `load` (the workers), `report` (the CSV, the table per period and
//! the verdict).

mod gateway;
mod load;
mod mcp;
mod procs;
mod report;

use clap::Parser;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Soak run of `switchyard up` under a steady mixed load.
#[derive(Debug, Parser)]
struct Cli {
    /// How long the load runs, in minutes.
    #[arg(long, default_value_t = 30)]
    minutes: u64,
    /// Seconds between two samples.
    #[arg(long, default_value_t = 10)]
    sample_secs: u64,
    /// Minutes per row of the summary's table.
    #[arg(long, default_value_t = 5)]
    period_minutes: u64,
    /// Where to write `samples.csv`, `summary.md`, the gateway's log and
    /// its store (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// The directory holding `switchyard`, `switchyard-sidecar` and
    /// `switchyard-reference-server` (a release build).
    #[arg(long)]
    bin_dir: PathBuf,
    /// server-everything's command (`mcp-server-everything` on PATH by
    /// default).
    #[arg(long, default_value = "mcp-server-everything")]
    everything: String,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The driver's own runtime is one thread: its load is paced, and it
    // should take as little of the machine as possible from the gateway.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchyard-soak: cannot start a runtime: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("switchyard-soak: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// The whole run; `Ok(flat)` once the report is written.
async fn run(cli: Cli) -> anyhow::Result<bool> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    std::fs::create_dir_all(&cli.out)?;
    let out = std::fs::canonicalize(&cli.out)?;
    let bin_dir = std::fs::canonicalize(&cli.bin_dir)?;
    let mut gw = gateway::Gateway::start(&out, &bin_dir, &cli.everything).await?;
    eprintln!(
        "switchyard-soak: gateway up (pid {}), engine endpoint http://127.0.0.1:{}, MCP endpoint http://127.0.0.1:{}/mcp; load for {} min, a sample every {} s, output in {}",
        gw.up_pid(),
        gw.ports.grpc,
        gw.ports.mcp,
        cli.minutes,
        cli.sample_secs,
        out.display()
    );
    let result = soak(&cli, &out, &gw).await;
    gw.stop().await;
    result
}

async fn soak(cli: &Cli, out: &std::path::Path, gw: &gateway::Gateway) -> anyhow::Result<bool> {
    let stop = load::StopFlag::default();
    let client = reqwest::Client::new();
    let stats = load::Stats::default();
    let workers = load::start(gw, &stats, &stop).await?;
    let mut recorder = report::Recorder::create(&out.join("samples.csv"))?;
    let started = Instant::now();
    let end = started + Duration::from_secs(cli.minutes * 60);
    let mut tick = tokio::time::interval(Duration::from_secs(cli.sample_secs.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let elapsed = started.elapsed().as_secs_f64();
        let sample = procs::sample(gw, &client).await;
        recorder.record(elapsed, &sample)?;
        if let Some(cp) = sample.iter().find(|p| p.process == "control-plane") {
            eprintln!(
                "switchyard-soak: {:>5.0} s  control plane rss {} KiB, fds {}, tasks {}, store keys {}; {}",
                elapsed,
                cp.rss_kib,
                cp.fds,
                cp.alive_tasks.map_or("-".into(), |n| n.to_string()),
                cp.store_keys.map_or("-".into(), |n| n.to_string()),
                stats.line()
            );
        }
        if Instant::now() >= end {
            break;
        }
    }
    stop.set();
    load::join(workers).await;
    let verdict = recorder.finish(
        &out.join("summary.md"),
        &stats,
        Duration::from_secs(cli.period_minutes.max(1) * 60),
        cli,
    )?;
    eprintln!("{}", verdict.text);
    Ok(verdict.flat)
}
