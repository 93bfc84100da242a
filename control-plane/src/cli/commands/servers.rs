//! `switchyard servers list|add|remove|status|tools`: the servers behind
//! the gateway, through the admin API.

use crate::cli::connect::Remote;
use crate::cli::render::json::{server_tool_json, status_json};
use crate::cli::render::tables::{server_tools_table, servers_table};
use crate::cli::render::{out, print_json, print_list};
use crate::cli::{EXIT_USAGE, Failure, ServerArgs, ServersCommand};
use std::collections::HashMap;
use switchyard_proto::v1 as pb;

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
            let spec = spec(*a)?;
            let status = client
                .add_server(pb::AddServerRequest { spec: Some(spec) })
                .await?
                .into_inner();
            out!(
                "added {} ({})",
                status.spec.map(|s| s.name).unwrap_or_default(),
                status.state
            );
        }
        ServersCommand::Remove { name } => {
            client
                .remove_server(pb::RemoveServerRequest { name: name.clone() })
                .await?;
            out!("removed {name}");
        }
        ServersCommand::Status { name } => {
            let s = client
                .get_server_status(pb::GetServerStatusRequest { name: name.clone() })
                .await?
                .into_inner();
            let tools = client
                .list_server_tools(pb::ListServerToolsRequest { server: name })
                .await?
                .into_inner();
            let mut v = status_json(&s);
            v["tools"] = tools.tools.iter().map(server_tool_json).collect();
            print_json(&v);
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
    for e in &a.env {
        let (k, v) = e
            .split_once('=')
            .ok_or_else(|| Failure::new(EXIT_USAGE, format!("--env {e:?}: expected NAME=value")))?;
        env.insert(k.to_owned(), v.to_owned());
    }
    let mut headers = HashMap::new();
    for h in &a.headers {
        let (k, v) = h.split_once(':').ok_or_else(|| {
            Failure::new(
                EXIT_USAGE,
                format!("--header {h:?}: expected 'Name: value'"),
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
        request_timeout_ms: 0,
        auth: match a.auth.as_deref() {
            None => String::new(),
            Some(v @ ("none" | "headers")) => v.to_owned(),
            Some(other) => {
                return Err(Failure::new(
                    EXIT_USAGE,
                    format!("--auth {other:?}: expected none or headers"),
                ));
            }
        },
        header_files,
    })
}
