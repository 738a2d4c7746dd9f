//! [`MemoryStore`]: the reference
//! [`TaskStore`](tc_model::store::TaskStore), a mutex and two maps.
//!
//! It is the plainest reading of the port's documentation: no SQL, no
//! threads, no I/O. It passes the store contract like every adapter, the
//! store property test holds SqliteStore against it, and worker and HTTP
//! unit tests use it as their fast store (they need no SQLite). Every
//! operation completes at once, so it is exact on tokio's paused clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tc_model::claim::{Ask, Claim, ClaimSequence, ClaimWalk, Lane};
use tc_model::completion::{CancelEffect, CompletionEffect};
use tc_model::destination::{
    ClaimGate, DESTINATIONS_LIMIT, Destination, DestinationSettings, DestinationUpdate, rotation,
};
use tc_model::flow_key::{KeyRef, KeyRoom, stored_key};
use tc_model::schedule::{Schedule, ScheduleChange, ScheduleSpec};
use tc_model::store::{
    BULK_SAMPLE, BulkAction, BulkOutcome, BulkRequest, Completion, Cursor, Destinations, FlowKeys,
    Guarded, LeaseLost, ListQuery, Page, Schedules, StateCounts, StoreError, Submitted, Tasks,
    Tenants, Topics, Work, results_within,
};
use tc_model::tenant::key::{ApiKey, KeyHash, KeyOwner};
use tc_model::tenant::quota::{Admission, RetryQuota};
use tc_model::tenant::{
    Acting, Scope, Tenant, TenantDetail, TenantSettings, TenantUpdate, stored_tenant,
};
use tc_model::topic::event::{Event, NewEvent, Published};
use tc_model::topic::{
    Delivery, Subscription, SubscriptionSpec, SubscriptionUpdate, Topic, TopicRef, TopicSpec,
};
use tc_model::{AttemptRecord, NewTask, State, Task, TaskId, Timestamp, transit};

mod flow_keys;
mod sub_health;
mod topics;

use tc_model::completion::INTERRUPTED;

/// An in-memory [`TaskStore`](tc_model::store::TaskStore): the model the
/// SQL adapters are checked against.
pub struct MemoryStore {
    state: Mutex<Tables>,
    /// The most result bytes a callback body carries.
    callback_result_bytes: usize,
    /// The test hook [`MemoryStore::set_unavailable`]: while set, every
    /// call fails as a full disk would, so no test wraps the port to fail it.
    unavailable: AtomicBool,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            state: Mutex::default(),
            callback_result_bytes: tc_model::callback::DEFAULT_RESULT_BYTES,
            unavailable: AtomicBool::new(false),
        }
    }
}

#[derive(Default)]
struct Tables {
    /// Every task by its position, the listing order (like SQLite's `seq`).
    tasks: BTreeMap<i64, Task>,
    by_id: HashMap<TaskId, i64>,
    /// Tasks by (stored tenant, idempotency key): a key is unique per
    /// tenant ([`tc_model::tenant::NO_TENANT`] for the admin's tasks).
    by_key: HashMap<(String, String), i64>,
    /// Tenants by name.
    tenants: BTreeMap<String, Tenant>,
    /// API keys, oldest first (in the order they were made).
    keys: Vec<StoredKey>,
    /// Destination settings by name (`host:port`).
    destinations: BTreeMap<String, DestinationSettings>,
    /// Schedules by name.
    schedules: BTreeMap<String, Schedule>,
    /// The server's own keys by name ([`Tenants::server_key`](tc_model::store::Tenants::server_key)).
    server_keys: BTreeMap<String, String>,
    /// Topics, their subscriptions and events.
    topics: topics::Topics,
    /// Flow keys' settings and buckets.
    flow_keys: flow_keys::FlowKeys,
    /// Token buckets and holds: one process, in memory.
    cluster: tc_model::cluster::local::LocalCluster,
    last_seq: i64,
    /// Feeds the ids' random bits: deterministic, so a test's ids repeat.
    rng: u64,
}

/// A stored API key: its public part and what finds it.
#[derive(Clone)]
struct StoredKey {
    tenant: String,
    hash: KeyHash,
    key: ApiKey,
}

