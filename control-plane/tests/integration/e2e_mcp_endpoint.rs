//! The MCP endpoint (`[mcp] listen`) end to end through `switchyard up`, in
//! front of the reference server in both eras (stdio) and
//! server-everything (115 resources in all, more than a page): the HTTP rules (Host and Origin, media types, body
//! limit, GET and DELETE), the 2026-07-28 checks in their specified order,
//! `server/discover`, the lists across servers with namespaced names and
//! URIs and every page reachable, calls and reads through the call path,
//! 2025-11-25 sessions (initialize, `Mcp-Session-Id`, DELETE, bound to
//! their URL), the per-server URL with names unchanged, and real clients
//! from other projects (the official Python SDK's, and rmcp's) in both eras,
//! answering elicitations of servers of both eras and approvals on its
//! 2025-11-25 stream, and as a 2026-07-28 client through `input_required`
//! and the endpoint's sealed `requestState` (bound, expiring, used once);
//! progress on a call's stream, with the client's own token, in both
//! eras; a server's log messages on a call's stream, at the client's
//! level (2025-11-25 `logging/setLevel`, 2026-07-28 `_meta`), only to the
//! client whose call caused them, never a stdio server's; and tasks
//! (background calls) for clients that declare them, in both eras, with a
//! task's question asked and answered; and HTTP/2 clients (prior
//! knowledge), whose `:authority` is checked as `Host` is; and
//! `mcp.max_connections`, beyond which connections wait.

use crate::common::*;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use std::time::Duration;
use switchyard_proto::v1 as pb;

const CAPS: &str = "io.modelcontextprotocol/clientCapabilities";
const VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// How long the endpoint's requestStates live in these tests, seconds.
const STATE_TTL_SECS: u64 = 10;

/// `switchyard up` with the MCP endpoint on a free port (4 KiB bodies at
/// most), the reference server in both eras with its resources, and
/// server-everything. Returns the gateway and the endpoint's base URL.
async fn gateway() -> (Gateway, String) {
    let reference = toml_str(switchyard_test_support::reference_server_bin().to_string_lossy());
    let servers = format!(
        r#"
[[servers]]
name = "orders"
transport = "stdio"
command = {reference}
args = ["--resources", "--era", "2026-07-28"]

[[servers]]
name = "orders-legacy"
transport = "stdio"
command = {reference}
args = ["--resources", "--era", "2025-11-25"]

[[servers]]
name = "orders-more"
transport = "stdio"
command = {reference}
args = ["--resources", "--era", "2026-07-28"]

[[servers]]
name = "everything"
transport = "stdio"
command = {everything}
args = ["stdio"]

[[servers]]
name = "shop"
transport = "stdio"
command = {reference}
args = ["--interactions", "--era", "2025-11-25"]

[[servers]]
name = "shop-modern"
transport = "stdio"
command = {reference}
args = ["--interactions", "--era", "2026-07-28"]
"#,
        everything = toml_str(switchyard_test_support::everything_bin().to_string_lossy()),
    );
    let port = switchyard_test_support::free_port();
    // requestStates live 10 s (the expiry test waits that long).
    let extra = format!(
        "[mcp]\nlisten = \"127.0.0.1:{port}\"\nmax_body_bytes = 4096\nrequest_state_ttl_sec = {STATE_TTL_SECS}\n"
    );
    let http = start_http_reference_server().await;
    let names = [
        "orders",
        "orders-legacy",
        "orders-more",
        "everything",
        "shop",
        "shop-modern",
    ];
    let gw =
        Gateway::start_with(StoreKind::Embedded, 10, http, &servers, &extra, &[], &names).await;
    let base = format!("http://127.0.0.1:{port}");
    // Every catalogue, resources included, reached the read model.
    eventually("every server's tools and resources over MCP", LIMIT, || {
        let base = base.clone();
        async move {
            let (_, _, tools) = modern(&base, "/mcp", "tools/list", None, json!({})).await;
            let tools = tools["result"]["tools"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let has = |prefix: &str| {
                tools
                    .iter()
                    .any(|t| t["name"].as_str().unwrap_or("").starts_with(prefix))
            };
            let (_, _, resources) = modern(&base, "/mcp", "resources/list", None, json!({})).await;
            let listed = resources["result"]["resources"]
                .as_array()
                .map_or(0, Vec::len);
            match has("orders__") && has("orders-legacy__") && has("everything__") && listed > 0 {
                true => Ok(()),
                false => Err(format!("tools {}, resources {listed}", tools.len())),
            }
        }
    })
    .await;
    (gw, base)
}

pub(crate) fn client() -> reqwest::Client {
    // reqwest is built without a TLS provider of its own; plain HTTP here.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("HTTP client")
}

/// POSTs `body` to `base` + `path` with `headers`; the status, the
/// response headers and the body (JSON, or `{"text": ...}`).
pub(crate) async fn post(
    base: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
) -> (u16, HeaderMap, Value) {
    let mut req = client().post(format!("{base}{path}")).body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("the endpoint answers");
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    let text = resp.text().await.expect("a body");
    let v = serde_json::from_str(&text).unwrap_or_else(|_| json!({"text": text}));
    (status, h, v)
}

pub(crate) const JSON_HEADERS: [(&str, &str); 2] = [
    ("content-type", "application/json"),
    ("accept", "application/json, text/event-stream"),
];

/// A complete 2026-07-28 request: headers from the body, `_meta` filled.
async fn modern(
    base: &str,
    path: &str,
    method: &str,
    name: Option<&str>,
    mut params: Value,
) -> (u16, HeaderMap, Value) {
    params["_meta"][VERSION] = json!("2026-07-28");
    params["_meta"][CAPS] = json!({});
    let mut h: Vec<(&str, &str)> = JSON_HEADERS.to_vec();
    h.push(("mcp-protocol-version", "2026-07-28"));
    h.push(("mcp-method", method));
    if let Some(n) = name {
        h.push(("mcp-name", n));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    post(base, path, &h, body.to_string()).await
}

/// A 2026-07-28 `tools/call` of `tool` with `arguments`, as a client
/// declaring `caps`; `round`: a retry's `inputResponses` and
/// `requestState`.
pub(crate) async fn modern_call(
    base: &str,
    path: &str,
    tool: &str,
    arguments: Value,
    caps: Value,
    round: Option<(Value, &str)>,
) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments,
        "_meta": {VERSION: "2026-07-28", CAPS: caps}});
    if let Some((responses, state)) = round {
        params["inputResponses"] = responses;
        params["requestState"] = json!(state);
    }
    let mut h: Vec<(&str, &str)> = JSON_HEADERS.to_vec();
    h.extend([
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
    ]);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let (status, _, r) = post(base, path, &h, body.to_string()).await;
    assert_eq!(status, 200, "{r}");
    r
}

/// The one question of an `input_required` answer: its key and params.
pub(crate) fn one_question(r: &Value) -> (String, Value) {
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    let asked = r["result"]["inputRequests"]
        .as_object()
        .expect("inputRequests");
    assert_eq!(asked.len(), 1, "{r}");
    let (key, request) = asked.iter().next().unwrap();
    assert_eq!(request["method"], "elicitation/create", "{r}");
    (key.clone(), request["params"].clone())
}

/// An SSE response's JSON-RPC messages, read as they come.
pub(crate) struct Sse {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: String,
}

impl Sse {
    /// The messages of `resp`, an SSE response.
    pub(crate) fn of(resp: reqwest::Response) -> Self {
        Sse {
            body: Box::pin(resp.bytes_stream()),
            buf: String::new(),
        }
    }

