//! Per-destination flow control on this worker's side: token buckets,
//! Retry-After backoff for the whole destination, and the circuit breaker.
//! Each claim asks for a [`ClaimGate`] built from them and from this
//! worker's calls in flight per destination (the store shares the free
//! slots fairly by them); the store adds the durable settings it enforces
//! itself (paused, `max_in_flight`).
//!
//! The tokens and the holds are the cluster's (the rules
//! in [`tc_model::cluster`], the exchange with the store in
//! [`crate::cluster`]): each claim takes a grant from the store's one bucket
//! per destination and gives back what it did not use, and a breaker
//! opened, a Retry-After backoff or a rate-limit hold learned here is
//! shared with every node, which holds too ([`cluster`] adopts them). A
//! node keeps its own failure count, pacing window and fair sharing of its
//! slots; pause and caps hold across nodes (the store counts them).

mod cluster;
mod contact;
mod key_holds;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tc_model::destination::{ClaimGate, DestinationSettings};
use tc_model::{Task, TaskId, Timestamp};

use crate::metrics::{DestinationMetrics, HoldReason};
use crate::pacing::{Paced, Pacing};
use contact::{Ask, Contact};

/// When the circuit breaker of a destination opens, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Consecutive failed attempts (connect errors, timeouts, 5xx) that open it.
    pub failures: u32,
    /// How long it stays open the first time; each reopening doubles it.
    pub open: Duration,
    /// The longest it stays open.
    pub max_open: Duration,
}

impl Default for BreakerPolicy {
    /// 10 failures, open for 30 s, doubling up to 10 minutes.
    fn default() -> Self {
        BreakerPolicy {
            failures: 10,
            open: Duration::from_secs(30),
            max_open: Duration::from_secs(600),
        }
    }
}

/// A breaker's state, as the API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls are held until the open period ends.
    Open,
    /// One probe call may go through; its answer closes or reopens it.
    HalfOpen,
}

impl BreakerState {
    /// The API's word: `closed`, `open`, `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// What this worker knows of a destination beyond the store's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct DestinationState {
    /// The breaker's state now.
    pub breaker: BreakerState,
    /// Until when the whole destination backs off after a Retry-After.
    pub backoff_until: Option<Timestamp>,
    /// The error reason of its last failed or retried attempt here.
    pub last_error: Option<String>,
    /// The HTTP status of its last answered attempt here.
    pub last_status: Option<u16>,
    /// Its calls in flight on this worker.
    pub in_flight: u64,
    /// The calls its pacing allows in flight now (halved by throttling,
    /// growing back), when pacing bounds them.
    pub effective_max_in_flight: Option<u32>,
    /// Calls left in its window, as its last rate-limit fields said.
    pub ratelimit_remaining: Option<u64>,
    /// When that window resets.
    pub ratelimit_reset_at: Option<Timestamp>,
}

/// How an answered attempt counts for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The destination is failing: a connect error, a timeout, a 5xx.
    Failure,
    /// The destination answered (2xx, or a 4xx that is the request's fault).
    Healthy,
    /// Says nothing about the destination (refused by policy, too large…).
    Neutral,
}

/// How an answered attempt went, as [`Flow::answered`] records it.
#[derive(Debug, Clone)]
pub(crate) struct Answer<'a> {
    /// The attempt's destination.
    pub(crate) destination: &'a str,
    /// The attempt: its task and attempt counter.
    pub(crate) task: (TaskId, u32),
    /// How the answer counts for the breaker.
    pub(crate) verdict: Verdict,
    /// The HTTP status, when there was one.
    pub(crate) status: Option<u16>,
    /// The error reason, for a failed or retried attempt.
    pub(crate) error: Option<&'a str>,
    /// The destination's Retry-After, when a 429 or 503 sent one.
    pub(crate) backoff: Option<Duration>,
    /// The answer's rate-limit fields, when it had any.
    pub(crate) rate_limit: Option<tc_retry::RateLimit>,
    /// The task's flow key: held too when the fields say none are left.
    pub(crate) flow_key: Option<tc_model::flow_key::KeyRef>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breaker {
    Closed,
    Open { until: Timestamp },
    HalfOpen { probe: Option<(TaskId, u32)> },
}

