//! The demo's downstream: a small hyper server on 127.0.0.1 that plays the
//! service taskcenter calls, and reports what it sees on a channel.
//!
//! - `/flaky` answers 503 to its first call and 200 (echoing the body) after;
//! - `/reject` answers 400;
//! - `/slow` never answers: it holds the request until the client drops it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What the downstream saw.
#[derive(Debug)]
pub(crate) enum Seen {
    /// A request arrived and was answered (or, for `/slow`, is being held).
    Call {
        path: String,
        idempotency_key: String,
        attempt: String,
        /// `None` while the request is held.
        answered: Option<u16>,
    },
    /// The client closed a connection while its request was held.
    ClosedWhileHeld { path: String },
}

/// A running demo downstream; dropping it stops the server.
pub(crate) struct DemoDownstream {
    addr: SocketAddr,
    stop: CancellationToken,
}

impl DemoDownstream {
    /// Starts the server on a free port; what it sees goes to `seen`.
    pub(crate) async fn start(
        seen: mpsc::UnboundedSender<Seen>,
    ) -> std::io::Result<DemoDownstream> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = CancellationToken::new();
        let flaky_calls = Arc::new(AtomicU32::new(0));
        tokio::spawn(accept_loop(listener, seen, flaky_calls, stop.clone()));
        Ok(DemoDownstream { addr, stop })
    }

    /// The url of one of the downstream's paths.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for DemoDownstream {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept_loop(
    listener: TcpListener,
    seen: mpsc::UnboundedSender<Seen>,
    flaky_calls: Arc<AtomicU32>,
    stop: CancellationToken,
) {
    // Dropping the set on stop aborts every connection with it.
    let mut connections = JoinSet::new();
    loop {
        let stream = tokio::select! {
            _ = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "demo_downstream_accept_failed");
                    continue;
                }
            },
        };
        let seen = seen.clone();
        let flaky_calls = Arc::clone(&flaky_calls);
        connections.spawn(async move {
            let service =
                service_fn(move |request| handle(request, seen.clone(), Arc::clone(&flaky_calls)));
            // hyper notices a client that closes mid-request and drops the
            // handler's future: that is how `/slow` sees the cancel.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(
    request: Request<Incoming>,
    seen: mpsc::UnboundedSender<Seen>,
    flaky_calls: Arc<AtomicU32>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned()
    };
    let (idempotency_key, attempt) = (header("idempotency-key"), header("x-task-attempt"));
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let (status, reply) = match path.as_str() {
        "/flaky" if flaky_calls.fetch_add(1, Ordering::SeqCst) == 0 => (
            StatusCode::SERVICE_UNAVAILABLE,
            Bytes::from_static(br#"{"error":"busy, try later"}"#),
        ),
        "/flaky" => (StatusCode::OK, echo(&body)),
        "/reject" => (
            StatusCode::BAD_REQUEST,
            Bytes::from_static(br#"{"error":"no such product"}"#),
        ),
        "/slow" => {
            let _ = seen.send(Seen::Call {
                path: path.clone(),
                idempotency_key,
                attempt,
                answered: None,
            });
            let _held = HeldRequest { path, seen };
            let never: Infallible = std::future::pending().await;
            match never {}
        }
        _ => (StatusCode::NOT_FOUND, Bytes::new()),
    };
    let _ = seen.send(Seen::Call {
        path,
        idempotency_key,
        attempt,
        answered: Some(status.as_u16()),
    });
    let mut response = Response::new(Full::new(reply));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// `{"accepted": <the body>}`, or the body as a string if it is not JSON.
fn echo(body: &[u8]) -> Bytes {
    let received = serde_json::from_slice::<serde_json::Value>(body)
        .unwrap_or_else(|_| String::from_utf8_lossy(body).into_owned().into());
    Bytes::from(serde_json::json!({ "accepted": received }).to_string())
}

/// Lives as long as a held request: hyper drops it when the client closes
/// the connection.
struct HeldRequest {
    path: String,
    seen: mpsc::UnboundedSender<Seen>,
}

impl Drop for HeldRequest {
    fn drop(&mut self) {
        let _ = self.seen.send(Seen::ClosedWhileHeld {
            path: std::mem::take(&mut self.path),
        });
    }
}
