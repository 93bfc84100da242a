//! The server spec shared by `switchyard up` (the `[[servers]]` entries of
//! its TOML file), `switchyard-sidecar run --config`, the admin API
//! (`ServerSpec`) and the store, with the limits both binaries check. Keys
//! are documented in `docs/configuration.md`. Pure data and validation: the
//! sidecar turns a spec into its upstream session's configuration
//! (`switchyard_sidecar::upstream::UpstreamConfig::from_spec`).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use switchyard_mcp::era::EraPreference;

/// How a server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// A child process on stdio.
    Stdio,
    /// Streamable HTTP.
    Http,
}

/// How Switchyard authenticates to an HTTP server (stage D; seed
/// 16-mcp-support §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthKind {
    /// Nothing is sent.
    None,
    /// Static headers: `headers`, and `header_files` for secret values.
    Headers,
    /// OAuth 2.1 (MCP authorization): an admin authorizes the server once
    /// (`switchyard servers authorize NAME`); the control plane keeps and
    /// refreshes the tokens and pushes short-lived access tokens to the
    /// sidecars, which send them as `Authorization: Bearer`. Optional
    /// `[servers.oauth]` settings ([`OAuthSettings`]).
    #[serde(rename = "oauth")]
    OAuth,
}

impl AuthKind {
    /// The name in the configuration and the APIs.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthKind::None => "none",
            AuthKind::Headers => "headers",
            AuthKind::OAuth => "oauth",
        }
    }

    /// Parses [`AuthKind::as_str`]'s names.
    pub fn parse(s: &str) -> Option<AuthKind> {
        match s {
            "none" => Some(AuthKind::None),
            "headers" => Some(AuthKind::Headers),
            "oauth" => Some(AuthKind::OAuth),
            _ => None,
        }
    }
}

/// What API answers show in place of a secret value.
pub const REDACTED: &str = "[redacted]";

/// Whether a header, environment variable or query parameter named `name`
/// likely carries a secret, so API answers and debug output show
/// [`REDACTED`] instead of its value (ASCII case-insensitive):
/// - any name containing `token`, `secret`, `key`, `password` or
///   `credential` (`X-Api-Key`, `GITHUB_TOKEN`, `db_password`);
/// - any name with one of these words, the name split at characters
///   other than letters and digits and at lower-to-upper case changes:
///   `auth`, `authorization`, `bearer`, `cookie`, `jsessionid`, `jwt`,
///   `pass`, `passcode`, `passwd`, `passphrase`, `pat`, `pin`, `pwd`, `session`,
///   `sessionid`, `sid`, `sig`, `signature` (`X-Auth`,
///   `Proxy-Authorization`, `sig` of an Azure SAS, `X-Amz-Signature`,
///   `SMTP_PASS`; not `AUTHOR` or `PASSENGERS`).
///
/// Secrets belong in `header_files`; this keeps the ones put elsewhere out
/// of answers.
pub fn is_secret_name(name: &str) -> bool {
    const PARTS: [&str; 5] = ["token", "secret", "key", "password", "credential"];
    const WORDS: [&str; 18] = [
        "auth",
        "authorization",
        "bearer",
        "cookie",
        "jsessionid",
        "jwt",
        "pass",
        "passcode",
        "passwd",
        "passphrase",
        "pat",
        "pin",
        "pwd",
        "session",
        "sessionid",
        "sid",
        "sig",
        "signature",
    ];
    let lower = name.to_ascii_lowercase();
    PARTS.iter().any(|p| lower.contains(p))
        || name_words(name).any(|w| WORDS.iter().any(|x| w.eq_ignore_ascii_case(x)))
}

/// Whether a header or environment entry `name = value` is a secret,
/// shown as [`REDACTED`] and sealed at rest whole: a secret name
/// ([`is_secret_name`]), or a value that holds one whatever its name, by
/// the rules [`map_arg_secrets`] applies to an argument: a URL with a
/// secret part (`DATABASE_URL=postgresql://app:PW@db/x`), an authorization
/// value (`Bearer X`), a value that looks like a generated credential and
/// is not a file path, or a value sealed at rest.
pub fn is_secret_entry(name: &str, value: &str) -> bool {
    is_secret_name(name) || value_holds_secret(value)
}

fn value_holds_secret(value: &str) -> bool {
    !value.is_empty()
        && (looks_sealed(value)
            || looks_like_private_key(value)
            || (looks_like_token(value) && !looks_like_path(value) && !looks_like_id(value))
            || header_secret(value).is_some()
            || (value.contains("://") && url_holds_secret(value)))
}

/// Whether a value holds a PEM private key (`-----BEGIN PRIVATE KEY-----`,
/// `RSA`, `EC`, `OPENSSH`, `ENCRYPTED`, `PGP PRIVATE KEY BLOCK`): always a
/// secret, whatever its name or place.
fn looks_like_private_key(value: &str) -> bool {
    value.split("-----BEGIN ").skip(1).any(|rest| {
        rest.split("-----")
            .next()
            .is_some_and(|label| label.contains("PRIVATE KEY"))
    })
}

/// Whether a URL has a part [`redacted_url`] hides (a password, a secret
/// query value, a credential in the path); a URL that is only written
/// otherwise than its normal form (`http://collector:4318`, an upper-case
/// host) has none. Text that is not a URL: whether it has user
/// information.
fn url_holds_secret(value: &str) -> bool {
    match url::Url::parse(value) {
        Ok(_) => map_url_secrets(value, |_| Err(())).is_err(),
        Err(_) => redacted_url(value) != value,
    }
}

/// Whether a value is an identifier rather than a credential when its
/// name does not say otherwise: a UUID, or hexadecimal digits only (a
/// commit or image digest).
fn looks_like_id(value: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = value.split('-').collect();
    hex(value)
        || (parts.len() == 5
            && parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
            && parts.iter().all(|p| hex(p)))
}

/// The words of a name: split at characters other than ASCII letters and
/// digits, and before an upper-case letter that follows a lower-case one
/// (`xAmzSignature` is `x`, `Amz`, `Signature`).
fn name_words(name: &str) -> impl Iterator<Item = &str> {
    let mut cuts = Vec::new();
    let mut start = 0;
    let mut previous: Option<char> = None;
    // By character: a cut never falls inside a multi-byte one (`región`).
    for (i, c) in name.char_indices() {
        if !c.is_ascii_alphanumeric() {
            cuts.push(&name[start..i]);
            start = i + c.len_utf8();
        } else if i > start
            && c.is_ascii_uppercase()
            && previous.is_some_and(|p| p.is_ascii_lowercase())
        {
            cuts.push(&name[start..i]);
            start = i;
        }
        previous = Some(c);
    }
    cuts.push(&name[start..]);
    cuts.into_iter().filter(|w| !w.is_empty())
}

/// Whether a path segment, a query value or a user name looks like a
/// generated credential, whatever it is named: once percent-decoded, 20
/// or more of `A-Z a-z 0-9 - _ . ~ + = /` with at least one letter and one
/// digit, and at least one run between punctuation that mixes letters and
/// digits (`sk-ak-3f9…`, a base64 signature, a UUID; not
/// `my-project-2024-production`). Hosted MCP servers often put the
/// caller's key in the path (`/mcp/<key>/sse`).
fn looks_like_token(text: &str) -> bool {
    let decoded = percent_decoded(text);
    let punctuation = |b: u8| b"-_.~+=/".contains(&b);
    decoded.len() >= 20
        && decoded
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || punctuation(b))
        && decoded
            .split(|c: char| c.is_ascii() && punctuation(c as u8))
            .any(|run| {
                run.bytes().any(|b| b.is_ascii_alphabetic())
                    && run.bytes().any(|b| b.is_ascii_digit())
            })
}

/// `text` with each `%XX` decoded (`+` stays: a path or a query keeps
/// it); bytes that are not UTF-8 read as U+FFFD.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether a parameter `name=value` (of the query, or of a path segment
/// after `;`) is shown as `name=[redacted]`: a secret name, or a value
/// that looks like a credential; an empty value is shown as it is.
fn secret_param(name: &str, value: &str) -> bool {
    !value.is_empty() && (is_secret_name(&percent_decoded(name)) || looks_like_token(value))
}

/// The `&`- or `;`-separated parts of a query, each with the separator
/// that ends it (none for the last), so a query rebuilt from them is the
/// one given.
fn query_parts(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split_inclusive(['&', ';'])
        .map(|part| match part.strip_suffix(['&', ';']) {
            Some(pair) => (pair, &part[pair.len()..]),
            None => (part, ""),
        })
}

/// A part of a URL that may hold a secret, named so the same part of
/// another URL can be found: a repeated name is told apart by its
/// occurrence (`k`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Slot {
    Username,
    /// The password, of this user name.
    Password(String),
    /// Path segment `i`.
    Segment(usize),
    /// Path segment `i`'s `;` parameter `name`, occurrence `k`.
    SegmentParam(usize, String, usize),
    /// Query parameter `name`, occurrence `k`.
    Query(String, usize),
    /// Query part `k` without `=`.
    QueryBare(usize),
    Fragment,
}

impl Slot {
    /// Whether `value` in this slot is a secret [`redacted_url`] hides: a
    /// value sealed at rest ([`looks_sealed`]) always is.
    fn is_secret(&self, value: &str) -> bool {
        if looks_sealed(value) {
            return true;
        }
        match self {
            Slot::Password(_) | Slot::Fragment => !value.is_empty(),
            Slot::Username | Slot::QueryBare(_) => looks_like_token(value),
            // `bot123456:AAH…` (a bot token in the path): by `:` part too.
            Slot::Segment(_) => looks_like_token(value) || value.split(':').any(looks_like_token),
            Slot::SegmentParam(_, name, _) | Slot::Query(name, _) => secret_param(name, value),
        }
    }

    /// What the slot is, for an error.
    fn describe(&self) -> String {
        match self {
            Slot::Username => "user name".into(),
            Slot::Password(_) => "password (of this user name)".into(),
            Slot::Segment(i) => format!("path segment (number {i})"),
            Slot::SegmentParam(i, name, _) => {
                format!("value for {name:?} in path segment number {i}")
            }
            Slot::Query(name, _) => format!("value for {name:?}"),
            Slot::QueryBare(k) => format!("query part (number {})", k + 1),
            Slot::Fragment => "fragment".into(),
        }
    }

    /// A name of the slot that stays the same whatever its value and the
    /// user name are, for binding a value sealed at rest to its place.
    fn place(&self) -> String {
        match self {
            Slot::Username => "username".into(),
            Slot::Password(_) => "password".into(),
            Slot::Segment(i) => format!("path {i}"),
            Slot::SegmentParam(i, name, k) => format!("path {i} {name:?} {k}"),
            Slot::Query(name, k) => format!("query {name:?} {k}"),
            Slot::QueryBare(k) => format!("query {k}"),
            Slot::Fragment => "fragment".into(),
        }
    }
}

/// Whether `value` has the shape of a value sealed at rest by the control
/// plane's key ring (`sy1.<12 hex>.<base64url>`): such a value is never
/// shown, whatever its place.
pub fn looks_sealed(value: &str) -> bool {
    let mut parts = value.splitn(3, '.');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some("sy1"), Some(id), Some(data))
            if id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()) && !data.is_empty()
    )
}

/// A part of a URL or of a server's arguments that holds a secret, as
/// [`map_url_secrets`] and [`map_arg_secrets`] show it.
#[derive(Debug)]
pub struct SecretPart<'a> {
    /// Where it is, the same whatever its value (`password`,
    /// `query "api_key" 0`, `path 2`, `args 3`, `args 1 password`): what a
    /// value sealed at rest is bound to.
    pub place: String,
    /// What it is, for an error (`password (of this user name)`,
    /// `value for "api_key"`, `args[3]`).
    pub what: String,
    /// Its text as written in the URL (percent-encoded).
    pub value: &'a str,
}

/// `url` with each part [`redacted_url`] would hide (a sealed value
/// included) written as `f` says (`Ok(None)`: as it is); the first error
/// of `f` is returned. A URL with no such part, or text that is not a
/// URL, comes back exactly as given. For sealing a server's URL secrets
/// at rest and opening them where the URL is used.
pub fn map_url_secrets<E>(
    url: &str,
    mut f: impl FnMut(&SecretPart<'_>) -> Result<Option<String>, E>,
) -> Result<String, E> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Ok(url.to_owned());
    };
    let (mut failed, mut changed) = (None, false);
    let out = rebuild(&parsed, &mut |slot, value| {
        if failed.is_some() || !slot.is_secret(value) {
            return None;
        }
        let part = SecretPart {
            place: slot.place(),
            what: slot.describe(),
            value,
        };
        match f(&part) {
            Ok(Some(text)) => {
                changed = true;
                Some(text)
            }
            Ok(None) => None,
            Err(e) => {
                failed = Some(e);
                None
            }
        }
    });
    match (failed, changed) {
        (Some(e), _) => Err(e),
        (None, true) => Ok(out),
        (None, false) => Ok(url.to_owned()),
    }
}

