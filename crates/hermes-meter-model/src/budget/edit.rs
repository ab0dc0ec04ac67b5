//! Editing `budgets.toml` beside its parser (`config.rs`): a limit or a cap
//! set or removed in the file's document, the user's comments, order and
//! other settings kept (`toml_edit`). Pure: the command line reads the file,
//! hands its document here, and writes it back once it parses.

use toml_edit::{DocumentMut, Item, Table, TableLike};

use super::rate::{Rate, RateUnit};
use super::{limit_key, BudgetUnit, CapScope, CapUnit, Scope, Window};

/// Sets `scope`'s (`id`'s, or its default's) `window` limit in `unit` to
/// `limit`; an error names a key of the path that is not a table.
pub fn set_limit(
    doc: &mut DocumentMut,
    scope: Scope,
    id: Option<&str>,
    (window, unit): (Window, BudgetUnit),
    limit: f64,
) -> Result<(), String> {
    let target = scope_table(doc, scope, id)?;
    target[limit_key(window, unit)] = match unit {
        BudgetUnit::Usd => toml_edit::value(limit),
        // A whole number of tokens reads as one in the file.
        BudgetUnit::Tokens => toml_edit::value(limit as i64),
    };
    Ok(())
}

/// The table of `scope`'s limits for `id` (or its default), made if
/// missing; an error names a key of the path that is not a table.
fn scope_table<'d>(doc: &'d mut DocumentMut, scope: Scope, id: Option<&str>) -> Result<&'d mut Item, String> {
    fn table(item: &mut Item, name: &str) -> Result<(), String> {
        if item.is_none() {
            let mut t = Table::new();
            t.set_implicit(true);
            *item = Item::Table(t);
        }
        item.as_table_like()
            .map(|_| ())
            .ok_or_else(|| format!("{name} is not a table"))
    }
    let outer = &mut doc[scope.table()];
    table(outer, scope.table())?;
    Ok(match (scope, id) {
        (Scope::Global, _) => outer,
        (_, None) => {
            let item = &mut outer["default"];
            table(item, "default")?;
            item
        }
        (_, Some(id)) => {
            let overrides = &mut outer["overrides"];
            table(overrides, "overrides")?;
            let item = &mut overrides[id];
            table(item, id)?;
            item
        }
    })
}

/// Removes that limit; false when it is not set.
pub fn remove_limit(
    doc: &mut DocumentMut,
    scope: Scope,
    id: Option<&str>,
    (window, unit): (Window, BudgetUnit),
) -> bool {
    let key = limit_key(window, unit);
    let root = doc.as_table_mut();
    match (scope, id) {
        (Scope::Global, _) => remove_key(root, &[scope.table()], key),
        (_, None) => remove_key(root, &[scope.table(), "default"], key),
        (_, Some(id)) => remove_key(root, &[scope.table(), "overrides", id], key),
    }
}

/// Sets `scope`'s (`id`'s, or its default's) rate limit `rate` to `limit`.
pub fn set_rate(doc: &mut DocumentMut, scope: Scope, id: Option<&str>, rate: Rate, limit: f64) -> Result<(), String> {
    let target = scope_table(doc, scope, id)?;
    target[rate.key()] = match rate.unit {
        RateUnit::Usd => toml_edit::value(limit),
        RateUnit::Tokens | RateUnit::Requests => toml_edit::value(limit as i64),
    };
    Ok(())
}

/// Removes that rate limit; false when it is not set.
pub fn remove_rate(doc: &mut DocumentMut, scope: Scope, id: Option<&str>, rate: Rate) -> bool {
    let root = doc.as_table_mut();
    match (scope, id) {
        (Scope::Global, _) => remove_key(root, &[scope.table()], rate.key()),
        (_, None) => remove_key(root, &[scope.table(), "default"], rate.key()),
        (_, Some(id)) => remove_key(root, &[scope.table(), "overrides", id], rate.key()),
    }
}

