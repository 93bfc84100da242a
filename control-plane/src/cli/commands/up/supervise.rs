//! Supervision of `switchyard up`'s sidecars: one `switchyard-sidecar run`
//! child process per registered server, each with its own configuration
//! file. A server added at runtime gets a sidecar, a removed one loses it,
//! and a sidecar that exits is restarted after a delay that doubles with
//! each exit in a row ([`next_restart`]). A changed server gets a new
//! sidecar at once, and its old one keeps serving until the new one's
//! server is connected, at most [`HANDOVER_LIMIT`] (make before break: an
//! update does not leave the server without a sidecar meanwhile).
//! Each sidecar's stderr passes through `up` (to `up`'s stderr), which
//! keeps its last line: a sidecar that exits, or cannot be spawned, is
//! reported in its server's status until one connects
//! ([`crate::launches`]).

use super::link::SidecarLink;
use crate::launches::Launches;
use crate::oauth::KeyRing;
use crate::oauth::server_secrets as secrets;
use crate::state::Snapshot;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use switchyard_common::server_spec::ServerConfig;
use tokio::process::{Child, Command};

/// The log target of `up`'s lines, as before the CLI was split, so that a
/// `SWITCHYARD_LOG` filter naming it keeps working.
const TARGET: &str = "switchyard_control_plane::up";

/// How long a sidecar with grace period `grace_secs` (`[up]
/// sidecar_grace_secs`: each of its stop steps, drain calls, close the
/// server's stdin, SIGTERM) gets to stop before it is killed: longer than
/// its whole stop sequence, so its stdio server is never orphaned.
fn stop_grace(grace_secs: u64) -> Duration {
    Duration::from_secs(4 * grace_secs + 3)
}

/// Where the sidecar binary is: `SWITCHYARD_SIDECAR_BIN`, else beside this
/// executable, else on `PATH`.
pub fn sidecar_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SWITCHYARD_SIDECAR_BIN") {
        return PathBuf::from(p);
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .as_deref()
        .and_then(Path::parent)
    {
        let candidate = dir.join("switchyard-sidecar");
        if candidate.exists() {
            return candidate;
        }
    }
    PathBuf::from("switchyard-sidecar")
}

/// One server's sidecar: its spec, the running child, and its restarts.
#[derive(Debug)]
struct Managed {
    spec: ServerConfig,
    child: Option<Child>,
    /// Exits in a row, each after less than [`HEALTHY_RUN`]: the restart
    /// delay doubles with each (0.5 s × 2^n, at most 30 s).
    failures: u32,
    next_start: tokio::time::Instant,
    /// When the running child started.
    started: tokio::time::Instant,
    /// The last line the running child wrote to its stderr.
    last_line: Arc<std::sync::Mutex<Tail>>,
    /// When the running child was first seen exited, while its stderr
    /// was still being read.
    exited: Option<tokio::time::Instant>,
}

/// The end of a sidecar's stderr, as [`forward_stderr`] reads it.
#[derive(Debug, Default)]
struct Tail {
    /// The last line that was not blank.
    last: String,
    /// Whether the stream ended (the sidecar exited and its last line,
    /// if any, is in `last`).
    closed: bool,
}

/// How long an exited sidecar's stderr may take to end before its exit is
/// reported without its last line.
const TAIL_WAIT: Duration = Duration::from_secs(2);

/// A changed server's previous sidecar, serving until its successor's
/// server is connected.
#[derive(Debug)]
struct Retiring {
    server: String,
    child: Child,
    since: tokio::time::Instant,
}

/// The longest a changed server's old sidecar serves after its successor
/// started: a successor that cannot connect (a wrong new spec, an oauth
/// server waiting for its authorization) does not keep the old spec in
/// use for longer.
pub const HANDOVER_LIMIT: Duration = Duration::from_secs(15);

