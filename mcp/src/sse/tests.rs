use super::*;
use futures::executor::block_on;
use futures::stream;

fn events_of(chunks: Vec<&'static [u8]>, limit: usize) -> Vec<Result<Event, SseError>> {
    let body = stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c))),
    );
    block_on(decode(body, limit).collect())
}

#[test]
fn events_split_across_chunks_anywhere() {
    let text = "id: 7\nevent: message\nretry: 1500\ndata: {\"a\":\ndata: 1}\n\n: keep-alive\n\ndata: é\r\n\r\n";
    let whole = events_of(vec![text.as_bytes()], 1024);
    // Every split point, including inside `\r\n` and inside `é`.
    for cut in 1..text.len() {
        let (a, b) = text.as_bytes().split_at(cut);
        let a: &'static [u8] = Box::leak(a.to_vec().into_boxed_slice());
        let b: &'static [u8] = Box::leak(b.to_vec().into_boxed_slice());
        assert_eq!(events_of(vec![a, b], 1024), whole, "cut at {cut}");
    }
    let evs: Vec<Event> = whole.into_iter().map(Result::unwrap).collect();
    assert_eq!(evs.len(), 2, "{evs:?}");
    assert_eq!(evs[0].id, "7");
    assert_eq!(evs[0].event, "message");
    assert_eq!(evs[0].retry, Some(Duration::from_millis(1500)));
    assert_eq!(evs[0].data, "{\"a\":\n1}");
    assert_eq!(evs[1].data, "é");
    assert_eq!(evs[1].id, "7", "the last event id carries over");
}

#[test]
fn an_oversized_event_stops_the_stream_before_it_is_buffered() {
    let evs = events_of(vec![b"data: 12345\n\n", b"data: 1234567890", b"12345"], 12);
    assert_eq!(evs[0].as_ref().unwrap().data, "12345");
    assert_eq!(evs.last().unwrap(), &Err(SseError::TooLarge { limit: 12 }));
    // Many small events in one chunk are each within the limit.
    let evs = events_of(vec![b"data: 1234\n\ndata: 1234\n\ndata: 1234\n\n"], 12);
    assert_eq!(evs.len(), 3);
    assert!(evs.iter().all(Result::is_ok));
}

#[test]
fn a_body_error_ends_the_stream_with_its_text() {
    let body = stream::iter(vec![
        Ok(Bytes::from_static(b"data: 1\n\n")),
        Err("connection reset"),
    ]);
    let evs: Vec<_> = block_on(decode(body, 100).collect());
    assert_eq!(evs[0].as_ref().unwrap().data, "1");
    assert_eq!(evs[1], Err(SseError::Body("connection reset".into())));
    assert_eq!(evs[1].as_ref().unwrap_err().to_string(), "connection reset");
}

#[test]
fn encode_round_trips_through_decode() {
    let cases = [
        Event {
            data: r#"{"jsonrpc":"2.0","id":0,"result":{}}"#.into(),
            ..Event::default()
        },
        Event {
            id: "s1-42".into(),
            event: "message".into(),
            data: "two\nlines".into(),
            retry: Some(Duration::from_millis(3000)),
        },
        Event {
            id: "1".into(),
            data: "a\r\nb\rc".into(),
            ..Event::default()
        },
    ];
    let mut text = String::from(KEEP_ALIVE);
    for ev in &cases {
        text.push_str(&encode(ev));
        text.push_str(KEEP_ALIVE);
    }
    let leaked: &'static [u8] = Box::leak(text.into_bytes().into_boxed_slice());
    let back: Vec<Event> = events_of(vec![leaked], 1 << 20)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(back.len(), 3);
    assert_eq!(back[0].data, cases[0].data);
    assert_eq!(back[1], cases[1]);
    assert_eq!(back[2].data, "a\nb\nc", "line breaks are normalised");
    // An id with a line break cannot inject a field.
    let evil = encode(&Event {
        id: "x\ndata: injected".into(),
        data: "ok".into(),
        ..Event::default()
    });
    assert_eq!(evil, "id: x data: injected\ndata: ok\n\n");
}

#[test]
fn one_leading_byte_order_mark_is_removed_however_it_is_split() {
    // eventsource-stream 0.2.3 panicked on it (found by fuzz/sse).
    let text: &'static [u8] = b"\xEF\xBB\xBFdata: a\n\n";
    for cut in 0..=4 {
        let (a, b) = text.split_at(cut);
        let got: Vec<_> = events_of(vec![a, b], 100);
        assert_eq!(got.len(), 1, "cut at {cut}: {got:?}");
        assert_eq!(got[0].as_ref().unwrap().data, "a", "cut at {cut}");
    }
    // A second one is text: the first field's name is not `data`.
    let two = events_of(vec![b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n"], 100);
    assert_eq!(two.len(), 1, "{two:?}");
    assert_eq!(two[0].as_ref().unwrap().data, "b");
    // The start of one that is something else is given back.
    let other = events_of(vec![b"\xEF", b"\xBB\xBE: c\n\ndata: d\n\n"], 100);
    assert_eq!(other.len(), 1, "{other:?}");
    assert_eq!(other[0].as_ref().unwrap().data, "d");
}

#[test]
fn bytes_that_are_not_utf8_end_the_stream_as_they_come() {
    let evs = events_of(vec![b"data: 1\n\n", b"data: \xFF\n\n", b"data: 2\n\n"], 100);
    assert_eq!(evs[0].as_ref().unwrap().data, "1");
    assert!(matches!(evs[1], Err(SseError::Parse(_))), "{evs:?}");
    // Overlong forms and surrogates are not UTF-8 either; a character
    // split across chunks is.
    for bad in [&b"\xC0\xAF"[..], b"\xED\xA0\x80", b"\xF4\x90\x80\x80"] {
        let bad: &'static [u8] = Box::leak(bad.to_vec().into_boxed_slice());
        let evs = events_of(vec![b"data: ", bad, b"\n\n"], 100);
        assert!(
            matches!(evs[..], [Err(SseError::Parse(_)), ..]),
            "{bad:?}: {evs:?}"
        );
    }
    let evs = events_of(vec![b"data: \xE2\x82", b"\xAC\n\n"], 100);
    assert_eq!(evs.len(), 1, "{evs:?}");
    assert_eq!(evs[0].as_ref().unwrap().data, "€");
}
