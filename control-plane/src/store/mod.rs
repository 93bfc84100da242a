//! The state store: one [`Store`] trait with two implementations that pass the
//! same contract tests — [`EtcdStore`] (etcd v3 through `etcd-client`) for
//! clustered deployments and [`EmbeddedStore`] (a redb file on disk) for a
//! single control plane with no etcd configured. [`AnyStore`] picks one at run
//! time from a [`StoreConfig`].
//!
//! The model is etcd's: string keys with byte values, one store-wide revision
//! counter that every write bumps (all writes of one transaction share a
//! revision), per-key `create_revision` / `mod_revision` / `version`, prefix
//! listing and watching, compare-and-swap transactions, and leases whose keys
//! are deleted when they expire.
//!
//! Every store is rooted at a prefix (default [`DEFAULT_ROOT`],
//! `/switchyard/v1/`) given at construction. Callers use keys relative to it
//! (`servers/a`); the root is added on the way in and removed on the way out,
//! so two stores with different roots on one backend never see each other's
//! keys (they do share the revision counter, as in etcd).
//!
//! Two helpers sit on top of the trait: [`Metered`] wraps a store and records
//! every operation in the store metrics (the control plane wraps its store
//! once, where it opens it), and [`cas::update`] is the one
//! read-modify-compare-and-swap loop every read-modify-write goes through.
//! [`health`] probes whether the store answers (`/readyz`).

pub mod cas;
mod embedded;
mod etcd;
pub mod health;
mod metered;

#[cfg(test)]
mod tests;

pub use embedded::{EmbeddedConfig, EmbeddedStore};
pub use etcd::{EtcdConfig, EtcdStore};
pub use metered::Metered;

use futures::stream::BoxStream;
use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::time::Duration;

/// The root prefix used when the configuration names none.
pub const DEFAULT_ROOT: &str = "/switchyard/v1/";

/// A store revision: a store-wide counter bumped by every write (etcd's
/// `mod_revision`). The first write gets 1; 0 means "never written".
pub type Revision = i64;

/// Boxed error used as the `#[source]` of backend failures.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A lease: keys attached to it are deleted when it expires or is revoked.
/// Ids are positive and chosen by the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub i64);

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One key with its value and metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key, relative to the store's root prefix.
    pub key: String,
    /// The value bytes (the store does not interpret them).
    pub value: Vec<u8>,
    /// Revision of the write that created the key (since its last deletion).
    pub create_revision: Revision,
    /// Revision of the last write to the key.
    pub mod_revision: Revision,
    /// Number of writes since the key was created: 1 after the first put.
    pub version: i64,
    /// The lease the key is attached to, if any.
    pub lease: Option<LeaseId>,
}

/// The result of [`Store::list`]: the keys under a prefix and the revision
/// the read was at (a consistent snapshot; watch from `revision + 1` to
/// follow on without gaps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The keys, sorted by key (byte order).
    pub kvs: Vec<KeyValue>,
    /// The store revision the read saw.
    pub revision: Revision,
}

/// A condition of a [`Txn`]. All compares must hold for the success branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key's `mod_revision` equals `revision`; 0 means "the key is absent".
    ModRevision {
        /// Relative key.
        key: String,
        /// Expected `mod_revision` (0: absent).
        revision: Revision,
    },
    /// The key exists and its value equals `value` (fails for an absent key,
    /// as in etcd).
    Value {
        /// Relative key.
        key: String,
        /// Expected value bytes.
        value: Vec<u8>,
    },
}

impl Compare {
    /// The key's `mod_revision` equals `revision` (0: absent).
    pub fn mod_revision(key: impl Into<String>, revision: Revision) -> Self {
        Compare::ModRevision {
            key: key.into(),
            revision,
        }
    }

    /// The key does not exist (`mod_revision == 0`): create-if-absent.
    pub fn absent(key: impl Into<String>) -> Self {
        Self::mod_revision(key, 0)
    }

    /// The key exists with exactly this value.
    pub fn value(key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        Compare::Value {
            key: key.into(),
            value: value.into(),
        }
    }

    /// The relative key this compare reads.
    pub fn key(&self) -> &str {
        match self {
            Compare::ModRevision { key, .. } | Compare::Value { key, .. } => key,
        }
    }
}

/// A write inside a [`Txn`] branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Put `value` at `key`, attached to `lease` if given (the lease must be alive).
    Put {
        /// Relative key.
        key: String,
        /// Value bytes.
        value: Vec<u8>,
        /// Lease to attach the key to.
        lease: Option<LeaseId>,
    },
    /// Delete `key` (a no-op if absent).
    Delete {
        /// Relative key.
        key: String,
    },
}

