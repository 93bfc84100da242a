//! The sweeper, on every replica (compare-and-swap makes concurrent sweeps
//! safe): adopts or fails the calls of sidecars that are gone, fails calls
//! past their deadline or orphaned for [`super::ORPHAN_LIMIT_MS`], deletes
//! finished records after retention, and ends the interaction cards of
//! finished task calls. Also the best-effort `CancelBackgroundCall` to the
//! owning sidecar.

use super::*;

impl Background {
    /// One sweep (see the module doc). Errors are logged; the next sweep
    /// retries.
    pub async fn sweep(&self, cp: &ControlPlane) {
        let now = now_ms();
        let snap = cp.state.snapshot();
        let retention_ms = self.config.retention_sec.saturating_mul(1000) as i64;
        let mut adopted: HashMap<(String, String), (LocalStream, Vec<pb::BackgroundCall>)> =
            HashMap::new();
        let index = cp.state.background_index();
        {
            let mut orphans = self.orphaned_since.lock().unwrap();
            orphans.retain(|id, _| {
                index
                    .iter()
                    .any(|(i, e)| i == id && !is_terminal(&e.status))
            });
        }
        for (id, e) in index {
            if cp.shutdown.is_cancelled() {
                return;
            }
            if is_terminal(&e.status) {
                if e.finished_at_ms > 0
                    && now.saturating_sub(e.finished_at_ms) > retention_ms
                    && let Err(err) = self.delete_finished(&id).await
                {
                    tracing::warn!(%id, error = %err, "deleting a finished background call failed");
                }
                continue;
            }
            if e.deadline_ms > 0 && now > e.deadline_ms.saturating_add(DEADLINE_GRACE_MS) {
                let msg = format!(
                    "the background call ran past its maximum duration (backgroundCalls.maxDurationSec = {} s)",
                    self.config.max_duration_sec
                );
                match self.finish(&id, "failed", &msg).await {
                    Ok(Some((rec, true))) => {
                        tracing::warn!(%id, server = %rec.server, "background call failed: past its deadline");
                        tell_sidecar_cancel(cp, &rec).await;
                    }
                    Ok(_) => {}
                    Err(err) => {
                        tracing::warn!(%id, error = %err, "failing a background call failed")
                    }
                }
                continue;
            }
            // The read model first (cheap); the store confirms before
            // anything is done.
            if in_snapshot(&snap, &e.server, &e.sidecar_id) {
                self.orphaned_since.lock().unwrap().remove(&id);
                continue;
            }
            if e.mode == "wait" {
                if self.sidecar_live(&snap, &e.server, &e.sidecar_id).await {
                    continue;
                }
                let msg = "the sidecar holding the call restarted or went away";
                match self.fail_if_owned(&id, &e.sidecar_id, msg).await {
                    Ok(Some((rec, true))) => {
                        tracing::warn!(%id, server = %rec.server, sidecar = %e.sidecar_id, "background call failed: {msg}")
                    }
                    Ok(_) => {}
                    Err(err) => {
                        tracing::warn!(%id, error = %err, "failing a background call failed")
                    }
                }
                continue;
            }
            // task mode: adopted by a live sidecar whose stream is here.
            if let Some(stream) = self.pick_stream(&snap, &e.server) {
                match self.adopt(&snap, &id, &stream.sidecar_id).await {
                    Ok(Some(rec)) => {
                        adopted
                            .entry((e.server.clone(), stream.sidecar_id.clone()))
                            .or_insert_with(|| (stream.clone(), Vec::new()))
                            .1
                            .push(rec.to_pb());
                    }
                    Ok(None) => {}
                    Err(err) => {
                        tracing::warn!(%id, error = %err, "adopting a background call failed")
                    }
                }
                continue;
            }
            let any_live = snap.sidecars.get(&e.server).is_some_and(|m| !m.is_empty());
            if any_live {
                // Another replica holds the live sidecars' streams.
                self.orphaned_since.lock().unwrap().remove(&id);
                continue;
            }
            let since = *self
                .orphaned_since
                .lock()
                .unwrap()
                .entry(id.clone())
                .or_insert(now);
            if now - since > ORPHAN_LIMIT_MS
                && !self.sidecar_live(&snap, &e.server, &e.sidecar_id).await
            {
                let msg = format!(
                    "no live sidecar of {} for {} minutes to poll the task",
                    e.server,
                    ORPHAN_LIMIT_MS / 60_000
                );
                match self.fail_if_owned(&id, &e.sidecar_id, &msg).await {
                    Ok(Some((_, true))) => {
                        tracing::warn!(%id, server = %e.server, "background call failed: {msg}")
                    }
                    Ok(_) => {}
                    Err(err) => {
                        tracing::warn!(%id, error = %err, "failing a background call failed")
                    }
                }
            }
        }
        for ((server, sidecar_id), (stream, calls)) in adopted {
            send_adopt(&stream.tx, &server, &sidecar_id, calls).await;
        }
    }

