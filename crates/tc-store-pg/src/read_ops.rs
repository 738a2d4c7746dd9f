//! The store's reads as SQL: a task with its history, a page of the
//! listing, a bulk action's dry-run count, health and the next due time.
//! Each read runs in one snapshot (the caller's read-only transaction).

use std::collections::HashMap;

use deadpool_postgres::{Client, GenericClient, Transaction};
use tc_model::store::{Cursor, ListQuery, Page, StoreError, TaskFilter, results_within};
use tc_model::{AttemptRecord, State, Task, TaskId};

use crate::error::db;
use crate::filter::FilterSql;
use crate::rows::{self, ATTEMPT_COLUMNS, Stored, listed_columns, task_columns};

/// Fills the attempt history of every task, in one query, with a running
/// task's try in progress last ([`open_try`]).
pub(crate) async fn fill_attempts<C: GenericClient>(
    tx: &C,
    tasks: &mut [Task],
) -> Result<(), StoreError> {
    if tasks.is_empty() {
        return Ok(());
    }
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE task_id = ANY($1) ORDER BY seq"
        ))
        .await
        .map_err(db)?;
    let ids: Vec<&[u8]> = tasks.iter().map(|t| t.id.as_bytes().as_slice()).collect();
    let found = tx.query(&stmt, &[&ids]).await.map_err(db)?;
    let mut by_task: HashMap<TaskId, usize> = HashMap::with_capacity(tasks.len());
    for (i, task) in tasks.iter_mut().enumerate() {
        task.attempts.clear();
        by_task.insert(task.id, i);
    }
    for row in &found {
        let (id, attempt) = rows::attempt_from_row(row)?;
        if let Some(&i) = by_task.get(&id) {
            tasks[i].attempts.push(attempt);
        }
    }
    for task in tasks.iter_mut() {
        if let Some(open) = open_try(task) {
            task.attempts.push(open);
        }
    }
    Ok(())
}

/// A running task's try in progress, when its history holds no open row
/// for it: since schema step 19 a try's row is written when it ends, and
/// until then the task itself says when it started (a node of schema 16
/// wrote an open row at its claim, read as it is).
fn open_try(task: &Task) -> Option<AttemptRecord> {
    if task.state != State::Running {
        return None;
    }
    let written = task
        .attempts
        .iter()
        .any(|a| a.n == task.attempt && a.finished_at.is_none());
    if written {
        return None;
    }
    Some(AttemptRecord {
        n: task.attempt,
        started_at: task.started_at?,
        finished_at: None,
        http_status: None,
        error: None,
        duration_ms: None,
    })
}

/// The task with its history, or [`StoreError::NotFound`], from one snapshot.
pub(crate) async fn get(tx: &Transaction<'_>, id: &TaskId) -> Result<Task, StoreError> {
    let stmt = tx
        .prepare_cached(concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE id = $1"
        ))
        .await
        .map_err(db)?;
    let row = tx
        .query_opt(&stmt, &[&id.as_bytes().as_slice()])
        .await
        .map_err(db)?
        .ok_or(StoreError::NotFound)?;
    let mut task = [rows::task_from_row(&row)?.task];
    fill_attempts(tx, &mut task).await?;
    let [task] = task;
    Ok(task)
}

/// A page in position (creation) order after the cursor, from one snapshot.
///
/// Positions are inserting transaction ids, and a transaction with a lower id
/// may commit after one with a higher id. So the page ends before the first
/// row at or above `tc_list_horizon()` (schema step 8): the lowest position
/// a transaction that may still add tasks holds, that is one inserting
/// tasks in this schema right now (or one that ended after the snapshot);
/// transactions that insert no task, in this database or another, are
/// passed over. No row can appear below the horizon later, behind a cursor
/// already handed out. A row above it is only held back until those
/// inserts end (milliseconds); the page then says another one follows, and
/// the second value says rows were held.
pub(crate) async fn list(
    tx: &Transaction<'_>,
    query: &ListQuery,
) -> Result<(Page, bool), StoreError> {
    let after = query.after.map_or(0, Cursor::position);
    let filter = FilterSql::new(&query.filter, 3);
    // Along the driving index, at most scan_rows rows: whether the rest of
    // the filter holds, and the result's size (octet_length reads a toasted
    // value's header, not its bytes), so that the page is budgeted before
    // any result is read.
    let scan = i64::try_from(query.scan_rows()).unwrap_or(i64::MAX);
    let stmt = tx
        .prepare_cached(&format!(
            // The horizon is an uncorrelated subquery: computed once, after
            // the snapshot was taken (it reads pg_locks).
            "SELECT pos, ({rest}), coalesce(octet_length(result), 0)::bigint, \
             (SELECT tc_list_horizon()) \
             FROM tasks WHERE {driving} AND pos > $1 ORDER BY pos LIMIT $2",
            rest = filter.rest,
            driving = filter.driving,
        ))
        .await
        .map_err(db)?;
    let scanned_rows = tx
        .query(&stmt, &filter.params(&[&after, &scan]))
        .await
        .map_err(db)?;
    let Scanned {
        matched,
        held_back,
        scanned,
        last_scanned,
    } = scanned(&scanned_rows, after, query.limit)?;
    let candidates = &matched[..matched.len().min(query.limit)];
    let lens: Vec<usize> = candidates.iter().map(|&(_, len)| len).collect();
    let take = results_within(&lens, query.max_result_bytes);
    let mut found: Vec<Stored> = Vec::with_capacity(take);
    if let Some(&(last, _)) = candidates[..take].last() {
        let stmt = tx
            .prepare_cached(&format!(
                "SELECT {columns} FROM tasks \
                 WHERE {driving} AND {rest} AND pos > $1 AND pos <= $2 ORDER BY pos",
                columns = listed_columns!(),
                driving = filter.driving,
                rest = filter.rest,
            ))
            .await
            .map_err(db)?;
        for row in &tx
            .query(&stmt, &filter.params(&[&after, &last]))
            .await
            .map_err(db)?
        {
            found.push(rows::task_from_row(row)?);
        }
    }
    let next = if held_back || matched.len() > take {
        // With every row held back nothing is on the page; the next one
        // starts where this one did.
        Some(Cursor::from_position(found.last().map_or(after, |s| s.pos)))
    } else {
        // A scan that used its whole bound goes on after its last row.
        (scanned == scan).then(|| Cursor::from_position(last_scanned))
    };
    let mut tasks: Vec<Task> = found.into_iter().map(|s| s.task).collect();
    fill_attempts(tx, &mut tasks).await?;
    Ok((Page { tasks, next }, held_back))
}

