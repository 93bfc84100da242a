//! The load an engine puts on the cluster during one round, all through
//! the engine gRPC API (EngineService) of both replicas, and what it saw.
//! Each kind of call alternates between the two servers, `orders` (stdio)
//! and `orders-http` (Streamable HTTP), so the load is split between them:
//! foreground calls (`create_order`, not idempotent, `echo`, read-only,
//! and `task_sleep` kept in the foreground, 1.5 s, each of both servers),
//! background calls (`task_sleep`, an MCP task, moved to the background at
//! once), calls waiting for an approval card in an `ask` session,
//! foreground calls on one long-lived `CallToolStream` per replica, a
//! quick `echo` probe call every 100 ms through each replica (for the
//! recovery time), and one event subscription per replica that subscribes
//! again whenever its stream breaks. Every call carries a unique execution
//! key in `_meta`, which the reference server writes to its execution log
//! (`SWITCHYARD_REFERENCE_EXECUTIONS`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use crate::cluster::{SERVERS, channel};

/// The `_meta` key the reference server logs (its `executions` module).
pub const EXECUTION_KEY: &str = "dev.switchyard.test/execution-key";

/// A call with no outcome after this long is lost.
pub const CALL_LIMIT: Duration = Duration::from_secs(90);

/// An engine client of `endpoint`.
pub fn engine(endpoint: &str) -> EngineServiceClient<Channel> {
    EngineServiceClient::new(channel(endpoint)).max_decoding_message_size(64 * 1024 * 1024)
}

/// What one call ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A result (`is_error` false).
    Ok,
    /// A result with `is_error`.
    ToolError,
    /// Moved to the background: the background call's id.
    Backgrounded(String),
    /// An RPC error: its code.
    Error(tonic::Code),
    /// Nothing within [`CALL_LIMIT`].
    None,
}

/// Which kind of call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A quick read-only call every 100 ms through one replica, to time
    /// the recovery.
    Probe,
    Foreground,
    /// A foreground call on a long-lived `CallToolStream`.
    Stream,
    Background,
    Approval,
}

/// One finished call.
#[derive(Debug, Clone)]
pub struct CallRecord {
    pub key: String,
    /// The server called (one of [`SERVERS`]).
    pub server: &'static str,
    /// The tool, without the server's prefix (`create_order`).
    pub tool: &'static str,
    pub kind: Kind,
    /// The replica it went through.
    pub via: usize,
    pub started: Instant,
    pub ended: Instant,
    pub outcome: Outcome,
    /// The error's message, if any.
    pub message: String,
}

/// One background-call event seen on a subscription.
#[derive(Debug, Clone)]
pub struct SeenEvent {
    /// The replica subscribed to.
    pub via: usize,
    /// Which subscription of that replica (0, then 1 after a break, ...).
    pub stream: u32,
    pub id: String,
    pub kind: String,
    pub status: String,
    /// The record's `statusMessage` (why it failed, say).
    pub message: String,
}

impl CallRecord {
    /// The tool's name in the gateway, `SERVER__TOOL`.
    pub fn name(&self) -> String {
        format!("{}__{}", self.server, self.tool)
    }
}

/// Everything a round's load records.
#[derive(Debug, Default)]
pub struct Seen {
    pub calls: Mutex<Vec<CallRecord>>,
    pub events: Mutex<Vec<SeenEvent>>,
    /// Event stream breaks per replica.
    pub breaks: Mutex<BTreeMap<usize, u32>>,
    pub in_flight: AtomicUsize,
    /// Calls in flight per server, in the order of [`SERVERS`].
    pub in_flight_on: [AtomicUsize; SERVERS.len()],
}

impl Seen {
    fn push(&self, record: CallRecord) {
        self.calls.lock().unwrap().push(record);
    }

    /// A call to `server` starts.
    fn started(&self, server: &str) {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.in_flight_on[server_index(server)].fetch_add(1, Ordering::SeqCst);
    }

