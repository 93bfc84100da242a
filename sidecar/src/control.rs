//! The sidecar's client of the control plane's `SidecarRegistry`: how to
//! reach it ([`ControlSettings`]: URL, CA, client certificate and bearer
//! token), the channel ([`registry_client`]: TLS, HTTP/2 keep-alive,
//! connected lazily and again after a failure, so a request retried after
//! a replica went away reaches another one) and what goes wrong
//! ([`ControlError`]). The report stream ([`crate::run::report`]),
//! background call records ([`crate::background::GrpcRegistry`]) and
//! interactions ([`crate::interactions::ControlPlaneInteractions`]) all
//! talk to the control plane through it.

use std::time::Duration;
use switchyard_common::tls::{AuthChannel, BearerToken};
use switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

/// First delay between registration attempts.
pub const MIN_BACKOFF: Duration = Duration::from_millis(500);
/// Largest delay between registration attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Limit on one `Register` call and on opening the report stream.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// A failure talking to the control plane. Each one ends a registration
/// attempt or a report stream; the report stream (`crate::run::report`)
/// retries.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The control plane URL is not usable.
    #[error("control plane URL {url:?} is invalid: {source}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
    /// No connection to the control plane.
    #[error("cannot connect to the control plane at {url}: {source}")]
    Connect {
        /// The URL.
        url: String,
        /// The transport error.
        #[source]
        source: tonic::transport::Error,
    },
    /// `Register` or `Report` failed.
    #[error("{rpc} failed: {source}")]
    Rpc {
        /// Which call.
        rpc: &'static str,
        /// The status.
        #[source]
        source: tonic::Status,
    },
    /// `Register` or opening `Report` took too long.
    #[error("{rpc} got no answer within {}s", RPC_TIMEOUT.as_secs())]
    Timeout {
        /// Which call.
        rpc: &'static str,
    },
    /// The control plane ended the report stream.
    #[error("the control plane ended the report stream")]
    StreamEnded,
}

/// How to reach the control plane and what to register.
#[derive(Debug, Clone)]
pub struct ControlSettings {
    /// The control plane's URL, `http://` or `https://`.
    pub control_plane: String,
    /// PEM CA certificate(s) to trust for an `https://` control plane.
    pub ca_pem: Option<Vec<u8>>,
    /// The client certificate (mTLS, `https://` only) and bearer token
    /// presented to the control plane (see [`switchyard_common::tls`]).
    pub credentials: switchyard_common::tls::ClientCredentials,
    /// The server this sidecar fronts.
    pub server: String,
    /// This sidecar's id.
    pub sidecar_id: String,
    /// Where `SidecarCalls` is served, as the control plane should dial it.
    pub call_address: String,
    /// The token the control plane must send on `SidecarCalls` requests
    /// ([`crate::guard`]), registered with `call_address`.
    pub call_token: crate::guard::CallToken,
}

/// `e` with the causes its message does not already include.
pub(crate) fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        cause = c.source();
    }
    text
}

/// The endpoint of `settings.control_plane`: keep-alive, and TLS (with
/// the CA and client certificate) for `https://`. Errors: the URL or TLS
/// settings are unusable.
pub(crate) fn endpoint(settings: &ControlSettings) -> Result<Endpoint, ControlError> {
    let url_error = |source| ControlError::Url {
        url: switchyard_common::server_spec::redacted_url(&settings.control_plane),
        source,
    };
    let mut endpoint = Endpoint::from_shared(settings.control_plane.clone())
        .map_err(url_error)?
        .connect_timeout(Duration::from_secs(5))
        .http2_keep_alive_interval(Duration::from_secs(15))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    if settings.control_plane.starts_with("https://") {
        let mut tls = ClientTlsConfig::new().with_enabled_roots();
        if let Some(pem) = &settings.ca_pem {
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        if let Some(identity) = &settings.credentials.identity {
            tls = tls.identity(identity.to_tonic());
        }
        endpoint = endpoint.tls_config(tls).map_err(url_error)?;
    }
    Ok(endpoint)
}

/// A `SidecarRegistry` client for `settings.control_plane`, connected
/// lazily (and again after a failure, so a request retried after a
/// replica went away reaches another one), sending the bearer token.
/// Errors: the URL or TLS settings are unusable.
pub fn registry_client(
    settings: &ControlSettings,
) -> Result<SidecarRegistryClient<AuthChannel>, ControlError> {
    let channel = endpoint(settings)?.connect_lazy();
    Ok(
        SidecarRegistryClient::with_interceptor(channel, bearer(settings))
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024),
    )
}

/// Sends the configured bearer token on every request.
pub(crate) fn bearer(settings: &ControlSettings) -> BearerToken {
    BearerToken::new(settings.credentials.token.as_deref())
}

/// `f`, bounded by the limit on one registry RPC (10 s).
pub(crate) async fn with_timeout<T>(
    rpc: &'static str,
    f: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, ControlError> {
    match tokio::time::timeout(RPC_TIMEOUT, f).await {
        Ok(r) => r.map_err(|source| ControlError::Rpc { rpc, source }),
        Err(_) => Err(ControlError::Timeout { rpc }),
    }
}
