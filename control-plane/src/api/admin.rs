//! The admin API (`switchyard.v1.AdminService`): servers and their status;
//! tools with their hint overrides (`toolHints`) and policies (with
//! `background: always|auto`); background calls of every session.

use crate::ControlPlane;
use crate::api::engine::registry_status;
use crate::model::{
    BackgroundMode, HintOverrideRecord, Origin, ServerRecord, ToolPolicy, hints_key, policy_key,
};
use crate::state::Snapshot;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use switchyard_common::server_spec::{
    AuthKind, OAuthSettings, ServerConfig, TransportKind, redacted,
};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::admin_service_server::AdminService;
use tonic::{Request, Response, Status};

/// The service.
#[derive(Debug, Clone)]
pub struct AdminApi {
    cp: Arc<ControlPlane>,
}

impl AdminApi {
    /// Serves `cp`.
    pub fn new(cp: Arc<ControlPlane>) -> Self {
        AdminApi { cp }
    }
}

/// A proto spec as a validated server config. Errors name the field.
/// Unset limits (`max_message_bytes`, `liveness_interval_sec`, a zero
/// `request_timeout_ms`) take their defaults;
/// [`AdminService::update_server`] keeps the stored ones instead.
pub fn spec_from_pb(spec: Option<pb::ServerSpec>) -> Result<ServerConfig, Status> {
    let s = spec.ok_or_else(|| Status::invalid_argument("spec: required"))?;
    let transport = match pb::Transport::try_from(s.transport) {
        Ok(pb::Transport::Stdio) => TransportKind::Stdio,
        Ok(pb::Transport::Http) => TransportKind::Http,
        _ => {
            return Err(Status::invalid_argument(
                "spec.transport: must be STDIO or HTTP",
            ));
        }
    };
    let auth = match s.auth.as_str() {
        "" => None,
        a => Some(AuthKind::parse(a).ok_or_else(|| {
            // Not repeated: a secret typed in the wrong field would be.
            Status::invalid_argument("spec.auth: is not one of \"none\", \"headers\", \"oauth\"")
        })?),
    };
    let config = ServerConfig {
        name: s.name,
        transport,
        command: Some(s.command).filter(|c| !c.is_empty()),
        args: s.args,
        env: s.env.into_iter().collect(),
        cwd: Some(s.cwd).filter(|c| !c.is_empty()).map(Into::into),
        url: Some(s.url).filter(|u| !u.is_empty()),
        auth,
        headers: s.headers.into_iter().collect(),
        header_files: s
            .header_files
            .into_iter()
            .map(|(k, v)| (k, v.into()))
            .collect(),
        era: if s.era.is_empty() {
            "auto".into()
        } else {
            s.era
        },
        request_timeout_sec: if s.request_timeout_ms == 0 {
            600
        } else {
            s.request_timeout_ms.div_ceil(1000)
        },
        max_message_bytes: match s.max_message_bytes {
            None => switchyard_common::server_spec::DEFAULT_MAX_MESSAGE_BYTES,
            Some(n) => usize::try_from(n).map_err(|_| {
                Status::invalid_argument(format!("spec.max_message_bytes: {n} is too large"))
            })?,
        },
        liveness_interval_sec: s
            .liveness_interval_sec
            .unwrap_or(switchyard_common::server_spec::DEFAULT_LIVENESS_INTERVAL_SEC),
        oauth: s.oauth.map(|o| OAuthSettings {
            client_id: Some(o.client_id).filter(|c| !c.is_empty()),
            client_secret: Some(o.client_secret).filter(|c| !c.is_empty()),
            client_secret_file: Some(o.client_secret_file)
                .filter(|c| !c.is_empty())
                .map(Into::into),
            scopes: o.scopes,
            client_metadata_url: Some(o.client_metadata_url).filter(|c| !c.is_empty()),
            allow_unadvertised_pkce: o.allow_unadvertised_pkce,
            client_secret_sealed: false,
        }),
    };
    config
        .validate("spec")
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    // A file the control plane would read and send to an authorization
    // server the server names: only a configuration file may say so.
    if config
        .oauth
        .as_ref()
        .is_some_and(|o| o.client_secret_file.is_some())
    {
        return Err(Status::invalid_argument(
            "spec.oauth.client_secret_file: not accepted through the admin API (the control plane would read a file of its machine): give client_secret, which is sealed in the store, or set client_secret_file in the configuration file",
        ));
    }
    // Read by the server's sidecar, wherever it runs: a relative path
    // would depend on its working directory.
    if let Some((k, _)) = config.header_files.iter().find(|(_, p)| p.is_relative()) {
        return Err(Status::invalid_argument(format!(
            "spec.header_files.{k}: must be an absolute path (the server's sidecar reads it on its machine)"
        )));
    }
    Ok(config)
}

