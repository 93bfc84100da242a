//! TLS between every hop, with certificates generated at test time: an
//! engine calls a tool through `switchyard-control-plane` (TLS listener,
//! mTLS required) and a real `switchyard-sidecar` (TLS on `SidecarCalls`,
//! requiring the control plane's client certificate) in front of the
//! reference server. Engines and the sidecar are identified by their
//! certificates (`[[auth.mtls]]`).
//!
//! Also: with `require_client_cert`, a client without a certificate is
//! refused (at the handshake or its first call), as is a plaintext client;
//! a client with a certificate from another CA is refused; bad certificate
//! files stop both binaries with exit 64 naming the key and the file.

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::admin_service_client::AdminServiceClient;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use switchyard_test_support::free_port;
use switchyard_test_support::pki::{Leaf, TestPki};

fn tls_config(dir: &Path, pki: &TestPki, cp: &Leaf, servers: &str) -> (String, u16, u16) {
    let (grpc, http) = (free_port(), free_port());
    let text = format!(
        r#"[control_plane]
listen = "127.0.0.1:{grpc}"
http_listen = "127.0.0.1:{http}"
sidecar_lease_ttl_sec = 5

[store]
path = {store}

[tls]
cert_file = {cert}
key_file = {key}
client_ca_file = {ca}
require_client_cert = true
sidecar_ca_file = {ca}

[auth]
required = true

[[auth.mtls]]
name = "engine-1"
role = "engine"

[[auth.mtls]]
name = "ops.example.test"
role = "admin"

[[auth.mtls]]
name = "sidecar-orders"
role = "sidecar"
{servers}"#,
        store = toml_str(dir.join("store/store.redb").to_string_lossy()),
        cert = toml_str(cp.cert_file.to_string_lossy()),
        key = toml_str(cp.key_file.to_string_lossy()),
        ca = toml_str(pki.ca_file.to_string_lossy()),
    );
    (text, grpc, http)
}

fn pair(leaf: &Leaf) -> (&Path, &Path) {
    (&leaf.cert_file, &leaf.key_file)
}

