//! `run`'s settings: the `--config` file and the flags merged (flags win),
//! every value checked, into [`Settings`]; a failure is a [`RunError`] that
//! names the file (or "command line"), the key or flag, and the problem.
//! The errors of running the service are [`RunError`]s too, each with its
//! exit status.

use super::args::{ConfigFile, RunArgs, SidecarSection};
use crate::upstream::UpstreamError;
use std::collections::BTreeMap;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::time::Duration;
use switchyard_common::server_spec::{ConfigError, ServerConfig, TransportKind, redacted_url};

/// Exit status for a bad configuration (sysexits `EX_USAGE`).
pub const EXIT_CONFIG: u8 = 64;
/// Exit status for an internal failure (sysexits `EX_SOFTWARE`).
pub const EXIT_INTERNAL: u8 = 70;

/// Default drain period on shutdown, seconds.
pub const DEFAULT_GRACE_SECS: u64 = 10;
/// Default gRPC listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:0";
/// Default metrics/health listen address.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:0";
/// Default `worker_threads`: one thread (a current-thread runtime).
pub const DEFAULT_WORKER_THREADS: u32 = 1;
/// Largest `max_concurrent_reads`.
pub const MAX_CONCURRENT_READS: u32 = 1024;

/// The validated settings of `run`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The upstream server.
    pub server: ServerConfig,
    /// The server's `header_files`, read.
    pub secret_headers: switchyard_common::server_spec::SecretHeaders,
    /// The control plane's URL.
    pub control_plane: String,
    /// CA certificate(s) for an `https://` control plane.
    pub control_plane_ca: Option<Vec<u8>>,
    /// What the sidecar presents to the control plane: its certificate and
    /// key (also served on `SidecarCalls`) and its bearer token. `Debug`
    /// shows neither the key nor the token.
    pub credentials: switchyard_common::tls::ClientCredentials,
    /// CA that client certificates on `SidecarCalls` must chain to.
    pub client_ca: Option<Vec<u8>>,
    /// The token `SidecarCalls` requires (`calls_token_file`, else random).
    pub calls_token: crate::guard::CallToken,
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
    /// Stage E requests (`resources/read`, `prompts/get`) processed at once.
    pub max_concurrent_reads: usize,
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

pub(super) fn config_error(origin: &str, key: &str, problem: impl Into<String>) -> RunError {
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
            let text = switchyard_common::toml_file::read_config(path)
                .map_err(|e| config_error(&origin, "(file)", format!("cannot read it: {e}")))?;
            let parsed: ConfigFile =
                switchyard_common::toml_file::from_toml(&text).map_err(|e| {
                    let key = e.key.clone().unwrap_or_else(|| "(file)".into());
                    let problem = match e.position {
                        Some((line, column)) => {
                            format!("{} (line {line}, column {column})", e.message)
                        }
                        None => e.message,
                    };
                    config_error(&origin, &key, problem)
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
    // Secret header values, read once: a missing or bad file stops the
    // start, naming the key and the file (never the content).
    let secret_headers = switchyard_common::server_spec::SecretHeaders::load(&server, "server")
        .map_err(|e| config_error(&origin, &e.key, format!("{}: {}", e.file, e.problem)))?;
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
    let calls_token = match path_setting(
        &args.calls_token_file,
        &file.calls_token_file,
        "--calls-token-file",
        "sidecar.calls_token_file",
    ) {
        Some((path, o, key)) => {
            let token = switchyard_common::tls::load_token(&key, &path)
                .map_err(|e| credential_error(&o, e))?;
            if token.len() < 16 {
                return Err(config_error(
                    &o,
                    &key,
                    format!(
                        "{}: the token has {} characters; at least 16 are needed",
                        path.display(),
                        token.len()
                    ),
                ));
            }
            crate::guard::CallToken::from_text(token)
        }
        None => crate::guard::CallToken::generate(),
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
        None => crate::interactions::DEFAULT_INTERACTION_TIMEOUT,
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
        .unwrap_or(crate::watch::DEFAULT_LIST_CHANGED_WINDOW);
    let task_poll_min = match args
        .task_poll_min_ms
        .map(|v| (v, "command line", "--task-poll-min-ms"))
        .or(file
            .task_poll_min_ms
            .map(|v| (v, origin.as_str(), "sidecar.task_poll_min_ms")))
    {
        Some((ms, origin, key))
            if ms == 0 || ms > crate::background::POLL_MAX.as_millis() as u64 =>
        {
            return Err(config_error(
                origin,
                key,
                format!(
                    "must be between 1 and {} (5 minutes)",
                    crate::background::POLL_MAX.as_millis()
                ),
            ));
        }
        Some((ms, _, _)) => Duration::from_millis(ms),
        None => crate::background::DEFAULT_POLL_MIN,
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
        None => crate::background::DEFAULT_FAILURE_LIMIT,
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

    let max_concurrent_reads = match args
        .max_concurrent_reads
        .map(|v| (v, "command line", "--max-concurrent-reads"))
        .or(file
            .max_concurrent_reads
            .map(|v| (v, origin.as_str(), "sidecar.max_concurrent_reads")))
    {
        Some((n, origin, key)) if n == 0 || n > MAX_CONCURRENT_READS => {
            return Err(config_error(
                origin,
                key,
                format!(
                    "{n} is out of range: must be between 1 and {MAX_CONCURRENT_READS} (each read in flight may hold about three times the server's max_message_bytes)"
                ),
            ));
        }
        Some((n, _, _)) => n as usize,
        None => crate::resources::DEFAULT_MAX_CONCURRENT_READS,
    };

    Ok(Settings {
        server,
        secret_headers,
        control_plane,
        control_plane_ca,
        credentials: switchyard_common::tls::ClientCredentials {
            identity: tls_identity,
            token,
        },
        client_ca,
        calls_token,
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
        max_concurrent_reads,
    })
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
    // A malformed value is not repeated: it may be a secret with its
    // separator missing.
    for (i, h) in args.headers.iter().enumerate() {
        let (k, v) = h.split_once(':').ok_or_else(|| {
            err(
                "--header",
                format!("#{} is not of the form 'Name: value' (no ':' in it)", i + 1),
            )
        })?;
        headers.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    let mut env = BTreeMap::new();
    for (i, e) in args.env.iter().enumerate() {
        let (k, v) = e.split_once('=').ok_or_else(|| {
            err(
                "--env",
                format!("#{} is not of the form NAME=value (no '=' in it)", i + 1),
            )
        })?;
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

pub(super) fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn check_url(url: &str) -> Result<(), String> {
    match reqwest::Url::parse(url) {
        Ok(u) if (u.scheme() == "http" || u.scheme() == "https") && u.host().is_some() => Ok(()),
        Ok(u) => Err(format!(
            "{:?} must be an http:// or https:// URL with a host (scheme {:?})",
            redacted_url(url),
            u.scheme()
        )),
        // Not repeated: text that is not a URL may be a secret typed in
        // the wrong place.
        Err(e) => Err(format!("is not a URL ({e})")),
    }
}

fn check_addr(addr: &str) -> Result<(), String> {
    match addr.to_socket_addrs() {
        Ok(addrs) if addrs.len() > 0 => Ok(()),
        Ok(_) => Err(format!("{addr:?} resolves to no address")),
        Err(e) => Err(format!("{addr:?} is not a HOST:PORT address: {e}")),
    }
}

pub(super) fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
