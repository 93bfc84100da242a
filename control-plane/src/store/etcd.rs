//! The etcd store: etcd v3 through `etcd-client`, for clustered control
//! planes. Keys live under the root prefix; revisions, transactions, watches
//! and leases are etcd's own, so several control-plane replicas on one etcd
//! see one consistent state.

use super::{
    Compare, KeyValue, LeaseId, Listing, Op, Revision, Store, StoreError, Txn, TxnResult,
    WatchEvent, WatchStream, check_key, lease_key, normalize_from, normalize_root, ttl_secs,
};
use etcd_client::{
    Client, CompareOp, ConnectOptions, EventType, GetOptions, PutOptions, TxnOp, WatchOptions,
};
use futures::StreamExt;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Configuration of the etcd store.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// Client URLs, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// Root prefix applied to every key (see [`super::DEFAULT_ROOT`]).
    pub root: String,
    /// Bound on connecting (and on the first round trip of [`EtcdStore::connect`]).
    pub connect_timeout: Duration,
    /// Bound on each unary request and on establishing a watch (default 10 s).
    pub request_timeout: Duration,
}

impl EtcdConfig {
    /// Defaults for `endpoints`, rooted at [`super::DEFAULT_ROOT`].
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            root: super::DEFAULT_ROOT.to_owned(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
        }
    }

    /// Sets the root prefix.
    pub fn with_root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }
}

/// The etcd store. Cheap to clone (clones share the gRPC channel).
#[derive(Clone)]
pub struct EtcdStore {
    // Boxed: a `Client` is several kilobytes and is cloned into every watch.
    client: Arc<Client>,
    root: Arc<str>,
    request_timeout: Duration,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("root", &self.root)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

/// etcd's text for a missing lease (gRPC status message and keep-alive error).
const LEASE_NOT_FOUND: &str = "lease not found";

impl EtcdStore {
    /// Connects to etcd and checks it answers (one read of the root prefix).
    ///
    /// Errors: [`StoreError::Backend`] with op `connect` if the endpoints are
    /// invalid or etcd does not answer within `connect_timeout`.
    pub async fn connect(config: EtcdConfig) -> Result<Self, StoreError> {
        let root = normalize_root(&config.root);
        let endpoints = config.endpoints.join(",");
        let options = ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(5));
        let client = Client::connect(&config.endpoints, Some(options))
            .await
            .map_err(|e| {
                StoreError::backend("connect", endpoints.clone(), "cannot connect to etcd", e)
            })?;
        let store = EtcdStore {
            client: Arc::new(client),
            root: root.into(),
            request_timeout: config.request_timeout,
        };
        let mut kv = store.client.kv_client();
        let probe = kv.get(
            store.root.as_bytes(),
            Some(GetOptions::new().with_prefix().with_count_only()),
        );
        match tokio::time::timeout(config.connect_timeout, probe).await {
            Ok(Ok(_)) => Ok(store),
            Ok(Err(e)) => Err(StoreError::backend(
                "connect",
                endpoints,
                "etcd refused the first request",
                e,
            )),
            Err(e) => Err(StoreError::backend(
                "connect",
                endpoints,
                "etcd did not answer in time",
                e,
            )),
        }
    }

    /// Another view of the same etcd rooted at `root`.
    pub fn with_root(&self, root: &str) -> Self {
        EtcdStore {
            client: self.client.clone(),
            root: normalize_root(root).into(),
            request_timeout: self.request_timeout,
        }
    }

    /// The normalised root prefix.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The underlying client (for operations the trait does not cover, such
    /// as compaction).
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.root)
    }

    /// Runs one etcd request with the request timeout, mapping its error.
    async fn call<T>(
        &self,
        op: &'static str,
        key: &str,
        lease: Option<LeaseId>,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.request_timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(map_error(op, key, lease, e)),
            Err(e) => Err(StoreError::backend(op, key, "etcd request timed out", e)),
        }
    }

    fn to_key_value(
        &self,
        op: &'static str,
        kv: &etcd_client::KeyValue,
    ) -> Result<KeyValue, StoreError> {
        Ok(KeyValue {
            key: self.relative(op, kv.key())?,
            value: kv.value().to_vec(),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
            version: kv.version(),
            lease: (kv.lease() != 0).then_some(LeaseId(kv.lease())),
        })
    }

    fn relative(&self, op: &'static str, key: &[u8]) -> Result<String, StoreError> {
        let text = String::from_utf8_lossy(key);
        match std::str::from_utf8(key)
            .ok()
            .and_then(|k| k.strip_prefix(&*self.root))
        {
            Some(rel) => Ok(rel.to_owned()),
            None => Err(StoreError::backend(
                op,
                text.into_owned(),
                "etcd returned a key outside the root or not UTF-8",
                "unexpected key",
            )),
        }
    }

    fn to_event(&self, event: &etcd_client::Event) -> Result<WatchEvent, StoreError> {
        let kv = event.kv().ok_or_else(|| {
            StoreError::backend(
                "watch",
                "",
                "etcd sent an event without a key",
                "missing kv",
            )
        })?;
        match event.event_type() {
            EventType::Put => Ok(WatchEvent::Put(self.to_key_value("watch", kv)?)),
            EventType::Delete => Ok(WatchEvent::Delete {
                key: self.relative("watch", kv.key())?,
                mod_revision: kv.mod_revision(),
            }),
        }
    }
}

