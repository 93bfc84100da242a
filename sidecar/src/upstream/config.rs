//! Configuration of one upstream session.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use switchyard_common::server_spec::{Secrets, ServerConfig, TransportKind};
pub use switchyard_mcp::era::EraPreference;

/// Default per-request timeout: 10 minutes.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Default limit on one message: 16 MiB.
pub use switchyard_common::server_spec::DEFAULT_MAX_MESSAGE_BYTES;
/// Default time to wait for an answer to the `server/discover` probe before
/// treating the server as legacy (basic/transports/stdio, "Backward
/// Compatibility": "does not respond within a reasonable timeout").
pub const DEFAULT_DISCOVER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default limit on multi round-trip retries of one request (2026-07-28
/// `input_required` results).
pub const DEFAULT_MAX_INPUT_ROUNDS: u32 = 8;
/// Default silence of an HTTP server after which its connection is probed
/// ([`UpstreamConfig::liveness_interval`]).
pub const DEFAULT_LIVENESS_INTERVAL: Duration =
    Duration::from_secs(switchyard_common::server_spec::DEFAULT_LIVENESS_INTERVAL_SEC);

/// How to reach the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportConfig {
    /// A child process speaking newline-delimited JSON-RPC on stdio.
    Stdio(StdioConfig),
    /// A Streamable HTTP endpoint.
    Http(HttpConfig),
}

/// A stdio server's process. `Debug` shows secret-looking environment
/// values and arguments as `[redacted]`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct StdioConfig {
    /// Program to run (looked up on `PATH`).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables (added to the sidecar's own).
    pub env: BTreeMap<String, String>,
    /// Working directory; the sidecar's own when `None`.
    pub cwd: Option<PathBuf>,
}

impl std::fmt::Debug for StdioConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioConfig")
            .field("command", &self.command)
            .field(
                "args",
                &switchyard_common::server_spec::redacted_args(&self.args),
            )
            .field("env", &switchyard_common::server_spec::redacted(&self.env))
            .field("cwd", &self.cwd)
            .finish()
    }
}

impl StdioConfig {
    /// The command line, for messages: arguments that hold secrets
    /// (`--api-key K`, `postgresql://user:P@host/db`) are shown
    /// `[redacted]` ([`switchyard_common::server_spec::redacted_args`]).
    pub fn command_line(&self) -> String {
        let args = switchyard_common::server_spec::redacted_args(&self.args);
        std::iter::once(self.command.as_str())
            .chain(args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A Streamable HTTP server's endpoint. `Debug` shows header names only,
/// and the URL without its secrets.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct HttpConfig {
    /// The MCP endpoint URL, e.g. `http://127.0.0.1:3001/mcp`.
    pub url: String,
    /// Static headers sent with every request (e.g. `Authorization`),
    /// the spec's `headers` and its `header_files` read.
    pub headers: Vec<(String, String)>,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("HttpConfig")
            .field(
                "url",
                &switchyard_common::server_spec::redacted_url(&self.url),
            )
            .field("headers", &names)
            .finish()
    }
}

/// Restart policy for a stdio server that exited: exponential backoff from
/// `initial_backoff`, doubling per consecutive failure, capped at
/// `max_backoff`. A server that stayed up for `reset_after` starts again
/// from `initial_backoff`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartPolicy {
    /// First delay (default 250 ms).
    pub initial_backoff: Duration,
    /// Cap (default 30 s).
    pub max_backoff: Duration,
    /// Uptime after which the failure count resets (default 60 s).
    pub reset_after: Duration,
    /// Restart in the background right after an exit (default true); when
    /// false, the next request restarts it.
    pub eager: bool,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(30),
            reset_after: Duration::from_secs(60),
            eager: true,
        }
    }
}

impl RestartPolicy {
    /// The delay before attempt number `failures + 1` (0 failures: none).
    pub fn delay(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let factor = 1u32.checked_shl(failures - 1).unwrap_or(u32::MAX);
        self.initial_backoff
            .checked_mul(factor)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }
}

