//! Cards: how the CLI prints one record over several lines. An interaction
//! (a form's fields, a URL and its domain, or the call to approve and its
//! arguments, with the
//! `switchyard answer` flags that fit), a background call's event (what
//! finished, then what the model reads or why it failed), and a server's
//! status with its tools. `switchyard events`, `switchyard interactions`
//! and `switchyard servers status` print them. Times are UTC
//! ([`utc`]).

use super::parse_json_text;
use super::tables::{server_tools_table, shown_tool};
use crate::background::BackgroundRecord;
use crate::interactions::form;
use switchyard_proto::v1 as pb;

/// An interaction as a card, one line per item: kind, id, who asks, the
/// message, then per kind the form's fields, the URL and its domain, or the
/// call to approve; with `how`, the `switchyard answer` flags that fit.
pub fn render_interaction(i: &pb::Interaction, how: bool) -> Vec<String> {
    let mut lines = Vec::new();
    let mut head = format!("{} {} [{}", i.kind, i.id, i.status);
    if !i.outcome.is_empty() {
        head.push_str(&format!(": {}", i.outcome));
    }
    head.push_str(&format!("] server {}", i.server));
    // A stage E request's interaction names the request (`resources/read
    // URI`, `prompts/get NAME`), a tool call's the tool.
    let request = ["resources/read ", "prompts/get ", "completion/complete "]
        .iter()
        .any(|m| i.tool.starts_with(m));
    match (i.tool.is_empty(), request) {
        (true, _) => {}
        (false, true) => head.push_str(&format!(", {}", i.tool)),
        (false, false) => head.push_str(&format!(", tool {}", i.tool)),
    }
    if !i.run_id.is_empty() {
        head.push_str(&format!(", run {}", i.run_id));
    }
    lines.push(head);
    let resolved = i.status == "resolved";
    match i.kind.as_str() {
        "approval" => {
            lines.push(format!(
                "approve the call to {} on {}?",
                if i.tool.is_empty() { "a tool" } else { &i.tool },
                i.server,
            ));
            // The control plane's own wording says the same; a message of
            // the caller's own is shown.
            if i.message != format!("Allow the call to {} on {}?", i.tool, i.server) {
                lines.push(format!("message: {}", i.message));
            }
            // What would be approved (as the console's card shows it), on
            // one line, cut at 500 characters.
            if !i.arguments_json.trim().is_empty() {
                let args = parse_json_text(&i.arguments_json).to_string();
                lines.push(format!(
                    "with: {}",
                    switchyard_mcp::jsonrpc::preview(args.as_bytes(), 500)
                ));
            }
        }
        _ => lines.push(format!("message: {}", i.message)),
    }
    if !resolved {
        match i.kind.as_str() {
            "form" => {
                let schema = parse_json_text(&i.requested_schema_json);
                let fields = form::summarize_schema(&schema);
                if fields.is_empty() {
                    lines.push("fields: none".into());
                } else {
                    lines.push("fields:".into());
                }
                for f in &fields {
                    lines.push(format!("  {}", field_line(f)));
                }
            }
            "url" => {
                lines.push(format!("domain: {}", i.url_domain));
                lines.push(format!("url:    {}", i.url));
                lines.push(
                    "(Switchyard never opens this URL; open it yourself only if you trust the domain.)"
                        .into(),
                );
            }
            _ => {}
        }
    }
    if how && i.status == "open" {
        let flags = match i.kind.as_str() {
            "approval" => "--approve | --deny | --cancel",
            "url" => "--accept '{}' | --decline | --cancel",
            _ => "--accept JSON | --decline | --cancel",
        };
        lines.push(format!(
            "answer: switchyard answer --session {} {} {flags}",
            i.session_id, i.id
        ));
    }
    if resolved && !i.content_json.is_empty() {
        // The engine's own answer; shown as the field names only.
        let names: Vec<String> = parse_json_text(&i.content_json)
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        lines.push(format!("answered fields: {}", names.join(", ")));
    }
    lines
}

