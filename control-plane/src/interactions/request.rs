//! Checking what a sidecar asks for (`SidecarRegistry.Interact`): ids,
//! texts, sizes, the elicitation params and a URL's domain, into the
//! record to store. Bad input is refused with a message naming the field.

use super::*;

/// [`crate::model::check_id`] as an interaction's error.
pub fn check_id(field: &str, id: &str) -> Result<(), InteractionError> {
    crate::model::check_id(field, id).map_err(InteractionError::Invalid)
}

fn check_text(field: &str, s: &str) -> Result<(), InteractionError> {
    if s.len() > MAX_TEXT_LEN {
        return Err(InteractionError::Invalid(format!(
            "{field}: longer than {MAX_TEXT_LEN} bytes"
        )));
    }
    Ok(())
}

/// What a sidecar asks (`SidecarRegistry.Interact`).
#[derive(Debug, Clone, Default)]
pub struct InteractRequest {
    /// The idempotency key.
    pub interaction_id: String,
    /// Server.
    pub server: String,
    /// Session.
    pub session_id: String,
    /// Run (optional).
    pub run_id: String,
    /// Tool (optional).
    pub tool: String,
    /// `form`, `url` or `roots`.
    pub kind: String,
    /// The `elicitation/create` (or `roots/list`) params, JSON text.
    pub params_json: String,
    /// The server's own key for the question (2026-07-28 `inputRequests`);
    /// may be empty.
    pub key: String,
    /// Shared by the questions a server asked at once; empty when alone.
    pub together_id: String,
    /// How many questions were asked at once (0 when alone).
    pub together_count: u32,
}

/// A new record from a sidecar's request (validated: kind, params, URL),
/// created at `now` and expiring after `timeout`.
pub fn record_from_request(
    r: &InteractRequest,
    now: i64,
    timeout: Duration,
) -> Result<InteractionRecord, InteractionError> {
    check_id("interaction_id", &r.interaction_id)?;
    check_id("session_id", &r.session_id)?;
    if r.server.is_empty() {
        return Err(InteractionError::Invalid("server: required".into()));
    }
    check_text("server", &r.server)?;
    check_text("run_id", &r.run_id)?;
    check_text("tool", &r.tool)?;
    check_text("key", &r.key)?;
    if !r.together_id.is_empty() {
        check_id("together_id", &r.together_id)?;
        if r.together_count < 2 {
            return Err(InteractionError::Invalid(format!(
                "together_count: {} with a together_id (the questions asked at once are at least 2)",
                r.together_count
            )));
        }
    }
    let kind = match r.kind.as_str() {
        "form" => Kind::Form,
        "url" => Kind::Url,
        "roots" => Kind::Roots,
        "approval" => {
            return Err(InteractionError::Invalid(
                "kind: approvals are raised by the control plane, not by servers".into(),
            ));
        }
        other => {
            return Err(InteractionError::Invalid(format!(
                "kind: {other:?} is not \"form\", \"url\" or \"roots\""
            )));
        }
    };
    if r.params_json.len() > MAX_PARAMS_BYTES {
        return Err(InteractionError::Invalid(format!(
            "params_json: {} bytes is more than the {MAX_PARAMS_BYTES} allowed",
            r.params_json.len()
        )));
    }
    let raw: Box<RawValue> = serde_json::from_str(&r.params_json)
        .map_err(|e| InteractionError::Invalid(format!("params_json: not valid JSON: {e}")))?;
    let params: Value = serde_json::from_str(raw.get())
        .map_err(|e| InteractionError::Invalid(format!("params_json: not valid JSON: {e}")))?;
    let Some(obj) = params.as_object() else {
        return Err(InteractionError::Invalid(
            "params_json: must be a JSON object".into(),
        ));
    };
    let message = match obj.get("message") {
        Some(Value::String(m)) => m.clone(),
        None => String::new(),
        Some(_) => {
            return Err(InteractionError::Invalid(
                "params_json.message: must be a string".into(),
            ));
        }
    };
    let mode = match obj.get("mode") {
        None => "form",
        Some(Value::String(m)) => m.as_str(),
        Some(_) => {
            return Err(InteractionError::Invalid(
                "params_json.mode: must be a string".into(),
            ));
        }
    };
    if kind != Kind::Roots && mode != kind.as_str() {
        return Err(InteractionError::Invalid(format!(
            "params_json.mode: {mode:?} does not match kind {:?}",
            kind.as_str()
        )));
    }
    let mut rec = InteractionRecord {
        id: r.interaction_id.clone(),
        session_id: r.session_id.clone(),
        run_id: r.run_id.clone(),
        kind,
        server: r.server.clone(),
        tool: r.tool.clone(),
        message,
        params: Some(raw),
        url: String::new(),
        url_domain: String::new(),
        elicitation_id: String::new(),
        key: r.key.clone(),
        together_id: r.together_id.clone(),
        together_count: if r.together_id.is_empty() {
            0
        } else {
            r.together_count
        },
        waiter: String::new(),
        status: Status::Open,
        outcome: None,
        reason: String::new(),
        content: None,
        created_at_ms: now,
        expires_at_ms: now.saturating_add(timeout.as_millis() as i64),
        resolved_at_ms: 0,
    };
    match kind {
        Kind::Form => {
            let schema = obj.get("requestedSchema").ok_or_else(|| {
                InteractionError::Invalid("params_json.requestedSchema: required for a form".into())
            })?;
            if let Err(errors) = form::validate_answer(schema, &json!({})) {
                let broken: Vec<String> = errors
                    .for_field(form::SCHEMA_FIELD)
                    .map(|e| e.problem.clone())
                    .collect();
                if !broken.is_empty() {
                    return Err(InteractionError::Invalid(format!(
                        "params_json.requestedSchema: {}",
                        broken.join("; ")
                    )));
                }
            }
        }
        Kind::Url => {
            let url = obj.get("url").and_then(Value::as_str).ok_or_else(|| {
                InteractionError::Invalid("params_json.url: required (a string) for a url".into())
            })?;
            rec.url_domain = url_domain(url)
                .map_err(|e| InteractionError::Invalid(format!("params_json.url: {e}")))?;
            rec.url = url.to_owned();
            // 2025-11-25 URL elicitations name themselves (the server's
            // `notifications/elicitation/complete` refers to it). A
            // 2026-07-28 `inputRequests` entry (it has a key) has no
            // `elicitationId` in its schema: the interaction's id stands in.
            rec.elicitation_id = obj
                .get("elicitationId")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .or_else(|| (!r.key.is_empty()).then_some(r.interaction_id.as_str()))
                .ok_or_else(|| {
                    InteractionError::Invalid(
                        "params_json.elicitationId: required (a non-empty string) for a url".into(),
                    )
                })?
                .to_owned();
        }
        Kind::Roots => {}
        Kind::Approval => unreachable!("rejected above"),
    }
    Ok(rec)
}

