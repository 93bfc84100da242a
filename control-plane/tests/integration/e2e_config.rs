//! Bad configuration files: `switchyard up`, `switchyard check-config` and
//! `switchyard-control-plane` exit with status 64 and say on stderr which
//! file, which key and what is wrong; the quickstart file checks clean.

use crate::common::*;
use std::path::Path;
use std::process::Output;
use switchyard_test_support::{WORKER_COMM, free_port, repo_root, thread_names};
use tokio::process::Command;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the config");
    path.to_str().unwrap().to_owned()
}

/// Exit status 64 and a stderr naming the file and every one of `words`.
fn assert_bad(out: &Output, file: &str, words: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(
        stderr.contains(file),
        "stderr does not name {file}: {stderr}"
    );
    for w in words {
        assert!(stderr.contains(w), "stderr does not say {w:?}: {stderr}");
    }
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("error: ")).count(),
        1,
        "one error line: {stderr}"
    );
}

async fn control_plane(args: &[&str]) -> Output {
    let run = Command::new(control_plane_bin())
        .args(args)
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("switchyard-control-plane exits")
        .expect("run switchyard-control-plane")
}

#[tokio::test]
async fn bad_configs_exit_64_naming_file_key_and_problem() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    // No control plane runs: nothing may be contacted.
    let nowhere = format!("http://127.0.0.1:{}", free_port());

    // An http server without url (the second server, so the index shows).
    let no_url = write(
        d,
        "no-url.toml",
        "[[servers]]\nname = \"ok\"\ntransport = \"stdio\"\ncommand = \"x\"\n\n\
         [[servers]]\nname = \"web\"\ntransport = \"http\"\n",
    );
    let words = ["servers[1].url", "is required for transport = \"http\""];
    assert_bad(
        &cli(&nowhere, &["up", "--config", &no_url]).await,
        &no_url,
        &words,
    );
    assert_bad(
        &cli(&nowhere, &["check-config", &no_url]).await,
        &no_url,
        &words,
    );
    assert_bad(
        &control_plane(&["--config", &no_url]).await,
        &no_url,
        &words,
    );
    assert_bad(
        &control_plane(&["--check", "--config", &no_url]).await,
        &no_url,
        &words,
    );

    // An unknown key, at the top of a table and inside a server.
    let typo = write(
        d,
        "typo.toml",
        "[control_plane]\nlistne = \"127.0.0.1:7700\"\n",
    );
    let words = ["listne", "unknown field", "line 2"];
    assert_bad(
        &cli(&nowhere, &["up", "--config", &typo]).await,
        &typo,
        &words,
    );
    assert_bad(&control_plane(&["--config", &typo]).await, &typo, &words);
    let server_typo = write(
        d,
        "server-typo.toml",
        "[[servers]]\nname = \"a\"\ntransport = \"stdio\"\ncomand = \"x\"\n",
    );
    assert_bad(
        &cli(&nowhere, &["up", "--config", &server_typo]).await,
        &server_typo,
        &["comand", "unknown field"],
    );

    // Wrong values.
    for (name, text, words) in [
        (
            "listen.toml",
            "[control_plane]\nlisten = \"localhost\"\n",
            &["control_plane.listen", "not an IP:port"][..],
        ),
        (
            "ttl.toml",
            "[control_plane]\nsidecar_lease_ttl_sec = 1\n",
            &["control_plane.sidecar_lease_ttl_sec", "between 2 and 3600"][..],
        ),
        (
            "etcd.toml",
            "[store]\netcd_endpoints = [\"127.0.0.1:2379\"]\n",
            &["store.etcd_endpoints[0]", "http://"][..],
        ),
        (
            "dup.toml",
            "[[servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"x\"\n[[servers]]\nname = \"a\"\ntransport = \"stdio\"\ncommand = \"y\"\n",
            &["servers[1].name", "earlier server"][..],
        ),
        (
            "stdio.toml",
            "[[servers]]\nname = \"a\"\ntransport = \"stdio\"\n",
            &["servers[0].command", "is required"][..],
        ),
        (
            "transport.toml",
            "[[servers]]\nname = \"a\"\ntransport = \"ftp\"\ncommand = \"x\"\n",
            // Named by its place, never repeated (a value may be a secret).
            &["servers[0].transport: unknown variant, expected", "line 3"][..],
        ),
    ] {
        let file = write(d, name, text);
        assert_bad(
            &cli(&nowhere, &["up", "--config", &file]).await,
            &file,
            words,
        );
    }

    // A file that is not there.
    let missing = d.join("missing.toml").to_str().unwrap().to_owned();
    assert_bad(
        &cli(&nowhere, &["up", "--config", &missing]).await,
        &missing,
        &["cannot read"],
    );

    // Bound sidecar tokens without `required`: valid, with a note saying
    // that anonymous sidecars act for the other servers only.
    std::fs::write(d.join("sc.token"), "sidecar-token\n").unwrap();
    let loose = write(
        d,
        "loose.toml",
        "[auth]\n[[auth.tokens]]\nname = \"files-sidecars\"\nrole = \"sidecar\"\ntoken_file = \"sc.token\"\nservers = [\"files\"]\n",
    );
    let out = cli(&nowhere, &["check-config", &loose]).await;
    ok_stdout(&out, "check-config loose.toml");
    let note = String::from_utf8_lossy(&out.stderr);
    assert!(
        note.contains("note: auth.required is false")
            && note.contains("the bound ones are refused to it"),
        "{note}"
    );
    let out = cli(&nowhere, &["check-config", quickstart_path().as_str()]).await;
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("auth.required"),
        "{out:?}"
    );

    // The quickstart's file is fine.
    let quickstart = repo_root().join("examples/quickstart.toml");
    let quickstart = quickstart.to_str().unwrap();
    let out = cli(&nowhere, &["check-config", quickstart]).await;
    assert_eq!(
        ok_stdout(&out, "check-config examples/quickstart.toml").trim(),
        format!("{quickstart}: ok (3 servers)")
    );
    let out = control_plane(&["--check", "--config", quickstart]).await;
    ok_stdout(&out, "switchyard-control-plane --check");
}

