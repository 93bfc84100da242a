//! The report stream: the sidecar registers with the control plane
//! (`SidecarRegistry.Register`, retried with exponential backoff, 0.5 s to
//! 10 s: the control plane may start later), opens the stream
//! (`SidecarRegistry.Report`), sends `hello`, the current status and
//! catalogue, then every change the upstream watcher publishes
//! ([`UpstreamView`]). When the stream breaks it registers again and
//! reopens it. Calls are served independently all the while. Effective
//! tool hints the control plane pushes (`ToolSettings`) go into the
//! catalogue; background calls it hands over (`adopt`) go to the tasks
//! machinery, and once a lease TTL the stream says which task-mode calls
//! this sidecar polls (`polling`); those the control plane answers with
//! (`release`: another sidecar owns them now) are no longer polled. Stage
//! D, for an `auth = "oauth"` server: the access tokens
//! it pushes (`access_token`) go to the server's [`Tokens`] (logged by
//! state, generation and expiry, never the token), and the server's
//! refusals of a token go back as `token_rejected` ([`Rejections`]; those
//! queued while the stream is down are sent once it is open again).
//!
//! On shutdown the sidecar first announces it is leaving: after
//! [`Drain::start`] the stream reports the state [`DRAINING`] (and keeps
//! reporting it, whatever the upstream connection does), so the control
//! plane stops routing new calls here while the in-flight ones finish (see
//! `docs/sidecar.md`, "Shutdown").

use super::drain::{DRAINING, Drain};
use crate::control::{
    ControlError, ControlSettings, MAX_BACKOFF, MIN_BACKOFF, bearer, endpoint, with_causes,
    with_timeout,
};
use crate::http_endpoints::Health;
use crate::oauth::{AccessToken, Rejections, Tokens};
use crate::watch::UpstreamView;
use std::sync::Arc;
use std::time::Duration;
use switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient;
use switchyard_proto::v1::{
    BackgroundCallIds, Hello, RegisterRequest, SidecarReport, UpstreamStatus, control_message,
    sidecar_report,
};
use tokio::sync::watch;
use tonic::transport::Channel;

/// The status to report: the upstream's, or [`DRAINING`] (keeping the
/// upstream's last error) once draining.
fn reported_status(upstream: UpstreamStatus, draining: bool) -> UpstreamStatus {
    if draining {
        UpstreamStatus {
            state: DRAINING.into(),
            last_error: upstream.last_error,
        }
    } else {
        upstream
    }
}

/// Registers and keeps the report stream open, forever (abort the task to
/// stop). `health` learns whether the sidecar is registered.
pub async fn report(settings: ControlSettings, view: UpstreamView, health: Arc<Health>) {
    report_with(settings, view, health, None, Drain::new(), None, None).await
}

