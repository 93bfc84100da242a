//! `switchyard-sidecar run`: the sidecar as a service. It serves
//! `SidecarCalls` over gRPC ([`crate::service`]), registers with the control
//! plane and keeps the report stream open ([`crate::control`]), serves
//! `/metrics`, `/healthz` and `/readyz` ([`crate::http_endpoints`]), and on
//! SIGINT/SIGTERM turns not ready, reports `draining` to the control plane
//! (which then routes new calls elsewhere), keeps accepting calls for
//! [`DRAIN_NOTICE`] while that report propagates, then stops accepting,
//! drains in-flight calls and stops the upstream server.
//!
//! Configuration comes from a TOML file (`--config`: a `[server]` table,
//! the shared [`ServerConfig`], and a `[sidecar]` table,
//! [`SidecarSection`]) or from flags; sidecar flags override the file.
//! Keys and defaults are documented in `docs/sidecar.md`.

use crate::catalogue::Catalogue;
use crate::control::{self, ControlPlaneInteractions, ControlSettings};
use crate::elicitation::Interactions;
use crate::http_endpoints::{self, Health};
use crate::pool::SessionPool;
use crate::service::CallService;
use crate::upstream::{Upstream, UpstreamError, UpstreamMetrics};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use switchyard_common::audit::Audit;
use switchyard_common::server_spec::{ConfigError, ServerConfig, TransportKind};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Exit status for a bad configuration (sysexits `EX_USAGE`).
pub const EXIT_CONFIG: u8 = 64;
/// Exit status for an internal failure (sysexits `EX_SOFTWARE`).
pub const EXIT_INTERNAL: u8 = 70;

/// Default drain period on shutdown, seconds.
pub const DEFAULT_GRACE_SECS: u64 = 10;
/// How long the sidecar keeps accepting new calls after it reported
/// `draining` on shutdown (capped at the drain grace period): time for the
/// control plane to store the report and for every replica to stop routing
/// here, so calls routed meanwhile are still served rather than refused.
pub const DRAIN_NOTICE: Duration = Duration::from_secs(1);
/// Default gRPC listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:0";
/// Default metrics/health listen address.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:0";
/// Default `worker_threads`: one thread (a current-thread runtime).
pub const DEFAULT_WORKER_THREADS: u32 = 1;
/// Arguments of `run`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Run the sidecar: serve tool calls for one MCP server and report to the control plane",
    after_help = "Examples:\n  switchyard-sidecar run --config sidecar.toml\n  switchyard-sidecar run --server-name files --control-plane http://127.0.0.1:7700 -- npx -y @modelcontextprotocol/server-filesystem /data\n  switchyard-sidecar run --server-name web --url http://127.0.0.1:3001/mcp --header 'Authorization: Bearer T' --control-plane http://cp:7700"
)]
pub struct RunArgs {
    /// TOML file with a [server] table and a [sidecar] table.
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
    /// gRPC listen address for SidecarCalls (default 127.0.0.1:0).
    #[arg(long)]
    pub listen: Option<String>,
    /// The URL registered as the call address (default: http://<bound listen address>).
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
    /// Window, in ms, within which tools/list_changed notifications are coalesced into one re-list (default 2000).
    #[arg(long)]
    pub list_changed_window_ms: Option<u64>,
    /// Lower bound, in ms, of the interval between polls of an MCP task (the server's pollInterval is clamped to [this, 5 min]; default 5000).
    #[arg(long, env = "SWITCHYARD_TASK_POLL_MIN_MS")]
    pub task_poll_min_ms: Option<u64>,
    /// Seconds of continuous failure to poll a task after which its background call fails (default 1800).
    #[arg(long)]
    pub task_poll_failure_limit_secs: Option<u64>,
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
    /// Runtime worker threads (default 1: one thread; N > 1: N workers;
    /// 0: one per CPU core; at most 1024). See `switchyard_common::runtime::build_runtime`.
    pub worker_threads: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    server: ServerConfig,
    #[serde(default)]
    sidecar: SidecarSection,
}

/// The validated settings of `run`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The upstream server.
    pub server: ServerConfig,
    /// The control plane's URL.
    pub control_plane: String,
    /// CA certificate(s) for an `https://` control plane.
    pub control_plane_ca: Option<Vec<u8>>,
    /// Certificate and key served on `SidecarCalls`, and presented to the
    /// control plane as client certificate.
    pub tls_identity: Option<switchyard_common::tls::PemIdentity>,
    /// CA that client certificates on `SidecarCalls` must chain to.
    pub client_ca: Option<Vec<u8>>,
    /// Bearer token sent to the control plane.
    pub token: Option<String>,
    /// gRPC listen address.
    pub listen: String,
    /// Call address to register; derived from the bound address when `None`.
    pub advertise: Option<String>,
    /// Metrics/health listen address.
    pub http_listen: String,
    /// Sidecar id.
    pub sidecar_id: String,
    /// Drain period on shutdown.
    pub grace: Duration,
    /// Audit records file; `None`: the log.
    pub audit_path: Option<PathBuf>,
    /// Bound on one interaction.
    pub interaction_timeout: Duration,
    /// Retries of one call for `input_required` results.
    pub max_input_rounds: u32,
    /// Coalescing window of list-changed notifications.
    pub list_changed_window: Duration,
    /// Lower bound of a task's poll interval.
    pub task_poll_min: Duration,
    /// Continuous poll failure that fails a background call.
    pub task_poll_failure_limit: Duration,
    /// Runtime worker threads, for `switchyard_common::runtime::build_runtime` (1 = one thread).
    pub worker_threads: u32,
}

