//! The stdio transport's line framing (`switchyard_mcp::framing`) and the
//! JSON-RPC decoding of each line (`switchyard_mcp::jsonrpc`).
//!
//! Input: byte 0 picks the line limit (`max_message_bytes`, 1 to 1021),
//! byte 1 the read buffer capacity, bytes 2..4 seed the chunk sizes the
//! reader hands out; the rest is the stream. Checked:
//!
//! - the frames are exactly the stream's lines (a `\r` before the `\n`
//!   dropped), or `Oversized` with the line's size past the limit, whatever
//!   the chunking;
//! - the id an oversized line reports is what `IdScanner` finds in the
//!   whole line at once (chunk boundaries do not matter), and on a
//!   canonical JSON object it is the object's top-level id;
//! - each line decodes and classifies without panicking, and a message
//!   classified as a request or a response has a valid id.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use switchyard_mcp::framing::{Frame, IdScanner, LineReader};
use switchyard_mcp::jsonrpc::{self, ErrorObject, Kind};
use tokio::io::{AsyncRead, ReadBuf};

/// Hands out `data` in chunks of pseudo-random sizes (never pending).
struct Chunked<'a> {
    data: &'a [u8],
    state: u32,
}

impl Chunked<'_> {
    fn next_size(&mut self) -> usize {
        // xorshift32: cheap, deterministic per input.
        self.state ^= self.state << 13;
        self.state ^= self.state >> 17;
        self.state ^= self.state << 5;
        1 + (self.state % 64) as usize
    }
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self.next_size().min(buf.remaining()).min(self.data.len());
        let (head, tail) = self.data.split_at(n);
        buf.put_slice(head);
        self.data = tail;
        Poll::Ready(Ok(()))
    }
}

/// The frames the stream should give.
#[derive(Debug, PartialEq)]
enum Expected<'a> {
    Line(&'a [u8]),
    Oversized(&'a [u8]),
}

fn expected(stream: &[u8], max: usize) -> Vec<Expected<'_>> {
    let mut out = Vec::new();
    let mut lines: Vec<&[u8]> = stream.split(|b| *b == b'\n').collect();
    // The piece after the last newline is a line only when it is not empty.
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    for line in lines {
        if line.len() > max {
            out.push(Expected::Oversized(line));
        } else {
            out.push(Expected::Line(line.strip_suffix(b"\r").unwrap_or(line)));
        }
    }
    out
}

fn scan(line: &[u8], split: usize) -> Option<Value> {
    let mut s = IdScanner::default();
    let split = split.min(line.len());
    s.feed(&line[..split]);
    s.feed(&line[split..]);
    s.finish()
}

fn check_message(line: &[u8]) {
    let _ = jsonrpc::preview(line, 80);
    let Ok(msg) = serde_json::from_slice::<Value>(line) else {
        return;
    };
    match jsonrpc::classify(&msg) {
        Some(Kind::Request) => {
            assert!(jsonrpc::is_valid_id(&msg["id"]));
            assert!(msg["method"].is_string());
        }
        Some(Kind::Notification) => assert!(msg.get("id").is_none()),
        Some(Kind::Response) => {
            let id = &msg["id"];
            assert!(jsonrpc::is_valid_id(id) || id.is_null());
            if let Some(e) = ErrorObject::from_response(&msg) {
                let reply = jsonrpc::error_response(id, e.code, &e.message);
                assert_eq!(jsonrpc::classify(&reply), Some(Kind::Response));
            }
        }
        None => {}
    }
    // The top-level id of a canonical (re-serialised) object is what the
    // oversized-line scanner finds.
    if let Value::Object(obj) = &msg {
        let canonical = serde_json::to_vec(&msg).expect("a Value serialises");
        let want = obj.get("id").filter(|id| jsonrpc::is_valid_id(id));
        let short = want.is_none_or(|id| id.to_string().len() < 512);
        if short {
            assert_eq!(scan(&canonical, canonical.len() / 2).as_ref(), want);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let max = 1 + usize::from(data[0]) * 4;
    let capacity = 1 + usize::from(data[1] % 32);
    let seed = u32::from(data[2]) << 8 | u32::from(data[3]) | 1;
    let stream = &data[4..];

    let reader = tokio::io::BufReader::with_capacity(
        capacity,
        Chunked {
            data: stream,
            state: seed,
        },
    );
    let mut reader = LineReader::new(reader, max);
    let mut frames = Vec::new();
    futures::executor::block_on(async {
        while let Some(frame) = reader
            .next_frame()
            .await
            .expect("in-memory reads never fail")
        {
            frames.push(frame);
        }
    });

    let want = expected(stream, max);
    assert_eq!(frames.len(), want.len(), "frame count");
    for (frame, want) in frames.iter().zip(&want) {
        match (frame, want) {
            (Frame::Line(got), Expected::Line(line)) => {
                assert_eq!(got.as_slice(), *line);
                assert!(got.len() <= max);
                check_message(got);
            }
            (Frame::Oversized { id, size }, Expected::Oversized(line)) => {
                assert_eq!(*size, line.len());
                assert_eq!(
                    *id,
                    scan(line, usize::from(data[3])),
                    "id of an oversized line"
                );
                if let Some(id) = id {
                    assert!(jsonrpc::is_valid_id(id));
                }
            }
            (got, want) => panic!("got {got:?}, expected {want:?}"),
        }
    }
});
