//! `switchyard call`: call a tool by its engine-visible name. The exit
//! status is 1 when the tool's result has `isError`.
//!
//! A call in a session follows the session's events while it runs
//! ([`watch`]): when it waits for an approval or another interaction
//! (a form, a URL), stderr says so, with the interaction's id and the
//! `switchyard answer` command that answers it, and says how it was
//! resolved. The call carries a run id of its own (`cli-<id>`) so that
//! only its own interactions are shown. stdout is the result only.

use crate::cli::connect::Remote;
use crate::cli::render::json::moved_json;
use crate::cli::render::{out, parse_json_text, print_json, printable};
use crate::cli::{EXIT_USAGE, Failure};
use crate::interactions;
use serde_json::Value;
use switchyard_proto::v1 as pb;

/// How `switchyard call` calls.
#[derive(Debug, Default)]
pub struct Options {
    /// The session to call in.
    pub session: Option<String>,
    /// Print the raw `CallToolResult` (or the moved call's record) as JSON.
    pub json: bool,
    /// Timeout in milliseconds (0: the server's default).
    pub timeout_ms: u64,
    /// Move the call to the background at once
    /// (`CallToolRequest.background`).
    pub background: bool,
}

/// Calls `tool` with `args` (a JSON object, checked before connecting),
/// then prints the text the model reads and the structured content, or
/// with `json` the raw `CallToolResult` (or the record of a call that
/// moved to the background). A call that moved to the background prints
/// its id on stdout and, on stderr, how to follow it.
pub async fn call(
    remote: &Remote,
    tool: String,
    args: String,
    options: Options,
) -> Result<(), Failure> {
    let Options {
        session,
        json,
        timeout_ms,
        background,
    } = options;
    let parsed: Value = serde_json::from_str(&args)
        .map_err(|e| Failure::new(EXIT_USAGE, format!("--args is not valid JSON: {e}")))?;
    if !parsed.is_object() {
        return Err(Failure::new(EXIT_USAGE, "--args must be a JSON object"));
    }
    let run_id = format!("cli-{}", switchyard_common::ids::new_id());
    // Subscribed before the call is sent, so no interaction of it is
    // missed; stopped when the call returns.
    let watcher = match &session {
        Some(s) => watch(remote, s, &run_id).await,
        None => None,
    };
    let resp = remote
        .engine()
        .await?
        .call_tool(pb::CallToolRequest {
            session_id: session.unwrap_or_default(),
            run_id,
            tool: tool.clone(),
            arguments_json: args,
            timeout_ms,
            background,
            ..Default::default()
        })
        .await;
    if let Some(w) = watcher {
        w.abort();
    }
    let resp = resp?.into_inner();
    if let (true, Some(bg)) = (json, &resp.background) {
        print_json(&moved_json(bg, &resp.text));
    } else if let Some(bg) = &resp.background {
        // The text the model reads is for a model: a person (or a script)
        // gets the id, and how to follow the call.
        out!("{}", bg.id);
        let events = match bg.session_id.as_str() {
            "" => String::new(),
            s => format!(
                "; its result is the event background_call.completed of `switchyard events --session {s}`"
            ),
        };
        eprintln!(
            "{}",
            printable(&format!(
                "moved to the background: {tool} runs as background call {} (mode {}); `switchyard background list --all` shows it{events}",
                bg.id, bg.mode
            ))
        );
    } else if json {
        print_json(&parse_json_text(&resp.result_json));
    } else {
        if !resp.text.is_empty() {
            out!("{}", resp.text);
        }
        if !resp.structured_content_json.is_empty() {
            out!("structuredContent: {}", resp.structured_content_json);
        }
    }
    if resp.is_error {
        return Err(Failure::new(1, format!("tool {tool} returned isError")));
    }
    Ok(())
}

/// Follows `session`'s events in a task of its own and says on stderr when
/// the call of run `run_id` waits for an interaction and how it was
/// resolved. `None` when the events cannot be followed (the call goes on
/// without).
async fn watch(
    remote: &Remote,
    session: &str,
    run_id: &str,
) -> Option<tokio::task::JoinHandle<()>> {
    let mut stream = remote
        .engine()
        .await
        .ok()?
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: session.to_owned(),
            // Background results are not this command's: none replayed.
            background_after_ms: i64::MAX,
        })
        .await
        .ok()?
        .into_inner();
    let run_id = run_id.to_owned();
    Some(tokio::spawn(async move {
        while let Ok(Some(ev)) = stream.message().await {
            if !ev.r#type.starts_with("interaction.") {
                continue;
            }
            let i = interactions::pb_from_json(&parse_json_text(&ev.data_json));
            if i.run_id != run_id {
                continue;
            }
            for line in waiting_lines(&i, ev.r#type == "interaction.required") {
                eprintln!("{}", printable(&line));
            }
        }
    }))
}

/// What stderr says about an interaction of the call: while it is
/// `open`, what the call waits for and the command that answers it; once
/// resolved, the outcome.
fn waiting_lines(i: &pb::Interaction, open: bool) -> Vec<String> {
    if !open {
        return vec![format!(
            "(interaction {} resolved: {})",
            i.id,
            if i.outcome.is_empty() {
                &i.status
            } else {
                &i.outcome
            }
        )];
    }
    let answer = format!("switchyard answer --session {} {}", i.session_id, i.id);
    match i.kind.as_str() {
        "approval" => vec![
            format!(
                "(waiting for an approval: interaction {} asks to approve the call to {} on {})",
                i.id, i.tool, i.server
            ),
            format!("(answer it: {answer} --approve | --deny)"),
        ],
        kind => vec![
            format!(
                "(waiting for an interaction: {kind} {} from {}: {})",
                i.id, i.server, i.message
            ),
            format!(
                "(see it: switchyard interactions --session {}; answer it: {answer} {})",
                i.session_id,
                match kind {
                    "url" => "--accept '{}' | --decline | --cancel",
                    _ => "--accept JSON | --decline | --cancel",
                }
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_lines_name_the_interaction_and_the_answer() {
        let approval = pb::Interaction {
            id: "i1".into(),
            session_id: "s1".into(),
            kind: "approval".into(),
            server: "orders".into(),
            tool: "create_order".into(),
            status: "open".into(),
            ..Default::default()
        };
        let text = waiting_lines(&approval, true).join("\n");
        assert!(
            text.contains("waiting for an approval: interaction i1 asks to approve the call to create_order on orders"),
            "{text}"
        );
        assert!(
            text.contains("switchyard answer --session s1 i1 --approve | --deny"),
            "{text}"
        );
        let form = pb::Interaction {
            kind: "form".into(),
            message: "Name?".into(),
            ..approval.clone()
        };
        let text = waiting_lines(&form, true).join("\n");
        assert!(text.contains("form i1 from orders: Name?"), "{text}");
        assert!(text.contains("--accept JSON"), "{text}");
        let done = pb::Interaction {
            status: "resolved".into(),
            outcome: "approve".into(),
            ..approval
        };
        assert_eq!(
            waiting_lines(&done, false),
            vec!["(interaction i1 resolved: approve)".to_owned()]
        );
    }
}
