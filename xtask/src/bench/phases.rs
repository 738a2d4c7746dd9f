//! The six measurements, in order, each beside its ceiling.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, LOCATION};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::Plan;
use super::downstream::{HangingDownstream, HttpDownstream};
use super::load::{self, Conn, Endpoint, Load, LoadResult, MakeRequest};
use super::procfs::Machine;
use super::report::{self, Figure, Target};
use super::server::{self, ServerProcess};
use super::stats::{self, Summary, ms};
use super::store;

/// What the no-op and naive servers answer: tc-server's own answer to a
/// submit, captured at the start of the run.
struct Captured {
    body_file: PathBuf,
    location: String,
}

/// The shared state of one run.
struct Bench {
    plan: Plan,
    tc_server: PathBuf,
    me: PathBuf,
    dir: tempfile::TempDir,
    clock: std::time::Instant,
    figures: Vec<Figure>,
    details: serde_json::Map<String, Value>,
    failures: Vec<String>,
    captured: Option<Captured>,
    /// Phase 1's figures that later phases compare with.
    idle_submit: Option<(f64, Summary)>,
    noop_rate: Option<f64>,
    tc_e2e_rate: Option<f64>,
}

/// Runs every phase, prints the table, writes results.json. Fails only if
/// the harness itself failed somewhere; targets are reported, not asserted.
pub(crate) fn run(plan: Plan, tc_server: &Path, out_dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let machine = Machine::read();
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    // Private copies of both binaries: another build in the shared target
    // directory may replace them while the run goes on.
    let copy = |from: &Path, name: &str| {
        let to = dir.path().join(name);
        std::fs::copy(from, &to)
            .map(|_| to)
            .map_err(|e| format!("copying {} for the run: {e}", from.display()))
    };
    let tc_server = copy(tc_server, "tc-server")?;
    let me = copy(Path::new("/proc/self/exe"), "xtask-bench")?;
    let mut bench = Bench {
        plan,
        tc_server,
        me,
        dir,
        clock: std::time::Instant::now(),
        figures: Vec::new(),
        details: serde_json::Map::new(),
        failures: Vec::new(),
        captured: None,
        idle_submit: None,
        noop_rate: None,
        tc_e2e_rate: None,
    };
    bench.progress(&format!(
        "{} run on {} × {}, {} MiB, load {}; databases in {}",
        if plan.quick { "quick" } else { "full" },
        machine.cpus,
        machine.cpu_model,
        machine.mem_total_mib,
        machine.load_at_start,
        bench.dir.path().display()
    ));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    runtime.block_on(async {
        bench.phase("1 submit", Bench::submit).await;
        bench.phase("2 end to end", Bench::end_to_end).await;
        bench
            .phase("3 slow downstream", Bench::slow_downstream)
            .await;
        bench.phase("4 cancel", Bench::cancel).await;
        bench.phase("5 scale", Bench::scale).await;
        bench.phase("6 naive peer", Bench::naive_peer).await;
    });
    drop(runtime);

    let table = report::table(&bench.figures);
    println!("\n{table}");
    for f in bench.figures.iter().filter(|f| !f.note.is_empty()) {
        println!("  {}: {}", f.name, f.note);
    }
    let results = json!({
        "mode": if plan.quick { "quick" } else { "full" },
        "machine": {
            "cpus": machine.cpus,
            "cpu_model": machine.cpu_model,
            "mem_total_mib": machine.mem_total_mib,
            "kernel": machine.kernel,
            "load_at_start": machine.load_at_start,
            "load_at_end": Machine::load_now(),
        },
        "seconds": bench.clock.elapsed().as_secs_f64(),
        "plan": format!("{plan:?}"),
        "figures": bench.figures.iter().map(report::to_json).collect::<Vec<_>>(),
        "details": bench.details,
        "failures": bench.failures,
    });
    let path = out_dir.join("results.json");
    let text = serde_json::to_string_pretty(&results).map_err(|e| format!("results: {e}"))?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    println!(
        "\nwrote {} ({:.0} s, load {} → {})",
        path.display(),
        bench.clock.elapsed().as_secs_f64(),
        machine.load_at_start,
        Machine::load_now()
    );
    if bench.failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} measurement(s) failed:\n  {}",
            bench.failures.len(),
            bench.failures.join("\n  ")
        ))
    }
}

