//! `cargo xtask chaos [--rounds N] [--seed S]`: tc-server under mixed load is
//! killed with SIGKILL at random moments and restarted on the same database.
//! After the last round it runs until nothing is due, and then:
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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::Method;
use tc_downstream::fake::{FakeServer, Reply, Script, Step};

use crate::bench::load::{Conn, Endpoint};
use crate::bench::server::{ServerProcess, tc_server};

const USAGE: &str = "usage: cargo xtask chaos [--rounds N] [--seed S]";
/// Client loops sending submits and cancels at the same time.
const CLIENTS: usize = 4;
/// The most requests one client sends in a round (the kill usually comes first).
const MAX_REQUESTS_PER_ROUND: usize = 400;
const MAX_ATTEMPTS: u32 = 3;
/// How long the last run may take to finish every task.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// What a task's downstream path does, and so how the task must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// 200 at once.
    Ok,
    /// 200 after 300 ms.
    Slow,
    /// 503, then 200.
    Flaky,
    /// 400: failed, never retried.
    Bad,
    /// 500 every time: failed after its attempts.
    Broken,
    /// Never answers; the task's 200 ms timeout ends each try.
    Hang,
}

const KINDS: [Kind; 6] = [
    Kind::Ok,
    Kind::Slow,
    Kind::Flaky,
    Kind::Bad,
    Kind::Broken,
    Kind::Hang,
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Ok => "ok",
            Kind::Slow => "slow",
            Kind::Flaky => "flaky",
            Kind::Bad => "bad",
            Kind::Broken => "broken",
            Kind::Hang => "hang",
        }
    }

    /// What the path answers, try after try (more than enough tries, as
    /// kills add redeliveries).
    fn steps(self) -> Vec<Step> {
        let many = |step: Step| vec![step; 2 * MAX_ATTEMPTS as usize + 4];
        match self {
            Kind::Ok => vec![],
            Kind::Slow => many(Step::ReplyAfter(
                Duration::from_millis(300),
                Reply::status(200),
            )),
            Kind::Flaky => vec![Step::Reply(Reply::status(503))],
            Kind::Bad => many(Step::Reply(Reply::status(400))),
            Kind::Broken => many(Step::Reply(Reply::status(500))),
            Kind::Hang => many(Step::Hang),
        }
    }

    /// The state and error the task must end with.
    fn expected(self) -> (&'static str, Option<&'static str>) {
        match self {
            Kind::Ok | Kind::Slow | Kind::Flaky => ("success", None),
            Kind::Bad => ("failed", Some("http_400")),
            Kind::Broken => ("failed", Some("http_500")),
            Kind::Hang => ("failed", Some("timeout")),
        }
    }
}

/// A task whose submit was answered.
#[derive(Debug, Clone)]
struct Acked {
    key: String,
    kind: Kind,
    /// A cancel of it was sent (it may have been cut by a kill).
    cancel_sent: bool,
    /// The state a cancel of it answered with, if one was answered.
    canceled_as: Option<String>,
}

#[derive(Default)]
struct Ledger {
    /// By task id.
    tasks: HashMap<String, Acked>,
    submits: u64,
    cancels: u64,
    unanswered: u64,
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut rounds = 20usize;
    let mut seed = None;
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
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let seed = seed.unwrap_or_else(|| fastrand::u64(..));
    let root = crate::bench::workspace_root();
    crate::bench::build(&root, &["-p", "tc-server"])?;
    let binary = crate::bench::target_dir(&root)
        .join("release")
        .join("tc-server");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    runtime.block_on(chaos(&binary, rounds, seed))
}

