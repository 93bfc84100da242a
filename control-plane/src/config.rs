//! The control plane's TOML configuration (`switchyard up --config`,
//! `switchyard-control-plane --config`, `switchyard check-config`). Every
//! key is documented in `docs/configuration.md`. A bad file is reported
//! with the file, the key and the problem.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use switchyard_common::server_spec::ServerConfig;

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[control_plane]`.
    #[serde(default)]
    pub control_plane: ControlPlaneConfig,
    /// `[store]`.
    #[serde(default)]
    pub store: StoreConfig,
    /// `[limits]`.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// `[audit]`.
    #[serde(default)]
    pub audit: AuditConfig,
    /// `[tls]`: TLS on the gRPC listener, and towards the sidecars.
    #[serde(default)]
    pub tls: TlsConfig,
    /// `[auth]`: who may call which gRPC service.
    #[serde(default)]
    pub auth: AuthConfig,
    /// `[backgroundCalls]`: background calls (stage B).
    #[serde(rename = "backgroundCalls", default)]
    pub background_calls: BackgroundCallsConfig,
    /// `[runtime]`: the async runtime the process runs on.
    #[serde(default)]
    pub runtime: RuntimeConfig,
    /// `[mcp]`: the MCP endpoint (Streamable HTTP, both eras).
    #[serde(default)]
    pub mcp: McpConfig,
    /// `[oauth]`: stage D, OAuth for upstream servers.
    #[serde(default)]
    pub oauth: OAuthConfig,
    /// `[console]`: the admin console at `/ui` (docs/console.md).
    #[serde(default)]
    pub console: ConsoleConfig,
    /// `[up]`: how `switchyard up` runs its sidecars (ignored by
    /// `switchyard-control-plane`).
    #[serde(default)]
    pub up: UpConfig,
    /// `[[servers]]`.
    #[serde(default)]
    pub servers: Vec<ServerConfig>,
}

/// `[control_plane]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlPlaneConfig {
    /// gRPC address for engines, admins and sidecars (default
    /// `127.0.0.1:7700`).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// HTTP address for `/metrics`, `/healthz`, `/readyz` (default
    /// `127.0.0.1:7780`).
    #[serde(default = "default_http_listen")]
    pub http_listen: String,
    /// A second HTTP address that serves only `/metrics`, `/healthz` and
    /// `/readyz` (default: none). Probes and scrapers pointed at it are
    /// answered even while `http_listen`, which browsers reach for the
    /// console and the OAuth callback, is at its connection limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<String>,
    /// Lease TTL of sidecar registrations, seconds (default 10): a sidecar
    /// that disappears is marked down within this time. Also the TTL of
    /// each replica's liveness key (`replicas/<id>`): the approvals a dead
    /// replica's calls waited on are cancelled within this time plus a
    /// sweep.
    #[serde(default = "default_lease_ttl")]
    pub sidecar_lease_ttl_sec: u64,
    /// Default timeout of an engine call when it gives none, seconds
    /// (default 600).
    #[serde(default = "default_call_timeout")]
    pub call_timeout_sec: u64,
    /// At start, remove the configured servers an earlier version of the
    /// file had (default false; `switchyard up` always prunes, as it owns
    /// its file). Keep it false when several replicas may run different
    /// files.
    #[serde(default)]
    pub prune_config_servers: bool,
    /// The most connections the gRPC listener serves at once (default
    /// 4096, 1 to 1000000); beyond it new connections wait to be served
    /// until one closes (`switchyard_common::connections`).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// How long a gRPC connection without a call or stream in flight stays
    /// open, seconds (default 120, 1 to 86400); it is then asked to finish
    /// (HTTP/2 GOAWAY) and closes, and its client opens a new one for its
    /// next call. Reclaims the connections clients forgot.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_sec: u64,
}

impl Default for ControlPlaneConfig {
    fn default() -> Self {
        ControlPlaneConfig {
            listen: default_listen(),
            http_listen: default_http_listen(),
            metrics_listen: None,
            sidecar_lease_ttl_sec: default_lease_ttl(),
            call_timeout_sec: default_call_timeout(),
            prune_config_servers: false,
            max_connections: default_max_connections(),
            idle_timeout_sec: default_idle_timeout(),
        }
    }
}

fn default_idle_timeout() -> u64 {
    switchyard_common::http_serve::IDLE_TIMEOUT.as_secs()
}

/// `[store]`: the embedded store unless `etcd_endpoints` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// Embedded store file (default `.switchyard/store.redb`, relative to
    /// the config file's directory).
    #[serde(default = "default_store_path")]
    pub path: PathBuf,
    /// etcd client URLs; when non-empty, etcd is the store.
    #[serde(default)]
    pub etcd_endpoints: Vec<String>,
    /// Key prefix of everything Switchyard stores (default
    /// `/switchyard/v1/`).
    #[serde(default = "default_root")]
    pub root: String,
    /// A file holding the 32-byte key that encrypts secrets at rest
    /// (stage D, `crate::oauth::keyring`): 32 raw bytes, or their base64
    /// (standard alphabet, padding optional). Checked at start-up.
    #[serde(default)]
    pub token_encryption_key_file: Option<PathBuf>,
    /// Files of older keys (same format) that still open what they sealed,
    /// so the key is rotated without re-authorizing: values sealed under
    /// one are sealed again under the active key when next written.
    #[serde(default)]
    pub token_encryption_previous_key_files: Vec<PathBuf>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            path: default_store_path(),
            etcd_endpoints: Vec::new(),
            root: default_root(),
            token_encryption_key_file: None,
            token_encryption_previous_key_files: Vec::new(),
        }
    }
}

pub use crate::auth::{AuthConfig, MtlsEntry, TokenEntry};
pub use crate::tls::TlsConfig;

/// Checks `[[auth.*]] servers` at `key`: only for role `sidecar`, and no
/// empty or repeated names.
fn validate_bound_servers(
    key: &str,
    role: &str,
    servers: &[String],
) -> Result<(), (String, String)> {
    if servers.is_empty() {
        return Ok(());
    }
    if role != "sidecar" {
        return Err((
            key.to_owned(),
            format!(
                "only a credential of role \"sidecar\" is bound to servers; this one has role {role:?}"
            ),
        ));
    }
    let mut seen = BTreeSet::new();
    for (j, name) in servers.iter().enumerate() {
        if name.trim().is_empty() {
            return Err((format!("{key}[{j}]"), "must not be empty".into()));
        }
        if !switchyard_common::server_spec::valid_server_name(name) {
            return Err((
                format!("{key}[{j}]"),
                format!("{name:?} is not a server name (1 to 48 characters of [A-Za-z0-9_-])"),
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err((format!("{key}[{j}]"), format!("{name:?} is listed twice")));
        }
    }
    Ok(())
}

/// `[limits]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// How long an interaction (form, URL, approval) waits for the user's
    /// answer before it counts as `cancel`, seconds (default 600).
    #[serde(
        rename = "interactionTimeoutSec",
        default = "default_interaction_timeout"
    )]
    pub interaction_timeout_sec: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            interaction_timeout_sec: default_interaction_timeout(),
        }
    }
}

/// `[backgroundCalls]`: tool calls that move to the background (stage B).
/// Keys are camelCase, as in the stage B design.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BackgroundCallsConfig {
    /// Foreground phase of a call, seconds (default 180): a call not done
    /// by then moves to the background. 0 moves every call at once.
    #[serde(default = "default_auto_after")]
    pub auto_after_sec: u64,
    /// Running background calls per server (default 20); at the limit a
    /// call stays in the foreground, at most 10 minutes.
    #[serde(default = "default_max_per_target")]
    pub max_per_target: u32,
    /// Maximum duration of a background call, seconds (default 86400): the
    /// task ttl asked of the server, and the deadline after which it fails.
    #[serde(default = "default_max_duration")]
    pub max_duration_sec: u64,
    /// How long finished background calls are kept (listing, event replay),
    /// seconds (default 604800, 7 days).
    #[serde(default = "default_retention")]
    pub retention_sec: u64,
    /// How often each replica sweeps background calls (orphans, adoption,
    /// deadlines, retention), milliseconds (default 2000).
    #[serde(default = "default_sweep_interval")]
    pub sweep_interval_ms: u64,
}

