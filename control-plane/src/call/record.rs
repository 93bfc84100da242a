//! Step 7 of the call path: [`ToolCalled`], the one event of a finished
//! call. It writes the call's log line, its metrics
//! (`switchyard_control_plane_calls_total` by server and outcome,
//! `switchyard_control_plane_call_duration_seconds`, and the background
//! move count) and its audit record (`tool.called` or `tool.backgrounded`)
//! together, for every call that was routed or refused approval, whatever
//! its end: a result, an error, a timeout, a cancellation, or an engine that
//! went away (vector's `internal_events` pattern).
//!
//! [`ContentRequested`] is the same for an engine's stage E request to a
//! server (`resources/read`, `prompts/get`, `completion/complete`): its log
//! line, its metrics (reads, bytes read, prompt gets, completions by server
//! and outcome) and, for reads and prompt gets, its audit record
//! (`resource.read`, `resource.attached`, `prompt.retrieved`).

use super::error::CallError;
use crate::ControlPlane;
use crate::audit::{AuditHints, ContentAudit, ToolCallAudit};
use crate::interactions::ApprovalOutcome;
use crate::tools::ToolView;
use std::time::Instant;
use switchyard_proto::v1 as pb;

/// A finished call.
#[derive(Debug)]
pub struct ToolCalled<'a> {
    /// The engine's request.
    pub request: &'a pb::CallToolRequest,
    /// The server.
    pub server: &'a str,
    /// The tool's upstream name.
    pub tool: &'a str,
    /// Its hints and policy as decided.
    pub view: &'a ToolView,
    /// Whether the call needed an approval.
    pub approval_needed: bool,
    /// The approval's outcome; `None` when none was asked, or the call was
    /// cancelled while it waited.
    pub approval: Option<&'a ApprovalOutcome>,
    /// When the call started.
    pub started: Instant,
}

impl ToolCalled<'_> {
    /// The outcome label: `ok`, `backgrounded`, `not_approved`,
    /// `tool_error`, or the error's ([`CallError::outcome`]).
    pub fn outcome(&self, result: &Result<pb::CallToolResponse, CallError>) -> &'static str {
        match result {
            Ok(r) if r.background.is_some() => "backgrounded",
            Ok(_) if self.approval.is_some_and(|a| !a.is_approved()) => "not_approved",
            Ok(r) if r.is_error => "tool_error",
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        }
    }

    /// Logs, counts and audits the call that ended with `result`.
    pub fn emit(self, cp: &ControlPlane, result: &Result<pb::CallToolResponse, CallError>) {
        let outcome = self.outcome(result);
        let elapsed = self.started.elapsed();
        let (server, tool) = (self.server, self.tool);
        let moved = result.as_ref().ok().and_then(|r| r.background.as_ref());
        match (moved, result) {
            (Some(bg), _) => {
                cp.background.count_moved(server, &bg.mode);
                tracing::info!(id = %bg.id, %server, %tool, mode = %bg.mode, "call moved to the background");
            }
            (None, Err(e)) => {
                tracing::debug!(%server, %tool, outcome, error = %e, "tool call failed");
            }
            (None, Ok(_)) => tracing::debug!(%server, %tool, outcome, "tool called"),
        }
        cp.metrics.call(server, outcome, elapsed);
        let h = self.view.hints.to_pb();
        cp.audit.record_struct(&ToolCallAudit {
            kind: if moved.is_some() {
                "tool.backgrounded"
            } else {
                "tool.called"
            },
            session: self.request.session_id.clone(),
            run: self.request.run_id.clone(),
            call_id: self.request.call_id.clone(),
            server: server.to_owned(),
            tool: tool.to_owned(),
            outcome: outcome.to_owned(),
            policy: self.view.policy.as_str(),
            approval: match self.approval {
                None if self.approval_needed => "cancel",
                None => "not_needed",
                Some(ApprovalOutcome::Approved) => "approve",
                Some(ApprovalOutcome::Denied) => "deny",
                Some(ApprovalOutcome::TimedOut) => "timeout",
                Some(ApprovalOutcome::Cancelled(_)) => "cancel",
                Some(ApprovalOutcome::Failed(_)) => "failed",
            },
            duration_ms: elapsed.as_millis() as u64,
            hints: AuditHints {
                read_only_hint: h.read_only_hint,
                destructive_hint: h.destructive_hint,
                idempotent_hint: h.idempotent_hint,
                open_world_hint: h.open_world_hint,
            },
            validation_errors: result
                .as_ref()
                .map(|r| r.validation_errors.clone())
                .unwrap_or_default(),
        });
    }
}

