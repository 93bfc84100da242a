//! Who may call which gRPC service of the control plane.
//!
//! A caller is identified by a bearer token (`authorization: Bearer
//! <token>`, RFC 6750 section 2.1) listed in `[[auth.tokens]]`, or, when it
//! sends no token, by the client certificate it presented over TLS (already
//! verified against `[tls] client_ca_file` by rustls) whose subject common
//! name or one of whose DNS subject alternative names is listed in
//! `[[auth.mtls]]`. Each identity has one [`Role`]:
//!
//! | role | may call |
//! |---|---|
//! | `engine` | `EngineService` |
//! | `admin` | `AdminService`, and `EngineService` (the CLI's `sessions`, `tools`, `call`, `events`, `answer` commands use it) |
//! | `sidecar` | `SidecarRegistry` |
//!
//! Refusals: no credentials while `[auth] required` → `UNAUTHENTICATED`
//! naming what is missing; a token that matches no entry, or a malformed
//! `authorization` header → `UNAUTHENTICATED`; a certificate whose names
//! match no entry (and no token) while required → `UNAUTHENTICATED`; a
//! known caller whose role may not call the service → `PERMISSION_DENIED`
//! naming the role needed. Every refusal is counted in
//! `switchyard_control_plane_auth_refusals_total{service,reason}`.
//! Presented credentials are checked even when `required` is false (a wrong
//! token is refused, never silently ignored); only callers with no
//! credentials at all are let through then.
//!
//! [`Guard`] is the tonic interceptor that applies this to one service; the
//! stack is composed in [`crate::server`]. Health and metrics (HTTP) are
//! not authenticated.

use crate::metrics::Metrics;
pub use crate::model::principal::{Caller, Refusal, Role, Service};
use rustls::pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use switchyard_common::connections::Admissions;
use switchyard_common::tls::{self as shared, CredentialError};
use tonic::metadata::MetadataMap;
use tonic::{Request, Status};

/// `[auth]`: callers of the gRPC services are identified by a bearer token
/// (`[[auth.tokens]]`) or a verified client certificate (`[[auth.mtls]]`);
/// each identity has one role. See `docs/configuration.md`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Refuse callers without credentials (default false: anonymous
    /// callers may use every service; presented credentials are always
    /// checked).
    #[serde(default)]
    pub required: bool,
    /// `[[auth.tokens]]`.
    #[serde(default)]
    pub tokens: Vec<TokenEntry>,
    /// `[[auth.mtls]]`.
    #[serde(default)]
    pub mtls: Vec<MtlsEntry>,
}

/// `[[auth.tokens]]`: a bearer token read from a file (a mounted secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// The caller's name (logs).
    pub name: String,
    /// `engine`, `admin` or `sidecar`.
    pub role: String,
    /// The file; the token is its content, trimmed.
    pub token_file: PathBuf,
    /// Role `sidecar` only: the servers a sidecar with this token may
    /// register and act for. Empty (the default): any server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
}

/// `[[auth.mtls]]`: a client certificate identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MtlsEntry {
    /// The certificate's subject common name, or one of its DNS subject
    /// alternative names.
    pub name: String,
    /// `engine`, `admin` or `sidecar`.
    pub role: String,
    /// Role `sidecar` only: the servers a sidecar with this certificate
    /// may register and act for. Empty (the default): any server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<String>,
}

impl Caller {
    /// PERMISSION_DENIED unless this caller may act for `server`: a
    /// sidecar credential bound to servers (`[[auth.tokens]] servers`,
    /// `[[auth.mtls]] servers`) may register, report, relay interactions
    /// and update background calls only for those.
    pub fn may_act_for(&self, server: &str) -> Result<(), Status> {
        if self.servers.is_empty() || self.servers.iter().any(|s| s == server) {
            return Ok(());
        }
        Err(Status::permission_denied(format!(
            "sidecar credential {:?} is bound to the servers {:?}; it may not act for server {server:?}",
            self.name, self.servers
        )))
    }
}

