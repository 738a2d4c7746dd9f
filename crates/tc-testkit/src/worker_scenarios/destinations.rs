//! Flow control per destination: a cap on calls in flight, a rate, a
//! Retry-After that holds a whole host, the circuit breaker, pause and
//! resume, and canceling a held task. Each scenario uses the rig's two hosts
//! (two destinations playing one script, told apart by path): what is held
//! on one must never hold the other.
//!
//! Long holds (a 30 s Retry-After, a breaker open for 30 s) are played at
//! their length on the paused clock and shortened to a few seconds in real
//! time ([`Rig::on_paused_clock`]); call times are checked exactly on the
//! paused clock and, in real time, only against the bounds no machine load
//! can break (a held call never comes early).

use std::time::Duration;

use tc_downstream::Downstream;
use tc_downstream::fake::{Call, Reply, Step};
use tc_model::destination::{Destination, DestinationUpdate};
use tc_model::store::TaskStore;
use tc_model::{State, Task, TaskId, destination_of};
use tc_worker::{BreakerPolicy, BreakerState, WorkerConfig};
use tokio::time::Instant;

use super::{
    GUARD, Rig, guard, stop, wait_all_terminal, wait_all_terminal_within, wait_for,
    wait_for_within, wait_terminal,
};
use tc_model::tenant::Scope;

/// Whole milliseconds: due times and holds are stored at that precision,
/// so a held call may come up to this much before the exact end of its hold.
pub(super) const MS: Duration = Duration::from_millis(1);

/// `paused` on the paused clock, `real` in real time.
pub(super) fn length<S, D>(rig: &Rig<S, D>, paused: Duration, real: Duration) -> Duration {
    if rig.paused_clock { paused } else { real }
}

pub(super) async fn update<S: TaskStore, D>(
    rig: &Rig<S, D>,
    name: &str,
    update: DestinationUpdate,
) -> Result<Destination, String> {
    rig.store
        .update_destination(name.to_owned(), update, rig.clock.now())
        .await
        .map_err(|e| format!("update_destination {name}: {e}"))
}

pub(super) fn paused(paused: bool) -> DestinationUpdate {
    DestinationUpdate {
        paused: Some(paused),
        ..DestinationUpdate::default()
    }
}

async fn destination<S: TaskStore, D>(rig: &Rig<S, D>, name: &str) -> Result<Destination, String> {
    rig.store
        .destination(name.to_owned())
        .await
        .map_err(|e| format!("destination {name}: {e}"))
}

/// A call as the script saw it: when it started and ended, its status.
pub(super) struct Seen {
    pub(super) path: String,
    pub(super) at: Instant,
    pub(super) ended: Option<Instant>,
    pub(super) status: Option<u16>,
}

/// Every call whose path starts with `prefix`, in the order they arrived.
pub(super) fn seen<S, D>(rig: &Rig<S, D>, prefix: &str) -> Vec<Seen> {
    rig.script.read(|r| {
        r.calls()
            .iter()
            .enumerate()
            .filter(|(_, c)| c.path.starts_with(prefix))
            .map(|(i, c)| Seen {
                path: c.path.clone(),
                at: c.at,
                ended: r.ended_at(i),
                status: r.status_of(i),
            })
            .collect()
    })
}

/// Checks that `later` started only once `earlier` had ended (to the
/// millisecond: the paused clock lets both fall on one instant); `rule` says
/// what a miss breaks.
pub(super) fn check_started_after(later: &Seen, earlier: &Seen, rule: &str) -> Result<(), String> {
    let ended = earlier
        .ended
        .ok_or_else(|| format!("{} never ended", earlier.path))?;
    ensure!(
        later.at + MS >= ended,
        "{} started {:?} before {} ended: {rule}",
        later.path,
        ended.duration_since(later.at),
        earlier.path
    );
    Ok(())
}

pub(super) fn calls_under<S, D>(rig: &Rig<S, D>, prefix: &str) -> usize {
    rig.script.read(|r| {
        r.calls()
            .iter()
            .filter(|c| c.path.starts_with(prefix))
            .count()
    })
}

