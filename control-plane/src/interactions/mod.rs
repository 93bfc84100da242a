//! Interactions: what a server (a form or URL elicitation) or a policy (an
//! approval before a `confirm` tool runs) needs from a session's user.
//!
//! Every interaction is a record in the store, `interactions/<session>/<id>`
//! ([`InteractionRecord`], JSON), so it survives the restart of any replica
//! and reaches the engine whichever replica it is subscribed to: the record
//! appears in every replica's read model through the store watch
//! ([`crate::state`]), and a session's event streams emit
//! `interaction.required` when one appears open and `interaction.resolved`
//! when it is resolved. Nothing depends on sticky routing.
//!
//! - **Create.** A sidecar calls `Interact` with an id of its choosing; the
//!   record is created if absent, so a sidecar whose replica went away asks
//!   again, at another replica, with the same id and waits on the same
//!   record. [`Interactions::request_approval`] does the same for approvals.
//! - **Answer.** `AnswerInteraction` moves the record from `open` to
//!   `resolved` (or, for `accept` of a URL, to `accepted`) with a
//!   compare-and-swap, so one answer wins. Form content is re-validated
//!   against `requestedSchema` ([`form::validate_answer`]); an invalid answer
//!   is refused and the interaction stays open.
//! - **Wait.** The replica running `Interact` waits for the record to leave
//!   `open` in its read model, then returns the MCP `ElicitResult`.
//! - **Timeout.** `expires_at = created + limits.interactionTimeoutSec`. The
//!   waiting replica resolves an expired interaction as `timeout` (a
//!   `cancel` towards the server), and every replica sweeps every
//!   [`SWEEP_EVERY`] for expired ones, so a dead replica cannot leave one open.
//! - **Session deleted.** Its pending interactions are cancelled (by the
//!   replica deleting it, and by the sweeper for whatever that one missed).
//! - **Call ended.** An approval whose engine call ends first is cancelled
//!   (reason `call_ended`) by the replica running the call. An approval
//!   names that replica (`waiter`), which holds a leased liveness key
//!   (`replica`); when the replica dies, the key goes within the lease TTL
//!   and the sweeper of any replica cancels the approval the same way, so
//!   an answer is refused instead of approving a call that no longer waits.
//!   A server's questions (its sidecar waits) have no waiter.
//! - **Kept.** A resolved record is kept for [`KEEP_RESOLVED`] (attached to a
//!   store lease), then it vanishes. Open ones have no lease.
//!
//! Every outcome is written to the audit sink ([`crate::audit`]), without
//! the form content.

pub mod form;

mod approval;
mod machine;
mod replica;
mod request;
#[cfg(test)]
mod tests;

pub use approval::ApprovalOutcome;
pub use machine::{AnswerError, apply_answer, apply_end};
pub use request::{InteractRequest, check_id, record_from_request, url_domain};

use crate::audit::{Audit, InteractionAudit};
use crate::metrics::Metrics;
use crate::model::{SessionRecord, now_ms, server_key, session_key};
use crate::state::State;
use crate::store::cas::{self, CasError, Decision, Write};
use crate::store::{AnyStore, KeyValue, LeaseId, Metered, Store, StoreError};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often every replica looks for expired interactions.
pub const SWEEP_EVERY: Duration = Duration::from_secs(2);
/// How long a resolved interaction is kept (for `ListInteractions --all`
/// and late `Interact` retries) before it vanishes.
pub const KEEP_RESOLVED: Duration = Duration::from_secs(3600);
/// Largest accepted form content (`content_json`), in bytes.
pub const MAX_CONTENT_BYTES: usize = 1024 * 1024;
/// Largest accepted elicitation params (`params_json`), in bytes.
pub const MAX_PARAMS_BYTES: usize = 256 * 1024;
const MAX_TEXT_LEN: usize = 1024;

/// The interaction stored in `kv`; `None` (logged) when it does not parse.
fn parse_record(kv: &KeyValue) -> Option<InteractionRecord> {
    match serde_json::from_slice::<InteractionRecord>(&kv.value) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(key = %kv.key, error = %e, "ignoring an interaction that does not parse");
            None
        }
    }
}

