//! Phase 9, head of line: the end-to-end rate of a fast
//! destination while a slow one (answers after 2 s, on another loopback
//! host) has a backlog, beside the fast one alone in the same run.
//!
//! Three runs, each on a fresh server and database with the run's
//! concurrency (64):
//! - **alone**: only the fast destination's tasks (the baseline);
//! - **capped**: the slow destination at `max_in_flight` [`SLOW_CAP`] (set
//!   with `PUT /destinations/{host:port}` before its backlog), so at most
//!   16 of the 64 slots wait on it and claims rotate to the fast one;
//! - **uncapped**: no settings at all. The slow destination, alone with
//!   due tasks, takes all 64 slots first (no default cap); once the fast
//!   tasks are due, each slot the slow one frees (64 every 2 s) goes to the
//!   destination with the fewest calls in flight, the fast one, and stays
//!   with it while it has due tasks. This run shows what the defaults give
//!   without a cap. It is bounded by the plan's window and its rate is the
//!   fast tasks finished over the time taken.
//!
//! Each run first runs [`WARM_UP`] fast tasks to the end, unmeasured. In
//! the runs with a backlog, the fast tasks are submitted only once the
//! slow destination holds its share of the slots (16, or 64 without a
//! cap): the figure is measured with the backlog in place, not while it
//! builds up.

use super::*;

/// The slow destination's `max_in_flight` in the capped run.
const SLOW_CAP: u64 = 16;
/// How often the run polls the destinations' counts.
const POLL: Duration = Duration::from_millis(10);
/// Fast tasks run to the end before anything is measured in each run, so
/// that no run pays alone for a fresh server's first connections and pages.
const WARM_UP: u64 = 256;

/// What one run measured.
struct FastRun {
    /// Fast tasks submitted, and finished by the end of the run.
    submitted: u64,
    finished: u64,
    /// From the first fast submit until the last fast task finished (or the
    /// run's bound).
    elapsed: Duration,
    /// The most slow calls in flight seen, and the slow backlog at the end.
    slow_in_flight_max: u64,
    slow_pending: u64,
    warnings: String,
}

impl FastRun {
    fn rate(&self) -> f64 {
        stats::rate(self.finished, self.elapsed)
    }

    fn json(&self) -> Value {
        json!({
            "submitted": self.submitted,
            "finished": self.finished,
            "seconds": self.elapsed.as_secs_f64(),
            "per_second": self.rate(),
            "slow_in_flight_max": self.slow_in_flight_max,
            "slow_pending_at_end": self.slow_pending,
            "warnings": self.warnings,
        })
    }
}

/// The slow destination of a run and its setting.
struct Backlog<'a> {
    down: &'a HttpDownstream,
    cap: Option<u64>,
}

impl Bench {
    pub(super) async fn head_of_line(&mut self) -> Result<(), String> {
        let plan = self.plan;
        let fast = HttpDownstream::start(Duration::ZERO).await?;
        let slow = HttpDownstream::start_on([127, 0, 0, 2].into(), plan.slow_delay).await?;
        self.progress(&format!(
            "fast destination {}, slow destination {} ({} s)",
            fast.destination(),
            slow.destination(),
            plan.slow_delay.as_secs_f64()
        ));
        let alone = self.fast_run("hol-alone", &fast, None).await?;
        let capped = self
            .fast_run(
                "hol-capped",
                &fast,
                Some(Backlog {
                    down: &slow,
                    cap: Some(SLOW_CAP),
                }),
            )
            .await?;
        let uncapped = self
            .fast_run(
                "hol-uncapped",
                &fast,
                Some(Backlog {
                    down: &slow,
                    cap: None,
                }),
            )
            .await?;

        let backlog = thousands(plan.hol_backlog);
        let concurrency = plan.connections;
        self.push(
            Figure::new(
                "hol_capped",
                &format!(
                    "9 fast destination tasks/s, slow one ({backlog} backlog) capped \
                     {SLOW_CAP}/{concurrency}"
                ),
                capped.rate(),
                "/s",
            )
            .beside(alone.rate(), "the fast destination alone")
            .target(Target::RatioAtLeast(0.8))
            .note(format!(
                "{} of {} fast tasks in {:.2} s; the slow one held at most {} in flight, {} \
                 pending at the end. {}",
                capped.finished,
                capped.submitted,
                capped.elapsed.as_secs_f64(),
                capped.slow_in_flight_max,
                capped.slow_pending,
                capped.warnings
            )),
        );
        self.push(
            Figure::new(
                "hol_uncapped",
                &format!("9 fast destination tasks/s, slow one ({backlog} backlog) uncapped"),
                uncapped.rate(),
                "/s",
            )
            .beside(alone.rate(), "the fast destination alone")
            .note(format!(
                "no settings, slots shared by fewest in flight: {} of {} fast tasks finished \
                 in {:.2} s (bound {:.0} s); the slow one held up to {} of {concurrency} slots. {}",
                uncapped.finished,
                uncapped.submitted,
                uncapped.elapsed.as_secs_f64(),
                plan.window.as_secs_f64(),
                uncapped.slow_in_flight_max,
                uncapped.warnings
            )),
        );
        self.detail(
            "head_of_line",
            json!({
                "slow_cap": SLOW_CAP,
                "concurrency": concurrency,
                "backlog": plan.hol_backlog,
                "slow_delay_s": plan.slow_delay.as_secs_f64(),
                "alone": alone.json(),
                "capped": capped.json(),
                "uncapped": uncapped.json(),
            }),
        );
        Ok(())
    }

