//! How many tasks are in each state ([`StateCounts`]), as
//! [`super::Tasks::count_by_state`] answers.

use crate::State;

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
