//! The fixture's tool table and fixed payloads: tool definitions (names and
//! input schemas as the suite's scenarios name them), the fixed tool
//! results, what each interactive tool asks ([`interaction_flow`]) and
//! answers ([`interaction_text`]), and the resources, resource template,
//! prompts and completions.

use rmcp::{
    ErrorData as McpError, RoleServer,
    model::{CallToolResult, JsonObject, Tool},
    service::RequestContext,
};
use serde_json::{Value, json};

use super::{
    mrtr::{self, Answers, Ask, Flow},
    result_from_json,
    tasks::Support,
};

/// A 2 x 2 RGB PNG (one blue colour), base64.
pub const PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR42mPQztkARAwQCgAhvgUdTiVxPgAAAABJRU5ErkJggg==";
/// 2 ms of 8 kHz 8-bit mono PCM in a WAV container, base64.
pub const WAV_BASE64: &str =
    "UklGRjQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YRAAAACAiJCYgIiQmICIkJiAiJCY";

/// The prompt that answers `prompts/get` with `input_required` (2026-07-28 only).
pub const MRTR_PROMPT: &str = "test_input_required_result_prompt";
/// The prompt `test_trigger_prompt_change` adds and removes.
const DYNAMIC_PROMPT: &str = "test_dynamic_prompt";

/// Which requests a tool is listed to and callable by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    /// Both eras.
    Both,
    /// 2026-07-28 only (`input_required`, tasks).
    Modern,
}

impl Availability {
    pub fn offered(self, modern: bool) -> bool {
        self == Self::Both || modern
    }
}

/// A tool that asks the client (see [`super::mrtr`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interaction {
    Sampling,
    Elicitation,
    Sep1034Defaults,
    Sep1330Enums,
    MissingCapability,
    StreamingElicitation,
    IrElicitation,
    IrSampling,
    IrListRoots,
    IrRequestState,
    IrMultipleInputs,
    IrMultiRound,
    IrTamperedState,
    IrCapabilities,
}

/// How a tool answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A fixed result ([`fixed_result`]).
    Fixed,
    /// `isError: true`.
    Error,
    /// Three log messages 50 ms apart.
    Logging,
    /// Three progress notifications 50 ms apart.
    Progress,
    /// `test_reconnection` (keeps its POST stream open; no disconnect).
    Reconnection,
    /// Echoes its arguments.
    EchoArguments,
    /// Echoes `region` (an `x-mcp-header` parameter).
    EchoRegion,
    /// `Hello, NAME!`.
    Greet,
    /// Toggles `test_dynamic_tool` and notifies.
    TriggerToolChange,
    /// Toggles `test_dynamic_prompt` and notifies.
    TriggerPromptChange,
    /// `test_dynamic_tool` itself.
    Dynamic,
    /// One log message, sent only if the request asked for logs.
    LoggingOnly,
    /// Asks the client first.
    Interaction(Interaction),
    /// A SEP-2663 task tool.
    Task(Support),
}

/// One tool of the fixture.
#[derive(Debug)]
pub struct ToolSpec {
    pub name: &'static str,
    description: &'static str,
    /// The input schema, JSON.
    schema: &'static str,
    pub availability: Availability,
    pub kind: Kind,
}

impl ToolSpec {
    pub fn definition(&self) -> Tool {
        let schema: JsonObject =
            serde_json::from_str(self.schema).expect("a fixture input schema is a JSON object");
        Tool::new(self.name, self.description, schema)
    }
}

const NO_ARGS: &str = r#"{"type":"object","properties":{}}"#;

const fn tool(
    name: &'static str,
    description: &'static str,
    schema: &'static str,
    availability: Availability,
    kind: Kind,
) -> ToolSpec {
    ToolSpec {
        name,
        description,
        schema,
        availability,
        kind,
    }
}

use Availability::{Both, Modern};
use Interaction as I;