/// `url` rebuilt part by part, each part that may hold a secret written
/// as `part(slot, its text)` says (`None`: as it is).
fn rebuild(url: &url::Url, part: &mut dyn FnMut(&Slot, &str) -> Option<String>) -> String {
    let mut write = |out: &mut String, slot: Slot, text: &str| match part(&slot, text) {
        Some(t) => out.push_str(&t),
        None => out.push_str(text),
    };
    let mut out = url[..url::Position::BeforeUsername].to_owned();
    let (user, password) = (url.username(), url.password());
    if !user.is_empty() || password.is_some() {
        // The password's slot names the user name as written (a restored
        // user name finds the password stored under it).
        let written = out.len();
        write(&mut out, Slot::Username, user);
        let user = out[written..].to_owned();
        if let Some(password) = password {
            out.push(':');
            write(&mut out, Slot::Password(user), password);
        }
        out.push('@');
    }
    out.push_str(&url[url::Position::BeforeHost..url::Position::AfterPort]);
    for (i, segment) in url.path().split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        let mut params = segment.split(';');
        write(&mut out, Slot::Segment(i), params.next().unwrap_or(""));
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for param in params {
            out.push(';');
            match param.split_once('=') {
                Some((name, value)) => {
                    let k = seen.entry(name).or_default();
                    out.push_str(name);
                    out.push('=');
                    write(&mut out, Slot::SegmentParam(i, name.to_owned(), *k), value);
                    *k += 1;
                }
                None => out.push_str(param),
            }
        }
    }
    if let Some(query) = url.query() {
        out.push('?');
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut bare = 0;
        for (pair, sep) in query_parts(query) {
            match pair.split_once('=') {
                Some((name, value)) => {
                    let k = seen.entry(name).or_default();
                    out.push_str(name);
                    out.push('=');
                    write(&mut out, Slot::Query(name.to_owned(), *k), value);
                    *k += 1;
                }
                None => {
                    write(&mut out, Slot::QueryBare(bare), pair);
                    bare += 1;
                }
            }
            out.push_str(sep);
        }
    }
    if let Some(fragment) = url.fragment() {
        out.push('#');
        write(&mut out, Slot::Fragment, fragment);
    }
    out
}

/// `url` with its secrets replaced by [`REDACTED`]; the rest is kept as
/// written:
/// - the password of its user information (`https://alice:[redacted]@host/`),
///   and a user name that looks like a generated credential
///   (`https://[redacted]@github.com/…`);
/// - path segments that look like generated credentials (`/mcp/[redacted]/sse`),
///   and their `;` parameters as query parameters are;
/// - query values with secret names ([`is_secret_name`]:
///   `?api_key=[redacted]`, `&sig=[redacted]`) or that look like generated
///   credentials, in parts separated by `&` or `;`, and parts without `=`
///   that look like credentials; an empty value stays empty;
/// - the whole fragment (`#[redacted]`), which no client sends to a server.
///
/// Of text that is not a URL, the user information and the query are cut.
pub fn redacted_url(url: &str) -> String {
    let Ok(parsed) = url::Url::parse(url) else {
        let without_query = url.split('?').next().unwrap_or(url);
        return match without_query.split_once("://") {
            Some((scheme, rest)) if rest.contains('@') => {
                let host = rest.rsplit('@').next().unwrap_or("");
                format!("{scheme}://{REDACTED}@{host}")
            }
            _ => without_query.to_owned(),
        };
    };
    rebuild(&parsed, &mut |slot, text| {
        slot.is_secret(text).then(|| REDACTED.to_owned())
    })
}

/// `text` with every `http://` or `https://` URL in it (up to white space,
/// a quote, `)` or `>`) replaced by its [`redacted_url`]: for messages of
/// other libraries that quote a URL they were given (rmcp's "discovery
/// failed for URL", reqwest's "error sending request for url (URL)").
pub fn redact_urls_in(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = ["http://", "https://"]
        .iter()
        .filter_map(|scheme| rest.find(scheme))
        .min()
    {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | '>'))
            .unwrap_or(tail.len());
        out.push_str(&redacted_url(&tail[..end]));
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Whether URLs `a` and `b` have the same scheme, host and port (the
/// default port of the scheme when none is written): whether a secret
/// stored for one may be sent to the other. `false` when either is not a
/// URL.
pub fn same_origin(a: &str, b: &str) -> bool {
    match (url::Url::parse(a), url::Url::parse(b)) {
        (Ok(a), Ok(b)) => {
            (a.scheme(), a.host_str(), a.port_or_known_default())
                == (b.scheme(), b.host_str(), b.port_or_known_default())
        }
        _ => false,
    }
}

/// `sent` (a URL as an admin sent it back, possibly edited) with each
/// secret it shows as [`REDACTED`] ([`redacted_url`]) taken from `stored`,
/// the URL it replaces, from the same part: the user name; the password
/// of the same user name; a path segment from the same place; a query
/// value from the same occurrence of the same name; the fragment. Errors,
/// for the caller to refuse the update: `sent` moved to another scheme,
/// host or port (the stored secrets are not for it), or shows a redacted
/// part `stored` does not have.
pub fn restore_url_secrets(sent: &str, stored: &str) -> Result<String, String> {
    const ENCODED: &str = "%5Bredacted%5D";
    let is_redacted = |v: &str| v == REDACTED || v.eq_ignore_ascii_case(ENCODED);
    if !sent.contains(REDACTED)
        && !sent
            .to_ascii_lowercase()
            .contains(&ENCODED.to_ascii_lowercase())
    {
        return Ok(sent.to_owned());
    }
    let (Ok(new), Ok(old)) = (url::Url::parse(sent), url::Url::parse(stored)) else {
        return Err("shows [redacted] values but is not a URL".into());
    };
    if !same_origin(sent, stored) {
        return Err(
            "shows [redacted] values but points to another scheme, host or port: give its secrets again".into(),
        );
    }
    let mut stored_parts: HashMap<Slot, String> = HashMap::new();
    rebuild(&old, &mut |slot, text| {
        stored_parts.insert(slot.clone(), text.to_owned());
        None
    });
    let mut missing = None;
    let restored = rebuild(&new, &mut |slot, text| {
        if !is_redacted(text) {
            return None;
        }
        // Only a part the stored URL's answer showed redacted.
        match stored_parts.get(slot).filter(|v| slot.is_secret(v)) {
            Some(v) => Some(v.clone()),
            None => {
                missing.get_or_insert_with(|| slot.describe());
                None
            }
        }
    });
    match missing {
        Some(what) => Err(format!(
            "shows a [redacted] {what} that the stored URL does not have"
        )),
        None => Ok(restored),
    }
}

/// Whether an argument is a file path (`/opt/srv/bin-2024.sh`, `./x`,
/// `~/y`), never taken for a credential by its looks.
fn looks_like_path(value: &str) -> bool {
    ["/", "./", "../", "~/"]
        .iter()
        .any(|p| value.starts_with(p))
}

/// Where the secret starts in an argument that is a header line with a
/// secret name (`Authorization: Bearer X`, `X-Api-Key: K`), or an
/// authorization value (`Bearer X`, `Basic X`, `token X`): after the
/// name's `: `, and after the scheme's space. `None` otherwise.
fn header_secret(value: &str) -> Option<usize> {
    let scheme = |v: &str| {
        ["bearer ", "basic ", "token "]
            .iter()
            .find(|s| {
                v.len() > s.len() && v.get(..s.len()).is_some_and(|h| h.eq_ignore_ascii_case(s))
            })
            .map(|s| s.len())
    };
    if let Some((name, rest)) = value.split_once(':')
        && !name.trim_end().is_empty()
        && name
            .trim_end()
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && is_secret_name(name.trim_end())
    {
        let pad = rest.len() - rest.trim_start().len();
        let at = name.len() + 1 + pad;
        return (at < value.len()).then_some(at);
    }
    scheme(value)
}

/// Whether a command-line flag (`--user`, `-u`) or `NAME=` names a user
/// with a password (`NAME:PASSWORD`, curl's and many clients' form).
fn user_flag(flag: &str) -> bool {
    matches!(
        flag.trim_start_matches('-').to_ascii_lowercase().as_str(),
        "u" | "user" | "userpass" | "user-pass" | "basic-auth" | "basic_auth" | "proxy-user"
    ) && flag.starts_with('-')
}

/// Where the password starts in a user argument `NAME:PASSWORD` (after
/// [`user_flag`]): after the first `:`, when what follows is not empty
/// and not all digits (`--user 1000:1000` is a user and group id).
fn user_password(value: &str) -> Option<usize> {
    let (user, password) = value.split_once(':')?;
    (!user.is_empty()
        && !password.is_empty()
        && !value.contains("//")
        && !password.bytes().all(|b| b.is_ascii_digit()))
    .then_some(user.len() + 1)
}

/// The secret string values of a JSON argument (`{"apiKey": "K"}`), each
/// with where it is (`apiKey`, `auth.token`, `servers.0.password`): a
/// value under a secret name, or one that holds a secret whatever its
/// name ([`value_holds_secret`]).
fn json_secrets(value: &serde_json::Value, path: &str, out: &mut Vec<(String, String)>) {
    use serde_json::Value;
    let at = |key: &str| match path.is_empty() {
        true => key.to_owned(),
        false => format!("{path}.{key}"),
    };
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match v {
                    Value::String(s)
                        if !s.is_empty()
                            && ((is_secret_name(key) && !names_a_setting(key))
                                || value_holds_secret(s)) =>
                    {
                        out.push((at(key), s.clone()));
                    }
                    _ => json_secrets(v, &at(key), out),
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                match v {
                    Value::String(s) if value_holds_secret(s) => {
                        out.push((at(&i.to_string()), s.clone()))
                    }
                    _ => json_secrets(v, &at(&i.to_string()), out),
                }
            }
        }
        _ => {}
    }
}

/// Whether an argument's secret-looking name (`--token-file`,
/// `--max-tokens`, `--session-timeout`) names where a secret is or a
/// setting about it, not the secret itself: one of its words is `file`,
/// `path`, `dir`, `url`, `uri`, `endpoint`, `limit`, `max`, `min`,
/// `count`, `size`, `ttl` or `timeout`. Its value is judged on its own
/// (a URL's password, a generated credential).
fn names_a_setting(name: &str) -> bool {
    const WORDS: [&str; 13] = [
        "file", "path", "dir", "url", "uri", "endpoint", "limit", "max", "min", "count", "size",
        "ttl", "timeout",
    ];
    name_words(name).any(|w| WORDS.iter().any(|x| w.eq_ignore_ascii_case(x)))
}

/// Whether a command-line flag (`--api-key`, `-token`; not `--x=1`, not
/// `--token-file`: [`names_a_setting`]) names a secret, so the argument
/// after it is one.
fn secret_flag(arg: &str) -> bool {
    let name = arg.trim_start_matches('-');
    arg.starts_with('-') && !arg.contains('=') && is_secret_name(name) && !names_a_setting(name)
}

/// `args` (a stdio server's arguments) with each part that holds a secret
/// written as `f` says (`Ok(None)`: as it is); the first error of `f` is
/// returned. The parts, by argument:
/// - the whole argument after a flag with a secret name (`--api-key K`,
///   `--password P`), unless it is another flag;
/// - the value of `NAME=value` or `--NAME=value` with a secret name
///   (`--token=T`, `API_KEY=K`);
/// - in an argument or such a value that is a URL
///   (`postgresql://user:P@host/db`), the parts [`redacted_url`] hides,
///   each its own part (`args 2 password`);
/// - a whole argument or value that looks like a generated credential
///   (`sk-…`, a UUID, the rule of [`redacted_url`]), or is sealed;
/// - the password of `NAME:PASSWORD` after `--user`, `-u` and the like, or
///   as `--user=NAME:PASSWORD` (not all digits: `--user 1000:1000`);
/// - in an argument that is a JSON object (`{"apiKey": "K"}`), each string
///   value under a secret name or that holds a secret, its own part
///   (`args 3 json apiKey`); when a value is written in another escaping
///   than serde's, the whole argument.
pub fn map_arg_secrets<E>(
    args: &[String],
    mut f: impl FnMut(&SecretPart<'_>) -> Result<Option<String>, E>,
) -> Result<Vec<String>, E> {
    let mut out = Vec::with_capacity(args.len());
    for (i, arg) in args.iter().enumerate() {
        let after_flag = i > 0 && secret_flag(&args[i - 1]) && !arg.starts_with('-');
        let after_user = i > 0 && user_flag(&args[i - 1]) && !arg.starts_with('-');
        // `NAME=value`: the value is judged on its own.
        let (head, value, named, user) = match arg.split_once('=') {
            Some((name, value))
                if !after_flag
                    && !after_user
                    && !name.is_empty()
                    && name
                        .trim_start_matches('-')
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)) =>
            {
                let bare = name.trim_start_matches('-');
                let secret = is_secret_name(bare) && !names_a_setting(bare);
                let user = name.starts_with("--") && user_flag(name);
                (&arg[..=name.len()], value, secret, user)
            }
            _ => ("", arg.as_str(), false, after_user),
        };
        let whole = |what: String| SecretPart {
            place: format!("args {i}"),
            what,
            value,
        };
        let what = match head.is_empty() {
            true => format!("args[{i}]"),
            false => format!("the value of args[{i}] ({head}…)"),
        };
        let shown = if value.is_empty() {
            None
        } else if after_flag
            || named
            || looks_sealed(value)
            // A PEM key in a JSON object is one of its parts (below).
            || (looks_like_private_key(value) && !value.starts_with('{'))
            || (looks_like_token(value) && !looks_like_path(value))
        {
            f(&whole(what))?
        } else if let Some(at) = header_secret(value) {
            // `Authorization: Bearer X` (`--header`, `-H`), `Bearer X`:
            // the part after the name or scheme.
            let part = SecretPart {
                place: format!("args {i}"),
                what: what.clone(),
                value: &value[at..],
            };
            f(&part)?.map(|text| format!("{}{text}", &value[..at]))
        } else if value.contains("://") && url::Url::parse(value).is_ok() {
            let mapped = map_url_secrets(value, |part| {
                f(&SecretPart {
                    place: format!("args {i} {}", part.place),
                    what: format!("{what}'s {}", part.what),
                    value: part.value,
                })
            })?;
            (mapped != value).then_some(mapped)
        } else if let Some(at) = user.then(|| user_password(value)).flatten() {
            let part = SecretPart {
                place: format!("args {i} password"),
                what: format!("{what}'s password"),
                value: &value[at..],
            };
            f(&part)?.map(|text| format!("{}{text}", &value[..at]))
        } else if value.starts_with('{')
            && let Ok(json) = serde_json::from_str::<serde_json::Value>(value)
        {
            let mut found = Vec::new();
            json_secrets(&json, "", &mut found);
            let mut text = value.to_owned();
            let mut changed = false;
            for (path, secret) in &found {
                let written = serde_json::to_string(secret).expect("a string serialises");
                let part = SecretPart {
                    place: format!("args {i} json {path}"),
                    what: format!("{what}'s {path:?}"),
                    value: secret,
                };
                if text.matches(written.as_str()).count() != 1 {
                    // Written otherwise, or more than once: the whole
                    // argument is the secret.
                    changed = false;
                    text = match f(&whole(what.clone()))? {
                        Some(t) => t,
                        None => value.to_owned(),
                    };
                    break;
                }
                if let Some(t) = f(&part)? {
                    let t = serde_json::to_string(&t).expect("a string serialises");
                    text = text.replacen(written.as_str(), &t, 1);
                    changed = true;
                }
            }
            (changed || text != value).then_some(text)
        } else {
            None
        };
        out.push(match shown {
            Some(text) => format!("{head}{text}"),
            None => arg.clone(),
        });
    }
    Ok(out)
}

