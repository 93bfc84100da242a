//! MCP tasks on `tools/call` (`--tasks`), driven against the real binary by
//! the raw JSON-RPC client of `common` over stdio and Streamable HTTP, in
//! both eras: 2025-11-25 core tasks (`params.task`,
//! `tasks/get|result|cancel|list`, elicitation while `input_required`) and
//! the 2026-07-28 `io.modelcontextprotocol/tasks` extension
//! (`resultType: "task"`, `tasks/get|update|cancel`). See `src/tasks.rs` for
//! the interface.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde_json::{Value, json};

use crate::common::{
    Client, Era, HttpServer, Link, assert_error, field_strs, modern_meta, no_questions,
    server_command, within,
};

const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
const IMMEDIATE: &str = "io.modelcontextprotocol/model-immediate-response";

/// Client capabilities: form elicitation, plus the tasks extension when `tasks`.
fn caps(tasks: bool) -> Value {
    let mut caps = json!({"elicitation": {"form": {}}});
    if tasks {
        caps["extensions"] = json!({ TASKS_EXT: {} });
    }
    caps
}

/// What a tasks client declares: in 2025-11-25's `initialize` form
/// elicitation and `tasks` (list, cancel); in 2026-07-28 requests
/// `caps(true)`, unless a request says otherwise ([`Client::without_ext`]).
fn declared(era: Era) -> Value {
    match era {
        Era::Legacy => json!({"elicitation": {"form": {}}, "tasks": {"list": {}, "cancel": {}}}),
        Era::Modern => caps(true),
    }
}

// ---- the client's task helpers ----------------------------------------------

impl Client {
    /// A client of a fresh `--tasks` server over stdio.
    async fn tasks_stdio(era: Era) -> Self {
        Self::stdio(era, &["--tasks"], declared(era)).await
    }

    /// A new client of a `--tasks` server, with the `Authorization` header
    /// `auth`, if any.
    async fn tasks_http(server: &HttpServer, era: Era, auth: Option<&str>) -> Self {
        Self::http(server, era, auth, declared(era)).await
    }

    /// `params` of a 2026-07-28 request without the tasks extension
    /// (unchanged in 2025-11-25).
    fn without_ext(&self, params: Value) -> Value {
        self.with_caps(params, &caps(false))
    }

    /// Starts a task of `tool`; returns the CreateTaskResult.
    async fn create(&mut self, tool: &str, arguments: Value) -> Value {
        let mut params = json!({"name": tool, "arguments": arguments});
        if self.era == Era::Legacy {
            params["task"] = json!({"ttl": 60_000});
        }
        self.ok("tools/call", params).await
    }

    /// Starts a task of `tool`; returns its id.
    async fn start(&mut self, tool: &str, arguments: Value) -> String {
        let created = self.create(tool, arguments).await;
        task_id(&self.task_of(&created))
    }

    /// The task of a CreateTaskResult, in either era's shape.
    fn task_of(&self, created: &Value) -> Value {
        match self.era {
            Era::Legacy => created["task"].clone(),
            Era::Modern => created.clone(),
        }
    }

    /// `tasks/update` (2026-07-28) of `task_id` with `responses` (the
    /// `inputResponses` by key); returns the result.
    async fn update(&mut self, task_id: &str, responses: Value) -> Value {
        let params = json!({"taskId": task_id, "inputResponses": responses});
        self.ok("tasks/update", params).await
    }

    async fn get(&mut self, task_id: &str) -> Value {
        self.ok("tasks/get", json!({"taskId": task_id})).await
    }

    /// Polls `tasks/get` every 50 ms until the status is not `working`.
    async fn wait_past_working(&mut self, task_id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let task = self.get(task_id).await;
            if task["status"] != "working" {
                return task;
            }
            assert!(Instant::now() < deadline, "still working: {task}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn task_id(task: &Value) -> String {
    task["taskId"].as_str().expect("a taskId").to_owned()
}

fn slept(ms: u64, text: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": format!("slept {ms} ms: {text}")}],
        "structuredContent": {"ms": ms, "text": text},
    })
}

