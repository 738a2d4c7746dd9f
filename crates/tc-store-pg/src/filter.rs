//! A [`TaskFilter`] as SQL: the term of its driving index and the check of
//! its other fields, with numbered parameters after the caller's own.

use tc_model::store::{Driving, TaskFilter, TermValue};
use tokio_postgres::types::ToSql;

/// A filter turned into SQL text and its parameter values.
pub(crate) struct FilterSql {
    /// The driving index's term (`state = $3`, …), or `true`.
    pub(crate) driving: String,
    /// Every other given field, joined by `AND`, or `true`.
    pub(crate) rest: String,
    values: Vec<Box<dyn ToSql + Sync + Send>>,
}

/// Whether a task in `state` (as stored) has a row in `queue`.
fn queued(state: &str) -> bool {
    state == "pending" || state == "running"
}

impl FilterSql {
    /// The SQL of `filter` (its terms are tc-model's [`TaskFilter::terms`]),
    /// its parameters numbered from `$first`.
    pub(crate) fn new(filter: &TaskFilter, first: usize) -> FilterSql {
        let driving_field = filter.driving();
        let mut driving = "true".to_owned();
        let mut rest = Vec::new();
        let mut values: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
        for term in filter.terms() {
            let mut sql = format!("{} {} ${}", term.column, term.op, first + values.len());
            if term.field == Driving::Tenant {
                // Never true of a task without one (stored `''`), and it
                // lets the planner use the partial index `tasks_by_tenant`
                // (`WHERE tenant <> ''`) whatever the parameter's value.
                sql = format!("({sql} AND tenant <> '')");
            }
            if term.field == Driving::State
                && matches!(&term.value, TermValue::Text(state) if queued(state))
            {
                // Pending and running tasks are those of the narrow `queue`
                // (schema step 25: `tasks` no longer indexes its state, so
                // that a claim and an end stay HOT), written in the same
                // statements as `tasks`: the same in any snapshot. Planned
                // as a merge of the two position indexes (the entries of
                // `tasks_pkey` alone, no row read, from the cursor to the
                // last match); a finished state walks the rows.
                let n = first + values.len();
                sql = format!("pos IN (SELECT q.pos FROM queue q WHERE q.state = ${n})");
            }
            let drives = term.drives(driving_field);
            values.push(match term.value {
                TermValue::Text(text) => Box::new(text),
                TermValue::Millis(ms) => Box::new(ms),
                TermValue::Int(n) => Box::new(n),
            });
            if drives {
                driving = sql;
            } else {
                rest.push(sql);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn check(filter: TaskFilter, driving: &str, rest: &str) {
        let sql = FilterSql::new(&filter, 3);
        assert_eq!(
            (sql.driving.as_str(), sql.rest.as_str()),
            (driving, rest),
            "{filter:?}"
        );
    }

    #[test]
    fn a_tenant_term_names_the_partial_index_s_predicate() {
        let tenant = || Some("acme".to_owned());
        check(
            TaskFilter {
                tenant: tenant(),
                ..TaskFilter::default()
            },
            "(tenant = $3 AND tenant <> '')",
            "true",
        );
        check(
            TaskFilter {
                tenant: tenant(),
                state: Some(tc_model::State::Pending),
                ..TaskFilter::default()
            },
            "(tenant = $4 AND tenant <> '')",
            "pos IN (SELECT q.pos FROM queue q WHERE q.state = $3)",
        );
        check(
            TaskFilter {
                tenant: tenant(),
                destination: Some("h:80".into()),
                ..TaskFilter::default()
            },
            "destination = $3",
            "(tenant = $4 AND tenant <> '')",
        );
    }
}
