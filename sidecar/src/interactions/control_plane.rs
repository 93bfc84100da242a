//! The sidecar's [`InteractionHandler`]: it asks sessions' users through
//! the control plane (`SidecarRegistry.Interact`, which shows the card,
//! waits for the answer and times it out) and passes on the completion of
//! URL elicitations (`CompleteInteraction`). A question whose call ends
//! before it is answered (the wait is dropped: the call was cancelled,
//! timed out, or stopped at the end of a shutdown's grace period) is
//! closed too: `CompleteInteraction` with `ended_interaction_id`, sent by
//! a task that [`ControlPlaneInteractions::flush`] waits for at shutdown.

use super::{CallContext, Interaction, InteractionHandler};
use crate::control::{
    ControlError, ControlSettings, MAX_BACKOFF, MIN_BACKOFF, bearer, endpoint, with_causes,
    with_timeout,
};
use futures::future::BoxFuture;
use serde_json::{Value, json};
use switchyard_common::tls::AuthChannel;
use switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient;
use switchyard_proto::v1::{CompleteInteractionRequest, InteractRequest};

/// Attempts of one `CompleteInteraction` while the control plane is
/// unavailable.
const COMPLETE_ATTEMPTS: u32 = 5;

/// Asks sessions' users through the control plane: `Interact` waits for
/// the answer (the control plane shows the card and times it out); the
/// same interaction id is sent again, after a backoff, while the control
/// plane is unavailable (a replica went away), until the relay's own
/// interaction timeout ends the wait. Other errors answer `cancel`.
#[derive(Debug, Clone)]
pub struct ControlPlaneInteractions {
    client: SidecarRegistryClient<AuthChannel>,
    /// The tasks closing the cards of questions whose call ended.
    closing: tokio_util::task::TaskTracker,
}

impl ControlPlaneInteractions {
    /// A handler talking to `settings.control_plane` (connected lazily,
    /// reconnected as needed).
    pub fn new(settings: &ControlSettings) -> Result<Self, ControlError> {
        let channel = endpoint(settings)?.connect_lazy();
        Ok(ControlPlaneInteractions {
            client: SidecarRegistryClient::with_interceptor(channel, bearer(settings))
                .max_decoding_message_size(64 * 1024 * 1024)
                .max_encoding_message_size(64 * 1024 * 1024),
            closing: tokio_util::task::TaskTracker::new(),
        })
    }

    /// Waits up to `limit` for the cards of ended calls to be closed (the
    /// shutdown, after the last calls were cancelled).
    pub async fn flush(&self, limit: std::time::Duration) {
        self.closing.close();
        if tokio::time::timeout(limit, self.closing.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                left = self.closing.len(),
                "the cards of some ended calls could not be closed in time"
            );
        }
    }
}

/// Closes the card of a question whose wait was dropped before the answer
/// came (see the module docs).
struct CloseOnDrop {
    client: SidecarRegistryClient<AuthChannel>,
    closing: tokio_util::task::TaskTracker,
    request: Option<CompleteInteractionRequest>,
}

impl CloseOnDrop {
    /// The answer came (or the card was never made): nothing to close.
    fn disarm(&mut self) {
        self.request = None;
    }
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let mut client = self.client.clone();
        self.closing.spawn(async move {
            let id = request.ended_interaction_id.clone();
            match with_timeout("CompleteInteraction", client.complete_interaction(request)).await {
                Ok(r) => {
                    tracing::info!(interaction = %id, closed = r.into_inner().found, "the call ended before its question was answered; card closed")
                }
                Err(e) => {
                    tracing::warn!(interaction = %id, error = %with_causes(&e), "the call ended before its question was answered; the card could not be closed")
                }
            }
        });
    }
}

/// Whether a failed call to the control plane is worth repeating.
fn retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    )
}

impl InteractionHandler for ControlPlaneInteractions {
    fn interact(&self, interaction: Interaction) -> BoxFuture<'static, Value> {
        let mut client = self.client.clone();
        let mut close = CloseOnDrop {
            client: self.client.clone(),
            closing: self.closing.clone(),
            request: Some(CompleteInteractionRequest {
                server: interaction.server.clone(),
                session_id: interaction.context.session_id.clone(),
                elicitation_id: String::new(),
                ended_interaction_id: interaction.id.clone(),
            }),
        };
        Box::pin(async move {
            let request = InteractRequest {
                interaction_id: interaction.id.clone(),
                server: interaction.server.clone(),
                session_id: interaction.context.session_id.clone(),
                run_id: interaction.context.run_id.clone(),
                tool: interaction.context.tool.clone(),
                kind: interaction.kind.as_str().into(),
                params_json: interaction.params.to_string(),
                key: interaction.key.clone(),
                together_id: interaction
                    .together
                    .as_ref()
                    .map(|t| t.id.clone())
                    .unwrap_or_default(),
                together_count: interaction.together.as_ref().map_or(0, |t| t.count),
            };
            let mut backoff = MIN_BACKOFF;
            loop {
                match client.interact(request.clone()).await {
                    Ok(answer) => {
                        close.disarm();
                        let text = answer.into_inner().result_json;
                        return match serde_json::from_str::<Value>(&text) {
                            Ok(v) if v.is_object() => v,
                            _ => {
                                tracing::warn!(interaction = %interaction.id, answer = %text, "the control plane's answer is not an ElicitResult; answering cancel");
                                json!({"action": "cancel"})
                            }
                        };
                    }
                    Err(status) if retryable(&status) => {
                        tracing::warn!(interaction = %interaction.id, error = %with_causes(&status), retry_in_ms = backoff.as_millis() as u64, "control plane unavailable; asking again");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                    Err(status) => {
                        close.disarm();
                        tracing::warn!(interaction = %interaction.id, code = ?status.code(), error = %status.message(), "Interact failed; answering cancel");
                        return json!({"action": "cancel"});
                    }
                }
            }
        })
    }

    fn complete(
        &self,
        server: &str,
        context: &CallContext,
        elicitation_id: &str,
    ) -> BoxFuture<'static, ()> {
        let mut client = self.client.clone();
        let request = CompleteInteractionRequest {
            server: server.to_owned(),
            session_id: context.session_id.clone(),
            elicitation_id: elicitation_id.to_owned(),
            ended_interaction_id: String::new(),
        };
        Box::pin(async move {
            let mut backoff = MIN_BACKOFF;
            for attempt in 1..=COMPLETE_ATTEMPTS {
                match with_timeout(
                    "CompleteInteraction",
                    client.complete_interaction(request.clone()),
                )
                .await
                {
                    Ok(r) => {
                        tracing::debug!(elicitation_id = %request.elicitation_id, found = r.into_inner().found, "completion reported");
                        return;
                    }
                    Err(ControlError::Rpc { source, .. }) if !retryable(&source) => {
                        tracing::warn!(elicitation_id = %request.elicitation_id, error = %source.message(), "CompleteInteraction failed");
                        return;
                    }
                    Err(e) if attempt < COMPLETE_ATTEMPTS => {
                        tracing::warn!(elicitation_id = %request.elicitation_id, error = %with_causes(&e), "CompleteInteraction failed; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                    Err(e) => {
                        tracing::warn!(elicitation_id = %request.elicitation_id, error = %with_causes(&e), "CompleteInteraction failed; giving up");
                    }
                }
            }
        })
    }
}
