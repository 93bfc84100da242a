//! The stdio transport: the MCP server as a child process, one JSON-RPC
//! message per line on its stdin and stdout (basic/transports "stdio").
//!
//! Four tasks serve one process: a writer (stdin), a reader (stdout, framed
//! by [`LineReader`]), a stderr logger that keeps the tail for the exit
//! report, and a process task that owns the child, reports its exit status
//! and escalates a shutdown (close stdin, SIGTERM, SIGKILL). When the process
//! exits, every pending request fails at once with the exit status and the
//! stderr tail; nothing is replayed.

use super::config::StdioConfig;
use super::error::UpstreamError;
use super::inbound::Inbound;
use super::metrics::ServerMetrics;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::server_spec::Secrets;
use switchyard_mcp::framing::{Frame, LineReader};
use switchyard_mcp::jsonrpc::{self, Kind};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

/// Lines of stderr kept for the exit report.
const STDERR_TAIL_LINES: usize = 20;
/// Grace period per shutdown step when the connection handle is dropped.
const DEFAULT_GRACE: Duration = Duration::from_secs(2);
/// Longest stderr line kept (longer lines are cut).
const STDERR_MAX_LINE: usize = 4096;

enum WriterMsg {
    Line(Vec<u8>),
    /// Close stdin: the first step of a graceful stop.
    Close,
}

type Reply = Result<Value, UpstreamError>;

/// Requests waiting for a response, and whether the connection is closed.
/// One lock covers both, so a request can never register after the
/// connection failed and then wait forever.
#[derive(Default)]
struct Pending {
    map: HashMap<u64, oneshot::Sender<Reply>>,
    closed: Option<UpstreamError>,
}

/// A running stdio server.
pub struct StdioConnection {
    server: String,
    pid: Option<u32>,
    writer: mpsc::UnboundedSender<WriterMsg>,
    pending: Arc<Mutex<Pending>>,
    shutdown: Mutex<Option<oneshot::Sender<Duration>>>,
    exited: watch::Receiver<Option<String>>,
}

impl std::fmt::Debug for StdioConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioConnection")
            .field("server", &self.server)
            .field("pid", &self.pid)
            .finish()
    }
}