/// Two listeners on the same address and port (or the same port with one
/// of them on an unspecified address) are refused by every entry point,
/// naming both keys, before anything is bound.
#[tokio::test]
async fn clashing_listeners_exit_64_naming_both_keys() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let (grpc, port) = (free_port(), free_port());
    let store = "[store]\npath = \"store/store.redb\"\n";
    let same = write(
        d,
        "same.toml",
        &format!(
            "[control_plane]\nlisten = \"127.0.0.1:{grpc}\"\nhttp_listen = \"127.0.0.1:{port}\"\nmetrics_listen = \"127.0.0.1:{port}\"\n{store}"
        ),
    );
    let words = [format!(
        "control_plane.metrics_listen: 127.0.0.1:{port} is also control_plane.http_listen"
    )];
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    assert_bad(
        &cli(&nowhere, &["check-config", &same]).await,
        &same,
        &words,
    );
    assert_bad(
        &control_plane(&["--check", "--config", &same]).await,
        &same,
        &words,
    );
    assert_bad(
        &cli(&nowhere, &["up", "--config", &same]).await,
        &same,
        &words,
    );
    assert_bad(&control_plane(&["--config", &same]).await, &same, &words);

    // `[::]` takes the port on IPv4 addresses too.
    let dual = write(
        d,
        "dual.toml",
        &format!(
            "[control_plane]\nlisten = \"[::]:{port}\"\n{store}[mcp]\nlisten = \"127.0.0.1:{port}\"\n"
        ),
    );
    let words = [format!(
        "mcp.listen: 127.0.0.1:{port} clashes with control_plane.listen = [::]:{port}: [::] takes port {port} on every address, IPv4 included"
    )];
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    assert_bad(
        &cli(&nowhere, &["check-config", &dual]).await,
        &dual,
        &words,
    );
}

/// A listener whose address another process holds fails the start with
/// its key, not only its address.
#[tokio::test]
async fn a_listener_that_cannot_bind_is_named_by_its_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = taken.local_addr().expect("bound");
    let file = write(
        dir.path(),
        "cp.toml",
        &format!(
            "[control_plane]\nlisten = \"127.0.0.1:0\"\nhttp_listen = \"127.0.0.1:0\"\nmetrics_listen = \"{taken}\"\n\n[store]\npath = \"store/store.redb\"\n"
        ),
    );
    let out = control_plane(&["--config", &file]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        stderr.contains(&format!(
            "control_plane.metrics_listen: cannot listen on {taken}: "
        )),
        "{stderr}"
    );
    // The OS error once, not repeated by the printed chain.
    assert_eq!(stderr.matches("(os error").count(), 1, "{stderr}");
}

