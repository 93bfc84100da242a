//! A gRPC handler that panics, behind `switchyard_proto::panics::layer` as
//! both servers build it: its request is answered `INTERNAL`, and the
//! server and the connection go on serving (the same request again, and
//! others). Without the layer the same panic reaches the client as a
//! reset stream (tonic reports `CANCELLED`, "h2 protocol error"), not as
//! that answer.

use std::net::SocketAddr;
use switchyard_proto::panics;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient;
use switchyard_proto::v1::sidecar_calls_server::{SidecarCalls, SidecarCallsServer};
use tonic::{Code, Request, Response, Status};

/// `CallTool` panics; the rest answer UNIMPLEMENTED.
struct Panicky;

#[tonic::async_trait]
impl SidecarCalls for Panicky {
    async fn call_tool(
        &self,
        _: Request<pb::SidecarCallRequest>,
    ) -> Result<Response<pb::SidecarCallResponse>, Status> {
        panic!("a bug in a handler");
    }

    type CallStreamStream = futures::stream::Empty<Result<pb::SidecarCallOutcome, Status>>;

    async fn call_stream(
        &self,
        _: Request<tonic::Streaming<pb::SidecarCallFrame>>,
    ) -> Result<Response<Self::CallStreamStream>, Status> {
        Err(Status::unimplemented("not here"))
    }

    async fn cancel_background_call(
        &self,
        _: Request<pb::SidecarCancelBackgroundRequest>,
    ) -> Result<Response<pb::SidecarCancelBackgroundResponse>, Status> {
        Err(Status::unimplemented("not here"))
    }

    async fn read_resource(
        &self,
        _: Request<pb::SidecarRequest>,
    ) -> Result<Response<pb::ReadResourceResponse>, Status> {
        Err(Status::unimplemented("not here"))
    }

    async fn get_prompt(
        &self,
        _: Request<pb::SidecarRequest>,
    ) -> Result<Response<pb::GetPromptResponse>, Status> {
        Err(Status::unimplemented("not here"))
    }

    async fn complete(
        &self,
        _: Request<pb::SidecarRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        Err(Status::unimplemented("not here"))
    }
}

/// Serves [`Panicky`] on a loopback port, with the layer or without.
async fn serve(with_layer: bool) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let service = SidecarCallsServer::new(Panicky);
    if with_layer {
        let router = tonic::transport::Server::builder()
            .layer(panics::layer("sidecar"))
            .add_service(service);
        tokio::spawn(router.serve_with_incoming(incoming));
    } else {
        let router = tonic::transport::Server::builder().add_service(service);
        tokio::spawn(router.serve_with_incoming(incoming));
    }
    addr
}

async fn client(addr: SocketAddr) -> SidecarCallsClient<tonic::transport::Channel> {
    SidecarCallsClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_panicking_handler_answers_internal_and_the_server_goes_on() {
    let mut c = client(serve(true).await).await;
    for _ in 0..3 {
        let status = c
            .call_tool(pb::SidecarCallRequest::default())
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Internal, "{status:?}");
        assert_eq!(status.message(), panics::MESSAGE);
        assert!(
            !status.message().contains("a bug in a handler"),
            "the panic's own text stays in the server's log"
        );
    }
    // The same connection serves other requests.
    let other = c
        .read_resource(pb::SidecarRequest::default())
        .await
        .unwrap_err();
    assert_eq!(other.code(), Code::Unimplemented, "{other:?}");
}

#[tokio::test]
async fn without_the_layer_a_panic_is_no_answer() {
    let mut c = client(serve(false).await).await;
    let status = c
        .call_tool(pb::SidecarCallRequest::default())
        .await
        .unwrap_err();
    assert_ne!(status.message(), panics::MESSAGE, "{status:?}");
}
