//! Paging across servers. A session's listing runs through its servers in
//! name order and, within a server, through its lists in order (resources,
//! then templates; or prompts), each in the server's own order. A page
//! stops after `size` entries; its cursor says where the next begins.
//!
//! Cursors are opaque to engines: `c1.` and base64url (no padding) of
//! `{"s": server, "l": list, "i": index}`. Anything else, or a position
//! that is not one (a list number out of range), is refused with a message
//! naming `cursor`. A server that left the listing since (removed, or no
//! longer enabled) is skipped: the next page starts at the next server in
//! name order. A list that changes while it is paged may skip or repeat
//! entries; the session's `resources.changed` and `prompts.changed` events
//! say when that happens.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Entries per page when the request says 0.
pub const DEFAULT_PAGE: usize = 100;
/// The largest page.
pub const MAX_PAGE: usize = 1000;
/// Longest cursor accepted, in bytes.
const MAX_CURSOR: usize = 1024;

/// Where a page begins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The server.
    #[serde(rename = "s")]
    pub server: String,
    /// Which of the server's lists (0: resources or prompts, 1: templates).
    #[serde(rename = "l")]
    pub list: usize,
    /// The entry within that list.
    #[serde(rename = "i")]
    pub index: usize,
}

impl Position {
    /// The cursor text of this position.
    pub fn encode(&self) -> String {
        let json = serde_json::to_vec(self).expect("positions serialise");
        format!("c1.{}", URL_SAFE_NO_PAD.encode(json))
    }

    /// The position `cursor` encodes, for listings of `lists` lists per
    /// server. Errors: a message naming `cursor`.
    pub fn decode(cursor: &str, lists: usize) -> Result<Position, String> {
        let bad = || {
            "cursor: not a cursor this API gave (pass the last page's next_cursor, or nextCursor, as received)".to_owned()
        };
        if cursor.len() > MAX_CURSOR {
            return Err(bad());
        }
        let body = cursor.strip_prefix("c1.").ok_or_else(bad)?;
        let json = URL_SAFE_NO_PAD.decode(body).map_err(|_| bad())?;
        let p: Position = serde_json::from_slice(&json).map_err(|_| bad())?;
        if p.list >= lists {
            return Err(bad());
        }
        Ok(p)
    }
}

/// The page size a request asks for: 0 is [`DEFAULT_PAGE`]. Errors: over
/// [`MAX_PAGE`].
pub fn size(requested: u32) -> Result<usize, String> {
    match requested as usize {
        0 => Ok(DEFAULT_PAGE),
        n if n <= MAX_PAGE => Ok(n),
        n => Err(format!("page_size: {n} is over the maximum {MAX_PAGE}")),
    }
}

/// One server's lists, in listing order.
#[derive(Debug, Clone)]
pub struct Source<'a> {
    /// The server.
    pub server: &'a str,
    /// Its lists (resources and templates, or prompts alone).
    pub lists: Vec<&'a [Value]>,
}

/// One entry of a page: the server, which list, the entry.
pub type Entry<'a> = (&'a str, usize, &'a Value);

/// The page of `sources` (in any order; they are taken by server name)
/// that begins at `from` (the start when `None`), at most `size` entries,
/// and where the next one begins (`None` on the last page).
pub fn page<'a>(
    mut sources: Vec<Source<'a>>,
    from: Option<&Position>,
    size: usize,
) -> (Vec<Entry<'a>>, Option<Position>) {
    sources.sort_by(|a, b| a.server.cmp(b.server));
    let mut out = Vec::new();
    for source in &sources {
        let (first_list, first_index) = match from {
            Some(p) if source.server < p.server.as_str() => continue,
            Some(p) if source.server == p.server => (p.list, p.index),
            _ => (0, 0),
        };
        for (l, list) in source.lists.iter().enumerate().skip(first_list) {
            let start = if l == first_list { first_index } else { 0 };
            for (i, entry) in list.iter().enumerate().skip(start) {
                if out.len() == size {
                    let next = Position {
                        server: source.server.to_owned(),
                        list: l,
                        index: i,
                    };
                    return (out, Some(next));
                }
                out.push((source.server, l, entry));
            }
        }
    }
    (out, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entries(prefix: &str, n: usize) -> Vec<Value> {
        (0..n).map(|i| json!(format!("{prefix}{i}"))).collect()
    }

    /// Every entry of `sources`, by following cursors of `size`.
    fn walk(sources: &[(&str, Vec<Vec<Value>>)], size: usize) -> Vec<String> {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let from = cursor.as_deref().map(|c| Position::decode(c, 2).unwrap());
            let src = sources
                .iter()
                .map(|(s, lists)| Source {
                    server: s,
                    lists: lists.iter().map(Vec::as_slice).collect(),
                })
                .collect();
            let (got, next) = page(src, from.as_ref(), size);
            assert!(got.len() <= size);
            seen.extend(
                got.iter()
                    .map(|(s, l, v)| format!("{s}/{l}/{}", v.as_str().unwrap())),
            );
            match next {
                Some(p) => cursor = Some(p.encode()),
                None => return seen,
            }
        }
    }

    #[test]
    fn pages_cover_every_entry_once_in_order_whatever_the_size() {
        let sources = vec![
            ("zeta", vec![entries("r", 3), entries("t", 0)]),
            ("alpha", vec![entries("r", 0), entries("t", 2)]),
            ("mid", vec![entries("r", 4), entries("t", 1)]),
            ("empty", vec![vec![], vec![]]),
        ];
        let all = walk(&sources, 10_000);
        assert_eq!(
            all,
            [
                "alpha/1/t0",
                "alpha/1/t1",
                "mid/0/r0",
                "mid/0/r1",
                "mid/0/r2",
                "mid/0/r3",
                "mid/1/t0",
                "zeta/0/r0",
                "zeta/0/r1",
                "zeta/0/r2"
            ]
        );
        for size in 1..12 {
            assert_eq!(walk(&sources, size), all, "page size {size}");
        }
    }

    #[test]
    fn a_server_gone_since_is_skipped_and_bad_cursors_are_refused() {
        let mid = entries("r", 2);
        let zeta = entries("r", 1);
        // "nope" sorted between "mid" and "zeta", and gone since.
        let from = Position {
            server: "nope".into(),
            list: 0,
            index: 5,
        };
        let (got, next) = page(
            vec![
                Source {
                    server: "mid",
                    lists: vec![&mid],
                },
                Source {
                    server: "zeta",
                    lists: vec![&zeta],
                },
            ],
            Some(&from),
            10,
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "zeta");
        assert!(next.is_none());
        for bad in [
            "",
            "c1.",
            "c1.!!",
            "c2.e30",
            "garbage",
            &format!("c1.{}", URL_SAFE_NO_PAD.encode(br#"{"s":"a","l":2,"i":0}"#)),
            &format!(
                "c1.{}",
                URL_SAFE_NO_PAD.encode(br#"{"s":"a","l":0,"i":-1}"#)
            ),
            &"c1.A".repeat(400),
        ] {
            let e = Position::decode(bad, 2).unwrap_err();
            assert!(e.starts_with("cursor: "), "{e}");
        }
        assert_eq!(size(0), Ok(DEFAULT_PAGE));
        assert!(size(1001).unwrap_err().starts_with("page_size: 1001"));
    }
}
