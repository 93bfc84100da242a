//! Background calls (stage B): tool calls that outlived their foreground
//! phase and go on without holding the engine's turn.
//!
//! The sidecar that ran the call keeps polling the server's task (`task`
//! mode) or holding the `tools/call` request (`wait` mode) and reports
//! every change with `SidecarRegistry.UpdateBackgroundCall`. This module
//! keeps the records and everything the control plane does with them:
//!
//! - **Records** under `background/<id>` ([`BackgroundRecord`], the
//!   proto `BackgroundCall` in its proto3 JSON form, camelCase). Every
//!   write is a compare-and-swap on the key's revision; a terminal record
//!   (`completed`, `failed`, `cancelled`) is never written again, only
//!   deleted by retention ([`Background::upsert`]).
//! - **The call path**: [`Background::policy`] builds the
//!   `BackgroundPolicy` sent with every engine call; [`moved_text`] is what
//!   the model reads when the call moved.
//! - **Events**: a record turning terminal is broadcast by
//!   [`crate::state::State`] as [`crate::state::Change::Background`]; the
//!   engine API turns it into `background_call.completed|failed|cancelled`
//!   ([`event_of`]) and replays finished calls from the store
//!   ([`Background::finished_of`]), so an engine that subscribes again,
//!   perhaps at another replica, misses none.
//! - **Cancellation** ([`Background::cancel`]): recorded as `cancelled`
//!   (CAS), then the owning sidecar's `SidecarCalls.CancelBackgroundCall`,
//!   best effort.
//! - **The sweeper** ([`spawn_sweeper`], on every replica; CAS makes
//!   concurrent sweeps safe): a non-terminal call whose sidecar is no longer
//!   registered fails (`wait` mode: the held request is gone) or is adopted
//!   by a live sidecar of the server whose report stream this replica holds
//!   (`task` mode: `ControlMessage.adopt`); a sidecar saying hello adopts
//!   at once. A task without any live sidecar for 30 minutes fails, and so
//!   does a call past its deadline.
//! - **Creators.** A record names the sidecar that created its task
//!   (`creator_sidecar_id`): a stdio server's tasks live in that sidecar's
//!   server process, where an adopter cannot find them. The creator gets
//!   its calls back when it says hello again, and an adopter's "task not
//!   found" failure (`task_not_found`) is not taken while the creator is
//!   registered: the call goes back to the creator instead
//!   ([`Background::upsert`]). Finished records older than
//!   `backgroundCalls.retentionSec` are deleted.
//! - **One poller per task.** Each sidecar says which task-mode calls it
//!   polls (`SidecarReport.polling`, once a lease TTL); those another
//!   sidecar owns, or that are final, are answered `ControlMessage.release`
//!   ([`Background::not_polled_by`]), and the sidecar stops polling them.

mod events;
mod fit;
mod page;
mod sweeper;
#[cfg(test)]
mod tests;

pub use events::{event_of, is_event_for, moved_text};
use fit::{check_lengths, fit};
pub use page::{Filter, MAX_PAGE_SIZE, page_of};
use sweeper::tell_sidecar_cancel;
pub use sweeper::{end_cards, spawn_sweeper};

use crate::ControlPlane;
use crate::config::BackgroundCallsConfig;
use crate::metrics::Metrics;
use crate::model::encode;
use crate::model::{background_key, now_ms, server_key, sidecar_key};
use crate::state::Snapshot;
use crate::store::cas::{self, Decision, Write};
use crate::store::{AnyStore, Compare, KeyValue, Metered, Op, Store, StoreError, Txn};
use serde_json::Value;
use std::collections::HashMap;
use std::future::ready;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use switchyard_common::ids::new_uuid;
use switchyard_proto::v1 as pb;
use tokio::sync::mpsc;
use tonic::Status;

