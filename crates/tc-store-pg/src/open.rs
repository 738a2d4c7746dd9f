//! Opening a [`crate::PgStore`]'s connections: the URL read (a password
//! never shown: [`describe_target`], [`redact`]), TLS, the session options
//! every connection carries, the schema made and migrated, and the pool.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::Host;

use crate::config::PgConfig;
use crate::error::{OpenError, describe};
use crate::schema;
use crate::tls::Tls;

/// What [`connect`] made: the driver's settings (for the listener and the
/// leader's own connections), TLS, the target as shown, the pool, and the
/// schema the connections work in.
pub(crate) struct Connected {
    pub(crate) pg: tokio_postgres::Config,
    pub(crate) tls: Tls,
    pub(crate) target: String,
    pub(crate) pool: Pool,
    pub(crate) schema: String,
}

/// Reads `url`, makes the schema when one is configured, migrates it and
/// builds the pool.
pub(crate) async fn connect(url: &str, config: &PgConfig) -> Result<Connected, OpenError> {
    let (driver_url, tls) = crate::tls::split_url(url).map_err(|message| OpenError::BadUrl {
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
    // This version's writes count themselves and keep the queue (schema
    // steps 24 and 25); the fence of step 25 lets only such a session
    // write `tasks`.
    options.push(' ');
    options.push_str(crate::moves::SESSION_OPTION);
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
    let schema = session_schema(&client, &target).await?;
    drop(client);
    Ok(Connected {
        pg,
        tls,
        target,
        pool,
        schema,
    })
}

/// The schema a pooled session works in, once it is known that the session
/// carries [`crate::moves::SESSION_OPTION`]: without it the fence of schema
/// step 25 would refuse every write to `tasks`, so the store refuses to
/// open rather than fail each write.
async fn session_schema(
    client: &deadpool_postgres::Client,
    target: &str,
) -> Result<String, OpenError> {
    let row = client
        .query_one(
            "SELECT current_schema(), current_setting('taskcenter.writes', true)",
            &[],
        )
        .await
        .map_err(|e| OpenError::Postgres {
            target: target.to_owned(),
            message: format!("read current_schema: {}", describe(&e)),
        })?;
    let writes: Option<String> = row.get(1);
    if writes.as_deref() != Some("queued") {
        return Err(OpenError::Postgres {
            target: target.to_owned(),
            message: "the session option taskcenter.writes did not reach the server (a \
                      connection pooler that drops startup options?): every write to \
                      tasks would be fenced"
                .into(),
        });
    }
    Ok(row.get(0))
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
