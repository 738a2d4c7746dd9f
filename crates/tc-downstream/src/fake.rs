//! The one fake downstream: a [`Script`] (what to answer, per path or by a
//! rule; what was seen), played two ways: in process by [`FakeDownstream`],
//! and over real loopback HTTP/1.1 by [`FakeServer`] for the real client.
//! Tests program the script and read back what it saw, without knowing which
//! way it is served; the demo and the bench use the same server.
//!
//! Every wait runs on tokio's clock, so the in-process fake is exact on a
//! paused clock (`#[tokio::test(start_paused = true)]`).
//!
//! The server is raw tokio TCP with httparse for the heads, so that it sees
//! what a hyper server would hide: a client closing a connection while its
//! request is held (how tests see that a cancel closed it), and it can send
//! bytes no HTTP library would ([`Step::Raw`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::{Delivery, DownError, DownResponse, Downstream};

/// An answer the downstream gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Headers besides `Content-Length`, in the order sent.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Bytes,
}

impl Reply {
    /// This status with the JSON body `{"status":<status>}`.
    pub fn status(status: u16) -> Reply {
        Reply::json(status, format!("{{\"status\":{status}}}"))
    }

    /// This status with a JSON body.
    pub fn json(status: u16, body: impl Into<Bytes>) -> Reply {
        Reply::with_body(status, "application/json", body)
    }

    /// This status with a body of this content type.
    pub fn with_body(status: u16, content_type: &str, body: impl Into<Bytes>) -> Reply {
        Reply {
            status,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body: body.into(),
        }
    }

    /// The same answer with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The same answer with a `Retry-After` header.
    pub fn retry_after(self, value: &str) -> Reply {
        self.header("retry-after", value)
    }

    fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The reply as HTTP/1.1 bytes.
    fn encode(&self) -> Vec<u8> {
        let mut head = format!("HTTP/1.1 {} X\r\n", self.status);
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("content-length: {}\r\n\r\n", self.body.len()));
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// What the server does with the connection after a [`Step::Raw`] write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Wait for the next request on it.
    KeepAlive,
    /// Close it (FIN).
    Close,
    /// Reset it (RST).
    Reset,
    /// Only wait for the client to close it.
    Hold,
}

/// What the downstream does with one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Answer at once.
    Reply(Reply),
    /// Answer after a delay.
    ReplyAfter(Duration, Reply),
    /// Never answer: the caller's timeout or cancel ends the call.
    Hang,
    /// Answer when [`Script::open_gate`] is called.
    Gate(Reply),
    /// Reset the connection without answering; in process, a
    /// [`DownError::Connect`].
    Reset,
    /// Over loopback, write these bytes as they are (malformed HTTP, a cut
    /// body, ...), then treat the connection as `Then` says. In process there
    /// is no wire: a [`DownError::Other`].
    Raw(Bytes, Then),
}

/// One call the downstream received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The request target: path and query.
    pub path: String,
    /// The request method.
    pub method: String,
    /// The headers, names lowercased, in the order sent.
    pub headers: Vec<(String, String)>,
    /// The request body.
    pub body: Bytes,
    /// The `Idempotency-Key` header.
    pub idempotency_key: Option<String>,
    /// The `X-Task-Id` header.
    pub task_id: Option<String>,
    /// The `X-Task-Attempt` header.
    pub attempt: Option<u32>,
    /// When it arrived, on tokio's clock.
    pub at: Instant,
    /// Over loopback, the connection it came on: 0, 1, ... in order of
    /// acceptance.
    pub connection: Option<usize>,
}

