//! Phase 13, tenants (issue 29): a light tenant's end-to-end latency beside
//! a heavy tenant's backlog on the same instant destination, against the
//! light tenant alone in the same run; and whether the heavy tenant still
//! uses every slot the light one leaves.
//!
//! Two runs, each on a fresh server (`--api-token`, the run's concurrency)
//! with tenants `a` and `b` (weight 1 each) and a key for each:
//! - **alone**: `b` submits [`B_RATE`] tasks/s with its key for one window;
//! - **beside**: `a`'s backlog is queued while the destination is paused,
//!   the destination is resumed, and `b` submits at the same pace while `a`
//!   has tasks pending (at most one window).
//!
//! A task's end-to-end time is its view's `finished_at - created_at` (the
//! server's clock, milliseconds). The figure is `b`'s p99 beside the
//! backlog over its p99 alone (target ≤ 2×). While both run, the tenants'
//! running counts are sampled every [`SAMPLE`]: `a`'s mean over the slots
//! `b` left (concurrency − `b`'s mean) says whether `a` used them.

use super::*;

/// The light tenant's submit pace.
const B_RATE: u64 = 200;
/// How often the running counts are sampled.
const SAMPLE: Duration = Duration::from_millis(20);
/// The admin credential of the phase's servers.
const ADMIN: &str = "bench-admin-token";

/// What one run measured of `b` (and of `a`, beside).
struct TenantRun {
    b_tasks: u64,
    b_latency: Option<Summary>,
    /// Mean running counts while `b` submitted.
    a_running: f64,
    b_running: f64,
    a_backlog_left: u64,
    warnings: String,
}

impl TenantRun {
    fn json(&self) -> Value {
        json!({
            "b_tasks": self.b_tasks,
            "b_p50_ms": self.b_latency.as_ref().map(|s| ms(s.p50)),
            "b_p99_ms": self.b_latency.as_ref().map(|s| ms(s.p99)),
            "a_running_mean": self.a_running,
            "b_running_mean": self.b_running,
            "a_backlog_left_at_end": self.a_backlog_left,
            "warnings": self.warnings,
        })
    }
}

impl Bench {
    pub(super) async fn tenants(&mut self) -> Result<(), String> {
        let plan = self.plan;
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let alone = self.tenant_run("tenants-alone", &down, 0).await?;
        let backlog = if plan.quick { 10_000 } else { 50_000 };
        let beside = self.tenant_run("tenants-beside", &down, backlog).await?;
        let p99 = |run: &TenantRun| run.b_latency.as_ref().map_or(f64::NAN, |s| ms(s.p99));
        let concurrency = plan.connections as f64;
        let left = (concurrency - beside.b_running).max(1.0);
        self.push(
            Figure::new(
                "tenant_b_p99",
                &format!(
                    "13 tenant b's end-to-end p99 at {B_RATE}/s beside a's {} backlog",
                    thousands(backlog)
                ),
                p99(&beside),
                "ms",
            )
            .beside(p99(&alone), "b alone")
            .target(Target::RatioAtMost(2.0))
            .note(format!(
                "{} of b's tasks beside the backlog ({} alone); a had {} pending at the end. {}{}",
                beside.b_tasks,
                alone.b_tasks,
                beside.a_backlog_left,
                alone.warnings,
                beside.warnings
            )),
        );
        self.push(
            Figure::new(
                "tenant_a_slots",
                "13 tenant a's mean running over the slots b left",
                beside.a_running / left,
                "×",
            )
            .target(Target::AtLeast(0.9))
            .note(format!(
                "a ran {:.1} on average, b {:.1}, of {concurrency} slots (sampled every {} ms)",
                beside.a_running,
                beside.b_running,
                SAMPLE.as_millis()
            )),
        );
        self.detail(
            "tenants",
            json!({
                "b_rate": B_RATE,
                "backlog": backlog,
                "concurrency": plan.connections,
                "alone": alone.json(),
                "beside": beside.json(),
            }),
        );
        Ok(())
    }

