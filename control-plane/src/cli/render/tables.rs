//! Tables: how the CLI prints lists, one line per record, aligned in
//! columns. The tools an engine sees, servers, a server's tools with their
//! hints and policy, sessions, and background calls.

use super::json::mode_name;
use crate::background::BackgroundRecord;
use switchyard_proto::v1 as pb;

/// `switchyard tools`: per tool, its engine-visible name, then its title,
/// or the first line of its description when it has no title of its own.
pub fn tools_table(tools: &[pb::Tool]) -> Vec<String> {
    tools
        .iter()
        .map(|t| {
            let first = t.description.lines().next().unwrap_or("");
            format!(
                "{:<40} {}",
                t.name,
                if t.title != t.upstream_name {
                    &t.title
                } else {
                    first
                }
            )
        })
        .collect()
}

/// `switchyard servers list`: per server, name, state, tool, resource
/// (and template) and prompt counts, era, and for an oauth server that
/// needs an admin, `oauth=<state>` (or `oauth=step_up`).
pub fn servers_table(servers: &[pb::ServerStatus]) -> Vec<String> {
    servers
        .iter()
        .map(|s| {
            let name = s.spec.as_ref().map(|s| s.name.as_str()).unwrap_or("");
            // Stage D: an oauth server that is not authorized says so.
            let oauth = match &s.oauth {
                Some(o) if o.state != "authorized" => format!(" oauth={}", o.state),
                Some(o) if !o.step_up_scopes.is_empty() => " oauth=step_up".to_owned(),
                _ => String::new(),
            };
            format!(
                "{name:<24} {:<9} tools={:<4} resources={:<4} templates={:<3} prompts={:<4} {}{oauth}",
                s.state,
                s.tool_count,
                s.resource_count,
                s.resource_template_count,
                s.prompt_count,
                s.protocol_version
            )
        })
        .collect()
}

/// `switchyard resources`: per resource `server uri name mimeType size`,
/// then per template `server uriTemplate name mimeType` (marked
/// `template`).
pub fn resources_table(
    resources: &[pb::Resource],
    templates: &[pb::ResourceTemplate],
) -> Vec<String> {
    let size = |n: i64| if n >= 0 { n.to_string() } else { "-".into() };
    resources
        .iter()
        .map(|r| {
            format!(
                "{:<16} {:<48} {:<24} {:<20} {}",
                r.server,
                r.uri,
                r.name,
                r.mime_type,
                size(r.size)
            )
        })
        .chain(templates.iter().map(|t| {
            format!(
                "{:<16} {:<48} {:<24} {:<20} template",
                t.server, t.uri_template, t.name, t.mime_type
            )
        }))
        .collect()
}

/// `switchyard prompts`: per prompt `server name arguments` (a required
/// argument marked `*`), then its title or description.
pub fn prompts_table(prompts: &[pb::Prompt]) -> Vec<String> {
    prompts
        .iter()
        .map(|p| {
            let args: Vec<String> = p
                .arguments
                .iter()
                .map(|a| format!("{}{}", a.name, if a.required { "*" } else { "" }))
                .collect();
            let about = if p.title.is_empty() {
                p.description.lines().next().unwrap_or("")
            } else {
                &p.title
            };
            format!(
                "{:<16} {:<28} {:<28} {about}",
                p.server,
                p.name,
                args.join(",")
            )
        })
        .collect()
}

/// `switchyard servers tools`: a header, then a [`server_tool_line`] per
/// tool.
pub fn server_tools_table(tools: &[pb::ServerTool]) -> Vec<String> {
    let header = format!(
        "{:<36} {:<24} {:<9} {:<9} {:<9} {:<9} policy",
        "name", "title", "readOnly", "destruct", "idempot", "openWorld"
    );
    std::iter::once(header)
        .chain(tools.iter().map(server_tool_line))
        .collect()
}

/// `name title readOnly destructive idempotent openWorld policy`, each hint
/// as `value` with `*` for an override and `~` for the spec default.
pub fn server_tool_line(t: &pb::ServerTool) -> String {
    let h = t.hints.unwrap_or_default();
    let src = t.hint_sources.clone().unwrap_or_default();
    let cell = |v: bool, s: &str| {
        format!(
            "{v}{}",
            match s {
                "override" => "*",
                "default" => "~",
                _ => "",
            }
        )
    };
    let mut policy = t.policy.clone();
    if t.policy_set {
        policy.push_str(" (set)");
    }
    if t.background == "always" {
        policy.push_str(" background=always");
    }
    if !t.in_catalogue {
        policy.push_str(" [not in catalogue]");
    }
    format!(
        "{:<36} {:<24} {:<9} {:<9} {:<9} {:<9} {policy}",
        t.name,
        t.title,
        cell(h.read_only_hint, &src.read_only_hint),
        cell(h.destructive_hint, &src.destructive_hint),
        cell(h.idempotent_hint, &src.idempotent_hint),
        cell(h.open_world_hint, &src.open_world_hint),
    )
}

/// A duration in ms as `45s`, `12m`, `3h`, `2d`.
fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `switchyard background list` as a table: a header, then one line per
/// call (id, status, mode, engine tool, session, age, message).
pub fn background_table(calls: &[BackgroundRecord], now_ms: i64) -> Vec<String> {
    let tool_w = calls
        .iter()
        .map(|c| c.engine_tool.len().max(c.tool.len()))
        .max()
        .unwrap_or(0)
        .clamp(4, 40);
    let mut lines = vec![format!(
        "{:<36}  {:<14}  {:<4}  {:<tool_w$}  {:<32}  {:>4}  MESSAGE",
        "ID", "STATUS", "MODE", "TOOL", "SESSION", "AGE"
    )];
    for c in calls {
        // Finished with a result: what the model reads; else the status.
        let mut message = match &c.result {
            Some(r) if !r.model_text.is_empty() => {
                r.model_text.lines().next().unwrap_or("").to_owned()
            }
            _ => c.status_message.clone(),
        };
        if c.poll_error_since_ms > 0 && !c.last_poll_error.is_empty() {
            message = format!("polling fails: {}", c.last_poll_error);
        }
        let message: String = message.chars().take(80).collect();
        lines.push(format!(
            "{:<36}  {:<14}  {:<4}  {:<tool_w$}  {:<32}  {:>4}  {}",
            c.id,
            c.status,
            c.mode,
            shown_tool(c),
            if c.session_id.is_empty() {
                "-"
            } else {
                &c.session_id
            },
            age(now_ms - c.created_at_ms),
            message
        ));
    }
    lines
}

/// `switchyard sessions list`: per session, its id and permission mode.
pub fn sessions_table(sessions: &[pb::Session]) -> Vec<String> {
    sessions
        .iter()
        .map(|s| format!("{}  {}", s.id, mode_name(s.permission_mode)))
        .collect()
}

/// The tool a background call shows: its engine-visible name, else its
/// name on the server.
pub fn shown_tool(c: &BackgroundRecord) -> &str {
    if c.engine_tool.is_empty() {
        &c.tool
    } else {
        &c.engine_tool
    }
}
