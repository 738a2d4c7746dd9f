//! [`PgStore`]: the pool, the listener and the [`TaskStore`] methods, each
//! handing its work to the operation modules.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::Pool;
use tc_model::claim::Claim;
use tc_model::destination::{ClaimGate, Destination, DestinationSettings, DestinationUpdate};
use tc_model::schedule::{Schedule, ScheduleChange, ScheduleSpec};
use tc_model::signing::SigningSecrets;
use tc_model::store::{
    BULK_CHUNK, BULK_SAMPLE, BulkAction, BulkOutcome, BulkRequest, Completion, Guarded, LeaseLost,
    ListQuery, Page, StateCounts, StoreError, Submitted, TaskStore,
};
use tc_model::tenant::key::{ApiKey, KeyHash, KeyOwner};
use tc_model::tenant::{Acting, Tenant, TenantDetail, TenantSettings, TenantUpdate};
use tc_model::topic::event::{Event, NewEvent, Published};
use tc_model::topic::health::HealthChange;
use tc_model::topic::{
    Delivery, Subscription, SubscriptionSpec, SubscriptionUpdate, Topic, TopicRef, TopicSpec,
};
use tc_model::{NewTask, Task, TaskId, Timestamp};
use tokio::sync::{Notify, broadcast, watch};

use crate::batcher::{Batcher, Shape};
use crate::completions::{self, Asked};
use crate::config::{PgClock, PgConfig};
use crate::error::{OpenError, db, pool};
use crate::group_submit::{SUBMITS, Submitter};
use crate::notify::{self, Channels, PgEvent};
use crate::open::Connected;
use crate::pace::{self, Pace};
use crate::{analyze, counts, destinations, leader};
use crate::{events, read_ops, schedules, tenants, topics, write_ops};

/// The longest a listing waits for older inserts of tasks to end before it
/// answers a page that stops short (see `read_ops::list`).
const LIST_HOLD: Duration = Duration::from_secs(2);

/// Completions in flight at once, and the most in one statement.
const COMPLETIONS: Shape = Shape {
    flushers: 4,
    max_batch: 256,
};

/// The PostgreSQL adapter behind [`TaskStore`].
///
/// A pool of connections for the operations, one more connection that
/// listens for other nodes' notifications ([`PgStore::subscribe`]). Needs a
/// tokio runtime. Dropping it stops its background tasks; connections close
/// as they are released.
pub struct PgStore {
    pool: Pool,
    clock: PgClock,
    channels: Channels,
    events: broadcast::Sender<PgEvent>,
    submitted: Arc<Notify>,
    /// Set by every write that changes states: the fold of the count deltas
    /// runs only after some (see `counts`).
    states_changed: Arc<AtomicBool>,
    /// Completions, grouped into one statement while others are in flight.
    completer: Batcher<Asked, Guarded>,
    /// Single submits, grouped into one insert while others are in flight.
    submitter: Batcher<(NewTask, Timestamp), Submitted>,
    // Dropping it (with the store) ends the listener, the announcer and the
    // count fold.
    _stop: watch::Sender<bool>,
    target: String,
    /// `PgConfig::callback_result_bytes`, for the writes that end tasks.
    callback_bytes: usize,
    /// Seals the secret columns on their way in and opens them on their
    /// way out ([`PgStore::seal_with`]); none until then.
    sealer: tc_seal::Sealer,
    /// Whether this node leads upkeep now (leader.rs).
    leading: watch::Receiver<bool>,
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://` or `postgresql://`),
    /// migrating its schema under an advisory lock. A schema holding another
    /// application's tables, or written by a newer build, is refused and
    /// left untouched.
    pub async fn open(url: &str, config: PgConfig) -> Result<PgStore, OpenError> {
        let Connected {
            pg,
            tls,
            target,
            pool,
            schema,
        } = crate::open::connect(url, &config).await?;

        let channels = Channels::for_schema(&schema);
        let (events, _) = broadcast::channel(1024);
        let (stop, stopped) = watch::channel(false);
        let submitted = Arc::new(Notify::new());
        let leading = leader::start(
            pg.clone(),
            tls.clone(),
            config.leader_check,
            stopped.clone(),
        )
        .await;
        tokio::spawn(notify::listen(
            pg,
            tls,
            channels.clone(),
            events.clone(),
            stopped.clone(),
            config.listen_retry,
        ));
        tokio::spawn(notify::announce_submits(
            pool.clone(),
            channels.clone(),
            Arc::clone(&submitted),
            stopped.clone(),
        ));
        let states_changed = Arc::new(AtomicBool::new(false));
        let pace = spawn_upkeep(&pool, &states_changed, &leading, stopped);
        let completer = {
            let (pool, states_changed) = (pool.clone(), Arc::clone(&states_changed));
            let callback_bytes = config.callback_result_bytes;
            Batcher::start(COMPLETIONS, pace.clone(), move |asked| {
                completions::flush(
                    pool.clone(),
                    Arc::clone(&states_changed),
                    asked,
                    callback_bytes,
                )
            })
        };
        let submitter = {
            let submitter = Submitter {
                pool: pool.clone(),
                clock: config.clock,
                states_changed: Arc::clone(&states_changed),
                submitted: Arc::clone(&submitted),
            };
            Batcher::start(SUBMITS, pace, move |asked| submitter.clone().flush(asked))
        };
        Ok(PgStore {
            pool,
            submitter,
            clock: config.clock,
            channels,
            events,
            submitted,
            states_changed,
            completer,
            _stop: stop,
            target,
            callback_bytes: config.callback_result_bytes,
            sealer: tc_seal::Sealer::none(),
            leading,
        })
    }

