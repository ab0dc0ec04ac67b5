//! `hermes-meter budget set | rm | list | forecast`: edit the budget file and
//! show each budget's spend, verdict and forecast (the words of `set` and
//! `rm` are read in `budget_args.rs`).
//!
//! `set` and `rm` edit `budgets.toml` through `budget_file.rs`.

use std::path::Path;
use std::time::Duration;

use clap::Subcommand;
use jiff::Timestamp;

use hermes_meter_model::budget::{
    self, BudgetConfig, BudgetState, BudgetUnit, CapState, CapUnit, Level, Scope, Window,
};
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::{Outbox, Writer};

use super::budget_args::{is_cap, parse_cap_rm, parse_cap_set, parse_rate, parse_rm, parse_set};
use super::budget_file::{rate_words, remove, remove_cap, remove_rate, set, set_cap, set_rate};

/// The `budget` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum BudgetCommand {
    /// Set a limit: `set <scope> [<id>] <window> [usd|tokens] <limit>`.
    /// Scope: global, cron, sender, profile, model; without an id, the
    /// scope's default. Window: daily, weekly, monthly (calendar, in the
    /// file's zone) or a rolling 1h, 2h, 3h, 4h, 5h, 6h, 8h, 12h, 24h, 2d,
    /// 3d, 7d, 14d, 28d, 30d (the last hours or days); the unit is USD
    /// unless `tokens` follows the window (or the window ends in
    /// `_tokens`): 5000000, 250k, 5M. E.g. `set cron 3f9a1c2b7d10 daily
    /// 2.50`, `set global 5h usd 20`, `set global 7d tokens 50M`.
    /// Or a cap on every session or run: `set session|run usd|tokens|tool_calls
    /// <limit>`, e.g. `set run tool_calls 200`.
    Set {
        /// <scope> [<id>] <window> [usd|tokens] <limit>, or session|run <unit> <limit>
        #[arg(required = true, num_args = 3..=5, value_name = "ARGS")]
        args: Vec<String>,
    },
    /// Remove a limit: `rm <scope> [<id>] <window>`, the same words as `set`
    /// without the amount. E.g. `rm cron 3f9a1c2b7d10 daily`, `rm run tool_calls`.
    Rm {
        /// <scope> [<id>] <window> [usd|tokens], or session|run <unit>
        #[arg(required = true, num_args = 2..=4, value_name = "ARGS")]
        args: Vec<String>,
    },
    /// Each budget with its spend, limit and verdict now, and each scope's
    /// default (which ids without an override of their own get).
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

impl BudgetCommand {
    /// Whether the command may create the store directory (`set` writes the
    /// budget file, which may come before Hermes ever ran); the others need
    /// an existing one.
    pub(crate) fn creates_home(&self) -> bool {
        matches!(self, BudgetCommand::Set { .. })
    }
}

/// How a budget reads in messages: `global daily`, `cron 3f9a daily`,
/// `cron (default) daily`, `global daily_tokens`.
pub(super) fn budget_words(scope: Scope, id: Option<&str>, window: Window, unit: BudgetUnit) -> String {
    let key = budget::limit_key(window, unit);
    match (id, scope) {
        (_, Scope::Global) => format!("global {key}"),
        (Some(id), _) => format!("{scope} {id} {key}"),
        (None, _) => format!("{scope} (default) {key}"),
    }
}

/// An amount in a budget's unit for the tables: USD to four places (spend)
/// or as set (`limit`: at least cents, never rounded: a $0.005 limit reads
/// $0.005), tokens in their short form.
fn amount(unit: BudgetUnit, v: f64, limit: bool) -> String {
    match (unit, limit) {
        (BudgetUnit::Usd, false) => format!("${v:.4}"),
        (BudgetUnit::Usd, true) => format!("${}", limit_usd(v)),
        (BudgetUnit::Tokens, _) => budget::format_tokens(v),
    }
}

/// A USD limit with the places it was set with (up to six), at least two.
fn limit_usd(v: f64) -> String {
    let text = format!("{v:.6}");
    let (whole, frac) = text.split_once('.').unwrap_or((&text, ""));
    let frac = frac.trim_end_matches('0');
    format!("{whole}.{frac:0<2}")
}

