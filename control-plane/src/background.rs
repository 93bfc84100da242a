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
//!   does a call past its deadline. Finished records older than
//!   `backgroundCalls.retentionSec` are deleted.

use crate::ControlPlane;
use crate::config::BackgroundCallsConfig;
use crate::metrics::Metrics;
use crate::model::{background_key, now_ms, server_key, sidecar_key};
use crate::state::Snapshot;
use crate::store::cas::{self, Decision, Write};
use crate::store::{AnyStore, Compare, KeyValue, Metered, Op, Store, StoreError, Txn};
use serde::Serialize;
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

impl From<BackgroundError> for Status {
    fn from(e: BackgroundError) -> Status {
        match &e {
            BackgroundError::Invalid(_) => Status::invalid_argument(e.to_string()),
            BackgroundError::NotFound(_) | BackgroundError::UnknownServer(_) => {
                Status::not_found(e.to_string())
            }
            BackgroundError::Finished { .. } | BackgroundError::NotRegistered { .. } => {
                Status::failed_precondition(e.to_string())
            }
            BackgroundError::Contention(_) => Status::aborted(e.to_string()),
            BackgroundError::Store(_) => Status::unavailable(format!(
                "store unavailable: {}",
                switchyard_common::error_chain(&e)
            )),
        }
    }
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

fn json<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("records serialise")
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

/// Ids that become store key segments: 1 to 128 characters, no `/`, no
/// control characters. `field` names the request field in the error.
fn check_id(field: &str, id: &str) -> Result<(), BackgroundError> {
    if id.is_empty() || id.len() > 128 || id.contains('/') || id.chars().any(char::is_control) {
        return Err(BackgroundError::Invalid(format!(
            "{field}: 1 to 128 characters, without '/' or control characters (got {} bytes)",
            id.len()
        )));
    }
    Ok(())
}

/// The most calls one `ListBackgroundCalls` page holds.
pub const MAX_PAGE_SIZE: u32 = 1000;

/// One page of `records` (oldest first, by creation time then id, as
/// [`Background::list`] returns them): at most `page_size` (0: all) after
/// the position `page_token` names, and the token of the next page when
/// more follow. A token is `<created_at_ms>:<id>` of the last call of the
/// page before; callers treat it as opaque. Errors: a `page_size` over
/// [`MAX_PAGE_SIZE`], or a token this function did not make.
pub fn page_of(
    records: Vec<BackgroundRecord>,
    page_size: u32,
    page_token: &str,
) -> Result<(Vec<BackgroundRecord>, String), BackgroundError> {
    if page_size > MAX_PAGE_SIZE {
        return Err(BackgroundError::Invalid(format!(
            "page_size: {page_size} is over the maximum {MAX_PAGE_SIZE}"
        )));
    }
    let after = if page_token.is_empty() {
        None
    } else {
        let parsed = page_token
            .split_once(':')
            .and_then(|(t, id)| Some((t.parse::<i64>().ok()?, id)))
            .filter(|(_, id)| !id.is_empty());
        Some(parsed.ok_or_else(|| {
            BackgroundError::Invalid(
                "page_token: not a token that ListBackgroundCalls returned".into(),
            )
        })?)
    };
    let mut rest: Vec<_> = records
        .into_iter()
        .filter(|r| after.is_none_or(|(t, id)| (r.created_at_ms, r.id.as_str()) > (t, id)))
        .collect();
    if page_size == 0 || rest.len() <= page_size as usize {
        return Ok((rest, String::new()));
    }
    rest.truncate(page_size as usize);
    let last = rest.last().expect("page_size >= 1");
    let next = format!("{}:{}", last.created_at_ms, last.id);
    Ok((rest, next))
}

/// What the model reads when a call moved to the background: the fixed
/// sentence, then the server's model-immediate-response text, if any.
pub fn moved_text(engine_tool: &str, id: &str, immediate_response: &str) -> String {
    let mut text = format!(
        "The call to {engine_tool} is still running and has moved to the background (id {id}). Its result will arrive as a new message when it finishes. End this turn."
    );
    if !immediate_response.is_empty() {
        text.push_str("\n\n");
        text.push_str(immediate_response);
    }
    text
}

/// The session event of a terminal record: `background_call.<status>`,
/// at its `finished_at_ms`, data = the record's proto3 JSON form.
pub fn event_of(rec: &BackgroundRecord) -> pb::SessionEvent {
    pb::SessionEvent {
        r#type: format!("background_call.{}", rec.status),
        session_id: rec.session_id.clone(),
        at_ms: rec.finished_at_ms,
        data_json: rec.to_json().to_string(),
    }
}

/// Whether a change record is an event for `session`: terminal, the
/// session's.
pub fn is_event_for(rec: &BackgroundRecord, session: &str) -> bool {
    rec.is_terminal() && rec.session_id == session
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
    /// in the order they finished (the replay of `SubscribeEvents`).
    pub async fn finished_of(
        &self,
        session: &str,
        after_ms: i64,
    ) -> Result<Vec<BackgroundRecord>, BackgroundError> {
        let mut done: Vec<_> = self
            .list_all()
            .await?
            .into_iter()
            .filter(|r| is_event_for(r, session) && r.finished_at_ms > after_ms)
            .collect();
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
                    rec.tool = s.tool.clone();
                    rec.engine_tool = s.engine_tool.clone();
                    rec.session_id = s.session_id.clone();
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
    /// Errors: [`BackgroundError::NotFound`], [`BackgroundError::Finished`].
    pub async fn cancel(
        &self,
        cp: &ControlPlane,
        id: &str,
        session: &str,
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
                r.status_message = "cancelled by the user".into();
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

    /// A sidecar said hello on a report stream this replica holds: the
    /// calls it owns (a sidecar that reconnected, or restarted with the
    /// same id: task mode and wait mode) and the task-mode calls whose
    /// sidecar is gone are sent to it in `adopt` messages.
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
    Decision::Write(Write::put(json(&rec)), Some(rec))
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
async fn tell_sidecar_cancel(cp: &ControlPlane, rec: &BackgroundRecord) {
    let snap = cp.state.snapshot();
    let Some(sidecar) = snap
        .sidecars
        .get(&rec.server)
        .and_then(|m| m.get(&rec.sidecar_id))
    else {
        tracing::debug!(id = %rec.id, sidecar = %rec.sidecar_id, "the background call's sidecar is gone; nothing to cancel there");
        return;
    };
    let mut client = match cp.router.sidecar_client(&sidecar.call_address) {
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

/// The longest values of a record's identifying fields, in bytes (the
/// record must stay under [`MAX_RECORD_BYTES`] whatever a sidecar sends).
const FIELD_LIMITS: [(&str, usize); 7] = [
    ("call.server", 256),
    ("call.tool", 1024),
    ("call.engine_tool", 1024),
    ("call.run_id", 256),
    ("call.task_id", 4096),
    ("call.sidecar_id", 256),
    ("call.protocol_version", 64),
];

/// Refuses identifying fields over [`FIELD_LIMITS`] (INVALID_ARGUMENT
/// naming the field).
fn check_lengths(rec: &BackgroundRecord) -> Result<(), BackgroundError> {
    let values = [
        &rec.server,
        &rec.tool,
        &rec.engine_tool,
        &rec.run_id,
        &rec.task_id,
        &rec.sidecar_id,
        &rec.protocol_version,
    ];
    for ((field, limit), value) in FIELD_LIMITS.iter().zip(values) {
        if value.len() > *limit {
            return Err(BackgroundError::Invalid(format!(
                "{field}: {} bytes, at most {limit}",
                value.len()
            )));
        }
    }
    Ok(())
}

/// How much of a long text field is kept when a record is too large.
const KEPT_TEXT_BYTES: usize = 16 * 1024;

/// Cuts `text` to at most `max` bytes (at a character boundary), marking
/// the cut. True if it was cut.
fn cut(text: &mut String, max: usize) -> bool {
    if text.len() <= max {
        return false;
    }
    let total = text.len();
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(&format!("... [cut: {total} bytes in all]"));
    true
}

/// Keeps a record under [`MAX_RECORD_BYTES`], so that it can be stored
/// (etcd refuses requests over 1.5 MiB) and listed: when it is larger, the
/// attachments' content is dropped first, then the raw result
/// (`result_json`) and `structured_content_json` (the model text still
/// carries the result), then long texts are cut to [`KEPT_TEXT_BYTES`];
/// each step is noted in `status_message`. A terminal record still too
/// large (a huge attachment list) loses its result and fails, saying so;
/// a running one is refused (INVALID_ARGUMENT). Returns the JSON.
fn fit(rec: &mut BackgroundRecord) -> Result<Vec<u8>, BackgroundError> {
    let original = json(rec).len();
    if original <= MAX_RECORD_BYTES {
        return Ok(json(rec));
    }
    let mut notes: Vec<&str> = Vec::new();
    if let Some(r) = rec.result.as_mut()
        && r.attachments.iter().any(|a| !a.data.is_empty())
    {
        for a in &mut r.attachments {
            a.data.clear();
        }
        notes.push("the result's attachments were too large to keep and were dropped");
    }
    let small = |rec: &BackgroundRecord| json(rec).len() <= MAX_RECORD_BYTES;
    if !small(rec)
        && let Some(r) = rec.result.as_mut()
    {
        if !r.result_json.is_empty() {
            r.result_json.clear();
            notes.push("the raw result was too large to keep and was dropped");
        }
        if !small(rec)
            && let Some(r) = rec.result.as_mut()
            && !r.structured_content_json.is_empty()
        {
            r.structured_content_json.clear();
            notes.push("the structured content was too large to keep and was dropped");
        }
    }
    if !small(rec) {
        let mut any = false;
        for text in [
            &mut rec.status_message,
            &mut rec.last_poll_error,
            &mut rec.error_json,
            &mut rec.immediate_response,
        ] {
            any |= cut(text, KEPT_TEXT_BYTES);
        }
        if let Some(r) = rec.result.as_mut() {
            any |= cut(&mut r.model_text, KEPT_TEXT_BYTES);
            if r.validation_errors.len() > 20 {
                r.validation_errors.truncate(20);
                any = true;
            }
            for e in &mut r.validation_errors {
                any |= cut(e, 1024);
            }
        }
        if any {
            notes.push("long texts were cut");
        }
    }
    if !small(rec) {
        if !rec.is_terminal() {
            return Err(BackgroundError::Invalid(format!(
                "call: the record is {original} bytes, over the {MAX_RECORD_BYTES}-byte limit even with its long texts cut"
            )));
        }
        rec.result = None;
        rec.status = "failed".into();
        rec.status_message =
            format!("the call finished, but its result ({original} bytes) was too large to keep");
        notes.clear();
    }
    if !notes.is_empty() {
        let note = format!("({})", notes.join("; "));
        if rec.status_message.is_empty() {
            rec.status_message = note;
        } else {
            rec.status_message = format!("{} {note}", rec.status_message);
        }
    }
    tracing::warn!(id = %rec.id, bytes = original, kept = json(rec).len(), "background call record too large: {}", rec.status_message);
    Ok(json(rec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_version_4() {
        let id = new_uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(id, new_uuid());
    }

    #[test]
    fn pages_follow_creation_order_without_gaps_or_repeats() {
        let rec = |created: i64, id: &str| BackgroundRecord {
            id: id.into(),
            created_at_ms: created,
            ..Default::default()
        };
        // Two calls created in the same millisecond are ordered by id.
        let all = vec![
            rec(1, "a"),
            rec(2, "b"),
            rec(2, "c"),
            rec(3, "d"),
            rec(4, "e"),
        ];
        let ids = |page: &[BackgroundRecord]| page.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
        let mut seen = Vec::new();
        let mut token = String::new();
        let mut pages = 0;
        loop {
            let (page, next) = page_of(all.clone(), 2, &token).unwrap();
            assert!(page.len() <= 2);
            seen.extend(ids(&page));
            pages += 1;
            if next.is_empty() {
                break;
            }
            token = next;
        }
        assert_eq!((seen, pages), (ids(&all), 3));
        // 0: everything at once, no token.
        assert_eq!(
            page_of(all.clone(), 0, "").unwrap(),
            (all.clone(), String::new())
        );
        // A call created after the first page was read comes later, once.
        let (first, token) = page_of(all.clone(), 2, "").unwrap();
        assert_eq!(ids(&first), ["a", "b"]);
        let mut grown = all.clone();
        grown.push(rec(5, "f"));
        let (rest, next) = page_of(grown, 0, &token).unwrap();
        assert_eq!(
            (ids(&rest), next),
            (
                vec!["c".to_owned(), "d".into(), "e".into(), "f".into()],
                String::new()
            )
        );
        // Bad input.
        for bad in ["x", "12", "12:", ":a", "a:b"] {
            let e = page_of(all.clone(), 2, bad).unwrap_err();
            assert!(e.to_string().contains("page_token"), "{bad}: {e}");
        }
        let e = page_of(all, MAX_PAGE_SIZE + 1, "").unwrap_err();
        assert!(e.to_string().contains("page_size: 1001"), "{e}");
    }

    #[test]
    fn records_round_trip_in_proto3_json_form() {
        let rec = BackgroundRecord {
            id: "b1".into(),
            server: "s".into(),
            mode: "task".into(),
            task_id: "t".into(),
            status: "completed".into(),
            finished_at_ms: 5,
            result: Some(BackgroundResultRecord {
                model_text: "done".into(),
                attachments: vec![AttachmentRecord {
                    name: "a.bin".into(),
                    data: vec![0, 1, 2],
                    size_bytes: 3,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = rec.to_json();
        assert_eq!(v["taskId"], "t");
        assert_eq!(v["finishedAtMs"], 5);
        assert_eq!(v["result"]["modelText"], "done");
        assert_eq!(v["result"]["attachments"][0]["data"], "AAEC");
        let back: BackgroundRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, rec);
        assert_eq!(BackgroundRecord::from_pb(rec.to_pb()), rec);
        let ev = event_of(&rec);
        assert_eq!(ev.r#type, "background_call.completed");
        assert_eq!(ev.at_ms, 5);
    }

    #[test]
    fn moved_text_carries_the_immediate_response() {
        let t = moved_text("s__t", "id-1", "Working on it.");
        assert!(t.starts_with("The call to s__t is still running and has moved to the background (id id-1). Its result will arrive as a new message when it finishes. End this turn.\n\nWorking on it."), "{t}");
        assert!(moved_text("s__t", "id-1", "").ends_with("End this turn."));
    }

    #[test]
    fn oversized_records_lose_attachment_content() {
        let mut rec = BackgroundRecord {
            id: "b".into(),
            status: "completed".into(),
            result: Some(BackgroundResultRecord {
                attachments: vec![AttachmentRecord {
                    data: vec![7; MAX_RECORD_BYTES],
                    size_bytes: MAX_RECORD_BYTES as u64,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = fit(&mut rec).unwrap();
        assert!(v.len() < MAX_RECORD_BYTES);
        assert!(rec.status_message.contains("too large"));
        assert_eq!(
            rec.result.unwrap().attachments[0].size_bytes,
            MAX_RECORD_BYTES as u64
        );
    }

    #[test]
    fn oversized_records_lose_the_raw_result_then_long_texts() {
        // A 3 MB raw result: dropped, the model text kept.
        let mut rec = BackgroundRecord {
            id: "b".into(),
            status: "completed".into(),
            result: Some(BackgroundResultRecord {
                result_json: "r".repeat(3_000_000),
                model_text: "the beginning".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = fit(&mut rec).unwrap();
        assert!(v.len() <= MAX_RECORD_BYTES);
        let r = rec.result.as_ref().unwrap();
        assert!(r.result_json.is_empty());
        assert_eq!(r.model_text, "the beginning");
        assert_eq!(rec.status, "completed");
        assert!(rec.status_message.contains("raw result was too large"));
        // A 2 MB status message of a running call: cut at a character
        // boundary.
        let mut rec = BackgroundRecord {
            id: "w".into(),
            status: "working".into(),
            status_message: "é".repeat(1_000_000),
            ..Default::default()
        };
        let v = fit(&mut rec).unwrap();
        assert!(v.len() < 20_000);
        assert!(rec.status_message.contains("cut: 2000000 bytes in all"));
        // A terminal record that cannot be cut small enough: failed, saying
        // why; a running one: refused.
        let many = |status: &str| BackgroundRecord {
            id: "m".into(),
            status: status.into(),
            result: Some(BackgroundResultRecord {
                attachments: vec![
                    AttachmentRecord {
                        name: "n".repeat(100),
                        ..Default::default()
                    };
                    20_000
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut rec = many("completed");
        let v = fit(&mut rec).unwrap();
        assert!(v.len() <= MAX_RECORD_BYTES);
        assert_eq!(rec.status, "failed");
        assert!(rec.result.is_none());
        assert!(
            rec.status_message.contains("too large to keep"),
            "{}",
            rec.status_message
        );
        let mut rec = many("working");
        assert!(
            matches!(fit(&mut rec), Err(BackgroundError::Invalid(m)) if m.contains("over the 1048576-byte limit"))
        );
    }
}
