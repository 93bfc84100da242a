//! Stage E (`--resources`), driven against the real binary by the raw
//! JSON-RPC client of `common` over stdio and Streamable HTTP, in both
//! eras: text and binary resources, `resources/list` paging, templates and
//! completions, prompts and their content blocks, resource-not-found codes,
//! the `add_resource` list_changed trigger (2025-11-25: on the connection or
//! the GET stream; 2026-07-28: on `subscriptions/listen` streams that opted
//! in), MRTR (2026-07-28) and elicitation during the request (2025-11-25)
//! for `confirm_refund` and `orders://private/notes`, and `--no-tools`.

use base64::{Engine as _, engine::general_purpose::STANDARD};
use serde_json::{Value, json};

use crate::common::{Client, Era, HttpServer, Link, assert_error, field_strs, modern_meta};

const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
const RESOURCES_CHANGED: &str = "notifications/resources/list_changed";
const PROMPTS_CHANGED: &str = "notifications/prompts/list_changed";
/// Resources of a fresh `--resources` server: 8 documents, 25 orders, 3 customers.
const RESOURCE_COUNT: usize = 36;

/// Form elicitation and roots.
fn full_caps() -> Value {
    json!({"elicitation": {"form": {}}, "roots": {}})
}

// ---- the client's resources helpers -----------------------------------------

impl Client {
    /// Every item of a paginated list, and the number of pages.
    async fn list_all(&mut self, method: &str, key: &str) -> (Vec<Value>, usize) {
        let mut items = Vec::new();
        let mut pages = 0;
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                None => json!({}),
                Some(cursor) => json!({"cursor": cursor}),
            };
            let page = self.ok(method, params).await;
            pages += 1;
            let page_items = page[key].as_array().unwrap_or_else(|| panic!("{page}"));
            assert!(page_items.len() <= 10, "page size: {page}");
            items.extend(page_items.iter().cloned());
            match page["nextCursor"].as_str() {
                Some(next) => {
                    assert_eq!(page_items.len(), 10, "a non-final page is full: {page}");
                    cursor = Some(next.to_owned());
                }
                None => break,
            }
            assert!(pages < 100, "{method} never ends");
        }
        (items, pages)
    }

    async fn read(&mut self, uri: &str) -> Value {
        let result = self.ok("resources/read", json!({"uri": uri})).await;
        let contents = result["contents"].as_array().expect("contents");
        assert_eq!(contents.len(), 1, "{result}");
        assert_eq!(contents[0]["uri"], uri);
        contents[0].clone()
    }

    async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.ok("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }

    async fn complete(&mut self, reference: Value, name: &str, value: &str) -> Value {
        let params = json!({"ref": reference, "argument": {"name": name, "value": value}});
        self.ok("completion/complete", params).await["completion"].clone()
    }
}

fn decode(base64: &Value) -> Vec<u8> {
    STANDARD
        .decode(base64.as_str().expect("base64 text"))
        .expect("valid base64")
}

fn texts(messages: &Value) -> Vec<String> {
    messages
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["content"]["type"] == "text")
        .map(|m| m["content"]["text"].as_str().unwrap().to_owned())
        .collect()
}

// ---- scenarios, each run per transport and era ------------------------------

/// `resources`, `prompts` (both `listChanged`) and `completions` declared.
fn declares_capabilities(client: &Client) {
    let caps = &client.opened["capabilities"];
    assert_eq!(caps["resources"], json!({"listChanged": true}), "{caps}");
    assert_eq!(caps["prompts"], json!({"listChanged": true}), "{caps}");
    assert_eq!(caps["completions"], json!({}), "{caps}");
    assert_eq!(caps["tools"], json!({}), "{caps}");
}

