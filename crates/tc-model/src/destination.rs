//! Destinations: the `host:port` a task's url points at, the settings an
//! operator keeps for each, and the rules a claim follows so that one slow
//! or failing destination cannot take every worker slot.
//!
//! Who enforces what:
//! - The **store** applies the durable settings it holds, `paused` and
//!   `max_in_flight` (counted from its running tasks, so on a shared
//!   database the cap holds across nodes), and rotates claims over the
//!   destinations that have due tasks ([`RoundRobin`]).
//! - The **worker** adds the holds it learns from answers (a destination's
//!   Retry-After backoff, its circuit breaker) and its token buckets, and
//!   passes them to each claim as a [`ClaimGate`].

use std::collections::{BTreeMap, BTreeSet};

/// The largest `max_in_flight` a destination may be given.
pub const MAX_IN_FLIGHT_LIMIT: u32 = 10_000;

/// The largest token bucket a destination may be given.
pub const BURST_LIMIT: u32 = 1_000_000;

/// What an operator set for one destination. The defaults hold nothing back.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DestinationSettings {
    /// The most calls to this destination in flight at once (`None`: only
    /// the worker's own concurrency bounds them).
    pub max_in_flight: Option<u32>,
    /// Calls per second, refilled continuously (`None`: no rate limit).
    pub rate_per_s: Option<f64>,
    /// The token bucket's size: how many calls may start at once after a
    /// quiet spell (`None`: the rate rounded up, at least 1).
    pub burst: Option<u32>,
    /// Held entirely: no task of this destination is claimed.
    pub paused: bool,
}

impl DestinationSettings {
    /// Whether a claim must look at this destination's running tasks or
    /// skip it: the two settings the store itself enforces.
    pub fn limits_claims(&self) -> bool {
        self.paused || self.max_in_flight.is_some()
    }

    /// The token bucket's size when a rate is set.
    pub fn bucket_size(&self) -> Option<f64> {
        let rate = self.rate_per_s?;
        Some(match self.burst {
            Some(burst) => f64::from(burst.max(1)),
            None => rate.ceil().max(1.0),
        })
    }

    /// Whether every field is the default: such a row need not be kept.
    pub fn is_default(&self) -> bool {
        *self == DestinationSettings::default()
    }
}

/// A change to a destination's settings: `None` leaves a field as it is;
/// for the nullable fields `Some(None)` clears it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DestinationUpdate {
    /// A new cap, or `Some(None)` to remove it.
    pub max_in_flight: Option<Option<u32>>,
    /// A new rate, or `Some(None)` to remove it.
    pub rate_per_s: Option<Option<f64>>,
    /// A new bucket size, or `Some(None)` for the default.
    pub burst: Option<Option<u32>>,
    /// Pause or resume.
    pub paused: Option<bool>,
}

/// Why a [`DestinationUpdate`] was refused; names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSetting {
    /// The field's name, as the API spells it.
    pub field: &'static str,
    /// What is wrong with its value.
    pub message: String,
}

impl DestinationUpdate {
    /// Checks every given value's range.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if let Some(Some(cap)) = self.max_in_flight
            && !(1..=MAX_IN_FLIGHT_LIMIT).contains(&cap)
        {
            return Err(InvalidSetting {
                field: "max_in_flight",
                message: format!("must be between 1 and {MAX_IN_FLIGHT_LIMIT}, or null"),
            });
        }
        if let Some(Some(rate)) = self.rate_per_s
            && !(rate.is_finite() && rate > 0.0)
        {
            return Err(InvalidSetting {
                field: "rate_per_s",
                message: "must be a number above 0, or null".into(),
            });
        }
        if let Some(Some(burst)) = self.burst
            && !(1..=BURST_LIMIT).contains(&burst)
        {
            return Err(InvalidSetting {
                field: "burst",
                message: format!("must be between 1 and {BURST_LIMIT}, or null"),
            });
        }
        Ok(())
    }

    /// `settings` with this update applied.
    pub fn apply(&self, settings: &DestinationSettings) -> DestinationSettings {
        DestinationSettings {
            max_in_flight: self.max_in_flight.unwrap_or(settings.max_in_flight),
            rate_per_s: self.rate_per_s.unwrap_or(settings.rate_per_s),
            burst: self.burst.unwrap_or(settings.burst),
            paused: self.paused.unwrap_or(settings.paused),
        }
    }
}

