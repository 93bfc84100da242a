//! The metrics catalogue (`docs/metrics.md`) against what the binaries
//! really export.
//!
//! - The end-to-end test starts `switchyard up` with the quickstart's three
//!   servers (reference server over stdio in the 2026-07-28 era,
//!   server-everything over stdio, reference server over Streamable HTTP in
//!   the 2025-11-25 era), drives real traffic through the engine API
//!   (tool lists, successful calls, `isError` results, a call with bad
//!   arguments, unknown tools, an approval that is denied), then scrapes
//!   `/metrics` over HTTP on the control plane and on each of the three
//!   sidecars, parses the Prometheus text format and checks every family
//!   against the catalogue: same binary, same type, exactly the catalogued
//!   label names; every row that must be there after this traffic is there;
//!   label values are bounded (configured servers, catalogued tools, the
//!   values a row lists) and never carry a session id, run id, call id or
//!   any text of the arguments (a distinctive string is passed as argument
//!   and must appear nowhere in `/metrics`).
//! - A source test: every `"switchyard_..."` metric name in
//!   `control-plane/src` and `sidecar/src` has a row under its binary, and
//!   every row still names a metric of the code.
//! - The catalogue's own rules: a parseable table per binary, Prometheus
//!   naming (`_total` counters, `_seconds` durations, `_bytes` sizes), no
//!   label named like an id or the arguments.
//! - Unit tests of the two parsers (the catalogue table and the text
//!   format, the latter also against the `prometheus` crate's own encoder).

use crate::common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use switchyard_proto::v1 as pb;

// ---- the catalogue ---------------------------------------------------------------

/// The binary a catalogue table belongs to (its `##` heading).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Binary {
    Sidecar,
    ControlPlane,
}

/// A metric type, as in `# TYPE` lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

impl Kind {
    fn parse(s: &str) -> Option<Kind> {
        Some(match s {
            "counter" => Kind::Counter,
            "gauge" => Kind::Gauge,
            "histogram" => Kind::Histogram,
            "summary" => Kind::Summary,
            "untyped" => Kind::Untyped,
            _ => return None,
        })
    }
}

/// When a row's metric must be in a scrape (the `present` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presence {
    /// From the first scrape once the binary is up.
    Always,
    /// Once the binary has handled a `tools/call`.
    Call,
    /// Only after the event the row's meaning names.
    Event,
}

/// One catalogue row.
#[derive(Debug, Clone)]
struct Row {
    binary: Binary,
    name: String,
    kind: Kind,
    labels: BTreeSet<String>,
    unit: String,
    present: Presence,
    meaning: String,
    line: usize,
}

/// The header every catalogue table has, column by column.
const HEADER: [&str; 6] = ["name", "type", "labels", "unit", "present", "meaning"];

/// Label names that would carry per-request or per-session values.
const FORBIDDEN_LABELS: [&str; 10] = [
    "id",
    "session",
    "session_id",
    "run",
    "run_id",
    "call_id",
    "request_id",
    "arguments",
    "args",
    "argument",
];

/// Name segments of units Prometheus says not to use (base units only).
const NON_BASE_UNITS: [&str; 12] = [
    "ms",
    "millis",
    "milliseconds",
    "us",
    "microseconds",
    "ns",
    "nanoseconds",
    "minutes",
    "hours",
    "kb",
    "mb",
    "kilobytes",
];

/// The cells of a Markdown table line (`| a | b |`), `\|` kept as `|`.
fn cells(line: &str) -> Option<Vec<String>> {
    let line = line.trim();
    let inner = line.strip_prefix('|')?.strip_suffix('|')?;
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    Some(out.into_iter().map(|c| c.trim().to_owned()).collect())
}

fn is_separator(cells: &[String]) -> bool {
    cells.iter().all(|c| {
        let c = c.trim_matches(':');
        !c.is_empty() && c.chars().all(|ch| ch == '-')
    })
}

fn valid_metric_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with("__")
}

/// `` `x` `` -> `x`.
fn backticked(cell: &str) -> Option<&str> {
    let inner = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!inner.is_empty() && !inner.contains('`')).then_some(inner)
}

/// Every `` `token` `` in `text`.
fn backticked_tokens(text: &str) -> BTreeSet<String> {
    text.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, t)| t.to_owned())
        .collect()
}

/// Parses every catalogue table of `md`. A table is one whose header is
/// [`HEADER`]; it belongs to the binary its `##` section heading starts
/// with. Errors: a malformed row, a table outside a binary's section, a
/// duplicate name; with the line number.
fn parse_catalogue(md: &str) -> Result<Vec<Row>, String> {
    let mut rows: Vec<Row> = Vec::new();
    let mut binary: Option<Binary> = None;
    let mut in_table = false;
    for (i, line) in md.lines().enumerate() {
        let n = i + 1;
        if let Some(heading) = line.strip_prefix("## ") {
            let heading = heading.trim();
            binary = if heading.starts_with("Sidecar") {
                Some(Binary::Sidecar)
            } else if heading.starts_with("Control plane") {
                Some(Binary::ControlPlane)
            } else {
                None
            };
            in_table = false;
            continue;
        }
        let Some(cells) = cells(line) else {
            in_table = false;
            continue;
        };
        if cells.iter().map(String::as_str).eq(HEADER) {
            if binary.is_none() {
                return Err(format!(
                    "line {n}: a catalogue table outside a `## Sidecar...` or `## Control plane...` section"
                ));
            }
            in_table = true;
            continue;
        }
        if !in_table || is_separator(&cells) {
            continue;
        }
        let row = parse_row(binary.expect("in a section"), &cells, n)?;
        if let Some(dup) = rows.iter().find(|r| r.name == row.name) {
            return Err(format!(
                "line {n}: {} is catalogued twice (also line {})",
                row.name, dup.line
            ));
        }
        rows.push(row);
    }
    Ok(rows)
}

