//! A process that is killed while submitting loses nothing it was told was
//! stored.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use tc_model::store::TaskStore;
use tc_model::{State, TaskId};
use tc_store::{SqliteStore, StoreConfig};

/// Lines to read before the kill: enough that many batches have committed.
const BEFORE_KILL: usize = 400;
/// The child's own bound on submits; far more than it can do before the kill.
const CHILD_COUNT: &str = "1000000";

/// `<i> <id>` as the child prints it.
fn parse(line: &str) -> (usize, TaskId) {
    let (i, id) = line.trim_end().split_once(' ').unwrap();
    (i.parse().unwrap(), id.parse().unwrap())
}

#[test]
fn sigkill_mid_stream_loses_no_acknowledged_submit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tc-store-crash-child"))
        .arg(&path)
        .arg(CHILD_COUNT)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
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
                .get(id)
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
