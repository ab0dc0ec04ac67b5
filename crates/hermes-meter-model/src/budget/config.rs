//! The budget file and what it means: modes, scopes, limits, thresholds,
//! and which budgets apply to a session. Pure.
//!
//! Owns: the format of `budgets.toml` ([`BudgetConfig::parse`]), its
//! defaults, and [`BudgetConfig::budgets_for`]. Must not touch: the store,
//! windows or verdicts (`window.rs`, `verdict.rs`), any file (the runtime
//! reads `budgets.toml` and hands its text to [`BudgetConfig::parse`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use jiff::tz::TimeZone;
use serde::Deserialize;

use super::caps::{CapLimits, CapScope, CapUnit, TokenCount};
pub use super::limits::{limit_key, parse_limit_key, Limits};
use super::rate::{Rate, RateAction, DEFAULT_MAX_WAIT_SECONDS};
use super::runaway::{RunawayConfig, RunawayFile};
use super::window::Window;

/// Whether budgets may block calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetMode {
    /// Budgets are computed and reported, never enforced.
    Observe,
    /// An exhausted budget blocks the next tool call (the default).
    Enforce,
}

impl BudgetMode {
    /// Parses `observe` or `enforce` (any case).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "observe" => Some(BudgetMode::Observe),
            "enforce" => Some(BudgetMode::Enforce),
            _ => None,
        }
    }

    /// The spelling users type.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetMode::Observe => "observe",
            BudgetMode::Enforce => "enforce",
        }
    }
}

/// The budget file's name inside the store directory.
pub const BUDGETS_FILE_NAME: &str = "budgets.toml";

/// Default soft threshold, as a fraction of the limit.
pub(crate) const DEFAULT_SOFT_THRESHOLD: f64 = 0.8;
/// Default hard threshold, as a fraction of the limit.
pub(crate) const DEFAULT_HARD_THRESHOLD: f64 = 1.0;

/// The profile id of runs whose profile is unknown (replayed files), the
/// name Hermes gives its root profile.
pub(crate) const DEFAULT_PROFILE: &str = "default";

/// What a budget is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    Global,
    CronJob,
    Sender,
    Profile,
    Model,
}

impl Scope {
    /// Every scope, in the order budgets are checked and listed.
    pub const ALL: [Scope; 5] = [
        Scope::Global,
        Scope::CronJob,
        Scope::Sender,
        Scope::Profile,
        Scope::Model,
    ];

    /// The short name the CLI takes and the store and metrics use.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::CronJob => "cron",
            Scope::Sender => "sender",
            Scope::Profile => "profile",
            Scope::Model => "model",
        }
    }

    /// The table of the budget file.
    pub fn table(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::CronJob => "per_cron_job",
            Scope::Sender => "per_sender",
            Scope::Profile => "per_profile",
            Scope::Model => "per_model",
        }
    }

    /// Parses a short name or a table name.
    pub fn parse(text: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == text || s.table() == text)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BudgetUnit {
    /// The calls' cost.
    Usd,
    /// The calls' tokens, as `tokens_counted` says (for subscription plans
    /// and models priced at $0).
    Tokens,
}

impl BudgetUnit {
    /// Both units, USD first (the order budgets are listed in).
    pub const ALL: [BudgetUnit; 2] = [BudgetUnit::Usd, BudgetUnit::Tokens];

    /// `usd` or `tokens`: the `hermes.budget.unit` of its gauges.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetUnit::Usd => "usd",
            BudgetUnit::Tokens => "tokens",
        }
    }

    /// An amount in this unit as users read it: `$2.50`, `1.2M tokens`.
    pub fn format(self, v: f64) -> String {
        match self {
            BudgetUnit::Usd if v.abs() < 0.01 && v != 0.0 => format!("${v:.4}"),
            BudgetUnit::Usd => format!("${v:.2}"),
            BudgetUnit::Tokens => format!("{} tokens", format_tokens(v)),
        }
    }
}

