//! The claim loop's gather: holding fewer free slots than make a useful
//! claim (a quarter of the pool, at least 16), it waits up to
//! `WorkerConfig::claim_gather` for more before it claims, and no longer.

use std::sync::Arc;
use std::time::Duration;

use tc_downstream::fake::{FakeDownstream, Reply, Script, Step};
use tc_testkit::memory_store::MemoryStore;
use tc_testkit::worker_scenarios::Rig;
use tc_worker::WorkerConfig;
use tokio::time::Instant;

/// 32 slots, all busy: one call ends at 10 ms, the other 31 hold for a
/// minute. The task queued behind them starts when the gather gives up,
/// `gather` after that one slot freed.
async fn check(gather: Duration) {
    let store = Arc::new(MemoryStore::new());
    let script = Script::new();
    let downstream = Arc::new(FakeDownstream::new(Arc::clone(&script)));
    let rig = Rig::new(
        store,
        downstream,
        Arc::clone(&script),
        "http://downstream.test",
    )
    .on_paused_clock();
    let ok = Reply::status(200);
    let worker = rig.spawn_worker(WorkerConfig {
        concurrency: 32,
        claim_gather: gather,
        ..rig.config()
    });
    let mut events = worker.control().subscribe();
    // The host is met first: its first call goes alone (first contact).
    script.plan("/warm", [Step::Reply(ok.clone())]);
    let warm = rig.submit("/warm", "warm").await.unwrap().id;
    worker.control().task_submitted();
    while !matches!(events.recv().await, Ok(ended) if ended.task_id == warm && ended.state.is_terminal())
    {
    }
    script.plan(
        "/first",
        [Step::ReplyAfter(Duration::from_millis(10), ok.clone())],
    );
    rig.submit("/first", "first").await.unwrap();
    for i in 0..31 {
        let path = format!("/held/{i}");
        script.plan(
            &path,
            [Step::ReplyAfter(Duration::from_secs(60), ok.clone())],
        );
        rig.submit(&path, &format!("held-{i}")).await.unwrap();
    }
    rig.submit("/next", "next").await.unwrap();
    worker.control().task_submitted();
    tokio::time::timeout(Duration::from_secs(30), script.wait_calls(34))
        .await
        .unwrap();
    let at = |path: &str| -> (Instant, Option<Instant>) {
        script.read(|r| {
            let i = r.calls().iter().position(|c| c.path == path).unwrap();
            (r.calls()[i].at, r.ended_at(i))
        })
    };
    let freed = at("/first").1.unwrap();
    let next = at("/next").0;
    let waited = next.duration_since(freed);
    assert!(
        waited + Duration::from_millis(1) >= gather && waited <= gather + Duration::from_millis(5),
        "the next call started {waited:?} after a slot freed, with a gather of {gather:?}"
    );
    worker.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_claim_waits_for_useful_slots_as_long_as_its_gather_and_no_longer() {
    for gather in [
        tc_worker::DEFAULT_CLAIM_GATHER,
        tc_worker::SHARED_CLAIM_GATHER,
        Duration::from_millis(50),
    ] {
        check(gather).await;
    }
}
