use std::time::{SystemTime, UNIX_EPOCH};

use tc_model::Timestamp;
use tokio::time::Instant;

/// The worker's notion of "now" as a wall-clock [`Timestamp`].
///
/// It reads the wall clock once, then advances with tokio's clock, so that a
/// test that pauses tokio time pauses the timestamps written to the store too,
/// and backoff waits are measured on one clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base_wall_ms: i64,
    base: Instant,
}

impl Clock {
    /// A clock that starts at the current wall-clock time.
    pub fn system() -> Clock {
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Clock::starting_at(Timestamp::from_millis(wall_ms))
    }

    /// A clock that reads `start` now and advances with tokio's clock.
    pub fn starting_at(start: Timestamp) -> Clock {
        Clock {
            base_wall_ms: start.as_millis(),
            base: Instant::now(),
        }
    }

    /// The current time.
    pub fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.base_wall_ms).saturating_add(self.base.elapsed())
    }

    /// The tokio instant at which the clock will read `at` (now, if `at` is past).
    pub fn instant_of(&self, at: Timestamp) -> Instant {
        let now = self.now();
        Instant::now() + at.duration_since(now)
    }
}
