//! One leader for upkeep: of all the nodes on one schema,
//! the one whose dedicated connection holds a session advisory lock runs
//! lease recovery, the count fold, pruning and `ANALYZE`; the others skip
//! them, so upkeep costs the database once however many nodes there are.
//!
//! Every node keeps one connection of its own beside the pool, which holds
//! a shared membership lock ([`MEMBER_KEY`]) for the node's count. At open it
//! tries the lock once, so a lone node leads from its first moment; a node
//! that did not get it tries again every [`crate::PgConfig::leader_check`]
//! (5 s by default), so the hand-over comes within that of the leader's
//! session ending: its process died, its connection was closed or killed,
//! its store was dropped. It does not wait inside PostgreSQL
//! (`pg_advisory_lock`): a statement waiting for a lock holds its snapshot,
//! and with it the database's cleanup horizon, for the whole wait, so while
//! a follower waited no dead row version anywhere in the database could be
//! pruned, vacuumed or dropped from an index (measured: each claim of a
//! three-node cluster walked about 2,000 dead entries of `queue_due`). A
//! leader's host that vanishes without closing its socket is found by the
//! server's TCP keepalives on this connection (about 11 s), within one lease
//! (30 s by default). The leader pings its connection every `leader_check`;
//! a ping that fails or hangs makes it stop leading at once and reconnect.
//!
//! Leadership is an economy, not a guard: every upkeep statement is safe
//! run by two nodes at once (recovery and pruning are guarded writes, the
//! fold takes its own transaction lock, `ANALYZE` only refreshes
//! statistics), so the short overlap a partition can cause (an old leader
//! that has not noticed yet) changes nothing but cost.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::describe;
use crate::tls::Tls;

/// The advisory lock's first key for upkeep leadership ("TCld"); the
/// second is the schema's name hashed, so nodes of different schemas
/// (tests) each have their own leader.
pub(crate) const LEADER_KEY: i32 = 0x5443_6c64;

/// The advisory lock's first key for membership ("TCnd", the second as
/// [`LEADER_KEY`]'s): every node's upkeep session holds it shared from
/// its start, granted at once (nobody takes it alone), so the sessions
/// holding it are the nodes (`pace.rs` counts them) without any of them
/// waiting inside PostgreSQL.
pub(crate) const MEMBER_KEY: i32 = 0x5443_6e64;

/// One dedicated connection and the task driving it.
struct Session {
    client: tokio_postgres::Client,
    driver: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        // The connection closes with its driver: PostgreSQL ends the session
        // and releases the lock for the next node.
        self.driver.abort();
    }
}

impl Session {
    async fn open(config: &tokio_postgres::Config, tls: &Tls) -> Result<Session, String> {
        let mut config = config.clone();
        // The server notices a vanished leader through keepalives; a lock
        // wait must never time out through the server's defaults.
        let mut options = config.get_options().unwrap_or_default().to_owned();
        options.push_str(
            " -c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3 \
             -c statement_timeout=0 -c lock_timeout=0 -c idle_session_timeout=0",
        );
        config.options(options.trim_start());
        config.application_name("taskcenter-upkeep");
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(5));
        let (client, connection) = config
            .connect(tls.clone())
            .await
            .map_err(|e| format!("connect: {}", describe(&e)))?;
        let driver = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %describe(&e), "store_upkeep_connection_ended");
            }
        });
        let session = Session { client, driver };
        session
            .client
            .execute(
                "SELECT pg_try_advisory_lock_shared($1, hashtext(current_schema()))",
                &[&MEMBER_KEY],
            )
            .await
            .map_err(|e| format!("join the nodes: {}", describe(&e)))?;
        Ok(session)
    }

    /// Takes the lock if nobody holds it; whether it did.
    async fn try_lock(&self) -> Result<bool, String> {
        self.client
            .query_one(
                "SELECT pg_try_advisory_lock($1, hashtext(current_schema()))",
                &[&LEADER_KEY],
            )
            .await
            .and_then(|row| row.try_get(0))
            .map_err(|e| format!("try the lock: {}", describe(&e)))
    }

    /// Tries the lock every `every` until it gets it (unless `leading` says
    /// it is held already), then leads and pings every `every` until the
    /// session fails.
    async fn lead(&self, leading: &watch::Sender<bool>, every: Duration) -> Result<(), String> {
        while !*leading.borrow() {
            let tried = tokio::time::timeout(every, self.try_lock()).await;
            if tried.map_err(|_| "try the lock: no answer".to_owned())?? {
                leading.send_replace(true);
                tracing::info!("store_upkeep_leader");
            } else {
                tokio::time::sleep(every).await;
            }
        }
        loop {
            tokio::time::sleep(every).await;
            match tokio::time::timeout(every, self.client.simple_query("SELECT 1")).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(format!("ping: {}", describe(&e))),
                Err(_) => return Err("ping: no answer".to_owned()),
            }
        }
    }
}

/// Tries the lock once (a lone node leads as soon as it is open), then
/// keeps leading or waiting for the lead in the background until `stop`
/// changes or its sender is gone. The receiver says whether this node
/// leads now.
pub(crate) async fn start(
    config: tokio_postgres::Config,
    tls: Tls,
    every: Duration,
    stop: watch::Receiver<bool>,
) -> watch::Receiver<bool> {
    let (leading, led) = watch::channel(false);
    let first = match Session::open(&config, &tls).await {
        Ok(session) => {
            match session.try_lock().await {
                Ok(true) => {
                    leading.send_replace(true);
                    tracing::info!("store_upkeep_leader");
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "store_upkeep_lock_failed"),
            }
            Some(session)
        }
        Err(e) => {
            tracing::warn!(error = %e, "store_upkeep_lock_failed");
            None
        }
    };
    tokio::spawn(run(config, tls, leading, first, every, stop));
    led
}

async fn run(
    config: tokio_postgres::Config,
    tls: Tls,
    leading: watch::Sender<bool>,
    mut session: Option<Session>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let every = every.max(Duration::from_millis(10));
    loop {
        let held = match session.take() {
            Some(held) => Some(held),
            None => {
                tokio::select! {
                    opened = Session::open(&config, &tls) => opened
                        .inspect_err(|e| tracing::warn!(error = %e, "store_upkeep_lock_failed"))
                        .ok(),
                    _ = stop.changed() => None,
                }
            }
        };
        if let Some(held) = held {
            tokio::select! {
                ended = held.lead(&leading, every) => {
                    if let Err(e) = ended {
                        tracing::warn!(error = %e, "store_upkeep_lock_lost");
                    }
                }
                _ = stop.changed() => {}
            }
            // Before the session closes: another node may lead from then on.
            if leading.send_replace(false) {
                tracing::info!("store_upkeep_leader_no_more");
            }
            drop(held);
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if stop.has_changed().is_err() {
            return;
        }
    }
}