/// A token count in the short form people write budgets in: `950`,
/// `12.5k`, `1.2M`, `3B`.
pub fn format_tokens(v: f64) -> String {
    let trim = |x: f64| {
        let t = format!("{x:.1}");
        t.strip_suffix(".0").map(str::to_string).unwrap_or(t)
    };
    match v.abs() {
        a if a >= 1e9 => format!("{}B", trim(v / 1e9)),
        a if a >= 1e6 => format!("{}M", trim(v / 1e6)),
        a if a >= 1e4 => format!("{}k", trim(v / 1e3)),
        _ => format!("{v:.0}"),
    }
}

/// Parses a token count as written on the command line: `5000000`, `5M`,
/// `250k`, `1.5B` (any case), `5_000_000`.
pub fn parse_tokens(text: &str) -> Option<f64> {
    let t = text.trim().replace('_', "");
    let (num, scale) = match t.chars().last()?.to_ascii_lowercase() {
        'k' => (&t[..t.len() - 1], 1e3),
        'm' => (&t[..t.len() - 1], 1e6),
        'b' | 'g' => (&t[..t.len() - 1], 1e9),
        _ => (&t[..], 1.0),
    };
    let v = num.parse::<f64>().ok()? * scale;
    (v.is_finite()).then(|| v.round())
}

/// One scope's limits: the default for every id and overrides by id.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeLimits {
    #[serde(default)]
    pub default: Limits,
    #[serde(default)]
    pub overrides: BTreeMap<String, Limits>,
}

/// The budget file as written (`budgets.toml`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    mode: Option<String>,
    timezone: Option<String>,
    soft_threshold: Option<f64>,
    hard_threshold: Option<f64>,
    soften_estimated: Option<bool>,
    alert_thresholds: Option<Vec<f64>>,
    tokens_counted: Option<String>,
    global: Option<Limits>,
    per_cron_job: Option<ScopeLimits>,
    per_sender: Option<ScopeLimits>,
    per_profile: Option<ScopeLimits>,
    per_model: Option<ScopeLimits>,
    per_session: Option<CapLimits>,
    per_run: Option<CapLimits>,
    runaway: Option<RunawayFile>,
    downgrade: Option<DowngradeFile>,
    rate_limit: Option<RateLimitFile>,
}

/// `[rate_limit]` as written: what a reached rate limit does.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitFile {
    action: Option<String>,
    max_wait_seconds: Option<f64>,
}

/// `[downgrade]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DowngradeFile {
    at: Option<f64>,
    to: Option<String>,
    models: Option<BTreeMap<String, String>>,
}

/// Downgrade instead of stop (`[downgrade]`, opt-in): once a session's
/// budget or cap in USD or tokens reaches `at` of its limit, its next LLM
/// calls go to a cheaper model (through Hermes's `llm_request` middleware)
/// until the budget's window or the cap's scope ends. The hard line still
/// stops calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Downgrade {
    /// Fraction of the limit (default: `soft_threshold`).
    pub at: f64,
    /// The model calls go to when `models` names none for theirs.
    pub to: Option<String>,
    /// The cheaper model of each of the agent's models (`[downgrade.models]`),
    /// keys as the agent names them: Hermes sends a routed call to the same
    /// provider, so each model is mapped to one that provider serves.
    pub models: BTreeMap<String, String>,
}

impl Downgrade {
    /// The model a call of the agent's `model` goes to past the line: its
    /// line in `models` (the name as it is, else without a `provider/`
    /// prefix, case aside), else `to`; `None` when that is the model itself
    /// or nothing names one (the call goes as asked).
    pub fn target(&self, model: Option<&str>) -> Option<&str> {
        let mapped = model.and_then(|m| {
            let bare = |s: &str| s.rsplit('/').next().unwrap_or(s).to_ascii_lowercase();
            self.models.get(m).or_else(|| {
                let want = bare(m);
                self.models.iter().find(|(k, _)| bare(k) == want).map(|(_, v)| v)
            })
        });
        let to = mapped.or(self.to.as_ref())?;
        (Some(to.as_str()) != model).then_some(to.as_str())
    }

