//! The store the server runs on, chosen by `--db`: an SQLite file (the
//! default) or a PostgreSQL URL shared by several nodes. `--db` is parsed
//! once, at the command line, into a [`DbTarget`]; one enum of stores
//! ([`AnyStore`]) so that the worker, the API and the shutdown path are
//! written once.

use std::ffi::OsStr;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use tc_model::destination::{ClaimGate, Destination, DestinationSettings, DestinationUpdate};
use tc_model::store::{
    BulkOutcome, Completion, Guarded, ListQuery, Page, StateCounts, StoreError, Submitted,
    TaskStore,
};
use tc_model::{NewTask, Task, TaskId, Timestamp};
use tc_store::SqliteStore;
use tc_store_pg::PgStore;

/// What `--db` names: an SQLite file or a PostgreSQL database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DbTarget {
    /// A database file, created if missing.
    Sqlite(PathBuf),
    /// A `postgres://` or `postgresql://` URL.
    Postgres(String),
}

impl DbTarget {
    /// Reads a `--db` value: a PostgreSQL URL by its scheme, anything else
    /// (any bytes a path may hold) a file path.
    pub(crate) fn from_arg(db: &OsStr) -> DbTarget {
        match db.to_str() {
            Some(url) if tc_store_pg::is_postgres_url(url) => DbTarget::Postgres(url.to_owned()),
            _ => DbTarget::Sqlite(PathBuf::from(db)),
        }
    }
}

impl From<PathBuf> for DbTarget {
    fn from(path: PathBuf) -> DbTarget {
        DbTarget::from_arg(path.as_os_str())
    }
}