/// The `by_key` entry of a task of `tenant` with `key`.
fn key_of(tenant: Option<&str>, key: &str) -> (String, String) {
    (stored_tenant(tenant).to_owned(), key.to_owned())
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// An empty store whose callback bodies carry at most `bytes` of a
    /// result (the server's `--callback-result-bytes`).
    pub fn with_callback_result_bytes(bytes: usize) -> MemoryStore {
        MemoryStore {
            callback_result_bytes: bytes,
            ..MemoryStore::default()
        }
    }

    /// Makes every call of the port fail with [`StoreError::Unavailable`]
    /// (`true`), as a full disk or a held lock looks to a caller, or work
    /// again (`false`).
    pub fn set_unavailable(&self, down: bool) {
        self.unavailable.store(down, Ordering::SeqCst);
    }

    /// The tables, or the failure [`MemoryStore::set_unavailable`] asked for.
    fn tables(&self) -> Result<MutexGuard<'_, Tables>, StoreError> {
        if self.unavailable.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("database or disk is full".into()));
        }
        // A panic while holding the lock leaves the maps consistent: every
        // operation checks before it changes anything.
        Ok(self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Tables {
    fn seq_of(&self, id: TaskId) -> Result<i64, StoreError> {
        self.by_id.get(&id).copied().ok_or(StoreError::NotFound)
    }

    /// The task `id`'s position if `scope` sees it; else as unknown as a
    /// task that never was.
    fn seq_in(&self, id: TaskId, scope: &Scope) -> Result<i64, StoreError> {
        let seq = self.seq_of(id)?;
        if scope.sees(&self.tasks[&seq]) {
            Ok(seq)
        } else {
            Err(StoreError::NotFound)
        }
    }

    fn task_mut(&mut self, seq: i64) -> Result<&mut Task, StoreError> {
        self.tasks
            .get_mut(&seq)
            .ok_or_else(|| StoreError::Unavailable(format!("task at {seq} vanished")))
    }

    /// The running task's position if it is still on `attempt`; otherwise
    /// the `Lost` answer.
    fn guard(&self, id: TaskId, attempt: u32) -> Result<Result<i64, Guarded>, StoreError> {
        let seq = self.seq_of(id)?;
        let task = &self.tasks[&seq];
        if task.state == State::Running && task.attempt == attempt {
            Ok(Ok(seq))
        } else {
            Ok(Err(Guarded::Lost(task.state)))
        }
    }

    /// A destination's settings and task counts.
    fn destination_of(&self, name: &str) -> Destination {
        let (mut pending, mut running) = (0, 0);
        for task in self.tasks.values().filter(|t| t.destination == name) {
            match task.state {
                State::Pending => pending += 1,
                State::Running => running += 1,
                _ => {}
            }
        }
        Destination {
            name: name.to_owned(),
            settings: self.destinations.get(name).cloned().unwrap_or_default(),
            pending,
            running,
        }
    }

    /// Stores `new` as a new task with `id` at the next position.
    fn insert(&mut self, id: TaskId, new: &NewTask, now: Timestamp) -> Task {
        self.last_seq += 1;
        let seq = self.last_seq;
        let task = Task::submitted(id, new, now);
        self.by_id.insert(id, seq);
        self.by_key
            .insert(key_of(task.tenant.as_deref(), &task.idempotency_key), seq);
        self.tasks.insert(seq, task.clone());
        task
    }

    /// What the task at `seq`, just made terminal, does at its end
    /// (tc-model's [`tc_model::callback::on_end`]): the end counted and its
    /// callback, if any, stored with it. A key already taken is the
    /// callback already made: the parent names that task.
    fn ended(&mut self, seq: i64, now: Timestamp, result_bytes: usize) -> Result<(), StoreError> {
        // An id is drawn only for a task that may get a callback, so that
        // the ids of the others stay as they were.
        let callback_id = if self.task_mut(seq)?.callback.is_some() {
            self.next_id(now)
        } else {
            TaskId::from_bytes([0; 16])
        };
        let Some(callback) =
            tc_model::callback::on_end(self.task_mut(seq)?, callback_id, result_bytes)
        else {
            return Ok(());
        };
        let id = match self
            .by_key
            .get(&key_of(callback.tenant(), callback.idempotency_key()))
        {
            Some(taken) => self.tasks[taken].id,
            None => self.insert(callback_id, &callback, now).id,
        };
        self.task_mut(seq)?.callback_task_id = Some(id);
        Ok(())
    }

    /// How many of `tenant`'s tasks are pending or running.
    /// [`StoreError::CredentialGone`] when the write is made with a key
    /// that is revoked (its tenant's delete revokes its keys).
    fn check_acting(&self, acting: Option<&Acting>) -> Result<(), StoreError> {
        match acting {
            Some(acting)
                if !self
                    .keys
                    .iter()
                    .any(|k| k.tenant == acting.tenant && k.key.id == acting.key_id) =>
            {
                Err(StoreError::CredentialGone)
            }
            _ => Ok(()),
        }
    }

    /// Whether `quota` admits one more retry of `task` (its tenant counted
    /// now, as one transaction of an SQL adapter counts).
    fn admit_retry(&self, task: &Task, quota: &mut RetryQuota) -> Admission {
        let tenant = tc_model::tenant::stored_tenant(task.tenant.as_deref());
        quota.new_transaction();
        if !quota.knows(tenant) {
            let limit = self
                .tenants
                .get(tenant)
                .and_then(|t| t.settings.max_pending);
            quota.learn(tenant, limit, self.open_tasks_of(tenant));
        }
        quota.admit(tenant)
    }

    /// Failed or canceled → pending, due at `run_at`, with a fresh budget.
    fn retry_at(
        &mut self,
        seq: i64,
        run_at: Timestamp,
        now: Timestamp,
    ) -> Result<Task, StoreError> {
        let task = self.task_mut(seq)?;
        task.state =
            tc_model::retry_by_hand(task.state).map_err(|e| StoreError::NotRetryable(e.from))?;
        task.attempts_before_retry = task.attempt;
        task.error = None;
        task.http_status = None;
        task.result = None;
        task.result_content_type = None;
        task.finished_at = None;
        task.lease_until = None;
        task.next_run_at = Some(run_at);
        task.updated_at = now;
        Ok(task.clone())
    }

    fn open_tasks_of(&self, tenant: &str) -> u64 {
        self.tasks
            .values()
            .filter(|t| t.tenant.as_deref() == Some(tenant) && !t.state.is_terminal())
            .count() as u64
    }

    /// A tenant with its counts and keys.
    fn detail(&self, tenant: &Tenant) -> TenantDetail {
        let (mut pending, mut running) = (0, 0);
        for task in self
            .tasks
            .values()
            .filter(|t| t.tenant.as_deref() == Some(tenant.name.as_str()))
        {
            match task.state {
                State::Pending => pending += 1,
                State::Running => running += 1,
                _ => {}
            }
        }
        let mut keys: Vec<ApiKey> = self
            .keys
            .iter()
            .filter(|k| k.tenant == tenant.name)
            .map(|k| k.key.clone())
            .collect();
        // Made in order; a stable sort keeps that order among equal times.
        keys.sort_by_key(|k| k.created_at);
        TenantDetail {
            tenant: tenant.clone(),
            pending,
            running,
            keys,
        }
    }

    /// Removes the task at `seq` with its key.
    fn remove(&mut self, seq: i64) {
        if let Some(task) = self.tasks.remove(&seq) {
            self.by_id.remove(&task.id);
            self.by_key
                .remove(&key_of(task.tenant.as_deref(), &task.idempotency_key));
        }
    }

    /// A submit, as the port's [`Tasks::submit`](tc_model::store::Tasks::submit) answers it.
    fn submit_one(&mut self, new: &NewTask, now: Timestamp) -> Result<Submitted, StoreError> {
        self.check_acting(new.acting().as_ref())?;
        if let Some(seq) = self
            .by_key
            .get(&key_of(new.tenant(), new.idempotency_key()))
        {
            let task = &self.tasks[seq];
            let fields = new.differing_fields(task);
            return if fields.is_empty() {
                Ok(Submitted {
                    task: task.clone(),
                    created: false,
                })
            } else {
                Err(StoreError::IdempotencyConflict { fields })
            };
        }
        // The quota after the key: a resubmit of an existing task answers
        // it even when the tenant is full.
        if let (Some(limit), Some(tenant)) = (new.pending_limit(), new.tenant())
            && self.open_tasks_of(tenant) >= limit
        {
            return Err(StoreError::QuotaExceeded { limit });
        }
        let id = self.next_id(now);
        let task = self.insert(id, new, now);
        Ok(Submitted {
            task,
            created: true,
        })
    }

    fn next_id(&mut self, now: Timestamp) -> TaskId {
        // splitmix64: a few lines, no dependency, good enough for test ids.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let mut random = [0; 10];
        random[..8].copy_from_slice(&z.to_le_bytes());
        random[8..].copy_from_slice(&self.last_seq.to_le_bytes()[..2]);
        TaskId::new(now, random)
    }
}

/// Closes the open history row of try `n`.
fn close_attempt(
    task: &mut Task,
    n: u32,
    now: Timestamp,
    http_status: Option<u16>,
    error: Option<&str>,
) {
    if let Some(record) = task
        .attempts
        .iter_mut()
        .find(|a| a.n == n && a.finished_at.is_none())
    {
        record.close(now, http_status, error.map(str::to_owned));
    }
}

impl Tasks for MemoryStore {
    async fn submit(&self, new: NewTask, now: Timestamp) -> Result<Submitted, StoreError> {
        self.tables()?.submit_one(&new, now)
    }

    async fn submit_many(
        &self,
        tasks: Vec<NewTask>,
        now: Timestamp,
    ) -> Result<Vec<Result<Submitted, StoreError>>, StoreError> {
        if let Some(first) = tasks.first() {
            self.tables()?.check_acting(first.acting().as_ref())?;
        }
        let mut results = Vec::with_capacity(tasks.len());
        for task in tasks {
            results.push(self.submit(task, now).await);
        }
        Ok(results)
    }

    async fn get(&self, id: TaskId, scope: Scope) -> Result<Task, StoreError> {
        let t = self.tables()?;
        let seq = t.seq_in(id, &scope)?;
        Ok(t.tasks[&seq].clone())
    }

    async fn list(&self, query: ListQuery, scope: Scope) -> Result<Page, StoreError> {
        let query = query.within(&scope);
        let t = self.tables()?;
        let after = query.after.map_or(0, Cursor::position);
        // The rows the driving index reaches, at most scan_rows of them, as
        // an SQL adapter walks them; the rest of the filter on each.
        let mut scanned = 0usize;
        let mut last_scanned = after;
        let mut matched: Vec<(i64, &Task)> = Vec::new();
        let reached = t
            .tasks
            .range(after.saturating_add(1)..)
            .filter(|(_, task)| query.filter.reaches(task))
            .take(query.scan_rows());
        for (seq, task) in reached {
            scanned += 1;
            last_scanned = *seq;
            if query.filter.matches(task) {
                matched.push((*seq, task));
                if matched.len() > query.limit {
                    break;
                }
            }
        }
        let candidates = &matched[..matched.len().min(query.limit)];
        let lens: Vec<usize> = candidates
            .iter()
            .map(|(_, task)| task.result.as_ref().map_or(0, Vec::len))
            .collect();
        let take = results_within(&lens, query.max_result_bytes);
        let mut tasks = Vec::with_capacity(take);
        let mut last = after;
        for (seq, task) in &matched[..take] {
            // A listing carries no request bodies.
            tasks.push(Task {
                body: Vec::new(),
                ..(*task).clone()
            });
            last = *seq;
        }
        let next = if matched.len() > take {
            Some(Cursor::from_position(last))
        } else {
            (scanned == query.scan_rows()).then(|| Cursor::from_position(last_scanned))
        };
        Ok(Page { tasks, next })
    }

    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        let mut counts = StateCounts::default();
        for task in self.tables()?.tasks.values() {
            counts.set(task.state, counts.get(task.state) + 1);
        }
        Ok(counts)
    }

    async fn cancel(&self, id: TaskId, scope: Scope, now: Timestamp) -> Result<Task, StoreError> {
        let mut t = self.tables()?;
        let seq = t.seq_in(id, &scope)?;
        let task = t.task_mut(seq)?;
        let Some(effect) = CancelEffect::of(task.state, now)? else {
            return Ok(task.clone());
        };
        effect.apply_to(task);
        t.ended(seq, now, self.callback_result_bytes)?;
        Ok(t.task_mut(seq)?.clone())
    }

    async fn prune(
        &self,
        state: State,
        older_than: Duration,
        now: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        if !state.is_terminal() {
            return Ok(0);
        }
        let cutoff = now
            .as_millis()
            .saturating_sub(i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX));
        let mut t = self.tables()?;
        let doomed: Vec<i64> = t
            .tasks
            .iter()
            .filter(|(_, task)| {
                task.state == state && task.finished_at.is_some_and(|f| f.as_millis() < cutoff)
            })
            .map(|(seq, _)| *seq)
            .take(limit)
            .collect();
        for &seq in &doomed {
            t.remove(seq);
        }
        Ok(doomed.len())
    }

    async fn delete(&self, id: TaskId, scope: Scope) -> Result<(), StoreError> {
        let mut t = self.tables()?;
        let seq = t.seq_in(id, &scope)?;
        let state = t.task_mut(seq)?.state;
        if !state.is_terminal() {
            return Err(StoreError::NotTerminal(state));
        }
        t.remove(seq);
        Ok(())
    }

    async fn retry(
        &self,
        id: TaskId,
        run_at: Timestamp,
        now: Timestamp,
        acting: Option<Acting>,
    ) -> Result<Task, StoreError> {
        let mut t = self.tables()?;
        t.check_acting(acting.as_ref())?;
        let seq = t.seq_of(id)?;
        let task = &t.tasks[&seq];
        if acting
            .as_ref()
            .is_some_and(|a| task.tenant.as_deref() != Some(a.tenant.as_str()))
        {
            return Err(StoreError::NotFound);
        }
        tc_model::retry_by_hand(task.state).map_err(|e| StoreError::NotRetryable(e.from))?;
        if let Admission::OverPending(limit) = t.admit_retry(task, &mut RetryQuota::default()) {
            return Err(StoreError::QuotaExceeded { limit });
        }
        t.retry_at(seq, run_at, now)
    }

    async fn bulk(&self, request: BulkRequest) -> Result<BulkOutcome, StoreError> {
        let BulkRequest {
            action,
            filter,
            scope,
            dry_run,
            now,
            acting,
            mut quota,
            allowed_urls,
        } = request;
        let filter = filter.within(&scope);
        // The covered set, fixed now; each operation below takes the lock
        // again, as a later chunk of an SQL adapter would.
        let covered: Vec<(TaskId, State)> = self
            .tables()?
            .tasks
            .values()
            .filter(|task| filter.matches(task))
            .map(|task| (task.id, task.state))
            .collect();
        let mut outcome = BulkOutcome {
            matched: covered.len() as u64,
            sample: covered
                .iter()
                .take(BULK_SAMPLE)
                .map(|(id, _)| *id)
                .collect(),
            ..BulkOutcome::default()
        };
        if dry_run {
            return Ok(outcome);
        }
        for (id, _) in covered {
            // The state now, not when the set was fixed: a worker may have
            // moved the task meanwhile.
            let state = {
                let mut t = self.tables()?;
                t.check_acting(acting.as_ref())?;
                let seq = t.seq_of(id)?;
                t.task_mut(seq)?.state
            };
            if !action.applies_to(state) {
                continue;
            }
            match action {
                BulkAction::Retry => {
                    let mut t = self.tables()?;
                    let seq = t.seq_of(id)?;
                    let task = &t.tasks[&seq];
                    let callback_url = task.callback.as_ref().map(|c| c.url());
                    if tc_model::urls_allowed(&task.url, callback_url, &allowed_urls).is_err() {
                        outcome.refused_url += 1;
                        continue;
                    }
                    if t.admit_retry(task, &mut quota) != Admission::Admitted {
                        continue;
                    }
                    t.retry_at(seq, now, now)?;
                }
                BulkAction::Cancel => {
                    self.cancel(id, Scope::Admin, now).await?;
                    if state == State::Running {
                        outcome.canceled_running.push(id);
                    }
                }
                BulkAction::Delete => self.delete(id, Scope::Admin).await?,
            }
            outcome.applied += 1;
        }
        outcome.refused_quota = quota.refused();
        outcome.retried_by_tenant = quota.retried().clone();
        Ok(outcome)
    }

    async fn health(&self) -> Result<(), StoreError> {
        // Taking the lock is the whole write path here.
        drop(self.tables()?);
        Ok(())
    }
}