/// The JSON key of a figure in a budget's unit: `spend_usd`, `spend_tokens`.
fn unit_key(name: &str, unit: BudgetUnit) -> String {
    format!("{name}_{}", unit.as_str())
}

/// Runs a `budget` subcommand against the store directory `dir`.
pub(super) fn run(dir: &Path, cmd: &BudgetCommand) -> Result<i32> {
    let path = dir.join(budget::BUDGETS_FILE_NAME);
    match cmd {
        BudgetCommand::Set { args } if is_cap(args) => {
            let (scope, unit, limit) = parse_cap_set(args).map_err(Error::Other)?;
            let place = edit_here_or_fleet(&path, |p: &Path| set_cap(p, scope, unit, limit))?;
            println!(
                "per-{scope} {} cap set to {} {place}",
                unit.as_str(),
                unit.format(limit)
            );
            Ok(0)
        }
        BudgetCommand::Rm { args } if is_cap(args) => {
            let (scope, unit) = parse_cap_rm(args).map_err(Error::Other)?;
            let place = edit_here_or_fleet(&path, |p: &Path| remove_cap(p, scope, unit))?;
            println!("per-{scope} {} cap removed {place}", unit.as_str());
            Ok(0)
        }
        BudgetCommand::Set { args } if parse_rate(args, true).is_some() => {
            let (scope, id, rate, limit) = parse_rate(args, true)
                .unwrap_or(Err(String::new()))
                .map_err(Error::Other)?;
            let place = edit_here_or_fleet(&path, |p: &Path| set_rate(p, scope, id.as_deref(), rate, limit))?;
            let what = rate_words(scope, id.as_deref(), rate);
            println!("{what} limit set to {} {place}", rate.format(limit));
            Ok(0)
        }
        BudgetCommand::Rm { args } if parse_rate(args, false).is_some() => {
            let (scope, id, rate, _) = parse_rate(args, false)
                .unwrap_or(Err(String::new()))
                .map_err(Error::Other)?;
            let place = edit_here_or_fleet(&path, |p: &Path| remove_rate(p, scope, id.as_deref(), rate))?;
            println!("{} limit removed {place}", rate_words(scope, id.as_deref(), rate));
            Ok(0)
        }
        BudgetCommand::Set { args } => {
            let (scope, id, window, unit, limit) = parse_set(args).map_err(Error::Other)?;
            let what = budget_words(scope, id.as_deref(), window, unit);
            let edit = |p: &Path| set(p, scope, id.as_deref(), window, unit, limit);
            let place = edit_here_or_fleet(&path, edit)?;
            println!("{what} limit set to {} {place}", unit.format(limit));
            Ok(0)
        }
        BudgetCommand::Rm { args } => {
            let (scope, id, window, unit) = parse_rm(args).map_err(Error::Other)?;
            let what = budget_words(scope, id.as_deref(), window, unit);
            let place = edit_here_or_fleet(&path, |p: &Path| remove(p, scope, id.as_deref(), window, unit))?;
            println!("{what} limit removed {place}");
            Ok(0)
        }
        BudgetCommand::List { json } => {
            // First the fleet's: its budget file and every host's spend.
            let fleet = sync_fleet(dir)?;
            let cfg = load(&path)?;
            let states = states(dir, &cfg)?;
            let defaults = scope_defaults(&cfg);
            let zone = zone_name(&cfg);
            let open = open_caps(dir, &cfg)?;
            let rates = super::budget_rates::states(dir, &cfg)?;
            if *json {
                let rows: Vec<_> = states.iter().map(|s| state_json(s, Some(&cfg), None)).collect();
                let defaults: Vec<_> = defaults
                    .iter()
                    .map(|(scope, window, unit, limit)| {
                        let mut v = serde_json::json!({"scope": scope.as_str(), "window": window.as_str(), "unit": unit.as_str()});
                        v[unit_key("limit", *unit)] = (*limit).into();
                        v
                    })
                    .collect();
                print_json(&serde_json::json!({
                    "fleet": fleet.as_ref().map(FleetReach::json),
                    "mode": cfg.mode.as_str(),
                    "timezone": cfg.tz_name,
                    "zone": zone,
                    "soft_threshold": cfg.soft_threshold,
                    "hard_threshold": cfg.hard_threshold,
                    "alert_thresholds": cfg.alert_thresholds,
                    "budgets": rows,
                    "scope_defaults": defaults,
                    "tokens_counted": cfg.tokens_counted.as_str(),
                    "caps": caps_json(&cfg),
                    "open_caps": open.iter().map(cap_state_json).collect::<Vec<_>>(),
                    "runaway": runaway_json(&cfg.runaway),
                    "rate_limits": super::budget_rates::json(&cfg, &rates),
                    "downgrade": cfg.downgrade.as_ref().map(|d| serde_json::json!({
                        "at": d.at,
                        "to": d.to,
                        "models": d.models,
                    })),
                }))?;
            } else {
                if let Some(note) = fleet.as_ref().and_then(FleetReach::note) {
                    println!("{note}");
                }
                if states.is_empty() && defaults.is_empty() && cfg.caps.is_empty() && rates.is_empty() {
                    println!("no budgets set; add one with: hermes-meter budget set global daily 10");
                } else {
                    if !(states.is_empty() && defaults.is_empty()) {
                        print!("{}", render_list(&cfg, &states, &defaults));
                    }
                    print!("{}", render_caps(&cfg, &open));
                    print!("{}", super::budget_rates::render(&cfg, &rates));
                    println!("runaway watch: {}", cfg.runaway.describe());
                    if let Some(d) = &cfg.downgrade {
                        println!("downgrade {}", d.describe());
                    }
                }
                let alerts = recent_alerts(dir)?;
                if alerts > 0 {
                    println!(
                        "alerts: {alerts} in the last 24 h (`hermes-meter status` lists them and where each went)"
                    );
                }
            }
            Ok(0)
        }
        BudgetCommand::Forecast { json } => {
            let cfg = load(&path)?;
            let states = states(dir, &cfg)?;
            let now = hermes_meter_store::unix_now();
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
            // When the hard line is reached at this rate, within the window.
            let runs_out = |s: &BudgetState, f: &budget::Forecast| {
                f.reaches(s.spend.total(), s.budget.limit * cfg.hard_threshold, now, s.window_end)
            };
            if *json {
                let out: Vec<_> = rows
                    .iter()
                    .map(|(s, f)| {
                        let mut v = state_json(s, Some(&cfg), Some(f));
                        v["runs_out_at"] = runs_out(s, f).into();
                        v
                    })
                    .collect();
                print_json(&serde_json::json!({"budgets": out}))?;
            } else if rows.is_empty() {
                println!("no budgets set");
            } else {
                let w = id_width(rows.iter().map(|(s, _)| s.budget.id.as_str()));
                println!("windows in {}", zone_name(&cfg));
                println!(
                    "{:<8} {:<w$} {:<14} {:>10} {:>10} {:>12} {:>10}  at window end",
                    "scope", "id", "window", "spend", "limit", "per hour", "projected"
                );
                for (s, f) in &rows {
                    let over = if let Some(at) = runs_out(s, f).filter(|_| s.level != Level::Hard) {
                        format!("runs out {}", local(at as i64, &cfg))
                    } else if f.projected >= s.budget.limit * cfg.hard_threshold {
                        "over the limit".to_string()
                    } else if f.projected >= s.budget.limit * cfg.soft_threshold {
                        "past the soft threshold".to_string()
                    } else {
                        "within".to_string()
                    };
                    let unit = s.budget.unit;
                    println!(
                        "{:<8} {:<w$} {:<14} {:>10} {:>10} {:>12} {:>10}  {over} ({})",
                        s.budget.scope.as_str(),
                        if s.budget.id.is_empty() { "-" } else { &s.budget.id },
                        s.budget.key(),
                        amount(unit, s.spend.total(), false),
                        amount(unit, s.budget.limit, true),
                        amount(unit, f.per_hour, false),
                        amount(unit, f.projected, true),
                        local(s.window_end, &cfg)
                    );
                }
            }
            Ok(0)
        }
    }
}

