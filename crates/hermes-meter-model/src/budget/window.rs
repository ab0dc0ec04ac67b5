//! Budget windows in the configured zone and the spend buckets that sum
//! them. Pure.
//!
//! Owns: [`Window`] (calendar days, weeks and months in a zone, and
//! rolling windows of a fixed width, [`Rolling`]), window bounds and period
//! names, and which rows of the store's spend buckets ([`BUCKET_SECONDS`])
//! add up to a window ([`bucket_ranges`], [`open_ranges`]). Must not touch:
//! the store (which runs the sums), limits or verdicts.

use std::fmt;

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};

/// The widths of the spend buckets, in seconds, by level: UTC quarter
/// hours, hours and days. Every spend is added to one bucket of each level.
/// Quarter hours because every time zone in use today is offset from UTC by
/// a multiple of 15 minutes (India +5:30, Nepal +5:45, Chatham +12:45), so
/// every window start in every zone is a quarter-hour boundary in UTC.
pub const BUCKET_SECONDS: [i64; 3] = [900, 3600, 86_400];

/// The step a rolling window moves in: the narrowest spend bucket. A
/// rolling window of width W counts, at `now`, every quarter hour that
/// began at or after `now - W` rounded down to a quarter hour: never less
/// than the last W, at most a quarter hour more (a budget that holds, and
/// a spend leaves the window at a time it can state).
pub const ROLLING_STEP: i64 = BUCKET_SECONDS[0];

/// The rolling widths a budget may have: (name, token limit key, seconds).
/// A fixed list so that a window's name is a static word everywhere it is
/// a key (the budget file, alerts, metrics' `hermes.budget.window`).
const ROLLING: [(&str, &str, i64); 15] = [
    ("1h", "1h_tokens", 3_600),
    ("2h", "2h_tokens", 7_200),
    ("3h", "3h_tokens", 10_800),
    ("4h", "4h_tokens", 14_400),
    ("5h", "5h_tokens", 18_000),
    ("6h", "6h_tokens", 21_600),
    ("8h", "8h_tokens", 28_800),
    ("12h", "12h_tokens", 43_200),
    ("24h", "24h_tokens", 86_400),
    ("2d", "2d_tokens", 172_800),
    ("3d", "3d_tokens", 259_200),
    ("7d", "7d_tokens", 604_800),
    ("14d", "14d_tokens", 1_209_600),
    ("28d", "28d_tokens", 2_419_200),
    ("30d", "30d_tokens", 2_592_000),
];

/// The period of a rolling window's row in the fleet view: one row per
/// scope id and width, as of the last sync.
pub const ROLLING_FLEET_PERIOD: &str = "rolling";

/// How many windows there are: the three calendar ones and every rolling
/// width.
pub const WINDOW_COUNT: usize = 3 + ROLLING.len();

/// A rolling window's width (one of [`Rolling::ALL`]): the last 5 hours,
/// the last 7 days, as subscription plans meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rolling(u8);

impl Rolling {
    /// Every width, narrowest first.
    pub const ALL: [Rolling; ROLLING.len()] = {
        let mut all = [Rolling(0); ROLLING.len()];
        let mut i = 0;
        while i < ROLLING.len() {
            all[i] = Rolling(i as u8);
            i += 1;
        }
        all
    };

    /// `5h`, `7d`.
    pub fn as_str(self) -> &'static str {
        ROLLING[self.0 as usize].0
    }

    /// The width in seconds.
    pub fn seconds(self) -> i64 {
        ROLLING[self.0 as usize].2
    }

    /// The widths as a list for messages: `1h, 2h, ..., 30d`.
    pub fn names() -> String {
        ROLLING.map(|r| r.0).join(", ")
    }
}

/// A budget window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Window {
    /// The calendar day in the budgets' zone.
    Daily,
    /// Monday to Monday in the budgets' zone.
    Weekly,
    /// The calendar month in the budgets' zone.
    Monthly,
    /// The last hours or days up to now, whatever the clock says.
    Rolling(Rolling),
}

impl Window {
    /// The calendar windows (kept as per-period totals in the store).
    pub const CALENDAR: [Window; 3] = [Window::Daily, Window::Weekly, Window::Monthly];

    /// Every window: the calendar ones, then every rolling width.
    pub fn every() -> impl Iterator<Item = Window> {
        Window::CALENDAR
            .into_iter()
            .chain(Rolling::ALL.into_iter().map(Window::Rolling))
    }

