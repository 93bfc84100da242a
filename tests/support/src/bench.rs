//! Shared by the benchmarks (`sidecar/benches`, `control-plane/benches`):
//! the release build of a workspace binary, and a process's CPU time.

use std::path::PathBuf;
use std::time::Duration;

/// A release binary for a benchmark: the path in the environment variable
/// `env` when set (it must exist), else `target/release/BIN` next to the
/// running bench's profile directory, built with `cargo build --release -p
/// PACKAGE` when missing. Panics naming the binary when none can be had.
pub fn release_bin(env: &str, package: &str, bin: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env) {
        let path = PathBuf::from(path);
        assert!(path.exists(), "{env}={} does not exist", path.display());
        return path;
    }
    // target/<profile>/deps/<bench> -> target/release/<bin>
    let release = crate::target_dir()
        .parent()
        .expect("the profile directory has a parent")
        .join("release")
        .join(bin);
    if !release.exists() {
        eprintln!("building {bin} (release): {}", release.display());
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--release", "-p", package])
            .current_dir(crate::repo_root())
            .status()
            .expect("run cargo build");
        assert!(
            status.success(),
            "cargo build --release -p {package} failed"
        );
    }
    assert!(
        release.exists(),
        "{} is missing; set {env}",
        release.display()
    );
    release
}

/// User + system CPU time of a process (`/proc/<pid>/stat`, all threads;
/// this process when `pid` is `None`), in clock ticks of 1/100 s (Linux's
/// `USER_HZ`); zero where unavailable.
pub fn cpu_time(pid: Option<u32>) -> Duration {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let Ok(stat) = std::fs::read_to_string(path) else {
        return Duration::ZERO;
    };
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}
