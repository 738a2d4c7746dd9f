//! The [`Tasks`] part of the store port on [`SqliteStore`]: the tasks as the API sees them.

use crate::filter::FilterSql;
use crate::writer::Undo;
use crate::{read_ops, write_ops};
use std::thread::JoinHandle;
use std::time::Duration;
use tc_model::store::Tasks;
use tc_model::store::{
    BULK_CHUNK, BULK_SAMPLE, BulkOutcome, BulkRequest, ListQuery, Page, StateCounts, StoreError,
    Submitted,
};
use tc_model::tenant::{Acting, Scope};
use tc_model::{NewTask, Task, TaskId, Timestamp};
use tokio::sync::mpsc;

use super::SqliteStore;

impl Tasks for SqliteStore {
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

    async fn get(&self, id: TaskId, scope: Scope) -> Result<Task, StoreError> {
        self.readers
            .run(move |conn| read_ops::get(conn, &id))
            .await
            .and_then(|task| tc_model::store::seen_by(&scope, task))
    }

    async fn list(&self, query: ListQuery, scope: Scope) -> Result<Page, StoreError> {
        let query = query.within(&scope);
        self.readers
            .run(move |conn| read_ops::list(conn, &query))
            .await
    }

    async fn count_by_state(&self) -> Result<StateCounts, StoreError> {
        self.readers
            .run(|conn| read_ops::count_by_state(conn))
            .await
    }

    async fn cancel(&self, id: TaskId, scope: Scope, now: Timestamp) -> Result<Task, StoreError> {
        let callback_bytes = self.callback_bytes;
        self.write(move |conn| write_ops::cancel(conn, &id, &scope, now, callback_bytes))
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

    async fn delete(&self, id: TaskId, scope: Scope) -> Result<(), StoreError> {
        self.write(move |conn| write_ops::delete(conn, &id, &scope))
            .await
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
            scope,
            dry_run,
            now,
            acting,
            quota,
            allowed_urls,
        } = request;
        let filter = filter.within(&scope);
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
}
