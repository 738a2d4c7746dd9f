//! The one registry of the attempts this worker has claimed and not yet
//! ended: one record per attempt, holding what every part of the worker
//! needs of it (its destination, for the flow's calls in flight and
//! half-open probe; its tenant, for the tenants' share; its cancel token; whether it was taken away). A record
//! is inserted in one place ([`Registry::insert`], when a claim is
//! registered) and removed in one place ([`Registry::remove`], the end of
//! the attempt, however it ended); `Shared` tells the flow at both, so no
//! exit can clear one thing and forget another.

use std::collections::{BTreeMap, HashSet};

use tc_model::{State, Task, TaskId};
use tokio_util::sync::CancellationToken;

/// An attempt: a task and its attempt counter.
pub(crate) type AttemptKey = (TaskId, u32);

/// One attempt from its claim to its end.
#[derive(Debug)]
pub(crate) struct Attempt {
    /// Its task's destination.
    pub(crate) destination: String,
    /// Its task's tenant as stored (`""`: none), for the tenants' share.
    pub(crate) tenant: String,
    /// Cancels its call.
    token: CancellationToken,
    /// Whether it is the attempt of its task that runs here: not when it was
    /// canceled while being claimed (it is never called), nor once a newer
    /// claim of the same task (after a lost lease) replaced it. Only the
    /// current attempt is heartbeated, counted in flight and reached by a
    /// cancel.
    current: bool,
    /// The store's state of the task when this attempt was stopped because
    /// the task is no longer its own (canceled or recovered elsewhere, or
    /// claimed again).
    taken_away: Option<State>,
}

/// The attempts this worker has claimed and not yet ended, and the claim on
/// its way to the store.
#[derive(Default)]
pub(crate) struct Registry {
    /// By task, then attempt: a task's attempts are neighbours, its newest
    /// last.
    attempts: BTreeMap<AttemptKey, Attempt>,
    /// Set while a claim is on its way to the store: a cancel that lands then
    /// cannot find the task registered yet, so it is remembered here.
    claim_in_flight: bool,
    canceled_during_claim: HashSet<TaskId>,
}

impl Registry {
    /// A claim is on its way: cancels from now on are remembered.
    pub(crate) fn begin_claim(&mut self) {
        self.claim_in_flight = true;
    }

    /// The claim came back (or failed): cancels are no longer remembered.
    pub(crate) fn end_claim(&mut self) {
        self.claim_in_flight = false;
        self.canceled_during_claim.clear();
    }

    /// Records a claimed task's attempt: the one insert. Returns its cancel
    /// token, or `None` when the task was canceled while being claimed (the
    /// record stays until the attempt is ended, never called).
    ///
    /// A claim always raises a task's attempt counter (a release, which
    /// lowers it again, comes only after claiming stopped), so the key is
    /// new.
    pub(crate) fn insert(&mut self, task: &Task) -> Option<CancellationToken> {
        let key = (task.id, task.attempt);
        let canceled = self.canceled_during_claim.contains(&task.id);
        if !canceled && let Some(older) = self.current_mut(task.id) {
            // This worker still runs an older attempt whose lease was lost:
            // its answer can no longer be written, so stop it rather than
            // call twice at once.
            older.current = false;
            older.taken_away = Some(State::Running);
            older.token.cancel();
        }
        let token = CancellationToken::new();
        self.attempts.insert(
            key,
            Attempt {
                destination: task.destination.clone(),
                tenant: tc_model::tenant::stored_tenant(task.tenant.as_deref()).to_owned(),
                token: token.clone(),
                current: !canceled,
                taken_away: None,
            },
        );
        (!canceled).then_some(token)
    }

    /// Forgets an attempt that ended: the one removal. `None` when it was
    /// not registered.
    pub(crate) fn remove(&mut self, key: AttemptKey) -> Option<Attempt> {
        self.attempts.remove(&key)
    }

    /// The current attempt of `id`, if one runs here.
    fn current_mut(&mut self, id: TaskId) -> Option<&mut Attempt> {
        self.attempts
            .range_mut((id, 0)..=(id, u32::MAX))
            .map(|(_, attempt)| attempt)
            .find(|attempt| attempt.current)
    }

    /// The store's state of a task whose attempt was stopped here because
    /// the task is no longer its own; `None` if it was not.
    pub(crate) fn taken_away(&self, key: AttemptKey) -> Option<State> {
        self.attempts.get(&key).and_then(|a| a.taken_away)
    }

    /// The current attempts: what heartbeats extend.
    pub(crate) fn running(&self) -> Vec<AttemptKey> {
        self.attempts
            .iter()
            .filter(|(_, a)| a.current)
            .map(|(key, _)| *key)
            .collect()
    }

    /// How many current attempts there are.
    pub(crate) fn in_flight(&self) -> usize {
        self.attempts.values().filter(|a| a.current).count()
    }

    /// Stops the call of `key` if it is its task's current attempt: the
    /// store says the task is `now_in` elsewhere. Whether it was.
    pub(crate) fn stop(&mut self, key: AttemptKey, now_in: State) -> bool {
        match self.attempts.get_mut(&key) {
            Some(attempt) if attempt.current => {
                attempt.taken_away = Some(now_in);
                attempt.token.cancel();
                true
            }
            _ => false,
        }
    }

