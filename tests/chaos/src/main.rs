//! `switchyard-chaos`: Switchyard's chaos suite on real processes, run by
//! `scripts/chaos.sh`. It starts a cluster on loopback ([`cluster`]: three
//! etcd members, two control-plane replicas, two sidecars of each of two
//! servers, `orders` over stdio and `orders-http` over Streamable HTTP),
//! creates two engine sessions, and then, for each fault and
//! repetition, runs a [`round`]: load through both replicas ([`load`]),
//! the fault injected mid-call and mid-task, the cluster healed, and the
//! round's criteria checked. It prints the [`report`] (a markdown table)
//! and exits 1 when anything was lost or duplicated, 2 when the cluster
//! could not be run.
//!
//! ```text
//! switchyard-chaos --bin-dir target/debug [--reps N] [--faults a,b] [--report FILE] [--work-dir DIR]
//! ```

mod cluster;
mod load;
mod proxy;
mod report;
mod round;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;

use crate::round::Fault;

/// Switchyard's chaos suite (see docs/reliability.md, "Chaos").
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// The directory of the workspace binaries (switchyard-control-plane,
    /// switchyard-sidecar, switchyard-reference-server).
    #[arg(long, value_name = "DIR")]
    bin_dir: PathBuf,
    /// Rounds per fault.
    #[arg(long, default_value_t = 1)]
    reps: u32,
    /// Only these faults (comma-separated): etcd-leader-kill, replica-kill,
    /// sidecar-kill, upstream-kill, http-upstream-kill, replica-sigstop,
    /// etcd-cut.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// Also write the report to this file.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Also fail on the known defects the report lists apart: task results
    /// lost (a task ran on while its call was failed as "task not found")
    /// and orphaned cards (open and answerable after their call ended).
    #[arg(long)]
    strict: bool,
    /// Where the processes' logs and data go (default: a new temporary
    /// directory, removed after a run without problems).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // On SIGTERM or SIGINT (scripts/chaos.sh's time limit, Ctrl-C) the run
    // is dropped, and with it every process it started (kill on drop).
    let stopped = async {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        outcome = run(cli) => outcome,
        _ = stopped => Err(anyhow::anyhow!("stopped by a signal")),
    };
    match outcome {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(e) => {
            eprintln!("chaos: FAILED to run: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<bool> {
    let faults: Vec<Fault> = if cli.faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        cli.faults
            .iter()
            .map(|name| {
                Fault::ALL
                    .into_iter()
                    .find(|f| f.name() == name)
                    .ok_or_else(|| anyhow::anyhow!("unknown fault {name:?}"))
            })
            .collect::<anyhow::Result<_>>()?
    };
    let bins = cluster::Bins::in_dir(&cli.bin_dir)?;
    let (dir, keep) = match &cli.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            (d.clone(), true)
        }
        None => {
            let d = std::env::temp_dir().join(format!("switchyard-chaos-{}", std::process::id()));
            std::fs::create_dir_all(&d)?;
            (d, false)
        }
    };
    eprintln!("chaos: work directory {}", dir.display());
    let started = Instant::now();
    let mut cluster = cluster::Cluster::start(&dir, bins).await?;
    eprintln!(
        "chaos: cluster up in {:.1} s (3 etcd members, 2 replicas, 2 servers with 2 sidecars each, 1 HTTP server)",
        started.elapsed().as_secs_f64()
    );
    let sessions = round::create_sessions(&cluster).await?;
    let mut rounds = Vec::new();
    let mut failure = None;
    'outer: for rep in 1..=cli.reps {
        for fault in &faults {
            eprintln!("chaos: {} #{rep} ...", fault.name());
            match round::run(&mut cluster, &sessions, *fault, rep).await {
                Ok(r) => {
                    eprintln!(
                        "chaos: {} #{rep} on {}: {} calls, {} ok, errors {:?}, background {:?}, recovery {:?}, heal {:.1} s, {} problem(s), {:.1} s",
                        r.fault,
                        r.target,
                        r.calls,
                        r.ok,
                        r.errors,
                        r.background,
                        r.recovery,
                        r.heal.as_secs_f64(),
                        r.problems.len(),
                        r.wall.as_secs_f64()
                    );
                    for p in &r.problems {
                        eprintln!("chaos:   LOST/DUPLICATE: {p}");
                    }
                    rounds.push(r);
                }
                Err(e) => {
                    failure = Some(format!("{} #{rep}: {e:#}", fault.name()));
                    break 'outer;
                }
            }
        }
    }
    cluster.stop().await;
    let wall = started.elapsed();
    let mut text = report::markdown(&rounds);
    let _ = std::fmt::Write::write_fmt(
        &mut text,
        format_args!(
            "\n{} round(s), {} rep(s), wall time {:.0} s.\n",
            rounds.len(),
            cli.reps,
            wall.as_secs_f64()
        ),
    );
    println!("{text}");
    if let Some(path) = &cli.report {
        std::fs::write(path, &text)?;
        eprintln!("chaos: report written to {}", path.display());
    }
    let mut problems: usize = rounds.iter().map(|r| r.problems.len()).sum();
    let known: usize = rounds
        .iter()
        .map(|r| r.results_lost.len() + r.orphaned_cards.len())
        .sum();
    if known > 0 {
        eprintln!(
            "chaos: {known} known defect(s) seen (task results lost, orphaned cards: see the notes){}",
            if cli.strict {
                "; --strict: failing"
            } else {
                ""
            }
        );
        if cli.strict {
            problems += known;
        }
    }
    if let Some(f) = failure {
        eprintln!("chaos: FAILED: {f}\nchaos: logs are in {}", dir.display());
        return Err(anyhow::anyhow!("a round could not complete: {f}"));
    }
    if problems > 0 {
        eprintln!(
            "chaos: FAILED: {problems} thing(s) lost or duplicated (above); logs are in {}",
            dir.display()
        );
        return Ok(false);
    }
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    eprintln!("chaos: passed: nothing lost or duplicated");
    Ok(true)
}