    /// The name in the file, the CLI and metrics: `daily`, `5h`.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Daily => "daily",
            Window::Weekly => "weekly",
            Window::Monthly => "monthly",
            Window::Rolling(r) => r.as_str(),
        }
    }

    /// Parses a window name.
    pub fn parse(text: &str) -> Option<Window> {
        Window::every().find(|w| w.as_str() == text)
    }

    /// Its place in [`Window::every`] (an index below [`WINDOW_COUNT`]).
    pub fn index(self) -> usize {
        match self {
            Window::Daily => 0,
            Window::Weekly => 1,
            Window::Monthly => 2,
            Window::Rolling(r) => 3 + r.0 as usize,
        }
    }

    /// The key of its token limit: `daily_tokens`, `5h_tokens`.
    pub(crate) fn tokens_key(self) -> &'static str {
        match self {
            Window::Daily => "daily_tokens",
            Window::Weekly => "weekly_tokens",
            Window::Monthly => "monthly_tokens",
            Window::Rolling(r) => ROLLING[r.0 as usize].1,
        }
    }

    /// Its width, for a rolling window.
    pub fn rolling(self) -> Option<Rolling> {
        match self {
            Window::Rolling(r) => Some(r),
            _ => None,
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a rolling window of `width` begins at `now` (Unix seconds): the
/// quarter hour holding `now - width` (see [`ROLLING_STEP`]).
pub fn rolling_start(width: Rolling, now: i64) -> i64 {
    (now - width.seconds()).div_euclid(ROLLING_STEP) * ROLLING_STEP
}

/// When what was spent in the quarter hour beginning `bucket` leaves a
/// rolling window of `width`: once the window starts after it.
pub fn rolling_frees_at(width: Rolling, bucket: i64) -> i64 {
    bucket + ROLLING_STEP + width.seconds()
}

/// The start and end of the window holding `now`, in `tz`. Days start at
/// local midnight (or the first instant after a DST gap), weeks on Monday,
/// months on the 1st. A rolling window starts at [`rolling_start`] and
/// ends when that start next moves (what it then frees is the store's to
/// say: it knows what was spent when).
pub fn window_bounds(window: Window, now: Timestamp, tz: &TimeZone) -> (Timestamp, Timestamp) {
    if let Window::Rolling(r) = window {
        let start = rolling_start(r, now.as_second());
        let at = |s: i64| Timestamp::from_second(s).unwrap_or(now);
        return (at(start), at(rolling_frees_at(r, start)));
    }
    let zoned = now.to_zoned(tz.clone());
    let date = zoned.date();
    let (start, next) = match window {
        Window::Daily => (date, date.tomorrow().ok()),
        Window::Weekly => {
            let back = i64::from(date.weekday().to_monday_zero_offset());
            let monday = date.checked_sub(back.days()).unwrap_or(date);
            (monday, monday.checked_add(7.days()).ok())
        }
        Window::Monthly | Window::Rolling(_) => {
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
/// A rolling window has no periods of its own: once-per-period notices
/// and alerts of one are once per width, in blocks of its width counted
/// from the Unix epoch, named by the block's start in UTC
/// (`5h@2026-12-07T15:00Z`).
pub fn period_name(window: Window, now: Timestamp, tz: &TimeZone) -> String {
    if let Window::Rolling(r) = window {
        let block = now.as_second().div_euclid(r.seconds()) * r.seconds();
        let start = Timestamp::from_second(block).unwrap_or(now);
        return format!("{}@{}", r.as_str(), start.strftime("%Y-%m-%dT%H:%MZ"));
    }
    let (start, _) = window_bounds(window, now, tz);
    start.to_zoned(tz.clone()).date().to_string()
}

/// A timestamp from Unix seconds (kept with the clock's other helpers).
pub use crate::time::timestamp;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
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
        for w in Window::every() {
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
            assert!(s <= now.as_second() && now.as_second() < e, "{w}");
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

    #[test]
    fn a_rolling_window_counts_the_last_width_in_quarter_hours() {
        let five = Rolling::ALL.into_iter().find(|r| r.as_str() == "5h").expect("5h");
        assert_eq!(Window::parse("5h"), Some(Window::Rolling(five)));
        assert_eq!(Window::parse("5h").map(Window::tokens_key), Some("5h_tokens"));
        assert_eq!(Window::parse("90m"), None);
        // 14:07 UTC: the last 5 h began at 09:07; the window counts 09:00 on.
        let now = ts("2026-12-07T14:07:00Z").as_second();
        let start = rolling_start(five, now);
        assert_eq!(start, ts("2026-12-07T09:00:00Z").as_second());
        assert!(now - start >= five.seconds() && now - start < five.seconds() + ROLLING_STEP);
        // What was spent at 09:05 leaves at 14:15, when the start moves on.
        assert_eq!(rolling_frees_at(five, start), ts("2026-12-07T14:15:00Z").as_second());
        assert!(rolling_start(five, rolling_frees_at(five, start)) > start);
        assert_eq!(rolling_start(five, rolling_frees_at(five, start) - 1), start);
        // Periods: blocks of 5 h from the epoch, whatever the zone.
        let paris = TimeZone::get("Europe/Paris").expect("zone");
        let at = ts("2026-12-07T14:07:00Z");
        assert_eq!(period_name(Window::Rolling(five), at, &paris), "5h@2026-12-07T14:00Z");
        let names: Vec<&str> = Window::every().map(Window::as_str).collect();
        assert_eq!(names.len(), WINDOW_COUNT);
        assert!(Window::every().enumerate().all(|(i, w)| w.index() == i));
        let mut sorted = names.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "names are unique");
    }
}
