//! Phase 1, submit: tc-server's submits/s and latency beside the no-op peer's.

use super::*;

impl Bench {
    pub(super) async fn submit(&mut self) -> Result<(), String> {
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let tc = self.start_tc_full("submit")?;
        let endpoint = Endpoint::new(tc.addr);
        self.captured = Some(self.capture(&endpoint, &down.url()).await?);
        let windows = self
            .submit_windows("tc-server submits", &endpoint, &down.url())
            .await;
        // Threads show how many OS threads the request path parks (a
        // blocking-pool thread per waiting call, say).
        let threads = tc.threads().ok();
        if let Some(threads) = threads {
            self.progress(&format!("tc-server has {threads} threads after the window"));
        }
        let warnings = self.server_warnings(&tc);
        tc.stop();
        let windows = windows?;
        let measured = windows.pooled();

        let noop = self.start_peer("noop")?;
        let ceiling = self
            .submit_window("no-op server", &Endpoint::new(noop.addr), &down.url())
            .await;
        noop.stop();
        let ceiling = ceiling?;

        self.progress("store alone: 64 callers, synchronous=FULL");
        let alone = store_alone::submit_ceiling(
            &self.db("alone"),
            self.plan.connections,
            self.plan.max_requests,
            self.plan.store_window,
        )
        .await?;
        self.report_load("store alone", &alone);

        let (Some(tc_lat), Some(noop_lat)) = (
            stats::summarize(measured.latencies.clone()),
            stats::summarize(ceiling.latencies.clone()),
        ) else {
            return Err(format!(
                "no submit was answered 201: {} / {}",
                measured.problems(),
                ceiling.problems()
            ));
        };
        let rate = windows.median_rate();
        self.idle_submit = Some((rate, tc_lat));
        self.noop_rate = Some(ceiling.per_second());
        self.store_submit_rate = Some(alone.per_second());
        let note = [measured.problems(), warnings].join(" ").trim().to_owned();
        self.push(
            Figure::new(
                "submit_rate",
                "1 submits/s (HTTP, sync=full, 64 conns)",
                rate,
                "/s",
            )
            .beside(ceiling.per_second(), "no-op hyper server")
            .target(Target::RatioAtLeast(0.5))
            .note(format!(
                "median of {} windows after the cold one and a warm-up. {note}",
                windows.steady.len()
            )),
        );
        self.push(
            Figure::new(
                "submit_cold",
                "1 submits/s, the first window on a fresh database",
                windows.cold.per_second(),
                "/s",
            )
            .beside(rate, "the steady windows' median")
            .target(Target::RatioAtLeast(0.7)),
        );
        self.push(
            Figure::new(
                "submit_vs_store",
                "1 submits/s vs the store alone",
                rate,
                "/s",
            )
            .beside(alone.per_second(), "SqliteStore, 64 callers")
            .target(Target::RatioAtLeast(0.7)),
        );
        for (key, name, value, ceiling_value, target) in [
            ("submit_p50", "1 submit p50", tc_lat.p50, noop_lat.p50, None),
            (
                "submit_p99",
                "1 submit p99",
                tc_lat.p99,
                noop_lat.p99,
                Some(Target::AtMost(5.0)),
            ),
            (
                "submit_p999",
                "1 submit p99.9",
                tc_lat.p999,
                noop_lat.p999,
                None,
            ),
        ] {
            let mut figure =
                Figure::new(key, name, ms(value), "ms").beside(ms(ceiling_value), "no-op");
            if let Some(target) = target {
                figure = figure.target(target);
            }
            self.push(figure);
        }
        let store_lat = stats::summarize(alone.latencies.clone());
        self.detail(
            "submit",
            json!({
                "tc_server": load_json(&measured),
                "tc_server_windows": windows.json(),
                "noop": load_json(&ceiling),
                "store_alone": load_json(&alone),
                "store_alone_p99_ms": store_lat.map(|s| ms(s.p99)),
                "tc_server_threads": threads,
            }),
        );
        Ok(())
    }

    /// One submit to tc-server, kept as the bytes the reference servers
    /// answer with.
    pub(super) async fn capture(&self, endpoint: &Endpoint, url: &str) -> Result<Captured, String> {
        let mut conn = Conn::open(endpoint.addr).await?;
        let body = load::submit_body(url, "capture", 0, "");
        let reply = conn
            .send(endpoint.request(Method::POST, "/tasks", Some(body))?)
            .await?;
        if reply.status != StatusCode::CREATED {
            return Err(format!(
                "capture submit: status {}: {}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
            ));
        }
        let location = reply
            .headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("/tasks/unknown")
            .to_owned();
        let body_file = self.dir.path().join("submit-response.json");
        std::fs::write(&body_file, &reply.body).map_err(|e| format!("capture: {e}"))?;
        Ok(Captured {
            body_file,
            location,
        })
    }

    // ---- 2 -------------------------------------------------------------
}
