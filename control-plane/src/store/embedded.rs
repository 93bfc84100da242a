//! The embedded store: one redb file on local disk, for a control plane
//! running without etcd (all-in-one mode).
//!
//! Layout (all tables in one redb database):
//! - `kv`: full key -> record (create/mod revision, version, lease, value);
//! - `history`: (revision, index) -> event, the last `history_limit`
//!   revisions, which is what `watch(prefix, Some(r))` replays;
//! - `meta`: the current revision, the oldest revision kept in `history` and
//!   the next lease id;
//! - `leases`: id -> (TTL seconds, absolute expiry in Unix milliseconds),
//!   `lease_expiry`: (expiry, id) (an index for the reaper) and
//!   `lease_keys`: id -> keys attached to it.
//!
//! Every write (put, delete, txn, revoke, lease reaping) is one redb write
//! transaction that updates the keys, bumps the revision and appends the
//! revision's events to `history`, so it is atomic and durable. After the
//! commit the events go to in-process watchers through a tokio broadcast
//! channel; a watcher that falls too far behind gets
//! [`StoreError::WatchLagged`] instead of silently missing events.
//!
//! redb is synchronous and a write transaction ends with an fsync (a few
//! milliseconds, more on slow disks). That is too long to run on an async
//! worker thread, so every database access runs in
//! `tokio::task::spawn_blocking`; the async methods only await the result.

use super::{
    BoxError, Compare, KeyValue, LeaseId, Listing, Op, Revision, Store, StoreError, Txn, TxnResult,
    WatchEvent, WatchStream, check_key, lease_key, normalize_from, normalize_root, ttl_secs,
};
use futures::StreamExt;
use redb::{
    Database, MultimapTable, MultimapTableDefinition, ReadableDatabase, ReadableTable, Table,
    TableDefinition, WriteTransaction,
};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use switchyard_common::time::now_ms;
use tokio::sync::broadcast;

#[cfg(test)]
mod tests;

const KV: TableDefinition<&str, &[u8]> = TableDefinition::new("kv");
const HISTORY: TableDefinition<(i64, u32), &[u8]> = TableDefinition::new("history");
const META: TableDefinition<&str, i64> = TableDefinition::new("meta");
const LEASES: TableDefinition<i64, (i64, i64)> = TableDefinition::new("leases");
const LEASE_EXPIRY: TableDefinition<(i64, i64), ()> = TableDefinition::new("lease_expiry");
const LEASE_KEYS: MultimapTableDefinition<i64, &str> = MultimapTableDefinition::new("lease_keys");

const META_REVISION: &str = "revision";
const META_OLDEST: &str = "oldest";
const META_NEXT_LEASE: &str = "next_lease";

/// Configuration of the embedded store.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// The redb file; its directory is created if needed.
    pub path: PathBuf,
    /// Root prefix applied to every key (see [`super::DEFAULT_ROOT`]).
    pub root: String,
    /// How many revisions of events are kept for `watch(.., Some(r))`
    /// (at least 1; default 10,000).
    pub history_limit: u64,
    /// How often expired leases are looked for (default 250 ms).
    pub reap_interval: Duration,
    /// How many revisions a watcher may fall behind before it gets
    /// [`StoreError::WatchLagged`] (at least 16; default 4,096).
    pub watch_buffer: usize,
}

impl EmbeddedConfig {
    /// Defaults for a store in the file `path`, rooted at
    /// [`super::DEFAULT_ROOT`].
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            root: super::DEFAULT_ROOT.to_owned(),
            history_limit: 10_000,
            reap_interval: Duration::from_millis(250),
            watch_buffer: 4096,
        }
    }

    /// Sets the root prefix.
    pub fn with_root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }
}

/// The embedded store. Cheap to clone (clones share the database); the
/// database closes, and watches end with [`StoreError::Closed`], when the last
/// clone is dropped.
#[derive(Debug, Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
    root: Arc<str>,
}

struct Inner {
    db: Database,
    path: PathBuf,
    /// Held from the start of a write transaction until its events are
    /// published, so watchers receive revisions in order.
    write_lock: Mutex<()>,
    events: broadcast::Sender<Arc<Batch>>,
    history_limit: i64,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("path", &self.path)
            .field("history_limit", &self.history_limit)
            .finish_non_exhaustive()
    }
}

