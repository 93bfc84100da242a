//! Method names (2025-11-25 and 2026-07-28 schemas). One constant each;
//! nothing else spells them.

/// Server-to-client request (2025-11-25), or an MRTR input request
/// (2026-07-28): ask the user (client/elicitation).
pub const ELICIT: &str = "elicitation/create";
/// Server-to-client request: the client's roots (client/roots).
pub const LIST_ROOTS: &str = "roots/list";
/// Server-to-client request: sampling, never declared (design §4).
pub const SAMPLING: &str = "sampling/createMessage";
/// A URL elicitation finished out of band.
pub const ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";

/// Client request: call a tool (server/tools).
pub const TOOLS_CALL: &str = "tools/call";
/// Client request: one page of the server's tools (server/tools).
pub const TOOLS_LIST: &str = "tools/list";
/// Client request: one page of the server's resources (server/resources).
pub const RESOURCES_LIST: &str = "resources/list";
/// Client request: one page of the server's resource templates.
pub const RESOURCE_TEMPLATES_LIST: &str = "resources/templates/list";
/// Client request: one resource's contents (MRTR-capable in 2026-07-28).
pub const RESOURCES_READ: &str = "resources/read";
/// Client request: one page of the server's prompts (server/prompts).
pub const PROMPTS_LIST: &str = "prompts/list";
/// Client request: one prompt, its arguments filled in (MRTR-capable in
/// 2026-07-28).
pub const PROMPTS_GET: &str = "prompts/get";
/// Client request: completions of a prompt's or a resource template's
/// argument (server/utilities/completion).
pub const COMPLETE: &str = "completion/complete";
/// Client request (2026-07-28): a stream the server sends the opted-in
/// notifications on (basic/utilities/subscriptions).
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";
/// Server notification: the tool list changed.
pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
/// Server notification: the resource list (and so the templates) changed.
pub const RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
/// Server notification: the prompt list changed.
pub const PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
