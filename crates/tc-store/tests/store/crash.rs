//! A process that is killed while submitting loses nothing it was told was
//! stored.
//!
//! The submitting process is this test binary itself, run again with
//! [`CHILD_ENV`] set: the crash child is test code, never a product binary.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tc_model::store::Tasks;
use tc_model::tenant::Scope;
use tc_model::{Limits, NewTask, State, TaskId, Timestamp};
use tc_store::{SqliteStore, StoreConfig};
use tokio::sync::mpsc;

/// Set (to the database path) in the child: the test then submits instead.
const CHILD_ENV: &str = "TC_STORE_CRASH_CHILD";
/// The test's name as libtest filters it, to run only this test in the child.
const TEST_NAME: &str = "crash::sigkill_mid_stream_loses_no_acknowledged_submit";
/// The child's concurrent callers.
const CALLERS: usize = 8;
/// The child stops by itself after this, should the kill never come.
const DEADLINE: Duration = Duration::from_secs(60);

/// Lines to read before the kill: enough that many batches have committed.
const BEFORE_KILL: usize = 400;
/// The child's own bound on submits; far more than it can do before the kill.
const CHILD_COUNT: usize = 1_000_000;

/// `<i> <id>` as the child prints it.
fn parse(line: &str) -> (usize, TaskId) {
    let (i, id) = line.trim_end().split_once(' ').unwrap();
    (i.parse().unwrap(), id.parse().unwrap())
}

/// Runs this test binary's `test_name` alone as a child with `env` set to
/// `path` (the child's side of a crash test) and answers it with its stderr,
/// where a child acknowledges, written directly: libtest's own lines go to
/// stdout.
pub(crate) fn spawn_child(
    test_name: &str,
    env: &str,
    path: &std::path::Path,
) -> (Child, BufReader<ChildStderr>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(env, path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stderr.take().unwrap());
    (child, out)
}

#[test]
fn sigkill_mid_stream_loses_no_acknowledged_submit() {
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        submit_until_killed(path.as_ref());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let (mut child, mut out) = spawn_child(TEST_NAME, CHILD_ENV, &path);
    let mut acknowledged = Vec::new();
    let mut line = String::new();
    while acknowledged.len() < BEFORE_KILL {
        line.clear();
        let read = out.read_line(&mut line).unwrap();
        assert!(read > 0, "child ended after {} submits", acknowledged.len());
        acknowledged.push(parse(&line));
    }
    child.kill().unwrap();
    // Lines the child printed before it died are still in the pipe. A last
    // line cut off by the kill has no newline and proves nothing.
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 || !line.ends_with('\n') {
            break;
        }
        acknowledged.push(parse(&line));
    }
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "the child was killed, not finished: {status:?}"
    );

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(&path, StoreConfig::default())
            .await
            .unwrap();
        for &(i, id) in &acknowledged {
            let task = store
                .get(id, Scope::Admin)
                .await
                .unwrap_or_else(|e| panic!("acknowledged task {i} ({id}) lost: {e}"));
            assert_eq!(task.idempotency_key, format!("crash-{i}"));
            assert_eq!(task.url, format!("http://127.0.0.1:9/crash/{i}"));
            assert_eq!(task.body, format!("{{\"i\":{i}}}").into_bytes());
            assert_eq!(task.state, State::Pending);
        }
        let stored = store.count_by_state().await.unwrap().get(State::Pending);
        assert!(
            stored >= acknowledged.len() as u64,
            "{stored} stored, {} acknowledged",
            acknowledged.len()
        );
        store.close().await;
    });
}

/// The child: submits tasks from several concurrent callers and writes
/// `<i> <id>` to stderr as each submit returns, until killed, `CHILD_COUNT`
/// tasks or `DEADLINE`. Task `i` has key `crash-<i>`, url
/// `http://127.0.0.1:9/crash/<i>` and body `{"i":<i>}`.
fn submit_until_killed(path: &std::path::Path) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = Arc::new(
            SqliteStore::open(path, StoreConfig::default())
                .await
                .unwrap(),
        );
        let started = Instant::now();
        let (done, mut acknowledged) = mpsc::unbounded_channel();
        for caller in 0..CALLERS {
            let (store, done) = (Arc::clone(&store), done.clone());
            tokio::spawn(async move {
                for i in (caller..CHILD_COUNT).step_by(CALLERS) {
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
                    .unwrap();
                    let submitted = store.submit(task, Timestamp::from_millis(0)).await.unwrap();
                    if done.send((i, submitted.task.id)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done);
        let mut stderr = std::io::stderr().lock();
        while let Some((i, id)) = acknowledged.recv().await {
            writeln!(stderr, "{i} {id}").unwrap();
            stderr.flush().unwrap();
        }
    });
}
