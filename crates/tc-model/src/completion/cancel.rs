//! What a cancel does to its task, as data: the rule every store adapter
//! persists, as [`super::CompletionEffect`] is for a try's end.

use crate::{IllegalTransition, State, Task, Timestamp, transit};

use super::CANCELED;

/// The fields a cancel writes to a pending or running task: it becomes
/// canceled, finished now, neither due nor leased; a running try ends with
/// the task, both carrying [`CANCELED`] as their error (a pending task keeps
/// the error of its last try). The task counts one more end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelEffect {
    /// The state canceled from (the adapter's write is guarded on it).
    pub from: State,
    /// Always [`State::Canceled`].
    pub state: State,
    /// When the task finished and changed.
    pub finished_at: Timestamp,
    /// The error written to the task and to its running try; `None` (the
    /// task was pending, no try runs) keeps the task's error.
    pub error: Option<&'static str>,
}

impl CancelEffect {
    /// The effect of canceling a task in state `from` at `now`; `Ok(None)`
    /// for a finished task, which a cancel leaves as it is.
    pub fn of(from: State, now: Timestamp) -> Result<Option<CancelEffect>, IllegalTransition> {
        if from.is_terminal() {
            return Ok(None);
        }
        let state = transit(from, State::Canceled)?;
        Ok(Some(CancelEffect {
            from,
            state,
            finished_at: now,
            error: (from == State::Running).then_some(CANCELED),
        }))
    }

    /// Whether a try was running: its history row is closed with
    /// [`CancelEffect::error`].
    pub fn ends_a_try(&self) -> bool {
        self.from == State::Running
    }

    /// Writes the effect into `task`, closing its running try: what an
    /// adapter that holds tasks as values persists.
    pub fn apply_to(&self, task: &mut Task) {
        if self.ends_a_try() {
            let attempt = task.attempt;
            if let Some(record) = task
                .attempts
                .iter_mut()
                .find(|a| a.n == attempt && a.finished_at.is_none())
            {
                record.close(self.finished_at, None, self.error.map(str::to_owned));
            }
        }
        task.state = self.state;
        task.finished_at = Some(self.finished_at);
        task.updated_at = self.finished_at;
        task.lease_until = None;
        task.next_run_at = None;
        if let Some(error) = self.error {
            task.error = Some(error.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row: the state canceled from at t = 10 and the effect, `None`
    /// where the task is left as it is.
    #[test]
    fn a_cancel_has_one_effect_per_state() {
        let now = Timestamp::from_millis(10);
        let check = |from: State, error: Option<Option<&str>>| {
            let effect = CancelEffect::of(from, now);
            let got = effect
                .as_ref()
                .map(|e| e.as_ref().map(|e| (e.state, e.finished_at, e.error)));
            let want = error.map(|error| (State::Canceled, now, error));
            assert_eq!(got, Ok(want), "cancel from {from:?}");
        };
        check(State::Pending, Some(None));
        check(State::Running, Some(Some(CANCELED)));
        for done in [State::Success, State::Failed, State::Canceled] {
            check(done, None);
        }
    }
}