/// A destination as the store knows it: its settings and its tasks.
#[derive(Debug, Clone, PartialEq)]
pub struct Destination {
    /// `host:port`, lower case.
    pub name: String,
    /// Its settings (the defaults when none were set).
    pub settings: DestinationSettings,
    /// Its pending tasks (due or not).
    pub pending: u64,
    /// Its running tasks, on every node that shares the store.
    pub running: u64,
}

/// The most destinations [`crate::store::TaskStore::destinations`] returns:
/// a bound on one answer's size, whatever the number of distinct hosts.
pub const DESTINATIONS_LIMIT: usize = 1000;

/// What the worker holds back on top of the store's own settings, for one
/// claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimGate {
    /// Destinations none of whose tasks may be claimed now (backing off, an
    /// open breaker, no tokens left).
    pub held: BTreeSet<String>,
    /// Destinations of which at most this many tasks may be claimed (the
    /// tokens left, the one probe of a half-open breaker).
    pub at_most: BTreeMap<String, usize>,
    /// Where the rotation resumes: the first destination served is the one
    /// after this (in name order, wrapping around).
    pub after: Option<String>,
}

impl ClaimGate {
    /// The most tasks of `destination` a claim may take, on the worker's
    /// side (`None`: no bound but the claim's own size).
    pub fn allowance(&self, destination: &str) -> Option<usize> {
        if self.held.contains(destination) {
            return Some(0);
        }
        self.at_most.get(destination).copied()
    }

