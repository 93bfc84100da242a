//! Starting a control-plane replica: open the store, load the read model,
//! sync the configured servers, then serve the three gRPC services on one
//! port, `/metrics`, `/healthz`, `/readyz` and the admin console (`/ui`)
//! over HTTP, and the MCP endpoint
//! when `[mcp] listen` is set ([`crate::mcp`]).
//!
//! The tower/tonic stack, in one place:
//! - the engine, admin and sidecar registry services as one set of tonic
//!   routes (engines, admins and sidecars share the endpoint), served by
//!   `switchyard_common::http_serve::serve_grpc`: HTTP/2 only, at most
//!   `control_plane.max_connections` connections, the callers' deadlines
//!   (`grpc-timeout`) kept, and an idle connection closed after
//!   `control_plane.idle_timeout_sec`;
//! - TLS (rustls, ring) when `[tls]` has a certificate, verifying client
//!   certificates against `client_ca_file` (mTLS; [`crate::tls`]);
//! - per service, an [`crate::auth::Guard`] interceptor that authenticates
//!   the caller (bearer token or client certificate) and checks its role
//!   before the request reaches the service ([`crate::auth`]);
//! - HTTP/2 keep-alive pings every 10 s, so a vanished sidecar's report
//!   stream breaks (and its registration is revoked) without waiting for TCP;
//! - `TCP_NODELAY`, because calls are small request/response messages;
//! - message size limits raised to 64 MiB, as MCP results can be large.
//!
//! Shutdown ([`Running::stop`]): readiness goes false first; then the gRPC
//! server stops accepting connections and requests (HTTP/2 GOAWAY) and the
//! long-lived streams (session events, sidecar reports) end, while calls
//! in flight run to completion for up to the grace period; `/metrics` and
//! `/readyz` keep answering (503) until then.

