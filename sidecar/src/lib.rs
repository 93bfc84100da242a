//! The Switchyard sidecar runs beside one MCP server and owns every
//! connection to it. This crate holds the upstream MCP client session
//! ([`upstream`]: stdio and Streamable HTTP, both protocol eras, bounded
//! framing, restarts), the operator's `probe` check ([`probe`]), and the
//! process-wide TLS set-up ([`tls`]), and the service `run` starts
//! ([`run`]): the `SidecarCalls` gRPC server ([`service`]), the report
//! stream to the control plane ([`control`]) and the metrics and health
//! endpoints ([`http_endpoints`]). Interactions with the user
//! (elicitation, roots, multi round-trip requests) are in [`elicitation`],
//! per-session connections in [`pool`], audit records in [`audit`], the
//! logging set-up shared with the control plane in [`logging`],
//! result processing and output schema validation in [`results`], the
//! catalogue's validators and list-change coalescing in [`catalogue`],
//! background calls and MCP tasks (stage B) in [`tasks`].

pub mod audit;
pub mod catalogue;
pub mod config;
pub mod control;
pub mod elicitation;
pub mod http_endpoints;
pub mod logging;
pub mod pool;
pub mod probe;
pub mod results;
pub mod run;
pub mod service;
pub mod tasks;
pub mod tls;
pub mod upstream;
