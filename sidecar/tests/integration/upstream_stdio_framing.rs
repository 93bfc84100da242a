//! Stdio framing robustness against real misbehaving server processes
//! (`tests/peers/servers/`): junk on stdout, messages torn across writes
//! (inside multi-byte UTF-8 characters too), huge lines over the size limit,
//! notifications and server requests before the handshake ends, a server
//! without tools, and many requests in flight on one connection.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use switchyard_sidecar::upstream::{
    StdioConfig, TransportConfig, Upstream, UpstreamConfig, UpstreamError,
};
use switchyard_test_support::{self as support, stub_script};
use tokio::sync::broadcast;

use crate::common::{HEAVY, counter, upstream, upstream_with_registry};

/// Upper bound on any single wait; a bug fails the test instead of hanging it.
const LIMIT: Duration = Duration::from_secs(30);
const MIB: usize = 1024 * 1024;

fn config(name: &str, script: &str, env: &[(&str, &str)]) -> UpstreamConfig {
    UpstreamConfig::new(
        name,
        TransportConfig::Stdio(StdioConfig {
            command: "python3".into(),
            args: vec![stub_script(script).display().to_string()],
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            cwd: None,
        }),
    )
}

async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut).await.expect("timed out")
}

async fn call(up: &Upstream, tool: &str, arguments: Value) -> Result<Value, UpstreamError> {
    within(up.call_tool(json!({"name": tool, "arguments": arguments}))).await
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text content in {result}"))
}

async fn echo(up: &Upstream, message: &str) -> String {
    let result = call(up, "echo", json!({"message": message})).await.unwrap();
    text_of(&result).to_owned()
}

/// The next notification with `method`, skipping others.
async fn next_notification(rx: &mut broadcast::Receiver<Value>, method: &str) -> Value {
    within(async {
        loop {
            let msg = rx.recv().await.expect("notification stream ended");
            if msg["method"] == method {
                return msg;
            }
        }
    })
    .await
}

// ---- 1. noise on stdout --------------------------------------------------

/// What `noisy_stdout.py` prints, in its order, and the skip reason our
/// reader must count for each line (`None`: blank, skipped silently).
const NOISE: [Option<&str>; 11] = [
    Some("not_json"),    // === banner ===
    Some("not_json"),    // Loading...
    Some("not_jsonrpc"), // [1,2]
    Some("not_jsonrpc"), // {"hello":1}
    None,                // empty line
    Some("not_jsonrpc"), // 42
    Some("not_jsonrpc"), // null
    Some("not_jsonrpc"), // "just a string"
    Some("not_json"),    // {not json at all
    None,                // whitespace only
    Some("not_json"),    // Ready.
];

/// Expected (not_json, not_jsonrpc) counts: the startup burst plus
/// `per_msg` noise lines before each of `messages` real messages.
fn expected_noise(per_msg: usize, messages: usize) -> (u64, u64) {
    let burst = NOISE.iter();
    let cycled = NOISE.iter().cycle().take(per_msg * messages);
    let all: Vec<_> = burst.chain(cycled).collect();
    let count = |reason| all.iter().filter(|r| ***r == Some(reason)).count() as u64;
    (count("not_json"), count("not_jsonrpc"))
}