impl Work for MemoryStore {
    async fn claim(
        &self,
        n: usize,
        now: Timestamp,
        lease: Duration,
        gate: ClaimGate,
    ) -> Result<Claim, StoreError> {
        let mut t = self.tables()?;
        // Each destination's due tasks in claim order (priority, then the
        // oldest due, tc-model's `claim_key`), by tenant and flow key; the
        // running tasks by destination and by key; the earliest task not
        // due yet.
        let mut due: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
        let mut running: HashMap<&str, u64> = HashMap::new();
        let mut key_running: BTreeMap<KeyRef, usize> = BTreeMap::new();
        let mut resume_after: Option<Timestamp> = None;
        for (seq, task) in &t.tasks {
            match (task.state, task.next_run_at) {
                (State::Pending, Some(at)) if at <= now => {
                    let key = tc_model::priority::claim_key(at, task.priority, gate.aging());
                    due.entry(task.destination.clone())
                        .or_default()
                        .push((key, *seq));
                }
                (State::Pending, Some(at)) => {
                    resume_after = Some(resume_after.map_or(at, |r| r.min(at)));
                }
                (State::Running, _) => {
                    *running.entry(task.destination.as_str()).or_default() += 1;
                    *key_running.entry(key_ref(task)).or_default() += 1;
                }
                _ => {}
            }
        }
        let mut lanes: BTreeMap<String, Lanes> = BTreeMap::new();
        for (dest, tasks) in &mut due {
            tasks.sort_unstable();
            let lane = lanes.entry(dest.clone()).or_default();
            for (_, seq) in tasks.iter() {
                let task = &t.tasks[seq];
                lane.entry(stored_tenant(task.tenant.as_deref()).to_owned())
                    .or_default()
                    .entry(stored_key(task.flow_key.as_deref()).to_owned())
                    .or_default()
                    .push(*seq);
            }
        }
        let names: Vec<String> = due.keys().cloned().collect();
        // The port's walk: only destinations with due tasks, in rotation
        // order, until the walk has enough.
        let mut walk = ClaimWalk::new(n, &gate);
        for name in rotation(&names, gate.after.as_deref()) {
            if walk.is_done() {
                break;
            }
            let busy = running.get(name.as_str()).copied().unwrap_or(0);
            walk.visit(
                name,
                gate.claim_allowance(name, t.destinations.get(name), busy),
            );
        }
        let (candidates, cursor) = walk.finish();
        let mut room = KeyRoom::new(now).holding(&gate.held_keys);
        for (key, busy) in &key_running {
            room.learn(key.clone(), t.flow_keys.state(key, *busy as u64));
        }
        let mut take = Take {
            picked: Vec::new(),
            room,
            key_load: key_running,
        };
        // The share-out is tc-model's; this loop only answers its asks.
        let mut sequence = ClaimSequence::new(n, candidates, &gate);
        while let Some(ask) = sequence.next_ask() {
            match ask {
                Ask::DueTenants { destination } => {
                    let lane = lanes.entry(destination).or_default();
                    let due = lane
                        .iter()
                        .filter(|(_, keys)| keys.values().any(|v| !v.is_empty()))
                        .map(|(tenant, _)| tenant.clone());
                    sequence.due_tenants(due.collect());
                }
                Ask::KeysInPlay {
                    destination,
                    tenant,
                } => {
                    let lane = lanes.entry(destination).or_default();
                    let keyed = lane
                        .iter()
                        .filter(|(t, _)| tenant.as_ref().is_none_or(|want| want == *t))
                        .flat_map(|(_, keys)| keys.iter())
                        .any(|(key, due)| !key.is_empty() && !due.is_empty());
                    sequence.keys_in_play(keyed);
                }
                Ask::Take(asked) => {
                    let lane = lanes.entry(asked.destination.clone()).or_default();
                    let got = match &asked.lane {
                        Lane::Keys(tenant) | Lane::Tenant(tenant) => {
                            take.keyed(&t.flow_keys, lane, tenant, asked.want)
                        }
                        Lane::Any => {
                            let order = due.get(&asked.destination).map_or(&[][..], Vec::as_slice);
                            take.oldest(lane, order, asked.want)
                        }
                    };
                    sequence.took(got);
                }
            }
        }
        t.flow_keys.charge(take.room.buckets(), now);
        let picked = take.picked;
        let mut claimed = Vec::with_capacity(picked.len());
        for seq in picked {
            let task = t.task_mut(seq)?;
            task.state = transit(task.state, State::Running)?;
            task.attempt += 1;
            task.started_at = Some(now);
            task.lease_until = Some(now.saturating_add(lease));
            task.next_run_at = None;
            task.updated_at = now;
            task.attempts.push(AttemptRecord {
                n: task.attempt,
                started_at: now,
                finished_at: None,
                http_status: None,
                error: None,
                duration_ms: None,
            });
            // A claim carries no history (the port's rule).
            claimed.push(Task {
                attempts: Vec::new(),
                ..task.clone()
            });
        }
        Ok(Claim {
            tasks: claimed,
            resume_after,
            cursor,
        })
    }

