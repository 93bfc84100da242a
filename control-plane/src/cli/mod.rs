//! The `switchyard` command line: run the all-in-one gateway (`up`), check
//! a configuration, and talk to a running control plane as an engine or an
//! admin would (`tools`, `call`, `servers`, `hints`, `policy`, `sessions`,
//! `events`, `interactions`, `answer`, `background`, and stage E's
//! `resources`, `read`, `prompts`, `prompt`).
//!
//! This module owns what users script against: the commands and their
//! flags and environment variables (the clap types below), the exit
//! statuses, and [`run`], which hands each subcommand to its function in
//! [`commands`] (one module per subcommand or group). How a command
//! reaches the control plane is [`connect`]; how it prints, [`render`].
//!
//! Exit status: 0 success; 1 a failed command or an `isError` tool result;
//! 2 bad command-line syntax (clap); 64 a bad configuration file or a bad
//! argument value (`--args` that is not a JSON object, an unknown
//! `--mode`); 69 the control plane cannot be reached. Output that goes to a
//! closed pipe (`switchyard tools | head -1`) ends the command quietly.

pub mod commands;
pub mod connect;
pub mod render;

use clap::{Args, Parser, Subcommand};
use commands::tool_settings::ToolSetting;
use connect::{ConnectFlags, Remote};
use std::path::PathBuf;

pub use crate::server::EXIT_USAGE;
/// Exit status when the control plane is unreachable (EX_UNAVAILABLE).
pub const EXIT_UNAVAILABLE: u8 = 69;