fn map_error(
    op: &'static str,
    key: &str,
    lease: Option<LeaseId>,
    e: etcd_client::Error,
) -> StoreError {
    let lease_missing = match &e {
        etcd_client::Error::GRpcStatus(status) => status.message().contains(LEASE_NOT_FOUND),
        etcd_client::Error::LeaseKeepAliveError(message) => message.contains(LEASE_NOT_FOUND),
        _ => false,
    };
    match lease {
        Some(lease) if lease_missing => StoreError::LeaseNotFound {
            op,
            key: key.to_owned(),
            lease,
        },
        _ => StoreError::backend(op, key, "etcd request failed", e),
    }
}

fn txn_op(root: &str, op: &Op) -> TxnOp {
    match op {
        Op::Put { key, value, lease } => TxnOp::put(
            format!("{root}{key}"),
            value.clone(),
            lease.map(|l| PutOptions::new().with_lease(l.0)),
        ),
        Op::Delete { key } => TxnOp::delete(format!("{root}{key}"), None),
    }
}

struct WatchState {
    store: EtcdStore,
    stream: etcd_client::WatchStream,
    queue: VecDeque<WatchEvent>,
    prefix: String,
    done: bool,
}

impl WatchState {
    /// One response of the server: its events, or the error that ends the watch.
    fn absorb(&mut self, response: etcd_client::WatchResponse) -> Result<(), StoreError> {
        if response.canceled() {
            return Err(cancelled(&self.prefix, 0, &response));
        }
        for event in response.events() {
            let event = self.store.to_event(event)?;
            self.queue.push_back(event);
        }
        Ok(())
    }
}

fn cancelled(
    prefix: &str,
    requested: Revision,
    response: &etcd_client::WatchResponse,
) -> StoreError {
    if response.compact_revision() > 0 {
        StoreError::Compacted {
            prefix: prefix.to_owned(),
            requested,
            oldest: response.compact_revision(),
        }
    } else {
        StoreError::WatchCancelled {
            prefix: prefix.to_owned(),
            reason: response.cancel_reason().to_owned(),
        }
    }
}

