//! The write operations, as plain synchronous functions on a connection that
//! is inside a transaction. The writer thread runs each in a savepoint of its
//! batch; tests and tools can call them directly, without a runtime.
//!
//! Every state change asks [`tc_model::transit`] first and writes with the
//! state it read in the WHERE clause, so a write can never land on a row that
//! moved meanwhile.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use tc_model::callback::{self, Callback};
use tc_model::claim::{Claim, ClaimWalk};
use tc_model::completion::CompletionEffect;
use tc_model::destination::{ClaimGate, FairShare};
use tc_model::store::{BULK_CHUNK, BulkAction, Guarded, LeaseLost, StoreError, Submitted};
use tc_model::tenant::Acting;
use tc_model::tenant::quota::{Admission, RetryQuota};
use tc_model::{NewTask, State, Task, TaskId, Timestamp, TraceContext, transit};

use crate::destinations;
use crate::filter::FilterSql;
use crate::rows::{self, Stored, db, nanos, parse_id, parse_state};

/// The error an attempt row and the task carry when a try was cut short by a
/// release or an expired lease.
pub(crate) const INTERRUPTED: &str = "interrupted";
/// The error an open attempt row gets when its task is canceled.
pub(crate) const CANCELED: &str = "canceled";

/// The running tasks whose lease ended, through the partial index
/// `tasks_leased` (pinned for the same reason as the claim's queries, see
/// [`crate::destinations::DUE_OF`]).
pub(crate) const EXPIRED: &str = "SELECT seq, id, state, attempt, max_attempts + attempts_before_retry, \
                                   started_at \
     FROM tasks INDEXED BY tasks_leased \
     WHERE state = 'running' AND lease_until < ?1";

/// Whether deletes raised the seq floor (schema step 6) above the table's
/// last seq: only then must a submit name its seq.
const SEQ_FLOOR_ABOVE: &str =
    "SELECT (SELECT n FROM seq_floor) > coalesce((SELECT max(seq) FROM tasks), 0)";

/// The submit's INSERT with `$seq` as the seq column's value.
macro_rules! submit_sql {
    ($seq:literal) => {
        concat!(
            "INSERT OR FAIL INTO tasks (seq, id, idempotency_key, state, url, body, max_attempts, \
                            timeout_ns, attempt, created_at, updated_at, next_run_at, \
                            schedule_at, schedule_delay_ms, destination, method, headers, \
                            trace_context, callback_url, callback_on, callback_of, tenant, \
                            priority) \
             VALUES (",
            $seq,
            ", ?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, \
                     ?16, ?17, ?18, ?19, ?20) \
             ON CONFLICT (idempotency_key, tenant) DO NOTHING"
        )
    };
}

/// A submit taking SQLite's next rowid (the last seq + 1) as its seq.
const SUBMIT_NEXT_ROWID: &str = submit_sql!("NULL");

/// A submit taking the seq above the floor, when deletes raised it above
/// the last seq.
const SUBMIT_ABOVE_FLOOR: &str = submit_sql!("(SELECT n FROM seq_floor) + 1");

/// Registers a task, or returns the one that already has its key and payload.
/// (The store itself uses [`submit_prepared`]; this is for tests and `raw`.)
#[cfg(any(test, feature = "raw"))]
pub(crate) fn submit(
    conn: &Connection,
    new: &NewTask,
    now: Timestamp,
) -> Result<Submitted, StoreError> {
    submit_prepared(conn, &SubmitRow::of(new), new, now).map(|made| made.into_submitted(new, now))
}

/// What a submit found: a new task (its id; the caller builds the task
/// from what it submitted, off the writer thread), or the one that already
/// had the key.
pub(crate) enum Made {
    /// Inserted with this id.
    Created(TaskId),
    /// The key's task, with the same work.
    Known(Box<Task>),
}

impl Made {
    /// The port's answer, `new` being what was submitted at `now`.
    pub(crate) fn into_submitted(self, new: &NewTask, now: Timestamp) -> Submitted {
        match self {
            Made::Created(id) => Submitted {
                task: Task::submitted(id, new, now),
                created: true,
            },
            Made::Known(task) => Submitted {
                task: *task,
                created: false,
            },
        }
    }
}