    /// From now on seals every secret written with `sealer`'s first key and
    /// opens what is read with any of its keys; first, in one transaction
    /// (rows locked, so nodes starting together take turns), seals again each
    /// stored secret that is plain or under an older key. A secret none of
    /// the keys opens is refused, naming its destination or tenant (the node
    /// must not start), and nothing changes. Every node needs the same keys.
    pub async fn seal_with(
        &mut self,
        sealer: tc_seal::Sealer,
    ) -> Result<crate::SealReport, StoreError> {
        let report = self
            .write(async |tx| crate::secrets::seal_stored(tx, &sealer).await)
            .await?;
        self.sealer = sealer;
        Ok(report)
    }

    /// Runs the leader's `ANALYZE` look once, now (tests; the leader runs
    /// it every few seconds): the hot tables it analyzed.
    #[cfg(feature = "testing")]
    pub async fn analyze_stale_tables(&self) -> Result<Vec<String>, StoreError> {
        analyze::analyze_stale(&self.client().await?).await
    }

    /// Whether this node leads upkeep now, as it changes: for tests that
    /// wait for a hand-over.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// What other nodes (and this one) announce: submits to claim, running
    /// tasks canceled. A receiver that lags has missed some; it should treat
    /// that as a [`PgEvent::Wake`] and rely on the heartbeat for cancels.
    pub fn subscribe(&self) -> broadcast::Receiver<PgEvent> {
        self.events.subscribe()
    }

    /// The database, as logs name it (without a password).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Closes the pool's connections; operations after this fail as
    /// unavailable.
    pub fn close(&self) {
        self.pool.close();
    }

    /// The `$1` of a statement: the caller's time in caller mode, NULL (the
    /// database's clock) otherwise.
    fn stamp(&self, now: Timestamp) -> Option<i64> {
        match self.clock {
            PgClock::Caller => Some(now.as_millis()),
            PgClock::Database => None,
        }
    }

