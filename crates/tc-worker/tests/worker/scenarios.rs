//! The worker's scenarios (tc-testkit), one test each, on the reference in-memory
//! store and the in-process scripted downstream, on tokio's paused clock:
//! backoff and Retry-After waits are exact and take no real time.
//!
//! `cargo xtask test-matrix` runs the same list for every store adapter ×
//! downstream, including the real client over loopback.

use std::sync::Arc;

use tc_downstream::fake::{FakeDownstream, Script};
use tc_testkit::memory_store::MemoryStore;
use tc_testkit::worker_scenarios::{Rig, run};

async fn check(name: &str) {
    let store = Arc::new(MemoryStore::new());
    let script = Script::new();
    let downstream = Arc::new(FakeDownstream::new(Arc::clone(&script)));
    let rig = Rig::new(store, downstream, script, "http://downstream.test")
        .with_other_host("http://other.test")
        .on_paused_clock();
    if let Err(message) = run(name, &rig).await {
        panic!("scenario {name}: {message}");
    }
}

macro_rules! tests {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(start_paused = true)]
            async fn $name() {
                check(stringify!($name)).await;
            }
        )*
    };
}

tc_testkit::worker_scenarios!(tests);
