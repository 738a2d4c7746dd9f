//! A task's [`State`], its names, and the transition table every store obeys.

use std::fmt;
use std::str::FromStr;

/// Where a task is in its life.
///
/// The lowercase names (`pending`, `running`, …) are what the store writes and
/// what the API shows, so a person reading the database reads the same words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Waiting to be claimed, either new or waiting for a retry.
    Pending,
    /// Claimed by a worker that holds a lease on it.
    Running,
    /// The downstream answered 2xx. Terminal.
    Success,
    /// Out of attempts, or a non-retryable answer. Terminal.
    Failed,
    /// Canceled by a client. Terminal.
    Canceled,
}

impl State {
    /// Every state, in declaration order.
    pub const ALL: [State; 5] = [
        State::Pending,
        State::Running,
        State::Success,
        State::Failed,
        State::Canceled,
    ];

    /// The lowercase name written to the store and shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Running => "running",
            State::Success => "success",
            State::Failed => "failed",
            State::Canceled => "canceled",
        }
    }

    /// Whether no transition leaves this state.
    pub fn is_terminal(self) -> bool {
        matches!(self, State::Success | State::Failed | State::Canceled)
    }

    /// The states reachable from `self` in one move: the transition table.
    pub fn successors(self) -> &'static [State] {
        match self {
            State::Pending => &[State::Running, State::Canceled],
            // Running goes back to pending for a retry or a recovered lease.
            State::Running => &[
                State::Success,
                State::Failed,
                State::Canceled,
                State::Pending,
            ],
            State::Success | State::Failed | State::Canceled => &[],
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no [`State`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown task state {0:?}")]
pub struct UnknownState(pub String);

impl FromStr for State {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

/// A move the transition table does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{from} -> {to}")]
pub struct IllegalTransition {
    /// The state the task was in.
    pub from: State,
    /// The state it was asked to move to.
    pub to: State,
}

/// Checks the move `from -> to` against the transition table and returns the
/// new state, or the refused pair.
pub fn transit(from: State, to: State) -> Result<State, IllegalTransition> {
    if from.successors().contains(&to) {
        Ok(to)
    } else {
        Err(IllegalTransition { from, to })
    }
}

/// An operator's retry of a finished task: `failed` or `canceled` becomes
/// `pending` again. Apart from the worker's table ([`transit`]), because only
/// an explicit request may reopen a terminal task; `success` is never
/// reopened.
pub fn retry_by_hand(from: State) -> Result<State, IllegalTransition> {
    match from {
        State::Failed | State::Canceled => Ok(State::Pending),
        from => Err(IllegalTransition {
            from,
            to: State::Pending,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use State::*;

    #[test]
    fn only_failed_and_canceled_tasks_are_retried_by_hand() {
        for from in State::ALL {
            let got = retry_by_hand(from);
            match from {
                Failed | Canceled => assert_eq!(got, Ok(Pending)),
                _ => assert_eq!(got, Err(IllegalTransition { from, to: Pending })),
            }
        }
    }

    #[test]
    fn transition_table_covers_all_25_pairs() {
        // The table written out in full, row = from, column = to, in
        // State::ALL order, so that a change to `successors` must be a
        // deliberate change here too.
        let allowed: [[bool; 5]; 5] = [
            //  pend   run    succ   fail   canc
            [false, true, false, false, true],   // pending
            [true, false, true, true, true],     // running
            [false, false, false, false, false], // success
            [false, false, false, false, false], // failed
            [false, false, false, false, false], // canceled
        ];
        let mut checked = 0;
        for (i, from) in State::ALL.into_iter().enumerate() {
            for (j, to) in State::ALL.into_iter().enumerate() {
                let got = transit(from, to);
                if allowed[i][j] {
                    assert_eq!(got, Ok(to), "{from} -> {to} should be allowed");
                } else {
                    assert_eq!(
                        got,
                        Err(IllegalTransition { from, to }),
                        "{from} -> {to} should be refused"
                    );
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 25);
    }

    #[test]
    fn terminal_states_have_no_successors() {
        for state in State::ALL {
            assert_eq!(
                state.is_terminal(),
                state.successors().is_empty(),
                "{state}"
            );
        }
    }

    #[test]
    fn illegal_transition_displays_as_arrow() {
        let err = transit(Pending, Success).unwrap_err();
        assert_eq!(err.to_string(), "pending -> success");
    }

    #[test]
    fn state_names_round_trip() {
        let names = ["pending", "running", "success", "failed", "canceled"];
        for (state, name) in State::ALL.into_iter().zip(names) {
            assert_eq!(state.as_str(), name);
            assert_eq!(state.to_string(), name);
            assert_eq!(name.parse::<State>(), Ok(state));
        }
    }

    #[test]
    fn unknown_state_names_are_errors() {
        for bad in [
            "",
            "PENDING",
            "Pending",
            "cancelled",
            "done",
            " pending",
            "pending ",
        ] {
            assert_eq!(
                bad.parse::<State>(),
                Err(UnknownState(bad.to_owned())),
                "{bad:?}"
            );
        }
    }
}
