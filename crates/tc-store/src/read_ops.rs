//! The read operations, as plain synchronous functions on a read connection.
//! Each runs in one read transaction so that a task and its history, or a
//! page, come from one snapshot.

use rusqlite::{Connection, params};
use tc_model::store::{Cursor, ListQuery, Page, StateCounts, StoreError, results_within};
use tc_model::{Task, TaskId, Timestamp};

use crate::rows::{self, db, listed_columns, parse_state, task_from_row};

/// The earliest due time, read from the first entry of `tasks_due` (pinned:
/// see [`crate::write_ops::CLAIM_DUE`]).
pub(crate) const NEXT_DUE: &str =
    "SELECT min(next_run_at) FROM tasks INDEXED BY tasks_due WHERE state = 'pending'";

/// The result sizes of a page of one state, in seq order, from
/// `tasks_by_state`: `length()` of a blob reads the row's header, not the
/// blob, so a page is budgeted before any result is read.
pub(crate) const LIST_STATE_SIZES: &str = "SELECT seq, coalesce(length(result), 0) FROM tasks \
     WHERE state = ?3 AND seq > ?1 ORDER BY seq LIMIT ?2";

/// The result sizes of a page of every state, from the primary key.
pub(crate) const LIST_ALL_SIZES: &str = "SELECT seq, coalesce(length(result), 0) FROM tasks \
     WHERE seq > ?1 ORDER BY seq LIMIT ?2";

/// A page of one state, in seq order, from `tasks_by_state`.
pub(crate) const LIST_STATE: &str = concat!(
    "SELECT ",
    listed_columns!(),
    " FROM tasks WHERE state = ?3 AND seq > ?1 ORDER BY seq LIMIT ?2"
);

/// A page of every state, in seq order, from the primary key.
pub(crate) const LIST_ALL: &str = concat!(
    "SELECT ",
    listed_columns!(),
    " FROM tasks WHERE seq > ?1 ORDER BY seq LIMIT ?2"
);

/// Counts per state, from the counts table the triggers keep (schema step 3).
pub(crate) const COUNT_BY_STATE: &str = "SELECT state, n FROM state_counts ORDER BY state";

/// The task with its history, or [`StoreError::NotFound`].
pub(crate) fn get(conn: &mut Connection, id: &TaskId) -> Result<Task, StoreError> {
    let tx = conn.transaction().map_err(db)?;
    let found = rows::load(&tx, id)?;
    tx.finish().map_err(db)?;
    found.map(|stored| stored.task).ok_or(StoreError::NotFound)
}

/// A page in seq (creation) order after the cursor: first the result sizes
/// of up to `limit + 1` rows, to know how many fit in the budget and whether
/// a page follows; then those rows, without their bodies.
pub(crate) fn list(conn: &mut Connection, query: &ListQuery) -> Result<Page, StoreError> {
    let tx = conn.transaction().map_err(db)?;
    let after = query.after.map_or(0, Cursor::position);
    // One row more than asked tells whether another page follows.
    let fetch = i64::try_from(query.limit.saturating_add(1)).unwrap_or(i64::MAX);
    let sizes: Vec<(i64, usize)> = {
        let sql = if query.state.is_some() {
            LIST_STATE_SIZES
        } else {
            LIST_ALL_SIZES
        };
        let mut stmt = tx.prepare_cached(sql).map_err(db)?;
        let mut rows = match query.state {
            Some(state) => stmt.query(params![after, fetch, state.as_str()]),
            None => stmt.query(params![after, fetch]),
        }
        .map_err(db)?;
        let mut sizes = Vec::new();
        while let Some(row) = rows.next().map_err(db)? {
            let len: i64 = row.get(1).map_err(db)?;
            sizes.push((
                row.get(0).map_err(db)?,
                usize::try_from(len).unwrap_or(usize::MAX),
            ));
        }
        sizes
    };
    let candidates = &sizes[..sizes.len().min(query.limit)];
    let lens: Vec<usize> = candidates.iter().map(|&(_, len)| len).collect();
    let take = results_within(&lens, query.max_result_bytes);
    let more = sizes.len() > take;
    let mut found = Vec::with_capacity(take);
    if take > 0 {
        let sql = if query.state.is_some() {
            LIST_STATE
        } else {
            LIST_ALL
        };
        let mut stmt = tx.prepare_cached(sql).map_err(db)?;
        let n = i64::try_from(take).unwrap_or(i64::MAX);
        let mut rows = match query.state {
            Some(state) => stmt.query(params![after, n, state.as_str()]),
            None => stmt.query(params![after, n]),
        }
        .map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            found.push(task_from_row(row)?);
        }
    }
    let next = if more {
        // With limit 0 nothing is on the page; the next one starts where this
        // one did.
        Some(Cursor::from_position(found.last().map_or(after, |s| s.seq)))
    } else {
        None
    };
    let mut tasks = Vec::with_capacity(found.len());
    for mut stored in found {
        stored.task.attempts = rows::attempts_of(&tx, &stored.task.id)?;
        tasks.push(stored.task);
    }
    tx.finish().map_err(db)?;
    Ok(Page { tasks, next })
}

/// How many tasks are in each state.
pub(crate) fn count_by_state(conn: &Connection) -> Result<StateCounts, StoreError> {
    let mut stmt = conn.prepare_cached(COUNT_BY_STATE).map_err(db)?;
    let mut rows = stmt.query([]).map_err(db)?;
    let mut counts = StateCounts::default();
    while let Some(row) = rows.next().map_err(db)? {
        let state: String = row.get(0).map_err(db)?;
        let count: i64 = row.get(1).map_err(db)?;
        counts.set(parse_state(&state)?, u64::try_from(count).unwrap_or(0));
    }
    Ok(counts)
}

/// The earliest `next_run_at` of a pending task.
pub(crate) fn next_due(conn: &Connection) -> Result<Option<Timestamp>, StoreError> {
    let due: Option<i64> = conn
        .prepare_cached(NEXT_DUE)
        .map_err(db)?
        .query_row([], |row| row.get(0))
        .map_err(db)?;
    Ok(due.map(Timestamp::from_millis))
}