pub use crate::model::interaction::{
    Action, InteractionRecord, Kind, Outcome, Status, actions_for, interaction_key, pb_from_json,
    pb_to_json, reason, session_prefix,
};
pub use crate::state::InteractionChange;

/// An interaction operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum InteractionError {
    /// No such interaction in this session (another session's, or gone).
    #[error("interaction {id:?} not found in session {session:?}")]
    NotFound {
        /// Session.
        session: String,
        /// Id.
        id: String,
    },
    /// No such session.
    #[error("session {0:?} not found")]
    UnknownSession(String),
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// A form answer that does not match `requestedSchema`: every problem,
    /// by field (the gRPC status carries them as details,
    /// `{"fieldErrors": [{"field", "problem"}]}`).
    #[error("content_json: the answer does not match requestedSchema: {0}")]
    InvalidForm(form::FormErrors),
    /// Refused in the interaction's current state.
    #[error("{0}")]
    Precondition(String),
    /// The id is used by a different interaction.
    #[error("{0}")]
    Conflict(String),
    /// The store failed.
    #[error("store unavailable: {0}")]
    Store(#[from] StoreError),
    /// A CAS loop kept losing.
    #[error("too much contention updating {0}; try again")]
    Contention(String),
    /// This replica stops.
    #[error("the control plane replica is shutting down; ask again")]
    ShuttingDown,
}

impl From<AnswerError> for InteractionError {
    fn from(e: AnswerError) -> Self {
        match e {
            AnswerError::Form(errors) => InteractionError::InvalidForm(errors),
            AnswerError::Roots(_) => InteractionError::Invalid(e.to_string()),
            _ => InteractionError::Precondition(e.to_string()),
        }
    }
}

/// The interactions of one replica: creating, waiting, answering, timing
/// out and sweeping. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Interactions {
    store: Metered<AnyStore>,
    state: Arc<State>,
    metrics: Metrics,
    audit: Arc<Audit>,
    timeout: Duration,
    shutdown: CancellationToken,
    lease: Arc<tokio::sync::Mutex<Option<(LeaseId, Instant)>>>,
    /// This replica's id: the `waiter` of its approvals (see `replica`).
    replica: Arc<str>,
    started_at_ms: i64,
}

impl Interactions {
    /// Interactions over `store` (metered: its operations are counted in
    /// the store metrics), followed through `state`; they time out after
    /// `timeout`; waits end when `shutdown` is cancelled.
    pub fn new(
        store: Metered<AnyStore>,
        state: Arc<State>,
        metrics: Metrics,
        audit: Arc<Audit>,
        timeout: Duration,
        shutdown: CancellationToken,
    ) -> Self {
        Interactions {
            store,
            state,
            metrics,
            audit,
            timeout,
            shutdown,
            lease: Arc::default(),
            replica: switchyard_common::ids::new_id().into(),
            started_at_ms: now_ms(),
        }
    }

    /// The configured timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Reads one interaction from the store, with its mod revision.
    async fn read(
        &self,
        session: &str,
        id: &str,
    ) -> Result<Option<(InteractionRecord, i64)>, InteractionError> {
        let key = interaction_key(session, id);
        let Some(kv) = self.store.get(&key).await? else {
            return Ok(None);
        };
        Ok(parse_record(&kv).map(|r| (r, kv.mod_revision)))
    }

    /// A session, from the read model or the store.
    async fn session(&self, id: &str) -> Result<SessionRecord, InteractionError> {
        if let Some(s) = self.state.snapshot().sessions.get(id) {
            return Ok(s.clone());
        }
        let kv = self
            .store
            .get(&session_key(id))
            .await?
            .ok_or_else(|| InteractionError::UnknownSession(id.to_owned()))?;
        serde_json::from_slice(&kv.value)
            .map_err(|_| InteractionError::UnknownSession(id.to_owned()))
    }

    /// The lease resolved records are kept under (shared for a minute).
    async fn keep_lease(&self, fresh: bool) -> Result<LeaseId, StoreError> {
        let mut guard = self.lease.lock().await;
        if !fresh
            && let Some((lease, at)) = *guard
            && at.elapsed() < Duration::from_secs(60)
        {
            return Ok(lease);
        }
        let lease = self
            .store
            .grant_lease(KEEP_RESOLVED + Duration::from_secs(60))
            .await?;
        *guard = Some((lease, Instant::now()));
        Ok(lease)
    }

