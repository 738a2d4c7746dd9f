//! Group commit of single submits: concurrent `submit` calls queued behind
//! a statement in flight become one multi-row insert
//! ([`crate::write_ops::submit_batch`]: `INSERT … ON CONFLICT DO NOTHING
//! RETURNING`, keys in a stable order), each caller answered as a single
//! submit would be: created, the same work found under its key, an
//! idempotency conflict, or refused for its tenant's `max_pending`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Pool;
use tc_model::store::{StoreError, Submitted};
use tc_model::{NewTask, Timestamp};
use tokio::sync::Notify;

use crate::batcher::Shape;
use crate::config::PgClock;
use crate::write_ops;

/// Submits in flight at once, and the most in one statement (within one
/// chunk of a batch, so one statement).
pub(crate) const SUBMITS: Shape = Shape {
    flushers: 4,
    max_batch: 256,
};

/// What a flush needs beside the calls.
#[derive(Clone)]
pub(crate) struct Submitter {
    pub(crate) pool: Pool,
    pub(crate) clock: PgClock,
    pub(crate) states_changed: Arc<AtomicBool>,
    pub(crate) submitted: Arc<Notify>,
}

impl Submitter {
    /// One flush: the calls' tasks as one batch. The statement's time is
    /// the latest caller's now (calls wait in the queue for at most one
    /// statement, so the times differ by about that).
    pub(crate) async fn flush(
        self,
        asked: Vec<(NewTask, Timestamp)>,
    ) -> Result<Vec<Result<Submitted, StoreError>>, StoreError> {
        let now = asked
            .iter()
            .map(|(_, now)| *now)
            .max()
            .unwrap_or(Timestamp::from_millis(0));
        let stamp = match self.clock {
            PgClock::Caller => Some(now.as_millis()),
            PgClock::Database => None,
        };
        let tasks: Vec<NewTask> = asked.into_iter().map(|(task, _)| task).collect();
        let mut client = self.pool.get().await.map_err(crate::error::pool)?;
        // A pending limit's lock holds until the transaction ends: such a
        // flush is one; the others stay one statement.
        let inserted = if write_ops::takes_quota(&tasks) {
            let tx = client.transaction().await.map_err(crate::error::db)?;
            let inserted = write_ops::submit_batch(&tx, &tasks, now, stamp).await?;
            tx.commit().await.map_err(crate::error::db)?;
            inserted
        } else {
            write_ops::submit_batch(&client, &tasks, now, stamp).await?
        };
        let (answers, created) = write_ops::answers(&tasks, inserted);
        if created {
            self.states_changed.store(true, Ordering::Relaxed);
            self.submitted.notify_one();
        }
        Ok(answers)
    }
}
