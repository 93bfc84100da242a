//! Stage D in the upstream session: the access token of an `auth =
//! "oauth"` server ([`crate::oauth`]) on every HTTP request, and what the
//! server's refusals do (MCP basic/authorization, "Token Handling" and
//! "Scope Challenge Handling"). [`send`] wraps each request of
//! [`super::http`] (the POSTs, the standalone GET stream, the resuming
//! GETs); the DELETE that ends a session only carries the token
//! ([`authorize`]).
//!
//! - The token is read when the request is sent, so a new one is used by
//!   the next request, on the same connection.
//! - No token to send (none yet, or the state `needs_authorization` /
//!   `needs_reauthorization`): nothing is sent; the request fails at once
//!   with [`UpstreamError::NotAuthorized`] and the control plane's reason.
//! - 401: the refusal is reported ([`Tokens::reject`]: one `TokenRejected`
//!   per generation), the request waits for the control plane's next token
//!   (at most [`Tokens::refresh_wait`], 10 s) and is sent again, once,
//!   with it: safe, since a server answering 401 did not process it (RFC
//!   6750 §3.1). No new token in time, or a second refusal, is
//!   [`UpstreamError::Unauthorized`]; a state without a token is
//!   [`UpstreamError::NotAuthorized`].
//! - 403 with `error="insufficient_scope"`: reported, and the request
//!   fails at once with [`UpstreamError::InsufficientScope`] (the needed
//!   scope from the challenge); only an admin can widen the grant, so it
//!   is not retried. Any other 403 is [`UpstreamError::Unauthorized`].

use super::error::UpstreamError;
use crate::oauth::{AccessToken, Tokens};
use reqwest::header::{AUTHORIZATION, HeaderValue, WWW_AUTHENTICATE};

/// Why [`send`] returned no response.
#[derive(Debug)]
pub enum Failed {
    /// The request could not be sent or answered (the caller names it).
    Send(reqwest::Error),
    /// Refused, or not sent for want of a token.
    Auth(UpstreamError),
}

impl Failed {
    /// A send failure, without the URL reqwest puts in its text: the URL
    /// may carry a secret (`?api_key=`); callers name the server.
    pub fn send(e: reqwest::Error) -> Self {
        Failed::Send(e.without_url())
    }
}

impl From<UpstreamError> for Failed {
    fn from(e: UpstreamError) -> Self {
        Failed::Auth(e)
    }
}

/// A server's refusal of a request.
enum Refusal {
    /// 401.
    Unauthorized(Option<String>),
    /// 403 with `error="insufficient_scope"`.
    InsufficientScope(String),
    /// Any other 403.
    Forbidden(Option<String>),
}

