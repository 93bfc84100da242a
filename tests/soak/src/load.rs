//! The soak's load: a fixed set of workers, each one loop that paces
//! itself with an interval and does one operation (or one small batch) at
//! a time, so the load is steady and bounded whatever the gateway's speed
//! (no queue anywhere: a slow answer delays that worker's next operation).
//! Every operation is also bounded by [`OP_LIMIT`].
//!
//! | worker | every | what |
//! |---|---|---|
//! | `call` | 50 ms | `CallTool` on one long-lived channel and session, rotating over six tools of the three servers |
//! | `stream_call` | 250 ms | 4 calls in flight on one long-lived `CallToolStream` (reopened if it breaks) |
//! | `resource` | 400 ms | `ReadResource`, `GetPrompt`, `ListResources`, `ListPrompts`, `ListTools` in turn |
//! | `background` | 4 s | a call moved to the background at once (an MCP task on `orders`, a held call on `everything`), waited for as its `background_call.completed` event on the session's event stream |
//! | `storm` | 20 s | `notify_storm` (500 `notifications/tools/list_changed`) on both reference servers; every third time `toggle_extra_tool` on both, a real tool-list change |
//! | `reconnect` (2) | 1.5 s | an engine that comes and goes: a new gRPC channel, `CreateSession`, `SubscribeEvents`, a call, `ListTools`, then the stream dropped, `DeleteSession`, the channel closed |
//! | `mcp_session` | 1 s | a 2025-11-25 MCP client session: `initialize` ... `tools/call`, every third one its GET stream, then `DELETE`; every fifth on a new HTTP client (new connections) |
//! | `mcp_call` | 500 ms | a 2026-07-28 `tools/call`; every tenth a `subscriptions/listen` stream opened and dropped |

use crate::gateway::Gateway;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use switchyard_proto::v1::{
    CallToolFrame, CallToolRequest, CreateSessionRequest, DeleteSessionRequest, GetPromptRequest,
    ListPromptsRequest, ListResourcesRequest, ListToolsRequest, PermissionMode,
    ReadResourceRequest, SubscribeEventsRequest, call_tool_frame, call_tool_outcome,
};
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

/// The longest one operation may take before it counts as failed.
pub const OP_LIMIT: Duration = Duration::from_secs(60);

