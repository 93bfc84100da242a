//! One fake sidecar for the control plane's tests: it talks to a real
//! control plane over the real `SidecarRegistry` API and, when the test
//! gives it a [`Builder::on_call`] handler, serves a real `SidecarCalls`
//! endpoint of its own that the control plane calls.
//!
//! [`Builder::start`]: `Register` (server `fake` unless
//! [`Builder::server`] says otherwise), then a `Report` stream opened with
//! `hello` and a catalogue (one tool, `book`, unless
//! [`Builder::without_catalogue`]), and waits for the control plane's
//! `welcome`. Every control message after it is kept for
//! [`FakeSidecar::next_control`]. [`FakeSidecar::close`] ends the stream
//! and the `SidecarCalls` endpoint (the sidecar went away); dropping the
//! fake does the same.
//!
//! Its `SidecarCalls`: `CallTool` is recorded and answered by the test's
//! handler; `CancelBackgroundCall` is recorded and answered `found`;
//! `CallStream` is UNIMPLEMENTED (as a sidecar built before it), so the
//! control plane falls back to one `CallTool` per call. Without a handler
//! nothing is served and the registered call address is `127.0.0.1:9`,
//! where nobody listens.
//!
//! [`register_request`], [`hello`] and [`catalogue`] build the messages on
//! their own, for tests that send them by hand (with other credentials,
//! say).

use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::sidecar_calls_server::{SidecarCalls, SidecarCallsServer};
use switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

/// The server a fake sidecar fronts unless told otherwise.
pub const SERVER: &str = "fake";

/// The call address registered when nothing is served.
pub const NOWHERE: &str = "http://127.0.0.1:9";

/// Upper bound on any wait of the fake.
const LIMIT: Duration = Duration::from_secs(30);

/// A `Register` request of sidecar `id` of `server`, reachable at
/// `call_address`.
pub fn register_request(server: &str, id: &str, call_address: &str) -> pb::RegisterRequest {
    pb::RegisterRequest {
        server: server.into(),
        sidecar_id: id.into(),
        call_address: call_address.into(),
        version: "test".into(),
        // As an older sidecar: no call token, so none is sent to it.
        call_token: String::new(),
    }
}

/// The `hello` that opens a report stream.
pub fn hello(server: &str, id: &str) -> pb::SidecarReport {
    pb::SidecarReport {
        report: Some(pb::sidecar_report::Report::Hello(pb::Hello {
            server: server.into(),
            sidecar_id: id.into(),
        })),
    }
}

/// A catalogue report of `server` (2025-11-25) with `tools` and
/// `capabilities`.
pub fn catalogue(server: &str, tools: &[Value], capabilities: &Value) -> pb::SidecarReport {
    pb::SidecarReport {
        report: Some(pb::sidecar_report::Report::Catalogue(
            pb::CatalogueSnapshot {
                server: server.into(),
                tools_json: tools.iter().map(Value::to_string).collect(),
                capabilities_json: capabilities.to_string(),
                server_info_json: json!({"name": server, "version": "1"}).to_string(),
                protocol_version: "2025-11-25".into(),
                ..Default::default()
            },
        )),
    }
}

/// A `SidecarCalls.CallTool` the fake received, with what a handler needs
/// to act as the sidecar (to report a background call, say).
#[derive(Debug, Clone)]
pub struct FakeCall {
    /// The request.
    pub request: pb::SidecarCallRequest,
    /// The control plane's endpoint the fake registered with.
    pub control_plane: String,
    /// The fake's server.
    pub server: String,
    /// The fake's sidecar id.
    pub sidecar_id: String,
}

type Handler = Arc<
    dyn Fn(FakeCall) -> BoxFuture<'static, Result<pb::SidecarCallResponse, Status>> + Send + Sync,
>;

/// What the fake's `SidecarCalls` received.
#[derive(Debug, Default)]
struct Seen {
    calls: Vec<pb::SidecarCallRequest>,
    cancels: Vec<pb::SidecarCancelBackgroundRequest>,
}

#[derive(Clone)]
struct Calls {
    on_call: Handler,
    control_plane: String,
    server: String,
    sidecar_id: String,
    seen: Arc<Mutex<Seen>>,
}

#[tonic::async_trait]
impl SidecarCalls for Calls {
    type CallStreamStream = futures::stream::Empty<Result<pb::SidecarCallOutcome, Status>>;

    async fn call_stream(
        &self,
        _: Request<tonic::Streaming<pb::SidecarCallFrame>>,
    ) -> Result<Response<Self::CallStreamStream>, Status> {
        Err(Status::unimplemented(
            "this fake sidecar predates CallStream",
        ))
    }