    /// One line for `budget list`: `at 80%: claude-opus-4 -> claude-haiku-4,
    /// any other -> gpt-4o-mini`.
    pub fn describe(&self) -> String {
        let mut routes: Vec<String> = self.models.iter().map(|(from, to)| format!("{from} -> {to}")).collect();
        match &self.to {
            Some(to) if routes.is_empty() => routes.push(format!("every model -> {to}")),
            Some(to) => routes.push(format!("any other -> {to}")),
            None => routes.push("any other model as asked".to_string()),
        }
        format!("at {}%: {}", (self.at * 1000.0).round() / 10.0, routes.join(", "))
    }
}

/// The budget configuration, resolved.
#[derive(Debug, Clone)]
pub struct BudgetConfig {
    /// `enforce` (the default) or `observe`, from the file.
    pub mode: BudgetMode,
    /// Whether the file set the mode.
    pub mode_set: bool,
    /// The zone windows are computed in.
    pub tz: TimeZone,
    /// Its IANA name, or `local`.
    pub tz_name: String,
    /// Fraction of the limit at which a budget is in soft breach.
    pub soft_threshold: f64,
    /// Fraction of the limit at which a budget is in hard breach.
    pub hard_threshold: f64,
    /// A hard breach that would not be one without estimated costs is soft.
    pub soften_estimated: bool,
    /// Further fractions of the limit at which a budget raises an alert
    /// (once per window each), ascending, below the hard threshold and
    /// other than the soft one (whose notice is that alert).
    pub alert_thresholds: Vec<f64>,
    /// Limits by scope (`Global` uses the default only).
    pub scopes: BTreeMap<Scope, ScopeLimits>,
    /// Per-session and per-run caps (see `caps.rs`).
    pub caps: BTreeMap<CapScope, CapLimits>,
    /// Which tokens a token cap counts.
    pub tokens_counted: TokenCount,
    /// Runaway detection (`[runaway]`; on, alerting, by default).
    pub runaway: RunawayConfig,
    /// Downgrade instead of stop, if `[downgrade]` asks for it.
    pub downgrade: Option<Arc<Downgrade>>,
    /// What a reached rate limit does (`[rate_limit] action`).
    pub rate_action: RateAction,
    /// The longest a call waits for a rate limit (`max_wait_seconds`);
    /// longer, it stops.
    pub rate_max_wait: f64,
    /// Spend is the fleet's (`HERMES_METER_FLEET_URL`): set by whoever loads
    /// the file, never by the file.
    pub fleet: bool,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            mode: BudgetMode::Enforce,
            mode_set: false,
            tz: TimeZone::system(),
            tz_name: "local".into(),
            soft_threshold: DEFAULT_SOFT_THRESHOLD,
            hard_threshold: DEFAULT_HARD_THRESHOLD,
            soften_estimated: false,
            alert_thresholds: Vec::new(),
            scopes: BTreeMap::new(),
            caps: BTreeMap::new(),
            tokens_counted: TokenCount::Total,
            runaway: RunawayConfig::default(),
            downgrade: None,
            rate_action: RateAction::default(),
            rate_max_wait: DEFAULT_MAX_WAIT_SECONDS,
            fleet: false,
        }
    }
}

