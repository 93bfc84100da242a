//! A server that changes its tool list at runtime: the sidecar hears
//! `notifications/tools/list_changed`, re-lists after its coalescing
//! window, the control plane updates the catalogue, and engines see the new
//! tool appear and, once removed, calling it gives "tool not found" naming
//! the tool.

mod common;

use common::*;
use std::time::Duration;
use switchyard_proto::v1 as pb;

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_removed_by_the_server_is_not_found() {
    let _heavy = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let reference = switchyard_test_support::reference_server_bin();
    gw.engine().await; // the control plane is up
    let mut admin = gw.admin().await;
    admin
        .add_server(pb::AddServerRequest {
            spec: Some(pb::ServerSpec {
                name: "stagea".into(),
                transport: pb::Transport::Stdio as i32,
                command: reference.to_string_lossy().into_owned(),
                args: vec!["--stage-a".into(), "--era".into(), "2025-11-25".into()],
                ..Default::default()
            }),
        })
        .await
        .expect("add the stage A server");
    gw.wait_servers_up(&["stagea"], LIMIT).await;
    let mut engine = gw.engine().await;
    assert!(
        !tool_names(&mut engine, "")
            .await
            .contains(&"stagea__extra_tool".to_owned())
    );

    let toggle = || call_request("stagea__toggle_extra_tool", "{}", "");
    engine.call_tool(toggle()).await.expect("toggle on");
    eventually("extra_tool appears", Duration::from_secs(15), || {
        let mut engine = engine.clone();
        async move {
            if tool_names(&mut engine, "")
                .await
                .contains(&"stagea__extra_tool".to_owned())
            {
                Ok(())
            } else {
                Err("not listed yet".to_owned())
            }
        }
    })
    .await;
    let r = engine
        .call_tool(call_request("stagea__extra_tool", "{}", ""))
        .await
        .expect("the new tool is callable")
        .into_inner();
    assert!(!r.is_error, "{}", r.result_json);

    engine.call_tool(toggle()).await.expect("toggle off");
    eventually("extra_tool disappears", Duration::from_secs(15), || {
        let mut engine = engine.clone();
        async move {
            if tool_names(&mut engine, "")
                .await
                .contains(&"stagea__extra_tool".to_owned())
            {
                Err("still listed".to_owned())
            } else {
                Ok(())
            }
        }
    })
    .await;
    let status = engine
        .call_tool(call_request("stagea__extra_tool", "{}", ""))
        .await
        .expect_err("a removed tool");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    assert!(status.message().contains("tool not found"), "{status:?}");
    assert!(
        status.message().contains("stagea__extra_tool"),
        "{status:?}"
    );
    gw.stop().await;
}
