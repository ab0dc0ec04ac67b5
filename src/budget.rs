//! Budgets: limits, windows, thresholds and verdicts. Pure.
//!
//! Owns: the budget file's format ([`BudgetConfig::parse`]), which budgets
//! apply to a session ([`BudgetConfig::budgets_for`]), window bounds in the
//! configured time zone ([`window_bounds`]), how a window is summed from the
//! store's spend buckets ([`bucket_ranges`]), the verdict over a spend
//! snapshot ([`assess`]), forecasting ([`forecast`]), the texts Hermes shows
//! and the gauges metrics export ([`gauges`]). Must not touch: the store, the
//! file system, Python. The store (`store/budget.rs`) keeps the spend
//! rollups and reads snapshots; the gate (`budget_gate.rs`) runs this module
//! on the bridge's writer thread; the CLI (`cli/budget.rs`) edits the file.
//!
//! # Model
//!
//! A *budget* is a limit in USD for one scope id over one window:
//! `global`, or one cron job, sender, profile or model, per `daily`,
//! `weekly` (Monday to Monday) or `monthly` calendar window in one time zone.
//! Each scope has a default (for every id) and overrides by id; an override
//! sets the windows it names and inherits the others from the default.
//! A session is subject to the global budgets and to those of its root
//! session's cron job, sender and profile, and of the model it calls (a
//! subagent counts toward its root's cron job, sender and profile).
//!
//! Spend is settled cost plus open reservations (estimates of calls in
//! flight, see `store/budget.rs`). At `soft_threshold` × limit a budget is in
//! soft breach (a notice), at `hard_threshold` × limit in hard breach (tools
//! blocked, LLM calls stopped and cron jobs paused, in `enforce` mode).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};
use serde::Deserialize;

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

/// The `model` of the stand-in response that stops an LLM call; the ledger
/// recognises it in `post_api_request` and records no LLM call for it.
pub const BLOCKED_MODEL: &str = "hermes-otel/budget-blocked";

/// Default soft threshold, as a fraction of the limit.
pub const DEFAULT_SOFT_THRESHOLD: f64 = 0.8;
/// Default hard threshold, as a fraction of the limit.
pub const DEFAULT_HARD_THRESHOLD: f64 = 1.0;

/// The profile id of runs whose profile is unknown (replayed files), the
/// name Hermes gives its root profile.
pub const DEFAULT_PROFILE: &str = "default";

/// The widths of the spend buckets, in seconds, by level: UTC quarter
/// hours, hours and days. Every spend is added to one bucket of each level.
/// Quarter hours because every time zone in use today is offset from UTC by
/// a multiple of 15 minutes (India +5:30, Nepal +5:45, Chatham +12:45), so
/// every window start in every zone is a quarter-hour boundary in UTC.
pub const BUCKET_SECONDS: [i64; 3] = [900, 3600, 86_400];

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

/// A calendar window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Window {
    Daily,
    Weekly,
    Monthly,
}

impl Window {
    /// Every window.
    pub const ALL: [Window; 3] = [Window::Daily, Window::Weekly, Window::Monthly];

    /// The name in the file, the CLI and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Daily => "daily",
            Window::Weekly => "weekly",
            Window::Monthly => "monthly",
        }
    }

    /// Parses a window name.
    pub fn parse(text: &str) -> Option<Window> {
        Window::ALL.into_iter().find(|w| w.as_str() == text)
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Limits in USD per window; `None` means no limit for that window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub daily: Option<f64>,
    pub weekly: Option<f64>,
    pub monthly: Option<f64>,
}

impl Limits {
    /// The limit for `window`.
    pub fn get(&self, window: Window) -> Option<f64> {
        match window {
            Window::Daily => self.daily,
            Window::Weekly => self.weekly,
            Window::Monthly => self.monthly,
        }
    }

    /// These limits, with the windows they leave unset taken from `base`.
    pub fn or(self, base: Limits) -> Limits {
        Limits {
            daily: self.daily.or(base.daily),
            weekly: self.weekly.or(base.weekly),
            monthly: self.monthly.or(base.monthly),
        }
    }

    fn is_empty(&self) -> bool {
        self.daily.is_none() && self.weekly.is_none() && self.monthly.is_none()
    }