/// The columns of a new task's row that are derived from it (parsing its
/// url, encoding JSON): made by the caller before the command is queued,
/// so that the writer thread only binds them.
pub(crate) struct SubmitRow {
    pub(crate) destination: String,
    pub(crate) headers: Option<String>,
    pub(crate) trace: Option<String>,
    pub(crate) callback_on: Option<String>,
}

impl SubmitRow {
    /// The derived columns of `new`.
    pub(crate) fn of(new: &NewTask) -> SubmitRow {
        SubmitRow {
            destination: tc_model::destination_of(new.url()),
            headers: new.headers().to_stored(),
            trace: new.trace().map(TraceContext::to_stored),
            callback_on: new.callback().map(|c| c.on().to_stored()),
        }
    }
}

/// [`submit`] with the derived columns made beforehand (`row` is
/// [`SubmitRow::of`] `new`), answering [`Made`].
pub(crate) fn submit_prepared(
    conn: &Connection,
    row: &SubmitRow,
    new: &NewTask,
    now: Timestamp,
) -> Result<Made, StoreError> {
    submit_as(conn, new_id(now), row, new, now)
}

/// A new task id at `now`: its random bits come from the writer thread's
/// generator (tc-model reads no entropy of its own).
pub(crate) fn new_id(now: Timestamp) -> TaskId {
    let mut random = [0; 10];
    fastrand::fill(&mut random);
    TaskId::new(now, random)
}

/// [`submit`] with the id the task gets if it is new.
fn submit_as(
    conn: &Connection,
    id: TaskId,
    row: &SubmitRow,
    new: &NewTask,
    now: Timestamp,
) -> Result<Made, StoreError> {
    if let Some(acting) = new.acting() {
        crate::tenants::check_acting(conn, &acting)?;
    }
    let tenant = tc_model::tenant::stored_tenant(new.tenant());
    // A tenant's submit under its `max_pending`: the key first (a task it
    // has already answers, full or not), then the count, bounded by the
    // limit. The single writer runs both and the insert with nothing in
    // between, so the count is exact. A submit without a limit (every
    // task without a tenant) goes straight to the insert.
    if let Some(limit) = new.pending_limit().filter(|_| !tenant.is_empty()) {
        if let Some(known) = known_task(conn, new, tenant)? {
            return Ok(known);
        }
        if open_tasks_of(conn, tenant, limit)? >= limit {
            return Err(StoreError::QuotaExceeded { limit });
        }
    }
    let schedule = new.schedule();
    let first_run = schedule.first_run(now);
    let (schedule_at, schedule_delay_ms) = schedule.to_parts();
    // seq above every seq ever handed out, deleted ones included (see
    // schema step 6): a listing cursor must never see a position reused.
    // Unless deletes raised the floor above the table's last seq, SQLite's
    // own next rowid (last + 1) is that: the seq column is left NULL. An
    // explicit seq would make SQLite check it is an integer with an abort,
    // and so give the statement a statement journal (issue 26).
    let floor_above = seq_floor_above(conn)?;
    let inserted = conn
        .prepare_cached(if floor_above {
            SUBMIT_ABOVE_FLOOR
        } else {
            SUBMIT_NEXT_ROWID
        })
        .map_err(db)?
        .execute(params![
            id.as_bytes(),
            new.idempotency_key(),
            State::Pending.as_str(),
            new.url(),
            new.body(),
            new.max_attempts(),
            nanos(new.timeout()),
            now.as_millis(),
            first_run.as_millis(),
            schedule_at,
            schedule_delay_ms,
            row.destination,
            new.method().as_str(),
            row.headers,
            row.trace,
            new.callback().map(Callback::url),
            row.callback_on,
            new.callback_of().map(|id| *id.as_bytes()),
            tenant,
            new.priority(),
        ])
        .map_err(db)?;
    if inserted == 1 {
        return Ok(Made::Created(id));
    }
    // The key is taken: the insert's own probe of the key's unique index
    // found it, so a new key (the common case) costs no lookup of its own.
    known_task(conn, new, tenant)?.ok_or_else(|| {
        StoreError::Unavailable("the idempotency key conflicted, but no task has it".to_owned())
    })
}

