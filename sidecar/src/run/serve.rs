//! The service itself: [`run_with`] wires the upstream session, the call
//! service, the tasks machinery, the report stream and the HTTP endpoints
//! together, binds the listeners, prints the ready line, waits for a
//! signal or a failure, then hands over to [`super::drain`].

use super::args::RunArgs;
use super::drain::{Drain, Running, Signals, shutdown};
use super::report::report_with;
use super::settings::{RunError, Settings, config_error, hostname, settings};
use crate::api::CallService;
use crate::control::{self, ControlSettings};
use crate::http_endpoints::{self, Health};
use crate::interactions::ControlPlaneInteractions;
use crate::interactions::Interactions;
use crate::pool::SessionPool;
use crate::tools::catalogue::Catalogue;
use crate::upstream::{Upstream, UpstreamMetrics};
use crate::watch::watch_upstream_with;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use switchyard_common::audit::Audit;
use switchyard_common::connections::{
    ADMISSION_TIMEOUT, Admissions, ConnectionLimit, INTERNAL_MAX_CONNECTIONS,
};
use switchyard_common::server_spec::AuthKind;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The call address to register for a listener bound at `bound`:
/// `https://` when `SidecarCalls` is served over TLS.
pub(super) fn derived_advertise(bound: SocketAddr, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    if bound.ip().is_unspecified() {
        format!("{scheme}://{}:{}", hostname(), bound.port())
    } else {
        format!("{scheme}://{bound}")
    }
}

