//! `switchyard up`: the all-in-one gateway for one machine. It starts a
//! control-plane replica (embedded store, or etcd when the config names
//! endpoints) and supervises one `switchyard-sidecar run` child process per
//! registered server: a server added at runtime gets a sidecar, a removed
//! one loses it, and a sidecar that dies is restarted with backoff. On
//! SIGINT or SIGTERM every sidecar is asked to stop (they close their stdio
//! servers' stdin, then SIGTERM, then SIGKILL), and the replica stops last.

use crate::config::Config;
use crate::server::{self, Running};
use crate::state::Change;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use switchyard_common::server_spec::ServerConfig;
use tokio::process::{Child, Command};

/// The grace period `up` gives each sidecar for each of its stop steps
/// (drain calls; close the server's stdin; SIGTERM), in seconds.
const SIDECAR_GRACE_SECS: u64 = 3;
/// How long sidecars get to stop before they are killed: longer than a
/// sidecar's whole stop sequence, so its stdio server is never orphaned.
const STOP_GRACE: Duration = Duration::from_secs(4 * SIDECAR_GRACE_SECS + 3);

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

/// How `up`'s sidecars reach its control plane: over `https://` when
/// `[tls]` has a certificate (trusting `client_ca_file`, else `cert_file`
/// itself), each sidecar with the token of the first `[[auth.tokens]]`
/// entry of role `sidecar` that may act for its server.
#[derive(Debug, Clone)]
struct SidecarLink {
    control_plane: String,
    ca_file: Option<PathBuf>,
    /// The `[[auth.tokens]]` entries of role `sidecar`, in file order:
    /// (token file, the servers it is bound to; empty: any).
    sidecar_tokens: Vec<(PathBuf, Vec<String>)>,
}

impl SidecarLink {
    /// The token file for `server`'s sidecar: the first sidecar token that
    /// may act for it.
    fn token_for(&self, server: &str) -> Option<&Path> {
        self.sidecar_tokens
            .iter()
            .find(|(_, servers)| servers.is_empty() || servers.iter().any(|s| s == server))
            .map(|(file, _)| file.as_path())
    }
}

/// What `up` needs of a file beyond what a replica needs: its sidecars
/// authenticate with a token, so `tls.require_client_cert` must be false,
/// and `auth.required` needs, for each configured server, a token of role
/// `sidecar` that may act for it. Errors: the
/// problem, naming the key (the CLI exits 64 before starting anything).
pub fn check(config: &Config) -> Result<(), String> {
    if config.tls.require_client_cert {
        return Err(
            "tls.require_client_cert = true is not supported by `switchyard up`: the sidecars it starts authenticate with a token; set it to false and add an [[auth.tokens]] entry with role \"sidecar\"".into(),
        );
    }
    if config.auth.required && !config.auth.tokens.iter().any(|t| t.role == "sidecar") {
        return Err(
            "auth.required = true needs an [[auth.tokens]] entry with role \"sidecar\" for the sidecars `switchyard up` starts".into(),
        );
    }
    if config.auth.required {
        let link = SidecarLink::tokens(config);
        for (i, server) in config.servers.iter().enumerate() {
            if link.token_for(&server.name).is_none() {
                return Err(format!(
                    "servers[{i}].name: auth.required = true, but no [[auth.tokens]] entry with role \"sidecar\" may act for server {:?} (each one's `servers` leaves it out)",
                    server.name
                ));
            }
        }
    }
    Ok(())
}

impl SidecarLink {
    fn new(config: &Config, grpc_addr: std::net::SocketAddr) -> anyhow::Result<SidecarLink> {
        check(config).map_err(|e| anyhow::anyhow!("switchyard up: {e}"))?;
        let sidecar_tokens = Self::tokens(config).sidecar_tokens;
        let (control_plane, ca_file) = match &config.tls.cert_file {
            Some(cert) => {
                // Certificates for one machine name `localhost` (or
                // 127.0.0.1); a wildcard listener is reached on loopback.
                let ip = grpc_addr.ip();
                let host = if ip.is_loopback() || ip.is_unspecified() {
                    "localhost".to_owned()
                } else {
                    ip.to_string()
                };
                (
                    format!("https://{host}:{}", grpc_addr.port()),
                    Some(
                        config
                            .tls
                            .client_ca_file
                            .clone()
                            .unwrap_or_else(|| cert.clone()),
                    ),
                )
            }
            None => (format!("http://{grpc_addr}"), None),
        };
        Ok(SidecarLink {
            control_plane,
            ca_file,
            sidecar_tokens,
        })
    }

