use super::*;
use serde_json::json;
use switchyard_mcp::meta;

#[derive(Debug)]
struct Accept;
impl InteractionHandler for Accept {
    fn interact(&self, i: Interaction) -> BoxFuture<'static, Value> {
        Box::pin(
            async move { json!({"action": "accept", "content": {"asked": i.context.session_id}}) },
        )
    }
    fn complete(&self, _: &str, _: &CallContext, _: &str) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

fn relay(bound: Option<&str>) -> Arc<Relay> {
    Arc::new(Relay::new(
        "s",
        Some(Interactions::new(Arc::new(Accept), Audit::to_log())),
        bound.map(str::to_owned),
    ))
}

fn ctx(session: &str) -> CallContext {
    CallContext {
        session_id: session.into(),
        tool: "t".into(),
        roots: vec![json!({"uri": format!("file:///{session}")})],
        ..CallContext::default()
    }
}

#[test]
fn modes() {
    assert_eq!(InteractionKind::of(&json!({})), Ok(InteractionKind::Form));
    assert_eq!(
        InteractionKind::of(&json!({"mode": "url"})),
        Ok(InteractionKind::Url)
    );
    assert!(InteractionKind::of(&json!({"mode": "voice"})).is_err());
}

#[tokio::test]
async fn attribution_needs_one_session() {
    let r = relay(None);
    assert!(r.attribute(&json!({})).is_err(), "nothing in flight");
    let a = r.enter(ctx("a"));
    let a2 = r.enter(ctx("a"));
    assert_eq!(r.attribute(&json!({})).unwrap().session_id, "a");
    let b = r.enter(ctx("b"));
    let declined = r.attribute(&json!({})).unwrap_err();
    assert_eq!(declined.calls.len(), 3);
    drop((a, a2));
    assert_eq!(r.attribute(&json!({})).unwrap().session_id, "b");
    drop(b);
    assert!(r.in_flight().is_empty());
    let task = json!({"_meta": {meta::RELATED_TASK: {"taskId": "t1"}}});
    let _c = r.enter(ctx("c"));
    assert!(r.attribute(&task).unwrap_err().reason.contains("t1"));
}

/// Several calls of one session in flight on a shared connection: which
/// one asked cannot be known, so the question names every tool that could
/// have, and no run of its own, instead of passing for the newest call's.
#[tokio::test]
async fn a_question_during_several_calls_of_a_session_names_them_all() {
    let r = relay(None);
    let call = |tool: &str, run: &str| CallContext {
        tool: tool.into(),
        run_id: run.into(),
        ..ctx("a")
    };
    let _book = r.enter(call("book", "r1"));
    let one = r.attribute(&json!({})).unwrap();
    assert_eq!((one.tool.as_str(), one.run_id.as_str()), ("book", "r1"));
    // The same tool in the same run again: still that call's question.
    let _again = r.enter(call("book", "r1"));
    let same = r.attribute(&json!({})).unwrap();
    assert_eq!((same.tool.as_str(), same.run_id.as_str()), ("book", "r1"));
    // Another tool in the same run: the run is known, the tool is not.
    let cancel = r.enter(call("cancel", "r1"));
    let two = r.attribute(&json!({})).unwrap();
    assert_eq!(
        (
            two.session_id.as_str(),
            two.tool.as_str(),
            two.run_id.as_str()
        ),
        ("a", "book or cancel", "r1")
    );
    assert_eq!(two.roots, ctx("a").roots);
    // Another run too: neither is.
    let _other = r.enter(call("audit", "r2"));
    let three = r.attribute(&json!({})).unwrap();
    assert_eq!(
        (three.tool.as_str(), three.run_id.as_str()),
        ("audit or book or cancel", "")
    );
    drop(cancel);
}

#[tokio::test]
async fn a_bound_connection_belongs_to_its_session() {
    let r = relay(Some("s1"));
    assert_eq!(r.attribute(&json!({})).unwrap().session_id, "s1");
    drop(r.enter(ctx("s1")));
    assert_eq!(r.attribute(&json!({})).unwrap().roots, ctx("s1").roots);
}

#[tokio::test]
async fn inputs_are_answered_from_the_context() {
    let r = relay(None);
    let requests = json!({
        "b": {"method": "roots/list"},
        "a": {"method": "elicitation/create", "params": {"message": "m", "requestedSchema": {"type": "object"}}},
    });
    let answers = mrtr::answer_inputs(&r, &requests, &ctx("x")).await.unwrap();
    assert_eq!(
        answers,
        json!({"b": {"roots": [{"uri": "file:///x"}]}, "a": {"action": "accept", "content": {"asked": "x"}}})
    );
    let keys: Vec<&String> = answers.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["b", "a"]);
    let sampling = json!({"s": {"method": "sampling/createMessage", "params": {}}});
    let e = mrtr::answer_inputs(&r, &sampling, &ctx("x"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("sampling"), "{e}");
    // No session: declined, never asked.
    let answers = mrtr::answer_inputs(&r, &requests, &ctx("")).await.unwrap();
    assert_eq!(answers["a"], json!({"action": "decline"}));
}

/// Answers with the group the question came in: `[id, count]` or null.
#[derive(Debug)]
struct Grouped;
impl InteractionHandler for Grouped {
    fn interact(&self, i: Interaction) -> BoxFuture<'static, Value> {
        let together = i.together.map(|t| json!([t.id, t.count]));
        Box::pin(async move { json!({"action": "accept", "content": {"together": together}}) })
    }
    fn complete(&self, _: &str, _: &CallContext, _: &str) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

#[tokio::test]
async fn questions_asked_at_once_are_sent_as_one_group() {
    let r = Arc::new(Relay::new(
        "s",
        Some(Interactions::new(Arc::new(Grouped), Audit::to_log())),
        None,
    ));
    let form = json!({"method": "elicitation/create", "params": {"message": "m", "requestedSchema": {"type": "object"}}});
    let two = json!({"a": form, "b": form});
    let answers = mrtr::answer_inputs(&r, &two, &ctx("x")).await.unwrap();
    let (a, b) = (
        &answers["a"]["content"]["together"],
        &answers["b"]["content"]["together"],
    );
    assert_eq!(a[1], 2, "{answers}");
    assert_eq!(a, b, "one group: {answers}");
    assert_eq!(a[0].as_str().map(str::len), Some(32), "{answers}");
    // Another round is another group; one question alone is in none.
    let again = mrtr::answer_inputs(&r, &two, &ctx("x")).await.unwrap();
    assert_ne!(again["a"]["content"]["together"][0], a[0]);
    let one = mrtr::answer_inputs(&r, &json!({"a": form}), &ctx("x"))
        .await
        .unwrap();
    assert_eq!(one["a"]["content"]["together"], Value::Null);
    // Roots the call answers itself (its client does not) are no question:
    // the form is asked alone, not held for a roots question that never
    // opens (break-it trial 15).
    let with_roots = json!({"a": form, "r": {"method": "roots/list"}});
    let mixed = mrtr::answer_inputs(&r, &with_roots, &ctx("x"))
        .await
        .unwrap();
    assert_eq!(mixed["a"]["content"]["together"], Value::Null, "{mixed}");
    assert_eq!(mixed["r"], json!({"roots": [{"uri": "file:///x"}]}));
}
