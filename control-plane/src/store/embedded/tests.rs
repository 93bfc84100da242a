use super::*;
use futures::StreamExt;

fn config(dir: &Path) -> EmbeddedConfig {
    EmbeddedConfig::new(dir.join("store.redb")).with_root("/t/")
}

#[test]
fn records_and_events_round_trip() {
    let record = Record {
        create_revision: 3,
        mod_revision: 9,
        version: 4,
        lease: 12,
        value: b"hello".to_vec(),
    };
    assert_eq!(Record::decode(&record.encode()).unwrap(), record);
    let put = RawEvent::Put {
        key: "/t/k".into(),
        record,
    };
    assert_eq!(RawEvent::decode(&put.encode()).unwrap(), put);
    let delete = RawEvent::Delete { key: "/t/k".into() };
    assert_eq!(RawEvent::decode(&delete.encode()).unwrap(), delete);
    assert!(matches!(Record::decode(&[1, 2, 3]), Err(Fail::Corrupt(_))));
    assert!(matches!(
        RawEvent::decode(&[0, 200, 0, 0, 0]),
        Err(Fail::Corrupt(_))
    ));
    assert!(matches!(RawEvent::decode(&[]), Err(Fail::Corrupt(_))));
}

#[tokio::test]
async fn history_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.history_limit = 5;
    let store = EmbeddedStore::open(cfg).await.unwrap();
    let mut last = 0;
    for i in 0..10 {
        last = store.put(&format!("k{i}"), vec![], None).await.unwrap();
    }
    assert_eq!(last, 10);
    let err = store.watch("", Some(5)).await.err().unwrap();
    assert!(
        matches!(
            err,
            StoreError::Compacted {
                requested: 5,
                oldest: 6,
                ..
            }
        ),
        "{err}"
    );
    let mut w = store.watch("", Some(6)).await.unwrap();
    for expected in 6..=10 {
        assert_eq!(w.next().await.unwrap().unwrap().revision(), expected);
    }
    // Only the kept revisions are stored.
    use redb::ReadableTableMetadata;
    let rtx = store.inner.db.begin_read().unwrap();
    assert_eq!(rtx.open_table(HISTORY).unwrap().len().unwrap(), 5);
}

#[tokio::test]
async fn leases_that_expired_while_closed_are_reaped_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    // The periodic reaper never gets a chance: only the reap at open can act.
    cfg.reap_interval = Duration::from_secs(3600);
    let store = EmbeddedStore::open(cfg.clone()).await.unwrap();
    let lease = store.grant_lease(Duration::from_secs(1)).await.unwrap();
    let put = store
        .put("leased", b"v".to_vec(), Some(lease))
        .await
        .unwrap();
    store.put("plain", b"v".to_vec(), None).await.unwrap();
    drop(store);
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let store = EmbeddedStore::open(cfg).await.unwrap();
    assert!(store.get("leased").await.unwrap().is_none());
    assert!(store.get("plain").await.unwrap().is_some());
    let mut w = store.watch("leased", Some(put)).await.unwrap();
    assert!(matches!(w.next().await, Some(Ok(WatchEvent::Put(_)))));
    assert!(matches!(
        w.next().await,
        Some(Ok(WatchEvent::Delete { .. }))
    ));
    assert!(matches!(
        store.keep_alive(lease).await,
        Err(StoreError::LeaseNotFound { .. })
    ));
}

#[tokio::test]
async fn a_lagging_watcher_gets_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.watch_buffer = 16;
    let store = EmbeddedStore::open(cfg).await.unwrap();
    let mut w = store.watch("", None).await.unwrap();
    for i in 0..40 {
        store.put(&format!("k{i}"), vec![], None).await.unwrap();
    }
    match w.next().await {
        Some(Err(StoreError::WatchLagged { missed, .. })) => assert!(missed > 0),
        other => panic!("expected WatchLagged, got {other:?}"),
    }
    assert!(w.next().await.is_none());
}

#[tokio::test]
async fn a_second_open_of_the_same_file_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let _store = EmbeddedStore::open(config(dir.path())).await.unwrap();
    let err = EmbeddedStore::open(config(dir.path())).await.unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("store: open "), "{text}");
    assert!(
        text.ends_with("store.redb: embedded database error"),
        "{text}"
    );
}
