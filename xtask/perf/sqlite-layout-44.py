#!/usr/bin/env python3
"""SQLite's own work per task (instructions inside sqlite3_step) for the
task lifecycle's statements in two layouts, as design input for issue 44's
item 1 (the hot state apart from the record):

  today  -- the `tasks` table as schema step 28 leaves it: the record and
            the hot state (state, due time, lease, attempt) in one row, the
            claim's partial indexes on it;
  queue  -- the same record, written at submit and at the end only, and a
            narrow `queue` row per unfinished task (state, due time, lease,
            attempt, start) carrying the claim's and recovery's indexes:
            PostgreSQL's step 25, with the claim writing the queue alone.

Each layout runs N tasks (submitted in batches of 64, claimed 64 at a time,
completed) and then 2N on a fresh file; the difference over N is one more
task's instructions. Only SQLite's statement steps are counted
(`--toggle-collect=sqlite3_step`): not the binding, not Python. The schema
is read from a file the store made (`writer_cost 10 DIR`), so the layouts
are the store's own plus the change.

Python's sqlite3 runs the system's SQLite; to count the store's own
version, build the bundled source as a shared library with libsqlite3-sys's
flags and put it first:
  gcc -O3 -shared -fPIC -DSQLITE_DEFAULT_FOREIGN_KEYS=1 -DSQLITE_ENABLE_STAT4 \
      -DSQLITE_THREADSAFE=1 ... ~/.cargo/registry/src/*/libsqlite3-sys-*/sqlite3/sqlite3.c \
      -o DIR/libsqlite3.so.0 && export LD_LIBRARY_PATH=DIR

Usage: sqlite-layout-44.py SCHEMA_DB [N]          (runs both under callgrind)
       LAYOUTS=today LAYOUT_EXPERIMENT='DROP INDEX x' sqlite-layout-44.py ...
       sqlite-layout-44.py --run LAYOUT SCHEMA_DB N DIR  (one run, no counting)
"""
import os
import re
import sqlite3
import subprocess
import sys
import tempfile

BATCH = 64

# The claim's and recovery's indexes that name the hot state: on `tasks`
# today, on `queue` in the other layout.
HOT_INDEXES = [
    "tasks_leased", "tasks_due_by_destination", "tasks_prioritized",
    "tasks_due_by_key", "tasks_running_by_key", "tasks_due_unkeyed",
    "tasks_open_by_tenant",
]

QUEUE = """
CREATE TABLE queue (
    seq INTEGER PRIMARY KEY, state TEXT NOT NULL, destination TEXT NOT NULL,
    tenant TEXT NOT NULL, flow_key TEXT NOT NULL, priority INTEGER NOT NULL,
    next_run_at INTEGER, lease_until INTEGER, attempt INTEGER NOT NULL,
    started_at INTEGER, updated_at INTEGER NOT NULL) STRICT;
CREATE INDEX queue_leased ON queue (lease_until) WHERE state = 'running';
CREATE INDEX queue_due_by_destination ON queue (destination, next_run_at, seq)
    WHERE state = 'pending';
CREATE INDEX queue_prioritized ON queue (destination, next_run_at, seq)
    WHERE state = 'pending' AND priority > 0;
CREATE INDEX queue_due_by_key ON queue (destination, tenant, flow_key, next_run_at, seq)
    WHERE state = 'pending' AND flow_key <> '';
CREATE INDEX queue_running_by_key ON queue (tenant, flow_key)
    WHERE state = 'running' AND flow_key <> '';
CREATE INDEX queue_due_unkeyed ON queue (destination, tenant, next_run_at, seq)
    WHERE state = 'pending' AND flow_key = '';
CREATE INDEX queue_open_by_tenant ON queue (tenant, state) WHERE tenant <> '';
"""

