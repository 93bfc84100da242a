use super::serve::derived_advertise;
use super::settings::toml_string;
use super::*;
use clap::Parser;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
}

fn args(argv: &[&str]) -> RunArgs {
    Cli::parse_from(std::iter::once("run").chain(argv.iter().copied())).run
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

#[test]
fn flags_make_a_stdio_server() {
    let s = settings(&args(&[
        "--server-name",
        "t",
        "--control-plane",
        "http://127.0.0.1:1",
        "--",
        "python3",
        "x.py",
    ]))
    .unwrap();
    assert_eq!(s.server.command.as_deref(), Some("python3"));
    assert_eq!(s.server.args, ["x.py"]);
    assert_eq!(s.listen, DEFAULT_LISTEN);
    assert_eq!(s.grace, Duration::from_secs(10));
    assert_eq!(s.interaction_timeout, Duration::from_secs(600));
    assert_eq!(s.max_input_rounds, 8);
    assert_eq!(s.list_changed_window, Duration::from_secs(2));
    assert_eq!(s.task_poll_min, Duration::from_secs(5));
    assert_eq!(s.task_poll_failure_limit, Duration::from_secs(1800));
    assert!(s.audit_path.is_none());
    // hostname-pid-random: the random part tells a restarted process
    // with the same hostname and pid from the old one.
    let (head, random) = s.sidecar_id.rsplit_once('-').expect("hostname-pid-random");
    assert!(
        head.ends_with(&format!("-{}", std::process::id())),
        "{}",
        s.sidecar_id
    );
    assert_eq!(random.len(), 8, "{}", s.sidecar_id);
    assert!(
        random.chars().all(|c| c.is_ascii_hexdigit()),
        "{}",
        s.sidecar_id
    );
}

#[test]
fn errors_name_the_key() {
    let e = settings(&args(&["--server-name", "t", "--", "srv"])).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_CONFIG);
    assert!(e.to_string().contains("--control-plane"), "{e}");

    let f = file(
        "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\nera = \"2024\"\n[sidecar]\ncontrol_plane = \"http://h:1\"\n",
    );
    let e = settings(&args(&["--config", f.path().to_str().unwrap()])).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains(f.path().to_str().unwrap()) && text.contains("server.era"),
        "{text}"
    );

    let f = file(
        "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://h:1\"\nlisen = \"x\"\n",
    );
    let text = settings(&args(&["--config", f.path().to_str().unwrap()]))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("sidecar.lisen") && text.contains("line 7"),
        "{text}"
    );

    let f = file(
        "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"ftp://h\"\n",
    );
    let text = settings(&args(&["--config", f.path().to_str().unwrap()]))
        .unwrap_err()
        .to_string();
    assert!(text.contains("sidecar.control_plane"), "{text}");
}

#[test]
fn interaction_settings_come_from_the_file_and_flags() {
    let f = file(
        "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://h:1\"\naudit_path = \"/var/log/a.jsonl\"\ninteraction_timeout_secs = 30\nmax_input_rounds = 3\nlist_changed_window_ms = 250\ntask_poll_min_ms = 100\ntask_poll_failure_limit_secs = 7\n",
    );
    let path = f.path().to_str().unwrap();
    let s = settings(&args(&["--config", path])).unwrap();
    assert_eq!(s.audit_path.as_deref(), Some(Path::new("/var/log/a.jsonl")));
    assert_eq!(s.interaction_timeout, Duration::from_secs(30));
    assert_eq!(s.max_input_rounds, 3);
    assert_eq!(s.list_changed_window, Duration::from_millis(250));
    assert_eq!(s.task_poll_min, Duration::from_millis(100));
    assert_eq!(s.task_poll_failure_limit, Duration::from_secs(7));
    let s = settings(&args(&["--config", path, "--task-poll-min-ms", "20"])).unwrap();
    assert_eq!(s.task_poll_min, Duration::from_millis(20));
    let e = settings(&args(&["--config", path, "--task-poll-min-ms", "0"])).unwrap_err();
    assert!(e.to_string().contains("--task-poll-min-ms"), "{e}");
    let s = settings(&args(&[
        "--config",
        path,
        "--interaction-timeout-secs",
        "5",
    ]))
    .unwrap();
    assert_eq!(s.interaction_timeout, Duration::from_secs(5));
    let e = settings(&args(&[
        "--config",
        path,
        "--interaction-timeout-secs",
        "0",
    ]))
    .unwrap_err();
    assert!(e.to_string().contains("--interaction-timeout-secs"), "{e}");
}

