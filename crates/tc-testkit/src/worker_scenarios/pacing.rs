//! Pacing by the destination's own signals: rate-limit fields that say no
//! call is left hold the whole host until their reset, and a `429` without
//! them halves the calls the host gets in flight. Each scenario uses the
//! rig's two hosts: what is held on one must never hold the other.

use std::time::Duration;

use tc_downstream::Downstream;
use tc_downstream::fake::{Reply, Step};
use tc_model::store::TaskStore;
use tc_model::{State, destination_of};

use super::destinations::{
    MS, calls_under, check_started_after, check_tasks, length, paths, paused, seen, submit_each,
    submit_to, update,
};
use super::{
    GUARD, Rig, stop, wait_all_terminal, wait_all_terminal_within, wait_for, wait_terminal,
};

/// A `200` whose `X-RateLimit-Remaining: 0` and `X-RateLimit-Reset: 30`
/// say the window is spent holds every task of its host for 30 s (no call
/// before, no attempt used), while another host's tasks run; then they run.
pub(super) async fn rate_limit_fields_hold_the_destination_until_their_reset<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let reset = length(rig, Duration::from_secs(30), Duration::from_secs(3));
    let header = reset.as_secs().to_string();
    rig.script.plan(
        "/rl/first",
        [Step::Reply(
            Reply::status(200)
                .header("x-ratelimit-remaining", "0")
                .header("x-ratelimit-reset", &header),
        )],
    );
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let first = submit_to(rig, rig.url("/rl/first"), "k-rl-first", 3).await?;
    worker.control().task_submitted();
    wait_for(&mut events, first.id, &[State::Success]).await?;
    let host = destination_of(&rig.url("/rl/first"));
    let state = worker.control().destination_state(&host);
    ensure!(
        state.ratelimit_remaining == Some(0) && state.ratelimit_reset_at.is_some(),
        "the destination's view after the spent window: {state:?}"
    );
    let held = submit_each(rig, paths("/rl/held/", 2), |p| Ok(rig.url(p)), 3).await?;
    let others = submit_each(rig, paths("/rl-other/", 3), |p| rig.other_url(p), 3).await?;
    worker.control().task_submitted();
    wait_all_terminal(&mut events, &others).await?;
    let calls = calls_under(rig, "/rl/");
    ensure!(
        calls == 1,
        "{calls} calls to the host whose window is spent while the other host ran, want 1"
    );
    check_tasks(rig, &held, State::Pending, 0).await?;

    wait_all_terminal_within(&mut events, &held, reset + GUARD).await?;
    stop(worker).await?;
    check_tasks(rig, &held, State::Success, 1).await?;
    let to_host = seen(rig, "/rl/");
    let said_spent = to_host[0].ended.unwrap_or(to_host[0].at);
    for call in &to_host[1..] {
        ensure!(
            call.at + MS >= said_spent + reset,
            "{} called {:?} after the spent window's answer, before its reset of {reset:?}",
            call.path,
            call.at.duration_since(said_spent)
        );
    }
    Ok(())
}

/// A `429` without rate-limit fields halves the calls its host gets in
/// flight (from one: to one), so the next two calls do not overlap; each
/// window of successes then adds one back, and the destination's view
/// shows the window.
pub(super) async fn throttling_without_fields_halves_the_calls_in_flight<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let slow = Duration::from_millis(500);
    rig.script
        .plan("/th/first", [Step::Reply(Reply::status(429))]);
    for path in paths("/th/slow/", 3) {
        rig.script
            .plan(&path, [Step::ReplyAfter(slow, Reply::status(200))]);
    }
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    // One attempt only: the 429 fails it, and no retry competes below.
    let first = submit_to(rig, rig.url("/th/first"), "k-th-first", 1).await?;
    worker.control().task_submitted();
    wait_for(&mut events, first.id, &[State::Failed]).await?;
    let host = destination_of(&rig.url("/th/first"));
    let window = worker
        .control()
        .destination_state(&host)
        .effective_max_in_flight;
    ensure!(
        window == Some(1),
        "effective_max_in_flight after a 429: {window:?}, want 1"
    );

    let tasks = submit_each(rig, paths("/th/slow/", 3), |p| Ok(rig.url(p)), 3).await?;
    worker.control().task_submitted();
    wait_all_terminal(&mut events, &tasks).await?;
    stop(worker).await?;
    check_tasks(rig, &tasks, State::Success, 1).await?;
    let calls = seen(rig, "/th/slow/");
    ensure!(calls.len() == 3, "{} slow calls, want 3", calls.len());
    // One in flight: the second call starts when the first has ended.
    check_started_after(&calls[1], &calls[0], "one call was allowed")?;
    // Its success gave the window one more: the last two overlap.
    let second_ended = calls[1].ended.ok_or("the second slow call never ended")?;
    ensure!(
        !rig.paused_clock || calls[2].at < second_ended,
        "the third call waited for the second: the window did not grow"
    );
    Ok(())
}

