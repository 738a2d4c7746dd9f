//! Statistics kept current while the tables grow (issue 38, item 2): the
//! planner picks the hot statements' plans from them, and a plan chosen
//! while `tasks` was young (no statistics: a few pages guessed) is kept by
//! every connection that prepared it until the table is analyzed again.
//! Autovacuum analyzes too, but only after its nap and after a tenth of a
//! table changed; this runs on the store's own tick ([`analyze_grown`]).

use deadpool_postgres::GenericClient;
use tc_model::store::StoreError;

use crate::error::db;

/// The tables whose plans matter on the hot path, as `ANALYZE` statements
/// (a fixed list: no name is ever built from data).
const TABLES: [(&str, &str); 2] = [("tasks", "ANALYZE tasks"), ("attempts", "ANALYZE attempts")];

/// Changes since a table's last analyze that make it due: this many, plus
/// [`GROWN_FRACTION`] of its rows at that analyze.
const GROWN_ROWS: i64 = 1_000;
const GROWN_FRACTION: f64 = 0.2;

/// Analyzes each of [`TABLES`] in the current schema that changed by more
/// than [`GROWN_ROWS`] + [`GROWN_FRACTION`] of its size since it was last
/// analyzed (by anyone); answers the tables it analyzed. The server's
/// counters lag by up to a second, so a table just filled may wait for
/// the next call.
pub(crate) async fn analyze_grown<C: GenericClient>(
    client: &C,
) -> Result<Vec<&'static str>, StoreError> {
    let due = client
        .prepare_cached(
            "SELECT s.relname::text FROM pg_stat_user_tables s \
             JOIN pg_class c ON c.oid = s.relid \
             WHERE s.schemaname = current_schema() AND s.relname = ANY($1) \
               AND s.n_mod_since_analyze > $2::bigint + $3::float8 * greatest(c.reltuples, 0)::float8",
        )
        .await
        .map_err(db)?;
    let names: Vec<&str> = TABLES.iter().map(|(name, _)| *name).collect();
    let grown: Vec<String> = client
        .query(&due, &[&names, &GROWN_ROWS, &GROWN_FRACTION])
        .await
        .map_err(db)?
        .iter()
        .map(|row| row.try_get(0).map_err(db))
        .collect::<Result<_, _>>()?;
    let mut analyzed = Vec::new();
    for (name, analyze) in TABLES {
        if grown.iter().any(|g| g == name) {
            client.batch_execute(analyze).await.map_err(db)?;
            analyzed.push(name);
        }
    }
    Ok(analyzed)
}
