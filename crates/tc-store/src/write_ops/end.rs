//! A task's end and what follows it: completion (and the callback it may
//! create), cancel, delete, prune and the space it frees, and a retry by
//! hand (admitted against the tenant's quota).

use rusqlite::{Connection, OptionalExtension, params};
use tc_model::callback::{self};
use tc_model::completion::{CancelEffect, CompletionEffect};
use tc_model::store::{Guarded, StoreError};
use tc_model::tenant::quota::{Admission, RetryQuota};
use tc_model::tenant::{Acting, Scope};
use tc_model::{State, Task, TaskId, Timestamp};

use crate::moves::{self, At};
use crate::rows::{self, Stored, db, parse_state};

use super::{
    Made, SubmitRow, Try, check_acting, close_attempt, load_seq, new_id, open_tasks_of, submit_as,
    write_one,
};

/// Writes a try's outcome, `effect` (see [`CompletionEffect::of`]), if the
/// task is still running with `attempt`.
pub(crate) fn complete(
    conn: &Connection,
    id: &TaskId,
    attempt: u32,
    effect: &CompletionEffect,
    callback_bytes: usize,
) -> Result<Guarded, StoreError> {
    // What the completion writes is tc-model's rule; this binds it. A
    // field the effect leaves alone is kept by the SQL: a missing status by
    // coalesce, a result not written (?7 false), finished_at by coalesce.
    let (writes_result, result, content_type) = match &effect.result {
        Some((result, content_type)) => (true, Some(result.as_slice()), content_type.as_deref()),
        None => (false, None, None),
    };
    let to = effect.state;
    // The guard first (one probe of the id index, reading whether the task
    // asked for a callback: only then is it read back at its end), then
    // the UPDATE by seq. Not an UPDATE … RETURNING: SQLite collects
    // RETURNING rows in an ephemeral table built for every statement,
    // which cost more than this read (callgrind, docs/performance.md).
    // An end is counted (`ends`) in the same UPDATE.
    let head = completion_head(conn, id)?;
    let Some((seq, state, current, asks_callback, started_at, destination)) = head else {
        return Err(StoreError::NotFound);
    };
    let state = parse_state(&state)?;
    if state != State::Running || current != attempt {
        return Ok(Guarded::Lost(state));
    }
    write_one(
        conn,
        "UPDATE OR FAIL tasks SET state = ?4, http_status = coalesce(?5, http_status), \
                          result = CASE WHEN ?6 THEN ?7 ELSE result END, \
                          result_content_type = CASE WHEN ?6 THEN ?8 ELSE result_content_type END, \
                          error = ?9, finished_at = coalesce(?10, finished_at), \
                          next_run_at = ?11, updated_at = ?12, lease_until = NULL, \
                          ends = ends + ?13 \
         WHERE seq = ?1 AND state = ?2 AND attempt = ?3",
        params![
            seq,
            State::Running.as_str(),
            attempt,
            to.as_str(),
            effect.http_status,
            writes_result,
            result,
            content_type,
            effect.error,
            effect.finished_at.map(Timestamp::as_millis),
            effect.next_run_at.map(Timestamp::as_millis),
            effect.updated_at.as_millis(),
            i64::from(to.is_terminal())
        ],
    )?;
    let after = match effect.next_run_at {
        Some(due) if to == State::Pending => At::pending(due.as_millis()),
        _ => At::state(to),
    };
    moves::moved(&destination, Some(At::state(state)), Some(after));
    close_attempt(
        conn,
        Try {
            id,
            n: attempt,
            started_at,
        },
        effect.updated_at,
        effect.http_status,
        effect.error.as_deref(),
    )?;
    if asks_callback && to.is_terminal() {
        ended(conn, seq, effect.updated_at, callback_bytes)?;
    }
    Ok(Guarded::Applied(to))
}

/// What a completion's guard reads of the task: its seq, state, attempt,
/// whether it asked for a callback, and when its try started.
type CompletionHead = (i64, String, u32, bool, Option<i64>, String);

/// Reads the [`CompletionHead`] of `id` (`None`: no such task): one probe
/// of the id index.
fn completion_head(conn: &Connection, id: &TaskId) -> Result<Option<CompletionHead>, StoreError> {
    conn.prepare_cached(
        "SELECT seq, state, attempt, callback_url IS NOT NULL, started_at, destination \
             FROM tasks WHERE id = ?1",
    )
    .map_err(db)?
    .query_row([id.as_bytes()], |row| row.try_into())
    .optional()
    .map_err(db)
}