    /// One run on a fresh server: `a`'s backlog of `backlog` tasks (none:
    /// `b` alone), then `b` at [`B_RATE`] until the window ends or `a` has
    /// nothing pending, then until `b`'s tasks are all finished.
    async fn tenant_run(
        &self,
        name: &str,
        down: &HttpDownstream,
        backlog: u64,
    ) -> Result<TenantRun, String> {
        let plan = self.plan;
        let concurrency = plan.connections.to_string();
        let tc = self.start_tc(
            name,
            &[
                "--concurrency",
                &concurrency,
                "--sync",
                "full",
                "--api-token",
                ADMIN,
            ],
        )?;
        let endpoint = Endpoint::new(tc.addr);
        let mut conn = Conn::open(endpoint.addr).await?;
        let mut keys = Vec::new();
        for tenant in ["a", "b"] {
            let body = Bytes::from(format!(r#"{{"name":"{tenant}"}}"#));
            send(
                &mut conn,
                &endpoint,
                ADMIN,
                Method::POST,
                "/tenants",
                Some(body),
                StatusCode::CREATED,
            )
            .await?;
            let path = format!("/tenants/{tenant}/keys");
            let made = send(
                &mut conn,
                &endpoint,
                ADMIN,
                Method::POST,
                &path,
                None,
                StatusCode::CREATED,
            )
            .await?;
            keys.push(
                made["key"]
                    .as_str()
                    .ok_or_else(|| format!("POST {path}: no key in {made}"))?
                    .to_owned(),
            );
        }
        let (a_key, b_key) = (keys[0].clone(), keys[1].clone());
        let destination = down.destination();
        let dest_path = format!("/destinations/{destination}");
        if backlog > 0 {
            let pause = |paused: bool| Bytes::from(format!(r#"{{"paused":{paused}}}"#));
            send(
                &mut conn,
                &endpoint,
                ADMIN,
                Method::PUT,
                &dest_path,
                Some(pause(true)),
                StatusCode::OK,
            )
            .await?;
            let mut queued = 0;
            while queued < backlog {
                let n = (backlog - queued).min(1000);
                let tasks: Vec<String> = (queued..queued + n)
                    .map(|i| {
                        String::from_utf8_lossy(&load::submit_body(&down.url(), "a", i, ""))
                            .into_owned()
                    })
                    .collect();
                let body = Bytes::from(format!(r#"{{"tasks":[{}]}}"#, tasks.join(",")));
                send(
                    &mut conn,
                    &endpoint,
                    &a_key,
                    Method::POST,
                    "/tasks/batch",
                    Some(body),
                    StatusCode::OK,
                )
                .await?;
                queued += n;
            }
            self.progress(&format!("  a's backlog of {backlog} queued"));
            send(
                &mut conn,
                &endpoint,
                ADMIN,
                Method::PUT,
                &dest_path,
                Some(pause(false)),
                StatusCode::OK,
            )
            .await?;
        }

        // b at its pace; the counts sampled on a second connection.
        let mut sampler = Conn::open(endpoint.addr).await?;
        let mut tick = tokio::time::interval(Duration::from_secs(1) / B_RATE as u32);
        let mut sample = tokio::time::interval(SAMPLE);
        let until = Instant::now() + plan.window;
        let (mut b_tasks, mut samples, mut a_sum, mut b_sum) = (0u64, 0u64, 0u64, 0u64);
        let mut a_pending = backlog;
        while Instant::now() < until && (backlog == 0 || a_pending > 0) {
            tokio::select! {
                _ = tick.tick() => {
                    let body = load::submit_body(&down.url(), "b", b_tasks, "");
                    send(&mut conn, &endpoint, &b_key, Method::POST, "/tasks", Some(body), StatusCode::CREATED).await?;
                    b_tasks += 1;
                }
                _ = sample.tick() => {
                    let a = tenant_counts(&mut sampler, &endpoint, "a").await?;
                    let b = tenant_counts(&mut sampler, &endpoint, "b").await?;
                    a_pending = a.0;
                    samples += 1;
                    a_sum += a.1;
                    b_sum += b.1;
                }
            }
        }
        let until = Instant::now() + plan.patience;
        loop {
            let (pending, running) = tenant_counts(&mut sampler, &endpoint, "b").await?;
            if pending + running == 0 {
                break;
            }
            if Instant::now() >= until {
                return Err(format!(
                    "b: {pending} pending, {running} running after the run"
                ));
            }
            tokio::time::sleep(SAMPLE).await;
        }
        let a_backlog_left = tenant_counts(&mut sampler, &endpoint, "a").await?.0;
        let b_latency = stats::summarize(finished_times(&mut conn, &endpoint, &b_key).await?);
        let warnings = self.server_warnings(&tc);
        tc.stop();
        let mean = |sum: u64| {
            if samples == 0 {
                0.0
            } else {
                sum as f64 / samples as f64
            }
        };
        let run = TenantRun {
            b_tasks,
            b_latency,
            a_running: mean(a_sum),
            b_running: mean(b_sum),
            a_backlog_left,
            warnings,
        };
        self.progress(&format!(
            "  {name}: b {} tasks, p99 {:.1} ms; a running {:.1}, b running {:.1} on average",
            run.b_tasks,
            run.b_latency.as_ref().map_or(f64::NAN, |s| ms(s.p99)),
            run.a_running,
            run.b_running
        ));
        Ok(run)
    }
}

/// Sends a request with `token` and checks its status; the answer's JSON
/// (`null` for an empty body).
async fn send(
    conn: &mut Conn,
    endpoint: &Endpoint,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Bytes>,
    want: StatusCode,
) -> Result<Value, String> {
    let mut request = endpoint.request(method.clone(), path, body)?;
    let bearer = HeaderValue::try_from(format!("Bearer {token}"))
        .map_err(|e| format!("authorization header: {e}"))?;
    request
        .headers_mut()
        .insert(http::header::AUTHORIZATION, bearer);
    let reply = conn.send(request).await?;
    if reply.status != want {
        return Err(format!(
            "{method} {path}: {} {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        ));
    }
    if reply.body.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&reply.body).map_err(|e| format!("{method} {path}: {e}"))
}

/// A tenant's `(pending, running)` from `GET /tenants/{name}`.
async fn tenant_counts(
    conn: &mut Conn,
    endpoint: &Endpoint,
    tenant: &str,
) -> Result<(u64, u64), String> {
    let path = format!("/tenants/{tenant}");
    let view = send(
        conn,
        endpoint,
        ADMIN,
        Method::GET,
        &path,
        None,
        StatusCode::OK,
    )
    .await?;
    let count = |field: &str| {
        view[field]
            .as_u64()
            .ok_or_else(|| format!("GET {path}: no {field} in {view}"))
    };
    Ok((count("pending")?, count("running")?))
}

/// Every task the key sees, as `finished_at - created_at`.
async fn finished_times(
    conn: &mut Conn,
    endpoint: &Endpoint,
    key: &str,
) -> Result<Vec<Duration>, String> {
    let mut times = Vec::new();
    let mut after: Option<String> = None;
    // Bounded: 10,000 pages of 500 is far more than a run submits.
    for _ in 0..10_000 {
        let path = match &after {
            Some(cursor) => format!("/tasks?limit=500&after={cursor}"),
            None => "/tasks?limit=500".to_owned(),
        };
        let page = send(
            conn,
            endpoint,
            key,
            Method::GET,
            &path,
            None,
            StatusCode::OK,
        )
        .await?;
        for task in page["tasks"].as_array().into_iter().flatten() {
            let at = |field: &str| {
                task[field]
                    .as_str()
                    .and_then(|t| humantime::parse_rfc3339(t).ok())
                    .ok_or_else(|| format!("a task without {field}: {task}"))
            };
            let (created, finished) = (at("created_at")?, at("finished_at")?);
            times.push(finished.duration_since(created).unwrap_or_default());
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return Ok(times),
        }
    }
    Err("more than 10,000 pages of tasks".to_owned())
}
