//! The stage B harness shared by the task tests: a fake control plane
//! (`SidecarRegistry`) that keeps every `UpdateBackgroundCall` (a terminal
//! record is final, as in the real one), answers `Interact`, and hands out
//! `adopt` after `hello`; and the sidecar's call service in process with
//! its tasks machinery reporting there.

use super::LIMIT;
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::audit::Audit;
use switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient;
use switchyard_proto::v1::sidecar_registry_server::{SidecarRegistry, SidecarRegistryServer};
use switchyard_proto::v1::{
    BackgroundCall, BackgroundCalls, BackgroundPolicy, CompleteInteractionRequest,
    CompleteInteractionResponse, ControlMessage, InteractRequest, InteractResponse,
    RegisterRequest, RegisterResponse, SidecarCallRequest, SidecarCallResponse, SidecarReport,
    UpdateBackgroundCallRequest, Welcome, control_message, sidecar_report,
};
use switchyard_sidecar::catalogue::Catalogue;
use switchyard_sidecar::control::{
    ControlPlaneInteractions, ControlSettings, registry_client, watch_upstream_with,
};
use switchyard_sidecar::elicitation::Interactions;
use switchyard_sidecar::pool::SessionPool;
use switchyard_sidecar::service::CallService;
use switchyard_sidecar::tasks::{
    GrpcRegistry, Initiators, TaskMetrics, TaskSettings, Tasks, TasksConfig,
};
use switchyard_sidecar::upstream::{Upstream, UpstreamConfig, UpstreamMetrics};
use switchyard_test_support as support;
use tonic::transport::Channel;
use tonic::{Request, Response, Status, Streaming};

/// The poll interval floor the tests run with (`task_poll_min_ms`).
pub const POLL_MIN: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
pub struct RegistryState {
    /// Stored records by id.
    pub records: Mutex<HashMap<String, BackgroundCall>>,
    /// Every update received, in order.
    pub updates: Mutex<Vec<BackgroundCall>>,
    pub interacts: Mutex<Vec<InteractRequest>>,
    /// The `content` of the accept answer to `Interact`.
    pub answer: Mutex<Value>,
    /// Handed out as `adopt` after the next `hello`.
    pub adopt_on_hello: Mutex<Vec<BackgroundCall>>,
    pub hellos: Mutex<Vec<String>>,
    /// Answer every `Interact` with `decline` instead.
    pub decline: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Clone)]
pub struct FakeRegistry(pub Arc<RegistryState>);

pub fn terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

pub type ControlStream =
    Pin<Box<dyn futures::Stream<Item = Result<ControlMessage, Status>> + Send>>;

#[tonic::async_trait]
impl SidecarRegistry for FakeRegistry {
    async fn update_background_call(
        &self,
        request: Request<UpdateBackgroundCallRequest>,
    ) -> Result<Response<BackgroundCall>, Status> {
        let call = request
            .into_inner()
            .call
            .ok_or_else(|| Status::invalid_argument("no call"))?;
        if call.id.is_empty() {
            return Err(Status::invalid_argument("no id"));
        }
        self.0.updates.lock().unwrap().push(call.clone());
        let mut records = self.0.records.lock().unwrap();
        let stored = match records.get(&call.id) {
            Some(old) if terminal(&old.status) => old.clone(),
            _ => {
                records.insert(call.id.clone(), call.clone());
                call
            }
        };
        Ok(Response::new(stored))
    }

