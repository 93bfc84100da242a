//! MCP tasks on `tools/call` (`--tasks`), driven against the real binary by
//! a raw JSON-RPC client over stdio and Streamable HTTP, in both eras:
//! 2025-11-25 core tasks (`params.task`, `tasks/get|result|cancel|list`,
//! elicitation while `input_required`) and the 2026-07-28
//! `io.modelcontextprotocol/tasks` extension (`resultType: "task"`,
//! `tasks/get|update|cancel`). See `src/tasks.rs` for the interface.

use std::{
    process::Stdio as ProcessStdio,
    time::{Duration, Instant},
};

use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
};

const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";
const TASKS_EXT: &str = "io.modelcontextprotocol/tasks";
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
const IMMEDIATE: &str = "io.modelcontextprotocol/model-immediate-response";

async fn within<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(30), future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Era {
    Legacy,
    Modern,
}

impl Era {
    fn flag(self) -> &'static str {
        match self {
            Self::Legacy => LEGACY,
            Self::Modern => MODERN,
        }
    }
}

/// Client capabilities: form elicitation, plus the tasks extension when `tasks`.
fn caps(tasks: bool) -> Value {
    let mut caps = json!({"elicitation": {"form": {}}});
    if tasks {
        caps["extensions"] = json!({ TASKS_EXT: {} });
    }
    caps
}

fn server_command(era: Era, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard-reference-server"));
    command
        .args(["--era", era.flag(), "--tasks"])
        .args(extra)
        .stdin(ProcessStdio::piped())
        .stdout(ProcessStdio::piped())
        .stderr(ProcessStdio::piped())
        .kill_on_drop(true);
    command
}

/// Answers a server-to-client request (`elicitation/create`) with a result.
type Answer<'a> = &'a mut (dyn FnMut(&Value) -> Value + Send);

fn no_questions() -> impl FnMut(&Value) -> Value + Send {
    |request: &Value| panic!("unexpected server request {request}")
}

// ---- stdio ------------------------------------------------------------------

struct StdioPeer {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl StdioPeer {
    async fn start(era: Era) -> Self {
        let mut child = server_command(era, &[]).spawn().expect("start the server");
        let stdin = child.stdin.take().expect("stdin");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut peer = Self {
            _child: child,
            stdin,
            lines,
        };
        if era == Era::Legacy {
            let init = json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{
                "protocolVersion": LEGACY,
                "capabilities": {"elicitation": {"form": {}}, "tasks": {"list": {}, "cancel": {}}},
                "clientInfo": {"name": "tasks-test", "version": "0"}}});
            let reply = peer.exchange(init, &mut no_questions()).await;
            assert_eq!(reply["result"]["protocolVersion"], LEGACY, "{reply}");
            peer.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
                .await;
        }
        peer
    }

    async fn send(&mut self, message: &Value) {
        self.stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .expect("write stdin");
        self.stdin.flush().await.expect("flush stdin");
    }

    async fn exchange(&mut self, request: Value, answer: Answer<'_>) -> Value {
        self.send(&request).await;
        loop {
            let line = within("a stdio message", self.lines.next_line())
                .await
                .expect("read stdout")
                .expect("the server closed stdout");
            let message: Value = serde_json::from_str(&line).expect("a JSON line");
            match (message.get("method"), message.get("id")) {
                (None, Some(id)) if *id == request["id"] => return message,
                (Some(_), Some(id)) => {
                    let reply = json!({"jsonrpc":"2.0","id":id,"result":answer(&message)});
                    self.send(&reply).await;
                }
                _ => {}
            }
        }
    }
}

// ---- Streamable HTTP --------------------------------------------------------

/// A running `--http` server.
struct HttpServer {
    _child: Child,
    url: String,
}

impl HttpServer {
    async fn start(era: Era) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut child = server_command(era, &["--http", "127.0.0.1:0"])
            .spawn()
            .expect("start the server");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let url = within("the listening line", async {
            loop {
                let line = stderr
                    .next_line()
                    .await
                    .expect("read stderr")
                    .expect("the server exited before listening");
                if let Some(url) = line.strip_prefix("listening on ") {
                    return url.to_owned();
                }
            }
        })
        .await;
        // Keep draining stderr so the server never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
        Self { _child: child, url }
    }
}

/// One HTTP client connection (its own reqwest client, so its own TCP
/// connections) with an optional `Authorization` header; in 2025-11-25 also
/// its own session.
struct HttpPeer {
    http: reqwest::Client,
    url: String,
    era: Era,
    auth: Option<String>,
    session: Option<String>,
}

