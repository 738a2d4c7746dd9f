//! The hot statements' plans: on a new schema and after
//! 100,000 tasks in every state, analyzed by the store itself, neither the
//! plan made for given values nor the generic one a pooled connection
//! keeps reads `tasks`, `queue` or `attempts` whole.

use tc_store_pg::testing::{HotStatement, hot_statements};
use tc_store_pg::{PgConfig, PgStore};

use crate::support::{Raw, database};

/// Fills the schema with `n` tasks (a multiple of 50,000): a quarter
/// pending and due, one in twenty running, the rest ended, each ended or
/// running one with its tries' rows, over 20 destinations (`h:80` among
/// them). Positions within one transaction count up to 65,535, so 50,000 a
/// transaction.
async fn fill(raw: &Raw, n: i64) {
    for part in 0..n / 50_000 {
        let (from, to) = (part * 50_000 + 1, (part + 1) * 50_000);
        raw.execute(&format!(
            "INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns, \
                                attempt, created_at, updated_at, started_at, finished_at, \
                                next_run_at, lease_until) \
             SELECT uuid_send(gen_random_uuid()), 'fill-' || g, s.state, \
                    'http://h' || CASE WHEN g % 20 = 0 THEN '' ELSE (g % 20)::text END || '/x', \
                    '\\x7b7d', 3, 1000000000, \
                    CASE WHEN s.state = 'pending' THEN 0 ELSE 1 END, g, g, \
                    CASE WHEN s.state <> 'pending' THEN g END, \
                    CASE WHEN s.state NOT IN ('pending', 'running') THEN g END, \
                    CASE WHEN s.state = 'pending' THEN g END, \
                    CASE WHEN s.state = 'running' THEN g + 30000 END \
             FROM generate_series({from}, {to}) AS g, LATERAL (SELECT CASE \
                 WHEN g % 20 < 5 THEN 'pending' WHEN g % 20 = 5 THEN 'running' \
                 WHEN g % 20 < 14 THEN 'success' WHEN g % 20 < 18 THEN 'failed' \
                 ELSE 'canceled' END AS state) AS s; \
             INSERT INTO attempts (task_id, n, started_at, finished_at, duration_ms) \
             SELECT id, 1, started_at, finished_at, 1 FROM tasks \
             WHERE state NOT IN ('pending', 'running') AND created_at BETWEEN {from} AND {to}; \
             INSERT INTO queue (pos, state, destination, tenant, flow_key, priority, \
                                next_run_at) \
             SELECT pos, state, destination, tenant, flow_key, priority, next_run_at FROM tasks \
             WHERE state IN ('pending', 'running') AND created_at BETWEEN {from} AND {to};"
        ))
        .await
        .unwrap();
    }
    raw.execute("SELECT pg_stat_force_next_flush()")
        .await
        .unwrap();
}

/// Prepares every hot statement on `raw`'s session, as a pooled
/// connection keeps them (`hot0`, `hot1`, …).
async fn prepare(raw: &Raw) {
    for (k, statement) in hot_statements().iter().enumerate() {
        raw.execute(&format!("PREPARE hot{k} AS {}", statement.sql))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", statement.name));
    }
}

/// The plan of the `k`-th hot statement (prepared) in `mode`
/// (`force_custom_plan`, `force_generic_plan`), as text lines.
async fn plan(raw: &Raw, k: usize, statement: &HotStatement, mode: &str) -> Vec<String> {
    raw.execute(&format!("SET plan_cache_mode = {mode}"))
        .await
        .unwrap();
    let lines = raw
        .client()
        .query(&format!("EXPLAIN EXECUTE hot{k}({})", statement.args), &[])
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", statement.name))
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect();
    raw.execute("RESET plan_cache_mode").await.unwrap();
    lines
}

/// The statements that walk `queue` and reach `tasks` from it by position
/// (schema step 25). On a schema never analyzed the planner costs `tasks`
/// at a few pages and may read it whole for each queue row it met: there
/// are none, and a custom plan is made again at each execution from the
/// table's pages as they are then. A generic plan made then is kept until
/// the upkeep leader's `ANALYZE` (at 500 changed rows and a tenth of the
/// table, `analyze.rs`), which invalidates it: such a plan reads at most
/// those rows. After that both modes use the indexes (checked below).
const REACH_TASKS_BY_QUEUE: [&str; 3] = ["claim", "claim: a tenant's tasks", "recovery"];

/// Every hot statement's plans in `modes` read no big table whole.
async fn check(raw: &Raw, when: &str, modes: &[&str]) {
    for (k, statement) in hot_statements().iter().enumerate() {
        if when == "new schema" && REACH_TASKS_BY_QUEUE.contains(&statement.name) {
            continue;
        }
        for mode in modes {
            let lines = plan(raw, k, statement, mode).await;
            let whole = lines.iter().find(|line| {
                ["tasks", "queue", "attempts"]
                    .iter()
                    .any(|table| line.contains(&format!("Seq Scan on {table}")))
            });
            assert!(
                whole.is_none(),
                "{when}, {}, {mode}: {whole:?}\n{}",
                statement.name,
                lines.join("\n")
            );
        }
    }
}

