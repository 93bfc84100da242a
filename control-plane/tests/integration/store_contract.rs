//! The store contract: every behaviour the control plane relies on, written
//! once as a generic async fn and run against both implementations — the
//! embedded redb store (temp file) and a real etcd (started per test on free
//! loopback ports by `switchyard_test_support::start_etcd`; a missing `etcd`
//! binary fails the test, naming `scripts/install-test-peers.sh`).

use futures::StreamExt;
use std::time::{Duration, Instant};
use switchyard_control_plane::store::{
    Compare, EmbeddedConfig, EmbeddedStore, EtcdConfig, EtcdStore, LeaseId, Op, Store, StoreError,
    Txn, WatchEvent, WatchStream,
};

/// One implementation under test.
trait Backend: Sized {
    type S: Store + Clone + 'static;
    async fn start() -> Self;
    /// A store on this backend rooted at `root` (stores share the backend).
    fn store(&self, root: &str) -> Self::S;
    /// Closes and reopens the backend: the embedded file (all handles must
    /// be dropped first), or a kill and restart of the etcd process.
    async fn reopen(&mut self);
    /// Makes the backend go away: drops the last embedded handle (the test
    /// drops its own first), or kills etcd.
    async fn go_away(&mut self);
    /// Drops watch history before `revision`.
    async fn compact(&self, revision: i64);
}

struct Embedded {
    dir: tempfile::TempDir,
    base: Option<EmbeddedStore>,
}

impl Embedded {
    async fn open(dir: &std::path::Path) -> EmbeddedStore {
        // A nested path: the store creates the directory.
        EmbeddedStore::open(EmbeddedConfig::new(dir.join("state/store.redb")))
            .await
            .expect("open the embedded store")
    }
}

impl Backend for Embedded {
    type S = EmbeddedStore;

    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = Self::open(dir.path()).await;
        Embedded {
            dir,
            base: Some(base),
        }
    }

    fn store(&self, root: &str) -> EmbeddedStore {
        self.base.as_ref().expect("store is open").with_root(root)
    }

    async fn reopen(&mut self) {
        self.base = None;
        self.base = Some(Self::open(self.dir.path()).await);
    }

    async fn go_away(&mut self) {
        self.base = None;
    }

    async fn compact(&self, revision: i64) {
        self.base.as_ref().unwrap().compact(revision).await.unwrap();
    }
}

struct Etcd {
    etcd: switchyard_test_support::Etcd,
    base: EtcdStore,
}

impl Etcd {
    async fn connect(url: &str) -> EtcdStore {
        EtcdStore::connect(EtcdConfig::new([url]))
            .await
            .expect("connect to etcd")
    }
}

impl Backend for Etcd {
    type S = EtcdStore;

    async fn start() -> Self {
        let etcd = switchyard_test_support::start_etcd().await;
        let base = Self::connect(&etcd.url).await;
        Etcd { etcd, base }
    }

    fn store(&self, root: &str) -> EtcdStore {
        self.base.with_root(root)
    }

    async fn reopen(&mut self) {
        self.etcd.restart().await;
        self.base = Self::connect(&self.etcd.url).await;
    }

    async fn go_away(&mut self) {
        self.etcd.stop().await;
    }

    async fn compact(&self, revision: i64) {
        let mut client = self.base.client().clone();
        client.compact(revision, None).await.unwrap();
    }
}

const WAIT: Duration = Duration::from_secs(10);

async fn next_event(w: &mut WatchStream) -> WatchEvent {
    match tokio::time::timeout(WAIT, w.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(e))) => panic!("watch failed: {e}"),
        Ok(None) => panic!("watch ended"),
        Err(_) => panic!("no watch event within {WAIT:?}"),
    }
}

async fn assert_quiet(w: &mut WatchStream, for_: Duration) {
    if let Ok(item) = tokio::time::timeout(for_, w.next()).await {
        panic!("unexpected watch item: {item:?}");
    }
}

fn put_event(event: &WatchEvent) -> (&str, &[u8]) {
    match event {
        WatchEvent::Put(kv) => (&kv.key, &kv.value),
        other => panic!("expected a put, got {other:?}"),
    }
}

fn delete_event(event: &WatchEvent) -> &str {
    match event {
        WatchEvent::Delete { key, .. } => key,
        other => panic!("expected a delete, got {other:?}"),
    }
}

