//! Logging for both binaries (`switchyard-sidecar`, and the control plane's
//! `switchyard` and `switchyard-control-plane`): tracing's fmt layer to
//! stderr, filtered by `SWITCHYARD_LOG` (an `EnvFilter` directive such as
//! `info` or `warn,switchyard::audit=info`).
//!
//! Lines are formatted on the thread that logs and appended to an
//! in-memory batch; only the flusher thread writes to stderr: every
//! [`FLUSH_INTERVAL`], and at once when a batch reaches [`FLUSH_BYTES`]
//! (the thread that filled it wakes the flusher, it never writes itself).
//! So a busy process makes about one `write` per interval instead of one
//! per line (each call writes audit lines), no thread is woken per line
//! (tracing-appender's non-blocking writer wakes its thread for each line
//! once the process is idle between lines: on a 2-core host that cost the
//! control plane a quarter of its CPU per call), and a stderr nobody reads
//! (a full pipe) blocks the flusher only, never a runtime thread. Lines
//! keep their order. The batch is bounded ([`MAX_BATCH_BYTES`]): lines
//! that would pass the bound while stderr is blocked are dropped and
//! counted, and the count is written ("N log lines dropped") as soon as
//! stderr takes lines again. Lines still in the batch are written when the
//! [`LogGuard`] is dropped at the end of `main`, and by the panic hook
//! [`init`] installs, before the panic message (a crash does not lose the
//! last lines); a process killed by SIGKILL loses at most the last
//! interval's lines.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often the batch is written.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(20);
/// A batch this large is written at once.
pub const FLUSH_BYTES: usize = 256 * 1024;
/// The most a batch holds while stderr does not take lines.
pub const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// The batch of the installed subscriber, for [`write_record`].
static BATCH: OnceLock<Arc<Batch>> = OnceLock::new();

/// Lines waiting to be written, and the lock that keeps writes in order.
#[derive(Debug, Default)]
struct Batch {
    lines: Mutex<Pending>,
    writing: Mutex<()>,
    /// Wakes the flusher when a batch is full.
    full: std::sync::Condvar,
}

/// The lines not written yet, and those dropped since the last write.
#[derive(Debug, Default)]
struct Pending {
    bytes: Vec<u8>,
    dropped: u64,
}

impl Batch {
    /// Appends one or more whole lines; never writes to stderr (see the
    /// module docs).
    fn append(&self, bytes: &[u8]) {
        let mut pending = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if pending.bytes.len() + bytes.len() > MAX_BATCH_BYTES {
            pending.dropped += bytes.iter().filter(|b| **b == b'\n').count().max(1) as u64;
            return;
        }
        pending.bytes.extend_from_slice(bytes);
        if pending.bytes.len() >= FLUSH_BYTES {
            self.full.notify_one();
        }
    }

    /// Writes what is waiting, preceded by the count of dropped lines
    /// (errors writing stderr are ignored: there is nowhere left to
    /// report them).
    fn flush(&self) {
        let _writing = self.writing.lock().unwrap_or_else(|e| e.into_inner());
        let Pending { bytes, dropped } =
            std::mem::take(&mut *self.lines.lock().unwrap_or_else(|e| e.into_inner()));
        let mut err = std::io::stderr().lock();
        if dropped > 0 {
            let _ = writeln!(
                err,
                "switchyard: {dropped} log lines dropped: stderr did not take them in time"
            );
        }
        if !bytes.is_empty() {
            let _ = err.write_all(&bytes);
        }
        let _ = err.flush();
    }

    /// Waits up to `limit` for the batch to fill (or for a stop, which the
    /// caller checks); spurious wake-ups are harmless.
    fn wait_full(&self, limit: Duration) {
        let pending = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if pending.bytes.len() < FLUSH_BYTES {
            let _ = self.full.wait_timeout(pending, limit);
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
        if let Some(b) = &self.batch {
            b.full.notify_one();
        }
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
    // A panic writes the lines before it, then its message.
    let previous = std::panic::take_hook();
    let on_panic = batch.clone();
    std::panic::set_hook(Box::new(move |info| {
        on_panic.flush();
        previous(info);
    }));
    let (stop, stopped) = mpsc::channel::<()>();
    let flushing = batch.clone();
    let flusher = std::thread::Builder::new()
        .name("switchyard-log".into())
        .spawn(move || {
            // Ends when the guard drops its sender.
            loop {
                flushing.wait_full(FLUSH_INTERVAL);
                match stopped.try_recv() {
                    Err(mpsc::TryRecvError::Empty) => flushing.flush(),
                    _ => return,
                }
            }
        });
    match flusher {
        Ok(flusher) => LogGuard {
            batch: Some(batch),
            stop: Some(stop),
            flusher: Some(flusher),
        },
        // No thread: lines are written at the end (or by a panic).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_bounded_and_counts_what_it_drops() {
        let batch = Batch::default();
        let line = vec![b'x'; 1023];
        let mut line = line;
        line.push(b'\n');
        for _ in 0..(MAX_BATCH_BYTES / line.len()) {
            batch.append(&line);
        }
        batch.append(&line);
        batch.append(b"two\nlines\n");
        let pending = batch.lines.lock().unwrap();
        assert!(pending.bytes.len() <= MAX_BATCH_BYTES);
        assert_eq!(pending.dropped, 3);
    }

    /// A crash does not lose the last lines: the panic hook writes them,
    /// before the panic's own message. Runs itself again as a child
    /// process, which installs the logger, logs a line and panics.
    #[test]
    fn a_panic_writes_the_lines_logged_before_it() {
        const CHILD: &str = "SWITCHYARD_LOGGING_PANIC_CHILD";
        if std::env::var_os(CHILD).is_some() {
            let _guard = init("info");
            tracing::info!("the last line before the crash");
            panic!("crash on purpose");
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "logging::tests::a_panic_writes_the_lines_logged_before_it",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD, "1")
            .env_remove("SWITCHYARD_LOG")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err
            .find("the last line before the crash")
            .unwrap_or_else(|| panic!("the line is missing:\n{err}"));
        let crash = err
            .find("crash on purpose")
            .unwrap_or_else(|| panic!("the panic message is missing:\n{err}"));
        assert!(line < crash, "the line comes first:\n{err}");
    }
}
