//! A [`TaskFilter`] as SQL: the term of its driving index and the check of
//! its other fields, with numbered parameters after the caller's own.

use tc_model::store::{Driving, TaskFilter};
use tokio_postgres::types::ToSql;

/// A filter turned into SQL text and its parameter values.
pub(crate) struct FilterSql {
    /// The driving index's term (`state = $3`, …), or `true`.
    pub(crate) driving: String,
    /// Every other given field, joined by `AND`, or `true`.
    pub(crate) rest: String,
    values: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl FilterSql {
    /// The SQL of `filter`, its parameters numbered from `$first`.
    pub(crate) fn new(filter: &TaskFilter, first: usize) -> FilterSql {
        let driving_field = filter.driving();
        let mut driving = "true".to_owned();
        let mut rest = Vec::new();
        let mut values: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
        let mut term =
            |field: Driving, column: &str, op: &str, value: Box<dyn ToSql + Sync + Send>| {
                let sql = format!("{column} {op} ${}", first + values.len());
                values.push(value);
                if field == driving_field && field != Driving::All {
                    driving = sql;
                } else {
                    rest.push(sql);
                }
            };
        if let Some(state) = filter.state {
            term(
                Driving::State,
                "state",
                "=",
                Box::new(state.as_str().to_owned()),
            );
        }
        if let Some(destination) = &filter.destination {
            term(
                Driving::Destination,
                "destination",
                "=",
                Box::new(destination.clone()),
            );
        }
        if let Some(error) = &filter.error {
            term(Driving::Error, "error", "=", Box::new(error.clone()));
        }
        if let Some(key) = &filter.idempotency_key {
            term(
                Driving::IdempotencyKey,
                "idempotency_key",
                "=",
                Box::new(key.clone()),
            );
        }
        if let Some(t) = filter.created_after {
            term(Driving::All, "created_at", ">=", Box::new(t.as_millis()));
        }
        if let Some(t) = filter.created_before {
            term(Driving::All, "created_at", "<", Box::new(t.as_millis()));
        }
        let rest = if rest.is_empty() {
            "true".to_owned()
        } else {
            rest.join(" AND ")
        };
        FilterSql {
            driving,
            rest,
            values,
        }
    }

    /// The caller's own parameters (`$1` … `$first - 1`), then the filter's.
    pub(crate) fn params<'a>(
        &'a self,
        own: &[&'a (dyn ToSql + Sync)],
    ) -> Vec<&'a (dyn ToSql + Sync)> {
        let mut params = own.to_vec();
        params.extend(self.values.iter().map(|v| &**v as &(dyn ToSql + Sync)));
        params
    }
}