/// Whether deletes raised the seq floor above the table's last seq
/// ([`SEQ_FLOOR_ABOVE`]).
pub(crate) fn seq_floor_above(conn: &Connection) -> Result<bool, StoreError> {
    conn.prepare_cached(SEQ_FLOOR_ABOVE)
        .map_err(db)?
        .query_row([], |row| row.get(0))
        .map_err(db)
}

/// The task of `tenant` (as stored) that has `new`'s key: known when it
/// has the same work, else a conflict; `None` when the key is free.
pub(crate) fn known_task(
    conn: &Connection,
    new: &NewTask,
    tenant: &str,
) -> Result<Option<Made>, StoreError> {
    let Some(Stored { task, .. }) = rows::load_by_key(conn, new.idempotency_key(), tenant)? else {
        return Ok(None);
    };
    let fields = new.differing_fields(&task);
    if fields.is_empty() {
        Ok(Some(Made::Known(Box::new(task))))
    } else {
        Err(StoreError::IdempotencyConflict { fields })
    }
}

/// How many of `tenant`'s tasks are pending or running, counted up to
/// `limit` at most: the cost is bounded by the limit however many the
/// tenant has (one seek per state in `tasks_open_by_tenant`).
pub(crate) const OPEN_TASKS_OF: &str = "SELECT count(*) FROM (\
     SELECT 1 FROM tasks INDEXED BY tasks_open_by_tenant \
     WHERE tenant = ?1 AND tenant <> '' AND state IN ('pending', 'running') LIMIT ?2)";

pub(crate) fn open_tasks_of(
    conn: &Connection,
    tenant: &str,
    limit: u64,
) -> Result<u64, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let open: i64 = conn
        .prepare_cached(OPEN_TASKS_OF)
        .map_err(db)?
        .query_row(params![tenant, limit], |row| row.get(0))
        .map_err(db)?;
    Ok(u64::try_from(open).unwrap_or(0))
}

/// Moves up to `n` due pending tasks to running, sharing them fairly over
/// their destinations within the destinations' settings and `gate` (see
/// the port's `claim`); oldest due first within a destination.
pub(crate) fn claim(
    conn: &Connection,
    n: usize,
    now: Timestamp,
    lease: Duration,
    gate: &ClaimGate,
) -> Result<Claim, StoreError> {
    let limits = destinations::claim_limits(conn)?;
    let running = if limits.values().any(|s| s.max_in_flight.is_some()) {
        destinations::running_by_destination(conn)?
    } else {
        Default::default()
    };
    let mut walk = ClaimWalk::new(n, gate);
    if !walk.is_done() {
        destinations::walk_due(conn, now, gate.after.as_deref(), |name| {
            let busy = running.get(name).copied().unwrap_or(0);
            walk.visit(name, gate.claim_allowance(name, limits.get(name), busy))
        })?;
    }
    let (candidates, cursor) = walk.finish();
    let mut plan = FairShare::new(n, candidates, &gate.in_flight);
    let lease_until = now.saturating_add(lease);
    let mut claimed = Vec::with_capacity(n);
    // With tenants, the node's calls in flight by tenant, this claim's
    // takes added as they are made (every destination's share reads it).
    let mut load = gate
        .tenants
        .as_ref()
        .map(|tenants| tenants.in_flight.clone())
        .unwrap_or_default();
    while let Some((destination, want)) = plan.next_take() {
        let Some(tenants) = &gate.tenants else {
            // Tenant-blind (no tenant defined): the destination's oldest.
            let due = crate::priority::due_of(conn, &destination, None, now, want, gate.aging())?;
            plan.taken(due.len());
            for (seq, state) in due {
                claimed.push(claim_one(conn, seq, &state, now, lease_until)?);
            }
            continue;
        };
        let took = crate::tenants::take_shared(
            conn,
            tenants,
            &destination,
            want,
            now,
            gate.aging(),
            &mut load,
            |seq, state| {
                claimed.push(claim_one(conn, seq, state, now, lease_until)?);
                Ok(())
            },
        )?;
        plan.taken(took);
    }
    Ok(Claim {
        tasks: claimed,
        resume_after: destinations::next_waiting(conn)?,
        cursor,
    })
}

