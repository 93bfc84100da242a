//! Graceful shutdown of real processes with calls in flight.
//!
//! - `switchyard-control-plane --config`, SIGTERM while an engine call is
//!   running: `/readyz` turns 503 at once, new connections are refused, the
//!   running call completes with its result, and the process exits 0 only
//!   after it.
//! - `switchyard-sidecar run`, SIGTERM while a call routed by the control
//!   plane is running: `/readyz` turns 503 ("shutting down"), the call
//!   completes, the sidecar exits 0 and its stdio server (a Python stub) is
//!   gone: stdin closed, then SIGTERM, then SIGKILL.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use switchyard_test_support::{free_port, stub_script};
use tokio::task::JoinHandle;

/// The `[server]` table of `crashy.py` (its `slow {ms}` tool), logging each
/// `tools/call` to `call_log`.
fn stub_toml(call_log: &Path) -> String {
    format!(
        "name = \"stub\"\ntransport = \"stdio\"\ncommand = \"python3\"\nargs = [{}]\nenv = {{ STUB_CALL_LOG = {} }}",
        toml_str(stub_script("crashy.py").to_string_lossy()),
        toml_str(call_log.to_string_lossy()),
    )
}

struct Setup {
    dir: tempfile::TempDir,
    cp: Proc,
    endpoint: String,
    cp_http: String,
    sidecar: Proc,
    sidecar_http: String,
    call_log: PathBuf,
}

async fn setup() -> Setup {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let call_log = dir.path().join("calls.log");
    let (grpc, http) = (free_port(), free_port());
    let config = dir.path().join("cp.toml");
    std::fs::write(
        &config,
        format!(
            "[control_plane]\nlisten = \"127.0.0.1:{grpc}\"\nhttp_listen = \"127.0.0.1:{http}\"\nsidecar_lease_ttl_sec = 5\n\n[store]\npath = {}\n\n[[servers]]\n{}\n",
            toml_str(dir.path().join("store/store.redb").to_string_lossy()),
            stub_toml(&call_log),
        ),
    )
    .unwrap();
    let (cp, _, cp_http) = start_control_plane("control-plane", dir.path(), &config).await;
    let endpoint = format!("http://127.0.0.1:{grpc}");
    let (sidecar, _, sidecar_http) = start_sidecar(
        "sidecar",
        dir.path(),
        &stub_toml(&call_log),
        &format!(
            "control_plane = {}\nsidecar_id = \"stub-1\"\ngrace_secs = 10",
            toml_str(&endpoint)
        ),
    )
    .await;
    let ep = endpoint.clone();
    eventually("stub__slow listed", START_LIMIT, || {
        let ep = ep.clone();
        async move {
            let mut engine = engine(&ep).await?;
            let names = tool_names(&mut engine, "").await;
            if names.iter().any(|n| n == "stub__slow") {
                Ok(())
            } else {
                Err(format!("{names:?}"))
            }
        }
    })
    .await;
    Setup {
        dir,
        cp,
        endpoint,
        cp_http,
        sidecar,
        sidecar_http,
        call_log,
    }
}

/// Starts `stub__slow {ms}` through the control plane on its own
/// connection; returns once the stub has received it.
async fn slow_call(s: &Setup, ms: u64) -> JoinHandle<Result<String, tonic::Status>> {
    let mut engine: EngineServiceClient<_> = engine(&s.endpoint).await.expect("engine");
    let args = format!("{{\"ms\": {ms}}}");
    let call = tokio::spawn(async move {
        let mut request = call_request("stub__slow", &args, "");
        request.timeout_ms = 60_000;
        engine
            .call_tool(request)
            .await
            .map(|r| r.into_inner().result_json)
    });
    let log = s.call_log.clone();
    eventually("the stub received the slow call", LIMIT, || {
        let log = log.clone();
        async move {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.lines().any(|l| l.starts_with("slow ")) {
                Ok(())
            } else {
                Err(text)
            }
        }
    })
    .await;
    call
}

async fn wait_ready(addr: &str, want: u16) -> String {
    let addr = addr.to_owned();
    eventually(&format!("/readyz {want}"), LIMIT, || {
        let addr = addr.clone();
        async move {
            let (status, body) = http_get(&addr, "/readyz").await;
            if status == want {
                Ok(body)
            } else {
                Err(format!("{status} {body}"))
            }
        }
    })
    .await
}