    /// The next message if one comes within `wait`.
    pub(crate) async fn next_within(&mut self, wait: Duration) -> Option<serde_json::Value> {
        use futures::StreamExt;
        tokio::time::timeout(wait, async {
            loop {
                if let Some(end) = self.buf.find("\n\n") {
                    let event: String = self.buf.drain(..end + 2).collect();
                    let data: String = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim_start)
                        .collect();
                    if !data.is_empty() {
                        return serde_json::from_str(&data).expect("a JSON-RPC message");
                    }
                    continue;
                }
                let chunk = self
                    .body
                    .next()
                    .await
                    .expect("the stream goes on")
                    .expect("bytes");
                self.buf.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await
        .ok()
    }

    /// The next message (bounded by [`LIMIT`]).
    pub(crate) async fn next(&mut self) -> serde_json::Value {
        self.next_within(LIMIT)
            .await
            .expect("a message within the limit")
    }
}

/// The error code of an answer.
fn code(v: &Value) -> i64 {
    v["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("not an error: {v}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn modern_clients_get_every_server_and_every_check_in_order() {
    let _heavy = HEAVY.lock().await;
    let (gw, base) = gateway().await;

    // server/discover: both eras offered, decorated as cacheable.
    let (status, h, d) = modern(&base, "/mcp", "server/discover", None, json!({})).await;
    assert_eq!(status, 200, "{d}");
    assert!(
        h["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    assert!(h.get("mcp-session-id").is_none(), "2026-07-28 is stateless");
    let r = &d["result"];
    assert_eq!(r["supportedVersions"][0], "2026-07-28", "{r}");
    assert!(
        r["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2025-11-25"))
    );
    assert_eq!(
        (
            r["resultType"].as_str(),
            r["ttlMs"].as_i64(),
            r["cacheScope"].as_str()
        ),
        (Some("complete"), Some(0), Some("private"))
    );
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "switchyard"
    );
    for cap in ["tools", "resources", "prompts", "completions"] {
        assert!(r["capabilities"][cap].is_object(), "{cap}: {r}");
    }

    // tools/list: engine names, summaries, effective hints, no outputSchema.
    let (_, _, t) = modern(&base, "/mcp", "tools/list", None, json!({})).await;
    let tools = t["result"]["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "deterministic order");
    let get = tools
        .iter()
        .find(|t| t["name"] == "orders__get_order")
        .expect("orders__get_order");
    assert!(get.get("outputSchema").is_none(), "{get}");
    assert!(
        get["inputSchema"]["properties"]["order_id"].is_object(),
        "{get}"
    );
    assert!(
        !names.contains(&"mcp_resources"),
        "no gateway tools over MCP"
    );
    assert_eq!(t["result"]["resultType"], "complete");

    // tools/call through the call path: MCP content back, counted.
    let (status, _, c) = modern(
        &base,
        "/mcp",
        "tools/call",
        Some("orders__get_order"),
        json!({"name": "orders__get_order", "arguments": {"order_id": "O-1001"}}),
    )
    .await;
    assert_eq!(status, 200, "{c}");
    assert_eq!(c["result"]["structuredContent"]["id"], "O-1001", "{c}");
    assert!(c["result"]["content"][0]["text"].is_string(), "{c}");
    assert_eq!(c["result"]["resultType"], "complete");
    // An unknown tool is -32602 naming it.
    let (status, _, c) = modern(
        &base,
        "/mcp",
        "tools/call",
        Some("orders__nope"),
        json!({"name": "orders__nope"}),
    )
    .await;
    assert_eq!((status, code(&c)), (200, -32602), "{c}");
    assert!(
        c["error"]["message"]
            .as_str()
            .unwrap()
            .contains("orders__nope"),
        "{c}"
    );

    // resources/list: every page of every server, namespaced URIs.
    let mut uris = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let (_, _, page) = modern(&base, "/mcp", "resources/list", None, params).await;
        let r = &page["result"];
        assert_eq!(r["cacheScope"], "private", "{r}");
        uris.extend(
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["uri"].as_str().unwrap().to_owned()),
        );
        match r["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert!(
        cursor.is_some(),
        "more than one page ({} resources)",
        uris.len()
    );
    for server in ["orders", "orders-legacy", "everything"] {
        assert!(
            uris.iter()
                .any(|u| u.starts_with(&format!("switchyard://{server}/"))),
            "{server}: {uris:?}"
        );
    }
    assert!(uris.contains(&"switchyard://orders/orders://policies/returns.md".to_owned()));
    let (_, _, bad) = modern(
        &base,
        "/mcp",
        "resources/list",
        None,
        json!({"cursor": "not-ours"}),
    )
    .await;
    assert_eq!(code(&bad), -32602, "{bad}");

    // Templates keep their variables behind the prefix.
    let (_, _, t) = modern(&base, "/mcp", "resources/templates/list", None, json!({})).await;
    let templates: Vec<&str> = t["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["uriTemplate"].as_str().unwrap())
        .collect();
    assert!(
        templates.contains(&"switchyard://orders/orders://orders/{order_id}"),
        "{templates:?}"
    );

    // resources/read of a namespaced URI, in both upstream eras.
    for server in ["orders", "orders-legacy"] {
        let uri = format!("switchyard://{server}/orders://policies/returns.md");
        let (status, _, r) = modern(
            &base,
            "/mcp",
            "resources/read",
            Some(&uri),
            json!({"uri": uri}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let c = &r["result"]["contents"][0];
        assert_eq!(c["uri"], uri.as_str(), "{r}");
        assert!(
            c["text"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains("return"),
            "{r}"
        );
        assert_eq!(r["result"]["ttlMs"], 0);
    }
    // A filled-in template is read as the server's URI.
    let uri = "switchyard://orders/orders://orders/O-1002";
    let (_, _, r) = modern(
        &base,
        "/mcp",
        "resources/read",
        Some(uri),
        json!({"uri": uri}),
    )
    .await;
    assert!(
        r["result"]["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("O-1002"),
        "{r}"
    );
    // Binary contents stay a blob (no attachments over MCP).
    let uri = "switchyard://orders/orders://invoices/INV-1.pdf";
    let (_, _, r) = modern(
        &base,
        "/mcp",
        "resources/read",
        Some(uri),
        json!({"uri": uri}),
    )
    .await;
    assert!(
        r["result"]["contents"][0]["blob"].as_str().unwrap().len() > 100,
        "{}",
        r.to_string().chars().take(300).collect::<String>()
    );
    // Unknown resources: -32602 in 2026-07-28, naming the URI.
    let uri = "switchyard://orders/orders://nope";
    let (_, _, r) = modern(
        &base,
        "/mcp",
        "resources/read",
        Some(uri),
        json!({"uri": uri}),
    )
    .await;
    assert_eq!(code(&r), -32602, "{r}");
    let (_, _, r) = modern(
        &base,
        "/mcp",
        "resources/read",
        Some("file:///etc/passwd"),
        json!({"uri": "file:///etc/passwd"}),
    )
    .await;
    assert_eq!(code(&r), -32602, "{r}");

    // prompts: namespaced names, messages back as the server sent them.
    let (_, _, p) = modern(&base, "/mcp", "prompts/list", None, json!({})).await;
    let prompts: Vec<&str> = p["result"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert!(prompts.contains(&"orders__summarize_order"), "{prompts:?}");
    let (status, _, g) = modern(
        &base,
        "/mcp",
        "prompts/get",
        Some("orders__summarize_order"),
        json!({"name": "orders__summarize_order", "arguments": {"order_id": "O-1001"}}),
    )
    .await;
    assert_eq!(status, 200, "{g}");
    assert!(
        g["result"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("O-1001"),
        "{g}"
    );
    // completion/complete of a template variable through its namespaced URI.
    let (status, _, c) = modern(&base, "/mcp", "completion/complete", None, json!({"ref": {"type": "ref/resource", "uri": "switchyard://orders/orders://orders/{order_id}"}, "argument": {"name": "order_id", "value": "O-10"}})).await;
    assert_eq!(status, 200, "{c}");
    assert!(
        c["result"]["completion"]["values"]
            .as_array()
            .is_some_and(|v| !v.is_empty()),
        "{c}"
    );

    // The per-server URL: names and URIs as the server gave them.
    let (_, _, t) = modern(&base, "/mcp/servers/orders", "tools/list", None, json!({})).await;
    let names: Vec<&str> = t["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"get_order") && !names.iter().any(|n| n.contains("__")),
        "{names:?}"
    );
    let (_, _, c) = modern(
        &base,
        "/mcp/servers/orders",
        "tools/call",
        Some("get_order"),
        json!({"name": "get_order", "arguments": {"order_id": "O-1001"}}),
    )
    .await;
    assert_eq!(c["result"]["structuredContent"]["id"], "O-1001", "{c}");
    let uri = "orders://policies/returns.md";
    let (_, _, r) = modern(
        &base,
        "/mcp/servers/orders",
        "resources/read",
        Some(uri),
        json!({"uri": uri}),
    )
    .await;
    assert_eq!(r["result"]["contents"][0]["uri"], uri, "{r}");
    let (status, _, r) = modern(&base, "/mcp/servers/nope", "tools/list", None, json!({})).await;
    assert_eq!(status, 404, "{r}");

    // The checks, in the specified order.
    let body = |method: &str, meta: Value| {
        json!({"jsonrpc": "2.0", "id": "0", "method": method, "params": {"_meta": meta}})
            .to_string()
    };
    let full_meta = json!({VERSION: "2026-07-28", CAPS: {}});
    let mut h: Vec<(&str, &str)> = JSON_HEADERS.to_vec();
    h.extend([
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ]);
    let (s, _, r) = post(&base, "/mcp", &h, body("ping", full_meta.clone())).await;
    assert_eq!((s, code(&r)), (404, -32601), "{r}");
    assert_eq!(r["id"], "0", "the id is echoed as sent: {r}");
    let (s, _, r) = post(&base, "/mcp", &h, body("initialize", full_meta.clone())).await;
    assert_eq!((s, code(&r)), (404, -32601), "{r}");
    let (s, _, r) = post(
        &base,
        "/mcp",
        &JSON_HEADERS,
        body("tools/list", full_meta.clone()),
    )
    .await;
    assert_eq!((s, code(&r)), (400, -32020), "no version header: {r}");
    let (s, _, r) = post(&base, "/mcp", &h, body("tools/list", json!({CAPS: {}}))).await;
    assert_eq!((s, code(&r)), (400, -32602), "no version in _meta: {r}");
    let (s, _, r) = post(
        &base,
        "/mcp",
        &h,
        body("tools/list", json!({VERSION: "v999.0.0", CAPS: {}})),
    )
    .await;
    assert_eq!(
        (s, code(&r)),
        (400, -32020),
        "header and _meta disagree: {r}"
    );
    let mut v999 = h.clone();
    v999[2].1 = "v999.0.0";
    let (s, _, r) = post(
        &base,
        "/mcp",
        &v999,
        body("tools/list", json!({VERSION: "v999.0.0", CAPS: {}})),
    )
    .await;
    assert_eq!((s, code(&r)), (400, -32022), "{r}");
    assert!(
        r["error"]["data"]["supported"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28")),
        "{r}"
    );
    let mut wrong_method = h.clone();
    wrong_method[3].1 = "prompts/list";
    let (s, _, r) = post(
        &base,
        "/mcp",
        &wrong_method,
        body("tools/list", full_meta.clone()),
    )
    .await;
    assert_eq!((s, code(&r)), (400, -32020), "{r}");
    // The right one and another: a proxy may have acted on the other.
    let mut two_methods = h.clone();
    two_methods.push(("mcp-method", "prompts/list"));
    let (s, _, r) = post(
        &base,
        "/mcp",
        &two_methods,
        body("tools/list", full_meta.clone()),
    )
    .await;
    assert_eq!((s, code(&r)), (400, -32020), "{r}");
    assert_eq!(
        r["error"]["message"], "more than one mcp-method header: send it once",
        "{r}"
    );
    let (s, _, r) = modern(
        &base,
        "/mcp",
        "tools/call",
        Some("orders__other"),
        json!({"name": "orders__get_order"}),
    )
    .await;
    assert_eq!((s, code(&r)), (400, -32020), "Mcp-Name differs: {r}");

    // HTTP rules: methods, media types, body limit, batches, Host, Origin.
    let resp = client()
        .get(format!("{base}/mcp"))
        .header("mcp-protocol-version", "2026-07-28")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 405);
    assert!(resp.headers()["allow"].to_str().unwrap().contains("POST"));
    let (s, _, _) = post(
        &base,
        "/mcp",
        &[
            ("content-type", "text/plain"),
            ("accept", "application/json"),
        ],
        "{}".into(),
    )
    .await;
    assert_eq!(s, 415);
    let (s, _, _) = post(
        &base,
        "/mcp",
        &[
            ("content-type", "application/json"),
            ("accept", "text/html"),
        ],
        "{}".into(),
    )
    .await;
    assert_eq!(s, 406);
    let (s, _, r) = post(&base, "/mcp", &JSON_HEADERS, "x".repeat(5000)).await;
    assert_eq!((s, code(&r)), (413, -32600), "{r}");
    let (s, _, r) = post(&base, "/mcp", &JSON_HEADERS, "{\"jsonrpc\":".into()).await;
    assert_eq!((s, code(&r)), (400, -32700), "{r}");
    let (s, _, r) = post(
        &base,
        "/mcp",
        &h,
        format!("[{}]", body("tools/list", full_meta.clone())),
    )
    .await;
    assert_eq!((s, code(&r)), (400, -32600), "{r}");
    let mut evil = h.clone();
    evil.push(("origin", "http://evil.example.com"));
    let (s, _, _) = post(&base, "/mcp", &evil, body("tools/list", full_meta.clone())).await;
    assert_eq!(s, 403);
    let mut rebound = h.clone();
    rebound.push(("host", "evil.example.com"));
    let (s, _, _) = post(
        &base,
        "/mcp",
        &rebound,
        body("tools/list", full_meta.clone()),
    )
    .await;
    assert_eq!(s, 403);
    let mut local = h.clone();
    local.push(("origin", "http://localhost:6274"));
    let (s, _, r) = post(&base, "/mcp", &local, body("tools/list", full_meta.clone())).await;
    assert_eq!(s, 200, "a loopback origin on a loopback endpoint: {r}");

    // Every request was counted, by method, era and outcome.
    let metrics = http_get(&gw.http_addr, "/metrics").await.1;
    let ok = sample(
        &metrics,
        "switchyard_control_plane_mcp_requests_total",
        &[
            ("method", "tools/call"),
            ("era", "2026-07-28"),
            ("outcome", "ok"),
        ],
    );
    assert!(ok.unwrap_or(0.0) >= 2.0, "{ok:?}");
    let rejected = sample(
        &metrics,
        "switchyard_control_plane_mcp_requests_total",
        &[
            ("method", "ping"),
            ("era", "2026-07-28"),
            ("outcome", "rejected"),
        ],
    );
    assert_eq!(rejected, Some(1.0));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn legacy_sessions_are_stored_bound_to_their_url_and_end_on_delete() {
    let _heavy = HEAVY.lock().await;
    let (mut gw, base) = gateway().await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (s, h, r) = post(&base, "/mcp", &JSON_HEADERS, init.to_string()).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["id"], 0);
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(r["result"]["serverInfo"]["name"], "switchyard");
    assert!(r["result"].get("resultType").is_none(), "{r}");
    let session = h["mcp-session-id"].to_str().unwrap().to_owned();
    assert_eq!(session.len(), 32);
    // An older version is echoed; an unknown one gets ours.
    let mut old = init.clone();
    old["params"]["protocolVersion"] = json!("2025-06-18");
    let (_, _, r) = post(&base, "/mcp", &JSON_HEADERS, old.to_string()).await;
    assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
    old["params"]["protocolVersion"] = json!("1999-01-01");
    let (_, _, r) = post(&base, "/mcp", &JSON_HEADERS, old.to_string()).await;
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
    // What is kept with a session is bounded: `clientInfo` and
    // `capabilities` are small objects (legacy.rs's unit test has the
    // size), or no session is opened.
    for (field, value, says) in [
        (
            "clientInfo",
            json!(5),
            "params.clientInfo: must be an object",
        ),
        (
            "capabilities",
            json!("all"),
            "params.capabilities: must be an object",
        ),
        (
            "_meta",
            json!(5),
            "params._meta: must be an object, not a number",
        ),
    ] {
        let mut big = init.clone();
        big["params"][field] = value;
        let (s, h, r) = post(&base, "/mcp", &JSON_HEADERS, big.to_string()).await;
        assert_eq!((s, code(&r)), (200, -32602), "{r}");
        assert_eq!(r["error"]["message"], says);
        assert!(h.get("mcp-session-id").is_none(), "{h:?}");
    }

    let in_session = |extra: &[(&'static str, &'static str)]| {
        let mut h: Vec<(&str, String)> = JSON_HEADERS
            .iter()
            .map(|(k, v)| (*k, v.to_string()))
            .collect();
        h.push(("mcp-session-id", session.clone()));
        h.push(("mcp-protocol-version", "2025-11-25".into()));
        h.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        h
    };
    let send = |path: &'static str, h: Vec<(&'static str, String)>, body: Value| {
        let base = base.clone();
        async move {
            let refs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
            post(&base, path, &refs, body.to_string()).await
        }
    };
    let (s, _, _) = send(
        "/mcp",
        in_session(&[]),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(s, 202);
    // initialize once per session: in it, 400 and no new session; with
    // a session that is not (any more), 404, so the client starts afresh.
    let (s, h, r) = send("/mcp", in_session(&[]), init.clone()).await;
    assert_eq!((s, code(&r), &r["id"]), (400, -32600, &json!(0)), "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("initialized already"),
        "{r}"
    );
    assert!(h.get("mcp-session-id").is_none(), "{h:?}");
    let mut elsewhere: Vec<(&str, &str)> = JSON_HEADERS.to_vec();
    elsewhere.push(("mcp-session-id", "0123456789abcdef0123456789abcdef"));
    let (s, _, r) = post(&base, "/mcp", &elsewhere, init.to_string()).await;
    assert_eq!((s, code(&r)), (404, -32001), "{r}");
    let (s, _, r) = send(
        "/mcp",
        in_session(&[]),
        json!({"jsonrpc": "2.0", "id": "a", "method": "tools/list"}),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["id"], "a");
    assert!(
        r["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "orders-legacy__get_order"),
        "{r}"
    );
    assert!(
        r["result"].get("ttlMs").is_none(),
        "no 2026-07-28 fields for 2025-11-25: {r}"
    );
    let (_, _, r) = send("/mcp", in_session(&[]), json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "orders-legacy__get_order", "arguments": {"order_id": "O-1001"}}})).await;
    assert_eq!(r["result"]["structuredContent"]["id"], "O-1001", "{r}");
    // A progress token is a string or a number: nothing else is taken, or
    // run.
    let (s, _, r) = send("/mcp", in_session(&[]), json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "orders-legacy__get_order", "arguments": {"order_id": "O-1001"}, "_meta": {"progressToken": {"t": 1}}}})).await;
    assert_eq!((s, code(&r)), (200, -32602), "{r}");
    assert_eq!(
        r["error"]["message"],
        "params._meta.progressToken: must be a string or a number, not an object"
    );
    // Arguments nested within the body's limit but beyond the call path's
    // are refused in the client's terms.
    let deep = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "orders-legacy__get_order",
        "arguments": {"x": serde_json::from_str::<Value>(&format!("{}{}", "[".repeat(121), "]".repeat(121))).unwrap()}}});
    let (s, _, r) = send("/mcp", in_session(&[]), deep).await;
    assert_eq!((s, code(&r)), (200, -32602), "{r}");
    assert_eq!(
        r["error"]["message"],
        "params.arguments: arrays and objects nest more than 120 levels deep"
    );
    // `_meta` is an object, or nothing is run.
    let (s, _, r) = send("/mcp", in_session(&[]), json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "orders-legacy__get_order", "arguments": {"order_id": "O-1001"}, "_meta": null}})).await;
    assert_eq!((s, code(&r)), (200, -32602), "{r}");
    assert_eq!(
        r["error"]["message"],
        "params._meta: must be an object, not null"
    );
    // A client that refuses JSON (`q=0`) but takes SSE gets its answer as
    // one event.
    let h = [
        ("content-type", "application/json"),
        ("accept", "application/json;q=0, text/event-stream"),
        ("mcp-session-id", session.as_str()),
    ];
    let ping = json!({"jsonrpc": "2.0", "id": 5, "method": "ping"});
    let (s, headers, r) = post(&base, "/mcp", &h, ping.to_string()).await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(headers["content-type"], "text/event-stream");
    let text = r["text"].as_str().expect("not JSON");
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("one event");
    assert_eq!(
        serde_json::from_str::<Value>(data).unwrap(),
        json!({"jsonrpc": "2.0", "id": 5, "result": {}})
    );
    let (_, _, r) = send(
        "/mcp",
        in_session(&[]),
        json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
    )
    .await;
    assert_eq!(r["result"], json!({}));
    // A 2025-11-25 client gets -32002 for a resource the server lacks.
    let uri = "switchyard://orders/orders://nope";
    let (_, _, r) = send(
        "/mcp",
        in_session(&[]),
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": uri}}),
    )
    .await;
    assert_eq!(code(&r), -32002, "{r}");
    // The session's engine session shows up as the caller's.
    let sessions = ok_stdout(&gw.cli(&["sessions", "list", "--json"]).await, "sessions");
    assert!(sessions.contains(&session), "{sessions}");

