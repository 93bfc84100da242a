//! What the MCP endpoint keeps for the multi round-trip requests it serves
//! to 2026-07-28 clients (`crate::mcp::mrtr`): the key ring that seals
//! every `requestState` (shared by all replicas, rotated), the spent
//! states (one-time use), and the outcome of a call whose first answer was
//! `input_required` (so that the retry, on any replica, finds it).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Key of the `requestState` key ring.
pub const KEYS_KEY: &str = "mcp-state-keys";
/// Key prefix of spent `requestState`s.
pub const SPENT_PREFIX: &str = "mcp-spent/";
/// Key prefix of the outcomes of detached calls.
pub const OUTCOME_PREFIX: &str = "mcp-outcomes/";

/// Key of the spent state whose nonce is `digest` (random hex, from the
/// sealed payload).
pub fn spent_key(digest: &str) -> String {
    format!("{SPENT_PREFIX}{digest}")
}

/// Key of the outcome of run `run`.
pub fn outcome_key(run: &str) -> String {
    format!("{OUTCOME_PREFIX}{run}")
}

/// `mcp-state-keys`: the HMAC-SHA256 keys `requestState`s are sealed with
/// (rmcp's `RequestStateCodec`, `rs2` format). The newest seals; the older
/// ones still open states sealed before a rotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateKeyRing {
    /// The key id that seals (one of `keys`).
    pub active: String,
    /// Every key that opens, newest first.
    pub keys: Vec<StateKey>,
}

/// One key of the ring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateKey {
    /// Its id (random hex), carried in every state it seals.
    pub kid: String,
    /// The key, 32 random bytes, base64url without padding. A secret: it is
    /// never logged nor shown.
    pub key: String,
    /// When it was made (ms since the epoch).
    pub created_at_ms: i64,
}

/// `mcp-outcomes/<run>`: how a detached call ended, for the retry that
/// resumes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutcomeRecord {
    /// The run the call was made with.
    pub run: String,
    /// The result (for the client, before its era's decoration), if it
    /// succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The JSON-RPC error (`code`, `message`, `data`), if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}