/// Checks that each task is in `state` after exactly `attempt` attempts.
pub(super) async fn check_tasks<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    ids: &[TaskId],
    state: State,
    attempt: u32,
) -> Result<(), String> {
    for id in ids {
        let task = rig.get(*id).await?;
        ensure!(
            task.state == state && task.attempt == attempt,
            "task {id} ({}) is {} after {} attempts, want {state} after {attempt}",
            task.url,
            task.state,
            task.attempt
        );
    }
    Ok(())
}

/// Submits a task for `url`; its call may take a minute (longer than any
/// hold a scenario plays), so a held call never times out.
pub(super) async fn submit_to<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    url: String,
    key: &str,
    max_attempts: u32,
) -> Result<Task, String> {
    rig.submit_url(url, key, max_attempts, Duration::from_secs(60))
        .await
}

/// Submits one task per path on the url built by `url_of`.
pub(super) async fn submit_each<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    paths: impl IntoIterator<Item = String>,
    url_of: impl Fn(&str) -> Result<String, String>,
    max_attempts: u32,
) -> Result<Vec<TaskId>, String> {
    let mut ids = Vec::new();
    for path in paths {
        let url = url_of(&path)?;
        let key = format!("k{path}");
        ids.push(submit_to(rig, url, &key, max_attempts).await?.id);
    }
    Ok(ids)
}

pub(super) fn paths(prefix: &str, n: usize) -> impl Iterator<Item = String> + '_ {
    (0..n).map(move |i| format!("{prefix}{i}"))
}

/// A cap of 2 on one host: while its first two calls hang and four more of
/// its tasks wait, every task of another host runs to the end; the capped
/// host never has more than 2 calls in flight, and uses its cap fully.
pub(super) async fn destination_cap_holds_while_other_hosts_run<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    const CAP: usize = 2;
    let capped = destination_of(&rig.url("/"));
    update(
        rig,
        &capped,
        DestinationUpdate {
            max_in_flight: Some(Some(CAP as u32)),
            ..DestinationUpdate::default()
        },
    )
    .await?;
    // The first two calls hang until the gate opens; the later ones take a
    // while, so that without the cap they would overlap beyond it.
    for (i, path) in paths("/cap/", 6).enumerate() {
        let step = if i < CAP {
            Step::Gate(Reply::status(200))
        } else {
            Step::ReplyAfter(Duration::from_millis(50), Reply::status(200))
        };
        rig.script.plan(&path, [step]);
    }
    let capped_ids = submit_each(rig, paths("/cap/", 6), |p| Ok(rig.url(p)), 3).await?;
    let free_ids = submit_each(rig, paths("/free/", 8), |p| rig.other_url(p), 3).await?;
    // One slot more than the cap: the other host's tasks go through it one
    // claim of one at a time, each claim's rotation meeting the capped host
    // (at its cap) first every other time.
    let worker = rig.spawn_worker(WorkerConfig {
        concurrency: CAP + 1,
        ..rig.config()
    });
    let mut events = worker.control().subscribe();
    worker.control().task_submitted();
    wait_all_terminal(&mut events, &free_ids).await?;
    check_tasks(rig, &free_ids, State::Success, 1).await?;
    // Claimed first, so long since on their way; waited for, not assumed.
    guard(
        "the capped host's first calls",
        rig.script.wait_for(|r| {
            let calls = r.calls().iter().filter(|c| c.path.starts_with("/cap/"));
            (calls.count() >= CAP).then_some(())
        }),
    )
    .await?;
    let hanging = calls_under(rig, "/cap/");
    ensure!(
        hanging == CAP,
        "{hanging} calls reached the capped host while the other host ran, want {CAP}"
    );
    let counts = destination(rig, &capped).await?;
    ensure!(
        (counts.running, counts.pending) == (2, 4),
        "capped host: {} running, {} pending, want 2 and 4",
        counts.running,
        counts.pending
    );
    rig.script.open_gate();
    wait_all_terminal(&mut events, &capped_ids).await?;
    stop(worker).await?;
    check_tasks(rig, &capped_ids, State::Success, 1).await?;
    let peak = rig
        .script
        .read(|r| r.peak_in_flight_of(|c: &Call| c.path.starts_with("/cap/")));
    ensure!(
        peak == CAP,
        "peak in flight to the capped host {peak}, want exactly {CAP}"
    );
    Ok(())
}

