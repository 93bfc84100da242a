//! The Switchyard sidecar runs beside one MCP server and owns every
//! connection to it. The crate, from the edge down:
//!
//! - [`run`]: the service `switchyard-sidecar run` starts (flags and file,
//!   wiring, the report stream to the control plane, shutdown);
//! - [`api`]: the `SidecarCalls` gRPC edge: it decodes a call (or a stage
//!   E request), runs the pipeline (or [`resources::Requests`]) and
//!   encodes the answer; the one place a [`error::CallError`] becomes a
//!   gRPC status;
//! - [`call`]: the call pipeline, read top to bottom: lease -> plan ->
//!   upstream -> results -> respond;
//! - [`error`]: the call path's error ([`error::CallError`]) and its one
//!   deadline ([`error::Deadline`]);
//! - [`pool`]: per-session upstream connections (the lease);
//! - [`upstream`]: the MCP client session (stdio and Streamable HTTP, both
//!   protocol eras, bounded framing, restarts, the retries the protocol
//!   mandates);
//! - one module per stage of the design (§4):
//!   - [`tools`] (A): the tools' catalogue, result processing and
//!     `outputSchema` validation, the `tool.result` audit record, the
//!     retry of read-only and idempotent calls;
//!   - [`background`] (B): background calls and MCP tasks;
//!   - [`interactions`] (C): elicitation, roots, attribution, and the
//!     client side of multi round-trip requests;
//!   - [`resources`] (E): resources, resource templates, prompts and
//!     completions: their lists, the `ReadResource`, `GetPrompt` and
//!     `Complete` requests and the size rules of what they return;
//!   - [`oauth`] (D): the access token the control plane pushes for an
//!     `auth = "oauth"` server, kept in memory, and the refusals reported
//!     back; the bearer on every request and the one retry after a 401
//!     are the upstream session's ([`upstream::auth`]);
//! - [`watch`]: the upstream watcher, one per server, above the stages
//!   that have lists (A and E): it keeps the session connected, re-lists
//!   after each connection and each coalesced list change, and publishes
//!   the catalogue snapshot;
//! - [`control`]: the client of the control plane's `SidecarRegistry`;
//! - [`guard`]: who may call `SidecarCalls` (the control plane, with the
//!   token this sidecar registered, or mTLS);
//! - [`http_endpoints`]: `/metrics`, `/healthz`, `/readyz`;
//! - [`probe`]: the operator's check of an upstream server.
//!
//! What it shares with the control plane (the server spec, TLS, logging,
//! the audit sink, the runtime) is in `switchyard-common`; the MCP wire
//! vocabulary (JSON-RPC, eras, `_meta` keys, headers, stdio framing) in
//! `switchyard-mcp`.

pub mod api;
pub mod background;
pub mod call;
pub mod control;
pub mod error;
pub mod guard;
pub mod http_endpoints;
pub mod interactions;
pub mod oauth;
pub mod pool;
pub mod probe;
pub mod resources;
pub mod run;
pub mod tools;
pub mod upstream;
pub mod watch;
