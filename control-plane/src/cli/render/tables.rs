//! Tables: how the CLI prints lists, one line per record, aligned in
//! columns. The tools an engine sees, servers, a server's tools with their
//! hints and policy (and the legend of its markers), sessions, and
//! background calls.
//!
//! Columns are as wide as their widest cell, measured in terminal columns
//! ([`display_width`]: a CJK character or an emoji takes two, a combining
//! mark none), and never narrower than the width each table used to have,
//! so a long or wide name pushes the columns after it instead of shifting
//! its own line. Control characters are escaped ([`super::printable`])
//! before measuring, tabs and newlines in a cell become spaces.

use super::json::mode_name;
use crate::background::BackgroundRecord;
use switchyard_proto::v1 as pb;

/// How many terminal columns `text` takes: 2 for East Asian wide and
/// full-width characters and most emoji, 0 for combining marks, zero-width
/// characters and variation selectors, 1 for the rest.
pub fn display_width(text: &str) -> usize {
    text.chars().map(char_width).sum()
}

fn char_width(c: char) -> usize {
    let u = c as u32;
    let zero = matches!(
        u,
        0x0300..=0x036F
            | 0x0483..=0x0489
            | 0x0591..=0x05BD
            | 0x0610..=0x061A
            | 0x064B..=0x065F
            | 0x1AB0..=0x1AFF
            | 0x1DC0..=0x1DFF
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x20D0..=0x20FF
            | 0xFE00..=0xFE0F
            | 0xFE20..=0xFE2F
            | 0xFEFF
            | 0xE0100..=0xE01EF
    );
    if zero {
        return 0;
    }
    let wide = matches!(
        u,
        0x1100..=0x115F
            | 0x231A..=0x231B
            | 0x2329..=0x232A
            | 0x23E9..=0x23EC
            | 0x23F0
            | 0x23F3
            | 0x25FD..=0x25FE
            | 0x2614..=0x2615
            | 0x2648..=0x2653
            | 0x267F
            | 0x2693
            | 0x26A1
            | 0x26AA..=0x26AB
            | 0x26BD..=0x26BE
            | 0x26C4..=0x26C5
            | 0x26CE
            | 0x26D4
            | 0x26EA
            | 0x26F2..=0x26F3
            | 0x26F5
            | 0x26FA
            | 0x26FD
            | 0x2705
            | 0x270A..=0x270B
            | 0x2728
            | 0x274C
            | 0x274E
            | 0x2753..=0x2755
            | 0x2757
            | 0x2795..=0x2797
            | 0x27B0
            | 0x27BF
            | 0x2B1B..=0x2B1C
            | 0x2B50
            | 0x2B55
            | 0x2E80..=0x303E
            | 0x3041..=0x33FF
            | 0x3400..=0x4DBF
            | 0x4E00..=0x9FFF
            | 0xA000..=0xA4CF
            | 0xA960..=0xA97F
            | 0xAC00..=0xD7A3
            | 0xF900..=0xFAFF
            | 0xFE10..=0xFE19
            | 0xFE30..=0xFE6F
            | 0xFF00..=0xFF60
            | 0xFFE0..=0xFFE6
            | 0x16FE0..=0x18CFF
            | 0x1AFF0..=0x1B2FF
            | 0x1F004
            | 0x1F0CF
            | 0x1F18E
            | 0x1F191..=0x1F19A
            | 0x1F200..=0x1F2FF
            | 0x1F300..=0x1F64F
            | 0x1F680..=0x1F6FF
            | 0x1F7E0..=0x1F7EB
            | 0x1F90C..=0x1F9FF
            | 0x1FA70..=0x1FAFF
            | 0x20000..=0x2FFFD
            | 0x30000..=0x3FFFD
    );
    if wide { 2 } else { 1 }
}

/// Alignment of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Align {
    Left,
    Right,
}