/// How long the foreground phase may last when `maxPerTarget` background
/// calls are already running (stage B: "poll in the foreground until done,
/// at most 10 min").
pub const FOREGROUND_LIMIT_MS: u64 = 600_000;
/// A task-mode call whose server has had no live sidecar for this long
/// fails.
pub const ORPHAN_LIMIT_MS: i64 = 30 * 60 * 1000;
/// The sidecar cancels a call at its deadline; the control plane fails it
/// itself only this long after, should the sidecar not have.
pub const DEADLINE_GRACE_MS: i64 = 30_000;
/// A record larger than this (JSON bytes) has its attachments' content
/// dropped before it is stored (etcd refuses requests over 1.5 MiB).
pub const MAX_RECORD_BYTES: usize = 1024 * 1024;
/// How many ids of one `SidecarReport.polling` are looked at: a sidecar
/// polls at most this many calls at once, so a larger report is hostile.
pub const MAX_POLLING_IDS: usize = 100_000;

/// How many calls one `ControlMessage.adopt` carries at most.
const ADOPT_BATCH: usize = 500;

pub use crate::model::background::{
    AttachmentRecord, BackgroundRecord, BackgroundResultRecord, PREFIX, STATUSES, is_terminal,
};

/// A background-call operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum BackgroundError {
    /// The request is malformed (INVALID_ARGUMENT).
    #[error("{0}")]
    Invalid(String),
    /// No such call, or another session's (NOT_FOUND).
    #[error("background call {0:?} not found")]
    NotFound(String),
    /// The server is not configured (NOT_FOUND).
    #[error("server {0:?} is not configured")]
    UnknownServer(String),
    /// The call already finished (FAILED_PRECONDITION).
    #[error("background call {id:?} already finished ({status})")]
    Finished {
        /// The call.
        id: String,
        /// Its terminal status.
        status: String,
    },
    /// A record created by a sidecar that is not registered for its
    /// server (FAILED_PRECONDITION).
    #[error(
        "background call {id:?}: call.sidecar_id {sidecar_id:?} is not a registered sidecar of server {server:?} (register first)"
    )]
    NotRegistered {
        /// The call.
        id: String,
        /// Its server.
        server: String,
        /// The sidecar named in the record.
        sidecar_id: String,
    },
    /// A CAS loop kept losing (ABORTED).
    #[error("too much contention updating background call {0:?}; try again")]
    Contention(String),
    /// The store failed (UNAVAILABLE).
    #[error("store unavailable")]
    Store(
        #[from]
        #[source]
        StoreError,
    ),
}

/// A report stream held by this replica (where `adopt` messages go).
#[derive(Debug, Clone)]
struct LocalStream {
    sidecar_id: String,
    serial: u64,
    tx: mpsc::Sender<Result<pb::ControlMessage, Status>>,
}

/// The background calls of one replica.
#[derive(Debug)]
pub struct Background {
    config: BackgroundCallsConfig,
    store: Metered<AnyStore>,
    metrics: Metrics,
    streams: Mutex<HashMap<String, Vec<LocalStream>>>,
    serial: AtomicUsize,
    next_stream: AtomicUsize,
    /// task-mode calls whose server has no live sidecar: since when (this
    /// replica's view).
    orphaned_since: Mutex<HashMap<String, i64>>,
}

/// Unregisters a report stream when dropped.
#[derive(Debug)]
pub struct StreamGuard<'a> {
    background: &'a Background,
    server: String,
    serial: u64,
}

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        let mut streams = self.background.streams.lock().unwrap();
        if let Some(v) = streams.get_mut(&self.server) {
            v.retain(|s| s.serial != self.serial);
            if v.is_empty() {
                streams.remove(&self.server);
            }
        }
    }
}

fn parse(kv: &KeyValue) -> Option<BackgroundRecord> {
    match serde_json::from_slice::<BackgroundRecord>(&kv.value) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(key = %kv.key, error = %e, "ignoring a background call record that does not parse");
            None
        }
    }
}

/// [`crate::model::check_id`] as a background call's error.
fn check_id(field: &str, id: &str) -> Result<(), BackgroundError> {
    crate::model::check_id(field, id).map_err(BackgroundError::Invalid)
}

