//! Shared by the modules of the integration tests, the end-to-end ones
//! (`e2e_*`) above all: real processes on loopback.
//!
//! - [`Gateway`]: `switchyard up` on a config of its own (free ports, a temp
//!   dir for the store) in front of the quickstart's three servers — the
//!   reference server over stdio (2026-07-28), server-everything over stdio
//!   and the reference server over Streamable HTTP (2025-11-25, started here
//!   on a free port). Its output goes to a log file (printed when a test
//!   fails). It is stopped with SIGTERM, so its sidecars stop their servers;
//!   whatever is left of its process tree after that is SIGKILLed, by pid.
//! - [`cli`]: the `switchyard` command line, bounded by [`LIMIT`].
//! - [`eventually`]: polls with a deadline; no bare sleeps as assertions.
//! - `/proc` helpers to find `up`'s sidecar children.

pub mod background;
pub mod oauth;

use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::admin_service_client::AdminServiceClient;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use switchyard_test_support::{
    HttpServer, everything_bin, free_port, reference_server_bin, start_http_server, workspace_bin,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tonic::transport::Channel;

/// Upper bound on any single wait.
pub const LIMIT: Duration = Duration::from_secs(30);
/// Upper bound on a gateway coming up with all its servers (node starts slowly).
pub const START_LIMIT: Duration = Duration::from_secs(60);

/// The quickstart's servers, by name.
pub const SERVERS: [&str; 3] = ["orders", "everything", "orders-http"];

/// Serialises the tests that each run a whole gateway (all in this one
/// binary): the CI machine has two cores, and some tests assert on
/// latencies.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `switchyard` (built with this package).
pub fn switchyard_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_switchyard"))
}

/// `switchyard-control-plane` (built with this package).
pub fn control_plane_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_switchyard-control-plane"))
}

/// `switchyard-sidecar`.
pub fn sidecar_bin() -> PathBuf {
    workspace_bin("switchyard-sidecar", "switchyard-sidecar")
}

/// A TOML string literal.
pub fn toml_str(s: impl AsRef<str>) -> String {
    toml::Value::String(s.as_ref().to_owned()).to_string()
}

/// PATH with the workspace binaries and the npm peers first (for `up`,
/// whose server commands are absolute anyway).
pub fn test_path() -> std::ffi::OsString {
    let mut dirs = vec![
        switchyard_bin().parent().unwrap().to_path_buf(),
        everything_bin().parent().unwrap().to_path_buf(),
    ];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(dirs).expect("PATH")
}

/// Starts `switchyard-reference-server --http 127.0.0.1:0 --era 2025-11-25`.
pub async fn start_http_reference_server() -> HttpServer {
    let mut cmd = Command::new(reference_server_bin());
    cmd.args(["--http", "127.0.0.1:0", "--era", "2025-11-25"]);
    start_http_server(cmd, "/mcp").await
}

/// The quickstart's three `[[servers]]`, with absolute commands.
pub fn quickstart_servers(http_url: &str) -> String {
    format!(
        r#"
[[servers]]
name = "orders"
transport = "stdio"
command = {reference}
args = ["--era", "2026-07-28"]

[[servers]]
name = "everything"
transport = "stdio"
command = {everything}
args = ["stdio"]

[[servers]]
name = "orders-http"
transport = "http"
url = {url}
"#,
        reference = toml_str(reference_server_bin().to_string_lossy()),
        everything = toml_str(everything_bin().to_string_lossy()),
        url = toml_str(http_url),
    )
}

/// Which store a config names.
#[derive(Debug, Clone)]
pub enum StoreKind {
    /// redb in the test's temp dir.
    Embedded,
    /// etcd at this client URL.
    Etcd(String),
}

/// A whole config file: free ports for `listen` and `http_listen`.
/// Returns (text, grpc port, http port).
pub fn config_text(
    dir: &Path,
    store: &StoreKind,
    lease_ttl: u64,
    servers: &str,
) -> (String, u16, u16) {
    config_text_with(dir, store, lease_ttl, "", servers)
}

