use super::*;
use serde_json::json;

const T: Duration = Duration::from_secs(600);

fn form_request(id: &str) -> InteractRequest {
    InteractRequest {
        interaction_id: id.into(),
        server: "orders".into(),
        session_id: "s1".into(),
        run_id: "r1".into(),
        tool: "create_order".into(),
        kind: "form".into(),
        params_json: r#"{"mode":"form","message":"Where to?","requestedSchema":{"type":"object","properties":{"city":{"type":"string","minLength":2,"x-ui":"wide"},"count":{"type":"integer","minimum":1}},"required":["city"]},"_meta":{"k":1}}"#.into(),
        key: String::new(),
        ..InteractRequest::default()
    }
}

fn url_request(id: &str, url: &str) -> InteractRequest {
    InteractRequest {
        kind: "url".into(),
        params_json:
            json!({"mode": "url", "message": "Sign in", "url": url, "elicitationId": "e-1"})
                .to_string(),
        ..form_request(id)
    }
}

fn approval() -> InteractionRecord {
    InteractionRecord {
        kind: Kind::Approval,
        params: None,
        ..record_from_request(&form_request("a1"), 1_000, T).unwrap()
    }
}

#[test]
fn form_records_keep_params_byte_exact() {
    let r = form_request("i1");
    let rec = record_from_request(&r, 1_000, T).unwrap();
    assert_eq!(rec.kind, Kind::Form);
    assert_eq!(rec.status, Status::Open);
    assert_eq!(rec.message, "Where to?");
    assert_eq!(rec.expires_at_ms, 601_000);
    assert_eq!(rec.params.as_ref().unwrap().get(), r.params_json);
    // requestedSchema exactly as sent, unknown keywords included.
    let raw = rec.requested_schema_raw().unwrap();
    assert!(r.params_json.contains(raw), "{raw}");
    assert!(raw.contains("\"x-ui\":\"wide\""));
    // Through the store's JSON and back, still byte-exact.
    let stored = serde_json::to_vec(&rec).unwrap();
    let back: InteractionRecord = serde_json::from_slice(&stored).unwrap();
    assert_eq!(back, rec);
    assert_eq!(back.params.as_ref().unwrap().get(), r.params_json);
    let pb = back.to_pb();
    assert_eq!(pb.requested_schema_json, raw);
    assert_eq!(pb.status, "open");
    assert_eq!(pb_from_json(&pb_to_json(&pb)), pb);
}

#[test]
fn requests_are_validated() {
    let bad = |f: &dyn Fn(&mut InteractRequest), needle: &str| {
        let mut r = form_request("i1");
        f(&mut r);
        match record_from_request(&r, 0, T) {
            Err(InteractionError::Invalid(m)) => assert!(m.contains(needle), "{m} !~ {needle}"),
            other => panic!("{needle}: {other:?}"),
        }
    };
    bad(&|r| r.interaction_id = "a/b".into(), "interaction_id");
    bad(
        &|r| r.interaction_id = String::new(),
        "interaction_id: required",
    );
    bad(&|r| r.session_id = String::new(), "session_id");
    bad(&|r| r.kind = "approval".into(), "kind: approvals");
    bad(&|r| r.kind = "sampling".into(), "kind:");
    bad(
        &|r| r.params_json = "{".into(),
        "params_json: not valid JSON",
    );
    bad(&|r| r.params_json = "[]".into(), "must be a JSON object");
    bad(
        &|r| r.params_json = json!({"mode": "url", "message": "m"}).to_string(),
        "params_json.mode",
    );
    bad(
        &|r| r.params_json = json!({"message": "m"}).to_string(),
        "requestedSchema: required",
    );
    bad(
        &|r| {
            r.params_json =
                json!({"message": "m", "requestedSchema": {"type": "string"}}).to_string()
        },
        "params_json.requestedSchema",
    );
    bad(
        &|r| r.params_json = format!("{{\"message\":\"{}\"}}", "x".repeat(MAX_PARAMS_BYTES)),
        "bytes is more than",
    );
    let mut r = url_request("u", "javascript:alert(1)");
    assert!(matches!(
        record_from_request(&r, 0, T),
        Err(InteractionError::Invalid(m)) if m.contains("scheme")
    ));
    r.params_json = json!({"mode": "url", "message": "m", "url": "https://x.example/"}).to_string();
    assert!(matches!(
        record_from_request(&r, 0, T),
        Err(InteractionError::Invalid(m)) if m.contains("elicitationId")
    ));
}

