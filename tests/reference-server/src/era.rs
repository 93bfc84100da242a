//! Protocol eras, and the thin layer that holds the server to one of them.
//!
//! rmcp 3.11 is a dual-era SDK: one `ServerHandler` answers both the legacy
//! `initialize` handshake and the modern `server/discover` + per-request
//! `_meta` lifecycle. `supported_protocol_versions` narrows the versions, not
//! the lifecycles, and rmcp validates a request's `_meta` *before* the handler
//! sees it, so the handler alone cannot answer the other era's opener the way
//! a single-era server would:
//!
//! * legacy-only: rmcp answers a `server/discover` with `-32022 Unsupported
//!   protocol version` (a *modern* error, telling a dual-era client that the
//!   server is modern) or, without `_meta`, `-32602`. A 2025-11-25 server
//!   knows no such method: `-32601`.
//! * modern-only: rmcp rejects `initialize` with `-32022` naming the supported
//!   versions, as the spec asks, but on stdio the failed handshake also ends
//!   the process, and on HTTP it comes back as `200`, where the spec wants
//!   `400`.
//!
//! [`EraGate`] (stdio) and [`gate_http`] (Streamable HTTP) therefore answer
//! those openers themselves; everything else goes to rmcp untouched.
//!
//! The same layer repairs, on the way out, the one 2026-07-28 result rmcp
//! serialises against the spec: a URL elicitation's absent `elicitationId`,
//! which the interaction tools produce ([`strip_empty_elicitation_ids`];
//! stdio in [`EraGate`], HTTP in [`fix_http_response`]).
//!
//! On stdio, [`EraGate`] also gives each `subscriptions/listen` request its
//! [`ListenTicket`](crate::listens::ListenTicket) (see [`crate::listens`]).

use std::{borrow::Cow, sync::Arc};

use axum::{
    body::{Body, to_bytes},
    extract::{Request, State},
    http::{StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::{
    ErrorData, RoleServer,
    model::{
        ClientJsonRpcMessage, ClientRequest, ConstString, CustomResult, DiscoverRequestMethod,
        ErrorCode, GetExtensions, InitializeResultMethod, ProtocolVersion, ServerJsonRpcMessage,
        ServerResult,
    },
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};
use serde_json::Value;

use crate::listens::PendingListens;

/// Whether a request of this negotiated version uses the 2026-07-28
/// lifecycle (per-request `_meta`, MRTR instead of server-to-client requests).
pub fn is_modern(version: Option<&ProtocolVersion>) -> bool {
    version.is_some_and(|version| *version >= ProtocolVersion::V_2026_07_28)
}

/// Which protocol era(s) the server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Era {
    /// Legacy only: `initialize` handshake (2024-11-05..=2025-11-25); no `server/discover`.
    #[value(name = "2025-11-25")]
    Legacy,
    /// Modern only: `server/discover` and per-request `_meta` (2026-07-28); no `initialize`.
    #[value(name = "2026-07-28")]
    Modern,
    /// Both, selected by how the client opens (rmcp's own behaviour).
    #[value(name = "dual")]
    Dual,
}

impl Era {
    /// Protocol versions served in this era, oldest first.
    pub fn supported_versions(self) -> &'static [ProtocolVersion] {
        match self {
            Self::Legacy => ProtocolVersion::known_up_to(&ProtocolVersion::LATEST_WITH_INITIALIZE),
            Self::Modern => &[ProtocolVersion::V_2026_07_28],
            Self::Dual => ProtocolVersion::KNOWN_VERSIONS,
        }
    }

    /// The error that answers `server/discover` when this era does not serve it.
    pub fn discover_error(self) -> Option<ErrorData> {
        (self == Self::Legacy).then(|| {
            ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                "Method not found: server/discover",
                None,
            )
        })
    }

    /// The error this era answers `request` with before rmcp sees it, if any.
    fn reject(self, request: &ClientRequest) -> Option<ErrorData> {
        match request {
            // Matched by name: without `params` rmcp parses it as a custom request.
            request if request.method() == DiscoverRequestMethod::VALUE => self.discover_error(),
            ClientRequest::InitializeRequest(init) if self == Self::Modern => {
                Some(ErrorData::unsupported_protocol_version(
                    init.params.protocol_version.clone(),
                    self.supported_versions(),
                ))
            }
            _ => None,
        }
    }
}

