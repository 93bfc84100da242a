//! Control-plane replicas are stateless: two `switchyard-control-plane`
//! processes on one etcd serve the same servers, sessions and sidecars.
//!
//! A sidecar (`switchyard-sidecar run --config`) registered with replica A
//! serves calls made through replica B; a session created through either
//! replica is listed and used through the other. With a second sidecar
//! registered with B, replica A is killed (SIGKILL): every call through B
//! keeps succeeding, the registration A held expires within the lease TTL,
//! and sessions created through A are still there. SIGTERM then stops B
//! promptly although a sidecar's report stream is open.
//!
//! MCP clients too are served by any replica: a 2026-07-28 client's retry
//! with `inputResponses` resumes, through the other replica, the call that
//! asked through the first; a 2025-11-25 client's session opened on one
//! replica is served by the other, and its answer to a question on its
//! stream, POSTed to the other replica, reaches the call.
//!
//! An approval card whose call waits on a replica that is killed is closed
//! (`cancel`) by the other replica once the dead one's liveness lease has
//! expired, and an answer to it is refused; the other replica's own cards,
//! and a sidecar's question, stay open, also while it is frozen (SIGSTOP)
//! for less than its lease.

use crate::common::*;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use switchyard_proto::v1 as pb;
use switchyard_test_support::{reference_server_bin, start_etcd};
use tokio::process::Command;

const TTL_SECS: u64 = 4;

/// Starts a replica on `config`; returns it and its gRPC endpoint.
async fn replica(name: &str, dir: &Path, config: &Path) -> (Proc, String) {
    let mut cmd = Command::new(control_plane_bin());
    cmd.arg("--config")
        .arg(config)
        .env("SWITCHYARD_LOG", "info");
    let (proc, line) = Proc::start(
        name,
        cmd,
        dir.join(format!("{name}.log")),
        "switchyard-control-plane: grpc on ",
    )
    .await;
    // "switchyard-control-plane: grpc on ADDR, http on ADDR"
    let addr = line
        .split("grpc on ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .expect("the grpc address")
        .to_owned();
    (proc, format!("http://{addr}"))
}

/// Starts a sidecar for `orders` (reference server, stdio, 2026-07-28)
/// registering with `control_plane`.
async fn sidecar(name: &str, dir: &Path, control_plane: &str) -> Proc {
    sidecar_for(
        name,
        dir,
        control_plane,
        "orders",
        "\"--era\", \"2026-07-28\"",
    )
    .await
}

/// Starts a sidecar for `server`, the reference server with `args` (TOML
/// array items), registering with `control_plane`.
async fn sidecar_for(
    name: &str,
    dir: &Path,
    control_plane: &str,
    server: &str,
    args: &str,
) -> Proc {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "[server]\nname = {}\ntransport = \"stdio\"\ncommand = {}\nargs = [{args}]\n\n\
             [sidecar]\ncontrol_plane = {}\nsidecar_id = {}\ngrace_secs = 2\n",
            toml_str(server),
            toml_str(reference_server_bin().to_string_lossy()),
            toml_str(control_plane),
            toml_str(name),
        ),
    )
    .expect("write the sidecar config");
    let mut cmd = Command::new(sidecar_bin());
    cmd.arg("run").arg("--config").arg(&config);
    Proc::start(
        name,
        cmd,
        dir.join(format!("{name}.log")),
        &format!("switchyard-sidecar: server {server}, calls on"),
    )
    .await
    .0
}

/// The sidecar ids registered for `orders`, seen through `endpoint`, once
/// all of them report a connected upstream.
async fn orders_sidecars(endpoint: &str) -> Result<Vec<String>, String> {
    server_sidecars(endpoint, "orders").await
}

