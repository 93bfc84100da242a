//! Streams of calls: many calls multiplexed over one long-lived
//! bidirectional gRPC stream, each call a frame with an id and each outcome
//! a frame with the same id. `EngineService.CallToolStream` (engine →
//! control plane) and `SidecarCalls.CallStream` (control plane → sidecar)
//! both work this way; this module holds the two halves they share:
//!
//! * [`Mux`], the caller's side: [`Mux::call`] sends a call frame and waits
//!   for its outcome; dropping the future sends a cancel frame. When the
//!   stream ends or fails, every call waiting on it fails with
//!   [`CallError::Stream`] and the mux stays closed ([`Mux::is_closed`]);
//!   the owner opens a new one.
//! * [`serve`], the callee's side: runs one task per call frame and sends
//!   each outcome back as it completes. A cancel frame cancels that call's
//!   token (the handler decides what a cancelled call answers). When the
//!   caller closes its side, the calls in flight finish and then the
//!   outcome stream ends; when the stream breaks, they are cancelled.
//!
//! Before its outcome, a call may get notifications (a server's
//! `notifications/progress`, say): the handler sends them with its
//! [`Notifier`], and [`Mux::call_observed`] hands them to the caller's
//! channel. They are best effort: dropped, never waited for, when the
//! outcome queue is full or nobody observes the call.
//!
//! Both are generic over [`Frames`], which maps a service's message types.

use futures::FutureExt;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status, Streaming};

/// The message types of one stream-of-calls RPC, and how to build and take
/// apart its frames.
pub trait Frames: Send + Sync + 'static {
    /// A call's request, e.g. `CallToolRequest`.
    type Call: Send + 'static;
    /// A call's successful response, e.g. `CallToolResponse`.
    type Response: Send + 'static;
    /// What the caller sends: a call or a cancel, with an id.
    type Frame: prost::Message + Send + 'static;
    /// What the callee sends back: a response or an error, with an id.
    type Outcome: prost::Message + Send + 'static;

    /// The frame starting call `id`.
    fn call_frame(id: u64, call: Self::Call) -> Self::Frame;
    /// The frame cancelling call `id`.
    fn cancel_frame(id: u64) -> Self::Frame;
    /// A frame's id and content: `Some(call)`, or `None` for a cancel.
    /// Errors: a frame with neither (INVALID_ARGUMENT, naming the id).
    fn open_frame(frame: Self::Frame) -> (u64, Result<Option<Self::Call>, Status>);
    /// The outcome frame of call `id`.
    fn outcome(id: u64, result: Result<Self::Response, Status>) -> Self::Outcome;
    /// The notification frame of call `id`: `json` is a whole JSON-RPC
    /// notification, JSON text.
    fn notification(id: u64, json: String) -> Self::Outcome;
    /// An outcome frame's id and content. An outcome with no field set is
    /// an INTERNAL error naming the id.
    fn open_outcome(outcome: Self::Outcome) -> (u64, Opened<Self::Response>);
}

/// What an outcome frame holds.
#[derive(Debug)]
pub enum Opened<R> {
    /// The call's one outcome.
    Done(Result<R, Status>),
    /// A notification about the running call (JSON text).
    Notification(String),
}

/// Where a call's notifications go ([`Mux::call_observed`]).
pub type Observer = mpsc::UnboundedSender<String>;

/// A call on a [`Mux`] failed.
#[derive(Debug, Clone)]
pub enum CallError {
    /// The call's own failure, as the callee reported it.
    Call(Status),
    /// The stream ended or failed before the outcome came: the call's fate
    /// is unknown. The status is the stream's error (or UNAVAILABLE
    /// "stream ended").
    Stream(Status),
}

impl CallError {
    /// The status either way.
    pub fn into_status(self) -> Status {
        match self {
            CallError::Call(s) | CallError::Stream(s) => s,
        }
    }
}

type Waiter<R> = oneshot::Sender<Result<R, CallError>>;

impl<R> Pending<R> {
    /// Forgets call `id`: its waiter (returned) and its observer.
    fn forget(&mut self, id: u64) -> Option<Waiter<R>> {
        self.observers.remove(&id);
        self.waiting.remove(&id)
    }
}

