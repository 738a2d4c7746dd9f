//! The [`Tasks`] part of the store port on [`PgStore`]: the tasks as the API sees them.

use crate::counts;
use crate::{read_ops, write_ops};
use std::time::Duration;
use tc_model::store::Tasks;
use tc_model::store::{
    BULK_CHUNK, BULK_SAMPLE, BulkAction, BulkOutcome, BulkRequest, ListQuery, Page, StateCounts,
    StoreError, Submitted,
};
use tc_model::tenant::{Acting, Scope};
use tc_model::{NewTask, Task, TaskId, Timestamp};

use super::{LIST_HOLD, PgStore};

impl Tasks for PgStore {
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

    async fn get(&self, id: TaskId, scope: Scope) -> Result<Task, StoreError> {
        self.read(async |tx| read_ops::get(tx, &id).await)
            .await
            .and_then(|task| tc_model::store::seen_by(&scope, task))
    }

    async fn list(&self, query: ListQuery, scope: Scope) -> Result<Page, StoreError> {
        let query = query.within(&scope);
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

    async fn cancel(&self, id: TaskId, scope: Scope, now: Timestamp) -> Result<Task, StoreError> {
        let stamp = (now, self.stamp(now));
        let canceled = self
            .write(async |tx| {
                let channel = &self.channels.cancel;
                write_ops::cancel(tx, &id, &scope, stamp, channel, self.callback_bytes).await
            })
            .await?;
        self.states_changed();
        if canceled.was_running {
            tracing::debug!(task_id = %id, "store_cancel_announced");
        }
        Ok(canceled.task)
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

    async fn delete(&self, id: TaskId, scope: Scope) -> Result<(), StoreError> {
        self.write(async |tx| write_ops::delete(tx, &id, &scope).await)
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
            scope,
            dry_run,
            now,
            acting,
            mut quota,
            allowed_urls,
        } = request;
        let filter = filter.within(&scope);
        if dry_run {
            return self.bulk_count(&filter).await;
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

    async fn health(&self) -> Result<(), StoreError> {
        read_ops::health(&self.client().await?).await
    }
}

impl PgStore {
    /// A bulk dry run: the tasks `filter` covers, counted in one snapshot,
    /// with a sample of their ids.
    async fn bulk_count(
        &self,
        filter: &tc_model::store::TaskFilter,
    ) -> Result<BulkOutcome, StoreError> {
        let sample = i64::try_from(BULK_SAMPLE).unwrap_or(i64::MAX);
        let (matched, sample) = self
            .read(async |tx| read_ops::bulk_count(tx, filter, sample).await)
            .await?;
        Ok(BulkOutcome {
            matched,
            sample,
            ..BulkOutcome::default()
        })
    }
}