/// Why `run` failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration is wrong; `origin` is the file, or "command line".
    #[error("{origin}: {source}")]
    Config {
        /// The file path, or `command line`.
        origin: String,
        /// Which key and what is wrong.
        #[source]
        source: ConfigError,
    },
    /// A listener could not be bound.
    #[error("{key}: cannot listen on {addr}: {source}")]
    Bind {
        /// The setting (`sidecar.listen` or `sidecar.http_listen`).
        key: &'static str,
        /// The address.
        addr: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The upstream session could not be created.
    #[error("cannot set up the upstream session: {source}")]
    Upstream {
        /// The cause.
        #[source]
        source: UpstreamError,
    },
    /// The metrics registry refused a metric.
    #[error("cannot register metrics: {source}")]
    Metrics {
        /// The cause.
        #[source]
        source: prometheus::Error,
    },
    /// A server task failed.
    #[error("the {what} server failed: {source}")]
    Serve {
        /// `gRPC` or `HTTP`.
        what: &'static str,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl RunError {
    /// The process exit status for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Config { .. } => EXIT_CONFIG,
            RunError::Metrics { .. } => EXIT_INTERNAL,
            RunError::Bind { .. } | RunError::Upstream { .. } | RunError::Serve { .. } => 1,
        }
    }
}

fn config_error(origin: &str, key: &str, problem: impl Into<String>) -> RunError {
    RunError::Config {
        origin: origin.to_owned(),
        source: ConfigError {
            key: key.to_owned(),
            problem: problem.into(),
        },
    }
}