    /// A link with only the sidecar tokens of `config` filled in.
    fn tokens(config: &Config) -> SidecarLink {
        SidecarLink {
            control_plane: String::new(),
            ca_file: None,
            sidecar_tokens: config
                .auth
                .tokens
                .iter()
                .filter(|t| t.role == "sidecar")
                .map(|t| (t.token_file.clone(), t.servers.clone()))
                .collect(),
        }
    }
}

struct Managed {
    spec: ServerConfig,
    child: Option<Child>,
    /// Exits in a row, each after less than [`HEALTHY_RUN`]: the restart
    /// delay doubles with each (0.5 s × 2^n, at most 30 s).
    failures: u32,
    next_start: tokio::time::Instant,
    /// When the running child started.
    started: tokio::time::Instant,
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

/// Runs until SIGINT/SIGTERM. Returns the process exit code.
pub async fn run(mut config: Config) -> anyhow::Result<()> {
    // `up` owns its file: servers dropped from it go.
    config.control_plane.prune_config_servers = true;
    let running = server::start(&config, true).await?;
    let link = SidecarLink::new(&config, running.grpc_addr)?;
    let engine = link.control_plane.clone();
    let workdir = tempfile::Builder::new()
        .prefix("switchyard-up-")
        .tempdir()?;
    println!("switchyard: engine endpoint {engine}");
    println!(
        "switchyard: metrics http://{}/metrics, store {}",
        running.http_addr,
        if config.store.etcd_endpoints.is_empty() {
            format!("embedded ({})", config.store.path.display())
        } else {
            format!("etcd ({})", config.store.etcd_endpoints.join(","))
        }
    );
    let names: Vec<_> = running
        .cp
        .state
        .snapshot()
        .servers
        .keys()
        .cloned()
        .collect();
    println!("switchyard: servers {}", names.join(", "));

    let mut managed: BTreeMap<String, Managed> = BTreeMap::new();
    let mut changes = running.cp.state.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        reconcile(&running, &mut managed, &link, workdir.path());
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
            c = changes.recv() => {
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = c { break }
                let _ = matches!(c, Ok(Change::ServersChanged));
            }
            _ = tick.tick() => {}
        }
    }
    println!("switchyard: stopping");
    let stops = managed
        .into_values()
        .filter_map(|m| m.child)
        .map(|c| stop_child(c, STOP_GRACE));
    futures::future::join_all(stops).await;
    running.stop(Duration::from_secs(5)).await;
    println!("switchyard: stopped");
    Ok(())
}

