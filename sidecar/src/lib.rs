//! The Switchyard sidecar runs beside one MCP server and owns every
//! connection to it. This crate holds the upstream MCP client session
//! ([`upstream`]: stdio and Streamable HTTP, both protocol eras, bounded
//! framing, restarts), the operator's `probe` check ([`probe`]), and the
//! process-wide TLS set-up ([`tls`]), and the service `run` starts
//! ([`run`]): the `SidecarCalls` gRPC server ([`service`]), the report
//! stream to the control plane ([`control`]) and the metrics and health
//! endpoints ([`http_endpoints`]). Later stages (results, tasks,
//! elicitation) build on the upstream session.

pub mod config;
pub mod control;
pub mod http_endpoints;
pub mod probe;
pub mod run;
pub mod service;
pub mod tls;
pub mod upstream;