    /// Creates `rec` unless an interaction with its id exists in its
    /// session; returns the stored one and whether it was created here.
    pub async fn create(
        &self,
        rec: InteractionRecord,
    ) -> Result<(InteractionRecord, bool), InteractionError> {
        let key = interaction_key(&rec.session_id, &rec.id);
        let value = serde_json::to_vec(&rec).expect("records serialise");
        let (new, value, key) = (&rec, &value, &key);
        let updated = cas::update(&self.store, key, |old| async move {
            let Some(kv) = old else {
                return Ok(Decision::Write(Write::put(value.clone()), None));
            };
            // A record that does not parse is never replaced: no attempt
            // could create this one.
            let Some(existing) = parse_record(&kv) else {
                return Err(InteractionError::Contention(key.clone()));
            };
            if existing.server != new.server || existing.kind != new.kind {
                return Err(InteractionError::Conflict(format!(
                    "interaction_id {:?} is used by another interaction ({} of {})",
                    new.id,
                    existing.kind.as_str(),
                    existing.server
                )));
            }
            Ok(Decision::Keep(Some(existing)))
        })
        .await
        .map_err(|e| e.into_error(|| InteractionError::Contention(key.clone())))?;
        if let Some(existing) = updated.value {
            return Ok((existing, false));
        }
        self.state
            .wait_for(updated.revision, Duration::from_secs(2))
            .await;
        tracing::info!(session = %rec.session_id, interaction = %rec.id, kind = rec.kind.as_str(), server = %rec.server, "interaction required");
        Ok((rec, true))
    }

    /// Moves an interaction with a compare-and-swap: `f` gives the next
    /// record (or `None`: nothing to do). Returns the record now stored and
    /// whether this call changed it. The winner of a change to `accepted`
    /// or `resolved` writes the audit record and counts it.
    async fn transition<F>(
        &self,
        session: &str,
        id: &str,
        mut f: F,
    ) -> Result<(InteractionRecord, bool), InteractionError>
    where
        F: FnMut(&InteractionRecord) -> Result<Option<InteractionRecord>, InteractionError>,
    {
        let key = interaction_key(session, id);
        // A resolved record is kept under the shared lease. Should that
        // lease be gone when the write runs (revoked, or lost by the
        // store), the update starts over once with a lease granted anew at
        // every attempt.
        let mut fresh_lease = false;
        let updated = loop {
            let attempt = cas::update(&self.store, &key, |old| {
                // What `f` makes of the record as read; then, to resolve
                // it, the lease (async).
                let step = match old.as_ref().and_then(parse_record) {
                    None => Err(InteractionError::NotFound {
                        session: session.to_owned(),
                        id: id.to_owned(),
                    }),
                    Some(current) => f(&current).map(|next| (current, next)),
                };
                async move {
                    let (current, next) = step?;
                    let Some(next) = next else {
                        return Ok(Decision::Keep((current, None)));
                    };
                    let value = serde_json::to_vec(&next).expect("records serialise");
                    let mut write = Write::put(value);
                    if next.status == Status::Resolved {
                        write = write.with_lease(self.keep_lease(fresh_lease).await?);
                    }
                    Ok(Decision::Write(write, (current, Some(next))))
                }
            })
            .await;
            match attempt {
                Err(CasError::Store(StoreError::LeaseNotFound { .. })) if !fresh_lease => {
                    fresh_lease = true;
                }
                other => {
                    break other
                        .map_err(|e| e.into_error(|| InteractionError::Contention(key.clone())))?;
                }
            }
        };
        match updated.value {
            (current, None) => Ok((current, false)),
            (current, Some(next)) => {
                self.record_outcome(&current, &next);
                self.state
                    .wait_for(updated.revision, Duration::from_secs(2))
                    .await;
                Ok((next, true))
            }
        }
    }

