//! Pacing a destination by its own signals, before it has to refuse calls:
//! the rate-limit fields of its answers (a window with no call left holds
//! every call until the window resets) and, for a server that says nothing,
//! additive increase and multiplicative decrease of the calls it gets in
//! flight (a `429` or `503` without such fields halves them; each window
//! of successes adds one back), with a slow start from one call after a
//! resume or a breaker closing.
//!
//! The decisions are plain data on one destination's [`Pacing`]; the flow
//! ([`crate::flow`]) keeps one per destination, asks it for the claim's
//! holds and reports every answer to it.

use tc_model::Timestamp;
use tc_retry::RateLimit;

/// How one answered call counts for the pacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// The call went through: a 2xx.
    Success,
    /// The server is overloaded and did not say how long to wait: a `429`
    /// or `503` without rate-limit fields.
    Throttled,
    /// Says nothing about the server's capacity.
    Other,
}

/// Why the pacing changed, for the log line and the
/// `taskcenter_destination_paced_total{reason}` counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Paced {
    /// The server's window has no call left: held until its reset.
    RateLimit,
    /// A throttling answer halved the calls in flight.
    Throttled,
    /// Calls start again from one in flight.
    SlowStart,
}

impl Paced {
    /// The counter's `reason` label.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Paced::RateLimit => "ratelimit",
            Paced::Throttled => "throttled",
            Paced::SlowStart => "slow_start",
        }
    }
}

/// How long after a server's window reset its fields still bound the
/// calls (one call to learn the new window): a destination in steady use
/// is called again within it, and one that is not is forgotten.
const FIELDS_KEPT: std::time::Duration = std::time::Duration::from_secs(60);

/// One destination's pacing state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Pacing {
    /// The calls allowed in flight now; `None` while pacing sets no bound.
    window: Option<u32>,
    /// While the window is below it, each success adds one (slow start);
    /// at or above it, one per window of successes.
    threshold: u32,
    /// Successes counted towards the next increase.
    successes: u32,
    /// Answers still due from calls that were in flight at the last
    /// decrease: their throttles are the same overload, already answered
    /// (one decrease per window, as TCP halves once per round trip).
    recovering: u64,
    /// What the server's last rate-limit fields said.
    remaining: Option<u64>,
    reset_at: Option<Timestamp>,
}

impl Pacing {
    /// Takes an answer's signal and rate-limit fields. `in_flight` is the
    /// calls in flight when it arrived; `ceiling` the most the window can
    /// grow to before pacing bounds nothing (the destination's cap, else
    /// the worker's concurrency). Returns what changed, when it paces.
    pub(crate) fn answered(
        &mut self,
        signal: Signal,
        rate_limit: Option<RateLimit>,
        in_flight: u64,
        ceiling: u32,
        now: Timestamp,
    ) -> Option<Paced> {
        let mut paced = None;
        if let Some(limit) = rate_limit {
            self.fields(limit, now);
            if limit.hold().is_some() {
                paced = Some(Paced::RateLimit);
            }
        }
        let before_decrease = self.recovering > 0;
        self.recovering = self.recovering.saturating_sub(1);
        match signal {
            Signal::Throttled if before_decrease => {}
            Signal::Throttled => {
                let current = self
                    .window
                    .unwrap_or_else(|| u32::try_from(in_flight.max(1)).unwrap_or(u32::MAX));
                let halved = (current / 2).max(1);
                self.window = Some(halved);
                self.threshold = halved;
                self.successes = 0;
                self.recovering = in_flight.saturating_sub(1);
                paced = paced.or(Some(Paced::Throttled));
            }
            Signal::Success => self.grow(ceiling),
            Signal::Other => {}
        }
        paced
    }

