//! The reference servers, each run by the bench as a child process of its
//! own (`xtask bench --peer ...`), like tc-server:
//!
//! - **noop**: reads the submit request and answers the very bytes tc-server
//!   answered to one (status, `Content-Type`, `Location`, body), doing
//!   nothing else: what HTTP alone costs on this machine.
//! - **naive**: the pattern taskcenter replaces: parse the submission, spawn
//!   the downstream call and forget it, answer at once. No store, no retry,
//!   no record: what durability costs is the difference.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue, LOCATION};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use super::args::{PeerArgs, PeerKind};

struct Canned {
    body: Bytes,
    location: HeaderValue,
}

/// Serves until the process is killed or its stdin closes (the bench holds
/// the other end: if the bench dies, so do its servers). Prints tc-server's
/// `listening` line (JSON with `addr`) on stdout once bound.
pub(crate) fn serve(args: PeerArgs) -> Result<(), String> {
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        std::process::exit(0);
    });
    let body = std::fs::read(&args.response_body)
        .map_err(|e| format!("reading {}: {e}", args.response_body.display()))?;
    let location =
        HeaderValue::try_from(args.location.as_str()).map_err(|e| format!("--location: {e}"))?;
    let canned = Arc::new(Canned {
        body: Bytes::from(body),
        location,
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    runtime.block_on(accept(args.kind, canned))
}

async fn accept(kind: PeerKind, canned: Arc<Canned>) -> Result<(), String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| format!("addr: {e}"))?;
    println!(
        "{}",
        serde_json::json!({ "message": "listening", "addr": addr.to_string() })
    );
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let canned = Arc::clone(&canned);
        let client = client.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            let canned = Arc::clone(&canned);
            let client = client.clone();
            async move { Ok::<_, Infallible>(answer(kind, &canned, &client, request).await) }
        });
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn answer(
    kind: PeerKind,
    canned: &Canned,
    client: &Client<HttpConnector, Full<Bytes>>,
    request: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if request.method() != Method::POST || request.uri().path() != "/tasks" {
        return status(StatusCode::NOT_FOUND);
    }
    let Ok(body) = request.into_body().collect().await else {
        return status(StatusCode::BAD_REQUEST);
    };
    if kind == PeerKind::Naive {
        let Some(call) = downstream_call(&body.to_bytes()) else {
            return status(StatusCode::BAD_REQUEST);
        };
        let pending = client.request(call);
        // Fire and forget: nobody learns whether it worked.
        tokio::spawn(async move {
            if let Ok(response) = pending.await {
                let _ = response.into_body().collect().await;
            }
        });
    }
    let mut response = Response::new(Full::new(canned.body.clone()));
    *response.status_mut() = StatusCode::CREATED;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(LOCATION, canned.location.clone());
    response
}

/// The downstream request a submission asks for: POST its `json` to its
/// `url`.
fn downstream_call(submission: &[u8]) -> Option<Request<Full<Bytes>>> {
    let value: serde_json::Value = serde_json::from_slice(submission).ok()?;
    let url: http::Uri = value.get("url")?.as_str()?.parse().ok()?;
    let json = value
        .get("json")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    let body = serde_json::to_vec(&json).ok()?;
    let mut request = Request::new(Full::new(Bytes::from(body)));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = url;
    request
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Some(request)
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_naive_peer_posts_the_json_to_the_url() {
        let call = downstream_call(br#"{"url":"http://127.0.0.1:9/h","json":{"n":1}}"#).unwrap();
        assert_eq!(call.uri(), "http://127.0.0.1:9/h");
        assert_eq!(call.method(), Method::POST);
        let call = downstream_call(br#"{"url":"http://127.0.0.1:9/h"}"#).unwrap();
        assert_eq!(call.uri().path(), "/h");
        for bad in [&b"{}"[..], b"not json", br#"{"url":5}"#, br#"{"url":"::"}"#] {
            assert!(
                downstream_call(bad).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
