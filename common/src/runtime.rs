//! The tokio runtime both binaries build from their `worker_threads`
//! setting, and the names its threads carry.

/// The largest `worker_threads` accepted (sidecar and control plane).
pub const MAX_WORKER_THREADS: u32 = 1024;
/// Thread name (as `/proc/PID/task/TID/comm`, `ps -L` and `top -H` show
/// it) of a multi-thread runtime's workers built by [`build_runtime`]; the
/// kernel keeps its first 15 bytes, `tokio-runtime-w`.
pub const WORKER_THREAD_NAME: &str = "tokio-runtime-worker";
/// Thread name of the runtime's other threads (tokio's blocking pool: file
/// and store work), and of a worker until it first goes idle.
pub const POOL_THREAD_NAME: &str = "tokio-pool";

/// Builds the tokio runtime for a `worker_threads` setting (the same
/// meaning in the sidecar and the control plane): 1 a current-thread
/// runtime (everything on the calling thread, which drives it with
/// `block_on`); N > 1 a multi-thread runtime with N workers; 0 a
/// multi-thread runtime with tokio's default worker count (one per CPU
/// core, or `TOKIO_WORKER_THREADS`). The value is not range-checked here
/// (configuration validation refuses more than [`MAX_WORKER_THREADS`]).
///
/// Threads: tokio starts its workers as blocking-pool threads, and which
/// pool thread picks up which worker is a race, so every pool thread is
/// started as [`POOL_THREAD_NAME`] and a worker renames itself (its
/// kernel `comm`, via `/proc/thread-self/comm`) to [`WORKER_THREAD_NAME`]
/// the first time it goes idle, which a new worker does at once. The Rust
/// thread name (panic messages) stays [`POOL_THREAD_NAME`].
///
/// Errors: the OS refused a thread or the I/O driver (`std::io::Error`
/// from `tokio::runtime::Builder::build`).
pub fn build_runtime(worker_threads: u32) -> std::io::Result<tokio::runtime::Runtime> {
    if worker_threads == 1 {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name(POOL_THREAD_NAME)
            .build();
    }
    thread_local! {
        static NAMED_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if worker_threads > 1 {
        builder.worker_threads(worker_threads as usize);
    }
    builder
        .enable_all()
        .thread_name(POOL_THREAD_NAME)
        // Only workers park; a blocking-pool thread never runs this.
        .on_thread_park(|| {
            if !NAMED_WORKER.get() {
                NAMED_WORKER.set(true);
                // Best effort: without /proc the name just stays.
                let _ = std::fs::write("/proc/thread-self/comm", WORKER_THREAD_NAME);
            }
        })
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// This process's threads whose kernel name (`comm`) is `name`.
    fn threads_named(name: &str) -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == name)
            .count()
    }

    /// Polls [`threads_named`] (up to 5 s) until it is `want`.
    fn wait_threads_named(name: &str, want: usize) -> usize {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let n = threads_named(name);
            if n == want || std::time::Instant::now() > deadline {
                return n;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn build_runtime_makes_the_flavour_asked_for() {
        use tokio::runtime::RuntimeFlavor;
        const COMM: &str = "tokio-runtime-w";
        assert!(WORKER_THREAD_NAME.starts_with(COMM));
        // Only this test builds runtimes with named workers.
        assert_eq!(threads_named(COMM), 0);

        let rt = build_runtime(1).unwrap();
        assert_eq!(rt.handle().runtime_flavor(), RuntimeFlavor::CurrentThread);
        let caller = std::thread::current().id();
        let (on, blocking) = rt.block_on(async {
            let on = tokio::spawn(async { std::thread::current().id() })
                .await
                .unwrap();
            let blocking =
                tokio::task::spawn_blocking(|| std::thread::current().name().map(str::to_owned))
                    .await
                    .unwrap();
            (on, blocking)
        });
        assert_eq!(
            on, caller,
            "a current-thread runtime runs tasks on its caller"
        );
        assert_eq!(blocking.as_deref(), Some(POOL_THREAD_NAME));
        assert_eq!(threads_named(COMM), 0);
        drop(rt);

        let rt = build_runtime(3).unwrap();
        assert_eq!(rt.handle().runtime_flavor(), RuntimeFlavor::MultiThread);
        assert_eq!(rt.metrics().num_workers(), 3);
        // Blocking work at once (the race of tokio's start) does not take
        // a worker's name.
        let blocking = rt.block_on(async {
            let mut names = Vec::new();
            for _ in 0..4 {
                names.push(
                    tokio::task::spawn_blocking(|| {
                        std::thread::sleep(Duration::from_millis(20));
                        std::fs::read_to_string("/proc/thread-self/comm").unwrap()
                    })
                    .await
                    .unwrap(),
                );
            }
            names
        });
        assert!(
            blocking.iter().all(|n| n.trim_end() == POOL_THREAD_NAME),
            "{blocking:?}"
        );
        assert_eq!(wait_threads_named(COMM, 3), 3);
        drop(rt);
        // The join returns when the kernel wakes the joiner, a moment
        // before it removes the thread from /proc/self/task.
        assert_eq!(wait_threads_named(COMM, 0), 0, "the workers are gone");

        let rt = build_runtime(0).unwrap();
        assert_eq!(rt.handle().runtime_flavor(), RuntimeFlavor::MultiThread);
        let workers = rt.metrics().num_workers();
        assert!(workers >= 1);
        assert_eq!(wait_threads_named(COMM, workers), workers);
    }
}
