//! The engine guide's example (docs/engines.md, `examples/engine.py`), run
//! as a user runs it: the Python client generated from the protos with
//! grpcio-tools, against `switchyard up`. Once with a call that answers at
//! once, once with the tool's calls moved to the background, whose result
//! then arrives as the session's `background_call.completed` event. And
//! gRPC server reflection, which tools such as grpcurl use.

use crate::common::*;
use serde_json::Value;

/// Runs the example against `endpoint` (`http://HOST:PORT`) with `tool`;
/// its exit status and the steps it printed (its stderr last, as
/// `{"stderr": ...}`, when it wrote any).
async fn run_example(endpoint: &str, tool: &str) -> (i32, Vec<Value>) {
    let script = switchyard_test_support::repo_root().join("examples/engine.py");
    let out = tokio::time::timeout(
        LIMIT,
        tokio::process::Command::new(switchyard_test_support::venv_python())
            .arg(script)
            .args(["--endpoint", endpoint.trim_start_matches("http://")])
            .args(["--tool", tool, "--arguments", r#"{"order_id": "O-1001"}"#])
            .args(["--wait", "30"])
            .output(),
    )
    .await
    .expect("the example finished in time")
    .expect("run the example");
    let mut steps: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    if !out.stderr.is_empty() {
        steps.push(serde_json::json!({"stderr": String::from_utf8_lossy(&out.stderr)}));
    }
    (out.status.code().unwrap_or(-1), steps)
}

fn step<'a>(steps: &'a [Value], name: &str) -> &'a Value {
    steps
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no {name:?} step in {steps:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_example_runs_a_turn_with_and_without_the_background() {
    let _heavy = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let (status, steps) = run_example(&gw.endpoint, "orders__get_order").await;
    assert_eq!(status, 0, "{steps:?}");
    assert_eq!(step(&steps, "tools")["has_tool"], true, "{steps:?}");
    let result = step(&steps, "result");
    assert_eq!(result["background"], false);
    assert!(
        result["text"].as_str().unwrap().contains("O-1001"),
        "{result}"
    );

    // Every call of the tool moves to the background at once.
    ok_stdout(
        &gw.cli(&[
            "policy",
            "set",
            "orders",
            "get_order",
            "--background",
            "always",
        ])
        .await,
        "policy set",
    );
    let (status, steps) = run_example(&gw.endpoint, "orders__get_order").await;
    assert_eq!(status, 0, "{steps:?}");
    let moved = step(&steps, "moved");
    assert!(
        moved["text"]
            .as_str()
            .unwrap()
            .contains("moved to the background"),
        "{moved}"
    );
    let event = step(&steps, "event");
    assert_eq!(event["type"], "background_call.completed", "{event}");
    assert_eq!(event["id"], moved["id"]);
    assert!(
        event["model_text"].as_str().unwrap().contains("O-1001"),
        "{event}"
    );
    // Reflection lists the services and gives their descriptors.
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let channel = tonic::transport::Endpoint::from_shared(gw.endpoint.clone())
        .unwrap()
        .connect()
        .await
        .expect("connect");
    let mut reflection = ServerReflectionClient::new(channel);
    let asks = [
        MessageRequest::ListServices(String::new()),
        MessageRequest::FileContainingSymbol("switchyard.v1.EngineService".into()),
    ]
    .map(|m| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(m),
    });
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter(asks))
        .await
        .expect("reflection")
        .into_inner();
    let listed = answers.message().await.unwrap().unwrap().message_response;
    let Some(MessageResponse::ListServicesResponse(l)) = listed else {
        panic!("{listed:?}");
    };
    let names: Vec<&str> = l.service.iter().map(|s| s.name.as_str()).collect();
    for want in [
        "switchyard.v1.EngineService",
        "switchyard.v1.AdminService",
        "switchyard.v1.SidecarRegistry",
    ] {
        assert!(names.contains(&want), "{names:?}");
    }
    let file = answers.message().await.unwrap().unwrap().message_response;
    let Some(MessageResponse::FileDescriptorResponse(f)) = file else {
        panic!("{file:?}");
    };
    assert!(!f.file_descriptor_proto.is_empty());
    // The example deleted its sessions.
    let sessions = ok_stdout(&gw.cli(&["sessions", "list", "--json"]).await, "sessions");
    assert!(!sessions.contains(step(&steps, "session")["id"].as_str().unwrap()));

    // A call that waits for an approval in the foreground: the example
    // declines it as it comes, and the call ends denied.
    ok_stdout(
        &gw.cli(&[
            "policy",
            "set",
            "orders",
            "get_order",
            "confirm",
            "--background",
            "auto",
        ])
        .await,
        "policy set",
    );
    let (status, steps) = run_example(&gw.endpoint, "orders__get_order").await;
    assert_eq!(status, 0, "{steps:?}");
    assert_eq!(step(&steps, "declined")["kind"], "approval", "{steps:?}");
    let result = step(&steps, "result");
    assert_eq!(result["background"], false, "{result}");
    assert!(
        result["text"].as_str().unwrap().contains("denied"),
        "{result}"
    );
    gw.stop().await;
}
