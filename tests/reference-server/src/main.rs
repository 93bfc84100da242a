//! Switchyard's reference MCP server: a small, deterministic, in-memory order
//! system (customers, orders) exposed as MCP tools through the official Rust
//! SDK, rmcp. It is the known-good upstream that Switchyard's tests and
//! benchmarks put behind the gateway. It serves stdio (default) or Streamable
//! HTTP at `/mcp`, in exactly one protocol era — the legacy `initialize`
//! handshake (2025-11-25) or modern `server/discover` + per-request `_meta`
//! (2026-07-28) — or both (`dual`). With `--interactions` it also serves the
//! tools that exercise elicitation, multi round-trip requests and roots (see
//! README.md); with `--stage-a`, the annotation-hint, structured-output and
//! list_changed tools; with `--tasks`, task-augmented `tools/call` in both
//! eras (2025-11-25 core tasks and the 2026-07-28 `io.modelcontextprotocol/tasks`
//! extension, see the `tasks` module); with `--resources`, resources,
//! resource templates, prompts and completions (stage E). With
//! `--conformance` it serves none of that but the server fixture of the
//! official MCP conformance suite instead (the `conformance` module). Logs go
//! to stderr; stdout is the stdio transport.
//!
//! This root parses the command line and serves one transport. Its modules,
//! each using only those listed before it: `executions` (the execution
//! log tests count calls with, `SWITCHYARD_REFERENCE_EXECUTIONS`), `orders`
//! (the in-memory store), `request_state` (sealed MRTR `requestState`),
//! `listens` (listen requests not yet registered, which list changes wait
//! for), `era` (the eras and the layer holding the server to one), `tasks`
//! (the task engine and its transport wrappers), `server` (the MCP handler
//! and, below it, the tools of every stage), `conformance` (the
//! conformance suite's fixture, a handler of its own).

mod conformance;
mod era;
mod executions;
mod listens;
mod orders;
mod request_state;
mod server;
mod tasks;

use std::{net::SocketAddr, sync::Arc};

use anyhow::Context as _;
use axum::serve::ListenerExt as _;
use clap::Parser;
use rmcp::{
    RoleServer, ServerHandler, ServiceExt,
    service::ServerInitializeError,
    transport::{
        StreamableHttpServerConfig, StreamableHttpService, Transport,
        async_rw::AsyncRwTransport,
        stdio_pipes,
        streamable_http_server::{SessionManager, session::local::LocalSessionManager},
    },
};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use crate::{
    conformance::ConformanceServer,
    era::{Era, EraGate},
    listens::PendingListens,
    orders::OrderStore,
    server::{Catalogue, OrderServer},
    tasks::{TaskServer, TaskSessions, TaskStdio},
};

