//! Submit: a new task's row (its seq above the floor when one is set), the
//! acting key's check, and the open-task count a tenant's quota reads.

use rusqlite::{Connection, params};
use tc_model::callback::Callback;
use tc_model::store::{StoreError, Submitted};
use tc_model::tenant::Acting;
use tc_model::{NewTask, State, Task, TaskId, Timestamp, TraceContext};

use crate::moves::{self, At};
use crate::rows::{self, Stored, db, nanos};

/// Whether deletes raised the seq floor (schema step 6) above the table's
/// last seq: only then must a submit name its seq.
pub(super) const SEQ_FLOOR_ABOVE: &str =
    "SELECT (SELECT n FROM seq_floor) > coalesce((SELECT max(seq) FROM tasks), 0)";

/// The submit's INSERT with `$seq` as the seq column's value.
macro_rules! submit_sql {
    ($seq:literal) => {
        concat!(
            "INSERT OR FAIL INTO tasks (seq, id, idempotency_key, state, url, body, max_attempts, \
                            timeout_ns, attempt, created_at, updated_at, next_run_at, \
                            schedule_at, schedule_delay_ms, destination, method, headers, \
                            trace_context, callback_url, callback_on, callback_of, tenant, \
                            topic, event_id, subscription, priority, flow_key) \
             VALUES (",
            $seq,
            ", ?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, \
                     ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24) \
             ON CONFLICT (idempotency_key, tenant) DO NOTHING"
        )
    };
}

/// A submit taking SQLite's next rowid (the last seq + 1) as its seq.
pub(super) const SUBMIT_NEXT_ROWID: &str = submit_sql!("NULL");

/// A submit taking the seq above the floor, when deletes raised it above
/// the last seq.
pub(super) const SUBMIT_ABOVE_FLOOR: &str = submit_sql!("(SELECT n FROM seq_floor) + 1");

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
pub(super) fn submit_as(
    conn: &Connection,
    id: TaskId,
    row: &SubmitRow,
    new: &NewTask,
    now: Timestamp,
) -> Result<Made, StoreError> {
    if let Some(acting) = new.acting() {
        check_acting(conn, &acting)?;
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
    let asked = new.first_run();
    let first_run = asked.due_at(now);
    let (schedule_at, schedule_delay_ms) = asked.to_parts();
    // seq above every seq ever handed out, deleted ones included (see
    // schema step 6): a listing cursor must never see a position reused.
    // Unless deletes raised the floor above the table's last seq, SQLite's
    // own next rowid (last + 1) is that: the seq column is left NULL. An
    // explicit seq would make SQLite check it is an integer with an abort,
    // and so give the statement a statement journal.
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
            new.topic_link().map(|l| l.topic.as_str()),
            new.topic_link().map(|l| l.event_id.as_str()),
            new.topic_link().map(|l| l.subscription.as_str()),
            new.priority(),
            tc_model::flow_key::stored_key(new.flow_key()),
        ])
        .map_err(db)?;
    if inserted == 1 {
        let due = At::pending(first_run.as_millis());
        moves::moved(&row.destination, None, Some(due));
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

/// [`StoreError::CredentialGone`] unless `acting`'s key is live: a
/// tenant's delete revokes its keys in the same transaction, so a live key
/// is a live tenant. The single writer runs this check and the write it
/// guards with no revoke or delete in between.
pub(crate) fn check_acting(conn: &Connection, acting: &Acting) -> Result<(), StoreError> {
    let live: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = ?1 AND tenant = ?2)")
        .map_err(db)?
        .query_row(params![acting.key_id, acting.tenant], |row| row.get(0))
        .map_err(db)?;
    if live {
        Ok(())
    } else {
        Err(StoreError::CredentialGone)
    }
}
