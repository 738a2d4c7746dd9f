//! Failed logins, counted per client address: after ten within a minute,
//! that address may not try again (`429` with `Retry-After`) until the
//! oldest of them is a minute old. Guessing the token from one address is
//! then a matter of centuries, and the throttle holds no one else back.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The failures an address may have within [`WINDOW`].
pub(crate) const MAX_FAILURES: usize = 10;
/// How long a failure counts.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// The most addresses remembered; past it the idlest is forgotten, so that
/// failures from many addresses cannot grow memory without bound.
const MAX_CLIENTS: usize = 4096;

/// Recent failed logins per client address (`None`: requests without a
/// known connection, which share one count).
#[derive(Debug, Default)]
pub(crate) struct LoginThrottle {
    failures: Mutex<HashMap<Option<IpAddr>, VecDeque<Instant>>>,
}

impl LoginThrottle {
    /// How long `client` must wait before it may try again; `None` if it
    /// may now.
    pub(crate) fn held(&self, client: Option<IpAddr>) -> Option<Duration> {
        let now = Instant::now();
        let mut failures = self.lock();
        let times = failures.get_mut(&client)?;
        forget_old(times, now);
        if times.len() < MAX_FAILURES {
            return None;
        }
        times.front().map(|oldest| (*oldest + WINDOW) - now)
    }

    /// Counts a failed login of `client`.
    pub(crate) fn failed(&self, client: Option<IpAddr>) {
        let now = Instant::now();
        let mut failures = self.lock();
        if !failures.contains_key(&client) && failures.len() >= MAX_CLIENTS {
            make_room(&mut failures, now);
        }
        let times = failures.entry(client).or_default();
        forget_old(times, now);
        times.push_back(now);
        // Only the last MAX_FAILURES matter for the next answer.
        while times.len() > MAX_FAILURES {
            times.pop_front();
        }
    }

    /// `client` logged in: its earlier failures are forgotten.
    pub(crate) fn succeeded(&self, client: Option<IpAddr>) {
        self.lock().remove(&client);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Option<IpAddr>, VecDeque<Instant>>> {
        // Plain inserts and removes: a panic cannot leave the map torn.
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn forget_old(times: &mut VecDeque<Instant>, now: Instant) {
    while times
        .front()
        .is_some_and(|t| now.duration_since(*t) >= WINDOW)
    {
        times.pop_front();
    }
}

/// Drops the addresses whose failures have all expired; if none has, the
/// one whose last failure is oldest.
fn make_room(failures: &mut HashMap<Option<IpAddr>, VecDeque<Instant>>, now: Instant) {
    failures.retain(|_, times| {
        forget_old(times, now);
        !times.is_empty()
    });
    if failures.len() >= MAX_CLIENTS {
        let idlest = failures
            .iter()
            .min_by_key(|(_, times)| times.back().copied())
            .map(|(client, _)| *client);
        if let Some(idlest) = idlest {
            failures.remove(&idlest);
        }
    }
}

/// The `Retry-After` value for a wait: whole seconds, rounded up, at least 1.
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn memory_is_bounded_by_the_number_of_addresses() {
        let throttle = LoginThrottle::default();
        for i in 0..(MAX_CLIENTS as u32 + 10) {
            throttle.failed(Some(IpAddr::from(i.to_be_bytes())));
        }
        assert_eq!(throttle.lock().len(), MAX_CLIENTS);
        // A held address stays held while idler ones are forgotten.
        tokio::time::advance(Duration::from_secs(1)).await;
        let held = Some(IpAddr::from([192, 0, 2, 1]));
        for _ in 0..MAX_FAILURES {
            throttle.failed(held);
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        for i in 0..100u32 {
            throttle.failed(Some(IpAddr::from((i + 1_000_000).to_be_bytes())));
        }
        assert_eq!(throttle.held(held), Some(Duration::from_secs(59)));
    }

    #[test]
    fn retry_after_rounds_up() {
        let check = |ms: u64, secs: u64| {
            assert_eq!(retry_after_secs(Duration::from_millis(ms)), secs, "{ms}")
        };
        check(0, 1);
        check(1, 1);
        check(1000, 1);
        check(1001, 2);
        check(59_999, 60);
    }
}