/// Applies `edit` to the budget file: the fleet's with a fleet (in force on
/// every host within seconds), else the local one. Says where, for the
/// message (the fleet's address without its password).
fn edit_here_or_fleet(path: &Path, edit: impl FnOnce(&Path) -> Result<()>) -> Result<String> {
    match hermes_meter_runtime::fleet::FleetConfig::from_env()? {
        Some(fleet) => {
            let version = hermes_meter_runtime::fleet::budgets::edit(&fleet, path, edit)?;
            Ok(format!(
                "for the fleet at {} (budget file version {version}; every host within seconds)",
                fleet.redacted()
            ))
        }
        None => {
            edit(path)?;
            Ok(format!("in {}", path.display()))
        }
    }
}

/// How long `budget list` waits for its fleet sync: longer than the
/// connection timeout of a dead address (5 s), since a user is waiting
/// at a prompt and a failure is reported, not fatal.
const LIST_SYNC_TIMEOUT: Duration = Duration::from_secs(8);

/// How `budget list`'s sync with the fleet went.
struct FleetReach {
    /// The fleet's address without its password.
    url: String,
    /// Why it could not be reached; `None` when it synced now.
    error: Option<String>,
    /// The last successful sync, when it failed now.
    synced_at: Option<f64>,
}

impl FleetReach {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "url": self.url,
            "reached": self.error.is_none(),
            "error": self.error,
            "synced_at": self.synced_at,
        })
    }

    /// What the list says first when the fleet could not be reached.
    fn note(&self) -> Option<String> {
        let error = self.error.as_deref()?;
        Some(match self.synced_at {
            Some(at) => format!(
                "the fleet database {} could not be reached ({error}): spend as of this host's last sync, {:.0} s ago",
                self.url,
                (hermes_meter_store::unix_now() - at).max(0.0)
            ),
            None => format!(
                "the fleet database {} could not be reached ({error}) and this host never synced with it: \
                 the fleet's budgets are unknown here; only this store's own are shown",
                self.url
            ),
        })
    }
}

