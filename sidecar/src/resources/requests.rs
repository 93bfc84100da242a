//! The three stage E requests of `SidecarCalls` ([`Requests`]):
//! `resources/read`, `prompts/get` and `completion/complete`, each on the
//! session's connection ([`SessionPool::lease`]) through
//! [`crate::upstream::Upstream::request_in`], which runs the protocol's retries (2026-07-28
//! `input_required` rounds for the first two, a -32042 URL elicitation)
//! and attributes 2025-11-25 questions to the session. `params` is
//! forwarded exactly as the engine gave it (`uri` byte-exact: never
//! normalised, never fetched by the sidecar, whatever its scheme; the
//! server is always asked).
//!
//! One [`Deadline`] (the request's `timeout_ms`, set at the edge) bounds
//! the whole request, waiting for a slot included. At most
//! `max_concurrent_reads` reads and prompts (default
//! [`super::DEFAULT_MAX_CONCURRENT_READS`]) run at once, from the request
//! upstream to the processed response, so the memory their answers take
//! is bounded (each up to the server's `max_message_bytes`, decoded and
//! encoded once more); the others wait for a slot. A request waiting for
//! its user (an elicitation) holds its slot meanwhile. Completions are
//! small and take none.
//!
//! Failures are [`CallError`]s: a resource the server does not have
//! (-32002 or -32602) is [`CallError::ResourceNotFound`]; params it
//! refuses (-32602 to a prompt or a completion) [`CallError::InvalidParams`];
//! a server without completions (-32601) [`CallError::NoCompletions`]; an
//! answer over the server's `max_message_bytes`, or a response over the
//! gRPC message limit, [`CallError::TooLarge`]; the rest as for a tool
//! call.

use super::content;
use crate::error::{CallError, Deadline, quoted, within};
use crate::interactions::CallContext;
use crate::pool::SessionPool;
use crate::upstream::UpstreamError;
use serde_json::Value;
use std::sync::Arc;
use switchyard_mcp::{jsonrpc, methods};
use switchyard_proto::v1::{CompleteResponse, GetPromptResponse, ReadResourceResponse};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// One stage E request, as the edge decoded it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The method's whole params object, forwarded as given.
    pub params: Value,
    /// Its session, run and roots (interactions); `tool` is filled in from
    /// the params (the URI or the prompt's name).
    pub context: CallContext,
    /// When it reached the sidecar.
    pub started: Instant,
    /// When it must be over; `None`: no limit but the server's
    /// `request_timeout`.
    pub deadline: Option<Deadline>,
    /// `resources/read`: every content becomes an attachment.
    pub attach: bool,
    /// The MCP endpoint: the result goes back exactly as the server sent
    /// it (`result_json`), without the size rules.
    pub raw: bool,
}

/// The stage E requests of one server. Cheap to clone; clones share the
/// slots.
#[derive(Debug, Clone)]
pub struct Requests {
    pool: SessionPool,
    slots: Arc<Semaphore>,
}

impl Requests {
    /// Requests through `pool`, at most `max_concurrent_reads` reads and
    /// prompts at once (at least 1).
    pub fn new(pool: SessionPool, max_concurrent_reads: usize) -> Self {
        Requests {
            pool,
            slots: Arc::new(Semaphore::new(max_concurrent_reads.max(1))),
        }
    }

