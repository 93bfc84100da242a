//! `switchyard up` end to end, on the embedded store and on a real etcd:
//! the quickstart's three servers (reference server over stdio in the
//! 2026-07-28 era, server-everything over stdio, reference server over
//! Streamable HTTP in the 2025-11-25 era) behind one gateway, driven through
//! the `switchyard` CLI and the gRPC engine and admin APIs.
//!
//! Covered: every server's tools are listed under `<server>__<tool>`; calls
//! to each succeed through the CLI (`call --json` prints the raw
//! CallToolResult, exit 0) and through `EngineService.CallTool`; an
//! `isError` result is exit status 1; an unknown tool is NOT_FOUND;
//! `servers list --json` shows the three `up` with their protocol versions;
//! `/metrics`, `/healthz`, `/readyz`; SIGTERM stops `up`, its sidecars and
//! their servers, and it exits 0. With `control_plane.metrics_listen`, the
//! start-up line to scrape names that listener.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Instant;
use switchyard_proto::v1 as pb;
use switchyard_test_support::start_etcd;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_serves_three_servers_on_the_embedded_store() {
    let _serial = HEAVY.lock().await;
    gateway_serves_all_three(StoreKind::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_serves_three_servers_on_etcd() {
    let _serial = HEAVY.lock().await;
    let etcd = start_etcd().await;
    gateway_serves_all_three(StoreKind::Etcd(etcd.url.clone())).await;
}

async fn gateway_serves_all_three(store: StoreKind) {
    let started = Instant::now();
    let gw = Gateway::start(store.clone(), 10).await;
    eprintln!("gateway up with 3 servers in {:?}", started.elapsed());

    // The store is the one configured: a redb file only without etcd.
    let redb = gw.dir.path().join("store/store.redb");
    match &store {
        StoreKind::Embedded => assert!(redb.exists(), "no embedded store at {}", redb.display()),
        StoreKind::Etcd(_) => {
            assert!(!redb.exists(), "etcd mode wrote {}", redb.display());
            assert!(!gw.dir.path().join(".switchyard").exists());
        }
    }

    // ---- tools: the CLI and the engine API agree, all three servers listed
    let listed = ok_json(&gw.cli(&["tools", "--json"]).await, "tools --json");
    assert_eq!(
        listed["unavailableServers"],
        serde_json::json!([]),
        "{listed}"
    );
    let cli_names: BTreeSet<String> = listed["tools"]
        .as_array()
        .expect("tools array")
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap().to_owned();
            let server = t["server"].as_str().unwrap();
            // The gateway tools of stage E belong to no server.
            if server.is_empty() {
                assert!(
                    ["mcp_resources", "mcp_resource_read"].contains(&name.as_str()),
                    "{t}"
                );
                return name;
            }
            assert_eq!(
                name,
                format!("{server}__{}", t["upstreamName"].as_str().unwrap()),
                "{t}"
            );
            name
        })
        .collect();
    // server-everything has resources: the gateway tools are offered.
    assert!(cli_names.contains("mcp_resources") && cli_names.contains("mcp_resource_read"));
    for name in [
        "orders__get_order",
        "orders__create_order",
        "orders__list_orders",
        "everything__echo",
        "everything__get-sum",
        "orders-http__get_order",
        "orders-http__create_order",
    ] {
        assert!(
            cli_names.contains(name),
            "{name} missing from {cli_names:?}"
        );
    }
    let count = |prefix: &str| cli_names.iter().filter(|n| n.starts_with(prefix)).count();
    assert_eq!(count("orders__"), 6, "{cli_names:?}");
    assert_eq!(count("orders-http__"), 6, "{cli_names:?}");
    assert_eq!(count("everything__"), 16, "{cli_names:?}");
    let mut engine = gw.engine().await;
    let grpc_names: BTreeSet<String> = tool_names(&mut engine, "").await.into_iter().collect();
    assert_eq!(grpc_names, cli_names);

    // ---- calls through the CLI: the raw CallToolResult, exit status 0
    for tool in ["orders__get_order", "orders-http__get_order"] {
        let out = gw
            .cli(&["call", tool, "--args", r#"{"order_id":"O-1001"}"#, "--json"])
            .await;
        let result = ok_json(&out, tool);
        assert_eq!(result["structuredContent"]["id"], "O-1001", "{result}");
        assert_ne!(result["isError"], Value::Bool(true), "{result}");
        assert!(result["content"].is_array(), "{result}");
    }
    let echo = ok_json(
        &gw.cli(&[
            "call",
            "everything__echo",
            "--args",
            r#"{"message":"hi"}"#,
            "--json",
        ])
        .await,
        "everything__echo",
    );
    assert_eq!(echo["content"][0]["text"], "Echo: hi", "{echo}");
    let sum = ok_json(
        &gw.cli(&[
            "call",
            "everything__get-sum",
            "--args",
            r#"{"a":2,"b":40}"#,
            "--json",
        ])
        .await,
        "everything__get-sum",
    );
    assert!(
        sum["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("42"),
        "{sum}"
    );
    // Without --json: the model text.
    let text = ok_stdout(
        &gw.cli(&[
            "call",
            "everything__echo",
            "--args",
            r#"{"message":"plain"}"#,
        ])
        .await,
        "everything__echo (text)",
    );
    assert_eq!(text.trim(), "Echo: plain");

    // ---- calls through the engine API
    for tool in ["orders__get_order", "orders-http__get_order"] {
        get_order(&mut engine, tool, "")
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e:?}"));
    }
    let resp = engine
        .call_tool(call_request(
            "everything__echo",
            r#"{"message":"grpc"}"#,
            "",
        ))
        .await
        .expect("everything__echo")
        .into_inner();
    assert_eq!(
        (
            resp.text.as_str(),
            resp.server.as_str(),
            resp.upstream_tool.as_str(),
            resp.is_error
        ),
        ("Echo: grpc", "everything", "echo", false),
        "{resp:?}"
    );
    let raw: Value = serde_json::from_str(&resp.result_json).expect("result_json is JSON");
    assert_eq!(raw["content"][0]["text"], "Echo: grpc");

    // ---- a tool's own failure: isError, CLI exit status 1
    let out = gw
        .cli(&[
            "call",
            "orders__get_order",
            "--args",
            r#"{"order_id":"O-9999"}"#,
            "--json",
        ])
        .await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout).expect("the result is still printed");
    assert_eq!(result["isError"], true, "{result}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("isError"),
        "{out:?}"
    );
    let resp = engine
        .call_tool(call_request(
            "orders-http__get_order",
            r#"{"order_id":"O-9999"}"#,
            "",
        ))
        .await
        .expect("an isError result is not a gRPC error")
        .into_inner();
    assert!(resp.is_error, "{resp:?}");
    assert!(resp.text.contains("O-9999"), "{resp:?}");

    // ---- an unknown tool: NOT_FOUND
    let status = engine
        .call_tool(call_request("orders__no_such_tool", "{}", ""))
        .await
        .expect_err("unknown tool");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    let status = engine
        .call_tool(call_request("nowhere__get_order", "{}", ""))
        .await
        .expect_err("unknown server");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    let out = gw.cli(&["call", "orders__no_such_tool"]).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not found: "),
        "{out:?}"
    );

    // ---- servers list: all three up, with their protocol versions
    let endpoint = gw.endpoint.clone();
    let servers = eventually("servers list shows three connected sidecars", LIMIT, || {
        let endpoint = endpoint.clone();
        async move {
            let out = cli(&endpoint, &["servers", "list", "--json"]).await;
            let v = ok_json(&out, "servers list --json");
            let all_connected = v["servers"].as_array().is_some_and(|s| {
                s.len() == 3
                    && s.iter().all(|s| {
                        s["sidecars"]
                            .as_array()
                            .is_some_and(|c| c.len() == 1 && c[0]["upstreamState"] == "connected")
                    })
            });
            if all_connected {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        }
    })
    .await;
    let by_name = |name: &str| -> Value {
        servers["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not listed: {servers}"))
    };
    for (name, transport, version, tools) in [
        ("orders", "stdio", "2026-07-28", 6),
        ("everything", "stdio", "2025-11-25", 16),
        ("orders-http", "http", "2025-11-25", 6),
    ] {
        let s = by_name(name);
        assert_eq!(s["state"], "up", "{s}");
        assert_eq!(s["transport"], transport, "{s}");
        assert_eq!(s["protocolVersion"], version, "{s}");
        assert_eq!(s["toolCount"], tools, "{s}");
        assert!(s["toolsUpdatedAtMs"].as_i64().unwrap_or(0) > 0, "{s}");
        assert!(s["serverInfo"]["name"].is_string(), "{s}");
    }
    let status = ok_json(
        &gw.cli(&["servers", "status", "orders-http", "--json"])
            .await,
        "servers status",
    );
    assert_eq!(status["state"], "up", "{status}");
    let mut admin = gw.admin().await;
    let missing = admin
        .get_server_status(pb::GetServerStatusRequest {
            name: "nowhere".into(),
        })
        .await
        .expect_err("unknown server");
    assert_eq!(missing.code(), tonic::Code::NotFound);

    // ---- /metrics, /healthz, /readyz
    let session = ok_stdout(&gw.cli(&["sessions", "create"]).await, "sessions create");
    assert_eq!(session.trim().len(), 32, "{session:?}");
    let (code, body) = http_get(&gw.http_addr, "/healthz").await;
    assert_eq!((code, body.trim()), (200, "ok"));
    let (code, body) = http_get(&gw.http_addr, "/readyz").await;
    assert_eq!((code, body.trim()), (200, "ready"));
    let (code, metrics) = http_get(&gw.http_addr, "/metrics").await;
    assert_eq!(code, 200, "{metrics}");
    let calls = "switchyard_control_plane_calls_total";
    for server in SERVERS {
        let ok = sample(&metrics, calls, &[("server", server), ("outcome", "ok")]);
        assert!(ok.is_some_and(|n| n >= 2.0), "{server}: {ok:?}\n{metrics}");
        let up = sample(
            &metrics,
            "switchyard_control_plane_sidecars_up",
            &[("server", server)],
        );
        assert_eq!(up, Some(1.0), "{server}\n{metrics}");
    }
    assert_eq!(
        sample(&metrics, calls, &[("server", "orders"), ("outcome", "ok")]),
        Some(2.0),
        "{metrics}"
    );
    for server in ["orders", "orders-http"] {
        assert_eq!(
            sample(
                &metrics,
                calls,
                &[("server", server), ("outcome", "tool_error")]
            ),
            Some(1.0),
            "{server}\n{metrics}"
        );
    }
    assert_eq!(
        sample(&metrics, "switchyard_control_plane_sessions", &[]),
        Some(1.0),
        "{metrics}"
    );
    let store_ops = "switchyard_control_plane_store_operation_duration_seconds_count";
    for op in ["put", "get", "txn", "grant_lease"] {
        let n = sample(&metrics, store_ops, &[("operation", op)]);
        assert!(n.is_some_and(|n| n > 0.0), "{op}: {n:?}\n{metrics}");
    }
    assert!(
        sample(
            &metrics,
            "switchyard_control_plane_call_duration_seconds_count",
            &[("server", "everything")]
        )
        .is_some_and(|n| n >= 3.0),
        "{metrics}"
    );

    // ---- SIGTERM: up, its sidecars and their servers stop; exit 0
    let took = gw.stop().await;
    eprintln!("switchyard up stopped in {took:?}");
}

