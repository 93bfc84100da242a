//! Protocol-era negotiation (2026-07-28 basic/versioning, "Backward
//! Compatibility with Initialization-Based Versions").
//!
//! A dual-era client probes with `server/discover` carrying the modern
//! per-request `_meta`. A `DiscoverResult` means a modern server. A
//! recognised modern error (-32020, -32021, -32022) also means a modern
//! server: no fallback, except to a legacy version the server itself lists
//! as supported. Anything else — another error, a 4xx without a modern
//! error body, or silence until the probe timeout — means a legacy server:
//! `initialize`, then `notifications/initialized` (2025-11-25
//! basic/lifecycle).

use super::config::UpstreamConfig;
use super::error::UpstreamError;
use super::transport::Transport;
use serde::Serialize;
use serde_json::{Map, Value, json};
pub use switchyard_mcp::era::Era;
use switchyard_mcp::era::{EraPreference, LEGACY_VERSION, LEGACY_VERSIONS, MODERN_VERSION};
use switchyard_mcp::{jsonrpc, meta};

/// Longest wait for the `initialize` answer: a server that never completes
/// its handshake is reported instead of holding every call for the full
/// request timeout.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What negotiation established. `server_info` and `capabilities` are kept
/// exactly as the server sent them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Negotiated {
    /// The era.
    pub era: Era,
    /// The protocol version in use.
    pub protocol_version: String,
    /// `serverInfo` (legacy) or `_meta["io.modelcontextprotocol/serverInfo"]`
    /// (modern); `null` when the server sent none.
    pub server_info: Value,
    /// The server's capabilities object.
    pub capabilities: Value,
    /// `instructions`, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// `supportedVersions` from `server/discover` (modern only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub supported_versions: Vec<String>,
}

impl Negotiated {
    /// Whether the server declared the `tools` capability.
    pub fn has_tools(&self) -> bool {
        self.declares("tools")
    }

    /// Whether the server declared `capability` (`tools`, `resources`,
    /// `prompts`, `completions`...): present and not null.
    pub fn declares(&self, capability: &str) -> bool {
        declares(&self.capabilities, capability)
    }

    /// Whether the server declared `listChanged: true` on `capability`
    /// (`tools`, `resources` or `prompts`): it sends
    /// `notifications/<capability>/list_changed`.
    pub fn declares_list_changed(&self, capability: &str) -> bool {
        declares_list_changed(&self.capabilities, capability)
    }
}

/// Whether `capabilities` declares `capability` (present and not null).
pub fn declares(capabilities: &Value, capability: &str) -> bool {
    capabilities.get(capability).is_some_and(|c| !c.is_null())
}

/// Whether `capabilities` declares `listChanged: true` on `capability`.
pub fn declares_list_changed(capabilities: &Value, capability: &str) -> bool {
    capabilities[capability]["listChanged"] == Value::Bool(true)
}

/// The capabilities whose lists can change (`listChanged`): the tool list
/// (stage A), and the resource and prompt lists (stage E).
pub const LISTS: [&str; 3] = ["tools", "resources", "prompts"];

/// The client capabilities we declare: elicitation (form and URL) and
/// roots when the session handles interactions
/// ([`crate::interactions::capabilities`]), else none. Sampling is never
/// declared.
pub fn client_capabilities(config: &UpstreamConfig) -> Value {
    if config.interactive {
        crate::interactions::capabilities()
    } else {
        json!({})
    }
}

/// The modern per-request `_meta` entries.
pub fn modern_meta(config: &UpstreamConfig) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(meta::PROTOCOL_VERSION.into(), MODERN_VERSION.into());
    m.insert(
        meta::CLIENT_INFO.into(),
        json!({"name": config.client_name, "version": config.client_version}),
    );
    m.insert(
        meta::CLIENT_CAPABILITIES.into(),
        client_capabilities(config),
    );
    m
}

/// Sets the modern per-request `_meta` entries in a request's `meta`
/// (2026-07-28 schema `RequestMetaObject`), replacing whatever the request
/// carried under those keys, except that the `extensions` of a
/// `clientCapabilities` it already carries are kept and merged into ours:
/// extension capabilities are declared per request (SEP-2663: the tasks
/// stage, [`crate::background`], declares `io.modelcontextprotocol/tasks` on the
/// requests that can handle a task).
pub fn apply_modern_meta(meta: &mut Map<String, Value>, config: &UpstreamConfig) {
    apply_meta(meta, &modern_meta(config));
}

/// A request `_meta` key of this process's own, never sent: the
/// capabilities of the client the request is made for
/// (`SidecarCallRequest.client_capabilities_json`), set by
/// [`narrow_to`]. [`apply_meta`] removes it and tells a 2026-07-28 server
/// ours narrowed to them ([`narrowed`]); [`strip_own`] removes it for a
/// 2025-11-25 server, which learnt ours at `initialize`.
pub const NARROW_TO: &str = "switchyard/clientCapabilities";

