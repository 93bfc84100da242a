//! The one page walker of the four paginated lists (`tools/list`,
//! `resources/list`, `resources/templates/list`, `prompts/list`;
//! server/utilities/pagination, the same in both eras): [`walk`] follows
//! every `nextCursor` and returns the entries exactly as sent.
//!
//! The rules: cursors are opaque and forwarded as received; an
//! empty-string cursor is a valid cursor and MUST NOT be taken for the
//! end; only an absent (or null) `nextCursor` ends the list. Two guards
//! against a server that never ends: a cursor it already gave (a cycle) is
//! an error at once, and so is a list still going after [`Limits::pages`]
//! pages; both errors name the server and the method. A list longer than
//! [`Limits::entries`] is cut there, with a warning in the log: the rest
//! is not fetched.

use super::error::UpstreamError;
use serde_json::{Value, json};
use std::collections::HashSet;
use switchyard_mcp::methods;

/// One paginated list: its method, the result field holding the entries,
/// and the server capability that offers it (without it the list is empty
/// and nothing is asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListMethod {
    /// The request, e.g. `resources/list`.
    pub method: &'static str,
    /// The result's array of entries, e.g. `resources`.
    pub field: &'static str,
    /// The capability that offers it, e.g. `resources`.
    pub capability: &'static str,
}

/// `tools/list` (stage A).
pub const TOOLS: ListMethod = ListMethod {
    method: methods::TOOLS_LIST,
    field: "tools",
    capability: "tools",
};
/// `resources/list` (stage E).
pub const RESOURCES: ListMethod = ListMethod {
    method: methods::RESOURCES_LIST,
    field: "resources",
    capability: "resources",
};
/// `resources/templates/list` (stage E).
pub const RESOURCE_TEMPLATES: ListMethod = ListMethod {
    method: methods::RESOURCE_TEMPLATES_LIST,
    field: "resourceTemplates",
    capability: "resources",
};
/// `prompts/list` (stage E).
pub const PROMPTS: ListMethod = ListMethod {
    method: methods::PROMPTS_LIST,
    field: "prompts",
    capability: "prompts",
};

/// Most entries kept of one list; the rest is not fetched.
pub const MAX_ENTRIES: usize = 10_000;
/// Most pages of one list: a server still giving cursors after this many
/// pages (empty ones, since non-empty ones reach [`MAX_ENTRIES`] first)
/// never ends.
pub const MAX_PAGES: usize = 10_000;

/// Bounds of one walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries kept; the list is cut there (with a warning).
    pub entries: usize,
    /// Pages fetched; more is an error.
    pub pages: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            entries: MAX_ENTRIES,
            pages: MAX_PAGES,
        }
    }
}

/// A walked list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Walked {
    /// Every entry, in the server's order, exactly as sent.
    pub entries: Vec<Value>,
    /// Whether the list was cut at [`Limits::entries`].
    pub cut: bool,
    /// How long the list may be taken as fresh, ms (2026-07-28
    /// server/utilities/caching): the smallest `ttlMs` of its pages, each
    /// page's own; a page without one (every 2025-11-25 page), or with one
    /// that is not a whole number of at least 0, counts as 0, immediately
    /// stale.
    pub ttl_ms: u64,
}

