//! The CLI as a new user meets it, through `switchyard up` with the
//! quickstart's servers:
//!
//! - `servers add` waits for the server to come up and prints `(up)`;
//!   `servers status` prints a card, `--json` the JSON it always printed;
//! - `servers tools` explains its `~` and `*` markers; `policy set` and
//!   `hints set` take the engine name `servers tools` shows, and a name
//!   the server has under neither says where the names are;
//! - `switchyard call` in an `ask` session says on stderr that it waits
//!   for an approval, with the interaction's id and the `switchyard
//!   answer` command; answered, the result alone is on stdout;
//! - `switchyard events` says on stderr that it is subscribed, prints UTC
//!   times, and when its replica restarts subscribes again (saying so) and
//!   goes on printing the session's events.

use crate::common::*;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A `switchyard` command left running, its stdout and stderr collected
/// line by line.
struct Running {
    child: Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Running {
    fn start(endpoint: &str, args: &[&str]) -> Running {
        let mut child = Command::new(switchyard_bin())
            .arg("--endpoint")
            .arg(endpoint)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start switchyard");
        let collect = |pipe: Box<dyn tokio::io::AsyncRead + Unpin + Send>| {
            let lines = Arc::new(Mutex::new(Vec::new()));
            let into = lines.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(pipe).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    into.lock().unwrap().push(line);
                }
            });
            lines
        };
        let stdout = collect(Box::new(child.stdout.take().unwrap()));
        let stderr = collect(Box::new(child.stderr.take().unwrap()));
        Running {
            child,
            stdout,
            stderr,
        }
    }

    fn text(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            self.stdout.lock().unwrap().join("\n"),
            self.stderr.lock().unwrap().join("\n")
        )
    }

    /// Waits for a line of stdout (`err`: stderr) containing `needle`;
    /// returns it.
    async fn line(&self, err: bool, needle: &str) -> String {
        let lines = if err { &self.stderr } else { &self.stdout };
        eventually(&format!("a line with {needle:?}"), LIMIT, || async {
            let found = lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
                .cloned();
            found.ok_or_else(|| self.text())
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_explains_waits_names_and_restarts() {
    let _heavy = HEAVY.lock().await;
    let mut gw = Gateway::start(StoreKind::Embedded, 10).await;

    // `servers add` waits for the server to come up.
    let reference = switchyard_test_support::reference_server_bin();
    let added = ok_stdout(
        &gw.cli(&[
            "servers",
            "add",
            "--name",
            "extra",
            "--transport",
            "stdio",
            "--command",
            reference.to_str().unwrap(),
        ])
        .await,
        "servers add",
    );
    assert_eq!(added.trim(), "added extra (up)", "{added}");

    // `servers status`: a card; `--json`: the JSON shape.
    let card = ok_stdout(&gw.cli(&["servers", "status", "extra"]).await, "status");
    assert!(card.starts_with("extra [up] stdio, era "), "{card}");
    assert!(card.contains("\nsidecars:\n"), "{card}");
    assert!(card.contains("extra__create_order"), "{card}");
    let json = ok_json(
        &gw.cli(&["servers", "status", "extra", "--json"]).await,
        "status --json",
    );
    assert_eq!(json["name"], "extra", "{json}");
    assert_eq!(json["state"], "up", "{json}");
    assert!(
        json["tools"].as_array().is_some_and(|t| !t.is_empty()),
        "{json}"
    );

    // `servers tools`: a legend under the table.
    let tools = ok_stdout(&gw.cli(&["servers", "tools", "orders"]).await, "tools");
    let legend = tools.lines().last().unwrap_or("");
    assert!(legend.contains("* set by an administrator"), "{tools}");
    assert!(legend.contains("~ the spec's default"), "{tools}");

    // `policy set` with the engine name sets the tool's policy.
    let out = gw
        .cli(&["policy", "set", "orders", "orders__get_order", "confirm"])
        .await;
    let table = ok_stdout(&out, "policy set (engine name)");
    // The tool as `servers tools` prints it: a header, its row, the legend.
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(
        lines[0].starts_with("name ") && lines[0].ends_with("policy"),
        "{table}"
    );
    assert!(lines[1].starts_with("orders__get_order "), "{table}");
    assert!(lines[1].ends_with("confirm (set)"), "{table}");
    assert!(lines[2].contains("* set by an administrator"), "{table}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("orders__get_order is the engine name of orders's tool get_order"),
        "{err}"
    );
    ok_stdout(
        &gw.cli(&["policy", "clear", "orders", "get_order"]).await,
        "policy clear",
    );
    // `hints set` with the engine name too.
    let line = ok_stdout(
        &gw.cli(&[
            "hints",
            "set",
            "orders",
            "orders__echo",
            "--idempotent",
            "true",
        ])
        .await,
        "hints set (engine name)",
    );
    assert!(
        line.lines()
            .nth(1)
            .unwrap_or("")
            .starts_with("orders__echo "),
        "{line}"
    );
    // An unknown name: refused, saying where the names are.
    let out = gw
        .cli(&[
            "hints",
            "set",
            "orders",
            "no_such_tool",
            "--read-only",
            "true",
        ])
        .await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("switchyard servers tools orders"), "{err}");

    // `events`: subscribed (stderr), then subscribed again after a restart.
    let session = ok_stdout(
        &gw.cli(&["sessions", "create", "--server", "orders"]).await,
        "sessions create",
    )
    .trim()
    .to_owned();
    let events = Running::start(&gw.endpoint, &["events", "--session", &session]);
    events
        .line(true, "subscribed to the events of session")
        .await;
    assert!(
        events.stdout.lock().unwrap().is_empty(),
        "{}",
        events.text()
    );
    gw.restart(&[], &SERVERS).await;
    events.line(true, "subscribing again").await;
    events.line(true, "subscribed again").await;

    // `call` in the `ask` session waits for an approval and says so.
    let call = Running::start(
        &gw.endpoint,
        &[
            "call",
            "orders__create_order",
            "--session",
            &session,
            "--args",
            r#"{"customer_id":"C-1","items":[{"sku":"CABLE","quantity":1}]}"#,
        ],
    );
    let waiting = call
        .line(true, "waiting for an approval: interaction ")
        .await;
    let id = waiting
        .split("interaction ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("an interaction id")
        .to_owned();
    let how = call.line(true, "answer it: switchyard answer").await;
    assert!(
        how.contains(&format!(
            "switchyard answer --session {session} {id} --approve"
        )),
        "{how}"
    );
    // The events process, subscribed again, shows the approval with a UTC time.
    let required = events.line(false, "interaction.required").await;
    assert!(
        required.len() > 24 && required.as_bytes()[4] == b'-' && required[..24].ends_with('Z'),
        "a UTC time first: {required}"
    );
    events.line(false, &format!("approval {id} [open]")).await;
    ok_stdout(
        &gw.cli(&["answer", "--session", &session, &id, "--approve"])
            .await,
        "answer",
    );
    let Running {
        mut child,
        stdout,
        stderr,
    } = call;
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .expect("the call ends")
        .expect("wait");
    // Let the readers drain the pipes.
    eventually("the call's output read", LIMIT, || async {
        let out = stdout.lock().unwrap().join("\n");
        if out.contains("structuredContent") {
            Ok(())
        } else {
            Err(out)
        }
    })
    .await;
    let out = stdout.lock().unwrap().join("\n");
    let err = stderr.lock().unwrap().join("\n");
    assert!(status.success(), "{status}\n{out}\n{err}");
    assert!(!out.contains("waiting"), "stdout is the result only: {out}");
    assert!(
        err.contains(&format!("interaction {id} resolved: approve")),
        "{err}"
    );
    events.line(false, "interaction.resolved").await;
    drop(events);
    gw.stop().await;
}
