//! Property tests: what Switchyard forwards comes out as it went in. Any
//! JSON-RPC message (ids as strings or integers, `_meta`, unknown fields,
//! any JSON in `params` or `result`) survives stdio framing, however the
//! bytes are split, and SSE encoding and decoding, value for value; a
//! response keeps its request's id exactly (`0` and `"0"` stay apart).

use futures::StreamExt;
use proptest::prelude::*;
use serde_json::Value;
use switchyard_mcp::framing::{Frame, LineReader};
use switchyard_mcp::jsonrpc::{self, Kind};
use switchyard_mcp::sse;
use switchyard_test_support::arbitrary::{json_value, request};

/// The frames `LineReader` reads from `bytes` fed in pieces cut at `cuts`.
fn frames(bytes: &[u8], cuts: &[usize], limit: usize) -> Vec<Frame> {
    let mut pieces = Vec::new();
    let mut at = 0;
    for &cut in cuts {
        let end = (at + cut).min(bytes.len());
        pieces.push(bytes[at..end].to_vec());
        at = end;
    }
    pieces.push(bytes[at..].to_vec());
    let mut builder = tokio_test_reader(pieces);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut reader = LineReader::new(&mut builder, limit);
        let mut out = Vec::new();
        while let Some(frame) = reader.next_frame().await.expect("no I/O error") {
            out.push(frame);
        }
        out
    })
}

/// A buffered reader that hands out `pieces` one `fill_buf` at a time.
fn tokio_test_reader(pieces: Vec<Vec<u8>>) -> tokio::io::BufReader<PieceReader> {
    tokio::io::BufReader::with_capacity(1 << 20, PieceReader { pieces, next: 0 })
}

/// An `AsyncRead` returning one piece per read.
struct PieceReader {
    pieces: Vec<Vec<u8>>,
    next: usize,
}

impl tokio::io::AsyncRead for PieceReader {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        while self.next < self.pieces.len() {
            let i = self.next;
            self.next += 1;
            if !self.pieces[i].is_empty() {
                let piece = std::mem::take(&mut self.pieces[i]);
                assert!(piece.len() <= buf.remaining(), "pieces fit the buffer");
                buf.put_slice(&piece);
                break;
            }
        }
        std::task::Poll::Ready(Ok(()))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Serialised as one line (what the sidecar writes to a stdio server
    /// and reads back), any request is read back as the same value, with
    /// the same id, whatever the chunking.
    #[test]
    fn a_message_survives_stdio_framing(
        messages in prop::collection::vec(request(), 1..4),
        cuts in prop::collection::vec(0usize..64, 0..16),
    ) {
        let mut bytes = Vec::new();
        for m in &messages {
            serde_json::to_writer(&mut bytes, m).unwrap();
            bytes.push(b'\n');
        }
        let read = frames(&bytes, &cuts, 16 << 20);
        prop_assert_eq!(read.len(), messages.len());
        for (frame, sent) in read.iter().zip(&messages) {
            let Frame::Line(line) = frame else {
                return Err(TestCaseError::fail("a line, not oversized"));
            };
            let got: Value = serde_json::from_slice(line).unwrap();
            prop_assert_eq!(&got, sent);
            prop_assert_eq!(jsonrpc::classify(&got), Some(Kind::Request));
            // The id keeps its type: 0 and "0" are different ids.
            prop_assert_eq!(got["id"].is_string(), sent["id"].is_string());
            prop_assert_eq!(&got["params"]["_meta"], &sent["params"]["_meta"]);
        }
    }

    /// An oversized line still gives its top-level id exactly.
    #[test]
    fn an_oversized_message_keeps_its_id(message in request()) {
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(b'\n');
        let limit = bytes.len() / 2;
        let read = frames(&bytes, &[limit / 3 + 1, limit], limit.max(1));
        prop_assert_eq!(read.len(), 1);
        match &read[0] {
            Frame::Oversized { id, size } => {
                prop_assert_eq!(id.as_ref(), Some(&message["id"]));
                prop_assert_eq!(*size, bytes.len() - 1);
            }
            Frame::Line(_) => prop_assert!(bytes.len() - 1 <= limit.max(1)),
        }
    }

    /// A response made for a request carries the request's id exactly, and
    /// the result as given (unknown fields and `_meta` included).
    #[test]
    fn a_response_echoes_the_request_id(message in request(), result in json_value()) {
        let id = &message["id"];
        let response = jsonrpc::result_response(id, result.clone());
        let wire: Value = serde_json::from_slice(&serde_json::to_vec(&response).unwrap()).unwrap();
        prop_assert_eq!(&wire["id"], id);
        prop_assert_eq!(&wire["result"], &result);
        prop_assert_eq!(jsonrpc::classify(&wire), Some(Kind::Response));
        let error = jsonrpc::error_response(id, -32603, "x");
        prop_assert_eq!(&error["id"], id);
    }

    /// On a Streamable HTTP stream, a message encoded as one SSE event is
    /// decoded, one byte at a time too, to the same value.
    #[test]
    fn a_message_survives_sse(message in request(), event_id in "[a-z0-9-]{0,12}") {
        let event = sse::Event {
            id: event_id,
            event: "message".into(),
            data: serde_json::to_string(&message).unwrap(),
            retry: None,
        };
        let text = sse::encode(&event);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let decoded: Vec<_> = rt.block_on(
            sse::decode(
                futures::stream::iter(
                    text.bytes().map(|b| Ok::<_, std::io::Error>(vec![b])),
                ),
                16 << 20,
            )
            .collect(),
        );
        prop_assert_eq!(decoded.len(), 1);
        let got = decoded[0].as_ref().expect("an event");
        prop_assert_eq!(got, &event);
        let value: Value = serde_json::from_str(&got.data).unwrap();
        prop_assert_eq!(value, message);
    }
}