/// What [`Guard`] attaches to a request that came with no credentials
/// (allowed while `[auth] required` is false): the servers some sidecar
/// credential is bound to, which an anonymous caller may not act for.
#[derive(Debug, Clone)]
pub struct Anonymous {
    bound: std::sync::Arc<[String]>,
}

impl Anonymous {
    /// PERMISSION_DENIED when `server` is bound to a sidecar credential:
    /// a binding holds whatever `[auth] required` says, so an anonymous
    /// sidecar cannot register as (or report, relay or update background
    /// calls for) a server that only its credential may act for.
    pub fn may_act_for(&self, server: &str) -> Result<(), Status> {
        if self.bound.iter().any(|s| s == server) {
            return Err(Status::permission_denied(format!(
                "server {server:?} is bound to a sidecar credential ([[auth.tokens]] or [[auth.mtls]] servers); a sidecar without credentials may not act for it"
            )));
        }
        Ok(())
    }
}

/// [`Caller::may_act_for`] for the caller of a request, or
/// [`Anonymous::may_act_for`] when it has none. A refusal is logged and
/// counted as `wrong_server`.
pub fn check_server<T>(
    request: &tonic::Request<T>,
    metrics: &Metrics,
    server: &str,
) -> Result<(), Status> {
    let decision = match (
        request.extensions().get::<Caller>(),
        request.extensions().get::<Anonymous>(),
    ) {
        (Some(caller), _) => caller.may_act_for(server),
        (None, Some(anonymous)) => anonymous.may_act_for(server),
        (None, None) => Ok(()),
    };
    decision.inspect_err(|status| {
        metrics.auth_refusal(
            Service::SidecarRegistry.label(),
            Refusal::WrongServer.label(),
        );
        tracing::warn!(
            service = Service::SidecarRegistry.grpc_name(),
            reason = Refusal::WrongServer.label(),
            message = status.message(),
            "call refused"
        );
    })
}

struct TokenIdentity {
    digest: [u8; 32],
    name: String,
    role: Role,
    servers: Vec<String>,
}

/// The identities of `[auth]`, and the decision for one request.
pub struct Authenticator {
    required: bool,
    tokens: Vec<TokenIdentity>,
    mtls: Vec<(String, Role, Vec<String>)>,
    /// Every server some sidecar credential is bound to ([`Anonymous`]).
    bound: std::sync::Arc<[String]>,
    metrics: Option<Metrics>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("required", &self.required)
            .field(
                "tokens",
                &self.tokens.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .field("mtls", &self.mtls)
            .finish()
    }
}

fn digest(token: &[u8]) -> [u8; 32] {
    Sha256::digest(token).into()
}

