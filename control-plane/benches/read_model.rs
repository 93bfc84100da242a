//! How the read model scales (#18): the cost of applying one change, and
//! of the background-call replay a new event subscription makes, with
//! 10,000 sessions and 100,000 background records, against the same with
//! 100 sessions and 1,000 records, measured in the same run.
//!
//! ```text
//! cargo bench -p switchyard-control-plane --bench read_model    # about a minute
//! ```
//!
//! Each scale fills an embedded store (in a temp dir) with its sessions
//! and, per session, ten finished background calls, then starts a read
//! model ([`State`]) on it. "apply" is the time from writing one session
//! (a put) until the read model has applied it, median of 300. "replay" is
//! `Background::finished_of` for one session (its ten records), median of
//! 100; "replay by listing" is what it did before: the whole background
//! prefix listed and filtered, median of 5. Goals: apply and replay at
//! the large scale within twice the small scale's.

use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_control_plane::background::Background;
use switchyard_control_plane::config::BackgroundCallsConfig;
use switchyard_control_plane::metrics::Metrics;
use switchyard_control_plane::model::background::BackgroundRecord;
use switchyard_control_plane::model::{PermissionMode, SessionRecord, encode, session_key};
use switchyard_control_plane::state::State;
use switchyard_control_plane::store::{
    AnyStore, EmbeddedConfig, Metered, Op, Store, StoreConfig, Txn,
};

struct Figures {
    apply: Duration,
    replay: Duration,
    replay_by_listing: Duration,
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn session(id: &str, n: i64) -> SessionRecord {
    SessionRecord {
        id: id.to_owned(),
        enabled_servers: vec!["orders".into()],
        permission_mode: PermissionMode::Auto,
        roots: vec![],
        created_at_ms: 1,
        updated_at_ms: n,
        owner: "engine-a".into(),
    }
}

fn finished(id: String, session: &str, at: i64) -> BackgroundRecord {
    BackgroundRecord {
        id,
        server: "orders".into(),
        tool: "list_orders".into(),
        engine_tool: "orders__list_orders".into(),
        session_id: session.to_owned(),
        mode: "wait".into(),
        status: "completed".into(),
        created_at_ms: at - 1000,
        updated_at_ms: at,
        finished_at_ms: at,
        sidecar_id: "s1".into(),
        ..Default::default()
    }
}

async fn measure(sessions: usize) -> Figures {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = AnyStore::open(StoreConfig::Embedded(EmbeddedConfig::new(
        dir.path().join("store.redb"),
    )))
    .await
    .expect("open the store");
    // Fill: sessions and their finished calls, 1,000 writes per txn.
    let mut ops = Vec::new();
    for s in 0..sessions {
        let id = format!("session-{s:06}");
        ops.push(Op::Put {
            key: session_key(&id),
            value: encode(&session(&id, 0)),
            lease: None,
        });
        for c in 0..10 {
            let rec = finished(format!("call-{s:06}-{c}"), &id, 1_000_000 + c);
            ops.push(Op::Put {
                key: format!("background/{}", rec.id),
                value: encode(&rec),
                lease: None,
            });
        }
        if ops.len() >= 1000 {
            store
                .txn(Txn {
                    compares: vec![],
                    success: std::mem::take(&mut ops),
                    failure: vec![],
                })
                .await
                .expect("fill");
        }
    }
    if !ops.is_empty() {
        store
            .txn(Txn {
                compares: vec![],
                success: ops,
                failure: vec![],
            })
            .await
            .expect("fill");
    }
    let state: Arc<State> = State::start(store.clone()).await.expect("read model");
    let metrics = Metrics::new();
    let background = Background::new(
        BackgroundCallsConfig::default(),
        Metered::new(store.clone(), metrics.clone()),
        metrics,
    );

    let mut apply = Vec::new();
    for n in 1..=300 {
        let id = format!("session-{:06}", n % sessions);
        let started = Instant::now();
        let rev = store
            .put(&session_key(&id), encode(&session(&id, n as i64)), None)
            .await
            .expect("put");
        assert!(state.wait_for(rev, Duration::from_secs(10)).await);
        apply.push(started.elapsed());
    }
    let probe = format!("session-{:06}", sessions / 2);
    let mut replay = Vec::new();
    for _ in 0..100 {
        let started = Instant::now();
        let done = background
            .finished_of(&state, &probe, 0)
            .await
            .expect("replay");
        replay.push(started.elapsed());
        assert_eq!(done.len(), 10);
    }
    let mut by_listing = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let done: Vec<_> = background
            .list_all()
            .await
            .expect("list")
            .into_iter()
            .filter(|r| r.session_id == probe && r.finished_at_ms > 0)
            .collect();
        by_listing.push(started.elapsed());
        assert_eq!(done.len(), 10);
    }
    Figures {
        apply: median(apply),
        replay: median(replay),
        replay_by_listing: median(by_listing),
    }
}

fn main() {
    // `cargo test --benches` runs benches with `--bench` absent: stay quick.
    if !std::env::args().any(|a| a == "--bench") {
        println!("read_model: run with `cargo bench` to measure");
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (small, large) = runtime.block_on(async { (measure(100).await, measure(10_000).await) });
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("read model, per change and per replay (medians)");
    println!(
        "{:<28} {:>14} {:>18}",
        "", "100 sessions", "10,000 sessions"
    );
    println!(
        "{:<28} {:>14} {:>18}",
        "", "1,000 records", "100,000 records"
    );
    println!(
        "{:<28} {:>11.0} us {:>15.0} us   ratio {:.2} (goal <= 2)",
        "apply one change",
        us(small.apply),
        us(large.apply),
        large.apply.as_secs_f64() / small.apply.as_secs_f64()
    );
    println!(
        "{:<28} {:>11.0} us {:>15.0} us   ratio {:.2} (goal <= 2)",
        "replay (finished_of)",
        us(small.replay),
        us(large.replay),
        large.replay.as_secs_f64() / small.replay.as_secs_f64()
    );
    println!(
        "{:<28} {:>11.0} us {:>15.0} us   ratio {:.2} (before: the whole prefix)",
        "replay by listing",
        us(small.replay_by_listing),
        us(large.replay_by_listing),
        large.replay_by_listing.as_secs_f64() / small.replay_by_listing.as_secs_f64()
    );
}
