//! The HTTP client the tools talk to a server with: one keep-alive
//! HTTP/1.1 connection ([`Conn`]) to an [`Endpoint`], whole responses.

use std::net::SocketAddr;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST, HeaderValue};
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Where requests go: the address and its `Host` header.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub(crate) addr: SocketAddr,
    host: HeaderValue,
}

impl Endpoint {
    pub(crate) fn new(addr: SocketAddr) -> Endpoint {
        let host = HeaderValue::try_from(addr.to_string())
            .unwrap_or_else(|_| HeaderValue::from_static("127.0.0.1"));
        Endpoint { addr, host }
    }

    /// A request to this endpoint; a body is sent as JSON.
    pub(crate) fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Request<Full<Bytes>>, String> {
        let uri: Uri = path.parse().map_err(|e| format!("path {path:?}: {e}"))?;
        let json = body.is_some();
        let mut request = Request::new(Full::new(body.unwrap_or_default()));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        request.headers_mut().insert(HOST, self.host.clone());
        if json {
            request
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        Ok(request)
    }
}

/// A whole response.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// One keep-alive client connection.
pub(crate) struct Conn {
    sender: http1::SendRequest<Full<Bytes>>,
    driver: JoinHandle<()>,
}

impl Conn {
    pub(crate) async fn open(addr: SocketAddr) -> Result<Conn, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("nodelay {addr}: {e}"))?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake {addr}: {e}"))?;
        let driver = tokio::spawn(async move {
            // Its error reaches the sender's next request as well.
            let _ = connection.await;
        });
        Ok(Conn { sender, driver })
    }

    /// Sends the request and reads the whole response.
    pub(crate) async fn send(&mut self, request: Request<Full<Bytes>>) -> Result<Reply, String> {
        self.sender
            .ready()
            .await
            .map_err(|e| format!("connection closed: {e}"))?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|e| format!("request failed: {e}"))?;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("reading the response: {e}"))?
            .to_bytes();
        Ok(Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}