/// No settings at all: a host whose calls hang, with a backlog, has taken
/// every slot when another host's tasks come in. Each slot that frees goes
/// to the host with the fewest calls in flight, so the first freed slot
/// serves the other host's tasks one after another, every one of them,
/// while the hanging host's other calls still hang (with the slot handed
/// out by rotation alone, the hanging host took it back at the next claim
/// and the other host starved).
pub(super) async fn default_slots_are_shared_fairly_between_hosts<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    const SLOTS: usize = 4;
    const BACKLOG: usize = 50;
    const INSTANT: usize = 20;
    // The first hanging call answers when the gate opens: the one slot freed.
    rig.script.plan("/hang/0", [Step::Gate(Reply::status(200))]);
    for path in paths("/hang/", BACKLOG).skip(1) {
        rig.script.plan(&path, [Step::Hang]);
    }
    let worker = rig.spawn_worker(WorkerConfig {
        concurrency: SLOTS,
        // The hanging calls are cut at the end, not waited for.
        shutdown_grace: Duration::from_millis(50),
        ..rig.config()
    });
    let mut events = worker.control().subscribe();
    let calls_reach = |n: usize| {
        rig.script.wait_for(move |r| {
            let hanging = r.calls().iter().filter(|c| c.path.starts_with("/hang/"));
            (hanging.count() >= n).then_some(())
        })
    };
    // "/hang/0" first and alone, so that it is one of the calls in flight.
    submit_each(rig, paths("/hang/", 1), |p| Ok(rig.url(p)), 1).await?;
    worker.control().task_submitted();
    guard("the first hanging call", calls_reach(1)).await?;
    submit_each(rig, paths("/hang/", BACKLOG).skip(1), |p| Ok(rig.url(p)), 1).await?;
    worker.control().task_submitted();
    guard("every slot taken by the hanging host", calls_reach(SLOTS)).await?;

    let instant = submit_each(rig, paths("/instant/", INSTANT), |p| rig.other_url(p), 1).await?;
    worker.control().task_submitted();
    rig.script.open_gate();
    wait_all_terminal(&mut events, &instant).await?;
    check_tasks(rig, &instant, State::Success, 1).await?;

    // The order calls arrived in: between the instant host's first and last
    // call, the freed slot never went back to the hanging host.
    let order: Vec<Seen> = rig.script.read(|r| {
        r.calls()
            .iter()
            .enumerate()
            .map(|(i, c)| Seen {
                path: c.path.clone(),
                at: c.at,
                ended: r.ended_at(i),
                status: r.status_of(i),
            })
            .collect()
    });
    let instant_at: Vec<usize> = (0..order.len())
        .filter(|i| order[*i].path.starts_with("/instant/"))
        .collect();
    ensure!(
        instant_at.len() == INSTANT,
        "{} calls to the instant host, want {INSTANT}",
        instant_at.len()
    );
    let (first, last) = (instant_at[0], instant_at[INSTANT - 1]);
    let taken_back: Vec<&str> = order[first..=last]
        .iter()
        .filter(|c| c.path.starts_with("/hang/"))
        .map(|c| c.path.as_str())
        .collect();
    ensure!(
        taken_back.is_empty(),
        "the hanging host got a slot back while the instant host had tasks due: {taken_back:?}"
    );
    let still_hanging = order[..first]
        .iter()
        .filter(|c| c.path.starts_with("/hang/") && c.path != "/hang/0" && c.ended.is_none())
        .count();
    ensure!(
        still_hanging == SLOTS - 1,
        "{still_hanging} of the hanging host's first calls still hang, want {}",
        SLOTS - 1
    );
    ensure!(
        order[..first]
            .iter()
            .any(|c| c.path == "/hang/0" && c.status == Some(200)),
        "the freed slot was not the gated call's"
    );
    stop(worker).await
}