/// The secret values of a spec's parts, for [`Secrets`]: those of secret
/// `env` and `headers` entries ([`is_secret_entry`]; also after an
/// `Authorization` scheme: the token alone; of a secret value under
/// another name, also its parts: a URL's password), the secret parts of
/// `args` and of the URL, each also percent-decoded and without
/// surrounding white space, at least 4 characters, longest first.
pub fn secret_values<'a>(
    env_and_headers: impl Iterator<Item = (&'a str, &'a str)>,
    args: &[String],
    url: Option<&str>,
) -> Vec<String> {
    let mut values: Vec<String> = Vec::new();
    let mut collect = |part: &SecretPart<'_>| {
        values.push(part.value.to_owned());
        values.push(percent_decoded(part.value));
        // `Bearer X`: the token alone too.
        if let Some(at) = header_secret(part.value) {
            values.push(part.value[at..].to_owned());
        }
        // A PEM key: each of its lines but the armour too.
        if looks_like_private_key(part.value) {
            values.extend(
                part.value
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with("-----"))
                    .map(str::to_owned),
            );
        }
        Ok::<_, std::convert::Infallible>(None)
    };
    for (name, value) in env_and_headers {
        let named = is_secret_name(name);
        if !named && !value_holds_secret(value) {
            continue;
        }
        let whole = |value| SecretPart {
            place: String::new(),
            what: String::new(),
            value,
        };
        // Whole, and its parts as of an argument (a URL's password, a
        // JSON object's secret values).
        let _ = collect(&whole(value));
        let _ = map_arg_secrets(&[value.to_owned()], &mut collect);
        if named && let Some((_, token)) = value.split_once(' ') {
            // `Bearer X`, `Basic X`: the token alone.
            let _ = collect(&whole(token));
        }
        if value.contains('\n') && !looks_like_private_key(value) {
            // Of several lines: the parts of each (`NAME=value` of a
            // dotenv text); a PEM key's lines are taken above.
            let lines: Vec<String> = value.lines().map(|l| l.trim().to_owned()).collect();
            let _ = map_arg_secrets(&lines, &mut collect);
        }
    }
    let _ = map_arg_secrets(args, &mut collect);
    if let Some(url) = url {
        let _ = map_url_secrets(url, &mut collect);
        // The HTTP client sends a URL's user and password as `Basic
        // base64(user:password)`, which a server may echo.
        if let Ok(parsed) = url::Url::parse(url)
            && (parsed.password().is_some() || !parsed.username().is_empty())
        {
            // A user name alone is sent as `user:`.
            let password = parsed.password().unwrap_or_default();
            use base64::Engine as _;
            for credential in [
                format!("{}:{}", parsed.username(), password),
                format!(
                    "{}:{}",
                    percent_decoded(parsed.username()),
                    percent_decoded(password)
                ),
            ] {
                let encoded = base64::engine::general_purpose::STANDARD.encode(credential);
                values.push(format!("Basic {encoded}"));
                values.push(encoded);
            }
        }
    }
    let mut values: Vec<String> = values
        .into_iter()
        .flat_map(|v| {
            let trimmed = v.trim().to_owned();
            [v, trimmed]
        })
        .filter(|v| v.chars().count() >= 4)
        .collect();
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    values.dedup();
    values
}

/// Least length, in characters, of a secret value scrubbed from a
/// server's answers ([`Secrets::scrub_json`]): a shorter one (a PIN, a
/// short password) would also replace ordinary words and numbers in
/// results, so it is scrubbed only from logs and `lastError`; so is a
/// value that reads as a word or an identifier ([`word_like`]) or a
/// number.
pub const ANSWER_SECRET_MIN_CHARS: usize = 8;

/// Whether a value reads as a word or a name rather than a generated
/// secret: lower-case letters and digits in parts joined by `_`, `-` or
/// `.`, no part mixing letters and digits (`required`, `customer_id`,
/// `eu-west-1`; not `sk_live_abc123`), or one capitalised word
/// (`Production`). Such values under a secret-looking name
/// (`DYNAMODB_SORT_KEY = "customer_id"`) are names in results (a tool's,
/// a schema's `required`), so they are not scrubbed from answers.
fn word_like(value: &str) -> bool {
    let lower_parts = value.split(['_', '-', '.']).all(|part| {
        !part.is_empty()
            && (part.bytes().all(|b| b.is_ascii_lowercase())
                || part.bytes().all(|b| b.is_ascii_digit()))
    });
    let capitalised = value.bytes().next().is_some_and(|b| b.is_ascii_uppercase())
        && value.bytes().skip(1).all(|b| b.is_ascii_lowercase());
    lower_parts || capitalised
}

/// The ways a JSON encoder may write `value` inside a string, besides
/// serde's (each without the quotes): with non-ASCII as `\uxxxx` (Python),
/// `/` as `\/` too (PHP), `&`, `<`, `>` as `\u00xx` (Go), `=`, `'` too
/// (Gson), `+`, `` ` `` and non-ASCII in upper-case hex (.NET,
/// Jackson), and escaped twice (JSON text inside a JSON string).
fn json_forms(value: &str) -> Vec<String> {
    let serde = serde_json::to_string(value).expect("a string serialises");
    let serde = serde[1..serde.len() - 1].to_owned();
    // serde's form with the characters `escape` says as `\uXXXX`.
    let escaped = |escape: &dyn Fn(char) -> bool, upper: bool| -> String {
        let mut out = String::with_capacity(serde.len());
        for c in serde.chars() {
            if escape(c) {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&match upper {
                        true => format!("\\u{unit:04X}"),
                        false => format!("\\u{unit:04x}"),
                    });
                }
            } else {
                out.push(c);
            }
        }
        out
    };
    let python = escaped(&|c| !c.is_ascii(), false);
    let php = python.replace('/', "\\/");
    let go = escaped(&|c| "&<>\u{2028}\u{2029}".contains(c), false);
    let gson = escaped(&|c| "&<>='".contains(c), false);
    let dotnet = escaped(&|c| !c.is_ascii() || "&<>+'`".contains(c), true);
    let again = |form: &str| {
        let twice = serde_json::to_string(form).expect("a string serialises");
        twice[1..twice.len() - 1].to_owned()
    };
    let mut forms = vec![
        serde.replace('/', "\\/"),
        again(&serde),
        again(&python),
        python,
        php,
        go,
        gson,
        dotnet,
        serde,
    ];
    forms.retain(|f| f != value);
    forms
}

/// One list of secret values, longest first, and the automaton that finds
/// them in a text (leftmost-longest: a secret inside a longer one is
/// replaced with it).
#[derive(Clone, Default)]
struct Patterns {
    values: std::sync::Arc<[String]>,
    finder: Option<std::sync::Arc<aho_corasick::AhoCorasick>>,
}

impl Patterns {
    fn new(mut values: Vec<String>) -> Self {
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        let finder = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(&values)
            .ok()
            .filter(|_| !values.is_empty())
            .map(std::sync::Arc::new);
        Patterns {
            values: values.into(),
            finder,
        }
    }

    fn holds(&self, text: &str) -> bool {
        self.finder.as_ref().is_some_and(|f| f.is_match(text))
    }

    fn scrub(&self, text: &str) -> String {
        match &self.finder {
            Some(f) if f.is_match(text) => {
                let mut out = String::with_capacity(text.len());
                f.replace_all_with(text, &mut out, |_, _, out| {
                    out.push_str(REDACTED);
                    true
                });
                out
            }
            _ => text.to_owned(),
        }
    }

    fn scrub_json(&self, value: &mut serde_json::Value) -> bool {
        use serde_json::Value;
        match value {
            Value::String(text) if self.holds(text) => {
                *text = self.scrub(text);
                true
            }
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, item| self.scrub_json(item) | changed),
            Value::Object(map) => {
                let mut changed = map
                    .values_mut()
                    .fold(false, |changed, item| self.scrub_json(item) | changed);
                if map.keys().any(|k| self.holds(k)) {
                    // Rare: rebuilt only then, in the same order. A key
                    // that reads as a name (`required`) is never one of
                    // these values ([`word_like`]).
                    *map = std::mem::take(map)
                        .into_iter()
                        .map(|(k, v)| match self.holds(&k) {
                            true => (self.scrub(&k), v),
                            false => (k, v),
                        })
                        .collect();
                    changed = true;
                }
                changed
            }
            _ => false,
        }
    }
}

/// The secret values one server was given ([`secret_values`]), to scrub
/// from what it writes and answers. Cheap to clone; its `Debug` shows only
/// how many there are. Values learnt later (an OAuth access token, which
/// changes) are added as [`LiveSecrets`] ([`Secrets::with_live`]) and
/// scrubbed by every clone alike.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Every value and its JSON forms: scrubbed from logs and `lastError`.
    all: Patterns,
    /// Those of at least [`ANSWER_SECRET_MIN_CHARS`] characters that are
    /// not a number or [`word_like`], and their JSON forms: scrubbed from
    /// answers too.
    answers: Patterns,
    /// Values that change while the server runs, scrubbed after these.
    live: Option<LiveSecrets>,
}

/// Secret values that change while a server runs (its OAuth access
/// tokens): set by their owner ([`LiveSecrets::replace`]), scrubbed by
/// every [`Secrets`] they were added to, under the same rules as the
/// values it was built with. Cheap to clone (one shared set); its `Debug`
/// shows only how many there are.
#[derive(Clone, Default)]
pub struct LiveSecrets(std::sync::Arc<std::sync::RwLock<Option<std::sync::Arc<Secrets>>>>);

impl std::fmt::Debug for LiveSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.get().map_or(0, |s| s.all.values.len());
        write!(f, "LiveSecrets({n} values)")
    }
}

impl LiveSecrets {
    /// Makes `values` (as [`Secrets::new`] takes them) the set, in place
    /// of the one before.
    pub fn replace(&self, values: Vec<String>) {
        let set = std::sync::Arc::new(Secrets::new(values));
        // A panic while the lock was held cannot leave a set half written.
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(set);
    }

    fn get(&self) -> Option<std::sync::Arc<Secrets>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} values", self.all.values.len())?;
        match &self.live {
            Some(live) => write!(f, ", {live:?})"),
            None => write!(f, ")"),
        }
    }
}

impl Secrets {
    /// The values as [`secret_values`] lists them, each also as JSON
    /// encoders write it inside a string ([`json_forms`]): a server that
    /// answers with its settings as JSON text does not get past. Which
    /// values are scrubbed from answers is judged on the values as given.
    pub fn new(values: Vec<String>) -> Self {
        let for_answers = |v: &String| {
            v.chars().count() >= ANSWER_SECRET_MIN_CHARS
                && !v.bytes().all(|b| b.is_ascii_digit())
                && !word_like(v)
        };
        let with_forms = |values: &mut dyn Iterator<Item = &String>| -> Vec<String> {
            values
                .flat_map(|v| std::iter::once(v.clone()).chain(json_forms(v)))
                .collect()
        };
        let answers = with_forms(&mut values.iter().filter(|v| for_answers(v)));
        Secrets {
            all: Patterns::new(with_forms(&mut values.iter())),
            answers: Patterns::new(answers),
            live: None,
        }
    }

    /// These values and, from now on, whatever `live` holds at each scrub.
    pub fn with_live(self, live: LiveSecrets) -> Self {
        Secrets {
            live: Some(live),
            ..self
        }
    }