    fn check(&self, what: &str) -> Result<(), String> {
        for w in Window::ALL {
            if let Some(v) = self.get(w) {
                // A limit of 0 would block every call, which nobody means;
                // no limit is written as no key (`hermes-otel budget rm`).
                if !v.is_finite() || v <= 0.0 {
                    return Err(format!(
                        "{what}.{w}: a limit must be more than 0 USD, not {v} \
                         (to have no limit, remove the key: hermes-otel budget rm)"
                    ));
                }
            }
        }
        Ok(())
    }
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
    global: Option<Limits>,
    per_cron_job: Option<ScopeLimits>,
    per_sender: Option<ScopeLimits>,
    per_profile: Option<ScopeLimits>,
    per_model: Option<ScopeLimits>,
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
    /// Limits by scope (`Global` uses the default only).
    pub scopes: BTreeMap<Scope, ScopeLimits>,
    /// Spend is the fleet's (`HERMES_OTEL_FLEET_URL`): set by whoever loads
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
            scopes: BTreeMap::new(),
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
        Ok(cfg)
    }

    /// Reads `path`; a missing file is the empty configuration (no budgets).
    pub fn load(path: &Path) -> crate::Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text).map_err(|message| crate::Error::Config {
                path: path.to_path_buf(),
                message,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(crate::Error::io(path, e)),
        }
    }

    /// Whether no limit is set at all (the gate then reads nothing).
    pub fn is_empty(&self) -> bool {
        self.scopes
            .values()
            .all(|s| s.default.is_empty() && s.overrides.values().all(Limits::is_empty))
    }

    /// The limits for one scope id: its override over the scope's default.
    pub fn limits(&self, scope: Scope, id: &str) -> Limits {
        match self.scopes.get(&scope) {
            None => Limits::default(),
            Some(s) if scope == Scope::Global => s.default,
            Some(s) => s.overrides.get(id).copied().unwrap_or_default().or(s.default),
        }
    }

    /// The budgets a session with these scope keys is subject to.
    pub fn budgets_for(&self, keys: &ScopeKeys) -> Vec<Budget> {
        let mut out = Vec::new();
        for (scope, id) in keys.iter() {
            let limits = self.limits(scope, id);
            for window in Window::ALL {
                if let Some(limit) = limits.get(window) {
                    out.push(Budget {
                        scope,
                        id: id.to_string(),
                        window,
                        limit,
                    });
                }
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
    /// USD.
    pub limit: f64,
}

impl Budget {
    /// `global daily` or `cron 3f9a1c2b7d10 daily`.
    pub fn label(&self) -> String {
        if self.scope == Scope::Global {
            format!("global {}", self.window)
        } else {
            format!("{} {} {}", self.scope, self.id, self.window)
        }
    }

    /// The command that raises this budget's limit.
    pub fn raise_command(&self) -> String {
        if self.scope == Scope::Global {
            format!("hermes-otel budget set global {} <usd>", self.window)
        } else {
            format!(
                "hermes-otel budget set {} {} {} <usd>",
                self.scope, self.id, self.window
            )
        }
    }
}

/// The start and end of the window holding `now`, in `tz`. Days start at
/// local midnight (or the first instant after a DST gap), weeks on Monday,
/// months on the 1st.
pub fn window_bounds(window: Window, now: Timestamp, tz: &TimeZone) -> (Timestamp, Timestamp) {
    let zoned = now.to_zoned(tz.clone());
    let date = zoned.date();
    let (start, next) = match window {
        Window::Daily => (date, date.tomorrow().ok()),
        Window::Weekly => {
            let back = i64::from(date.weekday().to_monday_zero_offset());
            let monday = date.checked_sub(back.days()).unwrap_or(date);
            (monday, monday.checked_add(7.days()).ok())
        }
        Window::Monthly => {
            let first = date.first_of_month();
            (first, first.checked_add(1.month()).ok())
        }
    };
    let at = |d: jiff::civil::Date| d.to_zoned(tz.clone()).map(|z: Zoned| z.timestamp()).ok();
    let start = at(start).unwrap_or(now);
    let end = next.and_then(at).unwrap_or(Timestamp::MAX);
    (start, end)
}

/// The calendar date a window starts on, naming the period (`2026-11-30`).
pub fn period_name(window: Window, now: Timestamp, tz: &TimeZone) -> String {
    let (start, _) = window_bounds(window, now, tz);
    start.to_zoned(tz.clone()).date().to_string()
}

/// Unix seconds of a timestamp, whole.
pub fn unix_seconds(t: Timestamp) -> i64 {
    t.as_second()
}

/// A timestamp from Unix seconds (fractional).
pub fn timestamp(unix: f64) -> Timestamp {
    Timestamp::from_microsecond((unix * 1e6) as i64).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The bucket ranges whose sum is the spend in `[start, end)` (Unix
/// seconds, rounded down to quarter hours): `(level, first, end)` with
/// bucket starts `first <= b < end` at level `level` of [`BUCKET_SECONDS`].
/// At most 3 + 23 + 31 + 23 + 3 buckets, whatever the window and the zone:
/// quarters up to the first whole hour, hours up to the first whole UTC day,
/// days, then hours and quarters to the end.
pub fn bucket_ranges(start: i64, end: i64) -> Vec<(u8, i64, i64)> {
    let [q, h, d] = BUCKET_SECONDS;
    let s = start.div_euclid(q) * q;
    let e = end.div_euclid(q) * q;
    let mut out = Vec::with_capacity(5);
    if s >= e {
        return out;
    }
    let up = |t: i64, w: i64| (t + w - 1).div_euclid(w) * w;
    let down = |t: i64, w: i64| t.div_euclid(w) * w;
    let (hs, he) = (up(s, h), down(e, h));
    if hs >= he {
        out.push((0, s, e));
        return out;
    }
    let (ds, de) = (up(hs, d), down(he, d));
    out.push((0, s, hs));
    if ds >= de {
        out.push((1, hs, he));
    } else {
        out.push((1, hs, ds));
        out.push((2, ds, de));
        out.push((1, de, he));
    }
    out.push((0, he, e));
    out.retain(|(_, a, b)| a < b);
    out
}

/// The bucket ranges whose sum is the spend from `start` on (Unix
/// seconds, rounded down to a quarter hour): quarters up to the next whole
/// hour, hours up to the next whole UTC day, then every day bucket: at most
/// 3 + 23 + 32 rows for a month. This is how the gate sums the window
/// holding now: nothing is recorded after now, so the window's end needs no
/// bucket of its own. Returns `[(0, s, h), (1, h, d), (2, d, i64::MAX)]`.
pub fn open_ranges(start: i64) -> [(u8, i64, i64); 3] {
    let [q, h, d] = BUCKET_SECONDS;
    let s = start.div_euclid(q) * q;
    let hs = (s + h - 1).div_euclid(h) * h;
    let ds = (hs + d - 1).div_euclid(d) * d;
    [(0, s, hs), (1, hs, ds), (2, ds, i64::MAX)]
}

/// A budget's spend in its current window, from the store.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    /// Cost of the calls that finished in the window, USD.
    pub settled_usd: f64,
    /// The part of `settled_usd` whose usage was estimated (no usage from
    /// the provider).
    pub estimated_usd: f64,
    /// Estimates of calls in flight (reservations not yet settled), USD.
    pub reserved_usd: f64,
}

impl Spend {
    /// What counts against the limit: settled plus reserved.
    pub fn total(&self) -> f64 {
        self.settled_usd + self.reserved_usd
    }
}

/// How far a budget is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Soft,
    Hard,
}

impl Level {
    /// `ok`, `soft` or `hard`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Soft => "soft",
            Level::Hard => "hard",
        }
    }
}

