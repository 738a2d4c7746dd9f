//! What a statement that moves tasks between states writes beside them:
//! the count deltas (schema step 9) and the due marks (step 11), in the
//! statement itself (schema step 24), where statement triggers on `tasks`
//! wrote them before.
//!
//! A node of this version says so for its whole session
//! ([`SESSION_OPTION`], set on every connection it opens); the triggers,
//! kept for nodes of earlier versions still serving, do nothing for such a
//! session. So every statement this adapter runs that inserts, deletes or
//! changes the state of tasks names a CTE `moves (from_state, to_state,
//! destination, due)` (one row per task it moved: `from_state` NULL for an
//! insert, `to_state` NULL for a delete, `due` the new `next_run_at`) and
//! appends [`count_moves`] to its `WITH` list. A write that changes no
//! state (a heartbeat, a callback's pointer, an error note) writes neither.

/// The session option a node of this version connects with: the triggers
/// of schema step 24 skip every statement of such a session.
pub(crate) const SESSION_OPTION: &str = "-c taskcenter.writes=counted";

/// The `WITH` items that write what the CTE `moves` moved: one delta per
/// state and place (the destination for pending and running tasks, none
/// for the others) that changed, as the count trigger wrote them, and the
/// earliest due time of each destination it made tasks pending on, as the
/// due-mark trigger wrote it. Both tables take appends only (no key, no
/// index): neither waits on another writer.
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
         ) "
    };
}
pub(crate) use count_moves;