/// A request `_meta` key of this process's own, never sent: `true` when
/// one of ours ([`narrow_to`], [`super::logging::ask`]) created `_meta`, so
/// that [`strip_own`] removes a `_meta` the caller did not send and keeps
/// one it sent, empty or not.
pub const META_ADDED: &str = "switchyard/metaAdded";

/// `params._meta`, created (and marked [`META_ADDED`]) when absent;
/// `None` when `params` or its `_meta` is not an object.
pub fn own_meta(params: &mut Value) -> Option<&mut Map<String, Value>> {
    let p = params.as_object_mut()?;
    if !p.contains_key("_meta") {
        let mut added = Map::new();
        added.insert(META_ADDED.into(), true.into());
        p.insert("_meta".into(), Value::Object(added));
    }
    p.get_mut("_meta")?.as_object_mut()
}

/// Marks request `params` as made for a client with `capabilities`
/// ([`NARROW_TO`]); params that are not an object are left alone.
pub fn narrow_to(params: &mut Value, capabilities: &Value) {
    if let Some(m) = own_meta(params) {
        m.insert(NARROW_TO.into(), capabilities.clone());
    }
}

/// Removes this process's own `_meta` keys ([`NARROW_TO`],
/// [`META_ADDED`]) from request `params`, and `_meta` itself when we
/// created it and nothing else is in it: the caller's params go out as
/// they came in.
pub fn strip_own(params: &mut Value) {
    if let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove(NARROW_TO);
        if meta.remove(META_ADDED).is_some()
            && meta.is_empty()
            && let Some(p) = params.as_object_mut()
        {
            p.remove("_meta");
        }
    }
}

/// Our client capabilities `ours` narrowed to a client's `theirs`: each
/// capability of ours that they declared too (elicitation with the modes
/// both declared, a bare `elicitation: {}` being form). Their extensions
/// are not taken: a request declares the extensions this sidecar handles
/// for it (the tasks stage). Sampling is never in ours, so never in the
/// result.
pub fn narrowed(ours: &Value, theirs: &Value) -> Value {
    let mut out = Map::new();
    for (k, v) in ours.as_object().into_iter().flatten() {
        let Some(t) = theirs.get(k) else { continue };
        if k == "elicitation" {
            let mut modes = Map::new();
            let bare = t
                .as_object()
                .is_some_and(|o| o.get("form").is_none() && o.get("url").is_none());
            for mode in ["form", "url"] {
                if v.get(mode).is_some() && (t.get(mode).is_some() || (bare && mode == "form")) {
                    modes.insert(mode.into(), json!({}));
                }
            }
            if !modes.is_empty() {
                out.insert(k.clone(), Value::Object(modes));
            }
        } else {
            out.insert(k.clone(), v.clone());
        }
    }
    Value::Object(out)
}

/// [`apply_modern_meta`] with the entries already built by
/// [`modern_meta`] (a connection builds them once). A request marked with
/// [`NARROW_TO`] tells the server ours narrowed to that client's
/// ([`narrowed`]).
pub fn apply_meta(meta: &mut Map<String, Value>, modern: &Map<String, Value>) {
    let extensions = meta
        .get(meta::CLIENT_CAPABILITIES)
        .and_then(|c| c.get("extensions"))
        .and_then(Value::as_object)
        .cloned();
    let client = meta.remove(NARROW_TO);
    meta.remove(META_ADDED);
    for (k, v) in modern {
        meta.insert(k.clone(), v.clone());
    }
    if let Some(client) = client
        && let Some(ours) = meta.get_mut(meta::CLIENT_CAPABILITIES)
    {
        *ours = narrowed(ours, &client);
    }
    if let Some(extensions) = extensions
        && let Some(Value::Object(caps)) = meta.get_mut(meta::CLIENT_CAPABILITIES)
        && let Value::Object(ours) = caps
            .entry("extensions")
            .or_insert_with(|| Value::Object(Map::new()))
    {
        for (k, v) in extensions {
            ours.entry(k).or_insert(v);
        }
    }
}

/// Negotiates the era on a fresh transport.
pub async fn negotiate(
    transport: &Transport,
    config: &UpstreamConfig,
) -> Result<Negotiated, UpstreamError> {
    let failed = |e| handshake(config, e, None);
    match config.era {
        EraPreference::Legacy => initialize(transport, config).await.map_err(failed),
        EraPreference::Modern => match discover(transport, config).await.map_err(failed)? {
            Probe::Modern(n) => Ok(n),
            Probe::Legacy(why) => Err(UpstreamError::Handshake {
                server: config.name.clone(),
                detail: format!(
                    "the server does not speak {MODERN_VERSION} ({why}{}), and the era is pinned to it",
                    path_hint(&why)
                ),
            }),
        },
        EraPreference::Auto => match discover(transport, config).await.map_err(failed)? {
            Probe::Modern(n) => Ok(n),
            Probe::Legacy(why) => {
                tracing::info!(server = %config.name, reason = %why, "server is not modern; falling back to initialize");
                initialize(transport, config)
                    .await
                    .map_err(|e| handshake(config, e, Some(&why)))
            }
        },
    }
}

