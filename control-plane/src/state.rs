//! Each replica's read model of the store: servers, live sidecars,
//! catalogues, the name map, tool hint overrides and policies, sessions and
//! their interactions, kept current by one list and a
//! watch from the next revision (the informer pattern). Reads on the call
//! path never wait on the store; writes go to the store and come back
//! through the watch, so every replica converges on the same state. A
//! replica that wrote something can wait for its own write with
//! [`State::wait_for`].
//!
//! Background calls (`background/<id>`, stage B) are not part of the
//! [`Snapshot`] (it is cloned per change, and there may be many thousands
//! of them): each put is broadcast as [`Change::Background`], and a small
//! index of them ([`BackgroundEntry`]) is kept beside the snapshot for the
//! sweeper and the `maxPerTarget` count.
//!
//! A value that does not parse (a tampered or foreign key) is logged with
//! its key and ignored; everything else keeps serving.

use crate::model::background::BackgroundRecord;
use crate::model::interaction::{InteractionRecord, Status};
use crate::model::*;
use crate::names::{NameMap, ToolRef};
use crate::store::{KeyValue, Revision, Store, WatchEvent};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// Something that changed, for subscribers (session event streams, the
/// sidecar supervisor of `switchyard up`, cancellations).
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A server's tool list or capabilities really changed.
    ToolsChanged {
        /// Server.
        server: String,
        /// Its new `toolsUpdatedAt`.
        tools_updated_at: i64,
    },
    /// A server's resources or resource templates really changed (stage
    /// E).
    ResourcesChanged {
        /// Server.
        server: String,
        /// Its new `resourcesUpdatedAt`.
        resources_updated_at: i64,
    },
    /// A server's prompts really changed (stage E).
    PromptsChanged {
        /// Server.
        server: String,
        /// Its new `promptsUpdatedAt`.
        prompts_updated_at: i64,
    },
    /// An administrator changed a server's tool hints or policies (what
    /// engines see of its tools may have changed).
    ToolSettingsChanged {
        /// Server.
        server: String,
    },
    /// A server was added, updated or removed.
    ServersChanged,
    /// A session was deleted.
    SessionDeleted(String),
    /// A 2025-11-25 session of the MCP endpoint (`mcp-sessions/<id>`) was
    /// opened, changed or ended (its record is in the snapshot, or gone).
    McpSession(String),
    /// An interaction appeared, changed or vanished.
    Interaction(Box<InteractionChange>),
    /// Some replica asked to cancel a call.
    Cancel {
        /// The call's scope (`call::route::call_scope`): its session, or
        /// its caller for a call without one.
        scope: String,
        /// Call id.
        call_id: String,
    },
    /// A detached MCP call of run `run` ended (`mcp-outcomes/<run>`; the
    /// record itself is read from the store, it is not in the snapshot).
    McpOutcome {
        /// The run.
        run: String,
    },
    /// A background call was created or updated (the record as written;
    /// a terminal one is its `background_call.*` event).
    Background(Box<BackgroundRecord>),
}

/// The background calls index: an entry per record, the number of
/// running (non-terminal) calls per server, kept up to date as entries
/// come and go, since every engine call reads it (`maxPerTarget`), and the
/// finished calls of each session in the order they finished (the replay
/// of `SubscribeEvents` reads those records only, never the whole prefix).
#[derive(Debug, Default, Clone)]
struct BackgroundIndex {
    entries: HashMap<String, BackgroundEntry>,
    running: HashMap<String, usize>,
    finished: HashMap<String, std::collections::BTreeSet<(i64, String)>>,
}

impl BackgroundIndex {
    /// See [`State::background_not_owned_by`].
    fn not_owned_by(&self, server: &str, sidecar_id: &str, ids: &[String]) -> Vec<String> {
        ids.iter()
            .filter(|id| {
                self.entries.get(*id).is_some_and(|e| {
                    e.server == server
                        && (crate::model::background::is_terminal(&e.status)
                            || e.sidecar_id != sidecar_id)
                })
            })
            .cloned()
            .collect()
    }

    fn insert(&mut self, id: String, entry: BackgroundEntry) {
        self.remove(&id);
        if !crate::model::background::is_terminal(&entry.status) {
            *self.running.entry(entry.server.clone()).or_default() += 1;
        } else if !entry.session_id.is_empty() {
            self.finished
                .entry(entry.session_id.clone())
                .or_default()
                .insert((entry.finished_at_ms, id.clone()));
        }
        self.entries.insert(id, entry);
    }