/// The events of one revision, with full keys.
#[derive(Debug)]
struct Batch {
    revision: Revision,
    events: Vec<RawEvent>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum RawEvent {
    Put { key: String, record: Record },
    Delete { key: String },
}

impl RawEvent {
    fn key(&self) -> &str {
        match self {
            RawEvent::Put { key, .. } | RawEvent::Delete { key } => key,
        }
    }
}

/// A stored value with its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    create_revision: Revision,
    mod_revision: Revision,
    version: i64,
    /// 0: no lease.
    lease: i64,
    value: Vec<u8>,
}

const RECORD_HEADER: usize = 32;

impl Record {
    /// Four little-endian i64 (create, mod, version, lease), then the value.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(RECORD_HEADER + self.value.len());
        for n in [
            self.create_revision,
            self.mod_revision,
            self.version,
            self.lease,
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&self.value);
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, Fail> {
        if bytes.len() < RECORD_HEADER {
            return Err(Fail::Corrupt(format!("record of {} bytes", bytes.len())));
        }
        let n = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            i64::from_le_bytes(b)
        };
        Ok(Record {
            create_revision: n(0),
            mod_revision: n(1),
            version: n(2),
            lease: n(3),
            value: bytes[RECORD_HEADER..].to_vec(),
        })
    }

    fn into_key_value(self, key: String) -> KeyValue {
        KeyValue {
            key,
            value: self.value,
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
            version: self.version,
            lease: (self.lease != 0).then_some(LeaseId(self.lease)),
        }
    }
}

impl RawEvent {
    /// Tag byte (0 put, 1 delete), key length (u32 LE), key, then for a put
    /// the encoded record.
    fn encode(&self) -> Vec<u8> {
        let (tag, key) = match self {
            RawEvent::Put { key, .. } => (0u8, key),
            RawEvent::Delete { key } => (1u8, key),
        };
        let mut out = vec![tag];
        let len = u32::try_from(key.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        if let RawEvent::Put { record, .. } = self {
            out.extend_from_slice(&record.encode());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<Self, Fail> {
        let corrupt = || Fail::Corrupt(format!("history event of {} bytes", bytes.len()));
        let (&tag, rest) = bytes.split_first().ok_or_else(corrupt)?;
        let len_bytes: [u8; 4] = rest
            .get(..4)
            .ok_or_else(corrupt)?
            .try_into()
            .map_err(|_| corrupt())?;
        let len = usize::try_from(u32::from_le_bytes(len_bytes)).map_err(|_| corrupt())?;
        let key_bytes = rest.get(4..4 + len).ok_or_else(corrupt)?;
        let key = String::from_utf8(key_bytes.to_vec()).map_err(|_| corrupt())?;
        let rest = &rest[4 + len..];
        match tag {
            0 => Ok(RawEvent::Put {
                key,
                record: Record::decode(rest)?,
            }),
            1 if rest.is_empty() => Ok(RawEvent::Delete { key }),
            _ => Err(corrupt()),
        }
    }
}

/// Internal failure, turned into a [`StoreError`] (with op and key) at the
/// async boundary.
#[derive(Debug)]
enum Fail {
    Db(redb::Error),
    Io(std::io::Error),
    Corrupt(String),
    LeaseNotFound(LeaseId),
    Compacted {
        requested: Revision,
        oldest: Revision,
    },
}

macro_rules! fail_from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for Fail {
            fn from(e: $t) -> Self {
                Fail::Db(e.into())
            }
        }
    )*};
}
fail_from_redb!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

impl Fail {
    fn into_store_error(self, op: &'static str, key: String) -> StoreError {
        match self {
            Fail::Db(e) => StoreError::backend(op, key, "embedded database error", e),
            Fail::Io(e) => StoreError::backend(op, key, "I/O error", e),
            Fail::Corrupt(what) => {
                StoreError::backend(op, key, "corrupt data in the embedded database", what)
            }
            Fail::LeaseNotFound(lease) => StoreError::LeaseNotFound { op, key, lease },
            Fail::Compacted { requested, oldest } => StoreError::Compacted {
                prefix: key,
                requested,
                oldest,
            },
        }
    }
}

