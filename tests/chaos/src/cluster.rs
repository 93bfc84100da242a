//! The cluster under test, made of real processes on loopback: three etcd
//! members (one real etcd cluster), two control-plane replicas (`a` talks
//! to etcd directly, `b` through [`crate::proxy`] so that it can be cut
//! off), and two servers with two sidecars each, one registered with each
//! replica: `orders`, whose sidecars each run their own reference server
//! over stdio, and `orders-http`, whose sidecars both talk to one reference
//! server over Streamable HTTP ([`HttpServer`], 2025-11-25, so with MCP
//! sessions), which the driver runs itself. Every reference server has
//! tasks and writes the one execution log. Each piece can be killed,
//! frozen and started again on the same ports and data, and
//! [`Cluster::wait_healed`] waits until the whole cluster serves again.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use nix::sys::signal::Signal;
use switchyard_proto::v1 as pb;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};
use tonic::transport::Channel;

use crate::proxy::Proxy;

/// Lease TTL of sidecar registrations, in seconds (the replicas' config).
pub const LEASE_TTL_SECS: u64 = 3;

/// How often each replica sweeps interactions, closing the approvals of a
/// dead replica: `SWEEP_EVERY` of `control-plane/src/interactions/mod.rs`.
pub const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// The server whose sidecars run their reference server over stdio.
pub const SERVER: &str = "orders";

/// The server reached over Streamable HTTP: one reference server process
/// ([`HttpServer`]) that both its sidecars talk to.
pub const HTTP_SERVER: &str = "orders-http";

/// The servers the load goes to, [`SERVER`] first.
pub const SERVERS: [&str; 2] = [SERVER, HTTP_SERVER];

/// How long a process may take to start or a condition to come true.
pub const LIMIT: Duration = Duration::from_secs(60);

/// Where the binaries are.
#[derive(Debug, Clone)]
pub struct Bins {
    pub control_plane: PathBuf,
    pub sidecar: PathBuf,
    pub reference_server: PathBuf,
    pub etcd: PathBuf,
}

impl Bins {
    /// The workspace binaries in `dir` (`target/debug`) and etcd on PATH.
    pub fn in_dir(dir: &Path) -> anyhow::Result<Bins> {
        let bin = |name: &str| {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(anyhow!(
                    "{} is missing: build it (cargo build --workspace --bins)",
                    path.display()
                ))
            }
        };
        let etcd = std::panic::catch_unwind(switchyard_test_support::etcd_bin)
            .map_err(|_| anyhow!("etcd is missing: run scripts/install-test-peers.sh"))?;
        Ok(Bins {
            control_plane: bin("switchyard-control-plane")?,
            sidecar: bin("switchyard-sidecar")?,
            reference_server: bin("switchyard-reference-server")?,
            etcd,
        })
    }
}

/// A child process with its stderr in a log file.
#[derive(Debug)]
pub struct Proc {
    pub child: Child,
    pub pid: u32,
}

impl Proc {
    /// Starts `cmd` (stdout piped, stderr appended to `log`); when `marker`
    /// is given, waits (up to [`LIMIT`]) for a stdout line containing it.
    async fn start(
        name: &str,
        mut cmd: Command,
        log: PathBuf,
        marker: Option<&str>,
    ) -> anyhow::Result<(Proc, String)> {
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("open {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .kill_on_drop(true);
        let mut child = cmd.spawn().with_context(|| format!("start {name}"))?;
        let pid = child.id().context("pid")?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let mut found = String::new();
        if let Some(marker) = marker {
            let line = tokio::time::timeout(LIMIT, async {
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.contains(marker) {
                        return Some(line);
                    }
                }
                None
            })
            .await;
            match line {
                Ok(Some(line)) => found = line,
                other => bail!(
                    "{name} printed no {marker:?} line ({}); its log ends with:\n{}",
                    if other.is_err() { "timeout" } else { "exited" },
                    tail(&log, 30)
                ),
            }
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let proc = Proc { child, pid };
        Ok((proc, found))
    }

    /// Sends `sig`.
    pub fn signal(&self, sig: Signal) {
        signal(self.pid, sig);
    }

    /// SIGKILL, and waits for it to exit.
    pub async fn kill9(&mut self) {
        self.signal(Signal::SIGKILL);
        let _ = tokio::time::timeout(LIMIT, self.child.wait()).await;
    }
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
}

/// The last `n` lines of a log file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Live children of `pid` (from `/proc/*/stat`).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let child: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
        let state = fields.next()?;
        let ppid: u32 = fields.next()?.parse().ok()?;
        (ppid == pid && state != "Z").then_some(child)
    })
    .collect()
}

