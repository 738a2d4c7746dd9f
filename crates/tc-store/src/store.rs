//! [`SqliteStore`]: the writer thread, the read pool and the [`TaskStore`]
//! methods, each handing its work to one of them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tc_model::claim::Claim;
use tc_model::completion::CompletionEffect;
use tc_model::destination::{ClaimGate, Destination, DestinationSettings, DestinationUpdate};
use tc_model::schedule::{Schedule, ScheduleChange, ScheduleSpec};
use tc_model::signing::SigningSecrets;
use tc_model::store::{
    BULK_CHUNK, BULK_SAMPLE, BulkOutcome, BulkRequest, Completion, Guarded, LeaseLost, ListQuery,
    Page, StateCounts, StoreError, Submitted, TaskStore,
};
use tc_model::tenant::key::{ApiKey, KeyHash, KeyOwner};
use tc_model::tenant::{Acting, Tenant, TenantDetail, TenantSettings, TenantUpdate};
use tc_model::topic::health::HealthChange;
use tc_model::{NewTask, Task, TaskId, Timestamp};
use tokio::sync::{Semaphore, mpsc};

use crate::filter::FilterSql;
use crate::read_pool::Readers;
use crate::writer::Undo;
use tc_model::topic::event::{Event, NewEvent, Published};
use tc_model::topic::{
    Delivery, Subscription, SubscriptionSpec, SubscriptionUpdate, Topic, TopicRef, TopicSpec,
};

use crate::{destinations, events, read_ops, schedules, tenants, topics, write_ops, writer};

mod lifecycle;

/// The SQLite adapter behind [`TaskStore`].
///
/// Writes go to one writer thread that commits them in batches; reads run on
/// a small pool of their own connections in tokio's blocking pool. Needs a
/// tokio runtime. Close it with [`SqliteStore::close`]; dropping it also
/// flushes queued writes and joins the writer, but blocks the dropping thread
/// while it does.
pub struct SqliteStore {
    commands: Option<mpsc::Sender<writer::Command>>,
    /// One permit per payload byte queued for the writer.
    queued_bytes: Arc<Semaphore>,
    max_queued_bytes: usize,
    writer: Option<JoinHandle<()>>,
    readers: Arc<Readers>,
    /// `StoreConfig::callback_result_bytes`, for the writes that end tasks.
    callback_bytes: usize,
    /// Seals the secret columns on their way in and opens them on their
    /// way out ([`SqliteStore::seal_with`]); none until then.
    sealer: tc_seal::Sealer,
    /// Token buckets and destination holds: one process
    /// opens the file, so they are this process's, in memory.
    cluster: Arc<std::sync::Mutex<tc_model::cluster::local::LocalCluster>>,
}

impl TaskStore for SqliteStore {
    async fn submit(&self, task: NewTask, now: Timestamp) -> Result<Submitted, StoreError> {
        let bytes = task.body().len() + task.url().len() + task.idempotency_key().len();
        // One statement (`OR FAIL`, no statement journal: it refuses before
        // writing, or only SQLite itself fails; see Undo::WholeBatch).
        // The row's derived columns are made here, off the writer thread.
        let row = write_ops::SubmitRow::of(&task);
        // The task goes back with the answer: the reply is built, and the
        // payload freed, off the writer thread too.
        let (made, task) = self
            .write_sized(bytes, Undo::WholeBatch, move |conn| {
                write_ops::submit_prepared(conn, &row, &task, now).map(|made| (made, task))
            })
            .await?;
        Ok(made.into_submitted(&task, now))
    }

    async fn submit_many(
        &self,
        tasks: Vec<NewTask>,
        now: Timestamp,
    ) -> Result<Vec<Result<Submitted, StoreError>>, StoreError> {
        let bytes = tasks
            .iter()
            .map(|t| t.body().len() + t.url().len() + t.idempotency_key().len())
            .sum();
        // One command: the items share the batch's transaction and commit,
        // and no item is split from the others by a concurrent write.
        // Each item is its own submit and answers for itself: an item
        // refused (a key conflict) has written nothing, and the others
        // stand. An item the store failed under fails the command: its
        // statement has no statement journal (see write_ops::submit), so
        // the batch is rolled back (Undo::WholeBatch).
        let rows: Vec<write_ops::SubmitRow> = tasks.iter().map(write_ops::SubmitRow::of).collect();
        self.write_sized(bytes, Undo::WholeBatch, move |conn| {
            // A batch is one caller's: a key gone refuses it whole.
            if let Some(acting) = tasks.first().and_then(NewTask::acting) {
                crate::write_ops::check_acting(conn, &acting)?;
            }
            // One multi-row INSERT per chunk (batch_submit::submit_all);
            // it fails the command when the store failed under an item.
            let answers = crate::batch_submit::submit_all(conn, &tasks, &rows, now)?;
            Ok((answers, tasks))
        })
        .await
        .map(|(answers, tasks)| {
            answers
                .into_iter()
                .zip(&tasks)
                .map(|(answer, task)| answer.map(|made| made.into_submitted(task, now)))
                .collect()
        })
    }