/// What a listing's scan along the driving index found.
struct Scanned {
    /// The matching rows' positions and result sizes, one past the limit at
    /// most (telling whether more follow).
    matched: Vec<(i64, usize)>,
    /// Whether a row past the horizon stopped the scan.
    held_back: bool,
    /// How many rows were read before the horizon.
    scanned: i64,
    /// The last of them (`after` when none).
    last_scanned: i64,
}

/// Reads the scan's rows (position, match, result size, horizon) up to the
/// horizon or one match past `limit`.
fn scanned(rows: &[tokio_postgres::Row], after: i64, limit: usize) -> Result<Scanned, StoreError> {
    let mut matched: Vec<(i64, usize)> = Vec::new();
    let mut held_back = false;
    let mut scanned = 0i64;
    let mut last_scanned = after;
    for row in rows {
        let pos: i64 = row.try_get(0).map_err(db)?;
        let horizon: i64 = row.try_get(3).map_err(db)?;
        if pos >= horizon {
            held_back = true;
            break;
        }
        scanned += 1;
        last_scanned = pos;
        if row.try_get::<_, bool>(1).map_err(db)? {
            let len: i64 = row.try_get(2).map_err(db)?;
            matched.push((pos, usize::try_from(len).unwrap_or(usize::MAX)));
            if matched.len() > limit {
                break;
            }
        }
    }
    Ok(Scanned {
        matched,
        held_back,
        scanned,
        last_scanned,
    })
}

/// A dry run: how many tasks the filter covers, and the first `sample`.
pub(crate) async fn bulk_count(
    tx: &Transaction<'_>,
    filter: &TaskFilter,
    sample: i64,
) -> Result<(u64, Vec<TaskId>), StoreError> {
    let counted = FilterSql::new(filter, 1);
    let count = tx
        .prepare_cached(&format!(
            "SELECT count(*) FROM tasks WHERE {driving} AND {rest}",
            driving = counted.driving,
            rest = counted.rest,
        ))
        .await
        .map_err(db)?;
    let matched: i64 = tx
        .query_one(&count, &counted.params(&[]))
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    let filter = FilterSql::new(filter, 2);
    let first = tx
        .prepare_cached(&format!(
            "SELECT id FROM tasks WHERE {driving} AND {rest} ORDER BY pos LIMIT $1",
            driving = filter.driving,
            rest = filter.rest,
        ))
        .await
        .map_err(db)?;
    let mut ids = Vec::new();
    for row in tx
        .query(&first, &filter.params(&[&sample]))
        .await
        .map_err(db)?
    {
        let id: Vec<u8> = row.try_get(0).map_err(db)?;
        ids.push(rows::parse_id(id)?);
    }
    Ok((u64::try_from(matched).unwrap_or(0), ids))
}

/// A round trip through a pooled connection.
pub(crate) async fn health(client: &Client) -> Result<(), StoreError> {
    let stmt = client.prepare_cached("SELECT 1").await.map_err(db)?;
    client.query_one(&stmt, &[]).await.map_err(db)?;
    Ok(())
}

/// The earliest due time of a pending task, and the store's now beside it
/// (NULL in caller mode), from one statement.
pub(crate) async fn next_due(client: &Client) -> Result<(Option<i64>, i64), StoreError> {
    let stmt = client
        .prepare_cached(
            "SELECT (SELECT min(next_run_at) FROM queue WHERE state = 'pending'), \
                    tc_now_ms(NULL)",
        )
        .await
        .map_err(db)?;
    let row = client.query_one(&stmt, &[]).await.map_err(db)?;
    Ok((row.try_get(0).map_err(db)?, row.try_get(1).map_err(db)?))
}