    async fn heartbeat(
        &self,
        mut running: Vec<(TaskId, u32)>,
        now: Timestamp,
        lease: Duration,
    ) -> Result<Vec<LeaseLost>, StoreError> {
        running.sort_unstable();
        running.dedup();
        let until = now.saturating_add(lease);
        let mut t = self.tables()?;
        let mut lost = Vec::new();
        for (id, attempt) in running {
            let Some(&seq) = t.by_id.get(&id) else {
                lost.push(LeaseLost {
                    id,
                    attempt,
                    state: None,
                });
                continue;
            };
            let task = t.task_mut(seq)?;
            if task.state == State::Running && task.attempt == attempt {
                // Never shortens a lease.
                task.lease_until = Some(task.lease_until.map_or(until, |held| held.max(until)));
            } else {
                lost.push(LeaseLost {
                    id,
                    attempt,
                    state: Some(task.state),
                });
            }
        }
        Ok(lost)
    }

    async fn complete(
        &self,
        id: TaskId,
        attempt: u32,
        outcome: Completion,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        let mut t = self.tables()?;
        let seq = match t.guard(id, attempt)? {
            Ok(seq) => seq,
            Err(lost) => return Ok(lost),
        };
        let task = t.task_mut(seq)?;
        // The guard passed: the task runs with this attempt, and the rule
        // of what the completion does is tc-model's.
        CompletionEffect::of(outcome, now).apply_to(task, attempt);
        let state = task.state;
        if state.is_terminal() {
            t.ended(seq, now, self.callback_result_bytes)?;
        }
        Ok(Guarded::Applied(state))
    }

