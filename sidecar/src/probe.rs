//! `switchyard-sidecar probe`: an operator's check of an upstream server.
//! It connects the way the sidecar would, prints the negotiated protocol
//! version, serverInfo, capabilities and tools, optionally calls one tool,
//! and exits 0 on success or non-zero with a one-line reason — never hangs
//! (everything is bounded by `--timeout-secs`).

use crate::upstream::{
    EraPreference, HttpConfig, StdioConfig, TransportConfig, Upstream, UpstreamConfig,
    UpstreamMetrics,
};
use serde_json::{Value, json};
use std::time::Duration;

/// Arguments of `probe`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Check an upstream MCP server: negotiate, list tools, optionally call one",
    after_help = "Examples:\n  switchyard-sidecar probe -- npx -y @modelcontextprotocol/server-everything stdio\n  switchyard-sidecar probe --url http://127.0.0.1:3001/mcp --header 'Authorization: Bearer T'\n  switchyard-sidecar probe --json --call echo --args '{\"message\":\"hi\"}' -- ./server"
)]
pub struct ProbeArgs {
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Streamable HTTP endpoint of the server.
    #[arg(long, conflicts_with = "command")]
    pub url: Option<String>,
    /// Static header for HTTP requests, as 'Name: value' (repeatable).
    #[arg(long = "header", value_name = "'K: V'", requires = "url")]
    pub headers: Vec<String>,
    /// Environment variable for a stdio server, as NAME=value (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Working directory for a stdio server.
    #[arg(long)]
    pub cwd: Option<std::path::PathBuf>,
    /// Protocol era: auto (probe 2026-07-28, fall back to 2025-11-25), 2026-07-28 or 2025-11-25.
    #[arg(long, default_value = "auto", value_parser = parse_era)]
    pub era: EraPreference,
    /// Call this tool after listing.
    #[arg(long, value_name = "TOOL")]
    pub call: Option<String>,
    /// Arguments of --call, a JSON object.
    #[arg(long, value_name = "JSON", requires = "call")]
    pub args: Option<String>,
    /// Give up after this many seconds in all.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
    /// Largest message accepted from the server, in bytes.
    #[arg(long, default_value_t = crate::upstream::config::DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_message_bytes: usize,
    /// The stdio server's command and arguments, after `--`.
    #[arg(last = true, value_name = "CMD ARGS")]
    pub command: Vec<String>,
}

fn parse_era(s: &str) -> Result<EraPreference, String> {
    s.parse()
}