fn assert_not_found(error: &Value) {
    assert_error(error, -32602, "task not found");
}

fn assert_task_shape(client: &Client, task: &Value, status: &str, poll_ms: u64) {
    assert_eq!(task["status"], status, "{task}");
    assert!(task_id(task).len() >= 32, "{task}");
    for key in ["createdAt", "lastUpdatedAt"] {
        let stamp = task[key].as_str().expect(key);
        assert!(stamp.ends_with('Z') && stamp.len() == 24, "{key}: {stamp}");
    }
    match client.era {
        Era::Legacy => {
            assert_eq!(task["ttl"], 60_000, "{task}");
            assert_eq!(task["pollInterval"], poll_ms, "{task}");
            assert!(task.get("resultType").is_none(), "{task}");
        }
        Era::Modern => {
            assert_eq!(task["ttlMs"], 3_600_000, "{task}");
            assert_eq!(task["pollIntervalMs"], poll_ms, "{task}");
        }
    }
}

// ---- scenarios, each run per transport and era ------------------------------

/// Capabilities and listings: `capabilities.tasks` + `execution.taskSupport`
/// (2025-11-25) or the `io.modelcontextprotocol/tasks` extension (2026-07-28).
async fn declares_tasks(client: &mut Client) {
    if client.era == Era::Modern {
        let discover = client.ok("server/discover", json!({})).await;
        assert_eq!(
            discover["capabilities"]["extensions"][TASKS_EXT],
            json!({}),
            "{discover}"
        );
        assert!(discover["capabilities"].get("tasks").is_none());
    }
    let mut tools = Vec::new();
    let mut cursor = None;
    loop {
        let params = match &cursor {
            None => json!({}),
            Some(cursor) => json!({"cursor": cursor}),
        };
        let page = client.ok("tools/list", params).await;
        tools.extend(page["tools"].as_array().unwrap().iter().cloned());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed"))
            .clone()
    };
    let expected = [
        ("task_sleep", "required"),
        ("task_optional", "optional"),
        ("task_fail", "required"),
        ("task_ask", "required"),
        ("task_forever", "required"),
    ];
    for (name, support) in expected {
        let listed = tool(name);
        match client.era {
            Era::Legacy => assert_eq!(listed["execution"]["taskSupport"], support, "{listed}"),
            Era::Modern => assert!(listed.get("execution").is_none(), "{listed}"),
        }
        assert!(listed.get("_meta").is_none(), "{listed}");
    }
    assert!(tool("task_stats").get("execution").is_none());
    assert!(tool("echo").get("execution").is_none());
    assert_eq!(
        tool("task_sleep")["outputSchema"]["required"],
        json!(["ms", "text"])
    );
}

/// `task_sleep`: CreateTaskResult, working, then the CallToolResult.
async fn sleep_task_completes(client: &mut Client) {
    let created = client
        .create(
            "task_sleep",
            json!({"ms": 300, "text": "hi", "pollIntervalMs": 100, "immediate": "Working on it."}),
        )
        .await;
    assert_eq!(created["_meta"][IMMEDIATE], "Working on it.", "{created}");
    let task = client.task_of(&created);
    if client.era == Era::Modern {
        assert_eq!(created["resultType"], "task", "{created}");
    }
    assert_task_shape(client, &task, "working", 100);
    let id = task_id(&task);
    let polled = client.get(&id).await;
    assert_task_shape(client, &polled, "working", 100);
    assert_eq!(polled["createdAt"], task["createdAt"]);
    match client.era {
        Era::Legacy => {
            // Blocks until done, then exactly the tool result + related-task.
            let result = client.ok("tasks/result", json!({"taskId": id})).await;
            let mut expected = slept(300, "hi");
            expected["_meta"] = json!({ RELATED_TASK: {"taskId": id} });
            assert_eq!(result, expected);
            let done = client.get(&id).await;
            assert_eq!(done["status"], "completed", "{done}");
            assert!(done.get("result").is_none(), "{done}");
        }
        Era::Modern => {
            assert_eq!(polled["resultType"], "complete", "{polled}");
            let done = client.wait_past_working(&id).await;
            assert_eq!(done["status"], "completed", "{done}");
            assert_eq!(done["resultType"], "complete");
            assert_eq!(done["result"], slept(300, "hi"));
        }
    }
    // Defaults: pollInterval 5000, no immediate response.
    let created = client.create("task_sleep", json!({"ms": 10})).await;
    assert!(created.get("_meta").is_none(), "{created}");
    let task = client.task_of(&created);
    assert_task_shape(client, &task, "working", 5000);
}

