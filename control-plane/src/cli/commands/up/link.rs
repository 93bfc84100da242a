//! How `switchyard up`'s sidecars reach its control plane (the endpoint,
//! the CA to trust, the token of each sidecar), and what `up` needs of a
//! configuration file beyond what a replica needs ([`check`]).

use crate::config::Config;
use std::path::{Path, PathBuf};

/// What `up` needs of a file beyond what a replica needs: its sidecars
/// authenticate with a token, so `tls.require_client_cert` must be false,
/// and `auth.required` needs, for each configured server, a token of role
/// `sidecar` that may act for it. Errors: the problem, naming the key
/// (the CLI exits 64 before starting anything).
pub fn check(config: &Config) -> Result<(), String> {
    if config.tls.require_client_cert {
        return Err(
            "tls.require_client_cert = true is not supported by `switchyard up`: the sidecars it starts authenticate with a token; set it to false and add an [[auth.tokens]] entry with role \"sidecar\"".into(),
        );
    }
    if config.auth.required && !config.auth.tokens.iter().any(|t| t.role == "sidecar") {
        return Err(
            "auth.required = true needs an [[auth.tokens]] entry with role \"sidecar\" for the sidecars `switchyard up` starts".into(),
        );
    }
    // `up`'s sidecars run here: their secret header files must be
    // readable now, not only when a sidecar starts (and fails, again and
    // again).
    for (i, server) in config.servers.iter().enumerate() {
        switchyard_common::server_spec::SecretHeaders::load(server, &format!("servers[{i}]"))
            .map_err(|e| e.to_string())?;
    }
    if config.auth.required {
        let link = SidecarLink::tokens(config);
        for (i, server) in config.servers.iter().enumerate() {
            if link.token_for(&server.name).is_none() {
                return Err(format!(
                    "servers[{i}].name: auth.required = true, but no [[auth.tokens]] entry with role \"sidecar\" may act for server {:?} (each one's `servers` leaves it out)",
                    server.name
                ));
            }
        }
    }
    Ok(())
}

/// How `up`'s sidecars reach its control plane: over `https://` when
/// `[tls]` has a certificate (trusting `client_ca_file`, else `cert_file`
/// itself), each sidecar with the token of the first `[[auth.tokens]]`
/// entry of role `sidecar` that may act for its server.
#[derive(Debug, Clone)]
pub(super) struct SidecarLink {
    /// The endpoint the sidecars call.
    pub(super) control_plane: String,
    /// The CA the sidecars trust (`https://` only).
    pub(super) ca_file: Option<PathBuf>,
    /// The `[[auth.tokens]]` entries of role `sidecar`, in file order:
    /// (token file, the servers it is bound to; empty: any).
    pub(super) sidecar_tokens: Vec<(PathBuf, Vec<String>)>,
}

impl SidecarLink {
    /// The link for a replica serving gRPC on `grpc_addr`; a file [`check`]
    /// refuses is an error.
    pub(super) fn new(
        config: &Config,
        grpc_addr: std::net::SocketAddr,
    ) -> anyhow::Result<SidecarLink> {
        check(config).map_err(|e| anyhow::anyhow!("switchyard up: {e}"))?;
        let sidecar_tokens = Self::tokens(config).sidecar_tokens;
        let (control_plane, ca_file) = match &config.tls.cert_file {
            Some(cert) => {
                // Certificates for one machine name `localhost` (or
                // 127.0.0.1); a wildcard listener is reached on loopback.
                let ip = grpc_addr.ip();
                let host = if ip.is_loopback() || ip.is_unspecified() {
                    "localhost".to_owned()
                } else {
                    ip.to_string()
                };
                (
                    format!("https://{host}:{}", grpc_addr.port()),
                    Some(
                        config
                            .tls
                            .client_ca_file
                            .clone()
                            .unwrap_or_else(|| cert.clone()),
                    ),
                )
            }
            None => (format!("http://{grpc_addr}"), None),
        };
        Ok(SidecarLink {
            control_plane,
            ca_file,
            sidecar_tokens,
        })
    }

    /// A link with only the sidecar tokens of `config` filled in.
    fn tokens(config: &Config) -> SidecarLink {
        SidecarLink {
            control_plane: String::new(),
            ca_file: None,
            sidecar_tokens: config
                .auth
                .tokens
                .iter()
                .filter(|t| t.role == "sidecar")
                .map(|t| (t.token_file.clone(), t.servers.clone()))
                .collect(),
        }
    }

    /// The token file for `server`'s sidecar: the first sidecar token that
    /// may act for it.
    pub(super) fn token_for(&self, server: &str) -> Option<&Path> {
        self.sidecar_tokens
            .iter()
            .find(|(_, servers)| servers.is_empty() || servers.iter().any(|s| s == server))
            .map(|(file, _)| file.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(tokens: &str) -> Config {
        Config::parse(&format!(
            "[auth]\nrequired = true\n{tokens}\n\
             [[servers]]\nname = \"files\"\ntransport = \"stdio\"\ncommand = \"files-server\"\n\n\
             [[servers]]\nname = \"web\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n"
        ))
        .unwrap()
    }

    const ENGINE: &str =
        "[[auth.tokens]]\nname = \"e\"\nrole = \"engine\"\ntoken_file = \"/t/e\"\n";

    #[test]
    fn each_sidecar_gets_the_first_token_that_may_act_for_its_server() {
        let c = config(&format!(
            "{ENGINE}\
             [[auth.tokens]]\nname = \"web-only\"\nrole = \"sidecar\"\ntoken_file = \"/t/web\"\nservers = [\"web\"]\n\
             [[auth.tokens]]\nname = \"any\"\nrole = \"sidecar\"\ntoken_file = \"/t/any\"\n"
        ));
        assert_eq!(check(&c), Ok(()));
        let link = SidecarLink::tokens(&c);
        assert_eq!(link.token_for("web"), Some(Path::new("/t/web")));
        assert_eq!(link.token_for("files"), Some(Path::new("/t/any")));
    }

    #[test]
    fn a_server_no_sidecar_token_may_act_for_is_refused_by_name() {
        let c = config(&format!(
            "{ENGINE}\
             [[auth.tokens]]\nname = \"web-only\"\nrole = \"sidecar\"\ntoken_file = \"/t/web\"\nservers = [\"web\"]\n"
        ));
        let e = check(&c).unwrap_err();
        assert!(
            e.starts_with("servers[0].name: ") && e.contains("\"files\""),
            "{e}"
        );
        assert_eq!(SidecarLink::tokens(&c).token_for("files"), None);
        // Not required: the sidecar may start without a token.
        let open = Config {
            auth: crate::config::AuthConfig {
                required: false,
                ..c.auth.clone()
            },
            ..c
        };
        assert_eq!(check(&open), Ok(()));
    }
}
