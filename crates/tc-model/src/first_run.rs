//! When a submitted task first becomes due, as the client asked: now, at a
//! time, or after a delay ([`FirstRun`]); kept as asked, as stores keep it.

use std::time::Duration;

use crate::Timestamp;

/// When a submitted task first becomes due, as the client asked.
///
/// Kept as asked (not only as the resulting time) because it is part of
/// the idempotency payload: a resubmit with the same `delay_ms` is the same
/// work, though it arrives later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FirstRun {
    /// At once.
    #[default]
    Now,
    /// At this time (at once if it has passed).
    At(Timestamp),
    /// This long after the submit.
    After(Duration),
}

impl FirstRun {
    /// The first run as stores keep it, in two nullable columns: an absolute
    /// time in ms, or a delay in ms; both `None` for [`FirstRun::Now`].
    pub fn to_parts(self) -> (Option<i64>, Option<i64>) {
        match self {
            FirstRun::Now => (None, None),
            FirstRun::At(at) => (Some(at.as_millis()), None),
            FirstRun::After(delay) => (
                None,
                Some(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)),
            ),
        }
    }

    /// The first run [`FirstRun::to_parts`] wrote; `None` for parts it never
    /// writes (both set, a negative delay).
    pub fn from_parts(at_ms: Option<i64>, delay_ms: Option<i64>) -> Option<FirstRun> {
        match (at_ms, delay_ms) {
            (None, None) => Some(FirstRun::Now),
            (Some(at), None) => Some(FirstRun::At(Timestamp::from_millis(at))),
            (None, Some(ms)) => Some(FirstRun::After(Duration::from_millis(
                u64::try_from(ms).ok()?,
            ))),
            (Some(_), Some(_)) => None,
        }
    }

    /// The longest a task may be put off: 365 days.
    pub const MAX_AHEAD: Duration = Duration::from_secs(365 * 24 * 3600);

    /// When a task submitted at `submitted` first becomes due.
    pub fn due_at(self, submitted: Timestamp) -> Timestamp {
        match self {
            FirstRun::Now => submitted,
            FirstRun::At(at) => at.max(submitted),
            FirstRun::After(delay) => submitted.saturating_add(delay),
        }
    }

    /// The time asked for, if any: what a task view shows as `run_at`.
    pub fn run_at(self, submitted: Timestamp) -> Option<Timestamp> {
        match self {
            FirstRun::Now => None,
            FirstRun::At(at) => Some(at),
            FirstRun::After(delay) => Some(submitted.saturating_add(delay)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_runs_round_trip_through_their_stored_parts() {
        let check = |asked: FirstRun, parts: (Option<i64>, Option<i64>)| {
            assert_eq!(asked.to_parts(), parts, "{asked:?}");
            assert_eq!(FirstRun::from_parts(parts.0, parts.1), Some(asked));
        };
        check(FirstRun::Now, (None, None));
        check(
            FirstRun::At(Timestamp::from_millis(1_500)),
            (Some(1_500), None),
        );
        check(
            FirstRun::After(Duration::from_millis(250)),
            (None, Some(250)),
        );
        for never_written in [(Some(1), Some(1)), (None, Some(-1))] {
            assert_eq!(FirstRun::from_parts(never_written.0, never_written.1), None);
        }
    }
}
