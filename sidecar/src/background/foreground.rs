//! A call planned as an MCP task ([`super::Plan::Task`]): the task is
//! created with the `tools/call` (augmented for its era, `ttl` = the
//! background call's maximum duration; stage A's [`RetrySafe`] applies),
//! then polled in the foreground (`Tasks::look` at the clamped interval)
//! until its foreground window ends. A task done by then is answered like
//! a normal call (the same result processing). Not done in time, a call
//! that may move is registered with the control plane (status, this
//! sidecar's id, poll fields, the `CreateTaskResult`'s
//! `io.modelcontextprotocol/model-immediate-response`), handed to the
//! background poller and answered with `background` set; one that may not
//! is cancelled (`tasks/cancel`) and fails with `DEADLINE_EXCEEDED`. A
//! foreground call dropped by its client cancels its task too (best
//! effort).
//!
//! [`RetrySafe`]: crate::tools::retry::RetrySafe

use super::poller::{Followed, Look, Polled, clamp_poll_interval};
use super::protocol::{
    MAX_TASK_ID_BYTES, augment, cancel_task, created_task, is_not_found, protocol_version, status,
};
use super::{Finish, Initiators, TaskCall, Tasks, moved};
use crate::error::CallError;
use crate::upstream::{Era, Upstream, UpstreamError};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;
use switchyard_common::time::now_ms;
use switchyard_mcp::meta;
use switchyard_proto::v1::SidecarCallResponse;
use tokio::time::Instant;

/// Cancels a foreground task when the call is dropped before it finished
/// or moved.
struct CancelGuard {
    armed: Option<(Upstream, Era, String)>,
    initiators: Arc<Initiators>,
    /// Sends the `tasks/cancel`, tracked for the shutdown.
    tasks: Tasks,
}

impl CancelGuard {
    fn disarm(&mut self) {
        self.armed = None;
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        let Some((upstream, era, task_id)) = self.armed.take() else {
            return;
        };
        self.initiators.remove(&task_id);
        if tokio::runtime::Handle::try_current().is_ok() {
            self.tasks.spawn_cancel(async move {
                tracing::info!(server = %upstream.name(), task = %task_id, "the foreground call ended before its task; cancelling it");
                if let Err(e) = cancel_task(&upstream, era, &task_id).await {
                    tracing::info!(server = %upstream.name(), task = %task_id, error = %e, "tasks/cancel failed");
                }
            });
        }
    }
}