impl Default for BackgroundCallsConfig {
    fn default() -> Self {
        BackgroundCallsConfig {
            auto_after_sec: default_auto_after(),
            max_per_target: default_max_per_target(),
            max_duration_sec: default_max_duration(),
            retention_sec: default_retention(),
            sweep_interval_ms: default_sweep_interval(),
        }
    }
}

fn default_auto_after() -> u64 {
    180
}
fn default_max_per_target() -> u32 {
    20
}
fn default_max_duration() -> u64 {
    86_400
}
fn default_retention() -> u64 {
    604_800
}
fn default_sweep_interval() -> u64 {
    2000
}

/// `[runtime]`: the tokio runtime of `switchyard-control-plane` and of
/// `switchyard up` (see `docs/configuration.md` and the sizing note in
/// `docs/operations.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Worker threads: 1 (the default) runs everything on one thread (a
    /// current-thread runtime: the least CPU per call); N > 1 a
    /// multi-thread runtime with N workers; 0 a multi-thread runtime with
    /// one worker per CPU core. At most
    /// [`switchyard_common::runtime::MAX_WORKER_THREADS`] (1024).
    #[serde(default = "default_worker_threads")]
    pub worker_threads: u32,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            worker_threads: default_worker_threads(),
        }
    }
}

fn default_worker_threads() -> u32 {
    1
}

/// An `mcp.allowed_origins` entry, checked: an `http` or `https` origin
/// written exactly as a browser sends it in `Origin` (RFC 6454 §6.2, the
/// WHATWG URL standard's ASCII serialization: lowercase, an IDN host in
/// punycode, no default port), since entries are compared with `Origin` as
/// they are. Errors: why it can never match, with the form to write.
fn check_origin(entry: &str) -> Result<(), String> {
    const SHAPE: &str = "scheme://host[:port], no path";
    if entry.contains('*') {
        return Err(format!(
            "{entry:?}: wildcards are not supported: list each origin ({SHAPE})"
        ));
    }
    let shaped = entry.split_once("://").is_some_and(|(scheme, rest)| {
        matches!(scheme, "http" | "https")
            && !rest.is_empty()
            && !rest.contains(['/', '\\', '?', '#', '@'])
    });
    let url = match url::Url::parse(entry) {
        Ok(url) if shaped => url,
        Ok(_) => return Err(format!("{entry:?} is not an origin ({SHAPE})")),
        Err(e) => return Err(format!("{entry:?} is not an origin ({SHAPE}): {e}")),
    };
    let sent = url.origin().ascii_serialization();
    if sent != entry {
        return Err(format!(
            "{entry:?} never matches: browsers send this origin as {sent:?}; write that"
        ));
    }
    Ok(())
}

/// An `mcp.allowed_hosts` entry, checked: a DNS name, an IPv4 address or
/// an IPv6 address in brackets, in the form clients send in `Host` (an
/// IDN in punycode; any case), then an optional `:port` (1 to 65535, no
/// leading zero). Errors: why it can never match.
fn check_host(entry: &str) -> Result<(), String> {
    const SHAPE: &str = "host or host:port";
    if entry.contains('*') {
        return Err(format!(
            "{entry:?}: wildcards are not supported: list each host ({SHAPE})"
        ));
    }
    let not_a_host = || format!("{entry:?} is not a host ({SHAPE}, no scheme or path)");
    if entry.contains(['/', '\\', '?', '#', '@']) {
        return Err(not_a_host());
    }
    let (name, port) = match entry.strip_prefix('[') {
        Some(v6) => {
            let (address, rest) = v6.split_once(']').ok_or_else(not_a_host)?;
            (&entry[..address.len() + 2], rest)
        }
        None => entry
            .find(':')
            .map_or((entry, ""), |at| (&entry[..at], &entry[at..])),
    };
    if !port.is_empty() {
        let digits = port.strip_prefix(':').ok_or_else(not_a_host)?;
        let canonical = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !digits.starts_with('0');
        if !canonical || digits.parse::<u16>().is_err() {
            return Err(format!(
                "{entry:?}: the port must be 1 to 65535, digits only ({SHAPE})"
            ));
        }
    }
    if name.is_empty() {
        return Err(not_a_host());
    }
    let host = url::Host::parse(name).map_err(|e| format!("{}: {e}", not_a_host()))?;
    let sent = host.to_string();
    if !sent.eq_ignore_ascii_case(name) {
        return Err(format!(
            "{entry:?} never matches: clients send this host as {sent:?}; write that"
        ));
    }
    Ok(())
}

/// `[mcp]`: the MCP endpoint, Switchyard as an MCP server for MCP clients
/// (`docs/mcp-endpoint.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// `HOST:PORT` the endpoint listens on (paths `/mcp`,
    /// `/mcp/sessions/ID`, `/mcp/servers/NAME`); absent (the default): no
    /// MCP endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Origins (`scheme://host[:port]`) whose browser requests are served.
    /// A request without `Origin` is always served; one with a loopback
    /// origin (`localhost`, `127.0.0.1`, `[::1]`) only while `listen` is a
    /// loopback address; any other only when listed here (403 otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_origins: Vec<String>,
    /// `Host` header values served (`host` or `host:port`). Empty (the
    /// default): on a loopback `listen`, loopback names only (DNS
    /// rebinding protection); on any other address, every host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// The largest request body, bytes (default 4 MiB; 413 above).
    #[serde(default = "default_mcp_max_body")]
    pub max_body_bytes: u64,
    /// How long a request's body may take to arrive, seconds (default 30,
    /// 1 to 3600; 408 after it): a body that stalls would hold its buffer
    /// (up to `max_body_bytes`, per request and per HTTP/2 stream) for as
    /// long as its client likes.
    #[serde(default = "default_mcp_body_timeout")]
    pub body_timeout_sec: u64,
    /// Serve the endpoint over TLS (HTTP/2 and HTTP/1.1 by ALPN) with the
    /// certificate and key of `[tls]` (`cert_file`, `key_file`, both
    /// required then); no client certificate is asked, callers present
    /// bearer tokens (default false: plain HTTP).
    #[serde(default)]
    pub tls: bool,
    /// The most connections the endpoint serves at once (default 4096,
    /// 1 to 1000000); beyond it new connections wait to be served until
    /// one closes. An HTTP/1.1 client holds one per request in flight.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// A 2025-11-25 session not used for this long ends, seconds (default
    /// 86400).
    #[serde(default = "default_mcp_idle")]
    pub session_idle_timeout_sec: u64,
    /// The most 2025-11-25 sessions one caller (an `[[auth.tokens]]`
    /// entry's name; all anonymous callers together) keeps open (default
    /// 256, 1 to 1000000): a new one beyond it ends the caller's least
    /// recently used, whose client then gets 404 and opens another.
    #[serde(default = "default_mcp_sessions_per_caller")]
    pub max_sessions_per_caller: usize,
    /// The most calls of one caller (as `max_sessions_per_caller`) that
    /// wait, on one replica, for a 2026-07-28 client to answer their
    /// `input_required` (default 64, 1 to 100000): one more ends the
    /// caller's oldest, cancelled upstream; its retry gets an error.
    #[serde(default = "default_mcp_waiting_per_caller")]
    pub max_waiting_calls_per_caller: usize,
    /// How long a `requestState` the endpoint issues to a 2026-07-28
    /// client (with `input_required`) can be used, seconds (default 600):
    /// the time its user has to answer the question it carries.
    #[serde(default = "default_mcp_state_ttl")]
    pub request_state_ttl_sec: u64,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            listen: None,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            max_body_bytes: default_mcp_max_body(),
            body_timeout_sec: default_mcp_body_timeout(),
            tls: false,
            max_connections: default_max_connections(),
            session_idle_timeout_sec: default_mcp_idle(),
            max_sessions_per_caller: default_mcp_sessions_per_caller(),
            max_waiting_calls_per_caller: default_mcp_waiting_per_caller(),
            request_state_ttl_sec: default_mcp_state_ttl(),
        }
    }
}