    /// Notes that states changed, for the next fold of the counts.
    fn states_changed(&self) {
        self.states_changed.store(true, Ordering::Relaxed);
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool)
    }

    /// Runs `body` in one read-write transaction on a pooled connection and
    /// commits it: what every write of the port shares (begin, the
    /// statements, commit, the error mapping), written once.
    async fn write<T>(
        &self,
        body: impl AsyncFnOnce(&deadpool_postgres::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let out = body(&tx).await?;
        tx.commit().await.map_err(db)?;
        Ok(out)
    }

    /// Runs `body` in one read-only snapshot and ends it: every read of
    /// one answer sees one moment.
    async fn read<T>(
        &self,
        body: impl AsyncFnOnce(&deadpool_postgres::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.client().await?;
        let tx = read_snapshot(&mut client).await?;
        let out = body(&tx).await?;
        tx.commit().await.map_err(db)?;
        Ok(out)
    }
}

impl TaskStore for PgStore {
    fn leads_upkeep(&self) -> bool {
        *self.leading.borrow()
    }

    async fn submit(&self, task: NewTask, now: Timestamp) -> Result<Submitted, StoreError> {
        self.submitter.call((task, now)).await
    }

    async fn submit_many(
        &self,
        tasks: Vec<NewTask>,
        now: Timestamp,
    ) -> Result<Vec<Result<Submitted, StoreError>>, StoreError> {
        let stamp = self.stamp(now);
        // One chunk is one statement, atomic by itself; more are one
        // transaction, and so is a batch with a pending limit (its quota
        // locks hold until the transaction ends).
        let inserted = if tasks.len() <= write_ops::BATCH_CHUNK && !write_ops::takes_quota(&tasks) {
            write_ops::submit_batch(&self.client().await?, &tasks, now, stamp).await?
        } else {
            self.write(async |tx| write_ops::submit_batch(tx, &tasks, now, stamp).await)
                .await?
        };
        let (results, created) = write_ops::answers(&tasks, inserted);
        if created {
            self.states_changed();
            self.submitted.notify_one();
        }
        // A batch is one caller's, made with one key: gone, it refused every
        // item, and the batch answers as a whole, as on every adapter.
        if results
            .iter()
            .any(|r| matches!(r, Err(StoreError::CredentialGone)))
        {
            return Err(StoreError::CredentialGone);
        }
        Ok(results)
    }

    async fn get(&self, id: TaskId) -> Result<Task, StoreError> {
        self.read(async |tx| read_ops::get(tx, &id).await).await
    }

    async fn list(&self, query: ListQuery) -> Result<Page, StoreError> {
        let mut pause = Duration::from_millis(1);
        let mut waited = Duration::ZERO;
        loop {
            let (page, held_back) = self
                .read(async |tx| read_ops::list(tx, &query).await)
                .await?;
            // Rows held back wait for older transactions inserting tasks in
            // this schema to end: usually milliseconds. Past LIST_HOLD the
            // page is answered as it is; its cursor continues exactly where
            // it stopped.
            if !held_back || waited >= LIST_HOLD {
                return Ok(page);
            }
            tokio::time::sleep(pause).await;
            waited += pause;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        counts::count_by_state(&self.client().await?).await
    }

    async fn claim(
        &self,
        n: usize,
        now: Timestamp,
        lease: Duration,
        gate: ClaimGate,
    ) -> Result<Claim, StoreError> {
        if n == 0 {
            return Ok(Claim::default());
        }
        let stamp = self.stamp(now);
        let claimed = self
            .write(async |tx| write_ops::claim(tx, n, stamp, lease, &gate).await)
            .await?;
        if !claimed.tasks.is_empty() {
            self.states_changed();
        }
        let (due, store_now) = claimed.resume_after;
        Ok(Claim {
            tasks: claimed.tasks,
            cursor: claimed.cursor,
            resume_after: due.map(|due| match self.clock {
                PgClock::Caller => Timestamp::from_millis(due),
                // The caller's clock may not be the database's: hand the
                // due time over as "this long after the caller's now".
                PgClock::Database => Timestamp::from_millis(
                    now.as_millis()
                        .saturating_add(due.saturating_sub(store_now)),
                ),
            }),
        })
    }

    async fn heartbeat(
        &self,
        running: Vec<(TaskId, u32)>,
        now: Timestamp,
        lease: Duration,
    ) -> Result<Vec<LeaseLost>, StoreError> {
        if running.is_empty() {
            return Ok(Vec::new());
        }
        write_ops::heartbeat(&self.client().await?, &running, self.stamp(now), lease).await
    }

    async fn complete(
        &self,
        id: TaskId,
        attempt: u32,
        outcome: Completion,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        self.completer
            .call(Asked {
                id,
                attempt,
                outcome,
                now_ms: now.as_millis(),
                now: self.stamp(now),
            })
            .await
    }

    async fn cancel(&self, id: TaskId, now: Timestamp) -> Result<Task, StoreError> {
        let stamp = (now, self.stamp(now));
        let canceled = self
            .write(async |tx| {
                write_ops::cancel(tx, &id, stamp, &self.channels.cancel, self.callback_bytes).await
            })
            .await?;
        self.states_changed();
        if canceled.was_running {
            tracing::debug!(task_id = %id, "store_cancel_announced");
        }
        Ok(canceled.task)
    }

    async fn release(
        &self,
        id: TaskId,
        attempt: u32,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        let stamp = self.stamp(now);
        let released = self
            .write(async |tx| write_ops::release(tx, &id, attempt, stamp).await)
            .await?;
        self.states_changed();
        Ok(released)
    }

    async fn prune(
        &self,
        state: tc_model::State,
        older_than: Duration,
        now: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let older_than_ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let stamp = self.stamp(now);
        let deleted = self
            .write(async |tx| write_ops::prune(tx, state, older_than_ms, stamp, limit).await)
            .await?;
        if deleted > 0 {
            self.states_changed();
        }
        Ok(deleted)
    }

    async fn delete(&self, id: TaskId) -> Result<(), StoreError> {
        self.write(async |tx| write_ops::delete(tx, &id).await)
            .await?;
        self.states_changed();
        Ok(())
    }

    async fn retry(
        &self,
        id: TaskId,
        run_at: Timestamp,
        now: Timestamp,
        acting: Option<Acting>,
    ) -> Result<Task, StoreError> {
        let delay = run_at.as_millis().saturating_sub(now.as_millis());
        let stamp = self.stamp(now);
        let task = self
            .write(async |tx| write_ops::retry(tx, &id, delay, stamp, acting.as_ref()).await)
            .await?;
        self.states_changed();
        // Pending again: idle workers on every node may claim it.
        self.submitted.notify_one();
        Ok(task)
    }

    async fn bulk(&self, request: BulkRequest) -> Result<BulkOutcome, StoreError> {
        let BulkRequest {
            action,
            filter,
            dry_run,
            now,
            acting,
            mut quota,
            allowed_urls,
        } = request;
        if dry_run {
            let sample = i64::try_from(BULK_SAMPLE).unwrap_or(i64::MAX);
            let (matched, sample) = self
                .read(async |tx| read_ops::bulk_count(tx, &filter, sample).await)
                .await?;
            return Ok(BulkOutcome {
                matched,
                sample,
                ..BulkOutcome::default()
            });
        }
        let snapshot = write_ops::bulk_snapshot(&self.client().await?).await?;
        let chunk = i64::try_from(BULK_CHUNK).unwrap_or(i64::MAX);
        let mut outcome = BulkOutcome::default();
        let mut after = 0;
        loop {
            let stamp = (now, self.stamp(now));
            quota.new_transaction();
            let (covered, applied) = self
                .write(async |tx| {
                    if let Some(acting) = &acting {
                        write_ops::check_acting(tx, acting).await?;
                    }
                    let covered =
                        write_ops::bulk_covered(tx, &filter, &snapshot, after, chunk).await?;
                    let positions: Vec<i64> = covered.iter().map(|&(pos, _)| pos).collect();
                    let applied = write_ops::bulk_apply(
                        tx,
                        action,
                        &positions,
                        stamp,
                        &self.channels.cancel,
                        self.callback_bytes,
                        &mut write_ops::RetryAdmit {
                            quota: &mut quota,
                            allowed_urls: &allowed_urls,
                        },
                    )
                    .await?;
                    Ok((covered, applied))
                })
                .await?;
            let write_ops::BulkApplied {
                applied,
                canceled_running,
                refused_url,
            } = applied;
            outcome.refused_url += refused_url;
            if applied > 0 {
                self.states_changed();
            }
            if action == BulkAction::Retry && applied > 0 {
                self.submitted.notify_one();
            }
            outcome.matched += covered.len() as u64;
            outcome.applied += applied;
            let room = BULK_SAMPLE.saturating_sub(outcome.sample.len());
            outcome
                .sample
                .extend(covered.iter().take(room).map(|&(_, id)| id));
            outcome.canceled_running.extend(canceled_running);
            match covered.last() {
                Some(&(last, _)) if covered.len() == BULK_CHUNK => after = last,
                _ => break,
            }
        }
        outcome.refused_quota = quota.refused();
        outcome.retried_by_tenant = quota.retried().clone();
        Ok(outcome)
    }

    async fn recover_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        let stamp = (now, self.stamp(now));
        let moved = self
            .write(async |tx| write_ops::recover_expired(tx, stamp, self.callback_bytes).await)
            .await?;
        if moved > 0 {
            self.states_changed();
        }
        Ok(moved)
    }

    async fn destination_settings(&self) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
        destinations::all_settings(&self.client().await?, &self.sealer).await
    }

    async fn destinations(&self) -> Result<Vec<Destination>, StoreError> {
        destinations::destinations(&self.client().await?, &self.sealer).await
    }

    async fn destination(&self, name: String) -> Result<Destination, StoreError> {
        destinations::destination(&self.client().await?, name, &self.sealer).await
    }

    async fn update_destination(
        &self,
        name: String,
        update: DestinationUpdate,
        now: Timestamp,
    ) -> Result<Destination, StoreError> {
        let updated = self
            .write(async |tx| destinations::update(tx, name, &update, now, &self.sealer).await)
            .await?;
        // A resumed or widened destination's due tasks are claimable now:
        // idle nodes that sleep until their next due time must look.
        self.submitted.notify_one();
        Ok(updated)
    }

    async fn create_schedule(
        &self,
        spec: ScheduleSpec,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        schedules::create(&self.client().await?, spec, now).await
    }

    async fn update_schedule(
        &self,
        name: String,
        change: ScheduleChange,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        self.write(async |tx| schedules::update(tx, &name, change, now).await)
            .await
    }

    async fn delete_schedule(&self, name: String) -> Result<(), StoreError> {
        schedules::delete(&self.client().await?, &name).await
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        schedules::all(&self.client().await?).await
    }

    async fn schedule(&self, name: String) -> Result<Schedule, StoreError> {
        schedules::one(&self.client().await?, &name, false).await
    }

    async fn record_firing(
        &self,
        name: String,
        at: Timestamp,
        task: TaskId,
    ) -> Result<bool, StoreError> {
        schedules::record_firing(&self.client().await?, &name, at, task).await
    }

    async fn record_firing_error(
        &self,
        name: String,
        error: tc_model::schedule::FiringError,
    ) -> Result<bool, StoreError> {
        schedules::record_firing_error(&self.client().await?, &name, &error).await
    }

    async fn health(&self) -> Result<(), StoreError> {
        read_ops::health(&self.client().await?).await
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        let (due, store_now) = read_ops::next_due(&self.client().await?).await?;
        Ok(due.map(|due| match self.clock {
            PgClock::Caller => Timestamp::from_millis(due),
            // The port's next_due has no caller clock to speak in; the
            // server's worker runs on the system clock, so the database's
            // due time is handed over as "this long from now" on it.
            PgClock::Database => {
                Timestamp::from_millis(system_now_ms().saturating_add(due - store_now))
            }
        }))
    }

    async fn create_tenant(
        &self,
        name: String,
        settings: TenantUpdate,
        now: Timestamp,
    ) -> Result<Tenant, StoreError> {
        tenants::create(&self.client().await?, &name, &settings, now, &self.sealer).await
    }

    async fn update_tenant(
        &self,
        name: String,
        update: TenantUpdate,
        now: Timestamp,
    ) -> Result<Tenant, StoreError> {
        self.write(async |tx| tenants::update(tx, &name, &update, now, &self.sealer).await)
            .await
    }

    async fn delete_tenant(&self, name: String) -> Result<(), StoreError> {
        self.write(async |tx| tenants::delete(tx, &name).await)
            .await
    }

    async fn tenants(&self) -> Result<Vec<TenantDetail>, StoreError> {
        self.read(async |tx| tenants::details(tx, None, &self.sealer).await)
            .await
    }

    async fn tenant_settings(&self) -> Result<BTreeMap<String, TenantSettings>, StoreError> {
        tenants::settings(&self.client().await?, &self.sealer).await
    }

    async fn tenant(&self, name: String) -> Result<TenantDetail, StoreError> {
        self.read(async |tx| tenants::details(tx, Some(&name), &self.sealer).await)
            .await?
            .into_iter()
            .next()
            .ok_or(StoreError::NotFound)
    }

    async fn create_api_key(
        &self,
        tenant: String,
        id: String,
        hash: KeyHash,
        now: Timestamp,
    ) -> Result<ApiKey, StoreError> {
        tenants::create_key(&self.client().await?, &tenant, &id, &hash, now).await
    }

    async fn revoke_api_key(&self, tenant: String, id: String) -> Result<(), StoreError> {
        self.write(async |tx| tenants::revoke_key(tx, &tenant, &id).await)
            .await
    }

    async fn api_key(&self, hash: KeyHash) -> Result<Option<KeyOwner>, StoreError> {
        tenants::key_owner(&self.client().await?, &hash, &self.sealer).await
    }

    async fn touch_api_key(&self, id: String, at: Timestamp) -> Result<(), StoreError> {
        tenants::touch_key(&self.client().await?, &id, at).await
    }

    async fn put_topic(
        &self,
        at: TopicRef,
        spec: TopicSpec,
        now: Timestamp,
    ) -> Result<(Topic, bool), StoreError> {
        topics::put(&self.client().await?, &at, &spec, now).await
    }

    async fn topics(&self, tenant: Option<String>) -> Result<Vec<Topic>, StoreError> {
        topics::all(&self.client().await?, tenant.as_deref()).await
    }

    async fn topic(&self, at: TopicRef) -> Result<Topic, StoreError> {
        topics::one(&self.client().await?, &at).await
    }

    async fn delete_topic(&self, at: TopicRef) -> Result<(), StoreError> {
        self.write(async |tx| topics::delete(tx, &at).await).await
    }

    async fn create_subscription(
        &self,
        at: TopicRef,
        id: String,
        spec: SubscriptionSpec,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        let sealer = &self.sealer;
        self.write(async |tx| topics::create_subscription(tx, sealer, at, id, spec, now).await)
            .await
    }

    async fn update_subscription(
        &self,
        at: TopicRef,
        id: String,
        update: SubscriptionUpdate,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        let sealer = &self.sealer;
        self.write(async |tx| topics::update_subscription(tx, sealer, &at, &id, update, now).await)
            .await
    }

    async fn delete_subscription(&self, at: TopicRef, id: String) -> Result<(), StoreError> {
        topics::delete_subscription(&self.client().await?, &at, &id).await
    }

    async fn subscriptions(&self, at: TopicRef) -> Result<Vec<Subscription>, StoreError> {
        let sealer = &self.sealer;
        self.read(async |tx| topics::subscriptions(tx, sealer, &at).await)
            .await
    }

    async fn subscription_secrets(&self) -> Result<Vec<(String, SigningSecrets)>, StoreError> {
        let sealer = &self.sealer;
        self.read(async |tx| topics::all_secrets(tx, sealer).await)
            .await
    }

    async fn subscription_try_ended(
        &self,
        id: String,
        ok: bool,
        now: Timestamp,
    ) -> Result<HealthChange, StoreError> {
        let (sealer, stamp) = (&self.sealer, (now, self.stamp(now)));
        let (channel, callback_bytes) = (&self.channels.cancel, self.callback_bytes);
        let change = self
            .write(async |tx| {
                crate::sub_health::try_ended(tx, sealer, &id, ok, stamp, channel, callback_bytes)
                    .await
            })
            .await?;
        if change == HealthChange::Disabled {
            self.states_changed();
            self.submitted.notify_one();
        }
        Ok(change)
    }

    async fn publish(
        &self,
        event: NewEvent,
        id: String,
        now: Timestamp,
    ) -> Result<Published, StoreError> {
        let (sealer, stamp) = (&self.sealer, self.stamp(now));
        let (published, created) = self
            .write(async |tx| events::publish(tx, sealer, &event, id, now, stamp).await)
            .await?;
        if created {
            self.states_changed();
            self.submitted.notify_one();
        }
        Ok(published)
    }

    async fn event(&self, at: TopicRef, id: String) -> Result<Event, StoreError> {
        self.read(async |tx| events::event(tx, &at, &id).await)
            .await
    }

    async fn replay(
        &self,
        at: TopicRef,
        id: String,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<Delivery>, StoreError> {
        let (sealer, stamp) = (&self.sealer, (now, self.stamp(now)));
        let (deliveries, created) = self
            .write(async |tx| events::replay(tx, sealer, &at, &id, since, stamp).await)
            .await?;
        if created {
            self.states_changed();
            self.submitted.notify_one();
        }
        Ok(deliveries)
    }

    async fn server_key(&self, name: String, candidate: String) -> Result<String, StoreError> {
        destinations::server_key(&self.client().await?, &self.sealer, &name, &candidate).await
    }

    async fn put_flow_key(
        &self,
        tenant: Option<String>,
        key: String,
        update: tc_model::flow_key::FlowKeyUpdate,
        now: Timestamp,
    ) -> Result<tc_model::flow_key::FlowKey, StoreError> {
        let at = tc_model::flow_key::KeyRef::new(tenant.as_deref(), &key);
        self.write(async |tx| crate::flow_keys::put(tx, &at, &update, now).await)
            .await
    }

    async fn flow_key(
        &self,
        tenant: Option<String>,
        key: String,
    ) -> Result<tc_model::flow_key::FlowKey, StoreError> {
        let at = tc_model::flow_key::KeyRef::new(tenant.as_deref(), &key);
        crate::flow_keys::get(&self.client().await?, &at).await
    }

    async fn flow_keys(
        &self,
        tenant: Option<String>,
    ) -> Result<Vec<tc_model::flow_key::FlowKey>, StoreError> {
        self.read(async |tx| crate::flow_keys::list(tx, tenant.as_deref()).await)
            .await
    }

    async fn delete_flow_key(&self, tenant: Option<String>, key: String) -> Result<(), StoreError> {
        let at = tc_model::flow_key::KeyRef::new(tenant.as_deref(), &key);
        self.write(async |tx| crate::flow_keys::delete(tx, &at).await)
            .await
    }

    async fn take_tokens(
        &self,
        asks: Vec<tc_model::cluster::TokenAsk>,
        now: Timestamp,
    ) -> Result<Vec<tc_model::cluster::TokenGrant>, StoreError> {
        if asks.is_empty() {
            return Ok(Vec::new());
        }
        let caller = self.stamp(now);
        crate::cluster::create_buckets(&self.client().await?, &asks, caller).await?;
        self.write(async |tx| crate::cluster::take_tokens(tx, &asks, caller).await)
            .await
    }

    async fn share_holds(
        &self,
        learned: Vec<(String, tc_model::cluster::DestinationHolds)>,
        now: Timestamp,
    ) -> Result<Vec<(String, tc_model::cluster::DestinationHolds)>, StoreError> {
        let caller = self.stamp(now);
        if learned.is_empty() {
            return crate::cluster::read_holds(&self.client().await?, now, caller).await;
        }
        crate::cluster::create_holds(&self.client().await?, &learned).await?;
        self.write(async |tx| crate::cluster::share_holds(tx, learned, now, caller).await)
            .await
    }
}

/// A read-only transaction on one snapshot (a task and its history, a page
/// and its histories, agree).
async fn read_snapshot(
    client: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>, StoreError> {
    client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(db)
}

/// The loops that keep the store's figures current: counts folded and
/// `ANALYZE` on the upkeep leader, and the cluster's size counted on every
/// node for the grouped statements' pace, which they answer.
fn spawn_upkeep(
    pool: &Pool,
    states_changed: &Arc<AtomicBool>,
    leading: &watch::Receiver<bool>,
    stopped: watch::Receiver<bool>,
) -> watch::Receiver<Pace> {
    tokio::spawn(counts::fold_loop(
        pool.clone(),
        Arc::clone(states_changed),
        leading.clone(),
        stopped.clone(),
    ));
    tokio::spawn(analyze::analyze_loop(
        pool.clone(),
        leading.clone(),
        stopped.clone(),
    ));
    let (pace_tx, pace) = watch::channel(Pace::for_nodes(1));
    tokio::spawn(pace::count_loop(pool.clone(), pace_tx, stopped));
    pace
}

fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
