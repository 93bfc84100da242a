//! [`Metered`]: a [`Store`] decorator that records the latency and outcome
//! of every operation of the store it wraps in the control plane's store
//! metrics (`docs/metrics.md`):
//!
//! - `switchyard_control_plane_store_operation_duration_seconds{operation}`:
//!   one observation per operation, in seconds, successful or not;
//! - `switchyard_control_plane_store_errors_total{operation}`: one per
//!   operation that returned an error.
//!
//! `operation` is the [`Store`] method's name: `get`, `put`, `delete`,
//! `list`, `txn`, `grant_lease`, `keep_alive` or `revoke`. A compare that
//! fails is not an error (the transaction ran; see [`TxnResult::succeeded`]).
//!
//! [`Store::watch`] is passed through without a measurement: its future
//! resolves when the watch is established, and what follows is a stream
//! that lives as long as the replica, not one operation with a latency.
//!
//! The control plane wraps its store once, where it is opened
//! (`server::start`); every component then shares the metered store.

use super::{KeyValue, LeaseId, Listing, Revision, Store, StoreError, Txn, TxnResult, WatchStream};
use crate::metrics::Metrics;
use std::future::Future;
use std::time::{Duration, Instant};

/// A store that counts every operation of the store `S` it wraps (see the
/// module docs for the metrics and their `operation` labels). Results and
/// errors are passed through unchanged. Cheap to clone when `S` is.
#[derive(Debug, Clone)]
pub struct Metered<S> {
    inner: S,
    metrics: Metrics,
}

impl<S: Store> Metered<S> {
    /// Wraps `inner`; its operations are recorded in `metrics`.
    pub fn new(inner: S, metrics: Metrics) -> Self {
        Metered { inner, metrics }
    }

    /// Runs one operation and records its latency and whether it failed
    /// under `op`.
    async fn timed<T>(
        &self,
        op: &'static str,
        f: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let started = Instant::now();
        let r = f.await;
        self.metrics.store_op(op, started.elapsed(), r.is_ok());
        r
    }
}

impl<S: Store> Store for Metered<S> {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        self.timed("get", self.inner.get(key)).await
    }

    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> Result<Revision, StoreError> {
        self.timed("put", self.inner.put(key, value, lease)).await
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        self.timed("delete", self.inner.delete(key)).await
    }

    async fn list(&self, prefix: &str) -> Result<Listing, StoreError> {
        self.timed("list", self.inner.list(prefix)).await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResult, StoreError> {
        self.timed("txn", self.inner.txn(txn)).await
    }

    async fn watch(
        &self,
        prefix: &str,
        from_revision: Option<Revision>,
    ) -> Result<WatchStream, StoreError> {
        self.inner.watch(prefix, from_revision).await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        self.timed("grant_lease", self.inner.grant_lease(ttl)).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.timed("keep_alive", self.inner.keep_alive(lease)).await
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        self.timed("revoke", self.inner.revoke(lease)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{EmbeddedConfig, EmbeddedStore};

    /// The value of `series{operation="op"}` in the text exposition (for
    /// a histogram, pass its `_count` series); `None` when it is absent.
    fn sample(metrics: &Metrics, series: &str, op: &str) -> Option<u64> {
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&metrics.registry().gather())
            .unwrap();
        let head = format!("{series}{{operation=\"{op}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&head))
            .map(|v| v.parse().unwrap())
    }

    /// How many `op` operations the latency histogram saw.
    fn counted(metrics: &Metrics, op: &str) -> Option<u64> {
        let family = "switchyard_control_plane_store_operation_duration_seconds";
        sample(metrics, &format!("{family}_count"), op)
    }

    /// How many `op` operations failed.
    fn failed(metrics: &Metrics, op: &str) -> Option<u64> {
        sample(metrics, "switchyard_control_plane_store_errors_total", op)
    }

    #[tokio::test]
    async fn every_operation_is_counted_under_its_name_and_failures_as_errors() {
        let dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        let store = Metered::new(
            EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("s.redb")))
                .await
                .unwrap(),
            metrics.clone(),
        );
        assert_eq!(counted(&metrics, "get"), None);

        let rev = store.put("a", b"1".to_vec(), None).await.unwrap();
        let kv = store.get("a").await.unwrap().expect("just written");
        assert_eq!((kv.value.as_slice(), kv.mod_revision), (&b"1"[..], rev));
        assert!(store.get("b").await.unwrap().is_none());
        assert_eq!(store.list("").await.unwrap().kvs.len(), 1);
        let r = store
            .txn(Txn::new().when([crate::store::Compare::absent("a")]))
            .await
            .unwrap();
        assert!(!r.succeeded, "a failed compare is an outcome, not an error");
        let lease = store.grant_lease(Duration::from_secs(30)).await.unwrap();
        store.keep_alive(lease).await.unwrap();
        store.revoke(lease).await.unwrap();
        let gone = store.keep_alive(lease).await.unwrap_err();
        assert!(
            matches!(gone, StoreError::LeaseNotFound { .. }),
            "errors pass through unchanged: {gone}"
        );
        assert!(store.delete("a").await.unwrap());
        let _watch = store.watch("", None).await.unwrap();

        for (op, n) in [
            ("get", 2),
            ("put", 1),
            ("list", 1),
            ("txn", 1),
            ("grant_lease", 1),
            ("keep_alive", 2),
            ("revoke", 1),
            ("delete", 1),
        ] {
            assert_eq!(counted(&metrics, op), Some(n), "{op}");
        }
        assert_eq!(failed(&metrics, "keep_alive"), Some(1));
        assert_eq!(failed(&metrics, "get"), None, "no get failed");
        assert_eq!(
            counted(&metrics, "watch"),
            None,
            "a watch is not an operation with a latency"
        );
    }
}
