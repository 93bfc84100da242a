//! `switchyard hints set|clear` and `switchyard policy set|clear`: what an
//! administrator sets on one tool. Hints override `readOnlyHint`,
//! `destructiveHint` and `idempotentHint`; a policy is `default`, `confirm`
//! or `disabled`, and `--background` says when the tool's calls move to the
//! background (`always`, `auto`). Each prints the tool's line as `servers
//! tools` shows it.
//!
//! The tool is named by its name on the server or by its engine name (the
//! one `servers tools` and `tools` show, `everything__echo`): the latter
//! is mapped to the former through `ListServerTools`, saying so on stderr.
//! A name the server's tools have neither way is sent as given, and the
//! refusal says where to find the names.

use crate::cli::connect::Remote;
use crate::cli::render::out;
use crate::cli::render::tables::server_tools_table;
use crate::cli::{EXIT_USAGE, Failure, HintsCommand, PolicyCommand};
use crate::model::{BackgroundMode, ToolPolicy};
use switchyard_common::tls::AuthChannel;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::admin_service_client::AdminServiceClient;

/// The tool's name on `server` for `tool`, as the user gave it: itself
/// when the server has a tool of that name, the upstream name of the tool
/// whose engine name it is (said on stderr), else itself (`known` false).
async fn upstream_name(
    client: &mut AdminServiceClient<AuthChannel>,
    server: &str,
    tool: String,
) -> (String, bool) {
    let Ok(resp) = client
        .list_server_tools(pb::ListServerToolsRequest {
            server: server.to_owned(),
        })
        .await
    else {
        // The set itself says what is wrong (an unknown server...).
        return (tool, true);
    };
    let tools = resp.into_inner().tools;
    if tools.iter().any(|t| t.upstream_name == tool) {
        return (tool, true);
    }
    match tools.iter().find(|t| t.name == tool) {
        Some(t) => {
            eprintln!(
                "({tool} is the engine name of {server}'s tool {})",
                t.upstream_name
            );
            (t.upstream_name.clone(), true)
        }
        None => (tool, false),
    }
}

/// `failure` of a request for a tool the server's list has under neither
/// name: says where the names are.
fn unknown_tool(failure: Failure, server: &str, known: bool) -> Failure {
    if known {
        return failure;
    }
    Failure::new(
        failure.code,
        format!(
            "{}\n(`switchyard servers tools {server}` lists its tools; give the name on the server or the engine name)",
            failure.message
        ),
    )
}

/// A `hints` or a `policy` subcommand.
#[derive(Debug)]
pub enum ToolSetting {
    /// `switchyard hints ...`.
    Hints(HintsCommand),
    /// `switchyard policy ...`.
    Policy(PolicyCommand),
}

/// Writes the setting. A `hints set` without a hint, a `policy set` with
/// neither a policy nor `--background`, or a value that is not one of the
/// above exits 64.
pub async fn apply(remote: &Remote, setting: ToolSetting) -> Result<(), Failure> {
    let mut client = remote.admin().await?;
    let t = match setting {
        ToolSetting::Hints(HintsCommand::Set {
            server,
            tool,
            read_only,
            destructive,
            idempotent,
        }) => {
            if read_only.is_none() && destructive.is_none() && idempotent.is_none() {
                return Err(Failure::new(
                    EXIT_USAGE,
                    "hints set: give at least one of --read-only, --destructive, --idempotent",
                ));
            }
            let (tool, known) = upstream_name(&mut client, &server, tool).await;
            client
                .set_tool_hints(pb::SetToolHintsRequest {
                    server: server.clone(),
                    tool,
                    read_only_hint: read_only,
                    destructive_hint: destructive,
                    idempotent_hint: idempotent,
                })
                .await
                .map_err(|e| unknown_tool(e.into(), &server, known))?
        }
        ToolSetting::Hints(HintsCommand::Clear { server, tool }) => {
            let (tool, known) = upstream_name(&mut client, &server, tool).await;
            client
                .clear_tool_hints(pb::ClearToolHintsRequest {
                    server: server.clone(),
                    tool,
                    hints: Vec::new(),
                })
                .await
                .map_err(|e| unknown_tool(e.into(), &server, known))?
        }
        ToolSetting::Policy(PolicyCommand::Set {
            server,
            tool,
            policy,
            background,
        }) => {
            if policy.is_none() && background.is_none() {
                return Err(Failure::new(
                    EXIT_USAGE,
                    "policy set: give a policy (default, confirm, disabled), --background, or both",
                ));
            }
            if let Some(p) = &policy
                && ToolPolicy::parse(p).is_none()
            {
                return Err(Failure::new(
                    EXIT_USAGE,
                    format!("policy {p:?}: expected default, confirm or disabled"),
                ));
            }
            if let Some(b) = &background
                && BackgroundMode::parse(b).is_none()
            {
                return Err(Failure::new(
                    EXIT_USAGE,
                    format!("--background {b:?}: expected always or auto"),
                ));
            }
            let (tool, known) = upstream_name(&mut client, &server, tool).await;
            client
                .set_tool_policy(pb::SetToolPolicyRequest {
                    server: server.clone(),
                    tool,
                    policy: policy.unwrap_or_default(),
                    background: background.unwrap_or_default(),
                })
                .await
                .map_err(|e| unknown_tool(e.into(), &server, known))?
        }
        ToolSetting::Policy(PolicyCommand::Clear { server, tool }) => {
            let (tool, known) = upstream_name(&mut client, &server, tool).await;
            client
                .clear_tool_policy(pb::ClearToolPolicyRequest {
                    server: server.clone(),
                    tool,
                })
                .await
                .map_err(|e| unknown_tool(e.into(), &server, known))?
        }
    }
    .into_inner();
    // As `servers tools` prints it: a header, the row, the legend.
    for line in server_tools_table(std::slice::from_ref(&t)) {
        out!("{line}");
    }
    Ok(())
}