/// A handshake failure that is an answer of the server (a JSON-RPC error,
/// an HTTP status, no or a bad response) as [`UpstreamError::Handshake`],
/// with `before`, why `initialize` was tried, when it was the fallback.
/// The rest (the process or the network failing, a refusal, a timeout)
/// stays as it is.
fn handshake(config: &UpstreamConfig, e: UpstreamError, before: Option<&str>) -> UpstreamError {
    match e {
        UpstreamError::Rpc { .. }
        | UpstreamError::HttpStatus { .. }
        | UpstreamError::NoResponse { .. }
        | UpstreamError::Protocol { .. } => {
            let text = e.to_string();
            let prefix = format!("server {}: ", config.name);
            let what = text.strip_prefix(&prefix).unwrap_or(&text);
            let detail = match before {
                Some(why) => format!("{what}; before that, {why}{}", path_hint(why)),
                None => what.to_owned(),
            };
            UpstreamError::Handshake {
                server: config.name.clone(),
                detail,
            }
        }
        other => other,
    }
}

/// A hint when the server answered `server/discover` with HTTP 404: the
/// URL's path is the likely mistake.
fn path_hint(why: &str) -> &'static str {
    match why.contains("HTTP 404") {
        true => " (check the URL's path)",
        false => "",
    }
}

enum Probe {
    Modern(Negotiated),
    Legacy(String),
}

async fn discover(transport: &Transport, config: &UpstreamConfig) -> Result<Probe, UpstreamError> {
    let headers = vec![
        ("mcp-protocol-version".to_owned(), MODERN_VERSION.to_owned()),
        ("mcp-method".to_owned(), "server/discover".to_owned()),
    ];
    let server = &config.name;
    // A modern server may answer UnsupportedProtocolVersion while listing
    // the version we asked for (the client "SHOULD select a mutually
    // supported version from the `supported` list and retry"): one retry.
    let mut retried = false;
    loop {
        let params = json!({"_meta": modern_meta(config)});
        let reply = transport
            .call(
                "server/discover",
                Some(params),
                &headers,
                config.discover_timeout,
                None,
            )
            .await;
        return match reply {
            Ok(result) => {
                let supported = string_list(result.get("supportedVersions"));
                if supported.iter().any(|v| v == MODERN_VERSION) {
                    let server_info = result
                        .get("_meta")
                        .and_then(|m| m.get(meta::SERVER_INFO))
                        .cloned()
                        .unwrap_or(Value::Null);
                    Ok(Probe::Modern(Negotiated {
                        era: Era::Modern,
                        protocol_version: MODERN_VERSION.into(),
                        server_info,
                        capabilities: result
                            .get("capabilities")
                            .cloned()
                            .unwrap_or_else(|| json!({})),
                        instructions: result
                            .get("instructions")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        supported_versions: supported,
                    }))
                } else {
                    // Not a DiscoverResult we can use (a legacy server that
                    // answers unknown methods with an empty result, or one
                    // listing only versions we do not speak in the modern era).
                    Ok(Probe::Legacy(format!(
                        "server/discover result lists versions {supported:?}"
                    )))
                }
            }
            Err(UpstreamError::Rpc {
                code,
                message,
                data,
                ..
            }) if jsonrpc::is_modern_error_code(code) => {
                let supported = string_list(data.as_ref().and_then(|d| d.get("supported")));
                if code == jsonrpc::UNSUPPORTED_PROTOCOL_VERSION {
                    if supported.iter().any(|v| v == MODERN_VERSION) && !retried {
                        retried = true;
                        continue;
                    }
                    if supported
                        .iter()
                        .any(|v| LEGACY_VERSIONS.contains(&v.as_str()))
                    {
                        return Ok(Probe::Legacy(format!("server supports {supported:?}")));
                    }
                }
                Err(UpstreamError::protocol(
                    server,
                    format!(
                        "server/discover rejected with error {code} ({message}); server-supported versions: {supported:?}"
                    ),
                ))
            }
            Err(UpstreamError::Rpc { code, message, .. }) => Ok(Probe::Legacy(format!(
                "server/discover answered error {code}: {message}"
            ))),
            Err(UpstreamError::HttpStatus { status, .. }) if (400..500).contains(&status) => Ok(
                Probe::Legacy(format!("server/discover answered HTTP {status}")),
            ),
            Err(UpstreamError::Timeout { after, .. }) => Ok(Probe::Legacy(format!(
                "no answer to server/discover within {}s",
                after.as_secs_f64()
            ))),
            Err(UpstreamError::NoResponse { detail, .. }) => Ok(Probe::Legacy(format!(
                "no response to server/discover: {detail}"
            ))),
            Err(other) => Err(other),
        };
    }
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

async fn initialize(
    transport: &Transport,
    config: &UpstreamConfig,
) -> Result<Negotiated, UpstreamError> {
    let params = json!({
        "protocolVersion": LEGACY_VERSION,
        "capabilities": client_capabilities(config),
        "clientInfo": {"name": config.client_name, "version": config.client_version},
    });
    let result = transport
        .call(
            "initialize",
            Some(params),
            &Vec::new(),
            config.request_timeout.min(HANDSHAKE_TIMEOUT),
            None,
        )
        .await?;
    let version = result
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            UpstreamError::protocol(&config.name, "initialize result has no protocolVersion")
        })?
        .to_owned();
    if !LEGACY_VERSIONS.contains(&version.as_str()) {
        return Err(UpstreamError::protocol(
            &config.name,
            format!(
                "server chose protocol version {version:?}, which we do not speak (we speak {LEGACY_VERSIONS:?})"
            ),
        ));
    }
    transport.set_legacy(&version);
    transport
        .notify(
            &jsonrpc::notification("notifications/initialized", None),
            &legacy_headers(&version),
        )
        .await?;
    let list_changed = LISTS
        .iter()
        .any(|list| declares_list_changed(&result["capabilities"], list));
    if config.interactive || list_changed {
        // Server requests not tied to one of ours, and list changes, arrive
        // on the standalone stream (a no-op for stdio).
        transport.listen(legacy_headers(&version));
    }
    Ok(Negotiated {
        era: Era::Legacy,
        protocol_version: version,
        server_info: result.get("serverInfo").cloned().unwrap_or(Value::Null),
        capabilities: result
            .get("capabilities")
            .cloned()
            .unwrap_or_else(|| json!({})),
        instructions: result
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned),
        supported_versions: Vec::new(),
    })
}

