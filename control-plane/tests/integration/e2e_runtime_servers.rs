//! Servers added and removed at runtime through the admin API
//! (`switchyard servers add|remove`), while a loop of calls runs on
//! `orders`: `up` starts a sidecar for the new server, whose tools appear
//! and can be called; removing it makes its tools disappear (calls are
//! NOT_FOUND) and `up` stops its sidecar. Not one of the `orders` calls
//! fails meanwhile.

use crate::common::*;
use std::path::Path;
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

/// `max_message_bytes`, `liveness_interval_sec` and the request timeout
/// set with `servers add` are stored, answered and obeyed by the server's
/// sidecar: under a limit smaller than its tool list the server stays
/// "starting" and its status says why. An `UpdateServer` that leaves the
/// limits unset (a client written before they existed) keeps them; one
/// that sets them changes them. Out-of-range values are refused naming the
/// field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_limits_set_at_runtime_are_obeyed_and_kept_by_an_update() {
    let _serial = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let reference = reference_server_bin();
    let reference = reference.to_str().unwrap();
    let add = |extra: &[&'static str]| {
        let mut args = vec![
            "servers",
            "add",
            "--name",
            "small",
            "--transport",
            "stdio",
            "--command",
            reference,
        ];
        args.extend_from_slice(extra);
        args
    };

    // Out of range: refused, naming the field; nothing is added.
    for (flags, field) in [
        (
            &["--max-message-bytes", "100"][..],
            "spec.max_message_bytes",
        ),
        (
            &["--liveness-interval-sec", "86401"][..],
            "spec.liveness_interval_sec",
        ),
        (
            &["--max-message-bytes", "1073741825"][..],
            "spec.max_message_bytes",
        ),
    ] {
        let out = gw.cli(&add(flags)).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{flags:?}: {stderr}");
        assert!(stderr.contains(field), "{flags:?}: {stderr}");
    }
    for flags in [
        ["--request-timeout-sec", "0"],
        ["--timeout", "0"],
        ["--timeout", "9300000000000000000"],
    ] {
        let out = gw.cli(&add(&flags)).await;
        assert_eq!(out.status.code(), Some(64), "{flags:?}: {out:?}");
    }

    // 2048 bytes: less than the server's tool list (about 3 KB).
    let out = gw
        .cli(&add(&[
            "--max-message-bytes",
            "2048",
            "--liveness-interval-sec",
            "0",
            "--request-timeout-sec",
            "30",
            "--timeout",
            "3",
        ]))
        .await;
    // It is added, exits 1, and says why the server is not up.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("added small (starting)"));
    assert!(
        stderr.starts_with("error: small is not up after 3 s: listing tools failed")
            && stderr.contains("over the 2048-byte limit")
            && stderr.contains("(it is added; see switchyard servers status small"),
        "{stderr}"
    );
    let server = || async {
        let listed = ok_json(
            &gw.cli(&["servers", "list", "--json"]).await,
            "servers list",
        );
        listed["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "small")
            .cloned()
            .expect("small listed")
    };
    let listed = server().await;
    assert_eq!(
        (
            &listed["maxMessageBytes"],
            &listed["livenessIntervalSec"],
            &listed["requestTimeoutMs"]
        ),
        (&2048.into(), &0.into(), &30_000.into()),
        "{listed}"
    );
    eventually("small's status says why it is not up", LIMIT, || async {
        let s = server().await;
        let error = s["sidecars"][0]["lastError"].as_str().unwrap_or("");
        if s["state"] == "starting"
            && error.contains("listing tools failed")
            && error.contains("over the 2048-byte limit")
        {
            Ok(())
        } else {
            Err(s.to_string())
        }
    })
    .await;

    async fn echo(gw: &Gateway, n: usize) -> Result<(), tonic::Status> {
        let message = "x".repeat(n);
        gw.engine()
            .await
            .call_tool(call_request(
                "small__echo",
                &serde_json::json!({ "message": message }).to_string(),
                "",
            ))
            .await
            .map(|_| ())
    }
    async fn too_big(gw: &Gateway, limit: &str, what: &str) {
        let e = echo(gw, 10_000).await.expect_err(what);
        assert!(
            e.message().contains(limit),
            "{what}: {:?} {}",
            e.code(),
            e.message()
        );
    }

    // An update that sets only the size limit: the liveness interval and
    // nothing else is kept; the server comes up and obeys 8192 bytes.
    let admin = gw.admin().await;
    let mut given = pb::ServerSpec {
        name: "small".into(),
        transport: pb::Transport::Stdio as i32,
        command: reference.into(),
        request_timeout_ms: 30_000,
        max_message_bytes: Some(8192),
        ..Default::default()
    };
    let sidecar_ids = |s: &serde_json::Value| -> Vec<(String, String)> {
        s["sidecars"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["sidecarId"].as_str().unwrap_or("").to_owned(),
                    c["upstreamState"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    };
    // Updates the server and waits until a new sidecar (`up` replaces the
    // old one) has its server connected and listed: until then calls may
    // still reach the old one, which is draining.
    let update = |given: pb::ServerSpec| {
        let mut admin = admin.clone();
        async move {
            let before = sidecar_ids(&server().await);
            let answered = admin
                .update_server(pb::UpdateServerRequest { spec: Some(given) })
                .await
                .expect("UpdateServer")
                .into_inner()
                .spec
                .unwrap();
            eventually("a new sidecar for small, up", LIMIT, || async {
                let s = server().await;
                let fresh = sidecar_ids(&s).into_iter().any(|(id, state)| {
                    state == "connected" && !before.iter().any(|(b, _)| *b == id)
                });
                if fresh && s["state"] == "up" {
                    Ok(())
                } else {
                    Err(s.to_string())
                }
            })
            .await;
            answered
        }
    };
    let answered = update(given.clone()).await;
    assert_eq!(
        (answered.max_message_bytes, answered.liveness_interval_sec),
        (Some(8192), Some(0))
    );
    echo(&gw, 100).await.expect("a small echo");
    too_big(&gw, "8192", "a 10000-byte answer over max_message_bytes").await;

    // An update without the limits (only the timeout changes) keeps both.
    given.max_message_bytes = None;
    given.request_timeout_ms = 40_000;
    let answered = update(given.clone()).await;
    assert_eq!(
        (
            answered.max_message_bytes,
            answered.liveness_interval_sec,
            answered.request_timeout_ms
        ),
        (Some(8192), Some(0), 40_000)
    );
    too_big(&gw, "8192", "after an update that left the limit unset").await;

    // An update that sets it changes it; a timeout of 0 keeps the stored
    // one, as the console's form sends when its field is empty.
    given.max_message_bytes = Some(1 << 20);
    given.request_timeout_ms = 0;
    let answered = update(given).await;
    assert_eq!(
        (answered.max_message_bytes, answered.request_timeout_ms),
        (Some(1 << 20), 40_000)
    );
    assert_eq!(server().await["maxMessageBytes"], 1 << 20);
    eventually("a 10000-byte echo under the new limit", LIMIT, || async {
        echo(&gw, 10_000).await.map_err(|e| e.message().to_owned())
    })
    .await;
    gw.stop().await;
}

/// Updating a server under `up` replaces its sidecar make-before-break:
/// the new sidecar starts, the old one keeps serving until the new one's
/// server is connected, then stops. A loop of calls on the server never
/// fails across three updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_updated_server_keeps_answering_while_its_sidecar_is_replaced() {
    let _serial = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let reference = reference_server_bin();
    let reference = reference.to_str().unwrap().to_owned();
    let spec = |timeout_ms: u64| pb::ServerSpec {
        name: "swap".into(),
        transport: pb::Transport::Stdio as i32,
        command: reference.clone(),
        request_timeout_ms: timeout_ms,
        ..Default::default()
    };
    let mut admin = gw.admin().await;
    admin
        .add_server(pb::AddServerRequest {
            spec: Some(spec(30_000)),
        })
        .await
        .expect("AddServer");
    gw.wait_servers_up(&["swap"], LIMIT).await;

    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        let endpoint = gw.endpoint.clone();
        tokio::spawn(async move {
            let mut engine = engine(&endpoint).await.expect("engine");
            let (mut ok, mut failures) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match get_order(&mut engine, "swap__get_order", "").await {
                    Ok(()) => ok += 1,
                    Err(status) => failures.push(status),
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (ok, failures)
        })
    };
    for (round, timeout_ms) in [31_000, 32_000, 33_000].into_iter().enumerate() {
        let before = gw.sidecars_of("swap");
        assert_eq!(before.len(), 1, "round {round}: {before:?}");
        admin
            .update_server(pb::UpdateServerRequest {
                spec: Some(spec(timeout_ms)),
            })
            .await
            .expect("UpdateServer");
        eventually("the old sidecar replaced by a new one", LIMIT, || {
            let now = gw.sidecars_of("swap");
            let before = before.clone();
            async move {
                if now.len() == 1 && now != before {
                    Ok(())
                } else {
                    Err(format!("{now:?} (before: {before:?})"))
                }
            }
        })
        .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let (ok, failures) = load.await.expect("the load task");
    assert!(
        failures.is_empty(),
        "{} of {} calls failed during the updates: {failures:?}",
        failures.len(),
        ok as usize + failures.len()
    );
    assert!(ok >= 20, "only {ok} calls ran");
    gw.stop().await;
}

/// A server URL's secrets (a password, an `api_key` parameter) are
/// answered `[redacted]`; an update that sends the URL back as answered
/// keeps the stored one, which the server's sidecar uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_urls_secrets_are_redacted_in_answers_and_kept_by_an_update() {
    let _serial = HEAVY.lock().await;
    let http = start_http_reference_server().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    // The query's `;` part and the fragment (which no client sends) are
    // answered redacted too, and kept by an update.
    let url = http.url.replacen("http://", "http://alice:PW-SECRET@", 1)
        + "?api_key=QS-SECRET&team=blue;sig=SIG-SECRET#frag=F-SECRET";
    let mut admin = gw.admin().await;
    let spec = |url: &str, timeout_ms| pb::ServerSpec {
        name: "keyed".into(),
        transport: pb::Transport::Http as i32,
        url: url.to_owned(),
        request_timeout_ms: timeout_ms,
        ..Default::default()
    };
    let answered = admin
        .add_server(pb::AddServerRequest {
            spec: Some(spec(&url, 30_000)),
        })
        .await
        .expect("AddServer")
        .into_inner()
        .spec
        .unwrap();
    let shown = answered.url.clone();
    assert!(!shown.contains("SECRET"), "{shown}");
    assert!(
        shown.contains("alice:[redacted]@")
            && shown.ends_with("?api_key=[redacted]&team=blue;sig=[redacted]#[redacted]"),
        "{shown}"
    );
    let listed = ok_stdout(
        &gw.cli(&["servers", "list", "--json"]).await,
        "servers list",
    );
    assert!(!listed.contains("SECRET"), "{listed}");
    gw.wait_servers_up(&["keyed"], LIMIT).await;
    // In the store, the secret parts are sealed (opened for the sidecar's
    // file below).
    for secret in ["PW-SECRET", "QS-SECRET", "SIG-SECRET", "F-SECRET"] {
        assert!(
            !gw.store_holds(secret),
            "the store holds {secret} in plain text"
        );
    }

    // Sent back as answered, with another timeout: the stored URL stays,
    // and the new sidecar's file has it.
    let before = gw.sidecars_of("keyed");
    admin
        .update_server(pb::UpdateServerRequest {
            spec: Some(spec(&shown, 31_000)),
        })
        .await
        .expect("UpdateServer");
    eventually("keyed's new sidecar", LIMIT, || {
        let now = gw.sidecars_of("keyed");
        let before = before.clone();
        async move {
            if now.len() == 1 && now != before {
                Ok(now[0])
            } else {
                Err(format!("{now:?}"))
            }
        }
    })
    .await;
    let pid = gw.sidecars_of("keyed")[0];
    let file = sidecar_config_file(pid, "keyed").expect("the sidecar's --config");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("alice:PW-SECRET@")
            && text.contains("api_key=QS-SECRET&team=blue;sig=SIG-SECRET#frag=F-SECRET"),
        "{text}"
    );
    gw.wait_servers_up(&["keyed"], LIMIT).await;

    // Edited as shown (another team), the stored secrets stay; moved to
    // another host with them shown redacted, refused.
    let edited = shown.replace("team=blue", "team=red");
    let answered = admin
        .update_server(pb::UpdateServerRequest {
            spec: Some(spec(&edited, 31_000)),
        })
        .await
        .expect("UpdateServer")
        .into_inner()
        .spec
        .unwrap();
    assert!(
        answered.url.contains("?api_key=[redacted]&team=red;"),
        "{}",
        answered.url
    );
    eventually(
        "keyed's sidecar file has the stored key and the new team",
        LIMIT,
        || async {
            let Some(pid) = gw.sidecars_of("keyed").first().copied() else {
                return Err("no sidecar".to_owned());
            };
            let file = sidecar_config_file(pid, "keyed").ok_or("no --config")?;
            let text = std::fs::read_to_string(&file).map_err(|e| e.to_string())?;
            if text.contains("api_key=QS-SECRET&team=red;sig=SIG-SECRET#frag=F-SECRET")
                && text.contains("alice:PW-SECRET@")
            {
                Ok(())
            } else {
                Err(text)
            }
        },
    )
    .await;
    for secret in ["PW-SECRET", "QS-SECRET", "SIG-SECRET", "F-SECRET"] {
        assert!(
            !gw.store_holds(secret),
            "after updates, the store holds {secret} in plain text"
        );
    }
    let moved = shown.replace("127.0.0.1", "localhost");
    let e = admin
        .update_server(pb::UpdateServerRequest {
            spec: Some(spec(&moved, 31_000)),
        })
        .await
        .expect_err("the secrets are not for another host");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("another scheme, host or port"),
        "{}",
        e.message()
    );
    gw.stop().await;
}

