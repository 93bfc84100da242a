//! Logging for both binaries (`switchyard-sidecar`, and the control plane's
//! `switchyard` and `switchyard-control-plane`): tracing's fmt layer to
//! stderr, filtered by `SWITCHYARD_LOG` (an `EnvFilter` directive such as
//! `info` or `warn,switchyard::audit=info`).
//!
//! Lines are formatted on the thread that logs and appended to an
//! in-memory batch; a flusher thread writes the batch to stderr every
//! [`FLUSH_INTERVAL`], and a batch that reaches [`FLUSH_BYTES`] is written
//! at once by the thread that filled it. So a busy process makes about one
//! `write` per interval instead of one per line (each call writes audit
//! lines), and no thread is woken per line. (tracing-appender's
//! non-blocking writer wakes its thread for each line once the process is
//! idle between lines: on a 2-core host that cost the control plane a
//! quarter of its CPU per call.) Nothing is dropped; lines keep their order.
//! Lines still in the batch are written when the [`LogGuard`] is dropped at
//! the end of `main`; a process killed by SIGKILL loses at most the last
//! interval's lines.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often the batch is written.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(20);
/// A batch this large is written at once.
pub const FLUSH_BYTES: usize = 256 * 1024;

/// The batch of the installed subscriber, for [`write_record`].
static BATCH: OnceLock<Arc<Batch>> = OnceLock::new();

/// Lines waiting to be written, and the lock that keeps writes in order.
#[derive(Debug, Default)]
struct Batch {
    lines: Mutex<Vec<u8>>,
    writing: Mutex<()>,
}

impl Batch {
    fn append(&self, bytes: &[u8]) {
        let full = {
            let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
            lines.extend_from_slice(bytes);
            lines.len() >= FLUSH_BYTES
        };
        if full {
            self.flush();
        }
    }

    /// Writes what is waiting (errors writing stderr are ignored: there is
    /// nowhere left to report them).
    fn flush(&self) {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let lines = std::mem::take(&mut *self.lines.lock().unwrap_or_else(|e| e.into_inner()));
        if !lines.is_empty() {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(&lines);
            let _ = err.flush();
        }
    }
}

/// A `MakeWriter` appending to the batch.
#[derive(Debug, Clone)]
struct BatchWriter(Arc<Batch>);

impl Write for BatchWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.append(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for BatchWriter {
    type Writer = BatchWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// Keeps the flusher thread; dropping it writes what is still waiting.
#[must_use = "dropping the guard stops the flusher and writes the last lines"]
#[derive(Debug)]
pub struct LogGuard {
    batch: Option<Arc<Batch>>,
    stop: Option<mpsc::Sender<()>>,
    flusher: Option<std::thread::JoinHandle<()>>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(f) = self.flusher.take() {
            let _ = f.join();
        }
        if let Some(b) = &self.batch {
            b.flush();
        }
    }
}

/// The directive added to every filter: rmcp's OAuth module at info at
/// most (its debug lines carry authorization codes and tokens).
pub const SECRET_SAFE: &str = "rmcp::transport::auth=info";

/// Installs the subscriber, with `default_level` when `SWITCHYARD_LOG` is
/// unset or not a valid filter, and starts the flusher thread. When a
/// subscriber is already installed (tests), nothing changes and the guard
/// holds nothing.
pub fn init(default_level: &str) -> LogGuard {
    let none = LogGuard {
        batch: None,
        stop: None,
        flusher: None,
    };
    let batch = Arc::new(Batch::default());
    let filter = tracing_subscriber::EnvFilter::try_from_env("SWITCHYARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level))
        // rmcp's OAuth module logs authorization codes and token answers at
        // debug: never below info, whatever SWITCHYARD_LOG says.
        .add_directive(SECRET_SAFE.parse().expect("a valid directive"));
    if tracing_subscriber::fmt()
        .with_writer(BatchWriter(batch.clone()))
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter)
        .try_init()
        .is_err()
    {
        return none;
    }
    let _ = BATCH.set(batch.clone());
    let (stop, stopped) = mpsc::channel::<()>();
    let flushing = batch.clone();
    let flusher = std::thread::Builder::new()
        .name("switchyard-log".into())
        .spawn(move || {
            // Ends when the guard drops its sender.
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(FLUSH_INTERVAL) {
                flushing.flush();
            }
        });
    match flusher {
        Ok(flusher) => LogGuard {
            batch: Some(batch),
            stop: Some(stop),
            flusher: Some(flusher),
        },
        // No thread: batches are written when full, and at the end.
        Err(_) => LogGuard {
            batch: Some(batch),
            stop: None,
            flusher: None,
        },
    }
}

/// The tracing target of audit records written to the log (also
/// `audit::TARGET`).
pub const AUDIT_TARGET: &str = "switchyard::audit";

/// Logs an audit record (one line of JSON) at info level under the
/// target [`AUDIT_TARGET`], in the fmt layer's line format
/// (`<RFC 3339 UTC time>  INFO switchyard::audit: <text>`) but written as
/// it is: the fmt layer would escape it character by character, which
/// costs more than building the record. Callers check `tracing::enabled!`
/// for the target first. Without [`init`] (tests), it goes through
/// `tracing::info!`.
pub fn write_record(text: &str) {
    let Some(batch) = BATCH.get() else {
        tracing::info!(target: "switchyard::audit", "{text}");
        return;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let time = crate::time::rfc3339_frac(now.as_secs(), now.subsec_micros(), 6);
    let target = AUDIT_TARGET;
    batch.append(format!("{time}  INFO {target}: {text}\n").as_bytes());
}
