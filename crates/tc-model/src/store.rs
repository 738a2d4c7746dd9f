//! The store port: what the worker and the HTTP layer need from durable
//! storage. Adapters (SQLite today, Postgres later) implement [`TaskStore`]
//! and pass the same contract suite.
//!
//! Every method takes the current time from its caller, so that the worker's
//! clock (paused in tests) is the one truth about "now".

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use crate::claim::Claim;
use crate::destination::{ClaimGate, Destination, DestinationSettings, DestinationUpdate};
use crate::schedule::{FiringError, Schedule, ScheduleChange, ScheduleSpec};
use crate::signing::SigningSecrets;
use crate::tenant::key::{ApiKey, KeyHash, KeyOwner};
use crate::tenant::quota::RetryQuota;
use crate::tenant::{Acting, Tenant, TenantDetail, TenantSettings, TenantUpdate};
use crate::topic::event::{Event, NewEvent, Published};
use crate::topic::{
    Delivery, Subscription, SubscriptionSpec, SubscriptionUpdate, Topic, TopicRef, TopicSpec,
};
use crate::{IllegalTransition, NewTask, State, Task, TaskId, Timestamp};

/// What went wrong in a store operation, in terms a caller can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No task has that id.
    #[error("task not found")]
    NotFound,
    /// The idempotency key belongs to a task with a different payload;
    /// `fields` names what differs ([`NewTask::differing_fields`]).
    #[error("idempotency key already used for a different task (differs in {})", fields.join(", "))]
    IdempotencyConflict {
        /// The submit's fields that differ from the stored task's.
        fields: Vec<&'static str>,
    },
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
    /// A schedule or a tenant of that name exists already.
    #[error("one of that name exists")]
    Exists,
    /// A tenant that still has tasks cannot be deleted.
    #[error("the tenant still has tasks")]
    NotEmpty,
    /// The submitting tenant has its `max_pending` tasks not yet terminal
    /// ([`crate::NewTask::pending_limit`]): nothing was written.
    #[error("max_pending: the tenant has {limit} tasks not yet finished, its limit")]
    QuotaExceeded {
        /// The limit that was reached.
        limit: u64,
    },
    /// The tenant's key the write was made with ([`crate::tenant::Acting`])
    /// was revoked, or its tenant deleted, before the write could commit:
    /// nothing was written.
    #[error("the key was revoked or its tenant deleted")]
    CredentialGone,
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

/// A running attempt whose lease a heartbeat did not extend: the task no
/// longer runs with that attempt (canceled or recovered elsewhere, claimed
/// again, finished).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseLost {
    /// The task.
    pub id: TaskId,
    /// The attempt the heartbeat was for.
    pub attempt: u32,
    /// The task's state as the store holds it now; `None` when the task is
    /// gone (deleted once finished).
    pub state: Option<State>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarded {
    /// The task was still running with that attempt; the write applied and
    /// the task is now in this state. (Not the task itself: reading it back,
    /// with its history and result, cost a fifth of a claim + complete, for a
    /// worker that needs only the state.)
    Applied(State),
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

/// Which tasks a listing or a bulk action covers: every field given must
/// hold (an empty filter matches every task). [`TaskFilter::matches`] is the
/// meaning; adapters turn it into their own queries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// Only tasks in this state.
    pub state: Option<State>,
    /// Only tasks for this destination (`host:port`).
    pub destination: Option<String>,
    /// Only tasks whose last error is exactly this reason (`http_503`, …).
    pub error: Option<String>,
    /// Only tasks created at or after this time.
    pub created_after: Option<Timestamp>,
    /// Only tasks created before this time.
    pub created_before: Option<Timestamp>,
    /// Only the tasks with this idempotency key (one per tenant at most).
    pub idempotency_key: Option<String>,
    /// Only the tasks of this tenant ([`TaskFilter::within`]
    /// sets it for a tenant's requests).
    pub tenant: Option<String>,
    /// Only the tasks of events published on this topic.
    pub topic: Option<String>,
    /// Only the tasks of this event.
    pub event_id: Option<String>,
    /// Only the tasks of this subscription.
    pub subscription: Option<String>,
    /// Only the tasks of this priority (0 to 9).
    pub priority: Option<u8>,
    /// Only the tasks of this flow key (of the filter's tenant's keys, as
    /// a tenant's listing is narrowed to its own tasks).
    pub flow_key: Option<String>,
}

/// The index a filtered scan walks, in position order; the filter's other
/// fields are checked on each row it reaches. Chosen by
/// [`TaskFilter::driving`], the same way on every adapter, so that the rows
/// a bounded scan reaches ([`ListQuery::max_scan`]) are the same everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driving {
    /// The idempotency key's unique index (key, tenant): at most one row
    /// per tenant.
    IdempotencyKey,
    /// Tasks with this error reason.
    Error,
    /// Tasks for this destination.
    Destination,
    /// Tasks of this tenant.
    Tenant,
    /// Tasks in this state.
    State,
    /// Every task (the created range alone is a scan).
    All,
}

impl TaskFilter {
    /// A filter on the state alone.
    pub fn state(state: Option<State>) -> TaskFilter {
        TaskFilter {
            state,
            ..TaskFilter::default()
        }
    }

