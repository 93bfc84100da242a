//! `replicas/<id>`: a running control-plane replica's liveness key, held
//! under a lease of `control_plane.sidecar_lease_ttl_sec` that the replica
//! renews every third of it. The key is gone within about that TTL once
//! the replica dies (kill -9, a lost machine), is cut off from the store,
//! or stops (it revokes the lease). An approval records the replica whose
//! call waits on it (`InteractionRecord::waiter`), and every replica's
//! interaction sweeper closes the open approvals whose waiter's key is
//! gone (`crate::interactions`).

use serde::{Deserialize, Serialize};

/// Prefix of every replica's liveness key.
pub const PREFIX: &str = "replicas/";

/// Key of replica `id`'s liveness.
pub fn replica_key(id: &str) -> String {
    format!("{PREFIX}{id}")
}

/// `replicas/<id>`: for an operator reading the store; only the key's
/// presence counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRecord {
    /// The replica's id (random, new at every start).
    pub id: String,
    /// Its process id.
    pub pid: u32,
    /// When it started, ms since the epoch.
    pub started_at_ms: i64,
}
