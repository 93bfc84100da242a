//! Graceful shutdown of real processes with calls in flight.
//!
//! - `switchyard-control-plane --config`, SIGTERM while an engine call is
//!   running: `/readyz` turns 503 at once, new connections are refused, the
//!   running call completes with its result, and the process exits 0 only
//!   after it.
//! - `switchyard-sidecar run`, SIGTERM while a call routed by the control
//!   plane is running: `/readyz` turns 503 ("shutting down"), the sidecar
//!   reports `draining` (admin `ServerStatus` shows it), a new call fails
//!   fast with UNAVAILABLE naming the server and "draining", the running
//!   call completes, the sidecar exits 0 and its stdio server (a Python
//!   stub) is gone: stdin closed, then SIGTERM, then SIGKILL.
//! - Two sidecars of one server, SIGTERM to one while calls flow: not one
//!   call fails, new calls go to the other sidecar once the control plane
//!   has seen `draining`, and the calls in flight on the draining one
//!   complete.

use crate::common::*;
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

/// Waits until admin `ServerStatus` of `stub` shows sidecar `sidecar_id`
/// in `state`; returns that status.
async fn wait_sidecar_state(
    endpoint: &str,
    sidecar_id: &str,
    state: &str,
) -> switchyard_proto::v1::ServerStatus {
    let what = format!("sidecar {sidecar_id} {state}");
    eventually(&what, LIMIT, || async move {
        let list = admin(endpoint)
            .await?
            .list_servers(switchyard_proto::v1::ListServersRequest {})
            .await
            .map_err(|e| e.to_string())?
            .into_inner();
        let stub = list
            .servers
            .into_iter()
            .find(|s| s.spec.as_ref().is_some_and(|x| x.name == "stub"))
            .ok_or("no stub")?;
        if stub
            .sidecars
            .iter()
            .any(|c| c.sidecar_id == sidecar_id && c.upstream_state == state)
        {
            Ok(stub)
        } else {
            Err(format!("{:?}", stub.sidecars))
        }
    })
    .await
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
    let status = s.cp.exited().await;
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
    // The control plane learns it at once, and says so.
    let status = wait_sidecar_state(&s.endpoint, "stub-1", "draining").await;
    assert_eq!(status.state, "draining", "{status:?}");
    let cli = ok_json(
        &cli(&s.endpoint, &["servers", "status", "stub", "--json"]).await,
        "servers status",
    );
    assert_eq!(cli["sidecars"][0]["upstreamState"], "draining", "{cli:#}");
    // A new call fails fast, saying why, while the old one still runs.
    let mut engine = engine(&s.endpoint).await.unwrap();
    let asked = Instant::now();
    let refused = engine
        .call_tool(call_request("stub__pid", "{}", ""))
        .await
        .expect_err("a call to a server whose only sidecar is draining");
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "took {:?}",
        asked.elapsed()
    );
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("stub") && refused.message().contains("draining"),
        "{refused:?}"
    );
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

/// The pid of the stub server that answers `stub__pid`.
async fn stub_pid(
    engine: &mut EngineServiceClient<tonic::transport::Channel>,
) -> Result<u32, tonic::Status> {
    let r = engine
        .call_tool(call_request("stub__pid", "{}", ""))
        .await?
        .into_inner();
    Ok(r.text.trim().parse().unwrap_or_else(|_| panic!("{r:?}")))
}

