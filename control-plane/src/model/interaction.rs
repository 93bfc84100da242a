//! `interactions/<session>/<id>`: the stored record of an interaction
//! (stage C: a form, a URL, an approval) and its vocabulary (kinds,
//! statuses, actions, outcomes, reasons). The logic that creates, answers,
//! times out and sweeps them is `crate::interactions`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use switchyard_proto::v1 as pb;

/// Key of an interaction.
pub fn interaction_key(session: &str, id: &str) -> String {
    format!("interactions/{session}/{id}")
}

/// Prefix of a session's interactions.
pub fn session_prefix(session: &str) -> String {
    format!("interactions/{session}/")
}

/// What kind of interaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A form elicitation: fields from `requestedSchema`.
    Form,
    /// A URL elicitation: the user opens a URL themselves.
    Url,
    /// An approval before a `confirm` tool runs.
    Approval,
    /// A server's `roots/list`, asked of the MCP client that made the call
    /// (it declared `roots`); answered with accept and the Root objects.
    Roots,
}

impl Kind {
    /// `form`, `url`, `approval`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Form => "form",
            Kind::Url => "url",
            Kind::Approval => "approval",
            Kind::Roots => "roots",
        }
    }
}

/// Where an interaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Waiting for the user.
    Open,
    /// url: accepted, waiting for the server's completion notification.
    Accepted,
    /// Done.
    Resolved,
}

impl Status {
    /// `open`, `accepted`, `resolved`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Open => "open",
            Status::Accepted => "accepted",
            Status::Resolved => "resolved",
        }
    }
}

/// An answer's action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// form, url: go ahead (form: with content).
    Accept,
    /// form, url: no.
    Decline,
    /// form, url, approval: dismissed.
    Cancel,
    /// approval: yes.
    Approve,
    /// approval: no.
    Deny,
}

impl Action {
    /// Parses an action name.
    pub fn parse(s: &str) -> Option<Action> {
        Some(match s {
            "accept" => Action::Accept,
            "decline" => Action::Decline,
            "cancel" => Action::Cancel,
            "approve" => Action::Approve,
            "deny" => Action::Deny,
            _ => return None,
        })
    }

    /// The name.
    pub fn as_str(self) -> &'static str {
        self.outcome().as_str()
    }

    /// Whether the action answers an interaction of `kind`: form, url and
    /// roots take accept, decline, cancel; approval takes approve, deny,
    /// cancel.
    pub fn fits(self, kind: Kind) -> bool {
        match kind {
            Kind::Form | Kind::Url | Kind::Roots => {
                matches!(self, Action::Accept | Action::Decline | Action::Cancel)
            }
            Kind::Approval => matches!(self, Action::Approve | Action::Deny | Action::Cancel),
        }
    }

    /// The outcome an answer with this action records.
    pub fn outcome(self) -> Outcome {
        match self {
            Action::Accept => Outcome::Accept,
            Action::Decline => Outcome::Decline,
            Action::Cancel => Outcome::Cancel,
            Action::Approve => Outcome::Approve,
            Action::Deny => Outcome::Deny,
        }
    }
}

/// The actions that fit `kind`, for messages.
pub fn actions_for(kind: Kind) -> &'static str {
    match kind {
        Kind::Form | Kind::Url | Kind::Roots => "accept, decline or cancel",
        Kind::Approval => "approve, deny or cancel",
    }
}

/// How an interaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Accepted.
    Accept,
    /// Declined.
    Decline,
    /// Cancelled (by the user, the call's end or the session's deletion).
    Cancel,
    /// Approved.
    Approve,
    /// Denied.
    Deny,
    /// Nobody answered in time; a `cancel` towards the server.
    Timeout,
}

impl Outcome {
    /// The name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Accept => "accept",
            Outcome::Decline => "decline",
            Outcome::Cancel => "cancel",
            Outcome::Approve => "approve",
            Outcome::Deny => "deny",
            Outcome::Timeout => "timeout",
        }
    }
}

