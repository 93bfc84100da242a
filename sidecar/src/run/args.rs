//! The flags of `run` ([`RunArgs`]) and the two tables of its `--config`
//! file: `[server]`, the shared [`ServerConfig`], and `[sidecar]`
//! ([`SidecarSection`]). Only the shapes: [`super::settings()`] reads and
//! checks them.

use serde::Deserialize;
use std::path::PathBuf;
use switchyard_common::server_spec::ServerConfig;

/// Arguments of `run`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Run the sidecar: serve tool calls for one MCP server and report to the control plane",
    after_help = "Examples:\n  switchyard-sidecar run --config sidecar.toml\n  switchyard-sidecar run --server-name files --control-plane http://127.0.0.1:7700 -- npx -y @modelcontextprotocol/server-filesystem /data\n  switchyard-sidecar run --server-name web --url http://127.0.0.1:3001/mcp --header 'Authorization: Bearer T' --control-plane http://cp:7700"
)]
pub struct RunArgs {
    /// TOML file with a `[server]` table and a `[sidecar]` table.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The server's name (without --config).
    #[arg(long, conflicts_with = "config")]
    pub server_name: Option<String>,
    /// stdio or http (default: http with --url, else stdio).
    #[arg(long, value_parser = ["stdio", "http"], conflicts_with = "config")]
    pub transport: Option<String>,
    /// stdio: the program (or give it as the first word after `--`).
    #[arg(long, conflicts_with = "config")]
    pub command: Option<String>,
    /// http: the MCP endpoint URL.
    #[arg(long, conflicts_with = "config")]
    pub url: Option<String>,
    /// http: a static header, 'Name: value' (repeatable).
    #[arg(long = "header", value_name = "'K: V'", conflicts_with = "config")]
    pub headers: Vec<String>,
    /// stdio: an environment variable, NAME=value (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE", conflicts_with = "config")]
    pub env: Vec<String>,
    /// stdio: working directory.
    #[arg(long, conflicts_with = "config")]
    pub cwd: Option<PathBuf>,
    /// Protocol era: auto, 2026-07-28 or 2025-11-25.
    #[arg(long, conflicts_with = "config")]
    pub era: Option<String>,
    /// The control plane's URL, e.g. http://127.0.0.1:7700 (https:// for TLS).
    #[arg(long)]
    pub control_plane: Option<String>,
    /// PEM file of the CA that signed an https:// control plane's certificate.
    #[arg(long, value_name = "FILE")]
    pub control_plane_ca_file: Option<PathBuf>,
    /// PEM certificate (chain) served on SidecarCalls (TLS), and presented to the control plane as client certificate (mTLS).
    #[arg(long, value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file.
    #[arg(long, value_name = "FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// PEM CA file: SidecarCalls then requires a client certificate signed by it (the control plane's).
    #[arg(long, value_name = "FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// File holding the bearer token sent to the control plane (content trimmed).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// File holding the token SidecarCalls requires (registered with the control plane, which sends it on every call); default: a random one per run.
    #[arg(long, value_name = "FILE")]
    pub calls_token_file: Option<PathBuf>,
    /// gRPC listen address for SidecarCalls (default 127.0.0.1:0).
    #[arg(long)]
    pub listen: Option<String>,
    /// The URL registered as the call address (default: `http://<bound listen address>`).
    #[arg(long)]
    pub advertise: Option<String>,
    /// Listen address of /metrics, /healthz, /readyz (default 127.0.0.1:0).
    #[arg(long)]
    pub http_listen: Option<String>,
    /// This sidecar's id (default: hostname-pid-random).
    #[arg(long)]
    pub sidecar_id: Option<String>,
    /// Seconds to drain in-flight calls, and to wait for the server to exit, on shutdown (default 10).
    #[arg(long)]
    pub grace_secs: Option<u64>,
    /// File to append audit records to, as JSON lines (default: the log, target switchyard::audit).
    #[arg(long, value_name = "FILE")]
    pub audit_path: Option<PathBuf>,
    /// Seconds one interaction (elicitation) may wait for the user before it is cancelled (default 600).
    #[arg(long)]
    pub interaction_timeout_secs: Option<u64>,
    /// Retries of one call for a server's input_required results (default 8).
    #[arg(long)]
    pub max_input_rounds: Option<u32>,
    /// Window, in ms, within which one list's list_changed notifications (tools, resources, prompts) are coalesced into one re-list (default 2000).
    #[arg(long)]
    pub list_changed_window_ms: Option<u64>,
    /// Lower bound, in ms, of the interval between polls of an MCP task (the server's pollInterval is clamped to [this, 5 min]; default 5000).
    #[arg(long, env = "SWITCHYARD_TASK_POLL_MIN_MS")]
    pub task_poll_min_ms: Option<u64>,
    /// Seconds of continuous failure to poll a task after which its background call fails (default 1800).
    #[arg(long)]
    pub task_poll_failure_limit_secs: Option<u64>,
    /// Stage E requests (resources/read, prompts/get) processed at once; more wait for a slot (default 4, 1 to 1024).
    #[arg(long, value_name = "N")]
    pub max_concurrent_reads: Option<u32>,
    /// Runtime worker threads: 1 one thread (default, least CPU per call), N > 1 a multi-thread runtime with N workers, 0 one worker per CPU core (at most 1024).
    #[arg(long, env = "SWITCHYARD_WORKER_THREADS", value_name = "N")]
    pub worker_threads: Option<u32>,
    /// stdio: the server's arguments (or its command and arguments), after `--`.
    #[arg(last = true, value_name = "CMD ARGS")]
    pub args: Vec<String>,
}