    async fn release(
        &self,
        id: TaskId,
        attempt: u32,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        let mut t = self.tables()?;
        let seq = match t.guard(id, attempt)? {
            Ok(seq) => seq,
            Err(lost) => return Ok(lost),
        };
        let task = t.task_mut(seq)?;
        task.state = transit(task.state, State::Pending)?;
        // The history keeps the interrupted try; the next claim reuses its n.
        task.attempt -= 1;
        task.next_run_at = Some(now);
        task.lease_until = None;
        task.error = Some(INTERRUPTED.to_owned());
        task.updated_at = now;
        close_attempt(task, attempt, now, None, Some(INTERRUPTED));
        Ok(Guarded::Applied(task.state))
    }

    async fn recover_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        let mut t = self.tables()?;
        let expired: Vec<i64> = t
            .tasks
            .iter()
            .filter(|(_, task)| {
                task.state == State::Running && task.lease_until.is_some_and(|l| l < now)
            })
            .map(|(seq, _)| *seq)
            .collect();
        for &seq in &expired {
            let task = t.task_mut(seq)?;
            if task.can_retry() {
                task.state = transit(task.state, State::Pending)?;
                task.next_run_at = Some(now);
                task.finished_at = None;
            } else {
                task.state = transit(task.state, State::Failed)?;
                task.next_run_at = None;
                task.finished_at = Some(now);
            }
            task.lease_until = None;
            task.error = Some(INTERRUPTED.to_owned());
            task.updated_at = now;
            let attempt = task.attempt;
            close_attempt(task, attempt, now, None, Some(INTERRUPTED));
            if task.state.is_terminal() {
                t.ended(seq, now, self.callback_result_bytes)?;
            }
        }
        Ok(expired.len())
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        Ok(self
            .tables()?
            .tasks
            .values()
            .filter(|task| task.state == State::Pending)
            .filter_map(|task| task.next_run_at)
            .min())
    }

    async fn take_tokens(
        &self,
        asks: Vec<tc_model::cluster::TokenAsk>,
        now: Timestamp,
    ) -> Result<Vec<tc_model::cluster::TokenGrant>, StoreError> {
        Ok(self.tables()?.cluster.take_tokens(&asks, now))
    }

    async fn share_holds(
        &self,
        learned: Vec<(String, tc_model::cluster::DestinationHolds)>,
        now: Timestamp,
    ) -> Result<Vec<(String, tc_model::cluster::DestinationHolds)>, StoreError> {
        Ok(self.tables()?.cluster.share_holds(learned, now))
    }
}