/// Why an interaction reached its status (`reason` of the record and of
/// its audit record).
pub mod reason {
    /// The user answered.
    pub const ANSWERED: &str = "answered";
    /// Nobody answered before `expires_at`.
    pub const TIMEOUT: &str = "timeout";
    /// The session was deleted.
    pub const SESSION_DELETED: &str = "session_deleted";
    /// The engine call waiting for an approval ended first (or the
    /// replica it waited on is gone).
    pub const CALL_ENDED: &str = "call_ended";
    /// url: the server sent `notifications/elicitation/complete`.
    pub const COMPLETED: &str = "completed";
    /// url: accepted, but no completion came before `expires_at`.
    pub const NOT_COMPLETED: &str = "not_completed";
}

/// `interactions/<session>/<id>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InteractionRecord {
    /// Id (chosen by the sidecar; random for approvals).
    pub id: String,
    /// The owning session.
    pub session_id: String,
    /// The engine run; empty outside a call (background tasks).
    #[serde(default)]
    pub run_id: String,
    /// Kind.
    pub kind: Kind,
    /// The server concerned.
    pub server: String,
    /// The tool concerned (may be empty).
    #[serde(default)]
    pub tool: String,
    /// The message to the user.
    #[serde(default)]
    pub message: String,
    /// The `elicitation/create` params exactly as the server sent them
    /// (absent for approvals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Box<RawValue>>,
    /// url: the URL (never opened by the gateway).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// url: its full host.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url_domain: String,
    /// url: the `elicitationId`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub elicitation_id: String,
    /// The server's own key for the question (a 2026-07-28 server's
    /// `inputRequests` key); empty for a 2025-11-25 server's request.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// Shared by the questions the server asked at once (one
    /// `inputRequests`, or one -32042 error); empty when asked alone.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub together_id: String,
    /// How many questions were asked at once (0 when alone).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub together_count: u32,
    /// approval: the id of the replica whose call waits for the answer
    /// (its liveness key is `replicas/<id>`, [`crate::model::replica`]);
    /// once that key is gone, the approval is cancelled with reason
    /// `call_ended`. Empty for a server's question (its sidecar waits, and
    /// asks again elsewhere when its replica goes away).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub waiter: String,
    /// Status.
    pub status: Status,
    /// The outcome once answered (also set for an `accepted` URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// Why (see [`reason`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// form, accept: the validated content forwarded to the server; roots,
    /// accept: the client's Root objects (an array).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// Created, ms since the epoch.
    pub created_at_ms: i64,
    /// When it times out, ms since the epoch.
    pub expires_at_ms: i64,
    /// Resolved, ms since the epoch (0 while pending).
    #[serde(default)]
    pub resolved_at_ms: i64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl PartialEq for InteractionRecord {
    fn eq(&self, o: &Self) -> bool {
        self.id == o.id
            && self.session_id == o.session_id
            && self.run_id == o.run_id
            && self.kind == o.kind
            && self.server == o.server
            && self.tool == o.tool
            && self.message == o.message
            && self.params.as_ref().map(|p| p.get()) == o.params.as_ref().map(|p| p.get())
            && self.url == o.url
            && self.url_domain == o.url_domain
            && self.elicitation_id == o.elicitation_id
            && self.key == o.key
            && self.together_id == o.together_id
            && self.together_count == o.together_count
            && self.waiter == o.waiter
            && self.status == o.status
            && self.outcome == o.outcome
            && self.reason == o.reason
            && self.content == o.content
            && self.created_at_ms == o.created_at_ms
            && self.expires_at_ms == o.expires_at_ms
            && self.resolved_at_ms == o.resolved_at_ms
    }
}

#[derive(Deserialize)]
struct SchemaField<'a> {
    #[serde(borrow, rename = "requestedSchema")]
    requested_schema: Option<&'a RawValue>,
}

impl InteractionRecord {
    /// Not resolved yet (open, or an accepted URL).
    pub fn is_pending(&self) -> bool {
        self.status != Status::Resolved
    }

    /// form: `requestedSchema` exactly as the server sent it.
    pub fn requested_schema_raw(&self) -> Option<&str> {
        let params = self.params.as_ref()?;
        serde_json::from_str::<SchemaField<'_>>(params.get())
            .ok()?
            .requested_schema
            .map(RawValue::get)
    }

