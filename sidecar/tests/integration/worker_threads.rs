//! `worker_threads` of `switchyard-sidecar run` takes effect in the real
//! process: the default (1) runs a current-thread runtime, so no thread is
//! a tokio worker; N > 1 gives exactly N worker threads, named
//! `tokio-runtime-worker` (the kernel keeps 15 bytes: `tokio-runtime-w`,
//! as `/proc/PID/task/*/comm` shows). The setting comes from `[sidecar]
//! worker_threads`, `--worker-threads` or `SWITCHYARD_WORKER_THREADS`;
//! more than 1024 is refused before anything starts (exit 64). Upstream:
//! the reference server over stdio; the control plane's URL is a loopback
//! port nobody listens on (the sidecar serves without it).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use switchyard_test_support as support;
use switchyard_test_support::{WORKER_COMM, thread_names};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const SIDECAR: &str = env!("CARGO_BIN_EXE_switchyard-sidecar");
const LIMIT: Duration = Duration::from_secs(30);

/// A sidecar config file in `dir` with `extra` appended to `[sidecar]`.
fn config(dir: &Path, extra: &str) -> PathBuf {
    let q = |s: &str| toml::Value::String(s.to_owned()).to_string();
    let text = format!(
        "[server]\nname = \"ref\"\ntransport = \"stdio\"\ncommand = {}\nargs = [\"--era\", \"2026-07-28\"]\n\n[sidecar]\ncontrol_plane = \"http://127.0.0.1:{}\"\ngrace_secs = 1\n{extra}",
        q(&support::reference_server_bin().to_string_lossy()),
        support::free_port(),
    );
    let path = dir.join("sidecar.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn workers(pid: u32) -> usize {
    thread_names(pid)
        .iter()
        .filter(|n| n.as_str() == WORKER_COMM)
        .count()
}

/// Starts `run` with `args` and `env`, waits for its "serving" line.
async fn start(args: &[&str], env: &[(&str, &str)]) -> (Child, u32) {
    let mut cmd = Command::new(SIDECAR);
    cmd.arg("run")
        .args(args)
        .env_remove("SWITCHYARD_WORKER_THREADS")
        .env_remove("TOKIO_WORKER_THREADS")
        .env("SWITCHYARD_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start switchyard-sidecar");
    let pid = child.id().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(LIMIT, lines.next_line())
        .await
        .expect("the sidecar printed its addresses")
        .unwrap()
        .expect("a line on stdout");
    assert!(line.starts_with("switchyard-sidecar: server ref"), "{line}");
    (child, pid)
}

/// SIGTERM; the sidecar drains and exits 0 on either runtime.
async fn stop(mut child: Child, pid: u32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .expect("the sidecar stops on SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// Polls until `pid` has `want` worker threads (each renames itself when
/// it first goes idle, right after the start); returns the last count.
async fn wait_workers(pid: u32, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = workers(pid);
        if n == want || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_default_runs_on_one_thread() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "");
    let (child, pid) = start(&["--config", file.to_str().unwrap()], &[]).await;
    // Let a worker (if there were any) go idle and take its name.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let names = thread_names(pid);
    assert_eq!(workers(pid), 0, "{names:?}");
    // No tokio thread but the blocking pool's (a multi-thread runtime
    // under tokio's own names, `tokio-rt-worker`, would show here).
    assert!(
        names
            .iter()
            .all(|n| !n.starts_with("tokio-") || n == "tokio-pool"),
        "{names:?}"
    );
    stop(child, pid).await;
}

#[tokio::test]
async fn the_file_sets_three_workers() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "worker_threads = 3\n");
    let (child, pid) = start(&["--config", file.to_str().unwrap()], &[]).await;
    assert_eq!(wait_workers(pid, 3).await, 3, "{:?}", thread_names(pid));
    stop(child, pid).await;
}

#[tokio::test]
async fn the_flag_and_the_environment_set_workers() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "worker_threads = 3\n");
    let path = file.to_str().unwrap();
    // The environment overrides the file...
    let (child, pid) = start(&["--config", path], &[("SWITCHYARD_WORKER_THREADS", "2")]).await;
    assert_eq!(wait_workers(pid, 2).await, 2, "{:?}", thread_names(pid));
    stop(child, pid).await;
    // ...and the flag overrides the environment.
    let (child, pid) = start(
        &["--config", path, "--worker-threads", "4"],
        &[("SWITCHYARD_WORKER_THREADS", "2")],
    )
    .await;
    assert_eq!(wait_workers(pid, 4).await, 4, "{:?}", thread_names(pid));
    stop(child, pid).await;
    // Back to one thread from the command line.
    let (child, pid) = start(&["--config", path, "--worker-threads", "1"], &[]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(workers(pid), 0, "{:?}", thread_names(pid));
    stop(child, pid).await;
}

#[tokio::test]
async fn too_many_workers_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "worker_threads = 5000\n");
    let path = file.to_str().unwrap();
    let run = |args: Vec<&str>, env: Option<&str>| {
        let mut cmd = Command::new(SIDECAR);
        cmd.arg("run")
            .args(args)
            .env_remove("SWITCHYARD_WORKER_THREADS")
            .kill_on_drop(true);
        if let Some(v) = env {
            cmd.env("SWITCHYARD_WORKER_THREADS", v);
        }
        async move {
            tokio::time::timeout(LIMIT, cmd.output())
                .await
                .expect("the sidecar exits")
                .unwrap()
        }
    };
    let out = run(vec!["--config", path], None).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: {path}: sidecar.worker_threads: 5000 is too many: must be at most 1024"
        )),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    let file = config(dir.path(), "");
    let path = file.to_str().unwrap();
    let out = run(vec!["--config", path, "--worker-threads", "1025"], None).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("error: command line: --worker-threads")
            && stderr.contains("1025 is too many"),
        "{stderr}"
    );
    let out = run(vec!["--config", path], Some("2048")).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("SWITCHYARD_WORKER_THREADS") && stderr.contains("2048 is too many"),
        "{stderr}"
    );
}
