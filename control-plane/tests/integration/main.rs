//! The control plane's integration tests: one test binary (`integration`),
//! one module per feature, against real processes and peers on loopback.
//! A test's name is its module and function, e.g.
//! `e2e_auth::bad_auth_settings_exit_64_naming_the_key`; run one module
//! with `cargo test -p switchyard-control-plane --test integration e2e_auth::`.
//!
//! - `common`: `switchyard up` ([`common::Gateway`]), processes started one
//!   by one, the CLI, polling with deadlines; `common::background`:
//!   in-process replicas on a config with one fake server. The fake
//!   sidecar that plays that server's sidecar is test support's
//!   (`switchyard_test_support::fake_sidecar`).
//! - The modules: a feature's name (`background`, `interactions`,
//!   `store_contract`, ...), `e2e_*` for whole gateways and processes,
//!   `*_bad_input` for what a feature does with bad input.
//!
//! All tests share this process. Nothing they start is process-wide: each
//! test has its own ports, temp dirs, stores and replicas; tests that run a
//! whole gateway take turns ([`common::HEAVY`]).

mod common;

mod background;
mod background_bad_input;
mod cli_connection;
mod console;
mod e2e_auth;
mod e2e_background;
mod e2e_call_stream;
mod e2e_cancel;
mod e2e_cli;
mod e2e_config;
mod e2e_elicitation;
mod e2e_engines;
mod e2e_grpc_idle;
mod e2e_hints_push;
mod e2e_list_changed;
mod e2e_mcp_endpoint;
mod e2e_oauth;
mod e2e_policy;
mod e2e_replicas;
mod e2e_resources;
mod e2e_runtime_servers;
mod e2e_server_auth;
mod e2e_sessions;
mod e2e_shutdown;
mod e2e_sidecar_crash;
mod e2e_tls;
mod e2e_up;
mod interactions;
mod lossless;
mod metrics_catalogue;
mod oauth_flow;
mod oauth_tokens;
mod reliability;
mod store_contract;
