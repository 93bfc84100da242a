//! One sample of every process of the run, read from `/proc` and from the
//! gateway's `/metrics`: `switchyard up` (the control plane, in-process),
//! each sidecar (a child of `up`, named by its `--config NAME.toml`), each
//! upstream server (a sidecar's descendants together; the HTTP reference
//! server, started by the driver). Per process: resident memory (`VmRSS`),
//! open file descriptors (`/proc/PID/fd`), threads; the control plane's and
//! the sidecars' live tokio tasks, and the store's key count.

use crate::gateway::Gateway;
use std::collections::HashMap;
use std::time::Duration;

/// One process (or process group, for an upstream) at one time.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcSample {
    /// `control-plane`, `sidecar:SERVER` or `upstream:SERVER`.
    pub process: String,
    /// Its process ids (several for an upstream run through a wrapper).
    pub pids: Vec<u32>,
    /// Sum of `VmRSS`, KiB.
    pub rss_kib: u64,
    /// Sum of open file descriptors.
    pub fds: u64,
    /// Sum of threads.
    pub threads: u64,
    /// Live tokio tasks (`*_runtime_alive_tasks`), for the control plane and
    /// the sidecars, when `/metrics` answered.
    pub alive_tasks: Option<i64>,
    /// `switchyard_control_plane_store_keys` (control plane only).
    pub store_keys: Option<i64>,
    /// `switchyard_control_plane_sessions` (control plane only).
    pub sessions: Option<i64>,
}

/// `(pid, ppid)` of every process.
fn parents() -> HashMap<u32, u32> {
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return map;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            map.insert(pid, ppid);
        }
    }
    map
}

fn descendants(parents: &HashMap<u32, u32>, root: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (&child, &parent) in parents {
            if parent == p {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found.sort_unstable();
    found
}

/// `(rss KiB, fds, threads)` of one process; zeros when it is gone.
fn read_one(pid: u32) -> (u64, u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    (field("VmRSS:"), fds, field("Threads:"))
}

fn group(process: String, pids: Vec<u32>) -> ProcSample {
    let mut s = ProcSample {
        process,
        pids,
        rss_kib: 0,
        fds: 0,
        threads: 0,
        alive_tasks: None,
        store_keys: None,
        sessions: None,
    };
    for &pid in &s.pids {
        let (rss, fds, threads) = read_one(pid);
        s.rss_kib += rss;
        s.fds += fds;
        s.threads += threads;
    }
    s
}

/// The server a sidecar runs for, from its `--config DIR/NAME.toml`.
fn sidecar_server(pid: u32) -> Option<String> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let config = args.iter().skip_while(|a| *a != "--config").nth(1)?;
    Some(
        std::path::Path::new(config)
            .file_stem()?
            .to_string_lossy()
            .into_owned(),
    )
}

/// The value of an unlabelled series in a Prometheus text scrape.
fn gauge(scrape: &str, name: &str) -> Option<i64> {
    scrape.lines().find_map(|l| {
        let value = l.strip_prefix(name)?.strip_prefix(' ')?;
        value.trim().parse::<f64>().ok().map(|v| v as i64)
    })
}

async fn scrape(client: &reqwest::Client, url: &str) -> Option<String> {
    let response = client
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    response.text().await.ok()
}

/// Samples every process of the run, control plane first, then by name.
pub async fn sample(gw: &Gateway, client: &reqwest::Client) -> Vec<ProcSample> {
    let parents = parents();
    let up = gw.up_pid();
    let mut out = Vec::new();
    let mut cp = group("control-plane".into(), vec![up]);
    if let Some(text) = scrape(client, &gw.metrics_url()).await {
        cp.alive_tasks = gauge(&text, "switchyard_control_plane_runtime_alive_tasks");
        cp.store_keys = gauge(&text, "switchyard_control_plane_store_keys");
        cp.sessions = gauge(&text, "switchyard_control_plane_sessions");
    }
    out.push(cp);
    let metrics: HashMap<String, String> = gw.sidecar_metrics().into_iter().collect();
    let mut children: Vec<u32> = parents
        .iter()
        .filter(|(_, parent)| **parent == up)
        .map(|(pid, _)| *pid)
        .collect();
    children.sort_unstable();
    let mut rest = Vec::new();
    for pid in children {
        let name = sidecar_server(pid).unwrap_or_else(|| format!("pid{pid}"));
        let mut sidecar = group(format!("sidecar:{name}"), vec![pid]);
        if let Some(url) = metrics.get(&name)
            && let Some(text) = scrape(client, url).await
        {
            sidecar.alive_tasks = gauge(&text, "switchyard_sidecar_runtime_alive_tasks");
        }
        rest.push(sidecar);
        let upstream = descendants(&parents, pid);
        if !upstream.is_empty() {
            rest.push(group(format!("upstream:{name}"), upstream));
        }
    }
    let http = gw.orders_http_pid();
    let mut pids = vec![http];
    pids.extend(descendants(&parents, http));
    rest.push(group("upstream:orders-http".into(), pids));
    rest.sort_by(|a, b| a.process.cmp(&b.process));
    out.extend(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_are_read_from_unlabelled_series_only() {
        let text = "# HELP x_total y\nswitchyard_x 12\nswitchyard_x_more 3\nswitchyard_y{a=\"b\"} 4\nswitchyard_z 1e3\n";
        assert_eq!(gauge(text, "switchyard_x"), Some(12));
        assert_eq!(gauge(text, "switchyard_y"), None);
        assert_eq!(gauge(text, "switchyard_z"), Some(1000));
        assert_eq!(gauge(text, "switchyard_w"), None);
    }

    #[test]
    fn this_process_is_found_with_its_memory() {
        let me = std::process::id();
        let (rss, fds, threads) = read_one(me);
        assert!(rss > 0 && fds > 0 && threads > 0);
        assert_eq!(
            parents().get(&me),
            Some(&std::os::unix::process::parent_id())
        );
    }
}