/// A server config as a proto spec, for an answer: the values of secret
/// looking headers and environment variables are
/// [`switchyard_common::server_spec::REDACTED`].
pub fn spec_to_pb(s: &ServerConfig) -> pb::ServerSpec {
    pb::ServerSpec {
        name: s.name.clone(),
        transport: match s.transport {
            TransportKind::Stdio => pb::Transport::Stdio as i32,
            TransportKind::Http => pb::Transport::Http as i32,
        },
        command: s.command.clone().unwrap_or_default(),
        args: switchyard_common::server_spec::redacted_args(&s.args),
        env: redacted(&s.env).into_iter().collect(),
        cwd: s
            .cwd
            .as_ref()
            .map(|c| c.display().to_string())
            .unwrap_or_default(),
        url: s
            .url
            .as_deref()
            .map(switchyard_common::server_spec::redacted_url)
            .unwrap_or_default(),
        headers: redacted(&s.headers).into_iter().collect(),
        era: s.era.clone(),
        request_timeout_ms: s.request_timeout_sec.saturating_mul(1000),
        max_message_bytes: Some(s.max_message_bytes as u64),
        liveness_interval_sec: Some(s.liveness_interval_sec),
        auth: s.auth_kind().as_str().into(),
        header_files: s
            .header_files
            .iter()
            .map(|(k, v)| (k.clone(), v.display().to_string()))
            .collect(),
        oauth: s.oauth.as_ref().map(|o| pb::OAuthSettings {
            client_id: o.client_id.clone().unwrap_or_default(),
            client_secret: String::new(),
            client_secret_file: o
                .client_secret_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            scopes: o.scopes.clone(),
            client_metadata_url: o.client_metadata_url.clone().unwrap_or_default(),
            allow_unadvertised_pkce: o.allow_unadvertised_pkce,
            has_client_secret: o.client_secret.is_some()
                || o.client_secret_file.is_some()
                || o.client_secret_sealed,
        }),
    }
}

/// Values of `new` that are [`switchyard_common::server_spec::REDACTED`]
/// (as answers show secrets) take the value `old` has for the same name.
///
/// Only while the secrets go where they went (`same_target`: an HTTP
/// server's URL keeps its scheme, host and port; a stdio server its
/// command and arguments); else, and for a name the stored spec does not
/// have, a `[redacted]` value is refused (INVALID_ARGUMENT naming
/// `field.NAME`), never stored as the literal text nor sent elsewhere.
fn keep_redacted(
    field: &str,
    new: &mut std::collections::BTreeMap<String, String>,
    old: &std::collections::BTreeMap<String, String>,
    same_target: bool,
) -> Result<(), Status> {
    for (name, value) in new.iter_mut() {
        if value != switchyard_common::server_spec::REDACTED {
            continue;
        }
        match old.get(name) {
            Some(stored) if same_target => value.clone_from(stored),
            Some(_) => {
                return Err(Status::invalid_argument(format!(
                    "spec.{field}.{}: shows [redacted], but the server now points elsewhere (another URL scheme, host or port; for stdio another command, arguments, cwd or environment): give its secret again",
                    switchyard_common::serde_errors::escape_controls(name)
                )));
            }
            None => {
                return Err(Status::invalid_argument(format!(
                    "spec.{field}.{}: shows [redacted], which the stored spec does not have: give its value",
                    switchyard_common::serde_errors::escape_controls(name)
                )));
            }
        }
    }
    Ok(())
}

/// Whether `new` sends its secrets where `old` did: the same transport and,
/// for HTTP, the same URL scheme, host and port; for stdio the same
/// process ([`same_process`], the arguments compared opened: `ring` opens
/// their sealed parts).
fn same_target(
    ring: Option<&crate::oauth::KeyRing>,
    new: &ServerConfig,
    old: &ServerConfig,
) -> bool {
    use crate::oauth::server_secrets::args;
    new.transport == old.transport
        && match new.transport {
            TransportKind::Http => match (&new.url, &old.url) {
                (Some(n), Some(o)) => switchyard_common::server_spec::same_origin(n, o),
                _ => false,
            },
            TransportKind::Stdio => {
                same_process(ring, new, old)
                    && matches!((args(ring, new), args(ring, old)), (Ok(n), Ok(o)) if n == o)
            }
        }
}

/// Refuses (INVALID_ARGUMENT, naming the place) a new server with a value
/// shown as `[redacted]`: answers show that in place of a secret, and there
/// is no stored one to keep; stored, it would be sent as the credential.
fn no_redacted_values(spec: &ServerConfig) -> Result<(), Status> {
    use switchyard_common::server_spec::REDACTED;
    let shows = |v: &str| v.contains(REDACTED) || v.to_ascii_lowercase().contains("%5bredacted%5d");
    let place = [("headers", &spec.headers), ("env", &spec.env)]
        .into_iter()
        .flat_map(|(field, map)| {
            map.iter().filter(|(_, v)| shows(v)).map(move |(k, _)| {
                format!(
                    "{field}.{}",
                    switchyard_common::serde_errors::escape_controls(k)
                )
            })
        })
        .chain(
            spec.args
                .iter()
                .position(|a| shows(a))
                .map(|i| format!("args[{i}]")),
        )
        .chain(
            spec.url
                .as_deref()
                .filter(|u| shows(u))
                .map(|_| "url".to_owned()),
        )
        .chain(
            spec.command
                .as_deref()
                .filter(|c| shows(c))
                .map(|_| "command".to_owned()),
        )
        .chain(
            spec.cwd
                .as_ref()
                .filter(|c| shows(&c.to_string_lossy()))
                .map(|_| "cwd".to_owned()),
        )
        .chain(
            spec.oauth
                .as_ref()
                .and_then(|o| o.client_secret.as_deref())
                .filter(|s| shows(s))
                .map(|_| "oauth.client_secret".to_owned()),
        )
        .next();
    match place {
        Some(place) => Err(Status::invalid_argument(format!(
            "spec.{place}: shows [redacted], which answers show in place of a secret; a new server has no stored value to keep: give the value"
        ))),
        None => Ok(()),
    }
}

