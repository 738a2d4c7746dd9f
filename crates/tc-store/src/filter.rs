//! A [`TaskFilter`] as SQL: the predicate of its driving index (which
//! SQLite walks in seq order) and the check of its other fields, with the
//! values bound by name.

use rusqlite::ToSql;
use rusqlite::types::Value;
use tc_model::State;
use tc_model::store::{Driving, TaskFilter, TermValue};

/// A filter turned into SQL text and named values.
pub(crate) struct FilterSql {
    /// The table pinned to the driving index (`tasks INDEXED BY …`):
    /// left to itself, the planner prefers the equality on the state
    /// whatever else is given.
    pub(crate) table: &'static str,
    /// The driving index's term (`state = :state`, …), or `1`.
    pub(crate) driving: String,
    /// Every other given field, joined by `AND`, or `1`.
    pub(crate) rest: String,
    values: Vec<(String, Value)>,
}

/// The predicate of `tasks_ended` (schema step 29), which a statement
/// walking that index says literally: SQLite cannot see that a bound state
/// implies it.
macro_rules! ended_terms {
    () => {
        "state <> 'pending' AND state <> 'running'"
    };
}
pub(crate) use ended_terms;

/// The table pinned to the partial index that holds the tasks in `state`
/// (schema step 29), and the terms that say its predicate.
fn state_index(state: Option<State>) -> (&'static str, &'static str) {
    match state {
        Some(State::Pending) => ("tasks INDEXED BY tasks_pending", "state = 'pending'"),
        Some(State::Running) => ("tasks INDEXED BY tasks_leased", "state = 'running'"),
        _ => ("tasks INDEXED BY tasks_ended", ended_terms!()),
    }
}

impl FilterSql {
    /// The SQL of `filter` (its terms are tc-model's [`TaskFilter::terms`]).
    pub(crate) fn new(filter: &TaskFilter) -> FilterSql {
        let driving = filter.driving();
        let mut rest = Vec::new();
        let mut values = Vec::new();
        let mut driving_term = "1".to_owned();
        for term in filter.terms() {
            let mut sql = format!("{} {} :{}", term.column, term.op, term.name);
            if term.field == Driving::Tenant {
                // A named tenant is never '' (none, as stored): said, so
                // that SQLite may use the partial `tasks_by_tenant`.
                sql = format!("({sql} AND tenant <> '')");
            }
            if term.field == Driving::State {
                // Said with the literal terms of the partial index that
                // holds the state (schema step 29), so that SQLite may
                // walk it: it cannot see that a bound value implies them.
                sql = format!("({sql} AND {})", state_index(filter.state).1);
            }
            if term.drives(driving) {
                driving_term = sql;
            } else {
                rest.push(sql);
            }
            let value = match term.value {
                TermValue::Text(text) => Value::Text(text),
                TermValue::Millis(ms) => Value::Integer(ms),
                TermValue::Int(n) => Value::Integer(i64::from(n)),
            };
            values.push((format!(":{}", term.name), value));
        }
        // Each index ends in seq (the rowid), so the walk needs no sort,
        // but the key's: (key, tenant) holds one task per tenant at most,
        // a handful to sort; and the running tasks' (`tasks_leased`, by
        // lease): as many as the workers run at once.
        let table = match driving {
            Driving::All => "tasks",
            Driving::IdempotencyKey => "tasks INDEXED BY tasks_by_key",
            Driving::Error => "tasks INDEXED BY tasks_by_error",
            Driving::Destination => "tasks INDEXED BY tasks_by_destination",
            Driving::State => state_index(filter.state).0,
            Driving::Tenant => "tasks INDEXED BY tasks_by_tenant",
        };
        let rest = if rest.is_empty() {
            "1".to_owned()
        } else {
            rest.join(" AND ")
        };
        FilterSql {
            table,
            driving: driving_term,
            rest,
            values,
        }
    }

    /// The named values, with `extra` ones (`:after`, `:limit`, …) after them.
    pub(crate) fn params<'a>(
        &'a self,
        extra: &[(&'a str, &'a dyn ToSql)],
    ) -> Vec<(&'a str, &'a dyn ToSql)> {
        let mut params: Vec<(&str, &dyn ToSql)> = self
            .values
            .iter()
            .map(|(name, value)| (name.as_str(), value as &dyn ToSql))
            .collect();
        params.extend_from_slice(extra);
        params
    }
}