async fn bind(key: &'static str, addr: &str) -> Result<(TcpListener, SocketAddr), RunError> {
    let bind_error = |source| RunError::Bind {
        key,
        addr: addr.to_owned(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

/// Runs the sidecar until SIGINT/SIGTERM, then drains and stops the
/// upstream server. Prints `switchyard-sidecar: server NAME, calls on ADDR,
/// http on ADDR` on stdout once both listeners are bound.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    run_with(settings(&args)?).await
}

/// [`run`] with settings already read by [`settings`] (the binary reads
/// them first, to build the runtime `worker_threads` asks for).
pub async fn run_with(settings: Settings) -> Result<(), RunError> {
    switchyard_common::tls::install_crypto_provider();
    // Room for its two listeners' connections and the server's.
    switchyard_common::connections::raise_open_files_limit(
        2 * INTERNAL_MAX_CONNECTIONS as u64 + 256,
    );
    let registry = prometheus::Registry::new();
    let metrics =
        UpstreamMetrics::register(&registry).map_err(|source| RunError::Metrics { source })?;
    let control_settings = ControlSettings {
        control_plane: settings.control_plane.clone(),
        ca_pem: settings.control_plane_ca.clone(),
        credentials: settings.credentials.clone(),
        server: settings.server.name.clone(),
        sidecar_id: settings.sidecar_id.clone(),
        call_address: String::new(), // known once the listener is bound
        // Calls come from the control plane only: it gets this at
        // registration and sends it on every call.
        call_token: settings.calls_token.clone(),
    };
    let audit = match &settings.audit_path {
        Some(path) => Audit::to_file(path).map_err(|e| {
            config_error(
                &path.display().to_string(),
                "sidecar.audit_path",
                format!("cannot open it for appending: {e}"),
            )
        })?,
        None => Audit::to_log(),
    };
    let handler = ControlPlaneInteractions::new(&control_settings)
        .map_err(|e| config_error("control plane", "sidecar.control_plane", e.to_string()))?;
    let cards = handler.clone();
    let mut interactions = Interactions::new(Arc::new(handler), audit.clone());
    interactions.timeout = settings.interaction_timeout;
    // Stage B: task-related server requests belong to the task's initiator.
    let initiators = crate::background::Initiators::new();
    interactions.tasks = Some(initiators.clone());
    let tasks_config = crate::background::TasksConfig {
        settings: crate::background::TaskSettings {
            poll_min: settings.task_poll_min,
            failure_limit: settings.task_poll_failure_limit,
            sidecar_id: settings.sidecar_id.clone(),
            ..Default::default()
        },
        registry: Some(Arc::new(crate::background::GrpcRegistry::new(
            control::registry_client(&control_settings).map_err(|e| {
                config_error("control plane", "sidecar.control_plane", e.to_string())
            })?,
        ))),
        interactions: Some(interactions.clone()),
        initiators,
        metrics: crate::background::TaskMetrics::register(&registry)
            .map_err(|source| RunError::Metrics { source })?,
    };
    let mut upstream_config = crate::upstream::UpstreamConfig::from_spec(&settings.server);
    if let crate::upstream::TransportConfig::Http(http) = &mut upstream_config.transport {
        http.headers
            .extend(settings.secret_headers.0.iter().cloned());
    }
    upstream_config.max_input_rounds = settings.max_input_rounds;
    // Stage D: the report stream fills the holder; requests read it.
    let oauth = (settings.server.auth_kind() == AuthKind::OAuth)
        .then(|| crate::oauth::Tokens::new(&settings.server.name));
    upstream_config.oauth = oauth.as_ref().map(|(tokens, _)| tokens.clone());
    let upstream = Upstream::with_interactions(upstream_config, &metrics, interactions)
        .map_err(|source| RunError::Upstream { source })?;
    let pool = SessionPool::new(upstream.clone());
    let health = Health::new(upstream.clone());

    let (grpc_listener, calls_addr) = bind("sidecar.listen", &settings.listen).await?;
    let (http_listener, http_addr) = bind("sidecar.http_listen", &settings.http_listen).await?;
    let call_address = settings
        .advertise
        .clone()
        .unwrap_or_else(|| derived_advertise(calls_addr, settings.credentials.identity.is_some()));

    let catalogue = Catalogue::new();
    let stop = CancellationToken::new();
    // Cancelled when the grace period is over: the calls still running end.
    let abort = CancellationToken::new();
    let grpc_stop = stop.clone();
    // TLS on SidecarCalls; with a client CA, only clients with a
    // certificate it signed (the control plane's) get through.
    let grpc_tls = match &settings.credentials.identity {
        Some(identity) => Some(
            identity
                .grpc_server_config(settings.client_ca.as_deref(), settings.client_ca.is_some())
                .map_err(|e| {
                    config_error(
                        "TLS",
                        "sidecar.tls_cert_file",
                        format!("cannot set up TLS: {e}"),
                    )
                })?,
        ),
        None => None,
    };
    let service = CallService::with_pool(pool.clone())
        .with_catalogue(catalogue.clone())
        .with_audit(audit)
        .with_max_concurrent_reads(settings.max_concurrent_reads)
        .with_tasks(tasks_config)
        .with_stop(stop.clone())
        .with_abort(abort.clone());
    let tasks = service.tasks();
    let drained_tasks = tasks.clone();
    // Its callers are control plane replicas: a fixed cap on connections.
    // A connection must carry a call the guard lets through within 30 s of
    // being accepted (`Admissions`), so strangers cannot hold the places
    // the control plane needs.
    let admissions = Admissions::new(ADMISSION_TIMEOUT);
    let grpc_app =
        tonic::service::Routes::new(tonic::service::interceptor::InterceptedService::new(
            service.into_server(),
            // Only the control plane (its token, or mTLS) gets in.
            crate::guard::CallsGuard::new(control_settings.call_token.clone())
                .admitting(admissions.clone()),
        ))
        .into_axum_router()
        // A handler that panics answers its request INTERNAL.
        .layer(switchyard_proto::panics::layer("sidecar"));
    // Served as the control plane's gRPC listener is (`http_serve`): HTTP/2
    // only, TCP_NODELAY, first bytes within 30 s, the callers' deadlines
    // kept, pinged every 10 s (a control plane replica that vanished is
    // noticed and its connection closed), a connection without a call in
    // flight for 120 s asked to finish (the control plane's call stream
    // keeps its connection busy), one whose peer takes no answer data for
    // 60 s closed.
    let grpc_limits = switchyard_common::http_serve::Limits {
        http2_keep_alive: switchyard_common::http_serve::GRPC_KEEP_ALIVE,
        ..Default::default()
    };
    let grpc_connections = Arc::new(ConnectionLimit::new("gRPC", INTERNAL_MAX_CONNECTIONS));
    let mut grpc = tokio::spawn(async move {
        switchyard_common::http_serve::serve_grpc(
            grpc_listener,
            grpc_app,
            grpc_connections,
            grpc_limits,
            grpc_tls,
            Some(admissions),
            async move { grpc_stop.cancelled().await },
        )
        .await;
        Ok::<(), std::io::Error>(())
    });
    let http_stop = CancellationToken::new();
    let http_stop_signal = http_stop.clone();
    let http_router = http_endpoints::router(health.clone(), registry)
        .map_err(|source| RunError::Metrics { source })?;
    let mut http = tokio::spawn(async move {
        let connections = Arc::new(ConnectionLimit::new("HTTP", INTERNAL_MAX_CONNECTIONS));
        switchyard_common::http_serve::serve(http_listener, http_router, connections, async move {
            http_stop_signal.cancelled().await
        })
        .await;
        Ok::<(), std::io::Error>(())
    });

    let (view, watcher) =
        watch_upstream_with(upstream.clone(), catalogue, settings.list_changed_window);
    let drain = Drain::new();
    let reporter = tokio::spawn(report_with(
        ControlSettings {
            call_address: call_address.clone(),
            ..control_settings
        },
        view,
        health.clone(),
        Some(tasks),
        drain.clone(),
        oauth,
        Some(pool.clone()),
    ));

    let mut signals = Signals::listen();
    tracing::info!(server = %settings.server.name, %calls_addr, %call_address, %http_addr, sidecar_id = %settings.sidecar_id, "serving");
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "switchyard-sidecar: server {}, calls on {calls_addr}, http on {http_addr}",
            settings.server.name
        );
        let _ = out.flush();
    }

    let mut failure = None;
    tokio::select! {
        name = signals.recv() => tracing::info!("{name}: shutting down"),
        r = &mut grpc => {
            failure = Some(RunError::Serve { what: "gRPC", source: match r {
                Ok(Ok(())) => "stopped unexpectedly".into(),
                Ok(Err(e)) => Box::new(e),
                Err(e) => Box::new(e),
            }});
        }
        r = &mut http => {
            failure = Some(RunError::Serve { what: "HTTP", source: match r {
                Ok(Ok(())) => "stopped unexpectedly".into(),
                Ok(Err(e)) => Box::new(e),
                Err(e) => Box::new(e),
            }});
        }
    }

    shutdown(
        Running {
            health,
            drain,
            stop,
            abort,
            grpc,
            reporter,
            pool,
            upstream,
            watcher,
            http_stop,
            http,
            cards,
            tasks: drained_tasks,
        },
        settings.grace,
        failure,
        &mut signals,
    )
    .await
}
