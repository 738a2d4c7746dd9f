//! The chaos run's load and its verdict: clients that submit, resubmit and
//! cancel tasks whose downstream paths end in known ways, the ledger of
//! what was acknowledged, and the final check against it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::Method;
use tc_downstream::fake::{FakeServer, Reply, Script, Step};
use tokio::task::JoinSet;

use crate::harness::client::{Conn, Endpoint};

/// Client loops sending submits and cancels at the same time.
const CLIENTS: usize = 4;
/// The most requests one client sends in a round (the failure usually
/// comes first).
const MAX_REQUESTS_PER_ROUND: usize = 400;
const MAX_ATTEMPTS: u32 = 3;
/// How long the last run may take to finish every task.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// How long a client waits after an error answer before its next request.
const REFUSED_PAUSE: Duration = Duration::from_millis(50);

/// The downstream, the ledger and the clients of one chaos run.
pub(super) struct Load {
    script: Arc<Script>,
    downstream: FakeServer,
    ledger: Arc<Mutex<Ledger>>,
}

impl Load {
    /// Starts the fake downstream on loopback.
    pub(super) async fn start() -> Result<Load, String> {
        let script = Script::new();
        // An address of its own in 127.0.0.0/8: a port another process on
        // the machine used before on 127.0.0.1 cannot reach it.
        let ip = std::net::Ipv4Addr::new(127, 77, fastrand::u8(1..255), fastrand::u8(1..255));
        let downstream = FakeServer::start_on(Arc::clone(&script), ip.into())
            .await
            .map_err(|e| format!("fake downstream: {e}"))?;
        Ok(Load {
            script,
            downstream,
            ledger: Arc::new(Mutex::new(Ledger::default())),
        })
    }

    /// Spawns this round's clients, spread over `nodes`.
    pub(super) fn clients(
        &self,
        nodes: &[Endpoint],
        round: usize,
        rng: &mut fastrand::Rng,
    ) -> JoinSet<Result<(), String>> {
        let mut clients = JoinSet::new();
        for c in 0..CLIENTS {
            clients.spawn(client(
                nodes[c % nodes.len()].clone(),
                self.downstream.url().to_owned(),
                Arc::clone(&self.script),
                Arc::clone(&self.ledger),
                rng.u64(..),
                format!("r{round}c{c}"),
            ));
        }
        clients
    }

    /// How many tasks were acknowledged so far.
    pub(super) fn acknowledged(&self) -> usize {
        lock(&self.ledger).tasks.len()
    }

    /// Waits until nothing is due through `endpoint`, then checks every
    /// acknowledged task and every downstream call.
    pub(super) async fn finish(
        &self,
        conn: &mut Conn,
        endpoint: &Endpoint,
    ) -> Result<String, String> {
        drain(conn, endpoint).await?;
        // Every client has stopped: a copy is the whole ledger.
        let ledger = lock(&self.ledger).clone();
        check(conn, endpoint, &ledger, &self.script).await
    }

    /// The run's counts, for its closing line.
    pub(super) fn summary(&self) -> String {
        let ledger = lock(&self.ledger);
        format!(
            "{} tasks acknowledged ({} submits, {} cancels, {} requests unanswered or refused), {} downstream calls",
            ledger.tasks.len(),
            ledger.submits,
            ledger.cancels,
            ledger.unanswered,
            self.script.all_calls().len()
        )
    }
}

/// Waits for every client of a round.
pub(super) async fn join(mut clients: JoinSet<Result<(), String>>) -> Result<(), String> {
    while let Some(done) = clients.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(violation)) => return Err(format!("VIOLATION: {violation}")),
            Err(e) => return Err(format!("a load client panicked: {e}")),
        }
    }
    Ok(())
}

/// What a task's downstream path does, and so how the task must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// 200 at once.
    Ok,
    /// 200 after 300 ms.
    Slow,
    /// 500, then 200 (a 500, not a 503: a 503 without rate-limit fields
    /// also halves the destination's calls in flight,
    /// and this run checks what failures lose, not flow control).
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
            Kind::Flaky => vec![Step::Reply(Reply::status(500))],
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
    /// It asked for a callback on every end (`callback_url` on the
    /// downstream, `callback_on` all three states).
    callback: bool,
    /// A cancel of it was sent (it may have been cut by a kill).
    cancel_sent: bool,
    /// The state a cancel of it answered with, if one was answered.
    canceled_as: Option<String>,
}

