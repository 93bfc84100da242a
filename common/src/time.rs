//! Wall-clock time as both binaries write it: milliseconds since the Unix
//! epoch ([`now_ms`], the unit of every `*_ms` field in records and the
//! store) and RFC 3339 UTC text ([`rfc3339`], audit records and log lines).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch; 0 if the clock is before 1970.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Now as RFC 3339 in UTC with milliseconds (see [`rfc3339`]).
pub fn rfc3339_now() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(since.as_secs(), since.subsec_millis())
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC with milliseconds;
/// times before 1970 never occur here and read as 1970.
pub fn rfc3339_ms(ms: i64) -> String {
    rfc3339(
        ms.div_euclid(1000).max(0) as u64,
        ms.rem_euclid(1000) as u32,
    )
}

/// `secs` since the Unix epoch plus `millis` as RFC 3339 in UTC with
/// milliseconds: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(secs: u64, millis: u32) -> String {
    rfc3339_frac(secs, millis, 3)
}

/// `secs` since the Unix epoch plus a fraction of a second of `digits`
/// decimal digits (`frac` < 10^digits) as RFC 3339 in UTC:
/// `YYYY-MM-DDTHH:MM:SS.<frac>Z`.
pub fn rfc3339_frac(secs: u64, frac: u32, digits: usize) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{frac:0digits$}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(1_767_225_599, 999), "2025-12-31T23:59:59.999Z");
        assert_eq!(
            rfc3339_frac(1_767_225_599, 42, 6),
            "2025-12-31T23:59:59.000042Z"
        );
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert!(now_ms() > 1_700_000_000_000);
    }
}
