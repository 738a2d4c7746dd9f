//! The store port: what the worker and the HTTP layer need from durable
//! storage, in parts by resource ([`Tasks`], [`Work`], [`Destinations`],
//! [`Schedules`], [`Tenants`], [`Topics`]; one file each), summed as
//! [`TaskStore`]. Adapters (SQLite, PostgreSQL, tc-testkit's memory store)
//! implement every part and pass the same contract suite. This file holds
//! the values the parts trade in.
//!
//! Every method takes the current time from its caller, so that the worker's
//! clock (paused in tests) is the one truth about "now".

use std::collections::BTreeMap;

use crate::tenant::Acting;
use crate::tenant::quota::RetryQuota;
use crate::{IllegalTransition, State, Task, TaskId, Timestamp};

mod counts;
mod cursor;
mod destinations;
mod flow_keys;
mod methods;
mod schedules;
mod tasks;
mod tenants;
mod topics;
mod work;

pub use counts::StateCounts;
pub use cursor::{BadCursor, Cursor};
pub use destinations::Destinations;
pub use flow_keys::FlowKeys;
pub use schedules::Schedules;
pub use tasks::Tasks;
pub use tenants::Tenants;
pub use topics::Topics;
pub use work::Work;

/// What went wrong in a store operation, in terms a caller can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// No task has that id.
    #[error("task not found")]
    NotFound,
    /// The idempotency key belongs to a task with a different payload;
    /// `fields` names what differs ([`NewTask::differing_fields`](crate::NewTask::differing_fields)).
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

/// The result of [`Tasks::submit`].
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

/// The result of a guarded write ([`Work::complete`], [`Work::release`]).
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
    /// How the error is compared: `error` is NULL for a task without one.
    /// As the walk's index term, `=` seeks it; checked row by row, a NULL
    /// must read as no match (false), not NULL.
    fn error_op(&self) -> &'static str {
        if self.driving() == Driving::Error {
            "="
        } else {
            "IS NOT DISTINCT FROM"
        }
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
            terms.push(FilterTerm {
                op: self.error_op(),
                ..text(Driving::Error, "error", "error", error)
            });
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

/// `task` if `scope` sees it ([`crate::tenant::Scope::sees`]), else
/// [`StoreError::NotFound`]: a store's answer to a read by id, so that
/// another tenant's task is as unknown as one that never was.
pub fn seen_by(scope: &crate::tenant::Scope, task: Task) -> Result<Task, StoreError> {
    if scope.sees(&task) {
        Ok(task)
    } else {
        Err(StoreError::NotFound)
    }
}

impl ListQuery {
    /// This query narrowed to what `scope` sees ([`TaskFilter::within`]):
    /// what every adapter's listing runs.
    pub fn within(mut self, scope: &crate::tenant::Scope) -> ListQuery {
        self.filter = self.filter.within(scope);
        self
    }

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
    /// [`Tasks::retry`] each failed or canceled task, due at once.
    Retry,
    /// [`Tasks::cancel`] each pending or running task.
    Cancel,
    /// [`Tasks::delete`] each finished task.
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

/// A bulk action as the store runs it ([`Tasks::bulk`]).
#[derive(Debug, Clone, PartialEq)]
pub struct BulkRequest {
    /// What to do.
    pub action: BulkAction,
    /// To which tasks, within `scope`.
    pub filter: TaskFilter,
    /// Whose tasks the request may reach: each adapter narrows `filter` to
    /// it ([`TaskFilter::within`]), so a tenant's request covers its own
    /// tasks whatever tenant its filter names.
    pub scope: crate::tenant::Scope,
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
            scope: crate::tenant::Scope::Admin,
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

/// The store port: the sum of its parts, one by resource. Callers name
/// `S: TaskStore`; an adapter implements each part, and the blanket impl
/// makes it a `TaskStore`. A new method goes into its part's trait, one line
/// into [`crate::port_methods`], and one impl per adapter: the forwarders
/// (tc-server's `AnyStore`, tc-testkit's `Hooked`) are written from that
/// list.
pub trait TaskStore: Tasks + Work + Destinations + FlowKeys + Schedules + Tenants + Topics {}

impl<S> TaskStore for S where
    S: Tasks + Work + Destinations + FlowKeys + Schedules + Tenants + Topics
{
}

/// The name of the JWT signing key (a PKCS#8 PEM) in
/// [`Tenants::server_key`].
pub const JWT_KEY: &str = "jwt_key";
