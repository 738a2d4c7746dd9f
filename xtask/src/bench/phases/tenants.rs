//! Phase 13, tenants: a light tenant's end-to-end latency beside
//! a heavy tenant's backlog on the same instant destination, against the
//! light tenant alone in the same run; and whether the heavy tenant still
//! uses every slot the light one leaves.
//!
//! Four runs, each on a fresh server (`--api-token`, the run's concurrency):
//! - **alone**: tenant `b` submits [`B_RATE`] tasks/s with its key for one
//!   window (the baseline);
//! - **beside**: tenant `a`'s backlog is queued while the destination is
//!   paused, the destination is resumed, and `b` submits at the same pace
//!   while `a` has tasks pending (at most one window);
//! - **blind**: the same without tenants (every task the admin's): the
//!   claim takes the oldest due first, so `b`'s tasks queue behind the
//!   backlog. What the share is compared with, not a target;
//! - **a alone**: `a`'s backlog drained with no `b`: its drain rate, which
//!   `a`'s rate beside `b` is held to (`b` needs a few slots; `a` must
//!   keep every other).
//!
//! A task's end-to-end time is its view's `finished_at - created_at` (the
//! server's clock, milliseconds). A drain's time is from the resume until
//! the destination has nothing pending or in flight, polled every
//! [`SAMPLE`].

use super::*;

/// The light tenant's submit pace.
const B_RATE: u64 = 200;
/// How often the counts are polled.
const SAMPLE: Duration = Duration::from_millis(20);
/// The admin credential of the phase's servers.
const ADMIN: &str = "bench-admin-token";

/// One run's shape.
pub(super) struct Shape {
    pub(super) name: &'static str,
    /// Tenants `a` and `b` with a key each; otherwise every task is the
    /// admin's.
    pub(super) tenants: bool,
    /// `a`'s tasks carry the flow key `A`, `b`'s `B` (phase 18).
    pub(super) flow_keys: bool,
    /// `a`'s backlog (0: none).
    pub(super) backlog: u64,
    /// Whether `b` submits.
    pub(super) b: bool,
}

/// What one run measured.
pub(super) struct TenantRun {
    pub(super) b_tasks: u64,
    pub(super) b_latency: Option<Summary>,
    /// b's time from submit to claim (`started_at - created_at`): how much
    /// of its latency is the wait for a slot and a claim.
    b_waited: Option<Summary>,
    /// From the resume until the backlog (and `b`'s tasks) were all done.
    pub(super) drain: Option<Duration>,
    pub(super) warnings: String,
}

impl TenantRun {
    fn drain_rate(&self, backlog: u64) -> f64 {
        self.drain.map_or(f64::NAN, |d| stats::rate(backlog, d))
    }

    pub(super) fn json(&self, backlog: u64) -> Value {
        json!({
            "b_tasks": self.b_tasks,
            "b_p50_ms": self.b_latency.as_ref().map(|s| ms(s.p50)),
            "b_p99_ms": self.b_latency.as_ref().map(|s| ms(s.p99)),
            "b_to_claim_p50_ms": self.b_waited.as_ref().map(|s| ms(s.p50)),
            "b_to_claim_p99_ms": self.b_waited.as_ref().map(|s| ms(s.p99)),
            "drain_s": self.drain.map(|d| d.as_secs_f64()),
            "drain_per_second": self.drain.map(|_| self.drain_rate(backlog)),
            "warnings": self.warnings,
        })
    }

    pub(super) fn p99(&self) -> f64 {
        self.b_latency.as_ref().map_or(f64::NAN, |s| ms(s.p99))
    }
}

