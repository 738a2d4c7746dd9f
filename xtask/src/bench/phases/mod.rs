//! The measurements, in order, each beside its ceiling: one file per
//! phase, sharing the run's state ([`Bench`]), the load generator
//! ([`super::load`]) and the one fake downstream ([`super::downstream`]).

mod backup;
mod cancel;
mod claim_split;
mod cluster_rate;
mod end_to_end;
mod flow_keys;
mod head_of_line;
mod naive_peer;
mod nodes;
mod one_node;
mod operations;
mod paced;
mod scale;
mod slow_downstream;
mod submit;
mod tenants;
mod topics;
mod waiters;
mod wrk_node;

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
use super::report::{self, Figure, Target};
use super::stats::{self, Summary, ms};
use super::store_alone;
use crate::harness::procfs::Machine;
use crate::harness::server::{self, ServerProcess};

/// What the no-op and naive servers answer: tc-server's own answer to a
/// submit, captured at the start of the run.
struct Captured {
    body_file: PathBuf,
    location: String,
}

/// The shared state of one run.
struct Bench {
    plan: Plan,
    /// `--phase`: the phases to run; empty runs them all.
    only: Vec<u8>,
    tc_server: PathBuf,
    /// `--server-cores`: every tc-server runs under `taskset -c` this.
    server_cores: Option<String>,
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
    /// The store alone's submits/s (64 callers, FULL) from phase 1.
    store_submit_rate: Option<f64>,
    tc_e2e_rate: Option<f64>,
}

/// What a run starts from: the binary under test, where results go, and
/// the cores tc-server is pinned to (`--server-cores`).
pub(crate) struct Setup<'a> {
    pub(crate) tc_server: &'a Path,
    pub(crate) out_dir: &'a Path,
    pub(crate) server_cores: Option<String>,
}

/// Runs the phases numbered in `only` (every phase when it is empty), prints
/// the table, writes results.json. Fails only if the harness itself failed
/// somewhere; targets are reported, not asserted.
pub(crate) fn run(plan: Plan, only: &[u8], setup: Setup<'_>) -> Result<(), String> {
    run_with(plan, only, setup, false)
}

/// `--store postgres`: the several-nodes phases alone (see [`nodes`] and
/// [`cluster_rate`]), or those of them in `only`; their results go to
/// results-nodes.json.
pub(crate) fn run_nodes(plan: Plan, only: &[u8], setup: Setup<'_>) -> Result<(), String> {
    run_with(plan, only, setup, true)
}

