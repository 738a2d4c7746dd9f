//! Why a store could not be opened, and how driver errors read.

use tc_model::store::StoreError;

/// Why the database could not be opened. Nothing is written to a schema that
/// is refused.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The URL is not one PostgreSQL's driver understands.
    #[error("{target}: not a PostgreSQL URL: {message}")]
    BadUrl {
        /// The URL, without its password.
        target: String,
        /// The driver's words.
        message: String,
    },
    /// The URL's TLS settings cannot be used (`sslmode`, `sslrootcert`).
    #[error("{target}: TLS: {message}")]
    Tls {
        /// The database, without its password.
        target: String,
        /// What is wrong, naming the parameter.
        message: String,
    },
    /// The schema holds tables that are not taskcenter's.
    #[error(
        "{target}: schema {schema:?} holds tables that are not taskcenter's \
         (version {version:?}, tables: {tables}); refusing to touch it"
    )]
    ForeignSchema {
        /// The database, without its password.
        target: String,
        /// The schema judged (the connection's `current_schema()`).
        schema: String,
        /// The version a foreign version table claims, if any.
        version: Option<i32>,
        /// Some of the tables it holds.
        tables: String,
    },
    /// A taskcenter schema written by a newer build.
    #[error(
        "{target}: schema {schema:?} is at version {found}, written by a newer taskcenter; \
         this build knows up to version {known}; refusing to touch it"
    )]
    NewerSchema {
        /// The database, without its password.
        target: String,
        /// The schema judged.
        schema: String,
        /// Its version.
        found: i32,
        /// The newest version this build knows.
        known: i32,
    },
    /// PostgreSQL could not be reached, or refused a step of the setup.
    #[error("{target}: {message}")]
    Postgres {
        /// The database, without its password.
        target: String,
        /// What was being done, in PostgreSQL's or the driver's words.
        message: String,
    },
}

/// A driver error in the most useful words there are: the server's SQLSTATE
/// and message when it answered, the driver's own otherwise.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}

/// A driver failure as the port reports it.
pub(crate) fn db(e: tokio_postgres::Error) -> StoreError {
    StoreError::Unavailable(describe(&e))
}

/// A pool failure (no connection within the wait, PostgreSQL gone).
pub(crate) fn pool(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => db(e),
        other => StoreError::Unavailable(format!("no database connection: {other}")),
    }
}
