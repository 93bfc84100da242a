//! The `switchyard` command line: run the all-in-one gateway (`up`), check
//! a configuration, and talk to a running control plane as an engine or an
//! admin would (`tools`, `call`, `servers`, `hints`, `policy`, `sessions`,
//! `events`, `interactions`, `answer`, `background`).
//!
//! Exit status: 0 success; 1 a failed command or an `isError` tool result;
//! 2 bad command-line syntax (clap); 64 a bad configuration file or a bad
//! argument value (`--args` that is not a JSON object, an unknown
//! `--mode`); 69 the control plane cannot be reached. Output that goes to a
//! closed pipe (`switchyard tools | head -1`) ends the command quietly.

use crate::config::Config;
use crate::interactions::{self, form};
use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};
use std::path::PathBuf;
use switchyard_common::tls::{AuthChannel, BearerToken, PemIdentity};
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::admin_service_client::AdminServiceClient;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

pub use crate::server::EXIT_USAGE;
/// Exit status when the control plane is unreachable (EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;

/// `switchyard`.
#[derive(Debug, Parser)]
#[command(
    name = "switchyard",
    version,
    about = "Switchyard, the MCP gateway: run it, and use it from the command line"
)]
pub struct Cli {
    /// The control plane's gRPC endpoint.
    #[arg(
        long,
        global = true,
        env = "SWITCHYARD_ENDPOINT",
        default_value = "http://127.0.0.1:7700"
    )]
    pub endpoint: String,
    /// A file holding the bearer token to send (content trimmed). Without
    /// it, the token in SWITCHYARD_TOKEN is sent, if set.
    #[arg(
        long,
        global = true,
        env = "SWITCHYARD_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub token_file: Option<PathBuf>,
    /// PEM CA file that signed the control plane's certificate (for an
    /// https:// endpoint).
    #[arg(long, global = true, env = "SWITCHYARD_CA_FILE", value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate for mTLS (with --key-file).
    #[arg(
        long,
        global = true,
        env = "SWITCHYARD_CERT_FILE",
        value_name = "FILE",
        requires = "key_file"
    )]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of --cert-file.
    #[arg(
        long,
        global = true,
        env = "SWITCHYARD_KEY_FILE",
        value_name = "FILE",
        requires = "cert_file"
    )]
    pub key_file: Option<PathBuf>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway on one machine: control plane + one sidecar per server.
    Up {
        /// The configuration file (TOML; see docs/configuration.md).
        #[arg(long)]
        config: PathBuf,
    },
    /// Check a configuration file and exit (0 valid, 64 invalid).
    CheckConfig {
        /// The configuration file.
        file: PathBuf,
    },
    /// List the tools an engine sees.
    Tools {
        /// The session whose view to show (all servers if omitted).
        #[arg(long)]
        session: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Call a tool by its engine-visible name.
    Call {
        /// Engine-visible tool name (see `switchyard tools`).
        tool: String,
        /// Arguments, a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// The session to call in.
        #[arg(long)]
        session: Option<String>,
        /// Print the raw CallToolResult as JSON.
        #[arg(long)]
        json: bool,
        /// Timeout in milliseconds (0 = the server's default).
        #[arg(long, default_value_t = 0)]
        timeout_ms: u64,
    },
    /// Manage servers.
    #[command(subcommand)]
    Servers(ServersCommand),
    /// Override a tool's hints (readOnlyHint, destructiveHint,
    /// idempotentHint), or clear the overrides.
    #[command(subcommand)]
    Hints(HintsCommand),
    /// Set a tool's policy (default, confirm, disabled) and when its calls
    /// move to the background (always, auto), or clear them.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Background calls (stage B): list them, or cancel one.
    #[command(subcommand)]
    Background(BackgroundCommand),
    /// Manage sessions.
    #[command(subcommand)]
    Sessions(SessionsCommand),
    /// Follow a session's events (interactions are shown as cards).
    Events {
        /// The session.
        #[arg(long)]
        session: String,
        /// Print one JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// List a session's interactions (open ones; `--all` adds the kept
    /// resolved ones).
    Interactions {
        /// The session.
        #[arg(long)]
        session: String,
        /// Include resolved interactions.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Answer an interaction: exit 0 when accepted, 1 when refused (with
    /// the control plane's reason).
    Answer {
        /// The session.
        #[arg(long)]
        session: String,
        /// The interaction id.
        interaction: String,
        /// The answer.
        #[command(flatten)]
        choice: AnswerChoice,
    },
}

/// The one answer of `switchyard answer`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct AnswerChoice {
    /// form, url: accept; form: with this content (a JSON object of the
    /// form's fields; `{}` for url).
    #[arg(long, value_name = "JSON")]
    pub accept: Option<String>,
    /// form, url: decline.
    #[arg(long)]
    pub decline: bool,
    /// Any kind: cancel (dismiss).
    #[arg(long)]
    pub cancel: bool,
    /// approval: approve the call.
    #[arg(long)]
    pub approve: bool,
    /// approval: deny the call.
    #[arg(long)]
    pub deny: bool,
}

/// `switchyard servers ...`.
#[derive(Debug, Subcommand)]
pub enum ServersCommand {
    /// List servers and their status.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a server.
    Add(ServerArgs),
    /// Remove a server.
    Remove {
        /// Its name.
        name: String,
    },
    /// Show one server's status (with its tools).
    Status {
        /// Its name.
        name: String,
    },
    /// List a server's tools: engine name, title, effective hints and
    /// where they come from, policy.
    Tools {
        /// Its name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `switchyard hints ...`.
#[derive(Debug, Subcommand)]
pub enum HintsCommand {
    /// Override some of a tool's hints (the others keep their override).
    Set {
        /// The server.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// readOnlyHint.
        #[arg(long, value_name = "BOOL")]
        read_only: Option<bool>,
        /// destructiveHint.
        #[arg(long, value_name = "BOOL")]
        destructive: Option<bool>,
        /// idempotentHint.
        #[arg(long, value_name = "BOOL")]
        idempotent: Option<bool>,
    },
    /// Remove a tool's hint overrides.
    Clear {
        /// The server.
        server: String,
        /// The tool's name on the server.
        tool: String,
    },
}

/// `switchyard policy ...`.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Set a tool's policy and/or when its calls move to the background.
    Set {
        /// The server.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// default, confirm or disabled (omitted: keep the current one;
        /// then give --background).
        policy: Option<String>,
        /// always (every call moves to the background at once) or auto
        /// (after backgroundCalls.autoAfterSec).
        #[arg(long, value_name = "always|auto")]
        background: Option<String>,
    },
    /// Remove the policy and background setting set by an administrator
    /// (back to the derived policy, and `auto`).
    Clear {
        /// The server.
        server: String,
        /// The tool's name on the server.
        tool: String,
    },
}

/// `switchyard background ...`.
#[derive(Debug, Subcommand)]
pub enum BackgroundCommand {
    /// List background calls: running ones (`--all` adds the finished ones
    /// still kept), of one session or of all.
    List {
        /// Only this session's.
        #[arg(long)]
        session: Option<String>,
        /// Include finished calls.
        #[arg(long)]
        all: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Calls fetched per request (1 to 1000); every page is listed.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=1000))]
        page_size: u32,
    },
    /// Cancel a running background call (`tasks/cancel` upstream, best
    /// effort; recorded as cancelled).
    Cancel {
        /// The background call's id.
        id: String,
        /// The session it must belong to.
        #[arg(long)]
        session: Option<String>,
    },
}

