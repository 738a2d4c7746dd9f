//! The downstream the fuzzed tasks call: tc-downstream's fake, served on
//! loopback. It answers every call at once, `200 {"ok":true}` for about
//! three tasks in four and `400` for the rest (by a hash of the task's
//! idempotency key, so a task is answered the same way on every try): the
//! first kind succeed and have a result to fetch, the second fail and can be
//! retried, so the operations on a task's result and on its retry both have
//! real work to do.

use std::sync::Arc;

use bytes::Bytes;
use tc_downstream::fake::{FakeServer, Reply, Script, Step};

/// What the sink answers a task it lets succeed.
const OK: &[u8] = br#"{"ok":true}"#;
/// What it answers a task it fails.
const REFUSED: &[u8] = br#"{"error":"this fuzz task is answered 400"}"#;

pub(crate) struct Sink {
    script: Arc<Script>,
    server: FakeServer,
}

impl Sink {
    pub(crate) async fn start() -> Result<Sink, String> {
        let script = Script::counting(|call, _| {
            let status = if succeeds(call.idempotency_key.as_deref().unwrap_or_default()) {
                200
            } else {
                400
            };
            let body = if status == 200 { OK } else { REFUSED };
            Step::Reply(Reply::json(status, Bytes::from_static(body)))
        });
        let server = FakeServer::start(Arc::clone(&script))
            .await
            .map_err(|e| format!("the fuzz sink: {e}"))?;
        Ok(Sink { script, server })
    }

    /// Its origin, `http://127.0.0.1:PORT`: the server's allow-list.
    pub(crate) fn origin(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The calls it answered.
    pub(crate) fn answered(&self) -> usize {
        self.script.read(|r| r.answered())
    }
}

/// Whether the task with this idempotency key is answered 200.
pub(crate) fn succeeds(key: &str) -> bool {
    let hash = key
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    hash % 4 != 0
}

#[cfg(test)]
mod tests {
    use http::{HeaderValue, Method};

    use super::*;
    use crate::harness::client::{Conn, Endpoint};

    #[test]
    fn about_three_keys_in_four_succeed() {
        let ok = (0..1000).filter(|i| succeeds(&format!("key-{i}"))).count();
        assert!((650..=850).contains(&ok), "{ok} of 1000");
    }

    #[tokio::test]
    async fn it_answers_by_the_key() {
        let sink = Sink::start().await.unwrap();
        let addr = sink.server.addr();
        let endpoint = Endpoint::new(addr);
        let mut conn = Conn::open(addr).await.unwrap();
        let keys = ["a", "b", "order-42", "0"];
        assert!(keys.iter().any(|k| succeeds(k)) && keys.iter().any(|k| !succeeds(k)));
        for key in keys {
            let mut request = endpoint
                .request(Method::POST, "/hook", Some(Bytes::from_static(b"{}")))
                .unwrap();
            request
                .headers_mut()
                .insert("idempotency-key", HeaderValue::from_static(key));
            let reply = conn.send(request).await.unwrap();
            let expected = if succeeds(key) {
                (200, OK)
            } else {
                (400, REFUSED)
            };
            assert_eq!((reply.status.as_u16(), &reply.body[..]), expected, "{key}");
        }
        assert_eq!(sink.answered(), 4);
    }
}
