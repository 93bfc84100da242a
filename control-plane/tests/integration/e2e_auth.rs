//! Authentication and roles: `switchyard-control-plane` with `[auth]
//! required` and bearer tokens from files (`[[auth.tokens]]`), a real
//! sidecar that registers with its `sidecar` token, and the reference
//! server behind it.
//!
//! Covered: no token → UNAUTHENTICATED naming what is missing; a wrong
//! token → UNAUTHENTICATED; the engine token works on EngineService (a call
//! end to end) and is PERMISSION_DENIED on AdminService; the admin token
//! works on both; a session belongs to the engine that created it
//! (another engine gets NOT_FOUND on every RPC naming it and does not see
//! it listed; admins see it with its `owner`); the sidecar token only on
//! SidecarRegistry; each refusal
//! is counted in `switchyard_control_plane_auth_refusals_total` on
//! `/metrics` (which, like `/readyz`, needs no token); the CLI's
//! `--token-file` and `SWITCHYARD_TOKEN`; a sidecar token bound to a server
//! (`servers = [...]`) serves that server and is PERMISSION_DENIED for
//! another on Register, Report and Interact (`wrong_server`); an unknown
//! role, `servers` on an engine token and a missing token file stop the
//! binary with exit 64 naming the key; the sidecar's call port refuses
//! callers other than the control plane (UNAUTHENTICATED). Calls without
//! a session, and their background calls, belong to their caller.

use crate::common::*;
use std::path::Path;
use std::time::Duration;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::admin_service_client::AdminServiceClient;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient;
use switchyard_test_support::{fake_sidecar, free_port};
use tonic::Code;

const REFUSALS: &str = "switchyard_control_plane_auth_refusals_total";

fn token_file(dir: &Path, name: &str, token: &str) -> String {
    let file = dir.join(format!("{name}.token"));
    // A trailing newline, as `kubectl create secret --from-file` keeps it.
    std::fs::write(&file, format!("{token}\n")).unwrap();
    toml_str(file.to_string_lossy())
}

fn auth_config(dir: &Path, servers: &str) -> (String, u16, u16) {
    let (grpc, http) = (free_port(), free_port());
    let text = format!(
        r#"[control_plane]
listen = "127.0.0.1:{grpc}"
http_listen = "127.0.0.1:{http}"
sidecar_lease_ttl_sec = 5

[store]
path = {store}

[auth]
required = true

[[auth.tokens]]
name = "engine-a"
role = "engine"
token_file = {engine}

[[auth.tokens]]
name = "engine-b"
role = "engine"
token_file = {engine_b}

[[auth.tokens]]
name = "ops"
role = "admin"
token_file = {admin}

[[auth.tokens]]
name = "sidecars"
role = "sidecar"
token_file = {sidecar}

[[auth.tokens]]
name = "orders-sidecars"
role = "sidecar"
token_file = {orders_sidecar}
servers = ["orders"]
{servers}"#,
        store = toml_str(dir.join("store/store.redb").to_string_lossy()),
        engine = token_file(dir, "engine", "engine-token-1"),
        engine_b = token_file(dir, "engine-b", "engine-b-token-1"),
        admin = token_file(dir, "admin", "admin-token-1"),
        sidecar = token_file(dir, "sidecar", "sidecar-token-1"),
        orders_sidecar = token_file(dir, "orders-sidecar", "orders-sidecar-token-1"),
    );
    (text, grpc, http)
}