    /// This filter narrowed to what `scope` sees: a tenant's listing and
    /// bulk action cover its own tasks whatever `tenant=` it gave.
    pub fn within(mut self, scope: &crate::tenant::Scope) -> TaskFilter {
        if let crate::tenant::Scope::Tenant(name) = scope {
            self.tenant = Some(name.clone());
        }
        self
    }

    /// Whether `task` is covered.
    pub fn matches(&self, task: &Task) -> bool {
        self.state.is_none_or(|s| task.state == s)
            && self
                .destination
                .as_ref()
                .is_none_or(|d| *d == task.destination)
            && self
                .error
                .as_ref()
                .is_none_or(|e| task.error.as_ref() == Some(e))
            && self.created_after.is_none_or(|t| task.created_at >= t)
            && self.created_before.is_none_or(|t| task.created_at < t)
            && self
                .idempotency_key
                .as_ref()
                .is_none_or(|k| *k == task.idempotency_key)
            && self
                .tenant
                .as_ref()
                .is_none_or(|t| Some(t) == task.tenant.as_ref())
            && self.priority.is_none_or(|p| task.priority == p)
            && self
                .flow_key
                .as_ref()
                .is_none_or(|k| Some(k) == task.flow_key.as_ref())
            && self.matches_topic(task)
    }

    /// Whether `task` is covered by the topic fields alone.
    fn matches_topic(&self, task: &Task) -> bool {
        let link = task.topic.as_ref();
        self.topic
            .as_ref()
            .is_none_or(|t| link.is_some_and(|l| l.topic == *t))
            && self
                .event_id
                .as_ref()
                .is_none_or(|e| link.is_some_and(|l| l.event_id == *e))
            && self
                .subscription
                .as_ref()
                .is_none_or(|s| link.is_some_and(|l| l.subscription == *s))
    }

    /// Whether `task` is reached by the [`TaskFilter::driving`] index.
    pub fn reaches(&self, task: &Task) -> bool {
        match self.driving() {
            Driving::IdempotencyKey => self.idempotency_key.as_ref() == Some(&task.idempotency_key),
            Driving::Error => self.error.is_some() && self.error == task.error,
            Driving::Destination => self.destination.as_ref() == Some(&task.destination),
            Driving::Tenant => self.tenant.is_some() && self.tenant == task.tenant,
            Driving::State => self.state == Some(task.state),
            Driving::All => true,
        }
    }

    /// The most selective index the filter can use: a key names one task
    /// (one per tenant); an error reason is rarer than a destination, a
    /// destination rarer than a tenant's tasks, a tenant's tasks than a
    /// state.
    pub fn driving(&self) -> Driving {
        if self.idempotency_key.is_some() {
            Driving::IdempotencyKey
        } else if self.error.is_some() {
            Driving::Error
        } else if self.destination.is_some() {
            Driving::Destination
        } else if self.tenant.is_some() {
            Driving::Tenant
        } else if self.state.is_some() {
            Driving::State
        } else {
            Driving::All
        }
    }

    /// Whether fields other than the driving one must be checked row by
    /// row (then a listing's scan is bounded by [`ListQuery::max_scan`]).
    pub fn needs_scan(&self) -> bool {
        let driving = self.driving();
        (self.state.is_some() && driving != Driving::State)
            || (self.destination.is_some() && driving != Driving::Destination)
            || (self.error.is_some() && driving != Driving::Error)
            || (self.idempotency_key.is_some() && driving != Driving::IdempotencyKey)
            || (self.tenant.is_some() && driving != Driving::Tenant)
            || self.created_after.is_some()
            || self.created_before.is_some()
            || self.topic.is_some()
            || self.event_id.is_some()
            || self.subscription.is_some()
            || self.priority.is_some()
            || self.flow_key.is_some()
    }
    /// The filter's given fields as column tests, in a fixed order: what
    /// both SQL adapters write (each in its own parameter syntax), so that
    /// which field tests which column, and how, is said once. The column
    /// names are those of the `tasks` table in both schemas.
    pub fn terms(&self) -> Vec<FilterTerm> {
        let text = |field, column, name, value: &str| FilterTerm {
            field,
            column,
            op: "=",
            name,
            value: TermValue::Text(value.to_owned()),
        };
        let mut terms = Vec::new();
        if let Some(state) = self.state {
            terms.push(text(Driving::State, "state", "state", state.as_str()));
        }
        if let Some(destination) = &self.destination {
            terms.push(text(
                Driving::Destination,
                "destination",
                "destination",
                destination,
            ));
        }
        if let Some(error) = &self.error {
            terms.push(text(Driving::Error, "error", "error", error));
        }
        if let Some(key) = &self.idempotency_key {
            terms.push(text(Driving::IdempotencyKey, "idempotency_key", "key", key));
        }
        if let Some(tenant) = &self.tenant {
            // Stored as `''` for none: a named tenant is never `''`.
            terms.push(text(Driving::Tenant, "tenant", "tenant", tenant));
        }
        // No index of their own: checked row by row (a listing by event
        // is bounded by `max_scan`, as any scanned filter). The columns are
        // NULL for tasks of no topic, where `=` answers NULL, not false:
        // a scan that reads the test as a boolean must get false.
        for (column, value) in [
            ("topic", &self.topic),
            ("event_id", &self.event_id),
            ("subscription", &self.subscription),
        ] {
            if let Some(value) = value {
                terms.push(FilterTerm {
                    op: "IS NOT DISTINCT FROM",
                    ..text(Driving::All, column, column, value)
                });
            }
        }
        let range = |op, name, at: Timestamp| FilterTerm {
            field: Driving::All,
            column: "created_at",
            op,
            name,
            value: TermValue::Millis(at.as_millis()),
        };
        if let Some(p) = self.priority {
            terms.push(FilterTerm {
                field: Driving::All,
                column: "priority",
                op: "=",
                name: "priority",
                value: TermValue::Int(i32::from(p)),
            });
        }
        if let Some(key) = &self.flow_key {
            // Stored as `''` for none: a key is never `''`.
            terms.push(text(Driving::All, "flow_key", "flow_key", key));
        }
        if let Some(t) = self.created_after {
            terms.push(range(">=", "created_after", t));
        }
        if let Some(t) = self.created_before {
            terms.push(range("<", "created_before", t));
        }
        terms
    }
}