/// Sets the per-`scope` cap in `unit` to `limit`.
pub fn set_cap(doc: &mut DocumentMut, scope: CapScope, unit: CapUnit, limit: f64) -> Result<(), String> {
    let item = &mut doc[scope.table()];
    if item.is_none() {
        *item = Item::Table(Table::new());
    }
    let table = item
        .as_table_like_mut()
        .ok_or_else(|| format!("{} is not a table", scope.table()))?;
    let value = match unit {
        CapUnit::Usd => toml_edit::value(limit),
        CapUnit::Tokens | CapUnit::ToolCalls => toml_edit::value(limit as i64),
    };
    table.insert(unit.as_str(), value);
    Ok(())
}

/// Removes that cap; false when it is not set.
pub fn remove_cap(doc: &mut DocumentMut, scope: CapScope, unit: CapUnit) -> bool {
    remove_key(doc.as_table_mut(), &[scope.table()], unit.as_str())
}

/// Removes `key` under the tables `path`, and each table it leaves empty.
fn remove_key(table: &mut dyn TableLike, path: &[&str], key: &str) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return table.remove(key).is_some();
    };
    let Some(inner) = table.get_mut(first).and_then(|i| i.as_table_like_mut()) else {
        return false;
    };
    let removed = remove_key(inner, rest, key);
    if removed && inner.is_empty() {
        table.remove(first);
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::BudgetConfig;

    #[test]
    fn limits_and_caps_are_set_and_removed_keeping_the_users_lines() {
        let mut doc: DocumentMut = "# ours\ntimezone = \"UTC\"\n".parse().expect("toml");
        set_limit(&mut doc, Scope::Global, None, (Window::Daily, BudgetUnit::Usd), 10.0).expect("set");
        set_limit(
            &mut doc,
            Scope::Sender,
            Some("alice"),
            (Window::Weekly, BudgetUnit::Tokens),
            5e6,
        )
        .expect("set");
        set_cap(&mut doc, CapScope::Session, CapUnit::ToolCalls, 40.0).expect("cap");
        let text = doc.to_string();
        assert!(text.starts_with("# ours\ntimezone = \"UTC\"\n"), "{text}");
        assert!(text.contains("weekly_tokens = 5000000"), "{text}");
        let cfg = BudgetConfig::parse(&text).expect("the file parses");
        assert!(!cfg.is_empty());
        assert!(remove_limit(
            &mut doc,
            Scope::Sender,
            Some("alice"),
            (Window::Weekly, BudgetUnit::Tokens)
        ));
        assert!(!remove_limit(
            &mut doc,
            Scope::Sender,
            Some("alice"),
            (Window::Weekly, BudgetUnit::Tokens)
        ));
        assert!(!doc.to_string().contains("alice"), "an emptied table goes: {doc}");
        assert!(remove_cap(&mut doc, CapScope::Session, CapUnit::ToolCalls));
        // Rate limits sit beside the budgets of their scope.
        let rpm = Rate::parse("requests_per_minute").expect("rate");
        set_rate(&mut doc, Scope::Global, None, rpm, 30.0).expect("rate");
        assert!(doc.to_string().contains("requests_per_minute = 30"), "{doc}");
        let cfg = BudgetConfig::parse(&doc.to_string()).expect("the file parses");
        assert_eq!(cfg.limits(Scope::Global, "").rates.get(rpm), Some(30.0));
        assert!(remove_rate(&mut doc, Scope::Global, None, rpm));
        assert!(!remove_rate(&mut doc, Scope::Global, None, rpm));
        // A key of the path that is not a table is said, not overwritten.
        let mut odd: DocumentMut = "per_sender = 3\n".parse().expect("toml");
        let e =
            set_limit(&mut odd, Scope::Sender, None, (Window::Daily, BudgetUnit::Usd), 1.0).expect_err("not a table");
        assert!(e.contains("not a table"), "{e}");
    }
}
