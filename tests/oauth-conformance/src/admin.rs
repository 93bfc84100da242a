//! The admin: starts an authorization (`AdminService.AuthorizeServer`)
//! and plays the browser. The suite's authorization server does no login
//! or consent: it redirects at once to the `redirect_uri`, the control
//! plane's callback, so the authorization URL is fetched without
//! following redirects and its `Location` is fetched next, as a browser
//! would. Then the server's OAuth state must become `authorized`.
//!
//! A refusal anywhere (the control plane will not start, the
//! authorization server does not redirect, the callback page reports a
//! failure) is terminal. Neither the callback URL (it carries the code)
//! nor any token is logged.

use crate::gateway::SERVER;
use anyhow::{Context, bail};
use std::time::{Duration, Instant};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::admin_service_client::AdminServiceClient;
use tonic::transport::Channel;

/// How many authorizations after the first one a run may make (step-up,
/// a refused grant, a new authorization server).
pub const MAX_REAUTHORIZATIONS: u32 = 3;

/// How long an authorized state may take to show after the callback.
const AUTHORIZED_WITHIN: Duration = Duration::from_secs(10);

/// The admin's connection and what it did.
#[derive(Debug)]
pub struct Admin {
    client: AdminServiceClient<Channel>,
    http: reqwest::Client,
    /// Authorizations finished or tried.
    authorizations: u32,
}

/// At most `n` characters of `s` on one line, markup removed.
fn excerpt(s: &str, n: usize) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in s.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                out.push(' ');
            }
            c if !in_tag => out.push(if c.is_control() { ' ' } else { c }),
            _ => {}
        }
    }
    let words: Vec<&str> = out.split_whitespace().collect();
    words
        .join(" ")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
        .chars()
        .take(n)
        .collect()
}

/// `url` without its query (which may carry a code or a state).
fn without_query(url: &str) -> String {
    url.split(['?', '#']).next().unwrap_or_default().to_owned()
}

impl Admin {
    /// Connects to the control plane's gRPC `endpoint`.
    pub async fn connect(endpoint: &str) -> anyhow::Result<Admin> {
        let client = AdminServiceClient::connect(endpoint.to_owned())
            .await
            .with_context(|| format!("connect to {endpoint}"))?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(15))
            .build()
            .context("an HTTP client")?;
        Ok(Admin {
            client,
            http,
            authorizations: 0,
        })
    }

    /// The server's status.
    pub async fn server_status(&mut self) -> anyhow::Result<pb::ServerStatus> {
        Ok(self
            .client
            .get_server_status(pb::GetServerStatusRequest {
                name: SERVER.into(),
            })
            .await
            .context("GetServerStatus")?
            .into_inner())
    }

    /// The server's OAuth status.
    pub async fn oauth(&mut self) -> anyhow::Result<pb::OAuthStatus> {
        self.server_status()
            .await?
            .oauth
            .context("an oauth server has an oauth status")
    }

    /// Whether another authorization is allowed.
    pub fn may_reauthorize(&self) -> bool {
        self.authorizations <= MAX_REAUTHORIZATIONS
    }

    /// Authorizes the server once, as an admin with a browser. Errors: a
    /// refusal at any step, or the state not becoming `authorized`.
    pub async fn authorize(&mut self) -> anyhow::Result<()> {
        self.authorizations += 1;
        let n = self.authorizations;
        let started = self
            .client
            .authorize_server(pb::AuthorizeServerRequest {
                name: SERVER.into(),
                scopes: vec![],
            })
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "authorization {n}: the control plane refused to start it ({:?}): {}",
                    e.code(),
                    e.message()
                )
            })?
            .into_inner();
        tracing::info!(
            authorization = n,
            issuer = %started.issuer,
            registration = %started.registration,
            scopes = ?started.scopes,
            endpoint = %without_query(&started.authorization_url),
            "authorization started; opening its URL"
        );
        let r = self
            .http
            .get(&started.authorization_url)
            .send()
            .await
            .with_context(|| format!("authorization {n}: GET the authorization URL"))?;
        let location = r
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let Some(location) = location.filter(|_| r.status().is_redirection()) else {
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            bail!(
                "authorization {n}: the authorization server did not redirect ({status}): {}",
                excerpt(&body, 300)
            );
        };
        tracing::info!(authorization = n, to = %without_query(&location), "redirected; following to the callback");
        let r = self
            .http
            .get(&location)
            .send()
            .await
            .with_context(|| format!("authorization {n}: GET the callback"))?;
        let status = r.status();
        let page = excerpt(&r.text().await.unwrap_or_default(), 400);
        if !status.is_success() {
            bail!("authorization {n}: the callback refused it ({status}): {page}");
        }
        tracing::info!(authorization = n, %status, page = %page, "callback answered");
        let deadline = Instant::now() + AUTHORIZED_WITHIN;
        loop {
            let st = self.oauth().await?;
            if st.state == "authorized" {
                tracing::info!(authorization = n, generation = st.generation, scopes = ?st.scopes, "authorized");
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "authorization {n}: the state is {:?} ({}), not authorized, {} s after the callback",
                    st.state,
                    st.reason,
                    AUTHORIZED_WITHIN.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