/// This host's part of a fleet budget (see [`crate::fleet`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetShare {
    /// This host's spend and reservations in the window, USD.
    pub own_usd: f64,
    /// What is left of the lease this host took at its last sync; at or
    /// below zero its calls are blocked until the next sync.
    pub lease_left_usd: f64,
}

/// A budget, its spend and its verdict now.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetState {
    pub budget: Budget,
    /// The fleet's spend with a fleet, else this store's.
    pub spend: Spend,
    pub level: Level,
    /// A hard breach softened because it rests on estimated costs.
    pub softened: bool,
    /// The period's start date, naming it (`2026-11-30`).
    pub period: String,
    /// When the window ends, Unix seconds.
    pub window_end: i64,
    /// With a fleet: this host's share and lease.
    pub fleet: Option<FleetShare>,
}

impl BudgetState {
    /// Whether calls must be blocked: a hard breach, or (with a fleet) this
    /// host's lease used up until its next sync.
    pub fn blocks(&self) -> bool {
        self.level == Level::Hard || self.fleet.is_some_and(|f| f.lease_left_usd <= 0.0)
    }
}

/// The verdict for one budget given its spend: the rule of the whole module.
///
/// - spend ≥ hard_threshold × limit: hard, unless `soften_estimated` is on
///   and the settled spend without its estimated part (plus reservations)
///   stays under the hard line, which makes it soft (`softened`);
/// - spend ≥ soft_threshold × limit: soft;
/// - else ok. A limit of 0 is in hard breach from the start.
pub fn assess(cfg: &BudgetConfig, budget: &Budget, spend: Spend) -> (Level, bool) {
    let total = spend.total();
    let hard_line = budget.limit * cfg.hard_threshold;
    let soft_line = budget.limit * cfg.soft_threshold;
    if total >= hard_line {
        if cfg.soften_estimated && spend.estimated_usd > 0.0 && total - spend.estimated_usd < hard_line {
            return (Level::Soft, true);
        }
        (Level::Hard, false)
    } else if total >= soft_line {
        (Level::Soft, false)
    } else {
        (Level::Ok, false)
    }
}