fn default_max_connections() -> usize {
    switchyard_common::connections::DEFAULT_MAX_CONNECTIONS
}
fn default_mcp_max_body() -> u64 {
    4 * 1024 * 1024
}
fn default_mcp_body_timeout() -> u64 {
    30
}
fn default_mcp_idle() -> u64 {
    86_400
}

fn default_mcp_sessions_per_caller() -> usize {
    256
}

fn default_mcp_waiting_per_caller() -> usize {
    64
}

fn default_mcp_state_ttl() -> u64 {
    600
}

/// `[up]`: the sidecars `switchyard up` starts, one per server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpConfig {
    /// Each sidecar's `grace_secs` (default 10, 1 to 3600): how long its
    /// calls in flight may run on after `up` is told to stop, and each
    /// step of stopping its server. `up` waits up to four times this plus
    /// 3 s for a sidecar before it kills it; a second SIGINT or SIGTERM
    /// hurries every sidecar.
    #[serde(default = "default_up_grace")]
    pub sidecar_grace_secs: u64,
}

impl Default for UpConfig {
    fn default() -> Self {
        UpConfig {
            sidecar_grace_secs: default_up_grace(),
        }
    }
}

fn default_up_grace() -> u64 {
    10
}

/// `[console]`: the admin console served at `/ui` on the HTTP listener
/// (`docs/console.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Serve the console (default true). Without an `[[auth.tokens]]`
    /// entry of role `admin` nobody can log in.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// How long a console login lasts, seconds (default 28800, 8 hours;
    /// 60 to 604800).
    #[serde(default = "default_console_ttl")]
    pub session_ttl_sec: u64,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: true,
            session_ttl_sec: default_console_ttl(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_console_ttl() -> u64 {
    8 * 3600
}

/// `[oauth]`: how the control plane acts as the OAuth client of
/// `auth = "oauth"` servers (stage D, docs/operations.md).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthConfig {
    /// The admin base URL the authorization servers send browsers back to
    /// (`<admin_base_url>/admin/v1/mcp/oauth/callback`), as the admin's
    /// browser reaches this control plane's HTTP listener: e.g.
    /// `https://switchyard.example.com`. Unset: `http://` and
    /// `control_plane.http_listen` (an unspecified address as
    /// `127.0.0.1`), which only a browser on the same machine reaches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_base_url: Option<String>,
    /// Authorization servers may resolve to private addresses (e.g. an
    /// in-cluster identity provider at 10.x). Off (the default): only
    /// public addresses, or loopback ones for a loopback server. Link-local
    /// and cloud metadata addresses are always refused.
    #[serde(default)]
    pub allow_private_addresses: bool,
}

impl OAuthConfig {
    /// The admin base URL (no trailing slash), given the HTTP listener's
    /// address.
    pub fn base_url(&self, http_listen: &str) -> String {
        match &self.admin_base_url {
            Some(u) => u.trim_end_matches('/').to_owned(),
            None => {
                let addr = http_listen
                    .parse::<std::net::SocketAddr>()
                    .map(|mut a| {
                        if a.ip().is_unspecified() {
                            a.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
                        }
                        a.to_string()
                    })
                    .unwrap_or_else(|_| http_listen.to_owned());
                format!("http://{addr}")
            }
        }
    }
}

/// `[audit]`: where audit records (JSON lines) go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// A file the records are appended to, one JSON object per line
    /// (relative to the config file's directory). Default: none, the
    /// records go to the log under the target `switchyard::audit`.
    #[serde(default)]
    pub path: Option<PathBuf>,
}

fn default_interaction_timeout() -> u64 {
    600
}

fn default_listen() -> String {
    "127.0.0.1:7700".into()
}
fn default_http_listen() -> String {
    "127.0.0.1:7780".into()
}
fn default_lease_ttl() -> u64 {
    10
}
fn default_call_timeout() -> u64 {
    600
}
fn default_store_path() -> PathBuf {
    PathBuf::from(".switchyard/store.redb")
}
fn default_root() -> String {
    "/switchyard/v1/".into()
}

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        /// The file.
        file: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown key or a wrong type (the message has the
    /// key's path, `servers[1].url`, then the line and column; see
    /// [`switchyard_common::toml_file`]).
    #[error("{file}: {message}")]
    Parse {
        /// The file.
        file: PathBuf,
        /// toml's message.
        message: String,
    },
    /// A certificate, key, token or key file named by the configuration
    /// cannot be used.
    #[error("{}: {source}", file.display())]
    Credential {
        /// The configuration file.
        file: PathBuf,
        /// Which key, which file, what is wrong.
        #[source]
        source: switchyard_common::tls::CredentialError,
    },
    /// A value is wrong.
    #[error("{file}: {key}: {problem}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Dotted key.
        key: String,
        /// What is wrong.
        problem: String,
    },
}

