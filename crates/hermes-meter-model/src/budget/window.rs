//! Calendar windows in the configured zone and the spend buckets that sum
//! them. Pure.
//!
//! Owns: [`Window`], window bounds and period names in a time zone, and
//! which rows of the store's spend buckets ([`BUCKET_SECONDS`]) add up to a
//! window ([`bucket_ranges`], [`open_ranges`]). Must not touch: the store
//! (which runs the sums), limits or verdicts.

use std::fmt;

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};

/// The widths of the spend buckets, in seconds, by level: UTC quarter
/// hours, hours and days. Every spend is added to one bucket of each level.
/// Quarter hours because every time zone in use today is offset from UTC by
/// a multiple of 15 minutes (India +5:30, Nepal +5:45, Chatham +12:45), so
/// every window start in every zone is a quarter-hour boundary in UTC.
pub const BUCKET_SECONDS: [i64; 3] = [900, 3600, 86_400];

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
}