    /// The live values as they are now, if any were added.
    fn live_now(&self) -> Option<std::sync::Arc<Secrets>> {
        self.live.as_ref().and_then(LiveSecrets::get)
    }

    /// Whether nothing is ever scrubbed from an answer (a server with live
    /// values never says so: they may come at any time).
    pub fn is_empty_for_answers(&self) -> bool {
        self.answers.values.is_empty() && self.live.is_none()
    }

    /// `text` (a line the server wrote, an error for an admin) with every
    /// value replaced by [`REDACTED`].
    pub fn scrub_log(&self, text: &str) -> String {
        let text = self.all.scrub(text);
        match self.live_now() {
            Some(live) => live.all.scrub(&text),
            None => text,
        }
    }

    /// The beginning of what a server sent (`max_chars`, on one line:
    /// [`switchyard_mcp::jsonrpc::preview`]), for a message or a log line,
    /// with every value scrubbed ([`Secrets::scrub_log`]) before it is
    /// cut: a secret cut at the end would leave its prefix.
    pub fn preview(&self, bytes: &[u8], max_chars: usize) -> String {
        // Enough for the preview and the longest secret crossing its end.
        let longest = |p: &Patterns| p.values.first().map_or(0, String::len);
        let longest = longest(&self.all).max(self.live_now().map_or(0, |l| longest(&l.all)));
        let head = &bytes[..bytes.len().min(max_chars * 4 + longest)];
        let text = self.scrub_log(&String::from_utf8_lossy(head));
        let mut shown = switchyard_mcp::jsonrpc::preview(text.as_bytes(), max_chars);
        if head.len() < bytes.len() && !shown.ends_with('…') {
            shown.push('…');
        }
        shown
    }

    /// `text` (part of an answer: an error's message, an HTTP body) with
    /// each value scrubbed from answers replaced by [`REDACTED`].
    pub fn scrub_answer(&self, text: &str) -> String {
        let text = self.answers.scrub(text);
        match self.live_now() {
            Some(live) => live.answers.scrub(&text),
            None => text,
        }
    }

    /// Replaces, in every string and object key of `value` (a message the
    /// server sent: a result, an error, a notification, a request), each
    /// value scrubbed from answers (at least [`ANSWER_SECRET_MIN_CHARS`]
    /// characters, not a number, not a word or a name) by [`REDACTED`];
    /// everything else stays as sent. Returns whether anything was
    /// replaced.
    pub fn scrub_json(&self, value: &mut serde_json::Value) -> bool {
        let changed = self.answers.scrub_json(value);
        match self.live_now() {
            Some(live) => live.answers.scrub_json(value) | changed,
            None => changed,
        }
    }
}

/// `args` with the parts [`map_arg_secrets`] finds replaced by
/// [`REDACTED`], for answers, messages and debug output.
pub fn redacted_args(args: &[String]) -> Vec<String> {
    let Ok(shown) = map_arg_secrets(args, |_| {
        Ok::<_, std::convert::Infallible>(Some(REDACTED.to_owned()))
    });
    shown
}

/// `sent` (arguments as an admin sent them back, possibly edited) with
/// each argument that shows [`REDACTED`] taken from `stored` at the same
/// position, when the stored argument there is answered exactly as sent.
/// Errors, for the caller to refuse the update, naming the argument: one
/// shows `[redacted]` but the stored argument at its place is answered
/// otherwise (edited, moved, or none there); give its secret again.
pub fn restore_arg_secrets(sent: &[String], stored: &[String]) -> Result<Vec<String>, String> {
    let shown = redacted_args(stored);
    sent.iter()
        .enumerate()
        .map(|(i, arg)| {
            if !arg.contains(REDACTED) {
                return Ok(arg.clone());
            }
            match (shown.get(i), stored.get(i)) {
                (Some(s), Some(stored)) if s == arg => Ok(stored.clone()),
                _ => Err(format!(
                    "args[{i}] shows [redacted], but the stored argument at its place is not that one (edited, moved or none): give its secret again"
                )),
            }
        })
        .collect()
}

/// `map` (headers, environment) with the values of secret entries
/// ([`is_secret_entry`]) replaced by [`REDACTED`].
pub fn redacted<V: AsRef<str>>(map: &BTreeMap<String, V>) -> BTreeMap<String, String> {
    map.iter()
        .map(|(k, v)| {
            let v = match is_secret_entry(k, v.as_ref()) {
                true => REDACTED.to_owned(),
                false => v.as_ref().to_owned(),
            };
            (k.clone(), v)
        })
        .collect()
}

/// One upstream MCP server. Its `Debug` shows secret-looking header and
/// environment values as [`REDACTED`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Unique name, `[A-Za-z0-9_-]`, 1 to 48 characters.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: TransportKind,
    /// stdio: the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// stdio: extra environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// stdio: working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// http: the MCP endpoint URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// http: how Switchyard authenticates to the server; unset: `headers`
    /// when `headers` or `header_files` has an entry, else `none`
    /// ([`ServerConfig::auth_kind`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthKind>,
    /// http: static headers sent with every request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// http: headers whose values are secrets (a personal access token,
    /// say), each read from a file by the sidecar when it starts (the
    /// file's content, surrounding white space removed; [`load_header_value`]).
    /// Only the paths are stored and shown.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub header_files: BTreeMap<String, PathBuf>,
    /// http, `auth = "oauth"`: a pre-registered client and the scopes to
    /// ask for; unset: the client registers itself (Client ID Metadata
    /// Document or Dynamic Client Registration) and the scopes come from
    /// the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthSettings>,
    /// `auto` (default), `2026-07-28` or `2025-11-25`.
    #[serde(default = "default_era")]
    pub era: String,
    /// Per-request timeout towards the server, seconds (default 600).
    #[serde(default = "default_request_timeout_sec")]
    pub request_timeout_sec: u64,
    /// Largest message accepted from the server, bytes (default 16 MiB).
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: usize,
    /// Streamable HTTP: seconds without an answer from the server after
    /// which the sidecar probes it (`ping` or `server/discover`), so a
    /// server that went away while idle is reported down; 0: never
    /// (default 15, at most 86400). Ignored for stdio, whose exit is seen
    /// at once.
    #[serde(default = "default_liveness_interval_sec")]
    pub liveness_interval_sec: u64,
}

/// Longest timeout accepted anywhere in the configuration: 7 days.
pub const MAX_TIMEOUT_SEC: u64 = 7 * 24 * 3600;
/// Default largest message accepted from a server: 16 MiB, so a resource
/// of about 11 MiB (a PDF of several MB, base64-encoded in a JSON-RPC
/// answer: 4/3 of its size plus the envelope) passes.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The largest [`ServerConfig::max_message_bytes`] accepted: 1 GiB (a
/// message is held whole, several times over while it is processed).
pub const MAX_MESSAGE_BYTES_LIMIT: usize = 1 << 30;

fn default_era() -> String {
    "auto".into()
}
fn default_request_timeout_sec() -> u64 {
    600
}
fn default_max_message_bytes() -> usize {
    DEFAULT_MAX_MESSAGE_BYTES
}
/// Default of [`ServerConfig::liveness_interval_sec`]: 15 s.
pub const DEFAULT_LIVENESS_INTERVAL_SEC: u64 = 15;
fn default_liveness_interval_sec() -> u64 {
    DEFAULT_LIVENESS_INTERVAL_SEC
}

/// A configuration problem: which key, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {problem}")]
pub struct ConfigError {
    /// Dotted key path, e.g. `servers[2].url`.
    pub key: String,
    /// What is wrong.
    pub problem: String,
}

/// `[servers.oauth]`: how Switchyard registers with a server's
/// authorization server, and what it asks for (MCP authorization,
/// 2026-07-28 `basic/authorization/client-registration`). Every field is
/// optional. Its `Debug` never shows the client secret.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthSettings {
    /// A client registered with the authorization server beforehand
    /// (first in the spec's priority order). Unset: a Client ID Metadata
    /// Document (`client_metadata_url`) when the authorization server
    /// supports them, else Dynamic Client Registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// The pre-registered client's secret. Prefer `client_secret_file`:
    /// a secret given here is sealed in the store and never shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// A file holding the pre-registered client's secret, read by the
    /// control plane when it needs it (a relative path: the configuration
    /// file's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret_file: Option<PathBuf>,
    /// The scopes to ask for. Unset: the `scope` of the server's 401
    /// challenge, else its protected resource metadata's
    /// `scopes_supported`, else none (plus `offline_access` when the
    /// authorization server lists it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// The HTTPS URL of Switchyard's Client ID Metadata Document, used as
    /// the client id when the authorization server supports them and no
    /// `client_id` is set. The document must be served there (the
    /// authorization server fetches it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
    /// Authorize even though the authorization server's metadata does not
    /// list `code_challenge_methods_supported` (PKCE S256 is sent anyway).
    /// The MCP specification says to refuse such a server; some (Entra ID,
    /// Cognito) omit the field. Every authorization started under this
    /// override is audited.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_unadvertised_pkce: bool,
    /// Set by the control plane, not in configuration files: the
    /// `client_secret` given was moved, sealed, into the store.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub client_secret_sealed: bool,
}

impl std::fmt::Debug for OAuthSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthSettings")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| REDACTED),
            )
            .field("client_secret_file", &self.client_secret_file)
            .field("scopes", &self.scopes)
            .field("client_metadata_url", &self.client_metadata_url)
            .field("allow_unadvertised_pkce", &self.allow_unadvertised_pkce)
            .field("client_secret_sealed", &self.client_secret_sealed)
            .finish()
    }
}

impl OAuthSettings {
    /// Checks the table; `err` builds an error for a key under
    /// `oauth.`.
    fn validate(&self, err: impl Fn(&str, String) -> ConfigError) -> Result<(), ConfigError> {
        if self
            .client_id
            .as_deref()
            .is_some_and(|c| c.trim().is_empty())
        {
            return Err(err("oauth.client_id", "must not be empty".into()));
        }
        if self.client_secret.is_some() && self.client_secret_file.is_some() {
            return Err(err(
                "oauth.client_secret",
                "and client_secret_file are both set: give one".into(),
            ));
        }
        if (self.client_secret.is_some()
            || self.client_secret_file.is_some()
            || self.client_secret_sealed)
            && self.client_id.is_none()
        {
            return Err(err(
                "oauth.client_secret",
                "needs client_id (a secret belongs to a pre-registered client)".into(),
            ));
        }
        if self.client_secret.as_deref().is_some_and(str::is_empty) {
            return Err(err("oauth.client_secret", "must not be empty".into()));
        }
        if self
            .client_secret_file
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return Err(err("oauth.client_secret_file", "must name a file".into()));
        }
        for s in &self.scopes {
            if s.is_empty()
                || !s
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
            {
                return Err(err(
                    "oauth.scopes",
                    format!(
                        "{s:?} is not a scope (RFC 6749 §3.3: visible ASCII, no spaces, quotes or backslashes)"
                    ),
                ));
            }
        }
        if let Some(u) = &self.client_metadata_url {
            let shown = match url::Url::parse(u) {
                Ok(url) if url.scheme() == "https" && url.path() != "/" => None,
                Ok(_) => Some(format!("{:?}", redacted_url(u))),
                Err(e) => Some(format!("is not a URL ({e}):")),
            };
            if let Some(shown) = shown {
                return Err(err(
                    "oauth.client_metadata_url",
                    format!("{shown} must be an https URL with a path (the document's address)"),
                ));
            }
        }
        Ok(())
    }
}

/// Whether `name` is a valid server name: 1 to 48 characters of
/// `[A-Za-z0-9_-]`.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 48
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("command", &self.command)
            .field("args", &redacted_args(&self.args))
            .field("env", &redacted(&self.env))
            .field("cwd", &self.cwd)
            .field("url", &self.url.as_deref().map(redacted_url))
            .field("auth", &self.auth)
            .field("headers", &redacted(&self.headers))
            .field("header_files", &self.header_files)
            .field("oauth", &self.oauth)
            .field("era", &self.era)
            .field("request_timeout_sec", &self.request_timeout_sec)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("liveness_interval_sec", &self.liveness_interval_sec)
            .finish()
    }
}

/// The largest file a secret header value is read from: 16 KiB.
pub const MAX_HEADER_FILE_BYTES: u64 = 16 * 1024;

/// Headers Switchyard sets itself, or that frame the HTTP message: not
/// configurable in `headers` or `header_files` (ASCII case-insensitive).
pub const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "accept",
    "last-event-id",
    "mcp-session-id",
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
];

/// Whether `name` is a header `headers` and `header_files` may set: not
/// one of [`RESERVED_HEADERS`], nor an `Mcp-Param-*` header.
fn settable_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    !RESERVED_HEADERS.contains(&n.as_str()) && !n.starts_with("mcp-param-")
}

/// What is wrong with header name `k` of table `table` (`headers` or
/// `header_files`, whose entries are `all`), as (key, problem): not a
/// header name, one Switchyard sets itself ([`RESERVED_HEADERS`]), or
/// another entry's name in another case.
fn header_name_problem<V>(
    table: &str,
    k: &str,
    all: &BTreeMap<String, V>,
) -> Option<(String, String)> {
    if http::HeaderName::from_bytes(k.as_bytes()).is_err() {
        // Only its leading name characters: a header pasted whole as a
        // name (`Authorization: Bearer …`) would repeat its secret.
        let lead: String = k
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "-_".contains(*c))
            .take(40)
            .collect();
        return Some((
            table.into(),
            format!("{lead:?}… is not a valid header name (visible ASCII, no spaces or ':')"),
        ));
    }
    if !settable_header(k) {
        return Some((
            format!("{table}.{k}"),
            "is set by Switchyard or frames the request: it cannot be configured".into(),
        ));
    }
    all.keys()
        .find(|h| *h != k && h.eq_ignore_ascii_case(k))
        .map(|other| {
            (
                format!("{table}.{k}"),
                format!("is the same header as {other:?} (names are case-insensitive)"),
            )
        })
}

