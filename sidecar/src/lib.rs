//! The Switchyard sidecar runs beside one MCP server and owns every
//! connection to it. This crate holds the upstream MCP client session
//! ([`upstream`]: stdio and Streamable HTTP, both protocol eras, bounded
//! framing, restarts), the operator's `probe` check ([`probe`]), and the
//! service `run` starts
//! ([`run`]): the `SidecarCalls` gRPC server ([`service`]), the report
//! stream to the control plane ([`control`]) and the metrics and health
//! endpoints ([`http_endpoints`]). Interactions with the user
//! (elicitation, roots, multi round-trip requests) are in [`interactions`],
//! per-session connections in [`pool`], result processing and output schema validation in [`tools::results`], the
//! catalogue's validators and list-change coalescing in [`tools::catalogue`],
//! background calls and MCP tasks (stage B) in [`tasks`]. What it shares
//! with the control plane (the server spec, TLS, logging, the audit sink,
//! the runtime) is in `switchyard-common`; the MCP wire vocabulary
//! (JSON-RPC, eras, `_meta` keys, headers, stdio framing) in
//! `switchyard-mcp`.

pub mod background;
pub mod control;
pub mod error;
pub mod http_endpoints;
pub mod interactions;
pub mod pool;
pub mod probe;
pub mod run;
pub mod service;
pub mod tools;
pub mod upstream;