// ---- the contract ---------------------------------------------------------

async fn get_put_delete_list<B: Backend>(b: &mut B) {
    let s = b.store("/switchyard/v1/");
    assert!(s.get("servers/a").await.unwrap().is_none());

    let r1 = s.put("servers/a", b"one".to_vec(), None).await.unwrap();
    let kv = s.get("servers/a").await.unwrap().unwrap();
    assert_eq!(kv.key, "servers/a");
    assert_eq!(kv.value, b"one");
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r1, r1, 1)
    );
    assert_eq!(kv.lease, None);

    let r2 = s.put("servers/a", b"two".to_vec(), None).await.unwrap();
    let kv = s.get("servers/a").await.unwrap().unwrap();
    assert_eq!(kv.value, b"two");
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r1, r2, 2)
    );

    s.put("servers/c", b"c".to_vec(), None).await.unwrap();
    s.put("servers/b", b"b".to_vec(), None).await.unwrap();
    s.put("servers-old/z", b"z".to_vec(), None).await.unwrap();
    let last = s.put("sessions/x", vec![0, 255, 1], None).await.unwrap();

    let listing = s.list("servers/").await.unwrap();
    let keys: Vec<&str> = listing.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["servers/a", "servers/b", "servers/c"]);
    assert_eq!(listing.revision, last);
    let all = s.list("").await.unwrap();
    let keys: Vec<&str> = all.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "servers-old/z",
            "servers/a",
            "servers/b",
            "servers/c",
            "sessions/x"
        ]
    );
    assert_eq!(all.kvs[4].value, [0, 255, 1]);

    assert!(s.delete("servers/a").await.unwrap());
    assert!(s.get("servers/a").await.unwrap().is_none());
    assert!(!s.delete("servers/a").await.unwrap());
    assert!(s.list("nothing/").await.unwrap().kvs.is_empty());

    let err = s.put("", b"x".to_vec(), None).await.unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidArgument { op: "put", .. }),
        "{err}"
    );
}

async fn revisions_increase<B: Backend>(b: &mut B) {
    let s = b.store("/rev/");
    let r1 = s.put("k", b"1".to_vec(), None).await.unwrap();
    let r2 = s.put("other", b"1".to_vec(), None).await.unwrap();
    let r3 = s.put("k", b"2".to_vec(), None).await.unwrap();
    assert!(r1 < r2 && r2 < r3, "{r1} {r2} {r3}");
    assert!(s.delete("k").await.unwrap());
    let after_delete = s.list("").await.unwrap().revision;
    assert!(after_delete > r3);
    // Deleting an absent key writes nothing and keeps the revision.
    assert!(!s.delete("k").await.unwrap());
    assert_eq!(s.list("").await.unwrap().revision, after_delete);
    // A re-created key starts over.
    let r5 = s.put("k", b"3".to_vec(), None).await.unwrap();
    assert_eq!(r5, after_delete + 1);
    let kv = s.get("k").await.unwrap().unwrap();
    assert_eq!(
        (kv.create_revision, kv.mod_revision, kv.version),
        (r5, r5, 1)
    );
}