#[tokio::test]
async fn tokens_are_checked_and_roles_enforced() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let servers = format!("\n[[servers]]\n{}\n", reference_server_toml("orders"));
    let (text, grpc, _) = auth_config(dir.path(), &servers);
    let config = dir.path().join("cp.toml");
    std::fs::write(&config, text).unwrap();
    let (_cp, _, http) = start_control_plane("control-plane", dir.path(), &config).await;
    let endpoint = format!("http://127.0.0.1:{grpc}");
    let refusals = |service: &'static str, reason: &'static str| {
        let http = http.clone();
        async move { scrape(&http, REFUSALS, &[("service", service), ("reason", reason)]).await }
    };
    // Every series is there from the start.
    assert_eq!(refusals("engine", "missing_credentials").await, 0.0);
    assert_eq!(refusals("admin", "wrong_role").await, 0.0);

    // The sidecar registers with its token, one bound to `orders`.
    let sidecar_toml = format!(
        "control_plane = {}\ntoken_file = {}\nsidecar_id = \"orders-1\"\ngrace_secs = 2",
        toml_str(&endpoint),
        toml_str(dir.path().join("orders-sidecar.token").to_string_lossy()),
    );
    let (_sidecar, _, _) = start_sidecar(
        "sidecar",
        dir.path(),
        &reference_server_toml("orders"),
        &sidecar_toml,
    )
    .await;
    let ep = endpoint.clone();
    eventually("orders up", START_LIMIT, || {
        let ep = ep.clone();
        async move {
            let mut admin = AdminServiceClient::new(tls_channel(&ep, None, None).await?);
            let s = admin
                .get_server_status(bearer(
                    pb::GetServerStatusRequest {
                        name: "orders".into(),
                    },
                    "admin-token-1",
                ))
                .await
                .map_err(|e| format!("{e:?}"))?
                .into_inner();
            if s.state == "up" {
                Ok(())
            } else {
                Err(format!("{s:?}"))
            }
        }
    })
    .await;

    let channel = tls_channel(&endpoint, None, None).await.unwrap();
    let mut engine = EngineServiceClient::new(channel.clone());
    let mut admin = AdminServiceClient::new(channel.clone());

    // The sidecar's call port takes calls from the control plane only:
    // anyone else, with no token or another one, is refused before the
    // server sees anything.
    let status = admin
        .get_server_status(bearer(
            pb::GetServerStatusRequest {
                name: "orders".into(),
            },
            "admin-token-1",
        ))
        .await
        .unwrap()
        .into_inner();
    let calls_address = status.sidecars[0].call_address.clone();
    let mut calls = switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient::new(
        tls_channel(&calls_address, None, None).await.unwrap(),
    );
    let direct = || pb::SidecarCallRequest {
        params_json: r#"{"name":"create_order","arguments":{"customer_id":"C-1","items":[]}}"#
            .into(),
        ..Default::default()
    };
    let e = calls.call_tool(direct()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("no authorization header"), "{e:?}");
    for token in ["engine-token-1", "orders-sidecar-token-1", "admin-token-1"] {
        let e = calls.call_tool(bearer(direct(), token)).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
        assert!(
            e.message().contains("not the one this sidecar registered"),
            "{e:?}"
        );
    }
    let e = calls
        .read_resource(pb::SidecarRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");

    // No token.
    let e = engine
        .list_tools(pb::ListToolsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(
        e.message()
            .contains("EngineService requires authentication")
            && e.message().contains("no bearer token"),
        "{e:?}"
    );
    assert_eq!(refusals("engine", "missing_credentials").await, 1.0);

    // A wrong token, and a malformed header.
    let e = engine
        .list_tools(bearer(pb::ListToolsRequest::default(), "engine-token-2"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("not valid"), "{e:?}");
    let mut basic = tonic::Request::new(pb::ListToolsRequest::default());
    basic
        .metadata_mut()
        .insert("authorization", "Basic ZW5naW5l".parse().unwrap());
    let e = engine.list_tools(basic).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert_eq!(refusals("engine", "invalid_token").await, 2.0);

    // The engine token: a call end to end.
    let tools = engine
        .list_tools(bearer(pb::ListToolsRequest::default(), "engine-token-1"))
        .await
        .expect("ListTools with the engine token")
        .into_inner();
    assert!(
        tools.tools.iter().any(|t| t.name == "orders__get_order"),
        "{tools:?}"
    );
    let resp = engine
        .call_tool(bearer(
            call_request("orders__get_order", r#"{"order_id":"O-1001"}"#, ""),
            "engine-token-1",
        ))
        .await
        .expect("CallTool with the engine token")
        .into_inner();
    assert!(
        resp.structured_content_json.contains("O-1001"),
        "{}",
        resp.result_json
    );

    // The engine token on the admin API: wrong role.
    let e = admin
        .list_servers(bearer(pb::ListServersRequest {}, "engine-token-1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(
        e.message().contains("\"engine-a\"") && e.message().contains("needs role admin"),
        "{e:?}"
    );
    assert_eq!(refusals("admin", "wrong_role").await, 1.0);

    // The admin token: admin API and engine API (the CLI's sessions).
    admin
        .list_servers(bearer(pb::ListServersRequest {}, "admin-token-1"))
        .await
        .expect("ListServers with the admin token");
    engine
        .create_session(bearer(
            pb::CreateSessionRequest {
                enabled_servers: vec!["orders".into()],
                permission_mode: pb::PermissionMode::Auto as i32,
                roots: vec![],
            },
            "admin-token-1",
        ))
        .await
        .expect("CreateSession with the admin token");

    // Sessions belong to the engine that created them: another engine
    // cannot see or use them (NOT_FOUND, as for no session at all); the
    // owner and admins can.
    fn a<T>(m: T) -> tonic::Request<T> {
        bearer(m, "engine-token-1")
    }
    fn b<T>(m: T) -> tonic::Request<T> {
        bearer(m, "engine-b-token-1")
    }
    let mine = engine
        .create_session(a(pb::CreateSessionRequest {
            enabled_servers: vec!["orders".into()],
            permission_mode: pb::PermissionMode::Auto as i32,
            roots: vec![],
        }))
        .await
        .expect("CreateSession as engine-a")
        .into_inner();
    assert_eq!(mine.owner, "engine-a");
    let sid = mine.id.clone();
    let not_found = |e: tonic::Status| {
        assert_eq!(e.code(), Code::NotFound, "{e:?}");
        assert_eq!(e.message(), format!("session {sid:?} not found"), "{e:?}");
    };
    let get = |id: &str| pb::GetSessionRequest {
        session_id: id.into(),
    };
    not_found(engine.get_session(b(get(&sid))).await.unwrap_err());
    not_found(
        engine
            .update_session(b(pb::UpdateSessionRequest {
                session_id: sid.clone(),
                ..Default::default()
            }))
            .await
            .unwrap_err(),
    );
    not_found(
        engine
            .call_tool(b(call_request(
                "orders__get_order",
                r#"{"order_id":"O-1001"}"#,
                &sid,
            )))
            .await
            .unwrap_err(),
    );
    not_found(
        engine
            .list_tools(b(pb::ListToolsRequest {
                session_id: sid.clone(),
            }))
            .await
            .unwrap_err(),
    );
    not_found(
        engine
            .subscribe_events(b(pb::SubscribeEventsRequest {
                session_id: sid.clone(),
                ..Default::default()
            }))
            .await
            .unwrap_err(),
    );
    not_found(
        engine
            .list_interactions(b(pb::ListInteractionsRequest {
                session_id: sid.clone(),
                ..Default::default()
            }))
            .await
            .unwrap_err(),
    );
    not_found(
        engine
            .cancel_call(b(pb::CancelCallRequest {
                session_id: sid.clone(),
                call_id: "c-1".into(),
            }))
            .await
            .unwrap_err(),
    );
    not_found(
        engine
            .delete_session(b(pb::DeleteSessionRequest {
                session_id: sid.clone(),
            }))
            .await
            .unwrap_err(),
    );
    let listed = |resp: pb::ListSessionsResponse| -> Vec<(String, String)> {
        resp.sessions.into_iter().map(|s| (s.id, s.owner)).collect()
    };
    let of_b = listed(
        engine
            .list_sessions(b(pb::ListSessionsRequest {}))
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(!of_b.iter().any(|(id, _)| *id == sid), "{of_b:?}");
    let of_a = listed(
        engine
            .list_sessions(a(pb::ListSessionsRequest {}))
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(of_a.contains(&(sid.clone(), "engine-a".into())), "{of_a:?}");
    let of_admin = listed(
        engine
            .list_sessions(bearer(pb::ListSessionsRequest {}, "admin-token-1"))
            .await
            .unwrap()
            .into_inner(),
    );
    assert!(
        of_admin.contains(&(sid.clone(), "engine-a".into())),
        "{of_admin:?}"
    );
    // The owner calls in its session; the session is still there.
    let resp = engine
        .call_tool(a(call_request(
            "orders__get_order",
            r#"{"order_id":"O-1001"}"#,
            &sid,
        )))
        .await
        .expect("a call in its own session")
        .into_inner();
    assert!(resp.structured_content_json.contains("O-1001"), "{resp:?}");
    engine
        .get_session(bearer(get(&sid), "admin-token-1"))
        .await
        .expect("admins see every session");
    // Its background calls too: `list_orders` moves to the background at
    // once, in engine-a's session.
    admin
        .set_tool_policy(bearer(
            pb::SetToolPolicyRequest {
                server: "orders".into(),
                tool: "list_orders".into(),
                policy: "default".into(),
                background: "always".into(),
            },
            "admin-token-1",
        ))
        .await
        .expect("background: always");
    let moved = engine
        .call_tool(a(call_request("orders__list_orders", "{}", &sid)))
        .await
        .expect("a call that moves to the background")
        .into_inner()
        .background
        .expect("moved to the background");
    assert!(
        background_ids(&engine, "engine-token-1")
            .await
            .contains(&moved.id)
    );
    assert!(
        background_ids(&engine, "admin-token-1")
            .await
            .contains(&moved.id)
    );
    assert!(
        !background_ids(&engine, "engine-b-token-1")
            .await
            .contains(&moved.id)
    );
    let by_id = |id: &str| pb::GetBackgroundCallRequest {
        id: id.into(),
        session_id: String::new(),
    };
    let e = engine
        .get_background_call(b(by_id(&moved.id)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = engine
        .cancel_background_call(b(pb::CancelBackgroundCallRequest {
            id: moved.id.clone(),
            session_id: String::new(),
        }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = engine
        .list_background_calls(b(pb::ListBackgroundCallsRequest {
            session_id: sid.clone(),
            include_finished: true,
            ..Default::default()
        }))
        .await
        .unwrap_err();
    not_found(e);
    engine
        .get_background_call(a(by_id(&moved.id)))
        .await
        .expect("the owner sees its background call");

    // The sidecar token only opens the sidecar registry.
    let e = engine
        .list_tools(bearer(pb::ListToolsRequest::default(), "sidecar-token-1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert_eq!(refusals("engine", "wrong_role").await, 1.0);
    let mut registry = SidecarRegistryClient::new(channel.clone());
    // An intruder's requests, as test support's fake sidecar makes them.
    let register = || fake_sidecar::register_request("orders", "intruder", "http://127.0.0.1:1");
    let e = registry.register(register()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let e = registry
        .register(bearer(register(), "engine-token-1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert_eq!(
        refusals("sidecar_registry", "missing_credentials").await,
        1.0
    );
    assert_eq!(refusals("sidecar_registry", "wrong_role").await, 1.0);
    // No refusal ever hit the real sidecar.
    assert_eq!(refusals("sidecar_registry", "invalid_token").await, 0.0);
    assert_eq!(refusals("sidecar_registry", "wrong_server").await, 0.0);

    // A sidecar token bound to `orders` acts for no other server: not to
    // register, not on the report stream, not to relay an interaction.
    let bound = "orders-sidecar-token-1";
    let billing = fake_sidecar::register_request("billing", "intruder", "http://127.0.0.1:1");
    let e = registry.register(bearer(billing, bound)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert_eq!(
        e.message(),
        "sidecar credential \"orders-sidecars\" is bound to the servers [\"orders\"]; it may not act for server \"billing\""
    );
    let hello = fake_sidecar::hello("billing", "intruder");
    let e = registry
        .report(bearer(tokio_stream::iter(vec![hello]), bound))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("\"billing\""), "{e:?}");
    let e = registry
        .interact(bearer(
            pb::InteractRequest {
                server: "billing".into(),
                ..Default::default()
            },
            bound,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert_eq!(refusals("sidecar_registry", "wrong_server").await, 3.0);
    // The same token still serves its own server: `orders` answers.
    let resp = engine
        .call_tool(bearer(
            call_request("orders__get_order", r#"{"order_id":"O-1001"}"#, ""),
            "engine-token-1",
        ))
        .await
        .expect("a call to orders, whose sidecar has the bound token")
        .into_inner();
    assert!(resp.structured_content_json.contains("O-1001"), "{resp:?}");

    // Health needs no token.
    assert_eq!(http_get(&http, "/readyz").await.0, 200);

    // The CLI: --token-file, SWITCHYARD_TOKEN, and nothing.
    let out = tokio::process::Command::new(switchyard_bin())
        .args(["--endpoint", &endpoint, "--token-file"])
        .arg(dir.path().join("admin.token"))
        .args(["servers", "list"])
        .output()
        .await
        .unwrap();
    let listed = ok_stdout(&out, "servers list --token-file");
    assert!(listed.contains("orders"), "{listed}");
    let out = tokio::process::Command::new(switchyard_bin())
        .args(["--endpoint", &endpoint, "tools"])
        .env("SWITCHYARD_TOKEN", "engine-token-1")
        .output()
        .await
        .unwrap();
    let listed = ok_stdout(&out, "tools with SWITCHYARD_TOKEN");
    assert!(listed.contains("orders__get_order"), "{listed}");
    let out = cli(&endpoint, &["servers", "list"]).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unauthenticated"), "{err}");
}

/// Calls made without a session belong to the principal that made them:
/// the same `call_id` may run for two engines at once, `CancelCall` by
/// that id cancels the caller's own call only, and a background call made
/// without a session is listed, read and cancelled by its engine and
/// admins only (another engine gets NOT_FOUND, as for no call at all).
#[tokio::test]
async fn calls_without_a_session_belong_to_their_caller() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let server = format!(
        "name = \"orders\"\ntransport = \"stdio\"\ncommand = {}\nargs = [\"--era\", \"2026-07-28\", \"--tasks\"]",
        toml_str(switchyard_test_support::reference_server_bin().to_string_lossy()),
    );
    let (text, grpc, _) = auth_config(dir.path(), &format!("\n[[servers]]\n{server}\n"));
    let config = dir.path().join("cp.toml");
    std::fs::write(&config, text).unwrap();
    let (_cp, _, _) = start_control_plane("control-plane", dir.path(), &config).await;
    let endpoint = format!("http://127.0.0.1:{grpc}");
    let sidecar_toml = format!(
        "control_plane = {}\ntoken_file = {}\nsidecar_id = \"orders-1\"\ngrace_secs = 2",
        toml_str(&endpoint),
        toml_str(dir.path().join("orders-sidecar.token").to_string_lossy()),
    );
    let (_sidecar, _, _) = start_sidecar("sidecar", dir.path(), &server, &sidecar_toml).await;
    let channel = tls_channel(&endpoint, None, None).await.unwrap();
    let engine = EngineServiceClient::new(channel.clone());
    let ep = engine.clone();
    eventually("orders' tools listed", START_LIMIT, || {
        let mut ep = ep.clone();
        async move {
            let tools = ep
                .list_tools(bearer(pb::ListToolsRequest::default(), "engine-token-1"))
                .await
                .map_err(|e| format!("{e:?}"))?
                .into_inner();
            tools
                .tools
                .iter()
                .any(|t| t.name == "orders__task_sleep")
                .then_some(())
                .ok_or_else(|| format!("{tools:?}"))
        }
    })
    .await;
    let sleep = |ms: u64, token: &'static str| {
        let mut engine = engine.clone();
        async move {
            let mut r = call_request("orders__task_sleep", &format!("{{\"ms\":{ms}}}"), "");
            r.call_id = "same-id".into();
            r.foreground = true;
            engine.call_tool(bearer(r, token)).await
        }
    };
    // Both engines run a call with the same id: no ALREADY_EXISTS.
    let a_call = tokio::spawn(sleep(3000, "engine-token-1"));
    let b_call = tokio::spawn(sleep(3000, "engine-b-token-1"));
    let cancel = |token: &'static str| {
        let mut engine = engine.clone();
        async move {
            engine
                .cancel_call(bearer(
                    pb::CancelCallRequest {
                        session_id: String::new(),
                        call_id: "same-id".into(),
                    },
                    token,
                ))
                .await
                .unwrap()
                .into_inner()
                .cancelled
        }
    };
    // engine-b cancels "same-id": its own call (here or, if it has not
    // started yet, through the store when it does).
    tokio::time::sleep(Duration::from_millis(500)).await;
    cancel("engine-b-token-1").await;
    let e = b_call.await.unwrap().unwrap_err();
    assert_eq!(e.code(), Code::Cancelled, "{e:?}");
    // Again, while engine-a's call with that id still runs: nothing of
    // engine-b's runs, so nothing is cancelled.
    assert!(!cancel("engine-b-token-1").await);
    let done = a_call.await.unwrap().expect("engine-a's call ends well");
    assert!(
        done.into_inner().structured_content_json.contains("3000"),
        "engine-a's call finished"
    );

    // A background call without a session.
    let mut r = call_request("orders__task_sleep", r#"{"ms":60000}"#, "");
    r.background = true;
    let moved = engine
        .clone()
        .call_tool(bearer(r, "engine-token-1"))
        .await
        .expect("a call that moves to the background")
        .into_inner()
        .background
        .expect("moved to the background");
    let by_id = || pb::GetBackgroundCallRequest {
        id: moved.id.clone(),
        session_id: String::new(),
    };
    let mut engine = engine.clone();
    let got = engine
        .get_background_call(bearer(by_id(), "engine-token-1"))
        .await
        .expect("its engine reads it")
        .into_inner();
    assert_eq!(got.principal, "engine-a");
    engine
        .get_background_call(bearer(by_id(), "admin-token-1"))
        .await
        .expect("admins read it");
    let e = engine
        .get_background_call(bearer(by_id(), "engine-b-token-1"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(
        background_ids(&engine, "engine-token-1")
            .await
            .contains(&moved.id)
    );
    assert!(
        background_ids(&engine, "admin-token-1")
            .await
            .contains(&moved.id)
    );
    assert!(
        !background_ids(&engine, "engine-b-token-1")
            .await
            .contains(&moved.id)
    );
    let cancel_bg = |token: &'static str| {
        let mut engine = engine.clone();
        let id = moved.id.clone();
        async move {
            engine
                .cancel_background_call(bearer(
                    pb::CancelBackgroundCallRequest {
                        id,
                        session_id: String::new(),
                    },
                    token,
                ))
                .await
        }
    };
    let e = cancel_bg("engine-b-token-1").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let cancelled = cancel_bg("engine-token-1")
        .await
        .expect("its engine cancels it")
        .into_inner();
    assert_eq!(cancelled.status, "cancelled", "{cancelled:?}");
}

#[tokio::test]
async fn bad_auth_settings_exit_64_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let run = |text: String| {
        let config = dir.path().join("cp.toml");
        std::fs::write(&config, text).unwrap();
        async move {
            let out = tokio::process::Command::new(control_plane_bin())
                .arg("--config")
                .arg(&config)
                .output();
            let out = tokio::time::timeout(LIMIT, out).await.unwrap().unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
    };
    let (text, _, _) = auth_config(dir.path(), "");
    // An unknown role.
    let (code, err) = run(text.replacen("role = \"admin\"", "role = \"operator\"", 1)).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("auth.tokens[2].role") && err.contains("operator") && err.contains("cp.toml"),
        "{err}"
    );
    // A token file that is not there.
    std::fs::remove_file(dir.path().join("sidecar.token")).unwrap();
    let (code, err) = run(text.clone()).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("auth.tokens[3].token_file") && err.contains("sidecar.token"),
        "{err}"
    );
    // An empty token file.
    std::fs::write(dir.path().join("sidecar.token"), "\n").unwrap();
    let (code, err) = run(text.clone()).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("auth.tokens[3].token_file") && err.contains("empty"),
        "{err}"
    );
    // `servers` on a credential that is not a sidecar's.
    let (code, err) = run(text.replacen(
        "role = \"engine\"\n",
        "role = \"engine\"\nservers = [\"orders\"]\n",
        1,
    ))
    .await;
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("auth.tokens[0].servers") && err.contains("only a credential of role"),
        "{err}"
    );
    // A name that is not a server name (a stray space).
    let (code, err) =
        run(text.replacen("servers = [\"orders\"]", "servers = [\"orders \"]", 1)).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("auth.tokens[4].servers[0]")
            && err.contains("\"orders \" is not a server name"),
        "{err}"
    );
    // Two entries with one token.
    std::fs::write(dir.path().join("sidecar.token"), "admin-token-1").unwrap();
    let (code, err) = run(text.clone()).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("same token"), "{err}");
    std::fs::write(dir.path().join("sidecar.token"), "sidecar-token-1").unwrap();
    // An encryption key of the wrong size; then a good one (base64).
    let key = dir.path().join("enc.key");
    std::fs::write(&key, "c2hvcnQ=\n").unwrap();
    let with_key = text.replacen(
        "[store]\n",
        &format!(
            "[store]\ntoken_encryption_key_file = {}\n",
            toml_str(key.to_string_lossy())
        ),
        1,
    );
    let (code, err) = run(with_key.clone()).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("store.token_encryption_key_file") && err.contains("32-byte"),
        "{err}"
    );
    std::fs::write(&key, "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n").unwrap();
    let config = dir.path().join("ok.toml");
    std::fs::write(&config, with_key).unwrap();
    let out = tokio::process::Command::new(control_plane_bin())
        .arg("--config")
        .arg(&config)
        .arg("--check")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // Required without any identity.
    let (code, err) = run(format!(
        "[control_plane]\nlisten = \"127.0.0.1:{}\"\n[auth]\nrequired = true\n",
        free_port()
    ))
    .await;
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("auth.required"), "{err}");
}

/// The ids of the background calls (finished ones too) that `token` may
/// list.
async fn background_ids(
    engine: &EngineServiceClient<tonic::transport::Channel>,
    token: &str,
) -> Vec<String> {
    engine
        .clone()
        .list_background_calls(bearer(
            pb::ListBackgroundCallsRequest {
                include_finished: true,
                ..Default::default()
            },
            token,
        ))
        .await
        .unwrap()
        .into_inner()
        .calls
        .into_iter()
        .map(|c| c.id)
        .collect()
}
