//! One fake control plane for the sidecar's tests: a real
//! `SidecarRegistry` gRPC server on loopback that a test programs and
//! inspects (linkerd2-proxy's `app/integration/src/controller.rs` plays
//! the same part for its proxy).
//!
//! What it does, whatever the test:
//!
//! - `Register` is recorded and answered with a 15 s lease.
//! - A `Report` stream: every report is recorded; a `hello` is answered
//!   with a `welcome`, then with an `adopt` of the calls queued by
//!   [`FakeControlPlane::adopt_on_hello`] (their `sidecar_id` set to the
//!   new sidecar's). [`FakeControlPlane::break_streams`] ends every open
//!   stream, as a replica that goes away does.
//! - Stage D: the access token set by [`FakeControlPlane::send_access_token`]
//!   goes to every open stream at once and after every later `welcome`,
//!   as the real control plane does; [`FakeControlPlane::push`] sends any
//!   `ControlMessage` to the open streams. `token_rejected` reports are
//!   also kept ([`FakeControlPlane::token_rejections`]).
//! - `UpdateBackgroundCall` keeps every update in order and the latest
//!   record of each id; a terminal record (`completed`, `failed`,
//!   `cancelled`) is final, as in the real control plane, and the stored
//!   record is returned.
//! - `Interact` is recorded and answered `accept` with the content set by
//!   [`FakeControlPlane::answer_with`] (JSON `null` until then), or
//!   `decline` after [`FakeControlPlane::decline_all`];
//!   [`FakeControlPlane::refuse_interacts`] makes the next ones fail with
//!   UNAVAILABLE, as a replica going away.
//! - `CompleteInteraction` is recorded and answered `found`.
//!
//! Registrations, reports and the end of report streams are also queued as
//! [`Event`]s, which a test reads in order with [`FakeControlPlane::next`].

