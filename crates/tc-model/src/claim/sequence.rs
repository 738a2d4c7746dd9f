//! The claim's share-out after its walk, once for every store: the
//! destinations' fair share ([`FairShare`]), then inside each destination
//! the tenants' weighted share ([`TenantGate::plan`]) or, with no tenant
//! defined, the destination's oldest; a tenant's lane with keyed tasks due
//! is shared between its flow keys by the store ([`crate::flow_key::KeyRoom`]).
//!
//! The sequence does no I/O: it asks ([`Ask`]) and the store answers, so a
//! synchronous store (SQLite's writer thread) and an asynchronous one
//! (PostgreSQL in a transaction) drive the same rule with a loop of their
//! own; the adapters only read and write columns.

use std::collections::{BTreeMap, VecDeque};

use crate::destination::ClaimGate;
use crate::share::FairShare;
use crate::tenant::TenantGate;

/// Whose due tasks a [`Take`] claims within its destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lane {
    /// Any tenant's, highest priority then oldest due first (no tenant is
    /// defined, and no flow key has tasks due there).
    Any,
    /// One tenant's (as stored: [`crate::tenant::NO_TENANT`] for tasks
    /// without one), highest priority then oldest due first.
    Tenant(String),
    /// One tenant's, shared between its flow keys (tasks without a key are
    /// one more key).
    Keys(String),
}

/// Claim up to `want` due tasks of `destination`'s `lane`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Take {
    /// The destination whose due tasks are claimed.
    pub destination: String,
    /// Whose due tasks, within it.
    pub lane: Lane,
    /// At most this many.
    pub want: usize,
}

/// What the sequence needs from the store next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// The tenants with due tasks in `destination`, as stored, in the
    /// store's order: answer with [`ClaimSequence::due_tenants`].
    DueTenants {
        /// The destination asked about.
        destination: String,
    },
    /// Whether flow-keyed tasks are due in `destination` (for `tenant`, or
    /// for any tenant): answer with [`ClaimSequence::keys_in_play`].
    KeysInPlay {
        /// The destination asked about.
        destination: String,
        /// The tenant (as stored) whose lane is asked about; `None`: any.
        tenant: Option<String>,
    },
    /// Claim: answer with [`ClaimSequence::took`], how many it claimed.
    Take(Take),
}

/// A claim's share-out of `n` slots over the walk's candidates.
///
/// ```
/// use tc_model::claim::{Ask, ClaimSequence, Lane, Take};
/// use tc_model::destination::ClaimGate;
///
/// // No tenants, no flow keys: each destination's oldest, shared fairly.
/// let gate = ClaimGate::default();
/// let candidates = vec![("a".to_owned(), None), ("b".to_owned(), None)];
/// let mut sequence = ClaimSequence::new(2, candidates, &gate);
/// let mut takes = Vec::new();
/// while let Some(ask) = sequence.next_ask() {
///     match ask {
///         Ask::KeysInPlay { .. } => sequence.keys_in_play(false),
///         Ask::DueTenants { .. } => sequence.due_tenants(Vec::new()),
///         Ask::Take(take) => {
///             sequence.took(take.want);
///             takes.push(take);
///         }
///     }
/// }
/// let take = |d: &str| Take { destination: d.to_owned(), lane: Lane::Any, want: 1 };
/// assert_eq!(takes, [take("a"), take("b")]);
/// ```
#[derive(Debug)]
pub struct ClaimSequence<'g> {
    tenants: Option<&'g TenantGate>,
    plan: FairShare,
    /// With tenants: the node's calls in flight by tenant, this claim's
    /// takes added as they are made (every destination's split reads it).
    load: BTreeMap<String, usize>,
    stage: Stage,
}

#[derive(Debug)]
enum Stage {
    /// Between destinations: the plan says which is next.
    Plan,
    /// Waiting for an answer to `asked`; `then` says what it leads to.
    Asked {
        asked: Ask,
        then: Then,
    },
    /// Splitting one destination's take between its tenants.
    Split(Split),
    Done,
}

/// What an answer leads to.
#[derive(Debug)]
enum Then {
    /// Keys in play in a tenant-blind take: split it tenant by tenant, or
    /// take the destination's oldest.
    BlindKeys { destination: String, want: usize },
    /// The due tenants: a weighted share (`blind: false`) or, tenant-blind
    /// with keys in play, each tenant in turn.
    Tenants {
        destination: String,
        want: usize,
        blind: bool,
    },
    /// Keys in play in `tenant`'s lane of a split: take from it.
    LaneKeys {
        split: Split,
        tenant: String,
        want: usize,
    },
    /// A take's count, inside a split.
    SplitTook { split: Split, tenant: String },
    /// A take's count, the destination's whole take.
    Took,
}

/// One destination's take split between its tenants.
#[derive(Debug)]
struct Split {
    destination: String,
    took: usize,
    by: SplitBy,
}

#[derive(Debug)]
enum SplitBy {
    /// The tenants' weighted share.
    Shared(FairShare),
    /// Tenant-blind with flow keys due: each due tenant's keys in turn
    /// until `want` are taken.
    Blind {
        want: usize,
        tenants: VecDeque<String>,
    },
}

