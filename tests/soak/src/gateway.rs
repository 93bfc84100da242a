//! The gateway under soak: the configuration it runs with (free loopback
//! ports, the embedded store in the output directory, short background
//! retention so finished calls do not pile up), the processes (`switchyard
//! up` and the HTTP reference server it fronts), waiting until every server
//! is up, finding each sidecar's metrics address in `up`'s log, and
//! stopping everything.

use anyhow::Context as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// The servers behind the gateway, by name.
pub const SERVERS: [&str; 3] = ["orders", "everything", "orders-http"];

/// Loopback ports of this run.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// The control plane's gRPC port (engines, admins, sidecars).
    pub grpc: u16,
    /// `/metrics`, `/healthz`, `/readyz`.
    pub http: u16,
    /// The MCP endpoint.
    pub mcp: u16,
    /// The HTTP reference server (`orders-http`).
    pub orders_http: u16,
}

/// The running processes.
#[derive(Debug)]
pub struct Gateway {
    up: Child,
    orders_http: Child,
    /// Ports of this run.
    pub ports: Ports,
    /// `up`'s stderr (its log and its sidecars').
    pub log: PathBuf,
    /// `up`'s stdout, where each sidecar prints its addresses.
    pub stdout: PathBuf,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// TOML string literal.
fn quoted(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

impl Gateway {
    /// Writes the configuration into `out`, starts the HTTP reference
    /// server and `switchyard up`, and waits (up to 120 s) until every
    /// server has a connected sidecar.
    pub async fn start(out: &Path, bin_dir: &Path, everything: &str) -> anyhow::Result<Gateway> {
        let ports = Ports {
            grpc: free_port()?,
            http: free_port()?,
            mcp: free_port()?,
            orders_http: free_port()?,
        };
        let reference = bin_dir.join("switchyard-reference-server");
        let store = out.join("store");
        // A fresh store per run: the figures start from nothing.
        let _ = std::fs::remove_dir_all(&store);
        std::fs::create_dir_all(&store)?;
        let config = format!(
            r#"# Written by switchyard-soak for one run.
[control_plane]
listen = "127.0.0.1:{grpc}"
http_listen = "127.0.0.1:{http}"

[mcp]
listen = "127.0.0.1:{mcp}"

[store]
path = {store}

# Finished background calls are kept 60 s (default: 7 days), and the task
# ttl asked of servers is 300 s (default: a day), so that what the load
# creates also goes away within the run.
[backgroundCalls]
retentionSec = 60
maxDurationSec = 300

[[servers]]
name = "orders"
transport = "stdio"
command = {reference}
args = ["--resources", "--stage-a", "--tasks", "--era", "2026-07-28", "--large-resource-bytes", "100000"]

[[servers]]
name = "everything"
transport = "stdio"
command = {everything}
args = ["stdio"]

[[servers]]
name = "orders-http"
transport = "http"
url = "http://127.0.0.1:{orders_http}/mcp"
"#,
            grpc = ports.grpc,
            http = ports.http,
            mcp = ports.mcp,
            orders_http = ports.orders_http,
            store = quoted(&store.join("soak.redb").display().to_string()),
            reference = quoted(&reference.display().to_string()),
            everything = quoted(everything),
        );
        let config_file = out.join("soak.toml");
        std::fs::write(&config_file, config)?;

        let orders_http = Command::new(&reference)
            .args(["--http", &format!("127.0.0.1:{}", ports.orders_http)])
            .args(["--era", "2025-11-25", "--stage-a", "--tasks", "--resources"])
            .args(["--large-resource-bytes", "100000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(out.join("orders-http.log"))?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", reference.display()))?;
        let log = out.join("up.log");
        let stdout = out.join("up.stdout");
        let up = Command::new(bin_dir.join("switchyard"))
            .arg("up")
            .arg("--config")
            .arg(&config_file)
            .env("SWITCHYARD_SIDECAR_BIN", bin_dir.join("switchyard-sidecar"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout)?)
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("starting switchyard up")?;
        let gw = Gateway {
            up,
            orders_http,
            ports,
            log,
            stdout,
        };
        gw.wait_ready(Duration::from_secs(120)).await?;
        Ok(gw)
    }

    /// `up`'s process id.
    pub fn up_pid(&self) -> u32 {
        self.up.id().unwrap_or(0)
    }

    /// The HTTP reference server's process id.
    pub fn orders_http_pid(&self) -> u32 {
        self.orders_http.id().unwrap_or(0)
    }

    /// The engine endpoint.
    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.grpc)
    }

    /// The control plane's `/metrics`.
    pub fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.ports.http)
    }

    /// The MCP endpoint.
    pub fn mcp_url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.ports.mcp)
    }

    async fn wait_ready(&self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        let client = reqwest::Client::new();
        loop {
            let text = match client.get(self.metrics_url()).send().await {
                Ok(r) => r.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            let up = SERVERS.iter().all(|s| {
                let series = format!("switchyard_control_plane_sidecars_up{{server=\"{s}\"}} ");
                text.lines()
                    .any(|l| l.strip_prefix(&series).is_some_and(|v| v.trim() != "0"))
            });
            if up && self.sidecar_metrics().len() == SERVERS.len() {
                return Ok(());
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "the gateway did not bring every server up within {} s; see {}",
                    limit.as_secs(),
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Each sidecar's `/metrics` URL, by server, from the last line
    /// `switchyard-sidecar: server NAME, calls on ..., http on ADDR` each
    /// prints on `up`'s stdout (a restarted sidecar prints a new one).
    pub fn sidecar_metrics(&self) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(&self.stdout).unwrap_or_default();
        let mut found: Vec<(String, String)> = Vec::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("switchyard-sidecar: server ") else {
                continue;
            };
            let Some((server, rest)) = rest.split_once(',') else {
                continue;
            };
            let Some((_, addr)) = rest.rsplit_once("http on ") else {
                continue;
            };
            let url = format!("http://{}/metrics", addr.trim());
            found.retain(|(s, _)| s != server);
            found.push((server.to_owned(), url));
        }
        found
    }

    /// Stops `up` (SIGTERM, then its drain; SIGKILL after 60 s) and the
    /// HTTP reference server.
    pub async fn stop(&mut self) {
        if let Some(pid) = self.up.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
            if tokio::time::timeout(Duration::from_secs(60), self.up.wait())
                .await
                .is_err()
            {
                let _ = self.up.kill().await;
            }
        }
        let _ = self.orders_http.kill().await;
    }
}
