//! Every worker scenario (tc-testkit) on PostgreSQL in database-clock mode,
//! the production mode, with the in-process scripted downstream. They run
//! in real time, like the test-matrix's cells: a paused clock would jump
//! ahead while a query is on the socket.

use std::sync::Arc;
use std::time::Instant;

use tc_downstream::fake::{FakeDownstream, Script};
use tc_store_pg::PgConfig;
use tc_store_pg::testing::TestDatabase;
use tc_testkit::worker_scenarios::{Rig, SCENARIOS, run};

#[allow(clippy::print_stdout)]
#[tokio::test(flavor = "current_thread")]
async fn worker_scenarios_on_postgres() {
    let db = match TestDatabase::connect().await {
        Ok(db) => db,
        Err(skip) => {
            println!("{skip}");
            return;
        }
    };
    let mut failed = Vec::new();
    // `TC_SCENARIO=part` runs only the scenarios whose names hold it.
    let only = std::env::var("TC_SCENARIO").unwrap_or_default();
    for name in SCENARIOS.iter().filter(|name| name.contains(only.as_str())) {
        let store = db
            .open(PgConfig {
                pool_size: 6,
                ..PgConfig::default()
            })
            .await
            .unwrap();
        let script = Script::new();
        let downstream = Arc::new(FakeDownstream::new(Arc::clone(&script)));
        let rig = Rig::new(
            Arc::new(store),
            downstream,
            script,
            "http://downstream.test",
        )
        .with_other_host("http://other.test");
        let started = Instant::now();
        let outcome = run(name, &rig).await;
        println!(
            "postgres  {name:<50} {:<6} {:>6.0?}",
            if outcome.is_ok() { "ok" } else { "FAILED" },
            started.elapsed()
        );
        if let Err(message) = outcome {
            failed.push(format!("{name}: {message}"));
        }
    }
    db.cleanup().await.unwrap();
    assert!(
        failed.is_empty(),
        "worker scenarios on postgres:\n{}",
        failed.join("\n")
    );
}
