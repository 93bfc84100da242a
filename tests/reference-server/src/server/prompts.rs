//! Stage E's prompts, served with `--resources`: `summarize_order` (a
//! required and an optional argument, user and assistant text),
//! `order_with_invoice` (embedded resources: the PDF invoice as a blob and an
//! order as text), `order_with_chart` (an image block, a generated PNG, and
//! an audio block, a generated WAV), `order_links` (`resource_link` blocks),
//! `confirm_refund` (asks the client first: 2025-11-25 `elicitation/create`
//! during the request, 2026-07-28 an MRTR `input_required` result with a
//! sealed `requestState`) and the `added_prompt_N` that `add_resource` adds;
//! their `prompts/list` paging, `prompts/get`, and the completion of their
//! arguments. The PNG and WAV encoders are here too.
//!
//! The shared state, paging, completion and MRTR helpers are the sibling
//! [`super::resources`]'s.

use std::fmt::Write as _;

use base64::{Engine as _, engine::general_purpose::STANDARD};
use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{
        CacheScope, CompletionInfo, ContentBlock, ElicitRequestParams, GetPromptRequestParams,
        GetPromptResponse, GetPromptResult, JsonObject, ListPromptsResult, Prompt, PromptArgument,
        PromptMessage, Resource, ResourceContents, Role,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use super::{
    OrderServer,
    resources::{
        Retry, capabilities, complete_values, customer_ids, elicit_legacy, elicit_outcome,
        elicitation, form, form_elicitation_missing, input_required, invoice_pdf, modern,
        order_ids, page, seal_state, supports_form, verify_state,
    },
};
use crate::orders::Order;

/// Default `order_id` of `order_with_chart` (an order with two lines).
const CHART_ORDER: &str = "O-1003";
/// Default `customer_id` of `order_links`.
const LINKS_CUSTOMER: &str = "C-1";
/// The order `order_with_invoice` embeds (the invoice `INV-1` is its).
const INVOICE_ORDER: &str = "O-1001";
/// `inputRequests` key of `confirm_refund` (2026-07-28).
const REFUND_CONFIRM_KEY: &str = "refund_confirm";
/// Name prefix of the prompts `add_resource` adds.
const ADDED_PROMPT: &str = "added_prompt_";

fn argument(name: &str, description: &str, required: bool) -> PromptArgument {
    PromptArgument::new(name)
        .with_description(description)
        .with_required(required)
}

/// The fixed prompts, in list order.
fn fixed_prompts() -> Vec<Prompt> {
    let order_id = |description: &str, required| argument("order_id", description, required);
    vec![
        Prompt::new(
            "summarize_order",
            Some("Asks for a summary of one order and answers it (user and assistant text)."),
            Some(vec![
                order_id(
                    "Order id, e.g. O-1001 (completion/complete knows them).",
                    true,
                )
                .with_title("Order"),
                argument("style", "brief (the default) or detailed.", false).with_title("Style"),
            ]),
        )
        .with_title("Summarize an order"),
        Prompt::new(
            "order_with_invoice",
            Some(
                "Order O-1001 with its invoice embedded: the PDF as a blob resource and the \
                 order as a text resource. No arguments.",
            ),
            None::<Vec<PromptArgument>>,
        )
        .with_title("Order with its invoice"),
        Prompt::new(
            "order_with_chart",
            Some(
                "An order's lines as a bar chart (image/png) and a chime (audio/wav), with text \
                 around them.",
            ),
            Some(vec![order_id("Order id, default O-1003.", false)]),
        )
        .with_title("Order with a chart"),
        Prompt::new(
            "order_links",
            Some("Links (resource_link) to a customer's orders and summary."),
            Some(vec![argument(
                "customer_id",
                "Customer id, default C-1 (completion/complete knows them).",
                false,
            )]),
        )
        .with_title("Links to a customer's orders"),
        Prompt::new(
            "confirm_refund",
            Some(
                "Asks the user to confirm a refund (form elicitation; in 2026-07-28 through \
                 MRTR), then states the outcome.",
            ),
            Some(vec![order_id("Order id to refund, e.g. O-1002.", true)]),
        )
        .with_title("Confirm a refund"),
    ]
}

fn added_prompt(n: u64) -> Prompt {
    Prompt::new(
        format!("{ADDED_PROMPT}{n}"),
        Some(format!("Added by add_resource call {n}. No arguments.")),
        None::<Vec<PromptArgument>>,
    )
    .with_title(format!("Added prompt {n}"))
}

/// A prompt argument as a string: absent is `None`, another type `-32602`.
fn string_arg<'a>(
    prompt: &str,
    arguments: Option<&'a JsonObject>,
    name: &str,
) -> Result<Option<&'a str>, McpError> {
    match arguments.and_then(|args| args.get(name)) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(value)) => Ok(Some(value)),
        Some(other) => Err(McpError::invalid_params(
            format!("prompt {prompt}: argument {name} must be a string, not {other}"),
            None,
        )),
    }
}

