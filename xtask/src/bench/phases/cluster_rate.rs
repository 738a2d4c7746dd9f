//! Phase 15 (`--store postgres`): a destination's rate
//! across the cluster. Three tc-server nodes on one PostgreSQL schema
//! share a backlog to one destination given `rate_per_s: 50` (and
//! `burst: 5`, so that a full bucket adds at most 5 to a window); the
//! downstream's answered count is sampled every 10 ms, and the figure is
//! the most calls in any window of at least a second over the run (30 s;
//! 10 s with `--quick`). Per node, the old buckets let three nodes send
//! 150/s.
//!
//! The backlog is queued while the destination is paused, and resumed
//! once every node has read the rate (a setting made through one node
//! reaches the others within their settings interval, a second): the run
//! measures the cluster's rate, not that interval.

use std::process::Command;

use tc_store_pg::testing::TestDatabase;

use super::*;

/// The destination's rate and bucket.
const RATE: u64 = 50;
const BURST: u64 = 5;

/// The nodes.
const NODES: usize = 3;

/// How often the downstream's count is sampled.
const SAMPLE: Duration = Duration::from_millis(10);

/// The most calls in any span of at least `window` between two samples
/// (`(when, calls so far)`, in time order): each span is counted from a
/// sample to the first one at least `window` later, so it errs high, by
/// the calls of one sample period at most.
fn busiest_window(samples: &[(Instant, u64)], window: Duration) -> Option<u64> {
    let mut best = None;
    let mut j = 0;
    for (i, &(start, before)) in samples.iter().enumerate() {
        j = j.max(i);
        while j < samples.len() && samples[j].0 - start < window {
            j += 1;
        }
        let Some(&(_, after)) = samples.get(j) else {
            break;
        };
        best = Some(best.map_or(after - before, |b: u64| b.max(after - before)));
    }
    best
}

impl Bench {
    pub(super) async fn cluster_rate(&mut self) -> Result<(), String> {
        let db = TestDatabase::connect()
            .await
            .map_err(|skip| format!("{skip}: --store postgres needs PostgreSQL"))?;
        let measured = self.cluster_rate_run(&db).await;
        db.cleanup().await?;
        let (busiest, total, seconds) = measured?;
        let mean = total as f64 / seconds;
        self.progress(&format!(
            "{NODES} nodes at {RATE}/s: busiest 1-s window {busiest} calls, {total} calls in \
             {seconds:.1} s ({mean:.1}/s)"
        ));
        self.push(
            Figure::new(
                "cluster_rate_busiest_window",
                &format!("15 calls in the busiest 1-s window, {NODES} nodes at rate_per_s {RATE}"),
                busiest as f64,
                "calls",
            )
            .target(Target::AtMost(55.0))
            .note(format!(
                "burst {BURST}; {total} calls in {seconds:.0} s ({mean:.1}/s); sampled every \
                 {} ms",
                SAMPLE.as_millis()
            )),
        );
        self.detail(
            "cluster_rate",
            json!({"nodes": NODES, "rate_per_s": RATE, "burst": BURST,
                   "busiest_window": busiest, "calls": total, "seconds": seconds}),
        );
        Ok(())
    }

    /// Runs the nodes over a backlog; the busiest window, the calls and
    /// the seconds measured.
    async fn cluster_rate_run(&self, db: &TestDatabase) -> Result<(u64, u64, f64), String> {
        let run_for = if self.plan.quick {
            Duration::from_secs(10)
        } else {
            Duration::from_secs(30)
        };
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let schema = db.fresh_schema();
        db.execute(&format!("CREATE SCHEMA {schema}")).await?;
        let sep = if db.url().contains('?') { '&' } else { '?' };
        let target = format!("{}{sep}options=-csearch_path%3D{schema}", db.url());
        let mut nodes = Vec::new();
        for i in 0..NODES {
            let mut command = Command::new(&self.tc_server);
            command
                .args(["--listen", "127.0.0.1:0", "--db", &target])
                .args(["--log-format", "json", "--concurrency", "16"])
                .env_remove("RUST_LOG");
            nodes.push(ServerProcess::start(
                &format!("tc-server (cluster rate #{i})"),
                command,
            )?);
        }
        let endpoint = Endpoint::new(nodes[0].addr);
        let destination = down.destination();
        let mut conn = Conn::open(endpoint.addr).await?;
        let body = Bytes::from(format!(
            r#"{{"rate_per_s":{RATE},"burst":{BURST},"paused":true}}"#
        ));
        let reply = conn
            .send(endpoint.request(
                Method::PUT,
                &format!("/destinations/{destination}"),
                Some(body),
            )?)
            .await?;
        if reply.status != StatusCode::OK {
            return Err(format!("PUT /destinations/{destination}: {}", reply.status));
        }
        // More than the run can send, submitted through every node.
        let backlog = RATE * run_for.as_secs() * 3 / 2;
        let prefix = format!("cluster-rate-{}", self.clock.elapsed().as_nanos());
        let load = Load {
            connections: 16,
            max_requests: backlog,
            max_duration: self.plan.patience,
        };
        let outcome = load::run(
            &endpoint,
            load,
            load::submits(down.url(), prefix, ""),
            load::created,
        )
        .await?;
        if outcome.ok != backlog {
            return Err(format!("only {} of {backlog} submits", outcome.ok));
        }
        // Every node reads the settings every second.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        super::one_node::post(&endpoint, &format!("/destinations/{destination}/resume")).await?;
        let started = Instant::now();
        let mut samples = vec![(started, down.served())];
        let mut tick = tokio::time::interval(SAMPLE);
        while started.elapsed() < run_for {
            tick.tick().await;
            samples.push((Instant::now(), down.served()));
        }
        for node in nodes {
            node.stop();
        }
        let seconds = started.elapsed().as_secs_f64();
        let total = samples.last().map_or(0, |s| s.1) - samples[0].1;
        let busiest = busiest_window(&samples, Duration::from_secs(1))
            .ok_or("the run was shorter than a window")?;
        Ok((busiest, total, seconds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_window_spans_at_least_the_window() {
        let t0 = Instant::now();
        let at = |ms: u64, calls: u64| (t0 + Duration::from_millis(ms), calls);
        let check = |samples: &[(Instant, u64)], want: Option<u64>| {
            assert_eq!(busiest_window(samples, Duration::from_secs(1)), want);
        };
        check(&[at(0, 0), at(500, 10)], None);
        check(&[at(0, 0), at(1_000, 50)], Some(50));
        check(
            &[at(0, 0), at(500, 40), at(1_000, 50), at(1_500, 95)],
            Some(55),
        );
        check(&[at(0, 0), at(990, 50), at(1_010, 52)], Some(52));
    }
}
