//! Polling MCP tasks. `Tasks::look` is the one poll step, shared by the
//! foreground (`super::foreground`) and the background poller: a
//! terminal task's result is fetched (2025: `tasks/result`; 2026: `result`
//! or `error` inline in `tasks/get`); an `input_required` task's questions
//! are asked (2025: `tasks/result`, which blocks while the server asks,
//! `elicitation/create` with `_meta["io.modelcontextprotocol/related-task"]`
//! attributed through [`super::Initiators`] to the task's initiating
//! session; 2026: each new key of `inputRequests`, deduplicated across
//! polls, answered through the relay ([`mrtr::answer_inputs`]) and sent
//! with `tasks/update {taskId, inputResponses}`). Polls come at the
//! server's `pollInterval`/`pollIntervalMs` clamped to [`task_poll_min_ms`,
//! 5 min], 30 s when absent ([`clamp_poll_interval`]).
//!
//! The background poller (`Polled`) is one tokio task per live call,
//! sleeping until its next poll (10,000 live calls cost 10,000 sleeping
//! tasks and their timers), on the connection that created the task (its
//! [`Lease`] is held while the task lives). Changes (status,
//! statusMessage, poll interval, poll errors set or cleared) are reported;
//! a terminal status is reported with the processed result. A stored
//! record that comes back terminal (a user cancelled) stops polling.
//! Network errors are retried at the next poll; failing continuously for
//! `task_poll_failure_limit_secs` (30 min), a task the server does not
//! know ("task not found") or the call's `deadline_ms` passing fails the
//! call (the last with `tasks/cancel`). An adopted task the server does
//! not know fails only after `TaskSettings::not_found_grace`, unless its
//! stored record turns final meanwhile (the sidecar that created it, still
//! alive, reported the result): `Tasks::left_to_creator`.

use super::metrics::LiveGauge;
use super::protocol::{
    MAX_TASK_INPUT_REQUESTS, TaskState, cancel_task, excerpt, get_task, is_not_found, status,
    task_params,
};
use super::{Finish, Live, Tasks};
use crate::interactions::{CallContext, mrtr};
use crate::pool::Lease;
use crate::upstream::{Era, Upstream, UpstreamError};
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::time::now_ms;
use switchyard_mcp::meta;
use switchyard_proto::v1::BackgroundCall;
use tokio::time::Instant;

/// Default lower bound of the poll interval.
pub const DEFAULT_POLL_MIN: Duration = Duration::from_secs(5);

/// Upper bound of the poll interval.
pub const POLL_MAX: Duration = Duration::from_secs(300);

/// Poll interval when the server suggests none.
pub const POLL_ABSENT: Duration = Duration::from_secs(30);

/// Default bound on continuous poll failure before a call fails.
pub const DEFAULT_FAILURE_LIMIT: Duration = Duration::from_secs(30 * 60);

/// The poll interval for a server suggestion of `server_ms` milliseconds:
/// clamped to [`min`, [`POLL_MAX`]]; [`POLL_ABSENT`] (also clamped) when the
/// server gave none (design §4 B).
pub fn clamp_poll_interval(server_ms: Option<u64>, min: Duration) -> Duration {
    let min = min.min(POLL_MAX);
    server_ms
        .map(Duration::from_millis)
        .unwrap_or(POLL_ABSENT)
        .clamp(min, POLL_MAX)
}

/// What one look at a task found.
pub(super) enum Look {
    /// Still running (the state as seen).
    Running,
    /// Finished.
    Done(Finish),
}

/// A task being followed, in the foreground or the background: what the
/// poll step reads and updates.
pub(super) struct Followed {
    /// The connection the task lives on: the one that created it, or a
    /// fresh lease of the call's session for an adopted call.
    pub upstream: Upstream,
    /// The task's era.
    pub era: Era,
    /// The task as last seen.
    pub state: TaskState,
    /// Whose the task is; the run is empty once in the background.
    pub context: CallContext,
    /// The 2026 `inputRequests` keys answered so far.
    pub answered: HashSet<String>,
}

impl Followed {
    /// `tasks/cancel` for the task (the caller decides whether the answer
    /// matters).
    pub(super) async fn cancel(&self) -> Result<(), UpstreamError> {
        cancel_task(&self.upstream, self.era, &self.state.task_id).await
    }
}

