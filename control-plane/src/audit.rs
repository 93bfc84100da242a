//! The control plane's audit records: one for every interaction outcome,
//! every engine tool call (`tool.called`) and every console login and
//! logout (`console.login`, `console.logout`, with the admin's name), written through the one sink and
//! format of `switchyard_common::audit` (to the file named by `[audit] path`,
//! or to the log under the tracing target `switchyard::audit`).
//!
//! Audit records never hold what the user typed into a form, nor a URL's
//! path or query, nor a call's arguments or result: only who asked (session, run, server, tool), what kind of
//! interaction it was, how it ended and why. Audit records are not kept in
//! the store.

use serde::Serialize;

pub use switchyard_common::audit::{Audit, AuditHints};

/// One audit record about an interaction.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InteractionAudit {
    /// `interaction.resolved` (the outcome the server or engine got) or
    /// `interaction.completed` (a URL interaction's server said it is done).
    pub kind: &'static str,
    /// The session.
    pub session: String,
    /// The engine run; empty outside a call.
    pub run: String,
    /// The server.
    pub server: String,
    /// The tool (may be empty).
    pub tool: String,
    /// The interaction id.
    pub interaction: String,
    /// `form`, `url` or `approval`.
    pub interaction_kind: String,
    /// `accept`, `decline`, `cancel`, `approve`, `deny` or `timeout`.
    pub outcome: String,
    /// Why it ended: `answered`, `timeout`, `session_deleted`,
    /// `call_ended`, `completed`, `not_completed`.
    pub reason: String,
    /// url: the URL's host (never its path or query).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub url_domain: String,
    /// Milliseconds from creation to this outcome.
    pub waited_ms: i64,
}

/// One audit record about an engine's tool call (`tool.called`). Never the
/// arguments nor the result.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallAudit {
    /// `tool.called`, or `tool.backgrounded` for a call that moved to the
    /// background (stage B).
    pub kind: &'static str,
    /// The session; empty for a call without one.
    pub session: String,
    /// The engine run; may be empty.
    pub run: String,
    /// The engine's call id; may be empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub call_id: String,
    /// The server.
    pub server: String,
    /// The tool's name on the server.
    pub tool: String,
    /// `ok`, `tool_error`, `not_approved`, `unavailable`, `timeout`,
    /// `cancelled`, `rpc_error` or `error`.
    pub outcome: String,
    /// The effective policy: `default` or `confirm`.
    pub policy: &'static str,
    /// Approval: `not_needed`, `approve`, `deny`, `timeout`, `cancel` or
    /// `failed`.
    pub approval: &'static str,
    /// Milliseconds from the engine's request to the answer.
    pub duration_ms: u64,
    /// Effective hints (openWorldHint included).
    pub hints: AuditHints,
    /// `outputSchema` validation errors the sidecar reported.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub validation_errors: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn audited_uris_keep_no_credentials() {
        assert_eq!(
            audited_uri("https://alice:s3cr3t@example.com/x;jsessionid=S/doc?token=abc#f"),
            "https://example.com/x/doc"
        );
        assert_eq!(
            audited_uri("orders://invoices/INV-1.pdf"),
            "orders://invoices/INV-1.pdf"
        );
        assert_eq!(audited_uri("mailto:a@b.c"), "mailto:a@b.c");
        assert_eq!(audited_uri(&"é".repeat(2000)).len(), 1024);
    }

    #[test]
    fn file_sink_writes_json_lines_without_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/audit.jsonl");
        let audit = Audit::to_file(&path).unwrap();
        let rec = InteractionAudit {
            kind: "interaction.resolved",
            session: "s".into(),
            run: "r".into(),
            server: "orders".into(),
            tool: "book".into(),
            interaction: "i".into(),
            interaction_kind: "form".into(),
            outcome: "accept".into(),
            reason: "answered".into(),
            url_domain: String::new(),
            waited_ms: 5,
        };
        audit.record_struct(&rec);
        audit.record_struct(&rec);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["kind"], "interaction.resolved");
        assert_eq!(lines[0]["interactionKind"], "form");
        assert!(lines[0]["ts"].as_str().unwrap().ends_with('Z'));
        assert!(lines[0].get("content").is_none());
        assert!(lines[0].get("urlDomain").is_none());
        audit.record_struct(&ToolCallAudit {
            kind: "tool.called",
            session: "s".into(),
            run: String::new(),
            call_id: String::new(),
            server: "orders".into(),
            tool: "create_order".into(),
            outcome: "ok".into(),
            policy: "default",
            approval: "not_needed",
            duration_ms: 3,
            hints: AuditHints {
                read_only_hint: false,
                destructive_hint: false,
                idempotent_hint: false,
                open_world_hint: false,
            },
            validation_errors: vec![],
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(last["kind"], "tool.called");
        assert_eq!(last["hints"]["openWorldHint"], false);
        assert!(last.get("arguments").is_none() && last.get("callId").is_none());
    }
}

/// One audit record about an engine's stage E request: `resource.read`,
/// `resource.attached` or `prompt.retrieved`. Never the contents, the
/// arguments, nor a URI's query or fragment.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContentAudit {
    /// The event.
    pub kind: &'static str,
    /// The session; empty without one.
    pub session: String,
    /// The engine run; may be empty.
    pub run: String,
    /// The server.
    pub server: String,
    /// reads: the URI without its query and fragment; prompts: the name.
    pub target: String,
    /// `ok`, or the error's outcome (`not_found`, `unavailable`...).
    pub outcome: String,
    /// Bytes of contents read (reads only).
    #[serde(skip_serializing_if = "is_zero")]
    pub bytes: u64,
    /// Milliseconds from the request to the answer.
    pub duration_ms: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `uri` as audited: without its userinfo (`user:password@`), path
/// parameters (`;jsessionid=...`), query and fragment, and at most 1,024
/// bytes (cut on a character boundary).
pub fn audited_uri(uri: &str) -> String {
    let end = uri.find(['?', '#']).unwrap_or(uri.len());
    let mut uri = uri[..end].to_owned();
    // `scheme://user:password@host/...`: the userinfo goes.
    if let Some(start) = uri.find("://").map(|i| i + 3) {
        let authority_end = uri[start..].find('/').map_or(uri.len(), |i| start + i);
        if let Some(at) = uri[start..authority_end].rfind('@') {
            uri.replace_range(start..start + at + 1, "");
        }
    }
    // Path parameters: every `;...` up to the next `/`.
    let mut out = String::with_capacity(uri.len());
    let mut skipping = false;
    for c in uri.chars() {
        match c {
            ';' => skipping = true,
            '/' => {
                skipping = false;
                out.push(c);
            }
            c if !skipping => out.push(c),
            _ => {}
        }
    }
    let mut cut = out.len().min(1024);
    while !out.is_char_boundary(cut) {
        cut -= 1;
    }
    out.truncate(cut);
    out
}
