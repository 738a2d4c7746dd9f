//! Phase 8, operations: batch submit, a bulk retry over a
//! filter, and the database file under a steady load with short retention.

use super::*;

/// Tasks per batch request.
const BATCH: u64 = 1000;

impl Bench {
    pub(super) async fn operations(&mut self) -> Result<(), String> {
        let plan = self.plan;
        let closed = format!("http://{}/closed", closed_port().await?);

        // Batch submit: 1000 tasks per request, due in an hour (the worker
        // stays out of the way), 8 connections, sync=full.
        let tc = self.start_tc_full("batch")?;
        let endpoint = Endpoint::new(tc.addr);
        let batches = if plan.quick { 40 } else { 300 };
        let prefix = format!("batch-{}", self.clock.elapsed().as_nanos());
        let url = closed.clone();
        let make: MakeRequest = Arc::new(move |endpoint: &Endpoint, i| {
            endpoint.request(
                Method::POST,
                "/tasks/batch",
                Some(batch_body(&url, &prefix, i)),
            )
        });
        let outcome = load::run(
            &endpoint,
            Load {
                connections: 8,
                max_requests: batches,
                max_duration: plan.patience,
            },
            make,
            load::success,
        )
        .await;
        tc.stop();
        let outcome = outcome?;
        self.report_load("batch submits (1000 tasks each)", &outcome);
        let tasks_per_s = outcome.per_second() * BATCH as f64;
        let mut figure = Figure::new(
            "batch_submit_rate",
            "8 batch submit tasks/s (1000 per request, sync=full)",
            tasks_per_s,
            "/s",
        )
        .target(Target::AtLeast(100_000.0))
        .note(outcome.problems());
        if let Some((single, _)) = self.idle_submit {
            figure = figure.beside(single, "single submits/s from 1");
        }
        self.push(figure);
        self.detail("batch", load_json(&outcome));

        // Bulk retry: n tasks fail at once (one try, a refused connection),
        // then one POST /tasks/bulk retries every failed task.
        let n = if plan.quick { 5_000 } else { 100_000 };
        let tc = self.start_tc(
            "bulk",
            &[
                "--concurrency",
                "64",
                "--sync",
                "full",
                "--max-attempts",
                "1",
                // Every call here is refused on purpose: an open breaker
                // would hold the tasks (as it should in service) and this
                // figure would measure its open period, not the bulk path.
                "--breaker-failures",
                "1000000",
            ],
        )?;
        let endpoint = Endpoint::new(tc.addr);
        let result = self.bulk_retry(&endpoint, &closed, n).await;
        tc.stop();
        let seconds = result?;
        self.push(
            Figure::new(
                "bulk_retry_seconds",
                &format!("8 bulk retry of {} failed tasks", thousands(n)),
                seconds * 1000.0,
                "ms",
            )
            .note("one POST /tasks/bulk {\"action\":\"retry\",\"filter\":{\"state\":\"failed\"}}"),
        );

        // The file under steady load with short retention.
        self.file_growth(&closed).await
    }

    async fn bulk_retry(&self, endpoint: &Endpoint, url: &str, n: u64) -> Result<f64, String> {
        let prefix = format!("bulk-{}", self.clock.elapsed().as_nanos());
        let url_owned = url.to_owned();
        let make: MakeRequest = Arc::new(move |endpoint: &Endpoint, i| {
            endpoint.request(
                Method::POST,
                "/tasks/batch",
                Some(batch_body_now(&url_owned, &prefix, i)),
            )
        });
        let submitted = load::run(
            endpoint,
            Load {
                connections: 4,
                max_requests: n.div_ceil(BATCH),
                max_duration: self.plan.patience,
            },
            make,
            load::success,
        )
        .await?;
        if submitted.ok * BATCH < n {
            return Err(format!(
                "bulk: only {} batches submitted: {}",
                submitted.ok,
                submitted.problems()
            ));
        }
        self.wait_terminal(endpoint, n, Instant::now() + self.plan.patience)
            .await?;
        let mut conn = Conn::open(endpoint.addr).await?;
        let body = Bytes::from_static(br#"{"action":"retry","filter":{"state":"failed"}}"#);
        let start = Instant::now();
        let reply = conn
            .send(endpoint.request(Method::POST, "/tasks/bulk", Some(body))?)
            .await?;
        let took = start.elapsed();
        let answer: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
        if reply.status != StatusCode::OK || answer["applied"].as_u64() != Some(n) {
            return Err(format!("bulk retry answered {}: {answer}", reply.status));
        }
        self.progress(&format!(
            "bulk retry of {n} failed tasks: {:.2} s ({answer})",
            took.as_secs_f64()
        ));
        Ok(took.as_secs_f64())
    }

    /// Submits against an instant downstream for several windows with
    /// retention of a few seconds, reading the database file's size (with
    /// its WAL) after the first window and after the last.
    async fn file_growth(&mut self, _closed: &str) -> Result<(), String> {
        let plan = self.plan;
        let (window, windows, retain) = if plan.quick {
            (Duration::from_secs(2), 3, "2s")
        } else {
            (Duration::from_secs(60), 4, "10s")
        };
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let db = self.db("growth");
        let tc = self.start_tc(
            "growth",
            &[
                "--concurrency",
                "64",
                "--sync",
                "full",
                "--retain-success",
                retain,
                "--retain-failed",
                retain,
                "--retain-canceled",
                retain,
            ],
        )?;
        let endpoint = Endpoint::new(tc.addr);
        let mut sizes = Vec::new();
        let mut submitted = 0;
        for i in 0..windows {
            let outcome = load::run(
                &endpoint,
                Load {
                    connections: 16,
                    max_requests: plan.max_requests,
                    max_duration: window,
                },
                load::submits(down.url(), format!("growth-{i}"), ""),
                load::created,
            )
            .await?;
            submitted += outcome.ok;
            sizes.push(file_size(&db));
            self.progress(&format!(
                "growth window {}: {} submits, file {:.1} MiB",
                i + 1,
                outcome.ok,
                sizes[i] as f64 / 1048576.0
            ));
        }
        tc.stop();
        let (first, last) = (sizes[0] as f64, sizes[sizes.len() - 1] as f64);
        self.push(
            Figure::new(
                "file_growth",
                &format!(
                    "8 file size after {} windows of steady load, retention {retain}",
                    windows
                ),
                last / 1048576.0,
                "MiB",
            )
            .beside(first / 1048576.0, "after the first window")
            .target(Target::RatioAtMost(1.2))
            .note(format!(
                "{submitted} tasks submitted in all; database + WAL"
            )),
        );
        self.detail("file_growth", json!({"bytes_after_each_window": sizes}));
        Ok(())
    }
}

/// The database file and its WAL, in bytes.
fn file_size(db: &Path) -> u64 {
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    len(db) + len(Path::new(&wal))
}

/// A batch of 1000 tasks due in an hour.
fn batch_body(url: &str, prefix: &str, i: u64) -> Bytes {
    batch_of(url, prefix, i, r#","delay_ms":3600000"#)
}

/// A batch of 1000 tasks due now.
fn batch_body_now(url: &str, prefix: &str, i: u64) -> Bytes {
    batch_of(url, prefix, i, "")
}

fn batch_of(url: &str, prefix: &str, i: u64, extra: &str) -> Bytes {
    let items: Vec<String> = (0..BATCH)
        .map(|k| {
            String::from_utf8_lossy(&load::submit_body(url, prefix, i * BATCH + k, extra))
                .into_owned()
        })
        .collect();
    Bytes::from(format!(r#"{{"tasks":[{}]}}"#, items.join(",")))
}