    /// Interrupts the current attempt of `id`, or makes sure a claim in
    /// progress will not start it.
    pub(crate) fn interrupt_for_cancel(&mut self, id: TaskId) {
        if let Some(attempt) = self.current_mut(id) {
            attempt.token.cancel();
        } else if self.claim_in_flight {
            self.canceled_during_claim.insert(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tc_model::{Limits, NewTask, Timestamp};

    fn task(n: u8, attempt: u32) -> Task {
        let new = NewTask::new(
            "http://a.example/".to_owned(),
            b"{}".to_vec(),
            format!("key-{n}"),
            9,
            Duration::from_secs(1),
            &Limits::default(),
        )
        .expect("a valid task");
        let at = Timestamp::from_millis(1_700_000_000_000);
        let mut task = Task::submitted(TaskId::new(at, [n; 10]), &new, at);
        task.attempt = attempt;
        task
    }

    /// What the registry says after a sequence of steps: the attempts
    /// heartbeated, how many are in flight, and which were taken away.
    #[derive(Debug, PartialEq)]
    struct Seen {
        running: Vec<(u8, u32)>,
        in_flight: usize,
        taken_away: Vec<((u8, u32), State)>,
    }

    #[derive(Clone, Copy)]
    enum Step {
        /// A claim starts.
        Begin,
        /// A cancel of task `n` lands.
        Cancel(u8),
        /// The claim returns task `n` at attempt `a`; whether it may run.
        Claimed(u8, u32, bool),
        /// The store says attempt `a` of `n` is no longer its own.
        Stop(u8, u32, State),
        /// Attempt `a` of `n` ended; whether it was registered.
        End(u8, u32, bool),
    }

    fn check(steps: &[Step], expected: Seen) {
        let mut registry = Registry::default();
        let mut tasks = Vec::new();
        for step in steps {
            match *step {
                Step::Begin => registry.begin_claim(),
                Step::Cancel(n) => registry.interrupt_for_cancel(task(n, 0).id),
                Step::Claimed(n, a, runs) => {
                    let t = task(n, a);
                    let token = registry.insert(&t);
                    registry.end_claim();
                    assert_eq!(token.is_some(), runs, "task {n} attempt {a}");
                    tasks.push((n, a));
                }
                Step::Stop(n, a, state) => {
                    registry.stop((task(n, a).id, a), state);
                }
                Step::End(n, a, was) => {
                    let ended = registry.remove((task(n, a).id, a));
                    assert_eq!(ended.is_some(), was, "end of task {n} attempt {a}");
                }
            }
        }
        let name = |key: AttemptKey| {
            let (n, a) = tasks
                .iter()
                .copied()
                .find(|&(n, a)| (task(n, a).id, a) == key)
                .expect("a task of the steps");
            (n, a)
        };
        let taken_away: Vec<_> = tasks
            .iter()
            .filter_map(|&(n, a)| {
                registry
                    .taken_away((task(n, a).id, a))
                    .map(|state| ((n, a), state))
            })
            .collect();
        let seen = Seen {
            running: registry.running().into_iter().map(name).collect(),
            in_flight: registry.in_flight(),
            taken_away,
        };
        assert_eq!(seen, expected);
    }

    #[test]
    fn each_attempt_is_one_record_from_its_claim_to_its_end() {
        use State::{Canceled, Running};
        use Step::{Begin, Cancel, Claimed, End, Stop};
        let seen = |running: &[(u8, u32)], taken_away: &[((u8, u32), State)]| Seen {
            running: running.to_vec(),
            in_flight: running.len(),
            taken_away: taken_away.to_vec(),
        };
        check(&[Begin, Claimed(1, 1, true)], seen(&[(1, 1)], &[]));
        check(
            &[Begin, Claimed(1, 1, true), End(1, 1, true)],
            seen(&[], &[]),
        );
        check(&[End(1, 1, false)], seen(&[], &[]));
        // Canceled while the claim was on its way: recorded, never run.
        check(&[Begin, Cancel(1), Claimed(1, 1, false)], seen(&[], &[]));
        check(
            &[Begin, Cancel(1), Claimed(1, 1, false), End(1, 1, true)],
            seen(&[], &[]),
        );
        // A cancel with no claim on its way and nothing running is no-op.
        check(
            &[Cancel(1), Begin, Claimed(1, 1, true)],
            seen(&[(1, 1)], &[]),
        );
        // Claimed again after a lost lease: the older attempt is stopped,
        // and each ends on its own.
        let reclaimed = [Begin, Claimed(1, 1, true), Begin, Claimed(1, 2, true)];
        let then = |step: Step| [&reclaimed[..], &[step]].concat();
        check(&reclaimed, seen(&[(1, 2)], &[((1, 1), Running)]));
        check(&then(End(1, 1, true)), seen(&[(1, 2)], &[]));
        // Stopped by the store: still heartbeated until it ends; an older
        // attempt is not stopped twice.
        check(
            &[Begin, Claimed(1, 1, true), Stop(1, 1, Canceled)],
            seen(&[(1, 1)], &[((1, 1), Canceled)]),
        );
        check(
            &then(Stop(1, 1, Canceled)),
            seen(&[(1, 2)], &[((1, 1), Running)]),
        );
        check(
            &[Begin, Claimed(1, 1, true), Claimed(2, 1, true)],
            seen(&[(1, 1), (2, 1)], &[]),
        );
    }
}
