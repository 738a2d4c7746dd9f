//! The flow's side of the cluster's limits: which token
//! grants a claim asks the store for and what it gives back, and the holds
//! this node shares and adopts. The store calls themselves are
//! [`crate::cluster`]'s; the rules of buckets and holds are tc-model's.

use std::time::Duration;

use tc_model::Timestamp;
use tc_model::cluster::{DestinationHolds, TokenAsk, TokenGrant};

use super::contact::Ask;
use super::{Breaker, Dest, Flow};

/// How long an unused grant keeps a destination from asking again while
/// the claim loop does not sleep (it always asks again after a sleep): a
/// destination with nothing due costs a few asks a second, not one per
/// claim.
const EMPTY_PAUSE: Duration = Duration::from_millis(100);

/// The holds of `dest` this node would share: its open breaker's end, its
/// backoff, its own rate-limit hold.
pub(super) fn shareable(dest: &Dest, now: Timestamp) -> DestinationHolds {
    DestinationHolds {
        breaker_open_until: match dest.breaker {
            Breaker::Open { until } => Some(until),
            _ => None,
        },
        backoff_until: dest.backoff_until,
        ratelimit_until: dest.pacing.held_until(now),
    }
}

impl Flow {
    /// The grants a claim of up to `wanted` tasks asks for: one per rated
    /// destination that nothing holds, whose bucket had a token at the
    /// last ask and whose last grant was used; each for at most `wanted`
    /// and the bucket's size, one while this node has not met it, none
    /// while its first call is on its way.
    pub(crate) fn token_asks(&self, now: Timestamp, wanted: usize) -> Vec<TokenAsk> {
        let mut guard = self.lock();
        let state = &mut *guard;
        let mut asks = Vec::new();
        for (name, s) in &state.settings {
            let (Some(rate), Some(size)) = (s.rate_per_s, s.bucket_size()) else {
                continue;
            };
            if s.paused {
                continue;
            }
            let dest = state.dests.entry(name.clone()).or_insert_with(Dest::new);
            dest.settle(now);
            let waiting = |at: Option<Timestamp>| at.is_some_and(|at| at > now);
            if waiting(dest.next_token)
                || waiting(dest.empty_until)
                || dest.backoff_until.is_some()
                || dest.rate_limited(now).is_some()
                || matches!(
                    dest.breaker,
                    Breaker::Open { .. } | Breaker::HalfOpen { probe: Some(_) }
                )
            {
                continue;
            }
            // First contact: a probe on its way leaves the claim nothing to
            // spend, and the probe itself needs one token. Tokens taken and
            // given back unused would empty the bucket for the other nodes
            // meanwhile.
            let take = match dest.contact.ask() {
                Ask::Hold => continue,
                Ask::One => 1.0,
                Ask::Free => (wanted as f64).min(size).max(1.0),
            };
            asks.push(TokenAsk {
                destination: name.clone(),
                rate_per_s: rate,
                size,
                give_back: 0,
                // At most the size, itself at most BURST_LIMIT: a u32.
                take: take as u32,
            });
        }
        asks
    }

    /// Takes the store's answer to `asks`: each destination's tokens for
    /// this claim, and when to ask again when the bucket ran short.
    pub(crate) fn granted(&self, asks: &[TokenAsk], grants: &[TokenGrant], now: Timestamp) {
        let mut state = self.lock();
        for (ask, grant) in asks.iter().zip(grants) {
            let dest = state
                .dests
                .entry(ask.destination.clone())
                .or_insert_with(Dest::new);
            dest.tokens = f64::from(grant.granted);
            dest.next_token = grant.next_in.map(|wait| now.saturating_add(wait));
        }
    }

    /// After the claim started its tasks: the tokens it did not use, to
    /// give back. A grant none of which was used pauses that destination's
    /// asks for [`EMPTY_PAUSE`].
    pub(crate) fn leftovers(&self, asks: &[TokenAsk], now: Timestamp) -> Vec<TokenAsk> {
        let mut state = self.lock();
        let mut back = Vec::new();
        for ask in asks {
            let Some(dest) = state.dests.get_mut(&ask.destination) else {
                continue;
            };
            let left = dest.tokens.floor().max(0.0);
            dest.tokens = 0.0;
            if left < 1.0 {
                continue;
            }
            // At most the grant, a u32.
            let left = left as u32;
            if left >= ask.take {
                dest.empty_until = Some(now.saturating_add(EMPTY_PAUSE));
            }
            back.push(TokenAsk {
                give_back: left,
                take: 0,
                ..ask.clone()
            });
        }
        back
    }

    /// The claim loop slept and woke: tasks may be due anywhere again, so
    /// every destination may ask.
    pub(crate) fn forget_empty(&self) {
        for dest in self.lock().dests.values_mut() {
            dest.empty_until = None;
        }
    }

    /// The holds learned here since the last call, to share.
    pub(crate) fn take_learned(&self) -> Vec<(String, DestinationHolds)> {
        std::mem::take(&mut self.lock().learned)
    }

