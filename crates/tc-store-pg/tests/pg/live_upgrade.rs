//! What the upgrade tests on a live database share: 200,000 tasks in
//! every state as an older schema left them, the upgrade run by a node of
//! this version opening the store in the background, the older node's
//! rounds beside it until it is fenced, and the checks that the counts and
//! due marks still say what the tasks say.

use std::time::Duration;

use tc_model::destination::ClaimGate;
use tc_model::store::{Completion, Guarded, Tasks, Work};
use tc_model::tenant::Scope;
use tc_model::{State, TaskId, Timestamp};
use tc_store_pg::{OpenError, PgConfig, PgStore};
use tc_testkit::ClaimDue;
use tokio::task::JoinHandle;

use crate::support::{Raw, new_task};

const LEASE: Duration = Duration::from_secs(60);

/// 200,000 tasks as an older schema left them, in four transactions of
/// 50,000 (positions within one count up to 65,535): pending and due,
/// running (every other one's lease already over), and ended ones, over
/// seven destinations (`h1:80` among them).
const FILL: &str = "
INSERT INTO tasks (id, idempotency_key, state, url, body, max_attempts, timeout_ns, attempt,
                   created_at, updated_at, started_at, finished_at, next_run_at, lease_until)
SELECT uuid_send(gen_random_uuid()), 'old-' || g, s.state, 'http://h' || (g % 7) || '/x',
       '\\x7b7d', 3, 1000000000, CASE WHEN s.state = 'pending' THEN 0 ELSE 1 END, g, g,
       CASE WHEN s.state <> 'pending' THEN g END,
       CASE WHEN s.state NOT IN ('pending', 'running') THEN g END,
       CASE WHEN s.state = 'pending' THEN 0 END,
       CASE WHEN s.state = 'running' THEN
           CASE WHEN (g / 10) % 2 = 0 THEN 1 ELSE 9000000000000 END END
FROM generate_series($1::bigint, $2::bigint) AS g, LATERAL (SELECT CASE
    WHEN g % 10 < 3 THEN 'pending' WHEN g % 10 = 3 THEN 'running'
    WHEN g % 10 < 7 THEN 'success' WHEN g % 10 < 9 THEN 'failed'
    ELSE 'canceled' END AS state) AS s";

/// Fills `old`'s schema with the 200,000 tasks of [`FILL`]: 30,000 running,
/// 10,000 of them with their lease over.
pub(crate) async fn fill_200000(old: &Raw) {
    for part in 0..4i64 {
        let (from, to) = (part * 50_000 + 1, (part + 1) * 50_000);
        old.client().execute(FILL, &[&from, &to]).await.unwrap();
    }
}

/// A node of this version opening `schema` (and so upgrading it) in the
/// background, on the caller's clock.
pub(crate) fn open_in_background(
    url: &str,
    schema: &str,
) -> JoinHandle<Result<PgStore, OpenError>> {
    let (url, schema) = (url.to_owned(), schema.to_owned());
    tokio::spawn(async move {
        let config = PgConfig {
            schema: Some(schema),
            pool_size: 2,
            clock: tc_store_pg::PgClock::Caller,
            ..PgConfig::default()
        };
        PgStore::open(&url, config).await
    })
}