    /// `resources/read` of `params.uri` (see the module docs), its
    /// contents processed by the size rules ([`content::read`]).
    pub async fn read_resource(&self, request: Request) -> Result<ReadResourceResponse, CallError> {
        let method = methods::RESOURCES_READ;
        let uri = str_param(&request.params, "uri");
        let about = quoted(&uri);
        let lease = self.pool.lease(&request.context.session_id);
        let upstream = lease.upstream();
        let server = upstream.name();
        let deadline = request.deadline;
        let _slot = within(deadline, server, method, &about, self.slots.acquire())
            .await?
            .map_err(|_| CallError::internal("the read slots are closed"))?;
        tracing::debug!(%server, %uri, session = %request.context.session_id, "resources/read");
        let sent = upstream.request_in(method, &request.params, &request.context);
        let result = within(deadline, server, method, &about, sent)
            .await?
            .map_err(|e| match e {
                UpstreamError::Rpc {
                    code: jsonrpc::RESOURCE_NOT_FOUND | jsonrpc::INVALID_PARAMS,
                    ..
                } => CallError::ResourceNotFound {
                    server: server.to_owned(),
                    uri: uri.clone(),
                    error: e.error_object().unwrap_or_default(),
                    message: rpc_message(e),
                },
                e => failed(server, method, &about, e),
            })?;
        if request.raw {
            let response = ReadResourceResponse {
                server: server.to_owned(),
                uri,
                result_json: result.to_string(),
                duration_ms: request.started.elapsed().as_millis() as u64,
                ..Default::default()
            };
            fits(&response, server, method, &about)?;
            return Ok(response);
        }
        let read = content::read(server, &uri, result, request.attach)?;
        let response = ReadResourceResponse {
            server: server.to_owned(),
            uri,
            text: read.text,
            contents: read.contents,
            attachments: read.attachments,
            duration_ms: request.started.elapsed().as_millis() as u64,
            result_json: String::new(),
        };
        fits(&response, server, method, &about)?;
        Ok(response)
    }

    /// `prompts/get` of `params.name` (see the module docs), its messages
    /// processed by the size rules ([`content::prompt`]).
    pub async fn get_prompt(&self, request: Request) -> Result<GetPromptResponse, CallError> {
        let method = methods::PROMPTS_GET;
        let name = str_param(&request.params, "name");
        let about = quoted(&name);
        let lease = self.pool.lease(&request.context.session_id);
        let upstream = lease.upstream();
        let server = upstream.name();
        let deadline = request.deadline;
        let _slot = within(deadline, server, method, &about, self.slots.acquire())
            .await?
            .map_err(|_| CallError::internal("the read slots are closed"))?;
        tracing::debug!(%server, prompt = %name, session = %request.context.session_id, "prompts/get");
        let sent = upstream.request_in(method, &request.params, &request.context);
        let result = within(deadline, server, method, &about, sent)
            .await?
            .map_err(|e| refused(server, method, &about, e))?;
        if request.raw {
            let response = GetPromptResponse {
                server: server.to_owned(),
                name,
                result_json: result.to_string(),
                duration_ms: request.started.elapsed().as_millis() as u64,
                ..Default::default()
            };
            fits(&response, server, method, &about)?;
            return Ok(response);
        }
        let prompt = content::prompt(server, &name, result)?;
        let response = GetPromptResponse {
            server: server.to_owned(),
            name,
            description: prompt.description,
            messages: prompt.messages,
            attachments: prompt.attachments,
            text: prompt.text,
            duration_ms: request.started.elapsed().as_millis() as u64,
            result_json: String::new(),
        };
        fits(&response, server, method, &about)?;
        Ok(response)
    }

    /// `completion/complete` of `params.argument` for `params.ref` (see
    /// the module docs).
    pub async fn complete(&self, request: Request) -> Result<CompleteResponse, CallError> {
        let method = methods::COMPLETE;
        let about = reference(&request.params);
        let lease = self.pool.lease(&request.context.session_id);
        let upstream = lease.upstream();
        let server = upstream.name();
        tracing::debug!(%server, reference = %about, session = %request.context.session_id, "completion/complete");
        let sent = upstream.request_in(method, &request.params, &request.context);
        let result = within(request.deadline, server, method, &about, sent)
            .await?
            .map_err(|e| match e {
                UpstreamError::Rpc {
                    code: jsonrpc::METHOD_NOT_FOUND,
                    ..
                } => CallError::NoCompletions {
                    server: server.to_owned(),
                    message: rpc_message(e),
                },
                e => refused(server, method, &about, e),
            })?;
        let mut response = content::completion(server, &about, &result)?;
        if request.raw {
            response.result_json = result.to_string();
        }
        Ok(response)
    }
}