#[tokio::test]
async fn noisy_stdout_lines_are_skipped_and_counted() {
    let (up, registry) = upstream_with_registry(config(
        "noisy",
        "noisy_stdout.py",
        &[("STUB_NOISE_PER_MSG", "3")],
    ));
    let negotiated = within(up.connect()).await.unwrap();
    assert_eq!(negotiated.server_info["name"], "noisy-stdout");

    let tools = within(up.list_tools()).await.unwrap().entries;
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0]["name"], "echo");
    for i in 0..5 {
        let message = format!("hello {i} ✓");
        assert_eq!(echo(&up, &message).await, message);
    }

    // Messages from the server: the server/discover error, the initialize
    // result, tools/list, 5 echoes; each preceded by 3 noise lines.
    let (not_json, not_jsonrpc) = expected_noise(3, 8);
    let skipped = "switchyard_sidecar_upstream_skipped_messages_total";
    assert_eq!(
        counter(
            &registry,
            skipped,
            &[("server", "noisy"), ("reason", "not_json")]
        ),
        not_json
    );
    assert_eq!(
        counter(
            &registry,
            skipped,
            &[("server", "noisy"), ("reason", "not_jsonrpc")]
        ),
        not_jsonrpc
    );
    assert_eq!(
        counter(&registry, skipped, &[("server", "noisy")]),
        not_json + not_jsonrpc,
        "blank lines are not counted, nothing else was skipped"
    );
    assert_eq!(up.connection_attempts(), 1, "no reconnect");
    up.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn noise_only_at_startup_is_counted_exactly() {
    let (up, registry) = upstream_with_registry(config(
        "burst",
        "noisy_stdout.py",
        &[("STUB_NOISE_PER_MSG", "0")],
    ));
    assert_eq!(echo(&up, "after the banner").await, "after the banner");
    let skipped = "switchyard_sidecar_upstream_skipped_messages_total";
    assert_eq!(counter(&registry, skipped, &[("reason", "not_json")]), 4);
    assert_eq!(counter(&registry, skipped, &[("reason", "not_jsonrpc")]), 5);
    up.shutdown(Duration::from_secs(1)).await;
}

// ---- 2. split writes -----------------------------------------------------

/// `split_writes.py`'s fixed text: 4-byte emoji, a variation selector,
/// CJK, a check mark, an em dash, a 2-byte é.
const UNICODE: &str = "🚂🛤️ 中文测试 ✓ 日本語 — café";

