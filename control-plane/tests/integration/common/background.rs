//! Shared by the stage B tests that play a sidecar over the real gRPC
//! SidecarRegistry against in-process control-plane replicas
//! (`background`, `background_bad_input`): a replica on a config with one
//! fake server, and clients for its engine and sidecar APIs.

use super::{LIMIT, StoreKind, auto_session, config_text, engine};
use serde_json::Value;
use std::path::Path;
use switchyard_control_plane::config::Config;
use switchyard_control_plane::server::{self, Running};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::sidecar_registry_client::SidecarRegistryClient;
use tonic::Code;
use tonic::codec::Streaming;

/// The configured server the fake sidecars front.
pub const FAKE_SERVER: &str =
    "\n[[servers]]\nname = \"fake\"\ntransport = \"stdio\"\ncommand = \"true\"\n";

/// Milliseconds since the epoch, as the control plane counts them.
pub fn now_ms() -> i64 {
    switchyard_control_plane::model::now_ms()
}

/// Writes `NAME.toml` (free ports, `store`, the fake server, lease TTL 2 s,
/// then `extra` TOML) and loads it.
pub fn replica_config(dir: &Path, name: &str, store: &StoreKind, extra: &str) -> Config {
    let (text, _, _) = config_text(dir, store, 2, FAKE_SERVER);
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, format!("{text}\n{extra}\n")).expect("write the config");
    Config::load(&path).expect("a valid config")
}

/// A replica in this process on [`replica_config`].
pub async fn start_replica(dir: &Path, name: &str, store: &StoreKind, extra: &str) -> Running {
    let config = replica_config(dir, name, store, extra);
    server::start(&config, true).await.expect("replica starts")
}

/// A replica's gRPC endpoint.
pub fn endpoint(r: &Running) -> String {
    format!("http://{}", r.grpc_addr)
}

/// A SidecarRegistry client.
pub async fn registry(endpoint: &str) -> SidecarRegistryClient<tonic::transport::Channel> {
    SidecarRegistryClient::connect(endpoint.to_owned())
        .await
        .unwrap_or_else(|e| panic!("connect to {endpoint}: {e}"))
}

/// A session enabling `fake`, in `auto` mode.
pub async fn create_session(endpoint: &str) -> String {
    auto_session(&mut engine(endpoint).await.unwrap(), &["fake"]).await
}

/// The session's events, replaying finished calls after `after_ms`.
pub async fn subscribe(
    endpoint: &str,
    session: &str,
    after_ms: i64,
) -> Streaming<pb::SessionEvent> {
    engine(endpoint)
        .await
        .unwrap()
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: session.into(),
            background_after_ms: after_ms,
        })
        .await
        .expect("SubscribeEvents")
        .into_inner()
}

/// The next `background_call.*` event: (event, its data).
pub async fn next_background(
    events: &mut Streaming<pb::SessionEvent>,
) -> (pb::SessionEvent, Value) {
    tokio::time::timeout(LIMIT, async {
        loop {
            let ev = events
                .message()
                .await
                .expect("the event stream")
                .expect("an event");
            if ev.r#type.starts_with("background_call.") {
                let data: Value = serde_json::from_str(&ev.data_json).expect("data is JSON");
                return (ev, data);
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no background_call event within {LIMIT:?}"))
}

/// `UpdateBackgroundCall`, as a sidecar sends it.
pub async fn update(
    endpoint: &str,
    call: pb::BackgroundCall,
) -> Result<pb::BackgroundCall, tonic::Status> {
    registry(endpoint)
        .await
        .update_background_call(pb::UpdateBackgroundCallRequest { call: Some(call) })
        .await
        .map(|r| r.into_inner())
}

/// Asserts `r` failed with `code` and a message containing `needle`.
pub fn refused<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: Code, needle: &str) {
    let e = r.expect_err("refused");
    assert_eq!(e.code(), code, "{e:?}");
    assert!(e.message().contains(needle), "{needle:?} in {e:?}");
}