/// [`config_text`] with `control_plane` (lines of `key = value`) added to
/// its `[control_plane]` table.
pub fn config_text_with(
    dir: &Path,
    store: &StoreKind,
    lease_ttl: u64,
    control_plane: &str,
    servers: &str,
) -> (String, u16, u16) {
    let (grpc, http) = (free_port(), free_port());
    let store = match store {
        StoreKind::Embedded => format!(
            "path = {}",
            toml_str(dir.join("store/store.redb").to_string_lossy())
        ),
        StoreKind::Etcd(url) => format!("etcd_endpoints = [{}]", toml_str(url)),
    };
    let text = format!(
        "[control_plane]\nlisten = \"127.0.0.1:{grpc}\"\nhttp_listen = \"127.0.0.1:{http}\"\nsidecar_lease_ttl_sec = {lease_ttl}\n{control_plane}\n[store]\n{store}\n{servers}"
    );
    (text, grpc, http)
}

/// What a [`Gateway`]'s config holds.
struct Setup<'a> {
    store: StoreKind,
    lease_ttl: u64,
    /// Lines of `key = value` added to `[control_plane]`.
    control_plane: &'a str,
    /// `[[servers]]` tables.
    servers: &'a str,
    /// More TOML tables.
    extra: &'a str,
}

/// `switchyard up` with the quickstart's three servers.
#[derive(Debug)]
pub struct Gateway {
    /// Config (`switchyard.toml`), store and log.
    pub dir: tempfile::TempDir,
    /// gRPC endpoint, `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// `127.0.0.1:PORT` of `/metrics`.
    pub http_addr: String,
    /// The HTTP reference server (`orders-http`), kept alive with the
    /// gateway.
    _http_server: HttpServer,
    /// `up`'s pid.
    pub pid: u32,
    up: Option<Child>,
    log: PathBuf,
}

impl Gateway {
    /// Whether the embedded store's file holds `secret` as plain bytes
    /// (a sealed value does not).
    pub fn store_holds(&self, secret: &str) -> bool {
        let store =
            std::fs::read(self.dir.path().join("store/store.redb")).expect("the store file");
        store.windows(secret.len()).any(|w| w == secret.as_bytes())
    }

    /// Starts `up` and waits until all three servers are `up`.
    pub async fn start(store: StoreKind, lease_ttl: u64) -> Gateway {
        let http_server = start_http_reference_server().await;
        let servers = quickstart_servers(&http_server.url);
        Gateway::start_with(store, lease_ttl, http_server, &servers, "", &[], &SERVERS).await
    }

    /// Starts `up` in front of one stdio server `name` (`command` with
    /// `args`, see [`stdio_server_toml`]) plus `extra` TOML tables, and
    /// waits until it is `up`.
    pub async fn start_stdio(name: &str, command: &Path, args: &[&str], extra: &str) -> Gateway {
        let http = start_http_reference_server().await;
        let servers = stdio_server_toml(name, command, args);
        Gateway::start_with(StoreKind::Embedded, 10, http, &servers, extra, &[], &[name]).await
    }

    /// [`Gateway::start_stdio`] with `control_plane` (lines of `key =
    /// value`) added to the `[control_plane]` table.
    pub async fn start_stdio_configured(
        name: &str,
        command: &Path,
        args: &[&str],
        control_plane: &str,
    ) -> Gateway {
        let http = start_http_reference_server().await;
        let servers = stdio_server_toml(name, command, args);
        let setup = Setup {
            store: StoreKind::Embedded,
            lease_ttl: 10,
            control_plane,
            servers: &servers,
            extra: "",
        };
        Gateway::start_setup(setup, http, &[], &[name]).await
    }

    /// Starts `up` on a config of `servers` (`[[servers]]` tables) plus
    /// `extra` (more TOML tables, e.g. `[backgroundCalls]`), with `env`
    /// added to `up`'s environment (its sidecars inherit it), and waits
    /// until each of `wait_for` is `up`. `http_server` is kept alive with
    /// the gateway.
    pub async fn start_with(
        store: StoreKind,
        lease_ttl: u64,
        http_server: HttpServer,
        servers: &str,
        extra: &str,
        env: &[(&str, &str)],
        wait_for: &[&str],
    ) -> Gateway {
        let setup = Setup {
            store,
            lease_ttl,
            control_plane: "",
            servers,
            extra,
        };
        Gateway::start_setup(setup, http_server, env, wait_for).await
    }