/// A rate of 5/s with a burst of 3: the burst goes at once, then each call
/// waits for its token, 200 ms apart: 5 calls in every second after it.
pub(super) async fn destination_rate_gives_its_rate_after_the_burst<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    const RATE: u32 = 5;
    const BURST: usize = 3;
    // The burst, then three seconds of tokens.
    const TASKS: usize = BURST + 3 * RATE as usize;
    let rated = destination_of(&rig.url("/"));
    update(
        rig,
        &rated,
        DestinationUpdate {
            rate_per_s: Some(Some(f64::from(RATE))),
            burst: Some(Some(BURST as u32)),
            ..DestinationUpdate::default()
        },
    )
    .await?;
    let ids = submit_each(rig, paths("/rate/", TASKS), |p| Ok(rig.url(p)), 3).await?;
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    worker.control().task_submitted();
    wait_all_terminal(&mut events, &ids).await?;
    stop(worker).await?;
    check_tasks(rig, &ids, State::Success, 1).await?;

    let starts: Vec<Instant> = seen(rig, "/rate/").iter().map(|c| c.at).collect();
    ensure!(
        starts.len() == TASKS,
        "{} calls, want {TASKS}",
        starts.len()
    );
    let first = starts[0];
    let period = Duration::from_secs(1) / RATE;
    // On the paused clock only the millisecond rounding of stored times.
    // In real time a stall of the first call (between its claim and its
    // arrival) shifts the anchor: one period of slack keeps the bound
    // immune to that while a missing or doubled rate still breaks it.
    let slack = length(rig, 2 * MS, period);
    for (k, at) in starts.iter().enumerate().skip(BURST) {
        // The bucket held at most BURST tokens at the first call: call k
        // needs the (k + 1 - BURST)th token earned after it.
        let token = period * u32::try_from(k + 1 - BURST).unwrap_or(u32::MAX);
        let after = at.duration_since(first);
        ensure!(
            after + slack >= token,
            "call {k} came {after:?} after the first, before its token at {token:?}"
        );
    }
    if rig.paused_clock {
        let within = |from: Duration, to: Duration| {
            starts
                .iter()
                .filter(|at| **at >= first + from && **at < first + to)
                .count()
        };
        let burst = within(Duration::ZERO, period / 2);
        ensure!(burst == BURST, "{burst} calls in the burst, want {BURST}");
        // Whole seconds after the burst, offset by half a period so that no
        // token falls on a window's edge.
        for second in 1..=2u32 {
            let from = Duration::from_secs(u64::from(second)) + period / 2;
            let calls = within(from, from + Duration::from_secs(1));
            ensure!(
                calls == RATE as usize,
                "{calls} calls in second {second} after the burst, want {RATE}"
            );
        }
    }
    Ok(())
}