/// Moves the pending task at `seq` to running.
fn claim_one(
    conn: &Connection,
    seq: i64,
    state: &str,
    now: Timestamp,
    lease_until: Timestamp,
) -> Result<Task, StoreError> {
    let from = parse_state(state)?;
    let to = transit(from, State::Running)?;
    // No RETURNING: SQLite collects RETURNING rows in an ephemeral table,
    // built and torn down for every statement; reading the row back by seq
    // costs less (callgrind, see docs/performance.md, issue 26).
    write_one(
        conn,
        "UPDATE OR FAIL tasks SET state = ?3, attempt = attempt + 1, started_at = ?4, \
                          lease_until = ?5, next_run_at = NULL, updated_at = ?4 \
         WHERE seq = ?1 AND state = ?2",
        params![
            seq,
            from.as_str(),
            to.as_str(),
            now.as_millis(),
            lease_until.as_millis()
        ],
    )?;
    // The try's history row is written once, when the try ends
    // ([`close_attempt`]); while it runs, reads show it from the task's own
    // attempt and start (`rows::attempts_of`).
    conn.prepare_cached(concat!(
        "SELECT ",
        rows::task_columns!(),
        " FROM tasks WHERE seq = ?1"
    ))
    .map_err(db)?
    .query_row([seq], |row| Ok(rows::task_from_row(row)))
    .map_err(db)?
    .map(|stored| stored.task)
}

