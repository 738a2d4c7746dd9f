//! Secrets sealed at rest on SQLite: the columns that hold
//! a secret pass through the store's [`Sealer`] on their way in and out, and
//! at start [`seal_stored`] seals again what is plain or under an older key.
//! The rule (format, keys, what needs sealing again, which columns) is
//! tc-seal's; this file only reads and writes them.

use rusqlite::{Connection, params};
use tc_model::store::StoreError;
use tc_seal::{SECRET_COLUMNS, SealError, SealReport, Sealer, refusal};

use crate::rows::db;

fn refused(table: &str, name: &str, column: &str, e: &SealError) -> StoreError {
    StoreError::Unavailable(refusal(table, name, column, e))
}

/// The stored form of a secret column's text.
pub(crate) fn seal(sealer: &Sealer, plain: Option<String>) -> Result<Option<String>, StoreError> {
    sealer
        .seal_opt(plain)
        .map_err(|e| StoreError::Unavailable(e.to_string()))
}

/// A secret column's text as stored, opened.
pub(crate) fn open(sealer: &Sealer, stored: Option<String>) -> Result<Option<String>, StoreError> {
    sealer
        .open_opt(stored)
        .map_err(|e| StoreError::Unavailable(format!("a stored secret does not open: {e}")))
}

/// Seals again every secret that is plain or under an older key (one
/// transaction on the writer); refuses, naming the destination or tenant,
/// a secret no listed key opens.
pub(crate) fn seal_stored(conn: &Connection, sealer: &Sealer) -> Result<SealReport, StoreError> {
    // The plain text a rewrite replaces is zeroed in its page, not left in
    // free space for the file and its backups to keep.
    conn.pragma_update(None, "secure_delete", true)
        .map_err(db)?;
    let report = reseal_all(conn, sealer);
    conn.pragma_update(None, "secure_delete", false)
        .map_err(db)?;
    report
}

fn reseal_all(conn: &Connection, sealer: &Sealer) -> Result<SealReport, StoreError> {
    let mut report = SealReport::default();
    for (table, key, column) in SECRET_COLUMNS {
        let rows: Vec<(String, String)> = conn
            .prepare(&format!(
                "SELECT {key}, {column} FROM {table} WHERE {column} IS NOT NULL"
            ))
            .map_err(db)?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .map_err(db)?
            .collect::<rusqlite::Result<_>>()
            .map_err(db)?;
        for (name, stored) in rows {
            let again = sealer
                .reseal(&stored)
                .map_err(|e| refused(table, &name, column, &e))?;
            report.tally(&stored, again.as_ref());
            if let Some(again) = again {
                conn.execute(
                    &format!("UPDATE {table} SET {column} = ?1 WHERE {key} = ?2"),
                    params![again, name],
                )
                .map_err(db)?;
            }
        }
    }
    Ok(report)
}
