//! The words of `hermes-meter budget set | rm`: a limit's scope, id,
//! window, unit and amount (`global 5h usd 20`, `cron 3f9a daily 2.50`,
//! `run tool_calls 200`), read into what `budget.rs` writes. Must not
//! touch: the budget file (`budget.rs` edits it through the model's
//! `crates/hermes-meter-model/src/budget/edit.rs`).

use hermes_meter_model::budget::rate::{Rate, RateUnit};
use hermes_meter_model::budget::{self, BudgetUnit, CapScope, CapUnit, Scope, Window};

/// Whether `set`/`rm` arguments name a cap (`session` or `run` first).
pub(super) fn is_cap(args: &[String]) -> bool {
    args.first().is_some_and(|a| CapScope::parse(a).is_some())
}

/// Reads `session|run <unit> <limit>`.
pub(super) fn parse_cap_set(args: &[String]) -> std::result::Result<(CapScope, CapUnit, f64), String> {
    let [scope, unit, limit] = args else {
        return Err("usage: budget set session|run usd|tokens|tool_calls <limit>".into());
    };
    let (scope, unit) = parse_cap_words(scope, unit)?;
    let bad = || format!("{limit:?} is not a {} limit", unit.as_str());
    let value: f64 = match unit {
        CapUnit::Usd => limit.trim_start_matches('$').parse().map_err(|_| bad())?,
        CapUnit::Tokens | CapUnit::ToolCalls => limit.replace('_', "").parse::<u64>().map_err(|_| bad())? as f64,
    };
    if !value.is_finite() || value <= 0.0 {
        return Err(format!(
            "a cap must be more than 0, not {limit}; to have no cap, remove it: hermes-meter budget rm {scope} {}",
            unit.as_str()
        ));
    }
    Ok((scope, unit, value))
}

/// Reads `session|run <unit>`.
pub(super) fn parse_cap_rm(args: &[String]) -> std::result::Result<(CapScope, CapUnit), String> {
    let [scope, unit] = args else {
        return Err("usage: budget rm session|run usd|tokens|tool_calls".into());
    };
    parse_cap_words(scope, unit)
}

fn parse_cap_words(scope: &str, unit: &str) -> std::result::Result<(CapScope, CapUnit), String> {
    let scope = CapScope::parse(scope).ok_or_else(|| format!("unknown cap scope {scope:?}: use session or run"))?;
    let unit =
        CapUnit::parse(unit).ok_or_else(|| format!("unknown cap unit {unit:?}: use usd, tokens or tool_calls"))?;
    Ok((scope, unit))
}

/// Reads `<scope> [<id>] <window> <limit>`: the window word is the file's
/// key (`daily`, `daily_tokens`), which says the limit's unit.
pub(super) fn parse_set(
    args: &[String],
) -> std::result::Result<(Scope, Option<String>, Window, BudgetUnit, f64), String> {
    let args = &with_unit_word(args)?;
    let scope_word = args.first().ok_or("missing scope")?;
    let scope = Scope::parse(scope_word)
        .ok_or_else(|| format!("unknown scope {scope_word:?}: use global, cron, sender, profile or model"))?;
    let (id, window, amount) = match (scope, args.len()) {
        (Scope::Global, 3) => (None, &args[1], &args[2]),
        // A window word that is none (`global 90m usd 1`) says so first.
        (Scope::Global, _) => {
            return Err(parse_window(&args[1])
                .err()
                .unwrap_or_else(|| "global takes no id: budget set global <window> <limit>".into()))
        }
        (_, 3) => (None, &args[1], &args[2]),
        (_, 4) => (Some(args[1].clone()), &args[2], &args[3]),
        _ => return Err("usage: budget set <scope> [<id>] <window> <limit>".into()),
    };
    let (window, unit) = parse_window(window)?;
    let limit = match unit {
        BudgetUnit::Usd => amount
            .trim_start_matches('$')
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite()),
        BudgetUnit::Tokens => budget::parse_tokens(amount),
    }
    .ok_or_else(|| match unit {
        BudgetUnit::Usd => format!("{amount:?} is not an amount of USD"),
        BudgetUnit::Tokens => format!("{amount:?} is not a number of tokens (e.g. 5000000, 250k, 5M)"),
    })?;
    if limit <= 0.0 {
        return Err(format!(
            "a limit must be more than 0 {}, not {limit}; to have no limit, remove it: hermes-meter budget rm {}",
            if unit == BudgetUnit::Usd { "USD" } else { "tokens" },
            args[..args.len() - 1].join(" ")
        ));
    }
    Ok((scope, id, window, unit, limit))
}

