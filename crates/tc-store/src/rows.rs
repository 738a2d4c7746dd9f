//! Turning rows into [`Task`]s and back: the one place that knows which
//! column holds what.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row};
use tc_model::store::StoreError;
use tc_model::stored::{AttemptRow, CorruptColumn, TaskRow};
use tc_model::{AttemptRecord, State, Task, TaskId};

/// The columns [`task_from_row`] reads after `body`, in its order: one list
/// for [`task_columns`] and [`listed_columns`].
macro_rules! columns_after_body {
    () => {
        "idempotency_key, attempt, max_attempts, timeout_ns, \
         http_status, result, result_content_type, error, created_at, updated_at, \
         started_at, finished_at, next_run_at, lease_until, attempts_before_retry, \
         schedule_at, schedule_delay_ms, destination, method, headers, trace_context, \
         callback_url, callback_on, callback_of, callback_task_id, ends, tenant, \
         topic, event_id, subscription, priority, flow_key"
    };
}

/// The columns [`task_from_row`] reads, in its order.
macro_rules! task_columns {
    () => {
        concat!(
            "seq, id, state, url, body, ",
            $crate::rows::columns_after_body!()
        )
    };
}

/// [`task_columns`] with the request body left out (an empty blob in its
/// place), for listings, which never read bodies.
macro_rules! listed_columns {
    () => {
        concat!(
            "seq, id, state, url, x'' AS body, ",
            $crate::rows::columns_after_body!()
        )
    };
}
pub(crate) use {columns_after_body, listed_columns, task_columns};

/// An SQLite failure as the port reports it: unavailable, with SQLite's words.
pub(crate) fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn corrupt(CorruptColumn(what): CorruptColumn) -> StoreError {
    StoreError::Unavailable(format!("corrupt row in tasks: bad {what}"))
}

/// A task with its store position.
pub(crate) struct Stored {
    pub(crate) seq: i64,
    pub(crate) task: Task,
}

/// Decodes a row selected with [`task_columns`]; the attempt history is left
/// empty for [`attempts_of`] to fill.
pub(crate) fn task_from_row(row: &Row<'_>) -> Result<Stored, StoreError> {
    let task = TaskRow {
        id: row.get(1).map_err(db)?,
        state: row.get(2).map_err(db)?,
        url: row.get(3).map_err(db)?,
        body: row.get(4).map_err(db)?,
        idempotency_key: row.get(5).map_err(db)?,
        attempt: row.get(6).map_err(db)?,
        max_attempts: row.get(7).map_err(db)?,
        timeout_ns: row.get(8).map_err(db)?,
        http_status: row.get(9).map_err(db)?,
        result: row.get(10).map_err(db)?,
        result_content_type: row.get(11).map_err(db)?,
        error: row.get(12).map_err(db)?,
        created_at: row.get(13).map_err(db)?,
        updated_at: row.get(14).map_err(db)?,
        started_at: row.get(15).map_err(db)?,
        finished_at: row.get(16).map_err(db)?,
        next_run_at: row.get(17).map_err(db)?,
        lease_until: row.get(18).map_err(db)?,
        attempts_before_retry: row.get(19).map_err(db)?,
        schedule_at: row.get(20).map_err(db)?,
        schedule_delay_ms: row.get(21).map_err(db)?,
        destination: row.get(22).map_err(db)?,
        method: row.get(23).map_err(db)?,
        headers: row.get(24).map_err(db)?,
        trace_context: row.get(25).map_err(db)?,
        callback_url: row.get(26).map_err(db)?,
        callback_on: row.get(27).map_err(db)?,
        callback_of: row.get(28).map_err(db)?,
        callback_task_id: row.get(29).map_err(db)?,
        ends: row.get(30).map_err(db)?,
        tenant: row.get(31).map_err(db)?,
        topic: row.get(32).map_err(db)?,
        event_id: row.get(33).map_err(db)?,
        subscription: row.get(34).map_err(db)?,
        priority: row.get(35).map_err(db)?,
        flow_key: row.get(36).map_err(db)?,
    }
    .into_task()
    .map_err(corrupt)?;
    Ok(Stored {
        seq: row.get(0).map_err(db)?,
        task,
    })
}