async fn cas_success_and_failure<B: Backend>(b: &mut B) {
    let s = b.store("/cas/");
    // Create-if-absent: the first wins, the second fails and writes nothing.
    let create = || {
        Txn::new()
            .when([Compare::absent("owner")])
            .and_then([Op::put("owner", "a")])
    };
    let first = s.txn(create()).await.unwrap();
    assert!(first.succeeded);
    assert_eq!(
        s.get("owner").await.unwrap().unwrap().mod_revision,
        first.revision
    );
    let second = s.txn(create()).await.unwrap();
    assert!(!second.succeeded);
    assert_eq!(
        second.revision, first.revision,
        "a failed txn with no ops writes nothing"
    );
    assert_eq!(s.get("owner").await.unwrap().unwrap().value, b"a");

    // mod_revision: the current one succeeds, a stale one runs the failure branch.
    let swap = s
        .txn(
            Txn::new()
                .when([Compare::mod_revision("owner", first.revision)])
                .and_then([Op::put("owner", "b"), Op::put("log", "swapped")])
                .or_else([Op::put("log", "conflict")]),
        )
        .await
        .unwrap();
    assert!(swap.succeeded);
    assert!(swap.revision > first.revision);
    let owner = s.get("owner").await.unwrap().unwrap();
    let log = s.get("log").await.unwrap().unwrap();
    assert_eq!(
        (owner.value.as_slice(), owner.mod_revision),
        (&b"b"[..], swap.revision)
    );
    assert_eq!(
        (log.value.as_slice(), log.mod_revision),
        (&b"swapped"[..], swap.revision)
    );

    let stale = s
        .txn(
            Txn::new()
                .when([Compare::mod_revision("owner", first.revision)])
                .and_then([Op::put("owner", "c")])
                .or_else([Op::put("log", "conflict")]),
        )
        .await
        .unwrap();
    assert!(!stale.succeeded);
    assert!(stale.revision > swap.revision, "the failure branch wrote");
    assert_eq!(s.get("owner").await.unwrap().unwrap().value, b"b");
    assert_eq!(s.get("log").await.unwrap().unwrap().value, b"conflict");

    // Value compares; on an absent key they fail.
    let by_value = s
        .txn(
            Txn::new()
                .when([
                    Compare::value("owner", "b"),
                    Compare::value("log", "conflict"),
                ])
                .and_then([Op::delete("owner"), Op::delete("log")]),
        )
        .await
        .unwrap();
    assert!(by_value.succeeded);
    assert!(s.list("").await.unwrap().kvs.is_empty());
    let absent = s
        .txn(
            Txn::new()
                .when([Compare::value("owner", "")])
                .and_then([Op::put("owner", "x")]),
        )
        .await
        .unwrap();
    assert!(!absent.succeeded);
    assert!(s.get("owner").await.unwrap().is_none());

    // One key twice in a branch is refused by both stores alike.
    let err = s
        .txn(Txn::new().and_then([Op::put("k", "1"), Op::delete("k")]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidArgument { op: "txn", .. }),
        "{err}"
    );
}

async fn watch_live_events<B: Backend>(b: &mut B) {
    let s = b.store("/watch/");
    s.put("servers/before", b"0".to_vec(), None).await.unwrap();
    let mut w = s.watch("servers/", None).await.unwrap();
    let r1 = s.put("servers/a", b"1".to_vec(), None).await.unwrap();
    s.put("sessions/x", b"ignored".to_vec(), None)
        .await
        .unwrap();
    assert!(s.delete("servers/a").await.unwrap());
    let t = s
        .txn(Txn::new().and_then([Op::put("servers/b", "2"), Op::put("servers/c", "3")]))
        .await
        .unwrap();

    let e = next_event(&mut w).await;
    assert_eq!(put_event(&e), ("servers/a", &b"1"[..]));
    assert_eq!(e.revision(), r1);
    let e = next_event(&mut w).await;
    assert_eq!(delete_event(&e), "servers/a");
    assert_eq!(e.revision(), r1 + 2);
    let (b_event, c_event) = (next_event(&mut w).await, next_event(&mut w).await);
    assert_eq!(put_event(&b_event), ("servers/b", &b"2"[..]));
    assert_eq!(put_event(&c_event), ("servers/c", &b"3"[..]));
    assert_eq!(
        (b_event.revision(), c_event.revision()),
        (t.revision, t.revision)
    );
    assert_quiet(&mut w, Duration::from_millis(300)).await;
}

