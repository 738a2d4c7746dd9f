//! Phase 12, one node: one tc-server on SQLite as its users meet
//! it, every figure a ratio within this run.
//!
//! - **cold**: a new server loaded at once; its first window's submits/s
//!   beside the same server's steady windows.
//! - **end to end**: windows of submits with the worker on, each followed by
//!   a wait until every task is terminal; their rate is the baseline of the
//!   drain. The writer thread's CPU (`/proc/<pid>/task/*`, the thread named
//!   `tc-store-writer`) over those windows, per task, and the submit p99.
//! - **drain**: `node_backlog` tasks queued (batches of 1000) while their
//!   destination is paused, then resumed: the drain's rate beside the end to
//!   end one.
//! - **random keys**: batches of 1000 tasks with random UUIDv4 keys into a
//!   file already holding `big_file` tasks (scheduled a day out, so the
//!   worker has nothing to claim), beside the same batches into a new file.

use super::*;
use crate::harness::procfs::{self, ThreadCpu};

/// The writer thread's name (`crates/tc-store/src/writer.rs`); Linux keeps
/// 15 bytes of a thread name, and this one fits.
const WRITER_THREAD: &str = "tc-store-writer";
/// The checkpointer thread's name (`crates/tc-store/src/checkpointer.rs`),
/// which copies the WAL back beside the writer.
const CHECKPOINTER_THREAD: &str = "tc-store-ckpt";
/// Tasks per batch submit (the API's largest batch).
pub(super) const BATCH: u64 = 1000;
/// Connections of the batch loads, as the issue's `wrk -c8`.
const BATCH_CONNECTIONS: usize = 8;

/// `ns` of CPU spread over `tasks`, µs a task.
pub(super) fn us_per_task(ns: u64, tasks: u64) -> f64 {
    ns as f64 / 1000.0 / tasks.max(1) as f64
}

/// `ns` of CPU spent over `wall`, in cores (1.0: one core all the time).
fn cores(ns: u64, wall: Duration) -> f64 {
    ns as f64 / wall.as_nanos().max(1) as f64
}

/// CPU time of the server's threads at one instant.
pub(super) struct CpuSnapshot(Vec<ThreadCpu>);

impl CpuSnapshot {
    pub(super) fn take(pid: u32) -> Result<CpuSnapshot, String> {
        let threads = procfs::thread_cpu(pid)?;
        if !threads.iter().any(|t| t.name == WRITER_THREAD) {
            return Err(format!(
                "tc-server (pid {pid}) has no thread {WRITER_THREAD:?}"
            ));
        }
        Ok(CpuSnapshot(threads))
    }

    /// CPU spent since `earlier`: the writer thread's and the whole
    /// process's, ns, and per thread name (threads of one name summed).
    pub(super) fn since(&self, earlier: &CpuSnapshot) -> CpuSpent {
        let before = |t: &ThreadCpu| {
            earlier
                .0
                .iter()
                .find(|e| e.tid == t.tid)
                .map_or(0, |e| e.cpu_ns)
        };
        let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
        for t in &self.0 {
            *by_name.entry(t.name.clone()).or_default() += t.cpu_ns.saturating_sub(before(t));
        }
        CpuSpent {
            writer_ns: by_name.get(WRITER_THREAD).copied().unwrap_or(0),
            process_ns: by_name.values().sum(),
            by_name,
        }
    }
}

/// CPU spent between two snapshots.
#[derive(Debug, Clone, Default)]
pub(super) struct CpuSpent {
    pub(super) writer_ns: u64,
    process_ns: u64,
    by_name: BTreeMap<String, u64>,
}

impl CpuSpent {
    /// The CPU of the threads named `name` per task of `tasks`, µs.
    pub(super) fn thread_us_per_task(&self, name: &str, tasks: u64) -> f64 {
        us_per_task(self.by_name.get(name).copied().unwrap_or(0), tasks)
    }

