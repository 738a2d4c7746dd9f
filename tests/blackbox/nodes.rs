//! Three tc-server nodes on one PostgreSQL database: 5,000 tasks submitted
//! round-robin, one node killed with SIGKILL mid-run, a cancel sent to one
//! node stopping a call running on another, one idempotency key sent to all
//! three at once. Prints `skipped: no PostgreSQL at <url>` and passes when
//! there is no PostgreSQL (unless TC_REQUIRE_POSTGRES=1).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tc_downstream::fake::{FakeServer, Record, Reply, Script, Step};
use tc_store_pg::testing::TestDatabase;
use tokio::time::Instant;

use crate::support::{Api, Config, Downstream, Server};

/// Tasks in the load.
const TASKS: usize = 5_000;
/// How long the downstream works on each call of the load.
const WORK: Duration = Duration::from_millis(50);
/// Calls answered before one node is killed.
const KILL_AFTER: usize = 1_500;
/// Short enough that the killed node's tasks come back soon, long enough
/// that the heartbeat (a third of it) is clearly slower than a notification.
const LEASE_MS: &str = "6000";
/// Bound on the whole load phase.
const LOAD_GUARD: Duration = Duration::from_secs(240);

/// One call the load downstream received: (task id, attempt, start, end).
#[derive(Debug, Clone)]
struct CallRecord {
    task: String,
    attempt: u32,
    start: Instant,
    end: Option<Instant>,
    answered: bool,
}

/// The load downstream: the one fake, answering every call with 200 after
/// [`WORK`]; its record says when each call started and ended (a call whose
/// connection is dropped ends when the fake sees it close).
struct Ledger {
    script: Arc<Script>,
    _server: FakeServer,
}

impl Ledger {
    fn answered(&self) -> usize {
        self.script.read(|r| r.answered())
    }

    fn calls(&self) -> Vec<CallRecord> {
        self.script.read(records)
    }

    /// Waits until `n` calls were answered.
    async fn wait_answered(&self, what: &str, n: usize) {
        tokio::time::timeout(
            LOAD_GUARD,
            self.script.wait_for(|r| (r.answered() >= n).then_some(())),
        )
        .await
        .unwrap_or_else(|_| panic!("load downstream: no {what} within {LOAD_GUARD:?}"));
    }
}

fn records(r: &Record) -> Vec<CallRecord> {
    r.calls()
        .iter()
        .enumerate()
        .map(|(i, call)| CallRecord {
            task: call.task_id.clone().unwrap_or_default(),
            attempt: call.attempt.unwrap_or(0),
            start: call.at,
            end: r.ended_at(i),
            answered: r.status_of(i).is_some(),
        })
        .collect()
}

async fn serve_ledger() -> (Ledger, String) {
    let script = Script::with_rule(|_, _| Step::ReplyAfter(WORK, Reply::json(200, "{}")));
    let server = FakeServer::start(Arc::clone(&script)).await.unwrap();
    let url = format!("{}/work", server.url());
    (
        Ledger {
            script,
            _server: server,
        },
        url,
    )
}

/// A node's config: the shared database, short polls, the test's lease.
fn node(dir: &std::path::Path, db: &str) -> Config {
    let mut config = Config::new(dir);
    config
        .flag("--db", db)
        .flag("--concurrency", "16")
        .flag("--lease-ms", LEASE_MS)
        .flag("--max-attempts", "5");
    config
}

