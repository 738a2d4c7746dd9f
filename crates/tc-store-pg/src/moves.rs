//! What a statement that moves tasks between states writes beside them:
//! the count deltas (schema step 9) and the due marks (step 11), in the
//! statement itself (schema step 24), where statement triggers on `tasks`
//! wrote them before.
//!
//! The same CTEs keep the narrow `queue` (schema step 25: one row per
//! unfinished task, what the claim walks) in step with `tasks`: a task
//! that became pending or running from nothing or from an end gets its
//! row, one that moved between pending and running has it updated, one
//! that ended or went has it deleted.
//!
//! A node of this version says so for its whole session
//! ([`SESSION_OPTION`], set on every connection it opens); step 25 fences
//! every write to `tasks` of any other session. So every statement this
//! adapter runs that inserts, deletes or changes the state or due time of
//! tasks names a CTE `moves (pos, from_state, to_state, destination, due,
//! tenant, flow_key, priority)` (one row per task it moved: `from_state`
//! NULL for an insert, `to_state` NULL for a delete, `due` the new
//! `next_run_at`) and appends [`count_moves`] to its `WITH` list. A write
//! that changes no state (a heartbeat, a callback's pointer, an error
//! note) writes neither.

/// The session option a node of this version connects with: the fence of
/// schema step 25 lets only such a session write `tasks`.
pub(crate) const SESSION_OPTION: &str = "-c taskcenter.writes=queued";

/// The `WITH` items that write what the CTE `moves` moved: one delta per
/// state and place (the destination for pending and running tasks, none
/// for the others) that changed, as the count trigger wrote them, and the
/// earliest due time of each destination it made tasks pending on, as the
/// due-mark trigger wrote it. Both tables take appends only (no key, no
/// index): neither waits on another writer. Then the queue's rows: a row
/// is reached by an array of positions (a join with the CTE alone may be
/// planned as a scan of the whole queue), and its lock is taken after the
/// task's, which the statement holds (every writer locks the task first).
macro_rules! count_moves {
    () => {
        ", counted AS ( \
             INSERT INTO task_count_deltas (state, destination, n) \
             SELECT state, CASE WHEN state IN ('pending', 'running') THEN destination END, \
                    sum(d) \
             FROM (SELECT to_state AS state, destination, 1 AS d FROM moves \
                   WHERE to_state IS NOT NULL \
                   UNION ALL \
                   SELECT from_state, destination, -1 FROM moves \
                   WHERE from_state IS NOT NULL) AS m \
             GROUP BY 1, 2 HAVING sum(d) <> 0 \
         ), marked AS ( \
             INSERT INTO due_marks (destination, due_at) \
             SELECT destination, min(due) FROM moves \
             WHERE to_state = 'pending' AND due IS NOT NULL GROUP BY destination \
         ), queued AS ( \
             INSERT INTO queue (pos, state, destination, tenant, flow_key, priority, \
                                next_run_at) \
             SELECT pos, to_state, destination, tenant, flow_key, priority, due FROM moves \
             WHERE to_state IN ('pending', 'running') \
               AND (from_state IS NULL OR from_state NOT IN ('pending', 'running')) \
         ), requeued AS ( \
             UPDATE queue q SET state = m.to_state, next_run_at = m.due FROM moves m \
             WHERE q.pos = ANY (ARRAY(SELECT pos FROM moves \
                                      WHERE to_state IN ('pending', 'running') \
                                        AND from_state IN ('pending', 'running'))) \
               AND q.pos = m.pos \
         ), dequeued AS ( \
             DELETE FROM queue q \
             WHERE q.pos = ANY (ARRAY(SELECT pos FROM moves \
                                      WHERE from_state IN ('pending', 'running') \
                                        AND (to_state IS NULL \
                                             OR to_state NOT IN ('pending', 'running')))) \
         ) "
    };
}
pub(crate) use count_moves;
