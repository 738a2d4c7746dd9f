//! The read operations, as plain synchronous functions on a read connection.
//! Each runs in one read transaction so that a task and its history, or a
//! page, come from one snapshot.

use rusqlite::{Connection, params};
use tc_model::store::{
    BULK_SAMPLE, Cursor, ListQuery, Page, StateCounts, StoreError, results_within,
};
use tc_model::{State, Task, TaskId, Timestamp};

use crate::filter::FilterSql;
use crate::rows::{self, db, listed_columns, parse_state, task_from_row};

/// The earliest due time: the least of the destinations' earliest due
/// times, which `destination_tasks` keeps exactly (one row per destination
/// with pending or running tasks). Schema step 23 dropped `tasks_due`,
/// which every submit and claim paid an index entry for.
pub(crate) const NEXT_DUE: &str = "SELECT min(next_due) FROM destination_tasks";

/// Counts per state, in one statement (one snapshot), from what the
/// triggers keep: pending and running as the sums over `destination_tasks`
/// (schema step 12), the finished states from `state_counts`, which holds
/// only those since step 17. Both tables are small (a row per destination
/// with open tasks, three rows), whatever the number of tasks. No ORDER BY:
/// [`count_by_state`] sets each count by its state name.
pub(crate) const COUNT_BY_STATE: &str = "\
    SELECT 'pending', coalesce(sum(pending), 0) FROM destination_tasks \
    UNION ALL SELECT 'running', coalesce(sum(running), 0) FROM destination_tasks \
    UNION ALL SELECT state, n FROM state_counts";

/// The task with its history, or [`StoreError::NotFound`].
pub(crate) fn get(conn: &mut Connection, id: &TaskId) -> Result<Task, StoreError> {
    let tx = conn.transaction().map_err(db)?;
    let found = rows::load(&tx, id)?;
    tx.finish().map_err(db)?;
    found.map(|stored| stored.task).ok_or(StoreError::NotFound)
}

/// A page in seq (creation) order after the cursor: first, along the
/// filter's driving index, the seq, match and result size of up to
/// [`ListQuery::scan_rows`] rows, to know which match, how many fit in the
/// budget and whether a page follows; then the rows taken, without their
/// bodies. `length()` of a blob reads the row's header, not the blob, so a
/// page is budgeted before any result is read.
pub(crate) fn list(conn: &mut Connection, query: &ListQuery) -> Result<Page, StoreError> {
    let tx = conn.transaction().map_err(db)?;
    let after = query.after.map_or(0, Cursor::position);
    let filter = FilterSql::new(&query.filter);
    let scan = i64::try_from(query.scan_rows()).unwrap_or(i64::MAX);
    let mut matched: Vec<(i64, usize)> = Vec::new();
    let mut scanned = 0i64;
    let mut last_scanned = after;
    {
        let mut stmt = tx.prepare_cached(&list_scan_sql(&filter)).map_err(db)?;
        let mut rows = stmt
            .query(&filter.params(&[(":after", &after), (":scan", &scan)])[..])
            .map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            scanned += 1;
            last_scanned = row.get(0).map_err(db)?;
            if row.get::<_, bool>(1).map_err(db)? {
                let len: i64 = row.get(2).map_err(db)?;
                matched.push((last_scanned, usize::try_from(len).unwrap_or(usize::MAX)));
                if matched.len() > query.limit {
                    break;
                }
            }
        }
    }
    let candidates = &matched[..matched.len().min(query.limit)];
    let lens: Vec<usize> = candidates.iter().map(|&(_, len)| len).collect();
    let take = results_within(&lens, query.max_result_bytes);
    let mut found = Vec::with_capacity(take);
    if let Some(&(last, _)) = candidates[..take].last() {
        let sql = format!(
            "SELECT {columns} FROM {table} \
             WHERE {driving} AND {rest} AND seq > :after AND seq <= :last ORDER BY seq",
            columns = listed_columns!(),
            table = filter.table,
            rest = filter.rest,
            driving = filter.driving,
        );
        let mut stmt = tx.prepare_cached(&sql).map_err(db)?;
        let mut rows = stmt
            .query(&filter.params(&[(":after", &after), (":last", &last)])[..])
            .map_err(db)?;
        while let Some(row) = rows.next().map_err(db)? {
            found.push(task_from_row(row)?);
        }
    }
    let next = page_end(
        after,
        found.last().map(|s| s.seq),
        matched.len() > take,
        (scanned == scan).then_some(last_scanned),
    );
    let mut tasks = Vec::with_capacity(found.len());
    for mut stored in found {
        stored.task.attempts = rows::attempts_of(&tx, &stored.task)?;
        tasks.push(stored.task);
    }
    tx.finish().map_err(db)?;
    Ok(Page { tasks, next })
}

