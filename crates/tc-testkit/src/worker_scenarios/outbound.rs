//! What a try sends: a task's method and headers over its destination's,
//! and the Standard Webhooks signature, on every try, retries included;
//! a destination changed through this process reaches the next claim.

use std::sync::Arc;
use std::time::Duration;

use tc_downstream::fake::{Call, Reply, Step};
use tc_downstream::{Downstream, webhook_signature};
use tc_model::destination::DestinationUpdate;
use tc_model::signing::SigningSecrets;
use tc_model::store::TaskStore;
use tc_model::{Headers, Limits, Method, NewTask, State, destination_of};
use tc_worker::{Worker, WorkerConfig, WorkerMetrics};

use super::{GatedStore, Rig, guard, stop, wait_terminal};

/// Two secrets, as during a rotation.
const SECRETS: [&str; 2] = [
    "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
    "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
];

fn headers(list: &[(&str, &str)]) -> Result<Headers, String> {
    Headers::parse(list.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())))
        .map_err(|e| format!("fixture headers: {e}"))
}

/// Checks one call against the task: its method, the merged headers and a
/// signature by each secret over the id, the timestamp and the body.
fn check_call(call: &Call, n: u32, id: &str, secrets: &SigningSecrets) -> Result<i64, String> {
    let header = |name: &str| call.header(name).unwrap_or("");
    ensure!(call.method == "PUT", "call {n}: method {}", call.method);
    ensure!(
        header("authorization") == "Bearer task",
        "call {n}: the task's own authorization wins: {:?}",
        call.header("authorization")
    );
    ensure!(
        header("x-region") == "eu" && header("x-tenant") == "acme",
        "call {n}: the destination's and the task's headers: {:?}",
        call.headers
    );
    ensure!(
        call.attempt == Some(n) && header("webhook-id") == id && header("x-task-id") == id,
        "call {n}: attempt {:?}, webhook-id {:?}",
        call.attempt,
        call.header("webhook-id")
    );
    ensure!(
        header("user-agent").starts_with("taskcenter/"),
        "call {n}: user-agent {:?}",
        call.header("user-agent")
    );
    let timestamp: i64 = header("webhook-timestamp").parse().map_err(|_| {
        format!(
            "call {n}: webhook-timestamp {:?}",
            header("webhook-timestamp")
        )
    })?;
    let keys: Vec<&[u8]> = secrets.iter().map(|s| s.key()).collect();
    let expected = webhook_signature(&keys, id, timestamp, &call.body);
    ensure!(
        header("webhook-signature") == expected,
        "call {n}: webhook-signature {:?}, expected {expected:?}",
        call.header("webhook-signature")
    );
    ensure!(
        expected.split(' ').count() == 2,
        "call {n}: one signature per secret: {expected}"
    );
    Ok(timestamp)
}

/// A PUT task with its own headers, to a destination given default headers
/// and two signing secrets after the worker started, fails twice with 503
/// and then succeeds: every one of its three calls carries the method, the
/// task's headers over the destination's, and both signatures over its own
/// timestamp, which never goes back.
///
/// The settings change is announced (`destinations_changed`, as the API
/// does before it answers) while the worker's own read of it is held, and
/// the settings interval is far longer than the scenario: only the claim
/// reading the announced change itself gets the headers into the first
/// call.
pub(super) async fn outbound_calls_carry_headers_and_signatures_on_every_try<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let gated = Arc::new(GatedStore::new(Arc::clone(&rig.store)));
    let worker = Worker::spawn(
        Arc::clone(&gated),
        Arc::clone(&rig.downstream),
        WorkerConfig {
            settings_interval: Duration::from_secs(3600),
            ..rig.config()
        },
        rig.clock.clone(),
        WorkerMetrics::default(),
    );
    let mut events = worker.control().subscribe();
    // One task first, so the worker has made its first read of the
    // settings and runs its settings loop before the read is held.
    let warm = rig.submit("/warm", "warm-1").await?;
    worker.control().task_submitted();
    wait_terminal(&mut events, warm.id).await?;

    let url = rig.url("/signed");
    let secrets = SigningSecrets::parse(&SECRETS).map_err(|e| format!("fixture: {e}"))?;
    rig.store
        .update_destination(
            destination_of(&url),
            DestinationUpdate {
                headers: Some(headers(&[
                    ("Authorization", "Bearer destination"),
                    ("X-Region", "eu"),
                ])?),
                signing_secrets: Some(secrets.clone()),
                ..DestinationUpdate::default()
            },
            rig.clock.now(),
        )
        .await
        .map_err(|e| format!("update_destination: {e}"))?;
    gated.hooks().arm_settings();
    // A claim round is woken just before the change is announced (another
    // client's submit): it finds the copy stale and reads the settings
    // first. That read is the claim loop's own and must pass; the hold is
    // for the settings loop's.
    worker.control().task_submitted();
    worker.control().destinations_changed();
    guard("the settings loop's read", gated.hooks().held()).await?;

    rig.script.plan(
        "/signed",
        [
            Step::Reply(Reply::status(503)),
            Step::Reply(Reply::status(503)),
            Step::Reply(Reply::status(200)),
        ],
    );
    let new = NewTask::new(
        url,
        br#"{"amount":42}"#.to_vec(),
        "signed-1".to_owned(),
        3,
        Duration::from_secs(2),
        &Limits::default(),
    )
    .and_then(|t| t.with_method(Method::Put))
    .map_err(|e| format!("fixture: {e}"))?
    .with_headers(headers(&[
        ("authorization", "Bearer task"),
        ("x-tenant", "acme"),
    ])?);
    let task = rig
        .store
        .submit(new, rig.clock.now())
        .await
        .map_err(|e| format!("submit: {e}"))?
        .task;
    worker.control().task_submitted();
    let ended = wait_terminal(&mut events, task.id).await?;
    ensure!(
        ended.state == State::Success,
        "the third try succeeds: {ended:?}"
    );
    gated.hooks().release();
    stop(worker).await?;

    let calls = rig.script.calls("/signed");
    ensure!(calls.len() == 3, "three tries: {}", calls.len());
    let id = task.id.to_string();
    let mut last = i64::MIN;
    for (n, call) in (1..).zip(&calls) {
        let timestamp = check_call(call, n, &id, &secrets)?;
        ensure!(
            timestamp >= last,
            "call {n}: timestamp {timestamp} before {last}"
        );
        last = timestamp;
        ensure!(
            &call.body[..] == br#"{"amount":42}"#,
            "call {n}: the body as submitted"
        );
    }
    Ok(())
}