struct Pending<R> {
    waiting: HashMap<u64, Waiter<R>>,
    /// The observed calls' notification channels.
    observers: HashMap<u64, Observer>,
    /// Set once the stream has ended; later calls fail with it.
    closed: Option<Status>,
}

/// The caller's side of a stream of calls. Cheap to share (`Arc`); calls
/// may run concurrently from any task.
pub struct Mux<F: Frames> {
    frames: mpsc::UnboundedSender<F::Frame>,
    pending: Arc<Mutex<Pending<F::Response>>>,
    next: AtomicU64,
}

impl<F: Frames> std::fmt::Debug for Mux<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = self.pending.lock().unwrap();
        f.debug_struct("Mux")
            .field("in_flight", &p.waiting.len())
            .field("closed", &p.closed)
            .finish()
    }
}

impl<F: Frames> Mux<F> {
    /// Opens a stream with `open`, which gets the stream of frames to send
    /// and answers the stream of outcomes (e.g.
    /// `|frames| async move { client.call_stream(frames).await }`), and
    /// starts the task that hands outcomes to their callers. Errors: what
    /// `open` failed with (UNIMPLEMENTED from a peer without the RPC).
    pub async fn open<O, Fut>(open: O) -> Result<Arc<Self>, Status>
    where
        O: FnOnce(UnboundedReceiverStream<F::Frame>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Streaming<F::Outcome>>, Status>>,
    {
        let (frames, rx) = mpsc::unbounded_channel();
        let outcomes = open(UnboundedReceiverStream::new(rx)).await?.into_inner();
        let mux = Arc::new(Mux {
            frames,
            pending: Arc::new(Mutex::new(Pending {
                waiting: HashMap::new(),
                observers: HashMap::new(),
                closed: None,
            })),
            next: AtomicU64::new(1),
        });
        tokio::spawn(deliver::<F>(outcomes, mux.pending.clone()));
        Ok(mux)
    }

    /// Whether the stream has ended; a closed mux fails every call.
    pub fn is_closed(&self) -> bool {
        self.pending.lock().unwrap().closed.is_some() || self.frames.is_closed()
    }

    /// Calls in flight.
    pub fn in_flight(&self) -> usize {
        self.pending.lock().unwrap().waiting.len()
    }

    /// Sends `call` and waits for its outcome. Dropping the future before
    /// the outcome arrives sends a cancel frame. Errors: [`CallError`].
    pub async fn call(&self, call: F::Call) -> Result<F::Response, CallError> {
        self.call_observed(call, None).await
    }

    /// [`Mux::call`], with the call's notifications sent to `observer`
    /// (when given) until its outcome comes.
    pub async fn call_observed(
        &self,
        call: F::Call,
        observer: Option<Observer>,
    ) -> Result<F::Response, CallError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.pending.lock().unwrap();
            if let Some(status) = &p.closed {
                return Err(CallError::Stream(status.clone()));
            }
            p.waiting.insert(id, tx);
            if let Some(o) = observer {
                p.observers.insert(id, o);
            }
        }
        let mut guard = CancelOnDrop { mux: self, id };
        let frame = F::call_frame(id, call);
        let len = prost::Message::encoded_len(&frame);
        if len > MAX_MESSAGE_BYTES {
            // Sending it would end the stream for every call on it.
            guard.disarm();
            self.pending.lock().unwrap().forget(id);
            return Err(CallError::Call(Status::resource_exhausted(format!(
                "the call is {len} bytes, over the {MAX_MESSAGE_BYTES}-byte message limit"
            ))));
        }
        if self.frames.send(frame).is_err() {
            guard.disarm();
            self.pending.lock().unwrap().forget(id);
            return Err(CallError::Stream(Status::unavailable("stream ended")));
        }
        let outcome = rx
            .await
            .unwrap_or_else(|_| Err(CallError::Stream(Status::unavailable("stream ended"))));
        guard.disarm();
        outcome
    }
}

/// Cancels a call whose future was dropped before its outcome came.
struct CancelOnDrop<'a, F: Frames> {
    mux: &'a Mux<F>,
    id: u64,
}

impl<F: Frames> CancelOnDrop<'_, F> {
    fn disarm(&mut self) {
        self.id = 0;
    }
}

