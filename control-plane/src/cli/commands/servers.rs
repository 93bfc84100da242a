//! `switchyard servers list|add|update|remove|status|authorize|deauthorize|tools`:
//! the servers behind the gateway, through the admin API. `add` and
//! `authorize` wait (bounded) for the server to come up ([`wait_up`]) and
//! print the state it reached; `update` changes the settings given on the
//! stored spec and waits for a new sidecar to connect; `status` prints a
//! card, or with `--json` the JSON shape of `servers list --json` plus its
//! tools.

use crate::cli::connect::Remote;
use crate::cli::render::cards::render_server;
use crate::cli::render::json::{server_tool_json, status_json};
use crate::cli::render::tables::{server_tools_table, servers_table};
use crate::cli::render::{out, print_json, print_lines, print_list};
use crate::cli::{EXIT_USAGE, Failure, ServerArgs, ServerUpdateArgs, ServersCommand};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use switchyard_common::tls::AuthChannel;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::admin_service_client::AdminServiceClient;

/// An admin API client.
type Admin = AdminServiceClient<AuthChannel>;

/// Runs one `servers` subcommand.
pub async fn servers(remote: &Remote, cmd: ServersCommand) -> Result<(), Failure> {
    let mut client = remote.admin().await?;
    match cmd {
        ServersCommand::List { json } => {
            let resp = client
                .list_servers(pb::ListServersRequest {})
                .await?
                .into_inner();
            print_list(json, "servers", &resp.servers, status_json, servers_table);
        }
        ServersCommand::Add(a) => {
            let (no_wait, timeout) = (a.no_wait, a.timeout);
            let spec = spec(*a)?;
            let status = client
                .add_server(pb::AddServerRequest { spec: Some(spec) })
                .await?
                .into_inner();
            let spec = status.spec.clone().unwrap_or_default();
            // An oauth server cannot come up before it is authorized.
            let status = if no_wait || spec.auth == "oauth" {
                status
            } else {
                wait_up_status(&mut client, &spec.name, Duration::from_secs(timeout)).await?
            };
            let state = &status.state;
            out!("added {} ({state})", spec.name);
            if !no_wait && spec.auth != "oauth" && state != "up" {
                let why = why(status.sidecars.iter(), &status.launch_error);
                return Err(Failure::new(
                    1,
                    format!(
                        "{} is not up after {timeout} s{why} (it is added; see switchyard servers status {}, and switchyard up's log)",
                        spec.name, spec.name
                    ),
                ));
            }
            if spec.auth == "oauth" {
                out!(
                    "authorize it before use: switchyard servers authorize {}",
                    spec.name
                );
            }
        }
        ServersCommand::Update(a) => update(&mut client, *a).await?,
        ServersCommand::Remove { name } => {
            client
                .remove_server(pb::RemoveServerRequest { name: name.clone() })
                .await?;
            out!("removed {name}");
        }
        ServersCommand::Status { name, json } => {
            let s = client
                .get_server_status(pb::GetServerStatusRequest { name: name.clone() })
                .await?
                .into_inner();
            let tools = client
                .list_server_tools(pb::ListServerToolsRequest { server: name })
                .await?
                .into_inner();
            if json {
                let mut v = status_json(&s);
                v["tools"] = tools.tools.iter().map(server_tool_json).collect();
                print_json(&v);
            } else {
                print_lines(render_server(&s, &tools.tools));
            }
        }
        ServersCommand::Authorize {
            name,
            scopes,
            no_wait,
            timeout,
        } => authorize(&mut client, &name, scopes, no_wait, timeout).await?,
        ServersCommand::Deauthorize { name } => {
            let s = client
                .forget_server_authorization(pb::ForgetServerAuthorizationRequest {
                    name: name.clone(),
                })
                .await?
                .into_inner();
            out!("{name}: {}", s.oauth.map(|o| o.state).unwrap_or_default());
        }
        ServersCommand::Tools { name, json } => {
            let resp = client
                .list_server_tools(pb::ListServerToolsRequest { server: name })
                .await?
                .into_inner();
            print_list(
                json,
                "tools",
                &resp.tools,
                server_tool_json,
                server_tools_table,
            );
        }
    }
    Ok(())
}

