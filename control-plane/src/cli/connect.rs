//! How a command reaches the control plane: the global `--endpoint`
//! (`SWITCHYARD_ENDPOINT`) and the credentials of `--token-file` (or
//! `SWITCHYARD_TOKEN`), `--ca-file`, `--cert-file` and `--key-file`. The
//! files are read when a command connects, so commands that do not connect
//! (`up`, `check-config`) never read them. A bad file or endpoint exits 64,
//! an unreachable control plane 69, and so does a connection it refused or
//! broke (a refused client certificate, a plaintext client on its TLS
//! listener): with a `hint:` line when the flags explain it
//! ([`Remote::explain`]).

use super::{EXIT_USAGE, Failure};
use std::path::{Path, PathBuf};
use switchyard_common::tls::{AuthChannel, BearerToken, PemIdentity};
use switchyard_proto::v1::admin_service_client::AdminServiceClient;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

/// The largest gRPC message the CLI reads or sends: MCP results can be
/// large.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// How the CLI authenticates to the control plane: the global flags
/// `--token-file` (or `SWITCHYARD_TOKEN`), `--ca-file`, `--cert-file` and
/// `--key-file`, read and checked when a command connects.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// Sent as `authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Trusted CA(s) for an `https://` endpoint.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key (mTLS).
    pub identity: Option<PemIdentity>,
}

impl ConnectOptions {
    /// Reads the files the flags name; a bad one exits 64 naming the flag
    /// and the file.
    pub fn from_flags(cli: &ConnectFlags) -> Result<ConnectOptions, Failure> {
        let usage =
            |e: switchyard_common::tls::CredentialError| Failure::new(EXIT_USAGE, e.to_string());
        let token = match &cli.token_file {
            Some(f) => Some(switchyard_common::tls::load_token("--token-file", f).map_err(usage)?),
            None => std::env::var("SWITCHYARD_TOKEN")
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty()),
        };
        let ca_pem = match &cli.ca_file {
            Some(f) => {
                Some(switchyard_common::tls::load_certificates("--ca-file", f).map_err(usage)?)
            }
            None => None,
        };
        let identity = match (&cli.cert_file, &cli.key_file) {
            (Some(c), Some(k)) => Some(
                switchyard_common::tls::load_identity("--cert-file", c, "--key-file", k)
                    .map_err(usage)?,
            ),
            _ => None,
        };
        Ok(ConnectOptions {
            token,
            ca_pem,
            identity,
        })
    }
}

/// The connection flags of the running command.
#[derive(Debug, Clone, Default)]
pub struct ConnectFlags {
    /// `--token-file`.
    pub token_file: Option<PathBuf>,
    /// `--ca-file`.
    pub ca_file: Option<PathBuf>,
    /// `--cert-file`.
    pub cert_file: Option<PathBuf>,
    /// `--key-file`.
    pub key_file: Option<PathBuf>,
}

/// The control plane a command talks to: its endpoint and the connection
/// flags, given to every command that connects, so that all connect the
/// same way.
#[derive(Debug, Clone)]
pub struct Remote {
    /// `--endpoint`.
    pub endpoint: String,
    /// The credential flags.
    pub flags: ConnectFlags,
}

impl Remote {
    /// A client of the engine API.
    pub async fn engine(&self) -> Result<EngineServiceClient<AuthChannel>, Failure> {
        Ok(EngineServiceClient::new(self.channel().await?).max_decoding_message_size(MAX_MESSAGE))
    }

    /// A client of the admin API.
    pub async fn admin(&self) -> Result<AdminServiceClient<AuthChannel>, Failure> {
        Ok(AdminServiceClient::new(self.channel().await?)
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE))
    }

    /// Adds to a failed connection what the connection flags suggest: a
    /// client certificate the control plane refused or may require, a CA
    /// that did not sign its certificate, or a plaintext endpoint for a
    /// TLS listener. Other failures are returned as they are.
    pub fn explain(&self, mut failure: Failure) -> Failure {
        if !failure.connection {
            return failure;
        }
        let tls = self.endpoint.starts_with("https://");
        let why = failure.message.to_ascii_lowercase();
        let closed = ["connection closed", "broken pipe", "connection reset"]
            .iter()
            .any(|s| why.contains(s));
        // The TLS alerts about our certificate (rustls's names, lowercased):
        // bad_certificate, unknown_ca, certificate_required, ...
        let certificate_alert = why.contains("alert")
            && ["certificate", "unknownca", "accessdenied"]
                .iter()
                .any(|s| why.contains(s));
        let hint = match (&self.flags.cert_file, tls) {
            (_, true) if why.contains("invalid peer certificate") => format!(
                "is --ca-file {} the CA that signed the control plane's certificate, and does the certificate name the endpoint's host?",
                self.flags.ca_file.as_deref().unwrap_or(Path::new("")).display()
            ),
            (Some(cert), true) if certificate_alert || closed => format!(
                "the control plane may have refused the client certificate of --cert-file {}: it must be signed by a CA in the control plane's tls.client_ca_file",
                cert.display()
            ),
            (None, true) if why.contains("certificaterequired") || closed => {
                "the control plane may require a client certificate: pass --cert-file and --key-file".to_owned()
            }
            // A TLS listener's answer to plaintext: it closes, or its
            // alert reads as a bad HTTP/2 frame.
            (_, false) if closed || why.contains("http2 error") => format!(
                "if the control plane serves TLS, use https://{} with --ca-file",
                self.endpoint.trim_start_matches("http://")
            ),
            _ => return failure,
        };
        failure.message.push_str("\nhint: ");
        failure.message.push_str(&hint);
        failure
    }

    /// Connects (5 s connect timeout), over TLS for an `https://` endpoint,
    /// sending the bearer token with every request.
    async fn channel(&self) -> Result<AuthChannel, Failure> {
        let endpoint = self.endpoint.as_str();
        let options = ConnectOptions::from_flags(&self.flags)?;
        let mut ep = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| Failure::new(EXIT_USAGE, format!("--endpoint {endpoint:?}: {e}")))?
            .connect_timeout(std::time::Duration::from_secs(5));
        if endpoint.starts_with("https://") {
            switchyard_common::tls::install_crypto_provider();
            let Some(ca) = &options.ca_pem else {
                return Err(Failure::new(
                    EXIT_USAGE,
                    format!(
                        "--endpoint {endpoint}: an https:// endpoint needs --ca-file (the CA that signed the control plane's certificate)"
                    ),
                ));
            };
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            if let Some(identity) = &options.identity {
                tls = tls.identity(identity.to_tonic());
            }
            ep = ep.tls_config(tls).map_err(|e| {
                Failure::new(EXIT_USAGE, format!("--endpoint {endpoint}: TLS: {e}"))
            })?;
        }
        let channel: Channel = ep.connect().await.map_err(|e| {
            Failure::connection(format!(
                "cannot reach the control plane at {endpoint}: {}",
                switchyard_common::error_chain(&e)
            ))
        })?;
        Ok(tonic::service::interceptor::InterceptedService::new(
            channel,
            BearerToken::new(options.token.as_deref()),
        ))
    }
}