/// Reads and validates the configuration from the file and the flags.
/// Errors name the file (or "command line"), the key and the problem.
pub fn settings(args: &RunArgs) -> Result<Settings, RunError> {
    let (origin, server, file) = match &args.config {
        Some(path) => {
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|e| config_error(&origin, "(file)", format!("cannot read it: {e}")))?;
            let parsed: ConfigFile = toml::from_str(&text).map_err(|e| {
                let key = toml_key(&e, &text);
                config_error(&origin, &key, e.to_string().trim_end().to_owned())
            })?;
            if !args.args.is_empty() {
                return Err(config_error(
                    "command line",
                    "--",
                    "server arguments after `--` cannot be combined with --config",
                ));
            }
            parsed
                .server
                .validate("server")
                .map_err(|source| RunError::Config {
                    origin: origin.clone(),
                    source,
                })?;
            (origin, parsed.server, parsed.sidecar)
        }
        None => {
            let origin = "command line".to_owned();
            let server = server_from_flags(args)?;
            server
                .validate("server")
                .map_err(|source| RunError::Config {
                    origin: origin.clone(),
                    source: ConfigError {
                        key: flag_for(&source.key),
                        problem: source.problem,
                    },
                })?;
            (origin, server, SidecarSection::default())
        }
    };
    // Flags override the file; an error names the flag when the value came
    // from one (or when there is no file), else the file's key.
    let from_file = args.config.is_some();
    let pick = |flag: &Option<String>, file: &Option<String>, flag_name: &str, key: &str| match flag
    {
        None if from_file => (file.clone(), origin.clone(), key.to_owned()),
        _ => (
            flag.clone(),
            "command line".to_owned(),
            flag_name.to_owned(),
        ),
    };

    let (control_plane, cp_origin, cp_key) = pick(
        &args.control_plane,
        &file.control_plane,
        "--control-plane",
        "sidecar.control_plane",
    );
    let control_plane = control_plane.ok_or_else(|| {
        config_error(
            &cp_origin,
            &cp_key,
            "is required: the control plane's URL, e.g. http://127.0.0.1:7700",
        )
    })?;
    check_url(&control_plane).map_err(|p| config_error(&cp_origin, &cp_key, p))?;

    // TLS and credentials: a flag overrides the file's key; the error
    // names the flag or the key, and the file it could not use.
    let path_setting = |flag: &Option<PathBuf>,
                        file_value: &Option<PathBuf>,
                        flag_name: &str,
                        key: &str| match (flag, file_value) {
        (Some(p), _) => Some((p.clone(), "command line".to_owned(), flag_name.to_owned())),
        (None, Some(p)) => Some((p.clone(), origin.clone(), key.to_owned())),
        (None, None) => None,
    };
    let credential_error =
        |origin: &str, e: switchyard_common::tls::CredentialError| RunError::Config {
            origin: origin.to_owned(),
            source: ConfigError {
                key: e.key().to_owned(),
                problem: e.to_string(),
            },
        };
    let control_plane_ca = match path_setting(
        &args.control_plane_ca_file,
        &file.control_plane_ca_file,
        "--control-plane-ca-file",
        "sidecar.control_plane_ca_file",
    ) {
        Some((path, o, key)) => Some(
            switchyard_common::tls::load_certificates(&key, &path)
                .map_err(|e| credential_error(&o, e))?,
        ),
        None => None,
    };
    let cert = path_setting(
        &args.tls_cert_file,
        &file.tls_cert_file,
        "--tls-cert-file",
        "sidecar.tls_cert_file",
    );
    let key = path_setting(
        &args.tls_key_file,
        &file.tls_key_file,
        "--tls-key-file",
        "sidecar.tls_key_file",
    );
    let tls_identity = match (cert, key) {
        (Some((cert, o, cert_key)), Some((key, _, key_key))) => Some(
            switchyard_common::tls::load_identity(&cert_key, &cert, &key_key, &key)
                .map_err(|e| credential_error(&o, e))?,
        ),
        (Some((_, o, cert_key)), None) => {
            return Err(config_error(
                &o,
                &cert_key,
                "needs its private key: sidecar.tls_key_file (or --tls-key-file)",
            ));
        }
        (None, Some((_, o, key_key))) => {
            return Err(config_error(
                &o,
                &key_key,
                "needs its certificate: sidecar.tls_cert_file (or --tls-cert-file)",
            ));
        }
        (None, None) => None,
    };
    let client_ca = match path_setting(
        &args.client_ca_file,
        &file.client_ca_file,
        "--client-ca-file",
        "sidecar.client_ca_file",
    ) {
        Some((_, o, key)) if tls_identity.is_none() => {
            return Err(config_error(
                &o,
                &key,
                "needs sidecar.tls_cert_file and sidecar.tls_key_file (client certificates are only checked over TLS)",
            ));
        }
        Some((path, o, key)) => Some(
            switchyard_common::tls::load_certificates(&key, &path)
                .map_err(|e| credential_error(&o, e))?,
        ),
        None => None,
    };
    let token = match path_setting(
        &args.token_file,
        &file.token_file,
        "--token-file",
        "sidecar.token_file",
    ) {
        Some((path, o, key)) => Some(
            switchyard_common::tls::load_token(&key, &path).map_err(|e| credential_error(&o, e))?,
        ),
        None => None,
    };

    let (listen, l_origin, l_key) = pick(&args.listen, &file.listen, "--listen", "sidecar.listen");
    let listen = listen.unwrap_or_else(|| DEFAULT_LISTEN.into());
    check_addr(&listen).map_err(|p| config_error(&l_origin, &l_key, p))?;

    let (http_listen, h_origin, h_key) = pick(
        &args.http_listen,
        &file.http_listen,
        "--http-listen",
        "sidecar.http_listen",
    );
    let http_listen = http_listen.unwrap_or_else(|| DEFAULT_HTTP_LISTEN.into());
    check_addr(&http_listen).map_err(|p| config_error(&h_origin, &h_key, p))?;

    let (advertise, a_origin, a_key) = pick(
        &args.advertise,
        &file.advertise,
        "--advertise",
        "sidecar.advertise",
    );
    if let Some(a) = &advertise {
        check_url(a).map_err(|p| config_error(&a_origin, &a_key, p))?;
    }

    let (sidecar_id, s_origin, s_key) = pick(
        &args.sidecar_id,
        &file.sidecar_id,
        "--sidecar-id",
        "sidecar.sidecar_id",
    );
    let sidecar_id = match sidecar_id {
        Some(id) if id.trim().is_empty() => {
            return Err(config_error(&s_origin, &s_key, "must not be empty"));
        }
        Some(id) => id,
        // A random part too: a restarted container has the same hostname and
        // often the same pid (1), and the control plane must tell the new
        // process from the old one (background calls it held are lost).
        None => format!(
            "{}-{}-{:08x}",
            hostname(),
            std::process::id(),
            rand::random::<u32>()
        ),
    };

    let grace_secs = args
        .grace_secs
        .or(file.grace_secs)
        .unwrap_or(DEFAULT_GRACE_SECS);

    let interaction_timeout = match args
        .interaction_timeout_secs
        .map(|v| (v, "command line", "--interaction-timeout-secs"))
        .or(file
            .interaction_timeout_secs
            .map(|v| (v, origin.as_str(), "sidecar.interaction_timeout_secs")))
    {
        Some((0, origin, key)) => return Err(config_error(origin, key, "must be at least 1")),
        Some((secs, _, _)) => Duration::from_secs(secs),
        None => crate::elicitation::DEFAULT_INTERACTION_TIMEOUT,
    };
    let max_input_rounds = args
        .max_input_rounds
        .or(file.max_input_rounds)
        .unwrap_or(crate::upstream::config::DEFAULT_MAX_INPUT_ROUNDS);
    let audit_path = args.audit_path.clone().or(file.audit_path.clone());
    let list_changed_window = args
        .list_changed_window_ms
        .or(file.list_changed_window_ms)
        .map(Duration::from_millis)
        .unwrap_or(crate::catalogue::DEFAULT_LIST_CHANGED_WINDOW);
    let task_poll_min = match args
        .task_poll_min_ms
        .map(|v| (v, "command line", "--task-poll-min-ms"))
        .or(file
            .task_poll_min_ms
            .map(|v| (v, origin.as_str(), "sidecar.task_poll_min_ms")))
    {
        Some((ms, origin, key)) if ms == 0 || ms > crate::tasks::POLL_MAX.as_millis() as u64 => {
            return Err(config_error(
                origin,
                key,
                format!(
                    "must be between 1 and {} (5 minutes)",
                    crate::tasks::POLL_MAX.as_millis()
                ),
            ));
        }
        Some((ms, _, _)) => Duration::from_millis(ms),
        None => crate::tasks::DEFAULT_POLL_MIN,
    };
    let task_poll_failure_limit = match args
        .task_poll_failure_limit_secs
        .map(|v| (v, "command line", "--task-poll-failure-limit-secs"))
        .or(file
            .task_poll_failure_limit_secs
            .map(|v| (v, origin.as_str(), "sidecar.task_poll_failure_limit_secs")))
    {
        Some((0, origin, key)) => return Err(config_error(origin, key, "must be at least 1")),
        Some((secs, _, _)) => Duration::from_secs(secs),
        None => crate::tasks::DEFAULT_FAILURE_LIMIT,
    };
    let worker_threads = match args
        .worker_threads
        .map(|v| {
            (
                v,
                "command line",
                "--worker-threads (or SWITCHYARD_WORKER_THREADS)",
            )
        })
        .or(file
            .worker_threads
            .map(|v| (v, origin.as_str(), "sidecar.worker_threads")))
    {
        Some((n, origin, key)) if n > switchyard_common::runtime::MAX_WORKER_THREADS => {
            return Err(config_error(
                origin,
                key,
                format!(
                    "{n} is too many: must be at most {} (1 = one thread, 0 = one worker per CPU core)",
                    switchyard_common::runtime::MAX_WORKER_THREADS
                ),
            ));
        }
        Some((n, _, _)) => n,
        None => DEFAULT_WORKER_THREADS,
    };

    Ok(Settings {
        server,
        control_plane,
        control_plane_ca,
        tls_identity,
        client_ca,
        token,
        listen,
        advertise,
        http_listen,
        sidecar_id,
        grace: Duration::from_secs(grace_secs),
        audit_path,
        interaction_timeout,
        max_input_rounds,
        list_changed_window,
        task_poll_min,
        task_poll_failure_limit,
        worker_threads,
    })
}

