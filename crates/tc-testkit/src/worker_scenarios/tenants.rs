//! Tenants share the worker's slots by weight: inside one
//! destination, a tenant with a backlog takes every slot while no other
//! tenant has due tasks, and cannot keep another's share once it has. The
//! worker reads the tenants' settings alone, never their counts and keys.

use std::sync::Arc;
use std::time::Duration;

use tc_downstream::Downstream;
use tc_downstream::fake::{Reply, Step};
use tc_model::store::TaskStore;
use tc_model::tenant::TenantUpdate;
use tc_model::{Limits, NewTask, TaskId};
use tc_worker::{Worker, WorkerConfig, WorkerMetrics};

use super::{GatedStore, Rig, guard, stop};

async fn create<S: TaskStore, D>(rig: &Rig<S, D>, name: &str, weight: u32) -> Result<(), String> {
    let settings = TenantUpdate {
        weight: Some(weight),
        ..TenantUpdate::default()
    };
    rig.store
        .create_tenant(name.to_owned(), settings, rig.clock.now())
        .await
        .map(drop)
        .map_err(|e| format!("create_tenant {name}: {e}"))
}

/// Submits one task of `tenant` per path `/{tenant}/{i}`, all to the rig's
/// one host (one destination); [`ADMIN`] submits tasks without a tenant.
async fn submit_for<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    tenant: &str,
    range: std::ops::Range<usize>,
) -> Result<Vec<TaskId>, String> {
    let mut ids = Vec::new();
    for i in range {
        let new = NewTask::new(
            rig.url(&format!("/{tenant}/{i}")),
            b"{}".to_vec(),
            format!("k{i}"),
            1,
            Duration::from_secs(60),
            &Limits::default(),
        )
        .map_err(|e| format!("invalid task: {e}"))?
        .with_tenant((tenant != ADMIN).then(|| tenant.to_owned()), None);
        let submitted = rig
            .store
            .submit(new, rig.clock.now())
            .await
            .map_err(|e| format!("submit: {e}"))?;
        ids.push(submitted.task.id);
    }
    Ok(ids)
}

/// The path segment of the tasks without a tenant (the admin's).
const ADMIN: &str = "admin";

/// Tasks without a tenant count as one more tenant of weight 1, however
/// long a tenant's backlog ahead of them: "a" (weight 1) queues more due
/// tasks than any bounded walk past them would reach, then the admin and
/// "b" queue some behind it. Once "a"'s first three calls end, the three
/// slots go one to each: "a", "b" and the admin.
pub(super) async fn tasks_without_a_tenant_keep_their_share_behind_a_backlog<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    const SLOTS: usize = 3;
    const BACKLOG: usize = 700;
    create(rig, "a", 1).await?;
    create(rig, "b", 1).await?;
    for i in 0..SLOTS {
        rig.script
            .plan(&format!("/a/{i}"), [Step::Gate(Reply::status(200))]);
    }
    for i in SLOTS..BACKLOG {
        rig.script.plan(&format!("/a/{i}"), [Step::Hang]);
    }
    for i in 0..4 {
        rig.script.plan(&format!("/b/{i}"), [Step::Hang]);
        rig.script.plan(&format!("/{ADMIN}/{i}"), [Step::Hang]);
    }
    let worker = rig.spawn_worker(WorkerConfig {
        concurrency: SLOTS,
        shutdown_grace: Duration::from_millis(50),
        ..rig.config()
    });
    let calls_reach = |n: usize| {
        rig.script
            .wait_for(move |r| (r.calls().len() >= n).then_some(()))
    };
    submit_for(rig, "a", 0..SLOTS).await?;
    worker.control().task_submitted();
    guard("a's first calls", calls_reach(SLOTS)).await?;
    submit_for(rig, "a", SLOTS..BACKLOG).await?;
    submit_for(rig, ADMIN, 0..4).await?;
    submit_for(rig, "b", 0..4).await?;
    worker.control().task_submitted();
    rig.script.open_gate();
    guard("the three slots claimed again", calls_reach(2 * SLOTS)).await?;
    let later: Vec<String> = rig
        .script
        .read(|r| r.calls()[SLOTS..].iter().map(|c| c.path.clone()).collect());
    let of = |tenant: &str| {
        later
            .iter()
            .filter(|p| p.starts_with(&format!("/{tenant}/")))
            .count()
    };
    ensure!(
        (of("a"), of("b"), of(ADMIN)) == (1, 1, 1),
        "after the gate the slots went {} to a, {} to b and {} to the tasks without a \
         tenant, want one each: {later:?}",
        of("a"),
        of("b"),
        of(ADMIN)
    );
    stop(worker).await
}

