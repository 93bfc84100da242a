//! `switchyard servers list|add|remove|status|authorize|deauthorize|tools`:
//! the servers behind the gateway, through the admin API. `add` and
//! `authorize` wait (bounded) for the server to come up ([`wait_up`]) and
//! print the state it reached; `status` prints a card, or with `--json`
//! the JSON shape of `servers list --json` plus its tools.

use crate::cli::connect::Remote;
use crate::cli::render::cards::render_server;
use crate::cli::render::json::{server_tool_json, status_json};
use crate::cli::render::tables::{server_tools_table, servers_table};
use crate::cli::render::{out, print_json, print_lines, print_list};
use crate::cli::{EXIT_USAGE, Failure, ServerArgs, ServersCommand};
use std::collections::HashMap;
use std::time::Duration;
use switchyard_common::tls::AuthChannel;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::admin_service_client::AdminServiceClient;

/// An admin API client.
type Admin = AdminServiceClient<AuthChannel>;

/// Runs one `servers` subcommand.
pub async fn servers(remote: &Remote, cmd: ServersCommand) -> Result<(), Failure> {
    let mut client = remote.admin().await?;
    match cmd {
        ServersCommand::List { json } => {
            let resp = client
                .list_servers(pb::ListServersRequest {})
                .await?
                .into_inner();
            print_list(json, "servers", &resp.servers, status_json, servers_table);
        }
        ServersCommand::Add(a) => {
            let (no_wait, timeout) = (a.no_wait, a.timeout);
            let spec = spec(*a)?;
            let status = client
                .add_server(pb::AddServerRequest { spec: Some(spec) })
                .await?
                .into_inner();
            let spec = status.spec.clone().unwrap_or_default();
            // An oauth server cannot come up before it is authorized.
            let status = if no_wait || spec.auth == "oauth" {
                status
            } else {
                wait_up_status(&mut client, &spec.name, Duration::from_secs(timeout)).await?
            };
            let state = &status.state;
            out!("added {} ({state})", spec.name);
            if !no_wait && spec.auth != "oauth" && state != "up" {
                // Why, when its sidecar says.
                let why = status
                    .sidecars
                    .iter()
                    .map(|c| c.last_error.as_str())
                    .find(|e| !e.is_empty())
                    .map(|e| {
                        format!(
                            ": {}",
                            crate::cli::render::printable(&e.replace('\n', "\\n"))
                        )
                    })
                    .unwrap_or_default();
                eprintln!(
                    "({} is not up after {timeout} s{why}; see switchyard servers status {})",
                    spec.name, spec.name
                );
            }
            if spec.auth == "oauth" {
                out!(
                    "authorize it before use: switchyard servers authorize {}",
                    spec.name
                );
            }
        }
        ServersCommand::Remove { name } => {
            client
                .remove_server(pb::RemoveServerRequest { name: name.clone() })
                .await?;
            out!("removed {name}");
        }
        ServersCommand::Status { name, json } => {
            let s = client
                .get_server_status(pb::GetServerStatusRequest { name: name.clone() })
                .await?
                .into_inner();
            let tools = client
                .list_server_tools(pb::ListServerToolsRequest { server: name })
                .await?
                .into_inner();
            if json {
                let mut v = status_json(&s);
                v["tools"] = tools.tools.iter().map(server_tool_json).collect();
                print_json(&v);
            } else {
                print_lines(render_server(&s, &tools.tools));
            }
        }
        ServersCommand::Authorize {
            name,
            scopes,
            no_wait,
            timeout,
        } => authorize(&mut client, &name, scopes, no_wait, timeout).await?,
        ServersCommand::Deauthorize { name } => {
            let s = client
                .forget_server_authorization(pb::ForgetServerAuthorizationRequest {
                    name: name.clone(),
                })
                .await?
                .into_inner();
            out!("{name}: {}", s.oauth.map(|o| o.state).unwrap_or_default());
        }
        ServersCommand::Tools { name, json } => {
            let resp = client
                .list_server_tools(pb::ListServerToolsRequest { server: name })
                .await?
                .into_inner();
            print_list(
                json,
                "tools",
                &resp.tools,
                server_tool_json,
                server_tools_table,
            );
        }
    }
    Ok(())
}

/// `servers authorize`: starts the authorization, prints the URL, waits
/// (polling the server's status every second, a dot on stderr each
/// time) until the server is authorized anew or the authorization failed,
/// and prints the new status.
async fn authorize(
    client: &mut Admin,
    name: &str,
    scopes: Vec<String>,
    no_wait: bool,
    timeout: u64,
) -> Result<(), Failure> {
    let before = client
        .get_server_status(pb::GetServerStatusRequest { name: name.into() })
        .await?
        .into_inner()
        .oauth
        .unwrap_or_default();
    let started = client
        .authorize_server(pb::AuthorizeServerRequest {
            name: name.into(),
            scopes,
        })
        .await?
        .into_inner();
    out!("Open this URL in a browser to authorize {name}:");
    out!("{}", started.authorization_url);
    eprintln!(
        "(authorization server {}, client {}, scopes: {})",
        started.issuer,
        started.registration,
        if started.scopes.is_empty() {
            "none asked".to_owned()
        } else {
            started.scopes.join(" ")
        }
    );
    if no_wait {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(timeout);
    let expires = started.expires_at_ms;
    eprint!("waiting for the authorization");
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        eprint!(".");
        let s = client
            .get_server_status(pb::GetServerStatusRequest { name: name.into() })
            .await?
            .into_inner();
        let o = s.oauth.clone().unwrap_or_default();
        let done = o.state == "authorized" && o.authorized_at_ms > before.authorized_at_ms;
        let failed = o.reason != before.reason && o.reason.starts_with("authorization failed");
        let now_ms = switchyard_common::time::now_ms();
        if done || failed || std::time::Instant::now() >= deadline || now_ms > expires {
            eprintln!();
            out!(
                "{name}: {}{}{}",
                o.state,
                if o.scopes.is_empty() {
                    String::new()
                } else {
                    format!(" (scopes: {})", o.scopes.join(" "))
                },
                if o.reason.is_empty() || done {
                    String::new()
                } else {
                    format!(": {}", o.reason)
                }
            );
            if done {
                // The sidecars connect once they have the token: a moment.
                let state = wait_up(client, name, Duration::from_secs(5)).await?;
                out!("server {name} is {state}");
                return Ok(());
            }
            out!("server {name} is {}", s.state);
            return Err(Failure::new(
                1,
                match failed {
                    true => format!("authorization of {name} failed"),
                    false => format!("authorization of {name} did not finish in time"),
                },
            ));
        }
    }
}

