//! The configuration files: the control plane's (`config::Config::parse`,
//! what `Config::load` and `switchyard up` read) and the sidecar's
//! `--config` file (a `[server]` table, `switchyard_common`'s
//! `ServerConfig`, and a `[sidecar]` table, `SidecarSection`, read by
//! `run::settings`).
//!
//! Input: TOML text (bytes that are not UTF-8 are replaced). Checked:
//!
//! - nothing panics, in the parsers, their validation, or the sidecar's
//!   error reporting (which finds the key a TOML error is about);
//! - a control plane configuration that parses serialises back to TOML
//!   that parses to the same configuration;
//! - a sidecar file that does not parse is refused by `run::settings`.
//!
//! `run::settings` reads its file from disk (there is no from-string
//! parser to call), so it is only given texts that name no other file
//! (certificates, tokens, header files), which it would read.

#![no_main]

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use std::io::Write;
use std::sync::OnceLock;
use switchyard_common::server_spec::ServerConfig;
use switchyard_control_plane::config::Config;
use switchyard_sidecar::run::{RunArgs, SidecarSection};

/// The shape of the sidecar's `--config` file (`run::args::ConfigFile`,
/// which is private to the sidecar's `run` module).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct SidecarFile {
    server: ServerConfig,
    #[serde(default)]
    sidecar: SidecarSection,
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

/// The file `run::settings` reads, written for each input and removed
/// after (in memory, `/dev/shm`, where there is one), and the flags that
/// name it.
fn scratch() -> &'static (std::path::PathBuf, Cli) {
    static SCRATCH: OnceLock<(std::path::PathBuf, Cli)> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_owned()
        } else {
            std::env::temp_dir()
        };
        let path = base.join(format!("switchyard-fuzz-{}.toml", std::process::id()));
        let cli = Cli::try_parse_from(["run".as_ref(), "--config".as_ref(), path.as_os_str()])
            .expect("valid flags");
        (path, cli)
    })
}

fn names_files(f: &SidecarFile) -> bool {
    let s = &f.sidecar;
    !f.server.header_files.is_empty()
        || s.control_plane_ca_file.is_some()
        || s.tls_cert_file.is_some()
        || s.tls_key_file.is_some()
        || s.client_ca_file.is_some()
        || s.token_file.is_some()
        || s.calls_token_file.is_some()
}

fn sidecar_settings(text: &str) -> bool {
    let (path, cli) = scratch();
    let mut file = std::fs::File::create(path).expect("the scratch file");
    file.write_all(text.as_bytes()).expect("written");
    drop(file);
    let ok = switchyard_sidecar::run::settings(&cli.run).is_ok();
    let _ = std::fs::remove_file(path);
    ok
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);

    // The control plane.
    if let Ok(config) = Config::parse(&text) {
        let _ = config.oauth_key_problem();
        if let Ok(again) = toml::to_string(&config) {
            match Config::parse(&again) {
                Ok(back) => assert_eq!(back, config, "TOML round trip of {again}"),
                Err(e) => panic!("its own TOML does not parse: {e}\n{again}"),
            }
        }
    }

    // The sidecar.
    match toml::from_str::<SidecarFile>(&text) {
        Ok(file) => {
            let _ = file.server.validate("server");
            if !names_files(&file) {
                let _ = sidecar_settings(&text);
            }
        }
        Err(_) => assert!(
            !sidecar_settings(&text),
            "settings took a file that does not parse"
        ),
    }
});
