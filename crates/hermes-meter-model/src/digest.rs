//! A period's spend digest (`report --digest day|week`): the period's
//! totals against the period before, the top models, sessions, cron jobs
//! and gateway users, and what grew out of line.
//!
//! Owns: the comparison, the anomaly rule, and which periods a schedule
//! has due ([`due_periods`]). Must not touch: the store (the caller hands
//! in the two periods' reports) or the text printed.

use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde::Serialize;

use crate::budget::{period_name, window_bounds, Window};
use crate::report::{Group, Report, Totals};

/// A key whose cost grew out of line is one costing at least this share of
/// the period's total...
const ANOMALY_SHARE: f64 = 0.10;
/// ...and at least this many times what it cost the period before (or new).
const ANOMALY_GROWTH: f64 = 2.0;

/// The two periods compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Period {
    pub since: String,
    pub until: String,
    pub totals: Totals,
}

/// A model, cron job or gateway user whose cost grew out of line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Anomaly {
    /// `model`, `cron_job` or `sender`.
    pub dimension: &'static str,
    pub key: Option<String>,
    pub cost_usd: f64,
    pub previous_cost_usd: f64,
}

/// The digest of one period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Digest {
    pub schema: &'static str,
    /// `day` or `week`.
    pub period: &'static str,
    pub current: Period,
    pub previous: Period,
    /// The cost's change against the previous period, in percent; `None`
    /// when the previous period cost nothing.
    pub cost_change_pct: Option<f64>,
    pub top_models: Vec<Group>,
    pub top_sessions: Vec<Group>,
    pub top_cron_jobs: Vec<Group>,
    pub top_senders: Vec<Group>,
    pub anomalies: Vec<Anomaly>,
}

/// The digest's schema name; a change that breaks readers gets a new one.
pub const SCHEMA: &str = "hermes-meter.digest.v1";

/// The digest of `current` against `previous`, `top` rows a list.
pub fn digest(period: &'static str, current: &Report, previous: &Report, top: usize) -> Digest {
    let mut anomalies = Vec::new();
    for (dimension, now, before) in [
        ("model", &current.by_model, &previous.by_model),
        ("cron_job", &current.by_cron_job, &previous.by_cron_job),
        ("sender", &current.by_sender, &previous.by_sender),
    ] {
        anomalies.extend(grown(dimension, now, before, current.totals.cost_usd));
    }
    anomalies.sort_by(|a, b| b.cost_usd.total_cmp(&a.cost_usd));
    let first = |groups: &[Group]| groups.iter().filter(|g| g.key.is_some()).take(top).cloned().collect();
    let before = previous.totals.cost_usd;
    Digest {
        schema: SCHEMA,
        period,
        current: Period {
            since: current.since.clone(),
            until: current.until.clone(),
            totals: current.totals.clone(),
        },
        previous: Period {
            since: previous.since.clone(),
            until: previous.until.clone(),
            totals: previous.totals.clone(),
        },
        cost_change_pct: (before > 0.0).then(|| 100.0 * (current.totals.cost_usd - before) / before),
        top_models: first(&current.by_model),
        top_sessions: first(&current.by_session),
        top_cron_jobs: first(&current.by_cron_job),
        top_senders: first(&current.by_sender),
        anomalies,
    }
}

/// The keys of `now` costing at least [`ANOMALY_SHARE`] of `total` and at
/// least [`ANOMALY_GROWTH`] times their cost in `before` (or absent there).
fn grown(dimension: &'static str, now: &[Group], before: &[Group], total: f64) -> Vec<Anomaly> {
    now.iter()
        .filter(|g| g.key.is_some() && total > 0.0 && g.totals.cost_usd >= ANOMALY_SHARE * total)
        .filter_map(|g| {
            let previous = before
                .iter()
                .find(|b| b.key == g.key)
                .map_or(0.0, |b| b.totals.cost_usd);
            (g.totals.cost_usd >= ANOMALY_GROWTH * previous).then(|| Anomaly {
                dimension,
                key: g.key.clone(),
                cost_usd: g.totals.cost_usd,
                previous_cost_usd: previous,
            })
        })
        .collect()
}

/// How often a scheduled digest is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Every {
    /// A day, from midnight to midnight.
    Day,
    /// A week, from Monday midnight to Monday midnight.
    Week,
}

impl Every {
    /// `day` or `week`: the digest's `period`.
    pub fn as_str(self) -> &'static str {
        match self {
            Every::Day => "day",
            Every::Week => "week",
        }
    }

    /// The alert kind a digest of this period is claimed and delivered as.
    pub fn alert_kind(self) -> &'static str {
        match self {
            Every::Day => "digest_day",
            Every::Week => "digest_week",
        }
    }

    fn window(self) -> Window {
        match self {
            Every::Day => Window::Daily,
            Every::Week => Window::Weekly,
        }
    }
}

/// One complete period of a schedule: its bounds, the bounds of the one
/// before (what it is compared with), and its name (the date it starts on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuePeriod {
    pub start: Timestamp,
    pub end: Timestamp,
    pub previous_start: Timestamp,
    pub name: String,
}