impl StdioConnection {
    /// Starts the process and its tasks. Errors: [`UpstreamError::Spawn`].
    pub fn spawn(
        server: &str,
        config: &StdioConfig,
        max_message_bytes: usize,
        inbound: Arc<Inbound>,
        metrics: ServerMetrics,
    ) -> Result<Self, UpstreamError> {
        let mut cmd = Command::new(&config.command);
        cmd.args(&config.args)
            .envs(&config.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group, so a stop reaches wrappers' children
            // too (`npx` starts `node`, a shell script starts the server).
            .process_group(0);
        if let Some(cwd) = &config.cwd {
            // Checked first: a missing working directory makes spawn fail
            // with an ENOENT that would blame the command.
            if !cwd.is_dir() {
                return Err(UpstreamError::Spawn {
                    server: server.to_owned(),
                    command: config.command_line(),
                    source: Arc::new(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("working directory {} does not exist", cwd.display()),
                    )),
                });
            }
            cmd.current_dir(cwd);
        }
        let mut child = cmd.spawn().map_err(|e| UpstreamError::Spawn {
            server: server.to_owned(),
            command: config.command_line(),
            source: Arc::new(e),
        })?;
        let pid = child.id();
        let span = tracing::info_span!("upstream", server = %server, pid = pid.unwrap_or(0));
        tracing::info!(parent: &span, command = %config.command_line(), "started stdio server");

        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let pending = Arc::new(Mutex::new(Pending::default()));
        let (writer_tx, writer_rx) = mpsc::unbounded_channel();
        // What the server writes is logged with these `[redacted]`.
        let secrets = inbound.secrets().clone();

        tokio::spawn(write_loop(stdin, writer_rx, metrics.clone()).instrument(span.clone()));
        let reader = tokio::spawn(
            read_loop(
                Reading {
                    server: server.to_owned(),
                    max_message_bytes,
                    secrets: secrets.clone(),
                },
                stdout,
                pending.clone(),
                writer_tx.clone(),
                inbound,
                metrics,
            )
            .instrument(span.clone()),
        );
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_task =
            tokio::spawn(stderr_loop(stderr, tail.clone(), secrets).instrument(span.clone()));

        let (shutdown_tx, shutdown_rx) = oneshot::channel();
        let (exited_tx, exited_rx) = watch::channel(None);
        let process = ProcessTask {
            server: server.to_owned(),
            child,
            pid,
            writer: writer_tx.clone(),
            pending: pending.clone(),
            tail,
        };
        tokio::spawn(
            process
                .run(shutdown_rx, reader, stderr_task, exited_tx)
                .instrument(span),
        );
        Ok(StdioConnection {
            server: server.to_owned(),
            pid,
            writer: writer_tx,
            pending,
            shutdown: Mutex::new(Some(shutdown_tx)),
            exited: exited_rx,
        })
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// False once the process has exited or the connection was closed.
    pub fn is_alive(&self) -> bool {
        self.pending.lock().unwrap().closed.is_none()
    }

    /// Resolves when the process has exited, with its exit status.
    pub async fn exited(&self) -> String {
        let mut rx = self.exited.clone();
        loop {
            if let Some(status) = rx.borrow().clone() {
                return status;
            }
            if rx.changed().await.is_err() {
                return "unknown".into();
            }
        }
    }

    /// Sends request `msg` (whose id is `id`) and waits for its response
    /// message. Dropping the future before the response arrives sends
    /// `notifications/cancelled` for `id` (basic/patterns/cancellation); a
    /// response that comes later is dropped by the reader.
    pub async fn request(&self, id: u64, msg: &Value) -> Reply {
        let rx = {
            let mut p = self.pending.lock().unwrap();
            if let Some(err) = &p.closed {
                return Err(err.clone());
            }
            let (tx, rx) = oneshot::channel();
            p.map.insert(id, tx);
            rx
        };
        let mut guard = CancelOnDrop {
            id,
            pending: &self.pending,
            writer: &self.writer,
            armed: true,
        };
        self.send(msg)?;
        let mut reply = rx.await.unwrap_or_else(|_| {
            Err(UpstreamError::Closed {
                server: self.server.clone(),
            })
        });
        guard.armed = false;
        // The reader only knew the id of the oversized response; name the method.
        if let Err(UpstreamError::MessageTooLarge { method, .. }) = &mut reply
            && let Some(m) = msg.get("method").and_then(Value::as_str)
        {
            *method = m.to_owned();
        }
        reply
    }

    /// Sends a message that expects no response (a notification).
    pub fn send(&self, msg: &Value) -> Result<(), UpstreamError> {
        let line = serde_json::to_vec(msg).expect("a Value always serialises");
        self.writer
            .send(WriterMsg::Line(line))
            .map_err(|_| UpstreamError::Closed {
                server: self.server.clone(),
            })
    }

    /// Stops the server: close stdin, wait `grace`, SIGTERM, wait `grace`,
    /// SIGKILL. Returns the exit status.
    pub async fn shutdown(&self, grace: Duration) -> String {
        if let Some(tx) = self.shutdown.lock().unwrap().take() {
            let _ = tx.send(grace);
        }
        self.exited().await
    }
}

/// Sends `notifications/cancelled` if the request is dropped while pending.
struct CancelOnDrop<'a> {
    id: u64,
    pending: &'a Mutex<Pending>,
    writer: &'a mpsc::UnboundedSender<WriterMsg>,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let was_pending = self.pending.lock().unwrap().map.remove(&self.id).is_some();
        if was_pending {
            let msg = jsonrpc::notification(
                "notifications/cancelled",
                Some(json!({"requestId": self.id, "reason": "cancelled by the caller"})),
            );
            tracing::debug!(request_id = self.id, "request cancelled; notifying server");
            let line = serde_json::to_vec(&msg).expect("a Value always serialises");
            let _ = self.writer.send(WriterMsg::Line(line));
        }
    }
}