/// Waits until server `name` is `up`, for at most `limit` (polling its
/// status every 250 ms), and returns the state it reached: `up`, or the
/// last one seen when the time is over.
async fn wait_up(client: &mut Admin, name: &str, limit: Duration) -> Result<String, Failure> {
    Ok(wait_up_status(client, name, limit).await?.state)
}

/// [`wait_up`]'s last status of the server.
async fn wait_up_status(
    client: &mut Admin,
    name: &str,
    limit: Duration,
) -> Result<pb::ServerStatus, Failure> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let status = client
            .get_server_status(pb::GetServerStatusRequest { name: name.into() })
            .await?
            .into_inner();
        if status.state == "up" || tokio::time::Instant::now() >= deadline {
            return Ok(status);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The server spec of `servers add`'s flags. Errors (exit 64): an unknown
/// `--transport`, an `--env` without `=`, a `--header` without `:`, a
/// `--header-file` without `=`, an unknown `--auth`.
fn spec(a: ServerArgs) -> Result<pb::ServerSpec, Failure> {
    let transport = match a.transport.as_str() {
        "stdio" => pb::Transport::Stdio,
        "http" => pb::Transport::Http,
        other => {
            return Err(Failure::new(
                EXIT_USAGE,
                format!("--transport {other:?}: expected stdio or http"),
            ));
        }
    };
    let mut env = HashMap::new();
    // A malformed value is not repeated: it may be a secret with its
    // separator missing. Its place among the flags is named instead.
    for (i, e) in a.env.iter().enumerate() {
        let (k, v) = e.split_once('=').ok_or_else(|| {
            Failure::new(
                EXIT_USAGE,
                format!("--env #{}: expected NAME=value (no '=' in it)", i + 1),
            )
        })?;
        env.insert(k.to_owned(), v.to_owned());
    }
    let mut headers = HashMap::new();
    for (i, h) in a.headers.iter().enumerate() {
        let (k, v) = h.split_once(':').ok_or_else(|| {
            Failure::new(
                EXIT_USAGE,
                format!("--header #{}: expected 'Name: value' (no ':' in it)", i + 1),
            )
        })?;
        headers.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    let mut header_files = HashMap::new();
    for h in &a.header_files {
        let (k, v) = h.split_once('=').ok_or_else(|| {
            Failure::new(
                EXIT_USAGE,
                format!("--header-file {h:?}: expected Name=PATH"),
            )
        })?;
        header_files.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    let any_oauth = a.oauth_client_id.is_some()
        || a.oauth_client_secret_file.is_some()
        || !a.oauth_scopes.is_empty()
        || a.oauth_client_metadata_url.is_some()
        || a.oauth_allow_unadvertised_pkce;
    if any_oauth && a.auth.as_deref() != Some("oauth") {
        return Err(Failure::new(
            EXIT_USAGE,
            "--oauth-* flags need --auth oauth".to_owned(),
        ));
    }
    // The secret file is read here, on the admin's machine, and sent to be
    // sealed in the store.
    let client_secret = match &a.oauth_client_secret_file {
        Some(f) => switchyard_common::server_spec::load_header_value(
            "--oauth-client-secret-file",
            std::path::Path::new(f),
        )
        .map_err(|e| Failure::new(EXIT_USAGE, e.to_string()))?,
        None => String::new(),
    };
    let oauth = any_oauth.then(|| pb::OAuthSettings {
        client_id: a.oauth_client_id.clone().unwrap_or_default(),
        client_secret,
        scopes: a.oauth_scopes.clone(),
        client_metadata_url: a.oauth_client_metadata_url.clone().unwrap_or_default(),
        allow_unadvertised_pkce: a.oauth_allow_unadvertised_pkce,
        ..Default::default()
    });
    Ok(pb::ServerSpec {
        name: a.name,
        transport: transport as i32,
        command: a.command.unwrap_or_default(),
        args: a.args,
        env,
        cwd: a.cwd.unwrap_or_default(),
        url: a.url.unwrap_or_default(),
        headers,
        era: a.era,
        request_timeout_ms: a.request_timeout_sec.map_or(0, |s| s.saturating_mul(1000)),
        max_message_bytes: a.max_message_bytes,
        liveness_interval_sec: a.liveness_interval_sec,
        auth: match a.auth.as_deref() {
            None => String::new(),
            Some(v @ ("none" | "headers" | "oauth")) => v.to_owned(),
            // Not repeated: it may be a secret typed in the wrong place.
            Some(_) => {
                return Err(Failure::new(
                    EXIT_USAGE,
                    "--auth: expected none, headers or oauth".to_owned(),
                ));
            }
        },
        header_files,
        oauth,
    })
}