/// A task-mode call polled in the background ([`Tasks::start_poller`]).
pub(super) struct Polled {
    /// Its record, as registered (or adopted).
    pub record: BackgroundCall,
    /// The connection's lease, held while the task lives.
    pub lease: Lease,
    /// The task.
    pub task: Followed,
    /// When to poll first.
    pub first: Instant,
    /// Handed to this sidecar by the control plane (`adopt`), not created
    /// by it: a "task not found" is then not final at once
    /// ([`TaskSettings::not_found_grace`](super::TaskSettings)).
    pub adopted: bool,
}

impl Tasks {
    /// `tasks/get` into `state`.
    pub(super) async fn refresh(&self, task: &mut Followed) -> Result<(), UpstreamError> {
        let Followed {
            upstream,
            era,
            state,
            ..
        } = task;
        let result = get_task(upstream, *era, &state.task_id).await;
        self.metrics().poll(
            upstream.name(),
            match &result {
                Ok(_) => "ok",
                Err(e) if is_not_found(e) => "not_found",
                Err(_) => "error",
            },
        );
        *state = result?;
        Ok(())
    }

    /// Acts on `state` as last seen: a terminal task's result is fetched;
    /// an `input_required` task's questions are asked (2025:
    /// `tasks/result`, bounded by `deadline`; 2026: the new
    /// `inputRequests` keys, then `tasks/update`). Errors: network and
    /// other failures worth retrying at the next poll.
    pub(super) async fn look(
        &self,
        task: &mut Followed,
        deadline: Option<Instant>,
    ) -> Result<Look, UpstreamError> {
        let Followed {
            upstream,
            era,
            state,
            context,
            answered,
        } = task;
        let (upstream, era) = (&*upstream, *era);
        let message = || state.status_message.clone().unwrap_or_default();
        match (state.status.as_str(), era) {
            (status::CANCELLED, _) => Ok(Look::Done(Finish::Cancelled(message()))),
            (status::COMPLETED, Era::Modern) => Ok(Look::Done(match &state.result {
                Some(result) => Finish::Completed(result.clone()),
                None => Finish::Failed {
                    message: "the completed task carries no result".into(),
                    error: None,
                },
            })),
            (status::FAILED, Era::Modern) => Ok(Look::Done(Finish::Failed {
                message: state
                    .status_message
                    .clone()
                    .or_else(|| {
                        state
                            .error
                            .as_ref()
                            .and_then(|e| e.get("message"))
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    })
                    .unwrap_or_else(|| "the task failed".into()),
                error: state.error.clone(),
            })),
            (status::COMPLETED | status::FAILED | status::INPUT_REQUIRED, Era::Legacy) => {
                // Blocks until terminal; while input_required the server
                // asks on it (related-task).
                let params = task_params(era, &state.task_id, None);
                let fetch = upstream.request_in("tasks/result", &params, context);
                let result = match deadline {
                    Some(d) if state.status == status::INPUT_REQUIRED => {
                        match tokio::time::timeout_at(d, fetch).await {
                            Ok(r) => r,
                            Err(_) => return Ok(Look::Running),
                        }
                    }
                    _ => fetch.await,
                };
                match result {
                    Ok(result) => Ok(Look::Done(Finish::Completed(result))),
                    Err(e) if is_not_found(&e) => Ok(Look::Done(Finish::NotFound(e.to_string()))),
                    // Fetching it again gives the same answer.
                    Err(e @ UpstreamError::MessageTooLarge { .. }) => {
                        Ok(Look::Done(Finish::Failed {
                            message: e.to_string(),
                            error: None,
                        }))
                    }
                    Err(e @ UpstreamError::Rpc { .. }) => Ok(Look::Done(Finish::Failed {
                        message: match &e {
                            UpstreamError::Rpc { message, .. } => message.clone(),
                            _ => unreachable!(),
                        },
                        error: e.error_object(),
                    })),
                    // A long wait for the user: not a failure.
                    Err(UpstreamError::Timeout { .. })
                        if state.status == status::INPUT_REQUIRED =>
                    {
                        Ok(Look::Running)
                    }
                    Err(e) => Err(e),
                }
            }
            (status::INPUT_REQUIRED, Era::Modern) => {
                let requests = match &state.input_requests {
                    Some(Value::Object(requests)) => requests,
                    // Nothing asked (yet).
                    None | Some(Value::Null) => return Ok(Look::Running),
                    Some(other) => {
                        return Err(UpstreamError::protocol(
                            upstream.name(),
                            format!(
                                "tasks/get {}: inputRequests is not an object (key -> request): {}",
                                state.task_id,
                                excerpt(other)
                            ),
                        ));
                    }
                };
                let fresh: Map<String, Value> = requests
                    .iter()
                    .filter(|(k, _)| !answered.contains(*k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if fresh.is_empty() {
                    return Ok(Look::Running);
                }
                // A server that never stops asking would flood the
                // initiator's session with questions.
                if answered.len() + fresh.len() > MAX_TASK_INPUT_REQUESTS {
                    let _ = cancel_task(upstream, era, &state.task_id).await;
                    return Ok(Look::Done(Finish::Failed {
                        message: format!(
                            "the server asked for more than {MAX_TASK_INPUT_REQUESTS} inputs (inputRequests) for task {}; it was cancelled",
                            state.task_id
                        ),
                        error: None,
                    }));
                }
                // The cards say which task asks (the 2025-11-25 key for
                // it), so the control plane can close them when the call
                // ends. Only the copy shown to the user carries it; the
                // server gets its answers by key, as it asked.
                let fresh = Value::Object(
                    fresh
                        .into_iter()
                        .map(|(k, mut v)| {
                            if let Some(params) = v.get_mut("params").and_then(Value::as_object_mut)
                            {
                                let meta = params
                                    .entry("_meta")
                                    .or_insert_with(|| Value::Object(Map::new()));
                                if let Some(meta) = meta.as_object_mut() {
                                    meta.entry(meta::RELATED_TASK)
                                        .or_insert_with(|| json!({"taskId": state.task_id}));
                                }
                            }
                            (k, v)
                        })
                        .collect(),
                );
                let ask = mrtr::answer_inputs(&self.inner.relay, &fresh, context);
                let responses = match deadline {
                    Some(d) => match tokio::time::timeout_at(d, ask).await {
                        Ok(r) => r,
                        Err(_) => return Ok(Look::Running),
                    },
                    None => ask.await,
                };
                let responses = match responses {
                    Ok(r) => r,
                    // Questions we can never answer (sampling).
                    Err(e) => {
                        let _ = cancel_task(upstream, era, &state.task_id).await;
                        return Ok(Look::Done(Finish::Failed {
                            message: e.to_string(),
                            error: None,
                        }));
                    }
                };
                let keys: Vec<String> = responses
                    .as_object()
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default();
                upstream
                    .request(
                        "tasks/update",
                        Some(task_params(
                            era,
                            &state.task_id,
                            Some(("inputResponses", responses)),
                        )),
                    )
                    .await?;
                answered.extend(keys);
                Ok(Look::Running)
            }
            _ => Ok(Look::Running),
        }
    }

    /// Starts polling a task-mode call in the background.
    pub(super) fn start_poller(&self, polled: Polled) {
        let shared = Arc::new(Mutex::new(polled.record.clone()));
        let id = polled.record.id.clone();
        let task_id = polled.record.task_id.clone();
        let task_upstream = polled.task.upstream.clone();
        let era = polled.task.era;
        let this = self.clone();
        let poller_shared = shared.clone();
        // Spawned under the lock, so a cancellation finds the abort handle
        // and the poller's own removal comes after the insertion.
        let mut live = self.lock();
        let handle = tokio::spawn(async move {
            this.poll_loop(poller_shared, polled).await;
        });
        live.insert(
            id,
            Live {
                task_id,
                mode: "task",
                aborts: vec![handle.abort_handle()],
                upstream: Some((task_upstream, era)),
                record: shared,
            },
        );
    }

    /// Polls `polled` until it ends (see the module docs), then reports
    /// it; `shared` is its record as cancellation sees it.
    async fn poll_loop(self, shared: Arc<Mutex<BackgroundCall>>, polled: Polled) {
        let Polled {
            record: _,
            lease,
            mut task,
            first: mut next,
            adopted,
        } = polled;
        let mut record = shared.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let id = record.id.clone();
        let server = record.server.clone();
        let mut gauge = LiveGauge::new(self.metrics(), &server, "task", &record.status);
        let finish = loop {
            tokio::time::sleep_until(next).await;
            if record.deadline_ms > 0 && now_ms() >= record.deadline_ms {
                let _ = task.cancel().await;
                break Finish::Failed {
                    message: "the background call passed its maximum duration (backgroundCalls.maxDurationSec)".into(),
                    error: None,
                };
            }
            let deadline = (record.deadline_ms > 0).then(|| {
                let left = (record.deadline_ms - now_ms()).max(0) as u64;
                Instant::now() + Duration::from_millis(left)
            });
            let mut changed = false;
            let mut failure = None;
            match self.refresh(&mut task).await {
                // A poll error is cleared only when the whole poll worked
                // (below): a `tasks/get` that works followed by a
                // `tasks/result` or `tasks/update` that keeps failing is a
                // continuous failure.
                Ok(()) => {
                    let interval =
                        clamp_poll_interval(task.state.poll_interval_ms, self.settings().poll_min);
                    let interval_ms = interval.as_millis() as u64;
                    let message = task.state.status_message.clone().unwrap_or_default();
                    // A terminal status is reported with its result, below.
                    if !status::is_terminal(&task.state.status)
                        && (record.status != task.state.status
                            || record.status_message != message
                            || record.poll_interval_ms != interval_ms)
                    {
                        changed = true;
                        record.status = task.state.status.clone();
                        record.status_message = message;
                        record.poll_interval_ms = interval_ms;
                    }
                }
                Err(e) if is_not_found(&e) => break Finish::NotFound(e.to_string()),
                // The task's state will not shrink: polling again is futile.
                Err(e @ UpstreamError::MessageTooLarge { .. }) => {
                    let _ = task.cancel().await;
                    break Finish::Failed {
                        message: e.to_string(),
                        error: None,
                    };
                }
                Err(e) => failure = Some(e),
            }
            let interval =
                clamp_poll_interval(task.state.poll_interval_ms, self.settings().poll_min);
            // Changes are reported before acting on them: a 2025
            // input_required task blocks in tasks/result while the user is
            // asked.
            if changed && self.report_change(&mut record, &shared, &mut gauge).await {
                self.stop(&task, &record).await;
                return;
            }
            if failure.is_none() {
                match self.look(&mut task, deadline).await {
                    Ok(Look::Done(f)) => break f,
                    Ok(Look::Running) => {}
                    Err(e) if is_not_found(&e) => break Finish::NotFound(e.to_string()),
                    Err(e) => failure = Some(e),
                }
            }
            if let Some(e) = failure {
                let now = now_ms();
                let first = record.poll_error_since_ms == 0;
                if first {
                    record.poll_error_since_ms = now;
                }
                record.last_poll_error = e.to_string();
                let failing =
                    Duration::from_millis((now - record.poll_error_since_ms).max(0) as u64);
                tracing::info!(%server, %id, task = %task.state.task_id, error = %e, failing_s = failing.as_secs(), "polling the task failed; retrying at the next poll");
                if failing >= self.settings().failure_limit {
                    break Finish::Failed {
                        message: format!(
                            "polling the task failed for {} s without a break: {e}",
                            failing.as_secs()
                        ),
                        error: None,
                    };
                }
                if first && self.report_change(&mut record, &shared, &mut gauge).await {
                    self.stop(&task, &record).await;
                    return;
                }
            } else if record.poll_error_since_ms != 0 {
                record.poll_error_since_ms = 0;
                record.last_poll_error.clear();
                if self.report_change(&mut record, &shared, &mut gauge).await {
                    self.stop(&task, &record).await;
                    return;
                }
            }
            next = Instant::now() + interval;
            record.poll_after_ms = now_ms() + interval.as_millis() as i64;
        };
        if adopted
            && matches!(finish, Finish::NotFound(_))
            && self.left_to_creator(&mut record, &shared).await
        {
            self.stop(&task, &record).await;
            return;
        }
        if let Some(message) = &task.state.status_message {
            record.status_message = message.clone();
        }
        let terminal = self.terminal_record(record, finish, &task.context);
        gauge.set(&terminal.status);
        *shared.lock().unwrap_or_else(|e| e.into_inner()) = terminal.clone();
        tracing::info!(%server, %id, task = %task.state.task_id, status = %terminal.status, "background call finished");
        self.report(&terminal).await;
        self.initiators().remove(&task.state.task_id);
        self.lock().remove(&id);
        drop(lease);
    }

    /// Reports a changed `record` (publishing it for cancellation first).
    /// True when the stored record came back final (a user cancelled) or
    /// owned by another live sidecar (the control plane ignored the
    /// report: the call went back to its creator, or was adopted while
    /// this sidecar's registration lapsed): the caller stops polling.
    pub(super) async fn report_change(
        &self,
        record: &mut BackgroundCall,
        shared: &Mutex<BackgroundCall>,
        gauge: &mut LiveGauge,
    ) -> bool {
        gauge.set(&record.status);
        record.updated_at_ms = now_ms();
        *shared.lock().unwrap_or_else(|e| e.into_inner()) = record.clone();
        match self.report(record).await {
            Some(stored) if status::is_terminal(&stored.status) => {
                tracing::info!(id = %record.id, status = %stored.status, "the stored record is final; stopping");
                *record = stored;
                true
            }
            Some(stored) if stored.sidecar_id != self.settings().sidecar_id => {
                tracing::info!(id = %record.id, owner = %stored.sidecar_id, "another sidecar owns the background call now; stopping");
                true
            }
            _ => false,
        }
    }

    /// An adopted task the server does not know: its creator may be
    /// alive, polling it on its own connection (a stdio server's tasks
    /// live in its process), its registration lost for a moment. The task
    /// is not polled any more; the stored record is checked (the unchanged
    /// record reported, every poll interval) for
    /// [`TaskSettings::not_found_grace`](super::TaskSettings). True, and
    /// the caller stops without a result, when the stored record became
    /// final (the creator reported the result, or a user cancelled) or
    /// another sidecar owns it; false when the grace passed and this
    /// sidecar still owns it: the call is reported failed "task not found"
    /// (`task_not_found`), which the control plane takes only when the
    /// task's creator is not registered (else the call goes back to the
    /// creator). The control plane keeps the first terminal record, so a
    /// call has one result.
    async fn left_to_creator(
        &self,
        record: &mut BackgroundCall,
        shared: &Mutex<BackgroundCall>,
    ) -> bool {
        let me = self.settings().sidecar_id.clone();
        let until = Instant::now() + self.settings().not_found_grace;
        let every = Duration::from_millis(record.poll_interval_ms.max(1))
            .clamp(self.settings().poll_min.min(POLL_MAX), POLL_MAX);
        tracing::info!(id = %record.id, task = %record.task_id, grace_s = self.settings().not_found_grace.as_secs(), "the server does not know this adopted task; leaving it to the sidecar that created it for a while");
        loop {
            let Some(stored) = self.report(record).await else {
                return false;
            };
            if status::is_terminal(&stored.status) || stored.sidecar_id != me {
                tracing::info!(id = %record.id, status = %stored.status, owner = %stored.sidecar_id, "the adopted task was finished or taken by another sidecar; stopping");
                *record = stored;
                *shared.lock().unwrap_or_else(|e| e.into_inner()) = record.clone();
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(every.min(until - Instant::now())).await;
        }
    }

    /// Stops polling `record`, final in the store: a cancelled task is
    /// cancelled on the server too (best effort).
    pub(super) async fn stop(&self, task: &Followed, record: &BackgroundCall) {
        if record.status == status::CANCELLED {
            let _ = task.cancel().await;
        }
        self.initiators().remove(&task.state.task_id);
        self.lock().remove(&record.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_intervals_are_clamped() {
        let min = DEFAULT_POLL_MIN;
        assert_eq!(clamp_poll_interval(None, min), POLL_ABSENT);
        assert_eq!(clamp_poll_interval(Some(1000), min), min);
        assert_eq!(clamp_poll_interval(Some(7000), min), Duration::from_secs(7));
        assert_eq!(clamp_poll_interval(Some(3_600_000), min), POLL_MAX);
        let small = Duration::from_millis(50);
        assert_eq!(clamp_poll_interval(Some(10), small), small);
        assert_eq!(
            clamp_poll_interval(Some(120), small),
            Duration::from_millis(120)
        );
        assert_eq!(
            clamp_poll_interval(None, Duration::from_secs(3600)),
            POLL_MAX
        );
    }
}
