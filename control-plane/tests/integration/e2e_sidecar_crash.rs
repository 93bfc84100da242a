//! A sidecar of `switchyard up` killed with SIGKILL: its server is marked
//! down at once (the report stream breaks, so the lease is revoked without
//! waiting for the TTL), calls to it fail fast with UNAVAILABLE "server
//! unavailable: <server>", the other servers keep working, and `up`
//! restarts the sidecar, which registers again so calls work again.

use crate::common::*;
use std::time::{Duration, Instant};
use switchyard_proto::v1 as pb;

/// The lease TTL of this test; failing fast means well under it.
const TTL_SECS: u64 = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_sidecar_fails_fast_and_is_restarted() {
    let _serial = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, TTL_SECS).await;
    let mut engine = gw.engine().await;
    let echo =
        |msg: &str| call_request("everything__echo", &format!(r#"{{"message":"{msg}"}}"#), "");
    engine
        .call_tool(echo("before"))
        .await
        .expect("everything works before the kill");

    let sidecars = gw.sidecars_of("everything");
    assert_eq!(
        sidecars.len(),
        1,
        "one sidecar for everything: {sidecars:?}"
    );
    let victim = sidecars[0];
    // Its server (node) is orphaned by SIGKILL; reap it at the end.
    let orphans = descendants(victim);
    assert!(!orphans.is_empty(), "the sidecar runs server-everything");

    signal(victim, nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();

    // The very first call after the kill already fails, fast, naming the server.
    let status = engine
        .call_tool(echo("after"))
        .await
        .expect_err("a call to a killed sidecar");
    let first_failure = killed.elapsed();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("server unavailable") && status.message().contains("everything"),
        "{status:?}"
    );
    assert!(
        first_failure < Duration::from_secs(3),
        "took {first_failure:?}"
    );

    // The server is marked down well within the TTL: the stream broke.
    let endpoint = gw.endpoint.clone();
    eventually("everything marked down", Duration::from_secs(3), || {
        let endpoint = endpoint.clone();
        async move {
            let s = admin(&endpoint)
                .await?
                .get_server_status(pb::GetServerStatusRequest {
                    name: "everything".into(),
                })
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            if s.state == "down" {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        }
    })
    .await;
    let down_after = killed.elapsed();
    assert!(
        down_after < Duration::from_secs(3),
        "marked down after {down_after:?}"
    );

    // While it is down: everything__* fails fast, the other two work, and
    // the listing leaves out everything's tools and says why.
    let mut outage_calls = 0;
    loop {
        for tool in ["orders__get_order", "orders-http__get_order"] {
            get_order(&mut engine, tool, "")
                .await
                .unwrap_or_else(|e| panic!("{tool} during the outage: {e:?}"));
        }
        outage_calls += 1;
        if outage_calls == 1 {
            let listed = engine
                .list_tools(pb::ListToolsRequest::default())
                .await
                .expect("ListTools")
                .into_inner();
            if listed.unavailable_servers == ["everything"] {
                assert!(
                    listed.tools.iter().all(|t| t.server != "everything"),
                    "{listed:?}"
                );
                assert!(listed.tools.iter().any(|t| t.name == "orders__get_order"));
            }
        }
        let t = Instant::now();
        match engine.call_tool(echo("during")).await {
            Err(status) => {
                assert!(
                    t.elapsed() < Duration::from_secs(3),
                    "took {:?}",
                    t.elapsed()
                );
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                assert!(
                    status.message().contains("server unavailable: everything"),
                    "{status:?}"
                );
            }
            // `up` restarted it.
            Ok(_) => break,
        }
        assert!(
            killed.elapsed() < Duration::from_secs(15),
            "everything not back within 15 s of the kill"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let back = killed.elapsed();
    eprintln!(
        "first failure after {first_failure:?}, marked down after {down_after:?}, \
         back after {back:?} ({outage_calls} rounds of calls to the other servers during the outage)"
    );

    // A new sidecar process, registered, serving; the listing is whole again.
    let now = gw.sidecars_of("everything");
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now[0], victim);
    gw.wait_servers_up(&SERVERS, LIMIT).await;
    let names = tool_names(&mut engine, "").await;
    assert!(names.iter().any(|n| n == "everything__echo"), "{names:?}");
    let resp = engine
        .call_tool(echo("again"))
        .await
        .expect("echo")
        .into_inner();
    assert_eq!(resp.text, "Echo: again");

    let (_, metrics) = http_get(&gw.http_addr, "/metrics").await;
    let unavailable = sample(
        &metrics,
        "switchyard_control_plane_calls_total",
        &[("server", "everything"), ("outcome", "unavailable")],
    );
    assert!(
        unavailable.is_some_and(|n| n >= 2.0),
        "{unavailable:?}\n{metrics}"
    );

    gw.stop().await;
    for p in orphans {
        if alive(p) {
            eprintln!("reaping the orphaned server {p}: {}", cmdline(p));
            signal(p, nix::sys::signal::Signal::SIGKILL);
        }
    }
}
