//! The downstreams the bench's tasks call, served in the bench process on
//! loopback: an HTTP one that answers after a fixed delay (zero: instant),
//! and a raw TCP one that never answers and reports when each connection is
//! closed (for cancel latency).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

/// The body every HTTP downstream answers with.
pub(crate) const ANSWER: &[u8] = br#"{"ok":true}"#;

/// Aborts the accept loop (and with it every connection it serves) on drop.
struct Serving(JoinHandle<()>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[derive(Default)]
struct Served {
    count: AtomicU64,
    connections: AtomicU64,
    changed: Notify,
}

/// An HTTP/1.1 downstream that answers every request `200 {"ok":true}`
/// after `delay`, counting the requests it answered.
pub(crate) struct HttpDownstream {
    pub(crate) addr: SocketAddr,
    served: Arc<Served>,
    _serving: Serving,
}

impl HttpDownstream {
    pub(crate) async fn start(delay: Duration) -> Result<HttpDownstream, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("downstream bind: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("downstream addr: {e}"))?;
        let served = Arc::new(Served::default());
        let serving = Serving(tokio::spawn(accept_http(
            listener,
            delay,
            Arc::clone(&served),
        )));
        Ok(HttpDownstream {
            addr,
            served,
            _serving: serving,
        })
    }

    /// A task url pointing here.
    pub(crate) fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub(crate) fn served(&self) -> u64 {
        self.served.count.load(Ordering::Relaxed)
    }

    /// Connections accepted so far: far more than the caller's concurrency
    /// means its connections are not kept alive.
    pub(crate) fn connections(&self) -> u64 {
        self.served.connections.load(Ordering::Relaxed)
    }

    /// Waits until at least `n` requests were answered, or `until`; returns
    /// whether they were.
    pub(crate) async fn wait_served(&self, n: u64, until: Instant) -> bool {
        loop {
            let mut changed = pin!(self.served.changed.notified());
            // Registered before the check, so an answer in between wakes us.
            changed.as_mut().enable();
            if self.served() >= n {
                return true;
            }
            if tokio::time::timeout_at(until, changed).await.is_err() {
                return self.served() >= n;
            }
        }
    }
}

async fn accept_http(listener: TcpListener, delay: Duration, served: Arc<Served>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            Some(_) = connections.join_next() => {}
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                served.connections.fetch_add(1, Ordering::Relaxed);
                let _ = stream.set_nodelay(true);
                let served = Arc::clone(&served);
                let service = service_fn(move |request: Request<Incoming>| {
                    let served = Arc::clone(&served);
                    async move {
                        // Read the whole request as a real service would.
                        let _ = request.into_body().collect().await;
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        let mut response = Response::new(Full::new(Bytes::from_static(ANSWER)));
                        response
                            .headers_mut()
                            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                        served.count.fetch_add(1, Ordering::Relaxed);
                        served.changed.notify_waiters();
                        Ok::<_, Infallible>(response)
                    }
                });
                connections.spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    }
}

/// What the hanging downstream saw, with the instant it saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// A request's head arrived; the task id is its `X-Task-Id` header
    /// (empty if it had none).
    Arrived { task_id: String, at: Instant },
    /// The client closed (or reset) that request's connection.
    Closed { task_id: String, at: Instant },
}

/// A downstream that reads each request and never answers, and reports on
/// a channel when the caller closes the connection: the moment a cancel
/// really reached the network.
pub(crate) struct HangingDownstream {
    pub(crate) addr: SocketAddr,
    pub(crate) seen: mpsc::UnboundedReceiver<Seen>,
    _serving: Serving,
}

/// The most header bytes read before a request is taken as arrived anyway.
const MAX_HEAD: usize = 64 * 1024;

impl HangingDownstream {
    pub(crate) async fn start() -> Result<HangingDownstream, String> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| format!("hanging downstream bind: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("hanging downstream addr: {e}"))?;
        let (tx, seen) = mpsc::unbounded_channel();
        let serving = Serving(tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    Some(_) = connections.join_next() => {}
                    accepted = listener.accept() => {
                        if let Ok((stream, _)) = accepted {
                            connections.spawn(hang(stream, tx.clone()));
                        }
                    }
                }
            }
        }));
        Ok(HangingDownstream {
            addr,
            seen,
            _serving: serving,
        })
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/hang", self.addr)
    }

    /// The next event about `task_id` before `until`, skipping others'.
    pub(crate) async fn next_for(&mut self, task_id: &str, until: Instant) -> Option<Seen> {
        loop {
            let seen = tokio::time::timeout_at(until, self.seen.recv())
                .await
                .ok()??;
            let id = match &seen {
                Seen::Arrived { task_id, .. } | Seen::Closed { task_id, .. } => task_id,
            };
            if id == task_id {
                return Some(seen);
            }
        }
    }
}

async fn hang(mut stream: TcpStream, seen: mpsc::UnboundedSender<Seen>) {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    let task_id = loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if let Some(end) = find(&head, b"\r\n\r\n") {
            break task_id(&head[..end]);
        }
        if head.len() > MAX_HEAD {
            break String::new();
        }
    };
    let _ = seen.send(Seen::Arrived {
        task_id: task_id.clone(),
        at: Instant::now(),
    });
    // Drain the body and whatever else comes until the peer closes: a read
    // of 0 (FIN) or an error (RST) is the close.
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
    let _ = seen.send(Seen::Closed {
        task_id,
        at: Instant::now(),
    });
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The `X-Task-Id` header of a request head, or empty.
pub(crate) fn task_id(head: &[u8]) -> String {
    String::from_utf8_lossy(head)
        .split("\r\n")
        .skip(1)
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("x-task-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;
    use crate::bench::load::{Conn, Endpoint};

    #[test]
    fn task_ids_from_request_heads() {
        let check = |head: &str, want: &str| assert_eq!(task_id(head.as_bytes()), want, "{head}");
        check(
            "POST /hang HTTP/1.1\r\nhost: x\r\nx-task-id: abc-1\r\n",
            "abc-1",
        );
        check(
            "POST /hang HTTP/1.1\r\nX-Task-Id:  abc-2 \r\nhost: x",
            "abc-2",
        );
        check("POST /hang HTTP/1.1\r\nhost: x", "");
        // The request line is not a header even if it looks like one.
        check("x-task-id: no\r\nhost: x", "");
    }

    /// The cancel figure is only meaningful if a dropped call is seen as a
    /// closed connection: drop a request in flight, the same way the worker
    /// drops its call's future, and wait for the report.
    #[tokio::test]
    async fn a_dropped_call_is_seen_as_closed() {
        let mut down = HangingDownstream::start().await.unwrap();
        let endpoint = Endpoint::new(down.addr);
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
        let arrived = down.next_for("t-1", until).await;
        assert!(matches!(arrived, Some(Seen::Arrived { .. })), "{arrived:?}");
        call.abort();
        let closed = down.next_for("t-1", until).await;
        assert!(matches!(closed, Some(Seen::Closed { .. })), "{closed:?}");
    }

    #[tokio::test]
    async fn http_downstream_counts_answers() {
        let down = HttpDownstream::start(Duration::ZERO).await.unwrap();
        let endpoint = Endpoint::new(down.addr);
        let mut conn = Conn::open(down.addr).await.unwrap();
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
