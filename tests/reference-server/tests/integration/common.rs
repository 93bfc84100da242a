//! The raw JSON-RPC client that `tasks` and `resources` drive the real
//! `switchyard-reference-server` binary with: the server started over stdio
//! or Streamable HTTP (`--http`, with an optional `Authorization` header per
//! client), one client of one era (2025-11-25 opens with `initialize` and
//! keeps its session; 2026-07-28 opens with `server/discover` and sends the
//! per-request `_meta` with its capabilities), server-to-client requests
//! answered by a closure, and SSE streams read message by message. What
//! only one feature needs (task polling, paging, ...) is that module's own
//! `impl Client`.

use std::{process::Stdio as ProcessStdio, time::Duration};

use futures::{StreamExt as _, stream::BoxStream};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdin, ChildStdout, Command},
};

const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";

/// Panics with "timed out: `what`" when `future` takes over 60 s.
pub async fn within<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
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

/// The server binary as `--era <era> <args>`: stdin and stdout piped,
/// stderr discarded, killed when dropped.
pub fn server_command(era: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard-reference-server"));
    command
        .args(["--era", era])
        .args(args)
        .stdin(ProcessStdio::piped())
        .stdout(ProcessStdio::piped())
        .stderr(ProcessStdio::null())
        .kill_on_drop(true);
    command
}

/// Answers a server-to-client request (`elicitation/create`, `roots/list`)
/// with a result.
pub type Answer<'a> = &'a mut (dyn FnMut(&Value) -> Value + Send);

pub fn no_questions() -> impl FnMut(&Value) -> Value + Send {
    |request: &Value| panic!("unexpected server request {request}")
}

fn client_info() -> Value {
    json!({"name": "reference-server-test", "version": "0"})
}

/// A 2025-11-25 `initialize` request declaring `caps`.
fn initialize(caps: &Value) -> Value {
    json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{
        "protocolVersion": LEGACY,
        "capabilities": caps,
        "clientInfo": client_info()}})
}

/// The `_meta` of a 2026-07-28 request declaring `caps`.
pub fn modern_meta(caps: &Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": client_info(),
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// The string `key` of each item of the JSON array `list`; panics on
/// anything else.
pub fn field_strs<'a>(list: &'a Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .map(|item| {
            item[key]
                .as_str()
                .unwrap_or_else(|| panic!("no {key}: {item}"))
        })
        .collect()
}

/// Panics unless `error` (a JSON-RPC error) has `code` and a message
/// containing `part`.
pub fn assert_error(error: &Value, code: i64, part: &str) {
    assert_eq!(error["code"], code, "{error}");
    assert!(error["message"].as_str().unwrap().contains(part), "{error}");
}

// ---- stdio ------------------------------------------------------------------

pub struct StdioPeer {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// Notifications read while waiting for something else.
    pub notifications: Vec<Value>,
}

impl StdioPeer {
    fn spawn(era: Era, args: &[&str]) -> Self {
        let mut child = server_command(era.flag(), args)
            .spawn()
            .expect("start the server");
        let stdin = child.stdin.take().expect("stdin");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Self {
            _child: child,
            stdin,
            lines,
            notifications: Vec::new(),
        }
    }

    pub async fn send(&mut self, message: &Value) {
        self.stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .expect("write stdin");
        self.stdin.flush().await.expect("flush stdin");
    }

    async fn next(&mut self) -> Value {
        let line = within("a stdio message", self.lines.next_line())
            .await
            .expect("read stdout")
            .expect("the server closed stdout");
        serde_json::from_str(&line).expect("a JSON line")
    }

    async fn exchange(&mut self, request: Value, answer: Answer<'_>) -> Value {
        self.send(&request).await;
        loop {
            let message = self.next().await;
            match (message.get("method"), message.get("id")) {
                (None, Some(id)) if *id == request["id"] => return message,
                (Some(_), Some(id)) => {
                    let reply = json!({"jsonrpc":"2.0","id":id,"result":answer(&message)});
                    self.send(&reply).await;
                }
                (Some(_), None) => self.notifications.push(message),
                _ => panic!("unexpected message {message}"),
            }
        }
    }

