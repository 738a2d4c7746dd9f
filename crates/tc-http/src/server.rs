//! The HTTP/1.1 server: an accept loop with a bound on open connections, a
//! header-read timeout, and a graceful shutdown with a time limit.

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
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

use crate::app::{App, handle};
use crate::control::Control;

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
    let local_addr = listener.local_addr().map_err(ServeError::LocalAddr)?;
    let task = tokio::spawn(accept_loop(listener, app, shutdown));
    Ok(Server { local_addr, task })
}

async fn accept_loop<S, C, F>(listener: TcpListener, app: Arc<App<S, C>>, shutdown: F)
where
    S: TaskStore,
    C: Control,
    F: Future<Output = ()> + Send + 'static,
{
    let config = app.config().clone();
    // A permit per open connection: past the bound, connections wait in the
    // kernel's listen backlog instead of costing memory here.
    let permits = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut builder = http1::Builder::new();
    // hyper adds the timeout to "now" unchecked: a huge value must not panic
    // every connection, and a day is "no limit" for a header.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout.min(MAX_HEADER_READ_TIMEOUT));
    let mut shutdown = pin!(shutdown);

    loop {
        let permit = tokio::select! {
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
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                // The semaphore is never closed; leaving is the safe reading.
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "http_accept_failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let app = Arc::clone(&app);
        let service = service_fn(move |req| {
            let app = Arc::clone(&app);
            async move { Ok::<_, Infallible>(handle(&app, req).await) }
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        connections.spawn(async move {
            if let Err(error) = connection.await {
                // Timeouts, resets and unparseable requests end here; hyper
                // has already answered what could be answered.
                tracing::debug!(%peer, %error, "http_connection_error");
            }
            drop(permit);
        });
    }

    drop(listener);
    let open = graceful.count();
    tracing::info!(open, "http_server_stopping");
    if tokio::time::timeout(config.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_ms = config.shutdown_grace.as_millis(),
            "http_connections_dropped_after_grace"
        );
    }
    connections.shutdown().await;
    tracing::info!("http_server_stopped");
}
