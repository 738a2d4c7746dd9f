//! The store port: what the worker and the HTTP layer need from durable
//! storage. Adapters (SQLite today, Postgres later) implement [`TaskStore`]
//! and pass the same contract suite.
//!
//! Every method takes the current time from its caller, so that the worker's
//! clock (paused in tests) is the one truth about "now".

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use crate::{IllegalTransition, NewTask, State, Task, TaskId, Timestamp};

/// What went wrong in a store operation, in terms a caller can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No task has that id.
    #[error("task not found")]
    NotFound,
    /// The idempotency key belongs to a task with a different payload.
    #[error("idempotency key already used for a different task")]
    IdempotencyConflict,
    /// The operation would break the transition table.
    #[error("illegal transition {0}")]
    IllegalTransition(#[from] IllegalTransition),
    /// Only a finished task can be deleted; this one is in the given state.
    #[error("task is {0}, not finished: cancel it first")]
    NotTerminal(State),
    /// Only a failed or canceled task can be retried; this one is in the
    /// given state.
    #[error("task is {0}: only failed or canceled tasks can be retried")]
    NotRetryable(State),
    /// The backend cannot serve now (busy, disk full, I/O); the message is the
    /// backend's own.
    #[error("store unavailable: {0}")]
    Unavailable(String),
}

/// The result of [`TaskStore::submit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    /// The task, new or the one that already had this key.
    pub task: Task,
    /// `true` if this call created it.
    pub created: bool,
}

/// How a try ended, as the worker writes it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// The downstream answered 2xx: running → success.
    Success {
        /// The downstream's status.
        http_status: u16,
        /// The downstream's body.
        result: Vec<u8>,
        /// The downstream's `Content-Type`.
        content_type: Option<String>,
    },
    /// Try again later: running → pending, due at `next_run_at`.
    Retry {
        /// When the next try becomes due.
        next_run_at: Timestamp,
        /// Why this try failed (`http_503`, `timeout`, …).
        reason: String,
        /// The downstream's status, if it answered.
        http_status: Option<u16>,
    },
    /// Give up: running → failed.
    Failed {
        /// Why (`http_400`, `http_503` after the last try, …).
        reason: String,
        /// The downstream's status, if it answered.
        http_status: Option<u16>,
    },
}

/// The result of a guarded write ([`TaskStore::complete`], [`TaskStore::release`]).
// Returned once per write and matched at once: boxing the task would cost an
// allocation on the common path to save stack bytes on the rare one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guarded {
    /// The task was still running with that attempt; the write applied.
    Applied(Task),
    /// The task had moved on (canceled, recovered, another attempt); nothing
    /// was written. Carries the state it is in now.
    Lost(State),
}

/// Where a listing continues: opaque to callers, stable across inserts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cursor(i64);

impl Cursor {
    /// A cursor from an adapter's own position value.
    pub fn from_position(position: i64) -> Cursor {
        Cursor(position)
    }

    /// The adapter's position value.
    pub fn position(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A string that is not a cursor a store handed out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a listing cursor: {0:?}")]
pub struct BadCursor(pub String);

impl FromStr for Cursor {
    type Err = BadCursor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<i64>() {
            Ok(n) if n >= 0 && n.to_string() == s => Ok(Cursor(n)),
            _ => Err(BadCursor(s.to_owned())),
        }
    }
}

/// What to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListQuery {
    /// Only tasks in this state; all if `None`.
    pub state: Option<State>,
    /// The most tasks on one page.
    pub limit: usize,
    /// Continue after this cursor; from the start if `None`.
    pub after: Option<Cursor>,
    /// The most result bytes the page may carry, summed over its tasks; the
    /// page ends before the task that would cross it (but holds at least one
    /// task, so a listing always moves on). Adapters check result sizes
    /// before they read any result. `None`: no bound.
    pub max_result_bytes: Option<usize>,
}

/// How many of `result_lens` (a page's tasks' result sizes, in order) fit
/// in `budget` bytes: at least one, so that a listing always moves on.
pub fn results_within(result_lens: &[usize], budget: Option<usize>) -> usize {
    let Some(budget) = budget else {
        return result_lens.len();
    };
    let mut used = 0usize;
    let fits = result_lens
        .iter()
        .take_while(|&&len| {
            used = used.saturating_add(len);
            used <= budget
        })
        .count();
    fits.max(1).min(result_lens.len())
}

/// One page of a listing, in creation order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The tasks on this page. A listing never loads request bodies: each
    /// task's `body` is empty (read one task for its body).
    pub tasks: Vec<Task>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// How many tasks are in each state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateCounts([u64; 5]);

impl StateCounts {
    /// The count for `state`.
    pub fn get(&self, state: State) -> u64 {
        self.0[index(state)]
    }

    /// Sets the count for `state`.
    pub fn set(&mut self, state: State, count: u64) {
        self.0[index(state)] = count;
    }

    /// Every state with its count.
    pub fn iter(&self) -> impl Iterator<Item = (State, u64)> + '_ {
        State::ALL.into_iter().map(|s| (s, self.get(s)))
    }
}

fn index(state: State) -> usize {
    match state {
        State::Pending => 0,
        State::Running => 1,
        State::Success => 2,
        State::Failed => 3,
        State::Canceled => 4,
    }
}