fn required_arg<'a>(
    prompt: &str,
    arguments: Option<&'a JsonObject>,
    name: &str,
) -> Result<&'a str, McpError> {
    string_arg(prompt, arguments, name)?.ok_or_else(|| {
        McpError::invalid_params(
            format!("prompt {prompt}: missing required argument {name}"),
            Some(json!({ "argument": name })),
        )
    })
}

fn user(text: impl Into<String>) -> PromptMessage {
    PromptMessage::new_text(Role::User, text)
}

fn assistant(text: impl Into<String>) -> PromptMessage {
    PromptMessage::new_text(Role::Assistant, text)
}

fn status(order: &Order) -> String {
    serde_json::to_value(order.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The form `confirm_refund` asks.
fn refund_form(order: &Order, customer: &str) -> ElicitRequestParams {
    form(
        format!(
            "Refund order {} ({} cents) to {customer}?",
            order.id, order.total_cents
        ),
        json!({
            "type": "object",
            "properties": {
                "confirm": {
                    "type": "boolean",
                    "title": "Confirm refund",
                    "default": false
                }
            },
            "required": ["confirm"]
        }),
    )
}

/// `confirm_refund`'s messages once the client answered `raw` (an `ElicitResult`).
fn refund_messages(
    order: &Order,
    customer: &str,
    raw: &Value,
) -> Result<GetPromptResult, McpError> {
    let (action, content) = elicit_outcome(REFUND_CONFIRM_KEY, raw)?;
    let confirmed = content.is_some_and(|c| c.get("confirm") == Some(&Value::Bool(true)));
    let ask = format!(
        "Refund order {} ({} cents) for {customer}.",
        order.id, order.total_cents
    );
    let messages = if confirmed {
        vec![
            user(format!("{ask} The user confirmed the refund.")),
            assistant(format!(
                "Refunding {} cents for order {}.",
                order.total_cents, order.id
            )),
        ]
    } else {
        vec![
            user(format!(
                "{ask} The user did not confirm the refund (action: {action})."
            )),
            assistant(format!("No refund for order {}.", order.id)),
        ]
    };
    Ok(GetPromptResult::new(messages).with_description(format!("Refund of order {}", order.id)))
}

impl OrderServer {
    /// Whether `name` is a prompt currently listed.
    fn prompt_exists(&self, name: &str) -> bool {
        let added = self.catalogue.as_ref().map_or(0, |c| c.added());
        fixed_prompts().iter().any(|p| p.name == name)
            || name
                .strip_prefix(ADDED_PROMPT)
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| (1..=added).contains(&n))
    }

    /// One `prompts/list` page: the fixed prompts, then the added ones.
    pub(super) fn list_prompts_page(
        &self,
        cursor: Option<&str>,
        modern: bool,
    ) -> Result<ListPromptsResult, McpError> {
        let catalogue = self.catalogue_or_not_found("prompts/list")?;
        let mut all = fixed_prompts();
        all.extend((1..=catalogue.added()).map(added_prompt));
        let (items, next) = page(&all, "prompts", cursor)?;
        let mut result = ListPromptsResult::with_all_items(items);
        result.next_cursor = next;
        if modern {
            result = result.with_ttl_ms(0).with_cache_scope(CacheScope::Public);
        }
        Ok(result)
    }

    /// `completion/complete` of a `ref/prompt` argument: `order_id` (of
    /// `summarize_order`, `order_with_chart`, `confirm_refund`), `style` (of
    /// `summarize_order`) and `customer_id` (of `order_links`). An unknown
    /// prompt or argument is `-32602`.
    pub(super) fn complete_prompt_argument(
        &self,
        prompt: &str,
        argument: &str,
        prefix: &str,
    ) -> Result<CompletionInfo, McpError> {
        self.catalogue_or_not_found("completion/complete")?;
        let candidates = match (prompt, argument) {
            ("summarize_order" | "order_with_chart" | "confirm_refund", "order_id") => {
                order_ids(&self.store)
            }
            ("summarize_order", "style") => vec!["brief".to_owned(), "detailed".to_owned()],
            ("order_links", "customer_id") => customer_ids(&self.store),
            (prompt, argument) if self.prompt_exists(prompt) => {
                return Err(McpError::invalid_params(
                    format!("prompt {prompt} has no argument {argument:?}"),
                    None,
                ));
            }
            (prompt, _) => {
                return Err(McpError::invalid_params(
                    format!("unknown prompt: {prompt}"),
                    None,
                ));
            }
        };
        Ok(complete_values(candidates, prefix))
    }

    /// The order `id` and its customer's name, or `-32602` naming `prompt`.
    fn order_for(&self, prompt: &str, id: &str) -> Result<(Order, String), McpError> {
        let order = self.store.order(id).ok_or_else(|| {
            McpError::invalid_params(
                format!("prompt {prompt}: unknown order {id}"),
                Some(json!({ "argument": "order_id" })),
            )
        })?;
        let customer = self
            .store
            .customer(&order.customer_id)
            .map_or_else(|| order.customer_id.clone(), |c| c.name);
        Ok((order, customer))
    }

    /// `prompts/get`. An unknown prompt, a missing required argument, an
    /// argument that is not a string, an unknown order or customer or an
    /// unknown `style` are `-32602`.
    pub(super) async fn get_order_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let catalogue = self.catalogue_or_not_found("prompts/get")?;
        let name = request.name.as_str();
        let args = request.arguments.as_ref();
        let result = match name {
            "summarize_order" => {
                let id = required_arg(name, args, "order_id")?;
                let style = string_arg(name, args, "style")?.unwrap_or("brief");
                let (order, customer) = self.order_for(name, id)?;
                let items = match order.lines.iter().map(|l| l.quantity).sum::<u32>() {
                    1 => "1 item".to_owned(),
                    n => format!("{n} items"),
                };
                let (ask, answer) = match style {
                    "brief" => (
                        format!("Summarize order {id} in one sentence."),
                        format!(
                            "Order {id} for {customer} is {}: {items}, {} cents.",
                            status(&order),
                            order.total_cents
                        ),
                    ),
                    "detailed" => {
                        let mut answer =
                            format!("Order {id} for {customer} is {}.\n", status(&order));
                        for line in &order.lines {
                            let _ = writeln!(
                                answer,
                                "- {} x {} at {} cents",
                                line.quantity, line.sku, line.unit_price_cents
                            );
                        }
                        let _ = write!(answer, "Total: {} cents.", order.total_cents);
                        (
                            format!("Summarize order {id} in detail, line by line."),
                            answer,
                        )
                    }
                    other => {
                        return Err(McpError::invalid_params(
                            format!(
                                "prompt {name}: style must be brief or detailed, not {other:?}"
                            ),
                            Some(json!({ "argument": "style" })),
                        ));
                    }
                };
                GetPromptResult::new(vec![user(ask), assistant(answer)])
                    .with_description(format!("Summary of order {id} ({style})"))
            }
            "order_with_invoice" => {
                let (order, _) = self.order_for(name, INVOICE_ORDER)?;
                let invoice = ResourceContents::blob(
                    STANDARD.encode(invoice_pdf(&self.store)),
                    "orders://invoices/INV-1.pdf",
                )
                .with_mime_type("application/pdf");
                let order_json = ResourceContents::text(
                    serde_json::to_string_pretty(&order).expect("serialisable"),
                    format!("orders://orders/{}", order.id),
                )
                .with_mime_type("application/json");
                GetPromptResult::new(vec![
                    user(format!("Check invoice INV-1 against order {}.", order.id)),
                    PromptMessage::new(Role::User, ContentBlock::resource(invoice)),
                    PromptMessage::new(Role::User, ContentBlock::resource(order_json)),
                    assistant(format!(
                        "Invoice INV-1 matches order {}: {} cents.",
                        order.id, order.total_cents
                    )),
                ])
                .with_description(format!("Order {} with invoice INV-1", order.id))
            }
            "order_with_chart" => {
                let id = string_arg(name, args, "order_id")?.unwrap_or(CHART_ORDER);
                let (order, _) = self.order_for(name, id)?;
                let quantities: Vec<u32> = order.lines.iter().map(|l| l.quantity).collect();
                let lines: Vec<String> = order
                    .lines
                    .iter()
                    .map(|l| format!("{} x {}", l.quantity, l.sku))
                    .collect();
                GetPromptResult::new(vec![
                    user(format!(
                        "Chart of order {id}: one bar per line, height proportional to the quantity."
                    )),
                    PromptMessage::new(
                        Role::User,
                        ContentBlock::image(STANDARD.encode(chart_png(&quantities)), "image/png"),
                    ),
                    PromptMessage::new(
                        Role::User,
                        ContentBlock::audio(STANDARD.encode(chime_wav()), "audio/wav"),
                    ),
                    assistant(format!(
                        "Order {id} has {} lines: {}.",
                        lines.len(),
                        lines.join(", ")
                    )),
                ])
                .with_description(format!("Chart of order {id}"))
            }
            "order_links" => {
                let id = string_arg(name, args, "customer_id")?.unwrap_or(LINKS_CUSTOMER);
                let customer = self.store.customer(id).ok_or_else(|| {
                    McpError::invalid_params(
                        format!("prompt {name}: unknown customer {id}"),
                        Some(json!({ "argument": "customer_id" })),
                    )
                })?;
                let mut messages = vec![user(format!(
                    "Orders of {} ({id}), as links:",
                    customer.name
                ))];
                for order in self.store.list(Some(id), None) {
                    let link =
                        Resource::new(format!("orders://orders/{}", order.id), order.id.clone())
                            .with_title(format!("Order {}", order.id))
                            .with_mime_type("application/json");
                    messages.push(PromptMessage::new_resource_link(Role::User, link));
                }
                let summary = Resource::new(
                    format!("orders://customers/{id}/summary"),
                    format!("{id} summary"),
                )
                .with_title(format!("Customer {id} ({})", customer.name))
                .with_mime_type("text/plain");
                messages.push(PromptMessage::new_resource_link(Role::User, summary));
                GetPromptResult::new(messages).with_description(format!("Links for customer {id}"))
            }
            "confirm_refund" => {
                let id = required_arg(name, args, "order_id")?;
                let (order, customer) = self.order_for(name, id)?;
                let modern = modern(&context);
                if !supports_form(&capabilities(&context)) {
                    return Err(form_elicitation_missing(
                        modern,
                        "prompts/get of confirm_refund",
                    ));
                }
                let ask = refund_form(&order, &customer);
                if !modern {
                    let raw = elicit_legacy(&context.peer, ask).await?;
                    return Ok(refund_messages(&order, &customer, &raw)?.into());
                }
                let binding =
                    json!({ "method": "prompts/get", "name": name, "order_id": order.id });
                let retry = Retry {
                    responses: request.input_responses.as_ref(),
                    state: request.request_state.as_deref(),
                };
                let verified = verify_state("prompts/get of confirm_refund", &binding, &retry)?;
                match (verified, retry.response(REFUND_CONFIRM_KEY)) {
                    (true, Some(raw)) => refund_messages(&order, &customer, raw)?,
                    _ => {
                        let state = seal_state(catalogue, &binding);
                        return Ok(
                            input_required([(REFUND_CONFIRM_KEY, elicitation(ask))], state).into(),
                        );
                    }
                }
            }
            name if self.prompt_exists(name) => {
                let n = &name[ADDED_PROMPT.len()..];
                GetPromptResult::new(vec![user(format!(
                    "Added prompt {n} (added by add_resource call {n})."
                ))])
                .with_description(format!("Added prompt {n}"))
            }
            name => {
                return Err(McpError::invalid_params(
                    format!("unknown prompt: {name}"),
                    Some(json!({ "name": name })),
                ));
            }
        };
        Ok(result.into())
    }
}

