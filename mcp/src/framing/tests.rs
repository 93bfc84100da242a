use super::*;
use serde_json::json;
use std::io::Cursor;
use tokio::io::{AsyncWriteExt, BufReader};

async fn frames(input: &[u8], max: usize) -> Vec<Frame> {
    let mut r = LineReader::new(
        BufReader::with_capacity(7, Cursor::new(input.to_vec())),
        max,
    );
    let mut out = vec![];
    while let Some(f) = r.next_frame().await.unwrap() {
        out.push(f);
    }
    out
}

fn line(f: &Frame) -> &[u8] {
    match f {
        Frame::Line(l) => l,
        other => panic!("expected a line, got {other:?}"),
    }
}

#[tokio::test]
async fn splits_lines_and_trims_cr() {
    let f = frames(b"{\"a\":1}\r\n\nlast", 100).await;
    assert_eq!(f.len(), 3);
    assert_eq!(line(&f[0]), b"{\"a\":1}");
    assert_eq!(line(&f[1]), b"");
    assert_eq!(line(&f[2]), b"last");
}

#[tokio::test]
async fn reassembles_multibyte_characters_split_across_reads() {
    // A duplex pipe written one byte at a time: every character boundary,
    // including inside 4-byte emoji and 3-byte CJK, is a read boundary.
    let text = r#"{"jsonrpc":"2.0","id":1,"result":{"t":"🚂🛤️ 中文测试 ✓"}}"#;
    let (mut w, r) = tokio::io::duplex(1);
    let writer = tokio::spawn(async move {
        for b in format!("{text}\n").as_bytes() {
            w.write_all(&[*b]).await.unwrap();
        }
    });
    let mut reader = LineReader::new(BufReader::with_capacity(1, r), 1024);
    let f = reader.next_frame().await.unwrap().unwrap();
    writer.await.unwrap();
    assert_eq!(std::str::from_utf8(line(&f)).unwrap(), text);
}

#[tokio::test]
async fn oversized_line_is_skipped_with_its_id_and_framing_recovers() {
    let big = "x".repeat(5000);
    // The id stands last, as the TypeScript SDK writes it; a nested "id"
    // inside the result must not be taken for it.
    let msg = format!(
        r#"{{"result":{{"content":[{{"type":"text","text":"{big}","id":99}}]}},"jsonrpc":"2.0","id":"req-7"}}"#
    );
    let input = format!("{msg}\n{{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{{}}}}\n");
    let f = frames(input.as_bytes(), 1000).await;
    assert_eq!(f.len(), 2);
    match &f[0] {
        Frame::Oversized { id, size } => {
            assert_eq!(id, &Some(json!("req-7")));
            assert_eq!(*size, msg.len());
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(line(&f[1]), br#"{"jsonrpc":"2.0","id":8,"result":{}}"#);
}

#[test]
fn id_scanner_handles_escapes_numbers_and_missing_ids() {
    let scan = |s: &str| {
        let mut sc = IdScanner::default();
        sc.feed(s.as_bytes());
        sc.finish()
    };
    assert_eq!(scan(r#"{"id":0,"result":{}}"#), Some(json!(0)));
    assert_eq!(scan(r#"{"id" : "0" }"#), Some(json!("0")));
    assert_eq!(
        scan(r#"{"result":{"text":"\"id\":5"},"id":6}"#),
        Some(json!(6))
    );
    assert_eq!(
        scan(r#"{"method":"notifications/x","params":{"id":3}}"#),
        None
    );
    assert_eq!(scan(r#"{"ids":1,"xid":2}"#), None);
    assert_eq!(scan(r#"{"id":{"nested":1}}"#), None);
}
