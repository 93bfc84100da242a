//! The control plane's TOML configuration (`switchyard up --config`,
//! `switchyard-control-plane --config`, `switchyard check-config`). Every
//! key is documented in `docs/configuration.md`. A bad file is reported
//! with the file, the key and the problem.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use switchyard_sidecar::config::ServerConfig;

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
    /// Lease TTL of sidecar registrations, seconds (default 10): a sidecar
    /// that disappears is marked down within this time.
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
}

impl Default for ControlPlaneConfig {
    fn default() -> Self {
        ControlPlaneConfig {
            listen: default_listen(),
            http_listen: default_http_listen(),
            sidecar_lease_ttl_sec: default_lease_ttl(),
            call_timeout_sec: default_call_timeout(),
            prune_config_servers: false,
        }
    }
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
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            path: default_store_path(),
            etcd_endpoints: Vec::new(),
            root: default_root(),
        }
    }
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
    /// line, column and key).
    #[error("{file}: {message}")]
    Parse {
        /// The file.
        file: PathBuf,
        /// toml's message.
        message: String,
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
    /// path, stdio `cwd`) are resolved against the file's directory.
    pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
            file: path.to_owned(),
            source,
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
        }
        Ok(config)
    }

    /// Parses and validates TOML text (no file context in errors).
    pub fn parse(text: &str) -> Result<Config, ConfigFileError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigFileError::Parse {
            file: PathBuf::new(),
            message: e.to_string().trim_end().replace('\n', " "),
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
        for (key, addr) in [
            ("control_plane.listen", &self.control_plane.listen),
            ("control_plane.http_listen", &self.control_plane.http_listen),
        ] {
            if addr.parse::<std::net::SocketAddr>().is_err() {
                return Err((key.into(), format!("{addr:?} is not an IP:port address")));
            }
        }
        if !(2..=3600).contains(&self.control_plane.sidecar_lease_ttl_sec) {
            return Err((
                "control_plane.sidecar_lease_ttl_sec".into(),
                "must be between 2 and 3600".into(),
            ));
        }
        let max = switchyard_sidecar::config::MAX_TIMEOUT_SEC;
        if self.control_plane.call_timeout_sec == 0 || self.control_plane.call_timeout_sec > max {
            return Err((
                "control_plane.call_timeout_sec".into(),
                format!("must be between 1 and {max} (7 days)"),
            ));
        }
        if !(1..=7 * 24 * 3600).contains(&self.limits.interaction_timeout_sec) {
            return Err((
                "limits.interactionTimeoutSec".into(),
                "must be between 1 and 604800 (7 days)".into(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
        match Config::parse("[control_plane]\nlistne = \"127.0.0.1:1\"\n").unwrap_err() {
            ConfigFileError::Parse { message, .. } => {
                assert!(message.contains("listne"), "{message}")
            }
            other => panic!("{other}"),
        }
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
}
