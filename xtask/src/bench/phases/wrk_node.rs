//! Phase 14, one node under `wrk`: phase 12's stream, drain and
//! cold-start ratios again with a load generator that is not the bound
//! (the bench's own HTTP producer tops out at about a quarter of what
//! tc-server takes here). Without `wrk` on the PATH the phase says so and
//! is skipped: its figures are not measured with a slower load instead.
//!
//! - **cold**: a new server loaded at once by wrk; its first window's
//!   submits/s beside its steady windows' (and the same for end to end).
//! - **stream**: windows of wrk submits with the worker on, each followed by
//!   a wait until every task is terminal; the median is the stream.
//! - **drain**: `node_backlog` tasks queued in random-key batches of 1000
//!   while their destination is paused, then resumed; the drain's rate
//!   beside the stream, and where the writer's time went in each (its CPU
//!   per task, the process's per thread).

use super::claim_split::{ClaimCounters, ClaimSplit};
use super::one_node::{BATCH, CpuSnapshot, CpuSpent, post, us_per_task};
use super::*;
use crate::bench::wrk::{Wrk, WrkWindow};

/// One stream window: wrk's submits, then until all were terminal.
struct StreamWindow {
    submits: WrkWindow,
    elapsed: Duration,
    cpu: CpuSpent,
    claims: ClaimSplit,
}

impl StreamWindow {
    fn rate(&self) -> f64 {
        stats::rate(self.submits.ok(), self.elapsed)
    }
}

fn wrk_json(w: &WrkWindow) -> Value {
    json!({
        "requests": w.requests,
        "non_2xx": w.non_2xx,
        "socket_errors": w.socket_errors,
        "seconds": w.elapsed.as_secs_f64(),
        "per_second": w.per_second(),
        "p50_ms": ms(w.p50),
        "p99_ms": ms(w.p99),
    })
}

/// The middle value (the upper middle of an even count), 0 for none.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// What a drain's polls of `/metrics` saw: the mean of the tasks the store
/// holds running (claimed, not yet ended: the claim's write, the call and
/// the completion's write) and of the worker's calls in flight.
#[derive(Debug, Default)]
struct InFlight {
    polls: u64,
    running: f64,
    calls: f64,
}

/// `taskcenter_calls_in_flight N` of the metrics text.
fn calls_in_flight(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix("taskcenter_calls_in_flight "))
        .and_then(|v| v.trim().parse().ok())
}

