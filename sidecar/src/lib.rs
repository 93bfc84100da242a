//! The Switchyard sidecar runs beside one MCP server and owns every
//! connection to it. This crate holds the upstream MCP client session
//! ([`upstream`]: stdio and Streamable HTTP, both protocol eras, bounded
//! framing, restarts), the operator's `probe` check ([`probe`]), and the
//! process-wide TLS set-up ([`tls`]). Later stages (catalogue, results,
//! tasks, elicitation, the report stream to the control plane) build on the
//! upstream session.

pub mod probe;
pub mod tls;
pub mod upstream;