/// A backlog queued before the worker meets its host: the first call goes
/// alone and learns the window its answer states (`X-RateLimit-*`: 3 calls
/// a window), so no more than the window allows are sent before its reset
/// (without it, the first claim sent the whole backlog at once); the rest
/// go after the reset.
pub(super) async fn first_contact_learns_the_window_before_the_backlog_goes<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let reset = length(rig, Duration::from_secs(30), Duration::from_secs(3));
    let header = reset.as_secs().to_string();
    let answer = |remaining: &str| {
        Step::Reply(
            Reply::status(200)
                .header("x-ratelimit-remaining", remaining)
                .header("x-ratelimit-reset", &header),
        )
    };
    rig.script.plan(
        "/fc/w",
        ["2", "1", "0", "2", "1", "0"].into_iter().map(answer),
    );
    let mut tasks = Vec::new();
    for n in 0..6 {
        tasks.push(
            submit_to(rig, rig.url("/fc/w"), &format!("k-fc-{n}"), 3)
                .await?
                .id,
        );
    }
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    worker.control().task_submitted();
    wait_all_terminal_within(&mut events, &tasks, reset + GUARD).await?;
    stop(worker).await?;
    check_tasks(rig, &tasks, State::Success, 1).await?;
    let calls = seen(rig, "/fc/w");
    ensure!(calls.len() == 6, "{} calls, want 6", calls.len());
    check_started_after(&calls[1], &calls[0], "the first call goes alone")?;
    let spent = calls[2].ended.ok_or("the third call never ended")?;
    ensure!(
        calls[3].at + MS >= spent + reset,
        "the fourth call went {:?} after the window was spent, before its reset of {reset:?}",
        calls[3].at.duration_since(spent)
    );
    Ok(())
}

/// A backlog behind a paused host, resumed: its calls start again from one
/// in flight and double up to the worker's slots, and then the rest run at
/// once. The claim loop sleeps behind the window while it grows; the end
/// that lifts it must wake the loop, or the backlog waited for the poll
/// interval (an hour here; a drain of 5,000 in the bench stalled for its
/// 1 s in about half the runs).
pub(super) async fn a_resumed_backlog_runs_past_its_slow_start_without_waiting<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let worker = rig.spawn_worker(tc_worker::WorkerConfig {
        poll_interval: Duration::from_secs(3600),
        ..rig.config()
    });
    let control = worker.control();
    let mut events = control.subscribe();
    let host = destination_of(&rig.url("/"));
    // The worker has met the host (a resume starts its slow start) and
    // has read it paused (a claim reads the settings a change left stale).
    let met = submit_to(rig, rig.url("/rs/met"), "k-rs-met", 3).await?;
    control.task_submitted();
    wait_terminal(&mut events, met.id).await?;
    update(rig, &host, paused(true)).await?;
    control.destinations_changed();
    let held = submit_each(rig, paths("/rs/held/", 12), |p| Ok(rig.url(p)), 3).await?;
    let marker = submit_to(rig, rig.other_url("/rs/marker")?, "k-rs-marker", 3).await?;
    control.task_submitted();
    wait_terminal(&mut events, marker.id).await?;
    check_tasks(rig, &held, State::Pending, 0).await?;

    // The window grows 1, 2, 3, 4 (the slots): calls 0 and 1 answer at
    // once, 2 and 4 late, 3 soon. The claim after call 1's end finds 3
    // slots free and room for 2 (calls 3 and 4) and sleeps; call 3's end
    // lifts the window while 2 and 4 are in flight.
    let late = Step::ReplyAfter(Duration::from_millis(300), Reply::status(200));
    let soon = Step::ReplyAfter(Duration::from_millis(20), Reply::status(200));
    rig.script.plan("/rs/held/2", [late.clone()]);
    rig.script.plan("/rs/held/3", [soon]);
    rig.script.plan("/rs/held/4", [late]);
    update(rig, &host, paused(false)).await?;
    control.destinations_changed();
    wait_all_terminal_within(&mut events, &held, GUARD).await?;
    stop(worker).await?;
    check_tasks(rig, &held, State::Success, 1).await?;
    let calls = seen(rig, "/rs/held/");
    check_started_after(
        &calls[1],
        &calls[0],
        "the first call after the resume goes alone",
    )?;
    Ok(())
}