#[tokio::test]
async fn an_engine_call_goes_through_tls_and_mtls_end_to_end() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "e2e");
    let cp_leaf = pki.leaf("control-plane", &[]);
    let sidecar_leaf = pki.leaf("sidecar-orders", &[]);
    let engine_leaf = pki.leaf("engine-1", &[]);
    let ops_leaf = pki.leaf("ops", &["ops.example.test"]);
    let servers = format!("\n[[servers]]\n{}\n", reference_server_toml("orders"));
    let (text, grpc, http) = tls_config(dir.path(), &pki, &cp_leaf, &servers);
    let config = dir.path().join("cp.toml");
    std::fs::write(&config, text).unwrap();
    let (_cp, addr, http_addr) = start_control_plane("control-plane", dir.path(), &config).await;
    assert_eq!(addr, format!("127.0.0.1:{grpc}"));
    assert_eq!(http_addr, format!("127.0.0.1:{http}"));
    let endpoint = format!("https://127.0.0.1:{grpc}");

    // The sidecar: TLS on SidecarCalls (only the control plane's client
    // certificate gets in), its own certificate towards the control plane.
    let sidecar_toml = format!(
        "control_plane = {}\ncontrol_plane_ca_file = {ca}\ntls_cert_file = {}\ntls_key_file = {}\nclient_ca_file = {ca}\nsidecar_id = \"orders-tls\"\ngrace_secs = 2",
        toml_str(&endpoint),
        toml_str(sidecar_leaf.cert_file.to_string_lossy()),
        toml_str(sidecar_leaf.key_file.to_string_lossy()),
        ca = toml_str(pki.ca_file.to_string_lossy()),
    );
    let (_sidecar, calls_addr, _) = start_sidecar(
        "sidecar",
        dir.path(),
        &reference_server_toml("orders"),
        &sidecar_toml,
    )
    .await;

    // An admin (certificate with DNS name ops.example.test) sees the
    // sidecar registered with an https:// call address.
    let ca = pki.ca_file.clone();
    let status = eventually("orders up over TLS", START_LIMIT, || {
        let (endpoint, ca, ops) = (endpoint.clone(), ca.clone(), ops_leaf.clone());
        async move {
            let channel = tls_channel(&endpoint, Some(&ca), Some(pair(&ops))).await?;
            let s = AdminServiceClient::new(channel)
                .get_server_status(pb::GetServerStatusRequest {
                    name: "orders".into(),
                })
                .await
                .map_err(|e| format!("{e:?}"))?
                .into_inner();
            if s.state == "up" && s.sidecars.iter().all(|c| c.upstream_state == "connected") {
                Ok(s)
            } else {
                Err(format!("{s:?}"))
            }
        }
    })
    .await;
    assert_eq!(status.sidecars.len(), 1, "{status:?}");
    assert_eq!(
        status.sidecars[0].call_address,
        format!("https://{calls_addr}"),
        "{status:?}"
    );

    // The engine, by its certificate: list, then call through every hop.
    let channel = tls_channel(&endpoint, Some(&pki.ca_file), Some(pair(&engine_leaf)))
        .await
        .expect("engine connects with its certificate");
    let mut engine = EngineServiceClient::new(channel);
    let names = tool_names(&mut engine, "").await;
    assert!(names.iter().any(|n| n == "orders__get_order"), "{names:?}");
    get_order(&mut engine, "orders__get_order", "")
        .await
        .expect("get_order through TLS");
    let resp = engine
        .call_tool(call_request(
            "orders__get_order",
            r#"{"order_id":"O-1002"}"#,
            "",
        ))
        .await
        .expect("second call")
        .into_inner();
    let structured: Value = serde_json::from_str(&resp.structured_content_json).unwrap();
    assert_eq!(structured["id"], "O-1002", "{}", resp.result_json);

    // The engine's certificate does not make it an admin.
    let channel = tls_channel(&endpoint, Some(&pki.ca_file), Some(pair(&engine_leaf)))
        .await
        .unwrap();
    let e = AdminServiceClient::new(channel)
        .list_servers(pb::ListServersRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");

    // SidecarCalls refuses a client without the CA's certificate: the
    // sidecar is reachable only by the control plane.
    // Refused by TLS (at the handshake, or as the connection closes at the
    // first call under TLS 1.3), not by the service: an empty request would
    // be INVALID_ARGUMENT there.
    if let Ok(channel) =
        tls_channel(&format!("https://{calls_addr}"), Some(&pki.ca_file), None).await
    {
        let e = switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient::new(channel)
            .call_tool(pb::SidecarCallRequest::default())
            .await
            .expect_err("a call to SidecarCalls without a client certificate");
        assert!(
            matches!(
                e.code(),
                tonic::Code::Cancelled | tonic::Code::Unknown | tonic::Code::Unavailable
            ),
            "SidecarCalls without a client certificate: {e:?}"
        );
    }

    // The CLI over TLS, as admin by certificate.
    let out = tokio::process::Command::new(switchyard_bin())
        .args(["--endpoint", &endpoint, "--ca-file"])
        .arg(&pki.ca_file)
        .arg("--cert-file")
        .arg(&ops_leaf.cert_file)
        .arg("--key-file")
        .arg(&ops_leaf.key_file)
        .args(["servers", "list"])
        .output()
        .await
        .unwrap();
    let listed = ok_stdout(&out, "switchyard servers list over mTLS");
    assert!(
        listed.contains("orders") && listed.contains("up"),
        "{listed}"
    );
    // Without --ca-file the CLI says what is missing.
    let out = cli(&endpoint, &["servers", "list"]).await;
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--ca-file"),
        "{out:?}"
    );
}

