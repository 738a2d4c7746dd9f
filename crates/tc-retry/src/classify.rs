//! [`classify`]: from one attempt's outcome to a [`Decision`] (succeed,
//! retry after a delay, or fail), the crate's rules in one function.

use std::time::Duration;

use crate::{Outcome, Policy, backoff};

/// What to do after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The call succeeded (2xx).
    Success,
    /// Try again after `delay`.
    Retry {
        /// How long to wait before the next attempt.
        delay: Duration,
        /// Why the attempt failed, as a stable string (see [`Outcome::reason`]).
        reason: String,
    },
    /// Give up: the failure is permanent or the attempts are used up.
    Fail {
        /// Why the last attempt failed, as a stable string (see [`Outcome::reason`]).
        reason: String,
    },
}

impl Decision {
    /// The failure reason of a retry or a failure; `None` for success.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Decision::Success => None,
            Decision::Retry { reason, .. } | Decision::Fail { reason } => Some(reason),
        }
    }
}

/// How an outcome is treated, before attempts and delays are considered.
enum Class {
    Success,
    /// Retried after the backoff, or after the server's Retry-After when
    /// `honours_retry_after` and the header is usable.
    Retryable {
        honours_retry_after: bool,
    },
    Permanent,
}

fn class_of(outcome: &Outcome) -> Class {
    match outcome {
        Outcome::Status { code, .. } => match code {
            200..=299 => Class::Success,
            408 | 429 => Class::Retryable {
                honours_retry_after: true,
            },
            500..=599 => Class::Retryable {
                honours_retry_after: false,
            },
            // 1xx, 3xx, the other 4xx, and codes HTTP does not define.
            _ => Class::Permanent,
        },
        Outcome::Timeout | Outcome::Connect | Outcome::AuthFailed => Class::Retryable {
            honours_retry_after: false,
        },
        // Other is not retried: the downstream may already have acted.
        Outcome::ResponseTooLarge | Outcome::DestinationDenied | Outcome::Other => Class::Permanent,
    }
}

