//! Tasks for MCP clients (2025-11-25 basic/utilities/tasks; 2026-07-28
//! SEP-2663, the `io.modelcontextprotocol/tasks` extension). Each task is a
//! background call of stage B ([`crate::background`]) and its `taskId` is
//! the background call's id: a task outlives its request, the replica and
//! the sidecar that run it, and any replica answers for it.
//!
//! - **When.** A client that takes tasks ([`super::tasks_declared`]:
//!   2025-11-25 a `tools/call` with `task`, or a session that declared
//!   `capabilities.tasks.requests.tools.call`; 2026-07-28 the extension in
//!   the request's client capabilities) gets a task when its call moves to
//!   the background: at once for a 2025-11-25 `tools/call` with `task`
//!   ([`wants_task`]), else when stage B moves it (a tool whose background
//!   mode is `always`, or after `backgroundCalls.autoAfterSec`). Any other
//!   client never gets one: its calls stay in the foreground.
//! - **`tasks/get`**: the task ([`get`]). 2025-11-25: the `Task`.
//!   2026-07-28: the `DetailedTask`, with `result` (completed) or `error`
//!   (failed) inline, and, while the call waits for an answer, status
//!   `input_required` with `inputRequests` keyed as on any request
//!   (`super::interactions::key_of`).
//! - **`tasks/update`** (2026-07-28): `inputResponses` answer those
//!   questions ([`update`]).
//! - **`tasks/result`** (2025-11-25): waits until the task is terminal,
//!   then its `CallToolResult` with `_meta[related-task]`, or its error
//!   ([`result`]). Its SSE stream carries the task's questions
//!   (`super::interactions`).
//! - **`tasks/cancel`**: cancels the background call ([`cancel`]).
//! - **`tasks/list`** (2025-11-25): the engine session's tasks, [`PAGE`] a
//!   page ([`list`]).
//!
//! A task is found only in the engine session that made it: another
//! caller's (or URL's) task is "task not found" (-32602), as is an unknown
//! id.

use super::Ctx;
use super::ingress::Message;
use super::respond::{self, McpError};
use crate::background::BackgroundError;
use crate::model::background::{BackgroundRecord, is_terminal};
use crate::state::Change;
use serde_json::{Map, Value, json};
use std::time::Duration;
use switchyard_common::time::rfc3339_ms;
use switchyard_mcp::era::Era;
use switchyard_mcp::meta;
use switchyard_proto::v1 as pb;

/// The `pollInterval` suggested to clients, ms: a poll is one store read.
pub const POLL_INTERVAL_MS: u64 = 2000;

/// Tasks per `tasks/list` page.
pub const PAGE: u32 = 100;

/// Whether a 2025-11-25 `tools/call` asks to run as a task (`params.task`).
pub fn wants_task(era: Era, msg: &Message) -> bool {
    era == Era::Legacy && msg.params.get("task").is_some_and(Value::is_object)
}

/// What a task shows, from a background call (record or proto).
struct Shown<'a> {
    id: &'a str,
    message: &'a str,
    created_ms: i64,
    updated_ms: i64,
    deadline_ms: i64,
}

impl<'a> Shown<'a> {
    fn of_record(r: &'a BackgroundRecord) -> Self {
        Shown {
            id: &r.id,
            message: &r.status_message,
            created_ms: r.created_at_ms,
            updated_ms: r.updated_at_ms,
            deadline_ms: r.deadline_ms,
        }
    }

    fn of_pb(c: &'a pb::BackgroundCall) -> Self {
        Shown {
            id: &c.id,
            message: &c.status_message,
            created_ms: c.created_at_ms,
            updated_ms: c.updated_at_ms,
            deadline_ms: c.deadline_ms,
        }
    }

    /// The task's fields in `era` (2025 `Task`; 2026 the `Task` fields of
    /// `DetailedTask` and `CreateTaskResult`), with `status` in place of
    /// the record's.
    fn task(&self, era: Era, status: &str) -> Map<String, Value> {
        let ttl = (self.deadline_ms > self.created_ms).then(|| self.deadline_ms - self.created_ms);
        let mut t = Map::new();
        t.insert("taskId".into(), self.id.into());
        t.insert("status".into(), status.into());
        if !self.message.is_empty() {
            t.insert("statusMessage".into(), self.message.into());
        }
        t.insert("createdAt".into(), rfc3339_ms(self.created_ms).into());
        t.insert(
            "lastUpdatedAt".into(),
            rfc3339_ms(self.updated_ms.max(self.created_ms)).into(),
        );
        let (ttl_key, poll_key) = match era {
            Era::Legacy => ("ttl", "pollInterval"),
            Era::Modern => ("ttlMs", "pollIntervalMs"),
        };
        t.insert(ttl_key.into(), ttl.map_or(Value::Null, Value::from));
        if !is_terminal(status) {
            t.insert(poll_key.into(), POLL_INTERVAL_MS.into());
        }
        t
    }
}

