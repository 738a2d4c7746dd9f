//! What a claim answers and the rule of its walk over the destinations
//! with due tasks, in one place for every store.
//!
//! A store keeps, per destination, the earliest due time of its pending
//! tasks, indexed by that time, so that a claim meets only destinations
//! that have due tasks (never one whose tasks are all later, however many
//! there are), in rotation order (name order, starting after
//! [`ClaimGate::after`], wrapping around). [`ClaimWalk`] says when it has
//! met enough of them and where the next claim's rotation starts: after
//! the last destination this walk met, so every destination with due tasks
//! gets its turn whatever the number of others held, paused or waiting.
//!
//! [`ClaimGate::after`]: crate::destination::ClaimGate::after

use crate::destination::ClaimGate;
use crate::{Task, Timestamp};

mod sequence;

pub use sequence::{Ask, ClaimSequence, Lane, Take};

/// What [`crate::store::Work::claim`] answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claim {
    /// The claimed tasks, now running (without their attempt history).
    pub tasks: Vec<Task>,
    /// The earliest due time of a pending task that was not due at the
    /// claim's `now` (`None`: none): the claimer may sleep until then
    /// unless woken (a submit, a retry, a hold that ends).
    pub resume_after: Option<Timestamp>,
    /// The last destination the walk met: the next claim's rotation starts
    /// after it ([`ClaimGate::after`]). `None` when it met none (the
    /// rotation stays where it was).
    pub cursor: Option<String>,
}

/// The walk of one claim of `n` slots over the destinations with due tasks,
/// in rotation order: the store calls [`ClaimWalk::visit`] for each one it
/// meets and stops when told; what it met are the claim's candidates.
///
/// ```
/// use tc_model::claim::ClaimWalk;
/// use tc_model::destination::ClaimGate;
///
/// let gate = ClaimGate::default();
/// let mut walk = ClaimWalk::new(2, &gate);
/// assert!(!walk.visit("a:80", Some(0))); // paused or held: looks further
/// assert!(!walk.visit("b:80", None));
/// assert!(walk.visit("c:80", Some(3))); // two open ones: enough
/// assert_eq!(walk.cursor(), Some("c:80"));
/// assert_eq!(walk.candidates().len(), 3);
/// ```
#[derive(Debug)]
pub struct ClaimWalk<'g> {
    n: usize,
    gate: &'g ClaimGate,
    /// Destinations met that may give a task and have no call in flight on
    /// this node.
    open: usize,
    candidates: Vec<(String, Option<usize>)>,
}

impl<'g> ClaimWalk<'g> {
    /// A walk for a claim of `n` slots under `gate`.
    pub fn new(n: usize, gate: &'g ClaimGate) -> ClaimWalk<'g> {
        ClaimWalk {
            n,
            gate,
            open: 0,
            candidates: Vec::new(),
        }
    }

    /// Whether a claim of `n` needs no walk at all.
    pub fn is_done(&self) -> bool {
        self.n == 0 || self.open >= self.n
    }

    /// Records the next destination with due tasks in rotation order and
    /// what it may give (`allowance`, from
    /// [`ClaimGate::claim_allowance`]; `None`: unbounded). Returns whether
    /// the walk has enough: `n` destinations that may give a task and have
    /// no call in flight on this node were met. Any destination met later
    /// could only lose to them ([`crate::destination::FairShare`] serves the
    /// least loaded first), and one that may give nothing (paused, held,
    /// at its cap) never counts, so it never stops a walk short of others.
    pub fn visit(&mut self, name: &str, allowance: Option<usize>) -> bool {
        if allowance != Some(0) && self.gate.in_flight(name) == 0 {
            self.open += 1;
        }
        self.candidates.push((name.to_owned(), allowance));
        self.is_done()
    }

    /// Records a destination whose allowance the store learns only after
    /// the walk (a capped one on a shared database, known once its row is
    /// locked): a candidate that never counts towards enough.
    pub fn visit_unsure(&mut self, name: &str) {
        self.candidates.push((name.to_owned(), None));
    }

    /// Where the next claim's rotation starts: after the last destination
    /// met.
    pub fn cursor(&self) -> Option<&str> {
        self.candidates.last().map(|(name, _)| name.as_str())
    }

    /// The destinations met, in rotation order, with their allowances.
    pub fn candidates(&self) -> &[(String, Option<usize>)] {
        &self.candidates
    }

    /// The candidates, for [`crate::destination::FairShare::new`], and the
    /// cursor.
    pub fn finish(self) -> (Vec<(String, Option<usize>)>, Option<String>) {
        let cursor = self.cursor().map(str::to_owned);
        (self.candidates, cursor)
    }
}

/// The rotation a claim's walk follows over the destinations with due
/// tasks, which a store reads in name order, a page at a time: from after
/// the cursor to the end, then from the start up to and including the
/// cursor. The store only reads pages; this says where each page starts and
/// when the rotation has gone round (one rule for every store).
///
/// ```
/// use tc_model::claim::Rotation;
///
/// let names = ["a", "b", "c"];
/// let mut rotation = Rotation::new(Some("b"));
/// let mut met = Vec::new();
/// while !rotation.is_done() {
///     // The store's page: names after page_start, in order (here all).
///     let page: Vec<String> = names
///         .iter()
///         .filter(|n| rotation.page_start().is_none_or(|s| **n > s))
///         .map(|n| n.to_string())
///         .collect();
///     rotation.feed(page, false, |name| {
///         met.push(name.to_owned());
///         false
///     });
/// }
/// assert_eq!(met, ["c", "a", "b"]);
/// ```
#[derive(Debug, Clone)]
pub struct Rotation {
    /// Where the rotation started (the previous claim's cursor).
    after: Option<String>,
    /// The last name read: the next page starts after it.
    cursor: Option<String>,
    /// Whether the walk went past the end and started again from the start.
    wrapped: bool,
    done: bool,
}

impl Rotation {
    /// A rotation starting after `after` (from the start when `None`).
    pub fn new(after: Option<&str>) -> Rotation {
        Rotation {
            after: after.map(str::to_owned),
            cursor: after.map(str::to_owned),
            wrapped: after.is_none(),
            done: false,
        }
    }

