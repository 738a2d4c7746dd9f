//! Reading a response's rate-limit fields: how many calls its window has
//! left and when the window resets, so a caller holds before the server has
//! to answer `429`.
//!
//! Three spellings are in use and all are read, the first one present wins:
//!
//! 1. `RateLimit` (the IETF httpapi draft), a structured field in either of
//!    its two shapes: the current list of policies with parameters
//!    (`"default";r=0;t=30`: `r` calls remaining, `t` seconds to the reset),
//!    or the earlier dictionary (`limit=100, remaining=0, reset=30`). With
//!    several policies the one with the fewest calls left binds. A policy
//!    that gives no reset takes its window (`w`) from `RateLimit-Policy`
//!    (`"default";q=100;w=60`), the longest the wait can be.
//! 2. `RateLimit-Remaining` and `RateLimit-Reset` (earlier drafts).
//! 3. `X-RateLimit-Remaining` and `X-RateLimit-Reset` (GitHub, Twitter and
//!    most APIs before the draft).
//!
//! A reset is seconds from the answer, or a Unix time when it is larger than
//! a year (GitHub sends the moment, others the delay; no delay is a year
//! long). Fractions are allowed in the plain fields; a value that is neither
//! is ignored, as is a field whose remaining count is not a number.

use std::time::{Duration, SystemTime};

use sfv::{BareItem, Dictionary, List, ListEntry, Parameters, Parser};

/// A reset above this many seconds is a Unix time, not a delay.
const YEAR_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// What a response said about the calls its window has left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Calls left in the current window.
    pub remaining: u64,
    /// How long after the answer the window resets, when it said so.
    pub reset: Option<Duration>,
}

impl RateLimit {
    /// How long every call to the server should wait: until the reset, when
    /// no call is left. `None` while calls are left, or when the server
    /// gave no reset (the caller's `429` handling takes over then).
    pub fn hold(&self) -> Option<Duration> {
        if self.remaining == 0 {
            self.reset.filter(|reset| !reset.is_zero())
        } else {
            None
        }
    }
}

/// The rate-limit fields of a response received at `received_at`; `field`
/// returns a header's value by its lower-case name. `None` when the response
/// carries none of them in a usable form.
pub fn parse_rate_limit<'a>(
    field: impl Fn(&str) -> Option<&'a str>,
    received_at: SystemTime,
) -> Option<RateLimit> {
    if let Some(value) = field("ratelimit")
        && let Some(limit) = structured(value, field("ratelimit-policy"), received_at)
    {
        return Some(limit);
    }
    plain(
        &field,
        "ratelimit-remaining",
        "ratelimit-reset",
        received_at,
    )
    .or_else(|| {
        plain(
            &field,
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            received_at,
        )
    })
}

/// The names of every field [`parse_rate_limit`] reads, for a client that
/// keeps only the headers it needs.
pub const RATE_LIMIT_FIELDS: [&str; 6] = [
    "ratelimit",
    "ratelimit-policy",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

/// The `RateLimit` field in either of the draft's shapes.
fn structured(value: &str, policy: Option<&str>, received_at: SystemTime) -> Option<RateLimit> {
    if let Ok(list) = Parser::new(value).parse::<List>() {
        let windows = policy.map(policy_windows).unwrap_or_default();
        let binding = list
            .iter()
            .filter_map(|entry| match entry {
                ListEntry::Item(item) => Some(item),
                ListEntry::InnerList(_) => None,
            })
            .filter_map(|item| {
                let remaining = count(item.params.get("r"))?;
                let reset = seconds(item.params.get("t"), received_at).or_else(|| {
                    let name = item.bare_item.as_string().map(|name| name.as_str());
                    windows
                        .iter()
                        .find(|(policy, _)| name.is_some_and(|name| name == policy))
                        .map(|(_, window)| *window)
                });
                Some(RateLimit { remaining, reset })
            })
            .min_by_key(|limit| (limit.remaining, std::cmp::Reverse(limit.reset)));
        if binding.is_some() {
            return binding;
        }
    }
    let dictionary = Parser::new(value).parse::<Dictionary>().ok()?;
    let member = |name: &str| match dictionary.get(name) {
        Some(ListEntry::Item(item)) => Some(&item.bare_item),
        _ => None,
    };
    Some(RateLimit {
        remaining: count(member("remaining"))?,
        reset: seconds(member("reset"), received_at),
    })
}

/// Each policy's name and window (`w`) in a `RateLimit-Policy` field.
fn policy_windows(value: &str) -> Vec<(String, Duration)> {
    let Ok(list) = Parser::new(value).parse::<List>() else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|entry| match entry {
            ListEntry::Item(item) => {
                let name = item.bare_item.as_string()?.as_str().to_owned();
                let window = window(&item.params)?;
                Some((name, window))
            }
            ListEntry::InnerList(_) => None,
        })
        .collect()
}

fn window(params: &Parameters) -> Option<Duration> {
    let secs = i64::from(params.get("w")?.as_integer()?);
    u64::try_from(secs).ok().map(Duration::from_secs)
}

/// A structured field's non-negative integer.
fn count(item: Option<&BareItem>) -> Option<u64> {
    u64::try_from(i64::from(item?.as_integer()?)).ok()
}

/// A structured field's reset: an integer or a decimal, read as
/// [`reset_after`] reads it.
fn seconds(item: Option<&BareItem>, received_at: SystemTime) -> Option<Duration> {
    let item = item?;
    let secs = match item.as_integer() {
        Some(secs) => i64::from(secs) as f64,
        None => f64::from(item.as_decimal()?),
    };
    reset_after(secs, received_at)
}