/// The burn rate of a window so far and where it lands at the window end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Forecast {
    /// USD per hour, over the window so far.
    pub usd_per_hour: f64,
    /// Spend now plus the rate times the time left.
    pub projected_usd: f64,
}

/// Projects `spend` (accrued from `start` to `now`) to `end` at the
/// window's average rate so far. Times in Unix seconds.
pub fn forecast(spend: f64, start: i64, end: i64, now: f64) -> Forecast {
    let elapsed = (now - start as f64).max(60.0);
    let left = (end as f64 - now).max(0.0);
    let rate = spend / elapsed;
    Forecast {
        usd_per_hour: rate * 3600.0,
        projected_usd: spend + rate * left,
    }
}

/// A budget gauge for metrics: `hermes.budget.spend` and
/// `hermes.budget.limit` with attributes `hermes.budget.scope` (`scope`),
/// `hermes.budget.id` (`id`, `""` for global) and `hermes.budget.window`
/// (`window`). Build them with [`gauges`] from
/// `Store::budget_states(&cfg, now)`.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetGauge {
    pub scope: &'static str,
    pub id: String,
    pub window: &'static str,
    /// USD, settled plus reserved, in the current window.
    pub spend_usd: f64,
    /// USD.
    pub limit_usd: f64,
}

/// The gauges of a set of budget states (pure; one per budget).
pub fn gauges(states: &[BudgetState]) -> Vec<BudgetGauge> {
    states
        .iter()
        .map(|s| BudgetGauge {
            scope: s.budget.scope.as_str(),
            id: s.budget.id.clone(),
            window: s.budget.window.as_str(),
            spend_usd: s.spend.total(),
            limit_usd: s.budget.limit,
        })
        .collect()
}

/// The verdicts counted in the store and in `hermes.budget.verdicts`
/// (attribute `hermes.budget.verdict`).
pub mod verdict {
    /// A soft notice was shown.
    pub const SOFT: &str = "soft";
    /// A hard-breach notice was shown.
    pub const HARD: &str = "hard";
    /// A tool call was blocked or an LLM call stopped.
    pub const BLOCKED: &str = "blocked";
    /// A cron job was paused.
    pub const PAUSED: &str = "paused";
    /// All of them.
    pub const ALL: [&str; 4] = [SOFT, HARD, BLOCKED, PAUSED];
}

/// The alert kinds recorded in the store and counted in `hermes.alerts`
/// (attribute `hermes.alert.kind`).
pub mod alert {
    /// A model first seen at $0 now costs money.
    pub const FREE_TO_PAID: &str = "free_to_paid";
    /// A 404 that is not retryable: the model is gone.
    pub const MODEL_UNAVAILABLE: &str = "model_unavailable";
    /// A budget reached its soft threshold.
    pub const BUDGET_SOFT: &str = "budget_soft";
    /// A budget reached its hard threshold.
    pub const BUDGET_HARD: &str = "budget_hard";
    /// All of them.
    pub const ALL: [&str; 4] = [FREE_TO_PAID, MODEL_UNAVAILABLE, BUDGET_SOFT, BUDGET_HARD];
}

/// The model a `:free` variant is billed as: `x:free` and `x` are one model
/// for the free→paid alert.
pub fn paid_model_key(model: &str) -> &str {
    model.strip_suffix(":free").unwrap_or(model)
}

fn usd(v: f64) -> String {
    if v.abs() < 0.01 && v != 0.0 {
        format!("${v:.4}")
    } else {
        format!("${v:.2}")
    }
}