/// `taskcenter_tasks{state="..."}` from a node's /metrics (cluster-wide: the
/// counts are the database's).
async fn counts(api: &Api) -> BTreeMap<String, u64> {
    let text = String::from_utf8(api.get("/metrics").await.body.to_vec()).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("taskcenter_tasks{state=\""))
        .filter_map(|rest| {
            let (state, n) = rest.split_once("\"} ")?;
            Some((state.to_owned(), n.trim().parse().ok()?))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_share_one_postgres_database() {
    let db = match TestDatabase::connect().await {
        Ok(db) => db,
        Err(skip) => {
            #[allow(clippy::print_stdout)]
            {
                println!("{skip}");
            }
            return;
        }
    };
    let schema = db.fresh_schema();
    db.execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let sep = if db.url().contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}options=-csearch_path%3D{schema}", db.url());
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Server> = Vec::new();
    for _ in 0..3 {
        let mut server = node(dir.path(), &url).start().await;
        let listening = server.logged("listening").await;
        assert_eq!(listening["store"], "postgres", "{listening}");
        assert!(
            !listening["db"].as_str().unwrap().contains("options"),
            "{listening}"
        );
        nodes.push(server);
    }
    let apis: Vec<Api> = nodes.iter().map(|n| Api::new(n.base_url())).collect();

    // One idempotency key sent to all three at once: one task, one call.
    let (ledger, work) = serve_ledger().await;
    let sends = apis.iter().map(|api| {
        let (api, work) = (api.clone(), work.clone());
        tokio::spawn(async move { api.submit(&work, "once", json!({"n": 0})).await })
    });
    let mut statuses = Vec::new();
    let mut ids = Vec::new();
    for send in sends.collect::<Vec<_>>() {
        let reply = send.await.unwrap();
        statuses.push(reply.status);
        ids.push(reply.id());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, vec![200, 200, 201], "one node created it");
    assert!(ids.iter().all(|id| *id == ids[0]), "one task: {ids:?}");
    assert_eq!(apis[1].wait_terminal(&ids[0]).await["state"], "success");

    // A cancel sent to one node stops the call running on another.
    let mut slow = Downstream::start().await;
    let hung = apis[0].submit_new(&slow.url("/slow"), "hung").await;
    slow.request_with_key("hung").await;
    let mut runner = None;
    for (i, node) in nodes.iter_mut().enumerate() {
        let started = node
            .seen_logs()
            .iter()
            .any(|v| v["message"] == "task_start" && v["task_id"] == hung.as_str());
        if started {
            runner = Some(i);
        }
    }
    let runner = match runner {
        Some(i) => i,
        // Not yet read from the logs: wait on each node's log in turn,
        // the one that started it answers.
        None => {
            let mut found = None;
            for (i, node) in nodes.iter_mut().enumerate() {
                let seen = tokio::time::timeout(
                    Duration::from_secs(2),
                    node.logged_where(
                        |v| v["message"] == "task_start" && v["task_id"] == hung.as_str(),
                        "task_start",
                    ),
                )
                .await;
                if seen.is_ok() {
                    found = Some(i);
                    break;
                }
            }
            found.expect("some node logged task_start for the hung task")
        }
    };
    let other = (runner + 1) % 3;
    let asked = Instant::now();
    assert_eq!(apis[other].cancel(&hung).await.status, 200);
    slow.closed_while_held("hung", 1).await;
    let stopped_after = asked.elapsed();
    // The heartbeat (every lease/3 = 2 s) would also stop it; closing well
    // before that shows the notification did.
    assert!(
        stopped_after < Duration::from_secs(1),
        "node {runner}'s call closed {stopped_after:?} after the cancel on node {other}"
    );

    // The load: 5,000 tasks round-robin, one node killed mid-run.
    let submitters: Vec<_> = (0..24)
        .map(|s| {
            let (apis, work) = (apis.clone(), work.clone());
            tokio::spawn(async move {
                for i in (s..TASKS).step_by(24) {
                    let key = format!("load-{i}");
                    // On a machine loaded by other builds a node may answer
                    // 503 (no database connection in time); a client then
                    // sends the same key again, as the API intends. A
                    // retry may find the task made (200).
                    let mut tries = 0;
                    loop {
                        let reply = apis[i % 3].submit(&work, &key, json!({"i": i})).await;
                        match reply.status {
                            201 => break,
                            200 if tries > 0 => break,
                            503 if tries < 20 => {
                                tries += 1;
                                // Client backoff, not a wait for a state.
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                            other => panic!("submit {i}: {other} {:?}", reply.body),
                        }
                    }
                }
            })
        })
        .collect();
    for submitter in submitters {
        submitter.await.unwrap();
    }
    ledger
        .wait_answered("calls to kill after", KILL_AFTER)
        .await;
    nodes[2].kill9().await;

    let deadline = Instant::now() + LOAD_GUARD;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let final_counts = loop {
        let now = counts(&apis[0]).await;
        let open =
            now.get("pending").copied().unwrap_or(0) + now.get("running").copied().unwrap_or(0);
        if open == 0 {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "not finished within {LOAD_GUARD:?}: {now:?}"
        );
        tick.tick().await;
    };
    let want: BTreeMap<String, u64> = [
        ("canceled", 1),
        ("failed", 0),
        ("pending", 0),
        ("running", 0),
        ("success", TASKS as u64 + 1),
    ]
    .into_iter()
    .map(|(s, n)| (s.to_owned(), n))
    .collect();
    assert_eq!(
        final_counts, want,
        "every task ends once in its expected state"
    );

    // No two calls of one task overlap in time; every load task was answered.
    let calls = ledger.calls();
    let mut by_task: BTreeMap<&str, Vec<&CallRecord>> = BTreeMap::new();
    for call in &calls {
        by_task.entry(call.task.as_str()).or_default().push(call);
    }
    assert_eq!(by_task.len(), TASKS + 1, "every task was called");
    let once = by_task.get(ids[0].as_str()).map_or(0, Vec::len);
    assert_eq!(once, 1, "the key sent to all three nodes made one call");
    let mut retried = 0;
    for (task, mut calls) in by_task {
        calls.sort_by_key(|c| c.start);
        assert!(calls.iter().any(|c| c.answered), "{task} never answered");
        for pair in calls.windows(2) {
            let end = pair[0].end.expect("every call ended");
            assert!(
                pair[1].start >= end,
                "{task}: attempt {} started before attempt {} ended",
                pair[1].attempt,
                pair[0].attempt
            );
        }
        retried += usize::from(calls.len() > 1);
    }
    // The killed node held claims when it died (3,500 tasks were still due
    // and it claims continuously): those tasks were taken back after their
    // lease and claimed again by the others, so their attempt counter went
    // past 1. A call the killed node had not yet sent shows only there, not
    // as a second call, so the count of calls alone cannot prove it.
    let mut reclaimed = 0;
    let mut after: Option<String> = None;
    for _ in 0..100 {
        let path = match &after {
            Some(cursor) => format!("/tasks?limit=500&after={cursor}"),
            None => "/tasks?limit=500".to_owned(),
        };
        let page = apis[0].get(&path).await.json();
        reclaimed += page["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["attempt"].as_u64().unwrap_or(0) > 1)
            .count();
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    assert!(
        reclaimed >= 1,
        "the killed node's running tasks were claimed again by the others ({retried} called twice)"
    );
    #[allow(clippy::print_stdout)]
    {
        println!(
            "three nodes: {} calls for {} tasks, {retried} called again after the kill; \
             a cross-node cancel closed its call in {stopped_after:?}; {} answered",
            calls.len(),
            TASKS + 1,
            ledger.answered()
        );
    }
    drop(nodes);
    db.cleanup().await.unwrap();
}

/// `--pg-pool-size 3`: under 40 submits and reads at once, the node holds at
/// most three pooled connections (and the one that listens), and every
/// request is answered, waiting its turn for a connection.
#[tokio::test]
async fn a_node_holds_at_most_its_pg_pool_size_connections() {
    let db = match TestDatabase::connect().await {
        Ok(db) => db,
        Err(skip) => {
            #[allow(clippy::print_stdout)]
            {
                println!("{skip}");
            }
            return;
        }
    };
    let schema = db.fresh_schema();
    db.execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    // The node's connections are told apart by their application name.
    let app = format!("tc_pool_{schema}");
    let sep = if db.url().contains('?') { '&' } else { '?' };
    let url = format!(
        "{}{sep}options=-csearch_path%3D{schema}&application_name={app}",
        db.url()
    );
    let dir = tempfile::tempdir().unwrap();
    let mut config = node(dir.path(), &url);
    config.flag("--pg-pool-size", "3");
    let server = config.start().await;
    let api = Api::new(server.base_url());
    let down = Downstream::start().await;

    let (watcher, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let load: Vec<_> = (0..40)
        .map(|i| {
            let (api, url) = (api.clone(), down.url("/ok"));
            tokio::spawn(async move {
                let submitted = api
                    .submit(&url, &format!("pool-{i}"), json!({"i": i}))
                    .await;
                let read = api.get(&format!("/tasks/{}", submitted.id())).await;
                (submitted.status, read.status)
            })
        })
        .collect();
    let mut most = 0i64;
    while !load.iter().all(|l| l.is_finished()) {
        let held: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .await
            .unwrap()
            .get(0);
        most = most.max(held);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for l in load {
        assert_eq!(l.await.unwrap(), (201, 200));
    }
    assert!(most >= 1, "the watcher saw the node's connections");
    assert!(
        most <= 4,
        "{most} connections: more than the pool of 3 and the listener"
    );
    drop(server);
    db.cleanup().await.unwrap();
}