/// The complete periods of `every` in `tz` that ended after `since` and by
/// `now`, oldest first, at most the latest `max`: what a schedule has to
/// send (each once: the caller claims it by its name). A period that ended
/// before `since` (before the schedule was turned on) is never due; one
/// missed while nothing ran is, once anything runs again, up to `max`.
pub fn due_periods(every: Every, since: Timestamp, now: Timestamp, tz: &TimeZone, max: usize) -> Vec<DuePeriod> {
    let window = every.window();
    let step_back = |t: Timestamp| t.checked_sub(jiff::SignedDuration::from_secs(1)).unwrap_or(t);
    let (mut start, _) = window_bounds(window, now, tz);
    let mut out = Vec::new();
    while out.len() < max {
        let end = start;
        let (previous, _) = window_bounds(window, step_back(end), tz);
        if end <= since || previous >= end {
            break;
        }
        let (before, _) = window_bounds(window, step_back(previous), tz);
        out.push(DuePeriod {
            start: previous,
            end,
            previous_start: before,
            name: period_name(window, previous, tz),
        });
        start = previous;
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(key: &str, cost: f64) -> Group {
        Group {
            key: Some(key.to_string()),
            totals: Totals {
                cost_usd: cost,
                ..Totals::default()
            },
        }
    }

    fn report(cost: f64, models: Vec<Group>, cron: Vec<Group>) -> Report {
        Report {
            schema: "hermes-meter.report.v1",
            since: "a".into(),
            until: "b".into(),
            timezone: "UTC".into(),
            totals: Totals {
                cost_usd: cost,
                ..Totals::default()
            },
            by_day: Vec::new(),
            by_model: models,
            by_provider: Vec::new(),
            by_sender: Vec::new(),
            by_cron_job: cron,
            by_session: vec![group("s1", cost)],
            provider_billed: Vec::new(),
            held_llm_calls: 0,
            cache: Default::default(),
            downgraded: Vec::new(),
        }
    }

    #[test]
    fn what_grew_twofold_and_matters_is_an_anomaly_and_the_change_is_against_the_period_before() {
        let now = report(
            10.0,
            vec![group("dear", 6.0), group("steady", 3.0), group("tiny-new", 0.5)],
            vec![group("nightly", 4.0)],
        );
        let before = report(
            4.0,
            vec![group("dear", 2.0), group("steady", 2.0)],
            vec![group("nightly", 3.0)],
        );
        let d = digest("day", &now, &before, 2);
        assert_eq!(d.cost_change_pct, Some(150.0));
        // dear tripled and is 60 % of the day; steady grew 1.5x; the new
        // model is 5 % of the day; the cron job grew 1.33x.
        assert_eq!(d.anomalies.len(), 1, "{:?}", d.anomalies);
        assert_eq!(
            (d.anomalies[0].dimension, d.anomalies[0].key.as_deref()),
            ("model", Some("dear"))
        );
        assert_eq!(d.top_models.len(), 2);
        assert_eq!(d.top_sessions[0].key.as_deref(), Some("s1"));
        // Nothing the period before: no percentage, and anything that
        // matters is new.
        let d = digest("week", &now, &report(0.0, Vec::new(), Vec::new()), 5);
        assert_eq!(d.cost_change_pct, None);
        assert_eq!(d.anomalies.len(), 3, "{:?}", d.anomalies);
    }

    #[test]
    fn a_schedule_has_the_periods_that_ended_since_it_was_turned_on_at_most_max() {
        let tz = TimeZone::get("Europe/Berlin").expect("zone");
        let at = |text: &str| -> Timestamp { text.parse().expect("time") };
        let names = |v: Vec<DuePeriod>| v.into_iter().map(|p| p.name).collect::<Vec<_>>();
        // Turned on yesterday at noon: yesterday (the last complete day) is due.
        let now = at("2026-12-07T09:00:00+01:00");
        assert_eq!(
            names(due_periods(Every::Day, at("2026-12-06T12:00:00+01:00"), now, &tz, 7)),
            ["2026-12-06"]
        );
        // Three days of downtime are caught up, oldest first; never more than max.
        let since = at("2026-12-02T12:00:00+01:00");
        assert_eq!(
            names(due_periods(Every::Day, since, now, &tz, 7)),
            ["2026-12-02", "2026-12-03", "2026-12-04", "2026-12-05", "2026-12-06"]
        );
        assert_eq!(
            names(due_periods(Every::Day, since, now, &tz, 2)),
            ["2026-12-05", "2026-12-06"]
        );
        // Nothing ended since: nothing due.
        assert!(due_periods(Every::Day, at("2026-12-07T00:00:00+01:00"), now, &tz, 7).is_empty());
        // Weeks run Monday to Monday; 2026-12-07 is a Monday.
        let week = due_periods(Every::Week, at("2026-11-30T12:00:00+01:00"), now, &tz, 4);
        assert_eq!(week.len(), 1);
        assert_eq!(
            (week[0].start, week[0].end, week[0].previous_start),
            (
                at("2026-11-30T00:00:00+01:00"),
                at("2026-12-07T00:00:00+01:00"),
                at("2026-11-23T00:00:00+01:00")
            )
        );
        // A day across the change to summer time is 23 hours long.
        let dst = due_periods(
            Every::Day,
            at("2026-03-29T12:00:00+02:00"),
            at("2026-03-30T08:00:00+02:00"),
            &tz,
            7,
        );
        assert_eq!(names(dst.clone()), ["2026-03-29"]);
        assert_eq!(dst[0].end.as_second() - dst[0].start.as_second(), 23 * 3600);
    }
}
