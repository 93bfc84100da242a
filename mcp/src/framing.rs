//! Newline-delimited JSON-RPC framing for the stdio transport
//! (MCP 2025-11-25 and 2026-07-28, basic/transports "stdio": one message per
//! line, no embedded newlines).
//!
//! The reader works on bytes, so a message split anywhere across reads —
//! including inside a multi-byte UTF-8 character — is reassembled before it
//! is decoded. Memory is bounded: a line longer than `max_message_bytes` is
//! not buffered; it is skipped to its end while a small streaming scanner
//! picks out its top-level `"id"`, so the one request it answered can be
//! failed and framing carries on with the next line.

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// One item read from the stream.
#[derive(Debug)]
pub enum Frame {
    /// A complete line (without the newline or a trailing `\r`). It may still
    /// be something other than JSON-RPC; the caller decides.
    Line(Vec<u8>),
    /// A line longer than the limit. `id` is its top-level JSON-RPC id, when
    /// one could be read; `size` is the length of the whole line in bytes.
    Oversized {
        /// Top-level `"id"` of the oversized message, if it had one.
        id: Option<Value>,
        /// Bytes in the line.
        size: usize,
    },
}

/// Reads frames from a buffered byte stream.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    max_message_bytes: usize,
    line: Vec<u8>,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// `max_message_bytes`: the longest line kept in memory (the sidecar's default is 16 MiB).
    pub fn new(inner: R, max_message_bytes: usize) -> Self {
        LineReader {
            inner,
            max_message_bytes,
            line: Vec::new(),
        }
    }

    /// Next frame, or `None` at end of stream. A final line without a
    /// newline is returned as a line. Errors are the stream's I/O errors.
    pub async fn next_frame(&mut self) -> std::io::Result<Option<Frame>> {
        self.line.clear();
        let mut oversized: Option<(IdScanner, usize)> = None;
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                // End of stream.
                return Ok(match oversized {
                    Some((scanner, size)) => Some(Frame::Oversized {
                        id: scanner.finish(),
                        size,
                    }),
                    None if self.line.is_empty() => None,
                    None => Some(Frame::Line(trim_cr(std::mem::take(&mut self.line)))),
                });
            }
            let (chunk, found_newline) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (&buf[..i], true),
                None => (buf, false),
            };
            let used = chunk.len() + usize::from(found_newline);
            match &mut oversized {
                Some((scanner, size)) => {
                    scanner.feed(chunk);
                    *size += chunk.len();
                }
                None if self.line.len() + chunk.len() > self.max_message_bytes => {
                    let mut scanner = IdScanner::default();
                    scanner.feed(&self.line);
                    scanner.feed(chunk);
                    let size = self.line.len() + chunk.len();
                    self.line = Vec::new(); // release the buffer
                    oversized = Some((scanner, size));
                }
                None => self.line.extend_from_slice(chunk),
            }
            self.inner.consume(used);
            if found_newline {
                return Ok(Some(match oversized {
                    Some((scanner, size)) => Frame::Oversized {
                        id: scanner.finish(),
                        size,
                    },
                    None => Frame::Line(trim_cr(std::mem::take(&mut self.line))),
                }));
            }
        }
    }
}

fn trim_cr(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line
}

/// Streaming scanner for the top-level `"id"` member of a JSON object, fed
/// in chunks, in O(1) memory. It tracks nesting and strings, so an `"id"`
/// inside `result` (or inside a string) is never mistaken for the message
/// id, wherever the top-level `"id"` stands (first or last).
#[derive(Debug, Default)]
pub struct IdScanner {
    depth: u32,
    in_string: bool,
    escape: bool,
    /// At depth 1, whether the next string is a key.
    expect_key: bool,
    /// The key being read at depth 1 (capped).
    key: Vec<u8>,
    key_is_id: bool,
    /// Raw bytes of the id value being captured (capped).
    capture: Option<Vec<u8>>,
    id: Option<Value>,
}

const MAX_ID_BYTES: usize = 512;

impl IdScanner {
    /// Feeds the next bytes of the message.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.step(b);
        }
    }

    /// The id found, if any.
    pub fn finish(mut self) -> Option<Value> {
        self.end_capture();
        self.id
    }

    fn end_capture(&mut self) {
        if let Some(raw) = self.capture.take()
            && self.id.is_none()
        {
            self.id = serde_json::from_slice::<Value>(&raw)
                .ok()
                .filter(crate::jsonrpc::is_valid_id);
        }
    }

    fn step(&mut self, b: u8) {
        if let Some(raw) = &mut self.capture {
            // Capturing the id value at depth 1: ends at `,` or `}` outside a string.
            if !self.in_string && (b == b',' || b == b'}') && self.depth == 1 {
                self.end_capture();
            } else if raw.len() < MAX_ID_BYTES {
                raw.push(b);
            }
        }
        if self.in_string {
            if self.escape {
                self.escape = false;
            } else if b == b'\\' {
                self.escape = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.depth == 1 && self.expect_key {
                    self.key_is_id = self.key == b"id";
                    self.expect_key = false;
                }
            }
            if self.in_string && self.depth == 1 && self.expect_key && self.key.len() < 8 {
                self.key.push(b);
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.key.clear();
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 {
                    self.expect_key = true;
                }
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b',' if self.depth == 1 => {
                self.expect_key = true;
                self.key_is_id = false;
            }
            b':' if self.depth == 1 && self.key_is_id && self.capture.is_none() => {
                self.capture = Some(Vec::new());
                self.key_is_id = false;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
