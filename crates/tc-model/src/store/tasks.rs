//! The tasks part of the store port ([`Tasks`]): what the API does to
//! tasks (submit, read, list, count, cancel, retry, delete, a bulk action,
//! retention) and whether the store can take writes.

use std::future::Future;
use std::time::Duration;

use super::{BulkOutcome, BulkRequest, ListQuery, Page, StateCounts, StoreError, Submitted};
use crate::tenant::{Acting, Scope};
use crate::{NewTask, State, Task, TaskId, Timestamp};

/// The tasks as the API sees them.
///
/// Every state change goes through [`crate::transit`]. Every operation is
/// atomic and safe to repeat: an async caller that is dropped may not stop a
/// write already on its way.
pub trait Tasks: Send + Sync + 'static {
    /// Registers a task, durably, or returns the one that already has this
    /// idempotency key and the same payload (`created == false`). The same key
    /// with a different payload is [`StoreError::IdempotencyConflict`].
    fn submit(
        &self,
        task: NewTask,
        now: Timestamp,
    ) -> impl Future<Output = Result<Submitted, StoreError>> + Send;

    /// Registers many tasks in one durable transaction, each as
    /// [`Tasks::submit`] would, in order (a later item sees an earlier
    /// one's key). One item's refusal (an idempotency conflict) fails that
    /// item alone; the outer error means nothing was written.
    fn submit_many(
        &self,
        tasks: Vec<NewTask>,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<Result<Submitted, StoreError>>, StoreError>> + Send;

    /// The task with its attempt history, or [`StoreError::NotFound`]:
    /// also for a task `scope` does not see ([`Scope::sees`]), so that
    /// another tenant's task is as unknown as one that never was.
    fn get(
        &self,
        id: TaskId,
        scope: Scope,
    ) -> impl Future<Output = Result<Task, StoreError>> + Send;

    /// A page of tasks in creation order (keyset pagination: no task skipped
    /// or repeated while others are inserted), without their request bodies,
    /// within [`ListQuery::max_result_bytes`]; only the tasks `scope` sees
    /// ([`ListQuery::within`]), whatever tenant the filter names.
    fn list(
        &self,
        query: ListQuery,
        scope: Scope,
    ) -> impl Future<Output = Result<Page, StoreError>> + Send;

    /// How many tasks are in each state.
    fn count_by_state(&self) -> impl Future<Output = Result<StateCounts, StoreError>> + Send;

    /// Pending or running → canceled; a terminal task is returned unchanged.
    /// A task `scope` does not see is [`StoreError::NotFound`], and
    /// nothing changes.
    fn cancel(
        &self,
        id: TaskId,
        scope: Scope,
        now: Timestamp,
    ) -> impl Future<Output = Result<Task, StoreError>> + Send;

    /// Deletes a finished task with its attempt history and result; its
    /// idempotency key is free again. A pending or running task is
    /// [`StoreError::NotTerminal`] (cancel it first), an unknown one
    /// [`StoreError::NotFound`], as is one `scope` does not see.
    fn delete(
        &self,
        id: TaskId,
        scope: Scope,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

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
    ///
    /// A tenant's task counts against its tenant's `max_pending` as a
    /// submit does ([`RetryQuota`](crate::tenant::quota::RetryQuota), counted in the retry's transaction):
    /// past it, [`StoreError::QuotaExceeded`] and nothing changes. Made
    /// with a tenant's key (`acting`): another tenant's task is
    /// [`StoreError::NotFound`], and a key revoked or a tenant deleted
    /// before the write commits is [`StoreError::CredentialGone`].
    fn retry(
        &self,
        id: TaskId,
        run_at: Timestamp,
        now: Timestamp,
        acting: Option<Acting>,
    ) -> impl Future<Output = Result<Task, StoreError>> + Send;

    /// Whether the store can take writes now: `Ok` once a round trip through
    /// the adapter's write path (its writer thread, its pool) answered,
    /// [`StoreError::Unavailable`] with the reason otherwise. Changes
    /// nothing; callers bound how long they wait for it.
    fn health(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Applies the request's action to every task its filter covers that
    /// existed when the call started (tasks submitted later are never
    /// swept in), in transactions of at most [`BULK_CHUNK`](super::BULK_CHUNK) tasks; skips
    /// the tasks the action does not apply to ([`BulkAction::applies_to`](super::BulkAction::applies_to)).
    /// A retry makes tasks due at `now`, each admitted by the request's
    /// [`RetryQuota`](crate::tenant::quota::RetryQuota) (its tenant's `max_pending`, counted in each
    /// transaction, and its rate's allowance); the others stay as they
    /// are, counted in [`BulkOutcome::refused_quota`]. With `dry_run`
    /// nothing changes: the covered tasks are counted. Made with a tenant's
    /// key (`acting`), a transaction after the key was revoked or its
    /// tenant deleted is [`StoreError::CredentialGone`].
    fn bulk(
        &self,
        request: BulkRequest,
    ) -> impl Future<Output = Result<BulkOutcome, StoreError>> + Send;
}
