//! Destination limits across the cluster: three worker
//! nodes on one PostgreSQL schema share one destination's token bucket and
//! its breaker.
//!
//! The rate test counts tokens, not wall-clock time: the nodes run on a
//! frozen clock (the store on the caller's clock), which only the test
//! moves, so the bucket holds exactly `burst` plus what each step of the
//! clock earns, however fast or loaded the machine is.

use std::sync::Arc;
use std::time::Duration;

use tc_downstream::fake::{FakeDownstream, Reply, Script, Step};
use tc_model::cluster::TokenAsk;
use tc_model::destination::DestinationUpdate;
use tc_model::store::{Destinations, Tasks, Work};
use tc_model::{State, Timestamp};
use tc_store_pg::{PgClock, PgConfig, PgStore};
use tc_worker::{BreakerPolicy, BreakerState, Clock, Worker, WorkerConfig, WorkerMetrics};

use crate::support::{database, new_task};

/// The destination of `support::new_task`.
const DEST: &str = "127.0.0.1:9";

/// The longest any wait here lasts: a bound, never a pace.
const PATIENCE: Duration = Duration::from_secs(30);

fn spawn_nodes(
    stores: &[Arc<PgStore>],
    downstream: &Arc<FakeDownstream>,
    clock: &Clock,
    config: &WorkerConfig,
) -> Vec<Worker<PgStore>> {
    stores
        .iter()
        .map(|store| {
            Worker::spawn(
                Arc::clone(store),
                Arc::clone(downstream),
                config.clone(),
                clock.clone(),
                WorkerMetrics::default(),
            )
        })
        .collect()
}

async fn wait_calls(script: &Script, n: usize) {
    tokio::time::timeout(PATIENCE, script.wait_calls(n))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{n} calls within {PATIENCE:?}: {}",
                script.all_calls().len()
            )
        });
}

/// 50/s with a bucket of 5, 120 tasks, three nodes: 5 calls at first,
/// then 5 more for each 100 ms the clock moves, 55 after a second; the
/// bucket is then empty for anyone, and the other 65 tasks still wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_together_stay_within_one_destination_rate() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let clock = Clock::frozen_at(Timestamp::from_millis(1_800_000_000_000));
    let mut stores = Vec::new();
    for _ in 0..3 {
        let config = PgConfig {
            schema: Some(schema.clone()),
            pool_size: 4,
            clock: PgClock::Caller,
            ..PgConfig::default()
        };
        stores.push(Arc::new(PgStore::open(db.url(), config).await.unwrap()));
    }
    let rate = DestinationUpdate {
        rate_per_s: Some(Some(50.0)),
        burst: Some(Some(5)),
        ..DestinationUpdate::default()
    };
    stores[0]
        .update_destination(DEST.into(), rate, clock.now())
        .await
        .unwrap();
    let tasks: Vec<_> = (0..120).map(|i| new_task(&format!("t{i}"))).collect();
    stores[0].submit_many(tasks, clock.now()).await.unwrap();
    let script = Script::new();
    let downstream = Arc::new(FakeDownstream::new(Arc::clone(&script)));
    let config = WorkerConfig {
        poll_interval: Duration::from_millis(20),
        settings_interval: Duration::from_millis(50),
        ..WorkerConfig::default()
    };
    let workers = spawn_nodes(&stores, &downstream, &clock, &config);
    wait_calls(&script, 5).await;
    for step in 1..=10 {
        assert!(clock.jump(Duration::from_millis(100)));
        wait_calls(&script, 5 + 5 * step).await;
    }
    // A second has passed on every node's clock: 5 + 50 calls, and the
    // bucket gives no one another token now.
    let ask = TokenAsk {
        destination: DEST.into(),
        rate_per_s: 50.0,
        size: 5.0,
        give_back: 0,
        take: 100,
    };
    let grants = stores[1].take_tokens(vec![ask], clock.now()).await.unwrap();
    assert_eq!(grants[0].granted, 0, "{grants:?}");
    assert_eq!(script.all_calls().len(), 55);
    let counts = stores[2].count_by_state().await.unwrap();
    assert_eq!(counts.get(State::Pending), 65, "{counts:?}");
    for worker in workers {
        worker.shutdown().await.unwrap();
    }
    db.cleanup().await.unwrap();
}

/// A breaker opened by one node's failures holds on every node, each of
/// which reads the cluster's holds with its settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_breaker_opened_on_one_node_holds_on_every_node() {
    let Some(db) = database().await else { return };
    let schema = db.fresh_schema();
    let mut stores = Vec::new();
    for _ in 0..3 {
        let config = PgConfig {
            schema: Some(schema.clone()),
            pool_size: 4,
            ..PgConfig::default()
        };
        stores.push(Arc::new(PgStore::open(db.url(), config).await.unwrap()));
    }
    let clock = Clock::system();
    let script = Script::with_rule(|_, _| Step::Reply(Reply::status(503)));
    let downstream = Arc::new(FakeDownstream::new(Arc::clone(&script)));
    let config = WorkerConfig {
        poll_interval: Duration::from_millis(20),
        settings_interval: Duration::from_millis(50),
        breaker: BreakerPolicy {
            failures: 1,
            open: Duration::from_secs(60),
            max_open: Duration::from_secs(60),
        },
        ..WorkerConfig::default()
    };
    let workers = spawn_nodes(&stores, &downstream, &clock, &config);
    stores[0]
        .submit(new_task("fails"), clock.now())
        .await
        .unwrap();
    wait_calls(&script, 1).await;
    let all_open = async {
        loop {
            let open = workers
                .iter()
                .filter(|w| w.control().destination_state(DEST).breaker == BreakerState::Open)
                .count();
            if open == workers.len() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(PATIENCE, all_open)
        .await
        .expect("every node's breaker opens");
    // Held everywhere: a new task of the destination is not called.
    stores[1]
        .submit(new_task("held"), clock.now())
        .await
        .unwrap();
    let holds = stores[2]
        .share_holds(Vec::new(), clock.now())
        .await
        .unwrap();
    assert_eq!(holds.len(), 1, "{holds:?}");
    assert!(holds[0].1.breaker_open_until.is_some(), "{holds:?}");
    for worker in workers {
        worker.shutdown().await.unwrap();
    }
    assert_eq!(script.all_calls().len(), 1, "one call, then held");
    db.cleanup().await.unwrap();
}