impl Op {
    /// A put without a lease.
    pub fn put(key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        Op::Put {
            key: key.into(),
            value: value.into(),
            lease: None,
        }
    }

    /// A put attached to `lease`.
    pub fn put_with_lease(
        key: impl Into<String>,
        value: impl Into<Vec<u8>>,
        lease: LeaseId,
    ) -> Self {
        Op::Put {
            key: key.into(),
            value: value.into(),
            lease: Some(lease),
        }
    }

    /// A delete.
    pub fn delete(key: impl Into<String>) -> Self {
        Op::Delete { key: key.into() }
    }

    /// The relative key this op writes.
    pub fn key(&self) -> &str {
        match self {
            Op::Put { key, .. } | Op::Delete { key } => key,
        }
    }
}

/// An atomic compare-and-swap transaction: if every compare holds, the
/// `success` ops run, otherwise the `failure` ops; either way atomically and
/// at a single revision. A key may appear at most once per branch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    /// Conditions, all of which must hold.
    pub compares: Vec<Compare>,
    /// Ops applied when all compares hold.
    pub success: Vec<Op>,
    /// Ops applied otherwise.
    pub failure: Vec<Op>,
}

impl Txn {
    /// An empty transaction (no compares: the success branch runs).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the compares.
    pub fn when(mut self, compares: impl Into<Vec<Compare>>) -> Self {
        self.compares = compares.into();
        self
    }

    /// Sets the success ops.
    pub fn and_then(mut self, ops: impl Into<Vec<Op>>) -> Self {
        self.success = ops.into();
        self
    }

    /// Sets the failure ops.
    pub fn or_else(mut self, ops: impl Into<Vec<Op>>) -> Self {
        self.failure = ops.into();
        self
    }

    /// The key shown in errors: the first key the transaction touches.
    pub(crate) fn error_key(&self) -> String {
        self.compares
            .iter()
            .map(Compare::key)
            .chain(self.success.iter().map(Op::key))
            .chain(self.failure.iter().map(Op::key))
            .next()
            .unwrap_or("")
            .to_owned()
    }

