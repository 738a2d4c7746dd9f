//! What runs beside the claim loop: the settings reads (and the `held`
//! gauges), the heartbeats of running attempts, and lease recovery.

use std::sync::Arc;
use std::time::Duration;

use tc_model::State;
use tc_model::store::{LeaseLost, TaskStore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::WorkerConfig;
use crate::shared::Shared;

/// Recovers expired leases and reads the settings once, then starts the
/// loops that keep doing so, and the heartbeats. The heartbeats run until
/// the returned set is shut down, not on stop: calls in their grace period
/// still need their leases.
pub(crate) async fn start<S: TaskStore>(
    shared: &Arc<Shared<S>>,
    config: &WorkerConfig,
    stop: &CancellationToken,
) -> JoinSet<()> {
    let mut background = JoinSet::new();
    recover_once(shared, config.lease).await;
    read_settings(shared).await;
    crate::cluster::exchange_holds(shared, shared.clock.now()).await;
    background.spawn(heartbeat_loop(Arc::clone(shared), config.lease));
    background.spawn(settings_loop(
        Arc::clone(shared),
        config.settings_interval,
        stop.clone(),
    ));
    background.spawn(recover_loop(
        Arc::clone(shared),
        config.recover_interval,
        config.lease,
        stop.clone(),
    ));
    background
}

/// Reads the destination settings into the worker's flow control and its
/// outbound copy, and the tenants' settings into their share (weights)
/// and the outbound copy (their own signing secrets), and the topic
/// subscriptions' secrets into the outbound copy.
pub(crate) async fn read_settings<S: TaskStore>(shared: &Shared<S>) {
    let read = shared.outbound.read_begins();
    let destinations_read = match shared.store.destination_settings().await {
        Ok(settings) => {
            shared.outbound.set_destinations(&settings);
            let expiries: Vec<(String, i64)> = settings
                .iter()
                .filter_map(|(name, s)| {
                    let facts = &s.client_tls.as_ref()?.cert.facts;
                    Some((name.clone(), facts.not_after.as_millis().div_euclid(1000)))
                })
                .collect();
            shared.flow.metrics().set_client_cert_expiry(&expiries);
            shared.flow.set_settings(settings, shared.clock.now());
            true
        }
        Err(e) => {
            tracing::error!(error = %e, "destination_settings_failed");
            false
        }
    };
    // The tenants' settings, at the same pace: a new tenant, weight or
    // secret is used from the next read (or at once, when told of a
    // change). One read of the tenants alone: `tenants()` would also count
    // every tenant's open tasks and list its keys, every second on every
    // node.
    let tenants_read = match shared.store.tenant_settings().await {
        Ok(tenants) => {
            shared.outbound.set_tenants(&tenants);
            shared
                .tenants
                .set_weights(tenants.into_iter().map(|(n, s)| (n, s.weight)).collect());
            true
        }
        Err(e) => {
            tracing::error!(error = %e, "tenants_read_failed");
            false
        }
    };
    // The topics' subscriptions' own secrets, at the same pace.
    let subscriptions_read = match shared.store.subscription_secrets().await {
        Ok(secrets) => {
            shared.outbound.set_subscriptions(secrets);
            true
        }
        Err(e) => {
            tracing::error!(error = %e, "subscription_secrets_read_failed");
            false
        }
    };
    // A change announced before this read is covered only when every part
    // was read: a tenant's new secret matters as much as a destination's.
    if destinations_read && tenants_read && subscriptions_read {
        shared.outbound.caught_up(read);
    }
}

/// How many settings reads pass between two updates of the held gauges
/// (those count tasks per destination, which costs more).
const HELD_METRICS_EVERY: u32 = 5;

/// Reads destination settings every `every`, and at once when told they
/// changed; now and then sets the `held` gauges.
async fn settings_loop<S: TaskStore>(
    shared: Arc<Shared<S>>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut round = 0u32;
    loop {
        let told = tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => false,
            _ = shared.settings_changed.notified() => true,
        };
        read_settings(&shared).await;
        crate::cluster::exchange_holds(&shared, shared.clock.now()).await;
        if told {
            shared.wake.notify_one();
        }
        round = round.wrapping_add(1);
        if round.is_multiple_of(HELD_METRICS_EVERY) {
            update_held_metrics(&shared).await;
        }
    }
}

