//! `cargo xtask bench-store`: durable submits per second through the store
//! (one writer thread, group commit) against a naive rusqlite loop that
//! commits one transaction per insert, on the same schema and the same
//! insert statement, with `synchronous` FULL and NORMAL, in one run.
//!
//! Not a timed test: it prints figures for a person to read. Each cell runs
//! for a fixed time on a fresh file in a temporary directory.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::TransactionBehavior;
use tc_model::store::Tasks;
use tc_model::{Limits, NewTask, Timestamp};
use tc_store::{SqliteStore, StoreConfig, Synchronous};

/// How long one cell runs unless `--seconds` says otherwise.
const DEFAULT_SECONDS: f64 = 2.5;
/// Concurrent callers in the "many callers" cell.
const MANY: usize = 64;

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let seconds = match args {
        [] => DEFAULT_SECONDS,
        [flag, value] if flag == "--seconds" => value
            .parse::<f64>()
            .ok()
            .filter(|s| *s > 0.0 && *s <= 60.0)
            .ok_or_else(|| format!("--seconds takes 0 < seconds <= 60, got {value:?}"))?,
        _ => return Err("usage: cargo xtask bench-store [--seconds <per cell>]".to_owned()),
    };
    let cell = Duration::from_secs_f64(seconds);
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;

    println!(
        "durable submits/s on a temp file in {} ({seconds} s per cell, {} build)",
        dir.path().display(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    if cfg!(debug_assertions) {
        println!(
            "note: a debug build compiles SQLite without optimisation; for representative \
             figures run `cargo run --release -p xtask -- bench-store`"
        );
    }
    println!(
        "{:<8} {:<28} {:>9} {:>12} {:>9}",
        "sync", "writer", "submits", "submits/s", "× naive"
    );
    for (name, synchronous) in [("FULL", Synchronous::Full), ("NORMAL", Synchronous::Normal)] {
        let config = StoreConfig {
            synchronous,
            ..StoreConfig::default()
        };
        let file = |cell: &str| dir.path().join(format!("{name}-{cell}.db"));
        let naive = naive_loop(&file("naive"), &config, cell)?;
        let one = runtime.block_on(store_callers(&file("one"), &config, 1, cell))?;
        let many = runtime.block_on(store_callers(&file("many"), &config, MANY, cell))?;
        for (writer, measured) in [
            ("naive: 1 transaction/insert", naive),
            ("store: 1 caller", one),
            ("store: 64 callers", many),
        ] {
            println!(
                "{name:<8} {writer:<28} {:>9} {:>12.0} {:>8.1}×",
                measured.submits,
                measured.rate(),
                measured.rate() / naive.rate()
            );
        }
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
struct Measured {
    submits: u64,
    elapsed: Duration,
}

impl Measured {
    fn rate(self) -> f64 {
        self.submits as f64 / self.elapsed.as_secs_f64()
    }
}

/// The `i`-th task of a cell: distinct keys, a body of typical size.
fn task(caller: usize, i: u64) -> Result<NewTask, String> {
    NewTask::new(
        format!("http://127.0.0.1:9/hooks/{caller}"),
        format!(
            "{{\"order\":{i},\"caller\":{caller},\"note\":\"benchmark payload of a typical size\"}}"
        )
        .into_bytes(),
        format!("bench-{caller}-{i}"),
        5,
        Duration::from_secs(10),
        &Limits::default(),
    )
    .map_err(|e| e.to_string())
}

fn now() -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000)
}

/// The baseline: the store's own schema and submit statement on one
/// connection, one `BEGIN IMMEDIATE … COMMIT` per insert.
fn naive_loop(path: &Path, config: &StoreConfig, cell: Duration) -> Result<Measured, String> {
    let mut conn = tc_store::raw::open(path, config).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut submits = 0;
    while started.elapsed() < cell {
        let task = task(0, submits)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| e.to_string())?;
        tc_store::raw::submit(&tx, &task, now()).map_err(|e| e.to_string())?;
        tx.commit().map_err(|e| e.to_string())?;
        submits += 1;
    }
    Ok(Measured {
        submits,
        elapsed: started.elapsed(),
    })
}

/// `callers` tasks submitting back to back through the store until the cell
/// ends; each submit has returned, so each is committed.
async fn store_callers(
    path: &Path,
    config: &StoreConfig,
    callers: usize,
    cell: Duration,
) -> Result<Measured, String> {
    let store = Arc::new(
        SqliteStore::open(path, config.clone())
            .await
            .map_err(|e| e.to_string())?,
    );
    let started = Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for caller in 0..callers {
        let store = Arc::clone(&store);
        running.spawn(async move {
            let mut submits = 0;
            while started.elapsed() < cell {
                store
                    .submit(task(caller, submits)?, now())
                    .await
                    .map_err(|e| e.to_string())?;
                submits += 1;
            }
            Ok::<u64, String>(submits)
        });
    }
    let mut submits = 0;
    while let Some(joined) = running.join_next().await {
        submits += joined.map_err(|e| e.to_string())??;
    }
    let elapsed = started.elapsed();
    if let Ok(store) = Arc::try_unwrap(store) {
        store.close().await;
    }
    Ok(Measured { submits, elapsed })
}