/// One given field of a [`TaskFilter`] as a column test (see
/// [`TaskFilter::terms`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterTerm {
    /// The index this term can drive; [`Driving::All`]: none.
    pub field: Driving,
    /// The `tasks` column it tests.
    pub column: &'static str,
    /// The comparison: `=`, `>=`, `<`, or `IS NOT DISTINCT FROM` for a
    /// nullable column.
    pub op: &'static str,
    /// A name for its parameter, unique within one filter.
    pub name: &'static str,
    /// The value compared with.
    pub value: TermValue,
}

impl FilterTerm {
    /// Whether this term is the driving index's term of a filter driven by
    /// `driving` (else it is checked row by row).
    pub fn drives(&self, driving: Driving) -> bool {
        self.field == driving && driving != Driving::All
    }
}

/// The value of a [`FilterTerm`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TermValue {
    /// A text column's value.
    Text(String),
    /// A time column's value, in milliseconds since the epoch.
    Millis(i64),
    /// An integer column's value (`priority`).
    Int(i32),
}

/// How many rows one listing page may examine, by default, when its filter
/// needs a scan ([`TaskFilter::needs_scan`]).
pub const DEFAULT_MAX_SCAN: usize = 10_000;

/// What to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Which tasks.
    pub filter: TaskFilter,
    /// The most tasks on one page.
    pub limit: usize,
    /// Continue after this cursor; from the start if `None`.
    pub after: Option<Cursor>,
    /// The most result bytes the page may carry, summed over its tasks; the
    /// page ends before the task that would cross it (but holds at least one
    /// task, so a listing always moves on). Adapters check result sizes
    /// before they read any result. `None`: no bound.
    pub max_result_bytes: Option<usize>,
    /// When the filter needs a scan, the most rows of the driving index one
    /// page examines (at least `limit + 1`): a page can then end short, or
    /// empty, with a cursor to go on from, so no request reads the whole
    /// table for a rare match.
    pub max_scan: usize,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery {
            filter: TaskFilter::default(),
            limit: 50,
            after: None,
            max_result_bytes: None,
            max_scan: DEFAULT_MAX_SCAN,
        }
    }
}

impl ListQuery {
    /// How many rows of the driving index this page examines: one more
    /// than the limit (to know whether a page follows) when every given
    /// field is the driving one, else `max_scan` (never fewer).
    pub fn scan_rows(&self) -> usize {
        let fetch = self.limit.saturating_add(1);
        if self.filter.needs_scan() {
            self.max_scan.max(fetch)
        } else {
            fetch
        }
    }
}

/// An action over every task a filter covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkAction {
    /// [`TaskStore::retry`] each failed or canceled task, due at once.
    Retry,
    /// [`TaskStore::cancel`] each pending or running task.
    Cancel,
    /// [`TaskStore::delete`] each finished task.
    Delete,
}

impl BulkAction {
    /// The action's name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
            BulkAction::Delete => "delete",
        }
    }

    /// Whether the action applies to a task in `state` (a bulk action skips
    /// the others and does not count them as applied).
    pub fn applies_to(self, state: State) -> bool {
        match self {
            BulkAction::Retry => matches!(state, State::Failed | State::Canceled),
            BulkAction::Cancel => !state.is_terminal(),
            BulkAction::Delete => state.is_terminal(),
        }
    }
}

/// How many tasks one bulk transaction covers at most.
pub const BULK_CHUNK: usize = 1000;

/// How many ids a bulk answer shows.
pub const BULK_SAMPLE: usize = 10;

/// What a bulk action did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkOutcome {
    /// How many tasks the filter covered when the action started.
    pub matched: u64,
    /// How many of them the action changed (0 for a dry run).
    pub applied: u64,
    /// The first [`BULK_SAMPLE`] covered tasks, in creation order.
    pub sample: Vec<TaskId>,
    /// The tasks that were running when the action canceled them: their
    /// calls are still in flight, and the caller interrupts them.
    pub canceled_running: Vec<TaskId>,
    /// A retry's covered tasks left as they were because their tenant's
    /// `max_pending` or submit rate was reached ([`RetryQuota`]).
    pub refused_quota: u64,
    /// A retry's retried tasks per tenant (the caller takes as many tokens
    /// from each tenant's submit bucket).
    pub retried_by_tenant: BTreeMap<String, u64>,
    /// A retry's covered tasks left as they were because the allow-list
    /// ([`BulkRequest::allowed_urls`]) no longer admits their url or
    /// callback url.
    pub refused_url: u64,
}

