//! `switchyard-sidecar check-config --config FILE` as an operator (and the
//! Helm chart's tests) run it: exit 0 and one `ok` line for a file `run
//! --config` accepts; exit 64 and an `error:` line naming the file and the
//! key for a file it rejects. Nothing is started: no server, no listener.

use std::path::Path;
use std::process::Output;

const SIDECAR: &str = env!("CARGO_BIN_EXE_switchyard-sidecar");

fn check(file: &Path) -> Output {
    std::process::Command::new(SIDECAR)
        .args(["check-config", "--config"])
        .arg(file)
        .output()
        .expect("switchyard-sidecar ran")
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn accepts_a_stdio_and_an_http_file() {
    let dir = tempfile::tempdir().unwrap();
    let stdio = write(
        dir.path(),
        "stdio.toml",
        "[server]\nname = \"files\"\ntransport = \"stdio\"\ncommand = \"mcp-server-everything\"\nargs = [\"stdio\"]\n\n[sidecar]\ncontrol_plane = \"http://switchyard:7700\"\nlisten = \"0.0.0.0:7702\"\nhttp_listen = \"0.0.0.0:7782\"\ngrace_secs = 20\n",
    );
    let out = check(&stdio);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("stdio.toml: ok"), "{stdout}");
    assert!(stdout.contains("server files"), "{stdout}");
    assert!(stdout.contains("transport stdio"), "{stdout}");

    let http = write(
        dir.path(),
        "http.toml",
        "[server]\nname = \"web\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:3001/mcp\"\n\n[sidecar]\ncontrol_plane = \"http://switchyard:7700\"\n",
    );
    let out = check(&http);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("transport http"));

    // The runtime's worker threads: 0 (one per core) up to 1024.
    for n in [0, 1, 8, 1024] {
        let file = write(
            dir.path(),
            "workers.toml",
            &format!(
                "[server]\nname = \"files\"\ntransport = \"stdio\"\ncommand = \"x\"\n\n[sidecar]\ncontrol_plane = \"http://switchyard:7700\"\nworker_threads = {n}\n"
            ),
        );
        let out = check(&file);
        assert_eq!(out.status.code(), Some(0), "{n}: {}", text(&out.stderr));
    }
}

#[test]
fn rejects_with_the_file_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        // A value run --config refuses: the server table.
        (
            "no-url.toml",
            "[server]\nname = \"web\"\ntransport = \"http\"\n\n[sidecar]\ncontrol_plane = \"http://cp:7700\"\n",
            "server.url",
        ),
        // The sidecar table: the control plane is required.
        (
            "no-cp.toml",
            "[server]\nname = \"files\"\ntransport = \"stdio\"\ncommand = \"x\"\n",
            "sidecar.control_plane",
        ),
        // A bad listen address.
        (
            "bad-listen.toml",
            "[server]\nname = \"files\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://cp:7700\"\nlisten = \"nowhere\"\n",
            "sidecar.listen",
        ),
        // Too many runtime worker threads.
        (
            "workers.toml",
            "[server]\nname = \"files\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://cp:7700\"\nworker_threads = 1025\n",
            "sidecar.worker_threads",
        ),
        // Not a count.
        (
            "workers-negative.toml",
            "[server]\nname = \"files\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://cp:7700\"\nworker_threads = -2\n",
            "sidecar.worker_threads",
        ),
        // A wrong type inside an inline table: the path, not the line's
        // first key.
        (
            "inline.toml",
            "server = { name = \"files\", transport = \"stdio\", command = \"x\", request_timeout_sec = \"slow\" }\n[sidecar]\ncontrol_plane = \"http://cp:7700\"\n",
            "server.request_timeout_sec: invalid type: a string, expected u64 (line 1, column 86)",
        ),
        // An unknown key (typo), caught by the parser.
        (
            "typo.toml",
            "[server]\nname = \"files\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://cp:7700\"\nlisten_addr = \"0.0.0.0:1\"\n",
            "sidecar.listen_addr: unknown field `listen_addr`",
        ),
    ];
    for (name, body, key) in cases {
        let file = write(dir.path(), name, body);
        let out = check(&file);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "{name}: {}", text(&out.stdout));
        // One line names the file and the key (a TOML parse error also the
        // line and column).
        let first = stderr.lines().next().unwrap_or("");
        assert!(first.starts_with("error: "), "{name}: {stderr}");
        assert!(
            first.contains(name),
            "{name}: the file is not named: {stderr}"
        );
        assert!(first.contains(key), "{name}: {key} is not named: {stderr}");
    }
}

#[test]
fn a_missing_file_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.toml");
    let out = check(&missing);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("absent.toml"), "{stderr}");
}

#[test]
fn the_config_flag_is_required() {
    let out = std::process::Command::new(SIDECAR)
        .arg("check-config")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// `header_files` are read when the file is checked, as at start: a
/// readable file passes; a missing, empty or multi-line one is exit 64
/// naming the key and the file, never the value.
#[test]
fn secret_header_files_are_read_and_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let secret = write(dir.path(), "pat", "Bearer hunter2\n");
    let config = |path: &Path| {
        format!(
            "[server]\nname = \"web\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:3001/mcp\"\nauth = \"headers\"\n[server.header_files]\nAuthorization = {:?}\n\n[sidecar]\ncontrol_plane = \"http://switchyard:7700\"\n",
            path.display().to_string()
        )
    };
    let ok = write(dir.path(), "ok.toml", &config(&secret));
    let out = check(&ok);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("hunter2"));
    let cases = [
        ("missing", None, "cannot read"),
        ("empty", Some(" \n"), "is empty"),
        (
            "two-lines",
            Some("Bearer hunter2\nX-Evil: 1\n"),
            "not a valid header value",
        ),
    ];
    for (name, content, needle) in cases {
        let path = dir.path().join(name);
        if let Some(c) = content {
            std::fs::write(&path, c).unwrap();
        }
        let file = write(dir.path(), &format!("{name}.toml"), &config(&path));
        let out = check(&file);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{name}: {stderr}");
        assert!(
            stderr.contains("server.header_files.Authorization") && stderr.contains(name),
            "{name}: {stderr}"
        );
        assert!(stderr.contains(needle), "{name}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{name}: {stderr}");
    }
}