/// Set once, when the load must end; workers check it between operations.
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    /// Asks every worker to end after its current operation.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the load must end.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Operations done, by kind.
#[derive(Debug, Clone, Default)]
pub struct Stats(Arc<Mutex<BTreeMap<&'static str, KindStats>>>);

/// One kind's counts.
#[derive(Debug, Clone, Default)]
pub struct KindStats {
    /// Operations that did what was expected.
    pub ok: u64,
    /// Operations that failed.
    pub failed: u64,
    /// The first failures' messages (at most 5).
    pub first_errors: Vec<String>,
}

impl Stats {
    fn record(&self, kind: &'static str, result: anyhow::Result<()>) {
        let mut map = self.0.lock().unwrap();
        let entry = map.entry(kind).or_default();
        match result {
            Ok(()) => entry.ok += 1,
            Err(e) => {
                entry.failed += 1;
                if entry.first_errors.len() < 5 {
                    entry.first_errors.push(format!("{e:#}"));
                }
            }
        }
    }

    /// A copy of the counts.
    pub fn snapshot(&self) -> BTreeMap<&'static str, KindStats> {
        self.0.lock().unwrap().clone()
    }

    /// `kind ok/failed` for each kind, on one line.
    pub fn line(&self) -> String {
        self.snapshot()
            .iter()
            .map(|(k, s)| format!("{k} {}/{}", s.ok, s.failed))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Runs `op` bounded by [`OP_LIMIT`] and records its outcome.
async fn timed(stats: &Stats, kind: &'static str, op: impl Future<Output = anyhow::Result<()>>) {
    let result = match tokio::time::timeout(OP_LIMIT, op).await {
        Ok(r) => r,
        Err(_) => Err(anyhow::anyhow!("no answer within {} s", OP_LIMIT.as_secs())),
    };
    stats.record(kind, result);
}

/// The tools the call workers rotate over: engine name and arguments.
fn call_mix() -> Vec<(&'static str, Value)> {
    vec![
        ("orders__get_order", json!({"order_id": "O-1001"})),
        ("orders-http__get_order", json!({"order_id": "O-1002"})),
        ("everything__echo", json!({"message": "soak"})),
        ("everything__get-sum", json!({"a": 1, "b": 2})),
        ("orders__order_summary", json!({})),
        ("orders-http__echo_json", json!({"message": "soak"})),
    ]
}

fn call_request(session: &str, tool: &str, arguments: &Value) -> CallToolRequest {
    CallToolRequest {
        session_id: session.to_owned(),
        tool: tool.to_owned(),
        arguments_json: arguments.to_string(),
        timeout_ms: 30_000,
        ..Default::default()
    }
}

async fn connect(url: &str) -> anyhow::Result<EngineServiceClient<Channel>> {
    let channel = Endpoint::from_shared(url.to_owned())?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    Ok(EngineServiceClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20))
}

async fn new_session(
    client: &mut EngineServiceClient<Channel>,
    servers: &[&str],
) -> anyhow::Result<String> {
    Ok(client
        .create_session(CreateSessionRequest {
            enabled_servers: servers.iter().map(|s| (*s).to_owned()).collect(),
            permission_mode: PermissionMode::Auto as i32,
            roots: Vec::new(),
        })
        .await?
        .into_inner()
        .id)
}

/// Fails on a gRPC error or an `isError` result.
fn check_call(
    tool: &str,
    r: Result<tonic::Response<switchyard_proto::v1::CallToolResponse>, tonic::Status>,
) -> anyhow::Result<switchyard_proto::v1::CallToolResponse> {
    let r = r.map_err(|s| anyhow::anyhow!("{tool}: {:?}: {}", s.code(), s.message()))?;
    let r = r.into_inner();
    if r.is_error {
        anyhow::bail!(
            "{tool}: isError: {}",
            r.text.chars().take(200).collect::<String>()
        );
    }
    Ok(r)
}

/// What the resource worker reads: resources and prompts found at start.
#[derive(Debug, Clone)]
struct Catalogue {
    resources: Vec<(String, String)>,
    prompts: Vec<(String, String, BTreeMap<String, String>)>,
}

async fn discover(url: &str) -> anyhow::Result<Catalogue> {
    let mut client = connect(url).await?;
    // Every tool of the mix is listed first (a server's catalogue comes a
    // little after its sidecar registers).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let listed = client
            .list_tools(ListToolsRequest::default())
            .await?
            .into_inner();
        let missing: Vec<&str> = call_mix()
            .iter()
            .map(|(tool, _)| *tool)
            .filter(|tool| !listed.tools.iter().any(|t| t.name == *tool))
            .collect();
        if missing.is_empty() {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("tools still not listed after 60 s: {missing:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut resources = Vec::new();
    let mut prompts = Vec::new();
    for server in ["orders", "everything", "orders-http"] {
        let listed = client
            .list_resources(ListResourcesRequest {
                server: server.into(),
                page_size: 1000,
                ..Default::default()
            })
            .await?
            .into_inner();
        // Small text resources: the load is about the gateway, not bulk.
        resources.extend(
            listed
                .resources
                .into_iter()
                .filter(|r| {
                    let text = r.mime_type.starts_with("text/") || r.mime_type.ends_with("json");
                    // -1: the server gave no size.
                    text && (-1..=20_000).contains(&r.size)
                })
                .take(4)
                .map(|r| (r.server, r.uri)),
        );
        let listed = client
            .list_prompts(ListPromptsRequest {
                server: server.into(),
                page_size: 1000,
                ..Default::default()
            })
            .await?
            .into_inner();
        prompts.extend(listed.prompts.into_iter().take(3).map(|p| {
            let arguments = p
                .arguments
                .iter()
                .filter(|a| a.required)
                // An order id, which the reference server's prompts need;
                // any string does for server-everything's.
                .map(|a| (a.name.clone(), "O-1001".to_owned()))
                .collect();
            (p.server, p.name, arguments)
        }));
    }
    if resources.is_empty() || prompts.is_empty() {
        anyhow::bail!(
            "found {} small text resources and {} prompts: the load needs both",
            resources.len(),
            prompts.len()
        );
    }
    Ok(Catalogue { resources, prompts })
}

/// Paces a worker: [`Pacer::next`] returns the operation's number every
/// `period` (later when the previous operation took longer) until the
/// stop flag is set.
#[derive(Debug)]
struct Pacer {
    tick: tokio::time::Interval,
    n: u64,
    stop: StopFlag,
}

impl Pacer {
    fn new(stop: StopFlag, period: Duration) -> Pacer {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Pacer { tick, n: 0, stop }
    }

    async fn next(&mut self) -> Option<u64> {
        if self.stop.is_set() {
            return None;
        }
        self.tick.tick().await;
        if self.stop.is_set() {
            return None;
        }
        self.n += 1;
        Some(self.n - 1)
    }
}

/// Starts every worker (after finding the resources and prompts to use).
pub async fn start(
    gw: &Gateway,
    stats: &Stats,
    stop: &StopFlag,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let grpc = gw.grpc_url();
    let mcp = gw.mcp_url();
    let catalogue = discover(&grpc).await?;
    let mut workers = vec![
        tokio::spawn(unary_calls(grpc.clone(), stats.clone(), stop.clone())),
        tokio::spawn(stream_calls(grpc.clone(), stats.clone(), stop.clone())),
        tokio::spawn(resources(
            grpc.clone(),
            catalogue,
            stats.clone(),
            stop.clone(),
        )),
        tokio::spawn(background(grpc.clone(), stats.clone(), stop.clone())),
        tokio::spawn(storms(grpc.clone(), stats.clone(), stop.clone())),
    ];
    for offset in 0..2 {
        workers.push(tokio::spawn(reconnecting(
            grpc.clone(),
            offset,
            stats.clone(),
            stop.clone(),
        )));
    }
    workers.push(tokio::spawn(mcp_sessions(
        mcp.clone(),
        stats.clone(),
        stop.clone(),
    )));
    workers.push(tokio::spawn(mcp_calls(mcp, stats.clone(), stop.clone())));
    Ok(workers)
}

/// Waits for every worker to finish its operation in flight.
pub async fn join(workers: Vec<JoinHandle<()>>) {
    for w in workers {
        let _ = w.await;
    }
}

async fn unary_calls(url: String, stats: Stats, stop: StopFlag) {
    let mix = call_mix();
    let mut engine: Option<(EngineServiceClient<Channel>, String)> = None;
    let mut pacer = Pacer::new(stop, Duration::from_millis(50));
    while let Some(n) = pacer.next().await {
        let (tool, args) = &mix[n as usize % mix.len()];
        let engine = &mut engine;
        timed(&stats, "call", async {
            if engine.is_none() {
                let mut c = connect(&url).await?;
                let s = new_session(&mut c, &[]).await?;
                *engine = Some((c, s));
            }
            let (client, session) = engine.as_mut().expect("set above");
            let r = client.call_tool(call_request(session, tool, args)).await;
            check_call(tool, r).map(drop)
        })
        .await;
    }
}

/// One open `CallToolStream`: the engine's side and the outcomes.
type OpenStream = (
    tokio::sync::mpsc::Sender<CallToolFrame>,
    tonic::Streaming<switchyard_proto::v1::CallToolOutcome>,
);

async fn stream_batch(
    url: &str,
    open: &mut Option<OpenStream>,
    session: &mut String,
    next_id: &mut u64,
    calls: &[(&'static str, Value)],
) -> anyhow::Result<Vec<anyhow::Result<()>>> {
    if open.is_none() {
        let mut c = connect(url).await?;
        *session = new_session(&mut c, &[]).await?;
        // Bounded: at most one batch is ever queued.
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let outcomes = c
            .call_tool_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        *open = Some((tx, outcomes));
    }
    let (tx, outcomes) = open.as_mut().expect("set above");
    for (tool, args) in calls {
        *next_id += 1;
        tx.send(CallToolFrame {
            id: *next_id,
            frame: Some(call_tool_frame::Frame::Call(call_request(
                session, tool, args,
            ))),
        })
        .await
        .map_err(|_| anyhow::anyhow!("the call stream closed"))?;
    }
    let mut results = Vec::new();
    for _ in calls {
        let outcome = outcomes
            .message()
            .await?
            .ok_or_else(|| anyhow::anyhow!("the call stream ended"))?;
        results.push(match outcome.outcome {
            Some(call_tool_outcome::Outcome::Response(r)) if !r.is_error => Ok(()),
            Some(call_tool_outcome::Outcome::Response(r)) => {
                Err(anyhow::anyhow!("isError: {}", r.text))
            }
            Some(call_tool_outcome::Outcome::Error(e)) => {
                Err(anyhow::anyhow!("code {}: {}", e.code, e.message))
            }
            _ => Err(anyhow::anyhow!("an outcome frame without an outcome")),
        });
    }
    Ok(results)
}

async fn stream_calls(url: String, stats: Stats, stop: StopFlag) {
    let mix = call_mix();
    let mut open: Option<OpenStream> = None;
    let mut session = String::new();
    let mut next_id = 0u64;
    let mut pacer = Pacer::new(stop, Duration::from_millis(250));
    while let Some(n) = pacer.next().await {
        let calls: Vec<_> = (0..4)
            .map(|k| mix[(n * 4 + k) as usize % mix.len()].clone())
            .collect();
        let batch = stream_batch(&url, &mut open, &mut session, &mut next_id, &calls);
        match tokio::time::timeout(OP_LIMIT, batch).await {
            Ok(Ok(results)) => {
                for r in results {
                    stats.record("stream_call", r);
                }
            }
            Ok(Err(e)) => {
                // The stream is reopened for the next batch.
                open = None;
                stats.record("stream_call", Err(e));
            }
            Err(_) => {
                open = None;
                stats.record("stream_call", Err(anyhow::anyhow!("batch timed out")));
            }
        }
    }
}

async fn resource_op(
    client: &mut EngineServiceClient<Channel>,
    session: &str,
    catalogue: &Catalogue,
    kind: &str,
    i: usize,
) -> anyhow::Result<()> {
    match kind {
        "resource_read" => {
            let (server, uri) = &catalogue.resources[i % catalogue.resources.len()];
            client
                .read_resource(ReadResourceRequest {
                    session_id: session.to_owned(),
                    server: server.clone(),
                    uri: uri.clone(),
                    timeout_ms: 30_000,
                    ..Default::default()
                })
                .await?;
        }
        "prompt_get" => {
            let (server, name, arguments) = &catalogue.prompts[i % catalogue.prompts.len()];
            client
                .get_prompt(GetPromptRequest {
                    session_id: session.to_owned(),
                    server: server.clone(),
                    name: name.clone(),
                    arguments: arguments.clone().into_iter().collect(),
                    timeout_ms: 30_000,
                    ..Default::default()
                })
                .await?;
        }
        _ => {
            client
                .list_resources(ListResourcesRequest {
                    session_id: session.to_owned(),
                    ..Default::default()
                })
                .await?;
            client
                .list_prompts(ListPromptsRequest {
                    session_id: session.to_owned(),
                    ..Default::default()
                })
                .await?;
            client
                .list_tools(ListToolsRequest {
                    session_id: session.to_owned(),
                })
                .await?;
        }
    }
    Ok(())
}

async fn resources(url: String, catalogue: Catalogue, stats: Stats, stop: StopFlag) {
    let mut engine: Option<(EngineServiceClient<Channel>, String)> = None;
    let mut pacer = Pacer::new(stop, Duration::from_millis(400));
    while let Some(n) = pacer.next().await {
        let kind = match n % 5 {
            0 | 2 => "resource_read",
            1 | 3 => "prompt_get",
            _ => "list",
        };
        let engine = &mut engine;
        timed(&stats, kind, async {
            if engine.is_none() {
                let mut c = connect(&url).await?;
                let s = new_session(&mut c, &[]).await?;
                *engine = Some((c, s));
            }
            let (client, session) = engine.as_mut().expect("set above");
            resource_op(client, session, &catalogue, kind, (n / 5) as usize).await
        })
        .await;
    }
}

/// The background worker's engine: its client, session and event stream.
type EventEngine = (
    EngineServiceClient<Channel>,
    String,
    tonic::Streaming<switchyard_proto::v1::SessionEvent>,
);

async fn background_op(
    url: &str,
    engine: &mut Option<EventEngine>,
    tool: &str,
    args: &Value,
) -> anyhow::Result<()> {
    if engine.is_none() {
        let mut c = connect(url).await?;
        let s = new_session(&mut c, &[]).await?;
        let events = c
            .subscribe_events(SubscribeEventsRequest {
                session_id: s.clone(),
                background_after_ms: 0,
            })
            .await?
            .into_inner();
        *engine = Some((c, s, events));
    }
    let (client, session, events) = engine.as_mut().expect("set above");
    let mut request = call_request(session, tool, args);
    request.background = true;
    let r = check_call(tool, client.call_tool(request).await)?;
    let Some(bc) = r.background else {
        // It ran in the foreground (maxPerTarget reached).
        return Ok(());
    };
    loop {
        let Some(event) = events.message().await? else {
            anyhow::bail!("the event stream ended");
        };
        if event.data_json.contains(&bc.id) {
            if event.r#type == "background_call.completed" {
                return Ok(());
            }
            anyhow::bail!("{tool}: {}: {}", event.r#type, event.data_json);
        }
    }
}

async fn background(url: String, stats: Stats, stop: StopFlag) {
    let mut engine: Option<EventEngine> = None;
    let tools = [
        ("orders__task_sleep", json!({"ms": 1500, "text": "soak"})),
        (
            "everything__trigger-long-running-operation",
            json!({"duration": 2, "steps": 2}),
        ),
    ];
    let mut pacer = Pacer::new(stop, Duration::from_secs(4));
    while let Some(n) = pacer.next().await {
        let (tool, args) = &tools[n as usize % tools.len()];
        let result = match tokio::time::timeout(
            OP_LIMIT,
            background_op(&url, &mut engine, tool, args),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(anyhow::anyhow!(
                "no result event within {} s",
                OP_LIMIT.as_secs()
            )),
        };
        if result.is_err() {
            // A new session and subscription for the next one.
            if let Some((mut c, s, _)) = engine.take() {
                let _ = c
                    .delete_session(DeleteSessionRequest { session_id: s })
                    .await;
            }
        }
        stats.record("background", result);
    }
}

async fn storms(url: String, stats: Stats, stop: StopFlag) {
    let mut engine: Option<(EngineServiceClient<Channel>, String)> = None;
    let mut pacer = Pacer::new(stop, Duration::from_secs(20));
    while let Some(n) = pacer.next().await {
        let engine = &mut engine;
        timed(&stats, "storm", async {
            if engine.is_none() {
                let mut c = connect(&url).await?;
                let s = new_session(&mut c, &[]).await?;
                *engine = Some((c, s));
            }
            let (client, session) = engine.as_mut().expect("set above");
            for server in ["orders", "orders-http"] {
                let tool = format!("{server}__notify_storm");
                let r = client
                    .call_tool(call_request(session, &tool, &json!({"count": 500})))
                    .await;
                check_call(&tool, r)?;
                if n % 3 == 0 {
                    let tool = format!("{server}__toggle_extra_tool");
                    let r = client
                        .call_tool(call_request(session, &tool, &json!({})))
                        .await;
                    check_call(&tool, r)?;
                }
            }
            Ok(())
        })
        .await;
    }
}

async fn reconnect_once(
    url: &str,
    servers: &[&str],
    tool: &str,
    args: &Value,
) -> anyhow::Result<()> {
    let mut client = connect(url).await?;
    let session = new_session(&mut client, servers).await?;
    let result = async {
        let mut events = client
            .subscribe_events(SubscribeEventsRequest {
                session_id: session.clone(),
                background_after_ms: 0,
            })
            .await?
            .into_inner();
        // Whatever comes first (a tools.changed after a storm), or nothing.
        let _ = tokio::time::timeout(Duration::from_millis(100), events.message()).await;
        let server = tool.split("__").next().unwrap_or_default();
        if servers.is_empty() || servers.contains(&server) {
            check_call(
                tool,
                client.call_tool(call_request(&session, tool, args)).await,
            )?;
        }
        client
            .list_tools(ListToolsRequest {
                session_id: session.clone(),
            })
            .await?;
        drop(events);
        Ok::<(), anyhow::Error>(())
    }
    .await;
    client
        .delete_session(DeleteSessionRequest {
            session_id: session,
        })
        .await?;
    result
}

async fn reconnecting(url: String, offset: u64, stats: Stats, stop: StopFlag) {
    let mix = call_mix();
    let subsets: [&[&str]; 3] = [&[], &["orders"], &["everything", "orders-http"]];
    let mut pacer = Pacer::new(stop, Duration::from_millis(1500));
    while let Some(n) = pacer.next().await {
        let n = n + offset;
        let (tool, args) = &mix[n as usize % mix.len()];
        let servers = subsets[n as usize % subsets.len()];
        timed(
            &stats,
            "reconnect",
            reconnect_once(&url, servers, tool, args),
        )
        .await;
    }
}

async fn mcp_sessions(url: String, stats: Stats, stop: StopFlag) {
    let mix = call_mix();
    let mut client = reqwest::Client::new();
    let mut pacer = Pacer::new(stop, Duration::from_secs(1));
    while let Some(n) = pacer.next().await {
        if n % 5 == 0 {
            // New connections from time to time, as clients come and go.
            client = reqwest::Client::new();
        }
        let (tool, args) = mix[n as usize % mix.len()].clone();
        let session = crate::mcp::legacy_session(&client, &url, tool, args, n % 3 == 0);
        timed(&stats, "mcp_session", session).await;
    }
}

async fn mcp_calls(url: String, stats: Stats, stop: StopFlag) {
    let mix = call_mix();
    let client = reqwest::Client::new();
    let mut pacer = Pacer::new(stop, Duration::from_millis(500));
    while let Some(n) = pacer.next().await {
        if n % 10 == 9 {
            timed(
                &stats,
                "mcp_listen",
                crate::mcp::modern_listen(&client, &url, n),
            )
            .await;
        } else {
            let (tool, args) = mix[n as usize % mix.len()].clone();
            let call = crate::mcp::modern_call(&client, &url, n, tool, args);
            timed(&stats, "mcp_call", call).await;
        }
    }
}
