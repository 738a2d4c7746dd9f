//! Statistics kept current while the hot tables grow: the upkeep leader
//! (leader.rs) runs `ANALYZE` on a hot table once its
//! rows changed by [`MIN_CHANGES`] plus [`CHANGED_SHARE`] of its live rows
//! since the last analyze, looking every [`ANALYZE_EVERY`].
//!
//! Why not leave it to autovacuum: its first look at a new table comes after
//! `autovacuum_naptime` (a minute by default), and until then a young
//! table's plans are made from no statistics at all (measured: the grouped
//! completion's generic plan then walks every running task, 1.54 ms a
//! statement against 0.98 ms analyzed; docs/performance.md). One node does
//! it, not each: the statistics are the database's.

use std::time::Duration;

use deadpool_postgres::{Client, Pool};
use tc_model::store::StoreError;
use tokio::sync::watch;

use crate::error::db;

/// How often the leader looks at the hot tables' change counts.
pub(crate) const ANALYZE_EVERY: Duration = Duration::from_secs(5);

/// The tables every claim, completion and submit writes: the ones whose
/// plans go wrong first. A name missing from the schema is skipped.
pub(crate) const HOT_TABLES: &[&str] = &[
    "tasks",
    "queue",
    "attempts",
    "pending_destinations",
    "due_marks",
    "task_count_deltas",
    "task_count_totals",
];

/// Changes below which a table is never analyzed again (autovacuum's own
/// threshold is 50; each analyze samples up to 30,000 rows, so a few
/// hundred changes is the least worth one).
const MIN_CHANGES: i64 = 500;

/// The share of a table's live rows that must have changed, as autovacuum's
/// `autovacuum_analyze_scale_factor` (0.1).
const CHANGED_SHARE: f64 = 0.1;

/// The hot tables whose statistics are stale by the rule above.
async fn stale_tables(client: &Client) -> Result<Vec<String>, StoreError> {
    let stmt = client
        .prepare_cached(
            "SELECT relname::text FROM pg_stat_user_tables \
             WHERE schemaname = current_schema() AND relname = ANY($1) \
               AND n_mod_since_analyze >= $2::bigint + $3::float8 * greatest(n_live_tup, 0) \
             ORDER BY relname",
        )
        .await
        .map_err(db)?;
    let tables: Vec<&str> = HOT_TABLES.to_vec();
    client
        .query(&stmt, &[&tables, &MIN_CHANGES, &CHANGED_SHARE])
        .await
        .map_err(db)?
        .iter()
        .map(|row| row.try_get(0).map_err(db))
        .collect()
}

/// Analyzes the stale hot tables; answers which it analyzed.
pub(crate) async fn analyze_stale(client: &Client) -> Result<Vec<String>, StoreError> {
    let stale = stale_tables(client).await?;
    for table in &stale {
        // Only names of HOT_TABLES come back, so nothing foreign is spliced.
        if HOT_TABLES.contains(&table.as_str()) {
            client
                .batch_execute(&format!("ANALYZE \"{table}\""))
                .await
                .map_err(db)?;
        }
    }
    Ok(stale)
}

/// Every [`ANALYZE_EVERY`] while this node leads upkeep, analyzes the stale
/// hot tables, until `stop` changes or its sender is gone.
pub(crate) async fn analyze_loop(
    pool: Pool,
    leading: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(ANALYZE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if !*leading.borrow() {
            continue;
        }
        let analyzed = async {
            let client = pool.get().await.map_err(crate::error::pool)?;
            analyze_stale(&client).await
        };
        match analyzed.await {
            Ok(tables) if !tables.is_empty() => {
                tracing::debug!(tables = ?tables, "store_tables_analyzed");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "store_analyze_failed"),
        }
    }
}