async fn chaos(binary: &std::path::Path, rounds: usize, seed: u64) -> Result<(), String> {
    eprintln!("[chaos] {rounds} rounds, seed {seed} (--seed {seed} repeats the choices)");
    let script = Script::new();
    let downstream = FakeServer::start(Arc::clone(&script))
        .await
        .map_err(|e| format!("fake downstream: {e}"))?;
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let db = dir.path().join("chaos.db");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();

    for round in 0..rounds {
        let server = start(binary, &db)?;
        let endpoint = Endpoint::new(server.addr);
        let mut clients = tokio::task::JoinSet::new();
        for client in 0..CLIENTS {
            clients.spawn(load(
                endpoint.clone(),
                downstream.url().to_owned(),
                Arc::clone(&script),
                Arc::clone(&ledger),
                rng.u64(..),
                format!("r{round}c{client}"),
            ));
        }
        let kill_after = Duration::from_millis(rng.u64(200..1500));
        tokio::time::sleep(kill_after).await;
        // SIGKILL: no shutdown, no flush beyond what was committed.
        server.stop();
        while let Some(done) = clients.join_next().await {
            if let Err(e) = done {
                return Err(format!("a load client panicked: {e}"));
            }
        }
        let ledger = lock(&ledger);
        eprintln!(
            "[chaos] round {}/{rounds}: killed after {kill_after:?}; {} tasks acknowledged so far",
            round + 1,
            ledger.tasks.len()
        );
    }

    let server = start(binary, &db)?;
    let endpoint = Endpoint::new(server.addr);
    let mut conn = Conn::open(server.addr).await?;
    drain(&mut conn, &endpoint).await?;
    // Every client has stopped: the ledger is no longer shared.
    let ledger = std::mem::take(&mut *lock(&ledger));
    let report = check(&mut conn, &endpoint, &ledger, &script).await;
    server.stop();
    println!(
        "chaos: {rounds} kill -9 rounds in {:.1?}: {} tasks acknowledged ({} submits, {} cancels, {} requests cut by a kill), {} downstream calls",
        started.elapsed(),
        ledger.tasks.len(),
        ledger.submits,
        ledger.cancels,
        ledger.unanswered,
        script.all_calls().len()
    );
    let report = report?;
    println!("{report}");
    Ok(())
}

