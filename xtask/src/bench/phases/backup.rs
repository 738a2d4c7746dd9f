//! Phase 11, backup: tc-server's p99 submit latency while `tc-server backup`
//! copies its large database (a separate process, SQLite's online backup
//! in paced steps), beside the p99 of windows without a backup, before and
//! after it, in the same run. Only submits write: the fill's tasks belong to
//! a paused destination, so the worker leaves them pending.

use super::*;

/// Short windows during the backup, so that little of the last one runs
/// after the copy has finished.
const DURING_WINDOW: Duration = Duration::from_millis(500);

impl Bench {
    pub(super) async fn backup(&mut self) -> Result<(), String> {
        let plan = self.plan;
        let n = plan.backup_tasks;
        let closed = closed_port().await?;
        let closed_url = format!("http://{closed}/closed");
        let db = self.db("backup");
        let t = Instant::now();
        let (path, url, clock) = (db.clone(), closed_url.clone(), self.clock);
        let step = (n / 4).max(1);
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
        let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0);
        self.progress(&format!(
            "{n} pending rows written in {:.1} s ({} MiB)",
            t.elapsed().as_secs_f64(),
            size / (1024 * 1024)
        ));

        let tc = self.start_tc(
            "backup",
            &[
                "--concurrency",
                &plan.connections.to_string(),
                "--sync",
                "full",
                "--backoff-base-ms",
                "3600000",
                "--backoff-cap-ms",
                "3600000",
            ],
        )?;
        let endpoint = Endpoint::new(tc.addr);
        pause(&endpoint, &closed.to_string()).await?;
        let before = self
            .submit_window("submits, no backup (before)", &endpoint, &closed_url)
            .await?;

        let target = self.dir.path().join("backup-copy.db");
        let mut child = std::process::Command::new(&self.tc_server)
            .args(["backup", "--json", "--db"])
            .arg(&db)
            .arg("--to")
            .arg(&target)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("tc-server backup: {e}"))?;
        let started = Instant::now();
        let run_id = self.clock.elapsed().as_nanos();
        let mut during = Vec::new();
        // Bounded: 20,000 half-second windows are almost three hours.
        for i in 0..20_000 {
            let window = self
                .submit_load(
                    &endpoint,
                    &closed_url,
                    DURING_WINDOW,
                    format!("bk-{run_id}-{i}"),
                )
                .await?;
            during.push(window);
            if child
                .try_wait()
                .map_err(|e| format!("tc-server backup: {e}"))?
                .is_some()
            {
                break;
            }
        }
        let wall = started.elapsed();
        let output = child
            .wait_with_output()
            .map_err(|e| format!("tc-server backup: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "tc-server backup: {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let made: Value = serde_json::from_slice(&output.stdout)
            .map_err(|e| format!("tc-server backup's output: {e}"))?;
        let after = self
            .submit_window("submits, no backup (after)", &endpoint, &closed_url)
            .await?;
        let warnings = self.server_warnings(&tc);
        tc.stop();

        let during = LoadResult::pooled(&during);
        self.report_load("submits during the backup", &during);
        let without = LoadResult::pooled(&[before, after]);
        let p99 = |load: &LoadResult| {
            stats::summarize(load.latencies.clone())
                .map(|s| ms(s.p99))
                .ok_or_else(|| "no submit answered".to_owned())
        };
        let (p99_during, p99_without) = (p99(&during)?, p99(&without)?);
        let seconds = made["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0;
        let bytes = made["bytes"].as_u64().unwrap_or(0);
        let mib = bytes as f64 / (1024.0 * 1024.0);
        self.progress(&format!(
            "backup of {} tasks: {mib:.0} MiB in {seconds:.1} s ({:.0} MiB/s), longest step \
             {:.2} ms; submit p99 {p99_during:.2} ms during, {p99_without:.2} ms without",
            made["tasks"],
            mib / seconds.max(1e-9),
            made["longest_step_us"].as_f64().unwrap_or(0.0) / 1000.0
        ));
        self.push(
            Figure::new(
                "backup_submit_p99",
                &format!("11 submit p99 during a backup, {} tasks", thousands(n)),
                p99_during,
                "ms",
            )
            .beside(p99_without, "no backup")
            .target(Target::RatioAtMost(2.0))
            .note(format!(
                "64-conn closed-loop submits (sync full) while `tc-server backup` copies the \
                 {mib:.0} MiB file in {seconds:.1} s; beside the windows before and after. {warnings}"
            )),
        );
        self.push(Figure::new(
            "backup_seconds",
            &format!("11 backup duration, {} tasks, {mib:.0} MiB", thousands(n)),
            seconds,
            "s",
        ));
        self.detail(
            "backup",
            json!({
                "tasks": n,
                "source_bytes_before": size,
                "made": made,
                "wall_seconds_with_submits": wall.as_secs_f64(),
                "submits_during": load_json(&during),
                "submits_without": load_json(&without),
            }),
        );
        Ok(())
    }
}

/// `PUT /destinations/{destination}` with `paused: true`.
async fn pause(endpoint: &Endpoint, destination: &str) -> Result<(), String> {
    let mut conn = Conn::open(endpoint.addr).await?;
    let request = endpoint.request(
        Method::PUT,
        &format!("/destinations/{destination}"),
        Some(Bytes::from_static(br#"{"paused":true}"#)),
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
