//! Wait mode ([`super::Plan::Wait`]): a call that may move to the
//! background, of a tool without task support, is held. The `tools/call`
//! runs here during its foreground window (most calls end within it; a
//! zero window, `background = always`, moves at once); one that outlives
//! the window moves into its own tokio task, is registered with the
//! control plane (mode `wait`) and answered as moved; its end is reported
//! (the processed result, or failed). It is lost when the sidecar restarts
//! (the control plane fails it, [`Tasks::adopt`]); one still held when
//! the sidecar stops fails saying so, not with what the server answered
//! as its connection closed. The held request is
//! bounded by the server's `request_timeout_sec` like any, and by the
//! background call's maximum duration. A retry-safe call whose server
//! exits is sent again once, in the foreground window or after it moved
//! (stage A's [`RetrySafe`]).
//!
//! [`RetrySafe`]: crate::tools::retry::RetrySafe

use super::metrics::LiveGauge;
use super::protocol::status;
use super::{Finish, Live, TaskCall, Tasks, moved};
use crate::error::CallError;
use crate::interactions::CallContext;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::time::now_ms;
use switchyard_proto::v1::{BackgroundPolicy, SidecarCallResponse};
use tokio::task::AbortHandle;

/// Aborts a held call when dropped armed.
struct AbortGuard(Option<AbortHandle>);

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}

impl Tasks {
    /// Holds `call`, which may move under `policy` (see the module docs).
    pub(super) async fn call_wait(
        &self,
        call: TaskCall,
        policy: BackgroundPolicy,
    ) -> Result<SidecarCallResponse, CallError> {
        let TaskCall {
            lease,
            params,
            context,
            started,
            deadline,
            retry,
            ..
        } = call;
        let upstream = lease.upstream().clone();
        let stopping = upstream.clone();
        let server = upstream.name().to_owned();
        let tool = context.tool.clone();
        let created_at_ms = now_ms();
        let held_context = context.clone();
        // The call runs here during the foreground window (most calls end
        // within it); only one that outlives it moves into its own task.
        // Dropping it (the engine went away, or the limit passed) cancels
        // the upstream request. Stage A's retry holds on this path too.
        let mut call = Box::pin(async move {
            let result = retry
                .call_tool(lease.upstream(), params, &held_context)
                .await;
            drop(lease);
            result
        });
        let window = Self::window(Some(&policy), deadline, true, started)
            .expect("a call with a background policy has a foreground window");
        // A zero window (`background = always`) moves the call at once: it
        // must not race a fast upstream answer, or a tool marked
        // always-background would sometimes answer in the foreground.
        let answer = if window.budget().is_zero() && policy.allowed {
            None
        } else {
            tokio::select! {
                r = &mut call => Some(r),
                () = tokio::time::sleep_until(window.at()) => None,
            }
        };
        if let Some(answer) = answer {
            return match answer {
                Ok(result) => self
                    .inner
                    .responder
                    .respond(&server, &tool, &context, &result),
                Err(e) => Err(e.into()),
            };
        }
        if !policy.allowed {
            return Err(Self::limit_error(
                &server,
                &tool,
                Some(&policy),
                window.budget(),
            ));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let held = tokio::spawn(async move {
            let _ = tx.send(call.await);
        });
        let mut guard = AbortGuard(Some(held.abort_handle()));
        let mut record =
            self.moving_record(&policy, &server, &tool, &context, "wait", created_at_ms);
        record.protocol_version = upstream
            .negotiated()
            .map(|n| n.protocol_version)
            .unwrap_or_default();
        // From here the move completes even if the engine's call goes away
        // meanwhile (see `call_task`).
        let shared = Arc::new(Mutex::new(record.clone()));
        let id = record.id.clone();
        let held_abort = guard.0.take().expect("armed");
        let this = self.clone();
        let continuation_shared = shared.clone();
        let continuation_held = held_abort.clone();
        let (moved_tx, moved_rx) = tokio::sync::oneshot::channel();
        // Spawned under the lock (see `start_poller`).
        {
            let mut live = self.lock();
            let continuation = tokio::spawn(async move {
                let shared = continuation_shared;
                let held_abort = continuation_held;
                let Some(stored) = this.register(record.clone()).await else {
                    held_abort.abort();
                    this.lock().remove(&record.id);
                    let _ = moved_tx.send(Err(CallError::NotMoved { server, tool }));
                    return;
                };
                tracing::info!(%server, %tool, id = %record.id, "held call moved to the background");
                let _ = moved_tx.send(Ok(stored));
                let mut gauge =
                    LiveGauge::new(this.metrics(), &record.server, "wait", status::WORKING);
                let context = CallContext {
                    run_id: String::new(),
                    ..context
                };
                let until_deadline = async {
                    if record.deadline_ms > 0 {
                        let left = (record.deadline_ms - now_ms()).max(0) as u64;
                        tokio::time::sleep(Duration::from_millis(left)).await;
                    } else {
                        std::future::pending::<()>().await;
                    }
                };
                let finish = tokio::select! {
                    r = rx => match r {
                        Ok(Ok(result)) => Finish::Completed(result),
                        // Whatever the server answers as its connection is
                        // closed under it is the shutdown's doing.
                        Ok(Err(e)) if stopping.is_closing() => Finish::Failed {
                            message: format!("the sidecar stopped before the call finished; the request to the server was abandoned (its last answer: {e})"),
                            error: None,
                        },
                        Ok(Err(e)) => Finish::Failed { message: e.to_string(), error: e.error_object() },
                        Err(_) => Finish::Failed { message: "the held call ended without an answer".into(), error: None },
                    },
                    () = until_deadline => {
                        held_abort.abort();
                        Finish::Failed {
                            message: "the background call passed its maximum duration (backgroundCalls.maxDurationSec)".into(),
                            error: None,
                        }
                    }
                };
                let terminal = this.terminal_record(record, finish, &context);
                gauge.set(&terminal.status);
                *shared.lock().unwrap_or_else(|e| e.into_inner()) = terminal.clone();
                tracing::info!(server = %terminal.server, id = %terminal.id, status = %terminal.status, "held call finished");
                this.report(&terminal).await;
                this.lock().remove(&terminal.id);
            });
            live.insert(
                id,
                Live {
                    task_id: String::new(),
                    mode: "wait",
                    aborts: vec![held_abort, continuation.abort_handle()],
                    upstream: None,
                    record: shared,
                },
            );
        }
        let stored = moved_rx.await.map_err(|_| CallError::Cancelled {
            reason: "the held call was cancelled while moving",
        })??;
        Ok(moved(stored))
    }
}
