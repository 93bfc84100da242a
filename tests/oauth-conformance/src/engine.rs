//! The engine: a session with the one server enabled (permission mode
//! `auto`), the server's tools through the gateway, and a call of each
//! with `{}` arguments.
//!
//! Whenever the server does not come up or a call fails, the server's
//! OAuth state decides: `needs_reauthorization` (a refused grant, a token
//! the server keeps refusing), or `authorized` with `step_up_scopes` (a
//! step-up after a 403 `insufficient_scope`), makes the admin authorize
//! again, at most
//! [`MAX_REAUTHORIZATIONS`](crate::admin::MAX_REAUTHORIZATIONS) times in
//! all; `authorized` is given a short while (a refresh the sidecar asked
//! for may be under way); anything else ends the run.

use crate::admin::Admin;
use crate::gateway::SERVER;
use anyhow::{Context, bail};
use std::time::{Duration, Instant};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use tonic::transport::Channel;

/// How long the server may take to come up after an authorization.
const UP_WITHIN: Duration = Duration::from_secs(20);

/// Tries of one call, re-authorizations included.
const CALL_TRIES: u32 = 5;

/// What to do after something failed: authorize again, or try again
/// (while the state is `authorized`). Errors: neither applies.
async fn recover(admin: &mut Admin, what: &str) -> anyhow::Result<()> {
    let st = admin.oauth().await?;
    match st.state.as_str() {
        "authorized" if !st.step_up_scopes.is_empty() && admin.may_reauthorize() => {
            tracing::info!(reason = %st.reason, scopes = ?st.step_up_scopes, "{what}: a step-up asks for more scopes; authorizing again");
            admin.authorize().await
        }
        "needs_reauthorization" if admin.may_reauthorize() => {
            tracing::info!(reason = %st.reason, scopes = ?st.scopes, "{what}: the server needs re-authorization; authorizing again");
            admin.authorize().await
        }
        "needs_reauthorization" => bail!(
            "{what}: the server needs re-authorization again ({}), after {} re-authorizations: giving up",
            st.reason,
            crate::admin::MAX_REAUTHORIZATIONS
        ),
        "authorized" => {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Ok(())
        }
        other => bail!(
            "{what}: the server's OAuth state is {other:?} ({})",
            st.reason
        ),
    }
}

/// Waits until the server is `up` (a sidecar reported its catalogue).
async fn wait_up(admin: &mut Admin) -> anyhow::Result<pb::ServerStatus> {
    let mut deadline = Instant::now() + UP_WITHIN;
    loop {
        let st = admin.server_status().await?;
        if st.state == "up" {
            tracing::info!(tools = st.tool_count, protocol = %st.protocol_version, "the server is up");
            return Ok(st);
        }
        let oauth = st.oauth.clone().unwrap_or_default();
        if oauth.state == "needs_reauthorization" {
            recover(admin, "connecting").await?;
            deadline = Instant::now() + UP_WITHIN;
            continue;
        }
        if Instant::now() > deadline {
            let link = st
                .sidecars
                .iter()
                .map(|s| format!("{} {} {}", s.sidecar_id, s.upstream_state, s.last_error))
                .collect::<Vec<_>>()
                .join(", ");
            bail!(
                "the server is {:?}, not up, {} s after its authorization (sidecars: [{link}]; oauth: {} {})",
                st.state,
                UP_WITHIN.as_secs(),
                oauth.state,
                oauth.reason
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Lists the server's tools and calls each one.
pub async fn exercise(endpoint: &str, admin: &mut Admin) -> anyhow::Result<()> {
    let mut engine = EngineServiceClient::connect(endpoint.to_owned())
        .await
        .with_context(|| format!("connect to {endpoint}"))?;
    let session = engine
        .create_session(pb::CreateSessionRequest {
            enabled_servers: vec![SERVER.into()],
            permission_mode: pb::PermissionMode::Auto as i32,
            roots: vec![],
        })
        .await
        .context("CreateSession")?
        .into_inner();
    wait_up(admin).await?;
    let tools = list_tools(&mut engine, admin, &session.id).await?;
    tracing::info!(
        tools = ?tools.iter().map(|t| t.upstream_name.as_str()).collect::<Vec<_>>(),
        "tools listed"
    );
    for tool in &tools {
        call(&mut engine, admin, &session.id, tool).await?;
    }
    Ok(())
}

/// The server's tools in the session.
async fn list_tools(
    engine: &mut EngineServiceClient<Channel>,
    admin: &mut Admin,
    session: &str,
) -> anyhow::Result<Vec<pb::Tool>> {
    for _ in 0..CALL_TRIES {
        let listed = engine
            .list_tools(pb::ListToolsRequest {
                session_id: session.into(),
            })
            .await
            .context("ListTools")?
            .into_inner();
        if !listed.unavailable_servers.iter().any(|s| s == SERVER) {
            return Ok(listed
                .tools
                .into_iter()
                .filter(|t| t.server == SERVER)
                .collect());
        }
        tracing::info!("the server is unavailable for the session");
        recover(admin, "listing tools").await?;
        wait_up(admin).await?;
    }
    bail!("the server's tools stayed unavailable")
}

/// Calls `tool` with `{}`, recovering as the module says.
async fn call(
    engine: &mut EngineServiceClient<Channel>,
    admin: &mut Admin,
    session: &str,
    tool: &pb::Tool,
) -> anyhow::Result<()> {
    let mut last = String::new();
    for attempt in 1..=CALL_TRIES {
        let r = engine
            .call_tool(pb::CallToolRequest {
                session_id: session.into(),
                call_id: format!("{}-{attempt}", tool.upstream_name),
                tool: tool.name.clone(),
                arguments_json: "{}".into(),
                timeout_ms: 30_000,
                foreground: true,
                ..Default::default()
            })
            .await;
        match r {
            Ok(r) => {
                let r = r.into_inner();
                tracing::info!(tool = %tool.upstream_name, attempt, is_error = r.is_error, "called");
                return Ok(());
            }
            Err(e) => {
                last = format!("{:?}: {}", e.code(), e.message());
                tracing::info!(tool = %tool.upstream_name, attempt, error = %last, "the call failed");
                // The sidecar reports a refusal as the call ends: give the
                // control plane a moment to record it.
                tokio::time::sleep(Duration::from_millis(300)).await;
                recover(admin, &format!("calling {}", tool.upstream_name)).await?;
            }
        }
    }
    bail!(
        "calling {}: still failing after {CALL_TRIES} tries: {last}",
        tool.upstream_name
    )
}