/// The full host of an `http` or `https` URL (IDNs in their ASCII form, as
/// browsers show them in the address bar's security check).
pub fn url_domain(url: &str) -> Result<String, String> {
    let u = url::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if u.scheme() != "https" && u.scheme() != "http" {
        return Err(format!(
            "scheme {:?} is not allowed (only https and http)",
            u.scheme()
        ));
    }
    match u.host_str() {
        Some(h) if !h.is_empty() => Ok(h.to_owned()),
        _ => Err(format!("{url:?} has no host")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url_request(key: &str, params: Value) -> InteractRequest {
        InteractRequest {
            interaction_id: "i-1".into(),
            server: "s".into(),
            session_id: "sess".into(),
            run_id: String::new(),
            tool: "t".into(),
            kind: "url".into(),
            params_json: params.to_string(),
            key: key.into(),
            ..InteractRequest::default()
        }
    }

    #[test]
    fn a_2026_url_elicitation_needs_no_elicitation_id_and_a_2025_one_does() {
        let params = json!({"mode": "url", "message": "Sign in", "url": "https://login.example/x"});
        let rec = record_from_request(
            &url_request("login", params.clone()),
            0,
            Duration::from_secs(1),
        )
        .expect("a 2026-07-28 inputRequests entry");
        assert_eq!(rec.elicitation_id, "i-1");
        assert_eq!(rec.url_domain, "login.example");
        let e =
            record_from_request(&url_request("", params), 0, Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("elicitationId"), "{e}");
        let named = json!({"mode": "url", "message": "m", "url": "https://a.example/", "elicitationId": "e-9"});
        let rec = record_from_request(&url_request("k", named), 0, Duration::from_secs(1)).unwrap();
        assert_eq!(rec.elicitation_id, "e-9");
    }

    #[test]
    fn questions_asked_at_once_name_their_group_and_its_size() {
        let params = json!({"mode": "url", "message": "Sign in", "url": "https://login.example/x"});
        let grouped = |id: &str, count: u32| InteractRequest {
            together_id: id.into(),
            together_count: count,
            ..url_request("k", params.clone())
        };
        let rec = record_from_request(&grouped("g-1", 3), 0, Duration::from_secs(1)).unwrap();
        assert_eq!((rec.together_id.as_str(), rec.together_count), ("g-1", 3));
        // Alone: a count without an id means nothing.
        let rec = record_from_request(&grouped("", 3), 0, Duration::from_secs(1)).unwrap();
        assert_eq!((rec.together_id.as_str(), rec.together_count), ("", 0));
        for (id, count, says) in [
            ("g-1", 1, "together_count: 1 with a together_id"),
            ("g/1", 2, "together_id"),
        ] {
            let e =
                record_from_request(&grouped(id, count), 0, Duration::from_secs(1)).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
        }
    }
}
