//! Turning rows into [`Task`]s: the one place that knows which column holds
//! what.

use std::time::Duration;

use tc_model::callback::{Callback, CallbackOn};
use tc_model::store::StoreError;
use tc_model::{AttemptRecord, Headers, Schedule, State, Task, TaskId, Timestamp};
use tokio_postgres::Row;

use crate::error::db;

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

/// The task columns [`task_from_row`] reads, in its order.
macro_rules! task_columns {
    () => {
        concat!(
            "pos, id, state, url, body, ",
            $crate::rows::columns_after_body!()
        )
    };
}

/// [`task_columns`] with the request body left out (an empty bytea in its
/// place), for listings, which never read bodies.
macro_rules! listed_columns {
    () => {
        concat!(
            "pos, id, state, url, ''::bytea AS body, ",
            $crate::rows::columns_after_body!()
        )
    };
}
pub(crate) use {columns_after_body, listed_columns, task_columns};

fn corrupt(what: &str) -> StoreError {
    StoreError::Unavailable(format!("corrupt row in tasks: bad {what}"))
}

/// A task with its listing position.
pub(crate) struct Stored {
    pub(crate) pos: i64,
    pub(crate) task: Task,
}

/// Decodes a row selected with [`task_columns`]; the attempt history is left
/// empty.
pub(crate) fn task_from_row(row: &Row) -> Result<Stored, StoreError> {
    let state: String = row.try_get(2).map_err(db)?;
    let timeout_ns: i64 = row.try_get(8).map_err(db)?;
    let task = Task {
        id: parse_id(row.try_get(1).map_err(db)?)?,
        state: parse_state(&state)?,
        url: row.try_get(3).map_err(db)?,
        method: row
            .try_get::<_, &str>(23)
            .map_err(db)?
            .parse()
            .map_err(|_| corrupt("method"))?,
        headers: Headers::from_stored(row.try_get::<_, Option<&str>>(24).map_err(db)?)
            .map_err(|_| corrupt("headers"))?,
        destination: row.try_get(22).map_err(db)?,
        body: row.try_get(4).map_err(db)?,
        idempotency_key: row.try_get(5).map_err(db)?,
        attempt: to_u32(row.try_get(6).map_err(db)?, "attempt")?,
        max_attempts: to_u32(row.try_get(7).map_err(db)?, "max_attempts")?,
        timeout: Duration::from_nanos(u64::try_from(timeout_ns).map_err(|_| corrupt("timeout"))?),
        http_status: opt_status(row.try_get(9).map_err(db)?)?,
        result: row.try_get(10).map_err(db)?,
        result_content_type: row.try_get(11).map_err(db)?,
        error: row.try_get(12).map_err(db)?,
        created_at: Timestamp::from_millis(row.try_get(13).map_err(db)?),
        updated_at: Timestamp::from_millis(row.try_get(14).map_err(db)?),
        started_at: opt_time(row.try_get(15).map_err(db)?),
        finished_at: opt_time(row.try_get(16).map_err(db)?),
        next_run_at: opt_time(row.try_get(17).map_err(db)?),
        lease_until: opt_time(row.try_get(18).map_err(db)?),
        attempts_before_retry: to_u32(row.try_get(19).map_err(db)?, "attempts_before_retry")?,
        schedule: Schedule::from_parts(row.try_get(20).map_err(db)?, row.try_get(21).map_err(db)?)
            .ok_or_else(|| corrupt("schedule"))?,
        attempts: Vec::new(),
        trace: match row.try_get::<_, Option<&str>>(25).map_err(db)? {
            Some(text) => Some(
                tc_model::TraceContext::from_stored(text)
                    .ok_or_else(|| corrupt("trace_context"))?,
            ),
            None => None,
        },
        callback: match (
            row.try_get::<_, Option<String>>(26).map_err(db)?,
            row.try_get::<_, Option<&str>>(27).map_err(db)?,
        ) {
            (Some(url), Some(on)) => Some(
                Callback::new(
                    url,
                    CallbackOn::from_stored(on).ok_or_else(|| corrupt("callback_on"))?,
                )
                .map_err(|_| corrupt("callback_url"))?,
            ),
            (None, None) => None,
            _ => return Err(corrupt("callback")),
        },
        callback_of: opt_id(row.try_get(28).map_err(db)?)?,
        callback_task_id: opt_id(row.try_get(29).map_err(db)?)?,
        ends: to_u32(row.try_get(30).map_err(db)?, "ends")?,
    };
    Ok(Stored {
        pos: row.try_get(0).map_err(db)?,
        task,
    })
}

/// The columns [`attempt_from_row`] reads, in its order.
pub(crate) const ATTEMPT_COLUMNS: &str =
    "task_id, n, started_at, finished_at, http_status, error, duration_ms";

/// Decodes a row selected with [`ATTEMPT_COLUMNS`]: the task it belongs to
/// and the try.
pub(crate) fn attempt_from_row(row: &Row) -> Result<(TaskId, AttemptRecord), StoreError> {
    let duration_ms: Option<i64> = row.try_get(6).map_err(db)?;
    Ok((
        parse_id(row.try_get(0).map_err(db)?)?,
        AttemptRecord {
            n: to_u32(row.try_get(1).map_err(db)?, "attempt n")?,
            started_at: Timestamp::from_millis(row.try_get(2).map_err(db)?),
            finished_at: opt_time(row.try_get(3).map_err(db)?),
            http_status: opt_status(row.try_get(4).map_err(db)?)?,
            error: row.try_get(5).map_err(db)?,
            duration_ms: duration_ms
                .map(|ms| u64::try_from(ms).map_err(|_| corrupt("duration_ms")))
                .transpose()?,
        },
    ))
}

/// An id column as the model's [`TaskId`].
pub(crate) fn parse_id(bytes: Vec<u8>) -> Result<TaskId, StoreError> {
    let bytes: [u8; 16] = bytes.try_into().map_err(|_| corrupt("id"))?;
    Ok(TaskId::from_bytes(bytes))
}

/// A nullable id column as the model's [`TaskId`].
fn opt_id(bytes: Option<Vec<u8>>) -> Result<Option<TaskId>, StoreError> {
    bytes.map(parse_id).transpose()
}

/// The state column as the model's [`State`].
pub(crate) fn parse_state(s: &str) -> Result<State, StoreError> {
    s.parse().map_err(|_| corrupt("state"))
}

fn to_u32(v: i32, what: &str) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| corrupt(what))
}

fn opt_status(v: Option<i32>) -> Result<Option<u16>, StoreError> {
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

/// A duration in milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
