//! A raw HTTP/1.1 server on 127.0.0.1 for the adapter's tests: it answers
//! each request with the next scripted [`Reply`] and reports what it saw —
//! connections accepted, requests received, and above all connections the
//! client closed — as [`Event`]s on a channel. [`Loopback::start_tls`]
//! serves the same over TLS.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Generous bound on waiting for an event: a failure guard, never a pause.
const EVENT_GUARD: Duration = Duration::from_secs(10);
/// A request head larger than this is a test bug, not something to wait for.
const MAX_HEAD: usize = 64 * 1024;

/// What the server does after reading a request.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// Write the bytes and wait for the next request on this connection.
    KeepAlive(&'static [u8]),
    /// Write the bytes, then close (FIN).
    Close(&'static [u8]),
    /// Write the bytes, then reset the connection (RST, SO_LINGER 0).
    Reset(&'static [u8]),
    /// Write the bytes, then only wait for the client to close.
    Hold(&'static [u8]),
}

/// A request as the server received it.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) method: String,
    pub(crate) target: String,
    /// Header names lowercased, in the order sent.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Received {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// What the server observed; a `usize` is the connection's number, from 0
/// in order of acceptance.
#[derive(Debug)]
pub(crate) enum Event {
    Accepted,
    Request(usize, Received),
    /// The client closed the connection: a read returned 0 or failed.
    ClientClosed(usize),
    /// The TLS handshake failed (the client refused the certificate, or
    /// hung up); the connection is gone.
    HandshakeFailed(usize),
}

pub(crate) struct Loopback {
    pub(crate) addr: SocketAddr,
    tls: bool,
    events: mpsc::UnboundedReceiver<Event>,
    server: JoinHandle<()>,
}

impl Loopback {
    /// Serves `script` in order, one reply per request across all
    /// connections; the last reply repeats.
    pub(crate) async fn start(script: Vec<Reply>) -> Loopback {
        Self::start_with(script, None).await
    }

    /// Like [`Self::start`], but each connection first completes a TLS
    /// handshake with `acceptor`.
    pub(crate) async fn start_tls(script: Vec<Reply>, acceptor: TlsAcceptor) -> Loopback {
        Self::start_with(script, Some(acceptor)).await
    }

    async fn start_with(script: Vec<Reply>, tls: Option<TlsAcceptor>) -> Loopback {
        assert!(!script.is_empty(), "a server needs at least one reply");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (events_tx, events) = mpsc::unbounded_channel();
        let mut script = script;
        script.reverse();
        let replies: Replies = Arc::new(Mutex::new(script));
        let is_tls = tls.is_some();
        let server = tokio::spawn(async move {
            // Dropping the set (when the server is aborted) aborts every
            // connection task with it.
            let mut connections = JoinSet::new();
            for number in 0usize.. {
                let Ok((stream, _)) = listener.accept().await else {
                    break;
                };
                let _ = events_tx.send(Event::Accepted);
                let (replies, events_tx) = (replies.clone(), events_tx.clone());
                match &tls {
                    None => connections.spawn(serve(number, stream, replies, events_tx)),
                    Some(acceptor) => {
                        let handshake = acceptor.accept(stream);
                        connections.spawn(async move {
                            match handshake.await {
                                Ok(stream) => serve(number, stream, replies, events_tx).await,
                                Err(_) => {
                                    let _ = events_tx.send(Event::HandshakeFailed(number));
                                }
                            }
                        })
                    }
                };
            }
        });
        Loopback {
            addr,
            tls: is_tls,
            events,
            server,
        }
    }

    /// The url of `path` here; over TLS its host is the IP address, which
    /// the test certificates name.
    pub(crate) fn url(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// The next event, failing the test if none comes within the guard.
    pub(crate) async fn next_event(&mut self) -> Event {
        tokio::time::timeout(EVENT_GUARD, self.events.recv())
            .await
            .expect("no server event within the guard")
            .expect("server stopped")
    }

    /// Waits for the next request, skipping `Accepted` events.
    pub(crate) async fn next_request(&mut self) -> (usize, Received) {
        for _ in 0..100 {
            match self.next_event().await {
                Event::Accepted => {}
                Event::Request(connection, request) => return (connection, request),
                Event::ClientClosed(connection) => {
                    panic!("connection {connection} closed while waiting for a request")
                }
                Event::HandshakeFailed(connection) => {
                    panic!("connection {connection}: TLS handshake failed")
                }
            }
        }
        panic!("no request among 100 events")
    }

    /// Waits until the client closes `connection`, ignoring other events.
    pub(crate) async fn client_closed(&mut self, connection: usize) {
        for _ in 0..100 {
            if let Event::ClientClosed(closed) = self.next_event().await
                && closed == connection
            {
                return;
            }
        }
        panic!("connection {connection} not closed among 100 events")
    }

    /// Connections accepted so far, from events already delivered.
    pub(crate) fn accepted_so_far(&mut self) -> usize {
        let mut accepted = 0;
        while let Ok(event) = self.events.try_recv() {
            if matches!(event, Event::Accepted) {
                accepted += 1;
            }
        }
        accepted
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The script, next reply last; the final reply is never popped, so it repeats.
type Replies = Arc<Mutex<Vec<Reply>>>;

fn next_reply(replies: &Replies) -> Reply {
    let mut stack = replies.lock().unwrap();
    if stack.len() > 1 {
        stack.pop().unwrap()
    } else {
        stack[0].clone()
    }
}

/// A served connection: plain TCP or TLS over it.
trait Conn: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    fn tcp(&self) -> &TcpStream;
}

impl Conn for TcpStream {
    fn tcp(&self) -> &TcpStream {
        self
    }
}

impl Conn for TlsStream<TcpStream> {
    fn tcp(&self) -> &TcpStream {
        self.get_ref().0
    }
}

async fn serve(
    number: usize,
    mut stream: impl Conn,
    replies: Replies,
    events: mpsc::UnboundedSender<Event>,
) {
    let mut buffer = Vec::new();
    // Each pass serves one request; a keep-alive client sends a handful.
    for _ in 0..1000 {
        let Some(request) = read_request(&mut stream, &mut buffer).await else {
            let _ = events.send(Event::ClientClosed(number));
            return;
        };
        let reply = next_reply(&replies);
        let _ = events.send(Event::Request(number, request));
        match reply {
            Reply::KeepAlive(bytes) => {
                // The flush matters over TLS, which may buffer records.
                if stream.write_all(bytes).await.is_err() || stream.flush().await.is_err() {
                    let _ = events.send(Event::ClientClosed(number));
                    return;
                }
            }
            Reply::Close(bytes) => {
                let _ = stream.write_all(bytes).await;
                let _ = stream.shutdown().await;
                return;
            }
            Reply::Reset(bytes) => {
                let _ = stream.write_all(bytes).await;
                let _ = stream.flush().await;
                stream.tcp().set_zero_linger().unwrap();
                return;
            }
            Reply::Hold(bytes) => {
                let _ = stream.write_all(bytes).await;
                let _ = stream.flush().await;
                wait_for_close(&mut stream).await;
                let _ = events.send(Event::ClientClosed(number));
                return;
            }
        }
    }
}

/// Reads until the client closes; what it sends meanwhile is discarded.
async fn wait_for_close(stream: &mut impl Conn) {
    let mut sink = [0u8; 1024];
    loop {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// One request, or `None` once the client closed. `buffer` keeps bytes read
/// past this request for the next one.
async fn read_request(stream: &mut impl Conn, buffer: &mut Vec<u8>) -> Option<Received> {
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
        assert!(buffer.len() < MAX_HEAD, "request head too large");
        read_more(stream, buffer).await?;
    };
    let head = String::from_utf8(buffer[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n").filter(|line| !line.is_empty());
    let mut request_line = lines.next().unwrap().split(' ');
    let method = request_line.next().unwrap().to_owned();
    let target = request_line.next().unwrap().to_owned();
    let headers: Vec<(String, String)> = lines
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.trim().to_ascii_lowercase(), value.trim().to_owned())
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .map_or(0, |(_, value)| value.parse().unwrap());
    while buffer.len() < head_end + length {
        read_more(stream, buffer).await?;
    }
    let body = buffer[head_end..head_end + length].to_vec();
    buffer.drain(..head_end + length);
    Some(Received {
        method,
        target,
        headers,
        body,
    })
}

async fn read_more(stream: &mut impl Conn, buffer: &mut Vec<u8>) -> Option<()> {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => None,
        Ok(read) => {
            buffer.extend_from_slice(&chunk[..read]);
            Some(())
        }
    }
}
