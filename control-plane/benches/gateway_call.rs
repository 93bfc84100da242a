//! `tools/call` throughput and latency through the whole gateway — engine ->
//! control plane -> sidecar -> reference server — against a direct rmcp
//! client on the same reference server binary, measured in one run.
//!
//! ```text
//! cargo bench -p switchyard-control-plane --bench gateway_call             # full run
//! cargo bench -p switchyard-control-plane --bench gateway_call -- --quick  # smoke run
//! ```
//!
//! The gateway runs as real processes, release builds: one
//! `switchyard-control-plane --config` (embedded store in a temp dir, free
//! ports) and one `switchyard-sidecar run --config` for the reference server
//! over stdio in the 2026-07-28 era, in their default configuration: their
//! logs (default level, so the control plane's per-call audit records too)
//! go to files in the temp dir. The bench is the engine: one tonic channel
//! to the control plane, with one `CallToolStream` on it that all calls
//! share (`switchyard_proto::calls::Mux`), calling `orders__echo`. The
//! baseline is rmcp's client on its own reference server process (one
//! connection, `ClientLifecycleMode::Discover`, so it speaks 2026-07-28
//! too). `mcp` is an MCP client on the MCP endpoint instead of the engine
//! API: rmcp's Streamable HTTP client (2026-07-28) on a reqwest client
//! that keeps connections alive (rmcp's default opens one per request)
//! calling `orders__echo` on `/mcp`, through the same control plane,
//! sidecar and server. `mcp-lean` and `mcp-h2` are a lean client on the
//! same path (the same 2026-07-28 request written by hand on a pooled
//! reqwest client; HTTP/1.1, and HTTP/2 with prior knowledge on one
//! connection): they tell rmcp's client costs from the endpoint's. More
//! clients tell the hops apart: `unary` is the same gateway
//! path with one `CallTool` RPC per call, `sidecar` calls the sidecar's
//! `SidecarCalls.CallTool` directly (engine-side gRPC -> sidecar -> server,
//! no control plane), and `cp-only` calls the control plane's
//! `ListSessions` (engine -> control plane and back, no sidecar).
//!
//! For each concurrency (1 and 64 calls in flight on the one channel or
//! connection) and each client: a 0.5 s warm-up, then 5 rounds of 1.5 s
//! in which that many tokio tasks loop `call; record latency` until the
//! deadline. The clients take turns, rotating which goes first each
//! round, to spread drift over all of them; the table shows per client the
//! median round by throughput (its p50 and p99 come from that same round)
//! and the min..max throughput over the rounds as a noise gauge. CPU time
//! per call is read from `/proc` for the bench process, the control plane,
//! the sidecar and the server processes.
//!
//! Goals (gateway ÷ direct): calls/s at concurrency 64 >= 0.6, p50 at
//! concurrency 1 <= 1.5; (mcp ÷ direct): calls/s at 64 >= 0.6, p50 at 1
//! <= 3.0.
//!
//! Options (or environment variables):
//! * `--quick` (`SWITCHYARD_BENCH_QUICK=1`): short smoke run. Also the default
//!   when the binary is started without `--bench`, as `cargo test --benches`
//!   does.
//! * `--no-hops`: leave out the `unary`, `sidecar` and `cp-only` clients.
//! * `--no-lean`: leave out the `mcp-lean` and `mcp-h2` clients.
//! * `--only gateway|direct|mcp|mcp-lean|mcp-h2|unary|sidecar|cp-only` and `--measure-ms N`: run one
//!   client, N ms per round, e.g. under `perf record` (no ratios then).
//! * `--concurrency 1|64`: run only that concurrency.
//! * `--current-thread`: run the bench's clients (the engine and rmcp's
//!   client alike) on a single-threaded tokio runtime instead of one worker
//!   per core.
//! * `--gateway-workers N`: run the control plane and the sidecar with
//!   `worker_threads = N` (default: theirs, 1: a single-threaded runtime;
//!   0: one worker per core).
//! * Binaries: `SWITCHYARD_CONTROL_PLANE_BIN`, `SWITCHYARD_SIDECAR_BIN`,
//!   `SWITCHYARD_REFERENCE_SERVER`. Without them the bench runs
//!   `cargo build --release` for the three (a no-op when they are fresh) and
//!   uses the release builds in the target directory.

mod common;

