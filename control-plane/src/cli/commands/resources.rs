//! `switchyard resources`, `read`, `prompts` and `prompt` (stage E): list a
//! session's resources and templates, read one (to stdout or a file), list
//! its prompts, and get one with arguments. Each pages through every
//! `next_cursor` itself.

use crate::cli::connect::Remote;
use crate::cli::render::tables::{prompts_table, resources_table};
use crate::cli::render::{out, print_json, print_lines};
use crate::cli::{EXIT_USAGE, Failure};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use switchyard_proto::v1 as pb;

/// Lists every resource and template (all pages) of the session's servers,
/// or of `server`.
pub async fn list(
    remote: &Remote,
    server: Option<String>,
    session: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let mut client = remote.engine().await?;
    let (mut resources, mut templates) = (Vec::new(), Vec::new());
    let mut unavailable;
    let mut cursor = String::new();
    loop {
        let page = client
            .list_resources(pb::ListResourcesRequest {
                session_id: session.clone().unwrap_or_default(),
                server: server.clone().unwrap_or_default(),
                cursor: std::mem::take(&mut cursor),
                page_size: 1000,
            })
            .await?
            .into_inner();
        resources.extend(page.resources);
        templates.extend(page.resource_templates);
        unavailable = page.unavailable_servers;
        if page.next_cursor.is_empty() {
            break;
        }
        cursor = page.next_cursor;
    }
    if json {
        let r: Vec<Value> = resources.iter().map(resource_json).collect();
        let t: Vec<Value> = templates.iter().map(template_json).collect();
        print_json(
            &json!({"resources": r, "resourceTemplates": t, "unavailableServers": unavailable}),
        );
    } else {
        print_lines(resources_table(&resources, &templates));
        for s in &unavailable {
            eprintln!("(server {s} is unavailable: its resources are not listed)");
        }
    }
    Ok(())
}

fn resource_json(r: &pb::Resource) -> Value {
    let mut v = json!({"server": r.server, "uri": r.uri, "name": r.name});
    for (k, s) in [
        ("title", &r.title),
        ("description", &r.description),
        ("mimeType", &r.mime_type),
    ] {
        if !s.is_empty() {
            v[k] = json!(s);
        }
    }
    if r.size >= 0 {
        v["size"] = json!(r.size);
    }
    v
}

fn template_json(t: &pb::ResourceTemplate) -> Value {
    let mut v = json!({"server": t.server, "uriTemplate": t.uri_template, "name": t.name});
    for (k, s) in [
        ("title", &t.title),
        ("description", &t.description),
        ("mimeType", &t.mime_type),
    ] {
        if !s.is_empty() {
            v[k] = json!(s);
        }
    }
    v
}

/// Shows elapsed time on stderr, when it is a terminal, while `work`
/// runs (a long download); the line is cleared at the end.
async fn with_progress<T>(what: &str, work: impl Future<Output = T>) -> T {
    if !std::io::stderr().is_terminal() {
        return work.await;
    }
    let started = Instant::now();
    tokio::pin!(work);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut shown = false;
    loop {
        tokio::select! {
            out = &mut work => {
                if shown {
                    eprint!("\r\x1b[2K");
                }
                return out;
            }
            _ = tick.tick() => {
                let secs = started.elapsed().as_secs_f64();
                if secs >= 1.0 {
                    shown = true;
                    eprint!("\r\x1b[2K{what}: {secs:.1} s");
                }
            }
        }
    }
}

/// Reads `uri` of `server`: the text the model would read to stdout
/// (attachments named), or with `output` every content to files: the
/// first to `output`, each next one to `output.2`, `output.3`...
pub async fn read(
    remote: &Remote,
    server: String,
    uri: String,
    session: Option<String>,
    output: Option<PathBuf>,
) -> Result<(), Failure> {
    let mut client = remote.engine().await?;
    let request = pb::ReadResourceRequest {
        session_id: session.unwrap_or_default(),
        server,
        uri,
        ..Default::default()
    };
    let Some(output) = output else {
        let resp = with_progress("reading", client.read_resource(request))
            .await?
            .into_inner();
        out!("{}", resp.text);
        for a in &resp.attachments {
            eprintln!(
                "(attachment {} ({}, {} bytes) not written: use -o FILE)",
                a.name, a.mime_type, a.size_bytes
            );
        }
        return Ok(());
    };
    let resp = with_progress("downloading", client.attach_resource(request))
        .await?
        .into_inner();
    for (i, a) in resp.attachments.iter().enumerate() {
        let path = numbered(&output, i);
        std::fs::write(&path, &a.data)
            .map_err(|e| Failure::new(1, format!("cannot write {}: {e}", path.display())))?;
        eprintln!(
            "{} ({}, {} bytes) -> {}",
            if a.uri.is_empty() { &a.name } else { &a.uri },
            a.mime_type,
            a.data.len(),
            path.display()
        );
    }
    if resp.attachments.is_empty() {
        return Err(Failure::new(1, "the resource has no contents"));
    }
    Ok(())
}