    // Without the header: 400; unknown: 404; on another URL: 404.
    let (s, _, r) = post(
        &base,
        "/mcp",
        &JSON_HEADERS,
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).to_string(),
    )
    .await;
    assert_eq!(s, 400, "{r}");
    let mut unknown = in_session(&[]);
    unknown[2].1 = "0".repeat(32);
    let (s, _, r) = send(
        "/mcp",
        unknown,
        json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}),
    )
    .await;
    assert_eq!((s, code(&r)), (404, -32001), "{r}");
    let (s, _, _) = send(
        "/mcp/servers/orders",
        in_session(&[]),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}),
    )
    .await;
    assert_eq!(s, 404, "a session is served on its own URL only");

    // A second session outlives a restart of the replica (it is stored).
    let (_, h2, _) = post(&base, "/mcp", &JSON_HEADERS, init.to_string()).await;
    let kept = h2["mcp-session-id"].to_str().unwrap().to_owned();
    let names = [
        "orders",
        "orders-legacy",
        "orders-more",
        "everything",
        "shop",
        "shop-modern",
    ];
    gw.restart(&[], &names).await;
    let kept_headers: Vec<(&str, &str)> = JSON_HEADERS
        .iter()
        .copied()
        .chain([("mcp-session-id", kept.as_str())])
        .collect();
    let listed = eventually("the kept session after the restart", LIMIT, || {
        let (base, kept_headers) = (base.clone(), kept_headers.clone());
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"});
            match post(&base, "/mcp", &kept_headers, body.to_string()).await {
                (200, _, r)
                    if r["result"]["tools"]
                        .as_array()
                        .is_some_and(|t| !t.is_empty()) =>
                {
                    Ok(r)
                }
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert!(
        listed["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "orders__get_order"),
        "{listed}"
    );

    // DELETE ends it, and its engine session.
    let resp = client()
        .delete(format!("{base}/mcp"))
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    let (s, _, _) = send(
        "/mcp",
        in_session(&[]),
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}),
    )
    .await;
    assert_eq!(s, 404);
    let sessions = ok_stdout(&gw.cli(&["sessions", "list", "--json"]).await, "sessions");
    assert!(!sessions.contains(&session), "{sessions}");
    gw.stop().await;
}

/// Runs the Python SDK's client (tests/peers/clients/python_sdk_client.py);
/// `asking`: a tool, its arguments, and the content to accept its questions
/// with.
async fn python_client(
    url: &str,
    mode: &str,
    tool: &str,
    args: Value,
    uri: &str,
    asking: Option<(&str, Value, Value)>,
) -> Value {
    let script = switchyard_test_support::peers_dir().join("clients/python_sdk_client.py");
    let mut cmd = tokio::process::Command::new(switchyard_test_support::venv_python());
    cmd.arg(script)
        .args([url, mode, tool, &args.to_string(), uri]);
    if let Some((tool, args, answer)) = asking {
        cmd.args([tool, &args.to_string(), &answer.to_string()]);
    }
    let out = tokio::time::timeout(LIMIT, cmd.output())
        .await
        .expect("the Python client finished in time")
        .expect("run the Python client");
    assert!(
        out.status.success(),
        "python client ({mode}) on {url} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_client_uses_the_endpoint_in_both_eras() {
    let _heavy = HEAVY.lock().await;
    let (gw, base) = gateway().await;
    let uri = "switchyard://orders/orders://policies/returns.md";
    for mode in ["legacy", "2026-07-28", "auto"] {
        let got = python_client(
            &format!("{base}/mcp"),
            mode,
            "orders__get_order",
            json!({"order_id": "O-1001"}),
            uri,
            None,
        )
        .await;
        let tools: Vec<&str> = got["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert!(
            tools.contains(&"orders-legacy__get_order"),
            "{mode}: {tools:?}"
        );
        assert_eq!(
            got["call"]["structuredContent"]["id"], "O-1001",
            "{mode}: {got}"
        );
        assert!(
            got["read"]["contents"][0]["text"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains("return"),
            "{mode}: {got}"
        );
        assert!(
            got["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|u| u == uri),
            "{mode}: {got}"
        );
        assert!(
            got["prompts"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p == "orders__summarize_order"),
            "{mode}: {got}"
        );
    }
    // One server, names unchanged.
    let got = python_client(
        &format!("{base}/mcp/servers/orders-legacy"),
        "legacy",
        "get_order",
        json!({"order_id": "O-1001"}),
        "orders://policies/returns.md",
        None,
    )
    .await;
    assert!(
        got["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("get_order")),
        "{got}"
    );
    assert_eq!(got["call"]["structuredContent"]["id"], "O-1001", "{got}");

    // A client answers the elicitations of a call in its own era (on its
    // 2025-11-25 stream, or through input_required), whichever era the
    // server speaks (a 2025-11-25 elicitation/create, a 2026-07-28
    // input_required): the bridges both ways.
    let form = json!({"contact_name": "Ada Lovelace", "email": "ada@example.com", "delivery_date": "2026-12-24",
        "quantity": 2, "shipping_speed": "express", "carrier": "ups", "notify_via": ["sms"]});
    for (mode, tool) in [
        ("legacy", "shop__confirm_order_form"),
        ("legacy", "shop-modern__confirm_order_form"),
        ("2026-07-28", "shop__confirm_order_form"),
        ("2026-07-28", "shop-modern__confirm_order_form"),
    ] {
        let got = python_client(
            &format!("{base}/mcp"),
            mode,
            "orders__get_order",
            json!({"order_id": "O-1001"}),
            uri,
            Some((tool, json!({}), form.clone())),
        )
        .await;
        let questions = got["questions"].as_array().unwrap();
        assert_eq!(questions.len(), 1, "{mode} {tool}: {got}");
        assert_eq!(
            questions[0]["requestedSchema"]["properties"]["contact_name"]["type"], "string",
            "{mode} {tool}: {got}"
        );
        let asked = &got["asked"];
        assert_ne!(asked["isError"], true, "{mode} {tool}: {asked}");
        assert_eq!(
            asked["structuredContent"]["action"], "accept",
            "{mode} {tool}: {asked}"
        );
        assert_eq!(
            asked["structuredContent"]["content"]["carrier"], "ups",
            "{mode} {tool}: {asked}"
        );
    }
    // An approval of a `confirm` tool is a question with no fields.
    ok_stdout(
        &gw.cli(&["policy", "set", "orders-legacy", "get_order", "confirm"])
            .await,
        "policy set",
    );
    for mode in ["legacy", "2026-07-28"] {
        let got = python_client(
            &format!("{base}/mcp"),
            mode,
            "orders__get_order",
            json!({"order_id": "O-1001"}),
            uri,
            Some((
                "orders-legacy__get_order",
                json!({"order_id": "O-1002"}),
                json!({}),
            )),
        )
        .await;
        let questions = got["questions"].as_array().unwrap();
        assert_eq!(questions.len(), 1, "{mode}: {got}");
        assert!(
            questions[0]["message"]
                .as_str()
                .unwrap()
                .contains("get_order"),
            "{mode}: {got}"
        );
        assert_eq!(
            questions[0]["requestedSchema"]["properties"],
            json!({}),
            "{mode}: {got}"
        );
        assert_eq!(
            got["asked"]["structuredContent"]["id"], "O-1002",
            "{mode}: approved and called: {got}"
        );
    }
    // The interactions were recorded with their outcomes.
    let metrics = http_get(&gw.http_addr, "/metrics").await.1;
    let count = |kind, outcome| {
        sample(
            &metrics,
            "switchyard_control_plane_interactions_total",
            &[("kind", kind), ("outcome", outcome)],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(count("approval", "approve"), 2.0, "{metrics}");
    assert!(count("form", "accept") >= 4.0);
    gw.stop().await;
}

/// The stub's `cancelled_ids`: the request ids it got
/// `notifications/cancelled` for.
async fn cancelled_ids(base: &str) -> Vec<Value> {
    let (_, _, r) = modern(
        base,
        "/mcp",
        "tools/call",
        Some("stub__cancelled_ids"),
        json!({"name": "stub__cancelled_ids"}),
    )
    .await;
    let text = r["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("[]")
        .to_owned();
    serde_json::from_str(&text).unwrap_or_default()
}

/// Waits until the stub has had `n` `notifications/cancelled`.
async fn cancellations_reach(base: &str, n: usize) {
    eventually(
        &format!("the server got {n} notifications/cancelled"),
        LIMIT,
        || async move {
            match cancelled_ids(base).await.len() {
                got if got == n => Ok(()),
                got => Err(format!("{got} ids")),
            }
        },
    )
    .await;
}

/// Asserts that `r` is the error of a cancelled call.
fn was_cancelled(r: &Value) {
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("cancelled"),
        "{r}"
    );
}

/// Waits until the stub has had `n` `hang` calls.
async fn hangs_reach(base: &str, n: u64) {
    eventually("the hang call reached the server", LIMIT, || {
        let base = base.to_owned();
        async move {
            let (_, _, r) = modern(
                &base,
                "/mcp",
                "tools/call",
                Some("stub__hangs"),
                json!({"name": "stub__hangs"}),
            )
            .await;
            let seen: u64 = r["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or("0")
                .parse()
                .unwrap_or(0);
            match seen >= n {
                true => Ok(()),
                false => Err(format!("{seen} hang calls")),
            }
        }
    })
    .await;
}

/// `switchyard up` with the MCP endpoint in front of the Python stub
/// `script` (server `stub`), once its `tool` is listed over MCP. Returns
/// the gateway and the endpoint's base URL.
async fn stub_gateway(script: &str, tool: &str) -> (Gateway, String) {
    let script = switchyard_test_support::stub_script(script);
    let servers = format!(
        "[[servers]]\nname = \"stub\"\ntransport = \"stdio\"\ncommand = \"python3\"\nargs = [{}]\n",
        toml_str(script.to_string_lossy())
    );
    let port = switchyard_test_support::free_port();
    let extra = format!("[mcp]\nlisten = \"127.0.0.1:{port}\"\n");
    let http = start_http_reference_server().await;
    let gw = Gateway::start_with(
        StoreKind::Embedded,
        10,
        http,
        &servers,
        &extra,
        &[],
        &["stub"],
    )
    .await;
    let base = format!("http://127.0.0.1:{port}");
    eventually("the stub's tools over MCP", LIMIT, || {
        let base = base.clone();
        async move {
            let (_, _, t) = modern(&base, "/mcp", "tools/list", None, json!({})).await;
            match t["result"]["tools"]
                .as_array()
                .is_some_and(|a| a.iter().any(|t| t["name"] == tool))
            {
                true => Ok(()),
                false => Err(t.to_string()),
            }
        }
    })
    .await;
    (gw, base)
}

#[tokio::test(flavor = "multi_thread")]
async fn cancellation_closed_streams_deletes_and_every_param_reach_the_server() {
    let _heavy = HEAVY.lock().await;
    let (gw, base) = stub_gateway("crashy.py", "stub__hang").await;

    // A 2025-11-25 client cancels its call with notifications/cancelled.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (_, h, _) = post(&base, "/mcp", &JSON_HEADERS, init.to_string()).await;
    let session = h["mcp-session-id"].to_str().unwrap().to_owned();
    let headers = move || {
        let mut h: Vec<(&'static str, String)> = JSON_HEADERS
            .iter()
            .map(|(k, v)| (*k, v.to_string()))
            .collect();
        h.push(("mcp-session-id", session.clone()));
        h
    };
    let send = |h: Vec<(&'static str, String)>, body: Value| {
        let base = base.clone();
        async move {
            let refs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
            post(&base, "/mcp", &refs, body.to_string()).await
        }
    };
    let pending = tokio::spawn(send(
        headers(),
        json!({"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {"name": "stub__hang"}}),
    ));
    // Cancelled once the server has the call (else there is nothing to
    // cancel upstream), and again until it ends (harmless).
    hangs_reach(&base, 1).await;
    let started = std::time::Instant::now();
    while !pending.is_finished() {
        assert!(started.elapsed() < LIMIT, "the call was never cancelled");
        let (s, _, _) = send(headers(), json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 42, "reason": "user"}})).await;
        assert_eq!(s, 202);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (s, _, r) = pending.await.unwrap();
    assert_eq!(s, 200);
    was_cancelled(&r);
    cancellations_reach(&base, 1).await;

    // A 2026-07-28 client that closes its request's connection cancels it.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "stub__hang", "_meta": {VERSION: "2026-07-28", CAPS: {}}}});
    let request = client()
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "stub__hang")
        .body(body.to_string())
        .send();
    let gone = tokio::spawn(request);
    hangs_reach(&base, 2).await;
    assert!(!gone.is_finished(), "the hanging call answered");
    // The client goes away: its connection closes.
    gone.abort();
    // The closed stream cancelled the call upstream.
    cancellations_reach(&base, 2).await;
    // Every field of a client's params reaches the server as given, in
    // both eras: arguments, unknown fields, and `_meta` less the
    // protocol's own keys.
    let extra = json!({"n": [1, 2.5, null, -0.0], "é": "ü\n"});
    let params_seen = |r: &Value| -> Value {
        let text = r["result"]["content"][0]["text"].as_str();
        serde_json::from_str(text.unwrap_or_else(|| panic!("{r}"))).expect("the params as JSON")
    };
    let (s, _, r) = send(
        headers(),
        json!({"jsonrpc": "2.0", "id": 43, "method": "tools/call", "params": {
            "name": "stub__params", "arguments": {"a": 1}, "x-extra": extra,
            "_meta": {"trace": "t1"}}}),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    let got = params_seen(&r);
    assert_eq!(got["name"], "params", "{got}");
    assert_eq!(got["arguments"], json!({"a": 1}), "{got}");
    assert_eq!(got["x-extra"], extra, "{got}");
    assert_eq!(got["_meta"]["trace"], "t1", "{got}");
    let (s, _, r) = modern(
        &base,
        "/mcp",
        "tools/call",
        Some("stub__params"),
        json!({"name": "stub__params", "x-extra": extra, "other": 0}),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    let got = params_seen(&r);
    assert_eq!(got["x-extra"], extra, "{got}");
    assert_eq!(got["other"], 0, "{got}");
    let protocol_keys = got["_meta"].as_object().into_iter().flatten();
    assert!(
        protocol_keys
            .into_iter()
            .all(|(k, _)| !k.starts_with("io.modelcontextprotocol/")),
        "{got}"
    );
    // A DELETE of the session cancels its running call, upstream too.
    let pending = tokio::spawn(send(
        headers(),
        json!({"jsonrpc": "2.0", "id": 44, "method": "tools/call", "params": {"name": "stub__hang"}}),
    ));
    hangs_reach(&base, 3).await;
    let resp = client()
        .delete(format!("{base}/mcp"))
        .header("mcp-session-id", headers()[2].1.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let (s, _, r) = tokio::time::timeout(LIMIT, pending)
        .await
        .expect("the call ends with its session")
        .unwrap();
    assert_eq!(s, 200);
    was_cancelled(&r);
    cancellations_reach(&base, 3).await;
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn modern_clients_answer_questions_through_input_required() {
    let _heavy = HEAVY.lock().await;
    let (gw, base) = gateway().await;
    let elicits = json!({"elicitation": {}});
    let form = json!({"contact_name": "Ada Lovelace", "email": "ada@example.com", "delivery_date": "2026-12-24",
        "quantity": 2, "shipping_speed": "express", "carrier": "ups", "notify_via": ["sms"]});
    let rejections = |metrics: &str, reason| {
        sample(
            metrics,
            "switchyard_control_plane_mcp_request_state_rejections_total",
            &[("reason", reason)],
        )
        .unwrap_or(0.0)
    };
    // A 2025-11-25 server's elicitation and a 2026-07-28 server's
    // input_required reach the client the same way.
    for tool in [
        "shop__confirm_order_form",
        "shop-modern__confirm_order_form",
    ] {
        let first = modern_call(&base, "/mcp", tool, json!({}), elicits.clone(), None).await;
        let (key, question) = one_question(&first);
        assert_eq!(
            question["requestedSchema"]["properties"]["contact_name"]["type"], "string",
            "{tool}: {first}"
        );
        let state = first["result"]["requestState"].as_str().unwrap().to_owned();
        assert!(state.starts_with("rs2."), "{state}");
        let responses = json!({key.clone(): {"action": "accept", "content": form}});
        // Tampered, or presented with other arguments or on another URL:
        // refused, and nothing is answered or spent.
        let mut tampered = state.clone().into_bytes();
        let at = tampered.len() - 3;
        tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        for (path, args, st) in [
            ("/mcp", json!({}), tampered.as_str()),
            ("/mcp", json!({"extra": 1}), state.as_str()),
            ("/mcp/servers/shop", json!({}), state.as_str()),
            ("/mcp", json!({}), "rs2.bm90.aGVsbG8.d29ybGQ"),
        ] {
            let path_tool = if path == "/mcp" {
                tool
            } else {
                "confirm_order_form"
            };
            let r = modern_call(
                &base,
                path,
                path_tool,
                args.clone(),
                elicits.clone(),
                Some((responses.clone(), st)),
            )
            .await;
            assert_eq!(code(&r), -32602, "{tool} {path} {args}: {r}");
            assert!(
                r["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("requestState rejected"),
                "{r}"
            );
            assert_eq!(r["id"], 7, "{r}");
        }
        // `inputResponses` that is not an object: refused before the state
        // is spent, so the corrected retry may use it.
        let r = modern_call(
            &base,
            "/mcp",
            tool,
            json!({}),
            elicits.clone(),
            Some((json!([]), state.as_str())),
        )
        .await;
        assert_eq!(code(&r), -32602, "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("params.inputResponses: must be an object"),
            "{r}"
        );
        // So is a first request's (nothing starts).
        let mut h: Vec<(&str, &str)> = JSON_HEADERS.to_vec();
        h.extend([
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", tool),
        ]);
        let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
            "name": tool, "arguments": {}, "inputResponses": [],
            "_meta": {VERSION: "2026-07-28", CAPS: elicits}}});
        let (_, _, r) = post(&base, "/mcp", &h, body.to_string()).await;
        assert_eq!(code(&r), -32602, "{r}");
        // The real retry resumes the same call, on its answer.
        let done = modern_call(
            &base,
            "/mcp",
            tool,
            json!({}),
            elicits.clone(),
            Some((responses.clone(), &state)),
        )
        .await;
        let result = &done["result"];
        assert_eq!(result["resultType"], "complete", "{tool}: {done}");
        assert_eq!(result["structuredContent"]["action"], "accept", "{done}");
        assert_eq!(
            result["structuredContent"]["content"]["carrier"], "ups",
            "{done}"
        );
        // Used once.
        let again = modern_call(
            &base,
            "/mcp",
            tool,
            json!({}),
            elicits.clone(),
            Some((responses, &state)),
        )
        .await;
        assert_eq!(code(&again), -32602, "{again}");
    }
    let metrics = http_get(&gw.http_addr, "/metrics").await.1;
    assert_eq!(rejections(&metrics, "integrity"), 6.0, "{metrics}");
    assert_eq!(rejections(&metrics, "unknown_key"), 2.0, "{metrics}");
    assert_eq!(rejections(&metrics, "replayed"), 2.0, "{metrics}");

    // A form answer that does not fit is asked again, with a new state.
    let first = modern_call(
        &base,
        "/mcp",
        "shop__confirm_order_form",
        json!({}),
        elicits.clone(),
        None,
    )
    .await;
    let (key, _) = one_question(&first);
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let mut wrong = form.clone();
    wrong["quantity"] = json!("many");
    let again = modern_call(
        &base,
        "/mcp",
        "shop__confirm_order_form",
        json!({}),
        elicits.clone(),
        Some((
            json!({key.clone(): {"action": "accept", "content": wrong}}),
            &state,
        )),
    )
    .await;
    let (key2, _) = one_question(&again);
    assert_eq!(key2, key, "the same question: {again}");
    let state2 = again["result"]["requestState"].as_str().unwrap().to_owned();
    assert_ne!(state2, state);
    // So is an answer that is no `ElicitResult` (no `action`, a result
    // that is not an object): it is not taken as cancel.
    let mut state2 = state2;
    for malformed in [
        json!({"content": form}),
        json!({"action": 5}),
        json!("accept"),
    ] {
        let again = modern_call(
            &base,
            "/mcp",
            "shop__confirm_order_form",
            json!({}),
            elicits.clone(),
            Some((json!({key.clone(): malformed.clone()}), &state2)),
        )
        .await;
        let (key3, _) = one_question(&again);
        assert_eq!(key3, key, "{malformed} is asked again: {again}");
        state2 = again["result"]["requestState"].as_str().unwrap().to_owned();
    }
    let declined = modern_call(
        &base,
        "/mcp",
        "shop__confirm_order_form",
        json!({}),
        elicits.clone(),
        Some((json!({key: {"action": "decline"}}), &state2)),
    )
    .await;
    assert_eq!(
        declined["result"]["structuredContent"]["action"], "decline",
        "{declined}"
    );

    // An approval of a `confirm` tool is a question with no fields.
    ok_stdout(
        &gw.cli(&["policy", "set", "orders-legacy", "get_order", "confirm"])
            .await,
        "policy set",
    );
    let args = json!({"order_id": "O-1002"});
    let first = modern_call(
        &base,
        "/mcp",
        "orders-legacy__get_order",
        args.clone(),
        elicits.clone(),
        None,
    )
    .await;
    let (key, question) = one_question(&first);
    assert_eq!(
        question["requestedSchema"]["properties"],
        json!({}),
        "{first}"
    );
    assert!(
        question["message"].as_str().unwrap().contains("get_order"),
        "{first}"
    );
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    let done = modern_call(
        &base,
        "/mcp",
        "orders-legacy__get_order",
        args,
        elicits.clone(),
        Some((json!({key: {"action": "accept"}}), &state)),
    )
    .await;
    assert_eq!(
        done["result"]["structuredContent"]["id"], "O-1002",
        "{done}"
    );
    // A client that did not declare elicitation is never asked: the
    // question waits in its engine session for another subscriber (here
    // the CLI), and the call ends with that answer.
    let silent = {
        let base = base.clone();
        tokio::spawn(async move {
            modern_call(
                &base,
                "/mcp",
                "shop__confirm_order_form",
                json!({}),
                json!({}),
                None,
            )
            .await
        })
    };
    let sessions = ok_json(&gw.cli(&["sessions", "list", "--json"]).await, "sessions");
    let session = sessions.to_string();
    let session = session
        .split('"')
        .find(|s| s.starts_with("mcp-"))
        .unwrap_or_else(|| panic!("no mcp- session in {sessions}"))
        .to_owned();
    let open = eventually("the question in the session", LIMIT, || {
        let (gw, session) = (&gw, session.clone());
        async move {
            let listed = ok_json(
                &gw.cli(&["interactions", "--session", &session, "--json"])
                    .await,
                "interactions",
            );
            match listed["interactions"].as_array().map(Vec::as_slice) {
                Some([one]) => Ok(one["id"].as_str().unwrap().to_owned()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    ok_stdout(
        &gw.cli(&["answer", "--session", &session, &open, "--decline"])
            .await,
        "answer",
    );
    let r = silent.await.unwrap();
    assert_eq!(
        r["result"]["resultType"], "complete",
        "never input_required: {r}"
    );
    assert_eq!(r["result"]["structuredContent"]["action"], "decline", "{r}");

    // An expired state is refused; the question stays open meanwhile
    // (it has its own timeout).
    let first = modern_call(
        &base,
        "/mcp",
        "shop__confirm_order_form",
        json!({}),
        elicits.clone(),
        None,
    )
    .await;
    let (key, _) = one_question(&first);
    let state = first["result"]["requestState"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_secs(STATE_TTL_SECS + 1)).await;
    let late = modern_call(
        &base,
        "/mcp",
        "shop__confirm_order_form",
        json!({}),
        elicits.clone(),
        Some((json!({key: {"action": "accept", "content": form}}), &state)),
    )
    .await;
    assert_eq!(code(&late), -32602, "{late}");
    let metrics = http_get(&gw.http_addr, "/metrics").await.1;
    assert_eq!(rejections(&metrics, "expired"), 1.0, "{metrics}");
    // The calls ran in one engine session of this caller on this URL.
    let sessions = ok_stdout(&gw.cli(&["sessions", "list", "--json"]).await, "sessions");
    assert_eq!(sessions.matches("\"mcp-").count(), 1, "{sessions}");
    gw.stop().await;
}

/// Opens a GET stream of 2025-11-25 session `sid` at `base` + `path`.
async fn get_stream(base: &str, path: &str, sid: &str) -> reqwest::Response {
    let resp = client()
        .get(format!("{base}{path}"))
        .header("mcp-session-id", sid)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp
}

/// Waits until the gateway at `addr` counts `n` open listen streams.
async fn listen_streams_reach(addr: &str, n: f64) {
    eventually(&format!("{n} listen streams"), LIMIT, || async move {
        let m = http_get(addr, "/metrics").await.1;
        match sample(&m, "switchyard_control_plane_mcp_listen_streams", &[]) {
            Some(v) if v == n => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// Sets the policy of `orders`' `get_order` to `policy`: `told` (a GET
/// stream) and `listen` (a 2026-07-28 listen stream) are told the tools
/// changed.
async fn policy_told(gw: &Gateway, policy: &str, told: &mut Sse, listen: &mut Sse) {
    ok_stdout(
        &gw.cli(&["policy", "set", "orders", "get_order", policy])
            .await,
        "policy set",
    );
    for stream in [told, listen] {
        let tools = stream.next().await;
        assert_eq!(
            tools["method"], "notifications/tools/list_changed",
            "{tools}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_are_told_of_real_list_changes_in_their_era() {
    let _heavy = HEAVY.lock().await;
    let (gw, base) = gateway().await;
    // 2026-07-28: subscriptions/listen, tools and resources only.
    let listen = json!({"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": true, "resourcesListChanged": true,
            "resourceSubscriptions": ["orders://policies/returns.md"]},
        "_meta": {VERSION: "2026-07-28", CAPS: {}}}});
    let mut request = client()
        .post(format!("{base}/mcp"))
        .body(listen.to_string());
    for (k, v) in JSON_HEADERS.iter().copied().chain([
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "subscriptions/listen"),
    ]) {
        request = request.header(k, v);
    }
    let resp = request.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut modern_stream = Sse::of(resp);
    let ack = modern_stream.next().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION], 7, "{ack}");
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "resourcesListChanged": true}),
        "resource updates are not relayed: {ack}"
    );
    // 2025-11-25: the session's GET stream, every list.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (_, h, r) = post(&base, "/mcp", &JSON_HEADERS, init.to_string()).await;
    assert_eq!(
        r["result"]["capabilities"]["tools"]["listChanged"], true,
        "{r}"
    );
    let sid = h["mcp-session-id"].to_str().unwrap().to_owned();
    let no_sse = client()
        .get(format!("{base}/mcp"))
        .header("mcp-session-id", &sid)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(no_sse.status(), 406);
    let open_get = || {
        let (base, sid) = (base.clone(), sid.clone());
        async move { Sse::of(get_stream(&base, "/mcp", &sid).await) }
    };
    let streams_open = |n: f64| listen_streams_reach(&gw.http_addr, n);
    let mut legacy_stream = open_get().await;
    // Both streams are open (counted) before anything changes.
    streams_open(2.0).await;

    // A policy that hides a tool changes what the clients see.
    ok_stdout(
        &gw.cli(&["policy", "set", "orders", "get_order", "disabled"])
            .await,
        "policy set",
    );
    let tools = modern_stream.next().await;
    assert_eq!(
        tools["method"], "notifications/tools/list_changed",
        "{tools}"
    );
    assert_eq!(tools["params"]["_meta"][SUBSCRIPTION], 7, "{tools}");
    let tools = legacy_stream.next().await;
    assert_eq!(
        tools["method"], "notifications/tools/list_changed",
        "{tools}"
    );
    assert!(tools["params"].get("_meta").is_none(), "{tools}");
    // The same policy again changes nothing, and says nothing; a resource
    // the server adds is told (with the prompt, to the 2025-11-25 client,
    // which follows every list).
    ok_stdout(
        &gw.cli(&["policy", "set", "orders", "get_order", "disabled"])
            .await,
        "policy set",
    );
    let added = modern_call(
        &base,
        "/mcp",
        "orders-legacy__add_resource",
        json!({}),
        json!({}),
        None,
    )
    .await;
    assert_eq!(added["result"]["resultType"], "complete", "{added}");
    let next = modern_stream.next().await;
    assert_eq!(
        next["method"], "notifications/resources/list_changed",
        "{next}"
    );
    let mut legacy_seen = Vec::new();
    for _ in 0..2 {
        legacy_seen.push(
            legacy_stream.next().await["method"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    legacy_seen.sort();
    assert_eq!(
        legacy_seen,
        [
            "notifications/prompts/list_changed",
            "notifications/resources/list_changed"
        ]
    );
    // A second GET stream of the session: each notification goes on one
    // stream only (basic/transports), the newest open one; the older stays
    // open with keep-alives, and gets them again once the newer ends.
    let mut newer = open_get().await;
    streams_open(3.0).await;
    policy_told(&gw, "default", &mut newer, &mut modern_stream).await;
    let twice = legacy_stream.next_within(Duration::from_secs(2)).await;
    assert!(twice.is_none(), "sent on two streams: {twice:?}");
    drop(newer);
    streams_open(2.0).await;
    policy_told(&gw, "disabled", &mut legacy_stream, &mut modern_stream).await;
    // A replica that stops ends the listen request with its result.
    gw.stop().await;
    let end = modern_stream.next().await;
    assert_eq!(end["id"], 7, "{end}");
    assert_eq!(end["result"]["resultType"], "complete", "{end}");
    assert_eq!(end["result"]["_meta"][SUBSCRIPTION], 7, "{end}");
}

/// rmcp's client handler for the tests: declares `elicitation` and
/// answers every question with `accept` and `form`, keeping the questions.
#[derive(Clone)]
struct RmcpAnswering {
    info: rmcp::model::ClientConfig,
    form: Value,
    asked: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl rmcp::ClientHandler for RmcpAnswering {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        self.info.clone()
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.asked
            .lock()
            .unwrap()
            .push(serde_json::to_value(&request).unwrap());
        Ok(
            rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                .with_content(self.form.clone()),
        )
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rmcp_client_uses_the_endpoint_in_both_eras() {
    use rmcp::model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
        ReadResourceRequestParams,
    };
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::{ClientLifecycleMode, ClientServiceExt};
    let _heavy = HEAVY.lock().await;
    let (gw, base) = gateway().await;
    let form = json!({"contact_name": "Ada Lovelace", "email": "ada@example.com", "delivery_date": "2026-12-24",
        "quantity": 2, "shipping_speed": "express", "carrier": "ups", "notify_via": ["sms"]});
    for (era, lifecycle) in [
        ("2025-11-25", ClientLifecycleMode::Initialize),
        (
            "2026-07-28",
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        ),
    ] {
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {}})).unwrap();
        let mut info = ClientConfig::new(capabilities, Implementation::new("switchyard-test", "1"));
        if era == "2025-11-25" {
            info.protocol_version = ProtocolVersion::V_2025_11_25;
        }
        let handler = RmcpAnswering {
            info,
            form: form.clone(),
            asked: Default::default(),
        };
        let transport = StreamableHttpClientTransport::from_uri(format!("{base}/mcp"));
        let client = handler
            .clone()
            .serve_with_lifecycle(transport, lifecycle)
            .await
            .unwrap_or_else(|e| panic!("{era}: rmcp connects: {e}"));
        let negotiated = client
            .peer_info()
            .map(|i| i.protocol_version.to_string())
            .unwrap_or_default();
        assert_eq!(negotiated, era);
        let tools = client.list_all_tools().await.expect("tools/list");
        assert!(
            tools.iter().any(|t| t.name == "orders__get_order"),
            "{era}: {tools:?}"
        );
        let args = json!({"order_id": "O-1001"}).as_object().unwrap().clone();
        let called = client
            .call_tool(CallToolRequestParams::new("orders__get_order").with_arguments(args))
            .await
            .unwrap_or_else(|e| panic!("{era}: tools/call: {e}"));
        assert_eq!(
            called.structured_content.as_ref().unwrap()["id"],
            "O-1001",
            "{era}: {called:?}"
        );
        let read = client
            .read_resource(ReadResourceRequestParams::new(
                "switchyard://orders/orders://policies/returns.md",
            ))
            .await
            .unwrap_or_else(|e| panic!("{era}: resources/read: {e}"));
        let text = serde_json::to_value(&read.contents).unwrap();
        assert!(
            text.to_string().to_lowercase().contains("return"),
            "{era}: {text}"
        );
        // A question of a server of either era, answered in this client's.
        for tool in [
            "shop__confirm_order_form",
            "shop-modern__confirm_order_form",
        ] {
            let asked = client
                .call_tool(CallToolRequestParams::new(tool))
                .await
                .unwrap_or_else(|e| panic!("{era} {tool}: {e}"));
            let content = asked.structured_content.clone().unwrap_or_default();
            assert_eq!(content["action"], "accept", "{era} {tool}: {asked:?}");
            assert_eq!(
                content["content"]["carrier"], "ups",
                "{era} {tool}: {asked:?}"
            );
        }
        assert_eq!(handler.asked.lock().unwrap().len(), 2, "{era}");
        client.cancel().await.expect("close");
    }
    gw.stop().await;
}

/// The messages of one request whose client wants its notifications, up
/// to its response: the notifications before it, and the response. It is
/// answered as a stream once a notification comes, and with JSON when
/// none does (then there are none).
async fn streamed(resp: reqwest::Response) -> (Vec<Value>, Value) {
    assert_eq!(resp.status(), 200);
    let kind = resp.headers()["content-type"].to_str().unwrap().to_owned();
    if kind == "application/json" {
        return (Vec::new(), resp.json().await.unwrap());
    }
    assert_eq!(
        kind, "text/event-stream",
        "a call whose client wants its notifications is answered as a stream"
    );
    let mut sse = Sse::of(resp);
    let mut notes = Vec::new();
    loop {
        let m = sse.next().await;
        if m.get("method").is_some() {
            notes.push(m);
        } else {
            return (notes, m);
        }
    }
}

/// Checks `notes` are server-everything's three progress steps for
/// `token`, in order, and `response` the call's result (`id`).
fn three_steps(notes: &[Value], response: &Value, token: &Value, id: &Value) {
    let steps: Vec<(Value, Value, Value)> = notes
        .iter()
        .map(|n| {
            assert_eq!(n["method"], "notifications/progress", "{n}");
            let p = &n["params"];
            (
                p["progressToken"].clone(),
                p["progress"].clone(),
                p["total"].clone(),
            )
        })
        .collect();
    let want: Vec<(Value, Value, Value)> = (1..=3)
        .map(|i| (token.clone(), json!(i), json!(3)))
        .collect();
    assert_eq!(steps, want, "the progress, with the client's own token");
    assert_eq!(&response["id"], id, "{response}");
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(
        text.contains("Long running operation completed"),
        "{response}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_reaches_the_client_on_its_request_stream_in_both_eras() {
    let _heavy = HEAVY.lock().await;
    let (gw, port) = everything_behind_the_endpoint("").await;
    let base = format!("http://127.0.0.1:{port}");
    let tool = "everything__trigger-long-running-operation";
    eventually("server-everything's tools over MCP", LIMIT, || {
        let base = base.clone();
        async move {
            let (_, _, t) = modern(&base, "/mcp", "tools/list", None, json!({})).await;
            match t["result"]["tools"]
                .as_array()
                .is_some_and(|a| a.iter().any(|t| t["name"] == tool))
            {
                true => Ok(()),
                false => Err(t.to_string()),
            }
        }
    })
    .await;
    let arguments = json!({"duration": 0.3, "steps": 3});

    // 2026-07-28: the token is the client's, exactly (0 is not "0").
    let modern_call = |token: Value, id: u64| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": tool, "arguments": arguments,
            "_meta": {VERSION: "2026-07-28", CAPS: {}, "progressToken": token}}});
        client()
            .post(format!("{base}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool)
            .body(body.to_string())
            .send()
    };
    let (notes, response) = streamed(modern_call(json!(0), 1).await.unwrap()).await;
    three_steps(&notes, &response, &json!(0), &json!(1));
    assert_eq!(response["result"]["resultType"], "complete", "{response}");

    // Two clients with the same token at once each get their own progress.
    let (a, b) = tokio::join!(modern_call(json!("same"), 2), modern_call(json!("same"), 3));
    let ((notes_a, resp_a), (notes_b, resp_b)) =
        tokio::join!(streamed(a.unwrap()), streamed(b.unwrap()));
    three_steps(&notes_a, &resp_a, &json!("same"), &json!(2));
    three_steps(&notes_b, &resp_b, &json!("same"), &json!(3));

    // Without a token: a JSON answer, as before.
    let (status, h, r) = modern(
        &base,
        "/mcp",
        "tools/call",
        Some(tool),
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(h["content-type"], "application/json", "{r}");
    assert!(r["result"]["content"][0]["text"].is_string(), "{r}");

    // 2025-11-25, with and without elicitation declared (the stream that
    // carries the call's questions carries its progress too).
    for capabilities in [json!({}), json!({"elicitation": {}})] {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}}});
        let (_, h, _) = post(&base, "/mcp", &JSON_HEADERS, init.to_string()).await;
        let session = h["mcp-session-id"].to_str().unwrap().to_owned();
        let body = json!({"jsonrpc": "2.0", "id": "call-1", "method": "tools/call", "params": {
            "name": tool, "arguments": arguments, "_meta": {"progressToken": "tok"}}});
        let resp = client()
            .post(format!("{base}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", "2025-11-25")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let (notes, response) = streamed(resp).await;
        three_steps(&notes, &response, &json!("tok"), &json!("call-1"));
        assert!(response["result"].get("resultType").is_none(), "{response}");
    }
    // The calls whose progress was relayed are over: nothing keeps a
    // sidecar's drain waiting.
    gw.stop_drained().await;
}

/// A 2026-07-28 request of `method` on `path` with `params` (`name`: the
/// Mcp-Name header), declaring `caps`.
async fn modern_with(
    base: &str,
    path: &str,
    method: &str,
    name: Option<&str>,
    caps: Value,
    mut params: Value,
) -> Value {
    params["_meta"][VERSION] = json!("2026-07-28");
    params["_meta"][CAPS] = caps;
    let mut h: Vec<(&str, &str)> = JSON_HEADERS.to_vec();
    h.push(("mcp-protocol-version", "2026-07-28"));
    h.push(("mcp-method", method));
    if let Some(n) = name {
        h.push(("mcp-name", n));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    post(base, path, &h, body.to_string()).await.2
}

/// Polls 2026-07-28 `tasks/get` of `task` on `path` (declaring `caps`)
/// until its status is `status`; the last answer.
async fn task_reaches(base: &str, path: &str, task: &str, caps: &Value, status: &str) -> Value {
    eventually(&format!("task {task} is {status}"), LIMIT, || async move {
        let g = modern_with(
            base,
            path,
            "tasks/get",
            Some(task),
            caps.clone(),
            json!({"taskId": task}),
        )
        .await;
        match g["result"]["status"].as_str() {
            Some(s) if s == status => Ok(g),
            _ => Err(g.to_string()),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_clients_that_declare_tasks_run_calls_as_tasks_in_both_eras() {
    let _heavy = HEAVY.lock().await;
    let reference = toml_str(switchyard_test_support::reference_server_bin().to_string_lossy());
    let servers = format!(
        "[[servers]]\nname = \"orders\"\ntransport = \"stdio\"\ncommand = {reference}\nargs = [\"--era\", \"2026-07-28\"]\n\n\
         [[servers]]\nname = \"everything\"\ntransport = \"stdio\"\ncommand = {}\nargs = [\"stdio\"]\n\n\
         [[servers]]\nname = \"jobs\"\ntransport = \"stdio\"\ncommand = {reference}\nargs = [\"--tasks\", \"--era\", \"2026-07-28\"]\n",
        toml_str(switchyard_test_support::everything_bin().to_string_lossy())
    );
    let port = switchyard_test_support::free_port();
    let extra = format!("[mcp]\nlisten = \"127.0.0.1:{port}\"\n");
    let http = start_http_reference_server().await;
    let gw = Gateway::start_with(
        StoreKind::Embedded,
        10,
        http,
        &servers,
        &extra,
        &[],
        &["orders", "everything", "jobs"],
    )
    .await;
    let base = format!("http://127.0.0.1:{port}");
    eventually("both servers' tools over MCP", LIMIT, || {
        let base = base.clone();
        async move {
            let (_, _, t) = modern(&base, "/mcp", "tools/list", None, json!({})).await;
            let names: Vec<&str> = t["result"]["tools"]
                .as_array()
                .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
                .unwrap_or_default();
            match names.contains(&"orders__add") && names.contains(&"everything__echo") {
                true => Ok(()),
                false => Err(format!("{names:?}")),
            }
        }
    })
    .await;
    // `add` moves to the background at once.
    gw.admin()
        .await
        .set_tool_policy(pb::SetToolPolicyRequest {
            server: "orders".into(),
            tool: "add".into(),
            policy: "default".into(),
            background: "always".into(),
        })
        .await
        .expect("background: always");
    let tasks_ext = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let path = "/mcp/servers/orders";

    // 2026-07-28: discover declares the extension.
    let d = modern_with(&base, path, "server/discover", None, json!({}), json!({})).await;
    assert!(
        d["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{d}"
    );
    // A client that declares it gets a task, then its result inline.
    let add = json!({"name": "add", "arguments": {"a": 1, "b": 2}});
    let created = modern_with(
        &base,
        path,
        "tools/call",
        Some("add"),
        tasks_ext.clone(),
        add.clone(),
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let task = created["result"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_owned();
    assert!(created["result"]["pollIntervalMs"].is_u64(), "{created}");
    let done = task_reaches(&base, path, &task, &tasks_ext, "completed").await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(
        done["result"]["result"]["content"][0]["text"], "3",
        "{done}"
    );
    // tasks/* from a request that does not declare the extension: -32021.
    let undeclared = modern_with(
        &base,
        path,
        "tasks/get",
        Some(&task),
        json!({}),
        json!({"taskId": task}),
    )
    .await;
    assert_eq!(code(&undeclared), -32021, "{undeclared}");
    assert!(
        undeclared["error"]["data"]["requiredCapabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "{undeclared}"
    );
    // Another URL is another engine session: not its task.
    let other = modern_with(
        &base,
        "/mcp",
        "tasks/get",
        Some(&task),
        tasks_ext.clone(),
        json!({"taskId": task}),
    )
    .await;
    assert_eq!(code(&other), -32602, "{other}");
    // The Mcp-Name header must name the task.
    let mismatched = modern_with(
        &base,
        path,
        "tasks/get",
        Some("x"),
        tasks_ext.clone(),
        json!({"taskId": task}),
    )
    .await;
    assert_eq!(code(&mismatched), -32020, "{mismatched}");
    // Cancelling a finished task changes nothing.
    let c = modern_with(
        &base,
        path,
        "tasks/cancel",
        Some(&task),
        tasks_ext.clone(),
        json!({"taskId": task}),
    )
    .await;
    assert_eq!(c["result"]["resultType"], "complete", "{c}");
    // A task's question is asked through tasks/get and answered with
    // tasks/update (the server's task asks once it runs).
    let asking = json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}});
    let ask = json!({"name": "jobs__task_ask", "arguments": {"ms": 300}});
    let created = modern_with(
        &base,
        "/mcp",
        "tools/call",
        Some("jobs__task_ask"),
        asking.clone(),
        ask,
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let form_task = created["result"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_owned();
    let waiting = task_reaches(&base, "/mcp", &form_task, &asking, "input_required").await;
    let questions = waiting["result"]["inputRequests"]
        .as_object()
        .expect("inputRequests");
    assert_eq!(questions.len(), 1, "{waiting}");
    let (key, question) = questions.iter().next().unwrap();
    assert_eq!(question["method"], "elicitation/create", "{waiting}");
    assert!(
        question["params"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("Name for the task"),
        "{waiting}"
    );
    // The related task is the client's task, not the server's.
    assert_eq!(
        question["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(form_task),
        "{waiting}"
    );
    let u = modern_with(
        &base,
        "/mcp",
        "tasks/update",
        Some(&form_task),
        asking.clone(),
        json!({"taskId": form_task, "inputResponses": {key.clone(): {"action": "accept", "content": {"name": "Ada"}}}}),
    )
    .await;
    assert_eq!(u["result"]["resultType"], "complete", "{u}");
    let answered = task_reaches(&base, "/mcp", &form_task, &asking, "completed").await;
    assert!(
        answered["result"]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("hello Ada"),
        "{answered}"
    );
    // A server's own task reaches a client that takes tasks at once (no
    // background policy: without the client's tasks it would run in the
    // foreground), and its result through tasks/get.
    let sleep = json!({"name": "jobs__task_sleep", "arguments": {"ms": 1500, "text": "z"}});
    let created = modern_with(
        &base,
        "/mcp",
        "tools/call",
        Some("jobs__task_sleep"),
        tasks_ext.clone(),
        sleep.clone(),
    )
    .await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let job = created["result"]["taskId"]
        .as_str()
        .expect("taskId")
        .to_owned();
    let done = task_reaches(&base, "/mcp", &job, &tasks_ext, "completed").await;
    assert!(
        done["result"]["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("slept 1500 ms"),
        "{done}"
    );
    // Without tasks, the same call is answered in the foreground.
    let r = modern_with(
        &base,
        "/mcp",
        "tools/call",
        Some("jobs__task_sleep"),
        json!({}),
        sleep,
    )
    .await;
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    // A client that does not declare tasks never gets one.
    let plain = modern_with(&base, path, "tools/call", Some("add"), json!({}), add).await;
    assert_eq!(plain["result"]["content"][0]["text"], "3", "{plain}");
    assert_eq!(plain["result"]["resultType"], "complete", "{plain}");

    // 2025-11-25: a session that declares tasks.
    let legacy_session = |caps: Value| {
        let base = base.clone();
        async move {
            let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": caps, "clientInfo": {"name": "t", "version": "1"}}});
            let (_, h, r) = post(&base, "/mcp", &JSON_HEADERS, init.to_string()).await;
            (h["mcp-session-id"].to_str().unwrap().to_owned(), r)
        }
    };
    let (session, init) =
        legacy_session(json!({"tasks": {"requests": {"tools": {"call": {}}}}})).await;
    assert!(
        init["result"]["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(),
        "{init}"
    );
    let send = |session: String, id: u64, method: &str, params: Value| {
        let base = base.clone();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        async move {
            let h = [
                ("content-type", "application/json"),
                ("accept", "application/json, text/event-stream"),
                ("mcp-session-id", session.as_str()),
                ("mcp-protocol-version", "2025-11-25"),
            ];
            post(&base, "/mcp", &h, body.to_string()).await.2
        }
    };
    let listed = send(session.clone(), 1, "tools/list", json!({})).await;
    let echo = listed["result"]["tools"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["name"] == "everything__echo"))
        .cloned()
        .expect("everything__echo listed");
    assert_eq!(echo["execution"]["taskSupport"], "optional", "{echo}");
    // `task` runs it as a task at once; tasks/result waits for its result.
    let created = send(
        session.clone(),
        2,
        "tools/call",
        json!({"name": "everything__echo", "arguments": {"message": "hi"}, "task": {"ttl": 60000}}),
    )
    .await;
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    assert!(created["result"].get("content").is_none(), "{created}");
    let result = send(session.clone(), 3, "tasks/result", json!({"taskId": task})).await;
    assert!(
        result["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("hi"),
        "{result}"
    );
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(task),
        "{result}"
    );
    let got = send(session.clone(), 4, "tasks/get", json!({"taskId": task})).await;
    assert_eq!(got["result"]["status"], "completed", "{got}");
    assert!(got["result"].get("resultType").is_none(), "{got}");
    let again = send(session.clone(), 5, "tasks/cancel", json!({"taskId": task})).await;
    assert_eq!(
        code(&again),
        -32602,
        "a finished task cannot be cancelled: {again}"
    );
    // A running task is cancelled.
    let long = send(session.clone(), 6, "tools/call", json!({"name": "everything__trigger-long-running-operation", "arguments": {"duration": 30, "steps": 2}, "task": {}})).await;
    let long = long["result"]["task"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let cancelled = send(session.clone(), 7, "tasks/cancel", json!({"taskId": long})).await;
    assert_eq!(cancelled["result"]["status"], "cancelled", "{cancelled}");
    let result = send(session.clone(), 8, "tasks/result", json!({"taskId": long})).await;
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("cancelled"),
        "{result}"
    );
    let all = send(session.clone(), 9, "tasks/list", json!({})).await;
    let ids: Vec<&str> = all["result"]["tasks"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["taskId"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, vec![task.as_str(), long.as_str()], "{all}");
    // Another session does not see them.
    let (stranger, _) =
        legacy_session(json!({"tasks": {"requests": {"tools": {"call": {}}}}})).await;
    let hidden = send(stranger.clone(), 1, "tasks/get", json!({"taskId": task})).await;
    assert_eq!(code(&hidden), -32602, "{hidden}");
    // A session that declared nothing (the 2025-11-25 schema has no client
    // capability for it, so SDKs declare none) gets a task when it asks
    // for one, and the result when it does not.
    let (plain, init) = legacy_session(json!({})).await;
    assert!(
        init["result"]["capabilities"]["tasks"].is_object(),
        "{init}"
    );
    let r = send(
        plain.clone(),
        1,
        "tools/call",
        json!({"name": "everything__echo", "arguments": {"message": "hi"}, "task": {"ttl": 60000}}),
    )
    .await;
    let task = r["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {r}"))
        .to_owned();
    let result = send(plain.clone(), 2, "tasks/result", json!({"taskId": task})).await;
    assert!(
        result["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("hi"),
        "{result}"
    );
    // A `task` that is no TaskMetadata is refused, not run without one.
    for (task, says) in [
        (
            json!("soon"),
            "params.task: must be an object (TaskMetadata), not a string",
        ),
        (
            json!({"ttl": "soon"}),
            "params.task.ttl: must be a number of milliseconds, 0 or more",
        ),
    ] {
        let r = send(
            plain.clone(),
            4,
            "tools/call",
            json!({"name": "everything__echo", "arguments": {"message": "hi"}, "task": task}),
        )
        .await;
        assert_eq!(
            (code(&r), r["error"]["message"].as_str()),
            (-32602, Some(says)),
            "{r}"
        );
    }
    let r = send(
        plain,
        3,
        "tools/call",
        json!({"name": "everything__echo", "arguments": {"message": "hi"}}),
    )
    .await;
    assert!(
        r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("hi"),
        "{r}"
    );
    gw.stop().await;
}

/// The one `roots/list` question of an `input_required` answer: its key.
fn roots_question(r: &Value) -> String {
    assert_eq!(r["result"]["resultType"], "input_required", "{r}");
    let asked = r["result"]["inputRequests"]
        .as_object()
        .expect("inputRequests");
    assert_eq!(asked.len(), 1, "{r}");
    let (key, request) = asked.iter().next().unwrap();
    assert_eq!(request["method"], "roots/list", "{r}");
    key.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_that_declare_roots_are_asked_for_them_in_both_eras() {
    let _heavy = HEAVY.lock().await;
    let (gw, base) = gateway().await;
    let roots_caps = json!({"roots": {}});
    let ours = json!({"roots": [{"uri": "file:///work/ada", "name": "Ada's workspace"}]});
    // 2026-07-28 client, servers of both eras: the server's roots/list is
    // an inputRequests entry, under the server's own key when the server
    // has one (2026-07-28: "roots"), else the question's id.
    for (tool, server_key) in [
        ("shop-modern__workspace_roots", Some("roots")),
        ("shop__workspace_roots", None),
    ] {
        let first = modern_call(&base, "/mcp", tool, json!({}), roots_caps.clone(), None).await;
        let key = roots_question(&first);
        match server_key {
            Some(k) => assert_eq!(key, k, "{first}"),
            None => assert_eq!(key.len(), 32, "an interaction id: {first}"),
        }
        let state = first["result"]["requestState"].as_str().unwrap().to_owned();
        // Not Root objects: refused, and the question is asked again.
        let bad = modern_call(
            &base,
            "/mcp",
            tool,
            json!({}),
            roots_caps.clone(),
            Some((
                json!({key.clone(): {"roots": [{"uri": "no scheme"}]}}),
                &state,
            )),
        )
        .await;
        assert_eq!(roots_question(&bad), key, "{bad}");
        let state = bad["result"]["requestState"].as_str().unwrap().to_owned();
        let done = modern_call(
            &base,
            "/mcp",
            tool,
            json!({}),
            roots_caps.clone(),
            Some((json!({key: ours}), &state)),
        )
        .await;
        assert_eq!(
            done["result"]["structuredContent"]["roots"], ours["roots"],
            "{tool}: {done}"
        );
    }
    // A client that did not declare roots is never asked: on /mcp the
    // engine session's roots answer (none here)...
    let none = modern_call(
        &base,
        "/mcp",
        "shop-modern__workspace_roots",
        json!({}),
        json!({"elicitation": {}}),
        None,
    )
    .await;
    assert_eq!(
        none["result"]["structuredContent"]["roots"],
        json!([]),
        "{none}"
    );
    // ... and on the server's own URL the server is told the client's
    // capabilities, so it knows it cannot ask (-32021 naming roots).
    let mut h: Vec<(&str, &str)> = JSON_HEADERS.to_vec();
    h.extend([
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "workspace_roots"),
    ]);
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "workspace_roots", "arguments": {},
        "_meta": {VERSION: "2026-07-28", CAPS: {"elicitation": {}, "sampling": {}}}}});
    let (status, _, r) = post(&base, "/mcp/servers/shop-modern", &h, body.to_string()).await;
    assert_eq!((status, code(&r)), (400, -32021), "{r}");
    assert!(r.to_string().contains("roots"), "{r}");

    // 2025-11-25 client that declared roots: a `roots/list` request on the
    // call's stream, whichever era the server speaks; its answer, POSTed
    // in the session, goes to the server.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": true}},
        "clientInfo": {"name": "t", "version": "1"}}});
    let (status, h, _) = post(&base, "/mcp", &JSON_HEADERS, init.to_string()).await;
    assert_eq!(status, 200);
    let sid = h["mcp-session-id"].to_str().unwrap().to_owned();
    let mut in_session: Vec<(&str, &str)> = JSON_HEADERS.to_vec();
    in_session.push(("mcp-session-id", &sid));
    in_session.push(("mcp-protocol-version", "2025-11-25"));
    for (id, tool) in [
        (2, "shop__workspace_roots"),
        (3, "shop-modern__workspace_roots"),
    ] {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}});
        let mut request = client().post(format!("{base}/mcp")).body(call.to_string());
        for (k, v) in &in_session {
            request = request.header(*k, *v);
        }
        let resp = request.send().await.expect("the call's stream");
        assert_eq!(resp.status(), 200);
        let mut stream = Sse::of(resp);
        let question = stream.next().await;
        assert_eq!(question["method"], "roots/list", "{question}");
        assert!(
            question["id"].as_str().unwrap().starts_with("sy-"),
            "{question}"
        );
        let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": ours});
        let (status, _, r) = post(&base, "/mcp", &in_session, answer.to_string()).await;
        assert_eq!(status, 202, "{r}");
        let result = stream.next().await;
        assert_eq!(result["id"], id, "{result}");
        assert_eq!(
            result["result"]["structuredContent"]["roots"], ours["roots"],
            "{tool}: {result}"
        );
    }
    gw.stop().await;
}

/// Questions a 2026-07-28 server asks at once (the stub's `reask`: a form
/// and a `roots/list` in one `inputRequests`) reach a 2026-07-28 client in
/// one `input_required`, under the server's keys, round after round.
#[tokio::test(flavor = "multi_thread")]
async fn questions_asked_at_once_reach_the_client_at_once() {
    let _heavy = HEAVY.lock().await;
    let (gw, base) = stub_gateway("mrtr_stub.py", "stub__reask").await;
    let caps = json!({"elicitation": {}, "roots": {}});
    let roots = json!({"roots": [{"uri": "file:///work/ada"}]});
    let answers = json!({"confirm": {"action": "accept", "content": {"ok": true}}, "where": roots});
    let mut r = modern_call(
        &base,
        "/mcp",
        "stub__reask",
        json!({"times": 2}),
        caps.clone(),
        None,
    )
    .await;
    for round in 1..=2 {
        assert_eq!(
            r["result"]["resultType"], "input_required",
            "round {round}: {r}"
        );
        let asked = r["result"]["inputRequests"]
            .as_object()
            .expect("inputRequests");
        let mut keys: Vec<&str> = asked.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["confirm", "where"],
            "round {round}: both at once: {r}"
        );
        assert_eq!(asked["confirm"]["method"], "elicitation/create", "{r}");
        assert_eq!(asked["where"]["method"], "roots/list", "{r}");
        let state = r["result"]["requestState"]
            .as_str()
            .expect("requestState")
            .to_owned();
        r = modern_call(
            &base,
            "/mcp",
            "stub__reask",
            json!({"times": 2}),
            caps.clone(),
            Some((answers.clone(), &state)),
        )
        .await;
    }
    // The server got both answers in each of its retries.
    let rounds = r["result"]["structuredContent"]["rounds"]
        .as_array()
        .unwrap_or_else(|| panic!("a result: {r}"));
    assert_eq!(rounds.len(), 3, "{r}");
    for retry in &rounds[1..] {
        assert_eq!(
            retry["inputResponses"]["confirm"], answers["confirm"],
            "{r}"
        );
        assert_eq!(retry["inputResponses"]["where"], roots, "{r}");
        assert_eq!(retry["state_ok"], true, "{r}");
    }
    gw.stop().await;
}

/// The conformance fixture's three log messages, in order.
const FIXTURE_LOGS: [&str; 3] = [
    "Tool execution started",
    "Tool processing data",
    "Tool execution completed",
];

/// Checks `notes` are the fixture's three log messages, as it sent them,
/// and `response` the call's result (`id`).
fn three_logs(notes: &[Value], response: &Value, id: &Value) {
    for n in notes {
        assert_eq!(n["method"], "notifications/message", "{n}");
        assert_eq!(n["params"]["level"], "info", "{n}");
        assert_eq!(n["params"]["logger"], "conformance-fixture", "{n}");
    }
    let data: Vec<&Value> = notes.iter().map(|n| &n["params"]["data"]).collect();
    assert_eq!(
        data,
        FIXTURE_LOGS.map(|d| json!(d)).iter().collect::<Vec<_>>()
    );
    tool_answered(response, id);
}

/// Checks `response` is the fixture's logging tool's result (`id`).
fn tool_answered(response: &Value, id: &Value) {
    assert_eq!(&response["id"], id, "{response}");
    assert_eq!(
        response["result"]["content"][0]["text"], "Tool with logging executed successfully",
        "{response}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn log_messages_reach_only_the_client_whose_call_caused_them() {
    let _heavy = HEAVY.lock().await;
    // The suite's fixture over Streamable HTTP (in 2026-07-28, which the
    // sidecar speaks with it, its log messages come on the request's own
    // POST stream) and over stdio (never relayed).
    let reference = switchyard_test_support::reference_server_bin();
    let mut cmd = tokio::process::Command::new(&reference);
    cmd.args(["--conformance", "--era", "dual", "--http", "127.0.0.1:0"]);
    let fixture = switchyard_test_support::start_http_server(cmd, "/mcp").await;
    let servers = format!(
        "[[servers]]\nname = \"fixture\"\ntransport = \"http\"\nurl = {}\n\n\
         [[servers]]\nname = \"fixture-stdio\"\ntransport = \"stdio\"\ncommand = {}\n\
         args = [\"--conformance\", \"--era\", \"dual\"]\n",
        toml_str(&fixture.url),
        toml_str(reference.to_string_lossy()),
    );
    let port = switchyard_test_support::free_port();
    let extra = format!("[mcp]\nlisten = \"127.0.0.1:{port}\"\n");
    let gw = Gateway::start_with(
        StoreKind::Embedded,
        10,
        fixture,
        &servers,
        &extra,
        &[],
        &["fixture", "fixture-stdio"],
    )
    .await;
    let base = format!("http://127.0.0.1:{port}");
    let tool = "test_tool_with_logging";
    for path in ["/mcp/servers/fixture", "/mcp/servers/fixture-stdio"] {
        eventually("the fixture's tools over MCP", LIMIT, || {
            let base = base.clone();
            async move {
                let (_, _, t) = modern(&base, path, "tools/list", None, json!({})).await;
                match t["result"]["tools"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|t| t["name"] == tool))
                {
                    true => Ok(()),
                    false => Err(t.to_string()),
                }
            }
        })
        .await;
    }
    let path = "/mcp/servers/fixture";
    // The endpoint declares that it sends log messages.
    let (_, _, d) = modern(&base, path, "server/discover", None, json!({})).await;
    assert!(d["result"]["capabilities"]["logging"].is_object(), "{d}");

    // 2025-11-25 sessions; `level`: what logging/setLevel sets.
    let session = |capabilities: Value, level: Option<&'static str>, path: &'static str| {
        let base = base.clone();
        async move {
            let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}}});
            let (_, h, r) = post(&base, path, &JSON_HEADERS, init.to_string()).await;
            assert!(r["result"]["capabilities"]["logging"].is_object(), "{r}");
            let session = h["mcp-session-id"].to_str().unwrap().to_owned();
            if let Some(level) = level {
                let set = json!({"jsonrpc": "2.0", "id": "lvl", "method": "logging/setLevel", "params": {"level": level}});
                let (status, _, r) =
                    post(&base, path, &legacy_headers(&session), set.to_string()).await;
                assert_eq!((status, &r["result"]), (200, &json!({})), "{r}");
            }
            session
        }
    };
    let call = |session: String, id: &'static str, path: &'static str| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {}}});
        let mut req = client()
            .post(format!("{base}{path}"))
            .body(body.to_string());
        for (k, v) in legacy_headers(&session) {
            req = req.header(k, v);
        }
        req.send()
    };

    // A client that set `info` gets the three messages on its call's
    // stream, before the response; with elicitation declared too (the
    // stream that carries the call's questions).
    for capabilities in [json!({}), json!({"elicitation": {}})] {
        let s = session(capabilities, Some("info"), path).await;
        let (notes, response) = streamed(call(s, "c1", path).await.unwrap()).await;
        three_logs(&notes, &response, &json!("c1"));
    }
    // `error`: none (the messages are `info`), so a JSON answer.
    let s = session(json!({}), Some("error"), path).await;
    let resp = call(s, "c2", path).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "application/json");
    let (notes, response) = streamed(resp).await;
    assert_eq!(notes, Vec::<Value>::new());
    tool_answered(&response, &json!("c2"));
    // Never set: none, and a JSON answer.
    let s = session(json!({}), None, path).await;
    let resp = call(s.clone(), "c3", path).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "application/json");
    let r: Value = resp.json().await.unwrap();
    tool_answered(&r, &json!("c3"));
    // A level that is not one: -32602 naming it; nothing changes.
    for params in [
        json!({"level": "verbose"}),
        json!({"level": "INFO"}),
        json!({}),
    ] {
        let set =
            json!({"jsonrpc": "2.0", "id": 5, "method": "logging/setLevel", "params": params});
        let (status, _, r) = post(&base, path, &legacy_headers(&s), set.to_string()).await;
        assert_eq!((status, code(&r)), (200, -32602), "{r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("params.level"),
            "{r}"
        );
    }

    // Three clients call at once on the one upstream connection: each
    // gets its own call's messages and no other's.
    let (a, b, c) = tokio::join!(
        session(json!({}), Some("info"), path),
        session(json!({}), Some("debug"), path),
        session(json!({}), Some("warning"), path),
    );
    let (ra, rb, rc) = tokio::join!(call(a, "a", path), call(b, "b", path), call(c, "c", path));
    let ((na, ra), (nb, rb), (nc, rc)) = tokio::join!(
        streamed(ra.unwrap()),
        streamed(rb.unwrap()),
        streamed(rc.unwrap())
    );
    three_logs(&na, &ra, &json!("a"));
    three_logs(&nb, &rb, &json!("b"));
    assert_eq!(nc, Vec::<Value>::new());
    tool_answered(&rc, &json!("c"));

    // 2026-07-28: the request's own `_meta` level.
    let modern_call = |level: Value, id: u64| {
        let mut meta = json!({VERSION: "2026-07-28", CAPS: {}});
        if !level.is_null() {
            meta["io.modelcontextprotocol/logLevel"] = level;
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {}, "_meta": meta}});
        client()
            .post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", tool)
            .body(body.to_string())
            .send()
    };
    let (notes, response) = streamed(modern_call(json!("debug"), 1).await.unwrap()).await;
    three_logs(&notes, &response, &json!(1));
    assert_eq!(response["result"]["resultType"], "complete", "{response}");
    let (notes, response) = streamed(modern_call(json!("critical"), 2).await.unwrap()).await;
    assert_eq!(notes, Vec::<Value>::new());
    tool_answered(&response, &json!(2));
    let resp = modern_call(Value::Null, 3).await.unwrap();
    assert_eq!(resp.headers()["content-type"], "application/json");
    tool_answered(&resp.json().await.unwrap(), &json!(3));
    let r: Value = modern_call(json!("loud"), 4)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(code(&r), -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("io.modelcontextprotocol/logLevel"),
        "{r}"
    );

    // A stdio server's log messages are not relayed: they cannot be told
    // apart from another caller's.
    let s = session(json!({}), Some("debug"), "/mcp/servers/fixture-stdio").await;
    let (notes, response) =
        streamed(call(s, "s1", "/mcp/servers/fixture-stdio").await.unwrap()).await;
    assert_eq!(notes, Vec::<Value>::new());
    tool_answered(&response, &json!("s1"));
    // The calls whose log messages were relayed are over: nothing keeps
    // a sidecar's drain waiting.
    gw.stop_drained().await;
}

/// The headers of a request in 2025-11-25 session `session`.
fn legacy_headers(session: &str) -> Vec<(&'static str, &str)> {
    let mut h = JSON_HEADERS.to_vec();
    h.push(("mcp-session-id", session));
    h.push(("mcp-protocol-version", "2025-11-25"));
    h
}

/// An HTTP/2 client (cleartext, prior knowledge) on the endpoint: many
/// calls on one connection, a call's progress stream, a 2025-11-25
/// session's GET stream and DELETE; and `:authority` is checked as `Host`
/// is (DNS rebinding protection), in HTTP/2 and HTTP/1.1 alike.
#[tokio::test(flavor = "multi_thread")]
async fn http2_clients_are_served_and_their_authority_is_checked() {
    let _heavy = HEAVY.lock().await;
    let (gw, port) = everything_behind_the_endpoint("").await;
    let base = format!("http://127.0.0.1:{port}");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `resolve`: the URL's host name is what the client sends, the
    // connection goes to the endpoint.
    let client_for = |h2: bool| {
        let b = reqwest::Client::builder()
            .timeout(LIMIT)
            .resolve("evil.example.com", addr)
            .resolve("localhost", addr);
        let b = if h2 {
            b.http2_prior_knowledge()
        } else {
            b.http1_only()
        };
        b.build().unwrap()
    };
    let h2 = client_for(true);
    let modern_post =
        |client: &reqwest::Client, url: String, method: &str, name: Option<&str>, params: Value| {
            let mut params = params;
            params["_meta"][VERSION] = json!("2026-07-28");
            params["_meta"][CAPS] = json!({});
            let mut req = client
                .post(url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", method);
            if let Some(n) = name {
                req = req.header("mcp-name", n);
            }
            req.body(
                json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string(),
            )
            .send()
        };
    let tool = "everything__trigger-long-running-operation";
    eventually("server-everything's tools over HTTP/2", LIMIT, || {
        let fut = modern_post(&h2, format!("{base}/mcp"), "tools/list", None, json!({}));
        async move {
            let resp = fut.await.map_err(|e| e.to_string())?;
            if resp.version() != reqwest::Version::HTTP_2 {
                return Err(format!("answered in {:?}", resp.version()));
            }
            let t: Value = resp.json().await.map_err(|e| e.to_string())?;
            match t["result"]["tools"]
                .as_array()
                .is_some_and(|a| a.iter().any(|t| t["name"] == tool))
            {
                true => Ok(()),
                false => Err(t.to_string()),
            }
        }
    })
    .await;

    // Many calls at once on the one HTTP/2 client, each answered as its own.
    let calls = (0..16).map(|i| {
        modern_post(
            &h2,
            format!("{base}/mcp"),
            "tools/call",
            Some("everything__echo"),
            json!({"name": "everything__echo", "arguments": {"message": format!("m{i}")}}),
        )
    });
    for (i, resp) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let resp = resp.expect("an answer");
        assert_eq!(resp.version(), reqwest::Version::HTTP_2);
        let r: Value = resp.json().await.unwrap();
        let text = r["result"]["content"][0]["text"].as_str().unwrap_or("");
        assert!(text.ends_with(&format!("m{i}")), "call {i}: {r}");
    }

    // A call's progress, streamed over HTTP/2.
    let resp = modern_post(
        &h2,
        format!("{base}/mcp"),
        "tools/call",
        Some(tool),
        json!({"name": tool, "arguments": {"duration": 0.3, "steps": 3},
               "_meta": {"progressToken": 5}}),
    )
    .await
    .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    let (notes, response) = streamed(resp).await;
    three_steps(&notes, &response, &json!(5), &json!(1));

    // A 2025-11-25 session over HTTP/2: initialize, its GET stream, DELETE.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "h2", "version": "1"}}});
    let resp = h2
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let stream = h2
        .get(format!("{base}/mcp"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let deleted = h2
        .delete(format!("{base}/mcp"))
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    drop(stream);

    // The authority: a loopback endpoint serves loopback names only, over
    // either protocol, and says which name it refused.
    for h2 in [true, false] {
        let client = client_for(h2);
        let url = |host: &str| format!("http://{host}:{port}/mcp");
        let ok = modern_post(&client, url("localhost"), "tools/list", None, json!({}))
            .await
            .unwrap();
        assert_eq!(ok.status(), 200, "localhost, HTTP/2 {h2}");
        let refused = modern_post(
            &client,
            url("evil.example.com"),
            "tools/list",
            None,
            json!({}),
        )
        .await
        .unwrap();
        assert_eq!(refused.status(), 403, "evil.example.com, HTTP/2 {h2}");
        let body: Value = refused.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains("evil.example.com"), "{body}");
    }

    // HTTP/1.1 in absolute form: the target's authority is the host, and
    // a Host naming another one is refused (400), not served as Host says.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {
        "_meta": {VERSION: "2026-07-28", CAPS: {}}}})
    .to_string();
    // And the Host lines themselves: exactly one, and a host[:port].
    let local = format!("Host: localhost:{port}\r\n");
    for (target, hosts, status) in [
        (
            format!("http://evil.example.com:{port}/mcp"),
            local.clone(),
            "400",
        ),
        (format!("http://localhost:{port}/mcp"), local.clone(), "200"),
        ("/mcp".to_owned(), local.clone(), "200"),
        ("/mcp".to_owned(), String::new(), "400"),
        (
            "/mcp".to_owned(),
            format!("{local}Host: evil.example.com\r\n"),
            "400",
        ),
        (
            "/mcp".to_owned(),
            "Host: localhost:80@evil.example.com\r\n".to_owned(),
            "400",
        ),
        (format!("ftp://localhost:{port}/mcp"), local.clone(), "400"),
    ] {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "POST {target} HTTP/1.1\r\n{hosts}content-type: application/json\r\n\
             accept: application/json\r\nmcp-protocol-version: 2026-07-28\r\n\
             mcp-method: server/discover\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(LIMIT, tcp.read_to_string(&mut answer))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{target} with {hosts:?}: {answer}"
        );
    }
    gw.stop().await;
}