/// `servers authorize`: starts the authorization, prints the URL, waits
/// (polling the server's status every second, a dot on stderr each
/// time) until the server is authorized anew or the authorization failed,
/// and prints the new status.
async fn authorize(
    client: &mut Admin,
    name: &str,
    scopes: Vec<String>,
    no_wait: bool,
    timeout: u64,
) -> Result<(), Failure> {
    let before = client
        .get_server_status(pb::GetServerStatusRequest { name: name.into() })
        .await?
        .into_inner()
        .oauth
        .unwrap_or_default();
    let started = client
        .authorize_server(pb::AuthorizeServerRequest {
            name: name.into(),
            scopes,
        })
        .await?
        .into_inner();
    out!("Open this URL in a browser to authorize {name}:");
    out!("{}", started.authorization_url);
    eprintln!(
        "(authorization server {}, client {}, scopes: {})",
        started.issuer,
        started.registration,
        if started.scopes.is_empty() {
            "none asked".to_owned()
        } else {
            started.scopes.join(" ")
        }
    );
    if no_wait {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(timeout);
    let expires = started.expires_at_ms;
    eprint!("waiting for the authorization");
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        eprint!(".");
        let s = client
            .get_server_status(pb::GetServerStatusRequest { name: name.into() })
            .await?
            .into_inner();
        let o = s.oauth.clone().unwrap_or_default();
        let done = o.state == "authorized" && o.authorized_at_ms > before.authorized_at_ms;
        let failed = o.reason != before.reason && o.reason.starts_with("authorization failed");
        let now_ms = switchyard_common::time::now_ms();
        if done || failed || std::time::Instant::now() >= deadline || now_ms > expires {
            eprintln!();
            out!(
                "{name}: {}{}{}",
                o.state,
                if o.scopes.is_empty() {
                    String::new()
                } else {
                    format!(" (scopes: {})", o.scopes.join(" "))
                },
                if o.reason.is_empty() || done {
                    String::new()
                } else {
                    format!(": {}", o.reason)
                }
            );
            if done {
                // The sidecars connect once they have the token: a moment.
                let state = wait_up(client, name, Duration::from_secs(5)).await?;
                out!("server {name} is {state}");
                return Ok(());
            }
            out!("server {name} is {}", s.state);
            return Err(Failure::new(
                1,
                match failed {
                    true => format!("authorization of {name} failed"),
                    false => format!("authorization of {name} did not finish in time"),
                },
            ));
        }
    }
}

/// Waits until server `name` is `up`, for at most `limit` (polling its
/// status every 250 ms), and returns the state it reached: `up`, or the
/// last one seen when the time is over.
async fn wait_up(client: &mut Admin, name: &str, limit: Duration) -> Result<String, Failure> {
    Ok(wait_up_status(client, name, limit).await?.state)
}

/// [`wait_up`]'s last status of the server.
async fn wait_up_status(
    client: &mut Admin,
    name: &str,
    limit: Duration,
) -> Result<pb::ServerStatus, Failure> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let status = client
            .get_server_status(pb::GetServerStatusRequest { name: name.into() })
            .await?
            .into_inner();
        if status.state == "up" || tokio::time::Instant::now() >= deadline {
            return Ok(status);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A table flag of `servers add|update` (`--env NAME=value`, ...).
struct Pairs {
    flag: &'static str,
    separator: char,
    form: &'static str,
    /// Whether names and values are trimmed (headers).
    trim: bool,
}

impl Pairs {
    const ENV: Pairs = Pairs {
        flag: "--env",
        separator: '=',
        form: "NAME=value",
        trim: false,
    };
    const HEADER: Pairs = Pairs {
        flag: "--header",
        separator: ':',
        form: "'Name: value'",
        trim: true,
    };
    const HEADER_FILE: Pairs = Pairs {
        flag: "--header-file",
        separator: '=',
        form: "Name=PATH",
        trim: true,
    };
}

/// The (name, value) pairs of the `kind` flags `given`. Errors (exit 64):
/// a value without the separator, named by its place among the flags
/// (`--header #2`), never repeated: it may be a secret with its separator
/// missing.
fn pairs(kind: Pairs, given: &[String]) -> Result<Vec<(String, String)>, Failure> {
    given
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let (k, v) = g.split_once(kind.separator).ok_or_else(|| {
                Failure::new(
                    EXIT_USAGE,
                    format!(
                        "{} #{}: expected {} (no '{}' in it)",
                        kind.flag,
                        i + 1,
                        kind.form,
                        kind.separator
                    ),
                )
            })?;
            Ok(match kind.trim {
                true => (k.trim().to_owned(), v.trim().to_owned()),
                false => (k.to_owned(), v.to_owned()),
            })
        })
        .collect()
}

