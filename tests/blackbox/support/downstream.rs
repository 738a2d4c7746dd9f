//! A loopback downstream on raw tokio TCP (httparse for the heads), so that
//! it sees what a hyper server would hide: a client that closes a connection
//! while its request is held.
//!
//! It answers by path (the query is ignored), counting calls per
//! `(path, Idempotency-Key)`:
//!
//! | path | answer |
//! |---|---|
//! | `/ok` | 200, the request body echoed, `application/json` |
//! | `/bytes` | 200, bytes that are not UTF-8, `application/octet-stream` |
//! | `/status/N` | always status N |
//! | `/flaky/N` | 503 for the first N calls of a key, then like `/ok` |
//! | `/retry-after/S` | 429 with `Retry-After: S` on a key's first call, then like `/ok` |
//! | `/reset/N` | a TCP reset for the first N calls of a key, then like `/ok` |
//! | `/slow` | never; reports when the client closes the connection |
//! | `/gate` | like `/ok` once [`Downstream::open_gate`] was called; until then held like `/slow` |
//!
//! Every request is recorded with its headers; tests wait on the record.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Failure guard for waiting on an event.
const GUARD: Duration = Duration::from_secs(30);
const MAX_HEAD: usize = 64 * 1024;

/// A request as the downstream received it.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) path: String,
    /// Names lowercased.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) at: Instant,
}

impl Received {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn key(&self) -> &str {
        self.header("idempotency-key").unwrap_or("")
    }
}

#[derive(Default)]
struct State {
    requests: Vec<Received>,
    calls: HashMap<(String, String), u32>,
    /// Per key, how many held requests the client closed.
    closed: HashMap<String, usize>,
}

pub(crate) struct Downstream {
    pub(crate) addr: SocketAddr,
    /// Bumped after every change to `state`: what waiters wait on.
    changed: watch::Receiver<u64>,
    state: Arc<Mutex<State>>,
    gate: watch::Sender<bool>,
    server: JoinHandle<()>,
}

impl Downstream {
    pub(crate) async fn start() -> Downstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (changed_tx, changed) = watch::channel(0);
        let state = Arc::new(Mutex::new(State::default()));
        let (gate, _) = watch::channel(false);
        let shared = Shared {
            changed: changed_tx,
            state: Arc::clone(&state),
            gate: gate.clone(),
        };
        let server = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                connections.spawn(serve(stream, shared.clone()));
                // Reap finished connections so the set does not grow.
                while connections.try_join_next().is_some() {}
            }
        });
        Downstream {
            addr,
            changed,
            state,
            gate,
            server,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Lets every held and future `/gate` request through.
    pub(crate) fn open_gate(&self) {
        self.gate.send_replace(true);
    }

    /// Every request so far.
    pub(crate) fn requests(&self) -> Vec<Received> {
        self.state.lock().unwrap().requests.clone()
    }

    /// How many requests carried `key`.
    pub(crate) fn calls_with_key(&self, key: &str) -> usize {
        self.requests().iter().filter(|r| r.key() == key).count()
    }

    /// Waits until `done` holds for the recorded state; its answer.
    async fn wait_for<T>(&mut self, what: &str, done: impl Fn(&State) -> Option<T>) -> T {
        let deadline = Instant::now() + GUARD;
        for _ in 0..1_000_000 {
            self.changed.borrow_and_update();
            if let Some(found) = done(&self.state.lock().unwrap()) {
                return found;
            }
            tokio::time::timeout_at(deadline, self.changed.changed())
                .await
                .unwrap_or_else(|_| panic!("downstream: no {what} within 30 s"))
                .expect("downstream stopped");
        }
        panic!("downstream: no {what} after a million changes")
    }

    /// The first request with this idempotency key, waiting for it.
    pub(crate) async fn request_with_key(&mut self, key: &str) -> Received {
        self.wait_for(&format!("request with key {key:?}"), |s| {
            s.requests.iter().find(|r| r.key() == key).cloned()
        })
        .await
    }

    /// Waits until `n` requests arrived in all.
    pub(crate) async fn requests_arrived(&mut self, n: usize) {
        self.wait_for(&format!("{n} requests"), |s| {
            (s.requests.len() >= n).then_some(())
        })
        .await
    }

    /// Waits until the client closed `n` held requests with this key.
    pub(crate) async fn closed_while_held(&mut self, key: &str, n: usize) {
        self.wait_for(&format!("{n} closed connections for key {key:?}"), |s| {
            (s.closed.get(key).copied().unwrap_or(0) >= n).then_some(())
        })
        .await
    }
}