/// `switchyard up` with server-everything over stdio and the MCP endpoint
/// on a free port, with `mcp` (more `[mcp]` keys); and the port.
async fn everything_behind_the_endpoint(mcp: &str) -> (Gateway, u16) {
    let port = switchyard_test_support::free_port();
    let extra = format!("[mcp]\nlisten = \"127.0.0.1:{port}\"\n{mcp}");
    let gw = Gateway::start_stdio(
        "everything",
        &switchyard_test_support::everything_bin(),
        &["stdio"],
        &extra,
    )
    .await;
    (gw, port)
}

/// `mcp.max_connections`: a connection beyond it waits, unanswered, until
/// another closes, and is counted and logged (with the busiest client);
/// the gauges show the open connections and each listener's limit.
#[tokio::test(flavor = "multi_thread")]
async fn connections_beyond_max_connections_wait_and_are_counted() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _heavy = HEAVY.lock().await;
    let (gw, port) = everything_behind_the_endpoint("max_connections = 2\n").await;
    let addr = format!("127.0.0.1:{port}");
    // A GET on /mcp is answered at once (405) and the connection kept.
    let get = format!("GET /mcp HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    async fn answered(tcp: &mut tokio::net::TcpStream) -> std::io::Result<[u8; 12]> {
        let mut head = [0u8; 12];
        tcp.read_exact(&mut head).await.map(|_| head)
    }
    let mut first = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut second = tokio::net::TcpStream::connect(&addr).await.unwrap();
    for tcp in [&mut first, &mut second] {
        tcp.write_all(get.as_bytes()).await.unwrap();
        assert_eq!(&answered(tcp).await.unwrap(), b"HTTP/1.1 405");
    }
    let connections = |listener: &'static str| {
        let http = gw.http_addr.clone();
        async move {
            (
                scrape(
                    &http,
                    "switchyard_control_plane_connections",
                    &[("listener", listener)],
                )
                .await,
                scrape(
                    &http,
                    "switchyard_control_plane_connections_max",
                    &[("listener", listener)],
                )
                .await,
                scrape(
                    &http,
                    "switchyard_control_plane_connection_waits_total",
                    &[("listener", listener)],
                )
                .await,
            )
        }
    };
    assert_eq!(connections("mcp").await, (2.0, 2.0, 0.0));
    assert_eq!(connections("grpc").await.1, 4096.0);
    assert_eq!(connections("http").await.1, 1024.0);

    // The third waits: connected (the backlog), not answered.
    let mut third = tokio::net::TcpStream::connect(&addr).await.unwrap();
    third.write_all(get.as_bytes()).await.unwrap();
    let early = tokio::time::timeout(Duration::from_secs(1), answered(&mut third)).await;
    assert!(early.is_err(), "answered beyond max_connections: {early:?}");
    assert_eq!(connections("mcp").await, (2.0, 2.0, 1.0));
    // The WARN names the listener and its busiest client.
    let warned = gw
        .log()
        .lines()
        .find(|l| l.contains("connection limit reached") && l.contains("listener=\"mcp\""))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no limit WARN:\n{}", gw.log()));
    assert!(warned.contains("busiest_clients=127.0.0.1 (2)"), "{warned}");

    // One closes; the third is served.
    drop(first);
    let head = tokio::time::timeout(LIMIT, answered(&mut third))
        .await
        .expect("served once a connection closed")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 405");
    // The other connections kept working all along.
    second.write_all(get.as_bytes()).await.unwrap();
    let mut rest = vec![0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(200), second.read(&mut rest)).await;
    drop((second, third));
    eventually("the closed connections given back", LIMIT, || {
        let c = connections("mcp");
        async move {
            match c.await {
                (0.0, 2.0, 1.0) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
}

/// CORS: a browser page of an allowed origin (listed, or a loopback one
/// on a loopback endpoint) gets its preflight answered with the headers
/// it asked for, and answers it may read (the session id exposed); any
/// other origin gets no CORS headers, and 403 on its requests.
#[tokio::test(flavor = "multi_thread")]
async fn browser_pages_of_allowed_origins_get_cors() {
    let _heavy = HEAVY.lock().await;
    let (gw, port) =
        everything_behind_the_endpoint("allowed_origins = [\"https://app.example.com\"]\n").await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder().timeout(LIMIT).build().unwrap();
    let asked =
        "content-type,authorization,mcp-protocol-version,mcp-method,mcp-name,mcp-param-region";
    let preflight = |origin: &'static str| {
        client
            .request(reqwest::Method::OPTIONS, &url)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", asked)
            .send()
    };
    let header = |r: &reqwest::Response, name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    for origin in ["https://app.example.com", "http://localhost:6274"] {
        let r = preflight(origin).await.unwrap();
        assert!(r.status().is_success(), "{origin}: {}", r.status());
        assert_eq!(
            header(&r, "access-control-allow-origin").as_deref(),
            Some(origin)
        );
        let methods = header(&r, "access-control-allow-methods").unwrap();
        for m in ["GET", "POST", "DELETE"] {
            assert!(methods.contains(m), "{methods}");
        }
        assert_eq!(
            header(&r, "access-control-allow-headers").as_deref(),
            Some(asked)
        );
        assert_eq!(header(&r, "access-control-max-age").as_deref(), Some("600"));
    }
    let r = preflight("https://evil.example.com").await.unwrap();
    assert_eq!(header(&r, "access-control-allow-origin"), None);

    // A 2025-11-25 initialize from an allowed page: readable, with its
    // session id exposed.
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "page", "version": "1"}}});
    let post = |origin: &'static str| {
        let mut req = client.post(&url).header("origin", origin);
        for (k, v) in JSON_HEADERS {
            req = req.header(k, v);
        }
        req.body(init.to_string()).send()
    };
    let r = post("https://app.example.com").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "access-control-allow-origin").as_deref(),
        Some("https://app.example.com")
    );
    let exposed = header(&r, "access-control-expose-headers").unwrap();
    assert!(exposed.contains("mcp-session-id"), "{exposed}");
    assert!(header(&r, "mcp-session-id").is_some());
    // Another origin: refused, and nothing for the browser to read.
    let r = post("https://evil.example.com").await.unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(header(&r, "access-control-allow-origin"), None);
    gw.stop().await;
}