#[tokio::test]
async fn with_client_certificates_required_other_clients_are_refused() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "mtls");
    let other = TestPki::new(dir.path(), "other");
    let cp_leaf = pki.leaf("control-plane", &[]);
    let engine_leaf = pki.leaf("engine-1", &[]);
    let stranger = other.leaf("engine-1", &[]);
    let (text, grpc, _) = tls_config(dir.path(), &pki, &cp_leaf, "");
    let config = dir.path().join("cp.toml");
    std::fs::write(&config, text).unwrap();
    let (_cp, _, _) = start_control_plane("control-plane", dir.path(), &config).await;
    let endpoint = format!("https://127.0.0.1:{grpc}");

    async fn list(channel: Result<tonic::transport::Channel, String>) -> Result<(), String> {
        let channel = channel?;
        EngineServiceClient::new(channel)
            .list_sessions(pb::ListSessionsRequest {})
            .await
            .map(|_| ())
            .map_err(|e| format!("{e:?}"))
    }

    // The right certificate works.
    list(tls_channel(&endpoint, Some(&pki.ca_file), Some(pair(&engine_leaf))).await)
        .await
        .expect("a client with a certificate of the CA");
    // No certificate: refused (TLS 1.3 reports it at the first call).
    let e = list(tls_channel(&endpoint, Some(&pki.ca_file), None).await)
        .await
        .expect_err("a client without a certificate must be refused");
    // Refused by TLS, not by the auth interceptor: the server's
    // CertificateRequired alert, or (depending on timing) the connection
    // it closed.
    assert!(
        (e.contains("CertificateRequired")
            || e.contains("connection closed")
            || e.contains("broken pipe"))
            && !e.contains("Unauthenticated"),
        "{e}"
    );
    // Same name, another CA: refused.
    list(tls_channel(&endpoint, Some(&pki.ca_file), Some(pair(&stranger))).await)
        .await
        .expect_err("a certificate from another CA must be refused");
    // Plaintext gRPC to the TLS port: refused.
    list(tls_channel(&format!("http://127.0.0.1:{grpc}"), None, None).await)
        .await
        .expect_err("plaintext must be refused");
    // A client that does not trust the server's CA refuses it.
    list(tls_channel(&endpoint, Some(&other.ca_file), Some(pair(&stranger))).await)
        .await
        .expect_err("the server's certificate is not from the other CA");

    // The CLI says which flag explains each refusal, and exits 69 (the
    // control plane cannot be reached), not 1 ("unknown: transport error").
    let cert_flags = |leaf: &Leaf| {
        vec![
            "--cert-file".to_owned(),
            leaf.cert_file.to_string_lossy().into_owned(),
            "--key-file".to_owned(),
            leaf.key_file.to_string_lossy().into_owned(),
        ]
    };
    let ca = |file: &Path| vec!["--ca-file".to_owned(), file.to_string_lossy().into_owned()];
    let cases: [(&str, String, Vec<String>, &str); 4] = [
        (
            "no client certificate",
            endpoint.clone(),
            ca(&pki.ca_file),
            "pass --cert-file and --key-file",
        ),
        (
            "a client certificate of another CA",
            endpoint.clone(),
            [ca(&pki.ca_file), cert_flags(&stranger)].concat(),
            "the client certificate of --cert-file",
        ),
        (
            "plaintext to the TLS listener",
            format!("http://127.0.0.1:{grpc}"),
            Vec::new(),
            &format!("use https://127.0.0.1:{grpc} with --ca-file"),
        ),
        (
            "a --ca-file that did not sign the control plane's certificate",
            endpoint.clone(),
            [ca(&other.ca_file), cert_flags(&engine_leaf)].concat(),
            "invalid peer certificate",
        ),
    ];
    for (case, endpoint, flags, expected) in cases {
        let out = tokio::process::Command::new(switchyard_bin())
            .args(["--endpoint", &endpoint])
            .args(&flags)
            .args(["sessions", "list"])
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{case}: {stderr}");
        assert!(stderr.contains(expected), "{case}: {stderr}");
        assert!(
            !stderr.contains("unknown: transport error"),
            "{case}: {stderr}"
        );
    }
    // The right certificate still works from the CLI.
    let out = tokio::process::Command::new(switchyard_bin())
        .args(["--endpoint", &endpoint])
        .args(ca(&pki.ca_file))
        .args(cert_flags(&engine_leaf))
        .args(["sessions", "list"])
        .output()
        .await
        .unwrap();
    ok_stdout(
        &out,
        "switchyard sessions list with the engine's certificate",
    );
}