    /// [`Gateway::start_with`] on `setup`.
    async fn start_setup(
        setup: Setup<'_>,
        http_server: HttpServer,
        env: &[(&str, &str)],
        wait_for: &[&str],
    ) -> Gateway {
        let Setup {
            store,
            lease_ttl,
            control_plane,
            servers,
            extra,
        } = setup;
        switchyard_test_support::init_tracing();
        let dir = tempfile::Builder::new()
            .prefix("switchyard-e2e-")
            .tempdir()
            .expect("temp dir");
        let (mut text, grpc, http) =
            config_text_with(dir.path(), &store, lease_ttl, control_plane, servers);
        text.push('\n');
        text.push_str(extra);
        let config = dir.path().join("switchyard.toml");
        std::fs::write(&config, text).expect("write the config");
        let log = dir.path().join("up.log");
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let mut command = Command::new(switchyard_bin());
        command
            .arg("up")
            .arg("--config")
            .arg(&config)
            .env("PATH", test_path())
            .env("SWITCHYARD_SIDECAR_BIN", sidecar_bin())
            .env("SWITCHYARD_LOG", "info");
        for (k, v) in env {
            command.env(k, v);
        }
        let up = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            // Its own process group, as in a terminal: a test can send the
            // group a Ctrl-C (`killpg`) without signalling itself.
            .process_group(0)
            .spawn()
            .expect("start switchyard up");
        let pid = up.id().expect("pid");
        let gateway = Gateway {
            dir,
            endpoint: format!("http://127.0.0.1:{grpc}"),
            http_addr: format!("127.0.0.1:{http}"),
            _http_server: http_server,
            pid,
            up: Some(up),
            log,
        };
        gateway.wait_servers_up(wait_for, START_LIMIT).await;
        gateway
    }

    /// Everything `up` and its sidecars printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `admin.ListServers` shows each of `names` `up`.
    pub async fn wait_servers_up(&self, names: &[&str], limit: Duration) {
        let endpoint = self.endpoint.clone();
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let log = self.log.clone();
        eventually("servers up", limit, || {
            let endpoint = endpoint.clone();
            let names = names.clone();
            let log = log.clone();
            async move {
                let mut admin = match admin(&endpoint).await {
                    Ok(a) => a,
                    Err(e) => return Err(format!("{e}\n--- up log ---\n{}", read(&log))),
                };
                let list = admin
                    .list_servers(pb::ListServersRequest {})
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner();
                let states: HashMap<String, String> = list
                    .servers
                    .iter()
                    .map(|s| (s.spec.as_ref().unwrap().name.clone(), s.state.clone()))
                    .collect();
                if names
                    .iter()
                    .all(|n| states.get(n).map(String::as_str) == Some("up"))
                {
                    Ok(())
                } else {
                    Err(format!("{states:?}\n--- up log ---\n{}", read(&log)))
                }
            }
        })
        .await
    }

    /// The `switchyard` CLI against this gateway.
    pub async fn cli(&self, args: &[&str]) -> Output {
        cli(&self.endpoint, args).await
    }

    /// An engine client.
    pub async fn engine(&self) -> EngineServiceClient<Channel> {
        engine(&self.endpoint)
            .await
            .expect("connect to the engine API")
    }

    /// An admin client.
    pub async fn admin(&self) -> AdminServiceClient<Channel> {
        admin(&self.endpoint)
            .await
            .expect("connect to the admin API")
    }

    /// `up`'s live `switchyard-sidecar` children whose command line
    /// mentions `server`'s generated config (`NAME.toml`).
    pub fn sidecars_of(&self, server: &str) -> Vec<u32> {
        let file = format!("/{server}.toml");
        children_of(self.pid)
            .into_iter()
            .filter(|p| {
                let c = cmdline(*p);
                c.contains("switchyard-sidecar") && c.contains(&file)
            })
            .collect()
    }