impl Background {
    /// The background calls of a replica over `store` (metered: its
    /// operations are counted in the store metrics).
    pub fn new(config: BackgroundCallsConfig, store: Metered<AnyStore>, metrics: Metrics) -> Self {
        Background {
            config,
            store,
            metrics,
            streams: Mutex::new(HashMap::new()),
            serial: AtomicUsize::new(0),
            next_stream: AtomicUsize::new(0),
            orphaned_since: Mutex::new(HashMap::new()),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &BackgroundCallsConfig {
        &self.config
    }

    /// The `BackgroundPolicy` of an engine call of `tool` on `server`
    /// (`always`: the tool's policy record says `background: always`;
    /// `running`: non-terminal background calls of the server now).
    pub fn policy(&self, engine_tool: &str, always: bool, running: usize) -> pb::BackgroundPolicy {
        pb::BackgroundPolicy {
            background_call_id: new_uuid(),
            auto_after_ms: if always {
                0
            } else {
                self.config.auto_after_sec.saturating_mul(1000)
            },
            allowed: running < self.config.max_per_target as usize,
            foreground_limit_ms: FOREGROUND_LIMIT_MS,
            max_duration_ms: self.config.max_duration_sec.saturating_mul(1000),
            engine_tool: engine_tool.to_owned(),
            move_when_task: false,
            principal: String::new(),
        }
    }

    /// Counts a call that moved to the background (by the replica that
    /// answered the engine).
    pub fn count_moved(&self, server: &str, mode: &str) {
        self.metrics.background_moved(server, bounded_mode(mode));
    }

    fn count_finished(&self, rec: &BackgroundRecord) {
        self.metrics
            .background_finished(&rec.server, bounded_mode(&rec.mode), &rec.status);
    }

    /// One record straight from the store.
    pub async fn get(&self, id: &str) -> Result<Option<BackgroundRecord>, BackgroundError> {
        check_id("id", id)?;
        Ok(self
            .store
            .get(&background_key(id))
            .await?
            .as_ref()
            .and_then(parse))
    }

    /// Every record from the store (a prefix list), oldest first.
    pub async fn list_all(&self) -> Result<Vec<BackgroundRecord>, BackgroundError> {
        let listing = self.store.list(PREFIX).await?;
        let mut all: Vec<_> = listing
            .kvs
            .iter()
            .filter_map(|kv| {
                parse(kv).filter(|r| kv.key.strip_prefix(PREFIX) == Some(r.id.as_str()))
            })
            .collect();
        all.sort_by(|a, b| a.created_at_ms.cmp(&b.created_at_ms).then(a.id.cmp(&b.id)));
        Ok(all)
    }

    /// The records of `session` (all sessions when empty), running ones
    /// unless `include_finished`, oldest first.
    pub async fn list(
        &self,
        session: &str,
        include_finished: bool,
    ) -> Result<Vec<BackgroundRecord>, BackgroundError> {
        Ok(self
            .list_all()
            .await?
            .into_iter()
            .filter(|r| session.is_empty() || r.session_id == session)
            .filter(|r| include_finished || !r.is_terminal())
            .collect())
    }

    /// The finished calls of `session` with `finished_at_ms > after_ms`,
    /// in the order they finished (the replay of `SubscribeEvents`): the
    /// read model's index names them, and only those records are read
    /// from the store (one read each, not the whole prefix). A call
    /// finished on another replica that this one has not applied yet
    /// reaches the subscriber as a change of the read model instead
    /// (subscribe to the changes first).
    pub async fn finished_of(
        &self,
        state: &crate::state::State,
        session: &str,
        after_ms: i64,
    ) -> Result<Vec<BackgroundRecord>, BackgroundError> {
        let mut done = Vec::new();
        for id in state.finished_background(session, after_ms) {
            if let Some(r) = self.get(&id).await?
                && is_event_for(&r, session)
                && r.finished_at_ms > after_ms
            {
                done.push(r);
            }
        }
        done.sort_by(|a, b| {
            a.finished_at_ms
                .cmp(&b.finished_at_ms)
                .then(a.id.cmp(&b.id))
        });
        Ok(done)
    }

    /// `SidecarRegistry.UpdateBackgroundCall`: validates `incoming` and
    /// creates or updates its record (CAS), returning the record as
    /// stored. A terminal record is final: it is returned unchanged. On an
    /// update, what the control plane fixed at creation (server, tool,
    /// engine tool, session, run, mode, created_at_ms) is kept; a
    /// non-terminal update from a sidecar that is not the record's owner
    /// while that owner is live (the call was adopted) is ignored.
    /// Errors: [`BackgroundError::Invalid`] (no id, unknown status or
    /// mode, task mode without taskId), [`BackgroundError::UnknownServer`],
    /// store failures.
    pub async fn upsert(
        &self,
        snap: &Snapshot,
        incoming: BackgroundRecord,
    ) -> Result<BackgroundRecord, BackgroundError> {
        check_id("call.id", &incoming.id)?;
        if !STATUSES.contains(&incoming.status.as_str()) {
            return Err(BackgroundError::Invalid(format!(
                "call.status: {:?} is not one of {}",
                incoming.status,
                STATUSES.join(", ")
            )));
        }
        if !matches!(incoming.mode.as_str(), "wait" | "task") {
            return Err(BackgroundError::Invalid(format!(
                "call.mode: {:?} is not \"wait\" or \"task\"",
                incoming.mode
            )));
        }
        if incoming.mode == "task" && incoming.task_id.is_empty() {
            return Err(BackgroundError::Invalid(
                "call.task_id: required in task mode".into(),
            ));
        }
        if incoming.session_id.contains('/') || incoming.session_id.len() > 128 {
            return Err(BackgroundError::Invalid(
                "call.session_id: at most 128 characters, without '/'".into(),
            ));
        }
        check_lengths(&incoming)?;
        if !snap.servers.contains_key(&incoming.server)
            && self
                .store
                .get(&server_key(&incoming.server))
                .await?
                .is_none()
        {
            return Err(BackgroundError::UnknownServer(incoming.server));
        }
        let key = background_key(&incoming.id);
        let incoming = &incoming;
        let updated = cas::update(&self.store, &key, |old| async move {
            let stored = old.as_ref().and_then(parse);
            let now = now_ms();
            let mut rec = incoming.clone();
            match &stored {
                Some(s) if s.is_terminal() => return Ok(Decision::Keep(s.clone())),
                Some(s) => {
                    if s.server != rec.server {
                        return Err(BackgroundError::Invalid(format!(
                            "call.server: {:?}, but background call {} belongs to {:?}",
                            rec.server, rec.id, s.server
                        )));
                    }
                    if !rec.is_terminal()
                        && s.sidecar_id != rec.sidecar_id
                        && snap
                            .sidecars
                            .get(&s.server)
                            .is_some_and(|m| m.contains_key(&s.sidecar_id))
                    {
                        tracing::info!(id = %rec.id, owner = %s.sidecar_id, from = %rec.sidecar_id, "ignoring an update from a sidecar that does not own the background call");
                        return Ok(Decision::Keep(s.clone()));
                    }
                    // An adopter whose server does not know the task, while
                    // the sidecar that created it is registered (and still
                    // polls it): not a result. The call goes back to its
                    // creator; the adopter stops.
                    if rec.is_terminal()
                        && rec.task_not_found
                        && !s.creator_sidecar_id.is_empty()
                        && rec.sidecar_id != s.creator_sidecar_id
                        && self
                            .sidecar_live(snap, &s.server, &s.creator_sidecar_id)
                            .await
                    {
                        if s.sidecar_id == s.creator_sidecar_id {
                            return Ok(Decision::Keep(s.clone()));
                        }
                        tracing::info!(id = %rec.id, server = %s.server, adopter = %rec.sidecar_id, creator = %s.creator_sidecar_id, "the adopter's server does not know the task; the call goes back to the sidecar that created it");
                        let mut back = s.clone();
                        back.sidecar_id = s.creator_sidecar_id.clone();
                        back.updated_at_ms = now;
                        let value = fit(&mut back)?;
                        return Ok(Decision::Write(Write::put(value), back));
                    }
                    rec.creator_sidecar_id = s.creator_sidecar_id.clone();
                    rec.tool = s.tool.clone();
                    rec.engine_tool = s.engine_tool.clone();
                    rec.session_id = s.session_id.clone();
                    rec.principal = s.principal.clone();
                    rec.run_id = s.run_id.clone();
                    rec.mode = s.mode.clone();
                    rec.created_at_ms = s.created_at_ms;
                    if rec.deadline_ms == 0 {
                        rec.deadline_ms = s.deadline_ms;
                    }
                    if rec.immediate_response.is_empty() {
                        rec.immediate_response = s.immediate_response.clone();
                    }
                    // The same content again: nothing to write.
                    let mut same = rec.clone();
                    same.updated_at_ms = s.updated_at_ms;
                    if same == *s {
                        return Ok(Decision::Keep(s.clone()));
                    }
                }
                None => {
                    // Only a registered sidecar of the server creates a
                    // record (FAILED_PRECONDITION: a sidecar whose lease
                    // lapsed registers again, then retries).
                    if !self.sidecar_live(snap, &rec.server, &rec.sidecar_id).await {
                        return Err(BackgroundError::NotRegistered {
                            id: rec.id,
                            server: rec.server,
                            sidecar_id: rec.sidecar_id,
                        });
                    }
                    rec.creator_sidecar_id = rec.sidecar_id.clone();
                    if rec.created_at_ms == 0 {
                        rec.created_at_ms = now;
                    }
                    if rec.deadline_ms == 0 {
                        rec.deadline_ms = rec.created_at_ms.saturating_add(
                            (self.config.max_duration_sec.saturating_mul(1000)) as i64,
                        );
                    }
                }
            }
            rec.updated_at_ms = now;
            // The control plane's clock, never the sidecar's: event replay
            // (`finished_at_ms > background_after_ms`) and retention rely on
            // it; a sidecar clock behind would hide the result from an
            // engine subscribing again, one far behind would have it
            // deleted at once.
            rec.finished_at_ms = if rec.is_terminal() { now } else { 0 };
            let value = fit(&mut rec)?;
            Ok(Decision::Write(Write::put(value), rec))
        })
        .await
        .map_err(|e| e.into_error(|| BackgroundError::Contention(incoming.id.clone())))?;
        if updated.written && updated.value.is_terminal() {
            self.count_finished(&updated.value);
        }
        Ok(updated.value)
    }

    /// Changes a stored, non-terminal record with `f` (CAS). `f` returns
    /// false to leave it alone. Returns the record after the change and
    /// whether this call changed it; `Ok(None)` if absent. A terminal
    /// record is returned unchanged (`false`).
    async fn transition(
        &self,
        id: &str,
        mut f: impl FnMut(&mut BackgroundRecord) -> bool,
    ) -> Result<Option<(BackgroundRecord, bool)>, BackgroundError> {
        let key = background_key(id);
        let updated = cas::update(&self.store, &key, |old| {
            ready(Ok(transition_step(old.as_ref(), &mut f)))
        })
        .await
        .map_err(|e| e.into_error(|| BackgroundError::Contention(id.to_owned())))?;
        if updated.written
            && let Some(rec) = &updated.value
            && rec.is_terminal()
        {
            self.count_finished(rec);
        }
        Ok(updated.value.map(|rec| (rec, updated.written)))
    }

    /// Makes a running call terminal with `status` (`failed` or
    /// `cancelled`) and `message`. Returns the record and whether this
    /// call finished it.
    pub async fn finish(
        &self,
        id: &str,
        status: &str,
        message: &str,
    ) -> Result<Option<(BackgroundRecord, bool)>, BackgroundError> {
        self.transition(id, |r| {
            r.status = status.to_owned();
            r.status_message = message.to_owned();
            true
        })
        .await
    }

    /// Fails a running call if `owner` still owns it (the index this
    /// replica decided on may be a moment old).
    async fn fail_if_owned(
        &self,
        id: &str,
        owner: &str,
        message: &str,
    ) -> Result<Option<(BackgroundRecord, bool)>, BackgroundError> {
        self.transition(id, |r| {
            if r.sidecar_id != owner {
                return false;
            }
            r.status = "failed".into();
            r.status_message = message.to_owned();
            true
        })
        .await
    }

    /// Cancels a running call (engine API, CLI): recorded as `cancelled`
    /// first, then the owning sidecar's `CancelBackgroundCall` is called
    /// (best effort, bounded: `tasks/cancel` upstream or dropping the held
    /// request). With `session`, the call must be that session's.
    /// `by` names who cancelled it in the status message (`the user`, or
    /// `the administrator NAME`).
    /// Errors: [`BackgroundError::NotFound`], [`BackgroundError::Finished`].
    pub async fn cancel(
        &self,
        cp: &ControlPlane,
        id: &str,
        session: &str,
        by: &str,
    ) -> Result<BackgroundRecord, BackgroundError> {
        check_id("id", id)?;
        let mut other_session = false;
        let outcome = self
            .transition(id, |r| {
                if !session.is_empty() && r.session_id != session {
                    other_session = true;
                    return false;
                }
                r.status = "cancelled".into();
                r.status_message = format!("cancelled by {by}");
                true
            })
            .await?;
        let (rec, changed) = match outcome {
            None => return Err(BackgroundError::NotFound(id.to_owned())),
            Some(_) if other_session => return Err(BackgroundError::NotFound(id.to_owned())),
            Some(x) => x,
        };
        if !session.is_empty() && rec.session_id != session {
            return Err(BackgroundError::NotFound(id.to_owned()));
        }
        if !changed {
            return Err(BackgroundError::Finished {
                id: rec.id,
                status: rec.status,
            });
        }
        tracing::info!(id = %rec.id, server = %rec.server, tool = %rec.tool, "background call cancelled");
        tell_sidecar_cancel(cp, &rec).await;
        end_cards(cp, &rec).await;
        Ok(rec)
    }

    /// Registers a report stream of `sidecar_id` (of `server`) held by
    /// this replica, for adoption; dropped with the guard.
    pub fn register_stream(
        &self,
        server: &str,
        sidecar_id: &str,
        tx: mpsc::Sender<Result<pb::ControlMessage, Status>>,
    ) -> StreamGuard<'_> {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed) as u64;
        self.streams
            .lock()
            .unwrap()
            .entry(server.to_owned())
            .or_default()
            .push(LocalStream {
                sidecar_id: sidecar_id.to_owned(),
                serial,
                tx,
            });
        StreamGuard {
            background: self,
            server: server.to_owned(),
            serial,
        }
    }

    /// A report stream of `server` held here, preferring sidecars whose
    /// upstream is connected.
    fn pick_stream(&self, snap: &Snapshot, server: &str) -> Option<LocalStream> {
        let streams = self.streams.lock().unwrap();
        let all = streams.get(server)?;
        let live = |s: &&LocalStream| {
            snap.sidecars
                .get(server)
                .and_then(|m| m.get(&s.sidecar_id))
                .is_some()
        };
        let connected: Vec<&LocalStream> = all
            .iter()
            .filter(live)
            .filter(|s| {
                snap.sidecars
                    .get(server)
                    .and_then(|m| m.get(&s.sidecar_id))
                    .is_some_and(|r| r.upstream_state == "connected")
            })
            .collect();
        let candidates: Vec<&LocalStream> = if connected.is_empty() {
            all.iter().filter(live).collect()
        } else {
            connected
        };
        if candidates.is_empty() {
            return None;
        }
        let i = self.next_stream.fetch_add(1, Ordering::Relaxed) % candidates.len();
        Some(candidates[i].clone())
    }

    /// Whether `sidecar_id` of `server` is registered: the read model
    /// first, then the store (the read model may lag a new registration).
    async fn sidecar_live(&self, snap: &Snapshot, server: &str, sidecar_id: &str) -> bool {
        if sidecar_id.is_empty() {
            return false;
        }
        if in_snapshot(snap, server, sidecar_id) {
            return true;
        }
        // Unsure (a store failure): count it live, so nothing is failed
        // or adopted on a guess.
        self.store
            .get(&sidecar_key(server, sidecar_id))
            .await
            .map_or(true, |kv| kv.is_some())
    }

    /// Moves a task-mode call whose owner is gone to `to` (CAS on the old
    /// owner). Returns the adopted record.
    async fn adopt(
        &self,
        snap: &Snapshot,
        id: &str,
        to: &str,
    ) -> Result<Option<BackgroundRecord>, BackgroundError> {
        let Some(current) = self.get(id).await? else {
            return Ok(None);
        };
        if current.is_terminal() || current.mode != "task" || current.sidecar_id == to {
            return Ok(None);
        }
        if self
            .sidecar_live(snap, &current.server, &current.sidecar_id)
            .await
        {
            return Ok(None);
        }
        let from = current.sidecar_id.clone();
        let adopted = self
            .transition(id, |r| {
                if r.sidecar_id != from {
                    return false;
                }
                r.sidecar_id = to.to_owned();
                true
            })
            .await?;
        match adopted {
            Some((rec, true)) => {
                tracing::info!(id = %rec.id, server = %rec.server, from = %from, to = %to, "background task adopted by another sidecar");
                self.orphaned_since.lock().unwrap().remove(id);
                Ok(Some(rec))
            }
            _ => Ok(None),
        }
    }

    /// Gives an adopted task-mode call back to `creator`, the sidecar
    /// that created it, which said hello again. Returns the record if
    /// `creator` owns it now; `None` if it is terminal, or was not created
    /// by `creator`. The adopter stops when its next `polling` report is
    /// answered `release` ([`Background::not_polled_by`]), when a report
    /// comes back owned by another sidecar, or when its server does not
    /// know the task.
    async fn give_back(
        &self,
        id: &str,
        creator: &str,
    ) -> Result<Option<BackgroundRecord>, BackgroundError> {
        let back = self
            .transition(id, |r| {
                if r.creator_sidecar_id != creator || r.sidecar_id == creator {
                    return false;
                }
                r.sidecar_id = creator.to_owned();
                true
            })
            .await?;
        Ok(match back {
            Some((rec, changed)) if rec.sidecar_id == creator => {
                if changed {
                    tracing::info!(id = %rec.id, server = %rec.server, creator = %creator, "background task given back to the sidecar that created it");
                }
                Some(rec)
            }
            _ => None,
        })
    }

    /// Of the task-mode calls `sidecar_id` of `server` says it polls
    /// (`polling` on its report stream, at most [`MAX_POLLING_IDS`] looked
    /// at; other servers' calls are never named), those it is
    /// to stop polling (`release`): final, or owned by another sidecar (the
    /// call went back to its creator, or was adopted while this sidecar's
    /// registration lapsed). The read model picks them and the store
    /// confirms each, as the read model may lag behind a give-back to this
    /// very sidecar; a call the read model does not know (registered a
    /// moment ago) is left alone. A store error leaves that call for the
    /// next `polling`.
    pub async fn not_polled_by(
        &self,
        cp: &ControlPlane,
        server: &str,
        sidecar_id: &str,
        ids: &[String],
    ) -> Vec<String> {
        let ids = &ids[..ids.len().min(MAX_POLLING_IDS)];
        let mut release = Vec::new();
        for id in cp.state.background_not_owned_by(server, sidecar_id, ids) {
            match self.get(&id).await {
                Ok(Some(rec)) if !rec.is_terminal() && rec.sidecar_id == sidecar_id => {}
                // Final, another sidecar's, or deleted after its retention.
                Ok(_) => release.push(id),
                Err(e) => {
                    tracing::warn!(%id, sidecar = %sidecar_id, error = %e, "checking who polls a background call failed; checked again at the next report");
                }
            }
        }
        release
    }

    /// A sidecar said hello on a report stream this replica holds: the
    /// calls it owns (a sidecar that reconnected, or restarted with the
    /// same id: task mode and wait mode), the task-mode calls it created
    /// that another sidecar adopted (given back), and the task-mode calls
    /// whose sidecar is gone are sent to it in `adopt` messages.
    pub async fn on_hello(
        &self,
        cp: &ControlPlane,
        server: &str,
        sidecar_id: &str,
        tx: &mpsc::Sender<Result<pb::ControlMessage, Status>>,
    ) {
        let snap = cp.state.snapshot();
        let mut calls = Vec::new();
        for (id, e) in cp.state.background_index() {
            if e.server != server || is_terminal(&e.status) {
                continue;
            }
            // A wait-mode call is only ever sent back to the sidecar id that
            // held it: a sidecar that restarted under the same id (a
            // container restart in the same pod) does not hold it any more
            // and reports it failed.
            if e.mode != "task" && e.sidecar_id != sidecar_id {
                continue;
            }
            let result = if e.sidecar_id == sidecar_id {
                self.get(&id)
                    .await
                    .map(|r| r.filter(|r| !r.is_terminal() && r.sidecar_id == sidecar_id))
            } else if e.mode == "task" && e.creator_sidecar_id == sidecar_id {
                // Its creator is back: the one sidecar sure to know the
                // task (a stdio server's tasks live in its process).
                self.give_back(&id, sidecar_id).await
            } else if !self.sidecar_live(&snap, server, &e.sidecar_id).await {
                self.adopt(&snap, &id, sidecar_id).await
            } else {
                continue;
            };
            match result {
                Ok(Some(rec)) => calls.push(rec.to_pb()),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%id, %server, error = %e, "adopting a background call failed; the sweeper retries")
                }
            }
        }
        send_adopt(tx, server, sidecar_id, calls).await;
    }
}

