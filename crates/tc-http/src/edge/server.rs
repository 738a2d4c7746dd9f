//! The HTTP/1.1 server: an accept loop with a bound on open connections (past
//! it a connection is answered 503 at once and closed: up to 4096 such
//! refusals at a time each get their answer), a header-read
//! timeout, a write timeout (a client that stops reading loses its
//! connection), and a graceful shutdown with a time limit.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tc_model::store::TaskStore;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinHandle, JoinSet};

use crate::admin::handle_admin;
use crate::app::App;
use crate::edge::client_address::ConnectionInfo;
use crate::edge::write_timeout::WriteTimeout;
use crate::router::handle;
use crate::worker_port::Control;

/// Why the server could not start or did not end cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener has no local address (it is not bound).
    #[error("reading the listener's address: {0}")]
    LocalAddr(#[source] std::io::Error),
    /// The server's task panicked or was aborted.
    #[error("the server task ended abnormally: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// A running server. Await [`Server::wait`] after triggering the shutdown
/// future given to [`serve`]; dropping the handle leaves the server running.
#[derive(Debug)]
pub struct Server {
    local_addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Server {
    /// The address the server listens on (the real port when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Waits until the server has stopped: the shutdown future completed, the
    /// open connections finished their requests or the grace period ran out.
    pub async fn wait(self) -> Result<(), ServeError> {
        self.task.await.map_err(ServeError::Task)
    }
}

/// The longest header-read timeout passed to hyper.
const MAX_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// How long to pause after a failed accept (out of file descriptors, say),
/// so that the loop does not spin while the cause persists.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The most connections being answered "503, at the limit" at once. Each
/// costs a small task and a file descriptor for at most [`REFUSAL_LINGER`]:
/// up to this many past the limit, every one gets its answer (a probe that
/// comes during a flood of connections that never read is told 503, not
/// reset); past it, the answer is written if the socket takes it at once,
/// and the connection closed.
pub const MAX_REFUSALS_IN_FLIGHT: usize = 4096;

/// How long a refused connection gets to take its 503 and to finish
/// sending its request (read and discarded so that closing does not reset
/// the connection before the client read the answer).
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// The answer to a connection past the limit.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 83\r\n\
\r\n\
{\"error\":{\"code\":\"unavailable\",\"message\":\"too many open connections, retry later\"}}";

/// Answers 503 with `Retry-After: 1` and closes, each step bounded in time.
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let answer = async {
        stream.write_all(REFUSAL).await?;
        stream.shutdown().await?;
        // Small: thousands of refusals may linger at once.
        let mut sink = [0u8; 256];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_LINGER, answer).await;
}

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    /// Every route, up to `max_connections`.
    Api,
    /// `/healthz` and `/metrics` alone, up to `admin_max_connections`.
    Admin,
}

/// Serves `app` on `listener` until `shutdown` completes, then stops
/// accepting, lets open connections finish within
/// [`HttpConfig::shutdown_grace`](crate::HttpConfig::shutdown_grace) and drops
/// the rest. Must be called within a Tokio runtime.
pub fn serve<S, C, F>(
    listener: TcpListener,
    app: Arc<App<S, C>>,
    shutdown: F,
) -> Result<Server, ServeError>
where
    S: TaskStore,
    C: Control,
    F: Future<Output = ()> + Send + 'static,
{
    start(listener, app, shutdown, Surface::Api)
}

/// Serves only `GET /healthz` and `GET /metrics` of `app` on `listener`,
/// with a connection limit of its own
/// ([`HttpConfig::admin_max_connections`](crate::HttpConfig::admin_max_connections)),
/// so that probes and scrapes are never starved by API clients. Stops as
/// [`serve`] does.
pub fn serve_admin<S, C, F>(
    listener: TcpListener,
    app: Arc<App<S, C>>,
    shutdown: F,
) -> Result<Server, ServeError>
where
    S: TaskStore,
    C: Control,
    F: Future<Output = ()> + Send + 'static,
{
    start(listener, app, shutdown, Surface::Admin)
}

fn start<S, C, F>(
    listener: TcpListener,
    app: Arc<App<S, C>>,
    shutdown: F,
    surface: Surface,
) -> Result<Server, ServeError>
where
    S: TaskStore,
    C: Control,
    F: Future<Output = ()> + Send + 'static,
{
    let local_addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
    let task = tokio::spawn(accept_loop(listener, local_addr, app, shutdown, surface));
    Ok(Server { local_addr, task })
}

async fn accept_loop<S, C, F>(
    listener: TcpListener,
    local_addr: SocketAddr,
    app: Arc<App<S, C>>,
    shutdown: F,
    surface: Surface,
) where
    S: TaskStore,
    C: Control,
    F: Future<Output = ()> + Send + 'static,
{
    let config = app.config().clone();
    let limit = match surface {
        Surface::Api => config.max_connections,
        Surface::Admin => config.admin_max_connections,
    };
    // A permit per open connection. Past the bound a new connection gets a
    // canned 503 and is closed: waiting in the listen backlog would let
    // connections that never finish (clients that stop reading) lock every
    // newcomer out, health probes included.
    let permits = Arc::new(Semaphore::new(limit.max(1)));
    // The refusals in flight are bounded too; past that they are dropped.
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
    let serving = Serving::new(app, surface, local_addr);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);

    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(joined) = connections.join_next() => {
                if let Err(e) = joined
                    && e.is_panic()
                {
                    tracing::error!(error = %e, "http_connection_panicked");
                }
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "http_accept_failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => {
                connections.spawn(serving.connection(stream, peer, permit));
            }
            Err(_) => {
                tracing::warn!(%peer, %local_addr, limit, "http_connection_refused_at_limit");
                refuse_at_limit(&mut connections, &refusals, stream);
            }
        }
    }

    drop(listener);
    serving.wind_down(connections, config.shutdown_grace).await;
}