/// A finished stage E request to a server.
#[derive(Debug)]
pub struct ContentRequested<'a> {
    /// `resources/read`, `prompts/get` or `completion/complete`.
    pub method: &'static str,
    /// The read was an AttachResource.
    pub attach: bool,
    /// Session and run; empty without.
    pub session: &'a str,
    /// The engine run.
    pub run: &'a str,
    /// The server.
    pub server: &'a str,
    /// The URI read, or the prompt's (or completed reference's) name.
    pub target: &'a str,
    /// When the request started.
    pub started: Instant,
}

/// A stage E request being answered: [`Recording::finish`] records its
/// end; dropped unfinished (the engine went away, its deadline passed),
/// it records the request as `cancelled`, so an abandoned read is still
/// counted and audited.
#[derive(Debug)]
pub struct Recording<'a> {
    event: Option<ContentRequested<'a>>,
    cp: &'a ControlPlane,
}

impl Recording<'_> {
    /// Records the end `result` (`bytes`: contents read).
    pub fn finish<T>(mut self, result: &Result<T, CallError>, bytes: u64) {
        if let Some(event) = self.event.take() {
            event.emit(self.cp, result, bytes);
        }
    }
}

impl Drop for Recording<'_> {
    fn drop(&mut self) {
        if let Some(event) = self.event.take() {
            let gone: Result<(), CallError> = Err(CallError::cancelled(
                "the engine went away before the answer",
            ));
            event.emit(self.cp, &gone, 0);
        }
    }
}

impl<'a> ContentRequested<'a> {
    /// Starts recording the request: see [`Recording`].
    pub fn start(self, cp: &'a ControlPlane) -> Recording<'a> {
        Recording {
            event: Some(self),
            cp,
        }
    }
}

impl ContentRequested<'_> {
    /// The outcome label: `ok`, `not_found`, `invalid_argument`,
    /// `unimplemented`, or the error's ([`CallError::outcome`]).
    pub fn outcome<T>(result: &Result<T, CallError>) -> &'static str {
        match result {
            Ok(_) => "ok",
            Err(e) => match e.kind {
                super::Kind::NotFound => "not_found",
                super::Kind::InvalidArgument => "invalid_argument",
                super::Kind::Unimplemented => "unimplemented",
                _ => e.outcome(),
            },
        }
    }

    /// Logs, counts and audits the request that ended with `result`;
    /// `bytes`: the contents read (reads only).
    pub fn emit<T>(self, cp: &ControlPlane, result: &Result<T, CallError>, bytes: u64) {
        let outcome = Self::outcome(result);
        let elapsed = self.started.elapsed();
        let (method, server) = (self.method, self.server);
        match result {
            Ok(_) => tracing::debug!(%method, %server, outcome, bytes, "request answered"),
            Err(e) => tracing::debug!(%method, %server, outcome, error = %e, "request failed"),
        }
        cp.metrics.content_request(method, server, outcome, bytes);
        let kind = match (method, self.attach) {
            ("resources/read", false) => "resource.read",
            ("resources/read", true) => "resource.attached",
            ("prompts/get", _) => "prompt.retrieved",
            _ => return,
        };
        cp.audit.record_struct(&ContentAudit {
            kind,
            session: self.session.to_owned(),
            run: self.run.to_owned(),
            server: server.to_owned(),
            target: if method == "resources/read" {
                crate::audit::audited_uri(self.target)
            } else {
                self.target.to_owned()
            },
            outcome: outcome.to_owned(),
            bytes,
            duration_ms: elapsed.as_millis() as u64,
        });
    }
}
