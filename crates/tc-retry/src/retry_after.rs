//! Parsing a `Retry-After` header value (delta-seconds or an HTTP-date)
//! into the delay it asks for.

use std::time::{Duration, SystemTime};

/// The delay a `Retry-After` header value asks for, or `None` if it is
/// neither of the two forms HTTP allows.
///
/// - delta-seconds: ASCII digits only (no sign, no fraction). Values too
///   large for a [`Duration`] saturate instead of failing, since the caller
///   bounds the delay anyway.
/// - HTTP-date (IMF-fixdate, or the obsolete RFC 850 and asctime forms): the
///   time from `received_at` to that date; a date at or before `received_at`
///   gives [`Duration::ZERO`].
///
/// Surrounding spaces and tabs are ignored, as HTTP allows them around a
/// field value.
pub fn parse_retry_after(value: &str, received_at: SystemTime) -> Option<Duration> {
    let value = value.trim_matches([' ', '\t']);
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        let secs = value.bytes().fold(0u64, |secs, digit| {
            secs.saturating_mul(10)
                .saturating_add(u64::from(digit - b'0'))
        });
        return Some(Duration::from_secs(secs));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(received_at).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sun, 06 Nov 1994 08:49:37 GMT, the example date of RFC 9110.
    fn rfc_example_time() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    fn check(value: &str, received_at: SystemTime, expected: Option<Duration>) {
        assert_eq!(parse_retry_after(value, received_at), expected, "{value:?}");
    }

    #[test]
    fn delta_seconds() {
        let secs = |s| Some(Duration::from_secs(s));
        for (value, expected) in [
            ("0", secs(0)),
            ("1", secs(1)),
            ("120", secs(120)),
            ("007", secs(7)),
            ("3600", secs(3600)),
            ("18446744073709551615", secs(u64::MAX)),
            (" 5", secs(5)),
            ("5\t", secs(5)),
        ] {
            check(value, rfc_example_time(), expected);
        }
    }

    #[test]
    fn huge_delta_seconds_saturate_instead_of_overflowing() {
        for value in [
            "18446744073709551616",
            "99999999999999999999999",
            &"9".repeat(1000),
        ] {
            check(
                value,
                rfc_example_time(),
                Some(Duration::from_secs(u64::MAX)),
            );
        }
    }

    #[test]
    fn garbage_is_rejected() {
        for value in [
            "",
            " ",
            "\t",
            "1.5",
            "abc",
            "-1",
            "+5",
            "5s",
            "1 2",
            "0x10",
            "1e3",
            "١",
            "-0",
            "5,6",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun, 32 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "tomorrow",
        ] {
            check(value, rfc_example_time(), None);
        }
    }

    #[test]
    fn http_dates_count_from_the_arrival_time() {
        let arrived = rfc_example_time();
        let secs = |s| Some(Duration::from_secs(s));
        for (value, expected) in [
            // IMF-fixdate, 30 s and one day ahead.
            ("Sun, 06 Nov 1994 08:50:07 GMT", secs(30)),
            ("Mon, 07 Nov 1994 08:49:37 GMT", secs(86_400)),
            // The obsolete forms recipients must still accept.
            ("Sunday, 06-Nov-94 08:50:07 GMT", secs(30)),
            ("Sun Nov  6 08:50:07 1994", secs(30)),
            // Now or in the past: retry at once.
            ("Sun, 06 Nov 1994 08:49:37 GMT", secs(0)),
            ("Sun, 06 Nov 1994 08:49:36 GMT", secs(0)),
            ("Thu, 01 Jan 1970 00:00:00 GMT", secs(0)),
        ] {
            check(value, arrived, expected);
        }
    }

    #[test]
    fn sub_second_arrival_times_are_respected() {
        let arrived = rfc_example_time() + Duration::from_millis(250);
        check(
            "Sun, 06 Nov 1994 08:49:38 GMT",
            arrived,
            Some(Duration::from_millis(750)),
        );
    }
}
