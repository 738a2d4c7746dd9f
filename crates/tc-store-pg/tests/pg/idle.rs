//! An idle node sleeps until the next due time or a wake-up: with 300
//! destinations holding tasks due in an hour, a node
//! with a running worker sends at most 20 queries a second. Counted by a
//! loopback proxy in front of PostgreSQL that reads the protocol's
//! frontend messages: each simple query (`Q`) and each execution of a
//! prepared statement (`E`) is one query.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tc_downstream::fake::{FakeDownstream, Script};
use tc_model::store::Tasks;
use tc_model::{FirstRun, Limits, NewTask, Timestamp};
use tc_store_pg::{PgConfig, PgStore};
use tc_worker::{Clock, Worker, WorkerConfig, WorkerMetrics};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::database;

/// The protocol code of an SSLRequest, sent before the startup message.
const SSL_REQUEST: u32 = 80_877_103;

/// Counts the queries in one client's byte stream as it passes.
#[derive(Default)]
struct Frontend {
    /// Bytes not yet parsed into whole messages.
    pending: Vec<u8>,
    /// Still in the untyped startup phase.
    started: bool,
}

impl Frontend {
    /// Parses what arrived; returns how many queries it held.
    fn feed(&mut self, bytes: &[u8]) -> u64 {
        self.pending.extend_from_slice(bytes);
        let mut queries = 0;
        loop {
            let header = if self.started { 5 } else { 8 };
            if self.pending.len() < header {
                return queries;
            }
            let at = usize::from(self.started);
            let len_bytes: [u8; 4] = self.pending[at..at + 4].try_into().unwrap_or([0; 4]);
            let total = at + u32::from_be_bytes(len_bytes) as usize;
            if self.pending.len() < total {
                return queries;
            }
            if self.started {
                if matches!(self.pending[0], b'Q' | b'E') {
                    queries += 1;
                }
            } else {
                let code: [u8; 4] = self.pending[4..8].try_into().unwrap_or([0; 4]);
                // Past the startup message (an SSLRequest comes before it).
                self.started = u32::from_be_bytes(code) != SSL_REQUEST;
            }
            self.pending.drain(..total);
        }
    }
}

/// A loopback proxy to `upstream` that counts every query sent through it.
async fn counting_proxy(upstream: &str, queries: Arc<AtomicU64>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let upstream = upstream.to_owned();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            let queries = Arc::clone(&queries);
            tokio::spawn(async move {
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let up = async move {
                    let mut frontend = Frontend::default();
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = client_read.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        queries.fetch_add(frontend.feed(&buf[..n]), Ordering::Relaxed);
                        if server_write.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = server_write.shutdown().await;
                };
                let down = async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                    let _ = client_write.shutdown().await;
                };
                tokio::join!(up, down);
            });
        }
    });
    addr.to_string()
}

#[test]
fn the_frontend_parser_counts_queries_and_executes_only() {
    let mut frontend = Frontend::default();
    let message = |kind: u8, body: &[u8]| {
        let mut m = vec![kind];
        m.extend_from_slice(&(4 + body.len() as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    };
    let mut stream = Vec::new();
    stream.extend_from_slice(&8u32.to_be_bytes());
    stream.extend_from_slice(&SSL_REQUEST.to_be_bytes());
    stream.extend_from_slice(&9u32.to_be_bytes());
    stream.extend_from_slice(&196_608u32.to_be_bytes());
    stream.push(0);
    stream.extend(message(b'Q', b"BEGIN\0"));
    stream.extend(message(b'P', b"\0SELECT 1\0\0\0"));
    stream.extend(message(b'B', b"\0\0\0\0\0\0\0\0"));
    stream.extend(message(b'E', b"\0\0\0\0\0"));
    stream.extend(message(b'S', b""));
    // Fed a byte at a time: messages cut anywhere are still counted once.
    let counted: u64 = stream.iter().map(|b| frontend.feed(&[*b])).sum();
    assert_eq!(counted, 2);
}

#[allow(clippy::print_stdout)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_node_with_delayed_tasks_sends_at_most_20_queries_a_second() {
    let Some(db) = database().await else { return };
    let queries = Arc::new(AtomicU64::new(0));
    let proxy = counting_proxy("127.0.0.1:5432", Arc::clone(&queries)).await;
    let url = db.url().replace("127.0.0.1:5432", &proxy);
    assert_ne!(url, db.url(), "the test database is not at 127.0.0.1:5432");
    let store = Arc::new(
        PgStore::open(
            &url,
            PgConfig {
                schema: Some(db.fresh_schema()),
                ..PgConfig::default()
            },
        )
        .await
        .unwrap(),
    );
    let now = Timestamp::from_millis(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    );
    let later = now.saturating_add(Duration::from_secs(3600));
    let tasks: Vec<NewTask> = (0..300)
        .map(|i| {
            NewTask::new(
                format!("http://host-{i:03}.invalid/"),
                b"{}".to_vec(),
                format!("idle-{i}"),
                3,
                Duration::from_secs(2),
                &Limits::default(),
            )
            .unwrap()
            .with_first_run(FirstRun::At(later))
            .unwrap()
        })
        .collect();
    for result in store.submit_many(tasks, now).await.unwrap() {
        result.unwrap();
    }
    let script = Script::new();
    let worker = Worker::spawn(
        Arc::clone(&store),
        Arc::new(FakeDownstream::new(script)),
        WorkerConfig::default(),
        Clock::system(),
        WorkerMetrics::default(),
    );
    // Let it start (recover, read settings, first claims), then count.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let window = Duration::from_secs(3);
    let before = queries.load(Ordering::Relaxed);
    tokio::time::sleep(window).await;
    let sent = queries.load(Ordering::Relaxed) - before;
    worker.shutdown().await.unwrap();
    let per_second = sent as f64 / window.as_secs_f64();
    println!("an idle node: {sent} queries in {window:?} ({per_second:.1}/s)");
    assert!(
        per_second <= 20.0,
        "an idle node sent {sent} queries in {window:?} ({per_second:.0}/s)"
    );
    drop(store);
    db.cleanup().await.unwrap();
}
