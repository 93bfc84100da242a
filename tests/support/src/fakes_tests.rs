//! The two fakes against each other, over real gRPC on loopback: what each
//! promises in its docs holds, so a test that uses one can trust it.

use crate::fake_control_plane::{Event, FakeControlPlane};
use crate::fake_sidecar::{self, FakeCall, FakeSidecar};
use serde_json::{Value, json};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient;
use switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient;
use tonic::Code;

fn working(id: &str) -> pb::BackgroundCall {
    pb::BackgroundCall {
        id: id.into(),
        server: "fake".into(),
        status: "working".into(),
        sidecar_id: "sc-old".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_fake_sidecar_registers_says_hello_and_reports_its_catalogue() {
    let mut cp = FakeControlPlane::start().await;
    let _sc = FakeSidecar::of(&cp.url, "sc-1")
        .tools(vec![json!({"name": "a"}), json!({"name": "b"})])
        .start()
        .await;
    let reg = cp.register().await;
    assert_eq!(
        (
            reg.server.as_str(),
            reg.sidecar_id.as_str(),
            reg.call_address.as_str()
        ),
        ("fake", "sc-1", fake_sidecar::NOWHERE)
    );
    let hello = cp
        .report("hello", |r| {
            matches!(r, pb::sidecar_report::Report::Hello(_))
        })
        .await;
    let pb::sidecar_report::Report::Hello(hello) = hello else {
        unreachable!()
    };
    assert_eq!(hello.sidecar_id, "sc-1");
    let (tools, snapshot) = cp.catalogue().await;
    assert_eq!(tools, ["a", "b"]);
    assert_eq!(snapshot.capabilities_json, json!({"tools": {}}).to_string());
    assert_eq!(cp.hellos(), ["sc-1"]);
}

#[tokio::test]
async fn adoption_on_hello_goes_to_the_next_sidecar_and_streams_can_be_broken() {
    let mut cp = FakeControlPlane::start().await;
    cp.adopt_on_hello([working("call-1"), working("call-2")]);
    let mut sc = FakeSidecar::of(&cp.url, "sc-2")
        .without_catalogue()
        .start()
        .await;
    let adopted = sc.next_adopt().await;
    assert_eq!(
        adopted
            .iter()
            .map(|c| (c.id.as_str(), c.sidecar_id.as_str()))
            .collect::<Vec<_>>(),
        [("call-1", "sc-2"), ("call-2", "sc-2")]
    );
    cp.break_streams();
    cp.next("the stream's end", |e| {
        matches!(e, Event::ReportClosed).then_some(())
    })
    .await;
    // The next sidecar is welcomed, with nothing left to adopt.
    let _again = FakeSidecar::of(&cp.url, "sc-3").start().await;
    assert_eq!(cp.hellos(), ["sc-2", "sc-3"]);
}

#[tokio::test]
async fn a_fake_sidecar_answers_calls_with_its_handler_and_records_them() {
    let cp = FakeControlPlane::start().await;
    let control_plane = cp.url.clone();
    let sc = FakeSidecar::of(&cp.url, "sc-4")
        .server("orders")
        .on_call(move |call: FakeCall| {
            let expected = control_plane.clone();
            async move {
                assert_eq!(call.control_plane, expected);
                if call.request.session_id == "refused" {
                    return Err(tonic::Status::unavailable("refused"));
                }
                Ok(pb::SidecarCallResponse {
                    model_text: format!("{} of {}", call.sidecar_id, call.server),
                    ..Default::default()
                })
            }
        })
        .start()
        .await;
    assert_ne!(sc.call_address, fake_sidecar::NOWHERE);
    let mut client = SidecarCallsClient::connect(sc.call_address.clone())
        .await
        .unwrap();
    let r = client
        .call_tool(pb::SidecarCallRequest {
            params_json: json!({"name": "book"}).to_string(),
            session_id: "s1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.model_text, "sc-4 of orders");
    let e = client
        .call_tool(pb::SidecarCallRequest {
            session_id: "refused".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable);
    let found = client
        .cancel_background_call(pb::SidecarCancelBackgroundRequest {
            id: "call-9".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .found;
    assert!(found);
    let e = client
        .call_stream(tokio_stream::iter(Vec::<pb::SidecarCallFrame>::new()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    let sessions: Vec<String> = sc.calls().into_iter().map(|c| c.session_id).collect();
    assert_eq!(sessions, ["s1", "refused"]);
    assert_eq!(sc.cancels()[0].id, "call-9");
}

#[tokio::test]
async fn updates_are_kept_a_terminal_record_is_final_and_interactions_are_answered() {
    let cp = FakeControlPlane::start().await;
    let mut registry = SidecarRegistryClient::connect(cp.url.clone())
        .await
        .unwrap();
    let mut update = async |call: pb::BackgroundCall| {
        registry
            .update_background_call(pb::UpdateBackgroundCallRequest { call: Some(call) })
            .await
            .unwrap()
            .into_inner()
    };
    update(working("call-1")).await;
    let mut done = working("call-1");
    done.status = "completed".into();
    assert_eq!(update(done).await.status, "completed");
    assert_eq!(update(working("call-1")).await.status, "completed");
    assert_eq!(cp.updates("call-1").len(), 3);
    assert_eq!(cp.finished("call-1").await.status, "completed");
    update(working("call-2")).await;
    cp.cancel("call-2");
    assert_eq!(cp.record("call-2").unwrap().status, "cancelled");
    assert_eq!(cp.all_updates().len(), 4);

    let mut registry = SidecarRegistryClient::connect(cp.url.clone())
        .await
        .unwrap();
    let mut interact = async || {
        registry
            .interact(pb::InteractRequest {
                interaction_id: "i-1".into(),
                ..Default::default()
            })
            .await
            .map(|r| serde_json::from_str::<Value>(&r.into_inner().result_json).unwrap())
    };
    assert_eq!(
        interact().await.unwrap(),
        json!({"action": "accept", "content": null})
    );
    cp.refuse_interacts(1);
    cp.answer_with(json!({"city": "Lyon"}));
    assert_eq!(interact().await.unwrap_err().code(), Code::Unavailable);
    assert_eq!(
        interact().await.unwrap(),
        json!({"action": "accept", "content": {"city": "Lyon"}})
    );
    cp.decline_all();
    assert_eq!(interact().await.unwrap(), json!({"action": "decline"}));
    assert_eq!(cp.interacts().len(), 4);
    registry
        .complete_interaction(pb::CompleteInteractionRequest {
            elicitation_id: "e-1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(cp.completes()[0].elicitation_id, "e-1");
}