impl Tasks {
    /// Runs `call` as a task in `era` (see the module docs).
    pub(super) async fn call_task(
        &self,
        era: Era,
        call: TaskCall,
    ) -> Result<SidecarCallResponse, CallError> {
        let TaskCall {
            lease,
            params,
            context,
            policy,
            started,
            deadline: call_deadline,
            retry,
        } = call;
        let upstream = lease.upstream().clone();
        let server = upstream.name().to_owned();
        let tool = context.tool.clone();
        let created_at_ms = now_ms();
        let ttl = policy
            .as_ref()
            .map(|p| p.max_duration_ms)
            .filter(|&m| m > 0);
        let params = augment(era, params, ttl);
        let can_move = self.inner.config.registry.is_some();
        let window = Self::window(policy.as_ref(), call_deadline, can_move, started);
        let deadline = window.map(|w| w.at());
        // Creating the task is bounded by the foreground window only when
        // the call cannot move (else by the call's deadline): a call moving
        // at once (`auto_after_ms` 0) still needs its task first.
        let movable = policy.as_ref().is_some_and(|p| p.allowed) && can_move;
        let create_deadline = if movable {
            call_deadline.map(|d| d.at())
        } else {
            deadline
        };
        let create = retry.call_tool(&upstream, params, &context);
        let created = match create_deadline {
            Some(d) => match tokio::time::timeout_at(d, create).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(Self::limit_error(
                        &server,
                        &tool,
                        policy.as_ref(),
                        window.map(|w| w.budget()).unwrap_or_default(),
                    ));
                }
            },
            None => create.await,
        }?;
        let state = match created_task(&created) {
            None => {
                return self
                    .inner
                    .responder
                    .respond(&server, &tool, &context, &created);
            }
            Some(Ok(state)) => state,
            Some(Err(e)) => {
                // A task the answer does name is not left running.
                let named = created
                    .get("task")
                    .unwrap_or(&created)
                    .get("taskId")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty() && id.len() <= MAX_TASK_ID_BYTES)
                    .map(str::to_owned);
                if let Some(task_id) = named {
                    let upstream = upstream.clone();
                    self.spawn_cancel(async move {
                        let _ = cancel_task(&upstream, era, &task_id).await;
                    });
                }
                return Err(UpstreamError::protocol(
                    &server,
                    format!("tools/call {tool}: bad CreateTaskResult: {e}"),
                )
                .into());
            }
        };
        let immediate = created
            .get("_meta")
            .and_then(|m| m.get(meta::IMMEDIATE_RESPONSE))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        tracing::info!(%server, %tool, task = %state.task_id, status = %state.status, "task created");
        self.initiators().set(&state.task_id, context.clone());
        let mut guard = CancelGuard {
            armed: Some((upstream.clone(), era, state.task_id.clone())),
            initiators: self.initiators().clone(),
            tasks: self.clone(),
        };
        let mut task = Followed {
            upstream: upstream.clone(),
            era,
            state,
            context,
            answered: HashSet::new(),
        };
        // A caller that takes tasks gets this one now: no foreground
        // polling (the task's questions are then asked from the
        // background, where no window cuts them short), unless it is over
        // already.
        let moves_now = policy.as_ref().is_some_and(|p| p.move_when_task)
            && movable
            && !status::is_terminal(&task.state.status);
        // Foreground polling.
        loop {
            if moves_now {
                break;
            }
            match self.look(&mut task, deadline).await {
                Ok(Look::Done(finish)) => {
                    guard.disarm();
                    self.initiators().remove(&task.state.task_id);
                    let task_id = task.state.task_id;
                    return match finish {
                        Finish::Completed(result) => {
                            self.inner
                                .responder
                                .respond(&server, &tool, &task.context, &result)
                        }
                        Finish::Failed { message, error } => Err(CallError::TaskFailed {
                            server,
                            tool,
                            task_id,
                            message,
                            error,
                        }),
                        Finish::Cancelled(message) => Err(CallError::TaskCancelled {
                            server,
                            tool,
                            task_id,
                            message,
                        }),
                        Finish::NotFound(detail) => Err(CallError::TaskNotFound {
                            server,
                            tool,
                            task_id,
                            detail,
                        }),
                    };
                }
                Ok(Look::Running) => {}
                Err(e) => {
                    tracing::info!(%server, task = %task.state.task_id, error = %e, "polling the task failed; retrying at the next poll");
                }
            }
            let interval =
                clamp_poll_interval(task.state.poll_interval_ms, self.settings().poll_min);
            let next = Instant::now() + interval;
            match deadline {
                Some(d) if next >= d => {
                    tokio::time::sleep_until(d).await;
                    break;
                }
                _ => tokio::time::sleep_until(next).await,
            }
            if let Err(e) = self.refresh(&mut task).await {
                if matches!(e, UpstreamError::MessageTooLarge { .. }) {
                    // `guard` cancels the task: its state will not shrink.
                    self.initiators().remove(&task.state.task_id);
                    return Err(e.into());
                }
                if is_not_found(&e) {
                    guard.disarm();
                    self.initiators().remove(&task.state.task_id);
                    return Err(CallError::TaskNotFound {
                        server,
                        tool,
                        task_id: task.state.task_id,
                        detail: e.to_string(),
                    });
                }
                tracing::info!(%server, task = %task.state.task_id, error = %e, "tasks/get failed; retrying at the next poll");
            }
        }
        // The foreground window is over.
        let window = window.map(|w| w.budget()).unwrap_or_default();
        let Some(policy) = policy.clone().filter(|_| movable) else {
            // `guard` cancels the task.
            return Err(Self::limit_error(&server, &tool, policy.as_ref(), window));
        };
        // Move to the background.
        let interval = clamp_poll_interval(task.state.poll_interval_ms, self.settings().poll_min);
        let mut record = self.moving_record(
            &policy,
            &server,
            &tool,
            &task.context,
            "task",
            created_at_ms,
        );
        record.task_id = task.state.task_id.clone();
        if !status::is_terminal(&task.state.status) {
            record.status = task.state.status.clone();
        }
        record.status_message = task.state.status_message.clone().unwrap_or_default();
        record.poll_after_ms = record.updated_at_ms + interval.as_millis() as i64;
        record.poll_interval_ms = interval.as_millis() as u64;
        record.immediate_response = immediate;
        record.protocol_version = protocol_version(&upstream, era);
        // From here the move completes even if the engine's call goes away
        // meanwhile: registered records are always polled.
        guard.disarm();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let this = self.clone();
        tokio::spawn(async move {
            let Some(stored) = this.register(record.clone()).await else {
                this.initiators().remove(&task.state.task_id);
                let _ = task.cancel().await;
                let _ = tx.send(Err(CallError::NotMoved { server, tool }));
                return;
            };
            tracing::info!(%server, %tool, task = %task.state.task_id, id = %record.id, "moved to the background");
            task.context.run_id.clear();
            this.initiators()
                .set(&task.state.task_id, task.context.clone());
            this.start_poller(Polled {
                record,
                lease,
                task,
                first: Instant::now() + interval,
                adopted: false,
            });
            let _ = tx.send(Ok(stored));
        });
        let stored = rx
            .await
            .map_err(|_| CallError::internal("moving the call to the background failed"))??;
        Ok(moved(stored))
    }
}