#[test]
fn url_records_carry_the_full_domain() {
    let rec = record_from_request(
        &url_request(
            "u1",
            "https://login.auth.example.co.uk:8443/oauth?state=secret",
        ),
        0,
        T,
    )
    .unwrap();
    assert_eq!(rec.kind, Kind::Url);
    assert_eq!(rec.url_domain, "login.auth.example.co.uk");
    assert_eq!(rec.elicitation_id, "e-1");
    assert_eq!(
        url_domain("https://bücher.example/x").unwrap(),
        "xn--bcher-kva.example"
    );
}

#[test]
fn actions_fit_kinds() {
    use Action::*;
    for a in [Accept, Decline, Cancel] {
        assert!(a.fits(Kind::Form) && a.fits(Kind::Url), "{a:?}");
    }
    for a in [Approve, Deny] {
        assert!(!a.fits(Kind::Form) && !a.fits(Kind::Url), "{a:?}");
        assert!(a.fits(Kind::Approval));
    }
    assert!(Cancel.fits(Kind::Approval));
    assert!(!Accept.fits(Kind::Approval) && !Decline.fits(Kind::Approval));
    assert_eq!(Action::parse("yes"), None);
    assert_eq!(Action::parse("deny"), Some(Deny));
}

#[test]
fn form_answers_are_validated_and_stay_open_when_wrong() {
    let rec = record_from_request(&form_request("i1"), 1_000, T).unwrap();
    let err = apply_answer(
        &rec,
        Action::Accept,
        &json!({"city": "X", "count": 0}),
        2_000,
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, AnswerError::Form(_)));
    assert!(msg.contains("city") && msg.contains("count"), "{msg}");
    // Null content counts as {}: the required field is reported.
    let err = apply_answer(&rec, Action::Accept, &Value::Null, 2_000).unwrap_err();
    assert!(err.to_string().contains("city"), "{err}");
    let ok = apply_answer(&rec, Action::Accept, &json!({"city": "Oslo"}), 2_000).unwrap();
    assert_eq!(ok.status, Status::Resolved);
    assert_eq!(ok.outcome, Some(Outcome::Accept));
    assert_eq!(ok.resolved_at_ms, 2_000);
    assert_eq!(
        ok.elicit_result(),
        json!({"action": "accept", "content": {"city": "Oslo"}})
    );
    // Content is only looked at on accept.
    let declined = apply_answer(&rec, Action::Decline, &json!("junk"), 2_000).unwrap();
    assert_eq!(declined.elicit_result(), json!({"action": "decline"}));
    assert_eq!(declined.content, None);
    // Once resolved, nothing more.
    assert!(matches!(
        apply_answer(&ok, Action::Cancel, &Value::Null, 3_000),
        Err(AnswerError::AlreadyResolved { .. })
    ));
    // Wrong action for the kind.
    assert!(matches!(
        apply_answer(&rec, Action::Approve, &Value::Null, 2_000),
        Err(AnswerError::WrongAction { .. })
    ));
    // Expired.
    assert!(matches!(
        apply_answer(&rec, Action::Cancel, &Value::Null, 601_000),
        Err(AnswerError::Expired(_))
    ));
}

