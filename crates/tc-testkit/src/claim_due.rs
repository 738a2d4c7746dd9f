//! [`ClaimDue`]: a claim that answers its tasks alone, for tests and
//! benches that do the worker's writes by hand. The worker keeps the whole
//! [`Claim`](tc_model::claim::Claim) (its cursor goes back into the next
//! gate), so this lives here, beside the other test helpers, and not on the
//! store port that every adapter and wrapper would carry.

use std::future::Future;
use std::time::Duration;

use tc_model::destination::ClaimGate;
use tc_model::store::{StoreError, TaskStore};
use tc_model::{Task, Timestamp};

/// [`Work::claim`](tc_model::store::Work::claim), answering only the claimed tasks; every store has it.
pub trait ClaimDue: TaskStore {
    /// Claims up to `n` due tasks at `now` with a lease of `lease`, as
    /// `gate` allows.
    fn claim_due(
        &self,
        n: usize,
        now: Timestamp,
        lease: Duration,
        gate: ClaimGate,
    ) -> impl Future<Output = Result<Vec<Task>, StoreError>> + Send {
        let claiming = self.claim(n, now, lease, gate);
        async move { claiming.await.map(|claim| claim.tasks) }
    }
}

impl<S: TaskStore> ClaimDue for S {}