    /// Deletes a finished record (retention): only while it is still
    /// terminal at the revision read.
    async fn delete_finished(&self, id: &str) -> Result<(), BackgroundError> {
        let key = background_key(id);
        let Some(kv) = self.store.get(&key).await? else {
            return Ok(());
        };
        if parse(&kv).is_some_and(|r| !r.is_terminal()) {
            return Ok(());
        }
        self.store
            .txn(
                Txn::new()
                    .when([Compare::mod_revision(&key, kv.mod_revision)])
                    .and_then([Op::delete(&key)]),
            )
            .await?;
        tracing::debug!(%id, "finished background call deleted (retention)");
        Ok(())
    }
}

/// Whether an open interaction belongs to the finished background call
/// `rec`: of its session and server, and tied to its task by
/// `_meta["io.modelcontextprotocol/related-task"].taskId` (the server puts
/// it on 2025-11-25 task requests; the sidecar on the cards of 2026-07-28
/// `inputRequests`).
fn card_of(rec: &BackgroundRecord, card: &crate::interactions::InteractionRecord) -> bool {
    if rec.task_id.is_empty() || card.session_id != rec.session_id || card.server != rec.server {
        return false;
    }
    card.params
        .as_ref()
        .and_then(|p| serde_json::from_str::<Value>(p.get()).ok())
        .is_some_and(|p| {
            p.pointer("/_meta/io.modelcontextprotocol~1related-task/taskId")
                .and_then(Value::as_str)
                == Some(rec.task_id.as_str())
        })
}

/// Ends the open interactions (cards) of a background call that finished
/// or was cancelled, as cancelled with reason `call_ended`: nobody is
/// waiting for the answer any more, and a late answer is refused. Best
/// effort: failures are logged.
pub async fn end_cards(cp: &ControlPlane, rec: &BackgroundRecord) {
    if rec.session_id.is_empty() {
        return;
    }
    let cards = match cp.interactions.list(&rec.session_id, false).await {
        Ok(cards) => cards,
        Err(e) => {
            tracing::debug!(id = %rec.id, error = %e, "cannot list the session's interactions");
            return;
        }
    };
    for card in cards.iter().filter(|c| card_of(rec, c)) {
        match cp
            .interactions
            .end(
                &rec.session_id,
                &card.id,
                crate::interactions::Outcome::Cancel,
                crate::interactions::reason::CALL_ENDED,
            )
            .await
        {
            Ok(_) => {
                tracing::info!(id = %rec.id, interaction = %card.id, "the background call ended; its open interaction is cancelled")
            }
            Err(e) => {
                tracing::warn!(id = %rec.id, interaction = %card.id, error = %e, "cannot end the interaction of a finished background call")
            }
        }
    }
}

/// Best effort: `SidecarCalls.CancelBackgroundCall` at the record's
/// owner, if it is live (bounded to 5 s; failures are logged).
pub(super) async fn tell_sidecar_cancel(cp: &ControlPlane, rec: &BackgroundRecord) {
    let snap = cp.state.snapshot();
    let Some(sidecar) = snap
        .sidecars
        .get(&rec.server)
        .and_then(|m| m.get(&rec.sidecar_id))
    else {
        tracing::debug!(id = %rec.id, sidecar = %rec.sidecar_id, "the background call's sidecar is gone; nothing to cancel there");
        return;
    };
    let mut client = match cp.router.sidecar_client(sidecar) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(id = %rec.id, error = %e, "cannot reach the sidecar to cancel a background call");
            return;
        }
    };
    let mut req = tonic::Request::new(pb::SidecarCancelBackgroundRequest {
        id: rec.id.clone(),
        task_id: rec.task_id.clone(),
    });
    req.set_timeout(Duration::from_secs(5));
    match client.cancel_background_call(req).await {
        Ok(r) => {
            tracing::info!(id = %rec.id, sidecar = %rec.sidecar_id, found = r.into_inner().found, "sidecar told to cancel the background call")
        }
        Err(e) => {
            tracing::warn!(id = %rec.id, sidecar = %rec.sidecar_id, error = %e, "the sidecar did not take the background call's cancellation")
        }
    }
}

/// Runs [`Background::sweep`] every `backgroundCalls.sweepIntervalMs`
/// until the replica shuts down.
pub fn spawn_sweeper(cp: Arc<ControlPlane>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let every = Duration::from_millis(cp.background.config().sweep_interval_ms.max(50));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => cp.background.sweep(&cp).await,
                _ = cp.shutdown.cancelled() => return,
            }
        }
    })
}
