//! The store the server runs on, chosen by `--db`: an SQLite file (the
//! default) or a PostgreSQL URL shared by several nodes. `--db` is parsed
//! once, at the command line, into a [`DbTarget`]; one enum of stores
//! ([`AnyStore`]) so that the worker, the API and the shutdown path are
//! written once.

use std::ffi::OsStr;
use std::fmt;
use std::path::PathBuf;

use tc_model::store::StoreError;
use tc_store::SqliteStore;
use tc_store_pg::PgStore;

/// What `--db` names: an SQLite file or a PostgreSQL database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DbTarget {
    /// A database file, created if missing.
    Sqlite(PathBuf),
    /// A `postgres://` or `postgresql://` URL.
    Postgres(String),
}

impl DbTarget {
    /// Reads a `--db` value: a PostgreSQL URL by its scheme, anything else
    /// (any bytes a path may hold) a file path.
    pub(crate) fn from_arg(db: &OsStr) -> DbTarget {
        match db.to_str() {
            Some(url) if tc_store_pg::is_postgres_url(url) => DbTarget::Postgres(url.to_owned()),
            _ => DbTarget::Sqlite(PathBuf::from(db)),
        }
    }
}

impl From<PathBuf> for DbTarget {
    fn from(path: PathBuf) -> DbTarget {
        DbTarget::from_arg(path.as_os_str())
    }
}

impl fmt::Display for DbTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbTarget::Sqlite(path) => write!(f, "{}", path.display()),
            DbTarget::Postgres(url) => f.write_str(url),
        }
    }
}

/// Either adapter behind the one port.
pub(crate) enum AnyStore {
    /// One process, one file.
    Sqlite(SqliteStore),
    /// Several nodes, one database.
    Postgres(PgStore),
}

impl AnyStore {
    /// The `store` field of the `listening` event.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            AnyStore::Sqlite(_) => "sqlite",
            AnyStore::Postgres(_) => "postgres",
        }
    }

    /// Closes the store: SQLite commits what is queued and stops its
    /// writer; PostgreSQL closes its pool.
    pub(crate) async fn close(self) {
        match self {
            AnyStore::Sqlite(store) => store.close().await,
            AnyStore::Postgres(store) => store.close(),
        }
    }
}

/// Writes the port for [`AnyStore`] from the port's own list of methods
/// ([`tc_model::port_methods`]): each call goes to whichever adapter this
/// is, so a new port method is not written here.
macro_rules! forward_to_either {
    ($(
        $part:path [$( fn $plain:ident(&self) -> $plain_out:ty; )*] {
            $( $call:ident => fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $out:ty; )*
        }
    )*) => {
        $(
            impl $part for AnyStore {
                $(
                    fn $plain(&self) -> $plain_out {
                        match self {
                            AnyStore::Sqlite(s) => s.$plain(),
                            AnyStore::Postgres(s) => s.$plain(),
                        }
                    }
                )*

                $(
                    async fn $name(&self $(, $arg: $ty)*) -> Result<$out, StoreError> {
                        match self {
                            AnyStore::Sqlite(s) => s.$name($($arg),*).await,
                            AnyStore::Postgres(s) => s.$name($($arg),*).await,
                        }
                    }
                )*
            }
        )*
    };
}

tc_model::port_methods!(forward_to_either);

#[cfg(test)]
mod tests {
    use super::*;

    /// `--db` as typed, and what it names.
    fn check(db: &str, expected: DbTarget) {
        assert_eq!(DbTarget::from_arg(OsStr::new(db)), expected, "{db:?}");
    }

    #[test]
    fn db_is_a_postgres_url_by_its_scheme_and_a_file_otherwise() {
        let file = |p: &str| DbTarget::Sqlite(PathBuf::from(p));
        let pg = |u: &str| DbTarget::Postgres(u.to_owned());
        check("./taskcenter.db", file("./taskcenter.db"));
        check("/var/lib/tc/tasks.db", file("/var/lib/tc/tasks.db"));
        check("postgres", file("postgres"));
        check("postgres:/x", file("postgres:/x"));
        check("POSTGRES://h/db", file("POSTGRES://h/db"));
        check("postgres://tc@db:5432/tc", pg("postgres://tc@db:5432/tc"));
        check("postgresql://tc@db/tc?x=1", pg("postgresql://tc@db/tc?x=1"));
    }

    #[cfg(unix)]
    #[test]
    fn a_path_that_is_not_utf8_is_a_file() {
        use std::os::unix::ffi::OsStrExt;
        let raw = OsStr::from_bytes(b"/tmp/\xff.db");
        assert_eq!(
            DbTarget::from_arg(raw),
            DbTarget::Sqlite(PathBuf::from(raw))
        );
    }
}
