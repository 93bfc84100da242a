//! `switchyard sessions create|list|get|update|delete`: engine sessions and
//! their profiles (enabled servers, permission mode, roots).

use crate::cli::connect::Remote;
use crate::cli::render::json::session_json;
use crate::cli::render::tables::sessions_table;
use crate::cli::render::{out, print_json, print_list};
use crate::cli::{EXIT_USAGE, Failure, SessionsCommand};
use switchyard_proto::v1 as pb;

/// Runs one `sessions` subcommand. `create` prints the new id alone, for
/// `S=$(switchyard sessions create)`.
pub async fn sessions(remote: &Remote, cmd: SessionsCommand) -> Result<(), Failure> {
    let mut client = remote.engine().await?;
    match cmd {
        SessionsCommand::Create(a) => {
            let s = client
                .create_session(pb::CreateSessionRequest {
                    enabled_servers: a.servers,
                    permission_mode: mode(&a.mode)?,
                    roots: roots(a.roots),
                })
                .await?
                .into_inner();
            out!("{}", s.id);
        }
        SessionsCommand::List { json } => {
            let resp = client
                .list_sessions(pb::ListSessionsRequest {})
                .await?
                .into_inner();
            print_list(
                json,
                "sessions",
                &resp.sessions,
                session_json,
                sessions_table,
            );
        }
        SessionsCommand::Get { id } => {
            let s = client
                .get_session(pb::GetSessionRequest { session_id: id })
                .await?
                .into_inner();
            print_json(&session_json(&s));
        }
        SessionsCommand::Update { id, profile } => {
            let s = client
                .update_session(pb::UpdateSessionRequest {
                    session_id: id,
                    enabled_servers: profile.servers,
                    permission_mode: mode(&profile.mode)?,
                    roots: roots(profile.roots),
                })
                .await?
                .into_inner();
            print_json(&session_json(&s));
        }
        SessionsCommand::Delete { id } => {
            client
                .delete_session(pb::DeleteSessionRequest {
                    session_id: id.clone(),
                })
                .await?;
            out!("deleted {id}");
        }
    }
    Ok(())
}

/// `--mode`: `ask`, `auto` or `read_only`; anything else exits 64.
fn mode(m: &str) -> Result<i32, Failure> {
    Ok(match m {
        "ask" => pb::PermissionMode::Ask,
        "auto" => pb::PermissionMode::Auto,
        "read_only" => pb::PermissionMode::ReadOnly,
        other => {
            return Err(Failure::new(
                EXIT_USAGE,
                format!("--mode {other:?}: expected ask, auto or read_only"),
            ));
        }
    } as i32)
}

/// `--root` URIs as roots without names.
fn roots(uris: Vec<String>) -> Vec<pb::Root> {
    uris.into_iter()
        .map(|uri| pb::Root {
            uri,
            name: String::new(),
        })
        .collect()
}