fn field_line(f: &form::FieldSummary) -> String {
    use form::FieldKind;
    let kind = match f.kind {
        FieldKind::String => "string",
        FieldKind::Number => "number",
        FieldKind::Integer => "integer",
        FieldKind::Boolean => "boolean",
        FieldKind::SingleSelect => "one of",
        FieldKind::MultiSelect => "any of",
        FieldKind::Unsupported => "unsupported",
    };
    let mut parts = vec![kind.to_owned()];
    if f.required {
        parts.push("required".into());
    }
    let l = &f.limits;
    let limits = [
        ("format", l.format.clone()),
        ("min length", l.min_length.map(|n| n.to_string())),
        ("max length", l.max_length.map(|n| n.to_string())),
        ("min", l.minimum.as_ref().map(|n| n.to_string())),
        ("max", l.maximum.as_ref().map(|n| n.to_string())),
        ("min items", l.min_items.map(|n| n.to_string())),
        ("max items", l.max_items.map(|n| n.to_string())),
    ];
    for (name, value) in limits {
        if let Some(value) = value {
            parts.push(format!("{name} {value}"));
        }
    }
    if let Some(d) = &f.default {
        parts.push(format!("default {d}"));
    }
    if !f.options.is_empty() {
        let opts: Vec<String> = f
            .options
            .iter()
            .map(|o| {
                if o.label == o.value {
                    o.value.clone()
                } else {
                    format!("{} ({})", o.value, o.label)
                }
            })
            .collect();
        parts.push(format!("options: {}", opts.join(", ")));
    }
    if let Some(why) = &f.unsupported {
        parts.push(why.clone());
    }
    let mut line = format!("{:<16} {}", f.name, parts.join(", "));
    if let Some(t) = f.title.as_ref().or(f.description.as_ref()) {
        line.push_str(&format!(" - {t}"));
    }
    line
}

/// Milliseconds since the Unix epoch as readable UTC,
/// `YYYY-MM-DD HH:MM:SS.mmmZ`; 0 (never) as `-`.
pub fn utc(ms: i64) -> String {
    if ms <= 0 {
        return "-".into();
    }
    switchyard_common::time::rfc3339_ms(ms).replacen('T', " ", 1)
}