impl HttpPeer {
    async fn connect(server: &HttpServer, era: Era, auth: Option<&str>) -> Self {
        let mut peer = Self {
            http: reqwest::Client::builder().build().expect("an HTTP client"),
            url: server.url.clone(),
            era,
            auth: auth.map(str::to_owned),
            session: None,
        };
        if era == Era::Legacy {
            let init = json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{
                "protocolVersion": LEGACY,
                "capabilities": {"elicitation": {"form": {}}, "tasks": {"list": {}, "cancel": {}}},
                "clientInfo": {"name": "tasks-test", "version": "0"}}});
            let reply = peer.exchange(init, &mut no_questions()).await;
            assert_eq!(reply["result"]["protocolVersion"], LEGACY, "{reply}");
            let status = peer
                .post(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
                .send()
                .await
                .expect("POST initialized")
                .status();
            assert_eq!(status, 202);
        }
        peer
    }

    fn post(&self, message: &Value) -> reqwest::RequestBuilder {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(message.to_string());
        if let Some(auth) = &self.auth {
            request = request.header("authorization", auth);
        }
        match self.era {
            Era::Legacy => {
                if let Some(session) = &self.session {
                    request = request
                        .header("mcp-session-id", session)
                        .header("mcp-protocol-version", LEGACY);
                }
            }
            Era::Modern => {
                request = request.header("mcp-protocol-version", MODERN);
                if let Some(method) = message["method"].as_str() {
                    request = request.header("mcp-method", method);
                    let name = match method {
                        "tools/call" => message["params"]["name"].as_str(),
                        m if m.starts_with("tasks/") => message["params"]["taskId"].as_str(),
                        _ => None,
                    };
                    if let Some(name) = name {
                        request = request.header("mcp-name", name);
                    }
                }
            }
        }
        request
    }

    async fn exchange(&mut self, request: Value, answer: Answer<'_>) -> Value {
        let response = within("an HTTP response", self.post(&request).send())
            .await
            .expect("POST");
        if let Some(session) = response.headers().get("mcp-session-id") {
            self.session = Some(session.to_str().expect("ASCII session id").to_owned());
        }
        let is_sse = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        if !is_sse {
            let text = response.text().await.expect("a body");
            return serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("not JSON: {text:?} (request {request})"));
        }
        let mut body = response.bytes_stream();
        let mut buffer = String::new();
        loop {
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() || data.concat().is_empty() {
                    continue;
                }
                let message: Value = serde_json::from_str(&data.join("\n")).expect("SSE JSON");
                match (message.get("method"), message.get("id")) {
                    (None, Some(id)) if *id == request["id"] => return message,
                    (Some(_), Some(id)) => {
                        let reply = json!({"jsonrpc":"2.0","id":id,"result":answer(&message)});
                        let status = self
                            .post(&reply)
                            .send()
                            .await
                            .expect("POST an answer")
                            .status();
                        assert_eq!(status, 202, "answering {message}");
                    }
                    _ => {}
                }
            }
            let chunk = within("an SSE event", body.next())
                .await
                .expect("the SSE stream ended before the response")
                .expect("read SSE");
            buffer.push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
        }
    }
}

// ---- one client over either transport ---------------------------------------

enum Link {
    Stdio(Box<StdioPeer>),
    Http(HttpPeer),
}

/// A raw JSON-RPC client of one era; 2026-07-28 requests carry the
/// per-request `_meta` (with the tasks extension unless told otherwise).
struct Client {
    link: Link,
    era: Era,
    next_id: u64,
}

impl Client {
    async fn stdio(era: Era) -> Self {
        Self {
            link: Link::Stdio(Box::new(StdioPeer::start(era).await)),
            era,
            next_id: 0,
        }
    }

    async fn http(server: &HttpServer, era: Era, auth: Option<&str>) -> Self {
        Self {
            link: Link::Http(HttpPeer::connect(server, era, auth).await),
            era,
            next_id: 0,
        }
    }

