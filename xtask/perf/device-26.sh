#!/usr/bin/env bash
# Issue 26 on a many-core machine: `cargo xtask bench --phase 12` with tc-server
# pinned to 2 cores, then to 8, the bench (load generator, fake downstream) on
# other cores; prints each run's figures and the 8-vs-2 end-to-end ratio as
# JSON lines, and copies both results.json to $OUT (when set).
#
# Runs from the repository root, without network. It uses target/release/
# {tc-server,xtask} when both are there (carried from a build machine);
# otherwise it builds them (`cargo build --release --offline`), which needs
# the dependencies in cargo's cache. Env: SMALL_CORES (0-1), BIG_CORES (0-7),
# BENCH_CORES (cores the bench runs on: 8-15), FLAGS (extra bench flags, e.g.
# --quick).
set -u
cd "$(dirname "$0")/../.." || exit 1
SMALL_CORES=${SMALL_CORES:-0-1}
BIG_CORES=${BIG_CORES:-0-7}
BENCH_CORES=${BENCH_CORES:-8-15}
FLAGS=${FLAGS:-}
OUT=${OUT:-/tmp/device-26}
mkdir -p "$OUT"
say() { printf '{"device_26":"%s"}\n' "$*"; }
command -v taskset >/dev/null || { say "no taskset on this machine"; exit 1; }
say "cpus $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -x target/release/tc-server ] && [ -x target/release/xtask ]; then
  say "using the carried release binaries"
else
  say "building release (offline)"
  cargo build --release --offline -p tc-server -p xtask >"$OUT/build.log" 2>&1 \
    || { tail -20 "$OUT/build.log"; say "build failed"; exit 1; }
fi
for cores in "$SMALL_CORES" "$BIG_CORES"; do
  say "tc-server on cores $cores, bench on $BENCH_CORES"
  # TC_BENCH_BUILT: the binaries are fresh, the bench must not rebuild.
  # CARGO_TARGET_DIR: a carried xtask knows its build machine's checkout
  # path, not this copy's.
  CARGO_TARGET_DIR="$PWD/target" TC_BENCH_BUILT=1 taskset -c "$BENCH_CORES" target/release/xtask bench --phase 12 \
    --server-cores "$cores" $FLAGS >"$OUT/bench-$cores.log" 2>&1
  echo "{\"run\":\"$cores\",\"rc\":$?}"
  cp target/bench/results.json "$OUT/results-$cores.json" 2>/dev/null
  grep -E '^12 ' "$OUT/bench-$cores.log" || tail -20 "$OUT/bench-$cores.log"
done
python3 - "$OUT" "$SMALL_CORES" "$BIG_CORES" <<'PY'
import json, sys
out, small, big = sys.argv[1:4]
def figures(cores):
    try:
        r = json.load(open(f"{out}/results-{cores}.json"))
    except (OSError, ValueError) as e:
        return {"error": str(e)}
    f = {x["key"]: x for x in r["figures"]}
    d = r["details"].get("one_node", {})
    return {
        "e2e_per_s": d.get("e2e_rate"),
        "drain_per_s": f.get("node_drain", {}).get("value"),
        "drain_vs_e2e": f.get("node_drain", {}).get("ratio"),
        "cold_vs_steady": f.get("node_cold", {}).get("ratio"),
        "writer_us_per_task": f.get("node_writer_cpu", {}).get("value"),
        "process_us_per_task": d.get("steady_cpu", {}).get("process_us_per_task"),
        "batch_random_per_s": f.get("node_batch_random", {}).get("value"),
        "submit_p99_ms": f.get("node_submit_p99", {}).get("value"),
    }
a, b = figures(small), figures(big)
print(json.dumps({"cores": small, **a}))
print(json.dumps({"cores": big, **b}))
try:
    print(json.dumps({"e2e_big_vs_small": b["e2e_per_s"] / a["e2e_per_s"], "target": 2.5}))
except (KeyError, TypeError, ZeroDivisionError):
    print(json.dumps({"e2e_big_vs_small": None}))
PY
