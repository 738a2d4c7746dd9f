//! Grouped statements sized for the cluster, not per node: how many grouped
//! statements of one kind a node keeps in flight, and
//! how long a small group waits for company, from the number of nodes on
//! the schema.
//!
//! A grouped statement costs PostgreSQL a fixed ~0.7–1 ms plus a little
//! per call, and a group is about (calls per second) × (statement time) ÷
//! (statements in flight). With four flushers on each node, three nodes
//! kept twelve statements in flight for the same calls, so each grouped a
//! third as many and the statements per task grew with the nodes
//! (../shared/design/postgres-queue-table.md, "Why N nodes are slower").
//! Here the cluster keeps about [`CLUSTER_FLUSHERS`] in flight whatever
//! its size, and on a node that shares, a group smaller than [`GROUP`]
//! waits up to [`LINGER`] for more.
//!
//! The nodes are counted where they already meet: every node's upkeep
//! session (leader.rs) holds the membership lock shared, so the sessions
//! on it are the nodes (`pg_locks`; nothing to register, nothing left
//! behind by a node that died). Sessions waiting for the upkeep lock
//! itself count too: nodes of the versions before the membership lock
//! waited for it there. Counted every [`COUNT_EVERY`] (a node joining is felt
//! within a second; one cheap read of the lock table); one node until the
//! first count.

use std::time::Duration;

use deadpool_postgres::Pool;
use tc_model::store::StoreError;
use tokio::sync::watch;

use crate::error::db;
use crate::leader::{LEADER_KEY, MEMBER_KEY};

/// Grouped statements of one kind the whole cluster keeps in flight.
pub(crate) const CLUSTER_FLUSHERS: usize = 4;

/// A group this large goes at once.
pub(crate) const GROUP: usize = 16;

/// The longest a smaller group waits for more calls on a node that shares
/// the cluster (a lone node never waits: its statements in flight group).
pub(crate) const LINGER: Duration = Duration::from_millis(1);

/// How often a node counts the nodes.
pub(crate) const COUNT_EVERY: Duration = Duration::from_secs(1);

/// How one node's flushers of one kind run now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pace {
    /// Statements of this kind in flight at once on this node.
    pub(crate) flushers: usize,
    /// How long a group smaller than [`GROUP`] waits for more.
    pub(crate) linger: Duration,
}

impl Pace {
    /// The pace of one node of `nodes` (at least one).
    pub(crate) fn for_nodes(nodes: usize) -> Pace {
        let nodes = nodes.max(1);
        Pace {
            // Rounded to the nearest, at least one: 4, 2, 1, 1, …
            flushers: ((CLUSTER_FLUSHERS + nodes / 2) / nodes).max(1),
            linger: if nodes > 1 { LINGER } else { Duration::ZERO },
        }
    }
}

/// How many nodes hold the membership lock of this schema, or hold or
/// wait for its upkeep lock.
pub(crate) async fn count_nodes(pool: &Pool) -> Result<usize, StoreError> {
    let client = pool.get().await.map_err(crate::error::pool)?;
    let stmt = client
        .prepare_cached(
            "SELECT count(DISTINCT pid) FROM pg_locks \
             WHERE locktype = 'advisory' AND objsubid = 2 \
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND classid::bigint = ANY($1) \
               AND objid::bigint = (hashtext(current_schema())::bigint & 4294967295)",
        )
        .await
        .map_err(db)?;
    let keys = [i64::from(LEADER_KEY), i64::from(MEMBER_KEY)];
    let nodes: i64 = client
        .query_one(&stmt, &[&&keys[..]])
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    Ok(usize::try_from(nodes).unwrap_or(1).max(1))
}

/// Counts the nodes every [`COUNT_EVERY`] into `pace` until `stop` changes
/// or its sender is gone. A failed count keeps the last pace.
pub(crate) async fn count_loop(
    pool: Pool,
    pace: watch::Sender<Pace>,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(COUNT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        match count_nodes(&pool).await {
            Ok(nodes) => {
                let now = Pace::for_nodes(nodes);
                pace.send_if_modified(|was| {
                    let changed = *was != now;
                    if changed {
                        tracing::info!(nodes, flushers = now.flushers, "store_cluster_pace");
                    }
                    *was = now;
                    changed
                });
            }
            Err(e) => tracing::warn!(error = %e, "store_node_count_failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_keeps_about_four_statements_in_flight() {
        let check = |nodes: usize, flushers: usize, lingers: bool| {
            let pace = Pace::for_nodes(nodes);
            assert_eq!(pace.flushers, flushers, "{nodes} nodes");
            assert_eq!(!pace.linger.is_zero(), lingers, "{nodes} nodes");
        };
        check(0, 4, false);
        check(1, 4, false);
        check(2, 2, true);
        check(3, 1, true);
        check(8, 1, true);
    }
}
