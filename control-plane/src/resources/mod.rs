//! Stage E (design §4 E, seed §6): the resources, resource templates and
//! prompts of every server, as engines see them. Pure logic over the read
//! model; requests that reach a server (`resources/read`, `prompts/get`,
//! `completion/complete`) travel the call path (`call::request`).
//!
//! - [`view`]: catalogue entries (exactly as the server listed them) to the
//!   engine API's `Resource`, `ResourceTemplate` and `Prompt`;
//! - [`page`]: paging across a session's servers with an opaque cursor;
//! - [`gateway`]: the gateway tools `mcp_resources` and
//!   `mcp_resource_read`, offered to a session when one of its servers has
//!   resources, and what the model reads of their answers.
//!
//! The sidecar does the size rules (text up to 20,000 characters inline,
//! longer text and binary as attachments with generated names); URIs are
//! passed byte-exact both ways, and the gateway never fetches a resource
//! itself. `resources/subscribe` is not built (seed §6.1).

pub mod gateway;
pub mod page;
pub mod view;

use crate::state::Snapshot;

/// Whether `server` has resources: it declares the `resources` capability,
/// or lists resources or templates.
pub fn has_resources(snap: &Snapshot, server: &str) -> bool {
    let declared = snap
        .catalogues
        .get(server)
        .is_some_and(|c| c.capabilities.get("resources").is_some());
    declared
        || snap
            .resource_catalogues
            .get(server)
            .is_some_and(|c| !c.resources.is_empty() || !c.resource_templates.is_empty())
}