/// Whether a stdio server's process would start as it did, arguments
/// aside: the same command, working directory and environment, each
/// variable with the stored value (compared opened: `ring` opens sealed
/// ones) or sent back as `[redacted]`, none added or removed. Anything else
/// (another `PATH`, a variable the server reads an address or a file from,
/// even one with a secret-looking name such as `AUTH_TOKEN_URL`, `cwd` for
/// a relative command) may run other code, or point the server elsewhere,
/// with the stored secrets.
fn same_process(
    ring: Option<&crate::oauth::KeyRing>,
    new: &ServerConfig,
    old: &ServerConfig,
) -> bool {
    use switchyard_common::server_spec::REDACTED;
    let Ok(old_env) = crate::oauth::server_secrets::open(ring, old).map(|o| o.env) else {
        return false;
    };
    let same_env = new.env.len() == old_env.len()
        && new.env.iter().all(|(k, v)| {
            old_env
                .get(k)
                .is_some_and(|stored| v == REDACTED || v == stored)
        });
    new.command == old.command && new.cwd == old.cwd && same_env
}

/// `new`'s arguments with those shown `[redacted]` taken from `old`'s
/// ([`switchyard_common::server_spec::restore_arg_secrets`]), only when
/// the arguments are all sent back as answered and the process would start
/// as it did ([`same_process`]). Errors (INVALID_ARGUMENT): anything else
/// changed (another command, argument, `cwd` or environment): give the
/// arguments again.
fn keep_redacted_args(
    ring: Option<&crate::oauth::KeyRing>,
    new: &mut ServerConfig,
    old: &ServerConfig,
) -> Result<(), Status> {
    use switchyard_common::server_spec::{REDACTED, redacted_args, restore_arg_secrets};
    if !new.args.iter().any(|a| a.contains(REDACTED)) {
        return Ok(());
    }
    if new.transport != old.transport
        || !same_process(ring, new, old)
        || new.args != redacted_args(&old.args)
    {
        return Err(Status::invalid_argument(
            "spec.args: shows [redacted], but the server's command, arguments, cwd or environment changed, and the stored secrets go only to the process they were given for: give every argument again",
        ));
    }
    new.args = restore_arg_secrets(&new.args, &old.args)
        .map_err(|e| Status::invalid_argument(format!("spec.{e}")))?;
    Ok(())
}