    fn remove(&mut self, id: &str) {
        let Some(old) = self.entries.remove(id) else {
            return;
        };
        if !crate::model::background::is_terminal(&old.status) {
            if let Some(n) = self.running.get_mut(&old.server) {
                *n -= 1;
                if *n == 0 {
                    self.running.remove(&old.server);
                }
            }
        } else if let Some(done) = self.finished.get_mut(&old.session_id) {
            done.remove(&(old.finished_at_ms, id.to_owned()));
            if done.is_empty() {
                self.finished.remove(&old.session_id);
            }
        }
    }
}

/// What the read model keeps of a background call (the record itself
/// stays in the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackgroundEntry {
    /// Server.
    pub server: String,
    /// Initiating session.
    pub session_id: String,
    /// Owning sidecar.
    pub sidecar_id: String,
    /// `wait` or `task`.
    pub mode: String,
    /// Status.
    pub status: String,
    /// Deadline, ms since the epoch.
    pub deadline_ms: i64,
    /// When it finished, ms since the epoch (0: running).
    pub finished_at_ms: i64,
    /// The sidecar that created it, when another one owns it now (it was
    /// adopted); empty otherwise (no allocation for the usual case).
    pub creator_sidecar_id: String,
}

impl BackgroundEntry {
    /// The entry of `rec`.
    pub fn of(rec: &BackgroundRecord) -> Self {
        BackgroundEntry {
            server: rec.server.clone(),
            session_id: rec.session_id.clone(),
            sidecar_id: rec.sidecar_id.clone(),
            mode: rec.mode.clone(),
            status: rec.status.clone(),
            deadline_ms: rec.deadline_ms,
            finished_at_ms: rec.finished_at_ms,
            creator_sidecar_id: if rec.creator_sidecar_id == rec.sidecar_id {
                String::new()
            } else {
                rec.creator_sidecar_id.clone()
            },
        }
    }
}

/// A change of one interaction in a replica's read model.
#[derive(Debug, Clone, PartialEq)]
pub struct InteractionChange {
    /// Session.
    pub session: String,
    /// Interaction id.
    pub id: String,
    /// Status before (None: it was not there).
    pub before: Option<Status>,
    /// The record now (None: it vanished).
    pub after: Option<InteractionRecord>,
}

impl InteractionChange {
    /// An open interaction appeared: `interaction.required`.
    pub fn required(&self) -> Option<&InteractionRecord> {
        self.after
            .as_ref()
            .filter(|r| self.before.is_none() && r.status == Status::Open)
    }

    /// It was resolved: `interaction.resolved`.
    pub fn resolved(&self) -> Option<&InteractionRecord> {
        self.after
            .as_ref()
            .filter(|r| r.status == Status::Resolved && self.before != Some(Status::Resolved))
    }
}

/// The read model.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Last applied store revision (writes of background calls, which
    /// are not in the snapshot, do not move it).
    pub revision: Revision,
    /// Servers.
    pub servers: BTreeMap<String, ServerRecord>,
    /// Live sidecars per server.
    pub sidecars: BTreeMap<String, BTreeMap<String, SidecarRecord>>,
    /// Catalogues per server (shared: a snapshot is made per change).
    pub catalogues: BTreeMap<String, Arc<CatalogueRecord>>,
    /// Resources, templates and prompts per server (stage E); shared, as
    /// the lists may be long and the snapshot is cloned per change.
    pub resource_catalogues: BTreeMap<String, Arc<ResourceCatalogueRecord>>,
    /// Engine-visible names (shared: a snapshot is made per change).
    pub names: Arc<NameMap>,
    /// `(server, tool)` -> engine-visible name (shared likewise).
    pub name_of: Arc<HashMap<(String, String), String>>,
    /// Sessions.
    pub sessions: imbl::HashMap<String, SessionRecord>,
    /// 2025-11-25 sessions of the MCP endpoint, by `Mcp-Session-Id`.
    pub mcp_sessions: imbl::HashMap<String, crate::model::mcp_session::McpSessionRecord>,
    /// The keys that seal the MCP endpoint's `requestState`s (a secret:
    /// never logged nor shown).
    pub mcp_state_keys: Option<Arc<crate::model::mrtr::StateKeyRing>>,
    /// Interactions per session, by id (pending and recently resolved).
    pub interactions: imbl::HashMap<String, BTreeMap<String, InteractionRecord>>,
    /// Hint overrides per `(server, tool)`.
    pub hint_overrides: imbl::HashMap<(String, String), HintOverrideRecord>,
    /// Administrators' policies per `(server, tool)`.
    pub policies: imbl::HashMap<(String, String), PolicyRecord>,
}

impl Snapshot {
    /// Where an engine-visible name leads.
    pub fn resolve(&self, name: &str) -> Option<&ToolRef> {
        self.names.names.get(name)
    }

