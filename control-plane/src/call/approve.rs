//! Step 5 of the call path: the user's approval, for a tool whose policy
//! asks for it (stage A `confirm`, or `ask` mode for a tool that is not
//! read-only). The question is an `approval` interaction of the session
//! (stage C); its wait is bounded by `limits.interactionTimeoutSec`, not by
//! the call's timeout, which starts when the call is routed.

use crate::ControlPlane;
use crate::interactions::ApprovalOutcome;
use serde_json::Value;
use switchyard_proto::v1 as pb;

/// Asks session `session`'s user to approve the call of `tool` on
/// `server` with `arguments_json` (shown on the card), and waits for the
/// answer.
pub async fn approve(
    cp: &ControlPlane,
    session: &str,
    run_id: &str,
    server: &str,
    tool: &str,
    arguments_json: &str,
) -> ApprovalOutcome {
    // Boxed: rare, and large.
    Box::pin(
        cp.interactions
            .request_approval(session, run_id, server, tool, arguments_json, ""),
    )
    .await
}

/// The sidecar-shaped answer of a call that was not approved: the "not
/// approved" result (the upstream was never called).
pub fn not_approved(result: Value) -> pb::SidecarCallResponse {
    pb::SidecarCallResponse {
        result_json: result.to_string(),
        model_text: model_text(&result),
        is_error: result.get("isError") == Some(&Value::Bool(true)),
        ..Default::default()
    }
}

/// The text an engine's model reads: the text items of `content`, in order.
pub fn model_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|c| c.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}
