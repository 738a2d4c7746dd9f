#!/bin/sh
# How often SQLite walks the writer's whole page cache at COMMIT (issue 44,
# docs/performance.md, "SQLite walks the writer's whole page cache at most
# COMMITs"). Runs bench phase 12 and, once its end-to-end windows are under
# way, attaches gdb to tc-server for a few seconds with a breakpoint on
# pcache1TruncateUnsafe that prints the cache it was called for; then counts
# the calls by kind. A call with iMaxKey 262145 (the lock-byte page of a
# 4 KiB-page file) and iLimit far below it scans every hash slot and every
# cached page (nHash, nPage).
#
# Usage: xtask/perf/pcache-walk-44.sh [SECONDS]   (default 3; needs gdb and
# release builds: cargo build --release -p xtask -p tc-server)
set -eu
SECONDS_ATTACHED=${1:-3}
OUT=$(mktemp -d)
PID=
# The bench, stopped early, leaves its server running: stop that one only.
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$OUT"' EXIT
cat > "$OUT/gdb" <<'GDB'
set pagination off
set confirm off
break pcache1TruncateUnsafe
commands
silent
printf "iLimit=%u iMaxKey=%u nPage=%u nHash=%u\n", $esi, *(unsigned int*)($rdi+44), *(unsigned int*)($rdi+56), *(unsigned int*)($rdi+60)
continue
end
GDB
TC_BENCH_BUILT=1 target/release/xtask bench --phase 12 > "$OUT/bench.log" 2>&1 &
BENCH=$!
for _ in $(seq 1 100); do
    PID=$(pgrep -x tc-server | head -1 || true)
    [ -n "$PID" ] && break
    sleep 0.2
done
[ -n "$PID" ] || { echo "no tc-server started" >&2; exit 1; }
# The cold window (5 s) and the first end-to-end window's start.
sleep 16
timeout -s INT "$SECONDS_ATTACHED" gdb -p "$PID" -batch -x "$OUT/gdb" -ex continue \
    > "$OUT/gdb.log" 2>&1 || true
kill "$BENCH" 2>/dev/null || true
wait "$BENCH" 2>/dev/null || true
echo "pcache1TruncateUnsafe calls in ${SECONDS_ATTACHED} s attached (slowed by the breakpoint):"
echo "  all:                 $(grep -c '^iLimit=' "$OUT/gdb.log" || true)"
echo "  iMaxKey at 262145:   $(grep -c 'iMaxKey=262145 ' "$OUT/gdb.log" || true)"
echo "most frequent (count, fields):"
sed -n 's/^iLimit=[0-9]* /  /p' "$OUT/gdb.log" | sort | uniq -c | sort -rn | head -5