impl<'g> ClaimSequence<'g> {
    /// The share-out of `n` slots over `candidates` (the walk's, with their
    /// allowances, in rotation order) under `gate`.
    pub fn new(
        n: usize,
        candidates: Vec<(String, Option<usize>)>,
        gate: &'g ClaimGate,
    ) -> ClaimSequence<'g> {
        ClaimSequence {
            tenants: gate.tenants.as_ref(),
            plan: FairShare::new(n, candidates, &gate.in_flight),
            load: gate
                .tenants
                .as_ref()
                .map(|tenants| tenants.in_flight.clone())
                .unwrap_or_default(),
            stage: Stage::Plan,
        }
    }

    /// What to ask the store next; `None` when the claim is done. Asked
    /// again before its answer, it asks the same.
    pub fn next_ask(&mut self) -> Option<Ask> {
        loop {
            match std::mem::replace(&mut self.stage, Stage::Done) {
                Stage::Done => return None,
                Stage::Asked { asked, then } => {
                    self.stage = Stage::Asked {
                        asked: asked.clone(),
                        then,
                    };
                    return Some(asked);
                }
                Stage::Plan => self.stage = self.next_destination(),
                Stage::Split(split) => self.stage = self.next_lane(split),
            }
        }
    }

    /// The answer to [`Ask::DueTenants`].
    pub fn due_tenants(&mut self, due: Vec<String>) {
        let Some(Then::Tenants {
            destination,
            want,
            blind,
        }) = self.answered(|then| matches!(then, Then::Tenants { .. }))
        else {
            return;
        };
        let by = match (blind, self.tenants) {
            (false, Some(gate)) => SplitBy::Shared(gate.plan(want, due, &self.load)),
            _ => SplitBy::Blind {
                want,
                tenants: due.into(),
            },
        };
        self.stage = Stage::Split(Split {
            destination,
            took: 0,
            by,
        });
    }

    /// The answer to [`Ask::KeysInPlay`].
    pub fn keys_in_play(&mut self, keyed: bool) {
        let fits = |then: &Then| matches!(then, Then::BlindKeys { .. } | Then::LaneKeys { .. });
        match self.answered(fits) {
            Some(Then::BlindKeys { destination, want }) if keyed => {
                self.ask(
                    Ask::DueTenants {
                        destination: destination.clone(),
                    },
                    Then::Tenants {
                        destination,
                        want,
                        blind: true,
                    },
                );
            }
            Some(Then::BlindKeys { destination, want }) => {
                let take = Take {
                    destination,
                    lane: Lane::Any,
                    want,
                };
                self.ask(Ask::Take(take), Then::Took);
            }
            Some(Then::LaneKeys {
                split,
                tenant,
                want,
            }) => {
                let lane = if keyed {
                    Lane::Keys(tenant.clone())
                } else {
                    Lane::Tenant(tenant.clone())
                };
                let take = Take {
                    destination: split.destination.clone(),
                    lane,
                    want,
                };
                self.ask(Ask::Take(take), Then::SplitTook { split, tenant });
            }
            _ => {}
        }
    }

    /// The answer to [`Ask::Take`]: how many tasks it claimed.
    pub fn took(&mut self, got: usize) {
        match self.answered(|then| matches!(then, Then::Took | Then::SplitTook { .. })) {
            Some(Then::Took) => {
                self.plan.taken(got);
                self.stage = Stage::Plan;
            }
            Some(Then::SplitTook { mut split, tenant }) => {
                split.took += got;
                if let SplitBy::Shared(share) = &mut split.by {
                    share.taken(got);
                    *self.load.entry(tenant).or_default() += got;
                }
                self.stage = Stage::Split(split);
            }
            _ => {}
        }
    }

    /// The next destination's first ask, or the end of the claim.
    fn next_destination(&mut self) -> Stage {
        let Some((destination, want)) = self.plan.next_take() else {
            return Stage::Done;
        };
        if self.tenants.is_some() {
            let asked = Ask::DueTenants {
                destination: destination.clone(),
            };
            let then = Then::Tenants {
                destination,
                want,
                blind: false,
            };
            return Stage::Asked { asked, then };
        }
        let asked = Ask::KeysInPlay {
            destination: destination.clone(),
            tenant: None,
        };
        let then = Then::BlindKeys { destination, want };
        Stage::Asked { asked, then }
    }

    /// A split's next lane, or, when it is over, its count to the plan.
    fn next_lane(&mut self, mut split: Split) -> Stage {
        let next = match &mut split.by {
            SplitBy::Shared(share) => share.next_take(),
            SplitBy::Blind { want, tenants } => match want.checked_sub(split.took) {
                Some(left) if left > 0 => tenants.pop_front().map(|tenant| (tenant, left)),
                _ => None,
            },
        };
        let Some((tenant, want)) = next else {
            self.plan.taken(split.took);
            return Stage::Plan;
        };
        if let SplitBy::Blind { .. } = split.by {
            // Tenant-blind splits happen only with keys in play.
            let take = Take {
                destination: split.destination.clone(),
                lane: Lane::Keys(tenant.clone()),
                want,
            };
            let then = Then::SplitTook { split, tenant };
            return Stage::Asked {
                asked: Ask::Take(take),
                then,
            };
        }
        let asked = Ask::KeysInPlay {
            destination: split.destination.clone(),
            tenant: Some(tenant.clone()),
        };
        let then = Then::LaneKeys {
            split,
            tenant,
            want,
        };
        Stage::Asked { asked, then }
    }

    /// What the pending ask led to, taken out of the stage when the answer
    /// `fits` it (an answer to another question leaves the stage as it
    /// was).
    fn answered(&mut self, fits: impl Fn(&Then) -> bool) -> Option<Then> {
        if !matches!(&self.stage, Stage::Asked { then, .. } if fits(then)) {
            return None;
        }
        match std::mem::replace(&mut self.stage, Stage::Done) {
            Stage::Asked { then, .. } => Some(then),
            _ => None,
        }
    }

    fn ask(&mut self, asked: Ask, then: Then) {
        self.stage = Stage::Asked { asked, then };
    }
}

#[cfg(test)]
mod tests;