#[derive(Default, Clone)]
struct Ledger {
    /// By task id.
    tasks: HashMap<String, Acked>,
    submits: u64,
    cancels: u64,
    unanswered: u64,
}

fn lock(ledger: &Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why a request got no answer the ledger can use.
enum Failed {
    /// The server answered an error (its database away): the outcome is
    /// unknown; the client goes on.
    Refused,
    /// No answer: the server is gone; the client stops.
    Gone,
    /// A promise was broken.
    Violation(String),
}

/// One client: submits tasks of random kinds, resubmits some, cancels some,
/// until its server goes away or its request budget is spent.
async fn client(
    endpoint: Endpoint,
    downstream: String,
    script: Arc<Script>,
    ledger: Arc<Mutex<Ledger>>,
    seed: u64,
    prefix: String,
) -> Result<(), String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let Ok(mut conn) = Conn::open(endpoint.addr).await else {
        return Ok(());
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
                let callback = rng.bool();
                let key = format!("{prefix}-{n}-{}", kind.name());
                let path = format!("/{key}");
                script.plan(&path, kind.steps());
                submit(
                    &mut conn,
                    &endpoint,
                    &downstream,
                    (&key, kind, callback),
                    &ledger,
                )
                .await
                .map(drop)
            }
            Some((id, task)) if rng.bool() => {
                // The same submit again: it must answer the same task.
                submit(
                    &mut conn,
                    &endpoint,
                    &downstream,
                    (&task.key, task.kind, task.callback),
                    &ledger,
                )
                .await
                .and_then(|same| {
                    if same == id {
                        Ok(())
                    } else {
                        Err(Failed::Violation(format!(
                            "resubmit of {} answered task {same}, not {id}",
                            task.key
                        )))
                    }
                })
            }
            Some((id, _)) => cancel(&mut conn, &endpoint, &id, &ledger).await,
        };
        match sent {
            Ok(()) => {}
            Err(Failed::Violation(e)) => return Err(e),
            Err(Failed::Refused) => {
                lock(&ledger).unanswered += 1;
                tokio::time::sleep(REFUSED_PAUSE).await;
            }
            Err(Failed::Gone) => {
                // The server was killed under this request: its outcome is
                // unknown, so it is not in the ledger.
                lock(&ledger).unanswered += 1;
                return Ok(());
            }
        }
    }
    Ok(())
}

/// A task's submit body; with `callback`, its callback goes to
/// `/{key}-callback` (answered 200) on every end.
fn task_body(downstream: &str, key: &str, kind: Kind, callback: bool) -> String {
    let timeout = if kind == Kind::Hang { 200 } else { 5000 };
    let callback = if callback {
        format!(
            r#","callback_url":"{downstream}/{key}-callback","callback_on":["success","failed","canceled"]"#
        )
    } else {
        String::new()
    };
    format!(
        r#"{{"url":"{downstream}/{key}","json":{{"key":"{key}"}},"idempotency_key":"{key}","timeout_ms":{timeout}{callback}}}"#
    )
}

async fn submit(
    conn: &mut Conn,
    endpoint: &Endpoint,
    downstream: &str,
    (key, kind, callback): (&str, Kind, bool),
    ledger: &Mutex<Ledger>,
) -> Result<String, Failed> {
    let body = task_body(downstream, key, kind, callback);
    let request = endpoint
        .request(Method::POST, "/tasks", Some(body.into()))
        .map_err(Failed::Violation)?;
    let reply = conn.send(request).await.map_err(|_| Failed::Gone)?;
    let status = reply.status.as_u16();
    if status != 201 && status != 200 {
        return Err(Failed::Refused);
    }
    let task: serde_json::Value = serde_json::from_slice(&reply.body)
        .map_err(|e| Failed::Violation(format!("submit answer: {e}")))?;
    let id = task["id"]
        .as_str()
        .ok_or_else(|| Failed::Violation("submit answer without id".into()))?
        .to_owned();
    let mut ledger = lock(ledger);
    ledger.submits += 1;
    ledger.tasks.entry(id.clone()).or_insert(Acked {
        key: key.to_owned(),
        kind,
        callback,
        cancel_sent: false,
        canceled_as: None,
    });
    Ok(id)
}