/// Rows of cells as aligned lines: column `i` is as wide as its widest
/// cell and at least `min[i]` (missing: 0); columns are joined by `sep`;
/// the last column is not padded and no line ends in spaces. `right` lists
/// the right-aligned columns.
fn align(rows: &[Vec<String>], min: &[usize], right: &[usize], sep: &str) -> Vec<String> {
    let clean = |cell: &str| -> String {
        super::printable(cell)
            .chars()
            .map(|c| if c == '\t' || c == '\n' { ' ' } else { c })
            .collect()
    };
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| clean(c)).collect())
        .collect();
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths: Vec<usize> = (0..columns)
        .map(|i| min.get(i).copied().unwrap_or(0))
        .collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(display_width(cell));
        }
    }
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str(sep);
                }
                let pad = " ".repeat(widths[i].saturating_sub(display_width(cell)));
                let how = if right.contains(&i) {
                    Align::Right
                } else {
                    Align::Left
                };
                match how {
                    Align::Right => {
                        line.push_str(&pad);
                        line.push_str(cell);
                    }
                    Align::Left if i + 1 == row.len() => line.push_str(cell),
                    Align::Left => {
                        line.push_str(cell);
                        line.push_str(&pad);
                    }
                }
            }
            line.truncate(line.trim_end().len());
            line
        })
        .collect()
}

/// `switchyard tools`: per tool, its engine-visible name, then its title,
/// or the first line of its description when it has no title of its own.
pub fn tools_table(tools: &[pb::Tool]) -> Vec<String> {
    let rows: Vec<Vec<String>> = tools
        .iter()
        .map(|t| {
            let first = t.description.lines().next().unwrap_or("");
            let about = if t.title != t.upstream_name {
                &t.title
            } else {
                first
            };
            vec![t.name.clone(), about.to_owned()]
        })
        .collect();
    align(&rows, &[40], &[], " ")
}

/// `switchyard servers list`: per server, name, state, tool, resource
/// (and template) and prompt counts, era, and for an oauth server that
/// needs an admin, `oauth=<state>` (or `oauth=step_up`).
pub fn servers_table(servers: &[pb::ServerStatus]) -> Vec<String> {
    let rows: Vec<Vec<String>> = servers
        .iter()
        .map(|s| {
            let name = s.spec.as_ref().map(|s| s.name.as_str()).unwrap_or("");
            // Stage D: an oauth server that is not authorized says so.
            let oauth = match &s.oauth {
                Some(o) if o.state != "authorized" => format!("oauth={}", o.state),
                Some(o) if !o.step_up_scopes.is_empty() => "oauth=step_up".to_owned(),
                _ => String::new(),
            };
            vec![
                name.to_owned(),
                s.state.clone(),
                format!("tools={}", s.tool_count),
                format!("resources={}", s.resource_count),
                format!("templates={}", s.resource_template_count),
                format!("prompts={}", s.prompt_count),
                s.protocol_version.clone(),
                oauth,
            ]
        })
        .collect();
    align(&rows, &[24, 9, 10, 14, 13, 12], &[], " ")
}

/// `switchyard resources`: per resource `server uri name mimeType size`,
/// then per template `server uriTemplate name mimeType` (marked
/// `template`).
pub fn resources_table(
    resources: &[pb::Resource],
    templates: &[pb::ResourceTemplate],
) -> Vec<String> {
    let size = |n: i64| if n >= 0 { n.to_string() } else { "-".into() };
    let rows: Vec<Vec<String>> = resources
        .iter()
        .map(|r| {
            vec![
                r.server.clone(),
                r.uri.clone(),
                r.name.clone(),
                r.mime_type.clone(),
                size(r.size),
            ]
        })
        .chain(templates.iter().map(|t| {
            vec![
                t.server.clone(),
                t.uri_template.clone(),
                t.name.clone(),
                t.mime_type.clone(),
                "template".to_owned(),
            ]
        }))
        .collect();
    align(&rows, &[16, 48, 24, 20], &[], " ")
}

/// `switchyard prompts`: per prompt `server name arguments` (a required
/// argument marked `*`), then its title or description.
pub fn prompts_table(prompts: &[pb::Prompt]) -> Vec<String> {
    let rows: Vec<Vec<String>> = prompts
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
            vec![
                p.server.clone(),
                p.name.clone(),
                args.join(","),
                about.to_owned(),
            ]
        })
        .collect();
    align(&rows, &[16, 28, 28], &[], " ")
}

