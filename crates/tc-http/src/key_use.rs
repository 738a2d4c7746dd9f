//! When this node last recorded each tenant key's use ([`KeyUse`]): a
//! key's `last_used_at` is written at most once a [`TOUCH_EVERY`] per key
//! per node, so that a busy key costs one write a minute, not one a request.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tc_model::Timestamp;

/// How often a key's `last_used_at` is written, per key per node.
pub(crate) const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// The most keys remembered as touched; past it, those not due are
/// forgotten (their next use writes once more, nothing worse).
const MAX_TOUCHED: usize = 10_000;

/// When this node last recorded each key's use.
#[derive(Debug, Default)]
pub(crate) struct KeyUse {
    touched: Mutex<HashMap<String, Timestamp>>,
}

impl KeyUse {
    /// Whether the use of `key_id` at `now` is to be recorded (at most once
    /// a [`TOUCH_EVERY`]); if so, it counts as recorded from now.
    pub(crate) fn due(&self, key_id: &str, now: Timestamp) -> bool {
        let mut touched = self.touched.lock().unwrap_or_else(PoisonError::into_inner);
        let fresh = |at: &Timestamp| now.duration_since(*at) < TOUCH_EVERY;
        if touched.get(key_id).is_some_and(fresh) {
            return false;
        }
        if touched.len() >= MAX_TOUCHED {
            touched.retain(|_, at| fresh(at));
        }
        touched.insert(key_id.to_owned(), now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_s_use_is_recorded_once_a_minute() {
        let uses = KeyUse::default();
        let at = |s: i64| Timestamp::from_millis(s * 1000);
        let check =
            |key: &str, s: i64, due: bool| assert_eq!(uses.due(key, at(s)), due, "{key} {s}");
        check("a", 0, true);
        check("a", 59, false);
        check("b", 59, true);
        check("a", 60, true);
        check("a", 119, false);
    }
}