/// Every tool, in `tools/list` order.
pub static TOOLS: &[ToolSpec] = &[
    tool(
        "test_simple_text",
        "Returns one text content block.",
        NO_ARGS,
        Both,
        Kind::Fixed,
    ),
    tool(
        "test_image_content",
        "Returns one image content block (PNG).",
        NO_ARGS,
        Both,
        Kind::Fixed,
    ),
    tool(
        "test_audio_content",
        "Returns one audio content block (WAV).",
        NO_ARGS,
        Both,
        Kind::Fixed,
    ),
    tool(
        "test_embedded_resource",
        "Returns one embedded text resource.",
        NO_ARGS,
        Both,
        Kind::Fixed,
    ),
    tool(
        "test_multiple_content_types",
        "Returns text, image and embedded resource content blocks.",
        NO_ARGS,
        Both,
        Kind::Fixed,
    ),
    tool(
        "test_tool_with_logging",
        "Sends three notifications/message (info) 50 ms apart, then returns.",
        NO_ARGS,
        Both,
        Kind::Logging,
    ),
    tool(
        "test_tool_with_progress",
        "Sends notifications/progress 0, 50, 100 of 100 for the request's progressToken; returns the token.",
        NO_ARGS,
        Both,
        Kind::Progress,
    ),
    tool(
        "test_error_handling",
        "Returns a tool error (isError: true).",
        NO_ARGS,
        Both,
        Kind::Error,
    ),
    tool(
        "test_reconnection",
        "SSE polling probe (SEP-1699): returns a text result on its own stream.",
        NO_ARGS,
        Both,
        Kind::Reconnection,
    ),
    tool(
        "test_sampling",
        "Asks the client for a sampling completion of `prompt` and returns it.",
        r#"{"type":"object","properties":{"prompt":{"type":"string","description":"The prompt to send to the LLM"}},"required":["prompt"]}"#,
        Both,
        Kind::Interaction(I::Sampling),
    ),
    tool(
        "test_elicitation",
        "Asks the user (form elicitation: username, email) with `message` and returns the answer.",
        r#"{"type":"object","properties":{"message":{"type":"string","description":"The message to show the user"}},"required":["message"]}"#,
        Both,
        Kind::Interaction(I::Elicitation),
    ),
    tool(
        "test_elicitation_sep1034_defaults",
        "Form elicitation whose fields all carry defaults (SEP-1034).",
        NO_ARGS,
        Both,
        Kind::Interaction(I::Sep1034Defaults),
    ),
    tool(
        "test_elicitation_sep1330_enums",
        "Form elicitation with the five enum schema variants (SEP-1330).",
        NO_ARGS,
        Both,
        Kind::Interaction(I::Sep1330Enums),
    ),
    tool(
        "json_schema_2020_12_tool",
        "Tool with JSON Schema 2020-12 features (SEP-1613, SEP-2106); echoes its arguments.",
        r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},"contactMethod":{"type":"string","enum":["phone","email"]},"phone":{"type":"string"},"email":{"type":"string"}},"allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],"if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},"then":{"required":["phone"]},"else":{"required":["email"]},"additionalProperties":false}"##,
        Both,
        Kind::EchoArguments,
    ),
    tool(
        "test_custom_header",
        "Echoes `region`, which clients also send as the Mcp-Param-Region header (SEP-2243 x-mcp-header).",
        r#"{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region","description":"Mirrored in the Mcp-Param-Region request header"}},"required":["region"]}"#,
        Both,
        Kind::EchoRegion,
    ),
    tool(
        "test_missing_capability",
        "Needs the client's sampling capability (2026-07-28 without it: -32021).",
        NO_ARGS,
        Both,
        Kind::Interaction(I::MissingCapability),
    ),
    tool(
        "test_streaming_elicitation",
        "Asks the user's name: 2025-11-25 as elicitation/create on the request's stream, \
         2026-07-28 as input_required (never a request on the stream).",
        NO_ARGS,
        Both,
        Kind::Interaction(I::StreamingElicitation),
    ),
    tool(
        "test_logging_tool",
        "Sends one notifications/message (info) only if the request asked for logs \
         (2026-07-28: _meta io.modelcontextprotocol/logLevel).",
        NO_ARGS,
        Both,
        Kind::LoggingOnly,
    ),
    tool(
        "test_trigger_tool_change",
        "Adds or removes test_dynamic_tool and sends notifications/tools/list_changed.",
        NO_ARGS,
        Both,
        Kind::TriggerToolChange,
    ),
    tool(
        "test_trigger_prompt_change",
        "Adds or removes test_dynamic_prompt and sends notifications/prompts/list_changed.",
        NO_ARGS,
        Both,
        Kind::TriggerPromptChange,
    ),
    tool(
        "test_dynamic_tool",
        "Listed only while test_trigger_tool_change has added it.",
        NO_ARGS,
        Both,
        Kind::Dynamic,
    ),
    tool(
        "test_input_required_result_elicitation",
        "input_required: form elicitation user_name; then Hello, NAME!",
        NO_ARGS,
        Modern,
        Kind::Interaction(I::IrElicitation),
    ),
    tool(
        "test_input_required_result_sampling",
        "input_required: sampling capital_question; then the sampled text.",
        NO_ARGS,
        Modern,
        Kind::Interaction(I::IrSampling),
    ),
    tool(
        "test_input_required_result_list_roots",
        "input_required: roots/list client_roots; then the number of roots.",
        NO_ARGS,
        Modern,
        Kind::Interaction(I::IrListRoots),
    ),
    tool(
        "test_input_required_result_request_state",
        "input_required with a sealed requestState: elicitation confirm (ok: boolean).",
        NO_ARGS,
        Modern,
        Kind::Interaction(I::IrRequestState),
    ),
    tool(
        "test_input_required_result_multiple_inputs",
        "input_required with elicitation, sampling and roots/list at once, and a requestState.",
        NO_ARGS,
        Modern,
        Kind::Interaction(I::IrMultipleInputs),
    ),
    tool(
        "test_input_required_result_multi_round",
        "Two input_required rounds (step1 name, step2 color), a new requestState each.",
        NO_ARGS,
        Modern,
        Kind::Interaction(I::IrMultiRound),
    ),
    tool(
        "test_input_required_result_tampered_state",
        "input_required with an integrity-protected requestState; a changed state is -32602.",
        NO_ARGS,
        Modern,
        Kind::Interaction(I::IrTamperedState),
    ),
    tool(
        "test_input_required_result_capabilities",
        "input_required asking only what the request's client capabilities declare.",
        NO_ARGS,
        Modern,
        Kind::Interaction(I::IrCapabilities),
    ),
    tool(
        "greet",
        "Synchronous: Hello, NAME!",
        r#"{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}"#,
        Both,
        Kind::Greet,
    ),
    tool(
        "slow_compute",
        "Task support optional: sleeps `seconds`, then Computed LABEL in Ns; a task with the \
         io.modelcontextprotocol/tasks extension, synchronous without it.",
        r#"{"type":"object","properties":{"seconds":{"type":"number","minimum":0,"maximum":600},"label":{"type":"string"}}}"#,
        Both,
        Kind::Task(Support::Optional),
    ),
    tool(
        "failing_job",
        "Task support required: after about a second, a tool execution error (completed, isError).",
        NO_ARGS,
        Modern,
        Kind::Task(Support::Required),
    ),
    tool(
        "protocol_error_job",
        "Task support required: fails with a JSON-RPC error (status failed).",
        NO_ARGS,
        Modern,
        Kind::Task(Support::Required),
    ),
    tool(
        "confirm_delete",
        "Task support required: asks to confirm deleting `filename` (input_required), then answers.",
        r#"{"type":"object","properties":{"filename":{"type":"string"}}}"#,
        Modern,
        Kind::Task(Support::Required),
    ),
    tool(
        "multi_input",
        "Task support required: asks two elicitations at once (first_input, second_input).",
        NO_ARGS,
        Modern,
        Kind::Task(Support::Required),
    ),
    tool(
        "test_tool_with_task",
        "Task support required: asks user_name by input_required, then continues as a task \
         whose result greets that name.",
        NO_ARGS,
        Modern,
        Kind::Task(Support::Required),
    ),
];