/// `mcp.max_sessions_per_caller`: a caller's session beyond it ends the
/// caller's least recently used one, whose client then gets 404; each end
/// is counted by its reason.
#[tokio::test(flavor = "multi_thread")]
async fn a_callers_sessions_beyond_its_cap_end_least_recently_used_first() {
    let _heavy = HEAVY.lock().await;
    let (gw, port) = everything_behind_the_endpoint("max_sessions_per_caller = 2\n").await;
    let base = format!("http://127.0.0.1:{port}");
    let open = || async {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        let (s, h, r) = post(&base, "/mcp", &JSON_HEADERS, init.to_string()).await;
        assert_eq!(s, 200, "{r}");
        h["mcp-session-id"].to_str().unwrap().to_owned()
    };
    let ping = |sid: String| {
        let base = base.clone();
        async move {
            let mut h: Vec<(&str, &str)> = JSON_HEADERS.to_vec();
            h.push(("mcp-session-id", &sid));
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
            post(&base, "/mcp", &h, body.to_string()).await.0
        }
    };
    let ended = |reason: &'static str| {
        let addr = gw.http_addr.clone();
        async move {
            let m = http_get(&addr, "/metrics").await.1;
            sample(
                &m,
                "switchyard_control_plane_mcp_sessions_ended_total",
                &[("reason", reason)],
            )
        }
    };
    assert_eq!(ended("evicted").await, Some(0.0));
    let first = open().await;
    let second = open().await;
    assert_eq!(ping(first.clone()).await, 200);
    // A third: the first (least recently used) ends.
    let third = open().await;
    eventually("the first session ended", LIMIT, || async {
        match ping(first.clone()).await {
            404 => Ok(()),
            s => Err(format!("{s}")),
        }
    })
    .await;
    assert_eq!(ping(second.clone()).await, 200);
    assert_eq!(ping(third.clone()).await, 200);
    assert_eq!(ended("evicted").await, Some(1.0));
    // A DELETE is counted too.
    let resp = client()
        .delete(format!("{base}/mcp"))
        .header("mcp-session-id", &second)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(ended("deleted").await, Some(1.0));
    assert_eq!(ended("evicted").await, Some(1.0));
    gw.stop().await;
}