/// `switchyard servers status`: a server's status as a card. Its name,
/// state and transport; what it runs (URL or command) and its era; the
/// server it turned out to be; counts; auth and OAuth state; one line per
/// sidecar; name collisions; then its tools as `servers tools` lists them.
pub fn render_server(s: &pb::ServerStatus, tools: &[pb::ServerTool]) -> Vec<String> {
    // An argument as a shell would need it: quoted when it is empty or
    // has white space or quotes, so where one ends is visible.
    let shell_word = |a: &str| {
        let plain = !a.is_empty()
            && a.chars()
                .all(|c| c.is_alphanumeric() || "@%+=:,./_-[]~^".contains(c));
        match plain {
            true => a.to_owned(),
            false => format!("'{}'", a.replace('\'', "'\\''")),
        }
    };
    // A size in the largest unit that divides it.
    let bytes = |b: u64| match b {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    };
    let spec = s.spec.clone().unwrap_or_default();
    let http = spec.transport == pb::Transport::Http as i32;
    let mut lines = vec![format!(
        "{} [{}] {}, era {}{}",
        spec.name,
        s.state,
        if http { "http" } else { "stdio" },
        if s.protocol_version.is_empty() {
            "-"
        } else {
            &s.protocol_version
        },
        if spec.era.is_empty() || spec.era == s.protocol_version {
            String::new()
        } else {
            format!(" (configured: {})", spec.era)
        }
    )];
    if http {
        lines.push(format!("url:       {}", spec.url));
    } else {
        let command: Vec<String> = std::iter::once(&spec.command)
            .chain(&spec.args)
            .map(|a| shell_word(a))
            .collect();
        lines.push(format!("command:   {}", command.join(" ")));
        if !spec.env.is_empty() {
            let env: std::collections::BTreeMap<_, _> = spec.env.iter().collect();
            // One line: a value's line breaks cannot fake card lines.
            let env: Vec<String> = env
                .iter()
                .map(|(k, v)| format!("{k}={}", v.replace('\r', "\\r").replace('\n', "\\n")))
                .collect();
            lines.push(format!("env:       {}", env.join(", ")));
        }
        if !spec.cwd.is_empty() {
            lines.push(format!("cwd:       {}", spec.cwd));
        }
    }
    // The limits, as `servers add` and the configuration set them.
    let mut limits = vec![format!(
        "request timeout {} s",
        spec.request_timeout_ms / 1000
    )];
    match spec.liveness_interval_sec {
        Some(0) => limits.push("liveness probe off".into()),
        Some(s) => limits.push(format!("liveness probe every {s} s")),
        None => {}
    }
    if let Some(b) = spec.max_message_bytes {
        limits.push(format!("messages up to {}", bytes(b)));
    }
    lines.push(format!("limits:    {}", limits.join(", ")));
    let info = parse_json_text(&s.server_info_json);
    if let Some(name) = info.get("name").and_then(|v| v.as_str()) {
        let version = info.get("version").and_then(|v| v.as_str()).unwrap_or("");
        lines.push(format!("server:    {name} {version}").trim_end().to_owned());
    }
    lines.push(format!(
        "catalogue: {} tools, {} resources, {} templates, {} prompts (tools updated {})",
        s.tool_count,
        s.resource_count,
        s.resource_template_count,
        s.prompt_count,
        utc(s.tools_updated_at_ms)
    ));
    let mut auth = if spec.auth.is_empty() {
        "none".to_owned()
    } else {
        spec.auth.clone()
    };
    let mut headers: Vec<String> = spec.headers.keys().cloned().collect();
    headers.sort();
    if !headers.is_empty() {
        // `auth = "headers"` is said once: "headers Authorization".
        let sep = if auth == "headers" { " " } else { ", headers " };
        auth.push_str(&format!("{sep}{}", headers.join(", ")));
    }
    let mut files: Vec<String> = spec
        .header_files
        .iter()
        .map(|(k, v)| format!("{k} from {v}"))
        .collect();
    files.sort();
    if !files.is_empty() {
        auth.push_str(&format!(", header files {}", files.join(", ")));
    }
    lines.push(format!("auth:      {auth}"));
    if let Some(o) = &s.oauth {
        let mut line = format!("oauth:     {}", o.state);
        if !o.issuer.is_empty() {
            line.push_str(&format!(", issuer {}", o.issuer));
        }
        if !o.scopes.is_empty() {
            line.push_str(&format!(", scopes {}", o.scopes.join(" ")));
        }
        if o.expires_at_ms > 0 {
            line.push_str(&format!(", token expires {}", utc(o.expires_at_ms)));
        }
        lines.push(line);
        if !o.step_up_scopes.is_empty() {
            lines.push(format!(
                "           step-up asked: {}",
                o.step_up_scopes.join(" ")
            ));
        }
        if !o.reason.is_empty() {
            lines.push(format!("           {}", o.reason));
        }
    }
    if !s.launch_error.is_empty() {
        lines.push(format!(
            "not running: {}",
            s.launch_error.replace('\n', "\\n")
        ));
    }
    if s.sidecars.is_empty() {
        lines.push("sidecars:  none".into());
    } else {
        lines.push("sidecars:".into());
    }
    for c in &s.sidecars {
        let mut line = format!(
            "  {} {} at {} (registered {})",
            c.sidecar_id,
            c.upstream_state,
            c.call_address,
            utc(c.registered_at_ms)
        );
        if !c.last_error.is_empty() {
            // One line: a server's text may hold newlines (the terminal's
            // other controls are escaped when the card is printed).
            line.push_str(&format!(": {}", c.last_error.replace('\n', "\\n")));
        }
        lines.push(line);
    }
    for c in &s.name_collisions {
        lines.push(format!("collision: {c}"));
    }
    if tools.is_empty() {
        lines.push("tools:     none".into());
    } else {
        lines.push("tools:".into());
        lines.extend(
            server_tools_table(tools)
                .into_iter()
                .map(|l| format!("  {l}")),
        );
    }
    lines
}