#[test]
fn url_accept_waits_for_completion_when_the_server_can_report_it() {
    let rec = record_from_request(&url_request("u1", "https://a.example/"), 0, T).unwrap();
    let accepted = apply_answer(&rec, Action::Accept, &json!({"ignored": true}), 5).unwrap();
    assert_eq!(accepted.status, Status::Accepted);
    assert_eq!(accepted.content, None);
    assert_eq!(accepted.elicit_result(), json!({"action": "accept"}));
    assert!(matches!(
        apply_answer(&accepted, Action::Cancel, &Value::Null, 6),
        Err(AnswerError::AwaitingCompletion(_))
    ));
    let done = apply_end(&accepted, Outcome::Accept, reason::COMPLETED, 7).unwrap();
    assert_eq!(done.status, Status::Resolved);
    assert_eq!(done.outcome, Some(Outcome::Accept));
    assert_eq!(done.reason, reason::COMPLETED);
    // An accepted URL that times out keeps `accept`: the server has it.
    let late = apply_end(&accepted, Outcome::Timeout, reason::TIMEOUT, 7).unwrap();
    assert_eq!(late.outcome, Some(Outcome::Accept));
    assert_eq!(late.reason, reason::NOT_COMPLETED);
    assert!(apply_end(&done, Outcome::Cancel, reason::SESSION_DELETED, 8).is_none());
    let declined = apply_answer(&rec, Action::Decline, &Value::Null, 5).unwrap();
    assert_eq!(declined.status, Status::Resolved);
    // A 2026-07-28 server's question (it has a key, and no elicitationId)
    // is never reported complete: accepting it resolves it.
    let modern = InteractRequest {
        key: "link".into(),
        params_json: json!({"mode": "url", "message": "Link", "url": "https://a.example/"})
            .to_string(),
        ..url_request("u2", "https://a.example/")
    };
    let rec = record_from_request(&modern, 0, T).unwrap();
    let done = apply_answer(&rec, Action::Accept, &Value::Null, 5).unwrap();
    assert_eq!(done.status, Status::Resolved);
    assert_eq!(done.outcome, Some(Outcome::Accept));
    assert_eq!(done.reason, reason::ANSWERED);
    assert_eq!(done.resolved_at_ms, 5);
    assert_eq!(done.elicit_result(), json!({"action": "accept"}));
}

#[test]
fn approvals_and_timeouts() {
    let rec = approval();
    let ok = apply_answer(&rec, Action::Approve, &Value::Null, 2_000).unwrap();
    assert_eq!(ok.outcome, Some(Outcome::Approve));
    let no = apply_answer(&rec, Action::Deny, &Value::Null, 2_000).unwrap();
    assert_eq!(no.outcome, Some(Outcome::Deny));
    let t = apply_end(&rec, Outcome::Timeout, reason::TIMEOUT, 9).unwrap();
    assert_eq!(t.outcome, Some(Outcome::Timeout));
    // A timeout is a cancel towards the server.
    let form = record_from_request(&form_request("i"), 0, T).unwrap();
    let t = apply_end(&form, Outcome::Timeout, reason::TIMEOUT, 9).unwrap();
    assert_eq!(t.elicit_result(), json!({"action": "cancel"}));
    assert_eq!(t.to_pb().outcome, "timeout");
    for (o, text) in [
        (ApprovalOutcome::Denied, "denied"),
        (ApprovalOutcome::TimedOut, "in time"),
        (
            ApprovalOutcome::Cancelled("session deleted".into()),
            "cancelled",
        ),
    ] {
        assert!(o.message("orders", "drop").starts_with("not approved: "));
        assert!(o.message("orders", "drop").contains(text));
        let r = o.not_approved_result("orders", "drop").unwrap();
        assert_eq!(r["isError"], true);
    }
    assert!(
        ApprovalOutcome::Approved
            .not_approved_result("s", "t")
            .is_none()
    );
}