/// `mcp.max_waiting_calls_per_caller`: a caller's call waiting for its
/// answer beyond it ends the caller's oldest, whose retry gets an error
/// that says why; the others go on.
#[tokio::test(flavor = "multi_thread")]
async fn a_callers_oldest_waiting_call_ends_beyond_its_cap() {
    let _heavy = HEAVY.lock().await;
    let port = switchyard_test_support::free_port();
    let extra = format!("[mcp]\nlisten = \"127.0.0.1:{port}\"\nmax_waiting_calls_per_caller = 1\n");
    let gw = Gateway::start_stdio(
        "shop",
        &switchyard_test_support::reference_server_bin(),
        &["--interactions", "--era", "2026-07-28"],
        &extra,
    )
    .await;
    let base = format!("http://127.0.0.1:{port}");
    let elicits = json!({"elicitation": {}});
    let form = json!({"contact_name": "Ada Lovelace", "email": "ada@example.com", "delivery_date": "2026-12-24",
        "quantity": 2, "shipping_speed": "express", "carrier": "ups", "notify_via": ["sms"]});
    let tool = "shop__confirm_order_form";
    let ask = || async {
        let first = modern_call(&base, "/mcp", tool, json!({}), elicits.clone(), None).await;
        let (key, _) = one_question(&first);
        let state = first["result"]["requestState"].as_str().unwrap().to_owned();
        (json!({key: {"action": "accept", "content": form}}), state)
    };
    let retry = |(answer, state): (Value, String)| {
        let (base, elicits) = (base.clone(), elicits.clone());
        async move {
            modern_call(
                &base,
                "/mcp",
                tool,
                json!({}),
                elicits,
                Some((answer, &state)),
            )
            .await
        }
    };
    let old = ask().await;
    let new = ask().await;
    let late = retry(old).await;
    assert_eq!(code(&late), -32603, "{late}");
    assert!(
        late["error"]["message"]
            .as_str()
            .unwrap()
            .contains("more than mcp.max_waiting_calls_per_caller (1)"),
        "{late}"
    );
    let done = retry(new).await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["action"], "accept",
        "{done}"
    );
    let metrics = http_get(&gw.http_addr, "/metrics").await.1;
    assert_eq!(
        sample(
            &metrics,
            "switchyard_control_plane_mcp_waiting_calls_ended_total",
            &[]
        ),
        Some(1.0),
        "{metrics}"
    );
    gw.stop().await;
}

