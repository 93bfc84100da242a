//! `switchyard call`: call a tool by its engine-visible name. The exit
//! status is 1 when the tool's result has `isError`.

use crate::cli::connect::Remote;
use crate::cli::render::json::moved_json;
use crate::cli::render::{out, parse_json_text, print_json};
use crate::cli::{EXIT_USAGE, Failure};
use serde_json::Value;
use switchyard_proto::v1 as pb;

/// Calls `tool` with `args` (a JSON object, checked before connecting),
/// then prints the text the model reads and the structured content, or
/// with `json` the raw `CallToolResult` (or the record of a call that
/// moved to the background).
pub async fn call(
    remote: &Remote,
    tool: String,
    args: String,
    session: Option<String>,
    json: bool,
    timeout_ms: u64,
) -> Result<(), Failure> {
    let parsed: Value = serde_json::from_str(&args)
        .map_err(|e| Failure::new(EXIT_USAGE, format!("--args is not valid JSON: {e}")))?;
    if !parsed.is_object() {
        return Err(Failure::new(EXIT_USAGE, "--args must be a JSON object"));
    }
    let resp = remote
        .engine()
        .await?
        .call_tool(pb::CallToolRequest {
            session_id: session.unwrap_or_default(),
            tool: tool.clone(),
            arguments_json: args,
            timeout_ms,
            ..Default::default()
        })
        .await?
        .into_inner();
    if let (true, Some(bg)) = (json, &resp.background) {
        print_json(&moved_json(bg, &resp.text));
    } else if json {
        print_json(&parse_json_text(&resp.result_json));
    } else {
        if !resp.text.is_empty() {
            out!("{}", resp.text);
        }
        if !resp.structured_content_json.is_empty() {
            out!("structuredContent: {}", resp.structured_content_json);
        }
    }
    if resp.is_error {
        return Err(Failure::new(1, format!("tool {tool} returned isError")));
    }
    Ok(())
}