/// A server spec on the command line.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Unique name.
    #[arg(long)]
    pub name: String,
    /// `stdio` or `http`.
    #[arg(long)]
    pub transport: String,
    /// stdio: the program.
    #[arg(long)]
    pub command: Option<String>,
    /// stdio: an argument (repeatable).
    #[arg(long = "arg", allow_hyphen_values = true)]
    pub args: Vec<String>,
    /// stdio: NAME=value (repeatable).
    #[arg(long = "env")]
    pub env: Vec<String>,
    /// stdio: working directory.
    #[arg(long)]
    pub cwd: Option<String>,
    /// http: endpoint URL.
    #[arg(long)]
    pub url: Option<String>,
    /// http: 'Name: value' (repeatable).
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// auto, 2026-07-28 or 2025-11-25.
    #[arg(long, default_value = "auto")]
    pub era: String,
}

/// `switchyard sessions ...`.
#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Create a session; prints its id.
    Create(SessionArgs),
    /// List sessions.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a session.
    Get {
        /// Session id.
        id: String,
    },
    /// Replace a session's profile.
    Update {
        /// Session id.
        id: String,
        /// The new profile.
        #[command(flatten)]
        profile: SessionArgs,
    },
    /// Delete a session.
    Delete {
        /// Session id.
        id: String,
    },
}

/// A session profile on the command line.
#[derive(Debug, Args)]
pub struct SessionArgs {
    /// An enabled server (repeatable; none = all).
    #[arg(long = "server")]
    pub servers: Vec<String>,
    /// ask, auto or read_only.
    #[arg(long, default_value = "ask")]
    pub mode: String,
    /// A root URI (repeatable).
    #[arg(long = "root")]
    pub roots: Vec<String>,
}

/// A failure with its exit status.
#[derive(Debug)]
pub struct Failure {
    /// Exit status.
    pub code: u8,
    /// One-line reason.
    pub message: String,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Self {
        // "FailedPrecondition" -> "failed precondition".
        let code = format!("{:?}", s.code());
        let mut words = String::new();
        for (i, c) in code.chars().enumerate() {
            if c.is_uppercase() && i > 0 {
                words.push(' ');
            }
            words.push(c.to_ascii_lowercase());
        }
        Failure::new(1, format!("{words}: {}", s.message()))
    }
}

/// How the CLI authenticates to the control plane: the global flags
/// `--token-file` (or `SWITCHYARD_TOKEN`), `--ca-file`, `--cert-file` and
/// `--key-file`, read and checked when a command connects.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// Sent as `authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Trusted CA(s) for an `https://` endpoint.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate and key (mTLS).
    pub identity: Option<PemIdentity>,
}

impl ConnectOptions {
    /// Reads the files the flags name; a bad one exits 64 naming the flag
    /// and the file.
    pub fn from_flags(cli: &ConnectFlags) -> Result<ConnectOptions, Failure> {
        let usage =
            |e: switchyard_common::tls::CredentialError| Failure::new(EXIT_USAGE, e.to_string());
        let token = match &cli.token_file {
            Some(f) => Some(switchyard_common::tls::load_token("--token-file", f).map_err(usage)?),
            None => std::env::var("SWITCHYARD_TOKEN")
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty()),
        };
        let ca_pem = match &cli.ca_file {
            Some(f) => {
                Some(switchyard_common::tls::load_certificates("--ca-file", f).map_err(usage)?)
            }
            None => None,
        };
        let identity = match (&cli.cert_file, &cli.key_file) {
            (Some(c), Some(k)) => Some(
                switchyard_common::tls::load_identity("--cert-file", c, "--key-file", k)
                    .map_err(usage)?,
            ),
            _ => None,
        };
        Ok(ConnectOptions {
            token,
            ca_pem,
            identity,
        })
    }
}