/// The `CreateTaskResult` for call `bg`, which moved to the background:
/// 2025-11-25 `{task}`, 2026-07-28 `resultType: "task"` with the task's
/// fields; the server's immediate response, if any, in `_meta`.
pub fn created(era: Era, bg: &pb::BackgroundCall) -> Value {
    let task = Shown::of_pb(bg).task(era, &bg.status);
    let mut out = match era {
        Era::Legacy => json!({"task": task}),
        Era::Modern => {
            let mut m = task;
            m.insert("resultType".into(), meta::result_type::TASK.into());
            Value::Object(m)
        }
    };
    if !bg.immediate_response.is_empty() {
        out["_meta"] = json!({meta::IMMEDIATE_RESPONSE: bg.immediate_response});
    }
    out
}

/// The engine session a task request of `ctx` runs in: the URL's or the
/// 2025-11-25 session's, else the caller's own on this URL (as a
/// 2026-07-28 call's, `super::mrtr::session_for`).
async fn session_of(ctx: &Ctx<'_>) -> Result<String, McpError> {
    if !ctx.session_id.is_empty() {
        return Ok(ctx.session_id.clone());
    }
    super::mrtr::session_for(ctx.ep, ctx.scope, ctx.caller).await
}

/// `params.taskId` of a `tasks/*` request of `ctx`. Errors: a 2026-07-28
/// request that does not declare the extension, 400 with -32021 naming it
/// in `data.requiredCapabilities` (SEP-2663); no `taskId`, -32602.
fn task_id<'m>(ctx: &Ctx<'_>, msg: &'m Message) -> Result<&'m str, McpError> {
    if ctx.era == Era::Modern && !ctx.tasks {
        return Err(McpError::new(
            axum::http::StatusCode::BAD_REQUEST,
            switchyard_mcp::jsonrpc::MISSING_REQUIRED_CLIENT_CAPABILITY,
            format!(
                "{}: the request does not declare the {} extension",
                msg.method,
                meta::TASKS_EXTENSION
            ),
        )
        .with_data(json!({"requiredCapabilities": {"extensions": {meta::TASKS_EXTENSION: {}}}})));
    }
    msg.params
        .get("taskId")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::invalid_params("params.taskId: required, a string"))
}

fn not_found(id: &str) -> McpError {
    McpError::invalid_params(format!("task not found: {id:?}"))
}

fn store(e: BackgroundError) -> McpError {
    match e {
        BackgroundError::NotFound(id) => not_found(&id),
        // Not an id the store could hold: says what is wrong with it.
        BackgroundError::Invalid(why) => McpError::invalid_params(format!("params.taskId: {why}")),
        e => McpError::rpc(respond::INTERNAL_ERROR, e.to_string()),
    }
}

/// The task `id` of `session`, from the store. Errors: -32602 when there
/// is none (or it is another session's).
async fn task_of(ctx: &Ctx<'_>, session: &str, id: &str) -> Result<BackgroundRecord, McpError> {
    ctx.ep
        .cp
        .background
        .get(id)
        .await
        .map_err(store)?
        .filter(|r| r.session_id == session)
        .ok_or_else(|| not_found(id))
}

/// The open questions of the call of `rec`.
fn asked_of(
    ctx: &Ctx<'_>,
    rec: &BackgroundRecord,
) -> Vec<crate::model::interaction::InteractionRecord> {
    super::interactions::open_where(ctx.ep, &rec.session_id, &|q| {
        super::interactions::of_background_call(rec, q)
    })
}

/// The questions the call of `rec` waits on, as `inputRequests` (for a
/// client that may be asked them; `super::interactions::input_requests`).
fn questions(ctx: &Ctx<'_>, rec: &BackgroundRecord, caps: &Value) -> Map<String, Value> {
    // Questions asked at once are shown together (`ready`).
    let (asked, _) = super::interactions::ready(ctx.ep, &rec.session_id, asked_of(ctx, rec));
    // The task the client knows is ours, not the server's.
    super::interactions::input_requests(&asked, caps, |params| {
        super::interactions::relate_to(params, &rec.id)
    })
}