/// The minimum widths of `servers tools`' columns.
const SERVER_TOOL_WIDTHS: [usize; 6] = [36, 24, 9, 9, 9, 9];

/// The legend under `servers tools`' table (and in its `--help`).
pub const SERVER_TOOLS_LEGEND: &str = "(hints: * set by an administrator (switchyard hints), ~ the spec's default (the server did not declare it), unmarked as the server declared it; policy or background (set): set by an administrator (switchyard policy))";

/// `switchyard servers tools`: a header, a line per tool (as
/// [`server_tool_line`]), then the legend of the markers
/// ([`SERVER_TOOLS_LEGEND`]).
pub fn server_tools_table(tools: &[pb::ServerTool]) -> Vec<String> {
    let header: Vec<String> = [
        "name",
        "title",
        "readOnly",
        "destruct",
        "idempot",
        "openWorld",
        "policy",
    ]
    .map(String::from)
    .to_vec();
    let rows: Vec<Vec<String>> = std::iter::once(header)
        .chain(tools.iter().map(server_tool_cells))
        .collect();
    let mut lines = align(&rows, &SERVER_TOOL_WIDTHS, &[], " ");
    lines.push(SERVER_TOOLS_LEGEND.to_owned());
    lines
}

/// `name title readOnly destructive idempotent openWorld policy`, each hint
/// as `value` with `*` for an override and `~` for the spec default.
pub fn server_tool_line(t: &pb::ServerTool) -> String {
    align(&[server_tool_cells(t)], &SERVER_TOOL_WIDTHS, &[], " ")
        .pop()
        .unwrap_or_default()
}

fn server_tool_cells(t: &pb::ServerTool) -> Vec<String> {
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
        // Only an administrator sets it.
        policy.push_str(" background=always (set)");
    }
    if !t.in_catalogue {
        policy.push_str(" [not in catalogue]");
    }
    vec![
        t.name.clone(),
        t.title.clone(),
        cell(h.read_only_hint, &src.read_only_hint),
        cell(h.destructive_hint, &src.destructive_hint),
        cell(h.idempotent_hint, &src.idempotent_hint),
        cell(h.open_world_hint, &src.open_world_hint),
        policy,
    ]
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
    let mut rows = vec![
        ["ID", "STATUS", "MODE", "TOOL", "SESSION", "AGE", "MESSAGE"]
            .map(String::from)
            .to_vec(),
    ];
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
        rows.push(vec![
            c.id.clone(),
            c.status.clone(),
            c.mode.clone(),
            shown_tool(c).to_owned(),
            if c.session_id.is_empty() {
                "-".to_owned()
            } else {
                c.session_id.clone()
            },
            age(now_ms - c.created_at_ms),
            message,
        ]);
    }
    align(&rows, &[36, 14, 4, 4, 32, 4], &[5], "  ")
}