/// One redb write transaction's view: the open tables plus the revision
/// being built. Writes of one logical operation share a revision; call
/// [`Writer::seal_revision`] after each operation.
struct Writer<'t> {
    kv: Table<'t, &'static str, &'static [u8]>,
    history: Table<'t, (i64, u32), &'static [u8]>,
    meta: Table<'t, &'static str, i64>,
    leases: Table<'t, i64, (i64, i64)>,
    lease_expiry: Table<'t, (i64, i64), ()>,
    lease_keys: MultimapTable<'t, i64, &'static str>,
    /// The last sealed revision.
    revision: Revision,
    /// The oldest revision kept in `history`.
    oldest: Revision,
    history_limit: i64,
    /// Events of the revision being built (`revision + 1`).
    pending: Vec<RawEvent>,
    batches: Vec<Batch>,
    now: i64,
}

impl<'t> Writer<'t> {
    fn new(wtx: &'t WriteTransaction, history_limit: i64) -> Result<Self, Fail> {
        let meta = wtx.open_table(META)?;
        let revision = meta.get(META_REVISION)?.map_or(0, |v| v.value());
        let oldest = meta.get(META_OLDEST)?.map_or(1, |v| v.value());
        Ok(Writer {
            kv: wtx.open_table(KV)?,
            history: wtx.open_table(HISTORY)?,
            meta,
            leases: wtx.open_table(LEASES)?,
            lease_expiry: wtx.open_table(LEASE_EXPIRY)?,
            lease_keys: wtx.open_multimap_table(LEASE_KEYS)?,
            revision,
            oldest,
            history_limit,
            pending: Vec::new(),
            batches: Vec::new(),
            now: now_ms(),
        })
    }

    fn get(&self, key: &str) -> Result<Option<Record>, Fail> {
        match self.kv.get(key)? {
            Some(v) => Ok(Some(Record::decode(v.value())?)),
            None => Ok(None),
        }
    }

    fn lease_alive(&self, lease: LeaseId) -> Result<Option<(i64, i64)>, Fail> {
        Ok(self
            .leases
            .get(lease.0)?
            .map(|v| v.value())
            .filter(|(_, expiry)| *expiry > self.now))
    }

    fn compare(&self, compare: &Compare, root: &str) -> Result<bool, Fail> {
        Ok(match compare {
            Compare::ModRevision { key, revision } => {
                let current = self.get(&format!("{root}{key}"))?;
                current.map_or(0, |r| r.mod_revision) == *revision
            }
            Compare::Value { key, value } => {
                let current = self.get(&format!("{root}{key}"))?;
                current.is_some_and(|r| r.value == *value)
            }
        })
    }

    fn put(&mut self, key: &str, value: Vec<u8>, lease: Option<LeaseId>) -> Result<(), Fail> {
        if let Some(lease) = lease
            && self.lease_alive(lease)?.is_none()
        {
            return Err(Fail::LeaseNotFound(lease));
        }
        let revision = self.revision + 1;
        let old = self.get(key)?;
        let new_lease = lease.map_or(0, |l| l.0);
        let record = Record {
            create_revision: old.as_ref().map_or(revision, |r| r.create_revision),
            mod_revision: revision,
            version: old.as_ref().map_or(1, |r| r.version + 1),
            lease: new_lease,
            value,
        };
        self.kv.insert(key, record.encode().as_slice())?;
        let old_lease = old.as_ref().map_or(0, |r| r.lease);
        if old_lease != 0 && old_lease != new_lease {
            self.lease_keys.remove(old_lease, key)?;
        }
        if new_lease != 0 {
            self.lease_keys.insert(new_lease, key)?;
        }
        self.pending.push(RawEvent::Put {
            key: key.to_owned(),
            record,
        });
        Ok(())
    }

    fn delete(&mut self, key: &str) -> Result<bool, Fail> {
        let Some(old) = self
            .kv
            .remove(key)?
            .map(|v| Record::decode(v.value()))
            .transpose()?
        else {
            return Ok(false);
        };
        if old.lease != 0 {
            self.lease_keys.remove(old.lease, key)?;
        }
        self.pending.push(RawEvent::Delete {
            key: key.to_owned(),
        });
        Ok(true)
    }

