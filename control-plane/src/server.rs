//! Starting a control-plane replica: open the store, load the read model,
//! sync the configured servers, then serve the three gRPC services on one
//! port and `/metrics`, `/healthz`, `/readyz` over HTTP.
//!
//! The tower/tonic stack, in one place:
//! - one `tonic::transport::Server` for the engine, admin and sidecar
//!   registry services (engines, admins and sidecars share the endpoint);
//! - HTTP/2 keep-alive pings every 10 s, so a vanished sidecar's report
//!   stream breaks (and its registration is revoked) without waiting for TCP;
//! - `TCP_NODELAY`, because calls are small request/response messages;
//! - message size limits raised to 64 MiB, as MCP results can be large.

use crate::ControlPlane;
use crate::api::{admin::AdminApi, engine::EngineApi, http, sidecar::SidecarApi};
use crate::audit::Audit;
use crate::config::Config;
use crate::interactions::Interactions;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::routing::Router;
use crate::state::{Change, State};
use crate::store::{AnyStore, EmbeddedConfig, EtcdConfig, StoreConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use switchyard_proto::v1::admin_service_server::AdminServiceServer;
use switchyard_proto::v1::engine_service_server::EngineServiceServer;
use switchyard_proto::v1::sidecar_registry_server::SidecarRegistryServer;
use tokio_util::sync::CancellationToken;

const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// Why a replica could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store could not be opened or read.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// Registering the configured servers failed.
    #[error("registering the configured servers: {0}")]
    Registry(#[from] crate::registry::RegistryError),
    /// The audit file could not be opened.
    #[error("audit.path {path}: {source}")]
    Audit {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A running replica.
#[derive(Debug)]
pub struct Running {
    /// The shared core.
    pub cp: Arc<ControlPlane>,
    /// The bound gRPC address (engines, admins, sidecars).
    pub grpc_addr: SocketAddr,
    /// The bound HTTP address (metrics, health).
    pub http_addr: SocketAddr,
    shutdown: CancellationToken,
    grpc: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops serving: readiness goes false, then the servers stop (in-flight
    /// calls get up to `grace`).
    pub async fn stop(self, grace: Duration) {
        self.cp
            .ready
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self.shutdown.cancel();
        let _ = tokio::time::timeout(grace, self.grpc).await;
    }
}

/// Opens the store named by the configuration.
pub async fn open_store(config: &Config) -> Result<AnyStore, crate::store::StoreError> {
    let store = if config.store.etcd_endpoints.is_empty() {
        StoreConfig::Embedded(
            EmbeddedConfig::new(config.store.path.clone()).with_root(config.store.root.clone()),
        )
    } else {
        StoreConfig::Etcd(
            EtcdConfig::new(config.store.etcd_endpoints.clone())
                .with_root(config.store.root.clone()),
        )
    };
    AnyStore::open(store).await
}

/// Starts a replica. With `sync_servers`, the configured servers become
/// the registry's config-origin servers.
pub async fn start(config: &Config, sync_servers: bool) -> Result<Running, StartError> {
    let store = open_store(config).await?;
    let metrics = Metrics::new();
    let registry = Registry::new(store.clone(), metrics.clone());
    if sync_servers {
        registry
            .sync_config_servers(&config.servers, config.control_plane.prune_config_servers)
            .await?;
    }
    let audit = match &config.audit.path {
        Some(path) => Audit::to_file(path).map_err(|source| StartError::Audit {
            path: path.display().to_string(),
            source,
        })?,
        None => Audit::to_log(),
    };
    let state = State::start(store.clone()).await?;
    let shutdown = CancellationToken::new();
    let audit = Arc::new(audit);
    let interactions = Interactions::new(
        store,
        state.clone(),
        metrics.clone(),
        audit.clone(),
        Duration::from_secs(config.limits.interaction_timeout_sec),
        shutdown.clone(),
    );
    let cp = Arc::new(ControlPlane {
        state: state.clone(),
        registry,
        router: Router::new(),
        interactions,
        audit,
        metrics: metrics.clone(),
        lease_ttl: Duration::from_secs(config.control_plane.sidecar_lease_ttl_sec),
        call_timeout: Duration::from_secs(config.control_plane.call_timeout_sec),
        ready: std::sync::atomic::AtomicBool::new(false),
        shutdown: shutdown.clone(),
    });

    let grpc_listener = tokio::net::TcpListener::bind(&config.control_plane.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.control_plane.listen.clone(),
            source,
        })?;
    let http_listener = tokio::net::TcpListener::bind(&config.control_plane.http_listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.control_plane.http_listen.clone(),
            source,
        })?;
    let grpc_addr = grpc_listener.local_addr().expect("bound");
    let http_addr = http_listener.local_addr().expect("bound");

    // Cancellations requested on other replicas, and the state gauges.
    {
        let cp = cp.clone();
        let mut changes = state.subscribe();
        tokio::spawn(async move {
            let mut gauges = tokio::time::interval(Duration::from_secs(2));
            loop {
                tokio::select! {
                    c = changes.recv() => match c {
                        Ok(Change::Cancel { session, call_id }) => {
                            if cp.router.cancel(&session, &call_id) {
                                tracing::info!(%session, %call_id, "call cancelled on request of another replica");
                            }
                        }
                        Ok(_) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(_) => return,
                    },
                    _ = gauges.tick() => cp.metrics.observe_state(&cp.state.snapshot()),
                }
            }
        });
    }

    // Expired interactions, and those of deleted sessions, on every replica.
    cp.interactions.spawn_sweeper();

    let engine = EngineServiceServer::new(EngineApi::new(cp.clone()))
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let admin = AdminServiceServer::new(AdminApi::new(cp.clone()))
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let sidecars = SidecarRegistryServer::new(SidecarApi::new(cp.clone()))
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let stop = shutdown.clone();
    let grpc = tokio::spawn(async move {
        // `Server::tcp_nodelay` only applies to sockets tonic accepts itself,
        // not to an `incoming` stream: set it on the accepted sockets here.
        // Without it, Nagle holds back the small response frames (headers,
        // data and trailers go out in separate writes) until the peer's
        // delayed ACK, up to 40 ms.
        let incoming =
            tonic::transport::server::TcpIncoming::from(grpc_listener).with_nodelay(Some(true));
        let result = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(10)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .add_service(engine)
            .add_service(admin)
            .add_service(sidecars)
            .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "gRPC server failed");
        }
    });
    tokio::spawn(http::serve(http_listener, cp.clone(), shutdown.clone()));
    cp.ready.store(true, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(%grpc_addr, %http_addr, "control plane serving");
    Ok(Running {
        cp,
        grpc_addr,
        http_addr,
        shutdown,
        grpc,
    })
}
