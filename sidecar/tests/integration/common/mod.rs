//! A `SidecarCalls` service in process, on a real upstream server, with the
//! upstream watcher keeping its catalogue (shared by the stage A tests).

pub mod tasks;

use std::path::PathBuf;
use std::time::Duration;
use switchyard_common::audit::Audit;
use switchyard_proto::v1::sidecar_calls_client::SidecarCallsClient;
use switchyard_proto::v1::{SidecarCallRequest, SidecarCallResponse};
use switchyard_sidecar::api::CallService;
use switchyard_sidecar::tools::catalogue::Catalogue;
use switchyard_sidecar::upstream::{
    StdioConfig, TransportConfig, Upstream, UpstreamConfig, UpstreamMetrics,
};
use switchyard_sidecar::watch::{UpstreamView, watch_upstream_with};
use switchyard_test_support as support;
use tonic::transport::Channel;

pub const LIMIT: Duration = Duration::from_secs(60);

/// The `SidecarCalls` token the sidecar processes of these tests are given
/// (`--calls-token-file`), so the tests can call them as the control plane
/// does.
pub const CALLS_TOKEN: &str = "sidecar-tests-calls-token-0123456789";

/// A file holding [`CALLS_TOKEN`] (written once per test process).
pub fn calls_token_file() -> String {
    static FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let file = std::env::temp_dir().join(format!(
            "switchyard-sidecar-tests-{}.calls-token",
            std::process::id()
        ));
        std::fs::write(&file, CALLS_TOKEN).expect("write the calls token file");
        file
    })
    .to_string_lossy()
    .into_owned()
}

/// A `SidecarCalls` client sending [`CALLS_TOKEN`].
pub type CallsClient = SidecarCallsClient<
    tonic::service::interceptor::InterceptedService<Channel, switchyard_common::tls::BearerToken>,
>;

/// A client of a sidecar process's `SidecarCalls` at `addr` (`HOST:PORT`),
/// with [`CALLS_TOKEN`].
pub async fn calls_client(addr: &str) -> CallsClient {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    SidecarCallsClient::with_interceptor(
        channel,
        switchyard_common::tls::BearerToken::new(Some(CALLS_TOKEN)),
    )
    .max_decoding_message_size(64 * 1024 * 1024)
}

/// Tests that load this 2-core machine the most (moving many megabytes
/// through a stdio server) and tests that assert on how long restarts
/// take hold it, so they take turns; the other tests of the binary run
/// alongside.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub fn stdio(name: &str, command: impl Into<String>, args: &[&str]) -> UpstreamConfig {
    UpstreamConfig::new(
        name,
        TransportConfig::Stdio(StdioConfig {
            command: command.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            ..StdioConfig::default()
        }),
    )
}

pub fn stub(script: &str) -> UpstreamConfig {
    let path = support::stub_script(script);
    stdio(
        script.trim_end_matches(".py"),
        "python3",
        &[path.to_str().unwrap()],
    )
}

pub struct Harness {
    pub client: SidecarCallsClient<Channel>,
    pub upstream: Upstream,
    pub catalogue: Catalogue,
    pub view: UpstreamView,
    pub audit_path: PathBuf,
    _dir: tempfile::TempDir,
    _tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        for t in &self._tasks {
            t.abort();
        }
    }
}

/// Starts `config`'s server, the watcher (coalescing `window`) and the
/// call service, and waits for the first catalogue.
pub async fn harness(config: UpstreamConfig, window: Duration) -> Harness {
    support::init_tracing();
    let upstream = Upstream::new(config, &UpstreamMetrics::unregistered()).unwrap();
    harness_with(upstream, window, |service| service).await
}

/// [`harness`] on an upstream session of the caller's (e.g. one that
/// handles interactions), the call service set up by `configure`.
pub async fn harness_with(
    upstream: Upstream,
    window: Duration,
    configure: impl FnOnce(CallService) -> CallService,
) -> Harness {
    support::init_tracing();
    let catalogue = Catalogue::new();
    let (mut view, watcher) = watch_upstream_with(upstream.clone(), catalogue.clone(), window);
    tokio::time::timeout(LIMIT, view.catalogue.wait_for(Option::is_some))
        .await
        .expect("catalogue listed in time")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let audit_path = dir.path().join("audit.jsonl");
    let service = configure(
        CallService::new(upstream.clone())
            .with_catalogue(catalogue.clone())
            .with_audit(Audit::to_file(&audit_path).unwrap()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    // The control plane's limit (docs/architecture.md): multi-MB
    // attachments come back in one message.
    let client = SidecarCallsClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
        .max_decoding_message_size(64 * 1024 * 1024);
    Harness {
        client,
        upstream,
        catalogue,
        view,
        audit_path,
        _dir: dir,
        _tasks: vec![watcher.abort_handle(), server.abort_handle()],
    }
}

impl Harness {
    pub async fn call(
        &self,
        tool: &str,
        arguments: serde_json::Value,
        retry_safe: bool,
    ) -> Result<SidecarCallResponse, tonic::Status> {
        let mut client = self.client.clone();
        let request = SidecarCallRequest {
            params_json: serde_json::json!({"name": tool, "arguments": arguments}).to_string(),
            session_id: "S1".into(),
            run_id: "R1".into(),
            retry_safe,
            ..Default::default()
        };
        tokio::time::timeout(LIMIT, client.call_tool(request))
            .await
            .expect("call finished in time")
            .map(tonic::Response::into_inner)
    }

    /// The audit records written so far.
    pub fn audit(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.audit_path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// An upstream session with metrics exported nowhere.
pub fn upstream(config: UpstreamConfig) -> Upstream {
    support::init_tracing();
    Upstream::new(config, &UpstreamMetrics::unregistered()).unwrap()
}

/// An upstream session whose metrics are registered in the returned registry.
pub fn upstream_with_registry(config: UpstreamConfig) -> (Upstream, prometheus::Registry) {
    support::init_tracing();
    let registry = prometheus::Registry::new();
    let metrics = UpstreamMetrics::register(&registry).unwrap();
    (Upstream::new(config, &metrics).unwrap(), registry)
}

/// The value of a counter (summed over series matching every label).
pub fn counter(registry: &prometheus::Registry, name: &str, labels: &[(&str, &str)]) -> u64 {
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{'))
        })
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}