impl Config {
    /// Reads, parses and validates `path`. Relative paths inside (the store
    /// path, stdio `cwd`, `header_files`) are resolved against the file's
    /// directory.
    pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
        let text = switchyard_common::toml_file::read_config(path).map_err(|source| {
            ConfigFileError::Read {
                file: path.to_owned(),
                source,
            }
        })?;
        let mut config = Config::parse(&text).map_err(|e| match e {
            ConfigFileError::Parse { message, .. } => ConfigFileError::Parse {
                file: path.to_owned(),
                message,
            },
            ConfigFileError::Invalid { key, problem, .. } => ConfigFileError::Invalid {
                file: path.to_owned(),
                key,
                problem,
            },
            other => other,
        })?;
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        if config.store.path.is_relative() {
            config.store.path = base.join(&config.store.path);
        }
        if let Some(p) = &config.audit.path
            && p.is_relative()
        {
            config.audit.path = Some(base.join(p));
        }
        for s in &mut config.servers {
            if let Some(cwd) = &s.cwd
                && cwd.is_relative()
            {
                s.cwd = Some(base.join(cwd));
            }
            for p in s.header_files.values_mut() {
                if p.is_relative() {
                    *p = base.join(&*p);
                }
            }
        }
        let files = [
            &mut config.tls.cert_file,
            &mut config.tls.key_file,
            &mut config.tls.client_ca_file,
            &mut config.tls.sidecar_ca_file,
            &mut config.store.token_encryption_key_file,
        ];
        for p in files
            .into_iter()
            .flatten()
            .chain(&mut config.store.token_encryption_previous_key_files)
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        for t in &mut config.auth.tokens {
            if t.token_file.is_relative() {
                t.token_file = base.join(&t.token_file);
            }
        }
        // The files the keys name must be usable too: a bad certificate,
        // key or token stops `--check` and start-up alike.
        config
            .check_files()
            .map_err(|source| ConfigFileError::Credential {
                file: path.to_owned(),
                source,
            })?;
        Ok(config)
    }

    /// Reads every certificate, key and token file the configuration
    /// names, and checks them (see [`crate::tls`] and [`crate::auth`]).
    pub fn check_files(&self) -> Result<(), switchyard_common::tls::CredentialError> {
        crate::tls::TlsMaterial::load(&self.tls)?;
        crate::auth::Authenticator::load(&self.auth, None)?;
        if let Some(file) = &self.store.token_encryption_key_file {
            load_encryption_key(file)?;
        }
        for file in &self.store.token_encryption_previous_key_files {
            load_key_file("store.token_encryption_previous_key_files", file)?;
        }
        Ok(())
    }

    /// Parses and validates TOML text (no file context in errors).
    pub fn parse(text: &str) -> Result<Config, ConfigFileError> {
        let config: Config =
            switchyard_common::toml_file::from_toml(text).map_err(|e| ConfigFileError::Parse {
                file: PathBuf::new(),
                message: e.to_string(),
            })?;
        config
            .validate()
            .map_err(|(key, problem)| ConfigFileError::Invalid {
                file: PathBuf::new(),
                key,
                problem,
            })?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), (String, String)> {
        self.validate_listeners()?;
        for (i, origin) in self.mcp.allowed_origins.iter().enumerate() {
            check_origin(origin).map_err(|e| (format!("mcp.allowed_origins[{i}]"), e))?;
        }
        for (i, host) in self.mcp.allowed_hosts.iter().enumerate() {
            check_host(host).map_err(|e| (format!("mcp.allowed_hosts[{i}]"), e))?;
        }
        if !(1024..=256 * 1024 * 1024).contains(&self.mcp.max_body_bytes) {
            return Err((
                "mcp.max_body_bytes".into(),
                "must be between 1024 and 268435456 (256 MiB)".into(),
            ));
        }
        if !(1..=3600).contains(&self.mcp.body_timeout_sec) {
            return Err((
                "mcp.body_timeout_sec".into(),
                "must be between 1 and 3600".into(),
            ));
        }
        if !(60..=30 * 24 * 3600).contains(&self.mcp.session_idle_timeout_sec) {
            return Err((
                "mcp.session_idle_timeout_sec".into(),
                "must be between 60 and 2592000 (30 days)".into(),
            ));
        }
        if !(1..=1_000_000).contains(&self.mcp.max_sessions_per_caller) {
            return Err((
                "mcp.max_sessions_per_caller".into(),
                "must be between 1 and 1000000".into(),
            ));
        }
        if !(1..=100_000).contains(&self.mcp.max_waiting_calls_per_caller) {
            return Err((
                "mcp.max_waiting_calls_per_caller".into(),
                "must be between 1 and 100000".into(),
            ));
        }
        if !(1..=3600).contains(&self.up.sidecar_grace_secs) {
            return Err((
                "up.sidecar_grace_secs".into(),
                "must be between 1 and 3600".into(),
            ));
        }
        if !(60..=7 * 86_400).contains(&self.console.session_ttl_sec) {
            return Err((
                "console.session_ttl_sec".into(),
                "must be between 60 and 604800 (a week)".into(),
            ));
        }
        if !(5..=86_400).contains(&self.mcp.request_state_ttl_sec) {
            return Err((
                "mcp.request_state_ttl_sec".into(),
                "must be between 5 and 86400 (a day)".into(),
            ));
        }
        if !(2..=3600).contains(&self.control_plane.sidecar_lease_ttl_sec) {
            return Err((
                "control_plane.sidecar_lease_ttl_sec".into(),
                "must be between 2 and 3600".into(),
            ));
        }
        let max = switchyard_common::server_spec::MAX_TIMEOUT_SEC;
        if self.control_plane.call_timeout_sec == 0 || self.control_plane.call_timeout_sec > max {
            return Err((
                "control_plane.call_timeout_sec".into(),
                format!("must be between 1 and {max} (7 days)"),
            ));
        }
        if self.mcp.tls && (self.tls.cert_file.is_none() || self.tls.key_file.is_none()) {
            return Err((
                "mcp.tls".into(),
                "needs tls.cert_file and tls.key_file: the endpoint presents that certificate"
                    .into(),
            ));
        }
        for (key, max) in [
            (
                "control_plane.max_connections",
                self.control_plane.max_connections,
            ),
            ("mcp.max_connections", self.mcp.max_connections),
        ] {
            if !(1..=1_000_000).contains(&max) {
                return Err((key.into(), "must be between 1 and 1000000".into()));
            }
        }
        if !(1..=86400).contains(&self.control_plane.idle_timeout_sec) {
            return Err((
                "control_plane.idle_timeout_sec".into(),
                "must be between 1 and 86400 (a day)".into(),
            ));
        }
        if !(1..=7 * 24 * 3600).contains(&self.limits.interaction_timeout_sec) {
            return Err((
                "limits.interactionTimeoutSec".into(),
                "must be between 1 and 604800 (7 days)".into(),
            ));
        }
        self.validate_background()?;
        let max = switchyard_common::runtime::MAX_WORKER_THREADS;
        if self.runtime.worker_threads > max {
            return Err((
                "runtime.worker_threads".into(),
                format!(
                    "{} is too many: must be at most {max} (1 = one thread, 0 = one worker per CPU core)",
                    self.runtime.worker_threads
                ),
            ));
        }
        if self
            .audit
            .path
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return Err(("audit.path".into(), "must not be empty".into()));
        }
        if !self.store.root.starts_with('/') || !self.store.root.ends_with('/') {
            return Err((
                "store.root".into(),
                format!("{:?} must start and end with '/'", self.store.root),
            ));
        }
        for (i, e) in self.store.etcd_endpoints.iter().enumerate() {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err((
                    format!("store.etcd_endpoints[{i}]"),
                    format!("{e:?} must be an http:// or https:// URL"),
                ));
            }
        }
        if let Some(u) = &self.oauth.admin_base_url {
            let shown = match url::Url::parse(u) {
                Ok(url)
                    if matches!(url.scheme(), "http" | "https")
                        && url.host_str().is_some()
                        && url.query().is_none()
                        && url.fragment().is_none() =>
                {
                    None
                }
                Ok(_) => Some(format!(
                    "{:?}",
                    switchyard_common::server_spec::redacted_url(u)
                )),
                Err(e) => Some(format!("is not a URL ({e}):")),
            };
            if let Some(shown) = shown {
                return Err((
                    "oauth.admin_base_url".into(),
                    format!("{shown} is not an http(s) base URL (scheme://host[:port][/path])"),
                ));
            }
        }
        self.validate_security()?;
        let mut names = BTreeSet::new();
        for (i, s) in self.servers.iter().enumerate() {
            s.validate(&format!("servers[{i}]"))
                .map_err(|e| (e.key, e.problem))?;
            if !names.insert(s.name.as_str()) {
                return Err((
                    format!("servers[{i}].name"),
                    format!("{:?} is used by an earlier server", s.name),
                ));
            }
        }
        Ok(())
    }
}

impl Config {
    /// The control plane's listeners that are served, in the order they
    /// are bound, as (config key, address as written).
    fn listeners(&self) -> Vec<(&'static str, &str)> {
        let cp = &self.control_plane;
        [
            ("control_plane.listen", Some(&cp.listen)),
            ("control_plane.http_listen", Some(&cp.http_listen)),
            ("control_plane.metrics_listen", cp.metrics_listen.as_ref()),
            ("mcp.listen", self.mcp.listen.as_ref()),
        ]
        .into_iter()
        .filter_map(|(key, addr)| Some((key, addr?.as_str())))
        .collect()
    }

    /// Every listener is an `IP:port` address, and no two of them would
    /// take the same port on the same address (see [`ListenClash`]); the
    /// later key in [`Config::listeners`] is the one named.
    fn validate_listeners(&self) -> Result<(), (String, String)> {
        let mut earlier: Vec<(&str, &str, SocketAddr)> = Vec::new();
        for (key, addr) in self.listeners() {
            let Ok(at) = addr.parse::<SocketAddr>() else {
                return Err((key.into(), format!("{addr:?} is not an IP:port address")));
            };
            for &(other_key, other_addr, other) in &earlier {
                match ListenClash::of(at, other) {
                    None => {}
                    Some(ListenClash::Same) => {
                        return Err((key.into(), format!("{addr} is also {other_key}")));
                    }
                    Some(ListenClash::Overlap { wildcard }) => {
                        let (wildcard, every) = if wildcard.is_ipv6() {
                            ("[::]", "every address, IPv4 included")
                        } else {
                            ("0.0.0.0", "every IPv4 address")
                        };
                        let port = at.port();
                        return Err((
                            key.into(),
                            format!(
                                "{addr} clashes with {other_key} = {other_addr}: {wildcard} takes port {port} on {every}"
                            ),
                        ));
                    }
                }
            }
            earlier.push((key, addr, at));
        }
        Ok(())
    }