    /// The first notification (already read or next) that `matches`.
    pub async fn notification(&mut self, matches: impl Fn(&Value) -> bool) -> Value {
        if let Some(at) = self.notifications.iter().position(&matches) {
            return self.notifications.remove(at);
        }
        loop {
            let message = self.next().await;
            if matches(&message) {
                return message;
            }
            assert!(message.get("id").is_none(), "unexpected {message}");
            self.notifications.push(message);
        }
    }
}

// ---- Streamable HTTP --------------------------------------------------------

/// A running `--http` server.
pub struct HttpServer {
    _child: Child,
    url: String,
}

impl HttpServer {
    /// The server of `era` with `args`, listening on a free port.
    pub async fn start(era: Era, args: &[&str]) -> Self {
        Self::spawn(server_command(era.flag(), args)).await
    }

    /// `command` (a [`server_command`]) listening on a free port, once it
    /// says where.
    pub async fn spawn(mut command: Command) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        command
            .args(["--http", "127.0.0.1:0"])
            .stderr(ProcessStdio::piped());
        let mut child = command.spawn().expect("start the server");
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

/// JSON-RPC messages arriving on one SSE response.
pub struct SseStream {
    body: BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: String,
}

impl SseStream {
    fn new(response: reqwest::Response) -> Self {
        Self {
            body: response
                .bytes_stream()
                .map(|chunk| chunk.map(|bytes| bytes.to_vec()))
                .boxed(),
            buffer: String::new(),
        }
    }

    /// The next message; events without data are skipped.
    pub async fn next(&mut self) -> Value {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.concat().is_empty() {
                    continue;
                }
                return serde_json::from_str(&data.join("\n")).expect("SSE JSON");
            }
            let chunk = within("an SSE event", self.body.next())
                .await
                .expect("the SSE stream ended")
                .expect("read SSE");
            self.buffer
                .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
        }
    }
}

/// One HTTP client connection (its own reqwest client, so its own TCP
/// connections) with an optional `Authorization` header; in 2025-11-25 also
/// its own session.
pub struct HttpPeer {
    http: reqwest::Client,
    url: String,
    era: Era,
    auth: Option<String>,
    session: Option<String>,
}

impl HttpPeer {
    /// A POST of `message` with this peer's headers: `authorization`, and
    /// the session (2025-11-25) or `mcp-method`/`mcp-name` (2026-07-28).
    pub fn post(&self, message: &Value) -> reqwest::RequestBuilder {
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
                        "tools/call" | "prompts/get" => message["params"]["name"].as_str(),
                        "resources/read" => message["params"]["uri"].as_str(),
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
            let text = within("an HTTP body", response.text())
                .await
                .expect("a body");
            return serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("not JSON: {text:?} (request {request})"));
        }
        let mut stream = SseStream::new(response);
        loop {
            let message = stream.next().await;
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
    }

    /// A 2025-11-25 session's standalone GET stream (open once this returns).
    pub async fn get_stream(&self) -> SseStream {
        let mut request = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header(
                "mcp-session-id",
                self.session.as_deref().expect("a session"),
            )
            .header("mcp-protocol-version", LEGACY);
        if let Some(auth) = &self.auth {
            request = request.header("authorization", auth);
        }
        let response = request.send().await.expect("GET");
        assert_eq!(response.status(), 200, "GET stream");
        SseStream::new(response)
    }

    /// A POST whose response stays open (a 2026-07-28 listen stream).
    pub async fn stream(&self, request: &Value) -> SseStream {
        let response = self.post(request).send().await.expect("POST");
        assert_eq!(response.status(), 200, "{request}");
        SseStream::new(response)
    }
}

// ---- one client over either transport ---------------------------------------

pub enum Link {
    Stdio(Box<StdioPeer>),
    Http(HttpPeer),
}

