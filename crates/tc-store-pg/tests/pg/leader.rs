//! One leader for upkeep: of two stores on one schema one
//! leads; when the leader's session dies (its connection killed, or its
//! store gone with its process) the other takes over within one lease,
//! waiting on the lead's own signal, not on a timer.

use std::time::Duration;

use tc_model::store::Work;
use tc_store_pg::{PgConfig, PgStore};
use tokio::time::Instant;

use crate::support::{Raw, database};

/// The worker's default lease: the hand-over must come within it.
const LEASE: Duration = Duration::from_secs(30);

/// The leader lock's first key ("TCld", leader.rs).
const LEADER_KEY: i64 = 0x5443_6c64;

/// `pg_locks`' rows on the lead of the schema `$2` (`$1`: [`LEADER_KEY`]),
/// held or waited for.
const ON_THE_LEAD: &str = "locktype = 'advisory' AND objsubid = 2 \
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND classid::bigint = $1 \
     AND objid::bigint = (hashtext($2::text)::bigint & 4294967295)";

fn config(schema: &str) -> PgConfig {
    PgConfig {
        schema: Some(schema.to_owned()),
        pool_size: 2,
        leader_check: Duration::from_millis(200),
        ..PgConfig::default()
    }
}

/// Waits until `store` leads (or not, as `want` says); how long it took.
async fn until_leading(store: &PgStore, want: bool) -> Duration {
    let start = Instant::now();
    let mut lead = store.leadership();
    tokio::time::timeout(LEASE, lead.wait_for(|leads| *leads == want))
        .await
        .unwrap_or_else(|_| panic!("leading = {want} not reached within the lease"))
        .unwrap();
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leader_is_replaced_within_one_lease() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let a = PgStore::open(db.url(), config(&schema)).await.unwrap();
    assert!(a.leads_upkeep(), "a lone node leads from its first moment");
    let b = PgStore::open(db.url(), config(&schema)).await.unwrap();
    assert!(!b.leads_upkeep(), "a second node waits for the lead");

    // The leader's session is killed (as when its process or host dies):
    // the lock goes with it.
    let raw = Raw::connect(&db, None, None).await;
    let killed = raw
        .client()
        .query(
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE granted AND {ON_THE_LEAD}"
            ),
            &[&LEADER_KEY, &schema],
        )
        .await
        .unwrap();
    assert_eq!(killed.len(), 1, "exactly one session holds the lead");
    let took = until_leading(&b, true).await;
    assert!(took < LEASE, "took over in {took:?}");
    // The old leader finds out at its next ping and stops leading.
    until_leading(&a, false).await;

    // The new leader's process goes: its store is dropped, the session ends,
    // and the first node, which reconnected and waits, leads again.
    drop(b);
    let took = until_leading(&a, true).await;
    assert!(took < LEASE, "took back over in {took:?}");
    drop(a);
    db.cleanup().await.unwrap();
}

/// How many times the test below looks for a session waiting for the lead
/// (every 50 ms: ten of the follower's tries at `leader_check` 200 ms).
const LOOKS: usize = 40;

/// A node that does not lead never waits for the lead inside PostgreSQL:
/// a statement waiting for a lock holds its snapshot, and with it the
/// database's cleanup horizon, so while it waited no dead row version in
/// the whole database could be removed (claims of a three-node cluster
/// walked about 2,000 dead queue entries). It tries the lock instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_lead_holds_no_wait_in_the_database() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let a = PgStore::open(db.url(), config(&schema)).await.unwrap();
    let b = PgStore::open(db.url(), config(&schema)).await.unwrap();
    assert!(a.leads_upkeep() && !b.leads_upkeep());
    let raw = Raw::connect(&db, None, None).await;
    for _ in 0..LOOKS {
        let waiting: i64 = raw
            .client()
            .query_one(
                &format!("SELECT count(*) FROM pg_locks WHERE NOT granted AND {ON_THE_LEAD}"),
                &[&LEADER_KEY, &schema],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            waiting, 0,
            "a session waits for the lead inside the database"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(a.leads_upkeep() && !b.leads_upkeep());
    drop(b);
    drop(a);
    db.cleanup().await.unwrap();
}

/// Every node is counted, the one that leads and the one that does not
/// (none waiting inside PostgreSQL: each holds the membership lock), so
/// each sizes its grouped statements for the cluster (pace.rs); a node that
/// goes is no longer counted once its session ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_is_counted_whether_it_leads_or_not() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let a = PgStore::open(db.url(), config(&schema)).await.unwrap();
    assert_eq!(tc_store_pg::testing::nodes_counted(&a).await.unwrap(), 1);
    let b = PgStore::open(db.url(), config(&schema)).await.unwrap();
    assert!(a.leads_upkeep() && !b.leads_upkeep());
    assert_eq!(tc_store_pg::testing::nodes_counted(&a).await.unwrap(), 2);
    assert_eq!(tc_store_pg::testing::nodes_counted(&b).await.unwrap(), 2);
    drop(a);
    // The leader's session ends with its store; b takes the lead and is
    // then the only node counted.
    until_leading(&b, true).await;
    assert_eq!(tc_store_pg::testing::nodes_counted(&b).await.unwrap(), 1);
    drop(b);
    db.cleanup().await.unwrap();
}

/// The leader's `ANALYZE` look: a hot table that changed by more than 500
/// rows plus a tenth since its last analyze is analyzed; right after, it is
/// not again. (The server's change counters are flushed by the writing
/// session before it answers `pg_stat_force_next_flush()`'s next query.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_table_that_grew_is_analyzed_once() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let store = PgStore::open(db.url(), config(&schema)).await.unwrap();
    let raw = Raw::connect(&db, None, Some(&schema)).await;
    let rows: Vec<String> = (0..600)
        .map(|n| Raw::insert_task_sql(&format!("k{n}")))
        .collect();
    raw.execute(&rows.join(";")).await.unwrap();
    raw.execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
    raw.execute("SELECT 1").await.unwrap();
    let analyzed = store.analyze_stale_tables().await.unwrap();
    assert!(
        analyzed.iter().any(|t| t == "tasks"),
        "tasks not analyzed: {analyzed:?}"
    );
    let again = store.analyze_stale_tables().await.unwrap();
    assert!(
        !again.iter().any(|t| t == "tasks"),
        "tasks analyzed twice: {again:?}"
    );
    drop(store);
    db.cleanup().await.unwrap();
}
