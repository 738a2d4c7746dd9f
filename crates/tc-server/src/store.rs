//! The store the server runs on, chosen by `--db`: an SQLite file (the
//! default) or a PostgreSQL URL shared by several nodes. One enum so that the
//! worker, the API and the shutdown path are written once.

use std::time::Duration;

use tc_model::destination::{ClaimGate, Destination, DestinationSettings, DestinationUpdate};
use tc_model::store::{
    BulkAction, BulkOutcome, Completion, Guarded, ListQuery, Page, StateCounts, StoreError,
    Submitted, TaskFilter, TaskStore,
};
use tc_model::{NewTask, Task, TaskId, Timestamp};
use tc_store::SqliteStore;
use tc_store_pg::PgStore;

/// Either adapter behind the one port.
pub(crate) enum AnyStore {
    /// One process, one file.
    Sqlite(SqliteStore),
    /// Several nodes, one database.
    Postgres(PgStore),
}

impl AnyStore {
    /// The `store` field of the `listening` event.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            AnyStore::Sqlite(_) => "sqlite",
            AnyStore::Postgres(_) => "postgres",
        }
    }

    /// Closes the store: SQLite commits what is queued and stops its
    /// writer; PostgreSQL closes its pool.
    pub(crate) async fn close(self) {
        match self {
            AnyStore::Sqlite(store) => store.close().await,
            AnyStore::Postgres(store) => store.close(),
        }
    }
}

/// Forwards a call to whichever adapter this is.
macro_rules! either {
    ($self:ident, $store:ident => $call:expr) => {
        match $self {
            AnyStore::Sqlite($store) => $call.await,
            AnyStore::Postgres($store) => $call.await,
        }
    };
}

impl TaskStore for AnyStore {
    async fn submit(&self, task: NewTask, now: Timestamp) -> Result<Submitted, StoreError> {
        either!(self, s => s.submit(task, now))
    }

    async fn prune(
        &self,
        state: tc_model::State,
        older_than: Duration,
        now: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        either!(self, s => s.prune(state, older_than, now, limit))
    }

    async fn submit_many(
        &self,
        tasks: Vec<NewTask>,
        now: Timestamp,
    ) -> Result<Vec<Result<Submitted, StoreError>>, StoreError> {
        either!(self, s => s.submit_many(tasks, now))
    }

    async fn get(&self, id: TaskId) -> Result<Task, StoreError> {
        either!(self, s => s.get(id))
    }

    async fn list(&self, query: ListQuery) -> Result<Page, StoreError> {
        either!(self, s => s.list(query))
    }

    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        either!(self, s => s.count_by_state())
    }

    async fn claim(
        &self,
        n: usize,
        now: Timestamp,
        lease: Duration,
        gate: ClaimGate,
    ) -> Result<tc_model::claim::Claim, StoreError> {
        either!(self, s => s.claim(n, now, lease, gate))
    }

    async fn heartbeat(
        &self,
        running: Vec<(TaskId, u32)>,
        now: Timestamp,
        lease: Duration,
    ) -> Result<Vec<tc_model::store::LeaseLost>, StoreError> {
        either!(self, s => s.heartbeat(running, now, lease))
    }

    async fn complete(
        &self,
        id: TaskId,
        attempt: u32,
        outcome: Completion,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        either!(self, s => s.complete(id, attempt, outcome, now))
    }

    async fn cancel(&self, id: TaskId, now: Timestamp) -> Result<Task, StoreError> {
        either!(self, s => s.cancel(id, now))
    }

    async fn release(
        &self,
        id: TaskId,
        attempt: u32,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        either!(self, s => s.release(id, attempt, now))
    }

    async fn recover_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        either!(self, s => s.recover_expired(now))
    }

    async fn delete(&self, id: TaskId) -> Result<(), StoreError> {
        either!(self, s => s.delete(id))
    }

    async fn retry(
        &self,
        id: TaskId,
        run_at: Timestamp,
        now: Timestamp,
    ) -> Result<Task, StoreError> {
        either!(self, s => s.retry(id, run_at, now))
    }

    async fn bulk(
        &self,
        action: BulkAction,
        filter: TaskFilter,
        dry_run: bool,
        now: Timestamp,
    ) -> Result<BulkOutcome, StoreError> {
        either!(self, s => s.bulk(action, filter, dry_run, now))
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        either!(self, s => s.next_due())
    }

    async fn health(&self) -> Result<(), StoreError> {
        either!(self, s => s.health())
    }

    async fn destination_settings(&self) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
        either!(self, s => s.destination_settings())
    }

    async fn destinations(&self) -> Result<Vec<Destination>, StoreError> {
        either!(self, s => s.destinations())
    }

    async fn destination(&self, name: String) -> Result<Destination, StoreError> {
        either!(self, s => s.destination(name))
    }

    async fn update_destination(
        &self,
        name: String,
        update: DestinationUpdate,
        now: Timestamp,
    ) -> Result<Destination, StoreError> {
        either!(self, s => s.update_destination(name, update, now))
    }
}