/// Writes queued messages to the server's stdin, one per line. Messages
/// queued while a write was in progress go out together in the next
/// `write` (one wake-up of the server for many requests under load).
async fn write_loop(
    mut stdin: tokio::process::ChildStdin,
    mut rx: mpsc::UnboundedReceiver<WriterMsg>,
    metrics: ServerMetrics,
) {
    /// Queued messages joined into one write, up to about this size.
    const BATCH_BYTES: usize = 64 * 1024;
    let mut batch: Vec<u8> = Vec::new();
    while let Some(msg) = rx.recv().await {
        let mut close = false;
        let mut next = Some(msg);
        while let Some(msg) = next.take() {
            match msg {
                WriterMsg::Line(line) => {
                    batch.extend_from_slice(&line);
                    batch.push(b'\n');
                    metrics.sent_bytes(line.len() + 1);
                }
                WriterMsg::Close => {
                    close = true;
                    break;
                }
            }
            if batch.len() < BATCH_BYTES {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            if let Err(e) = stdin.write_all(&batch).await {
                tracing::warn!(error = %e, "writing to the server's stdin failed");
                return;
            }
            if let Err(e) = stdin.flush().await {
                tracing::warn!(error = %e, "flushing the server's stdin failed");
                return;
            }
            batch.clear();
            if batch.capacity() > 4 * BATCH_BYTES {
                batch.shrink_to(BATCH_BYTES);
            }
        }
        if close {
            tracing::debug!("closing the server's stdin");
            return;
        }
    }
}

/// Who the server is, for [`read_loop`]: its name, its largest message,
/// and the secret values scrubbed from what it writes.
struct Reading {
    server: String,
    max_message_bytes: usize,
    secrets: Secrets,
}

async fn read_loop(
    reading: Reading,
    stdout: tokio::process::ChildStdout,
    pending: Arc<Mutex<Pending>>,
    writer: mpsc::UnboundedSender<WriterMsg>,
    inbound: Arc<Inbound>,
    metrics: ServerMetrics,
) {
    let Reading {
        server,
        max_message_bytes,
        secrets,
    } = reading;
    let mut reader = LineReader::new(
        BufReader::with_capacity(64 * 1024, stdout),
        max_message_bytes,
    );
    let mut noise: u64 = 0;
    loop {
        let frame = match reader.next_frame().await {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "reading the server's stdout failed");
                return;
            }
        };
        match frame {
            Frame::Oversized { id, size } => {
                metrics.received_bytes(size + 1);
                metrics.skipped("oversized");
                let waiter = id
                    .as_ref()
                    .and_then(Value::as_u64)
                    .and_then(|id| pending.lock().unwrap().map.remove(&id));
                tracing::warn!(size, limit = max_message_bytes, id = ?id, "dropped a message over the size limit");
                if let Some(tx) = waiter {
                    let _ = tx.send(Err(UpstreamError::MessageTooLarge {
                        server: server.clone(),
                        method: "unknown".into(), // named by `request`
                        size,
                        limit: max_message_bytes,
                    }));
                }
            }
            Frame::Line(line) => {
                metrics.received_bytes(line.len() + 1);
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let Ok(msg) = serde_json::from_slice::<Value>(&line) else {
                    metrics.skipped("not_json");
                    noise += 1;
                    if log_noise(noise) {
                        tracing::warn!(line = %secrets.preview(&line, 200), skipped_so_far = noise, "skipping a stdout line that is not JSON");
                    }
                    continue;
                };
                match jsonrpc::classify(&msg) {
                    Some(Kind::Response) => {
                        let waiter = msg["id"]
                            .as_u64()
                            .and_then(|id| pending.lock().unwrap().map.remove(&id));
                        match waiter {
                            Some(tx) => {
                                let _ = tx.send(Ok(msg));
                            }
                            None => {
                                metrics.skipped("late_response");
                                tracing::debug!(id = %msg["id"], "dropping a response nobody waits for (late or unknown id)");
                            }
                        }
                    }
                    Some(Kind::Notification) => inbound.notification(msg),
                    Some(Kind::Request) => {
                        let inbound = inbound.clone();
                        let writer = writer.clone();
                        tokio::spawn(
                            async move {
                                let reply = inbound.request(msg).await;
                                let line = serde_json::to_vec(&reply).expect("serialises");
                                let _ = writer.send(WriterMsg::Line(line));
                            }
                            .in_current_span(),
                        );
                    }
                    None => {
                        metrics.skipped("not_jsonrpc");
                        noise += 1;
                        if log_noise(noise) {
                            tracing::warn!(line = %secrets.preview(&line, 200), skipped_so_far = noise, "skipping a stdout line that is not JSON-RPC");
                        }
                    }
                }
            }
        }
    }
}

