//! A task's priority: an integer from 0 to 9, higher
//! first within a destination, and the aging that keeps a low one from
//! starving: a task counts one level higher for each
//! [`DEFAULT_AGING`] (`--priority-aging-ms`) it has waited since it was
//! due.
//!
//! The order is one key per task, [`claim_key`]: its due time moved
//! earlier by one aging period per level. Two due tasks compare by it as
//! by "priority plus periods waited" (the higher first): a fraction of a
//! period counts as that fraction, so the order never jumps when a period
//! ends, and it does not depend on the time of the claim.

use std::time::Duration;

use crate::Timestamp;

/// The highest priority.
pub const MAX_PRIORITY: u8 = 9;

/// How long a task waits to count one level higher, by default.
pub const DEFAULT_AGING: Duration = Duration::from_secs(60);

/// The key due tasks of one destination are claimed by, lowest first: the
/// due time less one `aging` period per level of `priority`.
pub fn claim_key(next_run_at: Timestamp, priority: u8, aging: Duration) -> i64 {
    let aging_ms = i64::try_from(aging.as_millis()).unwrap_or(i64::MAX);
    next_run_at
        .as_millis()
        .saturating_sub(aging_ms.saturating_mul(i64::from(priority)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row: two tasks (priority, due ms), the aging, and which one is
    /// claimed first.
    #[test]
    fn higher_priority_first_until_waiting_makes_up_the_difference() {
        let check = |a: (u8, i64), b: (u8, i64), aging_s: u64, a_first: bool| {
            let key = |(p, due): (u8, i64)| {
                claim_key(Timestamp::from_millis(due), p, Duration::from_secs(aging_s))
            };
            assert_eq!(
                key(a) < key(b),
                a_first,
                "{a:?} vs {b:?}, aging {aging_s} s"
            );
        };
        // Same due time: the higher priority first.
        check((1, 0), (0, 0), 60, true);
        check((9, 0), (8, 0), 60, true);
        // The lower one was due 59 s earlier: not yet a level.
        check((1, 0), (0, -59_000), 60, true);
        // Due 61 s earlier: it counts one level higher and is older.
        check((1, 0), (0, -61_000), 60, false);
        // A level per period: 9 levels make up 9 minutes.
        check((9, 0), (0, -539_000), 60, true);
        check((9, 0), (0, -541_000), 60, false);
        // Same priority: the oldest due first.
        check((3, -1), (3, 0), 60, true);
    }
}