    fn record_outcome(&self, before: &InteractionRecord, after: &InteractionRecord) {
        if before.status == after.status {
            return;
        }
        let (kind, outcome) = if before.status == Status::Accepted {
            (
                "interaction.completed",
                if after.reason == reason::COMPLETED {
                    "completed"
                } else {
                    "not_completed"
                },
            )
        } else {
            (
                "interaction.resolved",
                after.outcome.map(Outcome::as_str).unwrap_or("cancel"),
            )
        };
        self.metrics.interaction(after.kind.as_str(), outcome);
        let waited_ms = now_ms().saturating_sub(after.created_at_ms);
        tracing::info!(session = %after.session_id, interaction = %after.id, kind = after.kind.as_str(), outcome, reason = %after.reason, "interaction {}", if kind == "interaction.completed" { "completed" } else { "resolved" });
        self.audit.record_struct(&InteractionAudit {
            kind,
            session: after.session_id.clone(),
            run: after.run_id.clone(),
            server: after.server.clone(),
            tool: after.tool.clone(),
            interaction: after.id.clone(),
            interaction_kind: after.kind.as_str().into(),
            outcome: outcome.into(),
            reason: after.reason.clone(),
            url_domain: after.url_domain.clone(),
            waited_ms,
        });
    }

    /// Ends a pending interaction without an answer (see [`apply_end`]).
    pub async fn end(
        &self,
        session: &str,
        id: &str,
        outcome: Outcome,
        why: &str,
    ) -> Result<(InteractionRecord, bool), InteractionError> {
        self.transition(session, id, |r| Ok(apply_end(r, outcome, why, now_ms())))
            .await
    }

    /// Answers an interaction (`AnswerInteraction`). Errors: NotFound (also
    /// for another session's), Invalid (unknown action, malformed or
    /// oversized content, a form answer that does not match; the
    /// interaction stays open), Precondition (resolved, wrong action for
    /// the kind, timed out).
    pub async fn answer(
        &self,
        session: &str,
        id: &str,
        action: &str,
        content_json: &str,
    ) -> Result<InteractionRecord, InteractionError> {
        check_id("session_id", session)?;
        check_id("interaction_id", id)?;
        let action = Action::parse(action).ok_or_else(|| {
            InteractionError::Invalid(format!(
                "action: {action:?} is not one of accept, decline, cancel, approve, deny"
            ))
        })?;
        if content_json.len() > MAX_CONTENT_BYTES {
            return Err(InteractionError::Invalid(format!(
                "content_json: {} bytes is more than the {MAX_CONTENT_BYTES} allowed",
                content_json.len()
            )));
        }
        let content: Value = if content_json.trim().is_empty() || action != Action::Accept {
            Value::Null
        } else {
            serde_json::from_str(content_json).map_err(|e| {
                InteractionError::Invalid(format!("content_json: not valid JSON: {e}"))
            })?
        };
        let mut expired = false;
        let result = self
            .transition(session, id, |r| {
                match apply_answer(r, action, &content, now_ms()) {
                    Ok(next) => Ok(Some(next)),
                    Err(AnswerError::Expired(_)) => {
                        expired = true;
                        Ok(apply_end(r, Outcome::Timeout, reason::TIMEOUT, now_ms()))
                    }
                    Err(e) => Err(e.into()),
                }
            })
            .await?;
        if expired {
            return Err(InteractionError::Precondition(format!(
                "interaction {id} timed out"
            )));
        }
        Ok(result.0)
    }

    /// A session's interactions, oldest first, read from the store: the
    /// pending ones, or all kept ones.
    pub async fn list(
        &self,
        session: &str,
        include_resolved: bool,
    ) -> Result<Vec<InteractionRecord>, InteractionError> {
        check_id("session_id", session)?;
        self.session(session).await?;
        let listing = self.store.list(&session_prefix(session)).await?;
        let mut out: Vec<InteractionRecord> = listing
            .kvs
            .iter()
            .filter_map(|kv| serde_json::from_slice::<InteractionRecord>(&kv.value).ok())
            .filter(|r| include_resolved || r.is_pending())
            .collect();
        out.sort_by(|a, b| a.created_at_ms.cmp(&b.created_at_ms).then(a.id.cmp(&b.id)));
        Ok(out)
    }