fn run_with(plan: Plan, only: &[u8], setup: Setup<'_>, nodes: bool) -> Result<(), String> {
    let Setup {
        tc_server,
        out_dir,
        server_cores,
    } = setup;
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
        only: only.to_vec(),
        tc_server,
        server_cores,
        me,
        dir,
        clock: std::time::Instant::now(),
        figures: Vec::new(),
        details: serde_json::Map::new(),
        failures: Vec::new(),
        captured: None,
        idle_submit: None,
        noop_rate: None,
        store_submit_rate: None,
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
        if nodes {
            bench.phase(7, "nodes", Bench::nodes).await;
            bench.phase(15, "cluster rate", Bench::cluster_rate).await;
            return;
        }
        bench.phase(1, "submit", Bench::submit).await;
        bench.phase(2, "end to end", Bench::end_to_end).await;
        bench
            .phase(3, "slow downstream", Bench::slow_downstream)
            .await;
        bench.phase(4, "cancel", Bench::cancel).await;
        bench.phase(5, "scale", Bench::scale).await;
        bench.phase(6, "naive peer", Bench::naive_peer).await;
        bench.phase(8, "operations", Bench::operations).await;
        bench.phase(9, "head of line", Bench::head_of_line).await;
        bench.phase(10, "idle waiters", Bench::idle_waiters).await;
        bench.phase(11, "backup", Bench::backup).await;
        bench.phase(12, "one node", Bench::one_node).await;
        bench.phase(13, "tenants", Bench::tenants).await;
        bench.phase(14, "one node under wrk", Bench::wrk_node).await;
        bench.phase(16, "topics", Bench::topics).await;
        bench
            .phase(17, "paced by the downstream", Bench::paced)
            .await;
        bench.phase(18, "flow keys", Bench::flow_keys).await;
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
            "server_cores": bench.server_cores,
            "cpu_model": machine.cpu_model,
            "mem_total_mib": machine.mem_total_mib,
            "kernel": machine.kernel,
            "load_at_start": machine.load_at_start,
            "load_at_end": Machine::load_now(),
        },
        "seconds": bench.clock.elapsed().as_secs_f64(),
        "plan": format!("{plan:?}"),
        "phases": match (nodes, only) {
            (true, []) => "7, 15".to_owned(),
            (false, []) => "all".to_owned(),
            (_, only) => format!("{only:?}"),
        },
        "figures": bench.figures.iter().map(report::to_json).collect::<Vec<_>>(),
        "details": bench.details,
        "failures": bench.failures,
    });
    let path = out_dir.join(if nodes {
        "results-nodes.json"
    } else {
        "results.json"
    });
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

    /// Runs phase `number` unless `--phase` left it out.
    async fn phase<F>(&mut self, number: u8, name: &str, body: F)
    where
        F: AsyncFnOnce(&mut Bench) -> Result<(), String>,
    {
        if !self.only.is_empty() && !self.only.contains(&number) {
            return;
        }
        let name = format!("{number} {name}");
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
        let mut command = server::tc_server(&self.tc_server, &self.db(name), flags);
        if let Some(cores) = &self.server_cores {
            command = server::pinned(command, cores);
        }
        let process = ServerProcess::start(&format!("tc-server ({name})"), command)?;
        self.progress(&format!(
            "{} listening on {} (pid {})",
            process.name,
            process.addr,
            process.pid()
        ));
        Ok(process)
    }

    /// tc-server with the run's concurrency and `--sync full`: how most
    /// phases run it.
    fn start_tc_full(&self, name: &str) -> Result<ServerProcess, String> {
        let concurrency = self.plan.connections.to_string();
        self.start_tc(name, &["--concurrency", &concurrency, "--sync", "full"])
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
        let run_id = self.clock.elapsed().as_nanos();
        self.submit_load(endpoint, url, self.plan.warmup, format!("warm-{run_id}"))
            .await?;
        let outcome = self
            .submit_load(endpoint, url, self.plan.window, format!("load-{run_id}"))
            .await?;
        self.report_load(what, &outcome);
        Ok(outcome)
    }

    /// tc-server's submit figure, taken honestly: the first window on the
    /// fresh database (cold, its own figure), a warm-up that is not
    /// counted, then `steady_windows` measured windows.
    async fn submit_windows(
        &self,
        what: &str,
        endpoint: &Endpoint,
        url: &str,
    ) -> Result<SubmitWindows, String> {
        let plan = self.plan;
        let run_id = self.clock.elapsed().as_nanos();
        let cold = self
            .submit_load(endpoint, url, plan.cold_window, format!("cold-{run_id}"))
            .await?;
        self.report_load(&format!("{what}, cold first window"), &cold);
        self.submit_load(endpoint, url, plan.warmup, format!("warm-{run_id}"))
            .await?;
        let mut steady = Vec::with_capacity(plan.steady_windows);
        for i in 0..plan.steady_windows {
            let outcome = self
                .submit_load(endpoint, url, plan.window, format!("load-{run_id}-{i}"))
                .await?;
            self.report_load(&format!("{what}, window {}", i + 1), &outcome);
            steady.push(outcome);
        }
        Ok(SubmitWindows { cold, steady })
    }

    /// One window of closed-loop submits over the run's connections, each
    /// with a key under `prefix`.
    async fn submit_load(
        &self,
        endpoint: &Endpoint,
        url: &str,
        window: Duration,
        prefix: String,
    ) -> Result<LoadResult, String> {
        load::run(
            endpoint,
            Load {
                connections: self.plan.connections,
                max_requests: self.plan.max_requests,
                max_duration: window,
            },
            load::submits(url.to_owned(), prefix, ""),
            load::created,
        )
        .await
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

    /// Submits `n` tasks as fast as 64 connections go, bounded by patience.
    async fn submit_batch(
        &self,
        endpoint: &Endpoint,
        url: &str,
        prefix: &str,
        n: u64,
    ) -> Result<LoadResult, String> {
        self.submit_batch_within(endpoint, url, prefix, n, self.plan.patience)
            .await
    }

    /// [`Bench::submit_batch`] bounded by `bound` instead of the plan's
    /// patience.
    async fn submit_batch_within(
        &self,
        endpoint: &Endpoint,
        url: &str,
        prefix: &str,
        n: u64,
        bound: Duration,
    ) -> Result<LoadResult, String> {
        load::run(
            endpoint,
            Load {
                connections: self.plan.connections,
                max_requests: n,
                max_duration: bound,
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

/// The windows of tc-server's submit figure.
struct SubmitWindows {
    cold: LoadResult,
    steady: Vec<LoadResult>,
}

impl SubmitWindows {
    /// The median steady window's rate: one disturbed window (another
    /// process on the machine) does not move it.
    fn median_rate(&self) -> f64 {
        let mut rates: Vec<f64> = self.steady.iter().map(LoadResult::per_second).collect();
        rates.sort_by(f64::total_cmp);
        rates.get(rates.len() / 2).copied().unwrap_or(0.0)
    }

    fn pooled(&self) -> LoadResult {
        LoadResult::pooled(&self.steady)
    }

    fn json(&self) -> Value {
        json!({
            "cold": load_json(&self.cold),
            "steady": self.steady.iter().map(load_json).collect::<Vec<_>>(),
        })
    }
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

/// A destination's `(pending, in_flight)` from `GET /destinations/{it}`,
/// with `token` as the bearer where the server has one; one without tasks
/// yet (404) has none of either.
async fn counts_of(
    conn: &mut Conn,
    endpoint: &Endpoint,
    destination: &str,
    token: Option<&str>,
) -> Result<(u64, u64), String> {
    let path = format!("/destinations/{destination}");
    let mut request = endpoint.request(Method::GET, &path, None)?;
    if let Some(token) = token {
        let bearer = HeaderValue::try_from(format!("Bearer {token}"))
            .map_err(|e| format!("authorization header: {e}"))?;
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, bearer);
    }
    let reply = conn.send(request).await?;
    match reply.status {
        StatusCode::NOT_FOUND => return Ok((0, 0)),
        StatusCode::OK => {}
        status => return Err(format!("GET {path}: status {status}")),
    }
    let view: Value =
        serde_json::from_slice(&reply.body).map_err(|e| format!("GET {path}: {e}"))?;
    let count = |field: &str| {
        view[field]
            .as_u64()
            .ok_or_else(|| format!("GET {path}: no {field} in {view}"))
    };
    Ok((count("pending")?, count("in_flight")?))
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