/// A node of this version upgrades `schema` in the background
/// ([`open_in_background`]) while an older node runs `round` after round
/// beside it, until the upgrade is done, the fence refuses the older node
/// ([`is_fenced`]) or `most` rounds went through; any other error fails
/// the test. The upgraded store.
pub(crate) async fn upgrade_beside<Round>(
    url: &str,
    schema: &str,
    most: usize,
    mut round: impl FnMut() -> Round,
) -> PgStore
where
    Round: std::future::Future<Output = Result<(), tokio_postgres::Error>>,
{
    let upgrade = open_in_background(url, schema);
    let mut rounds = 0;
    while !upgrade.is_finished() && rounds < most {
        match round().await {
            Ok(()) => rounds += 1,
            Err(e) if is_fenced(&e) => break,
            Err(e) if is_deadlock_victim(&e) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    upgrade.await.unwrap().unwrap()
}

/// Whether the server ended `error`'s statement as a deadlock's victim: an
/// older node's statement that locks `attempts` before `tasks` can close a
/// cycle with a step that takes `tasks` first; its round is tried again,
/// as such a node's worker would (the upgrading node tries its step again
/// when the victim is the step).
pub(crate) fn is_deadlock_victim(error: &tokio_postgres::Error) -> bool {
    error.code() == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED)
}

/// Whether `error` is the fence of schema step 25 refusing a write of an
/// older node.
pub(crate) fn is_fenced(error: &tokio_postgres::Error) -> bool {
    error
        .as_db_error()
        .is_some_and(|e| e.code().code() == "55000" && e.message().contains("schema 25"))
}

pub(crate) fn task_id(bytes: &[u8]) -> TaskId {
    TaskId::from_bytes(bytes.try_into().unwrap())
}

/// The counts' rows that differ from the tasks (none when exact): each
/// state's total, and each destination's pending and running tasks.
const MISCOUNTED: &str = "
WITH counted AS (
    SELECT state, destination, sum(n) AS n FROM (
        SELECT state, destination, n FROM task_count_totals
        UNION ALL SELECT state, '', n FROM task_count_deltas
        UNION ALL SELECT state, destination, n FROM task_count_deltas
            WHERE destination IS NOT NULL
    ) AS c GROUP BY 1, 2 HAVING sum(n) <> 0
), stored AS (
    SELECT state, '' AS destination, count(*) AS n FROM tasks GROUP BY 1
    UNION ALL
    SELECT state, destination, count(*) FROM tasks
    WHERE state IN ('pending', 'running') GROUP BY 1, 2
)
SELECT coalesce(c.state, s.state) || ' ' || coalesce(c.destination, s.destination) || ': ' ||
       coalesce(c.n, 0) || ' counted, ' || coalesce(s.n, 0) || ' stored'
FROM counted c FULL JOIN stored s ON s.state = c.state AND s.destination = c.destination
WHERE c.n IS DISTINCT FROM s.n";

/// The destinations with pending tasks whose earliest due time has no
/// mark at or before it (a claim would never walk them).
const UNMARKED: &str = "
SELECT t.destination FROM tasks t WHERE t.state = 'pending' GROUP BY t.destination
HAVING NOT EXISTS (SELECT 1 FROM pending_destinations p
                   WHERE p.destination = t.destination AND p.next_due <= min(t.next_run_at))
   AND NOT EXISTS (SELECT 1 FROM due_marks m
                   WHERE m.destination = t.destination AND m.due_at <= min(t.next_run_at))";

/// The counts equal the tasks, and every destination with pending tasks
/// has a due mark no later than its earliest one.
pub(crate) async fn check_counts(raw: &Raw) {
    for (what, sql) in [("miscounted", MISCOUNTED), ("unmarked", UNMARKED)] {
        let wrong: Vec<String> = raw.column(sql).await;
        assert!(wrong.is_empty(), "{what}: {wrong:?}");
    }
}

/// The queue's rows that differ from the unfinished tasks (none when the
/// queue is in step): a task missing, one too many, or a state or due time
/// that differs.
const OUT_OF_STEP: &str = "
SELECT coalesce(t.pos, q.pos)::text || ': task ' || coalesce(t.state, '-') || ' '
       || coalesce(t.next_run_at::text, '-') || ', queue ' || coalesce(q.state, '-') || ' '
       || coalesce(q.next_run_at::text, '-')
FROM (SELECT pos, state, next_run_at FROM tasks WHERE state IN ('pending', 'running')) AS t
FULL JOIN queue q ON q.pos = t.pos
WHERE t.pos IS NULL OR q.pos IS NULL OR t.state <> q.state
   OR t.next_run_at IS DISTINCT FROM q.next_run_at
LIMIT 10";

/// The queue holds exactly the unfinished tasks, each with its state and
/// due time (schema step 25).
pub(crate) async fn check_queue(raw: &Raw) {
    let wrong: Vec<String> = raw.column(OUT_OF_STEP).await;
    assert!(wrong.is_empty(), "queue out of step: {wrong:?}");
}

/// Every kind of write of this version's node, after the upgrade; `theirs`
/// is a task an older node claimed before it, ended here.
pub(crate) async fn new_writes(store: &PgStore, theirs: TaskId, now: Timestamp) {
    let sub = store.submit(new_task("new-1"), now).await.unwrap();
    let batch = vec![new_task("new-2"), new_task("new-3"), new_task("new-4")];
    store.submit_many(batch, now).await.unwrap();
    let claimed = store
        .claim_due(8, now, LEASE, ClaimGate::default())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 8);
    let retry = Completion::Retry {
        next_run_at: Timestamp::from_millis(20),
        reason: "http_503".into(),
        http_status: Some(503),
    };
    let failed = Completion::Failed {
        reason: "http_400".into(),
        http_status: Some(400),
    };
    let success = Completion::Success {
        http_status: 200,
        result: b"ok".to_vec(),
        content_type: None,
    };
    for (task, outcome) in claimed.iter().zip([retry, failed.clone(), success]) {
        store
            .complete(task.id, task.attempt, outcome, now)
            .await
            .unwrap();
    }
    let released = store.release(claimed[3].id, claimed[3].attempt, now).await;
    assert_eq!(released.unwrap(), Guarded::Applied(State::Pending));
    store
        .cancel(claimed[4].id, Scope::Admin, now)
        .await
        .unwrap();
    store.cancel(sub.task.id, Scope::Admin, now).await.unwrap();
    store.retry(claimed[1].id, now, now, None).await.unwrap();
    store.delete(claimed[2].id, Scope::Admin).await.unwrap();
    let pruned = store
        .prune(
            State::Canceled,
            Duration::ZERO,
            Timestamp::from_millis(99),
            100,
        )
        .await
        .unwrap();
    assert!(pruned > 0);
    // The old node's task, claimed before the upgrade, ended by the new node.
    let ended = store.complete(theirs, 1, failed, now).await.unwrap();
    assert_eq!(ended, Guarded::Applied(State::Failed));
}

