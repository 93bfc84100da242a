//! `switchyard-sidecar`: the sidecar binary. `run` is the service (see
//! `docs/sidecar.md`); `probe` checks an upstream server.

use clap::{Parser, Subcommand};
use switchyard_sidecar::{probe, run};

#[derive(Debug, Parser)]
#[command(
    name = "switchyard-sidecar",
    version,
    about = "Switchyard sidecar: the MCP client beside one MCP server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start; the size difference does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Run the sidecar: serve tool calls for one MCP server and report to the control plane.
    Run(run::RunArgs),
    /// Check an upstream MCP server: negotiate, list tools, optionally call one.
    Probe(probe::ProbeArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Run(_) => "info",
        // The probe's failure is its one `error:` line; logs only on request.
        Command::Probe(_) => "off",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SWITCHYARD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::from(70);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Probe(args) => match probe::run(args).await {
                Ok(()) => 0,
                Err(reason) => {
                    let reason = reason.replace('\n', " ");
                    eprintln!("error: {reason}");
                    1
                }
            },
            Command::Run(args) => match run::run(args).await {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("error: {e}");
                    e.exit_code()
                }
            },
        }
    });
    // Don't wait for tasks still blocked on I/O (e.g. a stuck control plane).
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    std::process::ExitCode::from(code)
}
