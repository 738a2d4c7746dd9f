//! A [`TaskFilter`] as SQL: the predicate of its driving index (which
//! SQLite walks in seq order) and the check of its other fields, with the
//! values bound by name.

use rusqlite::ToSql;
use rusqlite::types::Value;
use tc_model::store::{Driving, TaskFilter};

/// A filter turned into SQL text and named values.
pub(crate) struct FilterSql {
    /// The table pinned to the driving index (`tasks INDEXED BY …`):
    /// left to itself, the planner prefers the equality on `tasks_by_state`
    /// whatever else is given.
    pub(crate) table: &'static str,
    /// The driving index's term (`state = :state`, …), or `1`.
    pub(crate) driving: &'static str,
    /// Every other given field, joined by `AND`, or `1`.
    pub(crate) rest: String,
    values: Vec<(&'static str, Value)>,
}

impl FilterSql {
    /// The SQL of `filter`.
    pub(crate) fn new(filter: &TaskFilter) -> FilterSql {
        let driving = filter.driving();
        let mut rest = Vec::new();
        let mut values = Vec::new();
        let mut term = |field: Driving, sql: &'static str, name: &'static str, value: Value| {
            if field != driving || field == Driving::All {
                rest.push(sql);
            }
            values.push((name, value));
        };
        if let Some(state) = filter.state {
            term(
                Driving::State,
                "state = :state",
                ":state",
                Value::Text(state.as_str().to_owned()),
            );
        }
        if let Some(destination) = &filter.destination {
            term(
                Driving::Destination,
                "destination = :destination",
                ":destination",
                Value::Text(destination.clone()),
            );
        }
        if let Some(error) = &filter.error {
            term(
                Driving::Error,
                "error = :error",
                ":error",
                Value::Text(error.clone()),
            );
        }
        if let Some(key) = &filter.idempotency_key {
            term(
                Driving::IdempotencyKey,
                "idempotency_key = :key",
                ":key",
                Value::Text(key.clone()),
            );
        }
        if let Some(t) = filter.created_after {
            term(
                Driving::All,
                "created_at >= :created_after",
                ":created_after",
                Value::Integer(t.as_millis()),
            );
        }
        if let Some(t) = filter.created_before {
            term(
                Driving::All,
                "created_at < :created_before",
                ":created_before",
                Value::Integer(t.as_millis()),
            );
        }
        // Each index ends in seq (the rowid), so the walk needs no sort. The
        // key's unique index is left unpinned: an equality on it always wins.
        let (table, driving) = match driving {
            Driving::IdempotencyKey => ("tasks", "idempotency_key = :key"),
            Driving::Error => ("tasks INDEXED BY tasks_by_error", "error = :error"),
            Driving::Destination => (
                "tasks INDEXED BY tasks_by_destination",
                "destination = :destination",
            ),
            Driving::State => ("tasks INDEXED BY tasks_by_state", "state = :state"),
            Driving::All => ("tasks", "1"),
        };
        let rest = if rest.is_empty() {
            "1".to_owned()
        } else {
            rest.join(" AND ")
        };
        FilterSql {
            table,
            driving,
            rest,
            values,
        }
    }

    /// The named values, with `extra` ones (`:after`, `:limit`, …) after them.
    pub(crate) fn params<'a>(
        &'a self,
        extra: &[(&'static str, &'a dyn ToSql)],
    ) -> Vec<(&'static str, &'a dyn ToSql)> {
        let mut params: Vec<(&'static str, &dyn ToSql)> = self
            .values
            .iter()
            .map(|(name, value)| (*name, value as &dyn ToSql))
            .collect();
        params.extend_from_slice(extra);
        params
    }
}
