//! Phase 5, scale: claims and completes on a small and a large database, and tc-server's
//! memory on the large one.

use super::*;

impl Bench {
    pub(super) async fn scale(&mut self) -> Result<(), String> {
        let plan = self.plan;
        let closed_url = format!("http://{}/closed", closed_port().await?);
        let small_db = self.db("scale-small");
        let large_db = self.db("scale-large");
        let mut costs = Vec::new();
        for (db, n) in [(&small_db, plan.scale_small), (&large_db, plan.scale_large)] {
            let t = Instant::now();
            let (path, url) = (db.clone(), closed_url.clone());
            let step = (n / 4).max(1);
            let clock = self.clock;
            tokio::task::spawn_blocking(move || {
                store_alone::fill(&path, n, &url, "fill", &|done| {
                    if done.is_multiple_of(step) || done == n {
                        eprintln!(
                            "[bench {:>6.1}s]   filled {done}/{n}",
                            clock.elapsed().as_secs_f64()
                        );
                    }
                })
            })
            .await
            .map_err(|e| format!("fill: {e}"))??;
            self.progress(&format!(
                "{n} pending rows written in {:.1} s",
                t.elapsed().as_secs_f64()
            ));
            let cost = store_alone::claim_complete_cost(
                db,
                tc_store::Synchronous::Normal,
                plan.scale_rounds,
                plan.connections,
                &closed_url,
                "fill",
                plan.patience,
            )
            .await?;
            self.progress(&format!(
                "claim + complete with {n} pending: {:.1} µs per task ({} tasks)",
                cost.per_task.as_secs_f64() * 1e6,
                cost.tasks
            ));
            costs.push(cost);
        }
        let [small, large] = costs[..] else {
            return Err("scale: missing a measurement".into());
        };
        self.push(
            Figure::new(
                "claim_cost_ratio",
                &format!("5 claim+complete µs/task, {} pending", thousands(plan.scale_large)),
                large.per_task.as_secs_f64() * 1e6,
                "µs",
            )
            .beside(
                small.per_task.as_secs_f64() * 1e6,
                &format!("{} pending", thousands(plan.scale_small)),
            )
            .target(Target::RatioAtMost(2.0))
            .note("SqliteStore, synchronous=NORMAL, rounds of claim_due(64) + 64 concurrent completes"),
        );

        // Peak RSS of tc-server serving with the large database pending.
        let tc = self.start_tc(
            "scale-large",
            &[
                "--concurrency",
                &plan.connections.to_string(),
                "--sync",
                "full",
                "--backoff-base-ms",
                "3600000",
                "--backoff-cap-ms",
                "3600000",
                // The worker is to keep claiming and failing throughout
                // (the most memory it can use here); an open breaker would
                // hold the tasks after ten refusals and leave it idle.
                "--breaker-failures",
                "1000000",
            ],
        )?;
        let endpoint = Endpoint::new(tc.addr);
        let (started_hwm, _) = tc.memory_kib()?;
        let scrape = {
            let endpoint = endpoint.clone();
            let until = Instant::now() + plan.rss_window;
            tokio::spawn(async move {
                let mut conn = Conn::open(endpoint.addr).await?;
                let mut last = BTreeMap::new();
                while Instant::now() < until {
                    last = task_counts_of(&mut conn, &endpoint).await?;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Ok::<_, String>(last)
            })
        };
        let load = load::run(
            &endpoint,
            Load {
                connections: plan.connections,
                max_requests: plan.max_requests,
                max_duration: plan.rss_window,
            },
            submits_with_many_attempts(closed_url.clone()),
            load::created,
        )
        .await?;
        let counts = scrape.await.map_err(|e| format!("scrape: {e}"))??;
        let (hwm, rss) = tc.memory_kib()?;
        let warnings = self.server_warnings(&tc);
        tc.stop();
        self.report_load("submits while serving the large database", &load);
        self.progress(&format!(
            "tc-server RSS: peak {} MiB (at start {} MiB, now {} MiB); tasks {counts:?}",
            hwm / 1024,
            started_hwm / 1024,
            rss / 1024
        ));
        let pending = counts.get("pending").copied().unwrap_or(0);
        self.push(
            Figure::new(
                "peak_rss",
                &format!("5 tc-server peak RSS, {} pending", thousands(pending)),
                hwm as f64 / 1024.0,
                "MiB",
            )
            .target(Target::AtMost(64.0))
            .note(format!(
                "VmHWM after {:.0} s serving 64-conn submits + /metrics scrapes, worker at \
                 concurrency 64 retrying tasks against a closed port (1 h backoff keeps them \
                 pending). {warnings}",
                plan.rss_window.as_secs_f64()
            )),
        );
        self.detail(
            "scale",
            json!({
                "small_pending": plan.scale_small,
                "large_pending": plan.scale_large,
                "small_us_per_task": small.per_task.as_secs_f64() * 1e6,
                "large_us_per_task": large.per_task.as_secs_f64() * 1e6,
                "tasks_timed": [small.tasks, large.tasks],
                "rss_kib": { "start_hwm": started_hwm, "peak": hwm, "end": rss },
                "counts_during_rss": counts,
                "submits_during_rss": load_json(&load),
            }),
        );
        Ok(())
    }

    // ---- 6 -------------------------------------------------------------
}