impl Bench {
    pub(super) async fn tenants(&mut self) -> Result<(), String> {
        let plan = self.plan;
        let down = HttpDownstream::start(Duration::ZERO).await?;
        let backlog = if plan.quick { 10_000 } else { 50_000 };
        let shape = |name, tenants, backlog, b| Shape {
            name,
            tenants,
            flow_keys: false,
            backlog,
            b,
        };
        let alone = self
            .tenant_run(shape("tenants-alone", true, 0, true), &down)
            .await?;
        let beside = self
            .tenant_run(shape("tenants-beside", true, backlog, true), &down)
            .await?;
        let blind = self
            .tenant_run(shape("tenants-blind", false, backlog, true), &down)
            .await?;
        let a_alone = self
            .tenant_run(shape("tenants-a-alone", true, backlog, false), &down)
            .await?;
        let thousand = thousands(backlog);
        self.push(
            Figure::new(
                "tenant_b_p99",
                &format!(
                    "13 tenant b's end-to-end p99 at {B_RATE}/s beside a's {thousand} backlog"
                ),
                beside.p99(),
                "ms",
            )
            .beside(alone.p99(), "b alone")
            .target(Target::RatioAtMost(2.0))
            .note(format!(
                "{} of b's tasks beside the backlog, {} alone; p50 {:.1} ms beside, {:.1} ms \
                 alone. Without tenants (the claim oldest due first) b's p99 beside the same \
                 backlog was {:.1} ms over {} tasks. {}{}",
                beside.b_tasks,
                alone.b_tasks,
                beside.b_latency.as_ref().map_or(f64::NAN, |s| ms(s.p50)),
                alone.b_latency.as_ref().map_or(f64::NAN, |s| ms(s.p50)),
                blind.p99(),
                blind.b_tasks,
                beside.warnings,
                blind.warnings
            )),
        );
        self.push(
            Figure::new(
                "tenant_a_drain",
                &format!("13 tenant a's {thousand} backlog drained beside b"),
                beside.drain_rate(backlog),
                "/s",
            )
            .beside(a_alone.drain_rate(backlog), "a alone")
            .target(Target::RatioAtLeast(0.9))
            .note(format!(
                "b submitted {} tasks during a's drain of {:.2} s ({:.2} s alone); the \
                 drain's end is polled every {} ms",
                beside.b_tasks,
                beside.drain.map_or(f64::NAN, |d| d.as_secs_f64()),
                a_alone.drain.map_or(f64::NAN, |d| d.as_secs_f64()),
                SAMPLE.as_millis()
            )),
        );
        self.detail(
            "tenants",
            json!({
                "b_rate": B_RATE,
                "backlog": backlog,
                "concurrency": plan.connections,
                "alone": alone.json(0),
                "beside": beside.json(backlog),
                "blind": blind.json(backlog),
                "a_alone": a_alone.json(backlog),
            }),
        );
        Ok(())
    }