use crate::ControlPlane;
use crate::api::{admin::AdminApi, engine::EngineApi, http, sidecar::SidecarApi};
use crate::audit::Audit;
use crate::auth::{Authenticator, Service};
use crate::call::route::Router;
use crate::config::Config;
use crate::interactions::Interactions;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::state::{Change, State};
use crate::store::{AnyStore, EmbeddedConfig, EtcdConfig, Metered, StoreConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use switchyard_common::tls::CredentialError;
use switchyard_proto::v1::admin_service_server::AdminServiceServer;
use switchyard_proto::v1::engine_service_server::EngineServiceServer;
use switchyard_proto::v1::sidecar_registry_server::SidecarRegistryServer;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;

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
    /// A certificate, key or token file of `[tls]` or `[auth]` cannot be
    /// used.
    #[error(transparent)]
    Credential(#[from] CredentialError),
    /// A configured server's OAuth settings cannot be used (a client
    /// secret but no token encryption key).
    #[error("{0}")]
    OAuth(String),
    /// rustls refused the TLS configuration.
    #[error("tls: cannot set up TLS on the gRPC listener: {0}")]
    Tls(String),
    /// rustls refused the MCP endpoint's TLS configuration (`[mcp] tls`).
    #[error("mcp.tls: cannot set up TLS on the MCP endpoint: {0}")]
    McpTls(String),
    /// An address could not be bound.
    #[error("{key}: cannot listen on {addr}: {error}")]
    Bind {
        /// The setting (`control_plane.listen`, `control_plane.http_listen`,
        /// `control_plane.metrics_listen` or `mcp.listen`).
        key: &'static str,
        /// The address.
        addr: String,
        /// The OS error: in the message, not a source, so a printed error
        /// chain (`up`'s) does not repeat it.
        error: std::io::Error,
    },
}

/// Exit status for a bad configuration or usage (sysexits `EX_USAGE`),
/// shared by every binary and command.
pub const EXIT_USAGE: u8 = 64;

impl StartError {
    /// The process exit status: 64 (EX_USAGE) for unusable credentials or
    /// TLS settings, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::Credential(_)
            | StartError::Tls(_)
            | StartError::McpTls(_)
            | StartError::OAuth(_) => EXIT_USAGE,
            _ => 1,
        }
    }
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
    /// The bound MCP endpoint address (`[mcp] listen`), if it is served.
    pub mcp_addr: Option<SocketAddr>,
    /// The bound metrics and probes address
    /// (`control_plane.metrics_listen`), if it is served.
    pub metrics_addr: Option<SocketAddr>,
    shutdown: CancellationToken,
    grpc: tokio::task::JoinHandle<()>,
    mcp: Option<tokio::task::JoinHandle<()>>,
    http_stop: CancellationToken,
    http: tokio::task::JoinHandle<()>,
    metrics: Option<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops serving: readiness goes false first; then the gRPC server
    /// stops accepting work and the long-lived streams end, and calls in
    /// flight get up to `grace` to finish (those still running then are
    /// dropped); the HTTP endpoints stop last. Returns whether everything
    /// in flight finished within `grace`.
    pub async fn stop(self, grace: Duration) -> bool {
        self.cp
            .ready
            .store(false, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            grace_s = grace.as_secs_f64(),
            "shutting down: not ready; draining in-flight calls"
        );
        self.shutdown.cancel();
        let both = async {
            let _ = self.grpc.await;
            if let Some(mcp) = self.mcp {
                let _ = mcp.await;
            }
        };
        let drained = match tokio::time::timeout(grace, both).await {
            Ok(_) => {
                tracing::info!("in-flight calls drained");
                true
            }
            Err(_) => {
                tracing::warn!(
                    grace_s = grace.as_secs_f64(),
                    "grace period over; dropping the calls still in flight"
                );
                false
            }
        };
        self.http_stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(1), self.http).await;
        if let Some(metrics) = self.metrics {
            let _ = tokio::time::timeout(Duration::from_secs(1), metrics).await;
        }
        drained
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
    let metrics = Metrics::new();
    // Credentials first: a bad file is a configuration error (exit 64),
    // reported before anything else is touched.
    let tls = crate::tls::TlsMaterial::load(&config.tls)?;
    let auth = Arc::new(Authenticator::load(&config.auth, Some(&metrics))?);
    // The key ring of secrets at rest (stage D): its files are checked
    // now, before anything else is touched.
    let key_ring = crate::oauth::KeyRing::load(&config.store)?.map(Arc::new);
    if let Some(problem) = config.oauth_key_problem() {
        return Err(StartError::OAuth(problem));
    }
    // Room for the listeners' connections (one descriptor each), the
    // store's and the sidecars'.
    let mcp_connections = if config.mcp.listen.is_some() {
        config.mcp.max_connections
    } else {
        0
    };
    let metrics_connections = if config.control_plane.metrics_listen.is_some() {
        switchyard_common::connections::INTERNAL_MAX_CONNECTIONS
    } else {
        0
    };
    let needed = config.control_plane.max_connections
        + mcp_connections
        + metrics_connections
        + switchyard_common::connections::INTERNAL_MAX_CONNECTIONS;
    switchyard_common::connections::raise_open_files_limit(needed as u64 + 256);
    // `[mcp] tls`: the endpoint presents the listener's certificate.
    let mcp_tls = match (config.mcp.tls, &tls.identity) {
        (true, Some(identity)) => Some(identity.http_server_config().map_err(StartError::McpTls)?),
        _ => None,
    };
    let grpc_tls = tls.server().map_err(StartError::Tls)?;
    // The one store every component shares, counted in the store metrics.
    let store = Metered::new(open_store(config).await?, metrics.clone());
    // Servers' secret header, environment and URL values are stored sealed.
    let registry = Registry::new(store.clone()).with_key_ring(key_ring.clone());
    if key_ring.is_none()
        && let Some(s) = config
            .servers
            .iter()
            .find(|s| crate::oauth::server_secrets::has_plain_secrets(s))
    {
        tracing::warn!(server = %s.name, "secret-looking header, environment or URL values are stored as given: set [store] token_encryption_key_file to store them sealed, or use header_files");
    }
    let audit = match &config.audit.path {
        Some(path) => Audit::to_file(path).map_err(|source| StartError::Audit {
            path: path.display().to_string(),
            source,
        })?,
        None => Audit::to_log(),
    };
    let audit = Arc::new(audit);
    let oauth = Arc::new(crate::oauth::OAuth::new(
        store.clone(),
        key_ring,
        audit.clone(),
        metrics.clone(),
        &config.oauth,
    ));
    if sync_servers {
        // A client secret given in the file is kept sealed, not in the
        // server's record.
        let mut servers = config.servers.clone();
        for s in &mut servers {
            oauth.seal_client_secret(s).await.map_err(|e| {
                StartError::OAuth(format!("servers.{}.oauth.client_secret: {e}", s.name))
            })?;
        }
        registry
            .sync_config_servers(&servers, config.control_plane.prune_config_servers)
            .await?;
    }
    let state = State::start(store.clone()).await?;
    let shutdown = CancellationToken::new();
    let interactions = Interactions::new(
        store.clone(),
        state.clone(),
        metrics.clone(),
        audit.clone(),
        Duration::from_secs(config.limits.interaction_timeout_sec),
        shutdown.clone(),
    );
    let cp = Arc::new(ControlPlane {
        state: state.clone(),
        registry,
        router: Router::with_tls(tls.sidecar_client()),
        interactions,
        background: crate::background::Background::new(
            config.background_calls.clone(),
            store.clone(),
            metrics.clone(),
        ),
        audit,
        oauth,
        metrics: metrics.clone(),
        lease_ttl: Duration::from_secs(config.control_plane.sidecar_lease_ttl_sec),
        call_timeout: Duration::from_secs(config.control_plane.call_timeout_sec),
        ready: std::sync::atomic::AtomicBool::new(false),
        store_health: Arc::new(crate::store::health::StoreHealth::answered_now()),
        launches: Default::default(),
        shutdown: shutdown.clone(),
    });
    // `/readyz` follows whether the store answers.
    {
        let (health, store, stop) = (
            cp.store_health.clone(),
            cp.registry.store().clone(),
            shutdown.clone(),
        );
        tokio::spawn(async move { health.probe(store, stop).await });
    }

    let grpc_listener = bind("control_plane.listen", &config.control_plane.listen).await?;
    let http_listener = bind(
        "control_plane.http_listen",
        &config.control_plane.http_listen,
    )
    .await?;
    let metrics_listener = match &config.control_plane.metrics_listen {
        Some(addr) => Some(bind("control_plane.metrics_listen", addr).await?),
        None => None,
    };
    let mcp_listener = match &config.mcp.listen {
        Some(addr) => Some(bind("mcp.listen", addr).await?),
        None => None,
    };
    let grpc_addr = grpc_listener.local_addr().expect("bound");
    let http_addr = http_listener.local_addr().expect("bound");
    let mcp_addr = mcp_listener
        .as_ref()
        .map(|l| l.local_addr().expect("bound"));
    let metrics_addr = metrics_listener
        .as_ref()
        .map(|l| l.local_addr().expect("bound"));
    // Stage D: the callback is on the HTTP listener as bound.
    cp.oauth
        .set_base_url(config.oauth.base_url(&http_addr.to_string()));
    crate::oauth::refresh::spawn(cp.clone());

    // Cancellations requested on other replicas, the calls of deleted
    // sessions, the state gauges, and pruning the router's cache of
    // sidecar addresses.
    {
        let cp = cp.clone();
        let mut changes = state.subscribe();
        tokio::spawn(async move {
            let mut gauges = tokio::time::interval(Duration::from_secs(2));
            loop {
                tokio::select! {
                    c = changes.recv() => match c {
                        Ok(Change::Cancel { scope, call_id }) => {
                            if cp.router.cancel(&scope, &call_id) {
                                tracing::info!(%scope, %call_id, "call cancelled on request of another replica");
                            }
                        }
                        Ok(Change::SessionDeleted(session)) => {
                            let n = cp.router.cancel_scope(&session);
                            if n > 0 {
                                tracing::info!(%session, calls = n, "session deleted; its running calls were cancelled");
                            }
                        }
                        Ok(_) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(_) => return,
                    },
                    _ = gauges.tick() => {
                        let snap = cp.state.snapshot();
                        cp.metrics.observe_state(&snap.gauges());
                        // Forget channels and call streams of sidecars that have gone.
                        cp.router.prune(&snap);
                    }
                }
            }
        });
    }

    // This replica's liveness key, before it serves a call that could wait
    // on an approval: the other replicas cancel its approvals once it is
    // gone.
    let liveness = cp.interactions.register_replica(cp.lease_ttl).await?;
    cp.interactions.spawn_liveness(cp.lease_ttl, liveness);
    tracing::debug!(replica = %cp.interactions.replica_id(), "replica liveness registered");
    // Expired interactions, those of deleted sessions, and approvals whose
    // replica is gone, on every replica.
    cp.interactions.spawn_sweeper();
    // Background calls (stage B): orphans, adoption, deadlines, retention.
    crate::background::spawn_sweeper(cp.clone());

    // Each service behind its authentication guard: the interceptor runs
    // before the request is decoded and refuses it (UNAUTHENTICATED,
    // PERMISSION_DENIED) without reaching the service. A connection must
    // carry a request a guard lets through within 30 s of being accepted
    // (`Admissions`): one that sends only refused calls, or nothing after
    // its TLS handshake, is closed.
    let admissions = switchyard_common::connections::Admissions::new(
        switchyard_common::connections::ADMISSION_TIMEOUT,
    );
    let guard = |service| auth.guard(service).admitting(admissions.clone());
    let engine = InterceptedService::new(
        EngineServiceServer::new(EngineApi::new(cp.clone()))
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE),
        guard(Service::Engine),
    );
    let admin = InterceptedService::new(
        AdminServiceServer::new(AdminApi::new(cp.clone()))
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE),
        guard(Service::Admin),
    );
    let sidecars = InterceptedService::new(
        SidecarRegistryServer::new(SidecarApi::new(cp.clone()))
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE),
        guard(Service::SidecarRegistry),
    );
    // gRPC server reflection (grpc.reflection.v1): the contracts, for
    // grpcurl and other tools; behind the engine API's guard.
    let reflection = InterceptedService::new(
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(switchyard_proto::FILE_DESCRIPTOR_SET)
            .build_v1()
            .expect("the compiled descriptors are valid"),
        guard(Service::Engine),
    );
    let grpc_connections = cp
        .metrics
        .listener("grpc", config.control_plane.max_connections);
    let grpc_app = tonic::service::Routes::new(engine)
        .add_service(admin)
        .add_service(sidecars)
        .add_service(reflection)
        .into_axum_router()
        // A handler that panics answers its request INTERNAL.
        .layer(switchyard_proto::panics::layer("control plane"));
    // Served as the HTTP listeners are (`http_serve`): at most
    // `control_plane.max_connections` at once, HTTP/2 only, first bytes
    // within 30 s, a connection without a call in flight for
    // `control_plane.idle_timeout_sec` asked to finish (GOAWAY), one whose
    // peer takes no answer data for 60 s closed; pinged every 10 s.
    let grpc_limits = switchyard_common::http_serve::Limits {
        http2_keep_alive: switchyard_common::http_serve::GRPC_KEEP_ALIVE,
        idle_timeout: Duration::from_secs(config.control_plane.idle_timeout_sec),
        ..Default::default()
    };
    let grpc = tokio::spawn(switchyard_common::http_serve::serve_grpc(
        grpc_listener,
        grpc_app,
        grpc_connections,
        grpc_limits,
        grpc_tls,
        Some(admissions),
        shutdown.clone().cancelled_owned(),
    ));
    // The MCP endpoint stops with the gRPC server: it stops accepting,
    // and the requests in flight get the same grace.
    let mcp = mcp_listener.map(|listener| {
        let endpoint = Arc::new(crate::mcp::Endpoint {
            cp: cp.clone(),
            auth: auth.clone(),
            config: config.mcp.clone(),
            loopback: mcp_addr.is_some_and(|a| a.ip().is_loopback()),
            bodies: crate::mcp::ingress::body_budget(&config.mcp),
            waiting: Default::default(),
        });
        let connections = cp.metrics.listener("mcp", config.mcp.max_connections);
        tokio::spawn(crate::mcp::serve(
            listener,
            endpoint,
            connections,
            mcp_tls.clone(),
            shutdown.clone(),
        ))
    });
    // The HTTP endpoints outlive the gRPC drain (see `Running::stop`).
    let http_stop = CancellationToken::new();
    let console = config.console.enabled.then(|| {
        crate::console::router(Arc::new(crate::console::Console::new(
            cp.clone(),
            auth.clone(),
            &config.console,
            http_addr,
            config.oauth.admin_base_url.as_deref(),
        )))
    });
    let http = tokio::spawn(http::serve(
        http_listener,
        cp.clone(),
        console,
        http_stop.clone(),
    ));
    let metrics = metrics_listener
        .map(|listener| tokio::spawn(http::serve_metrics(listener, cp.clone(), http_stop.clone())));
    cp.ready.store(true, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(%grpc_addr, %http_addr, mcp_addr = %mcp_addr.map(|a| a.to_string()).unwrap_or_else(|| "off".into()), metrics_addr = %metrics_addr.map(|a| a.to_string()).unwrap_or_else(|| "off".into()), tls = tls.identity.is_some(), mtls = tls.client_ca.is_some(), mcp_tls = mcp_tls.is_some(), auth_required = config.auth.required, "control plane serving");
    Ok(Running {
        cp,
        grpc_addr,
        http_addr,
        mcp_addr,
        metrics_addr,
        shutdown,
        grpc,
        mcp,
        http_stop,
        http,
        metrics,
    })
}

/// Binds `addr`, the value of the setting `key` (named in the error).
async fn bind(key: &'static str, addr: &str) -> Result<tokio::net::TcpListener, StartError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| StartError::Bind {
            key,
            addr: addr.to_owned(),
            error,
        })
}