/// The dotted key a TOML error is about, as well as it can be told: the
/// table and field under the error's position.
fn toml_key(e: &toml::de::Error, text: &str) -> String {
    let Some(span) = e.span() else {
        return "(file)".into();
    };
    let before = &text[..span.start.min(text.len())];
    let table = before
        .lines()
        .rev()
        .find_map(|l| {
            let l = l.trim();
            (l.starts_with('[') && l.ends_with(']'))
                .then(|| l.trim_matches(['[', ']']).trim().to_owned())
        })
        .unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let field = line
        .split_once('=')
        .map(|(k, _)| k.trim().to_owned())
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    match (table.is_empty(), field) {
        (false, Some(f)) => format!("{table}.{f}"),
        (true, Some(f)) => f,
        (false, None) => table,
        (true, None) => "(file)".into(),
    }
}

/// Maps a `server.*` key to the flag that sets it.
fn flag_for(key: &str) -> String {
    match key.strip_prefix("server.").unwrap_or(key) {
        "name" => "--server-name".into(),
        "headers" => "--header".into(),
        other => format!("--{}", other.replace('_', "-")),
    }
}

fn server_from_flags(args: &RunArgs) -> Result<ServerConfig, RunError> {
    let err = |key: &str, problem: String| config_error("command line", key, problem);
    let name = args
        .server_name
        .clone()
        .ok_or_else(|| err("--server-name", "is required without --config".into()))?;
    let transport = match args.transport.as_deref() {
        Some("http") => TransportKind::Http,
        Some(_) => TransportKind::Stdio,
        None if args.url.is_some() => TransportKind::Http,
        None => TransportKind::Stdio,
    };
    let (command, rest) = match (&args.command, args.args.split_first()) {
        (Some(c), _) => (Some(c.clone()), args.args.clone()),
        (None, Some((c, rest))) => (Some(c.clone()), rest.to_vec()),
        (None, None) => (None, Vec::new()),
    };
    let mut headers = BTreeMap::new();
    for h in &args.headers {
        let (k, v) = h.split_once(':').ok_or_else(|| {
            err(
                "--header",
                format!("{h:?} is not of the form 'Name: value'"),
            )
        })?;
        headers.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    let mut env = BTreeMap::new();
    for e in &args.env {
        let (k, v) = e
            .split_once('=')
            .ok_or_else(|| err("--env", format!("{e:?} is not of the form NAME=value")))?;
        env.insert(k.to_owned(), v.to_owned());
    }
    // Defaults come from the shared deserialiser, so flags and files agree.
    let mut server: ServerConfig = toml::from_str(&format!(
        "name = {}\ntransport = \"stdio\"\n",
        toml_string(&name)
    ))
    .map_err(|e| err("--server-name", e.to_string()))?;
    server.transport = transport;
    server.command = command;
    server.args = rest;
    server.env = env;
    server.cwd = args.cwd.clone();
    server.url = args.url.clone();
    server.headers = headers;
    if let Some(era) = &args.era {
        server.era = era.clone();
    }
    Ok(server)
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn check_url(url: &str) -> Result<(), String> {
    match reqwest::Url::parse(url) {
        Ok(u) if (u.scheme() == "http" || u.scheme() == "https") && u.host().is_some() => Ok(()),
        Ok(u) => Err(format!(
            "{url:?} must be an http:// or https:// URL with a host (scheme {:?})",
            u.scheme()
        )),
        Err(e) => Err(format!("{url:?} is not a URL: {e}")),
    }
}

fn check_addr(addr: &str) -> Result<(), String> {
    match addr.to_socket_addrs() {
        Ok(addrs) if addrs.len() > 0 => Ok(()),
        Ok(_) => Err(format!("{addr:?} resolves to no address")),
        Err(e) => Err(format!("{addr:?} is not a HOST:PORT address: {e}")),
    }
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// The call address to register for a listener bound at `bound`:
/// `https://` when `SidecarCalls` is served over TLS.
fn derived_advertise(bound: SocketAddr, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    if bound.ip().is_unspecified() {
        format!("{scheme}://{}:{}", hostname(), bound.port())
    } else {
        format!("{scheme}://{bound}")
    }
}

async fn bind(key: &'static str, addr: &str) -> Result<(TcpListener, SocketAddr), RunError> {
    let bind_error = |source| RunError::Bind {
        key,
        addr: addr.to_owned(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

/// Listens for SIGINT and SIGTERM at once (before the ready line: a
/// signal that came before the handlers would kill the process with the
/// default action, without a drain); the future resolves on either.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    let listen = |kind: SignalKind, name: &str| match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for {name}");
            None
        }
    };
    let mut interrupt = listen(SignalKind::interrupt(), "SIGINT");
    let mut terminate = listen(SignalKind::terminate(), "SIGTERM");
    async fn recv(s: &mut Option<Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    async move {
        tokio::select! {
            _ = recv(&mut interrupt) => tracing::info!("SIGINT: shutting down"),
            _ = recv(&mut terminate) => tracing::info!("SIGTERM: shutting down"),
        }
    }
}

/// Runs the sidecar until SIGINT/SIGTERM, then drains and stops the
/// upstream server. Prints `switchyard-sidecar: server NAME, calls on ADDR,
/// http on ADDR` on stdout once both listeners are bound.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    run_with(settings(&args)?).await
}

/// [`run`] with settings already read by [`settings`] (the binary reads
/// them first, to build the runtime `worker_threads` asks for).
pub async fn run_with(settings: Settings) -> Result<(), RunError> {
    switchyard_common::tls::install_crypto_provider();
    let registry = prometheus::Registry::new();
    let metrics =
        UpstreamMetrics::register(&registry).map_err(|source| RunError::Metrics { source })?;
    let control_settings = ControlSettings {
        control_plane: settings.control_plane.clone(),
        ca_pem: settings.control_plane_ca.clone(),
        credentials: switchyard_common::tls::ClientCredentials {
            identity: settings.tls_identity.clone(),
            token: settings.token.clone(),
        },
        server: settings.server.name.clone(),
        sidecar_id: settings.sidecar_id.clone(),
        call_address: String::new(), // known once the listener is bound
    };
    let audit = match &settings.audit_path {
        Some(path) => Audit::to_file(path).map_err(|e| {
            config_error(
                &path.display().to_string(),
                "sidecar.audit_path",
                format!("cannot open it for appending: {e}"),
            )
        })?,
        None => Audit::to_log(),
    };
    let handler = ControlPlaneInteractions::new(&control_settings)
        .map_err(|e| config_error("control plane", "sidecar.control_plane", e.to_string()))?;
    let mut interactions = Interactions::new(Arc::new(handler), audit.clone());
    interactions.timeout = settings.interaction_timeout;
    // Stage B: task-related server requests belong to the task's initiator.
    let initiators = crate::tasks::Initiators::new();
    interactions.tasks = Some(initiators.clone());
    let tasks_config = crate::tasks::TasksConfig {
        settings: crate::tasks::TaskSettings {
            poll_min: settings.task_poll_min,
            failure_limit: settings.task_poll_failure_limit,
            sidecar_id: settings.sidecar_id.clone(),
        },
        registry: Some(Arc::new(crate::tasks::GrpcRegistry::new(
            control::registry_client(&control_settings).map_err(|e| {
                config_error("control plane", "sidecar.control_plane", e.to_string())
            })?,
        ))),
        interactions: Some(interactions.clone()),
        initiators,
        metrics: crate::tasks::TaskMetrics::register(&registry)
            .map_err(|source| RunError::Metrics { source })?,
    };
    let mut upstream_config = crate::upstream::UpstreamConfig::from_spec(&settings.server);
    upstream_config.max_input_rounds = settings.max_input_rounds;
    let upstream = Upstream::with_interactions(upstream_config, &metrics, interactions)
        .map_err(|source| RunError::Upstream { source })?;
    let pool = SessionPool::new(upstream.clone());
    let health = Health::new(upstream.clone());

    let (grpc_listener, calls_addr) = bind("sidecar.listen", &settings.listen).await?;
    let (http_listener, http_addr) = bind("sidecar.http_listen", &settings.http_listen).await?;
    let call_address = settings
        .advertise
        .clone()
        .unwrap_or_else(|| derived_advertise(calls_addr, settings.tls_identity.is_some()));

    let catalogue = Catalogue::new();
    let stop = CancellationToken::new();
    // Cancelled when the grace period is over: the calls still running end.
    let abort = CancellationToken::new();
    let grpc_stop = stop.clone();
    // TCP_NODELAY on the accepted sockets: calls are small request/response
    // messages, and Nagle would hold back the response frames until the
    // control plane's delayed ACK.
    let incoming =
        tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true));
    let mut builder = tonic::transport::Server::builder();
    if let Some(identity) = &settings.tls_identity {
        // TLS on SidecarCalls; with a client CA, only clients with a
        // certificate it signed (the control plane's) get through.
        let mut tls = tonic::transport::ServerTlsConfig::new().identity(identity.to_tonic());
        if let Some(ca) = &settings.client_ca {
            tls = tls.client_ca_root(tonic::transport::Certificate::from_pem(ca));
        }
        builder = builder.tls_config(tls).map_err(|e| {
            config_error(
                "TLS",
                "sidecar.tls_cert_file",
                format!(
                    "cannot set up TLS: {}",
                    crate::upstream::error::error_chain(&e)
                ),
            )
        })?;
    }
    let service = CallService::with_pool(pool.clone())
        .with_catalogue(catalogue.clone())
        .with_audit(audit)
        .with_tasks(tasks_config)
        .with_stop(stop.clone())
        .with_abort(abort.clone());
    let tasks = service.tasks();
    let mut grpc = tokio::spawn(
        builder
            .add_service(service.into_server())
            .serve_with_incoming_shutdown(incoming, async move { grpc_stop.cancelled().await }),
    );
    let http_stop = CancellationToken::new();
    let http_stop_signal = http_stop.clone();
    let mut http = tokio::spawn(
        axum::serve(
            http_listener,
            http_endpoints::router(health.clone(), registry),
        )
        .with_graceful_shutdown(async move { http_stop_signal.cancelled().await })
        .into_future(),
    );

    let (view, watcher) =
        control::watch_upstream_with(upstream.clone(), catalogue, settings.list_changed_window);
    let drain = control::Drain::new();
    let reporter = tokio::spawn(control::report_with(
        ControlSettings {
            call_address: call_address.clone(),
            ..control_settings
        },
        view,
        health.clone(),
        Some(tasks),
        drain.clone(),
    ));

    let shutdown = shutdown_signal();
    tracing::info!(server = %settings.server.name, %calls_addr, %call_address, %http_addr, sidecar_id = %settings.sidecar_id, "serving");
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "switchyard-sidecar: server {}, calls on {calls_addr}, http on {http_addr}",
            settings.server.name
        );
        let _ = out.flush();
    }

    let mut failure = None;
    tokio::select! {
        _ = shutdown => {}
        r = &mut grpc => {
            failure = Some(RunError::Serve { what: "gRPC", source: match r {
                Ok(Ok(())) => "stopped unexpectedly".into(),
                Ok(Err(e)) => Box::new(e),
                Err(e) => Box::new(e),
            }});
        }
        r = &mut http => {
            failure = Some(RunError::Serve { what: "HTTP", source: match r {
                Ok(Ok(())) => "stopped unexpectedly".into(),
                Ok(Err(e)) => Box::new(e),
                Err(e) => Box::new(e),
            }});
        }
    }

    // Not ready any more, and say so to the control plane (state
    // `draining` on the report stream, which stays open until the drain is
    // over) so it routes new calls to other sidecars.
    health.set_draining();
    drain.start();
    if failure.is_none() {
        // Keep taking the calls routed before the control plane saw it.
        let notice = DRAIN_NOTICE.min(settings.grace);
        tracing::info!(
            notice_ms = notice.as_millis() as u64,
            "reported draining; still accepting calls for the notice period"
        );
        tokio::time::sleep(notice).await;
    }
    // Stop taking calls and let the running ones finish.
    stop.cancel();
    if !grpc.is_finished() {
        match tokio::time::timeout(settings.grace, &mut grpc).await {
            Ok(_) => tracing::info!("in-flight calls drained"),
            Err(_) => {
                tracing::warn!(
                    grace_s = settings.grace.as_secs(),
                    "grace period over; cancelling the remaining calls"
                );
                abort.cancel();
                // Their answers (UNAVAILABLE) get a moment to leave.
                let _ = tokio::time::timeout(Duration::from_millis(500), &mut grpc).await;
                grpc.abort();
            }
        }
    }
    reporter.abort();
    tokio::join!(
        pool.shutdown(settings.grace),
        upstream.shutdown(settings.grace)
    );
    watcher.abort();
    http_stop.cancel();
    if !http.is_finished() {
        let _ = tokio::time::timeout(Duration::from_secs(1), &mut http).await;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::Path;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn args(argv: &[&str]) -> RunArgs {
        Cli::parse_from(std::iter::once("run").chain(argv.iter().copied())).run
    }

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn flags_make_a_stdio_server() {
        let s = settings(&args(&[
            "--server-name",
            "t",
            "--control-plane",
            "http://127.0.0.1:1",
            "--",
            "python3",
            "x.py",
        ]))
        .unwrap();
        assert_eq!(s.server.command.as_deref(), Some("python3"));
        assert_eq!(s.server.args, ["x.py"]);
        assert_eq!(s.listen, DEFAULT_LISTEN);
        assert_eq!(s.grace, Duration::from_secs(10));
        assert_eq!(s.interaction_timeout, Duration::from_secs(600));
        assert_eq!(s.max_input_rounds, 8);
        assert_eq!(s.list_changed_window, Duration::from_secs(2));
        assert_eq!(s.task_poll_min, Duration::from_secs(5));
        assert_eq!(s.task_poll_failure_limit, Duration::from_secs(1800));
        assert!(s.audit_path.is_none());
        // hostname-pid-random: the random part tells a restarted process
        // with the same hostname and pid from the old one.
        let (head, random) = s.sidecar_id.rsplit_once('-').expect("hostname-pid-random");
        assert!(
            head.ends_with(&format!("-{}", std::process::id())),
            "{}",
            s.sidecar_id
        );
        assert_eq!(random.len(), 8, "{}", s.sidecar_id);
        assert!(
            random.chars().all(|c| c.is_ascii_hexdigit()),
            "{}",
            s.sidecar_id
        );
    }

    #[test]
    fn errors_name_the_key() {
        let e = settings(&args(&["--server-name", "t", "--", "srv"])).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_CONFIG);
        assert!(e.to_string().contains("--control-plane"), "{e}");

        let f = file(
            "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\nera = \"2024\"\n[sidecar]\ncontrol_plane = \"http://h:1\"\n",
        );
        let e = settings(&args(&["--config", f.path().to_str().unwrap()])).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(f.path().to_str().unwrap()) && text.contains("server.era"),
            "{text}"
        );

        let f = file(
            "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://h:1\"\nlisen = \"x\"\n",
        );
        let text = settings(&args(&["--config", f.path().to_str().unwrap()]))
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("sidecar.lisen") && text.contains("line 7"),
            "{text}"
        );

        let f = file(
            "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"ftp://h\"\n",
        );
        let text = settings(&args(&["--config", f.path().to_str().unwrap()]))
            .unwrap_err()
            .to_string();
        assert!(text.contains("sidecar.control_plane"), "{text}");
    }

    #[test]
    fn interaction_settings_come_from_the_file_and_flags() {
        let f = file(
            "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://h:1\"\naudit_path = \"/var/log/a.jsonl\"\ninteraction_timeout_secs = 30\nmax_input_rounds = 3\nlist_changed_window_ms = 250\ntask_poll_min_ms = 100\ntask_poll_failure_limit_secs = 7\n",
        );
        let path = f.path().to_str().unwrap();
        let s = settings(&args(&["--config", path])).unwrap();
        assert_eq!(s.audit_path.as_deref(), Some(Path::new("/var/log/a.jsonl")));
        assert_eq!(s.interaction_timeout, Duration::from_secs(30));
        assert_eq!(s.max_input_rounds, 3);
        assert_eq!(s.list_changed_window, Duration::from_millis(250));
        assert_eq!(s.task_poll_min, Duration::from_millis(100));
        assert_eq!(s.task_poll_failure_limit, Duration::from_secs(7));
        let s = settings(&args(&["--config", path, "--task-poll-min-ms", "20"])).unwrap();
        assert_eq!(s.task_poll_min, Duration::from_millis(20));
        let e = settings(&args(&["--config", path, "--task-poll-min-ms", "0"])).unwrap_err();
        assert!(e.to_string().contains("--task-poll-min-ms"), "{e}");
        let s = settings(&args(&[
            "--config",
            path,
            "--interaction-timeout-secs",
            "5",
        ]))
        .unwrap();
        assert_eq!(s.interaction_timeout, Duration::from_secs(5));
        let e = settings(&args(&[
            "--config",
            path,
            "--interaction-timeout-secs",
            "0",
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("--interaction-timeout-secs"), "{e}");
    }

    #[test]
    fn worker_threads_come_from_the_file_and_the_flag() {
        let server = "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://h:1\"\n";
        let f = file(server);
        let path = f.path().to_str().unwrap();
        assert_eq!(
            settings(&args(&["--config", path])).unwrap().worker_threads,
            1
        );
        let f = file(&format!("{server}worker_threads = 3\n"));
        let path = f.path().to_str().unwrap();
        assert_eq!(
            settings(&args(&["--config", path])).unwrap().worker_threads,
            3
        );
        // The flag wins over the file.
        let s = settings(&args(&["--config", path, "--worker-threads", "0"])).unwrap();
        assert_eq!(s.worker_threads, 0);
        let e = settings(&args(&["--config", path, "--worker-threads", "1025"])).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_CONFIG);
        let text = e.to_string();
        assert!(
            text.starts_with("command line: --worker-threads") && text.contains("at most 1024"),
            "{text}"
        );
        let f = file(&format!("{server}worker_threads = 1024\n"));
        let path = f.path().to_str().unwrap();
        assert_eq!(
            settings(&args(&["--config", path])).unwrap().worker_threads,
            1024
        );
        let f = file(&format!("{server}worker_threads = 5000\n"));
        let path = f.path().to_str().unwrap();
        let e = settings(&args(&["--config", path])).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_CONFIG);
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("{path}: sidecar.worker_threads: 5000 is too many")),
            "{text}"
        );
        let f = file(&format!("{server}worker_threads = -1\n"));
        let path = f.path().to_str().unwrap();
        let e = settings(&args(&["--config", path])).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_CONFIG);
        assert!(e.to_string().contains("sidecar.worker_threads"), "{e}");
    }

    #[test]
    fn tls_and_token_settings_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let pki = switchyard_test_support::pki::TestPki::new(dir.path(), "run");
        let leaf = pki.leaf("sidecar", &[]);
        let token = dir.path().join("token");
        std::fs::write(&token, "t0k3n\n").unwrap();
        let q = |p: &Path| toml_string(&p.to_string_lossy());
        let f = file(&format!(
            "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"https://h:1\"\ncontrol_plane_ca_file = {}\ntls_cert_file = {}\ntls_key_file = {}\nclient_ca_file = {}\ntoken_file = {}\n",
            q(&pki.ca_file),
            q(&leaf.cert_file),
            q(&leaf.key_file),
            q(&pki.ca_file),
            q(&token),
        ));
        let path = f.path().to_str().unwrap();
        let s = settings(&args(&["--config", path])).unwrap();
        assert!(s.control_plane_ca.is_some() && s.client_ca.is_some());
        assert!(s.tls_identity.is_some());
        assert_eq!(s.token.as_deref(), Some("t0k3n"));

        // A key without its certificate; a client CA without TLS.
        let f = file(&format!(
            "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://h:1\"\ntls_key_file = {}\n",
            q(&leaf.key_file)
        ));
        let e = settings(&args(&["--config", f.path().to_str().unwrap()])).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_CONFIG);
        assert!(
            e.to_string()
                .contains("sidecar.tls_key_file: needs its certificate"),
            "{e}"
        );
        let e = settings(&args(&[
            "--server-name",
            "t",
            "--control-plane",
            "http://h:1",
            "--client-ca-file",
            pki.ca_file.to_str().unwrap(),
            "--",
            "x",
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("--client-ca-file"), "{e}");
        // The older key name still works.
        let f = file(&format!(
            "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"https://h:1\"\ncontrol_plane_ca = {}\n",
            q(&pki.ca_file)
        ));
        let s = settings(&args(&["--config", f.path().to_str().unwrap()])).unwrap();
        assert!(s.control_plane_ca.is_some());
    }

    #[test]
    fn advertise_is_derived_from_the_bound_address() {
        assert_eq!(
            derived_advertise("127.0.0.1:7702".parse().unwrap(), false),
            "http://127.0.0.1:7702"
        );
        assert_eq!(
            derived_advertise("127.0.0.1:7702".parse().unwrap(), true),
            "https://127.0.0.1:7702"
        );
        assert!(derived_advertise("0.0.0.0:7702".parse().unwrap(), false).ends_with(":7702"));
    }
}