/// A bulk action as the store runs it ([`TaskStore::bulk`]).
#[derive(Debug, Clone, PartialEq)]
pub struct BulkRequest {
    /// What to do.
    pub action: BulkAction,
    /// To which tasks (a tenant's request has it narrowed to its own).
    pub filter: TaskFilter,
    /// Count, change nothing.
    pub dry_run: bool,
    /// The caller's time; a retry makes tasks due at it.
    pub now: Timestamp,
    /// The tenant's key the action is made with: each transaction is
    /// refused ([`StoreError::CredentialGone`]) once the key is revoked or
    /// its tenant deleted. `None`: the admin.
    pub acting: Option<Acting>,
    /// A retry's tenants' quotas: their submit rates' allowance on this
    /// node; `max_pending` the store counts itself.
    pub quota: RetryQuota,
    /// A retry's allow-list (`--allow-url-prefix`; empty: every url): a
    /// task whose url or callback url it no longer admits
    /// ([`crate::urls_allowed`]) is left as it is, counted in
    /// [`BulkOutcome::refused_url`].
    pub allowed_urls: Vec<String>,
}

impl BulkRequest {
    /// `action` on what `filter` covers at `now`, made by the admin, with
    /// no submit rate to respect.
    pub fn new(action: BulkAction, filter: TaskFilter, now: Timestamp) -> BulkRequest {
        BulkRequest {
            action,
            filter,
            dry_run: false,
            now,
            acting: None,
            quota: RetryQuota::default(),
            allowed_urls: Vec::new(),
        }
    }

    /// The same request as a dry run: it counts, changes nothing.
    pub fn counting_only(mut self) -> BulkRequest {
        self.dry_run = true;
        self
    }
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
    ///
    /// A tenant's task counts against its tenant's `max_pending` as a
    /// submit does ([`RetryQuota`], counted in the retry's transaction):
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

    /// The earliest `next_run_at` of any pending task, so a worker knows how
    /// long it may sleep.
    fn next_due(&self) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send;

