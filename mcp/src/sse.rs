//! Server-Sent Events, the stream format of the Streamable HTTP transport
//! (specification `basic/transports`, "Streamable HTTP"; the format itself is
//! the HTML Living Standard's `text/event-stream`).
//!
//! - [`decode`] turns a response body (a stream of byte chunks) into
//!   [`Event`]s, refusing an event larger than a limit before it is buffered
//!   whole, and bytes that are not UTF-8 as soon as they come: memory stays
//!   bounded whatever the peer sends. The line parsing is the
//!   `eventsource-stream` crate's; the one leading byte order mark the
//!   format allows is removed before it (that crate's own removal panics).
//! - [`encode`] writes one event, for the side that serves the stream.
//!
//! An event with empty `data` is a priming event or a keep-alive; what the
//! `data` of the others means (a JSON-RPC message) is the caller's business.

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use std::fmt::Write as _;
use std::time::Duration;

/// One event: `id` and `event` are empty when absent; `data` is the event's
/// data lines joined with `\n`; `retry` is the reconnection delay the
/// server asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The event id (`Last-Event-ID` when resuming); empty when absent.
    pub id: String,
    /// The event type; empty (meaning `message`) when absent.
    pub event: String,
    /// The data lines, joined with `\n`.
    pub data: String,
    /// The `retry` field: how long to wait before reconnecting.
    pub retry: Option<Duration>,
}

/// Why a stream of events stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// An event's bytes went past `limit` before its blank line.
    TooLarge {
        /// The limit, in bytes (line ends excluded).
        limit: usize,
    },
    /// Reading the body failed; displayed as the transport's error text
    /// alone, for the caller to say what it was reading.
    Body(String),
    /// The bytes are not an event stream (not UTF-8, say).
    Parse(String),
}

impl std::fmt::Display for SseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SseError::TooLarge { limit } => {
                write!(f, "an SSE event is over the {limit}-byte limit")
            }
            SseError::Body(e) => f.write_str(e),
            SseError::Parse(e) => write!(f, "not an event stream: {e}"),
        }
    }
}

impl std::error::Error for SseError {}

/// The events of `body`. An event whose bytes (field names and values,
/// line ends excluded) exceed `limit` ends the stream with
/// [`SseError::TooLarge`] as soon as the limit is passed; a byte that
/// cannot be UTF-8 ends it with [`SseError::Parse`]; a body error ends it
/// with [`SseError::Body`]. Chunk boundaries may fall anywhere, inside a
/// line, a `\r\n` or a UTF-8 character (a leading byte order mark
/// included).
pub fn decode<S, B, E>(body: S, limit: usize) -> impl Stream<Item = Result<Event, SseError>>
where
    S: Stream<Item = Result<B, E>>,
    B: Into<Bytes>,
    E: std::fmt::Display,
{
    let mut since_boundary = 0usize;
    let mut last_newline = false;
    let mut utf8 = Utf8Check::default();
    // Bytes of a leading byte order mark seen so far (held back); `None`
    // once past the start.
    let mut bom_seen = Some(0usize);
    let bounded = body.map(move |chunk| {
        let chunk: Bytes = chunk.map_err(|e| SseError::Body(e.to_string()))?.into();
        for &b in chunk.iter() {
            if !utf8.step(b) {
                return Err(SseError::Parse("the body is not UTF-8".into()));
            }
            match b {
                b'\r' => {}
                b'\n' if last_newline => since_boundary = 0,
                b'\n' => last_newline = true,
                _ => {
                    last_newline = false;
                    since_boundary += 1;
                }
            }
            if since_boundary > limit {
                return Err(SseError::TooLarge { limit });
            }
        }
        Ok(strip_bom(&mut bom_seen, chunk))
    });
    // eventsource-stream 0.2.3 removes a leading byte order mark by cutting
    // one byte off its three, and panics. A comment line first (ignored by
    // the parser) means it never sees one: the one the format allows is
    // removed by `strip_bom`, and any other stays text, as the format says.
    let start = futures::stream::once(async { Ok(Bytes::from_static(b":\n")) });
    start.chain(bounded).eventsource().map(|ev| match ev {
        Ok(ev) => Ok(Event {
            id: ev.id,
            event: ev.event,
            data: ev.data,
            retry: ev.retry,
        }),
        Err(eventsource_stream::EventStreamError::Transport(e)) => Err(e),
        Err(e) => Err(SseError::Parse(e.to_string())),
    })
}

