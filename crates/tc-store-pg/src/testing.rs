//! Test support: a PostgreSQL for tests, one fresh schema per store.
//!
//! The database comes from `TC_TEST_POSTGRES_URL` (default
//! [`DEFAULT_TEST_URL`]). When it cannot be reached, [`TestDatabase::connect`]
//! answers [`Skip`], whose text (`skipped: no PostgreSQL at <url>`) a suite
//! prints once before passing, unless `TC_REQUIRE_POSTGRES=1` (CI), where an
//! unreachable database fails the suite instead.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio_postgres::NoTls;

use crate::{OpenError, PgConfig, PgStore};

/// The test database when `TC_TEST_POSTGRES_URL` is not set.
pub const DEFAULT_TEST_URL: &str = "postgresql://postgres@127.0.0.1:5432/test";

/// The test database's URL.
pub fn test_url() -> String {
    std::env::var("TC_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| DEFAULT_TEST_URL.to_owned())
}

/// Whether an unreachable test database must fail the run (`TC_REQUIRE_POSTGRES=1`).
pub fn required() -> bool {
    std::env::var("TC_REQUIRE_POSTGRES").is_ok_and(|v| v == "1")
}

/// No PostgreSQL to test on, and none required.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("skipped: no PostgreSQL at {url}")]
pub struct Skip {
    /// The URL tried.
    pub url: String,
}

/// A reachable test database; every store it opens gets a schema of its own,
/// all dropped by [`TestDatabase::cleanup`].
pub struct TestDatabase {
    url: String,
    schemas: Mutex<Vec<String>>,
}

impl TestDatabase {
    /// Connects to the test database, or says why the suite is skipped.
    ///
    /// # Panics
    /// When the database is unreachable and [`required`].
    pub async fn connect() -> Result<TestDatabase, Skip> {
        let url = test_url();
        match probe(&url).await {
            Ok(()) => Ok(TestDatabase {
                url,
                schemas: Mutex::new(Vec::new()),
            }),
            Err(message) if required() => {
                panic!("TC_REQUIRE_POSTGRES=1 but PostgreSQL at {url} is unreachable: {message}")
            }
            Err(_) => Err(Skip { url }),
        }
    }

    /// The database's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A fresh schema name, remembered for [`TestDatabase::cleanup`].
    pub fn fresh_schema(&self) -> String {
        let name = format!(
            "tc_test_{:016x}{:08x}",
            fastrand::u64(..),
            fastrand::u32(..)
        );
        self.schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(name.clone());
        name
    }

    /// Opens a store on a fresh schema with `config` (its `schema` replaced).
    pub async fn open(&self, config: PgConfig) -> Result<PgStore, OpenError> {
        let schema = self.fresh_schema();
        PgStore::open(
            &self.url,
            PgConfig {
                schema: Some(schema),
                ..config
            },
        )
        .await
    }

    /// A fresh schema laid out as a build of schema `version` left it: the
    /// first `version` migration steps (a step's result is never edited, so
    /// this is what older builds left), run as a node runs them, with the
    /// version row. For upgrade tests.
    ///
    /// # Panics
    /// When `version` is beyond [`crate::SCHEMA_VERSION`].
    pub async fn schema_at(&self, version: usize) -> Result<String, String> {
        let schema = self.fresh_schema();
        self.execute(&format!("CREATE SCHEMA {schema}")).await?;
        // The URL's TLS settings as a node reads them (the driver's mode
        // included: a connector without the mode would refuse a server that
        // offers TLS).
        let (url, tls) = crate::tls::split_url(&self.url)?;
        let tls = crate::tls::Tls::new(&tls)?;
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| format!("{e}"))?;
        tls.apply(&mut config);
        config.options(format!("-c search_path={schema}"));
        let target = format!("test schema {schema}");
        crate::schema::migrate(
            &config,
            &tls,
            &target,
            &crate::schema::MIGRATIONS[..version],
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(schema)
    }

    /// Runs SQL on the test database outside any store (to build a foreign
    /// schema, or to look at one).
    pub async fn execute(&self, sql: &str) -> Result<(), String> {
        let (client, connection) = connect(&self.url).await?;
        let driver = tokio::spawn(connection);
        let done = client
            .batch_execute(sql)
            .await
            .map_err(|e| crate::error::describe(&e));
        drop(client);
        let _ = driver.await;
        done
    }

    /// Runs a query on the test database outside any store and answers the
    /// first column of its first row as an integer (`None` for no row or
    /// NULL), for a bench's readings of the server's statistics.
    pub async fn query_i64(&self, sql: &str) -> Result<Option<i64>, String> {
        self.query_first(sql).await
    }

    /// As [`TestDatabase::query_i64`], for a text column.
    pub async fn query_text(&self, sql: &str) -> Result<Option<String>, String> {
        self.query_first(sql).await
    }

    async fn query_first<T>(&self, sql: &str) -> Result<Option<T>, String>
    where
        T: for<'a> tokio_postgres::types::FromSql<'a>,
    {
        let (client, connection) = connect(&self.url).await?;
        let driver = tokio::spawn(connection);
        let answer = client
            .query_opt(sql, &[])
            .await
            .map_err(|e| crate::error::describe(&e))
            .and_then(|row| match row {
                Some(row) => row
                    .try_get::<_, Option<T>>(0)
                    .map_err(|e| crate::error::describe(&e)),
                None => Ok(None),
            });
        drop(client);
        let _ = driver.await;
        answer
    }

    /// Drops every schema this database handed out.
    pub async fn cleanup(&self) -> Result<(), String> {
        let schemas =
            std::mem::take(&mut *self.schemas.lock().unwrap_or_else(PoisonError::into_inner));
        if schemas.is_empty() {
            return Ok(());
        }
        // A few schemas per statement: one multi-statement string is one
        // implicit transaction, whose locks (one per table, index and
        // sequence of every schema) outgrew the server's lock table once
        // the contract made some 70 schemas of some 20 tables each.
        for chunk in schemas.chunks(8) {
            let sql: String = chunk
                .iter()
                .map(|s| format!("DROP SCHEMA IF EXISTS {s} CASCADE;"))
                .collect();
            self.execute(&sql).await?;
        }
        Ok(())
    }
}

async fn connect(
    url: &str,
) -> Result<
    (
        tokio_postgres::Client,
        tokio_postgres::Connection<tokio_postgres::Socket, tokio_postgres::tls::NoTlsStream>,
    ),
    String,
> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|e| format!("{e}"))?;
    config.connect_timeout(Duration::from_secs(3));
    config
        .connect(NoTls)
        .await
        .map_err(|e| crate::error::describe(&e))
}