use common::{ERA, start_direct};
use rmcp::model::{CallToolRequestParams, ClientConfig, JsonObject};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientServiceExt, Peer, RoleClient};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_common::tls::BearerToken;
use switchyard_proto::calls::{EngineCallFrames, Mux};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient;
use switchyard_test_support::bench::cpu_time;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::transport::{Channel, Endpoint};

const CONCURRENCY: [usize; 2] = [1, 64];
const MESSAGE: &str = "hello from the switchyard benchmark";
const SERVER: &str = "orders";
const TOOL: &str = "orders__echo";
/// The sidecar's `SidecarCalls` token (`calls_token_file`).
const CALLS_TOKEN: &str = "bench-calls-token-0123456789";

/// A `SidecarCalls` client sending [`CALLS_TOKEN`].
type SidecarClient =
    SidecarCallsClient<tonic::service::interceptor::InterceptedService<Channel, BearerToken>>;

/// Gateway ÷ direct calls/s at concurrency 64: at least this.
const THROUGHPUT_GOAL: f64 = 0.6;
/// Gateway ÷ direct p50 at concurrency 1: at most this.
const P50_GOAL: f64 = 1.5;
/// The goals of the MCP endpoint (mcp ÷ direct).
const MCP_THROUGHPUT_GOAL: f64 = 0.6;
const MCP_P50_GOAL: f64 = 3.0;

/// Upper bound on start-up waits.
const START_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Settings {
    quick: bool,
    hops: bool,
    /// The lean MCP clients (`mcp-lean`, `mcp-h2`); `--no-lean` drops them.
    lean: bool,
    /// `--only LABEL`: run just that client (for profiling).
    only: Option<String>,
    /// `--gateway-workers N`: tokio workers of the gateway processes.
    gateway_workers: Option<usize>,
    /// `--concurrency N`: run only that concurrency (1 or 64).
    concurrency: Option<usize>,
    /// `--current-thread`: the bench's clients on a single-threaded runtime.
    current_thread: bool,
    warmup: Duration,
    measure: Duration,
    rounds: usize,
}

impl Settings {
    fn from_env() -> Settings {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let env_quick =
            std::env::var("SWITCHYARD_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        // `cargo bench` passes `--bench`; `cargo test --benches` does not.
        let quick = env_quick
            || args.iter().any(|a| a == "--quick")
            || !args.iter().any(|a| a == "--bench");
        let hops = !args.iter().any(|a| a == "--no-hops");
        let lean = !args.iter().any(|a| a == "--no-lean");
        let current_thread = args.iter().any(|a| a == "--current-thread");
        let value = |flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1).cloned())
        };
        let only = value("--only");
        let gateway_workers =
            value("--gateway-workers").map(|n| n.parse().expect("--gateway-workers N"));
        let concurrency = value("--concurrency").map(|n| {
            let n: usize = n.parse().expect("--concurrency N");
            assert!(
                CONCURRENCY.contains(&n),
                "--concurrency: one of {CONCURRENCY:?}"
            );
            n
        });
        let mut settings = if quick {
            Settings {
                quick,
                hops,
                lean,
                only,
                gateway_workers,
                concurrency,
                current_thread,
                warmup: Duration::from_millis(100),
                measure: Duration::from_millis(300),
                rounds: 1,
            }
        } else {
            Settings {
                quick,
                hops,
                lean,
                only,
                gateway_workers,
                concurrency,
                current_thread,
                warmup: Duration::from_millis(500),
                measure: Duration::from_millis(1500),
                rounds: 5,
            }
        };
        if let Some(ms) = value("--measure-ms") {
            settings.measure = Duration::from_millis(ms.parse().expect("--measure-ms N"));
        }
        settings
    }
}

// ---- binaries -----------------------------------------------------------------

struct Binaries {
    control_plane: PathBuf,
    sidecar: PathBuf,
    server: PathBuf,
}

