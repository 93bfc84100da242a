//! Stage E (design §4 E): what the sidecar does for its server's
//! resources, resource templates, prompts and completions. It owns their
//! lists in the catalogue, the three `SidecarCalls` requests that reach
//! them, and the size rules of what those requests give the engine; the
//! upstream session ([`crate::upstream`]) speaks the protocol, the gRPC
//! edge ([`crate::api`]) decodes and encodes.
//!
//! - [`catalogue`]: `resources/list`, `resources/templates/list` and
//!   `prompts/list`, every page, entries exactly as sent, kept when a
//!   listing fails (the upstream watcher, [`crate::watch`], re-lists them
//!   after each connection and each coalesced list change);
//! - [`requests`]: `ReadResource`, `GetPrompt` and `Complete`: the
//!   session's connection, one deadline, the protocol's retries, bounded
//!   concurrency (`max_concurrent_reads`), errors as [`crate::error::CallError`];
//! - [`content`]: the size rules, pure functions: text up to 20,000
//!   characters inline, longer text and all binary content as attachments
//!   with generated names (`resource-N.<ext>`, `prompt-N.<ext>`).

pub mod catalogue;
pub mod content;
pub mod requests;

pub use requests::{Request, Requests};

/// Default bound on the `resources/read` and `prompts/get` requests
/// processed at once (`[sidecar] max_concurrent_reads`).
pub const DEFAULT_MAX_CONCURRENT_READS: usize = 4;