/// `task_fail`: a failed task (JSON-RPC error) and a completed `isError` one.
async fn failing_tasks(client: &mut Client) {
    let error_task = client
        .start("task_fail", json!({"ms": 50, "mode": "error"}))
        .await;
    let is_error_task = client
        .start("task_fail", json!({"ms": 50, "mode": "isError"}))
        .await;
    let tool_error = json!({
        "content": [{"type": "text", "text": "task_fail: tool error on purpose"}],
        "isError": true,
    });
    let failure = json!({"code": -32603, "message": "task_fail: failed on purpose"});
    match client.era {
        Era::Legacy => {
            let error = client
                .err("tasks/result", json!({"taskId": error_task}))
                .await;
            assert_eq!(error, failure);
            assert_eq!(client.get(&error_task).await["status"], "failed");
            let mut expected = tool_error;
            expected["_meta"] = json!({ RELATED_TASK: {"taskId": is_error_task} });
            let result = client
                .ok("tasks/result", json!({"taskId": is_error_task}))
                .await;
            assert_eq!(result, expected);
            assert_eq!(client.get(&is_error_task).await["status"], "completed");
        }
        Era::Modern => {
            let failed = client.wait_past_working(&error_task).await;
            assert_eq!(failed["status"], "failed", "{failed}");
            assert_eq!(failed["error"], failure);
            let done = client.wait_past_working(&is_error_task).await;
            assert_eq!(done["status"], "completed", "{done}");
            assert_eq!(done["result"], tool_error);
        }
    }
    let bad = client
        .err(
            "tools/call",
            json!({"name": "task_fail", "arguments": {"mode": "sometimes"}, "task": {}}),
        )
        .await;
    assert_eq!(bad["code"], -32602, "{bad}");
}

/// `task_ask`: `input_required`, the elicitation, the answer, the result.
async fn asking_task(client: &mut Client, action: &str) {
    let id = client.start("task_ask", json!({"ms": 50})).await;
    let question = client.wait_past_working(&id).await;
    assert_eq!(question["status"], "input_required", "{question}");
    let schema =
        json!({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]});
    let answer = match action {
        "accept" => json!({"action": "accept", "content": {"name": "Ada"}}),
        other => json!({"action": other}),
    };
    match client.era {
        Era::Legacy => {
            let mut asked = Vec::new();
            let mut answering = |request: &Value| {
                asked.push(request.clone());
                answer.clone()
            };
            let reply = client
                .raw("tasks/result", json!({"taskId": id}), &mut answering)
                .await;
            assert_eq!(asked.len(), 1, "{asked:?}");
            assert_eq!(asked[0]["method"], "elicitation/create");
            // rmcp adds a progress token to every request it sends.
            let mut params = asked[0]["params"].clone();
            params["_meta"]
                .as_object_mut()
                .expect("_meta")
                .remove("progressToken");
            assert_eq!(
                params,
                json!({"mode": "form", "message": "Name for the task?", "requestedSchema": schema,
                       "_meta": { RELATED_TASK: {"taskId": id} }})
            );
            let result = &reply["result"];
            assert_eq!(
                result["_meta"][RELATED_TASK]["taskId"],
                id.as_str(),
                "{reply}"
            );
            check_ask_result(result, action);
        }
        Era::Modern => {
            let requests = &question["inputRequests"];
            assert_eq!(
                requests,
                &json!({"name-1": {"method": "elicitation/create", "params":
                    {"mode": "form", "message": "Name for the task?", "requestedSchema": schema}}})
            );
            // Unknown keys are ignored: still waiting.
            let ack = client.update(&id, json!({"name-0": answer})).await;
            assert_eq!(ack, json!({"resultType": "complete"}));
            assert_eq!(client.get(&id).await["status"], "input_required");
            let ack = client.update(&id, json!({"name-1": answer})).await;
            assert_eq!(ack, json!({"resultType": "complete"}));
            let done = client.wait_past_working(&id).await;
            assert_eq!(done["status"], "completed", "{done}");
            check_ask_result(&done["result"], action);
            // An answer to an answered key changes nothing.
            let again = json!({"action": "accept", "content": {"name": "Eve"}});
            client.update(&id, json!({"name-1": again})).await;
            check_ask_result(&client.get(&id).await["result"], action);
        }
    }
}