/// The status of one server from the read model.
pub fn status_of(snap: &Snapshot, rec: &ServerRecord) -> pb::ServerStatus {
    let name = &rec.spec.name;
    let sidecars: Vec<pb::SidecarInfo> = snap
        .sidecars
        .get(name)
        .map(|m| {
            m.values()
                .map(|s| pb::SidecarInfo {
                    sidecar_id: s.sidecar_id.clone(),
                    call_address: s.call_address.clone(),
                    version: s.version.clone(),
                    registered_at_ms: s.registered_at_ms,
                    upstream_state: s.upstream_state.clone(),
                    last_error: s.last_error.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    let cat = snap.catalogues.get(name);
    // From what the sidecars report about their upstream connection: a
    // registered sidecar whose server is down does not make the server up.
    // Sidecars that are shutting down (`draining`) take no new calls.
    let connected = sidecars.iter().any(|s| s.upstream_state == "connected");
    let all_down = sidecars.iter().all(|s| s.upstream_state == "down");
    let all_draining = sidecars
        .iter()
        .all(|s| s.upstream_state == crate::call::route::DRAINING);
    let state = match (sidecars.is_empty(), connected, cat) {
        (true, _, _) => "down",
        (false, true, Some(_)) => "up",
        (false, false, _) if all_down => "down",
        (false, false, _) if all_draining => "draining",
        _ => "starting",
    };
    let res = snap.resource_catalogues.get(name);
    pb::ServerStatus {
        spec: Some(spec_to_pb(&rec.spec)),
        state: state.into(),
        sidecars,
        tool_count: cat.map_or(0, |c| c.tools.len() as u32),
        tools_updated_at_ms: cat.map_or(0, |c| c.tools_updated_at),
        protocol_version: cat.map(|c| c.protocol_version.clone()).unwrap_or_default(),
        server_info_json: cat.map(|c| c.server_info.to_string()).unwrap_or_default(),
        name_collisions: snap.names.collisions_of(name),
        resource_count: res.map_or(0, |c| c.resources.len() as u32),
        resource_template_count: res.map_or(0, |c| c.resource_templates.len() as u32),
        prompt_count: res.map_or(0, |c| c.prompts.len() as u32),
        oauth: None,
        // Only this replica's `up` knows ([`AdminApi::full_status`]).
        launch_error: String::new(),
        unchanged: false,
    }
}

/// One tool of `server` as an administrator sees it; `tool` may be missing
/// from the catalogue (an override set before the server listed it).
pub fn server_tool(snap: &Snapshot, server: &str, tool: &str) -> pb::ServerTool {
    let def = snap
        .catalogues
        .get(server)
        .and_then(|c| c.tools.iter().find(|t| t["name"] == tool));
    let fallback = serde_json::json!({"name": tool});
    let in_catalogue = def.is_some();
    let gateway = crate::resources::gateway::tool(tool).map(|g| g.definition());
    let def = def.or(gateway).unwrap_or(&fallback);
    let view = crate::tools::tool_view(snap, server, def, crate::model::PermissionMode::Auto);
    pb::ServerTool {
        name: match gateway {
            Some(_) => tool.to_owned(),
            None => snap.engine_name(server, tool),
        },
        upstream_name: tool.to_owned(),
        title: crate::tools::title_of(def).to_owned(),
        hints: Some(view.hints.to_pb()),
        hint_sources: Some(view.hints.sources_pb()),
        policy: view.policy.as_str().into(),
        policy_set: snap.policy_set(server, tool).is_some(),
        in_catalogue,
        background: if snap.background_always(server, tool) {
            "always".into()
        } else {
            "auto".into()
        },
        description: crate::tools::schema_summary::describe(
            def.get("description").and_then(Value::as_str).unwrap_or(""),
            def.get("outputSchema"),
        ),
        annotations_json: def
            .get("annotations")
            .map(Value::to_string)
            .unwrap_or_default(),
        output_schema_summary: def
            .get("outputSchema")
            .map(crate::tools::schema_summary::summarize)
            .unwrap_or_default(),
    }
}

impl AdminApi {
    /// [`status_of`] with the OAuth status of an oauth server (read from
    /// the store).
    async fn full_status(&self, snap: &Snapshot, rec: &ServerRecord) -> pb::ServerStatus {
        let mut st = status_of(snap, rec);
        st.launch_error = self.cp.launches.get(&rec.spec.name).unwrap_or_default();
        if rec.spec.auth_kind() == AuthKind::OAuth {
            let url = self.cp.oauth.server_url(&rec.spec);
            let mut oauth = self
                .cp
                .oauth
                .status_pb(&rec.spec.name, url.as_deref().unwrap_or_default())
                .await;
            if let Err(problem) = url {
                oauth.reason = problem;
            }
            st.oauth = Some(oauth);
        }
        st
    }

    /// NOT_FOUND unless `server` is configured and (when its catalogue is
    /// known) has `tool`. The gateway tools of stage E (`mcp_resources`,
    /// `mcp_resource_read`) take settings per server too.
    fn check_tool(&self, server: &str, tool: &str) -> Result<(), Status> {
        let snap = self.cp.state.snapshot();
        if !snap.servers.contains_key(server) {
            return Err(Status::not_found(format!(
                "server {server:?} is not configured"
            )));
        }
        if crate::resources::gateway::tool(tool).is_some() {
            return Ok(());
        }
        if let Some(cat) = snap.catalogues.get(server)
            && !cat.tools.iter().any(|t| t["name"] == tool)
        {
            return Err(Status::not_found(format!(
                "tool not found: server {server} has no tool {tool:?}"
            )));
        }
        Ok(())
    }

    async fn tool_after(
        &self,
        server: &str,
        tool: &str,
        rev: crate::store::Revision,
    ) -> Response<pb::ServerTool> {
        self.cp.state.wait_for(rev, Duration::from_secs(2)).await;
        Response::new(server_tool(&self.cp.state.snapshot(), server, tool))
    }
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn list_background_calls(
        &self,
        req: Request<pb::ListBackgroundCallsRequest>,
    ) -> Result<Response<pb::ListBackgroundCallsResponse>, Status> {
        let r = req.into_inner();
        let filter = crate::background::Filter::of(&r)?;
        let calls = self
            .cp
            .background
            .list(&r.session_id, r.include_finished)
            .await?
            .into_iter()
            .filter(|c| filter.matches(c))
            .collect();
        let (page, next_page_token) =
            crate::background::page_of(calls, r.page_size, &r.page_token)?;
        Ok(Response::new(pb::ListBackgroundCallsResponse {
            calls: page.iter().map(|c| c.to_pb()).collect(),
            next_page_token,
        }))
    }

    async fn set_tool_hints(
        &self,
        req: Request<pb::SetToolHintsRequest>,
    ) -> Result<Response<pb::ServerTool>, Status> {
        let r = req.into_inner();
        let set = HintOverrideRecord {
            read_only_hint: r.read_only_hint,
            destructive_hint: r.destructive_hint,
            idempotent_hint: r.idempotent_hint,
            updated_at_ms: 0,
        };
        if set.is_empty() {
            return Err(Status::invalid_argument(
                "set at least one of read_only_hint, destructive_hint, idempotent_hint",
            ));
        }
        self.check_tool(&r.server, &r.tool)?;
        let (_, rev) = self
            .cp
            .registry
            .set_tool_hints(&r.server, &r.tool, &set)
            .await
            .map_err(registry_status)?;
        Ok(self.tool_after(&r.server, &r.tool, rev).await)
    }

    async fn clear_tool_hints(
        &self,
        req: Request<pb::ClearToolHintsRequest>,
    ) -> Result<Response<pb::ServerTool>, Status> {
        let r = req.into_inner();
        let mut which = [r.hints.is_empty(); 3];
        for h in &r.hints {
            let i = match h.as_str() {
                "read_only_hint" => 0,
                "destructive_hint" => 1,
                "idempotent_hint" => 2,
                other => {
                    return Err(Status::invalid_argument(format!(
                        "hints: {other:?} is not one of read_only_hint, destructive_hint, idempotent_hint"
                    )));
                }
            };
            which[i] = true;
        }
        let rev = if r.hints.is_empty() {
            self.cp
                .registry
                .clear_tool_setting(&r.server, &r.tool, &hints_key(&r.server, &r.tool))
                .await
        } else {
            self.cp
                .registry
                .clear_tool_hints(&r.server, &r.tool, which)
                .await
        }
        .map_err(registry_status)?;
        Ok(self.tool_after(&r.server, &r.tool, rev).await)
    }

    async fn set_tool_policy(
        &self,
        req: Request<pb::SetToolPolicyRequest>,
    ) -> Result<Response<pb::ServerTool>, Status> {
        let r = req.into_inner();
        let policy = if r.policy.is_empty() && !r.background.is_empty() {
            None
        } else {
            Some(ToolPolicy::parse(&r.policy).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "policy: {:?} is not one of default, confirm, disabled",
                    r.policy
                ))
            })?)
        };
        let background = if r.background.is_empty() {
            None
        } else {
            Some(BackgroundMode::parse(&r.background).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "background: {:?} is not one of always, auto",
                    r.background
                ))
            })?)
        };
        self.check_tool(&r.server, &r.tool)?;
        let rev = self
            .cp
            .registry
            .set_tool_policy(&r.server, &r.tool, policy, background)
            .await
            .map_err(registry_status)?;
        Ok(self.tool_after(&r.server, &r.tool, rev).await)
    }

    async fn clear_tool_policy(
        &self,
        req: Request<pb::ClearToolPolicyRequest>,
    ) -> Result<Response<pb::ServerTool>, Status> {
        let r = req.into_inner();
        let rev = self
            .cp
            .registry
            .clear_tool_setting(&r.server, &r.tool, &policy_key(&r.server, &r.tool))
            .await
            .map_err(registry_status)?;
        Ok(self.tool_after(&r.server, &r.tool, rev).await)
    }

    async fn list_server_tools(
        &self,
        req: Request<pb::ListServerToolsRequest>,
    ) -> Result<Response<pb::ListServerToolsResponse>, Status> {
        let server = req.into_inner().server;
        let snap = self.cp.state.snapshot();
        if !snap.servers.contains_key(&server) {
            return Err(Status::not_found(format!(
                "server {server:?} is not configured"
            )));
        }
        let mut names: Vec<String> = snap
            .catalogues
            .get(&server)
            .map(|c| {
                c.tools
                    .iter()
                    .filter_map(|t| t.get("name").and_then(serde_json::Value::as_str))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        // Settings of tools the catalogue does not (or no longer) list.
        for (s, t) in snap.hint_overrides.keys().chain(snap.policies.keys()) {
            if *s == server && !names.contains(t) {
                names.push(t.clone());
            }
        }
        let mut tools: Vec<_> = names
            .iter()
            .map(|t| server_tool(&snap, &server, t))
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Response::new(pb::ListServerToolsResponse { tools }))
    }

    async fn list_servers(
        &self,
        _: Request<pb::ListServersRequest>,
    ) -> Result<Response<pb::ListServersResponse>, Status> {
        let snap = self.cp.state.snapshot();
        let mut servers = Vec::with_capacity(snap.servers.len());
        for r in snap.servers.values() {
            servers.push(self.full_status(&snap, r).await);
        }
        Ok(Response::new(pb::ListServersResponse { servers }))
    }

    async fn add_server(
        &self,
        req: Request<pb::AddServerRequest>,
    ) -> Result<Response<pb::ServerStatus>, Status> {
        let mut spec = spec_from_pb(req.into_inner().spec)?;
        no_redacted_values(&spec)?;
        if spec.auth_kind() == AuthKind::OAuth {
            self.cp.oauth.ring()?;
        }
        // A new server starts with nothing of an earlier one of its name.
        if !self.cp.state.snapshot().servers.contains_key(&spec.name) {
            self.cp.oauth.purge(&spec.name).await;
        }
        self.cp.oauth.seal_client_secret(&mut spec).await?;
        let rev = self
            .cp
            .registry
            .add_server(spec.clone(), Origin::Admin)
            .await
            .map_err(registry_status)?;
        self.cp.state.wait_for(rev, Duration::from_secs(2)).await;
        let rec = ServerRecord {
            spec,
            origin: Origin::Admin,
        };
        Ok(Response::new(
            self.full_status(&self.cp.state.snapshot(), &rec).await,
        ))
    }

    async fn update_server(
        &self,
        req: Request<pb::UpdateServerRequest>,
    ) -> Result<Response<pb::ServerStatus>, Status> {
        let given = req.into_inner().spec;
        // Limits a client left unset (one written before they existed)
        // keep their stored values.
        let (keep_max, keep_liveness, keep_timeout) =
            given.as_ref().map_or((false, false, false), |g| {
                (
                    g.max_message_bytes.is_none(),
                    g.liveness_interval_sec.is_none(),
                    g.request_timeout_ms == 0,
                )
            });
        let mut spec = spec_from_pb(given)?;
        if spec.auth_kind() == AuthKind::OAuth {
            self.cp.oauth.ring()?;
        }
        // Another URL, auth or client: the grant was for the old one.
        let old = self
            .cp
            .state
            .snapshot()
            .servers
            .get(&spec.name)
            .map(|r| r.spec.clone());
        // A secret shown as `[redacted]` and sent back unchanged (a form
        // that edits the answer) keeps its stored value.
        if let Some(o) = &old {
            // Judged on the URL as sent: its `[redacted]` parts are
            // restored below only on the same origin anyway.
            let ring = self.cp.oauth.key_ring().map(|r| &**r);
            keep_redacted_args(ring, &mut spec, o)?;
            let same_target = same_target(ring, &spec, o);
            keep_redacted("headers", &mut spec.headers, &o.headers, same_target)?;
            keep_redacted("env", &mut spec.env, &o.env, same_target)?;
            // The URL as answers show it (its secrets redacted), edited
            // or not, keeps the stored secrets, on the same host only.
            if let (Some(sent), Some(stored)) = (&spec.url, &o.url) {
                let restored = switchyard_common::server_spec::restore_url_secrets(sent, stored)
                    .map_err(|e| Status::invalid_argument(format!("spec.url: {e}")))?;
                spec.url = Some(restored);
            }
            if keep_max {
                spec.max_message_bytes = o.max_message_bytes;
            }
            if keep_liveness {
                spec.liveness_interval_sec = o.liveness_interval_sec;
            }
            if keep_timeout {
                spec.request_timeout_sec = o.request_timeout_sec;
            }
            // The pre-registered client's secret, sealed in the store when
            // it was given, is never answered, so an update that does not
            // give it again (a form that edits the answer) keeps it, for the
            // same client and the same server origin.
            if let (Some(new), Some(stored)) = (spec.oauth.as_mut(), o.oauth.as_ref())
                && new.client_secret.is_none()
                && new.client_secret_file.is_none()
                && stored.client_secret_sealed
                && new.client_id == stored.client_id
                && same_target
            {
                new.client_secret_sealed = true;
            }
        }
        // Compared opened: the same secrets given again are no change
        // (`up` starts no sidecar for it; the CLI need not wait for one).
        let unchanged = old.as_ref().is_some_and(|o| {
            crate::oauth::server_secrets::same(self.cp.oauth.key_ring().map(|r| &**r), &spec, o)
        });
        // URLs compared opened: sealed again, a part is another text.
        let url = |s: &ServerConfig| self.cp.oauth.server_url(s).ok();
        if old.is_some_and(|o| {
            url(&o) != url(&spec)
                || o.auth_kind() != spec.auth_kind()
                || o.oauth.as_ref().and_then(|x| x.client_id.clone())
                    != spec.oauth.as_ref().and_then(|x| x.client_id.clone())
        }) {
            self.cp.oauth.purge(&spec.name).await;
        }
        self.cp.oauth.seal_client_secret(&mut spec).await?;
        let rev = self
            .cp
            .registry
            .update_server(spec.clone())
            .await
            .map_err(registry_status)?;
        self.cp.state.wait_for(rev, Duration::from_secs(2)).await;
        let snap = self.cp.state.snapshot();
        let rec = snap
            .servers
            .get(&spec.name)
            .cloned()
            .unwrap_or(ServerRecord {
                spec,
                origin: Origin::Admin,
            });
        let mut status = self.full_status(&snap, &rec).await;
        status.unchanged = unchanged;
        Ok(Response::new(status))
    }

    async fn remove_server(
        &self,
        req: Request<pb::RemoveServerRequest>,
    ) -> Result<Response<pb::RemoveServerResponse>, Status> {
        let name = req.into_inner().name;
        let rev = self
            .cp
            .registry
            .remove_server(&name)
            .await
            .map_err(registry_status)?;
        // Its grant goes with it (revoked at the authorization server).
        self.cp.oauth.purge(&name).await;
        self.cp.state.wait_for(rev, Duration::from_secs(2)).await;
        Ok(Response::new(pb::RemoveServerResponse {}))
    }

    async fn get_server_status(
        &self,
        req: Request<pb::GetServerStatusRequest>,
    ) -> Result<Response<pb::ServerStatus>, Status> {
        let name = req.into_inner().name;
        let snap = self.cp.state.snapshot();
        let rec = snap
            .servers
            .get(&name)
            .ok_or_else(|| Status::not_found(format!("server {name:?} is not configured")))?;
        Ok(Response::new(self.full_status(&snap, rec).await))
    }

    async fn authorize_server(
        &self,
        req: Request<pb::AuthorizeServerRequest>,
    ) -> Result<Response<pb::AuthorizeServerResponse>, Status> {
        let admin = caller_name(&req);
        let r = req.into_inner();
        let snap = self.cp.state.snapshot();
        let rec = snap
            .servers
            .get(&r.name)
            .ok_or_else(|| Status::not_found(format!("server {:?} is not configured", r.name)))?;
        for s in &r.scopes {
            if s.is_empty()
                || !s
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
            {
                return Err(Status::invalid_argument(format!(
                    "scopes: {s:?} is not a scope (visible ASCII, no spaces, quotes or backslashes)"
                )));
            }
        }
        let started = self.cp.oauth.start(&rec.spec, &r.scopes, &admin).await?;
        Ok(Response::new(pb::AuthorizeServerResponse {
            authorization_url: started.url,
            expires_at_ms: started.expires_at_ms,
            scopes: started.scopes,
            issuer: started.issuer,
            registration: started.registration.as_str().into(),
        }))
    }

    async fn forget_server_authorization(
        &self,
        req: Request<pb::ForgetServerAuthorizationRequest>,
    ) -> Result<Response<pb::ServerStatus>, Status> {
        let admin = caller_name(&req);
        let name = req.into_inner().name;
        let snap = self.cp.state.snapshot();
        let rec = snap
            .servers
            .get(&name)
            .ok_or_else(|| Status::not_found(format!("server {name:?} is not configured")))?;
        if rec.spec.auth_kind() != AuthKind::OAuth {
            return Err(crate::oauth::flow::OAuthError::NotOAuth(name).into());
        }
        self.cp.oauth.forget(&name, &admin).await?;
        Ok(Response::new(self.full_status(&snap, rec).await))
    }
}