/// With `control_plane.metrics_listen`, the start-up line to scrape names
/// that listener, not `http_listen`, and it serves `/metrics`.
#[tokio::test]
async fn up_prints_the_metrics_listener() {
    let dir = tempfile::tempdir().expect("temp dir");
    let metrics = format!("127.0.0.1:{}", switchyard_test_support::free_port());
    let (text, _, _) = config_text_with(
        dir.path(),
        &StoreKind::Embedded,
        10,
        &format!("metrics_listen = \"{metrics}\""),
        "",
    );
    let config = dir.path().join("up.toml");
    std::fs::write(&config, text).expect("write the config");
    let mut cmd = tokio::process::Command::new(switchyard_bin());
    cmd.arg("up")
        .arg("--config")
        .arg(&config)
        .env("SWITCHYARD_SIDECAR_BIN", sidecar_bin());
    let (mut up, line) = Proc::start(
        "switchyard up",
        cmd,
        dir.path().join("up.log"),
        "switchyard: metrics ",
    )
    .await;
    assert!(
        line.starts_with(&format!(
            "switchyard: metrics http://{metrics}/metrics, store "
        )),
        "{line}"
    );
    assert_eq!(
        scrape(
            &metrics,
            "switchyard_control_plane_connections_max",
            &[("listener", "metrics")]
        )
        .await,
        1024.0
    );
    assert!(up.terminate().await.success(), "{}", up.log());
}
