//! The downstreams the bench's tasks call: tc-downstream's one fake, served
//! in the bench process on loopback. One answers every call after a fixed
//! delay (zero: at once) and keeps counts only; one never answers and
//! records when each call's connection is closed (for cancel latency).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tc_downstream::fake::{FakeServer, Record, Reply, Script, Step};
use tokio::time::Instant;

/// The body every answering downstream sends.
pub(crate) const ANSWER: &[u8] = br#"{"ok":true}"#;

/// Answers every call `200 {"ok":true}` after `delay`, counting answers and
/// connections.
pub(crate) struct HttpDownstream {
    script: Arc<Script>,
    server: FakeServer,
}

impl HttpDownstream {
    pub(crate) async fn start(delay: Duration) -> Result<HttpDownstream, String> {
        HttpDownstream::start_on([127, 0, 0, 1].into(), delay).await
    }

    /// The same on another loopback address: `127.0.0.2` is another host,
    /// so its tasks are another destination than those of one on 127.0.0.1.
    pub(crate) async fn start_on(
        ip: std::net::IpAddr,
        delay: Duration,
    ) -> Result<HttpDownstream, String> {
        let reply = Reply::json(200, Bytes::from_static(ANSWER));
        let script = Script::counting(move |_, _| {
            if delay.is_zero() {
                Step::Reply(reply.clone())
            } else {
                Step::ReplyAfter(delay, reply.clone())
            }
        });
        let server = FakeServer::start_on(Arc::clone(&script), ip)
            .await
            .map_err(|e| format!("downstream on {ip}: {e}"))?;
        Ok(HttpDownstream { script, server })
    }

    /// A task url pointing here.
    pub(crate) fn url(&self) -> String {
        format!("{}/hook", self.server.url())
    }

    /// Its destination as tasks carry it: `host:port`.
    pub(crate) fn destination(&self) -> String {
        self.server.addr().to_string()
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        self.server.addr()
    }

    pub(crate) fn served(&self) -> u64 {
        self.script.read(|r| r.answered() as u64)
    }

    /// Connections accepted so far: far more than the caller's concurrency
    /// means its connections are not kept alive.
    pub(crate) fn connections(&self) -> u64 {
        self.script.read(|r| r.connections() as u64)
    }

    /// Waits until at least `n` requests were answered, or `until`; returns
    /// whether they were.
    pub(crate) async fn wait_served(&self, n: u64, until: Instant) -> bool {
        let served = self
            .script
            .wait_for(|r| (r.answered() as u64 >= n).then_some(()));
        tokio::time::timeout_at(until, served).await.is_ok()
    }
}

/// Reads each call and never answers; the fake records when the caller
/// closes the connection: the moment a cancel really reached the network.
pub(crate) struct HangingDownstream {
    script: Arc<Script>,
    server: FakeServer,
}

impl HangingDownstream {
    pub(crate) async fn start() -> Result<HangingDownstream, String> {
        let script = Script::with_rule(|_, _| Step::Hang);
        let server = FakeServer::start(Arc::clone(&script))
            .await
            .map_err(|e| format!("hanging downstream: {e}"))?;
        Ok(HangingDownstream { script, server })
    }

    pub(crate) fn url(&self) -> String {
        format!("{}/hang", self.server.url())
    }

    /// When the call of `task_id` arrived, waiting for it until `until`.
    pub(crate) async fn arrived(&self, task_id: &str, until: Instant) -> Option<Instant> {
        self.wait(until, |r| {
            r.calls()
                .iter()
                .find(|c| c.task_id.as_deref() == Some(task_id))
                .map(|c| c.at)
        })
        .await
    }

    /// When the caller closed the call of `task_id`, waiting until `until`.
    pub(crate) async fn closed(&self, task_id: &str, until: Instant) -> Option<Instant> {
        self.wait(until, |r| {
            r.abandoned()
                .find(|(c, _)| c.task_id.as_deref() == Some(task_id))
                .map(|(_, at)| at)
        })
        .await
    }

    async fn wait(
        &self,
        until: Instant,
        found: impl Fn(&Record) -> Option<Instant>,
    ) -> Option<Instant> {
        tokio::time::timeout_at(until, self.script.wait_for(found))
            .await
            .ok()
    }

    #[cfg(test)]
    fn addr(&self) -> std::net::SocketAddr {
        self.server.addr()
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderValue, Method};

    use super::*;
    use crate::harness::client::{Conn, Endpoint};

    /// The cancel figure is only meaningful if a dropped call is seen as a
    /// closed connection: drop a request in flight, the same way the worker
    /// drops its call's future, and wait for the record.
    #[tokio::test]
    async fn a_dropped_call_is_seen_as_closed() {
        let down = HangingDownstream::start().await.unwrap();
        let endpoint = Endpoint::new(down.addr());
        let mut request = endpoint
            .request(Method::POST, "/hang", Some(Bytes::from_static(b"{}")))
            .unwrap();
        request
            .headers_mut()
            .insert("x-task-id", HeaderValue::from_static("t-1"));
        let call = tokio::spawn(async move {
            let mut conn = Conn::open(endpoint.addr).await.unwrap();
            conn.send(request).await
        });
        let until = Instant::now() + Duration::from_secs(10);
        let arrived = down.arrived("t-1", until).await.expect("the call arrived");
        call.abort();
        let closed = down.closed("t-1", until).await.expect("its close was seen");
        assert!(closed >= arrived);
    }

    #[tokio::test]
    async fn http_downstream_counts_answers() {
        let down = HttpDownstream::start(Duration::ZERO).await.unwrap();
        let endpoint = Endpoint::new(down.addr());
        let mut conn = Conn::open(down.addr()).await.unwrap();
        for _ in 0..3 {
            let reply = conn
                .send(
                    endpoint
                        .request(Method::POST, "/hook", Some(Bytes::new()))
                        .unwrap(),
                )
                .await
                .unwrap();
            assert_eq!(reply.body, ANSWER);
        }
        let until = Instant::now() + Duration::from_secs(10);
        assert!(down.wait_served(3, until).await);
        assert_eq!(down.served(), 3);
        assert_eq!(down.connections(), 1, "one keep-alive connection");
    }
}
