//! The writer thread's instructions per task: runs
//! [`tc_store::writer_cost::run`] for N tasks on a fresh file with
//! `synchronous = NORMAL`. Meant to run under
//! `valgrind --tool=callgrind --toggle-collect='*writer_batch*'` twice, for
//! N and 2N: the difference over N is the writer's instructions per task.
//! See docs/performance.md, "the writer thread's CPU per task".
//!
//! Usage: `writer_cost N DIR` (DIR: where the fresh file goes).

// A command-line tool: its one line of output is for the person running it.
#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use tc_model::Timestamp;
use tc_store::{StoreConfig, Synchronous};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(n), Some(dir)) = (args.first(), args.get(1)) else {
        eprintln!("usage: writer_cost N DIR");
        return ExitCode::FAILURE;
    };
    let Ok(n) = n.parse::<u64>() else {
        eprintln!("N: not a number: {n}");
        return ExitCode::FAILURE;
    };
    let path = std::path::Path::new(dir).join(format!("writer-cost-{n}.db"));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let config = StoreConfig {
        synchronous: Synchronous::Normal,
        ..StoreConfig::default()
    };
    let outcome = tc_store::raw::open(&path, &config)
        .map_err(|e| e.to_string())
        .and_then(|mut conn| {
            if let Ok(sql) = std::env::var("WC_EXPERIMENT") {
                conn.execute_batch(&sql).map_err(|e| e.to_string())?;
            }
            tc_store::writer_cost::run(&mut conn, n, Timestamp::from_millis(1_700_000_000_000))
        });
    match outcome {
        Ok(()) => {
            println!("{n} tasks submitted, claimed and completed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("writer_cost: {e}");
            ExitCode::FAILURE
        }
    }
}
