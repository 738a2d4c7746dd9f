//! `cargo xtask test-matrix`: the worker's scenarios (tc-testkit) for every
//! store adapter × downstream, printed as a table.
//!
//! Each cell runs on its own current-thread runtime in real time (the real
//! client cannot use a paused clock), with a fresh store and a fresh
//! scripted downstream. A new store adapter plugs in with one line in
//! [`STORES`].

use std::future::Future;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tc_downstream::fake::{FakeDownstream, FakeServer, Script};
use tc_downstream::{DownstreamConfig, HyperDownstream};
use tc_model::store::TaskStore;
use tc_store::{SqliteStore, StoreConfig};
use tc_store_pg::testing::TestDatabase;
use tc_store_pg::{PgClock, PgConfig, PgStore};
use tc_testkit::memory_store::MemoryStore;
use tc_testkit::store_contract::{self, Report};
use tc_testkit::worker_scenarios::{Rig, SCENARIOS, run};

/// How a cell's downstream is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Down {
    /// The scripted fake, in process.
    Fake,
    /// The real hyper client against the script served on loopback.
    Hyper,
}

const DOWNSTREAMS: &[(&str, Down)] = &[("fake", Down::Fake), ("hyper", Down::Hyper)];

/// Runs one scenario on one store adapter with one downstream.
type Cell = fn(&str, Down, &Path) -> Result<(), String>;

/// Runs the whole store contract on fresh stores of one adapter.
type Contract = fn(&Path) -> Result<Vec<Report>, String>;

/// Every store adapter: its name, how to run a worker cell on a fresh one,
/// and how to run the store contract on it. A new adapter is one more line.
const STORES: &[(&str, Cell, Contract)] = &[
    (
        "memory",
        |scenario, down, _dir| run_cell(scenario, down, async { Ok(MemoryStore::new()) }),
        |_dir| run_contract(|_| async { MemoryStore::new() }),
    ),
    (
        "sqlite-mem",
        |scenario, down, _dir| {
            run_cell(scenario, down, async {
                SqliteStore::open_in_memory(StoreConfig::default())
                    .await
                    .map_err(|e| e.to_string())
            })
        },
        |_dir| {
            run_contract(|_| async {
                SqliteStore::open_in_memory(StoreConfig::default())
                    .await
                    .unwrap_or_else(|e| panic!("open: {e}"))
            })
        },
    ),
    (
        "sqlite-file",
        |scenario, down, dir| {
            let path = dir.join("matrix.db");
            run_cell(scenario, down, async move {
                SqliteStore::open(&path, StoreConfig::default())
                    .await
                    .map_err(|e| e.to_string())
            })
        },
        |dir| {
            let dir = dir.to_owned();
            run_contract(move |n| {
                let path = dir.join(format!("contract-{n}.db"));
                async move {
                    SqliteStore::open(&path, StoreConfig::default())
                        .await
                        .unwrap_or_else(|e| panic!("open: {e}"))
                }
            })
        },
    ),
    ("postgres", postgres_cell, postgres_contract),
];

/// A worker cell on a fresh PostgreSQL schema, in database-clock mode (what
/// production runs); the schema is dropped after the cell.
fn postgres_cell(scenario: &str, down: Down, _dir: &Path) -> Result<(), String> {
    with_test_database(|db| {
        let schema = db.fresh_schema();
        let url = db.url().to_owned();
        run_cell(scenario, down, async move {
            PgStore::open(
                &url,
                PgConfig {
                    schema: Some(schema),
                    pool_size: 4,
                    ..PgConfig::default()
                },
            )
            .await
            .map_err(|e| e.to_string())
        })
    })
}

/// The store contract on fresh PostgreSQL schemas, in caller-clock mode (the
/// contract sets every time itself).
fn postgres_contract(_dir: &Path) -> Result<Vec<Report>, String> {
    with_test_database(|db| {
        run_contract(|_| async {
            db.open(PgConfig {
                clock: PgClock::Caller,
                pool_size: 4,
                ..PgConfig::default()
            })
            .await
            .unwrap_or_else(|e| panic!("open: {e}"))
        })
    })
}

/// Runs `body` with the test database, then drops the schemas it made.
fn with_test_database<T>(
    body: impl FnOnce(&TestDatabase) -> Result<T, String>,
) -> Result<T, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let db = runtime
        .block_on(TestDatabase::connect())
        .map_err(|skip| skip.to_string())?;
    let result = body(&db);
    runtime.block_on(db.cleanup())?;
    result
}