    /// The engine-visible name of a tool (computed directly when the name
    /// map has not caught up with a new catalogue yet).
    pub fn engine_name(&self, server: &str, tool: &str) -> String {
        self.name_of
            .get(&(server.to_owned(), tool.to_owned()))
            .cloned()
            .unwrap_or_else(|| crate::names::plain_name(server, tool))
    }

    /// The counts behind the read model's gauges (see
    /// [`crate::metrics::Metrics::observe_state`]).
    pub fn gauges(&self) -> crate::metrics::StateGauges {
        let pending = |kind: &str| {
            self.interactions
                .values()
                .flat_map(|m| m.values())
                .filter(|r| r.is_pending() && r.kind.as_str() == kind)
                .count()
        };
        crate::metrics::StateGauges {
            sessions: self.sessions.len(),
            mcp_sessions: self.mcp_sessions.len(),
            interactions_pending: ["form", "url", "approval"]
                .into_iter()
                .map(|kind| (kind, pending(kind)))
                .collect(),
            sidecars_up: self
                .servers
                .keys()
                .map(|name| (name.clone(), self.sidecars.get(name).map_or(0, |m| m.len())))
                .collect(),
        }
    }

    /// Whether `server` has a live sidecar whose upstream is connected.
    pub fn connected(&self, server: &str) -> bool {
        self.sidecars
            .get(server)
            .is_some_and(|m| m.values().any(|s| s.upstream_state == "connected"))
    }

    /// The administrator's policy of a tool, if set.
    pub fn policy_set(&self, server: &str, tool: &str) -> Option<ToolPolicy> {
        self.policies
            .get(&(server.to_owned(), tool.to_owned()))
            .and_then(|p| p.policy)
    }

    /// Whether the administrator made the tool's calls move to the
    /// background at once (`background: always`).
    pub fn background_always(&self, server: &str, tool: &str) -> bool {
        self.policies
            .get(&(server.to_owned(), tool.to_owned()))
            .and_then(|p| p.background)
            == Some(BackgroundMode::Always)
    }
}

/// Shared state of one replica.
#[derive(Debug)]
pub struct State {
    snapshot: RwLock<Arc<Snapshot>>,
    background: RwLock<BackgroundIndex>,
    changes: broadcast::Sender<Change>,
    applied: watch::Sender<Revision>,
    /// The highest store revision of a write made through this replica
    /// (its APIs call [`State::wait_for`] after each write): calls on this
    /// replica wait until the read model has it (read your writes).
    written: std::sync::atomic::AtomicI64,
    /// Keys under the store's root, as the watch has shown them: set by
    /// each full listing, +1 for a put that creates a key (`version` 1),
    /// -1 for a delete (the stores send one for existing keys only). Read
    /// by the `switchyard_control_plane_store_keys` gauge.
    keys: std::sync::atomic::AtomicI64,
}

impl State {
    /// Loads everything under the root and follows the store's changes in
    /// the background. Errors: the initial listing failed.
    pub async fn start(
        store: impl Store + 'static,
    ) -> Result<Arc<State>, crate::store::StoreError> {
        let listing = store.list("").await?;
        let mut snap = Snapshot::default();
        let mut sink = Vec::new();
        let mut background = BackgroundIndex::default();
        for kv in &listing.kvs {
            if !background_put(&mut background, kv, &mut sink) {
                apply_put(&mut snap, kv, &mut sink);
            }
        }
        snap.revision = listing.revision;
        let state = Arc::new(State {
            snapshot: RwLock::new(Arc::new(snap)),
            background: RwLock::new(background),
            changes: broadcast::channel(1024).0,
            applied: watch::channel(listing.revision).0,
            written: std::sync::atomic::AtomicI64::new(listing.revision),
            keys: std::sync::atomic::AtomicI64::new(listing.kvs.len() as i64),
        });
        let weak = Arc::downgrade(&state);
        tokio::spawn(async move {
            let mut from = listing.revision + 1;
            loop {
                let Some(state) = weak.upgrade() else { return };
                match follow(&state, &store, from).await {
                    Ok(next) => from = next,
                    Err(e) => {
                        tracing::warn!(error = %e, "store watch ended; re-reading the store");
                        drop(state);
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        let Some(state) = weak.upgrade() else { return };
                        match store.list("").await {
                            Ok(listing) => {
                                state.replace(&listing.kvs, listing.revision);
                                from = listing.revision + 1;
                            }
                            Err(e) => tracing::warn!(error = %e, "re-reading the store failed"),
                        }
                    }
                }
            }
        });
        Ok(state)
    }

    /// How many keys the store holds under its root, as this replica's
    /// watch has shown them (every kind, leased ones included).
    pub fn store_keys(&self) -> i64 {
        self.keys.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The current snapshot (cheap: an `Arc`).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.read().unwrap().clone()
    }