/// Sends the request `build` makes. Without `tokens` (a server that is not
/// `auth = "oauth"`) it is sent as built and any answer returned. With
/// them it carries `Authorization: Bearer` and a refusal is handled as the
/// module says: the answer returned is never 401 or 403. `build` is called
/// once per attempt.
pub async fn send(
    tokens: Option<&Tokens>,
    build: impl Fn() -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, Failed> {
    let Some(tokens) = tokens else {
        return build().send().await.map_err(Failed::send);
    };
    let (token, resp) = send_with(tokens, &build).await?;
    match refusal(&resp) {
        None => return Ok(resp),
        Some(Refusal::Unauthorized(challenge)) => {
            tokens.reject(token.generation, 401, challenge.as_deref());
            tracing::info!(server = %tokens.server(), generation = token.generation, wait_ms = tokens.refresh_wait().as_millis() as u64, "HTTP 401: waiting for a new access token to send the request again");
            match tokens.replaced(token.generation).await {
                Some(next) if next.is_authorized() => {}
                Some(_) => return Err(not_authorized(tokens).into()),
                None => return Err(unauthorized(tokens, 401, &token, challenge).into()),
            }
        }
        Some(other) => return Err(refused(tokens, &token, other).into()),
    }
    // The one retry after a 401, with the new token.
    let (token, resp) = send_with(tokens, &build).await?;
    match refusal(&resp) {
        None => Ok(resp),
        Some(other) => Err(refused(tokens, &token, other).into()),
    }
}

/// `req` with the current token when there is one to send (the DELETE that
/// ends a session: best effort, no retry); `None` when there is none, so
/// nothing is to be sent.
pub fn authorize(
    tokens: Option<&Tokens>,
    req: reqwest::RequestBuilder,
) -> Option<reqwest::RequestBuilder> {
    let Some(tokens) = tokens else {
        return Some(req);
    };
    let token = tokens.authorized()?;
    Some(req.header(AUTHORIZATION, bearer(&token)))
}

/// Sends one attempt with the current token.
async fn send_with(
    tokens: &Tokens,
    build: &impl Fn() -> reqwest::RequestBuilder,
) -> Result<(AccessToken, reqwest::Response), Failed> {
    let token = tokens.authorized().ok_or_else(|| not_authorized(tokens))?;
    let resp = build()
        .header(AUTHORIZATION, bearer(&token))
        .send()
        .await
        .map_err(Failed::send)?;
    Ok((token, resp))
}

/// `Bearer <token>`, marked sensitive (never shown by `Debug`).
fn bearer(token: &AccessToken) -> HeaderValue {
    // `is_authorized` admits visible ASCII only: always a valid value.
    let mut value = HeaderValue::from_str(&format!("Bearer {}", token.secret()))
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer"));
    value.set_sensitive(true);
    value
}

fn refusal(resp: &reqwest::Response) -> Option<Refusal> {
    let challenge = || {
        resp.headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    match resp.status().as_u16() {
        401 => Some(Refusal::Unauthorized(challenge())),
        403 => Some(match challenge() {
            Some(c)
                if param(&c, "error")
                    .is_some_and(|e| e.eq_ignore_ascii_case("insufficient_scope")) =>
            {
                Refusal::InsufficientScope(c)
            }
            other => Refusal::Forbidden(other),
        }),
        _ => None,
    }
}

/// The error of a refusal other than a first 401 (a 401 to the retry, a
/// 403); an insufficient scope is reported to the control plane first.
fn refused(tokens: &Tokens, token: &AccessToken, refusal: Refusal) -> UpstreamError {
    match refusal {
        Refusal::Unauthorized(challenge) => unauthorized(tokens, 401, token, challenge),
        Refusal::Forbidden(challenge) => unauthorized(tokens, 403, token, challenge),
        Refusal::InsufficientScope(challenge) => {
            tokens.reject(token.generation, 403, Some(&challenge));
            UpstreamError::InsufficientScope {
                server: tokens.server().to_owned(),
                scope: param(&challenge, "scope").filter(|s| !s.trim().is_empty()),
                www_authenticate: challenge,
            }
        }
    }
}

fn unauthorized(
    tokens: &Tokens,
    status: u16,
    token: &AccessToken,
    www_authenticate: Option<String>,
) -> UpstreamError {
    UpstreamError::Unauthorized {
        server: tokens.server().to_owned(),
        status,
        www_authenticate,
        sent_authorization: true,
        access_token: Some(token.generation),
    }
}

/// [`UpstreamError::NotAuthorized`] with the current reason.
pub fn not_authorized(tokens: &Tokens) -> UpstreamError {
    UpstreamError::NotAuthorized {
        server: tokens.server().to_owned(),
        reason: tokens.reason(),
    }
}

/// The value of auth-param `name` in a `WWW-Authenticate` challenge (RFC
/// 9110 §11.6.1: `scheme name=token, name="quoted \"string\""`), the
/// first one of that name, unquoted; names compared without case.
pub fn param(challenge: &str, name: &str) -> Option<String> {
    let mut rest = challenge;
    loop {
        rest = rest.trim_start_matches(|c: char| c == ',' || c.is_ascii_whitespace());
        if rest.is_empty() {
            return None;
        }
        let end = rest
            .find(|c: char| c == '=' || c == ',' || c.is_ascii_whitespace())
            .unwrap_or(rest.len());
        let (key, after) = rest.split_at(end);
        let after_ws = after.trim_start_matches(|c: char| c.is_ascii_whitespace());
        let Some(value_part) = after_ws.strip_prefix('=') else {
            // An auth scheme (or a token68 without '='): skip it.
            rest = after;
            continue;
        };
        let value_part = value_part.trim_start_matches(|c: char| c.is_ascii_whitespace());
        let (value, next) = match value_part.strip_prefix('"') {
            Some(quoted) => {
                let mut value = String::new();
                let mut chars = quoted.char_indices();
                let mut end = quoted.len();
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            if let Some((_, escaped)) = chars.next() {
                                value.push(escaped);
                            }
                        }
                        '"' => {
                            end = i + 1;
                            break;
                        }
                        c => value.push(c),
                    }
                }
                (value, &quoted[end.min(quoted.len())..])
            }
            None => {
                let end = value_part
                    .find(|c: char| c == ',' || c.is_ascii_whitespace())
                    .unwrap_or(value_part.len());
                (value_part[..end].to_owned(), &value_part[end..])
            }
        };
        if key.eq_ignore_ascii_case(name) {
            return Some(value);
        }
        rest = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenge_params() {
        let c = r#"Bearer error="insufficient_scope", scope="mcp:read mcp:write", resource_metadata="https://x/.well-known/oauth-protected-resource/mcp""#;
        assert_eq!(param(c, "error").as_deref(), Some("insufficient_scope"));
        assert_eq!(param(c, "scope").as_deref(), Some("mcp:read mcp:write"));
        assert_eq!(
            param(c, "resource_metadata").as_deref(),
            Some("https://x/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(param(c, "realm"), None);
        assert_eq!(
            param(
                r#"Bearer realm="a \"b\"",ERROR=insufficient_scope"#,
                "error"
            )
            .as_deref(),
            Some("insufficient_scope")
        );
        assert_eq!(
            param(r#"Bearer realm="a \"b\"""#, "realm").as_deref(),
            Some("a \"b\"")
        );
        assert_eq!(
            param("Basic realm=x, Bearer scope=files:read", "scope").as_deref(),
            Some("files:read")
        );
        assert_eq!(param("Bearer", "scope"), None);
        assert_eq!(
            param(r#"Bearer scope="unterminated"#, "scope").as_deref(),
            Some("unterminated")
        );
    }
}