/// The process id in a sidecar id of the default form `HOSTNAME-PID-RANDOM`
/// (`up` does not set `sidecar_id`, so its sidecars have that form).
fn pid_of(sidecar_id: &str) -> Option<u32> {
    let mut parts = sidecar_id.rsplitn(3, '-');
    parts.next()?;
    parts.next()?.parse().ok()
}

/// A sidecar that ran this long before it exited is restarted after the
/// shortest delay again: the earlier exits are forgotten.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// After a sidecar exit: the exits in a row (`failures` before this one,
/// or none if it `ran` for [`HEALTHY_RUN`]) and the delay before the next
/// start, 1 s doubling with each exit in a row, at most 30 s.
fn next_restart(failures: u32, ran: Duration) -> (u32, Duration) {
    let failures = if ran >= HEALTHY_RUN { 1 } else { failures + 1 };
    let delay = Duration::from_millis(500 * (1u64 << failures.min(6))).min(Duration::from_secs(30));
    (failures, delay)
}

/// The sidecars `up` runs, by server name.
#[derive(Debug)]
pub(super) struct Sidecars {
    managed: BTreeMap<String, Managed>,
    /// Changed servers' previous sidecars, until their handover.
    retiring: Vec<Retiring>,
    /// Sidecars being stopped (removed servers', handed-over ones): `up`
    /// waits for them on shutdown, so none is killed before it stopped its
    /// server. By process id, for a second SIGTERM.
    stopping: Vec<(Option<u32>, tokio::task::JoinHandle<()>)>,
    link: SidecarLink,
    /// Where each sidecar's configuration file is written.
    workdir: PathBuf,
    /// Each sidecar's `grace_secs` (`[up] sidecar_grace_secs`).
    grace_secs: u64,
    /// Opens the specs' sealed secret values
    /// ([`crate::oauth::server_secrets`]).
    ring: Option<Arc<KeyRing>>,
    /// Why a server's sidecar is not running, for its status.
    launches: Arc<Launches>,
}

impl Sidecars {
    /// No sidecar yet; [`Sidecars::reconcile`] starts them.
    pub(super) fn new(
        link: SidecarLink,
        workdir: &Path,
        grace_secs: u64,
        ring: Option<Arc<KeyRing>>,
        launches: Arc<Launches>,
    ) -> Sidecars {
        Sidecars {
            managed: BTreeMap::new(),
            retiring: Vec::new(),
            stopping: Vec::new(),
            link,
            workdir: workdir.to_owned(),
            grace_secs,
            ring,
            launches,
        }
    }