/// The `[sidecar]` table of the configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SidecarSection {
    /// The control plane's URL (required).
    pub control_plane: Option<String>,
    /// PEM file of the CA to trust for an `https://` control plane
    /// (`control_plane_ca` is accepted as an older spelling).
    #[serde(alias = "control_plane_ca")]
    pub control_plane_ca_file: Option<PathBuf>,
    /// PEM certificate (chain) served on `SidecarCalls` (TLS), and
    /// presented to an `https://` control plane as client certificate.
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
    /// PEM CA file: `SidecarCalls` requires a client certificate signed by
    /// it (mTLS). Needs `tls_cert_file`.
    pub client_ca_file: Option<PathBuf>,
    /// File holding the bearer token sent to the control plane (the
    /// file's content, trimmed).
    pub token_file: Option<PathBuf>,
    /// File holding the token `SidecarCalls` requires (at least 16
    /// characters; registered with the control plane, which sends it on
    /// every call). Default: a random token per run.
    pub calls_token_file: Option<PathBuf>,
    /// gRPC listen address (default `127.0.0.1:0`).
    pub listen: Option<String>,
    /// Call address to register (default `http://<bound listen address>`).
    pub advertise: Option<String>,
    /// Metrics/health listen address (default `127.0.0.1:0`).
    pub http_listen: Option<String>,
    /// Sidecar id (default `hostname-pid-random`).
    pub sidecar_id: Option<String>,
    /// Drain period on shutdown, seconds (default 10).
    pub grace_secs: Option<u64>,
    /// Audit records file (JSON lines); default: the log.
    pub audit_path: Option<PathBuf>,
    /// Bound on one interaction, seconds (default 600).
    pub interaction_timeout_secs: Option<u64>,
    /// Retries of one call for `input_required` results (default 8).
    pub max_input_rounds: Option<u32>,
    /// Coalescing window of list-changed notifications, ms (default 2000).
    pub list_changed_window_ms: Option<u64>,
    /// Lower bound of a task's poll interval, ms (default 5000, at most
    /// 300000).
    pub task_poll_min_ms: Option<u64>,
    /// Continuous poll failure that fails a background call, seconds
    /// (default 1800).
    pub task_poll_failure_limit_secs: Option<u64>,
    /// Stage E requests (`resources/read`, `prompts/get`) processed at
    /// once (default 4, 1 to 1024).
    pub max_concurrent_reads: Option<u32>,
    /// Runtime worker threads (default 1: one thread; N > 1: N workers;
    /// 0: one per CPU core; at most 1024). See `switchyard_common::runtime::build_runtime`.
    pub worker_threads: Option<u32>,
}

/// The whole `--config` file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigFile {
    pub(super) server: ServerConfig,
    #[serde(default)]
    pub(super) sidecar: SidecarSection,
}