    /// Waits until the interaction leaves `open` (or is gone: `None`),
    /// resolving it as `timeout` when it expires. Errors: the store
    /// failed, or this replica stops.
    pub async fn wait(
        &self,
        session: &str,
        id: &str,
    ) -> Result<Option<InteractionRecord>, InteractionError> {
        let mut changes = self.state.subscribe();
        loop {
            let seen = self
                .state
                .snapshot()
                .interactions
                .get(session)
                .and_then(|m| m.get(id))
                .cloned();
            let rec = match seen {
                Some(r) => r,
                None => match self.read(session, id).await? {
                    Some((r, _)) => r,
                    None => return Ok(None),
                },
            };
            if rec.status != Status::Open {
                return Ok(Some(rec));
            }
            let now = now_ms();
            if now >= rec.expires_at_ms {
                match self
                    .end(session, id, Outcome::Timeout, reason::TIMEOUT)
                    .await
                {
                    Ok((r, _)) if r.status != Status::Open => return Ok(Some(r)),
                    Ok(_) => continue,
                    Err(InteractionError::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(e),
                }
            }
            let nap = Duration::from_millis((rec.expires_at_ms - now).clamp(1, 1000) as u64);
            let relevant = async {
                loop {
                    match changes.recv().await {
                        Ok(crate::state::Change::Interaction(c))
                            if c.session == session && c.id == id =>
                        {
                            return;
                        }
                        Ok(_) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => return,
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                            // The read model is gone; poll.
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            return;
                        }
                    }
                }
            };
            tokio::select! {
                _ = relevant => {}
                _ = tokio::time::sleep(nap) => {}
                _ = self.shutdown.cancelled() => return Err(InteractionError::ShuttingDown),
            }
        }
    }

    /// `SidecarRegistry.Interact`: creates the interaction if absent and
    /// waits for the answer; returns the MCP `ElicitResult`. Errors:
    /// Invalid (bad request), UnknownSession, Precondition (the session
    /// does not enable the server), Conflict (the id is another
    /// interaction's), Store, ShuttingDown (ask again elsewhere).
    pub async fn interact(&self, req: &InteractRequest) -> Result<Value, InteractionError> {
        let rec = record_from_request(req, now_ms(), self.timeout)?;
        let session = self.session(&rec.session_id).await?;
        if !self.state.snapshot().servers.contains_key(&rec.server)
            && self.store.get(&server_key(&rec.server)).await?.is_none()
        {
            return Err(InteractionError::Invalid(format!(
                "server: {:?} is not configured",
                rec.server
            )));
        }
        if !session.enables(&rec.server) {
            return Err(InteractionError::Precondition(format!(
                "session {} does not enable server {}",
                session.id, rec.server
            )));
        }
        let (rec, created) = self.create(rec).await?;
        if !created {
            tracing::info!(session = %rec.session_id, interaction = %rec.id, status = rec.status.as_str(), "interaction asked again; waiting on the existing record");
        }
        Ok(match self.wait(&rec.session_id, &rec.id).await? {
            Some(r) => r.elicit_result(),
            None => json!({"action": "cancel"}),
        })
    }