    /// Brings the sidecars in line with `snap`: a removed server's sidecar
    /// is stopped, a changed one's retires ([`Sidecars::hand_over`]), and a
    /// server without a running sidecar gets one once its restart delay is
    /// over.
    pub(super) fn reconcile(&mut self, snap: &Snapshot) {
        let managed = &mut self.managed;
        // Removed or changed servers lose their sidecar.
        let gone: Vec<String> = managed
            .iter()
            // Compared opened: the same values sealed anew are no change.
            .filter(|(name, m)| {
                snap.servers
                    .get(*name)
                    .is_none_or(|r| !secrets::same(self.ring.as_deref(), &r.spec, &m.spec))
            })
            .map(|(name, _)| name.clone())
            .collect();
        let now = tokio::time::Instant::now();
        for name in gone {
            if !snap.servers.contains_key(&name) {
                self.launches.clear(&name);
                // Its file holds the spec's secrets opened; the sidecar
                // read it when it started.
                let _ = std::fs::remove_file(self.workdir.join(format!("{name}.toml")));
            }
            if let Some(child) = managed.remove(&name).and_then(|m| m.child) {
                if snap.servers.contains_key(&name) {
                    tracing::info!(target: TARGET, server = %name, "server changed; starting a new sidecar, the old one stops once the new one is connected");
                    self.retiring.push(Retiring {
                        server: name,
                        child,
                        since: now,
                    });
                } else {
                    tracing::info!(target: TARGET, server = %name, "server removed; stopping its sidecar");
                    let pid = child.id();
                    self.stopping.push((
                        pid,
                        tokio::spawn(stop_child(child, stop_grace(self.grace_secs))),
                    ));
                }
            }
        }
        for (name, rec) in &snap.servers {
            let m = managed.entry(name.clone()).or_insert_with(|| Managed {
                spec: rec.spec.clone(),
                child: None,
                failures: 0,
                next_start: now,
                started: now,
                last_line: Default::default(),
                exited: None,
            });
            if let Some(child) = &mut m.child {
                match child.try_wait() {
                    Ok(None) => {
                        // Registered: it reports for itself from now on.
                        if is_registered(snap, name, child.id()) {
                            self.launches.clear(name);
                        }
                        continue;
                    }
                    Ok(Some(status)) => {
                        // Its last line says why: wait (a tick or a few)
                        // for the stream to end, which may come after the
                        // exit is seen.
                        let exited = *m.exited.get_or_insert(now);
                        let tail = m.last_line.lock().expect("not poisoned");
                        if !tail.closed && now.duration_since(exited) < TAIL_WAIT {
                            continue;
                        }
                        let last = tail.last.clone();
                        drop(tail);
                        m.exited = None;
                        let ran = m.started.elapsed();
                        let (failures, delay) = next_restart(m.failures, ran);
                        m.failures = failures;
                        self.launches.set(
                            name,
                            format!(
                                "its sidecar exited ({status}) {:.1} s after it started{}",
                                ran.as_secs_f64(),
                                match last.is_empty() {
                                    true => String::new(),
                                    false => format!(": {last}"),
                                }
                            ),
                        );
                        tracing::warn!(target: TARGET, server = %name, %status, retry_in_ms = delay.as_millis() as u64, "sidecar exited; restarting");
                        m.child = None;
                        m.next_start = now + delay;
                    }
                    Err(e) => {
                        tracing::warn!(target: TARGET, server = %name, error = %e, "cannot check the sidecar");
                        continue;
                    }
                }
            }
            if m.child.is_none() && now >= m.next_start {
                let opened =
                    secrets::open(self.ring.as_deref(), &m.spec).map_err(|e| anyhow::anyhow!(e));
                match opened.and_then(|spec| {
                    spawn_sidecar(&spec, &self.link, &self.workdir, self.grace_secs)
                }) {
                    Ok((child, last_line)) => {
                        m.child = Some(child);
                        m.last_line = last_line;
                        m.started = tokio::time::Instant::now();
                    }
                    Err(e) => {
                        self.launches
                            .set(name, format!("cannot start its sidecar: {e:#}"));
                        tracing::error!(target: TARGET, server = %name, error = %e, "cannot start a sidecar");
                        m.failures += 1;
                        m.next_start = now + Duration::from_secs(5);
                    }
                }
            }
        }
        self.hand_over(snap, now);
    }

    /// Stops each retiring sidecar whose successor's server is connected
    /// (the successor is the server's current child; its sidecar is found
    /// by process id in the read model), whose server was removed, or whose
    /// successor has run [`HANDOVER_LIMIT`] without connecting. One that
    /// exited on its own is forgotten; one without a successor (it could
    /// not be started) keeps serving.
    fn hand_over(&mut self, snap: &Snapshot, now: tokio::time::Instant) {
        let grace = stop_grace(self.grace_secs);
        self.stopping.retain(|(_, h)| !h.is_finished());
        for mut r in std::mem::take(&mut self.retiring) {
            if !matches!(r.child.try_wait(), Ok(None)) {
                continue;
            }
            // The server's current child, and when it started.
            let (successor, successor_started) = self
                .managed
                .get(&r.server)
                .and_then(|m| m.child.as_ref().map(|c| (c.id(), m.started)))
                .unzip();
            let connected = is_connected(snap, &r.server, successor.flatten());
            let removed = !snap.servers.contains_key(&r.server);
            // Counted from the successor's start: with no successor (it
            // could not be started), the old sidecar keeps serving.
            let overdue = successor_started.is_some_and(|t| now >= t.max(r.since) + HANDOVER_LIMIT);
            if connected || removed || overdue {
                let why = if connected {
                    "its successor is connected"
                } else if removed {
                    "the server was removed"
                } else {
                    "its successor did not connect in time"
                };
                tracing::info!(target: TARGET, server = %r.server, waited_ms = now.saturating_duration_since(r.since).as_millis() as u64, "stopping the previous sidecar: {why}");
                let pid = r.child.id();
                self.stopping
                    .push((pid, tokio::spawn(stop_child(r.child, grace))));
            } else {
                self.retiring.push(r);
            }
        }
    }

