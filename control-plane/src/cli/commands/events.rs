//! `switchyard events`: follow a session's events until the session is
//! deleted (or Ctrl-C). Interactions and background calls are shown as
//! cards, other events as their JSON data, each after its time in UTC;
//! `--json` prints one object per line (`atMs` as sent).
//!
//! stderr (never stdout, which scripts read) says when it is subscribed.
//! When its replica stops (the stream fails with UNAVAILABLE, or the
//! connection breaks) it subscribes again with backoff, from the last
//! background result it printed (`background_after_ms`), and says so on
//! stderr. Nothing is lost or printed twice: a background call is printed
//! once per id, an open interaction (which every subscription announces
//! again) once until it is resolved.

use crate::background::BackgroundRecord;
use crate::cli::connect::Remote;
use crate::cli::render::cards::{render_background, render_interaction, utc};
use crate::cli::render::json::event_json;
use crate::cli::render::{out, parse_json_text, print_lines};
use crate::cli::{EXIT_UNAVAILABLE, Failure};
use crate::interactions;
use std::collections::HashSet;
use std::time::Duration;
use switchyard_proto::v1 as pb;

/// The first wait before subscribing again; doubled up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between two attempts to subscribe again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// What has been printed, so a new subscription's replay is not printed
/// twice.
#[derive(Debug, Default)]
struct Seen {
    /// Background calls whose event was printed.
    background: HashSet<String>,
    /// The latest `finishedAtMs` among them (0: none).
    finished_ms: i64,
    /// Interactions announced (`interaction.required`) and not resolved.
    open: HashSet<String>,
}

impl Seen {
    /// Whether `ev` is new (and records it).
    fn first(&mut self, ev: &pb::SessionEvent) -> bool {
        if ev.r#type.starts_with("background_call.") {
            let rec: BackgroundRecord =
                serde_json::from_value(parse_json_text(&ev.data_json)).unwrap_or_default();
            self.finished_ms = self.finished_ms.max(rec.finished_at_ms);
            return rec.id.is_empty() || self.background.insert(rec.id);
        }
        let id = || {
            parse_json_text(&ev.data_json)["id"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        };
        match ev.r#type.as_str() {
            "interaction.required" => self.open.insert(id()),
            "interaction.resolved" => {
                self.open.remove(&id());
                true
            }
            _ => true,
        }
    }

    /// `background_after_ms` for a new subscription: just before the
    /// latest result printed (one finished in the same millisecond is
    /// replayed and dropped by id), or 0 (every kept one) before any.
    fn background_after_ms(&self) -> i64 {
        (self.finished_ms - 1).max(0)
    }
}

/// Subscribes and prints each event as it comes, subscribing again when
/// the replica goes away. Ends when the session is deleted (0), or with
/// the control plane's refusal (a session that does not exist: 1).
pub async fn events(remote: &Remote, session: String, json: bool) -> Result<(), Failure> {
    let mut seen = Seen::default();
    let mut stream = subscribe(remote, &session, 0).await?;
    eprintln!("(subscribed to the events of session {session}; Ctrl-C to stop)");
    loop {
        let broke = loop {
            match stream.message().await {
                Ok(Some(ev)) => {
                    if seen.first(&ev) {
                        print_event(&ev, json);
                    }
                }
                Ok(None) => {
                    eprintln!("(the event stream ended: the session was deleted)");
                    return Ok(());
                }
                Err(status) if gone(&status) => break status,
                Err(status) => return Err(status.into()),
            }
        };
        eprintln!(
            "(the event stream broke: {}; subscribing again)",
            broke.message()
        );
        // Subscribing again is safe: a subscription only reads, and what
        // it replays (open interactions, background results since
        // `background_after_ms`) is dropped here when already printed.
        let mut backoff = FIRST_BACKOFF;
        stream = loop {
            tokio::time::sleep(backoff).await;
            match subscribe(remote, &session, seen.background_after_ms()).await {
                Ok(s) => break s,
                Err(f) if f.code == EXIT_UNAVAILABLE => {}
                Err(f) if f.message.starts_with("unavailable") => {}
                Err(f) => return Err(f),
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        };
        eprintln!("(subscribed again to the events of session {session})");
    }
}

/// Whether a stream error means the replica went away (so subscribing
/// again may work), not a refusal.
fn gone(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    )
}

/// Opens a subscription.
async fn subscribe(
    remote: &Remote,
    session: &str,
    background_after_ms: i64,
) -> Result<tonic::Streaming<pb::SessionEvent>, Failure> {
    Ok(remote
        .engine()
        .await?
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: session.to_owned(),
            background_after_ms,
        })
        .await?
        .into_inner())
}

/// One event: `--json`'s object, or its time (UTC) and type, then its card
/// (interactions, background calls) or its data.
fn print_event(ev: &pb::SessionEvent, json: bool) {
    if json {
        out!("{}", event_json(ev));
    } else if ev.r#type.starts_with("background_call.") {
        let rec: BackgroundRecord =
            serde_json::from_value(parse_json_text(&ev.data_json)).unwrap_or_default();
        card(ev, render_background(&rec));
    } else if ev.r#type.starts_with("interaction.") {
        let i = interactions::pb_from_json(&parse_json_text(&ev.data_json));
        card(
            ev,
            render_interaction(&i, ev.r#type == "interaction.required"),
        );
    } else {
        print_lines([format!("{} {} {}", utc(ev.at_ms), ev.r#type, ev.data_json)]);
    }
}

/// An event's time and type, then its card, indented.
fn card(ev: &pb::SessionEvent, lines: Vec<String>) {
    print_lines(
        std::iter::once(format!("{} {}", utc(ev.at_ms), ev.r#type))
            .chain(lines.into_iter().map(|l| format!("  {l}"))),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: &str, data: serde_json::Value) -> pb::SessionEvent {
        pb::SessionEvent {
            r#type: kind.into(),
            session_id: "s".into(),
            at_ms: 1,
            data_json: data.to_string(),
        }
    }

    #[test]
    fn a_replay_is_printed_once() {
        let mut seen = Seen::default();
        assert_eq!(seen.background_after_ms(), 0);
        let done = event(
            "background_call.completed",
            serde_json::json!({"id": "b1", "finishedAtMs": 5000}),
        );
        assert!(seen.first(&done));
        assert!(!seen.first(&done), "a replayed result is dropped");
        assert_eq!(seen.background_after_ms(), 4999);
        let asked = event("interaction.required", serde_json::json!({"id": "i1"}));
        assert!(seen.first(&asked));
        assert!(!seen.first(&asked), "an open interaction is announced once");
        let resolved = event("interaction.resolved", serde_json::json!({"id": "i1"}));
        assert!(seen.first(&resolved));
        let changed = event("tools.changed", serde_json::json!({"server": "x"}));
        assert!(seen.first(&changed));
        assert!(seen.first(&changed), "list changes are never deduplicated");
    }
}
