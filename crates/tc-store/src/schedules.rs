//! Schedules on SQLite: the `schedules` table of schema step
//! 14, one row per schedule, its task template as tc-model's text form,
//! and (step 18) why its latest firing created no task.
//! Synchronous functions on a connection, like the other operations.

use rusqlite::{Connection, OptionalExtension, Row, params};
use tc_model::schedule::{FiringError, Schedule, ScheduleChange, ScheduleSpec};
use tc_model::store::StoreError;
use tc_model::stored::{CorruptColumn, ScheduleRow};
use tc_model::{TaskId, Timestamp};

use crate::rows::db;

const COLUMNS: &str = "name, cron, timezone, task, paused, overlap, catch_up, \
     last_run_at, last_task_id, created_at, updated_at, \
     last_error_code, last_error_message, last_error_at";

/// A schedule row's bad column as the store's error.
fn corrupt(CorruptColumn(what): CorruptColumn) -> StoreError {
    StoreError::Unavailable(format!("corrupt row in schedules: bad {what}"))
}

/// A row's columns as read (outside rusqlite's closure, so that a corrupt
/// row is a [`StoreError`] once [`schedule_of`] reads it).
fn raw(row: &Row<'_>) -> rusqlite::Result<ScheduleRow> {
    Ok(ScheduleRow {
        name: row.get(0)?,
        cron: row.get(1)?,
        timezone: row.get(2)?,
        task: row.get(3)?,
        paused: row.get::<_, i64>(4)? != 0,
        overlap: row.get(5)?,
        catch_up: row.get(6)?,
        last_run_at: row.get(7)?,
        last_task_id: row.get(8)?,
        created_at: row.get(9)?,
        updated_at: row.get(10)?,
        last_error_code: row.get(11)?,
        last_error_message: row.get(12)?,
        last_error_at: row.get(13)?,
    })
}

/// The schedule a row holds ([`ScheduleRow::into_schedule`], the one
/// reading of the columns).
fn schedule_of(row: ScheduleRow) -> Result<Schedule, StoreError> {
    row.into_schedule().map_err(corrupt)
}

/// Every schedule, in name order.
pub(crate) fn all(conn: &Connection) -> Result<Vec<Schedule>, StoreError> {
    let mut stmt = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM schedules ORDER BY name"))
        .map_err(db)?;
    let rows = stmt
        .query_map([], raw)
        .map_err(db)?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(db)?;
    rows.into_iter().map(schedule_of).collect()
}

/// The schedule `name`, if there is one.
fn find(conn: &Connection, name: &str) -> Result<Option<Schedule>, StoreError> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM schedules WHERE name = ?1"))
        .map_err(db)?
        .query_row([name], raw)
        .optional()
        .map_err(db)?
        .map(schedule_of)
        .transpose()
}

/// The schedule `name`, or not found.
pub(crate) fn one(conn: &Connection, name: &str) -> Result<Schedule, StoreError> {
    find(conn, name)?.ok_or(StoreError::NotFound)
}

/// Writes every column of `s`, inserting or replacing its row.
fn write(conn: &Connection, s: &Schedule, insert: bool) -> Result<(), StoreError> {
    let sql = if insert {
        "INSERT INTO schedules (name, cron, timezone, task, paused, overlap, catch_up, \
                                last_run_at, last_task_id, created_at, updated_at, \
                                last_error_code, last_error_message, last_error_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) \
         ON CONFLICT (name) DO NOTHING"
    } else {
        "UPDATE schedules SET cron = ?2, timezone = ?3, task = ?4, paused = ?5, overlap = ?6, \
             catch_up = ?7, last_run_at = ?8, last_task_id = ?9, created_at = ?10, \
             updated_at = ?11, last_error_code = ?12, last_error_message = ?13, \
             last_error_at = ?14 WHERE name = ?1"
    };
    let error = s.last_error.as_ref();
    let changed = conn
        .prepare_cached(sql)
        .map_err(db)?
        .execute(params![
            s.spec.name,
            s.spec.when.cron.as_str(),
            s.spec.when.zone.name(),
            s.spec.task.to_stored(),
            i64::from(s.spec.paused),
            s.spec.overlap.as_str(),
            s.spec.catch_up.as_str(),
            s.last_run_at.map(Timestamp::as_millis),
            s.last_task_id.map(|id| id.as_bytes().to_vec()),
            s.created_at.as_millis(),
            s.updated_at.as_millis(),
            error.map(|e| e.code.as_str()),
            error.map(|e| e.message.as_str()),
            error.map(|e| e.at.as_millis()),
        ])
        .map_err(db)?;
    match (changed, insert) {
        (1, _) => Ok(()),
        (_, true) => Err(StoreError::Exists),
        (_, false) => Err(StoreError::NotFound),
    }
}

/// A new schedule, or [`StoreError::Exists`].
pub(crate) fn create(
    conn: &Connection,
    spec: ScheduleSpec,
    now: Timestamp,
) -> Result<Schedule, StoreError> {
    let schedule = Schedule::new(spec, now);
    write(conn, &schedule, true)?;
    Ok(schedule)
}

/// A change to `name` (read and written in the writer's one transaction).
pub(crate) fn update(
    conn: &Connection,
    name: &str,
    change: ScheduleChange,
    now: Timestamp,
) -> Result<Schedule, StoreError> {
    let schedule = one(conn, name)?.changed(change, now);
    write(conn, &schedule, false)?;
    Ok(schedule)
}

/// Deletes `name`, or not found.
pub(crate) fn delete(conn: &Connection, name: &str) -> Result<(), StoreError> {
    let n = conn
        .prepare_cached("DELETE FROM schedules WHERE name = ?1")
        .map_err(db)?
        .execute([name])
        .map_err(db)?;
    if n == 1 {
        Ok(())
    } else {
        Err(StoreError::NotFound)
    }
}

/// The guarded firing record: applies only to a later fire time, and
/// clears an error of a fire time at or before it.
pub(crate) fn record_firing(
    conn: &Connection,
    name: &str,
    at: Timestamp,
    task: TaskId,
) -> Result<bool, StoreError> {
    let n = conn
        .prepare_cached(
            "UPDATE schedules SET last_run_at = ?2, last_task_id = ?3, \
                 last_error_code = CASE WHEN last_error_at > ?2 THEN last_error_code END, \
                 last_error_message = CASE WHEN last_error_at > ?2 THEN last_error_message END, \
                 last_error_at = CASE WHEN last_error_at > ?2 THEN last_error_at END \
             WHERE name = ?1 AND (last_run_at IS NULL OR last_run_at < ?2)",
        )
        .map_err(db)?
        .execute(params![name, at.as_millis(), task.as_bytes().to_vec()])
        .map_err(db)?;
    Ok(n == 1)
}

/// The guarded record of a refused firing: applies only to a fire time
/// later than the last firing's and not earlier than a recorded error's.
pub(crate) fn record_firing_error(
    conn: &Connection,
    name: &str,
    error: &FiringError,
) -> Result<bool, StoreError> {
    let n = conn
        .prepare_cached(
            "UPDATE schedules SET last_error_code = ?2, last_error_message = ?3, \
                 last_error_at = ?4 \
             WHERE name = ?1 AND (last_run_at IS NULL OR last_run_at < ?4) \
               AND (last_error_at IS NULL OR last_error_at <= ?4)",
        )
        .map_err(db)?
        .execute(params![
            name,
            error.code,
            error.message,
            error.at.as_millis()
        ])
        .map_err(db)?;
    Ok(n == 1)
}