/// `servers update`: the stored spec (secrets as answers show them, which
/// the update keeps) with the settings given changed, then (unless
/// `--no-wait`) a wait until a sidecar that was not there before is
/// connected, every earlier one is gone or draining, and that held for a
/// second (a sidecar of an update sent just before is not taken for this
/// one's). Errors: no setting given, an `--unset-*` name the spec does not
/// have, or secrets shown `[redacted]` that would go elsewhere (exit 64);
/// the admin API's refusals; no sidecar with the new settings connected
/// within `--timeout` (exit 1: the update is stored).
async fn update(client: &mut Admin, a: ServerUpdateArgs) -> Result<(), Failure> {
    let name = a.name.clone();
    let before = client
        .get_server_status(pb::GetServerStatusRequest { name: name.clone() })
        .await?
        .into_inner();
    let stored = before.spec.clone().unwrap_or_default();
    let mut spec = stored.clone();
    if !changed(&mut spec, &a)? {
        return Err(Failure::new(
            EXIT_USAGE,
            format!(
                "nothing to change for {name}: give a setting (switchyard servers update --help)"
            ),
        ));
    }
    if spec == stored {
        out!("{name} unchanged ({})", before.state);
        return Ok(());
    }
    secrets_stay(&stored, &spec)?;
    let old: HashSet<String> = before.sidecars.into_iter().map(|s| s.sidecar_id).collect();
    let status = client
        .update_server(pb::UpdateServerRequest { spec: Some(spec) })
        .await?
        .into_inner();
    // The same settings again (secrets too, compared by the control
    // plane): nothing restarts.
    if status.unchanged {
        out!("{name} unchanged ({})", status.state);
        return Ok(());
    }
    // An oauth server that is not authorized cannot come up.
    let authorized = status
        .oauth
        .as_ref()
        .is_none_or(|o| o.state == "authorized");
    if a.no_wait || !authorized {
        out!("updated {name} (not waited for a sidecar with the new settings)");
        return Ok(());
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(a.timeout);
    let mut since: Option<tokio::time::Instant> = None;
    loop {
        let status = client
            .get_server_status(pb::GetServerStatusRequest { name: name.clone() })
            .await?
            .into_inner();
        let (new, earlier): (Vec<&pb::SidecarInfo>, Vec<&pb::SidecarInfo>) = status
            .sidecars
            .iter()
            .filter(|s| s.upstream_state != "draining")
            .partition(|s| !old.contains(&s.sidecar_id));
        let done = status.state == "up"
            && earlier.is_empty()
            && !new.is_empty()
            && new.iter().all(|s| s.upstream_state == "connected");
        let now = tokio::time::Instant::now();
        since = if done { since.or(Some(now)) } else { None };
        if since.is_some_and(|t| now >= t + Duration::from_secs(1)) {
            out!("updated {name} (up)");
            return Ok(());
        }
        if now >= deadline {
            out!("updated {name} ({})", status.state);
            return Err(Failure::new(
                1,
                format!(
                    "no sidecar of {name} with the new settings connected within {} s{} (the update is stored; see switchyard servers status {name}, and switchyard up's log)",
                    a.timeout,
                    why(new.into_iter(), &status.launch_error),
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Refuses (exit 64), before anything is sent, an update that points the
/// server elsewhere (another transport, URL scheme, host or port; for
/// stdio another command, arguments, cwd or environment, which may run
/// other code) while secrets it was given still show `[redacted]`: the
/// control plane would refuse them; this names every one and the flag that
/// gives it again.
fn secrets_stay(stored: &pb::ServerSpec, spec: &pb::ServerSpec) -> Result<(), Failure> {
    use switchyard_common::server_spec::{redacted_args, same_origin};
    let same = stored.transport == spec.transport
        && match pb::Transport::try_from(spec.transport) {
            // The stored arguments as answered (their secrets redacted).
            Ok(pb::Transport::Stdio) => {
                stored.command == spec.command
                    && stored.cwd == spec.cwd
                    // Every variable as answered: one given anew (even a
                    // secret-looking `AUTH_TOKEN_URL`) may point the
                    // server elsewhere.
                    && stored.env == spec.env
                    && stored.args == redacted_args(&spec.args)
            }
            _ => same_origin(&stored.url, &spec.url),
        };
    if same {
        return Ok(());
    }
    let redacted = switchyard_common::server_spec::REDACTED;
    let again: Vec<String> = spec
        .env
        .iter()
        .filter(|(_, v)| *v == redacted)
        .map(|(k, _)| format!("--env {k}=…"))
        .chain(
            spec.headers
                .iter()
                .filter(|(_, v)| *v == redacted)
                .map(|(k, _)| format!("--header '{k}: …'")),
        )
        // Arguments are kept by place, for the same command only.
        .chain(
            spec.args
                .iter()
                .position(|a| a.contains(redacted))
                .map(|i| format!("every --arg (args[{i}] shows {redacted})")),
        )
        .collect();
    if again.is_empty() {
        return Ok(());
    }
    Err(Failure::new(
        EXIT_USAGE,
        format!(
            "the server would point elsewhere (another URL scheme, host or port; for stdio another command, arguments, cwd or environment), and its stored secrets are only for where it points now: give them again ({}), or remove them (--unset-env, --unset-header)",
            again.join(", ")
        ),
    ))
}

/// Why a server is not up, when one of `sidecars` says (`: listing tools
/// failed …`, on one line), else `launch_error` (`switchyard up`'s: its
/// sidecar exited), else nothing.
fn why<'a>(sidecars: impl Iterator<Item = &'a pb::SidecarInfo>, launch_error: &str) -> String {
    sidecars
        .map(|c| c.last_error.as_str())
        .chain([launch_error])
        .find(|e| !e.is_empty())
        .map(|e| {
            format!(
                ": {}",
                crate::cli::render::printable(&e.replace('\n', "\\n"))
            )
        })
        .unwrap_or_default()
}

/// Applies `servers update`'s settings to `spec`; whether any was given.
fn changed(spec: &mut pb::ServerSpec, a: &ServerUpdateArgs) -> Result<bool, Failure> {
    let set = &a.settings;
    let mut changed = false;
    for (field, value) in [
        (&mut spec.command, &set.command),
        (&mut spec.cwd, &set.cwd),
        (&mut spec.url, &set.url),
        (&mut spec.era, &a.era),
    ] {
        if let Some(v) = value {
            *field = v.clone();
            changed = true;
        }
    }
    if let Some(t) = &a.transport {
        let transport = transport(t)?;
        if transport as i32 != spec.transport {
            // The other transport's settings would be refused.
            match transport {
                pb::Transport::Http => {
                    spec.command.clear();
                    spec.args.clear();
                    spec.env.clear();
                    spec.cwd.clear();
                }
                _ => {
                    spec.url.clear();
                    spec.headers.clear();
                    spec.header_files.clear();
                    spec.auth.clear();
                    spec.oauth = None;
                }
            }
            spec.transport = transport as i32;
        }
        changed = true;
    }
    if let Some(auth) = &set.auth {
        spec.auth = auth_kind(auth)?;
        changed = true;
    }
    if !set.args.is_empty() || a.clear_args {
        spec.args = set.args.clone();
        changed = true;
    }
    for (table, kind, given, unset, flag) in [
        (
            &mut spec.env,
            Pairs::ENV,
            &set.env,
            &a.unset_env,
            "--unset-env",
        ),
        (
            &mut spec.headers,
            Pairs::HEADER,
            &set.headers,
            &a.unset_headers,
            "--unset-header",
        ),
        (
            &mut spec.header_files,
            Pairs::HEADER_FILE,
            &set.header_files,
            &a.unset_header_files,
            "--unset-header-file",
        ),
    ] {
        // Header names are case-insensitive: `authorization` replaces
        // `Authorization`. Environment names are not.
        let trim = kind.trim;
        let same = |a: &str, b: &str| match trim {
            true => a.eq_ignore_ascii_case(b),
            false => a == b,
        };
        for name in unset {
            let before = table.len();
            table.retain(|k, _| !same(k, name));
            if table.len() == before {
                return Err(Failure::new(
                    EXIT_USAGE,
                    format!("{flag} {name:?}: the server has no such entry"),
                ));
            }
            changed = true;
        }
        for (k, v) in pairs(kind, given)? {
            table.retain(|old, _| !same(old, &k));
            table.insert(k, v);
            changed = true;
        }
    }
    // Headers need `auth = "headers"`: the first one set turns it on, the
    // last one removed off, unless --auth says otherwise.
    if set.auth.is_none() {
        let any = !spec.headers.is_empty() || !spec.header_files.is_empty();
        match spec.auth.as_str() {
            "none" | "" if any => spec.auth = "headers".into(),
            "headers" if !any => spec.auth = "none".into(),
            _ => {}
        }
    }
    let oauth_given = set.oauth_client_id.is_some()
        || set.oauth_client_secret_file.is_some()
        || !set.oauth_scopes.is_empty()
        || set.oauth_client_metadata_url.is_some();
    if oauth_given {
        let o = spec.oauth.get_or_insert_with(Default::default);
        if let Some(id) = &set.oauth_client_id {
            o.client_id = id.clone();
        }
        if let Some(f) = &set.oauth_client_secret_file {
            o.client_secret = client_secret(f)?;
        }
        if !set.oauth_scopes.is_empty() {
            o.scopes = set.oauth_scopes.clone();
        }
        if let Some(u) = &set.oauth_client_metadata_url {
            o.client_metadata_url = u.clone();
        }
        changed = true;
    }
    for (field, value) in [
        (&mut spec.max_message_bytes, set.max_message_bytes),
        (&mut spec.liveness_interval_sec, set.liveness_interval_sec),
    ] {
        if value.is_some() {
            *field = value;
            changed = true;
        }
    }
    if let Some(sec) = set.request_timeout_sec {
        spec.request_timeout_ms = sec.saturating_mul(1000);
        changed = true;
    }
    Ok(changed)
}

/// `--transport`'s value. Errors (exit 64): neither `stdio` nor `http`.
fn transport(given: &str) -> Result<pb::Transport, Failure> {
    match given {
        "stdio" => Ok(pb::Transport::Stdio),
        "http" => Ok(pb::Transport::Http),
        // Not repeated: it may be a secret typed in the wrong place.
        _ => Err(Failure::new(
            EXIT_USAGE,
            "--transport: expected stdio or http".to_owned(),
        )),
    }
}

/// `--auth`'s value. Errors (exit 64): not a kind; not repeated, as it may
/// be a secret typed in the wrong place.
fn auth_kind(given: &str) -> Result<String, Failure> {
    match given {
        "none" | "headers" | "oauth" => Ok(given.to_owned()),
        _ => Err(Failure::new(
            EXIT_USAGE,
            "--auth: expected none, headers or oauth".to_owned(),
        )),
    }
}

/// The content of `--oauth-client-secret-file`, read here, on the admin's
/// machine, and sent to be sealed in the store.
fn client_secret(file: &str) -> Result<String, Failure> {
    switchyard_common::server_spec::load_header_value(
        "--oauth-client-secret-file",
        std::path::Path::new(file),
    )
    .map_err(|e| Failure::new(EXIT_USAGE, e.to_string()))
}

/// The server spec of `servers add`'s flags. Errors (exit 64): an unknown
/// `--transport`, an `--env` without `=`, a `--header` without `:`, a
/// `--header-file` without `=`, an unknown `--auth`.
fn spec(a: ServerArgs) -> Result<pb::ServerSpec, Failure> {
    let set = a.settings;
    let transport = transport(&a.transport)?;
    let env: HashMap<_, _> = pairs(Pairs::ENV, &set.env)?.into_iter().collect();
    let headers: HashMap<_, _> = pairs(Pairs::HEADER, &set.headers)?.into_iter().collect();
    let header_files: HashMap<_, _> = pairs(Pairs::HEADER_FILE, &set.header_files)?
        .into_iter()
        .collect();
    let any_oauth = set.oauth_client_id.is_some()
        || set.oauth_client_secret_file.is_some()
        || !set.oauth_scopes.is_empty()
        || set.oauth_client_metadata_url.is_some()
        || a.oauth_allow_unadvertised_pkce;
    if any_oauth && set.auth.as_deref() != Some("oauth") {
        return Err(Failure::new(
            EXIT_USAGE,
            "--oauth-* flags need --auth oauth".to_owned(),
        ));
    }
    let client_secret = match &set.oauth_client_secret_file {
        Some(f) => client_secret(f)?,
        None => String::new(),
    };
    let oauth = any_oauth.then(|| pb::OAuthSettings {
        client_id: set.oauth_client_id.clone().unwrap_or_default(),
        client_secret,
        scopes: set.oauth_scopes.clone(),
        client_metadata_url: set.oauth_client_metadata_url.clone().unwrap_or_default(),
        allow_unadvertised_pkce: a.oauth_allow_unadvertised_pkce,
        ..Default::default()
    });
    Ok(pb::ServerSpec {
        name: a.name,
        transport: transport as i32,
        command: set.command.unwrap_or_default(),
        args: set.args,
        env,
        cwd: set.cwd.unwrap_or_default(),
        url: set.url.unwrap_or_default(),
        headers,
        era: a.era,
        request_timeout_ms: set
            .request_timeout_sec
            .map_or(0, |s| s.saturating_mul(1000)),
        max_message_bytes: set.max_message_bytes,
        liveness_interval_sec: set.liveness_interval_sec,
        auth: match set.auth.as_deref() {
            None => String::new(),
            Some(given) => auth_kind(given)?,
        },
        header_files,
        oauth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    /// `servers update ARGS…` applied to `spec`.
    fn update(spec: &pb::ServerSpec, args: &[&str]) -> Result<(bool, pb::ServerSpec), Failure> {
        let mut argv = vec!["switchyard", "servers", "update", "s"];
        argv.extend_from_slice(args);
        let Command::Servers(ServersCommand::Update(a)) =
            Cli::try_parse_from(argv).expect("parses").command
        else {
            panic!("not servers update");
        };
        let mut spec = spec.clone();
        changed(&mut spec, &a).map(|c| (c, spec))
    }

    fn http() -> pb::ServerSpec {
        pb::ServerSpec {
            name: "s".into(),
            transport: pb::Transport::Http as i32,
            url: "https://h/mcp".into(),
            headers: [("Authorization".into(), "[redacted]".into())].into(),
            header_files: [("X-Key".into(), "/run/k".into())].into(),
            auth: "headers".into(),
            request_timeout_ms: 600_000,
            ..Default::default()
        }
    }

    #[test]
    fn only_the_settings_given_change() {
        let (changed, spec) = update(&http(), &["--request-timeout-sec", "5"]).unwrap();
        assert!(changed);
        assert_eq!(
            spec,
            pb::ServerSpec {
                request_timeout_ms: 5_000,
                ..http()
            }
        );
        let (changed, spec) = update(&http(), &[]).unwrap();
        assert!(!changed);
        assert_eq!(spec, http());
    }

    #[test]
    fn header_names_are_replaced_whatever_their_case() {
        let (_, spec) = update(
            &http(),
            &[
                "--header",
                "authorization: Bearer new",
                "--unset-header-file",
                "x-key",
            ],
        )
        .unwrap();
        assert_eq!(
            spec.headers,
            [("authorization".to_owned(), "Bearer new".to_owned())].into()
        );
        assert!(spec.header_files.is_empty());
        let e = update(&http(), &["--unset-header", "X-Nope"]).unwrap_err();
        assert_eq!(e.code, EXIT_USAGE);
        // Environment names are case-sensitive.
        let stdio = pb::ServerSpec {
            transport: pb::Transport::Stdio as i32,
            env: [("PATH".into(), "/bin".into())].into(),
            ..Default::default()
        };
        let (_, spec) = update(&stdio, &["--env", "path=/usr/bin"]).unwrap();
        assert_eq!(spec.env.len(), 2);
    }

    #[test]
    fn another_transport_drops_the_other_transports_settings() {
        let (_, spec) = update(
            &http(),
            &[
                "--transport",
                "stdio",
                "--command",
                "srv",
                "--arg",
                "--flag",
            ],
        )
        .unwrap();
        assert_eq!(spec.transport, pb::Transport::Stdio as i32);
        assert_eq!(
            (spec.command.as_str(), spec.args.as_slice()),
            ("srv", &["--flag".to_owned()][..])
        );
        assert!(spec.url.is_empty() && spec.headers.is_empty() && spec.header_files.is_empty());
        assert!(spec.auth.is_empty() && spec.oauth.is_none());
        let (_, spec) = update(&spec, &["--clear-args"]).unwrap();
        assert!(spec.args.is_empty());
    }

    #[test]
    fn the_first_header_turns_auth_headers_on_and_the_last_off() {
        let plain = pb::ServerSpec {
            headers: Default::default(),
            header_files: Default::default(),
            auth: "none".into(),
            ..http()
        };
        let (_, with) = update(&plain, &["--header", "X-A: 1"]).unwrap();
        assert_eq!(with.auth, "headers");
        let (_, without) = update(&with, &["--unset-header", "x-a"]).unwrap();
        assert_eq!(without.auth, "none");
        // --auth says otherwise: obeyed.
        let (_, oauth) = update(&plain, &["--header", "X-A: 1", "--auth", "oauth"]).unwrap();
        assert_eq!(oauth.auth, "oauth");
    }

    #[test]
    fn secrets_shown_redacted_may_not_go_elsewhere() {
        let stored = pb::ServerSpec {
            transport: pb::Transport::Stdio as i32,
            command: "srv".into(),
            env: [
                ("API_TOKEN".into(), "[redacted]".into()),
                ("PLAIN".into(), "1".into()),
            ]
            .into(),
            ..Default::default()
        };
        let (_, same) = update(&stored, &["--request-timeout-sec", "40"]).unwrap();
        secrets_stay(&stored, &same).unwrap();
        // Another variable, or working directory, may run other code.
        for flags in [
            ["--env", "PLAIN=2"],
            ["--cwd", "/elsewhere"],
            ["--env", "AUTH_TOKEN_URL=http://evil.example/"],
        ] {
            let (_, moved) = update(&stored, &flags).unwrap();
            let e = secrets_stay(&stored, &moved).unwrap_err();
            assert!(
                e.message.contains("--env API_TOKEN=…"),
                "{flags:?}: {}",
                e.message
            );
        }
        let (_, moved) = update(&stored, &["--command", "other"]).unwrap();
        let e = secrets_stay(&stored, &moved).unwrap_err();
        assert_eq!(e.code, EXIT_USAGE);
        assert!(e.message.contains("--env API_TOKEN=…"), "{}", e.message);
        let (_, given) = update(&stored, &["--command", "other", "--env", "API_TOKEN=t"]).unwrap();
        secrets_stay(&stored, &given).unwrap();
        // Arguments shown redacted: named too; the same ones given again
        // in full stay where they were.
        let keyed = pb::ServerSpec {
            args: vec!["--api-key".into(), "[redacted]".into()],
            ..stored.clone()
        };
        let (_, moved) = update(&keyed, &["--command", "other"]).unwrap();
        let e = secrets_stay(&keyed, &moved).unwrap_err();
        assert!(
            e.message.contains("every --arg (args[1] shows [redacted])")
                && e.message.contains("--env API_TOKEN=…"),
            "{}",
            e.message
        );
        let (_, again) = update(&keyed, &["--arg", "--api-key", "--arg", "sk-1"]).unwrap();
        secrets_stay(&keyed, &again).unwrap();
        // Another port is elsewhere too.
        let (_, port) = update(&http(), &["--url", "https://h:8443/mcp"]).unwrap();
        assert!(
            secrets_stay(&http(), &port)
                .unwrap_err()
                .message
                .contains("--header 'Authorization: …'")
        );
    }

    #[test]
    fn a_malformed_entry_is_named_by_its_place_not_its_value() {
        let e = update(
            &http(),
            &["--header", "X-A: 1", "--header", "Authorization=SECRET"],
        )
        .unwrap_err();
        assert_eq!(e.code, EXIT_USAGE);
        assert!(
            e.message.contains("--header #2") && !e.message.contains("SECRET"),
            "{}",
            e.message
        );
        let e = update(&http(), &["--auth", "SECRET"]).unwrap_err();
        assert!(!e.message.contains("SECRET"), "{}", e.message);
    }
}