impl Destinations for MemoryStore {
    async fn destination_settings(&self) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
        let t = self.tables()?;
        Ok(t.destinations
            .iter()
            .map(|(name, settings)| (name.clone(), settings.clone()))
            .collect())
    }

    async fn destinations(&self) -> Result<Vec<Destination>, StoreError> {
        let t = self.tables()?;
        let mut names: Vec<&str> = t
            .tasks
            .values()
            .map(|task| task.destination.as_str())
            .collect();
        names.extend(t.destinations.keys().map(String::as_str));
        names.sort_unstable();
        names.dedup();
        names.truncate(DESTINATIONS_LIMIT);
        Ok(names
            .into_iter()
            .map(|name| t.destination_of(name))
            .collect())
    }

    async fn destination(&self, name: String) -> Result<Destination, StoreError> {
        let t = self.tables()?;
        let known = t.destinations.contains_key(&name)
            || t.tasks.values().any(|task| task.destination == name);
        if !known {
            return Err(StoreError::NotFound);
        }
        Ok(t.destination_of(&name))
    }

    async fn update_destination(
        &self,
        name: String,
        update: DestinationUpdate,
        _now: Timestamp,
    ) -> Result<Destination, StoreError> {
        let mut t = self.tables()?;
        let settings = update.apply(&t.destinations.get(&name).cloned().unwrap_or_default());
        // A destination keeps its settings row once it has one, defaults or
        // not: it was named by an operator, so it is listed.
        t.destinations.insert(name.clone(), settings);
        Ok(t.destination_of(&name))
    }
}

impl Schedules for MemoryStore {
    async fn create_schedule(
        &self,
        spec: ScheduleSpec,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        let mut t = self.tables()?;
        if t.schedules.contains_key(&spec.name) {
            return Err(StoreError::Exists);
        }
        let schedule = Schedule::new(spec, now);
        t.schedules
            .insert(schedule.spec.name.clone(), schedule.clone());
        Ok(schedule)
    }

    async fn update_schedule(
        &self,
        name: String,
        change: ScheduleChange,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        let mut t = self.tables()?;
        let old = t.schedules.remove(&name).ok_or(StoreError::NotFound)?;
        let new = old.changed(change, now);
        t.schedules.insert(name, new.clone());
        Ok(new)
    }

    async fn delete_schedule(&self, name: String) -> Result<(), StoreError> {
        let mut t = self.tables()?;
        t.schedules
            .remove(&name)
            .map(drop)
            .ok_or(StoreError::NotFound)
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        let t = self.tables()?;
        Ok(t.schedules.values().cloned().collect())
    }

    async fn schedule(&self, name: String) -> Result<Schedule, StoreError> {
        let t = self.tables()?;
        t.schedules.get(&name).cloned().ok_or(StoreError::NotFound)
    }