    /// One run on a fresh server: the slow backlog (if any) in place, then
    /// the fast tasks, timed until every one is finished. A run with an
    /// uncapped backlog is bounded by the plan's window, the others by its
    /// patience.
    async fn fast_run(
        &self,
        name: &str,
        fast: &HttpDownstream,
        backlog: Option<Backlog<'_>>,
    ) -> Result<FastRun, String> {
        let plan = self.plan;
        let tc = self.start_tc_full(name)?;
        let endpoint = Endpoint::new(tc.addr);
        let mut conn = Conn::open(endpoint.addr).await?;
        self.warm_up(&endpoint, &mut conn, fast).await?;
        let slow = backlog.as_ref().map(|b| b.down.destination());
        if let (Some(b), Some(slow)) = (&backlog, &slow) {
            if let Some(cap) = b.cap {
                put_cap(&mut conn, &endpoint, slow, cap).await?;
            }
            let submitted = self
                .submit_batch(&endpoint, &b.down.url(), "slow", plan.hol_backlog)
                .await?;
            self.report_load("  slow backlog submitted", &submitted);
            if submitted.ok != plan.hol_backlog {
                return Err(format!(
                    "only {} of {} backlog submits: {}",
                    submitted.ok,
                    plan.hol_backlog,
                    submitted.problems()
                ));
            }
            // Its share of the slots taken: the state the figure is about.
            let share = b.cap.unwrap_or(plan.connections as u64);
            let until = Instant::now() + plan.patience;
            loop {
                let (pending, in_flight) = counts_of(&mut conn, &endpoint, slow, None).await?;
                if in_flight >= share {
                    self.progress(&format!(
                        "  slow destination: {in_flight} in flight, {pending} pending"
                    ));
                    break;
                }
                if Instant::now() >= until {
                    return Err(format!(
                        "the slow destination reached only {in_flight} of {share} in flight"
                    ));
                }
                tokio::time::sleep(POLL).await;
            }
        }

        let n = plan.hol_fast_tasks;
        let bound = match &backlog {
            Some(Backlog { cap: None, .. }) => plan.window,
            _ => plan.patience,
        };
        let started = Instant::now();
        let submitted = self
            .submit_batch_within(&endpoint, &fast.url(), &format!("fast-{name}"), n, bound)
            .await?;
        self.report_load("  fast tasks submitted", &submitted);
        if submitted.ok != n {
            return Err(format!(
                "only {} of {n} fast submits: {}",
                submitted.ok,
                submitted.problems()
            ));
        }
        let fast_name = fast.destination();
        let until = started + bound;
        let mut slow_in_flight_max = 0;
        let mut slow_pending = 0;
        let finished = loop {
            if let Some(slow) = &slow {
                let (pending, in_flight) = counts_of(&mut conn, &endpoint, slow, None).await?;
                slow_in_flight_max = slow_in_flight_max.max(in_flight);
                slow_pending = pending;
            }
            let (pending, in_flight) = counts_of(&mut conn, &endpoint, &fast_name, None).await?;
            let finished = submitted.ok.saturating_sub(pending + in_flight);
            if finished >= submitted.ok || Instant::now() >= until {
                break finished;
            }
            tokio::time::sleep(POLL).await;
        };
        let elapsed = started.elapsed();
        let warnings = self.server_warnings(&tc);
        tc.stop();
        let run = FastRun {
            submitted: submitted.ok,
            finished,
            elapsed,
            slow_in_flight_max,
            slow_pending,
            warnings,
        };
        self.progress(&format!(
            "  {name}: {finished} of {} fast tasks finished in {:.2} s = {:.0}/s{}",
            submitted.ok,
            elapsed.as_secs_f64(),
            run.rate(),
            match &slow {
                Some(_) => format!("; slow in flight at most {slow_in_flight_max}"),
                None => String::new(),
            }
        ));
        Ok(run)
    }
}

impl Bench {
    /// [`WARM_UP`] fast tasks, submitted and waited for.
    async fn warm_up(
        &self,
        endpoint: &Endpoint,
        conn: &mut Conn,
        fast: &HttpDownstream,
    ) -> Result<(), String> {
        let submitted = self
            .submit_batch(endpoint, &fast.url(), "warm", WARM_UP)
            .await?;
        if submitted.ok != WARM_UP {
            return Err(format!("warm-up: {}", submitted.problems()));
        }
        let until = Instant::now() + self.plan.patience;
        loop {
            let (pending, in_flight) = counts_of(conn, endpoint, &fast.destination(), None).await?;
            if pending + in_flight == 0 {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(format!("warm-up: {pending} pending, {in_flight} in flight"));
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// `PUT /destinations/{destination}` with `max_in_flight`.
async fn put_cap(
    conn: &mut Conn,
    endpoint: &Endpoint,
    destination: &str,
    cap: u64,
) -> Result<(), String> {
    let body = Bytes::from(format!(r#"{{"max_in_flight":{cap}}}"#));
    let request = endpoint.request(
        Method::PUT,
        &format!("/destinations/{destination}"),
        Some(body),
    )?;
    let reply = conn.send(request).await?;
    if reply.status != StatusCode::OK {
        return Err(format!(
            "PUT /destinations/{destination}: {} {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        ));
    }
    Ok(())
}
