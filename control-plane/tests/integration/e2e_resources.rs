//! Stage E end to end through `switchyard up`: the resources, resource
//! templates and prompts of server-everything (2025-11-25, stdio) and of
//! the reference server (`--resources`) in both eras, over stdio and
//! Streamable HTTP; listing across servers in pages, reading (inline text,
//! long text and PDFs as attachments, several multi-MB reads at once),
//! prompts with embedded resources, images, audio and links, completions,
//! the gateway tools `mcp_resources` and `mcp_resource_read`, MRTR on
//! `prompts/get`, `resources.changed` events, the CLI, metrics, and bad
//! input (unknown server or URI, bad cursors, sessions that do not enable
//! the server), each refused with a clear error.

use crate::common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;
use switchyard_proto::v1 as pb;
use switchyard_proto::v1::engine_service_client::EngineServiceClient;
use tonic::Code;
use tonic::transport::Channel;

/// The reference server's resources on a fresh start (36) and its
/// templates (2); server-everything's (7 and 2).
const ORDERS_RESOURCES: usize = 36;
const EVERYTHING_RESOURCES: usize = 7;

/// `switchyard up` with server-everything and the reference server in both
/// eras, over stdio and (2026-07-28) HTTP.
async fn gateway() -> Gateway {
    let reference = switchyard_test_support::reference_server_bin();
    let mut cmd = tokio::process::Command::new(&reference);
    cmd.args([
        "--http",
        "127.0.0.1:0",
        "--resources",
        "--era",
        "2026-07-28",
    ]);
    let http = switchyard_test_support::start_http_server(cmd, "/mcp").await;
    let reference = toml_str(reference.to_string_lossy());
    let servers = format!(
        r#"
[[servers]]
name = "everything"
transport = "stdio"
command = {everything}
args = ["stdio"]

[[servers]]
name = "orders"
transport = "stdio"
command = {reference}
args = ["--resources", "--era", "2026-07-28"]

[[servers]]
name = "orders-legacy"
transport = "stdio"
command = {reference}
args = ["--resources", "--era", "2025-11-25"]

[[servers]]
name = "orders-http"
transport = "http"
url = {url}

[[servers]]
name = "orders-none"
transport = "stdio"
command = {reference}
args = ["--era", "2025-11-25"]
"#,
        everything = toml_str(switchyard_test_support::everything_bin().to_string_lossy()),
        url = toml_str(&http.url),
    );
    let names = [
        "everything",
        "orders",
        "orders-legacy",
        "orders-http",
        "orders-none",
    ];
    let gw = Gateway::start_with(StoreKind::Embedded, 10, http, &servers, "", &[], &names).await;
    // The lists arrive with each catalogue.
    let mut engine = gw.engine().await;
    eventually("every server's resources listed", LIMIT, || {
        let mut engine = engine.clone();
        async move {
            let all = all_resources(&mut engine, "", "", 1000).await?;
            let count = |s: &str| all.0.iter().filter(|r| r.server == s).count();
            let want = [
                ("everything", EVERYTHING_RESOURCES),
                ("orders", ORDERS_RESOURCES),
                ("orders-legacy", ORDERS_RESOURCES),
                ("orders-http", ORDERS_RESOURCES),
            ];
            match want.iter().all(|(s, n)| count(s) >= *n) {
                true => Ok(()),
                false => Err(format!("{:?}", want.map(|(s, _)| (s, count(s))))),
            }
        }
    })
    .await;
    engine
        .list_tools(pb::ListToolsRequest::default())
        .await
        .unwrap();
    gw
}

/// Waits for the session's open form and accepts it with `content`.
async fn answer_form(engine: &mut EngineServiceClient<Channel>, session: &str, content: Value) {
    let open = eventually("a form to answer", LIMIT, || {
        let mut engine = engine.clone();
        let session = session.to_owned();
        async move {
            engine
                .list_interactions(pb::ListInteractionsRequest {
                    session_id: session,
                    include_resolved: false,
                })
                .await
                .map_err(|e| e.to_string())?
                .into_inner()
                .interactions
                .into_iter()
                .find(|i| i.kind == "form" && i.status == "open")
                .ok_or_else(|| "no form yet".to_string())
        }
    })
    .await;
    engine
        .answer_interaction(pb::AnswerInteractionRequest {
            session_id: session.into(),
            interaction_id: open.id,
            action: "accept".into(),
            content_json: content.to_string(),
        })
        .await
        .expect("answer the form");
}

