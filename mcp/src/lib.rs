//! The MCP wire vocabulary, mirroring the specification
//! (modelcontextprotocol/modelcontextprotocol, `docs/specification/<version>/`
//! and `schema/<version>/schema.ts`) the way rmcp's `model/` does: what both
//! sides of Switchyard speak, with no session or transport logic of its own.
//!
//! - [`jsonrpc`]: JSON-RPC 2.0 messages as `serde_json::Value` with typed
//!   views, and the error codes MCP defines.
//! - [`era`]: the two protocol eras (2025-11-25 and 2026-07-28), their
//!   versions, and the era a server is configured to speak.
//! - [`meta`]: `_meta` keys, extension ids and `resultType` values;
//!   [`methods`]: method names.
//! - [`logging`]: log levels (RFC 5424 severities) and log messages.
//! - [`headers`]: request metadata mirrored into HTTP headers (2026-07-28).
//! - [`framing`]: newline-delimited stdio framing with bounded memory.
//! - [`sse`]: Server-Sent Events, decoded with bounded memory and encoded.
//!
//! The sidecar's upstream client uses it today; the control plane's MCP
//! endpoint will use the same definitions.

pub mod era;
pub mod framing;
pub mod headers;
pub mod jsonrpc;
pub mod logging;
pub mod meta;
pub mod methods;
pub mod sse;