    /// approval: the call's arguments exactly as the engine sent them.
    pub fn arguments_raw(&self) -> Option<&str> {
        #[derive(Deserialize)]
        struct ArgumentsField<'a> {
            #[serde(borrow)]
            arguments: Option<&'a RawValue>,
        }
        if self.kind != Kind::Approval {
            return None;
        }
        let params = self.params.as_ref()?;
        serde_json::from_str::<ArgumentsField<'_>>(params.get())
            .ok()?
            .arguments
            .map(RawValue::get)
    }

    /// form: `requestedSchema` parsed.
    pub fn requested_schema(&self) -> Value {
        self.requested_schema_raw()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or(Value::Null)
    }

    /// The MCP `ElicitResult` for the server, once the record left `open`:
    /// an accepted URL or any accept is `accept` (form: with the content),
    /// decline is `decline`, everything else (cancel, timeout) `cancel`.
    /// An accepted roots question is the `ListRootsResult` instead,
    /// `{"roots": [...]}`.
    pub fn elicit_result(&self) -> Value {
        match (self.status, self.outcome) {
            (Status::Open, _) => json!({"action": "cancel"}),
            (_, Some(Outcome::Accept)) if self.kind == Kind::Roots => {
                json!({"roots": self.content.clone().unwrap_or_else(|| json!([]))})
            }
            (_, Some(Outcome::Accept | Outcome::Approve)) => match &self.content {
                Some(c) if self.kind == Kind::Form => json!({"action": "accept", "content": c}),
                _ => json!({"action": "accept"}),
            },
            (_, Some(Outcome::Decline | Outcome::Deny)) => json!({"action": "decline"}),
            _ => json!({"action": "cancel"}),
        }
    }

    /// The API's view.
    pub fn to_pb(&self) -> pb::Interaction {
        pb::Interaction {
            id: self.id.clone(),
            session_id: self.session_id.clone(),
            run_id: self.run_id.clone(),
            kind: self.kind.as_str().into(),
            server: self.server.clone(),
            tool: self.tool.clone(),
            message: self.message.clone(),
            requested_schema_json: self.requested_schema_raw().unwrap_or("").to_owned(),
            url: self.url.clone(),
            url_domain: self.url_domain.clone(),
            status: self.status.as_str().into(),
            outcome: self
                .outcome
                .map(|o| o.as_str().to_owned())
                .unwrap_or_default(),
            content_json: self
                .content
                .as_ref()
                .map(Value::to_string)
                .unwrap_or_default(),
            created_at_ms: self.created_at_ms,
            expires_at_ms: self.expires_at_ms,
            resolved_at_ms: self.resolved_at_ms,
            arguments_json: self.arguments_raw().unwrap_or("").to_owned(),
        }
    }
}

/// An interaction in its proto3 JSON form (camelCase names, every field;
/// the `*Ms` numbers as JSON numbers), the data of `interaction.*` events.
pub fn pb_to_json(i: &pb::Interaction) -> Value {
    json!({
        "id": i.id, "sessionId": i.session_id, "runId": i.run_id, "kind": i.kind,
        "server": i.server, "tool": i.tool, "message": i.message,
        "requestedSchemaJson": i.requested_schema_json, "url": i.url, "urlDomain": i.url_domain,
        "status": i.status, "outcome": i.outcome, "contentJson": i.content_json,
        "createdAtMs": i.created_at_ms, "expiresAtMs": i.expires_at_ms,
        "resolvedAtMs": i.resolved_at_ms, "argumentsJson": i.arguments_json,
    })
}

/// Reads back [`pb_to_json`] (the CLI renders events with it).
pub fn pb_from_json(v: &Value) -> pb::Interaction {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let n = |k: &str| {
        v.get(k)
            .and_then(|x| {
                x.as_i64()
                    .or_else(|| x.as_str().and_then(|t| t.parse().ok()))
            })
            .unwrap_or(0)
    };
    pb::Interaction {
        id: s("id"),
        session_id: s("sessionId"),
        run_id: s("runId"),
        kind: s("kind"),
        server: s("server"),
        tool: s("tool"),
        message: s("message"),
        requested_schema_json: s("requestedSchemaJson"),
        url: s("url"),
        url_domain: s("urlDomain"),
        status: s("status"),
        outcome: s("outcome"),
        content_json: s("contentJson"),
        created_at_ms: n("createdAtMs"),
        expires_at_ms: n("expiresAtMs"),
        resolved_at_ms: n("resolvedAtMs"),
        arguments_json: s("argumentsJson"),
    }
}