/// What a task's end creates, after the write that ended the task at
/// `seq` (and counted the end): its callback, when tc-model's rule
/// ([`callback::task_for`]) makes one, inserted in the same transaction,
/// and the parent pointed at it. A key already taken (a client's task with
/// that key) is the callback: the parent names that task.
pub(super) fn ended(
    conn: &Connection,
    seq: i64,
    now: Timestamp,
    callback_bytes: usize,
) -> Result<(), StoreError> {
    let parent = load_seq(conn, seq)?;
    let callback_id = new_id(now);
    let Some(new) = callback::task_for(&parent, callback_id, callback_bytes) else {
        return Ok(());
    };
    let made = match submit_as(conn, callback_id, &SubmitRow::of(&new), &new, now) {
        Ok(Made::Created(id)) => id,
        Ok(Made::Known(task)) => task.id,
        Err(StoreError::IdempotencyConflict { .. }) => rows::load_by_key(
            conn,
            new.idempotency_key(),
            tc_model::tenant::stored_tenant(new.tenant()),
        )?
        .map(|stored| stored.task.id)
        .ok_or_else(|| StoreError::Unavailable("a callback's key vanished".to_owned()))?,
        Err(e) => return Err(e),
    };
    write_one(
        conn,
        "UPDATE tasks SET callback_task_id = ?2 WHERE seq = ?1",
        params![seq, made.as_bytes()],
    )
}

/// Pending or running → canceled; a terminal task is returned unchanged.
pub(crate) fn cancel(
    conn: &Connection,
    id: &TaskId,
    scope: &Scope,
    now: Timestamp,
    callback_bytes: usize,
) -> Result<Task, StoreError> {
    let Some(Stored { seq, task }) = rows::load(conn, id)? else {
        return Err(StoreError::NotFound);
    };
    let task = tc_model::store::seen_by(scope, task)?;
    let Some(effect) = CancelEffect::of(task.state, now)? else {
        return Ok(task);
    };
    write_one(
        conn,
        "UPDATE tasks SET state = ?4, finished_at = ?5, updated_at = ?5, lease_until = NULL, \
                          next_run_at = NULL, ends = ends + 1, error = coalesce(?6, error) \
         WHERE seq = ?1 AND state = ?2 AND attempt = ?3",
        params![
            seq,
            effect.from.as_str(),
            task.attempt,
            effect.state.as_str(),
            effect.finished_at.as_millis(),
            effect.error
        ],
    )?;
    let before = At {
        state: effect.from,
        due: task.next_run_at.map(Timestamp::as_millis),
    };
    moves::moved(
        &task.destination,
        Some(before),
        Some(At::state(effect.state)),
    );
    if effect.ends_a_try() {
        let started_at = task.started_at.map(Timestamp::as_millis);
        let tried = Try {
            id,
            n: task.attempt,
            started_at,
        };
        close_attempt(conn, tried, now, None, effect.error)?;
    }
    if task.callback.is_some() {
        ended(conn, seq, now, callback_bytes)?;
    }
    load_seq(conn, seq)
}

/// Deletes a finished task and its attempts.
pub(crate) fn delete(conn: &Connection, id: &TaskId, scope: &Scope) -> Result<(), StoreError> {
    let head: Option<(i64, String, String, String)> = conn
        .prepare_cached("SELECT seq, state, tenant, destination FROM tasks WHERE id = ?1")
        .map_err(db)?
        .query_row([id.as_bytes()], |row| row.try_into())
        .optional()
        .map_err(db)?;
    let Some((seq, state, _, destination)) =
        head.filter(|(_, _, tenant, _)| scope.owns_stored(tenant))
    else {
        return Err(StoreError::NotFound);
    };
    let state = parse_state(&state)?;
    if !state.is_terminal() {
        return Err(StoreError::NotTerminal(state));
    }
    conn.prepare_cached("DELETE FROM attempts WHERE task_id = ?1")
        .map_err(db)?
        .execute([id.as_bytes()])
        .map_err(db)?;
    write_one(
        conn,
        "DELETE FROM tasks WHERE seq = ?1 AND state = ?2",
        params![seq, state.as_str()],
    )?;
    moves::moved(&destination, Some(At::state(state)), None);
    Ok(())
}

/// Deletes the tasks at `seqs` (`read_ops::prunable`'s answer) that are still
/// finished in `state` before `cutoff` (one may have been retried or
/// deleted since it was read), with their attempts.
pub(crate) fn prune(
    conn: &Connection,
    state: State,
    cutoff: Timestamp,
    seqs: &[i64],
) -> Result<usize, StoreError> {
    if !state.is_terminal() {
        return Ok(0);
    }
    // The doomed rows once, into a temp table both deletes read: attempts
    // first (they reference the task), then the tasks.
    conn.prepare_cached("DELETE FROM temp.doomed")
        .map_err(db)?
        .execute([])
        .map_err(db)?;
    let mut doom = conn
        .prepare_cached(
            "INSERT INTO temp.doomed (seq, id) \
             SELECT seq, id FROM tasks WHERE seq = ?1 AND state = ?2 AND finished_at < ?3",
        )
        .map_err(db)?;
    for seq in seqs {
        doom.execute(params![seq, state.as_str(), cutoff.as_millis()])
            .map_err(db)?;
    }
    conn.prepare_cached("DELETE FROM attempts WHERE task_id IN (SELECT id FROM temp.doomed)")
        .map_err(db)?
        .execute([])
        .map_err(db)?;
    let deleted = conn
        .prepare_cached("DELETE FROM tasks WHERE seq IN (SELECT seq FROM temp.doomed)")
        .map_err(db)?
        .execute([])
        .map_err(db)?;
    // Finished tasks count by state alone, not by destination.
    for _ in 0..deleted {
        moves::moved("", Some(At::state(state)), None);
    }
    reclaim_free_pages(conn)?;
    Ok(deleted)
}