#[tokio::test]
async fn a_draining_sidecar_gets_no_new_calls_while_the_other_takes_them() {
    let mut s = setup().await;
    // A second sidecar of the same server, logging to its own file.
    let call_log2 = s.dir.path().join("calls-2.log");
    let (mut sidecar2, _, _) = start_sidecar(
        "sidecar-2",
        s.dir.path(),
        &stub_toml(&call_log2),
        &format!(
            "control_plane = {}\nsidecar_id = \"stub-2\"\ngrace_secs = 10",
            toml_str(&s.endpoint)
        ),
    )
    .await;
    wait_sidecar_state(&s.endpoint, "stub-1", "connected").await;
    wait_sidecar_state(&s.endpoint, "stub-2", "connected").await;
    // Which stub server belongs to which sidecar.
    let engine = engine(&s.endpoint).await.unwrap();
    let (pid1, pid2) = eventually("both sidecars answered", LIMIT, || {
        let mut engine = engine.clone();
        let (s1, s2) = (s.sidecar.pid, sidecar2.pid);
        async move {
            let pid = stub_pid(&mut engine).await.map_err(|e| e.to_string())?;
            let p1 = children_of(s1).contains(&pid);
            let p2 = children_of(s2).contains(&pid);
            let mut other = None;
            for _ in 0..4 {
                let q = stub_pid(&mut engine).await.map_err(|e| e.to_string())?;
                if q != pid {
                    other = Some(q);
                }
            }
            match (p1, p2, other) {
                (true, false, Some(o)) => Ok((pid, o)),
                (false, true, Some(o)) => Ok((o, pid)),
                other => Err(format!("{pid}: {other:?}")),
            }
        }
    })
    .await;
    assert!(children_of(s.sidecar.pid).contains(&pid1));
    assert!(children_of(sidecar2.pid).contains(&pid2));

    // Slow calls until one runs on sidecar 1 (round robin: within two).
    let mut slow = Vec::new();
    while !std::fs::read_to_string(&s.call_log)
        .unwrap_or_default()
        .contains("slow ")
    {
        assert!(slow.len() < 4, "no slow call reached sidecar 1");
        let mut engine = engine.clone();
        slow.push(tokio::spawn(async move {
            let mut request = call_request("stub__slow", "{\"ms\": 3000}", "");
            request.timeout_ms = 60_000;
            engine
                .call_tool(request)
                .await
                .map(|r| r.into_inner().result_json)
        }));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Calls flow all along: one after another, recording when each started
    // and who answered.
    let stop = tokio_util::sync::CancellationToken::new();
    let flow = {
        let (mut engine, stop) = (engine.clone(), stop.clone());
        tokio::spawn(async move {
            let mut answers = Vec::new();
            while !stop.is_cancelled() {
                let started = Instant::now();
                let r = stub_pid(&mut engine).await;
                answers.push((started, r));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            answers
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    signal(s.sidecar.pid, nix::sys::signal::Signal::SIGTERM);
    let status = wait_sidecar_state(&s.endpoint, "stub-1", "draining").await;
    let seen = Instant::now();
    // The server stays up: its other sidecar is connected.
    assert_eq!(status.state, "up", "{status:?}");
    assert!(
        slow.iter().all(|c| !c.is_finished()),
        "a slow call ended before the drain"
    );
    for call in slow {
        let result = tokio::time::timeout(LIMIT, call)
            .await
            .expect("the call ends")
            .unwrap()
            .expect("the in-flight calls complete");
        assert!(result.contains("slept 3000 ms"), "{result}");
    }
    let exit = tokio::time::timeout(LIMIT, s.sidecar.child.wait())
        .await
        .expect("sidecar 1 exits")
        .unwrap();
    assert_eq!(exit.code(), Some(0), "{}", s.sidecar.log());
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    let answers = flow.await.unwrap();

    let failed: Vec<_> = answers.iter().filter(|(_, r)| r.is_err()).collect();
    assert!(failed.is_empty(), "calls failed: {failed:?}");
    let after: Vec<u32> = answers
        .iter()
        .filter(|(t, _)| *t > seen)
        .map(|(_, r)| *r.as_ref().unwrap())
        .collect();
    assert!(
        after.len() >= 20,
        "too few calls after the drain began: {after:?}"
    );
    assert!(
        after.iter().all(|p| *p == pid2),
        "calls after `draining` went to sidecar 1 ({pid1}): {after:?}"
    );
    let before = answers.iter().filter(|(t, _)| *t <= seen).count();
    assert!(before >= 5, "too few calls before SIGTERM: {answers:?}");
    // Sidecar 1 announced before it drained.
    let log = s.sidecar.log();
    let announced = log.find("reporting draining").expect(&log);
    let drained = log.find("in-flight calls drained").expect(&log);
    assert!(announced < drained, "{log}");
    // Afterwards only sidecar 2 is registered.
    let ep = s.endpoint.clone();
    eventually("only stub-2 left", LIMIT, || {
        let ep = ep.clone();
        async move {
            let list = admin(&ep)
                .await?
                .list_servers(switchyard_proto::v1::ListServersRequest {})
                .await
                .map_err(|e| e.to_string())?
                .into_inner();
            let ids: Vec<_> = list.servers[0]
                .sidecars
                .iter()
                .map(|c| c.sidecar_id.clone())
                .collect();
            if ids == ["stub-2"] {
                Ok(())
            } else {
                Err(format!("{ids:?}"))
            }
        }
    })
    .await;
    let status = sidecar2.terminate().await;
    assert!(status.success(), "{status}");
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