/// The three release binaries: from the environment, or built here.
fn binaries() -> Binaries {
    let from_env = |var: &str| {
        std::env::var_os(var).map(|p| {
            let p = PathBuf::from(p);
            assert!(p.exists(), "{var}={} does not exist", p.display());
            p
        })
    };
    let env = [
        from_env("SWITCHYARD_CONTROL_PLANE_BIN"),
        from_env("SWITCHYARD_SIDECAR_BIN"),
        from_env("SWITCHYARD_REFERENCE_SERVER"),
    ];
    // target/<profile>/deps/<bench> -> target/release/<bin>
    let release = switchyard_test_support::target_dir()
        .parent()
        .expect("the profile directory has a parent")
        .join("release");
    let packages = [
        ("switchyard-control-plane", "switchyard-control-plane"),
        ("switchyard-sidecar", "switchyard-sidecar"),
        ("switchyard-reference-server", "switchyard-reference-server"),
    ];
    let mut build = Vec::new();
    for ((package, bin), given) in packages.iter().zip(&env) {
        if given.is_none() {
            build.extend(["-p", package, "--bin", bin]);
        }
    }
    if !build.is_empty() {
        // A no-op when the binaries are fresh; rebuilds stale ones, so the
        // bench never measures old code.
        eprintln!("cargo build --release {}", build.join(" "));
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "--release", "--quiet"])
            .args(&build)
            .current_dir(switchyard_test_support::repo_root())
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build --release failed");
    }
    let [cp, sidecar, server] = env;
    let or_release = |given: Option<PathBuf>, bin: &str| {
        let path = given.unwrap_or_else(|| release.join(bin));
        assert!(path.exists(), "{} is missing", path.display());
        path
    };
    Binaries {
        control_plane: or_release(cp, "switchyard-control-plane"),
        sidecar: or_release(sidecar, "switchyard-sidecar"),
        server: or_release(server, "switchyard-reference-server"),
    }
}

// ---- the gateway processes -------------------------------------------------------

/// A started process and the line it printed when ready.
struct Proc {
    child: Child,
    line: String,
}

impl Proc {
    fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// SIGTERM, then wait (SIGKILL after 5 s).
    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// Starts `cmd` (killed on drop) and waits for its stdout line starting
/// with `prefix`. Its log (stderr, at the default level or
/// `$SWITCHYARD_LOG`, so audit records included) goes to `log`.
async fn start(mut cmd: Command, prefix: &str, workers: Option<usize>, log: &Path) -> Proc {
    let log_file = std::fs::File::create(log).expect("create a log file");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .kill_on_drop(true);
    if let Some(n) = workers {
        // The sidecar's `worker_threads` (the control plane's is in its
        // config file).
        cmd.env("SWITCHYARD_WORKER_THREADS", n.to_string());
    }
    let mut child = cmd.spawn().expect("start a gateway process");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let found = tokio::time::timeout(START_LIMIT, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with(prefix) {
                return Some(line);
            }
        }
        None
    })
    .await;
    let Ok(Some(line)) = found else {
        panic!(
            "no {prefix:?} line within {START_LIMIT:?}; its log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    };
    // Keep draining stdout so the process never blocks on it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Proc { child, line }
}

/// The address after `label ` in a ready line, up to the next comma.
fn field<'a>(line: &'a str, label: &str) -> &'a str {
    let rest = line
        .split_once(label)
        .unwrap_or_else(|| panic!("no {label:?} in {line:?}"))
        .1;
    rest.split(',').next().unwrap_or(rest).trim()
}

fn toml_str(s: &str) -> String {
    // TOML basic strings accept JSON string escapes.
    Value::from(s).to_string()
}

struct Gateway {
    control_plane: Proc,
    /// The MCP endpoint's base URL, `http://ADDR`.
    mcp: String,
    sidecar: Proc,
    engine: EngineServiceClient<Channel>,
    /// The sidecar's `SidecarCalls`, for the hop breakdown.
    calls: SidecarClient,
    /// The reference server started by the sidecar.
    server_pid: Option<u32>,
    _dir: tempfile::TempDir,
}

async fn channel(url: String) -> Channel {
    Endpoint::from_shared(url)
        .expect("endpoint")
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("connect")
}