#[test]
fn changes_say_required_and_resolved() {
    let rec = record_from_request(&form_request("i"), 0, T).unwrap();
    let appeared = InteractionChange {
        session: "s1".into(),
        id: "i".into(),
        before: None,
        after: Some(rec.clone()),
    };
    assert!(appeared.required().is_some() && appeared.resolved().is_none());
    let done = apply_end(&rec, Outcome::Cancel, reason::SESSION_DELETED, 1).unwrap();
    let resolved = InteractionChange {
        before: Some(Status::Open),
        after: Some(done.clone()),
        ..appeared.clone()
    };
    assert!(resolved.required().is_none() && resolved.resolved().is_some());
    let again = InteractionChange {
        before: Some(Status::Resolved),
        after: Some(done),
        ..appeared.clone()
    };
    assert!(again.resolved().is_none());
    let gone = InteractionChange {
        before: Some(Status::Resolved),
        after: None,
        ..appeared
    };
    assert!(gone.required().is_none() && gone.resolved().is_none());
}

/// The read model follows interaction records through the store watch and
/// emits one change per real change.
#[tokio::test]
async fn state_follows_interactions() {
    use crate::store::{EmbeddedConfig, StoreConfig};
    let dir = tempfile::tempdir().unwrap();
    let store = AnyStore::open(StoreConfig::Embedded(EmbeddedConfig::new(
        dir.path().join("s.redb"),
    )))
    .await
    .unwrap();
    let state = State::start(store.clone()).await.unwrap();
    let mut changes = state.subscribe();
    let rec = record_from_request(&form_request("i"), 0, T).unwrap();
    let key = interaction_key("s1", "i");
    let rev = store
        .put(&key, serde_json::to_vec(&rec).unwrap(), None)
        .await
        .unwrap();
    assert!(state.wait_for(rev, Duration::from_secs(5)).await);
    assert_eq!(
        state.snapshot().interactions["s1"]["i"].status,
        Status::Open
    );
    let next = |changes: &mut tokio::sync::broadcast::Receiver<crate::state::Change>| loop {
        match changes.try_recv() {
            Ok(crate::state::Change::Interaction(c)) => return *c,
            Ok(_) => continue,
            Err(e) => panic!("no interaction change: {e:?}"),
        }
    };
    assert!(next(&mut changes).required().is_some());
    let done = apply_end(&rec, Outcome::Timeout, reason::TIMEOUT, 5).unwrap();
    let rev = store
        .put(&key, serde_json::to_vec(&done).unwrap(), None)
        .await
        .unwrap();
    assert!(state.wait_for(rev, Duration::from_secs(5)).await);
    assert!(next(&mut changes).resolved().is_some());
    // A record under a key that does not match it is ignored.
    let rev = store
        .put(
            &interaction_key("s2", "i"),
            serde_json::to_vec(&rec).unwrap(),
            None,
        )
        .await
        .unwrap();
    assert!(state.wait_for(rev, Duration::from_secs(5)).await);
    assert!(!state.snapshot().interactions.contains_key("s2"));
    store.delete(&key).await.unwrap();
    let c = loop {
        let c = tokio::time::timeout(Duration::from_secs(5), changes.recv())
            .await
            .unwrap()
            .unwrap();
        if let crate::state::Change::Interaction(c) = c {
            break *c;
        }
    };
    assert!(c.after.is_none());
    assert!(!state.snapshot().interactions.contains_key("s1"));
}

#[test]
fn roots_questions_take_root_objects_only() {
    let req = InteractRequest {
        kind: "roots".into(),
        params_json: "{}".into(),
        key: "client_roots".into(),
        ..form_request("r-1")
    };
    let rec = record_from_request(&req, 1_000, T).unwrap();
    assert_eq!((rec.kind, rec.key.as_str()), (Kind::Roots, "client_roots"));
    assert!(Action::Accept.fits(Kind::Roots) && !Action::Approve.fits(Kind::Roots));
    for bad in [
        json!({"uri": "file:///a"}),
        json!([{"uri": "no scheme"}]),
        json!([1]),
    ] {
        assert!(
            matches!(
                apply_answer(&rec, Action::Accept, &bad, 2_000),
                Err(AnswerError::Roots(_))
            ),
            "{bad}"
        );
    }
    // A bare list or a whole ListRootsResult; each Root kept as sent.
    let roots = json!([{"uri": "file:///a", "name": "A", "_meta": {"k": 1}}]);
    for answer in [roots.clone(), json!({"roots": roots})] {
        let done = apply_answer(&rec, Action::Accept, &answer, 2_000).unwrap();
        assert_eq!(done.elicit_result(), json!({"roots": roots}));
    }
    let declined = apply_answer(&rec, Action::Decline, &Value::Null, 2_000).unwrap();
    assert_eq!(declined.elicit_result(), json!({"action": "decline"}));
}