/// `tasks/get`.
pub async fn get(ctx: &Ctx<'_>, msg: &Message) -> Result<Value, McpError> {
    let id = task_id(ctx, msg)?;
    let session = session_of(ctx).await?;
    let rec = task_of(ctx, &session, id).await?;
    let caps = msg
        .meta()
        .and_then(|m| m.get(meta::CLIENT_CAPABILITIES))
        .cloned()
        .unwrap_or_else(|| json!({"elicitation": {}}));
    let asked = match is_terminal(&rec.status) {
        true => Map::new(),
        false => questions(ctx, &rec, &caps),
    };
    // `input_required` only with a question this client can answer (the
    // server's status may come before its question is relayed).
    let status = match (asked.is_empty(), rec.status.as_str()) {
        (false, _) => "input_required",
        (true, "input_required") => "working",
        (true, s) => s,
    };
    let mut task = Shown::of_record(&rec).task(ctx.era, status);
    if ctx.era == Era::Modern {
        match status {
            "completed" => {
                task.insert("result".into(), call_result(&rec)?);
            }
            "failed" => {
                task.insert("error".into(), error_of(&rec));
            }
            "input_required" => {
                task.insert("inputRequests".into(), Value::Object(asked));
            }
            _ => {}
        }
    }
    Ok(Value::Object(task))
}

/// The `CallToolResult` of completed call `rec`, as the server sent it.
fn call_result(rec: &BackgroundRecord) -> Result<Value, McpError> {
    let raw = rec.result.as_ref().map_or("", |r| r.result_json.as_str());
    serde_json::from_str(raw).map_err(|e| {
        McpError::rpc(
            respond::INTERNAL_ERROR,
            format!("task {}: its result is not JSON: {e}", rec.id),
        )
    })
}

/// The JSON-RPC error of failed call `rec`: the server's, else -32603 with
/// the reason.
fn error_of(rec: &BackgroundRecord) -> Value {
    serde_json::from_str::<Value>(&rec.error_json)
        .ok()
        .filter(|e| e.get("code").is_some_and(Value::is_i64))
        .unwrap_or_else(|| json!({"code": respond::INTERNAL_ERROR, "message": rec.status_message}))
}

/// `tasks/result` (2025-11-25): waits until task `params.taskId` is
/// terminal (at most until its deadline), then its result with
/// `_meta[related-task]`, or its error.
pub async fn result(ctx: &Ctx<'_>, msg: &Message) -> Result<Value, McpError> {
    let id = task_id(ctx, msg)?;
    let session = session_of(ctx).await?;
    // Subscribed before the first read: no update is missed.
    let mut changes = ctx.ep.cp.state.subscribe();
    loop {
        let rec = task_of(ctx, &session, id).await?;
        if is_terminal(&rec.status) {
            return finished(&rec);
        }
        let wait = tokio::time::sleep(Duration::from_secs(5));
        tokio::pin!(wait);
        loop {
            tokio::select! {
                c = changes.recv() => match c {
                    Ok(Change::Background(r)) if r.id == id => break,
                    Ok(_) => {}
                    Err(_) => break,
                },
                // A missed update (another replica's write) is read anyway.
                _ = &mut wait => break,
            }
        }
    }
}

/// The `tasks/result` answer of terminal task `rec`.
fn finished(rec: &BackgroundRecord) -> Result<Value, McpError> {
    match rec.status.as_str() {
        "completed" => {
            let mut result = call_result(rec)?;
            if let Some(m) = result.as_object_mut() {
                let meta = m.entry("_meta").or_insert_with(|| json!({}));
                if let Some(meta) = meta.as_object_mut() {
                    meta.insert(meta::RELATED_TASK.into(), json!({"taskId": rec.id}));
                }
            }
            Ok(result)
        }
        "cancelled" => Err(McpError::rpc(
            respond::INTERNAL_ERROR,
            format!("task {} was cancelled", rec.id),
        )),
        _ => Err(McpError::from_object(&error_of(rec), "the task failed")),
    }
}

/// `tasks/cancel`: the cancelled task (2025-11-25), or an empty result
/// (2026-07-28). A terminal task: -32602 (2025-11-25); unchanged and
/// answered as usual (2026-07-28).
pub async fn cancel(ctx: &Ctx<'_>, msg: &Message) -> Result<Value, McpError> {
    let id = task_id(ctx, msg)?;
    let session = session_of(ctx).await?;
    let rec = task_of(ctx, &session, id).await?;
    let cp = &ctx.ep.cp;
    let rec = match cp
        .background
        .cancel(cp, &rec.id, &session, "the user")
        .await
    {
        Ok(rec) => rec,
        Err(BackgroundError::Finished { status, .. }) if ctx.era == Era::Legacy => {
            return Err(McpError::invalid_params(format!(
                "task {id:?} is already {status}; it cannot be cancelled"
            )));
        }
        Err(BackgroundError::Finished { .. }) => rec,
        Err(e) => return Err(store(e)),
    };
    Ok(match ctx.era {
        Era::Legacy => Value::Object(Shown::of_record(&rec).task(ctx.era, &rec.status)),
        Era::Modern => json!({}),
    })
}