fn reconcile(
    running: &Running,
    managed: &mut BTreeMap<String, Managed>,
    link: &SidecarLink,
    workdir: &Path,
) {
    let snap = running.cp.state.snapshot();
    // Removed or changed servers lose their sidecar.
    let gone: Vec<String> = managed
        .iter()
        .filter(|(name, m)| snap.servers.get(*name).is_none_or(|r| r.spec != m.spec))
        .map(|(name, _)| name.clone())
        .collect();
    for name in gone {
        if let Some(child) = managed.remove(&name).and_then(|m| m.child) {
            tracing::info!(server = %name, "server removed or changed; stopping its sidecar");
            tokio::spawn(stop_child(child, STOP_GRACE));
        }
    }
    let now = tokio::time::Instant::now();
    for (name, rec) in &snap.servers {
        let m = managed.entry(name.clone()).or_insert_with(|| Managed {
            spec: rec.spec.clone(),
            child: None,
            failures: 0,
            next_start: now,
            started: now,
        });
        if let Some(child) = &mut m.child {
            match child.try_wait() {
                Ok(None) => continue,
                Ok(Some(status)) => {
                    let (failures, delay) = next_restart(m.failures, m.started.elapsed());
                    m.failures = failures;
                    tracing::warn!(server = %name, %status, retry_in_ms = delay.as_millis() as u64, "sidecar exited; restarting");
                    m.child = None;
                    m.next_start = now + delay;
                }
                Err(e) => {
                    tracing::warn!(server = %name, error = %e, "cannot check the sidecar");
                    continue;
                }
            }
        }
        if m.child.is_none() && now >= m.next_start {
            match spawn_sidecar(&m.spec, link, workdir) {
                Ok(child) => {
                    m.child = Some(child);
                    m.started = tokio::time::Instant::now();
                }
                Err(e) => {
                    tracing::error!(server = %name, error = %e, "cannot start a sidecar");
                    m.failures += 1;
                    m.next_start = now + Duration::from_secs(5);
                }
            }
        }
    }
}

fn spawn_sidecar(spec: &ServerConfig, link: &SidecarLink, workdir: &Path) -> anyhow::Result<Child> {
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
            grace_secs: SIDECAR_GRACE_SECS,
            control_plane_ca_file: link.ca_file.as_deref(),
            token_file: link.token_for(&spec.name),
        },
    })?;
    if link.token_for(&spec.name).is_none() && !link.sidecar_tokens.is_empty() {
        tracing::warn!(server = %spec.name, "no [[auth.tokens]] entry of role sidecar may act for this server; its sidecar starts without a token");
    }
    std::fs::write(&file, text)?;
    let child = Command::new(sidecar_binary())
        .arg("run")
        .arg("--config")
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| anyhow::anyhow!("{}: {e}", sidecar_binary().display()))?;
    tracing::info!(server = %spec.name, pid = child.id().unwrap_or(0), "sidecar started");
    Ok(child)
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

    fn config(tokens: &str) -> Config {
        Config::parse(&format!(
            "[auth]\nrequired = true\n{tokens}\n\
             [[servers]]\nname = \"files\"\ntransport = \"stdio\"\ncommand = \"files-server\"\n\n\
             [[servers]]\nname = \"web\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n"
        ))
        .unwrap()
    }

    const ENGINE: &str =
        "[[auth.tokens]]\nname = \"e\"\nrole = \"engine\"\ntoken_file = \"/t/e\"\n";

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

    #[test]
    fn each_sidecar_gets_the_first_token_that_may_act_for_its_server() {
        let c = config(&format!(
            "{ENGINE}\
             [[auth.tokens]]\nname = \"web-only\"\nrole = \"sidecar\"\ntoken_file = \"/t/web\"\nservers = [\"web\"]\n\
             [[auth.tokens]]\nname = \"any\"\nrole = \"sidecar\"\ntoken_file = \"/t/any\"\n"
        ));
        assert_eq!(check(&c), Ok(()));
        let link = SidecarLink::tokens(&c);
        assert_eq!(link.token_for("web"), Some(Path::new("/t/web")));
        assert_eq!(link.token_for("files"), Some(Path::new("/t/any")));
    }

    #[test]
    fn a_server_no_sidecar_token_may_act_for_is_refused_by_name() {
        let c = config(&format!(
            "{ENGINE}\
             [[auth.tokens]]\nname = \"web-only\"\nrole = \"sidecar\"\ntoken_file = \"/t/web\"\nservers = [\"web\"]\n"
        ));
        let e = check(&c).unwrap_err();
        assert!(
            e.starts_with("servers[0].name: ") && e.contains("\"files\""),
            "{e}"
        );
        assert_eq!(SidecarLink::tokens(&c).token_for("files"), None);
        // Not required: the sidecar may start without a token.
        let open = Config {
            auth: crate::config::AuthConfig {
                required: false,
                ..c.auth.clone()
            },
            ..c
        };
        assert_eq!(check(&open), Ok(()));
    }
}