    /// Stops `up` (SIGTERM, as [`Gateway::stop`]) and starts it again on
    /// the same config, store and ports (env: `env` only), then waits for
    /// each of `wait_for`: a replica restart that keeps the store.
    pub async fn restart(&mut self, env: &[(&str, &str)], wait_for: &[&str]) {
        let mut up = self.up.take().expect("running");
        signal(self.pid, nix::sys::signal::Signal::SIGTERM);
        let status = tokio::time::timeout(LIMIT, up.wait())
            .await
            .expect("`up` stops within the limit")
            .expect("wait for up");
        assert!(
            status.success(),
            "`up` exited with {status}\n{}",
            self.log()
        );
        let out = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .expect("log file");
        let err = out.try_clone().expect("log file");
        let mut command = Command::new(switchyard_bin());
        command
            .arg("up")
            .arg("--config")
            .arg(self.dir.path().join("switchyard.toml"))
            .env("PATH", test_path())
            .env("SWITCHYARD_SIDECAR_BIN", sidecar_bin())
            .env("SWITCHYARD_LOG", "info");
        for (k, v) in env {
            command.env(k, v);
        }
        let up = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            // Its own process group, as in a terminal: a test can send the
            // group a Ctrl-C (`killpg`) without signalling itself.
            .process_group(0)
            .spawn()
            .expect("start switchyard up again");
        self.pid = up.id().expect("pid");
        self.up = Some(up);
        self.wait_servers_up(wait_for, START_LIMIT).await;
    }

    /// [`Gateway::stop`], checking that no sidecar had a call left to
    /// cancel: every call of the test had ended, so the drain must not
    /// wait out its grace period (a stream kept open by a finished call's
    /// relay did).
    pub async fn stop_drained(mut self) -> Duration {
        let took = self.terminate().await;
        let text = self.log();
        assert!(text.contains("in-flight calls drained"), "{text}");
        assert!(
            !text.contains("grace period over"),
            "a drain waited out its grace period with no call running:\n{text}"
        );
        took
    }

    /// SIGTERM to `up`; waits (bounded) for it to exit 0 with its whole
    /// process tree gone. Returns how long the stop took.
    pub async fn stop(mut self) -> Duration {
        self.terminate().await
    }