/// A session's GET streams: a 17th ends the oldest, and all end with
/// their session, on an engine session's URL too (where the engine
/// session stays).
#[tokio::test(flavor = "multi_thread")]
async fn get_streams_end_beyond_sixteen_and_with_their_session() {
    let _heavy = HEAVY.lock().await;
    let (gw, port) = everything_behind_the_endpoint("").await;
    let base = format!("http://127.0.0.1:{port}");
    let engine_session = ok_stdout(
        &gw.cli(&["sessions", "create", "--server", "everything"])
            .await,
        "sessions create",
    )
    .trim()
    .to_owned();
    let path = format!("/mcp/sessions/{engine_session}");
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (s, h, r) = post(&base, &path, &JSON_HEADERS, init.to_string()).await;
    assert_eq!(s, 200, "{r}");
    let sid = h["mcp-session-id"].to_str().unwrap().to_owned();
    let streams_open = |n: f64| listen_streams_reach(&gw.http_addr, n);
    let mut streams = Vec::new();
    for i in 0..17 {
        streams.push(get_stream(&base, &path, &sid).await);
        streams_open(f64::from(i + 1).min(16.0)).await;
    }
    // The oldest ended: its body ends.
    let oldest = streams.remove(0);
    tokio::time::timeout(LIMIT, oldest.bytes())
        .await
        .expect("the oldest GET stream ends")
        .expect("its body");
    // A DELETE ends the rest; the engine session stays.
    let resp = client()
        .delete(format!("{base}{path}"))
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    for stream in streams {
        tokio::time::timeout(LIMIT, stream.bytes())
            .await
            .expect("every GET stream ends with its session")
            .expect("its body");
    }
    streams_open(0.0).await;
    let sessions = ok_stdout(&gw.cli(&["sessions", "list"]).await, "sessions list");
    assert!(sessions.contains(&engine_session), "{sessions}");
    // Forty opened at once on a new session, with forty logging/setLevel
    // (break-it trials 14 and 15): each is 200 (each writes the session's
    // record; this replica's writers take turns, store::cas::Turns, and
    // writers elsewhere back off, cas::backoff), and sixteen stay open.
    let (s, h, r) = post(&base, &path, &JSON_HEADERS, init.to_string()).await;
    assert_eq!(s, 200, "{r}");
    let sid = h["mcp-session-id"].to_str().unwrap().to_owned();
    let set_level = |n: u32| {
        let (base, path, sid) = (base.clone(), path.clone(), sid.clone());
        async move {
            let set = json!({"jsonrpc": "2.0", "id": n, "method": "logging/setLevel", "params": {"level": "info"}});
            let (status, _, r) = post(&base, &path, &legacy_headers(&sid), set.to_string()).await;
            assert_eq!((status, &r["result"]), (200, &json!({})), "{r}");
        }
    };
    let (burst, _) = futures::future::join(
        futures::future::join_all((0..40).map(|_| get_stream(&base, &path, &sid))),
        futures::future::join_all((0..40).map(set_level)),
    )
    .await;
    streams_open(16.0).await;
    drop(burst);
    gw.stop().await;
}