fn parse_row(binary: Binary, cells: &[String], n: usize) -> Result<Row, String> {
    let [name, kind, labels, unit, present, meaning] = cells else {
        return Err(format!(
            "line {n}: {} cells, want {} ({})",
            cells.len(),
            HEADER.len(),
            HEADER.join(" | ")
        ));
    };
    let name = backticked(name)
        .filter(|s| valid_metric_name(s))
        .ok_or_else(|| format!("line {n}: name {name:?} is not a metric name in backticks"))?;
    let kind = match kind.as_str() {
        "counter" | "gauge" | "histogram" | "summary" => Kind::parse(kind).unwrap(),
        other => {
            return Err(format!(
                "line {n}: type {other:?} is not counter, gauge, histogram or summary"
            ));
        }
    };
    let labels = if labels == "none" {
        BTreeSet::new()
    } else {
        let mut set = BTreeSet::new();
        for l in labels.split(',') {
            let l = backticked(l.trim())
                .filter(|s| valid_label_name(s))
                .ok_or_else(|| {
                    format!("line {n}: label {l:?} is not a label name in backticks (or `none`)")
                })?;
            if !set.insert(l.to_owned()) {
                return Err(format!("line {n}: label {l} listed twice"));
            }
        }
        set
    };
    let present = match present.as_str() {
        "always" => Presence::Always,
        "call" => Presence::Call,
        "event" => Presence::Event,
        other => {
            return Err(format!(
                "line {n}: present {other:?} is not always, call or event"
            ));
        }
    };
    if unit.is_empty() || meaning.is_empty() {
        return Err(format!("line {n}: empty unit or meaning"));
    }
    Ok(Row {
        binary,
        name: name.to_owned(),
        kind,
        labels,
        unit: unit.clone(),
        present,
        meaning: meaning.clone(),
        line: n,
    })
}

/// The naming and cardinality rules a row breaks (empty: none).
fn rule_violations(row: &Row) -> Vec<String> {
    let mut out = Vec::new();
    let name = row.name.as_str();
    let what = |s: String| format!("{name} (docs/metrics.md line {}): {s}", row.line);
    if row.kind == Kind::Counter && !name.ends_with("_total") {
        out.push(what("a counter's name must end in _total".into()));
    }
    if row.kind != Kind::Counter && name.ends_with("_total") {
        out.push(what("only counters end in _total".into()));
    }
    let stem = name.strip_suffix("_total").unwrap_or(name);
    if (row.unit == "seconds") != stem.ends_with("_seconds") {
        out.push(what(format!(
            "unit {:?}: a duration is in seconds and its name ends in _seconds (or _seconds_total), and only then",
            row.unit
        )));
    }
    if (row.unit == "bytes") != name.contains("_bytes") {
        out.push(what(format!(
            "unit {:?}: a size is in bytes and its name says _bytes, and only then",
            row.unit
        )));
    }
    for seg in name.split('_') {
        if NON_BASE_UNITS.contains(&seg) {
            out.push(what(format!(
                "`{seg}` is not a base unit (use seconds or bytes)"
            )));
        }
    }
    for label in &row.labels {
        if FORBIDDEN_LABELS.contains(&label.as_str()) || label.ends_with("_id") {
            out.push(what(format!(
                "label `{label}` would carry unbounded per-request values"
            )));
        }
        if (row.kind == Kind::Histogram && label == "le")
            || (row.kind == Kind::Summary && label == "quantile")
        {
            out.push(what(format!("`{label}` is implied, do not list it")));
        }
        if label != "server" && label != "tool" && !row.meaning.contains(&format!("`{label}`")) {
            out.push(what(format!(
                "the meaning must list the values of `{label}`, in backticks"
            )));
        }
    }
    out
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn load_catalogue() -> Vec<Row> {
    let path = workspace_root().join("docs/metrics.md");
    let md =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    parse_catalogue(&md).unwrap_or_else(|e| panic!("docs/metrics.md: {e}"))
}

// ---- the Prometheus text format --------------------------------------------------------

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    /// The series name as written (`x_bucket` for a histogram `x`).
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A metric family: its `# TYPE` (untyped without one) and its samples.
#[derive(Debug, Clone)]
struct Family {
    kind: Kind,
    samples: Vec<Sample>,
}

/// Parses the Prometheus text exposition format (version 0.0.4): `# HELP`
/// and `# TYPE` lines, other comments, sample lines with optional labels
/// (escapes `\\`, `\"`, `\n`) and an optional timestamp. Samples of a
/// histogram (`_bucket`, `_sum`, `_count`) or summary (`_sum`, `_count`)
/// belong to its base name. Errors: any line that is none of these, with
/// its line number.
fn parse_exposition(text: &str) -> Result<BTreeMap<String, Family>, String> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let err = |e: &str| format!("line {n}: {e}: {line:?}");
        let line_t = line.trim();
        if line_t.is_empty() {
            continue;
        }
        if let Some(comment) = line_t.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            match words.next() {
                Some("TYPE") => {
                    let name = words.next().ok_or_else(|| err("TYPE without a name"))?;
                    let kind = words
                        .next()
                        .and_then(Kind::parse)
                        .ok_or_else(|| err("TYPE without a known type"))?;
                    if words.next().is_some() || !valid_metric_name(name) {
                        return Err(err("malformed TYPE"));
                    }
                    if families.contains_key(name) {
                        return Err(err("TYPE after the family's samples, or twice"));
                    }
                    families.insert(
                        name.to_owned(),
                        Family {
                            kind,
                            samples: Vec::new(),
                        },
                    );
                }
                Some("HELP") => {
                    let name = words.next().ok_or_else(|| err("HELP without a name"))?;
                    if !valid_metric_name(name) {
                        return Err(err("malformed HELP"));
                    }
                }
                _ => {} // a plain comment
            }
            continue;
        }
        let sample = parse_sample(line_t).map_err(|e| err(&e))?;
        let family = family_of(&families, &sample.name);
        let entry = families.entry(family.clone()).or_insert(Family {
            kind: Kind::Untyped,
            samples: Vec::new(),
        });
        let is_bucket = entry.kind == Kind::Histogram && sample.name == format!("{family}_bucket");
        if is_bucket != sample.labels.contains_key("le") {
            return Err(err("`le` belongs on a histogram's buckets, and only there"));
        }
        entry.samples.push(sample);
    }
    Ok(families)
}