    /// A call to `server` ended.
    fn ended(&self, server: &str) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        self.in_flight_on[server_index(server)].fetch_sub(1, Ordering::SeqCst);
    }

    /// Calls to `server` in flight now.
    pub fn in_flight_to(&self, server: &str) -> usize {
        self.in_flight_on[server_index(server)].load(Ordering::SeqCst)
    }

    /// Background call ids created so far, with their keys.
    pub fn background_ids(&self) -> BTreeMap<String, String> {
        self.background_ids_of(None)
    }

    /// Background call ids created so far (of `server` only, when given),
    /// with their keys.
    pub fn background_ids_of(&self, server: Option<&str>) -> BTreeMap<String, String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| server.is_none_or(|s| c.server == s))
            .filter_map(|c| match &c.outcome {
                Outcome::Backgrounded(id) => Some((id.clone(), c.key.clone())),
                _ => None,
            })
            .collect()
    }
}

/// The index of `server` in [`SERVERS`].
fn server_index(server: &str) -> usize {
    SERVERS
        .iter()
        .position(|s| *s == server)
        .expect("one of SERVERS")
}

fn meta(key: &str) -> String {
    json!({ EXECUTION_KEY: key }).to_string()
}

/// Foreground call `n` (key `key`) of `session`: `create_order` (for
/// `customer`), `echo` and `task_sleep` in turn, and the servers in turn
/// (`offset` shifts which server comes first), so that six calls make every
/// pair of tool and server once. The last tool is a slow call (an MCP task
/// run in the foreground), in flight at the sidecar and upstream when the
/// fault comes.
fn foreground_request(
    n: u64,
    offset: usize,
    key: &str,
    customer: &str,
    session: &str,
) -> (&'static str, &'static str, pb::CallToolRequest) {
    let server = SERVERS[(n as usize + offset) % SERVERS.len()];
    let (tool, args) = match n % 3 {
        1 => (
            "create_order",
            json!({"customer_id": customer, "items": [{"sku": "CABLE", "quantity": 1}]}),
        ),
        2 => ("echo", json!({"message": key})),
        _ => (
            "task_sleep",
            json!({"ms": 1500, "text": key, "pollIntervalMs": 200}),
        ),
    };
    let request = pb::CallToolRequest {
        session_id: session.to_owned(),
        run_id: key.to_owned(),
        tool: format!("{server}__{tool}"),
        arguments_json: args.to_string(),
        meta_json: meta(key),
        timeout_ms: 30_000,
        foreground: true,
        ..Default::default()
    };
    (server, tool, request)
}

/// One call to make: its key, server, tool (unprefixed) and request.
struct Call {
    key: String,
    server: &'static str,
    tool: &'static str,
    request: pb::CallToolRequest,
}

/// Makes one call and records it.
async fn call(seen: &Seen, endpoints: &[String], via: usize, kind: Kind, call: Call) {
    let Call {
        key,
        server,
        tool,
        request,
    } = call;
    let mut engine = engine(&endpoints[via]);
    seen.started(server);
    let started = Instant::now();
    let answer = tokio::time::timeout(CALL_LIMIT, engine.call_tool(request)).await;
    seen.ended(server);
    let (outcome, message) = match answer {
        Err(_) => (Outcome::None, format!("no outcome within {CALL_LIMIT:?}")),
        Ok(Err(status)) => (Outcome::Error(status.code()), status.message().to_owned()),
        Ok(Ok(response)) => {
            let r = response.into_inner();
            match r.background {
                Some(b) => (Outcome::Backgrounded(b.id), String::new()),
                None if r.is_error => (Outcome::ToolError, r.text),
                None => (Outcome::Ok, String::new()),
            }
        }
    };
    seen.push(CallRecord {
        key,
        server,
        tool,
        kind,
        via,
        started,
        ended: Instant::now(),
        outcome,
        message,
    });
}