/// With a fleet (`HERMES_METER_FLEET_URL`): one sync of this store now, so
/// the list shows the fleet's budget file and spend even on a host whose
/// Hermes never synced (pushes are absolute totals, so a step beside the
/// fleet thread's changes nothing). `None` without a fleet.
fn sync_fleet(dir: &Path) -> Result<Option<FleetReach>> {
    let Some(fleet) = hermes_meter_runtime::fleet::FleetConfig::from_env()? else {
        return Ok(None);
    };
    let url = fleet.redacted();
    let store = Outbox::open_dir(dir)?;
    let mut sync = hermes_meter_runtime::fleet::sync::FleetSync::new(fleet, dir);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Other(format!("fleet sync runtime: {e}")))?;
    let now = hermes_meter_store::unix_now();
    // The timer needs the runtime: made inside it.
    let stepped = runtime.block_on(async { tokio::time::timeout(LIST_SYNC_TIMEOUT, sync.step(&store, now)).await });
    let error = match stepped {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("no answer within {} s", LIST_SYNC_TIMEOUT.as_secs())),
    };
    let synced_at = match error {
        Some(_) => store.fleet_status()?.and_then(|s| s.synced_at),
        None => None,
    };
    Ok(Some(FleetReach { url, error, synced_at }))
}

pub(super) fn runaway_json(r: &budget::RunawayConfig) -> serde_json::Value {
    serde_json::json!({
        "action": r.action.as_str(),
        "repeated_tool_calls": r.repeated_tool_calls,
        "api_calls_per_tool_call": r.api_calls_per_tool_call,
        "min_api_calls": r.min_api_calls,
        "retries_per_request": r.retries_per_request,
        "tokens_per_minute": r.tokens_per_minute,
    })
}

/// Most running sessions whose caps `budget list` shows.
const LISTED_CAP_SESSIONS: usize = 20;

/// The caps of the running root sessions and their open runs, now.
fn open_caps(dir: &Path, cfg: &BudgetConfig) -> Result<Vec<CapState>> {
    if cfg.caps.is_empty() {
        return Ok(Vec::new());
    }
    Writer::open_dir(dir)?
        .into_reader()
        .open_cap_states(cfg, hermes_meter_store::unix_now(), LISTED_CAP_SESSIONS)
}

