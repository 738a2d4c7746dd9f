//! Schedules on PostgreSQL: the `schedules` table of schema
//! step 13, one row per schedule, its task template as tc-model's text
//! form. Every node's firing loop reads them all; the firing record is a
//! guarded UPDATE (`last_run_at` only moves forward), so nodes that fire
//! the same time in any order leave the latest record. Step 15
//! adds why the latest firing created no task (`last_error`), recorded and
//! cleared by guarded UPDATEs of the same kind.

use deadpool_postgres::GenericClient;
use tc_model::schedule::{FiringError, Schedule, ScheduleChange, ScheduleSpec};
use tc_model::store::StoreError;
use tc_model::stored::{CorruptColumn, ScheduleRow};
use tc_model::{TaskId, Timestamp};
use tokio_postgres::Row;

use crate::error::db;

const COLUMNS: &str = "name, cron, timezone, task, paused, overlap, catch_up, \
     last_run_at, last_task_id, created_at, updated_at, \
     last_error_code, last_error_message, last_error_at";

/// The schedule a row holds: its columns copied into a [`ScheduleRow`],
/// read by [`ScheduleRow::into_schedule`] (the one reading of them).
fn schedule_of(row: &Row) -> Result<Schedule, StoreError> {
    let columns = ScheduleRow {
        name: row.try_get(0).map_err(db)?,
        cron: row.try_get(1).map_err(db)?,
        timezone: row.try_get(2).map_err(db)?,
        task: row.try_get(3).map_err(db)?,
        paused: row.try_get(4).map_err(db)?,
        overlap: row.try_get(5).map_err(db)?,
        catch_up: row.try_get(6).map_err(db)?,
        last_run_at: row.try_get(7).map_err(db)?,
        last_task_id: row.try_get(8).map_err(db)?,
        created_at: row.try_get(9).map_err(db)?,
        updated_at: row.try_get(10).map_err(db)?,
        last_error_code: row.try_get(11).map_err(db)?,
        last_error_message: row.try_get(12).map_err(db)?,
        last_error_at: row.try_get(13).map_err(db)?,
    };
    columns.into_schedule().map_err(|CorruptColumn(what)| {
        StoreError::Unavailable(format!("corrupt row in schedules: bad {what}"))
    })
}

/// Every schedule, in name order.
pub(crate) async fn all(client: &impl GenericClient) -> Result<Vec<Schedule>, StoreError> {
    let stmt = client
        .prepare_cached(&format!("SELECT {COLUMNS} FROM schedules ORDER BY name"))
        .await
        .map_err(db)?;
    client
        .query(&stmt, &[])
        .await
        .map_err(db)?
        .iter()
        .map(schedule_of)
        .collect()
}

/// The schedule `name` (locked when `lock`), or not found.
pub(crate) async fn one(
    client: &impl GenericClient,
    name: &str,
    lock: bool,
) -> Result<Schedule, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM schedules WHERE name = $1{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    let stmt = client.prepare_cached(&sql).await.map_err(db)?;
    match client.query_opt(&stmt, &[&name]).await.map_err(db)? {
        Some(row) => schedule_of(&row),
        None => Err(StoreError::NotFound),
    }
}

