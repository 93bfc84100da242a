//! A server that changes its tool list at runtime: the sidecar hears
//! `notifications/tools/list_changed`, re-lists after its coalescing
//! window, the control plane updates the catalogue, and engines see the new
//! tool appear and, once removed, calling it gives "tool not found" naming
//! the tool. In each era and transport the reference server has:
//! 2025-11-25 over stdio (the notification comes on the connection) and
//! over Streamable HTTP, and 2026-07-28 over stdio and over Streamable HTTP,
//! where the server sends it only on a `subscriptions/listen` stream that
//! opted in to `toolsListChanged`, which the sidecar keeps open. Also: a
//! 2025-11-25 HTTP change made by a call in a session (the server tells
//! the session's own connection), and HTTP servers that restart without
//! the changing tools (the sidecar connects again and re-lists).

use crate::common::*;
use std::time::Duration;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use tonic::transport::Channel;

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_removed_by_the_server_is_not_found() {
    let _heavy = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let reference = switchyard_test_support::reference_server_bin();
    let http_server = |era: &str| {
        let mut cmd = tokio::process::Command::new(&reference);
        cmd.args(["--http", "127.0.0.1:0", "--stage-a", "--era", era]);
        switchyard_test_support::start_http_server(cmd, "/mcp")
    };
    let modern_http = http_server("2026-07-28").await;
    let legacy_http = http_server("2025-11-25").await;
    gw.engine().await; // the control plane is up
    let mut admin = gw.admin().await;
    let stdio = |name: &str, era: &str| pb::ServerSpec {
        name: name.into(),
        transport: pb::Transport::Stdio as i32,
        command: reference.to_string_lossy().into_owned(),
        args: vec!["--stage-a".into(), "--era".into(), era.into()],
        ..Default::default()
    };
    let http = |name: &str, url: &str| pb::ServerSpec {
        name: name.into(),
        transport: pb::Transport::Http as i32,
        url: url.into(),
        ..Default::default()
    };
    let specs = [
        stdio("legacy", "2025-11-25"),
        stdio("modern", "2026-07-28"),
        http("modernhttp", &modern_http.url),
        http("legacyhttp", &legacy_http.url),
    ];
    for spec in specs {
        admin
            .add_server(pb::AddServerRequest { spec: Some(spec) })
            .await
            .expect("add a stage A server");
    }
    let servers = ["legacy", "modern", "modernhttp", "legacyhttp"];
    gw.wait_servers_up(&servers, LIMIT).await;
    let mut engine = gw.engine().await;
    for server in servers {
        appears_then_is_not_found(&mut engine, server, "").await;
    }
    // Within a session, a 2025-11-25 HTTP call runs on the session's own
    // connection, and the server tells that connection of the change.
    let session = auto_session(&mut engine, &[]).await;
    appears_then_is_not_found(&mut engine, "legacyhttp", &session).await;

    // An HTTP server that restarts, now without the stage-A tools: the
    // sidecar notices it went away, connects again, and re-lists.
    let port = |url: &str| {
        url.rsplit(':')
            .next()
            .unwrap()
            .trim_end_matches("/mcp")
            .to_owned()
    };
    for (server, mut old, era) in [
        ("modernhttp", modern_http, "2026-07-28"),
        ("legacyhttp", legacy_http, "2025-11-25"),
    ] {
        let addr = format!("127.0.0.1:{}", port(&old.url));
        old.child.kill().await.unwrap();
        old.child.wait().await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut cmd = tokio::process::Command::new(&reference);
        cmd.args(["--http", &addr, "--era", era]);
        let _restarted = switchyard_test_support::start_http_server(cmd, "/mcp").await;
        let toggle = format!("{server}__toggle_extra_tool");
        eventually(
            &format!("{toggle} gone after {server} restarted without it"),
            Duration::from_secs(30),
            || {
                let mut engine = engine.clone();
                let toggle = toggle.clone();
                async move {
                    let names = tool_names(&mut engine, "").await;
                    if names.contains(&toggle) {
                        Err("still listed".to_owned())
                    } else if names.iter().any(|n| n.starts_with(&format!("{server}__"))) {
                        Ok(())
                    } else {
                        Err(format!("no tools of {server} listed"))
                    }
                }
            },
        )
        .await;
    }
    gw.stop().await;
}

/// Toggles `SERVER__extra_tool` on and off through the server's own tool,
/// and follows the engine's tool list.
async fn appears_then_is_not_found(
    engine: &mut EngineServiceClient<Channel>,
    server: &str,
    session: &str,
) {
    let extra = format!("{server}__extra_tool");
    assert!(
        !tool_names(engine, "").await.contains(&extra),
        "{extra} listed before it was added"
    );
    let toggle = || call_request(&format!("{server}__toggle_extra_tool"), "{}", session);
    engine.call_tool(toggle()).await.expect("toggle on");
    let watcher = engine.clone();
    let listed = |want: bool| {
        let engine = watcher.clone();
        let extra = extra.clone();
        move || {
            let mut engine = engine.clone();
            let extra = extra.clone();
            async move {
                if tool_names(&mut engine, "").await.contains(&extra) == want {
                    Ok(())
                } else {
                    Err(format!("{extra} listed: {}", !want))
                }
            }
        }
    };
    eventually(
        &format!("{extra} appears"),
        Duration::from_secs(15),
        listed(true),
    )
    .await;
    let r = engine
        .call_tool(call_request(&extra, "{}", session))
        .await
        .expect("the new tool is callable")
        .into_inner();
    assert!(!r.is_error, "{}", r.result_json);

    engine.call_tool(toggle()).await.expect("toggle off");
    eventually(
        &format!("{extra} disappears"),
        Duration::from_secs(15),
        listed(false),
    )
    .await;
    let status = engine
        .call_tool(call_request(&extra, "{}", session))
        .await
        .expect_err("a removed tool");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    assert!(status.message().contains("tool not found"), "{status:?}");
    assert!(status.message().contains(&extra), "{status:?}");
}