/// `switchyard servers update` changes only the settings given: a variable
/// set and one removed, the timeout; the secret-looking variable it does
/// not mention (answered `[redacted]`) keeps its value in the new
/// sidecar's file, and the server answers through the new sidecar. It
/// refuses an update with nothing to change and an unknown `--unset-env`
/// name (exit 64).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_update_changes_only_the_settings_given() {
    let _serial = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let reference = reference_server_bin();
    let out = gw
        .cli(&[
            "servers",
            "add",
            "--name",
            "upd",
            "--transport",
            "stdio",
            "--command",
            reference.to_str().unwrap(),
            "--env",
            "OLD=1",
            "--env",
            "API_TOKEN=tok-SECRET",
        ])
        .await;
    assert!(ok_stdout(&out, "servers add").starts_with("added upd (up)"));
    let before = gw.sidecars_of("upd");

    // Another environment may run other code with the token: it must be
    // given again.
    let mut env_update = vec![
        "servers",
        "update",
        "upd",
        "--env",
        "NEW=2",
        "--unset-env",
        "OLD",
        "--request-timeout-sec",
        "45",
    ];
    let out = gw.cli(&env_update).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("--env API_TOKEN=…"), "{err}");
    env_update.extend(["--env", "API_TOKEN=tok-SECRET"]);
    let out = gw.cli(&env_update).await;
    let text = ok_stdout(&out, "servers update");
    assert_eq!(text.trim(), "updated upd (up)", "{out:?}");
    let after = gw.sidecars_of("upd");
    assert!(
        after.iter().any(|p| !before.contains(p)),
        "a new sidecar: {before:?} then {after:?}"
    );
    let mut admin = gw.admin().await;
    let spec = admin
        .get_server_status(pb::GetServerStatusRequest { name: "upd".into() })
        .await
        .expect("status")
        .into_inner()
        .spec
        .unwrap();
    assert_eq!(spec.request_timeout_ms, 45_000);
    assert_eq!(spec.command, reference.to_str().unwrap());
    let env: Vec<(&str, &str)> = spec
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .collect();
    assert_eq!(env, [("API_TOKEN", "[redacted]"), ("NEW", "2")]);
    let pid = *gw
        .sidecars_of("upd")
        .iter()
        .find(|p| !before.contains(p))
        .unwrap();
    let file = sidecar_config_file(pid, "upd").expect("the sidecar's --config");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("tok-SECRET") && !text.contains("OLD"),
        "{text}"
    );
    let mut engine = engine(&gw.endpoint).await.expect("engine");
    get_order(&mut engine, "upd__get_order", "")
        .await
        .expect("a call through the new sidecar");

    // Only the timeout: the token shown [redacted] is kept.
    let before = gw.sidecars_of("upd");
    let out = gw
        .cli(&["servers", "update", "upd", "--request-timeout-sec", "46"])
        .await;
    assert_eq!(ok_stdout(&out, "servers update").trim(), "updated upd (up)");
    let pid = *gw
        .sidecars_of("upd")
        .iter()
        .find(|p| !before.contains(p))
        .expect("a new sidecar");
    let file = sidecar_config_file(pid, "upd").expect("the sidecar's --config");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("tok-SECRET"), "{text}");

    // The same value again: nothing to wait for.
    let out = gw
        .cli(&["servers", "update", "upd", "--request-timeout-sec", "46"])
        .await;
    assert_eq!(
        ok_stdout(&out, "servers update").trim(),
        "upd unchanged (up)"
    );
    // So is the same secret given again (compared opened by the control
    // plane: the CLI only has `[redacted]`), at once, exit 0.
    let out = gw
        .cli(&["servers", "update", "upd", "--env", "API_TOKEN=tok-SECRET"])
        .await;
    assert_eq!(
        ok_stdout(&out, "servers update").trim(),
        "upd unchanged (up)"
    );

    // A command that cannot start: refused while the token would go to it
    // unseen; given up, stored, and exit 1 once no sidecar with it
    // connected in time (the previous one serves meanwhile).
    let broken = [
        "servers",
        "update",
        "upd",
        "--command",
        "/nonexistent/server",
    ];
    let out = gw.cli(&broken).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("--env API_TOKEN=…"), "{err}");
    let mut args = broken.to_vec();
    args.extend(["--unset-env", "API_TOKEN", "--timeout", "3"]);
    let out = gw.cli(&args).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no sidecar of upd with the new settings connected within 3 s"),
        "{err}"
    );
    // Fixed: up again, through a new sidecar, with no earlier one left.
    let out = gw
        .cli(&[
            "servers",
            "update",
            "upd",
            "--command",
            reference.to_str().unwrap(),
        ])
        .await;
    assert_eq!(ok_stdout(&out, "servers update").trim(), "updated upd (up)");
    get_order(&mut engine, "upd__get_order", "")
        .await
        .expect("a call after the fix");

    for (args, says) in [
        (
            &["servers", "update", "upd"][..],
            "nothing to change for upd",
        ),
        (
            &["servers", "update", "upd", "--unset-env", "OLD"][..],
            "--unset-env \"OLD\": the server has no such entry",
        ),
        (
            &[
                "servers",
                "update",
                "upd",
                "--request-timeout-sec",
                "604801",
            ][..],
            "604801",
        ),
    ] {
        let out = gw.cli(args).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = gw
        .cli(&["servers", "update", "nowhere", "--env", "A=1"])
        .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("nowhere"), "{err}");
    gw.stop().await;
}