    fn apply(&mut self, ops: &[Op], root: &str) -> Result<(), Fail> {
        for op in ops {
            match op {
                Op::Put { key, value, lease } => {
                    self.put(&format!("{root}{key}"), value.clone(), *lease)?
                }
                Op::Delete { key } => {
                    self.delete(&format!("{root}{key}"))?;
                }
            }
        }
        Ok(())
    }

    /// Ends the current operation: if it wrote anything, its events get the
    /// next revision, are appended to `history` (trimming the oldest) and are
    /// queued for publishing. Returns the current revision.
    fn seal_revision(&mut self) -> Result<Revision, Fail> {
        if self.pending.is_empty() {
            return Ok(self.revision);
        }
        let revision = self.revision + 1;
        let events = std::mem::take(&mut self.pending);
        for (i, event) in events.iter().enumerate() {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            self.history
                .insert((revision, index), event.encode().as_slice())?;
        }
        let oldest = self.oldest.max(revision - self.history_limit + 1);
        if oldest > self.oldest {
            self.history
                .retain_in((self.oldest, 0u32)..(oldest, 0u32), |_, _| false)?;
            self.oldest = oldest;
        }
        self.revision = revision;
        self.batches.push(Batch { revision, events });
        Ok(revision)
    }

    fn grant(&mut self, ttl_secs: i64) -> Result<LeaseId, Fail> {
        let id = self.meta.get(META_NEXT_LEASE)?.map_or(1, |v| v.value());
        self.meta.insert(META_NEXT_LEASE, id + 1)?;
        let expiry = self.now.saturating_add(ttl_secs.saturating_mul(1000));
        self.leases.insert(id, (ttl_secs, expiry))?;
        self.lease_expiry.insert((expiry, id), ())?;
        Ok(LeaseId(id))
    }

    fn keep_alive(&mut self, lease: LeaseId) -> Result<(), Fail> {
        let (ttl, old_expiry) = self.lease_alive(lease)?.ok_or(Fail::LeaseNotFound(lease))?;
        let expiry = self.now.saturating_add(ttl.saturating_mul(1000));
        self.lease_expiry.remove((old_expiry, lease.0))?;
        self.lease_expiry.insert((expiry, lease.0), ())?;
        self.leases.insert(lease.0, (ttl, expiry))?;
        Ok(())
    }

    /// Removes the lease and deletes its keys, as one revision. Returns
    /// whether the lease existed (expired or not).
    fn revoke(&mut self, lease: LeaseId) -> Result<bool, Fail> {
        let Some((_, expiry)) = self.leases.remove(lease.0)?.map(|v| v.value()) else {
            return Ok(false);
        };
        self.lease_expiry.remove((expiry, lease.0))?;
        let keys = self
            .lease_keys
            .remove_all(lease.0)?
            .map(|k| k.map(|k| k.value().to_owned()))
            .collect::<Result<Vec<_>, _>>()?;
        for key in keys {
            // `put` keeps `lease_keys` exact, so the key is attached to this lease.
            self.delete(&key)?;
        }
        self.seal_revision()?;
        Ok(true)
    }

    /// Revokes every lease whose expiry has passed, one revision each (as
    /// etcd does). Returns how many.
    fn reap(&mut self) -> Result<usize, Fail> {
        let expired = self
            .lease_expiry
            .range(..=(self.now, i64::MAX))?
            .map(|e| e.map(|(k, _)| k.value().1))
            .collect::<Result<Vec<_>, _>>()?;
        for id in &expired {
            self.revoke(LeaseId(*id))?;
        }
        Ok(expired.len())
    }

    fn finish(&mut self) -> Result<(), Fail> {
        self.meta.insert(META_REVISION, self.revision)?;
        self.meta.insert(META_OLDEST, self.oldest)?;
        Ok(())
    }
}