async fn watch_replays_from_past_revision<B: Backend>(b: &mut B) {
    let s = b.store("/replay/");
    let r1 = s.put("a", b"1".to_vec(), None).await.unwrap();
    let r2 = s.put("b", b"2".to_vec(), None).await.unwrap();
    s.put("elsewhere/x", b"x".to_vec(), None).await.unwrap();
    assert!(s.delete("a").await.unwrap());
    let r4 = s.list("").await.unwrap().revision;

    let mut w = s.watch("", Some(r2)).await.unwrap();
    let e = next_event(&mut w).await;
    assert_eq!((put_event(&e), e.revision()), (("b", &b"2"[..]), r2));
    let e = next_event(&mut w).await;
    assert_eq!(put_event(&e).0, "elsewhere/x");
    let e = next_event(&mut w).await;
    assert_eq!((delete_event(&e), e.revision()), ("a", r4));
    // Then live events, without gap or duplicate.
    let r5 = s.put("c", b"3".to_vec(), None).await.unwrap();
    let e = next_event(&mut w).await;
    assert_eq!((put_event(&e).0, e.revision()), ("c", r5));

    // From the very first revision, with a prefix filter.
    let mut w = s.watch("a", Some(r1)).await.unwrap();
    let e = next_event(&mut w).await;
    assert_eq!((put_event(&e).0, e.revision()), ("a", r1));
    let e = next_event(&mut w).await;
    assert_eq!((delete_event(&e), e.revision()), ("a", r4));
    assert_quiet(&mut w, Duration::from_millis(300)).await;

    // From a future revision: nothing until it is reached.
    let mut w = s.watch("", Some(r5 + 2)).await.unwrap();
    s.put("skipped", b"".to_vec(), None).await.unwrap();
    let r7 = s.put("seen", b"".to_vec(), None).await.unwrap();
    let e = next_event(&mut w).await;
    assert_eq!((put_event(&e).0, e.revision()), ("seen", r7));
}

async fn watch_from_compacted_revision_fails<B: Backend>(b: &mut B) {
    let s = b.store("/compact/");
    let mut revisions = Vec::new();
    for i in 0..5 {
        revisions.push(s.put(&format!("k{i}"), b"v".to_vec(), None).await.unwrap());
    }
    b.compact(revisions[3]).await;
    let err = s
        .watch("", Some(revisions[0]))
        .await
        .err()
        .expect("watching compacted history fails");
    match &err {
        StoreError::Compacted {
            oldest, requested, ..
        } => {
            assert_eq!((*requested, *oldest), (revisions[0], revisions[3]));
        }
        other => panic!("expected Compacted, got {other}"),
    }
    assert!(
        err.to_string()
            .contains(&format!("oldest available revision is {}", revisions[3])),
        "{err}"
    );
    let mut w = s.watch("", Some(revisions[3])).await.unwrap();
    assert_eq!(put_event(&next_event(&mut w).await).0, "k3");
    assert_eq!(put_event(&next_event(&mut w).await).0, "k4");
}

async fn lease_expiry_deletes_keys<B: Backend>(b: &mut B) {
    let s = b.store("/lease-expiry/");
    let ttl = Duration::from_secs(2);
    let lease = s.grant_lease(ttl).await.unwrap();
    let granted = Instant::now();
    s.put("sidecars/a/1", b"addr1".to_vec(), Some(lease))
        .await
        .unwrap();
    s.put("sidecars/a/2", b"addr2".to_vec(), Some(lease))
        .await
        .unwrap();
    s.put("sidecars/keep", b"no lease".to_vec(), None)
        .await
        .unwrap();
    assert_eq!(
        s.get("sidecars/a/1").await.unwrap().unwrap().lease,
        Some(lease)
    );
    let mut w = s.watch("sidecars/", None).await.unwrap();

    let first = next_event(&mut w).await;
    let second = next_event(&mut w).await;
    let elapsed = granted.elapsed();
    let mut deleted = [delete_event(&first), delete_event(&second)];
    deleted.sort();
    assert_eq!(deleted, ["sidecars/a/1", "sidecars/a/2"]);
    assert_eq!(
        first.revision(),
        second.revision(),
        "one lease's keys go in one revision"
    );
    assert!(
        elapsed >= ttl - Duration::from_millis(300),
        "expired early: {elapsed:?}"
    );
    assert!(
        elapsed <= ttl + Duration::from_millis(1500),
        "expired late: {elapsed:?}"
    );

    assert!(s.get("sidecars/a/1").await.unwrap().is_none());
    assert!(s.get("sidecars/keep").await.unwrap().is_some());
    let err = s.keep_alive(lease).await.unwrap_err();
    assert!(matches!(err, StoreError::LeaseNotFound { .. }), "{err}");
    let err = s
        .put("sidecars/a/3", b"x".to_vec(), Some(lease))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::LeaseNotFound { lease: l, .. } if l == lease),
        "{err}"
    );
}