/// Runs the probe; `Err` is the one-line reason for the failure.
pub async fn run(args: ProbeArgs) -> Result<(), String> {
    let transport = transport(&args)?;
    let call_args: Value = match &args.args {
        Some(raw) => {
            let v: Value =
                serde_json::from_str(raw).map_err(|e| format!("--args is not valid JSON: {e}"))?;
            if !v.is_object() {
                return Err("--args must be a JSON object".into());
            }
            v
        }
        None => json!({}),
    };
    let name = match &transport {
        // Named in every log line and error: its secrets redacted, and
        // text that is not a URL not repeated.
        TransportConfig::Http(h) => match reqwest::Url::parse(&h.url) {
            Ok(_) => switchyard_common::server_spec::redacted_url(&h.url),
            Err(_) => "probe".to_owned(),
        },
        TransportConfig::Stdio(s) => s.command.clone(),
    };
    let mut config = UpstreamConfig::new(name, transport);
    config.era = args.era;
    config.max_message_bytes = args.max_message_bytes;
    config.restart.eager = false;
    let timeout = Duration::from_secs(args.timeout_secs);
    config.request_timeout = timeout;
    config.discover_timeout = timeout.min(config.discover_timeout);
    let upstream =
        Upstream::new(config, &UpstreamMetrics::unregistered()).map_err(|e| e.to_string())?;

    let work = async {
        let negotiated = upstream.connect().await.map_err(|e| e.to_string())?;
        let tools = upstream
            .list_tools()
            .await
            .map_err(|e| e.to_string())?
            .entries;
        let result = match &args.call {
            Some(tool) => Some(
                upstream
                    .call_tool(json!({"name": tool, "arguments": call_args}))
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            None => None,
        };
        Ok::<_, String>((negotiated, tools, result))
    };
    let outcome = tokio::time::timeout(timeout, work).await;
    upstream.shutdown(Duration::from_secs(2)).await;
    let (negotiated, tools, result) =
        outcome.map_err(|_| format!("no answer within {}s", args.timeout_secs))??;

    if args.json {
        let mut doc = serde_json::to_value(&negotiated).expect("serialises");
        doc["tools"] = Value::Array(tools);
        if let Some(r) = &result {
            doc["callResult"] = r.clone();
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("serialises")
        );
    } else {
        print_text(&negotiated, &tools, result.as_ref(), args.call.as_deref());
    }
    if let Some(r) = &result
        && r.get("isError") == Some(&Value::Bool(true))
    {
        return Err(format!(
            "tool {} returned isError: {}",
            args.call.as_deref().unwrap_or(""),
            first_text(r).unwrap_or_default()
        ));
    }
    Ok(())
}

fn transport(args: &ProbeArgs) -> Result<TransportConfig, String> {
    if let Some(url) = &args.url {
        let mut headers = Vec::new();
        for (i, h) in args.headers.iter().enumerate() {
            let (k, v) = h.split_once(':').ok_or_else(|| {
                format!(
                    "--header #{} is not of the form 'Name: value' (no ':' in it)",
                    i + 1
                )
            })?;
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
        return Ok(TransportConfig::Http(HttpConfig {
            url: url.clone(),
            headers,
        }));
    }
    let (command, rest) = args
        .command
        .split_first()
        .ok_or("give a server: --url URL, or -- CMD ARGS...")?;
    let mut env = std::collections::BTreeMap::new();
    for (i, e) in args.env.iter().enumerate() {
        let (k, v) = e.split_once('=').ok_or_else(|| {
            format!(
                "--env #{} is not of the form NAME=value (no '=' in it)",
                i + 1
            )
        })?;
        env.insert(k.to_owned(), v.to_owned());
    }
    Ok(TransportConfig::Stdio(StdioConfig {
        command: command.clone(),
        args: rest.to_vec(),
        env,
        cwd: args.cwd.clone(),
    }))
}

fn first_text(result: &Value) -> Option<String> {
    result
        .get("content")?
        .as_array()?
        .iter()
        .find_map(|c| c.get("text").and_then(Value::as_str))
        .map(|t| {
            t.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .chars()
                .take(300)
                .collect()
        })
}

fn print_text(
    n: &crate::upstream::Negotiated,
    tools: &[Value],
    result: Option<&Value>,
    tool: Option<&str>,
) {
    let info = &n.server_info;
    println!(
        "protocol: {} ({})",
        n.protocol_version,
        match n.era {
            crate::upstream::Era::Modern => "modern",
            crate::upstream::Era::Legacy => "legacy, initialize handshake",
        }
    );
    println!(
        "server:   {} {}",
        info.get("name")
            .and_then(Value::as_str)
            .unwrap_or("(unnamed)"),
        info.get("version").and_then(Value::as_str).unwrap_or("")
    );
    println!("capabilities: {}", n.capabilities);
    println!("tools ({}):", tools.len());
    for t in tools {
        let name = t.get("name").and_then(Value::as_str).unwrap_or("?");
        let desc = t
            .get("title")
            .or_else(|| t.get("description"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .lines()
            .next()
            .unwrap_or("");
        println!("  {name:<32} {desc}");
    }
    if let Some(r) = result {
        println!("result of {}:", tool.unwrap_or(""));
        let mut printed = false;
        if let Some(items) = r.get("content").and_then(Value::as_array) {
            for c in items {
                match c.get("text").and_then(Value::as_str) {
                    Some(t) => println!("  {t}"),
                    None => println!(
                        "  [{}]",
                        c.get("type").and_then(Value::as_str).unwrap_or("content")
                    ),
                }
                printed = true;
            }
        }
        if let Some(s) = r.get("structuredContent") {
            println!("  structuredContent: {s}");
            printed = true;
        }
        if !printed {
            println!("  {r}");
        }
    }
}