#[derive(Debug)]
struct Dest {
    /// Tokens of this claim's grant not used yet (given back after it).
    tokens: f64,
    /// When the store's bucket has a whole token again, after a grant
    /// short of the ask: no ask before then.
    next_token: Option<Timestamp>,
    /// A grant went unused (nothing of it due): no ask before then,
    /// unless the claim loop slept and woke meanwhile.
    empty_until: Option<Timestamp>,
    /// Another node's rate-limit hold, adopted from the store.
    shared_hold: Option<Timestamp>,
    backoff_until: Option<Timestamp>,
    breaker: Breaker,
    /// Consecutive failures while closed.
    failures: u32,
    /// How often it opened since it last closed: the open period doubles.
    opens: u32,
    last_error: Option<String>,
    last_status: Option<u16>,
    in_flight: u64,
    pacing: Pacing,
    /// An answer lifted the pacing's window (slow start reached the ceiling)
    /// since an attempt last ended: the next end wakes the claim loop asleep
    /// behind it, or it slept until its poll interval with a backlog due.
    unbound: bool,
    /// Whether this node has met it: the first call goes alone.
    contact: Contact,
}

impl Dest {
    fn new() -> Dest {
        Dest {
            tokens: 0.0,
            next_token: None,
            empty_until: None,
            shared_hold: None,
            backoff_until: None,
            breaker: Breaker::Closed,
            failures: 0,
            opens: 0,
            last_error: None,
            last_status: None,
            in_flight: 0,
            pacing: Pacing::default(),
            unbound: false,
            contact: Contact::New,
        }
    }

    /// Open periods that ended become half-open.
    fn settle(&mut self, now: Timestamp) {
        if let Breaker::Open { until } = self.breaker
            && until <= now
        {
            self.breaker = Breaker::HalfOpen { probe: None };
        }
        if self.backoff_until.is_some_and(|until| until <= now) {
            self.backoff_until = None;
        }
        if self.shared_hold.is_some_and(|until| until <= now) {
            self.shared_hold = None;
        }
        self.contact.settle(now);
    }