/// [`report`], handing background calls the control plane asks this
/// sidecar to adopt (`ControlMessage.adopt`) to `tasks` (stage B),
/// reporting the state [`DRAINING`] once `drain` is started, and, for an
/// `auth = "oauth"` server (stage D), keeping the access tokens pushed in
/// `oauth`'s [`Tokens`] and reporting its [`Rejections`], and closing
/// the per-session connections of `pool` whose engine session the control
/// plane says was deleted.
pub async fn report_with(
    settings: ControlSettings,
    mut view: UpstreamView,
    health: Arc<Health>,
    tasks: Option<crate::background::Tasks>,
    drain: Drain,
    mut oauth: Option<(Tokens, Rejections)>,
    pool: Option<crate::pool::SessionPool>,
) {
    let mut backoff = MIN_BACKOFF;
    let mut draining = drain.subscribe();
    loop {
        let outcome = session(
            &settings,
            &mut view,
            &health,
            &mut backoff,
            Targets {
                tasks: tasks.as_ref(),
                pool: pool.as_ref(),
            },
            &mut draining,
            oauth
                .as_mut()
                .map(|(tokens, rejections)| (&*tokens, rejections)),
        )
        .await;
        health.set_registered(false);
        match outcome {
            Ok(()) => return,
            Err(e) => {
                let error = with_causes(&e);
                tracing::warn!(control_plane = %switchyard_common::server_spec::redacted_url(&settings.control_plane), %error, retry_in_ms = backoff.as_millis() as u64, "control plane unavailable");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Bounds of the period of `polling` reports (the lease TTL).
const MIN_POLLING: Duration = Duration::from_secs(1);
const MAX_POLLING: Duration = Duration::from_secs(60);

/// What the control plane's messages act on in this sidecar, when it has
/// them: the background tasks (`adopt`) and the per-session upstream
/// connections (`session_ended`).
#[derive(Debug, Clone, Copy)]
struct Targets<'a> {
    tasks: Option<&'a crate::background::Tasks>,
    pool: Option<&'a crate::pool::SessionPool>,
}

/// One registration and report stream; returns `Ok` only when the upstream
/// watcher is gone (shutting down).
async fn session(
    settings: &ControlSettings,
    view: &mut UpstreamView,
    health: &Health,
    backoff: &mut Duration,
    targets: Targets<'_>,
    draining: &mut watch::Receiver<bool>,
    oauth: Option<(&Tokens, &mut Rejections)>,
) -> Result<(), ControlError> {
    let (tokens, mut rejections) = oauth.unzip();
    let channel: Channel =
        endpoint(settings)?
            .connect()
            .await
            .map_err(|source| ControlError::Connect {
                url: switchyard_common::server_spec::redacted_url(&settings.control_plane),
                source,
            })?;
    let mut client = SidecarRegistryClient::with_interceptor(channel, bearer(settings));
    let registered = with_timeout(
        "Register",
        client.register(RegisterRequest {
            server: settings.server.clone(),
            sidecar_id: settings.sidecar_id.clone(),
            call_address: settings.call_address.clone(),
            version: env!("CARGO_PKG_VERSION").into(),
            call_token: settings.call_token.as_str().to_owned(),
        }),
    )
    .await?
    .into_inner();
    tracing::info!(control_plane = %settings.control_plane, lease_ttl_s = registered.lease_ttl_seconds, "registered");

    let (tx, rx) = futures::channel::mpsc::unbounded::<SidecarReport>();
    let send = |report: sidecar_report::Report| {
        tx.unbounded_send(SidecarReport {
            report: Some(report),
        })
        .map_err(|_| ControlError::StreamEnded)
    };
    send(sidecar_report::Report::Hello(Hello {
        server: settings.server.clone(),
        sidecar_id: settings.sidecar_id.clone(),
    }))?;
    let mut inbound = with_timeout("Report", client.report(rx))
        .await?
        .into_inner();
    health.set_registered(true);
    *backoff = MIN_BACKOFF;

    let status = view.status.borrow_and_update().clone();
    let is_draining = *draining.borrow_and_update();
    // A catalogue makes the control plane count the sidecar as connected:
    // send it before the status, which may say `draining`.
    let catalogue = view.catalogue.borrow_and_update().clone();
    if let Some(c) = catalogue {
        send(sidecar_report::Report::Catalogue(c))?;
    }
    send(sidecar_report::Report::Status(reported_status(
        status,
        is_draining,
    )))?;
    let mut drain_open = true;
    // The task-mode calls polled here, once a lease TTL (a give-back or an
    // adoption needs a registration to lapse, which takes about that
    // long), the first time at once: the control plane answers `release`
    // for those another sidecar owns now.
    let mut polling = tokio::time::interval(
        Duration::from_secs(registered.lease_ttl_seconds.into()).clamp(MIN_POLLING, MAX_POLLING),
    );
    polling.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = polling.tick(), if targets.tasks.is_some() => {
                let ids = targets.tasks.map(crate::background::Tasks::polling).unwrap_or_default();
                if !ids.is_empty() {
                    send(sidecar_report::Report::Polling(BackgroundCallIds { ids }))?;
                }
            }
            message = inbound.message() => match message {
                Ok(Some(m)) => match m.message {
                    Some(control_message::Message::Welcome(w)) => {
                        tracing::debug!(lease_ttl_s = w.lease_ttl_seconds, "welcome");
                    }
                    Some(control_message::Message::ToolSettings(s)) => {
                        tracing::info!(tools = s.hints.len(), "effective tool hints received");
                        view.settings.set_hints(s.hints);
                    }
                    Some(control_message::Message::Adopt(a)) => {
                        tracing::info!(calls = a.calls.len(), "background calls to adopt");
                        match targets.tasks {
                            Some(tasks) => tasks.adopt(a.calls),
                            None => tracing::warn!("no tasks machinery here; not adopting"),
                        }
                    }
                    // Stage D. Never logged whole: it holds the token.
                    Some(control_message::Message::AccessToken(t)) => match tokens {
                        Some(tokens) => tokens.set(AccessToken::from(t)),
                        None => tracing::warn!(state = %t.state, generation = t.generation, "an access token for a server that is not auth = \"oauth\"; ignored"),
                    },
                    Some(control_message::Message::Release(r)) => {
                        if let Some(tasks) = targets.tasks {
                            let stopped = tasks.release(&r.ids);
                            tracing::info!(calls = r.ids.len(), stopped, "background calls released: another sidecar polls them");
                        }
                    }
                    Some(control_message::Message::SessionEnded(e)) => {
                        if let Some(pool) = targets.pool {
                            pool.end_session(&e.session_id);
                        }
                    }
                    None => {}
                },
                Ok(None) => return Err(ControlError::StreamEnded),
                Err(source) => return Err(ControlError::Rpc { rpc: "Report", source }),
            },
            changed = view.status.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                let status = view.status.borrow_and_update().clone();
                send(sidecar_report::Report::Status(reported_status(status, *draining.borrow())))?;
            }
            changed = draining.changed(), if drain_open => {
                if changed.is_err() {
                    // Every `Drain` is gone: nobody can start draining now.
                    drain_open = false;
                } else if *draining.borrow_and_update() {
                    tracing::info!(control_plane = %settings.control_plane, "reporting draining");
                    let status = view.status.borrow().clone();
                    send(sidecar_report::Report::Status(reported_status(status, true)))?;
                }
            }
            rejected = async { rejections.as_mut().expect("guarded").next().await }, if rejections.is_some() => {
                match rejected {
                    Some(r) => {
                        let report = sidecar_report::Report::TokenRejected(r.clone());
                        if let Err(e) = send(report) {
                            // The stream broke: reported on the next one.
                            if let Some(rejections) = rejections.as_mut() {
                                rejections.put_back(r);
                            }
                            return Err(e);
                        }
                    }
                    // Every holder is gone: nothing more to report.
                    None => rejections = None,
                }
            }
            changed = view.catalogue.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                let catalogue = view.catalogue.borrow_and_update().clone();
                if let Some(c) = catalogue {
                    send(sidecar_report::Report::Catalogue(c))?;
                }
            }
        }
    }
}