/// The result of a [`Kind::Fixed`] tool.
pub fn fixed_result(name: &str) -> CallToolResult {
    let content = match name {
        "test_simple_text" => json!([
            {"type": "text", "text": "This is a simple text response for testing."}
        ]),
        "test_image_content" => json!([
            {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}
        ]),
        "test_audio_content" => json!([
            {"type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav"}
        ]),
        "test_embedded_resource" => json!([{
            "type": "resource",
            "resource": {
                "uri": "test://embedded-resource",
                "mimeType": "text/plain",
                "text": "This is an embedded resource content.",
            },
        }]),
        _ => json!([
            {"type": "text", "text": "Multiple content types test:"},
            {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"},
            {
                "type": "resource",
                "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": json!({"test": "data", "value": 123}).to_string(),
                },
            },
        ]),
    };
    result_from_json(json!({ "content": content }))
}

fn object_schema(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

/// What the interactive tool asks, given its arguments and the request.
pub fn interaction_flow(
    interaction: Interaction,
    args: &JsonObject,
    context: &RequestContext<RoleServer>,
) -> Flow {
    let name_form = || object_schema(json!({"name": {"type": "string"}}), &["name"]);
    let confirm = || {
        Ask::elicit(
            "confirm",
            "Please confirm",
            object_schema(json!({"ok": {"type": "boolean"}}), &["ok"]),
        )
    };
    match interaction {
        I::Sampling => {
            let prompt = args
                .get("prompt")
                .and_then(Value::as_str)
                .unwrap_or("Hello");
            Flow::single(vec![Ask::sample("sampling", prompt, 100)])
        }
        I::Elicitation => {
            let message = args
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("Please provide your information");
            Flow::single(vec![Ask::elicit(
                "response",
                message,
                object_schema(
                    json!({
                        "username": {"type": "string", "description": "User's response"},
                        "email": {"type": "string", "description": "User's email address"},
                    }),
                    &["username", "email"],
                ),
            )])
        }
        I::Sep1034Defaults => Flow::single(vec![Ask::elicit(
            "defaults",
            "Please review and update the form fields with defaults",
            object_schema(
                json!({
                    "name": {"type": "string", "description": "User name", "default": "John Doe"},
                    "age": {"type": "integer", "description": "User age", "default": 30},
                    "score": {"type": "number", "description": "User score", "default": 95.5},
                    "status": {
                        "type": "string",
                        "description": "User status",
                        "enum": ["active", "inactive", "pending"],
                        "default": "active",
                    },
                    "verified": {"type": "boolean", "description": "Verification status", "default": true},
                }),
                &[],
            ),
        )]),
        I::Sep1330Enums => {
            let titled = |titles: [&str; 3]| {
                json!([
                    {"const": "value1", "title": titles[0]},
                    {"const": "value2", "title": titles[1]},
                    {"const": "value3", "title": titles[2]},
                ])
            };
            Flow::single(vec![Ask::elicit(
                "enums",
                "Please select options from the enum fields",
                object_schema(
                    json!({
                        "untitledSingle": {
                            "type": "string",
                            "description": "Select one option",
                            "enum": ["option1", "option2", "option3"],
                        },
                        "titledSingle": {
                            "type": "string",
                            "description": "Select one option with titles",
                            "oneOf": titled(["First Option", "Second Option", "Third Option"]),
                        },
                        "legacyEnum": {
                            "type": "string",
                            "description": "Select one option (legacy)",
                            "enum": ["opt1", "opt2", "opt3"],
                            "enumNames": ["Option One", "Option Two", "Option Three"],
                        },
                        "untitledMulti": {
                            "type": "array",
                            "description": "Select multiple options",
                            "minItems": 1,
                            "maxItems": 3,
                            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
                        },
                        "titledMulti": {
                            "type": "array",
                            "description": "Select multiple options with titles",
                            "minItems": 1,
                            "maxItems": 3,
                            "items": {"anyOf": titled(["First Choice", "Second Choice", "Third Choice"])},
                        },
                    }),
                    &[],
                ),
            )])
        }
        I::MissingCapability => {
            Flow::single(vec![Ask::sample("sampling", "Say hello in one word.", 20)])
        }
        I::StreamingElicitation | I::IrElicitation => Flow::single(vec![Ask::elicit(
            "user_name",
            "What is your name?",
            name_form(),
        )]),
        I::IrSampling => Flow::single(vec![Ask::sample(
            "capital_question",
            "What is the capital of France?",
            100,
        )]),
        I::IrListRoots => Flow::single(vec![Ask::roots("client_roots")]),
        I::IrRequestState | I::IrTamperedState => Flow::sealed(vec![vec![confirm()]]),
        I::IrMultipleInputs => Flow::sealed(vec![vec![
            Ask::elicit("user_name", "What is your name?", name_form()),
            Ask::sample("greeting", "Generate a greeting", 50),
            Ask::roots("client_roots"),
        ]]),
        I::IrMultiRound => Flow::sealed(vec![
            vec![Ask::elicit(
                "step1",
                "Step 1: What is your name?",
                name_form(),
            )],
            vec![Ask::elicit(
                "step2",
                "Step 2: What is your favorite color?",
                object_schema(json!({"color": {"type": "string"}}), &["color"]),
            )],
        ]),
        I::IrCapabilities => {
            // Only what the request declares; nothing declared asks for
            // sampling, which `obtain` refuses with -32021.
            let mut asks: Vec<Ask> = [
                Ask::elicit("user_name", "What is your name?", name_form()),
                Ask::sample("capital_question", "What is the capital of France?", 100),
                Ask::roots("client_roots"),
            ]
            .into_iter()
            .filter(|ask| mrtr::declares(context, ask.need))
            .collect();
            if asks.is_empty() {
                asks.push(Ask::sample(
                    "capital_question",
                    "What is the capital of France?",
                    100,
                ));
            }
            Flow::single(asks)
        }
    }
}

/// The text result of an interactive tool once it has every answer.
pub fn interaction_text(interaction: Interaction, answers: &Answers) -> String {
    match interaction {
        I::Sampling | I::MissingCapability => {
            format!("LLM response: {}", mrtr::sampled_text(answers, "sampling"))
        }
        I::Elicitation => format!(
            "User response: {}",
            mrtr::elicitation_summary(answers, "response")
        ),
        I::Sep1034Defaults => format!(
            "Elicitation completed: {}",
            mrtr::elicitation_summary(answers, "defaults")
        ),
        I::Sep1330Enums => format!(
            "Elicitation completed: {}",
            mrtr::elicitation_summary(answers, "enums")
        ),
        I::StreamingElicitation => format!(
            "User response: {}",
            mrtr::elicitation_summary(answers, "user_name")
        ),
        I::IrElicitation => match mrtr::action(answers, "user_name").as_str() {
            "accept" => format!(
                "Hello, {}!",
                mrtr::elicited_string(answers, "user_name", "name")
            ),
            other => format!("No name given (action: {other})."),
        },
        I::IrSampling => format!(
            "Sampling result: {}",
            mrtr::sampled_text(answers, "capital_question")
        ),
        I::IrListRoots => format!(
            "Found {} root(s)",
            mrtr::root_count(answers, "client_roots")
        ),
        I::IrRequestState | I::IrTamperedState => {
            let ok = answers
                .get("confirm")
                .and_then(|a| a.pointer("/content/ok"));
            if ok == Some(&Value::Bool(true)) {
                "state-ok: requestState validated".into()
            } else {
                format!(
                    "requestState validated; not confirmed ({})",
                    mrtr::elicitation_summary(answers, "confirm")
                )
            }
        }
        I::IrMultipleInputs => format!(
            "Name: {}; Greeting: {}; Roots: {}",
            mrtr::elicited_string(answers, "user_name", "name"),
            mrtr::sampled_text(answers, "greeting"),
            mrtr::root_count(answers, "client_roots"),
        ),
        I::IrMultiRound => format!(
            "Multi-round complete for {} who likes {}",
            mrtr::elicited_string(answers, "step1", "name"),
            mrtr::elicited_string(answers, "step2", "color"),
        ),
        I::IrCapabilities => {
            let asked: Vec<&str> = answers.keys().map(String::as_str).collect();
            format!("Received input for: {}", asked.join(", "))
        }
    }
}

/// `resources/list`.
pub fn resources() -> Value {
    json!([
        {
            "uri": "test://static-text",
            "name": "static-text",
            "title": "Static Text Resource",
            "description": "A static text resource for testing",
            "mimeType": "text/plain",
        },
        {
            "uri": "test://static-binary",
            "name": "static-binary",
            "title": "Static Binary Resource",
            "description": "A static binary resource (a PNG image) for testing",
            "mimeType": "image/png",
        },
        {
            "uri": "test://watched-resource",
            "name": "watched-resource",
            "title": "Watched Resource",
            "description": "A resource clients may subscribe to",
            "mimeType": "text/plain",
        },
    ])
}

/// `resources/templates/list`.
pub fn resource_templates() -> Value {
    json!([{
        "uriTemplate": "test://template/{id}/data",
        "name": "template",
        "title": "Resource Template",
        "description": "A resource template with parameter substitution",
        "mimeType": "application/json",
    }])
}

/// The contents of `uri`, if it exists.
pub fn read_resource(uri: &str) -> Option<Value> {
    let text = |mime: &str, text: String| json!({"uri": uri, "mimeType": mime, "text": text});
    match uri {
        "test://static-text" => Some(text(
            "text/plain",
            "This is the content of the static text resource.".into(),
        )),
        "test://static-binary" => {
            Some(json!({"uri": uri, "mimeType": "image/png", "blob": PNG_BASE64}))
        }
        "test://watched-resource" => Some(text("text/plain", "Watched resource content".into())),
        _ => {
            let id = uri
                .strip_prefix("test://template/")?
                .strip_suffix("/data")
                .filter(|id| !id.is_empty() && !id.contains('/'))?;
            Some(text(
                "application/json",
                json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")})
                    .to_string(),
            ))
        }
    }
}

/// `prompts/list` for a request of this era.
pub fn prompts(modern: bool, dynamic: bool) -> Value {
    let argument = |name: &str, description: &str| json!({"name": name, "description": description, "required": true});
    let mut prompts = vec![
        json!({
            "name": "test_simple_prompt",
            "title": "Simple Test Prompt",
            "description": "A simple prompt without arguments",
        }),
        json!({
            "name": "test_prompt_with_arguments",
            "title": "Prompt With Arguments",
            "description": "A prompt with required arguments",
            "arguments": [
                argument("arg1", "First test argument"),
                argument("arg2", "Second test argument"),
            ],
        }),
        json!({
            "name": "test_prompt_with_embedded_resource",
            "title": "Prompt With Embedded Resource",
            "description": "A prompt that includes an embedded resource",
            "arguments": [argument("resourceUri", "URI of the resource to embed")],
        }),
        json!({
            "name": "test_prompt_with_image",
            "title": "Prompt With Image",
            "description": "A prompt that includes image content",
        }),
    ];
    if modern {
        prompts.push(json!({
            "name": MRTR_PROMPT,
            "description": "Asks for its context (input_required) before answering",
        }));
    }
    if dynamic {
        prompts.push(json!({
            "name": DYNAMIC_PROMPT,
            "description": "Listed only while test_trigger_prompt_change has added it",
        }));
    }
    Value::Array(prompts)
}

/// The messages of `prompts/get NAME` (not the MRTR prompt).
pub fn prompt_messages(
    name: &str,
    arguments: &JsonObject,
    modern: bool,
    dynamic: bool,
) -> Result<Value, McpError> {
    let argument = |key: &str| {
        arguments.get(key).and_then(Value::as_str).ok_or_else(|| {
            McpError::invalid_params(
                format!("prompt {name}: missing required argument {key}"),
                None,
            )
        })
    };
    let user = |content: Value| json!({"role": "user", "content": content});
    let text = |text: String| json!({"type": "text", "text": text});
    Ok(match name {
        "test_simple_prompt" => json!([user(text("This is a simple prompt for testing.".into()))]),
        "test_prompt_with_arguments" => {
            let (arg1, arg2) = (argument("arg1")?, argument("arg2")?);
            json!([user(text(format!(
                "Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"
            )))])
        }
        "test_prompt_with_embedded_resource" => {
            let uri = argument("resourceUri")?;
            json!([
                user(json!({
                    "type": "resource",
                    "resource": {
                        "uri": uri,
                        "mimeType": "text/plain",
                        "text": "Embedded resource content for testing.",
                    },
                })),
                user(text("Please process the embedded resource above.".into())),
            ])
        }
        "test_prompt_with_image" => json!([
            user(json!({"type": "image", "data": PNG_BASE64, "mimeType": "image/png"})),
            user(text("Please analyze the image above.".into())),
        ]),
        DYNAMIC_PROMPT if dynamic => json!([user(text("This prompt comes and goes.".into()))]),
        MRTR_PROMPT if !modern => {
            return Err(McpError::invalid_params(
                format!("unknown prompt: {name}: it needs protocol 2026-07-28"),
                None,
            ));
        }
        _ => {
            return Err(McpError::invalid_params(
                format!("unknown prompt: {name}"),
                None,
            ));
        }
    })
}

/// Completion candidates of a prompt argument.
pub fn prompt_completions(
    prompt: &str,
    argument: &str,
) -> Result<&'static [&'static str], McpError> {
    match (prompt, argument) {
        ("test_prompt_with_arguments", "arg1" | "arg2") => {
            Ok(&["paris", "park", "party", "test", "testValue1", "testValue2"])
        }
        ("test_prompt_with_embedded_resource", "resourceUri") => Ok(&[
            "test://static-text",
            "test://static-binary",
            "test://watched-resource",
        ]),
        ("test_prompt_with_arguments" | "test_prompt_with_embedded_resource", _) => Ok(&[]),
        _ => Err(McpError::invalid_params(
            format!("no prompt {prompt} with argument {argument}"),
            None,
        )),
    }
}