    async fn terminate(&mut self) -> Duration {
        let mut up = self.up.take().expect("running");
        let tree = descendants(self.pid);
        let started = Instant::now();
        signal(self.pid, nix::sys::signal::Signal::SIGTERM);
        let status = tokio::time::timeout(LIMIT, up.wait()).await;
        let took = started.elapsed();
        let left: Vec<u32> = tree.iter().copied().filter(|p| alive(*p)).collect();
        for p in &left {
            signal(*p, nix::sys::signal::Signal::SIGKILL);
        }
        let status = match status {
            Ok(s) => s.expect("wait for up"),
            Err(_) => {
                let _ = up.kill().await;
                panic!(
                    "`switchyard up` did not stop within {LIMIT:?} of SIGTERM\n{}",
                    self.log()
                );
            }
        };
        assert!(
            status.success(),
            "`switchyard up` exited with {status}\n{}",
            self.log()
        );
        assert!(
            left.is_empty(),
            "processes of `up` still running after it stopped: {:?}\n{}",
            left.iter().map(|p| cmdline(*p)).collect::<Vec<_>>(),
            self.log()
        );
        took
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let Some(mut up) = self.up.take() else { return };
        // A failed test: show the log, stop `up` as gracefully as we can
        // without a runtime (bounded), then kill whatever is left.
        if std::thread::panicking() {
            eprintln!("--- switchyard up log ---\n{}", self.log());
        }
        let tree = descendants(self.pid);
        signal(self.pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline && matches!(up.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = up.start_kill();
        for p in tree {
            if alive(p) {
                signal(p, nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Polls `f` every 100 ms until it returns `Ok`, for at most `limit`;
/// panics with the last error otherwise.
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        let last = match tokio::time::timeout(LIMIT, f()).await {
            Ok(Ok(v)) => return v,
            Ok(Err(e)) => e,
            Err(_) => format!("one attempt took more than {LIMIT:?}"),
        };
        if Instant::now() >= deadline {
            panic!("{what}: not within {limit:?}; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `switchyard --endpoint ENDPOINT ARGS...` (bounded by [`LIMIT`]).
pub async fn cli(endpoint: &str, args: &[&str]) -> Output {
    let run = Command::new(switchyard_bin())
        .arg("--endpoint")
        .arg(endpoint)
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(LIMIT, run)
        .await
        .unwrap_or_else(|_| panic!("`switchyard {}` took more than {LIMIT:?}", args.join(" ")))
        .expect("run switchyard")
}

/// Panics unless the command exited 0; returns its stdout.
pub fn ok_stdout(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The command's stdout as JSON, after checking it exited 0.
pub fn ok_json(out: &Output, what: &str) -> Value {
    let text = ok_stdout(out, what);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{what}: stdout is not JSON: {e}\n{text}"))
}

/// An engine client for `endpoint`.
pub async fn engine(endpoint: &str) -> Result<EngineServiceClient<Channel>, String> {
    let channel = channel(endpoint).await?;
    Ok(EngineServiceClient::new(channel).max_decoding_message_size(64 * 1024 * 1024))
}

/// A new session of `servers` (none: every server), in `auto` permission
/// mode, through `engine`; its id.
pub async fn auto_session(engine: &mut EngineServiceClient<Channel>, servers: &[&str]) -> String {
    engine
        .create_session(pb::CreateSessionRequest {
            enabled_servers: servers.iter().map(|s| s.to_string()).collect(),
            permission_mode: pb::PermissionMode::Auto as i32,
            roots: vec![],
        })
        .await
        .expect("CreateSession")
        .into_inner()
        .id
}

/// An admin client for `endpoint`.
pub async fn admin(endpoint: &str) -> Result<AdminServiceClient<Channel>, String> {
    Ok(AdminServiceClient::new(channel(endpoint).await?))
}

async fn channel(endpoint: &str) -> Result<Channel, String> {
    tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|e| format!("connect to {endpoint}: {e}"))
}

/// A `CallToolRequest` for `tool` with `args` (JSON text).
pub fn call_request(tool: &str, args: &str, session: &str) -> pb::CallToolRequest {
    pb::CallToolRequest {
        session_id: session.to_owned(),
        tool: tool.to_owned(),
        arguments_json: args.to_owned(),
        timeout_ms: 20_000,
        ..Default::default()
    }
}

/// Calls `orders`-style `get_order` for O-1001 through `tool` and checks
/// the structured result.
pub async fn get_order(
    engine: &mut EngineServiceClient<Channel>,
    tool: &str,
    session: &str,
) -> Result<(), tonic::Status> {
    let resp = engine
        .call_tool(call_request(tool, r#"{"order_id":"O-1001"}"#, session))
        .await?
        .into_inner();
    assert!(!resp.is_error, "{tool}: {}", resp.result_json);
    let structured: Value = serde_json::from_str(&resp.structured_content_json)
        .unwrap_or_else(|e| panic!("{tool}: structuredContent {e}: {}", resp.result_json));
    assert_eq!(structured["id"], "O-1001", "{tool}: {}", resp.result_json);
    Ok(())
}

/// The engine-visible tool names (all servers, or a session's view).
pub async fn tool_names(engine: &mut EngineServiceClient<Channel>, session: &str) -> Vec<String> {
    engine
        .list_tools(pb::ListToolsRequest {
            session_id: session.to_owned(),
        })
        .await
        .expect("ListTools")
        .into_inner()
        .tools
        .into_iter()
        .map(|t| t.name)
        .collect()
}

/// `GET http://ADDR/PATH` (HTTP/1.1, `Connection: close`): (status, body).
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .expect("send");
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.expect("read");
        reply
    };
    let reply = tokio::time::timeout(LIMIT, fetch)
        .await
        .expect("HTTP GET in time");
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    (
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    )
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The value of the first sample of `metric` whose labels include every
/// `name="value"` in `labels`.
pub fn sample(metrics: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(metric)?;
        let (labelset, value) = match rest.strip_prefix('{') {
            Some(r) => r.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        labels
            .iter()
            .all(|(k, v)| labelset.split(',').any(|l| l == format!("{k}=\"{v}\"")))
            .then(|| value.trim().parse().ok())?
    })
}

// ---- processes ------------------------------------------------------------------

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| stat_fields(&s).map(|(state, _)| state != 'Z'))
        .unwrap_or(false)
}

/// (state, ppid) from the text of `/proc/PID/stat`.
fn stat_fields(stat: &str) -> Option<(char, u32)> {
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn parents() -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (state, ppid) = stat_fields(&stat)?;
        (state != 'Z').then_some((pid, ppid))
    })
    .collect()
}

/// Live children of `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    parents()
        .into_iter()
        .filter(|(_, ppid)| *ppid == pid)
        .map(|(p, _)| p)
        .collect()
}

/// Every live descendant of `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let all = parents();
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for (child, ppid) in &all {
            if *ppid == p && !out.contains(child) {
                out.push(*child);
                frontier.push(*child);
            }
        }
    }
    out
}

/// `/proc/PID/cmdline` with spaces between the arguments.
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}

/// The configuration file (`…/SERVER.toml`) that `switchyard up` gave the
/// sidecar with process id `pid`, from its command line.
pub fn sidecar_config_file(pid: u32, server: &str) -> Option<String> {
    let suffix = format!("/{server}.toml");
    cmdline(pid)
        .split_whitespace()
        .find(|a| a.ends_with(&suffix))
        .map(str::to_owned)
}

/// A process started by a test whose output goes to a log file; its first
/// stdout line is returned by [`Proc::start`]. Killed on drop.
#[derive(Debug)]
pub struct Proc {
    /// The child.
    pub child: Child,
    /// Its pid.
    pub pid: u32,
    /// Its stderr log.
    pub log: PathBuf,
    name: String,
}

impl Proc {
    /// Starts `cmd` (stderr to `log`) and waits (bounded) for a stdout
    /// line containing `marker`; returns the process and that line.
    pub async fn start(name: &str, mut cmd: Command, log: PathBuf, marker: &str) -> (Proc, String) {
        let err = std::fs::File::create(&log).expect("log file");
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
        let pid = child.id().expect("pid");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(LIMIT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains(marker) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        let line = match line {
            Ok(Some(l)) => l,
            other => panic!(
                "{name} printed no {marker:?} line ({}):\n{}",
                if other.is_err() { "timeout" } else { "exited" },
                read(&log)
            ),
        };
        // Keep draining stdout so the process never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        (
            Proc {
                child,
                pid,
                log,
                name: name.to_owned(),
            },
            line,
        )
    }