/// A background call event as lines: what finished, then what the model
/// reads (the wake-up message) or why it failed.
pub fn render_background(c: &BackgroundRecord) -> Vec<String> {
    let mut lines = vec![format!(
        "{} [{}] {} on {} ({} mode{})",
        c.id,
        c.status,
        shown_tool(c),
        c.server,
        c.mode,
        if c.run_id.is_empty() {
            String::new()
        } else {
            format!(", run {}", c.run_id)
        }
    )];
    if !c.status_message.is_empty() {
        lines.push(format!("message: {}", c.status_message));
    }
    if let Some(r) = &c.result {
        if r.is_error {
            lines.push("result: isError".into());
        }
        for l in r.model_text.lines() {
            lines.push(format!("| {l}"));
        }
        if !r.structured_content_json.is_empty() {
            lines.push(format!("structuredContent: {}", r.structured_content_json));
        }
        for a in &r.attachments {
            lines.push(format!(
                "attachment: {} ({}, {} bytes)",
                a.name, a.mime_type, a.size_bytes
            ));
        }
    }
    if !c.error_json.is_empty() {
        lines.push(format!("error: {}", c.error_json));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_card_shows_state_sidecars_and_tools() {
        let s = pb::ServerStatus {
            spec: Some(pb::ServerSpec {
                name: "orders".into(),
                transport: pb::Transport::Stdio as i32,
                command: "switchyard-reference-server".into(),
                args: vec![
                    "--era".into(),
                    "2026-07-28".into(),
                    "--name".into(),
                    "two words".into(),
                    "it's".into(),
                    "".into(),
                ],
                env: [
                    ("RUST_LOG".into(), "info\nsidecars:  none".into()),
                    ("API_TOKEN".into(), "[redacted]".into()),
                ]
                .into(),
                request_timeout_ms: 30_000,
                liveness_interval_sec: Some(0),
                max_message_bytes: Some(16 << 20),
                era: "auto".into(),
                ..Default::default()
            }),
            state: "up".into(),
            tool_count: 7,
            tools_updated_at_ms: 1_767_225_600_000,
            protocol_version: "2026-07-28".into(),
            server_info_json: r#"{"name":"reference","version":"1.2"}"#.into(),
            launch_error: "its sidecar exited (exit status: 1)".into(),
            sidecars: vec![pb::SidecarInfo {
                sidecar_id: "sc-1".into(),
                call_address: "127.0.0.1:9".into(),
                upstream_state: "connected".into(),
                registered_at_ms: 1_767_225_600_000,
                last_error: "restarted\nerror: injected".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let tool = pb::ServerTool {
            name: "orders__get_order".into(),
            title: "Get order".into(),
            policy: "default".into(),
            in_catalogue: true,
            ..Default::default()
        };
        let lines = render_server(&s, &[tool]);
        // A server's error text stays on its sidecar's line.
        assert!(
            lines.iter().any(|l| l.starts_with("  sc-1 connected")
                && l.ends_with(": restarted\\nerror: injected")),
            "{lines:?}"
        );
        assert!(!lines.iter().any(|l| l.contains('\n')), "{lines:?}");
        let text = lines.join("\n");
        assert!(
            text.starts_with("orders [up] stdio, era 2026-07-28 (configured: auto)"),
            "{text}"
        );
        assert!(
            text.contains(
                "command:   switchyard-reference-server --era 2026-07-28 --name 'two words' 'it'\\''s' ''\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("env:       API_TOKEN=[redacted], RUST_LOG=info\\nsidecars:  none\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "limits:    request timeout 30 s, liveness probe off, messages up to 16 MiB\n"
            ),
            "{text}"
        );
        assert!(text.contains("server:    reference 1.2"), "{text}");
        assert!(
            text.contains("not running: its sidecar exited (exit status: 1)\nsidecars:"),
            "{text}"
        );
        assert!(
            text.contains("7 tools, 0 resources, 0 templates, 0 prompts (tools updated 2026-01-01 00:00:00.000Z)"),
            "{text}"
        );
        assert!(
            text.contains(
                "  sc-1 connected at 127.0.0.1:9 (registered 2026-01-01 00:00:00.000Z): restarted"
            ),
            "{text}"
        );
        assert!(text.contains("  orders__get_order "), "{text}");
        assert!(text.contains("* set by an administrator"), "{text}");
        assert_eq!(utc(0), "-");
        assert!(text.contains("auth:      none\n"), "{text}");
        // Headers: named once with `auth = "headers"`, listed after another kind.
        let auth_line = |auth: &str| {
            let mut s = s.clone();
            let spec = s.spec.as_mut().unwrap();
            spec.auth = auth.into();
            spec.headers = [("Authorization".into(), "[redacted]".into())].into();
            let lines = render_server(&s, &[]);
            lines.into_iter().find(|l| l.starts_with("auth:")).unwrap()
        };
        assert_eq!(auth_line("headers"), "auth:      headers Authorization");
        assert_eq!(
            auth_line("oauth"),
            "auth:      oauth, headers Authorization"
        );
    }

    #[test]
    fn cards_show_fields_urls_and_approvals() {
        let form = pb::Interaction {
            id: "i1".into(),
            session_id: "s".into(),
            kind: "form".into(),
            server: "orders".into(),
            tool: "create_order".into(),
            message: "Where to?".into(),
            requested_schema_json: r#"{"type":"object","properties":{"city":{"type":"string","title":"City","maxLength":40},"size":{"type":"string","enum":["s","m"],"default":"m"}},"required":["city"]}"#.into(),
            status: "open".into(),
            ..Default::default()
        };
        let text = render_interaction(&form, true).join("\n");
        assert!(
            text.contains("city             string, required, max length 40 - City"),
            "{text}"
        );
        assert!(
            text.contains("size             one of, default \"m\", options: s, m"),
            "{text}"
        );
        assert!(
            text.contains("switchyard answer --session s i1 --accept JSON"),
            "{text}"
        );
        let url = pb::Interaction {
            kind: "url".into(),
            url: "https://login.example.com/a?b=c".into(),
            url_domain: "login.example.com".into(),
            requested_schema_json: String::new(),
            ..form.clone()
        };
        let text = render_interaction(&url, true).join("\n");
        assert!(text.contains("domain: login.example.com"), "{text}");
        assert!(
            text.contains("url:    https://login.example.com/a?b=c"),
            "{text}"
        );
        assert!(text.contains("never opens"), "{text}");
        let approval = pb::Interaction {
            kind: "approval".into(),
            status: "resolved".into(),
            outcome: "deny".into(),
            ..url
        };
        let text = render_interaction(&approval, true).join("\n");
        assert!(
            text.contains("approval i1 [resolved: deny] server orders, tool create_order"),
            "{text}"
        );
        assert!(!text.contains("switchyard answer"), "{text}");
        // The control plane's default wording is not repeated; a message
        // of the caller's own is shown.
        let default = pb::Interaction {
            message: "Allow the call to create_order on orders?".into(),
            ..approval.clone()
        };
        let text = render_interaction(&default, true).join("\n");
        assert_eq!(text.matches("create_order on orders?").count(), 1, "{text}");
        assert!(!text.contains("message:"), "{text}");
        assert!(!text.contains("with:"), "no arguments: {text}");
        // The arguments to approve, on one line.
        let with_args = pb::Interaction {
            arguments_json: "{\"customer_id\": \"C-3\",\n \"qty\": 2}".into(),
            ..default.clone()
        };
        let text = render_interaction(&with_args, true).join("\n");
        assert!(
            text.contains("\nwith: {\"customer_id\":\"C-3\",\"qty\":2}"),
            "{text}"
        );
        let own = pb::Interaction {
            message: "Refunds over $500 need a second pair of eyes".into(),
            ..approval
        };
        let text = render_interaction(&own, true).join("\n");
        assert!(text.contains("message: Refunds over $500"), "{text}");
        // A read's question names the read, not a tool.
        let read = pb::Interaction {
            tool: "resources/read orders://orders/O-1".into(),
            ..form
        };
        let text = render_interaction(&read, false).join("\n");
        assert!(
            text.contains("form i1 [open] server orders, resources/read orders://orders/O-1"),
            "{text}"
        );
    }
}