fn when(end: i64, tz: &TimeZone) -> String {
    Timestamp::from_second(end)
        .map(|t| t.to_zoned(tz.clone()).strftime("%Y-%m-%d %H:%M %Z").to_string())
        .unwrap_or_else(|_| "the end of the window".into())
}

/// The `pre_llm_call` context of a soft or hard notice.
pub fn notice_text(state: &BudgetState, mode: BudgetMode, tz: &TimeZone) -> String {
    let s = state;
    let pct = if s.budget.limit > 0.0 {
        format!(" ({:.0}%)", 100.0 * s.spend.total() / s.budget.limit)
    } else {
        String::new()
    };
    let est = if s.spend.estimated_usd > 0.0 {
        format!(", of which {} estimated", usd(s.spend.estimated_usd))
    } else {
        String::new()
    };
    let what = match (s.level, mode) {
        (Level::Hard, BudgetMode::Enforce) => "is exhausted: tool calls and LLM calls are blocked until",
        (Level::Hard, BudgetMode::Observe) => "is exhausted (observe mode: nothing is blocked); it resets",
        _ if s.softened => "is past its limit on estimated costs (soft notice); it resets",
        _ => "is nearly used up; it resets",
    };
    format!(
        "[hermes-otel budget notice] The {} budget has {} spent of {}{pct}{est}. It {what} {}. To raise it: {}",
        s.budget.label(),
        usd(s.spend.total()),
        usd(s.budget.limit),
        when(s.window_end, tz),
        s.budget.raise_command(),
    )
}

/// The `pre_tool_call` block message (and the stand-in response of a
/// stopped LLM call).
pub fn block_text(state: &BudgetState, tz: &TimeZone) -> String {
    format!(
        "BUDGET-EXCEEDED: hermes-otel blocked this call: the {} budget is exhausted ({} spent of {}). \
         It resets {}. To raise the limit run: {}",
        state.budget.label(),
        usd(state.spend.total()),
        usd(state.budget.limit),
        when(state.window_end, tz),
        state.budget.raise_command(),
    )
}

