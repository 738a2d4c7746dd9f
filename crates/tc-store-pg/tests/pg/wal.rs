//! The workload `xtask/perf/pg-wal-per-task-38.sh` reads the WAL of
//!: tasks submitted one by one from 64 callers (grouped by the
//! store as a node's would be), then drained by claims of 32 whose
//! completions run concurrently (with `TC_WAL_HEARTBEAT=1`, one heartbeat
//! per try between its claim and its end). Ordinary runs play 200 tasks and
//! check every one ends; the script runs it with `TC_WAL_TASKS=3000` and
//! `TC_WAL_KEEP=1`, which keeps the schema for `pg_waldump` and prints the
//! WAL positions around the work, and the CPU time the store's own
//! backends spent on it (`PGCPU`: ns in all, tasks, backends).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tc_model::Timestamp;
use tc_model::store::{Tasks, Work};
use tc_store_pg::{PgConfig, PgStore};

use crate::support::{Raw, database, new_task, succeed_at_once};
use tc_testkit::ClaimDue;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wal_workload_ends_every_task() {
    let Some(db) = database().await else { return };
    let tasks: usize = std::env::var("TC_WAL_TASKS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    // One heartbeat per try between its claim and its end (TC_WAL_HEARTBEAT=1).
    let heartbeat = std::env::var("TC_WAL_HEARTBEAT").is_ok_and(|v| v == "1");
    let schema = db.fresh_schema();
    // The store's own backends, told apart from other work on the server
    // by their application name, for their CPU time (`backend_cpu_ns`).
    let name = format!("tc-wal-{schema}");
    let glue = if db.url().contains('?') { '&' } else { '?' };
    let url = format!("{}{glue}application_name={name}", db.url());
    let store = Arc::new(
        PgStore::open(
            &url,
            PgConfig {
                schema: Some(schema.clone()),
                pool_size: 16,
                ..PgConfig::default()
            },
        )
        .await
        .unwrap(),
    );
    let lsn = || db.query_i64("SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint");
    let start = lsn().await.unwrap().unwrap();
    let raw = Raw::connect(&db, None, None).await;
    let cpu_before = backend_cpu_ns(&raw, &name).await;
    let now = Timestamp::default();
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..64 {
        let store = Arc::clone(&store);
        callers.spawn(async move {
            for k in (caller..tasks).step_by(64) {
                store
                    .submit(new_task(&format!("w-{k}")), now)
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(done) = callers.join_next().await {
        done.unwrap();
    }
    let mut ended = 0;
    for _ in 0..tasks {
        if ended == tasks {
            break;
        }
        let claimed = store
            .claim_due(32, now, Duration::from_secs(60), Default::default())
            .await
            .unwrap();
        if heartbeat {
            let running = claimed.iter().map(|t| (t.id, t.attempt)).collect();
            let lost = store
                .heartbeat(running, now, Duration::from_secs(60))
                .await
                .unwrap();
            assert!(lost.is_empty(), "{lost:?}");
        }
        ended += succeed_at_once(&store, claimed, now).await;
    }
    assert_eq!(ended, tasks);
    let end = lsn().await.unwrap().unwrap();
    let cpu = backend_cpu_ns(&raw, &name).await;
    let cpu_ns: u64 = cpu
        .iter()
        .map(|(pid, ns)| ns - cpu_before.get(pid).copied().unwrap_or(0).min(*ns))
        .sum();
    #[allow(clippy::print_stdout)]
    {
        println!("WAL {start} {end} {tasks} {schema}");
        println!("PGCPU {cpu_ns} {tasks} {}", cpu.len());
    }
    if std::env::var("TC_WAL_KEEP").is_err() {
        db.cleanup().await.unwrap();
    }
}

/// The CPU time so far (ns, `/proc/<pid>/schedstat`) of each backend named
/// `name`; none where PostgreSQL runs on another machine.
async fn backend_cpu_ns(raw: &Raw, name: &str) -> HashMap<i32, u64> {
    let rows = raw
        .client()
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap();
    let mut cpu = HashMap::new();
    for row in rows {
        let pid: i32 = row.get(0);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap_or_default();
        if let Some(ns) = stat.split_whitespace().next().and_then(|n| n.parse().ok()) {
            cpu.insert(pid, ns);
        }
    }
    cpu
}
