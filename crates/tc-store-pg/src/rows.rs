//! Turning rows into [`Task`]s: the one place that knows which column holds
//! what.

use std::time::Duration;

use tc_model::State;
use tc_model::store::StoreError;
use tc_model::stored::{AttemptRow, CorruptColumn, TaskRow};
use tc_model::{AttemptRecord, Task, TaskId};
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
         callback_url, callback_on, callback_of, callback_task_id, ends, tenant, \
         topic, event_id, subscription, priority, flow_key"
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

fn corrupt(CorruptColumn(what): CorruptColumn) -> StoreError {
    StoreError::Unavailable(format!("corrupt row in tasks: bad {what}"))
}

/// A task with its listing position.
pub(crate) struct Stored {
    pub(crate) pos: i64,
    pub(crate) task: Task,
}

/// Decodes a row selected with [`task_columns`] (tc-model's
/// [`TaskRow`] reads the columns); the attempt history is left empty.
pub(crate) fn task_from_row(row: &Row) -> Result<Stored, StoreError> {
    let wide = |i: usize| row.try_get::<_, i32>(i).map(i64::from).map_err(db);
    let wide_opt = |i: usize| {
        row.try_get::<_, Option<i32>>(i)
            .map(|v| v.map(i64::from))
            .map_err(db)
    };
    let task = TaskRow {
        id: row.try_get(1).map_err(db)?,
        state: row.try_get(2).map_err(db)?,
        url: row.try_get(3).map_err(db)?,
        body: row.try_get(4).map_err(db)?,
        idempotency_key: row.try_get(5).map_err(db)?,
        attempt: wide(6)?,
        max_attempts: wide(7)?,
        timeout_ns: row.try_get(8).map_err(db)?,
        http_status: wide_opt(9)?,
        result: row.try_get(10).map_err(db)?,
        result_content_type: row.try_get(11).map_err(db)?,
        error: row.try_get(12).map_err(db)?,
        created_at: row.try_get(13).map_err(db)?,
        updated_at: row.try_get(14).map_err(db)?,
        started_at: row.try_get(15).map_err(db)?,
        finished_at: row.try_get(16).map_err(db)?,
        next_run_at: row.try_get(17).map_err(db)?,
        lease_until: row.try_get(18).map_err(db)?,
        attempts_before_retry: wide(19)?,
        schedule_at: row.try_get(20).map_err(db)?,
        schedule_delay_ms: row.try_get(21).map_err(db)?,
        destination: row.try_get(22).map_err(db)?,
        method: row.try_get(23).map_err(db)?,
        headers: row.try_get(24).map_err(db)?,
        trace_context: row.try_get(25).map_err(db)?,
        callback_url: row.try_get(26).map_err(db)?,
        callback_on: row.try_get(27).map_err(db)?,
        callback_of: row.try_get(28).map_err(db)?,
        callback_task_id: row.try_get(29).map_err(db)?,
        ends: wide(30)?,
        tenant: row.try_get(31).map_err(db)?,
        topic: row.try_get(32).map_err(db)?,
        event_id: row.try_get(33).map_err(db)?,
        subscription: row.try_get(34).map_err(db)?,
        priority: wide(35)?,
        flow_key: row.try_get(36).map_err(db)?,
    }
    .into_task()
    .map_err(corrupt)?;
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
    AttemptRow {
        task_id: row.try_get(0).map_err(db)?,
        n: i64::from(row.try_get::<_, i32>(1).map_err(db)?),
        started_at: row.try_get(2).map_err(db)?,
        finished_at: row.try_get(3).map_err(db)?,
        http_status: row.try_get::<_, Option<i32>>(4).map_err(db)?.map(i64::from),
        error: row.try_get(5).map_err(db)?,
        duration_ms: row.try_get(6).map_err(db)?,
    }
    .into_attempt()
    .map_err(corrupt)
}

/// An id column as the model's [`TaskId`].
pub(crate) fn parse_id(bytes: Vec<u8>) -> Result<TaskId, StoreError> {
    tc_model::stored::task_id(bytes, "id").map_err(corrupt)
}

/// The state column as the model's [`State`].
pub(crate) fn parse_state(s: &str) -> Result<State, StoreError> {
    s.parse().map_err(|_| corrupt(CorruptColumn("state")))
}

/// A duration in nanoseconds for `timeout_ns`, saturating.
pub(crate) fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// A duration in milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
