//! The one fake downstream: a [`Script`] (what to answer, per path; what was
//! seen), played two ways: in process by [`FakeDownstream`], and over real
//! loopback HTTP by [`FakeServer`] for the real client. Tests program the
//! script and read back what it saw, without knowing which way it is served.
//!
//! Every wait runs on tokio's clock, so the in-process fake is exact on a
//! paused clock (`#[tokio::test(start_paused = true)]`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::{DownError, DownRequest, DownResponse, Downstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;

/// An answer the downstream gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// A `Retry-After` header value.
    pub retry_after: Option<String>,
    /// The body (sent as `application/json`).
    pub body: String,
}

impl Reply {
    /// An answer with this status and a small JSON body.
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            retry_after: None,
            body: format!("{{\"status\":{status}}}"),
        }
    }

    /// The same answer with a `Retry-After` header.
    pub fn retry_after(mut self, value: &str) -> Reply {
        self.retry_after = Some(value.to_owned());
        self
    }
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
}

/// One call the downstream received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The request path.
    pub path: String,
    /// The `Idempotency-Key` header.
    pub idempotency_key: Option<String>,
    /// The `X-Task-Id` header.
    pub task_id: Option<String>,
    /// The `X-Task-Attempt` header.
    pub attempt: Option<u32>,
    /// When it arrived, on tokio's clock.
    pub at: Instant,
}

#[derive(Default)]
struct ScriptState {
    plans: HashMap<String, VecDeque<Step>>,
    calls: Vec<Call>,
    in_flight: usize,
    peak: usize,
    abandoned: usize,
    gate_open: bool,
}

/// The downstream's program and its record. Share it with `Arc`.
#[derive(Default)]
pub struct Script {
    state: Mutex<ScriptState>,
    changed: Notify,
}

impl Script {
    /// A script where every path answers 200 until planned otherwise.
    pub fn new() -> Arc<Script> {
        Arc::new(Script::default())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ScriptState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `steps` for calls to `path`; once they are used up, calls get 200.
    pub fn plan(&self, path: &str, steps: impl IntoIterator<Item = Step>) {
        self.state()
            .plans
            .entry(path.to_owned())
            .or_default()
            .extend(steps);
    }

    /// Every call to `path` so far, oldest first.
    pub fn calls(&self, path: &str) -> Vec<Call> {
        self.state()
            .calls
            .iter()
            .filter(|c| c.path == path)
            .cloned()
            .collect()
    }

    /// Every call so far.
    pub fn all_calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// The most calls that were in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        self.state().peak
    }

    /// Calls whose caller went away before the answer (timeout, cancel):
    /// for the loopback server, connections the client closed.
    pub fn abandoned(&self) -> usize {
        self.state().abandoned
    }

    /// Lets every [`Step::Gate`] call answer.
    pub fn open_gate(&self) {
        self.state().gate_open = true;
        self.changed.notify_waiters();
    }

    /// Waits until `ready` holds for the script's record.
    async fn wait(&self, ready: impl Fn(&ScriptState) -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if ready(&self.state()) {
                return;
            }
            changed.await;
        }
    }

    /// Waits until at least `n` calls have arrived.
    pub async fn wait_calls(&self, n: usize) {
        self.wait(|s| s.calls.len() >= n).await;
    }

    /// Waits until at least `n` calls were abandoned by their callers.
    pub async fn wait_abandoned(&self, n: usize) {
        self.wait(|s| s.abandoned >= n).await;
    }

    async fn gate(&self) {
        self.wait(|s| s.gate_open).await;
    }

    /// Records a call and picks its step.
    fn begin(&self, call: Call) -> Step {
        let step = {
            let mut s = self.state();
            let step = s
                .plans
                .get_mut(&call.path)
                .and_then(VecDeque::pop_front)
                .unwrap_or(Step::Reply(Reply::status(200)));
            s.calls.push(call);
            s.in_flight += 1;
            s.peak = s.peak.max(s.in_flight);
            step
        };
        self.changed.notify_waiters();
        step
    }

    fn end(&self, answered: bool) {
        {
            let mut s = self.state();
            s.in_flight -= 1;
            if !answered {
                s.abandoned += 1;
            }
        }
        self.changed.notify_waiters();
    }

    /// Plays a step: `Some(reply)` when it answers.
    async fn play(&self, step: Step) -> Reply {
        match step {
            Step::Reply(reply) => reply,
            Step::ReplyAfter(delay, reply) => {
                tokio::time::sleep(delay).await;
                reply
            }
            Step::Hang => std::future::pending().await,
            Step::Gate(reply) => {
                self.gate().await;
                reply
            }
        }
    }
}

/// Ends a call in the script's record however the call ends, so a dropped
/// call counts as abandoned.
struct InFlight<'a> {
    script: &'a Script,
    answered: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.script.end(self.answered);
    }
}

fn path_of(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    match after_scheme.find('/') {
        Some(i) => after_scheme[i..].to_owned(),
        None => "/".to_owned(),
    }
}

/// The script served in process: a fake [`Downstream`] that honours the
/// request's timeout on tokio's clock (so it runs on a paused clock).
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
    async fn post(&self, request: DownRequest) -> Result<DownResponse, DownError> {
        let step = self.script.begin(Call {
            path: path_of(&request.url),
            idempotency_key: Some(request.idempotency_key.clone()),
            task_id: Some(request.task_id.clone()),
            attempt: Some(request.attempt),
            at: Instant::now(),
        });
        let mut guard = InFlight {
            script: &self.script,
            answered: false,
        };
        let reply = tokio::time::timeout(request.timeout, self.script.play(step))
            .await
            .map_err(|_| DownError::Timeout)?;
        guard.answered = true;
        Ok(DownResponse {
            status: reply.status,
            retry_after: reply.retry_after,
            content_type: Some("application/json".into()),
            body: reply.body.into(),
        })
    }
}

