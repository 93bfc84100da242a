//! TLS of the control plane (rustls with the ring provider, through
//! tonic): the gRPC listener's server configuration from `[tls]`
//! (`cert_file`, `key_file`, and `client_ca_file` for mTLS, refusing
//! certificate-less clients at the handshake with `require_client_cert`),
//! and the client configuration used to call sidecars that register an
//! `https://` call address (trusting `sidecar_ca_file`, presenting the
//! listener's certificate as client certificate).
//!
//! Files are read and checked once, by [`TlsMaterial::load`]; errors name
//! the configuration key and the file (see
//! [`switchyard_common::tls::CredentialError`]).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use switchyard_common::tls::{self as shared, CredentialError, PemIdentity};
use tonic::transport::{Certificate, ClientTlsConfig};

/// `[tls]`: TLS (rustls, ring) on the gRPC listener when `cert_file` and
/// `key_file` are set, optionally verifying client certificates (mTLS);
/// and the CA of the sidecars' `SidecarCalls` endpoints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain of the gRPC listener (leaf first). It is also
    /// presented as client certificate to `https://` sidecars.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// PEM CA(s) client certificates are verified against (mTLS). A
    /// client without a certificate is still let through the handshake
    /// unless `require_client_cert`.
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// Refuse TLS clients without a certificate signed by `client_ca_file`
    /// (default false).
    #[serde(default)]
    pub require_client_cert: bool,
    /// PEM CA(s) that signed the sidecars' `SidecarCalls` certificates;
    /// needed for sidecars that register an `https://` call address.
    #[serde(default)]
    pub sidecar_ca_file: Option<PathBuf>,
}

/// TLS settings loaded from `[tls]`.
#[derive(Debug, Clone, Default)]
pub struct TlsMaterial {
    /// The listener's certificate and key; `None`: plaintext gRPC.
    pub identity: Option<PemIdentity>,
    /// CA(s) client certificates are verified against.
    pub client_ca: Option<Vec<u8>>,
    /// Whether TLS clients must present a certificate.
    pub require_client_cert: bool,
    /// CA(s) of the sidecars' `SidecarCalls` certificates.
    pub sidecar_ca: Option<Vec<u8>>,
}

impl TlsMaterial {
    /// Reads and checks the files `[tls]` names (paths as given: the
    /// configuration loader has resolved relative ones).
    pub fn load(config: &TlsConfig) -> Result<TlsMaterial, CredentialError> {
        shared::install_crypto_provider();
        let identity = match (&config.cert_file, &config.key_file) {
            (Some(cert), Some(key)) => Some(shared::load_identity(
                "tls.cert_file",
                cert,
                "tls.key_file",
                key,
            )?),
            _ => None,
        };
        let client_ca = config
            .client_ca_file
            .as_deref()
            .map(|f| shared::load_certificates("tls.client_ca_file", f))
            .transpose()?;
        let sidecar_ca = config
            .sidecar_ca_file
            .as_deref()
            .map(|f| shared::load_certificates("tls.sidecar_ca_file", f))
            .transpose()?;
        Ok(TlsMaterial {
            identity,
            client_ca,
            require_client_cert: config.require_client_cert,
            sidecar_ca,
        })
    }

    /// The gRPC listener's TLS configuration; `None` without `cert_file`.
    /// With a client CA, presented client certificates are verified (and
    /// then available to [`crate::auth`]); without `require_client_cert`,
    /// clients without one still complete the handshake. Errors (a
    /// message for the operator): the certificate, key or client CA
    /// could not be made into a server configuration (a PEM that does not
    /// parse, a CA file with no usable certificate; see
    /// [`PemIdentity::grpc_server_config`]).
    pub fn server(&self) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, String> {
        let Some(identity) = self.identity.as_ref() else {
            return Ok(None);
        };
        identity
            .grpc_server_config(self.client_ca.as_deref(), self.require_client_cert)
            .map(Some)
    }

    /// The TLS configuration for calls to `https://` sidecars; `None`
    /// without `sidecar_ca_file`. The listener's certificate, when there is
    /// one, is presented as client certificate (for sidecars with a
    /// `client_ca_file`).
    pub fn sidecar_client(&self) -> Option<ClientTlsConfig> {
        let ca = self.sidecar_ca.as_ref()?;
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        if let Some(identity) = &self.identity {
            tls = tls.identity(identity.to_tonic());
        }
        Some(tls)
    }
}