/// Tenants "a" (weight 3) and "b" (weight 1) on one destination, 4 slots.
/// "a"'s backlog first takes all 4 (no one else is due); once "b" has a
/// backlog too and "a"'s four calls end, the slots go 3 to "a" and 1 to
/// "b", whatever order the calls end in; "a" never takes "b"'s one.
pub(super) async fn tenants_share_a_destination_by_weight<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    const SLOTS: usize = 4;
    create(rig, "a", 3).await?;
    create(rig, "b", 1).await?;
    // "a"'s first four calls answer when the gate opens; every other call
    // hangs, so the slots after the gate stay where the share put them.
    for i in 0..SLOTS {
        rig.script
            .plan(&format!("/a/{i}"), [Step::Gate(Reply::status(200))]);
    }
    for i in SLOTS..40 {
        rig.script.plan(&format!("/a/{i}"), [Step::Hang]);
    }
    for i in 0..20 {
        rig.script.plan(&format!("/b/{i}"), [Step::Hang]);
    }
    let worker = rig.spawn_worker(WorkerConfig {
        concurrency: SLOTS,
        shutdown_grace: Duration::from_millis(50),
        ..rig.config()
    });
    let calls_reach = |n: usize| {
        rig.script
            .wait_for(move |r| (r.calls().len() >= n).then_some(()))
    };
    submit_for(rig, "a", 0..SLOTS).await?;
    worker.control().task_submitted();
    guard("a's first calls", calls_reach(SLOTS)).await?;
    submit_for(rig, "a", SLOTS..40).await?;
    submit_for(rig, "b", 0..20).await?;
    worker.control().task_submitted();
    rig.script.open_gate();
    guard("the four slots claimed again", calls_reach(2 * SLOTS)).await?;
    // Nothing more can start: every slot hangs.
    let later: Vec<String> = rig
        .script
        .read(|r| r.calls()[SLOTS..].iter().map(|c| c.path.clone()).collect());
    let of = |tenant: &str| {
        later
            .iter()
            .filter(|p| p.starts_with(&format!("/{tenant}/")))
            .count()
    };
    ensure!(
        of("a") == 3 && of("b") == 1,
        "after the gate the slots went {} to a (weight 3) and {} to b (weight 1), want 3 and 1: {later:?}",
        of("a"),
        of("b")
    );
    stop(worker).await
}

/// The worker's settings reads (at start, every `settings_interval`, and
/// when told of a change) read the tenants' settings alone
/// (`tenant_settings`: weights, signing secrets): never `tenants()`, which
/// counts every tenant's open tasks and lists its keys
/// (a 50,000-task backlog counted every second on every node).
pub(super) async fn the_worker_reads_only_the_tenants_weights<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    create(rig, "a", 2).await?;
    submit_for(rig, "a", 0..3).await?;
    let gated = Arc::new(GatedStore::new(Arc::clone(&rig.store)));
    let worker = Worker::spawn(
        Arc::clone(&gated),
        Arc::clone(&rig.downstream),
        rig.config(),
        rig.clock.clone(),
        WorkerMetrics::default(),
    );
    // The read at start, then two of the loop's.
    guard(
        "three reads of the weights",
        gated.hooks().wait_weight_reads(3),
    )
    .await?;
    stop(worker).await?;
    let details = gated.hooks().tenant_details();
    ensure!(
        details == 0,
        "the worker read the tenants with their counts and keys {details} times"
    );
    Ok(())
}
