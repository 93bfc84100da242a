//! Per-session upstream connections (design §4 C, attribution). A
//! Streamable HTTP server gets one connection (one MCP session) per engine
//! session, so whatever the server asks on it belongs to that session. A
//! stdio server keeps its one process, shared by every session; so does a
//! 2026-07-28 server (its questions come back in each call's own result),
//! a session that handles no interactions, and a call without a session.
//!
//! The pool is bounded ([`MAX_SESSIONS`]): when it is full, the connection
//! used least recently with no call in flight is closed; if every one is
//! busy, the call uses the shared connection (where attribution may then
//! decline). A connection idle for [`IDLE_AFTER`] is closed (HTTP DELETE of
//! its MCP session), and so is the connection of a session the control
//! plane says was deleted ([`SessionPool::end_session`]), as soon as no
//! call of it runs.

use crate::upstream::{Era, TransportConfig, Upstream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Most per-session connections kept at once.
pub const MAX_SESSIONS: usize = 256;
/// A per-session connection unused this long is closed.
pub const IDLE_AFTER: Duration = Duration::from_secs(600);
/// Grace given to a closed connection.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The upstream sessions of one server, by engine session.
#[derive(Debug, Clone)]
pub struct SessionPool {
    inner: Arc<PoolInner>,
}

#[derive(Debug)]
struct PoolInner {
    main: Upstream,
    per_session: bool,
    max: usize,
    idle: Duration,
    entries: Mutex<HashMap<String, Entry>>,
}

#[derive(Debug)]
struct Entry {
    upstream: Upstream,
    active: usize,
    last_used: Instant,
    /// The engine session was deleted: closed when its last call ends.
    ended: bool,
}

/// The connection a call uses; keeps it from being evicted until dropped.
#[derive(Debug)]
pub struct Lease {
    upstream: Upstream,
    slot: Option<(Weak<PoolInner>, String)>,
}

impl Lease {
    /// The connection.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some((pool, session)) = &self.slot else {
            return;
        };
        let Some(pool) = pool.upgrade() else { return };
        let mut entries = pool.lock();
        let Some(e) = entries.get_mut(session) else {
            return;
        };
        e.active = e.active.saturating_sub(1);
        e.last_used = Instant::now();
        if e.active == 0 && e.ended {
            let closing = entries.remove(session).map(|e| e.upstream);
            drop(entries);
            close_later(closing.into_iter().collect());
        }
    }
}

impl PoolInner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes idle entries; returns them for closing.
    fn take_idle(&self, entries: &mut HashMap<String, Entry>) -> Vec<Upstream> {
        let idle: Vec<String> = entries
            .iter()
            .filter(|(_, e)| e.active == 0 && e.last_used.elapsed() >= self.idle)
            .map(|(k, _)| k.clone())
            .collect();
        idle.iter()
            .filter_map(|k| entries.remove(k))
            .map(|e| e.upstream)
            .collect()
    }
}

fn close_later(upstreams: Vec<Upstream>) {
    for u in upstreams {
        tracing::debug!(server = %u.name(), "closing a per-session connection");
        tokio::spawn(async move { u.shutdown(CLOSE_GRACE).await });
    }
}

impl SessionPool {
    /// A pool around `main`, the shared connection, with the default
    /// limits.
    pub fn new(main: Upstream) -> Self {
        Self::with_limits(main, MAX_SESSIONS, IDLE_AFTER)
    }

    /// A pool keeping at most `max` per-session connections, each closed
    /// after `idle` unused. Starts the idle sweeper when in a runtime.
    pub fn with_limits(main: Upstream, max: usize, idle: Duration) -> Self {
        let per_session =
            main.interactive() && matches!(main.config().transport, TransportConfig::Http(_));
        let inner = Arc::new(PoolInner {
            main,
            per_session,
            max,
            idle,
            entries: Mutex::new(HashMap::new()),
        });
        if per_session && let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&inner);
            let every = (idle / 2).clamp(Duration::from_millis(100), Duration::from_secs(60));
            rt.spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(pool) = weak.upgrade() else { return };
                    let idle = {
                        let mut entries = pool.lock();
                        pool.take_idle(&mut entries)
                    };
                    close_later(idle);
                }
            });
        }
        SessionPool { inner }
    }

    /// The shared connection.
    pub fn main(&self) -> &Upstream {
        &self.inner.main
    }

    /// The connection for a call of `session_id` (see the module docs).
    pub fn lease(&self, session_id: &str) -> Lease {
        let shared = || Lease {
            upstream: self.inner.main.clone(),
            slot: None,
        };
        if !self.inner.per_session
            || session_id.is_empty()
            || self
                .inner
                .main
                .negotiated()
                .is_some_and(|n| n.era == Era::Modern)
        {
            return shared();
        }
        let mut entries = self.inner.lock();
        let mut closing = self.inner.take_idle(&mut entries);
        let upstream = if let Some(e) = entries.get_mut(session_id) {
            e.active += 1;
            e.last_used = Instant::now();
            Some(e.upstream.clone())
        } else {
            if entries.len() >= self.inner.max {
                let lru = entries
                    .iter()
                    .filter(|(_, e)| e.active == 0)
                    .min_by_key(|(_, e)| e.last_used)
                    .map(|(k, _)| k.clone());
                if let Some(e) = lru.and_then(|k| entries.remove(&k)) {
                    closing.push(e.upstream);
                }
            }
            if entries.len() >= self.inner.max {
                tracing::warn!(server = %self.inner.main.name(), session = %session_id, max = self.inner.max, "every per-session connection is busy; using the shared connection");
                None
            } else {
                match self.inner.main.for_session(session_id) {
                    Ok(u) => {
                        entries.insert(
                            session_id.to_owned(),
                            Entry {
                                upstream: u.clone(),
                                active: 1,
                                last_used: Instant::now(),
                                ended: false,
                            },
                        );
                        Some(u)
                    }
                    Err(e) => {
                        tracing::warn!(server = %self.inner.main.name(), error = %e, "cannot open a per-session connection; using the shared one");
                        None
                    }
                }
            }
        };
        drop(entries);
        close_later(closing);
        match upstream {
            Some(upstream) => Lease {
                upstream,
                slot: Some((Arc::downgrade(&self.inner), session_id.to_owned())),
            },
            None => shared(),
        }
    }

    /// Engine session `session_id` was deleted: its connection, if any, is
    /// closed now, or when its last call in flight ends.
    pub fn end_session(&self, session_id: &str) {
        let mut entries = self.inner.lock();
        let Some(e) = entries.get_mut(session_id) else {
            return;
        };
        e.ended = true;
        if e.active == 0 {
            let closing = entries.remove(session_id).map(|e| e.upstream);
            drop(entries);
            close_later(closing.into_iter().collect());
        }
    }

    /// The sessions with a connection of their own.
    pub fn sessions(&self) -> Vec<String> {
        let mut s: Vec<String> = self.inner.lock().keys().cloned().collect();
        s.sort();
        s
    }

    /// Closes every per-session connection (the shared one is the
    /// caller's).
    pub async fn shutdown(&self, grace: Duration) {
        let all: Vec<Upstream> = self.inner.lock().drain().map(|(_, e)| e.upstream).collect();
        futures::future::join_all(all.iter().map(|u| u.shutdown(grace))).await;
    }
}