#[tokio::test]
async fn bad_certificate_files_exit_64_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "bad");
    let a = pki.leaf("a", &[]);
    let b = pki.leaf("b", &[]);
    let run_cp = |text: String| {
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
    let base = |cert: &Path, key: &Path| {
        format!(
            "[control_plane]\nlisten = \"127.0.0.1:{}\"\nhttp_listen = \"127.0.0.1:{}\"\n[store]\npath = {}\n[tls]\ncert_file = {}\nkey_file = {}\n",
            free_port(),
            free_port(),
            toml_str(dir.path().join("store.redb").to_string_lossy()),
            toml_str(cert.to_string_lossy()),
            toml_str(key.to_string_lossy()),
        )
    };
    // A key that belongs to another certificate.
    let (code, err) = run_cp(base(&a.cert_file, &b.key_file)).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("tls.key_file")
            && err.contains(&*b.key_file.to_string_lossy())
            && err.contains("does not match")
            && err.contains(&*a.cert_file.to_string_lossy()),
        "{err}"
    );
    // A missing certificate file.
    let missing = dir.path().join("nowhere.pem");
    let (code, err) = run_cp(base(&missing, &a.key_file)).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("tls.cert_file")
            && err.contains(&*missing.to_string_lossy())
            && err.contains("cannot read"),
        "{err}"
    );
    // A key file given as certificate.
    let (code, err) = run_cp(base(&a.key_file, &a.key_file)).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("tls.cert_file") && err.contains("no PEM certificate"),
        "{err}"
    );
    // A CA file that is not PEM.
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let (code, err) = run_cp(format!(
        "{}client_ca_file = {}\n",
        base(&a.cert_file, &a.key_file),
        toml_str(junk.to_string_lossy())
    ))
    .await;
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("tls.client_ca_file") && err.contains("junk.pem"),
        "{err}"
    );
    // --check reports the same.
    let config = dir.path().join("check.toml");
    std::fs::write(&config, base(&a.cert_file, &b.key_file)).unwrap();
    let out = tokio::process::Command::new(control_plane_bin())
        .arg("--config")
        .arg(&config)
        .arg("--check")
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");

    // The sidecar: a mismatched key, named by its key.
    let sidecar_config = dir.path().join("sidecar.toml");
    std::fs::write(
        &sidecar_config,
        format!(
            "[server]\n{}\n[sidecar]\ncontrol_plane = \"https://127.0.0.1:1\"\ntls_cert_file = {}\ntls_key_file = {}\n",
            reference_server_toml("orders"),
            toml_str(a.cert_file.to_string_lossy()),
            toml_str(b.key_file.to_string_lossy()),
        ),
    )
    .unwrap();
    let out = tokio::process::Command::new(sidecar_bin())
        .arg("run")
        .arg("--config")
        .arg(&sidecar_config)
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains("sidecar.tls_key_file") && err.contains("does not match"),
        "{err}"
    );
    // And a token file that does not exist, given by flag.
    let out = tokio::process::Command::new(sidecar_bin())
        .args([
            "run",
            "--server-name",
            "t",
            "--control-plane",
            "http://127.0.0.1:1",
            "--token-file",
        ])
        .arg(dir.path().join("no.token"))
        .args(["--", "true"])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains("--token-file") && err.contains("no.token"),
        "{err}"
    );
}