/// The script served over HTTP/1.1 on 127.0.0.1, for the real client. A
/// hanging call ends when the client closes its connection, which the
/// script counts as abandoned: how tests see that a cancel closed it.
pub struct FakeServer {
    url: String,
    accept: tokio::task::JoinHandle<()>,
}

impl FakeServer {
    /// Binds 127.0.0.1 on a free port and serves `script` until dropped.
    pub async fn start(script: Arc<Script>) -> std::io::Result<FakeServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve_connection(stream, Arc::clone(&script)));
            }
        });
        Ok(FakeServer { url, accept })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

const MAX_HEAD: usize = 64 * 1024;

async fn serve_connection(mut stream: TcpStream, script: Arc<Script>) {
    let mut buf = Vec::with_capacity(4096);
    loop {
        let Some((call, consumed)) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        buf.drain(..consumed);
        let step = script.begin(call);
        let mut guard = InFlight {
            script: &script,
            answered: false,
        };
        // While the step plays, a read that returns means the client closed
        // (or broke) the connection: the call is abandoned.
        let mut probe = [0u8; 1];
        let reply = tokio::select! {
            reply = script.play(step) => reply,
            _ = stream.read(&mut probe) => return,
        };
        let mut head = format!(
            "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            reply.status,
            reply.body.len()
        );
        if let Some(value) = &reply.retry_after {
            head.push_str(&format!("retry-after: {value}\r\n"));
        }
        head.push_str("\r\n");
        head.push_str(&reply.body);
        if stream.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        guard.answered = true;
    }
}

/// Reads one request (head and Content-Length body); `None` at EOF or on
/// anything malformed.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(Call, usize)> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(head_len)) = req.parse(buf) {
            let header = |name: &str| {
                req.headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .and_then(|h| std::str::from_utf8(h.value).ok())
                    .map(str::to_owned)
            };
            let body_len: usize = header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let call = Call {
                path: req.path.unwrap_or("/").to_owned(),
                idempotency_key: header("idempotency-key"),
                task_id: header("x-task-id"),
                attempt: header("x-task-attempt").and_then(|v| v.parse().ok()),
                at: Instant::now(),
            };
            while buf.len() < head_len + body_len {
                if read_more(stream, buf).await? == 0 {
                    return None;
                }
            }
            return Some((call, head_len + body_len));
        }
        if buf.len() > MAX_HEAD || read_more(stream, buf).await? == 0 {
            return None;
        }
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 8192];
    let n = stream.read(&mut chunk).await.ok()?;
    buf.extend_from_slice(&chunk[..n]);
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_from_urls() {
        for (url, path) in [
            ("http://127.0.0.1:1/a/b?x=1", "/a/b?x=1"),
            ("http://h", "/"),
            ("https://h/", "/"),
        ] {
            assert_eq!(path_of(url), path, "{url}");
        }
    }

    fn request(path: &str, timeout: Duration) -> DownRequest {
        DownRequest {
            url: format!("http://127.0.0.1:9{path}"),
            body: "{}".into(),
            timeout,
            idempotency_key: "k".into(),
            task_id: "t".into(),
            attempt: 1,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_fake_plays_the_plan_then_answers_200() {
        let script = Script::new();
        script.plan(
            "/x",
            [Step::Reply(Reply::status(503).retry_after("2")), Step::Hang],
        );
        let fake = FakeDownstream::new(Arc::clone(&script));
        let first = fake
            .post(request("/x", Duration::from_secs(1)))
            .await
            .unwrap();
        assert_eq!(
            (first.status, first.retry_after.as_deref()),
            (503, Some("2"))
        );
        let started = Instant::now();
        assert_eq!(
            fake.post(request("/x", Duration::from_secs(1))).await,
            Err(DownError::Timeout)
        );
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert_eq!(
            fake.post(request("/x", Duration::from_secs(1)))
                .await
                .unwrap()
                .status,
            200
        );
        assert_eq!(script.calls("/x").len(), 3);
        assert_eq!(script.abandoned(), 1);
        assert_eq!(script.peak_in_flight(), 1);
    }

    #[cfg(feature = "hyper-client")]
    #[tokio::test]
    async fn the_loopback_server_answers_and_sees_a_dropped_call_close() {
        let script = Script::new();
        script.plan("/hang", [Step::Hang]);
        script.plan("/busy", [Step::Reply(Reply::status(429).retry_after("1"))]);
        let server = FakeServer::start(Arc::clone(&script)).await.unwrap();
        let client = crate::HyperDownstream::new(crate::DownstreamConfig::default());
        let mut req = request("/busy", Duration::from_secs(30));
        req.url = format!("{}/busy", server.url());
        let answer = client.post(req).await.unwrap();
        assert_eq!(
            (answer.status, answer.retry_after.as_deref()),
            (429, Some("1"))
        );

        let mut req = request("/hang", Duration::from_secs(30));
        req.url = format!("{}/hang", server.url());
        let call = tokio::spawn(async move { client.post(req).await });
        script.wait_calls(2).await;
        call.abort();
        tokio::time::timeout(Duration::from_secs(10), script.wait_abandoned(1))
            .await
            .expect("the server saw the connection close");
        let calls = script.calls("/hang");
        assert_eq!(calls[0].idempotency_key.as_deref(), Some("k"));
        assert_eq!(calls[0].attempt, Some(1));
    }
}
