//! The fakes on tokio's paused clock: waits take no real time, and a wait on
//! the clock ends at exactly the instant it should.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::{BlockingDownstream, FnDownstream, ScriptedDownstream, Step, response};
use crate::{DownError, DownRequest, DownResponse, Downstream};

const TIMEOUT: Duration = Duration::from_secs(30);

fn request(attempt: u32) -> DownRequest {
    DownRequest {
        url: "http://downstream.test/hook".into(),
        body: Bytes::from_static(br#"{"n":1}"#),
        timeout: TIMEOUT,
        idempotency_key: "key-1".into(),
        task_id: "task-1".into(),
        attempt,
    }
}

/// Plays one step and checks what it returns and how long it took on the
/// paused clock.
async fn check(step: Step, expected: Result<DownResponse, DownError>, took: Duration) {
    let downstream = ScriptedDownstream::new([step.clone()]);
    let started = Instant::now();
    let result = downstream.post(request(1)).await;
    assert_eq!(result, expected, "{step:?}");
    assert_eq!(started.elapsed(), took, "{step:?}");
}

#[tokio::test(start_paused = true)]
async fn steps_answer_fail_wait_and_time_out_on_the_paused_clock() {
    let ok = response(200, "done");
    let second = Duration::from_secs(1);
    check(Step::Respond(ok.clone()), Ok(ok.clone()), Duration::ZERO).await;
    check(
        Step::Fail(DownError::Connect("reset".into())),
        Err(DownError::Connect("reset".into())),
        Duration::ZERO,
    )
    .await;
    check(Step::Hang, Err(DownError::Timeout), TIMEOUT).await;
    check(
        Step::Respond(ok.clone()).after(second),
        Ok(ok.clone()),
        second,
    )
    .await;
    check(
        Step::Respond(ok.clone()).after(second).after(second),
        Ok(ok.clone()),
        2 * second,
    )
    .await;
    check(
        Step::Respond(ok.clone()).after(TIMEOUT),
        Ok(ok.clone()),
        TIMEOUT,
    )
    .await;
    check(
        Step::Respond(ok).after(TIMEOUT + second),
        Err(DownError::Timeout),
        TIMEOUT,
    )
    .await;
    check(Step::Hang.after(second), Err(DownError::Timeout), TIMEOUT).await;
}

#[test]
fn step_helpers_build_the_responses_they_name() {
    assert_eq!(
        Step::json(201, "{}"),
        Step::Respond(DownResponse {
            status: 201,
            retry_after: None,
            content_type: Some("application/json".into()),
            body: Bytes::from_static(b"{}"),
        })
    );
    assert_eq!(
        Step::retry_after(429, "7"),
        Step::Respond(DownResponse {
            status: 429,
            retry_after: Some("7".into()),
            content_type: None,
            body: Bytes::new(),
        })
    );
    assert_eq!(Step::status(204), Step::Respond(response(204, "")));
}

#[tokio::test(start_paused = true)]
async fn script_plays_in_order_then_the_default_and_records_requests() {
    let downstream = ScriptedDownstream::new([Step::status(503), Step::status(201)]);
    let mut statuses = Vec::new();
    for attempt in 1..=4 {
        statuses.push(downstream.post(request(attempt)).await.unwrap().status);
    }
    assert_eq!(statuses, [503, 201, 200, 200]);
    assert_eq!(downstream.calls(), 4);
    assert_eq!(downstream.remaining(), 0);
    let attempts: Vec<u32> = downstream
        .requests()
        .iter()
        .map(|request| request.attempt)
        .collect();
    assert_eq!(attempts, [1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn default_and_queue_can_change_while_in_use() {
    let downstream = ScriptedDownstream::with_default([], Step::Fail(DownError::Other("x".into())));
    assert_eq!(
        downstream.post(request(1)).await,
        Err(DownError::Other("x".into()))
    );
    downstream.push(Step::status(202));
    assert_eq!(downstream.remaining(), 1);
    assert_eq!(downstream.post(request(2)).await.unwrap().status, 202);
    downstream.set_default(Step::status(204));
    assert_eq!(downstream.post(request(3)).await.unwrap().status, 204);
    assert_eq!(
        ScriptedDownstream::default()
            .post(request(1))
            .await
            .unwrap()
            .status,
        200
    );
}

#[tokio::test(start_paused = true)]
async fn in_flight_and_peak_follow_calls_including_dropped_ones() {
    let downstream = Arc::new(ScriptedDownstream::with_default([], Step::Hang));
    let calls: Vec<_> = (1..=3)
        .map(|attempt| {
            let downstream = Arc::clone(&downstream);
            tokio::spawn(async move { downstream.post(request(attempt)).await })
        })
        .collect();
    downstream.in_flight_reaches(3).await;
    downstream.called(3).await;
    assert_eq!(downstream.peak_in_flight(), 3);

    calls[0].abort();
    downstream.in_flight_reaches(2).await;
    assert_eq!(downstream.dropped(), 1);

    // The other two hang until their timeout, then finish, not dropped.
    for call in calls.into_iter().skip(1) {
        assert_eq!(call.await.unwrap(), Err(DownError::Timeout));
    }
    assert_eq!(downstream.in_flight(), 0);
    assert_eq!(downstream.peak_in_flight(), 3);
    assert_eq!(downstream.dropped(), 1);
    assert_eq!(downstream.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn blocking_holds_calls_until_released_or_failed() {
    let downstream = Arc::new(BlockingDownstream::new());
    let first = tokio::spawn({
        let downstream = Arc::clone(&downstream);
        async move { downstream.post(request(1)).await }
    });
    let second = tokio::spawn({
        let downstream = Arc::clone(&downstream);
        async move { downstream.post(request(2)).await }
    });
    assert_eq!(downstream.entered().await.attempt, 1);
    assert_eq!(downstream.entered().await.attempt, 2);
    assert_eq!(downstream.in_flight(), 2);

    // Held calls ignore the request's timeout.
    tokio::time::advance(TIMEOUT * 2).await;
    assert_eq!(downstream.in_flight(), 2);

    downstream.release(response(200, "one"));
    downstream.fail(DownError::Connect("refused".into()));
    let mut results = vec![first.await.unwrap(), second.await.unwrap()];
    results.sort_by_key(Result::is_err);
    assert_eq!(
        results,
        [
            Ok(response(200, "one")),
            Err(DownError::Connect("refused".into()))
        ]
    );
    assert_eq!(downstream.in_flight(), 0);
    assert_eq!(downstream.peak_in_flight(), 2);
    assert_eq!(downstream.dropped_count(), 0);
    assert_eq!(downstream.calls(), 2);
    assert_eq!(downstream.requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn blocking_release_before_the_call_lets_it_through() {
    let downstream = BlockingDownstream::new();
    downstream.release(response(204, ""));
    assert_eq!(downstream.post(request(1)).await, Ok(response(204, "")));
    assert_eq!(downstream.entered().await.attempt, 1);
}

#[tokio::test(start_paused = true)]
async fn blocking_notices_a_call_dropped_in_flight() {
    let downstream = Arc::new(BlockingDownstream::default());
    let call = tokio::spawn({
        let downstream = Arc::clone(&downstream);
        async move { downstream.post(request(1)).await }
    });
    downstream.entered().await;

    call.abort();
    downstream.dropped().await;
    assert_eq!(downstream.dropped_count(), 1);
    assert_eq!(downstream.in_flight(), 0);

    // A later release goes to the next call, not to the dropped one.
    downstream.release(response(200, "next"));
    assert_eq!(downstream.post(request(2)).await, Ok(response(200, "next")));
    downstream.dropped_at_least(1).await;
    assert_eq!(downstream.dropped_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn fn_downstream_answers_from_the_closure() {
    let downstream = FnDownstream::new(|request: DownRequest| async move {
        if request.attempt < 2 {
            Err(DownError::Timeout)
        } else {
            Ok(response(200, request.body))
        }
    });
    assert_eq!(downstream.post(request(1)).await, Err(DownError::Timeout));
    assert_eq!(
        downstream.post(request(2)).await,
        Ok(response(200, r#"{"n":1}"#))
    );
}

#[tokio::test(start_paused = true)]
async fn fakes_work_behind_an_arc_as_the_worker_holds_them() {
    async fn call_through<D: Downstream>(downstream: D) -> Result<DownResponse, DownError> {
        downstream.post(request(1)).await
    }
    let downstream = Arc::new(ScriptedDownstream::new([Step::status(202)]));
    assert_eq!(
        call_through(Arc::clone(&downstream)).await.unwrap().status,
        202
    );
    assert_eq!(downstream.calls(), 1);
}