async fn probe(url: &str) -> Result<(), String> {
    let (client, connection) = connect(url).await?;
    let driver = tokio::spawn(connection);
    let done = client
        .simple_query("SELECT 1")
        .await
        .map(drop)
        .map_err(|e| crate::error::describe(&e));
    drop(client);
    let _ = driver.await;
    done
}

/// How many nodes `store` counts on its schema now, as it sizes its
/// grouped statements by them (pace.rs).
pub async fn nodes_counted(store: &PgStore) -> Result<usize, tc_model::store::StoreError> {
    crate::pace::count_nodes(store.pool()).await
}

/// One of the store's hot statements as it sends it, for `EXPLAIN` tests
/// (`PREPARE hot AS <sql>; EXPLAIN EXECUTE hot(<args>)`).
pub struct HotStatement {
    /// What it is.
    pub name: &'static str,
    /// Its text.
    pub sql: &'static str,
    /// Arguments to plan it with, as SQL (a task id that may not exist).
    pub args: &'static str,
}

/// The statements every task passes through: a batch submit's insert and
/// its read of taken keys, the claim (of any tenant, of one tenant, the
/// due tenants, the due flow keys, a capped destination's count), the
/// grouped completion, the claim's settle of one destination, and
/// recovery (which finds running tasks without the lease's index).
pub fn hot_statements() -> [HotStatement; 11] {
    [
        HotStatement {
            name: "submit batch: insert",
            sql: crate::write_ops::INSERT_BATCH,
            args: hot_args::INSERT,
        },
        HotStatement {
            name: "submit batch: taken keys",
            sql: crate::write_ops::BY_KEYS,
            args: "ARRAY['k-1', 'k-2'], ARRAY['', '']",
        },
        HotStatement {
            name: "claim: any priority above 0",
            sql: crate::priority::HAS_PRIORITIZED,
            args: "NULL, 'h:80', NULL",
        },
        HotStatement {
            name: "claim",
            sql: crate::write_ops::CLAIM,
            args: "NULL, 32, 30000, 'h:80'",
        },
        HotStatement {
            name: "claim: a tenant's tasks",
            sql: crate::write_ops::CLAIM_OF_TENANT,
            args: "NULL, 32, 30000, 'h:80', 'acme'",
        },
        HotStatement {
            name: "claim: the due tenants",
            sql: crate::write_ops::DUE_TENANTS,
            args: "NULL, 'h:80'",
        },
        HotStatement {
            name: "claim: the due flow keys",
            sql: crate::flow_keys::DUE_KEYS,
            args: "NULL, 'h:80', ''",
        },
        HotStatement {
            name: "claim: a capped destination's running tasks",
            sql: crate::write_ops::COUNT_RUNNING,
            args: "ARRAY['h:80']",
        },
        HotStatement {
            name: SETTLE_ONE,
            sql: crate::destinations::SETTLE_ONE,
            args: "'h:80', NULL",
        },
        HotStatement {
            name: "complete (grouped)",
            sql: crate::completions::COMPLETE_MANY,
            args: hot_args::COMPLETE,
        },
        HotStatement {
            name: "recovery",
            sql: crate::write_ops::RECOVER,
            args: "NULL, 'interrupted', true, 256",
        },
    ]
}