impl Bench {
    /// [`Bench::wait_terminal`] that also averages what is in flight.
    async fn watch_drain(
        &self,
        endpoint: &Endpoint,
        n: u64,
        until: Instant,
    ) -> Result<(Instant, InFlight), String> {
        const POLL: Duration = Duration::from_millis(10);
        let mut conn = Conn::open(endpoint.addr).await?;
        let mut seen = InFlight::default();
        loop {
            let reply = conn
                .send(endpoint.request(Method::GET, "/metrics", None)?)
                .await?;
            let text = String::from_utf8_lossy(&reply.body);
            let counts = task_counts(&text);
            if terminal(&counts) >= n {
                let polls = seen.polls.max(1) as f64;
                seen.running /= polls;
                seen.calls /= polls;
                return Ok((Instant::now(), seen));
            }
            seen.polls += 1;
            seen.running += counts.get("running").copied().unwrap_or(0) as f64;
            seen.calls += calls_in_flight(&text).unwrap_or(0.0);
            if Instant::now() >= until {
                return Err(format!(
                    "only {} of {n} tasks terminal in time: {counts:?}",
                    terminal(&counts)
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The load generators' own ceilings: the bench's closed loop, then
    /// wrk, each for one window against the no-op server.
    async fn generator_ceilings(
        &self,
        wrk: &Wrk,
        url: &str,
    ) -> Result<(LoadResult, WrkWindow), String> {
        let noop = self.start_peer("noop")?;
        let endpoint = Endpoint::new(noop.addr);
        let run_id = self.clock.elapsed().as_nanos();
        let window = self.plan.node_window;
        let own = self
            .submit_load(&endpoint, url, window, format!("gen-{run_id}"))
            .await?;
        let theirs = wrk
            .submits(
                noop.addr,
                self.plan.connections,
                window,
                url,
                &format!("gen-wrk-{run_id}"),
            )
            .await?;
        noop.stop();
        self.progress(&format!(
            "  load generators against the no-op server: the bench's {:.0}/s, wrk {:.0}/s",
            own.per_second(),
            theirs.per_second()
        ));
        Ok((own, theirs))
    }

    pub(super) async fn wrk_node(&mut self) -> Result<(), String> {
        let Some(wrk) = Wrk::find(self.dir.path())? else {
            self.progress("  wrk is not installed (Debian: apt-get install wrk): phase 14 skipped");
            self.detail("wrk_node", json!({"skipped": "wrk is not installed"}));
            return Ok(());
        };
        let plan = self.plan;
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let url = down.url();
        let tc = self.start_tc_full("wrk-node")?;
        let endpoint = Endpoint::new(tc.addr);
        let run_id = self.clock.elapsed().as_nanos();
        let connections = plan.connections;

        let mut windows: Vec<StreamWindow> = Vec::with_capacity(plan.node_windows + 1);
        let mut submitted = 0;
        // The first window is the cold one: the load starts the moment the
        // server listens, and it is timed end to end like the others.
        for i in 0..=plan.node_windows {
            let before = CpuSnapshot::take(tc.pid())?;
            let claims_before = ClaimCounters::read(&endpoint).await?;
            let started = Instant::now();
            let window = if i == 0 {
                plan.cold_window
            } else {
                plan.node_window
            };
            let submits = wrk
                .submits(
                    tc.addr,
                    connections,
                    window,
                    &url,
                    &format!("w{run_id}-{i}"),
                )
                .await?;
            submitted += submits.ok();
            let (_, done) = self
                .wait_terminal(&endpoint, submitted, Instant::now() + plan.patience)
                .await?;
            let cpu = CpuSnapshot::take(tc.pid())?.since(&before);
            let claims = ClaimCounters::read(&endpoint)
                .await?
                .since(&claims_before, done - started);
            let w = StreamWindow {
                submits,
                elapsed: done - started,
                cpu,
                claims,
            };
            self.progress(&format!(
                "  wrk window {i}{}: {} submits = {:.0}/s (p99 {:.2} ms, {} non-2xx, {} socket \
                 errors); terminal in {:.2} s = {:.0}/s; writer thread {:.1} µs/task; {}",
                if i == 0 { " (cold)" } else { "" },
                w.submits.ok(),
                w.submits.per_second(),
                ms(w.submits.p99),
                w.submits.non_2xx,
                w.submits.socket_errors,
                w.elapsed.as_secs_f64(),
                w.rate(),
                us_per_task(w.cpu.writer_ns, w.submits.ok()),
                w.claims.line(),
            ));
            windows.push(w);
        }
        let cold = windows.remove(0);
        let stream = median(windows.iter().map(StreamWindow::rate).collect());
        let steady_submit = median(windows.iter().map(|w| w.submits.per_second()).collect());
        let mut stream_cpu = CpuSpent::default();
        let mut stream_tasks = 0;
        for w in &windows {
            stream_cpu.add(&w.cpu);
            stream_tasks += w.submits.ok();
        }

        // Drain: a backlog queued behind a paused destination, resumed.
        let destination = down.destination();
        let queued = self
            .queue_paused_backlog(
                &endpoint,
                &url,
                &destination,
                "  backlog queued (batches of 1000 random keys)",
            )
            .await?;
        let backlog = queued.ok * BATCH;
        let before = CpuSnapshot::take(tc.pid())?;
        let claims_before = ClaimCounters::read(&endpoint).await?;
        let started = Instant::now();
        post(&endpoint, &format!("/destinations/{destination}/resume")).await?;
        let (done, in_flight) = self
            .watch_drain(&endpoint, submitted + backlog, started + plan.patience)
            .await?;
        let drain_cpu = CpuSnapshot::take(tc.pid())?.since(&before);
        let drain_claims = ClaimCounters::read(&endpoint)
            .await?
            .since(&claims_before, done - started);
        let drain = stats::rate(backlog, done - started);
        let per_task = |cpu: &CpuSpent, tasks: u64| us_per_task(cpu.writer_ns, tasks);
        // Little's law: the mean time a task spends running in the store
        // (claim's commit, call, completion's commit) and in its call.
        let round_ms = |mean: f64| mean / drain.max(1e-9) * 1000.0;
        let split = format!(
            "running in the store {:.1} on average (of {connections}), calls in flight {:.1}: \
             {:.2} ms per task from claim to end, {:.2} ms of it in the call",
            in_flight.running,
            in_flight.calls,
            round_ms(in_flight.running),
            round_ms(in_flight.calls),
        );
        self.progress(&format!(
            "  drained {backlog} in {:.2} s = {drain:.0}/s (stream {stream:.0}/s); writer thread \
             {:.1} µs/task draining, {:.1} streaming; {split}; claims draining: {}",
            (done - started).as_secs_f64(),
            per_task(&drain_cpu, backlog),
            per_task(&stream_cpu, stream_tasks),
            drain_claims.line(),
        ));
        if self.captured.is_none() {
            // Phase 1 did not run: the no-op server answers with this
            // server's answer to a submit, taken now that it is measured.
            self.captured = Some(self.capture(&endpoint, &url).await?);
        }
        let warnings = self.server_warnings(&tc);
        tc.stop();
        let (own, theirs) = self.generator_ceilings(&wrk, &url).await?;

        let note = format!(
            "wrk -c{connections}, no-op downstream, worker on, --sync full; stream = median of {} \
             windows of {:.0} s after the cold one, each until every task is terminal. {warnings}",
            windows.len(),
            plan.node_window.as_secs_f64()
        );
        self.push(
            Figure::new(
                "wrk_stream_submit",
                "14 submits/s under wrk, steady",
                steady_submit,
                "/s",
            )
            .note(note.clone()),
        );
        self.push(
            Figure::new(
                "wrk_stream",
                "14 end to end tasks/s under wrk (stream)",
                stream,
                "/s",
            )
            .note(note.clone()),
        );
        self.push(
            Figure::new(
                "wrk_drain",
                &format!("14 drain of {} queued tasks/s", thousands(backlog)),
                drain,
                "/s",
            )
            .beside(stream, "the wrk stream, same server")
            .target(Target::RatioAtLeast(1.0))
            .note(format!(
                "queued in random-key batches of {BATCH} while the destination was paused; \
                 writer thread {:.1} µs/task draining vs {:.1} streaming; {split}; claims \
                 draining: {}",
                per_task(&drain_cpu, backlog),
                per_task(&stream_cpu, stream_tasks),
                drain_claims.line(),
            )),
        );
        self.push(
            Figure::new(
                "wrk_cold",
                &format!(
                    "14 submits/s, first {:.0} s of a new server, wrk",
                    plan.cold_window.as_secs_f64()
                ),
                cold.submits.per_second(),
                "/s",
            )
            .beside(steady_submit, "its steady windows")
            .target(Target::RatioAtLeast(0.8))
            .note(format!(
                "end to end the first window ran {:.0}/s against a stream of {stream:.0}/s",
                cold.rate()
            )),
        );
        self.push(
            Figure::new(
                "wrk_generator_ceiling",
                "14 the bench's own load generator against the no-op server",
                own.per_second(),
                "/s",
            )
            .beside(theirs.per_second(), "wrk, same server, same run")
            .note(format!(
                "{connections} connections each, one window of {:.0} s each, one after the other; \
                 the figures above are wrk's",
                plan.node_window.as_secs_f64()
            )),
        );
        self.detail(
            "wrk_node",
            json!({
                "generator_ceilings": {
                    "bench_client": load_json(&own),
                    "wrk": wrk_json(&theirs),
                },
                "cold": {
                    "submits": wrk_json(&cold.submits),
                    "e2e_seconds": cold.elapsed.as_secs_f64(),
                    "e2e_per_second": cold.rate(),
                    "cpu": cold.cpu.json(cold.submits.ok()),
                    "claims": cold.claims.json(),
                },
                "steady": windows.iter().map(|w| json!({
                    "submits": wrk_json(&w.submits),
                    "e2e_seconds": w.elapsed.as_secs_f64(),
                    "e2e_per_second": w.rate(),
                    "cpu": w.cpu.json(w.submits.ok()),
                    "claims": w.claims.json(),
                })).collect::<Vec<_>>(),
                "stream_per_second": stream,
                "steady_submit_per_second": steady_submit,
                "stream_cpu": stream_cpu.json(stream_tasks),
                "drain": {
                    "tasks": backlog,
                    "seconds": (done - started).as_secs_f64(),
                    "per_second": drain,
                    "queue": load_json(&queued),
                    "cpu": drain_cpu.json(backlog),
                    "claims": drain_claims.json(),
                    "mean_running": in_flight.running,
                    "mean_calls_in_flight": in_flight.calls,
                    "polls": in_flight.polls,
                },
            }),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_in_flight_is_read_from_the_metrics_text() {
        let check =
            |text: &str, want: Option<f64>| assert_eq!(calls_in_flight(text), want, "{text}");
        check(
            "# TYPE taskcenter_calls_in_flight gauge\ntaskcenter_calls_in_flight 12\n",
            Some(12.0),
        );
        check("taskcenter_calls_in_flight_total 3\n", None);
        check("taskcenter_tasks{state=\"running\"} 4\n", None);
    }

    #[test]
    fn median_takes_the_middle_value() {
        for (values, want) in [
            (vec![], 0.0),
            (vec![2.0, 9.0, 1.0], 2.0),
            (vec![4.0, 1.0], 4.0),
        ] {
            assert_eq!(median(values.clone()), want, "{values:?}");
        }
    }
}