    /// Whether the store can take writes now: `Ok` once a round trip through
    /// the adapter's write path (its writer thread, its pool) answered,
    /// [`StoreError::Unavailable`] with the reason otherwise. Changes
    /// nothing; callers bound how long they wait for it.
    fn health(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Applies the request's action to every task its filter covers that
    /// existed when the call started (tasks submitted later are never
    /// swept in), in transactions of at most [`BULK_CHUNK`] tasks; skips
    /// the tasks the action does not apply to ([`BulkAction::applies_to`]).
    /// A retry makes tasks due at `now`, each admitted by the request's
    /// [`RetryQuota`] (its tenant's `max_pending`, counted in each
    /// transaction, and its rate's allowance); the others stay as they
    /// are, counted in [`BulkOutcome::refused_quota`]. With `dry_run`
    /// nothing changes: the covered tasks are counted. Made with a tenant's
    /// key (`acting`), a transaction after the key was revoked or its
    /// tenant deleted is [`StoreError::CredentialGone`].
    fn bulk(
        &self,
        request: BulkRequest,
    ) -> impl Future<Output = Result<BulkOutcome, StoreError>> + Send;

    /// Every destination that has settings, with them: what a worker needs
    /// to know (its rates) without counting tasks. A destination keeps its
    /// settings once an update named it, even when they are back to the
    /// defaults (an operator named it, so it stays listed).
    fn destination_settings(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, DestinationSettings)>, StoreError>> + Send;

    /// Every destination that has tasks or settings, in name order, with
    /// its pending and running counts; at most [`DESTINATIONS_LIMIT`].
    ///
    /// [`DESTINATIONS_LIMIT`]: crate::destination::DESTINATIONS_LIMIT
    fn destinations(&self) -> impl Future<Output = Result<Vec<Destination>, StoreError>> + Send;

    /// One destination (`host:port` as [`crate::destination_of`] writes
    /// it), or [`StoreError::NotFound`] when it has neither tasks nor
    /// settings.
    fn destination(
        &self,
        name: String,
    ) -> impl Future<Output = Result<Destination, StoreError>> + Send;

    /// Applies `update` to a destination's settings, durably (a destination
    /// need not have tasks yet), and returns the destination. The caller has
    /// validated the update ([`DestinationUpdate::validate`]).
    fn update_destination(
        &self,
        name: String,
        update: DestinationUpdate,
        now: Timestamp,
    ) -> impl Future<Output = Result<Destination, StoreError>> + Send;

    /// Stores a new schedule (never fired, created and updated at `now`),
    /// or [`StoreError::Exists`] when its name is taken.
    fn create_schedule(
        &self,
        spec: ScheduleSpec,
        now: Timestamp,
    ) -> impl Future<Output = Result<Schedule, StoreError>> + Send;

    /// Applies `change` to the schedule `name` ([`Schedule::changed`]:
    /// its firing record stays, `updated_at` becomes `now`), or
    /// [`StoreError::NotFound`].
    fn update_schedule(
        &self,
        name: String,
        change: ScheduleChange,
        now: Timestamp,
    ) -> impl Future<Output = Result<Schedule, StoreError>> + Send;

    /// Deletes the schedule `name` (its tasks stay), or
    /// [`StoreError::NotFound`].
    fn delete_schedule(&self, name: String) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every schedule, in name order: the firing loop reads them all (a
    /// schedule left out would never fire), so there is no page.
    fn schedules(&self) -> impl Future<Output = Result<Vec<Schedule>, StoreError>> + Send;

    /// The schedule `name`, or [`StoreError::NotFound`].
    fn schedule(&self, name: String) -> impl Future<Output = Result<Schedule, StoreError>> + Send;

    /// Records a firing of `name` at `at` that submitted `task`: a guarded
    /// write that applies only when `at` is later than the schedule's
    /// `last_run_at` (or it has none), so the record never moves backwards
    /// whatever order nodes write in. When it applies it clears a
    /// `last_error` of a fire time at or before `at` (a later refusal
    /// stays). Answers whether it applied (`false` too when the schedule
    /// is gone).
    fn record_firing(
        &self,
        name: String,
        at: Timestamp,
        task: TaskId,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records that the firing of `name` at `error.at` created no task, as
    /// the schedule's `last_error` (its `last_run_at` and `last_task_id`
    /// stay): a guarded write like [`TaskStore::record_firing`], applied
    /// only when `error.at` is later than `last_run_at` (or there is none)
    /// and not earlier than a recorded error's. Answers whether it applied
    /// (`false` too when the schedule is gone).
    fn record_firing_error(
        &self,
        name: String,
        error: FiringError,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Stores a new tenant `name` with the defaults and `settings` applied
    /// (validated by the caller), or [`StoreError::Exists`].
    fn create_tenant(
        &self,
        name: String,
        settings: TenantUpdate,
        now: Timestamp,
    ) -> impl Future<Output = Result<Tenant, StoreError>> + Send;

    /// Applies `update` to the tenant `name`, or [`StoreError::NotFound`].
    fn update_tenant(
        &self,
        name: String,
        update: TenantUpdate,
        now: Timestamp,
    ) -> impl Future<Output = Result<Tenant, StoreError>> + Send;

    /// Deletes the tenant `name` with its keys; [`StoreError::NotEmpty`]
    /// while any task (terminal or not) is its, [`StoreError::NotFound`]
    /// when there is no such tenant.
    fn delete_tenant(&self, name: String) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every tenant, in name order, with its counts and keys (the API's
    /// list and the metrics read them all).
    fn tenants(&self) -> impl Future<Output = Result<Vec<TenantDetail>, StoreError>> + Send;

    /// Every stored tenant's settings by name (its weight for the claim's
    /// share, its signing secrets for its calls), and nothing else: the
    /// worker reads it every second on every node, so it is one read of the
    /// tenants and must not count tasks or list keys as
    /// [`TaskStore::tenants`] does. Empty while no tenant is stored.
    fn tenant_settings(
        &self,
    ) -> impl Future<Output = Result<BTreeMap<String, TenantSettings>, StoreError>> + Send;

    /// The tenant `name` with its counts and keys, or
    /// [`StoreError::NotFound`].
    fn tenant(&self, name: String)
    -> impl Future<Output = Result<TenantDetail, StoreError>> + Send;

    /// Stores a new key of `tenant` (its hash only), or
    /// [`StoreError::NotFound`] when there is no such tenant.
    fn create_api_key(
        &self,
        tenant: String,
        id: String,
        hash: KeyHash,
        now: Timestamp,
    ) -> impl Future<Output = Result<ApiKey, StoreError>> + Send;

    /// Deletes the key `id` of `tenant`: it stops working at once, on every
    /// node (nothing caches it). [`StoreError::NotFound`] when `tenant` has
    /// no such key.
    fn revoke_api_key(
        &self,
        tenant: String,
        id: String,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The live key whose hash is `hash`, with its tenant as stored now
    /// (its settings current on every node), or `None`.
    fn api_key(
        &self,
        hash: KeyHash,
    ) -> impl Future<Output = Result<Option<KeyOwner>, StoreError>> + Send;

    /// Records that the key `id` was used at `at` (a write callers make
    /// at most once a minute per key); never moves `last_used_at` backwards.
    fn touch_api_key(
        &self,
        id: String,
        at: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

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

    /// Applies `update` to the settings of `tenant`'s flow key `key`
    /// (`None`: the admin's keys; another tenant's key of the same name is
    /// another key), creating them, and answers the key with its counts.
    /// The caller has validated the update
    /// ([`crate::flow_key::FlowKeyUpdate::validate`]).
    fn put_flow_key(
        &self,
        tenant: Option<String>,
        key: String,
        update: crate::flow_key::FlowKeyUpdate,
        now: Timestamp,
    ) -> impl Future<Output = Result<crate::flow_key::FlowKey, StoreError>> + Send;

    /// `tenant`'s flow key `key` with its settings (the defaults when it
    /// has none) and its running and pending tasks, or
    /// [`StoreError::NotFound`] when it has neither settings nor tasks.
    fn flow_key(
        &self,
        tenant: Option<String>,
        key: String,
    ) -> impl Future<Output = Result<crate::flow_key::FlowKey, StoreError>> + Send;

    /// `tenant`'s flow keys that have settings, in name order, with their
    /// counts; at most [`crate::flow_key::FLOW_KEYS_LIMIT`].
    fn flow_keys(
        &self,
        tenant: Option<String>,
    ) -> impl Future<Output = Result<Vec<crate::flow_key::FlowKey>, StoreError>> + Send;

    /// Removes the settings of `tenant`'s flow key `key` (its tasks stay,
    /// unlimited), or [`StoreError::NotFound`] when it has none.
    fn delete_flow_key(
        &self,
        tenant: Option<String>,
        key: String,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The server's own key called `name` ([`JWT_KEY`], the key
    /// JWTs are signed with when none is given): the one stored, or else
    /// `candidate`, stored now. Insert-if-absent, never replaced: the first
    /// node to ask decides for every node that shares the store.
    fn server_key(
        &self,
        name: String,
        candidate: String,
    ) -> impl Future<Output = Result<String, StoreError>> + Send;

    /// Creates the topic `at` with `spec`, or replaces the settings of the
    /// one there; answers it and whether it was created.
    fn put_topic(
        &self,
        at: TopicRef,
        spec: TopicSpec,
        now: Timestamp,
    ) -> impl Future<Output = Result<(Topic, bool), StoreError>> + Send;

    /// Every topic of `tenant` (`None`: the admin's), in name order, with
    /// its subscription count.
    fn topics(
        &self,
        tenant: Option<String>,
    ) -> impl Future<Output = Result<Vec<Topic>, StoreError>> + Send;

    /// The topic `at`, or [`StoreError::NotFound`].
    fn topic(&self, at: TopicRef) -> impl Future<Output = Result<Topic, StoreError>> + Send;

    /// Deletes the topic `at` with its events (their tasks stay);
    /// [`StoreError::NotEmpty`] while it has subscriptions,
    /// [`StoreError::NotFound`] when there is none.
    fn delete_topic(&self, at: TopicRef) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Stores a new subscription `id` on the topic `at`, or
    /// [`StoreError::NotFound`] when there is no such topic; a topic at
    /// [`crate::topic::MAX_SUBSCRIPTIONS`] is [`StoreError::NotEmpty`].
    fn create_subscription(
        &self,
        at: TopicRef,
        id: String,
        spec: SubscriptionSpec,
        now: Timestamp,
    ) -> impl Future<Output = Result<Subscription, StoreError>> + Send;

    /// Applies `update` to the subscription `id` of the topic `at`
    /// ([`Subscription::updated`]), or [`StoreError::NotFound`].
    fn update_subscription(
        &self,
        at: TopicRef,
        id: String,
        update: SubscriptionUpdate,
        now: Timestamp,
    ) -> impl Future<Output = Result<Subscription, StoreError>> + Send;

    /// Deletes the subscription `id` of the topic `at` (its tasks stay),
    /// or [`StoreError::NotFound`].
    fn delete_subscription(
        &self,
        at: TopicRef,
        id: String,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Every subscription of the topic `at`, oldest first, or
    /// [`StoreError::NotFound`] when there is no such topic.
    fn subscriptions(
        &self,
        at: TopicRef,
    ) -> impl Future<Output = Result<Vec<Subscription>, StoreError>> + Send;

    /// The signing secrets of every subscription (of every tenant) that has
    /// some, by subscription id: what the worker signs a topic task's call
    /// with ([`crate::outbound::outbound_for`]).
    fn subscription_secrets(
        &self,
    ) -> impl Future<Output = Result<Vec<(String, SigningSecrets)>, StoreError>> + Send;

    /// Records, in one transaction, that a try of a task of the
    /// subscription `id` (any tenant's) ended at `now`, `ok` or not
    /// ([`Subscription::after_try`]). When that disables it, its pending
    /// tasks are canceled with the error [`crate::topic::DISABLED_REASON`]
    /// and the notice to its topic's `callback_url` is submitted
    /// ([`crate::topic::health::disabled_notice`]). Answers what changed;
    /// [`StoreError::NotFound`] for a subscription deleted since.
    fn subscription_try_ended(
        &self,
        id: String,
        ok: bool,
        now: Timestamp,
    ) -> impl Future<Output = Result<crate::topic::health::HealthChange, StoreError>> + Send;

    /// Publishes `event` as `id` in one transaction: one task per
    /// subscription that [`Subscription::takes`] it
    /// ([`NewEvent::task_for`]), and the event with its deliveries. The
    /// same key again answers the stored event (`created == false`) when
    /// [`NewEvent::differing_fields`] is empty, else
    /// [`StoreError::IdempotencyConflict`]. Any task refused (its key taken
    /// by other work, the tenant's `max_pending` reached, the key gone)
    /// refuses the whole event: nothing is written. No such topic:
    /// [`StoreError::NotFound`].
    fn publish(
        &self,
        event: NewEvent,
        id: String,
        now: Timestamp,
    ) -> impl Future<Output = Result<Published, StoreError>> + Send;

    /// The event `id` of the topic `at` with its deliveries, or
    /// [`StoreError::NotFound`].
    fn event(
        &self,
        at: TopicRef,
        id: String,
    ) -> impl Future<Output = Result<Event, StoreError>> + Send;

    /// Replays to the subscription `id` of the topic `at` every event
    /// created at or after `since` that its event types match, oldest
    /// first, at most [`crate::topic::MAX_REPLAY`]: one new task each
    /// ([`Event::replay_task`], its n one more than the event's earlier
    /// replays to it), in one transaction. Answers the new deliveries.
    fn replay(
        &self,
        at: TopicRef,
        id: String,
        since: Timestamp,
        now: Timestamp,
    ) -> impl Future<Output = Result<Vec<Delivery>, StoreError>> + Send;
}

/// Hands the port's every method but `leads_upkeep` (which has a default)
/// to the macro `$then`, one entry a method: `Name => fn name(&self, arg:
/// Type, ...) -> OkType;` with every path whole. A forwarder of the port
/// (tc-testkit's `Hooked`, tc-server's `AnyStore`) is written from this
/// list, so a new port method is one line here, not one method per
/// forwarder.
#[macro_export]
macro_rules! port_methods {
    ($then:ident) => {
        $then! {
        Submit => fn submit(&self, task: $crate::NewTask, now: $crate::Timestamp) -> $crate::store::Submitted;
        SubmitMany => fn submit_many(&self, tasks: ::std::vec::Vec<$crate::NewTask>, now: $crate::Timestamp)
            -> ::std::vec::Vec<::core::result::Result<$crate::store::Submitted, $crate::store::StoreError>>;
        Get => fn get(&self, id: $crate::TaskId) -> $crate::Task;
        List => fn list(&self, query: $crate::store::ListQuery) -> $crate::store::Page;
        CountByState => fn count_by_state(&self) -> $crate::store::StateCounts;
        Claim => fn claim(&self, n: usize, now: $crate::Timestamp, lease: ::core::time::Duration, gate: $crate::destination::ClaimGate) -> $crate::claim::Claim;
        Heartbeat => fn heartbeat(&self, running: ::std::vec::Vec<($crate::TaskId, u32)>, now: $crate::Timestamp, lease: ::core::time::Duration)
            -> ::std::vec::Vec<$crate::store::LeaseLost>;
        Complete => fn complete(&self, id: $crate::TaskId, attempt: u32, outcome: $crate::store::Completion, now: $crate::Timestamp)
            -> $crate::store::Guarded;
        Cancel => fn cancel(&self, id: $crate::TaskId, now: $crate::Timestamp) -> $crate::Task;
        Release => fn release(&self, id: $crate::TaskId, attempt: u32, now: $crate::Timestamp) -> $crate::store::Guarded;
        RecoverExpired => fn recover_expired(&self, now: $crate::Timestamp) -> usize;
        Delete => fn delete(&self, id: $crate::TaskId) -> ();
        Prune => fn prune(&self, state: $crate::State, older_than: ::core::time::Duration, now: $crate::Timestamp, limit: usize)
            -> usize;
        Retry => fn retry(&self, id: $crate::TaskId, run_at: $crate::Timestamp, now: $crate::Timestamp, acting: ::core::option::Option<$crate::tenant::Acting>)
            -> $crate::Task;
        NextDue => fn next_due(&self) -> ::core::option::Option<$crate::Timestamp>;
        Health => fn health(&self) -> ();
        Bulk => fn bulk(&self, request: $crate::store::BulkRequest) -> $crate::store::BulkOutcome;
        DestinationSettings => fn destination_settings(&self) -> ::std::vec::Vec<(::std::string::String, $crate::destination::DestinationSettings)>;
        Destinations => fn destinations(&self) -> ::std::vec::Vec<$crate::destination::Destination>;
        Destination => fn destination(&self, name: ::std::string::String) -> $crate::destination::Destination;
        UpdateDestination => fn update_destination(
            &self, name: ::std::string::String, update: $crate::destination::DestinationUpdate, now: $crate::Timestamp) -> $crate::destination::Destination;
        CreateSchedule => fn create_schedule(&self, spec: $crate::schedule::ScheduleSpec, now: $crate::Timestamp) -> $crate::schedule::Schedule;
        UpdateSchedule => fn update_schedule(
            &self, name: ::std::string::String, change: $crate::schedule::ScheduleChange, now: $crate::Timestamp) -> $crate::schedule::Schedule;
        DeleteSchedule => fn delete_schedule(&self, name: ::std::string::String) -> ();
        Schedules => fn schedules(&self) -> ::std::vec::Vec<$crate::schedule::Schedule>;
        Schedule => fn schedule(&self, name: ::std::string::String) -> $crate::schedule::Schedule;
        RecordFiring => fn record_firing(&self, name: ::std::string::String, at: $crate::Timestamp, task: $crate::TaskId) -> bool;
        RecordFiringError => fn record_firing_error(&self, name: ::std::string::String, error: $crate::schedule::FiringError) -> bool;
        CreateTenant => fn create_tenant(&self, name: ::std::string::String, settings: $crate::tenant::TenantUpdate, now: $crate::Timestamp)
            -> $crate::tenant::Tenant;
        UpdateTenant => fn update_tenant(&self, name: ::std::string::String, update: $crate::tenant::TenantUpdate, now: $crate::Timestamp)
            -> $crate::tenant::Tenant;
        DeleteTenant => fn delete_tenant(&self, name: ::std::string::String) -> ();
        Tenants => fn tenants(&self) -> ::std::vec::Vec<$crate::tenant::TenantDetail>;
        TenantSettings => fn tenant_settings(&self) -> ::std::collections::BTreeMap<::std::string::String, $crate::tenant::TenantSettings>;
        Tenant => fn tenant(&self, name: ::std::string::String) -> $crate::tenant::TenantDetail;
        CreateApiKey => fn create_api_key(
            &self, tenant: ::std::string::String, id: ::std::string::String, hash: $crate::tenant::key::KeyHash, now: $crate::Timestamp) -> $crate::tenant::key::ApiKey;
        RevokeApiKey => fn revoke_api_key(&self, tenant: ::std::string::String, id: ::std::string::String) -> ();
        ApiKey => fn api_key(&self, hash: $crate::tenant::key::KeyHash) -> ::core::option::Option<$crate::tenant::key::KeyOwner>;
        TouchApiKey => fn touch_api_key(&self, id: ::std::string::String, at: $crate::Timestamp) -> ();
        ServerKey => fn server_key(&self, name: ::std::string::String, candidate: ::std::string::String) -> ::std::string::String;
        TakeTokens => fn take_tokens(&self, asks: ::std::vec::Vec<$crate::cluster::TokenAsk>, now: $crate::Timestamp)
            -> ::std::vec::Vec<$crate::cluster::TokenGrant>;
        ShareHolds => fn share_holds(
            &self, learned: ::std::vec::Vec<(::std::string::String, $crate::cluster::DestinationHolds)>, now: $crate::Timestamp)
            -> ::std::vec::Vec<(::std::string::String, $crate::cluster::DestinationHolds)>;
        PutFlowKey => fn put_flow_key(
            &self, tenant: ::core::option::Option<::std::string::String>, key: ::std::string::String,
            update: $crate::flow_key::FlowKeyUpdate, now: $crate::Timestamp) -> $crate::flow_key::FlowKey;
        FlowKey => fn flow_key(&self, tenant: ::core::option::Option<::std::string::String>, key: ::std::string::String)
            -> $crate::flow_key::FlowKey;
        FlowKeys => fn flow_keys(&self, tenant: ::core::option::Option<::std::string::String>)
            -> ::std::vec::Vec<$crate::flow_key::FlowKey>;
        DeleteFlowKey => fn delete_flow_key(&self, tenant: ::core::option::Option<::std::string::String>, key: ::std::string::String)
            -> ();
        PutTopic => fn put_topic(&self, at: $crate::topic::TopicRef, spec: $crate::topic::TopicSpec, now: $crate::Timestamp)
            -> ($crate::topic::Topic, bool);
        Topics => fn topics(&self, tenant: ::core::option::Option<::std::string::String>) -> ::std::vec::Vec<$crate::topic::Topic>;
        Topic => fn topic(&self, at: $crate::topic::TopicRef) -> $crate::topic::Topic;
        DeleteTopic => fn delete_topic(&self, at: $crate::topic::TopicRef) -> ();
        CreateSubscription => fn create_subscription(
            &self, at: $crate::topic::TopicRef, id: ::std::string::String, spec: $crate::topic::SubscriptionSpec, now: $crate::Timestamp)
            -> $crate::topic::Subscription;
        UpdateSubscription => fn update_subscription(
            &self, at: $crate::topic::TopicRef, id: ::std::string::String, update: $crate::topic::SubscriptionUpdate, now: $crate::Timestamp)
            -> $crate::topic::Subscription;
        DeleteSubscription => fn delete_subscription(&self, at: $crate::topic::TopicRef, id: ::std::string::String) -> ();
        Subscriptions => fn subscriptions(&self, at: $crate::topic::TopicRef) -> ::std::vec::Vec<$crate::topic::Subscription>;
        SubscriptionSecrets => fn subscription_secrets(&self)
            -> ::std::vec::Vec<(::std::string::String, $crate::signing::SigningSecrets)>;
        SubscriptionTryEnded => fn subscription_try_ended(&self, id: ::std::string::String, ok: bool, now: $crate::Timestamp)
            -> $crate::topic::health::HealthChange;
        Publish => fn publish(&self, event: $crate::topic::event::NewEvent, id: ::std::string::String, now: $crate::Timestamp)
            -> $crate::topic::event::Published;
        Event => fn event(&self, at: $crate::topic::TopicRef, id: ::std::string::String) -> $crate::topic::event::Event;
        Replay => fn replay(
            &self, at: $crate::topic::TopicRef, id: ::std::string::String, since: $crate::Timestamp, now: $crate::Timestamp)
            -> ::std::vec::Vec<$crate::topic::Delivery>;
        }
    };
}

/// The name of the JWT signing key (a PKCS#8 PEM) in
/// [`TaskStore::server_key`].
pub const JWT_KEY: &str = "jwt_key";