    /// The background calls index: `(id, entry)` of every record.
    pub fn background_index(&self) -> Vec<(String, BackgroundEntry)> {
        self.background
            .read()
            .unwrap()
            .entries
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Of `ids`, the calls of `server` the read model knows as final or
    /// owned by another sidecar than `sidecar_id`; ids it does not know,
    /// and other servers' calls, are left out.
    pub fn background_not_owned_by(
        &self,
        server: &str,
        sidecar_id: &str,
        ids: &[String],
    ) -> Vec<String> {
        self.background
            .read()
            .unwrap()
            .not_owned_by(server, sidecar_id, ids)
    }

    /// The ids of `session`'s finished background calls with
    /// `finished_at_ms > after_ms`, in the order they finished (then by id).
    pub fn finished_background(&self, session: &str, after_ms: i64) -> Vec<String> {
        let index = self.background.read().unwrap();
        let Some(done) = index.finished.get(session) else {
            return Vec::new();
        };
        done.range((after_ms.saturating_add(1), String::new())..)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// Running (non-terminal) background calls of `server`.
    pub fn background_running(&self, server: &str) -> usize {
        self.background
            .read()
            .unwrap()
            .running
            .get(server)
            .copied()
            .unwrap_or(0)
    }

    /// Subscribes to changes.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Notes a write made through this replica at `revision` and waits (up
    /// to `limit`) until the snapshot has applied it. Returns false on
    /// timeout; calls still wait for it ([`State::caught_up`]).
    pub async fn wait_for(&self, revision: Revision, limit: Duration) -> bool {
        self.written
            .fetch_max(revision, std::sync::atomic::Ordering::AcqRel);
        self.applied_by(revision, limit).await
    }

    /// Waits (up to `limit`) until the snapshot has every write made
    /// through this replica ([`State::wait_for`]), so a call after an admin
    /// write that returned obeys it. At once (no wait, no allocation) when
    /// it has. Returns false on timeout.
    pub async fn caught_up(&self, limit: Duration) -> bool {
        let written = self.written.load(std::sync::atomic::Ordering::Acquire);
        *self.applied.borrow() >= written || self.applied_by(written, limit).await
    }

    async fn applied_by(&self, revision: Revision, limit: Duration) -> bool {
        let mut rx = self.applied.subscribe();
        tokio::time::timeout(limit, rx.wait_for(|r| *r >= revision))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    fn apply(&self, events: &[WatchEvent]) {
        let created = events
            .iter()
            .map(|ev| match ev {
                WatchEvent::Put(kv) => i64::from(kv.version == 1),
                WatchEvent::Delete { .. } => -1,
            })
            .sum::<i64>();
        self.keys
            .fetch_add(created, std::sync::atomic::Ordering::Relaxed);
        let mut changes = Vec::new();
        // Background calls alone do not need a new snapshot (nor its lock).
        let only_background = events
            .iter()
            .all(|ev| ev.key().starts_with(crate::model::background::PREFIX));
        let revision = {
            if only_background {
                let mut background = self.background.write().unwrap();
                for ev in events {
                    match ev {
                        WatchEvent::Put(kv) => {
                            background_put(&mut background, kv, &mut changes);
                        }
                        WatchEvent::Delete { key, .. } => background_delete(&mut background, key),
                    }
                }
                events
                    .iter()
                    .map(WatchEvent::revision)
                    .fold(*self.applied.borrow(), i64::max)
            } else {
                let mut guard = self.snapshot.write().unwrap();
                let mut background = self.background.write().unwrap();
                let mut snap = (**guard).clone();
                for ev in events {
                    match ev {
                        WatchEvent::Put(kv) => {
                            if !background_put(&mut background, kv, &mut changes) {
                                apply_put(&mut snap, kv, &mut changes)
                            }
                        }
                        WatchEvent::Delete { key, .. } => {
                            background_delete(&mut background, key);
                            apply_delete(&mut snap, key, &mut changes)
                        }
                    }
                    snap.revision = snap.revision.max(ev.revision());
                }
                let revision = snap.revision;
                *guard = Arc::new(snap);
                revision
            }
        };
        for c in changes {
            let _ = self.changes.send(c);
        }
        self.applied.send_replace(revision);
    }

    fn replace(&self, kvs: &[KeyValue], revision: Revision) {
        self.keys
            .store(kvs.len() as i64, std::sync::atomic::Ordering::Relaxed);
        let mut snap = Snapshot::default();
        let mut sink = Vec::new();
        let mut background = BackgroundIndex::default();
        let mut background_changes = Vec::new();
        for kv in kvs {
            if !background_put(&mut background, kv, &mut background_changes) {
                apply_put(&mut snap, kv, &mut sink);
            }
        }
        snap.revision = revision;
        let old = std::mem::replace(&mut *self.snapshot.write().unwrap(), Arc::new(snap.clone()));
        let old_background =
            std::mem::replace(&mut *self.background.write().unwrap(), background.clone());
        // Background calls that changed while the watch was down (event
        // streams deduplicate by id).
        for c in background_changes {
            if let Change::Background(rec) = &c
                && old_background.entries.get(&rec.id) != background.entries.get(&rec.id)
            {
                let _ = self.changes.send(c);
            }
        }
        for (server, cat) in &snap.catalogues {
            if old.catalogues.get(server).map(|c| c.tools_updated_at) != Some(cat.tools_updated_at)
            {
                let _ = self.changes.send(Change::ToolsChanged {
                    server: server.clone(),
                    tools_updated_at: cat.tools_updated_at,
                });
            }
        }
        for (server, cat) in &snap.resource_catalogues {
            let before = old.resource_catalogues.get(server);
            if before.map(|c| c.resources_updated_at) != Some(cat.resources_updated_at) {
                let _ = self.changes.send(Change::ResourcesChanged {
                    server: server.clone(),
                    resources_updated_at: cat.resources_updated_at,
                });
            }
            if before.map(|c| c.prompts_updated_at) != Some(cat.prompts_updated_at) {
                let _ = self.changes.send(Change::PromptsChanged {
                    server: server.clone(),
                    prompts_updated_at: cat.prompts_updated_at,
                });
            }
        }
        for c in interaction_diff(&old, &snap) {
            let _ = self.changes.send(c);
        }
        let _ = self.changes.send(Change::ServersChanged);
        self.applied.send_replace(revision);
    }
}

/// Follows the watch; returns the next revision to resume from on a clean
/// end, or the error.
async fn follow(
    state: &State,
    store: &impl Store,
    from: Revision,
) -> Result<Revision, crate::store::StoreError> {
    let mut stream = store.watch("", Some(from)).await?;
    let mut next = from;
    while let Some(ev) = stream.next().await {
        let ev = ev?;
        next = ev.revision() + 1;
        state.apply(std::slice::from_ref(&ev));
    }
    Ok(next)
}

fn parse<T: serde::de::DeserializeOwned>(kv: &KeyValue) -> Option<T> {
    match serde_json::from_slice(&kv.value) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(key = %kv.key, error = %e, "ignoring a store value that does not parse");
            None
        }
    }
}

/// Applies a put if it is a background call's (returns false otherwise):
/// the index is updated and the record broadcast.
fn background_put(index: &mut BackgroundIndex, kv: &KeyValue, changes: &mut Vec<Change>) -> bool {
    let Some(id) = kv.key.strip_prefix(crate::model::background::PREFIX) else {
        return false;
    };
    if let Some(rec) = parse::<BackgroundRecord>(kv) {
        if rec.id != id {
            tracing::warn!(key = %kv.key, "ignoring a background call record stored under another key");
            return true;
        }
        index.insert(id.to_owned(), BackgroundEntry::of(&rec));
        changes.push(Change::Background(Box::new(rec)));
    }
    true
}

fn background_delete(index: &mut BackgroundIndex, key: &str) {
    if let Some(id) = key.strip_prefix(crate::model::background::PREFIX) {
        index.remove(id);
    }
}

fn apply_put(snap: &mut Snapshot, kv: &KeyValue, changes: &mut Vec<Change>) {
    let key = kv.key.as_str();
    if let Some(name) = key.strip_prefix("servers/") {
        match parse::<ServerRecord>(kv) {
            Some(rec) if rec.spec.name == name && rec.spec.validate("spec").is_ok() => {
                snap.servers.insert(name.to_owned(), rec);
                changes.push(Change::ServersChanged);
            }
            Some(rec) => {
                // Another server's name, or an invalid spec: never let a
                // foreign key stand in for (or break) a real server.
                tracing::warn!(key = %kv.key, spec_name = %rec.spec.name, "ignoring a server record whose spec is invalid or names another server");
                if snap.servers.remove(name).is_some() {
                    changes.push(Change::ServersChanged);
                }
            }
            None => {}
        }
    } else if let Some(rest) = key.strip_prefix("sidecars/") {
        if let (Some((server, id)), Some(rec)) = (rest.split_once('/'), parse::<SidecarRecord>(kv))
            && rec.server == server
            && rec.sidecar_id == id
        {
            snap.sidecars
                .entry(server.to_owned())
                .or_default()
                .insert(id.to_owned(), rec);
        }
    } else if let Some(server) = key.strip_prefix("tools/") {
        if let Some(rec) = parse::<CatalogueRecord>(kv) {
            let changed = snap
                .catalogues
                .get(server)
                .is_none_or(|old| old.tools_updated_at != rec.tools_updated_at);
            if changed {
                changes.push(Change::ToolsChanged {
                    server: server.to_owned(),
                    tools_updated_at: rec.tools_updated_at,
                });
            }
            snap.catalogues.insert(server.to_owned(), Arc::new(rec));
        }
    } else if let Some(server) = key.strip_prefix("resources/") {
        if let Some(rec) = parse::<ResourceCatalogueRecord>(kv) {
            let old = snap.resource_catalogues.get(server);
            if old.is_none_or(|o| o.resources_updated_at != rec.resources_updated_at) {
                changes.push(Change::ResourcesChanged {
                    server: server.to_owned(),
                    resources_updated_at: rec.resources_updated_at,
                });
            }
            if old.is_none_or(|o| o.prompts_updated_at != rec.prompts_updated_at) {
                changes.push(Change::PromptsChanged {
                    server: server.to_owned(),
                    prompts_updated_at: rec.prompts_updated_at,
                });
            }
            snap.resource_catalogues
                .insert(server.to_owned(), Arc::new(rec));
        }
    } else if key == TOOLNAMES_KEY {
        if let Some(rec) = parse::<NamesRecord>(kv) {
            snap.name_of = Arc::new(
                rec.map
                    .names
                    .iter()
                    .map(|(n, r)| ((r.server.clone(), r.tool.clone()), n.clone()))
                    .collect(),
            );
            snap.names = Arc::new(rec.map);
        }
    } else if let Some(id) = key.strip_prefix("sessions/") {
        if let Some(rec) = parse::<SessionRecord>(kv) {
            snap.sessions.insert(id.to_owned(), rec);
        }
    } else if let Some(id) = key.strip_prefix(crate::model::mcp_session::PREFIX) {
        if let Some(rec) = parse(kv) {
            snap.mcp_sessions.insert(id.to_owned(), rec);
            changes.push(Change::McpSession(id.to_owned()));
        }
    } else if let Some(rest) = key.strip_prefix("interactions/") {
        if let Some((session, id)) = rest.split_once('/')
            && let Some(rec) = parse::<InteractionRecord>(kv)
        {
            if rec.session_id != session || rec.id != id {
                tracing::warn!(key = %kv.key, "ignoring an interaction record stored under another key");
                return;
            }
            let m = snap.interactions.entry(session.to_owned()).or_default();
            let before = m.get(id).map(|r| r.status);
            if m.get(id) != Some(&rec) {
                m.insert(id.to_owned(), rec.clone());
                changes.push(Change::Interaction(Box::new(InteractionChange {
                    session: session.to_owned(),
                    id: id.to_owned(),
                    before,
                    after: Some(rec),
                })));
            }
        }
    } else if let Some(rest) = key.strip_prefix("hints/") {
        if let Some((server, tool)) = rest.split_once('/')
            && let Some(rec) = parse::<HintOverrideRecord>(kv)
        {
            snap.hint_overrides
                .insert((server.to_owned(), tool.to_owned()), rec);
            changes.push(Change::ToolSettingsChanged {
                server: server.to_owned(),
            });
        }
    } else if let Some(rest) = key.strip_prefix("policies/") {
        if let Some((server, tool)) = rest.split_once('/')
            && let Some(rec) = parse::<PolicyRecord>(kv)
        {
            snap.policies
                .insert((server.to_owned(), tool.to_owned()), rec);
            changes.push(Change::ToolSettingsChanged {
                server: server.to_owned(),
            });
        }
    } else if key == crate::model::mrtr::KEYS_KEY {
        if let Some(ring) = parse(kv) {
            snap.mcp_state_keys = Some(Arc::new(ring));
        }
    } else if let Some(run) = key.strip_prefix(crate::model::mrtr::OUTCOME_PREFIX) {
        changes.push(Change::McpOutcome {
            run: run.to_owned(),
        });
    } else if let Some(rest) = key.strip_prefix("cancels/")
        && let Some((scope, call_id)) = rest.rsplit_once('/')
    {
        // Call ids have no '/'; a scope may start with one (a caller's
        // calls without a session: `call::route::call_scope`).
        changes.push(Change::Cancel {
            scope: scope.to_owned(),
            call_id: call_id.to_owned(),
        });
    }
}

fn apply_delete(snap: &mut Snapshot, key: &str, changes: &mut Vec<Change>) {
    if let Some(name) = key.strip_prefix("servers/") {
        snap.servers.remove(name);
        changes.push(Change::ServersChanged);
    } else if let Some(rest) = key.strip_prefix("sidecars/") {
        if let Some((server, id)) = rest.split_once('/')
            && let Some(m) = snap.sidecars.get_mut(server)
        {
            m.remove(id);
            if m.is_empty() {
                snap.sidecars.remove(server);
            }
        }
    } else if let Some(server) = key.strip_prefix("tools/") {
        if snap.catalogues.remove(server).is_some() {
            changes.push(Change::ToolsChanged {
                server: server.to_owned(),
                tools_updated_at: now_ms(),
            });
        }
    } else if let Some(server) = key.strip_prefix("resources/") {
        if snap.resource_catalogues.remove(server).is_some() {
            let at = now_ms();
            changes.push(Change::ResourcesChanged {
                server: server.to_owned(),
                resources_updated_at: at,
            });
            changes.push(Change::PromptsChanged {
                server: server.to_owned(),
                prompts_updated_at: at,
            });
        }
    } else if let Some(rest) = key.strip_prefix("interactions/") {
        if let Some((session, id)) = rest.split_once('/')
            && let Some(m) = snap.interactions.get_mut(session)
            && let Some(old) = m.remove(id)
        {
            if m.is_empty() {
                snap.interactions.remove(session);
            }
            changes.push(Change::Interaction(Box::new(InteractionChange {
                session: session.to_owned(),
                id: id.to_owned(),
                before: Some(old.status),
                after: None,
            })));
        }
    } else if let Some(rest) = key.strip_prefix("hints/") {
        if let Some((server, tool)) = rest.split_once('/')
            && snap
                .hint_overrides
                .remove(&(server.to_owned(), tool.to_owned()))
                .is_some()
        {
            changes.push(Change::ToolSettingsChanged {
                server: server.to_owned(),
            });
        }
    } else if let Some(rest) = key.strip_prefix("policies/") {
        if let Some((server, tool)) = rest.split_once('/')
            && snap
                .policies
                .remove(&(server.to_owned(), tool.to_owned()))
                .is_some()
        {
            changes.push(Change::ToolSettingsChanged {
                server: server.to_owned(),
            });
        }
    } else if let Some(id) = key.strip_prefix("sessions/") {
        snap.sessions.remove(id);
        changes.push(Change::SessionDeleted(id.to_owned()));
    } else if let Some(id) = key.strip_prefix(crate::model::mcp_session::PREFIX) {
        snap.mcp_sessions.remove(id);
        changes.push(Change::McpSession(id.to_owned()));
    } else if key == crate::model::mrtr::KEYS_KEY {
        snap.mcp_state_keys = None;
    }
}

/// The interaction changes between two snapshots (after a re-read).
fn interaction_diff(old: &Snapshot, new: &Snapshot) -> Vec<Change> {
    let mut out = Vec::new();
    for (session, m) in &new.interactions {
        for (id, rec) in m {
            let before = old.interactions.get(session).and_then(|o| o.get(id));
            if before != Some(rec) {
                out.push(Change::Interaction(Box::new(InteractionChange {
                    session: session.clone(),
                    id: id.clone(),
                    before: before.map(|r| r.status),
                    after: Some(rec.clone()),
                })));
            }
        }
    }
    for (session, m) in &old.interactions {
        for (id, rec) in m {
            if new
                .interactions
                .get(session)
                .is_none_or(|n| !n.contains_key(id))
            {
                out.push(Change::Interaction(Box::new(InteractionChange {
                    session: session.clone(),
                    id: id.clone(),
                    before: Some(rec.status),
                    after: None,
                })));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(server: &str, status: &str) -> BackgroundEntry {
        BackgroundEntry {
            server: server.into(),
            session_id: "s".into(),
            sidecar_id: "c".into(),
            mode: "task".into(),
            status: status.into(),
            deadline_ms: 0,
            finished_at_ms: 0,
            creator_sidecar_id: String::new(),
        }
    }

    #[test]
    fn the_index_counts_running_calls_per_server() {
        let mut index = BackgroundIndex::default();
        index.insert("a".into(), entry("files", "working"));
        index.insert("b".into(), entry("files", "input_required"));
        index.insert("c".into(), entry("web", "working"));
        index.insert("d".into(), entry("files", "completed"));
        assert_eq!(index.running.get("files"), Some(&2));
        // An update that finishes a call, a repeated update, a delete.
        index.insert("a".into(), entry("files", "failed"));
        index.insert("b".into(), entry("files", "working"));
        index.remove("c");
        index.remove("unknown");
        assert_eq!(index.running.get("files"), Some(&1));
        assert_eq!(index.running.get("web"), None);
        index.remove("b");
        assert!(index.running.is_empty());
        assert_eq!(index.entries.len(), 2);
    }

    #[test]
    fn calls_a_sidecar_does_not_own_are_those_of_its_server_it_may_not_poll() {
        let mut index = BackgroundIndex::default();
        index.insert("mine".into(), entry("files", "working"));
        let theirs = BackgroundEntry {
            sidecar_id: "other".into(),
            ..entry("files", "working")
        };
        index.insert("theirs".into(), theirs.clone());
        index.insert("done".into(), entry("files", "completed"));
        index.insert("elsewhere".into(), entry("web", "completed"));
        index.insert(
            "elsewhere-theirs".into(),
            BackgroundEntry {
                server: "web".into(),
                ..theirs
            },
        );
        let ids: Vec<String> = [
            "mine",
            "theirs",
            "done",
            "elsewhere",
            "elsewhere-theirs",
            "unknown",
        ]
        .map(String::from)
        .into();
        assert_eq!(index.not_owned_by("files", "c", &ids), ["theirs", "done"]);
    }

    #[test]
    fn the_index_lists_each_sessions_finished_calls_in_order() {
        let done = |session: &str, at: i64| BackgroundEntry {
            session_id: session.into(),
            finished_at_ms: at,
            ..entry("files", "completed")
        };
        let mut index = BackgroundIndex::default();
        index.insert("late".into(), done("s", 30));
        index.insert("early".into(), done("s", 10));
        index.insert("other".into(), done("t", 20));
        index.insert("running".into(), entry("files", "working"));
        index.insert("no-session".into(), done("", 15));
        let ids = |index: &BackgroundIndex, session: &str, after: i64| -> Vec<String> {
            index.finished.get(session).map_or(Vec::new(), |d| {
                d.range((after + 1, String::new())..)
                    .map(|(_, id)| id.clone())
                    .collect()
            })
        };
        assert_eq!(ids(&index, "s", 0), ["early", "late"]);
        assert_eq!(ids(&index, "s", 10), ["late"]);
        assert_eq!(ids(&index, "t", 0), ["other"]);
        // A record that finishes moves into the set; deleted ones leave it.
        index.insert("running".into(), done("s", 20));
        assert_eq!(ids(&index, "s", 0), ["early", "running", "late"]);
        index.remove("early");
        index.remove("late");
        index.remove("running");
        assert!(!index.finished.contains_key("s"));
    }

    #[tokio::test]
    async fn calls_wait_for_the_writes_made_through_this_replica() {
        use crate::store::{EmbeddedConfig, EmbeddedStore};
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("s.redb")))
            .await
            .unwrap();
        let state = State::start(store.clone()).await.unwrap();
        assert!(state.caught_up(Duration::ZERO).await, "nothing written yet");
        let rev = store
            .put(&crate::model::server_key("a"), b"{}".to_vec(), None)
            .await
            .unwrap();
        // A write this replica made and noted: calls wait until the read
        // model has it, then go on.
        assert!(state.wait_for(rev, Duration::from_secs(5)).await);
        assert!(state.caught_up(Duration::ZERO).await);
        // A noted write the read model never gets (a revision from the
        // future): calls wait, then give up after their limit.
        assert!(!state.wait_for(rev + 1000, Duration::from_millis(10)).await);
        let started = std::time::Instant::now();
        assert!(!state.caught_up(Duration::from_millis(100)).await);
        assert!(started.elapsed() >= Duration::from_millis(100));
        // Writes made elsewhere are not waited for.
        let other = State::start(store.clone()).await.unwrap();
        assert!(other.caught_up(Duration::ZERO).await);
    }

    #[tokio::test]
    async fn the_key_count_follows_creations_and_deletions() {
        use crate::store::{EmbeddedConfig, EmbeddedStore};
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("s.redb")))
            .await
            .unwrap();
        store.put("sessions/a", b"{}".to_vec(), None).await.unwrap();
        let state = State::start(store.clone()).await.unwrap();
        assert_eq!(state.store_keys(), 1, "the first listing");
        // A new key, an update of it, a key the read model ignores, and a
        // leased key.
        store.put("sessions/b", b"{}".to_vec(), None).await.unwrap();
        store.put("sessions/b", b"{}".to_vec(), None).await.unwrap();
        store.put("unknown/x", b"1".to_vec(), None).await.unwrap();
        let lease = store.grant_lease(Duration::from_secs(30)).await.unwrap();
        let rev = store
            .put("cancels/s/c", Vec::new(), Some(lease))
            .await
            .unwrap();
        assert!(state.wait_for(rev, Duration::from_secs(5)).await);
        assert_eq!(state.store_keys(), 4);
        // A deletion, one of an absent key (no event), and a revoked lease.
        store.delete("sessions/a").await.unwrap();
        assert!(!store.delete("sessions/a").await.unwrap());
        store.revoke(lease).await.unwrap();
        let rev = store.put("sessions/c", b"{}".to_vec(), None).await.unwrap();
        assert!(state.wait_for(rev, Duration::from_secs(5)).await);
        assert_eq!(state.store_keys(), 3);
        assert_eq!(store.list("").await.unwrap().kvs.len(), 3);
    }
}