/// `path` for the first content, `path.N` for the N-th.
fn numbered(path: &Path, i: usize) -> PathBuf {
    match i {
        0 => path.to_owned(),
        n => {
            let mut p = path.as_os_str().to_owned();
            p.push(format!(".{}", n + 1));
            PathBuf::from(p)
        }
    }
}

/// Lists every prompt (all pages) of the session's servers, or of
/// `server`.
pub async fn prompts(
    remote: &Remote,
    server: Option<String>,
    session: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let mut client = remote.engine().await?;
    let mut prompts = Vec::new();
    let mut unavailable;
    let mut cursor = String::new();
    loop {
        let page = client
            .list_prompts(pb::ListPromptsRequest {
                session_id: session.clone().unwrap_or_default(),
                server: server.clone().unwrap_or_default(),
                cursor: std::mem::take(&mut cursor),
                page_size: 1000,
            })
            .await?
            .into_inner();
        prompts.extend(page.prompts);
        unavailable = page.unavailable_servers;
        if page.next_cursor.is_empty() {
            break;
        }
        cursor = page.next_cursor;
    }
    if json {
        let list: Vec<Value> = prompts
            .iter()
            .map(|p| {
                json!({
                    "server": p.server, "name": p.name, "title": p.title,
                    "description": p.description,
                    "arguments": p.arguments.iter().map(|a| json!({
                        "name": a.name, "title": a.title, "description": a.description, "required": a.required,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        print_json(&json!({"prompts": list, "unavailableServers": unavailable}));
    } else {
        print_lines(prompts_table(&prompts));
        for s in &unavailable {
            eprintln!("(server {s} is unavailable: its prompts are not listed)");
        }
    }
    Ok(())
}

/// `--arg k=v` pairs as the prompt's arguments. Errors (exit 64): a pair
/// without `=`, or a name given twice.
pub fn arguments(pairs: &[String]) -> Result<HashMap<String, String>, Failure> {
    let mut out = HashMap::new();
    for pair in pairs {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(Failure::new(
                EXIT_USAGE,
                format!("--arg {pair:?}: expected NAME=VALUE"),
            ));
        };
        if out.insert(k.to_owned(), v.to_owned()).is_some() {
            return Err(Failure::new(EXIT_USAGE, format!("--arg {k}: given twice")));
        }
    }
    Ok(out)
}

/// Gets prompt `name` of `server` with `args`: its messages as text (each
/// attachment named), or with `json` the messages as JSON.
pub async fn prompt(
    remote: &Remote,
    server: String,
    name: String,
    args: Vec<String>,
    session: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let arguments = arguments(&args)?;
    let resp = remote
        .engine()
        .await?
        .get_prompt(pb::GetPromptRequest {
            session_id: session.unwrap_or_default(),
            server,
            name,
            arguments,
            ..Default::default()
        })
        .await?
        .into_inner();
    if json {
        let messages: Vec<Value> = resp
            .messages
            .iter()
            .map(|m| {
                json!({
                    "role": m.role, "type": m.r#type, "text": m.text, "attachment": m.attachment,
                    "uri": m.uri, "mimeType": m.mime_type,
                    "content": crate::cli::render::parse_json_text(&m.content_json),
                })
            })
            .collect();
        let attachments: Vec<Value> = resp
            .attachments
            .iter()
            .map(|a| json!({"name": a.name, "mimeType": a.mime_type, "sizeBytes": a.size_bytes, "uri": a.uri}))
            .collect();
        print_json(&json!({
            "server": resp.server, "name": resp.name, "description": resp.description,
            "messages": messages, "attachments": attachments,
        }));
    } else {
        out!("{}", resp.text);
    }
    Ok(())
}