    /// Keeps what an answer's rate-limit fields say. Answers of one window
    /// arrive in any order, and a reset given as a delay moves with each:
    /// while the known window is current, the fewest calls left that any
    /// answer reported and the latest reset stand (an answer sent earlier
    /// counts fewer calls than the server has seen since). Once it has
    /// reset, the next answer tells the new window.
    fn fields(&mut self, limit: RateLimit, now: Timestamp) {
        let reset_at = limit.reset.map(|reset| now.saturating_add(reset));
        match (self.remaining, self.reset_at, reset_at) {
            (Some(remaining), Some(current), Some(new)) if current > now => {
                self.remaining = Some(remaining.min(limit.remaining));
                self.reset_at = Some(current.max(new));
            }
            _ => {
                self.remaining = Some(limit.remaining);
                self.reset_at = reset_at;
            }
        }
    }

    /// The calls the server's window still allows beside `in_flight`,
    /// while its fields are known: what the last answers left, less the
    /// calls already sent (the server may not have counted them yet);
    /// once the window has reset and until an answer tells the new one,
    /// one call, which learns it. `None` when the server gave no window,
    /// or its last one reset more than [`FIELDS_KEPT`] ago.
    fn calls_left(&self, in_flight: u64, now: Timestamp) -> Option<u64> {
        let (Some(remaining), Some(reset_at)) = (self.remaining, self.reset_at) else {
            return None;
        };
        if reset_at > now {
            Some(remaining.saturating_sub(in_flight))
        } else if reset_at.saturating_add(FIELDS_KEPT) > now {
            Some(1u64.saturating_sub(in_flight))
        } else {
            None
        }
    }

    /// Whether the server's rate-limit fields bound the calls now.
    pub(crate) fn bounded_by_fields(&self, now: Timestamp) -> bool {
        self.calls_left(0, now).is_some()
    }

    fn grow(&mut self, ceiling: u32) {
        let Some(window) = self.window else {
            return;
        };
        if window < self.threshold {
            self.window = Some(window + 1);
        } else {
            self.successes += 1;
            if self.successes >= window {
                self.successes = 0;
                self.window = Some(window + 1);
            }
        }
        if self.window.is_some_and(|window| window >= ceiling.max(1)) {
            *self = Pacing {
                remaining: self.remaining,
                reset_at: self.reset_at,
                ..Pacing::default()
            };
        }
    }

    /// Calls start again from one in flight, doubling each window up to
    /// `ceiling`: after a resume or a breaker closing.
    pub(crate) fn slow_start(&mut self, ceiling: u32) -> Paced {
        self.window = Some(1);
        self.threshold = ceiling.max(1);
        self.successes = 0;
        Paced::SlowStart
    }

    /// Until when every call waits: the reset of a window with no call
    /// left, while it is ahead.
    pub(crate) fn held_until(&self, now: Timestamp) -> Option<Timestamp> {
        match (self.remaining, self.reset_at) {
            (Some(0), Some(reset_at)) if reset_at > now => Some(reset_at),
            _ => None,
        }
    }