impl Bench {
    fn progress(&self, message: &str) {
        eprintln!(
            "[bench {:>6.1}s] {message}",
            self.clock.elapsed().as_secs_f64()
        );
    }

    async fn phase<F>(&mut self, name: &str, body: F)
    where
        F: AsyncFnOnce(&mut Bench) -> Result<(), String>,
    {
        self.progress(&format!("== {name}"));
        if let Err(e) = body(self).await {
            self.progress(&format!("{name} FAILED: {e}"));
            self.failures.push(format!("{name}: {e}"));
        }
    }

    fn detail(&mut self, key: &str, value: Value) {
        self.details.insert(key.to_owned(), value);
    }

    fn push(&mut self, figure: Figure) {
        self.figures.push(figure);
    }

    fn fail(&mut self, key: &str, name: &str, unit: &'static str, why: String) {
        self.failures.push(format!("{name}: {why}"));
        self.push(Figure::failed(key, name, unit, why));
    }

    fn db(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.db"))
    }

    fn start_tc(&self, name: &str, flags: &[&str]) -> Result<ServerProcess, String> {
        let command = server::tc_server(&self.tc_server, &self.db(name), flags);
        let process = ServerProcess::start(&format!("tc-server ({name})"), command)?;
        self.progress(&format!(
            "{} listening on {} (pid {})",
            process.name,
            process.addr,
            process.pid()
        ));
        Ok(process)
    }

    fn start_peer(&self, kind: &str) -> Result<ServerProcess, String> {
        let captured = self
            .captured
            .as_ref()
            .ok_or("no tc-server response was captured for the reference servers")?;
        let mut command = std::process::Command::new(&self.me);
        command
            .args(["bench", "--peer", kind, "--response-body"])
            .arg(&captured.body_file)
            .args(["--location", &captured.location]);
        let process = ServerProcess::start(&format!("{kind} peer"), command)?;
        self.progress(&format!(
            "{} listening on {} (pid {})",
            process.name,
            process.addr,
            process.pid()
        ));
        Ok(process)
    }

    /// A warm-up then a measured window of closed-loop submits.
    async fn submit_window(
        &self,
        what: &str,
        endpoint: &Endpoint,
        url: &str,
    ) -> Result<LoadResult, String> {
        let plan = self.plan;
        let run_id = self.clock.elapsed().as_nanos();
        let load = |window| Load {
            connections: plan.connections,
            max_requests: plan.max_requests,
            max_duration: window,
        };
        load::run(
            endpoint,
            load(plan.warmup),
            load::submits(url.to_owned(), format!("warm-{run_id}"), ""),
            load::created,
        )
        .await?;
        let outcome = load::run(
            endpoint,
            load(plan.window),
            load::submits(url.to_owned(), format!("load-{run_id}"), ""),
            load::created,
        )
        .await?;
        self.report_load(what, &outcome);
        Ok(outcome)
    }

    fn report_load(&self, what: &str, outcome: &LoadResult) {
        let summary = stats::summarize(outcome.latencies.clone());
        let latency = summary.map_or(String::new(), |s| {
            format!(
                ", p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms",
                ms(s.p50),
                ms(s.p99),
                ms(s.p999)
            )
        });
        let problems = outcome.problems();
        self.progress(&format!(
            "{what}: {} in {:.1} s = {:.0}/s{latency}{}",
            outcome.ok,
            outcome.elapsed.as_secs_f64(),
            outcome.per_second(),
            if problems.is_empty() {
                String::new()
            } else {
                format!(" — {problems}")
            }
        ));
    }

    fn server_warnings(&self, process: &ServerProcess) -> String {
        match process.warnings() {
            (0, _) => String::new(),
            (n, first) => {
                let note = format!(
                    "{} logged {n} warnings/errors; first: {}",
                    process.name,
                    first.unwrap_or_default()
                );
                self.progress(&note);
                note
            }
        }
    }

    // ---- 1 -------------------------------------------------------------

