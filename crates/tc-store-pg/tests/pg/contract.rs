//! The store contract suite (tc-testkit), on PostgreSQL in caller-clock mode
//! (the contract sets every time explicitly).

use tc_store_pg::testing::TestDatabase;
use tc_store_pg::{PgClock, PgConfig};
use tc_testkit::store_contract::{failures, run_all};

#[allow(clippy::print_stdout)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contract_on_postgres() {
    let db = match TestDatabase::connect().await {
        Ok(db) => db,
        Err(skip) => {
            println!("{skip}");
            return;
        }
    };
    let reports = run_all(|| async {
        db.open(PgConfig {
            clock: PgClock::Caller,
            pool_size: 8,
            ..PgConfig::default()
        })
        .await
        .unwrap()
    })
    .await;
    db.cleanup().await.unwrap();
    for report in &reports {
        let verdict = if report.verdict.is_ok() {
            "ok"
        } else {
            "FAILED"
        };
        println!(
            "postgres  {:<50} {verdict:<6} {:>6.0?}",
            report.name, report.elapsed
        );
    }
    assert!(reports.len() >= 20, "the suite lost scenarios");
    if let Some(failed) = failures(&reports) {
        panic!("store contract on postgres: {failed}");
    }
}