impl BudgetConfig {
    /// Parses the text of a budget file. Unknown keys, bad limits, an
    /// unknown zone or thresholds out of order are errors.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| e.message().to_string())?;
        let mut cfg = BudgetConfig::default();
        if let Some(m) = &file.mode {
            cfg.mode = BudgetMode::parse(m).ok_or_else(|| format!("mode: {m:?} is neither observe nor enforce"))?;
            cfg.mode_set = true;
        }
        if let Some(name) = file.timezone.as_deref().filter(|n| *n != "local") {
            cfg.tz = TimeZone::get(name).map_err(|e| format!("timezone: {name:?}: {e}"))?;
            cfg.tz_name = name.to_string();
        }
        cfg.soft_threshold = file.soft_threshold.unwrap_or(DEFAULT_SOFT_THRESHOLD);
        cfg.hard_threshold = file.hard_threshold.unwrap_or(DEFAULT_HARD_THRESHOLD);
        if !(cfg.soft_threshold > 0.0 && cfg.soft_threshold <= cfg.hard_threshold && cfg.hard_threshold.is_finite()) {
            return Err(format!(
                "thresholds: need 0 < soft_threshold <= hard_threshold, got {} and {}",
                cfg.soft_threshold, cfg.hard_threshold
            ));
        }
        cfg.soften_estimated = file.soften_estimated.unwrap_or(false);
        let mut alerts = file.alert_thresholds.unwrap_or_default();
        if let Some(t) = alerts
            .iter()
            .find(|t| !(t.is_finite() && **t > 0.0 && **t < cfg.hard_threshold))
        {
            return Err(format!(
                "alert_thresholds: {t} is not between 0 and hard_threshold ({}); \
                 write fractions of the limit, e.g. [0.5, 0.75, 0.9]",
                cfg.hard_threshold
            ));
        }
        alerts.sort_by(f64::total_cmp);
        alerts.dedup();
        alerts.retain(|t| *t != cfg.soft_threshold);
        cfg.alert_thresholds = alerts;
        if let Some(t) = &file.tokens_counted {
            cfg.tokens_counted =
                TokenCount::parse(t).ok_or_else(|| format!("tokens_counted: {t:?} is none of total, input, output"))?;
        }
        cfg.runaway = RunawayConfig::from_file(file.runaway)?;
        if let Some(d) = file.downgrade {
            let to = d.to.map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
            let mut models = BTreeMap::new();
            for (from, into) in d.models.unwrap_or_default() {
                let (from, into) = (from.trim().to_string(), into.trim().to_string());
                if from.is_empty() || into.is_empty() {
                    return Err(format!(
                        "downgrade.models: {from:?} = {into:?}: name both models, e.g. \"claude-opus-4\" = \"claude-haiku-4\""
                    ));
                }
                models.insert(from, into);
            }
            if to.is_none() && models.is_empty() {
                return Err(
                    "downgrade: name the model the calls go to, e.g. to = \"gpt-4o-mini\", or one per model \
                            under [downgrade.models]"
                        .to_string(),
                );
            }
            let at = d.at.unwrap_or(cfg.soft_threshold);
            if !(at.is_finite() && at > 0.0 && at < cfg.hard_threshold) {
                return Err(format!(
                    "downgrade.at: {at} is not between 0 and hard_threshold ({}); write a fraction of the limit, e.g. 0.8",
                    cfg.hard_threshold
                ));
            }
            cfg.downgrade = Some(Arc::new(Downgrade { at, to, models }));
        }
        if let Some(r) = file.rate_limit {
            if let Some(a) = &r.action {
                cfg.rate_action =
                    RateAction::parse(a).ok_or_else(|| format!("rate_limit.action: {a:?} is neither stop nor wait"))?;
            }
            if let Some(w) = r.max_wait_seconds {
                if !(w.is_finite() && (0.0..=3600.0).contains(&w)) {
                    return Err(format!(
                        "rate_limit.max_wait_seconds: {w} is not between 0 and 3600 (a call waits at most an hour)"
                    ));
                }
                cfg.rate_max_wait = w;
            }
        }
        for (scope, caps) in [(CapScope::Session, file.per_session), (CapScope::Run, file.per_run)] {
            if let Some(c) = caps.filter(|c| !c.is_empty()) {
                c.check(scope.table())?;
                cfg.caps.insert(scope, c);
            }
        }
        if let Some(g) = file.global {
            g.check("global")?;
            cfg.scopes.insert(
                Scope::Global,
                ScopeLimits {
                    default: g,
                    overrides: BTreeMap::new(),
                },
            );
        }
        for (scope, limits) in [
            (Scope::CronJob, file.per_cron_job),
            (Scope::Sender, file.per_sender),
            (Scope::Profile, file.per_profile),
            (Scope::Model, file.per_model),
        ] {
            if let Some(l) = limits {
                l.default.check(&format!("{}.default", scope.table()))?;
                for (id, o) in &l.overrides {
                    o.check(&format!("{}.overrides.{id}", scope.table()))?;
                }
                cfg.scopes.insert(scope, l);
            }
        }
        // A tokens-per-minute rate limit governs token floods: the runaway
        // watch's own flood sign would only say the same thing twice.
        let flood_limited = cfg.scopes.values().any(|s| {
            std::iter::once(&s.default)
                .chain(s.overrides.values())
                .any(|l| l.rates.iter().any(|(r, _)| r.key() == "tokens_per_minute"))
        });
        if flood_limited {
            cfg.runaway.tokens_per_minute = u64::MAX;
        }
        Ok(cfg)
    }

    /// Whether no limit is set at all (the gate then reads nothing).
    pub fn is_empty(&self) -> bool {
        self.caps.is_empty()
            && self
                .scopes
                .values()
                .all(|s| s.default.is_empty() && s.overrides.values().all(Limits::is_empty))
    }

    /// Whether a cap or a calendar budget counts tokens, which the quick
    /// view does not count: gated calls then wait for a verdict.
    pub fn counts_tokens(&self) -> bool {
        self.caps.values().any(|c| c.get(CapUnit::Tokens).is_some())
            || self
                .scopes
                .values()
                .any(|s| s.default.in_tokens() || s.overrides.values().any(Limits::in_tokens))
    }

    /// The limits for one scope id: its override over the scope's default.
    pub fn limits(&self, scope: Scope, id: &str) -> Limits {
        match self.scopes.get(&scope) {
            None => Limits::default(),
            Some(s) if scope == Scope::Global => s.default,
            Some(s) => s.overrides.get(id).copied().unwrap_or_default().or(s.default),
        }
    }

    /// Whether any rate limit is set: every provider call then waits for
    /// the gate's verdict (the quick view counts no requests).
    pub fn has_rate_limits(&self) -> bool {
        self.scopes
            .values()
            .any(|s| !s.default.rates.is_empty() || s.overrides.values().any(|o| !o.rates.is_empty()))
    }

    /// Whether a rate limit in USD or tokens is set: every provider call
    /// then waits for the gate's verdict (the quick view counts requests,
    /// not what they will use).
    pub fn has_money_rate_limits(&self) -> bool {
        self.scopes.values().any(|s| {
            std::iter::once(&s.default)
                .chain(s.overrides.values())
                .any(|l| l.rates.iter().any(|(r, _)| r.unit != super::rate::RateUnit::Requests))
        })
    }

    /// The rate limits a session with these scope keys is subject to:
    /// (scope, id, rate, limit).
    pub fn rates_for<'k>(&self, keys: &'k ScopeKeys) -> Vec<(Scope, &'k str, Rate, f64)> {
        let mut out = Vec::new();
        for (scope, id) in keys.iter() {
            for (rate, limit) in self.limits(scope, id).rates.iter() {
                out.push((scope, id, rate, limit));
            }
        }
        out
    }

    /// The budgets a session with these scope keys is subject to.
    pub fn budgets_for(&self, keys: &ScopeKeys) -> Vec<Budget> {
        let mut out = Vec::new();
        for (scope, id) in keys.iter() {
            for (window, unit, limit) in self.limits(scope, id).iter() {
                out.push(Budget {
                    scope,
                    id: id.to_string(),
                    window,
                    unit,
                    limit,
                });
            }
        }
        out
    }
}

