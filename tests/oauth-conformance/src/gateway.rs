//! The gateway under test: a control plane replica in this process and
//! one real sidecar process for the scenario's server.
//!
//! The control plane's configuration is written into a temp dir and read
//! with `Config::load`, as `switchyard-control-plane` would: gRPC and
//! HTTP on `127.0.0.1:0` (the callback is on the HTTP listener as bound),
//! the embedded store and a random 32-byte token encryption key in the
//! temp dir, and one server, [`SERVER`]. The sidecar's file is the one
//! `switchyard up` writes (`[server]`, the server's spec as loaded;
//! `[sidecar]`, the control plane's address and loopback port 0).

use crate::scenario::{CLIENT_METADATA_URL, Scenario};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use switchyard_control_plane::config::Config;
use switchyard_control_plane::server::{self, Running};
use tokio::process::{Child, Command};

/// The name of the one server.
pub const SERVER: &str = "conformance";

/// A running control plane and sidecar.
#[derive(Debug)]
pub struct Gateway {
    /// gRPC endpoint, `http://127.0.0.1:PORT`.
    pub endpoint: String,
    running: Option<Running>,
    sidecar: Option<Child>,
    /// Config, store, key; removed when dropped.
    _dir: tempfile::TempDir,
}

/// A TOML string literal.
fn toml_str(s: impl AsRef<str>) -> String {
    toml::Value::String(s.as_ref().to_owned()).to_string()
}

/// The `switchyard-sidecar` binary: `SWITCHYARD_SIDECAR_BIN`, else next
/// to this executable.
fn sidecar_bin() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("SWITCHYARD_SIDECAR_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("this executable's path")?;
    let path = exe.with_file_name("switchyard-sidecar");
    if !path.exists() {
        bail!(
            "{} does not exist: build it (cargo build -p switchyard-sidecar) or set SWITCHYARD_SIDECAR_BIN",
            path.display()
        );
    }
    Ok(path)
}

/// 32 random bytes from the kernel.
fn random_key() -> anyhow::Result<[u8; 32]> {
    use std::io::Read;
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .context("read /dev/urandom")?;
    Ok(key)
}

/// The control plane's configuration for `s`, with files in `dir`.
fn config_text(s: &Scenario, dir: &Path) -> anyhow::Result<String> {
    let key = dir.join("token.key");
    std::fs::write(&key, random_key()?).context("write the key file")?;
    let mut oauth = format!("client_metadata_url = {}\n", toml_str(CLIENT_METADATA_URL));
    if let Some(id) = &s.client_id {
        oauth.push_str(&format!("client_id = {}\n", toml_str(id)));
    }
    if let Some(secret) = &s.client_secret {
        let file = dir.join("client.secret");
        std::fs::write(&file, secret).context("write the client secret file")?;
        oauth.push_str(&format!(
            "client_secret_file = {}\n",
            toml_str(file.to_string_lossy())
        ));
    }
    Ok(format!(
        r#"[control_plane]
listen = "127.0.0.1:0"
http_listen = "127.0.0.1:0"
sidecar_lease_ttl_sec = 5

[store]
path = {store}
token_encryption_key_file = {key}

[[servers]]
name = "{SERVER}"
transport = "http"
url = {url}
auth = "oauth"
era = "{era}"
request_timeout_sec = 30

[servers.oauth]
{oauth}"#,
        store = toml_str(dir.join("store/store.redb").to_string_lossy()),
        key = toml_str(key.to_string_lossy()),
        url = toml_str(&s.server_url),
        era = s.era(),
    ))
}

impl Gateway {
    /// Starts the control plane, then the sidecar. Errors: the
    /// configuration is refused, or either does not start.
    pub async fn start(s: &Scenario) -> anyhow::Result<Gateway> {
        let dir = tempfile::Builder::new()
            .prefix("switchyard-oauth-conformance-")
            .tempdir()
            .context("temp dir")?;
        let path = dir.path().join("switchyard.toml");
        std::fs::write(&path, config_text(s, dir.path())?).context("write the config")?;
        let config = Config::load(&path).map_err(|e| anyhow::anyhow!("the config: {e}"))?;
        let running = server::start(&config, true)
            .await
            .map_err(|e| anyhow::anyhow!("the control plane does not start: {e}"))?;
        let endpoint = format!("http://{}", running.grpc_addr);
        tracing::info!(grpc = %running.grpc_addr, http = %running.http_addr, "control plane started");
        let mut gw = Gateway {
            endpoint,
            running: Some(running),
            sidecar: None,
            _dir: dir,
        };
        let spec = config
            .servers
            .iter()
            .find(|v| v.name == SERVER)
            .context("the server is configured")?;
        match gw.spawn_sidecar(spec) {
            Ok(child) => gw.sidecar = Some(child),
            Err(e) => {
                gw.stop().await;
                return Err(e);
            }
        }
        Ok(gw)
    }

    /// Writes the sidecar's file and starts `switchyard-sidecar run`.
    fn spawn_sidecar(
        &self,
        spec: &switchyard_common::server_spec::ServerConfig,
    ) -> anyhow::Result<Child> {
        let mut file = toml::Table::new();
        file.insert(
            "server".into(),
            toml::Value::try_from(spec).context("the server spec as TOML")?,
        );
        let mut sidecar = toml::Table::new();
        for (k, v) in [
            ("control_plane", self.endpoint.as_str()),
            ("listen", "127.0.0.1:0"),
            ("http_listen", "127.0.0.1:0"),
        ] {
            sidecar.insert(k.into(), toml::Value::String(v.into()));
        }
        sidecar.insert("grace_secs".into(), toml::Value::Integer(1));
        file.insert("sidecar".into(), toml::Value::Table(sidecar));
        let path = self._dir.path().join(format!("{SERVER}.sidecar.toml"));
        std::fs::write(&path, toml::to_string(&file)?).context("write the sidecar's config")?;
        let bin = sidecar_bin()?;
        let child = Command::new(&bin)
            .arg("run")
            .arg("--config")
            .arg(&path)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        tracing::info!(pid = child.id().unwrap_or(0), "sidecar started");
        Ok(child)
    }

    /// Stops the sidecar (killed) and the control plane.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.sidecar.take() {
            let _ = child.kill().await;
        }
        if let Some(running) = self.running.take() {
            running.stop(Duration::from_secs(1)).await;
        }
    }
}
