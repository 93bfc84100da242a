//! The sidecar's integration tests: one test binary (`integration`), one
//! module per feature, against real MCP servers (the reference server,
//! server-everything, the Python SDK and the stub servers in
//! `tests/peers/servers/`). A test's name is its module and function, e.g.
//! `tasks::a_task_done_in_the_foreground_is_a_normal_result_2025`; run one module with
//! `cargo test -p switchyard-sidecar --test integration tasks::`.
//!
//! - `common`: the call service in process on a real server
//!   ([`common::harness`]); `common::tasks`: the sidecar's tasks machinery
//!   in process. The fake control plane is test support's
//!   (`switchyard_test_support::fake_control_plane`).
//! - The modules: `upstream_*` for the MCP client session, a feature's name
//!   for the rest (`tasks`, `elicitation`, `sidecar_service`, ...),
//!   `*_bad_input` for what a feature does with bad input, `*_cli` for the
//!   binary's subcommands.
//!
//! All tests share this process. Each starts its own servers, ports and
//! registries; a test that measures the process itself (its memory) runs
//! alone in a process of its own
//! ([`switchyard_test_support::alone_in_a_process`]); the tests that load
//! the machine most and the ones that time restarts take turns
//! ([`common::HEAVY`]).

mod common;

mod call_stream;
mod catalogue;
mod check_config_cli;
mod elicitation;
mod lossless;
mod oauth;
mod probe_cli;
mod resources;
mod results;
mod sidecar_service;
mod subscriptions;
mod tasks;
mod tasks_bad_input;
mod upstream_http;
mod upstream_logging;
mod upstream_peers;
mod upstream_stdio_framing;
mod upstream_stdio_lifecycle;
mod worker_threads;
