//! The store's writes as SQL, one room a transition, as SQLite's adapter
//! splits them: submit.rs (admission and insert), claim.rs (claim,
//! heartbeat, release, recovery), end.rs (what an end creates, cancel,
//! delete, prune, retry) and bulk.rs; this file keeps what they share (the
//! guarded row read, the history row of an ended try). Every write is one transaction (or one statement, which
//! PostgreSQL runs as one), and answers only after COMMIT returned.
//!
//! Times: `$1` of every statement that stamps a time is the caller's `now`
//! in [`crate::PgClock::Caller`] mode and NULL in database mode, read
//! through `tc_now_ms($1)` (schema.rs). Times the caller computed (a
//! retry's due time) arrive as delays from its `now`, so in database mode
//! they are added to the database's clock.

mod bulk;
mod claim;
mod end;
mod submit;

use deadpool_postgres::{GenericClient, Transaction};
use tc_model::store::{Guarded, StoreError};
use tc_model::{State, Task, TaskId};

use crate::error::db;
use crate::read_ops;
use crate::rows::{self, parse_state, task_columns};

pub(crate) use bulk::{BulkApplied, RetryAdmit, bulk_apply, bulk_covered, bulk_snapshot};
// The statements whose plans the `testing` module's hot list checks.
#[cfg(feature = "testing")]
pub(crate) use claim::{CLAIM, CLAIM_OF_TENANT, COUNT_RUNNING, DUE_TENANTS, RECOVER};
pub(crate) use claim::{claim, claim_tail, claimed_tasks, heartbeat, recover_expired, release};
use end::admit_retry;
pub(crate) use end::{cancel, delete, ended, mark_inserting, prune, retry};
pub(crate) use submit::{
    BATCH_CHUNK, Inserted, answers, check_acting, lock_tenants, submit_batch, takes_quota,
};
#[cfg(feature = "testing")]
pub(crate) use submit::{BY_KEYS, INSERT_BATCH};
use submit::{insert_batch, new_id};

use tc_model::completion::INTERRUPTED;

/// The fields a guarded write checks, read under a row lock.
struct Head {
    pos: i64,
    state: State,
    attempt: u32,
    /// The tenant column (`''` for none).
    tenant: String,
}

/// Locks the task's row and reads its head; an unknown id is
/// [`StoreError::NotFound`].
async fn lock_head(tx: &Transaction<'_>, id: &TaskId) -> Result<Head, StoreError> {
    let stmt = tx
        .prepare_cached("SELECT pos, state, attempt, tenant FROM tasks WHERE id = $1 FOR UPDATE")
        .await
        .map_err(db)?;
    let row = tx
        .query_opt(&stmt, &[&id.as_bytes().as_slice()])
        .await
        .map_err(db)?
        .ok_or(StoreError::NotFound)?;
    let state: String = row.try_get(1).map_err(db)?;
    let attempt: i32 = row.try_get(2).map_err(db)?;
    Ok(Head {
        pos: row.try_get(0).map_err(db)?,
        state: parse_state(&state)?,
        attempt: u32::try_from(attempt)
            .map_err(|_| StoreError::Unavailable("corrupt row in tasks: bad attempt".into()))?,
        tenant: row.try_get(3).map_err(db)?,
    })
}

/// The head if the task is running with `attempt`, else the `Lost` answer.
async fn guard(
    tx: &Transaction<'_>,
    id: &TaskId,
    attempt: u32,
) -> Result<Result<Head, Guarded>, StoreError> {
    let head = lock_head(tx, id).await?;
    if head.state == State::Running && head.attempt == attempt {
        Ok(Ok(head))
    } else {
        Ok(Err(Guarded::Lost(head.state)))
    }
}

/// Writes the history row of try `n`, ended now (closing the open one a
/// node of the previous version opened, if any).
async fn close_attempt(
    tx: &Transaction<'_>,
    id: &TaskId,
    n: u32,
    now: Option<i64>,
    http_status: Option<u16>,
    error: Option<&str>,
) -> Result<(), StoreError> {
    // Closes the open row a node of schema 16 wrote at its claim, or
    // writes the try's only row (schema step 19), from the task's start.
    let stmt = tx
        .prepare_cached(
            "WITH closed AS ( \
                 UPDATE attempts SET finished_at = tc_now_ms($1), http_status = $4, error = $5, \
                                     duration_ms = greatest(tc_now_ms($1) - started_at, 0) \
                 WHERE task_id = $2 AND n = $3 AND finished_at IS NULL \
                 RETURNING 1 \
             ) \
             INSERT INTO attempts (task_id, n, started_at, finished_at, http_status, error, \
                                   duration_ms) \
             SELECT t.id, $3, coalesce(t.started_at, tc_now_ms($1)), tc_now_ms($1), $4, $5, \
                    greatest(tc_now_ms($1) - coalesce(t.started_at, tc_now_ms($1)), 0) \
             FROM tasks t WHERE t.id = $2 AND NOT EXISTS (SELECT 1 FROM closed)",
        )
        .await
        .map_err(db)?;
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    let status = http_status.map(i32::from);
    tx.execute(
        &stmt,
        &[&now, &id.as_bytes().as_slice(), &n, &status, &error],
    )
    .await
    .map_err(db)?;
    Ok(())
}

/// The task at `pos` with its history.
async fn load_pos(tx: &Transaction<'_>, pos: i64) -> Result<Task, StoreError> {
    let stmt = tx
        .prepare_cached(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE pos = $1"
        ))
        .await
        .map_err(db)?;
    let row = tx
        .query_opt(&stmt, &[&pos])
        .await
        .map_err(db)?
        .ok_or_else(|| StoreError::Unavailable(format!("task at pos {pos} vanished")))?;
    let task = rows::task_from_row(&row)?.task;
    let mut task = [task];
    read_ops::fill_attempts(tx, &mut task).await?;
    let [task] = task;
    Ok(task)
}