    /// One run on a fresh server, as `shape` says.
    pub(super) async fn tenant_run(
        &self,
        shape: Shape,
        down: &HttpDownstream,
    ) -> Result<TenantRun, String> {
        let plan = self.plan;
        let concurrency = plan.connections.to_string();
        let tc = self.start_tc(
            shape.name,
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
        let (a_key, b_key) = if shape.tenants {
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
            (keys[0].clone(), keys[1].clone())
        } else {
            (ADMIN.to_owned(), ADMIN.to_owned())
        };
        let (a_extra, b_extra) = if shape.flow_keys {
            (r#","flow_key":"A""#, r#","flow_key":"B""#)
        } else {
            ("", "")
        };
        let destination = down.destination();
        let dest_path = format!("/destinations/{destination}");
        if shape.backlog > 0 {
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
            while queued < shape.backlog {
                let n = (shape.backlog - queued).min(1000);
                let tasks: Vec<String> = (queued..queued + n)
                    .map(|i| {
                        String::from_utf8_lossy(&load::submit_body(&down.url(), "a", i, a_extra))
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
            self.progress(&format!("  a's backlog of {} queued", shape.backlog));
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
        let started = Instant::now();

        // b at its pace (while a has tasks pending, when it has a backlog);
        // the destination's counts polled on a second connection.
        let mut poller = Conn::open(endpoint.addr).await?;
        let mut tick = tokio::time::interval(Duration::from_secs(1) / B_RATE as u32);
        let mut poll = tokio::time::interval(SAMPLE);
        let until = started + plan.window;
        let mut b_tasks = 0u64;
        let mut drain = None;
        let bound = started + plan.patience;
        loop {
            let now = Instant::now();
            let submitting = shape.b && now < until && (shape.backlog == 0 || drain.is_none());
            if !submitting && (shape.backlog == 0 || drain.is_some()) {
                break;
            }
            if now >= bound {
                return Err(format!(
                    "{}: the backlog was not drained within {:?}",
                    shape.name, plan.patience
                ));
            }
            tokio::select! {
                _ = tick.tick(), if submitting => {
                    let body = load::submit_body(&down.url(), "b", b_tasks, b_extra);
                    send(&mut conn, &endpoint, &b_key, Method::POST, "/tasks", Some(body), StatusCode::CREATED).await?;
                    b_tasks += 1;
                }
                _ = poll.tick(), if shape.backlog > 0 => {
                    let (pending, in_flight) = counts_of(&mut poller, &endpoint, &destination, Some(ADMIN)).await?;
                    if pending + in_flight == 0 && drain.is_none() {
                        drain = Some(started.elapsed());
                    }
                }
            }
        }
        // b's last tasks finished (on a new connection: the poller may have
        // sat idle past the server's keep-alive while only b submitted).
        let mut poller = Conn::open(endpoint.addr).await?;
        let until = Instant::now() + plan.patience;
        loop {
            let (pending, in_flight) =
                counts_of(&mut poller, &endpoint, &destination, Some(ADMIN)).await?;
            if pending + in_flight == 0 {
                break;
            }
            if Instant::now() >= until {
                return Err(format!(
                    "{pending} pending, {in_flight} in flight after the run"
                ));
            }
            tokio::time::sleep(SAMPLE).await;
        }
        let (b_latency, b_waited) = if shape.b {
            let times = finished_times(&mut conn, &endpoint, &b_key, "b-").await?;
            (
                stats::summarize(times.iter().map(|t| t.total).collect()),
                stats::summarize(times.iter().map(|t| t.waited).collect()),
            )
        } else {
            (None, None)
        };
        let warnings = self.server_warnings(&tc);
        tc.stop();
        let run = TenantRun {
            b_tasks,
            b_latency,
            b_waited,
            drain,
            warnings,
        };
        self.progress(&format!(
            "  {}: b {} tasks, p99 {:.1} ms (submit to claim p99 {:.1} ms); drain {:.2} s",
            shape.name,
            run.b_tasks,
            run.p99(),
            run.b_waited.as_ref().map_or(f64::NAN, |s| ms(s.p99)),
            run.drain.map_or(f64::NAN, |d| d.as_secs_f64())
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

/// One finished task's times.
struct Times {
    /// From its submit until its (last) try was claimed.
    waited: Duration,
    /// From its submit until it finished.
    total: Duration,
}

/// Every task the credential `key` sees whose idempotency key starts with
/// `prefix`, as `finished_at - created_at`.
async fn finished_times(
    conn: &mut Conn,
    endpoint: &Endpoint,
    key: &str,
    prefix: &str,
) -> Result<Vec<Times>, String> {
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
        let tasks = page["tasks"].as_array().into_iter().flatten();
        for task in tasks.filter(|t| {
            t["idempotency_key"]
                .as_str()
                .is_some_and(|k| k.starts_with(prefix))
        }) {
            let at = |field: &str| {
                task[field]
                    .as_str()
                    .and_then(|t| humantime::parse_rfc3339(t).ok())
                    .ok_or_else(|| format!("a task without {field}: {task}"))
            };
            let (created, finished) = (at("created_at")?, at("finished_at")?);
            let started = at("started_at")?;
            times.push(Times {
                waited: started.duration_since(created).unwrap_or_default(),
                total: finished.duration_since(created).unwrap_or_default(),
            });
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return Ok(times),
        }
    }
    Err("more than 10,000 pages of tasks".to_owned())
}
