//! Why the sidecar `switchyard up` runs for a server is not running, by
//! server: it exited before it connected (with the last line it wrote), or
//! could not be spawned. `up`'s supervisor sets it and clears it once a
//! sidecar it started for the server is connected; this replica answers
//! it in the server's status (`ServerStatus.launch_error`), so `servers
//! status` and `servers update` say why without `up`'s log. A sidecar
//! run elsewhere (a Kubernetes pod) reports through its registration
//! instead; nothing is stored.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// The launch failures of `up`'s sidecars, by server name.
#[derive(Debug, Default)]
pub struct Launches(Mutex<BTreeMap<String, String>>);

impl Launches {
    /// Records why `server`'s sidecar is not running (one line).
    pub fn set(&self, server: &str, why: String) {
        let why = why.replace(['\r', '\n'], " ");
        self.0
            .lock()
            .expect("not poisoned")
            .insert(server.to_owned(), why);
    }

    /// Forgets `server`'s launch failure (its sidecar connected, or the
    /// server was removed).
    pub fn clear(&self, server: &str) {
        self.0.lock().expect("not poisoned").remove(server);
    }

    /// Why `server`'s sidecar is not running, if `up` knows.
    pub fn get(&self, server: &str) -> Option<String> {
        self.0.lock().expect("not poisoned").get(server).cloned()
    }
}
