//! [`PgStore`]: the pool and the listener. The store port
//! ([`TaskStore`](tc_model::store::TaskStore)) is implemented part by
//! part, one file each under `store/`, each method handing its work to the
//! operation modules.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadpool_postgres::Pool;
use tc_model::store::{Guarded, StoreError, Submitted};
use tc_model::{NewTask, Timestamp};
use tokio::sync::{Notify, broadcast, watch};

use crate::batcher::{Batcher, Shape};
use crate::completions::{self, Asked};
use crate::config::{PgClock, PgConfig};
use crate::error::{OpenError, db, pool};
use crate::group_submit::{SUBMITS, Submitter};
use crate::notify::{self, Channels, PgEvent};
use crate::open::Connected;
use crate::pace::{self, Pace};
use crate::{analyze, counts, leader};

mod destinations;
mod flow_keys;
mod schedules;
mod tasks;
mod tenants;
mod topics;
mod work;

/// The longest a listing waits for older inserts of tasks to end before it
/// answers a page that stops short (see `read_ops::list`).
const LIST_HOLD: Duration = Duration::from_secs(2);

/// Completions in flight at once, and the most in one statement.
const COMPLETIONS: Shape = Shape {
    flushers: 4,
    max_batch: 256,
};

/// The PostgreSQL adapter behind [`TaskStore`](tc_model::store::TaskStore).
///
/// A pool of connections for the operations, one more connection that
/// listens for other nodes' notifications ([`PgStore::subscribe`]). Needs a
/// tokio runtime. Dropping it stops its background tasks; connections close
/// as they are released.
pub struct PgStore {
    pool: Pool,
    clock: PgClock,
    channels: Channels,
    events: broadcast::Sender<PgEvent>,
    submitted: Arc<Notify>,
    /// Set by every write that changes states: the fold of the count deltas
    /// runs only after some (see `counts`).
    states_changed: Arc<AtomicBool>,
    /// Completions, grouped into one statement while others are in flight.
    completer: Batcher<Asked, Guarded>,
    /// Single submits, grouped into one insert while others are in flight.
    submitter: Batcher<(NewTask, Timestamp), Submitted>,
    // Dropping it (with the store) ends the listener, the announcer and the
    // count fold.
    _stop: watch::Sender<bool>,
    target: String,
    /// `PgConfig::callback_result_bytes`, for the writes that end tasks.
    callback_bytes: usize,
    /// Seals the secret columns on their way in and opens them on their
    /// way out ([`PgStore::seal_with`]); none until then.
    sealer: tc_seal::Sealer,
    /// Whether this node leads upkeep now (leader.rs).
    leading: watch::Receiver<bool>,
}

impl PgStore {
    /// The store's pool, for the crate's test seams (`testing.rs`).
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Connects to the database at `url` (`postgres://` or `postgresql://`),
    /// migrating its schema under an advisory lock. A schema holding another
    /// application's tables, or written by a newer build, is refused and
    /// left untouched.
    pub async fn open(url: &str, config: PgConfig) -> Result<PgStore, OpenError> {
        let Connected {
            pg,
            tls,
            target,
            pool,
            schema,
        } = crate::open::connect(url, &config).await?;

        let channels = Channels::for_schema(&schema);
        let (events, _) = broadcast::channel(1024);
        let (stop, stopped) = watch::channel(false);
        let submitted = Arc::new(Notify::new());
        let leading = leader::start(
            pg.clone(),
            tls.clone(),
            config.leader_check,
            stopped.clone(),
        )
        .await;
        tokio::spawn(notify::listen(
            pg,
            tls,
            channels.clone(),
            events.clone(),
            stopped.clone(),
            config.listen_retry,
        ));
        tokio::spawn(notify::announce_submits(
            pool.clone(),
            channels.clone(),
            Arc::clone(&submitted),
            stopped.clone(),
        ));
        let states_changed = Arc::new(AtomicBool::new(false));
        let pace = spawn_upkeep(&pool, &states_changed, &leading, stopped);
        let completer = {
            let (pool, states_changed) = (pool.clone(), Arc::clone(&states_changed));
            let callback_bytes = config.callback_result_bytes;
            Batcher::start(COMPLETIONS, pace.clone(), move |asked| {
                completions::flush(
                    pool.clone(),
                    Arc::clone(&states_changed),
                    asked,
                    callback_bytes,
                )
            })
        };
        let submitter = {
            let submitter = Submitter {
                pool: pool.clone(),
                clock: config.clock,
                states_changed: Arc::clone(&states_changed),
                submitted: Arc::clone(&submitted),
            };
            Batcher::start(SUBMITS, pace, move |asked| submitter.clone().flush(asked))
        };
        Ok(PgStore {
            pool,
            submitter,
            clock: config.clock,
            channels,
            events,
            submitted,
            states_changed,
            completer,
            _stop: stop,
            target,
            callback_bytes: config.callback_result_bytes,
            sealer: tc_seal::Sealer::none(),
            leading,
        })
    }