/// Everything one upstream session needs.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// The server's name in Switchyard (logs, errors, metrics).
    pub name: String,
    /// Transport.
    pub transport: TransportConfig,
    /// Era preference.
    pub era: EraPreference,
    /// Per-request timeout (default 10 min).
    pub request_timeout: Duration,
    /// `server/discover` probe timeout (default 10 s).
    pub discover_timeout: Duration,
    /// Largest message accepted from the server (default 16 MiB).
    pub max_message_bytes: usize,
    /// Streamable HTTP: after this long without an answer from the server
    /// (no HTTP response, no event on its GET stream), the session sends a
    /// liveness probe, `ping` (2025-11-25 basic/utilities/ping) or
    /// `server/discover` (2026-07-28, which removed `ping`), so a server
    /// that went away while nothing was sent is reported `down` and
    /// reconnected to, as a request would have found it. `None`: never
    /// (default 15 s; the server's `liveness_interval_sec`, 0 for never;
    /// see `super::watch_exit`). Only the shared session probes: a
    /// session's own connection ([`super::Upstream::for_session`]) never
    /// does.
    pub liveness_interval: Option<Duration>,
    /// Restart policy (stdio).
    pub restart: RestartPolicy,
    /// `clientInfo` we present: name.
    pub client_name: String,
    /// `clientInfo` we present: version.
    pub client_version: String,
    /// How often one `tools/call`, `prompts/get` or `resources/read` is
    /// retried for an `input_required` result before it fails (default 8).
    pub max_input_rounds: u32,
    /// `auth = "oauth"` (HTTP only): where the control plane's access
    /// tokens are kept ([`crate::oauth::Tokens`]). Every HTTP request
    /// carries the current one (`super::auth`); without one to send the
    /// server is not contacted. `None` (the default, and what
    /// [`UpstreamConfig::from_spec`] sets: the holder belongs to the report
    /// stream that fills it): no token.
    pub oauth: Option<crate::oauth::Tokens>,
    /// Whether the session handles interactions (and so declares
    /// elicitation and roots); set by [`super::Upstream::with_interactions`].
    pub(crate) interactive: bool,
}

impl UpstreamConfig {
    /// The secret values this server is given (secret-looking environment
    /// variables and headers, the secret parts of its arguments and URL;
    /// [`switchyard_common::server_spec::secret_values`]): what is
    /// scrubbed from what the server writes (stderr, stdout noise) and
    /// from the errors the sidecar reports, before they are logged or
    /// reported (`lastError`), and from what it answers before that is
    /// passed on (the longer ones: [`Secrets::scrub_json`]). An `auth =
    /// "oauth"` server's access tokens are added as they come
    /// ([`crate::oauth::Tokens::secrets`]).
    pub fn secret_values(&self) -> Secrets {
        use switchyard_common::server_spec::secret_values;
        let secrets = Secrets::new(match &self.transport {
            TransportConfig::Stdio(s) => secret_values(
                s.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                &s.args,
                None,
            ),
            TransportConfig::Http(h) => secret_values(
                h.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                &[],
                Some(&h.url),
            ),
        });
        match &self.oauth {
            Some(tokens) => secrets.with_live(tokens.secrets()),
            None => secrets,
        }
    }

    /// The session configuration of a server spec (call
    /// [`ServerConfig::validate`] first: an unparsable era reads as `auto`).
    pub fn from_spec(spec: &ServerConfig) -> Self {
        let transport = match spec.transport {
            TransportKind::Stdio => TransportConfig::Stdio(StdioConfig {
                command: spec.command.clone().unwrap_or_default(),
                args: spec.args.clone(),
                env: spec.env.clone(),
                cwd: spec.cwd.clone(),
            }),
            TransportKind::Http => TransportConfig::Http(HttpConfig {
                url: spec.url.clone().unwrap_or_default(),
                headers: spec
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            }),
        };
        let mut c = UpstreamConfig::new(spec.name.clone(), transport);
        c.era = spec.era.parse().unwrap_or_default();
        c.request_timeout = Duration::from_secs(spec.request_timeout_sec);
        c.max_message_bytes = spec.max_message_bytes;
        c.liveness_interval = (spec.liveness_interval_sec > 0)
            .then(|| Duration::from_secs(spec.liveness_interval_sec));
        c
    }

    /// A configuration with every default.
    pub fn new(name: impl Into<String>, transport: TransportConfig) -> Self {
        UpstreamConfig {
            name: name.into(),
            transport,
            era: EraPreference::Auto,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            discover_timeout: DEFAULT_DISCOVER_TIMEOUT,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            liveness_interval: Some(DEFAULT_LIVENESS_INTERVAL),
            restart: RestartPolicy::default(),
            client_name: "switchyard".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            max_input_rounds: DEFAULT_MAX_INPUT_ROUNDS,
            oauth: None,
            interactive: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RestartPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
            ..RestartPolicy::default()
        };
        let delays: Vec<u128> = (0..8).map(|n| p.delay(n).as_millis()).collect();
        assert_eq!(delays, vec![0, 100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(p.delay(200), Duration::from_millis(1000));
    }

    #[test]
    fn era_names_parse() {
        assert_eq!("2025-11-25".parse(), Ok(EraPreference::Legacy));
        assert_eq!("auto".parse(), Ok(EraPreference::Auto));
        // Refused without repeating the text (a secret typed in the wrong
        // place would be), naming the choices.
        let e = "ghp_2024".parse::<EraPreference>().unwrap_err();
        assert!(!e.contains("ghp_2024") && e.contains("2025-11-25"), "{e}");
    }
}