async fn start_gateway(bins: &Binaries, workers: Option<usize>) -> Gateway {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = toml_str(&bins.server.display().to_string());
    let cp_config = dir.path().join("control-plane.toml");
    let runtime = workers
        .map(|n| format!("\n[runtime]\nworker_threads = {n}\n"))
        .unwrap_or_default();
    std::fs::write(
        &cp_config,
        format!(
            "[control_plane]\nlisten = \"127.0.0.1:0\"\nhttp_listen = \"127.0.0.1:0\"\n\n\
             [store]\npath = \"store.redb\"\n\n\
             [[servers]]\nname = \"{SERVER}\"\ntransport = \"stdio\"\ncommand = {server}\n\
             args = [\"--era\", \"{ERA}\"]\nera = \"{ERA}\"\n\n\
             [mcp]\nlisten = \"127.0.0.1:0\"\n{runtime}"
        ),
    )
    .expect("write the control plane's config");
    let mut cmd = Command::new(&bins.control_plane);
    cmd.arg("--config")
        .arg(&cp_config)
        .arg("--grace-secs")
        .arg("2");
    let control_plane = start(
        cmd,
        "switchyard-control-plane: grpc on",
        workers,
        &dir.path().join("control-plane.log"),
    )
    .await;
    let grpc = field(&control_plane.line, "grpc on").to_owned();
    let mcp = format!("http://{}", field(&control_plane.line, "mcp on"));

    // The sidecar's calls token is fixed, so the `sidecar` client can call
    // SidecarCalls directly as the control plane does.
    let calls_token = dir.path().join("calls.token");
    std::fs::write(&calls_token, CALLS_TOKEN).expect("write the calls token");
    let sidecar_config = dir.path().join("sidecar.toml");
    std::fs::write(
        &sidecar_config,
        format!(
            "[server]\nname = \"{SERVER}\"\ntransport = \"stdio\"\ncommand = {server}\n\
             args = [\"--era\", \"{ERA}\"]\nera = \"{ERA}\"\n\n\
             [sidecar]\ncontrol_plane = \"http://{grpc}\"\nsidecar_id = \"bench-sidecar\"\n\
             grace_secs = 2\ncalls_token_file = {calls_token:?}\n"
        ),
    )
    .expect("write the sidecar's config");
    let mut cmd = Command::new(&bins.sidecar);
    cmd.arg("run").arg("--config").arg(&sidecar_config);
    let sidecar = start(
        cmd,
        "switchyard-sidecar: server",
        workers,
        &dir.path().join("sidecar.log"),
    )
    .await;
    let calls_addr = field(&sidecar.line, "calls on").to_owned();

    let engine = EngineServiceClient::new(channel(format!("http://{grpc}")).await);
    let calls = SidecarCallsClient::with_interceptor(
        channel(format!("http://{calls_addr}")).await,
        BearerToken::new(Some(CALLS_TOKEN)),
    );

    // Ready when the tool is callable: registered, catalogue received.
    let deadline = Instant::now() + START_LIMIT;
    let gateway_client = Client::Unary(engine.clone());
    loop {
        match gateway_client.call(true).await {
            Ok(text) => {
                assert_eq!(text.as_deref(), Some(MESSAGE), "gateway echo");
                break;
            }
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "{TOOL} not callable within {START_LIMIT:?}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    let server_pid = sidecar
        .pid()
        .and_then(|pid| children(pid).into_iter().next());
    Gateway {
        control_plane,
        mcp,
        sidecar,
        engine,
        calls,
        server_pid,
        _dir: dir,
    }
}

/// Child process ids of `pid` (all threads).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

// ---- clients ----------------------------------------------------------------------

/// One of the clients under test. Cheap to clone; clones share the one
/// channel or connection.
#[derive(Clone)]
enum Client {
    /// Engine -> control plane -> sidecar -> server, on one
    /// `CallToolStream`.
    Gateway(Arc<Mux<EngineCallFrames>>),
    /// The same path with one `CallTool` RPC per call.
    Unary(EngineServiceClient<Channel>),
    /// Straight to the sidecar's `SidecarCalls` -> server.
    Sidecar(SidecarClient),
    /// rmcp -> its own server.
    Direct(Peer<RoleClient>),
    /// rmcp over Streamable HTTP -> the MCP endpoint -> sidecar -> server.
    Mcp(Peer<RoleClient>),
    /// A lean 2026-07-28 client on the same path: pooled HTTP/1.1.
    McpLean(Arc<Lean>),
    /// The lean client over HTTP/2 (prior knowledge, one connection).
    McpH2(Arc<Lean>),
    /// Engine -> control plane and back: `ListSessions`, no sidecar.
    CpOnly(EngineServiceClient<Channel>),
}

impl Client {
    fn label(&self) -> &'static str {
        match self {
            Client::Gateway(_) => "gateway",
            Client::Unary(_) => "unary",
            Client::Sidecar(_) => "sidecar",
            Client::Direct(_) => "direct",
            Client::Mcp(_) => "mcp",
            Client::McpLean(_) => "mcp-lean",
            Client::McpH2(_) => "mcp-h2",
            Client::CpOnly(_) => "cp-only",
        }
    }

    /// One `echo` call; returns the echoed text when `check` is set.
    async fn call(&self, check: bool) -> Result<Option<String>, String> {
        match self {
            Client::Gateway(mux) => {
                let request = pb::CallToolRequest {
                    tool: TOOL.into(),
                    arguments_json: json!({"message": MESSAGE}).to_string(),
                    ..Default::default()
                };
                let resp = mux.call(request).await.map_err(|e| {
                    let s = e.into_status();
                    format!("{:?}: {}", s.code(), s.message())
                })?;
                if resp.is_error {
                    return Err(format!("tool error: {}", resp.result_json));
                }
                Ok(check.then_some(resp.text))
            }
            Client::Unary(engine) => {
                let request = pb::CallToolRequest {
                    tool: TOOL.into(),
                    arguments_json: json!({"message": MESSAGE}).to_string(),
                    ..Default::default()
                };
                let resp = engine
                    .clone()
                    .call_tool(request)
                    .await
                    .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?
                    .into_inner();
                if resp.is_error {
                    return Err(format!("tool error: {}", resp.result_json));
                }
                Ok(check.then_some(resp.text))
            }
            Client::Sidecar(calls) => {
                let request = pb::SidecarCallRequest {
                    params_json: json!({"name": "echo", "arguments": {"message": MESSAGE}})
                        .to_string(),
                    ..Default::default()
                };
                let resp = calls
                    .clone()
                    .call_tool(request)
                    .await
                    .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?
                    .into_inner();
                if !check {
                    return Ok(None);
                }
                let result: Value = serde_json::from_str(&resp.result_json)
                    .map_err(|e| format!("result is not JSON: {e}"))?;
                Ok(Some(first_text(&result)))
            }
            Client::CpOnly(engine) => {
                engine
                    .clone()
                    .list_sessions(pb::ListSessionsRequest::default())
                    .await
                    .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
                // Nothing to echo: count it as checked.
                Ok(check.then(|| MESSAGE.to_owned()))
            }
            Client::McpLean(lean) | Client::McpH2(lean) => lean.call(check).await,
            Client::Direct(peer) | Client::Mcp(peer) => {
                let mut arguments = JsonObject::new();
                arguments.insert("message".into(), MESSAGE.into());
                let name = match self {
                    Client::Mcp(_) => TOOL,
                    _ => "echo",
                };
                let params = CallToolRequestParams::new(name).with_arguments(arguments);
                let result = peer.call_tool(params).await.map_err(|e| e.to_string())?;
                if result.is_error == Some(true) {
                    return Err(format!("tool error: {result:?}"));
                }
                Ok(check.then(|| first_text(&serde_json::to_value(&result).unwrap_or_default())))
            }
        }
    }
}

/// A lean MCP client: the 2026-07-28 `tools/call` request written by hand
/// (the headers and `_meta` the era requires) on a pooled reqwest client,
/// the answer read as JSON. It measures the endpoint without rmcp's
/// client costs (its worker task, its message types).
#[derive(Debug)]
struct Lean {
    http: reqwest::Client,
    url: String,
    next_id: std::sync::atomic::AtomicU64,
}

impl Lean {
    fn new(url: String, h2: bool) -> Lean {
        let builder = reqwest::Client::builder().tcp_nodelay(true);
        let builder = if h2 {
            builder.http2_prior_knowledge()
        } else {
            builder.http1_only()
        };
        Lean {
            http: builder.build().expect("HTTP client"),
            url,
            next_id: 1.into(),
        }
    }

    async fn call(&self, check: bool) -> Result<Option<String>, String> {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "tools/call",
            "params": {
                "name": TOOL,
                "arguments": {"message": MESSAGE},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": ERA,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        });
        let response = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", ERA)
            .header("mcp-method", "tools/call")
            .header("mcp-name", TOOL)
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!(
                "HTTP {status}: {}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        let answer: Value =
            serde_json::from_slice(&bytes).map_err(|e| format!("answer is not JSON: {e}"))?;
        if answer["id"] != json!(id) || answer["result"]["isError"] == json!(true) {
            return Err(format!("unexpected answer: {answer}"));
        }
        Ok(check.then(|| first_text(&answer["result"])))
    }
}

fn first_text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

// ---- measuring --------------------------------------------------------------------

/// The processes whose CPU time is counted, in table order: the bench
/// itself (None), the control plane, the sidecar, the client's server.
#[derive(Debug, Clone, Copy)]
struct Pids {
    control_plane: Option<u32>,
    sidecar: Option<u32>,
    server: Option<u32>,
}

/// One measured run of one client at one concurrency.
#[derive(Debug)]
struct Run {
    calls: usize,
    errors: usize,
    elapsed: Duration,
    /// Sorted per-call latencies, in nanoseconds.
    latencies: Vec<u64>,
    /// CPU time of: bench, control plane, sidecar, server.
    cpu: [Duration; 4],
}

impl Run {
    fn throughput(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }

    /// Nearest-rank percentile, in microseconds.
    fn percentile_us(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * self.latencies.len() as f64).ceil() as usize;
        self.latencies[rank.clamp(1, self.latencies.len()) - 1] as f64 / 1000.0
    }

    /// CPU microseconds per call of each process.
    fn cpu_per_call_us(&self) -> [f64; 4] {
        self.cpu
            .map(|d| d.as_secs_f64() * 1e6 / self.calls.max(1) as f64)
    }
}

fn cpu_all(pids: &Pids) -> [Duration; 4] {
    [
        cpu_time(None),
        pids.control_plane
            .map_or(Duration::ZERO, |p| cpu_time(Some(p))),
        pids.sidecar.map_or(Duration::ZERO, |p| cpu_time(Some(p))),
        pids.server.map_or(Duration::ZERO, |p| cpu_time(Some(p))),
    ]
}

/// `concurrency` tasks call in a loop until `duration` has passed.
async fn run(client: &Client, pids: &Pids, concurrency: usize, duration: Duration) -> Run {
    let cpu0 = cpu_all(pids);
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(4096);
                let mut errors = 0usize;
                let mut first_error = None;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    match client.call(false).await {
                        Ok(_) => latencies.push(t.elapsed().as_nanos() as u64),
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert(e);
                        }
                    }
                }
                (latencies, errors, first_error)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (l, e, first) = task.await.expect("bench task");
        if let Some(first) = first {
            eprintln!("{} error: {first}", client.label());
        }
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed();
    let cpu1 = cpu_all(pids);
    latencies.sort_unstable();
    Run {
        calls: latencies.len(),
        errors,
        elapsed,
        latencies,
        cpu: [0, 1, 2, 3].map(|i| cpu1[i].saturating_sub(cpu0[i])),
    }
}