/// A rate limit as `budget set | rm` name it: scope, id (none for the
/// scope's default), rate and limit (0 for `rm`).
pub(super) type RateWords = (Scope, Option<String>, Rate, f64);

/// Reads `<scope> [<id>] <rate> <limit>` (with `amount`) or `<scope>
/// [<id>] <rate>`, where the rate word is a rate limit's key
/// (`requests_per_minute`, `usd_per_hour`, ...); `None` when the words
/// name no rate limit (a budget's window or a cap).
pub(super) fn parse_rate(args: &[String], amount: bool) -> Option<std::result::Result<RateWords, String>> {
    let scope = Scope::parse(args.first()?)?;
    let words = args.len() - usize::from(amount);
    let (id, key) = match (scope, words) {
        (Scope::Global, 2) | (_, 2) => (None, &args[1]),
        (_, 3) => (Some(args[1].clone()), &args[2]),
        _ => return None,
    };
    let rate = Rate::parse(key)?;
    if scope == Scope::Global && id.is_some() {
        return Some(Err("global takes no id: budget set global <rate> <limit>".into()));
    }
    if !amount {
        return Some(Ok((scope, id, rate, 0.0)));
    }
    let text = &args[args.len() - 1];
    let limit = match rate.unit {
        RateUnit::Usd => text.trim_start_matches('$').parse::<f64>().ok(),
        RateUnit::Tokens | RateUnit::Requests => budget::parse_tokens(text),
    };
    Some(match limit.filter(|v| v.is_finite()) {
        Some(v) if v > 0.0 => Ok((scope, id, rate, v)),
        Some(v) => Err(format!(
            "a rate limit must be more than 0, not {v}; to have none, remove it: hermes-meter budget rm {}",
            args[..args.len() - 1].join(" ")
        )),
        None => Err(format!("{text:?} is not a {rate} limit (e.g. 30, 200k, 0.50)")),
    })
}

/// Reads a window word: `daily`, `weekly`, `monthly` or a rolling width
/// (`5h`, `7d`) for USD, or the same with `_tokens`.
fn parse_window(word: &str) -> std::result::Result<(Window, BudgetUnit), String> {
    budget::parse_limit_key(word).ok_or_else(|| {
        format!(
            "unknown window {word:?}: use daily, weekly, monthly or a rolling {} (USD), \
             or the same with _tokens (daily_tokens, 5h_tokens), or the window then usd or tokens (5h usd 20)",
            budget::Rolling::names()
        )
    })
}

/// The arguments with a unit word after the window (`5h usd 20`, `7d
/// tokens 50M`, as people say it) folded into the window's key (`5h`,
/// `7d_tokens`). A word is a unit only right after a window word, so an id
/// named `usd` stays an id.
fn with_unit_word(args: &[String]) -> std::result::Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::with_capacity(args.len());
    for (i, arg) in args.iter().enumerate() {
        let unit = match arg.to_ascii_lowercase().as_str() {
            "usd" | "$" => Some(BudgetUnit::Usd),
            "tokens" => Some(BudgetUnit::Tokens),
            _ => None,
        };
        let window = out.last().filter(|_| i >= 2).and_then(|w| budget::parse_limit_key(w));
        match (unit, window) {
            (Some(unit), Some((window, BudgetUnit::Usd))) => {
                let key = budget::limit_key(window, unit).to_string();
                *out.last_mut().expect("a window word") = key;
            }
            (Some(_), Some((_, BudgetUnit::Tokens))) => {
                return Err(format!("{arg:?} after {:?}: name the unit once", out[out.len() - 1]));
            }
            _ => out.push(arg.clone()),
        }
    }
    Ok(out)
}

