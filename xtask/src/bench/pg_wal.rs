//! WAL records and B-tree entries that one schema's relations wrote between
//! two WAL positions (what the queue layout set out to cut), counted from the WAL itself with
//! `pg_waldump`, so the rest of the server's work does not count. Needs the
//! server's data directory readable (`PGDATA`, default
//! `/var/lib/postgresql/15/main`) and `pg_waldump` (`PG_WALDUMP`, default
//! `/usr/lib/postgresql/15/bin/pg_waldump`); without them the figures are
//! not measured and the bench says why. The same count as
//! `xtask/perf/pg-wal-per-task-38.sh`; commit records name no relation and
//! are not counted.

use std::collections::HashSet;
use std::process::Command;

use tc_store_pg::testing::TestDatabase;

/// A WAL position, in bytes from the start of the WAL.
pub(super) type Lsn = i64;

/// What a window of WAL held for one schema's relations.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct WalCount {
    pub(super) records: u64,
    /// B-tree leaf inserts (`INSERT_LEAF`, `INSERT_POST`): index entries.
    pub(super) btree_entries: u64,
}

/// The server's WAL position now.
pub(super) async fn position(db: &TestDatabase) -> Result<Lsn, String> {
    db.query_i64("SELECT (pg_current_wal_lsn() - '0/0')::bigint")
        .await?
        .ok_or_else(|| "pg_current_wal_lsn() answered nothing".to_owned())
}

/// Counts what `schema`'s relations wrote from `start` to `end`.
pub(super) async fn count(
    db: &TestDatabase,
    schema: &str,
    start: Lsn,
    end: Lsn,
) -> Result<WalCount, String> {
    let database = db
        .query_i64("SELECT oid::bigint FROM pg_database WHERE datname = current_database()")
        .await?
        .ok_or("no oid for the current database")?;
    let relations = db
        .query_text(&format!(
            "SELECT string_agg(c.relfilenode::text, ' ') FROM pg_class c \
             JOIN pg_namespace s ON s.oid = c.relnamespace \
             WHERE s.nspname = '{schema}' AND c.relfilenode <> 0"
        ))
        .await?
        .unwrap_or_default();
    let relations: HashSet<u64> = relations
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    // The segment in use is closed, so every record up to `end` is in a
    // file pg_waldump reads whole.
    db.execute("SELECT pg_switch_wal()").await?;
    let pgdata =
        std::env::var("PGDATA").unwrap_or_else(|_| "/var/lib/postgresql/15/main".to_owned());
    let waldump = std::env::var("PG_WALDUMP")
        .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin/pg_waldump".to_owned());
    let out = Command::new(&waldump)
        .args(["-p", &format!("{pgdata}/pg_wal")])
        .args(["-s", &lsn_text(start), "-e", &lsn_text(end)])
        .output()
        .map_err(|e| format!("{waldump}: {e}"))?;
    // pg_waldump ends with an error at the end of the WAL it was given when
    // `end` falls inside a record's page; what it printed before counts.
    if out.stdout.is_empty() {
        return Err(format!(
            "{waldump} printed nothing: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let database = u64::try_from(database).map_err(|e| e.to_string())?;
    Ok(tally(
        &String::from_utf8_lossy(&out.stdout),
        database,
        &relations,
    ))
}

/// `X/Y` as PostgreSQL writes a WAL position.
fn lsn_text(lsn: Lsn) -> String {
    let lsn = lsn.max(0) as u64;
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xffff_ffff)
}

/// Counts the records of `pg_waldump`'s `lines` whose first block names a
/// relation of `database` in `relations`.
fn tally(lines: &str, database: u64, relations: &HashSet<u64>) -> WalCount {
    let mut count = WalCount::default();
    for line in lines.lines() {
        let Some(rel) = word_after(line, "rel") else {
            continue;
        };
        let mut parts = rel.trim_end_matches(',').split('/');
        let (Some(_), Some(db), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let ours = db.parse() == Ok(database) && file.parse().is_ok_and(|f| relations.contains(&f));
        if !ours {
            continue;
        }
        count.records += 1;
        let entry = matches!(
            word_after(line, "desc:"),
            Some("INSERT_LEAF" | "INSERT_POST")
        );
        if word_after(line, "rmgr:") == Some("Btree") && entry {
            count.btree_entries += 1;
        }
    }
    count
}

/// The word of `line` after the first word `marker` (pg_waldump's
/// `rmgr: Btree`, `desc: INSERT_LEAF`, `rel 1663/16384/16412`).
fn word_after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.split_whitespace().skip_while(|w| *w != marker).nth(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(lines: &str, want: WalCount) {
        let relations: HashSet<u64> = [16412, 16420].into_iter().collect();
        assert_eq!(tally(lines, 16384, &relations), want, "{lines}");
    }

    #[test]
    fn counts_the_schema_s_records_and_index_entries() {
        let heap = "rmgr: Heap        len (rec/tot):     54/    54, tx:        760, lsn: 0/0165E2F8, prev 0/0165E2C0, desc: HOT_UPDATE off 3 xmax 760 flags 0x10 ; new off 4 xmax 0, blkref #0: rel 1663/16384/16412 blk 0";
        let leaf = "rmgr: Btree       len (rec/tot):     64/    64, tx:        760, lsn: 0/0165E330, prev 0/0165E2F8, desc: INSERT_LEAF off 2, blkref #0: rel 1663/16384/16420 blk 1";
        let post = "rmgr: Btree       len (rec/tot):     64/    64, tx:        760, lsn: 0/0165E330, prev 0/0165E2F8, desc: INSERT_POST off 2, blkref #0: rel 1663/16384/16420 blk 1";
        let other_db = "rmgr: Btree       len (rec/tot):     64/    64, tx:        761, lsn: 0/0165E370, prev 0/0165E330, desc: INSERT_LEAF off 5, blkref #0: rel 1663/5/16420 blk 1";
        let other_rel = "rmgr: Heap        len (rec/tot):     54/    54, tx:        762, lsn: 0/0165E3B0, prev 0/0165E370, desc: INSERT off 9 flags 0x00, blkref #0: rel 1663/16384/2619 blk 3";
        let commit = "rmgr: Transaction len (rec/tot):     34/    34, tx:        760, lsn: 0/0165E3F0, prev 0/0165E3B0, desc: COMMIT 2026-12-06 09:40:00.000000 UTC";
        check("", WalCount::default());
        check(commit, WalCount::default());
        check(
            heap,
            WalCount {
                records: 1,
                btree_entries: 0,
            },
        );
        check(
            &[heap, leaf, post, other_db, other_rel, commit].join("\n"),
            WalCount {
                records: 3,
                btree_entries: 2,
            },
        );
    }

    #[test]
    fn a_position_is_written_as_postgresql_writes_it() {
        assert_eq!(lsn_text(0x1_0165_E2F8), "1/165E2F8");
        assert_eq!(lsn_text(0), "0/0");
    }
}