/// Per client: the median round by throughput, and the throughput spread.
struct Summary {
    median: Run,
    min: f64,
    max: f64,
    calls: usize,
    errors: usize,
}

fn summarise(mut runs: Vec<Run>) -> Summary {
    runs.sort_by(|a, b| a.throughput().total_cmp(&b.throughput()));
    let min = runs.first().map_or(f64::NAN, Run::throughput);
    let max = runs.last().map_or(f64::NAN, Run::throughput);
    let calls = runs.iter().map(|r| r.calls).sum();
    let errors = runs.iter().map(|r| r.errors).sum();
    let median = runs.swap_remove(runs.len() / 2);
    Summary {
        median,
        min,
        max,
        calls,
        errors,
    }
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default();
    format!("{cores} cores, {cpu}, load average {load}")
}

fn main() {
    let settings = Settings::from_env();
    let bins = binaries();
    let mut builder = if settings.current_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = builder.enable_all().build().expect("tokio runtime");
    runtime.block_on(bench(settings, bins));
}

fn optional(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else {
        format!("{v:.1}")
    }
}

async fn bench(settings: Settings, bins: Binaries) {
    println!(
        "gateway_call: tools/call `echo`, engine -> control plane -> sidecar -> reference server \
         (stdio, {ERA}) vs direct rmcp client"
    );
    println!("machine: {}", machine());
    println!("control plane: {}", bins.control_plane.display());
    println!("sidecar:       {}", bins.sidecar.display());
    println!("server:        {} --era {ERA}", bins.server.display());
    println!(
        "mode:    {}: per cell {} ms warm-up + {} round(s) x {} ms per client, rotating order; \
         median round by calls/s",
        if settings.quick { "quick" } else { "full" },
        settings.warmup.as_millis(),
        settings.rounds,
        settings.measure.as_millis(),
    );

    let runtime = match settings.gateway_workers {
        Some(n) => format!("worker_threads = {n}"),
        None => "default (worker_threads = 1: one thread)".to_owned(),
    };
    println!("gateway: runtime per process: {runtime}");
    println!(
        "clients: {}",
        if settings.current_thread {
            "one single-threaded runtime (--current-thread)"
        } else {
            "one multi-threaded runtime, one worker per core"
        }
    );
    let gateway = start_gateway(&bins, settings.gateway_workers).await;
    let (direct, direct_pid) = start_direct(&bins.server).await;
    println!(
        "pids:    control plane {:?}, sidecar {:?}, its server {:?}; direct server {:?}",
        gateway.control_plane.pid(),
        gateway.sidecar.pid(),
        gateway.server_pid,
        direct_pid
    );

    let gateway_pids = Pids {
        control_plane: gateway.control_plane.pid(),
        sidecar: gateway.sidecar.pid(),
        server: gateway.server_pid,
    };
    let sidecar_pids = Pids {
        control_plane: None,
        ..gateway_pids
    };
    let cp_pids = Pids {
        sidecar: None,
        server: None,
        ..gateway_pids
    };
    let direct_pids = Pids {
        control_plane: None,
        sidecar: None,
        server: direct_pid,
    };
    let mut engine = gateway.engine.clone();
    let mux =
        Mux::<EngineCallFrames>::open(
            |frames| async move { engine.call_tool_stream(frames).await },
        )
        .await
        .expect("CallToolStream");
    // reqwest is built without a TLS provider of its own (plain HTTP here).
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Pooled connections (rmcp's default client opens one per request).
    let http = reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .expect("HTTP client");
    let transport = StreamableHttpClientTransport::with_client(
        http,
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("{}/mcp", gateway.mcp),
        ),
    );
    let mcp = ClientConfig::default()
        .serve_with_lifecycle(transport, common::discover())
        .await
        .expect("rmcp connects to the MCP endpoint");
    let mut clients = vec![
        (Client::Gateway(mux), gateway_pids),
        (Client::Direct(direct.peer().clone()), direct_pids),
        (Client::Mcp(mcp.peer().clone()), gateway_pids),
    ];
    if settings.lean {
        let url = format!("{}/mcp", gateway.mcp);
        let lean = Client::McpLean(Arc::new(Lean::new(url.clone(), false)));
        clients.push((lean, gateway_pids));
        clients.push((Client::McpH2(Arc::new(Lean::new(url, true))), gateway_pids));
    }
    if settings.hops {
        clients.push((Client::Unary(gateway.engine.clone()), gateway_pids));
        clients.push((Client::Sidecar(gateway.calls.clone()), sidecar_pids));
        clients.push((Client::CpOnly(gateway.engine.clone()), cp_pids));
    }
    if let Some(only) = &settings.only {
        clients.retain(|(c, _)| c.label() == only);
        assert!(!clients.is_empty(), "--only {only}: no such client");
    }
    for (client, _) in &clients {
        let echoed = client
            .call(true)
            .await
            .expect("first call")
            .unwrap_or_default();
        assert_eq!(echoed, MESSAGE, "{} echo", client.label());
    }

    println!();
    println!(
        "{:>5}  {:<8} {:>9} {:>9} {:>9}  {:>7} {:>7} {:>7} {:>7} {:>7}  {:>18} {:>7}",
        "conc",
        "client",
        "calls/s",
        "p50 µs",
        "p99 µs",
        "bench",
        "cp",
        "sidecar",
        "server",
        "total",
        "calls/s min..max",
        "calls"
    );
    let mut goals = Vec::new();
    let mut mcp_goals = Vec::new();
    for &concurrency in &CONCURRENCY {
        if settings.concurrency.is_some_and(|c| c != concurrency) {
            continue;
        }
        for (client, pids) in &clients {
            run(client, pids, concurrency, settings.warmup).await;
        }
        let mut runs: Vec<Vec<Run>> = clients.iter().map(|_| Vec::new()).collect();
        for round in 0..settings.rounds {
            for k in 0..clients.len() {
                let i = (round + k) % clients.len();
                let (client, pids) = &clients[i];
                runs[i].push(run(client, pids, concurrency, settings.measure).await);
            }
        }
        let summaries: Vec<Summary> = runs.into_iter().map(summarise).collect();
        for ((client, pids), s) in clients.iter().zip(&summaries) {
            let cpu = s.median.cpu_per_call_us();
            let shown = |i: usize, present: bool| {
                if present { cpu[i] } else { f64::NAN }
            };
            println!(
                "{:>5}  {:<8} {:>9.0} {:>9.1} {:>9.1}  {:>7} {:>7} {:>7} {:>7} {:>7.1}  {:>8.0}..{:<8.0}  {:>7}{}",
                concurrency,
                client.label(),
                s.median.throughput(),
                s.median.percentile_us(50.0),
                s.median.percentile_us(99.0),
                optional(cpu[0]),
                optional(shown(1, pids.control_plane.is_some())),
                optional(shown(2, pids.sidecar.is_some())),
                optional(shown(3, pids.server.is_some())),
                cpu.iter().sum::<f64>(),
                s.min,
                s.max,
                s.calls,
                if s.errors > 0 {
                    format!("  ({} errors)", s.errors)
                } else {
                    String::new()
                },
            );
        }
        if settings.only.is_some() {
            continue;
        }
        let (gw, direct) = (&summaries[0].median, &summaries[1].median);
        let tput = gw.throughput() / direct.throughput();
        let p50 = gw.percentile_us(50.0) / direct.percentile_us(50.0);
        let p99 = gw.percentile_us(99.0) / direct.percentile_us(99.0);
        let cpu_total =
            gw.cpu_per_call_us().iter().sum::<f64>() / direct.cpu_per_call_us().iter().sum::<f64>();
        println!(
            "{:>5}  {:<8} {:>9.2} {:>9.2} {:>9.2}  {:>7} {:>7} {:>7} {:>7} {:>7.2}  (gateway / direct)",
            concurrency, "ratio", tput, p50, p99, "", "", "", "", cpu_total,
        );
        if concurrency == 64 {
            goals.push((
                "calls/s at 64",
                tput,
                tput >= THROUGHPUT_GOAL,
                ">=",
                THROUGHPUT_GOAL,
            ));
        }
        if concurrency == 1 {
            goals.push(("p50 at 1", p50, p50 <= P50_GOAL, "<=", P50_GOAL));
        }
        // The MCP clients against the same direct baseline: rmcp's, and
        // the lean ones when they ran.
        for (i, (client, _)) in clients.iter().enumerate() {
            let label = client.label();
            if !label.starts_with("mcp") {
                continue;
            }
            let mcp = &summaries[i].median;
            let tput = mcp.throughput() / direct.throughput();
            let p50 = mcp.percentile_us(50.0) / direct.percentile_us(50.0);
            let p99 = mcp.percentile_us(99.0) / direct.percentile_us(99.0);
            let cpu_total = mcp.cpu_per_call_us().iter().sum::<f64>()
                / direct.cpu_per_call_us().iter().sum::<f64>();
            println!(
                "{:>5}  {:<8} {:>9.2} {:>9.2} {:>9.2}  {:>7} {:>7} {:>7} {:>7} {:>7.2}  ({label} / direct)",
                concurrency, "ratio", tput, p50, p99, "", "", "", "", cpu_total,
            );
            if concurrency == 64 {
                mcp_goals.push((
                    label,
                    "calls/s at 64",
                    tput,
                    tput >= MCP_THROUGHPUT_GOAL,
                    ">=",
                    MCP_THROUGHPUT_GOAL,
                ));
            }
            if concurrency == 1 {
                mcp_goals.push((
                    label,
                    "p50 at 1",
                    p50,
                    p50 <= MCP_P50_GOAL,
                    "<=",
                    MCP_P50_GOAL,
                ));
            }
        }
    }
    println!();
    println!(
        "ratio = gateway / direct (calls/s: higher is better; p50, p99, CPU: lower is better)"
    );
    println!(
        "bench, cp, sidecar, server, total = user+sys CPU µs per call of each process (/proc, 10 ms \
         ticks); server = the one that client's calls reach"
    );
    for (what, ratio, met, op, goal) in goals {
        println!(
            "goal: gateway / direct {what} {op} {goal}: {ratio:.2}, {}",
            if met { "met" } else { "NOT met" }
        );
    }
    for (label, what, ratio, met, op, goal) in mcp_goals {
        println!(
            "goal: {label} / direct {what} {op} {goal}: {ratio:.2}, {}",
            if met { "met" } else { "NOT met" }
        );
    }
    let _ = mcp.cancel().await;

    let _ = direct.cancel().await;
    gateway.sidecar.stop().await;
    gateway.control_plane.stop().await;
}
