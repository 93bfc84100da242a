//! `switchyard`: run the gateway (`up`) and use it from the command line.

use switchyard_control_plane::cli;
use switchyard_control_plane::config::Config;

/// mimalloc: much less time in the allocator than glibc's for the many
/// small, short-lived buffers of forwarding a call.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // A bad flag value exits 64 (the README's table), other bad syntax 2
    // (clap's convention), like switchyard-sidecar.
    let cli: cli::Cli = match switchyard_common::args::parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let _log = switchyard_control_plane::init_logging();
    // `up` runs the control plane in-process: its file's [runtime]
    // worker_threads decides the runtime. A file that does not load is
    // reported by `cli::run` as usual (on one thread). The other commands
    // are short-lived clients: one thread.
    let worker_threads = match &cli.command {
        cli::Command::Up { config } => Config::load(config)
            .map(|c| c.runtime.worker_threads)
            .unwrap_or(1),
        _ => 1,
    };
    let runtime = match switchyard_common::runtime::build_runtime(worker_threads) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::from(70);
        }
    };
    match runtime.block_on(cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {}", f.message);
            std::process::ExitCode::from(f.code)
        }
    }
}
