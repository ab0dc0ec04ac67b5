//! `hermes-otel budget set | list | forecast`: edit the budget file and show
//! each budget's spend, verdict and forecast.
//!
//! `set` edits `budgets.toml` with `toml_edit`, so the user's comments and
//! layout survive, checks the result parses, and replaces the file
//! atomically (a temporary file in the same directory, then a rename): a
//! hook reloading it concurrently sees the old file or the new, never half.

use std::io::Write as _;
use std::path::Path;

use clap::Subcommand;
use jiff::Timestamp;

use crate::budget::{self, BudgetConfig, BudgetState, Level, Scope, Window};
use crate::error::{Error, Result};
use crate::store::Store;

/// The `budget` subcommands.
#[derive(Debug, Subcommand)]
pub enum BudgetCommand {
    /// Set a limit: `set <scope> [<id>] <window> <usd>`. Scope: global, cron,
    /// sender, profile, model; without an id, the scope's default. Window:
    /// daily, weekly, monthly. E.g. `set cron 3f9a1c2b7d10 daily 2.50`.
    Set {
        /// <scope> [<id>] <window> <usd>
        #[arg(required = true, num_args = 3..=4, value_name = "ARGS")]
        args: Vec<String>,
    },
    /// Each budget with its spend, limit and verdict now.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Each budget's burn rate projected to the end of its window.
    Forecast {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `budget` subcommand against the store directory `dir`.
pub fn run(dir: &Path, cmd: &BudgetCommand) -> Result<i32> {
    let path = dir.join(budget::BUDGETS_FILE_NAME);
    match cmd {
        BudgetCommand::Set { args } => {
            let (scope, id, window, usd) = parse_set(args).map_err(Error::Other)?;
            set(&path, scope, id.as_deref(), window, usd)?;
            let what = match (&id, scope) {
                (_, Scope::Global) => format!("global {window}"),
                (Some(id), _) => format!("{scope} {id} {window}"),
                (None, _) => format!("{scope} (default) {window}"),
            };
            println!("{what} limit set to ${usd:.2} in {}", path.display());
            Ok(0)
        }
        BudgetCommand::List { json } => {
            let cfg = BudgetConfig::load(&path)?;
            let states = states(dir, &cfg)?;
            if *json {
                let rows: Vec<_> = states.iter().map(|s| state_json(s, None)).collect();
                print_json(&serde_json::json!({"mode": cfg.mode.as_str(), "timezone": cfg.tz_name, "budgets": rows}))?;
            } else if states.is_empty() {
                println!("no budgets set; add one with: hermes-otel budget set global daily 10");
            } else {
                println!("mode {}, windows in {}", cfg.mode.as_str(), cfg.tz_name);
                println!(
                    "{:<8} {:<20} {:<8} {:>10} {:>10} {:>5}  {:<8} {:>10}  resets",
                    "scope", "id", "window", "spend", "limit", "%", "verdict", "estimated"
                );
                for s in &states {
                    let verdict = if s.softened { "soft*" } else { s.level.as_str() };
                    println!(
                        "{:<8} {:<20} {:<8} {:>10} {:>10} {:>5}  {:<8} {:>10}  {}",
                        s.budget.scope.as_str(),
                        if s.budget.id.is_empty() { "-" } else { &s.budget.id },
                        s.budget.window.as_str(),
                        format!("${:.4}", s.spend.total()),
                        format!("${:.2}", s.budget.limit),
                        pct(s.spend.total(), s.budget.limit),
                        verdict,
                        format!("${:.4}", s.spend.estimated_usd),
                        local(s.window_end, &cfg)
                    );
                }
                if states.iter().any(|s| s.softened) {
                    println!("* hard breach softened: it rests on estimated costs (soften_estimated = true)");
                }
            }
            Ok(0)
        }
        BudgetCommand::Forecast { json } => {
            let cfg = BudgetConfig::load(&path)?;
            let states = states(dir, &cfg)?;
            let now = super::time::now();
            let rows: Vec<_> = states
                .iter()
                .map(|s| {
                    let (start, end) = budget::window_bounds(s.budget.window, budget::timestamp(now), &cfg.tz);
                    (
                        s,
                        budget::forecast(s.spend.total(), start.as_second(), end.as_second(), now),
                    )
                })
                .collect();
            if *json {
                let out: Vec<_> = rows.iter().map(|(s, f)| state_json(s, Some(f))).collect();
                print_json(&serde_json::json!({"budgets": out}))?;
            } else if rows.is_empty() {
                println!("no budgets set");
            } else {
                println!(
                    "{:<8} {:<20} {:<8} {:>10} {:>10} {:>12} {:>10}  at window end",
                    "scope", "id", "window", "spend", "limit", "$/hour", "projected"
                );
                for (s, f) in &rows {
                    let over = if f.projected_usd >= s.budget.limit * cfg.hard_threshold {
                        "over the limit"
                    } else if f.projected_usd >= s.budget.limit * cfg.soft_threshold {
                        "past the soft threshold"
                    } else {
                        "within"
                    };
                    println!(
                        "{:<8} {:<20} {:<8} {:>10} {:>10} {:>12} {:>10}  {over} ({})",
                        s.budget.scope.as_str(),
                        if s.budget.id.is_empty() { "-" } else { &s.budget.id },
                        s.budget.window.as_str(),
                        format!("${:.4}", s.spend.total()),
                        format!("${:.2}", s.budget.limit),
                        format!("${:.4}", f.usd_per_hour),
                        format!("${:.2}", f.projected_usd),
                        local(s.window_end, &cfg)
                    );
                }
            }
            Ok(0)
        }
    }
}

fn states(dir: &Path, cfg: &BudgetConfig) -> Result<Vec<BudgetState>> {
    if cfg.is_empty() {
        return Ok(Vec::new());
    }
    let store = Store::open_dir(dir)?;
    store.budget_states(cfg, super::time::now())
}

fn pct(spend: f64, limit: f64) -> String {
    if limit > 0.0 {
        format!("{:.0}", 100.0 * spend / limit)
    } else {
        "-".into()
    }
}

fn local(unix: i64, cfg: &BudgetConfig) -> String {
    Timestamp::from_second(unix)
        .map(|t| t.to_zoned(cfg.tz.clone()).strftime("%Y-%m-%d %H:%M %Z").to_string())
        .unwrap_or_default()
}

fn state_json(s: &BudgetState, f: Option<&budget::Forecast>) -> serde_json::Value {
    let mut v = serde_json::json!({
        "scope": s.budget.scope.as_str(),
        "id": s.budget.id,
        "window": s.budget.window.as_str(),
        "period": s.period,
        "limit_usd": s.budget.limit,
        "spend_usd": s.spend.total(),
        "settled_usd": s.spend.settled_usd,
        "estimated_usd": s.spend.estimated_usd,
        "reserved_usd": s.spend.reserved_usd,
        "verdict": s.level.as_str(),
        "softened": s.softened,
        "window_end": s.window_end,
    });
    if let Some(f) = f {
        v["usd_per_hour"] = f.usd_per_hour.into();
        v["projected_usd"] = f.projected_usd.into();
        v["projected_verdict"] = if f.projected_usd >= s.budget.limit {
            Level::Hard.as_str()
        } else {
            "within"
        }
        .into();
    }
    v
}

fn print_json(v: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| Error::Other(e.to_string()))?;
    println!("{text}");
    Ok(())
}

/// Reads `<scope> [<id>] <window> <usd>`.
pub fn parse_set(args: &[String]) -> std::result::Result<(Scope, Option<String>, Window, f64), String> {
    let scope_word = args.first().ok_or("missing scope")?;
    let scope = Scope::parse(scope_word)
        .ok_or_else(|| format!("unknown scope {scope_word:?}: use global, cron, sender, profile or model"))?;
    let (id, window, usd) = match (scope, args.len()) {
        (Scope::Global, 3) => (None, &args[1], &args[2]),
        (Scope::Global, _) => return Err("global takes no id: budget set global <window> <usd>".into()),
        (_, 3) => (None, &args[1], &args[2]),
        (_, 4) => (Some(args[1].clone()), &args[2], &args[3]),
        _ => return Err("usage: budget set <scope> [<id>] <window> <usd>".into()),
    };
    let window =
        Window::parse(window).ok_or_else(|| format!("unknown window {window:?}: use daily, weekly or monthly"))?;
    let usd: f64 = usd
        .trim_start_matches('$')
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("{usd:?} is not an amount of USD"))?;
    Ok((scope, id, window, usd))
}