/// Foreground worker `w` through replica `via`: the calls of
/// `foreground_request` in turn in the `auto` session until `stop`.
pub async fn foreground_worker(
    seen: Arc<Seen>,
    endpoints: Arc<Vec<String>>,
    round: String,
    session: String,
    w: usize,
    via: usize,
    stop: CancellationToken,
) {
    let mut n = 0u32;
    while !stop.is_cancelled() {
        n += 1;
        let key = format!("{round}-f{w}-{n}");
        let (server, tool, request) = foreground_request(n.into(), w, &key, "C-1", &session);
        let next = Call {
            key,
            server,
            tool,
            request,
        };
        call(&seen, &endpoints, via, Kind::Foreground, next).await;
        let failed = seen
            .calls
            .lock()
            .unwrap()
            .last()
            .is_some_and(|c| c.outcome != Outcome::Ok);
        let pause = if failed { 250 } else { 50 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

/// Calls on one long-lived `CallToolStream` through replica `via` until
/// `stop`: `create_order`, `echo` and `task_sleep` (1.5 s, an MCP task in
/// the foreground) in turn, of both servers in turn, [`STREAM_IN_FLIGHT`]
/// at a time. When the
/// stream breaks, each call in flight is recorded with the stream's error
/// (its calls are cancelled with it: "connection lost" when the replica's
/// connection broke), and a new stream is opened. A stream that ends
/// cleanly with calls in flight leaves them without an outcome (a
/// problem).
pub async fn stream_worker(
    seen: Arc<Seen>,
    endpoints: Arc<Vec<String>>,
    round: String,
    session: String,
    via: usize,
    stop: CancellationToken,
) {
    use std::collections::HashMap;
    let mut n = 0u64;
    while !stop.is_cancelled() {
        let (tx, rx) = tokio::sync::mpsc::channel::<pb::CallToolFrame>(STREAM_IN_FLIGHT * 2);
        let mut engine = engine(&endpoints[via]);
        let opened = tokio::time::timeout(
            Duration::from_secs(5),
            engine.call_tool_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
        )
        .await;
        let Ok(Ok(outcomes)) = opened else {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(250)) => continue,
            }
        };
        let mut outcomes = outcomes.into_inner();
        // id -> (key, server, tool, started)
        let mut pending: HashMap<u64, (String, &'static str, &'static str, Instant)> =
            HashMap::new();
        let broke: Option<(tonic::Code, String)> = loop {
            while pending.len() < STREAM_IN_FLIGHT && !stop.is_cancelled() {
                n += 1;
                let key = format!("{round}-s{via}-{n}");
                let (server, tool, request) = foreground_request(n, via, &key, "C-3", &session);
                let frame = pb::CallToolFrame {
                    id: n,
                    frame: Some(pb::call_tool_frame::Frame::Call(request)),
                };
                pending.insert(n, (key, server, tool, Instant::now()));
                seen.started(server);
                if tx.send(frame).await.is_err() {
                    break;
                }
            }
            if stop.is_cancelled() && pending.is_empty() {
                break None;
            }
            let next = tokio::time::timeout(CALL_LIMIT, outcomes.message()).await;
            let outcome = match next {
                Err(_) => break Some((tonic::Code::Unknown, String::new())),
                Ok(Err(status)) => break Some((status.code(), status.message().to_owned())),
                Ok(Ok(None)) => break Some((tonic::Code::Ok, String::new())),
                Ok(Ok(Some(o))) => o,
            };
            let Some((key, server, tool, started)) = pending.remove(&outcome.id) else {
                continue;
            };
            seen.ended(server);
            let (outcome, message) = match outcome.outcome {
                Some(pb::call_tool_outcome::Outcome::Response(r)) => match r.background {
                    Some(b) => (Outcome::Backgrounded(b.id), String::new()),
                    None if r.is_error => (Outcome::ToolError, r.text),
                    None => (Outcome::Ok, String::new()),
                },
                Some(pb::call_tool_outcome::Outcome::Error(e)) => {
                    (Outcome::Error(tonic::Code::from(e.code)), e.message)
                }
                _ => continue,
            };
            seen.push(CallRecord {
                key,
                server,
                tool,
                kind: Kind::Stream,
                via,
                started,
                ended: Instant::now(),
                outcome,
                message,
            });
        };
        drop(tx);
        // The calls the stream took with it.
        for (_, (key, server, tool, started)) in pending.drain() {
            seen.ended(server);
            let (outcome, message) = match &broke {
                Some((tonic::Code::Ok, _)) => (
                    Outcome::None,
                    "the stream ended without its outcome".to_owned(),
                ),
                Some((tonic::Code::Unknown, m)) if m.is_empty() => {
                    (Outcome::None, format!("no outcome within {CALL_LIMIT:?}"))
                }
                Some((code, m)) => (Outcome::Error(*code), m.clone()),
                None => continue,
            };
            seen.push(CallRecord {
                key,
                server,
                tool,
                kind: Kind::Stream,
                via,
                started,
                ended: Instant::now(),
                outcome,
                message,
            });
        }
        if broke.is_some() {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
    }
}

/// Calls a [`stream_worker`] keeps in flight on its stream.
pub const STREAM_IN_FLIGHT: usize = 4;

/// Calls `echo` (read-only, quick) every 100 ms through replica `via`
/// until `stop`, of each server in turn (so each every 200 ms): the
/// recovery time is read from these.
pub async fn probe(
    seen: Arc<Seen>,
    endpoints: Arc<Vec<String>>,
    round: String,
    session: String,
    via: usize,
    stop: CancellationToken,
) {
    let mut n = 0u32;
    while !stop.is_cancelled() {
        n += 1;
        let key = format!("{round}-p{via}-{n}");
        let server = SERVERS[n as usize % SERVERS.len()];
        let request = pb::CallToolRequest {
            session_id: session.clone(),
            run_id: key.clone(),
            tool: format!("{server}__echo"),
            arguments_json: json!({"message": key}).to_string(),
            meta_json: meta(&key),
            timeout_ms: 30_000,
            foreground: true,
            ..Default::default()
        };
        let next = Call {
            key,
            server,
            tool: "echo",
            request,
        };
        call(&seen, &endpoints, via, Kind::Probe, next).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts a background call every `every` through each replica in turn,
/// until `stop`; two calls to `orders`, then two to `orders-http`, so
/// each server gets calls through each replica.
pub async fn background_launcher(
    seen: Arc<Seen>,
    endpoints: Arc<Vec<String>>,
    round: String,
    session: String,
    every: Duration,
    stop: CancellationToken,
) {
    let mut n = 0u32;
    let mut calls = tokio::task::JoinSet::new();
    while !stop.is_cancelled() {
        n += 1;
        let key = format!("{round}-b{n}");
        let server = SERVERS[(n as usize / 2) % SERVERS.len()];
        let request = pb::CallToolRequest {
            session_id: session.clone(),
            run_id: key.clone(),
            tool: format!("{server}__task_sleep"),
            arguments_json: json!({"ms": 2500, "text": key, "pollIntervalMs": 200}).to_string(),
            meta_json: meta(&key),
            timeout_ms: 60_000,
            background: true,
            ..Default::default()
        };
        let via = (n as usize) % endpoints.len();
        let (seen, endpoints) = (seen.clone(), endpoints.clone());
        let next = Call {
            key,
            server,
            tool: "task_sleep",
            request,
        };
        calls.spawn(async move { call(&seen, &endpoints, via, Kind::Background, next).await });
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = tokio::time::sleep(every) => {}
        }
    }
    while calls.join_next().await.is_some() {}
}

/// Starts a `create_order` call of `server` in the `ask` session through
/// `via`; it waits for its approval card (run id = key).
pub fn approval_call(
    seen: Arc<Seen>,
    endpoints: Arc<Vec<String>>,
    key: String,
    session: String,
    server: &'static str,
    via: usize,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let request = pb::CallToolRequest {
            session_id: session,
            run_id: key.clone(),
            tool: format!("{server}__create_order"),
            arguments_json:
                json!({"customer_id": "C-2", "items": [{"sku": "CABLE", "quantity": 2}]})
                    .to_string(),
            meta_json: meta(&key),
            timeout_ms: 80_000,
            foreground: true,
            ..Default::default()
        };
        let next = Call {
            key,
            server,
            tool: "create_order",
            request,
        };
        call(&seen, &endpoints, via, Kind::Approval, next).await
    })
}

/// Follows `session`'s events through replica `via` until `stop`,
/// subscribing again (with `background_after_ms = since_ms`) whenever the
/// stream breaks, and records every background-call event.
pub async fn subscriber(
    seen: Arc<Seen>,
    endpoint: String,
    via: usize,
    session: String,
    since_ms: i64,
    stop: CancellationToken,
) {
    let mut stream_no = 0u32;
    loop {
        let mut engine = engine(&endpoint);
        let subscribe = engine.subscribe_events(pb::SubscribeEventsRequest {
            session_id: session.clone(),
            background_after_ms: since_ms,
        });
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            s = tokio::time::timeout(Duration::from_secs(5), subscribe) => s,
        };
        if let Ok(Ok(stream)) = stream {
            let mut stream = stream.into_inner();
            loop {
                let message = tokio::select! {
                    _ = stop.cancelled() => return,
                    m = stream.message() => m,
                };
                match message {
                    Ok(Some(event)) => record_event(&seen, via, stream_no, &event),
                    Ok(None) | Err(_) => break,
                }
            }
            *seen.breaks.lock().unwrap().entry(via).or_default() += 1;
            stream_no += 1;
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

fn record_event(seen: &Seen, via: usize, stream: u32, event: &pb::SessionEvent) {
    if !event.r#type.starts_with("background_call.") {
        return;
    }
    let data: Value = serde_json::from_str(&event.data_json).unwrap_or_default();
    seen.events.lock().unwrap().push(SeenEvent {
        via,
        stream,
        id: data["id"].as_str().unwrap_or_default().to_owned(),
        kind: event.r#type.clone(),
        status: data["status"].as_str().unwrap_or_default().to_owned(),
        message: data["statusMessage"]
            .as_str()
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect(),
    });
}

/// A fresh subscription through `endpoint` with `background_after_ms =
/// since_ms`: the background-call events it replays, by id, read until
/// every id of `want` came (and 1 s more) or `limit`.
pub async fn replay(
    endpoint: &str,
    session: &str,
    since_ms: i64,
    want: &[String],
    limit: Duration,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut engine = engine(endpoint);
    let mut stream = tokio::time::timeout(
        Duration::from_secs(5),
        engine.subscribe_events(pb::SubscribeEventsRequest {
            session_id: session.to_owned(),
            background_after_ms: since_ms,
        }),
    )
    .await
    .map_err(|_| "subscribe: no answer within 5 s".to_owned())?
    .map_err(|e| format!("subscribe: {}: {}", e.code(), e.message()))?
    .into_inner();
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + limit;
    let mut settle: Option<tokio::time::Instant> = None;
    loop {
        let until = settle.map_or(deadline, |s| s.min(deadline));
        match tokio::time::timeout_at(until, stream.message()).await {
            Err(_) => break,
            Ok(Ok(Some(event))) if event.r#type.starts_with("background_call.") => {
                let data: Value = serde_json::from_str(&event.data_json).unwrap_or_default();
                let id = data["id"].as_str().unwrap_or_default().to_owned();
                got.entry(id).or_default().push(event.r#type);
            }
            Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => return Err("the stream ended".into()),
            Ok(Err(e)) => return Err(format!("the stream broke: {}", e.code())),
        }
        if settle.is_none() && want.iter().all(|id| got.contains_key(id)) {
            settle = Some(tokio::time::Instant::now() + Duration::from_secs(1));
        }
    }
    Ok(got)
}