SUBMIT = """INSERT OR FAIL INTO tasks (id, idempotency_key, state, url, body,
    max_attempts, timeout_ns, attempt, created_at, updated_at, next_run_at,
    destination, method, tenant, priority, flow_key)
    VALUES (?1, ?2, 'pending', 'http://127.0.0.1:9/hook', ?3, 3, 5000000000, 0,
            ?4, ?4, ?4, '127.0.0.1:9', 'POST', '', 0, '')
    ON CONFLICT (idempotency_key, tenant) DO NOTHING"""

QUEUE_INSERT = """INSERT INTO queue (seq, state, destination, tenant, flow_key,
    priority, next_run_at, attempt, updated_at)
    VALUES (?1, 'pending', '127.0.0.1:9', '', '', 0, ?2, 0, ?2)"""

CLAIM_WALK = {
    "today": """SELECT seq, state FROM tasks INDEXED BY tasks_due_unkeyed
        WHERE destination = '127.0.0.1:9' AND tenant = '' AND flow_key = ''
          AND state = 'pending' AND next_run_at <= ?1
        ORDER BY next_run_at, seq LIMIT 64""",
    "queue": """SELECT seq, state FROM queue INDEXED BY queue_due_unkeyed
        WHERE destination = '127.0.0.1:9' AND tenant = '' AND flow_key = ''
          AND state = 'pending' AND next_run_at <= ?1
        ORDER BY next_run_at, seq LIMIT 64""",
}

CLAIM_ONE = {
    "today": """UPDATE OR FAIL tasks SET state = 'running', attempt = attempt + 1,
        started_at = ?2, lease_until = ?3, next_run_at = NULL, updated_at = ?2
        WHERE seq = ?1 AND state = 'pending'""",
    "queue": """UPDATE OR FAIL queue SET state = 'running', attempt = attempt + 1,
        started_at = ?2, lease_until = ?3, next_run_at = NULL, updated_at = ?2
        WHERE seq = ?1 AND state = 'pending'""",
}

READ_BACK = {
    "today": "SELECT * FROM tasks WHERE seq = ?1",
    "queue": """SELECT t.*, q.state, q.attempt, q.started_at, q.lease_until,
        q.next_run_at, q.updated_at FROM tasks t JOIN queue q ON q.seq = t.seq
        WHERE t.seq = ?1""",
}

EARLIEST = {
    "today": """SELECT next_run_at FROM tasks INDEXED BY tasks_due_by_destination
        WHERE destination = '127.0.0.1:9' AND state = 'pending'
        ORDER BY next_run_at LIMIT 1""",
    "queue": """SELECT next_run_at FROM queue INDEXED BY queue_due_by_destination
        WHERE destination = '127.0.0.1:9' AND state = 'pending'
        ORDER BY next_run_at LIMIT 1""",
}

HEAD = {
    "today": """SELECT seq, state, attempt, callback_url IS NOT NULL, started_at,
        destination FROM tasks WHERE id = ?1""",
    "queue": """SELECT t.seq, coalesce(q.state, t.state), coalesce(q.attempt, t.attempt),
        t.callback_url IS NOT NULL, q.started_at, t.destination
        FROM tasks t LEFT JOIN queue q ON q.seq = t.seq WHERE t.id = ?1""",
}

END = {
    "today": """UPDATE OR FAIL tasks SET state = 'success', http_status = 200,
        result = ?3, result_content_type = 'application/json', error = NULL,
        finished_at = ?4, next_run_at = NULL, updated_at = ?4, lease_until = NULL,
        ends = ends + 1 WHERE seq = ?1 AND state = 'running' AND attempt = ?2""",
    # The record written once more, at the end: the try's number and start
    # come from the queue row, which goes.
    "queue": """UPDATE OR FAIL tasks SET state = 'success', http_status = 200,
        result = ?3, result_content_type = 'application/json', error = NULL,
        finished_at = ?4, next_run_at = NULL, updated_at = ?4, attempt = ?2,
        started_at = ?5, ends = ends + 1 WHERE seq = ?1 AND state = 'pending'""",
}

QUEUE_END = "DELETE FROM queue WHERE seq = ?1 AND state = 'running' AND attempt = ?2"