/// A 429 with `Retry-After: 30` on one task holds every task of its host
/// for 30 s (no call before), while another host's tasks run; then they
/// all run, without having used an attempt while held.
pub(super) async fn retry_after_holds_the_whole_destination<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let backoff = length(rig, Duration::from_secs(30), Duration::from_secs(3));
    let header = backoff.as_secs().to_string();
    rig.script.plan(
        "/ra/first",
        [
            Step::Reply(Reply::status(429).retry_after(&header)),
            Step::Reply(Reply::status(200)),
        ],
    );
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    let first = submit_to(rig, rig.url("/ra/first"), "k-ra-first", 3).await?;
    worker.control().task_submitted();
    wait_for(&mut events, first.id, &[State::Pending]).await?;
    // Due now, on the host that said 429, and on another host.
    let held = submit_each(rig, paths("/ra/held/", 2), |p| Ok(rig.url(p)), 3).await?;
    let others = submit_each(rig, paths("/ra-other/", 3), |p| rig.other_url(p), 3).await?;
    worker.control().task_submitted();
    wait_all_terminal(&mut events, &others).await?;
    let calls = calls_under(rig, "/ra/");
    ensure!(
        calls == 1,
        "{calls} calls to the host backing off while the other host ran, want 1"
    );
    check_tasks(rig, &held, State::Pending, 0).await?;

    let mut all = held.clone();
    all.push(first.id);
    wait_all_terminal_within(&mut events, &all, backoff + GUARD).await?;
    stop(worker).await?;
    check_tasks(rig, &held, State::Success, 1).await?;
    check_tasks(rig, &[first.id], State::Success, 2).await?;
    check_tasks(rig, &others, State::Success, 1).await?;

    let to_host = seen(rig, "/ra/");
    let said_429 = to_host[0].at;
    let until = said_429 + backoff;
    for call in &to_host[1..] {
        ensure!(
            call.at + MS >= until,
            "{} called {:?} after the 429, before its Retry-After of {backoff:?}",
            call.path,
            call.at.duration_since(said_429)
        );
        ensure!(
            !rig.paused_clock || call.at < until + Duration::from_millis(100),
            "{} called {:?} after the 429: held past the Retry-After of {backoff:?}",
            call.path,
            call.at.duration_since(said_429)
        );
    }
    for call in seen(rig, "/ra-other/") {
        ensure!(
            call.at < until,
            "the other host's {} waited for the backoff ({:?} after the 429)",
            call.path,
            call.at.duration_since(said_429)
        );
    }
    Ok(())
}

/// Three failures in a row open the breaker of their host: its tasks are
/// held (pending, no attempt used) while another host runs; after the open
/// period one probe goes through alone; a failed probe reopens it for twice
/// as long; a successful one closes it and the held tasks run.
pub(super) async fn breaker_opens_holds_without_attempts_probes_and_closes<
    S: TaskStore,
    D: Downstream,
>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    const FAILURES: usize = 3;
    let open = length(rig, Duration::from_secs(30), Duration::from_secs(2));
    let worker = rig.spawn_worker(WorkerConfig {
        breaker: BreakerPolicy {
            failures: FAILURES as u32,
            open,
            max_open: open * 8,
        },
        ..rig.config()
    });
    let control = worker.control();
    let mut events = control.subscribe();
    let host = destination_of(&rig.url("/"));
    let breaker = || control.destination_state(&host).breaker;

    for path in paths("/brk/fail/", FAILURES) {
        rig.script.plan(&path, [Step::Reply(Reply::status(500))]);
    }
    let failing = submit_each(rig, paths("/brk/fail/", FAILURES), |p| Ok(rig.url(p)), 1).await?;
    control.task_submitted();
    wait_all_terminal(&mut events, &failing).await?;
    check_tasks(rig, &failing, State::Failed, 1).await?;
    ensure!(
        breaker() == BreakerState::Open,
        "breaker {:?} after {FAILURES} failures",
        breaker()
    );

    // The first probe fails, the second (delayed, to show it goes alone)
    // succeeds.
    rig.script.plan(
        "/brk/probed",
        [
            Step::Reply(Reply::status(500)),
            Step::Reply(Reply::status(200)),
        ],
    );
    rig.script.plan(
        "/brk/later",
        [Step::ReplyAfter(
            Duration::from_millis(100),
            Reply::status(200),
        )],
    );
    let probed = submit_to(rig, rig.url("/brk/probed"), "k-probed", 3).await?;
    let later = submit_to(rig, rig.url("/brk/later"), "k-later", 3).await?;
    let other = submit_to(rig, rig.other_url("/brk-other")?, "k-brk-other", 3).await?;
    control.task_submitted();
    wait_terminal(&mut events, other.id).await?;
    check_tasks(rig, &[other.id], State::Success, 1).await?;
    let calls = calls_under(rig, "/brk/");
    ensure!(
        calls == FAILURES,
        "{calls} calls to a host with an open breaker (want the {FAILURES} that opened it)"
    );
    check_tasks(rig, &[probed.id, later.id], State::Pending, 0).await?;
    ensure!(breaker() == BreakerState::Open, "breaker {:?}", breaker());

    wait_all_terminal_within(&mut events, &[probed.id, later.id], open * 3 + GUARD).await?;
    ensure!(
        breaker() == BreakerState::Closed,
        "breaker {:?} after a probe succeeded",
        breaker()
    );
    stop(worker).await?;
    // Attempts are the calls made: holding used none.
    check_tasks(rig, &[probed.id], State::Success, 2).await?;
    check_tasks(rig, &[later.id], State::Success, 1).await?;

    let calls = seen(rig, "/brk/");
    ensure!(
        calls.len() == FAILURES + 3,
        "{} calls to the host, want {FAILURES} failures, 2 probes and the held task",
        calls.len()
    );
    let ended = |c: &Seen| c.ended.ok_or_else(|| format!("{} never ended", c.path));
    let mut opened = ended(&calls[0])?;
    for call in &calls[1..FAILURES] {
        opened = opened.max(ended(call)?);
    }
    let (first_probe, second_probe, held) =
        (&calls[FAILURES], &calls[FAILURES + 1], &calls[FAILURES + 2]);
    let reopened = ended(first_probe)?;
    let checks = [
        ("the first probe", first_probe.at, opened + open),
        ("the second probe", second_probe.at, reopened + open * 2),
    ];
    for (what, at, due) in checks {
        ensure!(
            at + MS >= due,
            "{what} came {:?} before the breaker's open period ended",
            due.duration_since(at)
        );
        ensure!(
            !rig.paused_clock || at < due + Duration::from_millis(100),
            "{what} came {:?} after the open period ended",
            at.duration_since(due)
        );
    }
    ensure!(
        (first_probe.status, second_probe.status) == (Some(500), Some(200)),
        "probes answered {:?} and {:?}",
        first_probe.status,
        second_probe.status
    );
    ensure!(
        held.at >= ended(second_probe)?,
        "{} was called while the probe was in flight",
        held.path
    );
    Ok(())
}

