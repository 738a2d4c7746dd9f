//! The store contract: what every [`TaskStore`] adapter must do, written
//! against the port only, so that a new adapter is "pass this suite".
//!
//! Each scenario is a plain async function taking a fresh, empty store and
//! returning `Ok(())` or a message saying what broke. Run them all with
//! [`run_all`] and a factory making fresh stores:
//!
//! ```
//! use std::future::Future;
//!
//! use tc_model::store::TaskStore;
//! use tc_testkit::store_contract::{failures, run_all};
//!
//! /// Fails naming every broken scenario; `new_store` makes a fresh store.
//! async fn check_contract<S, Fut>(new_store: impl FnMut() -> Fut)
//! where
//!     S: TaskStore,
//!     Fut: Future<Output = S>,
//! {
//!     let reports = run_all(new_store).await;
//!     assert_eq!(failures(&reports), None);
//! }
//! ```
//!
//! or one by one through [`scenarios`] (a name and a function each), e.g. to
//! print a matrix per adapter. Scenarios pass `now` explicitly and never
//! sleep; run them on a multi-threaded runtime with the real clock (a paused
//! clock would fire the per-scenario timeout while a store waits on its own
//! threads).
//!
//! The scenarios live by topic, one module each: `submit` (and
//! idempotency), `claims` (and leases), `completion`, `destinations`,
//! `listing` (and bulk), `cluster` (tokens and holds), `priority`, `flow_keys`, `retention`,
//! `outbound`, `auth`, `callback`, `schedules`, `scope` (a tenant's own
//! tasks only), `tenants`, `tenant_writes`,
//! `topics`; `check` holds what they
//! are written with. This file is the runner and the one ordered list.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use tc_model::store::TaskStore;

/// A scenario's verdict: `Err` says what broke.
pub type Verdict = Result<(), String>;

type Run<S> = fn(S) -> Pin<Box<dyn Future<Output = Verdict> + Send>>;

/// One named scenario of the contract.
pub struct Scenario<S> {
    name: &'static str,
    run: Run<S>,
}

impl<S: TaskStore> Scenario<S> {
    /// The scenario's name (its function's name).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Runs the scenario on `store`, which must be fresh and empty.
    pub fn run(&self, store: S) -> Pin<Box<dyn Future<Output = Verdict> + Send>> {
        (self.run)(store)
    }
}

/// Every scenario of the contract, in a fixed order.
pub fn scenarios<S: TaskStore>() -> Vec<Scenario<S>> {
    macro_rules! list {
        ($($scenario:ident),* $(,)?) => {
            vec![$(Scenario::<S> {
                name: stringify!($scenario),
                run: |store| Box::pin($scenario(store)),
            }),*]
        };
    }
    list![
        submit_creates_a_pending_task,
        resubmit_returns_the_same_task_in_every_state,
        same_key_different_payload_is_a_conflict,
        concurrent_submits_of_one_key_make_one_row,
        concurrent_submits_of_distinct_keys_all_land,
        claim_takes_the_oldest_due_first,
        concurrent_claimers_never_share_a_task,
        complete_success_records_the_result,
        complete_retry_returns_to_pending_until_due,
        complete_failed_is_terminal,
        stale_attempt_write_is_lost,
        write_after_cancel_is_lost,
        write_after_recovery_is_lost,
        cancel_in_every_state,
        heartbeat_extends_only_running_leases,
        old_attempts_heartbeat_leaves_a_newer_claim_alone,
        release_keeps_the_attempt_and_the_history,
        recover_expired_requeues_or_fails,
        attempt_history_records_every_try,
        illegal_writes_change_nothing,
        list_pages_in_creation_order,
        list_pages_are_stable_while_inserting,
        list_pages_stay_within_the_result_budget_without_bodies,
        count_by_state_counts_each_state,
        next_due_is_the_earliest_pending,
        unknown_ids_are_not_found,
        health_answers_and_changes_nothing,
        delete_takes_only_finished_tasks_and_frees_the_key,
        retry_reopens_failed_and_canceled_with_a_fresh_budget,
        a_delayed_task_waits_for_its_time_and_keeps_its_schedule,
        submit_many_answers_each_item_as_submit_would,
        prune_deletes_old_finished_tasks_of_one_state_in_batches,
        a_lone_store_leads_its_upkeep,
        list_filters_list_exactly_the_matching_tasks,
        bulk_actions_apply_to_what_their_filter_covers,
        bulk_actions_go_past_one_chunk,
        destination_settings_are_kept_field_by_field,
        a_destination_s_client_tls_is_kept_and_cleared,
        a_destination_with_neither_tasks_nor_settings_is_not_found,
        claim_skips_paused_destinations,
        claim_caps_a_destination_by_its_running_tasks,
        claim_rotates_so_a_backlog_does_not_delay_another_host,
        claim_serves_the_destinations_with_fewest_calls_in_flight_first,
        first_contact_bounds_only_destinations_not_met,
        tasks_keep_their_method_and_headers,
        destinations_keep_their_headers_and_signing_secrets,
        destinations_keep_whom_they_share_with,
        destinations_keep_their_auth,
        a_server_key_is_stored_once,
        tasks_keep_their_trace_context,
        a_due_task_is_claimed_past_thousands_of_waiting_destinations,
        a_callback_is_created_with_the_terminal_transition,
        a_callback_is_made_once_per_end_with_the_n_th_end_s_key,
        a_cancel_makes_a_callback_only_when_asked,
        callback_fields_round_trip,
        schedules_are_kept_field_by_field,
        a_firing_record_never_moves_backwards,
        a_refused_firing_is_kept_until_a_later_firing_submits,
        tenants_are_kept_field_by_field,
        tenant_settings_are_each_tenant_s_own,
        a_tenant_with_tasks_cannot_be_deleted,
        idempotency_keys_are_per_tenant,
        every_read_and_write_path_sees_the_tenant,
        a_submit_past_max_pending_is_refused_and_an_existing_key_still_answers,
        api_keys_are_found_by_hash_until_revoked,
        a_callback_belongs_to_its_parent_s_tenant,
        the_claim_shares_a_destination_between_tenants_by_weight,
        a_write_made_with_a_key_gone_is_refused_whole,
        retries_count_against_max_pending_and_the_rate,
        a_bulk_retry_leaves_the_tasks_the_allow_list_no_longer_admits,
        topics_and_subscriptions_are_kept_field_by_field,
        a_publish_makes_one_task_per_matching_subscription,
        a_refused_publish_writes_nothing,
        a_replay_sends_again_the_events_since_a_time,
        topics_are_each_tenant_s_own,
        a_subscription_failing_past_disable_after_is_disabled,
        tokens_come_from_one_bucket_per_destination,
        concurrent_token_takers_share_one_bucket,
        destination_holds_are_shared_until_they_end,
        claims_take_higher_priorities_first_and_age_the_rest,
        flow_keys_are_kept_field_by_field_and_each_tenant_s_own,
        a_flow_key_caps_its_running_tasks_across_destinations,
        a_flow_key_s_rate_bounds_its_claims,
        a_flow_key_s_backlog_cannot_hold_another_key_s_tasks,
        a_key_met_twice_in_one_claim_gives_its_next_tasks,
        a_key_met_again_in_one_take_reads_past_what_it_gave,
        a_keyed_destination_met_again_in_one_claim_gives_its_next_tasks,
        a_tenant_reads_only_its_own_tasks_by_id,
        a_tenant_lists_only_its_own_tasks,
        a_tenant_cannot_cancel_retry_or_delete_another_s_task,
        a_tenant_s_bulk_action_covers_only_its_own_tasks,
    ]
}

