#!/usr/bin/env python3
"""The SQLite writer's batches during bench phase 12, split (issue 44's paced p99).

`writer-batches-44.patch` (next to this file; a measurement aid, never on main)
makes the writer thread write one CSV line per batch to `$TC_BATCH_TRACE.<pid>.<ms>`:
its COMMIT's wall time, when it started (µs since the writer started), its
commands, its wall time, the thread's time on a CPU and waiting for one
(`/proc/thread-self/schedstat`), and the rows it changed, all µs.

    git apply xtask/perf/writer-batches-44.patch
    cargo build --release -p tc-server -p xtask
    TC_BATCH_TRACE=/tmp/wb TC_BENCH_BUILT=1 target/release/xtask bench --phase 12
    python3 xtask/perf/writer-batches-44.py /tmp/wb
    git apply -R xtask/perf/writer-batches-44.patch

For the paced window (the 10 s before the backlog's first batch of 1000) and
the steady windows (7-47 s) it prints the batches' wall time percentiles, the
COMMIT's p99.9, the writer's busy, on-CPU and runqueue-wait fractions, and the
slow batches by cause: COMMITs over 2.5 ms not waiting for a CPU (a
checkpoint inside the COMMIT, or a slow fsync) and batches that waited over
2 ms for a CPU.
"""
import glob
import os
import sys


def load(path):
    rows = []
    for line in open(path):
        try:
            rows.append(list(map(int, line.split(","))))
        except ValueError:
            pass  # the last line of a server stopped mid-write
    return rows


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] if values else 0


COMMIT, START, COMMANDS, WALL, CPU, RUNQUEUE, CHANGES = range(7)


def report(prefix, name, rows, span):
    slow = [r for r in rows if r[WALL] > 4000]
    stalls = [r for r in rows if r[COMMIT] > 2500 and r[RUNQUEUE] < 1000]
    starved = [r for r in rows if r[RUNQUEUE] > 2000]
    walls = [r[WALL] for r in rows]
    print(
        f"{prefix:14} {name:7} batches/s {len(rows) / span:6.0f} "
        f"wall p50 {pct(walls, .5):5} p99 {pct(walls, .99):5} p99.9 {pct(walls, .999):5} µs | "
        f"commit p99.9 {pct([r[COMMIT] for r in rows], .999):5} µs | "
        f"busy {sum(walls) / span / 1e6:.2f} cpu {sum(r[CPU] for r in rows) / span / 1e6:.2f} "
        f"runqueue {sum(r[RUNQUEUE] for r in rows) / span / 1e6:.2f} | per s: "
        f">4 ms {len(slow) / span:.1f}, commit stalls {len(stalls) / span:.1f}, "
        f"waited >2 ms for a CPU {len(starved) / span:.1f}"
    )


def main():
    for prefix in sys.argv[1:]:
        # The phase's main server wrote the largest file.
        path = max(glob.glob(prefix + ".*"), key=os.path.getsize)
        rows = load(path)
        backlog = [r for r in rows if r[CHANGES] >= 3000 and r[START] > 45e6]
        if not backlog:
            sys.exit(f"{path}: no backlog batch found after 45 s")
        end = backlog[0][START] - 0.2e6
        report(prefix, "paced", [r for r in rows if end - 10e6 <= r[START] < end], 10)
        report(prefix, "steady", [r for r in rows if 7e6 <= r[START] < 47e6], 40)


if __name__ == "__main__":
    main()