/// A paused host's tasks are not claimed (pending, attempt 0) while another
/// host's run; once resumed, they run.
pub(super) async fn pause_holds_a_destination_until_resumed<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let host = destination_of(&rig.url("/"));
    update(rig, &host, paused(true)).await?;
    let held = submit_each(rig, paths("/paused/", 3), |p| Ok(rig.url(p)), 3).await?;
    let others = submit_each(rig, paths("/running/", 3), |p| rig.other_url(p), 3).await?;
    let worker = rig.spawn_worker(rig.config());
    let mut events = worker.control().subscribe();
    worker.control().task_submitted();
    wait_all_terminal(&mut events, &others).await?;
    check_tasks(rig, &others, State::Success, 1).await?;
    let calls = calls_under(rig, "/paused/");
    ensure!(calls == 0, "{calls} calls to a paused host");
    check_tasks(rig, &held, State::Pending, 0).await?;
    let stored = destination(rig, &host).await?;
    ensure!(
        stored.settings.paused && stored.pending == 3 && stored.running == 0,
        "paused host as stored: {stored:?}"
    );

    let resumed_at = Instant::now();
    update(rig, &host, paused(false)).await?;
    worker.control().destinations_changed();
    wait_all_terminal(&mut events, &held).await?;
    stop(worker).await?;
    check_tasks(rig, &held, State::Success, 1).await?;
    for call in seen(rig, "/paused/") {
        ensure!(
            call.at >= resumed_at,
            "{} was called before the resume",
            call.path
        );
    }
    Ok(())
}