    async fn get(&self, id: TaskId) -> Result<Task, StoreError> {
        self.readers.run(move |conn| read_ops::get(conn, &id)).await
    }

    async fn list(&self, query: ListQuery) -> Result<Page, StoreError> {
        self.readers
            .run(move |conn| read_ops::list(conn, &query))
            .await
    }

    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        self.readers
            .run(|conn| read_ops::count_by_state(conn))
            .await
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
        // Reads, then per task an UPDATE and an INSERT; after the first
        // write only SQLite itself (or a corrupt row) can fail: no savepoint
        // (see Undo::WholeBatch).
        self.write_sized(0, Undo::WholeBatch, move |conn| {
            write_ops::claim(conn, n, now, lease, &gate)
        })
        .await
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
        self.write(move |conn| write_ops::heartbeat(conn, &running, now, lease))
            .await
    }

    async fn complete(
        &self,
        id: TaskId,
        attempt: u32,
        outcome: Completion,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        // What the completion does is decided here, before the writer
        // thread; the write only binds it.
        let effect = CompletionEffect::of(outcome, now);
        let bytes = effect.result.as_ref().map_or(0, |(result, _)| result.len());
        // Its first write is the guarded UPDATE (all or nothing); after it,
        // only SQLite itself can fail (see Undo::WholeBatch).
        let callback_bytes = self.callback_bytes;
        self.write_sized(bytes, Undo::WholeBatch, move |conn| {
            write_ops::complete(conn, &id, attempt, &effect, callback_bytes)
        })
        .await
    }

    async fn cancel(&self, id: TaskId, now: Timestamp) -> Result<Task, StoreError> {
        let callback_bytes = self.callback_bytes;
        self.write(move |conn| write_ops::cancel(conn, &id, now, callback_bytes))
            .await
    }

    async fn release(
        &self,
        id: TaskId,
        attempt: u32,
        now: Timestamp,
    ) -> Result<Guarded, StoreError> {
        self.write(move |conn| write_ops::release(conn, &id, attempt, now))
            .await
    }

    async fn recover_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        let callback_bytes = self.callback_bytes;
        self.write(move |conn| write_ops::recover_expired(conn, now, callback_bytes))
            .await
    }

    async fn prune(
        &self,
        state: tc_model::State,
        older_than: Duration,
        now: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let cutoff = Timestamp::from_millis(
            now.as_millis()
                .saturating_sub(i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX)),
        );
        // Found on a reader, so that a round with nothing to delete (and no
        // free pages to give back) never holds the writer; deleted by the
        // writer, the rule checked again.
        let (seqs, reclaim) = self
            .readers
            .run(move |conn| {
                let seqs = read_ops::prunable(conn, state, cutoff, limit)?;
                let reclaim = read_ops::has_pages_to_reclaim(conn)?;
                Ok((seqs, reclaim))
            })
            .await?;
        if seqs.is_empty() && !reclaim {
            return Ok(0);
        }
        self.write(move |conn| write_ops::prune(conn, state, cutoff, &seqs))
            .await
    }

    async fn delete(&self, id: TaskId) -> Result<(), StoreError> {
        self.write(move |conn| write_ops::delete(conn, &id)).await
    }

    async fn retry(
        &self,
        id: TaskId,
        run_at: Timestamp,
        now: Timestamp,
        acting: Option<Acting>,
    ) -> Result<Task, StoreError> {
        self.write(move |conn| write_ops::retry(conn, &id, run_at, now, acting.as_ref()))
            .await
    }

    async fn bulk(&self, request: BulkRequest) -> Result<BulkOutcome, StoreError> {
        let BulkRequest {
            action,
            filter,
            dry_run,
            now,
            acting,
            quota,
            allowed_urls,
        } = request;
        if dry_run {
            let (matched, sample) = self
                .readers
                .run(move |conn| read_ops::bulk_count(conn, &FilterSql::new(&filter)))
                .await?;
            return Ok(BulkOutcome {
                matched,
                sample,
                ..BulkOutcome::default()
            });
        }
        // seq order is commit order: every task submitted before this call
        // has a seq at or below the horizon, every later one a higher seq.
        let horizon = self.readers.run(|conn| read_ops::last_seq(conn)).await?;
        let mut outcome = BulkOutcome::default();
        let mut after = 0;
        let callback_bytes = self.callback_bytes;
        let mut quota = quota;
        loop {
            let filter = filter.clone();
            let acting = acting.clone();
            let allowed_urls = allowed_urls.clone();
            // One command per chunk: the writer is held for at most
            // BULK_CHUNK tasks, and submits queue in between. The quota
            // goes with the command and comes back with its answer.
            let (chunk, back) = self
                .write(move |conn| {
                    let filter = FilterSql::new(&filter);
                    let step = write_ops::BulkStep {
                        action,
                        filter: &filter,
                        after,
                        horizon,
                        now,
                        callback_bytes,
                        acting: acting.as_ref(),
                        allowed_urls: &allowed_urls,
                    };
                    let mut quota = quota;
                    write_ops::bulk_chunk(conn, &step, &mut quota).map(|chunk| (chunk, quota))
                })
                .await?;
            quota = back;
            outcome.matched += chunk.matched.len() as u64;
            outcome.applied += chunk.applied;
            outcome.refused_url += chunk.refused_url;
            let room = BULK_SAMPLE.saturating_sub(outcome.sample.len());
            outcome.sample.extend(chunk.matched.iter().take(room));
            outcome.canceled_running.extend(chunk.canceled_running);
            match chunk.last {
                Some(last) if chunk.matched.len() == BULK_CHUNK => after = last,
                _ => break,
            }
        }
        outcome.refused_quota = quota.refused();
        outcome.retried_by_tenant = quota.retried().clone();
        Ok(outcome)
    }

    async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.readers.run(|conn| read_ops::next_due(conn)).await
    }

    async fn destination_settings(&self) -> Result<Vec<(String, DestinationSettings)>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| destinations::all_settings(conn, &sealer))
            .await
    }

    async fn destinations(&self) -> Result<Vec<Destination>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| destinations::destinations(conn, &sealer))
            .await
    }

    async fn destination(&self, name: String) -> Result<Destination, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| destinations::destination(conn, &name, &sealer))
            .await
    }

    async fn update_destination(
        &self,
        name: String,
        update: DestinationUpdate,
        now: Timestamp,
    ) -> Result<Destination, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| destinations::update(conn, &name, &update, now, &sealer))
            .await
    }

    async fn create_schedule(
        &self,
        spec: ScheduleSpec,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        self.write(move |conn| schedules::create(conn, spec, now))
            .await
    }

    async fn update_schedule(
        &self,
        name: String,
        change: ScheduleChange,
        now: Timestamp,
    ) -> Result<Schedule, StoreError> {
        self.write(move |conn| schedules::update(conn, &name, change, now))
            .await
    }

    async fn delete_schedule(&self, name: String) -> Result<(), StoreError> {
        self.write(move |conn| schedules::delete(conn, &name)).await
    }

    async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        self.readers.run(|conn| schedules::all(conn)).await
    }

    async fn schedule(&self, name: String) -> Result<Schedule, StoreError> {
        self.readers
            .run(move |conn| schedules::one(conn, &name))
            .await
    }

    async fn record_firing(
        &self,
        name: String,
        at: Timestamp,
        task: TaskId,
    ) -> Result<bool, StoreError> {
        self.write(move |conn| schedules::record_firing(conn, &name, at, task))
            .await
    }

    async fn record_firing_error(
        &self,
        name: String,
        error: tc_model::schedule::FiringError,
    ) -> Result<bool, StoreError> {
        self.write(move |conn| schedules::record_firing_error(conn, &name, &error))
            .await
    }

    async fn health(&self) -> Result<(), StoreError> {
        let stopped = || StoreError::Unavailable("the store writer thread has stopped".to_owned());
        // A writer that is gone, or going (its queue closed while it unwinds).
        let gone = || {
            self.writer.as_ref().is_none_or(JoinHandle::is_finished)
                || self.commands.as_ref().is_none_or(mpsc::Sender::is_closed)
        };
        if gone() {
            return Err(stopped());
        }
        // A no-op through the writer's queue and transaction: it answers only
        // if the writer runs and can begin a write transaction.
        let probe = self
            .write(|conn| {
                conn.prepare_cached("SELECT 1")
                    .and_then(|mut stmt| stmt.query_row([], |_| Ok(())))
                    .map_err(crate::rows::db)
            })
            .await;
        match probe {
            Err(_) if gone() => Err(stopped()),
            other => other,
        }
    }

    async fn create_tenant(
        &self,
        name: String,
        settings: TenantUpdate,
        now: Timestamp,
    ) -> Result<Tenant, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| tenants::create(conn, &name, &settings, now, &sealer))
            .await
    }

    async fn update_tenant(
        &self,
        name: String,
        update: TenantUpdate,
        now: Timestamp,
    ) -> Result<Tenant, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| tenants::update(conn, &name, &update, now, &sealer))
            .await
    }

    async fn delete_tenant(&self, name: String) -> Result<(), StoreError> {
        self.write(move |conn| tenants::delete(conn, &name)).await
    }

    async fn tenants(&self) -> Result<Vec<TenantDetail>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| tenants::all(conn, &sealer))
            .await
    }

    async fn tenant_settings(&self) -> Result<BTreeMap<String, TenantSettings>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| tenants::settings(conn, &sealer))
            .await
    }

    async fn tenant(&self, name: String) -> Result<TenantDetail, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| tenants::one(conn, &name, &sealer))
            .await
    }

    async fn create_api_key(
        &self,
        tenant: String,
        id: String,
        hash: KeyHash,
        now: Timestamp,
    ) -> Result<ApiKey, StoreError> {
        self.write(move |conn| tenants::create_key(conn, &tenant, &id, &hash, now))
            .await
    }

    async fn revoke_api_key(&self, tenant: String, id: String) -> Result<(), StoreError> {
        self.write(move |conn| tenants::revoke_key(conn, &tenant, &id))
            .await
    }

    async fn api_key(&self, hash: KeyHash) -> Result<Option<KeyOwner>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| tenants::key_owner(conn, &hash, &sealer))
            .await
    }

    async fn touch_api_key(&self, id: String, at: Timestamp) -> Result<(), StoreError> {
        self.write(move |conn| tenants::touch_key(conn, &id, at))
            .await
    }

    async fn put_topic(
        &self,
        at: TopicRef,
        spec: TopicSpec,
        now: Timestamp,
    ) -> Result<(Topic, bool), StoreError> {
        self.write(move |conn| topics::put(conn, &at, &spec, now))
            .await
    }

    async fn topics(&self, tenant: Option<String>) -> Result<Vec<Topic>, StoreError> {
        self.readers
            .run(move |conn| topics::all(conn, tenant.as_deref()))
            .await
    }

    async fn topic(&self, at: TopicRef) -> Result<Topic, StoreError> {
        self.readers.run(move |conn| topics::one(conn, &at)).await
    }

    async fn delete_topic(&self, at: TopicRef) -> Result<(), StoreError> {
        self.write(move |conn| topics::delete(conn, &at)).await
    }

    async fn create_subscription(
        &self,
        at: TopicRef,
        id: String,
        spec: SubscriptionSpec,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| topics::create_subscription(conn, &sealer, at, id, spec, now))
            .await
    }

    async fn update_subscription(
        &self,
        at: TopicRef,
        id: String,
        update: SubscriptionUpdate,
        now: Timestamp,
    ) -> Result<Subscription, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| topics::update_subscription(conn, &sealer, &at, &id, update, now))
            .await
    }

    async fn delete_subscription(&self, at: TopicRef, id: String) -> Result<(), StoreError> {
        self.write(move |conn| topics::delete_subscription(conn, &at, &id))
            .await
    }

    async fn subscriptions(&self, at: TopicRef) -> Result<Vec<Subscription>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| topics::subscriptions(conn, &sealer, &at))
            .await
    }

    async fn subscription_secrets(&self) -> Result<Vec<(String, SigningSecrets)>, StoreError> {
        let sealer = self.sealer.clone();
        self.readers
            .run(move |conn| topics::all_secrets(conn, &sealer))
            .await
    }

    async fn subscription_try_ended(
        &self,
        id: String,
        ok: bool,
        now: Timestamp,
    ) -> Result<HealthChange, StoreError> {
        let (sealer, callback_bytes) = (self.sealer.clone(), self.callback_bytes);
        self.write(move |conn| {
            crate::sub_health::try_ended(conn, &sealer, &id, ok, now, callback_bytes)
        })
        .await
    }

    async fn publish(
        &self,
        event: NewEvent,
        id: String,
        now: Timestamp,
    ) -> Result<Published, StoreError> {
        let sealer = self.sealer.clone();
        let bytes = event.body().len() + event.idempotency_key().len();
        // One command, one savepoint: a task refused undoes the event.
        self.write_sized(bytes, Undo::Savepoint, move |conn| {
            events::publish(conn, &sealer, &event, id, now)
        })
        .await
    }

    async fn event(&self, at: TopicRef, id: String) -> Result<Event, StoreError> {
        self.readers
            .run(move |conn| events::event(conn, &at, &id))
            .await
    }

    async fn replay(
        &self,
        at: TopicRef,
        id: String,
        since: Timestamp,
        now: Timestamp,
    ) -> Result<Vec<Delivery>, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| events::replay(conn, &sealer, &at, &id, since, now))
            .await
    }

    async fn server_key(&self, name: String, candidate: String) -> Result<String, StoreError> {
        let sealer = self.sealer.clone();
        self.write(move |conn| destinations::server_key(conn, &sealer, &name, &candidate))
            .await
    }

    /// One process opens an SQLite file: its buckets are this process's,
    /// in memory, and no writer time is spent on them.
    async fn put_flow_key(
        &self,
        tenant: Option<String>,
        key: String,
        update: tc_model::flow_key::FlowKeyUpdate,
        now: Timestamp,
    ) -> Result<tc_model::flow_key::FlowKey, StoreError> {
        let at = tc_model::flow_key::KeyRef::new(tenant.as_deref(), &key);
        self.write(move |conn| crate::flow_keys::put(conn, &at, &update, now))
            .await
    }

    async fn flow_key(
        &self,
        tenant: Option<String>,
        key: String,
    ) -> Result<tc_model::flow_key::FlowKey, StoreError> {
        let at = tc_model::flow_key::KeyRef::new(tenant.as_deref(), &key);
        self.readers
            .run(move |conn| crate::flow_keys::get(conn, &at))
            .await
    }

    async fn flow_keys(
        &self,
        tenant: Option<String>,
    ) -> Result<Vec<tc_model::flow_key::FlowKey>, StoreError> {
        self.readers
            .run(move |conn| crate::flow_keys::list(conn, tenant.as_deref()))
            .await
    }

    async fn delete_flow_key(&self, tenant: Option<String>, key: String) -> Result<(), StoreError> {
        let at = tc_model::flow_key::KeyRef::new(tenant.as_deref(), &key);
        self.write(move |conn| crate::flow_keys::delete(conn, &at))
            .await
    }

    async fn take_tokens(
        &self,
        asks: Vec<tc_model::cluster::TokenAsk>,
        now: Timestamp,
    ) -> Result<Vec<tc_model::cluster::TokenGrant>, StoreError> {
        Ok(self.cluster().take_tokens(&asks, now))
    }
    async fn share_holds(
        &self,
        learned: Vec<(String, tc_model::cluster::DestinationHolds)>,
        now: Timestamp,
    ) -> Result<Vec<(String, tc_model::cluster::DestinationHolds)>, StoreError> {
        Ok(self.cluster().share_holds(learned, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StoreConfig;

    #[tokio::test]
    async fn health_fails_once_the_writer_thread_is_gone() {
        let store = SqliteStore::open_in_memory(StoreConfig::default())
            .await
            .unwrap();
        assert_eq!(store.health().await, Ok(()));
        // What a bug in a write does to the writer: it ends the thread.
        let crashed = store
            .write(|_| -> Result<(), StoreError> { panic!("a write that panics") })
            .await;
        assert!(crashed.is_err(), "{crashed:?}");
        match store.health().await {
            Err(StoreError::Unavailable(reason)) => {
                assert!(reason.contains("writer"), "{reason}")
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
    }
}