/// Every resource and template, following every cursor with `size`.
async fn all_resources(
    engine: &mut EngineServiceClient<Channel>,
    session: &str,
    server: &str,
    size: u32,
) -> Result<(Vec<pb::Resource>, Vec<pb::ResourceTemplate>), String> {
    let (mut resources, mut templates) = (Vec::new(), Vec::new());
    let mut cursor = String::new();
    for _ in 0..1000 {
        let page = engine
            .list_resources(pb::ListResourcesRequest {
                session_id: session.into(),
                server: server.into(),
                cursor: std::mem::take(&mut cursor),
                page_size: size,
            })
            .await
            .map_err(|e| e.to_string())?
            .into_inner();
        if page.resources.len() + page.resource_templates.len() > size as usize {
            return Err(format!("a page over {size} entries"));
        }
        resources.extend(page.resources);
        templates.extend(page.resource_templates);
        if page.next_cursor.is_empty() {
            return Ok((resources, templates));
        }
        cursor = page.next_cursor;
    }
    Err("the cursors never ended".into())
}

fn read_request(server: &str, uri: &str, session: &str) -> pb::ReadResourceRequest {
    pb::ReadResourceRequest {
        session_id: session.into(),
        server: server.into(),
        uri: uri.into(),
        timeout_ms: 30_000,
        ..Default::default()
    }
}

async fn create_session(
    engine: &mut EngineServiceClient<Channel>,
    servers: &[&str],
    mode: pb::PermissionMode,
) -> String {
    engine
        .create_session(pb::CreateSessionRequest {
            enabled_servers: servers.iter().map(|s| s.to_string()).collect(),
            permission_mode: mode as i32,
            roots: vec![],
        })
        .await
        .expect("CreateSession")
        .into_inner()
        .id
}