impl Store for EtcdStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        check_key("get", key)?;
        let mut kv = self.client.kv_client();
        let resp = self
            .call("get", key, None, kv.get(self.full(key), None))
            .await?;
        resp.kvs()
            .first()
            .map(|kv| self.to_key_value("get", kv))
            .transpose()
    }

    async fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    ) -> Result<Revision, StoreError> {
        check_key("put", key)?;
        let mut kv = self.client.kv_client();
        let options = lease.map(|l| PutOptions::new().with_lease(l.0));
        let resp = self
            .call("put", key, lease, kv.put(self.full(key), value, options))
            .await?;
        header_revision("put", key, resp.header())
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        check_key("delete", key)?;
        let mut kv = self.client.kv_client();
        let resp = self
            .call("delete", key, None, kv.delete(self.full(key), None))
            .await?;
        Ok(resp.deleted() > 0)
    }

    async fn list(&self, prefix: &str) -> Result<Listing, StoreError> {
        let mut kv = self.client.kv_client();
        // etcd returns a range sorted by key.
        let resp = self
            .call(
                "list",
                prefix,
                None,
                kv.get(self.full(prefix), Some(GetOptions::new().with_prefix())),
            )
            .await?;
        let kvs = resp
            .kvs()
            .iter()
            .map(|kv| self.to_key_value("list", kv))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Listing {
            kvs,
            revision: header_revision("list", prefix, resp.header())?,
        })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResult, StoreError> {
        txn.validate()?;
        let key = txn.error_key();
        let root = &*self.root;
        let compares: Vec<etcd_client::Compare> = txn
            .compares
            .iter()
            .map(|c| match c {
                Compare::ModRevision { key, revision } => etcd_client::Compare::mod_revision(
                    format!("{root}{key}"),
                    CompareOp::Equal,
                    *revision,
                ),
                Compare::Value { key, value } => etcd_client::Compare::value(
                    format!("{root}{key}"),
                    CompareOp::Equal,
                    value.clone(),
                ),
            })
            .collect();
        let success: Vec<TxnOp> = txn.success.iter().map(|o| txn_op(root, o)).collect();
        let failure: Vec<TxnOp> = txn.failure.iter().map(|o| txn_op(root, o)).collect();
        // For the error of a missing lease: the first lease the txn uses.
        let lease = txn
            .success
            .iter()
            .chain(&txn.failure)
            .find_map(|o| match o {
                Op::Put { lease, .. } => *lease,
                Op::Delete { .. } => None,
            });
        let request = etcd_client::Txn::new()
            .when(compares)
            .and_then(success)
            .or_else(failure);
        let mut kv = self.client.kv_client();
        let resp = self.call("txn", &key, lease, kv.txn(request)).await?;
        Ok(TxnResult {
            succeeded: resp.succeeded(),
            revision: header_revision("txn", &key, resp.header())?,
        })
    }

    async fn watch(
        &self,
        prefix: &str,
        from_revision: Option<Revision>,
    ) -> Result<WatchStream, StoreError> {
        let from = normalize_from(from_revision);
        let mut options = WatchOptions::new().with_prefix();
        if let Some(revision) = from {
            options = options.with_start_revision(revision);
        }
        let full = self.full(prefix);
        // etcd accepts a watch from a compacted revision and cancels it a
        // moment later; a read at that revision fails at once, so probe first
        // and then wait for the cancellation, which names the oldest revision.
        let compacted = match from {
            Some(revision) => {
                let mut kv = self.client.kv_client();
                let options = GetOptions::new()
                    .with_prefix()
                    .with_count_only()
                    .with_revision(revision);
                match tokio::time::timeout(
                    self.request_timeout,
                    kv.get(full.clone(), Some(options)),
                )
                .await
                {
                    Ok(Err(etcd_client::Error::GRpcStatus(status))) => {
                        status.message().contains("compacted")
                    }
                    _ => false,
                }
            }
            None => false,
        };
        let mut client = self.client.watch_client();
        let established = async {
            let mut stream = client.watch(full, Some(options)).await?;
            let mut created = stream.message().await?;
            while compacted && created.as_ref().is_some_and(|r| !r.canceled()) {
                created = stream.message().await?;
            }
            Ok::<_, etcd_client::Error>((stream, created))
        };
        let (stream, created) = self.call("watch", prefix, None, established).await?;
        let Some(created) = created else {
            return Err(StoreError::Closed {
                op: "watch",
                key: prefix.to_owned(),
            });
        };
        if created.canceled() {
            return Err(cancelled(prefix, from.unwrap_or(0), &created));
        }
        let mut state = WatchState {
            store: self.clone(),
            stream,
            queue: VecDeque::new(),
            prefix: prefix.to_owned(),
            done: false,
        };
        // The creation response carries no events, but be safe.
        state.absorb(created)?;
        Ok(futures::stream::unfold(state, |mut st| async move {
            loop {
                if let Some(event) = st.queue.pop_front() {
                    return Some((Ok(event), st));
                }
                if st.done {
                    return None;
                }
                let error = match st.stream.message().await {
                    Ok(Some(response)) => match st.absorb(response) {
                        Ok(()) => continue,
                        Err(e) => e,
                    },
                    Ok(None) => StoreError::Closed {
                        op: "watch",
                        key: st.prefix.clone(),
                    },
                    Err(e) => StoreError::backend(
                        "watch",
                        st.prefix.clone(),
                        "the etcd watch stream failed",
                        e,
                    ),
                };
                st.done = true;
                return Some((Err(error), st));
            }
        })
        .boxed())
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, StoreError> {
        let secs = ttl_secs(ttl);
        let key = format!("ttl {secs}s");
        let mut leases = self.client.lease_client();
        let resp = self
            .call("grant_lease", &key, None, leases.grant(secs, None))
            .await?;
        if !resp.error().is_empty() {
            return Err(StoreError::backend(
                "grant_lease",
                key,
                "etcd refused the lease",
                resp.error().to_owned(),
            ));
        }
        Ok(LeaseId(resp.id()))
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<(), StoreError> {
        let mut leases = self.client.lease_client();
        // Opens a keep-alive stream, sends one refresh and reads its answer
        // (a TTL of 0 there is reported as "lease not found"); dropping the
        // stream ends it.
        let key = lease_key(lease);
        self.call("keep_alive", &key, Some(lease), leases.keep_alive(lease.0))
            .await?;
        Ok(())
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), StoreError> {
        let mut leases = self.client.lease_client();
        let key = lease_key(lease);
        self.call("revoke", &key, Some(lease), leases.revoke(lease.0))
            .await?;
        Ok(())
    }
}

fn header_revision(
    op: &'static str,
    key: &str,
    header: Option<&etcd_client::ResponseHeader>,
) -> Result<Revision, StoreError> {
    header.map(|h| h.revision()).ok_or_else(|| {
        StoreError::backend(op, key, "etcd sent no response header", "missing header")
    })
}