fn caps_json(cfg: &BudgetConfig) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for (scope, limits) in &cfg.caps {
        for unit in CapUnit::ALL {
            if let Some(limit) = limits.get(unit) {
                out.push(serde_json::json!({"scope": scope.as_str(), "unit": unit.as_str(), "limit": limit}));
            }
        }
    }
    out
}

fn cap_state_json(c: &CapState) -> serde_json::Value {
    serde_json::json!({
        "scope": c.cap.scope.as_str(),
        "id": c.id,
        "unit": c.cap.unit.as_str(),
        "used": c.used,
        "limit": c.cap.limit,
        "verdict": c.level.as_str(),
    })
}

/// The caps part of `budget list`: each cap, then each running session's
/// and open run's use of them.
fn render_caps(cfg: &BudgetConfig, open: &[CapState]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if cfg.caps.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "caps on every session and run (tokens counted: {}; a tool-call cap blocks tools only)",
        cfg.tokens_counted.as_str()
    );
    for c in caps_json(cfg) {
        let unit = CapUnit::parse(c["unit"].as_str().unwrap_or("")).unwrap_or(CapUnit::Usd);
        let _ = writeln!(
            out,
            "  per-{:<8} {:<11} {}",
            c["scope"].as_str().unwrap_or(""),
            unit.as_str(),
            unit.format(c["limit"].as_f64().unwrap_or(0.0))
        );
    }
    if open.is_empty() {
        let _ = writeln!(out, "no session is running");
        return out;
    }
    let w = id_width(open.iter().map(|c| c.id.as_str()));
    let _ = writeln!(
        out,
        "{:<8} {:<w$} {:<11} {:>20} {:>20} {:>5}  verdict",
        "scope", "id", "cap", "used", "limit", "%"
    );
    for c in open {
        let u = c.cap.unit;
        let _ = writeln!(
            out,
            "{:<8} {:<w$} {:<11} {:>20} {:>20} {:>5}  {}",
            c.cap.scope.as_str(),
            c.id,
            u.as_str(),
            u.format(c.used),
            u.format(c.cap.limit),
            pct(c.used, c.cap.limit),
            c.level.as_str()
        );
    }
    out
}

/// The budget file, counting the fleet's spend when there is a fleet.
fn load(path: &Path) -> Result<BudgetConfig> {
    let mut cfg = hermes_meter_runtime::config::load_budgets(path)?;
    cfg.fleet = hermes_meter_runtime::config::fleet::configured();
    Ok(cfg)
}

/// How many alerts fired in the last day (at most 100 are counted).
fn recent_alerts(dir: &Path) -> Result<usize> {
    let path = dir.join(hermes_meter_store::DB_FILE_NAME);
    if !path.exists() {
        return Ok(0);
    }
    let store = hermes_meter_store::Reader::open(&path)?;
    Ok(store
        .recent_alerts(hermes_meter_store::unix_now() - 86_400.0, 100)?
        .len())
}

fn states(dir: &Path, cfg: &BudgetConfig) -> Result<Vec<BudgetState>> {
    if cfg.is_empty() {
        return Ok(Vec::new());
    }
    let store = Writer::open_dir(dir)?.into_reader();
    store.budget_states(cfg, hermes_meter_store::unix_now())
}

/// The zone windows are computed in, named: the file's IANA name, or the
/// system zone's name for `local` (`local (Europe/Paris)`).
fn zone_name(cfg: &BudgetConfig) -> String {
    if cfg.tz_name == "local" {
        match cfg.tz.iana_name() {
            Some(name) => format!("local ({name})"),
            None => "local (the system zone, unnamed)".to_string(),
        }
    } else {
        cfg.tz_name.clone()
    }
}

/// Each non-global scope's default limits: `(scope, window, unit, limit)`.
fn scope_defaults(cfg: &BudgetConfig) -> Vec<(Scope, Window, BudgetUnit, f64)> {
    let mut out = Vec::new();
    for (scope, limits) in &cfg.scopes {
        if *scope == Scope::Global {
            continue;
        }
        for (w, unit, limit) in limits.default.iter() {
            out.push((*scope, w, unit, limit));
        }
    }
    out
}