/// `[runtime] worker_threads` above 1024, or not a count: refused by every
/// entry point with the file and the key; 0 to 1024 check clean.
#[tokio::test]
async fn runtime_worker_threads_is_validated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let many = write(d, "many.toml", "[runtime]\nworker_threads = 1025\n");
    let words = [
        "runtime.worker_threads",
        "1025 is too many: must be at most 1024",
    ];
    assert_bad(
        &cli(&nowhere, &["up", "--config", &many]).await,
        &many,
        &words,
    );
    assert_bad(
        &cli(&nowhere, &["check-config", &many]).await,
        &many,
        &words,
    );
    assert_bad(&control_plane(&["--config", &many]).await, &many, &words);
    assert_bad(
        &control_plane(&["--check", "--config", &many]).await,
        &many,
        &words,
    );
    let negative = write(d, "negative.toml", "[runtime]\nworker_threads = -1\n");
    assert_bad(
        &cli(&nowhere, &["check-config", &negative]).await,
        &negative,
        &["worker_threads", "line 2"],
    );
    assert_bad(
        &control_plane(&["--check", "--config", &negative]).await,
        &negative,
        &["worker_threads", "line 2"],
    );
    let typo = write(d, "typo.toml", "[runtime]\nworkers = 4\n");
    assert_bad(
        &cli(&nowhere, &["check-config", &typo]).await,
        &typo,
        &["workers", "unknown field"],
    );
    for n in [0, 1, 3, 1024] {
        let file = write(d, "ok.toml", &format!("[runtime]\nworker_threads = {n}\n"));
        ok_stdout(
            &cli(&nowhere, &["check-config", &file]).await,
            &format!("check-config worker_threads = {n}"),
        );
        ok_stdout(
            &control_plane(&["--check", "--config", &file]).await,
            &format!("--check worker_threads = {n}"),
        );
    }
}

/// The worker threads of `pid` once they are `want` (each names itself
/// when it first goes idle, right after the start), or after 5 s; then
/// 300 ms more so a late one would show too.
async fn workers(pid: u32, want: usize) -> usize {
    let count = || {
        thread_names(pid)
            .iter()
            .filter(|n| n.as_str() == WORKER_COMM)
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while count() != want && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    count()
}

/// `switchyard-control-plane` and `switchyard up` run a current-thread
/// runtime by default (no tokio worker thread) and exactly N workers with
/// `[runtime] worker_threads = N`.
#[tokio::test]
async fn runtime_worker_threads_take_effect() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    for (name, runtime, want) in [
        ("default", "", 0),
        ("one", "[runtime]\nworker_threads = 1\n", 0),
        ("three", "[runtime]\nworker_threads = 3\n", 3),
    ] {
        // switchyard-control-plane --config FILE (embedded store).
        let sub = d.join(name);
        std::fs::create_dir(&sub).unwrap();
        let (text, _, _) = config_text(&sub, &StoreKind::Embedded, 10, "");
        let config = sub.join("cp.toml");
        std::fs::write(&config, format!("{text}\n{runtime}")).unwrap();
        let (mut cp, _, _) = start_control_plane(&format!("cp-{name}"), &sub, &config).await;
        let n = workers(cp.pid, want).await;
        assert_eq!(
            n,
            want,
            "switchyard-control-plane, {name}: {:?}",
            thread_names(cp.pid)
        );
        if want == 0 {
            // No tokio thread but the blocking pool's (the store); a
            // multi-thread runtime under tokio's own names would show here.
            let names = thread_names(cp.pid);
            assert!(
                names
                    .iter()
                    .all(|n| !n.starts_with("tokio-") || n == "tokio-pool"),
                "{names:?}"
            );
        }
        let status = cp.terminate().await;
        assert!(status.success(), "{status:?}\n{}", cp.log());

        // switchyard up --config FILE (no servers, so no sidecar).
        let up_dir = sub.join("up");
        std::fs::create_dir(&up_dir).unwrap();
        let (text, _, _) = config_text(&up_dir, &StoreKind::Embedded, 10, "");
        let config = up_dir.join("up.toml");
        std::fs::write(&config, format!("{text}\n{runtime}")).unwrap();
        let mut cmd = Command::new(switchyard_bin());
        cmd.arg("up")
            .arg("--config")
            .arg(&config)
            .env_remove("TOKIO_WORKER_THREADS")
            .env("SWITCHYARD_LOG", "warn");
        let (mut up, _) = Proc::start(
            &format!("up-{name}"),
            cmd,
            up_dir.join("up.log"),
            "switchyard: servers",
        )
        .await;
        let n = workers(up.pid, want).await;
        assert_eq!(n, want, "switchyard up, {name}: {:?}", thread_names(up.pid));
        let status = up.terminate().await;
        assert!(status.success(), "{status:?}\n{}", up.log());
    }
}

fn quickstart_path() -> String {
    repo_root()
        .join("examples/quickstart.toml")
        .to_str()
        .unwrap()
        .to_owned()
}
