//! `switchyard-sidecar run` end to end: the real binary, a real stdio stub
//! server (`tests/peers/servers/crashy.py`) and, standing in for the control
//! plane, test support's fake control plane, which records what the sidecar
//! registers and reports.
//!
//! Covered: registration with the call address (after the registry comes up
//! late), hello + catalogue on the report stream, re-registration when the
//! stream breaks, calls through `SidecarCalls` (result, bad JSON, JSON-RPC
//! error, timeout, server crash), cancellation reaching the server as
//! `notifications/cancelled`, `/healthz`, `/readyz`, `/metrics`, graceful
//! shutdown on SIGTERM with a call in flight, calls cancelled when the
//! grace period ends, and a bad config file.

use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use switchyard_proto::v1::{SidecarCallRequest, sidecar_report};
use switchyard_test_support::fake_control_plane::{Event, FakeControlPlane};
use switchyard_test_support::{stub_script, workspace_bin};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tonic::Code;

/// Upper bound on any single wait.
const LIMIT: Duration = Duration::from_secs(30);

// ---- the sidecar process ------------------------------------------------------

struct Sidecar {
    child: Child,
    calls_addr: String,
    http_addr: String,
}

impl Sidecar {
    async fn start(args: &[&str]) -> Sidecar {
        let mut child = Command::new(workspace_bin("switchyard-sidecar", "switchyard-sidecar"))
            .arg("run")
            // Before `args`, which may end with `-- COMMAND ARGS`.
            .args(["--calls-token-file", &crate::common::calls_token_file()])
            .args(args)
            .env("SWITCHYARD_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start switchyard-sidecar");
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                eprintln!("[sidecar] {line}");
            }
        });
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(LIMIT, stdout.next_line())
            .await
            .expect("the sidecar printed its addresses")
            .unwrap()
            .expect("a line on stdout");
        // switchyard-sidecar: server NAME, calls on ADDR, http on ADDR
        let rest = line
            .strip_prefix("switchyard-sidecar: server ")
            .unwrap_or_else(|| panic!("{line}"));
        let (_, rest) = rest.split_once(", calls on ").unwrap();
        let (calls_addr, http_addr) = rest.split_once(", http on ").unwrap();
        Sidecar {
            calls_addr: calls_addr.to_owned(),
            http_addr: http_addr.to_owned(),
            child,
        }
    }

    async fn client(&self) -> crate::common::CallsClient {
        crate::common::calls_client(&self.calls_addr).await
    }

    /// GET `path` on the HTTP endpoints: (status, body).
    async fn get(&self, path: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(&self.http_addr)
            .await
            .unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut raw = String::new();
        s.read_to_string(&mut raw).await.unwrap();
        let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
        let body = raw
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    /// Polls `path` until it answers `want` (within `LIMIT`).
    async fn wait_for(&self, path: &str, want: u16) -> String {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let (status, body) = self.get(path).await;
            if status == want {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{path} still {status}: {body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn call(tool: &str, arguments: Value) -> SidecarCallRequest {
    SidecarCallRequest {
        params_json: json!({"name": tool, "arguments": arguments}).to_string(),
        ..Default::default()
    }
}

fn text_of(result_json: &str) -> String {
    let v: Value = serde_json::from_str(result_json).unwrap();
    v["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn cancelled_ids(client: &mut crate::common::CallsClient) -> Vec<Value> {
    let r = client
        .call_tool(call("cancelled_ids", json!({})))
        .await
        .unwrap()
        .into_inner();
    serde_json::from_str(&text_of(&r.result_json)).unwrap()
}

fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie has exited; only its parent's wait is missing.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// A port bound now on 127.0.0.1, with its listener.
fn reserve_port() -> (u16, std::net::TcpListener) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (l.local_addr().unwrap().port(), l)
}

// ---- tests --------------------------------------------------------------------

#[tokio::test]
async fn serves_calls_and_reports_to_the_control_plane() {
    // The port is reserved now; the registry serves on it only later.
    let (cp_port, cp_listener) = reserve_port();
    let crashy = stub_script("crashy.py").display().to_string();
    let cp = format!("http://127.0.0.1:{cp_port}");
    let sidecar = Sidecar::start(&[
        "--server-name",
        "crashy",
        "--control-plane",
        &cp,
        "--grace-secs",
        "10",
        "--",
        "python3",
        &crashy,
    ])
    .await;
    let mut client = sidecar.client().await;

    // Before the control plane is up: alive, not ready, calls served.
    assert_eq!(sidecar.get("/healthz").await.0, 200);
    let (status, body) = sidecar.get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not registered"), "{body}");
    let r = client
        .call_tool(call("echo", json!({"message": "early"})))
        .await
        .unwrap();
    assert_eq!(text_of(&r.get_ref().result_json), "early");

    // The control plane comes up late: registration, hello, catalogue.
    let mut registry = FakeControlPlane::serve_on(cp_listener).await;
    let reg = registry.register().await;
    assert_eq!(reg.server, "crashy");
    assert_eq!(reg.call_address, format!("http://{}", sidecar.calls_addr));
    assert!(
        reg.sidecar_id
            .contains(&format!("-{}-", sidecar.child.id().unwrap())),
        "{}",
        reg.sidecar_id
    );
    assert!(!reg.version.is_empty());
    let first = registry.report("any report", |_| true).await;
    let sidecar_report::Report::Hello(hello) = first else {
        panic!("first report is not hello: {first:?}")
    };
    assert_eq!(
        (hello.server.as_str(), hello.sidecar_id.as_str()),
        ("crashy", reg.sidecar_id.as_str())
    );
    let (tools, snapshot) = registry.catalogue().await;
    for t in ["echo", "hang", "pid", "slow", "crash", "cancelled_ids"] {
        assert!(tools.iter().any(|n| n == t), "{t} missing from {tools:?}");
    }
    assert_eq!(snapshot.server, "crashy");
    assert_eq!(snapshot.protocol_version, "2025-11-25");
    assert!(
        snapshot.server_info_json.contains("\"crashy\""),
        "{}",
        snapshot.server_info_json
    );
    assert!(
        snapshot.capabilities_json.contains("tools"),
        "{}",
        snapshot.capabilities_json
    );
    assert_eq!(sidecar.wait_for("/readyz", 200).await, "ready\n");

    // Calls: result as sent, bad JSON, JSON-RPC error, timeout.
    let r = client
        .call_tool(call("echo", json!({"message": "hi"})))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        serde_json::from_str::<Value>(&r.result_json).unwrap(),
        json!({"content": [{"type": "text", "text": "hi"}]})
    );
    let bad = SidecarCallRequest {
        params_json: "{\"name\": ".into(),
        ..Default::default()
    };
    let e = client.call_tool(bad).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("params_json"), "{e:?}");
    let e = client
        .call_tool(call("no_such_tool", json!({})))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("crashy"), "{e:?}");
    let details: Value = serde_json::from_slice(e.details()).unwrap();
    assert_eq!(details["code"], -32602, "{details}");
    assert_eq!(details["message"], "Unknown tool: no_such_tool");
    let before = cancelled_ids(&mut client).await.len();
    let mut timed = call("hang", json!({}));
    timed.timeout_ms = 300;
    let e = client.call_tool(timed).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");

    // Dropping a call in flight cancels it upstream.
    let mut hanging = client.clone();
    let task = tokio::spawn(async move { hanging.call_tool(call("hang", json!({}))).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let ids = cancelled_ids(&mut client).await;
        if ids.len() == before + 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "cancellations seen: {ids:?} (before: {before})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Metrics count the echo calls.
    let (status, metrics) = sidecar.get("/metrics").await;
    assert_eq!(status, 200);
    let echo_ok = metrics
        .lines()
        .find(|l| {
            l.starts_with("switchyard_sidecar_upstream_calls_total{")
                && l.contains("tool=\"echo\"")
                && l.contains("outcome=\"ok\"")
                && l.contains("server=\"crashy\"")
        })
        .unwrap_or_else(|| panic!("no echo counter in\n{metrics}"));
    assert!(echo_ok.ends_with(" 2"), "{echo_ok}");

    // A crash is UNAVAILABLE; the server restarts and a new catalogue follows.
    let pid_before = text_of(
        &client
            .call_tool(call("pid", json!({})))
            .await
            .unwrap()
            .get_ref()
            .result_json,
    );
    let e = client
        .call_tool(call("crash", json!({"code": 3})))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(
        e.message().contains("crashy") && e.message().contains("exit"),
        "{e:?}"
    );
    registry
        .report(
            "status down",
            |r| matches!(r, sidecar_report::Report::Status(s) if s.state == "down"),
        )
        .await;
    registry.catalogue().await;
    let pid = text_of(
        &client
            .call_tool(call("pid", json!({})))
            .await
            .unwrap()
            .get_ref()
            .result_json,
    );
    assert_ne!(pid, pid_before);

    // A broken report stream: the sidecar registers again and resends.
    registry.break_streams();
    registry
        .next("stream closed", |e| {
            matches!(e, Event::ReportClosed).then_some(())
        })
        .await;
    let again = registry.register().await;
    assert_eq!(again.sidecar_id, reg.sidecar_id);
    registry
        .report("hello", |r| matches!(r, sidecar_report::Report::Hello(_)))
        .await;
    registry.catalogue().await;
    sidecar.wait_for("/readyz", 200).await;

    // SIGTERM with a call in flight: not ready, the call completes, exit 0,
    // the server is stopped.
    let mut slow_client = client.clone();
    let slow = tokio::spawn(async move {
        slow_client
            .call_tool(call("slow", json!({"ms": 1500})))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sidecar_pid = sidecar.child.id().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sidecar_pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let body = sidecar.wait_for("/readyz", 503).await;
    assert!(body.contains("shutting down"), "{body}");
    let r = tokio::time::timeout(LIMIT, slow)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(text_of(&r.get_ref().result_json), "slept 1500 ms");
    let mut sidecar = sidecar;
    let status = tokio::time::timeout(LIMIT, sidecar.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
    let pid: u32 = pid.parse().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !process_gone(pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the stub server {pid} is still running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_bad_config_file_exits_64_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[server]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\nera = \"2024\"\n[sidecar]\ncontrol_plane = \"http://127.0.0.1:1\"\n",
            "server.era",
        ),
        (
            "[server]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://127.0.0.1:1\"\nhttp_lisen = \"127.0.0.1:0\"\n",
            "sidecar.http_lisen",
        ),
        (
            "[server]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"\n",
            "sidecar.control_plane",
        ),
    ];
    for (i, (text, key)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = Command::new(workspace_bin("switchyard-sidecar", "switchyard-sidecar"))
            .args(["run", "--config"])
            .arg(&path)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{stderr}");
        assert!(stderr.contains(key), "{key} not named: {stderr}");
        assert!(
            stderr.contains(&path.display().to_string()),
            "file not named: {stderr}"
        );
        assert!(out.stdout.is_empty());
    }
}

/// A stub (built on mcpstub) whose `add_tool {tool}` adds a tool and sends
/// `notifications/tools/list_changed`.
const CHANGER: &str = r#"
import sys
sys.path.insert(0, sys.argv[1])
from mcpstub import Server
srv = Server("changer")
srv.add_echo()

@srv.tool("add_tool", "adds tool `tool` and notifies", tool="string")
def add_tool(args, ctx):
    srv.tool(args["tool"], "added at run time")(lambda a, c: "added")
    srv.notify("notifications/tools/list_changed")
    return "ok"

srv.run()
"#;

#[tokio::test]
async fn a_tool_list_change_resends_the_catalogue() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("changer.py");
    std::fs::write(&script, CHANGER).unwrap();
    let servers_dir = stub_script("mcpstub.py")
        .parent()
        .unwrap()
        .display()
        .to_string();
    let (cp_port, cp_listener) = reserve_port();
    let mut registry = FakeControlPlane::serve_on(cp_listener).await;
    let cp = format!("http://127.0.0.1:{cp_port}");
    let script = script.display().to_string();
    let sidecar = Sidecar::start(&[
        "--server-name",
        "changer",
        "--control-plane",
        &cp,
        "--",
        "python3",
        &script,
        &servers_dir,
    ])
    .await;
    registry.register().await;
    let (tools, _) = registry.catalogue().await;
    assert!(tools.contains(&"add_tool".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"fresh".to_owned()), "{tools:?}");

    let mut client = sidecar.client().await;
    let r = client
        .call_tool(call("add_tool", json!({"tool": "fresh"})))
        .await
        .unwrap();
    assert_eq!(text_of(&r.get_ref().result_json), "ok");
    let (tools, _) = registry.catalogue().await;
    assert!(tools.contains(&"fresh".to_owned()), "{tools:?}");
}

#[tokio::test]
async fn calls_still_running_when_the_grace_period_ends_are_cancelled() {
    // No control plane: calls are served all the same.
    let (cp_port, _cp_listener) = reserve_port();
    let crashy = stub_script("crashy.py").display().to_string();
    let cp = format!("http://127.0.0.1:{cp_port}");
    let mut sidecar = Sidecar::start(&[
        "--server-name",
        "crashy",
        "--control-plane",
        &cp,
        "--grace-secs",
        "1",
        "--",
        "python3",
        &crashy,
    ])
    .await;
    let mut client = sidecar.client().await;
    let r = client
        .call_tool(call("echo", json!({"message": "up"})))
        .await
        .unwrap();
    assert_eq!(text_of(&r.get_ref().result_json), "up");

    // One hanging call as a CallTool RPC, one on a call stream.
    let mut unary_client = client.clone();
    let unary = tokio::spawn(async move { unary_client.call_tool(call("hang", json!({}))).await });
    let mut stream_client = client.clone();
    let mux = switchyard_proto::calls::Mux::<switchyard_proto::calls::SidecarCallFrames>::open(
        |frames| async move { stream_client.call_stream(frames).await },
    )
    .await
    .unwrap();
    let streamed = tokio::spawn(async move { mux.call(call("hang", json!({}))).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sidecar.child.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();

    // Both end after the drain notice and the 1 s grace, with UNAVAILABLE
    // saying why, well before the call's own timeout.
    let e = tokio::time::timeout(LIMIT, unary)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("grace period is over"), "{e:?}");
    match tokio::time::timeout(LIMIT, streamed)
        .await
        .unwrap()
        .unwrap()
    {
        Err(switchyard_proto::calls::CallError::Call(e)) => {
            assert_eq!(e.code(), Code::Unavailable, "{e:?}");
            assert!(e.message().contains("grace period is over"), "{e:?}");
        }
        other => panic!("the streamed call: {other:?}"),
    }
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(1), "{waited:?}");
    let status = tokio::time::timeout(LIMIT, sidecar.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
}