/// Completion candidates of a resource template variable.
pub fn template_completions(
    uri: &str,
    argument: &str,
) -> Result<&'static [&'static str], McpError> {
    match (uri, argument) {
        ("test://template/{id}/data", "id") => Ok(&["1", "2", "3", "42", "123"]),
        _ => Err(McpError::invalid_params(
            format!("no resource template {uri} with variable {argument}"),
            None,
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn tools_have_unique_valid_names_descriptions_and_object_schemas() {
        let mut names = HashSet::new();
        for spec in TOOLS {
            assert!(names.insert(spec.name), "duplicate tool {}", spec.name);
            assert!(
                spec.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)),
                "{}",
                spec.name
            );
            let tool = spec.definition();
            assert!(tool.description.is_some_and(|d| !d.is_empty()));
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")));
        }
    }

    #[test]
    fn template_reads_substitute_the_id() {
        let contents = read_resource("test://template/123/data").unwrap();
        let text: Value = serde_json::from_str(contents["text"].as_str().unwrap()).unwrap();
        assert_eq!(
            text,
            json!({"id": "123", "templateTest": true, "data": "Data for ID: 123"})
        );
        assert!(read_resource("test://template//data").is_none());
        assert!(read_resource("test://nonexistent").is_none());
    }

    #[test]
    fn prompts_check_their_arguments() {
        let arguments = JsonObject::new();
        let error = prompt_messages("test_prompt_with_arguments", &arguments, true, false);
        assert!(error.is_err());
        assert!(prompt_messages(MRTR_PROMPT, &arguments, false, false).is_err());
        assert!(prompt_messages(DYNAMIC_PROMPT, &arguments, true, false).is_err());
        assert!(prompt_messages(DYNAMIC_PROMPT, &arguments, true, true).is_ok());
    }
}
