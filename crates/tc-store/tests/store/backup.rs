//! Online backup: a copy taken while submits and completions flow is the
//! database as of one instant between the backup's start and its end, and
//! a target that would be unsafe is refused.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tc_model::destination::ClaimGate;
use tc_model::store::{Completion, ListQuery, TaskFilter};
use tc_model::store::{Tasks, Work};
use tc_model::tenant::Scope;
use tc_model::{Limits, NewTask, State, TaskId, Timestamp};
use tc_store::backup::{BackupConfig, BackupError, backup};
use tc_store::{SqliteStore, StoreConfig, Synchronous};
use tc_testkit::ClaimDue;

const LEASE: Duration = Duration::from_secs(30);

fn task(key: &str) -> NewTask {
    NewTask::new(
        format!("http://127.0.0.1:9/{key}"),
        format!("{{\"key\":\"{key}\"}}").into_bytes(),
        key.to_owned(),
        3,
        Duration::from_secs(2),
        &Limits::default(),
    )
    .unwrap()
}

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + ms)
}

/// Every task of a store as (state, attempt), page by page.
async fn snapshot(store: &SqliteStore) -> HashMap<TaskId, (State, u32)> {
    let mut all = HashMap::new();
    let mut after = None;
    for _ in 0..10_000 {
        let page = store
            .list(
                ListQuery {
                    filter: TaskFilter::state(None),
                    limit: 500,
                    after,
                    max_result_bytes: None,
                    ..ListQuery::default()
                },
                Scope::Admin,
            )
            .await
            .unwrap();
        for task in page.tasks {
            all.insert(task.id, (task.state, task.attempt));
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return all,
        }
    }
    panic!("more pages than tasks");
}

/// One acknowledged write of the load: the task and what it became.
type Op = (TaskId, (State, u32));

