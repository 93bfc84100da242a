//! The stage B harness shared by the task tests: the sidecar's call
//! service in process with its tasks machinery reporting to test support's
//! fake control plane (which keeps every `UpdateBackgroundCall`, answers
//! `Interact` and hands out `adopt` after `hello`).

use super::LIMIT;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use switchyard_common::audit::Audit;
use switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient;
use switchyard_proto::v1::{BackgroundPolicy, SidecarCallRequest, SidecarCallResponse};
use switchyard_sidecar::api::CallService;
use switchyard_sidecar::background::{
    GrpcRegistry, Initiators, TaskMetrics, TaskSettings, Tasks, TasksConfig,
};
use switchyard_sidecar::control::{ControlSettings, registry_client};
use switchyard_sidecar::interactions::ControlPlaneInteractions;
use switchyard_sidecar::interactions::Interactions;
use switchyard_sidecar::pool::SessionPool;
use switchyard_sidecar::tools::catalogue::Catalogue;
use switchyard_sidecar::upstream::{Upstream, UpstreamConfig, UpstreamMetrics};
use switchyard_sidecar::watch::watch_upstream_with;
use switchyard_test_support as support;
use switchyard_test_support::fake_control_plane::FakeControlPlane;
use tonic::transport::Channel;
use tonic::{Response, Status};

/// The poll interval floor the tests run with (`task_poll_min_ms`).
pub const POLL_MIN: Duration = Duration::from_millis(100);

/// How long an adopted task the server does not know waits for its
/// creator's result before it fails (`TaskSettings::not_found_grace`).
pub const NOT_FOUND_GRACE: Duration = Duration::from_secs(3);

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

pub fn control_settings(registry: &FakeControlPlane, server: &str) -> ControlSettings {
    ControlSettings {
        control_plane: registry.url.clone(),
        ca_pem: None,
        credentials: Default::default(),
        server: server.into(),
        sidecar_id: "sidecar-test".into(),
        call_address: String::new(),
        call_token: switchyard_sidecar::guard::CallToken::generate(),
    }
}

/// The sidecar's call service on `config`'s server (named `server` towards
/// the control plane), reporting to `registry` (interactions through its
/// `Interact`); background calls fail after `failure_limit` of poll errors.
pub async fn side_with(
    config: UpstreamConfig,
    registry: &FakeControlPlane,
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
                not_found_grace: NOT_FOUND_GRACE,
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
        move_when_task: false,
        principal: "engine-a".into(),
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
