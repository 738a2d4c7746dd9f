//! When a destination's holds end, as every node shares them: the rule
//! that merges what one node learned into what the store has (each hold
//! to the later end) and the rule that drops ended ones.

use crate::Timestamp;

/// The holds of one destination the cluster shares (each `None`: no such
/// hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DestinationHolds {
    /// Until when its circuit breaker is open: a breaker opened by one
    /// node's failures holds on every node.
    pub breaker_open_until: Option<Timestamp>,
    /// Until when it backs off after a `Retry-After`.
    pub backoff_until: Option<Timestamp>,
    /// Until when it holds because its rate-limit fields said no calls
    /// are left in the window.
    pub ratelimit_until: Option<Timestamp>,
}

fn later(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

impl DestinationHolds {
    /// Both together: each hold ends at the later of the two ends, so the
    /// order in which nodes write never shortens a hold.
    pub fn merge(self, other: DestinationHolds) -> DestinationHolds {
        DestinationHolds {
            breaker_open_until: later(self.breaker_open_until, other.breaker_open_until),
            backoff_until: later(self.backoff_until, other.backoff_until),
            ratelimit_until: later(self.ratelimit_until, other.ratelimit_until),
        }
    }

    /// The holds still in force at `now` (one that ends at `now` has
    /// ended), or `None` when none is.
    pub fn current(self, now: Timestamp) -> Option<DestinationHolds> {
        let keep = |t: Option<Timestamp>| t.filter(|t| *t > now);
        let held = DestinationHolds {
            breaker_open_until: keep(self.breaker_open_until),
            backoff_until: keep(self.backoff_until),
            ratelimit_until: keep(self.ratelimit_until),
        };
        (held != DestinationHolds::default()).then_some(held)
    }

    /// The latest end of any hold: when the whole record has ended.
    pub fn ends(self) -> Option<Timestamp> {
        later(
            later(self.breaker_open_until, self.backoff_until),
            self.ratelimit_until,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Option<Timestamp> {
        Some(Timestamp::from_millis(ms))
    }

    fn holds(b: Option<Timestamp>, o: Option<Timestamp>, r: Option<Timestamp>) -> DestinationHolds {
        DestinationHolds {
            breaker_open_until: b,
            backoff_until: o,
            ratelimit_until: r,
        }
    }

    #[test]
    fn merging_keeps_each_later_end_in_either_order() {
        let check = |a: DestinationHolds, b: DestinationHolds, want: DestinationHolds| {
            assert_eq!(a.merge(b), want, "{a:?} + {b:?}");
            assert_eq!(b.merge(a), want, "{b:?} + {a:?}");
        };
        check(
            holds(at(10), None, at(5)),
            holds(at(7), at(3), None),
            holds(at(10), at(3), at(5)),
        );
        check(
            DestinationHolds::default(),
            holds(None, at(1), None),
            holds(None, at(1), None),
        );
    }

    #[test]
    fn ended_holds_are_dropped() {
        let h = holds(at(10), at(20), None);
        assert_eq!(h.current(Timestamp::from_millis(9)), Some(h));
        assert_eq!(
            h.current(Timestamp::from_millis(10)),
            Some(holds(None, at(20), None))
        );
        assert_eq!(h.current(Timestamp::from_millis(20)), None);
        assert_eq!(h.ends(), at(20));
    }
}