    /// How many more calls the window and the server's rate-limit fields
    /// allow beside `in_flight`; `None` when pacing sets no bound.
    pub(crate) fn room(&self, in_flight: u64, now: Timestamp) -> Option<usize> {
        let window = self
            .window
            .map(|window| u64::from(window).saturating_sub(in_flight));
        let room = match (window, self.calls_left(in_flight, now)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        room.map(|room| usize::try_from(room).unwrap_or(usize::MAX))
    }

    /// The calls allowed in flight, for the view (`effective_max_in_flight`).
    pub(crate) fn window(&self) -> Option<u32> {
        self.window
    }

    /// The last rate-limit fields, for the view (`ratelimit_remaining`,
    /// `ratelimit_reset_at`).
    pub(crate) fn rate_limit(&self) -> (Option<u64>, Option<Timestamp>) {
        (self.remaining, self.reset_at)
    }

    /// Whether nothing here needs remembering.
    pub(crate) fn is_idle(&self, now: Timestamp) -> bool {
        self.window.is_none() && self.held_until(now).is_none() && !self.bounded_by_fields(now)
    }
}

/// A rate-limit hold as the delay it asks for, for the log line.
pub(crate) fn hold_ms(until: Timestamp, now: Timestamp) -> u64 {
    u64::try_from(until.duration_since(now).as_millis()).unwrap_or(u64::MAX)
}

/// The signal of an answer: `status` with or without rate-limit fields.
pub(crate) fn signal_of(status: Option<u16>, rate_limit: Option<&RateLimit>) -> Signal {
    match status {
        Some(429 | 503) if rate_limit.is_none() => Signal::Throttled,
        Some(200..=299) => Signal::Success,
        _ => Signal::Other,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_000_000);

    /// Plays `signals` (each with its in-flight count) on a fresh pacing
    /// and checks the window after each.
    fn check(start: Option<u32>, ceiling: u32, steps: &[(Signal, u64, Option<u32>)]) {
        let mut pacing = Pacing::default();
        if start.is_some() {
            pacing.slow_start(ceiling);
        }
        for (i, (signal, in_flight, expected)) in steps.iter().enumerate() {
            pacing.answered(*signal, None, *in_flight, ceiling, NOW);
            assert_eq!(pacing.window(), *expected, "step {i}: {signal:?}");
        }
    }

    #[test]
    fn throttling_halves_and_successes_add_one_per_window() {
        use Signal::*;
        // After a decrease, the answers of the calls then in flight.
        let settle = |n: usize, window: u32| vec![(Other, 1, Some(window)); n];
        let mut steps = vec![(Success, 10, None), (Throttled, 10, Some(5))];
        steps.extend(settle(9, 5));
        steps.push((Throttled, 5, Some(2)));
        steps.extend(settle(4, 2));
        steps.push((Throttled, 2, Some(1)));
        steps.extend(settle(1, 1));
        steps.extend([
            (Throttled, 1, Some(1)),
            // One window of one success: 2; of two: 3.
            (Success, 1, Some(2)),
            (Success, 1, Some(2)),
            (Success, 1, Some(3)),
            (Other, 1, Some(3)),
        ]);
        check(None, 100, &steps);
    }

    #[test]
    fn throttles_of_calls_already_in_flight_halve_once() {
        use Signal::*;
        check(
            None,
            100,
            &[
                // 8 in flight: the first 429 halves to 4; the other seven
                // calls were sent before it, their 429s are the same overload.
                (Throttled, 8, Some(4)),
                (Throttled, 7, Some(4)),
                (Throttled, 6, Some(4)),
                (Success, 5, Some(4)),
                (Throttled, 4, Some(4)),
                (Throttled, 3, Some(4)),
                (Throttled, 2, Some(4)),
                (Throttled, 1, Some(4)),
                // A call sent after the decrease: a new overload.
                (Throttled, 4, Some(2)),
            ],
        );
    }

    #[test]
    fn the_window_opens_again_at_the_ceiling() {
        use Signal::*;
        check(
            None,
            3,
            &[
                (Throttled, 4, Some(2)),
                (Success, 2, Some(2)),
                (Success, 2, None),
            ],
        );
    }

    #[test]
    fn slow_start_adds_one_per_success_until_the_ceiling() {
        use Signal::*;
        check(
            Some(1),
            4,
            &[
                (Success, 1, Some(2)),
                (Success, 2, Some(3)),
                (Success, 3, None),
            ],
        );
        // A throttle during slow start ends it.
        check(
            Some(1),
            50,
            &[
                (Success, 1, Some(2)),
                (Success, 2, Some(3)),
                (Success, 3, Some(4)),
                (Throttled, 4, Some(2)),
                (Success, 2, Some(2)),
                (Success, 2, Some(3)),
            ],
        );
    }

    #[test]
    fn a_window_with_no_call_left_holds_until_its_reset() {
        let mut pacing = Pacing::default();
        let limit = |remaining, secs| RateLimit {
            remaining,
            reset: Some(Duration::from_secs(secs)),
        };
        let reset_at = NOW.saturating_add(Duration::from_secs(2));
        assert_eq!(
            pacing.answered(Signal::Success, Some(limit(3, 2)), 1, 10, NOW),
            None
        );
        assert_eq!(pacing.held_until(NOW), None);
        assert_eq!(
            pacing.answered(Signal::Success, Some(limit(0, 2)), 1, 10, NOW),
            Some(Paced::RateLimit)
        );
        assert_eq!(pacing.held_until(NOW), Some(reset_at));
        assert_eq!(pacing.rate_limit(), (Some(0), Some(reset_at)));
        assert_eq!(pacing.held_until(reset_at), None);
        assert!(!pacing.is_idle(NOW));
        // Past the reset, one call learns the new window, for a while.
        assert!(!pacing.is_idle(reset_at));
        assert!(pacing.is_idle(reset_at.saturating_add(FIELDS_KEPT)));
    }

    /// The calls a window's fields leave bound the calls sent, before
    /// none is left: a claim never sends more than the server said it
    /// would take (less those already on their way).
    #[test]
    fn the_calls_a_window_has_left_bound_the_calls_sent() {
        let limit = |remaining| RateLimit {
            remaining,
            reset: Some(Duration::from_secs(1)),
        };
        let reset_at = NOW.saturating_add(Duration::from_secs(1));
        let later = |ms| NOW.saturating_add(Duration::from_millis(ms));
        let mut pacing = Pacing::default();
        pacing.answered(Signal::Success, Some(limit(19)), 1, 64, NOW);
        for (in_flight, at, expected) in [
            (0, NOW, Some(19)),
            (5, NOW, Some(14)),
            (30, NOW, Some(0)),
            // The window reset: one call learns the next one.
            (0, reset_at, Some(1)),
            (1, reset_at, Some(0)),
            (0, reset_at.saturating_add(FIELDS_KEPT), None),
        ] {
            assert_eq!(
                pacing.room(in_flight, at),
                expected,
                "{in_flight} at {at:?}"
            );
        }
        // An answer sent earlier in the same window, arriving late, does
        // not give calls back.
        pacing.answered(Signal::Success, Some(limit(4)), 1, 64, NOW);
        pacing.answered(Signal::Success, Some(limit(12)), 1, 64, later(10));
        assert_eq!(pacing.room(0, later(20)), Some(4));
        // The next window's answer, once the latest reset passed, does.
        let next = later(1_010);
        pacing.answered(Signal::Success, Some(limit(18)), 1, 64, next);
        assert_eq!(pacing.room(2, next), Some(16));
        // With a throttled window too, the smaller bound holds.
        pacing.answered(Signal::Throttled, None, 8, 64, next);
        assert_eq!(pacing.room(2, next), Some(2));
    }

    #[test]
    fn room_is_the_window_less_the_calls_in_flight() {
        let mut pacing = Pacing::default();
        assert_eq!(pacing.room(7, NOW), None);
        pacing.answered(Signal::Throttled, None, 8, 100, NOW);
        assert_eq!(pacing.room(0, NOW), Some(4));
        assert_eq!(pacing.room(3, NOW), Some(1));
        assert_eq!(pacing.room(9, NOW), Some(0));
    }

    #[test]
    fn only_a_429_or_503_without_fields_throttles() {
        let fields = RateLimit {
            remaining: 0,
            reset: None,
        };
        for (status, fields, expected) in [
            (Some(429), None, Signal::Throttled),
            (Some(503), None, Signal::Throttled),
            (Some(429), Some(&fields), Signal::Other),
            (Some(500), None, Signal::Other),
            (Some(200), None, Signal::Success),
            (Some(204), Some(&fields), Signal::Success),
            (Some(404), None, Signal::Other),
            (None, None, Signal::Other),
        ] {
            assert_eq!(signal_of(status, fields), expected, "{status:?}");
        }
    }

    /// The client keeps exactly the fields the parser reads (the two crates
    /// know nothing of each other; the worker joins them).
    #[test]
    fn the_client_keeps_the_fields_the_parser_reads() {
        assert_eq!(
            tc_downstream::RATE_LIMIT_HEADERS,
            tc_retry::RATE_LIMIT_FIELDS
        );
    }
}
