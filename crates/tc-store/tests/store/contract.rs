//! The store contract suite (tc-testkit), run on both SQLite variants.

use std::sync::atomic::{AtomicUsize, Ordering};

use tc_store::{SqliteStore, StoreConfig};
use tc_testkit::store_contract::{Report, failures, run_all};

/// Prints one line per scenario (shown with --nocapture or on failure) and
/// fails naming every scenario that broke.
#[allow(clippy::print_stdout)]
fn check(variant: &str, reports: &[Report]) {
    for report in reports {
        let verdict = if report.verdict.is_ok() {
            "ok"
        } else {
            "FAILED"
        };
        println!(
            "{variant:>6}  {:<50} {verdict:<6} {:>6.0?}",
            report.name, report.elapsed
        );
    }
    assert!(
        reports.len() >= 20,
        "the suite lost scenarios: {}",
        reports.len()
    );
    if let Some(failed) = failures(reports) {
        panic!("store contract on {variant}: {failed}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contract_in_memory() {
    let reports = run_all(|| async {
        SqliteStore::open_in_memory(StoreConfig::default())
            .await
            .unwrap()
    })
    .await;
    check("memory", &reports);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contract_on_file() {
    let dir = tempfile::tempdir().unwrap();
    let made = AtomicUsize::new(0);
    let reports = run_all(|| {
        let n = made.fetch_add(1, Ordering::Relaxed);
        let path = dir.path().join(format!("contract-{n}.db"));
        async move {
            SqliteStore::open(path, StoreConfig::default())
                .await
                .unwrap()
        }
    })
    .await;
    check("file", &reports);
}
