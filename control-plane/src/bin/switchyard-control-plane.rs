//! `switchyard-control-plane`: one control-plane replica (for Kubernetes;
//! `switchyard up` runs one in-process on a single machine).

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use switchyard_control_plane::config::Config;
use switchyard_control_plane::server::{self, EXIT_USAGE};

#[derive(Debug, Parser)]
#[command(
    name = "switchyard-control-plane",
    version,
    about = "A Switchyard control-plane replica"
)]
struct Args {
    /// The configuration file (TOML; see docs/configuration.md).
    #[arg(long)]
    config: PathBuf,
    /// Only check the configuration and exit (0 valid, 64 invalid).
    #[arg(long)]
    check: bool,
    /// Seconds in-flight calls get to finish on SIGTERM (readiness goes
    /// false first, then no new work is accepted).
    #[arg(long, default_value_t = 30)]
    grace_secs: u64,
}

/// mimalloc: much less time in the allocator than glibc's for the many
/// small, short-lived buffers of forwarding a call.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // A bad flag value exits 64, other bad syntax 2.
    let args: Args = match switchyard_common::args::parse() {
        Ok(args) => args,
        Err(code) => return code,
    };
    let _log = switchyard_control_plane::init_logging();
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(EXIT_USAGE);
        }
    };
    if let Some(problem) = config.oauth_key_problem() {
        eprintln!("error: {}: {problem}", args.config.display());
        return std::process::ExitCode::from(EXIT_USAGE);
    }
    if args.check {
        let n = config.servers.len();
        println!(
            "{}: ok ({n} server{})",
            args.config.display(),
            if n == 1 { "" } else { "s" }
        );
        return std::process::ExitCode::SUCCESS;
    }
    // [runtime] worker_threads: 1 (default) one thread, N workers, 0 one per core.
    let runtime = match switchyard_common::runtime::build_runtime(config.runtime.worker_threads) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::from(70);
        }
    };
    runtime.block_on(async move {
        let running = match server::start(&config, true).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                return std::process::ExitCode::from(e.exit_code());
            }
        };
        // Handlers first: a SIGTERM right after the ready line still drains.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("signal handler");
        let mut interrupt =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .expect("signal handler");
        // The MCP endpoint's and the metrics listener's addresses last,
        // when they are served.
        let mcp = running
            .mcp_addr
            .map(|a| format!(", mcp on {a}"))
            .unwrap_or_default();
        let metrics = running
            .metrics_addr
            .map(|a| format!(", metrics on {a}"))
            .unwrap_or_default();
        println!(
            "switchyard-control-plane: grpc on {}, http on {}{mcp}{metrics}",
            running.grpc_addr, running.http_addr
        );
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = term.recv() => {}
        }
        // A second signal during the drain stops at once.
        tokio::select! {
            _ = running.stop(Duration::from_secs(args.grace_secs)) => {}
            _ = interrupt.recv() => tracing::warn!("SIGINT again: stopping now"),
            _ = term.recv() => tracing::warn!("SIGTERM again: stopping now"),
        }
        std::process::ExitCode::SUCCESS
    })
}