async fn keep_alive_extends_lease<B: Backend>(b: &mut B) {
    let s = b.store("/keepalive/");
    // Refreshed every second, a 3 s lease outlives a stall of up to 2 s
    // between refreshes (a loaded 2-core CI machine).
    let ttl = Duration::from_secs(3);
    let lease = s.grant_lease(ttl).await.unwrap();
    s.put("leased", b"v".to_vec(), Some(lease)).await.unwrap();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        s.keep_alive(lease).await.unwrap();
    }
    // 6 s after the grant, twice the TTL, the key is still there.
    assert!(s.get("leased").await.unwrap().is_some());
    let refreshed = Instant::now();
    let mut w = s.watch("leased", None).await.unwrap();
    assert_eq!(delete_event(&next_event(&mut w).await), "leased");
    // Then it goes with the lease, about a TTL after the last refresh
    // (etcd checks expiry every 500 ms; allow for a loaded machine).
    assert!(
        refreshed.elapsed() <= ttl + Duration::from_secs(3),
        "{:?}",
        refreshed.elapsed()
    );
}

async fn revoke_deletes_attached_keys<B: Backend>(b: &mut B) {
    let s = b.store("/revoke/");
    let lease = s.grant_lease(Duration::from_secs(60)).await.unwrap();
    let other = s.grant_lease(Duration::from_secs(60)).await.unwrap();
    assert_ne!(lease, other);
    s.put("a", b"1".to_vec(), Some(lease)).await.unwrap();
    s.put("b", b"2".to_vec(), Some(lease)).await.unwrap();
    // Re-putting without a lease detaches the key; moving it to another lease too.
    s.put("c", b"3".to_vec(), Some(lease)).await.unwrap();
    s.put("c", b"3".to_vec(), None).await.unwrap();
    s.txn(Txn::new().and_then([Op::put_with_lease("d", "4", lease)]))
        .await
        .unwrap();
    s.put("d", b"4".to_vec(), Some(other)).await.unwrap();

    let mut w = s.watch("", None).await.unwrap();
    s.revoke(lease).await.unwrap();
    let (e1, e2) = (next_event(&mut w).await, next_event(&mut w).await);
    let mut deleted = [delete_event(&e1), delete_event(&e2)];
    deleted.sort();
    assert_eq!(deleted, ["a", "b"]);
    assert_eq!(e1.revision(), e2.revision());
    assert_quiet(&mut w, Duration::from_millis(300)).await;
    let keys: Vec<String> = s
        .list("")
        .await
        .unwrap()
        .kvs
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    assert_eq!(keys, ["c", "d"]);

    for err in [
        s.revoke(lease).await.unwrap_err(),
        s.keep_alive(lease).await.unwrap_err(),
        s.put("e", b"5".to_vec(), Some(lease)).await.unwrap_err(),
        s.txn(Txn::new().and_then([Op::put_with_lease("e", "5", lease)]))
            .await
            .unwrap_err(),
    ] {
        assert!(
            matches!(err, StoreError::LeaseNotFound { lease: l, .. } if l == lease),
            "{err}"
        );
    }
    assert!(
        s.get("e").await.unwrap().is_none(),
        "a failed txn writes nothing"
    );
    s.keep_alive(other).await.unwrap();
    assert!(s.get("d").await.unwrap().is_some());
    let unknown = LeaseId(987_654_321);
    assert!(matches!(
        s.keep_alive(unknown).await,
        Err(StoreError::LeaseNotFound { .. })
    ));
}

async fn prefix_isolation<B: Backend>(b: &mut B) {
    let one = b.store("/iso/one/");
    let two = b.store("/iso/two"); // normalised to "/iso/two/"
    let mut w_two = two.watch("", None).await.unwrap();
    one.put("k", b"one".to_vec(), None).await.unwrap();
    two.put("k", b"two".to_vec(), None).await.unwrap();
    one.put("only-one", b"1".to_vec(), None).await.unwrap();
    assert_eq!(one.get("k").await.unwrap().unwrap().value, b"one");
    assert_eq!(two.get("k").await.unwrap().unwrap().value, b"two");
    assert!(two.get("only-one").await.unwrap().is_none());
    let keys: Vec<String> = two
        .list("")
        .await
        .unwrap()
        .kvs
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    assert_eq!(keys, ["k"]);
    assert!(one.delete("k").await.unwrap());
    assert_eq!(two.get("k").await.unwrap().unwrap().value, b"two");
    // The watch on `two` sees its own put and nothing of `one`.
    let e = next_event(&mut w_two).await;
    assert_eq!(put_event(&e), ("k", &b"two"[..]));
    assert_quiet(&mut w_two, Duration::from_millis(300)).await;
    // A root that is a string prefix of another does not see into it.
    let parent = b.store("/iso/t");
    assert!(parent.list("").await.unwrap().kvs.is_empty());
}

