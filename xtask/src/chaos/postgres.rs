//! `cargo xtask chaos --store postgres`: two nodes on a throwaway
//! PostgreSQL cluster of the run's own (never the shared server), under the
//! same mixed load as on SQLite. Each round, at a random moment, one of:
//!
//! - a node killed with SIGKILL (then started again);
//! - PostgreSQL restarted (`pg_ctl restart -m fast`, what
//!   `pg_ctlcluster … restart` does);
//! - PostgreSQL stopped for 5 s, then started again.
//!
//! Through the database's absence the nodes must stay up (a node that exits
//! by itself fails the run), answer `/healthz` 503 with a reason while it
//! is away (checked on every node in a stop round), and answer 200 again
//! once it is back, having reconnected by themselves.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use tc_testkit::pg_cluster::{PgCluster, Stop};

use super::ledger::{self, Load};
use crate::harness::client::{Conn, Endpoint};
use crate::harness::server::ServerProcess;

const NODES: usize = 2;
/// How long PostgreSQL stays away in a stop round.
const AWAY: Duration = Duration::from_secs(5);
/// How long a node may take to answer `/healthz` 200 once the database is
/// back (its pool's connect timeout is 5 s).
const BACK_WITHIN: Duration = Duration::from_secs(30);
/// The bound on one `/healthz` request (it answers within 2 s by design).
const HEALTH_GUARD: Duration = Duration::from_secs(5);

/// What a round does to the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// SIGKILL to this node.
    KillNode(usize),
    /// PostgreSQL restarted.
    RestartPostgres,
    /// PostgreSQL stopped for [`AWAY`], then started.
    StopPostgres,
}

/// What the rounds saw, for the closing line.
#[derive(Default)]
struct Tally {
    kills: usize,
    restarts: usize,
    stops: usize,
    /// The longest a node took to answer 200 after the database came back.
    slowest_back: Duration,
    /// One reason a node gave for 503 while the database was away.
    reason: Option<String>,
}

pub(super) async fn chaos(binary: &Path, rounds: usize, seed: u64) -> Result<(), String> {
    let cluster = Arc::new(blocking(|| PgCluster::start(&[])).await?);
    let db = PathBuf::from(cluster.url());
    eprintln!("[chaos] a throwaway PostgreSQL at {}", cluster.url());
    let load = Load::start().await?;
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    let mut nodes: Vec<Option<ServerProcess>> = Vec::new();
    for _ in 0..NODES {
        nodes.push(Some(super::start(binary, &db)?));
    }
    let mut tally = Tally::default();

    for round in 0..rounds {
        let endpoints: Vec<Endpoint> = nodes
            .iter()
            .flatten()
            .map(|n| Endpoint::new(n.addr))
            .collect();
        let clients = load.clients(&endpoints, round, &mut rng);
        let after = Duration::from_millis(rng.u64(200..1500));
        tokio::time::sleep(after).await;
        let failure = match rng.usize(..3) {
            0 => Failure::KillNode(rng.usize(..NODES)),
            1 => Failure::RestartPostgres,
            _ => Failure::StopPostgres,
        };
        // When the database was back, in a round that took it away.
        let mut back_at = None;
        match failure {
            Failure::KillNode(i) => {
                if let Some(node) = nodes[i].take() {
                    node.stop();
                }
                tally.kills += 1;
            }
            Failure::RestartPostgres => {
                let cluster = Arc::clone(&cluster);
                blocking(move || cluster.restart(Stop::Fast)).await?;
                back_at = Some(Instant::now());
                tally.restarts += 1;
            }
            Failure::StopPostgres => {
                let away = Instant::now();
                {
                    let cluster = Arc::clone(&cluster);
                    blocking(move || cluster.stop(Stop::Fast)).await?;
                }
                for node in nodes.iter().flatten() {
                    let reason = unhealthy(node.addr, AWAY).await?;
                    tally.reason.get_or_insert(reason);
                }
                tokio::time::sleep(AWAY.saturating_sub(away.elapsed())).await;
                let cluster = Arc::clone(&cluster);
                blocking(move || cluster.resume()).await?;
                back_at = Some(Instant::now());
                tally.stops += 1;
            }
        }
        ledger::join(clients).await?;
        if let Failure::KillNode(i) = failure {
            nodes[i] = Some(super::start(binary, &db)?);
        }
        for (i, node) in nodes.iter_mut().enumerate() {
            let node = node.as_mut().ok_or("a node was not started again")?;
            if let Some(status) = node.exited() {
                return Err(format!("VIOLATION: node {i} exited by itself ({status})"));
            }
            let ok_at = healthy(node.addr)
                .await
                .map_err(|e| format!("node {i}: {e}"))?;
            if let Some(back_at) = back_at {
                tally.slowest_back = tally.slowest_back.max(ok_at.duration_since(back_at));
            }
        }
        eprintln!(
            "[chaos] round {}/{rounds}: {failure:?} after {after:?}; {} tasks acknowledged so far",
            round + 1,
            load.acknowledged()
        );
    }

    let first = nodes[0].as_ref().ok_or("no first node")?;
    let endpoint = Endpoint::new(first.addr);
    let mut conn = Conn::open(first.addr).await?;
    let report = load.finish(&mut conn, &endpoint).await;
    for (i, node) in nodes.iter_mut().enumerate() {
        if let Some(status) = node.as_mut().and_then(ServerProcess::exited) {
            return Err(format!("VIOLATION: node {i} exited by itself ({status})"));
        }
    }
    drop(nodes);
    println!(
        "chaos (postgres, {NODES} nodes): {rounds} rounds in {:.1?}: {} node kills, {} PostgreSQL restarts, {} stops of {AWAY:?}; while away every node answered /healthz 503 ({}), and 200 again at most {:.1?} after it was back; {}",
        started.elapsed(),
        tally.kills,
        tally.restarts,
        tally.stops,
        tally.reason.as_deref().unwrap_or("no stop round"),
        tally.slowest_back,
        load.summary()
    );
    println!("{}", report?);
    Ok(())
}

