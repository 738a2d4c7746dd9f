//! The load generator: closed-loop virtual clients, one keep-alive HTTP/1.1
//! connection each, every request timed. Bounded by a request count and a
//! deadline, whichever comes first.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use tokio::task::JoinSet;
use tokio::time::Instant;

pub(crate) use crate::harness::client::{Conn, Endpoint};

/// How long a request may outlive the run's deadline before the client
/// gives up on it (a stuck server must not hang the bench).
const STRAGGLER_GRACE: Duration = Duration::from_secs(10);
/// How often one virtual client reconnects after transport errors before it
/// stops.
const MAX_RECONNECTS: u32 = 8;

/// Builds request number `i` of a run.
pub(crate) type MakeRequest =
    Arc<dyn Fn(&Endpoint, u64) -> Result<Request<Full<Bytes>>, String> + Send + Sync>;

/// The bounds of one run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    /// Virtual clients, one connection each.
    pub(crate) connections: usize,
    /// The most requests sent in all.
    pub(crate) max_requests: u64,
    /// The most time spent sending.
    pub(crate) max_duration: Duration,
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadResult {
    /// Answered with an expected status.
    pub(crate) ok: u64,
    /// Answered with another status.
    pub(crate) bad_status: u64,
    /// No answer (transport errors, timeouts).
    pub(crate) errors: u64,
    /// From the start to the last answer.
    pub(crate) elapsed: Duration,
    /// The latency of every expected answer (paced: from when it was due).
    pub(crate) latencies: Vec<Duration>,
    /// Paced only: the same answers' time from when each request went out,
    /// which leaves out a wait on the client's side (its connection still
    /// busy with the answer before, or the load generator itself not run).
    pub(crate) sent_latencies: Vec<Duration>,
    /// What went wrong first, if anything did.
    pub(crate) first_problem: Option<String>,
}

impl LoadResult {
    pub(crate) fn per_second(&self) -> f64 {
        super::stats::rate(self.ok, self.elapsed)
    }

    /// Several windows as one: counts and latencies pooled, time summed.
    pub(crate) fn pooled(windows: &[LoadResult]) -> LoadResult {
        let mut all = LoadResult::default();
        for w in windows {
            all.merge(w.clone());
            all.elapsed += w.elapsed;
        }
        all
    }

    fn merge(&mut self, other: LoadResult) {
        self.ok += other.ok;
        self.bad_status += other.bad_status;
        self.errors += other.errors;
        self.latencies.extend(other.latencies);
        self.sent_latencies.extend(other.sent_latencies);
        if self.first_problem.is_none() {
            self.first_problem = other.first_problem;
        }
    }

    /// A one-line note of the failures, empty when there were none.
    pub(crate) fn problems(&self) -> String {
        if self.bad_status == 0 && self.errors == 0 {
            return String::new();
        }
        format!(
            "{} unexpected statuses, {} transport errors; first: {}",
            self.bad_status,
            self.errors,
            self.first_problem.as_deref().unwrap_or("?")
        )
    }
}

/// Runs closed-loop clients against `endpoint`: each sends its next request
/// as soon as the previous one is answered. Connections are opened before
/// the clock starts.
pub(crate) async fn run(
    endpoint: &Endpoint,
    load: Load,
    make: MakeRequest,
    expected: fn(StatusCode) -> bool,
) -> Result<LoadResult, String> {
    run_with(endpoint, load, None, make, expected).await
}

/// Runs paced clients against `endpoint`: together they start `per_second`
/// requests a second, spread evenly (each client one every
/// `connections / per_second`, the clients offset from one another). A
/// latency counts from the instant its request was due, not from when it
/// went out, so a request held behind a slow answer on its connection is
/// charged its wait (no coordinated omission). Below the server's rate,
/// this is the latency a user meets, without the queue a closed loop
/// builds at saturation.
pub(crate) async fn run_paced(
    endpoint: &Endpoint,
    load: Load,
    per_second: f64,
    make: MakeRequest,
    expected: fn(StatusCode) -> bool,
) -> Result<LoadResult, String> {
    if !(per_second.is_finite() && per_second > 0.0) {
        return Err(format!(
            "a paced load needs a positive rate, not {per_second}"
        ));
    }
    let gap = Duration::from_secs_f64(load.connections.max(1) as f64 / per_second);
    run_with(endpoint, load, Some(gap), make, expected).await
}

async fn run_with(
    endpoint: &Endpoint,
    load: Load,
    gap: Option<Duration>,
    make: MakeRequest,
    expected: fn(StatusCode) -> bool,
) -> Result<LoadResult, String> {
    let mut conns = Vec::with_capacity(load.connections);
    for _ in 0..load.connections {
        conns.push(Conn::open(endpoint.addr).await?);
    }
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + load.max_duration;
    let mut clients = JoinSet::new();
    let connections = conns.len().max(1) as u32;
    for (c, conn) in conns.into_iter().enumerate() {
        let client = Client {
            pace: gap.map(|gap| Pace {
                gap,
                first: start + gap * u32::try_from(c).unwrap_or(u32::MAX) / connections,
            }),
            endpoint: endpoint.clone(),
            next: Arc::clone(&next),
            max_requests: load.max_requests,
            deadline,
            make: Arc::clone(&make),
            expected,
        };
        clients.spawn(client.run(conn, start));
    }
    let mut total = LoadResult::default();
    let mut last = start;
    while let Some(joined) = clients.join_next().await {
        let (outcome, client_last) = joined.map_err(|e| format!("load client failed: {e}"))?;
        last = last.max(client_last);
        total.merge(outcome);
    }
    total.elapsed = last - start;
    Ok(total)
}