async fn split_writes_round_trip(env: &[(&str, &str)]) {
    let up = upstream(config("split", "split_writes.py", env));
    let mut notes = up.subscribe();

    let unicode = call(&up, "unicode", json!({})).await.unwrap();
    assert_eq!(text_of(&unicode), UNICODE, "env {env:?}");
    assert_eq!(text_of(&unicode).len(), UNICODE.len());

    let message = "emoji 🚂🛤️🎉, CJK 中文测试 日本語 한국어, accents naïve café ✓ — done";
    assert_eq!(echo(&up, message).await, message, "env {env:?}");

    // One chunked stream holds the notification and the reply, so a write
    // straddles the newline between them: both must arrive whole.
    let reply = call(&up, "notify_echo", json!({"message": message}))
        .await
        .unwrap();
    assert_eq!(text_of(&reply), message);
    let note = next_notification(&mut notes, "notifications/message").await;
    assert_eq!(note["params"]["data"], UNICODE);
    assert_eq!(note["params"]["logger"], "split");

    assert_eq!(up.connection_attempts(), 1);
    up.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn messages_split_inside_utf8_characters_arrive_intact() {
    split_writes_round_trip(&[]).await;
}

#[tokio::test]
async fn messages_split_into_single_bytes_arrive_intact() {
    for seed in ["2", "3"] {
        split_writes_round_trip(&[
            ("STUB_CHUNK_MAX", "1"),
            ("STUB_CHUNK_DELAY_MS", "0"),
            ("STUB_SEED", seed),
        ])
        .await;
    }
}

// ---- 3. big messages -----------------------------------------------------

#[tokio::test]
async fn a_300_kb_reply_arrives_whole() {
    let up = upstream(config("big", "big_messages.py", &[]));
    let result = call(&up, "big", json!({"bytes": 300_000})).await.unwrap();
    let text = text_of(&result);
    assert_eq!(text.len(), 300_000, "exact UTF-8 byte length");
    assert!(text.starts_with("switchyard ✓ é 日本語 🚂 0123456789 | "));
    assert_eq!(echo(&up, "still here").await, "still here");
    up.shutdown(Duration::from_secs(1)).await;
}

/// An oversized reply fails its own request with `MessageTooLarge`; the
/// connection carries on (same process, next line framed correctly).
async fn oversized_reply_fails_only_its_request(
    limit: Option<usize>,
    reply_bytes: usize,
    id_last: bool,
) {
    let mut cfg = config(
        "big",
        "big_messages.py",
        &[("STUB_ID_LAST", if id_last { "1" } else { "0" })],
    );
    if let Some(limit) = limit {
        cfg.max_message_bytes = limit;
    }
    let limit = cfg.max_message_bytes;
    let (up, registry) = upstream_with_registry(cfg);
    within(up.connect()).await.unwrap();
    let pid = up.pid().expect("a running process");

    let err = call(&up, "big", json!({"bytes": reply_bytes}))
        .await
        .unwrap_err();
    match &err {
        UpstreamError::MessageTooLarge {
            server,
            method,
            size,
            limit: l,
        } => {
            assert_eq!(server, "big");
            assert_eq!(method, "tools/call");
            assert!(*size > reply_bytes, "size {size} counts the whole line");
            assert_eq!(*l, limit);
        }
        other => panic!("expected MessageTooLarge, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("server big: response to tools/call"),
        "{err}"
    );

    assert_eq!(
        echo(&up, "after the big one ✓").await,
        "after the big one ✓"
    );
    assert_eq!(
        up.pid(),
        Some(pid),
        "same process: framing recovered without a restart"
    );
    assert_eq!(up.connection_attempts(), 1);
    assert_eq!(
        counter(
            &registry,
            "switchyard_sidecar_upstream_skipped_messages_total",
            &[("reason", "oversized")]
        ),
        1
    );
    up.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_reply_over_the_configured_limit_fails_only_that_request() {
    let _heavy = HEAVY.lock().await;
    oversized_reply_fails_only_its_request(Some(MIB), 2 * MIB, true).await;
    oversized_reply_fails_only_its_request(Some(MIB), 2 * MIB, false).await;
}

#[tokio::test]
async fn a_reply_over_the_default_16_mib_limit_fails_only_that_request() {
    let _heavy = HEAVY.lock().await;
    oversized_reply_fails_only_its_request(None, 17 * MIB, true).await;
}

#[tokio::test]
async fn an_oversized_notification_is_dropped() {
    let _heavy = HEAVY.lock().await;
    let mut cfg = config("big", "big_messages.py", &[]);
    cfg.max_message_bytes = MIB;
    let (up, registry) = upstream_with_registry(cfg);
    let mut notes = up.subscribe();
    within(up.connect()).await.unwrap();
    let pid = up.pid();

    let reply = call(&up, "big_notification", json!({"bytes": 2 * MIB}))
        .await
        .unwrap();
    assert_eq!(text_of(&reply), format!("sent {}", 2 * MIB));
    // The reply came after the notification on the same stream, so a
    // notification that got through would already be queued.
    assert!(
        matches!(notes.try_recv(), Err(broadcast::error::TryRecvError::Empty)),
        "the oversized notification must not be delivered"
    );
    // A small one still is.
    let reply = call(&up, "big_notification", json!({"bytes": 1000}))
        .await
        .unwrap();
    assert_eq!(text_of(&reply), "sent 1000");
    let note = next_notification(&mut notes, "notifications/message").await;
    assert_eq!(note["params"]["data"].as_str().unwrap().len(), 1000);

    assert_eq!(
        counter(
            &registry,
            "switchyard_sidecar_upstream_skipped_messages_total",
            &[("reason", "oversized")]
        ),
        1
    );
    assert_eq!(up.pid(), pid);
    up.shutdown(Duration::from_secs(1)).await;
}

fn status_kib(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

async fn too_large(up: &Upstream, bytes: usize) {
    let err = call(up, "big", json!({"bytes": bytes})).await.unwrap_err();
    assert!(
        matches!(err, UpstreamError::MessageTooLarge { .. }),
        "{err:?}"
    );
}

/// Oversized replies are skipped, not buffered: memory does not grow from
/// one to the next, and even a reply four times the limit never raises the
/// peak by more than about the limit. One runtime thread, so one allocator
/// arena is measured; the first few replies warm the allocator up (it keeps
/// a freed 8 MiB buffer or two for reuse; the limit is set to 8 MiB, so
/// the figures hold whatever the default). The test measures its process,
/// so it runs alone in a process of its own (other tests of this binary
/// move megabytes too), while the other heavy tests wait.
#[tokio::test(flavor = "current_thread")]
async fn oversized_replies_keep_memory_bounded() {
    let _heavy = HEAVY.lock().await;
    if !support::alone_in_a_process(module_path!(), "oversized_replies_keep_memory_bounded").await {
        return;
    }
    let mut cfg = config("big", "big_messages.py", &[]);
    cfg.max_message_bytes = 8 * MIB;
    let up = upstream(cfg);
    within(up.connect()).await.unwrap();
    for _ in 0..3 {
        too_large(&up, 9 * MIB).await;
    }
    let baseline = status_kib("VmRSS:");
    let mut rss = Vec::new();
    for _ in 0..5 {
        too_large(&up, 9 * MIB).await;
        rss.push(status_kib("VmRSS:"));
    }
    let growth = rss.iter().max().unwrap().saturating_sub(baseline);
    assert!(
        growth < 4 * 1024,
        "RSS grew by {growth} KiB over 5 oversized replies (baseline {baseline} KiB, after each: {rss:?})"
    );

    // Peak memory (VmHWM, reset through clear_refs) while a 32 MiB line
    // passes: a reader that buffered the line would need 32 MiB or more.
    if std::fs::write("/proc/self/clear_refs", "5").is_ok() {
        let before = status_kib("VmRSS:");
        too_large(&up, 32 * MIB).await;
        let peak = status_kib("VmHWM:").saturating_sub(before);
        eprintln!(
            "RSS baseline {baseline} KiB, after each: {rss:?}; peak rise for 32 MiB: {peak} KiB"
        );
        assert!(
            peak < 20 * 1024,
            "peak RSS rose by {peak} KiB for a 32 MiB line"
        );
    } else {
        eprintln!("/proc/self/clear_refs is not writable: peak check skipped");
    }
    assert_eq!(echo(&up, "still framed").await, "still framed");
    assert_eq!(up.connection_attempts(), 1);
    up.shutdown(Duration::from_secs(1)).await;
}

// ---- 4. early notifications and server requests -------------------------

/// Polls the `client_responses` tool until our answer to `id` shows up (the
/// answer travels on its own, so it can trail our next request).
async fn client_response(up: &Upstream, id: &str) -> Value {
    within(async {
        loop {
            let result = up
                .call_tool(json!({"name": "client_responses", "arguments": {}}))
                .await
                .unwrap();
            let responses: Value = serde_json::from_str(text_of(&result)).unwrap();
            if let Some(r) = responses.get(id) {
                return r.clone();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test]
async fn notifications_before_the_initialize_reply_are_accepted() {
    let up = upstream(config("early", "early_notifications.py", &[]));
    let mut notes = up.subscribe();
    let negotiated = within(up.connect()).await.unwrap();
    assert_eq!(negotiated.server_info["name"], "early-notifications");

    let changed = next_notification(&mut notes, "notifications/tools/list_changed").await;
    assert_eq!(
        changed,
        json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    );
    let message = next_notification(&mut notes, "notifications/message").await;
    assert_eq!(message["params"]["data"], "before initialize reply");

    // The server pings us ("srv-1") once initialized; we answer `{}`.
    assert_eq!(
        client_response(&up, "srv-1").await,
        json!({"jsonrpc": "2.0", "id": "srv-1", "result": {}})
    );
    assert_eq!(echo(&up, "ok").await, "ok");

    // A ping sent in the middle of a tool call is answered too.
    let sent = call(&up, "ping_client", json!({})).await.unwrap();
    assert_eq!(text_of(&sent), "sent srv-2");
    assert_eq!(
        client_response(&up, "srv-2").await,
        json!({"jsonrpc": "2.0", "id": "srv-2", "result": {}})
    );
    up.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_ping_before_the_initialize_reply_is_answered() {
    let up = upstream(config(
        "early",
        "early_notifications.py",
        &[("STUB_PING_AT", "initialize")],
    ));
    within(up.connect()).await.unwrap();
    assert_eq!(
        client_response(&up, "srv-1").await,
        json!({"jsonrpc": "2.0", "id": "srv-1", "result": {}})
    );
    up.shutdown(Duration::from_secs(1)).await;
}

// ---- 5. no tools capability ----------------------------------------------

#[tokio::test]
async fn a_server_without_tools_has_an_empty_tool_list() {
    let up = upstream(config("prompts", "prompts_only.py", &[]));
    let negotiated = within(up.connect()).await.unwrap();
    assert!(!negotiated.has_tools());
    assert_eq!(
        negotiated.capabilities,
        json!({"prompts": {}, "resources": {}})
    );

    assert_eq!(
        within(up.list_tools()).await.unwrap().entries,
        Vec::<Value>::new()
    );

    let prompts = within(up.request("prompts/list", None)).await.unwrap();
    assert_eq!(prompts["prompts"][0]["name"], "greeting");
    let prompt = within(up.request(
        "prompts/get",
        Some(json!({"name": "greeting", "arguments": {"who": "Ada"}})),
    ))
    .await
    .unwrap();
    assert_eq!(prompt["messages"][0]["content"]["text"], "Hello, Ada!");
    let resources = within(up.request("resources/list", Some(json!({}))))
        .await
        .unwrap();
    assert_eq!(resources["resources"][0]["uri"], "stub://readme");
    up.shutdown(Duration::from_secs(1)).await;
}

// ---- 6. ids --------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_calls_each_get_their_own_answer() {
    let log = tempfile::NamedTempFile::new().unwrap();
    let log_path = log.path().display().to_string();
    let up = upstream(config("ids", "crashy.py", &[("STUB_CALL_LOG", &log_path)]));
    within(up.connect()).await.unwrap();

    let calls = (0..50).map(|i| {
        let up = up.clone();
        tokio::spawn(async move {
            let message = format!("message {i} 🚂");
            (message.clone(), echo(&up, &message).await)
        })
    });
    for (sent, got) in within(futures::future::join_all(calls))
        .await
        .into_iter()
        .map(Result::unwrap)
    {
        assert_eq!(got, sent);
    }

    // Replies out of order: the longest first-sent call answers last.
    let calls = (0..20u64).map(|i| {
        let up = up.clone();
        tokio::spawn(async move {
            let ms = 400 - i * 20;
            let result = call(&up, "slow", json!({"ms": ms})).await.unwrap();
            (ms, text_of(&result).to_owned())
        })
    });
    for (ms, got) in within(futures::future::join_all(calls))
        .await
        .into_iter()
        .map(Result::unwrap)
    {
        assert_eq!(got, format!("slept {ms} ms"));
    }

    // Every call went out under its own numeric upstream id.
    let lines = std::fs::read_to_string(log.path()).unwrap();
    let ids: Vec<u64> = lines
        .lines()
        .map(|l| l.split_once(' ').unwrap().1.parse().expect("a numeric id"))
        .collect();
    assert_eq!(ids.len(), 70);
    let distinct: std::collections::BTreeSet<_> = ids.iter().collect();
    assert_eq!(distinct.len(), 70, "ids are never reused: {ids:?}");
    up.shutdown(Duration::from_secs(1)).await;
}