/// `switchyard sessions list`: per session, its id and permission mode.
pub fn sessions_table(sessions: &[pb::Session]) -> Vec<String> {
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| vec![s.id.clone(), mode_name(s.permission_mode).to_owned()])
        .collect();
    align(&rows, &[], &[], "  ")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn server_tool(name: &str, title: &str) -> pb::ServerTool {
        pb::ServerTool {
            name: name.into(),
            upstream_name: name.into(),
            title: title.into(),
            hints: Some(pb::ToolHints {
                read_only_hint: true,
                ..Default::default()
            }),
            hint_sources: Some(pb::ToolHintSources {
                read_only_hint: "override".into(),
                destructive_hint: "default".into(),
                idempotent_hint: "declared".into(),
                open_world_hint: "default".into(),
            }),
            policy: "default".into(),
            in_catalogue: true,
            ..Default::default()
        }
    }

    /// The terminal column where `needle` starts on `line`.
    fn column_of(line: &str, needle: &str) -> usize {
        let at = line
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} in {line}"));
        display_width(&line[..at])
    }

    #[test]
    fn widths_count_terminal_columns() {
        assert_eq!(display_width("echo"), 4);
        assert_eq!(display_width("注文"), 4);
        assert_eq!(display_width("🚀x"), 3);
        // e + combining acute accent: one column.
        assert_eq!(display_width("e\u{301}"), 1);
        assert_eq!(display_width("ｆｕｌｌ"), 8);
    }

    #[test]
    fn long_and_wide_names_keep_columns_aligned() {
        let long = "x".repeat(60);
        let tools = [
            server_tool("echo", "Echo"),
            server_tool(&long, "Long"),
            server_tool("作成する", "注文"),
            server_tool("e\u{301}cho", "🚀 Rocket"),
        ];
        let lines = server_tools_table(&tools);
        assert_eq!(lines.len(), 1 + tools.len() + 1, "{lines:#?}");
        // Every line's title column starts at the same terminal column,
        // after the longest name and a space.
        let title_at = column_of(&lines[0], "title");
        assert_eq!(title_at, 61, "{lines:#?}");
        for (line, title) in
            lines[1..=tools.len()]
                .iter()
                .zip(["Echo", "Long", "注文", "🚀 Rocket"])
        {
            assert_eq!(column_of(line, title), title_at, "{lines:#?}");
        }
        // The hint columns align too: readOnly (an override) and policy.
        let read_only_at = column_of(&lines[0], "readOnly");
        let policy_at = column_of(&lines[0], "policy");
        for line in &lines[1..=tools.len()] {
            assert_eq!(column_of(line, "true*"), read_only_at, "{line}");
            assert_eq!(column_of(line, "default"), policy_at, "{line}");
            assert_eq!(line.trim_end(), line, "no trailing spaces");
        }
        // The legend explains the markers.
        let legend = lines.last().unwrap();
        assert!(legend.contains("* set by an administrator"), "{legend}");
        assert!(legend.contains("~ the spec's default"), "{legend}");
    }

    #[test]
    fn short_names_keep_the_usual_widths() {
        let line = server_tool_line(&server_tool("echo", "Echo"));
        assert_eq!(column_of(&line, "Echo"), 37, "{line}");
        let servers = [pb::ServerStatus {
            spec: Some(pb::ServerSpec {
                name: "orders".into(),
                ..Default::default()
            }),
            state: "up".into(),
            tool_count: 7,
            protocol_version: "2026-07-28".into(),
            ..Default::default()
        }];
        let line = servers_table(&servers).pop().unwrap();
        assert_eq!(column_of(&line, "up"), 25, "{line}");
        assert_eq!(column_of(&line, "tools=7"), 35, "{line}");
    }

    #[test]
    fn a_long_server_name_pushes_its_columns() {
        let server = |name: &str| pb::ServerStatus {
            spec: Some(pb::ServerSpec {
                name: name.into(),
                ..Default::default()
            }),
            state: "up".into(),
            ..Default::default()
        };
        let lines = servers_table(&[server("a"), server(&"サーバー".repeat(10))]);
        assert_eq!(column_of(&lines[0], "up"), 81, "{lines:#?}");
        assert_eq!(column_of(&lines[1], "up"), 81, "{lines:#?}");
        // A control character is escaped before measuring.
        let lines = tools_table(&[pb::Tool {
            name: "evil\u{1b}[2J".into(),
            title: "T".into(),
            ..Default::default()
        }]);
        assert!(lines[0].starts_with("evil\\u{1b}[2J"), "{lines:?}");
        assert_eq!(column_of(&lines[0], " T") + 1, 41, "{lines:?}");
    }

    #[test]
    fn background_ages_are_right_aligned() {
        let call = |id: &str, tool: &str, created: i64| BackgroundRecord {
            id: id.into(),
            status: "working".into(),
            mode: "task".into(),
            engine_tool: tool.into(),
            session_id: "s".into(),
            created_at_ms: created,
            ..Default::default()
        };
        let lines = background_table(
            &[call("a", "t", 0), call("b", &"長い".repeat(30), 5_000_000)],
            10_000_000,
        );
        let msg = column_of(&lines[0], "MESSAGE");
        // AGE ends two columns before MESSAGE on every line.
        assert_eq!(column_of(&lines[1], "2h") + 2 + 2, msg, "{lines:#?}");
        assert_eq!(column_of(&lines[2], "1h") + 2 + 2, msg, "{lines:#?}");
        assert_eq!(column_of(&lines[0], "AGE") + 3 + 2, msg, "{lines:#?}");
    }
}