/// After the step: the counts and the queue still say what the tasks say,
/// before and after this version's writes of every kind (`theirs`, the
/// task the older node claimed, ended here) and the recovery of the
/// 10,000 leases [`fill_200000`] left over.
pub(crate) async fn writes_after_the_step(store: &PgStore, old: &Raw, theirs: TaskId) {
    check_counts(old).await;
    check_queue(old).await;
    new_writes(store, theirs, Timestamp::from_millis(10)).await;
    let recovered = store
        .recover_expired(Timestamp::from_millis(1_000))
        .await
        .unwrap();
    assert_eq!(recovered, 10_000);
    check_counts(old).await;
    check_queue(old).await;
}

/// Claims every due task through this version's claim: none twice, the
/// older node's task keyed `old-before` among them, none left pending
/// and due; then the counts and the queue still say what the tasks say.
pub(crate) async fn claims_every_due_task_once(store: &PgStore, old: &Raw) {
    let mut claimed_keys = std::collections::HashSet::new();
    for _ in 0..200 {
        let claimed = store
            .claim_due(
                1_000,
                Timestamp::from_millis(100),
                LEASE,
                ClaimGate::default(),
            )
            .await
            .unwrap();
        for task in &claimed {
            assert!(
                claimed_keys.insert(task.idempotency_key.clone()),
                "claimed twice: {}",
                task.idempotency_key
            );
        }
        if claimed.is_empty() {
            break;
        }
    }
    assert!(
        claimed_keys.contains("old-before"),
        "the old node's task was never claimed"
    );
    let due: i64 = old
        .client()
        .query_one(
            "SELECT count(*) FROM tasks WHERE state = 'pending' AND next_run_at <= 100",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(due, 0);
    check_counts(old).await;
    check_queue(old).await;
}
