//! The Server-Sent Events decoder (`switchyard_mcp::sse::decode`) and its
//! encoder.
//!
//! Input: bytes 0..2 pick the per-event limit (1 to 65536), byte 2 seeds the
//! chunk sizes; the rest is the response body. The body is decoded three
//! ways: as one chunk, in pseudo-random chunks and one byte at a time.
//! Checked (each run is read up to its first error, as the client does):
//!
//! - the three runs end the same way (cleanly, or with the same error);
//! - without an error they give the same events; with one, the events each
//!   run gave before it are a prefix of the byte-at-a-time run's;
//! - every event decoded re-encodes (`sse::encode`) to a stream that decodes
//!   to that one event.

#![no_main]

use bytes::Bytes;
use futures::StreamExt;
use libfuzzer_sys::fuzz_target;
use switchyard_mcp::sse::{self, Event, SseError};

fn decode(chunks: Vec<Vec<u8>>, limit: usize) -> (Vec<Event>, Option<SseError>) {
    let body = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<Bytes, std::convert::Infallible>(Bytes::from(c))),
    );
    futures::executor::block_on(async {
        let mut events = Vec::new();
        let stream = sse::decode(body, limit);
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(ev) => events.push(ev),
                Err(e) => return (events, Some(e)),
            }
        }
        (events, None)
    })
}

fn chunks(body: &[u8], mut state: u32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = (1 + (state % 48) as usize).min(rest.len());
        let (head, tail) = rest.split_at(n);
        out.push(head.to_vec());
        rest = tail;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let limit = 1 + usize::from(u16::from_le_bytes([data[0], data[1]]));
    let seed = u32::from(data[2]) * 0x0101_0101 | 1;
    let body = &data[3..];

    let whole = decode(vec![body.to_vec()], limit);
    let random = decode(chunks(body, seed), limit);
    let bytes = decode(body.iter().map(|b| vec![*b]).collect(), limit);

    assert_eq!(whole.1, bytes.1, "one chunk and byte at a time end alike");
    assert_eq!(
        random.1, bytes.1,
        "random chunks and byte at a time end alike"
    );
    if bytes.1.is_none() {
        assert_eq!(whole.0, bytes.0, "one chunk and byte at a time differ");
        assert_eq!(random.0, bytes.0, "random chunks and byte at a time differ");
    } else {
        assert!(bytes.0.starts_with(&whole.0));
        assert!(bytes.0.starts_with(&random.0));
    }

    for ev in &bytes.0 {
        let text = sse::encode(ev);
        let again = decode(vec![text.clone().into_bytes()], usize::MAX);
        assert_eq!(again, (vec![ev.clone()], None), "re-encoded as {text:?}");
    }
});
