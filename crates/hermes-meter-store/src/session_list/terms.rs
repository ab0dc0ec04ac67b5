//! The statements of the session list: a WHERE clause's terms, numbered
//! as pushed, and a statement with its arguments.

use rusqlite::types::Value;

use super::Resolved;

/// A statement and its arguments.
pub(super) struct Query {
    pub(super) sql: String,
    pub(super) args: Vec<Value>,
}

/// The terms of a WHERE clause and their arguments, numbered as pushed.
#[derive(Default, Clone)]
pub(super) struct Terms {
    pub(super) terms: Vec<String>,
    pub(super) args: Vec<Value>,
}

impl Terms {
    /// Adds `column op ?N` bound to `value`.
    pub(super) fn push(&mut self, column: &str, op: &str, value: Value) {
        self.args.push(value);
        self.terms.push(format!("{column} {op} ?{}", self.args.len()));
    }

    /// Adds `column = ?N` for one value, `column IN (?N, ...)` for several.
    pub(super) fn push_values(&mut self, column: &str, values: &[String]) {
        if let [one] = values {
            return self.push(column, "=", Value::Text(one.clone()));
        }
        let mut marks = Vec::with_capacity(values.len());
        for v in values {
            self.args.push(Value::Text(v.clone()));
            marks.push(format!("?{}", self.args.len()));
        }
        self.terms.push(format!("{column} IN ({})", marks.join(", ")));
    }

    /// The `runs` terms of the platform, cron job, sender and model values
    /// the filter selects.
    pub(super) fn dimensions(resolved: &Resolved<'_>) -> Self {
        let mut terms = Terms::default();
        for (_, column, values) in &resolved.dims {
            terms.push_values(column, values);
        }
        terms
    }

    /// Runs started in `[since, until)` (either end open).
    pub(super) fn started(mut self, since: Option<f64>, until: Option<f64>) -> Self {
        if let Some(since) = since {
            self.push("started_at", ">=", Value::Real(since));
        }
        if let Some(until) = until {
            self.push("started_at", "<", Value::Real(until));
        }
        self
    }

    pub(super) fn and(mut self, term: &str) -> Self {
        self.terms.push(term.to_string());
        self
    }

    pub(super) fn clause(&self) -> String {
        if self.terms.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.terms.join(" AND "))
        }
    }
}
