//! What the CLI says when it cannot talk to a control plane, with a hint
//! only where the failure points at a flag, and never a hang:
//!
//! - an `--endpoint` without `http://` or `https://` exits 64;
//! - a refused port exits 69 with no hint;
//! - the control plane's HTTP port is "not a gRPC server", with a hint
//!   naming `control_plane.listen`;
//! - `https://` to the plaintext gRPC port: the endpoint "does not answer
//!   in TLS";
//! - an address that accepts and closes at once: no hint, or "closed the
//!   connection", maybe stopped (never blamed on TLS alone);
//! - an address that accepts and then says nothing fails within about 20 s
//!   over HTTP/2 (keep-alive) and 10 s over TLS (the handshake), instead
//!   of hanging.
//!
//! The TLS refusals of a control plane with client certificates are in
//! `e2e_tls`.

use crate::common::*;
use std::time::{Duration, Instant};
use switchyard_test_support::pki::TestPki;
use tokio::net::TcpListener;

/// A listener that accepts connections and closes each at once, or (with
/// `hang`) keeps each without reading or writing a byte.
async fn listener(hang: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            if hang {
                kept.push(socket);
            }
        }
    });
    addr
}

/// `switchyard FLAGS servers list`: exit status, stderr, and how long it took.
async fn run(flags: &[&str]) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let out = tokio::process::Command::new(switchyard_bin())
        .args(flags)
        .args(["servers", "list"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .unwrap_or_else(|_| panic!("switchyard {flags:?} hung for 60 s"))
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test]
async fn connection_failures_exit_69_with_a_hint_only_where_a_flag_explains_them() {
    let dir = tempfile::tempdir().unwrap();
    let (text, _, _) = config_text(dir.path(), &StoreKind::Embedded, 5, "");
    let config = dir.path().join("cp.toml");
    std::fs::write(&config, text).unwrap();
    let (_cp, grpc, http) = start_control_plane("control-plane", dir.path(), &config).await;
    let pki = TestPki::new(dir.path(), "cli");
    let ca = pki.ca_file.to_string_lossy().into_owned();
    let (closing, hanging) = (listener(false).await, listener(true).await);
    let refused = format!("127.0.0.1:{}", switchyard_test_support::free_port());

    // The control plane itself answers.
    let (code, err, _) = run(&["--endpoint", &format!("http://{grpc}")]).await;
    assert_eq!(code, Some(0), "{err}");

    let (code, err, _) = run(&["--endpoint", &grpc]).await;
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("must start with http:// or https://"), "{err}");

    let (code, err, _) = run(&["--endpoint", &format!("http://{refused}")]).await;
    assert_eq!(code, Some(69), "{err}");
    assert!(
        err.contains("Connection refused") && !err.contains("hint:"),
        "{err}"
    );

    let (code, err, _) = run(&["--endpoint", &format!("http://{http}")]).await;
    assert_eq!(code, Some(69), "{err}");
    assert!(
        err.contains("not a gRPC server")
            && err.contains("hint:")
            && err.contains("control_plane.listen"),
        "{err}"
    );

    let (code, err, _) = run(&["--endpoint", &format!("https://{grpc}"), "--ca-file", &ca]).await;
    assert_eq!(code, Some(69), "{err}");
    assert!(
        err.contains(&format!(
            "hint: the endpoint does not answer in TLS: if it serves plaintext, use http://{grpc}"
        )),
        "{err}"
    );

    // Closed at once: while connecting (no hint) or on the first call
    // (closed or reset, depending on timing), never blamed on TLS alone.
    for _ in 0..5 {
        let (code, err, _) = run(&["--endpoint", &format!("http://{closing}")]).await;
        assert_eq!(code, Some(69), "{err}");
        assert!(
            !err.contains("hint:")
                || err
                    .contains("hint: the control plane closed the connection: it may have stopped"),
            "{err}"
        );
    }

    let (code, err, took) = run(&["--endpoint", &format!("http://{hanging}")]).await;
    assert_eq!(code, Some(69), "{err}");
    assert!(err.contains("does not answer"), "{err}");
    assert!(took < Duration::from_secs(40), "{took:?}: {err}");

    let (code, err, took) = run(&[
        "--endpoint",
        &format!("https://{hanging}"),
        "--ca-file",
        &ca,
    ])
    .await;
    assert_eq!(code, Some(69), "{err}");
    assert!(err.contains("did not answer within 10 s"), "{err}");
    assert!(took < Duration::from_secs(30), "{took:?}: {err}");
}
