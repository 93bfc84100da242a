//! `switchyard interactions` and `switchyard answer`: a session's
//! interactions (forms, URLs, approvals), listed as cards, and the one
//! answer to one of them.

use crate::cli::connect::Remote;
use crate::cli::render::cards::render_interaction;
use crate::cli::render::{out, print_json, print_lines};
use crate::cli::{AnswerChoice, EXIT_USAGE, Failure};
use crate::interactions;
use serde_json::{Value, json};
use switchyard_proto::v1 as pb;

/// Lists a session's open interactions (`all`: and the kept resolved
/// ones), each card followed by an empty line; an open one shows the
/// `switchyard answer` flags that fit it.
pub async fn list(remote: &Remote, session: String, all: bool, json: bool) -> Result<(), Failure> {
    let resp = remote
        .engine()
        .await?
        .list_interactions(pb::ListInteractionsRequest {
            session_id: session,
            include_resolved: all,
        })
        .await?
        .into_inner();
    if json {
        let list: Vec<Value> = resp
            .interactions
            .iter()
            .map(interactions::pb_to_json)
            .collect();
        print_json(&json!({"interactions": list}));
    } else {
        if resp.interactions.is_empty() {
            eprintln!("(no interactions)");
        }
        for i in &resp.interactions {
            print_lines(render_interaction(i, i.status == "open"));
            out!("");
        }
    }
    Ok(())
}

/// Answers an interaction and prints `ID: OUTCOME (STATUS)`. `--accept`
/// content that is not JSON exits 64 before connecting; a refused answer
/// exits 1 with the control plane's reason.
pub async fn answer(
    remote: &Remote,
    session: String,
    interaction: String,
    choice: AnswerChoice,
) -> Result<(), Failure> {
    let (action, content_json) = match choice {
        AnswerChoice {
            accept: Some(content),
            ..
        } => {
            serde_json::from_str::<Value>(&content).map_err(|e| {
                Failure::new(EXIT_USAGE, format!("--accept is not valid JSON: {e}"))
            })?;
            ("accept", content)
        }
        AnswerChoice { decline: true, .. } => ("decline", String::new()),
        AnswerChoice { cancel: true, .. } => ("cancel", String::new()),
        AnswerChoice { approve: true, .. } => ("approve", String::new()),
        AnswerChoice { deny: true, .. } => ("deny", String::new()),
        _ => return Err(Failure::new(EXIT_USAGE, "give one answer")),
    };
    let request = pb::AnswerInteractionRequest {
        session_id: session,
        interaction_id: interaction,
        action: action.into(),
        content_json,
    };
    let i = remote
        .engine()
        .await?
        .answer_interaction(request)
        .await?
        .into_inner();
    out!("{}: {} ({})", i.id, i.outcome, i.status);
    Ok(())
}