/// The connection flags of the running command.
#[derive(Debug, Clone, Default)]
pub struct ConnectFlags {
    /// `--token-file`.
    pub token_file: Option<PathBuf>,
    /// `--ca-file`.
    pub ca_file: Option<PathBuf>,
    /// `--cert-file`.
    pub cert_file: Option<PathBuf>,
    /// `--key-file`.
    pub key_file: Option<PathBuf>,
}

/// The connection flags of the running command (set by [`run`]); the
/// connection helpers below read them, so every subcommand connects the
/// same way (and commands that do not connect never read the files).
static CONNECT: std::sync::Mutex<Option<ConnectFlags>> = std::sync::Mutex::new(None);

async fn channel(endpoint: &str) -> Result<AuthChannel, Failure> {
    let flags = CONNECT.lock().unwrap().clone().unwrap_or_default();
    let options = ConnectOptions::from_flags(&flags)?;
    let mut ep = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .map_err(|e| Failure::new(EXIT_USAGE, format!("--endpoint {endpoint:?}: {e}")))?
        .connect_timeout(std::time::Duration::from_secs(5));
    if endpoint.starts_with("https://") {
        switchyard_common::tls::install_crypto_provider();
        let Some(ca) = &options.ca_pem else {
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "--endpoint {endpoint}: an https:// endpoint needs --ca-file (the CA that signed the control plane's certificate)"
                ),
            ));
        };
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        if let Some(identity) = &options.identity {
            tls = tls.identity(identity.to_tonic());
        }
        ep = ep
            .tls_config(tls)
            .map_err(|e| Failure::new(EXIT_USAGE, format!("--endpoint {endpoint}: TLS: {e}")))?;
    }
    let channel: Channel = ep.connect().await.map_err(|e| {
        Failure::new(
            EXIT_UNAVAILABLE,
            format!(
                "cannot reach the control plane at {endpoint}: {}",
                switchyard_common::error_chain(&e)
            ),
        )
    })?;
    Ok(tonic::service::interceptor::InterceptedService::new(
        channel,
        BearerToken::new(options.token.as_deref()),
    ))
}

async fn engine(endpoint: &str) -> Result<EngineServiceClient<AuthChannel>, Failure> {
    Ok(EngineServiceClient::new(channel(endpoint).await?)
        .max_decoding_message_size(64 * 1024 * 1024))
}

async fn admin(endpoint: &str) -> Result<AdminServiceClient<AuthChannel>, Failure> {
    Ok(AdminServiceClient::new(channel(endpoint).await?)
        .max_decoding_message_size(64 * 1024 * 1024)
        .max_encoding_message_size(64 * 1024 * 1024))
}

/// Prints a line to stdout; a closed pipe ends the process quietly.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = writeln!(stdout, $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

fn print_json(v: &Value) {
    out!("{}", serde_json::to_string_pretty(v).expect("serialises"));
}

