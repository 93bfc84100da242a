//! Paging of `ListBackgroundCalls` (engine and admin APIs): pages in
//! creation order, continuing after the last call returned.

use super::{BackgroundError, BackgroundRecord};

/// The most calls one `ListBackgroundCalls` page holds.
pub const MAX_PAGE_SIZE: u32 = 1000;

/// One page of `records` (oldest first, by creation time then id, as
/// [`Background::list`] returns them): at most `page_size` (0: all) after
/// the position `page_token` names, and the token of the next page when
/// more follow. A token is `<created_at_ms>:<id>` of the last call of the
/// page before; callers treat it as opaque. Errors: a `page_size` over
/// [`MAX_PAGE_SIZE`], or a token this function did not make.
pub fn page_of(
    records: Vec<BackgroundRecord>,
    page_size: u32,
    page_token: &str,
) -> Result<(Vec<BackgroundRecord>, String), BackgroundError> {
    if page_size > MAX_PAGE_SIZE {
        return Err(BackgroundError::Invalid(format!(
            "page_size: {page_size} is over the maximum {MAX_PAGE_SIZE}"
        )));
    }
    let after = if page_token.is_empty() {
        None
    } else {
        let parsed = page_token
            .split_once(':')
            .and_then(|(t, id)| Some((t.parse::<i64>().ok()?, id)))
            .filter(|(_, id)| !id.is_empty());
        Some(parsed.ok_or_else(|| {
            BackgroundError::Invalid(
                "page_token: not a token that ListBackgroundCalls returned".into(),
            )
        })?)
    };
    let mut rest: Vec<_> = records
        .into_iter()
        .filter(|r| after.is_none_or(|(t, id)| (r.created_at_ms, r.id.as_str()) > (t, id)))
        .collect();
    if page_size == 0 || rest.len() <= page_size as usize {
        return Ok((rest, String::new()));
    }
    rest.truncate(page_size as usize);
    let last = rest.last().expect("page_size >= 1");
    let next = format!("{}:{}", last.created_at_ms, last.id);
    Ok((rest, next))
}