impl Call {
    /// The first header called `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Picks the step of a call no plan covers; `earlier` counts the calls
/// before this one with the same path and idempotency key.
pub type Rule = dyn Fn(&Call, usize) -> Step + Send + Sync;

/// What the script has seen so far.
#[derive(Debug, Default)]
pub struct Record {
    calls: Vec<Call>,
    /// The status each kept call was answered with, by index.
    statuses: Vec<Option<u16>>,
    /// When each kept call ended (answered or abandoned), by index.
    ended: Vec<Option<Instant>>,
    count: usize,
    answered: usize,
    abandoned: Vec<(usize, Instant)>,
    in_flight: usize,
    peak: usize,
    connections: usize,
    closed: Vec<usize>,
    handshakes_failed: usize,
    gate_open: bool,
    seen_keys: HashMap<(String, Option<String>), usize>,
    /// Every start (`true`) and end (`false`) of a kept call, by index, in
    /// the order they happened: what per-host peaks are replayed from.
    transitions: Vec<(usize, bool)>,
}

impl Record {
    /// Every call kept, oldest first (none with [`Script::counting`]).
    pub fn calls(&self) -> &[Call] {
        &self.calls
    }

    /// The status the `i`th kept call was answered with; `None` while it
    /// runs, when abandoned, or for a raw reply.
    pub fn status_of(&self, i: usize) -> Option<u16> {
        self.statuses.get(i).copied().flatten()
    }

    /// When the `i`th kept call ended, answered or abandoned; `None` while
    /// it runs.
    pub fn ended_at(&self, i: usize) -> Option<Instant> {
        self.ended.get(i).copied().flatten()
    }

    /// The most kept calls that `which` picks (e.g. those to one host's
    /// paths) that were in flight at once, replayed from the order in which
    /// calls started and ended (exact even when they share an instant).
    pub fn peak_in_flight_of(&self, which: impl Fn(&Call) -> bool) -> usize {
        let (mut now, mut peak) = (0usize, 0usize);
        for (index, started) in &self.transitions {
            if !self.calls.get(*index).is_some_and(&which) {
                continue;
            }
            if *started {
                now += 1;
                peak = peak.max(now);
            } else {
                now = now.saturating_sub(1);
            }
        }
        peak
    }

    /// How many calls arrived.
    pub fn count(&self) -> usize {
        self.count
    }

    /// How many calls were answered.
    pub fn answered(&self) -> usize {
        self.answered
    }

    /// The kept calls whose caller went away before the answer (timeout,
    /// cancel; over loopback, the client closed the connection), with when.
    pub fn abandoned(&self) -> impl Iterator<Item = (&Call, Instant)> {
        self.abandoned
            .iter()
            .filter_map(|(i, at)| self.calls.get(*i).map(|c| (c, *at)))
    }

    /// How many calls were abandoned.
    pub fn abandoned_count(&self) -> usize {
        self.abandoned.len()
    }

    /// Connections accepted over loopback.
    pub fn connections(&self) -> usize {
        self.connections
    }

    /// Whether the client closed `connection`.
    pub fn closed(&self, connection: usize) -> bool {
        self.closed.contains(&connection)
    }

    /// TLS handshakes that failed (the client refused the certificate).
    pub fn handshakes_failed(&self) -> usize {
        self.handshakes_failed
    }
}

/// The downstream's program and its record. Share it with `Arc`.
pub struct Script {
    record: Mutex<Record>,
    plans: Mutex<HashMap<String, VecDeque<Step>>>,
    rule: Box<Rule>,
    keep_calls: bool,
    changed: Notify,
}

impl Script {
    /// A script where every path answers [`Reply::status`]`(200)` until
    /// planned otherwise.
    pub fn new() -> Arc<Script> {
        Script::with_rule(|_, _| Step::Reply(Reply::status(200)))
    }

    /// A script whose unplanned calls get `rule`'s step.
    pub fn with_rule(rule: impl Fn(&Call, usize) -> Step + Send + Sync + 'static) -> Arc<Script> {
        Arc::new(Script {
            record: Mutex::default(),
            plans: Mutex::default(),
            rule: Box::new(rule),
            keep_calls: true,
            changed: Notify::new(),
        })
    }

    /// Like [`Script::with_rule`], but keeping counts only, not the calls
    /// (and the rule's `earlier` is always 0): for the bench's long runs,
    /// whose calls would pile up.
    pub fn counting(rule: impl Fn(&Call, usize) -> Step + Send + Sync + 'static) -> Arc<Script> {
        Arc::new(Script {
            record: Mutex::default(),
            plans: Mutex::default(),
            rule: Box::new(rule),
            keep_calls: false,
            changed: Notify::new(),
        })
    }