/// The `--help` heading of the connection flags (`--endpoint`, the
/// credentials), shown apart from each command's own flags.
const CONNECTION: &str = "Connection (commands that talk to a control plane)";

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
        help_heading = CONNECTION,
        env = "SWITCHYARD_ENDPOINT",
        default_value = "http://127.0.0.1:7700"
    )]
    pub endpoint: String,
    /// A file holding the bearer token to send (content trimmed). Without
    /// it, the token in SWITCHYARD_TOKEN is sent, if set.
    #[arg(
        long,
        global = true,
        help_heading = CONNECTION,
        env = "SWITCHYARD_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub token_file: Option<PathBuf>,
    /// PEM CA file that signed the control plane's certificate (for an
    /// https:// endpoint).
    #[arg(
        long,
        global = true,
        help_heading = CONNECTION,
        env = "SWITCHYARD_CA_FILE",
        value_name = "FILE"
    )]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate for mTLS (with --key-file).
    #[arg(
        long,
        global = true,
        help_heading = CONNECTION,
        env = "SWITCHYARD_CERT_FILE",
        value_name = "FILE",
        requires = "key_file"
    )]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of --cert-file.
    #[arg(
        long,
        global = true,
        help_heading = CONNECTION,
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
    /// Call a tool by its engine-visible name. With `--session`, while the
    /// call waits for an approval or another interaction, stderr says so
    /// (with the interaction's id and how to answer it).
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
        /// Move the call to the background at once (as a tool whose policy
        /// says `--background always`); prints the background call's id.
        #[arg(long)]
        background: bool,
    },
    /// List the resources and resource templates an engine sees (every
    /// page).
    Resources {
        /// Only this server's.
        #[arg(long)]
        server: Option<String>,
        /// The session whose servers to list (all servers if omitted).
        #[arg(long)]
        session: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read a resource: the text a model reads to stdout, or with -o every
    /// content to a file (the first to FILE, the next to FILE.2...).
    Read {
        /// The server.
        server: String,
        /// The URI, byte-exact (a listed one, or a filled-in template).
        uri: String,
        /// The session to read in.
        #[arg(long)]
        session: Option<String>,
        /// Write the contents to this file.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// List the prompts an engine sees (every page).
    Prompts {
        /// Only this server's.
        #[arg(long)]
        server: Option<String>,
        /// The session whose servers to list (all servers if omitted).
        #[arg(long)]
        session: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Get a prompt with its arguments: its messages as text (attachments
    /// named).
    Prompt {
        /// The server.
        server: String,
        /// The prompt's name.
        name: String,
        /// An argument, NAME=VALUE (repeatable).
        #[arg(long = "arg", value_name = "NAME=VALUE")]
        args: Vec<String>,
        /// The session to get it in.
        #[arg(long)]
        session: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
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
    /// Follow a session's events (interactions are shown as cards), with
    /// UTC times. Says on stderr once it is subscribed, and subscribes
    /// again (to another replica) when its replica stops.
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
    /// Add a server, and wait for it to come up. Exit 0 once up (or added,
    /// with `--no-wait`, or for an oauth server), 1 if it is not up within
    /// `--timeout` (it stays added).
    Add(Box<ServerArgs>),
    /// Change some settings of a server, keeping the others (and the
    /// secrets answers show as `[redacted]`); `switchyard up` replaces its
    /// sidecar (make-before-break). Waits up to --timeout for a sidecar
    /// with the new settings (exit 1 if none connected).
    Update(Box<ServerUpdateArgs>),
    /// Remove a server.
    Remove {
        /// Its name.
        name: String,
    },
    /// Show one server's status (with its tools) as a card: state, era,
    /// transport, sidecars, counts, OAuth, tools. `--json` prints the JSON
    /// this command printed before it had a card.
    Status {
        /// Its name.
        name: String,
        /// Print JSON (the shape of `servers list --json`'s entries, plus
        /// `tools` as `servers tools --json` lists them).
        #[arg(long)]
        json: bool,
    },
    /// Authorize an `auth = oauth` server: prints the URL to open in a
    /// browser, waits for the authorization to finish, and prints the
    /// server's new status. Exit 0 once authorized, 1 if it failed or
    /// timed out.
    Authorize {
        /// Its name.
        name: String,
        /// A scope to ask for on top of the configured or discovered ones
        /// (repeatable).
        #[arg(long = "scope", value_name = "SCOPE")]
        scopes: Vec<String>,
        /// Print the URL and return without waiting.
        #[arg(long)]
        no_wait: bool,
        /// How long to wait, seconds (1 to 86400).
        #[arg(long, default_value_t = 600, value_name = "SEC", value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout: u64,
    },
    /// Forget an oauth server's tokens (it needs authorization again).
    Deauthorize {
        /// Its name.
        name: String,
    },
    /// List a server's tools: engine name, title, effective hints and
    /// where they come from, policy.
    ///
    /// A hint marked `*` is an administrator's override (`switchyard hints
    /// set`); `~` is the spec's default, the server did not declare it;
    /// unmarked, the server declared it. `(set)` after the policy: an
    /// administrator set it (`switchyard policy set`). `hints` and `policy`
    /// take the tool's name on the server or the engine name shown here.
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
        /// The tool's name on the server, or its engine name (as `servers
        /// tools` shows it).
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
        /// The tool's name on the server, or its engine name (as `servers
        /// tools` shows it).
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
        /// The tool's name on the server, or its engine name (as `servers
        /// tools` shows it).
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
        /// The tool's name on the server, or its engine name (as `servers
        /// tools` shows it).
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

/// `switchyard servers add`.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    /// Unique name.
    #[arg(long)]
    pub name: String,
    /// `stdio` or `http`.
    #[arg(long)]
    pub transport: String,
    #[command(flatten)]
    pub settings: ServerSettings,
    /// oauth: authorize even though the authorization server does not
    /// advertise PKCE (audited).
    #[arg(long)]
    pub oauth_allow_unadvertised_pkce: bool,
    /// auto, 2026-07-28 or 2025-11-25.
    #[arg(long, default_value = "auto")]
    pub era: String,
    /// Return as soon as the server is added, without waiting for it to
    /// come up.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the server to come up, seconds, 1 to 86400 (an
    /// oauth server is not waited for: it needs authorization first;
    /// `--no-wait` waits not at all).
    #[arg(long, default_value_t = 10, value_name = "SEC", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
}

/// The settings `servers add` and `servers update` share. `update` changes
/// only those given: a list flag (`--arg`, `--oauth-scope`) replaces the
/// whole list; a table flag (`--env`, `--header`, `--header-file`) sets
/// one entry.
#[derive(Debug, clap::Args)]
pub struct ServerSettings {
    /// stdio: the program.
    #[arg(long)]
    pub command: Option<String>,
    /// stdio: an argument (repeatable; `servers update`: replaces every
    /// argument).
    #[arg(long = "arg", allow_hyphen_values = true)]
    pub args: Vec<String>,
    /// stdio: NAME=value (repeatable; `servers update`: sets each one).
    #[arg(long = "env")]
    pub env: Vec<String>,
    /// stdio: working directory.
    #[arg(long)]
    pub cwd: Option<String>,
    /// http: endpoint URL (`servers update`: `[redacted]` parts, as answers
    /// show them, keep the stored secrets on the same scheme, host and
    /// port).
    #[arg(long)]
    pub url: Option<String>,
    /// http: 'Name: value' (repeatable). Put secrets in --header-file.
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// http: 'Name=PATH' (repeatable): a header whose secret value the
    /// server's sidecar reads from PATH on its machine.
    #[arg(long = "header-file")]
    pub header_files: Vec<String>,
    /// http: none, headers or oauth (default: headers when a header is
    /// given, else none; `servers update`: headers when the first header is
    /// set, none when the last is unset). oauth: authorize it afterwards
    /// with `switchyard servers authorize NAME`.
    #[arg(long)]
    pub auth: Option<String>,
    /// oauth: the client id of a client registered beforehand with the
    /// server's authorization server (else the client registers itself;
    /// `servers update`: another id drops the stored client secret).
    #[arg(long)]
    pub oauth_client_id: Option<String>,
    /// oauth: a file holding that client's secret, read here and sent to
    /// the control plane, which keeps it sealed.
    #[arg(long, value_name = "PATH")]
    pub oauth_client_secret_file: Option<String>,
    /// oauth: a scope to ask for (repeatable; default: the server's).
    #[arg(long = "oauth-scope", value_name = "SCOPE")]
    pub oauth_scopes: Vec<String>,
    /// oauth: the HTTPS URL of Switchyard's Client ID Metadata Document.
    #[arg(long, value_name = "URL")]
    pub oauth_client_metadata_url: Option<String>,
    /// Per-request timeout towards the server, seconds (1 to 604800; `servers
    /// add`'s default 600).
    #[arg(long, value_name = "SEC", value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub request_timeout_sec: Option<u64>,
    /// The largest message taken from the server, bytes (default 16 MiB,
    /// at least 1024).
    #[arg(long, value_name = "BYTES")]
    pub max_message_bytes: Option<u64>,
    /// http: seconds without hearing from the server before its sidecar
    /// checks it is still there (default 15; 0 = never; at most 86400).
    #[arg(long, value_name = "SEC")]
    pub liveness_interval_sec: Option<u64>,
}

/// `switchyard servers update`: the settings of [`ServerSettings`] that are
/// given, the `--unset-*` removals, `--clear-args`. Another `--transport`
/// drops the other transport's settings.
#[derive(Debug, clap::Args)]
pub struct ServerUpdateArgs {
    /// The server's name.
    pub name: String,
    /// `stdio` or `http`.
    #[arg(long)]
    pub transport: Option<String>,
    #[command(flatten)]
    pub settings: ServerSettings,
    /// stdio: no arguments.
    #[arg(long, conflicts_with = "args")]
    pub clear_args: bool,
    /// stdio: NAME (repeatable): removes one variable.
    #[arg(long = "unset-env", value_name = "NAME")]
    pub unset_env: Vec<String>,
    /// http: NAME (repeatable): removes one header.
    #[arg(long = "unset-header", value_name = "NAME")]
    pub unset_headers: Vec<String>,
    /// http: NAME (repeatable): removes one header file.
    #[arg(long = "unset-header-file", value_name = "NAME")]
    pub unset_header_files: Vec<String>,
    /// auto, 2026-07-28 or 2025-11-25.
    #[arg(long)]
    pub era: Option<String>,
    /// Return as soon as the update is stored, without waiting for a
    /// sidecar with the new settings (for sidecars `switchyard up` does not
    /// run).
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for a sidecar with the new settings to connect and
    /// the previous ones to go, seconds; `switchyard up` keeps the previous
    /// sidecar serving for up to 15 s meanwhile; 1 to 86400. Not connected
    /// in time: exit 1.
    #[arg(long, default_value_t = 20, value_name = "SEC", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
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
    /// The reason on one line; a failed connection may add a second line,
    /// `hint: …` ([`Remote::explain`]).
    pub message: String,
    /// The connection to the control plane failed (it was refused, closed
    /// or broken), so no answer came, and when: [`Remote::explain`] adds
    /// what the connection flags suggest.
    connection: Option<Phase>,
}

/// When a connection to the control plane failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Connecting (TCP, TLS and HTTP/2 handshakes).
    Connecting,
    /// During a call, on a connection that was made.
    Calling,
}

impl Failure {
    /// A failure that exits `code`, saying `message`.
    fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            connection: None,
        }
    }

    /// The connection to the control plane failed `when`: exits
    /// [`EXIT_UNAVAILABLE`], saying `message`.
    fn connection(when: Phase, message: impl Into<String>) -> Self {
        Failure {
            connection: Some(when),
            ..Failure::new(EXIT_UNAVAILABLE, message)
        }
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Self {
        // A status with a source is the client's own transport failing
        // (tonic's `Status::from_error`): for example a TLS peer that
        // refused our certificate after the handshake, or a plaintext
        // client on a TLS port. Statuses the control plane sent have none.
        if let Some(source) = std::error::Error::source(&s) {
            return Failure::connection(
                Phase::Calling,
                format!(
                    "the connection to the control plane failed: {}",
                    switchyard_common::error_chain(source)
                ),
            );
        }
        // Not a gRPC server at all: an HTTP answer without a gRPC status
        // (tonic maps the HTTP status).
        if s.message().contains("grpc-status header missing") {
            return Failure::connection(
                Phase::Calling,
                format!("the endpoint is not a gRPC server: {}", s.message()),
            );
        }
        // "FailedPrecondition" -> "failed precondition".
        let code = format!("{:?}", s.code());
        let mut words = String::new();
        for (i, c) in code.chars().enumerate() {
            if c.is_uppercase() && i > 0 {
                words.push(' ');
            }
            words.push(c.to_ascii_lowercase());
        }
        // The control plane refused a value the command sent: a bad
        // argument value, as the README's table says.
        let status = if s.code() == tonic::Code::InvalidArgument {
            EXIT_USAGE
        } else {
            1
        };
        Failure::new(status, format!("{words}: {}", s.message()))
    }
}

/// Runs a command. A failed connection to the control plane exits
/// [`EXIT_UNAVAILABLE`], with a hint from the connection flags when they
/// explain it ([`Remote::explain`]).
pub async fn run(cli: Cli) -> Result<(), Failure> {
    let remote = Remote {
        endpoint: cli.endpoint,
        flags: ConnectFlags {
            token_file: cli.token_file,
            ca_file: cli.ca_file,
            cert_file: cli.cert_file,
            key_file: cli.key_file,
        },
    };
    let remote = &remote;
    command(remote, cli.command)
        .await
        .map_err(|f| remote.explain(f))
}

/// One function per subcommand.
async fn command(remote: &Remote, command: Command) -> Result<(), Failure> {
    match command {
        Command::Up { config } => commands::up::up(&config).await,
        Command::CheckConfig { file } => commands::check_config::check_config(&file),
        Command::Tools { session, json } => commands::tools::list(remote, session, json).await,
        Command::Call {
            tool,
            args,
            session,
            json,
            timeout_ms,
            background,
        } => {
            let options = commands::call::Options {
                session,
                json,
                timeout_ms,
                background,
            };
            commands::call::call(remote, tool, args, options).await
        }
        Command::Resources {
            server,
            session,
            json,
        } => commands::resources::list(remote, server, session, json).await,
        Command::Read {
            server,
            uri,
            session,
            output,
        } => commands::resources::read(remote, server, uri, session, output).await,
        Command::Prompts {
            server,
            session,
            json,
        } => commands::resources::prompts(remote, server, session, json).await,
        Command::Prompt {
            server,
            name,
            args,
            session,
            json,
        } => commands::resources::prompt(remote, server, name, args, session, json).await,
        Command::Servers(cmd) => commands::servers::servers(remote, cmd).await,
        Command::Hints(cmd) => {
            commands::tool_settings::apply(remote, ToolSetting::Hints(cmd)).await
        }
        Command::Policy(cmd) => {
            commands::tool_settings::apply(remote, ToolSetting::Policy(cmd)).await
        }
        Command::Background(cmd) => commands::background::background(remote, cmd).await,
        Command::Sessions(cmd) => commands::sessions::sessions(remote, cmd).await,
        Command::Events { session, json } => commands::events::events(remote, session, json).await,
        Command::Interactions { session, all, json } => {
            commands::interactions::list(remote, session, all, json).await
        }
        Command::Answer {
            session,
            interaction,
            choice,
        } => commands::interactions::answer(remote, session, interaction, choice).await,
    }
}
