//! A loopback TCP proxy the driver controls, put between a control-plane
//! replica and one etcd member. [`Proxy::cut`] closes its listening socket
//! (new connections are refused) and drops every open connection at once;
//! [`Proxy::restore`] listens again on the same port.

use std::time::Duration;

use anyhow::Context as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// One proxy: `127.0.0.1:port` → `127.0.0.1:target`.
#[derive(Debug)]
pub struct Proxy {
    /// The port it listens on.
    pub port: u16,
    cut: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding `port` to `target`.
    pub async fn start(port: u16, target: u16) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .with_context(|| format!("proxy: bind 127.0.0.1:{port}"))?;
        let (cut, watch) = watch::channel(false);
        let task = tokio::spawn(serve(Some(listener), port, target, watch));
        Ok(Proxy { port, cut, task })
    }

    /// Refuses new connections and drops the open ones.
    pub fn cut(&self) {
        let _ = self.cut.send(true);
    }

    /// Accepts and forwards again.
    pub fn restore(&self) {
        let _ = self.cut.send(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    mut listener: Option<TcpListener>,
    port: u16,
    target: u16,
    mut cut: watch::Receiver<bool>,
) {
    loop {
        // Cut: no listener, so connections are refused, until restored.
        while *cut.borrow_and_update() {
            if cut.changed().await.is_err() {
                return;
            }
        }
        let current = match listener.take() {
            Some(l) => l,
            None => loop {
                match TcpListener::bind(("127.0.0.1", port)).await {
                    Ok(l) => break l,
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            },
        };
        let connections = CancellationToken::new();
        loop {
            tokio::select! {
                accepted = current.accept() => {
                    let Ok((client, _)) = accepted else { continue };
                    let stop = connections.child_token();
                    tokio::spawn(async move {
                        tokio::select! {
                            _ = stop.cancelled() => {}
                            _ = forward(client, target) => {}
                        }
                    });
                }
                changed = cut.changed() => {
                    if changed.is_err() {
                        connections.cancel();
                        return;
                    }
                    if *cut.borrow() {
                        break;
                    }
                }
            }
        }
        connections.cancel();
        drop(current);
    }
}

async fn forward(mut client: TcpStream, target: u16) {
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", target)).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}
