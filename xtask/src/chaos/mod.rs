//! `cargo xtask chaos [--rounds N] [--seed S] [--store sqlite|postgres]`:
//! tc-server under mixed load meets failures at random moments.
//!
//! - `--store sqlite` (the default): one server is killed with SIGKILL each
//!   round and restarted on the same file.
//! - `--store postgres`: two nodes share a throwaway PostgreSQL cluster
//!   started for the run ([`tc_testkit::pg_cluster`]; never the shared
//!   server); each round either kills one node with SIGKILL (it is started
//!   again), or restarts PostgreSQL, or stops it for 5 s and starts it
//!   again. The nodes must stay up through the database's absence (no exit),
//!   answer `/healthz` 503 with a reason while it is away and 200 again
//!   after, reconnecting by themselves (postgres.rs).
//!
//! After the last round the service runs until nothing is due, and then
//! (ledger.rs):
//!
//! - every task whose submit was answered is present;
//! - none is stuck (no task pending or running);
//! - each reached the state its downstream path implies (a canceled task
//!   stayed canceled, and none became success after its cancel was answered);
//! - every call the downstream saw, first delivery or redelivery, carried its
//!   task's Idempotency-Key.
//!
//! A task may legitimately end `failed` with error `interrupted` when kills
//! took every one of its attempts; that is counted and shown, not hidden.

mod ledger;
mod postgres;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::harness::client::{Conn, Endpoint};
use crate::harness::server::{ServerProcess, tc_server};

use ledger::Load;

const USAGE: &str = "usage: cargo xtask chaos [--rounds N] [--seed S] [--store sqlite|postgres]";

/// Which store the nodes run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Sqlite,
    Postgres,
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut rounds = 20usize;
    let mut seed = None;
    let mut store = Store::Sqlite;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or(format!("{name} takes a number\n{USAGE}"))
        };
        match arg.as_str() {
            "--rounds" => rounds = usize::try_from(value("--rounds")?).unwrap_or(usize::MAX),
            "--seed" => seed = Some(value("--seed")?),
            "--store" => {
                store = match args.next().map(String::as_str) {
                    Some("sqlite") => Store::Sqlite,
                    Some("postgres") => Store::Postgres,
                    other => {
                        return Err(format!(
                            "--store takes sqlite or postgres, not {other:?}\n{USAGE}"
                        ));
                    }
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let seed = seed.unwrap_or_else(|| fastrand::u64(..));
    let root = crate::harness::workspace_root();
    crate::harness::build(&root, crate::harness::RELEASE_PACKAGES)?;
    let binary = crate::harness::target_dir(&root)
        .join("release")
        .join("tc-server");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    eprintln!("[chaos] {rounds} rounds, seed {seed} (--seed {seed} repeats the choices)");
    runtime.block_on(async {
        match store {
            Store::Sqlite => sqlite(&binary, rounds, seed).await,
            Store::Postgres => postgres::chaos(&binary, rounds, seed).await,
        }
    })
}

/// One server on one SQLite file, killed every round.
async fn sqlite(binary: &Path, rounds: usize, seed: u64) -> Result<(), String> {
    let load = Load::start().await?;
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let db = dir.path().join("chaos.db");
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();

    for round in 0..rounds {
        let server = start(binary, &db)?;
        let clients = load.clients(&[Endpoint::new(server.addr)], round, &mut rng);
        let kill_after = Duration::from_millis(rng.u64(200..1500));
        tokio::time::sleep(kill_after).await;
        // SIGKILL: no shutdown, no flush beyond what was committed.
        server.stop();
        ledger::join(clients).await?;
        eprintln!(
            "[chaos] round {}/{rounds}: killed after {kill_after:?}; {} tasks acknowledged so far",
            round + 1,
            load.acknowledged()
        );
    }

    let server = start(binary, &db)?;
    let endpoint = Endpoint::new(server.addr);
    let mut conn = Conn::open(server.addr).await?;
    let report = load.finish(&mut conn, &endpoint).await;
    server.stop();
    println!(
        "chaos: {rounds} kill -9 rounds in {:.1?}: {}",
        started.elapsed(),
        load.summary()
    );
    println!("{}", report?);
    Ok(())
}

/// The flags every node runs with.
const NODE_FLAGS: [&str; 10] = [
    "--lease-ms",
    "1000",
    "--backoff-base-ms",
    "20",
    "--backoff-cap-ms",
    "100",
    "--max-attempts",
    "3",
    "--concurrency",
    "16",
];

/// A node on `db` (a file or a PostgreSQL URL).
fn start(binary: &Path, db: &Path) -> Result<ServerProcess, String> {
    let mut flags = NODE_FLAGS.to_vec();
    // A share of the tasks fails on purpose (500s, 503s) on the one loopback
    // downstream: with the default breaker it would open and hold every task
    // for its open period, and this run checks what failures lose, not flow
    // control (the worker scenarios do).
    flags.extend(["--breaker-failures", "1000000"]);
    ServerProcess::start("tc-server", tc_server(binary, db, &flags))
}