/// The sidecar ids registered for `server`, seen through `endpoint`, once
/// all of them report a connected upstream.
async fn server_sidecars(endpoint: &str, server: &str) -> Result<Vec<String>, String> {
    let s = admin(endpoint)
        .await?
        .get_server_status(pb::GetServerStatusRequest {
            name: server.into(),
        })
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    if s.state != "up" || s.sidecars.iter().any(|c| c.upstream_state != "connected") {
        return Err(format!("{s:?}"));
    }
    let mut ids: Vec<String> = s.sidecars.into_iter().map(|c| c.sidecar_id).collect();
    ids.sort();
    Ok(ids)
}

async fn wait_sidecars(endpoint: &str, want: &[&str], limit: Duration) {
    let endpoint = endpoint.to_owned();
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    eventually(&format!("orders sidecars {want:?}"), limit, || {
        let endpoint = endpoint.clone();
        let want = want.clone();
        async move {
            let ids = orders_sidecars(&endpoint).await?;
            if ids == want {
                Ok(())
            } else {
                Err(format!("{ids:?}"))
            }
        }
    })
    .await
}

async fn create_session(endpoint: &str) -> String {
    auto_session(&mut engine(endpoint).await.expect("engine"), &["orders"]).await
}

/// Lists the session's tools and calls `orders__get_order` in it.
async fn use_session(endpoint: &str, session: &str) {
    let mut engine = engine(endpoint).await.expect("engine");
    let got = engine
        .get_session(pb::GetSessionRequest {
            session_id: session.to_owned(),
        })
        .await
        .unwrap_or_else(|e| panic!("session {session} through {endpoint}: {e:?}"))
        .into_inner();
    assert_eq!(got.enabled_servers, ["orders"]);
    let names = tool_names(&mut engine, session).await;
    assert_eq!(names.len(), 6, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("orders__")), "{names:?}");
    get_order(&mut engine, "orders__get_order", session)
        .await
        .unwrap_or_else(|e| panic!("call in {session} through {endpoint}: {e:?}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_sessions_and_sidecars_and_survive_one_dying() {
    switchyard_test_support::init_tracing();
    let etcd = start_etcd().await;
    let http_server = start_http_reference_server().await;
    let dir = tempfile::Builder::new()
        .prefix("switchyard-e2e-replicas-")
        .tempdir()
        .expect("temp dir");
    let servers = quickstart_servers(&http_server.url);
    let store = StoreKind::Etcd(etcd.url.clone());
    let mut configs = Vec::new();
    for name in ["a", "b"] {
        let (text, _, _) = config_text(dir.path(), &store, TTL_SECS, &servers);
        let path = dir.path().join(format!("replica-{name}.toml"));
        std::fs::write(&path, text).expect("write the config");
        configs.push(path);
    }
    let (mut replica_a, a) = replica("replica-a", dir.path(), &configs[0]).await;
    let (mut replica_b, b) = replica("replica-b", dir.path(), &configs[1]).await;

    // ---- a sidecar registered with A serves calls made through B
    let mut via_a = sidecar("orders-via-a", dir.path(), &a).await;
    wait_sidecars(&b, &["orders-via-a"], LIMIT).await;
    wait_sidecars(&a, &["orders-via-a"], LIMIT).await;
    for endpoint in [&a, &b] {
        get_order(
            &mut engine(endpoint).await.unwrap(),
            "orders__get_order",
            "",
        )
        .await
        .unwrap_or_else(|e| panic!("through {endpoint}: {e:?}"));
    }

    // ---- sessions created through one replica work through the other
    let session_a = create_session(&a).await;
    use_session(&b, &session_a).await;
    let out = cli(&b, &["sessions", "create", "--server", "orders"]).await;
    let session_b = ok_stdout(&out, "sessions create through B")
        .trim()
        .to_owned();
    use_session(&a, &session_b).await;
    let listed = ok_json(
        &cli(&a, &["tools", "--session", &session_b, "--json"]).await,
        "tools --session through A",
    );
    assert_eq!(
        listed["tools"].as_array().map(Vec::len),
        Some(6),
        "{listed}"
    );
    let result = ok_json(
        &cli(
            &b,
            &[
                "call",
                "orders__get_order",
                "--session",
                &session_a,
                "--args",
                r#"{"order_id":"O-1003"}"#,
                "--json",
            ],
        )
        .await,
        "call through B in a session made through A",
    );
    assert_eq!(result["structuredContent"]["id"], "O-1003", "{result}");
    for endpoint in [&a, &b] {
        let listed = engine(endpoint)
            .await
            .unwrap()
            .list_sessions(pb::ListSessionsRequest {})
            .await
            .unwrap()
            .into_inner();
        let ids: Vec<&str> = listed.sessions.iter().map(|s| s.id.as_str()).collect();
        assert!(
            ids.contains(&session_a.as_str()) && ids.contains(&session_b.as_str()),
            "{endpoint}: {ids:?}"
        );
    }

    // ---- a second sidecar, registered with B; then A dies
    let mut via_b = sidecar("orders-via-b", dir.path(), &b).await;
    wait_sidecars(&b, &["orders-via-a", "orders-via-b"], LIMIT).await;

    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU32::new(0));
    let load = {
        let (stop, done, b) = (stop.clone(), done.clone(), b.clone());
        tokio::spawn(async move {
            let mut engine = engine(&b).await.expect("engine");
            let (mut ok, mut failures) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match get_order(&mut engine, "orders__get_order", "").await {
                    Ok(()) => ok += 1,
                    Err(status) => failures.push(status),
                }
                done.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (ok, failures)
        })
    };
    let calls_so_far = done.load(Ordering::Relaxed);

    signal(replica_a.pid, nix::sys::signal::Signal::SIGKILL);
    let killed = Instant::now();
    let _ = tokio::time::timeout(LIMIT, replica_a.child.wait()).await;

    // The registration A held is not renewed any more: it expires within
    // the TTL and B drops it; B keeps serving through the other sidecar.
    wait_sidecars(&b, &["orders-via-b"], Duration::from_secs(TTL_SECS + 5)).await;
    let expired = killed.elapsed();
    assert!(
        expired <= Duration::from_secs(TTL_SECS + 2),
        "A's registration lasted {expired:?} with a {TTL_SECS} s TTL"
    );
    let target = done.load(Ordering::Relaxed) + 10;
    eventually("more calls through B", LIMIT, || {
        let done = done.clone();
        async move {
            let n = done.load(Ordering::Relaxed);
            if n >= target {
                Ok(())
            } else {
                Err(format!("{n} < {target}"))
            }
        }
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let (ok, failures) = load.await.expect("the load task");
    assert!(
        failures.is_empty(),
        "{} of {} calls through B failed after A died: {failures:?}",
        failures.len(),
        ok as usize + failures.len()
    );
    assert!(ok > calls_so_far, "{ok}");
    eprintln!(
        "A killed: its sidecar registration expired after {expired:?}; {ok} calls through B, none failed"
    );

    // Sessions created through A are still there, and usable through B.
    use_session(&b, &session_a).await;
    use_session(&b, &session_b).await;
    let status = ok_json(
        &cli(&b, &["servers", "status", "orders", "--json"]).await,
        "servers status",
    );
    assert_eq!(status["state"], "up", "{status}");

    // ---- SIGTERM stops B promptly, even with a sidecar's report stream
    // and an engine's event stream open; the event stream ends UNAVAILABLE
    // (subscribe again elsewhere).
    let mut events = engine(&b)
        .await
        .unwrap()
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: session_a.clone(),
            ..Default::default()
        })
        .await
        .expect("subscribe through B")
        .into_inner();
    let stopping = Instant::now();
    let exit = replica_b.terminate().await;
    let took = stopping.elapsed();
    assert!(
        exit.success(),
        "replica B exited with {exit}\n{}",
        replica_b.log()
    );
    eprintln!("replica B stopped in {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "replica B took {took:?} to stop on SIGTERM"
    );
    let end = tokio::time::timeout(LIMIT, events.message())
        .await
        .expect("the event stream ends");
    match end {
        Err(status) => assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}"),
        Ok(m) => panic!("the event stream of a stopping replica ended with {m:?}"),
    }

    for sidecar in [&mut via_a, &mut via_b] {
        let exit = sidecar.terminate().await;
        assert!(
            exit.success(),
            "a sidecar exited with {exit}\n{}",
            sidecar.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_clients_are_served_by_any_replica() {
    use crate::e2e_mcp_endpoint::{JSON_HEADERS, Sse, client, modern_call, one_question, post};
    use serde_json::json;
    let etcd = start_etcd().await;
    let dir = tempfile::Builder::new()
        .prefix("switchyard-e2e-replicas-mcp-")
        .tempdir()
        .expect("temp dir");
    let shop_args = "\"--interactions\", \"--era\", \"2025-11-25\"";
    let servers = format!(
        "\n[[servers]]\nname = \"shop\"\ntransport = \"stdio\"\ncommand = {}\nargs = [{shop_args}]\n",
        toml_str(reference_server_bin().to_string_lossy())
    );
    let store = StoreKind::Etcd(etcd.url.clone());
    let mut configs = Vec::new();
    let mut bases = Vec::new();
    for name in ["a", "b"] {
        let (text, _, _) = config_text(dir.path(), &store, TTL_SECS, &servers);
        let port = switchyard_test_support::free_port();
        let path = dir.path().join(format!("replica-{name}.toml"));
        std::fs::write(
            &path,
            format!("{text}\n[mcp]\nlisten = \"127.0.0.1:{port}\"\n"),
        )
        .expect("write the config");
        configs.push(path);
        bases.push(format!("http://127.0.0.1:{port}"));
    }
    let (_replica_a, a) = replica("replica-a", dir.path(), &configs[0]).await;
    let (_replica_b, b) = replica("replica-b", dir.path(), &configs[1]).await;
    // The server's one sidecar registers with A; B routes to it.
    let _shop = sidecar_for("shop-via-a", dir.path(), &a, "shop", shop_args).await;
    for endpoint in [&a, &b] {
        let endpoint = endpoint.clone();
        eventually("the shop sidecar through both replicas", LIMIT, || {
            let endpoint = endpoint.clone();
            async move {
                match server_sidecars(&endpoint, "shop").await?.as_slice() {
                    [one] if one == "shop-via-a" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        })
        .await;
    }
    let form = json!({"contact_name": "Ada Lovelace", "email": "ada@example.com", "delivery_date": "2026-12-24",
        "quantity": 2, "shipping_speed": "express", "carrier": "ups", "notify_via": ["sms"]});
    let elicits = json!({"elicitation": {}});

    // 2026-07-28: asked through one replica, answered through the other.
    for (first_base, retry_base) in [(&bases[0], &bases[1]), (&bases[1], &bases[0])] {
        let tool = "shop__confirm_order_form";
        let first = eventually("an MCP call through the replica", LIMIT, || {
            let (base, caps) = (first_base.clone(), elicits.clone());
            async move {
                let r = modern_call(&base, "/mcp", tool, json!({}), caps, None).await;
                match r["result"]["resultType"].as_str() {
                    Some("input_required") => Ok(r),
                    _ => Err(r.to_string()),
                }
            }
        })
        .await;
        let (key, _) = one_question(&first);
        let state = first["result"]["requestState"].as_str().unwrap().to_owned();
        let done = modern_call(
            retry_base,
            "/mcp",
            tool,
            json!({}),
            elicits.clone(),
            Some((json!({key: {"action": "accept", "content": form}}), &state)),
        )
        .await;
        assert_eq!(done["result"]["resultType"], "complete", "{done}");
        assert_eq!(
            done["result"]["structuredContent"]["content"]["carrier"], "ups",
            "{done}"
        );
    }

    // 2025-11-25: the session opened on A is served by B, and its answer
    // POSTed to B reaches the call streaming on A.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "t", "version": "1"}}});
    let (status, h, _) = post(&bases[0], "/mcp", &JSON_HEADERS, init.to_string()).await;
    assert_eq!(status, 200);
    let sid = h["mcp-session-id"].to_str().unwrap().to_owned();
    let mut in_session: Vec<(&str, &str)> = JSON_HEADERS.to_vec();
    in_session.push(("mcp-session-id", &sid));
    in_session.push(("mcp-protocol-version", "2025-11-25"));
    let listed = eventually("the session through B", LIMIT, || {
        let (base, headers) = (bases[1].clone(), in_session.clone());
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
            match post(&base, "/mcp", &headers, body.to_string()).await {
                (200, _, r) if r["result"]["tools"].is_array() => Ok(r),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert!(
        listed.to_string().contains("shop__confirm_order_form"),
        "{listed}"
    );
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "shop__confirm_order_form", "arguments": {}}});
    let mut request = client()
        .post(format!("{}/mcp", bases[0]))
        .body(call.to_string());
    for (k, v) in &in_session {
        request = request.header(*k, *v);
    }
    let resp = request.send().await.expect("the call's stream");
    assert_eq!(resp.status(), 200);
    let mut stream = Sse::of(resp);
    let question = stream.next().await;
    assert_eq!(question["method"], "elicitation/create", "{question}");
    // An answer to a question this session was not asked is refused and
    // cancels nothing.
    let stray = json!({"jsonrpc": "2.0", "id": "sy-nope", "result": {"action": "cancel"}});
    let (status, _, r) = post(&bases[1], "/mcp", &in_session, stray.to_string()).await;
    assert_eq!(status, 400, "{r}");
    let says = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        says.starts_with("the answer to sy-nope: interaction \"nope\" not found"),
        "{r}"
    );
    let answer = json!({"jsonrpc": "2.0", "id": question["id"],
        "result": {"action": "accept", "content": form}});
    let (status, _, r) = post(&bases[1], "/mcp", &in_session, answer.to_string()).await;
    assert_eq!(status, 202, "{r}");
    let result = stream.next().await;
    assert_eq!(result["id"], 2, "{result}");
    assert_eq!(
        result["result"]["structuredContent"]["content"]["carrier"], "ups",
        "{result}"
    );
}

/// A session enabling `servers` in `mode`, created through `endpoint`.
async fn session_in(endpoint: &str, servers: &[&str], mode: pb::PermissionMode) -> String {
    engine(endpoint)
        .await
        .expect("engine")
        .create_session(pb::CreateSessionRequest {
            enabled_servers: servers.iter().map(|s| s.to_string()).collect(),
            permission_mode: mode as i32,
            roots: vec![],
        })
        .await
        .expect("CreateSession")
        .into_inner()
        .id
}

/// The session's interactions (resolved ones too) seen through `endpoint`,
/// by run id.
async fn cards_by_run(
    endpoint: &str,
    session: &str,
) -> Result<std::collections::HashMap<String, pb::Interaction>, String> {
    let listed = engine(endpoint)
        .await?
        .list_interactions(pb::ListInteractionsRequest {
            session_id: session.to_owned(),
            include_resolved: true,
        })
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    Ok(listed
        .interactions
        .into_iter()
        .map(|i| (i.run_id.clone(), i))
        .collect())
}

/// Waits until the card of `run` in `session` is listed through `endpoint`
/// and satisfies `ok`; returns it.
async fn wait_card(
    endpoint: &str,
    session: &str,
    run: &str,
    what: &str,
    limit: Duration,
    ok: fn(&pb::Interaction) -> bool,
) -> pb::Interaction {
    eventually(
        &format!("the card of {run}: {what}"),
        limit,
        || async move {
            match cards_by_run(endpoint, session).await?.remove(run) {
                Some(card) if ok(&card) => Ok(card),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

async fn answer(
    endpoint: &str,
    session: &str,
    id: &str,
    action: &str,
    content_json: &str,
) -> Result<pb::Interaction, tonic::Status> {
    engine(endpoint)
        .await
        .expect("engine")
        .answer_interaction(pb::AnswerInteractionRequest {
            session_id: session.to_owned(),
            interaction_id: id.to_owned(),
            action: action.to_owned(),
            content_json: content_json.to_owned(),
        })
        .await
        .map(|r| r.into_inner())
}

/// Issue 18, the replica-death case: an approval card whose call waits on
/// a replica that is killed (SIGKILL) is closed by the surviving replica
/// (`cancel`) once the dead replica's liveness lease expires, and an answer
/// to it is refused; nothing runs. The surviving replica's own approval
/// card, and a server's question relayed by a sidecar, stay open and are
/// answered normally; a replica frozen (SIGSTOP) for less than its lease
/// TTL keeps its card.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_card_is_closed_when_the_replica_its_call_waits_on_dies() {
    // Long enough that freezing B below (longer than a sweep) stays well
    // within it, even on a slow machine.
    const TTL: u64 = 10;
    const FROZEN: Duration = Duration::from_secs(3);
    let _heavy = HEAVY.lock().await;
    switchyard_test_support::init_tracing();
    let etcd = start_etcd().await;
    let dir = tempfile::Builder::new()
        .prefix("switchyard-e2e-replicas-cards-")
        .tempdir()
        .expect("temp dir");
    let reference = toml_str(reference_server_bin().to_string_lossy());
    let shop_args = "\"--interactions\", \"--era\", \"2025-11-25\"";
    let servers = format!(
        "\n[[servers]]\nname = \"orders\"\ntransport = \"stdio\"\ncommand = {reference}\nargs = [\"--era\", \"2026-07-28\"]\n\
         \n[[servers]]\nname = \"shop\"\ntransport = \"stdio\"\ncommand = {reference}\nargs = [{shop_args}]\n"
    );
    let store = StoreKind::Etcd(etcd.url.clone());
    let mut configs = Vec::new();
    for name in ["a", "b"] {
        let (text, _, _) = config_text(dir.path(), &store, TTL, &servers);
        let path = dir.path().join(format!("replica-{name}.toml"));
        std::fs::write(&path, text).expect("write the config");
        configs.push(path);
    }
    let (mut replica_a, a) = replica("replica-a", dir.path(), &configs[0]).await;
    let (replica_b, b) = replica("replica-b", dir.path(), &configs[1]).await;
    // Both sidecars register with B, which survives.
    let _orders = sidecar("orders-via-b", dir.path(), &b).await;
    let _shop = sidecar_for("shop-via-b", dir.path(), &b, "shop", shop_args).await;
    wait_sidecars(&a, &["orders-via-b"], LIMIT).await;
    for endpoint in [&a, &b] {
        let endpoint = endpoint.clone();
        eventually("the shop sidecar through both replicas", LIMIT, || {
            let endpoint = endpoint.clone();
            async move { server_sidecars(&endpoint, "shop").await.map(|_| ()) }
        })
        .await;
    }
    let ask = session_in(&b, &["orders"], pb::PermissionMode::Ask).await;
    let auto = session_in(&b, &["shop"], pb::PermissionMode::Auto).await;

    // ---- two approvals, one waiting on each replica; a server's question
    // (a form relayed by the shop's sidecar) through B.
    let create_order = |endpoint: &str, run: &str| {
        let (endpoint, run, session) = (endpoint.to_owned(), run.to_owned(), ask.clone());
        tokio::spawn(async move {
            let mut request = call_request(
                "orders__create_order",
                r#"{"customer_id":"C-1","items":[{"sku":"CABLE","quantity":1}]}"#,
                &session,
            );
            request.run_id = run;
            engine(&endpoint)
                .await
                .expect("engine")
                .call_tool(request)
                .await
        })
    };
    let call_a = create_order(&a, "run-a");
    let call_b = create_order(&b, "run-b");
    let call_form = {
        let (b, session) = (b.clone(), auto.clone());
        tokio::spawn(async move {
            let mut request = call_request("shop__confirm_order_form", "{}", &session);
            request.run_id = "run-form".into();
            engine(&b).await.expect("engine").call_tool(request).await
        })
    };
    let open = |c: &pb::Interaction| c.status == "open";
    let card_a = wait_card(&b, &ask, "run-a", "open", LIMIT, open).await;
    let card_b = wait_card(&b, &ask, "run-b", "open", LIMIT, open).await;
    let form = wait_card(&b, &auto, "run-form", "open", LIMIT, open).await;
    assert_eq!(card_a.kind, "approval", "{card_a:?}");
    assert_eq!(form.kind, "form", "{form:?}");

    // ---- B frozen for longer than a sweep but less than its lease: A's
    // sweeper leaves B's card alone.
    signal(replica_b.pid, nix::sys::signal::Signal::SIGSTOP);
    // The fault's duration, not an ordering wait.
    tokio::time::sleep(FROZEN).await;
    signal(replica_b.pid, nix::sys::signal::Signal::SIGCONT);

    // ---- A dies: its call fails with the connection, and B closes the
    // card that call waited on once A's lease has expired.
    signal(replica_a.pid, nix::sys::signal::Signal::SIGKILL);
    let _ = tokio::time::timeout(LIMIT, replica_a.child.wait()).await;
    let ended = tokio::time::timeout(LIMIT, call_a)
        .await
        .expect("the call through A ends")
        .expect("task");
    assert!(ended.is_err(), "the call through A: {ended:?}");
    let closed = wait_card(
        &b,
        &ask,
        "run-a",
        "closed",
        Duration::from_secs(TTL) + LIMIT,
        |c| c.status == "resolved",
    )
    .await;
    assert_eq!(closed.outcome, "cancel", "{closed:?}");
    // Its log line is written by the flusher thread (every 20 ms), maybe
    // after the card's close is visible: wait for it, bounded.
    eventually("B says why it closed the card", LIMIT, || {
        let log = replica_b.log();
        async move {
            match log.contains("is gone; cancelling it") {
                true => Ok(()),
                false => Err(log),
            }
        }
    })
    .await;
    let refused = answer(&b, &ask, &card_a.id, "approve", "")
        .await
        .expect_err("approving the closed card is refused");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );

    // ---- B's own approval and the server's question were left open and
    // are answered as usual.
    let cards = cards_by_run(&b, &ask).await.expect("list through B");
    assert_eq!(cards["run-b"].status, "open", "{cards:?}");
    let forms = cards_by_run(&b, &auto).await.expect("list through B");
    assert_eq!(forms["run-form"].status, "open", "{forms:?}");
    answer(&b, &ask, &card_b.id, "approve", "")
        .await
        .expect("approve B's card");
    let done = tokio::time::timeout(LIMIT, call_b)
        .await
        .expect("the call through B ends")
        .expect("task")
        .expect("CallTool through B")
        .into_inner();
    assert!(!done.is_error, "{}", done.result_json);
    let content = serde_json::json!({"contact_name": "Ada Lovelace", "email": "ada@example.com",
        "delivery_date": "2026-12-24", "quantity": 2, "shipping_speed": "express", "carrier": "ups",
        "notify_via": ["sms"]});
    answer(&b, &auto, &form.id, "accept", &content.to_string())
        .await
        .expect("accept the form");
    let done = tokio::time::timeout(LIMIT, call_form)
        .await
        .expect("the form's call ends")
        .expect("task")
        .expect("CallTool of the form")
        .into_inner();
    assert!(!done.is_error, "{}", done.result_json);
    assert!(done.structured_content_json.contains("ups"), "{done:?}");
}
