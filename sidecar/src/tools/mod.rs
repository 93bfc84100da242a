//! Stage A (design §4 A): what the sidecar does for every tool call and
//! tool list, whatever the call's mode.
//!
//! - [`catalogue`]: the current tool list, its compiled `outputSchema`
//!   validators and the effective hints the control plane pushes (kept
//!   current by the upstream watcher, [`crate::watch`], which re-lists the
//!   tools after each connection and each coalesced list change);
//! - [`results`]: result processing (model text, attachments, structured
//!   content), pure functions, and `outputSchema` validation (each schema
//!   compiled on its first use);
//! - [`respond`]: the [`respond::Responder`] that turns a raw result into
//!   the call's response and its `tool.result` audit record;
//! - [`retry`]: the one retry of a read-only or idempotent call after a
//!   network error ([`retry::RetrySafe`]), on every path a call takes.

pub mod catalogue;
pub mod respond;
pub mod results;
pub mod retry;
