//! The demo's downstream: tc-downstream's one fake, served on 127.0.0.1,
//! playing the service taskcenter calls.
//!
//! - `/flaky` answers 503 to its first call and 200 (echoing the body) after;
//! - `/reject` answers 400;
//! - `/slow` never answers: it holds the request until the client drops it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use tc_downstream::fake::{Call, FakeServer, Reply, Script, Step};

/// A running demo downstream; dropping it stops the server.
pub(crate) struct DemoDownstream {
    pub(crate) script: Arc<Script>,
    server: FakeServer,
}

impl DemoDownstream {
    /// Starts the server on a free port.
    pub(crate) async fn start() -> std::io::Result<DemoDownstream> {
        let flaky_answered = AtomicBool::new(false);
        let script = Script::with_rule(move |call, _| match call.path.as_str() {
            "/flaky" if !flaky_answered.swap(true, Ordering::SeqCst) => {
                Step::Reply(Reply::json(503, &br#"{"error":"busy, try later"}"#[..]))
            }
            "/flaky" => Step::Reply(Reply::json(200, echo(call))),
            "/reject" => Step::Reply(Reply::json(400, &br#"{"error":"no such product"}"#[..])),
            "/slow" => Step::Hang,
            _ => Step::Reply(Reply::json(404, Bytes::new())),
        });
        let server = FakeServer::start(Arc::clone(&script)).await?;
        Ok(DemoDownstream { script, server })
    }

    /// The url of one of the downstream's paths.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.url())
    }
}

/// `{"accepted": <the body>}`, or the body as a string if it is not JSON.
fn echo(call: &Call) -> Bytes {
    let received = serde_json::from_slice::<serde_json::Value>(&call.body)
        .unwrap_or_else(|_| String::from_utf8_lossy(&call.body).into_owned().into());
    Bytes::from(serde_json::json!({ "accepted": received }).to_string())
}