/// Reference MCP server: a fictional order system, served over stdio or
/// Streamable HTTP in one protocol era; or, with `--conformance`, the server
/// fixture of the official MCP conformance suite.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// Serve Streamable HTTP on ADDR (e.g. 127.0.0.1:0) at path /mcp instead
    /// of stdio; prints `listening on http://IP:PORT/mcp` to stderr.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,

    /// Protocol era: 2025-11-25 (initialize only), 2026-07-28
    /// (server/discover + per-request _meta only) or dual (both).
    #[arg(long, value_enum, default_value = "2026-07-28")]
    era: Era,

    /// Also serve the interaction tools (elicitation, URL elicitation,
    /// multi round-trip requests, roots): confirm_order_form, link_account,
    /// link_account_required (2025-11-25), approve_refund (2026-07-28) and
    /// workspace_roots. See README.md.
    #[arg(long)]
    interactions: bool,

    /// Also serve the stage-A tools (annotation hints, structured output and
    /// outputSchema edge cases, tools/list_changed triggers) and declare
    /// `tools.listChanged`. See README.md.
    #[arg(long)]
    stage_a: bool,

    /// Also serve MCP tasks on tools/call, in both eras: 2025-11-25
    /// (capabilities.tasks, execution.taskSupport, params.task, tasks/get,
    /// tasks/result, tasks/cancel, tasks/list) and 2026-07-28 (extension
    /// io.modelcontextprotocol/tasks: resultType "task", tasks/get,
    /// tasks/update, tasks/cancel). Tools: task_sleep, task_optional,
    /// task_fail, task_ask, task_forever, task_stats. Tasks belong to the
    /// caller's Authorization header (HTTP) or the process (stdio), not to a
    /// connection. See README.md.
    #[arg(long)]
    tasks: bool,

    /// Like --tasks, with tasks/get kept as cheap as possible for benchmarks
    /// holding thousands of tasks: log level `error` unless RUST_LOG is set,
    /// nothing logged per request.
    #[arg(long)]
    tasks_bench: bool,

    /// Also serve stage E: orders:// resources (text, binary, paginated),
    /// resource templates, prompts, completions and the add_resource tool
    /// (notifications/resources/list_changed and prompts/list_changed),
    /// with MRTR in 2026-07-28 and elicitation in 2025-11-25. Adds the
    /// orders O-1006..O-1025 to the store. See README.md.
    #[arg(long)]
    resources: bool,

    /// Size in bytes of the resource orders://invoices/large.pdf (with --resources).
    #[arg(
        long,
        value_name = "N",
        default_value_t = server::DEFAULT_LARGE_RESOURCE_BYTES,
        value_parser = clap::value_parser!(u64).range(5..=100_000_000),
        requires = "resources"
    )]
    large_resource_bytes: u64,

    /// Serve no tools at all and declare no `tools` capability (e.g. with
    /// --resources: a server of resources and prompts only).
    #[arg(long, conflicts_with_all = ["interactions", "stage_a", "tasks", "tasks_bench"])]
    no_tools: bool,

    /// Serve the server fixture of the official MCP conformance suite
    /// (`@modelcontextprotocol/conformance`) instead of the order system:
    /// the test_* tools, test:// resources and template, test_* prompts,
    /// completions, logging, resource subscriptions, list-change triggers,
    /// 2026-07-28 input_required tools and SEP-2663 task tools the suite's
    /// server scenarios call (in both eras with --era dual). Run the suite
    /// with scripts/conformance-server.sh. See README.md.
    #[arg(
        long,
        conflicts_with_all = ["interactions", "stage_a", "tasks", "tasks_bench", "resources", "no_tools"]
    )]
    conformance: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_ansi(false)
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            // A benchmark's thousands of polls must not pay for logging.
            EnvFilter::new(if cli.tasks_bench { "error" } else { "warn" })
        }))
        .init();
    if cli.conformance {
        let server = ConformanceServer::new(cli.era);
        let listens = server.listens();
        return match cli.http {
            None => {
                let (stdin, stdout) = stdio_pipes();
                let transport = AsyncRwTransport::new_server(stdin, stdout);
                serve_stdio(server, listens, cli.era, transport).await
            }
            Some(addr) => {
                let sessions = LocalSessionManager::default();
                let factory = move || server.for_session();
                let layers = HttpLayers::default();
                serve_http(factory, listens, cli.era, addr, layers, sessions).await
            }
        };
    }
    let tasks = (cli.tasks || cli.tasks_bench).then(|| TaskServer::new(cli.tasks_bench));
    let with_tasks = tasks.is_some();
    let store = if cli.resources {
        OrderStore::seeded_with_history()
    } else {
        OrderStore::seeded()
    };
    let catalogue = cli
        .resources
        .then(|| Catalogue::new(cli.large_resource_bytes));
    let server = OrderServer::new(
        cli.era,
        store,
        cli.interactions,
        cli.stage_a,
        tasks,
        catalogue,
        !cli.no_tools,
    );
    let listens = server.listens();
    let layers = HttpLayers {
        interactions: cli.interactions,
        tasks: with_tasks,
    };
    let factory = move || server.clone();
    match (cli.http, with_tasks) {
        (None, false) => {
            let (stdin, stdout) = stdio_pipes();
            let transport = AsyncRwTransport::new_server(stdin, stdout);
            serve_stdio(factory(), listens, cli.era, transport).await
        }
        (None, true) => serve_stdio(factory(), listens, cli.era, TaskStdio::new()).await,
        (Some(addr), false) => {
            let sessions = LocalSessionManager::default();
            serve_http(factory, listens, cli.era, addr, layers, sessions).await
        }
        (Some(addr), true) => {
            let sessions = TaskSessions::<LocalSessionManager>::default();
            serve_http(factory, listens, cli.era, addr, layers, sessions).await
        }
    }
}