/// The plain pair of fields of one spelling.
fn plain<'a>(
    field: &impl Fn(&str) -> Option<&'a str>,
    remaining: &str,
    reset: &str,
    received_at: SystemTime,
) -> Option<RateLimit> {
    let remaining = field(remaining)?.trim().parse::<u64>().ok()?;
    let reset = field(reset)
        .and_then(|value| value.trim().parse::<f64>().ok())
        .and_then(|secs| reset_after(secs, received_at));
    Some(RateLimit { remaining, reset })
}

/// A reset value as a delay from the answer: seconds, or a Unix time when
/// larger than a year (a moment already past is no delay).
fn reset_after(secs: f64, received_at: SystemTime) -> Option<Duration> {
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    if secs <= YEAR_SECS {
        return Some(Duration::from_secs_f64(secs));
    }
    let moment = SystemTime::UNIX_EPOCH.checked_add(Duration::try_from_secs_f64(secs).ok()?)?;
    Some(moment.duration_since(received_at).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-01T00:00:00Z, when every answer below arrived.
    fn arrival() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600)
    }

    fn check(fields: &[(&str, &str)], expected: Option<(u64, Option<f64>)>) {
        let field = |name: &str| {
            fields
                .iter()
                .find(|(field, _)| *field == name)
                .map(|(_, value)| *value)
        };
        let expected = expected.map(|(remaining, reset)| RateLimit {
            remaining,
            reset: reset.map(Duration::from_secs_f64),
        });
        assert_eq!(parse_rate_limit(field, arrival()), expected, "{fields:?}");
    }

    #[test]
    fn the_drafts_structured_field_in_both_shapes() {
        check(
            &[("ratelimit", r#""default";r=0;t=30"#)],
            Some((0, Some(30.0))),
        );
        check(
            &[("ratelimit", r#""default";r=7;t=2"#)],
            Some((7, Some(2.0))),
        );
        check(
            &[("ratelimit", "limit=100, remaining=0, reset=5")],
            Some((0, Some(5.0))),
        );
        check(&[("ratelimit", "limit=100, remaining=3")], Some((3, None)));
        // Several policies: the one with the fewest calls left binds, and
        // of those the one that waits longest.
        check(
            &[("ratelimit", r#""hour";r=500;t=3000, "second";r=0;t=1"#)],
            Some((0, Some(1.0))),
        );
        check(
            &[("ratelimit", r#""a";r=0;t=1, "b";r=0;t=9"#)],
            Some((0, Some(9.0))),
        );
        // A reset as a decimal.
        check(
            &[("ratelimit", r#""default";r=0;t=1.5"#)],
            Some((0, Some(1.5))),
        );
    }

    #[test]
    fn a_policy_without_a_reset_waits_its_window() {
        check(
            &[
                ("ratelimit", r#""burst";r=0"#),
                (
                    "ratelimit-policy",
                    r#""burst";q=10;w=20, "day";q=1000;w=86400"#,
                ),
            ],
            Some((0, Some(20.0))),
        );
        check(&[("ratelimit", r#""burst";r=0"#)], Some((0, None)));
    }

    #[test]
    fn the_plain_fields_of_both_spellings() {
        check(
            &[("ratelimit-remaining", "0"), ("ratelimit-reset", "12")],
            Some((0, Some(12.0))),
        );
        check(
            &[
                ("x-ratelimit-remaining", " 4 "),
                ("x-ratelimit-reset", "0.25"),
            ],
            Some((4, Some(0.25))),
        );
        check(&[("x-ratelimit-remaining", "0")], Some((0, None)));
        // The draft's spelling wins over the older one.
        check(
            &[
                ("ratelimit", r#""default";r=9;t=1"#),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "60"),
            ],
            Some((9, Some(1.0))),
        );
    }

    #[test]
    fn a_reset_beyond_a_year_is_a_unix_time() {
        // GitHub's form: the moment the window resets, 45 s after arrival.
        check(
            &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1767225645"),
            ],
            Some((0, Some(45.0))),
        );
        // A moment already past is no wait.
        check(
            &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1767225000"),
            ],
            Some((0, Some(0.0))),
        );
    }

    #[test]
    fn unusable_fields_are_ignored() {
        for fields in [
            &[][..],
            &[("ratelimit", "((( not a field")],
            &[("ratelimit", r#""default";t=30"#)],
            &[("x-ratelimit-remaining", "-1")],
            &[("x-ratelimit-remaining", "many")],
            &[("x-ratelimit-reset", "30")],
        ] {
            check(fields, None);
        }
        // A malformed reset leaves the count.
        check(
            &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "soon"),
            ],
            Some((0, None)),
        );
        check(
            &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "-5")],
            Some((0, None)),
        );
    }

    #[test]
    fn a_window_with_nothing_left_holds_until_its_reset() {
        let limit = |remaining, reset: Option<u64>| RateLimit {
            remaining,
            reset: reset.map(Duration::from_secs),
        };
        assert_eq!(limit(0, Some(3)).hold(), Some(Duration::from_secs(3)));
        assert_eq!(limit(1, Some(3)).hold(), None);
        assert_eq!(limit(0, None).hold(), None);
        assert_eq!(limit(0, Some(0)).hold(), None);
    }
}