/// Which entry of the file sets a budget's limit: `global`, `override`
/// (the id's own) or `default` (the scope's, for an id without its own).
fn applies(cfg: &BudgetConfig, b: &budget::Budget) -> &'static str {
    if b.scope == Scope::Global {
        return "global";
    }
    let own = cfg
        .scopes
        .get(&b.scope)
        .and_then(|s| s.overrides.get(&b.id))
        .and_then(|l| l.get(b.window, b.unit));
    if own.is_some() {
        "override"
    } else {
        "default"
    }
}

/// The id column's width: the longest id, at least as wide as its header
/// and the `(default)` placeholder, so long ids keep the columns aligned.
fn id_width<'a>(ids: impl Iterator<Item = &'a str>) -> usize {
    ids.map(|id| id.chars().count())
        .max()
        .unwrap_or(0)
        .max("(default)".len())
}

/// Where a budget speaks up: `alerts at 50%, 75%; notice at 80%; hard at 100%`.
fn thresholds_line(cfg: &BudgetConfig) -> String {
    let pct = |f: f64| format!("{}%", (f * 1000.0).round() / 10.0);
    let mut parts = Vec::new();
    if !cfg.alert_thresholds.is_empty() {
        let list: Vec<String> = cfg.alert_thresholds.iter().map(|t| pct(*t)).collect();
        parts.push(format!("alerts at {}", list.join(", ")));
    }
    parts.push(format!("notice at {}", pct(cfg.soft_threshold)));
    parts.push(format!("hard at {}", pct(cfg.hard_threshold)));
    parts.join("; ")
}

