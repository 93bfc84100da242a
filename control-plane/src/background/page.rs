//! Paging of `ListBackgroundCalls` (engine and admin APIs): pages in
//! creation order, continuing after the last call returned.

use super::{BackgroundError, BackgroundRecord};

/// The most calls one `ListBackgroundCalls` page holds.
pub const MAX_PAGE_SIZE: u32 = 1000;

/// One page of `records` (oldest first, by creation time then id, as
/// [`super::Background::list`] returns them): at most `page_size` (0: all) after
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

/// The filters of one `ListBackgroundCalls` request (`server`, `status`,
/// `mode`; empty: any), applied before paging.
#[derive(Debug, Clone, Copy)]
pub struct Filter<'a> {
    server: &'a str,
    status: &'a str,
    mode: &'a str,
}

impl<'a> Filter<'a> {
    /// The filters of `r`. Errors: a `status` that is not an MCP task
    /// status, or a `mode` other than `task` and `wait`.
    pub fn of(
        r: &'a switchyard_proto::v1::ListBackgroundCallsRequest,
    ) -> Result<Self, BackgroundError> {
        if !r.status.is_empty() && !crate::model::background::STATUSES.contains(&r.status.as_str())
        {
            return Err(BackgroundError::Invalid(format!(
                "status: {:?} is not one of {}",
                r.status,
                crate::model::background::STATUSES.join(", ")
            )));
        }
        if !r.mode.is_empty() && r.mode != "task" && r.mode != "wait" {
            return Err(BackgroundError::Invalid(format!(
                "mode: {:?} is not one of task, wait",
                r.mode
            )));
        }
        Ok(Filter {
            server: &r.server,
            status: &r.status,
            mode: &r.mode,
        })
    }

    /// Whether `c` passes every filter.
    pub fn matches(&self, c: &BackgroundRecord) -> bool {
        (self.server.is_empty() || c.server == self.server)
            && (self.status.is_empty() || c.status == self.status)
            && (self.mode.is_empty() || c.mode == self.mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_proto::v1::ListBackgroundCallsRequest;

    fn rec(server: &str, status: &str, mode: &str) -> BackgroundRecord {
        BackgroundRecord {
            server: server.into(),
            status: status.into(),
            mode: mode.into(),
            ..Default::default()
        }
    }

    #[test]
    fn filters_match_each_field_and_refuse_unknown_values() {
        let r = ListBackgroundCallsRequest {
            server: "orders".into(),
            status: "working".into(),
            ..Default::default()
        };
        let f = Filter::of(&r).unwrap();
        assert!(f.matches(&rec("orders", "working", "task")));
        assert!(!f.matches(&rec("orders", "completed", "task")));
        assert!(!f.matches(&rec("everything", "working", "wait")));
        let any = ListBackgroundCallsRequest::default();
        assert!(
            Filter::of(&any)
                .unwrap()
                .matches(&rec("x", "failed", "wait"))
        );
        for (status, mode, needle) in [("sleeping", "", "status:"), ("", "poll", "mode:")] {
            let r = ListBackgroundCallsRequest {
                status: status.into(),
                mode: mode.into(),
                ..Default::default()
            };
            let e = Filter::of(&r).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }
}
