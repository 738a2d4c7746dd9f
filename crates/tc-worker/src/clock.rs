//! The worker's clock: the wall clock in production, tokio's (pausable) clock
//! in tests, read as a [`Timestamp`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tc_model::Timestamp;
use tokio::time::Instant;

/// The worker's notion of "now" as a wall-clock [`Timestamp`].
#[derive(Debug, Clone)]
pub struct Clock {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// Reads the system clock every time.
    Wall,
    /// A wall-clock reading taken once, advanced by tokio's clock and by
    /// [`Clock::jump`] (shared by every clone).
    Tokio {
        base_wall_ms: i64,
        base: Instant,
        jumped_ms: Arc<AtomicU64>,
    },
    /// A time that moves only by [`Clock::jump`]: for tests against a
    /// store in real time that must count what a span of time allows
    /// (a token bucket's refill), whatever the machine's speed.
    Frozen {
        base_wall_ms: i64,
        jumped_ms: Arc<AtomicU64>,
    },
}

impl Clock {
    /// The system clock, read at every call: what a server uses, so that
    /// timestamps follow the host's clock over any uptime.
    pub fn system() -> Clock {
        Clock { kind: Kind::Wall }
    }

    /// A clock that starts at the current wall-clock time and then advances
    /// with tokio's clock. A test that pauses tokio time pauses these
    /// timestamps too, so backoff waits and due times are exact.
    pub fn following_tokio() -> Clock {
        Clock::starting_at(wall_now())
    }

    /// A clock that reads `start` now and advances with tokio's clock.
    pub fn starting_at(start: Timestamp) -> Clock {
        Clock {
            kind: Kind::Tokio {
                base_wall_ms: start.as_millis(),
                base: Instant::now(),
                jumped_ms: Arc::new(AtomicU64::new(0)),
            },
        }
    }

    /// A clock that reads `start` until [`Clock::jump`] moves it (every
    /// clone with it).
    pub fn frozen_at(start: Timestamp) -> Clock {
        Clock {
            kind: Kind::Frozen {
                base_wall_ms: start.as_millis(),
                jumped_ms: Arc::new(AtomicU64::new(0)),
            },
        }
    }

    /// Steps this clock and every clone of it forward by `by` without any
    /// tokio time passing, as an NTP step of the host's clock would: what
    /// tests of clock jumps need. The system clock cannot be stepped from
    /// here; for it this does nothing and returns `false`.
    pub fn jump(&self, by: Duration) -> bool {
        match &self.kind {
            Kind::Wall => false,
            Kind::Tokio { jumped_ms, .. } | Kind::Frozen { jumped_ms, .. } => {
                let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
                jumped_ms.fetch_add(ms, Ordering::SeqCst);
                true
            }
        }
    }

    /// The current time.
    pub fn now(&self) -> Timestamp {
        match &self.kind {
            Kind::Wall => wall_now(),
            Kind::Tokio {
                base_wall_ms,
                base,
                jumped_ms,
            } => Timestamp::from_millis(*base_wall_ms)
                .saturating_add(base.elapsed())
                .saturating_add(Duration::from_millis(jumped_ms.load(Ordering::SeqCst))),
            Kind::Frozen {
                base_wall_ms,
                jumped_ms,
            } => Timestamp::from_millis(*base_wall_ms)
                .saturating_add(Duration::from_millis(jumped_ms.load(Ordering::SeqCst))),
        }
    }

    /// The tokio instant at which the clock will read `at` (now, if `at` is past).
    pub fn instant_of(&self, at: Timestamp) -> Instant {
        Instant::now() + at.duration_since(self.now())
    }
}

fn wall_now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    Timestamp::from_millis(ms)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_tokio_clock_advances_with_paused_time_and_the_wall_clock_does_not() {
        let wall = Clock::system();
        let tokio_clock = Clock::starting_at(Timestamp::from_millis(1_000));
        let wall_before = wall.now();
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(tokio_clock.now(), Timestamp::from_millis(3_601_000));
        // An hour of paused time is not an hour of wall time.
        assert!(wall.now().duration_since(wall_before) < Duration::from_secs(60));
        assert_eq!(
            tokio_clock.instant_of(Timestamp::from_millis(3_602_000)) - Instant::now(),
            Duration::from_secs(1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_jump_moves_every_clone_and_no_tokio_time() {
        let clock = Clock::starting_at(Timestamp::from_millis(1_000));
        let clone = clock.clone();
        let before = Instant::now();
        assert!(clock.jump(Duration::from_secs(3600)));
        assert_eq!(clone.now(), Timestamp::from_millis(3_601_000));
        assert_eq!(Instant::now(), before);
        assert!(!Clock::system().jump(Duration::from_secs(1)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_frozen_clock_moves_only_by_jumps() {
        let clock = Clock::frozen_at(Timestamp::from_millis(1_000));
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(clock.now(), Timestamp::from_millis(1_000));
        assert!(clock.clone().jump(Duration::from_millis(250)));
        assert_eq!(clock.now(), Timestamp::from_millis(1_250));
    }
}