/// A token's fingerprint for console sessions: hex SHA-256 of a label and
/// the token's digest (the store never holds the token or its digest).
fn fingerprint(token_digest: &[u8; 32]) -> String {
    let mut h = Sha256::new();
    h.update(b"switchyard console session\0");
    h.update(token_digest);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Equality of two digests in time independent of where they differ.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Authenticator {
    /// Reads the token files of `config` (roles were checked with the
    /// configuration). Two entries with the same token are refused: the
    /// token would not tell which role applies. Refusals are counted in
    /// `metrics` when given.
    pub fn load(config: &AuthConfig, metrics: Option<&Metrics>) -> Result<Self, CredentialError> {
        let mut tokens: Vec<TokenIdentity> = Vec::new();
        for (i, t) in config.tokens.iter().enumerate() {
            let key = format!("auth.tokens[{i}].token_file");
            let token = shared::load_token(&key, &t.token_file)?;
            let d = digest(token.as_bytes());
            if let Some(other) = tokens.iter().find(|o| same(&o.digest, &d)) {
                return Err(CredentialError::Token {
                    key,
                    file: t.token_file.clone(),
                    problem: format!("holds the same token as the entry {:?}", other.name),
                });
            }
            tokens.push(TokenIdentity {
                digest: d,
                name: t.name.clone(),
                role: Role::parse(&t.role).unwrap_or(Role::Engine),
                servers: t.servers.clone(),
            });
        }
        let mtls: Vec<(String, Role, Vec<String>)> = config
            .mtls
            .iter()
            .filter_map(|m| Some((m.name.clone(), Role::parse(&m.role)?, m.servers.clone())))
            .collect();
        let mut bound: Vec<String> = tokens
            .iter()
            .filter(|t| t.role == Role::Sidecar)
            .flat_map(|t| t.servers.iter().cloned())
            .chain(
                mtls.iter()
                    .filter(|(_, role, _)| *role == Role::Sidecar)
                    .flat_map(|(_, _, servers)| servers.iter().cloned()),
            )
            .collect();
        bound.sort();
        bound.dedup();
        Ok(Authenticator {
            required: config.required,
            tokens,
            mtls,
            bound: bound.into(),
            metrics: metrics.cloned(),
        })
    }

    /// Whether any `[[auth.tokens]]` entry has role `admin` (someone can
    /// log in to the console).
    pub fn has_admin_tokens(&self) -> bool {
        self.tokens.iter().any(|t| t.role == Role::Admin)
    }

    /// The console's login: the name of the `[[auth.tokens]]` entry whose
    /// token is `token` and the token's fingerprint (a digest of its
    /// digest, kept with the console session so that the session ends
    /// when the token is no longer configured), if its role is admin.
    /// Errors: UNAUTHENTICATED for a token that matches no entry,
    /// PERMISSION_DENIED for another role; each refusal is counted as
    /// `service="console"`.
    pub fn console_login(&self, token: &str) -> Result<(String, String), Status> {
        let service = Service::Console;
        let d = digest(token.trim().as_bytes());
        let found = self.tokens.iter().fold(
            None,
            |hit, t| if same(&t.digest, &d) { Some(t) } else { hit },
        );
        match found {
            None => Err(self.refuse(
                service,
                Refusal::InvalidToken,
                Status::unauthenticated(
                    "the token is not valid (it matches no [[auth.tokens]] entry)",
                ),
            )),
            Some(t) if t.role != Role::Admin => Err(self.refuse(
                service,
                Refusal::WrongRole,
                Status::permission_denied(format!(
                    "the token of {:?} has role {}; the console needs role admin",
                    t.name,
                    t.role.as_str()
                )),
            )),
            Some(t) => Ok((t.name.clone(), fingerprint(&t.digest))),
        }
    }

    /// The admin whose token has `fingerprint` ([`Self::console_login`]),
    /// if it is still configured with role admin.
    pub fn console_admin(&self, fingerprint_hex: &str) -> Option<&str> {
        self.tokens
            .iter()
            .filter(|t| t.role == Role::Admin)
            .find(|t| fingerprint(&t.digest).as_bytes() == fingerprint_hex.as_bytes())
            .map(|t| t.name.as_str())
    }

    /// Counts and logs a console refusal that is not about a token (a
    /// missing or forged cookie, a missing CSRF token).
    pub fn console_refusal(&self, reason: Refusal, message: &str) {
        let _ = self.refuse(Service::Console, reason, Status::unauthenticated(message));
    }

    /// The interceptor guarding `service`.
    pub fn guard(self: &std::sync::Arc<Self>, service: Service) -> Guard {
        Guard {
            auth: self.clone(),
            service,
            admissions: None,
        }
    }

    fn refuse(&self, service: Service, reason: Refusal, status: Status) -> Status {
        if let Some(m) = &self.metrics {
            m.auth_refusal(service.label(), reason.label());
        }
        tracing::info!(
            service = service.grpc_name(),
            reason = reason.label(),
            message = status.message(),
            "call refused"
        );
        status
    }

    /// Decides one request to `service`: the caller (`None`: anonymous,
    /// allowed because `required` is false) or the refusal status.
    /// `peer_certs` are the client's verified certificates, leaf first.
    pub fn check(
        &self,
        service: Service,
        metadata: &MetadataMap,
        peer_certs: Option<&[CertificateDer<'_>]>,
    ) -> Result<Option<Caller>, Status> {
        let name = service.grpc_name();
        let caller = if let Some(value) = metadata.get("authorization") {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| {
                    let (scheme, token) = v.split_once(' ')?;
                    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
                })
                .filter(|t| !t.is_empty())
                .ok_or_else(|| {
                    self.refuse(
                        service,
                        Refusal::InvalidToken,
                        Status::unauthenticated(format!(
                            "{name}: the authorization header must be \"Bearer <token>\""
                        )),
                    )
                })?;
            let d = digest(token.as_bytes());
            // Every entry is compared (no early exit), in constant time.
            let found = self
                .tokens
                .iter()
                .fold(None, |hit, t| if same(&t.digest, &d) { Some(t) } else { hit })
                .ok_or_else(|| {
                    self.refuse(
                        service,
                        Refusal::InvalidToken,
                        Status::unauthenticated(format!(
                            "{name}: the bearer token is not valid (it matches no [[auth.tokens]] entry)"
                        )),
                    )
                })?;
            Some(Caller {
                name: found.name.clone(),
                role: found.role,
                method: "token",
                servers: found.servers.clone(),
            })
        } else if let Some(leaf) = peer_certs.and_then(<[_]>::first) {
            let names = certificate_names(leaf);
            let found = self
                .mtls
                .iter()
                .find(|(n, _, _)| names.iter().any(|c| c == n));
            match found {
                Some((n, role, servers)) => Some(Caller {
                    name: n.clone(),
                    role: *role,
                    method: "mtls",
                    servers: servers.clone(),
                }),
                None if self.required => {
                    return Err(self.refuse(
                        service,
                        Refusal::UnknownCertificate,
                        Status::unauthenticated(format!(
                            "{name}: the client certificate ({}) matches no [[auth.mtls]] entry, and no bearer token was sent",
                            if names.is_empty() {
                                "no common name or DNS name".to_owned()
                            } else {
                                names.join(", ")
                            }
                        )),
                    ));
                }
                None => None,
            }
        } else if self.required {
            return Err(self.refuse(
                service,
                Refusal::MissingCredentials,
                Status::unauthenticated(format!(
                    "{name} requires authentication: no bearer token (authorization: Bearer <token>) and no client certificate was presented"
                )),
            ));
        } else {
            None
        };
        if let Some(c) = &caller
            && !service.allows(c.role)
        {
            return Err(self.refuse(
                service,
                Refusal::WrongRole,
                Status::permission_denied(format!(
                    "{name}: caller {:?} has role {}; this service needs role {}",
                    c.name,
                    c.role.as_str(),
                    service.needed()
                )),
            ));
        }
        Ok(caller)
    }
}

/// The tonic interceptor guarding one service (see the module docs).
#[derive(Debug, Clone)]
pub struct Guard {
    auth: std::sync::Arc<Authenticator>,
    service: Service,
    admissions: Option<std::sync::Arc<Admissions>>,
}

impl Guard {
    /// Also tells `admissions` that the connection of each request let
    /// through carried an admitted one (the listener then stops watching
    /// it; one that carries none in time is closed).
    #[must_use]
    pub fn admitting(mut self, admissions: std::sync::Arc<Admissions>) -> Self {
        self.admissions = Some(admissions);
        self
    }
}

impl tonic::service::Interceptor for Guard {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let certs = request.peer_certs();
        let caller = self.auth.check(
            self.service,
            request.metadata(),
            certs.as_deref().map(Vec::as_slice),
        )?;
        if let (Some(admissions), Some(peer)) = (&self.admissions, request.remote_addr()) {
            admissions.admit(peer);
        }
        match caller {
            Some(c) => {
                request.extensions_mut().insert(c);
            }
            None => {
                request.extensions_mut().insert(Anonymous {
                    bound: self.auth.bound.clone(),
                });
            }
        }
        Ok(request)
    }
}