/// On a new schema the plans made for the values given (a statement's
/// first executions) use the indexes. A generic plan made then may read
/// the young table whole (it is guessed at a few pages, and is); once the
/// store analyzed the grown table, the same prepared statements, in both
/// modes, are planned again and use the indexes: a plan made young does
/// not outlive the table's growth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_statements_use_indexes_on_a_new_schema_and_after_100000_tasks() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(tc_store_pg::SCHEMA_VERSION).await.unwrap();
    let raw = Raw::connect(&db, None, Some(&schema)).await;
    prepare(&raw).await;
    check(&raw, "new schema", &["force_custom_plan"]).await;
    for k in 0..hot_statements().len() {
        plan(&raw, k, &hot_statements()[k], "force_generic_plan").await;
    }

    fill(&raw, 100_000).await;
    let store = PgStore::open(
        db.url(),
        PgConfig {
            schema: Some(schema.clone()),
            pool_size: 2,
            ..PgConfig::default()
        },
    )
    .await
    .unwrap();
    let analyzed = store.analyze_stale_tables().await.unwrap();
    for table in ["tasks", "queue"] {
        assert!(analyzed.iter().any(|t| t == table), "{table}: {analyzed:?}");
    }
    assert!(
        store.analyze_stale_tables().await.unwrap().is_empty(),
        "analyzed again with nothing changed"
    );
    check(
        &raw,
        "after 100,000 tasks",
        &["force_custom_plan", "force_generic_plan"],
    )
    .await;
    store.close();
    drop(store);
    db.cleanup().await.unwrap();
}

/// The claim's question "which flow keys are due" behind one key's
/// backlog of 20,000 due tasks reads no task it does not answer with: the
/// probe for due tasks without a key is one seek in `queue_due_unkeyed`
/// (schema step 26). Before, it had no index with `flow_key` for them and
/// read the whole backlog (a sequential scan of `queue`) on every claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_due_keys_behind_a_keyed_backlog_read_no_task_of_it() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(tc_store_pg::SCHEMA_VERSION).await.unwrap();
    let raw = Raw::connect(&db, None, Some(&schema)).await;
    raw.execute(
        "INSERT INTO queue (pos, state, destination, tenant, flow_key, priority, next_run_at) \
         SELECT g, 'pending', 'h:80', '', 'A', 0, g FROM generate_series(1, 20000) AS g; \
         ANALYZE queue",
    )
    .await
    .unwrap();
    let due_keys = hot_statements()
        .into_iter()
        .find(|statement| statement.name == "claim: the due flow keys")
        .unwrap();
    raw.execute(&format!("PREPARE due_keys AS {}", due_keys.sql))
        .await
        .unwrap();
    let keys: Vec<String> = raw.column("EXECUTE due_keys(NULL, 'h:80', '')").await;
    assert_eq!(keys, ["A"]);
    let lines: Vec<String> = raw
        .column("EXPLAIN (ANALYZE, COSTS OFF) EXECUTE due_keys(NULL, 'h:80', '')")
        .await;
    let plan = lines.join("\n");
    let read_past: u64 = lines
        .iter()
        .filter_map(|line| line.split("Rows Removed by Filter: ").nth(1))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum();
    assert!(!plan.contains("Seq Scan"), "{plan}");
    assert!(read_past < 100, "{read_past} rows read past\n{plan}");
    db.cleanup().await.unwrap();
}

/// A claim of one destination settles it with a statement whose plan does
/// not depend on its arguments: after the first five executions (custom
/// plans, PostgreSQL's rule) the session keeps one generic plan instead of
/// planning every call, as it did for the array of names (a custom plan
/// for each array, which cost more than running the statement).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settle_of_one_destination_keeps_one_generic_plan() {
    let Some(db) = database().await else { return };
    let schema = db.schema_at(tc_store_pg::SCHEMA_VERSION).await.unwrap();
    let raw = Raw::connect(&db, None, Some(&schema)).await;
    let sql = hot_statements()
        .iter()
        .find(|s| s.name == tc_store_pg::testing::SETTLE_ONE)
        .unwrap()
        .sql;
    let settle = raw.client().prepare(sql).await.unwrap();
    for _ in 0..10 {
        raw.client()
            .execute(&settle, &[&"h:80", &None::<i64>])
            .await
            .unwrap();
    }
    let row = raw
        .client()
        .query_one(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements \
             WHERE statement = $1",
            &[&sql],
        )
        .await
        .unwrap();
    let (generic, custom): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((generic, custom), (5, 5), "generic and custom plans");
    drop(raw);
    db.cleanup().await.unwrap();
}