fn lock(ledger: &Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

fn start(binary: &std::path::Path, db: &std::path::Path) -> Result<ServerProcess, String> {
    let flags = [
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
        // A share of the tasks fails on purpose (500s, 503s) on the one
        // loopback downstream: with the default breaker it would open and
        // hold every task for its open period, and this run checks what
        // kills lose, not flow control (the worker scenarios do).
        "--breaker-failures",
        "1000000",
    ];
    ServerProcess::start("tc-server", tc_server(binary, db, &flags))
}

/// One client: submits tasks of random kinds, resubmits some, cancels some,
/// until the server goes away or its request budget is spent.
async fn load(
    endpoint: Endpoint,
    downstream: String,
    script: Arc<Script>,
    ledger: Arc<Mutex<Ledger>>,
    seed: u64,
    prefix: String,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let Ok(mut conn) = Conn::open(endpoint.addr).await else {
        return;
    };
    for n in 0..MAX_REQUESTS_PER_ROUND {
        let known: Vec<(String, Acked)> = {
            let ledger = lock(&ledger);
            if ledger.tasks.is_empty() || rng.u8(..10) < 7 {
                Vec::new()
            } else {
                let pick = rng.usize(..ledger.tasks.len());
                ledger
                    .tasks
                    .iter()
                    .nth(pick)
                    .map(|(id, t)| (id.clone(), t.clone()))
                    .into_iter()
                    .collect()
            }
        };
        let sent = match known.into_iter().next() {
            None => {
                let kind = KINDS[rng.usize(..KINDS.len())];
                let key = format!("{prefix}-{n}-{}", kind.name());
                let path = format!("/{key}");
                script.plan(&path, kind.steps());
                submit(&mut conn, &endpoint, &downstream, &key, kind, &ledger).await
            }
            Some((id, task)) if rng.bool() => {
                // The same submit again: it must answer the same task.
                submit(
                    &mut conn,
                    &endpoint,
                    &downstream,
                    &task.key,
                    task.kind,
                    &ledger,
                )
                .await
                .and_then(|got| match got {
                    Some(same) if same != id => Err(format!(
                        "resubmit of {} answered task {same}, not {id}",
                        task.key
                    )),
                    _ => Ok(Some(id)),
                })
            }
            Some((id, _)) => cancel(&mut conn, &endpoint, &id, &ledger)
                .await
                .map(|()| None),
        };
        match sent {
            Ok(_) => {}
            Err(e) if e.starts_with("resubmit") => {
                eprintln!("[chaos] VIOLATION: {e}");
                std::process::exit(1);
            }
            Err(_) => {
                // The server was killed under this request: its outcome is
                // unknown, so it is not in the ledger.
                lock(&ledger).unanswered += 1;
                return;
            }
        }
    }
}

fn task_body(downstream: &str, key: &str, kind: Kind) -> String {
    let timeout = if kind == Kind::Hang { 200 } else { 5000 };
    format!(
        r#"{{"url":"{downstream}/{key}","json":{{"key":"{key}"}},"idempotency_key":"{key}","timeout_ms":{timeout}}}"#
    )
}

async fn submit(
    conn: &mut Conn,
    endpoint: &Endpoint,
    downstream: &str,
    key: &str,
    kind: Kind,
    ledger: &Mutex<Ledger>,
) -> Result<Option<String>, String> {
    let body = task_body(downstream, key, kind);
    let request = endpoint.request(Method::POST, "/tasks", Some(body.into()))?;
    let reply = conn.send(request).await?;
    let status = reply.status.as_u16();
    if status != 201 && status != 200 {
        return Err(format!("submit {key} answered {status}"));
    }
    let task: serde_json::Value =
        serde_json::from_slice(&reply.body).map_err(|e| format!("submit answer: {e}"))?;
    let id = task["id"]
        .as_str()
        .ok_or("submit answer without id")?
        .to_owned();
    let mut ledger = lock(ledger);
    ledger.submits += 1;
    ledger.tasks.entry(id.clone()).or_insert(Acked {
        key: key.to_owned(),
        kind,
        cancel_sent: false,
        canceled_as: None,
    });
    Ok(Some(id))
}

async fn cancel(
    conn: &mut Conn,
    endpoint: &Endpoint,
    id: &str,
    ledger: &Mutex<Ledger>,
) -> Result<(), String> {
    let request = endpoint.request(Method::POST, &format!("/tasks/{id}/cancel"), None)?;
    if let Some(task) = lock(ledger).tasks.get_mut(id) {
        task.cancel_sent = true;
    }
    let reply = conn.send(request).await?;
    if reply.status.as_u16() != 200 {
        return Err(format!("cancel {id} answered {}", reply.status));
    }
    let task: serde_json::Value =
        serde_json::from_slice(&reply.body).map_err(|e| format!("cancel answer: {e}"))?;
    let state = task["state"].as_str().unwrap_or("").to_owned();
    let mut ledger = lock(ledger);
    ledger.cancels += 1;
    if let Some(task) = ledger.tasks.get_mut(id)
        && task.canceled_as.is_none()
    {
        task.canceled_as = Some(state);
    }
    Ok(())
}

async fn get_json(
    conn: &mut Conn,
    endpoint: &Endpoint,
    path: &str,
) -> Result<serde_json::Value, String> {
    let reply = conn
        .send(endpoint.request(Method::GET, path, None)?)
        .await?;
    if reply.status.as_u16() != 200 {
        return Err(format!("GET {path} answered {}", reply.status));
    }
    serde_json::from_slice(&reply.body).map_err(|e| format!("GET {path}: {e}"))
}

/// Waits until no task is pending or running (polling: this is a black box).
async fn drain(conn: &mut Conn, endpoint: &Endpoint) -> Result<(), String> {
    let deadline = Instant::now() + DRAIN_LIMIT;
    loop {
        let mut busy = 0;
        for state in ["pending", "running"] {
            let page = get_json(conn, endpoint, &format!("/tasks?state={state}&limit=1")).await?;
            busy += page["tasks"].as_array().map_or(0, Vec::len);
        }
        if busy == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "tasks still pending or running after {DRAIN_LIMIT:?}: stuck"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks every acknowledged task and every downstream call; returns a
/// summary, or every violation found.
async fn check(
    conn: &mut Conn,
    endpoint: &Endpoint,
    ledger: &Ledger,
    script: &Script,
) -> Result<String, String> {
    let mut violations = Vec::new();
    let mut ended: HashMap<String, u64> = HashMap::new();
    let mut interrupted = 0u64;
    for (id, acked) in &ledger.tasks {
        let task = match get_json(conn, endpoint, &format!("/tasks/{id}")).await {
            Ok(task) => task,
            Err(e) => {
                violations.push(format!(
                    "acknowledged task {id} ({}) is gone: {e}",
                    acked.key
                ));
                continue;
            }
        };
        let state = task["state"].as_str().unwrap_or("?");
        let error = task["error"].as_str();
        let attempt = task["attempt"].as_u64().unwrap_or(0);
        *ended.entry(state.to_owned()).or_default() += 1;
        let (want_state, want_error) = acked.kind.expected();
        let as_its_kind_says = state == want_state && (want_error.is_none() || error == want_error);
        let fits = match acked.canceled_as.as_deref() {
            // A cancel that answered canceled is final.
            Some("canceled") => state == "canceled",
            // The task was done before the cancel: a terminal state stays.
            Some(answered) => state == answered,
            // A cancel cut by a kill may or may not have landed.
            None if acked.cancel_sent => as_its_kind_says || state == "canceled",
            None => as_its_kind_says,
        };
        if !fits {
            if acked.canceled_as.is_none()
                && state == "failed"
                && error == Some("interrupted")
                && attempt >= u64::from(MAX_ATTEMPTS)
            {
                interrupted += 1;
            } else {
                violations.push(format!(
                    "task {id} ({}, {:?}): ended {state} {error:?} after {attempt} attempts, want {want_state} {want_error:?}",
                    acked.key, acked.kind
                ));
            }
        }
    }
    let keys: HashMap<&str, &str> = ledger
        .tasks
        .iter()
        .map(|(id, t)| (id.as_str(), t.key.as_str()))
        .collect();
    let mut redeliveries = 0u64;
    let mut per_task: HashMap<String, u64> = HashMap::new();
    for call in script.all_calls() {
        let Some(task_id) = call.task_id.as_deref() else {
            violations.push(format!("a call to {} carried no X-Task-Id", call.path));
            continue;
        };
        *per_task.entry(task_id.to_owned()).or_default() += 1;
        let want = keys
            .get(task_id)
            .copied()
            .or_else(|| call.path.strip_prefix('/'));
        if call.idempotency_key.as_deref() != want {
            violations.push(format!(
                "a call of task {task_id} carried Idempotency-Key {:?}, want {want:?}",
                call.idempotency_key
            ));
        }
    }
    for calls in per_task.values() {
        redeliveries += calls.saturating_sub(1);
    }
    if violations.is_empty() {
        let mut states: Vec<_> = ended.into_iter().collect();
        states.sort();
        Ok(format!(
            "chaos: every acknowledged task present and terminal {states:?}; {interrupted} failed as interrupted after kills took all {MAX_ATTEMPTS} attempts; {redeliveries} calls beyond the first per task (retries and redeliveries), every one with its task's Idempotency-Key"
        ))
    } else {
        let shown: Vec<_> = violations.iter().take(20).cloned().collect();
        Err(format!(
            "chaos: {} violations:\n  {}",
            violations.len(),
            shown.join("\n  ")
        ))
    }
}