use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_proto::v1::sidecar_registry_server::{SidecarRegistry, SidecarRegistryServer};
use switchyard_proto::v1::{
    AccessToken, BackgroundCall, BackgroundCalls, CatalogueSnapshot, CompleteInteractionRequest,
    CompleteInteractionResponse, ControlMessage, InteractRequest, InteractResponse,
    RegisterRequest, RegisterResponse, SidecarReport, TokenRejected, UpdateBackgroundCallRequest,
    Welcome, control_message, sidecar_report,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

/// How long [`FakeControlPlane::finished`] waits for a background call.
const FINISH_LIMIT: Duration = Duration::from_secs(60);
/// How long [`FakeControlPlane::next`] waits for an event.
const EVENT_LIMIT: Duration = Duration::from_secs(30);

/// The lease the fake hands out, in seconds.
pub const LEASE_TTL_SECONDS: u32 = 15;

/// Something a sidecar did at the fake, in the order it happened.
#[derive(Debug)]
pub enum Event {
    /// A `Register` request.
    Register(RegisterRequest),
    /// A report on a `Report` stream.
    Report(sidecar_report::Report),
    /// A `Report` stream ended (the sidecar closed it, or
    /// [`FakeControlPlane::break_streams`]).
    ReportClosed,
}

/// Whether a background call status is final.
pub fn terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// What the fake saw and how it answers.
#[derive(Debug, Default)]
struct State {
    /// Stored background call records by id.
    records: Mutex<HashMap<String, BackgroundCall>>,
    /// Every `UpdateBackgroundCall` received, in order.
    updates: Mutex<Vec<BackgroundCall>>,
    /// Every `Interact` received, in order.
    interacts: Mutex<Vec<InteractRequest>>,
    /// Every `CompleteInteraction` received, in order.
    completes: Mutex<Vec<CompleteInteractionRequest>>,
    /// The `content` of the accept answer to `Interact`.
    answer: Mutex<Value>,
    /// Answer every `Interact` with `decline` instead.
    decline: AtomicBool,
    /// How many more `Interact` calls fail with UNAVAILABLE.
    refuse_interacts: AtomicUsize,
    /// Handed out as `adopt` after the next `hello`.
    adopt_on_hello: Mutex<Vec<BackgroundCall>>,
    /// The sidecar ids of every `hello`, in order.
    hellos: Mutex<Vec<String>>,
    /// Cancelling it ends every open report stream.
    streams: Mutex<CancellationToken>,
    /// The open report streams' senders (closed ones are dropped when
    /// found closed).
    open: Mutex<Vec<futures::channel::mpsc::UnboundedSender<ControlMessage>>>,
    /// Sent after every `welcome` (stage D).
    access_token: Mutex<Option<AccessToken>>,
    /// Every `token_rejected` report, in order.
    token_rejections: Mutex<Vec<TokenRejected>>,
}

/// The `SidecarRegistry` service over [`State`].
#[derive(Debug, Clone)]
struct Service {
    state: Arc<State>,
    events: mpsc::UnboundedSender<Event>,
}

type ControlStream = Pin<Box<dyn futures::Stream<Item = Result<ControlMessage, Status>> + Send>>;

#[tonic::async_trait]
impl SidecarRegistry for Service {
    async fn register(
        &self,
        request: Request<RegisterRequest>,
    ) -> Result<Response<RegisterResponse>, Status> {
        let _ = self.events.send(Event::Register(request.into_inner()));
        Ok(Response::new(RegisterResponse {
            lease_ttl_seconds: LEASE_TTL_SECONDS,
            spec: None,
        }))
    }

    type ReportStream = ControlStream;

    async fn report(
        &self,
        request: Request<Streaming<SidecarReport>>,
    ) -> Result<Response<Self::ReportStream>, Status> {
        let mut inbound = request.into_inner();
        let state = self.state.clone();
        let events = self.events.clone();
        let end = state.streams.lock().unwrap().clone();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        state.open.lock().unwrap().push(tx.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    m = inbound.message() => match m {
                        Ok(Some(SidecarReport { report: Some(r) })) => {
                            if let sidecar_report::Report::Hello(h) = &r {
                                state.hellos.lock().unwrap().push(h.sidecar_id.clone());
                                let _ = tx.unbounded_send(ControlMessage {
                                    message: Some(control_message::Message::Welcome(Welcome {
                                        lease_ttl_seconds: LEASE_TTL_SECONDS,
                                    })),
                                });
                                let token = state.access_token.lock().unwrap().clone();
                                if let Some(token) = token {
                                    let _ = tx.unbounded_send(ControlMessage {
                                        message: Some(control_message::Message::AccessToken(token)),
                                    });
                                }
                                let mut calls = std::mem::take(&mut *state.adopt_on_hello.lock().unwrap());
                                if !calls.is_empty() {
                                    for c in &mut calls {
                                        c.sidecar_id = h.sidecar_id.clone();
                                    }
                                    let _ = tx.unbounded_send(ControlMessage {
                                        message: Some(control_message::Message::Adopt(BackgroundCalls { calls })),
                                    });
                                }
                            }
                            if let sidecar_report::Report::TokenRejected(t) = &r {
                                state.token_rejections.lock().unwrap().push(t.clone());
                            }
                            let _ = events.send(Event::Report(r));
                        }
                        Ok(Some(_)) => {}
                        _ => break,
                    },
                    _ = end.cancelled() => break,
                }
            }
            let _ = events.send(Event::ReportClosed);
            // Closing the channel ends the response stream (the copy of
            // `tx` in `open` goes at the next push).
            tx.close_channel();
        });
        Ok(Response::new(Box::pin(rx.map(Ok)) as ControlStream))
    }

    async fn update_background_call(
        &self,
        request: Request<UpdateBackgroundCallRequest>,
    ) -> Result<Response<BackgroundCall>, Status> {
        let call = request
            .into_inner()
            .call
            .ok_or_else(|| Status::invalid_argument("no call"))?;
        if call.id.is_empty() {
            return Err(Status::invalid_argument("no id"));
        }
        self.state.updates.lock().unwrap().push(call.clone());
        let mut records = self.state.records.lock().unwrap();
        let stored = match records.get(&call.id) {
            Some(old) if terminal(&old.status) => old.clone(),
            _ => {
                records.insert(call.id.clone(), call.clone());
                call
            }
        };
        Ok(Response::new(stored))
    }

    async fn interact(
        &self,
        request: Request<InteractRequest>,
    ) -> Result<Response<InteractResponse>, Status> {
        self.state
            .interacts
            .lock()
            .unwrap()
            .push(request.into_inner());
        let refuse = self
            .state
            .refuse_interacts
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if refuse {
            return Err(Status::unavailable("replica gone"));
        }
        if self.state.decline.load(Ordering::SeqCst) {
            return Ok(Response::new(InteractResponse {
                result_json: json!({"action": "decline"}).to_string(),
            }));
        }
        let content = self.state.answer.lock().unwrap().clone();
        Ok(Response::new(InteractResponse {
            result_json: json!({"action": "accept", "content": content}).to_string(),
        }))
    }

    async fn complete_interaction(
        &self,
        request: Request<CompleteInteractionRequest>,
    ) -> Result<Response<CompleteInteractionResponse>, Status> {
        self.state
            .completes
            .lock()
            .unwrap()
            .push(request.into_inner());
        Ok(Response::new(CompleteInteractionResponse { found: true }))
    }
}