    /// Whether the walk is over: the visitor had enough, or every
    /// destination was met once.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The next page holds the names after this one, in order (from the
    /// first name when `None`).
    pub fn page_start(&self) -> Option<&str> {
        self.cursor.as_deref()
    }

    /// Visits one page (`full`: it held as many names as a page may, so
    /// more may follow) until `visit` says it has enough.
    pub fn feed(&mut self, page: Vec<String>, full: bool, mut visit: impl FnMut(&str) -> bool) {
        for name in page {
            if self.wrapped && self.after.as_deref().is_some_and(|a| name.as_str() > a) {
                self.done = true;
                return;
            }
            if visit(&name) {
                self.done = true;
                return;
            }
            self.cursor = Some(name);
        }
        if !full {
            if self.wrapped {
                self.done = true;
            } else {
                self.wrapped = true;
                self.cursor = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Walks `due` (name, allowance) with a claim of `n` and `in_flight`
    /// calls here; checks how many were met and where the cursor is.
    fn check(
        n: usize,
        due: &[(&str, Option<usize>)],
        in_flight: &[(&str, usize)],
        met: usize,
        cursor: Option<&str>,
    ) {
        let gate = ClaimGate {
            in_flight: in_flight
                .iter()
                .map(|(d, k)| ((*d).to_owned(), *k))
                .collect::<BTreeMap<_, _>>(),
            ..ClaimGate::default()
        };
        let mut walk = ClaimWalk::new(n, &gate);
        for (name, allowance) in due {
            if walk.is_done() || walk.visit(name, *allowance) {
                break;
            }
        }
        let (candidates, got) = walk.finish();
        assert_eq!(candidates.len(), met, "{due:?} with n = {n}");
        assert_eq!(got.as_deref(), cursor, "{due:?} with n = {n}");
    }

    #[test]
    fn a_walk_stops_after_n_open_destinations_and_never_counts_held_ones() {
        let held = (0..5000).map(|_| ("h", Some(0))).collect::<Vec<_>>();
        let mut past_held = held.clone();
        past_held.push(("a", None));
        check(1, &past_held, &[], 5001, Some("a"));
        check(1, &[("a", None), ("b", None)], &[], 1, Some("a"));
        check(
            2,
            &[("a", None), ("b", Some(0)), ("c", Some(1))],
            &[],
            3,
            Some("c"),
        );
        check(1, &[("a", None), ("b", None)], &[("a", 2)], 2, Some("b"));
        check(3, &[("a", None)], &[], 1, Some("a"));
        check(0, &[("a", None)], &[], 0, None);
        check(4, &[], &[], 0, None);
    }

    /// Walks `names` (a store's rows) in pages of `page` after `after` until
    /// `enough` names were met; checks the names met, in order.
    fn check_rotation(
        names: &[&str],
        page: usize,
        after: Option<&str>,
        enough: usize,
        met: &[&str],
    ) {
        let mut rotation = Rotation::new(after);
        let mut seen: Vec<String> = Vec::new();
        let mut reads = 0;
        while !rotation.is_done() {
            reads += 1;
            assert!(reads < 100, "the rotation never ends");
            let rows: Vec<String> = names
                .iter()
                .filter(|n| rotation.page_start().is_none_or(|s| **n > s))
                .take(page)
                .map(|n| (*n).to_owned())
                .collect();
            let full = rows.len() == page;
            rotation.feed(rows, full, |name| {
                seen.push(name.to_owned());
                seen.len() >= enough
            });
        }
        assert_eq!(seen, met, "names {names:?}, page {page}, after {after:?}");
    }

    #[test]
    fn the_rotation_meets_every_destination_once_from_after_its_cursor() {
        let names = ["a", "b", "c", "d", "e"];
        check_rotation(&names, 2, None, 99, &["a", "b", "c", "d", "e"]);
        check_rotation(&names, 2, Some("b"), 99, &["c", "d", "e", "a", "b"]);
        check_rotation(&names, 1, Some("e"), 99, &["a", "b", "c", "d", "e"]);
        check_rotation(&names, 5, Some("c"), 99, &["d", "e", "a", "b", "c"]);
        // A cursor that is no longer a destination.
        check_rotation(&names, 2, Some("bb"), 99, &["c", "d", "e", "a", "b"]);
        // Enough stops it where it is.
        check_rotation(&names, 2, Some("b"), 3, &["c", "d", "e"]);
        check_rotation(&names, 2, Some("d"), 2, &["e", "a"]);
        check_rotation(&[], 2, Some("d"), 99, &[]);
        check_rotation(&[], 2, None, 99, &[]);
    }
}