    async fn submit(&mut self) -> Result<(), String> {
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let tc = self.start_tc(
            "submit",
            &[
                "--concurrency",
                &self.plan.connections.to_string(),
                "--sync",
                "full",
            ],
        )?;
        let endpoint = Endpoint::new(tc.addr);
        self.captured = Some(self.capture(&endpoint, &down.url()).await?);
        let measured = self
            .submit_window("tc-server submits", &endpoint, &down.url())
            .await;
        // Threads show how many OS threads the request path parks (a
        // blocking-pool thread per waiting call, say).
        let threads = tc.threads().ok();
        if let Some(threads) = threads {
            self.progress(&format!("tc-server has {threads} threads after the window"));
        }
        let warnings = self.server_warnings(&tc);
        tc.stop();
        let measured = measured?;

        let noop = self.start_peer("noop")?;
        let ceiling = self
            .submit_window("no-op server", &Endpoint::new(noop.addr), &down.url())
            .await;
        noop.stop();
        let ceiling = ceiling?;

        self.progress("store alone: 64 callers, synchronous=FULL");
        let alone = store::submit_ceiling(
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
        let rate = measured.per_second();
        self.idle_submit = Some((rate, tc_lat));
        self.noop_rate = Some(ceiling.per_second());
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
            .note(note),
        );
        self.push(
            Figure::new(
                "submit_vs_store",
                "1 submits/s vs the store alone",
                rate,
                "/s",
            )
            .beside(alone.per_second(), "SqliteStore, 64 callers"),
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
    async fn capture(&self, endpoint: &Endpoint, url: &str) -> Result<Captured, String> {
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

    async fn end_to_end(&mut self) -> Result<(), String> {
        let n = self.plan.e2e_tasks;
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let tc = self.start_tc(
            "e2e",
            &[
                "--concurrency",
                &self.plan.connections.to_string(),
                "--sync",
                "full",
            ],
        )?;
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
        tokio::task::spawn_blocking(move || store::fill(&path, n, &url, "wa", &|_| {}))
            .await
            .map_err(|e| format!("fill: {e}"))??;
        let alone = store::claim_complete_cost(
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

    /// Submits `n` tasks as fast as 64 connections go, bounded by patience.
    async fn submit_batch(
        &self,
        endpoint: &Endpoint,
        url: &str,
        prefix: &str,
        n: u64,
    ) -> Result<LoadResult, String> {
        load::run(
            endpoint,
            Load {
                connections: self.plan.connections,
                max_requests: n,
                max_duration: self.plan.patience,
            },
            load::submits(
                url.to_owned(),
                format!("{prefix}-{}", self.clock.elapsed().as_nanos()),
                "",
            ),
            load::created,
        )
        .await
    }

    /// Polls `/metrics` until `n` tasks are terminal. Returns the first
    /// poll (its instant and terminal count) and the instant all were.
    async fn wait_terminal(
        &self,
        endpoint: &Endpoint,
        n: u64,
        until: Instant,
    ) -> Result<((Instant, u64), Instant), String> {
        const POLL: Duration = Duration::from_millis(10);
        let mut conn = Conn::open(endpoint.addr).await?;
        let mut last_report = Instant::now();
        let mut first = None;
        loop {
            let polled = Instant::now();
            let counts = task_counts_of(&mut conn, endpoint).await?;
            let terminal = terminal(&counts);
            let first = *first.get_or_insert((polled, terminal));
            if terminal >= n {
                return Ok((first, Instant::now()));
            }
            if Instant::now() >= until {
                return Err(format!(
                    "only {terminal} of {n} tasks terminal in time: {counts:?}"
                ));
            }
            if last_report.elapsed() >= Duration::from_secs(5) {
                self.progress(&format!("  {terminal}/{n} terminal"));
                last_report = Instant::now();
            }
            tokio::time::sleep(POLL).await;
        }
    }

    // ---- 3 -------------------------------------------------------------

    async fn slow_downstream(&mut self) -> Result<(), String> {
        let Some((_, idle)) = self.idle_submit else {
            return Err("needs phase 1's idle p99".into());
        };
        let down = HttpDownstream::start(self.plan.slow_delay).await?;
        let tc = self.start_tc(
            "slow",
            &[
                "--concurrency",
                &self.plan.connections.to_string(),
                "--sync",
                "full",
            ],
        )?;
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

    async fn cancel(&mut self) -> Result<(), String> {
        let hang = HangingDownstream::start().await?;
        let tc = self.start_tc(
            "cancel",
            &[
                "--concurrency",
                &self.plan.connections.to_string(),
                "--sync",
                "full",
            ],
        )?;
        let endpoint = Endpoint::new(tc.addr);
        let mut conn = Conn::open(endpoint.addr).await?;
        let deadline = Instant::now() + self.plan.patience;
        let mut to_close = Vec::new();
        let mut to_answer = Vec::new();
        let mut misses = Vec::new();
        for i in 0..self.plan.cancels as u64 {
            if Instant::now() >= deadline || misses.len() >= 5 {
                break;
            }
            match cancel_one(&mut conn, &endpoint, &hang, i).await {
                Ok((closed, answered)) => {
                    to_close.push(closed);
                    to_answer.push(answered);
                }
                Err(e) => misses.push(e),
            }
        }
        let warnings = self.server_warnings(&tc);
        tc.stop();
        let count = to_close.len();
        let (Some(closed), Some(answered)) =
            (stats::summarize(to_close), stats::summarize(to_answer))
        else {
            let why = misses
                .first()
                .cloned()
                .unwrap_or_else(|| "no cancel ran".into());
            self.fail("cancel_p99", "4 cancel in flight p99", "ms", why);
            return Ok(());
        };
        self.progress(&format!(
            "{count} cancels: to the downstream's close p50 {:.2} ms p99 {:.2} ms max {:.2} ms; \
             to the 200 p99 {:.2} ms; {} failed",
            ms(closed.p50),
            ms(closed.p99),
            ms(closed.max),
            ms(answered.p99),
            misses.len()
        ));
        let note = if misses.is_empty() {
            warnings
        } else {
            format!(
                "{} of {} failed, first: {}. {warnings}",
                misses.len(),
                count + misses.len(),
                misses[0]
            )
        };
        if !misses.is_empty() {
            self.failures.push(format!("4 cancel: {note}"));
        }
        self.push(Figure::new(
            "cancel_p50",
            &format!("4 cancel → downstream close p50 ({count})"),
            ms(closed.p50),
            "ms",
        ));
        self.push(
            Figure::new(
                "cancel_p99",
                &format!("4 cancel → downstream close p99 ({count})"),
                ms(closed.p99),
                "ms",
            )
            .target(Target::AtMost(20.0))
            .note(note),
        );
        self.detail(
            "cancel",
            json!({
                "cancels": count,
                "failed": misses,
                "close_ms": summary_json(&closed),
                "cancel_reply_ms": summary_json(&answered),
            }),
        );
        Ok(())
    }

    // ---- 5 -------------------------------------------------------------

    async fn scale(&mut self) -> Result<(), String> {
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
                store::fill(&path, n, &url, "fill", &|done| {
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
            let cost = store::claim_complete_cost(
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

    async fn naive_peer(&mut self) -> Result<(), String> {
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

/// Submits a task to the hanging downstream, waits until its call arrived,
/// cancels it: (cancel sent → connection closed, cancel sent → 200).
async fn cancel_one(
    conn: &mut Conn,
    endpoint: &Endpoint,
    hang: &HangingDownstream,
    i: u64,
) -> Result<(Duration, Duration), String> {
    const WAIT: Duration = Duration::from_secs(10);
    let body = load::submit_body(
        &hang.url(),
        "cancel",
        i,
        r#","max_attempts":1,"timeout_ms":600000"#,
    );
    let reply = conn
        .send(endpoint.request(Method::POST, "/tasks", Some(body))?)
        .await?;
    if reply.status != StatusCode::CREATED {
        return Err(format!("submit: status {}", reply.status));
    }
    let view: Value =
        serde_json::from_slice(&reply.body).map_err(|e| format!("submit answer: {e}"))?;
    let id = view["id"]
        .as_str()
        .ok_or("submit answer has no id")?
        .to_owned();
    if hang.arrived(&id, Instant::now() + WAIT).await.is_none() {
        return Err(format!("task {id}: call never arrived"));
    }
    let sent = Instant::now();
    let reply = conn
        .send(endpoint.request(
            Method::POST,
            &format!("/tasks/{id}/cancel"),
            Some(Bytes::new()),
        )?)
        .await?;
    let answered = Instant::now() - sent;
    let state: Value = serde_json::from_slice(&reply.body).unwrap_or_default();
    if reply.status != StatusCode::OK || state["state"] != "canceled" {
        return Err(format!(
            "cancel {id}: status {} {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        ));
    }
    match hang.closed(&id, sent + WAIT).await {
        Some(at) => Ok((at.saturating_duration_since(sent), answered)),
        None => Err(format!("task {id}: connection not closed within {WAIT:?}")),
    }
}

/// What the worker sends downstream, sent straight from the bench: the
/// ceiling of end to end.
fn downstream_calls() -> MakeRequest {
    Arc::new(|endpoint: &Endpoint, i| {
        let mut request = endpoint.request(
            Method::POST,
            "/hook",
            Some(Bytes::from(format!(r#"{{"n":{i}}}"#))),
        )?;
        let headers = request.headers_mut();
        let key = HeaderValue::try_from(format!("e2e-{i}")).map_err(|e| e.to_string())?;
        headers.insert("idempotency-key", key);
        headers.insert(
            "x-task-id",
            HeaderValue::from_static("01890000-0000-7000-8000-000000000000"),
        );
        headers.insert("x-task-attempt", HeaderValue::from_static("1"));
        Ok(request)
    })
}

fn submits_with_many_attempts(url: String) -> MakeRequest {
    load::submits(url, "rss".into(), r#","max_attempts":100"#)
}

/// A loopback port nothing listens on (bound, then released).
async fn closed_port() -> Result<SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    listener.local_addr().map_err(|e| format!("addr: {e}"))
}

async fn task_counts_of(
    conn: &mut Conn,
    endpoint: &Endpoint,
) -> Result<BTreeMap<String, u64>, String> {
    let reply = conn
        .send(endpoint.request(Method::GET, "/metrics", None)?)
        .await?;
    if reply.status != StatusCode::OK {
        return Err(format!("/metrics: status {}", reply.status));
    }
    Ok(task_counts(&String::from_utf8_lossy(&reply.body)))
}

/// `taskcenter_tasks{state="…"} N` lines of the metrics text.
pub(crate) fn task_counts(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("taskcenter_tasks{")?;
            let (labels, value) = rest.split_once('}')?;
            let state = labels
                .split(',')
                .find_map(|l| l.trim().strip_prefix("state=\""))?
                .strip_suffix('"')?;
            let count = value.trim().parse::<f64>().ok()?;
            Some((state.to_owned(), count.max(0.0) as u64))
        })
        .collect()
}

fn terminal(counts: &BTreeMap<String, u64>) -> u64 {
    ["success", "failed", "canceled"]
        .iter()
        .map(|s| counts.get(*s).copied().unwrap_or(0))
        .sum()
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn summary_json(s: &Summary) -> Value {
    json!({
        "count": s.count,
        "p50": ms(s.p50),
        "p99": ms(s.p99),
        "p999": ms(s.p999),
        "max": ms(s.max),
    })
}

fn load_json(outcome: &LoadResult) -> Value {
    json!({
        "ok": outcome.ok,
        "bad_status": outcome.bad_status,
        "errors": outcome.errors,
        "seconds": outcome.elapsed.as_secs_f64(),
        "per_second": outcome.per_second(),
        "latency_ms": stats::summarize(outcome.latencies.clone()).map(|s| summary_json(&s)),
        "first_problem": outcome.first_problem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_counts_from_metrics() {
        let text = "# HELP taskcenter_tasks Tasks in each state\n\
                    # TYPE taskcenter_tasks gauge\n\
                    taskcenter_tasks{state=\"pending\"} 12\n\
                    taskcenter_tasks{state=\"success\"} 3\n\
                    taskcenter_tasks{state=\"failed\"} 1\n\
                    taskcenter_tasks_other{state=\"success\"} 99\n\
                    taskcenter_submits_total{result=\"created\"} 16\n\
                    taskcenter_tasks{state=\"canceled\"} 2.0\n";
        let counts = task_counts(text);
        assert_eq!(counts.len(), 4, "{counts:?}");
        assert_eq!(counts["pending"], 12);
        assert_eq!(counts["canceled"], 2);
        assert_eq!(terminal(&counts), 6);
        assert_eq!(terminal(&BTreeMap::new()), 0);
    }

    #[test]
    fn thousands_separators() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (100_000, "100,000"),
            (1_000_000, "1,000,000"),
        ] {
            assert_eq!(thousands(n), want);
        }
    }
}