/// The UTF-8 byte order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// `chunk` less the part of a leading byte order mark it holds (HTML
/// "Interpreting an event stream": one is removed); `seen` counts the
/// bytes of it held back from earlier chunks, given back when it turns out
/// not to be one.
fn strip_bom(seen: &mut Option<usize>, chunk: Bytes) -> Bytes {
    let Some(held) = *seen else {
        return chunk;
    };
    let matched = chunk
        .iter()
        .zip(&BOM[held..])
        .take_while(|(a, b)| a == b)
        .count();
    if held + matched == BOM.len() {
        *seen = None;
        chunk.slice(matched..)
    } else if matched == chunk.len() {
        *seen = Some(held + matched);
        Bytes::new()
    } else {
        *seen = None;
        let mut out = BOM[..held].to_vec();
        out.extend_from_slice(&chunk);
        Bytes::from(out)
    }
}

/// UTF-8 checked one byte at a time (RFC 3629, as `std::str::from_utf8`
/// checks it), so a byte that cannot be UTF-8 is refused as it comes:
/// eventsource-stream would otherwise keep it, and every byte after it, in
/// memory until the body ends.
#[derive(Debug, Default)]
struct Utf8Check {
    /// Continuation bytes still expected.
    need: u8,
    /// The range the next continuation byte must be in.
    range: (u8, u8),
}

impl Utf8Check {
    /// Whether `b` may come next.
    fn step(&mut self, b: u8) -> bool {
        if self.need > 0 {
            if !(self.range.0..=self.range.1).contains(&b) {
                return false;
            }
            self.need -= 1;
            self.range = (0x80, 0xBF);
            return true;
        }
        let (need, range) = match b {
            0x00..=0x7F => return true,
            0xC2..=0xDF => (1, (0x80, 0xBF)),
            0xE0 => (2, (0xA0, 0xBF)),
            0xE1..=0xEC | 0xEE..=0xEF => (2, (0x80, 0xBF)),
            0xED => (2, (0x80, 0x9F)),
            0xF0 => (3, (0x90, 0xBF)),
            0xF1..=0xF3 => (3, (0x80, 0xBF)),
            0xF4 => (3, (0x80, 0x8F)),
            _ => return false,
        };
        self.need = need;
        self.range = range;
        true
    }
}

/// The text of one event: `id` and `event` lines when non-empty, a `retry`
/// line when given (whole milliseconds), then `data` split into one `data:`
/// line per line (so `\n`, `\r\n` and `\r` in it survive as line breaks),
/// then the blank line. `id` and `event` must not hold line breaks; any are
/// replaced with spaces.
pub fn encode(event: &Event) -> String {
    let mut out = String::with_capacity(event.data.len() + 32);
    let one_line = |s: &str| s.replace(['\r', '\n'], " ");
    if !event.id.is_empty() {
        let _ = writeln!(out, "id: {}", one_line(&event.id));
    }
    if !event.event.is_empty() {
        let _ = writeln!(out, "event: {}", one_line(&event.event));
    }
    if let Some(retry) = event.retry {
        let _ = writeln!(out, "retry: {}", retry.as_millis());
    }
    let data = event.data.replace("\r\n", "\n").replace('\r', "\n");
    for line in data.split('\n') {
        let _ = writeln!(out, "data: {line}");
    }
    out.push('\n');
    out
}

/// A comment line: ignored by every client, it keeps a stream (and the
/// proxies on its way) from going idle.
pub const KEEP_ALIVE: &str = ":\n\n";

#[cfg(test)]
mod tests;
