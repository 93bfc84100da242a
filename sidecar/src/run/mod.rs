//! `switchyard-sidecar run`: the sidecar as a service. It serves
//! `SidecarCalls` over gRPC ([`crate::api`]), registers with the control
//! plane and keeps the report stream open ([`report`]), serves
//! `/metrics`, `/healthz` and `/readyz` ([`crate::http_endpoints`]), and on
//! SIGINT/SIGTERM turns not ready, reports `draining` to the control plane
//! (which then routes new calls elsewhere), keeps accepting calls for
//! [`DRAIN_NOTICE`] while that report propagates, then stops accepting,
//! drains in-flight calls and stops the upstream server.
//!
//! Configuration comes from a TOML file (`--config`: a `[server]` table,
//! the shared [`switchyard_common::server_spec::ServerConfig`], and a
//! `[sidecar]` table, [`SidecarSection`]) or from flags; sidecar flags
//! override the file. Keys and defaults are documented in
//! `docs/sidecar.md`.
//!
//! - [`args`]: the flags and the file's tables (shapes only);
//! - [`settings`](mod@settings): both merged and checked into [`Settings`],
//!   errors ([`RunError`]) naming the file or flag and the key;
//! - [`serve`]: the wiring, the listeners and the ready line;
//! - [`report`]: registration and the report stream to the control plane;
//! - [`drain`]: the signals, the `draining` announcement ([`drain::Drain`])
//!   and the shutdown sequence.

pub mod args;
pub mod drain;
pub mod report;
pub mod serve;
pub mod settings;

#[cfg(test)]
mod tests;

pub use args::{RunArgs, SidecarSection};
pub use drain::DRAIN_NOTICE;
pub use serve::{run, run_with};
pub use settings::{
    DEFAULT_GRACE_SECS, DEFAULT_HTTP_LISTEN, DEFAULT_LISTEN, DEFAULT_WORKER_THREADS, EXIT_CONFIG,
    EXIT_INTERNAL, RunError, Settings, settings,
};
