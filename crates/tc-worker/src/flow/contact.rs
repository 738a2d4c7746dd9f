//! First contact with a destination: its first call goes alone (the
//! probe), and the others wait for it to end, or for [`PROBE_PATIENCE`],
//! before more go. A server that states its window in rate-limit fields
//! says so in that first answer, and the pacing ([`crate::pacing`]) bounds
//! every later claim by it; without the probe, a claim would send a
//! backlog's due tasks before any answer could say what the window holds.
//! A server that states nothing costs one round trip, at most the patience.
//!
//! A destination stays met for [`MET_KEPT`] after its last call ended, so
//! that a lull shorter than that costs no second probe; after that it is
//! forgotten with the rest of its state (the claim's cost follows the
//! destinations that are active).

use std::time::Duration;

use tc_model::{TaskId, Timestamp};

/// How long the probe holds a destination's other calls at most: a server
/// slower than this is met without its answer (its ramp waits no longer).
pub(crate) const PROBE_PATIENCE: Duration = Duration::from_secs(1);

/// How long a destination stays met after its last call ended.
pub(crate) const MET_KEPT: Duration = Duration::from_secs(10);

/// How far this node has met one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Contact {
    /// No call yet (or none for [`MET_KEPT`]): one call goes first.
    New,
    /// The first call is on its way: no other until it ends or `until`.
    Probing {
        /// The probe's attempt.
        probe: (TaskId, u32),
        /// When the others go anyway.
        until: Timestamp,
    },
    /// Met: its calls go by its other bounds, until `kept_until` passes
    /// with none in flight.
    Met { kept_until: Timestamp },
}

/// What first contact asks of one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// At most one call: the probe.
    One,
    /// None: the probe is on its way.
    Hold,
    /// No bound of its own.
    Free,
}

impl Contact {
    /// The probe's patience ran out: met without its answer.
    pub(crate) fn settle(&mut self, now: Timestamp) {
        if let Contact::Probing { until, .. } = *self
            && until <= now
        {
            *self = Contact::met(now);
        }
    }

    fn met(now: Timestamp) -> Contact {
        Contact::Met {
            kept_until: now.saturating_add(MET_KEPT),
        }
    }

    /// What it asks of the next claim.
    pub(crate) fn ask(&self) -> Ask {
        match self {
            Contact::New => Ask::One,
            Contact::Probing { .. } => Ask::Hold,
            Contact::Met { .. } => Ask::Free,
        }
    }

    /// An attempt started: the first one is the probe.
    pub(crate) fn started(&mut self, task: (TaskId, u32), now: Timestamp) {
        if *self == Contact::New {
            *self = Contact::Probing {
                probe: task,
                until: now.saturating_add(PROBE_PATIENCE),
            };
        }
    }

    /// An attempt ended, however it ended. Returns whether it was the
    /// probe (the others may go now: the claim loop looks again).
    pub(crate) fn ended(&mut self, task: (TaskId, u32), now: Timestamp) -> bool {
        let was_probe = matches!(*self, Contact::Probing { probe, .. } if probe == task);
        if was_probe || matches!(self, Contact::Met { .. }) {
            *self = Contact::met(now);
        }
        was_probe
    }

    /// When the claim loop must look again: the probe's patience ends.
    pub(crate) fn release(&self) -> Option<Timestamp> {
        match *self {
            Contact::Probing { until, .. } => Some(until),
            _ => None,
        }
    }

    /// Whether nothing here needs remembering: a fresh entry would be the
    /// same ([`Contact::New`]).
    pub(crate) fn is_idle(&self, now: Timestamp) -> bool {
        match *self {
            Contact::New => true,
            Contact::Probing { .. } => false,
            Contact::Met { kept_until } => kept_until <= now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_000_000);

    fn later(ms: u64) -> Timestamp {
        NOW.saturating_add(Duration::from_millis(ms))
    }

    fn id(n: u8) -> (TaskId, u32) {
        (TaskId::new(NOW, [n; 10]), 1)
    }

    #[test]
    fn the_first_call_goes_alone_until_it_ends() {
        let mut contact = Contact::New;
        assert_eq!(contact.ask(), Ask::One);
        contact.started(id(1), NOW);
        assert_eq!(contact.ask(), Ask::Hold);
        assert_eq!(contact.release(), Some(later(1_000)));
        // Another attempt's end is not the probe's.
        assert!(!contact.ended(id(2), later(5)));
        assert_eq!(contact.ask(), Ask::Hold);
        assert!(contact.ended(id(1), later(10)));
        assert_eq!(contact.ask(), Ask::Free);
        assert_eq!(contact.release(), None);
        // Met: further starts change nothing; it stays met for a while
        // after its last end.
        contact.started(id(3), later(20));
        assert_eq!(contact.ask(), Ask::Free);
        assert!(!contact.ended(id(3), later(30)));
        assert!(!contact.is_idle(later(30 + 9_999)));
        assert!(contact.is_idle(later(30 + 10_000)));
    }

    #[test]
    fn a_probe_slower_than_the_patience_holds_no_longer() {
        let mut contact = Contact::New;
        contact.started(id(1), NOW);
        contact.settle(later(999));
        assert_eq!(contact.ask(), Ask::Hold);
        assert!(!contact.is_idle(later(999)));
        contact.settle(later(1_000));
        assert_eq!(contact.ask(), Ask::Free);
        // Its end, later, keeps it met from then.
        assert!(!contact.ended(id(1), later(2_000)));
        assert!(!contact.is_idle(later(11_999)));
    }
}