async fn concurrent_cas_increments_lose_no_updates<B: Backend>(b: &mut B) {
    const TASKS: usize = 8;
    const EACH: usize = 25;
    let s = b.store("/counter/");
    s.put("n", b"0".to_vec(), None).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0;
            for _ in 0..EACH {
                loop {
                    let kv = s.get("n").await.unwrap().unwrap();
                    let n: usize = String::from_utf8(kv.value).unwrap().parse().unwrap();
                    let result = s
                        .txn(
                            Txn::new()
                                .when([Compare::mod_revision("n", kv.mod_revision)])
                                .and_then([Op::put("n", (n + 1).to_string())]),
                        )
                        .await
                        .unwrap();
                    if result.succeeded {
                        break;
                    }
                    conflicts += 1;
                }
            }
            conflicts
        }));
    }
    let mut conflicts = 0;
    for task in tasks {
        conflicts += task.await.unwrap();
    }
    let kv = s.get("n").await.unwrap().unwrap();
    assert_eq!(
        String::from_utf8(kv.value).unwrap(),
        (TASKS * EACH).to_string()
    );
    assert_eq!(kv.version, i64::try_from(TASKS * EACH + 1).unwrap());
    eprintln!(
        "{} increments, {conflicts} CAS conflicts retried",
        TASKS * EACH
    );
}

async fn reopen_keeps_data_and_revision<B: Backend>(b: &mut B) {
    let s = b.store("/reopen/");
    s.put("a", b"1".to_vec(), None).await.unwrap();
    s.put("b", b"2".to_vec(), None).await.unwrap();
    let lease = s.grant_lease(Duration::from_secs(60)).await.unwrap();
    s.put("leased", b"3".to_vec(), Some(lease)).await.unwrap();
    assert!(s.delete("b").await.unwrap());
    let before = s.list("").await.unwrap();
    drop(s);

    b.reopen().await;
    let s = b.store("/reopen/");
    let after = s.list("").await.unwrap();
    assert_eq!(after, before);
    assert_eq!(s.get("leased").await.unwrap().unwrap().lease, Some(lease));
    s.keep_alive(lease).await.unwrap();
    let next = s.put("c", b"4".to_vec(), None).await.unwrap();
    assert_eq!(next, before.revision + 1);
    // History survives too.
    let mut w = s.watch("", Some(before.revision)).await.unwrap();
    let e = next_event(&mut w).await;
    assert_eq!((delete_event(&e), e.revision()), ("b", before.revision));
    assert_eq!(put_event(&next_event(&mut w).await).0, "c");
}

async fn watch_ends_with_error_when_store_goes_away<B: Backend>(b: &mut B) {
    let s = b.store("/away/");
    let mut w = s.watch("", None).await.unwrap();
    s.put("k", b"v".to_vec(), None).await.unwrap();
    assert_eq!(put_event(&next_event(&mut w).await).0, "k");
    drop(s);
    b.go_away().await;
    match tokio::time::timeout(WAIT, w.next()).await {
        Ok(Some(Err(e))) => eprintln!("watch ended with: {e}"),
        other => panic!("expected an error item, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(WAIT, w.next())
            .await
            .unwrap()
            .is_none()
    );
}

macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let mut backend = <super::Embedded as super::Backend>::start().await;
                    super::$name(&mut backend).await;
                }
            )*
        }
        mod etcd {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let mut backend = <super::Etcd as super::Backend>::start().await;
                    super::$name(&mut backend).await;
                }
            )*
        }
    };
}

contract!(
    get_put_delete_list,
    revisions_increase,
    cas_success_and_failure,
    watch_live_events,
    watch_replays_from_past_revision,
    watch_from_compacted_revision_fails,
    lease_expiry_deletes_keys,
    keep_alive_extends_lease,
    revoke_deletes_attached_keys,
    prefix_isolation,
    concurrent_cas_increments_lose_no_updates,
    reopen_keeps_data_and_revision,
    watch_ends_with_error_when_store_goes_away,
);
