//! Sessions and their events through `switchyard up`: a session sees only
//! the tools of the servers it enables (calling another server's tool is
//! FAILED_PRECONDITION), a `read_only` session only tools whose
//! `readOnlyHint` is true, and a session's event stream (`switchyard events
//! --session ID --json`, `EngineService.SubscribeEvents`) gets
//! `tools.changed` when a server it enables changes its catalogue — here
//! when a server is added and removed at runtime — and ends when the
//! session is deleted.

use crate::common::*;
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use switchyard_proto::v1 as pb;
use switchyard_test_support::reference_server_bin;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;
use tonic::Streaming;

fn create(gw_out: &std::process::Output, what: &str) -> String {
    let id = ok_stdout(gw_out, what).trim().to_owned();
    assert_eq!(id.len(), 32, "{what}: {id:?}");
    id
}

async fn next_event(
    stream: &mut Streaming<pb::SessionEvent>,
    limit: Duration,
) -> Option<pb::SessionEvent> {
    match tokio::time::timeout(limit, stream.message()).await {
        Ok(Ok(ev)) => ev,
        Ok(Err(status)) => panic!("event stream failed: {status:?}"),
        Err(_) => None,
    }
}

/// Reads events until one is `tools.changed` for `server` (bounded).
async fn tools_changed(stream: &mut Streaming<pb::SessionEvent>, server: &str) -> Value {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let ev = next_event(stream, left)
            .await
            .unwrap_or_else(|| panic!("no tools.changed for {server} within {LIMIT:?}"));
        let data: Value = serde_json::from_str(&ev.data_json).expect("data_json is JSON");
        if ev.r#type == "tools.changed" && data["server"] == server {
            assert!(data["toolsUpdatedAt"].as_i64().unwrap_or(0) > 0, "{data}");
            return data;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_filter_tools_and_stream_events() {
    let _serial = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let mut engine = gw.engine().await;

    // ---- a session enabling only `orders`
    let only_orders = create(
        &gw.cli(&["sessions", "create", "--server", "orders"]).await,
        "sessions create --server orders",
    );
    let shown = ok_json(
        &gw.cli(&["sessions", "get", &only_orders]).await,
        "sessions get",
    );
    assert_eq!(
        shown["enabledServers"],
        serde_json::json!(["orders"]),
        "{shown}"
    );
    assert_eq!(shown["permissionMode"], "ask", "{shown}");
    let listed = ok_json(
        &gw.cli(&["tools", "--session", &only_orders, "--json"])
            .await,
        "tools --session",
    );
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 6, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("orders__")), "{names:?}");
    assert_eq!(tool_names(&mut engine, &only_orders).await, names);
    // Its own server's tools work in it; another server's are not offered.
    get_order(&mut engine, "orders__get_order", &only_orders)
        .await
        .expect("orders__get_order in the session");
    let out = gw
        .cli(&[
            "call",
            "orders__get_order",
            "--session",
            &only_orders,
            "--args",
            r#"{"order_id":"O-1001"}"#,
            "--json",
        ])
        .await;
    assert_eq!(
        ok_json(&out, "call in session")["structuredContent"]["id"],
        "O-1001"
    );
    for tool in ["everything__echo", "orders-http__get_order"] {
        let status = engine
            .call_tool(call_request(
                tool,
                r#"{"message":"x","order_id":"O-1001"}"#,
                &only_orders,
            ))
            .await
            .expect_err("a tool the session does not enable");
        assert_eq!(
            status.code(),
            tonic::Code::FailedPrecondition,
            "{tool}: {status:?}"
        );
        assert!(status.message().contains("not enabled"), "{status:?}");
    }
    let out = gw
        .cli(&[
            "call",
            "everything__echo",
            "--session",
            &only_orders,
            "--args",
            r#"{"message":"x"}"#,
        ])
        .await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("failed precondition: "),
        "{out:?}"
    );

    // ---- a read_only session: only readOnlyHint tools
    let read_only = create(
        &gw.cli(&["sessions", "create", "--mode", "read_only"]).await,
        "sessions create --mode read_only",
    );
    let listed = ok_json(
        &gw.cli(&["tools", "--session", &read_only, "--json"]).await,
        "tools --session (read_only)",
    );
    let tools = listed["tools"].as_array().unwrap();
    assert!(
        tools.iter().all(|t| t["hints"]["readOnlyHint"] == true),
        "{listed}"
    );
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for name in [
        "orders__get_order",
        "orders__list_orders",
        "orders-http__get_order",
    ] {
        assert!(names.contains(&name), "{name} missing: {names:?}");
    }
    for name in ["orders__create_order", "orders-http__create_order"] {
        assert!(
            !names.contains(&name),
            "{name} offered to a read_only session"
        );
    }
    let all = tool_names(&mut engine, "").await;
    assert!(names.len() < all.len(), "{names:?}");
    get_order(&mut engine, "orders-http__get_order", &read_only)
        .await
        .expect("a read-only tool in a read_only session");
    let status = engine
        .call_tool(call_request(
            "orders__create_order",
            r#"{"customer_id":"C-1","items":[{"sku":"CABLE","quantity":1}]}"#,
            &read_only,
        ))
        .await
        .expect_err("create_order in a read_only session");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("read_only"), "{status:?}");

    // ---- unknown sessions and servers
    let status = engine
        .list_tools(pb::ListToolsRequest {
            session_id: "no-such-session".into(),
        })
        .await
        .expect_err("unknown session");
    assert_eq!(status.code(), tonic::Code::NotFound);
    let out = gw.cli(&["sessions", "create", "--server", "nowhere"]).await;
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid argument: "),
        "{out:?}"
    );

    // ---- events: a session of all servers hears about `extra`; the
    // orders-only session does not.
    let everything_session = create(&gw.cli(&["sessions", "create"]).await, "sessions create");
    let mut cli_events = Command::new(switchyard_bin())
        .args([
            "--endpoint",
            &gw.endpoint,
            "events",
            "--session",
            &everything_session,
            "--json",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("switchyard events");
    let (line_tx, mut cli_lines) = mpsc::unbounded_channel::<String>();
    let mut stdout = BufReader::new(cli_events.stdout.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stdout.next_line().await {
            let _ = line_tx.send(line);
        }
    });
    let mut all_stream = engine
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: everything_session.clone(),
            ..Default::default()
        })
        .await
        .expect("subscribe (all servers)")
        .into_inner();
    let mut orders_stream = engine
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: only_orders.clone(),
            ..Default::default()
        })
        .await
        .expect("subscribe (orders only)")
        .into_inner();
    let status = engine
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: "no-such-session".into(),
            ..Default::default()
        })
        .await
        .expect_err("events of an unknown session");
    assert_eq!(status.code(), tonic::Code::NotFound);

    let reference = reference_server_bin();
    let out = gw
        .cli(&[
            "servers",
            "add",
            "--name",
            "extra",
            "--transport",
            "stdio",
            "--command",
            reference.to_str().unwrap(),
            "--arg",
            "--era",
            "--arg",
            "2025-11-25",
        ])
        .await;
    ok_stdout(&out, "servers add");
    let added = tools_changed(&mut all_stream, "extra").await;
    eprintln!("tools.changed on adding extra: {added}");
    let names = tool_names(&mut engine, &everything_session).await;
    assert!(names.iter().any(|n| n == "extra__get_order"), "{names:?}");

    ok_stdout(
        &gw.cli(&["servers", "remove", "extra"]).await,
        "servers remove",
    );
    let removed = tools_changed(&mut all_stream, "extra").await;
    assert!(
        removed["toolsUpdatedAt"].as_i64() >= added["toolsUpdatedAt"].as_i64(),
        "{added} then {removed}"
    );
    // The orders-only session heard nothing of it.
    if let Some(ev) = next_event(&mut orders_stream, Duration::from_secs(1)).await {
        panic!("the orders-only session got {ev:?}");
    }

    // The CLI printed the same events, one JSON object per line.
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !seen
        .iter()
        .any(|v: &Value| v["type"] == "tools.changed" && v["data"]["server"] == "extra")
    {
        let line = tokio::time::timeout_at(deadline, cli_lines.recv())
            .await
            .unwrap_or_else(|_| {
                panic!("`switchyard events` printed no tools.changed for extra: {seen:?}")
            })
            .expect("`switchyard events` ended early");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["sessionId"], everything_session.as_str(), "{v}");
        assert!(v["atMs"].as_i64().unwrap_or(0) > 0, "{v}");
        seen.push(v);
    }

    // Deleting the session ends its streams; the CLI exits 0.
    let out = gw.cli(&["sessions", "delete", &everything_session]).await;
    ok_stdout(&out, "sessions delete");
    let end = tokio::time::timeout(LIMIT, async {
        loop {
            match all_stream.message().await {
                Ok(Some(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the event stream of a deleted session ends");
    assert!(matches!(end, Ok(None)), "{end:?}");
    let status = tokio::time::timeout(LIMIT, cli_events.wait())
        .await
        .expect("`switchyard events` exits when its session is deleted")
        .expect("wait");
    assert!(status.success(), "{status}");
    let listed = ok_json(
        &gw.cli(&["sessions", "list", "--json"]).await,
        "sessions list",
    );
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&only_orders.as_str()) && ids.contains(&read_only.as_str()),
        "{ids:?}"
    );
    assert!(!ids.contains(&everything_session.as_str()), "{ids:?}");

    // An engine still follows the orders-only session: `up` stops anyway,
    // ending that stream instead of waiting for it.
    let took = gw.stop().await;
    assert!(took < Duration::from_secs(4), "up took {took:?} to stop");
    drop(orders_stream);
}
