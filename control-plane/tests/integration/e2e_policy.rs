//! Hints and policies end to end, through `switchyard up` and the CLI: an
//! operator overrides a hint (`switchyard hints set`) and a policy
//! (`switchyard policy set`) and the engine's tool list follows within a
//! second; a disabled tool is hidden and calling it is FAILED_PRECONDITION;
//! a tool that needs approval (an `ask` session calling a tool that is not
//! read-only, or a `confirm` tool in an `auto` session) raises an approval
//! on the session's events; `switchyard answer --deny` gives the engine a
//! "not approved" isError result and the server never sees the call
//! (the reference server's order count does not move), `--approve` lets it
//! run; `hints clear` restores the declared hints. Every call is audited
//! (`tool.called`, with openWorldHint, never the arguments).

use crate::common::*;
use serde_json::Value;
use std::time::Duration;
use switchyard_proto::v1 as pb;
use tonic::Streaming;

/// The engine's list must follow an operator's change within this.
const VISIBLE: Duration = Duration::from_secs(1);

async fn order_count(gw: &Gateway) -> u64 {
    let resp = gw
        .engine()
        .await
        .call_tool(call_request("orders__list_orders", "{}", ""))
        .await
        .expect("list_orders")
        .into_inner();
    let v: Value = serde_json::from_str(&resp.structured_content_json).expect("structured");
    v["count"].as_u64().expect("count")
}

async fn session(gw: &Gateway, mode: &str) -> String {
    ok_stdout(
        &gw.cli(&["sessions", "create", "--server", "orders", "--mode", mode])
            .await,
        "sessions create",
    )
    .trim()
    .to_owned()
}

async fn listed(gw: &Gateway, session: &str, tool: &str, want: bool) {
    let engine = gw.engine().await;
    eventually(&format!("{tool} listed={want}"), VISIBLE, || {
        let mut engine = engine.clone();
        async move {
            let names = tool_names(&mut engine, session).await;
            if names.iter().any(|n| n == tool) == want {
                Ok(())
            } else {
                Err(format!("{names:?}"))
            }
        }
    })
    .await;
    drop(engine);
}

async fn subscribe(gw: &Gateway, session: &str) -> Streaming<pb::SessionEvent> {
    gw.engine()
        .await
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: session.into(),
            ..Default::default()
        })
        .await
        .expect("SubscribeEvents")
        .into_inner()
}

/// The next approval card on the stream.
async fn next_approval(events: &mut Streaming<pb::SessionEvent>) -> Value {
    tokio::time::timeout(LIMIT, async {
        loop {
            let ev = events.message().await.expect("events").expect("open");
            if ev.r#type == "interaction.required" {
                let card: Value = serde_json::from_str(&ev.data_json).expect("JSON");
                if card["kind"] == "approval" {
                    return card;
                }
            }
        }
    })
    .await
    .expect("an approval within the limit")
}

/// Calls `create_order` in `session` in the background, answers its
/// approval with `answer` (`--deny` or `--approve`), returns the response.
async fn create_order_answered(gw: &Gateway, session: &str, answer: &str) -> pb::CallToolResponse {
    let mut events = subscribe(gw, session).await;
    let mut engine = gw.engine().await;
    let request = call_request(
        "orders__create_order",
        r#"{"customer_id":"C-1","items":[{"sku":"CABLE","quantity":1}]}"#,
        session,
    );
    let call = tokio::spawn(async move { engine.call_tool(request).await });
    let card = next_approval(&mut events).await;
    assert_eq!(card["server"], "orders", "{card}");
    assert_eq!(card["tool"], "create_order", "{card}");
    let id = card["id"].as_str().expect("id").to_owned();
    ok_stdout(
        &gw.cli(&["answer", "--session", session, &id, answer]).await,
        "answer",
    );
    tokio::time::timeout(LIMIT, call)
        .await
        .expect("the call ends")
        .expect("task")
        .expect("CallTool")
        .into_inner()
}

