//! The floor under `gateway_call`'s p50 ratio on this host: what two extra
//! processes on the path cost when they do nothing but pass each line on.
//!
//! ```text
//! cargo bench -p switchyard-control-plane --bench hop_floor             # full run, about 60 s
//! cargo bench -p switchyard-control-plane --bench hop_floor -- --quick  # smoke run
//! ```
//!
//! The far end is the reference server that `gateway_call` uses
//! (`switchyard-reference-server --era 2026-07-28` over stdio), and each
//! call is the same `tools/call` of `echo`, one call in flight at a time
//! (concurrency 1). Two clients make the calls:
//!
//! * `rmcp`: rmcp's client, set up as `gateway_call`'s direct baseline
//!   (`ClientLifecycleMode::Discover`, the bench's multi-threaded tokio
//!   runtime); over stdio to the server, or over TCP to the first relay;
//! * `line`: a blocking client that writes the request line and reads the
//!   answer line, with no runtime and no parsing: the cheapest client.
//!
//! Each client takes three paths:
//!
//! * `direct`: the client talks to the server over stdio;
//! * `2 blocking`: client → relay over TCP loopback → relay → server over
//!   stdio, where a relay is one thread with blocking reads and writes,
//!   `TCP_NODELAY`, no parsing and no runtime: the least a process on the
//!   path can do;
//! * `2 tokio`: the same two relays written on a single-threaded tokio
//!   runtime (the runtime every switchyard process uses), still with no
//!   parsing, no HTTP/2 and no protobuf.
//!
//! A third client, `grpc`, takes the gRPC path `2 tonic`: it sends each
//! request line as the `params_json` of a call on a `SidecarCalls`
//! call stream ([`Mux`]) to a relay that forwards it on its own call stream
//! to a second relay, which writes it to the server's stdin and answers with
//! the line it reads back. The relays are tonic servers on a
//! single-threaded runtime using [`calls::serve`], as the control plane and
//! the sidecar are, but they do nothing else: no sessions, no routing, no
//! JSON, no audit. This is the shape and the stack of `gateway_call`'s
//! gateway path, so `grpc 2 tonic` ÷ `rmcp direct` is the floor for a
//! gateway built on them.
//!
//! `2 blocking` and `2 tokio` have the shape of engine → control plane →
//! sidecar → server, so `rmcp 2 blocking` ÷ `rmcp direct` bounds from below
//! the p50 ratio that any gateway of two separate processes can reach in
//! `gateway_call` on this machine, whatever its code does (`2 tokio`: any
//! gateway of two tokio processes; `grpc 2 tonic`: any gateway of two
//! processes that speak gRPC to each other with tonic). Every relay is this bench
//! binary started again with `--role relay`. Each round runs the paths in
//! turn, rotating which goes first; the table shows each path's median round
//! by calls/s, with that round's p50 and p99 and the CPU time per call of
//! every process on the path (`/proc`, 10 ms ticks).
//!
//! The server binary is `SWITCHYARD_REFERENCE_SERVER`, or the release build
//! in the target directory (built when missing).

mod common;

use common::ERA;
use rmcp::model::{CallToolRequestParams, ClientConfig, JsonObject};
use rmcp::service::RunningService;
use rmcp::{ClientServiceExt, RoleClient};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_proto::calls::{self, CallError, Mux, SidecarCallFrames};
use switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient;
use switchyard_test_support::bench::{cpu_time, release_bin};
use tokio_util::sync::CancellationToken;