/// The family a series belongs to: itself when typed, else the typed
/// histogram or summary it is a `_bucket`/`_sum`/`_count` of, else itself.
fn family_of(families: &BTreeMap<String, Family>, series: &str) -> String {
    if families.contains_key(series) {
        return series.to_owned();
    }
    for (suffix, kinds) in [
        ("_bucket", &[Kind::Histogram][..]),
        ("_sum", &[Kind::Histogram, Kind::Summary][..]),
        ("_count", &[Kind::Histogram, Kind::Summary][..]),
    ] {
        if let Some(base) = series.strip_suffix(suffix)
            && families.get(base).is_some_and(|f| kinds.contains(&f.kind))
        {
            return base.to_owned();
        }
    }
    series.to_owned()
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = &line[..end];
    if !valid_metric_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        let consumed = loop {
            while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
            match chars.peek() {
                Some((i, '}')) => break i + 1,
                None => return Err("unterminated label set".into()),
                _ => {}
            }
            let mut label = String::new();
            while let Some((_, c)) = chars.next_if(|(_, c)| c.is_ascii_alphanumeric() || *c == '_')
            {
                label.push(c);
            }
            if !valid_label_name(&label) {
                return Err(format!("bad label name {label:?}"));
            }
            if chars.next().map(|(_, c)| c) != Some('=')
                || chars.next().map(|(_, c)| c) != Some('"')
            {
                return Err(format!("label {label}: want =\"value\""));
            }
            let mut value = String::new();
            loop {
                match chars.next() {
                    None => return Err(format!("label {label}: unterminated value")),
                    Some((_, '"')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, '\\')) => value.push('\\'),
                        Some((_, '"')) => value.push('"'),
                        Some((_, 'n')) => value.push('\n'),
                        other => {
                            return Err(format!("label {label}: bad escape {other:?}"));
                        }
                    },
                    Some((_, c)) => value.push(c),
                }
            }
            if labels.insert(label.clone(), value).is_some() {
                return Err(format!("label {label} twice"));
            }
            while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
            match chars.next() {
                Some((_, ',')) => {}
                Some((i, '}')) => break i + 1,
                _ => return Err(format!("after label {label}: want , or }}")),
            }
        };
        rest = &after[consumed..];
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    if let Some(ts) = fields.next() {
        ts.parse::<i64>()
            .map_err(|_| format!("bad timestamp {ts:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing text after the value and timestamp".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

// ---- checking a scrape against the catalogue ---------------------------------------------

/// What a scrape is checked against, besides the catalogue.
struct Expect<'a> {
    binary: Binary,
    /// Where it was scraped from, for messages.
    source: String,
    /// Allowed `server` values: the configured servers (the control plane)
    /// or the sidecar's own server.
    servers: BTreeSet<String>,
    /// Allowed `tool` values per server: the server's catalogue.
    tools: &'a BTreeMap<String, BTreeSet<String>>,
    /// Strings that must appear nowhere in `/metrics`: ids and argument text.
    secrets: &'a [String],
}

/// Every disagreement between one scrape and the catalogue (empty: none).
fn check_scrape(
    body: &str,
    families: &BTreeMap<String, Family>,
    catalogue: &[Row],
    expect: &Expect,
) -> Vec<String> {
    let src = &expect.source;
    let mut out = Vec::new();
    for secret in expect.secrets {
        if body.contains(secret.as_str()) {
            out.push(format!(
                "{src}: /metrics contains {secret:?}, an id or argument text of this test's calls"
            ));
        }
    }
    for (name, family) in families {
        let Some(row) = catalogue.iter().find(|r| &r.name == name) else {
            out.push(format!(
                "{src}: {name} ({:?}) is exported but has no row in docs/metrics.md",
                family.kind
            ));
            continue;
        };
        out.extend(
            rule_violations(row)
                .into_iter()
                .map(|v| format!("{src}: {v}")),
        );
        if row.binary != expect.binary {
            out.push(format!(
                "{src}: {name} is catalogued for the {:?} but exported by the {:?}",
                row.binary, expect.binary
            ));
        }
        if row.kind != family.kind {
            out.push(format!(
                "{src}: {name} is a {:?}, catalogued as a {:?}",
                family.kind, row.kind
            ));
        }
        for sample in &family.samples {
            let names: BTreeSet<String> = sample
                .labels
                .keys()
                .filter(|l| {
                    !((family.kind == Kind::Histogram && *l == "le")
                        || (family.kind == Kind::Summary && *l == "quantile"))
                })
                .cloned()
                .collect();
            if names != row.labels {
                out.push(format!(
                    "{src}: {} has labels {names:?}, catalogued {:?}",
                    sample.name, row.labels
                ));
            }
            let listed = backticked_tokens(&row.meaning);
            for (label, value) in &sample.labels {
                let problem = if expect.secrets.iter().any(|s| value.contains(s.as_str())) {
                    Some("carries an id or argument text of this test".to_owned())
                } else if value.len() == 32 && value.chars().all(|c| c.is_ascii_hexdigit()) {
                    Some("looks like a session id".to_owned())
                } else {
                    match label.as_str() {
                        "le" | "quantile" => None,
                        "server" if !expect.servers.contains(value) => {
                            Some(format!("is not one of {:?}", expect.servers))
                        }
                        "tool" => {
                            let server = sample.labels.get("server").map_or("", String::as_str);
                            let known = expect.tools.get(server);
                            (!known.is_some_and(|t| t.contains(value)))
                                .then(|| format!("is not a tool in the catalogue of {server:?}"))
                        }
                        "server" => None,
                        _ if !listed.contains(value) => {
                            Some(format!("is not among the values its row lists: {listed:?}"))
                        }
                        _ => None,
                    }
                };
                if let Some(p) = problem {
                    out.push(format!(
                        "{src}: {}{{{label}={value:?}}}: the value {p}",
                        sample.name
                    ));
                }
            }
        }
    }
    // One message per problem, not per sample.
    let mut seen = BTreeSet::new();
    out.retain(|p| seen.insert(p.clone()));
    for row in catalogue.iter().filter(|r| r.binary == expect.binary) {
        let must = matches!(row.present, Presence::Always | Presence::Call);
        let seen = families
            .get(&row.name)
            .is_some_and(|f| !f.samples.is_empty());
        if must && !seen {
            out.push(format!(
                "{src}: {} (present: {:?}) is missing after the test's calls",
                row.name, row.present
            ));
        }
    }
    out
}

/// The value of the sample of `family`'s series `series` with exactly
/// these labels (besides none).
fn value(
    families: &BTreeMap<String, Family>,
    family: &str,
    series: &str,
    labels: &[(&str, &str)],
) -> Option<f64> {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    families
        .get(family)?
        .samples
        .iter()
        .find(|s| s.name == series && s.labels == want)
        .map(|s| s.value)
}

/// `(server, http address)` of every sidecar `up` started, from their
/// start-up lines (`switchyard-sidecar: server NAME, calls on ADDR, http on
/// ADDR`) in `up`'s log; the latest line per server wins.
fn sidecar_http_addrs(log: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in log.lines() {
        let Some(rest) = line
            .split_once("switchyard-sidecar: server ")
            .map(|(_, r)| r)
        else {
            continue;
        };
        let Some((server, rest)) = rest.split_once(", calls on ") else {
            continue;
        };
        let Some((_, http)) = rest.split_once(", http on ") else {
            continue;
        };
        out.insert(server.to_owned(), http.trim().to_owned());
    }
    out
}

// ---- tests ---------------------------------------------------------------------------

/// Appears in arguments only: never in any metric.
const CANARY: &str = "canary7q3zx";

fn call(tool: &str, args: &str, session: &str, n: usize) -> pb::CallToolRequest {
    pb::CallToolRequest {
        run_id: format!("run-{CANARY}-{n}"),
        call_id: format!("call-{CANARY}-{n}"),
        ..call_request(tool, args, session)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraped_metrics_match_the_catalogue_after_real_traffic() {
    let _heavy = HEAVY.lock().await;
    let catalogue = load_catalogue();
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let mut engine = gw.engine().await;

    // ---- the tool lists: the allowed `tool` values
    let listed = engine
        .list_tools(pb::ListToolsRequest::default())
        .await
        .expect("ListTools")
        .into_inner()
        .tools;
    let mut tools: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for t in &listed {
        tools
            .entry(t.server.clone())
            .or_default()
            .insert(t.upstream_name.clone());
    }
    for server in SERVERS {
        assert!(tools.contains_key(server), "{server}: no tools: {tools:?}");
    }

    // ---- sessions: one that may call everything, one that must ask
    let session = |servers: &[&str], mode: pb::PermissionMode| {
        let mut engine = engine.clone();
        let servers: Vec<String> = servers.iter().map(|s| s.to_string()).collect();
        async move {
            engine
                .create_session(pb::CreateSessionRequest {
                    enabled_servers: servers,
                    permission_mode: mode as i32,
                    ..Default::default()
                })
                .await
                .expect("CreateSession")
                .into_inner()
                .id
        }
    };
    let auto = session(&SERVERS, pb::PermissionMode::Auto).await;
    let ask = session(&["orders"], pb::PermissionMode::Ask).await;
    let mut n = 0;
    let mut next = || {
        n += 1;
        n
    };

    // ---- successful calls, on every server, with the canary in the arguments
    let echo = engine
        .call_tool(call(
            "everything__echo",
            &format!(r#"{{"message":"{CANARY}"}}"#),
            &auto,
            next(),
        ))
        .await
        .expect("everything__echo")
        .into_inner();
    assert_eq!(echo.text, format!("Echo: {CANARY}"), "{echo:?}");
    for args in [r#"{"a":2,"b":40}"#, r#"{"a":1,"b":1}"#] {
        let sum = engine
            .call_tool(call("everything__get-sum", args, &auto, next()))
            .await
            .expect("everything__get-sum")
            .into_inner();
        assert!(!sum.is_error, "{sum:?}");
    }
    for tool in ["orders__get_order", "orders-http__get_order"] {
        for session in [auto.as_str(), ""] {
            let r = engine
                .call_tool(call(tool, r#"{"order_id":"O-1001"}"#, session, next()))
                .await
                .unwrap_or_else(|e| panic!("{tool}: {e:?}"))
                .into_inner();
            assert!(!r.is_error, "{tool}: {r:?}");
        }
        // ---- a tool's own failure (isError), naming the canary
        let r = engine
            .call_tool(call(
                tool,
                &format!(r#"{{"order_id":"O-{CANARY}"}}"#),
                &auto,
                next(),
            ))
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e:?}"))
            .into_inner();
        assert!(r.is_error, "{tool}: {r:?}");
    }
    // ---- bad arguments: an isError result or a JSON-RPC error, either way counted
    let bad = engine
        .call_tool(call(
            "everything__get-sum",
            &format!(r#"{{"a":"{CANARY}"}}"#),
            &auto,
            next(),
        ))
        .await;
    assert!(
        bad.as_ref().map_or(true, |r| r.get_ref().is_error),
        "{bad:?}"
    );
    // ---- unknown tools and servers: NOT_FOUND, never a label
    for tool in [
        format!("orders__{CANARY}"),
        format!("{CANARY}__get_order"),
        CANARY.to_owned(),
    ] {
        let status = engine
            .call_tool(call(&tool, "{}", &auto, next()))
            .await
            .expect_err("an unknown tool");
        assert_eq!(status.code(), tonic::Code::NotFound, "{tool}: {status:?}");
    }

    // ---- an approval, denied: the server is not called
    let mut events = engine
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: ask.clone(),
            ..Default::default()
        })
        .await
        .expect("SubscribeEvents")
        .into_inner();
    let request = call(
        "orders__create_order",
        &format!(r#"{{"customer_id":"C-{CANARY}","items":[{{"sku":"CABLE","quantity":1}}]}}"#),
        &ask,
        next(),
    );
    let pending = tokio::spawn({
        let mut engine = engine.clone();
        async move { engine.call_tool(request).await }
    });
    let card = tokio::time::timeout(LIMIT, async {
        loop {
            let ev = events.message().await.expect("events").expect("open");
            if ev.r#type == "interaction.required" {
                let card: serde_json::Value = serde_json::from_str(&ev.data_json).expect("JSON");
                if card["kind"] == "approval" {
                    return card;
                }
            }
        }
    })
    .await
    .expect("an approval card in time");
    let id = card["id"].as_str().expect("card id").to_owned();
    ok_stdout(
        &gw.cli(&["answer", "--session", &ask, &id, "--deny"]).await,
        "answer --deny",
    );
    let denied = tokio::time::timeout(LIMIT, pending)
        .await
        .expect("the denied call ends")
        .expect("task")
        .expect("a denial is a result, not a gRPC error")
        .into_inner();
    assert!(denied.is_error, "{denied:?}");

    // ---- what must never appear in /metrics
    let mut secrets = vec![CANARY.to_owned(), auto.clone(), ask.clone(), id.clone()];
    for i in 1..=n {
        secrets.push(format!("run-{CANARY}-{i}"));
        secrets.push(format!("call-{CANARY}-{i}"));
    }

    // ---- the control plane
    let mut problems = Vec::new();
    let (code, body) = http_get(&gw.http_addr, "/metrics").await;
    assert_eq!(code, 200, "{body}");
    eprintln!("--- control plane /metrics ---\n{body}");
    let cp = parse_exposition(&body).unwrap_or_else(|e| panic!("control plane /metrics: {e}"));
    problems.extend(check_scrape(
        &body,
        &cp,
        &catalogue,
        &Expect {
            binary: Binary::ControlPlane,
            source: "control plane".into(),
            servers: SERVERS.iter().map(|s| s.to_string()).collect(),
            tools: &tools,
            secrets: &secrets,
        },
    ));
    // The events this test caused are counted, under bounded labels.
    let calls = "switchyard_control_plane_calls_total";
    for (server, outcome, at_least) in [
        ("everything", "ok", 3.0),
        ("orders", "ok", 2.0),
        ("orders-http", "ok", 2.0),
        ("orders", "tool_error", 1.0),
        ("orders-http", "tool_error", 1.0),
        ("orders", "not_approved", 1.0),
    ] {
        let v = value(
            &cp,
            calls,
            calls,
            &[("outcome", outcome), ("server", server)],
        );
        if !v.is_some_and(|v| v >= at_least) {
            problems.push(format!(
                "control plane: {calls}{{server={server:?},outcome={outcome:?}}} = {v:?}, want >= {at_least}"
            ));
        }
    }
    let interactions = "switchyard_control_plane_interactions_total";
    let denials = value(
        &cp,
        interactions,
        interactions,
        &[("kind", "approval"), ("outcome", "deny")],
    );
    if denials != Some(1.0) {
        problems.push(format!(
            "control plane: {interactions}{{kind=\"approval\",outcome=\"deny\"}} = {denials:?}, want 1"
        ));
    }
    let sessions = value(
        &cp,
        "switchyard_control_plane_sessions",
        "switchyard_control_plane_sessions",
        &[],
    );
    if sessions != Some(2.0) {
        problems.push(format!("control plane: sessions = {sessions:?}, want 2"));
    }

    // ---- every sidecar
    let addrs = sidecar_http_addrs(&gw.log());
    for server in SERVERS {
        let Some(addr) = addrs.get(server) else {
            problems.push(format!(
                "no start-up line of {server}'s sidecar in up's log: {addrs:?}"
            ));
            continue;
        };
        let (code, body) = http_get(addr, "/metrics").await;
        assert_eq!(code, 200, "{server}'s sidecar: {body}");
        let source = format!("sidecar of {server} ({addr})");
        eprintln!("--- {source} /metrics ---\n{body}");
        let families = parse_exposition(&body).unwrap_or_else(|e| panic!("{source} /metrics: {e}"));
        problems.extend(check_scrape(
            &body,
            &families,
            &catalogue,
            &Expect {
                binary: Binary::Sidecar,
                source: source.clone(),
                servers: BTreeSet::from([server.to_owned()]),
                tools: &tools,
                secrets: &secrets,
            },
        ));
        // server-everything announces a tool list change as it starts.
        if server == "everything" {
            let heard = "switchyard_sidecar_list_changed_received_total";
            let v = value(&families, heard, heard, &[("server", server)]);
            if !v.is_some_and(|v| v >= 1.0) {
                problems.push(format!("{source}: {heard} = {v:?}, want >= 1"));
            }
        }
        let upstream = "switchyard_sidecar_upstream_calls_total";
        let tool = if server == "everything" {
            "echo"
        } else {
            "get_order"
        };
        let ok = value(
            &families,
            upstream,
            upstream,
            &[("outcome", "ok"), ("server", server), ("tool", tool)],
        );
        if !ok.is_some_and(|v| v >= 1.0) {
            problems.push(format!(
                "{source}: {upstream}{{tool={tool:?},outcome=\"ok\"}} = {ok:?}, want >= 1"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "/metrics disagrees with docs/metrics.md:\n  {}",
        problems.join("\n  ")
    );
    gw.stop().await;
}

/// Every `"switchyard_..."` string literal in the `.rs` files under `dir`:
/// `(name, file:line)`.
fn metric_literals(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read source");
            for (i, line) in text.lines().enumerate() {
                for (j, _) in line.match_indices("\"switchyard_") {
                    let rest = &line[j + 1..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    if rest[end..].starts_with('"') {
                        out.push((
                            rest[..end].to_owned(),
                            format!("{}:{}", path.display(), i + 1),
                        ));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn every_metric_name_in_the_source_is_catalogued_under_its_binary() {
    let catalogue = load_catalogue();
    let root = workspace_root();
    let mut problems = Vec::new();
    for (binary, dir) in [
        (Binary::ControlPlane, root.join("control-plane/src")),
        (Binary::Sidecar, root.join("sidecar/src")),
    ] {
        let found = metric_literals(&dir);
        for (name, at) in &found {
            match catalogue.iter().find(|r| &r.name == name) {
                None => problems.push(format!("{name} ({at}) has no row in docs/metrics.md")),
                Some(r) if r.binary != binary => problems.push(format!(
                    "{name} ({at}) is catalogued under the {:?}, defined in the {binary:?}",
                    r.binary
                )),
                Some(_) => {}
            }
        }
        for row in catalogue.iter().filter(|r| r.binary == binary) {
            if !found.iter().any(|(n, _)| n == &row.name) {
                problems.push(format!(
                    "docs/metrics.md line {}: {} is not defined in {} (stale row?)",
                    row.line,
                    row.name,
                    dir.display()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_catalogue_follows_the_naming_and_cardinality_rules() {
    let catalogue = load_catalogue();
    for binary in [Binary::Sidecar, Binary::ControlPlane] {
        assert!(
            catalogue.iter().any(|r| r.binary == binary),
            "no rows for the {binary:?}"
        );
    }
    let problems: Vec<String> = catalogue.iter().flat_map(rule_violations).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_catalogue_parser_reads_rows_and_refuses_malformed_ones() {
    let md = "\
# Metrics
| column | content |
|---|---|
| name | not a catalogue table |

## Sidecar: upstream

| name | type | labels | unit | present | meaning |
|---|---|---|---|---|---|
| `a_calls_total` | counter | `server`, `outcome` | calls | call | `outcome` is `ok` or `x\\|y`. |
| `a_seconds` | histogram | none | seconds | always | Latency. |

Text between tables.

## Control plane

| name | type | labels | unit | present | meaning |
|---|---|---|---|---|---|
| `b_up` | gauge | `server` | sidecars | event | Up. |
";
    let rows = parse_catalogue(md).expect("parses");
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!(rows[0].binary, Binary::Sidecar);
    assert_eq!(rows[0].name, "a_calls_total");
    assert_eq!(rows[0].kind, Kind::Counter);
    assert_eq!(
        rows[0].labels,
        BTreeSet::from(["outcome".to_owned(), "server".to_owned()])
    );
    assert_eq!(rows[0].present, Presence::Call);
    assert!(backticked_tokens(&rows[0].meaning).contains("x|y"));
    assert_eq!(rows[0].line, 10);
    assert_eq!(
        (rows[1].kind, rows[1].labels.len(), rows[1].unit.as_str()),
        (Kind::Histogram, 0, "seconds")
    );
    assert_eq!(
        (rows[2].binary, rows[2].present),
        (Binary::ControlPlane, Presence::Event)
    );
    assert!(rule_violations(&rows[0]).is_empty());
    assert!(rule_violations(&rows[1]).is_empty());

    let table = |row: &str| {
        format!(
            "## Sidecar\n| name | type | labels | unit | present | meaning |\n|---|---|---|---|---|---|\n{row}\n"
        )
    };
    for bad in [
        "| a_total | counter | none | calls | call | no backticks |",
        "| `a_total` | count | none | calls | call | bad type |",
        "| `a_total` | counter | server | calls | call | label without backticks |",
        "| `a_total` | counter | none | calls | sometimes | bad presence |",
        "| `a_total` | counter | none | calls | call |",
        "| `a_total` | counter | none |  | call | no unit |",
        "| `a-b_total` | counter | none | calls | call | bad name |",
    ] {
        assert!(parse_catalogue(&table(bad)).is_err(), "accepted {bad}");
    }
    let twice = format!(
        "{}| `a_total` | counter | none | calls | call | again |\n",
        table("| `a_total` | counter | none | calls | call | once |")
    );
    assert!(parse_catalogue(&twice).unwrap_err().contains("twice"));
    let outside = "## Other\n| name | type | labels | unit | present | meaning |\n|---|---|---|---|---|---|\n";
    assert!(parse_catalogue(outside).is_err());

    // The rules catch what they are for.
    let row = |name: &str, kind: &str, labels: &str, unit: &str| {
        parse_catalogue(&table(&format!(
            "| `{name}` | {kind} | {labels} | {unit} | call | `outcome` is `ok`. |"
        )))
        .expect("parses")
        .remove(0)
    };
    for (name, kind, labels, unit) in [
        ("a_calls", "counter", "none", "calls"),
        ("a_total", "gauge", "none", "calls"),
        ("a_duration_seconds", "histogram", "none", "milliseconds"),
        ("a_duration_ms", "histogram", "none", "seconds"),
        ("a_duration", "histogram", "none", "seconds"),
        ("a_size", "gauge", "none", "bytes"),
        ("a_calls_total", "counter", "`session_id`", "calls"),
        ("a_calls_total", "counter", "`run`", "calls"),
        ("a_calls_total", "counter", "`arguments`", "calls"),
        ("a_calls_total", "counter", "`task_id`", "calls"),
        ("a_seconds", "histogram", "`le`", "seconds"),
        ("a_calls_total", "counter", "`reason`", "calls"),
    ] {
        assert!(
            !rule_violations(&row(name, kind, labels, unit)).is_empty(),
            "no violation for {name} {kind} {labels} {unit}"
        );
    }
    assert!(
        rule_violations(&row("a_sent_bytes_total", "counter", "`outcome`", "bytes")).is_empty()
    );
}

#[test]
fn the_exposition_parser_reads_the_text_format() {
    let text = r#"# HELP x_calls_total Calls, "quoted" \ and more.
# TYPE x_calls_total counter
x_calls_total{server="a",outcome="ok"} 3
x_calls_total{server="b\"q\\z\nw",outcome="rpc_error",} 1.5e3 1700000000000
# a plain comment
# TYPE x_latency_seconds histogram
x_latency_seconds_bucket{server="a",le="0.1"} 1
x_latency_seconds_bucket{server="a",le="+Inf"} 2
x_latency_seconds_sum{server="a"} 0.35
x_latency_seconds_count{server="a"} 2
# TYPE x_sessions gauge
x_sessions 7
x_loose_count{a="1"} NaN
"#;
    let f = parse_exposition(text).expect("parses");
    assert_eq!(
        f.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "x_calls_total",
            "x_latency_seconds",
            "x_loose_count",
            "x_sessions"
        ]
    );
    let calls = &f["x_calls_total"];
    assert_eq!(calls.kind, Kind::Counter);
    assert_eq!(calls.samples.len(), 2);
    assert_eq!(calls.samples[1].labels["server"], "b\"q\\z\nw");
    assert_eq!(calls.samples[1].value, 1500.0);
    let h = &f["x_latency_seconds"];
    assert_eq!(h.kind, Kind::Histogram);
    assert_eq!(h.samples.len(), 4);
    assert_eq!(
        (h.samples[1].labels["le"].as_str(), h.samples[1].value),
        ("+Inf", 2.0)
    );
    assert_eq!(
        value(
            &f,
            "x_latency_seconds",
            "x_latency_seconds_count",
            &[("server", "a")]
        ),
        Some(2.0)
    );
    assert_eq!(f["x_sessions"].kind, Kind::Gauge);
    assert_eq!(value(&f, "x_sessions", "x_sessions", &[]), Some(7.0));
    // `_count` without a typed base family is a family of its own.
    assert_eq!(f["x_loose_count"].kind, Kind::Untyped);
    assert!(f["x_loose_count"].samples[0].value.is_nan());

    for bad in [
        "x{a=\"1} 1",
        "x{a=1} 1",
        "x{a=\"1\",a=\"2\"} 1",
        "x{a=\"\\t\"} 1",
        "x",
        "x one",
        "x 1 2 3",
        "x 1 later",
        "9x 1",
        "# TYPE x countr",
        "# TYPE x counter\n# TYPE x counter",
        "x 1\n# TYPE x counter",
        "# TYPE h histogram\nh_bucket 1",
        "# TYPE h histogram\nh_sum{le=\"1\"} 1",
    ] {
        assert!(parse_exposition(bad).is_err(), "accepted {bad:?}");
    }
}

/// The parser reads what the `prometheus` crate, which both binaries use,
/// writes: label values with quotes, backslashes and newlines, histograms.
#[test]
fn the_exposition_parser_reads_the_prometheus_crates_encoder() {
    use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry};
    let registry = Registry::new();
    let c = IntCounterVec::new(Opts::new("t_calls_total", "Calls."), &["server", "tool"]).unwrap();
    let h = HistogramVec::new(
        HistogramOpts::new("t_seconds", "Latency.").buckets(vec![0.1, 1.0]),
        &["server"],
    )
    .unwrap();
    let g = IntGauge::new("t_sessions", "Sessions.").unwrap();
    let empty = IntCounterVec::new(Opts::new("t_never_total", "Never."), &["server"]).unwrap();
    registry.register(Box::new(c.clone())).unwrap();
    registry.register(Box::new(h.clone())).unwrap();
    registry.register(Box::new(g.clone())).unwrap();
    registry.register(Box::new(empty)).unwrap();
    let tricky = "a \"b\" \\c\nd";
    c.with_label_values(&["s", tricky]).inc_by(4);
    h.with_label_values(&["s"]).observe(0.5);
    g.set(3);
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    let f = parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(
        value(
            &f,
            "t_calls_total",
            "t_calls_total",
            &[("server", "s"), ("tool", tricky)]
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(f["t_seconds"].kind, Kind::Histogram);
    assert_eq!(
        value(
            &f,
            "t_seconds",
            "t_seconds_bucket",
            &[("le", "1"), ("server", "s")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &f,
            "t_seconds",
            "t_seconds_bucket",
            &[("le", "0.1"), ("server", "s")]
        ),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        value(&f, "t_seconds", "t_seconds_sum", &[("server", "s")]),
        Some(0.5)
    );
    assert_eq!(value(&f, "t_sessions", "t_sessions", &[]), Some(3.0));
    // A labelled family with no series is not exported at all: the reason
    // `event` rows may be absent.
    assert!(!f.contains_key("t_never_total"), "{text}");
}

#[test]
fn sidecar_addresses_come_from_their_start_up_lines() {
    let log = "\
2026-11-30T08:00:00Z INFO sidecar started server=orders
switchyard-sidecar: server orders, calls on 127.0.0.1:1001, http on 127.0.0.1:1002
switchyard-sidecar: server orders-http, calls on 127.0.0.1:2001, http on 127.0.0.1:2002
switchyard-sidecar: server orders, calls on 127.0.0.1:3001, http on 127.0.0.1:3002
";
    let addrs = sidecar_http_addrs(log);
    assert_eq!(addrs.len(), 2);
    assert_eq!(addrs["orders"], "127.0.0.1:3002");
    assert_eq!(addrs["orders-http"], "127.0.0.1:2002");
}
