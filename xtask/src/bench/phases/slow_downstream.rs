//! Phase 3, slow downstream: submit latency while a slow downstream holds the worker's slots,
//! beside phase 1's idle figure.

use super::*;

impl Bench {
    pub(super) async fn slow_downstream(&mut self) -> Result<(), String> {
        let Some((_, idle)) = self.idle_submit else {
            return Err("needs phase 1's idle p99".into());
        };
        let down = HttpDownstream::start(self.plan.slow_delay).await?;
        let tc = self.start_tc_full("slow")?;
        let endpoint = Endpoint::new(tc.addr);
        let backlog = self
            .submit_batch(&endpoint, &down.url(), "backlog", self.plan.slow_backlog)
            .await?;
        self.report_load("backlog submitted", &backlog);
        let measured = self
            .submit_window("submits with the backlog waiting", &endpoint, &down.url())
            .await?;
        let mut conn = Conn::open(endpoint.addr).await?;
        let counts = task_counts_of(&mut conn, &endpoint).await?;
        self.progress(&format!(
            "after the window: {counts:?}; downstream answered {}",
            down.served()
        ));
        let warnings = self.server_warnings(&tc);
        tc.stop();
        let summary = stats::summarize(measured.latencies.clone())
            .ok_or_else(|| format!("no submit answered: {}", measured.problems()))?;
        let pending = counts.get("pending").copied().unwrap_or(0);
        self.push(
            Figure::new(
                "slow_submit_p99",
                &format!(
                    "3 submit p99, 2 s downstream, {} backlog",
                    self.plan.slow_backlog
                ),
                ms(summary.p99),
                "ms",
            )
            .beside(ms(idle.p99), "idle p99 from 1")
            .target(Target::RatioAtMost(2.0))
            .note(format!(
                "{pending} pending + {} running after the window; {}/s during it. {warnings}",
                counts.get("running").copied().unwrap_or(0),
                measured.per_second() as u64
            )),
        );
        if let Some(noop) = self.noop_rate {
            self.push(
                Figure::new(
                    "slow_submit_rate",
                    "3 submits/s while the worker waits on the slow downstream",
                    measured.per_second(),
                    "/s",
                )
                .beside(noop, "no-op hyper server")
                .note("the request path without the worker's writes and calls beside it"),
            );
        }
        self.detail(
            "slow_downstream",
            json!({ "backlog": load_json(&backlog), "window": load_json(&measured), "counts": counts }),
        );
        Ok(())
    }

    // ---- 4 -------------------------------------------------------------
}
