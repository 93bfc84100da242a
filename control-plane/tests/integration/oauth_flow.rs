//! Stage D, the authorization an admin starts, against a mock
//! authorization server that speaks real HTTP and real PKCE
//! (`tests/peers/servers/oauth_as.py`) and a protected MCP server
//! (`http_stub.py` with `STUB_HTTP_OAUTH_AS`), with control-plane
//! replicas in this process:
//!
//! - discovery, Dynamic Client Registration, PKCE S256 and `resource`;
//!   the browser's round trip through `/admin/v1/mcp/oauth/callback`; a
//!   callback used twice is refused;
//! - refresh before expiry with rotation, every rotated token used once;
//! - revocation turns the server to `needs_reauthorization`, and a new
//!   authorization reuses the registered client; of two authorizations
//!   started, only the newer finishes; forgetting revokes the grant
//!   (RFC 7009) and generations never go back;
//! - two replicas on a real etcd refresh one server: one refresh at a
//!   time, never a replayed refresh token;
//! - refusals: an authorization server that does not advertise PKCE
//!   (unless overridden), a wrong RFC 9207 `iss`, one that rejects the
//!   `resource` parameter, and a resource metadata naming another
//!   resource.

use crate::common::oauth::*;
use crate::common::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;
use switchyard_control_plane::config::Config;
use switchyard_control_plane::server::{self, Running};
use switchyard_proto::v1 as pb;
use switchyard_test_support::{start_etcd, start_http_server, stub_script};
use tokio::process::Command;

/// Writes `NAME.toml` in `dir`: free ports, a token encryption key in
/// `dir`, `store`, and `servers` (`[[servers]]` tables). Answers the file
/// and its gRPC port.
fn write_config(dir: &Path, name: &str, store: &StoreKind, servers: &str) -> (PathBuf, u16) {
    let key = dir.join("token.key");
    if !key.exists() {
        std::fs::write(&key, [42u8; 32]).unwrap();
    }
    let store_extra = format!(
        "token_encryption_key_file = {}\n{servers}",
        toml_str(key.to_string_lossy())
    );
    let (text, grpc, _) = config_text(dir, store, 2, &store_extra);
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    (path, grpc)
}

/// A replica in this process on the embedded store of a new temporary
/// directory, with `servers`; answers the directory (keep it), the
/// replica and its gRPC endpoint.
async fn embedded_replica(servers: &str) -> (tempfile::TempDir, Running, String) {
    let dir = tempfile::tempdir().unwrap();
    let r = replica(dir.path(), "a", &StoreKind::Embedded, servers).await;
    let ep = format!("http://{}", r.grpc_addr);
    (dir, r, ep)
}

/// A replica in this process on [`write_config`]'s file.
async fn replica(dir: &Path, name: &str, store: &StoreKind, servers: &str) -> Running {
    let (path, _) = write_config(dir, name, store, servers);
    let config = Config::load(&path).expect("a valid config");
    server::start(&config, true).await.expect("replica starts")
}

fn oauth_server(url: &str, more: &str) -> String {
    format!(
        "[[servers]]\nname = \"stub\"\ntransport = \"http\"\nurl = {}\nauth = \"oauth\"\n{more}",
        toml_str(url)
    )
}

async fn oauth_status(endpoint: &str) -> pb::OAuthStatus {
    admin(endpoint)
        .await
        .unwrap()
        .get_server_status(pb::GetServerStatusRequest {
            name: "stub".into(),
        })
        .await
        .expect("GetServerStatus")
        .into_inner()
        .oauth
        .expect("an oauth server has an oauth status")
}

async fn authorize(endpoint: &str) -> Result<pb::AuthorizeServerResponse, tonic::Status> {
    admin(endpoint)
        .await
        .unwrap()
        .authorize_server(pb::AuthorizeServerRequest {
            name: "stub".into(),
            scopes: vec![],
        })
        .await
        .map(|r| r.into_inner())
}

