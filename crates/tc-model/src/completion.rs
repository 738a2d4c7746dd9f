//! What a completion does to its task, as data: the one rule every store
//! adapter persists. [`CompletionEffect::of`] turns a try's
//! [`Completion`] and the time into the fields to write; an adapter binds
//! them into its guarded write (SQLite's one UPDATE by id, the memory
//! store's [`CompletionEffect::apply_to`]) and decides nothing itself.

use crate::store::Completion;
use crate::{State, Task, Timestamp};

mod cancel;

pub use cancel::CancelEffect;

/// The error a try and its task carry when the try was cut short by a
/// release or an expired lease: the same word on every adapter.
pub const INTERRUPTED: &str = "interrupted";

/// The error an open try gets when its task is canceled (and the task,
/// when it was running): the same word on every adapter.
pub const CANCELED: &str = "canceled";

/// The fields a completion writes to a task that was running with the
/// completed attempt. The lease always ends (`lease_until` becomes null).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionEffect {
    /// The task's new state: success, pending (a retry) or failed.
    pub state: State,
    /// This try's HTTP status. `None` (the try got no answer: a timeout, a
    /// refused connection) keeps the task's last answered try's status.
    pub http_status: Option<u16>,
    /// The downstream's answer to keep, with its content type: written on
    /// success only; `None` leaves the stored result as it is.
    pub result: Option<(Vec<u8>, Option<String>)>,
    /// The task's error: this try's reason, or `None` (cleared) on success.
    pub error: Option<String>,
    /// When the task finished; `None` (a retry) leaves it unset.
    pub finished_at: Option<Timestamp>,
    /// When the task is due again: the retry's due time, else `None`.
    pub next_run_at: Option<Timestamp>,
    /// When the task changed.
    pub updated_at: Timestamp,
}

impl CompletionEffect {
    /// What `completion`, written at `now`, does to a running task.
    pub fn of(completion: Completion, now: Timestamp) -> CompletionEffect {
        match completion {
            Completion::Success {
                http_status,
                result,
                content_type,
            } => CompletionEffect {
                state: State::Success,
                http_status: Some(http_status),
                result: Some((result, content_type)),
                error: None,
                finished_at: Some(now),
                next_run_at: None,
                updated_at: now,
            },
            Completion::Retry {
                next_run_at,
                reason,
                http_status,
            } => CompletionEffect {
                state: State::Pending,
                http_status,
                result: None,
                error: Some(reason),
                finished_at: None,
                next_run_at: Some(next_run_at),
                updated_at: now,
            },
            Completion::Failed {
                reason,
                http_status,
            } => CompletionEffect {
                state: State::Failed,
                http_status,
                result: None,
                error: Some(reason),
                finished_at: Some(now),
                next_run_at: None,
                updated_at: now,
            },
        }
    }

    /// Writes the effect into `task` (running with `attempt`) and closes
    /// that try's history row with this try's status and error: what an
    /// adapter that holds tasks as values persists.
    pub fn apply_to(self, task: &mut Task, attempt: u32) {
        if let Some(record) = task
            .attempts
            .iter_mut()
            .find(|a| a.n == attempt && a.finished_at.is_none())
        {
            record.close(self.updated_at, self.http_status, self.error.clone());
        }
        task.state = self.state;
        task.http_status = self.http_status.or(task.http_status);
        if let Some((result, content_type)) = self.result {
            task.result = Some(result);
            task.result_content_type = content_type;
        }
        task.error = self.error;
        if self.finished_at.is_some() {
            task.finished_at = self.finished_at;
        }
        task.next_run_at = self.next_run_at;
        task.updated_at = self.updated_at;
        task.lease_until = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transit;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    /// Each row: a completion at t = 10 and the effect it has. Every effect
    /// is a legal transition from running.
    #[test]
    fn each_completion_has_one_effect() {
        let check = |completion: Completion, expected: CompletionEffect| {
            let effect = CompletionEffect::of(completion.clone(), at(10));
            assert_eq!(effect, expected, "{completion:?}");
            assert_eq!(transit(State::Running, effect.state), Ok(effect.state));
        };
        check(
            Completion::Success {
                http_status: 201,
                result: b"ok".to_vec(),
                content_type: Some("text/plain".to_owned()),
            },
            CompletionEffect {
                state: State::Success,
                http_status: Some(201),
                result: Some((b"ok".to_vec(), Some("text/plain".to_owned()))),
                error: None,
                finished_at: Some(at(10)),
                next_run_at: None,
                updated_at: at(10),
            },
        );
        check(
            Completion::Retry {
                next_run_at: at(500),
                reason: "timeout".to_owned(),
                http_status: None,
            },
            CompletionEffect {
                state: State::Pending,
                http_status: None,
                result: None,
                error: Some("timeout".to_owned()),
                finished_at: None,
                next_run_at: Some(at(500)),
                updated_at: at(10),
            },
        );
        check(
            Completion::Failed {
                reason: "http_400".to_owned(),
                http_status: Some(400),
            },
            CompletionEffect {
                state: State::Failed,
                http_status: Some(400),
                result: None,
                error: Some("http_400".to_owned()),
                finished_at: Some(at(10)),
                next_run_at: None,
                updated_at: at(10),
            },
        );
    }
}