fn check_ask_result(result: &Value, action: &str) {
    let (text, is_error) = match action {
        "accept" => ("hello Ada".to_owned(), false),
        other => (format!("task_ask: {other}"), true),
    };
    assert_eq!(
        result["content"],
        json!([{"type": "text", "text": text}]),
        "{result}"
    );
    assert_eq!(result["isError"], is_error, "{result}");
}

/// `task_forever` until `tasks/cancel`.
async fn cancelled_task(client: &mut Client) {
    let id = client.start("task_forever", json!({})).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(client.get(&id).await["status"], "working");
    let reply = client.ok("tasks/cancel", json!({"taskId": id})).await;
    match client.era {
        Era::Legacy => {
            assert_eq!(reply["status"], "cancelled", "{reply}");
            assert_eq!(reply["taskId"], id.as_str());
            let again = client.err("tasks/cancel", json!({"taskId": id})).await;
            assert_eq!(again["code"], -32602, "{again}");
            let result = client.err("tasks/result", json!({"taskId": id})).await;
            assert!(
                result["message"].as_str().unwrap().contains("cancelled"),
                "{result}"
            );
        }
        Era::Modern => {
            assert_eq!(reply, json!({"resultType": "complete"}));
            // Ack-only for a terminal task too.
            let again = client.ok("tasks/cancel", json!({"taskId": id})).await;
            assert_eq!(again, json!({"resultType": "complete"}));
        }
    }
    let task = client.get(&id).await;
    assert_eq!(task["status"], "cancelled", "{task}");
}

/// Calls without task augmentation, and unknown task ids.
async fn without_task_augmentation(client: &mut Client) {
    // A task-required tool called without a task (2026-07-28: by a request
    // without the extension).
    let sleep = client.without_ext(json!({"name": "task_sleep", "arguments": {}}));
    let error = client.err("tools/call", sleep).await;
    match client.era {
        Era::Legacy => {
            assert_eq!(error["code"], -32601, "{error}");
            // A tool without task support called as a task.
            let error = client
                .err(
                    "tools/call",
                    json!({"name": "echo", "arguments": {"message": "x"}, "task": {"ttl": 1000}}),
                )
                .await;
            assert_eq!(error["code"], -32601, "{error}");
        }
        Era::Modern => {
            assert_eq!(error["code"], -32021, "{error}");
            assert_eq!(
                error["data"]["requiredCapabilities"],
                json!({"extensions": { TASKS_EXT: {} }})
            );
            let get = client.without_ext(json!({"taskId": "task-x"}));
            let error = client.err("tasks/get", get).await;
            assert_eq!(error["code"], -32021, "{error}");
            let error = client
                .err("tasks/result", json!({"taskId": "task-x"}))
                .await;
            assert_eq!(error["code"], -32601, "{error}");
        }
    }
    // `optional` runs synchronously (2026-07-28: also without the extension).
    let optional = client.without_ext(json!({"name": "task_optional", "arguments": {"ms": 20}}));
    let reply = client
        .raw("tools/call", optional, &mut no_questions())
        .await;
    let result = &reply["result"];
    assert_eq!(result["content"], slept(20, "")["content"], "{reply}");
    assert_eq!(result["structuredContent"], json!({"ms": 20, "text": ""}));
    for method in ["tasks/get", "tasks/cancel"] {
        assert_not_found(&client.err(method, json!({"taskId": "task-nope"})).await);
    }
}