/// `resources/list`: 36 resources in pages of 10, every page cached
/// publicly in 2026-07-28; invalid cursors are `-32602`. Templates and
/// prompts fit one page.
async fn lists_in_pages(client: &mut Client) {
    let first = client.ok("resources/list", json!({})).await;
    match client.era {
        Era::Modern => {
            assert_eq!(first["resultType"], "complete", "{first}");
            assert_eq!(first["ttlMs"], 0, "{first}");
            assert_eq!(first["cacheScope"], "public", "{first}");
        }
        Era::Legacy => {
            for key in ["resultType", "ttlMs", "cacheScope"] {
                assert!(first.get(key).is_none(), "{key}: {first}");
            }
        }
    }
    let (resources, pages) = client.list_all("resources/list", "resources").await;
    assert_eq!(resources.len(), RESOURCE_COUNT);
    assert_eq!(pages, 4);
    let uris: Vec<&str> = resources
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    let mut unique = uris.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), uris.len(), "duplicates in {uris:?}");
    for n in 1001..=1025 {
        let uri = format!("orders://orders/O-{n}");
        let order = resources.iter().find(|r| r["uri"] == uri).expect(&uri);
        assert_eq!(order["mimeType"], "application/json");
        assert_eq!(order["name"], format!("O-{n}"));
    }
    let find = |uri: &str| {
        resources
            .iter()
            .find(|r| r["uri"] == uri)
            .expect(uri)
            .clone()
    };
    assert_eq!(
        find("orders://catalog/full.md")["mimeType"],
        "text/markdown"
    );
    assert!(find("orders://catalog/full.md")["size"].as_u64().unwrap() > 20_000);
    assert_eq!(
        find("orders://invoices/INV-1.pdf")["mimeType"],
        "application/pdf"
    );
    assert_eq!(
        find("orders://customers/C-2/summary")["mimeType"],
        "text/plain"
    );

    let second = first["nextCursor"].as_str().expect("a next cursor");
    for cursor in ["not-a-cursor", "%%%", "", "cmVzb3VyY2VzOjEwMDA"] {
        let error = client
            .err("resources/list", json!({"cursor": cursor}))
            .await;
        assert_eq!(error["code"], -32602, "{cursor}: {error}");
    }
    // A resources cursor is not a prompts cursor.
    let error = client.err("prompts/list", json!({"cursor": second})).await;
    assert_eq!(error["code"], -32602, "{error}");

    let templates = client.ok("resources/templates/list", json!({})).await;
    assert!(templates.get("nextCursor").is_none(), "{templates}");
    let templates: Vec<(String, String)> = templates["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["uriTemplate"].as_str().unwrap().to_owned(),
                t["mimeType"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        templates,
        [
            (
                "orders://orders/{order_id}".into(),
                "application/json".into()
            ),
            (
                "orders://customers/{customer_id}/summary".into(),
                "text/plain".into()
            ),
        ]
    );
    let prompts = client.ok("prompts/list", json!({})).await;
    assert!(prompts.get("nextCursor").is_none(), "{prompts}");
    let names = field_strs(&prompts["prompts"], "name");
    assert_eq!(
        names,
        [
            "summarize_order",
            "order_with_invoice",
            "order_with_chart",
            "order_links",
            "confirm_refund"
        ]
    );
    let summarize = &prompts["prompts"][0];
    assert_eq!(summarize["arguments"][0]["name"], "order_id");
    assert_eq!(summarize["arguments"][0]["required"], true);
    assert_eq!(summarize["arguments"][1]["name"], "style");
    assert_eq!(summarize["arguments"][1]["required"], false);
    assert!(prompts["prompts"][1].get("arguments").is_none());
}

