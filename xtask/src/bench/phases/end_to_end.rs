//! Phase 2, end to end: tasks from submit to success, beside the same downstream calls sent
//! straight from the bench.

use super::*;

impl Bench {
    pub(super) async fn end_to_end(&mut self) -> Result<(), String> {
        let n = self.plan.e2e_tasks;
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let tc = self.start_tc_full("e2e")?;
        let endpoint = Endpoint::new(tc.addr);
        let started = Instant::now();
        let submitted = self.submit_batch(&endpoint, &down.url(), "e2e", n).await?;
        self.report_load("  submitted", &submitted);
        if submitted.ok != n {
            return Err(format!(
                "only {} of {n} submits: {}",
                submitted.ok,
                submitted.problems()
            ));
        }
        let (submits_done, done) = self
            .wait_terminal(&endpoint, n, started + self.plan.patience)
            .await?;
        let elapsed = done - started;
        // Once the submits are in, the worker has the machine to itself.
        let (drain_from, terminal_then) = submits_done;
        let drain = stats::rate(n - terminal_then.min(n), done - drain_from);
        self.progress(&format!(
            "  {terminal_then} terminal when the submits were in; the other {} drained at \
             {drain:.0}/s",
            n - terminal_then.min(n)
        ));
        let warnings = self.server_warnings(&tc);
        tc.stop();
        let rate = stats::rate(n, elapsed);
        let connections = down.connections();
        self.progress(&format!(
            "tc-server: {n} tasks terminal in {:.2} s = {rate:.0}/s (downstream answered {} \
             on {connections} connections)",
            elapsed.as_secs_f64(),
            down.served()
        ));
        self.tc_e2e_rate = Some(rate);

        let ceiling = load::run(
            &Endpoint::new(down.addr()),
            // A rate over a time window: n calls at this speed take only a
            // few hundred milliseconds, too short to be steady.
            Load {
                connections: self.plan.connections,
                max_requests: self.plan.max_requests,
                max_duration: self.plan.window / 3,
            },
            downstream_calls(),
            load::success,
        )
        .await?;
        self.report_load("no store, no worker: client → downstream", &ceiling);

        // The store's part of the worker's job alone: claim 64, complete
        // them, durably, round after round.
        let worker_db = self.db("worker-alone");
        let (path, url) = (worker_db.clone(), down.url());
        tokio::task::spawn_blocking(move || store_alone::fill(&path, n, &url, "wa", &|_| {}))
            .await
            .map_err(|e| format!("fill: {e}"))??;
        let alone = store_alone::claim_complete_cost(
            &worker_db,
            tc_store::Synchronous::Full,
            self.plan.scale_rounds,
            self.plan.connections,
            &down.url(),
            "wa",
            self.plan.patience,
        )
        .await?;
        let alone_rate = 1.0 / alone.per_task.as_secs_f64().max(1e-9);
        self.progress(&format!(
            "store alone, claim_due(64) + 64 completes, FULL: {alone_rate:.0} tasks/s"
        ));
        self.push(
            Figure::new(
                "e2e_rate",
                &format!("2 end to end tasks/s ({n} tasks)"),
                rate,
                "/s",
            )
            .beside(ceiling.per_second(), "client → downstream, 64 conns")
            .target(Target::RatioAtLeast(0.4))
            .note(warnings),
        );
        self.push(
            Figure::new(
                "e2e_vs_store",
                "2 end to end tasks/s vs the store's claim+complete",
                rate,
                "/s",
            )
            .beside(alone_rate, "SqliteStore, FULL, rounds of 64"),
        );
        // The target: 20,000 tasks/s, beside what the store alone
        // does for a task's three writes (its submit from phase 1, then its
        // claim and complete), one after the other.
        if let Some(submit_rate) = self.store_submit_rate {
            let store_per_task = 1.0 / submit_rate.max(1e-9) + 1.0 / alone_rate.max(1e-9);
            self.push(
                Figure::new(
                    "e2e_vs_store_writes",
                    "2 end to end tasks/s vs the store's submit+claim+complete",
                    rate,
                    "/s",
                )
                .beside(1.0 / store_per_task, "SqliteStore, FULL, 64 callers")
                .target(Target::AtLeast(20_000.0)),
            );
        }
        self.detail(
            "e2e",
            json!({
                "tasks": n,
                "terminal_when_submitted": terminal_then,
                "drain_rate": drain,
                "store_claim_complete_rate": alone_rate,
                "seconds": elapsed.as_secs_f64(),
                "submit_seconds": submitted.elapsed.as_secs_f64(),
                "downstream_connections": connections,
                "ceiling": load_json(&ceiling),
            }),
        );
        Ok(())
    }
}