    /// Its stderr so far.
    pub fn log(&self) -> String {
        read(&self.log)
    }

    /// SIGTERM, then waits (bounded) for it to exit; returns its status.
    /// Waits (up to `LIMIT`) for the process to exit on its own, e.g.
    /// after one SIGTERM sent earlier: a second one would hurry its drain.
    pub async fn exited(&mut self) -> std::process::ExitStatus {
        match tokio::time::timeout(LIMIT, self.child.wait()).await {
            Ok(s) => s.expect("wait"),
            Err(_) => {
                let _ = self.child.kill().await;
                panic!(
                    "{} did not exit within {LIMIT:?}\n{}",
                    self.name,
                    self.log()
                );
            }
        }
    }

    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        signal(self.pid, nix::sys::signal::Signal::SIGTERM);
        match tokio::time::timeout(LIMIT, self.child.wait()).await {
            Ok(s) => s.expect("wait"),
            Err(_) => {
                let _ = self.child.kill().await;
                panic!(
                    "{} did not stop within {LIMIT:?} of SIGTERM\n{}",
                    self.name,
                    self.log()
                );
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- {} log ---\n{}", self.name, self.log());
        }
        // Still running: SIGTERM (a sidecar then stops its server), bounded.
        if matches!(self.child.try_wait(), Ok(None)) {
            signal(self.pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.start_kill();
        }
    }
}

// ---- separately started processes, TLS and credentials ---------------------------
// (e2e_tls, e2e_auth, e2e_shutdown: `switchyard-control-plane --config` and
// `switchyard-sidecar run --config` started one by one, as in Kubernetes.)

/// `ADDR` out of "... grpc on ADDR, http on ADDR" style lines.
fn addr_after<'a>(line: &'a str, label: &str) -> &'a str {
    line.split(label)
        .nth(1)
        .and_then(|r| r.split(',').next())
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {label:?} in {line:?}"))
}

