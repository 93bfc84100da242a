//! `switchyard tools`: the tools an engine sees, of one session or of
//! every server.

use crate::cli::Failure;
use crate::cli::connect::Remote;
use crate::cli::render::json::tool_json;
use crate::cli::render::tables::tools_table;
use crate::cli::render::{print_json, print_lines};
use serde_json::{Value, json};
use switchyard_proto::v1 as pb;

/// Lists the tools (`--json`: `{"tools": [...], "unavailableServers":
/// [...]}`); a table names the unavailable servers on stderr.
pub async fn list(remote: &Remote, session: Option<String>, json: bool) -> Result<(), Failure> {
    let resp = remote
        .engine()
        .await?
        .list_tools(pb::ListToolsRequest {
            session_id: session.unwrap_or_default(),
        })
        .await?
        .into_inner();
    if json {
        let tools: Vec<Value> = resp.tools.iter().map(tool_json).collect();
        print_json(&json!({"tools": tools, "unavailableServers": resp.unavailable_servers}));
    } else {
        print_lines(tools_table(&resp.tools));
        for s in &resp.unavailable_servers {
            eprintln!("(server {s} is unavailable: its tools are not listed)");
        }
    }
    Ok(())
}
