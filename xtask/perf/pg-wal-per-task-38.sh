#!/bin/sh
# Issue 38: WAL records and B-tree entries per task on PostgreSQL, counted
# from the WAL itself for the relations of one schema (so other work on the
# same server does not count). Runs the test wal::wal_workload_ends_
# every_task (64 callers submitting one by one, claims of 32, concurrent
# completions), then pg_waldump over the WAL it wrote.
#
# usage: xtask/perf/pg-wal-per-task-38.sh [TASKS]   (default 3000;
#        TC_WAL_HEARTBEAT=1: one heartbeat per try between claim and end)
# needs: the test database on this machine, its data directory readable
#        (PGDATA, default /var/lib/postgresql/15/main) and pg_waldump
#        (PG_WALDUMP, default /usr/lib/postgresql/15/bin/pg_waldump).
# Commit records are not counted: they name no relation. Also prints the
# CPU time of the store's own backends (found by their application name)
# per task, from /proc/<pid>/schedstat (the server on this machine).
set -eu
tasks=${1:-3000}
pgdata=${PGDATA:-/var/lib/postgresql/15/main}
waldump=${PG_WALDUMP:-/usr/lib/postgresql/15/bin/pg_waldump}
url=${TC_TEST_POSTGRES_URL:-postgresql://postgres@127.0.0.1:5432/test}
out=$(TC_REQUIRE_POSTGRES=1 TC_WAL_KEEP=1 TC_WAL_TASKS=$tasks \
    cargo test -q -p tc-store-pg --test pg -- --exact \
    wal::wal_workload_ends_every_task --nocapture 2>/dev/null)
cpu=$(printf '%s\n' "$out" | grep '^PGCPU ' || true)
if [ -n "$cpu" ]; then
    set -- $cpu
    echo "PostgreSQL CPU of the store's backends: $(echo "$2 $3" | awk '{printf "%.1f", $1 / $2 / 1000}') us per task ($4 backends)"
fi
line=$(printf '%s\n' "$out" | grep '^WAL ')
set -- $line
start=$2 end=$3 n=$4 schema=$5
lsn() { printf '%X/%X' $(($1 >> 32)) $(($1 & 0xffffffff)); }
db=$(psql "$url" -Atc "SELECT oid FROM pg_database WHERE datname = current_database()")
rels=$(psql "$url" -Atc "SELECT c.relfilenode || ' ' || c.relname FROM pg_class c \
    JOIN pg_namespace s ON s.oid = c.relnamespace \
    WHERE s.nspname = '$schema' AND c.relfilenode <> 0")
psql "$url" -qc "SELECT pg_switch_wal()" >/dev/null 2>&1 || true
"$waldump" -p "$pgdata/pg_wal" -s "$(lsn "$start")" -e "$(lsn "$end")" 2>/dev/null \
| awk -v db="$db" -v n="$n" -v rels="$rels" '
BEGIN {
    k = split(rels, r, "\n")
    for (i = 1; i <= k; i++) { split(r[i], f, " "); name[f[1]] = f[2] }
}
{
    hit = ""
    for (i = 1; i <= NF; i++) {
        if ($i == "rel") {
            split($(i + 1), p, "/"); sub(/,$/, "", p[3])
            if (p[2] == db && (p[3] in name)) { hit = name[p[3]]; break }
        }
    }
    if (hit == "") next
    records++
    rmgr = $2; desc = ""
    for (i = 1; i <= NF; i++) if ($i == "desc:") { desc = $(i + 1); break }
    by[hit " " rmgr " " desc]++
    if (rmgr == "Btree" && (desc == "INSERT_LEAF" || desc == "INSERT_POST")) entries++
    if (rmgr == "Heap" && desc ~ /HOT_UPDATE/) hot++
    if (rmgr == "Heap" && desc ~ /^UPDATE/) nonhot++
}
END {
    printf "tasks %d: %.1f WAL records per task on the schema'"'"'s relations, %.1f B-tree entries per task, heap updates %.2f HOT + %.2f not HOT per task\n", n, records / n, entries / n, hot / n, nonhot / n
    for (key in by) printf "  %-60s %8.2f\n", key, by[key] / n | "sort -k4 -rn"
}'
echo "schema version $(psql "$url" -Atc "SELECT version FROM $schema.taskcenter_schema")"
psql "$url" -qc "DROP SCHEMA $schema CASCADE" >/dev/null