impl<F: Frames> Drop for CancelOnDrop<'_, F> {
    fn drop(&mut self) {
        if self.id == 0 {
            return;
        }
        let waiting = self.mux.pending.lock().unwrap().forget(self.id);
        if waiting.is_some() {
            let _ = self.mux.frames.send(F::cancel_frame(self.id));
        }
    }
}

/// Hands each outcome to its caller until the stream ends, then fails the
/// calls still waiting.
async fn deliver<F: Frames>(
    mut outcomes: Streaming<F::Outcome>,
    pending: Arc<Mutex<Pending<F::Response>>>,
) {
    let end = loop {
        match outcomes.message().await {
            Ok(Some(outcome)) => match F::open_outcome(outcome) {
                (id, Opened::Done(result)) => {
                    let waiter = pending.lock().unwrap().forget(id);
                    if let Some(w) = waiter {
                        let _ = w.send(result.map_err(CallError::Call));
                    }
                }
                (id, Opened::Notification(json)) => {
                    if let Some(o) = pending.lock().unwrap().observers.get(&id) {
                        let _ = o.send(json);
                    }
                }
            },
            Ok(None) => break Status::unavailable("stream ended"),
            Err(status) => break status,
        }
    };
    let waiting = {
        let mut p = pending.lock().unwrap();
        p.closed = Some(end.clone());
        p.observers.clear();
        std::mem::take(&mut p.waiting)
    };
    for (_, w) in waiting {
        let _ = w.send(Err(CallError::Stream(end.clone())));
    }
}

/// The outcome stream [`serve`] answers with.
pub type Outcomes<O> = ReceiverStream<Result<O, Status>>;

/// Outcomes waiting to be sent, at most; then [`serve`] stops reading
/// frames until the caller reads outcomes (HTTP/2 flow control pushes back).
pub const OUTCOMES_QUEUED: usize = 256;

/// The largest message either side sends on a stream of calls (the gRPC
/// message limit both binaries set).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Sends notifications about one call served by [`serve`], before its
/// outcome. Cheap to clone. It does not keep the outcome stream open: one
/// kept after its call ended (a pooled upstream connection may hold it)
/// does not stop the stream from ending when the server stops, and
/// notifies nothing once it has.
pub struct Notifier<F: Frames> {
    id: u64,
    tx: mpsc::WeakSender<Result<F::Outcome, Status>>,
}

impl<F: Frames> Clone for Notifier<F> {
    fn clone(&self) -> Self {
        Notifier {
            id: self.id,
            tx: self.tx.clone(),
        }
    }
}

impl<F: Frames> std::fmt::Debug for Notifier<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier").field("id", &self.id).finish()
    }
}

impl<F: Frames> Notifier<F> {
    /// Sends `json` (a whole JSON-RPC notification) as a notification frame
    /// of the call, unless the outcome queue is full or the notification
    /// is over the message limit: best effort, never waits.
    pub fn notify(&self, json: String) {
        if json.len() < MAX_MESSAGE_BYTES - 64
            && let Some(tx) = self.tx.upgrade()
        {
            let _ = tx.try_send(Ok(F::notification(self.id, json)));
        }
    }
}

