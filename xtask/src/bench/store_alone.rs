//! The store measured alone, in the bench process: the submit ceiling that
//! the HTTP figure sits beside, and the scale figure (claim + complete cost
//! with few vs many pending rows).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tc_model::store::Completion;
use tc_model::store::{Tasks, Work};
use tc_model::{FirstRun, Limits, NewTask, Timestamp};
use tc_store::{SqliteStore, StoreConfig, Synchronous};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::load::LoadResult;
use tc_testkit::ClaimDue;

/// The wall clock as the store wants it.
pub(crate) fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Timestamp::from_millis(ms)
}

/// Task `i` of a run: the same payload shape the HTTP load submits.
pub(crate) fn task(
    url: &str,
    key_prefix: &str,
    i: u64,
    max_attempts: u32,
) -> Result<NewTask, String> {
    NewTask::new(
        url.to_owned(),
        format!(r#"{{"n":{i}}}"#).into_bytes(),
        format!("{key_prefix}-{i}"),
        max_attempts,
        Duration::from_secs(5),
        &Limits::default(),
    )
    .map_err(|e| format!("task {i}: {e}"))
}

async fn open(path: &Path, synchronous: Synchronous) -> Result<Arc<SqliteStore>, String> {
    let config = StoreConfig {
        synchronous,
        ..StoreConfig::default()
    };
    SqliteStore::open(path, config)
        .await
        .map(Arc::new)
        .map_err(|e| format!("opening {}: {e}", path.display()))
}

async fn close(store: Arc<SqliteStore>) {
    if let Ok(store) = Arc::try_unwrap(store) {
        store.close().await;
    }
}

/// `callers` concurrent callers submitting back to back through
/// [`SqliteStore`] (group commit) under `synchronous = FULL`, bounded by
/// `max` submits and `duration`: the store-alone submit ceiling. The same
/// cell as `cargo xtask bench-store`'s "store: 64 callers", with latencies.
pub(crate) async fn submit_ceiling(
    path: &Path,
    callers: usize,
    max: u64,
    duration: Duration,
) -> Result<LoadResult, String> {
    let store = open(path, Synchronous::Full).await?;
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + duration;
    let mut running = JoinSet::new();
    for _ in 0..callers {
        let store = Arc::clone(&store);
        let next = Arc::clone(&next);
        running.spawn(async move {
            let mut latencies = Vec::with_capacity(4096);
            let mut last = start;
            while Instant::now() < deadline {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= max {
                    break;
                }
                let task = task("http://127.0.0.1:9/hook", "alone", i, 3)?;
                let sent = Instant::now();
                store
                    .submit(task, now())
                    .await
                    .map_err(|e| format!("store submit: {e}"))?;
                last = Instant::now();
                latencies.push(last - sent);
            }
            Ok::<_, String>((latencies, last))
        });
    }
    let mut outcome = LoadResult::default();
    let mut last = start;
    while let Some(joined) = running.join_next().await {
        let (latencies, client_last) = joined.map_err(|e| format!("store caller: {e}"))??;
        outcome.ok += latencies.len() as u64;
        outcome.latencies.extend(latencies);
        last = last.max(client_last);
    }
    outcome.elapsed = last - start;
    close(store).await;
    Ok(outcome)
}

/// Rows per transaction while filling: big enough to amortize commits,
/// small enough to keep the WAL from growing to the size of the table.
const FILL_CHUNK: u64 = 50_000;

/// Writes `n` pending tasks into a new database at `path` through the
/// store's own schema and submit statement (`tc_store::raw`), in a few big
/// transactions: how a million rows are filled in seconds. Calls
/// `progress(done)` after every chunk.
pub(crate) fn fill(
    path: &Path,
    n: u64,
    url: &str,
    key_prefix: &str,
    progress: &dyn Fn(u64),
) -> Result<(), String> {
    fill_scheduled(path, n, (url, key_prefix), FirstRun::Now, progress)
}

/// [`fill`] with every task first due as `first_run` says: a file that holds
/// many tasks none of which the worker may claim yet.
pub(crate) fn fill_scheduled(
    path: &Path,
    n: u64,
    (url, key_prefix): (&str, &str),
    first_run: FirstRun,
    progress: &dyn Fn(u64),
) -> Result<(), String> {
    let config = StoreConfig {
        synchronous: Synchronous::Normal,
        ..StoreConfig::default()
    };
    let db = |e: rusqlite::Error| format!("filling {}: {e}", path.display());
    let conn = tc_store::raw::open(path, &config).map_err(|e| e.to_string())?;
    let at = now();
    let mut done = 0;
    while done < n {
        let end = (done + FILL_CHUNK).min(n);
        conn.execute_batch("BEGIN IMMEDIATE").map_err(db)?;
        for i in done..end {
            // Many attempts: the RSS phase later runs these against a closed
            // port and they must stay pending between tries.
            let task = task(url, key_prefix, i, 100)?
                .with_first_run(first_run)
                .map_err(|e| format!("filling row {i}: {e}"))?;
            tc_store::raw::submit(&conn, &task, at).map_err(|e| format!("filling row {i}: {e}"))?;
        }
        conn.execute_batch("COMMIT").map_err(db)?;
        done = end;
        progress(done);
    }
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        .map_err(db)?;
    Ok(())
}

/// The cost per task of claiming it and writing its success, with the
/// pending count held where the fill left it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimCost {
    pub(crate) per_task: Duration,
    pub(crate) tasks: u64,
}

