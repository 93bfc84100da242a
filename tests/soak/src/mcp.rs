//! Requests to the gateway's MCP endpoint (docs/mcp-endpoint.md), written
//! by hand on the wire so the soak controls every connection and session:
//! a 2025-11-25 client's whole session (`initialize`, `tools/list`,
//! `tools/call`, optionally its GET stream, then `DELETE`), and 2026-07-28
//! stateless requests (`tools/call`, and `subscriptions/listen` streams
//! opened and dropped).

use anyhow::{Context as _, bail};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};
use std::time::Duration;

const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";
const ACCEPT_BOTH: &str = "application/json, text/event-stream";
/// Limit of one request (a call through the gateway is quick here).
const REQUEST_LIMIT: Duration = Duration::from_secs(30);

fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

/// Reads a POST's answer (JSON or an SSE stream) and fails unless it holds
/// a JSON-RPC `result`.
async fn expect_result(response: reqwest::Response, what: &str) -> anyhow::Result<()> {
    let status = response.status();
    let text = response.text().await.with_context(|| what.to_owned())?;
    if !status.is_success() || !text.contains("\"result\"") {
        bail!(
            "{what}: HTTP {status}: {}",
            text.chars().take(200).collect::<String>()
        );
    }
    Ok(())
}

/// A 2025-11-25 client's session: opens it, lists the tools, calls `tool`
/// with `arguments`, opens the session's GET stream and drops it after its
/// first bytes when `with_stream`, and deletes the session.
pub async fn legacy_session(
    client: &reqwest::Client,
    url: &str,
    tool: &str,
    arguments: Value,
    with_stream: bool,
) -> anyhow::Result<()> {
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "switchyard-soak", "version": "0"}
        }
    });
    let response = client
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, ACCEPT_BOTH)
        .timeout(REQUEST_LIMIT)
        .body(init.to_string())
        .send()
        .await
        .context("initialize")?;
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .context("initialize: no Mcp-Session-Id")?;
    expect_result(response, "initialize").await?;
    let post = |body: Value| {
        client
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, ACCEPT_BOTH)
            .header("mcp-protocol-version", LEGACY)
            .header("mcp-session-id", &session)
            .timeout(REQUEST_LIMIT)
            .body(body.to_string())
            .send()
    };
    let result = async {
        let r = post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await
            .context("notifications/initialized")?;
        if r.status().as_u16() != 202 {
            bail!("notifications/initialized: HTTP {}", r.status());
        }
        let r = post(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}))
            .await
            .context("tools/list")?;
        expect_result(r, "tools/list").await?;
        let r = post(json!({
            "jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}
        }))
        .await
        .context("tools/call")?;
        expect_result(r, "tools/call").await?;
        if with_stream {
            let mut r = client
                .get(url)
                .header(ACCEPT, "text/event-stream")
                .header("mcp-protocol-version", LEGACY)
                .header("mcp-session-id", &session)
                .send()
                .await
                .context("GET stream")?;
            if !r.status().is_success() {
                bail!("GET stream: HTTP {}", r.status());
            }
            // Opened; a notification or keep-alive may come, or not.
            let _ = tokio::time::timeout(Duration::from_millis(200), r.chunk()).await;
        }
        Ok(())
    }
    .await;
    // Deleted whatever happened above, so failures do not leave sessions.
    let deleted = client
        .delete(url)
        .header("mcp-protocol-version", LEGACY)
        .header("mcp-session-id", &session)
        .timeout(REQUEST_LIMIT)
        .send()
        .await
        .context("DELETE")?;
    result?;
    if deleted.status().as_u16() != 204 {
        bail!("DELETE: HTTP {}", deleted.status());
    }
    Ok(())
}

/// A 2026-07-28 stateless `tools/call`.
pub async fn modern_call(
    client: &reqwest::Client,
    url: &str,
    id: u64,
    tool: &str,
    arguments: Value,
) -> anyhow::Result<()> {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": modern_meta()}
    });
    let r = client
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, ACCEPT_BOTH)
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .timeout(REQUEST_LIMIT)
        .body(body.to_string())
        .send()
        .await
        .context("tools/call")?;
    expect_result(r, "tools/call").await
}

/// A 2026-07-28 `subscriptions/listen` stream, read until its
/// acknowledgement (at most 10 s), then dropped.
pub async fn modern_listen(client: &reqwest::Client, url: &str, id: u64) -> anyhow::Result<()> {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {
            "notifications": {
                "toolsListChanged": true,
                "resourcesListChanged": true,
                "promptsListChanged": true
            },
            "_meta": modern_meta()
        }
    });
    let mut r = client
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .context("subscriptions/listen")?;
    if !r.status().is_success() {
        bail!("subscriptions/listen: HTTP {}", r.status());
    }
    let mut seen = Vec::new();
    let acknowledged = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = r.chunk().await? {
            seen.extend_from_slice(&chunk);
            if String::from_utf8_lossy(&seen).contains("notifications/subscriptions/acknowledged") {
                return Ok::<bool, reqwest::Error>(true);
            }
        }
        Ok(false)
    })
    .await;
    match acknowledged {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => bail!("subscriptions/listen: the stream ended before its acknowledgement"),
        Ok(Err(e)) => Err(e).context("subscriptions/listen"),
        Err(_) => bail!("subscriptions/listen: no acknowledgement within 10 s"),
    }
}