#[tokio::test(flavor = "multi_thread")]
async fn operators_change_hints_and_policies_and_engines_follow() {
    let _heavy = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let ro = session(&gw, "read_only").await;

    // A hint override makes create_order read-only: a read_only session sees it.
    listed(&gw, &ro, "orders__create_order", false).await;
    ok_stdout(
        &gw.cli(&[
            "hints",
            "set",
            "orders",
            "create_order",
            "--read-only",
            "true",
        ])
        .await,
        "hints set",
    );
    listed(&gw, &ro, "orders__create_order", true).await;
    let tools = ok_json(
        &gw.cli(&["servers", "tools", "orders", "--json"]).await,
        "servers tools",
    );
    let create = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["upstreamName"] == "create_order")
        .expect("create_order listed")
        .clone();
    assert_eq!(create["name"], "orders__create_order", "{create}");
    assert_eq!(create["title"], "Create order", "{create}");
    assert_eq!(create["hints"]["readOnlyHint"], true, "{create}");
    assert_eq!(
        create["hintSources"]["readOnlyHint"], "override",
        "{create}"
    );
    assert_eq!(
        create["hintSources"]["destructiveHint"], "declared",
        "{create}"
    );
    assert_eq!(create["hints"]["openWorldHint"], false, "{create}");
    assert_eq!(create["policy"], "default", "{create}");
    // Engines get the effective hints, and no outputSchema.
    let all = gw
        .engine()
        .await
        .list_tools(pb::ListToolsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let t = all
        .tools
        .iter()
        .find(|t| t.name == "orders__create_order")
        .unwrap();
    assert!(t.hints.unwrap().read_only_hint);
    let def: Value = serde_json::from_str(&t.definition_json).unwrap();
    assert!(def.get("outputSchema").is_none(), "{def}");
    assert_eq!(def["annotations"]["readOnlyHint"], true, "{def}");
    assert!(
        t.description.contains("Returns structuredContent"),
        "{}",
        t.description
    );

    // Disabled: hidden everywhere, and calling it is FAILED_PRECONDITION.
    ok_stdout(
        &gw.cli(&["policy", "set", "orders", "get_order", "disabled"])
            .await,
        "policy set disabled",
    );
    listed(&gw, &ro, "orders__get_order", false).await;
    listed(&gw, "", "orders__get_order", false).await;
    let mut engine = gw.engine().await;
    for s in [ro.as_str(), ""] {
        let status = engine
            .call_tool(call_request(
                "orders__get_order",
                r#"{"order_id":"O-1001"}"#,
                s,
            ))
            .await
            .expect_err("a disabled tool");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
        assert!(status.message().contains("disabled"), "{status:?}");
    }
    ok_stdout(
        &gw.cli(&["policy", "set", "orders", "get_order", "default"])
            .await,
        "policy set default",
    );
    listed(&gw, &ro, "orders__get_order", true).await;

    // Clearing the override restores the declared hint.
    ok_stdout(
        &gw.cli(&["hints", "clear", "orders", "create_order"]).await,
        "hints clear",
    );
    listed(&gw, &ro, "orders__create_order", false).await;

    // ask mode: a tool that is not read-only needs approval; denied, the
    // server never sees the call.
    let ask = session(&gw, "ask").await;
    let before = order_count(&gw).await;
    let resp = create_order_answered(&gw, &ask, "--deny").await;
    assert!(resp.is_error, "{}", resp.result_json);
    assert!(resp.text.contains("not approved"), "{}", resp.text);
    assert_eq!(
        order_count(&gw).await,
        before,
        "the server saw a denied call"
    );

    // auto mode calls it without asking ...
    let auto = session(&gw, "auto").await;
    let resp = engine
        .call_tool(call_request(
            "orders__create_order",
            r#"{"customer_id":"C-1","items":[{"sku":"CABLE","quantity":1}]}"#,
            &auto,
        ))
        .await
        .expect("auto call")
        .into_inner();
    assert!(!resp.is_error, "{}", resp.result_json);
    assert_eq!(order_count(&gw).await, before + 1);
    // ... unless its policy is confirm: then it asks, in every mode.
    ok_stdout(
        &gw.cli(&["policy", "set", "orders", "create_order", "confirm"])
            .await,
        "policy set confirm",
    );
    let resp = create_order_answered(&gw, &auto, "--deny").await;
    assert!(
        resp.is_error && resp.text.contains("not approved"),
        "{}",
        resp.text
    );
    assert_eq!(order_count(&gw).await, before + 1);
    let resp = create_order_answered(&gw, &auto, "--approve").await;
    assert!(!resp.is_error, "{}", resp.result_json);
    assert_eq!(order_count(&gw).await, before + 2);

    // A confirm tool called without a session: nobody to ask.
    ok_stdout(
        &gw.cli(&["policy", "set", "orders", "echo", "confirm"])
            .await,
        "policy set echo confirm",
    );
    let status = engine
        .call_tool(call_request("orders__echo", r#"{"message":"hi"}"#, ""))
        .await
        .expect_err("confirm without a session");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
    // ... and in a read_only session (echo is read-only) it asks too.
    let mut events = subscribe(&gw, &ro).await;
    let mut e2 = gw.engine().await;
    let ro2 = ro.clone();
    let call = tokio::spawn(async move {
        e2.call_tool(call_request("orders__echo", r#"{"message":"hi"}"#, &ro2))
            .await
    });
    let card = next_approval(&mut events).await;
    assert_eq!(card["tool"], "echo", "{card}");
    let id = card["id"].as_str().unwrap().to_owned();
    ok_stdout(
        &gw.cli(&["answer", "--session", &ro, &id, "--approve"])
            .await,
        "answer",
    );
    let resp = call.await.unwrap().expect("echo").into_inner();
    assert_eq!(resp.text, "hi");

    // `servers status` shows the policies; the audit has the calls.
    let status = ok_json(
        &gw.cli(&["servers", "status", "orders", "--json"]).await,
        "status",
    );
    let echo = status["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["upstreamName"] == "echo")
        .expect("echo in status")
        .clone();
    assert_eq!(echo["policy"], "confirm", "{echo}");
    assert_eq!(echo["policySet"], true, "{echo}");
    eventually("tool.called audit records", LIMIT, || async {
        let log = gw.log();
        let calls: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(r#""kind":"tool.called""#))
            .collect();
        assert!(
            calls.iter().all(|l| !l.contains("customer_id")),
            "arguments in the audit: {calls:?}"
        );
        let denied = calls.iter().any(|l| {
            l.contains(r#""approval":"deny""#)
                && l.contains(r#""openWorldHint":false"#)
                && l.contains(r#""outcome":"not_approved""#)
        });
        if denied {
            Ok(())
        } else {
            Err("no denied tool.called record yet".to_owned())
        }
    })
    .await;
    gw.stop().await;
}