/// Extends the lease of each `(id, attempt)` still running with that
/// attempt, `RETURNING` the pairs it extended; the others are read back with
/// their states. Two statements at most, however many pairs: the pairs go
/// in as one JSON array (`[["<task id>", attempt], …]`).
pub(crate) fn heartbeat(
    conn: &Connection,
    running: &[(TaskId, u32)],
    now: Timestamp,
    lease: Duration,
) -> Result<Vec<LeaseLost>, StoreError> {
    let mut running = running.to_vec();
    running.sort_unstable();
    running.dedup();
    let lease_until = now.saturating_add(lease).as_millis();
    let pairs = format!(
        "[{}]",
        running
            .iter()
            .map(|(id, n)| format!("[\"{id}\",{n}]"))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut extend = conn
        .prepare_cached(
            // Never shortens a lease: a late heartbeat must not hand a task to
            // recovery earlier than the lease it already had.
            "UPDATE tasks SET lease_until = max(coalesce(tasks.lease_until, ?2), ?2) \
             FROM (SELECT unhex(value ->> 0, '-') AS id, value ->> 1 AS attempt \
                   FROM json_each(?1)) AS r \
             WHERE tasks.id = r.id AND tasks.attempt = r.attempt AND tasks.state = 'running' \
             RETURNING tasks.id, tasks.attempt",
        )
        .map_err(db)?;
    let mut extended = std::collections::HashSet::with_capacity(running.len());
    let mut rows = extend.query(params![pairs, lease_until]).map_err(db)?;
    while let Some(row) = rows.next().map_err(db)? {
        let id: Vec<u8> = row.get(0).map_err(db)?;
        let attempt: u32 = row.get(1).map_err(db)?;
        extended.insert((parse_id(id)?, attempt));
    }
    drop(rows);
    let lost: Vec<(TaskId, u32)> = running
        .into_iter()
        .filter(|pair| !extended.contains(pair))
        .collect();
    if lost.is_empty() {
        return Ok(Vec::new());
    }
    let ids = format!(
        "[{}]",
        lost.iter()
            .map(|(id, _)| format!("\"{id}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut read = conn
        .prepare_cached(
            "SELECT id, state FROM tasks \
             WHERE id IN (SELECT unhex(value, '-') FROM json_each(?1))",
        )
        .map_err(db)?;
    let mut states = std::collections::HashMap::with_capacity(lost.len());
    let mut rows = read.query(params![ids]).map_err(db)?;
    while let Some(row) = rows.next().map_err(db)? {
        let id: Vec<u8> = row.get(0).map_err(db)?;
        let state: String = row.get(1).map_err(db)?;
        states.insert(parse_id(id)?, parse_state(&state)?);
    }
    Ok(lost
        .into_iter()
        .map(|(id, attempt)| LeaseLost {
            id,
            attempt,
            state: states.get(&id).copied(),
        })
        .collect())
}

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
    // which cost more than this read (callgrind, docs/performance.md,
    // issue 26). An end is counted (`ends`) in the same UPDATE.
    let head: Option<(i64, String, u32, bool, Option<i64>)> = conn
        .prepare_cached(
            "SELECT seq, state, attempt, callback_url IS NOT NULL, started_at \
             FROM tasks WHERE id = ?1",
        )
        .map_err(db)?
        .query_row([id.as_bytes()], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
            ))
        })
        .optional()
        .map_err(db)?;
    let Some((seq, state, current, asks_callback, started_at)) = head else {
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

/// What a task's end creates, after the write that ended the task at
/// `seq` (and counted the end): its callback, when tc-model's rule
/// ([`callback::task_for`]) makes one, inserted in the same transaction,
/// and the parent pointed at it. A key already taken (a client's task with
/// that key) is the callback: the parent names that task.
fn ended(
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
    now: Timestamp,
    callback_bytes: usize,
) -> Result<Task, StoreError> {
    let Some(Stored { seq, task }) = rows::load(conn, id)? else {
        return Err(StoreError::NotFound);
    };
    if task.state.is_terminal() {
        return Ok(task);
    }
    let to = transit(task.state, State::Canceled)?;
    let now_ms = now.as_millis();
    write_one(
        conn,
        "UPDATE tasks SET state = ?4, finished_at = ?5, updated_at = ?5, lease_until = NULL, \
                          next_run_at = NULL, ends = ends + 1, \
                          error = CASE WHEN state = 'running' THEN ?6 ELSE error END \
         WHERE seq = ?1 AND state = ?2 AND attempt = ?3",
        params![
            seq,
            task.state.as_str(),
            task.attempt,
            to.as_str(),
            now_ms,
            CANCELED
        ],
    )?;
    if task.state == State::Running {
        let started_at = task.started_at.map(Timestamp::as_millis);
        let tried = Try {
            id,
            n: task.attempt,
            started_at,
        };
        close_attempt(conn, tried, now, None, Some(CANCELED))?;
    }
    if task.callback.is_some() {
        ended(conn, seq, now, callback_bytes)?;
    }
    load_seq(conn, seq)
}

/// Deletes a finished task and its attempts.
pub(crate) fn delete(conn: &Connection, id: &TaskId) -> Result<(), StoreError> {
    let head: Option<(i64, String)> = conn
        .prepare_cached("SELECT seq, state FROM tasks WHERE id = ?1")
        .map_err(db)?
        .query_row([id.as_bytes()], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
        .map_err(db)?;
    let Some((seq, state)) = head else {
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
    )
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
        crate::tenants::check_acting(conn, acting)?;
    }
    let Some(Stored { seq, task }) = rows::load(conn, id)? else {
        return Err(StoreError::NotFound);
    };
    if acting.is_some_and(|a| task.tenant.as_deref() != Some(a.tenant.as_str())) {
        return Err(StoreError::NotFound);
    }
    tc_model::retry_by_hand(task.state).map_err(|e| StoreError::NotRetryable(e.from))?;
    let tenant = tc_model::tenant::stored_tenant(task.tenant.as_deref());
    if let Admission::OverPending(limit) =
        crate::tenants::admit_retry(conn, tenant, &mut RetryQuota::default())?
    {
        return Err(StoreError::QuotaExceeded { limit });
    }
    retry_seq(conn, seq, task.state, run_at, now)?;
    load_seq(conn, seq)
}

/// The retry's write of the task at `seq`, read in `state`.
fn retry_seq(
    conn: &Connection,
    seq: i64,
    state: State,
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
    )
}

/// One transaction's share of a bulk action.
#[derive(Debug, Default)]
pub(crate) struct BulkChunk {
    /// The covered tasks this step reached, in seq order.
    pub(crate) matched: Vec<TaskId>,
    /// How many of them the action changed.
    pub(crate) applied: u64,
    /// Those that were running when canceled.
    pub(crate) canceled_running: Vec<TaskId>,
    /// The last seq reached.
    pub(crate) last: Option<i64>,
    /// A retry's tasks the allow-list no longer admits.
    pub(crate) refused_url: u64,
}

/// One bulk transaction's bounds and what it is made with.
pub(crate) struct BulkStep<'a> {
    pub(crate) action: BulkAction,
    pub(crate) filter: &'a FilterSql,
    /// The seq range (`after`, `horizon`].
    pub(crate) after: i64,
    pub(crate) horizon: i64,
    pub(crate) now: Timestamp,
    pub(crate) callback_bytes: usize,
    /// The tenant's key it is made with, checked live.
    pub(crate) acting: Option<&'a Acting>,
    /// A retry's allow-list (empty: every url).
    pub(crate) allowed_urls: &'a [String],
}