/// Serves a stream of calls: runs `handle(call, token, notifier)` in its
/// own task for each call frame and sends its outcome back as soon as it
/// is done; the handler may send notifications first ([`Notifier`]). A
/// cancel frame cancels that call's token; a call frame whose id is in
/// flight gets ALREADY_EXISTS (an outcome with that id, besides the running
/// call's own); one beyond `max_in_flight` calls in flight gets
/// RESOURCE_EXHAUSTED; a frame with neither a call nor a cancel gets
/// INVALID_ARGUMENT. An outcome larger than [`MAX_MESSAGE_BYTES`] becomes
/// RESOURCE_EXHAUSTED for that call alone (sending it would end the stream
/// for every call). A handler that panics answers INTERNAL. When the caller
/// closes its side, the calls in flight finish, then the outcome stream
/// ends (if the caller goes away meanwhile, they are cancelled); when the
/// stream breaks, every call's token is cancelled. When `stop` is cancelled
/// (the server is shutting down), new call frames get UNAVAILABLE, and the
/// outcome stream ends as soon as the calls in flight have finished.
pub fn serve<F, H, Fut>(
    mut frames: Streaming<F::Frame>,
    max_in_flight: usize,
    stop: CancellationToken,
    handle: H,
) -> Outcomes<F::Outcome>
where
    F: Frames,
    H: Fn(F::Call, CancellationToken, Notifier<F>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<F::Response, Status>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Result<F::Outcome, Status>>(OUTCOMES_QUEUED);
    tokio::spawn(async move {
        let running: Arc<Mutex<HashMap<u64, CancellationToken>>> = Arc::default();
        let all = CancellationToken::new();
        // Signalled each time a call finishes (a permit is kept).
        let finished = Arc::new(tokio::sync::Notify::new());
        let mut stopping = false;
        let mut closed = false;
        loop {
            if (stopping || closed) && running.lock().unwrap().is_empty() {
                break;
            }
            let next = tokio::select! {
                next = frames.message(), if !closed => next,
                () = stop.cancelled(), if !stopping => {
                    stopping = true;
                    continue;
                }
                () = finished.notified(), if stopping || closed => continue,
                // The caller went away after closing its side.
                () = tx.closed(), if closed => {
                    all.cancel();
                    break;
                }
            };
            let frame = match next {
                Ok(Some(frame)) => frame,
                // The caller closed its side: let the calls finish.
                Ok(None) => {
                    closed = true;
                    continue;
                }
                // The stream broke: nobody is left to answer.
                Err(_) => {
                    all.cancel();
                    break;
                }
            };
            let (id, content) = F::open_frame(frame);
            let refused = match content {
                Err(status) => Some(status),
                Ok(None) => {
                    if let Some(token) = running.lock().unwrap().get(&id) {
                        token.cancel();
                    }
                    None
                }
                Ok(Some(call)) => {
                    let token = all.child_token();
                    let refused = {
                        let mut r = running.lock().unwrap();
                        if stopping {
                            Some(Status::unavailable(format!(
                                "call {id}: the server is shutting down and takes no new calls"
                            )))
                        } else if r.contains_key(&id) {
                            Some(Status::already_exists(format!(
                                "id: call {id} is still running on this stream"
                            )))
                        } else if r.len() >= max_in_flight {
                            Some(Status::resource_exhausted(format!(
                                "call {id}: {max_in_flight} calls are in flight on this stream, the most it takes"
                            )))
                        } else {
                            r.insert(id, token.clone());
                            None
                        }
                    };
                    if refused.is_none() {
                        let notifier = Notifier {
                            id,
                            tx: tx.downgrade(),
                        };
                        let call = handle(call, token, notifier);
                        let done = Done {
                            id,
                            running: running.clone(),
                            finished: finished.clone(),
                        };
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            // Dropped even if the handler panics.
                            let _done = done;
                            let result = std::panic::AssertUnwindSafe(call)
                                .catch_unwind()
                                .await
                                .unwrap_or_else(|_| {
                                    Err(Status::internal(format!(
                                        "call {id}: its handler panicked"
                                    )))
                                });
                            let _ = tx.send(Ok(checked::<F>(id, result))).await;
                        });
                    }
                    refused
                }
            };
            if let Some(status) = refused {
                // Waits while the caller does not read: no unbounded queue.
                if tx.send(Ok(F::outcome(id, Err(status)))).await.is_err() {
                    all.cancel();
                    break;
                }
            }
        }
    });
    ReceiverStream::new(rx)
}

/// The outcome of call `id`, or RESOURCE_EXHAUSTED when it is too large to
/// send.
fn checked<F: Frames>(id: u64, result: Result<F::Response, Status>) -> F::Outcome {
    let outcome = F::outcome(id, result);
    let len = prost::Message::encoded_len(&outcome);
    if len <= MAX_MESSAGE_BYTES {
        return outcome;
    }
    F::outcome(
        id,
        Err(Status::resource_exhausted(format!(
            "call {id}: its outcome is {len} bytes, over the {MAX_MESSAGE_BYTES}-byte message limit"
        ))),
    )
}

/// Forgets a finished (or panicked) call.
struct Done {
    id: u64,
    running: Arc<Mutex<HashMap<u64, CancellationToken>>>,
    finished: Arc<tokio::sync::Notify>,
}

