#!/bin/sh
# The writer thread's instructions per task (issue 26): builds the
# writer_cost example and runs it under callgrind for N and 2N tasks; the
# difference over N is what one more task costs the writer (submit, claim
# in rounds of 64, complete), free of the run's fixed costs and of the
# machine's load. See docs/performance.md, "Issue 26: the writer thread's
# instructions per task".
#
# Usage: xtask/perf/writer-cost-26.sh [N]   (default 2000; needs valgrind)
set -eu
N=${1:-2000}
cargo build --release -p tc-store --example writer_cost --features raw >&2
BIN=target/release/examples/writer_cost
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
count() {
    valgrind --tool=callgrind --callgrind-out-file="$DIR/cg.$1.out" \
        --toggle-collect='*writer_batch*' "$BIN" "$1" "$DIR" >/dev/null 2>"$DIR/vg.$1.log"
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$DIR/vg.$1.log"
}
A=$(count "$N")
B=$(count "$((2 * N))")
echo "N=$N: $A instructions; 2N: $B; per task: $(( (B - A) / N ))"
callgrind_annotate --inclusive=yes "$DIR/cg.$((2 * N)).out" 2>/dev/null \
    | grep -E 'write_ops::|subjournalPageIfRequired|sqlite3BtreeOpen|sqlite3DbMallocZero|sqlite3BtreeInsert ' \
    | cut -c1-110