/// `GET http://127.0.0.1:PORT/PATH` over HTTP/1.0, bounded to 2 s: the body.
pub async fn http_get(port: u16, path: &str) -> Option<String> {
    let get = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.ok()?;
        Some(reply)
    };
    tokio::time::timeout(Duration::from_secs(2), get)
        .await
        .ok()
        .flatten()
}

/// One etcd member.
#[derive(Debug)]
pub struct EtcdMember {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub proc: Option<Proc>,
}

/// One control-plane replica.
#[derive(Debug)]
pub struct Replica {
    pub name: String,
    pub config: PathBuf,
    pub grpc_port: u16,
    pub proc: Option<Proc>,
}

impl Replica {
    /// Its gRPC endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }
}

/// One sidecar of [`SERVER`] or [`HTTP_SERVER`].
#[derive(Debug)]
pub struct Sidecar {
    pub name: String,
    /// The server it serves (one of [`SERVERS`]).
    pub server: &'static str,
    /// The replica (index) it registers with.
    pub replica: usize,
    /// How many times it was started (part of its id).
    pub generation: u32,
    pub proc: Option<Proc>,
}

impl Sidecar {
    /// Its current sidecar id.
    pub fn id(&self) -> String {
        format!("{}-g{}", self.name, self.generation)
    }
}

/// The reference server of [`HTTP_SERVER`], over Streamable HTTP on a
/// fixed port (a restart listens on the same one). No sidecar owns it: the
/// driver starts it, and starts it again after killing it.
#[derive(Debug)]
pub struct HttpServer {
    pub port: u16,
    pub proc: Option<Proc>,
}

