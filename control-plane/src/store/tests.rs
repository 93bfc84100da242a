use super::*;

#[test]
fn errors_name_the_operation_and_key() {
    let e = StoreError::backend(
        "put",
        "servers/a",
        "etcd request failed",
        "connection refused",
    );
    assert_eq!(e.to_string(), "store: put servers/a: etcd request failed");
    let source = std::error::Error::source(&e).expect("the cause is the source");
    assert_eq!(source.to_string(), "connection refused");

    let e = StoreError::LeaseNotFound {
        op: "keep_alive",
        key: lease_key(LeaseId(7)),
        lease: LeaseId(7),
    };
    assert_eq!(
        e.to_string(),
        "store: keep_alive lease 7: lease 7 not found (expired or revoked)"
    );

    let e = StoreError::Compacted {
        prefix: "servers/".into(),
        requested: 3,
        oldest: 10,
    };
    assert_eq!(
        e.to_string(),
        "store: watch servers/: revision 3 is compacted; the oldest available revision is 10"
    );
}

#[test]
fn roots_are_normalised() {
    assert_eq!(normalize_root("/switchyard/v1/"), "/switchyard/v1/");
    assert_eq!(normalize_root("/switchyard/v1"), "/switchyard/v1/");
    assert_eq!(normalize_root("/x//"), "/x/");
    assert_eq!(normalize_root(""), "");
}

#[test]
fn ttls_round_up_to_whole_seconds() {
    assert_eq!(ttl_secs(Duration::from_secs(5)), 5);
    assert_eq!(ttl_secs(Duration::from_millis(1001)), 2);
    assert_eq!(ttl_secs(Duration::ZERO), 1);
}

#[test]
fn txn_validation() {
    let ok = Txn::new()
        .when([Compare::absent("a")])
        .and_then([Op::put("a", "1"), Op::put("b", "2")])
        .or_else([Op::delete("a")]);
    assert!(ok.validate().is_ok());
    assert_eq!(ok.error_key(), "a");

    let twice = Txn::new().and_then([Op::put("a", "1"), Op::delete("a")]);
    let err = twice.validate().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("store: txn a: invalid argument"),
        "{err}"
    );

    let empty = Txn::new().when([Compare::value("", "x")]);
    assert!(matches!(
        empty.validate(),
        Err(StoreError::InvalidArgument { .. })
    ));
}

#[test]
fn watch_events_expose_key_and_revision() {
    let put = WatchEvent::Put(KeyValue {
        key: "k".into(),
        value: b"v".to_vec(),
        create_revision: 2,
        mod_revision: 5,
        version: 3,
        lease: None,
    });
    assert_eq!((put.key(), put.revision()), ("k", 5));
    let delete = WatchEvent::Delete {
        key: "k".into(),
        mod_revision: 6,
    };
    assert_eq!((delete.key(), delete.revision()), ("k", 6));
}