/// Applies the step's action to the first [`BULK_CHUNK`] tasks its filter
/// covers in its seq range, skipping those it does not apply to, and a
/// retry's tasks that `quota` does not admit.
pub(crate) fn bulk_chunk(
    conn: &Connection,
    step: &BulkStep<'_>,
    quota: &mut RetryQuota,
) -> Result<BulkChunk, StoreError> {
    let BulkStep {
        action,
        filter,
        after,
        horizon,
        now,
        callback_bytes,
        acting,
        allowed_urls,
    } = *step;
    if let Some(acting) = acting {
        crate::tenants::check_acting(conn, acting)?;
    }
    quota.new_transaction();
    let sql = format!(
        "SELECT seq, id, state, tenant, url, callback_url FROM {table} \
         WHERE {driving} AND {rest} AND seq > :after AND seq <= :horizon \
         ORDER BY seq LIMIT :n",
        table = filter.table,
        driving = filter.driving,
        rest = filter.rest,
    );
    let n = i64::try_from(BULK_CHUNK).unwrap_or(i64::MAX);
    type Covered = (i64, Vec<u8>, String, String, String, Option<String>);
    let covered: Vec<Covered> = conn
        .prepare_cached(&sql)
        .map_err(db)?
        .query_map(
            &filter.params(&[(":after", &after), (":horizon", &horizon), (":n", &n)])[..],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                ))
            },
        )
        .map_err(db)?
        .collect::<Result<_, _>>()
        .map_err(db)?;
    let mut chunk = BulkChunk::default();
    for (seq, id, state, tenant, url, callback_url) in covered {
        let id = rows::parse_id(id)?;
        let state = parse_state(&state)?;
        chunk.last = Some(seq);
        chunk.matched.push(id);
        if !action.applies_to(state) {
            continue;
        }
        match action {
            BulkAction::Retry => {
                if tc_model::urls_allowed(&url, callback_url.as_deref(), allowed_urls).is_err() {
                    chunk.refused_url += 1;
                    continue;
                }
                if crate::tenants::admit_retry(conn, &tenant, quota)? != Admission::Admitted {
                    continue;
                }
                retry_seq(conn, seq, state, now, now)?;
            }
            BulkAction::Cancel => {
                cancel(conn, &id, now, callback_bytes)?;
                if state == State::Running {
                    chunk.canceled_running.push(id);
                }
            }
            BulkAction::Delete => delete(conn, &id)?,
        }
        chunk.applied += 1;
    }
    if action == BulkAction::Delete {
        reclaim_free_pages(conn)?;
    }
    Ok(chunk)
}

/// Running → pending without using up the attempt, if still on `attempt`.
pub(crate) fn release(
    conn: &Connection,
    id: &TaskId,
    attempt: u32,
    now: Timestamp,
) -> Result<Guarded, StoreError> {
    let head = match guard(conn, id, attempt)? {
        Ok(head) => head,
        Err(lost) => return Ok(lost),
    };
    let to = transit(head.state, State::Pending)?;
    write_one(
        conn,
        "UPDATE tasks SET state = ?4, attempt = attempt - 1, next_run_at = ?5, \
                          lease_until = NULL, error = ?6, updated_at = ?5 \
         WHERE seq = ?1 AND state = ?2 AND attempt = ?3",
        params![
            head.seq,
            head.state.as_str(),
            attempt,
            to.as_str(),
            now.as_millis(),
            INTERRUPTED
        ],
    )?;
    // The history keeps the interrupted try; the next claim reuses its n.
    let tried = Try {
        id,
        n: attempt,
        started_at: head.started_at,
    };
    close_attempt(conn, tried, now, None, Some(INTERRUPTED))?;
    Ok(Guarded::Applied(to))
}

