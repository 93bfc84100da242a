//! Interactions end to end against real servers: the reference server
//! (`--interactions`, both eras, stdio and Streamable HTTP),
//! server-everything (2025-11-25, stdio) and `mrtr_stub.py` (2026-07-28
//! corner cases). A test user in process answers accept, decline or cancel
//! and records what it was asked.
//!
//! Covered: the exact params reach the user (compared with what a raw
//! client reads from the same server) and the answers reach the server;
//! roots come from the call's context; multi round-trip requests (several
//! rounds, `requestState` echoed exactly, original params kept, new ids,
//! `prompts/get` and `resources/read`, sampling refused, the round limit);
//! URL mode and its completion notification; -32042 accepted (retried once)
//! and declined (the original error, `data` intact); attribution on a
//! shared stdio process with two sessions in flight (declined and
//! audited); one MCP session per engine session over HTTP, through the
//! gRPC service; a user who never answers (the server gets `cancel`); and
//! the control-plane handler retrying while the control plane is
//! unavailable.

use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::audit::Audit;
use switchyard_proto::v1::SidecarCallRequest;
use switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient;
use switchyard_sidecar::api::CallService;
use switchyard_sidecar::control::ControlSettings;
use switchyard_sidecar::interactions::ControlPlaneInteractions;
use switchyard_sidecar::interactions::{
    CallContext, Interaction, InteractionHandler, InteractionKind, Interactions,
};
use switchyard_sidecar::pool::SessionPool;
use switchyard_sidecar::upstream::{
    EraPreference, HttpConfig, StdioConfig, TransportConfig, Upstream, UpstreamConfig,
    UpstreamError, UpstreamMetrics,
};
use switchyard_test_support as support;
use switchyard_test_support::fake_control_plane::FakeControlPlane;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const LIMIT: Duration = Duration::from_secs(60);
const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";

async fn within<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut).await.expect("timed out")
}

// ---- the test user ----------------------------------------------------------

type Answer = Box<dyn Fn(&Interaction) -> Option<Value> + Send + Sync>;

/// Answers with `answer` (`None`: never), after `delay`; for URL mode, first
/// waits (up to 10 s) for the server's completion notification when
/// `await_completion` is set. Records every question and completion.
#[derive(Clone)]
struct User {
    inner: Arc<UserInner>,
}

struct UserInner {
    answer: Answer,
    delay: Duration,
    await_completion: bool,
    asked: Mutex<Vec<Interaction>>,
    completed: Mutex<Vec<(String, CallContext, String)>>,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("User")
    }
}

impl User {
    fn new(answer: impl Fn(&Interaction) -> Option<Value> + Send + Sync + 'static) -> Self {
        Self::with(answer, Duration::ZERO, false)
    }

    fn with(
        answer: impl Fn(&Interaction) -> Option<Value> + Send + Sync + 'static,
        delay: Duration,
        await_completion: bool,
    ) -> Self {
        User {
            inner: Arc::new(UserInner {
                answer: Box::new(answer),
                delay,
                await_completion,
                asked: Mutex::new(Vec::new()),
                completed: Mutex::new(Vec::new()),
            }),
        }
    }

    fn asked(&self) -> Vec<Interaction> {
        self.inner.asked.lock().unwrap().clone()
    }

    fn completed(&self) -> Vec<(String, CallContext, String)> {
        self.inner.completed.lock().unwrap().clone()
    }

