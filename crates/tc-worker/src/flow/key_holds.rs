//! Flow keys held by the downstream's own signals: when an answer's
//! rate-limit fields say no calls are left, the task's flow key holds
//! until the reset too, besides its destination, on every node. The hold
//! is shared with the destinations' holds under the key's
//! [`KeyRef::hold_name`] and goes to each claim in its gate
//! ([`tc_model::destination::ClaimGate::held_keys`]); the store gives a
//! held key nothing ([`tc_model::flow_key::KeyRoom::holding`]).

use std::collections::{BTreeSet, HashMap};

use tc_model::Timestamp;
use tc_model::cluster::DestinationHolds;
use tc_model::flow_key::KeyRef;

impl super::FlowState {
    /// Holds the answered task's key (with the end of its destination's
    /// own rate-limit hold) and queues the hold to share when it is new.
    pub(super) fn hold_key(&mut self, hold: Option<(KeyRef, Timestamp)>) {
        if let Some((key, until)) = hold
            && let Some(shared) = self.key_holds.learn(key, until)
        {
            tracing::info!(flow_key = shared.0.as_str(), "flow_key_paced");
            self.learned.push(shared);
        }
    }
}

/// Until when each held key holds.
#[derive(Debug, Default)]
pub(super) struct KeyHolds(HashMap<KeyRef, Timestamp>);

impl KeyHolds {
    /// Holds `key` until `until` (never shorter than a hold it has);
    /// answers the hold to share when this lengthened it.
    pub(super) fn learn(
        &mut self,
        key: KeyRef,
        until: Timestamp,
    ) -> Option<(String, DestinationHolds)> {
        if self.0.get(&key).is_some_and(|held| *held >= until) {
            return None;
        }
        self.0.insert(key.clone(), until);
        Some((
            key.hold_name(),
            DestinationHolds {
                ratelimit_until: Some(until),
                ..DestinationHolds::default()
            },
        ))
    }

    /// Adopts a shared hold: `true` when `name` is a key's (then it is
    /// no destination's).
    pub(super) fn adopt(&mut self, name: &str, holds: &DestinationHolds, now: Timestamp) -> bool {
        let Some(key) = KeyRef::from_hold_name(name) else {
            return false;
        };
        if let Some(until) = holds.ratelimit_until.filter(|u| *u > now) {
            let held = self.0.entry(key).or_insert(until);
            *held = (*held).max(until);
        }
        true
    }

    /// The keys held at `now`, the ended ones forgotten.
    pub(super) fn held(&mut self, now: Timestamp) -> BTreeSet<KeyRef> {
        self.0.retain(|_, until| *until > now);
        self.0.keys().cloned().collect()
    }

    /// When each hold ends.
    pub(super) fn ends(&self) -> impl Iterator<Item = Timestamp> + '_ {
        self.0.values().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holds_until_its_latest_reset_and_is_shared_once_per_change() {
        let at = Timestamp::from_millis;
        let key = KeyRef::new(Some("acme"), "acct 1");
        let mut holds = KeyHolds::default();
        let shared = holds.learn(key.clone(), at(100));
        assert_eq!(shared.map(|s| s.0), Some(key.hold_name()));
        // An earlier end changes nothing and is not shared.
        assert_eq!(holds.learn(key.clone(), at(50)), None);
        assert_eq!(holds.held(at(99)), BTreeSet::from([key.clone()]));
        assert!(holds.held(at(100)).is_empty());
        // A hold shared by another node; a destination's is not a key's.
        let h = DestinationHolds {
            ratelimit_until: Some(at(300)),
            ..DestinationHolds::default()
        };
        assert!(holds.adopt(&key.hold_name(), &h, at(200)));
        assert!(!holds.adopt("api.example.com:443", &h, at(200)));
        assert_eq!(holds.held(at(250)), BTreeSet::from([key]));
        assert_eq!(holds.ends().count(), 1);
    }
}