    async fn record_firing(
        &self,
        name: String,
        at: Timestamp,
        task: TaskId,
    ) -> Result<bool, StoreError> {
        let mut t = self.tables()?;
        match t.schedules.get_mut(&name) {
            Some(s) if s.last_run_at.is_none_or(|last| last < at) => {
                s.last_run_at = Some(at);
                s.last_task_id = Some(task);
                if s.last_error.as_ref().is_some_and(|e| e.at <= at) {
                    s.last_error = None;
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn record_firing_error(
        &self,
        name: String,
        error: tc_model::schedule::FiringError,
    ) -> Result<bool, StoreError> {
        let mut t = self.tables()?;
        match t.schedules.get_mut(&name) {
            Some(s)
                if s.last_run_at.is_none_or(|last| last < error.at)
                    && s.last_error.as_ref().is_none_or(|e| e.at <= error.at) =>
            {
                s.last_error = Some(error);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

impl Tenants for MemoryStore {
    async fn create_tenant(
        &self,
        name: String,
        settings: TenantUpdate,
        now: Timestamp,
    ) -> Result<Tenant, StoreError> {
        let mut t = self.tables()?;
        if t.tenants.contains_key(&name) {
            return Err(StoreError::Exists);
        }
        let tenant = Tenant {
            name: name.clone(),
            settings: settings.apply(&TenantSettings::default()),
            created_at: now,
            updated_at: now,
        };
        t.tenants.insert(name, tenant.clone());
        Ok(tenant)
    }

    async fn update_tenant(
        &self,
        name: String,
        update: TenantUpdate,
        now: Timestamp,
    ) -> Result<Tenant, StoreError> {
        let mut t = self.tables()?;
        let tenant = t.tenants.get_mut(&name).ok_or(StoreError::NotFound)?;
        tenant.settings = update.apply(&tenant.settings);
        tenant.updated_at = now;
        Ok(tenant.clone())
    }

    async fn delete_tenant(&self, name: String) -> Result<(), StoreError> {
        let mut t = self.tables()?;
        if !t.tenants.contains_key(&name) {
            return Err(StoreError::NotFound);
        }
        if t.tasks
            .values()
            .any(|task| task.tenant.as_deref() == Some(name.as_str()))
        {
            return Err(StoreError::NotEmpty);
        }
        t.tenants.remove(&name);
        t.keys.retain(|k| k.tenant != name);
        Ok(())
    }

    async fn tenants(&self) -> Result<Vec<TenantDetail>, StoreError> {
        let t = self.tables()?;
        Ok(t.tenants.values().map(|tenant| t.detail(tenant)).collect())
    }

    async fn tenant_settings(&self) -> Result<BTreeMap<String, TenantSettings>, StoreError> {
        let t = self.tables()?;
        Ok(t.tenants
            .values()
            .map(|tenant| (tenant.name.clone(), tenant.settings.clone()))
            .collect())
    }

    async fn tenant(&self, name: String) -> Result<TenantDetail, StoreError> {
        let t = self.tables()?;
        let tenant = t.tenants.get(&name).ok_or(StoreError::NotFound)?;
        Ok(t.detail(tenant))
    }

    async fn create_api_key(
        &self,
        tenant: String,
        id: String,
        hash: KeyHash,
        now: Timestamp,
    ) -> Result<ApiKey, StoreError> {
        let mut t = self.tables()?;
        if !t.tenants.contains_key(&tenant) {
            return Err(StoreError::NotFound);
        }
        if t.keys.iter().any(|k| k.key.id == id || k.hash == hash) {
            // Ids and hashes are random; a repeat is the caller's bug, and
            // a SQL adapter's unique index would refuse it too.
            return Err(StoreError::Exists);
        }
        let key = ApiKey {
            id,
            created_at: now,
            last_used_at: None,
        };
        t.keys.push(StoredKey {
            tenant,
            hash,
            key: key.clone(),
        });
        Ok(key)
    }

    async fn revoke_api_key(&self, tenant: String, id: String) -> Result<(), StoreError> {
        let mut t = self.tables()?;
        let at = t
            .keys
            .iter()
            .position(|k| k.tenant == tenant && k.key.id == id)
            .ok_or(StoreError::NotFound)?;
        t.keys.remove(at);
        Ok(())
    }

    async fn api_key(&self, hash: KeyHash) -> Result<Option<KeyOwner>, StoreError> {
        let t = self.tables()?;
        let Some(key) = t.keys.iter().find(|k| k.hash == hash) else {
            return Ok(None);
        };
        let tenant =
            t.tenants.get(&key.tenant).cloned().ok_or_else(|| {
                StoreError::Unavailable(format!("key {} has no tenant", key.key.id))
            })?;
        Ok(Some(KeyOwner {
            key_id: key.key.id.clone(),
            hash: key.hash,
            tenant,
        }))
    }

    async fn touch_api_key(&self, id: String, at: Timestamp) -> Result<(), StoreError> {
        let mut t = self.tables()?;
        if let Some(key) = t.keys.iter_mut().find(|k| k.key.id == id) {
            key.key.last_used_at = Some(key.key.last_used_at.map_or(at, |last| last.max(at)));
        }
        Ok(())
    }

    async fn server_key(&self, name: String, candidate: String) -> Result<String, StoreError> {
        Ok(self
            .tables()?
            .server_keys
            .entry(name)
            .or_insert(candidate)
            .clone())
    }
}

impl FlowKeys for MemoryStore {
    async fn put_flow_key(
        &self,
        tenant: Option<String>,
        key: String,
        update: tc_model::flow_key::FlowKeyUpdate,
        _now: Timestamp,
    ) -> Result<tc_model::flow_key::FlowKey, StoreError> {
        let t = &mut *self.tables()?;
        let at = KeyRef::new(tenant.as_deref(), &key);
        Ok(t.flow_keys.put(at, update, t.tasks.values()))
    }

    async fn flow_key(
        &self,
        tenant: Option<String>,
        key: String,
    ) -> Result<tc_model::flow_key::FlowKey, StoreError> {
        let t = self.tables()?;
        t.flow_keys
            .get(&KeyRef::new(tenant.as_deref(), &key), t.tasks.values())
    }

    async fn flow_keys(
        &self,
        tenant: Option<String>,
    ) -> Result<Vec<tc_model::flow_key::FlowKey>, StoreError> {
        let t = self.tables()?;
        Ok(t.flow_keys
            .list(stored_tenant(tenant.as_deref()), t.tasks.values()))
    }

    async fn delete_flow_key(&self, tenant: Option<String>, key: String) -> Result<(), StoreError> {
        self.tables()?
            .flow_keys
            .delete(&KeyRef::new(tenant.as_deref(), &key))
    }
}

impl Topics for MemoryStore {
    async fn put_topic(
        &self,
        at: TopicRef,
        spec: TopicSpec,
        now: Timestamp,
    ) -> Result<(Topic, bool), StoreError> {
        Ok(self.tables()?.put_topic(at, spec, now))
    }

    async fn topics(&self, tenant: Option<String>) -> Result<Vec<Topic>, StoreError> {
        Ok(self.tables()?.topics_of(tenant.as_deref()))
    }

    async fn topic(&self, at: TopicRef) -> Result<Topic, StoreError> {
        self.tables()?.topic(&at)
    }

    async fn delete_topic(&self, at: TopicRef) -> Result<(), StoreError> {
        self.tables()?.delete_topic(&at)
    }

    async fn create_subscription(
        &self,
        at: TopicRef,
        id: String,
        spec: SubscriptionSpec,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        self.tables()?.create_subscription(at, id, spec, now)
    }

    async fn update_subscription(
        &self,
        at: TopicRef,
        id: String,
        update: SubscriptionUpdate,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        self.tables()?.update_subscription(&at, &id, update, now)
    }

    async fn delete_subscription(&self, at: TopicRef, id: String) -> Result<(), StoreError> {
        self.tables()?.delete_subscription(&at, &id)
    }

    async fn subscriptions(&self, at: TopicRef) -> Result<Vec<Subscription>, StoreError> {
        self.tables()?.subscriptions(&at)
    }

    async fn subscription_secrets(
        &self,
    ) -> Result<Vec<(String, tc_model::signing::SigningSecrets)>, StoreError> {
        Ok(self.tables()?.subscription_secrets())
    }

    async fn subscription_try_ended(
        &self,
        id: String,
        ok: bool,
        now: Timestamp,
    ) -> Result<tc_model::topic::health::HealthChange, StoreError> {
        let bytes = self.callback_result_bytes;
        self.tables()?.subscription_try_ended(&id, ok, now, bytes)
    }

    async fn publish(
        &self,
        event: NewEvent,
        id: String,
        now: Timestamp,
    ) -> Result<Published, StoreError> {
        self.tables()?.publish(event, id, now)
    }

    async fn event(&self, at: TopicRef, id: String) -> Result<Event, StoreError> {
        self.tables()?.event(&at, &id)
    }

    async fn replay(
        &self,
        at: TopicRef,
        id: String,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.tables()?.replay(&at, &id, since, now)
    }
}

/// One destination's due tasks by stored tenant, then stored flow key, each
/// list in claim order.
type Lanes = BTreeMap<String, BTreeMap<String, Vec<i64>>>;

/// A task's key as the claim counts it.
fn key_ref(task: &Task) -> KeyRef {
    KeyRef::new(task.tenant.as_deref(), stored_key(task.flow_key.as_deref()))
}

/// What a claim has picked and the loads its shares read.
struct Take {
    picked: Vec<i64>,
    room: KeyRoom,
    /// Running tasks by key (every node's), with this claim's takes.
    key_load: BTreeMap<KeyRef, usize>,
}

impl Take {
    /// Up to `want` of `tenant`'s due tasks in `lane` shared between its
    /// keys ([`KeyRoom::plan`]); answers how many were picked.
    fn keyed(
        &mut self,
        keys: &flow_keys::FlowKeys,
        lane: &mut Lanes,
        tenant: &str,
        want: usize,
    ) -> usize {
        let Some(by_key) = lane.get_mut(tenant) else {
            return 0;
        };
        let due: Vec<String> = by_key
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        let mut load = BTreeMap::new();
        for key in &due {
            let at = KeyRef::new(Some(tenant).filter(|t| !t.is_empty()), key);
            if !self.room.knows(&at) {
                self.room.learn(at.clone(), keys.state(&at, 0));
            }
            load.insert(key.clone(), self.key_load.get(&at).copied().unwrap_or(0));
        }
        let mut share = self.room.plan(want, tenant, due, &load);
        let mut total = 0;
        while let Some((key, wanted)) = share.next_take() {
            let tasks = by_key.entry(key.clone()).or_default();
            let n = wanted.min(tasks.len());
            self.picked.extend(tasks.drain(..n));
            share.taken(n);
            total += n;
            let at = KeyRef::new(Some(tenant).filter(|t| !t.is_empty()), &key);
            self.room.taken(&at, n);
            *self.key_load.entry(at).or_default() += n;
        }
        total
    }

    /// Up to `want` of a destination's due tasks of any tenant, in claim
    /// `order` (its due tasks' claim keys and seqs, sorted): picks those
    /// still in `lane`.
    fn oldest(&mut self, lane: &mut Lanes, order: &[(i64, i64)], want: usize) -> usize {
        let mut got = 0;
        for &(_, seq) in order {
            if got == want {
                break;
            }
            for due in lane.values_mut().flat_map(|keys| keys.values_mut()) {
                if let Some(at) = due.iter().position(|s| *s == seq) {
                    due.remove(at);
                    self.picked.push(seq);
                    got += 1;
                }
            }
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store_contract::{failures, run_all};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_memory_store_passes_the_store_contract() {
        let reports = run_all(|| async { MemoryStore::new() }).await;
        assert!(reports.len() >= 20, "the suite lost scenarios");
        assert_eq!(failures(&reports), None);
    }
}
