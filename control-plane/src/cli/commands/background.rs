//! `switchyard background list|cancel`: background calls (stage B).

use crate::background::BackgroundRecord;
use crate::cli::connect::Remote;
use crate::cli::render::tables::background_table;
use crate::cli::render::{out, print_json, print_lines};
use crate::cli::{BackgroundCommand, Failure};
use serde_json::json;
use switchyard_proto::v1 as pb;

/// Runs one `background` subcommand. `list` fetches every page before it
/// prints.
pub async fn background(remote: &Remote, cmd: BackgroundCommand) -> Result<(), Failure> {
    let mut client = remote.engine().await?;
    match cmd {
        BackgroundCommand::List {
            session,
            all,
            json,
            page_size,
        } => {
            let mut calls: Vec<BackgroundRecord> = Vec::new();
            let mut page_token = String::new();
            loop {
                let resp = client
                    .list_background_calls(pb::ListBackgroundCallsRequest {
                        session_id: session.clone().unwrap_or_default(),
                        include_finished: all,
                        page_size,
                        page_token,
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                calls.extend(resp.calls.into_iter().map(BackgroundRecord::from_pb));
                if resp.next_page_token.is_empty() {
                    break;
                }
                page_token = resp.next_page_token;
            }
            if json {
                print_json(
                    &json!({"calls": calls.iter().map(|c| c.to_json()).collect::<Vec<_>>()}),
                );
            } else if calls.is_empty() {
                eprintln!("(no {}background calls)", if all { "" } else { "running " });
            } else {
                print_lines(background_table(&calls, crate::model::now_ms()));
            }
        }
        BackgroundCommand::Cancel { id, session } => {
            let c = client
                .cancel_background_call(pb::CancelBackgroundCallRequest {
                    id,
                    session_id: session.unwrap_or_default(),
                })
                .await?
                .into_inner();
            out!("{}: {} ({} on {})", c.id, c.status, c.tool, c.server);
        }
    }
    Ok(())
}