    /// The most tasks of `destination` one claim may take, all rules
    /// together: its stored `settings` (paused: none; a cap: the cap less
    /// its `running` tasks) and this gate. `None`: no bound.
    pub fn claim_allowance(
        &self,
        destination: &str,
        settings: Option<&DestinationSettings>,
        running: u64,
    ) -> Option<usize> {
        let stored = match settings {
            Some(s) if s.paused => Some(0),
            Some(DestinationSettings {
                max_in_flight: Some(cap),
                ..
            }) => {
                Some(usize::try_from(u64::from(*cap).saturating_sub(running)).unwrap_or(usize::MAX))
            }
            _ => None,
        };
        match (stored, self.allowance(destination)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The most destinations one claim visits looking for due tasks. A claim
/// that stops short continues from there next time ([`ClaimGate::after`]),
/// so the cost of a claim does not grow with the number of hosts.
pub const CLAIM_VISIT_LIMIT: usize = 256;

/// Shares a claim of `n` tasks over the destinations that have due tasks,
/// round by round: each round gives every destination still in play an
/// equal share of what is left (at least one), within its allowance. A
/// destination that yields fewer tasks than asked, or uses up its
/// allowance, leaves play. So a backlog on one host takes no more than its
/// share while any other host has due tasks.
///
/// The adapter asks [`RoundRobin::next_take`] what to claim next, claims
/// up to that many of that destination's due tasks (oldest due first), and
/// reports how many it got with [`RoundRobin::taken`].
///
/// ```
/// use tc_model::destination::RoundRobin;
///
/// // 4 slots, two hosts: a backlog on "a", one task on "b".
/// let mut plan = RoundRobin::new(4, vec![("a".into(), None), ("b".into(), None)]);
/// let due = |d: &str, want: usize| if d == "a" { want } else { want.min(1) };
/// let mut got = Vec::new();
/// while let Some((dest, want)) = plan.next_take() {
///     let n = due(&dest, want);
///     plan.taken(n);
///     got.push((dest, n));
/// }
/// // "a" takes its share, "b" its one task, and "a" the slot "b" left over.
/// assert_eq!(got, vec![("a".into(), 2), ("b".into(), 1), ("a".into(), 1)]);
/// ```
#[derive(Debug)]
pub struct RoundRobin {
    remaining: usize,
    /// This round's destinations not yet asked, and the next round's.
    round: std::collections::VecDeque<(String, Option<usize>)>,
    next_round: Vec<(String, Option<usize>)>,
    share: usize,
    asked: Option<(String, Option<usize>, usize)>,
}

impl RoundRobin {
    /// A plan for `n` tasks over `candidates` in rotation order, each with
    /// its allowance (`None`: unbounded). Candidates allowed nothing are
    /// dropped.
    pub fn new(n: usize, candidates: Vec<(String, Option<usize>)>) -> RoundRobin {
        let round: std::collections::VecDeque<_> = candidates
            .into_iter()
            .filter(|(_, allowed)| *allowed != Some(0))
            .collect();
        let share = share_of(n, round.len());
        RoundRobin {
            remaining: n,
            round,
            next_round: Vec::new(),
            share,
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
            if self.next_round.is_empty() {
                return None;
            }
            self.round = std::mem::take(&mut self.next_round).into();
            self.share = share_of(self.remaining, self.round.len());
        }
        let (dest, allowed) = self.round.pop_front()?;
        let want = self
            .share
            .min(self.remaining)
            .min(allowed.unwrap_or(usize::MAX));
        self.asked = Some((dest.clone(), allowed, want));
        Some((dest, want))
    }

    /// How many tasks the last [`RoundRobin::next_take`] yielded.
    pub fn taken(&mut self, got: usize) {
        let Some((dest, allowed, want)) = self.asked.take() else {
            return;
        };
        let got = got.min(want);
        self.remaining -= got;
        let left = allowed.map(|a| a - got);
        if got == want && left != Some(0) {
            self.next_round.push((dest, left));
        }
    }
}

fn share_of(remaining: usize, players: usize) -> usize {
    if players == 0 {
        return 0;
    }
    remaining.div_ceil(players).max(1)
}

/// Orders `names` for a claim's rotation: those after `after` first, then
/// the rest from the start (each once).
pub fn rotation<'a>(names: &'a [String], after: Option<&str>) -> impl Iterator<Item = &'a String> {
    let split = match after {
        Some(after) => names.partition_point(|n| n.as_str() <= after),
        None => 0,
    };
    names[split..].iter().chain(names[..split].iter())
}

/// Parses a destination as a client names it in a path (`host:port`): a
/// host (a name, an IPv4 address or a bracketed IPv6 address) and a port,
/// lower-cased as [`crate::destination_of`] writes it.
pub fn parse_destination(s: &str) -> Result<String, InvalidSetting> {
    let bad = |message: &str| InvalidSetting {
        field: "destination",
        message: message.to_owned(),
    };
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| bad("must be host:port, the port written"))?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err()
    {
        return Err(bad("the port must be a number up to 65535"));
    }
    let host_ok = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        inner.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    };
    if !host_ok {
        return Err(bad("the host must be a name or an address"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| bad("the port must be a number up to 65535"))?;
    Ok(format!("{}:{port}", host.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_plan(n: usize, due: &[(&str, usize, Option<usize>)]) -> Vec<(String, usize)> {
        let mut plan = RoundRobin::new(
            n,
            due.iter()
                .map(|(d, _, allowed)| ((*d).to_owned(), *allowed))
                .collect(),
        );
        let mut left: BTreeMap<String, usize> =
            due.iter().map(|(d, k, _)| ((*d).to_owned(), *k)).collect();
        let mut got = Vec::new();
        let mut guard = 0;
        while let Some((dest, want)) = plan.next_take() {
            guard += 1;
            assert!(guard < 1000, "the plan does not end");
            let have = left.get_mut(&dest).expect("a candidate");
            let n = want.min(*have);
            *have -= n;
            plan.taken(n);
            got.push((dest, n));
        }
        got
    }

    fn total(got: &[(String, usize)], dest: &str) -> usize {
        got.iter().filter(|(d, _)| d == dest).map(|(_, n)| n).sum()
    }

    #[test]
    fn shares_are_fair_and_fill_the_claim() {
        // (claim size, [(destination, due tasks, allowance)], expected totals)
        type Row<'a> = (
            usize,
            &'a [(&'a str, usize, Option<usize>)],
            &'a [(&'a str, usize)],
        );
        let rows: &[Row] = &[
            (
                8,
                &[("a", 100, None), ("b", 100, None)],
                &[("a", 4), ("b", 4)],
            ),
            (
                8,
                &[("a", 100, None), ("b", 1, None)],
                &[("a", 7), ("b", 1)],
            ),
            (
                8,
                &[("a", 100, Some(2)), ("b", 100, None)],
                &[("a", 2), ("b", 6)],
            ),
            (
                8,
                &[("a", 100, Some(0)), ("b", 3, None)],
                &[("a", 0), ("b", 3)],
            ),
            (
                3,
                &[
                    ("a", 9, None),
                    ("b", 9, None),
                    ("c", 9, None),
                    ("d", 9, None),
                ],
                &[("a", 1), ("b", 1), ("c", 1), ("d", 0)],
            ),
            (0, &[("a", 9, None)], &[("a", 0)]),
            (5, &[], &[]),
        ];
        for (n, due, want) in rows {
            let got = run_plan(*n, due);
            for (dest, expected) in *want {
                assert_eq!(
                    total(&got, dest),
                    *expected,
                    "claim {n} over {due:?}: {got:?}"
                );
            }
            let all: usize = got.iter().map(|(_, k)| k).sum();
            let available: usize = due
                .iter()
                .map(|(_, k, a)| (*k).min(a.unwrap_or(usize::MAX)))
                .sum();
            assert_eq!(all, (*n).min(available), "claim {n} over {due:?}: {got:?}");
        }
    }

    #[test]
    fn rotation_starts_after_the_cursor_and_wraps() {
        let names: Vec<String> = ["a", "b", "c"].iter().map(|s| (*s).to_owned()).collect();
        let order = |after: Option<&str>| rotation(&names, after).cloned().collect::<Vec<_>>();
        assert_eq!(order(None), ["a", "b", "c"]);
        assert_eq!(order(Some("a")), ["b", "c", "a"]);
        assert_eq!(order(Some("bb")), ["c", "a", "b"]);
        assert_eq!(order(Some("z")), ["a", "b", "c"]);
    }

    #[test]
    fn destinations_parse_as_the_task_view_writes_them() {
        let rows: &[(&str, Option<&str>)] = &[
            ("api.example.com:443", Some("api.example.com:443")),
            ("API.Example.com:80", Some("api.example.com:80")),
            ("127.0.0.2:8080", Some("127.0.0.2:8080")),
            ("[::1]:9000", Some("[::1]:9000")),
            ("api.example.com", None),
            ("api.example.com:", None),
            ("api.example.com:70000", None),
            (":80", None),
            ("a/b:80", None),
            ("[zz]:80", None),
        ];
        for (input, want) in rows {
            assert_eq!(parse_destination(input).ok().as_deref(), *want, "{input}");
        }
    }

    #[test]
    fn updates_validate_and_apply() {
        let bad = |u: DestinationUpdate| u.validate().map_err(|e| e.field);
        let cap = |c| DestinationUpdate {
            max_in_flight: Some(Some(c)),
            ..Default::default()
        };
        assert_eq!(bad(cap(0)), Err("max_in_flight"));
        assert_eq!(bad(cap(10_001)), Err("max_in_flight"));
        assert_eq!(bad(cap(10_000)), Ok(()));
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let u = DestinationUpdate {
                rate_per_s: Some(Some(rate)),
                ..Default::default()
            };
            assert_eq!(bad(u), Err("rate_per_s"), "{rate}");
        }
        let u = DestinationUpdate {
            burst: Some(Some(0)),
            ..Default::default()
        };
        assert_eq!(bad(u), Err("burst"));

        let start = DestinationSettings {
            max_in_flight: Some(2),
            rate_per_s: Some(5.0),
            burst: None,
            paused: false,
        };
        let cleared = DestinationUpdate {
            max_in_flight: Some(None),
            paused: Some(true),
            ..Default::default()
        }
        .apply(&start);
        assert_eq!(cleared.max_in_flight, None);
        assert_eq!(cleared.rate_per_s, Some(5.0));
        assert!(cleared.paused);
        assert_eq!(start.bucket_size(), Some(5.0));
        assert_eq!(
            DestinationSettings {
                rate_per_s: Some(0.5),
                ..Default::default()
            }
            .bucket_size(),
            Some(1.0)
        );
    }
}
