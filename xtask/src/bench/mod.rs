//! `cargo xtask bench`: builds tc-server in release, then measures, in one
//! run, each figure beside its ceiling on this machine, prints a
//! table and writes `target/bench/results.json`.
//!
//! `cargo xtask` builds this tool in debug; a load generator and ceilings
//! measured in a debug build would flatter every ratio, so the debug build
//! only builds the release one (with tc-server) and hands over to it.
//!
//! Everything runs on loopback (127.0.0.1; the head-of-line phase puts its
//! slow downstream on 127.0.0.2, another loopback host). tc-server and the two reference
//! servers (no-op and naive, see [`peer`]) run as child processes; the load
//! generator, the downstreams and the store-alone measurements run in this
//! process. Every load loop is bounded in count and in time.

mod args;
mod downstream;
pub(crate) mod load;
mod peer;
mod pg_wal;
mod phases;
mod report;
mod stats;
mod store_alone;
mod wrk;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use args::Invocation;

use crate::harness::{RELEASE_PACKAGES, build, target_dir, workspace_root};

/// How big and how long each part of a run is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Plan {
    pub(crate) quick: bool,
    /// Keep-alive connections (virtual clients) of the submit loads, and the
    /// worker's concurrency.
    pub(crate) connections: usize,
    /// Load before a measured window, not counted.
    pub(crate) warmup: Duration,
    /// A measured submit window.
    pub(crate) window: Duration,
    /// Measured windows of the submit figure, after the cold one and the
    /// warm-up; the figure is their median, every one is in results.json.
    pub(crate) steady_windows: usize,
    /// The first window on a fresh database, its own figure.
    pub(crate) cold_window: Duration,
    /// The store-alone window.
    pub(crate) store_window: Duration,
    /// The most requests of any one time-bounded load.
    pub(crate) max_requests: u64,
    /// Tasks in the end-to-end runs.
    pub(crate) e2e_tasks: u64,
    /// Tasks waiting behind the slow downstream.
    pub(crate) slow_backlog: u64,
    /// The slow downstream's delay.
    pub(crate) slow_delay: Duration,
    /// Head of line: tasks waiting for the slow destination, and tasks
    /// sent to the fast one (alone, then beside that backlog).
    pub(crate) hol_backlog: u64,
    pub(crate) hol_fast_tasks: u64,
    /// In-flight cancels timed.
    pub(crate) cancels: usize,
    /// Pending rows of the small and the large scale database.
    pub(crate) scale_small: u64,
    pub(crate) scale_large: u64,
    /// Claim + complete rounds (of `connections` tasks) per scale database.
    pub(crate) scale_rounds: usize,
    /// How long tc-server serves on the large database before its peak RSS
    /// is read.
    pub(crate) rss_window: Duration,
    /// The bound of any wait for the system to catch up (all tasks
    /// terminal, a backlog submitted).
    pub(crate) patience: Duration,
    /// Phase 12: end-to-end windows after the cold one (each a submit
    /// window, then a wait until every task is terminal).
    pub(crate) node_windows: usize,
    /// Phase 12: one end-to-end submit window, and one window of batches.
    pub(crate) node_window: Duration,
    /// Phase 12: tasks queued while their destination is paused, then
    /// drained.
    pub(crate) node_backlog: u64,
    /// Phase 12: tasks already in the file the random-key batches go into
    /// (`--big-file`).
    pub(crate) big_file: u64,
    /// Pending tasks in the database backed up while submits are timed.
    pub(crate) backup_tasks: u64,
}

impl Plan {
    pub(crate) fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                connections: 64,
                warmup: Duration::from_millis(500),
                window: Duration::from_secs(3),
                steady_windows: 2,
                cold_window: Duration::from_secs(1),
                store_window: Duration::from_secs(2),
                max_requests: 2_000_000,
                e2e_tasks: 2_000,
                slow_backlog: 1_000,
                slow_delay: Duration::from_secs(2),
                hol_backlog: 1_000,
                hol_fast_tasks: 2_000,
                cancels: 50,
                scale_small: 1_000,
                scale_large: 100_000,
                scale_rounds: 30,
                rss_window: Duration::from_secs(3),
                patience: Duration::from_secs(20),
                node_windows: 2,
                node_window: Duration::from_secs(2),
                node_backlog: 5_000,
                big_file: 20_000,
                backup_tasks: 50_000,
            }
        } else {
            Plan {
                quick,
                connections: 64,
                warmup: Duration::from_secs(1),
                window: Duration::from_secs(10),
                steady_windows: 3,
                cold_window: Duration::from_secs(5),
                store_window: Duration::from_secs(5),
                max_requests: 10_000_000,
                e2e_tasks: 20_000,
                slow_backlog: 5_000,
                slow_delay: Duration::from_secs(2),
                hol_backlog: 10_000,
                hol_fast_tasks: 10_000,
                cancels: 200,
                scale_small: 1_000,
                scale_large: 1_000_000,
                scale_rounds: 100,
                rss_window: Duration::from_secs(10),
                patience: Duration::from_secs(120),
                node_windows: 3,
                node_window: Duration::from_secs(10),
                node_backlog: 100_000,
                big_file: 500_000,
                backup_tasks: 1_000_000,
            }
        }
    }
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    match args::parse(args)? {
        Invocation::Help => {
            print!("{}", args::USAGE);
            Ok(())
        }
        Invocation::Peer(peer) => peer::serve(peer),
        Invocation::Run {
            quick,
            postgres,
            phases,
            big_file,
            server_cores,
            backup_tasks,
        } => {
            let root = workspace_root();
            if cfg!(debug_assertions) {
                return hand_over_to_release(&root, args);
            }
            if std::env::var_os(BUILT).is_none() {
                build(&root, RELEASE_PACKAGES)?;
            }
            let tc_server = target_dir(&root).join("release").join("tc-server");
            let out_dir = target_dir(&root).join("bench");
            let mut plan = Plan::new(quick);
            if let Some(n) = big_file {
                plan.big_file = n;
            }
            if let Some(n) = backup_tasks {
                plan.backup_tasks = n;
            }
            let setup = phases::Setup {
                tc_server: &tc_server,
                out_dir: &out_dir,
                server_cores,
            };
            if postgres {
                phases::run_nodes(plan, &phases, setup)
            } else {
                phases::run(plan, &phases, setup)
            }
        }
    }
}

/// Set by the debug build for the release one it hands over to: the
/// release build of tc-server is already fresh.
const BUILT: &str = "TC_BENCH_BUILT";

fn hand_over_to_release(root: &Path, args: &[String]) -> Result<(), String> {
    build(root, RELEASE_PACKAGES)?;
    let release = target_dir(root).join("release").join("xtask");
    let status = Command::new(&release)
        .arg("bench")
        .args(args)
        .env(BUILT, "1")
        .status()
        .map_err(|e| format!("running {}: {e}", release.display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the bench failed ({status})"))
    }
}