/// Sets one limit in the budget file at `path`, keeping everything else.
pub fn set(path: &Path, scope: Scope, id: Option<&str>, window: Window, usd: f64) -> Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => NEW_FILE_HEADER.to_string(),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| Error::Config {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let table = |item: &mut toml_edit::Item| -> Option<()> {
        if item.is_none() {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            *item = toml_edit::Item::Table(t);
        }
        item.as_table_like().map(|_| ())
    };
    let bad = |what: &str| Error::Config {
        path: path.to_path_buf(),
        message: format!("{what} is not a table"),
    };
    let target: &mut toml_edit::Item = match (scope, id) {
        (Scope::Global, _) => {
            let item = &mut doc[scope.table()];
            table(item).ok_or_else(|| bad(scope.table()))?;
            item
        }
        (_, None) => {
            let outer = &mut doc[scope.table()];
            table(outer).ok_or_else(|| bad(scope.table()))?;
            let item = &mut outer["default"];
            table(item).ok_or_else(|| bad("default"))?;
            item
        }
        (_, Some(id)) => {
            let outer = &mut doc[scope.table()];
            table(outer).ok_or_else(|| bad(scope.table()))?;
            let overrides = &mut outer["overrides"];
            table(overrides).ok_or_else(|| bad("overrides"))?;
            let item = &mut overrides[id];
            table(item).ok_or_else(|| bad(id))?;
            item
        }
    };
    target[window.as_str()] = toml_edit::value(usd);
    let new_text = doc.to_string();
    BudgetConfig::parse(&new_text).map_err(|message| Error::Config {
        path: path.to_path_buf(),
        message,
    })?;
    write_atomically(path, new_text.as_bytes())
}

