//! Stage D token records (`oauth::tokens`) on both stores: the embedded
//! one and a real etcd. Tokens are sealed at rest and bound to their key
//! and issuer; a save names the revision it read, so of two replicas
//! refreshing from the same read one writes and the other writes nothing;
//! the refresh lock has one holder at a time and is freed by its lease
//! when the holder dies; a record sealed under a retired key still opens.

use std::time::Duration;
use switchyard_control_plane::oauth::KeyRing;
use switchyard_control_plane::oauth::tokens::{
    Issued, RefreshLock, Tokens, load, lock_key, save, still_current, tokens_key,
};
use switchyard_control_plane::store::{
    EmbeddedConfig, EmbeddedStore, EtcdConfig, EtcdStore, Op, Store, Txn,
};

fn first(generation: u64) -> Tokens {
    Tokens {
        access_token: format!("access-{generation}-7f3a"),
        refresh_token: Some(format!("refresh-{generation}-9c1e")),
        expires_at_ms: Some(1_000_000),
        scopes: vec!["mcp:read".into()],
        issuer: "https://as.example/tenant1".into(),
        resource: "https://mcp.example/mcp".into(),
        generation,
        client_id: "switchyard".into(),
        issued_at_ms: 0,
        authorized_at_ms: 0,
        server_url: "https://mcp.example/mcp".into(),
    }
}

async fn records<S: Store + Clone + 'static>(store: S) {
    let ring = KeyRing::new(&[7; 32], &[]);
    assert!(load(&store, &ring, "linear").await.unwrap().is_none());
    let t = first(1);
    let rev = save(&store, &ring, "linear", &t, None)
        .await
        .unwrap()
        .expect("the first save");
    // A second first save finds a record: nothing written.
    assert_eq!(
        save(&store, &ring, "linear", &first(9), None)
            .await
            .unwrap(),
        None
    );
    let (back, read) = load(&store, &ring, "linear").await.unwrap().unwrap();
    assert_eq!((back.clone(), read), (t.clone(), rev));

    // At rest: no token, and the issuer only.
    let raw = store
        .get(&tokens_key("linear"))
        .await
        .unwrap()
        .unwrap()
        .value;
    let raw = String::from_utf8(raw).unwrap();
    assert!(
        !raw.contains("access-1") && !raw.contains("refresh-1"),
        "{raw}"
    );
    assert!(raw.contains("https://as.example/tenant1"), "{raw}");

    // Copied to another server's key, or relabelled: does not open.
    store
        .put(&tokens_key("github"), raw.clone().into_bytes(), None)
        .await
        .unwrap();
    let e = load(&store, &ring, "github").await.unwrap_err();
    assert!(e.to_string().contains("do not open"), "{e}");
    let relabelled = raw.replace("https://as.example/tenant1", "https://evil.example");
    store
        .put(&tokens_key("github"), relabelled.into_bytes(), None)
        .await
        .unwrap();
    assert!(load(&store, &ring, "github").await.is_err());
    // Not a record: an error naming the key, never a panic.
    store
        .put(&tokens_key("github"), b"{oops".to_vec(), None)
        .await
        .unwrap();
    let e = load(&store, &ring, "github").await.unwrap_err();
    assert!(e.to_string().contains("oauth/tokens/github"), "{e}");

    // Two replicas refresh from the same read: one writes.
    let issued = |n: &str| Issued {
        access_token: format!("access-{n}"),
        refresh_token: Some(format!("refresh-{n}")),
        expires_in: Some(3600),
        scopes: None,
    };
    let a = back.rotated(issued("a"), 0);
    let b = back.rotated(issued("b"), 0);
    let (ra, rb) = tokio::join!(
        save(&store, &ring, "linear", &a, Some(read)),
        save(&store, &ring, "linear", &b, Some(read)),
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(
        ra.is_some() != rb.is_some(),
        "exactly one save wins: {ra:?} {rb:?}"
    );
    let (now, _) = load(&store, &ring, "linear").await.unwrap().unwrap();
    let winner = if ra.is_some() { &a } else { &b };
    assert_eq!(&now, winner);
    assert_eq!(now.generation, 2);
    // The loser's rejected grant is not the stored one any more.
    assert!(!still_current(Some(&now), &back));
    assert!(still_current(Some(&now), winner));

    // Rotation of the encryption key: the record opens with the old key
    // retired, and is re-sealed under the new one by the next save.
    let rotated = KeyRing::new(&[8; 32], &[[7; 32]]);
    let (same, rev) = load(&store, &rotated, "linear").await.unwrap().unwrap();
    assert_eq!(same, now);
    save(&store, &rotated, "linear", &same, Some(rev))
        .await
        .unwrap()
        .expect("re-sealed");
    assert!(
        load(&store, &ring, "linear").await.is_err(),
        "the old ring alone cannot open it"
    );
    assert!(load(&store, &rotated, "linear").await.unwrap().is_some());
}

async fn lock<S: Store + Clone + 'static>(store: S) {
    let ttl = Duration::from_secs(2);
    let held = RefreshLock::try_take(&store, "linear", "replica-a", ttl)
        .await
        .unwrap()
        .expect("free at first");
    assert_eq!(held.key(), lock_key("linear"));
    // Taken: the others get nothing, at once.
    let (b, c) = tokio::join!(
        RefreshLock::try_take(&store, "linear", "replica-b", ttl),
        RefreshLock::try_take(&store, "linear", "replica-c", ttl),
    );
    assert!(b.unwrap().is_none() && c.unwrap().is_none());
    // Another server's lock is its own.
    let other = RefreshLock::try_take(&store, "github", "replica-b", ttl)
        .await
        .unwrap()
        .expect("github's lock is free");
    held.release(&store).await.unwrap();
    let again = RefreshLock::try_take(&store, "linear", "replica-b", ttl)
        .await
        .unwrap()
        .expect("free after release");
    // A holder that dies never releases: the lease frees it.
    drop(again);
    let limit = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(l) = RefreshLock::try_take(&store, "linear", "replica-c", ttl)
            .await
            .unwrap()
        {
            l.release(&store).await.unwrap();
            break;
        }
        assert!(
            std::time::Instant::now() < limit,
            "the lease never freed the lock"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    other.release(&store).await.unwrap();
    // Released twice (the lease is gone): not an error.
    let l = RefreshLock::try_take(&store, "x", "r", ttl)
        .await
        .unwrap()
        .unwrap();
    store
        .txn(Txn::new().and_then([Op::delete(lock_key("x"))]))
        .await
        .unwrap();
    l.release(&store).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_records_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("s.redb")))
        .await
        .unwrap();
    records(store.with_root("a/")).await;
    lock(store.with_root("b/")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_records_on_etcd() {
    let etcd = switchyard_test_support::start_etcd().await;
    let store = EtcdStore::connect(EtcdConfig::new([etcd.url.as_str()]))
        .await
        .unwrap();
    records(store.with_root("a/")).await;
    lock(store.with_root("b/")).await;
}