/// The task with this id and its history, if there is one.
pub(crate) fn load(conn: &Connection, id: &TaskId) -> Result<Option<Stored>, StoreError> {
    load_where(
        conn,
        concat!("SELECT ", task_columns!(), " FROM tasks WHERE id = ?1"),
        [id.as_bytes()],
    )
}

/// The task of `tenant` (as stored: `''` for none) with this idempotency
/// key and its history, if there is one (the key is unique per tenant).
pub(crate) fn load_by_key(
    conn: &Connection,
    key: &str,
    tenant: &str,
) -> Result<Option<Stored>, StoreError> {
    load_where(
        conn,
        concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE idempotency_key = ?1 AND tenant = ?2"
        ),
        (key, tenant),
    )
}

/// The task at this store position and its history, if there is one.
pub(crate) fn load_seq(conn: &Connection, seq: i64) -> Result<Option<Stored>, StoreError> {
    load_where(
        conn,
        concat!("SELECT ", task_columns!(), " FROM tasks WHERE seq = ?1"),
        [seq],
    )
}

fn load_where(
    conn: &Connection,
    sql: &str,
    key: impl rusqlite::Params,
) -> Result<Option<Stored>, StoreError> {
    let found = conn
        .prepare_cached(sql)
        .map_err(db)?
        .query_row(key, |row| Ok(task_from_row(row)))
        .optional()
        .map_err(db)?
        .transpose()?;
    match found {
        Some(mut stored) => {
            stored.task.attempts = attempts_of(conn, &stored.task)?;
            Ok(Some(stored))
        }
        None => Ok(None),
    }
}

/// Whether a task has `id` (one probe of the id index).
pub(crate) fn exists(conn: &Connection, id: &TaskId) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM tasks WHERE id = ?1)")
        .map_err(db)?
        .query_row([id.as_bytes()], |row| row.get(0))
        .map_err(db)
}

/// Every try of the task, oldest first. A try's row is written once, when
/// it ends (schema step 23): a running task's current try is its own
/// attempt and start, shown last and open.
pub(crate) fn attempts_of(
    conn: &Connection,
    task: &Task,
) -> Result<Vec<AttemptRecord>, StoreError> {
    let id = &task.id;
    let mut stmt = conn
        .prepare_cached(
            "SELECT n, started_at, finished_at, http_status, error, duration_ms \
             FROM attempts WHERE task_id = ?1 ORDER BY seq",
        )
        .map_err(db)?;
    let mut rows = stmt.query([id.as_bytes()]).map_err(db)?;
    let mut attempts = Vec::new();
    while let Some(row) = rows.next().map_err(db)? {
        let (_, attempt) = AttemptRow {
            task_id: id.as_bytes().to_vec(),
            n: row.get(0).map_err(db)?,
            started_at: row.get(1).map_err(db)?,
            finished_at: row.get(2).map_err(db)?,
            http_status: row.get(3).map_err(db)?,
            error: row.get(4).map_err(db)?,
            duration_ms: row.get(5).map_err(db)?,
        }
        .into_attempt()
        .map_err(corrupt)?;
        attempts.push(attempt);
    }
    if task.state == State::Running {
        attempts.push(AttemptRecord {
            n: task.attempt,
            started_at: task.started_at.unwrap_or(task.updated_at),
            finished_at: None,
            http_status: None,
            error: None,
            duration_ms: None,
        });
    }
    Ok(attempts)
}

/// An id column as the model's [`TaskId`].
pub(crate) fn parse_id(blob: Vec<u8>) -> Result<TaskId, StoreError> {
    tc_model::stored::task_id(blob, "id").map_err(corrupt)
}

/// The state column as the model's [`State`].
pub(crate) fn parse_state(s: &str) -> Result<State, StoreError> {
    s.parse().map_err(|_| corrupt(CorruptColumn("state")))
}

/// A duration in nanoseconds for `timeout_ns`, saturating.
pub(crate) fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    #[test]
    fn listed_columns_are_task_columns_without_the_body() {
        assert_eq!(
            listed_columns!().replace("x'' AS body", "body"),
            task_columns!()
        );
    }
}