/// One attempt of [`Background::transition`] on the record as read: keep
/// it (absent or unparsable: `None`; terminal, or `f` said no: the record)
/// or write what `f` made of it, stamped.
fn transition_step(
    old: Option<&KeyValue>,
    f: &mut impl FnMut(&mut BackgroundRecord) -> bool,
) -> Decision<Option<BackgroundRecord>> {
    let Some(mut rec) = old.and_then(parse) else {
        return Decision::Keep(None);
    };
    if rec.is_terminal() {
        return Decision::Keep(Some(rec));
    }
    let before = rec.clone();
    if !f(&mut rec) {
        return Decision::Keep(Some(before));
    }
    let now = now_ms();
    rec.updated_at_ms = now;
    if rec.is_terminal() && rec.finished_at_ms == 0 {
        rec.finished_at_ms = now;
    }
    Decision::Write(Write::put(encode(&rec)), Some(rec))
}

/// Whether the read model has `sidecar_id` of `server` registered.
fn in_snapshot(snap: &Snapshot, server: &str, sidecar_id: &str) -> bool {
    snap.sidecars
        .get(server)
        .is_some_and(|m| m.contains_key(sidecar_id))
}

fn bounded_mode(mode: &str) -> &'static str {
    match mode {
        "task" => "task",
        _ => "wait",
    }
}

async fn send_adopt(
    tx: &mpsc::Sender<Result<pb::ControlMessage, Status>>,
    server: &str,
    sidecar_id: &str,
    calls: Vec<pb::BackgroundCall>,
) {
    for chunk in calls.chunks(ADOPT_BATCH) {
        let msg = pb::ControlMessage {
            message: Some(pb::control_message::Message::Adopt(pb::BackgroundCalls {
                calls: chunk.to_vec(),
            })),
        };
        match tokio::time::timeout(Duration::from_secs(5), tx.send(Ok(msg))).await {
            Ok(Ok(())) => {
                tracing::info!(%server, sidecar = %sidecar_id, calls = chunk.len(), "background tasks sent to the sidecar to poll")
            }
            // The stream is gone or stuck: the calls' owner is then not
            // live, and the next sweep adopts them elsewhere.
            _ => {
                tracing::warn!(%server, sidecar = %sidecar_id, "could not send adopted background tasks to the sidecar");
                return;
            }
        }
    }
}
