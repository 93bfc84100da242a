//! `switchyard-sidecar probe` as an operator runs it: against
//! server-everything over stdio and over Streamable HTTP, with `--json`
//! and `--call`, and its one-line failures (never a hang).

use serde_json::Value;
use std::process::Output;
use std::time::{Duration, Instant};
use switchyard_test_support as support;

const PROBE: &str = env!("CARGO_BIN_EXE_switchyard-sidecar");

async fn probe(args: &[&str]) -> (Output, Duration) {
    let started = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(PROBE)
            .arg("probe")
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("probe hung")
    .expect("probe ran");
    (out, started.elapsed())
}

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn check_everything_doc(doc: &Value) {
    assert_eq!(doc["protocolVersion"], "2025-11-25");
    assert_eq!(doc["era"], "legacy");
    assert_eq!(doc["serverInfo"]["name"], "mcp-servers/everything");
    assert!(doc["capabilities"]["tools"].is_object());
    let tools = doc["tools"].as_array().unwrap();
    assert!(tools.iter().any(|t| t["name"] == "get-sum"), "{tools:?}");
    assert_eq!(
        doc["callResult"]["content"][0]["text"],
        "The sum of 2 and 40 is 42."
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn probes_server_everything_over_stdio() {
    let everything = support::everything_bin();
    let (out, _) = probe(&[
        "--json",
        "--call",
        "get-sum",
        "--args",
        r#"{"a":2,"b":40}"#,
        "--",
        &everything.to_string_lossy(),
        "stdio",
    ])
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_everything_doc(&stdout_json(&out));

    // The text form names the version, the server and every tool.
    let (out, _) = probe(&["--", &everything.to_string_lossy(), "stdio"]).await;
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("protocol: 2025-11-25"), "{text}");
    assert!(text.contains("mcp-servers/everything"), "{text}");
    assert!(text.contains("get-structured-content"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn probes_server_everything_over_streamable_http() {
    let port = support::free_port();
    let mut cmd = tokio::process::Command::new(support::everything_bin());
    cmd.arg("streamableHttp").env("PORT", port.to_string());
    let _server = support::start_listening_on(cmd, port).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (out, _) = probe(&[
        "--json",
        "--url",
        &url,
        "--header",
        "X-Probe: yes",
        "--call",
        "get-sum",
        "--args",
        r#"{"a":2,"b":40}"#,
    ])
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    check_everything_doc(&stdout_json(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_exit_non_zero_with_one_line() {
    let one_line = |out: &Output| {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("").to_owned();
        assert!(last.starts_with("error: "), "stderr: {err}");
        last
    };
    // A command that does not exist.
    let (out, took) = probe(&["--", "/nonexistent/mcp-server"]).await;
    assert!(!out.status.success());
    assert!(one_line(&out).contains("/nonexistent/mcp-server"));
    assert!(took < Duration::from_secs(10));

    // Nothing listens there.
    let url = format!("http://127.0.0.1:{}/mcp", support::free_port());
    let (out, took) = probe(&["--url", &url]).await;
    assert!(!out.status.success());
    assert!(one_line(&out).contains(&url));
    assert!(took < Duration::from_secs(15));

    // A server that never answers: bounded by --timeout-secs.
    let (out, took) = probe(&["--timeout-secs", "2", "--", "sleep", "60"]).await;
    assert!(!out.status.success());
    one_line(&out);
    assert!(took < Duration::from_secs(15), "{took:?}");

    // An isError result is a failure too, and bad --args is refused.
    let reference = support::reference_server_bin();
    let (out, _) = probe(&[
        "--call",
        "get_order",
        "--args",
        r#"{"order_id":"O-9"}"#,
        "--",
        &reference.to_string_lossy(),
    ])
    .await;
    assert!(!out.status.success());
    assert!(one_line(&out).contains("isError"));
    let (out, _) = probe(&["--call", "x", "--args", "[1]", "--", "true"]).await;
    assert!(!out.status.success());
    assert!(one_line(&out).contains("--args"));
}
