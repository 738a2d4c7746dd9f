//! The worker's scenarios (tc-testkit) on the SQLite store in memory and the
//! in-process scripted downstream, on tokio's paused clock: backoff and
//! Retry-After waits are exact and take no real time.
//!
//! `cargo xtask test-matrix` runs the same scenarios for every store adapter ×
//! downstream, including the real client over loopback.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tc_store::{SqliteStore, StoreConfig};
use tc_testkit::script::{Script, ScriptDownstream};
use tc_testkit::worker_scenarios::{Rig, SCENARIOS, run};

async fn check(name: &str) {
    let store = Arc::new(
        SqliteStore::open_in_memory(StoreConfig::default())
            .await
            .unwrap(),
    );
    let script = Script::new();
    let downstream = Arc::new(ScriptDownstream::new(Arc::clone(&script)));
    let rig = Rig::new(store, downstream, script, "http://downstream.test");
    if let Err(message) = run(name, &rig).await {
        panic!("scenario {name}: {message}");
    }
}

macro_rules! scenarios {
    ($($test:ident => $name:literal,)*) => {
        $(
            #[tokio::test(start_paused = true)]
            async fn $test() {
                check($name).await;
            }
        )*

        #[test]
        fn every_scenario_has_a_test() {
            let tested = [$($name),*];
            for name in SCENARIOS {
                assert!(tested.contains(name), "scenario {name} has no test here");
            }
            assert_eq!(tested.len(), SCENARIOS.len());
        }
    };
}

scenarios! {
    client_error_is_not_retried => "4xx_not_retried",
    server_errors_are_retried_up_to_the_limit => "5xx_retried_to_limit",
    server_error_then_success => "5xx_then_success",
    timeout_is_retried => "timeout_retried",
    retry_after_is_honoured => "retry_after_honoured",
    cancel_pending_is_never_called => "cancel_pending",
    cancel_after_claim_is_never_called => "cancel_claimed_not_started",
    cancel_in_flight_drops_the_call => "cancel_in_flight",
    cancel_whose_caller_hung_up_still_drops_the_call => "cancel_caller_gone",
    cancel_during_retry_wait => "cancel_during_retry_wait",
    answer_after_cancel_writes_nothing => "no_result_after_cancel",
    cancel_in_another_process_drops_the_call => "cancel_elsewhere_drops_the_call",
    expired_lease_is_recovered_by_a_new_worker => "expired_lease_recovered",
    a_long_call_keeps_its_lease => "long_call_keeps_its_lease",
    idempotent_resubmit_calls_once => "idempotent_submit",
    concurrent_idempotent_submits_call_once => "idempotent_submit_concurrent",
    same_key_different_payload_is_refused => "same_key_different_payload",
    shutdown_returns_in_flight_to_pending => "shutdown_returns_in_flight_to_pending",
    in_flight_never_exceeds_the_bound => "concurrency_bound",
    a_retry_wait_holds_no_slot => "retry_wait_holds_no_slot",
    two_workers_never_run_one_task_twice => "one_runner_per_task",
}
