//! Stage E end to end, through the sidecar's gRPC service and its upstream
//! watcher, against real servers: server-everything (2025-11-25: its
//! resources, templates, prompts, completions and resource list changes),
//! `mrtr_stub.py` (2026-07-28 multi round-trip `prompts/get` and
//! `resources/read`), `prompts_only.py` (no tools capability) and
//! `resources_stub.py` (what server-everything lacks: pages with an
//! empty-string cursor, long texts, multi-MB blobs, both not-found codes,
//! list changes heard only on a 2026-07-28 `subscriptions/listen` stream,
//! failing listings).
//!
//! Covered: the catalogue's three stage E lists (every page, entries as
//! sent, kept when a listing fails, re-listed alone when they change); the
//! three RPCs and their size rules (inline text, long text and blobs as
//! attachments with generated names, URIs byte-exact); their errors
//! (NOT_FOUND, INVALID_ARGUMENT, UNIMPLEMENTED, FAILED_PRECONDITION,
//! INTERNAL, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, UNAVAILABLE); bounded
//! concurrency of reads (`max_concurrent_reads`) with multi-MB blobs
//! arriving intact; the 16 MiB default `max_message_bytes` taking a 10 MB
//! PDF.

use crate::common::{HEAVY, Harness, LIMIT, harness, harness_with, stdio, stub};
use base64::Engine;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_common::audit::Audit;
use switchyard_proto::v1::{
    CatalogueSnapshot, CompleteResponse, GetPromptResponse, ReadResourceResponse, SidecarRequest,
};
use switchyard_sidecar::interactions::{
    CallContext, Interaction, InteractionHandler, Interactions,
};
use switchyard_sidecar::upstream::{
    EraPreference, TransportConfig, Upstream, UpstreamConfig, UpstreamMetrics,
};
use switchyard_test_support as support;
use tonic::Code;

const WINDOW: Duration = Duration::from_millis(200);
const MIB: usize = 1024 * 1024;

// ---- servers ------------------------------------------------------------------

fn everything() -> UpstreamConfig {
    let bin = support::everything_bin();
    let mut c = stdio("everything", bin.to_str().unwrap(), &["stdio"]);
    c.era = EraPreference::Legacy;
    c
}

/// `resources_stub.py` in `era` ("2025" or "2026") with extra `env`.
fn resources_stub(era: &str, env: &[(&str, &str)]) -> UpstreamConfig {
    let mut c = stub("resources_stub.py");
    if let TransportConfig::Stdio(s) = &mut c.transport {
        s.env.insert("STUB_ERA".into(), era.into());
        for (k, v) in env {
            s.env.insert((*k).into(), (*v).into());
        }
    }
    c
}

// ---- requests -------------------------------------------------------------------

fn request(params: Value) -> SidecarRequest {
    SidecarRequest {
        params_json: params.to_string(),
        session_id: "S1".into(),
        run_id: "R1".into(),
        ..Default::default()
    }
}

async fn read_with(h: &Harness, r: SidecarRequest) -> Result<ReadResourceResponse, tonic::Status> {
    let mut client = h.client.clone();
    tokio::time::timeout(LIMIT, client.read_resource(r))
        .await
        .expect("answered in time")
        .map(tonic::Response::into_inner)
}

async fn read(h: &Harness, uri: &str) -> Result<ReadResourceResponse, tonic::Status> {
    read_with(h, request(json!({ "uri": uri }))).await
}

async fn prompt(
    h: &Harness,
    name: &str,
    arguments: Value,
) -> Result<GetPromptResponse, tonic::Status> {
    let mut client = h.client.clone();
    let r = request(json!({"name": name, "arguments": arguments}));
    tokio::time::timeout(LIMIT, client.get_prompt(r))
        .await
        .expect("answered in time")
        .map(tonic::Response::into_inner)
}

async fn complete(h: &Harness, params: Value) -> Result<CompleteResponse, tonic::Status> {
    let mut client = h.client.clone();
    tokio::time::timeout(LIMIT, client.complete(request(params)))
        .await
        .expect("answered in time")
        .map(tonic::Response::into_inner)
}