HISTORY = """INSERT INTO attempts (task_id, n, started_at, finished_at,
    http_status, error, duration_ms) VALUES (?1, ?2, ?3, ?4, 200, NULL, 0)"""


def make(layout, schema_db, path):
    """A fresh file with the store's schema, changed for `layout`."""
    src = sqlite3.connect(schema_db)
    ddl = [sql for (sql,) in src.execute(
        "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL "
        "AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
    src.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA cache_size = -16384")
    for sql in ddl:
        name = re.match(r"CREATE (?:UNIQUE )?INDEX (\w+)", sql)
        if layout == "queue" and name and name.group(1) in HOT_INDEXES:
            continue
        conn.execute(sql)
    if layout == "queue":
        conn.executescript(QUEUE)
    # A change to try on top of either layout (an index dropped, a pragma).
    conn.executescript(os.environ.get("LAYOUT_EXPERIMENT", ""))
    return conn


def run(layout, schema_db, n, directory):
    conn = make(layout, schema_db, os.path.join(directory, f"{layout}-{n}.db"))
    now = 1_700_000_000_000
    body = b'{"n":0}'
    ids = []
    for start in range(0, n, BATCH):
        conn.execute("BEGIN IMMEDIATE")
        for i in range(start, min(start + BATCH, n)):
            task_id = i.to_bytes(16, "big")
            cur = conn.execute(SUBMIT, (task_id, f"cost-{i}", body, now))
            if layout == "queue":
                conn.execute(QUEUE_INSERT, (cur.lastrowid, now))
            ids.append(task_id)
        conn.execute("COMMIT")
    done = 0
    while done < n:
        now += 1
        conn.execute("BEGIN IMMEDIATE")
        due = conn.execute(CLAIM_WALK[layout], (now,)).fetchall()
        claimed = []
        for seq, _state in due:
            conn.execute(CLAIM_ONE[layout], (seq, now, now + 60_000))
            row = conn.execute(READ_BACK[layout], (seq,)).fetchone()
            claimed.append(row[1])
        conn.execute(EARLIEST[layout]).fetchone()
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        for task_id in claimed:
            seq, _state, attempt, _cb, started, _dest = conn.execute(
                HEAD[layout], (task_id,)).fetchone()
            if layout == "today":
                conn.execute(END[layout], (seq, attempt, b'{"ok":true}', now))
            else:
                conn.execute(END[layout], (seq, attempt, b'{"ok":true}', now, started))
                conn.execute(QUEUE_END, (seq, attempt))
            conn.execute(HISTORY, (task_id, attempt, started, now))
        conn.execute("COMMIT")
        done += len(claimed)
        if not claimed:
            sys.exit(f"nothing due after {done}")
    # Checked only when asked (`--run` alone): under the counter its walk
    # of the table would count as per-task work.
    if not os.environ.get("LAYOUT_CHECK"):
        return
    left = conn.execute("SELECT count(*) FROM tasks WHERE state <> 'success'").fetchone()[0]
    if left:
        sys.exit(f"{layout}: {left} tasks did not end")


def count(layout, schema_db, n, directory):
    out = os.path.join(directory, f"cg.{layout}.{n}")
    log = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         "--toggle-collect=sqlite3_step", sys.executable, __file__, "--run",
         layout, schema_db, str(n), directory],
        capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Collected : (\d+)", log).group(1))


def main():
    if sys.argv[1] == "--run":
        layout, schema_db, n, directory = sys.argv[2:6]
        run(layout, schema_db, int(n), directory)
        return
    schema_db = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    with tempfile.TemporaryDirectory() as directory:
        for layout in os.environ.get("LAYOUTS", "today queue").split():
            a = count(layout, schema_db, n, directory)
            b = count(layout, schema_db, 2 * n, directory)
            print(f"{layout}: N={n} {a}, 2N {b}, per task {(b - a) // n}")


if __name__ == "__main__":
    main()