fn parse_json_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// Runs a command.
pub async fn run(cli: Cli) -> Result<(), Failure> {
    *CONNECT.lock().unwrap() = Some(ConnectFlags {
        token_file: cli.token_file.clone(),
        ca_file: cli.ca_file.clone(),
        cert_file: cli.cert_file.clone(),
        key_file: cli.key_file.clone(),
    });
    let ep = cli.endpoint.as_str();
    match cli.command {
        Command::Up { config } => {
            let loaded =
                Config::load(&config).map_err(|e| Failure::new(EXIT_USAGE, e.to_string()))?;
            crate::up::check(&loaded)
                .map_err(|e| Failure::new(EXIT_USAGE, format!("{}: {e}", config.display())))?;
            let config = loaded;
            crate::up::run(config)
                .await
                .map_err(|e| Failure::new(1, format!("{e:#}")))
        }
        Command::CheckConfig { file } => {
            let c = Config::load(&file).map_err(|e| Failure::new(EXIT_USAGE, e.to_string()))?;
            let n = c.servers.len();
            out!(
                "{}: ok ({n} server{})",
                file.display(),
                if n == 1 { "" } else { "s" }
            );
            if let Err(e) = crate::up::check(&c) {
                // Valid for replicas; `up` alone would refuse it.
                eprintln!("note: `switchyard up` would refuse this file: {e}");
            }
            let bound = c.auth.tokens.iter().any(|t| !t.servers.is_empty())
                || c.auth.mtls.iter().any(|m| !m.servers.is_empty());
            if bound && !c.auth.required {
                eprintln!(
                    "note: auth.required is false: a sidecar that presents no credentials may act for any server, so `servers` on sidecar credentials binds only those that present one"
                );
            }
            Ok(())
        }
        Command::Tools { session, json } => {
            let resp = engine(ep)
                .await?
                .list_tools(pb::ListToolsRequest {
                    session_id: session.unwrap_or_default(),
                })
                .await?
                .into_inner();
            if json {
                let tools: Vec<Value> = resp
                    .tools
                    .iter()
                    .map(|t| {
                        let h = t.hints.unwrap_or_default();
                        json!({
                            "name": t.name, "server": t.server, "upstreamName": t.upstream_name,
                            "title": t.title, "description": t.description,
                            "inputSchema": parse_json_text(&t.input_schema_json),
                            "hints": {"readOnlyHint": h.read_only_hint, "destructiveHint": h.destructive_hint,
                                      "idempotentHint": h.idempotent_hint, "openWorldHint": h.open_world_hint},
                        })
                    })
                    .collect();
                print_json(
                    &json!({"tools": tools, "unavailableServers": resp.unavailable_servers}),
                );
            } else {
                for t in &resp.tools {
                    let first = t.description.lines().next().unwrap_or("");
                    out!(
                        "{:<40} {}",
                        t.name,
                        if t.title != t.upstream_name {
                            &t.title
                        } else {
                            first
                        }
                    );
                }
                for s in &resp.unavailable_servers {
                    eprintln!("(server {s} is unavailable: its tools are not listed)");
                }
            }
            Ok(())
        }
        Command::Call {
            tool,
            args,
            session,
            json,
            timeout_ms,
        } => {
            let parsed: Value = serde_json::from_str(&args)
                .map_err(|e| Failure::new(EXIT_USAGE, format!("--args is not valid JSON: {e}")))?;
            if !parsed.is_object() {
                return Err(Failure::new(EXIT_USAGE, "--args must be a JSON object"));
            }
            let resp = engine(ep)
                .await?
                .call_tool(pb::CallToolRequest {
                    session_id: session.unwrap_or_default(),
                    tool: tool.clone(),
                    arguments_json: args,
                    timeout_ms,
                    ..Default::default()
                })
                .await?
                .into_inner();
            if let (true, Some(bg)) = (json, &resp.background) {
                // Moved to the background: the record (its result comes
                // later, see `switchyard events` / `background list`).
                let rec = crate::background::BackgroundRecord::from_pb(bg.clone());
                print_json(&json!({"movedToBackground": rec.to_json(), "text": resp.text}));
            } else if json {
                print_json(&parse_json_text(&resp.result_json));
            } else {
                if !resp.text.is_empty() {
                    out!("{}", resp.text);
                }
                if !resp.structured_content_json.is_empty() {
                    out!("structuredContent: {}", resp.structured_content_json);
                }
            }
            if resp.is_error {
                return Err(Failure::new(1, format!("tool {tool} returned isError")));
            }
            Ok(())
        }
        Command::Interactions { session, all, json } => {
            let resp = engine(ep)
                .await?
                .list_interactions(pb::ListInteractionsRequest {
                    session_id: session,
                    include_resolved: all,
                })
                .await?
                .into_inner();
            if json {
                let list: Vec<Value> = resp
                    .interactions
                    .iter()
                    .map(interactions::pb_to_json)
                    .collect();
                print_json(&json!({"interactions": list}));
            } else {
                if resp.interactions.is_empty() {
                    eprintln!("(no interactions)");
                }
                for i in &resp.interactions {
                    for line in render_interaction(i, i.status == "open") {
                        out!("{line}");
                    }
                    out!("");
                }
            }
            Ok(())
        }
        Command::Answer {
            session,
            interaction,
            choice,
        } => {
            let (action, content_json) = match choice {
                AnswerChoice {
                    accept: Some(content),
                    ..
                } => {
                    serde_json::from_str::<Value>(&content).map_err(|e| {
                        Failure::new(EXIT_USAGE, format!("--accept is not valid JSON: {e}"))
                    })?;
                    ("accept", content)
                }
                AnswerChoice { decline: true, .. } => ("decline", String::new()),
                AnswerChoice { cancel: true, .. } => ("cancel", String::new()),
                AnswerChoice { approve: true, .. } => ("approve", String::new()),
                AnswerChoice { deny: true, .. } => ("deny", String::new()),
                _ => return Err(Failure::new(EXIT_USAGE, "give one answer")),
            };
            let i = engine(ep)
                .await?
                .answer_interaction(pb::AnswerInteractionRequest {
                    session_id: session,
                    interaction_id: interaction,
                    action: action.into(),
                    content_json,
                })
                .await?
                .into_inner();
            out!("{}: {} ({})", i.id, i.outcome, i.status);
            Ok(())
        }
        Command::Servers(cmd) => servers(ep, cmd).await,
        cmd @ (Command::Hints(_) | Command::Policy(_)) => tool_settings(ep, cmd).await,
        Command::Background(cmd) => background(ep, cmd).await,
        Command::Sessions(cmd) => sessions(ep, cmd).await,
        Command::Events { session, json } => {
            let mut stream = engine(ep)
                .await?
                .subscribe_events(pb::SubscribeEventsRequest {
                    session_id: session,
                    background_after_ms: 0,
                })
                .await?
                .into_inner();
            while let Some(ev) = stream.message().await? {
                if json {
                    out!(
                        "{}",
                        json!({"type": ev.r#type, "sessionId": ev.session_id, "atMs": ev.at_ms, "data": parse_json_text(&ev.data_json)})
                    );
                } else if ev.r#type.starts_with("background_call.") {
                    let rec: crate::background::BackgroundRecord =
                        serde_json::from_value(parse_json_text(&ev.data_json)).unwrap_or_default();
                    out!("{} {}", ev.at_ms, ev.r#type);
                    for line in render_background(&rec) {
                        out!("  {line}");
                    }
                } else if ev.r#type.starts_with("interaction.") {
                    let i = interactions::pb_from_json(&parse_json_text(&ev.data_json));
                    out!("{} {}", ev.at_ms, ev.r#type);
                    for line in render_interaction(&i, ev.r#type == "interaction.required") {
                        out!("  {line}");
                    }
                } else {
                    out!("{} {} {}", ev.at_ms, ev.r#type, ev.data_json);
                }
            }
            eprintln!("(the event stream ended: the session was deleted)");
            Ok(())
        }
    }
}

async fn servers(ep: &str, cmd: ServersCommand) -> Result<(), Failure> {
    let mut client = admin(ep).await?;
    match cmd {
        ServersCommand::List { json } => {
            let resp = client
                .list_servers(pb::ListServersRequest {})
                .await?
                .into_inner();
            if json {
                let list: Vec<Value> = resp.servers.iter().map(status_json).collect();
                print_json(&json!({"servers": list}));
            } else {
                for s in &resp.servers {
                    let name = s.spec.as_ref().map(|s| s.name.as_str()).unwrap_or("");
                    out!(
                        "{name:<24} {:<9} tools={:<4} {}",
                        s.state,
                        s.tool_count,
                        s.protocol_version
                    );
                }
            }
        }
        ServersCommand::Add(a) => {
            let transport = match a.transport.as_str() {
                "stdio" => pb::Transport::Stdio,
                "http" => pb::Transport::Http,
                other => {
                    return Err(Failure::new(
                        EXIT_USAGE,
                        format!("--transport {other:?}: expected stdio or http"),
                    ));
                }
            };
            let mut env = std::collections::HashMap::new();
            for e in &a.env {
                let (k, v) = e.split_once('=').ok_or_else(|| {
                    Failure::new(EXIT_USAGE, format!("--env {e:?}: expected NAME=value"))
                })?;
                env.insert(k.to_owned(), v.to_owned());
            }
            let mut headers = std::collections::HashMap::new();
            for h in &a.headers {
                let (k, v) = h.split_once(':').ok_or_else(|| {
                    Failure::new(
                        EXIT_USAGE,
                        format!("--header {h:?}: expected 'Name: value'"),
                    )
                })?;
                headers.insert(k.trim().to_owned(), v.trim().to_owned());
            }
            let status = client
                .add_server(pb::AddServerRequest {
                    spec: Some(pb::ServerSpec {
                        name: a.name,
                        transport: transport as i32,
                        command: a.command.unwrap_or_default(),
                        args: a.args,
                        env,
                        cwd: a.cwd.unwrap_or_default(),
                        url: a.url.unwrap_or_default(),
                        headers,
                        era: a.era,
                        request_timeout_ms: 0,
                    }),
                })
                .await?
                .into_inner();
            out!(
                "added {} ({})",
                status.spec.map(|s| s.name).unwrap_or_default(),
                status.state
            );
        }
        ServersCommand::Remove { name } => {
            client
                .remove_server(pb::RemoveServerRequest { name: name.clone() })
                .await?;
            out!("removed {name}");
        }
        ServersCommand::Status { name } => {
            let s = client
                .get_server_status(pb::GetServerStatusRequest { name: name.clone() })
                .await?
                .into_inner();
            let tools = client
                .list_server_tools(pb::ListServerToolsRequest { server: name })
                .await?
                .into_inner();
            let mut v = status_json(&s);
            v["tools"] = tools.tools.iter().map(server_tool_json).collect();
            print_json(&v);
        }
        ServersCommand::Tools { name, json } => {
            let resp = client
                .list_server_tools(pb::ListServerToolsRequest { server: name })
                .await?
                .into_inner();
            if json {
                print_json(
                    &json!({"tools": resp.tools.iter().map(server_tool_json).collect::<Vec<_>>()}),
                );
            } else {
                out!(
                    "{:<36} {:<24} {:<9} {:<9} {:<9} {:<9} policy",
                    "name",
                    "title",
                    "readOnly",
                    "destruct",
                    "idempot",
                    "openWorld"
                );
                for t in &resp.tools {
                    out!("{}", server_tool_line(t));
                }
            }
        }
    }
    Ok(())
}

fn server_tool_json(t: &pb::ServerTool) -> Value {
    let h = t.hints.unwrap_or_default();
    let src = t.hint_sources.clone().unwrap_or_default();
    json!({
        "name": t.name, "upstreamName": t.upstream_name, "title": t.title,
        "hints": {"readOnlyHint": h.read_only_hint, "destructiveHint": h.destructive_hint,
                  "idempotentHint": h.idempotent_hint, "openWorldHint": h.open_world_hint},
        "hintSources": {"readOnlyHint": src.read_only_hint, "destructiveHint": src.destructive_hint,
                        "idempotentHint": src.idempotent_hint, "openWorldHint": src.open_world_hint},
        "policy": t.policy, "policySet": t.policy_set, "inCatalogue": t.in_catalogue,
        "background": t.background,
    })
}

/// `name title readOnly destructive idempotent openWorld policy`, each hint
/// as `value` with `*` for an override and `~` for the spec default.
fn server_tool_line(t: &pb::ServerTool) -> String {
    let h = t.hints.unwrap_or_default();
    let src = t.hint_sources.clone().unwrap_or_default();
    let cell = |v: bool, s: &str| {
        format!(
            "{v}{}",
            match s {
                "override" => "*",
                "default" => "~",
                _ => "",
            }
        )
    };
    let mut policy = t.policy.clone();
    if t.policy_set {
        policy.push_str(" (set)");
    }
    if t.background == "always" {
        policy.push_str(" background=always");
    }
    if !t.in_catalogue {
        policy.push_str(" [not in catalogue]");
    }
    format!(
        "{:<36} {:<24} {:<9} {:<9} {:<9} {:<9} {policy}",
        t.name,
        t.title,
        cell(h.read_only_hint, &src.read_only_hint),
        cell(h.destructive_hint, &src.destructive_hint),
        cell(h.idempotent_hint, &src.idempotent_hint),
        cell(h.open_world_hint, &src.open_world_hint),
    )
}

async fn tool_settings(ep: &str, cmd: Command) -> Result<(), Failure> {
    let mut client = admin(ep).await?;
    let t = match cmd {
        Command::Hints(HintsCommand::Set {
            server,
            tool,
            read_only,
            destructive,
            idempotent,
        }) => {
            if read_only.is_none() && destructive.is_none() && idempotent.is_none() {
                return Err(Failure::new(
                    EXIT_USAGE,
                    "hints set: give at least one of --read-only, --destructive, --idempotent",
                ));
            }
            client
                .set_tool_hints(pb::SetToolHintsRequest {
                    server,
                    tool,
                    read_only_hint: read_only,
                    destructive_hint: destructive,
                    idempotent_hint: idempotent,
                })
                .await?
        }
        Command::Hints(HintsCommand::Clear { server, tool }) => {
            client
                .clear_tool_hints(pb::ClearToolHintsRequest { server, tool })
                .await?
        }
        Command::Policy(PolicyCommand::Set {
            server,
            tool,
            policy,
            background,
        }) => {
            if policy.is_none() && background.is_none() {
                return Err(Failure::new(
                    EXIT_USAGE,
                    "policy set: give a policy (default, confirm, disabled), --background, or both",
                ));
            }
            if let Some(p) = &policy
                && crate::model::ToolPolicy::parse(p).is_none()
            {
                return Err(Failure::new(
                    EXIT_USAGE,
                    format!("policy {p:?}: expected default, confirm or disabled"),
                ));
            }
            if let Some(b) = &background
                && crate::model::BackgroundMode::parse(b).is_none()
            {
                return Err(Failure::new(
                    EXIT_USAGE,
                    format!("--background {b:?}: expected always or auto"),
                ));
            }
            client
                .set_tool_policy(pb::SetToolPolicyRequest {
                    server,
                    tool,
                    policy: policy.unwrap_or_default(),
                    background: background.unwrap_or_default(),
                })
                .await?
        }
        Command::Policy(PolicyCommand::Clear { server, tool }) => {
            client
                .clear_tool_policy(pb::ClearToolPolicyRequest { server, tool })
                .await?
        }
        _ => unreachable!("only hints and policy commands"),
    }
    .into_inner();
    out!("{}", server_tool_line(&t));
    Ok(())
}

async fn background(ep: &str, cmd: BackgroundCommand) -> Result<(), Failure> {
    let mut client = engine(ep).await?;
    match cmd {
        BackgroundCommand::List {
            session,
            all,
            json,
            page_size,
        } => {
            let mut calls: Vec<crate::background::BackgroundRecord> = Vec::new();
            let mut page_token = String::new();
            loop {
                let resp = client
                    .list_background_calls(pb::ListBackgroundCallsRequest {
                        session_id: session.clone().unwrap_or_default(),
                        include_finished: all,
                        page_size,
                        page_token,
                    })
                    .await?
                    .into_inner();
                calls.extend(
                    resp.calls
                        .into_iter()
                        .map(crate::background::BackgroundRecord::from_pb),
                );
                if resp.next_page_token.is_empty() {
                    break;
                }
                page_token = resp.next_page_token;
            }
            if json {
                print_json(
                    &json!({"calls": calls.iter().map(|c| c.to_json()).collect::<Vec<_>>()}),
                );
            } else if calls.is_empty() {
                eprintln!("(no {}background calls)", if all { "" } else { "running " });
            } else {
                for line in background_table(&calls, crate::model::now_ms()) {
                    out!("{line}");
                }
            }
        }
        BackgroundCommand::Cancel { id, session } => {
            let c = client
                .cancel_background_call(pb::CancelBackgroundCallRequest {
                    id,
                    session_id: session.unwrap_or_default(),
                })
                .await?
                .into_inner();
            out!("{}: {} ({} on {})", c.id, c.status, c.tool, c.server);
        }
    }
    Ok(())
}

/// A duration in ms as `45s`, `12m`, `3h`, `2d`.
fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `switchyard background list` as a table: a header, then one line per
/// call (id, status, mode, engine tool, session, age, message).
pub fn background_table(calls: &[crate::background::BackgroundRecord], now_ms: i64) -> Vec<String> {
    let tool_w = calls
        .iter()
        .map(|c| c.engine_tool.len().max(c.tool.len()))
        .max()
        .unwrap_or(0)
        .clamp(4, 40);
    let mut lines = vec![format!(
        "{:<36}  {:<14}  {:<4}  {:<tool_w$}  {:<32}  {:>4}  MESSAGE",
        "ID", "STATUS", "MODE", "TOOL", "SESSION", "AGE"
    )];
    for c in calls {
        let tool = if c.engine_tool.is_empty() {
            &c.tool
        } else {
            &c.engine_tool
        };
        // Finished with a result: what the model reads; else the status.
        let mut message = match &c.result {
            Some(r) if !r.model_text.is_empty() => {
                r.model_text.lines().next().unwrap_or("").to_owned()
            }
            _ => c.status_message.clone(),
        };
        if c.poll_error_since_ms > 0 && !c.last_poll_error.is_empty() {
            message = format!("polling fails: {}", c.last_poll_error);
        }
        let message: String = message.chars().take(80).collect();
        lines.push(format!(
            "{:<36}  {:<14}  {:<4}  {:<tool_w$}  {:<32}  {:>4}  {}",
            c.id,
            c.status,
            c.mode,
            tool,
            if c.session_id.is_empty() {
                "-"
            } else {
                &c.session_id
            },
            age(now_ms - c.created_at_ms),
            message
        ));
    }
    lines
}

/// A background call event as lines: what finished, then what the model
/// reads (the wake-up message) or why it failed.
pub fn render_background(c: &crate::background::BackgroundRecord) -> Vec<String> {
    let mut lines = vec![format!(
        "{} [{}] {} on {} ({} mode{})",
        c.id,
        c.status,
        if c.engine_tool.is_empty() {
            &c.tool
        } else {
            &c.engine_tool
        },
        c.server,
        c.mode,
        if c.run_id.is_empty() {
            String::new()
        } else {
            format!(", run {}", c.run_id)
        }
    )];
    if !c.status_message.is_empty() {
        lines.push(format!("message: {}", c.status_message));
    }
    if let Some(r) = &c.result {
        if r.is_error {
            lines.push("result: isError".into());
        }
        for l in r.model_text.lines() {
            lines.push(format!("| {l}"));
        }
        if !r.structured_content_json.is_empty() {
            lines.push(format!("structuredContent: {}", r.structured_content_json));
        }
        for a in &r.attachments {
            lines.push(format!(
                "attachment: {} ({}, {} bytes)",
                a.name, a.mime_type, a.size_bytes
            ));
        }
    }
    if !c.error_json.is_empty() {
        lines.push(format!("error: {}", c.error_json));
    }
    lines
}

fn status_json(s: &pb::ServerStatus) -> Value {
    let spec = s.spec.clone().unwrap_or_default();
    json!({
        "name": spec.name,
        "transport": if spec.transport == pb::Transport::Http as i32 { "http" } else { "stdio" },
        "state": s.state,
        "toolCount": s.tool_count,
        "toolsUpdatedAtMs": s.tools_updated_at_ms,
        "protocolVersion": s.protocol_version,
        "serverInfo": parse_json_text(&s.server_info_json),
        "sidecars": s.sidecars.iter().map(|c| json!({
            "sidecarId": c.sidecar_id, "callAddress": c.call_address, "upstreamState": c.upstream_state,
            "lastError": c.last_error, "registeredAtMs": c.registered_at_ms,
        })).collect::<Vec<_>>(),
        "nameCollisions": s.name_collisions,
    })
}

fn mode(m: &str) -> Result<i32, Failure> {
    Ok(match m {
        "ask" => pb::PermissionMode::Ask,
        "auto" => pb::PermissionMode::Auto,
        "read_only" => pb::PermissionMode::ReadOnly,
        other => {
            return Err(Failure::new(
                EXIT_USAGE,
                format!("--mode {other:?}: expected ask, auto or read_only"),
            ));
        }
    } as i32)
}

fn session_json(s: &pb::Session) -> Value {
    let mode = match pb::PermissionMode::try_from(s.permission_mode) {
        Ok(pb::PermissionMode::Auto) => "auto",
        Ok(pb::PermissionMode::ReadOnly) => "read_only",
        _ => "ask",
    };
    let mut v = json!({
        "id": s.id, "enabledServers": s.enabled_servers, "permissionMode": mode,
        "roots": s.roots.iter().map(|r| json!({"uri": r.uri, "name": r.name})).collect::<Vec<_>>(),
        "createdAtMs": s.created_at_ms, "updatedAtMs": s.updated_at_ms,
    });
    if !s.owner.is_empty() {
        v["owner"] = json!(s.owner);
    }
    v
}

async fn sessions(ep: &str, cmd: SessionsCommand) -> Result<(), Failure> {
    let mut client = engine(ep).await?;
    let roots = |r: Vec<String>| {
        r.into_iter()
            .map(|uri| pb::Root {
                uri,
                name: String::new(),
            })
            .collect()
    };
    match cmd {
        SessionsCommand::Create(a) => {
            let s = client
                .create_session(pb::CreateSessionRequest {
                    enabled_servers: a.servers,
                    permission_mode: mode(&a.mode)?,
                    roots: roots(a.roots),
                })
                .await?
                .into_inner();
            out!("{}", s.id);
        }
        SessionsCommand::List { json } => {
            let resp = client
                .list_sessions(pb::ListSessionsRequest {})
                .await?
                .into_inner();
            if json {
                print_json(
                    &json!({"sessions": resp.sessions.iter().map(session_json).collect::<Vec<_>>()}),
                );
            } else {
                for s in &resp.sessions {
                    out!(
                        "{}  {}",
                        s.id,
                        session_json(s)["permissionMode"].as_str().unwrap_or("")
                    );
                }
            }
        }
        SessionsCommand::Get { id } => {
            let s = client
                .get_session(pb::GetSessionRequest { session_id: id })
                .await?
                .into_inner();
            print_json(&session_json(&s));
        }
        SessionsCommand::Update { id, profile } => {
            let s = client
                .update_session(pb::UpdateSessionRequest {
                    session_id: id,
                    enabled_servers: profile.servers,
                    permission_mode: mode(&profile.mode)?,
                    roots: roots(profile.roots),
                })
                .await?
                .into_inner();
            print_json(&session_json(&s));
        }
        SessionsCommand::Delete { id } => {
            client
                .delete_session(pb::DeleteSessionRequest {
                    session_id: id.clone(),
                })
                .await?;
            out!("deleted {id}");
        }
    }
    Ok(())
}

/// An interaction as a card, one line per item: kind, id, who asks, the
/// message, then per kind the form's fields, the URL and its domain, or the
/// call to approve; with `how`, the `switchyard answer` flags that fit.
pub fn render_interaction(i: &pb::Interaction, how: bool) -> Vec<String> {
    let mut lines = Vec::new();
    let mut head = format!("{} {} [{}", i.kind, i.id, i.status);
    if !i.outcome.is_empty() {
        head.push_str(&format!(": {}", i.outcome));
    }
    head.push_str(&format!("] server {}", i.server));
    if !i.tool.is_empty() {
        head.push_str(&format!(", tool {}", i.tool));
    }
    if !i.run_id.is_empty() {
        head.push_str(&format!(", run {}", i.run_id));
    }
    lines.push(head);
    let resolved = i.status == "resolved";
    match i.kind.as_str() {
        "approval" => lines.push(format!(
            "approve the call to {} on {}? {}",
            if i.tool.is_empty() { "a tool" } else { &i.tool },
            i.server,
            i.message
        )),
        _ => lines.push(format!("message: {}", i.message)),
    }
    if !resolved {
        match i.kind.as_str() {
            "form" => {
                let schema = parse_json_text(&i.requested_schema_json);
                let fields = form::summarize_schema(&schema);
                if fields.is_empty() {
                    lines.push("fields: none".into());
                } else {
                    lines.push("fields:".into());
                }
                for f in &fields {
                    lines.push(format!("  {}", field_line(f)));
                }
            }
            "url" => {
                lines.push(format!("domain: {}", i.url_domain));
                lines.push(format!("url:    {}", i.url));
                lines.push(
                    "(Switchyard never opens this URL; open it yourself only if you trust the domain.)"
                        .into(),
                );
            }
            _ => {}
        }
    }
    if how && i.status == "open" {
        let flags = match i.kind.as_str() {
            "approval" => "--approve | --deny | --cancel",
            "url" => "--accept '{}' | --decline | --cancel",
            _ => "--accept JSON | --decline | --cancel",
        };
        lines.push(format!(
            "answer: switchyard answer --session {} {} {flags}",
            i.session_id, i.id
        ));
    }
    if resolved && !i.content_json.is_empty() {
        // The engine's own answer; shown as the field names only.
        let names: Vec<String> = parse_json_text(&i.content_json)
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        lines.push(format!("answered fields: {}", names.join(", ")));
    }
    lines
}

fn field_line(f: &form::FieldSummary) -> String {
    use form::FieldKind;
    let kind = match f.kind {
        FieldKind::String => "string",
        FieldKind::Number => "number",
        FieldKind::Integer => "integer",
        FieldKind::Boolean => "boolean",
        FieldKind::SingleSelect => "one of",
        FieldKind::MultiSelect => "any of",
        FieldKind::Unsupported => "unsupported",
    };
    let mut parts = vec![kind.to_owned()];
    if f.required {
        parts.push("required".into());
    }
    let l = &f.limits;
    if let Some(fmt) = &l.format {
        parts.push(format!("format {fmt}"));
    }
    if let Some(n) = l.min_length {
        parts.push(format!("min length {n}"));
    }
    if let Some(n) = l.max_length {
        parts.push(format!("max length {n}"));
    }
    if let Some(n) = &l.minimum {
        parts.push(format!("min {n}"));
    }
    if let Some(n) = &l.maximum {
        parts.push(format!("max {n}"));
    }
    if let Some(n) = l.min_items {
        parts.push(format!("min items {n}"));
    }
    if let Some(n) = l.max_items {
        parts.push(format!("max items {n}"));
    }
    if let Some(d) = &f.default {
        parts.push(format!("default {d}"));
    }
    if !f.options.is_empty() {
        let opts: Vec<String> = f
            .options
            .iter()
            .map(|o| {
                if o.label == o.value {
                    o.value.clone()
                } else {
                    format!("{} ({})", o.value, o.label)
                }
            })
            .collect();
        parts.push(format!("options: {}", opts.join(", ")));
    }
    if let Some(why) = &f.unsupported {
        parts.push(why.clone());
    }
    let mut line = format!("{:<16} {}", f.name, parts.join(", "));
    if let Some(t) = f.title.as_ref().or(f.description.as_ref()) {
        line.push_str(&format!(" - {t}"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cards_show_fields_urls_and_approvals() {
        let form = pb::Interaction {
            id: "i1".into(),
            session_id: "s".into(),
            kind: "form".into(),
            server: "orders".into(),
            tool: "create_order".into(),
            message: "Where to?".into(),
            requested_schema_json: r#"{"type":"object","properties":{"city":{"type":"string","title":"City","maxLength":40},"size":{"type":"string","enum":["s","m"],"default":"m"}},"required":["city"]}"#.into(),
            status: "open".into(),
            ..Default::default()
        };
        let text = render_interaction(&form, true).join("\n");
        assert!(
            text.contains("city             string, required, max length 40 - City"),
            "{text}"
        );
        assert!(
            text.contains("size             one of, default \"m\", options: s, m"),
            "{text}"
        );
        assert!(
            text.contains("switchyard answer --session s i1 --accept JSON"),
            "{text}"
        );
        let url = pb::Interaction {
            kind: "url".into(),
            url: "https://login.example.com/a?b=c".into(),
            url_domain: "login.example.com".into(),
            requested_schema_json: String::new(),
            ..form.clone()
        };
        let text = render_interaction(&url, true).join("\n");
        assert!(text.contains("domain: login.example.com"), "{text}");
        assert!(
            text.contains("url:    https://login.example.com/a?b=c"),
            "{text}"
        );
        assert!(text.contains("never opens"), "{text}");
        let approval = pb::Interaction {
            kind: "approval".into(),
            status: "resolved".into(),
            outcome: "deny".into(),
            ..url
        };
        let text = render_interaction(&approval, true).join("\n");
        assert!(
            text.contains("approval i1 [resolved: deny] server orders, tool create_order"),
            "{text}"
        );
        assert!(!text.contains("switchyard answer"), "{text}");
    }
}
