//! `switchyard up`: the all-in-one gateway for one machine. It starts a
//! control-plane replica (embedded store, or etcd when the config names
//! endpoints; with an admin token for the console, [`console_token`]) and supervises one `switchyard-sidecar run` child process per
//! registered server ([`supervise`]): a server added at runtime gets a
//! sidecar, a removed one loses it, and a sidecar that dies is restarted
//! with backoff. Each sidecar reaches the replica as [`link`] says. On
//! SIGINT or SIGTERM every sidecar is asked to stop (each drains its calls
//! for `[up] sidecar_grace_secs`, then closes its stdio server's stdin,
//! then SIGTERM, then SIGKILL; a second signal hurries them), and the
//! replica stops last.

mod link;
mod supervise;

pub use link::check;
pub use supervise::{sidecar_binary, stop_child};

use crate::cli::{EXIT_USAGE, Failure};
use crate::config::Config;
use crate::server;
use link::SidecarLink;
use std::path::Path;
use std::time::Duration;
use supervise::Sidecars;

/// `switchyard up --config FILE`: a file that does not load, or that `up`
/// refuses ([`check`]), exits 64 before anything starts; a replica that
/// cannot start exits 1.
pub async fn up(file: &Path) -> Result<(), Failure> {
    let config = Config::load(file).map_err(|e| Failure::new(EXIT_USAGE, e.to_string()))?;
    check(&config).map_err(|e| Failure::new(EXIT_USAGE, format!("{}: {e}", file.display())))?;
    run(config)
        .await
        .map_err(|e| Failure::new(1, format!("{e:#}")))
}

/// A secret of `up`'s own beside the store: the file `name` in the store's
/// directory, made once with `contents(32 random bytes)`, mode 0600.
/// Returns the file, and whether it was made now.
fn secret_beside_store(
    config: &Config,
    name: &str,
    contents: impl FnOnce([u8; 32]) -> Vec<u8>,
) -> anyhow::Result<(std::path::PathBuf, bool)> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = config
        .store
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(name);
    if file.exists() {
        return Ok((file, false));
    }
    let mut random = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut random);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)?
        .write_all(&contents(random))?;
    Ok((file, true))
}

/// Secrets at rest are kept sealed (stage D's OAuth tokens, servers'
/// secret header, environment and URL values: [`crate::oauth::server_secrets`]).
/// With no `[store] token_encryption_key_file` and the embedded store,
/// `up` uses a key of its own beside the store (`token-encryption.key`,
/// made once, mode 0600), so they open again after a restart.
fn store_key(config: &mut Config) -> anyhow::Result<()> {
    if config.store.token_encryption_key_file.is_some() || !config.store.etcd_endpoints.is_empty() {
        return Ok(());
    }
    let (file, made) = secret_beside_store(config, "token-encryption.key", |key| key.to_vec())?;
    if made {
        println!(
            "switchyard: secrets at rest (OAuth tokens, secret header, environment and URL values) are encrypted with the new key {}",
            file.display()
        );
    }
    config.store.token_encryption_key_file = Some(file);
    Ok(())
}

/// The admin console needs an admin token to log in with. When the file
/// configures none and the store is the embedded one, `up` makes one
/// beside the store (`console-admin.token`,
/// made once, mode 0600) and adds it as the `[[auth.tokens]]` entry
/// `console-admin` of role admin. Returns the file to tell the user about.
fn console_token(config: &mut Config) -> anyhow::Result<Option<std::path::PathBuf>> {
    use base64::Engine as _;
    // With etcd there is no store directory to keep it in: the file's own
    // admin tokens log in.
    if !config.console.enabled
        || config.auth.tokens.iter().any(|t| t.role == "admin")
        || !config.store.etcd_endpoints.is_empty()
    {
        return Ok(None);
    }
    let (file, _) = secret_beside_store(config, "console-admin.token", |random| {
        format!(
            "{}\n",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random)
        )
        .into_bytes()
    })?;
    config.auth.tokens.push(crate::auth::TokenEntry {
        name: "console-admin".into(),
        role: "admin".into(),
        token_file: file.clone(),
        servers: Vec::new(),
    });
    Ok(Some(file))
}

/// Runs the gateway until SIGINT or SIGTERM, then stops the sidecars and
/// the replica. Errors: the replica, its sidecars' link or their work
/// directory could not be set up.
pub async fn run(mut config: Config) -> anyhow::Result<()> {
    // `up` owns its file: servers dropped from it go.
    config.control_plane.prune_config_servers = true;
    store_key(&mut config)?;
    let console_token = console_token(&mut config)?;
    let running = server::start(&config, true).await?;
    let link = SidecarLink::new(&config, running.grpc_addr)?;
    let engine = link.control_plane.clone();
    let workdir = tempfile::Builder::new()
        .prefix("switchyard-up-")
        .tempdir()?;
    println!("switchyard: engine endpoint {engine}");
    if let Some(mcp) = running.mcp_addr {
        let scheme = if config.mcp.tls { "https" } else { "http" };
        println!("switchyard: MCP endpoint {scheme}://{mcp}/mcp");
    }
    // The metrics listener when there is one: the one to scrape.
    println!(
        "switchyard: metrics http://{}/metrics, store {}",
        running.metrics_addr.unwrap_or(running.http_addr),
        if config.store.etcd_endpoints.is_empty() {
            format!("embedded ({})", config.store.path.display())
        } else {
            format!("etcd ({})", config.store.etcd_endpoints.join(","))
        }
    );
    if config.console.enabled {
        let login = match &console_token {
            Some(file) => format!("log in with the token in {}", file.display()),
            None => "log in with an admin token".into(),
        };
        println!(
            "switchyard: console {}/ui/ ({login})",
            config.oauth.base_url(&running.http_addr.to_string())
        );
    }
    let names: Vec<_> = running
        .cp
        .state
        .snapshot()
        .servers
        .keys()
        .cloned()
        .collect();
    println!("switchyard: servers {}", names.join(", "));

    let mut sidecars = Sidecars::new(
        link,
        workdir.path(),
        config.up.sidecar_grace_secs,
        running.cp.oauth.key_ring().cloned(),
        running.cp.launches.clone(),
    );
    let mut changes = running.cp.state.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        sidecars.reconcile(&running.cp.state.snapshot());
        // Reconcile again on any change of the read model, and every tick
        // (restart delays end between changes).
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
            c = changes.recv() => {
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = c { break }
            }
            _ = tick.tick() => {}
        }
    }
    println!("switchyard: stopping");
    // A second SIGINT or SIGTERM hurries the sidecars.
    let again = async {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = sigterm.recv() => {}
        }
    };
    sidecars.stop(again).await;
    running.stop(Duration::from_secs(5)).await;
    println!("switchyard: stopped");
    Ok(())
}