    pub(super) fn add(&mut self, other: &CpuSpent) {
        self.writer_ns += other.writer_ns;
        self.process_ns += other.process_ns;
        for (name, ns) in &other.by_name {
            *self.by_name.entry(name.clone()).or_default() += ns;
        }
    }

    pub(super) fn json(&self, tasks: u64) -> Value {
        let per_task = |ns: u64| us_per_task(ns, tasks);
        json!({
            "writer_us_per_task": per_task(self.writer_ns),
            "process_us_per_task": per_task(self.process_ns),
            "us_per_task_by_thread": self
                .by_name
                .iter()
                .map(|(name, ns)| (name.clone(), json!(per_task(*ns))))
                .collect::<serde_json::Map<_, _>>(),
        })
    }
}

/// One end-to-end window: submits for a window, then until all terminal.
struct E2eWindow {
    load: LoadResult,
    elapsed: Duration,
    cpu: CpuSpent,
}

impl E2eWindow {
    fn rate(&self) -> f64 {
        stats::rate(self.load.ok, self.elapsed)
    }
}

/// The median of some rates (the middle one; the upper middle of an even
/// count), 0 for none.
fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates.get(rates.len() / 2).copied().unwrap_or(0.0)
}

/// A random version 4 UUID, as clients make idempotency keys.
fn uuid_v4() -> String {
    let mut b = fastrand::u128(..).to_be_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|byte| format!("{byte:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// `POST /tasks/batch` with [`BATCH`] tasks to `url`, each keyed by a random
/// UUIDv4.
fn random_key_batches(url: String) -> MakeRequest {
    Arc::new(move |endpoint: &Endpoint, i| {
        let mut body = String::with_capacity(BATCH as usize * (url.len() + 90));
        body.push_str(r#"{"tasks":["#);
        for j in 0..BATCH {
            if j > 0 {
                body.push(',');
            }
            body.push_str(&format!(
                r#"{{"url":"{url}","json":{{"n":{}}},"idempotency_key":"{}"}}"#,
                i * BATCH + j,
                uuid_v4()
            ));
        }
        body.push_str("]}");
        endpoint.request(Method::POST, "/tasks/batch", Some(Bytes::from(body)))
    })
}

/// `POST path` with no body, expecting 2xx.
pub(super) async fn post(endpoint: &Endpoint, path: &str) -> Result<(), String> {
    let mut conn = Conn::open(endpoint.addr).await?;
    let reply = conn
        .send(endpoint.request(Method::POST, path, None)?)
        .await?;
    if reply.status.is_success() {
        Ok(())
    } else {
        Err(format!(
            "POST {path}: status {}: {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        ))
    }
}

impl Bench {
    pub(super) async fn one_node(&mut self) -> Result<(), String> {
        let plan = self.plan;
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let url = down.url();
        let tc = self.start_tc_full("node")?;
        let endpoint = Endpoint::new(tc.addr);
        let run_id = self.clock.elapsed().as_nanos();

        // Cold: the load starts the moment the server listens.
        let cold = self
            .submit_load(&endpoint, &url, plan.cold_window, format!("nc-{run_id}"))
            .await?;
        self.report_load("  cold: a new server, loaded at once", &cold);
        let mut submitted = cold.ok;
        self.wait_terminal(&endpoint, submitted, Instant::now() + plan.patience)
            .await?;

        let mut windows = Vec::with_capacity(plan.node_windows);
        for i in 0..plan.node_windows {
            let before = CpuSnapshot::take(tc.pid())?;
            let started = Instant::now();
            let load = self
                .submit_load(
                    &endpoint,
                    &url,
                    plan.node_window,
                    format!("ns-{run_id}-{i}"),
                )
                .await?;
            submitted += load.ok;
            let (_, done) = self
                .wait_terminal(&endpoint, submitted, Instant::now() + plan.patience)
                .await?;
            let cpu = CpuSnapshot::take(tc.pid())?.since(&before);
            let window = E2eWindow {
                load,
                elapsed: done - started,
                cpu,
            };
            self.report_load(
                &format!("  end to end window {}: submits", i + 1),
                &window.load,
            );
            self.progress(&format!(
                "  end to end window {}: {} tasks terminal in {:.2} s = {:.0}/s; writer \
                 thread {:.1} µs/task ({:.0}% of a core), checkpointer {:.1}, process {:.1} \
                 µs/task",
                i + 1,
                window.load.ok,
                window.elapsed.as_secs_f64(),
                window.rate(),
                us_per_task(window.cpu.writer_ns, window.load.ok),
                100.0 * cores(window.cpu.writer_ns, window.elapsed),
                window
                    .cpu
                    .thread_us_per_task(CHECKPOINTER_THREAD, window.load.ok),
                us_per_task(window.cpu.process_ns, window.load.ok),
            ));
            windows.push(window);
        }
        let e2e_rate = median(windows.iter().map(E2eWindow::rate).collect());
        let steady_submit = median(windows.iter().map(|w| w.load.per_second()).collect());
        let mut steady_cpu = CpuSpent::default();
        let mut steady_tasks = 0;
        let mut steady_wall = Duration::ZERO;
        for w in &windows {
            steady_cpu.add(&w.cpu);
            steady_tasks += w.load.ok;
            steady_wall += w.elapsed;
        }
        let pooled =
            LoadResult::pooled(&windows.iter().map(|w| w.load.clone()).collect::<Vec<_>>());
        let latency = stats::summarize(pooled.latencies.clone())
            .ok_or_else(|| format!("no steady submit was answered 201: {}", pooled.problems()))?;

        // The same server paced at half its steady rate: the latency a
        // submit meets below saturation, where the closed loop's 64 clients
        // no longer queue behind one another (at the steady rate R their
        // mean wait is 64 / R by Little's law whatever the server does).
        let paced_rate = steady_submit / 2.0;
        let paced = load::run_paced(
            &endpoint,
            Load {
                connections: plan.connections,
                max_requests: plan.max_requests,
                max_duration: plan.node_window,
            },
            paced_rate,
            load::submits(url.clone(), format!("np-{run_id}"), ""),
            load::created,
        )
        .await?;
        self.report_load("  paced at half the steady rate: submits", &paced);
        submitted += paced.ok;
        self.wait_terminal(&endpoint, submitted, Instant::now() + plan.patience)
            .await?;
        let paced_latency = stats::summarize(paced.latencies.clone())
            .ok_or_else(|| format!("no paced submit was answered 201: {}", paced.problems()))?;
        let paced_sent = stats::summarize(paced.sent_latencies.clone())
            .ok_or_else(|| format!("no paced submit was answered 201: {}", paced.problems()))?;
        self.progress(&format!(
            "  paced, from when each went out: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms",
            ms(paced_sent.p50),
            ms(paced_sent.p99),
            ms(paced_sent.p999)
        ));

        // Drain: a backlog queued behind a paused destination, then resumed.
        let destination = down.destination();
        let queued = self
            .queue_paused_backlog(
                &endpoint,
                &url,
                &destination,
                "  backlog queued (batches of 1000)",
            )
            .await?;
        let backlog = queued.ok * BATCH;
        let before = CpuSnapshot::take(tc.pid())?;
        let started = Instant::now();
        post(&endpoint, &format!("/destinations/{destination}/resume")).await?;
        let (_, done) = self
            .wait_terminal(&endpoint, submitted + backlog, started + plan.patience)
            .await?;
        let drain_cpu = CpuSnapshot::take(tc.pid())?.since(&before);
        let drain_rate = stats::rate(backlog, done - started);
        self.progress(&format!(
            "  drained {backlog} queued tasks in {:.2} s = {drain_rate:.0}/s (end to end \
             {e2e_rate:.0}/s); writer thread {:.1} µs/task ({:.0}% of a core)",
            (done - started).as_secs_f64(),
            us_per_task(drain_cpu.writer_ns, backlog),
            100.0 * cores(drain_cpu.writer_ns, done - started)
        ));
        let warnings = self.server_warnings(&tc);
        tc.stop();

        let (small, big) = self.random_key_batches(&down).await?;
        let batch_rate = |r: &LoadResult| r.per_second() * BATCH as f64;

        let windows_note = format!(
            "median of {} windows of {:.0} s after the cold one. {warnings}",
            windows.len(),
            plan.node_window.as_secs_f64()
        );
        self.push(
            Figure::new(
                "node_drain",
                &format!("12 drain of {} queued tasks/s", thousands(backlog)),
                drain_rate,
                "/s",
            )
            .beside(e2e_rate, "end to end, same server")
            .target(Target::RatioAtLeast(1.0))
            .note(format!(
                "queued while the destination was paused, then resumed; {windows_note}"
            )),
        );
        self.push(
            Figure::new(
                "node_cold",
                &format!(
                    "12 submits/s, first {:.0} s of a new server",
                    plan.cold_window.as_secs_f64()
                ),
                cold.per_second(),
                "/s",
            )
            .beside(steady_submit, "its steady end-to-end windows")
            .target(Target::RatioAtLeast(0.8))
            .note("loaded at once, worker on; the steady windows' submits/s is their median"),
        );
        self.push(
            Figure::new(
                "node_writer_cpu",
                "12 writer-thread CPU per task, end to end",
                us_per_task(steady_cpu.writer_ns, steady_tasks),
                "µs",
            )
            .beside(
                us_per_task(steady_cpu.process_ns, steady_tasks),
                "the whole process",
            )
            .target(Target::AtMost(30.0))
            .note(format!(
                "{WRITER_THREAD} thread's user+system time over the steady windows (submit, \
                 claim, complete); beside it the checkpointer ({CHECKPOINTER_THREAD}) {:.1} µs. \
                 Over those windows the writer was on a CPU {:.0}% of the time, the whole \
                 process {:.2} cores: a writer short of 100% is not what bounds the stream",
                steady_cpu.thread_us_per_task(CHECKPOINTER_THREAD, steady_tasks),
                100.0 * cores(steady_cpu.writer_ns, steady_wall),
                cores(steady_cpu.process_ns, steady_wall)
            )),
        );
        self.push(
            Figure::new(
                "node_batch_random",
                &format!(
                    "12 batch-of-1000 tasks/s, random keys, file of {}",
                    thousands(plan.big_file)
                ),
                batch_rate(&big),
                "/s",
            )
            .beside(batch_rate(&small), "the same into a new file")
            .target(Target::AtLeast(100_000.0))
            .note(format!(
                "UUIDv4 idempotency keys, {BATCH_CONNECTIONS} connections, destination paused. {}",
                [big.problems(), small.problems()].join(" ")
            )),
        );
        self.push(
            Figure::new(
                "node_submit_p99",
                "12 submit p99 at the steady rate",
                ms(latency.p99),
                "ms",
            )
            .target(Target::AtMost(5.0))
            .note(format!(
                "{} connections, worker on; p50 {:.2} ms",
                plan.connections,
                ms(latency.p50)
            )),
        );
        self.push(
            Figure::new(
                "node_submit_p99_paced",
                "12 submit p99 paced at half the steady rate",
                ms(paced_latency.p99),
                "ms",
            )
            .beside(ms(latency.p99), "at the steady rate")
            .target(Target::AtMost(5.0))
            .note(format!(
                "{:.0} submits/s due evenly over {} connections, worker on, each counted from \
                 when it was due; p50 {:.2} ms; from when each went out: p50 {:.2} ms, p99 \
                 {:.2} ms. {}",
                paced_rate,
                plan.connections,
                ms(paced_latency.p50),
                ms(paced_sent.p50),
                ms(paced_sent.p99),
                paced.problems()
            )),
        );
        self.detail(
            "one_node",
            json!({
                "server_cores": self.server_cores,
                "cold": load_json(&cold),
                "paced": load_json(&paced),
                "paced_rate": paced_rate,
                "paced_from_sent_p99_ms": ms(paced_sent.p99),
                "steady": windows.iter().map(|w| json!({
                    "submits": load_json(&w.load),
                    "e2e_seconds": w.elapsed.as_secs_f64(),
                    "e2e_per_second": w.rate(),
                    "cpu": w.cpu.json(w.load.ok),
                })).collect::<Vec<_>>(),
                "e2e_rate": e2e_rate,
                "steady_submit_rate": steady_submit,
                "steady_cpu": steady_cpu.json(steady_tasks),
                "submit_latency_ms": summary_json(&latency),
                "drain": {
                    "tasks": backlog,
                    "seconds": (done - started).as_secs_f64(),
                    "per_second": drain_rate,
                    "queue": load_json(&queued),
                    "cpu": drain_cpu.json(backlog),
                },
                "batch_random_keys": {
                    "file_tasks": plan.big_file,
                    "new_file": load_json(&small),
                    "big_file": load_json(&big),
                    "new_file_tasks_per_second": batch_rate(&small),
                    "big_file_tasks_per_second": batch_rate(&big),
                },
            }),
        );
        Ok(())
    }

    /// Pauses `destination` and queues about `plan.node_backlog` tasks
    /// for it in random-key batches of [`BATCH`] (reported as `what`):
    /// the backlog a drain measurement resumes (each answered batch is
    /// [`BATCH`] tasks).
    pub(super) async fn queue_paused_backlog(
        &self,
        endpoint: &Endpoint,
        url: &str,
        destination: &str,
        what: &str,
    ) -> Result<LoadResult, String> {
        let plan = self.plan;
        post(endpoint, &format!("/destinations/{destination}/pause")).await?;
        let queued = self
            .batches(
                endpoint,
                url,
                plan.node_backlog.div_ceil(BATCH),
                plan.patience,
            )
            .await?;
        self.report_load(what, &queued);
        Ok(queued)
    }

    /// `count` batch submits of [`BATCH`] random-key tasks over
    /// [`BATCH_CONNECTIONS`] connections, bounded by `bound`.
    pub(super) async fn batches(
        &self,
        endpoint: &Endpoint,
        url: &str,
        count: u64,
        bound: Duration,
    ) -> Result<LoadResult, String> {
        load::run(
            endpoint,
            Load {
                connections: BATCH_CONNECTIONS,
                max_requests: count,
                max_duration: bound,
            },
            random_key_batches(url.to_owned()),
            load::success,
        )
        .await
    }

    /// A window of random-key batches into a new file, then into one already
    /// holding `big_file` tasks; the destination paused in both.
    async fn random_key_batches(
        &self,
        down: &HttpDownstream,
    ) -> Result<(LoadResult, LoadResult), String> {
        let plan = self.plan;
        let big_db = self.db("node-big");
        let t = Instant::now();
        let (path, url) = (big_db.clone(), down.url());
        let (n, clock) = (plan.big_file, self.clock);
        let step = (n / 4).max(1);
        tokio::task::spawn_blocking(move || {
            store_alone::fill_scheduled(
                &path,
                n,
                (&url, "big"),
                // A day out: the worker has nothing of the file's to claim.
                tc_model::FirstRun::After(Duration::from_secs(86_400)),
                &|done| {
                    if done.is_multiple_of(step) || done == n {
                        eprintln!(
                            "[bench {:>6.1}s]   filled {done}/{n}",
                            clock.elapsed().as_secs_f64()
                        );
                    }
                },
            )
        })
        .await
        .map_err(|e| format!("fill: {e}"))??;
        self.progress(&format!(
            "  {n} tasks written in {:.1} s",
            t.elapsed().as_secs_f64()
        ));
        let mut results = Vec::with_capacity(2);
        for name in ["node-new", "node-big"] {
            let tc = self.start_tc_full(name)?;
            let endpoint = Endpoint::new(tc.addr);
            post(
                &endpoint,
                &format!("/destinations/{}/pause", down.destination()),
            )
            .await?;
            let load = self
                .batches(&endpoint, &down.url(), plan.max_requests, plan.node_window)
                .await?;
            self.report_load(&format!("  {name}: batches of 1000 random keys"), &load);
            tc.stop();
            results.push(load);
        }
        let [small, big] = <[LoadResult; 2]>::try_from(results)
            .map_err(|_| "random-key batches: a window is missing".to_owned())?;
        Ok((small, big))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_version_4() {
        let check = |key: &str| {
            let parts: Vec<&str> = key.split('-').collect();
            let lengths: Vec<usize> = parts.iter().map(|p| p.len()).collect();
            assert_eq!(lengths, [8, 4, 4, 4, 12], "{key}");
            assert!(
                key.chars().all(|c| c == '-' || c.is_ascii_hexdigit()),
                "{key}"
            );
            assert!(parts[2].starts_with('4'), "{key}");
            assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{key}");
        };
        let keys: Vec<String> = (0..100).map(|_| uuid_v4()).collect();
        keys.iter().for_each(|k| check(k));
        let distinct: std::collections::BTreeSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len());
    }

    #[test]
    fn batch_bodies_hold_1000_tasks() {
        let endpoint = Endpoint::new("127.0.0.1:9".parse().unwrap());
        let request = random_key_batches("http://127.0.0.1:9/hook".into())(&endpoint, 2).unwrap();
        assert_eq!(request.uri().path(), "/tasks/batch");
        let body = request.into_body();
        let bytes = futures_body(body);
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let tasks = v["tasks"].as_array().unwrap();
        assert_eq!(tasks.len(), BATCH as usize);
        assert_eq!(tasks[0]["json"]["n"], 2000);
        assert_eq!(tasks[999]["url"], "http://127.0.0.1:9/hook");
    }

    fn futures_body(body: http_body_util::Full<Bytes>) -> Bytes {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime
            .block_on(http_body_util::BodyExt::collect(body))
            .unwrap()
            .to_bytes()
    }

    #[test]
    fn median_of_rates() {
        for (rates, want) in [
            (vec![], 0.0),
            (vec![3.0], 3.0),
            (vec![5.0, 1.0, 3.0], 3.0),
            (vec![4.0, 1.0], 4.0),
        ] {
            assert_eq!(median(rates.clone()), want, "{rates:?}");
        }
    }

    #[test]
    fn cpu_time_in_cores() {
        let check = |ns: u64, wall_ms: u64, want: f64| {
            let got = cores(ns, Duration::from_millis(wall_ms));
            assert!(
                (got - want).abs() < 1e-9,
                "{ns} ns over {wall_ms} ms: {got}"
            );
        };
        check(500_000_000, 1000, 0.5);
        check(3_000_000_000, 2000, 1.5);
        check(0, 1000, 0.0);
        // No wall time at all: no division by zero.
        check(7, 0, 7.0);
    }

    #[test]
    fn cpu_spent_between_snapshots() {
        let thread = |tid, name: &str, cpu_ns| ThreadCpu {
            tid,
            name: name.into(),
            cpu_ns,
        };
        let before = CpuSnapshot(vec![thread(1, "main", 100), thread(2, WRITER_THREAD, 1000)]);
        // Thread 3 started in between: all its time counts.
        let after = CpuSnapshot(vec![
            thread(1, "main", 150),
            thread(2, WRITER_THREAD, 4000),
            thread(3, "tokio-runtime-w", 70),
        ]);
        let spent = after.since(&before);
        assert_eq!(spent.writer_ns, 3000);
        assert_eq!(spent.process_ns, 3120);
        assert_eq!(spent.by_name["tokio-runtime-w"], 70);
    }
}