/// Whether the store column `name` can run here: every column but postgres
/// always; postgres when its test database answers, or when it is required
/// (`TC_REQUIRE_POSTGRES=1`), where an unreachable one fails the cells.
fn store_available(name: &str) -> bool {
    if name != "postgres" || tc_store_pg::testing::required() {
        return true;
    }
    let reachable = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .is_ok_and(|rt| rt.block_on(TestDatabase::connect()).is_ok());
    if !reachable {
        println!(
            "{}",
            tc_store_pg::testing::Skip {
                url: tc_store_pg::testing::test_url()
            }
        );
    }
    reachable
}

/// The longest one cell may take.
const CELL_LIMIT: Duration = Duration::from_secs(90);

pub(crate) fn run_matrix(args: &[String]) -> Result<(), String> {
    let mut verbose = false;
    let mut only: Option<String> = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--verbose" | "-v" => verbose = true,
            "--only" => only = Some(args.next().ok_or("--only takes a scenario name")?.clone()),
            other => {
                return Err(format!(
                    "test-matrix: unknown argument {other:?} (use --verbose, --only <scenario>)"
                ));
            }
        }
    }
    let scenarios: Vec<&str> = SCENARIOS
        .iter()
        .copied()
        .filter(|s| only.as_deref().is_none_or(|o| o == *s))
        .collect();
    if scenarios.is_empty() {
        return Err(format!(
            "no scenario named {:?}; scenarios: {}",
            only.unwrap_or_default(),
            SCENARIOS.join(", ")
        ));
    }
    let stores: Vec<&(&str, Cell, Contract)> = STORES
        .iter()
        .filter(|(name, _, _)| store_available(name))
        .collect();
    let columns: Vec<(String, Cell, Down)> = stores
        .iter()
        .flat_map(|(store, cell, _)| {
            DOWNSTREAMS
                .iter()
                .map(move |(down_name, down)| (format!("{store}×{down_name}"), *cell, *down))
        })
        .collect();

    let started = Instant::now();
    // One thread per column: cells in a column run one after another.
    let results: Vec<Vec<CellResult>> = std::thread::scope(|scope| {
        let handles: Vec<_> = columns
            .iter()
            .map(|(_, cell, down)| {
                let scenarios = &scenarios;
                scope.spawn(move || {
                    scenarios
                        .iter()
                        .map(|scenario| {
                            let result = run_captured(*cell, scenario, *down);
                            eprint!("{}", if result.outcome.is_ok() { "." } else { "F" });
                            let _ = std::io::stderr().flush();
                            result
                        })
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec![CellResult::panicked(); scenarios.len()])
            })
            .collect()
    });
    eprintln!();

    print_table(&scenarios, &columns, &results);
    let failures: Vec<_> = scenarios
        .iter()
        .enumerate()
        .flat_map(|(row, scenario)| {
            columns
                .iter()
                .enumerate()
                .map(move |(col, (name, _, _))| (row, col, scenario, name))
        })
        .filter(|(row, col, _, _)| results[*col][*row].outcome.is_err())
        .collect();
    for (row, col, scenario, name) in &failures {
        let cell = &results[*col][*row];
        if let Err(message) = &cell.outcome {
            println!("\nFAIL {scenario} [{name}]: {message}");
            if verbose {
                println!("--- logs ---\n{}", String::from_utf8_lossy(&cell.logs));
            }
        }
    }
    let contract_failures = if only.is_some() {
        0
    } else {
        print_contract(&stores)?
    };
    let cells = scenarios.len() * columns.len();
    println!(
        "\n{} of {cells} cells passed in {:.1} s{}",
        cells - failures.len(),
        started.elapsed().as_secs_f64(),
        if failures.is_empty() || verbose {
            ""
        } else {
            " (--verbose shows a failing cell's logs)"
        }
    );
    match (failures.len(), contract_failures) {
        (0, 0) => Ok(()),
        (worker, contract) => Err(format!(
            "{worker} worker cells and {contract} store contract cells failed"
        )),
    }
}