    /// Whether a rate-limit hold, this node's or another's, holds it now.
    fn rate_limited(&self, now: Timestamp) -> Option<Timestamp> {
        let shared = self.shared_hold.filter(|until| *until > now);
        match (self.pacing.held_until(now), shared) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether nothing here needs remembering: no call in flight, the
    /// breaker closed with no failure counted towards it, no backoff. A
    /// destination without settings in that state is forgotten: a fresh
    /// entry would be the same. (Its last status and error go with it.)
    fn is_idle(&self, now: Timestamp) -> bool {
        self.in_flight == 0
            && self.breaker == Breaker::Closed
            && self.failures == 0
            && self.opens == 0
            && self.backoff_until.is_none()
            && self.shared_hold.is_none()
            && self.pacing.is_idle(now)
            && self.contact.is_idle(now)
    }

    fn breaker_state(&self) -> BreakerState {
        match self.breaker {
            Breaker::Closed => BreakerState::Closed,
            Breaker::Open { .. } => BreakerState::Open,
            Breaker::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}

#[derive(Default)]
struct FlowState {
    settings: HashMap<String, DestinationSettings>,
    dests: HashMap<String, Dest>,
    /// Holds learned here that the store has not been told of yet.
    learned: Vec<(String, tc_model::cluster::DestinationHolds)>,
    /// Flow keys held by a downstream's rate-limit fields.
    key_holds: key_holds::KeyHolds,
    /// The destination the last claim's walk met last: the next one starts
    /// after it.
    cursor: Option<String>,
}

/// The worker's per-destination state.
pub(crate) struct Flow {
    state: Mutex<FlowState>,
    policy: BreakerPolicy,
    metrics: DestinationMetrics,
    /// The worker's calls in flight at most: how far a destination's
    /// pacing grows when it has no cap of its own.
    concurrency: u32,
}

impl Flow {
    pub(crate) fn new(
        policy: BreakerPolicy,
        metrics: DestinationMetrics,
        concurrency: usize,
    ) -> Flow {
        Flow {
            state: Mutex::new(FlowState::default()),
            policy,
            metrics,
            concurrency: u32::try_from(concurrency).unwrap_or(u32::MAX),
        }
    }

    /// How far `settings`' destination's pacing grows: its cap, else the
    /// worker's concurrency.
    fn ceiling(&self, settings: Option<&DestinationSettings>) -> u32 {
        settings
            .and_then(|s| s.max_in_flight)
            .unwrap_or(self.concurrency)
    }

    fn paced(&self, destination: &str, paced: Paced, dest: &Dest, now: Timestamp) {
        let (remaining, reset_at) = dest.pacing.rate_limit();
        tracing::info!(
            destination,
            reason = paced.as_str(),
            effective_max_in_flight = dest.pacing.window(),
            ratelimit_remaining = remaining,
            hold_ms = reset_at.map(|at| crate::pacing::hold_ms(at, now)),
            "destination_paced"
        );
        self.metrics.count_paced(destination, paced.as_str());
    }

    fn lock(&self) -> MutexGuard<'_, FlowState> {
        // Every update leaves the maps consistent before it can panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the store's settings as they are now.
    pub(crate) fn set_settings(
        &self,
        settings: Vec<(String, DestinationSettings)>,
        now: Timestamp,
    ) {
        let settings: HashMap<_, _> = settings.into_iter().collect();
        let mut guard = self.lock();
        let FlowState {
            settings: old,
            dests,
            ..
        } = &mut *guard;
        for (name, s) in &settings {
            let Some(dest) = dests.get_mut(name) else {
                dests.insert(name.clone(), Dest::new());
                continue;
            };
            let before = old.get(name);
            if before.is_some_and(|b| b.paused) && !s.paused {
                let paced = dest.pacing.slow_start(self.ceiling(Some(s)));
                self.paced(name, paced, dest, now);
            }
        }
        *old = settings;
    }

    /// The holds for the next claim.
    pub(crate) fn gate(&self, now: Timestamp) -> ClaimGate {
        let mut guard = self.lock();
        let FlowState {
            settings,
            dests,
            cursor,
            key_holds,
            ..
        } = &mut *guard;
        let mut gate = ClaimGate {
            after: cursor.clone(),
            held_keys: key_holds.held(now),
            first_contact: Some(1),
            ..ClaimGate::default()
        };
        for (name, s) in settings.iter() {
            if s.rate_per_s.is_some() {
                dests.entry(name.clone()).or_insert_with(Dest::new);
            }
        }
        // A backoff that ended leaves an idle destination: forget it, so
        // each claim costs what is active, not every host ever called.
        dests.retain(|name, dest| {
            dest.settle(now);
            settings.contains_key(name) || !dest.is_idle(now)
        });
        for (name, dest) in dests.iter_mut() {
            let s = settings.get(name);
            let mut at_most: Option<usize> = dest.pacing.room(dest.in_flight, now);
            match dest.contact.ask() {
                Ask::One => at_most = Some(at_most.map_or(1, |a| a.min(1))),
                Ask::Hold => at_most = Some(0),
                Ask::Free => {}
            }
            let held = dest.backoff_until.is_some()
                || dest.rate_limited(now).is_some()
                || match dest.breaker {
                    Breaker::Open { .. } | Breaker::HalfOpen { probe: Some(_) } => true,
                    Breaker::HalfOpen { probe: None } => {
                        at_most = Some(at_most.map_or(1, |a| a.min(1)));
                        false
                    }
                    Breaker::Closed => false,
                };
            if s.is_some_and(|s| s.rate_per_s.is_some()) {
                // Whole tokens only: a call needs one.
                let whole = dest.tokens.floor().max(0.0) as usize;
                at_most = Some(at_most.map_or(whole, |a| a.min(whole)));
            }
            if held || at_most == Some(0) {
                gate.held.insert(name.clone());
            } else if let Some(n) = at_most {
                gate.at_most.insert(name.clone(), n);
            } else if dest.in_flight == 0 {
                gate.met.insert(name.clone());
            }
            // The claim gives each free slot to the destination with the
            // fewest calls in flight here, so that a slow one, whose slots
            // come back late, cannot gather them all.
            if dest.in_flight > 0 {
                gate.in_flight.insert(
                    name.clone(),
                    usize::try_from(dest.in_flight).unwrap_or(usize::MAX),
                );
            }
        }
        gate
    }

    /// The earliest time a hold of this worker ends (a token refills, a
    /// backoff or an open breaker ends): when the claim loop must look again.
    pub(crate) fn next_release(&self, now: Timestamp) -> Option<Timestamp> {
        let state = self.lock();
        let mut earliest: Option<Timestamp> = None;
        let mut consider = |at: Timestamp| {
            earliest = Some(earliest.map_or(at, |e| e.min(at)));
        };
        for until in state.key_holds.ends() {
            consider(until);
        }
        for (name, dest) in &state.dests {
            if let Some(until) = dest.contact.release() {
                consider(until);
            }
            if let Some(until) = dest.backoff_until {
                consider(until);
            }
            if let Some(until) = dest.rate_limited(now) {
                consider(until);
            }
            if let Breaker::Open { until } = dest.breaker {
                consider(until);
            }
            if state
                .settings
                .get(name)
                .is_some_and(|s| s.rate_per_s.is_some())
                && let Some(at) = dest.next_token
            {
                consider(at.max(now));
            }
        }
        earliest
    }

    /// Counts the attempts a claim started (their tokens, a half-open
    /// probe, their calls in flight). Only the registry's insert calls it
    /// (`Shared::register`), as only its removal calls [`Flow::ended`].
    pub(crate) fn started(&self, tasks: &[Task], now: Timestamp) {
        let mut guard = self.lock();
        let FlowState {
            settings, dests, ..
        } = &mut *guard;
        for task in tasks {
            let s = settings.get(&task.destination);
            let dest = dests
                .entry(task.destination.clone())
                .or_insert_with(Dest::new);
            if s.is_some_and(|s| s.rate_per_s.is_some()) {
                dest.tokens -= 1.0;
            }
            if let Breaker::HalfOpen { probe: None } = dest.breaker {
                dest.breaker = Breaker::HalfOpen {
                    probe: Some((task.id, task.attempt)),
                };
            }
            dest.contact.started((task.id, task.attempt), now);
            dest.in_flight += 1;
            self.metrics
                .set_in_flight(&task.destination, dest.in_flight);
        }
    }

    /// Keeps where a claim's walk stopped: the next one starts after it.
    pub(crate) fn walked(&self, walked_to: Option<String>) {
        if walked_to.is_some() {
            self.lock().cursor = walked_to;
        }
    }

    /// Records how an answered attempt went.
    pub(crate) fn answered(&self, answer: Answer<'_>, now: Timestamp) {
        let Answer {
            destination,
            task,
            verdict,
            status,
            error,
            backoff,
            rate_limit,
            flow_key,
        } = answer;
        let mut state = self.lock();
        let s = state.settings.get(destination).cloned();
        let dest = state
            .dests
            .entry(destination.to_owned())
            .or_insert_with(Dest::new);
        let shared_before = cluster::shareable(dest, now);
        if status.is_some() {
            dest.last_status = status;
        }
        if let Some(error) = error {
            dest.last_error = Some(error.to_owned());
        }
        if let Some(wait) = backoff {
            let until = now.saturating_add(wait);
            dest.backoff_until = Some(dest.backoff_until.map_or(until, |u| u.max(until)));
            tracing::info!(
                destination,
                backoff_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "destination_backoff"
            );
        }
        let ceiling = self.ceiling(s.as_ref());
        let signal = crate::pacing::signal_of(status, rate_limit.as_ref());
        self.pace(destination, dest, (signal, rate_limit), ceiling, now);
        let is_probe = matches!(dest.breaker, Breaker::HalfOpen { probe: Some(p) } if p == task);
        match (dest.breaker, verdict) {
            (Breaker::HalfOpen { .. }, Verdict::Healthy) if is_probe => {
                dest.breaker = Breaker::Closed;
                tracing::info!(
                    destination,
                    failures = dest.failures,
                    "destination_breaker_closed"
                );
                dest.failures = 0;
                dest.opens = 0;
                self.metrics.set_breaker_open(destination, false);
                let paced = dest.pacing.slow_start(ceiling);
                self.paced(destination, paced, dest, now);
            }
            (Breaker::HalfOpen { .. }, Verdict::Failure) if is_probe => {
                dest.failures += 1;
                self.open(destination, dest, now);
            }
            (Breaker::HalfOpen { .. }, Verdict::Neutral) if is_probe => {
                dest.breaker = Breaker::HalfOpen { probe: None };
            }
            (Breaker::Closed, Verdict::Failure) => {
                dest.failures += 1;
                if dest.failures >= self.policy.failures.max(1) {
                    self.open(destination, dest, now);
                }
            }
            (Breaker::Closed, Verdict::Healthy) => dest.failures = 0,
            _ => {}
        }
        let shared_after = cluster::shareable(dest, now);
        let key_hold = flow_key.zip(dest.pacing.held_until(now));
        if shared_after != shared_before && shared_after.current(now).is_some() {
            state.learned.push((destination.to_owned(), shared_after));
        }
        state.hold_key(key_hold);
    }

    /// Tells `dest`'s pacing how an answer went; marks a window it lifted.
    fn pace(
        &self,
        destination: &str,
        dest: &mut Dest,
        (signal, rate_limit): (crate::pacing::Signal, Option<tc_retry::RateLimit>),
        ceiling: u32,
        now: Timestamp,
    ) {
        let windowed = dest.pacing.window().is_some();
        if let Some(paced) = dest
            .pacing
            .answered(signal, rate_limit, dest.in_flight, ceiling, now)
        {
            self.paced(destination, paced, dest, now);
        }
        if windowed && dest.pacing.window().is_none() {
            dest.unbound = true;
        }
    }

    fn open(&self, destination: &str, dest: &mut Dest, now: Timestamp) {
        let factor = 2u32.saturating_pow(dest.opens.min(20));
        let period = self
            .policy
            .open
            .saturating_mul(factor)
            .min(self.policy.max_open);
        dest.breaker = Breaker::Open {
            until: now.saturating_add(period),
        };
        dest.opens = dest.opens.saturating_add(1);
        tracing::warn!(
            destination,
            failures = dest.failures,
            open_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
            "destination_breaker_opened"
        );
        self.metrics.set_breaker_open(destination, true);
    }

    /// An attempt of `destination` ended, however it ended (called by the
    /// registry's removal, `Shared::end_attempt`, only). A probe that ended
    /// without an answer lets the next one through. Returns whether
    /// the claim loop should look again now (a slot under a cap, or a
    /// probe, was freed).
    pub(crate) fn ended(&self, destination: &str, task: (TaskId, u32), now: Timestamp) -> bool {
        let mut state = self.lock();
        let FlowState {
            settings, dests, ..
        } = &mut *state;
        let kept = settings.contains_key(destination);
        let capped = settings
            .get(destination)
            .is_some_and(|s| s.max_in_flight.is_some());
        let Some(dest) = dests.get_mut(destination) else {
            return capped;
        };
        dest.in_flight = dest.in_flight.saturating_sub(1);
        self.metrics.set_in_flight(destination, dest.in_flight);
        let probe_ended = dest.contact.ended(task, now);
        let mut freed = capped
            || probe_ended
            || dest.pacing.window().is_some()
            || std::mem::take(&mut dest.unbound)
            || dest.pacing.bounded_by_fields(now);
        if matches!(dest.breaker, Breaker::HalfOpen { probe: Some(p) } if p == task) {
            dest.breaker = Breaker::HalfOpen { probe: None };
            freed = true;
        }
        let wake = freed || dest.breaker != Breaker::Closed;
        if !kept && dest.is_idle(now) {
            dests.remove(destination);
        }
        wake
    }

    /// This worker's view of `destination` now.
    pub(crate) fn state_of(&self, destination: &str, now: Timestamp) -> DestinationState {
        let mut state = self.lock();
        match state.dests.get_mut(destination) {
            Some(dest) => {
                dest.settle(now);
                let (ratelimit_remaining, reset_at) = dest.pacing.rate_limit();
                let ratelimit_reset_at = match (reset_at, dest.shared_hold) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                DestinationState {
                    breaker: dest.breaker_state(),
                    backoff_until: dest.backoff_until,
                    last_error: dest.last_error.clone(),
                    last_status: dest.last_status,
                    in_flight: dest.in_flight,
                    effective_max_in_flight: dest.pacing.window(),
                    ratelimit_remaining,
                    ratelimit_reset_at,
                }
            }
            None => DestinationState {
                breaker: BreakerState::Closed,
                backoff_until: None,
                last_error: None,
                last_status: None,
                in_flight: 0,
                effective_max_in_flight: None,
                ratelimit_remaining: None,
                ratelimit_reset_at: None,
            },
        }
    }

    /// Why `destination` is held now, if it is, given its store settings
    /// and running count: what the `held` metric reports.
    pub(crate) fn hold_reason(
        &self,
        destination: &str,
        settings: &DestinationSettings,
        running: u64,
        now: Timestamp,
    ) -> Option<HoldReason> {
        if settings.paused {
            return Some(HoldReason::Paused);
        }
        let mut state = self.lock();
        if let Some(dest) = state.dests.get_mut(destination) {
            dest.settle(now);
            if matches!(
                dest.breaker,
                Breaker::Open { .. } | Breaker::HalfOpen { probe: Some(_) }
            ) {
                return Some(HoldReason::Breaker);
            }
            if dest.backoff_until.is_some() || dest.rate_limited(now).is_some() {
                return Some(HoldReason::Backoff);
            }
        }
        if settings
            .max_in_flight
            .is_some_and(|cap| running >= u64::from(cap))
        {
            return Some(HoldReason::InFlight);
        }
        if settings.rate_per_s.is_some()
            && let Some(dest) = state.dests.get(destination)
            && dest.next_token.is_some_and(|at| at > now)
        {
            return Some(HoldReason::Rate);
        }
        None
    }

    pub(crate) fn metrics(&self) -> &DestinationMetrics {
        &self.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tc_model::{Limits, NewTask};

    pub(super) fn task(host: &str, n: u32) -> Task {
        let new = NewTask::new(
            format!("http://{host}/"),
            b"{}".to_vec(),
            format!("{host}-{n}"),
            3,
            Duration::from_secs(1),
            &Limits::default(),
        )
        .expect("a valid task");
        let mut task = Task::submitted(TaskId::new(at(0), [n as u8; 10]), &new, at(0));
        task.attempt = 1;
        task
    }

    pub(super) fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000 + ms)
    }

    pub(super) fn flow() -> Flow {
        Flow::new(BreakerPolicy::default(), DestinationMetrics::default(), 8)
    }

    /// Marks `destination` met at `now`, as if its probe had ended: for
    /// the tests of what comes after first contact.
    pub(super) fn meet(flow: &Flow, destination: &str, now: Timestamp) {
        let mut state = flow.lock();
        let dest = state
            .dests
            .entry(destination.to_owned())
            .or_insert_with(Dest::new);
        dest.contact = Contact::Met {
            kept_until: now.saturating_add(contact::MET_KEPT),
        };
    }

    fn kept(flow: &Flow) -> usize {
        flow.lock().dests.len()
    }

    /// 40,000 destinations called once each and all done: nothing is kept
    /// and a claim's gate is empty, so memory and the cost of each claim
    /// follow the destinations that are active, not every one ever seen.
    #[test]
    fn idle_destinations_are_forgotten() {
        let flow = flow();
        let tasks: Vec<Task> = (0..40_000)
            .map(|i| task(&format!("h{i}.example"), 1))
            .collect();
        for chunk in tasks.chunks(64) {
            flow.started(chunk, at(1));
        }
        assert_eq!(kept(&flow), 40_000, "in flight, each is kept");
        assert_eq!(flow.gate(at(2)).in_flight.len(), 40_000);
        for task in &tasks {
            let id = (task.id, task.attempt);
            flow.answered(
                Answer {
                    destination: &task.destination,
                    task: id,
                    verdict: Verdict::Healthy,
                    status: Some(200),
                    error: None,
                    backoff: None,
                    rate_limit: None,
                    flow_key: None,
                },
                at(3),
            );
            flow.ended(&task.destination, id, at(3));
        }
        // Met, each is kept a while (a lull costs no second probe), then
        // forgotten.
        assert_eq!(flow.gate(at(4)).met.len(), 40_000);
        let later = at(3).saturating_add(contact::MET_KEPT);
        let gate = flow.gate(later);
        assert_eq!(kept(&flow), 0, "idle destinations are kept");
        assert_eq!(
            gate,
            ClaimGate {
                first_contact: Some(1),
                ..ClaimGate::default()
            }
        );
    }

    /// What must be remembered keeps a destination: a failure towards its
    /// breaker, an open breaker, a Retry-After backoff (until it ends),
    /// settings; the rest goes as each becomes idle.
    #[test]
    fn destinations_with_something_to_remember_are_kept() {
        let flow = flow();
        let check = |host: &str, verdict: Verdict, backoff: Option<Duration>, kept_now: bool| {
            let t = task(host, 7);
            flow.started(std::slice::from_ref(&t), at(1));
            let id = (t.id, t.attempt);
            flow.answered(
                Answer {
                    destination: &t.destination,
                    task: id,
                    verdict,
                    status: None,
                    error: None,
                    backoff,
                    rate_limit: None,
                    flow_key: None,
                },
                at(1),
            );
            flow.ended(&t.destination, id, at(1));
            // Past the time a met destination is kept for its own sake.
            flow.gate(at(1).saturating_add(contact::MET_KEPT));
            let there = flow.lock().dests.contains_key(&t.destination);
            assert_eq!(there, kept_now, "{host}");
        };
        check("failing.example", Verdict::Failure, None, true);
        check("neutral.example", Verdict::Neutral, None, false);
        check(
            "backoff.example",
            Verdict::Healthy,
            Some(Duration::from_secs(20)),
            true,
        );
        flow.set_settings(
            vec![(
                "rated.example:80".to_owned(),
                DestinationSettings {
                    rate_per_s: Some(1.0),
                    ..Default::default()
                },
            )],
            at(2),
        );
        check("rated.example", Verdict::Healthy, None, true);
        // The backoff ends: the next gate forgets it; the others stay.
        let gate = flow.gate(at(30_000));
        assert!(!gate.held.contains("backoff.example:80"), "{gate:?}");
        let left: std::collections::BTreeSet<String> = flow.lock().dests.keys().cloned().collect();
        assert_eq!(
            left,
            ["failing.example:80", "rated.example:80"]
                .into_iter()
                .map(str::to_owned)
                .collect()
        );
    }

    /// One attempt of `host`, the way the claim loop runs it: a gate, the
    /// claim, the answer, the end, all at `ms`.
    fn attempt(flow: &Flow, host: &str, n: u32, ms: i64, verdict: Verdict, backoff: Option<u64>) {
        let t = task(host, n);
        flow.gate(at(ms));
        flow.started(std::slice::from_ref(&t), at(ms));
        let id = (t.id, t.attempt);
        flow.answered(
            Answer {
                destination: &t.destination,
                task: id,
                verdict,
                status: None,
                error: None,
                backoff: backoff.map(Duration::from_millis),
                rate_limit: None,
                flow_key: None,
            },
            at(ms),
        );
        flow.ended(&t.destination, id, at(ms));
    }

    /// Each row: answered attempts (when, how they counted), when the
    /// breaker is looked at, what it is then, and when the claim loop must
    /// look again by this worker's holds.
    #[test]
    fn the_breaker_opens_on_consecutive_failures_and_its_probe_decides() {
        use BreakerState::{Closed, HalfOpen, Open};
        use Verdict::{Failure as F, Healthy as H, Neutral as N};
        let policy = BreakerPolicy {
            failures: 3,
            open: Duration::from_secs(10),
            max_open: Duration::from_secs(15),
        };
        let check = |answers: &[(i64, Verdict)],
                     look_at: i64,
                     breaker: BreakerState,
                     release: Option<i64>| {
            let flow = Flow::new(policy, DestinationMetrics::default(), 8);
            for (n, (ms, verdict)) in answers.iter().enumerate() {
                let n = u32::try_from(n).expect("few rows");
                attempt(&flow, "b.example", n, *ms, *verdict, None);
            }
            let seen = flow.state_of("b.example:80", at(look_at)).breaker;
            assert_eq!(seen, breaker, "{answers:?} at {look_at}");
            assert_eq!(
                flow.next_release(at(look_at)),
                release.map(at),
                "{answers:?} at {look_at}"
            );
        };
        check(&[(0, F), (0, F)], 0, Closed, None);
        check(&[(0, F), (0, F), (0, F)], 0, Open, Some(10_000));
        check(&[(0, F), (0, F), (0, F)], 9_999, Open, Some(10_000));
        check(&[(0, F), (0, F), (0, F)], 10_000, HalfOpen, None);
        // A healthy answer resets the count; a neutral one does not.
        check(&[(0, F), (0, F), (0, H), (0, F)], 0, Closed, None);
        check(&[(0, F), (0, N), (0, F), (0, F)], 0, Open, Some(10_000));
        // The probe: healthy closes, a failure reopens for twice as long
        // (bounded by max_open), neutral lets the next probe through.
        check(&[(0, F), (0, F), (0, F), (10_000, H)], 10_000, Closed, None);
        check(
            &[(0, F), (0, F), (0, F), (10_000, F)],
            10_000,
            Open,
            Some(25_000),
        );
        check(
            &[(0, F), (0, F), (0, F), (10_000, N)],
            10_000,
            HalfOpen,
            None,
        );
    }

    /// Each row: Retry-After backoffs asked for (when, how long), when the
    /// next gate is made, and whether it holds the destination. The longer
    /// backoff wins; an ended one holds nothing.
    #[test]
    fn a_retry_after_holds_the_whole_destination_until_it_ends() {
        let check = |backoffs: &[(i64, u64)], gate_at: i64, held: bool| {
            let flow = flow();
            for (n, (ms, wait)) in backoffs.iter().enumerate() {
                let n = u32::try_from(n).expect("few rows");
                attempt(&flow, "r.example", n, *ms, Verdict::Healthy, Some(*wait));
            }
            let gate = flow.gate(at(gate_at));
            assert_eq!(
                gate.held.contains("r.example:80"),
                held,
                "{backoffs:?} at {gate_at}"
            );
        };
        check(&[(0, 5_000)], 4_999, true);
        check(&[(0, 5_000)], 5_000, false);
        check(&[(0, 5_000), (1_000, 1_000)], 4_999, true);
        check(&[(0, 1_000), (500, 5_000)], 5_499, true);
        check(&[(0, 1_000), (500, 5_000)], 5_500, false);
    }

    /// Each row: a destination's settings, its running count, and why the
    /// `held` metric says it is held (if it is).
    #[test]
    fn hold_reasons_follow_settings_and_running_counts() {
        let check = |settings: DestinationSettings, running: u64, reason: Option<HoldReason>| {
            let flow = flow();
            flow.set_settings(vec![("h.example:80".to_owned(), settings.clone())], at(0));
            let seen = flow.hold_reason("h.example:80", &settings, running, at(0));
            assert_eq!(seen, reason, "{settings:?} running {running}");
        };
        check(DestinationSettings::default(), 9, None);
        check(
            DestinationSettings {
                paused: true,
                ..Default::default()
            },
            0,
            Some(HoldReason::Paused),
        );
        check(
            DestinationSettings {
                max_in_flight: Some(2),
                ..Default::default()
            },
            2,
            Some(HoldReason::InFlight),
        );
        check(
            DestinationSettings {
                max_in_flight: Some(2),
                ..Default::default()
            },
            1,
            None,
        );
    }
}
