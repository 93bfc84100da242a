//! What both Switchyard binaries share, and nothing either one owns alone:
//!
//! - [`server_spec`]: the server spec (`[[servers]]`, the admin API's
//!   `ServerSpec`, the store's server records) and the limits both check;
//! - [`tls`]: rustls set-up, PEM and token loading, the bearer-token
//!   interceptor;
//! - [`logging`] and [`audit`]: log initialisation and the one audit sink
//!   (JSON lines to a file or the log);
//! - [`runtime`]: the tokio runtime built from `worker_threads`;
//! - [`args`]: command-line parsing with the binaries' exit statuses;
//! - [`toml_file`]: reading a TOML configuration, with errors that name
//!   the key; [`serde_errors`]: serde's messages without the values they
//!   quote;
//! - [`http_serve`]: serving an axum router with header and keep-alive
//!   timeouts;
//! - [`connections`]: the cap on each listener's open connections;
//! - [`time`] and [`ids`]: wall-clock milliseconds and RFC 3339 text; ids
//!   and their checks;
//! - [`error_chain`]: an error and its causes on one line.

pub mod args;
pub mod audit;
pub mod connections;
pub mod http_serve;
pub mod ids;
pub mod logging;
pub mod runtime;
pub mod serde_errors;
pub mod server_spec;
pub mod time;
pub mod tls;
pub mod toml_file;

/// An error and its causes, `a: b: c`, without repeating a cause that the
/// outer message already contains (reqwest's "error sending request" hides
/// "connection refused" in its sources).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}
