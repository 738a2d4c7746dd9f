//! Phase 6, naive peer: end to end beside a spawn-and-forget server (what durability costs).

use super::*;

impl Bench {
    pub(super) async fn naive_peer(&mut self) -> Result<(), String> {
        let n = self.plan.e2e_tasks;
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let naive = self.start_peer("naive")?;
        let endpoint = Endpoint::new(naive.addr);
        let measured = self
            .submit_window("naive peer submits", &endpoint, &down.url())
            .await?;
        // Let the fire-and-forget calls of the window drain before timing
        // the end-to-end run on a fresh downstream.
        let _ = down
            .wait_served(measured.ok, Instant::now() + self.plan.patience)
            .await;
        drop(down);
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let started = Instant::now();
        let submitted = self
            .submit_batch(&endpoint, &down.url(), "naive-e2e", n)
            .await?;
        let all = down.wait_served(n, started + self.plan.patience).await;
        let elapsed = started.elapsed();
        naive.stop();
        if !all {
            return Err(format!(
                "the naive peer's downstream saw {} of {n} calls",
                down.served()
            ));
        }
        let e2e = stats::rate(n, elapsed);
        self.progress(&format!(
            "naive peer: {n} calls done in {:.2} s = {e2e:.0}/s ({} submits ok, {} downstream \
             connections)",
            elapsed.as_secs_f64(),
            submitted.ok,
            down.connections()
        ));
        let summary = stats::summarize(measured.latencies.clone())
            .ok_or_else(|| format!("no naive submit answered: {}", measured.problems()))?;
        if let Some((rate, idle)) = self.idle_submit {
            self.push(
                Figure::new(
                    "naive_submit_rate",
                    "6 submits/s: tc-server vs naive peer",
                    rate,
                    "/s",
                )
                .beside(measured.per_second(), "spawn-and-forget, no store"),
            );
            self.push(
                Figure::new(
                    "naive_submit_p99",
                    "6 submit p99: tc-server vs naive peer",
                    ms(idle.p99),
                    "ms",
                )
                .beside(ms(summary.p99), "spawn-and-forget, no store"),
            );
        }
        if let Some(rate) = self.tc_e2e_rate {
            self.push(
                Figure::new(
                    "naive_e2e_rate",
                    "6 end to end/s: tc-server vs naive peer",
                    rate,
                    "/s",
                )
                .beside(e2e, "spawn-and-forget, no store"),
            );
        }
        self.detail(
            "naive_peer",
            json!({ "submit": load_json(&measured), "e2e_rate": e2e, "e2e_seconds": elapsed.as_secs_f64() }),
        );
        Ok(())
    }
}