/// A problem reading a secret header value from its file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {file}: {problem}")]
pub struct SecretFileError {
    /// Dotted key path, e.g. `server.header_files.Authorization`.
    pub key: String,
    /// The file, as configured.
    pub file: String,
    /// What is wrong (never the content).
    pub problem: String,
}

/// Reads the value of a secret header from `file`: its content with
/// surrounding white space (a trailing newline) removed; it must be UTF-8,
/// not empty, and a valid header value (visible ASCII, spaces and tabs:
/// `Bearer <token>`). Errors name `key` and the file, never the content.
pub fn load_header_value(key: &str, file: &std::path::Path) -> Result<String, SecretFileError> {
    let problem = |problem: String| SecretFileError {
        key: key.to_owned(),
        file: file.display().to_string(),
        problem,
    };
    // A FIFO or a device would block or never end: regular files only,
    // and small ones (a header value, not a document).
    let meta = std::fs::metadata(file).map_err(|e| problem(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(problem("is not a regular file".into()));
    }
    if meta.len() > MAX_HEADER_FILE_BYTES {
        return Err(problem(format!(
            "is {} bytes, more than {MAX_HEADER_FILE_BYTES}",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(file).map_err(|e| problem(format!("cannot read it: {e}")))?,
            MAX_HEADER_FILE_BYTES + 1,
        ),
        &mut bytes,
    )
    .map_err(|e| problem(format!("cannot read it: {e}")))?;
    if bytes.len() as u64 > MAX_HEADER_FILE_BYTES {
        return Err(problem(format!(
            "is more than {MAX_HEADER_FILE_BYTES} bytes"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| problem("is not UTF-8 text".into()))?;
    let value = text.trim();
    if value.is_empty() {
        return Err(problem("is empty".into()));
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_graphic() || b == b' ' || b == b'\t')
    {
        return Err(problem(
            "is not a valid header value (visible ASCII, spaces and tabs, on one line)".into(),
        ));
    }
    Ok(value.to_owned())
}

/// Secret header values read from `header_files`, as `(name, value)`;
/// `Debug` shows the names only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretHeaders(pub Vec<(String, String)>);

impl std::fmt::Debug for SecretHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| format!("{k}: {REDACTED}")))
            .finish()
    }
}

impl SecretHeaders {
    /// Reads every `header_files` entry of `spec`; `at` is the spec's key
    /// path for errors (e.g. `server`).
    pub fn load(spec: &ServerConfig, at: &str) -> Result<SecretHeaders, SecretFileError> {
        spec.header_files
            .iter()
            .map(|(name, path)| {
                let value = load_header_value(&format!("{at}.header_files.{name}"), path)?;
                Ok((name.clone(), value))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(SecretHeaders)
    }
}

impl ServerConfig {
    /// How Switchyard authenticates to the server: `auth` when set, else
    /// `headers` when `headers` or `header_files` has an entry, else
    /// `none`.
    pub fn auth_kind(&self) -> AuthKind {
        match self.auth {
            Some(kind) => kind,
            None if self.headers.is_empty() && self.header_files.is_empty() => AuthKind::None,
            None => AuthKind::Headers,
        }
    }

    /// Checks the entry; `at` is its key path for messages (e.g.
    /// `servers[0]`). Errors name the key and the problem.
    pub fn validate(&self, at: &str) -> Result<(), ConfigError> {
        let err = |key: &str, problem: String| ConfigError {
            key: format!("{at}.{key}"),
            problem,
        };
        if !valid_server_name(&self.name) {
            return Err(err(
                "name",
                format!(
                    "{:?} must be 1 to 48 characters of [A-Za-z0-9_-]",
                    self.name
                ),
            ));
        }
        if let Err(e) = self.era.parse::<EraPreference>() {
            return Err(err("era", e));
        }
        if self.request_timeout_sec == 0 || self.request_timeout_sec > MAX_TIMEOUT_SEC {
            return Err(err(
                "request_timeout_sec",
                format!("must be between 1 and {MAX_TIMEOUT_SEC} (7 days)"),
            ));
        }
        for (k, v) in &self.env {
            let stop = |c: char| c == '=' || c.is_whitespace() || c.is_control();
            if k.is_empty() || k.contains(stop) {
                // Only the part before the first bad character: what
                // follows may be a value pasted in with the name.
                let lead = k.split(stop).next().unwrap_or_default();
                let name = match k.is_empty() {
                    true => "an empty name".to_owned(),
                    // A credential pasted as the name is not repeated.
                    false if lead.len() > 64 || looks_like_token(lead) => {
                        "a name (not shown: it looks like a credential)".to_owned()
                    }
                    false => format!("the name {lead:?}…"),
                };
                return Err(err(
                    "env",
                    format!(
                        "{name} is not a valid environment variable name: it must be non-empty, without '=', white space or control characters"
                    ),
                ));
            }
            if v.contains('\0') {
                return Err(err(
                    &format!("env.{k}"),
                    "the value contains a NUL character, which no process environment can hold"
                        .into(),
                ));
            }
        }
        if self.liveness_interval_sec > 86_400 {
            return Err(err(
                "liveness_interval_sec",
                "must be between 0 (never probe) and 86400 (1 day)".into(),
            ));
        }
        if !(1024..=MAX_MESSAGE_BYTES_LIMIT).contains(&self.max_message_bytes) {
            return Err(err(
                "max_message_bytes",
                format!(
                    "{} is out of range: must be between 1024 and {MAX_MESSAGE_BYTES_LIMIT} (1 GiB)",
                    self.max_message_bytes
                ),
            ));
        }
        match self.transport {
            TransportKind::Stdio => {
                if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
                    return Err(err(
                        "command",
                        "is required for transport = \"stdio\"".into(),
                    ));
                }
                // No process can be started with a NUL in its command
                // line or directory (the value is not repeated).
                let nul = "contains a NUL character, which no process can be started with";
                if self.command.as_deref().is_some_and(|c| c.contains('\0')) {
                    return Err(err("command", nul.into()));
                }
                if let Some(i) = self.args.iter().position(|a| a.contains('\0')) {
                    return Err(err(&format!("args[{i}]"), nul.into()));
                }
                if self
                    .cwd
                    .as_ref()
                    .is_some_and(|c| c.as_os_str().as_encoded_bytes().contains(&0))
                {
                    return Err(err("cwd", nul.into()));
                }
                if self.url.is_some() {
                    return Err(err("url", "is only for transport = \"http\"".into()));
                }
                if !self.headers.is_empty() {
                    return Err(err("headers", "are only for transport = \"http\"".into()));
                }
                if !self.header_files.is_empty() {
                    return Err(err(
                        "header_files",
                        "are only for transport = \"http\"".into(),
                    ));
                }
                if self.oauth.is_some() {
                    return Err(err("oauth", "is only for transport = \"http\"".into()));
                }
                if self.auth.is_some_and(|a| a != AuthKind::None) {
                    return Err(err(
                        "auth",
                        "is only for transport = \"http\" (a stdio server gets its secrets from env)"
                            .into(),
                    ));
                }
            }
            TransportKind::Http => {
                let Some(url) = &self.url else {
                    return Err(err("url", "is required for transport = \"http\"".into()));
                };
                match url::Url::parse(url) {
                    Ok(u) if u.scheme() == "http" || u.scheme() == "https" => {}
                    Ok(u) => {
                        return Err(err(
                            "url",
                            format!("scheme {:?} is not http or https", u.scheme()),
                        ));
                    }
                    // Not repeated: text that is not a URL may be a secret
                    // typed in the wrong place.
                    Err(e) => return Err(err("url", format!("is not a URL ({e})"))),
                }
                if self.command.is_some() {
                    return Err(err("command", "is only for transport = \"stdio\"".into()));
                }
                if !self.args.is_empty() {
                    return Err(err("args", "is only for transport = \"stdio\"".into()));
                }
                for (k, v) in &self.headers {
                    if let Some((key, problem)) = header_name_problem("headers", k, &self.headers) {
                        return Err(err(&key, problem));
                    }
                    if http::HeaderValue::from_str(v).is_err() {
                        return Err(err(
                            "headers",
                            format!("the value of {k:?} is not a valid header value"),
                        ));
                    }
                }
                for (k, path) in &self.header_files {
                    if let Some((key, problem)) =
                        header_name_problem("header_files", k, &self.header_files)
                    {
                        return Err(err(&key, problem));
                    }
                    if path.as_os_str().is_empty() {
                        return Err(err(&format!("header_files.{k}"), "must name a file".into()));
                    }
                    if self.headers.keys().any(|h| h.eq_ignore_ascii_case(k)) {
                        return Err(err(
                            &format!("header_files.{k}"),
                            "is also in headers: give each header once".into(),
                        ));
                    }
                }
                let sends_headers = !self.headers.is_empty() || !self.header_files.is_empty();
                match self.auth {
                    Some(AuthKind::None) if sends_headers => {
                        return Err(err(
                            "auth",
                            "is \"none\" but headers or header_files are set: remove them, or set auth = \"headers\"".into(),
                        ));
                    }
                    Some(AuthKind::Headers) if !sends_headers => {
                        return Err(err(
                            "auth",
                            "is \"headers\" but neither headers nor header_files has an entry"
                                .into(),
                        ));
                    }
                    Some(AuthKind::OAuth)
                        if self
                            .headers
                            .keys()
                            .chain(self.header_files.keys())
                            .any(|h| h.eq_ignore_ascii_case("authorization")) =>
                    {
                        return Err(err(
                            "auth",
                            "is \"oauth\" but an Authorization header is configured: the access token is sent as Authorization".into(),
                        ));
                    }
                    _ => {}
                }
                match (&self.oauth, self.auth) {
                    (Some(_), Some(AuthKind::OAuth)) => {}
                    (Some(_), _) => {
                        return Err(err(
                            "oauth",
                            "is set but auth is not \"oauth\": set auth = \"oauth\"".into(),
                        ));
                    }
                    _ => {}
                }
                if let Some(o) = &self.oauth {
                    o.validate(err)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> ServerConfig {
        toml::from_str(toml_text).unwrap()
    }

    #[test]
    fn stdio_and_http_entries_validate() {
        let s = parse(
            "name = \"orders\"\ntransport = \"stdio\"\ncommand = \"srv\"\nargs = [\"--x\"]\n",
        );
        s.validate("servers[0]").unwrap();
        assert_eq!(s.era, "auto");
        let h = parse(
            "name = \"web\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n[headers]\nAuthorization = \"Bearer t\"\n",
        );
        h.validate("servers[1]").unwrap();
        assert_eq!(h.transport, TransportKind::Http);
    }

    #[test]
    fn liveness_interval_defaults_to_15_s_and_0_turns_it_off() {
        let http = "name = \"w\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n";
        assert_eq!(parse(http).liveness_interval_sec, 15);
        let off = parse(&format!("{http}liveness_interval_sec = 0\n"));
        off.validate("s").unwrap();
        assert_eq!(off.liveness_interval_sec, 0);
        let e = parse(&format!("{http}liveness_interval_sec = 86401\n"))
            .validate("servers[2]")
            .unwrap_err();
        assert_eq!(e.key, "servers[2].liveness_interval_sec");
        assert!(e.problem.contains("86400"), "{}", e.problem);
    }

    #[test]
    fn urls_are_shown_without_their_secrets() {
        for (url, shown) in [
            (
                "https://alice:PW-1@mcp.example.com/mcp?api_key=K-2&team=blue&Access_Token=T-3",
                "https://alice:[redacted]@mcp.example.com/mcp?api_key=[redacted]&team=blue&Access_Token=[redacted]",
            ),
            ("http://127.0.0.1:3001/mcp", "http://127.0.0.1:3001/mcp"),
            ("http://bob@h/x?q=1", "http://bob@h/x?q=1"),
            ("http://a:pw@[bad/x?token=t", "http://[redacted]@[bad/x"),
            ("not a url?secret=s", "not a url"),
            // Secret names beyond token/secret/key/password/credential.
            (
                "https://acct.blob.example/c?sv=2024-05-04&sig=abc%2Bdef&se=2030&X-Amz-Signature=5f&auth=a;pwd=p;jwt=j;page=2",
                "https://acct.blob.example/c?sv=2024-05-04&sig=[redacted]&se=2030&X-Amz-Signature=[redacted]&auth=[redacted];pwd=[redacted];jwt=[redacted];page=2",
            ),
            // A generated credential in the path or under any name, and the fragment.
            (
                "https://mcp.example.com/api/mcp/sk-ak-3f9a8B7c6D5e4F3g2H1i/sse?v=2025-11-25&c=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5#token=abc",
                "https://mcp.example.com/api/mcp/[redacted]/sse?v=2025-11-25&c=[redacted]#[redacted]",
            ),
            (
                "https://h/u/123e4567-e89b-12d3-a456-426614174000/mcp",
                "https://h/u/[redacted]/mcp",
            ),
            // Break-it trial 7: a token as the user name, a query part
            // without `=`, `;` parameters of a path segment, base64 with `/`
            // (written or encoded), an empty value, wordy ids.
            (
                "https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@h/mcp;jsessionid=ABC;v=1?ghp_16C7e42F292c6912E7710c838347Ae178B4a&sig=ab/cd3EF%2Fgh&token=&id=my-project-2024-production",
                "https://[redacted]@h/mcp;jsessionid=[redacted];v=1?[redacted]&sig=[redacted]&token=&id=my-project-2024-production",
            ),
            (
                "https://h/x?k=Zm9vYmFyYmF6/cXV4MTIzNDU2Nzg5&passcode=1234&pin=9&sid=x",
                "https://h/x?k=[redacted]&passcode=[redacted]&pin=[redacted]&sid=[redacted]",
            ),
            // Long words without digits, and dates, are not credentials.
            (
                "https://h/model-context-protocol-server/2025-11-25/mcp?team=engineering-platform-blue#",
                "https://h/model-context-protocol-server/2025-11-25/mcp?team=engineering-platform-blue#",
            ),
        ] {
            assert_eq!(redacted_url(url), shown, "{url}");
        }
    }

    #[test]
    fn urls_quoted_in_messages_are_redacted() {
        assert_eq!(
            redact_urls_in(
                "OAuth metadata discovery failed for http://a:PW@h/mcp?api_key=K; error sending request for url (https://h/x?token=T#f): refused"
            ),
            "OAuth metadata discovery failed for http://a:[redacted]@h/mcp?api_key=[redacted]; error sending request for url (https://h/x?token=[redacted]#[redacted]): refused"
        );
        assert_eq!(redact_urls_in("no url here"), "no url here");
    }

    #[test]
    fn a_url_sent_back_edited_keeps_its_stored_secrets() {
        let stored = "https://alice:PW-1@mcp.example.com/mcp?api_key=K-2&team=blue";
        let shown = redacted_url(stored);
        assert_eq!(restore_url_secrets(&shown, stored).unwrap(), stored);
        // Another team: the key stays the stored one.
        let edited = shown.replace("team=blue", "team=red");
        assert_eq!(
            restore_url_secrets(&edited, stored).unwrap(),
            stored.replace("team=blue", "team=red")
        );
        // A new key given: taken as given.
        let new_key = shown.replace("api_key=[redacted]", "api_key=K-3");
        assert!(
            restore_url_secrets(&new_key, stored)
                .unwrap()
                .contains("api_key=K-3&")
        );
        assert!(
            restore_url_secrets(&new_key, stored)
                .unwrap()
                .contains(":PW-1@")
        );
        // Another host: refused, the stored secrets are not for it.
        let moved = shown.replace("mcp.example.com", "evil.example");
        assert!(
            restore_url_secrets(&moved, stored)
                .unwrap_err()
                .contains("another scheme, host or port")
        );
        // A redacted value the stored URL lacks.
        let extra = format!("{shown}&token=[redacted]");
        assert!(restore_url_secrets(&extra, stored).is_err());
        // A path credential, a `;` parameter and the fragment are kept too.
        let stored = "https://h/mcp/sk-ak-3f9a8B7c6D5e4F3g2H1i/sse?team=blue;sig=S1#frag=F1";
        let shown = redacted_url(stored);
        assert_eq!(
            shown,
            "https://h/mcp/[redacted]/sse?team=blue;sig=[redacted]#[redacted]"
        );
        assert_eq!(
            restore_url_secrets(&shown.replace("blue", "red"), stored).unwrap(),
            stored.replace("blue", "red")
        );
        // The console may send the brackets percent-encoded.
        assert_eq!(
            restore_url_secrets(&shown.replace("[redacted]", "%5Bredacted%5D"), stored).unwrap(),
            stored
        );
        // A redacted segment where the stored URL has no credential.
        let moved = shown.replace("/mcp/[redacted]/sse", "/[redacted]/mcp/sse");
        assert!(
            restore_url_secrets(&moved, stored)
                .unwrap_err()
                .contains("path segment"),
        );
        // A repeated name: each occurrence keeps its own value.
        let stored = "https://h/c?sig=AAA1&sig=BBB2&id=123e4567-e89b-12d3-a456-426614174000&id=223e4567-e89b-12d3-a456-426614174000";
        let shown = redacted_url(stored);
        assert_eq!(
            shown,
            "https://h/c?sig=[redacted]&sig=[redacted]&id=[redacted]&id=[redacted]"
        );
        assert_eq!(restore_url_secrets(&shown, stored).unwrap(), stored);
        // The password of another user name is not carried over.
        let stored = "https://alice:PW-1@h/mcp";
        let bob = redacted_url(stored).replace("alice", "bob");
        assert!(
            restore_url_secrets(&bob, stored)
                .unwrap_err()
                .contains("password"),
        );
        // A token as the user name, with a password: both come back (the
        // password is found under the restored user name).
        let stored = "https://ghp_3f9a8B7c6D5e4F3g2H1i0j:x-oauth-basic@h/mcp";
        let shown = redacted_url(stored);
        assert_eq!(shown, "https://[redacted]:[redacted]@h/mcp");
        assert_eq!(restore_url_secrets(&shown, stored).unwrap(), stored);
        // Nothing redacted: unchanged.
        assert_eq!(
            restore_url_secrets("http://h/x?a=1", stored).unwrap(),
            "http://h/x?a=1"
        );
    }

    #[test]
    fn url_secrets_are_mapped_by_a_place_that_does_not_depend_on_values() {
        let stored = "https://alice:PW-1@h/mcp/sk-ak-3f9a8B7c6D5e4F3g2H1i/sse;sig=S1?team=blue&api_key=K-2&api_key=K-3#F";
        let mut seen = Vec::new();
        let sealed = map_url_secrets(stored, |part| {
            seen.push((part.place.clone(), part.value.to_owned()));
            Ok::<_, ()>(Some(format!("sy1.0123456789ab.{}", seen.len())))
        })
        .unwrap();
        let places: Vec<&str> = seen.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            places,
            [
                "password",
                "path 2",
                "path 3 \"sig\" 0",
                "query \"api_key\" 0",
                "query \"api_key\" 1",
                "fragment"
            ]
        );
        assert_eq!(seen[0].1, "PW-1");
        assert_eq!(
            sealed,
            "https://alice:sy1.0123456789ab.1@h/mcp/sy1.0123456789ab.2/sse;sig=sy1.0123456789ab.3?team=blue&api_key=sy1.0123456789ab.4&api_key=sy1.0123456789ab.5#sy1.0123456789ab.6"
        );
        // Sealed values are secrets wherever they are, so never shown, and
        // the same places are found in the sealed URL to open it.
        assert_eq!(
            redacted_url(&sealed),
            "https://alice:[redacted]@h/mcp/[redacted]/sse;sig=[redacted]?team=blue&api_key=[redacted]&api_key=[redacted]#[redacted]"
        );
        let opened = map_url_secrets(&sealed, |part| {
            let i: usize = part.value.rsplit('.').next().unwrap().parse().unwrap();
            assert_eq!(part.place, seen[i - 1].0);
            Ok::<_, ()>(Some(seen[i - 1].1.clone()))
        })
        .unwrap();
        assert_eq!(opened, stored);
        // The first error is returned; no secret part, or not a URL:
        // exactly as given (not normalised).
        assert_eq!(map_url_secrets(&sealed, |_| Err("no")), Err("no"));
        for plain in ["HTTP://H:80/x?team=blue", "not a url ?token=x"] {
            assert_eq!(
                map_url_secrets(plain, |_| Ok::<_, ()>(Some("z".into()))),
                Ok(plain.to_owned())
            );
        }
        assert!(looks_sealed("sy1.0123456789ab.AAAA"));
        assert!(!looks_sealed("sy1.0123456789a.AAAA") && !looks_sealed("sy1.0123456789ab."));
    }

    /// Where [`map_arg_secrets`] finds the parts of `args`, in order.
    fn arg_places(args: &[String]) -> Vec<String> {
        let mut places = Vec::new();
        map_arg_secrets(args, |p| {
            places.push(p.place.clone());
            Ok::<_, ()>(None)
        })
        .unwrap();
        places
    }

    #[test]
    fn secrets_in_arguments_are_redacted_and_restored_by_place() {
        let args: Vec<String> = [
            "-y",
            "@modelcontextprotocol/server-postgres",
            "postgresql://app:PG-PW@db:5432/orders",
            "--api-key",
            "K-1",
            "--token=T-2",
            "API_SECRET=S-3",
            "sk-ak-3f9a8B7c6D5e4F3g2H1i",
            "--db=postgresql://u:PW-4@h/d",
            "--password",
            "--verbose",
            "--author=ann",
            "--region=eu-2024-production",
            "--header",
            "Authorization: Bearer H-5",
            "Bearer B-6",
            "/opt/breakit9/bin-wrap-2024x.sh",
            "--pat",
            "P-7",
        ]
        .map(String::from)
        .to_vec();
        let shown = redacted_args(&args);
        assert_eq!(
            shown,
            [
                "-y",
                "@modelcontextprotocol/server-postgres",
                "postgresql://app:[redacted]@db:5432/orders",
                "--api-key",
                "[redacted]",
                "--token=[redacted]",
                "API_SECRET=[redacted]",
                "[redacted]",
                "--db=postgresql://u:[redacted]@h/d",
                "--password",
                "--verbose",
                "--author=ann",
                "--region=eu-2024-production",
                "--header",
                "Authorization: [redacted]",
                "Bearer [redacted]",
                "/opt/breakit9/bin-wrap-2024x.sh",
                "--pat",
                "[redacted]",
            ]
        );
        let debug = format!(
            "{:?}",
            ServerConfig {
                args: args.clone(),
                ..parse("name = \"w\"\ntransport = \"stdio\"\ncommand = \"x\"\n")
            }
        );
        assert!(
            !debug.contains("PG-PW") && !debug.contains("K-1"),
            "{debug}"
        );
        // Places stay the same whatever the values.
        assert_eq!(
            arg_places(&args),
            [
                "args 2 password",
                "args 4",
                "args 5",
                "args 6",
                "args 7",
                "args 8 password",
                "args 14",
                "args 15",
                "args 18"
            ]
        );
        // Sent back as answered: the stored values; one edited: as given;
        // a redacted one moved, or with no stored one at its place: refused.
        assert_eq!(restore_arg_secrets(&shown, &args).unwrap(), args);
        let mut edited = shown.clone();
        edited[12] = "--region=us".into();
        edited[4] = "K-9".into();
        let restored = restore_arg_secrets(&edited, &args).unwrap();
        assert_eq!(
            (&*restored[4], &*restored[5], &*restored[12]),
            ("K-9", "--token=T-2", "--region=us")
        );
        let mut moved = shown.clone();
        moved.insert(0, "--new".into());
        let e = restore_arg_secrets(&moved, &args).unwrap_err();
        assert!(e.starts_with("args[3] shows [redacted]"), "{e}");
        let mut extra = shown.clone();
        extra.push("--key=[redacted]".into());
        assert!(
            restore_arg_secrets(&extra, &args)
                .unwrap_err()
                .starts_with("args[19]")
        );
    }

    #[test]
    fn json_user_and_spaced_header_arguments_are_redacted_by_part() {
        let args: Vec<String> = [
            r#"{"apiKey": "K-JSON-1", "region": "eu", "db": {"url": "postgresql://a:PW-2@h/d", "pool": 5}, "list": ["sk-ak-3f9a8B7c6D5e4F3g2H1i", "x"]}"#,
            "--user",
            "admin:PW-3",
            "--user=bob:PW-4",
            "-u",
            "1000:1000",
            "--user",
            "http://h/x",
            "Authorization : Bearer H-5-long",
            r#"{"token": "T\u002d6"}"#,
            r#"{"note": "plain", "n": 1}"#,
            "{not json",
            "--token-file",
            "/run/secrets/token",
            "--max-tokens",
            "4096",
            "--tokens-limit=500",
            "--auth-url",
            "https://u:PW-7@auth.example/x",
        ]
        .map(String::from)
        .to_vec();
        let shown = redacted_args(&args);
        assert_eq!(
            shown,
            [
                r#"{"apiKey": "[redacted]", "region": "eu", "db": {"url": "[redacted]", "pool": 5}, "list": ["[redacted]", "x"]}"#,
                "--user",
                "admin:[redacted]",
                "--user=bob:[redacted]",
                "-u",
                "1000:1000",
                "--user",
                "http://h/x",
                "Authorization : [redacted]",
                // Written in another escaping: the whole argument.
                "[redacted]",
                r#"{"note": "plain", "n": 1}"#,
                "{not json",
                // Where a secret is, or a setting: not one.
                "--token-file",
                "/run/secrets/token",
                "--max-tokens",
                "4096",
                "--tokens-limit=500",
                "--auth-url",
                "https://u:[redacted]@auth.example/x",
            ]
        );
        assert_eq!(
            arg_places(&args),
            [
                "args 0 json apiKey",
                "args 0 json db.url",
                "args 0 json list.0",
                "args 2 password",
                "args 3 password",
                "args 8",
                "args 9",
                "args 18 password",
            ]
        );
        assert_eq!(restore_arg_secrets(&shown, &args).unwrap(), args);
        // Sealed and opened again part by part, the JSON stays as written.
        let sealed = map_arg_secrets(&args, |p| {
            Ok::<_, ()>(Some(format!("sy1.0123456789ab.{}", p.value.len())))
        })
        .unwrap();
        assert!(
            sealed[0].starts_with(r#"{"apiKey": "sy1.0123456789ab.8", "region": "eu""#),
            "{}",
            sealed[0]
        );
        assert_eq!(redacted_args(&sealed)[0], shown[0]);
        let values = secret_values(std::iter::empty(), &args, None);
        for secret in [
            "K-JSON-1",
            "PW-3",
            "PW-4",
            "H-5-long",
            "postgresql://a:PW-2@h/d",
        ] {
            assert!(values.contains(&secret.to_owned()), "{secret}: {values:?}");
        }
    }

    proptest::proptest! {
        /// Hostile text in any place (names, arguments, URLs; any
        /// Unicode) is judged without panicking, and what is redacted
        /// comes back from the stored value.
        #[test]
        fn redaction_never_panics_and_restores(
            args in proptest::collection::vec("\\PC{0,24}|--[a-zé_-]{0,10}(=\\PC{0,12})?|[a-zA-Z]{1,6}://[a-zé]{1,5}:\\PC{0,8}@h/\\PC{0,12}", 0..6),
            url in "https?://[a-zA-Zé:@]{0,12}h(:[0-9]{1,4})?/\\PC{0,16}(\\?\\PC{0,24})?(#\\PC{0,6})?",
        ) {
            let shown = redacted_args(&args);
            proptest::prop_assert_eq!(restore_arg_secrets(&shown, &args).ok(), Some(args.clone()));
            for a in &args {
                let _ = is_secret_name(a);
                let _ = redact_urls_in(a);
            }
            let shown = redacted_url(&url);
            if url::Url::parse(&url).is_ok() {
                let back = restore_url_secrets(&shown, &url);
                proptest::prop_assert!(back.is_ok(), "{:?}", back);
            }
        }
    }

    #[test]
    fn secret_values_are_scrubbed_from_what_a_server_echoes() {
        let env = [
            ("API_TOKEN", "env-SECRET-1\n"),
            ("Authorization", "Bearer hdr-SECRET-2"),
            ("LOG", "info"),
            ("PIN", "123"),
        ];
        let args: Vec<String> = ["--api-key", "arg-SECRET-3", "-v"]
            .map(String::from)
            .to_vec();
        let secrets = secret_values(
            env.iter().copied(),
            &args,
            Some("http://u:P%40ss-SECRET-4@h/mcp?api_key=q-SECRET-5"),
        );
        let echoed = "got env-SECRET-1 and hdr-SECRET-2 (Bearer hdr-SECRET-2), arg-SECRET-3, P@ss-SECRET-4 and P%40ss-SECRET-4, q-SECRET-5; log info, pin 123";
        let shown = Secrets::new(secrets).scrub_log(echoed);
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.contains("log info, pin 123"), "{shown}");
        assert!(
            shown.starts_with("got [redacted] and [redacted] ([redacted])"),
            "{shown}"
        );
    }

    #[test]
    fn live_values_are_scrubbed_by_every_clone_as_they_change() {
        let live = LiveSecrets::default();
        let secrets = Secrets::new(vec!["sk-live-FIXED-1".into()]).with_live(live.clone());
        let copy = secrets.clone();
        assert!(!copy.is_empty_for_answers(), "values may come at any time");
        // Nothing live yet: only the fixed value goes.
        assert_eq!(
            copy.scrub_answer("sk-live-FIXED-1 ya29.first/token"),
            "[redacted] ya29.first/token"
        );
        live.replace(vec!["ya29.first/token".into()]);
        let mut answer =
            serde_json::json!({"text": "Bearer ya29.first/token", "php": "ya29.first\\/token"});
        assert!(copy.scrub_json(&mut answer));
        assert_eq!(
            answer,
            serde_json::json!({"text": "Bearer [redacted]", "php": "[redacted]"})
        );
        assert_eq!(
            copy.scrub_log("sk-live-FIXED-1 and ya29.first/token"),
            "[redacted] and [redacted]"
        );
        assert_eq!(
            copy.preview(b"token ya29.first/token, then more", 12),
            "token [redac…"
        );
        // Replaced whole: a value no longer in the set stays.
        live.replace(vec!["ya29.second".into()]);
        assert_eq!(
            secrets.scrub_answer("ya29.first/token ya29.second"),
            "ya29.first/token [redacted]"
        );
        assert_eq!(
            format!("{secrets:?}"),
            "Secrets(1 values, LiveSecrets(1 values))"
        );
    }

    #[test]
    fn answers_are_scrubbed_of_the_longer_secrets_and_keep_everything_else() {
        let env = [
            ("API_TOKEN", "sk-live-ANSWER-1"),
            ("DB_PASSWORD", "hunter2"),
            ("SESSION_TIMEOUT", "86400000"),
            ("AUTH_MODE", "required"),
        ];
        let secrets = Secrets::new(secret_values(env.iter().copied(), &[], None));
        assert_eq!(format!("{secrets:?}"), "Secrets(4 values)");
        let mut answer = serde_json::json!({
            "content": [{"type": "text", "text": "key sk-live-ANSWER-1 refused; hunter2; 86400000"}],
            "isError": true,
            "_meta": {"x": ["sk-live-ANSWER-1", 7], "sk-live-ANSWER-1": true},
            "inputSchema": {"required": ["required"]},
            "unknown": {"z": 1}
        });
        assert!(secrets.scrub_json(&mut answer));
        // Short, all-digit and word-like values stay: they would also hit
        // ordinary words, names and numbers. Arrays and order are kept.
        assert_eq!(
            answer.to_string(),
            r#"{"content":[{"type":"text","text":"key [redacted] refused; hunter2; 86400000"}],"isError":true,"_meta":{"x":["[redacted]",7],"[redacted]":true},"inputSchema":{"required":["required"]},"unknown":{"z":1}}"#
        );
        let mut clean = serde_json::json!({"content": [], "n": 86400000});
        assert!(!secrets.scrub_json(&mut clean));
        // Logs and lastError lose every value.
        assert_eq!(
            secrets.scrub_log("hunter2 86400000 sk-live-ANSWER-1"),
            "[redacted] [redacted] [redacted]"
        );
        assert_eq!(
            secrets.scrub_answer("hunter2 sk-live-ANSWER-1"),
            "hunter2 [redacted]"
        );
    }

    #[test]
    fn secrets_are_scrubbed_as_json_writes_them_and_line_by_line() {
        let pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----";
        let env = [
            ("APP_PRIVATE_KEY", pem),
            ("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCY"),
            ("UNI_SECRET", "pässwört-SECRET-55"),
            ("Q_SECRET", "sl/ash\"quo\\bk+pl="),
            // A secret name holding a URL: its password alone too.
            ("AUTH_DATABASE_URL", "postgresql://app:AUTHDBPW33@db/auth"),
        ];
        let secrets = Secrets::new(secret_values(env.iter().copied(), &[], None));
        let settings: serde_json::Map<String, serde_json::Value> = env
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        // As serde, Python's json.dumps (ASCII) and PHP (`\/`) write them.
        let serde = serde_json::to_string(&settings).unwrap();
        let ascii = serde.replace('ä', "\\u00e4").replace('ö', "\\u00f6");
        let php = serde.replace('/', "\\/");
        for text in [serde, ascii, php] {
            let mut answer = serde_json::json!({"content": [{"type": "text", "text": text}]});
            secrets.scrub_json(&mut answer);
            let shown = answer["content"][0]["text"].as_str().unwrap();
            for secret in ["MIIEvQ", "AQEFAA", "wJalrX", "ssw", "quo", "AUTHDBPW33"] {
                assert!(!shown.contains(secret), "{secret}: {shown}");
            }
        }
        // A PEM key's lines, each alone; the URL's password in another URL.
        let mut answer = serde_json::json!(
            "line MIIEvQIBADANBgkqhkiG9w0B; postgresql://app:AUTHDBPW33@db:5432/auth"
        );
        secrets.scrub_json(&mut answer);
        assert_eq!(
            answer,
            "line [redacted]; postgresql://app:[redacted]@db:5432/auth"
        );
        // Scrubbed before it is cut: no prefix is left.
        let long = format!("{}{}", "x".repeat(195), "AUTHDBPW33 and more");
        assert_eq!(
            secrets.preview(long.as_bytes(), 200),
            format!("{}[reda…", "x".repeat(195))
        );
    }

    #[test]
    fn a_urls_basic_credential_is_a_secret_value() {
        use base64::Engine as _;
        let values = secret_values(
            std::iter::empty(),
            &[],
            Some("http://usr:URL%26ONLY-PW97@127.0.0.1:9/mcp"),
        );
        let encoded = base64::engine::general_purpose::STANDARD.encode("usr:URL&ONLY-PW97");
        assert!(values.contains(&format!("Basic {encoded}")), "{values:?}");
        assert!(values.contains(&"URL&ONLY-PW97".to_owned()), "{values:?}");
        // Decoding does not stop at `&`: no prefix of the password alone.
        assert!(!values.contains(&"URL".to_owned()), "{values:?}");
    }

    #[test]
    fn plain_named_values_that_are_ids_or_plain_urls_are_not_secrets() {
        for value in [
            "http://collector:4318",
            "HTTPS://Api.Example.com/v1",
            "https://api.example.com:443/v1",
            "https://api.example.com/v1/search?q=hello world",
            "3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
            "123e4567-e89b-12d3-a456-426614174000",
            "info",
        ] {
            assert!(!is_secret_entry("SETTING", value), "{value}");
        }
        for value in [
            "postgresql://app:pw@db/x",
            "https://h/x?api_key=k",
            "Bearer abc",
            "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        ] {
            assert!(is_secret_entry("SETTING", value), "{value}");
        }
    }

    #[test]
    fn trial_12_forms_keys_and_false_positives() {
        let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwg+/=\n-----END RSA PRIVATE KEY-----";
        // A PEM private key is a secret whatever its name or place.
        assert!(is_secret_entry("GITHUB_APP_PEM", pem));
        assert_eq!(
            redacted_args(&["serve".into(), pem.into()]),
            ["serve", "[redacted]"]
        );
        let sa = r#"{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nSAKEYLINE1abc/x+y\n-----END PRIVATE KEY-----\n", "token_uri": "https://oauth2.googleapis.com/token", "enabled": true}"#;
        let env = [
            ("GITHUB_APP_PEM", pem),
            ("AMP_SECRET", "customer&Xy7!Q2zz"),
            ("PLUS_SECRET", "abc+def=ghi+jkl"),
            ("UNI_SECRET", "päss/wört/SECRET"),
            ("GOOGLE_CREDENTIALS", sa),
            (
                "ENV_SECRETS",
                "NODE_ENV=production\nSTRIPE_KEY=sk_live_abc123XYZ",
            ),
            ("DYNAMODB_SORT_KEY", "customer_id"),
            ("AWS_ACCESS_KEY_ID", "AKIAIOSFODNNEXAMPLE"),
            ("AUTH_BASE_PATH", "/api/v1"),
        ];
        let secrets = Secrets::new(secret_values(
            env.iter().copied(),
            &[],
            Some("http://ghp_USERONLY0123456789abcdefABCDEF01@127.0.0.1:9/mcp"),
        ));
        let scrubbed = |text: &str| {
            let mut v = serde_json::Value::from(text);
            secrets.scrub_json(&mut v);
            v.as_str().unwrap().to_owned()
        };
        // As Go, .NET, Gson and JSON inside JSON write them.
        for text in [
            r#""customer\u0026Xy7!Q2zz""#,
            r#""abc\u002Bdef=ghi\u002Bjkl""#,
            r#""abc+def\u003dghi+jkl""#,
            r#""p\u00E4ss/w\u00F6rt/SECRET""#,
            r#""p\\u00e4ss/w\\u00f6rt/SECRET""#,
            "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwg\\u002B/=",
            "SAKEYLINE1abc/x+y",
            "sk_live_abc123XYZ",
            "AKIAIOSFODNNEXAMPLE",
        ] {
            assert!(
                scrubbed(text).contains("[redacted]"),
                "{text}: {}",
                scrubbed(text)
            );
        }
        use base64::Engine as _;
        let basic = base64::engine::general_purpose::STANDARD
            .encode("ghp_USERONLY0123456789abcdefABCDEF01:");
        assert_eq!(scrubbed(&format!("Basic {basic}")), "[redacted]");
        // Not secrets in answers: names (a sort key, a schema's
        // `required`), PEM armour, a credentials file's ordinary lines and
        // public URLs, a short value in an escaped form.
        for text in [
            r#"{"required": ["customer_id"]}"#,
            "-----BEGIN PRIVATE KEY----- and -----END RSA PRIVATE KEY-----",
            r#""type": "service_account", "enabled": true,"#,
            "POST https://oauth2.googleapis.com/token",
            "NODE_ENV=production",
            r#""next": "https:\/\/shop.example\/api\/v1\/orders""#,
        ] {
            assert_eq!(scrubbed(text), text);
        }
        // A bot token in a URL's path.
        assert_eq!(
            redacted_url(
                "https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage"
            ),
            "https://api.telegram.org/[redacted]/sendMessage"
        );
    }

    #[test]
    fn env_names_and_values_are_checked_without_repeating_a_pasted_value() {
        let stdio = "name = \"w\"\ntransport = \"stdio\"\ncommand = \"x\"\n[env]\n";
        parse(&format!("{stdio}API_TOKEN = \"t\"\nlower_ok = \"1\"\n"))
            .validate("s")
            .unwrap();
        for (name, lead) in [
            ("API_KEY=sk-PASTED", "\"API_KEY\"…"),
            ("API KEY sk-PASTED", "\"API\"…"),
            ("TAB\tsk-PASTED", "\"TAB\"…"),
            ("NUL\u{0}sk-PASTED", "\"NUL\"…"),
            ("", "an empty name"),
            ("sk-live-4f9a8B7c6D5e4F3g2H1i\t", "not shown"),
        ] {
            let text = format!("{stdio}{} = \"v\"\n", toml::Value::from(name));
            let e = parse(&text).validate("s").unwrap_err();
            assert_eq!(e.key, "s.env", "{text}");
            assert!(e.problem.contains(lead), "{e}");
            assert!(
                !e.problem.contains("PASTED") && !e.problem.contains("sk-live"),
                "{e}"
            );
        }
        // A NUL in the command line or directory: named, not repeated.
        for (line, key) in [
            ("command = \"x\\u0000SECRET\"", "s.command"),
            (
                "command = \"x\"\nargs = [\"a\", \"b\\u0000SECRET\"]",
                "s.args[1]",
            ),
            ("command = \"x\"\ncwd = \"/t\\u0000SECRET\"", "s.cwd"),
        ] {
            let e = parse(&format!("name = \"w\"\ntransport = \"stdio\"\n{line}\n"))
                .validate("s")
                .unwrap_err();
            assert_eq!(e.key, key, "{line}");
            assert!(
                e.problem.contains("NUL") && !e.problem.contains("SECRET"),
                "{e}"
            );
        }
        let e = parse(&format!("{stdio}A = \"SECRET\\u0000y\"\n"))
            .validate("s")
            .unwrap_err();
        assert_eq!(e.key, "s.env.A");
        assert!(
            e.problem.contains("NUL") && !e.problem.contains("SECRET"),
            "{e}"
        );
    }

    #[test]
    fn max_message_bytes_is_between_1_kib_and_1_gib() {
        let http = "name = \"w\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n";
        for ok in [1024, 1 << 30] {
            parse(&format!("{http}max_message_bytes = {ok}\n"))
                .validate("s")
                .unwrap();
        }
        for bad in [1023, (1 << 30) + 1] {
            let e = parse(&format!("{http}max_message_bytes = {bad}\n"))
                .validate("servers[0]")
                .unwrap_err();
            assert_eq!(e.key, "servers[0].max_message_bytes");
            assert!(e.problem.contains("1073741824"), "{}", e.problem);
        }
    }

    #[test]
    fn errors_name_the_key() {
        let bad = parse("name = \"a b\"\ntransport = \"stdio\"\ncommand = \"x\"\n");
        assert_eq!(
            bad.validate("servers[3]").unwrap_err().key,
            "servers[3].name"
        );
        let bad = parse("name = \"w\"\ntransport = \"http\"\n");
        let e = bad.validate("servers[0]").unwrap_err();
        assert_eq!(e.key, "servers[0].url");
        assert!(e.problem.contains("required"));
        let bad = parse("name = \"w\"\ntransport = \"stdio\"\ncommand = \"x\"\nera = \"2024\"\n");
        assert_eq!(bad.validate("s").unwrap_err().key, "s.era");
        assert!(toml::from_str::<ServerConfig>("name = \"w\"\ntransport = \"ftp\"\n").is_err());
        assert!(
            toml::from_str::<ServerConfig>("name = \"w\"\ntransport = \"stdio\"\ncomand = \"x\"\n")
                .is_err()
        );
    }

    #[test]
    fn oauth_tables_are_checked() {
        let http = "name = \"w\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n";
        let ok = parse(&format!(
            "{http}auth = \"oauth\"\n[oauth]\nclient_id = \"c\"\nclient_secret_file = \"/s\"\nscopes = [\"a:b\"]\n"
        ));
        ok.validate("s").unwrap();
        assert_eq!(ok.auth_kind(), AuthKind::OAuth);
        parse(&format!("{http}auth = \"oauth\"\n"))
            .validate("s")
            .unwrap();
        for (text, key) in [
            (format!("{http}[oauth]\nscopes = [\"a\"]\n"), "s.oauth"),
            (
                format!("{http}auth = \"oauth\"\n[oauth]\nclient_secret = \"x\"\n"),
                "s.oauth.client_secret",
            ),
            (
                format!(
                    "{http}auth = \"oauth\"\n[oauth]\nclient_id = \"c\"\nclient_secret = \"x\"\nclient_secret_file = \"/f\"\n"
                ),
                "s.oauth.client_secret",
            ),
            (
                format!("{http}auth = \"oauth\"\n[oauth]\nscopes = [\"a b\"]\n"),
                "s.oauth.scopes",
            ),
            (
                format!(
                    "{http}auth = \"oauth\"\n[oauth]\nclient_metadata_url = \"http://x.example/doc\"\n"
                ),
                "s.oauth.client_metadata_url",
            ),
            (
                format!("{http}auth = \"oauth\"\n[headers]\nAuthorization = \"Bearer x\"\n"),
                "s.auth",
            ),
            (
                "name = \"w\"\ntransport = \"stdio\"\ncommand = \"x\"\n[oauth]\n".into(),
                "s.oauth",
            ),
        ] {
            let e = parse(&text).validate("s").unwrap_err();
            assert_eq!(e.key, key, "{text}: {e}");
        }
        let secret = parse(&format!(
            "{http}auth = \"oauth\"\n[oauth]\nclient_id = \"c\"\nclient_secret = \"hunter2\"\n"
        ));
        assert!(!format!("{secret:?}").contains("hunter2"));
    }

    #[test]
    fn auth_kinds_are_inferred_and_checked() {
        let http = "name = \"w\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n";
        let plain = parse(http);
        plain.validate("s").unwrap();
        assert_eq!(plain.auth_kind(), AuthKind::None);
        let files = parse(&format!(
            "{http}[header_files]\nAuthorization = \"/run/secrets/t\"\n"
        ));
        files.validate("s").unwrap();
        assert_eq!(files.auth_kind(), AuthKind::Headers);
        let explicit = parse(&format!(
            "{http}auth = \"headers\"\n[headers]\nX-Team = \"blue\"\n"
        ));
        explicit.validate("s").unwrap();
        assert_eq!(explicit.auth_kind(), AuthKind::Headers);
        for (text, key, needle) in [
            (format!("{http}auth = \"headers\"\n"), "s.auth", "neither"),
            (
                format!("{http}auth = \"none\"\n[headers]\nX-Team = \"blue\"\n"),
                "s.auth",
                "remove them",
            ),
            (
                format!("{http}[headers]\nauthorization = \"x\"\n[header_files]\nAuthorization = \"/f\"\n"),
                "s.header_files.Authorization",
                "also in headers",
            ),
            (
                format!("{http}[header_files]\nAuthorization = \"/f\"\nauthorization = \"/g\"\n"),
                "s.header_files.Authorization",
                "case-insensitive",
            ),
            (
                format!("{http}[header_files]\n\"bad name\" = \"/f\"\n"),
                "s.header_files",
                "not a valid header name",
            ),
            (
                format!("{http}[header_files]\nAuthorization = \"\"\n"),
                "s.header_files.Authorization",
                "must name a file",
            ),
            (
                "name = \"w\"\ntransport = \"stdio\"\ncommand = \"x\"\nauth = \"headers\"\n".into(),
                "s.auth",
                "only for transport",
            ),
            (
                "name = \"w\"\ntransport = \"stdio\"\ncommand = \"x\"\n[header_files]\nA = \"/f\"\n".into(),
                "s.header_files",
                "only for transport",
            ),
        ] {
            let e = parse(&text).validate("s").unwrap_err();
            assert_eq!(e.key, key, "{text}");
            assert!(e.problem.contains(needle), "{text}: {e}");
        }
        for name in [
            "Content-Length",
            "host",
            "Mcp-Session-Id",
            "Mcp-Param-Region",
            "Accept",
        ] {
            for table in ["headers", "header_files"] {
                let text = format!("{http}[{table}]\n{name:?} = \"/x\"\n");
                let e = parse(&text).validate("s").unwrap_err();
                assert_eq!(e.key, format!("s.{table}.{name}"), "{text}");
                assert!(e.problem.contains("cannot be configured"), "{e}");
            }
        }
        let e = parse(&format!("{http}[headers]\nX-A = \"1\"\nx-a = \"2\"\n"))
            .validate("s")
            .unwrap_err();
        assert!(e.problem.contains("case-insensitive"), "{e}");
        // Not a kind (yet): the parser names the choices.
        let e = toml::from_str::<ServerConfig>(&format!("{http}auth = \"basic\"\n")).unwrap_err();
        assert!(e.to_string().contains("none"), "{e}");
    }

    #[test]
    fn secret_names_are_redacted_in_answers_and_debug() {
        for name in [
            "Authorization",
            "cookie",
            "X-Api-Key",
            "GITHUB_TOKEN",
            "db_password",
            "Client-Secret",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "X-Auth",
            "Proxy-Authorization",
            "sig",
            "X-Amz-Signature",
            "xAmzSignature",
            "SMTP_PASS",
            "jwt",
            "Mcp-Session",
            "PWD",
            "JSESSIONID",
            "sessionid",
            "passcode",
            "pin",
            "sid",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "X-Team",
            "Accept",
            "LANG",
            "PATH",
            "AUTHOR",
            "PASSENGERS",
            "SPINNER",
            "SIGNAL",
            "sv",
            // Not ASCII: judged without panicking (a cut never falls
            // inside a character).
            "región",
            "--café",
            "Aé",
            "日本",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
        assert!(is_secret_name("clé-token") && is_secret_name("éSession"));
        let h = parse(
            "name = \"w\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n[headers]\nAuthorization = \"Bearer hunter2\"\nX-Team = \"blue\"\n",
        );
        let shown = redacted(&h.headers);
        assert_eq!(shown["Authorization"], REDACTED);
        assert_eq!(shown["X-Team"], "blue");
        let debug = format!("{h:?}");
        assert!(
            !debug.contains("hunter2") && debug.contains("blue"),
            "{debug}"
        );
        let loaded = SecretHeaders(vec![("Authorization".into(), "Bearer hunter2".into())]);
        assert!(!format!("{loaded:?}").contains("hunter2"));
        // A value that holds a secret, whatever its name, is redacted whole.
        let env: BTreeMap<String, String> = [
            ("DATABASE_URL", "postgresql://app:pg-pw@db:5432/orders"),
            ("UPSTREAM", "Bearer hunter2"),
            ("SOME_ID", "sk-live-4f9a8B7c6D5e4F3g2H1i"),
            ("PUBLIC_URL", "https://example.com/orders?team=blue"),
            ("CONFIG", "/etc/srv/config-2024-production-v2.toml"),
            ("LOG", "info"),
            ("EMPTY", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let shown = redacted(&env);
        for name in ["DATABASE_URL", "UPSTREAM", "SOME_ID"] {
            assert_eq!(shown[name], REDACTED, "{name}");
        }
        for name in ["PUBLIC_URL", "CONFIG", "LOG", "EMPTY"] {
            assert_eq!(shown[name], env[name], "{name}");
        }
        let values = secret_values(env.iter().map(|(k, v)| (k.as_str(), v.as_str())), &[], None);
        assert!(values.contains(&"pg-pw".to_owned()), "{values:?}");
        assert!(values.contains(&env["DATABASE_URL"]), "{values:?}");
        assert!(!values.contains(&env["PUBLIC_URL"]), "{values:?}");
    }

    #[test]
    fn header_values_are_read_from_files_and_errors_never_show_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t");
        std::fs::write(&file, "Bearer hunter2\n").unwrap();
        assert_eq!(load_header_value("k", &file).unwrap(), "Bearer hunter2");
        for (content, needle) in [
            ("  \n", "is empty"),
            ("Bearer hunter2\nX-Evil: 1\n", "not a valid header value"),
        ] {
            std::fs::write(&file, content).unwrap();
            let e = load_header_value("server.header_files.Authorization", &file).unwrap_err();
            assert_eq!(e.key, "server.header_files.Authorization");
            assert!(e.problem.contains(needle), "{e}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
        // Not a regular file, or too large: refused before reading.
        let e = load_header_value("k", dir.path()).unwrap_err();
        assert!(e.problem.contains("not a regular file"), "{e}");
        std::fs::write(&file, vec![b'a'; 20_000]).unwrap();
        let e = load_header_value("k", &file).unwrap_err();
        assert!(e.problem.contains("more than 16384"), "{e}");
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(
            load_header_value("k", &file)
                .unwrap_err()
                .problem
                .contains("UTF-8")
        );
        let missing = dir.path().join("missing");
        let e = load_header_value("k", &missing).unwrap_err();
        assert!(
            e.to_string().contains("missing") && e.problem.contains("cannot read"),
            "{e}"
        );
        let spec = parse(&format!(
            "name = \"w\"\ntransport = \"http\"\nurl = \"http://127.0.0.1:1/mcp\"\n[header_files]\nAuthorization = {:?}\n",
            missing.display().to_string()
        ));
        let e = SecretHeaders::load(&spec, "server").unwrap_err();
        assert_eq!(e.key, "server.header_files.Authorization");
    }
}