/// The fake control plane, serving until dropped.
#[derive(Debug)]
pub struct FakeControlPlane {
    /// Its gRPC endpoint, `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<State>,
    events: mpsc::UnboundedReceiver<Event>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeControlPlane {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeControlPlane {
    /// Serves on a free loopback port.
    pub async fn start() -> FakeControlPlane {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        FakeControlPlane::serve_on(listener).await
    }

    /// Serves on `listener`, which a test may bind early (so that no other
    /// process takes the port while a sidecar already points at it).
    pub async fn serve_on(listener: std::net::TcpListener) -> FakeControlPlane {
        let addr = listener.local_addr().expect("a bound listener");
        listener.set_nonblocking(true).expect("non-blocking");
        let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
        let state = Arc::new(State::default());
        let (tx, events) = mpsc::unbounded_channel();
        let service = Service {
            state: state.clone(),
            events: tx,
        };
        let server = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(SidecarRegistryServer::new(service))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await;
        });
        FakeControlPlane {
            url: format!("http://{addr}"),
            state,
            events,
            server,
        }
    }

    // ---- how it answers

    /// Accepts every later `Interact` with `content`.
    pub fn answer_with(&self, content: Value) {
        *self.state.answer.lock().unwrap() = content;
    }

    /// Answers every later `Interact` with `decline`.
    pub fn decline_all(&self) {
        self.state.decline.store(true, Ordering::SeqCst);
    }

    /// The next `n` `Interact` calls fail with UNAVAILABLE ("replica
    /// gone"); they are recorded all the same.
    pub fn refuse_interacts(&self, n: usize) {
        self.state.refuse_interacts.store(n, Ordering::SeqCst);
    }

    /// Hands `calls` to the next sidecar that says hello, in `adopt`.
    pub fn adopt_on_hello(&self, calls: impl IntoIterator<Item = BackgroundCall>) {
        self.state.adopt_on_hello.lock().unwrap().extend(calls);
    }

    /// Marks the stored record of `id` cancelled, as the control plane does
    /// before it calls the sidecar.
    pub fn cancel(&self, id: &str) {
        if let Some(r) = self.state.records.lock().unwrap().get_mut(id) {
            r.status = "cancelled".into();
        }
    }

    /// Sends `message` on every open report stream; returns how many.
    pub fn push(&self, message: ControlMessage) -> usize {
        let mut open = self.state.open.lock().unwrap();
        open.retain(|tx| tx.unbounded_send(message.clone()).is_ok());
        open.len()
    }