/// Writes every column of `s`: an insert that does nothing on a taken name
/// (the primary key decides races between nodes), or an update.
async fn write(client: &impl GenericClient, s: &Schedule, insert: bool) -> Result<(), StoreError> {
    let sql = if insert {
        "INSERT INTO schedules (name, cron, timezone, task, paused, overlap, catch_up, \
                                last_run_at, last_task_id, created_at, updated_at, \
                                last_error_code, last_error_message, last_error_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
         ON CONFLICT (name) DO NOTHING"
    } else {
        "UPDATE schedules SET cron = $2, timezone = $3, task = $4, paused = $5, overlap = $6, \
             catch_up = $7, last_run_at = $8, last_task_id = $9, created_at = $10, \
             updated_at = $11, last_error_code = $12, last_error_message = $13, \
             last_error_at = $14 WHERE name = $1"
    };
    let error = s.last_error.as_ref();
    let error_code = error.map(|e| e.code.as_str());
    let error_message = error.map(|e| e.message.as_str());
    let error_at = error.map(|e| e.at.as_millis());
    let stmt = client.prepare_cached(sql).await.map_err(db)?;
    let last_task_id = s.last_task_id.map(|id| id.as_bytes().to_vec());
    let changed = client
        .execute(
            &stmt,
            &[
                &s.spec.name,
                &s.spec.when.cron.as_str(),
                &s.spec.when.zone.name(),
                &s.spec.task.to_stored(),
                &s.spec.paused,
                &s.spec.overlap.as_str(),
                &s.spec.catch_up.as_str(),
                &s.last_run_at.map(Timestamp::as_millis),
                &last_task_id,
                &s.created_at.as_millis(),
                &s.updated_at.as_millis(),
                &error_code,
                &error_message,
                &error_at,
            ],
        )
        .await
        .map_err(db)?;
    match (changed, insert) {
        (1, _) => Ok(()),
        (_, true) => Err(StoreError::Exists),
        (_, false) => Err(StoreError::NotFound),
    }
}

/// A new schedule, or [`StoreError::Exists`].
pub(crate) async fn create(
    client: &impl GenericClient,
    spec: ScheduleSpec,
    now: Timestamp,
) -> Result<Schedule, StoreError> {
    let schedule = Schedule::new(spec, now);
    write(client, &schedule, true).await?;
    Ok(schedule)
}

/// A change to `name`: its row locked, changed, written, in the caller's
/// transaction.
pub(crate) async fn update(
    client: &impl GenericClient,
    name: &str,
    change: ScheduleChange,
    now: Timestamp,
) -> Result<Schedule, StoreError> {
    let schedule = one(client, name, true).await?.changed(change, now);
    write(client, &schedule, false).await?;
    Ok(schedule)
}

/// Deletes `name`, or not found.
pub(crate) async fn delete(client: &impl GenericClient, name: &str) -> Result<(), StoreError> {
    let stmt = client
        .prepare_cached("DELETE FROM schedules WHERE name = $1")
        .await
        .map_err(db)?;
    match client.execute(&stmt, &[&name]).await.map_err(db)? {
        1 => Ok(()),
        _ => Err(StoreError::NotFound),
    }
}

/// The guarded firing record: applies only to a later fire time (checked
/// by PostgreSQL on the newest row version when two nodes race), and
/// clears an error of a fire time at or before it.
pub(crate) async fn record_firing(
    client: &impl GenericClient,
    name: &str,
    at: Timestamp,
    task: TaskId,
) -> Result<bool, StoreError> {
    let stmt = client
        .prepare_cached(
            "UPDATE schedules SET last_run_at = $2, last_task_id = $3, \
                 last_error_code = CASE WHEN last_error_at > $2 THEN last_error_code END, \
                 last_error_message = CASE WHEN last_error_at > $2 THEN last_error_message END, \
                 last_error_at = CASE WHEN last_error_at > $2 THEN last_error_at END \
             WHERE name = $1 AND (last_run_at IS NULL OR last_run_at < $2)",
        )
        .await
        .map_err(db)?;
    let id = task.as_bytes().to_vec();
    let n = client
        .execute(&stmt, &[&name, &at.as_millis(), &id])
        .await
        .map_err(db)?;
    Ok(n == 1)
}

/// The guarded record of a refused firing: applies only to a fire time
/// later than the last firing's and not earlier than a recorded error's.
pub(crate) async fn record_firing_error(
    client: &impl GenericClient,
    name: &str,
    error: &FiringError,
) -> Result<bool, StoreError> {
    let stmt = client
        .prepare_cached(
            "UPDATE schedules SET last_error_code = $2, last_error_message = $3, \
                 last_error_at = $4 \
             WHERE name = $1 AND (last_run_at IS NULL OR last_run_at < $4) \
               AND (last_error_at IS NULL OR last_error_at <= $4)",
        )
        .await
        .map_err(db)?;
    let n = client
        .execute(
            &stmt,
            &[&name, &error.code, &error.message, &error.at.as_millis()],
        )
        .await
        .map_err(db)?;
    Ok(n == 1)
}
