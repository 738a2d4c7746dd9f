//! Phase 10, idle waiters: tasks from submit to success (submitted over 16 connections, so that
//! with the waiters' they fit in tc-server's 1024) while 1,000 requests long-poll other tasks
//! (`GET /tasks/{id}?wait_ms=60000`, each on its own connection), beside the same run with none. A waiter is woken only by a change of its own task, so idle waiters should cost the
//! completions neither throughput nor CPU.

use tokio::task::JoinSet;

use super::nodes::{CLOCK_TICKS_PER_S, cpu_ticks};
use super::*;

/// How many requests wait while the completions run.
const IDLE_WAITERS: usize = 1000;

/// Connections that submit: with the waiters' and the bench's two, within
/// tc-server's 1024.
const SUBMIT_CONNECTIONS: usize = 16;

/// The longest a long-poll waits (the API's bound): a run must end sooner.
const WAIT_MS: u64 = 60_000;

/// One run's completions.
struct Completions {
    rate: f64,
    cpu_ms_per_task: f64,
    /// Waiters still waiting when the completions were done.
    still_waiting: u64,
}

impl Bench {
    pub(super) async fn idle_waiters(&mut self) -> Result<(), String> {
        let n = self.plan.e2e_tasks;
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let none = self.completions_beside("waiters-none", &down, n, 0).await?;
        let idle = self
            .completions_beside("waiters-idle", &down, n, IDLE_WAITERS)
            .await?;
        for (what, run, waiting) in [("none", &none, 0), ("1,000 idle", &idle, IDLE_WAITERS)] {
            self.progress(&format!(
                "  {n} tasks with {what} waiters: {:.0}/s, {:.3} ms CPU per task ({} still waiting \
                 of {waiting})",
                run.rate, run.cpu_ms_per_task, run.still_waiting
            ));
        }
        let note = if idle.still_waiting == IDLE_WAITERS as u64 {
            format!("tc-server's CPU (utime+stime) over submit + drain of {n} tasks")
        } else {
            format!(
                "only {} of {IDLE_WAITERS} waiters were still waiting at the end",
                idle.still_waiting
            )
        };
        self.push(
            Figure::new(
                "waiters_cpu_per_task",
                "10 CPU per completed task, 1,000 idle waiters",
                idle.cpu_ms_per_task,
                "ms",
            )
            .beside(none.cpu_ms_per_task, "no waiters")
            .target(Target::RatioAtMost(1.2))
            .note(note),
        );
        self.push(
            Figure::new(
                "waiters_rate",
                "10 end to end tasks/s, 1,000 idle waiters",
                idle.rate,
                "/s",
            )
            .beside(none.rate, "no waiters")
            .target(Target::RatioAtLeast(0.8)),
        );
        self.detail(
            "idle_waiters",
            json!({
                "tasks": n,
                "waiters": IDLE_WAITERS,
                "none": {"rate": none.rate, "cpu_ms_per_task": none.cpu_ms_per_task},
                "idle": {
                    "rate": idle.rate,
                    "cpu_ms_per_task": idle.cpu_ms_per_task,
                    "still_waiting": idle.still_waiting,
                },
            }),
        );
        Ok(())
    }

    /// A fresh server with `waiters` requests waiting on tasks due in an
    /// hour; then `n` tasks submitted and drained, timed and costed.
    async fn completions_beside(
        &self,
        name: &str,
        down: &HttpDownstream,
        n: u64,
        waiters: usize,
    ) -> Result<Completions, String> {
        let concurrency = self.plan.connections.to_string();
        let per_client = (waiters.max(1)).to_string();
        let tc = self.start_tc(
            name,
            &[
                "--concurrency",
                &concurrency,
                "--sync",
                "full",
                "--max-waiters-per-client",
                &per_client,
            ],
        )?;
        let endpoint = Endpoint::new(tc.addr);
        let mut held = JoinSet::new();
        for id in delayed_tasks(&endpoint, &down.url(), waiters).await? {
            let mut conn = Conn::open(endpoint.addr).await?;
            let request =
                endpoint.request(Method::GET, &format!("/tasks/{id}?wait_ms={WAIT_MS}"), None)?;
            held.spawn(async move { conn.send(request).await });
        }
        let mut conn = Conn::open(endpoint.addr).await?;
        let deadline = Instant::now() + self.plan.patience;
        while waiting(&mut conn, &endpoint).await? < waiters as u64 {
            if Instant::now() >= deadline {
                return Err(format!("{name}: the {waiters} waiters never all waited"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let cpu_before = cpu_ticks(tc.pid()).ok_or("no /proc stat for tc-server")?;
        let started = Instant::now();
        let submitted = load::run(
            &endpoint,
            Load {
                connections: SUBMIT_CONNECTIONS,
                max_requests: n,
                max_duration: self.plan.patience,
            },
            load::submits(down.url(), name.to_owned(), ""),
            load::created,
        )
        .await?;
        if submitted.ok != n {
            return Err(format!(
                "{name}: only {} of {n} submits: {}",
                submitted.ok,
                submitted.problems()
            ));
        }
        let bound = (started + self.plan.patience).min(started + Duration::from_millis(WAIT_MS));
        let (_, done) = self.wait_terminal(&endpoint, n, bound).await?;
        let cpu = cpu_ticks(tc.pid())
            .ok_or("no /proc stat for tc-server")?
            .saturating_sub(cpu_before);
        let still_waiting = waiting(&mut conn, &endpoint).await?;
        held.abort_all();
        tc.stop();
        Ok(Completions {
            rate: stats::rate(n, done - started),
            cpu_ms_per_task: cpu as f64 * 1000.0 / CLOCK_TICKS_PER_S / n.max(1) as f64,
            still_waiting,
        })
    }
}

/// Submits `count` tasks due in an hour (batches of 1000) and returns their
/// ids.
async fn delayed_tasks(
    endpoint: &Endpoint,
    url: &str,
    count: usize,
) -> Result<Vec<String>, String> {
    let mut conn = Conn::open(endpoint.addr).await?;
    let mut ids = Vec::with_capacity(count);
    while ids.len() < count {
        let batch: Vec<Value> = (ids.len()..count.min(ids.len() + 1000))
            .map(|i| json!({"url": url, "idempotency_key": format!("idle-{i}"), "delay_ms": 3_600_000}))
            .collect();
        let body = Bytes::from(json!({ "tasks": batch }).to_string());
        let reply = conn
            .send(endpoint.request(Method::POST, "/tasks/batch", Some(body))?)
            .await?;
        let answer: Value =
            serde_json::from_slice(&reply.body).map_err(|e| format!("batch answer: {e}"))?;
        let results = answer["results"]
            .as_array()
            .ok_or("batch answer without results")?;
        for result in results {
            let id = result["task"]["id"]
                .as_str()
                .ok_or_else(|| format!("batch item refused: {result}"))?;
            ids.push(id.to_owned());
        }
    }
    Ok(ids)
}

/// `taskcenter_http_waiters`: requests waiting now.
async fn waiting(conn: &mut Conn, endpoint: &Endpoint) -> Result<u64, String> {
    let reply = conn
        .send(endpoint.request(Method::GET, "/metrics", None)?)
        .await?;
    String::from_utf8_lossy(&reply.body)
        .lines()
        .find_map(|l| {
            l.strip_prefix("taskcenter_http_waiters ")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map(|v| v.max(0.0) as u64)
        .ok_or_else(|| "no taskcenter_http_waiters in /metrics".into())
}
