use super::*;

#[test]
fn uuids_are_version_4() {
    let id = new_uuid();
    assert_eq!(id.len(), 36);
    assert_eq!(&id[14..15], "4");
    assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "{id}");
    assert_ne!(id, new_uuid());
}

#[test]
fn pages_follow_creation_order_without_gaps_or_repeats() {
    let rec = |created: i64, id: &str| BackgroundRecord {
        id: id.into(),
        created_at_ms: created,
        ..Default::default()
    };
    // Two calls created in the same millisecond are ordered by id.
    let all = vec![
        rec(1, "a"),
        rec(2, "b"),
        rec(2, "c"),
        rec(3, "d"),
        rec(4, "e"),
    ];
    let ids = |page: &[BackgroundRecord]| page.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    let mut seen = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let (page, next) = page_of(all.clone(), 2, &token).unwrap();
        assert!(page.len() <= 2);
        seen.extend(ids(&page));
        pages += 1;
        if next.is_empty() {
            break;
        }
        token = next;
    }
    assert_eq!((seen, pages), (ids(&all), 3));
    // 0: everything at once, no token.
    assert_eq!(
        page_of(all.clone(), 0, "").unwrap(),
        (all.clone(), String::new())
    );
    // A call created after the first page was read comes later, once.
    let (first, token) = page_of(all.clone(), 2, "").unwrap();
    assert_eq!(ids(&first), ["a", "b"]);
    let mut grown = all.clone();
    grown.push(rec(5, "f"));
    let (rest, next) = page_of(grown, 0, &token).unwrap();
    assert_eq!(
        (ids(&rest), next),
        (
            vec!["c".to_owned(), "d".into(), "e".into(), "f".into()],
            String::new()
        )
    );
    // Bad input.
    for bad in ["x", "12", "12:", ":a", "a:b"] {
        let e = page_of(all.clone(), 2, bad).unwrap_err();
        assert!(e.to_string().contains("page_token"), "{bad}: {e}");
    }
    let e = page_of(all, MAX_PAGE_SIZE + 1, "").unwrap_err();
    assert!(e.to_string().contains("page_size: 1001"), "{e}");
}

#[test]
fn records_round_trip_in_proto3_json_form() {
    let rec = BackgroundRecord {
        id: "b1".into(),
        server: "s".into(),
        mode: "task".into(),
        task_id: "t".into(),
        status: "completed".into(),
        finished_at_ms: 5,
        result: Some(BackgroundResultRecord {
            model_text: "done".into(),
            attachments: vec![AttachmentRecord {
                name: "a.bin".into(),
                data: vec![0, 1, 2],
                size_bytes: 3,
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let v = rec.to_json();
    assert_eq!(v["taskId"], "t");
    assert_eq!(v["finishedAtMs"], 5);
    assert_eq!(v["result"]["modelText"], "done");
    assert_eq!(v["result"]["attachments"][0]["data"], "AAEC");
    let back: BackgroundRecord = serde_json::from_value(v).unwrap();
    assert_eq!(back, rec);
    assert_eq!(BackgroundRecord::from_pb(rec.to_pb()), rec);
    let ev = event_of(&rec);
    assert_eq!(ev.r#type, "background_call.completed");
    assert_eq!(ev.at_ms, 5);
}

#[test]
fn moved_text_carries_the_immediate_response() {
    let t = moved_text("s__t", "id-1", "Working on it.");
    assert!(t.starts_with("The call to s__t is still running and has moved to the background (id id-1). Its result will arrive as a new message when it finishes. End this turn.\n\nWorking on it."), "{t}");
    assert!(moved_text("s__t", "id-1", "").ends_with("End this turn."));
}

#[test]
fn oversized_records_lose_attachment_content() {
    let mut rec = BackgroundRecord {
        id: "b".into(),
        status: "completed".into(),
        result: Some(BackgroundResultRecord {
            attachments: vec![AttachmentRecord {
                data: vec![7; MAX_RECORD_BYTES],
                size_bytes: MAX_RECORD_BYTES as u64,
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let v = fit(&mut rec).unwrap();
    assert!(v.len() < MAX_RECORD_BYTES);
    assert!(rec.status_message.contains("too large"));
    assert_eq!(
        rec.result.unwrap().attachments[0].size_bytes,
        MAX_RECORD_BYTES as u64
    );
}

#[test]
fn oversized_records_lose_the_raw_result_then_long_texts() {
    // A 3 MB raw result: dropped, the model text kept.
    let mut rec = BackgroundRecord {
        id: "b".into(),
        status: "completed".into(),
        result: Some(BackgroundResultRecord {
            result_json: "r".repeat(3_000_000),
            model_text: "the beginning".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let v = fit(&mut rec).unwrap();
    assert!(v.len() <= MAX_RECORD_BYTES);
    let r = rec.result.as_ref().unwrap();
    assert!(r.result_json.is_empty());
    assert_eq!(r.model_text, "the beginning");
    assert_eq!(rec.status, "completed");
    assert!(rec.status_message.contains("raw result was too large"));
    // A 2 MB status message of a running call: cut at a character
    // boundary.
    let mut rec = BackgroundRecord {
        id: "w".into(),
        status: "working".into(),
        status_message: "é".repeat(1_000_000),
        ..Default::default()
    };
    let v = fit(&mut rec).unwrap();
    assert!(v.len() < 20_000);
    assert!(rec.status_message.contains("cut: 2000000 bytes in all"));
    // A terminal record that cannot be cut small enough: failed, saying
    // why; a running one: refused.
    let many = |status: &str| BackgroundRecord {
        id: "m".into(),
        status: status.into(),
        result: Some(BackgroundResultRecord {
            attachments: vec![
                AttachmentRecord {
                    name: "n".repeat(100),
                    ..Default::default()
                };
                20_000
            ],
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut rec = many("completed");
    let v = fit(&mut rec).unwrap();
    assert!(v.len() <= MAX_RECORD_BYTES);
    assert_eq!(rec.status, "failed");
    assert!(rec.result.is_none());
    assert!(
        rec.status_message.contains("too large to keep"),
        "{}",
        rec.status_message
    );
    let mut rec = many("working");
    assert!(
        matches!(fit(&mut rec), Err(BackgroundError::Invalid(m)) if m.contains("over the 1048576-byte limit"))
    );
}
