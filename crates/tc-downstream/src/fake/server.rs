//! The [`Script`] served over real loopback HTTP/1.1 ([`FakeServer`]), for
//! the real client: raw tokio TCP with httparse for the heads, so that it
//! sees a client closing a connection while its request is held, and can
//! send bytes no HTTP library would ([`Step::Raw`](super::Step::Raw)).

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use bytes::Bytes;
use tokio::time::Instant;

use super::{Call, InFlight, Play, Script, Then};

/// The script served over HTTP/1.1 on loopback, for the real client. A
/// held call ends when the client closes its connection, which the script
/// counts as abandoned. Stops when dropped.
pub struct FakeServer {
    addr: std::net::SocketAddr,
    scheme: &'static str,
    accept: tokio::task::JoinHandle<()>,
}

impl FakeServer {
    /// Binds 127.0.0.1 on a free port and serves `script` until dropped.
    pub async fn start(script: Arc<Script>) -> std::io::Result<FakeServer> {
        FakeServer::start_on(script, std::net::Ipv4Addr::LOCALHOST.into()).await
    }

    /// Like [`FakeServer::start`], on another address: `127.0.0.2` is a
    /// second loopback host on Linux (the whole 127.0.0.0/8 is loopback),
    /// so a test can have two downstreams that differ by host, as two
    /// destinations of the worker do.
    pub async fn start_on(
        script: Arc<Script>,
        ip: std::net::IpAddr,
    ) -> std::io::Result<FakeServer> {
        let listener = TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(async move {
            // Dropping the set (when the server is aborted) aborts every
            // connection task with it.
            let mut connections = JoinSet::new();
            for number in 0usize.. {
                tokio::select! {
                    Some(_) = connections.join_next() => {}
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { break };
                        // Answers are one write each; never hold one back.
                        let _ = stream.set_nodelay(true);
                        script.update(|r| r.connections += 1);
                        connections.spawn(serve(number, stream, Arc::clone(&script)));
                    }
                }
            }
        });
        Ok(FakeServer {
            addr,
            scheme: "http",
            accept,
        })
    }

    /// Like [`FakeServer::start`], each connection first completing a TLS
    /// handshake with `acceptor` (for the real client's https tests).
    #[cfg(test)]
    pub(crate) async fn start_tls(
        script: Arc<Script>,
        acceptor: tokio_rustls::TlsAcceptor,
    ) -> std::io::Result<FakeServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            for number in 0usize.. {
                let Ok((stream, _)) = listener.accept().await else {
                    break;
                };
                script.update(|r| r.connections += 1);
                let (script, handshake) = (Arc::clone(&script), acceptor.accept(stream));
                connections.spawn(async move {
                    match handshake.await {
                        Ok(stream) => serve(number, stream, script).await,
                        Err(_) => script.update(|r| r.handshakes_failed += 1),
                    }
                });
            }
        });
        Ok(FakeServer {
            addr,
            scheme: "https",
            accept,
        })
    }

    /// `http://<ip>:<port>` (`https://` over TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A served connection: plain TCP, or TLS over it.
trait Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    fn tcp(&self) -> &TcpStream;
}

impl Conn for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

#[cfg(test)]
impl Conn for tokio_rustls::server::TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

/// A request head larger than this is not waited for.
const MAX_HEAD: usize = 64 * 1024;

async fn serve(number: usize, mut stream: impl Conn, script: Arc<Script>) {
    let mut buf = Vec::with_capacity(4096);
    loop {
        let Some((call, consumed)) = read_request(&mut stream, &mut buf, number).await else {
            script.update(|r| r.closed.push(number));
            return;
        };
        buf.drain(..consumed);
        let (index, step) = script.begin(call);
        let mut guard = InFlight::new(&script, index);
        let waiting = match Play::from(step) {
            Play::Answer(waiting) => waiting,
            Play::Reset => {
                reset(&stream);
                return;
            }
            Play::Raw(bytes, then) => {
                let written =
                    stream.write_all(&bytes).await.is_ok() && stream.flush().await.is_ok();
                // A held call never completes: when the client gives up, it
                // is abandoned like any other.
                if written && then != Then::Hold {
                    guard.answered(None);
                }
                match then {
                    Then::KeepAlive if written => continue,
                    Then::KeepAlive | Then::Close => {
                        let _ = stream.shutdown().await;
                    }
                    Then::Reset => reset(&stream),
                    Then::Hold => {
                        drop(guard);
                        wait_for_close(&mut stream).await;
                        script.update(|r| r.closed.push(number));
                    }
                }
                return;
            }
        };
        // While the step plays, a read that returns means the client closed
        // (or broke) the connection: the call is abandoned.
        let mut probe = [0u8; 1];
        let reply = tokio::select! {
            reply = script.play(waiting) => reply,
            _ = stream.read(&mut probe) => {
                drop(guard);
                script.update(|r| r.closed.push(number));
                return;
            }
        };
        // The flush matters over TLS, which may buffer records.
        if stream.write_all(&reply.encode()).await.is_err() || stream.flush().await.is_err() {
            drop(guard);
            script.update(|r| r.closed.push(number));
            return;
        }
        guard.answered(Some(reply.status));
    }
}

fn reset(stream: &impl Conn) {
    // SO_LINGER 0: closing sends RST instead of FIN.
    let _ = stream.tcp().set_zero_linger();
}

/// Reads until the client closes; what it sends meanwhile is discarded.
async fn wait_for_close(stream: &mut impl Conn) {
    let mut sink = [0u8; 1024];
    while let Ok(n) = stream.read(&mut sink).await {
        if n == 0 {
            return;
        }
    }
}

/// Reads one request (head and Content-Length body); `None` at EOF or on
/// anything malformed.
async fn read_request(
    stream: &mut impl Conn,
    buf: &mut Vec<u8>,
    connection: usize,
) -> Option<(Call, usize)> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(head_len)) = req.parse(buf) {
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
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
            };
            let body_len: usize = header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let (path, method) = (
                req.path.unwrap_or("/").to_owned(),
                req.method.unwrap_or("").to_owned(),
            );
            while buf.len() < head_len + body_len {
                if read_more(stream, buf).await? == 0 {
                    return None;
                }
            }
            let call = Call {
                path,
                method,
                idempotency_key: header("idempotency-key"),
                task_id: header("x-task-id"),
                attempt: header("x-task-attempt").and_then(|v| v.parse().ok()),
                headers,
                body: Bytes::copy_from_slice(&buf[head_len..head_len + body_len]),
                at: Instant::now(),
                connection: Some(connection),
            };
            return Some((call, head_len + body_len));
        }
        if buf.len() > MAX_HEAD || read_more(stream, buf).await? == 0 {
            return None;
        }
    }
}

async fn read_more(stream: &mut impl Conn, buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 8192];
    let n = stream.read(&mut chunk).await.ok()?;
    buf.extend_from_slice(&chunk[..n]);
    Some(n)
}
