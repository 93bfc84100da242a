//! Listen requests received but not yet registered, so that a list change
//! reaches every `subscriptions/listen` request that arrived before it.
//!
//! rmcp sends a listen request's `notifications/subscriptions/acknowledged`
//! *before* it calls `ServerHandler::listen`, which registers the stream's
//! sink and runs in the request's own task. A client may therefore see the
//! acknowledgement, call `add_resource` or `toggle_extra_tool`, and have that
//! call run before the listen handler: no listener yet, no notification.
//!
//! The transport layer, which sees every message before rmcp ([`EraGate`] on
//! stdio, [`track_http_listens`] on Streamable HTTP), attaches a
//! [`ListenTicket`] to each incoming listen request. The ticket is settled
//! when the listen handler has registered its sink ([`ListenTicket::settle`]),
//! or when the request ends without reaching it (rejected, cancelled: its last
//! clone is dropped). Change-triggering tools await [`PendingListens::settled`]
//! before they notify, bounded by [`SETTLE_TIMEOUT`].
//!
//! [`EraGate`]: crate::era::EraGate

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{extract::Request, middleware::Next, response::Response};
use rmcp::{
    RoleServer,
    model::{ConstString, SubscriptionsListenRequestMethod},
    service::RequestContext,
};
use tokio::sync::watch;

/// Longest a change-triggering tool waits for pending listen requests
/// before it notifies the streams registered so far (and logs a warning).
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(2);

/// The number of listen requests received whose ticket is not settled yet.
/// One per process (shared by every connection of an HTTP server).
#[derive(Debug)]
pub struct PendingListens(watch::Sender<usize>);

impl Default for PendingListens {
    fn default() -> Self {
        Self(watch::Sender::new(0))
    }
}

impl PendingListens {
    /// Counts one more listen request; the returned ticket goes into its
    /// extensions.
    pub fn ticket(self: &Arc<Self>) -> ListenTicket {
        self.0.send_modify(|pending| *pending += 1);
        ListenTicket(Arc::new(Ticket {
            pending: self.clone(),
            settled: AtomicBool::new(false),
        }))
    }

    /// Waits until every listen request received so far has registered or
    /// ended, at most [`SETTLE_TIMEOUT`].
    pub async fn settled(&self) {
        let mut pending = self.0.subscribe();
        let wait = pending.wait_for(|&pending| pending == 0);
        if tokio::time::timeout(SETTLE_TIMEOUT, wait).await.is_err() {
            let pending = *self.0.borrow();
            tracing::warn!(
                pending,
                "listen requests still unregistered; notifying anyway"
            );
        }
    }
}

/// One received listen request, until settled. Cheap to clone (the request's
/// extensions must be `Clone`); settles itself when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct ListenTicket(Arc<Ticket>);

#[derive(Debug)]
struct Ticket {
    pending: Arc<PendingListens>,
    settled: AtomicBool,
}

impl ListenTicket {
    /// The ticket of a listen request: in its extensions (stdio) or in its
    /// HTTP request's (Streamable HTTP, where rmcp stores the request parts).
    pub fn of(context: &RequestContext<RoleServer>) -> Option<&Self> {
        let extensions = &context.extensions;
        extensions.get::<Self>().or_else(|| {
            extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Self>())
        })
    }

    /// Marks the request as registered (idempotent).
    pub fn settle(&self) {
        self.0.settle();
    }
}

impl Ticket {
    fn settle(&self) {
        if !self.settled.swap(true, Ordering::SeqCst) {
            self.pending.0.send_modify(|pending| *pending -= 1);
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.settle();
    }
}

/// Axum middleware doing [`EraGate`]'s ticketing on Streamable HTTP:
/// a 2026-07-28 request names its method in `Mcp-Method`.
///
/// [`EraGate`]: crate::era::EraGate
pub async fn track_http_listens(
    axum::extract::State(pending): axum::extract::State<Arc<PendingListens>>,
    mut request: Request,
    next: Next,
) -> Response {
    if request
        .headers()
        .get("mcp-method")
        .is_some_and(|method| method == SubscriptionsListenRequestMethod::VALUE)
    {
        let ticket = pending.ticket();
        request.extensions_mut().insert(ticket);
    }
    next.run(request).await
}