/// The string param `key` (checked at the edge; empty if absent).
fn str_param(params: &Value, key: &str) -> String {
    params
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// What a completion is about, for messages: `ref/prompt "NAME"` or
/// `ref/resource "URI"`.
fn reference(params: &Value) -> String {
    let r = params.get("ref").unwrap_or(&Value::Null);
    let kind = r.get("type").and_then(Value::as_str).unwrap_or("ref");
    let key = if kind == "ref/resource" {
        "uri"
    } else {
        "name"
    };
    format!("{kind} {}", quoted(&str_param(r, key)))
}

fn rpc_message(e: UpstreamError) -> String {
    match e {
        UpstreamError::Rpc { message, .. } => message,
        other => other.to_string(),
    }
}

/// A failure of `method` about `about`: params the server refused
/// (-32602) are [`CallError::InvalidParams`], the rest as [`failed`].
fn refused(server: &str, method: &'static str, about: &str, e: UpstreamError) -> CallError {
    match e {
        UpstreamError::Rpc {
            code: jsonrpc::INVALID_PARAMS,
            ..
        } => CallError::InvalidParams {
            server: server.to_owned(),
            method,
            about: about.to_owned(),
            error: e.error_object().unwrap_or_default(),
            message: rpc_message(e),
        },
        e => failed(server, method, about, e),
    }
}

/// Any other failure of `method` about `about`: an answer over the
/// server's `max_message_bytes` is [`CallError::TooLarge`], the rest the
/// upstream's error, as for a tool call.
fn failed(server: &str, method: &'static str, about: &str, e: UpstreamError) -> CallError {
    match e {
        UpstreamError::MessageTooLarge { size, limit, .. } => CallError::TooLarge {
            server: server.to_owned(),
            method,
            about: about.to_owned(),
            size,
            limit,
            key: "the server's max_message_bytes",
        },
        e => {
            tracing::info!(%server, %method, %about, error = %e, "request failed");
            e.into()
        }
    }
}

/// Whether `response` fits in one gRPC message; else
/// [`CallError::TooLarge`] (sent, it would fail on the wire).
fn fits(
    response: &impl prost::Message,
    server: &str,
    method: &'static str,
    about: &str,
) -> Result<(), CallError> {
    let size = response.encoded_len();
    let limit = switchyard_proto::calls::MAX_MESSAGE_BYTES;
    if size > limit {
        return Err(CallError::TooLarge {
            server: server.to_owned(),
            method,
            about: about.to_owned(),
            size,
            limit,
            key: "the gRPC message limit",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn completions_name_their_reference() {
        assert_eq!(
            reference(&json!({"ref": {"type": "ref/prompt", "name": "team"}})),
            r#"ref/prompt "team""#
        );
        assert_eq!(
            reference(&json!({"ref": {"type": "ref/resource", "uri": "demo://t/{id}"}})),
            r#"ref/resource "demo://t/{id}""#
        );
        assert_eq!(reference(&json!({})), r#"ref """#);
    }

    #[test]
    fn refused_params_are_invalid_arguments_and_the_rest_passes_through() {
        let rpc = |code| UpstreamError::Rpc {
            server: "s".into(),
            method: "prompts/get".into(),
            code,
            message: "Prompt nope not found".into(),
            data: None,
        };
        let e = refused("s", methods::PROMPTS_GET, "\"nope\"", rpc(-32602));
        assert_eq!(
            e.to_string(),
            r#"server s: prompts/get "nope": Prompt nope not found"#
        );
        assert!(matches!(e, CallError::InvalidParams { .. }));
        let e = refused("s", methods::PROMPTS_GET, "\"nope\"", rpc(-32603));
        assert!(matches!(
            e,
            CallError::Upstream(UpstreamError::Rpc { code: -32603, .. })
        ));
        let e = failed(
            "s",
            methods::RESOURCES_READ,
            "\"x\"",
            UpstreamError::MessageTooLarge {
                server: "s".into(),
                method: "resources/read".into(),
                size: 20,
                limit: 10,
            },
        );
        assert_eq!(
            e.to_string(),
            r#"server s: resources/read "x": the answer is 20 bytes or more, over the 10-byte limit (the server's max_message_bytes)"#
        );
    }
}
