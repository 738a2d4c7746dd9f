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
    /// The latency of every expected answer.
    pub(crate) latencies: Vec<Duration>,
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
    let mut conns = Vec::with_capacity(load.connections);
    for _ in 0..load.connections {
        conns.push(Conn::open(endpoint.addr).await?);
    }
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + load.max_duration;
    let mut clients = JoinSet::new();
    for conn in conns {
        let client = Client {
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

struct Client {
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
        while Instant::now() < self.deadline {
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
            let sent = Instant::now();
            let answer =
                tokio::time::timeout_at(self.deadline + STRAGGLER_GRACE, conn.send(request)).await;
            let answered = Instant::now();
            match answer {
                Ok(Ok(reply)) if (self.expected)(reply.status) => {
                    outcome.ok += 1;
                    outcome.latencies.push(answered - sent);
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