    /// The whole JSON-RPC response message.
    async fn raw(
        &mut self,
        method: &str,
        mut params: Value,
        tasks_cap: bool,
        answer: Answer<'_>,
    ) -> Value {
        self.next_id += 1;
        if self.era == Era::Modern {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": caps(tasks_cap),
            });
        }
        let request = json!({"jsonrpc":"2.0","id":self.next_id,"method":method,"params":params});
        match &mut self.link {
            Link::Stdio(peer) => peer.exchange(request, answer).await,
            Link::Http(peer) => peer.exchange(request, answer).await,
        }
    }

    /// The `result`; panics on an error.
    async fn ok(&mut self, method: &str, params: Value) -> Value {
        let reply = self.raw(method, params, true, &mut no_questions()).await;
        assert!(reply.get("error").is_none(), "{method} failed: {reply}");
        reply["result"].clone()
    }

    /// The `error`; panics on a result.
    async fn err(&mut self, method: &str, params: Value, tasks_cap: bool) -> Value {
        let reply = self
            .raw(method, params, tasks_cap, &mut no_questions())
            .await;
        assert!(
            reply.get("result").is_none(),
            "{method} did not fail: {reply}"
        );
        reply["error"].clone()
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
    assert_eq!(error["code"], -32602, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("task not found"),
        "{error}"
    );
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
                .err("tasks/result", json!({"taskId": error_task}), true)
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
            true,
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
                .raw("tasks/result", json!({"taskId": id}), true, &mut answering)
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
            let ack = client
                .ok(
                    "tasks/update",
                    json!({"taskId": id, "inputResponses": {"name-0": answer}}),
                )
                .await;
            assert_eq!(ack, json!({"resultType": "complete"}));
            assert_eq!(client.get(&id).await["status"], "input_required");
            let ack = client
                .ok(
                    "tasks/update",
                    json!({"taskId": id, "inputResponses": {"name-1": answer}}),
                )
                .await;
            assert_eq!(ack, json!({"resultType": "complete"}));
            let done = client.wait_past_working(&id).await;
            assert_eq!(done["status"], "completed", "{done}");
            check_ask_result(&done["result"], action);
            // An answer to an answered key changes nothing.
            let again = json!({"action": "accept", "content": {"name": "Eve"}});
            client
                .ok(
                    "tasks/update",
                    json!({"taskId": id, "inputResponses": {"name-1": again}}),
                )
                .await;
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
            let again = client
                .err("tasks/cancel", json!({"taskId": id}), true)
                .await;
            assert_eq!(again["code"], -32602, "{again}");
            let result = client
                .err("tasks/result", json!({"taskId": id}), true)
                .await;
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
    match client.era {
        Era::Legacy => {
            let error = client
                .err(
                    "tools/call",
                    json!({"name": "task_sleep", "arguments": {}}),
                    true,
                )
                .await;
            assert_eq!(error["code"], -32601, "{error}");
            // A tool without task support called as a task.
            let error = client
                .err(
                    "tools/call",
                    json!({"name": "echo", "arguments": {"message": "x"}, "task": {"ttl": 1000}}),
                    true,
                )
                .await;
            assert_eq!(error["code"], -32601, "{error}");
        }
        Era::Modern => {
            let error = client
                .err(
                    "tools/call",
                    json!({"name": "task_sleep", "arguments": {}}),
                    false,
                )
                .await;
            assert_eq!(error["code"], -32021, "{error}");
            assert_eq!(
                error["data"]["requiredCapabilities"],
                json!({"extensions": { TASKS_EXT: {} }})
            );
            let error = client
                .err("tasks/get", json!({"taskId": "task-x"}), false)
                .await;
            assert_eq!(error["code"], -32021, "{error}");
            let error = client
                .err("tasks/result", json!({"taskId": "task-x"}), true)
                .await;
            assert_eq!(error["code"], -32601, "{error}");
        }
    }
    // `optional` runs synchronously (2026-07-28: also without the extension).
    let reply = client
        .raw(
            "tools/call",
            json!({"name": "task_optional", "arguments": {"ms": 20}}),
            false,
            &mut no_questions(),
        )
        .await;
    let result = &reply["result"];
    assert_eq!(result["content"], slept(20, "")["content"], "{reply}");
    assert_eq!(result["structuredContent"], json!({"ms": 20, "text": ""}));
    for method in ["tasks/get", "tasks/cancel"] {
        assert_not_found(
            &client
                .err(method, json!({"taskId": "task-nope"}), true)
                .await,
        );
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
    run_all(Client::stdio(Era::Legacy).await).await;
}

#[tokio::test]
async fn modern_tasks_over_stdio() {
    run_all(Client::stdio(Era::Modern).await).await;
}

#[tokio::test]
async fn legacy_tasks_over_http() {
    let server = HttpServer::start(Era::Legacy).await;
    run_all(Client::http(&server, Era::Legacy, Some("Bearer alice")).await).await;
}

#[tokio::test]
async fn modern_tasks_over_http() {
    let server = HttpServer::start(Era::Modern).await;
    run_all(Client::http(&server, Era::Modern, Some("Bearer alice")).await).await;
}

/// Tasks belong to the `Authorization` identity, not the connection: a new
/// connection (and, in 2025-11-25, a new session) with the same header
/// polls, answers and reads the task; other identities get "task not found".
async fn identity_scoping(era: Era) {
    let server = HttpServer::start(era).await;
    let mut first = Client::http(&server, era, Some("Bearer alice")).await;
    let sleeper = first.start("task_sleep", json!({"ms": 200})).await;
    let asker = first.start("task_ask", json!({"ms": 20})).await;
    drop(first);

    let mut again = Client::http(&server, era, Some("Bearer alice")).await;
    assert_eq!(again.get(&sleeper).await["taskId"], sleeper.as_str());
    assert_eq!(
        again.wait_past_working(&asker).await["status"],
        "input_required"
    );
    for (auth, name) in [
        (Some("Bearer mallory"), "another token"),
        (None, "anonymous"),
    ] {
        let mut other = Client::http(&server, era, auth).await;
        for method in ["tasks/get", "tasks/cancel"] {
            let error = other.err(method, json!({"taskId": sleeper}), true).await;
            assert_not_found(&error);
            let _ = name;
        }
        if era == Era::Legacy {
            assert_not_found(
                &other
                    .err("tasks/result", json!({"taskId": sleeper}), true)
                    .await,
            );
            let listed = other.ok("tasks/list", json!({})).await;
            assert_eq!(listed["tasks"], json!([]), "{name}: {listed}");
        } else {
            let update =
                json!({"taskId": asker, "inputResponses": {"name-1": {"action": "decline"}}});
            assert_not_found(&other.err("tasks/update", update, true).await);
        }
    }
    // The owner finishes both from the new connection.
    let answer = json!({"action": "accept", "content": {"name": "Ada"}});
    match era {
        Era::Legacy => {
            let listed = again.ok("tasks/list", json!({})).await;
            let ids: Vec<&str> = listed["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["taskId"].as_str().unwrap())
                .collect();
            assert_eq!(ids, [sleeper.as_str(), asker.as_str()], "{listed}");
            let result = again.ok("tasks/result", json!({"taskId": sleeper})).await;
            assert_eq!(result["content"], slept(200, "")["content"]);
            let reply = again
                .raw(
                    "tasks/result",
                    json!({"taskId": asker}),
                    true,
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
            again
                .ok(
                    "tasks/update",
                    json!({"taskId": asker, "inputResponses": {"name-1": answer}}),
                )
                .await;
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
#[tokio::test]
async fn legacy_task_expires_after_its_ttl() {
    let mut client = Client::stdio(Era::Legacy).await;
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
    assert_not_found(&client.err("tasks/get", json!({"taskId": id}), true).await);
    let listed = client.ok("tasks/list", json!({})).await;
    assert_eq!(listed["tasks"], json!([]), "{listed}");
}

/// A `dual` server: `initialize` declares `capabilities.tasks` (not the
/// extension), `server/discover` the extension (not `tasks`), and a task
/// created by a 2025-11-25 session can be read and cancelled with 2026-07-28
/// requests of the same identity (SEP-2663 "Backward Compatibility").
#[tokio::test]
async fn dual_era_server_shares_tasks_between_eras() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard-reference-server"))
        .args(["--era", "dual", "--tasks", "--http", "127.0.0.1:0"])
        .stderr(ProcessStdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the server");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let url = within("the listening line", async {
        loop {
            let line = stderr.next_line().await.unwrap().expect("listening line");
            if let Some(url) = line.strip_prefix("listening on ") {
                return url.to_owned();
            }
        }
    })
    .await;
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    let server = HttpServer { _child: child, url };

    // The legacy opener, by hand, to see the whole initialize result.
    let mut legacy = HttpPeer {
        http: reqwest::Client::new(),
        url: server.url.clone(),
        era: Era::Legacy,
        auth: Some("Bearer dual".into()),
        session: None,
    };
    let init = json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{
        "protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "tasks-test", "version": "0"}}});
    let reply = legacy.exchange(init, &mut no_questions()).await;
    let capabilities = &reply["result"]["capabilities"];
    assert_eq!(
        capabilities["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{reply}"
    );
    assert!(capabilities.get("extensions").is_none(), "{reply}");
    let mut legacy = Client {
        link: Link::Http(legacy),
        era: Era::Legacy,
        next_id: 0,
    };
    let mut modern = Client::http(&server, Era::Modern, Some("Bearer dual")).await;
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
    let server = HttpServer::start(Era::Legacy).await;
    let mut first = Client::http(&server, Era::Legacy, Some("Bearer bob")).await;
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

    let mut second = Client::http(&server, Era::Legacy, Some("Bearer bob")).await;
    assert_eq!(second.get(&id).await["status"], "input_required");
    let mut asked = 0;
    let reply = second
        .raw(
            "tasks/result",
            json!({"taskId": id}),
            true,
            &mut |_: &Value| {
                asked += 1;
                json!({"action": "accept", "content": {"name": "Ada"}})
            },
        )
        .await;
    assert_eq!(asked, 1);
    check_ask_result(&reply["result"], "accept");
    assert_eq!(second.get(&id).await["status"], "completed");
}
