//! `switchyard-sidecar`: the sidecar binary. `run` is the service (see
//! `docs/sidecar.md`); `probe` checks an upstream server; `check-config`
//! loads and validates a `run --config` file without running anything.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use switchyard_common::server_spec::TransportKind;
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
    /// Check a `run --config` file and exit (0 valid, 64 invalid).
    CheckConfig(CheckConfigArgs),
}

/// Arguments of `check-config`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  switchyard-sidecar check-config --config sidecar.toml")]
struct CheckConfigArgs {
    /// The TOML file `run --config` would take ([server] and [sidecar] tables).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

/// `run`'s own arguments, parsed as `run --config FILE` would be, so the
/// check applies exactly the loading and validation `run` does.
#[derive(Debug, Parser)]
#[command(name = "run")]
struct RunOnly {
    #[command(flatten)]
    run: run::RunArgs,
}

/// Loads and validates `args.config` with [`run::settings`]. Returns the
/// line to print on success, or the error (file, key, problem) and its
/// exit status (64 for a bad configuration).
fn check_config(args: &CheckConfigArgs) -> Result<String, (String, u8)> {
    // `--config=FILE`, so a file name starting with `-` is still a value.
    let mut flag = std::ffi::OsString::from("--config=");
    flag.push(args.config.as_os_str());
    let parsed = RunOnly::try_parse_from([std::ffi::OsString::from("run"), flag])
        .map_err(|e| (e.to_string(), run::EXIT_CONFIG))?;
    let settings = run::settings(&parsed.run).map_err(|e| (e.to_string(), e.exit_code()))?;
    Ok(format!(
        "{}: ok (server {}, transport {}, control plane {})",
        args.config.display(),
        settings.server.name,
        match settings.server.transport {
            TransportKind::Stdio => "stdio",
            TransportKind::Http => "http",
        },
        switchyard_common::server_spec::redacted_url(&settings.control_plane)
    ))
}

/// mimalloc: much less time in the allocator than glibc's for the many
/// small, short-lived buffers of forwarding a call.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // A bad flag value exits 64, other bad syntax 2.
    let cli: Cli = match switchyard_common::args::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let default_level = match cli.command {
        Command::Run(_) => "info",
        // The probe's failure is its one `error:` line; logs only on request.
        Command::Probe(_) => "off",
        Command::CheckConfig(_) => "warn",
    };
    let _log = switchyard_common::logging::init(default_level);
    if let Command::CheckConfig(args) = &cli.command {
        return match check_config(args) {
            Ok(line) => {
                println!("{line}");
                std::process::ExitCode::SUCCESS
            }
            Err((message, code)) => {
                eprintln!("error: {message}");
                std::process::ExitCode::from(code)
            }
        };
    }
    // `run` reads its settings first: `worker_threads` decides the runtime.
    // The probe is a short-lived client: one thread.
    let settings = match &cli.command {
        Command::Run(args) => match run::settings(args) {
            Ok(settings) => Some(settings),
            Err(e) => {
                eprintln!("error: {e}");
                return std::process::ExitCode::from(e.exit_code());
            }
        },
        _ => None,
    };
    let worker_threads = settings
        .as_ref()
        .map_or(1, |settings| settings.worker_threads);
    let runtime = match switchyard_common::runtime::build_runtime(worker_threads) {
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
            Command::Run(_) => match run::run_with(settings.expect("read above")).await {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("error: {e}");
                    e.exit_code()
                }
            },
            Command::CheckConfig(_) => unreachable!("handled before the runtime starts"),
        }
    });
    // Don't wait for tasks still blocked on I/O (e.g. a stuck control plane).
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    std::process::ExitCode::from(code)
}
