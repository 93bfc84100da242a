//! The upstream session against real MCP servers: server-everything (npm,
//! 2025-11-25) over stdio and Streamable HTTP, the official Python SDK
//! (2026-07-28, and 2025-11-25 when pinned) over stdio, and our reference
//! server (rmcp) in both eras over stdio. Tool definitions and results
//! must come back exactly as the server sent them.

use serde_json::{Value, json};
use std::time::Duration;
use switchyard_sidecar::upstream::{
    Era, EraPreference, HttpConfig, StdioConfig, TransportConfig, Upstream, UpstreamConfig,
    UpstreamMetrics,
};
use switchyard_test_support as support;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const LIMIT: Duration = Duration::from_secs(60);

fn stdio(name: &str, command: impl Into<String>, args: &[&str]) -> UpstreamConfig {
    UpstreamConfig::new(
        name,
        TransportConfig::Stdio(StdioConfig {
            command: command.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..StdioConfig::default()
        }),
    )
}

fn upstream(config: UpstreamConfig) -> Upstream {
    support::init_tracing();
    Upstream::new(config, &UpstreamMetrics::unregistered()).unwrap()
}

async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut).await.expect("timed out")
}

fn names(tools: &[Value]) -> Vec<String> {
    tools
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// What server-everything sends for `tools/list` and one `tools/call`,
/// read as raw JSON lines by a minimal hand-written client: the baseline
/// our session must reproduce exactly.
async fn raw_everything(call: Value) -> (Vec<Value>, Value) {
    let mut child = tokio::process::Command::new(support::everything_bin())
        .arg("stdio")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let messages = [
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":call}),
    ];
    for m in messages {
        stdin.write_all(format!("{m}\n").as_bytes()).await.unwrap();
    }
    stdin.flush().await.unwrap();
    let (mut tools, mut result) = (None, None);
    while tools.is_none() || result.is_none() {
        let line = within(lines.next_line())
            .await
            .unwrap()
            .expect("server closed stdout");
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if msg["id"] == json!(2) {
            assert!(
                msg["result"]["nextCursor"].is_null(),
                "server-everything paginates now; extend the baseline"
            );
            tools = Some(msg["result"]["tools"].as_array().unwrap().clone());
        } else if msg["id"] == json!(3) {
            result = Some(msg["result"].clone());
        }
    }
    (tools.unwrap(), result.unwrap())
}

async fn check_everything(up: &Upstream) {
    let negotiated = within(up.connect()).await.unwrap();
    assert_eq!(negotiated.era, Era::Legacy);
    assert_eq!(negotiated.protocol_version, "2025-11-25");
    assert_eq!(negotiated.server_info["name"], "mcp-servers/everything");

    let tools = within(up.list_tools()).await.unwrap().entries;
    let listed = names(&tools);
    for expected in [
        "echo",
        "get-sum",
        "get-structured-content",
        "trigger-long-running-operation",
        "simulate-research-query",
    ] {
        assert!(
            listed.contains(&expected.to_owned()),
            "{expected} missing from {listed:?}"
        );
    }

    let echo = within(up.call_tool(json!({"name":"echo","arguments":{"message":"héllo 🚂 中文"}})))
        .await
        .unwrap();
    assert_eq!(text_of(&echo), "Echo: héllo 🚂 中文");
    let sum = within(up.call_tool(json!({"name":"get-sum","arguments":{"a":2,"b":40}})))
        .await
        .unwrap();
    assert!(text_of(&sum).contains("42"), "{sum}");

    // Lossless: the definitions and a structured result are exactly what a
    // raw client reads from the same server, byte for byte once serialised.
    let call = json!({"name":"get-structured-content","arguments":{"location":"Chicago"}});
    let ours = within(up.call_tool(call.clone())).await.unwrap();
    let (raw_tools, raw_result) = raw_everything(call).await;
    assert_eq!(tools.len(), raw_tools.len(), "every tool listed");
    assert_eq!(
        serde_json::to_string(&tools).unwrap(),
        serde_json::to_string(&raw_tools).unwrap()
    );
    assert_eq!(
        serde_json::to_string(&ours).unwrap(),
        serde_json::to_string(&raw_result).unwrap()
    );
    assert!(
        ours["structuredContent"]["temperature"].is_number(),
        "{ours}"
    );
    let def = tools
        .iter()
        .find(|t| t["name"] == "get-structured-content")
        .unwrap();
    assert_eq!(
        def["outputSchema"]["properties"]["temperature"]["type"],
        "number"
    );
    assert_eq!(def["execution"]["taskSupport"], "forbidden");
    assert_eq!(def["annotations"]["readOnlyHint"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn server_everything_over_stdio() {
    let up = upstream(stdio(
        "everything",
        support::everything_bin().to_string_lossy(),
        &["stdio"],
    ));
    check_everything(&up).await;
    up.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn server_everything_over_streamable_http() {
    let port = support::free_port();
    let mut cmd = tokio::process::Command::new(support::everything_bin());
    cmd.arg("streamableHttp").env("PORT", port.to_string());
    let _server = support::start_listening_on(cmd, port).await;
    let up = upstream(UpstreamConfig::new(
        "everything-http",
        TransportConfig::Http(HttpConfig {
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers: vec![],
        }),
    ));
    check_everything(&up).await;
    up.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_sdk_server_over_stdio_in_both_eras() {
    let script = support::stub_script("python_sdk_server.py");
    let python = support::venv_python();
    for (era, expected) in [
        (EraPreference::Auto, Era::Modern),
        (EraPreference::Legacy, Era::Legacy),
    ] {
        let mut config = stdio(
            "python",
            python.to_string_lossy(),
            &[&script.to_string_lossy()],
        );
        config.era = era;
        let up = upstream(config);
        let negotiated = within(up.connect()).await.unwrap();
        assert_eq!(negotiated.era, expected);
        assert_eq!(negotiated.server_info["name"], "switchyard-python-peer");
        let tools = within(up.list_tools()).await.unwrap().entries;
        assert_eq!(names(&tools), vec!["shout", "weather"]);
        let weather = tools.iter().find(|t| t["name"] == "weather").unwrap();
        assert_eq!(
            weather["outputSchema"]["properties"]["celsius"]["type"],
            "number"
        );

        let r = within(up.call_tool(json!({"name":"shout","arguments":{"text":"quiet ✓"}})))
            .await
            .unwrap();
        assert_eq!(text_of(&r), "QUIET ✓");
        let r = within(up.call_tool(json!({"name":"weather","arguments":{"city":"Oslo"}})))
            .await
            .unwrap();
        assert_eq!(
            r["structuredContent"],
            json!({"city":"Oslo","celsius":21.5})
        );
        // An unknown tool is the server's answer, passed on (as an error
        // result or a JSON-RPC error), never a hang or a crash.
        let unknown = within(up.call_tool(json!({"name":"nope","arguments":{}}))).await;
        match unknown {
            Ok(r) => assert_eq!(r["isError"], true, "{r}"),
            Err(e) => assert!(e.to_string().contains("python"), "{e}"),
        }
        up.shutdown(Duration::from_secs(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reference_server_over_stdio_in_both_eras() {
    let bin = support::reference_server_bin();
    for (era, expected, version) in [
        ("2025-11-25", Era::Legacy, "2025-11-25"),
        ("2026-07-28", Era::Modern, "2026-07-28"),
    ] {
        let up = upstream(stdio("orders", bin.to_string_lossy(), &["--era", era]));
        let negotiated = within(up.connect()).await.unwrap();
        assert_eq!(negotiated.era, expected, "--era {era}");
        assert_eq!(negotiated.protocol_version, version);
        // Six tools over pages of three: every nextCursor was followed.
        let tools = within(up.list_tools()).await.unwrap().entries;
        let mut listed = names(&tools);
        listed.sort();
        assert_eq!(
            listed,
            vec![
                "add",
                "create_order",
                "echo",
                "get_customer",
                "get_order",
                "list_orders"
            ]
        );
        let order =
            within(up.call_tool(json!({"name":"get_order","arguments":{"order_id":"O-1001"}})))
                .await
                .unwrap();
        assert_eq!(order["structuredContent"]["id"], "O-1001", "{order}");
        let missing =
            within(up.call_tool(json!({"name":"get_order","arguments":{"order_id":"O-9"}})))
                .await
                .unwrap();
        assert_eq!(missing["isError"], true);
        // The caller's own _meta and unknown params are forwarded untouched
        // alongside the protocol's keys.
        let echoed = within(up.call_tool(json!({
            "name":"echo","arguments":{"message":"0"},"_meta":{"com.example/trace":"abc"}
        })))
        .await
        .unwrap();
        assert_eq!(text_of(&echoed), "0");
        up.shutdown(Duration::from_secs(2)).await;
    }
}