/// Free pages kept for reuse: new rows take them before the file grows.
pub(crate) const KEEP_FREE_PAGES: i64 = 2048;

/// The most free pages given back per prune batch, so that one batch holds
/// the writer for a bounded time (a few ms on a local disk).
pub(crate) const RECLAIM_STEP_PAGES: i64 = 1024;

/// Gives free pages beyond [`KEEP_FREE_PAGES`] back to the file system,
/// at most [`RECLAIM_STEP_PAGES`] at a time (`auto_vacuum = INCREMENTAL`;
/// a no-op on a file without it).
pub(crate) fn reclaim_free_pages(conn: &Connection) -> Result<(), StoreError> {
    let free: i64 = conn
        .pragma_query_value(None, "freelist_count", |row| row.get(0))
        .map_err(db)?;
    let excess = free - KEEP_FREE_PAGES;
    if excess > 0 {
        // Each step of the statement frees one page: step it to the end
        // (execute_batch steps once).
        // A pragma takes no parameters; the number is ours, not a caller's.
        let mut stmt = conn
            .prepare(&format!(
                "PRAGMA incremental_vacuum({})",
                excess.min(RECLAIM_STEP_PAGES)
            ))
            .map_err(db)?;
        let mut rows = stmt.query([]).map_err(db)?;
        while rows.next().map_err(db)?.is_some() {}
    }
    Ok(())
}

/// Failed or canceled → pending, due at `run_at`, with a fresh budget;
/// made with `acting`'s key (checked live, the task its tenant's), under
/// the task's tenant's `max_pending`.
pub(crate) fn retry(
    conn: &Connection,
    id: &TaskId,
    run_at: Timestamp,
    now: Timestamp,
    acting: Option<&Acting>,
) -> Result<Task, StoreError> {
    if let Some(acting) = acting {
        check_acting(conn, acting)?;
    }
    let Some(Stored { seq, task }) = rows::load(conn, id)? else {
        return Err(StoreError::NotFound);
    };
    if acting.is_some_and(|a| task.tenant.as_deref() != Some(a.tenant.as_str())) {
        return Err(StoreError::NotFound);
    }
    tc_model::retry_by_hand(task.state).map_err(|e| StoreError::NotRetryable(e.from))?;
    let tenant = tc_model::tenant::stored_tenant(task.tenant.as_deref());
    if let Admission::OverPending(limit) = admit_retry(conn, tenant, &mut RetryQuota::default())? {
        return Err(StoreError::QuotaExceeded { limit });
    }
    retry_seq(conn, (seq, task.state, &task.destination), run_at, now)?;
    load_seq(conn, seq)
}

/// The retry's write of the task at `seq`, read in `state`.
pub(super) fn retry_seq(
    conn: &Connection,
    (seq, state, destination): (i64, State, &str),
    run_at: Timestamp,
    now: Timestamp,
) -> Result<(), StoreError> {
    let to = tc_model::retry_by_hand(state).map_err(|e| StoreError::NotRetryable(e.from))?;
    write_one(
        conn,
        "UPDATE tasks SET state = ?3, attempts_before_retry = attempt, error = NULL, \
                          http_status = NULL, result = NULL, result_content_type = NULL, \
                          finished_at = NULL, lease_until = NULL, next_run_at = ?4, \
                          updated_at = ?5 \
         WHERE seq = ?1 AND state = ?2",
        params![
            seq,
            state.as_str(),
            to.as_str(),
            run_at.as_millis(),
            now.as_millis()
        ],
    )?;
    let back = At::pending(run_at.as_millis());
    moves::moved(destination, Some(At::state(state)), Some(back));
    Ok(())
}

/// Whether `quota` admits one more retry of a task of `tenant` (as stored,
/// `''` for none): its `max_pending` and its open tasks are read once per
/// transaction, the count bounded by the limit.
pub(crate) fn admit_retry(
    conn: &Connection,
    tenant: &str,
    quota: &mut RetryQuota,
) -> Result<Admission, StoreError> {
    if !quota.knows(tenant) {
        let limit: Option<i64> = conn
            .prepare_cached("SELECT max_pending FROM tenants WHERE name = ?1")
            .map_err(db)?
            .query_row([tenant], |row| row.get(0))
            .optional()
            .map_err(db)?
            .flatten();
        let limit = limit.and_then(|l| u64::try_from(l).ok());
        let open = match limit {
            Some(limit) => open_tasks_of(conn, tenant, limit)?,
            None => 0,
        };
        quota.learn(tenant, limit, open);
    }
    Ok(quota.admit(tenant))
}
