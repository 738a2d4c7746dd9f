//! The downstream the server calls: tc-downstream's one fake, served on
//! loopback ([`FakeServer`]), with a rule that answers by path (the query is
//! ignored), counting calls per `(path, Idempotency-Key)`:
//!
//! | path | answer |
//! |---|---|
//! | `/ok` | 200, the request body echoed, `application/json` |
//! | `/bytes` | 200, bytes that are not UTF-8, `application/octet-stream` |
//! | `/terminal` | 200, text with terminal escapes (OSC 52 writes the clipboard), `text/plain` |
//! | `/status/N` | always status N |
//! | `/flaky/N` | 503 for the first N calls of a key, then like `/ok` |
//! | `/retry-after/S` | 429 with `Retry-After: S` on a key's first call, then like `/ok` |
//! | `/reset/N` | a TCP reset for the first N calls of a key, then like `/ok` |
//! | `/slow` | never; the fake records when the client closes the connection |
//! | `/gate` | like `/ok` once [`Downstream::open_gate`] was called; until then held like `/slow` |
//!
//! Every request is recorded with its headers; tests wait on the record.

use std::sync::Arc;
use std::time::Duration;

use tc_downstream::fake::{Call, FakeServer, Reply, Script, Step};
use tokio::time::Instant;

/// Failure guard for waiting on an event.
const GUARD: Duration = Duration::from_secs(30);

/// A request as the downstream received it.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    /// Names lowercased.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) at: Instant,
}

impl Received {
    fn of(call: &Call) -> Received {
        Received {
            headers: call.headers.clone(),
            body: call.body.to_vec(),
            at: call.at,
        }
    }

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

fn without_query(path: &str) -> &str {
    path.split('?').next().unwrap_or("")
}

pub(crate) struct Downstream {
    script: Arc<Script>,
    server: FakeServer,
}

impl Downstream {
    pub(crate) async fn start() -> Downstream {
        Downstream::start_on([127, 0, 0, 1].into()).await
    }

    /// The same downstream on another loopback address (`127.0.0.2` is
    /// another host: another destination than one on 127.0.0.1).
    pub(crate) async fn start_on(ip: std::net::IpAddr) -> Downstream {
        let script = Script::with_rule(answer);
        let server = FakeServer::start_on(Arc::clone(&script), ip)
            .await
            .unwrap_or_else(|e| panic!("binding a downstream on {ip}: {e}"));
        Downstream { script, server }
    }

    /// Its destination as tasks carry it: `host:port`.
    pub(crate) fn destination(&self) -> String {
        self.server.addr().to_string()
    }

    /// The most requests it held at once.
    pub(crate) fn peak_in_flight(&self) -> usize {
        self.script.peak_in_flight()
    }

    /// Waits until the client closed `n` held requests in all.
    pub(crate) async fn abandoned(&mut self, n: usize) {
        self.wait_for(&format!("{n} closed connections"), |r| {
            (r.abandoned_count() >= n).then_some(())
        })
        .await
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }

    /// Lets every held and future `/gate` request through.
    pub(crate) fn open_gate(&self) {
        self.script.open_gate();
    }

    /// Every request so far.
    pub(crate) fn requests(&self) -> Vec<Received> {
        self.script
            .read(|r| r.calls().iter().map(Received::of).collect())
    }

    /// How many requests carried `key`.
    pub(crate) fn calls_with_key(&self, key: &str) -> usize {
        self.requests().iter().filter(|r| r.key() == key).count()
    }

    async fn wait_for<T>(
        &mut self,
        what: &str,
        found: impl Fn(&tc_downstream::fake::Record) -> Option<T>,
    ) -> T {
        tokio::time::timeout(GUARD, self.script.wait_for(found))
            .await
            .unwrap_or_else(|_| panic!("downstream: no {what} within 30 s"))
    }

    /// The first request with this idempotency key, waiting for it.
    pub(crate) async fn request_with_key(&mut self, key: &str) -> Received {
        self.wait_for(&format!("request with key {key:?}"), |r| {
            r.calls()
                .iter()
                .find(|c| c.idempotency_key.as_deref() == Some(key))
                .map(Received::of)
        })
        .await
    }

    /// Waits until `n` requests arrived in all.
    pub(crate) async fn requests_arrived(&mut self, n: usize) {
        self.wait_for(&format!("{n} requests"), |r| (r.count() >= n).then_some(()))
            .await
    }

    /// Waits until the client closed `n` held requests with this key.
    pub(crate) async fn closed_while_held(&mut self, key: &str, n: usize) {
        self.wait_for(&format!("{n} closed connections for key {key:?}"), |r| {
            let closed = r
                .abandoned()
                .filter(|(c, _)| c.idempotency_key.as_deref() == Some(key))
                .count();
            (closed >= n).then_some(())
        })
        .await
    }
}

/// What `/terminal` answers: an OSC 52 sequence (it would set the
/// clipboard of a terminal that prints it), a colour, a carriage return
/// and a byte that is not UTF-8, around plain lines.
pub(crate) const TERMINAL_ESCAPES: &[u8] =
    b"line 1\n\x1b]52;c;cm0gLXJmIH4=\x07\x1b[31mred\rover\xff\tend\n";

fn ok(call: &Call) -> Step {
    Step::Reply(Reply::json(200, call.body.clone()))
}

fn status(code: u16) -> Step {
    Step::Reply(Reply::json(code, format!(r#"{{"error":"status {code}"}}"#)))
}

/// What to do with a call; `earlier` calls of its key on its path came
/// before it.
fn answer(call: &Call, earlier: usize) -> Step {
    let path = without_query(&call.path);
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let n = |s: &str| s.parse::<usize>().unwrap_or(0);
    match segments.as_slice() {
        ["ok"] => ok(call),
        ["bytes"] => Step::Reply(Reply::with_body(
            200,
            "application/octet-stream",
            &[0xff, 0x00, b'b', b'i', b'n'][..],
        )),
        ["terminal"] => Step::Reply(Reply::with_body(200, "text/plain", TERMINAL_ESCAPES)),
        ["status", code] => status(code.parse().unwrap_or(500)),
        ["flaky", k] if earlier < n(k) => status(503),
        ["flaky", _] => ok(call),
        ["retry-after", secs] if earlier == 0 => Step::Reply(Reply {
            status: 429,
            headers: vec![("retry-after".to_owned(), (*secs).to_owned())],
            body: Default::default(),
        }),
        ["retry-after", _] => ok(call),
        ["reset", k] if earlier < n(k) => Step::Reset,
        ["reset", _] => ok(call),
        ["slow"] => Step::Hang,
        ["gate"] => Step::Gate(Reply::json(200, call.body.clone())),
        _ => status(404),
    }
}