/// The `budget list` table: one row per budget with spend, then one per
/// scope default (spend is per id, so a default row has none).
fn render_list(cfg: &BudgetConfig, states: &[BudgetState], defaults: &[(Scope, Window, BudgetUnit, f64)]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let w = id_width(states.iter().map(|s| s.budget.id.as_str()));
    let _ = writeln!(out, "mode {}, windows in {}", cfg.mode.as_str(), zone_name(cfg));
    let _ = writeln!(out, "{}", thresholds_line(cfg));
    if cfg.fleet {
        let _ = writeln!(
            out,
            "fleet budgets: spend (USD or tokens) is every host's; \"this host\" is this store's part"
        );
    }
    let host_col = |text: String| {
        if cfg.fleet {
            format!(" {text:>10}")
        } else {
            String::new()
        }
    };
    let _ = writeln!(
        out,
        "{:<8} {:<w$} {:<14} {:<8} {:>10}{} {:>10} {:>5}  {:<8} {:>10}  left, and when it comes back",
        "scope",
        "id",
        "window",
        "limit of",
        "spend",
        host_col("this host".into()),
        "limit",
        "%",
        "verdict",
        "estimated"
    );
    for s in states {
        let verdict = if s.softened {
            "soft*"
        } else if s.level != Level::Hard && s.blocks() {
            "lease"
        } else {
            s.level.as_str()
        };
        let unit = s.budget.unit;
        let own = s.fleet.map_or("-".to_string(), |f| amount(unit, f.own, false));
        let _ = writeln!(
            out,
            "{:<8} {:<w$} {:<14} {:<8} {:>10}{} {:>10} {:>5}  {:<8} {:>10}  {}",
            s.budget.scope.as_str(),
            if s.budget.id.is_empty() { "-" } else { &s.budget.id },
            s.budget.key(),
            applies(cfg, &s.budget),
            amount(unit, s.spend.total(), false),
            host_col(own),
            amount(unit, s.budget.limit, true),
            pct(s.spend.total(), s.budget.limit),
            verdict,
            amount(unit, s.spend.estimated, false),
            budget::left_text(s, s.budget.limit * cfg.hard_threshold, &cfg.tz)
        );
    }
    for (scope, window, unit, limit) in defaults {
        let _ = writeln!(
            out,
            "{:<8} {:<w$} {:<14} {:<8} {:>10}{} {:>10} {:>5}  {:<8} {:>10}  each id without an override",
            scope.as_str(),
            "(default)",
            budget::limit_key(*window, *unit),
            "default",
            "-",
            host_col("-".into()),
            amount(*unit, *limit, true),
            "-",
            "-",
            "-",
        );
    }
    if cfg.counts_tokens() {
        let _ = writeln!(out, "tokens counted: {}", tokens_counted_words(cfg));
    }
    if states.iter().any(|s| s.level != Level::Hard && s.blocks()) {
        let _ = writeln!(
            out,
            "lease: this host used its share of the fleet's headroom; its calls wait for the next fleet sync"
        );
    }
    if states.iter().any(|s| s.softened) {
        let _ = writeln!(
            out,
            "* hard breach softened: it rests on estimated costs (soften_estimated = true)"
        );
    }
    out
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

fn state_json(s: &BudgetState, cfg: Option<&BudgetConfig>, f: Option<&budget::Forecast>) -> serde_json::Value {
    let unit = s.budget.unit;
    let mut v = serde_json::json!({
        "scope": s.budget.scope.as_str(),
        "id": s.budget.id,
        "window": s.budget.window.as_str(),
        "unit": unit.as_str(),
        "key": s.budget.key(),
        "period": s.period,
        "verdict": s.level.as_str(),
        "softened": s.softened,
        "window_end": s.window_end,
        "rolling": s.budget.window.rolling().is_some(),
    });
    if let Some(f) = s.frees {
        v["frees"] = serde_json::json!({unit_key("amount", unit): f.amount, "at": f.at});
    }
    for (name, value) in [
        ("limit", s.budget.limit),
        ("spend", s.spend.total()),
        ("settled", s.spend.settled),
        ("estimated", s.spend.estimated),
        ("reserved", s.spend.reserved),
    ] {
        v[unit_key(name, unit)] = value.into();
    }
    if let Some(cfg) = cfg {
        v["limit_of"] = applies(cfg, &s.budget).into();
        let left = (s.budget.limit * cfg.hard_threshold - s.spend.total()).max(0.0);
        v[unit_key("left", unit)] = left.into();
        v["left_text"] = budget::left_text(s, s.budget.limit * cfg.hard_threshold, &cfg.tz).into();
    }
    if let Some(f) = s.fleet {
        v[unit_key("this_host", s.budget.unit)] = f.own.into();
        v[unit_key("lease_left", s.budget.unit)] = f.lease_left.into();
        v["blocked"] = s.blocks().into();
    }
    if let Some(f) = f {
        v[format!("{}_per_hour", unit.as_str())] = f.per_hour.into();
        v[unit_key("projected", unit)] = f.projected.into();
        v["projected_verdict"] = if f.projected >= s.budget.limit {
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

/// What a token budget counts, in words.
fn tokens_counted_words(cfg: &BudgetConfig) -> &'static str {
    match cfg.tokens_counted {
        budget::TokenCount::Total => "total (input with cache reads and writes, plus output)",
        budget::TokenCount::Input => "input (cache reads and writes included)",
        budget::TokenCount::Output => "output (reasoning included)",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::budget_file::NEW_FILE_HEADER;

    #[test]
    fn a_usd_limit_reads_as_it_was_set() {
        assert_eq!(limit_usd(0.005), "0.005");
        assert_eq!(limit_usd(10.0), "10.00");
        assert_eq!(limit_usd(0.5), "0.50");
        assert_eq!(limit_usd(1.2345), "1.2345");
    }

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn a_new_file_starts_with_its_header_and_later_limits_keep_it_first() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(hermes_meter_model::budget::BUDGETS_FILE_NAME);
        set(&path, Scope::CronJob, None, Window::Daily, BudgetUnit::Usd, 1.0).expect("set");
        set(&path, Scope::Global, None, Window::Monthly, BudgetUnit::Usd, 150.0).expect("set");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.starts_with(NEW_FILE_HEADER), "{text}");
        assert_eq!(text.matches("# hermes-meter budgets").count(), 1, "{text}");
        let config = BudgetConfig::parse(&text).expect("parses");
        assert_eq!(
            config.limits(Scope::Global, "").get(Window::Monthly, BudgetUnit::Usd),
            Some(150.0)
        );
    }

    #[test]
    fn rm_removes_one_limit_and_keeps_comments() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("budgets.toml");
        std::fs::write(
            &path,
            "# my budgets\n[global]\ndaily = 10.0 # the main one\nweekly = 50.0\n",
        )
        .expect("write");
        set(
            &path,
            Scope::CronJob,
            Some("3f9a1c2b7d10"),
            Window::Daily,
            BudgetUnit::Usd,
            2.5,
        )
        .expect("override");
        set(&path, Scope::CronJob, None, Window::Monthly, BudgetUnit::Usd, 20.0).expect("default");
        remove(&path, Scope::Global, None, Window::Weekly, BudgetUnit::Usd).expect("rm global weekly");
        remove(
            &path,
            Scope::CronJob,
            Some("3f9a1c2b7d10"),
            Window::Daily,
            BudgetUnit::Usd,
        )
        .expect("rm override");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.starts_with("# my budgets\n"), "{text}");
        assert!(text.contains("daily = 10.0 # the main one"), "{text}");
        assert!(!text.contains("weekly"), "{text}");
        assert!(
            !text.contains("3f9a1c2b7d10"),
            "the emptied override table goes too: {text}"
        );
        let cfg = BudgetConfig::parse(&text).expect("parses");
        assert_eq!(
            cfg.limits(Scope::Global, "").get(Window::Daily, BudgetUnit::Usd),
            Some(10.0)
        );
        assert_eq!(
            cfg.limits(Scope::CronJob, "3f9a1c2b7d10")
                .get(Window::Daily, BudgetUnit::Usd),
            None
        );
        assert_eq!(
            cfg.limits(Scope::CronJob, "3f9a1c2b7d10")
                .get(Window::Monthly, BudgetUnit::Usd),
            Some(20.0)
        );
        let e = remove(&path, Scope::Global, None, Window::Weekly, BudgetUnit::Usd).expect_err("gone already");
        assert!(e.to_string().contains("no global weekly limit"), "{e}");
        assert!(parse_rm(&args("global x daily")).is_err());
        assert_eq!(
            parse_rm(&args("cron abc weekly")),
            Ok((Scope::CronJob, Some("abc".into()), Window::Weekly, BudgetUnit::Usd))
        );
    }

    #[test]
    fn set_keeps_comments_and_writes_a_file_that_parses() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("budgets.toml");
        std::fs::write(&path, "# my budgets\ntimezone = \"Europe/Paris\" # here\n").expect("write");
        set(&path, Scope::Global, None, Window::Daily, BudgetUnit::Usd, 10.0).expect("global");
        set(
            &path,
            Scope::CronJob,
            Some("3f9a1c2b7d10"),
            Window::Daily,
            BudgetUnit::Usd,
            2.5,
        )
        .expect("override");
        set(&path, Scope::CronJob, None, Window::Monthly, BudgetUnit::Usd, 20.0).expect("default");
        set(&path, Scope::Global, None, Window::Daily, BudgetUnit::Usd, 12.0).expect("again");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(
            text.starts_with("# my budgets\ntimezone = \"Europe/Paris\" # here\n"),
            "{text}"
        );
        let cfg = BudgetConfig::parse(&text).expect("parses");
        assert_eq!(
            cfg.limits(Scope::Global, "").get(Window::Daily, BudgetUnit::Usd),
            Some(12.0)
        );
        assert_eq!(
            cfg.limits(Scope::CronJob, "3f9a1c2b7d10")
                .get(Window::Daily, BudgetUnit::Usd),
            Some(2.5)
        );
        assert_eq!(
            cfg.limits(Scope::CronJob, "3f9a1c2b7d10")
                .get(Window::Monthly, BudgetUnit::Usd),
            Some(20.0)
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
        // A new file gets the documented header.
        let fresh = dir.path().join("new").join("budgets.toml");
        set(&fresh, Scope::Sender, Some("42"), Window::Weekly, BudgetUnit::Usd, 1.0).expect("new");
        let text = std::fs::read_to_string(&fresh).expect("read");
        assert!(text.contains("# hermes-meter budgets"), "{text}");
        assert!(text.contains("[per_sender.overrides.42]"), "{text}");
    }
}