    /// Holds the cluster shares (the store's answer, this node's among
    /// them): each destination is held here until they end too. An open
    /// breaker is adopted unless this node's probe is in flight (its
    /// answer decides here, and is shared in turn).
    pub(crate) fn adopt(&self, holds: &[(String, DestinationHolds)], now: Timestamp) {
        let mut guard = self.lock();
        let state = &mut *guard;
        for (name, h) in holds {
            if state.key_holds.adopt(name, h, now) {
                continue;
            }
            let dest = state.dests.entry(name.clone()).or_insert_with(Dest::new);
            if let Some(until) = h.breaker_open_until.filter(|u| *u > now) {
                match dest.breaker {
                    Breaker::Closed | Breaker::HalfOpen { probe: None } => {
                        dest.breaker = Breaker::Open { until };
                        dest.opens = dest.opens.max(1);
                        tracing::warn!(
                            destination = name.as_str(),
                            open_ms = crate::pacing::hold_ms(until, now),
                            "destination_breaker_adopted"
                        );
                        self.metrics.set_breaker_open(name, true);
                    }
                    Breaker::Open { until: mine } => {
                        dest.breaker = Breaker::Open {
                            until: mine.max(until),
                        };
                    }
                    Breaker::HalfOpen { probe: Some(_) } => {}
                }
            }
            if let Some(until) = h.backoff_until.filter(|u| *u > now) {
                dest.backoff_until = Some(dest.backoff_until.map_or(until, |u| u.max(until)));
            }
            dest.shared_hold = h.ratelimit_until.filter(|u| *u > now);
        }
    }

    /// Holds that could not be shared (the store failed): kept for the
    /// next try.
    pub(crate) fn relearn(&self, mut learned: Vec<(String, DestinationHolds)>) {
        let mut state = self.lock();
        learned.append(&mut state.learned);
        state.learned = learned;
    }

    /// Whether holds learned here wait to be shared.
    pub(crate) fn has_learned(&self) -> bool {
        !self.lock().learned.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tc_model::cluster::{DestinationHolds, TokenGrant};
    use tc_model::destination::DestinationSettings;

    use super::super::tests::{at, flow, meet, task};
    use crate::flow::BreakerState;

    const DEST: &str = "r.example:80";

    fn rated(flow: &crate::flow::Flow) {
        let settings = DestinationSettings {
            rate_per_s: Some(50.0),
            burst: Some(5),
            ..DestinationSettings::default()
        };
        flow.set_settings(vec![(DEST.to_owned(), settings)], at(0));
        meet(flow, DEST, at(0));
    }

    /// A claim asks for what it can use (its slots, the bucket's size),
    /// claims within the grant, and gives back the rest; a grant short of
    /// the ask waits for the next token; an unused grant pauses the asks
    /// until the loop sleeps.
    #[test]
    fn a_claim_asks_claims_within_its_grant_and_gives_back_the_rest() {
        let flow = flow();
        rated(&flow);
        let asks = flow.token_asks(at(0), 16);
        assert_eq!(asks.len(), 1);
        assert_eq!((asks[0].take, asks[0].give_back), (5, 0));
        let grant = TokenGrant {
            granted: 3,
            next_in: Some(Duration::from_millis(20)),
        };
        flow.granted(&asks, &[grant], at(0));
        assert_eq!(flow.gate(at(0)).at_most.get(DEST), Some(&3));
        flow.started(&[task("r.example", 1)], at(0));
        let back = flow.leftovers(&asks, at(0));
        assert_eq!(back.len(), 1);
        assert_eq!((back[0].take, back[0].give_back), (0, 2));
        // No ask before the next token; then one.
        assert!(flow.token_asks(at(10), 16).is_empty());
        assert_eq!(flow.next_release(at(10)), Some(at(20)));
        let asks = flow.token_asks(at(20), 16);
        assert_eq!(asks.len(), 1);
        // A grant none of which was used: no ask for a while, unless the
        // loop slept.
        let full = TokenGrant {
            granted: 5,
            next_in: None,
        };
        flow.granted(&asks, &[full], at(20));
        let back = flow.leftovers(&asks, at(20));
        assert_eq!(back[0].give_back, 5);
        assert!(flow.token_asks(at(30), 16).is_empty());
        flow.forget_empty();
        assert_eq!(flow.token_asks(at(30), 16).len(), 1);
    }

    /// A destination this node has not met asks one token (its probe),
    /// none while the probe is on its way, and what the claim can use once
    /// the probe ended: tokens it could not spend would leave the bucket
    /// empty for the other nodes until given back.
    #[test]
    fn first_contact_asks_one_token_then_none_until_the_probe_ends() {
        let flow = flow();
        let settings = DestinationSettings {
            rate_per_s: Some(50.0),
            burst: Some(5),
            ..DestinationSettings::default()
        };
        flow.set_settings(vec![(DEST.to_owned(), settings)], at(0));
        let take =
            |ms: i64| -> Vec<u32> { flow.token_asks(at(ms), 16).iter().map(|a| a.take).collect() };
        assert_eq!(take(0), [1], "not met: the probe's token");
        let probe = task("r.example", 1);
        flow.started(std::slice::from_ref(&probe), at(0));
        assert_eq!(take(1), Vec::<u32>::new(), "the probe is on its way");
        flow.ended(&probe.destination, (probe.id, probe.attempt), at(2));
        assert_eq!(take(3), [5], "met: what the claim can use");
    }

    /// Another node's open breaker and backoff hold here too, and show in
    /// this node's state; this node's own learned holds are shared once.
    #[test]
    fn holds_from_other_nodes_are_adopted_and_own_ones_shared() {
        let flow = flow();
        let holds = DestinationHolds {
            breaker_open_until: Some(at(30_000)),
            backoff_until: Some(at(5_000)),
            ratelimit_until: None,
        };
        flow.adopt(&[(DEST.to_owned(), holds)], at(0));
        let state = flow.state_of(DEST, at(1));
        assert_eq!(state.breaker, BreakerState::Open);
        assert_eq!(state.backoff_until, Some(at(5_000)));
        assert!(flow.gate(at(1)).held.contains(DEST));
        assert_eq!(
            flow.state_of(DEST, at(30_000)).breaker,
            BreakerState::HalfOpen
        );
        // Nothing was learned here: nothing to share.
        assert!(!flow.has_learned());
        assert!(flow.take_learned().is_empty());
    }
}