/// Runs a blocking call (`pg_ctl`) off the runtime's threads.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| format!("a blocking call panicked: {e}"))?
}

/// `GET /healthz` once: its status and its `reason`.
async fn health(addr: std::net::SocketAddr) -> Result<(u16, String), String> {
    let ask = async {
        let mut conn = Conn::open(addr).await?;
        let reply = conn
            .send(Endpoint::new(addr).request(Method::GET, "/healthz", None)?)
            .await?;
        let body: serde_json::Value = serde_json::from_slice(&reply.body)
            .map_err(|e| format!("/healthz answered no JSON: {e}"))?;
        Ok((
            reply.status.as_u16(),
            body["reason"].as_str().unwrap_or("").to_owned(),
        ))
    };
    tokio::time::timeout(HEALTH_GUARD, ask)
        .await
        .map_err(|_| format!("/healthz did not answer within {HEALTH_GUARD:?}"))?
}

/// Waits (within `limit`) for the node to answer 503 with a reason while
/// the database is away; the reason.
async fn unhealthy(addr: std::net::SocketAddr, limit: Duration) -> Result<String, String> {
    let deadline = Instant::now() + limit;
    let mut last = None;
    while Instant::now() < deadline {
        match health(addr).await {
            Ok((503, reason)) if !reason.is_empty() => return Ok(reason),
            seen => last = Some(seen),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "VIOLATION: the node at {addr} did not answer /healthz 503 with a reason while PostgreSQL was away (last: {last:?})"
    ))
}

/// Waits (within [`BACK_WITHIN`]) for the node to answer `/healthz` 200;
/// when it did.
async fn healthy(addr: std::net::SocketAddr) -> Result<Instant, String> {
    let asked = Instant::now();
    let mut last = None;
    while asked.elapsed() < BACK_WITHIN {
        match health(addr).await {
            Ok((200, _)) => return Ok(Instant::now()),
            seen => last = Some(seen),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "VIOLATION: /healthz not 200 within {BACK_WITHIN:?} of PostgreSQL being back (last: {last:?})"
    ))
}
