//! State counts (schema step 9): state changes append deltas, which never
//! wait on one another; one node at a time folds them into totals, which
//! only the fold writes; a count reads both.
//!
//! Each store runs [`fold_loop`], which folds only on the upkeep leader
//! (leader.rs): every [`FOLD_EVERY`], if this node changed states since its
//! last fold, or one look says another node appended deltas, it folds
//! whatever deltas any node appended. A node that does not lead sends no
//! query; an idle leader sends one a second.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::{Client, Pool};
use tc_model::store::{StateCounts, StoreError};
use tokio::sync::watch;

use crate::error::{db, pool};
use crate::rows::parse_state;

/// How often a node that changed states folds the deltas.
pub(crate) const FOLD_EVERY: Duration = Duration::from_secs(1);

/// How many tasks are in each state: the folded totals plus the deltas not
/// yet folded (schema step 9), from one snapshot.
pub(crate) async fn count_by_state(client: &Client) -> Result<StateCounts, StoreError> {
    let stmt = client
        .prepare_cached(
            "SELECT state, sum(n)::bigint FROM ( \
                 SELECT state, n FROM task_count_totals WHERE destination = '' \
                 UNION ALL \
                 SELECT state, n FROM task_count_deltas \
             ) counted GROUP BY state",
        )
        .await
        .map_err(db)?;
    let mut counts = StateCounts::default();
    for row in client.query(&stmt, &[]).await.map_err(db)? {
        let state: String = row.try_get(0).map_err(db)?;
        let count: i64 = row.try_get(1).map_err(db)?;
        counts.set(parse_state(&state)?, u64::try_from(count).unwrap_or(0));
    }
    Ok(counts)
}

/// The advisory lock's first key for folding counts ("TCcf"); the second is
/// the schema's name hashed.
const FOLD_KEY: i32 = 0x5443_6366;

/// The most deltas one fold takes.
const FOLD_LIMIT: i64 = 100_000;

/// Folds the count deltas appended so far into `task_count_totals`, unless
/// another node is folding right now; returns how many totals rows changed.
/// Only this writes the totals (one node at a time), so no state change ever
/// waits for it; a destination's row goes when it reaches 0.
pub(crate) async fn fold_counts(client: &mut Client) -> Result<usize, StoreError> {
    let tx = client.transaction().await.map_err(db)?;
    let lock = tx
        .prepare_cached("SELECT pg_try_advisory_xact_lock($1, hashtext(current_schema()))")
        .await
        .map_err(db)?;
    let ours: bool = tx
        .query_one(&lock, &[&FOLD_KEY])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    if !ours {
        return Ok(0);
    }
    let fold = tx
        .prepare_cached(
            "WITH gone AS ( \
                 DELETE FROM task_count_deltas \
                 WHERE ctid = ANY (ARRAY(SELECT ctid FROM task_count_deltas LIMIT $1)) \
                 RETURNING state, destination, n \
             ), folded AS ( \
                 SELECT state, '' AS destination, sum(n)::bigint AS n FROM gone GROUP BY state \
                 UNION ALL \
                 SELECT state, destination, sum(n)::bigint FROM gone \
                 WHERE destination <> '' GROUP BY state, destination \
             ) \
             INSERT INTO task_count_totals AS t (state, destination, n) \
             SELECT state, destination, n FROM folded WHERE n <> 0 \
             ORDER BY state, destination \
             ON CONFLICT (state, destination) DO UPDATE SET n = t.n + excluded.n \
             RETURNING state, destination, n",
        )
        .await
        .map_err(db)?;
    let rows = tx.query(&fold, &[&FOLD_LIMIT]).await.map_err(db)?;
    let mut emptied: (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    for row in &rows {
        let destination: String = row.try_get(1).map_err(db)?;
        let n: i64 = row.try_get(2).map_err(db)?;
        if n == 0 && !destination.is_empty() {
            emptied.0.push(row.try_get(0).map_err(db)?);
            emptied.1.push(destination);
        }
    }
    if !emptied.0.is_empty() {
        let drop = tx
            .prepare_cached(
                "DELETE FROM task_count_totals t \
                 USING unnest($1::text[], $2::text[]) AS e(state, destination) \
                 WHERE t.state = e.state AND t.destination = e.destination AND t.n = 0",
            )
            .await
            .map_err(db)?;
        tx.execute(&drop, &[&emptied.0, &emptied.1])
            .await
            .map_err(db)?;
    }
    tx.commit().await.map_err(db)?;
    Ok(rows.len())
}

/// Folds the deltas every [`FOLD_EVERY`] while this node leads upkeep and
/// deltas wait (this node wrote since the last fold, or the look finds
/// some), until `stop` changes or its sender is gone.
pub(crate) async fn fold_loop(
    pool: Pool,
    changed: Arc<AtomicBool>,
    leading: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(FOLD_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        if !*leading.borrow() {
            // The leader folds every node's deltas; ours wait for it.
            changed.store(false, Ordering::Relaxed);
            continue;
        }
        let local = changed.swap(false, Ordering::Relaxed);
        let folded = async {
            let mut client = pool.get().await.map_err(pool_error)?;
            if !local && !deltas_wait(&client).await? {
                return Ok(0);
            }
            fold_counts(&mut client).await
        };
        if let Err(e) = folded.await {
            // Counts stay right (reads add the deltas); the next tick tries again.
            changed.store(true, Ordering::Relaxed);
            tracing::warn!(error = %e, "store_count_fold_failed");
        }
    }
}

/// Whether any node appended deltas not folded yet (one index-free look at
/// the first row).
async fn deltas_wait(client: &Client) -> Result<bool, StoreError> {
    let stmt = client
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM task_count_deltas)")
        .await
        .map_err(db)?;
    client
        .query_one(&stmt, &[])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)
}

fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    pool(e)
}