/// A connection past the bound: the canned 503 while the refusals in flight
/// are within theirs, else one try to write it and the connection dropped.
fn refuse_at_limit(connections: &mut JoinSet<()>, refusals: &Arc<Semaphore>, stream: TcpStream) {
    match Arc::clone(refusals).try_acquire_owned() {
        Ok(slot) => {
            connections.spawn(async move {
                refuse(stream).await;
                drop(slot);
            });
        }
        Err(_) => {
            let _ = stream.try_write(REFUSAL);
        }
    }
}

/// What every connection of one listener is served with.
struct Serving<S, C> {
    app: Arc<App<S, C>>,
    surface: Surface,
    local_addr: SocketAddr,
    builder: http1::Builder,
    graceful: GracefulShutdown,
}

impl<S: TaskStore, C: Control> Serving<S, C> {
    fn new(app: Arc<App<S, C>>, surface: Surface, local_addr: SocketAddr) -> Self {
        let mut builder = http1::Builder::new();
        // hyper adds the timeout to "now" unchecked: a huge value must not
        // panic every connection, and a day is "no limit" for a header.
        builder.timer(TokioTimer::new()).header_read_timeout(
            app.config()
                .header_read_timeout
                .min(MAX_HEADER_READ_TIMEOUT),
        );
        Serving {
            app,
            surface,
            local_addr,
            builder,
            graceful: GracefulShutdown::new(),
        }
    }

    /// One accepted connection, served under its permit until it closes or
    /// the shutdown's grace ends.
    fn connection(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        permit: OwnedSemaphorePermit,
    ) -> impl Future<Output = ()> + Send + 'static {
        let info = ConnectionInfo {
            peer,
            local: stream.local_addr().unwrap_or(self.local_addr),
        };
        let stream = WriteTimeout::new(stream, self.app.config().write_timeout);
        let app = Arc::clone(&self.app);
        let surface = self.surface;
        let service = service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(info);
            let app = Arc::clone(&app);
            async move {
                let response = match surface {
                    Surface::Api => handle(&app, req).await,
                    Surface::Admin => handle_admin(&app, req).await,
                };
                Ok::<_, Infallible>(response)
            }
        });
        let connection = self
            .graceful
            .watch(self.builder.serve_connection(TokioIo::new(stream), service));
        async move {
            if let Err(error) = connection.await {
                // Timeouts, resets and unparseable requests end here; hyper
                // has already answered what could be answered.
                tracing::debug!(%peer, %error, "http_connection_error");
            }
            drop(permit);
        }
    }

    /// After the listener closed: the open connections finish within
    /// `grace`, then whatever is left is dropped.
    async fn wind_down(self, mut connections: JoinSet<()>, grace: Duration) {
        let open = self.graceful.count();
        tracing::info!(open, local_addr = %self.local_addr, "http_server_stopping");
        if tokio::time::timeout(grace, self.graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(
                grace_ms = grace.as_millis(),
                "http_connections_dropped_after_grace"
            );
        }
        connections.shutdown().await;
        tracing::info!("http_server_stopped");
    }
}