/// A task held by a paused host, and one held by an open breaker, are
/// canceled at once (while the hold stands) and never called, even after
/// their hosts take calls again.
pub(super) async fn held_tasks_cancel_at_once_and_are_never_called<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
) -> Result<(), String> {
    let open = length(rig, Duration::from_secs(30), Duration::from_secs(2));
    let worker = rig.spawn_worker(WorkerConfig {
        breaker: BreakerPolicy {
            failures: 1,
            open,
            max_open: open * 8,
        },
        ..rig.config()
    });
    let control = worker.control();
    let mut events = control.subscribe();
    let (main, other) = (
        destination_of(&rig.url("/")),
        destination_of(&rig.other_url("/")?),
    );

    // Held by a pause: a claim that ran the other host's task passed it over.
    update(rig, &main, paused(true)).await?;
    let parked = submit_to(rig, rig.url("/held/paused"), "k-parked", 3).await?;
    let marker = submit_to(rig, rig.other_url("/held/marker-1")?, "k-marker-1", 3).await?;
    control.task_submitted();
    wait_terminal(&mut events, marker.id).await?;
    check_tasks(rig, &[parked.id], State::Pending, 0).await?;
    cancel_at_once(rig, &control, parked.id).await?;
    ensure!(
        destination(rig, &main).await?.settings.paused,
        "the pause ended before the cancel was checked"
    );

    // Held by an open breaker (one failure opens it here).
    rig.script
        .plan("/held/fail", [Step::Reply(Reply::status(500))]);
    let failing = submit_to(rig, rig.other_url("/held/fail")?, "k-fail", 1).await?;
    control.task_submitted();
    wait_terminal(&mut events, failing.id).await?;
    let breaker = || control.destination_state(&other).breaker;
    ensure!(
        breaker() == BreakerState::Open,
        "breaker {:?} after a failure",
        breaker()
    );
    let tripped = submit_to(rig, rig.other_url("/held/breaker")?, "k-tripped", 3).await?;
    // The paused host resumes; a claim that runs its next task passed over
    // the breaker-held one.
    update(rig, &main, paused(false)).await?;
    control.destinations_changed();
    let marker = submit_to(rig, rig.url("/held/marker-2"), "k-marker-2", 3).await?;
    control.task_submitted();
    wait_terminal(&mut events, marker.id).await?;
    check_tasks(rig, &[tripped.id], State::Pending, 0).await?;
    cancel_at_once(rig, &control, tripped.id).await?;
    ensure!(
        breaker() == BreakerState::Open,
        "the breaker left open ({:?}) before the cancel was checked",
        breaker()
    );

    // Once the breaker lets a probe through, the host takes calls again:
    // still none for the canceled task.
    let probe = submit_to(rig, rig.other_url("/held/marker-3")?, "k-marker-3", 3).await?;
    control.task_submitted();
    wait_for_within(
        &mut events,
        probe.id,
        &[State::Success, State::Failed, State::Canceled],
        open + GUARD,
    )
    .await?;
    ensure!(
        breaker() == BreakerState::Closed,
        "breaker {:?} after the probe",
        breaker()
    );
    stop(worker).await?;
    check_tasks(rig, &[probe.id], State::Success, 1).await?;
    for path in ["/held/paused", "/held/breaker"] {
        let calls = rig.script.calls(path).len();
        ensure!(
            calls == 0,
            "the canceled task on {path} was called {calls} times"
        );
    }
    check_tasks(rig, &[parked.id, tripped.id], State::Canceled, 0).await?;
    Ok(())
}

/// Cancels the held task `id` through the worker and checks that the
/// cancel is done at once: it answers canceled, the store says so with no
/// attempt used, and on the paused clock no time passed (it did not wait for
/// the hold to end; the caller checks that the hold still stands).
async fn cancel_at_once<S: TaskStore, D: Downstream>(
    rig: &Rig<S, D>,
    control: &tc_worker::WorkerControl<S>,
    id: TaskId,
) -> Result<(), String> {
    let before = Instant::now();
    let canceled = control
        .cancel(id, Scope::Admin)
        .await
        .map_err(|e| format!("cancel: {e}"))?;
    let took = before.elapsed();
    ensure!(
        canceled.state == State::Canceled,
        "cancel of a held task answered {}",
        canceled.state
    );
    ensure!(
        !rig.paused_clock || took.is_zero(),
        "the cancel of a held task took {took:?}"
    );
    check_tasks(rig, &[id], State::Canceled, 0).await?;
    Ok(())
}