    fn record(&self) -> MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, change: impl FnOnce(&mut Record)) {
        change(&mut self.record());
        self.changed.notify_waiters();
    }

    /// Queues `steps` for calls to `path`; once they are used up, the rule
    /// answers.
    pub fn plan(&self, path: &str, steps: impl IntoIterator<Item = Step>) {
        self.plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(path.to_owned())
            .or_default()
            .extend(steps);
    }

    /// Every call to `path` so far, oldest first.
    pub fn calls(&self, path: &str) -> Vec<Call> {
        self.record()
            .calls
            .iter()
            .filter(|c| c.path == path)
            .cloned()
            .collect()
    }

    /// Every call so far.
    pub fn all_calls(&self) -> Vec<Call> {
        self.record().calls.clone()
    }

    /// The most calls that were in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        self.record().peak
    }

    /// How many calls were abandoned by their callers.
    pub fn abandoned(&self) -> usize {
        self.record().abandoned.len()
    }

    /// Reads the record.
    pub fn read<T>(&self, read: impl FnOnce(&Record) -> T) -> T {
        read(&self.record())
    }

    /// Lets every [`Step::Gate`] call answer.
    pub fn open_gate(&self) {
        self.update(|r| r.gate_open = true);
    }

    /// Waits until `ready` finds something in the record.
    pub async fn wait_for<T>(&self, ready: impl Fn(&Record) -> Option<T>) -> T {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(found) = ready(&self.record()) {
                return found;
            }
            changed.await;
        }
    }

    /// Waits until at least `n` calls have arrived.
    pub async fn wait_calls(&self, n: usize) {
        self.wait_for(|r| (r.count >= n).then_some(())).await;
    }

    /// Waits until at least `n` calls were abandoned by their callers.
    pub async fn wait_abandoned(&self, n: usize) {
        self.wait_for(|r| (r.abandoned.len() >= n).then_some(()))
            .await;
    }

    /// Waits until the client closed `connection`.
    pub async fn wait_closed(&self, connection: usize) {
        self.wait_for(|r| r.closed(connection).then_some(())).await;
    }

    /// Records a call and picks its step; returns the call's index.
    fn begin(&self, call: Call) -> (usize, Step) {
        let planned = self
            .plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&call.path)
            .and_then(VecDeque::pop_front);
        let mut r = self.record();
        let earlier = if self.keep_calls {
            let seen = r
                .seen_keys
                .entry((call.path.clone(), call.idempotency_key.clone()))
                .or_default();
            *seen += 1;
            *seen - 1
        } else {
            0
        };
        let step = planned.unwrap_or_else(|| (self.rule)(&call, earlier));
        let index = r.count;
        r.count += 1;
        if self.keep_calls {
            r.calls.push(call);
            r.statuses.push(None);
            r.ended.push(None);
            r.transitions.push((index, true));
        }
        r.in_flight += 1;
        r.peak = r.peak.max(r.in_flight);
        drop(r);
        self.changed.notify_waiters();
        (index, step)
    }

    fn end(&self, index: usize, answered: bool, status: Option<u16>) {
        let now = Instant::now();
        self.update(|r| {
            r.in_flight -= 1;
            if let Some(slot) = r.ended.get_mut(index) {
                *slot = Some(now);
                r.transitions.push((index, false));
            }
            if answered {
                r.answered += 1;
                if let Some(slot) = r.statuses.get_mut(index) {
                    *slot = status;
                }
            } else {
                r.abandoned.push((index, now));
            }
        });
    }

    async fn gate(&self) {
        self.wait_for(|r| r.gate_open.then_some(())).await;
    }

    /// Plays a waiting step until it answers.
    async fn play(&self, reply: Waiting) -> Reply {
        match reply {
            Waiting::Now(reply) => reply,
            Waiting::After(delay, reply) => {
                tokio::time::sleep(delay).await;
                reply
            }
            Waiting::Never => std::future::pending().await,
            Waiting::Gate(reply) => {
                self.gate().await;
                reply
            }
        }
    }
}