impl fmt::Display for DbTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbTarget::Sqlite(path) => write!(f, "{}", path.display()),
            DbTarget::Postgres(url) => f.write_str(url),
        }
    }
}

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
    fn leads_upkeep(&self) -> bool {
        match self {
            AnyStore::Sqlite(s) => s.leads_upkeep(),
            AnyStore::Postgres(s) => s.leads_upkeep(),
        }
    }

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
        acting: Option<tc_model::tenant::Acting>,
    ) -> Result<Task, StoreError> {
        either!(self, s => s.retry(id, run_at, now, acting))
    }

    async fn bulk(&self, request: tc_model::store::BulkRequest) -> Result<BulkOutcome, StoreError> {
        either!(self, s => s.bulk(request))
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

    async fn create_schedule(
        &self,
        spec: tc_model::schedule::ScheduleSpec,
        now: Timestamp,
    ) -> Result<tc_model::schedule::Schedule, StoreError> {
        either!(self, s => s.create_schedule(spec, now))
    }
    async fn update_schedule(
        &self,
        name: String,
        change: tc_model::schedule::ScheduleChange,
        now: Timestamp,
    ) -> Result<tc_model::schedule::Schedule, StoreError> {
        either!(self, s => s.update_schedule(name, change, now))
    }
    async fn delete_schedule(&self, name: String) -> Result<(), StoreError> {
        either!(self, s => s.delete_schedule(name))
    }
    async fn schedules(&self) -> Result<Vec<tc_model::schedule::Schedule>, StoreError> {
        either!(self, s => s.schedules())
    }
    async fn schedule(&self, name: String) -> Result<tc_model::schedule::Schedule, StoreError> {
        either!(self, s => s.schedule(name))
    }
    async fn record_firing(
        &self,
        name: String,
        at: Timestamp,
        task: TaskId,
    ) -> Result<bool, StoreError> {
        either!(self, s => s.record_firing(name, at, task))
    }
    async fn record_firing_error(
        &self,
        name: String,
        error: tc_model::schedule::FiringError,
    ) -> Result<bool, StoreError> {
        either!(self, s => s.record_firing_error(name, error))
    }
    async fn create_tenant(
        &self,
        name: String,
        settings: tc_model::tenant::TenantUpdate,
        now: Timestamp,
    ) -> Result<tc_model::tenant::Tenant, StoreError> {
        either!(self, s => s.create_tenant(name, settings, now))
    }
    async fn update_tenant(
        &self,
        name: String,
        update: tc_model::tenant::TenantUpdate,
        now: Timestamp,
    ) -> Result<tc_model::tenant::Tenant, StoreError> {
        either!(self, s => s.update_tenant(name, update, now))
    }
    async fn delete_tenant(&self, name: String) -> Result<(), StoreError> {
        either!(self, s => s.delete_tenant(name))
    }
    async fn tenants(&self) -> Result<Vec<tc_model::tenant::TenantDetail>, StoreError> {
        either!(self, s => s.tenants())
    }
    async fn tenant_settings(
        &self,
    ) -> Result<std::collections::BTreeMap<String, tc_model::tenant::TenantSettings>, StoreError>
    {
        either!(self, s => s.tenant_settings())
    }
    async fn tenant(&self, name: String) -> Result<tc_model::tenant::TenantDetail, StoreError> {
        either!(self, s => s.tenant(name))
    }
    async fn create_api_key(
        &self,
        tenant: String,
        id: String,
        hash: tc_model::tenant::key::KeyHash,
        now: Timestamp,
    ) -> Result<tc_model::tenant::key::ApiKey, StoreError> {
        either!(self, s => s.create_api_key(tenant, id, hash, now))
    }
    async fn revoke_api_key(&self, tenant: String, id: String) -> Result<(), StoreError> {
        either!(self, s => s.revoke_api_key(tenant, id))
    }
    async fn api_key(
        &self,
        hash: tc_model::tenant::key::KeyHash,
    ) -> Result<Option<tc_model::tenant::key::KeyOwner>, StoreError> {
        either!(self, s => s.api_key(hash))
    }
    async fn touch_api_key(&self, id: String, at: Timestamp) -> Result<(), StoreError> {
        either!(self, s => s.touch_api_key(id, at))
    }

    async fn server_key(&self, name: String, candidate: String) -> Result<String, StoreError> {
        either!(self, s => s.server_key(name, candidate))
    }

    async fn put_topic(
        &self,
        at: tc_model::topic::TopicRef,
        spec: tc_model::topic::TopicSpec,
        now: Timestamp,
    ) -> Result<(tc_model::topic::Topic, bool), StoreError> {
        either!(self, s => s.put_topic(at, spec, now))
    }

    async fn topics(
        &self,
        tenant: Option<String>,
    ) -> Result<Vec<tc_model::topic::Topic>, StoreError> {
        either!(self, s => s.topics(tenant))
    }

    async fn topic(
        &self,
        at: tc_model::topic::TopicRef,
    ) -> Result<tc_model::topic::Topic, StoreError> {
        either!(self, s => s.topic(at))
    }

    async fn delete_topic(&self, at: tc_model::topic::TopicRef) -> Result<(), StoreError> {
        either!(self, s => s.delete_topic(at))
    }

    async fn create_subscription(
        &self,
        at: tc_model::topic::TopicRef,
        id: String,
        spec: tc_model::topic::SubscriptionSpec,
        now: Timestamp,
    ) -> Result<tc_model::topic::Subscription, StoreError> {
        either!(self, s => s.create_subscription(at, id, spec, now))
    }

    async fn update_subscription(
        &self,
        at: tc_model::topic::TopicRef,
        id: String,
        update: tc_model::topic::SubscriptionUpdate,
        now: Timestamp,
    ) -> Result<tc_model::topic::Subscription, StoreError> {
        either!(self, s => s.update_subscription(at, id, update, now))
    }

    async fn delete_subscription(
        &self,
        at: tc_model::topic::TopicRef,
        id: String,
    ) -> Result<(), StoreError> {
        either!(self, s => s.delete_subscription(at, id))
    }

    async fn subscriptions(
        &self,
        at: tc_model::topic::TopicRef,
    ) -> Result<Vec<tc_model::topic::Subscription>, StoreError> {
        either!(self, s => s.subscriptions(at))
    }

    async fn publish(
        &self,
        event: tc_model::topic::event::NewEvent,
        id: String,
        now: Timestamp,
    ) -> Result<tc_model::topic::event::Published, StoreError> {
        either!(self, s => s.publish(event, id, now))
    }

    async fn event(
        &self,
        at: tc_model::topic::TopicRef,
        id: String,
    ) -> Result<tc_model::topic::event::Event, StoreError> {
        either!(self, s => s.event(at, id))
    }

    async fn replay(
        &self,
        at: tc_model::topic::TopicRef,
        id: String,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<tc_model::topic::Delivery>, StoreError> {
        either!(self, s => s.replay(at, id, since, now))
    }

    async fn take_tokens(
        &self,
        asks: Vec<tc_model::cluster::TokenAsk>,
        now: Timestamp,
    ) -> Result<Vec<tc_model::cluster::TokenGrant>, StoreError> {
        either!(self, s => s.take_tokens(asks, now))
    }
    async fn share_holds(
        &self,
        learned: Vec<(String, tc_model::cluster::DestinationHolds)>,
        now: Timestamp,
    ) -> Result<Vec<(String, tc_model::cluster::DestinationHolds)>, StoreError> {
        either!(self, s => s.share_holds(learned, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--db` as typed, and what it names.
    fn check(db: &str, expected: DbTarget) {
        assert_eq!(DbTarget::from_arg(OsStr::new(db)), expected, "{db:?}");
    }

    #[test]
    fn db_is_a_postgres_url_by_its_scheme_and_a_file_otherwise() {
        let file = |p: &str| DbTarget::Sqlite(PathBuf::from(p));
        let pg = |u: &str| DbTarget::Postgres(u.to_owned());
        check("./taskcenter.db", file("./taskcenter.db"));
        check("/var/lib/tc/tasks.db", file("/var/lib/tc/tasks.db"));
        check("postgres", file("postgres"));
        check("postgres:/x", file("postgres:/x"));
        check("POSTGRES://h/db", file("POSTGRES://h/db"));
        check("postgres://tc@db:5432/tc", pg("postgres://tc@db:5432/tc"));
        check("postgresql://tc@db/tc?x=1", pg("postgresql://tc@db/tc?x=1"));
    }

    #[cfg(unix)]
    #[test]
    fn a_path_that_is_not_utf8_is_a_file() {
        use std::os::unix::ffi::OsStrExt;
        let raw = OsStr::from_bytes(b"/tmp/\xff.db");
        assert_eq!(
            DbTarget::from_arg(raw),
            DbTarget::Sqlite(PathBuf::from(raw))
        );
    }
}