impl Inner {
    /// Runs `f` in one redb write transaction, commits, then publishes the
    /// revisions it sealed to watchers, in order.
    fn write<T>(
        &self,
        root: &str,
        f: impl FnOnce(&mut Writer<'_>, &str) -> Result<T, Fail>,
    ) -> Result<T, Fail> {
        let _guard = self
            .write_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let wtx = self.db.begin_write()?;
        let result = (|| {
            let mut writer = Writer::new(&wtx, self.history_limit)?;
            let value = f(&mut writer, root)?;
            writer.seal_revision()?;
            writer.finish()?;
            Ok((value, std::mem::take(&mut writer.batches)))
        })();
        match result {
            Ok((value, batches)) => {
                wtx.commit()?;
                for batch in batches {
                    // No receivers is fine: nobody is watching.
                    let _ = self.events.send(Arc::new(batch));
                }
                Ok(value)
            }
            Err(e) => {
                wtx.abort()?;
                Err(e)
            }
        }
    }

    fn read_meta(
        table: &impl ReadableTable<&'static str, i64>,
        key: &str,
        default: i64,
    ) -> Result<i64, Fail> {
        Ok(table.get(key)?.map_or(default, |v| v.value()))
    }
}

/// redb's page cache, in bytes: the control plane reads its state from
/// memory (the read model), so the cache only serves writes and replays;
/// redb's default (1 GiB) let a long-running replica's RSS grow with the
/// pages it wrote (docs/reliability.md, "Soak").
const CACHE_BYTES: usize = 16 * 1024 * 1024;

fn open_database(path: &Path) -> Result<Database, Fail> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(Fail::Io)?;
    }
    // A clone of a store that was just dropped may still be finishing a
    // blocking task (the reaper's, say) and so hold the file for a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let db = loop {
        match redb::Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create(path)
        {
            Ok(db) => break db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen)
                if std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    };
    // Owner-only: the file holds servers' specs and sessions, and (in
    // pages not yet reused) values written before they were sealed.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(Fail::Io)?;
    }
    // Create the tables so that readers never meet a missing one.
    let wtx = db.begin_write()?;
    {
        let mut meta = wtx.open_table(META)?;
        for (key, default) in [(META_REVISION, 0), (META_OLDEST, 1), (META_NEXT_LEASE, 1)] {
            if meta.get(key)?.is_none() {
                meta.insert(key, default)?;
            }
        }
        wtx.open_table(KV)?;
        wtx.open_table(HISTORY)?;
        wtx.open_table(LEASES)?;
        wtx.open_table(LEASE_EXPIRY)?;
        wtx.open_multimap_table(LEASE_KEYS)?;
    }
    wtx.commit()?;
    Ok(db)
}

impl EmbeddedStore {
    /// Opens (or creates) the store file, reaps leases that expired while it
    /// was closed, and starts the lease reaper task (it stops when the last
    /// clone is dropped). Must be called inside a tokio runtime.
    ///
    /// Errors: [`StoreError::Backend`] with op `open` if the directory cannot
    /// be created, the file is not a redb database, or another process holds
    /// it open.
    pub async fn open(config: EmbeddedConfig) -> Result<Self, StoreError> {
        let path = config.path.clone();
        let path_text = path.display().to_string();
        let db = tokio::task::spawn_blocking(move || open_database(&path))
            .await
            .map_err(|e| {
                StoreError::backend(
                    "open",
                    path_text.clone(),
                    "the store's blocking task failed",
                    e,
                )
            })?
            .map_err(|e| e.into_store_error("open", path_text.clone()))?;
        let (events, _) = broadcast::channel(config.watch_buffer.max(16));
        let inner = Arc::new(Inner {
            db,
            path: config.path.clone(),
            write_lock: Mutex::new(()),
            events,
            history_limit: i64::try_from(config.history_limit.max(1)).unwrap_or(i64::MAX),
        });
        let store = EmbeddedStore {
            inner,
            root: normalize_root(&config.root).into(),
        };
        let reaped = store
            .blocking("open", path_text, |inner, root| {
                inner.write(root, |w, _| w.reap())
            })
            .await?;
        if reaped > 0 {
            tracing::info!(reaped, path = %config.path.display(), "store: reaped leases that expired while the store was closed");
        }
        tokio::spawn(reaper(Arc::downgrade(&store.inner), config.reap_interval));
        Ok(store)
    }

    /// Another view of the same database rooted at `root` (shares revisions,
    /// leases and watch delivery; sees only keys under its own root).
    pub fn with_root(&self, root: &str) -> Self {
        EmbeddedStore {
            inner: self.inner.clone(),
            root: normalize_root(root).into(),
        }
    }

