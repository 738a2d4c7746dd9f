//! Turning rows into [`Task`]s and back: the one place that knows which
//! column holds what.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Row};
use tc_model::callback::{Callback, CallbackOn};
use tc_model::store::StoreError;
use tc_model::{AttemptRecord, Headers, Schedule, State, Task, TaskId, Timestamp, TraceContext};

/// The columns [`task_from_row`] reads after `body`, in its order: one list
/// for [`task_columns`] and [`listed_columns`].
macro_rules! columns_after_body {
    () => {
        "idempotency_key, attempt, max_attempts, timeout_ns, \
         http_status, result, result_content_type, error, created_at, updated_at, \
         started_at, finished_at, next_run_at, lease_until, attempts_before_retry, \
         schedule_at, schedule_delay_ms, destination, method, headers, trace_context, \
         callback_url, callback_on, callback_of, callback_task_id, ends"
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

fn corrupt(what: &str) -> StoreError {
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
    let id = parse_id(row.get(1).map_err(db)?)?;
    let state: String = row.get(2).map_err(db)?;
    let timeout_ns: i64 = row.get(8).map_err(db)?;
    let task = Task {
        id,
        state: state.parse().map_err(|_| corrupt("state"))?,
        url: row.get(3).map_err(db)?,
        method: row
            .get::<_, String>(23)
            .map_err(db)?
            .parse()
            .map_err(|_| corrupt("method"))?,
        headers: Headers::from_stored(row.get::<_, Option<String>>(24).map_err(db)?.as_deref())
            .map_err(|_| corrupt("headers"))?,
        destination: row.get(22).map_err(db)?,
        body: row.get(4).map_err(db)?,
        idempotency_key: row.get(5).map_err(db)?,
        attempt: to_u32(row.get(6).map_err(db)?, "attempt")?,
        max_attempts: to_u32(row.get(7).map_err(db)?, "max_attempts")?,
        timeout: Duration::from_nanos(u64::try_from(timeout_ns).map_err(|_| corrupt("timeout"))?),
        http_status: opt_status(row.get(9).map_err(db)?)?,
        result: row.get(10).map_err(db)?,
        result_content_type: row.get(11).map_err(db)?,
        error: row.get(12).map_err(db)?,
        created_at: Timestamp::from_millis(row.get(13).map_err(db)?),
        updated_at: Timestamp::from_millis(row.get(14).map_err(db)?),
        started_at: opt_time(row.get(15).map_err(db)?),
        finished_at: opt_time(row.get(16).map_err(db)?),
        next_run_at: opt_time(row.get(17).map_err(db)?),
        lease_until: opt_time(row.get(18).map_err(db)?),
        attempts_before_retry: to_u32(row.get(19).map_err(db)?, "attempts_before_retry")?,
        schedule: Schedule::from_parts(row.get(20).map_err(db)?, row.get(21).map_err(db)?)
            .ok_or_else(|| corrupt("schedule"))?,
        attempts: Vec::new(),
        trace: match row.get::<_, Option<String>>(25).map_err(db)? {
            Some(text) => {
                Some(TraceContext::from_stored(&text).ok_or_else(|| corrupt("trace_context"))?)
            }
            None => None,
        },
        callback: match (
            row.get::<_, Option<String>>(26).map_err(db)?,
            row.get::<_, Option<String>>(27).map_err(db)?,
        ) {
            (Some(url), Some(on)) => Some(
                Callback::new(
                    url,
                    CallbackOn::from_stored(&on).ok_or_else(|| corrupt("callback_on"))?,
                )
                .map_err(|_| corrupt("callback_url"))?,
            ),
            (None, None) => None,
            _ => return Err(corrupt("callback")),
        },
        callback_of: opt_id(row.get(28).map_err(db)?)?,
        callback_task_id: opt_id(row.get(29).map_err(db)?)?,
        ends: to_u32(row.get(30).map_err(db)?, "ends")?,
    };
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
        id.as_bytes(),
    )
}

/// The task with this idempotency key and its history, if there is one.
pub(crate) fn load_by_key(conn: &Connection, key: &str) -> Result<Option<Stored>, StoreError> {
    load_where(
        conn,
        concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE idempotency_key = ?1"
        ),
        key,
    )
}

/// The task at this store position and its history, if there is one.
pub(crate) fn load_seq(conn: &Connection, seq: i64) -> Result<Option<Stored>, StoreError> {
    load_where(
        conn,
        concat!("SELECT ", task_columns!(), " FROM tasks WHERE seq = ?1"),
        seq,
    )
}

fn load_where(
    conn: &Connection,
    sql: &str,
    key: impl rusqlite::ToSql,
) -> Result<Option<Stored>, StoreError> {
    let found = conn
        .prepare_cached(sql)
        .map_err(db)?
        .query_row([key], |row| Ok(task_from_row(row)))
        .optional()
        .map_err(db)?
        .transpose()?;
    match found {
        Some(mut stored) => {
            stored.task.attempts = attempts_of(conn, &stored.task.id)?;
            Ok(Some(stored))
        }
        None => Ok(None),
    }
}

/// Every try of the task, oldest first.
pub(crate) fn attempts_of(
    conn: &Connection,
    id: &TaskId,
) -> Result<Vec<AttemptRecord>, StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT n, started_at, finished_at, http_status, error, duration_ms \
             FROM attempts WHERE task_id = ?1 ORDER BY seq",
        )
        .map_err(db)?;
    let mut rows = stmt.query([id.as_bytes()]).map_err(db)?;
    let mut attempts = Vec::new();
    while let Some(row) = rows.next().map_err(db)? {
        let duration_ms: Option<i64> = row.get(5).map_err(db)?;
        attempts.push(AttemptRecord {
            n: to_u32(row.get(0).map_err(db)?, "attempt n")?,
            started_at: Timestamp::from_millis(row.get(1).map_err(db)?),
            finished_at: opt_time(row.get(2).map_err(db)?),
            http_status: opt_status(row.get(3).map_err(db)?)?,
            error: row.get(4).map_err(db)?,
            duration_ms: duration_ms
                .map(|ms| u64::try_from(ms).map_err(|_| corrupt("duration_ms")))
                .transpose()?,
        });
    }
    Ok(attempts)
}

/// An id column as the model's [`TaskId`].
pub(crate) fn parse_id(blob: Vec<u8>) -> Result<TaskId, StoreError> {
    let bytes: [u8; 16] = blob.try_into().map_err(|_| corrupt("id"))?;
    Ok(TaskId::from_bytes(bytes))
}

/// A nullable id column as the model's [`TaskId`].
fn opt_id(blob: Option<Vec<u8>>) -> Result<Option<TaskId>, StoreError> {
    blob.map(parse_id).transpose()
}

/// The state column as the model's [`State`].
pub(crate) fn parse_state(s: &str) -> Result<State, StoreError> {
    s.parse().map_err(|_| corrupt("state"))
}

fn to_u32(v: i64, what: &str) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| corrupt(what))
}

fn opt_status(v: Option<i64>) -> Result<Option<u16>, StoreError> {
    v.map(|s| u16::try_from(s).map_err(|_| corrupt("http_status")))
        .transpose()
}

fn opt_time(v: Option<i64>) -> Option<Timestamp> {
    v.map(Timestamp::from_millis)
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
