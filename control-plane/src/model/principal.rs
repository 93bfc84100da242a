//! Who calls: a caller's role, the gRPC services it may call, why a call
//! was refused, and the authenticated caller itself (put in a request's
//! extensions by `auth`, stored as a session's owner). Plain data; the
//! checks that use it are in `auth`.

/// A caller's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// An agent engine: `EngineService`.
    Engine,
    /// An administrator: `AdminService` and `EngineService`.
    Admin,
    /// A sidecar: `SidecarRegistry`.
    Sidecar,
}

impl Role {
    /// `engine`, `admin` or `sidecar`; anything else is `None`.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "engine" => Some(Role::Engine),
            "admin" => Some(Role::Admin),
            "sidecar" => Some(Role::Sidecar),
            _ => None,
        }
    }

    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Engine => "engine",
            Role::Admin => "admin",
            Role::Sidecar => "sidecar",
        }
    }
}

/// A guarded service (the `service` label of the refusal metric): the
/// three gRPC services and the MCP endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// `switchyard.v1.EngineService`.
    Engine,
    /// `switchyard.v1.AdminService`.
    Admin,
    /// `switchyard.v1.SidecarRegistry`.
    SidecarRegistry,
    /// The MCP endpoint (`[mcp] listen`, HTTP).
    Mcp,
    /// The admin console's login (`/ui`, HTTP).
    Console,
}

impl Service {
    /// All of them.
    pub const ALL: [Service; 5] = [
        Service::Engine,
        Service::Admin,
        Service::SidecarRegistry,
        Service::Mcp,
        Service::Console,
    ];

    /// The metric label: `engine`, `admin`, `sidecar_registry`, `mcp`,
    /// `console`.
    pub fn label(self) -> &'static str {
        match self {
            Service::Engine => "engine",
            Service::Admin => "admin",
            Service::SidecarRegistry => "sidecar_registry",
            Service::Mcp => "mcp",
            Service::Console => "console",
        }
    }

    /// The service's name in messages: the gRPC service name, or `the MCP
    /// endpoint`.
    pub fn grpc_name(self) -> &'static str {
        match self {
            Service::Engine => "EngineService",
            Service::Admin => "AdminService",
            Service::SidecarRegistry => "SidecarRegistry",
            Service::Mcp => "the MCP endpoint",
            Service::Console => "the console",
        }
    }

    /// Whether `role` may call this service.
    pub fn allows(self, role: Role) -> bool {
        matches!(
            (self, role),
            (Service::Engine | Service::Mcp, Role::Engine | Role::Admin)
                | (Service::Admin | Service::Console, Role::Admin)
                | (Service::SidecarRegistry, Role::Sidecar)
        )
    }

    /// The roles that may call it, for messages.
    pub fn needed(self) -> &'static str {
        match self {
            Service::Engine | Service::Mcp => "engine or admin",
            Service::Admin | Service::Console => "admin",
            Service::SidecarRegistry => "sidecar",
        }
    }
}

/// Why a call was refused (the `reason` label of the refusal metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No token and no (known) client certificate while `required`.
    MissingCredentials,
    /// A token that matches no entry, or a malformed `authorization`.
    InvalidToken,
    /// A verified client certificate whose names match no entry, no
    /// token, while `required`.
    UnknownCertificate,
    /// A known caller whose role may not call the service.
    WrongRole,
    /// A sidecar credential bound to other servers than the one it acts
    /// for (`[[auth.*]] servers`).
    WrongServer,
    /// The console: no session cookie, or one that is forged, expired,
    /// logged out or whose admin token is gone.
    InvalidSession,
    /// The console: a write without the session's CSRF token, or from
    /// another origin.
    Csrf,
    /// The console: too many failed logins in a minute.
    TooManyLogins,
}

impl Refusal {
    /// All of them.
    pub const ALL: [Refusal; 8] = [
        Refusal::MissingCredentials,
        Refusal::InvalidToken,
        Refusal::UnknownCertificate,
        Refusal::WrongRole,
        Refusal::WrongServer,
        Refusal::InvalidSession,
        Refusal::Csrf,
        Refusal::TooManyLogins,
    ];

    /// Whether `service` can refuse for this reason (its metric series
    /// exists from the start).
    pub fn applies_to(self, service: Service) -> bool {
        match self {
            Refusal::WrongServer => service == Service::SidecarRegistry,
            Refusal::InvalidSession | Refusal::Csrf | Refusal::TooManyLogins => {
                service == Service::Console
            }
            Refusal::InvalidToken | Refusal::WrongRole => true,
            Refusal::MissingCredentials | Refusal::UnknownCertificate => {
                service != Service::Console
            }
        }
    }

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::MissingCredentials => "missing_credentials",
            Refusal::InvalidToken => "invalid_token",
            Refusal::UnknownCertificate => "unknown_certificate",
            Refusal::WrongRole => "wrong_role",
            Refusal::WrongServer => "wrong_server",
            Refusal::InvalidSession => "invalid_session",
            Refusal::Csrf => "csrf",
            Refusal::TooManyLogins => "too_many_logins",
        }
    }
}

/// An authenticated caller; put in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The entry's name (`[[auth.tokens]] name`, or the certificate name
    /// that matched `[[auth.mtls]] name`).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// `token` or `mtls`.
    pub method: &'static str,
    /// Role `sidecar`: the servers it may act for (`[[auth.*]] servers`);
    /// empty: any server.
    pub servers: Vec<String>,
}