    async fn interact(
        &self,
        request: Request<InteractRequest>,
    ) -> Result<Response<InteractResponse>, Status> {
        self.0.interacts.lock().unwrap().push(request.into_inner());
        if self.0.decline.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(Response::new(InteractResponse {
                result_json: json!({"action": "decline"}).to_string(),
            }));
        }
        let content = self.0.answer.lock().unwrap().clone();
        Ok(Response::new(InteractResponse {
            result_json: json!({"action": "accept", "content": content}).to_string(),
        }))
    }

    async fn complete_interaction(
        &self,
        _: Request<CompleteInteractionRequest>,
    ) -> Result<Response<CompleteInteractionResponse>, Status> {
        Ok(Response::new(CompleteInteractionResponse { found: false }))
    }

    async fn register(
        &self,
        _: Request<RegisterRequest>,
    ) -> Result<Response<RegisterResponse>, Status> {
        Ok(Response::new(RegisterResponse {
            lease_ttl_seconds: 15,
            spec: None,
        }))
    }

    type ReportStream = ControlStream;

    async fn report(
        &self,
        request: Request<Streaming<SidecarReport>>,
    ) -> Result<Response<Self::ReportStream>, Status> {
        let mut inbound = request.into_inner();
        let state = self.0.clone();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        tokio::spawn(async move {
            while let Ok(Some(SidecarReport { report: Some(r) })) = inbound.message().await {
                if let sidecar_report::Report::Hello(h) = r {
                    state.hellos.lock().unwrap().push(h.sidecar_id.clone());
                    let _ = tx.unbounded_send(ControlMessage {
                        message: Some(control_message::Message::Welcome(Welcome {
                            lease_ttl_seconds: 15,
                        })),
                    });
                    let mut calls: Vec<BackgroundCall> =
                        std::mem::take(&mut *state.adopt_on_hello.lock().unwrap());
                    if !calls.is_empty() {
                        for c in &mut calls {
                            c.sidecar_id = h.sidecar_id.clone();
                        }
                        let _ = tx.unbounded_send(ControlMessage {
                            message: Some(control_message::Message::Adopt(BackgroundCalls {
                                calls,
                            })),
                        });
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(rx.map(Ok)) as ControlStream))
    }
}

pub struct Registry {
    pub state: Arc<RegistryState>,
    pub url: String,
}

impl Registry {
    pub async fn start() -> Registry {
        let state = Arc::new(RegistryState::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(SidecarRegistryServer::new(FakeRegistry(state.clone())))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        Registry {
            state,
            url: format!("http://{addr}"),
        }
    }

    pub fn answer_with(&self, content: Value) {
        *self.state.answer.lock().unwrap() = content;
    }

    /// Answers every later `Interact` with `decline`.
    pub fn decline_all(&self) {
        self.state
            .decline
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Every update received, in order.
    pub fn all_updates(&self) -> Vec<BackgroundCall> {
        self.state.updates.lock().unwrap().clone()
    }

    pub fn updates(&self, id: &str) -> Vec<BackgroundCall> {
        self.state
            .updates
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.id == id)
            .cloned()
            .collect()
    }

    pub fn record(&self, id: &str) -> Option<BackgroundCall> {
        self.state.records.lock().unwrap().get(id).cloned()
    }

    /// Waits until the stored record of `id` is terminal.
    pub async fn finished(&self, id: &str) -> BackgroundCall {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            if let Some(r) = self.record(id)
                && terminal(&r.status)
            {
                return r;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "background call {id} not finished within {LIMIT:?}: {:?}",
                self.record(id)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Marks `id` cancelled, as the control plane does before it calls the
    /// sidecar.
    pub fn cancel(&self, id: &str) {
        if let Some(r) = self.state.records.lock().unwrap().get_mut(id) {
            r.status = "cancelled".into();
        }
    }
}

// ---- the sidecar in process -----------------------------------------------------

pub struct Side {
    pub client: SidecarCallsClient<Channel>,
    pub upstream: Upstream,
    pub tasks: Tasks,
    pub initiators: Arc<Initiators>,
    pub metrics: prometheus::Registry,
    pub _aborts: Vec<tokio::task::AbortHandle>,
}

impl Drop for Side {
    fn drop(&mut self) {
        for a in &self._aborts {
            a.abort();
        }
    }
}

pub fn control_settings(registry: &Registry, server: &str) -> ControlSettings {
    ControlSettings {
        control_plane: registry.url.clone(),
        ca_pem: None,
        credentials: Default::default(),
        server: server.into(),
        sidecar_id: "sidecar-test".into(),
        call_address: String::new(),
    }
}

/// The sidecar's call service on `config`'s server (named `server` towards
/// the control plane), reporting to `registry` (interactions through its
/// `Interact`); background calls fail after `failure_limit` of poll errors.
pub async fn side_with(
    config: UpstreamConfig,
    registry: &Registry,
    server: &str,
    failure_limit: Duration,
) -> Side {
    support::init_tracing();
    let settings = control_settings(registry, server);
    let initiators = Initiators::new();
    let mut interactions = Interactions::new(
        Arc::new(ControlPlaneInteractions::new(&settings).unwrap()),
        Audit::to_log(),
    );
    interactions.timeout = Duration::from_secs(30);
    interactions.tasks = Some(initiators.clone());
    let upstream = Upstream::with_interactions(
        config,
        &UpstreamMetrics::unregistered(),
        interactions.clone(),
    )
    .unwrap();
    let catalogue = Catalogue::new();
    let (mut view, watcher) = watch_upstream_with(
        upstream.clone(),
        catalogue.clone(),
        Duration::from_millis(200),
    );
    tokio::time::timeout(LIMIT, view.catalogue.wait_for(Option::is_some))
        .await
        .expect("catalogue listed in time")
        .unwrap();
    let metrics = prometheus::Registry::new();
    let service = CallService::with_pool(SessionPool::new(upstream.clone()))
        .with_catalogue(catalogue)
        .with_tasks(TasksConfig {
            settings: TaskSettings {
                poll_min: POLL_MIN,
                failure_limit,
                sidecar_id: "sidecar-test".into(),
            },
            registry: Some(Arc::new(GrpcRegistry::new(
                registry_client(&settings).unwrap(),
            ))),
            interactions: Some(interactions),
            initiators: initiators.clone(),
            metrics: TaskMetrics::register(&metrics).unwrap(),
        });
    let tasks = service.tasks();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let client = SidecarCallsClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    Side {
        client,
        upstream,
        tasks,
        initiators,
        metrics,
        _aborts: vec![watcher.abort_handle(), server.abort_handle()],
    }
}

/// A background policy for call `id` of server `server`.
pub fn policy(server: &str, id: &str, auto_after_ms: u64) -> BackgroundPolicy {
    BackgroundPolicy {
        background_call_id: id.into(),
        auto_after_ms,
        allowed: true,
        foreground_limit_ms: 600_000,
        max_duration_ms: 3_600_000,
        engine_tool: format!("{server}__{id}"),
    }
}

/// A `tools/call` of `tool` in session S1, run R1.
pub fn request(
    tool: &str,
    arguments: Value,
    background: Option<BackgroundPolicy>,
) -> SidecarCallRequest {
    SidecarCallRequest {
        params_json: json!({"name": tool, "arguments": arguments}).to_string(),
        session_id: "S1".into(),
        run_id: "R1".into(),
        background,
        ..Default::default()
    }
}

impl Side {
    /// One call through the sidecar's gRPC API, bounded by [`LIMIT`].
    pub async fn call(&self, request: SidecarCallRequest) -> Result<SidecarCallResponse, Status> {
        let mut client = self.client.clone();
        tokio::time::timeout(LIMIT, client.call_tool(request))
            .await
            .expect("call answered in time")
            .map(Response::into_inner)
    }
}