/// An OAuth server's pre-registered client secret, given once, is never
/// answered; an update that sends the answered spec back (another
/// timeout) keeps it for the same client, and one for another client
/// drops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_keeps_the_oauth_client_secret_it_does_not_repeat() {
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let mut admin = gw.admin().await;
    let added = admin
        .add_server(pb::AddServerRequest {
            spec: Some(pb::ServerSpec {
                name: "confidential".into(),
                transport: pb::Transport::Http as i32,
                url: "https://mcp.example.com/mcp".into(),
                auth: "oauth".into(),
                oauth: Some(pb::OAuthSettings {
                    client_id: "switchyard-test".into(),
                    client_secret: "CLIENT-SECRET-1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
        .await
        .expect("AddServer")
        .into_inner()
        .spec
        .unwrap();
    let oauth = added.oauth.clone().unwrap();
    assert!(
        oauth.has_client_secret && oauth.client_secret.is_empty(),
        "{oauth:?}"
    );
    let update = |spec: pb::ServerSpec| pb::UpdateServerRequest { spec: Some(spec) };
    let answered = admin
        .update_server(update(pb::ServerSpec {
            request_timeout_ms: 45_000,
            ..added.clone()
        }))
        .await
        .expect("UpdateServer")
        .into_inner()
        .spec
        .unwrap();
    assert_eq!(answered.request_timeout_ms, 45_000);
    assert!(
        answered.oauth.as_ref().unwrap().has_client_secret,
        "the secret was dropped: {answered:?}"
    );
    // Another host: the secret is not sent there.
    let moved = admin
        .update_server(update(pb::ServerSpec {
            url: "https://elsewhere.example.com/mcp".into(),
            ..answered.clone()
        }))
        .await
        .expect("UpdateServer")
        .into_inner()
        .spec
        .unwrap();
    assert!(
        !moved.oauth.as_ref().unwrap().has_client_secret,
        "the secret was kept for another host: {moved:?}"
    );
    let mut other = answered.clone();
    other.oauth.as_mut().unwrap().client_id = "another-client".into();
    let answered = admin
        .update_server(update(other))
        .await
        .expect("UpdateServer")
        .into_inner()
        .spec
        .unwrap();
    assert!(
        !answered.oauth.as_ref().unwrap().has_client_secret,
        "another client's secret was kept: {answered:?}"
    );
    gw.stop().await;
}

/// Header and environment values sent back `[redacted]` keep their
/// stored secrets only while they go where they went: an HTTP server's
/// URL on the same origin, a stdio server's same command. Pointed
/// elsewhere, or for a name the stored spec lacks, the update is refused
/// and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redacted_secrets_are_not_carried_to_another_host_or_command() {
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let mut admin = gw.admin().await;
    let http = pb::ServerSpec {
        name: "keyed".into(),
        transport: pb::Transport::Http as i32,
        url: "http://127.0.0.1:9/mcp".into(),
        headers: [("Authorization".into(), "Bearer H-SECRET".into())].into(),
        ..Default::default()
    };
    let stdio = pb::ServerSpec {
        name: "tokened".into(),
        transport: pb::Transport::Stdio as i32,
        command: "/bin/true".into(),
        env: [("GITHUB_TOKEN".into(), "E-SECRET".into())].into(),
        ..Default::default()
    };
    let mut answered = Vec::new();
    for spec in [http, stdio] {
        answered.push(
            admin
                .add_server(pb::AddServerRequest { spec: Some(spec) })
                .await
                .expect("AddServer")
                .into_inner()
                .spec
                .unwrap(),
        );
    }
    let (http, stdio) = (answered[0].clone(), answered[1].clone());
    assert_eq!(http.headers["Authorization"], "[redacted]");
    assert_eq!(stdio.env["GITHUB_TOKEN"], "[redacted]");
    let refused = [
        (
            pb::ServerSpec {
                url: "http://127.0.0.2:9/mcp".into(),
                ..http.clone()
            },
            "spec.headers.Authorization: shows [redacted], but the server now points elsewhere",
        ),
        (
            pb::ServerSpec {
                command: "/bin/sh".into(),
                ..stdio.clone()
            },
            "spec.env.GITHUB_TOKEN: shows [redacted], but the server now points elsewhere",
        ),
        // Another PATH or working directory may run another program, and
        // a variable with a secret-looking name may be an address.
        (
            pb::ServerSpec {
                env: [
                    ("GITHUB_TOKEN".into(), "[redacted]".into()),
                    ("AUTH_TOKEN_URL".into(), "http://127.0.0.1:9/steal".into()),
                ]
                .into(),
                ..stdio.clone()
            },
            "spec.env.GITHUB_TOKEN: shows [redacted], but the server now points elsewhere",
        ),
        (
            pb::ServerSpec {
                env: [
                    ("GITHUB_TOKEN".into(), "[redacted]".into()),
                    ("PATH".into(), "/tmp/evil:/usr/bin".into()),
                ]
                .into(),
                ..stdio.clone()
            },
            "spec.env.GITHUB_TOKEN: shows [redacted], but the server now points elsewhere",
        ),
        (
            pb::ServerSpec {
                cwd: "/tmp".into(),
                ..stdio.clone()
            },
            "spec.env.GITHUB_TOKEN: shows [redacted], but the server now points elsewhere",
        ),
        (
            pb::ServerSpec {
                headers: [("X-Api-Key".into(), "[redacted]".into())].into(),
                ..http.clone()
            },
            "spec.headers.X-Api-Key: shows [redacted], which the stored spec does not have",
        ),
    ];
    for (spec, says) in refused {
        let e = admin
            .update_server(pb::UpdateServerRequest { spec: Some(spec) })
            .await
            .expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(says), "{}", e.message());
    }
    // The same origin (another path) keeps the header; the stored spec
    // was not changed by the refusals.
    admin
        .update_server(pb::UpdateServerRequest {
            spec: Some(pb::ServerSpec {
                url: "http://127.0.0.1:9/other".into(),
                ..http.clone()
            }),
        })
        .await
        .expect("the same origin");
    let status = admin
        .get_server_status(pb::GetServerStatusRequest {
            name: "tokened".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.spec.unwrap().command, "/bin/true");
    gw.stop().await;
}

/// A stdio server whose arguments carry secrets (`--api-key K`, a
/// connection URL with a password): answers, the CLI and the sidecar's
/// messages show them `[redacted]`, the store holds them sealed, and the
/// server gets them; a tool that echoes them gives the engine
/// `[redacted]`. An update that sends the arguments back as answered
/// keeps them; one that moves a redacted argument or changes the command
/// is refused (INVALID_ARGUMENT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_arguments_are_redacted_sealed_and_kept_by_an_update() {
    let _serial = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let mut admin = gw.admin().await;
    let key = format!("K-{}", switchyard_common::ids::new_id());
    let password = format!("PW-{}", switchyard_common::ids::new_id());
    let crashy = switchyard_test_support::stub_script("crashy.py");
    // The server writes the arguments it got here (`argv` answers the
    // engine with them scrubbed).
    let argv_file = tempfile::NamedTempFile::new().unwrap();
    let argv_path = argv_file.path().to_string_lossy().into_owned();
    let args = vec![
        crashy.to_string_lossy().into_owned(),
        "--api-key".into(),
        key.clone(),
        format!("postgresql://app:{password}@db:5432/orders"),
    ];
    let spec = |args: Vec<String>, command: &str, timeout_ms| pb::ServerSpec {
        name: "argued".into(),
        transport: pb::Transport::Stdio as i32,
        command: command.into(),
        args,
        env: [
            ("STUB_ARGV_FILE".to_owned(), argv_path.clone()),
            // A secret in a value, under a plain name: redacted and sealed.
            (
                "DATABASE_URL".to_owned(),
                format!("postgresql://app:{password}@db:5432/orders"),
            ),
        ]
        .into(),
        request_timeout_ms: timeout_ms,
        ..Default::default()
    };
    let answered = admin
        .add_server(pb::AddServerRequest {
            spec: Some(spec(args.clone(), "python3", 30_000)),
        })
        .await
        .expect("AddServer")
        .into_inner()
        .spec
        .unwrap();
    assert_eq!(answered.env["DATABASE_URL"], "[redacted]");
    assert_eq!(answered.env["STUB_ARGV_FILE"], argv_path);
    let shown = answered.args;
    assert_eq!(
        shown[1..],
        [
            "--api-key",
            "[redacted]",
            "postgresql://app:[redacted]@db:5432/orders"
        ]
    );
    gw.wait_servers_up(&["argued"], LIMIT).await;
    let argv = || async {
        let resp = gw
            .engine()
            .await
            .call_tool(call_request("argued__argv", "{}", ""))
            .await
            .expect("argv")
            .into_inner();
        serde_json::from_str::<Vec<String>>(&resp.text).expect("a JSON list")
    };
    let got = || {
        let text = std::fs::read_to_string(&argv_path).unwrap();
        serde_json::from_str::<Vec<String>>(&text).expect("a JSON list")
    };
    assert_eq!(got(), args[1..], "the server got the secrets");
    // The URL argument is `DATABASE_URL`'s value too, a secret whole.
    assert_eq!(
        argv().await,
        ["--api-key", "[redacted]", "[redacted]"],
        "the engine got them scrubbed"
    );
    let cli = ok_stdout(
        &gw.cli(&["servers", "status", "argued"]).await,
        "servers status",
    );
    for secret in [&key, &password] {
        assert!(
            !gw.store_holds(secret),
            "the store holds an argument's secret"
        );
        assert!(!cli.contains(secret.as_str()), "{cli}");
    }

    // Sent back as answered, with another timeout: the new sidecar's
    // server gets the stored arguments.
    std::fs::write(&argv_path, "[]").unwrap();
    let before = gw.sidecars_of("argued");
    admin
        .update_server(pb::UpdateServerRequest {
            spec: Some(spec(shown.clone(), "python3", 31_000)),
        })
        .await
        .expect("UpdateServer");
    eventually("argued's new sidecar is up", LIMIT, || {
        let now = gw.sidecars_of("argued");
        let before = before.clone();
        async move {
            match now.len() == 1 && now != before {
                true => Ok(()),
                false => Err(format!("{now:?}")),
            }
        }
    })
    .await;
    gw.wait_servers_up(&["argued"], LIMIT).await;
    assert_eq!(got(), args[1..], "the stored secrets were kept");
    for secret in [&key, &password] {
        assert!(
            !gw.store_holds(secret),
            "after the update, the store holds an argument's secret"
        );
    }

    // A redacted argument moved, or another command: refused, naming it.
    let mut moved = shown.clone();
    moved.insert(1, "--verbose".into());
    for (sent, says) in [
        (
            spec(moved, "python3", 31_000),
            "spec.args: shows [redacted], but the server's command, arguments, cwd or environment changed",
        ),
        (
            spec(shown.clone(), "/bin/sh", 31_000),
            "spec.args: shows [redacted], but the server's command, arguments, cwd or environment changed",
        ),
    ] {
        let e = admin
            .update_server(pb::UpdateServerRequest { spec: Some(sent) })
            .await
            .expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(says), "{}", e.message());
    }

    // A new server with a value shown [redacted]: there is nothing to
    // keep, and it would be sent as the credential.
    let mut literal = spec(shown.clone(), "python3", 30_000);
    literal.name = "argued-literal".into();
    let e = admin
        .add_server(pb::AddServerRequest {
            spec: Some(literal),
        })
        .await
        .expect_err("refused");
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().starts_with("spec.args[2]: shows [redacted]"),
        "{}",
        e.message()
    );

    // A command that cannot start: its error shows the arguments redacted.
    let mut bad = spec(
        args.clone(),
        "/nonexistent/switchyard-no-such-server",
        30_000,
    );
    bad.name = "argued-bad".into();
    admin
        .add_server(pb::AddServerRequest { spec: Some(bad) })
        .await
        .expect("AddServer");
    let why = eventually("argued-bad says why it is down", LIMIT, || async {
        let s = gw
            .admin()
            .await
            .get_server_status(pb::GetServerStatusRequest {
                name: "argued-bad".into(),
            })
            .await
            .unwrap()
            .into_inner();
        s.sidecars
            .iter()
            .map(|c| c.last_error.clone())
            .find(|e| e.contains("switchyard-no-such-server"))
            .ok_or(format!("{:?}", s.sidecars))
    })
    .await;
    assert!(why.contains("--api-key [redacted]"), "{why}");
    for secret in [&key, &password] {
        assert!(!why.contains(secret.as_str()), "{why}");
        assert!(
            !gw.log().contains(secret.as_str()),
            "a secret argument is in a log"
        );
    }
    // Removed: the sidecar's file, which holds the secrets opened, goes.
    let pid = gw.sidecars_of("argued")[0];
    let file = sidecar_config_file(pid, "argued").expect("the sidecar's --config");
    assert!(std::fs::read_to_string(&file).unwrap().contains(&key));
    admin
        .remove_server(pb::RemoveServerRequest {
            name: "argued".into(),
        })
        .await
        .expect("RemoveServer");
    eventually("the removed server's file is gone", LIMIT, || async {
        match Path::new(&file).exists() {
            false => Ok(()),
            true => Err(file.clone()),
        }
    })
    .await;
    gw.stop().await;
}

/// A secret typed in the wrong place (a token as the URL, as `auth`, a
/// header or variable without its separator, in a metadata URL's query)
/// is refused as invalid, and the refusal names the field without
/// repeating the value: on the admin API, the console's API and the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_never_repeat_a_secret_typed_in_the_wrong_place() {
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let mut admin = gw.admin().await;
    let http = |url: &str| pb::ServerSpec {
        name: "wrong".into(),
        transport: pb::Transport::Http as i32,
        url: url.to_owned(),
        ..Default::default()
    };
    let oauth = |metadata: &str| pb::ServerSpec {
        auth: "oauth".into(),
        oauth: Some(pb::OAuthSettings {
            client_metadata_url: metadata.to_owned(),
            ..Default::default()
        }),
        ..http("https://mcp.example.com/mcp")
    };
    for (spec, field) in [
        (http("Bearer ghp_SECRET-1"), "url"),
        (
            pb::ServerSpec {
                auth: "ghp_SECRET-2".into(),
                ..http("http://127.0.0.1:9/mcp")
            },
            "auth",
        ),
        (
            oauth("http://cimd.example/doc?token=SECRET-3"),
            "client_metadata_url",
        ),
        (oauth("ghp_SECRET-4"), "client_metadata_url"),
        (
            pb::ServerSpec {
                era: "ghp_SECRET-8".into(),
                ..http("http://127.0.0.1:9/mcp")
            },
            "era",
        ),
        (
            pb::ServerSpec {
                headers: [("Authorization: Bearer ghp_SECRET-9".into(), "".into())].into(),
                ..http("http://127.0.0.1:9/mcp")
            },
            "headers",
        ),
        (
            pb::ServerSpec {
                header_files: [("Authorization".into(), "Bearer ghp_SECRET-10".into())].into(),
                ..http("http://127.0.0.1:9/mcp")
            },
            "header_files.Authorization",
        ),
    ] {
        let e = admin
            .add_server(pb::AddServerRequest { spec: Some(spec) })
            .await
            .expect_err("refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(field), "{}", e.message());
        assert!(!e.message().contains("SECRET"), "{}", e.message());
    }
    for args in [
        &["--url", "Bearer ghp_SECRET-5"][..],
        &[
            "--url",
            "http://127.0.0.1:9/mcp",
            "--header",
            "Authorization=Bearer ghp_SECRET-6",
        ],
        &["--url", "http://127.0.0.1:9/mcp", "--env", "ghp_SECRET-7"],
        &["--url", "http://127.0.0.1:9/mcp", "--auth", "ghp_SECRET-11"],
        &[
            "--url",
            "http://127.0.0.1:9/mcp",
            "--header-file",
            "Authorization: Bearer ghp_SECRET-12",
        ],
    ] {
        let mut all = vec!["servers", "add", "--name", "wrong", "--transport", "http"];
        all.extend_from_slice(args);
        let out = gw.cli(&all).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(!err.contains("SECRET"), "{args:?}: {err}");
    }
    let out = gw.cli(&["servers", "list", "--json"]).await;
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("\"wrong\""),
        "nothing was added"
    );
    // An OAuth server that cannot be reached: the refusal of its
    // authorization names it without its URL's secrets.
    admin
        .add_server(pb::AddServerRequest {
            spec: Some(pb::ServerSpec {
                name: "unreachable".into(),
                auth: "oauth".into(),
                ..http("http://alice:PW-SECRET@127.0.0.1:9/mcp/sk-ak-3f9a8B7c6D5e4F3g2H1i?api_key=Q-SECRET#F-SECRET")
            }),
        })
        .await
        .expect("AddServer");
    let out = gw
        .cli(&["servers", "authorize", "unreachable", "--no-wait"])
        .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("cannot be reached"), "{err}");
    for secret in ["SECRET", "sk-ak-"] {
        assert!(!err.contains(secret), "{err}");
    }
    gw.stop().await;
}