/// The stub's counters (`stats` tool).
async fn stats(h: &Harness) -> Value {
    let r = h.call("stats", json!({}), false).await.unwrap();
    serde_json::from_str(&r.model_text).unwrap()
}

fn lists(h: &Harness) -> CatalogueSnapshot {
    h.view.catalogue.borrow().clone().expect("a catalogue")
}

fn parsed(entries: &[String]) -> Vec<Value> {
    entries
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

fn field(entries: &[String], key: &str) -> Vec<String> {
    parsed(entries)
        .iter()
        .map(|e| e[key].as_str().unwrap().to_owned())
        .collect()
}

/// Waits until the published catalogue satisfies `ok`.
async fn catalogue_where(
    h: &Harness,
    ok: impl Fn(&CatalogueSnapshot) -> bool,
) -> CatalogueSnapshot {
    let mut rx = h.view.catalogue.clone();
    let snapshot = tokio::time::timeout(LIMIT, rx.wait_for(|c| c.as_ref().is_some_and(&ok)))
        .await
        .expect("the catalogue changed in time")
        .unwrap();
    snapshot.clone().unwrap()
}

/// Waits until `ok` holds for the stub's counters.
async fn stats_where(h: &Harness, ok: impl Fn(&Value) -> bool) -> Value {
    tokio::time::timeout(LIMIT, async {
        loop {
            let s = stats(h).await;
            if ok(&s) {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the stub's counters in time")
}

fn details(status: &tonic::Status) -> Value {
    serde_json::from_slice(status.details()).unwrap()
}

fn b64(data: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap()
}

/// The bytes `resources_stub.py` serves for `stub://blob/N`.
fn blob_bytes(uri: &str, n: usize) -> Vec<u8> {
    let pattern: Vec<u8> = (0..251u32).map(|i| ((i * 7 + 3) % 251) as u8).collect();
    uri.bytes()
        .chain(pattern.iter().copied().cycle())
        .take(n)
        .collect()
}

// ---- server-everything (2025-11-25) ------------------------------------------------

#[tokio::test]
async fn everything_lists_its_resources_templates_and_prompts() {
    let h = harness(everything(), WINDOW).await;
    let c = lists(&h);
    assert!(!c.tools_json.is_empty(), "the tools are listed too");
    let resources = parsed(&c.resources_json);
    assert_eq!(resources.len(), 7, "{resources:?}");
    assert_eq!(
        resources[0],
        json!({
            "uri": "demo://resource/static/document/architecture.md",
            "name": "architecture.md",
            "mimeType": "text/markdown",
            "description": "Static document file exposed from /docs: architecture.md"
        }),
        "kept exactly as sent"
    );
    assert!(resources.iter().all(|r| {
        r["uri"]
            .as_str()
            .unwrap()
            .starts_with("demo://resource/static/document/")
    }));
    assert_eq!(
        field(&c.resource_templates_json, "uriTemplate"),
        [
            "demo://resource/dynamic/text/{resourceId}",
            "demo://resource/dynamic/blob/{resourceId}"
        ]
    );
    assert_eq!(
        field(&c.prompts_json, "name"),
        [
            "simple-prompt",
            "args-prompt",
            "completable-prompt",
            "resource-prompt"
        ]
    );
    let args = &parsed(&c.prompts_json)[1]["arguments"];
    assert_eq!(
        args[0],
        json!({"name": "city", "description": "Name of the city", "required": true})
    );
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn everything_reads_dynamic_text_and_blob_resources() {
    let h = harness(everything(), WINDOW).await;
    let text = read(&h, "demo://resource/dynamic/text/3").await.unwrap();
    assert_eq!(text.server, "everything");
    assert_eq!(text.uri, "demo://resource/dynamic/text/3");
    assert!(text.attachments.is_empty());
    assert_eq!(text.contents.len(), 1);
    assert!(
        text.contents[0]
            .text
            .starts_with("Resource 3: This is a plaintext resource created at"),
        "{text:?}"
    );
    assert_eq!(text.contents[0].mime_type, "text/plain");
    assert_eq!(text.text, text.contents[0].text);

    // A blob is an attachment whatever its declared type (server-everything
    // says text/plain).
    let blob = read(&h, "demo://resource/dynamic/blob/3").await.unwrap();
    assert_eq!(blob.attachments.len(), 1);
    let a = &blob.attachments[0];
    assert_eq!(
        (a.name.as_str(), a.mime_type.as_str()),
        ("resource-1.txt", "text/plain")
    );
    assert_eq!(a.uri, "demo://resource/dynamic/blob/3");
    assert!(
        String::from_utf8(a.data.clone())
            .unwrap()
            .starts_with("Resource 3: This is a base64 blob created at"),
        "{a:?}"
    );
    assert_eq!(a.size_bytes, a.data.len() as u64);
    assert_eq!(blob.contents[0].attachment, "resource-1.txt");
    assert_eq!(blob.contents[0].text, "");
    assert_eq!(
        blob.text,
        format!(
            "[resource \"demo://resource/dynamic/blob/3\" attached as resource-1.txt (text/plain, {} bytes)]",
            a.data.len()
        )
    );
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn everything_prompts_embed_a_blob_and_check_their_arguments() {
    let h = harness(everything(), WINDOW).await;
    let simple = prompt(&h, "simple-prompt", json!({})).await.unwrap();
    assert_eq!(simple.name, "simple-prompt");
    assert_eq!(simple.messages.len(), 1);
    assert_eq!(simple.messages[0].role, "user");
    assert_eq!(simple.text, "This is a simple prompt without arguments.");

    let p = prompt(
        &h,
        "resource-prompt",
        json!({"resourceType": "Blob", "resourceId": "2"}),
    )
    .await
    .unwrap();
    assert_eq!(p.messages.len(), 2);
    assert_eq!(p.messages[0].r#type, "text");
    assert_eq!(p.messages[1].r#type, "resource");
    assert_eq!(p.messages[1].uri, "demo://resource/dynamic/blob/2");
    assert_eq!(p.messages[1].attachment, "prompt-1.txt");
    assert_eq!(
        serde_json::from_str::<Value>(&p.messages[1].content_json).unwrap(),
        json!({"type": "resource", "resource": {"uri": "demo://resource/dynamic/blob/2", "mimeType": "text/plain"}}),
        "the block without its blob"
    );
    assert_eq!(p.attachments.len(), 1);
    assert!(
        String::from_utf8(p.attachments[0].data.clone())
            .unwrap()
            .starts_with("Resource 2: This is a base64 blob"),
    );
    assert_eq!(p.attachments[0].uri, "demo://resource/dynamic/blob/2");
    let lines: Vec<&str> = p.text.split("\n\n").collect();
    assert_eq!(
        lines[0],
        "This prompt includes the Blob resource with id: 2. Please analyze the following resource:"
    );
    assert!(
        lines[1]
            .starts_with("[resource \"demo://resource/dynamic/blob/2\" attached as prompt-1.txt")
    );

    // -32602: a missing argument, an unknown prompt.
    let e = prompt(&h, "args-prompt", json!({})).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message()
            .starts_with("server everything: prompts/get \"args-prompt\": ")
            && e.message()
                .contains("Invalid arguments for prompt args-prompt"),
        "{e:?}"
    );
    assert_eq!(details(&e)["code"], -32602);
    let e = prompt(&h, "nope", json!({})).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("Prompt nope not found"), "{e:?}");
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn everything_completes_a_prompt_argument_and_a_template_variable() {
    let h = harness(everything(), WINDOW).await;
    let c = complete(
        &h,
        json!({"ref": {"type": "ref/prompt", "name": "completable-prompt"}, "argument": {"name": "department", "value": "S"}}),
    )
    .await
    .unwrap();
    assert_eq!(c.values, ["Sales", "Support"]);
    assert_eq!((c.total, c.has_more), (2, false));
    let c = complete(
        &h,
        json!({
            "ref": {"type": "ref/prompt", "name": "completable-prompt"},
            "argument": {"name": "name", "value": ""},
            "context": {"arguments": {"department": "Sales"}}
        }),
    )
    .await
    .unwrap();
    assert_eq!(c.values, ["David", "Eve", "Frank"]);
    let c = complete(
        &h,
        json!({
            "ref": {"type": "ref/resource", "uri": "demo://resource/dynamic/text/{resourceId}"},
            "argument": {"name": "resourceId", "value": "7"}
        }),
    )
    .await
    .unwrap();
    assert_eq!(c.values, ["7"]);
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn everything_resource_changes_are_relisted_and_hostile_names_stay_verbatim() {
    let h = harness(everything(), WINDOW).await;
    let gzip = |name: &str| {
        let h = &h;
        let name = name.to_owned();
        async move {
            let data = format!(
                "data:text/plain;base64,{}",
                base64::engine::general_purpose::STANDARD.encode("hello")
            );
            h.call(
                "gzip-file-as-resource",
                json!({"name": name, "data": data, "outputType": "resource"}),
                false,
            )
            .await
            .unwrap()
        }
    };
    let hostile = "demo://resource/session/../../etc/evil name.gz";
    gzip("../../etc/evil name.gz").await;
    // notifications/resources/list_changed: the resources are listed again.
    let c = catalogue_where(&h, |c| c.resources_json.len() == 8).await;
    let added = parsed(&c.resources_json).pop().unwrap();
    assert_eq!(
        added,
        json!({"uri": hostile, "name": "../../etc/evil name.gz", "mimeType": "application/gzip"}),
        "listed verbatim"
    );
    // Read byte-exact: the server (which normalises it itself) has no such
    // resource, and the message names the URI as asked.
    let e = read(&h, hostile).await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    assert!(
        e.message().starts_with(&format!(
            "resource not found: server everything has no resource \"{hostile}\" (the server said: "
        )),
        "{e:?}"
    );
    // One that reads: its attachment name is generated, its URI kept.
    let encoded = "demo://resource/session/..%2F..%2Fetc%2Fevil%20name.gz";
    gzip("..%2F..%2Fetc%2Fevil%20name.gz").await;
    let r = read(&h, encoded).await.unwrap();
    let a = &r.attachments[0];
    assert_eq!(a.name, "resource-1.gz");
    assert_eq!(a.mime_type, "application/gzip");
    assert_eq!(a.uri, encoded);
    assert_eq!(a.data[..2], [0x1f, 0x8b], "gzip data, decoded");
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

// ---- 2026-07-28 multi round-trip requests (mrtr_stub.py) ---------------------------

/// Accepts every elicitation with `{"ok": true}` and records them.
#[derive(Debug, Default)]
struct Yes {
    asked: Mutex<Vec<Interaction>>,
}

impl InteractionHandler for Yes {
    fn interact(&self, interaction: Interaction) -> BoxFuture<'static, Value> {
        self.asked.lock().unwrap().push(interaction);
        Box::pin(async { json!({"action": "accept", "content": {"ok": true}}) })
    }

    fn complete(&self, _: &str, _: &CallContext, _: &str) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

#[tokio::test]
async fn mrtr_rounds_run_for_prompts_and_resource_reads_2026() {
    let mut config = stub("mrtr_stub.py");
    config.era = EraPreference::Modern;
    let yes = Arc::new(Yes::default());
    let upstream = Upstream::with_interactions(
        config,
        &UpstreamMetrics::unregistered(),
        Interactions::new(yes.clone(), Audit::to_log()),
    )
    .unwrap();
    let h = harness_with(upstream, WINDOW, |s| s).await;
    let p = prompt(&h, "confirm", json!({})).await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&p.messages[0].text).unwrap(),
        json!({"action": "accept", "content": {"ok": true}})
    );
    {
        let asked = yes.asked.lock().unwrap();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].context.session_id, "S1");
        assert_eq!(asked[0].context.run_id, "R1");
        assert_eq!(asked[0].context.tool, "prompts/get confirm");
    }
    let roots = json!([{"uri": "file:///work/S1", "name": "S1"}]);
    let mut r = request(json!({"uri": "stub://roots"}));
    r.roots_json = roots.to_string();
    let read = read_with(&h, r).await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&read.contents[0].text).unwrap(),
        json!({"roots": roots}),
        "roots/list answered from the request's roots"
    );
    assert_eq!(read.contents[0].mime_type, "application/json");
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

// ---- resources_stub.py ------------------------------------------------------------

#[tokio::test]
async fn every_page_is_listed_an_empty_string_cursor_included() {
    let h = harness(resources_stub("2025", &[]), WINDOW).await;
    let c = lists(&h);
    assert_eq!(
        field(&c.resources_json, "uri"),
        [
            "stub://readme",
            "stub://long",
            "stub://dir/../secret file.txt",
            "stub://gone"
        ]
    );
    assert_eq!(
        parsed(&c.resources_json)[0],
        json!({
            "uri": "stub://readme", "name": "readme", "title": "Read me", "mimeType": "text/plain",
            "size": 7, "annotations": {"audience": ["user"], "priority": 0.5},
            "icons": [{"src": "data:image/png;base64,AAAA", "mimeType": "image/png"}],
            "_meta": {"vendor/x": {"n": [1, 2.5, null]}}, "x-unknown": {"kept": true}
        }),
        "kept exactly as sent"
    );
    assert_eq!(field(&c.resource_templates_json, "name"), ["blob", "text"]);
    assert_eq!(
        field(&c.prompts_json, "name"),
        ["hello", "long", "pictures"]
    );
    let s = stats(&h).await;
    assert_eq!(
        s["lists"],
        json!({"tools/list": 1, "resources/list": 3, "resources/templates/list": 2, "prompts/list": 2}),
        "one request per page: {s}"
    );
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn long_texts_become_attachments_and_short_ones_stay_inline() {
    let h = harness(resources_stub("2025", &[]), WINDOW).await;
    let long: String = "é".repeat(20_000) + &"x".repeat(5_000);
    let r = read(&h, "stub://long").await.unwrap();
    assert_eq!(r.attachments.len(), 1);
    let a = &r.attachments[0];
    assert_eq!(
        (a.name.as_str(), a.mime_type.as_str(), a.uri.as_str()),
        ("resource-1.md", "text/markdown", "stub://long")
    );
    assert_eq!(a.data, long.as_bytes());
    assert_eq!(r.contents[0].attachment, "resource-1.md");
    let (head, note) = r.text.split_once('\n').unwrap();
    assert_eq!(head, "é".repeat(4_000));
    assert_eq!(
        note,
        "[The text of resource \"stub://long\" is 25000 characters long (45000 bytes); only its first 4000 characters are shown. The whole text is in the attachment resource-1.md.]"
    );

    // 20,000 characters: inline.
    let r = read(&h, "stub://text/20000").await.unwrap();
    assert!(r.attachments.is_empty());
    assert_eq!(r.contents[0].text.len(), 20_000);
    let r = read(&h, "stub://text/20001").await.unwrap();
    assert_eq!(r.attachments[0].name, "resource-1.txt");

    // attach: text too.
    let mut attach = request(json!({"uri": "stub://readme"}));
    attach.attach = true;
    let r = read_with(&h, attach).await.unwrap();
    assert_eq!(r.attachments[0].name, "resource-1.txt");
    assert_eq!(r.attachments[0].data, b"read me");
    assert_eq!(r.contents[0].text, "");

    // Several contents, each told apart; a blob among them.
    let r = read(&h, "stub://two").await.unwrap();
    assert_eq!(r.contents.len(), 2);
    assert_eq!(r.contents[0].text, "first");
    assert_eq!(r.contents[0].meta_json, r#"{"part":1}"#);
    assert_eq!(r.contents[1].attachment, "resource-1.png");
    assert_eq!(r.attachments[0].uri, "stub://two/b.png");
    assert!(
        r.text
            .starts_with("[resource \"stub://two/a.txt\"]\nfirst\n\n"),
        "{}",
        r.text
    );

    // Prompts follow the same rules.
    let p = prompt(&h, "long", json!({})).await.unwrap();
    assert_eq!(p.attachments[0].name, "prompt-1.md");
    assert_eq!(p.attachments[0].data, long.as_bytes());
    let p = prompt(&h, "pictures", json!({})).await.unwrap();
    let kinds: Vec<(&str, &str)> = p
        .messages
        .iter()
        .map(|m| (m.r#type.as_str(), m.attachment.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("text", ""),
            ("image", "prompt-1.png"),
            ("audio", "prompt-2.wav"),
            ("resource_link", "")
        ]
    );
    assert_eq!(p.messages[2].role, "assistant");
    assert_eq!(p.messages[3].uri, "https://example.com/doc.pdf");
    assert_eq!(p.attachments[0].data, b64("iVBORw0KGgo="));
    let p = prompt(&h, "hello", json!({"who": "Ada"})).await.unwrap();
    assert_eq!(
        (p.text.as_str(), p.description.as_str()),
        ("Hello, Ada!", "says hello")
    );
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_missing_resource_is_not_found_with_either_code_and_uris_are_byte_exact() {
    let h = harness(resources_stub("2025", &[]), WINDOW).await;
    // -32002 (2025-11-25).
    let e = read(&h, "stub://gone").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(
        e.message(),
        "resource not found: server resources_stub has no resource \"stub://gone\" (the server said: Resource not found)"
    );
    assert_eq!(
        details(&e),
        json!({"code": -32002, "message": "Resource not found"})
    );
    // -32602 (2026-07-28).
    let e = read(&h, "stub://nope").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(
        e.message(),
        "resource not found: server resources_stub has no resource \"stub://nope\" (the server said: Resource stub://nope not found)"
    );
    // Never normalised: the server compares the URI as listed.
    let r = read(&h, "stub://dir/../secret file.txt").await.unwrap();
    assert_eq!(r.text, "secret");
    assert_eq!(r.uri, "stub://dir/../secret file.txt");
    // An https:// URI is asked of the server too.
    let r = read(&h, "https://example.com/report.txt").await.unwrap();
    assert_eq!(
        r.text,
        "served by the stub for https://example.com/report.txt"
    );
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn other_failures_keep_their_codes() {
    let h = harness(resources_stub("2025", &[]), WINDOW).await;
    let e = read(&h, "stub://error").await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert_eq!(
        details(&e),
        json!({"code": -32603, "message": "boom", "data": {"why": "testing"}})
    );
    assert!(e.message().contains("server resources_stub"), "{e:?}");

    // A server's very long error: bounded in the status (it travels in
    // HTTP/2 headers), and the other reads on the connection go on.
    let slow = {
        let mut client = h.client.clone();
        let r = request(json!({"uri": "stub://slow/1500"}));
        tokio::spawn(async move { client.read_resource(r).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let e = read(&h, "stub://error/50000").await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().len() <= 1024, "{}", e.message().len());
    assert!(e.message().ends_with("bytes in all)"), "{}", e.message());
    let d = details(&e);
    assert_eq!(d["code"], -32603);
    assert_eq!(d["data"]["truncated"], true);
    let slow = tokio::time::timeout(LIMIT, slow).await.unwrap().unwrap();
    assert!(slow.is_ok(), "the other read: {slow:?}");

    let e = read(&h, "stub://bad-blob").await.unwrap_err();
    assert_eq!(e.code(), Code::Internal, "{e:?}");
    assert!(
        e.message().starts_with(
            "server resources_stub: protocol error: resources/read \"stub://bad-blob\": content 1 (\"stub://bad-blob\") has a blob that is not valid base64"
        ),
        "{e:?}"
    );

    let e = complete(
        &h,
        json!({"ref": {"type": "ref/prompt", "name": "hello"}, "argument": {"name": "who", "value": "A"}}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert_eq!(
        e.message(),
        "server resources_stub offers no completions (the server said: Method not found)"
    );

    let e = prompt(&h, "hello", json!({})).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(
        e.message(),
        "server resources_stub: prompts/get \"hello\": Missing required argument: who"
    );

    let e = read_with(&h, request(json!({"name": "no uri"})))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(
        e.message(),
        "params_json must have `uri`, a string (resources/read params)"
    );

    let mut slow = request(json!({"uri": "stub://slow/10000"}));
    slow.timeout_ms = 300;
    let e = read_with(&h, slow).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded);
    assert_eq!(
        e.message(),
        "server resources_stub: resources/read \"stub://slow/10000\" did not finish within 300 ms"
    );

    // The server exits mid-read.
    let e = read(&h, "stub://crash").await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(
        e.message().starts_with("server resources_stub exited"),
        "{e:?}"
    );
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn several_multi_mb_blobs_arrive_intact_with_at_most_four_read_at_once() {
    let _heavy = HEAVY.lock().await;
    // The stub holds each blob read until six are in flight (or 1.5 s
    // passed): only the sidecar's bound keeps the peak at four.
    let h = harness(
        resources_stub("2025", &[("STUB_READ_BARRIER", "6")]),
        WINDOW,
    )
    .await;
    let uris: Vec<(String, usize)> = (0..6)
        .map(|i| {
            let n = 3 * MIB + i * 1000;
            (format!("stub://blob/{n}"), n)
        })
        .collect();
    let reads = uris.iter().map(|(uri, _)| read(&h, uri));
    let answers = futures::future::join_all(reads).await;
    for ((uri, n), answer) in uris.iter().zip(answers) {
        let r = answer.unwrap_or_else(|e| panic!("{uri}: {e:?}"));
        assert_eq!(r.attachments.len(), 1);
        let a = &r.attachments[0];
        assert_eq!(
            (a.name.as_str(), a.mime_type.as_str()),
            ("resource-1.pdf", "application/pdf")
        );
        assert_eq!(a.size_bytes as usize, *n);
        assert!(
            a.data == blob_bytes(uri, *n),
            "{uri}: the bytes arrived intact"
        );
        assert_eq!(a.uri, *uri);
    }
    let s = stats(&h).await;
    assert_eq!(
        s["peak_reads"], 4,
        "at most max_concurrent_reads at once: {s}"
    );

    // A 10 MB PDF (13.3 MB of base64) passes the default 16 MiB limit.
    let n = 10_000_000;
    let uri = format!("stub://blob/{n}");
    let r = read(&h, &uri).await.unwrap();
    assert!(r.attachments[0].data == blob_bytes(&uri, n));
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn an_answer_over_max_message_bytes_is_resource_exhausted() {
    let mut config = resources_stub("2025", &[]);
    config.max_message_bytes = MIB;
    let h = harness(config, WINDOW).await;
    let e = read(&h, "stub://blob/2000000").await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().starts_with(
            "server resources_stub: resources/read \"stub://blob/2000000\": the answer is "
        ) && e.message().ends_with(&format!(
            "over the {MIB}-byte limit (the server's max_message_bytes)"
        )),
        "{e:?}"
    );
    // The connection goes on.
    assert_eq!(read(&h, "stub://readme").await.unwrap().text, "read me");
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_failing_listing_keeps_the_previous_lists_and_only_the_changed_list_is_relisted() {
    let h = harness(resources_stub("2025", &[]), WINDOW).await;
    let first = lists(&h);
    assert_eq!(first.resources_json.len(), 4);
    let before = stats(&h).await["lists"].clone();

    // The re-list after a change fails: the previous lists stay, with the
    // tools, in the snapshot published after it.
    h.call("fail_lists", json!({"on": true}), false)
        .await
        .unwrap();
    let mut rx = h.view.catalogue.clone();
    rx.borrow_and_update();
    h.call("change", json!({"list": "resources"}), false)
        .await
        .unwrap();
    tokio::time::timeout(LIMIT, rx.changed())
        .await
        .unwrap()
        .unwrap();
    let kept = rx.borrow().clone().unwrap();
    assert_eq!(kept.resources_json, first.resources_json);
    assert_eq!(kept.resource_templates_json, first.resource_templates_json);
    assert_eq!(kept.prompts_json, first.prompts_json);
    assert_eq!(kept.tools_json, first.tools_json);
    let after = stats(&h).await["lists"].clone();
    assert_eq!(
        after["resources/list"],
        before["resources/list"].as_u64().unwrap() + 1,
        "tried once (the first page failed)"
    );
    assert_eq!(
        after["prompts/list"], before["prompts/list"],
        "prompts not re-listed"
    );
    assert_eq!(
        after["tools/list"], before["tools/list"],
        "tools not re-listed"
    );

    // A prompt change re-lists the prompts alone: the resources keep the
    // last good listing although the server now has five.
    h.call("fail_lists", json!({"on": false}), false)
        .await
        .unwrap();
    h.call("change", json!({"list": "prompts"}), false)
        .await
        .unwrap();
    let c = catalogue_where(&h, |c| c.prompts_json.len() == 4).await;
    assert_eq!(field(&c.prompts_json, "name")[3], "added-1");
    assert_eq!(c.resources_json, first.resources_json);
    let s = stats(&h).await;
    assert_eq!(s["lists"]["resources/list"], after["resources/list"], "{s}");

    // The next resource change lists them again, both additions in.
    h.call("change", json!({"list": "resources"}), false)
        .await
        .unwrap();
    let c = catalogue_where(&h, |c| c.resources_json.len() == 6).await;
    assert_eq!(
        field(&c.resources_json, "uri")[4..],
        ["stub://added/1", "stub://added/2"]
    );
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn list_changes_are_heard_on_the_listen_stream_2026() {
    let h = harness(resources_stub("2026", &[]), WINDOW).await;
    assert_eq!(lists(&h).protocol_version, "2026-07-28");
    let s = stats_where(&h, |s| !s["listens"].as_array().unwrap().is_empty()).await;
    let listen = &s["listens"][0];
    assert_eq!(
        listen["notifications"],
        json!({"resourcesListChanged": true, "promptsListChanged": true}),
        "opted in to the declared list changes only (tools declare none): {s}"
    );
    assert_eq!(
        listen["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    let before = s["lists"].clone();

    let r = h
        .call("change", json!({"list": "resources"}), false)
        .await
        .unwrap();
    assert_eq!(r.model_text, "changed; told 1 stream(s)");
    let c = catalogue_where(&h, |c| c.resources_json.len() == 5).await;
    assert_eq!(field(&c.resources_json, "uri")[4], "stub://added/1");
    let s = stats(&h).await;
    assert_eq!(s["lists"]["prompts/list"], before["prompts/list"], "{s}");
    assert_eq!(s["lists"]["tools/list"], before["tools/list"], "{s}");

    h.call("change", json!({"list": "prompts"}), false)
        .await
        .unwrap();
    let c = catalogue_where(&h, |c| c.prompts_json.len() == 4).await;
    assert_eq!(field(&c.prompts_json, "name")[3], "added-1");
    h.upstream.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test]
async fn a_server_without_tools_is_connected_with_an_empty_tool_list() {
    let h = harness(stub("prompts_only.py"), WINDOW).await;
    let c = lists(&h);
    assert!(c.tools_json.is_empty());
    assert_eq!(
        parsed(&c.resources_json),
        [json!({"uri": "stub://readme", "name": "readme", "mimeType": "text/plain"})]
    );
    assert!(c.resource_templates_json.is_empty(), "-32601: no templates");
    assert_eq!(field(&c.prompts_json, "name"), ["greeting"]);
    assert_eq!(
        read(&h, "stub://readme").await.unwrap().text,
        "prompts-only stub"
    );
    let e = read(&h, "stub://other").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let p = prompt(&h, "greeting", json!({"who": "Ada"})).await.unwrap();
    assert_eq!(p.text, "Hello, Ada!");
    h.upstream.shutdown(Duration::from_secs(2)).await;
}