/// The name in [`hot_statements`] of the claim's settle of one destination.
pub const SETTLE_ONE: &str = "claim: settle one destination";

/// Arguments too long to write inline.
mod hot_args {
    /// For `INSERT_BATCH`: one item.
    pub(super) const INSERT: &str = "NULL, ARRAY[0]::bigint[], \
        ARRAY['\\x0123456789abcdef0123456789abcdef'::bytea], ARRAY['k-1'], \
        ARRAY['http://h/x'], ARRAY['\\x7b7d'::bytea], ARRAY[3], ARRAY[1000000000]::bigint[], \
        ARRAY[NULL]::bigint[], ARRAY[NULL]::bigint[], ARRAY['h:80'], ARRAY['POST'], \
        ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY[NULL]::text[], ARRAY[NULL]::text[], \
        ARRAY[NULL]::bytea[], ARRAY[''], ARRAY[NULL]::text[], ARRAY[NULL]::text[], \
        ARRAY[NULL]::text[], ARRAY[0], ARRAY['']";
    /// For `COMPLETE_MANY`: two completions.
    pub(super) const COMPLETE: &str = "\
        ARRAY['\\x0123456789abcdef0123456789abcdef'::bytea, \
              '\\x0123456789abcdef0123456789abcdee'::bytea], \
        ARRAY[1, 1], ARRAY['success', 'failed'], ARRAY[200, 500], \
        ARRAY[NULL, NULL]::bytea[], ARRAY[NULL, NULL]::text[], ARRAY[NULL, 'http_500'], \
        ARRAY[NULL, NULL]::bigint[], ARRAY[NULL, NULL]::bigint[], false, ARRAY[1, 1]";
}
