//! Test helper for tc-store's crash test, not a tool: submits tasks to the
//! store at `<path>` from several concurrent callers and prints `<i> <id>`
//! on stdout as each submit returns, until `<count>` tasks or 60 seconds.
//! The test kills it with SIGKILL mid-stream and checks that every printed
//! task is in the file. Task `i` has key `crash-<i>`, url
//! `http://127.0.0.1:9/crash/<i>` and body `{"i":<i>}`.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tc_model::store::TaskStore;
use tc_model::{Limits, NewTask, Timestamp};
use tc_store::{SqliteStore, StoreConfig};
use tokio::sync::mpsc;

const CALLERS: usize = 8;
const DEADLINE: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(Ok(count))) = (args.first(), args.get(1).map(|n| n.parse::<usize>()))
    else {
        eprintln!("usage: tc-store-crash-child <path> <count>");
        return ExitCode::FAILURE;
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(path, count)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(path: &str, count: usize) -> Result<(), String> {
    let store = SqliteStore::open(path, StoreConfig::default())
        .await
        .map_err(|e| e.to_string())?;
    let store = Arc::new(store);
    let started = Instant::now();
    let (done, mut printed) = mpsc::unbounded_channel();
    for caller in 0..CALLERS {
        let (store, done) = (Arc::clone(&store), done.clone());
        tokio::spawn(async move {
            for i in (caller..count).step_by(CALLERS) {
                if started.elapsed() > DEADLINE {
                    break;
                }
                let task = NewTask::new(
                    format!("http://127.0.0.1:9/crash/{i}"),
                    format!("{{\"i\":{i}}}").into_bytes(),
                    format!("crash-{i}"),
                    3,
                    Duration::from_secs(1),
                    &Limits::default(),
                )
                .map_err(|e| e.to_string());
                let submitted = match task {
                    Ok(task) => store.submit(task, Timestamp::from_millis(0)).await,
                    Err(e) => {
                        let _ = done.send(Err(e));
                        return;
                    }
                };
                let sent = done.send(submitted.map(|s| (i, s.task.id)).map_err(|e| e.to_string()));
                if sent.is_err() {
                    return;
                }
            }
        });
    }
    drop(done);
    let mut stdout = std::io::stdout().lock();
    while let Some(line) = printed.recv().await {
        let (i, id) = line?;
        writeln!(stdout, "{i} {id}")
            .and_then(|()| stdout.flush())
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