/// `tasks/list` (2025-11-25): the session's tasks, oldest first, [`PAGE`]
/// a page (`nextCursor`).
pub async fn list(ctx: &Ctx<'_>, msg: &Message) -> Result<Value, McpError> {
    let cursor = match msg.params.get("cursor") {
        None | Some(Value::Null) => "",
        Some(Value::String(c)) => c.as_str(),
        Some(_) => return Err(McpError::invalid_params("params.cursor: must be a string")),
    };
    let session = session_of(ctx).await?;
    let all = ctx
        .ep
        .cp
        .background
        .list(&session, true)
        .await
        .map_err(store)?;
    let (page, next) = crate::background::page_of(all, PAGE, cursor)
        .map_err(|e| McpError::invalid_params(format!("params.cursor: {e}")))?;
    let tasks: Vec<Value> = page
        .iter()
        .map(|r| Value::Object(Shown::of_record(r).task(ctx.era, &r.status)))
        .collect();
    let mut out = Value::Object(Map::from_iter([("tasks".to_owned(), Value::Array(tasks))]));
    if !next.is_empty() {
        out["nextCursor"] = Value::String(next);
    }
    Ok(out)
}

/// `tasks/update` (2026-07-28): `params.inputResponses` answer the task's
/// open questions; keys that name none are ignored.
pub async fn update(ctx: &Ctx<'_>, msg: &Message) -> Result<Value, McpError> {
    let id = task_id(ctx, msg)?;
    let session = session_of(ctx).await?;
    let rec = task_of(ctx, &session, id).await?;
    let responses = match msg.params.get("inputResponses") {
        Some(Value::Object(m)) => m,
        _ => {
            return Err(McpError::invalid_params(
                "params.inputResponses: required, an object keyed by the task's inputRequests keys",
            ));
        }
    };
    let open = asked_of(ctx, &rec);
    super::interactions::answer_open(ctx.ep, &rec.session_id, &open, responses).await;
    Ok(json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_mcp::jsonrpc;

    fn msg(params: Value) -> Message {
        Message {
            kind: jsonrpc::Kind::Request,
            id: Some(json!(1)),
            method: "tools/call".into(),
            params: params.as_object().cloned().unwrap_or_default(),
            raw: Value::Null,
        }
    }

    #[test]
    fn tasks_are_declared_per_era() {
        let declared = super::super::tasks_declared;
        let legacy = json!({"tasks": {"requests": {"tools": {"call": {}}}}});
        assert!(declared(Era::Legacy, Some(&legacy), &msg(json!({}))));
        assert!(!declared(
            Era::Legacy,
            Some(&json!({"tasks": {}})),
            &msg(json!({}))
        ));
        assert!(!declared(Era::Legacy, None, &msg(json!({}))));
        // The 2025-11-25 schema has no client capability for it: a request
        // with `task` asks for one.
        assert!(declared(Era::Legacy, None, &msg(json!({"task": {}}))));
        assert!(declared(
            Era::Legacy,
            Some(&json!({"tasks": {}})),
            &msg(json!({"task": {"ttl": 60000}}))
        ));
        let modern = msg(
            json!({"_meta": {meta::CLIENT_CAPABILITIES: {"extensions": {meta::TASKS_EXTENSION: {}}}}}),
        );
        assert!(declared(Era::Modern, None, &modern));
        assert!(!declared(
            Era::Modern,
            None,
            &msg(json!({"_meta": {meta::CLIENT_CAPABILITIES: {}}}))
        ));
        assert!(wants_task(
            Era::Legacy,
            &msg(json!({"task": {"ttl": 1000}}))
        ));
        assert!(!wants_task(
            Era::Modern,
            &msg(json!({"task": {"ttl": 1000}}))
        ));
        assert!(!wants_task(Era::Legacy, &msg(json!({"task": 1}))));
    }

    #[test]
    fn created_tasks_have_each_eras_fields() {
        let bg = pb::BackgroundCall {
            id: "b-1".into(),
            status: "working".into(),
            created_at_ms: 1_000,
            updated_at_ms: 2_000,
            deadline_ms: 61_000,
            immediate_response: "started".into(),
            ..Default::default()
        };
        let legacy = created(Era::Legacy, &bg);
        assert_eq!(legacy["task"]["taskId"], "b-1");
        assert_eq!(legacy["task"]["ttl"], 60_000);
        assert_eq!(legacy["task"]["pollInterval"], POLL_INTERVAL_MS);
        assert_eq!(legacy["task"]["createdAt"], "1970-01-01T00:00:01.000Z");
        assert_eq!(legacy["_meta"][meta::IMMEDIATE_RESPONSE], "started");
        let modern = created(Era::Modern, &bg);
        assert_eq!(modern["resultType"], "task");
        assert_eq!(modern["taskId"], "b-1");
        assert_eq!(modern["ttlMs"], 60_000);
        assert_eq!(modern["pollIntervalMs"], POLL_INTERVAL_MS);
        assert!(modern.get("task").is_none());
    }
}
