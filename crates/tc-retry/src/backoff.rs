//! Capped exponential backoff with equal jitter: the delay before the next
//! attempt, from a [`Policy`].

use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The timing knobs of a retry schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The backoff before the first retry, before jitter.
    pub base: Duration,
    /// The largest backoff, before jitter.
    pub cap: Duration,
    /// The longest `Retry-After` delay honoured; longer requests are cut to it.
    pub max_retry_after: Duration,
}

impl Default for Policy {
    /// 200 ms base, 8 s cap, Retry-After honoured up to one hour.
    fn default() -> Self {
        Policy {
            base: Duration::from_millis(200),
            cap: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(3600),
        }
    }
}

/// The delay before retrying after attempt `attempt` (1-based; 0 counts as 1).
///
/// `raw = min(cap, base * 2^(attempt-1))`, then equal jitter adds a uniform
/// random amount in `[0, raw / 2)`, so the delay lies in `[raw, 1.5 * raw)`
/// (exactly `raw` when `raw` is under 2 ns). Never panics: the growth
/// saturates at `cap`, and a delay beyond [`Duration::MAX`] is
/// [`Duration::MAX`].
pub fn backoff(attempt: u32, policy: &Policy, rng: &mut fastrand::Rng) -> Duration {
    let raw = raw_nanos(attempt, policy);
    let half = raw / 2;
    let jitter = if half == 0 { 0 } else { rng.u128(..half) };
    // raw <= Duration::MAX in nanoseconds (< 2^94), so the sum fits in u128.
    duration_from_nanos(raw + jitter)
}

/// `min(cap, base * 2^(attempt-1))` in nanoseconds. Computed in u128 because
/// the doubling overflows any Duration arithmetic long before `u32::MAX`.
fn raw_nanos(attempt: u32, policy: &Policy) -> u128 {
    let base = policy.base.as_nanos();
    let cap = policy.cap.as_nanos();
    if base == 0 {
        return 0;
    }
    let exponent = attempt.max(1) - 1;
    let grown = 1u128
        .checked_shl(exponent)
        .and_then(|factor| base.checked_mul(factor))
        .unwrap_or(u128::MAX);
    grown.min(cap)
}

