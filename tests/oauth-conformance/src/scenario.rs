//! What the suite tells the client under test: the server URL (the last
//! argument), the scenario, the protocol version, and the scenario's
//! context (for `auth/pre-registration`, the pre-registered client).

use anyhow::{Context, bail};
use serde_json::Value;

/// The Client ID Metadata Document URL the suite accepts without fetching
/// it; the control plane uses it only when the authorization server
/// advertises `client_id_metadata_document_supported`.
pub const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// One run of one scenario.
#[derive(Clone)]
pub struct Scenario {
    /// `MCP_CONFORMANCE_SCENARIO`, e.g. `auth/metadata-default`.
    pub name: String,
    /// `MCP_CONFORMANCE_PROTOCOL_VERSION` (empty when unset).
    pub version: String,
    /// The MCP server's URL.
    pub server_url: String,
    /// The context's `client_id` (a pre-registered client).
    pub client_id: Option<String>,
    /// The context's `client_secret`.
    pub client_secret: Option<String>,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("server_url", &self.server_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Scenario {
    /// Reads the command line and the environment. Errors: no server URL,
    /// or a context that is not a JSON object.
    pub fn from_env() -> anyhow::Result<Scenario> {
        let Some(server_url) = std::env::args().skip(1).last() else {
            bail!(
                "usage: switchyard-oauth-conformance <server-url> (run by the conformance suite)"
            );
        };
        let var = |k: &str| std::env::var(k).unwrap_or_default();
        let context = var("MCP_CONFORMANCE_CONTEXT");
        let context: Value = if context.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&context).context("MCP_CONFORMANCE_CONTEXT is not JSON")?
        };
        let field = |k: &str| {
            context
                .get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Ok(Scenario {
            name: var("MCP_CONFORMANCE_SCENARIO"),
            version: var("MCP_CONFORMANCE_PROTOCOL_VERSION"),
            server_url,
            client_id: field("client_id"),
            client_secret: field("client_secret"),
        })
    }

    /// The server's `era`: the protocol version when the gateway speaks it,
    /// else `auto`.
    pub fn era(&self) -> &str {
        match self.version.as_str() {
            v @ ("2025-11-25" | "2026-07-28") => v,
            _ => "auto",
        }
    }
}
