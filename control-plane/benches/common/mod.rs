//! Shared by the control plane's benches: rmcp's client as the direct
//! baseline they compare the gateway with.

use rmcp::model::{ClientConfig, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use std::path::Path;
use std::process::Stdio;

/// The era every bench speaks.
pub const ERA: &str = "2026-07-28";

/// How rmcp's client starts: rmcp's plain `serve` sends the legacy
/// `initialize` with 2026-07-28, which a modern-only server refuses, so it
/// discovers instead.
pub fn discover() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// rmcp's client on its own `bin --era 2026-07-28` over stdio, and the
/// server's pid. Panics when it does not start or negotiates another era.
pub async fn start_direct(bin: &Path) -> (RunningService<RoleClient, ClientConfig>, Option<u32>) {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.args(["--era", ERA]);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the reference server");
    let pid = transport.id();
    let client = ClientConfig::default()
        .serve_with_lifecycle(transport, discover())
        .await
        .expect("rmcp client connects");
    let version = client
        .peer_info()
        .map(|i| i.protocol_version.to_string())
        .unwrap_or_default();
    assert_eq!(version, ERA, "rmcp negotiated era");
    (client, pid)
}