    /// From now on seals every secret written with `sealer`'s first key and
    /// opens what is read with any of its keys; first, in one transaction
    /// (rows locked, so nodes starting together take turns), seals again each
    /// stored secret that is plain or under an older key. A secret none of
    /// the keys opens is refused, naming its destination or tenant (the node
    /// must not start), and nothing changes. Every node needs the same keys.
    pub async fn seal_with(
        &mut self,
        sealer: tc_seal::Sealer,
    ) -> Result<crate::SealReport, StoreError> {
        let report = self
            .write(async |tx| crate::secrets::seal_stored(tx, &sealer).await)
            .await?;
        self.sealer = sealer;
        Ok(report)
    }

    /// Runs the leader's `ANALYZE` look once, now (tests; the leader runs
    /// it every few seconds): the hot tables it analyzed.
    #[cfg(feature = "testing")]
    pub async fn analyze_stale_tables(&self) -> Result<Vec<String>, StoreError> {
        analyze::analyze_stale(&self.client().await?).await
    }

    /// Whether this node leads upkeep now, as it changes: for tests that
    /// wait for a hand-over.
    pub fn leadership(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// What other nodes (and this one) announce: submits to claim, running
    /// tasks canceled. A receiver that lags has missed some; it should treat
    /// that as a [`PgEvent::Wake`] and rely on the heartbeat for cancels.
    pub fn subscribe(&self) -> broadcast::Receiver<PgEvent> {
        self.events.subscribe()
    }

    /// The database, as logs name it (without a password).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Closes the pool's connections; operations after this fail as
    /// unavailable.
    pub fn close(&self) {
        self.pool.close();
    }

    /// The `$1` of a statement: the caller's time in caller mode, NULL (the
    /// database's clock) otherwise.
    fn stamp(&self, now: Timestamp) -> Option<i64> {
        match self.clock {
            PgClock::Caller => Some(now.as_millis()),
            PgClock::Database => None,
        }
    }

    /// Notes that states changed, for the next fold of the counts.
    fn states_changed(&self) {
        self.states_changed.store(true, Ordering::Relaxed);
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(pool)
    }

    /// Runs `body` in one read-write transaction on a pooled connection and
    /// commits it: what every write of the port shares (begin, the
    /// statements, commit, the error mapping), written once.
    async fn write<T>(
        &self,
        body: impl AsyncFnOnce(&deadpool_postgres::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let out = body(&tx).await?;
        tx.commit().await.map_err(db)?;
        Ok(out)
    }

    /// Runs `body` in one read-only snapshot and ends it: every read of
    /// one answer sees one moment.
    async fn read<T>(
        &self,
        body: impl AsyncFnOnce(&deadpool_postgres::Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut client = self.client().await?;
        let tx = read_snapshot(&mut client).await?;
        let out = body(&tx).await?;
        tx.commit().await.map_err(db)?;
        Ok(out)
    }
}

/// A read-only transaction on one snapshot (a task and its history, a page
/// and its histories, agree).
async fn read_snapshot(
    client: &mut deadpool_postgres::Object,
) -> Result<deadpool_postgres::Transaction<'_>, StoreError> {
    client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(db)
}

/// The loops that keep the store's figures current: counts folded and
/// `ANALYZE` on the upkeep leader, and the cluster's size counted on every
/// node for the grouped statements' pace, which they answer.
fn spawn_upkeep(
    pool: &Pool,
    states_changed: &Arc<AtomicBool>,
    leading: &watch::Receiver<bool>,
    stopped: watch::Receiver<bool>,
) -> watch::Receiver<Pace> {
    tokio::spawn(counts::fold_loop(
        pool.clone(),
        Arc::clone(states_changed),
        leading.clone(),
        stopped.clone(),
    ));
    tokio::spawn(analyze::analyze_loop(
        pool.clone(),
        leading.clone(),
        stopped.clone(),
    ));
    let (pace_tx, pace) = watch::channel(Pace::for_nodes(1));
    tokio::spawn(pace::count_loop(pool.clone(), pace_tx, stopped));
    pace
}

fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
