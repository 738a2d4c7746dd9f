//! Secrets sealed at rest on PostgreSQL: the columns that
//! hold a secret pass through the store's [`Sealer`] on their way in and
//! out, and at start [`seal_stored`] seals again what is plain or under an
//! older key. The rule (format, keys, what needs sealing again, which
//! columns) is tc-seal's; this file only reads and writes them.

use deadpool_postgres::Transaction;
use tc_model::store::StoreError;
use tc_seal::{SECRET_COLUMNS, SealError, SealReport, Sealer, refusal};

use crate::error::db;

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

/// Seals again every secret that is plain or under an older key, the rows
/// locked; refuses, naming the destination or tenant, a secret no listed
/// key opens.
pub(crate) async fn seal_stored(
    tx: &Transaction<'_>,
    sealer: &Sealer,
) -> Result<SealReport, StoreError> {
    let mut report = SealReport::default();
    for (table, key, column) in SECRET_COLUMNS {
        let rows = tx
            .query(
                &format!(
                    "SELECT {key}, {column} FROM {table} WHERE {column} IS NOT NULL \
                     ORDER BY {key} FOR UPDATE"
                ),
                &[],
            )
            .await
            .map_err(db)?;
        for row in rows {
            let name: String = row.try_get(0).map_err(db)?;
            let stored: String = row.try_get(1).map_err(db)?;
            let again = sealer
                .reseal(&stored)
                .map_err(|e| refused(table, &name, column, &e))?;
            report.tally(&stored, again.as_ref());
            if let Some(again) = again {
                tx.execute(
                    &format!("UPDATE {table} SET {column} = $1 WHERE {key} = $2"),
                    &[&again, &name],
                )
                .await
                .map_err(db)?;
            }
        }
    }
    Ok(report)
}