/// A raw JSON-RPC client of one era. It declares `caps` in `initialize`
/// (2025-11-25) or in the per-request `_meta` of every 2026-07-28 request
/// whose params have no `_meta` of their own ([`Client::with_caps`]).
pub struct Client {
    pub link: Link,
    pub era: Era,
    caps: Value,
    next_id: u64,
    /// The `initialize` (2025-11-25) or `server/discover` (2026-07-28) result.
    pub opened: Value,
}

impl Client {
    async fn open(link: Link, era: Era, caps: Value) -> Self {
        let mut client = Self {
            link,
            era,
            caps,
            next_id: 0,
            opened: Value::Null,
        };
        client.opened = match era {
            Era::Legacy => {
                let reply = client
                    .exchange(initialize(&client.caps), &mut no_questions())
                    .await;
                assert_eq!(reply["result"]["protocolVersion"], LEGACY, "{reply}");
                let initialized = json!({"jsonrpc":"2.0","method":"notifications/initialized"});
                match &mut client.link {
                    Link::Stdio(peer) => peer.send(&initialized).await,
                    Link::Http(peer) => {
                        let status = peer.post(&initialized).send().await.expect("POST").status();
                        assert_eq!(status, 202);
                    }
                }
                reply["result"].clone()
            }
            Era::Modern => client.ok("server/discover", json!({})).await,
        };
        client
    }

    /// A client of a fresh server of `era` with `args`, over stdio.
    pub async fn stdio(era: Era, args: &[&str], caps: Value) -> Self {
        let peer = StdioPeer::spawn(era, args);
        Self::open(Link::Stdio(Box::new(peer)), era, caps).await
    }

    /// A new client of `server` (in 2025-11-25 a new session) whose requests
    /// carry the `Authorization` header `auth`, if any.
    pub async fn http(server: &HttpServer, era: Era, auth: Option<&str>, caps: Value) -> Self {
        let peer = HttpPeer {
            http: reqwest::Client::new(),
            url: server.url.clone(),
            era,
            auth: auth.map(str::to_owned),
            session: None,
        };
        Self::open(Link::Http(peer), era, caps).await
    }

    async fn exchange(&mut self, request: Value, answer: Answer<'_>) -> Value {
        match &mut self.link {
            Link::Stdio(peer) => peer.exchange(request, answer).await,
            Link::Http(peer) => peer.exchange(request, answer).await,
        }
    }

    /// `params` of a request that declares `caps` instead of the client's
    /// own (2026-07-28); unchanged in 2025-11-25, which declares once.
    pub fn with_caps(&self, mut params: Value, caps: &Value) -> Value {
        if self.era == Era::Modern {
            params["_meta"] = modern_meta(caps);
        }
        params
    }

    /// A request of this client, with its id.
    pub fn request(&mut self, method: &str, mut params: Value) -> Value {
        self.next_id += 1;
        if self.era == Era::Modern && params.get("_meta").is_none() {
            params["_meta"] = modern_meta(&self.caps);
        }
        json!({"jsonrpc":"2.0","id":self.next_id,"method":method,"params":params})
    }

    /// The whole response, answering server requests with `answer`.
    pub async fn raw(&mut self, method: &str, params: Value, answer: Answer<'_>) -> Value {
        let request = self.request(method, params);
        self.exchange(request, answer).await
    }

    /// The `result`; panics on an error.
    pub async fn ok(&mut self, method: &str, params: Value) -> Value {
        let reply = self.raw(method, params, &mut no_questions()).await;
        assert!(reply.get("error").is_none(), "{method} failed: {reply}");
        reply["result"].clone()
    }

    /// The `error`; panics on a result.
    pub async fn err(&mut self, method: &str, params: Value) -> Value {
        let reply = self.raw(method, params, &mut no_questions()).await;
        assert!(
            reply.get("result").is_none(),
            "{method} did not fail: {reply}"
        );
        reply["error"].clone()
    }
}
