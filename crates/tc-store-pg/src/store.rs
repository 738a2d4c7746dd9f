//! [`PgStore`]: the pool and the listener. The store port
//! ([`TaskStore`](tc_model::store::TaskStore)) is implemented part by
//! part, one file each under `store/`, each method handing its work to the
//! operation modules.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::tls::Tls;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tc_model::store::{Guarded, StoreError, Submitted};
use tc_model::{NewTask, Timestamp};
use tokio::sync::{Notify, broadcast, watch};
use tokio_postgres::config::Host;

use crate::batcher::{Batcher, Shape};
use crate::completions::{self, Asked};
use crate::config::{PgClock, PgConfig};
use crate::error::{OpenError, db, describe, pool};
use crate::group_submit::{SUBMITS, Submitter};
use crate::notify::{self, Channels, PgEvent};
use crate::pace::{self, Pace};
use crate::{analyze, counts, leader, schema};

mod destinations;
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
    /// Connects to the database at `url` (`postgres://` or `postgresql://`),
    /// migrating its schema under an advisory lock. A schema holding another
    /// application's tables, or written by a newer build, is refused and
    /// left untouched.
    pub async fn open(url: &str, config: PgConfig) -> Result<PgStore, OpenError> {
        let (driver_url, tls) =
            crate::tls::split_url(url).map_err(|message| OpenError::BadUrl {
                target: redact(url),
                message,
            })?;
        let mut pg: tokio_postgres::Config = driver_url.parse().map_err(|e| OpenError::BadUrl {
            target: redact(url),
            message: describe(&e),
        })?;
        let target = describe_target(&pg);
        let tls = Tls::new(&tls).map_err(|message| OpenError::Tls {
            target: target.clone(),
            message,
        })?;
        tls.apply(&mut pg);
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(Duration::from_secs(5));
        }
        if pg.get_application_name().is_none() {
            pg.application_name("taskcenter");
        }
        if let Some(schema) = &config.schema {
            check_schema_name(schema, &target)?;
            create_schema(&pg, &tls, schema, &target).await?;
        }
        // A submit is answered after its COMMIT returned; synchronous_commit
        // makes that COMMIT wait for the WAL flush, whatever the server's
        // default.
        let mut options = pg.get_options().unwrap_or_default().to_owned();
        options.push_str(" -c synchronous_commit=on");
        if let Some(schema) = &config.schema {
            options.push_str(&format!(" -c search_path={schema}"));
        }
        pg.options(options.trim_start());

        let manager = Manager::from_config(
            pg.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(config.pool_size.max(1))
            .wait_timeout(Some(config.wait_timeout))
            .create_timeout(Some(config.wait_timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| OpenError::Postgres {
                target: target.clone(),
                message: format!("build the pool: {e}"),
            })?;
        schema::migrate(&pg, &tls, &target, schema::MIGRATIONS).await?;
        let client = pool.get().await.map_err(|e| OpenError::Postgres {
            target: target.clone(),
            message: format!("connect: {}", pool_message(e)),
        })?;
        let schema: String = client
            .query_one("SELECT current_schema()", &[])
            .await
            .map_err(|e| OpenError::Postgres {
                target: target.clone(),
                message: format!("read current_schema: {}", describe(&e)),
            })?
            .get(0);
        drop(client);

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
        tokio::spawn(counts::fold_loop(
            pool.clone(),
            Arc::clone(&states_changed),
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

fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn pool_message(e: deadpool_postgres::PoolError) -> String {
    match e {
        deadpool_postgres::PoolError::Backend(e) => describe(&e),
        other => other.to_string(),
    }
}

/// Schema names are spliced into options and SQL: only plain lowercase
/// identifiers are taken.
fn check_schema_name(schema: &str, target: &str) -> Result<(), OpenError> {
    let plain = !schema.is_empty()
        && schema.len() <= 48
        && schema.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain {
        Ok(())
    } else {
        Err(OpenError::Postgres {
            target: target.to_owned(),
            message: format!("schema name {schema:?} is not a plain lowercase identifier"),
        })
    }
}

async fn create_schema(
    pg: &tokio_postgres::Config,
    tls: &Tls,
    schema: &str,
    target: &str,
) -> Result<(), OpenError> {
    let fail = |doing: &str, e: tokio_postgres::Error| OpenError::Postgres {
        target: target.to_owned(),
        message: format!("{doing}: {}", describe(&e)),
    };
    let (client, connection) = pg
        .connect(tls.clone())
        .await
        .map_err(|e| fail("connect", e))?;
    let driver = tokio::spawn(connection);
    let created = match client
        .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
        .await
    {
        // Two nodes creating it at once: IF NOT EXISTS does not cover the
        // race, the catalog's unique index does; the loser finds it made.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => Ok(()),
        other => other.map_err(|e| fail("create schema", e)),
    };
    drop(client);
    let _ = driver.await;
    created
}

/// `postgres://user@host:port/db`, without a password, for logs and errors.
fn describe_target(pg: &tokio_postgres::Config) -> String {
    let host = pg
        .get_hosts()
        .first()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    let user = pg.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    let db = pg.get_dbname().unwrap_or_default();
    format!("postgres://{user}{host}:{port}/{db}")
}

/// A URL that did not parse, with anything between `:` and `@` hidden.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_never_show_a_password() {
        let check = |url: &str, want: &str| {
            let pg: tokio_postgres::Config = url.parse().unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(describe_target(&pg), want, "{url}");
        };
        check(
            "postgresql://postgres@127.0.0.1:5432/test",
            "postgres://postgres@127.0.0.1:5432/test",
        );
        check(
            "postgres://u:secret@db.internal/tc",
            "postgres://u@db.internal:5432/tc",
        );
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("no url"), "no url");
    }

    #[test]
    fn only_plain_schema_names_are_taken() {
        for good in ["tc", "tc_test_01", "_x"] {
            assert!(check_schema_name(good, "t").is_ok(), "{good}");
        }
        for bad in ["", "Tc", "1tc", "tc;drop", "a b", "tc\"x", &"x".repeat(49)] {
            assert!(check_schema_name(bad, "t").is_err(), "{bad:?}");
        }
    }
}