impl HttpServer {
    /// Its MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

/// The whole cluster.
#[derive(Debug)]
pub struct Cluster {
    pub dir: PathBuf,
    pub bins: Bins,
    pub etcd: Vec<EtcdMember>,
    /// Replica `b`'s way to etcd, one proxy per member.
    pub proxies: Vec<Proxy>,
    pub replicas: Vec<Replica>,
    /// `orders` on replica `a`, then on `b`; `orders-http` on `a`, then on
    /// `b` (see [`Cluster::sidecar_of`]).
    pub sidecars: Vec<Sidecar>,
    pub http_server: HttpServer,
    /// The execution log all reference servers append to (lines `TOOL KEY
    /// PID`: the PID tells the processes apart).
    pub executions: PathBuf,
}

fn toml_str(s: impl AsRef<str>) -> String {
    serde_json::to_string(s.as_ref()).expect("a JSON string is a TOML string")
}

impl Cluster {
    /// Starts everything in `dir` and waits until it serves.
    pub async fn start(dir: &Path, bins: Bins) -> anyhow::Result<Cluster> {
        let free = switchyard_test_support::free_port;
        let etcd: Vec<EtcdMember> = (0..3)
            .map(|i| EtcdMember {
                name: format!("etcd{i}"),
                client_port: free(),
                peer_port: free(),
                proc: None,
            })
            .collect();
        let mut proxies = Vec::new();
        for member in &etcd {
            proxies.push(Proxy::start(free(), member.client_port).await?);
        }
        // A work directory used before: start from fresh etcd data.
        for member in &etcd {
            let _ = std::fs::remove_dir_all(dir.join(format!("{}.data", member.name)));
        }
        let executions = dir.join("executions.log");
        std::fs::write(&executions, "")?;
        let mut cluster = Cluster {
            dir: dir.to_owned(),
            bins,
            etcd,
            proxies,
            replicas: Vec::new(),
            sidecars: Vec::new(),
            http_server: HttpServer {
                port: free(),
                proc: None,
            },
            executions,
        };
        cluster.spawn_http_server().await?;
        for i in 0..3 {
            cluster.spawn_etcd(i).await?;
        }
        for i in 0..3 {
            cluster.wait_etcd(i).await?;
        }
        for (i, name) in ["a", "b"].into_iter().enumerate() {
            let endpoints: Vec<String> = if i == 0 {
                cluster
                    .etcd
                    .iter()
                    .map(|m| toml_str(format!("http://127.0.0.1:{}", m.client_port)))
                    .collect()
            } else {
                cluster
                    .proxies
                    .iter()
                    .map(|p| toml_str(format!("http://127.0.0.1:{}", p.port)))
                    .collect()
            };
            let (grpc_port, http_port) = (free(), free());
            let config = dir.join(format!("replica-{name}.toml"));
            let text = format!(
                "[control_plane]\nlisten = \"127.0.0.1:{grpc_port}\"\nhttp_listen = \"127.0.0.1:{http_port}\"\n\
                 sidecar_lease_ttl_sec = {LEASE_TTL_SECS}\n\n[store]\netcd_endpoints = [{}]\n\n\
                 [backgroundCalls]\nsweepIntervalMs = 500\n\n[[servers]]\n{}\n\n[[servers]]\n{}\n",
                endpoints.join(", "),
                cluster.server_toml(SERVER),
                cluster.server_toml(HTTP_SERVER),
            );
            std::fs::write(&config, text)?;
            cluster.replicas.push(Replica {
                name: format!("replica-{name}"),
                config,
                grpc_port,
                proc: None,
            });
            cluster.spawn_replica(i).await?;
        }
        for server in SERVERS {
            for replica in 0..2 {
                cluster.sidecars.push(Sidecar {
                    name: format!("{server}-{}", replica + 1),
                    server,
                    replica,
                    generation: 0,
                    proc: None,
                });
                cluster.spawn_sidecar(cluster.sidecars.len() - 1).await?;
            }
        }
        cluster.wait_healed(LIMIT).await?;
        Ok(cluster)
    }

    /// The index in [`Cluster::sidecars`] of `server`'s sidecar registered
    /// with replica `replica`.
    pub fn sidecar_of(&self, server: &str, replica: usize) -> usize {
        self.sidecars
            .iter()
            .position(|s| s.server == server && s.replica == replica)
            .expect("every server has a sidecar on each replica")
    }

    /// The `[server]` / `[[servers]]` table of `server` ([`SERVER`]: the
    /// reference server over stdio, each sidecar its own; [`HTTP_SERVER`]:
    /// the one [`HttpServer`]). The era of each: `orders` 2026-07-28,
    /// `orders-http` 2025-11-25 (sessions, `Mcp-Session-Id`); the sidecar
    /// negotiates it (`era` left at `auto`).
    fn server_toml(&self, server: &str) -> String {
        if server == HTTP_SERVER {
            return format!(
                "name = {}\ntransport = \"http\"\nurl = {}",
                toml_str(HTTP_SERVER),
                toml_str(self.http_server.url()),
            );
        }
        format!(
            "name = {}\ntransport = \"stdio\"\ncommand = {}\nargs = [\"--tasks\", \"--era\", \"2026-07-28\"]\n\
             env = {{ SWITCHYARD_REFERENCE_EXECUTIONS = {} }}",
            toml_str(SERVER),
            toml_str(self.bins.reference_server.to_string_lossy()),
            toml_str(self.executions.to_string_lossy()),
        )
    }