/// Starts `switchyard-control-plane --config CONFIG` (log in
/// `DIR/NAME.log`); returns it, its gRPC address and its HTTP address
/// (`127.0.0.1:PORT`).
pub async fn start_control_plane(name: &str, dir: &Path, config: &Path) -> (Proc, String, String) {
    let mut cmd = Command::new(control_plane_bin());
    cmd.arg("--config")
        .arg(config)
        .env("SWITCHYARD_LOG", "info");
    let (proc, line) = Proc::start(
        name,
        cmd,
        dir.join(format!("{name}.log")),
        "switchyard-control-plane: grpc on ",
    )
    .await;
    let grpc = addr_after(&line, "grpc on ").to_owned();
    let http = addr_after(&line, "http on ").to_owned();
    (proc, grpc, http)
}

/// Starts `switchyard-sidecar run --config DIR/NAME.toml` whose file has
/// `[server]` = `server_toml` and `[sidecar]` = `sidecar_toml`; returns it,
/// its `SidecarCalls` address and its HTTP address.
pub async fn start_sidecar(
    name: &str,
    dir: &Path,
    server_toml: &str,
    sidecar_toml: &str,
) -> (Proc, String, String) {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!("[server]\n{server_toml}\n\n[sidecar]\n{sidecar_toml}\n"),
    )
    .expect("write the sidecar config");
    let mut cmd = Command::new(sidecar_bin());
    cmd.arg("run")
        .arg("--config")
        .arg(&config)
        .env("SWITCHYARD_LOG", "info");
    let (proc, line) = Proc::start(
        name,
        cmd,
        dir.join(format!("{name}.log")),
        "switchyard-sidecar: server ",
    )
    .await;
    let calls = addr_after(&line, "calls on ").to_owned();
    let http = addr_after(&line, "http on ").to_owned();
    (proc, calls, http)
}

/// The `[[servers]]` table of a stdio server `name` running `command`
/// with `args`.
pub fn stdio_server_toml(name: &str, command: &Path, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(toml_str).collect();
    format!(
        "[[servers]]\nname = {}\ntransport = \"stdio\"\ncommand = {}\nargs = [{}]\n",
        toml_str(name),
        toml_str(command.to_string_lossy()),
        args.join(", ")
    )
}

/// The `[server]` table of the reference server over stdio (2026-07-28)
/// named `name`.
pub fn reference_server_toml(name: &str) -> String {
    format!(
        "name = {}\ntransport = \"stdio\"\ncommand = {}\nargs = [\"--era\", \"2026-07-28\"]",
        toml_str(name),
        toml_str(reference_server_bin().to_string_lossy()),
    )
}

/// A channel to `endpoint`: plain for `http://`; for `https://`, trusting
/// `ca_file` and presenting `client` (certificate, key) when given.
pub async fn tls_channel(
    endpoint: &str,
    ca_file: Option<&Path>,
    client: Option<(&Path, &Path)>,
) -> Result<Channel, String> {
    switchyard_common::tls::install_crypto_provider();
    let mut ep = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(2));
    if endpoint.starts_with("https://") {
        let mut tls = tonic::transport::ClientTlsConfig::new();
        if let Some(ca) = ca_file {
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(
                std::fs::read(ca).expect("read the CA"),
            ));
        }
        if let Some((cert, key)) = client {
            tls = tls.identity(tonic::transport::Identity::from_pem(
                std::fs::read(cert).expect("read the certificate"),
                std::fs::read(key).expect("read the key"),
            ));
        }
        ep = ep.tls_config(tls).map_err(|e| e.to_string())?;
    }
    ep.connect().await.map_err(|e| {
        format!(
            "connect to {endpoint}: {}",
            switchyard_common::error_chain(&e)
        )
    })
}

/// `message` as a request carrying `authorization: Bearer TOKEN`.
pub fn bearer<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("header value"),
    );
    request
}

/// The value of `metric{labels}` on `http://ADDR/metrics` (0 if absent).
pub async fn scrape(http_addr: &str, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let (status, body) = http_get(http_addr, "/metrics").await;
    assert_eq!(status, 200, "/metrics: {body}");
    sample(&body, metric, labels).unwrap_or(0.0)
}