/// The optional HTTP middleware of a mode.
#[derive(Clone, Copy, Debug, Default)]
struct HttpLayers {
    /// `--interactions`: repair rmcp's URL elicitations ([`era::fix_http_response`]).
    interactions: bool,
    /// `--tasks`: rename 2025-11-25 task requests ([`tasks::rewrite_http_request`]).
    tasks: bool,
}

/// Serves one client over stdin/stdout (`transport`) until it hangs up;
/// `listens` counts its listen requests (see [`listens`]).
async fn serve_stdio<S, T>(
    server: S,
    listens: Arc<PendingListens>,
    era: Era,
    transport: T,
) -> anyhow::Result<()>
where
    S: ServerHandler,
    T: Transport<RoleServer> + Send + 'static,
    T::Error: Send + Sync + 'static,
{
    let transport = EraGate::new(transport, era, listens);
    let running = match server.serve(transport).await {
        Ok(running) => running,
        // The client left before opening a session: nothing to serve.
        Err(ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(error) => return Err(error).context("starting the stdio session"),
    };
    running.waiting().await.context("serving stdio")?;
    Ok(())
}

/// Serves Streamable HTTP at `http://ADDR/mcp` until Ctrl-C, with a handler
/// from `factory` per legacy session or stateless request, legacy sessions
/// kept by `sessions`, `listens` counting listen requests and the
/// middleware `layers`.
async fn serve_http<S, M>(
    factory: impl Fn() -> S + Send + Sync + 'static,
    listens: Arc<PendingListens>,
    era: Era,
    addr: SocketAddr,
    layers: HttpLayers,
    sessions: M,
) -> anyhow::Result<()>
where
    S: ServerHandler,
    M: SessionManager,
{
    let shutdown = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        // 2026-07-28 has no sessions; rmcp serves it statelessly either way.
        .with_legacy_session_mode(era != Era::Modern)
        .with_json_response(true)
        // A modern-only server must reject requests without MCP-Protocol-Version.
        .with_stateless_protocol_metadata_required(era == Era::Modern)
        .with_max_request_body_bytes(era::MAX_BODY_BYTES)
        .with_cancellation_token(shutdown.clone());
    let service = StreamableHttpService::new(move || Ok(factory()), Arc::new(sessions), config);
    let mut router = axum::Router::new().nest_service("/mcp", service).layer(
        axum::middleware::from_fn_with_state(listens, listens::track_http_listens),
    );
    if layers.interactions {
        router = router.layer(axum::middleware::from_fn(era::fix_http_response));
    }
    if layers.tasks {
        router = router.layer(axum::middleware::from_fn(tasks::rewrite_http_request));
    }
    if era != Era::Dual {
        router = router.layer(axum::middleware::from_fn_with_state(era, era::gate_http));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    eprintln!("listening on http://{}/mcp", listener.local_addr()?);
    // Without TCP_NODELAY, an SSE response's second small write (after the
    // priming event) waits for the client's delayed ACK: ~40 ms per request.
    let listener = listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::warn!(%error, "setting TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = tokio::signal::ctrl_c().await;
            shutdown.cancel();
        })
        .await
        .context("serving HTTP")
}