fn param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_admin_authorizes_a_server_and_its_tokens_refresh_rotate_and_get_revoked() {
    let as_ = start_as(&[("OAUTH_AS_TOKEN_TTL", "3")]).await;
    let issuer = as_.url.trim_end_matches('/').to_owned();
    let stub = start_protected(&issuer).await;
    let (_dir, r, ep) = embedded_replica(&oauth_server(&stub.url, "")).await;

    let before = oauth_status(&ep).await;
    assert_eq!(before.state, "needs_authorization");
    assert_eq!(before.generation, 0);

    let started = authorize(&ep).await.expect("AuthorizeServer");
    assert_eq!(started.issuer, issuer);
    assert_eq!(started.registration, "dynamic");
    let url = &started.authorization_url;
    assert!(url.starts_with(&format!("{issuer}/authorize?")), "{url}");
    assert_eq!(param(url, "code_challenge_method").as_deref(), Some("S256"));
    assert_eq!(param(url, "resource").as_deref(), Some(stub.url.as_str()));
    // The challenge's scope (the stub's `mcp:read`); the authorization
    // server lists offline_access, so it is asked for too.
    let scope = param(url, "scope").unwrap_or_default();
    assert!(scope.split(' ').any(|s| s == "mcp:read"), "{scope}");
    assert!(scope.split(' ').any(|s| s == "offline_access"), "{scope}");
    let redirect = param(url, "redirect_uri").unwrap();
    assert_eq!(
        redirect,
        format!("http://{}/admin/v1/mcp/oauth/callback", r.http_addr)
    );

    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let to_callback = client.get(url).send().await.unwrap();
    let location = to_callback.headers()["location"]
        .to_str()
        .unwrap()
        .to_owned();
    let (code, page) = callback(&location).await;
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("stub is authorized"), "{page}");

    let st = oauth_status(&ep).await;
    assert_eq!(st.state, "authorized", "{st:?}");
    assert_eq!(st.issuer, issuer);
    assert!(st.refreshable);
    assert_eq!(st.generation, 1);
    assert!(st.expires_at_ms > 0);
    let stats = get_json(&format!("{issuer}/_stats")).await;
    assert_eq!(stats["registrations"], 1, "{stats}");
    assert_eq!(stats["token_requests"]["authorization_code"], 1, "{stats}");
    let reg = &stats["last_registration"];
    assert_eq!(reg["application_type"], "native", "{reg}");
    assert!(
        reg["grant_types"]
            .as_array()
            .is_some_and(|g| g.contains(&json!("refresh_token"))),
        "{reg}"
    );
    assert_eq!(
        stats["last_token"]["resource"],
        stub.url.as_str(),
        "{stats}"
    );

    // The same callback again: the state was used.
    let (code, page) = callback(&location).await;
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("already used"), "{page}");

    // Tokens of 3 s are refreshed at 80 % of their lifetime, each
    // rotated refresh token used once.
    eventually("two refreshes", LIMIT, || {
        let ep = ep.clone();
        async move {
            let st = oauth_status(&ep).await;
            (st.generation >= 3 && st.refreshed_at_ms > 0)
                .then_some(())
                .ok_or(format!("{st:?}"))
        }
    })
    .await;
    let stats = get_json(&format!("{issuer}/_stats")).await;
    assert_eq!(stats["reuse_detected"], 0, "{stats}");
    assert_eq!(stats["invalid_grant"], 0, "{stats}");
    assert!(
        stats["token_requests"]["refresh_token"].as_u64().unwrap() >= 2,
        "{stats}"
    );
    for t in stats["token_log"].as_array().unwrap() {
        assert_eq!(t["resource"], stub.url.as_str(), "{t}");
    }

    // The token endpoint fails for a while: once the token has expired,
    // the status says so; the next refresh that works clears it.
    control(
        &issuer,
        json!({"fail_refresh": {"status": 503, "count": 1000}}),
    )
    .await;
    let st = eventually("the failing refresh shows", LIMIT, || {
        let ep = ep.clone();
        async move {
            let st = oauth_status(&ep).await;
            st.reason
                .contains("refreshing it keeps failing")
                .then(|| st.clone())
                .ok_or(format!("{st:?}"))
        }
    })
    .await;
    assert_eq!(st.state, "authorized", "{st:?}");
    control(
        &issuer,
        json!({"fail_refresh": {"status": 503, "count": 0}}),
    )
    .await;
    eventually("the refresh recovers", LIMIT, || {
        let ep = ep.clone();
        let generation = st.generation;
        async move {
            let now = oauth_status(&ep).await;
            (now.generation > generation && now.reason.is_empty())
                .then_some(())
                .ok_or(format!("{now:?}"))
        }
    })
    .await;

    // Revoked: the next refresh is refused, and the server needs an admin.
    control(&issuer, json!({"revoke_all": true})).await;
    let st = eventually("needs re-authorization", LIMIT, || {
        let ep = ep.clone();
        async move {
            let st = oauth_status(&ep).await;
            (st.state == "needs_reauthorization")
                .then(|| st.clone())
                .ok_or(format!("{st:?}"))
        }
    })
    .await;
    assert!(st.reason.contains("rejected the refresh token"), "{st:?}");

    // Authorized again with the same registered client. Of two
    // authorizations started, only the newer one can finish.
    let older = authorize(&ep).await.expect("AuthorizeServer");
    let again = authorize(&ep).await.expect("AuthorizeServer again");
    let (code, page) = browse(&older.authorization_url).await;
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("unknown, expired or already used"), "{page}");
    let (code, page) = browse(&again.authorization_url).await;
    assert_eq!(code, 200, "{page}");
    let st = oauth_status(&ep).await;
    assert_eq!(st.state, "authorized", "{st:?}");
    let stats = get_json(&format!("{issuer}/_stats")).await;
    assert_eq!(stats["registrations"], 1, "{stats}");

    // Forgotten.
    let forgotten = admin(&ep)
        .await
        .unwrap()
        .forget_server_authorization(pb::ForgetServerAuthorizationRequest {
            name: "stub".into(),
        })
        .await
        .expect("ForgetServerAuthorization")
        .into_inner();
    let forgotten = forgotten.oauth.unwrap();
    assert_eq!(forgotten.state, "needs_authorization");
    // The grant was revoked at the authorization server (RFC 7009).
    let stats = get_json(&format!("{issuer}/_stats")).await;
    assert_eq!(stats["families"], 0, "{stats}");
    // Generations never go back: sidecars report refusals per generation.
    let before = oauth_status(&ep).await.generation.max(st.generation);
    let after = authorize(&ep).await.expect("AuthorizeServer after forget");
    let (code, page) = browse(&after.authorization_url).await;
    assert_eq!(code, 200, "{page}");
    let st = oauth_status(&ep).await;
    assert_eq!(st.state, "authorized");
    assert!(st.generation > before, "{st:?} after {before}");

    // Removed and added again, at the same URL: a new server, with
    // nothing of the old one's grant (revoked at the authorization server).
    let mut adm = admin(&ep).await.unwrap();
    let spec = adm
        .get_server_status(pb::GetServerStatusRequest {
            name: "stub".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .spec;
    adm.remove_server(pb::RemoveServerRequest {
        name: "stub".into(),
    })
    .await
    .expect("RemoveServer");
    let stats = get_json(&format!("{issuer}/_stats")).await;
    assert_eq!(stats["families"], 0, "{stats}");
    let added = adm
        .add_server(pb::AddServerRequest { spec })
        .await
        .expect("AddServer")
        .into_inner();
    assert_eq!(added.oauth.unwrap().state, "needs_authorization");
    r.stop(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_refuses_every_token_gets_paced_refreshes_not_one_per_call() {
    let as_ = start_as(&[]).await;
    let issuer = as_.url.trim_end_matches('/').to_owned();
    let stub = start_protected(&issuer).await;
    let (_dir, r, ep) = embedded_replica(&oauth_server(&stub.url, "")).await;
    let started = authorize(&ep).await.expect("AuthorizeServer");
    let (code, page) = browse(&started.authorization_url).await;
    assert_eq!(code, 200, "{page}");
    let sidecar = switchyard_test_support::fake_sidecar::FakeSidecar::of(&ep, "sc")
        .server("stub")
        .start()
        .await;
    // For 6 s, every token is refused as soon as it is the current one,
    // as a sidecar's calls to a server that refuses them all report it
    // (a 401 per call). Tokens last an hour: no refresh is due otherwise.
    let until = std::time::Instant::now() + Duration::from_secs(6);
    while std::time::Instant::now() < until {
        let generation = oauth_status(&ep).await.generation;
        sidecar
            .report(pb::SidecarReport {
                report: Some(pb::sidecar_report::Report::TokenRejected(
                    pb::TokenRejected {
                        generation,
                        http_status: 401,
                        www_authenticate: "Bearer error=\"invalid_token\"".into(),
                    },
                )),
            })
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Paced: at once, then 1 s and 2 s later (the next would wait 4 s).
    let stats = get_json(&format!("{issuer}/_stats")).await;
    let refreshes = stats["token_requests"]["refresh_token"].as_u64().unwrap();
    assert!(
        (2..=4).contains(&refreshes),
        "{refreshes} refreshes: {}",
        stats["token_requests"]
    );
    let st = oauth_status(&ep).await;
    assert_eq!(st.state, "authorized", "{st:?}");
    assert_eq!(st.generation, refreshes + 1, "{st:?}");
    drop(sidecar);
    r.stop(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_on_etcd_refresh_one_server_without_replaying_a_token() {
    let etcd = start_etcd().await;
    let store = StoreKind::Etcd(format!("http://127.0.0.1:{}", etcd.client_port()));
    let as_ = start_as(&[("OAUTH_AS_TOKEN_TTL", "2")]).await;
    let issuer = as_.url.trim_end_matches('/').to_owned();
    let stub = start_protected(&issuer).await;
    let dir = tempfile::tempdir().unwrap();
    let servers = oauth_server(&stub.url, "");
    let a = replica(dir.path(), "a", &store, &servers).await;
    let b = replica(dir.path(), "b", &store, &servers).await;
    let (ea, eb) = (
        format!("http://{}", a.grpc_addr),
        format!("http://{}", b.grpc_addr),
    );
    // Started on one replica, finished on the other's callback.
    let started = authorize(&ea).await.expect("AuthorizeServer");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = client.get(&started.authorization_url).send().await.unwrap();
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let on_b = location.replace(&a.http_addr.to_string(), &b.http_addr.to_string());
    assert_ne!(on_b, location);
    let (code, page) = callback(&on_b).await;
    assert_eq!(code, 200, "{page}");
    assert_eq!(oauth_status(&ea).await.state, "authorized");

    // About five lifetimes of 2 s, both replicas refreshing.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let st = oauth_status(&eb).await;
    assert_eq!(st.state, "authorized", "{st:?}");
    let stats = get_json(&format!("{issuer}/_stats")).await;
    let refreshes = stats["token_requests"]["refresh_token"].as_u64().unwrap();
    assert!(refreshes >= 3, "{stats}");
    assert_eq!(stats["reuse_detected"], 0, "{stats}");
    assert_eq!(stats["invalid_grant"], 0, "{stats}");
    // Every refresh made a generation: none was lost.
    assert_eq!(st.generation, refreshes + 1, "{stats}");
    // Both replicas took part, or at least one did without the other
    // replaying: the refresh counters of both add up.
    let m = |r: &Running| r.http_addr.to_string();
    let ok_a = scrape(
        &m(&a),
        "switchyard_control_plane_oauth_refreshes_total",
        &[("server", "stub"), ("outcome", "ok")],
    )
    .await;
    let ok_b = scrape(
        &m(&b),
        "switchyard_control_plane_oauth_refreshes_total",
        &[("server", "stub"), ("outcome", "ok")],
    )
    .await;
    assert_eq!(
        (ok_a + ok_b) as u64,
        refreshes,
        "a {ok_a}, b {ok_b}: {stats}"
    );
    a.stop(Duration::from_secs(2)).await;
    b.stop(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unsafe_or_unusable_authorization_servers_are_refused() {
    // No code_challenge_methods_supported: refused, unless overridden.
    let as_ = start_as(&[("OAUTH_AS_OMIT_PKCE_METHODS", "1")]).await;
    let issuer = as_.url.trim_end_matches('/').to_owned();
    let stub = start_protected(&issuer).await;
    let (_dir, r, ep) = embedded_replica(&oauth_server(&stub.url, "")).await;
    let e = authorize(&ep).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(
        e.message().contains("does not advertise PKCE"),
        "{}",
        e.message()
    );
    assert!(
        e.message().contains("allow_unadvertised_pkce"),
        "{}",
        e.message()
    );
    let stats = get_json(&format!("{issuer}/_stats")).await;
    assert_eq!(stats["registrations"], 0, "nothing registered: {stats}");
    r.stop(Duration::from_secs(2)).await;

    let (_dir, r, ep) = embedded_replica(&oauth_server(
        &stub.url,
        "[servers.oauth]\nallow_unadvertised_pkce = true\n",
    ))
    .await;
    let started = authorize(&ep).await.expect("overridden");
    assert_eq!(
        param(&started.authorization_url, "code_challenge_method").as_deref(),
        Some("S256")
    );
    r.stop(Duration::from_secs(2)).await;
    drop((stub, as_));

    // A wrong RFC 9207 iss: refused before any token request.
    let as_ = start_as(&[("OAUTH_AS_ISS", "wrong")]).await;
    let issuer = as_.url.trim_end_matches('/').to_owned();
    let stub = start_protected(&issuer).await;
    let (_dir, r, ep) = embedded_replica(&oauth_server(&stub.url, "")).await;
    let started = authorize(&ep).await.expect("AuthorizeServer");
    let (code, page) = browse(&started.authorization_url).await;
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("RFC 9207"), "{page}");
    let stats = get_json(&format!("{issuer}/_stats")).await;
    assert_eq!(stats["token_requests"]["authorization_code"], 0, "{stats}");
    let st = oauth_status(&ep).await;
    assert_eq!(st.state, "needs_authorization");
    assert!(st.reason.starts_with("authorization failed"), "{st:?}");
    r.stop(Duration::from_secs(2)).await;
    drop((stub, as_));

    // An authorization server that rejects `resource` (as Entra ID does):
    // its error reaches the admin.
    let as_ = start_as(&[("OAUTH_AS_REJECT_RESOURCE", "1")]).await;
    let issuer = as_.url.trim_end_matches('/').to_owned();
    let stub = start_protected(&issuer).await;
    let (_dir, r, ep) = embedded_replica(&oauth_server(&stub.url, "")).await;
    let started = authorize(&ep).await.expect("AuthorizeServer");
    let (code, page) = browse(&started.authorization_url).await;
    assert_eq!(code, 400, "{page}");
    assert!(page.contains("invalid_target"), "{page}");
    assert_eq!(oauth_status(&ep).await.state, "needs_authorization");
    r.stop(Duration::from_secs(2)).await;
    drop((stub, as_));

    // A server that is not protected at all says so.
    let plain = start_http_server(
        {
            let mut c = Command::new("python3");
            c.arg(stub_script("http_stub.py"));
            c
        },
        "/mcp",
    )
    .await;
    let (_dir, r, ep) = embedded_replica(&oauth_server(&plain.url, "")).await;
    let e = authorize(&ep).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("stub"), "{}", e.message());
    r.stop(Duration::from_secs(2)).await;
}

/// Starts a `switchyard-control-plane` process on `store` with `servers`;
/// answers it and its gRPC endpoint.
async fn replica_process(
    dir: &Path,
    name: &str,
    store: &StoreKind,
    servers: &str,
) -> (Proc, String) {
    let (path, grpc) = write_config(dir, name, store, servers);
    let mut cmd = Command::new(control_plane_bin());
    cmd.arg("--config").arg(&path).env("SWITCHYARD_LOG", "info");
    let (proc, _) = Proc::start(
        name,
        cmd,
        dir.join(format!("{name}.log")),
        "switchyard-control-plane: grpc on ",
    )
    .await;
    (proc, format!("http://127.0.0.1:{grpc}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_killed_mid_refresh_leaves_no_stuck_lock_and_no_second_concurrent_refresh() {
    use switchyard_control_plane::store::{EtcdConfig, EtcdStore, Store};
    let etcd = start_etcd().await;
    let store = StoreKind::Etcd(etcd.url.clone());
    let as_ = start_as(&[("OAUTH_AS_TOKEN_TTL", "3")]).await;
    let issuer = as_.url.trim_end_matches('/').to_owned();
    let stub = start_protected(&issuer).await;
    let dir = tempfile::tempdir().unwrap();
    let servers = oauth_server(&stub.url, "");
    let (mut a, ea) = replica_process(dir.path(), "a", &store, &servers).await;
    let (mut b, eb) = replica_process(dir.path(), "b", &store, &servers).await;
    let started = authorize(&ea).await.expect("AuthorizeServer");
    let (code, page) = browse(&started.authorization_url).await;
    assert_eq!(code, 200, "{page}");

    // The next refresh hangs at the authorization server (which has
    // already rotated the token when it starts waiting).
    control(&issuer, json!({"refresh_delay_ms": 6000})).await;
    let before = get_json(&format!("{issuer}/_stats")).await["token_requests"]["refresh_token"]
        .as_u64()
        .unwrap();
    // A refresh under way: the authorization server got it (and waits).
    eventually("a delayed refresh under way", LIMIT, || async {
        let n = get_json(&format!("{issuer}/_stats")).await["token_requests"]["refresh_token"]
            .as_u64()
            .unwrap();
        (n > before).then_some(()).ok_or(format!("{n}"))
    })
    .await;
    let etcd_store =
        EtcdStore::connect(EtcdConfig::new([etcd.url.as_str()]).with_root("/switchyard/v1/"))
            .await
            .unwrap();
    let holder = eventually("a replica holds the refresh lock", LIMIT, || {
        let s = etcd_store.clone();
        async move {
            s.get("oauth/refresh/stub")
                .await
                .map_err(|e| e.to_string())?
                .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
                .ok_or("no lock yet".to_owned())
        }
    })
    .await;
    let holder_pid: u32 = holder.split('-').next().unwrap().parse().unwrap();
    let (victim, survivor, survivor_ep) = if holder_pid == a.pid {
        (&mut a, &mut b, eb.clone())
    } else {
        assert_eq!(holder_pid, b.pid, "{holder}");
        (&mut b, &mut a, ea.clone())
    };
    signal(victim.pid, nix::sys::signal::Signal::SIGKILL);
    let _ = victim.child.wait().await;
    control(&issuer, json!({"refresh_delay_ms": 0})).await;
    let at_kill = get_json(&format!("{issuer}/_stats")).await["token_requests"]["refresh_token"]
        .as_u64()
        .unwrap();

    // While the dead replica's lease lives, nobody refreshes again.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let stats = get_json(&format!("{issuer}/_stats")).await;
    assert_eq!(stats["token_requests"]["refresh_token"], at_kill, "{stats}");
    assert!(
        etcd_store
            .get("oauth/refresh/stub")
            .await
            .unwrap()
            .is_some()
    );

    // Then the lock goes with the lease; the survivor refreshes once with
    // the stored token, which the dead replica's request had already
    // rotated: the grant is refused and the server needs an admin, in a
    // state every replica sees, and the lock is free.
    let st = eventually("the survivor's verdict", Duration::from_secs(60), || {
        let ep = survivor_ep.clone();
        async move {
            let st = oauth_status(&ep).await;
            (st.state == "needs_reauthorization")
                .then(|| st.clone())
                .ok_or(format!("{st:?}"))
        }
    })
    .await;
    assert!(st.reason.contains("rejected the refresh token"), "{st:?}");
    let stats = get_json(&format!("{issuer}/_stats")).await;
    assert_eq!(
        stats["token_requests"]["refresh_token"],
        at_kill + 1,
        "{stats}"
    );
    eventually("the lock is free", LIMIT, || {
        let s = etcd_store.clone();
        async move {
            match s.get("oauth/refresh/stub").await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    // An admin authorizes again, on the survivor.
    let again = authorize(&survivor_ep).await.expect("AuthorizeServer");
    let (code, page) = browse(&again.authorization_url).await;
    assert_eq!(code, 200, "{page}");
    assert_eq!(oauth_status(&survivor_ep).await.state, "authorized");
    drop(survivor.log());
}