async fn cancel(
    conn: &mut Conn,
    endpoint: &Endpoint,
    id: &str,
    ledger: &Mutex<Ledger>,
) -> Result<(), Failed> {
    let request = endpoint
        .request(Method::POST, &format!("/tasks/{id}/cancel"), None)
        .map_err(Failed::Violation)?;
    if let Some(task) = lock(ledger).tasks.get_mut(id) {
        task.cancel_sent = true;
    }
    let reply = conn.send(request).await.map_err(|_| Failed::Gone)?;
    if reply.status.as_u16() != 200 {
        return Err(Failed::Refused);
    }
    let task: serde_json::Value = serde_json::from_slice(&reply.body)
        .map_err(|e| Failed::Violation(format!("cancel answer: {e}")))?;
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

/// Checks that the terminal task `id` (its view `task`), which asked for a
/// callback on every end, has exactly one callback task for its one end
/// (no retry by hand in a chaos run): `callback:{id}`, its `callback_of`
/// the task, named by the task's `callback_task_id`; none for a 2nd end.
async fn one_callback(
    conn: &mut Conn,
    endpoint: &Endpoint,
    id: &str,
    task: &serde_json::Value,
) -> Result<(), String> {
    let page = get_json(
        conn,
        endpoint,
        &format!("/tasks?idempotency_key=callback:{id}"),
    )
    .await?;
    let found = page["tasks"].as_array().map_or(&[][..], Vec::as_slice);
    let [callback] = found else {
        return Err(format!(
            "task {id} ended {} with {} callback tasks, want 1",
            task["state"],
            found.len()
        ));
    };
    if callback["callback_of"].as_str() != Some(id) || task["callback_task_id"] != callback["id"] {
        return Err(format!(
            "task {id}'s callback {} is not linked both ways (callback_of {}, callback_task_id {})",
            callback["id"], callback["callback_of"], task["callback_task_id"]
        ));
    }
    let second = get_json(
        conn,
        endpoint,
        &format!("/tasks?idempotency_key=callback:{id}:2"),
    )
    .await?;
    if second["tasks"].as_array().is_some_and(|t| !t.is_empty()) {
        return Err(format!("task {id} ended once but has a second callback"));
    }
    Ok(())
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
    let mut callbacks = 0u64;
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
        if acked.callback {
            callbacks += 1;
            if let Err(e) = one_callback(conn, endpoint, id, &task).await {
                violations.push(e);
            }
        }
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
    let mut keys: HashMap<String, String> = ledger
        .tasks
        .iter()
        .map(|(id, t)| (id.clone(), t.key.clone()))
        .collect();
    let mut redeliveries = 0u64;
    let mut foreign = 0u64;
    let mut per_task: HashMap<String, u64> = HashMap::new();
    for call in script.all_calls() {
        let Some(task_id) = call.task_id.as_deref() else {
            violations.push(format!("a call to {} carried no X-Task-Id", call.path));
            continue;
        };
        // A task whose submit was cut is not in the ledger: its key is the
        // service's. A task the service does not know is not this run's (a
        // process elsewhere on the machine calling a port it used before).
        if !keys.contains_key(task_id) {
            let reply = conn
                .send(endpoint.request(Method::GET, &format!("/tasks/{task_id}"), None)?)
                .await?;
            match reply.status.as_u16() {
                200 => {
                    let task: serde_json::Value = serde_json::from_slice(&reply.body)
                        .map_err(|e| format!("GET /tasks/{task_id}: {e}"))?;
                    let key = task["idempotency_key"].as_str().unwrap_or("").to_owned();
                    keys.insert(task_id.to_owned(), key);
                }
                404 => {
                    foreign += 1;
                    continue;
                }
                status => return Err(format!("GET /tasks/{task_id} answered {status}")),
            }
        }
        *per_task.entry(task_id.to_owned()).or_default() += 1;
        let want = keys.get(task_id).map(String::as_str);
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
            "chaos: every acknowledged task present and terminal {states:?}; {interrupted} failed as interrupted after kills took all {MAX_ATTEMPTS} attempts; {redeliveries} calls beyond the first per task (retries and redeliveries), every one with its task's Idempotency-Key; {callbacks} tasks with a callback, each with exactly one callback task for its one end; {foreign} calls of tasks this run never had (another process on the machine) ignored"
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