/// What a session is accountable to: its root session's cron job, sender
/// and profile, and the model of the call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeKeys {
    pub cron_job: Option<String>,
    pub sender: Option<String>,
    pub profile: Option<String>,
    pub model: Option<String>,
}

impl ScopeKeys {
    /// `(scope, id)` for every scope that applies; global's id is `""`.
    pub fn iter(&self) -> impl Iterator<Item = (Scope, &str)> {
        fn opt(s: &Option<String>) -> Option<&str> {
            s.as_deref().filter(|s| !s.is_empty())
        }
        [
            (Scope::Global, Some("")),
            (Scope::CronJob, opt(&self.cron_job)),
            (Scope::Sender, opt(&self.sender)),
            (Scope::Profile, Some(self.profile.as_deref().unwrap_or(DEFAULT_PROFILE))),
            (Scope::Model, opt(&self.model)),
        ]
        .into_iter()
        .filter_map(|(s, id)| id.map(|id| (s, id)))
    }
}

/// One limit on one scope id over one window.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub scope: Scope,
    /// The scope id; `""` for global.
    pub id: String,
    pub window: Window,
    pub unit: BudgetUnit,
    /// In `unit`.
    pub limit: f64,
}

impl Budget {
    /// Its key in the budget file: `daily`, or `daily_tokens`. Alerts and
    /// once-per-period claims are keyed by it, so a USD and a token budget
    /// of the same window are told apart.
    pub fn key(&self) -> &'static str {
        limit_key(self.window, self.unit)
    }

    /// `global daily`, `cron 3f9a1c2b7d10 daily`, `global daily_tokens`.
    pub fn label(&self) -> String {
        if self.scope == Scope::Global {
            format!("global {}", self.key())
        } else {
            format!("{} {} {}", self.scope, self.id, self.key())
        }
    }

    /// The command that raises this budget's limit.
    pub(crate) fn raise_command(&self) -> String {
        let amount = match self.unit {
            BudgetUnit::Usd => "<usd>",
            BudgetUnit::Tokens => "<tokens>",
        };
        if self.scope == Scope::Global {
            format!("hermes-meter budget set global {} {amount}", self.key())
        } else {
            format!(
                "hermes-meter budget set {} {} {} {amount}",
                self.scope,
                self.id,
                self.key()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_parses_with_defaults_and_overrides() {
        let cfg = BudgetConfig::parse(
            r#"
            # comment
            mode = "observe"
            timezone = "Asia/Kolkata"
            soften_estimated = true
            [global]
            daily = 10
            [per_cron_job.default]
            daily = 1.0
            monthly = 20
            [per_cron_job.overrides.3f9a1c2b7d10]
            daily = 2.5
            "#,
        )
        .expect("parse");
        assert_eq!(cfg.mode, BudgetMode::Observe);
        assert!(cfg.mode_set);
        assert_eq!(cfg.tz_name, "Asia/Kolkata");
        assert_eq!(cfg.soft_threshold, 0.8);
        assert_eq!(cfg.hard_threshold, 1.0);
        let l = cfg.limits(Scope::CronJob, "3f9a1c2b7d10");
        let usd = |l: Limits, w| l.get(w, BudgetUnit::Usd);
        assert_eq!(
            (usd(l, Window::Daily), usd(l, Window::Weekly), usd(l, Window::Monthly)),
            (Some(2.5), None, Some(20.0))
        );
        assert!(!cfg.counts_tokens());
        let l = cfg.limits(Scope::CronJob, "other");
        assert_eq!(usd(l, Window::Daily), Some(1.0));
        assert_eq!(cfg.limits(Scope::Sender, "x"), Limits::default());
        assert!(!cfg.is_empty());
        assert!(BudgetConfig::parse("").expect("empty").is_empty());
    }

    #[test]
    fn alert_thresholds_are_sorted_fractions_below_the_hard_line_without_the_soft_one() {
        let cfg = BudgetConfig::parse("alert_thresholds = [0.9, 0.5, 0.8, 0.5, 0.75]").expect("parse");
        assert_eq!(cfg.alert_thresholds, [0.5, 0.75, 0.9]);
        assert!(BudgetConfig::parse("").expect("empty").alert_thresholds.is_empty());
        for bad in [
            "alert_thresholds = [1.0]",
            "alert_thresholds = [0]",
            "alert_thresholds = [-0.5]",
            "alert_thresholds = [50]",
        ] {
            let err = BudgetConfig::parse(bad).expect_err(bad);
            assert!(err.contains("alert_thresholds"), "{err}");
        }
        // Above a hard threshold over 1, a threshold over 1 is fine.
        let cfg = BudgetConfig::parse("hard_threshold = 1.2\nalert_thresholds = [1.1]").expect("parse");
        assert_eq!(cfg.alert_thresholds, [1.1]);
    }

    #[test]
    fn a_downgrade_names_its_model_and_a_line_below_the_hard_one() {
        let cfg = BudgetConfig::parse("[downgrade]\nto = \"gpt-4o-mini\"\n").expect("parse");
        assert_eq!(
            cfg.downgrade,
            Some(Arc::new(Downgrade {
                at: DEFAULT_SOFT_THRESHOLD,
                to: Some("gpt-4o-mini".into()),
                models: BTreeMap::new(),
            }))
        );
        assert_eq!(BudgetConfig::parse("").expect("empty").downgrade, None);
        for bad in [
            "[downgrade]\nat = 0.5",
            "[downgrade]\nto = \" \"",
            "[downgrade]\nto = \"m\"\nat = 1.0",
            "[downgrade.models]\n\"claude-opus-4\" = \"\"",
        ] {
            let err = BudgetConfig::parse(bad).expect_err(bad);
            assert!(err.contains("downgrade"), "{err}");
        }
    }

    /// Each of the agent's models goes to its own cheaper one (its
    /// provider's), others to `to`, and a model is never routed to itself.
    #[test]
    fn a_downgrade_maps_each_model_to_its_own_cheaper_one() {
        let text = "[downgrade]\nto = \"gpt-4o-mini\"\n[downgrade.models]\n\"claude-opus-4\" = \"claude-haiku-4\"\n\"gpt-4o\" = \"gpt-4o-mini\"\n";
        let downgrade_of = |text: &str| {
            BudgetConfig::parse(text)
                .expect("parse")
                .downgrade
                .expect("a downgrade")
        };
        let d = downgrade_of(text);
        assert_eq!(d.target(Some("claude-opus-4")), Some("claude-haiku-4"));
        assert_eq!(
            d.target(Some("anthropic/Claude-Opus-4")),
            Some("claude-haiku-4"),
            "a provider prefix and case aside"
        );
        assert_eq!(d.target(Some("gpt-4o")), Some("gpt-4o-mini"));
        assert_eq!(
            d.target(Some("mistral-large")),
            Some("gpt-4o-mini"),
            "no line of its own: `to`"
        );
        assert_eq!(d.target(None), Some("gpt-4o-mini"));
        assert_eq!(d.target(Some("gpt-4o-mini")), None, "already the cheaper model");
        let only_map = "[downgrade.models]\n\"claude-opus-4\" = \"claude-haiku-4\"\n";
        let d = downgrade_of(only_map);
        assert_eq!(d.target(Some("claude-opus-4")), Some("claude-haiku-4"));
        assert_eq!(
            d.target(Some("gpt-4o")),
            None,
            "a model the table does not name goes as asked"
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected() {
        for bad in [
            "colour = 1",
            "[global]\nhourly = 1",
            "[global]\n90m = 1",
            "[global]\n5h_usd = 1",
            "[global]\n5h = \"a lot\"",
            "[per_sender.default]\n7d = 0",
            "[per_sender.default]\ndaily = -1",
            "[per_sender.overrides.x]\ndaily = 1\nextra = 2",
            "mode = \"strict\"",
            "timezone = \"Mars/Olympus\"",
            "soft_threshold = 1.2\nhard_threshold = 1.0",
            "[per_team.default]\ndaily = 1",
        ] {
            assert!(BudgetConfig::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rolling_limits_parse_beside_calendar_ones_in_both_units() {
        let cfg =
            BudgetConfig::parse("[global]\ndaily = 10\n5h = 4\n7d_tokens = 50000000\n[per_sender.default]\n1h = 0.5")
                .expect("parse");
        let five = Window::parse("5h").expect("5h");
        let week = Window::parse("7d").expect("7d");
        let g = cfg.limits(Scope::Global, "");
        assert_eq!(g.get(five, BudgetUnit::Usd), Some(4.0));
        assert_eq!(g.get(week, BudgetUnit::Tokens), Some(50_000_000.0));
        assert_eq!(g.get(week, BudgetUnit::Usd), None);
        assert!(cfg.counts_tokens());
        let labels: Vec<String> = cfg
            .budgets_for(&ScopeKeys {
                sender: Some("alice".into()),
                ..ScopeKeys::default()
            })
            .iter()
            .map(Budget::label)
            .collect();
        assert_eq!(
            labels,
            ["global daily", "global 5h", "global 7d_tokens", "sender alice 1h"]
        );
        let err = BudgetConfig::parse("[global]\n90m = 1").expect_err("no 90m window");
        assert!(err.contains("5h") && err.contains("30d"), "{err}");
    }

    #[test]
    fn rate_limits_parse_per_scope_with_their_action() {
        let cfg = BudgetConfig::parse(
            "[global]\nrequests_per_minute = 30\nusd_per_hour = 2\n[per_model.overrides.gpt-4o]\ntokens_per_minute = 100000\n\
             [rate_limit]\naction = \"wait\"\nmax_wait_seconds = 20",
        )
        .expect("parse");
        assert!(cfg.has_rate_limits() && !cfg.is_empty());
        assert_eq!((cfg.rate_action, cfg.rate_max_wait), (RateAction::Wait, 20.0));
        let keys = ScopeKeys {
            model: Some("gpt-4o".into()),
            ..ScopeKeys::default()
        };
        let rates: Vec<(Scope, &str, &str, f64)> = cfg
            .rates_for(&keys)
            .into_iter()
            .map(|(s, id, r, l)| (s, id, r.key(), l))
            .collect();
        assert_eq!(
            rates,
            [
                (Scope::Global, "", "requests_per_minute", 30.0),
                (Scope::Global, "", "usd_per_hour", 2.0),
                (Scope::Model, "gpt-4o", "tokens_per_minute", 100_000.0)
            ]
        );
        assert!(cfg.budgets_for(&keys).is_empty(), "a rate limit is no budget");
        assert!(!BudgetConfig::parse("[global]\ndaily = 1")
            .expect("parse")
            .has_rate_limits());
        for bad in [
            "[global]\nrequests_per_second = 1",
            "[global]\nrequests_per_minute = 0",
            "[rate_limit]\naction = \"queue\"",
            "[rate_limit]\nmax_wait_seconds = 7200",
        ] {
            assert!(BudgetConfig::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_session_is_subject_to_every_scope_that_applies() {
        let cfg = BudgetConfig::parse(
            "[global]\ndaily = 10\n[per_cron_job.default]\ndaily = 1\n[per_model.overrides.gpt-4o]\nweekly = 5\n\
             [per_profile.default]\nmonthly = 50\n[per_sender.default]\ndaily = 2",
        )
        .expect("parse");
        let keys = ScopeKeys {
            cron_job: Some("job".into()),
            sender: None,
            profile: None,
            model: Some("gpt-4o".into()),
        };
        let labels: Vec<String> = cfg.budgets_for(&keys).iter().map(Budget::label).collect();
        assert_eq!(
            labels,
            [
                "global daily",
                "cron job daily",
                "profile default monthly",
                "model gpt-4o weekly"
            ]
        );
    }
}