/// The name of the authenticated caller of `req`, for the audit
/// (`anonymous` when authentication is off).
fn caller_name<T>(req: &Request<T>) -> String {
    req.extensions()
        .get::<crate::auth::Caller>()
        .map(|c| c.name.clone())
        .unwrap_or_else(|| "anonymous".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http_spec() -> pb::ServerSpec {
        pb::ServerSpec {
            name: "web".into(),
            transport: pb::Transport::Http as i32,
            url: "http://127.0.0.1:1/mcp".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_redacted_value_sent_back_keeps_the_stored_one() {
        let stored: std::collections::BTreeMap<String, String> =
            [("X-Api-Key".to_owned(), "s3cret".to_owned())].into();
        let mut sent: std::collections::BTreeMap<String, String> = [
            ("X-Api-Key".to_owned(), "[redacted]".to_owned()),
            ("X-Plain".to_owned(), "v".to_owned()),
        ]
        .into();
        let mut moved = sent.clone();
        keep_redacted("headers", &mut sent, &stored, true).unwrap();
        assert_eq!(sent["X-Api-Key"], "s3cret");
        assert_eq!(sent["X-Plain"], "v");
        // Pointed elsewhere: refused, not carried.
        let e = keep_redacted("headers", &mut moved, &stored, false).unwrap_err();
        assert!(e.message().contains("spec.headers.X-Api-Key"), "{e:?}");
        assert_eq!(moved["X-Api-Key"], "[redacted]");
        // Nothing stored under that name: refused, not stored literally.
        let mut new: std::collections::BTreeMap<String, String> =
            [("X-New".to_owned(), "[redacted]".to_owned())].into();
        let e = keep_redacted("headers", &mut new, &stored, true).unwrap_err();
        assert!(e.message().contains("does not have"), "{e:?}");
    }

    #[test]
    fn a_new_server_with_a_redacted_value_anywhere_is_refused() {
        let stdio = |f: &dyn Fn(&mut pb::ServerSpec)| {
            let mut s = pb::ServerSpec {
                name: "s".into(),
                transport: pb::Transport::Stdio as i32,
                command: "python3".into(),
                ..Default::default()
            };
            f(&mut s);
            no_redacted_values(&spec_from_pb(Some(s)).unwrap())
        };
        assert!(stdio(&|_| {}).is_ok());
        for (place, f) in [
            (
                "command",
                &(|s: &mut pb::ServerSpec| s.command = "[redacted]".into())
                    as &dyn Fn(&mut pb::ServerSpec),
            ),
            ("cwd", &|s: &mut pb::ServerSpec| {
                s.cwd = "/srv/[redacted]".into()
            }),
            ("args[1]", &|s: &mut pb::ServerSpec| {
                s.args = vec!["x".into(), "--key=[redacted]".into()]
            }),
            ("env.K", &|s: &mut pb::ServerSpec| {
                s.env.insert("K".into(), "[redacted]".into());
            }),
        ] {
            let e = stdio(f).unwrap_err();
            assert!(
                e.message()
                    .starts_with(&format!("spec.{place}: shows [redacted]")),
                "{place}: {e:?}"
            );
        }
        let mut h = http_spec();
        h.auth = "oauth".into();
        h.oauth = Some(pb::OAuthSettings {
            client_id: "c".into(),
            client_secret: "[redacted]".into(),
            ..Default::default()
        });
        let e = no_redacted_values(&spec_from_pb(Some(h)).unwrap()).unwrap_err();
        assert!(
            e.message()
                .starts_with("spec.oauth.client_secret: shows [redacted]"),
            "{e:?}"
        );
    }

    #[test]
    fn auth_and_header_files_round_trip_and_secrets_are_redacted() {
        let mut s = http_spec();
        s.header_files
            .insert("Authorization".into(), "/run/secrets/pat".into());
        s.headers.insert("X-Api-Key".into(), "hunter2".into());
        s.headers.insert("X-Team".into(), "blue".into());
        let config = spec_from_pb(Some(s)).unwrap();
        assert_eq!(config.auth, None);
        assert_eq!(config.auth_kind(), AuthKind::Headers);
        let shown = spec_to_pb(&config);
        assert_eq!(shown.auth, "headers");
        assert_eq!(shown.header_files["Authorization"], "/run/secrets/pat");
        assert_eq!(shown.headers["X-Api-Key"], "[redacted]");
        assert_eq!(shown.headers["X-Team"], "blue");
        assert_eq!(
            spec_to_pb(&spec_from_pb(Some(http_spec())).unwrap()).auth,
            "none"
        );
    }

    #[test]
    fn oauth_settings_round_trip_and_a_client_secret_is_never_answered() {
        let mut s = http_spec();
        s.auth = "oauth".into();
        s.oauth = Some(pb::OAuthSettings {
            client_id: "sy".into(),
            client_secret: "hunter2".into(),
            scopes: vec!["read".into(), "write".into()],
            allow_unadvertised_pkce: true,
            ..Default::default()
        });
        let config = spec_from_pb(Some(s.clone())).unwrap();
        assert_eq!(config.auth_kind(), AuthKind::OAuth);
        let o = config.oauth.clone().unwrap();
        assert_eq!(o.client_secret.as_deref(), Some("hunter2"));
        assert!(!format!("{config:?}").contains("hunter2"));
        let shown = spec_to_pb(&config);
        let so = shown.oauth.unwrap();
        assert_eq!(shown.auth, "oauth");
        assert_eq!(so.client_id, "sy");
        assert!(so.client_secret.is_empty());
        assert!(so.has_client_secret);
        assert_eq!(so.scopes, ["read", "write"]);
        assert!(so.allow_unadvertised_pkce);
        // A relative secret file, a secret without a client id, an
        // Authorization header, oauth settings without auth oauth.
        let mut rel = s.clone();
        rel.oauth.as_mut().unwrap().client_secret.clear();
        rel.oauth.as_mut().unwrap().client_secret_file = "/etc/shadow".into();
        let e = spec_from_pb(Some(rel)).unwrap_err();
        assert!(
            e.message().contains("spec.oauth.client_secret_file"),
            "{}",
            e.message()
        );
        let mut no_id = s.clone();
        no_id.oauth.as_mut().unwrap().client_id.clear();
        let e = spec_from_pb(Some(no_id)).unwrap_err();
        assert!(
            e.message().contains("spec.oauth.client_secret"),
            "{}",
            e.message()
        );
        let mut header = s.clone();
        header
            .headers
            .insert("authorization".into(), "Bearer x".into());
        let e = spec_from_pb(Some(header)).unwrap_err();
        assert!(e.message().contains("spec.auth"), "{}", e.message());
        let mut not_oauth = s;
        not_oauth.auth = "none".into();
        let e = spec_from_pb(Some(not_oauth)).unwrap_err();
        assert!(e.message().contains("spec.oauth"), "{}", e.message());
    }

    #[test]
    fn a_bad_auth_names_the_field() {
        for (auth, needle) in [("oauth2", "spec.auth"), ("headers", "spec.auth")] {
            let mut s = http_spec();
            s.auth = auth.into();
            let e = spec_from_pb(Some(s)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.message().contains(needle), "{auth}: {}", e.message());
        }
    }
}