/// Reads `<scope> [<id>] <window>`.
pub(super) fn parse_rm(args: &[String]) -> std::result::Result<(Scope, Option<String>, Window, BudgetUnit), String> {
    let args = &with_unit_word(args)?;
    let scope_word = args.first().ok_or("missing scope")?;
    let scope = Scope::parse(scope_word)
        .ok_or_else(|| format!("unknown scope {scope_word:?}: use global, cron, sender, profile or model"))?;
    let (id, window) = match (scope, args.len()) {
        (Scope::Global, 2) => (None, &args[1]),
        (Scope::Global, _) => {
            return Err(parse_window(&args[1])
                .err()
                .unwrap_or_else(|| "global takes no id: budget rm global <window>".into()))
        }
        (_, 2) => (None, &args[1]),
        (_, 3) => (Some(args[1].clone()), &args[2]),
        _ => return Err("usage: budget rm <scope> [<id>] <window>".into()),
    };
    let (window, unit) = parse_window(window)?;
    Ok((scope, id, window, unit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_meter_model::budget::BudgetConfig;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn set_arguments_parse_with_and_without_an_id() {
        assert_eq!(
            parse_set(&args("cron 3f9a1c2b7d10 daily 2.50")),
            Ok((
                Scope::CronJob,
                Some("3f9a1c2b7d10".into()),
                Window::Daily,
                BudgetUnit::Usd,
                2.5
            ))
        );
        assert_eq!(
            parse_set(&args("global monthly 100")),
            Ok((Scope::Global, None, Window::Monthly, BudgetUnit::Usd, 100.0))
        );
        assert_eq!(
            parse_set(&args("model weekly 5")),
            Ok((Scope::Model, None, Window::Weekly, BudgetUnit::Usd, 5.0))
        );
        assert!(parse_set(&args("global x daily 1")).is_err());
        assert!(parse_set(&args("team daily 1")).is_err());
        assert!(parse_set(&args("cron x hourly 1")).is_err());
        assert!(parse_set(&args("cron x daily -1")).is_err());
    }

    #[test]
    fn a_limit_of_zero_is_refused_with_the_way_to_remove_one() {
        let e = parse_set(&args("global daily 0")).expect_err("0 is no limit");
        assert!(e.contains("more than 0") && e.contains("budget rm global daily"), "{e}");
        let e = BudgetConfig::parse("[global]\ndaily = 0\n").expect_err("0 in the file");
        assert!(e.contains("more than 0"), "{e}");
    }

    #[test]
    fn rate_limits_are_read_by_their_key() {
        let rpm = Rate::parse("requests_per_minute").expect("rate");
        assert_eq!(
            parse_rate(&args("global requests_per_minute 30"), true),
            Some(Ok((Scope::Global, None, rpm, 30.0)))
        );
        assert_eq!(
            parse_rate(&args("model gpt-4o tokens_per_minute 200k"), true),
            Some(Ok((
                Scope::Model,
                Some("gpt-4o".into()),
                Rate::parse("tokens_per_minute").expect("rate"),
                200_000.0
            )))
        );
        assert_eq!(
            parse_rate(&args("global requests_per_minute"), false),
            Some(Ok((Scope::Global, None, rpm, 0.0)))
        );
        assert_eq!(parse_rate(&args("global daily 10"), true), None, "a budget");
        assert_eq!(parse_rate(&args("run tool_calls 200"), true), None, "a cap");
        assert!(matches!(
            parse_rate(&args("global requests_per_minute 0"), true),
            Some(Err(_))
        ));
        assert!(matches!(
            parse_rate(&args("global usd_per_hour lots"), true),
            Some(Err(_))
        ));
    }

    #[test]
    fn a_unit_word_after_the_window_names_the_unit() {
        let five = Window::parse("5h").expect("5h");
        assert_eq!(
            parse_set(&args("global 5h usd 20")),
            Ok((Scope::Global, None, five, BudgetUnit::Usd, 20.0))
        );
        assert_eq!(
            parse_set(&args("sender alice 7d tokens 50M")),
            Ok((
                Scope::Sender,
                Some("alice".into()),
                Window::parse("7d").expect("7d"),
                BudgetUnit::Tokens,
                50e6
            ))
        );
        assert_eq!(
            parse_rm(&args("global 5h tokens")),
            Ok((Scope::Global, None, five, BudgetUnit::Tokens))
        );
        // An id that reads like a unit stays an id.
        assert_eq!(
            parse_set(&args("sender usd daily 1")),
            Ok((Scope::Sender, Some("usd".into()), Window::Daily, BudgetUnit::Usd, 1.0))
        );
        assert!(parse_set(&args("global daily_tokens tokens 5")).is_err());
        let e = parse_set(&args("global 90m usd 1")).expect_err("no 90m window");
        assert!(e.contains("5h") && e.contains("30d"), "{e}");
    }
}