/// Two replicas' interactions over one embedded store; the session `s1`.
async fn two_replicas(dir: &std::path::Path) -> (Interactions, Interactions) {
    use crate::store::{EmbeddedConfig, StoreConfig};
    let store = Metered::new(
        AnyStore::open(StoreConfig::Embedded(EmbeddedConfig::new(
            dir.join("s.redb"),
        )))
        .await
        .unwrap(),
        Metrics::new(),
    );
    let session = SessionRecord {
        id: "s1".into(),
        enabled_servers: vec!["orders".into()],
        permission_mode: Default::default(),
        roots: vec![],
        created_at_ms: 0,
        updated_at_ms: 0,
        owner: String::new(),
    };
    store
        .put(
            &session_key("s1"),
            serde_json::to_vec(&session).unwrap(),
            None,
        )
        .await
        .unwrap();
    let one = || async {
        Interactions::new(
            store.clone(),
            State::start(store.clone()).await.unwrap(),
            Metrics::new(),
            Arc::new(Audit::to_log()),
            T,
            CancellationToken::new(),
        )
    };
    (one().await, one().await)
}

fn waited_on(id: &str, waiter: &str) -> InteractionRecord {
    InteractionRecord {
        id: id.into(),
        waiter: waiter.into(),
        created_at_ms: now_ms(),
        expires_at_ms: now_ms() + 600_000,
        ..approval()
    }
}

#[tokio::test]
async fn the_sweeper_cancels_the_approvals_whose_replica_is_gone_and_only_those() {
    let dir = tempfile::tempdir().unwrap();
    let (this, other) = two_replicas(dir.path()).await;
    let lease = other
        .register_replica(Duration::from_secs(30))
        .await
        .unwrap();
    let form = InteractionRecord {
        created_at_ms: now_ms(),
        expires_at_ms: now_ms() + 600_000,
        ..record_from_request(&form_request("form"), 0, T).unwrap()
    };
    for rec in [
        waited_on("of-other", other.replica_id()),
        waited_on("of-a-dead-one", "dead"),
        // This replica's own: it is alive, whatever its key says.
        waited_on("of-this", this.replica_id()),
        form,
    ] {
        this.create(rec).await.unwrap();
    }
    let status = |id: &'static str| {
        let this = this.clone();
        async move { this.read("s1", id).await.unwrap().unwrap().0 }
    };

    assert_eq!(this.sweep().await, 1);
    let dead = status("of-a-dead-one").await;
    assert_eq!(dead.status, Status::Resolved);
    assert_eq!(dead.outcome, Some(Outcome::Cancel));
    assert_eq!(dead.reason, reason::CALL_ENDED);
    for id in ["of-other", "of-this", "form"] {
        assert_eq!(status(id).await.status, Status::Open, "{id}");
    }

    // The other replica's key goes (its lease ends): its approval is
    // cancelled, and an answer to it refused.
    other.store.revoke(lease).await.unwrap();
    assert_eq!(this.sweep().await, 1);
    assert_eq!(status("of-other").await.reason, reason::CALL_ENDED);
    let refused = this.answer("s1", "of-other", "approve", "").await;
    assert!(
        matches!(refused, Err(InteractionError::Precondition(_))),
        "{refused:?}"
    );
    for id in ["of-this", "form"] {
        assert_eq!(status(id).await.status, Status::Open, "{id}");
    }
    assert_eq!(this.sweep().await, 0);
}