/// The names a certificate can be matched by: its subject common name(s)
/// and its DNS subject alternative names. Empty if it does not parse.
pub fn certificate_names(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok(parsed) = webpki::EndEntityCert::try_from(cert) else {
        return Vec::new();
    };
    let mut names = common_names(parsed.subject());
    names.extend(parsed.valid_dns_names().map(str::to_owned));
    names
}

/// One DER element: (tag, contents, rest).
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The commonName (OID 2.5.4.3) values of an X.501 Name's contents (RFC
/// 5280 section 4.1.2.4): a sequence of SETs of `{type, value}` sequences.
fn common_names(mut name: &[u8]) -> Vec<String> {
    const CN: [u8; 3] = [0x55, 0x04, 0x03];
    let mut out = Vec::new();
    while let Some((0x31, mut set, rest)) = der(name) {
        name = rest;
        while let Some((0x30, attribute, more)) = der(set) {
            set = more;
            let Some((0x06, oid, value)) = der(attribute) else {
                continue;
            };
            // UTF8String, PrintableString, IA5String.
            if oid == CN
                && let Some((0x0c | 0x13 | 0x16, text, _)) = der(value)
                && let Ok(text) = std::str::from_utf8(text)
            {
                out.push(text.to_owned());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str, dns: &[&str]) -> CertificateDer<'static> {
        let mut params =
            rcgen::CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "Switchyard tests");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn names_are_the_common_name_and_dns_sans() {
        let c = cert("engine-1", &["engine.example.test", "e2.example.test"]);
        assert_eq!(
            certificate_names(&c),
            ["engine-1", "engine.example.test", "e2.example.test"]
        );
        assert!(certificate_names(&CertificateDer::from(vec![0x30, 0x00])).is_empty());
    }

    #[test]
    fn roles_and_services() {
        assert!(Service::Engine.allows(Role::Admin));
        assert!(Service::Engine.allows(Role::Engine));
        assert!(!Service::Engine.allows(Role::Sidecar));
        assert!(!Service::Admin.allows(Role::Engine));
        assert!(!Service::SidecarRegistry.allows(Role::Admin));
        assert_eq!(Role::parse("operator"), None);
    }

    #[test]
    fn tokens_certificates_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("engine.token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let config = AuthConfig {
            required: true,
            tokens: vec![TokenEntry {
                name: "engine-a".into(),
                role: "engine".into(),
                token_file: file,
                servers: vec![],
            }],
            mtls: vec![MtlsEntry {
                name: "ops.example.test".into(),
                role: "admin".into(),
                servers: vec![],
            }],
        };
        let metrics = Metrics::new();
        let auth = Authenticator::load(&config, Some(&metrics)).unwrap();
        let mut md = MetadataMap::new();
        let e = auth.check(Service::Engine, &md, None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(e.message().contains("no bearer token"), "{}", e.message());

        md.insert("authorization", "Bearer s3cret".parse().unwrap());
        let c = auth.check(Service::Engine, &md, None).unwrap().unwrap();
        assert_eq!((c.name.as_str(), c.role), ("engine-a", Role::Engine));
        let e = auth.check(Service::Admin, &md, None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(e.message().contains("needs role admin"), "{}", e.message());

        md.insert("authorization", "Bearer wrong".parse().unwrap());
        let e = auth.check(Service::Engine, &md, None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        md.insert("authorization", "Basic czNjcmV0".parse().unwrap());
        assert!(auth.check(Service::Engine, &md, None).is_err());

        let ops = cert("ops", &["ops.example.test"]);
        let c = auth
            .check(Service::Admin, &MetadataMap::new(), Some(&[ops]))
            .unwrap()
            .unwrap();
        assert_eq!((c.role, c.method), (Role::Admin, "mtls"));
        let stranger = cert("stranger", &[]);
        let e = auth
            .check(Service::Admin, &MetadataMap::new(), Some(&[stranger]))
            .unwrap_err();
        assert!(e.message().contains("stranger"), "{}", e.message());

        let text = prometheus::TextEncoder::new()
            .encode_to_string(&metrics.registry().gather())
            .unwrap();
        for (reason, n) in [
            ("missing_credentials", 1),
            ("invalid_token", 2),
            ("unknown_certificate", 1),
        ] {
            let line = format!(
                "switchyard_control_plane_auth_refusals_total{{reason=\"{reason}\",service=\"{}\"}} {n}",
                if reason == "unknown_certificate" {
                    "admin"
                } else {
                    "engine"
                }
            );
            assert!(text.contains(&line), "{line}\n{text}");
        }
        assert!(text.contains(
            "switchyard_control_plane_auth_refusals_total{reason=\"wrong_role\",service=\"admin\"} 1"
        ));

        // Not required: anonymous callers pass, wrong tokens do not.
        let open = Authenticator::load(
            &AuthConfig {
                required: false,
                ..config
            },
            None,
        )
        .unwrap();
        assert_eq!(
            open.check(Service::Admin, &MetadataMap::new(), None)
                .unwrap(),
            None
        );
        assert!(open.check(Service::Engine, &md, None).is_err());
    }

    #[test]
    fn a_bound_sidecar_credential_acts_only_for_its_servers() {
        let dir = tempfile::tempdir().unwrap();
        let (bound, free) = (dir.path().join("bound"), dir.path().join("free"));
        std::fs::write(&bound, "bound-token").unwrap();
        std::fs::write(&free, "free-token").unwrap();
        let entry = |name: &str, file: &std::path::Path, servers: &[&str]| TokenEntry {
            name: name.into(),
            role: "sidecar".into(),
            token_file: file.to_owned(),
            servers: servers.iter().map(|s| s.to_string()).collect(),
        };
        let config = AuthConfig {
            required: true,
            tokens: vec![
                entry("files-sidecars", &bound, &["files", "search"]),
                entry("any-sidecar", &free, &[]),
            ],
            mtls: vec![MtlsEntry {
                name: "sidecar.example.test".into(),
                role: "sidecar".into(),
                servers: vec!["web".into()],
            }],
        };
        let metrics = Metrics::new();
        let auth = Authenticator::load(&config, Some(&metrics)).unwrap();
        let caller = |token: &str| {
            let mut md = MetadataMap::new();
            md.insert("authorization", format!("Bearer {token}").parse().unwrap());
            auth.check(Service::SidecarRegistry, &md, None)
                .unwrap()
                .unwrap()
        };
        let request = |c: Option<Caller>| {
            let mut r = tonic::Request::new(());
            if let Some(c) = c {
                r.extensions_mut().insert(c);
            }
            r
        };

        let b = caller("bound-token");
        assert_eq!(b.servers, ["files", "search"]);
        assert!(check_server(&request(Some(b.clone())), &metrics, "files").is_ok());
        assert!(check_server(&request(Some(b.clone())), &metrics, "search").is_ok());
        let e = check_server(&request(Some(b)), &metrics, "web").unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            e.message(),
            "sidecar credential \"files-sidecars\" is bound to the servers [\"files\", \"search\"]; it may not act for server \"web\""
        );
        // Unbound callers act for any server.
        assert!(check_server(&request(Some(caller("free-token"))), &metrics, "web").is_ok());
        // A certificate identity is bound the same way.
        let c = auth
            .check(
                Service::SidecarRegistry,
                &MetadataMap::new(),
                Some(&[cert("sc", &["sidecar.example.test"])]),
            )
            .unwrap()
            .unwrap();
        assert!(c.may_act_for("web").is_ok());
        assert!(c.may_act_for("files").is_err());

        let text = prometheus::TextEncoder::new()
            .encode_to_string(&metrics.registry().gather())
            .unwrap();
        assert!(
            text.contains(
                "switchyard_control_plane_auth_refusals_total{reason=\"wrong_server\",service=\"sidecar_registry\"} 1"
            ),
            "{text}"
        );
    }
    /// Only a request the guard lets through admits its connection.
    #[tokio::test]
    async fn requests_let_through_admit_their_connection() {
        use tonic::service::Interceptor as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("engine");
        std::fs::write(&file, "engine-token").unwrap();
        let config = AuthConfig {
            required: true,
            tokens: vec![TokenEntry {
                name: "engine".into(),
                role: "engine".into(),
                token_file: file,
                servers: vec![],
            }],
            mtls: vec![],
        };
        let auth = std::sync::Arc::new(Authenticator::load(&config, None).unwrap());
        let admissions = Admissions::new(std::time::Duration::from_secs(30));
        let mut guard = auth.guard(Service::Engine).admitting(admissions.clone());
        let peer: std::net::SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let _watched = admissions.watch(peer);
        let request = |token: &str| {
            let mut r = tonic::Request::new(());
            r.extensions_mut()
                .insert(tonic::transport::server::TcpConnectInfo {
                    local_addr: None,
                    remote_addr: Some(peer),
                });
            r.metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
            r
        };
        assert!(guard.call(request("wrong")).is_err());
        assert_eq!(admissions.waiting(), 1);
        assert!(guard.call(request("engine-token")).is_ok());
        assert_eq!(admissions.waiting(), 0);
    }

    /// A binding holds whatever `required` says: with `required = false`,
    /// a sidecar with no credentials is let in, but may not act for a
    /// server a credential is bound to (it could register as it and get
    /// its calls); it may still act for the servers no one is bound to.
    #[test]
    fn a_binding_holds_when_credentials_are_not_required() {
        use tonic::service::Interceptor as _;
        let dir = tempfile::tempdir().unwrap();
        let bound = dir.path().join("bound");
        std::fs::write(&bound, "bound-token").unwrap();
        let config = AuthConfig {
            required: false,
            tokens: vec![TokenEntry {
                name: "files-sidecars".into(),
                role: "sidecar".into(),
                token_file: bound,
                servers: vec!["files".into()],
            }],
            mtls: vec![MtlsEntry {
                name: "web-sidecar".into(),
                role: "sidecar".into(),
                servers: vec!["web".into()],
            }],
        };
        let metrics = Metrics::new();
        let auth = std::sync::Arc::new(Authenticator::load(&config, Some(&metrics)).unwrap());
        let mut guard = auth.guard(Service::SidecarRegistry);
        let anonymous = guard.call(tonic::Request::new(())).unwrap();
        for server in ["files", "web"] {
            let e = check_server(&anonymous, &metrics, server).unwrap_err();
            assert_eq!(e.code(), tonic::Code::PermissionDenied);
            assert!(
                e.message().contains(&format!("server {server:?} is bound")),
                "{}",
                e.message()
            );
        }
        assert!(check_server(&anonymous, &metrics, "search").is_ok());
        // The credential the server is bound to still acts for it.
        let mut with_token = tonic::Request::new(());
        with_token
            .metadata_mut()
            .insert("authorization", "Bearer bound-token".parse().unwrap());
        let with_token = guard.call(with_token).unwrap();
        assert!(check_server(&with_token, &metrics, "files").is_ok());
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&metrics.registry().gather())
            .unwrap();
        assert!(
            text.contains(
                "switchyard_control_plane_auth_refusals_total{reason=\"wrong_server\",service=\"sidecar_registry\"} 2"
            ),
            "{text}"
        );
    }
}