    /// `SidecarRegistry.CompleteInteraction`: the server finished the URL
    /// flow with `elicitationId`; resolves the matching pending URL
    /// interaction of the session. Returns whether one was found.
    pub async fn complete(
        &self,
        server: &str,
        session: &str,
        elicitation_id: &str,
    ) -> Result<bool, InteractionError> {
        check_id("session_id", session)?;
        if elicitation_id.is_empty() {
            return Err(InteractionError::Invalid("elicitation_id: required".into()));
        }
        let listing = self.store.list(&session_prefix(session)).await?;
        let mut found = false;
        for kv in &listing.kvs {
            let Ok(r) = serde_json::from_slice::<InteractionRecord>(&kv.value) else {
                continue;
            };
            if r.kind != Kind::Url || r.server != server || r.elicitation_id != elicitation_id {
                continue;
            }
            found = true;
            match self
                .end(session, &r.id, Outcome::Accept, reason::COMPLETED)
                .await
            {
                Ok(_) | Err(InteractionError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }

    /// Cancels interaction `id` of `session` with reason `call_ended`: the
    /// sidecar of `server` says the call that asked it ended before it was
    /// answered (`CompleteInteractionRequest.ended_interaction_id`). True
    /// if it was open and is now closed; false if it was resolved already,
    /// is unknown, or belongs to another server (left alone). Errors: a
    /// malformed id, the store.
    pub async fn end_for_call(
        &self,
        server: &str,
        session: &str,
        id: &str,
    ) -> Result<bool, InteractionError> {
        check_id("session_id", session)?;
        check_id("ended_interaction_id", id)?;
        let ended = self
            .transition(session, id, |r| {
                if r.server != server {
                    return Ok(None);
                }
                Ok(apply_end(r, Outcome::Cancel, reason::CALL_ENDED, now_ms()))
            })
            .await;
        match ended {
            Ok((rec, changed)) => {
                if changed {
                    tracing::info!(%session, interaction = %id, server = %rec.server, "the call ended before its question was answered; interaction cancelled");
                }
                Ok(changed)
            }
            Err(InteractionError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Cancels a (deleted) session's pending interactions.
    pub async fn cancel_session(&self, session: &str) -> Result<usize, InteractionError> {
        let listing = self.store.list(&session_prefix(session)).await?;
        let mut n = 0;
        for kv in &listing.kvs {
            let Ok(r) = serde_json::from_slice::<InteractionRecord>(&kv.value) else {
                continue;
            };
            if r.is_pending() {
                match self
                    .end(session, &r.id, Outcome::Cancel, reason::SESSION_DELETED)
                    .await
                {
                    Ok((_, true)) => n += 1,
                    Ok(_) | Err(InteractionError::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(n)
    }

    /// One sweep: resolves every pending interaction that expired (as
    /// `timeout`) or whose session is gone (as `cancel`), and every open
    /// approval whose waiting replica is gone (its liveness key expired:
    /// as `cancel`, reason `call_ended`). Returns how many this replica
    /// resolved.
    pub async fn sweep(&self) -> usize {
        let snap = self.state.snapshot();
        let now = now_ms();
        let mut todo = Vec::new();
        let mut waited = Vec::new();
        for (session, m) in &snap.interactions {
            let gone = !snap.sessions.contains_key(session);
            for r in m.values().filter(|r| r.is_pending()) {
                if gone {
                    todo.push((r.clone(), Outcome::Cancel, reason::SESSION_DELETED));
                } else if r.expires_at_ms <= now {
                    todo.push((r.clone(), Outcome::Timeout, reason::TIMEOUT));
                } else if r.status == Status::Open
                    && !r.waiter.is_empty()
                    && *r.waiter != *self.replica
                {
                    waited.push(r.clone());
                }
            }
        }
        // Another replica's approvals: read which replicas are alive only
        // when there are some. A store that does not answer closes nothing.
        if !waited.is_empty() {
            match self.live_replicas().await {
                Ok(live) => {
                    for r in waited.into_iter().filter(|r| !live.contains(&r.waiter)) {
                        tracing::info!(session = %r.session_id, interaction = %r.id, waiter = %r.waiter, "the replica whose call waited on this approval is gone; cancelling it");
                        todo.push((r, Outcome::Cancel, reason::CALL_ENDED));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "listing the live replicas failed; their approvals are checked at the next sweep");
                }
            }
        }
        let mut n = 0;
        for (r, outcome, why) in todo {
            match self.end(&r.session_id, &r.id, outcome, why).await {
                Ok((_, true)) => n += 1,
                Ok(_) | Err(InteractionError::NotFound { .. }) => {}
                Err(e) => {
                    tracing::warn!(session = %r.session_id, interaction = %r.id, error = %e, "sweeping an interaction failed; trying again later");
                }
            }
        }
        n
    }

    /// Sweeps every [`SWEEP_EVERY`] until the replica stops.
    pub fn spawn_sweeper(&self) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => { this.sweep().await; }
                    _ = this.shutdown.cancelled() => return,
                }
            }
        })
    }
}

/// Cancels an approval whose waiter went away (the engine call ended).
struct CancelOnDrop {
    interactions: Option<Interactions>,
    session: String,
    id: String,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(this) = self.interactions.take() else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (session, id) = (
            std::mem::take(&mut self.session),
            std::mem::take(&mut self.id),
        );
        handle.spawn(async move {
            if let Err(e) = this
                .end(&session, &id, Outcome::Cancel, reason::CALL_ENDED)
                .await
            {
                tracing::debug!(%session, interaction = %id, error = %e, "cancelling an abandoned approval failed; the sweeper times it out");
            }
        });
    }
}