    async fn call_tool(
        &self,
        req: Request<pb::SidecarCallRequest>,
    ) -> Result<Response<pb::SidecarCallResponse>, Status> {
        let request = req.into_inner();
        self.seen.lock().unwrap().calls.push(request.clone());
        let call = FakeCall {
            request,
            control_plane: self.control_plane.clone(),
            server: self.server.clone(),
            sidecar_id: self.sidecar_id.clone(),
        };
        (self.on_call)(call).await.map(Response::new)
    }

    async fn cancel_background_call(
        &self,
        req: Request<pb::SidecarCancelBackgroundRequest>,
    ) -> Result<Response<pb::SidecarCancelBackgroundResponse>, Status> {
        self.seen.lock().unwrap().cancels.push(req.into_inner());
        Ok(Response::new(pb::SidecarCancelBackgroundResponse {
            found: true,
        }))
    }

    async fn read_resource(
        &self,
        _: Request<pb::SidecarRequest>,
    ) -> Result<Response<pb::ReadResourceResponse>, Status> {
        Err(Status::unimplemented(
            "this fake sidecar has no resources or prompts",
        ))
    }
    async fn get_prompt(
        &self,
        _: Request<pb::SidecarRequest>,
    ) -> Result<Response<pb::GetPromptResponse>, Status> {
        Err(Status::unimplemented(
            "this fake sidecar has no resources or prompts",
        ))
    }
    async fn complete(
        &self,
        _: Request<pb::SidecarRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        Err(Status::unimplemented(
            "this fake sidecar has no resources or prompts",
        ))
    }
}

/// How a [`FakeSidecar`] starts; from [`FakeSidecar::of`].
pub struct Builder {
    control_plane: String,
    id: String,
    server: String,
    catalogue: Option<(Vec<Value>, Value)>,
    on_call: Option<Handler>,
    /// Registered as the call address when nothing is served.
    address: Option<String>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("control_plane", &self.control_plane)
            .field("id", &self.id)
            .field("server", &self.server)
            .field("catalogue", &self.catalogue)
            .field("serves_calls", &self.on_call.is_some())
            .finish()
    }
}

impl Builder {
    /// Fronts `server` instead of `fake`.
    pub fn server(mut self, server: &str) -> Self {
        self.server = server.into();
        self
    }

    /// Reports `capabilities` in its catalogue (default `{"tools": {}}`).
    pub fn capabilities(mut self, capabilities: Value) -> Self {
        self.catalogue.get_or_insert_with(default_catalogue).1 = capabilities;
        self
    }

    /// Reports `tools` in its catalogue (default one tool, `book`).
    pub fn tools(mut self, tools: Vec<Value>) -> Self {
        self.catalogue.get_or_insert_with(default_catalogue).0 = tools;
        self
    }

    /// Opens its report stream with `hello` alone: the server offers no
    /// tools through it.
    pub fn without_catalogue(mut self) -> Self {
        self.catalogue = None;
        self
    }

    /// Serves `SidecarCalls`, answering each `CallTool` with `on_call`.
    pub fn on_call<F, Fut>(mut self, on_call: F) -> Self
    where
        F: Fn(FakeCall) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<pb::SidecarCallResponse, Status>> + Send + 'static,
    {
        self.on_call = Some(Arc::new(move |call| Box::pin(on_call(call))));
        self
    }

    /// Registers `address` as its call address, serving nothing there
    /// (e.g. a gRPC endpoint without `SidecarCalls`); without `on_call`.
    pub fn call_address(mut self, address: &str) -> Self {
        self.address = Some(address.into());
        self
    }

