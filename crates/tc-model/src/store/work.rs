//! What the worker needs from the store ([`Work`]): claim due tasks, keep
//! their leases, write a try's end back, recover expired leases, and share
//! token buckets and destination holds between nodes.

use std::future::Future;
use std::time::Duration;

use super::{Completion, Guarded, LeaseLost, StoreError};
use crate::claim::Claim;
use crate::destination::ClaimGate;
use crate::{TaskId, Timestamp};

/// The worker's side of the store.
///
/// Every state change goes through [`crate::transit`]; every write is
/// guarded by the attempt it was made for, so a stalled process never
/// overwrites a newer claim.
pub trait Work: Send + Sync + 'static {
    /// Atomically moves up to `n` due pending tasks (oldest due first) to
    /// running: attempt + 1, started_at = now, lease_until = now + lease.
    /// Two claimers never get the same task. The claimed tasks carry no
    /// attempt history (`attempts` is empty; the store has it, with the new
    /// try open): a worker needs the request, and reading every history back
    /// cost as much as the rest of the claim.
    ///
    /// Destinations ([`crate::destination`]): a paused destination's tasks
    /// are not claimed, nor more of a destination's tasks than its
    /// `max_in_flight` less its running tasks (all of them, whichever
    /// process runs them), nor more than `gate` allows. The claim walks
    /// only the destinations that have due tasks (a store keeps each
    /// destination's earliest due time, indexed by it: destinations whose
    /// tasks are all later are never met, however many), in rotation
    /// order starting after [`ClaimGate::after`], as [`ClaimWalk`] rules,
    /// and shares `n` as [`FairShare`] does: each slot to the destination
    /// with the fewest calls in flight on the claiming node
    /// ([`ClaimGate::in_flight`]). The answer says where the walk stopped
    /// ([`Claim::cursor`]) and when the earliest task not yet due will be
    /// ([`Claim::resume_after`]).
    ///
    /// [`FairShare`]: crate::destination::FairShare
    /// [`ClaimWalk`]: crate::claim::ClaimWalk
    fn claim(
        &self,
        n: usize,
        now: Timestamp,
        lease: Duration,
        gate: ClaimGate,
    ) -> impl Future<Output = Result<Claim, StoreError>> + Send;

    /// Extends the lease of each `(id, attempt)` whose task is still running
    /// with that very attempt; returns the others, each with the state its
    /// task has now, so the caller learns of taken-away attempts without a
    /// read per task. Keyed by the attempt so that a stalled process's
    /// heartbeat can never extend a newer claim of the task. A constant
    /// number of statements however many pairs (an adapter's own rule).
    fn heartbeat(
        &self,
        running: Vec<(TaskId, u32)>,
        now: Timestamp,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<LeaseLost>, StoreError>> + Send;

    /// Writes a try's outcome if the task is still running with `attempt`;
    /// otherwise changes nothing and says the write lost.
    fn complete(
        &self,
        id: TaskId,
        attempt: u32,
        outcome: Completion,
        now: Timestamp,
    ) -> impl Future<Output = Result<Guarded, StoreError>> + Send;

    /// Running → pending without using up the attempt (an interrupted try,
    /// kept in the history); guarded like [`Work::complete`].
    fn release(
        &self,
        id: TaskId,
        attempt: u32,
        now: Timestamp,
    ) -> impl Future<Output = Result<Guarded, StoreError>> + Send;

    /// Whether this process runs the store's upkeep now (lease recovery,
    /// pruning): of several processes sharing one store, one at a time
    /// does, and another takes over when it dies. A store only one process
    /// opens always leads: the default. Upkeep stays correct run by two at
    /// once (each write is guarded); leading only spares the repeats.
    fn leads_upkeep(&self) -> bool {
        true
    }

    /// Running tasks whose lease ended before `now` → pending, or → failed
    /// with error `interrupted` when no attempt is left. Returns how many.
    fn recover_expired(
        &self,
        now: Timestamp,
    ) -> impl Future<Output = Result<usize, StoreError>> + Send;

    /// The earliest `next_run_at` of any pending task, so a worker knows how
    /// long it may sleep.
    fn next_due(&self) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send;

    /// Gives back the tokens each ask returns and takes a grant from its
    /// destination's shared token bucket ([`crate::cluster::Bucket::settle`],
    /// a bucket first met starting full), one answer per ask in order. On
    /// a store several nodes share, one bucket holds for all of them: the
    /// calls of every node together stay within the destination's rate
    /// and burst. Each ask is applied atomically.
    fn take_tokens(
        &self,
        asks: Vec<crate::cluster::TokenAsk>,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<crate::cluster::TokenGrant>, StoreError>> + Send;

    /// Merges the destination holds this node learned (each hold to the
    /// later end, [`crate::cluster::DestinationHolds::merge`]) and answers
    /// every destination's holds still in force at `now`, in name order
    /// (`learned` empty: a read). What makes a breaker opened or a
    /// backoff asked for on one node hold on every node.
    fn share_holds(
        &self,
        learned: Vec<(String, crate::cluster::DestinationHolds)>,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<(String, crate::cluster::DestinationHolds)>, StoreError>> + Send;
}