/// A page's first query: along the driving index after `:after`, at most
/// `:scan` rows, each with whether the rest of the filter holds and its
/// result's size.
pub(crate) fn list_scan_sql(filter: &FilterSql) -> String {
    format!(
        "SELECT seq, {rest}, coalesce(length(result), 0) FROM {table} \
         WHERE {driving} AND seq > :after ORDER BY seq LIMIT :scan",
        table = filter.table,
        rest = filter.rest,
        driving = filter.driving,
    )
}

/// The highest seq in use: a bulk action covers no task above it.
pub(crate) fn last_seq(conn: &Connection) -> Result<i64, StoreError> {
    conn.prepare_cached("SELECT coalesce(max(seq), 0) FROM tasks")
        .map_err(db)?
        .query_row([], |row| row.get(0))
        .map_err(db)
}

/// A dry run of a bulk action: how many tasks the filter covers now, and
/// the first [`BULK_SAMPLE`] of them, from one snapshot.
pub(crate) fn bulk_count(
    conn: &mut Connection,
    filter: &FilterSql,
) -> Result<(u64, Vec<TaskId>), StoreError> {
    let tx = conn.transaction().map_err(db)?;
    let matched: i64 = tx
        .prepare_cached(&format!(
            "SELECT count(*) FROM {table} WHERE {driving} AND {rest}",
            table = filter.table,
            driving = filter.driving,
            rest = filter.rest,
        ))
        .map_err(db)?
        .query_row(&filter.params(&[])[..], |row| row.get(0))
        .map_err(db)?;
    let sample = i64::try_from(BULK_SAMPLE).unwrap_or(i64::MAX);
    let ids: Vec<Vec<u8>> = tx
        .prepare_cached(&format!(
            "SELECT id FROM {table} WHERE {driving} AND {rest} ORDER BY seq LIMIT :n",
            table = filter.table,
            driving = filter.driving,
            rest = filter.rest,
        ))
        .map_err(db)?
        .query_map(&filter.params(&[(":n", &sample)])[..], |row| row.get(0))
        .map_err(db)?
        .collect::<Result<_, _>>()
        .map_err(db)?;
    let ids = ids
        .into_iter()
        .map(rows::parse_id)
        .collect::<Result<_, _>>()?;
    tx.finish().map_err(db)?;
    Ok((u64::try_from(matched).unwrap_or(0), ids))
}

/// Where the next page starts: after the last task taken when more matched
/// than were taken (with none taken, where this page started); after the
/// last row scanned when the scan used its whole bound; nowhere otherwise.
fn page_end(
    after: i64,
    last_taken: Option<i64>,
    more_matched: bool,
    scan_ended_at: Option<i64>,
) -> Option<Cursor> {
    if more_matched {
        Some(Cursor::from_position(last_taken.unwrap_or(after)))
    } else {
        scan_ended_at.map(Cursor::from_position)
    }
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

/// [`prunable`]'s walk: `tasks_ended`, whose predicate its terms say.
pub(crate) const PRUNABLE: &str = concat!(
    "SELECT seq FROM tasks INDEXED BY tasks_ended WHERE state = ?1 AND ",
    crate::filter::ended_terms!(),
    " AND finished_at < ?2 ORDER BY seq LIMIT ?3"
);

/// The oldest finished tasks in `state` that finished before `cutoff`, at
/// most `limit`, by position: what a prune deletes. A read, run on a reader
/// connection: with none due it walks every finished task in `state`
/// (`tasks_ended` has no finish time), which on the writer held every
/// write for that long (97 ms at 250,000 tasks in phase 12, once per prune
/// round).
pub(crate) fn prunable(
    conn: &Connection,
    state: State,
    cutoff: Timestamp,
    limit: usize,
) -> Result<Vec<i64>, StoreError> {
    if !state.is_terminal() || limit == 0 {
        return Ok(Vec::new());
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(PRUNABLE).map_err(db)?;
    let seqs = stmt
        .query_map(params![state.as_str(), cutoff.as_millis(), limit], |row| {
            row.get(0)
        })
        .map_err(db)?
        .collect::<Result<Vec<i64>, _>>()
        .map_err(db)?;
    Ok(seqs)
}

/// Whether the file holds more free pages than a prune keeps for reuse, so
/// that a prune with nothing to delete still has pages to give back
/// (`write_ops::reclaim_free_pages`).
pub(crate) fn has_pages_to_reclaim(conn: &Connection) -> Result<bool, StoreError> {
    let free: i64 = conn
        .pragma_query_value(None, "freelist_count", |row| row.get(0))
        .map_err(db)?;
    Ok(free > crate::write_ops::KEEP_FREE_PAGES)
}