    /// Stage D: an `auth = "oauth"` server without `[store]
    /// token_encryption_key_file` (tokens are only kept encrypted), as a
    /// message naming the server; `switchyard up` makes a key for the
    /// embedded store before it checks.
    pub fn oauth_key_problem(&self) -> Option<String> {
        if self.store.token_encryption_key_file.is_some() {
            return None;
        }
        let (i, s) = self
            .servers
            .iter()
            .enumerate()
            .find(|(_, s)| s.auth_kind() == switchyard_common::server_spec::AuthKind::OAuth)?;
        Some(format!(
            "servers[{i}] ({}): auth = \"oauth\" needs [store] token_encryption_key_file (32 random bytes, or their base64): OAuth tokens are only kept encrypted",
            s.name
        ))
    }

    /// The `[backgroundCalls]` ranges.
    fn validate_background(&self) -> Result<(), (String, String)> {
        let b = &self.background_calls;
        let checks: [(&str, u64, u64, u64); 5] = [
            ("backgroundCalls.autoAfterSec", b.auto_after_sec, 0, 86_400),
            (
                "backgroundCalls.maxPerTarget",
                u64::from(b.max_per_target),
                1,
                1_000_000,
            ),
            (
                "backgroundCalls.maxDurationSec",
                b.max_duration_sec,
                1,
                30 * 86_400,
            ),
            (
                "backgroundCalls.retentionSec",
                b.retention_sec,
                0,
                365 * 86_400,
            ),
            (
                "backgroundCalls.sweepIntervalMs",
                b.sweep_interval_ms,
                50,
                3_600_000,
            ),
        ];
        for (key, value, min, max) in checks {
            if !(min..=max).contains(&value) {
                return Err((key.into(), format!("must be between {min} and {max}")));
            }
        }
        if b.auto_after_sec >= b.max_duration_sec {
            return Err((
                "backgroundCalls.autoAfterSec".into(),
                format!(
                    "must be less than backgroundCalls.maxDurationSec ({} s): a call would reach its maximum duration before it could move to the background",
                    b.max_duration_sec
                ),
            ));
        }
        Ok(())
    }

    /// The `[tls]` and `[auth]` rules that need no file.
    fn validate_security(&self) -> Result<(), (String, String)> {
        let tls = &self.tls;
        let err = |key: &str, problem: &str| Err((key.to_owned(), problem.to_owned()));
        match (&tls.cert_file, &tls.key_file) {
            (Some(_), None) => return err("tls.key_file", "is required with tls.cert_file"),
            (None, Some(_)) => return err("tls.cert_file", "is required with tls.key_file"),
            _ => {}
        }
        if tls.client_ca_file.is_some() && tls.cert_file.is_none() {
            return err(
                "tls.client_ca_file",
                "needs tls.cert_file and tls.key_file (client certificates are only verified over TLS)",
            );
        }
        if tls.require_client_cert && tls.client_ca_file.is_none() {
            return err(
                "tls.require_client_cert",
                "needs tls.client_ca_file (the CA client certificates are verified against)",
            );
        }
        let roles = "expected \"engine\", \"admin\" or \"sidecar\"";
        let mut names = BTreeSet::new();
        for (i, t) in self.auth.tokens.iter().enumerate() {
            if t.name.trim().is_empty() {
                return err(&format!("auth.tokens[{i}].name"), "must not be empty");
            }
            if !names.insert(t.name.as_str()) {
                return Err((
                    format!("auth.tokens[{i}].name"),
                    format!("{:?} is used by an earlier entry", t.name),
                ));
            }
            if crate::auth::Role::parse(&t.role).is_none() {
                return Err((
                    format!("auth.tokens[{i}].role"),
                    format!("unknown role {:?}: {roles}", t.role),
                ));
            }
            if t.token_file.as_os_str().is_empty() {
                return err(&format!("auth.tokens[{i}].token_file"), "must not be empty");
            }
            validate_bound_servers(&format!("auth.tokens[{i}].servers"), &t.role, &t.servers)?;
        }
        let mut names = BTreeSet::new();
        for (i, m) in self.auth.mtls.iter().enumerate() {
            if m.name.trim().is_empty() {
                return err(&format!("auth.mtls[{i}].name"), "must not be empty");
            }
            if !names.insert(m.name.as_str()) {
                return Err((
                    format!("auth.mtls[{i}].name"),
                    format!("{:?} is used by an earlier entry", m.name),
                ));
            }
            if crate::auth::Role::parse(&m.role).is_none() {
                return Err((
                    format!("auth.mtls[{i}].role"),
                    format!("unknown role {:?}: {roles}", m.role),
                ));
            }
            validate_bound_servers(&format!("auth.mtls[{i}].servers"), &m.role, &m.servers)?;
        }
        if !self.auth.mtls.is_empty() && tls.client_ca_file.is_none() {
            return err(
                "auth.mtls",
                "needs tls.client_ca_file: client certificates must be verified before their names are trusted",
            );
        }
        if self.auth.required && self.auth.tokens.is_empty() && self.auth.mtls.is_empty() {
            return err(
                "auth.required",
                "is true but there is no [[auth.tokens]] or [[auth.mtls]] entry: nobody could call",
            );
        }
        if self
            .store
            .token_encryption_key_file
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return err("store.token_encryption_key_file", "must not be empty");
        }
        if !self.store.token_encryption_previous_key_files.is_empty()
            && self.store.token_encryption_key_file.is_none()
        {
            return err(
                "store.token_encryption_previous_key_files",
                "needs store.token_encryption_key_file (the active key)",
            );
        }
        Ok(())
    }
}

/// Why two listen addresses cannot both be bound (Linux, the sockets as
/// tokio binds them: `SO_REUSEADDR`, IPv6 sockets dual-stack).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenClash {
    /// The same address and port (an IPv4-mapped IPv6 address is its IPv4
    /// address).
    Same,
    /// The same port, one side on the unspecified address `wildcard`
    /// (`0.0.0.0` takes the port on every IPv4 address, `[::]` on every
    /// IPv6 and IPv4 address).
    Overlap {
        /// `0.0.0.0` or `::`.
        wildcard: IpAddr,
    },
}

impl ListenClash {
    /// How binding `a` and `b` would clash, if it would. Port 0 (a free
    /// port picked at bind time) never clashes.
    pub fn of(a: SocketAddr, b: SocketAddr) -> Option<ListenClash> {
        if a.port() == 0 || a.port() != b.port() {
            return None;
        }
        let (x, y) = (a.ip().to_canonical(), b.ip().to_canonical());
        if x == y {
            return Some(ListenClash::Same);
        }
        // `[::]` first: it is the wider of two unspecified addresses.
        let wildcard = [x, y]
            .into_iter()
            .filter(|ip| ip.is_unspecified())
            .max_by_key(|ip| ip.is_ipv6())?;
        (wildcard.is_ipv6() || x.is_ipv4() == y.is_ipv4())
            .then_some(ListenClash::Overlap { wildcard })
    }
}

/// Reads `[store] token_encryption_key_file`: exactly 32 raw bytes, or
/// the base64 (standard alphabet, padding optional) of 32 bytes with
/// surrounding white space. Errors name the key and the file.
pub fn load_encryption_key(
    file: &Path,
) -> Result<[u8; 32], switchyard_common::tls::CredentialError> {
    load_key_file("store.token_encryption_key_file", file)
}