/// Skipped stdout lines are all counted in metrics, but only the first 20
/// and then every 1000th are logged, so a server spewing garbage cannot
/// flood the log.
fn log_noise(n: u64) -> bool {
    n <= 20 || n.is_multiple_of(1000)
}

/// Logs the server's stderr (at debug) and keeps its tail, each line with
/// the `secrets` it was given replaced by `[redacted]`: a server that
/// echoes its command line (`unrecognized arguments: --api-key …`) does
/// not put them in the log or in the exit report.
async fn stderr_loop(
    stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<String>>>,
    secrets: Secrets,
) {
    let mut reader = LineReader::new(BufReader::new(stderr), STDERR_MAX_LINE);
    while let Ok(Some(frame)) = reader.next_frame().await {
        let text = match frame {
            Frame::Line(l) => String::from_utf8_lossy(&l).into_owned(),
            Frame::Oversized { size, .. } => format!("<{size}-byte stderr line cut>"),
        };
        let text = secrets.scrub_log(&text);
        // At debug: what a server writes there is its own business (a
        // healthy start of server-everything writes an "error" there), and
        // the tail is logged at warn when it exits.
        tracing::debug!(target: "switchyard_sidecar::upstream::stderr", "{text}");
        let mut t = tail.lock().unwrap();
        if t.len() == STDERR_TAIL_LINES {
            t.pop_front();
        }
        t.push_back(text);
    }
}

struct ProcessTask {
    server: String,
    child: Child,
    pid: Option<u32>,
    writer: mpsc::UnboundedSender<WriterMsg>,
    pending: Arc<Mutex<Pending>>,
    tail: Arc<Mutex<VecDeque<String>>>,
}

impl ProcessTask {
    async fn run(
        mut self,
        shutdown: oneshot::Receiver<Duration>,
        reader: tokio::task::JoinHandle<()>,
        stderr: tokio::task::JoinHandle<()>,
        exited: watch::Sender<Option<String>>,
    ) {
        let (status, requested) = tokio::select! {
            status = self.child.wait() => (status, false),
            // A dropped connection handle stops the process too.
            grace = shutdown => (self.stop(grace.unwrap_or(DEFAULT_GRACE)).await, true),
        };
        let status = match status {
            Ok(s) => s.to_string(),
            Err(e) => format!("wait failed: {e}"),
        };
        // Let the reader deliver whatever the process wrote before exiting,
        // and the stderr logger catch the last lines.
        let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
        let _ = tokio::time::timeout(Duration::from_millis(500), stderr).await;
        let stderr_tail = self
            .tail
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n");
        if requested {
            tracing::info!(%status, "stdio server stopped");
        } else {
            tracing::warn!(%status, stderr_tail = %stderr_tail, "stdio server exited");
        }
        let err = UpstreamError::Exited {
            server: self.server.clone(),
            status: status.clone(),
            stderr_tail,
        };
        let waiters = {
            let mut p = self.pending.lock().unwrap();
            p.closed = Some(err.clone());
            std::mem::take(&mut p.map)
        };
        for (_, tx) in waiters {
            let _ = tx.send(Err(err.clone()));
        }
        let _ = exited.send(Some(status));
    }

    /// Close stdin, then SIGTERM, then SIGKILL, each after `grace`.
    async fn stop(&mut self, grace: Duration) -> std::io::Result<std::process::ExitStatus> {
        let _ = self.writer.send(WriterMsg::Close);
        if let Ok(status) = tokio::time::timeout(grace, self.child.wait()).await {
            return status;
        }
        if let Some(pid) = self.pid {
            tracing::info!("server did not exit after stdin closed; sending SIGTERM");
            signal_group(pid, nix::sys::signal::Signal::SIGTERM);
        }
        if let Ok(status) = tokio::time::timeout(grace, self.child.wait()).await {
            return status;
        }
        tracing::warn!("server did not exit after SIGTERM; sending SIGKILL");
        if let Some(pid) = self.pid {
            signal_group(pid, nix::sys::signal::Signal::SIGKILL);
        }
        self.child.kill().await?;
        self.child.wait().await
    }
}

fn signal_group(pid: u32, signal: nix::sys::signal::Signal) {
    let Ok(pid) = i32::try_from(pid) else { return };
    // The child leads its own process group (see `spawn`).
    if let Err(e) = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), signal) {
        tracing::debug!(error = %e, ?signal, "signal to the server's process group failed");
    }
}