    /// The normalised root prefix.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Drops watch history older than `revision` now (the store does this on
    /// its own beyond `history_limit`); watching from an older revision then
    /// fails with [`StoreError::Compacted`]. Like etcd's compaction.
    pub async fn compact(&self, revision: Revision) -> Result<(), StoreError> {
        self.blocking(
            "compact",
            format!("revision {revision}"),
            move |inner, root| {
                inner.write(root, |w, _| {
                    let oldest = revision.min(w.revision + 1);
                    if oldest > w.oldest {
                        w.history
                            .retain_in((w.oldest, 0u32)..(oldest, 0u32), |_, _| false)?;
                        w.oldest = oldest;
                    }
                    Ok(())
                })
            },
        )
        .await
    }

    /// Runs `f` on a blocking thread (see the module docs for why).
    async fn blocking<T: Send + 'static>(
        &self,
        op: &'static str,
        key: impl Into<String>,
        f: impl FnOnce(&Inner, &str) -> Result<T, Fail> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = self.inner.clone();
        let root = self.root.clone();
        let key = key.into();
        match tokio::task::spawn_blocking(move || f(&inner, &root)).await {
            Ok(result) => result.map_err(|e| e.into_store_error(op, key)),
            Err(e) => Err(StoreError::backend(
                op,
                key,
                "the store's blocking task failed",
                e,
            )),
        }
    }
}

/// Reaps expired leases every `interval` until the store is dropped.
async fn reaper(inner: Weak<Inner>, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let result = tokio::task::spawn_blocking(move || strong.write("", |w, _| w.reap())).await;
        match result {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::debug!(leases = n, "store: reaped expired leases"),
            Ok(Err(e)) => {
                let e: BoxError = e.into_store_error("reap", "expired leases".into()).into();
                tracing::warn!(error = %e, "store: reaping expired leases failed");
            }
            Err(e) => tracing::warn!(error = %e, "store: the lease reaper task failed"),
        }
    }
}

fn strip_root(root: &str, key: String) -> String {
    key.get(root.len()..).map(str::to_owned).unwrap_or_default()
}

fn to_watch_event(root: &str, revision: Revision, event: RawEvent) -> WatchEvent {
    match event {
        RawEvent::Put { key, record } => {
            WatchEvent::Put(record.into_key_value(strip_root(root, key)))
        }
        RawEvent::Delete { key } => WatchEvent::Delete {
            key: strip_root(root, key),
            mod_revision: revision,
        },
    }
}

struct WatchState {
    queue: VecDeque<WatchEvent>,
    rx: broadcast::Receiver<Arc<Batch>>,
    root: Arc<str>,
    full_prefix: String,
    prefix: String,
    /// Live batches below this revision were already replayed (or not asked for).
    min_live: Revision,
    done: bool,
}