#[tokio::test]
async fn the_control_plane_drains_in_flight_calls_on_sigterm() {
    let mut s = setup().await;
    wait_ready(&s.cp_http, 200).await;
    let call = slow_call(&s, 4000).await;

    let sent = Instant::now();
    signal(s.cp.pid, nix::sys::signal::Signal::SIGTERM);
    // Not ready first, while the call is still running.
    let body = wait_ready(&s.cp_http, 503).await;
    assert!(body.contains("not ready"), "{body}");
    assert!(!call.is_finished(), "the call ended before the drain");
    // No new work: a new connection is refused.
    let refused = engine(&s.endpoint).await;
    assert!(
        refused.is_err(),
        "a new connection was accepted while draining"
    );

    let result = tokio::time::timeout(LIMIT, call)
        .await
        .expect("the call ends")
        .unwrap()
        .expect("the in-flight call completes during the drain");
    assert!(result.contains("slept 4000 ms"), "{result}");
    let status = s.cp.terminate().await;
    assert!(status.success(), "{status}\n{}", s.cp.log());
    assert!(
        sent.elapsed() >= Duration::from_millis(3000),
        "the control plane exited {:?} after SIGTERM, before the call could end",
        sent.elapsed()
    );
    let log = s.cp.log();
    assert!(log.contains("in-flight calls drained"), "{log}");
    drop(s.sidecar);
    drop(s.dir);
}

#[tokio::test]
async fn a_sidecar_drains_in_flight_calls_then_stops_its_server_on_sigterm() {
    let mut s = setup().await;
    let pid: u32 = {
        let mut engine = engine(&s.endpoint).await.unwrap();
        let r = engine
            .call_tool(call_request("stub__pid", "{}", ""))
            .await
            .expect("stub__pid")
            .into_inner();
        r.text.trim().parse().unwrap_or_else(|_| panic!("{r:?}"))
    };
    assert!(alive(pid));
    wait_ready(&s.sidecar_http, 200).await;
    let call = slow_call(&s, 3000).await;

    signal(s.sidecar.pid, nix::sys::signal::Signal::SIGTERM);
    let body = wait_ready(&s.sidecar_http, 503).await;
    assert!(body.contains("shutting down"), "{body}");
    assert!(!call.is_finished(), "the call ended before the drain");

    let result = tokio::time::timeout(LIMIT, call)
        .await
        .expect("the call ends")
        .unwrap()
        .expect("the in-flight call completes while the sidecar drains");
    assert!(result.contains("slept 3000 ms"), "{result}");
    let status = tokio::time::timeout(LIMIT, s.sidecar.child.wait())
        .await
        .expect("the sidecar exits")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{}", s.sidecar.log());
    // Its stdio server went with it (stdin closed first: the stub exits on EOF).
    eventually("the stub server gone", LIMIT, || async move {
        if alive(pid) {
            Err(format!("{pid} still running"))
        } else {
            Ok(())
        }
    })
    .await;
    let log = s.sidecar.log();
    assert!(log.contains("in-flight calls drained"), "{log}");
    // The control plane notices the sidecar is gone.
    let ep = s.endpoint.clone();
    eventually("stub down", LIMIT, || {
        let ep = ep.clone();
        async move {
            let list = admin(&ep)
                .await?
                .list_servers(switchyard_proto::v1::ListServersRequest {})
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            let state = list.servers[0].state.clone();
            if state == "up" { Err(state) } else { Ok(()) }
        }
    })
    .await;
    drop(s.cp);
}

#[tokio::test]
async fn a_sidecar_escalates_to_sigkill_for_a_server_that_ignores_eof_and_sigterm() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let server = format!(
        "name = \"stubborn\"\ntransport = \"stdio\"\ncommand = \"python3\"\nargs = [{}]\nenv = {{ STUB_IGNORE_EOF = \"1\", STUB_IGNORE_SIGTERM = \"1\" }}",
        toml_str(stub_script("crashy.py").to_string_lossy()),
    );
    // No control plane is needed to start and stop the server.
    let (mut sidecar, _, _) = start_sidecar(
        "sidecar",
        dir.path(),
        &server,
        "control_plane = \"http://127.0.0.1:1\"\ngrace_secs = 1",
    )
    .await;
    let sidecar_pid = sidecar.pid;
    let stub = eventually("the stub server running", LIMIT, || async move {
        children_of(sidecar_pid)
            .into_iter()
            .find(|p| cmdline(*p).contains("crashy.py"))
            .ok_or_else(|| "no crashy.py child yet".to_owned())
    })
    .await;
    // Let it finish starting (it must be reading stdin to ignore its EOF).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = Instant::now();
    let status = sidecar.terminate().await;
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(0), "{}", sidecar.log());
    assert!(!alive(stub), "the stub server {stub} survived the sidecar");
    // stdin closed, 1 s; SIGTERM, 1 s; SIGKILL.
    assert!(took >= Duration::from_millis(1900), "stopped in {took:?}");
    let log = sidecar.log();
    assert!(
        log.contains("sending SIGTERM") && log.contains("sending SIGKILL"),
        "{log}"
    );
}
