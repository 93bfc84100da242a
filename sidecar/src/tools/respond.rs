//! The last steps of a call, shared by foreground calls and background
//! calls ([`crate::background`]): a raw `CallToolResult` is processed
//! ([`super::results::process`]: model text, attachments, structured
//! content), validated against the tool's `outputSchema` (the
//! [`Catalogue`]'s validators; an invalid result is still delivered, with
//! its validation errors), written to the audit log as a `tool.result`
//! record (docs/sidecar.md, "Audit"), and turned into the call's response.

use super::catalogue::Catalogue;
use super::results::{self, ResultLimits, Validation};
use crate::error::CallError;
use crate::interactions::CallContext;
use serde_json::Value;
use switchyard_common::audit::Audit;
use switchyard_proto::v1::{Attachment, SidecarCallResponse};

/// Processes raw results: the stage A result processing
/// ([`crate::tools::results`]), outputSchema validation against the
/// [`Catalogue`]'s validators, and the `tool.result` audit record. Shared
/// by foreground calls and background calls ([`crate::background`]).
#[derive(Debug, Clone)]
pub struct Responder {
    /// The server's catalogue (validators, hints, tool definitions).
    pub catalogue: Catalogue,
    /// Result size limits.
    pub limits: ResultLimits,
    /// Where `tool.result` audit records go.
    pub audit: Audit,
}

impl Default for Responder {
    fn default() -> Self {
        Responder {
            catalogue: Catalogue::new(),
            limits: ResultLimits::default(),
            audit: Audit::to_log(),
        }
    }
}

impl Responder {
    /// The response for a raw result of `tool` called in `context`, and the
    /// audit record. Errors: [`CallError::Internal`] when the result cannot
    /// be serialised.
    pub fn respond(
        &self,
        server: &str,
        tool: &str,
        context: &CallContext,
        result: &Value,
    ) -> Result<SidecarCallResponse, CallError> {
        let result_json = serde_json::to_string(result)
            .map_err(|e| CallError::internal(format!("cannot serialise the result: {e}")))?;
        let processed = results::process(result, &self.limits);
        let validation = self.catalogue.validators().validate(tool, &processed);
        if let Validation::Invalid(errors) = &validation {
            tracing::warn!(%server, %tool, ?errors, "structuredContent does not match the tool's outputSchema; delivered anyway");
        }
        let validation_errors = validation.errors();
        if self.audit.enabled() {
            let hints = self.catalogue.hints(tool);
            self.audit.record_struct(&ToolResultAudit {
                event: "tool.result",
                server,
                tool,
                session_id: &context.session_id,
                run_id: &context.run_id,
                is_error: processed.is_error,
                validated: validation != Validation::NotValidated,
                validation_errors: &validation_errors,
                hints: hints.map(|h| AuditHints {
                    read_only_hint: h.read_only_hint,
                    destructive_hint: h.destructive_hint,
                    idempotent_hint: h.idempotent_hint,
                    open_world_hint: h.open_world_hint,
                }),
                structured_content: processed
                    .structured
                    .as_ref()
                    .map(|s| results::audit_structured(s, results::AUDIT_STRUCTURED_MAX)),
            });
        }
        Ok(SidecarCallResponse {
            result_json,
            model_text: processed.model_text,
            attachments: processed
                .attachments
                .into_iter()
                .map(|a| Attachment {
                    size_bytes: a.data.len() as u64,
                    name: a.name,
                    mime_type: a.mime_type,
                    data: a.data,
                    uri: a.uri.unwrap_or_default(),
                })
                .collect(),
            structured_content_json: processed
                .structured
                .map(|s| s.to_string())
                .unwrap_or_default(),
            validation_errors,
            background: None,
            is_error: processed.is_error,
        })
    }
}

/// The `tool.result` audit record (docs/sidecar.md, "Audit").
#[derive(serde::Serialize)]
struct ToolResultAudit<'a> {
    event: &'static str,
    server: &'a str,
    tool: &'a str,
    session_id: &'a str,
    run_id: &'a str,
    #[serde(rename = "isError")]
    is_error: bool,
    validated: bool,
    validation_errors: &'a [String],
    hints: Option<AuditHints>,
    #[serde(rename = "structuredContent")]
    structured_content: Option<Value>,
}

/// The effective hints in a `tool.result` record.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct AuditHints {
    read_only_hint: bool,
    destructive_hint: bool,
    idempotent_hint: bool,
    open_world_hint: bool,
}
