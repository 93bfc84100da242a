//! `switchyard-sidecar`: the sidecar binary. `probe` checks an upstream
//! server; `run` (the service) arrives with the control plane.

use clap::{Parser, Subcommand};
use switchyard_sidecar::probe;

#[derive(Debug, Parser)]
#[command(name = "switchyard-sidecar", version, about = "Switchyard sidecar: the MCP client beside one MCP server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check an upstream MCP server: negotiate, list tools, optionally call one.
    Probe(probe::ProbeArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SWITCHYARD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::from(70);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Probe(args) => probe::run(args).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(reason) => {
            eprintln!("error: {reason}");
            std::process::ExitCode::FAILURE
        }
    }
}