/// The store port.
///
/// Every state change goes through [`crate::transit`]. Every operation is
/// atomic and safe to repeat: an async caller that is dropped may not stop a
/// write already on its way.
pub trait TaskStore: Send + Sync + 'static {
    /// Registers a task, durably, or returns the one that already has this
    /// idempotency key and the same payload (`created == false`). The same key
    /// with a different payload is [`StoreError::IdempotencyConflict`].
    fn submit(
        &self,
        task: NewTask,
        now: Timestamp,
    ) -> impl Future<Output = Result<Submitted, StoreError>> + Send;

    /// Registers many tasks in one durable transaction, each as
    /// [`TaskStore::submit`] would, in order (a later item sees an earlier
    /// one's key). One item's refusal (an idempotency conflict) fails that
    /// item alone; the outer error means nothing was written.
    fn submit_many(
        &self,
        tasks: Vec<NewTask>,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<Result<Submitted, StoreError>>, StoreError>> + Send;

    /// The task with its attempt history, or [`StoreError::NotFound`].
    fn get(&self, id: TaskId) -> impl Future<Output = Result<Task, StoreError>> + Send;

    /// A page of tasks in creation order (keyset pagination: no task skipped
    /// or repeated while others are inserted), without their request bodies,
    /// within [`ListQuery::max_result_bytes`].
    fn list(&self, query: ListQuery) -> impl Future<Output = Result<Page, StoreError>> + Send;

    /// How many tasks are in each state.
    fn count_by_state(&self) -> impl Future<Output = Result<StateCounts, StoreError>> + Send;

    /// Atomically moves up to `n` due pending tasks (oldest due first) to
    /// running: attempt + 1, started_at = now, lease_until = now + lease.
    /// Two claimers never get the same task.
    fn claim_due(
        &self,
        n: usize,
        now: Timestamp,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<Task>, StoreError>> + Send;

    /// Extends the lease of each `(id, attempt)` whose task is still running
    /// with that very attempt; returns how many. Keyed by the attempt so that a
    /// stalled process's heartbeat can never extend a newer claim of the task.
    fn heartbeat(
        &self,
        running: Vec<(TaskId, u32)>,
        now: Timestamp,
        lease: Duration,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Writes a try's outcome if the task is still running with `attempt`;
    /// otherwise changes nothing and says the write lost.
    fn complete(
        &self,
        id: TaskId,
        attempt: u32,
        outcome: Completion,
        now: Timestamp,
    ) -> impl Future<Output = Result<Guarded, StoreError>> + Send;

    /// Pending or running → canceled; a terminal task is returned unchanged.
    fn cancel(
        &self,
        id: TaskId,
        now: Timestamp,
    ) -> impl Future<Output = Result<Task, StoreError>> + Send;

    /// Running → pending without using up the attempt (an interrupted try,
    /// kept in the history); guarded like [`TaskStore::complete`].
    fn release(
        &self,
        id: TaskId,
        attempt: u32,
        now: Timestamp,
    ) -> impl Future<Output = Result<Guarded, StoreError>> + Send;

    /// Running tasks whose lease ended before `now` → pending, or → failed
    /// with error `interrupted` when no attempt is left. Returns how many.
    fn recover_expired(
        &self,
        now: Timestamp,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// Deletes a finished task with its attempt history and result; its
    /// idempotency key is free again. A pending or running task is
    /// [`StoreError::NotTerminal`] (cancel it first), an unknown one
    /// [`StoreError::NotFound`].
    fn delete(&self, id: TaskId) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Retention: deletes up to `limit` tasks in the terminal `state` whose
    /// `finished_at` is more than `older_than` before now, with their
    /// attempts, in one transaction; returns how many. Never touches a
    /// pending or running task (a non-terminal `state` deletes nothing).
    fn prune(
        &self,
        state: State,
        older_than: Duration,
        now: Timestamp,
        limit: usize,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// An operator's retry: a failed or canceled task becomes pending, due
    /// at `run_at`, with a fresh budget of `max_attempts` tries. Attempt
    /// numbers go on and the history keeps every earlier try; `error`,
    /// `http_status`, the result and `finished_at` are cleared. Any other
    /// state is [`StoreError::NotRetryable`].
    fn retry(
        &self,
        id: TaskId,
        run_at: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = Result<Task, StoreError>> + Send;

    /// The earliest `next_run_at` of any pending task, so a worker knows how
    /// long it may sleep.
    fn next_due(&self) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send;

    /// Whether the store can take writes now: `Ok` once a round trip through
    /// the adapter's write path (its writer thread, its pool) answered,
    /// [`StoreError::Unavailable`] with the reason otherwise. Changes
    /// nothing; callers bound how long they wait for it.
    fn health(&self) -> impl Future<Output = Result<(), StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        let c = Cursor::from_position(42);
        assert_eq!(c.to_string().parse::<Cursor>(), Ok(c));
        for bad in ["", "-1", "x", "01", "+1", "1.0", "99999999999999999999"] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_page_keeps_the_results_that_fit_and_always_one() {
        let check = |lens: &[usize], budget: Option<usize>, fits: usize| {
            assert_eq!(results_within(lens, budget), fits, "{lens:?} in {budget:?}");
        };
        check(&[], Some(10), 0);
        check(&[0, 0, 0], Some(0), 3);
        check(&[4, 6, 1], Some(10), 2);
        check(&[4, 6], Some(10), 2);
        check(&[11, 1], Some(10), 1);
        check(&[5, 0, 5, 1], Some(10), 3);
        check(&[usize::MAX, usize::MAX], Some(10), 1);
        check(&[100, 100], None, 2);
    }

    #[test]
    fn state_counts_hold_each_state() {
        let mut counts = StateCounts::default();
        for (i, s) in State::ALL.into_iter().enumerate() {
            counts.set(s, i as u64 * 10);
        }
        let got: Vec<_> = counts.iter().collect();
        assert_eq!(got.len(), 5);
        for (i, (s, n)) in got.into_iter().enumerate() {
            assert_eq!(s, State::ALL[i]);
            assert_eq!(n, i as u64 * 10);
        }
    }
}