/// The duration of `nanos` nanoseconds, saturating at [`Duration::MAX`].
fn duration_from_nanos(nanos: u128) -> Duration {
    match u64::try_from(nanos / NANOS_PER_SEC) {
        // The remainder is below 10^9, so it fits in u32 and never carries.
        Ok(secs) => Duration::new(secs, (nanos % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEEDS: u64 = 1000;

    /// The un-jittered schedule of the default policy, written out by hand.
    fn default_raw(attempt: u32) -> Duration {
        let millis = match attempt {
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

    /// An independent oracle for any policy: double step by step, stopping
    /// once the cap is reached (any base >= 1 ns passes Duration::MAX within
    /// 128 doublings, so 200 steps always suffice).
    fn oracle_raw(attempt: u32, policy: &Policy) -> u128 {
        let cap = policy.cap.as_nanos();
        let mut raw = policy.base.as_nanos();
        for _ in 1..attempt.clamp(1, 200) {
            if raw >= cap {
                break;
            }
            raw = raw.saturating_mul(2);
        }
        raw.min(cap)
    }

    /// The delay is in `[raw, 1.5 * raw)`, or exactly `raw` when `raw` is 0.
    fn check_bounds(delay: Duration, raw: u128, context: &str) {
        let d = delay.as_nanos();
        assert!(d >= raw, "{context}: {delay:?} below raw {raw} ns");
        assert!(
            d * 2 < raw * 3 || (raw == 0 && d == 0),
            "{context}: {delay:?} not below 1.5 * {raw} ns"
        );
    }

    fn attempts_to_check() -> impl Iterator<Item = u32> {
        (1..=64).chain([u32::MAX])
    }

    #[test]
    fn default_policy_values() {
        let policy = Policy::default();
        assert_eq!(policy.base, Duration::from_millis(200));
        assert_eq!(policy.cap, Duration::from_secs(8));
        assert_eq!(policy.max_retry_after, Duration::from_secs(3600));
    }

    #[test]
    fn delay_stays_within_equal_jitter_bounds_for_many_seeds() {
        let policy = Policy::default();
        let mut checked = 0;
        for seed in 0..SEEDS {
            let mut rng = fastrand::Rng::with_seed(seed);
            for attempt in attempts_to_check() {
                let delay = backoff(attempt, &policy, &mut rng);
                let raw = default_raw(attempt).as_nanos();
                check_bounds(delay, raw, &format!("seed {seed} attempt {attempt}"));
                checked += 1;
            }
        }
        assert_eq!(checked, SEEDS * 65);
    }

    #[test]
    fn jitter_spreads_over_the_upper_half() {
        let policy = Policy::default();
        for attempt in [1, 4, 64] {
            let raw = default_raw(attempt);
            let delays: Vec<Duration> = (0..SEEDS)
                .map(|seed| backoff(attempt, &policy, &mut fastrand::Rng::with_seed(seed)))
                .collect();
            let min = delays.iter().min().copied().unwrap_or_default();
            let max = delays.iter().max().copied().unwrap_or_default();
            // With 1000 uniform draws the extremes sit close to both ends.
            assert!(min < raw.mul_f64(1.05), "attempt {attempt}: min {min:?}");
            assert!(max > raw.mul_f64(1.45), "attempt {attempt}: max {max:?}");
        }
    }

    #[test]
    fn attempt_zero_is_treated_as_attempt_one() {
        let policy = Policy::default();
        for seed in 0..100 {
            let zero = backoff(0, &policy, &mut fastrand::Rng::with_seed(seed));
            let one = backoff(1, &policy, &mut fastrand::Rng::with_seed(seed));
            assert_eq!(zero, one, "seed {seed}");
        }
    }

    #[test]
    fn same_seed_gives_the_same_delays() {
        let policy = Policy::default();
        let run = |seed: u64| -> Vec<Duration> {
            let mut rng = fastrand::Rng::with_seed(seed);
            attempts_to_check()
                .map(|attempt| backoff(attempt, &policy, &mut rng))
                .collect()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }

    #[test]
    fn extreme_policies_neither_overflow_nor_panic() {
        let ns = Duration::from_nanos;
        let policies = [
            ("default", Policy::default()),
            (
                "zero base",
                Policy {
                    base: Duration::ZERO,
                    ..Policy::default()
                },
            ),
            (
                "zero cap",
                Policy {
                    cap: Duration::ZERO,
                    ..Policy::default()
                },
            ),
            (
                "base above cap",
                Policy {
                    base: Duration::from_secs(10),
                    cap: Duration::from_secs(1),
                    ..Policy::default()
                },
            ),
            (
                "1 ns base, max cap",
                Policy {
                    base: ns(1),
                    cap: Duration::MAX,
                    ..Policy::default()
                },
            ),
            (
                "max base, max cap",
                Policy {
                    base: Duration::MAX,
                    cap: Duration::MAX,
                    ..Policy::default()
                },
            ),
            (
                "max base, zero cap",
                Policy {
                    base: Duration::MAX,
                    cap: Duration::ZERO,
                    ..Policy::default()
                },
            ),
            (
                "1 ns base and cap",
                Policy {
                    base: ns(1),
                    cap: ns(1),
                    ..Policy::default()
                },
            ),
            (
                "3 ns base and cap",
                Policy {
                    base: ns(3),
                    cap: ns(3),
                    ..Policy::default()
                },
            ),
        ];
        let attempts = [
            0,
            1,
            2,
            31,
            32,
            33,
            63,
            64,
            65,
            94,
            95,
            96,
            127,
            128,
            129,
            1000,
            u32::MAX,
        ];
        for (name, policy) in policies {
            for seed in 0..20 {
                let mut rng = fastrand::Rng::with_seed(seed);
                for attempt in attempts {
                    let delay = backoff(attempt, &policy, &mut rng);
                    let raw = oracle_raw(attempt, &policy);
                    check_bounds(delay, raw, &format!("{name} seed {seed} attempt {attempt}"));
                }
            }
        }
    }

    #[test]
    fn saturated_delays_are_duration_max() {
        let policy = Policy {
            base: Duration::MAX,
            cap: Duration::MAX,
            ..Policy::default()
        };
        for attempt in [1, 2, u32::MAX] {
            let delay = backoff(attempt, &policy, &mut fastrand::Rng::with_seed(1));
            assert_eq!(delay, Duration::MAX, "attempt {attempt}");
        }
    }
}