/// The reason given to `cron.jobs.pause_job`.
pub fn pause_reason(state: &BudgetState) -> String {
    format!(
        "hermes-otel: {} budget exhausted ({} of {}); resume with `hermes cron resume` after raising it: {}",
        state.budget.label(),
        usd(state.spend.total()),
        usd(state.budget.limit),
        state.budget.raise_command()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

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
        assert_eq!((l.daily, l.weekly, l.monthly), (Some(2.5), None, Some(20.0)));
        let l = cfg.limits(Scope::CronJob, "other");
        assert_eq!(l.daily, Some(1.0));
        assert_eq!(cfg.limits(Scope::Sender, "x"), Limits::default());
        assert!(!cfg.is_empty());
        assert!(BudgetConfig::parse("").expect("empty").is_empty());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected() {
        for bad in [
            "colour = 1",
            "[global]\nhourly = 1",
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

    #[test]
    fn days_weeks_and_months_start_at_local_midnight() {
        let paris = TimeZone::get("Europe/Paris").expect("zone");
        // 2026-11-30 is a Monday; 23:30 UTC is 00:30 on Dec 1 in Paris.
        let now = ts("2026-11-30T23:30:00Z");
        let (s, e) = window_bounds(Window::Daily, now, &paris);
        assert_eq!((s, e), (ts("2026-11-30T23:00:00Z"), ts("2026-12-01T23:00:00Z")));
        let (s, e) = window_bounds(Window::Weekly, now, &paris);
        assert_eq!((s, e), (ts("2026-11-29T23:00:00Z"), ts("2026-12-06T23:00:00Z")));
        let (s, e) = window_bounds(Window::Monthly, now, &paris);
        assert_eq!((s, e), (ts("2026-11-30T23:00:00Z"), ts("2026-12-31T23:00:00Z")));
        assert_eq!(period_name(Window::Daily, now, &paris), "2026-12-01");
        // A DST change inside the window: the day is 23 hours long.
        let (s, e) = window_bounds(Window::Daily, ts("2026-03-29T12:00:00Z"), &paris);
        assert_eq!(e.as_second() - s.as_second(), 23 * 3600);
    }

    #[test]
    fn bucket_ranges_cover_any_window_exactly_with_few_buckets() {
        let kathmandu = TimeZone::get("Asia/Kathmandu").expect("zone"); // +05:45
        let now = ts("2026-11-17T10:00:00Z");
        for w in Window::ALL {
            let (s, e) = window_bounds(w, now, &kathmandu);
            let (s, e) = (s.as_second(), e.as_second());
            let ranges = bucket_ranges(s, e);
            // Contiguous, from s to e, each range aligned to its level.
            let mut at = s;
            let mut buckets = 0;
            for (level, a, b) in &ranges {
                let width = BUCKET_SECONDS[*level as usize];
                assert_eq!(*a, at);
                assert_eq!(a % width, 0);
                assert_eq!(b % width, 0);
                buckets += (b - a) / width;
                at = *b;
            }
            assert_eq!(at, e, "{w}");
            assert!(buckets <= 3 + 23 + 31 + 23 + 3, "{w}: {buckets}");
        }
        assert!(bucket_ranges(100, 100).is_empty());
        // Open ranges: from a +05:45 midnight (18:15 UTC) on.
        let s = ts("2026-11-30T18:15:00Z").as_second();
        let [(0, a, b), (1, c, d), (2, e, f)] = open_ranges(s) else {
            panic!()
        };
        assert_eq!((a, b, c), (s, s + 2700, s + 2700));
        assert_eq!((d, e, f), (ts("2026-12-01T00:00:00Z").as_second(), d, i64::MAX));
        assert_eq!(bucket_ranges(0, 1800), vec![(0, 0, 1800)]);
    }

    fn budget(limit: f64) -> Budget {
        Budget {
            scope: Scope::Global,
            id: String::new(),
            window: Window::Daily,
            limit,
        }
    }

    #[test]
    fn verdicts_follow_the_thresholds() {
        let cfg = BudgetConfig::default();
        let spend = |settled, estimated, reserved| Spend {
            settled_usd: settled,
            estimated_usd: estimated,
            reserved_usd: reserved,
        };
        let b = budget(10.0);
        assert_eq!(assess(&cfg, &b, spend(7.9, 0.0, 0.0)), (Level::Ok, false));
        assert_eq!(assess(&cfg, &b, spend(8.0, 0.0, 0.0)), (Level::Soft, false));
        assert_eq!(
            assess(&cfg, &b, spend(9.0, 0.0, 1.0)),
            (Level::Hard, false),
            "reservations count"
        );
        assert_eq!(assess(&cfg, &b, spend(10.0, 3.0, 0.0)), (Level::Hard, false));
        let soft = BudgetConfig {
            soften_estimated: true,
            ..BudgetConfig::default()
        };
        assert_eq!(assess(&soft, &b, spend(10.0, 3.0, 0.0)), (Level::Soft, true));
        assert_eq!(assess(&soft, &b, spend(14.0, 3.0, 0.0)), (Level::Hard, false));
        assert_eq!(assess(&cfg, &budget(0.0), spend(0.0, 0.0, 0.0)), (Level::Hard, false));
    }

    #[test]
    fn forecasts_project_the_average_rate() {
        let f = forecast(1.0, 0, 86_400, 3600.0);
        assert!((f.usd_per_hour - 1.0).abs() < 1e-9);
        assert!((f.projected_usd - 24.0).abs() < 1e-9);
        assert_eq!(forecast(0.0, 0, 10, 20.0).projected_usd, 0.0);
    }

    #[test]
    fn texts_name_the_budget_and_how_to_raise_it() {
        let state = BudgetState {
            budget: Budget {
                scope: Scope::CronJob,
                id: "3f9a1c2b7d10".into(),
                window: Window::Daily,
                limit: 2.5,
            },
            spend: Spend {
                settled_usd: 2.6,
                ..Spend::default()
            },
            level: Level::Hard,
            softened: false,
            period: "2026-11-30".into(),
            window_end: 1_796_083_200,
            fleet: None,
        };
        let block = block_text(&state, &TimeZone::UTC);
        assert!(block.contains("cron 3f9a1c2b7d10 daily"), "{block}");
        assert!(
            block.contains("hermes-otel budget set cron 3f9a1c2b7d10 daily <usd>"),
            "{block}"
        );
        let notice = notice_text(&state, BudgetMode::Enforce, &TimeZone::UTC);
        assert!(notice.contains("$2.60 spent of $2.50 (104%)"), "{notice}");
        assert_eq!(paid_model_key("meta/llama-3:free"), "meta/llama-3");
        assert_eq!(paid_model_key("gpt-4o"), "gpt-4o");
    }
}