impl Drop for Done {
    fn drop(&mut self) {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        self.finished.notify_one();
    }
}

/// A status from a [`crate::v1::CallError`] frame.
pub fn status_of(e: crate::v1::CallError) -> Status {
    Status::with_details(Code::from(e.code), e.message, e.details.into())
}

/// The [`crate::v1::CallError`] frame for a status.
pub fn error_of(s: &Status) -> crate::v1::CallError {
    crate::v1::CallError {
        code: s.code() as i32,
        message: s.message().to_owned(),
        details: s.details().to_vec(),
    }
}

/// Implements [`Frames`] for a stream-of-calls RPC from its generated
/// types: `$frames` (the marker type), the call and response messages,
/// the frame and outcome messages, and the modules of their `oneof`s.
macro_rules! frames {
    ($(#[$doc:meta])* $frames:ident, $call:ident, $response:ident, $frame:ident, $frame_oneof:ident, $outcome:ident, $outcome_oneof:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $frames;

        impl Frames for $frames {
            type Call = crate::v1::$call;
            type Response = crate::v1::$response;
            type Frame = crate::v1::$frame;
            type Outcome = crate::v1::$outcome;

            fn call_frame(id: u64, call: Self::Call) -> Self::Frame {
                crate::v1::$frame {
                    id,
                    frame: Some(crate::v1::$frame_oneof::Frame::Call(call)),
                }
            }

            fn cancel_frame(id: u64) -> Self::Frame {
                crate::v1::$frame {
                    id,
                    frame: Some(crate::v1::$frame_oneof::Frame::Cancel(true)),
                }
            }

            fn open_frame(frame: Self::Frame) -> (u64, Result<Option<Self::Call>, Status>) {
                use crate::v1::$frame_oneof::Frame;
                let id = frame.id;
                (
                    id,
                    match frame.frame {
                        Some(Frame::Call(c)) => Ok(Some(c)),
                        Some(Frame::Cancel(_)) => Ok(None),
                        None => Err(no_frame(id)),
                    },
                )
            }

            fn outcome(id: u64, result: Result<Self::Response, Status>) -> Self::Outcome {
                use crate::v1::$outcome_oneof::Outcome;
                crate::v1::$outcome {
                    id,
                    outcome: Some(match result {
                        Ok(r) => Outcome::Response(r),
                        Err(s) => Outcome::Error(error_of(&s)),
                    }),
                }
            }

            fn notification(id: u64, json: String) -> Self::Outcome {
                use crate::v1::$outcome_oneof::Outcome;
                crate::v1::$outcome {
                    id,
                    outcome: Some(Outcome::NotificationJson(json)),
                }
            }

            fn open_outcome(outcome: Self::Outcome) -> (u64, Opened<Self::Response>) {
                use crate::v1::$outcome_oneof::Outcome;
                let id = outcome.id;
                (
                    id,
                    match outcome.outcome {
                        Some(Outcome::Response(r)) => Opened::Done(Ok(r)),
                        Some(Outcome::Error(e)) => Opened::Done(Err(status_of(e))),
                        Some(Outcome::NotificationJson(j)) => Opened::Notification(j),
                        None => Opened::Done(Err(no_outcome(id))),
                    },
                )
            }
        }
    };
}

frames!(
    /// `SidecarCalls.CallStream`: control plane → sidecar.
    SidecarCallFrames,
    SidecarCallRequest,
    SidecarCallResponse,
    SidecarCallFrame,
    sidecar_call_frame,
    SidecarCallOutcome,
    sidecar_call_outcome
);

frames!(
    /// `EngineService.CallToolStream`: engine → control plane.
    EngineCallFrames,
    CallToolRequest,
    CallToolResponse,
    CallToolFrame,
    call_tool_frame,
    CallToolOutcome,
    call_tool_outcome
);

fn no_frame(id: u64) -> Status {
    Status::invalid_argument(format!("frame {id}: neither `call` nor `cancel` is set"))
}

fn no_outcome(id: u64) -> Status {
    Status::internal(format!(
        "outcome {id}: neither `response` nor `error` is set"
    ))
}
