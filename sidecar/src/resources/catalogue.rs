//! Stage E's part of the catalogue: the server's resources, resource
//! templates and prompts ([`Lists`]), each list complete (every
//! `nextCursor` page, through the upstream session's one page walker,
//! [`crate::upstream::pages::walk`]) and each entry exactly as the server
//! sent it. The upstream watcher ([`crate::watch`]) re-lists them after
//! each connection and after the server's
//! `notifications/resources/list_changed` (resources and templates) or
//! `notifications/prompts/list_changed` (prompts), and publishes them in
//! the catalogue snapshot.
//!
//! A server that does not declare `resources` (`prompts`) has empty lists
//! and is not asked. A list the server does not implement (-32601, e.g.
//! `resources/templates/list` on a server with plain resources only) is
//! empty. Any other failure keeps the list as it was (empty the first
//! time), with a warning: it never costs the tool catalogue.

use crate::upstream::pages::{self, ListMethod};
use crate::upstream::{Upstream, UpstreamError};
use serde_json::Value;
use switchyard_mcp::jsonrpc;

/// The stage E lists of one server, as last listed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lists {
    /// `resources/list`, every page.
    pub resources: Vec<Value>,
    /// `resources/templates/list`, every page.
    pub templates: Vec<Value>,
    /// `prompts/list`, every page.
    pub prompts: Vec<Value>,
}

impl Lists {
    /// Lists the resources and the resource templates again (both change
    /// with `notifications/resources/list_changed`). Returns, when both
    /// listings worked, how long both stay fresh (ms, the smaller
    /// [`pages::Walked::ttl_ms`]); a list whose listing failed keeps its
    /// entries.
    pub async fn relist_resources(&mut self, upstream: &Upstream) -> Option<u64> {
        let resources = relist(upstream, pages::RESOURCES, &mut self.resources).await;
        let templates = relist(upstream, pages::RESOURCE_TEMPLATES, &mut self.templates).await;
        Some(resources?.min(templates?))
    }

    /// Lists the prompts again. Returns, when the listing worked, how long
    /// the list stays fresh (ms); if not, the prompts are kept.
    pub async fn relist_prompts(&mut self, upstream: &Upstream) -> Option<u64> {
        relist(upstream, pages::PROMPTS, &mut self.prompts).await
    }

    /// The resources, JSON text each (`CatalogueSnapshot.resources_json`).
    pub fn resources_json(&self) -> Vec<String> {
        texts(&self.resources)
    }

    /// The templates, JSON text each
    /// (`CatalogueSnapshot.resource_templates_json`).
    pub fn templates_json(&self) -> Vec<String> {
        texts(&self.templates)
    }

    /// The prompts, JSON text each (`CatalogueSnapshot.prompts_json`).
    pub fn prompts_json(&self) -> Vec<String> {
        texts(&self.prompts)
    }
}

fn texts(entries: &[Value]) -> Vec<String> {
    entries.iter().map(Value::to_string).collect()
}

/// Lists `list` on `upstream` into `kept` (see the module docs); when that
/// worked, how long the list stays fresh (ms; 0 for a list the server does
/// not implement).
async fn relist(upstream: &Upstream, list: ListMethod, kept: &mut Vec<Value>) -> Option<u64> {
    let server = upstream.name();
    let method = list.method;
    match upstream.list(list).await {
        Ok(walked) => {
            tracing::debug!(%server, %method, entries = walked.entries.len(), cut = walked.cut, "listed");
            *kept = walked.entries;
            Some(walked.ttl_ms)
        }
        Err(UpstreamError::Rpc {
            code: jsonrpc::METHOD_NOT_FOUND,
            ..
        }) => {
            tracing::debug!(%server, %method, "the server does not implement the list; it is empty");
            kept.clear();
            Some(0)
        }
        Err(e) => {
            tracing::warn!(%server, %method, error = %e, kept = kept.len(), "listing failed; the previous list is kept");
            None
        }
    }
}
