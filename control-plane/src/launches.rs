//! Why the sidecar `switchyard up` runs for a server is not running, by
//! server: it exited before it connected (with the last line it wrote), or
//! could not be spawned. `up`'s supervisor sets it and clears it once a
//! sidecar it started for the server is connected; this replica answers
//! it in the server's status (`ServerStatus.launch_error`), so `servers
//! status` and `servers update` say why without `up`'s log, and tells the
//! console's live updates when it changes ([`Launches::subscribe`]). A
//! sidecar run elsewhere (a Kubernetes pod) reports through its
//! registration instead; nothing is stored.

use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::sync::watch;

/// The launch failures of `up`'s sidecars, by server name.
#[derive(Debug)]
pub struct Launches {
    by_server: Mutex<BTreeMap<String, String>>,
    /// Bumped whenever a server's failure is set, changed or cleared.
    changed: watch::Sender<u64>,
}

impl Default for Launches {
    fn default() -> Self {
        Launches {
            by_server: Mutex::default(),
            changed: watch::Sender::new(0),
        }
    }
}

impl Launches {
    /// Records why `server`'s sidecar is not running (one line).
    pub fn set(&self, server: &str, why: String) {
        let why = why.replace(['\r', '\n'], " ");
        let before = self
            .by_server
            .lock()
            .expect("not poisoned")
            .insert(server.to_owned(), why.clone());
        if before.as_ref() != Some(&why) {
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Forgets `server`'s launch failure (its sidecar connected, or the
    /// server was removed).
    pub fn clear(&self, server: &str) {
        let before = self.by_server.lock().expect("not poisoned").remove(server);
        if before.is_some() {
            self.changed.send_modify(|n| *n += 1);
        }
    }

    /// Why `server`'s sidecar is not running, if `up` knows.
    pub fn get(&self, server: &str) -> Option<String> {
        self.by_server
            .lock()
            .expect("not poisoned")
            .get(server)
            .cloned()
    }

    /// Follows the failures: the value changes whenever one is set,
    /// changed or cleared (the count of such changes).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_announced_once_and_a_repeat_is_not() {
        let launches = Launches::default();
        let mut rx = launches.subscribe();
        launches.set("a", "exited\nfor a reason".into());
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        assert_eq!(launches.get("a").as_deref(), Some("exited for a reason"));
        launches.set("a", "exited for a reason".into());
        assert!(!rx.has_changed().unwrap(), "the same failure again");
        launches.clear("b");
        assert!(!rx.has_changed().unwrap(), "nothing to clear");
        launches.clear("a");
        assert!(rx.has_changed().unwrap());
        assert_eq!(launches.get("a"), None);
    }
}