/// Rounds of what the worker does at concurrency `batch`: claim `batch` due
/// tasks, then complete each (concurrently, so the writer groups them). Only
/// claim and complete are timed; after each round as many new tasks are
/// submitted (untimed), so the pending count stays at what it was. The
/// scale figure runs it with `synchronous = NORMAL` (an fsync per commit
/// would add a constant that hides what the row count costs); the end-to-end
/// figure with FULL, as the store-alone bound of the worker.
pub(crate) async fn claim_complete_cost(
    path: &Path,
    synchronous: Synchronous,
    rounds: usize,
    batch: usize,
    url: &str,
    key_prefix: &str,
    max_duration: Duration,
) -> Result<ClaimCost, String> {
    const WARMUP_ROUNDS: usize = 3;
    let store = open(path, synchronous).await?;
    let lease = Duration::from_secs(60);
    let deadline = Instant::now() + max_duration;
    let mut timed = Duration::ZERO;
    let mut tasks = 0u64;
    let mut top_up = 0u64;
    for round in 0..rounds + WARMUP_ROUNDS {
        if Instant::now() >= deadline {
            break;
        }
        let started = Instant::now();
        let claimed = store
            .claim_due(
                batch,
                now(),
                lease,
                tc_model::destination::ClaimGate::default(),
            )
            .await
            .map_err(|e| format!("claim_due: {e}"))?;
        if claimed.is_empty() {
            return Err("claim_due found nothing due".into());
        }
        let mut completes = JoinSet::new();
        for task in &claimed {
            let store = Arc::clone(&store);
            let (id, attempt) = (task.id, task.attempt);
            completes.spawn(async move {
                let outcome = Completion::Success {
                    http_status: 200,
                    result: super::downstream::ANSWER.to_vec(),
                    content_type: Some("application/json".into()),
                };
                store.complete(id, attempt, outcome, now()).await
            });
        }
        while let Some(joined) = completes.join_next().await {
            joined
                .map_err(|e| format!("complete: {e}"))?
                .map_err(|e| format!("complete: {e}"))?;
        }
        if round >= WARMUP_ROUNDS {
            timed += started.elapsed();
            tasks += claimed.len() as u64;
        }
        let mut submits = JoinSet::new();
        for _ in 0..claimed.len() {
            let new = task(url, &format!("{key_prefix}-top"), top_up, 100)?;
            top_up += 1;
            let store = Arc::clone(&store);
            submits.spawn(async move { store.submit(new, now()).await });
        }
        while let Some(joined) = submits.join_next().await {
            joined
                .map_err(|e| format!("top-up submit: {e}"))?
                .map_err(|e| format!("top-up submit: {e}"))?;
        }
    }
    close(store).await;
    if tasks == 0 {
        return Err("no round finished in time".into());
    }
    Ok(ClaimCost {
        per_task: timed / u32::try_from(tasks).unwrap_or(u32::MAX),
        tasks,
    })
}
