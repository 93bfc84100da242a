//! Reliability under faults of the components around a replica (#18):
//! what a replica says and does when its store stops answering.

use crate::common::background::start_replica;
use crate::common::*;
use nix::sys::signal::Signal;
use std::time::Duration;
use switchyard_test_support::start_etcd;

/// `/readyz` follows the store: a frozen etcd (SIGSTOP: its connections
/// stay open, its reads hang) turns it 503 saying why within the stale
/// limit (5 s), and a thawed one 200 again.
#[tokio::test(flavor = "multi_thread")]
async fn readyz_is_503_while_etcd_is_frozen() {
    let etcd = start_etcd().await;
    let dir = tempfile::tempdir().unwrap();
    let replica = start_replica(dir.path(), "a", &StoreKind::Etcd(etcd.url.clone()), "").await;
    let http = replica.http_addr.to_string();
    assert_eq!(http_get(&http, "/readyz").await, (200, "ready".to_owned()));
    let pid = etcd.pid().expect("etcd runs");
    signal(pid, Signal::SIGSTOP);
    let body = eventually("/readyz says 503", Duration::from_secs(15), || {
        let http = http.clone();
        async move {
            match http_get(&http, "/readyz").await {
                (503, body) => Ok(body),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    signal(pid, Signal::SIGCONT);
    assert!(
        body.starts_with("not ready: the store has not answered for"),
        "{body}"
    );
    eventually("/readyz says 200 again", Duration::from_secs(15), || {
        let http = http.clone();
        async move {
            match http_get(&http, "/readyz").await {
                (200, _) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    replica.stop(Duration::from_secs(2)).await;
}

/// A registered call address that answers UNIMPLEMENTED (a gRPC endpoint
/// without `SidecarCalls`: here the control plane's own port) never ran
/// the call: every call goes on to the server's working sidecar, whichever
/// one the round robin picked first.
#[tokio::test(flavor = "multi_thread")]
async fn a_sidecar_address_answering_unimplemented_fails_over() {
    use switchyard_test_support::fake_sidecar::FakeSidecar;
    let dir = tempfile::tempdir().unwrap();
    let replica = start_replica(dir.path(), "a", &StoreKind::Embedded, "").await;
    let endpoint = crate::common::background::endpoint(&replica);
    let _bogus = FakeSidecar::of(&endpoint, "bogus")
        .call_address(&endpoint)
        .start()
        .await;
    let good = FakeSidecar::of(&endpoint, "good")
        .on_call(|_| async {
            Ok(switchyard_proto::v1::SidecarCallResponse {
                result_json: r#"{"content":[{"type":"text","text":"booked"}]}"#.into(),
                model_text: "booked".into(),
                ..Default::default()
            })
        })
        .start()
        .await;
    let ep = endpoint.clone();
    eventually(
        "both sidecars registered, in the same state",
        Duration::from_secs(10),
        || {
            let ep = ep.clone();
            async move {
                let status = admin(&ep)
                    .await?
                    .get_server_status(switchyard_proto::v1::GetServerStatusRequest {
                        name: "fake".into(),
                    })
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner();
                (status.sidecars.len() == 2
                    && status.sidecars[0].upstream_state == status.sidecars[1].upstream_state)
                    .then_some(())
                    .ok_or_else(|| format!("{:?}", status.sidecars))
            }
        },
    )
    .await;
    let mut engine = engine(&endpoint).await.unwrap();
    for i in 0..6 {
        let resp = engine
            .call_tool(call_request("fake__book", "{}", ""))
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e:?}"))
            .into_inner();
        assert_eq!(resp.text, "booked", "call {i}: {resp:?}");
    }
    assert_eq!(good.calls().len(), 6);
    replica.stop(Duration::from_secs(2)).await;
}

/// A sidecar's drain, through `switchyard up` with `[up]
/// sidecar_grace_secs = 30`: a held (wait-mode) background call still
/// running at SIGTERM finishes within the grace period (it is not failed a
/// second later); a foreground call keeps the sidecar draining after the
/// first SIGTERM, and a second SIGTERM stops it at once, the call failing.
#[tokio::test(flavor = "multi_thread")]
async fn a_sidecar_drains_held_calls_and_a_second_sigterm_hurries_it() {
    let _heavy = HEAVY.lock().await;
    let gw = Gateway::start_stdio(
        "everything",
        &switchyard_test_support::everything_bin(),
        &["stdio"],
        "[up]
sidecar_grace_secs = 30
",
    )
    .await;
    let mut engine = gw.engine().await;
    let long = |seconds: u32| {
        call_request(
            "everything__trigger-long-running-operation",
            &format!(r#"{{"duration":{seconds},"steps":{seconds}}}"#),
            "",
        )
    };
    // A held call, moved to the background at once, then SIGTERM.
    let mut request = long(3);
    request.background = true;
    let moved = engine
        .call_tool(request)
        .await
        .expect("moved")
        .into_inner()
        .background
        .expect("moved to the background");
    assert_eq!(moved.mode, "wait");
    let first = gw.sidecars_of("everything");
    assert_eq!(first.len(), 1, "{first:?}");
    signal(first[0], Signal::SIGTERM);
    let done = eventually("the held call finished", Duration::from_secs(20), || {
        let mut engine = engine.clone();
        let id = moved.id.clone();
        async move {
            let c = engine
                .get_background_call(switchyard_proto::v1::GetBackgroundCallRequest {
                    id,
                    session_id: String::new(),
                })
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            (c.status != "working")
                .then_some(c.clone())
                .ok_or_else(|| format!("{c:?}"))
        }
    })
    .await;
    assert_eq!(done.status, "completed", "{done:?}\n{}", gw.log());

    // The next sidecar `up` starts; a foreground call holds its drain.
    let second = eventually("a new sidecar", Duration::from_secs(30), || async {
        let pids = gw.sidecars_of("everything");
        match pids.as_slice() {
            [p] if *p != first[0] => Ok(*p),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    gw.wait_servers_up(&["everything"], START_LIMIT).await;
    let mut caller = engine.clone();
    let mut request = long(60);
    request.foreground = true;
    request.timeout_ms = 120_000;
    let call = tokio::spawn(async move { caller.call_tool(request).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    signal(second, Signal::SIGTERM);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(alive(second), "draining for its 30 s grace period");
    signal(second, Signal::SIGTERM);
    eventually("the sidecar stopped", Duration::from_secs(10), || async {
        (!alive(second))
            .then_some(())
            .ok_or_else(|| "still running".to_owned())
    })
    .await;
    let outcome = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call ends with the sidecar")
        .expect("task");
    assert!(outcome.is_err(), "{outcome:?}");
    gw.stop().await;
}

/// A Ctrl-C in the terminal running `switchyard up` (SIGINT to its process
/// group) stops the gateway gracefully: the sidecars, in process groups of
/// their own, get only `up`'s one SIGTERM and drain within their grace
/// period, so a foreground call in flight completes. (In `up`'s group, a
/// sidecar got the SIGINT and then `up`'s SIGTERM as a second signal,
/// which hurried its drain and failed the call.)
#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_in_a_terminal_lets_calls_in_flight_finish() {
    let _heavy = HEAVY.lock().await;
    let gw = Gateway::start_stdio(
        "everything",
        &switchyard_test_support::everything_bin(),
        &["stdio"],
        "[up]\nsidecar_grace_secs = 30\n",
    )
    .await;
    let mut engine = gw.engine().await;
    let mut request = call_request(
        "everything__trigger-long-running-operation",
        r#"{"duration":4,"steps":4}"#,
        "",
    );
    request.foreground = true;
    request.timeout_ms = 60_000;
    let call = tokio::spawn(async move { engine.call_tool(request).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let group = nix::unistd::Pid::from_raw(i32::try_from(gw.pid).expect("pid"));
    nix::sys::signal::killpg(group, Signal::SIGINT).expect("SIGINT to up's process group");
    let outcome = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the call ends")
        .expect("task")
        .unwrap_or_else(|e| panic!("the call failed: {e:?}\n{}", gw.log()));
    let result = outcome.into_inner();
    assert!(!result.is_error, "{result:?}\n{}", gw.log());
    let log = gw.log();
    assert!(
        !log.contains("stopping now"),
        "the drain was hurried:\n{log}"
    );
    gw.stop().await;
}

/// A store outage shorter than the sidecar lease (etcd killed and started
/// again on its data: to a replica, like an etcd leader election) keeps a
/// live sidecar registered on the same report stream (chaos defect 2): a
/// failed lease keep-alive is tried again at the next ticks, and a report
/// the store could not take is stored once the store is back, instead of
/// being called bad and closing the stream. The fake sidecar never
/// registers again, so a closed stream would leave its report unstored and
/// its later reports unread.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_outage_keeps_a_live_sidecar_registered() {
    use crate::common::background::{FAKE_SERVER, endpoint};
    use switchyard_proto::v1 as pb;
    use switchyard_test_support::fake_sidecar::FakeSidecar;
    let mut etcd = start_etcd().await;
    let dir = tempfile::tempdir().unwrap();
    // A lease long enough to outlast etcd's restart on a slow machine.
    let (text, _, _) = config_text(
        dir.path(),
        &StoreKind::Etcd(etcd.url.clone()),
        20,
        FAKE_SERVER,
    );
    let path = dir.path().join("a.toml");
    std::fs::write(&path, text).unwrap();
    let config = switchyard_control_plane::config::Config::load(&path).unwrap();
    let replica = switchyard_control_plane::server::start(&config, true)
        .await
        .expect("replica starts");
    let (endpoint, http) = (endpoint(&replica), replica.http_addr.to_string());
    let sidecar = FakeSidecar::of(&endpoint, "s1").start().await;
    let state = |want: &'static str, error: &'static str| {
        let endpoint = endpoint.clone();
        move || {
            let endpoint = endpoint.clone();
            async move {
                let status = admin(&endpoint)
                    .await?
                    .get_server_status(pb::GetServerStatusRequest {
                        name: "fake".into(),
                    })
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner();
                match status.sidecars.as_slice() {
                    [s] if s.upstream_state == want && s.last_error == error => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        }
    };
    let status = |state: &str, error: &str| pb::SidecarReport {
        report: Some(pb::sidecar_report::Report::Status(pb::UpstreamStatus {
            state: state.into(),
            last_error: error.into(),
        })),
    };
    eventually("the sidecar is connected", LIMIT, state("connected", "")).await;

    etcd.stop().await;
    sidecar.report(status("down", "upstream restarting")).await;
    let errors = |op: &'static str| {
        let http = http.clone();
        async move {
            scrape(
                &http,
                "switchyard_control_plane_store_errors_total",
                &[("operation", op)],
            )
            .await
        }
    };
    // A keep-alive failed (the old code closed the stream and revoked the
    // lease at the first). Whether the report's write failed too, or went
    // through before etcd stopped, depends on timing: either way it must be
    // stored in the end.
    eventually(
        "a lease keep-alive failed",
        Duration::from_secs(60),
        || async {
            let keep_alive = errors("keep_alive").await;
            (keep_alive >= 1.0)
                .then_some(())
                .ok_or_else(|| format!("keep_alive errors {keep_alive}"))
        },
    )
    .await;
    etcd.restart().await;
    eventually(
        "the report sent during the outage is stored",
        Duration::from_secs(60),
        state("down", "upstream restarting"),
    )
    .await;
    // The same stream is still read: a later report is stored too.
    sidecar.report(status("connected", "")).await;
    eventually(
        "a report after the outage is stored",
        Duration::from_secs(60),
        state("connected", ""),
    )
    .await;
    replica.stop(Duration::from_secs(2)).await;
}

/// With `control_plane.metrics_listen`, probes and scrapes are answered on
/// a listener of their own while the HTTP listener (console, OAuth
/// callback) is full, as idle connections anyone may open make it; that
/// listener serves nothing but `/metrics`, `/healthz` and `/readyz`.
#[tokio::test(flavor = "multi_thread")]
async fn probes_are_answered_on_metrics_listen_while_the_http_listener_is_full() {
    switchyard_common::connections::raise_open_files_limit(4096);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let metrics = format!("127.0.0.1:{}", switchyard_test_support::free_port());
    let (text, _, _) = config_text_with(
        dir.path(),
        &StoreKind::Embedded,
        5,
        &format!("metrics_listen = \"{metrics}\""),
        "",
    );
    let config = dir.path().join("cp.toml");
    std::fs::write(&config, text).unwrap();
    let (_cp, _grpc, http) = start_control_plane("control-plane", dir.path(), &config).await;
    // A connection per request: a pooled one would hold a place.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let get = |addr: &str, path: &str| client.get(format!("http://{addr}{path}")).send();
    assert_eq!(get(&http, "/readyz").await.unwrap().status(), 200);
    assert_eq!(get(&metrics, "/readyz").await.unwrap().status(), 200);
    // Only the probes and the metrics there.
    for path in ["/ui/", "/admin/v1/mcp/oauth/callback?state=x&code=y"] {
        assert_eq!(get(&metrics, path).await.unwrap().status(), 404, "{path}");
        assert_ne!(get(&http, path).await.unwrap().status(), 404, "{path}");
    }

    // 1024 idle connections fill the HTTP listener.
    let mut held = Vec::new();
    for _ in 0..1024 {
        held.push(tokio::net::TcpStream::connect(&http).await.unwrap());
    }
    eventually("the HTTP listener full", LIMIT, || async {
        match scrape(
            &metrics,
            "switchyard_control_plane_connections",
            &[("listener", "http")],
        )
        .await
        {
            1024.0 => Ok(()),
            n => Err(format!("{n} connections")),
        }
    })
    .await;
    assert!(
        get(&http, "/readyz").await.is_err(),
        "the full listener answered a probe"
    );
    for path in ["/readyz", "/healthz"] {
        let r = get(&metrics, path).await.expect(path);
        assert_eq!(r.status(), 200, "{path}");
    }
    assert_eq!(
        scrape(
            &metrics,
            "switchyard_control_plane_connections_max",
            &[("listener", "metrics")]
        )
        .await,
        1024.0
    );
    drop(held);
    eventually("the HTTP listener answers again", LIMIT, || async {
        match get(&http, "/readyz").await {
            Ok(r) if r.status() == 200 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}
