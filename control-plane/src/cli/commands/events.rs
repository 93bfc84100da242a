//! `switchyard events`: follow a session's events until the session is
//! deleted (or Ctrl-C). Interactions and background calls are shown as
//! cards, other events as their JSON data; `--json` prints one object per
//! line.

use crate::background::BackgroundRecord;
use crate::cli::Failure;
use crate::cli::connect::Remote;
use crate::cli::render::cards::{render_background, render_interaction};
use crate::cli::render::json::event_json;
use crate::cli::render::{out, parse_json_text};
use crate::interactions;
use switchyard_proto::v1 as pb;

/// Subscribes and prints each event as it comes.
pub async fn events(remote: &Remote, session: String, json: bool) -> Result<(), Failure> {
    let mut stream = remote
        .engine()
        .await?
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: session,
            background_after_ms: 0,
        })
        .await?
        .into_inner();
    while let Some(ev) = stream.message().await? {
        if json {
            out!("{}", event_json(&ev));
        } else if ev.r#type.starts_with("background_call.") {
            let rec: BackgroundRecord =
                serde_json::from_value(parse_json_text(&ev.data_json)).unwrap_or_default();
            card(&ev, render_background(&rec));
        } else if ev.r#type.starts_with("interaction.") {
            let i = interactions::pb_from_json(&parse_json_text(&ev.data_json));
            card(
                &ev,
                render_interaction(&i, ev.r#type == "interaction.required"),
            );
        } else {
            out!("{} {} {}", ev.at_ms, ev.r#type, ev.data_json);
        }
    }
    eprintln!("(the event stream ended: the session was deleted)");
    Ok(())
}

/// An event's time and type, then its card, indented.
fn card(ev: &pb::SessionEvent, lines: Vec<String>) {
    out!("{} {}", ev.at_ms, ev.r#type);
    for line in lines {
        out!("  {line}");
    }
}