/// How a step answers with a [`Reply`], if it does.
enum Waiting {
    Now(Reply),
    After(Duration, Reply),
    Never,
    Gate(Reply),
}

/// A step, split into "answer with a reply" and the wire-level rest.
enum Play {
    Answer(Waiting),
    Reset,
    Raw(Bytes, Then),
}

impl From<Step> for Play {
    fn from(step: Step) -> Play {
        match step {
            Step::Reply(reply) => Play::Answer(Waiting::Now(reply)),
            Step::ReplyAfter(delay, reply) => Play::Answer(Waiting::After(delay, reply)),
            Step::Hang => Play::Answer(Waiting::Never),
            Step::Gate(reply) => Play::Answer(Waiting::Gate(reply)),
            Step::Reset => Play::Reset,
            Step::Raw(bytes, then) => Play::Raw(bytes, then),
        }
    }
}

/// Ends a call in the script's record however the call ends, so a dropped
/// call counts as abandoned.
struct InFlight<'a> {
    script: &'a Script,
    index: usize,
    answered: bool,
    status: Option<u16>,
}

impl<'a> InFlight<'a> {
    fn new(script: &'a Script, index: usize) -> InFlight<'a> {
        InFlight {
            script,
            index,
            answered: false,
            status: None,
        }
    }

    fn answered(&mut self, status: Option<u16>) {
        self.answered = true;
        self.status = status;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.script.end(self.index, self.answered, self.status);
    }
}

fn path_of(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    match after_scheme.find('/') {
        Some(i) => after_scheme[i..].to_owned(),
        None => "/".to_owned(),
    }
}

/// The script played in process: a [`Downstream`] that records the
/// delivery as sent and honours its timeout on tokio's clock (so it runs
/// on a paused clock).
pub struct FakeDownstream {
    script: Arc<Script>,
}

impl FakeDownstream {
    /// A fake that plays `script`.
    pub fn new(script: Arc<Script>) -> FakeDownstream {
        FakeDownstream { script }
    }
}

impl Downstream for FakeDownstream {
    async fn send(&self, delivery: Delivery) -> Result<DownResponse, DownError> {
        // The call as the loopback server would record it: the delivery's
        // own headers, in its order (no transport there to add `host` or
        // `content-length`).
        let header = |name: &str| delivery.header(name).map(str::to_owned);
        let (index, step) = self.script.begin(Call {
            path: path_of(&delivery.url),
            method: delivery.method.as_str().to_owned(),
            idempotency_key: header("idempotency-key"),
            task_id: header("x-task-id"),
            attempt: header("x-task-attempt").and_then(|v| v.parse().ok()),
            headers: delivery.headers.clone(),
            body: delivery.body.clone(),
            at: Instant::now(),
            connection: None,
        });
        let mut guard = InFlight::new(&self.script, index);
        let waiting = match Play::from(step) {
            Play::Answer(waiting) => waiting,
            Play::Reset => return Err(DownError::Connect("connection reset".to_owned())),
            Play::Raw(..) => {
                return Err(DownError::Other(
                    "a raw reply is played over loopback only".to_owned(),
                ));
            }
        };
        let reply = tokio::time::timeout(delivery.timeout, self.script.play(waiting))
            .await
            .map_err(|_| DownError::Timeout)?;
        guard.answered(Some(reply.status));
        Ok(DownResponse {
            status: reply.status,
            retry_after: reply.header_value("retry-after").map(str::to_owned),
            content_type: reply.header_value("content-type").map(str::to_owned),
            rate_limit: crate::port::RATE_LIMIT_HEADERS
                .into_iter()
                .filter_map(|name| Some((name, reply.header_value(name)?.to_owned())))
                .collect(),
            body: reply.body,
        })
    }
}

mod server;

pub use server::FakeServer;

#[cfg(test)]
mod tests;
