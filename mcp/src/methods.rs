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
/// Server notification (2026-07-28): the first message of a
/// `subscriptions/listen` stream, with the notifications it honours
/// (basic/patterns/subscriptions "Acknowledgment").
pub const SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
/// Server notification: the tool list changed.
pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
/// Server notification: the resource list (and so the templates) changed.
pub const RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
/// Server notification: the prompt list changed.
pub const PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";

/// Client request (2025-11-25): opens a session (basic/lifecycle); removed
/// in 2026-07-28.
pub const INITIALIZE: &str = "initialize";
/// Client notification (2025-11-25): the handshake is done.
pub const INITIALIZED: &str = "notifications/initialized";
/// Either side (2025-11-25): are you there; removed in 2026-07-28.
pub const PING: &str = "ping";
/// Client request (2025-11-25): the log level; removed in 2026-07-28.
pub const LOGGING_SET_LEVEL: &str = "logging/setLevel";
/// Client request (2025-11-25): updates of one resource; removed in
/// 2026-07-28 (replaced by `subscriptions/listen`).
pub const RESOURCES_SUBSCRIBE: &str = "resources/subscribe";
/// Client request (2025-11-25); removed in 2026-07-28.
pub const RESOURCES_UNSUBSCRIBE: &str = "resources/unsubscribe";
/// Client request (2026-07-28): versions and capabilities (server/discover).
pub const SERVER_DISCOVER: &str = "server/discover";
/// Either side: a request was cancelled (basic/utilities/cancellation).
pub const CANCELLED: &str = "notifications/cancelled";
/// Either side: progress of a request (basic/utilities/progress).
pub const PROGRESS: &str = "notifications/progress";
/// Server notification: a log message (server/utilities/logging).
pub const LOG_MESSAGE: &str = "notifications/message";
/// Client notification (2025-11-25): the client's roots changed.
pub const ROOTS_LIST_CHANGED: &str = "notifications/roots/list_changed";

/// The methods 2026-07-28 removed: a modern request for one is answered
/// 404 with -32601 (basic/transports/streamable-http; changelog).
pub const REMOVED_IN_2026: &[&str] = &[
    INITIALIZE,
    PING,
    LOGGING_SET_LEVEL,
    RESOURCES_SUBSCRIBE,
    RESOURCES_UNSUBSCRIBE,
];

/// Client request (2025-11-25 basic/utilities/tasks; 2026-07-28 SEP-2663
/// `io.modelcontextprotocol/tasks`): a task's state.
pub const TASKS_GET: &str = "tasks/get";
/// Client request (2025-11-25): a task's result, once it is terminal.
pub const TASKS_RESULT: &str = "tasks/result";
/// Client request (both eras): cancels a task.
pub const TASKS_CANCEL: &str = "tasks/cancel";
/// Client request (2025-11-25): the caller's tasks.
pub const TASKS_LIST: &str = "tasks/list";
/// Client request (2026-07-28 SEP-2663): answers a task's `inputRequests`.
pub const TASKS_UPDATE: &str = "tasks/update";