/// Runs the store contract on every store adapter and prints it as a table;
/// returns how many cells failed.
fn print_contract(stores: &[&(&str, Cell, Contract)]) -> Result<usize, String> {
    let mut columns = Vec::new();
    for (name, _, contract) in stores {
        let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
        columns.push((*name, contract(dir.path())?));
        eprint!(".");
    }
    eprintln!();
    let names: Vec<&str> = columns
        .first()
        .map(|(_, reports)| reports.iter().map(|r| r.name).collect())
        .unwrap_or_default();
    let width = names.iter().map(|n| n.len()).max().unwrap_or(8);
    let mut header = format!("{:width$}", "store contract");
    for (name, _) in &columns {
        header.push_str(&format!("  {name:>12}"));
    }
    println!("\n{header}");
    println!("{}", "-".repeat(header.chars().count()));
    let mut failed = Vec::new();
    for (row, scenario) in names.iter().enumerate() {
        let mut line = format!("{scenario:width$}");
        for (adapter, reports) in &columns {
            let mark = match reports.get(row).map(|r| &r.verdict) {
                Some(Ok(())) => "ok",
                Some(Err(message)) => {
                    failed.push(format!("FAIL {scenario} [{adapter}]: {message}"));
                    "FAIL"
                }
                None => "missing",
            };
            line.push_str(&format!("  {mark:>12}"));
        }
        println!("{line}");
    }
    for failure in &failed {
        println!("\n{failure}");
    }
    Ok(failed.len())
}

/// Runs the contract on a multi-threaded runtime (the contract's own
/// requirement: real concurrency, the real clock).
fn run_contract<S, F, Fut>(mut make_store: F) -> Result<Vec<Report>, String>
where
    S: TaskStore,
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = S>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    let mut n = 0;
    Ok(runtime.block_on(store_contract::run_all(|| {
        n += 1;
        make_store(n)
    })))
}

#[derive(Clone)]
struct CellResult {
    outcome: Result<(), String>,
    elapsed: Duration,
    logs: Vec<u8>,
}

impl CellResult {
    fn panicked() -> CellResult {
        CellResult {
            outcome: Err("the column's thread panicked".into()),
            elapsed: Duration::ZERO,
            logs: Vec::new(),
        }
    }
}

/// Runs a cell with its logs captured (they are shown only with --verbose).
fn run_captured(cell: Cell, scenario: &str, down: Down) -> CellResult {
    let logs = LogBuffer::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let started = Instant::now();
    let outcome = tracing::subscriber::with_default(subscriber, || match tempfile::tempdir() {
        Ok(dir) => cell(scenario, down, dir.path()),
        Err(e) => Err(format!("temp dir: {e}")),
    });
    CellResult {
        outcome,
        elapsed: started.elapsed(),
        logs: logs.take(),
    }
}

fn run_cell<S, Open>(scenario: &str, down: Down, open: Open) -> Result<(), String>
where
    S: TaskStore,
    Open: Future<Output = Result<S, String>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    runtime.block_on(async {
        let store = Arc::new(open.await.map_err(|e| format!("open store: {e}"))?);
        let script = Script::new();
        let play = async {
            match down {
                Down::Fake => {
                    let fake = Arc::new(FakeDownstream::new(Arc::clone(&script)));
                    let rig = Rig::new(store, fake, script, "http://downstream.test")
                        .with_other_host("http://other.test");
                    run(scenario, &rig).await
                }
                Down::Hyper => {
                    // Two loopback servers on two ports: two destinations
                    // for the real client, playing one script.
                    let server = FakeServer::start(Arc::clone(&script))
                        .await
                        .map_err(|e| format!("loopback server: {e}"))?;
                    let other = FakeServer::start(Arc::clone(&script))
                        .await
                        .map_err(|e| format!("second loopback server: {e}"))?;
                    let client = Arc::new(HyperDownstream::new(DownstreamConfig::default()));
                    let rig =
                        Rig::new(store, client, script, server.url()).with_other_host(other.url());
                    run(scenario, &rig).await
                }
            }
        };
        tokio::time::timeout(CELL_LIMIT, play)
            .await
            .map_err(|_| format!("did not finish within {CELL_LIMIT:?}"))?
    })
}

fn print_table(scenarios: &[&str], columns: &[(String, Cell, Down)], results: &[Vec<CellResult>]) {
    let width = scenarios.iter().map(|s| s.len()).max().unwrap_or(8).max(8);
    let mut header = format!("{:width$}", "scenario");
    for (name, _, _) in columns {
        header.push_str(&format!("  {name:>18}"));
    }
    println!("{header}");
    println!("{}", "-".repeat(header.chars().count()));
    for (row, scenario) in scenarios.iter().enumerate() {
        let mut line = format!("{scenario:width$}");
        for column in results.iter().take(columns.len()) {
            let cell = &column[row];
            let mark = match cell.outcome {
                Ok(()) => format!("ok {:>6.2}s", cell.elapsed.as_secs_f64()),
                Err(_) => format!("FAIL {:>4.1}s", cell.elapsed.as_secs_f64()),
            };
            line.push_str(&format!("  {mark:>18}"));
        }
        println!("{line}");
    }
}

/// A log sink shared by one cell's subscriber.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    fn take(&self) -> Vec<u8> {
        std::mem::take(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