impl Store for EmbeddedStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        check_key("get", key)?;
        let rel = key.to_owned();
        self.blocking("get", key, move |inner, root| {
            let rtx = inner.db.begin_read()?;
            let kv = rtx.open_table(KV)?;
            let full = format!("{root}{rel}");
            match kv.get(full.as_str())? {
                Some(v) => Ok(Some(Record::decode(v.value())?.into_key_value(rel))),
                None => Ok(None),
            }
        })
        .await
    }

    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> Result<Revision, StoreError> {
        check_key("put", key)?;
        let rel = key.to_owned();
        self.blocking("put", key, move |inner, root| {
            inner.write(root, |w, root| {
                w.put(&format!("{root}{rel}"), value, lease)?;
                w.seal_revision()
            })
        })
        .await
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        check_key("delete", key)?;
        let rel = key.to_owned();
        self.blocking("delete", key, move |inner, root| {
            inner.write(root, |w, root| w.delete(&format!("{root}{rel}")))
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Listing, StoreError> {
        let rel = prefix.to_owned();
        self.blocking("list", prefix, move |inner, root| {
            let rtx = inner.db.begin_read()?;
            let revision = Inner::read_meta(&rtx.open_table(META)?, META_REVISION, 0)?;
            let table = rtx.open_table(KV)?;
            let full = format!("{root}{rel}");
            let mut kvs = Vec::new();
            for entry in table.range::<&str>(full.as_str()..)? {
                let (k, v) = entry?;
                let key = k.value();
                if !key.starts_with(&full) {
                    break;
                }
                let rel_key = strip_root(root, key.to_owned());
                kvs.push(Record::decode(v.value())?.into_key_value(rel_key));
            }
            Ok(Listing { kvs, revision })
        })
        .await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResult, StoreError> {
        txn.validate()?;
        let key = txn.error_key();
        self.blocking("txn", key, move |inner, root| {
            inner.write(root, |w, root| {
                let mut succeeded = true;
                for compare in &txn.compares {
                    if !w.compare(compare, root)? {
                        succeeded = false;
                        break;
                    }
                }
                w.apply(
                    if succeeded {
                        &txn.success
                    } else {
                        &txn.failure
                    },
                    root,
                )?;
                let revision = w.seal_revision()?;
                Ok(TxnResult {
                    succeeded,
                    revision,
                })
            })
        })
        .await
    }

    async fn watch(
        &self,
        prefix: &str,
        from_revision: Option<Revision>,
    ) -> Result<WatchStream, StoreError> {
        let from = normalize_from(from_revision);
        // Subscribe before reading: every revision committed after the read
        // below arrives on `rx`; those up to the read are in `history`.
        let rx = self.inner.events.subscribe();
        let rel = prefix.to_owned();
        let (current, replay) = self
            .blocking("watch", prefix, move |inner, root| {
                let rtx = inner.db.begin_read()?;
                let meta = rtx.open_table(META)?;
                let current = Inner::read_meta(&meta, META_REVISION, 0)?;
                let oldest = Inner::read_meta(&meta, META_OLDEST, 1)?;
                let Some(from) = from.filter(|f| *f <= current) else {
                    return Ok((current, Vec::new()));
                };
                if from < oldest {
                    return Err(Fail::Compacted {
                        requested: from,
                        oldest,
                    });
                }
                let full = format!("{root}{rel}");
                let history = rtx.open_table(HISTORY)?;
                let mut replay = Vec::new();
                for entry in history.range((from, 0)..=(current, u32::MAX))? {
                    let (k, v) = entry?;
                    let event = RawEvent::decode(v.value())?;
                    if event.key().starts_with(&full) {
                        replay.push(to_watch_event(root, k.value().0, event));
                    }
                }
                Ok((current, replay))
            })
            .await?;
        let state = WatchState {
            queue: replay.into(),
            rx,
            root: self.root.clone(),
            full_prefix: format!("{}{prefix}", self.root),
            prefix: prefix.to_owned(),
            min_live: (current + 1).max(from.unwrap_or(0)),
            done: false,
        };
        Ok(futures::stream::unfold(state, |mut st| async move {
            loop {
                if let Some(event) = st.queue.pop_front() {
                    return Some((Ok(event), st));
                }
                if st.done {
                    return None;
                }
                match st.rx.recv().await {
                    Ok(batch) => {
                        if batch.revision < st.min_live {
                            continue;
                        }
                        for event in &batch.events {
                            if event.key().starts_with(&st.full_prefix) {
                                st.queue.push_back(to_watch_event(
                                    &st.root,
                                    batch.revision,
                                    event.clone(),
                                ));
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        st.done = true;
                        let prefix = st.prefix.clone();
                        return Some((Err(StoreError::WatchLagged { prefix, missed }), st));
                    }
                    Err(broadcast::error::RecvError::Closed) => {
                        st.done = true;
                        let key = st.prefix.clone();
                        return Some((Err(StoreError::Closed { op: "watch", key }), st));
                    }
                }
            }
        })
        .boxed())
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        let secs = ttl_secs(ttl);
        self.blocking("grant_lease", format!("ttl {secs}s"), move |inner, root| {
            inner.write(root, |w, _| w.grant(secs))
        })
        .await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.blocking("keep_alive", lease_key(lease), move |inner, root| {
            inner.write(root, |w, _| w.keep_alive(lease))
        })
        .await
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.blocking("revoke", lease_key(lease), move |inner, root| {
            inner.write(root, |w, _| {
                if w.revoke(lease)? {
                    Ok(())
                } else {
                    Err(Fail::LeaseNotFound(lease))
                }
            })
        })
        .await
    }
}
