//! `_meta` keys, extension identifiers and `resultType` values
//! (2026-07-28 schema `RequestMetaObject`, `Result.resultType`; 2025-11-25
//! basic/utilities/tasks). One constant each; nothing else spells them.

/// Request `_meta`: the protocol version of a 2026-07-28 request.
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// Request `_meta`: the client's `Implementation`.
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// Request `_meta`: the client's capabilities.
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// Request `_meta`: the log level the client wants `notifications/message`
/// at; absent: none for this request.
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// `DiscoverResult._meta`: the server's identity.
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` tying a message to a task (2025-11-25 tasks).
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// `CreateTaskResult._meta`: the text for the model meanwhile (2025-11-25
/// basic/utilities/tasks, "Creating Tasks").
pub const IMMEDIATE_RESPONSE: &str = "io.modelcontextprotocol/model-immediate-response";
/// The tasks extension's identifier (SEP-2663), a key of
/// `capabilities.extensions`.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// `Result.resultType` values (2026-07-28).
pub mod result_type {
    /// A complete result (the default when the field is absent).
    pub const COMPLETE: &str = "complete";
    /// A multi round-trip request's question: `inputRequests` and/or
    /// `requestState` (basic/patterns/mrtr).
    pub const INPUT_REQUIRED: &str = "input_required";
    /// A task was created (tasks extension).
    pub const TASK: &str = "task";
}
