//! Bad configuration files: `switchyard up`, `switchyard check-config` and
//! `switchyard-control-plane` exit with status 64 and say on stderr which
//! file, which key and what is wrong; the quickstart file checks clean.

mod common;

use common::*;
use std::path::Path;
use std::process::Output;
use switchyard_test_support::{free_port, repo_root};
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
            &["ftp", "unknown variant"][..],
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
