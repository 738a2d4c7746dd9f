//! Phase 17, paced by the downstream: two loopback downstreams that limit
//! their callers, each behind a backlog on a fresh tc-server
//! (`--concurrency 64`).
//!
//! - *rate-limited*: allows 20 calls in each wall-clock second and says so
//!   in `X-RateLimit-Remaining` and `X-RateLimit-Reset` (the window's end
//!   as a Unix time, as GitHub sends it), `429` beyond, with the same
//!   fields. The figure is the share of its calls answered `429` over
//!   60 s (quick: 10 s) from its first call. Target: < 1 %.
//! - *concurrency-limited*: answers after 20 ms and allows 5 calls in
//!   flight, `429` at once beyond, with no rate-limit fields. The figure
//!   is the share of first tries (`X-Task-Attempt: 1`) answered `200`
//!   among those that arrive after the first 10 s of 60 s (quick: after
//!   3 s of 10 s). Target: ≥ 80 %.
//!
//! Both count at the downstream, by when each call arrived.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;

use tc_downstream::fake::{FakeServer, Reply, Script, Step};

use super::*;

/// The rate-limited downstream's calls per wall-clock second.
const RATE: u64 = 20;
/// The concurrency-limited downstream's calls in flight, and its delay.
const IN_FLIGHT: usize = 5;
const DELAY: Duration = Duration::from_millis(20);

/// One call as the downstream answered it.
#[derive(Debug, Clone, Copy)]
struct Answered {
    at: Instant,
    status: u16,
    first_try: bool,
}

/// What a downstream answered, in arrival order.
#[derive(Default)]
struct Log(Mutex<Vec<Answered>>);

impl Log {
    fn push(&self, call: &tc_downstream::fake::Call, status: u16) {
        let mut log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        log.push(Answered {
            at: call.at,
            status,
            first_try: call.attempt == Some(1),
        });
    }

    fn calls(&self) -> Vec<Answered> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The calls of `log` that arrived from `skip` after its first call until
/// `until` after it.
fn window(log: &[Answered], skip: Duration, until: Duration) -> Vec<Answered> {
    let Some(first) = log.first().map(|a| a.at) else {
        return Vec::new();
    };
    log.iter()
        .filter(|a| a.at >= first + skip && a.at < first + until)
        .copied()
        .collect()
}

/// The calls of `log` answered `status` in each second from its first
/// call.
fn per_second(log: &[Answered], status: u16) -> Vec<usize> {
    let Some(first) = log.first().map(|a| a.at) else {
        return Vec::new();
    };
    let mut seconds = Vec::new();
    for a in log.iter().filter(|a| a.status == status) {
        let second = (a.at - first).as_secs() as usize;
        if seconds.len() <= second {
            seconds.resize(second + 1, 0);
        }
        seconds[second] += 1;
    }
    seconds
}

/// `part` of `whole` in percent (0 of nothing).
fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// The fixed-window rule: `RATE` calls in each wall-clock second.
fn rate_limited(log: Arc<Log>) -> Arc<Script> {
    let used: Mutex<(u64, u64)> = Mutex::new((0, 0));
    Script::counting(move |call, _| {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let mut used = used.lock().unwrap_or_else(|e| e.into_inner());
        if used.0 != now {
            *used = (now, 0);
        }
        let status = if used.1 < RATE {
            used.1 += 1;
            200
        } else {
            429
        };
        log.push(call, status);
        let reply = if status == 200 {
            Reply::json(200, Bytes::from_static(super::super::downstream::ANSWER))
        } else {
            Reply::status(429)
        };
        Step::Reply(
            reply
                .header("x-ratelimit-remaining", &(RATE - used.1).to_string())
                .header("x-ratelimit-reset", &(now + 1).to_string()),
        )
    })
}

/// The in-flight rule: `IN_FLIGHT` calls answered after `DELAY`, `429`
/// at once beyond.
fn concurrency_limited(log: Arc<Log>) -> Arc<Script> {
    // When each accepted call is answered: those ahead are in flight.
    let ends: Mutex<VecDeque<Instant>> = Mutex::new(VecDeque::new());
    Script::counting(move |call, _| {
        let now = Instant::now();
        let mut ends = ends.lock().unwrap_or_else(|e| e.into_inner());
        while ends.front().is_some_and(|end| *end <= now) {
            ends.pop_front();
        }
        if ends.len() < IN_FLIGHT {
            ends.push_back(now + DELAY);
            log.push(call, 200);
            Step::ReplyAfter(
                DELAY,
                Reply::json(200, Bytes::from_static(super::super::downstream::ANSWER)),
            )
        } else {
            log.push(call, 429);
            Step::Reply(Reply::status(429))
        }
    })
}

impl Bench {
    pub(super) async fn paced(&mut self) -> Result<(), String> {
        let run = if self.plan.quick {
            Duration::from_secs(10)
        } else {
            Duration::from_secs(60)
        };
        let skip = if self.plan.quick {
            Duration::from_secs(3)
        } else {
            Duration::from_secs(10)
        };
        let label = if self.plan.quick { "quick: " } else { "" };

        let log = Arc::new(Log::default());
        let calls = self
            .paced_run(
                "rate-limited",
                rate_limited(Arc::clone(&log)),
                &log,
                run,
                RATE * run.as_secs() * 3 / 2 + 100,
            )
            .await?;
        let seen = window(&calls, Duration::ZERO, run);
        let refused = seen.iter().filter(|a| a.status == 429).count();
        let ok = seen.len() - refused;
        let share = percent(refused, seen.len());
        let by_second = per_second(&seen, 429);
        self.progress(&format!(
            "rate-limited: {} calls in {} s, {refused} answered 429 ({share:.2} %), {:.1} ok/s; \
             429s by second: {by_second:?}",
            seen.len(),
            run.as_secs(),
            ok as f64 / run.as_secs_f64()
        ));
        self.push(
            Figure::new(
                "paced_ratelimit_429_share",
                &format!(
                    "17 429s, downstream of {RATE}/s with X-RateLimit-*, {label}{} s",
                    run.as_secs()
                ),
                share,
                "%",
            )
            .target(Target::AtMost(1.0))
            .note(format!(
                "{refused} of {} calls; {:.1} answered 200 per s (it allows {RATE})",
                seen.len(),
                ok as f64 / run.as_secs_f64()
            )),
        );
        self.detail(
            "paced_ratelimit",
            json!({"seconds": run.as_secs_f64(), "calls": seen.len(), "refused": refused,
                   "ok": ok, "rate": RATE, "refused_by_second": by_second}),
        );

        let log = Arc::new(Log::default());
        let most = (run.as_secs_f64() / DELAY.as_secs_f64()) as u64 * IN_FLIGHT as u64;
        let calls = self
            .paced_run(
                "concurrency-limited",
                concurrency_limited(Arc::clone(&log)),
                &log,
                run,
                most * 6 / 5,
            )
            .await?;
        let all = window(&calls, Duration::ZERO, run);
        let later = window(&calls, skip, run);
        let firsts = later.iter().filter(|a| a.first_try).count();
        let first_ok = later
            .iter()
            .filter(|a| a.first_try && a.status == 200)
            .count();
        let share = percent(first_ok, firsts);
        let ok_later = later.iter().filter(|a| a.status == 200).count();
        let span = (run - skip).as_secs_f64();
        let ok_by_second = per_second(&all, 200);
        self.progress(&format!(
            "concurrency-limited: {} calls in {} s; after {} s: {first_ok} of {firsts} first \
             tries answered 200 ({share:.1} %), {:.0} ok/s (it allows {:.0}/s); 200s by \
             second: {ok_by_second:?}",
            all.len(),
            run.as_secs(),
            skip.as_secs(),
            ok_later as f64 / span,
            IN_FLIGHT as f64 / DELAY.as_secs_f64()
        ));
        self.push(
            Figure::new(
                "paced_aimd_first_try_ok",
                &format!(
                    "17 first tries ok, {IN_FLIGHT} in flight then 429, {label}after {} s of {} s",
                    skip.as_secs(),
                    run.as_secs()
                ),
                share,
                "%",
            )
            .target(Target::AtLeast(80.0))
            .note(format!(
                "{first_ok} of {firsts} first tries; {:.0} calls answered 200 per s after {} s, \
                 of the {:.0} its {IN_FLIGHT} slots of {} ms allow",
                ok_later as f64 / span,
                skip.as_secs(),
                IN_FLIGHT as f64 / DELAY.as_secs_f64(),
                DELAY.as_millis()
            )),
        );
        self.detail(
            "paced_aimd",
            json!({"seconds": run.as_secs_f64(), "skip_seconds": skip.as_secs_f64(),
                   "calls": all.len(), "first_tries": firsts, "first_tries_ok": first_ok,
                   "ok_per_s_after_skip": ok_later as f64 / span, "ok_by_second": ok_by_second}),
        );
        Ok(())
    }

