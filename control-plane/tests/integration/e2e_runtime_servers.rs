//! Servers added and removed at runtime through the admin API
//! (`switchyard servers add|remove`), while a loop of calls runs on
//! `orders`: `up` starts a sidecar for the new server, whose tools appear
//! and can be called; removing it makes its tools disappear (calls are
//! NOT_FOUND) and `up` stops its sidecar. Not one of the `orders` calls
//! fails meanwhile.

use crate::common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use switchyard_proto::v1 as pb;
use switchyard_test_support::reference_server_bin;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_added_and_removed_at_runtime() {
    let _serial = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;

    // A steady stream of calls on `orders` for the whole test.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU32::new(0));
    let load = {
        let stop = stop.clone();
        let done = done.clone();
        let endpoint = gw.endpoint.clone();
        tokio::spawn(async move {
            let mut engine = engine(&endpoint).await.expect("engine");
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
    // Waits until the loop has made `n` more calls.
    let more_calls = |n: u32| {
        let done = done.clone();
        let target = done.load(Ordering::Relaxed) + n;
        async move {
            eventually("orders calls in the background", LIMIT, || {
                let done = done.clone();
                async move {
                    let now = done.load(Ordering::Relaxed);
                    if now >= target {
                        Ok(())
                    } else {
                        Err(format!("{now} < {target}"))
                    }
                }
            })
            .await
        }
    };
    more_calls(5).await;

    // ---- add `extra` (the reference server in the 2025-11-25 era, stdio)
    let reference = reference_server_bin();
    let added = Instant::now();
    let out = gw
        .cli(&[
            "servers",
            "add",
            "--name",
            "extra",
            "--transport",
            "stdio",
            "--command",
            reference.to_str().unwrap(),
            "--arg",
            "--era",
            "--arg",
            "2025-11-25",
        ])
        .await;
    let text = ok_stdout(&out, "servers add");
    assert!(text.starts_with("added extra"), "{text}");
    // Adding it twice is refused.
    let again = gw
        .cli(&[
            "servers",
            "add",
            "--name",
            "extra",
            "--transport",
            "stdio",
            "--command",
            "x",
        ])
        .await;
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already exists: "),
        "{again:?}"
    );

    let endpoint = gw.endpoint.clone();
    eventually("extra__get_order listed and callable", LIMIT, || {
        let endpoint = endpoint.clone();
        async move {
            let mut engine = engine(&endpoint).await?;
            let names = tool_names(&mut engine, "").await;
            if !names.iter().any(|n| n == "extra__get_order") {
                return Err(format!("not listed yet: {names:?}"));
            }
            get_order(&mut engine, "extra__get_order", "")
                .await
                .map_err(|e| format!("{e:?}"))
        }
    })
    .await;
    eprintln!("extra callable {:?} after `servers add`", added.elapsed());
    assert_eq!(
        gw.sidecars_of("extra").len(),
        1,
        "up runs a sidecar for extra"
    );
    let result = ok_json(
        &gw.cli(&[
            "call",
            "extra__get_order",
            "--args",
            r#"{"order_id":"O-1002"}"#,
            "--json",
        ])
        .await,
        "call extra__get_order",
    );
    assert_eq!(result["structuredContent"]["id"], "O-1002", "{result}");
    gw.wait_servers_up(&["orders", "everything", "orders-http", "extra"], LIMIT)
        .await;
    let listed = ok_json(
        &gw.cli(&["servers", "list", "--json"]).await,
        "servers list",
    );
    let extra = listed["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "extra")
        .cloned()
        .expect("extra listed");
    assert_eq!(extra["protocolVersion"], "2025-11-25", "{extra}");
    assert_eq!(extra["toolCount"], 6, "{extra}");

    more_calls(5).await;

    // ---- remove it
    let out = gw.cli(&["servers", "remove", "extra"]).await;
    assert_eq!(ok_stdout(&out, "servers remove").trim(), "removed extra");
    let mut engine = gw.engine().await;
    let names = tool_names(&mut engine, "").await;
    assert!(!names.iter().any(|n| n.starts_with("extra__")), "{names:?}");
    assert!(names.iter().any(|n| n == "orders__get_order"), "{names:?}");
    let status = engine
        .call_tool(call_request(
            "extra__get_order",
            r#"{"order_id":"O-1001"}"#,
            "",
        ))
        .await
        .expect_err("a removed server's tool");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    let out = gw.cli(&["call", "extra__get_order"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not found: "),
        "{out:?}"
    );
    let status = gw
        .admin()
        .await
        .get_server_status(pb::GetServerStatusRequest {
            name: "extra".into(),
        })
        .await
        .expect_err("a removed server");
    assert_eq!(status.code(), tonic::Code::NotFound);
    let out = gw.cli(&["servers", "remove", "extra"]).await;
    assert_eq!(out.status.code(), Some(1), "removing twice: {out:?}");
    // `up` stops its sidecar (and the sidecar its server).
    let pid = gw.pid;
    eventually("extra's sidecar stopped", LIMIT, || async move {
        let left: Vec<String> = descendants(pid)
            .into_iter()
            .map(cmdline)
            .filter(|c| c.contains("/extra.toml") || c.contains("--era 2025-11-25"))
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;

    more_calls(5).await;

    // `orders` never noticed.
    stop.store(true, Ordering::Relaxed);
    let (ok, failures) = load.await.expect("the load task");
    assert!(
        failures.is_empty(),
        "{} of {} orders calls failed: {failures:?}",
        failures.len(),
        ok as usize + failures.len()
    );
    assert!(ok >= 15, "only {ok} orders calls ran");
    eprintln!("{ok} orders calls during add and remove, none failed");
    gw.stop().await;
}
