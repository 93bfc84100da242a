//! Whether the store answers: a probe reads one (absent) key every
//! [`PROBE_EVERY`], bounded by [`PROBE_TIMEOUT`], and remembers when it
//! last got an answer. `/readyz` turns 503 once no answer came for
//! [`STALE_AFTER`] (an etcd that is frozen, partitioned away or without a
//! quorum: its reads hang), and 200 again with the next answer. Engines and
//! load balancers then stop sending work to a replica that cannot decide.

use super::{AnyStore, Metered, Store};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use switchyard_common::time::now_ms;
use tokio_util::sync::CancellationToken;

/// How often the probe reads.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How long one probe read may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// No answer for this long: not ready.
pub const STALE_AFTER: Duration = Duration::from_secs(5);
/// The key the probe reads (never written).
const PROBE_KEY: &str = "health/probe";

/// When the store last answered (ms since the epoch; 0: never).
#[derive(Debug, Default)]
pub struct StoreHealth {
    last_answer_ms: AtomicI64,
}

impl StoreHealth {
    /// A health that has seen an answer now (the store was just opened).
    pub fn answered_now() -> Self {
        StoreHealth {
            last_answer_ms: AtomicI64::new(now_ms()),
        }
    }

    /// `None` while the store answers, else for how long it has not
    /// (at least [`STALE_AFTER`]).
    pub fn silent_for(&self) -> Option<Duration> {
        let since = now_ms() - self.last_answer_ms.load(Ordering::Relaxed);
        let since = Duration::from_millis(since.max(0) as u64);
        (since >= STALE_AFTER).then_some(since)
    }

    /// Probes `store` until `stop` is cancelled (spawned by the server).
    pub async fn probe(&self, store: Metered<AnyStore>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut silent = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
            }
            match tokio::time::timeout(PROBE_TIMEOUT, store.get(PROBE_KEY)).await {
                Ok(Ok(_)) => {
                    self.last_answer_ms.store(now_ms(), Ordering::Relaxed);
                    if std::mem::take(&mut silent) {
                        tracing::info!("the store answers again: ready");
                    }
                }
                Ok(Err(e)) => {
                    if !silent && self.silent_for().is_some() {
                        silent = true;
                        tracing::warn!(error = %e, "the store has not answered for {} s: not ready", STALE_AFTER.as_secs());
                    }
                }
                Err(_) => {
                    if !silent && self.silent_for().is_some() {
                        silent = true;
                        tracing::warn!(
                            "the store has not answered for {} s: not ready",
                            STALE_AFTER.as_secs()
                        );
                    }
                }
            }
        }
    }
}