/// The request: `gateway_call`'s `tools/call` of `echo`, as the 2026-07-28
/// era sends it (no `initialize`; the version and capabilities in `_meta`).
const REQUEST: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello from the switchyard benchmark"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
/// What a correct answer contains.
const ECHOED: &str = r#""text":"hello from the switchyard benchmark""#;
/// The echoed message.
const MESSAGE: &str = "hello from the switchyard benchmark";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    if value("--role").is_some() {
        let kind = value("--kind").expect("--role relay needs --kind");
        let next = value("--next").expect("--role relay needs --next");
        return match kind.as_str() {
            "blocking" => relay_blocking(&next),
            "tokio" => relay_tokio(&next),
            "tonic" => relay_tonic(&next),
            other => panic!("--kind {other}: expected blocking, tokio or tonic"),
        };
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` does not.
    let quick = args.iter().any(|a| a == "--quick") || !args.iter().any(|a| a == "--bench");
    let (warmup, measure, rounds) = if quick {
        (Duration::from_millis(100), Duration::from_millis(300), 1)
    } else {
        (Duration::from_millis(500), Duration::from_millis(1500), 5)
    };
    let server = release_bin(
        "SWITCHYARD_REFERENCE_SERVER",
        "switchyard-reference-server",
        "switchyard-reference-server",
    );

    // The bench's runtime is `gateway_call`'s: multi-threaded, one worker per core.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(bench(server, warmup, measure, rounds));
}

async fn bench(server: PathBuf, warmup: Duration, measure: Duration, rounds: usize) {
    // Pairs of (line, rmcp) per shape; direct first; then the gRPC path.
    let mut paths = Vec::new();
    for (kind, relays) in [("blocking", 0), ("blocking", 2), ("tokio", 2)] {
        for client in ["line", "rmcp"] {
            paths.push(Route::start(&server, client, kind, relays).await);
        }
    }
    paths.push(Route::start(&server, "grpc", "tonic", 2).await);
    for path in &mut paths {
        path.run_on_worker(warmup).await;
    }
    let mut results: Vec<Vec<Round>> = vec![Vec::new(); paths.len()];
    for round in 0..rounds {
        for k in 0..paths.len() {
            let i = (round + k) % paths.len();
            results[i].push(paths[i].run_on_worker(measure).await);
        }
    }

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "hop_floor: tools/call `echo` on {} --era 2026-07-28, concurrency 1",
        server.display()
    );
    println!(
        "machine: {} cores, load average {}; {} round(s) x {} ms, median round by calls/s",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace().next().unwrap_or("?"),
        rounds,
        measure.as_millis()
    );
    println!(
        "{:>15} {:>8} {:>8} {:>8}   CPU µs/call: bench | each relay | server",
        "path", "calls/s", "p50 µs", "p99 µs"
    );
    let mut medians = Vec::new();
    for (path, rounds) in paths.iter().zip(&mut results) {
        rounds.sort_by(|a, b| a.calls_per_sec.total_cmp(&b.calls_per_sec));
        let m = rounds[rounds.len() / 2].clone();
        let cpu: Vec<String> = m.cpu_us.iter().map(|c| format!("{c:.1}")).collect();
        println!(
            "{:>15} {:>8.0} {:>8.1} {:>8.1}   {}",
            path.label,
            m.calls_per_sec,
            m.p50_us,
            m.p99_us,
            cpu.join(" | ")
        );
        medians.push(m);
    }
    // Paths come in pairs (line, rmcp) per shape; direct is the first
    // pair; the gRPC path is compared with rmcp direct, as `gateway_call`
    // compares its gRPC engine with rmcp's client.
    for (i, (path, m)) in paths.iter().zip(&medians).enumerate().skip(2) {
        let direct = if path.label.starts_with("grpc") {
            1
        } else {
            i % 2
        };
        println!(
            "ratio {} / {}: p50 {:.2}",
            path.label,
            paths[direct].label,
            m.p50_us / medians[direct].p50_us
        );
    }
    for path in paths {
        path.stop().await;
    }
}

/// Listen on a loopback port; start the next hop; print the port and the
/// pids this relay started (the server's, if it started one) on stdout.
fn relay_listen(next: &str) -> (TcpListener, Hop) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("relay: bind");
    let port = listener.local_addr().expect("relay: local addr").port();
    let hop = Hop::open(next);
    let pid = hop.server_pid().map(|p| p.to_string()).unwrap_or_default();
    println!("{port} {pid}");
    std::io::stdout().flush().expect("relay: print port");
    (listener, hop)
}

/// Blocking relay: take one connection and pass each line to the next hop
/// (`--next` a server path: that server over stdio; a port: the next relay)
/// and its answer back.
fn relay_blocking(next: &str) {
    let (listener, mut hop) = relay_listen(next);
    let (conn, _) = listener.accept().expect("relay: accept");
    conn.set_nodelay(true).expect("relay: nodelay");
    let mut writer = conn.try_clone().expect("relay: clone stream");
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).expect("relay: read") == 0 {
            return;
        }
        let answer = hop.round_trip(&line);
        writer.write_all(answer.as_bytes()).expect("relay: write");
    }
}

/// The same relay on a single-threaded tokio runtime.
fn relay_tokio(next: &str) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let (listener, hop) = relay_listen(next);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("relay: runtime");
    runtime.block_on(async move {
        listener.set_nonblocking(true).expect("relay: nonblocking");
        let listener = tokio::net::TcpListener::from_std(listener).expect("relay: listener");
        let (conn, _) = listener.accept().await.expect("relay: accept");
        conn.set_nodelay(true).expect("relay: nodelay");
        let (read, mut write) = conn.into_split();
        let mut read = tokio::io::BufReader::new(read);
        // The next hop, as tokio streams.
        let (mut next_write, mut next_read): (
            Box<dyn tokio::io::AsyncWrite + Unpin>,
            Box<dyn tokio::io::AsyncBufRead + Unpin>,
        ) = match hop {
            Hop::Stdio {
                child,
                stdin,
                stdout,
            } => {
                // Dropping the handle leaves the server running; it exits at
                // the end of its stdin, when this relay exits.
                drop(child);
                (
                    Box::new(tokio::process::ChildStdin::from_std(stdin).expect("stdin")),
                    Box::new(tokio::io::BufReader::new(
                        tokio::process::ChildStdout::from_std(stdout.into_inner()).expect("stdout"),
                    )),
                )
            }
            Hop::Tcp { writer, .. } => {
                writer.set_nonblocking(true).expect("nonblocking");
                let (r, w) = tokio::net::TcpStream::from_std(writer)
                    .expect("stream")
                    .into_split();
                (Box::new(w), Box::new(tokio::io::BufReader::new(r)))
            }
        };
        let mut line = String::new();
        let mut answer = String::new();
        loop {
            line.clear();
            if read.read_line(&mut line).await.expect("relay: read") == 0 {
                return;
            }
            next_write
                .write_all(line.as_bytes())
                .await
                .expect("relay: write on");
            next_write.flush().await.expect("relay: flush on");
            answer.clear();
            next_read
                .read_line(&mut answer)
                .await
                .expect("relay: read back");
            assert!(!answer.is_empty(), "relay: the next hop closed the path");
            write
                .write_all(answer.as_bytes())
                .await
                .expect("relay: write back");
        }
    });
}

/// The same relay as a gRPC service on a single-threaded tokio runtime, as
/// a switchyard process is: `SidecarCalls.CallStream` served with
/// [`calls::serve`], each call's `params_json` carrying the request line and
/// its `result_json` the answer line. Towards a port it forwards each call
/// on one call stream ([`Mux`]); towards the server it writes the line to
/// its stdin and reads the answer from its stdout.
fn relay_tonic(next: &str) {
    use switchyard_proto::v1::sidecar_calls_server::{SidecarCalls, SidecarCallsServer};
    use switchyard_proto::v1::{
        SidecarCallFrame, SidecarCallOutcome, SidecarCallRequest, SidecarCallResponse,
        SidecarCancelBackgroundRequest, SidecarCancelBackgroundResponse,
    };
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    use tonic::{Request, Response, Status, Streaming};

    type ServerPipe = (
        tokio::process::ChildStdin,
        tokio::io::BufReader<tokio::process::ChildStdout>,
    );
    enum Onward {
        Server(Arc<tokio::sync::Mutex<ServerPipe>>),
        Relay(Arc<Mux<SidecarCallFrames>>),
    }
    #[derive(Clone)]
    struct Relay(Arc<Onward>);
    impl Relay {
        async fn forward(&self, call: SidecarCallRequest) -> Result<SidecarCallResponse, Status> {
            match &*self.0 {
                Onward::Relay(mux) => mux.call(call).await.map_err(|e| match e {
                    CallError::Call(s) | CallError::Stream(s) => s,
                }),
                Onward::Server(pipe) => {
                    let mut pipe = pipe.lock().await;
                    let (stdin, stdout) = &mut *pipe;
                    let mut line = call.params_json;
                    line.push('\n');
                    stdin.write_all(line.as_bytes()).await.map_err(to_status)?;
                    stdin.flush().await.map_err(to_status)?;
                    let mut answer = String::new();
                    stdout.read_line(&mut answer).await.map_err(to_status)?;
                    Ok(SidecarCallResponse {
                        result_json: answer,
                        ..Default::default()
                    })
                }
            }
        }
    }
    fn to_status(e: std::io::Error) -> Status {
        Status::unavailable(format!("relay: the server: {e}"))
    }
    #[tonic::async_trait]
    impl SidecarCalls for Relay {
        async fn call_tool(
            &self,
            _: Request<SidecarCallRequest>,
        ) -> Result<Response<SidecarCallResponse>, Status> {
            Err(Status::unimplemented("relay: CallStream only"))
        }
        type CallStreamStream = calls::Outcomes<SidecarCallOutcome>;
        async fn call_stream(
            &self,
            request: Request<Streaming<SidecarCallFrame>>,
        ) -> Result<Response<Self::CallStreamStream>, Status> {
            let relay = self.clone();
            Ok(Response::new(calls::serve::<SidecarCallFrames, _, _>(
                request.into_inner(),
                1024,
                CancellationToken::new(),
                move |call, _cancelled, _notifier| {
                    let relay = relay.clone();
                    async move { relay.forward(call).await }
                },
            )))
        }
        async fn cancel_background_call(
            &self,
            _: Request<SidecarCancelBackgroundRequest>,
        ) -> Result<Response<SidecarCancelBackgroundResponse>, Status> {
            Err(Status::unimplemented("relay: CallStream only"))
        }

        async fn read_resource(
            &self,
            _: Request<switchyard_proto::v1::SidecarRequest>,
        ) -> Result<Response<switchyard_proto::v1::ReadResourceResponse>, Status> {
            Err(Status::unimplemented("relay: CallStream only"))
        }
        async fn get_prompt(
            &self,
            _: Request<switchyard_proto::v1::SidecarRequest>,
        ) -> Result<Response<switchyard_proto::v1::GetPromptResponse>, Status> {
            Err(Status::unimplemented("relay: CallStream only"))
        }
        async fn complete(
            &self,
            _: Request<switchyard_proto::v1::SidecarRequest>,
        ) -> Result<Response<switchyard_proto::v1::CompleteResponse>, Status> {
            Err(Status::unimplemented("relay: CallStream only"))
        }
    }

    // Towards a relay, a call stream replaces the plain TCP hop.
    let listener = TcpListener::bind("127.0.0.1:0").expect("relay: bind");
    let port = listener.local_addr().expect("relay: local addr").port();
    let hop = next.parse::<u16>().map_err(|_| Hop::open(next));
    let pid = match &hop {
        Err(server) => server
            .server_pid()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        Ok(_) => String::new(),
    };
    println!("{port} {pid}");
    std::io::stdout().flush().expect("relay: print port");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("relay: runtime");
    runtime.block_on(async move {
        let onward = match hop {
            Ok(port) => Onward::Relay(grpc_mux(port).await),
            Err(Hop::Tcp { .. }) => unreachable!("a port is not a server"),
            Err(Hop::Stdio {
                child,
                stdin,
                stdout,
            }) => {
                // Dropping the handle leaves the server running; it exits at
                // the end of its stdin, when this relay exits.
                drop(child);
                Onward::Server(Arc::new(tokio::sync::Mutex::new((
                    tokio::process::ChildStdin::from_std(stdin).expect("stdin"),
                    tokio::io::BufReader::new(
                        tokio::process::ChildStdout::from_std(stdout.into_inner()).expect("stdout"),
                    ),
                ))))
            }
        };
        listener.set_nonblocking(true).expect("relay: nonblocking");
        let listener = tokio::net::TcpListener::from_std(listener).expect("relay: listener");
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .add_service(SidecarCallsServer::new(Relay(Arc::new(onward))))
            .serve_with_incoming(incoming)
            .await
            .expect("relay: serve");
    });
}

/// A call stream to the tonic relay on `port`, as the control plane opens
/// one to a sidecar.
async fn grpc_mux(port: u16) -> Arc<Mux<SidecarCallFrames>> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("endpoint")
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("connect to the tonic relay");
    let mut client = SidecarCallsClient::new(channel);
    Mux::open(|frames| async move { client.call_stream(frames).await })
        .await
        .expect("open the call stream")
}

/// The next process on a path, seen from the one before it, with blocking
/// I/O.
enum Hop {
    Stdio {
        child: Child,
        stdin: ChildStdin,
        stdout: BufReader<ChildStdout>,
    },
    Tcp {
        writer: TcpStream,
        reader: BufReader<TcpStream>,
    },
}

impl Hop {
    /// A port: connect to that relay; anything else is the server binary
    /// to start over stdio.
    fn open(next: &str) -> Hop {
        match next.parse::<u16>() {
            Ok(port) => {
                let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to relay");
                stream.set_nodelay(true).expect("nodelay");
                let reader = BufReader::new(stream.try_clone().expect("clone stream"));
                Hop::Tcp {
                    writer: stream,
                    reader,
                }
            }
            Err(_) => {
                let mut child = Command::new(next)
                    .args(["--era", ERA])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap_or_else(|e| panic!("start {next}: {e}"));
                let stdin = child.stdin.take().expect("server stdin");
                let stdout = BufReader::new(child.stdout.take().expect("server stdout"));
                Hop::Stdio {
                    child,
                    stdin,
                    stdout,
                }
            }
        }
    }

    fn server_pid(&self) -> Option<u32> {
        match self {
            Hop::Stdio { child, .. } => Some(child.id()),
            Hop::Tcp { .. } => None,
        }
    }

    /// Send one line (with its newline) and read the answering line.
    fn round_trip(&mut self, line: &str) -> String {
        let mut answer = String::with_capacity(256);
        match self {
            Hop::Stdio { stdin, stdout, .. } => {
                stdin.write_all(line.as_bytes()).expect("write to server");
                stdin.flush().expect("flush to server");
                stdout.read_line(&mut answer).expect("read from server");
            }
            Hop::Tcp { writer, reader } => {
                writer.write_all(line.as_bytes()).expect("write to relay");
                reader.read_line(&mut answer).expect("read from relay");
            }
        }
        assert!(!answer.is_empty(), "the next hop closed the path");
        answer
    }

    fn stop(self) {
        if let Hop::Stdio { mut child, .. } = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The client end of a path.
enum Client {
    Line(Hop),
    Rmcp(RunningService<RoleClient, ClientConfig>),
    /// A call stream to a tonic relay, as `gateway_call`'s engine has one
    /// to the control plane.
    Grpc(Arc<Mux<SidecarCallFrames>>),
    /// Lent to the task that runs a round.
    None,
}

impl Client {
    /// rmcp's client, set up as `gateway_call`'s direct baseline: over stdio
    /// to a server it starts (`TokioChildProcess`), or over TCP to a relay.
    /// Returns the server's pid when it started one.
    async fn rmcp(next: &str) -> (Client, Option<u32>) {
        let Ok(port) = next.parse::<u16>() else {
            let (service, pid) = common::start_direct(Path::new(next)).await;
            return (Client::Rmcp(service), pid);
        };
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to relay");
        stream.set_nodelay(true).expect("nodelay");
        let service = ClientConfig::default()
            .serve_with_lifecycle(stream.into_split(), common::discover())
            .await
            .expect("rmcp client connects");
        (Client::Rmcp(service), None)
    }

    /// One call; panics on a wrong answer.
    async fn call(&mut self, line: &str) {
        match self {
            Client::Line(hop) => {
                let answer = hop.round_trip(line);
                assert!(
                    answer.contains(ECHOED) && answer.starts_with(r#"{"jsonrpc":"2.0","id":1,"#),
                    "unexpected answer {answer}"
                );
            }
            Client::Rmcp(service) => {
                let mut arguments = JsonObject::new();
                arguments.insert("message".into(), MESSAGE.into());
                let result = service
                    .peer()
                    .call_tool(CallToolRequestParams::new("echo").with_arguments(arguments))
                    .await
                    .expect("rmcp call");
                assert_eq!(result.is_error, Some(false), "rmcp call: {result:?}");
                let text =
                    serde_json::to_value(&result).expect("result as JSON")["content"][0]["text"]
                        .as_str()
                        .map(str::to_owned);
                assert_eq!(text.as_deref(), Some(MESSAGE), "rmcp call: {result:?}");
            }
            Client::Grpc(mux) => {
                let call = switchyard_proto::v1::SidecarCallRequest {
                    params_json: REQUEST.to_owned(),
                    ..Default::default()
                };
                let answer = mux.call(call).await.expect("gRPC call").result_json;
                assert!(
                    answer.contains(ECHOED) && answer.starts_with(r#"{"jsonrpc":"2.0","id":1,"#),
                    "unexpected answer {answer}"
                );
            }
            Client::None => unreachable!("a client lent to a round is back before the next"),
        }
    }

    async fn stop(self) {
        match self {
            Client::Line(hop) => hop.stop(),
            Client::Rmcp(service) => {
                let _ = service.cancel().await;
            }
            Client::Grpc(mux) => drop(mux),
            Client::None => {}
        }
    }
}

/// One measured round of one path.
#[derive(Clone)]
struct Round {
    calls_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    /// CPU µs per call: the bench, then each process on the path.
    cpu_us: Vec<f64>,
}

/// One client on one path: `relays` relays of one kind, then the server.
struct Route {
    label: String,
    client: Client,
    /// The relay processes, nearest first (the far relay's server is its
    /// own child and exits when the relay does).
    relays: Vec<Child>,
    /// Every process on the path, nearest first, for CPU time.
    pids: Vec<u32>,
}

impl Route {
    async fn start(server: &Path, client: &str, kind: &str, relays: usize) -> Route {
        let mut next = server.to_str().expect("server path is UTF-8").to_owned();
        let mut children = Vec::new();
        let mut pids = Vec::new();
        // Start from the far end so each relay can connect onwards.
        for _ in 0..relays {
            let mut child = Command::new(std::env::current_exe().expect("current exe"))
                .args(["--role", "relay", "--kind", kind, "--next", &next])
                .stdout(Stdio::piped())
                .spawn()
                .expect("start relay");
            let mut printed = String::new();
            BufReader::new(child.stdout.take().expect("relay stdout"))
                .read_line(&mut printed)
                .expect("read relay port");
            let mut fields = printed.split_whitespace();
            next = fields.next().expect("relay port").to_owned();
            pids.extend(fields.map(|p| p.parse::<u32>().expect("server pid")));
            pids.insert(0, child.id());
            children.insert(0, child);
        }
        let (client, server_pid) = match client {
            "line" => {
                let hop = Hop::open(&next);
                let pid = hop.server_pid();
                (Client::Line(hop), pid)
            }
            "grpc" => {
                let port = next.parse().expect("a gRPC client needs a relay");
                (Client::Grpc(grpc_mux(port).await), None)
            }
            _ => Client::rmcp(&next).await,
        };
        pids.extend(server_pid);
        let path = match relays {
            0 => "direct".to_owned(),
            n => format!("{n} {kind}"),
        };
        Route {
            label: format!(
                "{client_label} {path}",
                client_label = match client {
                    Client::Line(_) => "line",
                    Client::Rmcp(_) => "rmcp",
                    Client::Grpc(_) => "grpc",
                    Client::None => unreachable!("a new client"),
                }
            ),
            client,
            relays: children,
            pids,
        }
    }

    /// [`Route::run`] in a task of the runtime, as `gateway_call` runs
    /// its clients: rmcp's answers then wake a worker, not the thread
    /// blocked on the whole bench. The blocking line client runs in place,
    /// on that thread, with no runtime work in its way.
    async fn run_on_worker(&mut self, span: Duration) -> Round {
        if matches!(self.client, Client::Line(_)) {
            return self.run(span).await;
        }
        let client = std::mem::replace(&mut self.client, Client::None);
        let pids = self.pids.clone();
        let label = self.label.clone();
        let (client, round) = tokio::spawn(async move {
            let mut route = Route {
                label,
                client,
                relays: Vec::new(),
                pids,
            };
            let round = route.run(span).await;
            (route.client, round)
        })
        .await
        .expect("the round's task");
        self.client = client;
        round
    }

    async fn run(&mut self, span: Duration) -> Round {
        let line = format!("{REQUEST}\n");
        let cpu = |pids: &[u32]| -> Vec<Duration> {
            std::iter::once(cpu_time(None))
                .chain(pids.iter().map(|&p| cpu_time(Some(p))))
                .collect()
        };
        let cpu_before = cpu(&self.pids);
        let mut latencies = Vec::new();
        let start = Instant::now();
        while start.elapsed() < span {
            let t = Instant::now();
            self.client.call(&line).await;
            latencies.push(t.elapsed());
        }
        let elapsed = start.elapsed();
        let cpu_after = cpu(&self.pids);
        latencies.sort();
        let n = latencies.len();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        Round {
            calls_per_sec: n as f64 / elapsed.as_secs_f64(),
            p50_us: us(latencies[n / 2]),
            p99_us: us(latencies[(n * 99 / 100).min(n - 1)]),
            cpu_us: cpu_before
                .iter()
                .zip(&cpu_after)
                .map(|(b, a)| us(a.saturating_sub(*b)) / n as f64)
                .collect(),
        }
    }

    async fn stop(self) {
        self.client.stop().await;
        for mut child in self.relays {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