/// The verdict of one scenario.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario.
    pub name: &'static str,
    /// What it found.
    pub verdict: Verdict,
    /// How long it ran.
    pub elapsed: Duration,
}

/// How long one scenario may run before it counts as hung.
pub const SCENARIO_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs every scenario, each on a fresh store from `make_store`, each in its
/// own task so that a panic or a hang fails that scenario alone.
pub async fn run_all<S, F, Fut>(mut make_store: F) -> Vec<Report>
where
    S: TaskStore,
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
{
    let mut reports = Vec::new();
    for scenario in scenarios::<S>() {
        let store = make_store().await;
        let started = Instant::now();
        let mut running = tokio::spawn(scenario.run(store));
        let verdict = match tokio::time::timeout(SCENARIO_TIMEOUT, &mut running).await {
            Ok(Ok(verdict)) => verdict,
            Ok(Err(join)) if join.is_panic() => Err(format!("panicked: {}", panic_message(join))),
            Ok(Err(join)) => Err(format!("did not finish: {join}")),
            Err(_) => {
                running.abort();
                Err(format!("did not finish within {SCENARIO_TIMEOUT:?}"))
            }
        };
        reports.push(Report {
            name: scenario.name(),
            verdict,
            elapsed: started.elapsed(),
        });
    }
    reports
}

/// Every failed scenario with its message, one per line; `None` if all passed.
pub fn failures(reports: &[Report]) -> Option<String> {
    let failed: Vec<String> = reports
        .iter()
        .filter_map(|r| r.verdict.as_ref().err().map(|e| format!("{}: {e}", r.name)))
        .collect();
    if failed.is_empty() {
        None
    } else {
        Some(format!(
            "{} of {} scenarios failed:\n{}",
            failed.len(),
            reports.len(),
            failed.join("\n")
        ))
    }
}

fn panic_message(join: tokio::task::JoinError) -> String {
    let payload = join.into_panic();
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

// The scenarios by topic. `check` comes first: its macros reach the others.
#[macro_use]
mod check;
// A destination's `auth` and the server's own keys.
mod auth;
// Callbacks.
mod callback;
mod claims;
// Destination limits across the cluster.
mod cluster;
mod completion;
mod destinations;
// Flow keys: limits and a share of their own.
mod flow_keys;
mod listing;
mod outbound;
// Priorities.
mod priority;
// How a claim walks the destinations with due tasks.
mod due_walk;
mod retention;
// Schedules: tasks on a cron.
mod schedules;
mod submit;
// A tenant's scope: reads, listings and writes by id reach only its tasks.
mod scope;
// Tenants.
mod tenants;
mod topics;
// Auto-disable of a failing subscription.
mod topic_health;
// Writes made for a tenant: its key checked in the write, its quotas on
// retries.
mod tenant_writes;
// A task's trace context.
mod trace;

pub use auth::*;
pub use callback::*;
pub use claims::*;
pub use cluster::*;
pub use completion::*;
pub use destinations::*;
pub use due_walk::*;
pub use flow_keys::*;
pub use listing::*;
pub use outbound::*;
pub use priority::*;
pub use retention::*;
pub use schedules::*;
pub use scope::*;
pub use submit::*;
pub use tenant_writes::*;
pub use tenants::*;
pub use topic_health::*;
pub use topics::*;
pub use trace::*;
