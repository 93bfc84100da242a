//! How a command reaches the control plane: the global `--endpoint`
//! (`SWITCHYARD_ENDPOINT`) and the credentials of `--token-file` (or
//! `SWITCHYARD_TOKEN`), `--ca-file`, `--cert-file` and `--key-file`. The
//! files are read when a command connects, so commands that do not connect
//! (`up`, `check-config`) never read them. A bad file or endpoint exits 64,
//! an unreachable control plane 69, and so does a connection it refused or
//! broke (a refused client certificate, a plaintext client on its TLS
//! listener): with a `hint:` line when the flags explain it
//! ([`Remote::explain`]).

use super::{EXIT_USAGE, Failure, Phase};
use std::path::{Path, PathBuf};
use std::time::Duration;
use switchyard_common::tls::{AuthChannel, BearerToken, PemIdentity};
use switchyard_proto::v1::admin_service_client::AdminServiceClient;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

/// How long a TCP connect may take; the TLS and HTTP/2 handshakes after
/// it get as long again.
const CONNECT_LIMIT: Duration = Duration::from_secs(5);
/// How often the connection is pinged, and how long an answer may take.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

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

    /// Adds to a failed connection what the connection flags suggest, only
    /// where the failure points at them: a client certificate the control
    /// plane refused or requires (its TLS alert, or a connection closed
    /// right after the handshake), a CA that did not sign its certificate,
    /// a plaintext endpoint for a TLS listener or the other way round, an
    /// address that is not the gRPC listener. A connection that was reset
    /// or refused while connecting gets no hint: a control plane that is
    /// down or restarting does that too. Other failures are returned as
    /// they are.
    pub fn explain(&self, mut failure: Failure) -> Failure {
        let Some(phase) = failure.connection else {
            return failure;
        };
        let tls = self.endpoint.starts_with("https://");
        let host_port = self
            .endpoint
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/');
        let why = failure.message.to_ascii_lowercase();
        let calling = phase == Phase::Calling;
        // Ended by the peer after the connection was made (closed, or
        // reset with our request unread).
        let closed = calling
            && ["connection closed", "broken pipe", "connection reset"]
                .iter()
                .any(|s| why.contains(s));
        // The TLS alerts about our certificate (rustls's names, lowercased):
        // bad_certificate, unknown_ca, certificate_required, ...
        let certificate_alert = why.contains("alert")
            && ["certificate", "unknownca", "accessdenied"]
                .iter()
                .any(|s| why.contains(s));
        let hint = match (&self.flags.cert_file, tls) {
            _ if why.contains("keep-alive timed out") || why.contains("did not answer") => {
                "the control plane accepted the connection but does not answer: it may be stopped or overloaded, or the address is not the control plane's".to_owned()
            }
            _ if why.contains("not a grpc server") => format!(
                "is {host_port} the control plane's gRPC address (control_plane.listen), not its HTTP one (control_plane.http_listen) or its MCP endpoint (mcp.listen)?"
            ),
            (_, true) if why.contains("invalid peer certificate") => format!(
                "is --ca-file {} the CA that signed the control plane's certificate, and does the certificate name the endpoint's host?",
                self.flags.ca_file.as_deref().unwrap_or(Path::new("")).display()
            ),
            (_, true) if why.contains("invalidcontenttype") || why.contains("corrupt message") => {
                format!("the endpoint does not answer in TLS: if it serves plaintext, use http://{host_port}")
            }
            (Some(cert), true) if certificate_alert => format!(
                "the control plane refused the client certificate of --cert-file {}: it must be signed by a CA in the control plane's tls.client_ca_file",
                cert.display()
            ),
            (None, true) if certificate_alert => {
                "the control plane requires a client certificate: pass --cert-file and --key-file".to_owned()
            }
            (Some(cert), true) if closed => format!(
                "the control plane closed the connection: it may have refused the client certificate of --cert-file {} (it must be signed by a CA in its tls.client_ca_file), or stopped",
                cert.display()
            ),
            (None, true) if closed => {
                "the control plane closed the connection: it may require a client certificate (pass --cert-file and --key-file), or have stopped".to_owned()
            }
            // A TLS listener's alert read as a bad HTTP/2 frame.
            (_, false) if why.contains("http2 error") => format!(
                "the endpoint may serve TLS: use https://{host_port} with --ca-file"
            ),
            (_, false) if closed => format!(
                "the control plane closed the connection: it may have stopped, or it serves TLS (then use https://{host_port} with --ca-file)"
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
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "--endpoint {endpoint:?}: must start with http:// or https:// (e.g. http://127.0.0.1:7700)"
                ),
            ));
        }
        let options = ConnectOptions::from_flags(&self.flags)?;
        let mut ep = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| Failure::new(EXIT_USAGE, format!("--endpoint {endpoint:?}: {e}")))?
            .connect_timeout(CONNECT_LIMIT)
            // A control plane that stopped answering (or an address that
            // accepts and then says nothing) fails the command instead of
            // hanging it; a long call or event stream is not cut.
            .http2_keep_alive_interval(KEEP_ALIVE)
            .keep_alive_timeout(KEEP_ALIVE)
            .keep_alive_while_idle(true);
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
        // The TCP connect has its own limit; the TLS and HTTP/2 handshakes
        // are bounded here.
        let channel: Channel = match tokio::time::timeout(2 * CONNECT_LIMIT, ep.connect()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(e)) => {
                return Err(Failure::connection(
                    Phase::Connecting,
                    format!(
                        "cannot reach the control plane at {endpoint}: {}",
                        switchyard_common::error_chain(&e)
                    ),
                ));
            }
            Err(_) => {
                return Err(Failure::connection(
                    Phase::Connecting,
                    format!(
                        "cannot reach the control plane at {endpoint}: the connection was accepted, but the handshake did not answer within {} s",
                        (2 * CONNECT_LIMIT).as_secs()
                    ),
                ));
            }
        };
        Ok(tonic::service::interceptor::InterceptedService::new(
            channel,
            BearerToken::new(options.token.as_deref()),
        ))
    }
}
