//! `switchyard hints set|clear` and `switchyard policy set|clear`: what an
//! administrator sets on one tool. Hints override `readOnlyHint`,
//! `destructiveHint` and `idempotentHint`; a policy is `default`, `confirm`
//! or `disabled`, and `--background` says when the tool's calls move to the
//! background (`always`, `auto`). Each prints the tool's line as `servers
//! tools` shows it.

use crate::cli::connect::Remote;
use crate::cli::render::out;
use crate::cli::render::tables::server_tool_line;
use crate::cli::{EXIT_USAGE, Failure, HintsCommand, PolicyCommand};
use crate::model::{BackgroundMode, ToolPolicy};
use switchyard_proto::v1 as pb;

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
            client
                .set_tool_hints(pb::SetToolHintsRequest {
                    server,
                    tool,
                    read_only_hint: read_only,
                    destructive_hint: destructive,
                    idempotent_hint: idempotent,
                })
                .await?
        }
        ToolSetting::Hints(HintsCommand::Clear { server, tool }) => {
            client
                .clear_tool_hints(pb::ClearToolHintsRequest { server, tool })
                .await?
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
            client
                .set_tool_policy(pb::SetToolPolicyRequest {
                    server,
                    tool,
                    policy: policy.unwrap_or_default(),
                    background: background.unwrap_or_default(),
                })
                .await?
        }
        ToolSetting::Policy(PolicyCommand::Clear { server, tool }) => {
            client
                .clear_tool_policy(pb::ClearToolPolicyRequest { server, tool })
                .await?
        }
    }
    .into_inner();
    out!("{}", server_tool_line(&t));
    Ok(())
}