    /// Registers, opens the report stream and waits for the welcome.
    pub async fn start(self) -> FakeSidecar {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (call_address, serving) = match self.on_call {
            Some(on_call) => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind 127.0.0.1:0");
                let addr = listener.local_addr().expect("a bound listener");
                let calls = Calls {
                    on_call,
                    control_plane: self.control_plane.clone(),
                    server: self.server.clone(),
                    sidecar_id: self.id.clone(),
                    seen: seen.clone(),
                };
                let serving = tokio::spawn(async move {
                    let incoming = tonic::transport::server::TcpIncoming::from(listener);
                    let _ = tonic::transport::Server::builder()
                        .add_service(SidecarCallsServer::new(calls))
                        .serve_with_incoming(incoming)
                        .await;
                });
                (format!("http://{addr}"), Some(serving))
            }
            None => (self.address.unwrap_or_else(|| NOWHERE.to_owned()), None),
        };
        let mut registry = SidecarRegistryClient::connect(self.control_plane.clone())
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.control_plane));
        registry
            .register(register_request(&self.server, &self.id, &call_address))
            .await
            .expect("Register");
        let (reports, rx) = mpsc::channel(8);
        reports
            .send(hello(&self.server, &self.id))
            .await
            .expect("the report channel is open");
        if let Some((tools, capabilities)) = &self.catalogue {
            reports
                .send(catalogue(&self.server, tools, capabilities))
                .await
                .expect("the report channel is open");
        }
        let mut inbound = registry
            .report(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .expect("Report")
            .into_inner();
        let welcome = tokio::time::timeout(LIMIT, inbound.message())
            .await
            .unwrap_or_else(|_| panic!("{}: no welcome within {LIMIT:?}", self.id))
            .expect("welcome")
            .expect("welcome");
        assert!(
            matches!(
                welcome.message,
                Some(pb::control_message::Message::Welcome(_))
            ),
            "{}: the first control message is a welcome: {welcome:?}",
            self.id
        );
        // Keep reading, so the control plane never waits on this stream.
        let (control_tx, control) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                if control_tx.send(m).is_err() {
                    break;
                }
            }
        });
        FakeSidecar {
            id: self.id,
            server: self.server,
            call_address,
            seen,
            reports: Some(reports),
            control,
            serving,
        }
    }
}

fn default_catalogue() -> (Vec<Value>, Value) {
    (
        vec![json!({"name": "book", "inputSchema": {"type": "object"}})],
        json!({"tools": {}}),
    )
}

/// A fake sidecar, registered with its report stream open; see the module
/// docs.
#[derive(Debug)]
pub struct FakeSidecar {
    /// Its sidecar id.
    pub id: String,
    /// The server it fronts.
    pub server: String,
    /// The call address it registered.
    pub call_address: String,
    seen: Arc<Mutex<Seen>>,
    reports: Option<mpsc::Sender<pb::SidecarReport>>,
    control: mpsc::UnboundedReceiver<pb::ControlMessage>,
    serving: Option<tokio::task::JoinHandle<()>>,
}

impl FakeSidecar {
    /// A fake sidecar `id` of server `fake` at the control plane at
    /// `control_plane` (`http://HOST:PORT`), to be started.
    pub fn of(control_plane: &str, id: &str) -> Builder {
        Builder {
            control_plane: control_plane.into(),
            id: id.into(),
            server: SERVER.into(),
            catalogue: Some(default_catalogue()),
            on_call: None,
            address: None,
        }
    }

    /// Every `CallTool` request it received, in order.
    pub fn calls(&self) -> Vec<pb::SidecarCallRequest> {
        self.seen.lock().unwrap().calls.clone()
    }

    /// Every `CancelBackgroundCall` request it received, in order.
    pub fn cancels(&self) -> Vec<pb::SidecarCancelBackgroundRequest> {
        self.seen.lock().unwrap().cancels.clone()
    }

    /// Sends one more report on its stream.
    pub async fn report(&self, report: pb::SidecarReport) {
        self.reports
            .as_ref()
            .expect("the report stream is open")
            .send(report)
            .await
            .expect("the report stream is open");
    }

    /// The next control message `pick` accepts (others are skipped),
    /// within 30 s.
    pub async fn next_control<T>(
        &mut self,
        what: &str,
        mut pick: impl FnMut(pb::ControlMessage) -> Option<T>,
    ) -> T {
        let id = self.id.clone();
        tokio::time::timeout(LIMIT, async {
            loop {
                let m = self
                    .control
                    .recv()
                    .await
                    .unwrap_or_else(|| panic!("{id}: the report stream ended before {what}"));
                if let Some(t) = pick(m) {
                    return t;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{id}: no {what} within {LIMIT:?}"))
    }

    /// The calls of the next `adopt` message.
    pub async fn next_adopt(&mut self) -> Vec<pb::BackgroundCall> {
        self.next_control("adopt message", |m| match m.message {
            Some(pb::control_message::Message::Adopt(a)) => Some(a.calls),
            _ => None,
        })
        .await
    }

    /// Ends the report stream and stops serving (the sidecar went away);
    /// the control plane then drops the registration.
    pub fn close(&mut self) {
        self.reports = None;
        if let Some(s) = self.serving.take() {
            s.abort();
        }
    }
}

impl Drop for FakeSidecar {
    fn drop(&mut self) {
        self.close();
    }
}