    /// Rejects what etcd rejects too, with the same error in both stores:
    /// empty keys and a key written twice in one branch.
    pub(crate) fn validate(&self) -> Result<(), StoreError> {
        let op = "txn";
        for compare in &self.compares {
            check_key(op, compare.key())?;
        }
        for branch in [&self.success, &self.failure] {
            let mut seen = HashSet::new();
            for o in branch {
                check_key(op, o.key())?;
                if !seen.insert(o.key()) {
                    return Err(StoreError::InvalidArgument {
                        op,
                        key: o.key().to_owned(),
                        reason: "the key is written twice in one branch".into(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// The outcome of [`Store::txn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnResult {
    /// Whether all compares held (the success branch ran).
    pub succeeded: bool,
    /// The store revision after the transaction: the transaction's own
    /// revision if it wrote anything, else the current revision.
    pub revision: Revision,
}

/// One change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// A key was created or updated; its `mod_revision` is the event's revision.
    Put(KeyValue),
    /// A key was deleted (explicitly, by a transaction, or by lease expiry).
    Delete {
        /// Relative key.
        key: String,
        /// The revision of the deletion.
        mod_revision: Revision,
    },
}

impl WatchEvent {
    /// The revision at which the change happened.
    pub fn revision(&self) -> Revision {
        match self {
            WatchEvent::Put(kv) => kv.mod_revision,
            WatchEvent::Delete { mod_revision, .. } => *mod_revision,
        }
    }

    /// The relative key that changed.
    pub fn key(&self) -> &str {
        match self {
            WatchEvent::Put(kv) => &kv.key,
            WatchEvent::Delete { key, .. } => key,
        }
    }
}

/// The stream returned by [`Store::watch`]: events in revision order (events
/// of one revision in the order they were written). It never ends silently:
/// when the watch cannot continue (store closed, connection lost, watcher
/// fell behind, history compacted) it yields one `Err` and then ends.
pub type WatchStream = BoxStream<'static, Result<WatchEvent, StoreError>>;

/// A store failure. Every variant names the operation and the relative key
/// (or prefix, or lease) it was about: `store: put servers/a: ...`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend failed: database or I/O error, etcd unreachable or
    /// refusing the request, a timeout, a corrupt record.
    #[error("store: {op} {key}: {what}")]
    Backend {
        /// The operation (`get`, `put`, `txn`, `watch`, `grant_lease`, ...).
        op: &'static str,
        /// The relative key or prefix (or `lease N`).
        key: String,
        /// What failed, in a few words.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// The lease does not exist: never granted, expired or revoked.
    #[error("store: {op} {key}: lease {lease} not found (expired or revoked)")]
    LeaseNotFound {
        /// The operation.
        op: &'static str,
        /// The relative key (or `lease N`).
        key: String,
        /// The missing lease.
        lease: LeaseId,
    },
    /// A watch asked for history that is no longer kept.
    #[error(
        "store: watch {prefix}: revision {requested} is compacted; \
         the oldest available revision is {oldest}"
    )]
    Compacted {
        /// The relative prefix watched.
        prefix: String,
        /// The revision asked for (0 if the watch was cancelled later).
        requested: Revision,
        /// The oldest revision that can still be watched from.
        oldest: Revision,
    },
    /// A watcher did not keep up and events were dropped; re-list and watch
    /// again from the listing's revision + 1.
    #[error("store: watch {prefix}: the watcher fell behind and missed {missed} revisions")]
    WatchLagged {
        /// The relative prefix watched.
        prefix: String,
        /// How many revisions (batches of events) were dropped.
        missed: u64,
    },
    /// The server cancelled the watch for another reason than compaction.
    #[error("store: watch {prefix}: cancelled by the server: {reason}")]
    WatchCancelled {
        /// The relative prefix watched.
        prefix: String,
        /// etcd's reason.
        reason: String,
    },
    /// The store went away (closed, or the watch stream ended).
    #[error("store: {op} {key}: the store went away")]
    Closed {
        /// The operation.
        op: &'static str,
        /// The relative key or prefix.
        key: String,
    },
    /// The request is malformed (empty key, a key twice in one txn branch).
    #[error("store: {op} {key}: invalid argument: {reason}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// The relative key.
        key: String,
        /// Why it is invalid.
        reason: String,
    },
}

impl StoreError {
    pub(crate) fn backend(
        op: &'static str,
        key: impl Into<String>,
        what: &'static str,
        source: impl Into<BoxError>,
    ) -> Self {
        StoreError::Backend {
            op,
            key: key.into(),
            what,
            source: source.into(),
        }
    }
}

/// The store interface of the control plane. Keys are relative to the
/// store's root prefix. All methods are cancel-safe in the sense that
/// dropping the future either leaves the write undone or done, never half.
pub trait Store: Send + Sync {
    /// Reads one key. `Ok(None)` if absent.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<KeyValue>, StoreError>> + Send;

    /// Writes `value` at `key`, attached to `lease` if given; returns the
    /// write's revision. Errors with [`StoreError::LeaseNotFound`] if the
    /// lease is gone.
    fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> impl Future<Output = Result<Revision, StoreError>> + Send;

    /// Deletes `key`; returns whether it existed. Deleting an absent key
    /// does not bump the revision.
    fn delete(&self, key: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Lists all keys starting with `prefix` (plain string prefix; `""` lists
    /// everything under the root), sorted by key, with the read's revision.
    fn list(&self, prefix: &str) -> impl Future<Output = Result<Listing, StoreError>> + Send;

    /// Runs a compare-and-swap transaction atomically.
    fn txn(&self, txn: Txn) -> impl Future<Output = Result<TxnResult, StoreError>> + Send;

    /// Watches keys starting with `prefix`. With `from_revision = Some(r)`
    /// (r >= 1) events with revision >= r are replayed first, then live ones
    /// follow without gap or duplicate; with `None` only changes after the
    /// call are seen. When this future resolves the watch is established.
    /// Errors with [`StoreError::Compacted`] if `r` is older than the kept
    /// history.
    fn watch(
        &self,
        prefix: &str,
        from_revision: Option<Revision>,
    ) -> impl Future<Output = Result<WatchStream, StoreError>> + Send;

    /// Grants a lease of `ttl`, rounded up to whole seconds (at least 1 s;
    /// etcd raises very short TTLs to its minimum, 2 s by default). Keys
    /// attached to it are deleted within about a second after it expires.
    fn grant_lease(
        &self,
        ttl: Duration,
    ) -> impl Future<Output = Result<LeaseId, StoreError>> + Send;

    /// Refreshes the lease once: it expires a full TTL from now. Errors with
    /// [`StoreError::LeaseNotFound`] if it already expired or was revoked.
    fn keep_alive(&self, lease: LeaseId) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Revokes the lease now, deleting its keys (one revision, with delete
    /// events). Errors with [`StoreError::LeaseNotFound`] if it is gone.
    fn revoke(&self, lease: LeaseId) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Which store to open.
#[derive(Debug, Clone)]
pub enum StoreConfig {
    /// A redb file on local disk.
    Embedded(EmbeddedConfig),
    /// An etcd cluster.
    Etcd(EtcdConfig),
}

/// A store chosen at run time: delegates every call to the one it holds.
#[derive(Debug, Clone)]
pub enum AnyStore {
    /// The embedded (redb) store.
    Embedded(EmbeddedStore),
    /// The etcd store.
    Etcd(EtcdStore),
}

impl AnyStore {
    /// Opens the store the configuration names (see [`EmbeddedStore::open`]
    /// and [`EtcdStore::connect`] for their errors).
    pub async fn open(config: StoreConfig) -> Result<Self, StoreError> {
        Ok(match config {
            StoreConfig::Embedded(c) => AnyStore::Embedded(EmbeddedStore::open(c).await?),
            StoreConfig::Etcd(c) => AnyStore::Etcd(EtcdStore::connect(c).await?),
        })
    }
}

// Each backend's future is boxed: etcd-client's are 4 to 7 KB, and every
// caller's future would otherwise carry that much inline (a registry call
// became 12 KB, and every request future of the MCP endpoint with it, moved
// by memcpy at each box and spawn on the way). One allocation per store
// operation costs less than those copies.
impl Store for AnyStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        match self {
            AnyStore::Embedded(s) => Box::pin(s.get(key)).await,
            AnyStore::Etcd(s) => Box::pin(s.get(key)).await,
        }
    }

    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> Result<Revision, StoreError> {
        match self {
            AnyStore::Embedded(s) => Box::pin(s.put(key, value, lease)).await,
            AnyStore::Etcd(s) => Box::pin(s.put(key, value, lease)).await,
        }
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        match self {
            AnyStore::Embedded(s) => Box::pin(s.delete(key)).await,
            AnyStore::Etcd(s) => Box::pin(s.delete(key)).await,
        }
    }

    async fn list(&self, prefix: &str) -> Result<Listing, StoreError> {
        match self {
            AnyStore::Embedded(s) => Box::pin(s.list(prefix)).await,
            AnyStore::Etcd(s) => Box::pin(s.list(prefix)).await,
        }
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResult, StoreError> {
        match self {
            AnyStore::Embedded(s) => Box::pin(s.txn(txn)).await,
            AnyStore::Etcd(s) => Box::pin(s.txn(txn)).await,
        }
    }

    async fn watch(
        &self,
        prefix: &str,
        from_revision: Option<Revision>,
    ) -> Result<WatchStream, StoreError> {
        match self {
            AnyStore::Embedded(s) => Box::pin(s.watch(prefix, from_revision)).await,
            AnyStore::Etcd(s) => Box::pin(s.watch(prefix, from_revision)).await,
        }
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        match self {
            AnyStore::Embedded(s) => Box::pin(s.grant_lease(ttl)).await,
            AnyStore::Etcd(s) => Box::pin(s.grant_lease(ttl)).await,
        }
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
        match self {
            AnyStore::Embedded(s) => Box::pin(s.keep_alive(lease)).await,
            AnyStore::Etcd(s) => Box::pin(s.keep_alive(lease)).await,
        }
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        match self {
            AnyStore::Embedded(s) => Box::pin(s.revoke(lease)).await,
            AnyStore::Etcd(s) => Box::pin(s.revoke(lease)).await,
        }
    }
}

/// Normalises a root prefix: empty stays empty (no root), otherwise it ends
/// with exactly one `/`.
pub(crate) fn normalize_root(root: &str) -> String {
    if root.is_empty() {
        String::new()
    } else {
        format!("{}/", root.trim_end_matches('/'))
    }
}

/// Keys of single-key operations must be non-empty.
pub(crate) fn check_key(op: &'static str, key: &str) -> Result<(), StoreError> {
    if key.is_empty() {
        return Err(StoreError::InvalidArgument {
            op,
            key: String::new(),
            reason: "empty key".into(),
        });
    }
    Ok(())
}

/// A TTL in whole seconds, rounded up, at least 1.
pub(crate) fn ttl_secs(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
}

/// `from_revision` values below 1 mean "from now", as in etcd.
pub(crate) fn normalize_from(from_revision: Option<Revision>) -> Option<Revision> {
    from_revision.filter(|r| *r >= 1)
}

/// The text used as the key of lease operations in errors.
pub(crate) fn lease_key(lease: LeaseId) -> String {
    format!("lease {lease}")
}