/// A row of [`EXPIRED`]: seq, id, state, attempt, the attempt limit, and
/// when the try began.
type ExpiredRow = (i64, Vec<u8>, String, u32, u32, Option<i64>);

/// Running tasks whose lease ended before `now` → pending, or → failed when
/// no attempt is left. Returns how many moved.
pub(crate) fn recover_expired(
    conn: &Connection,
    now: Timestamp,
    callback_bytes: usize,
) -> Result<usize, StoreError> {
    let expired: Vec<ExpiredRow> = conn
        .prepare_cached(EXPIRED)
        .map_err(db)?
        .query_map([now.as_millis()], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
            ))
        })
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    let now_ms = now.as_millis();
    let moved = expired.len();
    for (seq, id, state, attempt, attempt_limit, started_at) in expired {
        let from = parse_state(&state)?;
        let to = if attempt < attempt_limit {
            transit(from, State::Pending)?
        } else {
            transit(from, State::Failed)?
        };
        let (next_run_at, finished_at) = match to {
            State::Pending => (Some(now_ms), None),
            _ => (None, Some(now_ms)),
        };
        write_one(
            conn,
            "UPDATE tasks SET state = ?4, next_run_at = ?5, finished_at = ?6, \
                              lease_until = NULL, error = ?7, updated_at = ?8, \
                              ends = ends + (?4 <> 'pending') \
             WHERE seq = ?1 AND state = ?2 AND attempt = ?3",
            params![
                seq,
                from.as_str(),
                attempt,
                to.as_str(),
                next_run_at,
                finished_at,
                INTERRUPTED,
                now_ms
            ],
        )?;
        let id = parse_id(id)?;
        let tried = Try {
            id: &id,
            n: attempt,
            started_at,
        };
        close_attempt(conn, tried, now, None, Some(INTERRUPTED))?;
        if to.is_terminal() {
            ended(conn, seq, now, callback_bytes)?;
        }
    }
    Ok(moved)
}

/// The fields a guarded write checks, and when the try began.
struct Head {
    seq: i64,
    state: State,
    started_at: Option<i64>,
}

/// The task's head if it is running with `attempt`; otherwise the `Lost`
/// answer to give. An unknown id is [`StoreError::NotFound`].
fn guard(
    conn: &Connection,
    id: &TaskId,
    attempt: u32,
) -> Result<Result<Head, Guarded>, StoreError> {
    let row: Option<(i64, String, u32, Option<i64>)> = conn
        .prepare_cached("SELECT seq, state, attempt, started_at FROM tasks WHERE id = ?1")
        .map_err(db)?
        .query_row([id.as_bytes()], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .optional()
        .map_err(db)?;
    let Some((seq, state, current, started_at)) = row else {
        return Err(StoreError::NotFound);
    };
    let state = parse_state(&state)?;
    if state == State::Running && current == attempt {
        Ok(Ok(Head {
            seq,
            state,
            started_at,
        }))
    } else {
        Ok(Err(Guarded::Lost(state)))
    }
}

/// Runs an UPDATE that must change exactly the one row it names. Zero rows
/// would mean the row moved inside this transaction, which the single writer
/// rules out; it is reported rather than ignored.
fn write_one(
    conn: &Connection,
    sql: &str,
    params: &[&dyn rusqlite::ToSql],
) -> Result<(), StoreError> {
    let changed = conn
        .prepare_cached(sql)
        .map_err(db)?
        .execute(params)
        .map_err(db)?;
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::Unavailable(format!(
            "guarded update changed {changed} rows instead of 1"
        )))
    }
}

/// The try that ends: its task, number and start (the task's
/// `started_at`, set by the claim that began it).
struct Try<'a> {
    id: &'a TaskId,
    n: u32,
    started_at: Option<i64>,
}