    /// Stops every sidecar at once (each gets [`stop_grace`]) and waits.
    /// When `again` resolves first (a second SIGINT or SIGTERM), every
    /// sidecar gets a second SIGTERM, which hurries its drain (its calls
    /// are cancelled at once).
    pub(super) async fn stop(self, again: impl std::future::Future<Output = ()>) {
        let grace = stop_grace(self.grace_secs);
        let children: Vec<Child> = self
            .managed
            .into_values()
            .filter_map(|m| m.child)
            .chain(self.retiring.into_iter().map(|r| r.child))
            .collect();
        let mut pids: Vec<u32> = children.iter().filter_map(Child::id).collect();
        pids.extend(self.stopping.iter().filter_map(|(pid, _)| *pid));
        // The sidecars already stopping are waited for too.
        let already = futures::future::join_all(self.stopping.into_iter().map(|(_, h)| h));
        let stops = futures::future::join(
            futures::future::join_all(children.into_iter().map(|c| stop_child(c, grace))),
            already,
        );
        tokio::pin!(stops);
        tokio::select! {
            _ = &mut stops => return,
            () = again => {
                tracing::warn!(target: TARGET, "asked again: hurrying the sidecars");
                for pid in pids {
                    if let Ok(pid) = i32::try_from(pid) {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGTERM,
                        );
                    }
                }
            }
        }
        stops.await;
    }
}

/// Whether the sidecar with process id `pid` has `server` connected, as
/// the read model says (found by the process id in its sidecar id).
fn is_connected(snap: &Snapshot, server: &str, pid: Option<u32>) -> bool {
    registered(snap, server, pid).any(|s| s.upstream_state == "connected")
}

/// Whether the sidecar with process id `pid` is registered for `server`.
fn is_registered(snap: &Snapshot, server: &str, pid: Option<u32>) -> bool {
    registered(snap, server, pid).next().is_some()
}

/// The registrations of `server` by the sidecar with process id `pid`.
fn registered<'a>(
    snap: &'a Snapshot,
    server: &str,
    pid: Option<u32>,
) -> impl Iterator<Item = &'a crate::model::SidecarRecord> {
    snap.sidecars
        .get(server)
        .into_iter()
        .flat_map(|all| all.values())
        .filter(move |s| pid.is_some() && pid_of(&s.sidecar_id) == pid)
}

/// Copies a sidecar's stderr to `up`'s, line by line, keeping the last
/// non-empty line (at most 1000 characters) in `last`.
fn forward_stderr(stderr: tokio::process::ChildStderr, last: Arc<std::sync::Mutex<Tail>>) {
    tokio::spawn(async move {
        use std::io::Write;
        use tokio::io::AsyncBufReadExt;
        let mut reader = tokio::io::BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => {
                    last.lock().expect("not poisoned").closed = true;
                    return;
                }
                Ok(_) => {
                    let _ = std::io::stderr().lock().write_all(&line);
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim();
                    if !text.is_empty() {
                        last.lock().expect("not poisoned").last = text.chars().take(1000).collect();
                    }
                }
            }
        }
    });
}