#[tokio::test]
async fn switchyard_up_connects_its_sidecars_over_tls_with_a_token() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "up");
    let cp_leaf = pki.leaf("control-plane", &[]);
    let engine_token = dir.path().join("engine.token");
    let sidecar_token = dir.path().join("sidecar.token");
    std::fs::write(&engine_token, "engine-secret\n").unwrap();
    std::fs::write(&sidecar_token, "sidecar-secret\n").unwrap();
    let (grpc, http) = (free_port(), free_port());
    let config = dir.path().join("up.toml");
    std::fs::write(
        &config,
        format!(
            "[control_plane]\nlisten = \"127.0.0.1:{grpc}\"\nhttp_listen = \"127.0.0.1:{http}\"\n\n[store]\npath = \"store/store.redb\"\n\n\
             [tls]\ncert_file = {}\nkey_file = {}\nclient_ca_file = {}\n\n\
             [auth]\nrequired = true\n\n[[auth.tokens]]\nname = \"engine\"\nrole = \"engine\"\ntoken_file = \"engine.token\"\n\n\
             [[auth.tokens]]\nname = \"sidecars\"\nrole = \"sidecar\"\ntoken_file = \"sidecar.token\"\n\n[[servers]]\n{}\n",
            toml_str(cp_leaf.cert_file.to_string_lossy()),
            toml_str(cp_leaf.key_file.to_string_lossy()),
            toml_str(pki.ca_file.to_string_lossy()),
            reference_server_toml("orders"),
        ),
    )
    .unwrap();
    let mut cmd = tokio::process::Command::new(switchyard_bin());
    cmd.arg("up")
        .arg("--config")
        .arg(&config)
        .env("SWITCHYARD_SIDECAR_BIN", sidecar_bin())
        .env("SWITCHYARD_LOG", "info");
    let (mut up, line) = Proc::start(
        "switchyard up",
        cmd,
        dir.path().join("up.log"),
        "switchyard: engine endpoint ",
    )
    .await;
    let endpoint = format!("https://localhost:{grpc}");
    assert!(line.ends_with(&endpoint), "{line}");
    let ca = pki.ca_file.clone();
    eventually("orders listed over TLS with a token", START_LIMIT, || {
        let (endpoint, ca) = (endpoint.clone(), ca.clone());
        async move {
            let channel = tls_channel(&endpoint, Some(&ca), None).await?;
            let tools = EngineServiceClient::new(channel)
                .list_tools(bearer(pb::ListToolsRequest::default(), "engine-secret"))
                .await
                .map_err(|e| format!("{e:?}"))?
                .into_inner();
            if tools.tools.iter().any(|t| t.name == "orders__get_order") {
                Ok(())
            } else {
                Err(format!("{tools:?}"))
            }
        }
    })
    .await;
    let channel = tls_channel(&endpoint, Some(&pki.ca_file), None)
        .await
        .unwrap();
    let resp = EngineServiceClient::new(channel)
        .call_tool(bearer(
            call_request("orders__get_order", r#"{"order_id":"O-1001"}"#, ""),
            "engine-secret",
        ))
        .await
        .expect("a call through up over TLS")
        .into_inner();
    assert!(
        resp.structured_content_json.contains("O-1001"),
        "{}",
        resp.result_json
    );
    let status = up.terminate().await;
    assert!(status.success(), "{status}\n{}", up.log());
}

/// `[mcp] tls = true`: the MCP endpoint presents the listener's
/// certificate (no client certificate asked), speaks HTTP/2 and HTTP/1.1
/// by ALPN, and a plaintext client gets no answer; `up`-style clients
/// reach it at `https://`.
#[tokio::test]
async fn the_mcp_endpoint_serves_over_tls() {
    switchyard_test_support::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new(dir.path(), "mcp");
    let leaf = pki.leaf("control-plane", &[]);
    let (grpc, http, mcp) = (free_port(), free_port(), free_port());
    let text = format!(
        r#"[control_plane]
listen = "127.0.0.1:{grpc}"
http_listen = "127.0.0.1:{http}"

[store]
path = {store}

[tls]
cert_file = {cert}
key_file = {key}

[mcp]
listen = "127.0.0.1:{mcp}"
tls = true
"#,
        store = toml_str(dir.path().join("store/store.redb").to_string_lossy()),
        cert = toml_str(leaf.cert_file.to_string_lossy()),
        key = toml_str(leaf.key_file.to_string_lossy()),
    );
    let config = dir.path().join("cp.toml");
    std::fs::write(&config, text).unwrap();
    let (_cp, _addr, _http_addr) = start_control_plane("control-plane", dir.path(), &config).await;

    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca_file).unwrap()).unwrap();
    let discover = |client: reqwest::Client, url: String| async move {
        client
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "server/discover")
            .body(
                serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
                    "params": {"_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {}}}})
                .to_string(),
            )
            .send()
            .await
    };
    let url = format!("https://localhost:{mcp}/mcp");
    for (h2, version) in [
        (true, reqwest::Version::HTTP_2),
        (false, reqwest::Version::HTTP_11),
    ] {
        let b = reqwest::Client::builder()
            .tls_certs_only([ca.clone()])
            .timeout(LIMIT);
        let client = if h2 { b } else { b.http1_only() }.build().unwrap();
        let r = discover(client, url.clone()).await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.version(), version);
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "switchyard",
            "{body}"
        );
    }
    // Plaintext on the TLS port: no HTTP answer.
    let plain = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let r = discover(plain, format!("http://localhost:{mcp}/mcp")).await;
    assert!(r.is_err(), "{r:?}");
    // A client that does not trust the CA: refused at the handshake.
    let r = discover(
        reqwest::Client::builder().timeout(LIMIT).build().unwrap(),
        url,
    )
    .await;
    assert!(r.is_err(), "{r:?}");
}