/// Writes the history row of a try that ended at `now`: once, whole (no
/// row while it runs, so a claim writes none and an end updates none;
/// schema step 23).
fn close_attempt(
    conn: &Connection,
    ended: Try<'_>,
    now: Timestamp,
    http_status: Option<u16>,
    error: Option<&str>,
) -> Result<(), StoreError> {
    let now = now.as_millis();
    let started_at = ended.started_at.unwrap_or(now);
    let duration_ms = if now > started_at {
        now - started_at
    } else {
        0
    };
    conn.prepare_cached(
        "INSERT OR FAIL INTO attempts (task_id, n, started_at, finished_at, http_status, error, \
                                       duration_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .map_err(db)?
    .execute(params![
        ended.id.as_bytes(),
        ended.n,
        started_at,
        now,
        http_status,
        error,
        duration_ms
    ])
    .map_err(db)?;
    Ok(())
}

fn load_seq(conn: &Connection, seq: i64) -> Result<Task, StoreError> {
    rows::load_seq(conn, seq)?
        .map(|stored| stored.task)
        .ok_or_else(|| StoreError::Unavailable(format!("task at seq {seq} vanished")))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tc_model::{Limits, NewTask, Timestamp};

    use super::*;
    use crate::config::StoreConfig;
    use crate::schema::{Target, open_writer};

    fn task(key: &str) -> NewTask {
        NewTask::new(
            "http://127.0.0.1:9/".into(),
            b"{}".to_vec(),
            key.into(),
            3,
            Duration::from_secs(1),
            &Limits::default(),
        )
        .unwrap()
    }

    /// A submit takes SQLite's next rowid unless deletes raised the floor
    /// above the last seq; either way no seq is handed out twice.
    #[test]
    fn a_submit_never_takes_a_deleted_task_s_seq() {
        let conn = open_writer(&Target::new_memory(), &StoreConfig::default()).unwrap();
        let seq_of = |key: &str| -> i64 {
            conn.query_row(
                "SELECT seq FROM tasks WHERE idempotency_key = ?1",
                [key],
                |row| row.get(0),
            )
            .unwrap()
        };
        let submit = |key: &str| {
            super::submit(&conn, &task(key), Timestamp::from_millis(1)).unwrap();
            seq_of(key)
        };
        let check = |key: &str, want: i64| assert_eq!(submit(key), want, "{key}");
        check("a", 1);
        check("b", 2);
        check("c", 3);
        // The last two tasks end and are deleted: the floor is now 3.
        for key in ["b", "c"] {
            conn.execute(
                "UPDATE tasks SET state = 'success' WHERE idempotency_key = ?1",
                [key],
            )
            .unwrap();
            let id = parse_id(
                conn.query_row(
                    "SELECT id FROM tasks WHERE idempotency_key = ?1",
                    [key],
                    |row| row.get(0),
                )
                .unwrap(),
            )
            .unwrap();
            delete(&conn, &id).unwrap();
        }
        check("d", 4);
        check("e", 5);
    }

    /// With tenants in the gate, the tasks without a tenant are one more
    /// tenant of weight 1 however long a tenant's backlog ahead of them:
    /// the first claim of two takes one of "a"'s and the admin's task
    /// (before schema step 18 the walk that found them stopped 512 tasks
    /// past those wanted, and the admin's task waited for "a"'s backlog).
    #[test]
    fn tasks_without_a_tenant_are_reached_behind_any_backlog() {
        let conn = open_writer(&Target::new_memory(), &StoreConfig::default()).unwrap();
        let at = Timestamp::from_millis;
        for i in 0..2_000 {
            let of_a = task(&format!("a{i}")).with_tenant(Some("a".into()), None);
            super::submit(&conn, &of_a, at(1)).unwrap();
        }
        let admin = super::submit(&conn, &task("admin"), at(2)).unwrap().task;
        let gate = ClaimGate {
            tenants: Some(tc_model::tenant::TenantGate::default()),
            ..ClaimGate::default()
        };
        let got = claim(&conn, 2, at(3), Duration::from_secs(60), &gate)
            .unwrap()
            .tasks;
        let admins: Vec<TaskId> = got
            .iter()
            .filter(|t| t.tenant.is_none())
            .map(|t| t.id)
            .collect();
        assert_eq!(got.len(), 2);
        assert_eq!(admins, [admin.id]);
    }
}