const NEW_FILE_HEADER: &str = "\
# hermes-otel budgets: limits in USD per daily, weekly or monthly window.
# Edited by `hermes-otel budget set`; comments are kept. Reloaded by running
# Hermes processes within a second of a change. See the README, \"Budgets\".
#
# mode = \"enforce\"          # or \"observe\": notices only, nothing blocked
# timezone = \"local\"        # IANA name, e.g. \"Europe/Paris\"
# soft_threshold = 0.8
# hard_threshold = 1.0
# soften_estimated = false  # a hard breach resting on estimated costs is soft
";

/// Writes `bytes` to a temporary file beside `path` and renames it over.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::store::create_private_dir(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("budgets.toml"),
        std::process::id()
    ));
    let mut f = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    f.write_all(bytes).map_err(|e| Error::io(&tmp, e))?;
    f.sync_all().map_err(|e| Error::io(&tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn set_arguments_parse_with_and_without_an_id() {
        assert_eq!(
            parse_set(&args("cron 3f9a1c2b7d10 daily 2.50")),
            Ok((Scope::CronJob, Some("3f9a1c2b7d10".into()), Window::Daily, 2.5))
        );
        assert_eq!(
            parse_set(&args("global monthly 100")),
            Ok((Scope::Global, None, Window::Monthly, 100.0))
        );
        assert_eq!(
            parse_set(&args("model weekly 5")),
            Ok((Scope::Model, None, Window::Weekly, 5.0))
        );
        assert!(parse_set(&args("global x daily 1")).is_err());
        assert!(parse_set(&args("team daily 1")).is_err());
        assert!(parse_set(&args("cron x hourly 1")).is_err());
        assert!(parse_set(&args("cron x daily -1")).is_err());
    }

    #[test]
    fn set_keeps_comments_and_writes_a_file_that_parses() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("budgets.toml");
        std::fs::write(&path, "# my budgets\ntimezone = \"Europe/Paris\" # here\n").expect("write");
        set(&path, Scope::Global, None, Window::Daily, 10.0).expect("global");
        set(&path, Scope::CronJob, Some("3f9a1c2b7d10"), Window::Daily, 2.5).expect("override");
        set(&path, Scope::CronJob, None, Window::Monthly, 20.0).expect("default");
        set(&path, Scope::Global, None, Window::Daily, 12.0).expect("again");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.starts_with("# my budgets\ntimezone = \"Europe/Paris\" # here\n"),
            "{text}"
        );
        let cfg = BudgetConfig::parse(&text).expect("parses");
        assert_eq!(cfg.limits(Scope::Global, "").daily, Some(12.0));
        assert_eq!(cfg.limits(Scope::CronJob, "3f9a1c2b7d10").daily, Some(2.5));
        assert_eq!(cfg.limits(Scope::CronJob, "3f9a1c2b7d10").monthly, Some(20.0));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
        // A new file gets the documented header.
        let fresh = dir.path().join("new").join("budgets.toml");
        set(&fresh, Scope::Sender, Some("42"), Window::Weekly, 1.0).expect("new");
        let text = std::fs::read_to_string(&fresh).expect("read");
        assert!(text.contains("# hermes-otel budgets"), "{text}");
        assert!(text.contains("[per_sender.overrides.42]"), "{text}");
    }
}