/// Text resources: Markdown over 20,000 characters, JSON, plain text.
async fn reads_text(client: &mut Client) {
    let catalog = client.read("orders://catalog/full.md").await;
    assert_eq!(catalog["mimeType"], "text/markdown");
    let text = catalog["text"].as_str().expect("text");
    assert!(text.chars().count() > 20_000, "{} chars", text.len());
    assert!(text.starts_with("# Full catalog"));
    assert!(catalog.get("blob").is_none());
    // Deterministic.
    assert_eq!(client.read("orders://catalog/full.md").await, catalog);

    let order = client.read("orders://orders/O-1002").await;
    assert_eq!(order["mimeType"], "application/json");
    let order: Value = serde_json::from_str(order["text"].as_str().unwrap()).expect("JSON");
    assert_eq!(order["id"], "O-1002");
    assert_eq!(order["total_cents"], 4999);
    let history: Value = serde_json::from_str(
        client.read("orders://orders/O-1025").await["text"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(history["id"], "O-1025");

    let summary = client.read("orders://customers/C-1/summary").await;
    assert_eq!(summary["mimeType"], "text/plain");
    let summary = summary["text"].as_str().unwrap();
    assert!(
        summary.starts_with("Customer C-1: Ada Lovelace"),
        "{summary}"
    );
    assert!(
        summary.contains("- O-1002: shipped, 4999 cents"),
        "{summary}"
    );

    let skus = client.read("orders://catalog/skus.json").await;
    let skus: Value = serde_json::from_str(skus["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        skus["skus"][1],
        json!({"sku": "GADGET", "unit_price_cents": 4999})
    );
}

/// Binary resources: the invoice PDF and the large binary of `large` bytes.
async fn reads_binary(client: &mut Client, large: usize) {
    let invoice = client.read("orders://invoices/INV-1.pdf").await;
    assert_eq!(invoice["mimeType"], "application/pdf");
    assert!(invoice.get("text").is_none(), "{invoice}");
    let bytes = decode(&invoice["blob"]);
    assert!(bytes.starts_with(b"%PDF-"), "{:?}", &bytes[..8]);
    assert!(bytes.ends_with(b"%%EOF\n"));
    assert!(
        std::str::from_utf8(&bytes).is_err(),
        "a binary marker after the header"
    );
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("(Invoice INV-1) Tj"), "{text}");

    let blob = client.read("orders://invoices/large.pdf").await;
    assert_eq!(blob["mimeType"], "application/pdf");
    let bytes = decode(&blob["blob"]);
    assert_eq!(bytes.len(), large);
    assert!(bytes.starts_with(b"%PDF-"));
    assert!(bytes.ends_with(b"%%EOF\n"));
    let again = client.read("orders://invoices/large.pdf").await;
    assert!(again["blob"] == blob["blob"], "deterministic");
    let (resources, _) = client.list_all("resources/list", "resources").await;
    let listed = resources
        .iter()
        .find(|r| r["uri"] == "orders://invoices/large.pdf")
        .unwrap();
    assert_eq!(listed["size"], large);
}

/// `resources/read` of an unknown URI: `-32002` (2025-11-25), `-32602`
/// (2026-07-28), with `data.uri`.
async fn unknown_resource(client: &mut Client) {
    let expected = match client.era {
        Era::Legacy => -32002,
        Era::Modern => -32602,
    };
    for uri in [
        "orders://nope",
        "orders://orders/O-9999",
        "orders://customers/C-9/summary",
        "orders://added/R-1",
    ] {
        let error = client.err("resources/read", json!({"uri": uri})).await;
        assert_eq!(error["code"], expected, "{uri}: {error}");
        assert_eq!(error["message"], "Resource not found");
        assert_eq!(error["data"]["uri"], uri);
    }
}

/// `completion/complete` of template and prompt arguments.
async fn completes(client: &mut Client) {
    let orders = json!({"type": "ref/resource", "uri": "orders://orders/{order_id}"});
    let completion = client.complete(orders.clone(), "order_id", "O-102").await;
    assert_eq!(
        completion,
        json!({"values": ["O-1020", "O-1021", "O-1022", "O-1023", "O-1024", "O-1025"],
               "total": 6, "hasMore": false})
    );
    let all = client.complete(orders.clone(), "order_id", "o-").await;
    assert_eq!(all["total"], 25, "case-insensitive prefix: {all}");
    let none = client.complete(orders, "order_id", "X").await;
    assert_eq!(none["values"], json!([]));

    let customers =
        json!({"type": "ref/resource", "uri": "orders://customers/{customer_id}/summary"});
    let completion = client.complete(customers, "customer_id", "C").await;
    assert_eq!(completion["values"], json!(["C-1", "C-2", "C-3"]));

    let summarize = json!({"type": "ref/prompt", "name": "summarize_order"});
    let completion = client
        .complete(summarize.clone(), "order_id", "O-100")
        .await;
    assert_eq!(completion["total"], 9, "{completion}");
    assert_eq!(completion["values"][0], "O-1001");
    let style = client.complete(summarize.clone(), "style", "d").await;
    assert_eq!(style["values"], json!(["detailed"]));

    for (reference, argument) in [
        (
            json!({"type": "ref/resource", "uri": "orders://nope/{x}"}),
            "x",
        ),
        (
            json!({"type": "ref/prompt", "name": "no_such_prompt"}),
            "order_id",
        ),
        (summarize, "colour"),
    ] {
        let params = json!({"ref": reference, "argument": {"name": argument, "value": ""}});
        let error = client.err("completion/complete", params).await;
        assert_eq!(error["code"], -32602, "{reference}: {error}");
    }
}

/// Prompts: text messages, embedded resources, image and audio, resource
/// links, and their `-32602` errors.
async fn gets_prompts(client: &mut Client) {
    let get = |name: &str, arguments: Value| json!({"name": name, "arguments": arguments});
    let brief = client
        .ok(
            "prompts/get",
            get("summarize_order", json!({"order_id": "O-1002"})),
        )
        .await;
    let roles = field_strs(&brief["messages"], "role");
    assert_eq!(roles, ["user", "assistant"]);
    assert_eq!(
        texts(&brief["messages"]),
        [
            "Summarize order O-1002 in one sentence.",
            "Order O-1002 for Ada Lovelace is shipped: 1 item, 4999 cents."
        ]
    );
    let detailed = client
        .ok(
            "prompts/get",
            get(
                "summarize_order",
                json!({"order_id": "O-1003", "style": "detailed"}),
            ),
        )
        .await;
    assert_eq!(
        texts(&detailed["messages"])[1],
        "Order O-1003 for Grace Hopper is pending.\n- 3 x CABLE at 599 cents\n\
         - 1 x WIDGET-L at 2499 cents\nTotal: 4296 cents."
    );

    let invoice = client
        .ok("prompts/get", get("order_with_invoice", json!({})))
        .await;
    let messages = invoice["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{invoice}");
    let pdf = &messages[1]["content"];
    assert_eq!(pdf["type"], "resource");
    assert_eq!(pdf["resource"]["uri"], "orders://invoices/INV-1.pdf");
    assert_eq!(pdf["resource"]["mimeType"], "application/pdf");
    assert!(decode(&pdf["resource"]["blob"]).starts_with(b"%PDF-"));
    let embedded = &messages[2]["content"];
    assert_eq!(embedded["type"], "resource");
    assert_eq!(embedded["resource"]["mimeType"], "application/json");
    let order: Value =
        serde_json::from_str(embedded["resource"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(order["id"], "O-1001");
    // The same bytes as the resource itself.
    let read = client.read("orders://invoices/INV-1.pdf").await;
    assert_eq!(read["blob"], pdf["resource"]["blob"]);

    let chart = client
        .ok("prompts/get", get("order_with_chart", json!({})))
        .await;
    let messages = chart["messages"].as_array().unwrap();
    let image = &messages[1]["content"];
    assert_eq!(image["type"], "image");
    assert_eq!(image["mimeType"], "image/png");
    let png = decode(&image["data"]);
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(&png[12..16], b"IHDR");
    assert_eq!(&png[16..24], &[0, 0, 0, 24, 0, 0, 0, 16], "24 x 16");
    assert!(png.ends_with(b"IEND\xAE\x42\x60\x82"));
    let audio = &messages[2]["content"];
    assert_eq!(audio["type"], "audio");
    assert_eq!(audio["mimeType"], "audio/wav");
    let wav = decode(&audio["data"]);
    assert_eq!(&wav[..4], b"RIFF");
    assert_eq!(&wav[8..12], b"WAVE");
    assert_eq!(
        u32::from_le_bytes(wav[4..8].try_into().unwrap()) as usize,
        wav.len() - 8
    );
    assert_eq!(
        texts(&chart["messages"])[1],
        "Order O-1003 has 2 lines: 3 x CABLE, 1 x WIDGET-L."
    );

    let links = client
        .ok(
            "prompts/get",
            get("order_links", json!({"customer_id": "C-3"})),
        )
        .await;
    let messages = links["messages"].as_array().unwrap();
    let linked: Vec<&str> = messages
        .iter()
        .filter(|m| m["content"]["type"] == "resource_link")
        .map(|m| m["content"]["uri"].as_str().unwrap())
        .collect();
    assert_eq!(linked.first(), Some(&"orders://orders/O-1004"));
    assert_eq!(linked.last(), Some(&"orders://customers/C-3/summary"));
    assert_eq!(messages.len(), linked.len() + 1);
    assert_eq!(messages[1]["content"]["mimeType"], "application/json");
    assert_eq!(messages[1]["content"]["name"], "O-1004");

    for (name, arguments, message) in [
        (
            "no_such_prompt",
            json!({}),
            "unknown prompt: no_such_prompt",
        ),
        (
            "summarize_order",
            json!({}),
            "prompt summarize_order: missing required argument order_id",
        ),
        (
            "confirm_refund",
            json!({}),
            "prompt confirm_refund: missing required argument order_id",
        ),
        (
            "summarize_order",
            json!({"order_id": "O-9999"}),
            "prompt summarize_order: unknown order O-9999",
        ),
        (
            "summarize_order",
            json!({"order_id": "O-1001", "style": "epic"}),
            "style must be brief or detailed",
        ),
    ] {
        let error = client.err("prompts/get", get(name, arguments)).await;
        assert_eq!(error["code"], -32602, "{name}: {error}");
        let text = error["message"].as_str().unwrap();
        assert!(text.contains(message), "{text:?} lacks {message:?}");
    }
}

/// Everything of one era that needs no extra streams, on a fresh server.
async fn run_all(mut client: Client, large: usize) {
    declares_capabilities(&client);
    lists_in_pages(&mut client).await;
    reads_text(&mut client).await;
    reads_binary(&mut client, large).await;
    unknown_resource(&mut client).await;
    completes(&mut client).await;
    gets_prompts(&mut client).await;
}

#[tokio::test]
async fn legacy_resources_over_stdio() {
    let client = Client::stdio(
        Era::Legacy,
        &["--resources", "--large-resource-bytes", "300000"],
        full_caps(),
    )
    .await;
    run_all(client, 300_000).await;
}

#[tokio::test]
async fn modern_resources_over_stdio() {
    let client = Client::stdio(
        Era::Modern,
        &["--resources", "--large-resource-bytes", "300001"],
        full_caps(),
    )
    .await;
    run_all(client, 300_001).await;
}

/// Over HTTP with the default large resource (5,000,000 bytes).
#[tokio::test]
async fn legacy_resources_over_http() {
    let server = HttpServer::start(Era::Legacy, &["--resources"]).await;
    run_all(
        Client::http(&server, Era::Legacy, None, full_caps()).await,
        5_000_000,
    )
    .await;
}

#[tokio::test]
async fn modern_resources_over_http() {
    let server = HttpServer::start(Era::Modern, &["--resources"]).await;
    run_all(
        Client::http(&server, Era::Modern, None, full_caps()).await,
        5_000_000,
    )
    .await;
}

// ---- MRTR (2026-07-28) and elicitation (2025-11-25) --------------------------

fn refund_params(order_id: &str) -> Value {
    json!({"name": "confirm_refund", "arguments": {"order_id": order_id}})
}

fn with_retry(mut params: Value, responses: Value, state: Option<&Value>) -> Value {
    params["inputResponses"] = responses;
    if let Some(state) = state {
        params["requestState"] = state.clone();
    }
    params
}

/// 2026-07-28 `confirm_refund`: `input_required` with a form and a sealed
/// state, then the messages; a missing, altered or foreign state is `-32602`.
async fn modern_confirm_refund(client: &mut Client) {
    let first = client.ok("prompts/get", refund_params("O-1002")).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let ask = &first["inputRequests"]["refund_confirm"];
    assert_eq!(ask["method"], "elicitation/create", "{first}");
    assert_eq!(ask["params"]["mode"], "form");
    assert_eq!(
        ask["params"]["message"],
        "Refund order O-1002 (4999 cents) to Ada Lovelace?"
    );
    assert_eq!(
        ask["params"]["requestedSchema"]["properties"]["confirm"]["type"],
        "boolean"
    );
    let state = first["requestState"].clone();
    assert!(state.as_str().is_some_and(|s| s.contains('.')), "{first}");

    let accept = json!({"refund_confirm": {"action": "accept", "content": {"confirm": true}}});
    let done = client
        .ok(
            "prompts/get",
            with_retry(refund_params("O-1002"), accept.clone(), Some(&state)),
        )
        .await;
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_eq!(
        texts(&done["messages"]),
        [
            "Refund order O-1002 (4999 cents) for Ada Lovelace. The user confirmed the refund.",
            "Refunding 4999 cents for order O-1002."
        ]
    );
    let decline = json!({"refund_confirm": {"action": "decline"}});
    let declined = client
        .ok(
            "prompts/get",
            with_retry(refund_params("O-1002"), decline, Some(&state)),
        )
        .await;
    assert!(
        texts(&declined["messages"])[0].ends_with("did not confirm the refund (action: decline)."),
        "{declined}"
    );
    // A verified state without the answer asks again, with a new state.
    let again = client
        .ok(
            "prompts/get",
            with_retry(refund_params("O-1002"), json!({}), Some(&state)),
        )
        .await;
    assert_eq!(again["resultType"], "input_required");
    assert_ne!(again["requestState"], state);

    let mut tampered = state.as_str().unwrap().to_owned();
    tampered.insert(3, 'x');
    let cases = [
        (
            with_retry(refund_params("O-1002"), accept.clone(), None),
            "missing",
        ),
        (
            with_retry(
                refund_params("O-1002"),
                accept.clone(),
                Some(&json!(tampered)),
            ),
            "tampered",
        ),
        // The state of O-1002 does not confirm a refund of O-1003.
        (
            with_retry(refund_params("O-1003"), accept.clone(), Some(&state)),
            "mismatch",
        ),
    ];
    for (params, reason) in cases {
        let error = client.err("prompts/get", params).await;
        assert_eq!(error["code"], -32602, "{error}");
        assert_eq!(error["data"]["requestState"], reason, "{error}");
    }
    let bad_answer = json!({"refund_confirm": {"action": "maybe"}});
    let error = client
        .err(
            "prompts/get",
            with_retry(refund_params("O-1002"), bad_answer, Some(&state)),
        )
        .await;
    assert_eq!(error["data"]["inputResponse"], "refund_confirm", "{error}");

    // Without form elicitation in the request's capabilities: -32021.
    let mut params = refund_params("O-1002");
    params["_meta"] = modern_meta(&json!({}));
    let error = client.err("prompts/get", params).await;
    assert_eq!(error["code"], -32021, "{error}");
    assert_eq!(
        error["data"]["requiredCapabilities"],
        json!({"elicitation": {"form": {}}})
    );
}

/// 2026-07-28 `orders://private/notes`: a form and `roots/list` (the client
/// has roots), then the notes naming the reason and the roots.
async fn modern_private_notes(client: &mut Client) {
    let uri = "orders://private/notes";
    let first = client.ok("resources/read", json!({"uri": uri})).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert_eq!(
        first["inputRequests"]["notes_access"]["method"],
        "elicitation/create"
    );
    assert_eq!(
        first["inputRequests"]["roots"],
        json!({"method": "roots/list"})
    );
    let state = first["requestState"].clone();
    // The prompt's state is no good here, nor this one there.
    let refund = client.ok("prompts/get", refund_params("O-1002")).await;
    let answers = json!({
        "notes_access": {"action": "accept", "content": {"reason": "audit 7"}},
        "roots": {"roots": [{"uri": "file:///work/shop", "name": "shop"}]},
    });
    let error = client
        .err(
            "resources/read",
            with_retry(
                json!({"uri": uri}),
                answers.clone(),
                Some(&refund["requestState"]),
            ),
        )
        .await;
    assert_eq!(error["data"]["requestState"], "mismatch", "{error}");

    let done = client
        .ok(
            "resources/read",
            with_retry(json!({"uri": uri}), answers, Some(&state)),
        )
        .await;
    assert_eq!(done["resultType"], "complete", "{done}");
    let notes = &done["contents"][0];
    assert_eq!(notes["mimeType"], "text/markdown");
    let text = notes["text"].as_str().unwrap();
    assert!(text.contains("Access reason: audit 7\n"), "{text}");
    assert!(text.contains("Client roots: file:///work/shop\n"), "{text}");

    // Only the form when the request does not declare roots.
    let mut params = json!({"uri": uri});
    params["_meta"] = modern_meta(&json!({"elicitation": {}}));
    let first = client.ok("resources/read", params.clone()).await;
    let keys: Vec<&String> = first["inputRequests"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["notes_access"]);
    let answer = json!({"notes_access": {"action": "cancel"}});
    let hidden = client
        .ok(
            "resources/read",
            with_retry(params, answer, Some(&first["requestState"])),
        )
        .await;
    assert_eq!(
        hidden["contents"][0]["text"],
        "# Private order notes\n\nAccess cancelled: the notes stay hidden.\n"
    );
}

/// 2025-11-25: the same two ask during the request.
async fn legacy_asks_during_the_request(client: &mut Client) {
    let mut asked = Vec::new();
    let reply = client
        .raw(
            "prompts/get",
            refund_params("O-1005"),
            &mut |request: &Value| {
                asked.push(request.clone());
                json!({"action": "accept", "content": {"confirm": true}})
            },
        )
        .await;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["method"], "elicitation/create");
    assert_eq!(asked[0]["params"]["mode"], "form");
    assert_eq!(
        asked[0]["params"]["message"],
        "Refund order O-1005 (2499 cents) to Grace Hopper?"
    );
    let result = &reply["result"];
    assert!(result.get("resultType").is_none(), "{reply}");
    assert_eq!(
        texts(&result["messages"])[1],
        "Refunding 2499 cents for order O-1005."
    );

    let mut methods = Vec::new();
    let reply = client
        .raw(
            "resources/read",
            json!({"uri": "orders://private/notes"}),
            &mut |request: &Value| {
                let method = request["method"].as_str().unwrap().to_owned();
                methods.push(method.clone());
                match method.as_str() {
                    "elicitation/create" => {
                        json!({"action": "accept", "content": {"reason": "audit 9"}})
                    }
                    "roots/list" => json!({"roots": [{"uri": "file:///srv/orders"}]}),
                    other => panic!("unexpected {other}"),
                }
            },
        )
        .await;
    assert_eq!(methods, ["elicitation/create", "roots/list"]);
    let text = reply["result"]["contents"][0]["text"].as_str().unwrap();
    assert!(text.contains("Access reason: audit 9\n"), "{text}");
    assert!(
        text.contains("Client roots: file:///srv/orders\n"),
        "{text}"
    );
}

#[tokio::test]
async fn modern_mrtr_over_stdio() {
    let mut client = Client::stdio(Era::Modern, &["--resources"], full_caps()).await;
    modern_confirm_refund(&mut client).await;
    modern_private_notes(&mut client).await;
}

#[tokio::test]
async fn modern_mrtr_over_http() {
    let server = HttpServer::start(Era::Modern, &["--resources"]).await;
    let mut client = Client::http(&server, Era::Modern, None, full_caps()).await;
    modern_confirm_refund(&mut client).await;
    modern_private_notes(&mut client).await;
}

#[tokio::test]
async fn legacy_elicitation_over_stdio() {
    let mut client = Client::stdio(Era::Legacy, &["--resources"], full_caps()).await;
    legacy_asks_during_the_request(&mut client).await;
    // A client without elicitation: -32600, nothing asked.
    let mut bare = Client::stdio(Era::Legacy, &["--resources"], json!({})).await;
    let error = bare.err("prompts/get", refund_params("O-1002")).await;
    assert_error(&error, -32600, "elicitation (form) capability");
}

#[tokio::test]
async fn legacy_elicitation_over_http() {
    let server = HttpServer::start(Era::Legacy, &["--resources"]).await;
    let mut client = Client::http(&server, Era::Legacy, None, full_caps()).await;
    legacy_asks_during_the_request(&mut client).await;
}

// ---- list_changed -------------------------------------------------------------

fn for_subscription(method: &'static str, id: u64) -> impl Fn(&Value) -> bool {
    move |message: &Value| {
        message["method"] == method && message["params"]["_meta"][SUBSCRIPTION_ID] == id
    }
}

/// After `add_resource` call `n`: the new resource and prompt are listed and
/// served.
async fn sees_added(client: &mut Client, n: u64) {
    let (resources, _) = client.list_all("resources/list", "resources").await;
    assert_eq!(resources.len(), RESOURCE_COUNT + n as usize);
    let uri = format!("orders://added/R-{n}");
    assert_eq!(resources.last().unwrap()["uri"], uri);
    assert_eq!(
        client.read(&uri).await["text"],
        format!("Resource R-{n}, added by add_resource call {n}.")
    );
    let (prompts, _) = client.list_all("prompts/list", "prompts").await;
    assert_eq!(prompts.len(), 5 + n as usize);
    let name = format!("added_prompt_{n}");
    assert_eq!(prompts.last().unwrap()["name"], name);
    let prompt = client.ok("prompts/get", json!({"name": name})).await;
    assert_eq!(
        texts(&prompt["messages"]),
        [format!(
            "Added prompt {n} (added by add_resource call {n})."
        )]
    );
}

fn added(n: u64, sent: u64) -> Value {
    json!({
        "resource_uri": format!("orders://added/R-{n}"),
        "prompt_name": format!("added_prompt_{n}"),
        "notifications_sent": sent,
    })
}

/// 2025-11-25 over stdio: both notifications, unscoped, before the result.
#[tokio::test]
async fn legacy_list_changed_over_stdio() {
    let mut client = Client::stdio(Era::Legacy, &["--resources"], full_caps()).await;
    let result = client.call("add_resource", json!({})).await;
    assert_eq!(result["structuredContent"], added(1, 2));
    let Link::Stdio(peer) = &mut client.link else {
        unreachable!()
    };
    let methods: Vec<Value> = peer.notifications.drain(..).collect();
    assert_eq!(
        methods,
        [
            json!({"jsonrpc": "2.0", "method": RESOURCES_CHANGED}),
            json!({"jsonrpc": "2.0", "method": PROMPTS_CHANGED}),
        ]
    );
    sees_added(&mut client, 1).await;
}

/// 2026-07-28 over stdio: nothing without a listen stream; then each stream
/// gets what it opted in to, tagged with its subscription id.
#[tokio::test]
async fn modern_list_changed_over_stdio() {
    let mut client = Client::stdio(Era::Modern, &["--resources"], full_caps()).await;
    let result = client.call("add_resource", json!({})).await;
    assert_eq!(result["structuredContent"], added(1, 0));

    let both = client.request(
        "subscriptions/listen",
        json!({"notifications": {"resourcesListChanged": true, "promptsListChanged": true,
                                 "toolsListChanged": true}}),
    );
    let prompts_only = client.request(
        "subscriptions/listen",
        json!({"notifications": {"promptsListChanged": true}}),
    );
    let (both_id, prompts_id) = (
        both["id"].as_u64().unwrap(),
        prompts_only["id"].as_u64().unwrap(),
    );
    let Link::Stdio(peer) = &mut client.link else {
        unreachable!()
    };
    peer.send(&both).await;
    peer.send(&prompts_only).await;
    let ack = "notifications/subscriptions/acknowledged";
    let acked = peer.notification(for_subscription(ack, both_id)).await;
    // No toolsListChanged: this server has no --stage-a.
    assert_eq!(
        acked["params"]["notifications"],
        json!({"resourcesListChanged": true, "promptsListChanged": true})
    );
    let acked = peer.notification(for_subscription(ack, prompts_id)).await;
    assert_eq!(
        acked["params"]["notifications"],
        json!({"promptsListChanged": true})
    );

    let result = client.call("add_resource", json!({})).await;
    assert_eq!(result["structuredContent"], added(2, 3));
    let Link::Stdio(peer) = &mut client.link else {
        unreachable!()
    };
    peer.notification(for_subscription(RESOURCES_CHANGED, both_id))
        .await;
    peer.notification(for_subscription(PROMPTS_CHANGED, both_id))
        .await;
    peer.notification(for_subscription(PROMPTS_CHANGED, prompts_id))
        .await;
    sees_added(&mut client, 2).await;
    let Link::Stdio(peer) = &mut client.link else {
        unreachable!()
    };
    // Nothing else came meanwhile: no unscoped notification, no resources
    // one for the prompts-only stream, no second copy.
    assert_eq!(peer.notifications, Vec::<Value>::new());
    for id in [both_id, prompts_id] {
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                            "params": {"requestId": id}});
        peer.send(&cancel).await;
    }
}

/// With `--stage-a` too, one listen stream gets the three lists' changes,
/// each from its own trigger. The triggers follow the listen request without
/// waiting for its acknowledgement: a listen request received before a
/// change gets it, however the server's tasks happen to be scheduled.
#[tokio::test]
async fn modern_list_changed_with_stage_a() {
    let mut client = Client::stdio(Era::Modern, &["--resources", "--stage-a"], full_caps()).await;
    let all = json!({"toolsListChanged": true, "resourcesListChanged": true,
                     "promptsListChanged": true});
    let listen = client.request("subscriptions/listen", json!({"notifications": all}));
    let id = listen["id"].as_u64().unwrap();
    let Link::Stdio(peer) = &mut client.link else {
        unreachable!()
    };
    peer.send(&listen).await;

    let result = client.call("add_resource", json!({})).await;
    assert_eq!(result["structuredContent"], added(1, 2));
    let result = client.call("toggle_extra_tool", json!({})).await;
    assert_eq!(result["structuredContent"]["notifications_sent"], 1);
    let Link::Stdio(peer) = &mut client.link else {
        unreachable!()
    };
    let acked = peer
        .notification(for_subscription(
            "notifications/subscriptions/acknowledged",
            id,
        ))
        .await;
    assert_eq!(acked["params"]["notifications"], all);
    for method in [
        RESOURCES_CHANGED,
        PROMPTS_CHANGED,
        "notifications/tools/list_changed",
    ] {
        peer.notification(for_subscription(method, id)).await;
    }
    assert_eq!(peer.notifications, Vec::<Value>::new());
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": id}});
    peer.send(&cancel).await;
}

/// 2025-11-25 over HTTP: the notifications arrive on the session's GET stream.
#[tokio::test]
async fn legacy_list_changed_over_http() {
    let server = HttpServer::start(Era::Legacy, &["--resources"]).await;
    let mut client = Client::http(&server, Era::Legacy, None, full_caps()).await;
    let Link::Http(peer) = &client.link else {
        unreachable!()
    };
    let mut stream = peer.get_stream().await;
    let result = client.call("add_resource", json!({})).await;
    assert_eq!(result["structuredContent"], added(1, 2));
    let first = stream.next().await;
    let second = stream.next().await;
    assert_eq!(
        first,
        json!({"jsonrpc": "2.0", "method": RESOURCES_CHANGED})
    );
    assert_eq!(second, json!({"jsonrpc": "2.0", "method": PROMPTS_CHANGED}));
    sees_added(&mut client, 1).await;
}

/// 2026-07-28 over HTTP: the notifications arrive on the listen stream.
#[tokio::test]
async fn modern_list_changed_over_http() {
    let server = HttpServer::start(Era::Modern, &["--resources"]).await;
    let mut client = Client::http(&server, Era::Modern, None, full_caps()).await;
    let listen = client.request(
        "subscriptions/listen",
        json!({"notifications": {"resourcesListChanged": true, "promptsListChanged": true}}),
    );
    let id = listen["id"].as_u64().unwrap();
    let Link::Http(peer) = &client.link else {
        unreachable!()
    };
    let mut stream = peer.stream(&listen).await;
    let ack = stream.next().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(ack["params"]["_meta"][SUBSCRIPTION_ID], id);

    let result = client.call("add_resource", json!({})).await;
    assert_eq!(result["structuredContent"], added(1, 2));
    for method in [RESOURCES_CHANGED, PROMPTS_CHANGED] {
        let notification = stream.next().await;
        assert_eq!(notification["method"], method, "{notification}");
        assert_eq!(notification["params"]["_meta"][SUBSCRIPTION_ID], id);
    }
    drop(stream);
    sees_added(&mut client, 1).await;
}

// ---- without tools, without --resources ---------------------------------------

/// `--resources --no-tools`: no `tools` capability, tools methods `-32601`,
/// resources and prompts served.
#[tokio::test]
async fn no_tools_declares_no_tools() {
    for era in [Era::Legacy, Era::Modern] {
        let mut client = Client::stdio(era, &["--resources", "--no-tools"], full_caps()).await;
        let caps = &client.opened["capabilities"];
        assert!(caps.get("tools").is_none(), "{era:?}: {caps}");
        assert_eq!(caps["resources"], json!({"listChanged": true}));
        assert_eq!(caps["prompts"], json!({"listChanged": true}));
        let error = client.err("tools/list", json!({})).await;
        assert_eq!(error["code"], -32601, "{error}");
        let error = client
            .err(
                "tools/call",
                json!({"name": "echo", "arguments": {"message": "x"}}),
            )
            .await;
        assert_eq!(error["code"], -32601, "{error}");
        let (resources, _) = client.list_all("resources/list", "resources").await;
        assert_eq!(resources.len(), RESOURCE_COUNT);
        client
            .ok("prompts/get", json!({"name": "order_with_invoice"}))
            .await;
    }
}

/// Without `--resources` nothing of stage E is declared or served.
#[tokio::test]
async fn without_resources_flag_nothing_is_served() {
    for era in [Era::Legacy, Era::Modern] {
        let mut client = Client::stdio(era, &[], full_caps()).await;
        let caps = &client.opened["capabilities"];
        for key in ["resources", "prompts", "completions"] {
            assert!(caps.get(key).is_none(), "{era:?} {key}: {caps}");
        }
        for method in ["resources/list", "resources/templates/list", "prompts/list"] {
            let error = client.err(method, json!({})).await;
            assert_eq!(error["code"], -32601, "{method}: {error}");
            assert_eq!(error["message"], method, "rmcp's own message");
        }
        for (method, params) in [
            ("resources/read", json!({"uri": "orders://catalog/full.md"})),
            ("prompts/get", json!({"name": "order_with_invoice"})),
            (
                "completion/complete",
                json!({"ref": {"type": "ref/prompt", "name": "summarize_order"},
                       "argument": {"name": "order_id", "value": ""}}),
            ),
        ] {
            let error = client.err(method, params).await;
            assert_eq!(error["code"], -32601, "{method}: {error}");
            assert_eq!(error["message"], method, "rmcp's own message");
        }
        let tools = client.ok("tools/list", json!({})).await;
        assert!(
            tools["tools"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t["name"] != "add_resource"),
            "{tools}"
        );
    }
}