    /// Starts [`HTTP_SERVER`]'s reference server on its port (the same
    /// one each time; its log is appended to) and waits until it accepts
    /// connections.
    pub async fn spawn_http_server(&mut self) -> anyhow::Result<()> {
        let port = self.http_server.port;
        let mut cmd = Command::new(&self.bins.reference_server);
        cmd.args(["--tasks", "--era", "2025-11-25", "--http"])
            .arg(format!("127.0.0.1:{port}"))
            .env("SWITCHYARD_REFERENCE_EXECUTIONS", &self.executions);
        let log = self.dir.join("orders-http-server.log");
        let (mut proc, _) =
            Proc::start("orders-http's reference server", cmd, log.clone(), None).await?;
        let deadline = Instant::now() + LIMIT;
        // It prints its address on stderr (the log): wait for the port.
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            if let Ok(Some(status)) = proc.child.try_wait() {
                bail!(
                    "orders-http's reference server exited ({status}); its log ends with:\n{}",
                    tail(&log, 20)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "orders-http's reference server does not listen on port {port} after {LIMIT:?}; its log ends with:\n{}",
                    tail(&log, 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.http_server.proc = Some(proc);
        Ok(())
    }

    fn initial_cluster(&self) -> String {
        self.etcd
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts etcd member `i` (its data directory kept across restarts).
    pub async fn spawn_etcd(&mut self, i: usize) -> anyhow::Result<()> {
        let initial = self.initial_cluster();
        let m = &self.etcd[i];
        let client = format!("http://127.0.0.1:{}", m.client_port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let mut cmd = Command::new(&self.bins.etcd);
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(self.dir.join(format!("{}.data", m.name)))
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "switchyard-chaos"])
            .args(["--heartbeat-interval", "100", "--election-timeout", "1000"])
            .args(["--logger=zap", "--log-level=warn"]);
        let log = self.dir.join(format!("{}.log", m.name));
        let (proc, _) = Proc::start(&m.name, cmd, log, None).await?;
        self.etcd[i].proc = Some(proc);
        Ok(())
    }

    /// Waits until member `i` reports a healthy cluster (with a leader).
    pub async fn wait_etcd(&self, i: usize) -> anyhow::Result<()> {
        let port = self.etcd[i].client_port;
        let deadline = Instant::now() + LIMIT;
        loop {
            if let Some(reply) = http_get(port, "/health").await
                && reply.contains("\"health\":\"true\"")
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                let log = self.dir.join(format!("{}.log", self.etcd[i].name));
                bail!(
                    "etcd member {i} not healthy after {LIMIT:?}; its log ends with:\n{}",
                    tail(&log, 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The index of the member that is the etcd leader now (its
    /// `etcd_server_is_leader` metric is 1).
    pub async fn etcd_leader(&self) -> Option<usize> {
        for (i, m) in self.etcd.iter().enumerate() {
            if let Some(metrics) = http_get(m.client_port, "/metrics").await
                && metrics
                    .lines()
                    .any(|l| l.trim() == "etcd_server_is_leader 1")
            {
                return Some(i);
            }
        }
        None
    }

    /// Starts replica `i` on its config.
    pub async fn spawn_replica(&mut self, i: usize) -> anyhow::Result<()> {
        let r = &self.replicas[i];
        let mut cmd = Command::new(&self.bins.control_plane);
        cmd.arg("--config")
            .arg(&r.config)
            .env("SWITCHYARD_LOG", "info");
        let log = self.dir.join(format!("{}.log", r.name));
        let (proc, _) = Proc::start(
            &r.name,
            cmd,
            log,
            Some("switchyard-control-plane: grpc on "),
        )
        .await?;
        self.replicas[i].proc = Some(proc);
        Ok(())
    }

    /// Starts sidecar `i` (a new generation, so a new sidecar id).
    pub async fn spawn_sidecar(&mut self, i: usize) -> anyhow::Result<()> {
        self.sidecars[i].generation += 1;
        let s = &self.sidecars[i];
        let config = self.dir.join(format!("{}.toml", s.id()));
        std::fs::write(
            &config,
            format!(
                "[server]\n{}\n\n[sidecar]\ncontrol_plane = {}\nsidecar_id = {}\ngrace_secs = 2\n",
                self.server_toml(s.server),
                toml_str(self.replicas[s.replica].endpoint()),
                toml_str(s.id()),
            ),
        )?;
        let mut cmd = Command::new(&self.bins.sidecar);
        cmd.arg("run")
            .arg("--config")
            .arg(&config)
            .env("SWITCHYARD_LOG", "info")
            .env("SWITCHYARD_TASK_POLL_MIN_MS", "200");
        let log = self.dir.join(format!("{}.log", s.name));
        let (proc, _) = Proc::start(
            &s.id(),
            cmd,
            log,
            Some(&format!(
                "switchyard-sidecar: server {}, calls on",
                s.server
            )),
        )
        .await?;
        self.sidecars[i].proc = Some(proc);
        Ok(())
    }

    /// The reference server process under sidecar `i`, if it runs (one of
    /// [`SERVER`]'s: [`HTTP_SERVER`]'s sidecars have no child).
    pub fn upstream_pid(&self, i: usize) -> Option<u32> {
        let sidecar = self.sidecars[i].proc.as_ref()?.pid;
        children_of(sidecar).into_iter().next()
    }

    /// Waits until every etcd member is healthy and both replicas list,
    /// for each server, both its current sidecars, connected.
    pub async fn wait_healed(&self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        for i in 0..self.etcd.len() {
            self.wait_etcd(i).await?;
        }
        let mut last = String::new();
        loop {
            let mut ok = true;
            for server in SERVERS {
                let mut want: Vec<String> = self
                    .sidecars
                    .iter()
                    .filter(|s| s.server == server)
                    .map(Sidecar::id)
                    .collect();
                want.sort();
                for r in &self.replicas {
                    match server_sidecars(&r.endpoint(), server).await {
                        Ok(ids) if ids == want => {}
                        Ok(ids) => {
                            ok = false;
                            last = format!("{}: {server}: sidecars {ids:?}, want {want:?}", r.name);
                        }
                        Err(e) => {
                            ok = false;
                            last = format!("{}: {server}: {e}", r.name);
                        }
                    }
                }
            }
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the cluster did not heal within {limit:?}: {last}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops everything (SIGKILL: nothing of the run is kept but the logs).
    pub async fn stop(&mut self) {
        for s in &mut self.sidecars {
            if let Some(mut p) = s.proc.take() {
                p.signal(Signal::SIGTERM);
                let _ = tokio::time::timeout(Duration::from_secs(5), p.child.wait()).await;
                p.kill9().await;
            }
        }
        for r in &mut self.replicas {
            if let Some(mut p) = r.proc.take() {
                p.signal(Signal::SIGCONT);
                p.kill9().await;
            }
        }
        for m in &mut self.etcd {
            if let Some(mut p) = m.proc.take() {
                p.kill9().await;
            }
        }
        if let Some(mut p) = self.http_server.proc.take() {
            p.kill9().await;
        }
    }
}

/// A gRPC channel to `endpoint` (connects lazily, reconnects by itself).
pub fn channel(endpoint: &str) -> Channel {
    tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .expect("a valid endpoint")
        .connect_timeout(Duration::from_secs(2))
        .connect_lazy()
}

/// The ids of `server`'s sidecars seen through `endpoint`, when the
/// server is up and every one of them reports a connected upstream.
async fn server_sidecars(endpoint: &str, server: &str) -> Result<Vec<String>, String> {
    let mut admin = pb::admin_service_client::AdminServiceClient::new(channel(endpoint));
    let request = tonic::Request::new(pb::GetServerStatusRequest {
        name: server.into(),
    });
    let s = tokio::time::timeout(Duration::from_secs(3), admin.get_server_status(request))
        .await
        .map_err(|_| "no answer within 3 s".to_owned())?
        .map_err(|e| format!("{}: {}", e.code(), e.message()))?
        .into_inner();
    if s.state != "up" || s.sidecars.iter().any(|c| c.upstream_state != "connected") {
        return Err(format!(
            "state {}, sidecars {:?}",
            s.state,
            s.sidecars
                .iter()
                .map(|c| (&c.sidecar_id, &c.upstream_state))
                .collect::<Vec<_>>()
        ));
    }
    let mut ids: Vec<String> = s.sidecars.into_iter().map(|c| c.sidecar_id).collect();
    ids.sort();
    Ok(ids)
}