/// A transport wrapper (used on stdio) that answers the other era's lifecycle
/// opener itself, tickets each `subscriptions/listen` request in `listens`,
/// and passes every other message through.
#[derive(Debug)]
pub struct EraGate<T> {
    inner: T,
    era: Era,
    listens: Arc<PendingListens>,
}

impl<T> EraGate<T> {
    /// Gates `inner` to `era`, counting listen requests in `listens`.
    pub fn new(inner: T, era: Era, listens: Arc<PendingListens>) -> Self {
        Self {
            inner,
            era,
            listens,
        }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for EraGate<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        fix_outgoing(&mut item);
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let mut message = self.inner.receive().await?;
            let ClientJsonRpcMessage::Request(request) = &mut message else {
                return Some(message);
            };
            if let ClientRequest::SubscriptionsListenRequest(_) = &request.request {
                let ticket = self.listens.ticket();
                request.request.extensions_mut().insert(ticket);
            }
            let Some(error) = self.era.reject(&request.request) else {
                return Some(message);
            };
            let reply = ServerJsonRpcMessage::error(error, Some(request.id.clone()));
            if let Err(error) = self.inner.send(reply).await {
                tracing::warn!(%error, "failed to send an era rejection");
                return None;
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Axum middleware doing [`EraGate`]'s job on the Streamable HTTP endpoint,
/// with the statuses rmcp gives these codes on its stateless path: `-32601`
/// as `404` (a 4xx without a modern error body, so a dual-era client falls
/// back to `initialize`) and `-32022` as `400`.
///
/// Only bodies that may hold `initialize` or `server/discover` are parsed:
/// modern requests name their method in `Mcp-Method`.
pub async fn gate_http(State(era): State<Era>, request: Request, next: Next) -> Response {
    let opener = [InitializeResultMethod::VALUE, DiscoverRequestMethod::VALUE];
    if let Some(method) = request.headers().get("mcp-method")
        && !opener.iter().any(|opener| method == opener)
    {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_BODY_BYTES).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    if let Ok(ClientJsonRpcMessage::Request(request)) = serde_json::from_slice(&bytes)
        && let Some(error) = era.reject(&request.request)
    {
        let status = match error.code {
            ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            _ => StatusCode::BAD_REQUEST,
        };
        let reply = ServerJsonRpcMessage::error(error, Some(request.id));
        return (status, axum::Json(reply)).into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Rewrites a response whose rmcp serialisation departs from the spec
/// (see [`strip_empty_elicitation_ids`]) into the raw JSON it should be.
fn fix_outgoing(message: &mut ServerJsonRpcMessage) {
    if let ServerJsonRpcMessage::Response(response) = message
        && let ServerResult::InputRequiredResult(_) = &response.result
        && let Ok(mut value) = serde_json::to_value(&response.result)
        && strip_empty_elicitation_ids(&mut value)
    {
        response.result = ServerResult::CustomResult(CustomResult(value));
    }
}

/// Axum middleware doing [`fix_outgoing`]'s job on Streamable HTTP JSON
/// responses (2026-07-28 answers are JSON, not SSE, on this server). Only
/// installed with `--interactions`, the only source of such results.
pub async fn fix_http_response(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // Our own output, which may be larger than any request (a `--resources`
    // binary resource is several megabytes): no limit.
    let Ok(bytes) = to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let may_need_fixing = bytes.windows(16).any(|w| w == b"\"input_required\"");
    if may_need_fixing
        && let Ok(mut message) = serde_json::from_slice::<Value>(&bytes)
        && let Some(result) = message.get_mut("result")
        && strip_empty_elicitation_ids(result)
    {
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(parts, Body::from(message.to_string()));
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// rmcp serialises a URL elicitation's missing 2026-07-28 `elicitationId` as
/// `""`. Drops that from every URL-mode input request of an
/// `input_required` result; returns whether it changed anything.
pub fn strip_empty_elicitation_ids(result: &mut Value) -> bool {
    if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
        return false;
    }
    let Some(requests) = result
        .get_mut("inputRequests")
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    let mut changed = false;
    for request in requests.values_mut() {
        if let Some(params) = request.get_mut("params").and_then(Value::as_object_mut)
            && params.get("mode").and_then(Value::as_str) == Some("url")
            && params.get("elicitationId").and_then(Value::as_str) == Some("")
        {
            params.remove("elicitationId");
            changed = true;
        }
    }
    changed
}

/// Largest request body accepted over HTTP (rmcp's default).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