/// Headers of every legacy request after `initialize` (2025-11-25
/// transports, "Protocol Version Header").
pub fn legacy_headers(version: &str) -> Vec<(String, String)> {
    vec![("mcp-protocol-version".to_owned(), version.to_owned())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_told_ours_narrowed_to_the_clients() {
        let ours = crate::interactions::capabilities();
        let told = |theirs: Value| {
            let mut meta = Map::new();
            meta.insert(NARROW_TO.into(), theirs);
            meta.insert(
                meta::CLIENT_CAPABILITIES.into(),
                json!({"extensions": {meta::TASKS_EXTENSION: {}}}),
            );
            let mut modern = Map::new();
            modern.insert(meta::CLIENT_CAPABILITIES.into(), ours.clone());
            apply_meta(&mut meta, &modern);
            assert!(meta.get(NARROW_TO).is_none(), "never sent: {meta:?}");
            assert!(meta.get(META_ADDED).is_none(), "never sent: {meta:?}");
            meta[meta::CLIENT_CAPABILITIES].clone()
        };
        // Sampling is never told; a bare elicitation is form; the
        // request's own extensions stay, the client's do not come in.
        assert_eq!(
            told(json!({"sampling": {}, "elicitation": {}, "extensions": {"x/y": {}}})),
            json!({"elicitation": {"form": {}}, "extensions": {meta::TASKS_EXTENSION: {}}})
        );
        assert_eq!(
            told(json!({"elicitation": {"url": {}}, "roots": {"listChanged": true}})),
            json!({"elicitation": {"url": {}}, "roots": {}, "extensions": {meta::TASKS_EXTENSION: {}}})
        );
        assert_eq!(
            told(json!({})),
            json!({"extensions": {meta::TASKS_EXTENSION: {}}})
        );
    }

    #[test]
    fn the_own_key_is_stripped_for_a_legacy_server() {
        let mut p = json!({"name": "t"});
        narrow_to(&mut p, &json!({"roots": {}}));
        assert_eq!(p["_meta"][NARROW_TO], json!({"roots": {}}));
        strip_own(&mut p);
        assert_eq!(p, json!({"name": "t"}));
        let mut kept = json!({"name": "t", "_meta": {"progressToken": 1}});
        narrow_to(&mut kept, &json!({}));
        strip_own(&mut kept);
        assert_eq!(kept, json!({"name": "t", "_meta": {"progressToken": 1}}));
        // The caller's own empty `_meta` is theirs: it stays.
        let mut empty = json!({"name": "t", "_meta": {}});
        narrow_to(&mut empty, &json!({}));
        strip_own(&mut empty);
        assert_eq!(empty, json!({"name": "t", "_meta": {}}));
    }
}
