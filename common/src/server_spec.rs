//! The server spec shared by `switchyard up` (the `[[servers]]` entries of
//! its TOML file), `switchyard-sidecar run --config`, the admin API
//! (`ServerSpec`) and the store, with the limits both binaries check. Keys
//! are documented in `docs/configuration.md`. Pure data and validation: the
//! sidecar turns a spec into its upstream session's configuration
//! (`switchyard_sidecar::upstream::UpstreamConfig::from_spec`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use switchyard_mcp::era::EraPreference;

/// How a server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// A child process on stdio.
    Stdio,
    /// Streamable HTTP.
    Http,
}

/// One upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Unique name, `[A-Za-z0-9_-]`, 1 to 48 characters.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: TransportKind,
    /// stdio: the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: extra environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// stdio: working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// http: the MCP endpoint URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// http: static headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// `auto` (default), `2026-07-28` or `2025-11-25`.
    #[serde(default = "default_era")]
    pub era: String,
    /// Per-request timeout towards the server, seconds (default 600).
    #[serde(default = "default_request_timeout_sec")]
    pub request_timeout_sec: u64,
    /// Largest message accepted from the server, bytes (default 16 MiB).
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
}

/// Longest timeout accepted anywhere in the configuration: 7 days.
pub const MAX_TIMEOUT_SEC: u64 = 7 * 24 * 3600;
/// Default largest message accepted from a server: 16 MiB, so a resource
/// of about 11 MiB (a PDF of several MB, base64-encoded in a JSON-RPC
/// answer: 4/3 of its size plus the envelope) passes.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

fn default_era() -> String {
    "auto".into()
}
fn default_request_timeout_sec() -> u64 {
    600
}
fn default_max_message_bytes() -> usize {
    DEFAULT_MAX_MESSAGE_BYTES
}

/// A configuration problem: which key, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct ConfigError {
    /// Dotted key path, e.g. `servers[2].url`.
    pub key: String,
    /// What is wrong.
    pub problem: String,
}

/// Whether `name` is a valid server name: 1 to 48 characters of
/// `[A-Za-z0-9_-]`.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 48
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ServerConfig {
    /// Checks the entry; `at` is its key path for messages (e.g.
    /// `servers[0]`). Errors name the key and the problem.
    pub fn validate(&self, at: &str) -> Result<(), ConfigError> {
        let err = |key: &str, problem: String| ConfigError {
            key: format!("{at}.{key}"),
            problem,
        };
        if !valid_server_name(&self.name) {
            return Err(err(
                "name",
                format!(
                    "{:?} must be 1 to 48 characters of [A-Za-z0-9_-]",
                    self.name
                ),
            ));
        }
        if let Err(e) = self.era.parse::<EraPreference>() {
            return Err(err("era", e));
        }
        if self.request_timeout_sec == 0 || self.request_timeout_sec > MAX_TIMEOUT_SEC {
            return Err(err(
                "request_timeout_sec",
                format!("must be between 1 and {MAX_TIMEOUT_SEC} (7 days)"),
            ));
        }
        for k in self.env.keys() {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(err(
                    "env",
                    format!("{k:?} is not a valid environment variable name"),
                ));
            }
        }
        if self.max_message_bytes < 1024 {
            return Err(err("max_message_bytes", "must be at least 1024".into()));
        }
        match self.transport {
            TransportKind::Stdio => {
                if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    return Err(err(
                        "command",
                        "is required for transport = \"stdio\"".into(),
                    ));
                }
                if self.url.is_some() {
                    return Err(err("url", "is only for transport = \"http\"".into()));
                }
                if !self.headers.is_empty() {
                    return Err(err("headers", "are only for transport = \"http\"".into()));
                }
            }
            TransportKind::Http => {
                let Some(url) = &self.url else {
                    return Err(err("url", "is required for transport = \"http\"".into()));
                };
                match url::Url::parse(url) {
                    Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {}
                    Ok(u) => {
                        return Err(err(
                            "url",
                            format!("scheme {:?} is not http or https", u.scheme()),
                        ));
                    }
                    Err(e) => return Err(err("url", format!("{url:?} is not a URL: {e}"))),
                }
                if self.command.is_some() || !self.args.is_empty() {
                    return Err(err("command", "is only for transport = \"stdio\"".into()));
                }
                for (k, v) in &self.headers {
                    if http::HeaderName::from_bytes(k.as_bytes()).is_err() {
                        return Err(err("headers", format!("{k:?} is not a valid header name")));
                    }
                    if http::HeaderValue::from_str(v).is_err() {
                        return Err(err(
                            "headers",
                            format!("the value of {k:?} is not a valid header value"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> ServerConfig {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn stdio_and_http_entries_validate() {
        let s = parse(
            "name = \"orders\"\ntransport = \"stdio\"\ncommand = \"srv\"\nargs = [\"--x\"]\n",
        );
        s.validate("servers[0]").unwrap();
        assert_eq!(s.era, "auto");
        let h = parse(
            "name = \"web\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n[headers]\nAuthorization = \"Bearer t\"\n",
        );
        h.validate("servers[1]").unwrap();
        assert_eq!(h.transport, TransportKind::Http);
    }

    #[test]
    fn errors_name_the_key() {
        let bad = parse("name = \"a b\"\ntransport = \"stdio\"\ncommand = \"x\"\n");
        assert_eq!(
            bad.validate("servers[3]").unwrap_err().key,
            "servers[3].name"
        );
        let bad = parse("name = \"w\"\ntransport = \"http\"\n");
        let e = bad.validate("servers[0]").unwrap_err();
        assert_eq!(e.key, "servers[0].url");
        assert!(e.problem.contains("required"));
        let bad = parse("name = \"w\"\ntransport = \"stdio\"\ncommand = \"x\"\nera = \"2024\"\n");
        assert_eq!(bad.validate("s").unwrap_err().key, "s.era");
        assert!(toml::from_str::<ServerConfig>("name = \"w\"\ntransport = \"ftp\"\n").is_err());
        assert!(
            toml::from_str::<ServerConfig>("name = \"w\"\ntransport = \"stdio\"\ncomand = \"x\"\n")
                .is_err()
        );
    }
}