/// `switchyard up` stopped (SIGTERM) while a changed server's old sidecar
/// is still stopping waits for it: that sidecar finishes its stop
/// sequence and its server is stopped, never left running without a
/// parent. The old server ignores both the closed stdin and SIGTERM, so
/// only its sidecar's last step (SIGKILL, 2 x 5 s after its drain) stops
/// it; the new one (the update drops those settings) stops at once and
/// nothing is in flight, so `up` would be done long before the old
/// sidecar if it did not wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_stopped_during_a_handover_leaves_no_server_running() {
    let _serial = HEAVY.lock().await;
    let http = start_http_reference_server().await;
    let crashy = switchyard_test_support::stub_script("crashy.py");
    let servers = format!(
        "{}[servers.env]\nSTUB_IGNORE_EOF = \"1\"\nSTUB_IGNORE_SIGTERM = \"1\"\n",
        stdio_server_toml(
            "stubborn",
            Path::new("python3"),
            &[crashy.to_str().unwrap()]
        )
    );
    let gw = Gateway::start_with(
        StoreKind::Embedded,
        10,
        http,
        &servers,
        "[up]\nsidecar_grace_secs = 5\n",
        &[],
        &["stubborn"],
    )
    .await;
    let servers_running = || -> Vec<u32> {
        descendants(gw.pid)
            .into_iter()
            .filter(|p| cmdline(*p).contains("crashy.py"))
            .collect()
    };
    let mut admin = gw.admin().await;
    let mut spec = admin
        .get_server_status(pb::GetServerStatusRequest {
            name: "stubborn".into(),
        })
        .await
        .expect("status")
        .into_inner()
        .spec
        .unwrap();
    let old_server = servers_running();
    assert_eq!(old_server.len(), 1, "{old_server:?}");
    spec.env.clear();
    admin
        .update_server(pb::UpdateServerRequest { spec: Some(spec) })
        .await
        .expect("UpdateServer");
    // Stop `up` once the handover is done: the new sidecar is connected
    // and `up` has begun stopping the old one (it is no longer among the
    // sidecars `up` manages or retires, only among those it stops).
    eventually("up stopping the previous sidecar", LIMIT, || async {
        if gw
            .log()
            .contains("stopping the previous sidecar: its successor is connected")
        {
            Ok(())
        } else {
            Err("not yet".to_owned())
        }
    })
    .await;
    assert!(alive(old_server[0]), "the old server is still stopping");
    let pids = servers_running();
    assert!(pids.contains(&old_server[0]), "{pids:?}");
    signal(gw.pid, nix::sys::signal::Signal::SIGTERM);
    eventually("up exited", LIMIT, || async {
        if alive(gw.pid) {
            Err("still running".to_owned())
        } else {
            Ok(())
        }
    })
    .await;
    let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    for p in &left {
        signal(*p, nix::sys::signal::Signal::SIGKILL);
    }
    assert!(
        left.is_empty(),
        "servers left running after up stopped: {left:?} of {pids:?}\n{}",
        gw.log()
    );
    gw.stop().await;
}