#[tokio::test(flavor = "multi_thread")]
async fn engines_list_read_and_attach_resources_of_every_server_in_both_eras() {
    let _heavy = HEAVY.lock().await;
    let gw = gateway().await;
    let mut engine = gw.engine().await;

    // Listing in pages of 7 across four servers: every entry once, servers
    // by name, each server's resources before its templates.
    let (resources, templates) = all_resources(&mut engine, "", "", 7).await.unwrap();
    let (all, all_templates) = all_resources(&mut engine, "", "", 1000).await.unwrap();
    let key = |r: &pb::Resource| (r.server.clone(), r.uri.clone());
    assert_eq!(
        resources.iter().map(key).collect::<Vec<_>>(),
        all.iter().map(key).collect::<Vec<_>>(),
        "paging changes nothing"
    );
    assert_eq!(templates.len(), all_templates.len());
    assert_eq!(all.len(), EVERYTHING_RESOURCES + 3 * ORDERS_RESOURCES);
    let servers: Vec<&str> = all.iter().map(|r| r.server.as_str()).collect();
    let mut sorted = servers.clone();
    sorted.sort();
    assert_eq!(servers, sorted, "servers in name order");
    // The reference server pages its own list by 10: every page followed.
    let orders: Vec<&pb::Resource> = all.iter().filter(|r| r.server == "orders").collect();
    assert!(
        orders.iter().any(|r| r.uri == "orders://orders/O-1025"),
        "the last upstream page"
    );
    let mut uris: Vec<&str> = orders.iter().map(|r| r.uri.as_str()).collect();
    uris.dedup();
    assert_eq!(uris.len(), ORDERS_RESOURCES, "no entry twice");
    let t: Vec<(&str, &str)> = all_templates
        .iter()
        .map(|t| (t.server.as_str(), t.uri_template.as_str()))
        .collect();
    assert!(
        t.contains(&("orders", "orders://orders/{order_id}")),
        "{t:?}"
    );
    assert!(
        t.contains(&("everything", "demo://resource/dynamic/text/{resourceId}")),
        "{t:?}"
    );
    let pdf = orders
        .iter()
        .find(|r| r.uri == "orders://invoices/INV-1.pdf")
        .expect("the invoice is listed");
    assert_eq!(pdf.mime_type, "application/pdf");

    // One server only; a bad cursor; an unknown server.
    let (only, _) = all_resources(&mut engine, "", "everything", 3)
        .await
        .unwrap();
    assert_eq!(only.len(), EVERYTHING_RESOURCES);
    for bad in ["garbage", "c1.e30", "c1.!!"] {
        let e = engine
            .list_resources(pb::ListResourcesRequest {
                cursor: bad.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad}: {e:?}");
        assert!(e.message().starts_with("cursor:"), "{}", e.message());
    }
    let e = engine
        .list_resources(pb::ListResourcesRequest {
            server: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");

    // A short text is inline.
    let r = engine
        .read_resource(read_request(
            "everything",
            "demo://resource/static/document/architecture.md",
            "",
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(r.attachments.is_empty(), "{:?}", r.attachments.len());
    assert_eq!(r.contents.len(), 1);
    assert!(r.contents[0].text.len() > 100, "{}", r.contents[0].text);
    assert!(r.text.contains(&r.contents[0].text));

    // A text over 20,000 characters is an attachment with its beginning in
    // the model text; a PDF is an attachment; names are generated.
    for server in ["orders", "orders-legacy", "orders-http"] {
        let r = engine
            .read_resource(read_request(server, "orders://catalog/full.md", ""))
            .await
            .unwrap_or_else(|e| panic!("{server}: {e:?}"))
            .into_inner();
        assert_eq!(r.attachments.len(), 1, "{server}");
        let a = &r.attachments[0];
        assert!(a.name.starts_with("resource-1."), "{}", a.name);
        assert!(a.data.len() > 20_000, "{}", a.data.len());
        assert_eq!(a.uri, "orders://catalog/full.md");
        assert!(r.text.contains(&a.name), "{}", r.text);
        assert!(
            r.text.len() < 10_000,
            "only the beginning: {}",
            r.text.len()
        );
        let r = engine
            .read_resource(read_request(server, "orders://invoices/INV-1.pdf", ""))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.attachments[0].name, "resource-1.pdf");
        assert!(r.attachments[0].data.starts_with(b"%PDF-"));
        assert_eq!(r.contents[0].attachment, "resource-1.pdf");
    }

    // Several 5 MB PDFs at once, each intact.
    let reads = (0..4).map(|i| {
        let mut engine = engine.clone();
        let server = ["orders", "orders-legacy", "orders-http", "orders"][i];
        async move {
            engine
                .read_resource(read_request(server, "orders://invoices/large.pdf", ""))
                .await
                .map(|r| r.into_inner())
        }
    });
    for r in futures::future::join_all(reads).await {
        let r = r.expect("a large read");
        let a = &r.attachments[0];
        assert_eq!(a.data.len(), 5_000_000);
        assert_eq!(a.size_bytes, 5_000_000);
        assert!(a.data.starts_with(b"%PDF-") && a.data.ends_with(b"%%EOF\n"));
    }

    // AttachResource: text is an attachment too.
    let r = engine
        .attach_resource(read_request(
            "everything",
            "demo://resource/static/document/architecture.md",
            "",
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.attachments.len(), 1);
    assert!(r.attachments[0].name.starts_with("resource-1."));

    // Not found, whatever code the server answers, naming server and URI;
    // URIs are byte-exact.
    for server in ["orders", "orders-legacy", "orders-http"] {
        let e = engine
            .read_resource(read_request(server, "orders://nope/a b%20c", ""))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{server}: {e:?}");
        assert!(
            e.message().contains("resource not found")
                && e.message().contains(server)
                && e.message().contains("orders://nope/a b%20c"),
            "{}",
            e.message()
        );
    }
    let e = engine
        .read_resource(read_request("nope", "x://y", ""))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    let e = engine
        .read_resource(read_request("orders", "", ""))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("uri"), "{}", e.message());
    // `meta_json` as a call's: an object, nested within bounds, its numbers
    // exact; refused naming it, before anything reaches the server.
    let deep = format!("{{\"x\":{}{}}}", "[".repeat(130), "]".repeat(130));
    for (meta, says) in [
        (
            deep.as_str(),
            "meta_json: arrays and objects nest more than 120 levels deep",
        ),
        ("[1]", "meta_json: must be a JSON object"),
        (
            r#"{"n": 18446744073709551616}"#,
            "meta_json: the integer 18446744073709551616 is beyond 64 bits",
        ),
    ] {
        let mut r = read_request("orders", "orders://catalog/skus.json", "");
        r.meta_json = meta.into();
        let e = engine.read_resource(r).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().starts_with(says), "{}", e.message());
    }

    // A session sees its servers only.
    let session = create_session(&mut engine, &["everything"], pb::PermissionMode::Ask).await;
    let (mine, _) = all_resources(&mut engine, &session, "", 1000)
        .await
        .unwrap();
    assert!(mine.iter().all(|r| r.server == "everything"));
    assert_eq!(mine.len(), EVERYTHING_RESOURCES);
    let e = engine
        .read_resource(read_request(
            "orders",
            "orders://catalog/skus.json",
            &session,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");

    // The admin view counts them.
    let status = ok_json(
        &gw.cli(&["servers", "list", "--json"]).await,
        "servers list",
    );
    let orders = status
        .as_array()
        .or_else(|| status["servers"].as_array())
        .and_then(|l| l.iter().find(|s| s["name"] == "orders").cloned())
        .expect("orders listed");
    assert_eq!(orders["resourceCount"], ORDERS_RESOURCES);
    assert_eq!(orders["resourceTemplateCount"], 2);
    assert!(orders["promptCount"].as_u64().unwrap() >= 5, "{orders}");

    // Metrics: reads by server and outcome, and bytes.
    let ok = scrape(
        &gw.http_addr,
        "switchyard_control_plane_resource_reads_total",
        &[("server", "orders"), ("outcome", "ok")],
    )
    .await;
    assert!(ok >= 3.0, "{ok}");
    let not_found = scrape(
        &gw.http_addr,
        "switchyard_control_plane_resource_reads_total",
        &[("server", "orders-legacy"), ("outcome", "not_found")],
    )
    .await;
    assert_eq!(not_found, 1.0);
    let bytes = scrape(
        &gw.http_addr,
        "switchyard_control_plane_resource_read_bytes_total",
        &[("server", "orders")],
    )
    .await;
    assert!(bytes >= 10_000_000.0, "{bytes}");

    // The CLI: list, read to a file, read to stdout.
    let listed = ok_json(
        &gw.cli(&["resources", "--server", "everything", "--json"])
            .await,
        "resources",
    );
    assert_eq!(
        listed["resources"].as_array().unwrap().len(),
        EVERYTHING_RESOURCES
    );
    assert_eq!(listed["resourceTemplates"].as_array().unwrap().len(), 2);
    let file = gw.dir.path().join("invoice.pdf");
    ok_stdout(
        &gw.cli(&[
            "read",
            "orders",
            "orders://invoices/INV-1.pdf",
            "-o",
            file.to_str().unwrap(),
        ])
        .await,
        "read -o",
    );
    assert!(std::fs::read(&file).unwrap().starts_with(b"%PDF-"));
    let text = ok_stdout(
        &gw.cli(&["read", "orders", "orders://policies/returns.md"])
            .await,
        "read",
    );
    assert!(!text.trim().is_empty());
    let out = gw.cli(&["read", "orders", "orders://nope"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("resource not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn prompts_completions_gateway_tools_mrtr_and_change_events() {
    let _heavy = HEAVY.lock().await;
    let gw = gateway().await;
    let mut engine = gw.engine().await;

    // Prompts of every server, paged.
    let mut prompts = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = engine
            .list_prompts(pb::ListPromptsRequest {
                cursor: std::mem::take(&mut cursor),
                page_size: 3,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(page.prompts.len() <= 3);
        prompts.extend(page.prompts);
        if page.next_cursor.is_empty() {
            break;
        }
        cursor = page.next_cursor;
    }
    let names: Vec<(&str, &str)> = prompts
        .iter()
        .map(|p| (p.server.as_str(), p.name.as_str()))
        .collect();
    for want in [
        ("everything", "args-prompt"),
        ("everything", "resource-prompt"),
        ("orders", "summarize_order"),
        ("orders-http", "order_with_chart"),
    ] {
        assert!(names.contains(&want), "{want:?} in {names:?}");
    }
    let args = prompts
        .iter()
        .find(|p| p.server == "everything" && p.name == "args-prompt")
        .unwrap();
    assert!(
        args.arguments
            .iter()
            .any(|a| a.name == "city" && a.required)
    );

    // Get: text; an embedded blob; an image and audio; a link.
    let get = |server: &str, name: &str, args: &[(&str, &str)]| pb::GetPromptRequest {
        server: server.into(),
        name: name.into(),
        arguments: args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<HashMap<_, _>>(),
        timeout_ms: 30_000,
        ..Default::default()
    };
    let p = engine
        .get_prompt(get("everything", "args-prompt", &[("city", "Paris")]))
        .await
        .unwrap()
        .into_inner();
    assert!(p.text.contains("Paris"), "{}", p.text);
    let p = engine
        .get_prompt(get(
            "everything",
            "resource-prompt",
            &[("resourceType", "Blob"), ("resourceId", "2")],
        ))
        .await
        .unwrap()
        .into_inner();
    let embedded = p
        .messages
        .iter()
        .find(|m| m.r#type == "resource")
        .expect("an embedded resource");
    assert!(embedded.attachment.starts_with("prompt-"), "{embedded:?}");
    assert_eq!(embedded.uri, "demo://resource/dynamic/blob/2");
    for server in ["orders", "orders-legacy", "orders-http"] {
        let p = engine
            .get_prompt(get(server, "order_with_chart", &[("order_id", "O-1001")]))
            .await
            .unwrap_or_else(|e| panic!("{server}: {e:?}"))
            .into_inner();
        let kinds: Vec<&str> = p.messages.iter().map(|m| m.r#type.as_str()).collect();
        assert!(
            kinds.contains(&"image") && kinds.contains(&"audio"),
            "{kinds:?}"
        );
        let mimes: Vec<&str> = p.attachments.iter().map(|a| a.mime_type.as_str()).collect();
        assert!(mimes.contains(&"image/png"), "{mimes:?}");
        assert!(p.attachments.iter().all(|a| a.name.starts_with("prompt-")));
        let p = engine
            .get_prompt(get(server, "order_links", &[("order_id", "O-1001")]))
            .await
            .unwrap()
            .into_inner();
        let link = p
            .messages
            .iter()
            .find(|m| m.r#type == "resource_link")
            .expect("a resource_link");
        assert!(
            link.attachment.is_empty() && !link.uri.is_empty(),
            "{link:?}"
        );
    }
    // Unknown prompt; missing argument.
    let e = engine
        .get_prompt(get("orders", "nope", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = engine
        .get_prompt(get("orders", "summarize_order", &[]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    // Completions of a prompt argument and a template variable.
    let c = engine
        .complete(pb::CompleteRequest {
            server: "everything".into(),
            ref_type: "ref/prompt".into(),
            name: "completable-prompt".into(),
            argument: "department".into(),
            value: "Eng".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        c.values.iter().any(|v| v == "Engineering"),
        "{:?}",
        c.values
    );
    let c = engine
        .complete(pb::CompleteRequest {
            server: "orders".into(),
            ref_type: "ref/resource".into(),
            name: "orders://orders/{order_id}".into(),
            argument: "order_id".into(),
            value: "O-100".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(c.values.iter().any(|v| v == "O-1001"), "{:?}", c.values);
    let e = engine
        .complete(pb::CompleteRequest {
            server: "orders".into(),
            ref_type: "prompt".into(),
            name: "x".into(),
            argument: "y".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    // Only what the server lists is completed.
    for (ref_type, name) in [
        ("ref/prompt", "no-such-prompt"),
        ("ref/resource", "orders://nope/{x}"),
    ] {
        let e = engine
            .complete(pb::CompleteRequest {
                server: "orders".into(),
                ref_type: ref_type.into(),
                name: name.into(),
                argument: "x".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{e:?}");
        assert!(e.message().contains(name), "{}", e.message());
    }

    // The gateway tools: offered to a read-only session, paged, read.
    let session = create_session(
        &mut engine,
        &["orders", "everything"],
        pb::PermissionMode::ReadOnly,
    )
    .await;
    let names = tool_names(&mut engine, &session).await;
    assert!(
        names.contains(&"mcp_resources".to_string())
            && names.contains(&"mcp_resource_read".to_string()),
        "{names:?}"
    );
    let mut seen = 0;
    let mut args = r#"{"server":"orders"}"#.to_string();
    loop {
        let r = engine
            .call_tool(call_request("mcp_resources", &args, &session))
            .await
            .unwrap()
            .into_inner();
        let page: Value = serde_json::from_str(&r.text).expect("the model reads JSON");
        seen += page["resources"].as_array().unwrap().len();
        match page["nextCursor"].as_str() {
            Some(c) => args = serde_json::json!({"server": "orders", "cursor": c}).to_string(),
            None => break,
        }
    }
    assert_eq!(seen, ORDERS_RESOURCES);
    let r = engine
        .call_tool(call_request(
            "mcp_resource_read",
            r#"{"server":"orders","uri":"orders://invoices/INV-1.pdf"}"#,
            &session,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.is_error);
    assert_eq!(r.attachments.len(), 1);
    assert!(r.text.contains("resource-1.pdf"), "{}", r.text);
    // A server the session does not enable; a missing argument.
    let e = engine
        .call_tool(call_request(
            "mcp_resource_read",
            r#"{"server":"orders-http","uri":"orders://catalog/skus.json"}"#,
            &session,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let e = engine
        .call_tool(call_request(
            "mcp_resource_read",
            r#"{"server":"orders"}"#,
            &session,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("`uri` is required"), "{}", e.message());
    // An administrator's policy per server: reads of `orders` disabled, and
    // `orders` left out of listings; `everything` is not touched.
    ok_stdout(
        &gw.cli(&["policy", "set", "orders", "mcp_resource_read", "disabled"])
            .await,
        "policy set mcp_resource_read",
    );
    ok_stdout(
        &gw.cli(&["policy", "set", "orders", "mcp_resources", "disabled"])
            .await,
        "policy set mcp_resources",
    );
    let e = engine
        .call_tool(call_request(
            "mcp_resource_read",
            r#"{"server":"orders","uri":"orders://catalog/skus.json"}"#,
            &session,
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("disabled"), "{}", e.message());
    let r = engine
        .call_tool(call_request("mcp_resources", "{}", &session))
        .await
        .unwrap()
        .into_inner();
    let page: Value = serde_json::from_str(&r.text).unwrap();
    let listed: Vec<&str> = page["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["server"].as_str().unwrap())
        .collect();
    assert!(
        !listed.is_empty() && listed.iter().all(|s| *s == "everything"),
        "{listed:?}"
    );
    engine
        .call_tool(call_request(
            "mcp_resource_read",
            r#"{"server":"everything","uri":"demo://resource/static/document/features.md"}"#,
            &session,
        ))
        .await
        .expect("another server's reads still go");
    for tool in ["mcp_resource_read", "mcp_resources"] {
        ok_stdout(
            &gw.cli(&["policy", "clear", "orders", tool]).await,
            "policy clear",
        );
    }

    // A session none of whose servers has resources is not offered them;
    // a server without resources is not asked.
    let bare = create_session(&mut engine, &["orders-none"], pb::PermissionMode::Auto).await;
    let names = tool_names(&mut engine, &bare).await;
    assert!(!names.contains(&"mcp_resources".to_string()), "{names:?}");
    let e = engine
        .call_tool(call_request("mcp_resources", "{}", &bare))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let e = engine
        .read_resource(read_request(
            "orders-none",
            "orders://catalog/skus.json",
            "",
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("has no resources"), "{}", e.message());
    // An unknown prompt is counted.
    let not_found = scrape(
        &gw.http_addr,
        "switchyard_control_plane_prompt_gets_total",
        &[("server", "orders"), ("outcome", "not_found")],
    )
    .await;
    assert_eq!(not_found, 1.0);

    // Audited and counted as tool calls.
    let calls = scrape(
        &gw.http_addr,
        "switchyard_control_plane_calls_total",
        &[("server", "orders"), ("outcome", "ok")],
    )
    .await;
    assert!(calls >= 1.0, "{calls}");

    // Asking first, in both eras: MRTR rounds (2026-07-28) and an
    // elicitation during the request (2025-11-25) reach the session's
    // user, on `prompts/get` and on `resources/read`; the server's
    // `roots/list` is answered from the session's roots.
    for server in ["orders", "orders-legacy", "orders-http"] {
        let asked = engine
            .create_session(pb::CreateSessionRequest {
                enabled_servers: vec![server.into()],
                permission_mode: pb::PermissionMode::Auto as i32,
                roots: vec![pb::Root {
                    uri: "file:///work/orders".into(),
                    name: "orders".into(),
                }],
            })
            .await
            .unwrap()
            .into_inner()
            .id;
        let prompt = {
            let mut engine = engine.clone();
            let mut request = get(server, "confirm_refund", &[("order_id", "O-1002")]);
            request.session_id = asked.clone();
            tokio::spawn(async move { engine.get_prompt(request).await })
        };
        answer_form(&mut engine, &asked, serde_json::json!({"confirm": true})).await;
        let p = tokio::time::timeout(LIMIT, prompt)
            .await
            .expect("the prompt after the answer")
            .unwrap()
            .unwrap_or_else(|e| panic!("{server}: GetPrompt: {e:?}"))
            .into_inner();
        assert!(
            p.text.contains("The user confirmed the refund"),
            "{server}: {}",
            p.text
        );
        let read = {
            let mut engine = engine.clone();
            let request = read_request(server, "orders://private/notes", &asked);
            tokio::spawn(async move { engine.read_resource(request).await })
        };
        answer_form(
            &mut engine,
            &asked,
            serde_json::json!({"reason": "audit 42"}),
        )
        .await;
        let r = tokio::time::timeout(LIMIT, read)
            .await
            .expect("the read after the answer")
            .unwrap()
            .unwrap_or_else(|e| panic!("{server}: ReadResource: {e:?}"))
            .into_inner();
        assert!(
            r.text.contains("Access reason: audit 42"),
            "{server}: {}",
            r.text
        );
        assert!(
            r.text.contains("file:///work/orders"),
            "{server}: roots: {}",
            r.text
        );
    }

    // An engine that gives up on a read (here, while the server asks its
    // user): the read is still counted, as cancelled.
    let quitter = create_session(&mut engine, &["orders"], pb::PermissionMode::Auto).await;
    let mut request =
        tonic::Request::new(read_request("orders", "orders://private/notes", &quitter));
    request.set_timeout(Duration::from_millis(1500));
    let e = engine.read_resource(request).await.unwrap_err();
    assert!(
        matches!(e.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{e:?}"
    );
    eventually("the abandoned read counted", LIMIT, || async {
        match scrape(
            &gw.http_addr,
            "switchyard_control_plane_resource_reads_total",
            &[("server", "orders"), ("outcome", "cancelled")],
        )
        .await
        {
            1.0 => Ok(()),
            n => Err(format!("{n}")),
        }
    })
    .await;

    // A resource added by the server: `resources.changed` on the session's
    // events, and the new resource listed.
    let watcher = create_session(&mut engine, &["orders-legacy"], pb::PermissionMode::Auto).await;
    let mut events = engine
        .subscribe_events(pb::SubscribeEventsRequest {
            session_id: watcher.clone(),
            background_after_ms: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let r = engine
        .call_tool(call_request("orders-legacy__add_resource", "{}", &watcher))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.is_error, "{}", r.result_json);
    let (mut resources_changed, mut prompts_changed) = (false, false);
    tokio::time::timeout(Duration::from_secs(20), async {
        while !(resources_changed && prompts_changed) {
            let ev = events.message().await.unwrap().expect("an event");
            let data: Value = serde_json::from_str(&ev.data_json).unwrap();
            match ev.r#type.as_str() {
                "resources.changed" => {
                    assert_eq!(data["server"], "orders-legacy");
                    assert!(data["resourcesUpdatedAt"].as_i64().unwrap() > 0);
                    resources_changed = true;
                }
                "prompts.changed" => prompts_changed = true,
                _ => {}
            }
        }
    })
    .await
    .expect("resources.changed and prompts.changed");
    let (now, _) = all_resources(&mut engine, &watcher, "", 1000)
        .await
        .unwrap();
    assert_eq!(now.len(), ORDERS_RESOURCES + 1);

    // The CLI.
    let listed = ok_json(&gw.cli(&["prompts", "--json"]).await, "prompts");
    assert!(listed["prompts"].as_array().unwrap().len() >= 9);
    let text = ok_stdout(
        &gw.cli(&["prompt", "everything", "args-prompt", "--arg", "city=Lyon"])
            .await,
        "prompt",
    );
    assert!(text.contains("Lyon"), "{text}");
    let out = gw
        .cli(&["prompt", "everything", "args-prompt", "--arg", "city"])
        .await;
    assert_eq!(out.status.code(), Some(64));
    gw.stop().await;
}