    /// Stage D: makes `token` the server's access token: sent at once on
    /// every open report stream, and after every later `welcome`. Returns
    /// how many open streams it was sent on.
    pub fn send_access_token(&self, token: AccessToken) -> usize {
        *self.state.access_token.lock().unwrap() = Some(token.clone());
        self.push(ControlMessage {
            message: Some(control_message::Message::AccessToken(token)),
        })
    }

    /// Every `token_rejected` report received, in order.
    pub fn token_rejections(&self) -> Vec<TokenRejected> {
        self.state.token_rejections.lock().unwrap().clone()
    }

    /// Ends every open report stream (the sidecar must come back).
    pub fn break_streams(&self) {
        let mut token = self.state.streams.lock().unwrap();
        token.cancel();
        *token = CancellationToken::new();
    }

    // ---- what it saw

    /// Every `UpdateBackgroundCall` received, in order.
    pub fn all_updates(&self) -> Vec<BackgroundCall> {
        self.state.updates.lock().unwrap().clone()
    }

    /// The updates of background call `id`, in order.
    pub fn updates(&self, id: &str) -> Vec<BackgroundCall> {
        self.state
            .updates
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.id == id)
            .cloned()
            .collect()
    }

    /// The stored record of `id`.
    pub fn record(&self, id: &str) -> Option<BackgroundCall> {
        self.state.records.lock().unwrap().get(id).cloned()
    }

    /// Waits (up to 60 s) until the stored record of `id` is terminal.
    pub async fn finished(&self, id: &str) -> BackgroundCall {
        let deadline = tokio::time::Instant::now() + FINISH_LIMIT;
        loop {
            if let Some(r) = self.record(id)
                && terminal(&r.status)
            {
                return r;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "background call {id} not finished within {FINISH_LIMIT:?}: {:?}",
                self.record(id)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every `Interact` received, in order.
    pub fn interacts(&self) -> Vec<InteractRequest> {
        self.state.interacts.lock().unwrap().clone()
    }

    /// Every `CompleteInteraction` received, in order.
    pub fn completes(&self) -> Vec<CompleteInteractionRequest> {
        self.state.completes.lock().unwrap().clone()
    }

    /// The sidecar ids of every `hello`, in order.
    pub fn hellos(&self) -> Vec<String> {
        self.state.hellos.lock().unwrap().clone()
    }

    // ---- events, in order

    /// The next event `pick` accepts (others are skipped), within 30 s.
    pub async fn next<T>(&mut self, what: &str, mut pick: impl FnMut(Event) -> Option<T>) -> T {
        tokio::time::timeout(EVENT_LIMIT, async {
            loop {
                let event = self.events.recv().await.expect("the fake serves");
                if let Some(t) = pick(event) {
                    return t;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {what} within {EVENT_LIMIT:?}"))
    }

    /// The next `Register` request.
    pub async fn register(&mut self) -> RegisterRequest {
        self.next("Register", |e| match e {
            Event::Register(r) => Some(r),
            _ => None,
        })
        .await
    }

    /// The next report `pick` accepts.
    pub async fn report(
        &mut self,
        what: &str,
        mut pick: impl FnMut(&sidecar_report::Report) -> bool,
    ) -> sidecar_report::Report {
        self.next(what, |e| match e {
            Event::Report(r) if pick(&r) => Some(r),
            _ => None,
        })
        .await
    }

    /// The next catalogue snapshot and its tool names.
    pub async fn catalogue(&mut self) -> (Vec<String>, CatalogueSnapshot) {
        let r = self
            .report("catalogue", |r| {
                matches!(r, sidecar_report::Report::Catalogue(_))
            })
            .await;
        let sidecar_report::Report::Catalogue(c) = r else {
            unreachable!()
        };
        let names = c
            .tools_json
            .iter()
            .map(|t| {
                serde_json::from_str::<Value>(t).expect("a tool is JSON")["name"]
                    .as_str()
                    .expect("a tool has a name")
                    .to_owned()
            })
            .collect();
        (names, c)
    }
}
