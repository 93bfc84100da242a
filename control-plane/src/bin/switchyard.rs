//! `switchyard`: run the gateway (`up`) and use it from the command line.

use clap::Parser;
use switchyard_control_plane::cli;

fn main() -> std::process::ExitCode {
    // Bad syntax exits 2 (clap's convention), like switchyard-sidecar.
    let cli = cli::Cli::parse();
    switchyard_control_plane::init_logging();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("error: {}", f.message);
            std::process::ExitCode::from(f.code)
        }
    }
}