#[test]
fn worker_threads_come_from_the_file_and_the_flag() {
    let server = "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://h:1\"\n";
    let f = file(server);
    let path = f.path().to_str().unwrap();
    assert_eq!(
        settings(&args(&["--config", path])).unwrap().worker_threads,
        1
    );
    let f = file(&format!("{server}worker_threads = 3\n"));
    let path = f.path().to_str().unwrap();
    assert_eq!(
        settings(&args(&["--config", path])).unwrap().worker_threads,
        3
    );
    // The flag wins over the file.
    let s = settings(&args(&["--config", path, "--worker-threads", "0"])).unwrap();
    assert_eq!(s.worker_threads, 0);
    let e = settings(&args(&["--config", path, "--worker-threads", "1025"])).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_CONFIG);
    let text = e.to_string();
    assert!(
        text.starts_with("command line: --worker-threads") && text.contains("at most 1024"),
        "{text}"
    );
    let f = file(&format!("{server}worker_threads = 1024\n"));
    let path = f.path().to_str().unwrap();
    assert_eq!(
        settings(&args(&["--config", path])).unwrap().worker_threads,
        1024
    );
    let f = file(&format!("{server}worker_threads = 5000\n"));
    let path = f.path().to_str().unwrap();
    let e = settings(&args(&["--config", path])).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_CONFIG);
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("{path}: sidecar.worker_threads: 5000 is too many")),
        "{text}"
    );
    let f = file(&format!("{server}worker_threads = -1\n"));
    let path = f.path().to_str().unwrap();
    let e = settings(&args(&["--config", path])).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_CONFIG);
    assert!(e.to_string().contains("sidecar.worker_threads"), "{e}");
}

#[test]
fn tls_and_token_settings_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let pki = switchyard_test_support::pki::TestPki::new(dir.path(), "run");
    let leaf = pki.leaf("sidecar", &[]);
    let token = dir.path().join("token");
    std::fs::write(&token, "t0k3n\n").unwrap();
    let q = |p: &Path| toml_string(&p.to_string_lossy());
    let f = file(&format!(
        "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"https://h:1\"\ncontrol_plane_ca_file = {}\ntls_cert_file = {}\ntls_key_file = {}\nclient_ca_file = {}\ntoken_file = {}\n",
        q(&pki.ca_file),
        q(&leaf.cert_file),
        q(&leaf.key_file),
        q(&pki.ca_file),
        q(&token),
    ));
    let path = f.path().to_str().unwrap();
    let s = settings(&args(&["--config", path])).unwrap();
    assert!(s.control_plane_ca.is_some() && s.client_ca.is_some());
    assert!(s.credentials.identity.is_some());
    assert_eq!(s.credentials.token.as_deref(), Some("t0k3n"));
    // Neither the token nor the key in debug output.
    let shown = format!("{s:?}");
    assert!(!shown.contains("t0k3n"), "{shown}");
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");

    // A key without its certificate; a client CA without TLS.
    let f = file(&format!(
        "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://h:1\"\ntls_key_file = {}\n",
        q(&leaf.key_file)
    ));
    let e = settings(&args(&["--config", f.path().to_str().unwrap()])).unwrap_err();
    assert_eq!(e.exit_code(), EXIT_CONFIG);
    assert!(
        e.to_string()
            .contains("sidecar.tls_key_file: needs its certificate"),
        "{e}"
    );
    let e = settings(&args(&[
        "--server-name",
        "t",
        "--control-plane",
        "http://h:1",
        "--client-ca-file",
        pki.ca_file.to_str().unwrap(),
        "--",
        "x",
    ]))
    .unwrap_err();
    assert!(e.to_string().contains("--client-ca-file"), "{e}");
    // The older key name still works.
    let f = file(&format!(
        "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"https://h:1\"\ncontrol_plane_ca = {}\n",
        q(&pki.ca_file)
    ));
    let s = settings(&args(&["--config", f.path().to_str().unwrap()])).unwrap();
    assert!(s.control_plane_ca.is_some());
}

#[test]
fn advertise_is_derived_from_the_bound_address() {
    assert_eq!(
        derived_advertise("127.0.0.1:7702".parse().unwrap(), false),
        "http://127.0.0.1:7702"
    );
    assert_eq!(
        derived_advertise("127.0.0.1:7702".parse().unwrap(), true),
        "https://127.0.0.1:7702"
    );
    assert!(derived_advertise("0.0.0.0:7702".parse().unwrap(), false).ends_with(":7702"));
}

#[test]
fn max_concurrent_reads_is_checked_at_start() {
    let config = |value: &str| {
        file(&format!(
            "[server]\nname = \"t\"\ntransport = \"stdio\"\ncommand = \"x\"\n[sidecar]\ncontrol_plane = \"http://h:1\"\n{value}"
        ))
    };
    let f = config("");
    let s = settings(&args(&["--config", f.path().to_str().unwrap()])).unwrap();
    assert_eq!(s.max_concurrent_reads, 4);
    let f = config("max_concurrent_reads = 9\n");
    let path = f.path().to_str().unwrap();
    assert_eq!(
        settings(&args(&["--config", path]))
            .unwrap()
            .max_concurrent_reads,
        9
    );
    let s = settings(&args(&["--config", path, "--max-concurrent-reads", "2"])).unwrap();
    assert_eq!(s.max_concurrent_reads, 2);
    for bad in ["0", "1025"] {
        let f = config(&format!("max_concurrent_reads = {bad}\n"));
        let path = f.path().to_str().unwrap();
        let e = settings(&args(&["--config", path])).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_CONFIG);
        assert!(
            e.to_string()
                .starts_with(&format!("{path}: sidecar.max_concurrent_reads: {bad} is out of range: must be between 1 and 1024")),
            "{e}"
        );
    }
    let e = settings(&args(&[
        "--server-name",
        "t",
        "--control-plane",
        "http://h:1",
        "--max-concurrent-reads",
        "0",
        "--",
        "srv",
    ]))
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("command line: --max-concurrent-reads: 0 is out of range"),
        "{e}"
    );
}