/// When a paced client's requests are due: `first`, then every `gap`.
#[derive(Clone, Copy)]
struct Pace {
    gap: Duration,
    first: Instant,
}

struct Client {
    /// `None`: closed loop, each request as soon as the last is answered.
    pace: Option<Pace>,
    endpoint: Endpoint,
    next: Arc<AtomicU64>,
    max_requests: u64,
    deadline: Instant,
    make: MakeRequest,
    expected: fn(StatusCode) -> bool,
}

impl Client {
    /// The outcome and the instant of its last answer.
    async fn run(self, mut conn: Conn, start: Instant) -> (LoadResult, Instant) {
        let mut outcome = LoadResult {
            latencies: Vec::with_capacity(4096),
            ..LoadResult::default()
        };
        let mut last = start;
        let mut reconnects = 0;
        let mut due = self.pace.map(|p| p.first);
        while Instant::now() < self.deadline {
            if let Some(at) = due {
                if at >= self.deadline {
                    break;
                }
                tokio::time::sleep_until(at).await;
            }
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.max_requests {
                break;
            }
            let request = match (self.make)(&self.endpoint, i) {
                Ok(request) => request,
                Err(e) => {
                    outcome.errors += 1;
                    outcome.first_problem.get_or_insert(e);
                    break;
                }
            };
            // Paced, a request counts from when it was due.
            let went_out = Instant::now();
            let sent = due.unwrap_or(went_out);
            if let (Some(at), Some(pace)) = (&mut due, self.pace) {
                *at += pace.gap;
            }
            let answer =
                tokio::time::timeout_at(self.deadline + STRAGGLER_GRACE, conn.send(request)).await;
            let answered = Instant::now();
            match answer {
                Ok(Ok(reply)) if (self.expected)(reply.status) => {
                    outcome.ok += 1;
                    outcome.latencies.push(answered - sent);
                    if due.is_some() {
                        outcome.sent_latencies.push(answered - went_out);
                    }
                    last = answered;
                }
                Ok(Ok(reply)) => {
                    outcome.bad_status += 1;
                    last = answered;
                    outcome.first_problem.get_or_insert_with(|| {
                        format!(
                            "status {}: {}",
                            reply.status,
                            String::from_utf8_lossy(&reply.body[..reply.body.len().min(200)])
                        )
                    });
                }
                Ok(Err(e)) => {
                    outcome.errors += 1;
                    outcome.first_problem.get_or_insert(e);
                    reconnects += 1;
                    if reconnects > MAX_RECONNECTS {
                        break;
                    }
                    match Conn::open(self.endpoint.addr).await {
                        Ok(fresh) => conn = fresh,
                        Err(e) => {
                            outcome.first_problem.get_or_insert(e);
                            break;
                        }
                    }
                }
                Err(_) => {
                    outcome.errors += 1;
                    outcome
                        .first_problem
                        .get_or_insert_with(|| "no answer within the run's bound".into());
                    break;
                }
            }
        }
        (outcome, last)
    }
}

/// The request body of `POST /tasks` for a task that POSTs `{"n": i}` to
/// `url`, with its own idempotency key.
pub(crate) fn submit_body(url: &str, key_prefix: &str, i: u64, extra: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"url":"{url}","json":{{"n":{i}}},"idempotency_key":"{key_prefix}-{i}"{extra}}}"#
    ))
}

/// Builds `POST /tasks` requests with unique keys.
pub(crate) fn submits(url: String, key_prefix: String, extra: &'static str) -> MakeRequest {
    Arc::new(move |endpoint: &Endpoint, i| {
        endpoint.request(
            Method::POST,
            "/tasks",
            Some(submit_body(&url, &key_prefix, i, extra)),
        )
    })
}

/// 201 (created) is the only answer a fresh submit expects.
pub(crate) fn created(status: StatusCode) -> bool {
    status == StatusCode::CREATED
}

/// Any 2xx.
pub(crate) fn success(status: StatusCode) -> bool {
    status.is_success()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_bodies_are_valid_json_with_unique_keys() {
        let a = submit_body("http://127.0.0.1:9/ok", "run", 7, r#","max_attempts":1"#);
        let v: serde_json::Value = serde_json::from_slice(&a).unwrap();
        assert_eq!(v["url"], "http://127.0.0.1:9/ok");
        assert_eq!(v["json"]["n"], 7);
        assert_eq!(v["idempotency_key"], "run-7");
        assert_eq!(v["max_attempts"], 1);
        let b = submit_body("http://x/", "run", 8, "");
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["idempotency_key"], "run-8");
    }
}