/// Walks `list` of `server` to its end: `page(params)` fetches one page,
/// `params` being `None` for the first and `{"cursor": C}` after it (`C`
/// exactly as the previous page's `nextCursor`). Errors: `page`'s; a
/// result without the list's array, a cursor given twice, or more than
/// `limits.pages` pages ([`UpstreamError::Protocol`], naming the server
/// and the method).
pub async fn walk<F, Fut>(
    server: &str,
    list: ListMethod,
    limits: Limits,
    mut page: F,
) -> Result<Walked, UpstreamError>
where
    F: FnMut(Option<Value>) -> Fut,
    Fut: Future<Output = Result<Value, UpstreamError>>,
{
    let method = list.method;
    let mut walked = Walked::default();
    let mut seen: HashSet<String> = HashSet::new();
    let mut cursor: Option<Value> = None;
    walked.ttl_ms = u64::MAX;
    for n in 1..=limits.pages {
        let result = page(cursor.take().map(|c| json!({ "cursor": c }))).await?;
        let ttl = result.get("ttlMs").and_then(Value::as_u64).unwrap_or(0);
        walked.ttl_ms = walked.ttl_ms.min(ttl);
        let Some(Value::Array(items)) = result.get(list.field) else {
            return Err(UpstreamError::protocol(
                server,
                format!("{method} result (page {n}) has no `{}` array", list.field),
            ));
        };
        let room = limits.entries - walked.entries.len();
        if items.len() > room {
            walked.entries.extend(items.iter().take(room).cloned());
            walked.cut = true;
            tracing::warn!(%server, %method, kept = limits.entries, "the list has more entries than the sidecar keeps; the rest is left out");
            return Ok(walked);
        }
        walked.entries.extend(items.iter().cloned());
        match result.get("nextCursor") {
            None | Some(Value::Null) => return Ok(walked),
            // Any other value is a cursor, "" included (pagination: an
            // empty string MUST NOT be treated as the end).
            Some(next) => {
                if !seen.insert(next.to_string()) {
                    return Err(UpstreamError::protocol(
                        server,
                        format!(
                            "{method} gave on page {n} a cursor it had already given; the list would never end"
                        ),
                    ));
                }
                if walked.entries.len() == limits.entries {
                    walked.cut = true;
                    tracing::warn!(%server, %method, kept = limits.entries, "the list has more entries than the sidecar keeps; the rest is left out");
                    return Ok(walked);
                }
                cursor = Some(next.clone());
            }
        }
    }
    Err(UpstreamError::protocol(
        server,
        format!("{method} did not end after {} pages", limits.pages),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// The params of each page request, as sent.
    type Asked = Arc<Mutex<Vec<Option<Value>>>>;
    type Page = futures::future::Ready<Result<Value, UpstreamError>>;

    /// A server answering `pages` in order and recording the params of
    /// each request.
    fn server(pages: Vec<Value>) -> (impl FnMut(Option<Value>) -> Page, Asked) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let mut pages = pages.into_iter();
        let fetch = move |params: Option<Value>| {
            log.lock().unwrap().push(params);
            futures::future::ready(Ok(pages.next().unwrap_or_else(|| json!({"resources": []}))))
        };
        (fetch, asked)
    }

    fn block_on<T>(f: impl Future<Output = T>) -> T {
        futures::executor::block_on(f)
    }

    #[test]
    fn an_empty_string_cursor_is_not_the_end() {
        let (fetch, asked) = server(vec![
            json!({"resources": [{"uri": "a"}], "nextCursor": ""}),
            json!({"resources": [{"uri": "b", "x": {"y": 1.50}}], "nextCursor": "2"}),
            json!({"resources": [], "nextCursor": null}),
        ]);
        let walked = block_on(walk("s", RESOURCES, Limits::default(), fetch)).unwrap();
        assert_eq!(
            walked.entries,
            vec![json!({"uri": "a"}), json!({"uri": "b", "x": {"y": 1.50}})]
        );
        assert!(!walked.cut);
        assert_eq!(
            *asked.lock().unwrap(),
            vec![
                None,
                Some(json!({"cursor": ""})),
                Some(json!({"cursor": "2"}))
            ]
        );
    }

    #[test]
    fn a_list_is_fresh_for_its_shortest_page_ttl() {
        let walk_of = |pages: Vec<Value>| {
            let (fetch, _) = server(pages);
            block_on(walk("s", RESOURCES, Limits::default(), fetch)).unwrap()
        };
        let two = walk_of(vec![
            json!({"resources": [], "ttlMs": 60_000, "nextCursor": "2"}),
            json!({"resources": [], "ttlMs": 5_000}),
        ]);
        assert_eq!(two.ttl_ms, 5_000);
        // A page without one (2025-11-25), or with a negative or
        // fractional one, is stale at once.
        for odd in [json!(null), json!(-1), json!(1.5), json!("60000")] {
            let mut page = json!({"resources": [], "ttlMs": odd});
            if odd.is_null() {
                page.as_object_mut().unwrap().remove("ttlMs");
            }
            let walked = walk_of(vec![
                json!({"resources": [], "ttlMs": 60_000, "nextCursor": "2"}),
                page,
            ]);
            assert_eq!(walked.ttl_ms, 0, "{odd}");
        }
    }

    #[test]
    fn an_absent_cursor_ends_the_list() {
        let (fetch, asked) = server(vec![json!({"prompts": [{"name": "p"}]})]);
        let walked = block_on(walk("s", PROMPTS, Limits::default(), fetch)).unwrap();
        assert_eq!(walked.entries, vec![json!({"name": "p"})]);
        assert_eq!(asked.lock().unwrap().len(), 1);
    }

    #[test]
    fn cursors_are_forwarded_as_received() {
        let (fetch, asked) = server(vec![
            json!({"tools": [], "nextCursor": "é \u{2028} \"q\""}),
            json!({"tools": []}),
        ]);
        block_on(walk("s", TOOLS, Limits::default(), fetch)).unwrap();
        assert_eq!(
            asked.lock().unwrap()[1],
            Some(json!({"cursor": "é \u{2028} \"q\""}))
        );
    }

    #[test]
    fn a_repeated_cursor_is_an_error_naming_the_server_and_method() {
        let (fetch, asked) = server(vec![
            json!({"resourceTemplates": [], "nextCursor": "a"}),
            json!({"resourceTemplates": [], "nextCursor": "b"}),
            json!({"resourceTemplates": [], "nextCursor": "a"}),
        ]);
        let e = block_on(walk("files", RESOURCE_TEMPLATES, Limits::default(), fetch)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "server files: protocol error: resources/templates/list gave on page 3 a cursor it had already given; the list would never end"
        );
        assert_eq!(asked.lock().unwrap().len(), 3);
    }

    #[test]
    fn an_endless_list_is_an_error_after_the_page_limit() {
        let mut n = 0u64;
        let fetch = |_: Option<Value>| {
            n += 1;
            futures::future::ready(Ok(json!({"resources": [], "nextCursor": n.to_string()})))
        };
        let limits = Limits {
            entries: 100,
            pages: 50,
        };
        let e = block_on(walk("s", RESOURCES, limits, fetch)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "server s: protocol error: resources/list did not end after 50 pages"
        );
        assert_eq!(n, 50);
    }

    #[test]
    fn a_long_list_is_cut_at_the_entry_limit() {
        let page = |from: usize, next: Option<&str>| {
            let items: Vec<Value> = (from..from + 4).map(|i| json!({"name": i})).collect();
            match next {
                Some(c) => json!({"prompts": items, "nextCursor": c}),
                None => json!({"prompts": items}),
            }
        };
        let limits = Limits {
            entries: 6,
            pages: 100,
        };
        // Cut inside a page: the next page is never asked for.
        let (fetch, asked) = server(vec![page(0, Some("1")), page(4, Some("2")), page(8, None)]);
        let walked = block_on(walk("s", PROMPTS, limits, fetch)).unwrap();
        assert!(walked.cut);
        let names: Vec<Value> = walked.entries.iter().map(|e| e["name"].clone()).collect();
        assert_eq!(names, (0..6).map(|i| json!(i)).collect::<Vec<_>>());
        assert_eq!(asked.lock().unwrap().len(), 2);
        // Exactly full with more to come: cut too, without asking.
        let limits = Limits {
            entries: 4,
            pages: 100,
        };
        let (fetch, asked) = server(vec![page(0, Some("1")), page(4, None)]);
        let walked = block_on(walk("s", PROMPTS, limits, fetch)).unwrap();
        assert!(walked.cut);
        assert_eq!(walked.entries.len(), 4);
        assert_eq!(asked.lock().unwrap().len(), 1);
        // Exactly full and ended: not cut.
        let (fetch, _) = server(vec![page(0, None)]);
        let walked = block_on(walk("s", PROMPTS, limits, fetch)).unwrap();
        assert!(!walked.cut);
    }

    #[test]
    fn a_page_without_the_array_is_a_protocol_error() {
        let (fetch, _) = server(vec![json!({"resources": {"uri": "a"}})]);
        let e = block_on(walk("s", RESOURCES, Limits::default(), fetch)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "server s: protocol error: resources/list result (page 1) has no `resources` array"
        );
    }

    #[test]
    fn a_failing_page_fails_the_walk() {
        let fetch =
            |_: Option<Value>| futures::future::ready(Err(UpstreamError::protocol("s", "boom")));
        let e = block_on(walk("s", TOOLS, Limits::default(), fetch)).unwrap_err();
        assert_eq!(e.to_string(), "server s: protocol error: boom");
    }
}
