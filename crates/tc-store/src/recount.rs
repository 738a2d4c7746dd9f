//! The counts the store keeps of each destination's tasks against a
//! recount from the tasks themselves: what the schema's upgrade tests and
//! the store's count tests compare after each write path. Public for those
//! tests; a read, never called on a hot path.

use rusqlite::Connection;

/// One destination's kept or recounted tasks: its name, pending, running,
/// and the earliest due time of its pending tasks.
pub type DestinationCount = (String, i64, i64, Option<i64>);

/// `destination_tasks` as kept, and as recounted from `tasks`, both in the
/// order of the destinations' names: equal when the counts are exact.
pub fn destination_counts(
    conn: &Connection,
) -> rusqlite::Result<(Vec<DestinationCount>, Vec<DestinationCount>)> {
    let rows = |sql: &str| -> rusqlite::Result<Vec<DestinationCount>> {
        conn.prepare(sql)?
            .query_map([], |row| row.try_into())?
            .collect()
    };
    let kept = rows(
        "SELECT destination, pending, running, next_due FROM destination_tasks \
         ORDER BY destination",
    )?;
    let recounted = rows(
        "SELECT destination, sum(state = 'pending'), sum(state = 'running'), \
                min(iif(state = 'pending', next_run_at, NULL)) \
         FROM tasks WHERE state IN ('pending', 'running') \
         GROUP BY destination ORDER BY destination",
    )?;
    Ok((kept, recounted))
}
