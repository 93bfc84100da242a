//! The last two steps of a call ([`crate::call`]), shared by foreground
//! calls and background calls ([`crate::background`]): **results**, a raw
//! `CallToolResult` processed ([`super::results::process`]: model text,
//! attachments, structured content) and validated against the tool's
//! `outputSchema` (the [`Catalogue`]'s validators; an invalid result is
//! still delivered, with its validation errors); then **respond**, the
//! `tool.result` audit record (docs/sidecar.md, "Audit") and the call's
//! response.

use super::catalogue::Catalogue;
use super::results::{self, Processed, ResultLimits, Validation};
use crate::error::CallError;
use crate::interactions::CallContext;
use serde_json::Value;
use switchyard_common::audit::{Audit, AuditHints};
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

/// A raw result processed and validated ([`Responder::results`]), ready to
/// be recorded and answered ([`Responder::response`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Results {
    /// The raw `CallToolResult` as JSON text, exactly as the server sent it.
    pub result_json: String,
    /// What the model reads, the attachments and the structured content.
    pub processed: Processed,
    /// How the structured content held up against the tool's
    /// `outputSchema`.
    pub validation: Validation,
}

impl Responder {
    /// Step 4 of a call: processes `result`, the raw `CallToolResult` of
    /// `server`'s `tool` ([`super::results::process`]), and validates its
    /// structured content against the tool's `outputSchema` (an invalid
    /// result is still delivered, with a warning). Errors:
    /// [`CallError::Internal`] when the result cannot be serialised.
    pub fn results(&self, server: &str, tool: &str, result: &Value) -> Result<Results, CallError> {
        let result_json = serde_json::to_string(result)
            .map_err(|e| CallError::internal(format!("cannot serialise the result: {e}")))?;
        let processed = results::process(result, &self.limits);
        let validation = self.catalogue.validators().validate(tool, &processed);
        if let Validation::Invalid(errors) = &validation {
            tracing::warn!(%server, %tool, ?errors, "structuredContent does not match the tool's outputSchema; delivered anyway");
        }
        Ok(Results {
            result_json,
            processed,
            validation,
        })
    }

    /// Step 5 of a call: writes the `tool.result` audit record of `tool`
    /// called in `context` and returns the call's response.
    pub fn response(
        &self,
        server: &str,
        tool: &str,
        context: &CallContext,
        results: Results,
    ) -> SidecarCallResponse {
        let Results {
            result_json,
            processed,
            validation,
        } = results;
        let validation_errors = validation.errors();
        if self.audit.enabled() {
            let hints = self.catalogue.hints(tool);
            self.audit.record_struct(&ToolResultAudit {
                kind: "tool.result",
                session: &context.session_id,
                run: &context.run_id,
                server,
                tool,
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
        SidecarCallResponse {
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
        }
    }

    /// Steps 4 and 5 at once ([`Responder::results`], then
    /// [`Responder::response`]), as a background call's end needs them.
    pub fn respond(
        &self,
        server: &str,
        tool: &str,
        context: &CallContext,
        result: &Value,
    ) -> Result<SidecarCallResponse, CallError> {
        let results = self.results(server, tool, result)?;
        Ok(self.response(server, tool, context, results))
    }
}

/// The `tool.result` audit record (docs/sidecar.md, "Audit").
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolResultAudit<'a> {
    kind: &'static str,
    session: &'a str,
    run: &'a str,
    server: &'a str,
    tool: &'a str,
    is_error: bool,
    validated: bool,
    validation_errors: &'a [String],
    hints: Option<AuditHints>,
    structured_content: Option<Value>,
}