/// Submits a task, then claims and completes the oldest due one, over and
/// over until `stop` (bounded), logging each acknowledged write in order.
async fn load(store: Arc<SqliteStore>, stop: Arc<AtomicBool>, log: Arc<std::sync::Mutex<Vec<Op>>>) {
    for i in 0..100_000i64 {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let submitted = store
            .submit(task(&format!("load-{i}")), t(i))
            .await
            .unwrap();
        log.lock()
            .unwrap()
            .push((submitted.task.id, (State::Pending, 0)));
        let claimed = store
            .claim_due(1, t(i), LEASE, ClaimGate::default())
            .await
            .unwrap();
        for task in claimed {
            log.lock()
                .unwrap()
                .push((task.id, (State::Running, task.attempt)));
            let ok = Completion::Success {
                http_status: 200,
                result: b"done".to_vec(),
                content_type: None,
            };
            store
                .complete(task.id, task.attempt, ok, t(i))
                .await
                .unwrap();
            log.lock()
                .unwrap()
                .push((task.id, (State::Success, task.attempt)));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_under_load_is_the_database_as_of_one_instant_during_the_backup() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("tasks.db");
    let config = StoreConfig {
        synchronous: Synchronous::Normal,
        ..StoreConfig::default()
    };
    let store = Arc::new(SqliteStore::open(&source, config.clone()).await.unwrap());
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Enough pages that the copy takes many steps.
    let batch: Vec<NewTask> = (0..3_000).map(|i| task(&format!("seed-{i}"))).collect();
    for submitted in store.submit_many(batch, t(0)).await.unwrap() {
        log.lock()
            .unwrap()
            .push((submitted.unwrap().task.id, (State::Pending, 0)));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(load(
        Arc::clone(&store),
        Arc::clone(&stop),
        Arc::clone(&log),
    ));
    // The load is flowing before the backup starts.
    for _ in 0..10_000 {
        if log.lock().unwrap().len() > 3_050 {
            break;
        }
        tokio::task::yield_now().await;
    }
    let began = log.lock().unwrap().len();
    let target = dir.path().join("copy.db");
    let (from, to) = (source.clone(), target.clone());
    // Small steps with pauses: the load commits between them.
    let pacing = BackupConfig {
        pages_per_step: 4,
        pause: Duration::from_millis(1),
        sync_every_steps: 8,
    };
    let report = tokio::task::spawn_blocking(move || backup(&from, &to, &pacing))
        .await
        .unwrap()
        .unwrap();
    let ended = log.lock().unwrap().len();
    stop.store(true, Ordering::SeqCst);
    writer.await.unwrap();
    assert!(report.steps > 10, "{report:?}");
    assert!(
        ended > began,
        "no write landed during the backup: {report:?}"
    );

    // Checked by SQLite itself, on the file as it is.
    let raw = rusqlite::Connection::open(&target).unwrap();
    let integrity: String = raw
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    drop(raw);
    assert_eq!(report.bytes, std::fs::metadata(&target).unwrap().len());

    // The store opens the copy as any other file; it equals the log's
    // writes up to one point between the backup's start and its end.
    let copy = SqliteStore::open(&target, config).await.unwrap();
    let copied = snapshot(&copy).await;
    assert_eq!(copied.len() as u64, report.tasks);
    let log = log.lock().unwrap().clone();
    let mut replayed = HashMap::new();
    let mut matched = None;
    for (k, (id, state)) in log.iter().enumerate() {
        if k >= began && replayed == copied {
            matched = Some(k);
            break;
        }
        if k > ended {
            break;
        }
        replayed.insert(*id, *state);
    }
    if matched.is_none() && replayed == copied {
        matched = Some(log.len());
    }
    let cut = matched.unwrap_or_else(|| {
        panic!(
            "the copy ({} tasks) is no prefix of the writes between {began} and {ended}",
            copied.len()
        )
    });
    assert!(
        (began..=ended).contains(&cut),
        "{cut} not in {began}..={ended}"
    );
    copy.close().await;
    Arc::into_inner(store).unwrap().close().await;
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tc-backup"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn unsafe_targets_and_foreign_sources_are_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("tasks.db");
    let store = SqliteStore::open(&source, StoreConfig::default())
        .await
        .unwrap();
    store.submit(task("a"), t(0)).await.unwrap();
    let existing = dir.path().join("old.db");
    std::fs::write(&existing, b"yesterday").unwrap();
    let foreign = dir.path().join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();

    let check = |from: &Path, to: &Path, expected: &str| {
        let err = backup(from, to, &BackupConfig::default()).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(expected), "{to:?}: {message}");
        err
    };
    let err = check(&source, &existing, "already exists");
    assert!(matches!(err, BackupError::TargetExists(_)), "{err:?}");
    assert_eq!(std::fs::read(&existing).unwrap(), b"yesterday");
    check(
        &source,
        &dir.path().join("no/such/dir/x.db"),
        "directory does not exist",
    );
    check(&source, &source, "already exists");
    check(&source, Path::new("/"), "names no file");
    let read_only = dir.path().join("read-only");
    std::fs::create_dir(&read_only).unwrap();
    let mut permissions = std::fs::metadata(&read_only).unwrap().permissions();
    permissions.set_readonly(true);
    std::fs::set_permissions(&read_only, permissions).unwrap();
    // Root writes anywhere: the refusal is only checked for other users.
    if std::fs::File::create(read_only.join("probe")).is_err() {
        let err = check(
            &source,
            &read_only.join("x.db"),
            "cannot create a file there",
        );
        assert!(matches!(err, BackupError::NotWritable { .. }), "{err:?}");
    }
    check(
        &foreign,
        &dir.path().join("f.db"),
        "not a taskcenter database",
    );
    check(
        &dir.path().join("missing.db"),
        &dir.path().join("m.db"),
        "no database file",
    );
    for name in ["f.db", "m.db"] {
        assert!(!dir.path().join(name).exists(), "{name} was created");
    }
    // And the good case, with a relative-free absolute target.
    let report = backup(&source, &dir.path().join("ok.db"), &BackupConfig::default()).unwrap();
    assert_eq!(report.tasks, 1);
    store.close().await;
}
