//! The coalescing of list-changed notifications ([`Coalescer`]), one per
//! list the watcher keeps (tools, resources with their templates, prompts).
//!
//! The first notification after a quiet period arms a deadline one window
//! later (default 2 s, `[sidecar] list_changed_window_ms`); later
//! notifications before it join it. At the deadline the watcher re-lists,
//! once; notifications that arrive while it re-lists arm exactly one more
//! deadline, a whole window after they were read. So a server that answers
//! every listing with another notification gets at most one re-list per
//! window, never a loop.

use std::time::Duration;
use tokio::time::Instant;

/// Default coalescing window of list-changed notifications.
pub const DEFAULT_LIST_CHANGED_WINDOW: Duration = Duration::from_secs(2);

/// When to re-list one list after its list-changed notifications (see the
/// module docs).
#[derive(Debug, Clone)]
pub struct Coalescer {
    window: Duration,
    deadline: Option<Instant>,
}

impl Coalescer {
    /// Coalescing within `window`.
    pub fn new(window: Duration) -> Self {
        Coalescer {
            window,
            deadline: None,
        }
    }

    /// A notification was read at `now`.
    pub fn notified(&mut self, now: Instant) {
        if self.deadline.is_none() {
            self.deadline = Some(now + self.window);
        }
    }

    /// When the next re-list is due, if one is.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// A re-list starts: it serves every notification read so far.
    pub fn refreshing(&mut self) {
        self.deadline = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescer_arms_one_deadline_per_window() {
        let t0 = Instant::now();
        let w = Duration::from_secs(2);
        let mut c = Coalescer::new(w);
        assert_eq!(c.deadline(), None);
        for i in 0..10_000u64 {
            c.notified(t0 + Duration::from_micros(i * 100));
        }
        assert_eq!(c.deadline(), Some(t0 + w));
        c.refreshing();
        assert_eq!(c.deadline(), None);
        // A notification during the re-list, read when it ends.
        let t1 = t0 + w + Duration::from_millis(300);
        c.notified(t1);
        c.notified(t1 + Duration::from_millis(1));
        assert_eq!(c.deadline(), Some(t1 + w));
    }
}