/// Writes the configuration file of `spec`'s sidecar into `workdir`, then
/// starts `switchyard-sidecar run --config FILE`; returns the child and
/// where the last line of its stderr is kept.
fn spawn_sidecar(
    spec: &ServerConfig,
    link: &SidecarLink,
    workdir: &Path,
    grace_secs: u64,
) -> anyhow::Result<(Child, Arc<std::sync::Mutex<Tail>>)> {
    #[derive(serde::Serialize)]
    struct SidecarFile<'a> {
        server: &'a ServerConfig,
        sidecar: SidecarSection<'a>,
    }
    #[derive(serde::Serialize)]
    struct SidecarSection<'a> {
        control_plane: &'a str,
        listen: &'a str,
        http_listen: &'a str,
        grace_secs: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        control_plane_ca_file: Option<&'a Path>,
        #[serde(skip_serializing_if = "Option::is_none")]
        token_file: Option<&'a Path>,
    }
    let file = workdir.join(format!("{}.toml", spec.name));
    let text = toml::to_string(&SidecarFile {
        server: spec,
        sidecar: SidecarSection {
            control_plane: &link.control_plane,
            listen: "127.0.0.1:0",
            http_listen: "127.0.0.1:0",
            grace_secs,
            control_plane_ca_file: link.ca_file.as_deref(),
            token_file: link.token_for(&spec.name),
        },
    })?;
    if link.token_for(&spec.name).is_none() && !link.sidecar_tokens.is_empty() {
        tracing::warn!(target: TARGET, server = %spec.name, "no [[auth.tokens]] entry of role sidecar may act for this server; its sidecar starts without a token");
    }
    // Owner-only: the spec may carry header values.
    write_private(&file, &text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let mut child = Command::new(sidecar_binary())
        .arg("run")
        .arg("--config")
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        // Its own process group: a Ctrl-C in the terminal (SIGINT to the
        // foreground group) reaches `up` only, which stops each sidecar
        // with one SIGTERM and its grace period. In `up`'s group, the
        // sidecar would get the SIGINT too, and `up`'s SIGTERM would be
        // its second signal, which hurries the drain.
        .process_group(0)
        .spawn()
        .map_err(|e| anyhow::anyhow!("{}: {e}", sidecar_binary().display()))?;
    tracing::info!(target: TARGET, server = %spec.name, pid = child.id().unwrap_or(0), "sidecar started");
    let last = Arc::new(std::sync::Mutex::new(Tail::default()));
    if let Some(stderr) = child.stderr.take() {
        forward_stderr(stderr, last.clone());
    }
    Ok((child, last))
}

/// Writes `text` to `file`, readable and writable by its owner only
/// (mode 0600, also when the file existed).
fn write_private(file: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(file)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(text.as_bytes())
}

/// SIGTERM, wait up to `grace`, then SIGKILL.
pub async fn stop_child(mut child: Child, grace: Duration) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pid_is_read_from_a_default_sidecar_id() {
        assert_eq!(pid_of("vm-17012-eaf9fcde"), Some(17012));
        assert_eq!(pid_of("my-host-name-7-0000abcd"), Some(7));
        assert_eq!(pid_of("custom"), None);
        assert_eq!(pid_of("a-b"), None);
    }

    #[test]
    fn restart_delays_double_and_reset_after_a_healthy_run() {
        let quick = Duration::from_secs(1);
        let mut failures = 0;
        let mut delays = Vec::new();
        for _ in 0..7 {
            let (f, d) = next_restart(failures, quick);
            failures = f;
            delays.push(d.as_secs());
        }
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
        // A minute of healthy running forgets the earlier exits.
        assert_eq!(
            next_restart(failures, HEALTHY_RUN),
            (1, Duration::from_secs(1))
        );
    }
}