impl Drop for Downstream {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[derive(Clone)]
struct Shared {
    changed: watch::Sender<u64>,
    state: Arc<Mutex<State>>,
    gate: watch::Sender<bool>,
}

impl Shared {
    fn update(&self, change: impl FnOnce(&mut State)) {
        change(&mut self.state.lock().unwrap());
        self.changed.send_modify(|version| *version += 1);
    }

    fn closed(&self, key: String) {
        self.update(|s| *s.closed.entry(key).or_insert(0) += 1);
    }
}

enum Answer {
    Reply {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    Reset,
    HoldForever,
    HoldUntilGate(Vec<u8>),
}

fn ok(body: Vec<u8>) -> Answer {
    Answer::Reply {
        status: 200,
        headers: vec![("content-type", "application/json".into())],
        body,
    }
}

fn status(code: u16) -> Answer {
    Answer::Reply {
        status: code,
        headers: vec![("content-type", "application/json".into())],
        body: format!(r#"{{"error":"status {code}"}}"#).into_bytes(),
    }
}

/// What to do with the `call`-th (1-based) call of a key on `path`.
fn answer(path: &str, call: u32, body: &[u8]) -> Answer {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let n = |s: &str| s.parse::<u32>().unwrap_or(0);
    match segments.as_slice() {
        ["ok"] => ok(body.to_vec()),
        ["bytes"] => Answer::Reply {
            status: 200,
            headers: vec![("content-type", "application/octet-stream".into())],
            body: vec![0xff, 0x00, b'b', b'i', b'n'],
        },
        ["status", code] => status(code.parse().unwrap_or(500) as u16),
        ["flaky", k] if call <= n(k) => status(503),
        ["flaky", _] => ok(body.to_vec()),
        ["retry-after", secs] if call == 1 => Answer::Reply {
            status: 429,
            headers: vec![("retry-after", (*secs).to_owned())],
            body: Vec::new(),
        },
        ["retry-after", _] => ok(body.to_vec()),
        ["reset", k] if call <= n(k) => Answer::Reset,
        ["reset", _] => ok(body.to_vec()),
        ["slow"] => Answer::HoldForever,
        ["gate"] => Answer::HoldUntilGate(body.to_vec()),
        _ => status(404),
    }
}

async fn serve(mut stream: TcpStream, shared: Shared) {
    let mut buf = Vec::new();
    // One pass per request: the server's pooled client keeps connections alive.
    for _ in 0..100_000 {
        let Some(received) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let key = received.key().to_owned();
        let path = received.path.clone();
        let mut call = 0;
        let body = received.body.clone();
        shared.update(|state| {
            state.requests.push(received);
            let count = state.calls.entry((path.clone(), key.clone())).or_insert(0);
            *count += 1;
            call = *count;
        });
        let answer = answer(&path, call, &body);
        let reply = match answer {
            Answer::Reply {
                status,
                headers,
                body,
            } => encode(status, &headers, &body),
            Answer::Reset => {
                let _ = stream.set_zero_linger();
                return;
            }
            Answer::HoldForever => {
                wait_for_close(&mut stream).await;
                shared.closed(key);
                return;
            }
            Answer::HoldUntilGate(body) => {
                let mut gate = shared.gate.subscribe();
                tokio::select! {
                    _ = gate.wait_for(|open| *open) => encode(200, &[("content-type", "application/json".into())], &body),
                    () = wait_for_close(&mut stream) => {
                        shared.closed(key);
                        return;
                    }
                }
            }
        };
        if stream.write_all(&reply).await.is_err() {
            return;
        }
    }
}

fn encode(status: u16, headers: &[(&'static str, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n", body.len());
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Reads until the peer closes (read returns 0 or fails); bytes are dropped.
async fn wait_for_close(stream: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    loop {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// One request with a Content-Length body (what the server's client sends),
/// or `None` when the connection ends first.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Received> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(head_len)) = req.parse(buf) {
            let path = req
                .path
                .unwrap_or("")
                .split('?')
                .next()
                .unwrap_or("")
                .to_owned();
            let headers: Vec<(String, String)> = req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            let len: usize = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            while buf.len() < head_len + len {
                if !read_more(stream, buf).await {
                    return None;
                }
            }
            let body = buf[head_len..head_len + len].to_vec();
            buf.drain(..head_len + len);
            return Some(Received {
                path,
                headers,
                body,
                at: Instant::now(),
            });
        }
        if buf.len() > MAX_HEAD || !read_more(stream, buf).await {
            return None;
        }
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}