// ---- media -------------------------------------------------------------------

/// CRC-32 (IEEE 802.3, as PNG uses it).
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFF_u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Adler-32 (the zlib checksum).
fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in bytes {
        a = (a + u32::from(byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

/// A zlib stream of `data` in stored (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut blocks = data.chunks(usize::from(u16::MAX)).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xFF, 0xFF]);
    }
    while let Some(block) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = u16::try_from(block.len()).expect("chunks of at most u16::MAX");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    let len = u32::try_from(data.len()).expect("small chunk");
    out.extend_from_slice(&len.to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// Width and height of [`chart_png`], in pixels.
pub const CHART_SIZE: (u32, u32) = (24, 16);

/// A 24 x 16 RGB PNG: up to four bars on white, bar `i` as high as 4 pixels
/// per unit of `quantities[i]` (at most 14).
pub fn chart_png(quantities: &[u32]) -> Vec<u8> {
    const PALETTE: [[u8; 3]; 4] = [[214, 39, 40], [31, 119, 180], [44, 160, 44], [255, 127, 14]];
    let (width, height) = (CHART_SIZE.0 as usize, CHART_SIZE.1 as usize);
    let mut raw = Vec::with_capacity(height * (1 + 3 * width));
    for y in 0..height {
        raw.push(0); // filter type: none
        for x in 0..width {
            let bar = x / 6;
            let bar_height = quantities
                .get(bar)
                .map_or(0, |q| (*q as usize * 4).min(height - 2));
            let filled = (1..=4).contains(&(x % 6)) && height - 1 - y < bar_height;
            raw.extend_from_slice(if filled {
                &PALETTE[bar % PALETTE.len()]
            } else {
                &[255, 255, 255]
            });
        }
    }
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&CHART_SIZE.0.to_be_bytes());
    ihdr.extend_from_slice(&CHART_SIZE.1.to_be_bytes());
    // Bit depth 8, colour type 2 (RGB), deflate, adaptive filtering, no interlace.
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png_chunk(&mut png, b"IHDR", &ihdr);
    png_chunk(&mut png, b"IDAT", &zlib_stored(&raw));
    png_chunk(&mut png, b"IEND", &[]);
    png
}

/// A 0.1 s chime: PCM WAV, mono, 8000 Hz, 8-bit, a 440 Hz square wave.
pub fn chime_wav() -> Vec<u8> {
    const RATE: u32 = 8_000;
    const SAMPLES: u32 = 800;
    let data: Vec<u8> = (0..SAMPLES)
        .map(|i| {
            if (i * 880 / RATE).is_multiple_of(2) {
                192
            } else {
                64
            }
        })
        .collect();
    let len = u32::try_from(data.len()).expect("small");
    let mut wav = b"RIFF".to_vec();
    wav.extend_from_slice(&(36 + len).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&RATE.to_le_bytes());
    wav.extend_from_slice(&RATE.to_le_bytes()); // bytes per second
    wav.extend_from_slice(&1u16.to_le_bytes()); // block align
    wav.extend_from_slice(&8u16.to_le_bytes()); // bits per sample
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&len.to_le_bytes());
    wav.extend_from_slice(&data);
    wav
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_match_known_values() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b"IEND"), 0xAE42_6082);
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }

    #[test]
    fn chart_is_a_well_formed_png() {
        let png = chart_png(&[3, 1]);
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        // Walk the chunks, checking each CRC.
        let mut at = 8;
        let mut kinds = Vec::new();
        while at < png.len() {
            let len = u32::from_be_bytes(png[at..at + 4].try_into().unwrap()) as usize;
            let body = &png[at + 4..at + 8 + len];
            let crc = u32::from_be_bytes(png[at + 8 + len..at + 12 + len].try_into().unwrap());
            assert_eq!(crc32(body), crc);
            kinds.push(String::from_utf8(body[..4].to_vec()).unwrap());
            at += 12 + len;
        }
        assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
        // The stored deflate data is the raw scanlines.
        let idat_start = 8 + 12 + 13 + 8;
        let zlib = &png[idat_start..];
        assert_eq!(&zlib[..2], &[0x78, 0x01]);
        let len = u16::from_le_bytes([zlib[3], zlib[4]]) as usize;
        assert_eq!(len, 16 * (1 + 3 * 24));
    }

    #[test]
    fn chime_is_a_pcm_wav() {
        let wav = chime_wav();
        assert_eq!(&wav[..4], b"RIFF");
        assert_eq!(&wav[8..16], b"WAVEfmt ");
        let riff = u32::from_le_bytes(wav[4..8].try_into().unwrap()) as usize;
        assert_eq!(riff, wav.len() - 8);
        assert_eq!(&wav[36..40], b"data");
    }
}