async fn update_held_metrics<S: TaskStore>(shared: &Shared<S>) {
    let destinations = match shared.store.destinations().await {
        Ok(destinations) => destinations,
        Err(e) => {
            tracing::error!(error = %e, "destination_counts_failed");
            return;
        }
    };
    let now = shared.clock.now();
    let held: Vec<(String, &'static str, u64)> = destinations
        .into_iter()
        .filter(|d| d.pending > 0)
        .filter_map(|d| {
            let reason = shared
                .flow
                .hold_reason(&d.name, &d.settings, d.running, now)?;
            Some((d.name, reason.as_str(), d.pending))
        })
        .collect();
    shared.flow.metrics().set_held(&held);
}

/// Extends the leases of every task this worker runs, at a third of the lease.
///
/// It runs until the claim loop aborts it after draining, not on stop: calls
/// in their grace period still need their leases.
async fn heartbeat_loop<S: TaskStore>(shared: Arc<Shared<S>>, lease: Duration) {
    let mut tick = tokio::time::interval((lease / 3).max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let running = shared.running();
        if running.is_empty() {
            continue;
        }
        match shared
            .store
            .heartbeat(running, shared.clock.now(), lease)
            .await
        {
            Ok(lost) => stop_taken_away(&shared, &lost),
            Err(e) => tracing::error!(error = %e, "heartbeat_failed"),
        }
    }
}

/// Some leases were not extended: those tasks are no longer this worker's
/// (canceled through another process, or recovered after a stall). Their
/// calls are dropped, as a cancel through this worker would; the heartbeat
/// said what became of each, so nothing is read. An attempt that ended
/// here meanwhile is no longer running and is left alone.
fn stop_taken_away<S: TaskStore>(shared: &Shared<S>, lost: &[LeaseLost]) {
    for lost in lost {
        let (id, attempt) = (lost.id, lost.attempt);
        // A task gone from the store was finished and deleted: its call's
        // answer has nowhere to land, as for a cancel.
        let state = lost.state.unwrap_or(State::Canceled);
        if shared.stop_attempt(id, attempt, state) {
            tracing::info!(task_id = %id, attempt, state = %state, "task_taken_away");
        }
    }
}

/// Recovers expired leases every `every` while the store says this process
/// leads upkeep (the first run is at start, by the claim loop, on every
/// process).
async fn recover_loop<S: TaskStore>(
    shared: Arc<Shared<S>>,
    every: Duration,
    lease: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            // Of several nodes on one store, the upkeep leader recovers
            // for all (the first recovery at start runs everywhere).
            _ = tick.tick() => if shared.store.leads_upkeep() {
                recover_once(&shared, lease).await;
            },
        }
    }
}

/// Recovers expired leases, never this worker's own: its running attempts
/// are heartbeated first, at the same `now`. A forward jump of the wall clock
/// larger than the lease would otherwise make this very worker take back (and
/// call again) tasks it is still running.
async fn recover_once<S: TaskStore>(shared: &Shared<S>, lease: Duration) {
    let now = shared.clock.now();
    let running = shared.running();
    if !running.is_empty()
        && let Err(e) = shared.store.heartbeat(running, now, lease).await
    {
        // Recovering now could take back our own calls: skip this round.
        tracing::error!(error = %e, "heartbeat_failed");
        return;
    }
    match shared.store.recover_expired(now).await {
        Ok(0) => {}
        Ok(recovered) => {
            tracing::info!(recovered, "leases_recovered");
            shared.wake.notify_one();
        }
        Err(e) => tracing::error!(error = %e, "recover_failed"),
    }
}
