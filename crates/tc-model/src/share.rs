//! Sharing a claim's free slots among candidates with due tasks, max-min
//! fair and work-conserving ([`FairShare`]): between destinations (each
//! weight 1) and, inside a destination, between tenants by their weights
//! ([`crate::tenant::TenantGate::plan`]).

use std::collections::BTreeMap;

/// Shares a claim of `n` free slots over the destinations that have due
/// tasks, max-min fair and work-conserving: each slot goes to the candidate
/// with the fewest calls in flight on this node, counting the slots this
/// claim already gave it (water-filling); ties go to the one first in
/// rotation order. A destination within its allowance takes every slot
/// while no other has due tasks; beside others, one that holds many slots
/// gets none until the others have caught up. So a slow destination, whose
/// slots come back late, cannot gather every slot of a node while a fast
/// one has due tasks; with equal loads the slots are dealt out in rotation
/// order, shares differing by at most one.
///
/// The adapter asks [`FairShare::next_take`] what to claim next, claims up
/// to that many of that destination's due tasks (oldest due first), and
/// reports how many it got with [`FairShare::taken`]. How many due tasks a
/// destination has is learnt only then: one that yields fewer than asked
/// leaves play, and the slots it left are shared again among the rest.
///
/// ```
/// use std::collections::BTreeMap;
/// use tc_model::destination::FairShare;
///
/// // 4 slots, two hosts idle on this node: a backlog on "a", one task on "b".
/// let idle = BTreeMap::new();
/// let mut plan = FairShare::new(4, vec![("a".into(), None), ("b".into(), None)], &idle);
/// let due = |d: &str, want: usize| if d == "a" { want } else { want.min(1) };
/// let mut got = Vec::new();
/// while let Some((dest, want)) = plan.next_take() {
///     let n = due(&dest, want);
///     plan.taken(n);
///     got.push((dest, n));
/// }
/// // "a" takes its share, "b" its one task, and "a" the slot "b" left over.
/// assert_eq!(got, vec![("a".into(), 2), ("b".into(), 1), ("a".into(), 1)]);
///
/// // "a" already has 5 calls in flight here: a free slot goes to "b".
/// let busy = BTreeMap::from([("a".to_owned(), 5)]);
/// let mut plan = FairShare::new(1, vec![("a".into(), None), ("b".into(), None)], &busy);
/// assert_eq!(plan.next_take(), Some(("b".into(), 1)));
/// ```
#[derive(Debug)]
pub struct FairShare {
    /// Slots not handed out yet.
    remaining: usize,
    /// The candidates, in rotation order.
    players: Vec<Player>,
    /// This round's takes not asked yet: (player, slots), in rotation order.
    round: std::collections::VecDeque<(usize, usize)>,
    /// The take asked last, waiting for [`FairShare::taken`].
    asked: Option<(usize, usize)>,
}

#[derive(Debug)]
struct Player {
    name: String,
    /// Its weight: the slots go so that load / weight stays level (1 for
    /// every destination; a tenant's own, see [`crate::tenant`]).
    weight: u32,
    /// What it may still take (`None`: no bound).
    allowed: Option<usize>,
    /// Its calls in flight on this node, with what this claim gave it.
    load: usize,
    /// Out of play: it had fewer due tasks than asked, or no allowance left.
    out: bool,
}

impl FairShare {
    /// A plan for `n` slots over `candidates` in rotation order, each with
    /// its allowance (`None`: unbounded), given each destination's calls in
    /// flight on this node (`in_flight`; a destination missing from it has
    /// none). Candidates allowed nothing are out of play from the start.
    pub fn new(
        n: usize,
        candidates: Vec<(String, Option<usize>)>,
        in_flight: &BTreeMap<String, usize>,
    ) -> FairShare {
        let weighed = candidates
            .into_iter()
            .map(|(name, allowed)| (name, allowed, 1))
            .collect();
        FairShare::weighted(n, weighed, in_flight)
    }

    /// [`FairShare::new`] with a weight for each candidate (0 is taken as
    /// 1): each slot goes to the candidate in play whose load divided by its
    /// weight is lowest, so that loads settle in proportion to the weights
    /// (weighted max-min fairness; with every weight 1, the plain share).
    pub fn weighted(
        n: usize,
        candidates: Vec<(String, Option<usize>, u32)>,
        in_flight: &BTreeMap<String, usize>,
    ) -> FairShare {
        let players = candidates
            .into_iter()
            .map(|(name, allowed, weight)| Player {
                load: in_flight.get(&name).copied().unwrap_or(0),
                out: allowed == Some(0),
                weight: weight.max(1),
                name,
                allowed,
            })
            .collect();
        FairShare {
            remaining: n,
            players,
            round: std::collections::VecDeque::new(),
            asked: None,
        }
    }

    /// The next destination to claim from and how many to ask for; `None`
    /// when the claim is full or nothing is left in play.
    pub fn next_take(&mut self) -> Option<(String, usize)> {
        if self.remaining == 0 {
            return None;
        }
        if self.round.is_empty() {
            self.round = self.fill().into();
        }
        let (player, want) = self.round.pop_front()?;
        self.asked = Some((player, want));
        Some((self.players[player].name.clone(), want))
    }

    /// How many tasks the last [`FairShare::next_take`] yielded.
    pub fn taken(&mut self, got: usize) {
        let Some((index, want)) = self.asked.take() else {
            return;
        };
        let got = got.min(want);
        self.remaining -= got;
        let player = &mut self.players[index];
        player.load = player.load.saturating_add(got);
        player.allowed = player.allowed.map(|a| a - got);
        if got < want || player.allowed == Some(0) {
            player.out = true;
        }
    }

    /// One round of water-filling: the slots left, one by one, each to the
    /// player in play with the lowest load per weight (its slots this round
    /// counted), the first in rotation order among equals. Returns each
    /// player's slots, in rotation order, leaving out those given none.
    fn fill(&self) -> Vec<(usize, usize)> {
        use std::cmp::Reverse;
        let mut given = vec![0usize; self.players.len()];
        let mut lowest: std::collections::BinaryHeap<Reverse<(Level, usize)>> = self
            .players
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.out)
            .map(|(i, p)| Reverse((Level::new(p.load, p.weight), i)))
            .collect();
        for _ in 0..self.remaining {
            let Some(Reverse((level, i))) = lowest.pop() else {
                break;
            };
            given[i] += 1;
            if self.players[i].allowed.is_none_or(|a| given[i] < a) {
                lowest.push(Reverse((level.plus_one(), i)));
            }
        }
        given
            .into_iter()
            .enumerate()
            .filter(|(_, slots)| *slots > 0)
            .collect()
    }
}

/// A player's load per weight, compared exactly (cross-multiplied, no
/// floating point), so that equal levels tie and fall to rotation order.
#[derive(Debug, Clone, Copy)]
struct Level {
    load: usize,
    weight: u32,
}

impl Level {
    fn new(load: usize, weight: u32) -> Level {
        Level {
            load,
            weight: weight.max(1),
        }
    }

    fn plus_one(self) -> Level {
        Level::new(self.load.saturating_add(1), self.weight)
    }

    fn scaled(self, other: Level) -> u128 {
        self.load as u128 * u128::from(other.weight)
    }
}

impl PartialEq for Level {
    fn eq(&self, other: &Level) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Level {}

impl PartialOrd for Level {
    fn partial_cmp(&self, other: &Level) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Level {
    fn cmp(&self, other: &Level) -> std::cmp::Ordering {
        self.scaled(*other).cmp(&other.scaled(*self))
    }
}