/// [`load_encryption_key`] for the configuration key `key` (named in
/// errors).
pub fn load_key_file(
    key: &str,
    file: &Path,
) -> Result<[u8; 32], switchyard_common::tls::CredentialError> {
    use base64::Engine as _;
    let key_name = key;
    let bytes =
        std::fs::read(file).map_err(|source| switchyard_common::tls::CredentialError::Read {
            key: key_name.into(),
            file: file.to_owned(),
            source,
        })?;
    if let Ok(raw) = <[u8; 32]>::try_from(bytes.as_slice()) {
        return Ok(raw);
    }
    let text = String::from_utf8_lossy(&bytes);
    let decoded = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(text.trim().trim_end_matches('='))
        .ok();
    match decoded.as_deref().map(<[u8; 32]>::try_from) {
        Some(Ok(key)) => Ok(key),
        _ => Err(switchyard_common::tls::CredentialError::Key {
            key: key_name.into(),
            file: file.to_owned(),
            problem: format!(
                "must hold a 32-byte key: 32 raw bytes, or their base64 (it holds {} bytes{})",
                bytes.len(),
                match &decoded {
                    Some(d) => format!(", base64 of {} bytes", d.len()),
                    None => String::new(),
                }
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previous_key_files_need_an_active_key() {
        let e = Config::parse("[store]\ntoken_encryption_previous_key_files = [\"old.key\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("store.token_encryption_previous_key_files")
                && e.contains("token_encryption_key_file"),
            "{e}"
        );
    }

    /// The problem `Config::parse` reports for `text`, as `key: problem`.
    fn invalid(text: &str) -> String {
        match Config::parse(text).unwrap_err() {
            ConfigFileError::Invalid { key, problem, .. } => format!("{key}: {problem}"),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn listen_clash_rule() {
        let clash = |a: &str, b: &str| {
            let (a, b) = (a.parse().unwrap(), b.parse().unwrap());
            let one = ListenClash::of(a, b);
            assert_eq!(one, ListenClash::of(b, a), "{a} {b}: not symmetric");
            one
        };
        let v4 = Some(ListenClash::Overlap {
            wildcard: "0.0.0.0".parse().unwrap(),
        });
        let v6 = Some(ListenClash::Overlap {
            wildcard: "::".parse().unwrap(),
        });
        // The same address.
        for a in ["127.0.0.1:7780", "0.0.0.0:7780", "[::]:7780", "[::1]:7780"] {
            assert_eq!(clash(a, a), Some(ListenClash::Same), "{a}");
        }
        assert_eq!(
            clash("[::ffff:127.0.0.1]:7780", "127.0.0.1:7780"),
            Some(ListenClash::Same)
        );
        // An unspecified address and any address of its family.
        assert_eq!(clash("0.0.0.0:7780", "127.0.0.1:7780"), v4);
        assert_eq!(clash("0.0.0.0:7780", "10.1.2.3:7780"), v4);
        assert_eq!(clash("[::]:7780", "[::1]:7780"), v6);
        // Dual stack: `[::]` takes the IPv4 addresses too.
        assert_eq!(clash("[::]:7780", "0.0.0.0:7780"), v6);
        assert_eq!(clash("[::]:7780", "127.0.0.1:7780"), v6);
        // ... but `0.0.0.0` takes no IPv6 address, and two specific
        // addresses never clash.
        assert_eq!(clash("0.0.0.0:7780", "[::1]:7780"), None);
        assert_eq!(clash("127.0.0.1:7780", "[::1]:7780"), None);
        assert_eq!(clash("127.0.0.1:7780", "127.0.0.2:7780"), None);
        // Port 0 is a free port each time.
        for a in ["127.0.0.1:0", "0.0.0.0:0", "[::]:0"] {
            assert_eq!(clash(a, a), None, "{a}");
            assert_eq!(clash(a, "[::]:0"), None, "{a}");
        }
        // Distinct ports.
        assert_eq!(clash("127.0.0.1:7780", "127.0.0.1:7781"), None);
        assert_eq!(clash("[::]:7780", "0.0.0.0:7781"), None);
    }

    #[test]
    fn listeners_must_not_clash() {
        let cp = |lines: &str| format!("[control_plane]\n{lines}\n");
        assert_eq!(
            invalid(&cp(
                "http_listen = \"127.0.0.1:7781\"\nmetrics_listen = \"127.0.0.1:7781\""
            )),
            "control_plane.metrics_listen: 127.0.0.1:7781 is also control_plane.http_listen"
        );
        // The defaults: gRPC on 127.0.0.1:7700, HTTP on 127.0.0.1:7780.
        assert_eq!(
            invalid(&cp("http_listen = \"127.0.0.1:7700\"")),
            "control_plane.http_listen: 127.0.0.1:7700 is also control_plane.listen"
        );
        assert_eq!(
            invalid(&cp("metrics_listen = \"127.0.0.1:7700\"")),
            "control_plane.metrics_listen: 127.0.0.1:7700 is also control_plane.listen"
        );
        assert_eq!(
            invalid("[mcp]\nlisten = \"127.0.0.1:7780\"\n"),
            "mcp.listen: 127.0.0.1:7780 is also control_plane.http_listen"
        );
        assert_eq!(
            invalid(&format!(
                "{}[mcp]\nlisten = \"127.0.0.1:7781\"\n",
                cp("metrics_listen = \"127.0.0.1:7781\"")
            )),
            "mcp.listen: 127.0.0.1:7781 is also control_plane.metrics_listen"
        );
        assert_eq!(
            invalid(&cp("metrics_listen = \"0.0.0.0:7780\"")),
            "control_plane.metrics_listen: 0.0.0.0:7780 clashes with control_plane.http_listen = 127.0.0.1:7780: 0.0.0.0 takes port 7780 on every IPv4 address"
        );
        assert_eq!(
            invalid(&cp(
                "listen = \"[::]:7780\"\nhttp_listen = \"127.0.0.1:7780\""
            )),
            "control_plane.http_listen: 127.0.0.1:7780 clashes with control_plane.listen = [::]:7780: [::] takes port 7780 on every address, IPv4 included"
        );
        // Port 0 never clashes; neither do other ports or families.
        for ok in [
            cp(
                "listen = \"127.0.0.1:0\"\nhttp_listen = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"",
            ),
            cp("listen = \"[::]:0\"\nhttp_listen = \"0.0.0.0:0\""),
            cp(
                "listen = \"0.0.0.0:7700\"\nhttp_listen = \"0.0.0.0:7780\"\nmetrics_listen = \"0.0.0.0:7781\"",
            ),
            cp("http_listen = \"[::1]:7700\""),
            format!(
                "{}[mcp]\nlisten = \"127.0.0.1:7701\"\n",
                cp("metrics_listen = \"[::]:7781\"")
            ),
        ] {
            let parsed = Config::parse(&ok);
            assert!(parsed.is_ok(), "{ok}: {}", parsed.unwrap_err());
        }
    }

    #[test]
    fn defaults_and_servers() {
        let c = Config::parse(
            "[[servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\n\n[[servers]]\nname = \"b\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\n",
        )
        .unwrap();
        assert_eq!(c.control_plane.listen, "127.0.0.1:7700");
        assert_eq!(c.servers.len(), 2);
        assert!(c.store.etcd_endpoints.is_empty());
    }

    #[test]
    fn errors_name_key_and_problem() {
        let dup = "[[servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\n[[servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"y\"\n";
        match Config::parse(dup).unwrap_err() {
            ConfigFileError::Invalid { key, problem, .. } => {
                assert_eq!(key, "servers[1].name");
                assert!(problem.contains("earlier"));
            }
            other => panic!("{other}"),
        }
        match Config::parse("[control_plane]\nlisten = \"nowhere\"\n").unwrap_err() {
            ConfigFileError::Invalid { key, .. } => assert_eq!(key, "control_plane.listen"),
            other => panic!("{other}"),
        }
        match Config::parse("[control_plane]\nmetrics_listen = \"7781\"\n").unwrap_err() {
            ConfigFileError::Invalid { key, .. } => assert_eq!(key, "control_plane.metrics_listen"),
            other => panic!("{other}"),
        }
        assert_eq!(
            Config::parse("[control_plane]\nmetrics_listen = \"0.0.0.0:7781\"\n")
                .unwrap()
                .control_plane
                .metrics_listen
                .as_deref(),
            Some("0.0.0.0:7781")
        );
        match Config::parse("[control_plane]\nlistne = \"127.0.0.1:1\"\n").unwrap_err() {
            ConfigFileError::Parse { message, .. } => {
                assert!(message.contains("listne"), "{message}")
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn tls_and_auth_rules_name_the_key() {
        let key_of = |text: &str| match Config::parse(text).unwrap_err() {
            ConfigFileError::Invalid { key, .. } => key,
            other => panic!("{other}"),
        };
        assert_eq!(key_of("[tls]\ncert_file = \"c.pem\"\n"), "tls.key_file");
        assert_eq!(key_of("[tls]\nkey_file = \"k.pem\"\n"), "tls.cert_file");
        assert_eq!(
            key_of("[tls]\nclient_ca_file = \"ca.pem\"\n"),
            "tls.client_ca_file"
        );
        assert_eq!(
            key_of("[tls]\ncert_file = \"c\"\nkey_file = \"k\"\nrequire_client_cert = true\n"),
            "tls.require_client_cert"
        );
        assert_eq!(
            key_of("[[auth.tokens]]\nname = \"a\"\nrole = \"root\"\ntoken_file = \"t\"\n"),
            "auth.tokens[0].role"
        );
        assert_eq!(
            key_of(
                "[[auth.tokens]]\nname = \"a\"\nrole = \"engine\"\ntoken_file = \"t\"\n[[auth.tokens]]\nname = \"a\"\nrole = \"admin\"\ntoken_file = \"u\"\n"
            ),
            "auth.tokens[1].name"
        );
        assert_eq!(
            key_of("[[auth.mtls]]\nname = \"engine-1\"\nrole = \"engine\"\n"),
            "auth.mtls"
        );
        assert_eq!(key_of("[auth]\nrequired = true\n"), "auth.required");
        // Files are only read by `load`.
        let c = Config::parse(
            "[tls]\ncert_file = \"c\"\nkey_file = \"k\"\nclient_ca_file = \"ca\"\n[auth]\nrequired = true\n[[auth.mtls]]\nname = \"ops\"\nrole = \"admin\"\n",
        )
        .unwrap();
        assert!(!c.tls.require_client_cert);
        assert_eq!(c.auth.mtls[0].role, "admin");
    }

    #[test]
    fn credential_files_are_checked_by_load_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "[[auth.tokens]]\nname = \"a\"\nrole = \"engine\"\ntoken_file = \"secrets/engine\"\n",
        )
        .unwrap();
        let e = Config::load(&file).unwrap_err().to_string();
        assert!(
            e.contains("auth.tokens[0].token_file") && e.contains("secrets/engine"),
            "{e}"
        );
        std::fs::create_dir(dir.path().join("secrets")).unwrap();
        std::fs::write(dir.path().join("secrets/engine"), "tok\n").unwrap();
        let c = Config::load(&file).unwrap();
        assert_eq!(
            c.auth.tokens[0].token_file,
            dir.path().join("secrets/engine")
        );

        let key = dir.path().join("k");
        std::fs::write(&key, [7u8; 32]).unwrap();
        assert_eq!(load_encryption_key(&key).unwrap(), [7u8; 32]);
        std::fs::write(&key, "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n").unwrap();
        assert_eq!(load_encryption_key(&key).unwrap(), [7u8; 32]);
        std::fs::write(&key, "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc\n").unwrap();
        assert_eq!(load_encryption_key(&key).unwrap(), [7u8; 32]);
        std::fs::write(&key, "short").unwrap();
        let e = load_encryption_key(&key).unwrap_err().to_string();
        assert!(
            e.contains("store.token_encryption_key_file") && e.contains("32-byte"),
            "{e}"
        );
    }

    #[test]
    fn limits_and_audit() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.limits.interaction_timeout_sec, 600);
        assert_eq!(c.audit.path, None);
        let c = Config::parse(
            "[limits]\ninteractionTimeoutSec = 5\n\n[audit]\npath = \"audit.jsonl\"\n",
        )
        .unwrap();
        assert_eq!(c.limits.interaction_timeout_sec, 5);
        assert_eq!(c.audit.path, Some(PathBuf::from("audit.jsonl")));
        match Config::parse("[limits]\ninteractionTimeoutSec = 0\n").unwrap_err() {
            ConfigFileError::Invalid { key, .. } => assert_eq!(key, "limits.interactionTimeoutSec"),
            other => panic!("{other}"),
        }
        match Config::parse("[limits]\ninteraction_timeout_sec = 5\n").unwrap_err() {
            ConfigFileError::Parse { message, .. } => {
                assert!(message.contains("interaction_timeout_sec"), "{message}")
            }
            other => panic!("{other}"),
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "[audit]\npath = \"logs/audit.jsonl\"\n").unwrap();
        let c = Config::load(&file).unwrap();
        assert_eq!(c.audit.path, Some(dir.path().join("logs/audit.jsonl")));
    }

    #[test]
    fn mcp_endpoint_keys() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.mcp.listen, None);
        assert_eq!(c.mcp.max_body_bytes, 4 * 1024 * 1024);
        assert_eq!(c.mcp.session_idle_timeout_sec, 86_400);
        assert_eq!(c.mcp.max_sessions_per_caller, 256);
        assert_eq!(c.mcp.max_waiting_calls_per_caller, 64);
        assert_eq!(c.mcp.request_state_ttl_sec, 600);
        let c = Config::parse(
            "[mcp]\nlisten = \"127.0.0.1:7701\"\nallowed_origins = [\"https://app.example.com:8443\"]\n",
        )
        .unwrap();
        assert_eq!(c.mcp.listen.as_deref(), Some("127.0.0.1:7701"));
        // Entries written as browsers and clients send them.
        let c = Config::parse(
            "[mcp]\nallowed_origins = [\"https://app.example.com:8443\", \"http://localhost:6274\", \
             \"https://[::1]:8080\", \"https://xn--bcher-kva.example\", \"http://10.0.0.7\"]\n\
             allowed_hosts = [\"GW.example.com\", \"gw.example.com:443\", \"[::1]:7701\", \
             \"127.0.0.1\", \"my_host.internal\", \"[2001:db8::1]\"]\n",
        )
        .unwrap();
        assert_eq!(
            (c.mcp.allowed_origins.len(), c.mcp.allowed_hosts.len()),
            (5, 6)
        );
        for (text, key, says) in [
            ("listen = \"localhost\"", "mcp.listen", "IP:port"),
            (
                "allowed_origins = [\"app.example.com\"]",
                "mcp.allowed_origins[0]",
                "not an origin",
            ),
            (
                "allowed_origins = [\"https://a.example/x\"]",
                "mcp.allowed_origins[0]",
                "no path",
            ),
            (
                "allowed_origins = [\"https://a.example\", \"https://*.example\"]",
                "mcp.allowed_origins[1]",
                "wildcards are not supported",
            ),
            (
                "allowed_origins = [\"https://App.Example:443\"]",
                "mcp.allowed_origins[0]",
                "browsers send this origin as \"https://app.example\"",
            ),
            (
                "allowed_origins = [\"https://bücher.example\"]",
                "mcp.allowed_origins[0]",
                "\"https://xn--bcher-kva.example\"",
            ),
            (
                "allowed_origins = [\"https://user@a.example\"]",
                "mcp.allowed_origins[0]",
                "not an origin",
            ),
            (
                "allowed_origins = [\"null\"]",
                "mcp.allowed_origins[0]",
                "not an origin",
            ),
            (
                "allowed_origins = [\"https://a\\u007f.example\"]",
                "mcp.allowed_origins[0]",
                "\\u{7f}",
            ),
            (
                "allowed_hosts = [\"*.example\"]",
                "mcp.allowed_hosts[0]",
                "wildcards are not supported",
            ),
            (
                "allowed_hosts = [\"https://gw.example\"]",
                "mcp.allowed_hosts[0]",
                "not a host",
            ),
            (
                "allowed_hosts = [\"gw.example:443/mcp\"]",
                "mcp.allowed_hosts[0]",
                "not a host",
            ),
            (
                "allowed_hosts = [\"gw.example:0\"]",
                "mcp.allowed_hosts[0]",
                "port must be 1 to 65535",
            ),
            (
                "allowed_hosts = [\"gw.example:\"]",
                "mcp.allowed_hosts[0]",
                "port must be 1 to 65535",
            ),
            (
                "allowed_hosts = [\"bücher.example\"]",
                "mcp.allowed_hosts[0]",
                "clients send this host as \"xn--bcher-kva.example\"",
            ),
            (
                "allowed_hosts = [\"0x7f.1:7701\"]",
                "mcp.allowed_hosts[0]",
                "\"127.0.0.1\"",
            ),
            (
                "allowed_hosts = [\"[::1\"]",
                "mcp.allowed_hosts[0]",
                "not a host",
            ),
            (
                "allowed_hosts = [\"gw\\u007f.example\"]",
                "mcp.allowed_hosts[0]",
                "not a host",
            ),
            ("max_body_bytes = 10", "mcp.max_body_bytes", "between 1024"),
            ("body_timeout_sec = 0", "mcp.body_timeout_sec", "between 1"),
            ("max_connections = 0", "mcp.max_connections", "between 1"),
            (
                "max_connections = 1000001",
                "mcp.max_connections",
                "between 1",
            ),
            (
                "request_state_ttl_sec = 1",
                "mcp.request_state_ttl_sec",
                "between 5",
            ),
            (
                "session_idle_timeout_sec = 1",
                "mcp.session_idle_timeout_sec",
                "between 60",
            ),
            (
                "max_sessions_per_caller = 0",
                "mcp.max_sessions_per_caller",
                "between 1",
            ),
            (
                "max_waiting_calls_per_caller = 100001",
                "mcp.max_waiting_calls_per_caller",
                "between 1",
            ),
        ] {
            match Config::parse(&format!("[mcp]\n{text}\n")).unwrap_err() {
                ConfigFileError::Invalid {
                    key: k, problem, ..
                } => {
                    assert_eq!(k, key, "{text}");
                    assert!(problem.contains(says), "{text}: {problem}");
                }
                other => panic!("{text}: {other}"),
            }
        }
        match Config::parse("[control_plane]\nmax_connections = 0\n").unwrap_err() {
            ConfigFileError::Invalid { key, .. } => {
                assert_eq!(key, "control_plane.max_connections")
            }
            other => panic!("{other}"),
        }
        match Config::parse("[mcp]\ntls = true\n").unwrap_err() {
            ConfigFileError::Invalid { key, problem, .. } => {
                assert_eq!(key, "mcp.tls");
                assert!(problem.contains("tls.cert_file"), "{problem}");
            }
            other => panic!("{other}"),
        }
        let c =
            Config::parse("[control_plane]\nmax_connections = 10\n[mcp]\nmax_connections = 20\n")
                .unwrap();
        assert_eq!(
            (c.control_plane.max_connections, c.mcp.max_connections),
            (10, 20)
        );
        assert_eq!(Config::default().mcp.max_connections, 4096);
        assert!(matches!(
            Config::parse("[mcp]\nlisten_on = \"x\"\n").unwrap_err(),
            ConfigFileError::Parse { .. }
        ));
    }

    /// A wrong type or an unknown key is named by its path, with the
    /// server's index in `[[servers]]`, then its line and column.
    #[test]
    fn a_type_error_names_the_key_path() {
        let text = "[[servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\n\n[[servers]]\nname = \"b\"\ntransport = \"stdio\"\ncommand = \"x\"\nliveness_interval_sec = -1\n";
        let cases = [
            (
                text.to_owned(),
                "servers[1].liveness_interval_sec: invalid value: integer `-1`, expected u64 (line 10, column 25)",
            ),
            (
                text.replace("-1", "\"abc\""),
                "servers[1].liveness_interval_sec: invalid type: a string, expected u64 (line 10, column 25)",
            ),
            (
                "[runtime]\nworker_threads = \"4\"\n".to_owned(),
                "runtime.worker_threads: invalid type: a string, expected u32 (line 2, column 18)",
            ),
        ];
        for (text, want) in cases {
            match Config::parse(&text).unwrap_err() {
                ConfigFileError::Parse { message, .. } => assert_eq!(message, want),
                other => panic!("{other}"),
            }
        }
        match Config::parse("[mcp]\nlisten_on = \"x\"\n").unwrap_err() {
            ConfigFileError::Parse { message, .. } => assert!(
                message.starts_with("mcp.listen_on: unknown field `listen_on`"),
                "{message}"
            ),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn grpc_idle_timeout() {
        assert_eq!(Config::default().control_plane.idle_timeout_sec, 120);
        for n in [1, 30, 86400] {
            let c = Config::parse(&format!("[control_plane]\nidle_timeout_sec = {n}\n")).unwrap();
            assert_eq!(c.control_plane.idle_timeout_sec, n);
        }
        for n in [0, 86401] {
            match Config::parse(&format!("[control_plane]\nidle_timeout_sec = {n}\n")).unwrap_err()
            {
                ConfigFileError::Invalid { key, problem, .. } => {
                    assert_eq!(key, "control_plane.idle_timeout_sec");
                    assert!(problem.contains("between 1 and 86400"), "{problem}");
                }
                other => panic!("{n}: {other}"),
            }
        }
    }

    #[test]
    fn runtime_worker_threads() {
        assert_eq!(Config::parse("").unwrap().runtime.worker_threads, 1);
        for n in [0, 1, 3, 1024] {
            let c = Config::parse(&format!("[runtime]\nworker_threads = {n}\n")).unwrap();
            assert_eq!(c.runtime.worker_threads, n);
        }
        match Config::parse("[runtime]\nworker_threads = 1025\n").unwrap_err() {
            ConfigFileError::Invalid { key, problem, .. } => {
                assert_eq!(key, "runtime.worker_threads");
                assert!(problem.contains("at most 1024"), "{problem}");
            }
            other => panic!("{other}"),
        }
        for text in [
            "worker_threads = -1",
            "worker_threads = \"4\"",
            "workers = 4",
        ] {
            match Config::parse(&format!("[runtime]\n{text}\n")).unwrap_err() {
                ConfigFileError::Parse { message, .. } => {
                    assert!(
                        message.contains(text.split(' ').next().unwrap()),
                        "{message}"
                    )
                }
                other => panic!("{other}"),
            }
        }
        // `load` names the file.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "[runtime]\nworker_threads = 2000\n").unwrap();
        let e = Config::load(&file).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "{}: runtime.worker_threads: 2000 is too many",
                file.display()
            )),
            "{e}"
        );
    }

    #[test]
    fn background_calls_defaults_and_ranges() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.background_calls, BackgroundCallsConfig::default());
        assert_eq!(
            (
                c.background_calls.auto_after_sec,
                c.background_calls.max_per_target,
                c.background_calls.max_duration_sec,
                c.background_calls.retention_sec,
                c.background_calls.sweep_interval_ms
            ),
            (180, 20, 86_400, 604_800, 2000)
        );
        let c = Config::parse(
            "[backgroundCalls]\nautoAfterSec = 0\nmaxPerTarget = 3\nmaxDurationSec = 60\nretentionSec = 10\nsweepIntervalMs = 100\n",
        )
        .unwrap();
        assert_eq!(c.background_calls.auto_after_sec, 0);
        assert_eq!(c.background_calls.max_per_target, 3);
        for (text, key) in [
            ("maxPerTarget = 0", "backgroundCalls.maxPerTarget"),
            ("maxDurationSec = 0", "backgroundCalls.maxDurationSec"),
            ("sweepIntervalMs = 1", "backgroundCalls.sweepIntervalMs"),
            ("autoAfterSec = 100000", "backgroundCalls.autoAfterSec"),
            (
                "autoAfterSec = 600\nmaxDurationSec = 60",
                "backgroundCalls.autoAfterSec",
            ),
        ] {
            match Config::parse(&format!("[backgroundCalls]\n{text}\n")).unwrap_err() {
                ConfigFileError::Invalid { key: k, .. } => assert_eq!(k, key),
                other => panic!("{other}"),
            }
        }
        match Config::parse("[backgroundCalls]\nauto_after_sec = 5\n").unwrap_err() {
            ConfigFileError::Parse { message, .. } => {
                assert!(message.contains("auto_after_sec"), "{message}")
            }
            other => panic!("{other}"),
        }
    }
}
