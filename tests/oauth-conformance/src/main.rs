//! The OAuth conformance harness: the control plane's admin-started
//! authorization of an upstream server (stage D, issue #16) and a real
//! sidecar, driven the way each client `auth/*` scenario of the official
//! MCP conformance suite asks (`scripts/conformance-auth.sh`,
//! docs/conformance.md).
//!
//! The suite runs `switchyard-oauth-conformance <server-url>` with
//! `MCP_CONFORMANCE_SCENARIO`, `MCP_CONFORMANCE_PROTOCOL_VERSION` and, for
//! some scenarios, `MCP_CONFORMANCE_CONTEXT` set. The harness then plays
//! every part around the gateway:
//! 1. [`gateway`]: a control plane in this process (embedded store and a
//!    throwaway token encryption key in a temp dir, loopback port 0) with
//!    one `auth = "oauth"` server, `conformance`, at `<server-url>`, and
//!    one real `switchyard-sidecar` process for it;
//! 2. [`admin`]: the admin, who starts the authorization and plays the
//!    browser (the suite's authorization server approves at once and
//!    redirects to the control plane's callback);
//! 3. [`engine`]: an engine, which lists the server's tools through the
//!    gateway and calls each one, asking the admin to authorize again
//!    (bounded) when the server's state turns to `needs_reauthorization`
//!    or a step-up asks for more scopes.
//!
//! Exit status 0: every tool was called. A refused authorization is a
//! terminal failure (the negative scenarios expect the client to stop).
//! Progress goes to stderr; tokens and authorization codes never do.

mod admin;
mod engine;
mod gateway;
mod scenario;

use std::process::ExitCode;

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SWITCHYARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(filter)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("switchyard-oauth-conformance: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(run());
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match outcome {
        Ok(()) => {
            eprintln!("switchyard-oauth-conformance: every tool was called");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("switchyard-oauth-conformance: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Starts the gateway, runs the scenario, and stops the gateway whatever
/// happened (also on SIGTERM or SIGINT, as the suite sends at its timeout).
async fn run() -> anyhow::Result<()> {
    let scenario = scenario::Scenario::from_env()?;
    tracing::info!(
        scenario = %scenario.name,
        version = %scenario.version,
        era = scenario.era(),
        url = %scenario.server_url,
        preregistered = scenario.client_id.is_some(),
        "starting"
    );
    let mut gw = gateway::Gateway::start(&scenario).await?;
    let outcome = tokio::select! {
        r = drive(&gw) => r,
        _ = stop_signal() => Err(anyhow::anyhow!("stopped by a signal")),
    };
    gw.stop().await;
    outcome
}

/// The admin's first authorization, then the engine's calls.
async fn drive(gw: &gateway::Gateway) -> anyhow::Result<()> {
    let mut admin = admin::Admin::connect(&gw.endpoint).await?;
    admin.authorize().await?;
    engine::exercise(&gw.endpoint, &mut admin).await
}

/// SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}