/// Decides what follows attempt number `attempt` (1-based) of at most
/// `max_attempts`, which came to `outcome`.
///
/// See the [crate documentation](crate) for the rules. `rng` is drawn from
/// only when a backoff delay is computed.
pub fn classify(
    outcome: &Outcome,
    attempt: u32,
    max_attempts: u32,
    policy: &Policy,
    rng: &mut fastrand::Rng,
) -> Decision {
    let honours_retry_after = match class_of(outcome) {
        Class::Success => return Decision::Success,
        Class::Permanent => {
            return Decision::Fail {
                reason: outcome.reason(),
            };
        }
        Class::Retryable {
            honours_retry_after,
        } => honours_retry_after,
    };
    let reason = outcome.reason();
    if attempt >= max_attempts {
        return Decision::Fail { reason };
    }
    let requested = match outcome {
        Outcome::Status {
            retry_after: Some(header),
            ..
        } if honours_retry_after => header.wait,
        _ => None,
    };
    let delay = match requested {
        Some(delay) => delay.min(policy.max_retry_after),
        None => backoff(attempt, policy, rng),
    };
    Decision::Retry { delay, reason }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::RetryAfter;

    const MAX_ATTEMPTS: u32 = 5;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Expect {
        Success,
        Retry,
        Fail,
    }

    /// The product's rules for status codes, written as data: the first
    /// matching range wins, and anything unmatched fails.
    const STATUS_RULES: &[(u16, u16, Expect)] = &[
        (408, 408, Expect::Retry),
        (429, 429, Expect::Retry),
        (100, 199, Expect::Fail),
        (200, 299, Expect::Success),
        (300, 399, Expect::Fail),
        (400, 499, Expect::Fail),
        (500, 599, Expect::Retry),
    ];

    fn expected_for(code: u16) -> Expect {
        STATUS_RULES
            .iter()
            .find(|(low, high, _)| (*low..=*high).contains(&code))
            .map_or(Expect::Fail, |(_, _, expect)| *expect)
    }

    /// The un-jittered backoff of the default policy, by hand.
    fn default_raw(attempt: u32) -> Duration {
        let millis: u64 = match attempt {
            0 | 1 => 200,
            2 => 400,
            3 => 800,
            4 => 1600,
            5 => 3200,
            6 => 6400,
            _ => 8000,
        };
        Duration::from_millis(millis)
    }

    fn status(code: u16) -> Outcome {
        Outcome::Status {
            code,
            retry_after: None,
        }
    }

    fn status_with_retry_after(code: u16, value: &str, received_at: SystemTime) -> Outcome {
        Outcome::Status {
            code,
            retry_after: Some(RetryAfter::parse(value, received_at)),
        }
    }

    /// Sun, 06 Nov 1994 08:49:37 GMT.
    fn arrival() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777)
    }

    fn decide(outcome: &Outcome, attempt: u32, max_attempts: u32, policy: &Policy) -> Decision {
        let mut rng = fastrand::Rng::with_seed(u64::from(attempt) ^ 0x5eed);
        classify(outcome, attempt, max_attempts, policy, &mut rng)
    }

    /// Classifies `outcome` at `attempt` of `max_attempts` with the default
    /// policy and checks the kind of decision, the reason, and for a retry
    /// that the delay is a plain backoff delay for that attempt.
    fn check(outcome: &Outcome, attempt: u32, max_attempts: u32, expect: Expect, reason: &str) {
        let decision = decide(outcome, attempt, max_attempts, &Policy::default());
        let context = format!("{outcome:?} at attempt {attempt}/{max_attempts}: {decision:?}");
        match (expect, &decision) {
            (Expect::Success, Decision::Success) => {}
            (Expect::Fail, Decision::Fail { reason: got }) => assert_eq!(got, reason, "{context}"),
            (Expect::Retry, Decision::Retry { delay, reason: got }) => {
                assert_eq!(got, reason, "{context}");
                check_backoff_delay(*delay, attempt, &context);
            }
            _ => panic!("expected {expect:?}; {context}"),
        }
    }

    fn check_backoff_delay(delay: Duration, attempt: u32, context: &str) {
        let raw = default_raw(attempt);
        assert!(
            delay >= raw && delay < raw.mul_f64(1.5),
            "delay {delay:?} outside [{raw:?}, 1.5 * {raw:?}); {context}"
        );
    }

    /// The delay of a retry decision, failing the test on anything else.
    fn retry_delay(decision: Decision, context: &str) -> Duration {
        match decision {
            Decision::Retry { delay, .. } => delay,
            other => panic!("expected a retry, got {other:?}; {context}"),
        }
    }

    #[test]
    fn every_status_from_100_to_599_follows_the_rules() {
        let mut counts = [0; 3];
        for code in 100..=599 {
            let expect = expected_for(code);
            let reason = format!("http_{code}");
            check(&status(code), 1, MAX_ATTEMPTS, expect, &reason);
            check(&status(code), 3, MAX_ATTEMPTS, expect, &reason);
            // On the last attempt a retryable status fails with its reason.
            let last = if expect == Expect::Retry {
                Expect::Fail
            } else {
                expect
            };
            check(&status(code), MAX_ATTEMPTS, MAX_ATTEMPTS, last, &reason);
            counts[expect as usize] += 1;
        }
        // 2xx succeed; 5xx plus 408 and 429 retry; the rest fail.
        assert_eq!(counts, [100, 102, 298]);
    }

    #[test]
    fn status_codes_outside_100_to_599_fail() {
        for code in [0, 1, 99, 600, 601, 999, 1000, u16::MAX] {
            check(
                &status(code),
                1,
                MAX_ATTEMPTS,
                Expect::Fail,
                &format!("http_{code}"),
            );
        }
    }

    #[test]
    fn every_error_kind_is_classified() {
        for (outcome, expect, reason) in [
            (Outcome::Timeout, Expect::Retry, "timeout"),
            (Outcome::Connect, Expect::Retry, "connect"),
            (
                Outcome::ResponseTooLarge,
                Expect::Fail,
                "response_too_large",
            ),
            (Outcome::Other, Expect::Fail, "error"),
            (Outcome::AuthFailed, Expect::Retry, "auth_failed"),
            (
                Outcome::DestinationDenied,
                Expect::Fail,
                "destination_denied",
            ),
        ] {
            for attempt in 1..MAX_ATTEMPTS {
                check(&outcome, attempt, MAX_ATTEMPTS, expect, reason);
            }
            check(&outcome, MAX_ATTEMPTS, MAX_ATTEMPTS, Expect::Fail, reason);
        }
    }

    #[test]
    fn exhausted_attempts_fail_with_the_last_reason() {
        let retryable = [
            (status(503), "http_503"),
            (status(429), "http_429"),
            (status_with_retry_after(429, "1", arrival()), "http_429"),
            (status_with_retry_after(408, "1", arrival()), "http_408"),
            (Outcome::Timeout, "timeout"),
            (Outcome::Connect, "connect"),
        ];
        let exhausted = [
            (3, 3),
            (4, 3),
            (u32::MAX, 3),
            (0, 0),
            (1, 0),
            (1, 1),
            (u32::MAX, u32::MAX),
        ];
        for (outcome, reason) in &retryable {
            for (attempt, max_attempts) in exhausted {
                check(outcome, attempt, max_attempts, Expect::Fail, reason);
            }
        }
        // One short of the limit still retries, even at the top of the range.
        check(
            &status(503),
            u32::MAX - 1,
            u32::MAX,
            Expect::Retry,
            "http_503",
        );
        check(&Outcome::Timeout, 0, 1, Expect::Retry, "timeout");
    }

    #[test]
    fn success_wins_even_past_the_last_attempt() {
        for (attempt, max_attempts) in [(1, 1), (5, 3), (u32::MAX, 0)] {
            check(&status(200), attempt, max_attempts, Expect::Success, "");
            check(&status(204), attempt, max_attempts, Expect::Success, "");
        }
    }

    #[test]
    fn retry_after_is_honoured_for_408_and_429() {
        let secs = Duration::from_secs;
        let cases = [
            // Beyond the 8 s backoff cap: only max_retry_after bounds it.
            ("30", secs(30)),
            ("0", secs(0)),
            ("1", secs(1)),
            ("Sun, 06 Nov 1994 08:50:07 GMT", secs(30)),
            ("Sun, 06 Nov 1994 09:49:36 GMT", secs(3599)),
            ("Sun, 06 Nov 1994 08:49:37 GMT", secs(0)),
            ("Sat, 05 Nov 1994 08:49:37 GMT", secs(0)),
        ];
        for code in [408, 429] {
            for (value, expected) in cases {
                let outcome = status_with_retry_after(code, value, arrival());
                let decision = decide(&outcome, 2, MAX_ATTEMPTS, &Policy::default());
                assert_eq!(
                    decision,
                    Decision::Retry {
                        delay: expected,
                        reason: format!("http_{code}")
                    },
                    "{value:?}"
                );
            }
        }
    }

    #[test]
    fn retry_after_is_bounded_by_max_retry_after() {
        let hour = Duration::from_secs(3600);
        let short = Policy {
            max_retry_after: Duration::from_secs(10),
            ..Policy::default()
        };
        for (policy, value, expected) in [
            (Policy::default(), "3600", hour),
            (Policy::default(), "3601", hour),
            (Policy::default(), "86400", hour),
            (Policy::default(), "99999999999999999999999", hour),
            (Policy::default(), "Sun, 06 Nov 1994 10:49:37 GMT", hour),
            (short, "30", Duration::from_secs(10)),
            (short, "9", Duration::from_secs(9)),
            (
                short,
                "Sun, 06 Nov 1994 08:50:07 GMT",
                Duration::from_secs(10),
            ),
        ] {
            for code in [408, 429] {
                let outcome = status_with_retry_after(code, value, arrival());
                let context = format!("{code} {value:?}");
                let delay = retry_delay(decide(&outcome, 1, MAX_ATTEMPTS, &policy), &context);
                assert_eq!(delay, expected, "{context}");
            }
        }
    }

    #[test]
    fn unusable_retry_after_falls_back_to_backoff() {
        for value in [
            "",
            " ",
            "1.5",
            "abc",
            "-1",
            "+5",
            "-30",
            "5 s",
            "Sun, 06 Nov 1994",
        ] {
            for code in [408, 429] {
                for attempt in [1, 4, 9] {
                    let outcome = status_with_retry_after(code, value, arrival());
                    let context = format!("{code} {value:?} attempt {attempt}");
                    let delay = retry_delay(
                        decide(&outcome, attempt, MAX_ATTEMPTS + 10, &Policy::default()),
                        &context,
                    );
                    check_backoff_delay(delay, attempt, &context);
                }
            }
        }
    }

    #[test]
    fn retry_after_on_other_statuses_is_ignored() {
        for code in [500, 502, 503, 504] {
            let outcome = status_with_retry_after(code, "30", arrival());
            let context = format!("{code}");
            let delay = retry_delay(
                decide(&outcome, 2, MAX_ATTEMPTS, &Policy::default()),
                &context,
            );
            check_backoff_delay(delay, 2, &context);
        }
        for code in [400, 403, 404, 301, 101] {
            let outcome = status_with_retry_after(code, "30", arrival());
            check(
                &outcome,
                1,
                MAX_ATTEMPTS,
                Expect::Fail,
                &format!("http_{code}"),
            );
        }
    }

    #[test]
    fn same_seed_gives_the_same_decisions() {
        let outcomes = [status(503), Outcome::Timeout, Outcome::Connect, status(429)];
        let run = |seed: u64| -> Vec<Decision> {
            let mut rng = fastrand::Rng::with_seed(seed);
            (1..=20)
                .flat_map(|attempt| {
                    outcomes
                        .iter()
                        .map(|outcome| classify(outcome, attempt, 30, &Policy::default(), &mut rng))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        assert_eq!(run(9), run(9));
        assert_ne!(run(9), run(10));
    }

    #[test]
    fn decision_reason_accessor() {
        assert_eq!(Decision::Success.reason(), None);
        let retry = Decision::Retry {
            delay: Duration::ZERO,
            reason: "timeout".to_owned(),
        };
        assert_eq!(retry.reason(), Some("timeout"));
        let fail = Decision::Fail {
            reason: "http_404".to_owned(),
        };
        assert_eq!(fail.reason(), Some("http_404"));
    }
}
