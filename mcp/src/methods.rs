//! Method names (2025-11-25 and 2026-07-28 schemas). One constant each;
//! nothing else spells them.

/// Server-to-client request (2025-11-25), or an MRTR input request
/// (2026-07-28): ask the user (client/elicitation).
pub const ELICIT: &str = "elicitation/create";
/// Server-to-client request: the client's roots (client/roots).
pub const LIST_ROOTS: &str = "roots/list";
/// Server-to-client request: sampling, never declared (design §4).
pub const SAMPLING: &str = "sampling/createMessage";
/// A URL elicitation finished out of band.
pub const ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";
