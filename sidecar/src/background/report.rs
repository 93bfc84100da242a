//! Reports to the control plane: every background call record goes to
//! `SidecarRegistry.UpdateBackgroundCall` ([`BackgroundRegistry`], an
//! idempotent upsert by id that answers the stored record), retried with
//! backoff until acknowledged (the control client reconnects, reaching
//! another replica); registering a call about to move gives up after
//! `REGISTER_LIMIT` (30 s). A finished call's record carries the processed
//! result (`Tasks::terminal_record`, the same result processing as a
//! foreground call's).

use super::protocol::status;
use super::{Finish, Tasks};
use crate::interactions::CallContext;
use futures::future::BoxFuture;
use serde_json::Value;
use std::time::Duration;
use switchyard_common::time::now_ms;
use switchyard_common::tls::AuthChannel;
use switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient;
use switchyard_proto::v1::{BackgroundCall, BackgroundResult, UpdateBackgroundCallRequest};
use tokio::time::Instant;
use tonic::Status;

/// First delay between attempts of one report to the control plane.
const REPORT_MIN_BACKOFF: Duration = Duration::from_millis(200);

/// Largest delay between attempts of one report.
const REPORT_MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Bound on one `UpdateBackgroundCall` RPC.
const REPORT_RPC_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a call about to move keeps trying to register before it fails.
const REGISTER_LIMIT: Duration = Duration::from_secs(30);

/// Where background call records go: the control plane's
/// `SidecarRegistry.UpdateBackgroundCall` (an idempotent upsert by id that
/// answers the stored record).
pub trait BackgroundRegistry: Send + Sync + std::fmt::Debug {
    /// Stores `call` (the whole record); answers the record as stored.
    fn update(&self, call: BackgroundCall) -> BoxFuture<'static, Result<BackgroundCall, Status>>;
}

/// [`BackgroundRegistry`] over gRPC.
#[derive(Debug, Clone)]
pub struct GrpcRegistry {
    client: SidecarRegistryClient<AuthChannel>,
}

impl GrpcRegistry {
    /// Reports through `client` (a lazily connected channel reconnects
    /// after a replica goes away).
    pub fn new(client: SidecarRegistryClient<AuthChannel>) -> Self {
        GrpcRegistry { client }
    }
}

impl BackgroundRegistry for GrpcRegistry {
    fn update(&self, call: BackgroundCall) -> BoxFuture<'static, Result<BackgroundCall, Status>> {
        let mut client = self.client.clone();
        Box::pin(async move {
            let request = UpdateBackgroundCallRequest { call: Some(call) };
            match tokio::time::timeout(REPORT_RPC_TIMEOUT, client.update_background_call(request))
                .await
            {
                Ok(r) => r.map(tonic::Response::into_inner),
                Err(_) => Err(Status::deadline_exceeded(
                    "UpdateBackgroundCall got no answer in time",
                )),
            }
        })
    }
}

impl Tasks {
    /// Reports `record`, retrying with backoff until the control plane
    /// acknowledges it (or for [`REGISTER_LIMIT`] when `bounded`). `None`:
    /// no registry, a permanent refusal, or the bound passed.
    async fn report_with(&self, record: &BackgroundCall, bounded: bool) -> Option<BackgroundCall> {
        let registry = self.inner.config.registry.as_ref()?;
        let started = Instant::now();
        let mut backoff = REPORT_MIN_BACKOFF;
        loop {
            match registry.update(record.clone()).await {
                Ok(stored) => return Some(stored),
                Err(status)
                    if !matches!(
                        status.code(),
                        tonic::Code::InvalidArgument
                            | tonic::Code::NotFound
                            | tonic::Code::PermissionDenied
                            | tonic::Code::Unauthenticated
                            | tonic::Code::Unimplemented
                    ) =>
                {
                    if bounded && started.elapsed() + backoff > REGISTER_LIMIT {
                        tracing::warn!(id = %record.id, error = %status.message(), "UpdateBackgroundCall failed; giving up");
                        return None;
                    }
                    tracing::warn!(id = %record.id, code = ?status.code(), error = %status.message(), retry_in_ms = backoff.as_millis() as u64, "UpdateBackgroundCall failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(REPORT_MAX_BACKOFF);
                }
                Err(status) => {
                    tracing::warn!(id = %record.id, code = ?status.code(), error = %status.message(), "the control plane refused the background call record");
                    return None;
                }
            }
        }
    }

    /// Registers `record` before the call moves: [`Tasks::report_with`],
    /// bounded.
    pub(super) async fn register(&self, record: BackgroundCall) -> Option<BackgroundCall> {
        self.report_with(&record, true).await
    }

    /// Reports `record` until the control plane acknowledges it.
    pub(super) async fn report(&self, record: &BackgroundCall) -> Option<BackgroundCall> {
        self.report_with(record, false).await
    }

    /// `record` finished as `finish`: the terminal record, with the
    /// processed result of a completed call.
    pub(super) fn terminal_record(
        &self,
        mut record: BackgroundCall,
        finish: Finish,
        context: &CallContext,
    ) -> BackgroundCall {
        let now = now_ms();
        record.updated_at_ms = now;
        record.finished_at_ms = now;
        record.poll_after_ms = 0;
        match finish {
            Finish::Completed(result) => {
                match self
                    .inner
                    .responder
                    .respond(&record.server, &record.tool, context, &result)
                {
                    Ok(r) => {
                        // A message of an earlier state ("needs input",
                        // a progress step) does not describe the result.
                        if record.status != status::COMPLETED {
                            record.status_message.clear();
                        }
                        record.status = status::COMPLETED.into();
                        record.result = Some(BackgroundResult {
                            result_json: r.result_json,
                            is_error: result.get("isError") == Some(&Value::Bool(true)),
                            model_text: r.model_text,
                            structured_content_json: r.structured_content_json,
                            attachments: r.attachments,
                            validation_errors: r.validation_errors,
                        });
                    }
                    Err(e) => {
                        record.status = status::FAILED.into();
                        record.status_message = e.to_string();
                    }
                }
            }
            Finish::Failed { message, error } => {
                record.status = status::FAILED.into();
                record.status_message = message;
                record.error_json = error.map(|e| e.to_string()).unwrap_or_default();
            }
            Finish::Cancelled(message) => {
                record.status = status::CANCELLED.into();
                record.status_message = message;
            }
            Finish::NotFound(message) => {
                record.status = status::FAILED.into();
                record.status_message = format!("task not found: {message}");
                // An adopter's "not found" is not taken while the task's
                // creator is registered: the control plane gives the call
                // back to it.
                record.task_not_found = true;
            }
        }
        record
    }
}