    async fn wait_completed(&self, n: usize) -> Vec<(String, CallContext, String)> {
        within(async {
            loop {
                let c = self.completed();
                if c.len() >= n {
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
    }
}

impl InteractionHandler for User {
    fn interact(&self, interaction: Interaction) -> BoxFuture<'static, Value> {
        let user = self.clone();
        Box::pin(async move {
            user.inner.asked.lock().unwrap().push(interaction.clone());
            if user.inner.await_completion && interaction.kind == InteractionKind::Url {
                let id = interaction.params["elicitationId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                for _ in 0..500 {
                    if user.completed().iter().any(|(_, _, e)| *e == id) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            tokio::time::sleep(user.inner.delay).await;
            match (user.inner.answer)(&interaction) {
                Some(answer) => answer,
                None => std::future::pending().await,
            }
        })
    }

    fn complete(
        &self,
        server: &str,
        context: &CallContext,
        elicitation_id: &str,
    ) -> BoxFuture<'static, ()> {
        self.inner.completed.lock().unwrap().push((
            server.to_owned(),
            context.clone(),
            elicitation_id.to_owned(),
        ));
        Box::pin(async {})
    }
}

fn accept(content: Value) -> impl Fn(&Interaction) -> Option<Value> + Send + Sync {
    move |_| Some(json!({"action": "accept", "content": content}))
}

fn action(action: &'static str) -> impl Fn(&Interaction) -> Option<Value> + Send + Sync {
    move |_| Some(json!({"action": action}))
}

// ---- servers and sessions -----------------------------------------------------

fn stdio(name: &str, command: &Path, args: &[&str]) -> UpstreamConfig {
    UpstreamConfig::new(
        name,
        TransportConfig::Stdio(StdioConfig {
            command: command.to_string_lossy().into_owned(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..StdioConfig::default()
        }),
    )
}

fn reference(era: &str) -> UpstreamConfig {
    stdio(
        "orders",
        &support::reference_server_bin(),
        &["--era", era, "--interactions"],
    )
}

fn everything() -> UpstreamConfig {
    let mut c = stdio("everything", &support::everything_bin(), &["stdio"]);
    c.era = EraPreference::Legacy;
    c
}

fn mrtr_stub() -> UpstreamConfig {
    let script = support::stub_script("mrtr_stub.py");
    let mut c = stdio(
        "stub",
        Path::new("python3"),
        &[script.to_str().expect("utf-8 path")],
    );
    c.era = EraPreference::Modern;
    c
}

fn interactions(user: &User, audit: Audit) -> Interactions {
    Interactions::new(Arc::new(user.clone()), audit)
}

fn session(config: UpstreamConfig, user: &User) -> Upstream {
    support::init_tracing();
    Upstream::with_interactions(
        config,
        &UpstreamMetrics::unregistered(),
        interactions(user, Audit::to_log()),
    )
    .unwrap()
}

fn ctx(session: &str) -> CallContext {
    CallContext {
        session_id: session.into(),
        run_id: format!("run-{session}"),
        tool: String::new(),
        roots: vec![
            json!({"uri": format!("file:///work/{session}"), "name": format!("{session} workspace")}),
            json!({"uri": "file:///shared"}),
        ],
        progress: None,
        client: None,
        log_level: None,
    }
}

async fn call(up: &Upstream, tool: &str, arguments: Value, context: &CallContext) -> Value {
    within(up.call_tool_in(&json!({"name": tool, "arguments": arguments}), context))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

fn text(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn without_meta(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("_meta");
    }
    v
}

/// The first question a server asks, read by a minimal raw client over
/// stdio: legacy, the params of its `elicitation/create`; modern, the
/// `inputRequests` of its `input_required` result.
async fn raw_question(command: &Path, args: &[&str], era: &str, call: Value) -> Value {
    let mut child = tokio::process::Command::new(command)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let caps = json!({"elicitation": {"form": {}, "url": {}}, "roots": {}});
    let mut send = async |m: Value| {
        stdin.write_all(format!("{m}\n").as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    };
    let mut call = call;
    if era == LEGACY {
        send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":LEGACY,"capabilities":caps,"clientInfo":{"name":"raw","version":"0"}}})).await;
        // Like any client, wait for the handshake's answer first.
        loop {
            let line = within(lines.next_line()).await.unwrap().expect("stdout");
            if serde_json::from_str::<Value>(&line).is_ok_and(|m| m["id"] == json!(1)) {
                break;
            }
        }
        send(json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await;
    } else {
        call["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": caps,
        });
    }
    send(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":call})).await;
    loop {
        let line = within(lines.next_line())
            .await
            .unwrap()
            .expect("server closed stdout");
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if era == LEGACY && msg["method"] == "elicitation/create" {
            return msg["params"].clone();
        }
        if msg["id"] == json!(2) && msg.get("method").is_none() {
            assert_eq!(era, MODERN, "the tool never asked: {msg}");
            return msg["result"]["inputRequests"].clone();
        }
    }
}

fn audit_file() -> (tempfile::TempDir, PathBuf, Audit) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let audit = Audit::to_file(&path).unwrap();
    (dir, path, audit)
}

fn audit_lines(path: &Path, method: &str) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|l| l["method"] == method)
        .collect()
}

// ---- forms, both eras -------------------------------------------------------

#[tokio::test]
async fn form_elicitation_both_eras_exact_params_and_answers() {
    let answer = json!({"contact_name": "Grace Hopper", "email": "grace@example.com", "delivery_date": "2026-08-01", "quantity": 3, "shipping_speed": "express", "carrier": "ups", "notify_via": ["sms", "push"], "tip_percent": 7.5, "gift_wrap": true});
    let call_params = json!({"name": "confirm_order_form", "arguments": {"order_id": "O-1002"}});
    for era in [LEGACY, MODERN] {
        let user = User::new(accept(answer.clone()));
        let up = session(reference(era), &user);
        let result = call(
            &up,
            "confirm_order_form",
            call_params["arguments"].clone(),
            &ctx("s1"),
        )
        .await;
        // The server echoes exactly what it got.
        assert_eq!(
            result["structuredContent"],
            json!({"action": "accept", "content": answer}),
            "{era}: {result}"
        );
        let asked = user.asked();
        assert_eq!(asked.len(), 1, "{era}");
        let q = &asked[0];
        assert_eq!(q.kind, InteractionKind::Form);
        assert_eq!(q.server, "orders");
        assert_eq!(q.context.session_id, "s1");
        assert_eq!(q.context.run_id, "run-s1");
        assert_eq!(q.context.tool, "confirm_order_form");
        assert_eq!(q.id.len(), 32, "a random 128-bit id");
        // Exactly what a raw client reads from the same server (the
        // legacy request's `_meta.progressToken` is per connection).
        let raw = raw_question(
            &support::reference_server_bin(),
            &["--era", era, "--interactions"],
            era,
            call_params.clone(),
        )
        .await;
        let raw = if era == LEGACY {
            raw
        } else {
            raw["order_form"]["params"].clone()
        };
        assert_eq!(
            without_meta(&q.params).to_string(),
            without_meta(&raw).to_string(),
            "{era}"
        );
        assert_eq!(
            q.params["message"],
            "Confirm the delivery details of order O-1002."
        );

        // Decline and cancel reach the server too.
        for a in ["decline", "cancel"] {
            let user = User::new(action(a));
            let up2 = session(reference(era), &user);
            let result = call(&up2, "confirm_order_form", json!({}), &ctx("s1")).await;
            assert_eq!(
                result["structuredContent"],
                json!({"action": a}),
                "{era} {a}"
            );
            up2.shutdown(Duration::from_millis(500)).await;
        }
        up.shutdown(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn roots_come_from_the_call_context_both_eras() {
    for era in [LEGACY, MODERN] {
        let user = User::new(|_| None);
        let up = session(reference(era), &user);
        for s in ["a", "b"] {
            let result = call(&up, "workspace_roots", json!({}), &ctx(s)).await;
            assert_eq!(
                result["structuredContent"],
                json!({"roots": ctx(s).roots}),
                "{era} {s}"
            );
        }
        assert!(user.asked().is_empty());
        up.shutdown(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn roots_are_asked_of_a_client_that_declared_them_both_eras() {
    let theirs = json!([{"uri": "file:///client", "name": "client's"}]);
    for era in [LEGACY, MODERN] {
        let answer = theirs.clone();
        let user = User::new(move |i: &Interaction| match i.kind {
            InteractionKind::Roots => Some(json!({"roots": answer})),
            _ => None,
        });
        let up = session(reference(era), &user);
        let asking = CallContext {
            client: Some(json!({"roots": {}})),
            ..ctx("a")
        };
        let result = call(&up, "workspace_roots", json!({}), &asking).await;
        assert_eq!(
            result["structuredContent"],
            json!({"roots": theirs}),
            "{era}"
        );
        let asked = user.asked();
        assert_eq!(asked.len(), 1, "{era}");
        assert_eq!(asked[0].kind, InteractionKind::Roots);
        // The server's own key (2026-07-28 inputRequests), none in 2025.
        let key = if era == MODERN { "roots" } else { "" };
        assert_eq!(asked[0].key, key, "{era}");
        up.shutdown(Duration::from_millis(500)).await;
    }
    // A client that does not answer: the session's roots.
    for era in [LEGACY, MODERN] {
        let user = User::new(action("cancel"));
        let up = session(reference(era), &user);
        let asking = CallContext {
            client: Some(json!({"roots": {}})),
            ..ctx("b")
        };
        let result = call(&up, "workspace_roots", json!({}), &asking).await;
        assert_eq!(
            result["structuredContent"],
            json!({"roots": ctx("b").roots}),
            "{era}"
        );
        up.shutdown(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn a_user_who_never_answers_is_cancelled() {
    for era in [LEGACY, MODERN] {
        let user = User::new(|_| None);
        let mut i = interactions(&user, Audit::to_log());
        i.timeout = Duration::from_millis(300);
        support::init_tracing();
        let up = Upstream::with_interactions(reference(era), &UpstreamMetrics::unregistered(), i)
            .unwrap();
        let result = call(&up, "confirm_order_form", json!({}), &ctx("s1")).await;
        assert_eq!(
            result["structuredContent"],
            json!({"action": "cancel"}),
            "{era}"
        );
        assert_eq!(user.asked().len(), 1);
        up.shutdown(Duration::from_millis(500)).await;
    }
}

// ---- multi round-trip requests -------------------------------------------------

fn expected_state(n: usize) -> String {
    format!("state \"{n}\" \\ \u{2028} \u{1F682} \u{0} \\u00e9 end")
}

#[tokio::test]
async fn mrtr_rounds_echo_state_exactly_and_keep_the_params() {
    let user = User::new(accept(json!({"ok": true})));
    let up = session(mrtr_stub(), &user);
    let context = ctx("s1");
    let arguments = json!({"times": 3, "extra": {"é": [1, 2.5, null]}});
    let result = call(&up, "reask", arguments.clone(), &context).await;
    let rounds = result["structuredContent"]["rounds"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(rounds.len(), 4, "{result}");
    let mut ids: Vec<String> = rounds.iter().map(|r| r["id"].to_string()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 4, "a new JSON-RPC id per round: {ids:?}");
    assert!(rounds[0]["inputResponses"].is_null() && rounds[0]["requestState"].is_null());
    for (n, r) in rounds.iter().enumerate() {
        assert_eq!(r["arguments"], arguments, "round {n}: original params kept");
        assert_eq!(r["meta_version"], MODERN);
        if n > 0 {
            assert_eq!(r["state_ok"], true, "round {n}");
            assert_eq!(r["requestState"], expected_state(n));
            assert_eq!(
                r["inputResponses"],
                json!({
                    "confirm": {"action": "accept", "content": {"ok": true}},
                    "where": {"roots": context.roots},
                }),
                "round {n}"
            );
        }
    }
    // Asked once per round, with the server's params.
    let asked = user.asked();
    assert_eq!(asked.len(), 3);
    assert_eq!(
        asked[0].params,
        json!({"mode": "form", "message": "Confirm?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}})
    );

    // prompts/get and resources/read take part too.
    let prompt = within(up.request_in("prompts/get", &json!({"name": "confirm"}), &context))
        .await
        .unwrap();
    let answer: Value =
        serde_json::from_str(prompt["messages"][0]["content"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(answer, json!({"action": "accept", "content": {"ok": true}}));
    assert_eq!(
        user.asked().last().unwrap().context.tool,
        "prompts/get confirm"
    );
    let read = within(up.request_in("resources/read", &json!({"uri": "stub://roots"}), &context))
        .await
        .unwrap();
    let roots: Value = serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(roots, json!({"roots": context.roots}));

    // A state-only round needs nobody.
    let done = call(&up, "state_only", json!({}), &context).await;
    assert_eq!(text(&done), "done");
    up.shutdown(Duration::from_millis(500)).await;
}

#[tokio::test]
async fn mrtr_refuses_sampling_and_enforces_the_round_limit() {
    let user = User::new(accept(json!({})));
    let mut config = mrtr_stub();
    config.max_input_rounds = 3;
    let up = session(config, &user);
    let e = within(up.call_tool_in(&json!({"name": "sampling", "arguments": {}}), &ctx("s1")))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, UpstreamError::Protocol { .. }) && e.to_string().contains("sampling"),
        "{e}"
    );
    let e = within(up.call_tool_in(&json!({"name": "forever", "arguments": {}}), &ctx("s1")))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, UpstreamError::Protocol { .. }) && e.to_string().contains("after 3 rounds"),
        "{e}"
    );
    assert!(user.asked().is_empty());
    up.shutdown(Duration::from_millis(500)).await;

    // Without a handler nothing is declared, and a question is an error.
    support::init_tracing();
    let bare = Upstream::new(mrtr_stub(), &UpstreamMetrics::unregistered()).unwrap();
    let e = within(bare.call_tool_in(&json!({"name": "reask", "arguments": {}}), &ctx("s1")))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("did not declare"), "{e}");
    bare.shutdown(Duration::from_millis(500)).await;
}

#[tokio::test]
async fn approve_refund_two_rounds_with_request_state() {
    let user = User::new(|i: &Interaction| {
        Some(
            if i.params["message"].as_str().unwrap().starts_with("Why") {
                json!({"action": "accept", "content": {"reason": "damaged", "details": "box crushed"}})
            } else {
                json!({"action": "accept", "content": {"confirm": true}})
            },
        )
    });
    let up = session(reference(MODERN), &user);
    let result = call(
        &up,
        "approve_refund",
        json!({"order_id": "O-1002"}),
        &ctx("s1"),
    )
    .await;
    let r = &result["structuredContent"];
    // The server verifies its HMAC'd requestState on each retry: any
    // changed byte would have been -32602.
    assert_eq!(r["approved"], true, "{result}");
    assert_eq!(r["rounds"], 3);
    assert_eq!(
        r["received"],
        json!({
            "refund_reason": {"action": "accept", "content": {"reason": "damaged", "details": "box crushed"}},
            "refund_confirm": {"action": "accept", "content": {"confirm": true}},
        })
    );
    assert_eq!(user.asked().len(), 2);
    up.shutdown(Duration::from_millis(500)).await;

    let mut config = reference(MODERN);
    config.max_input_rounds = 1;
    let up = session(config, &user);
    let e = within(up.call_tool_in(
        &json!({"name": "approve_refund", "arguments": {"order_id": "O-1002"}}),
        &ctx("s1"),
    ))
    .await
    .unwrap_err();
    assert!(e.to_string().contains("after 1 rounds"), "{e}");
    up.shutdown(Duration::from_millis(500)).await;
}

// ---- URL mode and -32042 ---------------------------------------------------

#[tokio::test]
async fn url_elicitation_and_its_completion_both_eras() {
    for era in [LEGACY, MODERN] {
        let user = User::new(action("accept"));
        let up = session(reference(era), &user);
        let result = call(
            &up,
            "link_account",
            json!({"account": "globex"}),
            &ctx("s7"),
        )
        .await;
        assert_eq!(
            result["structuredContent"]["linked"], true,
            "{era}: {result}"
        );
        let asked = user.asked();
        assert_eq!(asked.len(), 1);
        let q = &asked[0];
        assert_eq!(q.kind, InteractionKind::Url);
        assert_eq!(q.params["mode"], "url");
        assert_eq!(
            q.params["message"],
            "Sign in to globex to link it to your orders."
        );
        assert!(
            q.params["url"]
                .as_str()
                .unwrap()
                .starts_with("https://accounts.example.com/link?account=globex"),
            "{}",
            q.params
        );
        if era == LEGACY {
            let id = q.params["elicitationId"].as_str().unwrap().to_owned();
            assert_eq!(result["structuredContent"]["elicitationId"], id);
            let completed = user.wait_completed(1).await;
            assert_eq!(completed[0].0, "orders");
            assert_eq!(completed[0].1.session_id, "s7");
            assert_eq!(completed[0].2, id);
        } else {
            assert!(q.params.get("elicitationId").is_none(), "{}", q.params);
        }
        up.shutdown(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn url_elicitation_required_accepted_is_retried_declined_is_returned() {
    // Accepted once the server reports the sign-in complete: retried once.
    let user = User::with(action("accept"), Duration::ZERO, true);
    let up = session(reference(LEGACY), &user);
    let result = call(
        &up,
        "link_account_required",
        json!({"account": "acme", "complete_after_ms": 200}),
        &ctx("s1"),
    )
    .await;
    assert_eq!(result["structuredContent"]["linked"], true, "{result}");
    assert_eq!(result["structuredContent"]["balance_cents"], 12345);
    let asked = user.asked();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].kind, InteractionKind::Url);
    assert_eq!(asked[0].context.tool, "link_account_required");
    assert_eq!(user.completed().len(), 1);

    // Declined: the engine gets the server's error, data intact.
    let user = User::new(action("decline"));
    let up = session(reference(LEGACY), &user);
    let e = within(up.call_tool_in(
        &json!({"name": "link_account_required", "arguments": {"account": "initech"}}),
        &ctx("s1"),
    ))
    .await
    .unwrap_err();
    let UpstreamError::Rpc {
        code,
        message,
        data,
        ..
    } = e
    else {
        panic!("{e}")
    };
    assert_eq!(code, -32042);
    assert_eq!(message, "This request requires more information.");
    let asked = user.asked();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        data,
        Some(json!({"elicitations": [asked[0].params.clone()]}))
    );
    assert!(
        asked[0].params["url"]
            .as_str()
            .unwrap()
            .contains("account=initech")
    );
    up.shutdown(Duration::from_millis(500)).await;
}

// ---- server-everything ------------------------------------------------------

#[tokio::test]
async fn server_everything_form_url_and_error_path() {
    let user = User::new(|i: &Interaction| {
        Some(match i.kind {
            InteractionKind::Form => {
                json!({"action": "accept", "content": {"name": "Ada Lovelace", "check": true, "integer": 7}})
            }
            InteractionKind::Url => json!({"action": "accept"}),
            InteractionKind::Roots => json!({"roots": []}),
        })
    });
    let up = session(everything(), &user);
    let context = ctx("s1");
    let result = call(&up, "trigger-elicitation-request", json!({}), &context).await;
    let t = text(&result);
    assert!(
        t.contains("- Name: Ada Lovelace") && t.contains("- Favorite Integer: 7"),
        "{t}"
    );
    let asked = user.asked();
    assert_eq!(asked.len(), 1);
    let raw = raw_question(
        &support::everything_bin(),
        &["stdio"],
        LEGACY,
        json!({"name": "trigger-elicitation-request", "arguments": {}}),
    )
    .await;
    assert_eq!(asked[0].params.to_string(), raw.to_string());

    // Request path of URL mode.
    let result = call(
        &up,
        "trigger-url-elicitation",
        json!({"url": "https://example.com/a", "elicitationId": "e-1"}),
        &context,
    )
    .await;
    assert!(text(&result).contains("User completed the URL elicitation flow"));
    let q = user.asked().pop().unwrap();
    assert_eq!(
        q.params,
        json!({"mode": "url", "url": "https://example.com/a", "message": "Please open the link to complete this action.", "elicitationId": "e-1"})
    );

    // Error path: -32042, accepted, retried once (which then asks again by request).
    let before = user.asked().len();
    let result = call(
        &up,
        "trigger-url-elicitation",
        json!({"url": "https://example.com/b", "errorPath": true}),
        &context,
    )
    .await;
    assert!(
        text(&result).contains("User completed the URL elicitation flow"),
        "{result}"
    );
    let asked = user.asked();
    assert_eq!(asked.len(), before + 2);
    assert_eq!(
        asked[before].params["url"],
        "https://modelcontextprotocol.io"
    );
    assert_eq!(asked[before + 1].params["url"], "https://example.com/b");
    up.shutdown(Duration::from_millis(500)).await;

    // Error path declined: the original error.
    let user = User::new(action("decline"));
    let up = session(everything(), &user);
    let e = within(up.call_tool_in(
        &json!({"name": "trigger-url-elicitation", "arguments": {"url": "https://example.com/c", "errorPath": true}}),
        &context,
    ))
    .await
    .unwrap_err();
    match e {
        UpstreamError::Rpc { code, data, .. } => {
            assert_eq!(code, -32042);
            let asked = user.asked();
            assert_eq!(asked.len(), 1);
            assert_eq!(data.unwrap()["elicitations"][0], asked[0].params);
        }
        other => panic!("{other}"),
    }
    up.shutdown(Duration::from_millis(500)).await;
}

// ---- attribution ----------------------------------------------------------------

#[tokio::test]
async fn shared_stdio_process_declines_with_two_sessions_in_flight() {
    let (_dir, path, audit) = audit_file();
    let user = User::new(accept(json!({"name": "x"})));
    support::init_tracing();
    let up = Upstream::with_interactions(
        everything(),
        &UpstreamMetrics::unregistered(),
        interactions(&user, audit),
    )
    .unwrap();
    let slow = {
        let up = up.clone();
        tokio::spawn(async move {
            let mut c = ctx("A");
            c.run_id = "run-A".into();
            up.call_tool_in(
                &json!({"name": "trigger-long-running-operation", "arguments": {"duration": 3, "steps": 3}}),
                &c,
            )
            .await
        })
    };
    within(async {
        while up.calls_in_flight().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let result = call(&up, "trigger-elicitation-request", json!({}), &ctx("B")).await;
    assert!(text(&result).contains("User declined"), "{result}");
    assert!(user.asked().is_empty(), "nobody was asked");
    let lines = audit_lines(&path, "elicitation/create");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["kind"], "interaction.attribution_declined");
    assert_eq!(line["server"], "everything");
    assert_eq!(line["sessions"], json!(["A", "B"]));
    assert_eq!(
        line["tools"],
        json!([
            "trigger-elicitation-request",
            "trigger-long-running-operation"
        ])
    );
    assert!(
        line["reason"].as_str().unwrap().contains("2 sessions"),
        "{line}"
    );
    assert!(line["ts"].as_str().unwrap().ends_with('Z'));
    within(slow).await.unwrap().unwrap();

    // One session in flight: that session's.
    let result = call(&up, "trigger-elicitation-request", json!({}), &ctx("B")).await;
    assert!(text(&result).contains("- Name: x"), "{result}");
    assert_eq!(user.asked()[0].context.session_id, "B");

    // A call without a session is never asked about.
    let result =
        within(up.call_tool(json!({"name": "trigger-elicitation-request", "arguments": {}})))
            .await
            .unwrap();
    assert!(text(&result).contains("User declined"), "{result}");
    let lines = audit_lines(&path, "elicitation/create");
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["reason"], "the call belongs to no session");
    assert_eq!(user.asked().len(), 1);
    up.shutdown(Duration::from_millis(500)).await;
}

async fn serve_calls(pool: SessionPool) -> SidecarCallsClient<tonic::transport::Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(CallService::with_pool(pool).into_server())
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    SidecarCallsClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

fn grpc_call(tool: &str, session: &str) -> SidecarCallRequest {
    SidecarCallRequest {
        params_json: json!({"name": tool, "arguments": {}}).to_string(),
        timeout_ms: 30_000,
        session_id: session.into(),
        run_id: format!("run-{session}"),
        roots_json: Value::Array(ctx(session).roots).to_string(),
        retry_safe: false,
        background: None,
        relay_progress: false,
        client_capabilities_json: String::new(),
        log_level: String::new(),
    }
}

#[tokio::test]
async fn http_gets_one_mcp_session_per_engine_session() {
    support::init_tracing();
    let port = support::free_port();
    let mut cmd = tokio::process::Command::new(support::reference_server_bin());
    cmd.args([
        "--era",
        LEGACY,
        "--interactions",
        "--http",
        &format!("127.0.0.1:{port}"),
    ]);
    let server = support::start_http_server(cmd, "/mcp").await;
    let (_dir, path, audit) = audit_file();
    // Both calls wait in the user's hands at the same time.
    let user = User::with(
        |i: &Interaction| {
            Some(json!({"action": "accept", "content": {"contact_name": i.context.session_id}}))
        },
        Duration::from_millis(700),
        false,
    );
    let main = Upstream::with_interactions(
        UpstreamConfig::new(
            "orders-http",
            TransportConfig::Http(HttpConfig {
                url: server.url.clone(),
                headers: vec![],
            }),
        ),
        &UpstreamMetrics::unregistered(),
        interactions(&user, audit),
    )
    .unwrap();
    let pool = SessionPool::new(main.clone());
    let client = serve_calls(pool.clone()).await;
    let calls = ["s1", "s2"].map(|s| {
        let mut client = client.clone();
        async move {
            let r = client
                .call_tool(grpc_call("confirm_order_form", s))
                .await
                .unwrap()
                .into_inner();
            serde_json::from_str::<Value>(&r.result_json).unwrap()
        }
    });
    let [c1, c2] = calls;
    let (r1, r2) = within(async { tokio::join!(c1, c2) }).await;
    assert_eq!(
        r1["structuredContent"]["content"]["contact_name"], "s1",
        "{r1}"
    );
    assert_eq!(
        r2["structuredContent"]["content"]["contact_name"], "s2",
        "{r2}"
    );
    assert_eq!(user.asked().len(), 2);
    assert_eq!(pool.sessions(), ["s1", "s2"]);
    let ids: Vec<Option<String>> = ["s1", "s2"]
        .iter()
        .map(|s| pool.lease(s).upstream().http_session_id())
        .collect();
    assert!(
        ids[0].is_some() && ids[1].is_some() && ids[0] != ids[1],
        "{ids:?}"
    );
    assert!(audit_lines(&path, "elicitation/create").is_empty());

    // Roots over the per-session connection come from the gRPC request.
    let mut c = client.clone();
    let r = c
        .call_tool(grpc_call("workspace_roots", "s2"))
        .await
        .unwrap()
        .into_inner();
    let r: Value = serde_json::from_str(&r.result_json).unwrap();
    assert_eq!(r["structuredContent"], json!({"roots": ctx("s2").roots}));

    // Bad roots are the caller's error.
    let mut bad = grpc_call("workspace_roots", "s2");
    bad.roots_json = "{\"uri\": 1}".into();
    let e = c.call_tool(bad).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);

    pool.shutdown(Duration::from_millis(500)).await;

    // Bounded, with idle eviction: the least recently used idle connection
    // makes room; a connection with a call in flight is never closed.
    let small = SessionPool::with_limits(main.clone(), 1, Duration::from_millis(300));
    drop(small.lease("x"));
    let y = small.lease("y");
    assert_eq!(small.sessions(), ["y"]);
    let z = small.lease("z");
    assert!(z.upstream().calls_in_flight().is_empty());
    assert_eq!(
        small.sessions(),
        ["y"],
        "full and busy: z shares the main connection"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(small.sessions(), ["y"], "in use");
    drop((y, z));
    within(async {
        while !small.sessions().is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // A deleted engine session's connection is closed at once, or, with a
    // call in flight, when that call ends (the control plane's
    // SessionEnded; without it both stayed open until idle for 10 min).
    let pool = SessionPool::new(main.clone());
    drop(pool.lease("gone"));
    let busy = pool.lease("busy");
    assert_eq!(pool.sessions(), ["busy", "gone"]);
    pool.end_session("gone");
    pool.end_session("busy");
    pool.end_session("never-seen");
    assert_eq!(pool.sessions(), ["busy"], "a call of it is in flight");
    drop(busy);
    assert!(pool.sessions().is_empty());
    main.shutdown(Duration::from_millis(500)).await;
    drop(server);
}

// ---- the control-plane handler ------------------------------------------------

#[tokio::test]
async fn the_control_plane_handler_asks_again_with_the_same_id() {
    support::init_tracing();
    // The first `Interact` meets a replica going away (UNAVAILABLE); the
    // next is accepted.
    let registry = FakeControlPlane::start().await;
    registry.refuse_interacts(1);
    registry.answer_with(json!({"contact_name": "via control plane"}));
    let handler = ControlPlaneInteractions::new(&ControlSettings {
        control_plane: registry.url.clone(),
        ca_pem: None,
        credentials: Default::default(),
        server: "orders".into(),
        sidecar_id: "t".into(),
        call_address: String::new(),
        call_token: switchyard_sidecar::guard::CallToken::generate(),
    })
    .unwrap();
    let up = Upstream::with_interactions(
        reference(LEGACY),
        &UpstreamMetrics::unregistered(),
        Interactions::new(Arc::new(handler), Audit::to_log()),
    )
    .unwrap();
    let result = call(&up, "confirm_order_form", json!({}), &ctx("s9")).await;
    assert_eq!(
        result["structuredContent"],
        json!({"action": "accept", "content": {"contact_name": "via control plane"}})
    );
    let seen = registry.interacts();
    assert_eq!(seen.len(), 2, "asked again after UNAVAILABLE");
    assert_eq!(
        seen[0], seen[1],
        "the same request, interaction id included"
    );
    let r = &seen[0];
    assert_eq!(r.interaction_id.len(), 32);
    assert_eq!(
        (r.server.as_str(), r.session_id.as_str(), r.run_id.as_str()),
        ("orders", "s9", "run-s9")
    );
    assert_eq!(
        (r.tool.as_str(), r.kind.as_str()),
        ("confirm_order_form", "form")
    );
    let params: Value = serde_json::from_str(&r.params_json).unwrap();
    assert_eq!(params["mode"], "form");

    // A URL elicitation's completion is reported.
    let result = call(&up, "link_account", json!({}), &ctx("s9")).await;
    assert_eq!(result["structuredContent"]["linked"], true, "{result}");
    let completes = within(async {
        loop {
            let c = registry.completes();
            if !c.is_empty() {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(completes[0].server, "orders");
    assert_eq!(completes[0].session_id, "s9");
    assert_eq!(
        completes[0].elicitation_id,
        result["structuredContent"]["elicitationId"]
            .as_str()
            .unwrap()
    );
    up.shutdown(Duration::from_millis(500)).await;
}
