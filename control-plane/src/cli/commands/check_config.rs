//! `switchyard check-config FILE`: validate a configuration file (exit 0
//! valid, 64 invalid). Notes on stderr name what a valid file may still not
//! do: what `switchyard up` would refuse, and which servers anonymous
//! sidecars may still act for when they are allowed.

use crate::cli::render::out;
use crate::cli::{EXIT_USAGE, Failure};
use crate::config::Config;
use std::path::Path;

/// Loads and checks `file`; prints `FILE: ok (N servers)`.
pub fn check_config(file: &Path) -> Result<(), Failure> {
    let c = Config::load(file).map_err(|e| Failure::new(EXIT_USAGE, e.to_string()))?;
    let n = c.servers.len();
    out!(
        "{}: ok ({n} server{})",
        file.display(),
        if n == 1 { "" } else { "s" }
    );
    if let Err(e) = super::up::check(&c) {
        // Valid for replicas; `up` alone would refuse it.
        eprintln!("note: `switchyard up` would refuse this file: {e}");
    }
    let bound = c.auth.tokens.iter().any(|t| !t.servers.is_empty())
        || c.auth.mtls.iter().any(|m| !m.servers.is_empty());
    if bound && !c.auth.required {
        eprintln!(
            "note: auth.required is false: a sidecar that presents no credentials may act for every server no credential is bound to (the bound ones are refused to it)"
        );
    }
    Ok(())
}
