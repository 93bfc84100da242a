//! This replica's liveness, for the approvals its calls wait on: the key
//! `replicas/<id>` ([`crate::model::replica`]) under a lease of the
//! configured TTL (`control_plane.sidecar_lease_ttl_sec`), renewed every
//! third of it. An approval records its waiter's id
//! (`InteractionRecord::waiter`); [`Interactions::sweep`], on every
//! replica, cancels the open approvals whose waiter's key is gone (reason
//! `call_ended`): the call that waited died with its replica, so an answer
//! would reach nobody. A replica that is slow or frozen for less than the
//! TTL keeps its key, and its cards; one that lost its lease (frozen or
//! cut off from the store for longer) registers again with a new lease.

use super::*;
use crate::model::replica::{PREFIX, ReplicaRecord, replica_key};
use std::collections::HashSet;

impl Interactions {
    /// This replica's id (random, new at every start): the `waiter` of the
    /// approvals its calls raise.
    pub fn replica_id(&self) -> &str {
        &self.replica
    }

    /// Writes this replica's liveness key under a new lease of `ttl`;
    /// returns the lease. Errors: the store.
    pub async fn register_replica(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        let lease = self.store.grant_lease(ttl).await?;
        let record = ReplicaRecord {
            id: self.replica.to_string(),
            pid: std::process::id(),
            started_at_ms: self.started_at_ms,
        };
        let value = serde_json::to_vec(&record).expect("records serialise");
        self.store
            .put(&replica_key(&self.replica), value, Some(lease))
            .await?;
        Ok(lease)
    }

    /// Renews `lease` (from [`Interactions::register_replica`]) every
    /// third of `ttl` until the replica stops, then revokes it so the other
    /// replicas close at once what this one's calls waited on. A lease that
    /// expired meanwhile is replaced by a new one (registering again); a
    /// renewal the store refused is tried again at the next tick.
    pub fn spawn_liveness(&self, ttl: Duration, lease: LeaseId) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut lease = lease;
            let mut tick = tokio::time::interval((ttl / 3).max(Duration::from_millis(100)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = this.shutdown.cancelled() => {
                        if let Err(e) = this.store.revoke(lease).await {
                            tracing::debug!(replica = %this.replica, error = %e, "revoking this replica's liveness lease failed; it expires on its own");
                        }
                        return;
                    }
                }
                match this.store.keep_alive(lease).await {
                    Ok(()) => {}
                    Err(StoreError::LeaseNotFound { .. }) => {
                        tracing::warn!(replica = %this.replica, ttl_s = ttl.as_secs(), "this replica's liveness lease expired (frozen or cut off from the store for longer than the TTL): the other replicas may have cancelled the approvals its calls waited on; registering again");
                        match this.register_replica(ttl).await {
                            Ok(new) => lease = new,
                            Err(e) => {
                                tracing::warn!(replica = %this.replica, error = %e, "registering this replica's liveness again failed; trying again");
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(replica = %this.replica, error = %e, "renewing this replica's liveness lease failed; trying again");
                    }
                }
            }
        })
    }

    /// The ids of the replicas whose liveness key exists, read from the
    /// store. Errors: the store.
    pub(super) async fn live_replicas(&self) -> Result<HashSet<String>, StoreError> {
        let listing = self.store.list(PREFIX).await?;
        Ok(listing
            .kvs
            .iter()
            .filter_map(|kv| kv.key.strip_prefix(PREFIX).map(str::to_owned))
            .collect())
    }
}
