//! TLS and credentials, shared by the sidecar and the control plane: rustls
//! with the ring crypto provider (installed once per process before any
//! client or server is built), loading and checking PEM certificates, keys
//! and bearer-token files, and the client-side interceptor that sends a
//! bearer token (`authorization: Bearer <token>`, RFC 6750 section 2.1) on
//! every gRPC request.
//!
//! Every loader checks what it reads, so a bad file is reported at start-up
//! naming the configuration key and the file: a certificate file must hold
//! at least one PEM `CERTIFICATE`, a key file one PEM private key (PKCS#8,
//! PKCS#1 or SEC1) that ring can use, and the key must belong to the first
//! certificate of its pair.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;

/// Installs ring as the process-wide rustls provider; later calls (and a
/// provider installed by someone else first) are fine.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A certificate, key or token file that cannot be used. Each variant names
/// the configuration key (`tls.cert_file`, `--token-file`, ...) and the file.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The file cannot be read.
    #[error("{key} = {}: cannot read it: {source}", file.display())]
    Read {
        /// The configuration key or flag.
        key: String,
        /// The file.
        file: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no PEM certificate, or a broken one.
    #[error("{key} = {}: {problem}", file.display())]
    Certificate {
        /// The configuration key or flag.
        key: String,
        /// The file.
        file: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The file holds no usable PEM private key.
    #[error("{key} = {}: {problem}", file.display())]
    Key {
        /// The configuration key or flag.
        key: String,
        /// The file.
        file: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The private key does not belong to the certificate.
    #[error(
        "{key_key} = {} does not match the certificate in {cert_key} = {}: the private key does not belong to this certificate",
        key_file.display(),
        cert_file.display()
    )]
    Mismatch {
        /// The certificate's configuration key.
        cert_key: String,
        /// The certificate file.
        cert_file: PathBuf,
        /// The key's configuration key.
        key_key: String,
        /// The key file.
        key_file: PathBuf,
        /// rustls' verdict.
        #[source]
        source: rustls::Error,
    },
    /// A token file is empty (after trimming white space) or not a valid
    /// HTTP header value.
    #[error("{key} = {}: {problem}", file.display())]
    Token {
        /// The configuration key or flag.
        key: String,
        /// The file.
        file: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

impl CredentialError {
    /// The configuration key or flag the error is about.
    pub fn key(&self) -> &str {
        match self {
            CredentialError::Read { key, .. }
            | CredentialError::Certificate { key, .. }
            | CredentialError::Key { key, .. }
            | CredentialError::Token { key, .. } => key,
            CredentialError::Mismatch { key_key, .. } => key_key,
        }
    }
}

fn read(key: &str, file: &Path) -> Result<Vec<u8>, CredentialError> {
    std::fs::read(file).map_err(|source| CredentialError::Read {
        key: key.to_owned(),
        file: file.to_owned(),
        source,
    })
}

fn parse_certificates(
    key: &str,
    file: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, CredentialError> {
    let problem = |problem: String| CredentialError::Certificate {
        key: key.to_owned(),
        file: file.to_owned(),
        problem,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| problem(format!("not a valid PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(problem(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    for (i, c) in certs.iter().enumerate() {
        webpki::EndEntityCert::try_from(c)
            .map_err(|e| problem(format!("certificate #{} is not valid X.509: {e}", i + 1)))?;
    }
    Ok(certs)
}

/// Reads a PEM file of one or more certificates (a CA bundle, or a chain),
/// checking each parses as X.509. Returns the file's bytes.
pub fn load_certificates(key: &str, file: &Path) -> Result<Vec<u8>, CredentialError> {
    let pem = read(key, file)?;
    parse_certificates(key, file, &pem)?;
    Ok(pem)
}

/// A certificate chain and its private key, both PEM, checked to match.
#[derive(Clone)]
pub struct PemIdentity {
    /// The certificate chain, leaf first.
    pub cert_pem: Vec<u8>,
    /// The private key.
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for PemIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemIdentity")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

impl PemIdentity {
    /// As a tonic identity (server certificate, or client certificate).
    pub fn to_tonic(&self) -> tonic::transport::Identity {
        tonic::transport::Identity::from_pem(&self.cert_pem, &self.key_pem)
    }

    /// A rustls server configuration presenting this identity, asking no
    /// client certificate, offering HTTP/2 and HTTP/1.1 by ALPN (an HTTP
    /// listener: `crate::http_serve::serve_tls`). Errors: the PEM does not
    /// parse (it was checked by [`load_identity`], so only for an identity
    /// built otherwise).
    pub fn http_server_config(&self) -> Result<std::sync::Arc<rustls::ServerConfig>, String> {
        install_crypto_provider();
        let (certs, key) = self.parsed()?;
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(std::sync::Arc::new(config))
    }

    /// A rustls server configuration for a gRPC listener
    /// (`crate::http_serve::serve_grpc`) presenting this identity, as
    /// tonic's `ServerTlsConfig` builds one: ALPN `h2` only; with
    /// `client_ca` (PEM), a client certificate must chain to one of its
    /// certificates, and a client must present one when
    /// `client_cert_required` (otherwise it may present none). Errors: a
    /// PEM that does not parse, or a CA file with no usable certificate.
    pub fn grpc_server_config(
        &self,
        client_ca: Option<&[u8]>,
        client_cert_required: bool,
    ) -> Result<std::sync::Arc<rustls::ServerConfig>, String> {
        install_crypto_provider();
        let (certs, key) = self.parsed()?;
        let builder = rustls::ServerConfig::builder();
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(pem) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("the client CA: {e}"))?;
                    roots.add(cert).map_err(|e| format!("the client CA: {e}"))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder(roots.into());
                let verifier = if client_cert_required {
                    verifier
                } else {
                    verifier.allow_unauthenticated()
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| format!("the client CA: {e}"))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(certs, key)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(std::sync::Arc::new(config))
    }

    /// The certificate chain and the key.
    fn parsed(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
        let certs = CertificateDer::pem_slice_iter(&self.cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("the certificate: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(&self.key_pem)
            .map_err(|e| format!("the private key: {e}"))?;
        Ok((certs, key))
    }
}

/// Reads a certificate chain (`cert_key` = `cert_file`) and its private key
/// (`key_key` = `key_file`), checking that the key is usable with ring and
/// belongs to the chain's first certificate.
pub fn load_identity(
    cert_key: &str,
    cert_file: &Path,
    key_key: &str,
    key_file: &Path,
) -> Result<PemIdentity, CredentialError> {
    install_crypto_provider();
    let cert_pem = read(cert_key, cert_file)?;
    let certs = parse_certificates(cert_key, cert_file, &cert_pem)?;
    let key_pem = read(key_key, key_file)?;
    let key_problem = |problem: String| CredentialError::Key {
        key: key_key.to_owned(),
        file: key_file.to_owned(),
        problem,
    };
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => key_problem(
            "holds no PEM private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)".into(),
        ),
        other => key_problem(format!("not a valid PEM private key: {other}")),
    })?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .map_err(|e| key_problem(format!("the private key is not usable: {e}")))?;
    rustls::sign::CertifiedKey::new(certs, signing)
        .keys_match()
        .map_err(|source| CredentialError::Mismatch {
            cert_key: cert_key.to_owned(),
            cert_file: cert_file.to_owned(),
            key_key: key_key.to_owned(),
            key_file: key_file.to_owned(),
            source,
        })?;
    Ok(PemIdentity { cert_pem, key_pem })
}

/// Reads a bearer token: the file's content with surrounding white space
/// (a trailing newline) removed. It must not be empty and must be a valid
/// header value (visible ASCII).
pub fn load_token(key: &str, file: &Path) -> Result<String, CredentialError> {
    let bytes = read(key, file)?;
    let problem = |problem: &str| CredentialError::Token {
        key: key.to_owned(),
        file: file.to_owned(),
        problem: problem.to_owned(),
    };
    let text = String::from_utf8(bytes).map_err(|_| problem("the token is not UTF-8 text"))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(problem("the token file is empty"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(problem(
            "the token must be visible ASCII without spaces (it is sent as an HTTP header)",
        ));
    }
    Ok(token.to_owned())
}

/// A client interceptor that adds `authorization: Bearer <token>` to every
/// request; without a token it adds nothing.
#[derive(Clone, Default)]
pub struct BearerToken {
    header: Option<MetadataValue<Ascii>>,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerToken")
            .field("set", &self.header.is_some())
            .finish()
    }
}

impl BearerToken {
    /// Sends `token` (as read by [`load_token`]); `None` sends nothing.
    /// A token that is not a valid header value is not sent (and logged).
    pub fn new(token: Option<&str>) -> Self {
        let header = token.and_then(|t| match format!("Bearer {t}").parse() {
            Ok(v) => Some(v),
            Err(_) => {
                tracing::error!("the bearer token is not a valid header value; not sending it");
                None
            }
        });
        BearerToken { header }
    }
}

impl Interceptor for BearerToken {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(h) = &self.header {
            request.metadata_mut().insert("authorization", h.clone());
        }
        Ok(request)
    }
}

/// A channel that sends the bearer token on every request.
pub type AuthChannel =
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, BearerToken>;

/// What a client presents to the control plane: a client certificate (for
/// mTLS; only used over `https://`) and a bearer token.
#[derive(Clone, Default)]
pub struct ClientCredentials {
    /// The client certificate and key.
    pub identity: Option<PemIdentity>,
    /// The bearer token.
    pub token: Option<String>,
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("identity", &self.identity)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_test_support::pki::TestPki;

    #[test]
    fn identities_are_checked_and_errors_name_key_and_file() {
        let dir = tempfile::tempdir().unwrap();
        let pki = TestPki::new(dir.path(), "unit");
        let a = pki.leaf("a", &[]);
        let b = pki.leaf("b", &[]);
        let id = load_identity("cert", &a.cert_file, "key", &a.key_file).unwrap();
        assert!(id.cert_pem.starts_with(b"-----BEGIN CERTIFICATE-----"));
        assert!(!format!("{id:?}").contains("PRIVATE"));

        let e = load_identity("cert", &a.cert_file, "key", &b.key_file).unwrap_err();
        assert!(matches!(e, CredentialError::Mismatch { .. }), "{e}");
        assert_eq!(e.key(), "key");
        let text = e.to_string();
        assert!(
            text.contains(&*b.key_file.to_string_lossy())
                && text.contains(&*a.cert_file.to_string_lossy()),
            "{text}"
        );

        let e = load_identity("cert", &a.key_file, "key", &a.key_file).unwrap_err();
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
        let e = load_identity("cert", &a.cert_file, "key", &a.cert_file).unwrap_err();
        assert!(e.to_string().contains("no PEM private key"), "{e}");
        let missing = dir.path().join("missing.pem");
        let e = load_certificates("ca", &missing).unwrap_err();
        assert!(
            matches!(e, CredentialError::Read { .. }) && e.to_string().contains("missing.pem"),
            "{e}"
        );
        assert!(load_certificates("ca", &pki.ca_file).is_ok());
    }

    #[test]
    fn tokens_are_trimmed_and_sent_as_bearer() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t");
        std::fs::write(&file, "  abc.DEF-123\n").unwrap();
        assert_eq!(load_token("token_file", &file).unwrap(), "abc.DEF-123");
        std::fs::write(&file, "\n\n").unwrap();
        assert!(
            load_token("token_file", &file)
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        std::fs::write(&file, "two words").unwrap();
        assert!(load_token("token_file", &file).is_err());

        let mut with = BearerToken::new(Some("abc"));
        let r = with.call(tonic::Request::new(())).unwrap();
        assert_eq!(r.metadata().get("authorization").unwrap(), "Bearer abc");
        let mut without = BearerToken::new(None);
        let r = without.call(tonic::Request::new(())).unwrap();
        assert!(r.metadata().get("authorization").is_none());
        assert!(
            !format!(
                "{:?}",
                ClientCredentials {
                    identity: None,
                    token: Some("abc".into())
                }
            )
            .contains("abc")
        );
    }
}