/// `task_stats` sees each `tasks/get` and the gaps between them.
async fn stats_record_poll_gaps(client: &mut Client) {
    let id = client.start("task_sleep", json!({"ms": 60_000})).await;
    for _ in 0..4 {
        client.get(&id).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let stats = client
        .ok(
            "tools/call",
            json!({"name": "task_stats", "arguments": {"taskId": id}}),
        )
        .await;
    let stats = &stats["structuredContent"];
    assert!(stats["tasks"].as_u64().unwrap() >= 1, "{stats}");
    assert!(stats["polls"].as_u64().unwrap() >= 4, "{stats}");
    let per_task = stats["perTask"].as_object().unwrap();
    assert_eq!(per_task.len(), 1, "{stats}");
    assert_eq!(per_task[&id]["polls"], 4, "{stats}");
    let gaps = per_task[&id]["pollGapsMs"].as_array().unwrap();
    assert_eq!(gaps.len(), 3, "{stats}");
    for gap in gaps {
        let gap = gap.as_u64().unwrap();
        assert!((140..2000).contains(&gap), "gap {gap} ms: {stats}");
    }
    client.ok("tasks/cancel", json!({"taskId": id})).await;
}

async fn run_all(mut client: Client) {
    declares_tasks(&mut client).await;
    sleep_task_completes(&mut client).await;
    failing_tasks(&mut client).await;
    asking_task(&mut client, "accept").await;
    asking_task(&mut client, "decline").await;
    cancelled_task(&mut client).await;
    without_task_augmentation(&mut client).await;
    stats_record_poll_gaps(&mut client).await;
}

#[tokio::test]
async fn legacy_tasks_over_stdio() {
    run_all(Client::tasks_stdio(Era::Legacy).await).await;
}

#[tokio::test]
async fn modern_tasks_over_stdio() {
    run_all(Client::tasks_stdio(Era::Modern).await).await;
}

#[tokio::test]
async fn legacy_tasks_over_http() {
    let server = HttpServer::start(Era::Legacy, &["--tasks"]).await;
    run_all(Client::tasks_http(&server, Era::Legacy, Some("Bearer alice")).await).await;
}

#[tokio::test]
async fn modern_tasks_over_http() {
    let server = HttpServer::start(Era::Modern, &["--tasks"]).await;
    run_all(Client::tasks_http(&server, Era::Modern, Some("Bearer alice")).await).await;
}

/// Tasks belong to the `Authorization` identity, not the connection: a new
/// connection (and, in 2025-11-25, a new session) with the same header
/// polls, answers and reads the task; other identities get "task not found".
async fn identity_scoping(era: Era) {
    let server = HttpServer::start(era, &["--tasks"]).await;
    let mut first = Client::tasks_http(&server, era, Some("Bearer alice")).await;
    let sleeper = first.start("task_sleep", json!({"ms": 200})).await;
    let asker = first.start("task_ask", json!({"ms": 20})).await;
    drop(first);

    let mut again = Client::tasks_http(&server, era, Some("Bearer alice")).await;
    assert_eq!(again.get(&sleeper).await["taskId"], sleeper.as_str());
    assert_eq!(
        again.wait_past_working(&asker).await["status"],
        "input_required"
    );
    for (auth, name) in [
        (Some("Bearer mallory"), "another token"),
        (None, "anonymous"),
    ] {
        let mut other = Client::tasks_http(&server, era, auth).await;
        for method in ["tasks/get", "tasks/cancel"] {
            let error = other.err(method, json!({"taskId": sleeper})).await;
            assert_not_found(&error);
            let _ = name;
        }
        if era == Era::Legacy {
            assert_not_found(&other.err("tasks/result", json!({"taskId": sleeper})).await);
            let listed = other.ok("tasks/list", json!({})).await;
            assert_eq!(listed["tasks"], json!([]), "{name}: {listed}");
        } else {
            let update =
                json!({"taskId": asker, "inputResponses": {"name-1": {"action": "decline"}}});
            assert_not_found(&other.err("tasks/update", update).await);
        }
    }
    // The owner finishes both from the new connection.
    let answer = json!({"action": "accept", "content": {"name": "Ada"}});
    match era {
        Era::Legacy => {
            let listed = again.ok("tasks/list", json!({})).await;
            let ids = field_strs(&listed["tasks"], "taskId");
            assert_eq!(ids, [sleeper.as_str(), asker.as_str()], "{listed}");
            let result = again.ok("tasks/result", json!({"taskId": sleeper})).await;
            assert_eq!(result["content"], slept(200, "")["content"]);
            let reply = again
                .raw(
                    "tasks/result",
                    json!({"taskId": asker}),
                    &mut |_: &Value| answer.clone(),
                )
                .await;
            check_ask_result(&reply["result"], "accept");
        }
        Era::Modern => {
            assert_eq!(
                again.wait_past_working(&sleeper).await["status"],
                "completed"
            );
            again.update(&asker, json!({"name-1": answer})).await;
            let done = again.wait_past_working(&asker).await;
            check_ask_result(&done["result"], "accept");
        }
    }
}

#[tokio::test]
async fn legacy_tasks_belong_to_the_authorization_identity() {
    identity_scoping(Era::Legacy).await;
}

#[tokio::test]
async fn modern_tasks_belong_to_the_authorization_identity() {
    identity_scoping(Era::Modern).await;
}

/// A 2025-11-25 task is gone after its `ttl`.
/// The execution log (`SWITCHYARD_REFERENCE_EXECUTIONS`) gets a task
/// tool's line when its task is created, in either era: a 2025-11-25
/// task-augmented `tools/call` is renamed for the task engine, so it never
/// reaches the handler's `tools/call` that records the others.
#[tokio::test]
async fn task_creations_are_in_the_execution_log() {
    for (era, flag) in [(Era::Legacy, "2025-11-25"), (Era::Modern, "2026-07-28")] {
        let log = std::env::temp_dir().join(format!(
            "switchyard-reference-executions-{}-{flag}.log",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&log);
        let mut command = server_command(flag, &["--tasks"]);
        command.env("SWITCHYARD_REFERENCE_EXECUTIONS", &log);
        let server = HttpServer::spawn(command).await;
        let mut client = Client::tasks_http(&server, era, None).await;
        let mut meta = match era {
            Era::Legacy => json!({}),
            Era::Modern => modern_meta(&declared(era)),
        };
        meta["dev.switchyard.test/execution-key"] = json!("K-task");
        let mut params = json!({"name": "task_sleep", "arguments": {"ms": 10}, "_meta": meta});
        if era == Era::Legacy {
            params["task"] = json!({"ttl": 60_000});
        }
        let created = client.ok("tools/call", params).await;
        assert_eq!(client.task_of(&created)["status"], "working", "{created}");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let fields: Vec<Vec<&str>> = text
            .lines()
            .map(|line| line.split_whitespace().collect())
            .collect();
        assert_eq!(fields.len(), 1, "{flag}: {text:?}");
        assert_eq!(fields[0][..2], ["task_sleep", "K-task"], "{flag}: {text:?}");
        assert!(fields[0][2].parse::<u32>().is_ok(), "{flag}: {text:?}");
        let _ = std::fs::remove_file(&log);
    }
}

#[tokio::test]
async fn legacy_task_expires_after_its_ttl() {
    let mut client = Client::tasks_stdio(Era::Legacy).await;
    let created = client
        .ok(
            "tools/call",
            json!({"name": "task_forever", "arguments": {}, "task": {"ttl": 300}}),
        )
        .await;
    let id = task_id(&created["task"]);
    assert_eq!(created["task"]["ttl"], 300);
    assert_eq!(client.get(&id).await["status"], "working");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_not_found(&client.err("tasks/get", json!({"taskId": id})).await);
    let listed = client.ok("tasks/list", json!({})).await;
    assert_eq!(listed["tasks"], json!([]), "{listed}");
}

/// A `dual` server: `initialize` declares `capabilities.tasks` (not the
/// extension), `server/discover` the extension (not `tasks`), and a task
/// created by a 2025-11-25 session can be read and cancelled with 2026-07-28
/// requests of the same identity (SEP-2663 "Backward Compatibility").
#[tokio::test]
async fn dual_era_server_shares_tasks_between_eras() {
    let server = HttpServer::spawn(server_command("dual", &["--tasks"])).await;

    // A 2025-11-25 client that declares no capabilities; `opened` is the
    // whole initialize result.
    let mut legacy = Client::http(&server, Era::Legacy, Some("Bearer dual"), json!({})).await;
    let opened = &legacy.opened;
    assert_eq!(
        opened["capabilities"]["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{opened}"
    );
    assert!(
        opened["capabilities"].get("extensions").is_none(),
        "{opened}"
    );
    let mut modern = Client::tasks_http(&server, Era::Modern, Some("Bearer dual")).await;
    let discover = modern.ok("server/discover", json!({})).await;
    assert_eq!(discover["capabilities"]["extensions"][TASKS_EXT], json!({}));
    assert!(
        discover["capabilities"].get("tasks").is_none(),
        "{discover}"
    );

    let id = legacy
        .start("task_sleep", json!({"ms": 100, "text": "x"}))
        .await;
    let done = modern.wait_past_working(&id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["ttlMs"], 60_000);
    assert_eq!(done["result"], slept(100, "x"));

    let forever = modern.start("task_forever", json!({})).await;
    assert_eq!(legacy.get(&forever).await["pollInterval"], 5000);
    let cancelled = legacy.ok("tasks/cancel", json!({"taskId": forever})).await;
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(modern.get(&forever).await["status"], "cancelled");
}

/// 2025-11-25 over HTTP: a client that leaves a `tasks/result` stream after
/// the question arrived (a restarting gateway) is asked again by its next
/// `tasks/result`, on a new connection and session.
#[tokio::test]
async fn legacy_question_is_asked_again_on_a_new_result_stream() {
    let server = HttpServer::start(Era::Legacy, &["--tasks"]).await;
    let mut first = Client::tasks_http(&server, Era::Legacy, Some("Bearer bob")).await;
    let id = first.start("task_ask", json!({"ms": 10})).await;
    assert_eq!(
        first.wait_past_working(&id).await["status"],
        "input_required"
    );
    let Link::Http(peer) = &first.link else {
        unreachable!("an HTTP client")
    };
    let request =
        json!({"jsonrpc":"2.0","id":"abandoned","method":"tasks/result","params":{"taskId": id}});
    let response = peer.post(&request).send().await.expect("POST tasks/result");
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    while !seen.contains("elicitation/create") {
        let chunk = within("the question", body.next())
            .await
            .expect("stream open")
            .expect("read SSE");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains(RELATED_TASK), "{seen}");
    drop(body);
    drop(first);

    let mut second = Client::tasks_http(&server, Era::Legacy, Some("Bearer bob")).await;
    assert_eq!(second.get(&id).await["status"], "input_required");
    let mut asked = 0;
    let reply = second
        .raw("tasks/result", json!({"taskId": id}), &mut |_: &Value| {
            asked += 1;
            json!({"action": "accept", "content": {"name": "Ada"}})
        })
        .await;
    assert_eq!(asked, 1);
    check_ask_result(&reply["result"], "accept");
    assert_eq!(second.get(&id).await["status"], "completed");
}