    /// A fresh tc-server with `tasks` queued for a downstream answering by
    /// `script`; returns the downstream's log once `run` has passed from
    /// its first call.
    async fn paced_run(
        &self,
        name: &str,
        script: Arc<Script>,
        log: &Log,
        run: Duration,
        tasks: u64,
    ) -> Result<Vec<Answered>, String> {
        let server = FakeServer::start(script)
            .await
            .map_err(|e| format!("{name} downstream: {e}"))?;
        let url = format!("{}/hook", server.url());
        let tc = self.start_tc("paced", &["--concurrency", "64", "--sync", "normal"])?;
        let endpoint = Endpoint::new(tc.addr);
        let queued = self.submit_batch(&endpoint, &url, name, tasks).await?;
        self.report_load(&format!("{name}: backlog submitted"), &queued);
        let deadline = Instant::now() + self.plan.patience;
        let first = loop {
            if let Some(first) = log.calls().first() {
                break first.at;
            }
            if Instant::now() > deadline {
                return Err(format!("{name}: no call reached the downstream"));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        tokio::time::sleep_until(first + run).await;
        let warnings = self.server_warnings(&tc);
        tc.stop();
        if !warnings.is_empty() {
            self.progress(&format!("{name}: {warnings}"));
        }
        Ok(log.calls())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_counts_from_the_first_call() {
        let t0 = Instant::now();
        let at = |ms| Answered {
            at: t0 + Duration::from_millis(ms),
            status: 200,
            first_try: true,
        };
        let log = [at(0), at(500), at(1_000), at(1_500), at(2_000)];
        let check = |skip, until, expected: usize| {
            let got = window(
                &log,
                Duration::from_millis(skip),
                Duration::from_millis(until),
            );
            assert_eq!(got.len(), expected, "{skip}..{until}");
        };
        check(0, 2_000, 4);
        check(1_000, 2_001, 3);
        check(0, 0, 0);
        assert!(window(&[], Duration::ZERO, Duration::from_secs(1)).is_empty());
        assert_eq!(percent(1, 4), 25.0);
        assert_eq!(percent(0, 0), 0.0);
    }
}
